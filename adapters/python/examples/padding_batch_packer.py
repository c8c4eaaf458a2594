"""A loader that deals packs to 4 data-parallel ranks and, so that every rank gets the same
number of batches, repeats the first pack as padding (open-instruct's loader with
`drop_last=False`), marking the repeats (the protocol's `padding`):

    python3 padding_batch_packer.py            # marked: every invariant holds
    python3 padding_batch_packer.py unmarked   # the same packs unmarked: packer-conservation
"""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from greedy_packer import pack as greedy  # noqa: E402
from thdcheck_adapter import serve_packer  # noqa: E402

RANKS = 4
MARKED = sys.argv[1:] != ["unmarked"]


def pack(lengths, capacity, seed):
    packs, dropped = greedy(lengths, capacity, seed)
    padding = []
    while packs and len(packs) % RANKS:
        padding.append(len(packs))
        packs.append(list(packs[0]))
    return {"packs": packs, "dropped": dropped, "padding": padding if MARKED else []}


if __name__ == "__main__":
    serve_packer(pack)
