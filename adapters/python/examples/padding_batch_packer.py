"""A loader that deals packs to data-parallel ranks (4 unless the request sets `dp_size`,
`thdcheck fuzz packer --dp-size R`) and, so that every rank gets the same number of batches,
repeats the first pack as padding (open-instruct's loader with `drop_last=False`), marking the
repeats (the protocol's `padding`) and, with `dp_size`, saying which rank gets each pack
(`ranks`, round-robin):
    python3 padding_batch_packer.py            # marked: every invariant holds
    python3 padding_batch_packer.py unmarked   # the same packs unmarked: packer-conservation
    python3 padding_batch_packer.py uneven     # no padding packs: with --dp-size, packer-dealing
"""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from greedy_packer import pack as greedy  # noqa: E402
from thdcheck_adapter import serve_packer  # noqa: E402

MODE = sys.argv[1] if len(sys.argv) > 1 else "marked"


def pack(lengths, capacity, seed, dp_size=None):
    ranks = dp_size or 4
    packs, dropped = greedy(lengths, capacity, seed)
    padding = []
    while packs and len(packs) % ranks and MODE != "uneven":
        padding.append(len(packs))
        packs.append(list(packs[0]))
    out = {"packs": packs, "dropped": dropped, "padding": padding if MODE != "unmarked" else []}
    if dp_size:
        out["ranks"] = [k % dp_size for k in range(len(packs))]
    return out


if __name__ == "__main__":
    serve_packer(pack)
