"""A correct CP-local loss computed in float32, as a GPU pipeline computes it: every value
rounded to single precision after each operation (stdlib only: `struct` rounds to f32). It
declares ``"dtype": "float32"``, so thdcheck judges it to DESIGN.md's f32 tolerance with no
``--rtol``.

``python3 cp_loss_float32.py cp-factor`` plants the classic bug at that precision: the valid
count of one rank taken for the batch's, so the loss comes out off by the CP factor.
"""

import math
import os
import struct
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from thdcheck_adapter import serve_loss  # noqa: E402

IGNORE_INDEX = -100
BUG = sys.argv[1] if len(sys.argv) > 1 else None


def f32(x):
    """`x` rounded to the nearest float32."""
    return struct.unpack("f", struct.pack("f", x))[0]


def local_sums(logits, labels):
    """Σ -log softmax(logits[k])[labels[k]] over the rank's valid labels (in float32), and their
    count."""
    nll, count = f32(0.0), 0
    for row, y in zip(logits, labels):
        if y == IGNORE_INDEX:
            continue
        row = [f32(x) for x in row]
        top = max(row)
        total = f32(0.0)
        for x in row:
            total = f32(total + f32(math.exp(f32(x - top))))
        nll = f32(nll + f32(f32(top + f32(math.log(total))) - row[y]))
        count += 1
    return nll, count


def loss(ranks, cp_size):
    parts = [local_sums(r["logits"], r["labels"]) for r in ranks]
    nll = f32(0.0)
    for n, _ in parts:
        nll = f32(nll + n)
    count = sum(c for _, c in parts)
    if BUG == "cp-factor":
        # Rank 0's count, scaled as if every rank held as many: right only when they all do.
        count = parts[0][1] * cp_size
    return {"loss": f32(nll / count) if count else 0.0, "dtype": "float32"}


if __name__ == "__main__":
    serve_loss(loss)
