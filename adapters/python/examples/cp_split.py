"""A correct CP splitter (TransformerEngine / Megatron zigzag): labels are rolled on the full
sequence first (each token predicts the next token of its own sequence; the last token of a
sequence and padding predict nothing), then every sequence's slot is cut into 2*cp equal chunks
and rank r takes chunks r and 2*cp-1-r. A slot that is not a multiple of 2*cp is refused (at
cp = 1 every slot is kept whole). Stdlib only."""

import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from thdcheck_adapter import serve_cp_split  # noqa: E402

IGNORE_INDEX = -100


def roll(labels, cu_seqlens, cu_seqlens_padded):
    """Shifted labels: token j of a sequence gets the label of token j+1 of the same sequence."""
    rolled = [IGNORE_INDEX] * len(labels)
    for i in range(len(cu_seqlens) - 1):
        start, real = cu_seqlens_padded[i], cu_seqlens[i + 1] - cu_seqlens[i]
        for j in range(real - 1):
            rolled[start + j] = labels[start + j + 1]
    return rolled


def zigzag(cu_seqlens_padded, cp, rank):
    """The storage indices rank `rank` holds, per sequence: a list of index lists."""
    held = []
    for i in range(len(cu_seqlens_padded) - 1):
        start, end = cu_seqlens_padded[i], cu_seqlens_padded[i + 1]
        if cp == 1:
            held.append(list(range(start, end)))
            continue
        if (end - start) % (2 * cp):
            raise ValueError(
                "sequence %d: a slot of %d tokens is not divisible by 2*cp = %d"
                % (i, end - start, 2 * cp)
            )
        h = (end - start) // (2 * cp)
        held.append([start + c * h + k for c in (rank, 2 * cp - 1 - rank) for k in range(h)])
    return held


def split(batch, cp_size):
    rolled = roll(batch["labels"], batch["cu_seqlens"], batch["cu_seqlens_padded"])
    ranks = []
    for r in range(cp_size):
        idx = [g for seq in zigzag(batch["cu_seqlens_padded"], cp_size, r) for g in seq]
        ranks.append(
            {
                "input_ids": [batch["input_ids"][g] for g in idx],
                "labels": [rolled[g] for g in idx],
                "position_ids": [batch["position_ids"][g] for g in idx],
            }
        )
    return ranks


if __name__ == "__main__":
    serve_cp_split(split)
