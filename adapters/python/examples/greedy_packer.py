"""A correct greedy packer: fill the open pack in order; an example that does not fit closes it
and opens the next one (the overflow is carried, never lost). Examples longer than the capacity
are dropped and reported as dropped."""

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
        current.append(i)
        load += n
    if current:
        packs.append(current)
    return packs, dropped


if __name__ == "__main__":
    serve_packer(pack)
