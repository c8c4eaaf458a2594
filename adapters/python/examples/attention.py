"""A packed (varlen) attention in plain Python, for `thdcheck fuzz attention`: every query sees
the real keys of its own document (and, causal, none after it), softmax in f64, and the
log-sum-exp beside the output. With CP it gathers every rank's zigzag shard, attends, and hands
each rank its rows back. Stdlib only, so CI runs it without torch.

    thdcheck fuzz attention -- python3 adapters/python/examples/attention.py
    thdcheck fuzz attention --dtype bf16 --cp-size 2 -- python3 adapters/python/examples/attention.py

An argument plants a bug, each one a rule of its own:
  cross-document  the document mask is derived from EOS tokens the packed inputs do not carry,
                  so the whole pack is one document (attention-output, attention-isolation)
  off-by-one      the document id of a token is found with bisect_left on the offsets: the first
                  token of every document is put in the previous one (attention-isolation)
  not-causal      the causal flag is ignored inside a document (attention-causal)
  nan-padding     padding rows softmax over no key: 0/0 (attention-padding)
  lse-base2       the LSE is returned in base 2, as a kernel keeps it internally (attention-lse)
"""

import bisect
import math
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from thdcheck_adapter import serve_attention  # noqa: E402

BUG = sys.argv[1] if len(sys.argv) > 1 else None


def document_ids(batch):
    """The document of every stored token, None for padding."""
    real, padded = batch["cu_seqlens"], batch["cu_seqlens_padded"]
    total = padded[-1]
    if BUG == "cross-document":
        # BUG: documents split at EOS tokens; the packed inputs carry none, so every real token
        # is in document 0.
        return [0 if t - padded[doc_of_slot(padded, t)] < slot_len(real, doc_of_slot(padded, t))
                else None for t in range(total)]
    ids = []
    for t in range(total):
        d = doc_of_slot(padded, t)
        if t - padded[d] >= slot_len(real, d):
            ids.append(None)  # padding
        elif BUG == "off-by-one":
            # BUG: bisect_left puts a document's first token (t == offset) in the one before.
            ids.append(max(bisect.bisect_left(padded, t) - 1, 0))
        else:
            ids.append(d)
    return ids


def doc_of_slot(padded, t):
    """The slot holding storage token t (empty slots skipped)."""
    return bisect.bisect_right(padded, t) - 1


def slot_len(real, d):
    return real[d + 1] - real[d]


def attend(q, k, v, doc, causal, heads, kv_heads, dim):
    """Output [T][H][D] and LSE [T][H] of the packed rows."""
    total = len(q)
    scale = 1.0 / math.sqrt(dim)
    group = heads // kv_heads
    out = [[[0.0] * dim for _ in range(heads)] for _ in range(total)]
    lse = [[0.0] * heads for _ in range(total)]
    for i in range(total):
        keys = [j for j in range(total) if doc[i] is not None and doc[j] == doc[i]
                and (not causal or BUG == "not-causal" or j <= i)]
        for h in range(heads):
            g = h // group
            scores = [scale * sum(a * b for a, b in zip(q[i][h], k[j][g])) for j in keys]
            if not scores:
                if BUG == "nan-padding":
                    out[i][h] = [float("nan")] * dim  # BUG: 0 / 0
                continue
            top = max(scores)
            weights = [math.exp(s - top) for s in scores]
            total_w = sum(weights)
            out[i][h] = [sum(w * v[j][g][e] for w, j in zip(weights, keys)) / total_w
                         for e in range(dim)]
            lse[i][h] = top + math.log(total_w)
            if BUG == "lse-base2":
                lse[i][h] /= math.log(2)  # BUG: log2 of the sum
    return out, lse


def zigzag(padded, cp, rank):
    """The storage tokens rank `rank` holds: chunks rank and 2·cp−1−rank of every slot."""
    held = []
    for start, end in zip(padded, padded[1:]):
        c = (end - start) // (2 * cp)
        for chunk in (rank, 2 * cp - 1 - rank):
            held.extend(range(start + chunk * c, start + (chunk + 1) * c))
    return held


def attention(batch):
    dims = batch["heads"], batch["kv_heads"], batch["head_dim"]
    doc = document_ids(batch)
    if batch.get("ranks") is None:
        return attend(batch["q"], batch["k"], batch["v"], doc, batch["causal"], *dims)
    total = batch["cu_seqlens_padded"][-1]
    q, k, v = [None] * total, [None] * total, [None] * total
    held = [zigzag(batch["cu_seqlens_padded"], batch["cp_size"], r["cp_rank"])
            for r in batch["ranks"]]
    for shard, rows in zip(batch["ranks"], held):
        for n, t in enumerate(rows):
            q[t], k[t], v[t] = shard["q"][n], shard["k"][n], shard["v"][n]
    out, lse = attend(q, k, v, doc, batch["causal"], *dims)
    return [([out[t] for t in rows], [lse[t] for t in rows]) for rows in held]


if __name__ == "__main__":
    serve_attention(attention)
