"""A CP-local loss with three distinct bugs, each its own CP-LOSS rule, so that `--ignore`
separates them and `thdcheck fuzz loss` shrinks each on its own:

- every rank drops its last valid target, as if its shard ended a sequence (a local re-shift of
  labels that were already rolled on the full sequence): the parts' counts miss the global
  count (`cp-loss-parts`);
- a rank with no valid label (always so on an all-ignored batch) divides 0 by 0, and the NaN
  spreads to the loss (`cp-loss-finite`);
- the loss is the mean of the ranks' means, not Σ nll / Σ count: wrong whenever the ranks hold
  different numbers of valid labels (`cp-loss-reduction`, judged against the parts it reports).
"""

import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from thdcheck_adapter import serve_loss  # noqa: E402
from cp_loss import IGNORE_INDEX, local_sums  # noqa: E402


def drop_last_target(labels):
    """BUG 1: the rank's last valid label is taken for a sequence boundary and ignored."""
    labels = list(labels)
    valid = [k for k, y in enumerate(labels) if y != IGNORE_INDEX]
    if valid:
        labels[valid[-1]] = IGNORE_INDEX
    return labels


def loss(ranks, cp_size):
    parts = [local_sums(r["logits"], drop_last_target(r["labels"])) for r in ranks]
    # BUG 2: 0/0 on a rank with nothing valid. BUG 3: the mean of the ranks' means.
    means = [n / c if c else float("nan") for n, c in parts]
    return {"loss": sum(means) / len(means), "parts": parts}


if __name__ == "__main__":
    serve_loss(loss)
