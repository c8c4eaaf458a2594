"""A greedy packer that refuses any request holding an example longer than the capacity, as
bionemo's `TokenPackingDataset` raises `ValueError` on one (answered as a refusal,
`{"rejected": ...}`). A refusal is accepted where the stack may lose over-long examples (the
default: over-length drops); where its profile says nothing is dropped (`--drops none`: an
over-long example must be packed alone, as `oversize`) the refusal is a loss:

    thdcheck fuzz packer -- python3 greedy_packer_refuses_oversize.py               # passes
    thdcheck fuzz packer --drops none -- python3 greedy_packer_refuses_oversize.py  # packer-conservation,
        shrunk to one example of 2 tokens at capacity 1"""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from greedy_packer import pack as greedy  # noqa: E402
from thdcheck_adapter import serve_packer  # noqa: E402


def pack(lengths, capacity, seed):
    if any(n > capacity for n in lengths):
        raise ValueError("an example is longer than the capacity")
    packs, over = greedy(lengths, capacity, seed)
    return packs, over


if __name__ == "__main__":
    serve_packer(pack, rejects=(ValueError,))
