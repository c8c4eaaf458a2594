"""A loader with `drop_last=True` over data-parallel ranks (open-instruct's `HFDataLoader`,
`_reshard_with_packing`): it packs greedily, deals the packs round-robin to the R ranks
(`thdcheck fuzz packer --dp-size R`) and cuts them to a multiple of R, losing the trailing ones
without reporting them. A stack that does this states `--drops dp-remainder` (the
`open_instruct` profile does): what it loses must fill fewer packs than there are ranks.
    python3 truncating_loader.py           # cuts to a multiple of R: passes under dp-remainder
    python3 truncating_loader.py overcut   # cuts one round more (R packs or more lost):
                                           # packer-conservation even under dp-remainder
"""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from greedy_packer import pack as greedy  # noqa: E402
from thdcheck_adapter import serve_packer  # noqa: E402

MODE = sys.argv[1] if len(sys.argv) > 1 else "cut"


def pack(lengths, capacity, seed, dp_size=None):
    ranks = dp_size or 1
    packs, dropped = greedy(lengths, capacity, seed)
    keep = len(packs) // ranks * ranks
    if MODE == "overcut":
        keep = max(0, keep - ranks)  # BUG: a full round of packs lost besides the remainder
    packs = packs[:keep]
    out = {"packs": packs, "dropped": dropped}
    if dp_size:
        out["ranks"] = [k % dp_size for k in range(len(packs))]
    return out


if __name__ == "__main__":
    serve_packer(pack)
