"""A greedy packer that keeps over-long examples, each alone in a pack of its own, as
open-instruct's GRPO `pack_sequences` does, and says so (the protocol's `oversize`):

    python3 oversize_packer.py              # declares them: every invariant holds
    python3 oversize_packer.py undeclared   # the same packs, undeclared: packer-capacity

Without the declaration, an over-long pack is indistinguishable from a capacity bug."""

import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from thdcheck_adapter import serve_packer  # noqa: E402

DECLARE = sys.argv[1:] != ["undeclared"]


def pack(lengths, capacity, seed):
    packs, oversize, current, load = [], [], [], 0
    for i, n in enumerate(lengths):
        if n > capacity:
            packs.append([i])  # alone, on purpose
            oversize.append(i)
            continue
        if load + n > capacity:
            packs.append(current)
            current, load = [], 0
        current.append(i)
        load += n
    if current:
        packs.append(current)
    return (packs, [], oversize) if DECLARE else (packs, [])


if __name__ == "__main__":
    serve_packer(pack)
