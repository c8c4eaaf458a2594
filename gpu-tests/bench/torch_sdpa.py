#!/usr/bin/env python3
"""Times PyTorch attention on the batch `benches/gpu.rs` exported, and compares it with the oracle.

usage: GPU_BENCH_EXPORT=target/sdpa cargo bench -p gpu-tests --features cuda --bench gpu
       python3 gpu-tests/bench/torch_sdpa.py target/sdpa/batch.safetensors [--iters 20]

The file holds q [T, H, D], k, v [T, KV, D] (f32), cu_seqlens [B+1] (i64), causal [1] (u8) and
out_oracle_f64 [T, H, D], the oracle's f64 output on exactly these inputs. For each dtype this
prints, per implementation:
  - ms per call and useful GFLOP/s (4*H*D * visible (query, key) pairs, the same count as the
    Rust bench, so the two are comparable line by line);
  - max|out - oracle_f64| and mean|out - oracle_f64|.
Implementations: `sdpa_per_seq` (F.scaled_dot_product_attention on each sequence, as
[1, H, s, D]), `sdpa_padded` (one call on the zero-padded [B, H, S_max, D] batch with a boolean
key-padding + causal mask: what a BSHD fallback computes), and `varlen_attn`
(torch.nn.attention.varlen, FlashAttention on the packed tensors) where this torch has it.
Needs torch >= 2.5 (enable_gqa) and the `safetensors` package; runs on CUDA only.
"""

import argparse
import inspect
import sys

import torch
import torch.nn.functional as F
from safetensors.torch import load_file


def visible_pairs(sq, sk, causal):
    if not causal:
        return sq * sk
    return sum(min(max(i + sk - sq + 1, 0), sk) for i in range(sq))


def sdpa_per_seq(q, k, v, cu, causal):
    out = torch.empty_like(q)
    for b in range(len(cu) - 1):
        s, e = cu[b], cu[b + 1]
        if e == s:
            continue
        # [s, H, D] -> [1, H, s, D]
        qs, ks, vs = (t[s:e].transpose(0, 1).unsqueeze(0) for t in (q, k, v))
        o = F.scaled_dot_product_attention(qs, ks, vs, is_causal=causal, enable_gqa=True)
        out[s:e] = o.squeeze(0).transpose(0, 1)
    return out


def padded_inputs(q, k, v, cu, causal):
    lens = [cu[b + 1] - cu[b] for b in range(len(cu) - 1)]
    b, s_max, h, kv, d = len(lens), max(lens), q.shape[1], k.shape[1], q.shape[2]
    qp = q.new_zeros(b, h, s_max, d)
    kp = k.new_zeros(b, kv, s_max, d)
    vp = v.new_zeros(b, kv, s_max, d)
    for i, n in enumerate(lens):
        qp[i, :, :n] = q[cu[i]:cu[i + 1]].transpose(0, 1)
        kp[i, :, :n] = k[cu[i]:cu[i + 1]].transpose(0, 1)
        vp[i, :, :n] = v[cu[i]:cu[i + 1]].transpose(0, 1)
    idx = torch.arange(s_max, device=q.device)
    key_ok = idx[None, :] < torch.tensor(lens, device=q.device)[:, None]  # [B, S]
    mask = key_ok[:, None, None, :].expand(b, 1, s_max, s_max)
    if causal:  # equal q/k lengths: top-left == bottom-right alignment
        mask = mask & (idx[None, :] <= idx[:, None])[None, None]
    return qp, kp, vp, mask, lens


def sdpa_padded(qp, kp, vp, mask):
    return F.scaled_dot_product_attention(qp, kp, vp, attn_mask=mask, enable_gqa=True)


def unpad(op, lens, like):
    out = torch.empty_like(like)
    start = 0
    for i, n in enumerate(lens):
        out[start:start + n] = op[i, :, :n].transpose(0, 1)
        start += n
    return out


def varlen_fn():
    try:
        from torch.nn.attention.varlen import varlen_attn
    except ImportError:
        return None
    params = inspect.signature(varlen_attn).parameters

    def call(q, k, v, cu_t, max_len, causal):
        kwargs = {}
        if "enable_gqa" in params:
            kwargs["enable_gqa"] = True
        elif k.shape[1] != q.shape[1]:
            rep = q.shape[1] // k.shape[1]
            k, v = k.repeat_interleave(rep, dim=1), v.repeat_interleave(rep, dim=1)
        if "is_causal" in params:
            kwargs["is_causal"] = causal
        elif causal:
            kwargs["window_size"] = (-1, 0)
        return varlen_attn(q, k, v, cu_t, cu_t, max_len, max_len, **kwargs)

    return call


def timed(fn, iters):
    fn()
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(iters):
        out = fn()
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) / iters, out


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("batch", help="batch.safetensors written by the Rust bench")
    ap.add_argument("--iters", type=int, default=20)
    args = ap.parse_args()
    if not torch.cuda.is_available():
        sys.exit("torch_sdpa.py: no CUDA device")

    t = load_file(args.batch)
    cu = t["cu_seqlens"].tolist()
    causal = bool(t["causal"][0].item())
    truth = t["out_oracle_f64"].cuda()
    h, d = t["q"].shape[1], t["q"].shape[2]
    lens = [cu[b + 1] - cu[b] for b in range(len(cu) - 1)]
    useful = 4 * h * d * sum(visible_pairs(n, n, causal) for n in lens)
    print(f"torch {torch.__version__} on {torch.cuda.get_device_name()}: {cu[-1]} tokens, "
          f"{len(lens)} sequences, H={h} KV={t['k'].shape[1]} D={d} causal={causal}")
    print(f"{'impl':<14} {'dtype':<6} {'ms/iter':>9} {'useful GFLOP/s':>15} {'max|Δ| vs oracle':>17} {'mean|Δ|':>10}")
    varlen = varlen_fn()
    cu_t = torch.tensor(cu, dtype=torch.int32, device="cuda")
    for dtype in (torch.bfloat16, torch.float16, torch.float32):
        q, k, v = (t[n].cuda().to(dtype) for n in ("q", "k", "v"))
        qp, kp, vp, mask, _ = padded_inputs(q, k, v, cu, causal)
        impls = {
            "sdpa_per_seq": lambda: sdpa_per_seq(q, k, v, cu, causal),
            "sdpa_padded": lambda: unpad(sdpa_padded(qp, kp, vp, mask), lens, q),
        }
        if varlen is not None and dtype != torch.float32:
            impls["varlen_attn"] = lambda: varlen(q, k, v, cu_t, max(lens), causal)
        for name, fn in impls.items():
            try:
                ms, out = timed(fn, args.iters)
            except RuntimeError as err:  # e.g. no kernel for this dtype/shape
                print(f"{name:<14} {str(dtype)[6:]:<6} failed: {str(err).splitlines()[0]}")
                continue
            err = (out.double() - truth).abs()
            print(f"{name:<14} {str(dtype)[6:]:<6} {ms:>9.3f} {useful / ms / 1e6:>15.1f} "
                  f"{err.max().item():>17.3e} {err.mean().item():>10.3e}")


if __name__ == "__main__":
    main()
