"""A buggy CP splitter: it splits the unshifted labels first and rolls each rank's part of a
sequence afterwards. A rank's two zigzag chunks are not contiguous, so the last token of its
first chunk is given the first token of its second chunk as target, and the last token of the
second chunk loses its target (the bug class AReaL fixed in #1223). Correct at cp = 1; `thdcheck
fuzz cp-split` catches it at cp >= 2 (cp-labels)."""

import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from thdcheck_adapter import serve_cp_split  # noqa: E402
from cp_split import IGNORE_INDEX, zigzag  # noqa: E402


def split(batch, cp_size):
    ranks = []
    for r in range(cp_size):
        ids, labels, pos = [], [], []
        for seq in zigzag(batch["cu_seqlens_padded"], cp_size, r):
            local = [batch["labels"][g] for g in seq]
            # BUG: rolled after the split, within the rank's (non-contiguous) part of the sequence.
            labels += local[1:] + [IGNORE_INDEX] if local else []
            ids += [batch["input_ids"][g] for g in seq]
            pos += [batch["position_ids"][g] for g in seq]
        ranks.append({"input_ids": ids, "labels": labels, "position_ids": pos})
    return ranks


if __name__ == "__main__":
    serve_cp_split(split)
