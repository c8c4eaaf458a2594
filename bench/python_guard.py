"""thdcheck.guard's cost per batch beside the collate function it wraps (issue 27): transformers'
`DataCollatorWithFlattening(return_tensors="pt", return_flash_attn_kwargs=True)` building one
packed row of N tokens from tokenized examples, plain and guarded, at N = 1e4 .. 1e7. The guard's
overhead is (guarded - plain); the target is <= 1 % of the collate time at 1e6 tokens. Run on a
quiet machine, in a venv with the package, torch and transformers:

    pip install ./python torch transformers
    python bench/python_guard.py [N ...]            # default 1e4 1e5 1e6 1e7

Examples are 1..4096 tokens (seeded), as bench/python_check.py's batch. Each figure is the
median of 7 runs (3 at 1e7). `check` alone is timed on the collator's output too: the guard's
cost is that call plus its bookkeeping.
"""

from __future__ import annotations

import random
import statistics
import sys
import time

import torch
from transformers import DataCollatorWithFlattening

import thdcheck


def examples(tokens: int) -> list:
    rng = random.Random(0)
    out, n = [], 0
    while n < tokens:
        k = min(rng.randint(1, 4096), tokens - n)
        ids = [rng.randrange(3, 50_000) for _ in range(k)]
        out.append({"input_ids": ids, "labels": ids})
        n += k
    return out


def median_s(fn, runs: int) -> float:
    times = []
    for _ in range(runs):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def main() -> None:
    sizes = [int(float(a)) for a in sys.argv[1:]] or [10**4, 10**5, 10**6, 10**7]
    collate = DataCollatorWithFlattening(return_tensors="pt", return_flash_attn_kwargs=True)
    guarded = thdcheck.guard(collate, profile="transformers")
    print(f"torch {torch.__version__}, thdcheck {thdcheck.__version__}")
    print(f"{'tokens':>10} {'collate ms':>11} {'guarded ms':>11} {'check ms':>9} {'overhead':>9}")
    for n in sizes:
        ex = examples(n)
        runs = 3 if n >= 10**7 else 7
        batch = collate(ex)
        assert thdcheck.check(batch, profile="transformers").ok
        plain = median_s(lambda: collate(ex), runs)
        wrapped = median_s(lambda: guarded(ex), runs)
        check = median_s(lambda: thdcheck.check(batch, profile="transformers"), runs)
        print(
            f"{n:>10,} {plain * 1e3:>11.2f} {wrapped * 1e3:>11.2f} {check * 1e3:>9.3f} "
            f"{check / plain:>8.2%}"
        )
    print("overhead: thdcheck.check on the collated batch / the collate call (the guard's cost)")


if __name__ == "__main__":
    main()
