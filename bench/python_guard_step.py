"""thdcheck.guard beside a realistic training step on a GPU (issue 27's "beside a realistic
step"): a 1.1B-parameter Llama-style decoder with TinyLlama's dimensions (22 layers, hidden
2048, 32 heads, 4 KV heads, SwiGLU FFN 5632, vocabulary 32000, RMSNorm, RoPE), bf16 weights
and activations, trained on one packed batch of N tokens (documents of 1..4096 tokens, seeded,
as bench/python_guard.py) per step: forward, cross-entropy, backward, AdamW. Attention is
PyTorch's SDPA (causal, GQA) per document, the packed batch's `cu_seq_lens_q` cutting it, so the
step is the work of a padding-free packed step. Beside it: the guard on the same batch, held on
the GPU as the step receives it. Needs torch with CUDA and the thdcheck package:

    python bench/python_guard_step.py [N ...]          # default 4096 16384 32768 tokens

Each figure is the median of 5 steps after 2 warm-up steps, the GPU synchronized around each.
"""

from __future__ import annotations

import os
import random
import statistics
import sys
import time

import torch
import torch.nn.functional as F

import thdcheck

LAYERS, HIDDEN, HEADS, KV, FFN, VOCAB = 22, 2048, 32, 4, 5632, 32000
# THDCHECK_BENCH_DEVICE=cpu: a 2-layer, 64-wide model on the CPU, to try the script (not to time).
DEVICE = os.environ.get("THDCHECK_BENCH_DEVICE", "cuda")
if DEVICE == "cpu":
    LAYERS, HIDDEN, HEADS, KV, FFN, VOCAB = 2, 64, 4, 2, 128, 512
HEAD_DIM = HIDDEN // HEADS


def sync() -> None:
    if DEVICE == "cuda":
        torch.cuda.synchronize()


def packed(tokens: int) -> dict:
    rng = random.Random(0)
    lens = []
    while sum(lens) < tokens:
        lens.append(min(rng.randint(1, 4096), tokens - sum(lens)))
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(3, VOCAB, (1, tokens), generator=g)
    cu = torch.zeros(len(lens) + 1, dtype=torch.int32)
    cu[1:] = torch.cumsum(torch.tensor(lens), 0)
    starts = cu[:-1].long()
    pos = torch.arange(tokens) - torch.repeat_interleave(starts, torch.tensor(lens))
    labels = ids.clone()
    labels[0, starts] = -100
    batch = {
        "input_ids": ids, "labels": labels, "position_ids": pos[None],
        "cu_seq_lens_q": cu, "cu_seq_lens_k": cu.clone(),
        "max_length_q": max(lens), "max_length_k": max(lens),
    }
    return {k: v.to(DEVICE) if isinstance(v, torch.Tensor) else v for k, v in batch.items()}


