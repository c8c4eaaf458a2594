"""A greedy packer with the budgets real packers have, each taken from the request's options:
sequences padded to a multiple (`pad_to_multiple_of`, bionemo's
`pad_sequences_to_be_divisible_by`: a sequence takes its padded length of the capacity), a
maximum number of sequences per pack (`max_seqs_per_pack`, open-instruct's per-rank batch size),
DPO pairs whose chosen and rejected rows each get the capacity (`--pairs`). An example that
cannot fit is dropped and reported, or with `refuse` the request is refused (ValueError, as
bionemo's TokenPackingDataset raises). Each argument plants one bug:
    python3 budget_packer.py [refuse]   # correct
    python3 budget_packer.py real-lengths    # counts real, not padded, tokens: packer-capacity
    python3 budget_packer.py no-seq-limit    # ignores max_seqs_per_pack: packer-capacity
    python3 budget_packer.py chosen-only     # budgets the chosen row only: packer-capacity
    python3 budget_packer.py refuse-all      # refuses every request: packer-conservation
"""

import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from thdcheck_adapter import serve_packer  # noqa: E402

ARGS = set(sys.argv[1:])


def pack(lengths, capacity, seed, pad_to_multiple_of=1, max_seqs_per_pack=None):
    m = 1 if "real-lengths" in ARGS else pad_to_multiple_of
    limit = None if "no-seq-limit" in ARGS else max_seqs_per_pack

    def size(n):  # padded tokens per row
        rows = list(n) if isinstance(n, (list, tuple)) else [n]
        if "chosen-only" in ARGS:
            rows = rows[:1]
        return [-(-x // m) * m for x in rows]

    if "refuse-all" in ARGS:
        raise ValueError("refusing everything")
    packs, dropped, current, load = [], [], [], None
    for i, n in enumerate(lengths):
        s = size(n)
        if max(s) > capacity:
            if "refuse" in ARGS:
                raise ValueError(f"example {i} takes {max(s)} tokens > {capacity}")
            dropped.append(i)
            continue
        full = limit is not None and len(current) >= limit
        if current and (full or any(a + b > capacity for a, b in zip(load, s))):
            packs.append(current)
            current, load = [], None
        current.append(i)
        load = s if load is None else [a + b for a, b in zip(load, s)]
    if current:
        packs.append(current)
    return packs, dropped


if __name__ == "__main__":
    serve_packer(pack, rejects=(ValueError,))
