"""A packer that fills every pack to the capacity exactly, splitting an example across packs
where it crosses the boundary (bionemo's `TokenPackingDataset(split_samples=True)`); a piece is
`(index, start, end)`:

    python3 split_packer.py            # correct: the pieces of every example tile it
    python3 split_packer.py overlap    # the carried piece starts one token early and ends one
                                       # token early: the right token count, an overlap and a
                                       # lost last token (caught by packer-conservation)
    python3 split_packer.py short-tail # a last pack of one token is not emitted ("it holds no
                                       # next-token pair"), silently: lost only where Σ s is
                                       # one past a multiple of the capacity
"""

import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from thdcheck_adapter import serve_packer  # noqa: E402

OVERLAP = sys.argv[1:] == ["overlap"]
SHORT_TAIL = sys.argv[1:] == ["short-tail"]


def pack(lengths, capacity, seed):
    packs, current, load = [], [], 0
    for i, n in enumerate(lengths):
        start = 0
        while start < n:
            take = min(capacity - load, n - start)
            end = start + take
            if OVERLAP and start > 0:
                piece = (i, start - 1, end - 1)  # BUG: one token early, same length
            else:
                piece = i if (start, end) == (0, n) else (i, start, end)
            current.append(piece)
            load += take
            start = end
            if load == capacity:
                packs.append(current)
                current, load = [], 0
    if current and not (SHORT_TAIL and load == 1):  # BUG (short-tail): a 1-token tail is lost
        packs.append(current)
    return packs, []


if __name__ == "__main__":
    serve_packer(pack)