class Layer(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.n1 = torch.nn.RMSNorm(HIDDEN)
        self.qkv = torch.nn.Linear(HIDDEN, (HEADS + 2 * KV) * HEAD_DIM, bias=False)
        self.o = torch.nn.Linear(HEADS * HEAD_DIM, HIDDEN, bias=False)
        self.n2 = torch.nn.RMSNorm(HIDDEN)
        self.up = torch.nn.Linear(HIDDEN, 2 * FFN, bias=False)
        self.down = torch.nn.Linear(FFN, HIDDEN, bias=False)

    def forward(self, x, cos, sin, bounds):
        t = x.shape[0]
        q, k, v = self.qkv(self.n1(x)).split([HEADS * HEAD_DIM, KV * HEAD_DIM, KV * HEAD_DIM], -1)
        q, k, v = q.view(t, HEADS, HEAD_DIM), k.view(t, KV, HEAD_DIM), v.view(t, KV, HEAD_DIM)
        q, k = rope(q, cos, sin), rope(k, cos, sin)
        # KV heads repeated for the query groups, 4-D inputs: SDPA's flash kernel then takes
        # them (3-D inputs and its GQA path fell back to the math kernel here, which keeps every
        # L x L score for the backward: out of memory at 16k tokens).
        k, v = k.repeat_interleave(HEADS // KV, 1), v.repeat_interleave(HEADS // KV, 1)
        outs = []
        for a, b in bounds:  # one causal attention per document: the packed batch's offsets
            # [1, heads, L, head_dim]: a 4-D batch of one, which the flash kernel takes.
            outs.append(F.scaled_dot_product_attention(
                q[a:b].transpose(0, 1)[None], k[a:b].transpose(0, 1)[None],
                v[a:b].transpose(0, 1)[None], is_causal=True)[0].transpose(0, 1))
        x = x + self.o(torch.cat(outs).reshape(t, HEADS * HEAD_DIM))
        gate, up = self.up(self.n2(x)).chunk(2, -1)
        return x + self.down(F.silu(gate) * up)


def rope(x, cos, sin):
    a, b = x[..., : HEAD_DIM // 2], x[..., HEAD_DIM // 2 :]
    return torch.cat([a * cos - b * sin, b * cos + a * sin], -1)


class Model(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = torch.nn.Embedding(VOCAB, HIDDEN)
        self.layers = torch.nn.ModuleList(Layer() for _ in range(LAYERS))
        self.norm = torch.nn.RMSNorm(HIDDEN)
        self.head = torch.nn.Linear(HIDDEN, VOCAB, bias=False)

    def forward(self, batch):
        ids, pos = batch["input_ids"][0], batch["position_ids"][0]
        cu = batch["cu_seq_lens_q"].tolist()
        bounds = list(zip(cu[:-1], cu[1:]))
        inv = 1.0 / (10000 ** (torch.arange(0, HEAD_DIM // 2, device=ids.device) / (HEAD_DIM // 2)))
        ang = pos[:, None].float() * inv[None]
        cos, sin = ang.cos()[:, None].to(torch.bfloat16), ang.sin()[:, None].to(torch.bfloat16)
        x = self.emb(ids)
        for layer in self.layers:
            x = layer(x, cos, sin, bounds)
        logits = self.head(self.norm(x))
        # Unshifted labels (transformers' flattening collator): position t predicts t + 1.
        return F.cross_entropy(logits[:-1].float(), batch["labels"][0, 1:], ignore_index=-100)


def timed(fn, runs=5, warmup=2):
    for _ in range(warmup):
        fn()
    sync()
    out = []
    for _ in range(runs):
        sync()
        t = time.perf_counter()
        fn()
        sync()
        out.append(time.perf_counter() - t)
    return statistics.median(out)


def main() -> None:
    sizes = [int(float(a)) for a in sys.argv[1:]] or [4096, 16384, 32768]
    torch.manual_seed(0)
    model = Model().to(DEVICE, torch.bfloat16)
    params = sum(p.numel() for p in model.parameters())
    opt = torch.optim.AdamW(model.parameters(), lr=1e-5, fused=DEVICE == "cuda")
    guarded = thdcheck.guard(lambda b: b, profile="transformers")
    name = torch.cuda.get_device_name(0) if DEVICE == "cuda" else "cpu"
    print(f"torch {torch.__version__}, {name}, thdcheck {thdcheck.__version__}, "
          f"model {params / 1e9:.2f}B params (TinyLlama dims), bf16")
    print(f"{'tokens':>8} {'docs':>5} {'step ms':>9} {'guard ms':>9} {'guard/step':>11}")
    for n in sizes:
        batch = packed(n)

        def step():
            opt.zero_grad(set_to_none=True)
            model(batch).backward()
            opt.step()

        try:
            s = timed(step)
        except torch.OutOfMemoryError:
            print(f"{n:>8,} out of memory")
            torch.cuda.empty_cache()
            continue
        g = timed(lambda: guarded(batch), runs=7)
        docs = batch["cu_seq_lens_q"].numel() - 1
        print(f"{n:>8,} {docs:>5} {s * 1e3:>9.1f} {g * 1e3:>9.3f} {g / s:>10.3%}")
        if DEVICE == "cuda":
            torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
