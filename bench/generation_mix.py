"""Edge-biased generation against the uniform one (issue 28): for every planted packer bug of the
example adapters, how many passing cases `thdcheck fuzz packer` runs before the first failure
with `--generation uniform`, `edge` and `mixed` (the default), over seeds 0..N-1, at the default
256 cases. A bug the uniform generator finds and the mixed one misses would be a loss: the
script prints `LOST` on such a row. Cases are counted, not timed, so the machine's load does not
matter.

    python bench/generation_mix.py [SEEDS]        # default 10; THDCHECK=path/to/thdcheck
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
BIN = os.environ.get("THDCHECK", str(REPO / "target/release/thdcheck"))
SEEDS = int(sys.argv[1]) if len(sys.argv) > 1 else 10
BUGS = [
    ("greedy_packer_drops_overflow", [], []),
    ("padding_batch_packer", ["unmarked"], ["--dp-size", "4"]),
    ("padding_batch_packer", ["uneven"], ["--dp-size", "3"]),
    ("budget_packer", ["real-lengths"], ["--pad-sequences-to-multiple-of", "4"]),
    ("budget_packer", ["no-seq-limit"], ["--max-seqs-per-pack", "2"]),
    ("budget_packer", ["chosen-only"], ["--pairs"]),
    ("split_packer", ["overlap"], []),
    ("split_packer", ["short-tail"], []),
    ("balanced_packer", ["unchecked"], []),
    ("oversize_packer", ["undeclared"], []),
]


def cases_to_failure(name, args, flags, generation, seed):
    cmd = [BIN, "fuzz", "packer", "--json", "--first-failure", "--max-shrink-runs", "0",
           "--generation", generation, "--seed", str(seed), *flags, "--",
           sys.executable, str(REPO / "adapters/python/examples" / f"{name}.py"), *args]
    out = json.loads(subprocess.run(cmd, capture_output=True, text=True).stdout)
    return out["cases"] if out["result"] == "fail" else None


def main():
    gens = ["uniform", "edge", "mixed"]
    print(f"passing cases before the first failure, median over {SEEDS} seeds (missed: of {SEEDS} "
          "seeds, how many found nothing in 256 cases)\n")
    print("| bug | " + " | ".join(gens) + " |")
    print("|---|" + "---|" * len(gens))
    for name, args, flags in BUGS:
        cells, found = [], {}
        for g in gens:
            runs = [cases_to_failure(name, args, flags, g, s) for s in range(SEEDS)]
            hits = [r for r in runs if r is not None]
            found[g] = len(hits)
            med = statistics.median(hits) if hits else float("nan")
            cells.append(f"{med:g} (missed {SEEDS - len(hits)})")
        lost = " LOST" if found["mixed"] < found["uniform"] else ""
        print(f"| {name} {' '.join(args + flags)}{lost} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
