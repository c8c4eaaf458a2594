"""A buggy CP logger: the loss is reduced correctly, but the valid-token count it logs is the
one rank 0 sees on its own shard, not the batch's (the class of AReaL #1242 and of
Megatron-Bridge's dense-CP token counts). The count moves with the CP size: `thdcheck fuzz
loss` catches it (tokens-cp)."""

import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from thdcheck_adapter import serve_loss  # noqa: E402
from cp_loss import local_sums  # noqa: E402


def loss(ranks, cp_size):
    parts = [local_sums(r["logits"], r["labels"]) for r in ranks]
    nll = sum(n for n, _ in parts)
    count = sum(c for _, c in parts)
    # BUG: this rank's count logged as the batch's (no all-reduce).
    local_count = parts[0][1]
    return {"loss": nll / count if count else 0.0, "parts": parts, "n_valid_tokens": local_count}


if __name__ == "__main__":
    serve_loss(loss)
