"""A greedy packer that shuffles the examples with Python's global `random` and never seeds it
itself (it ignores the `seed` argument), as many training scripts do. The helper seeds the
global `random` (and numpy's and torch's, when they are already imported) from the request's
`seed` before every call, so the shuffle replays: `thdcheck fuzz packer` passes
(packer-deterministic holds). A packer with an unseeded `random.Random()` of its own would
still fail it."""

import os
import random
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from greedy_packer import pack as greedy  # noqa: E402
from thdcheck_adapter import serve_packer  # noqa: E402


def pack(lengths, capacity, seed):
    order = list(range(len(lengths)))
    random.shuffle(order)  # the global RNG, seeded by the helper
    packs, dropped = greedy([lengths[i] for i in order], capacity, seed)
    return [[order[j] for j in p] for p in packs], [order[j] for j in dropped]


if __name__ == "__main__":
    serve_packer(pack)
