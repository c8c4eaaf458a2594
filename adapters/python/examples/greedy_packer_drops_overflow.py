"""A buggy greedy packer: when an example does not fit, it closes the pack and moves on,
forgetting the example that overflowed (the truncation-era bug behind open-instruct's
"Missing N indices" in the reference cache). `thdcheck fuzz packer` finds and shrinks it."""

import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from thdcheck_adapter import serve_packer  # noqa: E402


def pack(lengths, capacity, seed):
    packs, dropped, current, load = [], [], [], 0
    for i, n in enumerate(lengths):
        if n > capacity:
            dropped.append(i)
            continue
        if load + n > capacity:
            packs.append(current)
            current, load = [], 0
            continue  # BUG: example i is neither packed nor reported as dropped
        current.append(i)
        load += n
    if current:
        packs.append(current)
    return packs, dropped


if __name__ == "__main__":
    serve_packer(pack)
