"""A buggy CP-local loss: every rank takes the mean over its own valid labels, and the loss is
the mean of the ranks' means. A rank with no valid label divides 0 by 0 (NaN, as torch's
`nll.sum() / mask.sum()` gives), and ranks with unequal counts are weighted wrongly: the global
loss is Σ nll / Σ count, not the mean of the means. `thdcheck fuzz loss` catches both, each a
rule of its own: cp-loss-reduction, and with `--ignore cp-loss-reduction` cp-loss-finite."""

import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from thdcheck_adapter import serve_loss  # noqa: E402
from cp_loss import local_sums  # noqa: E402


def loss(ranks, cp_size):
    parts = [local_sums(r["logits"], r["labels"]) for r in ranks]
    # BUG: the mean of the per-rank means.
    means = [n / c if c else float("nan") for n, c in parts]
    return {"loss": sum(means) / len(means), "parts": parts}


if __name__ == "__main__":
    serve_loss(loss)
