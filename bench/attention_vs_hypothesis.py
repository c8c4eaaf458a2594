"""Cases per second of `thdcheck fuzz attention` beside a Hypothesis property test of the SAME
function (issue 41): PyTorch SDPA with a block-diagonal boolean mask, the correct
`sdpa-block-diagonal` mode of adapters/python/real/torch_attention.py, in float32 on the CPU.

  (a) thdcheck: `thdcheck fuzz attention --cases N -- PY torch_attention.py sdpa-block-diagonal`:
      the adapter in its own process, requests over the protocol, every answer judged by the
      registry's attention rules against the oracle's f64 attention per document (output within
      the FlashAttention bound, isolation, causality, padding rows). Wall clock of the command.
  (b) thdcheck in process: `thdcheck.fuzz_attention(torch_attention.sdpa, cases=N)`, the same
      rules, the function called in this interpreter (the Python package importable: a wheel,
      or PYTHONPATH=python/pysrc beside a built `_native`). Wall clock of the call.
  (c) Hypothesis: one `@given` test as a Python team would write it: documents of 1-8 tokens
      with 0-3 padding each in their slot, 1-2 KV heads (GQA x1 or x2), head dim 4 or 8, causal
      or not, q/k/v from a seeded generator; the body calls the same `sdpa(batch)` in process
      and compares every real token with `scaled_dot_product_attention` of its document alone
      in float64 (`torch.allclose(rtol=1e-4, atol=1e-5)`), padding rows zero. No isolation or
      causality perturbation: only the output is compared. `max_examples=N`, `derandomize`, no
      deadline, no database, health checks off. Wall clock of the test call.

Usage: PY bench/attention_vs_hypothesis.py [N=256] [THDCHECK=target/release/thdcheck]
(PY with torch, hypothesis and the thdcheck package; run alone on a quiet machine: a benchmark,
never a test).
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
N = int(sys.argv[1]) if len(sys.argv) > 1 else 256
EXE = sys.argv[2] if len(sys.argv) > 2 else str(REPO / "target/release/thdcheck")
ADAPTER = REPO / "adapters/python/real/torch_attention.py"


def thdcheck_side() -> float:
    cmd = [EXE, "fuzz", "attention", "--cases", str(N), "--quiet", "--",
           sys.executable, str(ADAPTER), "sdpa-block-diagonal"]
    start = time.perf_counter()
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=3600)
    took = time.perf_counter() - start
    if done.returncode != 0:
        sys.exit(f"thdcheck fuzz attention: exit {done.returncode}\n{done.stdout}{done.stderr}")
    return took


def the_function():
    sys.argv = [str(ADAPTER), "sdpa-block-diagonal"]  # the adapter reads its mode at import
    sys.path.insert(0, str(ADAPTER.parent))
    import torch_attention  # noqa: E402

    return torch_attention


def in_process_side() -> float:
    import thdcheck

    sdpa = the_function().sdpa
    start = time.perf_counter()
    result = thdcheck.fuzz_attention(sdpa, cases=N)
    took = time.perf_counter() - start
    assert result.cases == N, result
    return took


def hypothesis_side() -> float:
    import torch
    from hypothesis import HealthCheck, given, settings
    from hypothesis import strategies as st

    torch_attention = the_function()

    case = st.fixed_dictionaries({
        "docs": st.lists(st.tuples(st.integers(1, 8), st.integers(0, 3)), min_size=1, max_size=4),
        "kv_heads": st.integers(1, 2),
        "group": st.integers(1, 2),
        "head_dim": st.sampled_from([4, 8]),
        "causal": st.booleans(),
        "seed": st.integers(0, 2**31 - 1),
    })

    @settings(max_examples=N, derandomize=True, deadline=None, database=None,
              suppress_health_check=list(HealthCheck))
    @given(case)
    def test_sdpa_block_diagonal_matches_each_document_alone(c):
        heads, kv, d = c["kv_heads"] * c["group"], c["kv_heads"], c["head_dim"]
        cu, padded = [0], [0]
        for s, pad in c["docs"]:
            cu.append(cu[-1] + s)
            padded.append(padded[-1] + s + pad)
        total = padded[-1]
        g = torch.Generator().manual_seed(c["seed"])
        q64 = torch.randn(total, heads, d, generator=g, dtype=torch.float64)
        k64 = torch.randn(total, kv, d, generator=g, dtype=torch.float64)
        v64 = torch.randn(total, kv, d, generator=g, dtype=torch.float64)
        batch = {
            "dtype": "f32", "heads": heads, "kv_heads": kv, "head_dim": d, "causal": c["causal"],
            "cu_seqlens": cu, "cu_seqlens_padded": padded,
            "q": q64.flatten().tolist(), "k": k64.flatten().tolist(), "v": v64.flatten().tolist(),
        }
        out = torch_attention.sdpa(batch).double()
        for i, (s, _) in enumerate(c["docs"]):
            r = slice(padded[i], padded[i] + s)
            ref = torch.nn.functional.scaled_dot_product_attention(
                *(x[r].transpose(0, 1).unsqueeze(0) for x in (q64, k64, v64)),
                is_causal=c["causal"], enable_gqa=heads != kv,
            )[0].transpose(0, 1)
            assert torch.allclose(out[r], ref, rtol=1e-4, atol=1e-5), (i, (out[r] - ref).abs().max())
            assert torch.all(out[padded[i] + s:padded[i + 1]] == 0)

    start = time.perf_counter()
    test_sdpa_block_diagonal_matches_each_document_alone()
    return time.perf_counter() - start


def main() -> None:
    import torch
    import hypothesis

    ours = thdcheck_side()
    inside = in_process_side()
    theirs = hypothesis_side()
    print(f"cases: {N}; torch {torch.__version__}, hypothesis {hypothesis.__version__}, "
          f"{os.cpu_count()} CPUs, torch threads {torch.get_num_threads()}")
    print("| side | what is judged | time | cases/s |")
    print("|---|---|---|---|")
    print(f"| thdcheck fuzz attention | output vs the f64 oracle within the FA bound, isolation, "
          f"causality, padding | {ours:.2f} s | {N / ours:.1f} |")
    print(f"| thdcheck.fuzz_attention, in process | the same rules | {inside:.2f} s | "
          f"{N / inside:.1f} |")
    print(f"| Hypothesis @given, in process | output vs per-document f64 SDPA (allclose) | "
          f"{theirs:.2f} s | {N / theirs:.1f} |")


if __name__ == "__main__":
    main()
