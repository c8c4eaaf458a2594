"""A greedy packer that keeps over-long examples, each alone in a pack of its own, as
open-instruct's GRPO `pack_sequences` does, and says so (the protocol's `oversize`):

    python3 oversize_packer.py              # declares them: every invariant holds
    python3 oversize_packer.py undeclared   # the same packs, undeclared: packer-capacity

Without the declaration, an over-long pack is indistinguishable from a capacity bug."""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from greedy_packer import pack as greedy  # noqa: E402
from thdcheck_adapter import serve_packer  # noqa: E402

DECLARE = sys.argv[1:] != ["undeclared"]


def pack(lengths, capacity, seed):
    # The greedy packer's packs; what it drops as over-long goes alone into a pack instead.
    packs, over = greedy(lengths, capacity, seed)
    packs += [[i] for i in over]
    return (packs, [], over) if DECLARE else (packs, [])


if __name__ == "__main__":
    serve_packer(pack)
