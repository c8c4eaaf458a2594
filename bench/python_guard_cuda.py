"""thdcheck.guard on batches held on a GPU (issue 27): what checking a packed batch costs when
the training loop has already moved it to CUDA, beside what a user would otherwise write (the
same invariants asserted with torch ops on the GPU) and beside the host-to-device copy every
loop makes anyway. Needs torch with CUDA and the thdcheck package; no transformers (the batch
is built as DataCollatorWithFlattening(return_flash_attn_kwargs=True) builds it):

    python bench/python_guard_cuda.py [N ...]          # default 1e4 1e5 1e6 1e7 tokens

Documents are 1..4096 tokens (seeded), as in bench/python_guard.py. Columns, each the median
of 7 runs (3 at 1e7) after a warm-up, the GPU synchronized around every timed call:
- `h2d ms`: `{k: v.to("cuda")}` of the collated CPU batch (the copy a loop makes anyway);
- `guard ms`: a `thdcheck.guard` around a collate function that returns the CUDA batch: its
  integer tensors copied to the CPU (pinned, non-blocking), then every rule (`d2h ms`: a plain
  `.cpu()` of those tensors, what the guard did first);
- `torch ms`: hand-written torch asserts on the GPU of five of the invariants thdcheck checks
  (offsets start at 0, increase and end at the token count; positions restart at each offset;
  labels ignore each document's first token; max_length_q is the longest document), one
  `.item()` sync per assert;
- `guard+hidden ms`: the same with a [1, N, 4096] bf16 activation in the batch too (up to 1e6
  tokens: 8 GiB); the guard skips it (no rule reads a float tensor wider than the widest
  integer one), so the figure should not grow with it.
"""

from __future__ import annotations

import os
import random
import statistics
import sys
import time

import torch

import thdcheck

# THDCHECK_BENCH_DEVICE=cpu runs the same code without a GPU (to try the script, not to time).
DEVICE = os.environ.get("THDCHECK_BENCH_DEVICE", "cuda")


def sync() -> None:
    if DEVICE == "cuda":
        torch.cuda.synchronize()


def collated(tokens: int) -> dict:
    rng = random.Random(0)
    lens = []
    while sum(lens) < tokens:
        lens.append(min(rng.randint(1, 4096), tokens - sum(lens)))
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(3, 50_000, (1, tokens), generator=g)
    cu = torch.zeros(len(lens) + 1, dtype=torch.int32)
    cu[1:] = torch.cumsum(torch.tensor(lens), 0)
    starts = cu[:-1].long()
    pos = torch.arange(tokens) - torch.repeat_interleave(starts, torch.tensor(lens))
    labels = ids.clone()
    labels[0, starts] = -100
    return {
        "input_ids": ids,
        "labels": labels,
        "position_ids": pos[None],
        "cu_seq_lens_q": cu,
        "cu_seq_lens_k": cu.clone(),
        "max_length_q": max(lens),
        "max_length_k": max(lens),
    }


def torch_asserts(b: dict) -> None:
    cu = b["cu_seq_lens_q"].long()
    n = b["input_ids"].shape[1]
    assert cu[0].item() == 0
    assert bool((cu[1:] > cu[:-1]).all().item())
    assert cu[-1].item() == n
    starts = cu[:-1]
    pos = b["position_ids"][0]
    assert bool((pos[starts] == 0).all().item())
    step = pos[1:] - pos[:-1]
    restart = torch.zeros(n, dtype=torch.bool, device=pos.device)
    restart[starts] = True
    assert bool(((step == 1) | restart[1:]).all().item())
    assert bool((b["labels"][0, starts] == -100).all().item())
    assert (cu[1:] - cu[:-1]).max().item() == b["max_length_q"]


def timed(fn, runs: int) -> float:
    fn()
    sync()
    out = []
    for _ in range(runs):
        sync()
        t = time.perf_counter()
        fn()
        sync()
        out.append(time.perf_counter() - t)
    return statistics.median(out)


def main() -> None:
    sizes = [int(float(a)) for a in sys.argv[1:]] or [10**4, 10**5, 10**6, 10**7]
    name = torch.cuda.get_device_name(0) if DEVICE == "cuda" else "cpu"
    print(f"torch {torch.__version__}, {name}, thdcheck {thdcheck.__version__}")
    guarded = thdcheck.guard(lambda batch: batch, profile="transformers")
    print(f"{'tokens':>10} {'h2d ms':>8} {'guard ms':>9} {'d2h ms':>8} {'torch ms':>9} {'guard+hidden ms':>16}")
    for n in sizes:
        runs = 3 if n >= 10**7 else 7
        cpu = collated(n)
        gpu = {k: v.to(DEVICE) if isinstance(v, torch.Tensor) else v for k, v in cpu.items()}
        assert thdcheck.check(gpu, profile="transformers").ok
        torch_asserts(gpu)
        ints = [v for v in gpu.values() if isinstance(v, torch.Tensor)]
        h2d = timed(lambda: [v.to(DEVICE) for v in cpu.values() if isinstance(v, torch.Tensor)], runs)
        guard = timed(lambda: guarded(gpu), runs)
        d2h = timed(lambda: [v.cpu() for v in ints], runs)
        asserts = timed(lambda: torch_asserts(gpu), runs)
        hidden = None
        if n <= 10**6:  # 8 GiB of bf16 at 1e6 tokens x 4096; 80 GiB at 1e7 would not fit
            with_hidden = dict(gpu, hidden_states=torch.zeros(1, n, 4096, dtype=torch.bfloat16, device=DEVICE))
            hidden = timed(lambda: guarded(with_hidden), runs)
            del with_hidden
        print(
            f"{n:>10,} {h2d * 1e3:>8.2f} {guard * 1e3:>9.2f} {d2h * 1e3:>8.2f} {asserts * 1e3:>9.2f} "
            + (f"{hidden * 1e3:>16.2f}" if hidden is not None else f"{'-':>16}")
        )
        del gpu, ints
        if DEVICE == "cuda":
            torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
