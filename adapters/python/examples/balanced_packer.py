"""A balanced partitioner, as sequence-length balancing in RL trainers does it: the examples
that fit are split into ⌈Σ s / C⌉ partitions, longest first, each to the least-loaded
partition (LPT), so that the partitions carry about the same number of tokens:
    python3 balanced_packer.py            # correct: when a partition would overflow, one more
                                          # partition is opened and the split redone
    python3 balanced_packer.py unchecked  # never checks the capacity: packer-capacity, but only
                                          # where Σ s sits at (or just below) k·C and the lengths
                                          # are chunky, rare among uniform lengths
Asked for at least `min_packs` partitions (`thdcheck fuzz packer --min-packs`), the correct one
splits into max(⌈Σ s / C⌉, min(min_packs, examples)); two planted bugs of that request:
    python3 balanced_packer.py pad-empty    # first fit, then empty partitions up to min_packs
                                            # (packer-capacity: a pack is empty)
    python3 balanced_packer.py ignores-min  # first fit, min_packs ignored (packer-min-packs)
Examples longer than the capacity are dropped and reported as dropped. The planted bugs are
the ones `thdcheck fuzz packer`'s edge-biased generation (sums at k·capacity ± 1, one more
partition than first fit needs) exists to find."""

import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from thdcheck_adapter import serve_packer  # noqa: E402

MODE = sys.argv[1] if len(sys.argv) > 1 else "correct"


def lpt(items, parts):
    """Longest first, each to the least-loaded partition (ties: the one holding fewer
    examples, then the lowest index: examples of 0 tokens, `--empty-examples`, would otherwise
    all go to partition 0 and leave the others empty, fewer partitions than asked)."""
    packs, loads = [[] for _ in range(parts)], [0] * parts
    for i, n in sorted(items, key=lambda x: (-x[1], x[0])):
        k = min(range(parts), key=lambda j: (loads[j], len(packs[j]), j))
        packs[k].append(i)
        loads[k] += n
    return packs, loads


def first_fit(items, capacity):
    packs, loads = [], []
    for i, n in items:
        k = next((j for j, load in enumerate(loads) if load + n <= capacity), None)
        if k is None:
            packs.append([]), loads.append(0)
            k = len(packs) - 1
        packs[k].append(i)
        loads[k] += n
    return packs


def pack(lengths, capacity, seed, min_packs=None):
    dropped = [i for i, n in enumerate(lengths) if n > capacity]
    items = [(i, n) for i, n in enumerate(lengths) if n <= capacity]
    if MODE in ("pad-empty", "ignores-min"):
        packs = first_fit(items, capacity)
        if MODE == "pad-empty":
            packs += [[] for _ in range(max(0, (min_packs or 0) - len(packs)))]  # BUG
        return packs, dropped
    if not items:
        return [], dropped
    parts = max(-(-sum(n for _, n in items) // capacity), min(min_packs or 1, len(items)))
    packs, loads = lpt(items, parts)
    while MODE != "unchecked" and max(loads) > capacity:
        parts += 1
        packs, loads = lpt(items, parts)
    return [p for p in packs if p], dropped


if __name__ == "__main__":
    serve_packer(pack)
