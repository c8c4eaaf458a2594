#!/usr/bin/env python3
"""PyTorch CPU figures for the reference batch, to print next to `cargo bench -p oracle --bench
reference_batch` (see bench/run.sh).

Reference batch: 16 documents with the lengths of bench/lengths.json, H=8, KV=2, D=64, causal;
q, k, v standard normal from a seeded torch.Generator. Measurements (median of timed runs after
a warm-up), one `BENCH {json}` line each:

  a  per-document F.scaled_dot_product_attention(is_causal=True), KV heads expanded, f32 and f64
  b  flash-attention-tests style reference on the padded BSHD batch (einsum scores, key-padding
     and bottom-right causal masks filled with -inf, softmax, fully masked rows zeroed), f64
  scale  (a) in f32 on the 16 lengths twice (32 documents) and on doubled lengths
  ce     F.cross_entropy(reduction="sum", ignore_index=-100) on logits [16384 x 32000] f32,
         10% of labels -100

Threads: NTHREADS (default 2). Usage: torch_reference_batch.py [attn] [ref] [scale] [ce]
"""
import json
import math
import os
import statistics
import sys
import time

import torch
import torch.nn.functional as F

torch.set_num_threads(int(os.environ.get("NTHREADS", "2")))
HERE = os.path.dirname(os.path.abspath(__file__))
H, KV, D = 8, 2, 64


def emit(**kw):
    kw["lib"] = "torch " + torch.__version__
    kw["threads"] = torch.get_num_threads()
    print("BENCH " + json.dumps(kw), flush=True)


def timeit(fn, warmup=1, runs=5):
    for _ in range(warmup):
        fn()
    ts = []
    for _ in range(runs):
        t0 = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t0)
    return statistics.median(ts), ts


def useful_flops(lens):
    return sum(4 * H * D * s * (s + 1) / 2 for s in lens)


def offsets(lens):
    cu = [0]
    for s in lens:
        cu.append(cu[-1] + s)
    return cu


def qkv(lens, dtype, seed=1):
    g = torch.Generator().manual_seed(seed)
    t = sum(lens)
    q = torch.randn(t, H, D, generator=g, dtype=torch.float64)
    k = torch.randn(t, KV, D, generator=g, dtype=torch.float64)
    v = torch.randn(t, KV, D, generator=g, dtype=torch.float64)
    return q.to(dtype), k.to(dtype), v.to(dtype)


def per_doc_sdpa(q, k, v, lens):
    """(a) one SDPA call per document, [1, H, s, D], KV heads repeated to H."""
    cu = offsets(lens)
    outs = []
    for i in range(len(lens)):
        a, b = cu[i], cu[i + 1]
        qi = q[a:b].transpose(0, 1).unsqueeze(0)
        ki = k[a:b].transpose(0, 1).repeat_interleave(H // KV, 0).unsqueeze(0)
        vi = v[a:b].transpose(0, 1).repeat_interleave(H // KV, 0).unsqueeze(0)
        outs.append(F.scaled_dot_product_attention(qi, ki, vi, is_causal=True)[0].transpose(0, 1))
    return torch.cat(outs, 0)


def pad(x, lens):
    out = x.new_zeros(len(lens), max(lens), *x.shape[1:])
    cu = offsets(lens)
    for i, s in enumerate(lens):
        out[i, :s] = x[cu[i]:cu[i + 1]]
    return out


def padded_reference(qp, kp, vp, lens):
    """(b) the padded-batch reference: full [B, H, S, S] scores, masks, softmax, zeroed rows."""
    s_max = qp.shape[1]
    kp = kp.repeat_interleave(H // KV, 2)
    vp = vp.repeat_interleave(H // KV, 2)
    scores = torch.einsum("bqhd,bkhd->bhqk", qp / math.sqrt(D), kp)
    real = torch.arange(s_max)[None, :] < torch.tensor(lens)[:, None]  # [B, S]
    scores.masked_fill_(~real[:, None, None, :], float("-inf"))
    # Causal, bottom-right aligned: key j visible to query i iff j <= i + sk - sq (sq == sk here).
    causal = torch.arange(s_max)[None, :] > torch.arange(s_max)[:, None]  # [S, S]
    scores.masked_fill_(causal, float("-inf"))
    attn = torch.softmax(scores, dim=-1)
    del scores
    attn = attn.masked_fill(torch.all(causal | ~real[:, None, None, :], dim=-1, keepdim=True), 0.0)
    attn = attn.masked_fill(~real[:, None, :, None], 0.0)
    return torch.einsum("bhqk,bkhd->bqhd", attn, vp)


def attn(lens):
    fl = useful_flops(lens)
    for name, dt in (("f32", torch.float32), ("f64", torch.float64)):
        q, k, v = qkv(lens, dt)
        med, ts = timeit(lambda: per_doc_sdpa(q, k, v, lens), warmup=2, runs=9)
        emit(bench="attn torch_sdpa_per_doc", case="ref16", dtype=name, median_s=med,
             useful_gflops=fl / med / 1e9, runs=ts)


def ref(lens):
    fl = useful_flops(lens)
    q, k, v = qkv(lens, torch.float64)
    qp, kp, vp = pad(q, lens), pad(k, lens), pad(v, lens)
    out = padded_reference(qp, kp, vp, lens)  # warm-up, and a check against (a)
    got = torch.cat([out[i, :s] for i, s in enumerate(lens)], 0)
    err = float((got - per_doc_sdpa(q, k, v, lens)).abs().max())
    del out, got
    med, ts = timeit(lambda: padded_reference(qp, kp, vp, lens), warmup=0, runs=3)
    emit(bench="attn torch_attention_ref_padded", case="ref16", dtype="f64", median_s=med,
         useful_gflops=fl / med / 1e9, runs=ts, maxdiff_vs_sdpa=err)


def scale(lens):
    cases = (("ref16", lens), ("ref16x2=32docs", lens + lens),
             ("ref16_doubled_lengths", [2 * s for s in lens]))
    for case, ls in cases:
        q, k, v = qkv(ls, torch.float32, seed=3)
        med, ts = timeit(lambda: per_doc_sdpa(q, k, v, ls), warmup=1, runs=5)
        emit(bench="scale torch_sdpa_per_doc", case=case, dtype="f32", n_docs=len(ls), T=sum(ls),
             median_s=med, useful_gflops=useful_flops(ls) / med / 1e9, runs=ts)


def ce(_lens):
    t, vocab = 16384, 32000
    g = torch.Generator().manual_seed(2)
    logits = torch.randn(t, vocab, generator=g, dtype=torch.float32)
    labels = torch.randint(0, vocab, (t,), generator=g)
    labels[torch.rand(t, generator=g) < 0.1] = -100
    f = lambda: F.cross_entropy(logits, labels, reduction="sum", ignore_index=-100)
    med, ts = timeit(f, warmup=1, runs=7)
    n_valid = int((labels != -100).sum())
    emit(bench="loss torch_cross_entropy", dtype="f32", T=t, V=vocab,
         n_ignored=t - n_valid, median_s=med, GBps_logits=logits.numel() * 4 / med / 1e9,
         loss=float(f()) / n_valid, runs=ts)


if __name__ == "__main__":
    lens = json.load(open(os.path.join(HERE, "lengths.json")))["lens"]
    want = sys.argv[1:] or ["attn", "ref", "scale", "ce"]
    for cmd in want:
        {"attn": attn, "ref": ref, "scale": scale, "ce": ce}[cmd](lens)
