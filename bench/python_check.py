"""thdcheck.check on a batch held as torch tensors, side by side with what a Python team would
otherwise do (issue 14): dump it with safetensors and run the command, or write a
torch-vectorised check of the same layout rules by hand. Run on a quiet machine:

    pip install ./python torch safetensors        # into one venv
    python bench/python_check.py [TOKENS]         # default 1e6 tokens; THDCHECK=path/to/thdcheck

The batch is transformers' DataCollatorWithFlattening(return_flash_attn_kwargs=True) output:
one row, documents of 1..4096 tokens (seeded), int64 ids / labels / positions, int32 offsets.
Each figure is the median of 7 runs (3 for the dump-and-run path).
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import tempfile
import time

import torch
from safetensors.torch import save_file

import thdcheck

TOKENS = int(float(sys.argv[1])) if len(sys.argv) > 1 else 1_000_000
BIN = os.environ.get("THDCHECK", "target/release/thdcheck")


def batch(tokens: int) -> dict:
    g = torch.Generator().manual_seed(0)
    lens = []
    while sum(lens) < tokens:
        lens.append(min(int(torch.randint(1, 4097, (1,), generator=g)), tokens - sum(lens)))
    lens_t = torch.tensor(lens)
    cu = torch.cat([torch.zeros(1, dtype=torch.long), lens_t.cumsum(0)])
    starts = cu[:-1]
    ids = torch.randint(3, 50_000, (tokens,), generator=g)
    labels = ids.clone()
    labels[starts] = -100
    pos = torch.arange(tokens) - starts.repeat_interleave(lens_t)
    return {
        "input_ids": ids[None],
        "labels": labels[None],
        "position_ids": pos[None],
        "cu_seq_lens_q": cu.to(torch.int32),
        "cu_seq_lens_k": cu.to(torch.int32),
        "max_length_q": int(lens_t.max()),
        "max_length_k": int(lens_t.max()),
    }


def torch_check(b: dict) -> list:
    """The layout rules a team would write in torch: offsets, position restarts, no label across
    a boundary, labels are their tokens, max_length."""
    bad = []
    cu = b["cu_seq_lens_q"].long()
    ids, labels, pos = b["input_ids"][0], b["labels"][0], b["position_ids"][0]
    t = ids.numel()
    if cu[0] != 0 or cu[-1] != t or bool((cu[1:] < cu[:-1]).any()):
        return ["offsets"]
    lens = cu[1:] - cu[:-1]
    starts = cu[:-1]
    want = torch.arange(t) - starts.repeat_interleave(lens)
    if not torch.equal(pos, want):
        bad.append("position-ids")
    real_starts = starts[lens > 0]
    if bool((labels[real_starts[1:]] != -100).any()):
        bad.append("cross-doc-label")
    valid = labels != -100
    if not torch.equal(labels[valid], ids[valid]):
        bad.append("label-targets")
    if b["max_length_q"] < int(lens.max()):
        bad.append("max-seqlen")
    return bad


def median(f, n=7):
    times = []
    for _ in range(n):
        t0 = time.perf_counter()
        out = f()
        times.append(time.perf_counter() - t0)
    return statistics.median(times), out


def main() -> None:
    torch.set_num_threads(2)
    b = batch(TOKENS)
    t_in, report = median(lambda: thdcheck.check(b, causal=True))
    assert report.ok, str(report)
    tmp = tempfile.mkdtemp()
    path = os.path.join(tmp, "batch.safetensors")

    def dump_and_run():
        save_file({k: v.contiguous() for k, v in b.items() if torch.is_tensor(v)}, path,
                  metadata={"causal": "true"})
        return subprocess.run([BIN, "check", "--quiet", path], capture_output=True).returncode

    t_dump, rc = median(dump_and_run, 3)
    assert rc == 0, rc
    t_torch, bad = median(lambda: torch_check(b))
    assert bad == [], bad
    mt = TOKENS / 1e6
    print(f"{TOKENS:.0e} tokens, torch {torch.__version__}, 2 threads")
    print(f"  thdcheck.check (in-process, tensors read in place)  {t_in * 1e3:8.1f} ms  {mt / t_in:6.1f} M tokens/s")
    print(f"  save_file + `thdcheck check` (dump, subprocess)     {t_dump * 1e3:8.1f} ms  {mt / t_dump:6.1f} M tokens/s")
    print(f"  hand-written torch-vectorised check (5 rules)       {t_torch * 1e3:8.1f} ms  {mt / t_torch:6.1f} M tokens/s")
    print(f"  thdcheck.check runs {len(report.outcomes)} rules; it is {t_dump / t_in:.1f}x faster than dumping, "
          f"{t_torch / t_in:.2f}x the torch check's speed")


if __name__ == "__main__":
    main()
