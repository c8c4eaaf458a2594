"""A correct per-sequence CP splitter (Megatron-LM's `get_batch_on_this_cp_rank` with
`use_per_sequence_balancing=True`, its pretraining path with inter-document masking): labels are
rolled within each document first, then the whole pack, whatever its documents, is cut into
2*cp equal chunks and rank r takes chunks r and 2*cp-1-r; every rank keeps the global offsets.
A pack that is not a multiple of 2*cp is refused. Fuzz it with `--cp-layout zigzag-sequence`
(or `--profile megatron_lm`). Stdlib only."""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from thdcheck_adapter import serve_cp_split  # noqa: E402

import cp_split  # noqa: E402


def whole_pack(cu_seqlens_padded, cp, rank):
    """The storage indices rank `rank` holds: one list, chunks rank and 2*cp-1-rank of the pack."""
    total = cu_seqlens_padded[-1]
    if cp == 1:
        return [list(range(total))]
    if total % (2 * cp):
        raise ValueError("the pack of %d tokens is not divisible by 2*cp = %d" % (total, 2 * cp))
    h = total // (2 * cp)
    return [[c * h + k for c in (rank, 2 * cp - 1 - rank) for k in range(h)]]


if __name__ == "__main__":
    cp_split.zigzag = whole_pack
    serve_cp_split(cp_split.split)
