"""A correct CP-local loss: every rank sums the NLL of its valid labels and counts them; the
loss is the sum of the sums over the sum of the counts (what all-reducing both gives), 0 when
nothing in the batch is valid. It reports the parts and the valid-token count it would log.
Stdlib only, in f64 like the oracle."""

import math
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from thdcheck_adapter import serve_loss  # noqa: E402

IGNORE_INDEX = -100


def local_sums(logits, labels):
    """Σ -log softmax(logits[k])[labels[k]] over the rank's valid labels, and their count."""
    nll, count = 0.0, 0
    for row, y in zip(logits, labels):
        if y == IGNORE_INDEX:
            continue
        top = max(row)
        nll += top + math.log(sum(math.exp(x - top) for x in row)) - row[y]
        count += 1
    return nll, count


def loss(ranks, cp_size):
    parts = [local_sums(r["logits"], r["labels"]) for r in ranks]
    nll = sum(n for n, _ in parts)
    count = sum(c for _, c in parts)
    return {"loss": nll / count if count else 0.0, "parts": parts, "n_valid_tokens": count}


if __name__ == "__main__":
    serve_loss(loss)
