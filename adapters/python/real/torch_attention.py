"""PyTorch's own attention kernels as `thdcheck fuzz attention` adapters (CPU; torch from PyPI,
never in CI). Usage: torch_attention.py MODE [BUG] [acc=f32]

MODE (each a correct packed attention as a training stack writes it):
  flex-offsets         FlexAttention (`torch.nn.attention.flex_attention`, eager) with a document
                       mask_mod built from the offsets, attention-gym's generate_doc_mask_mod:
                       doc id = searchsorted(cu_seqlens_padded, t, right=True) - 1, a key is real
                       when its offset in the slot is below the document's real length; returns
                       the LSE (`return_lse`)
  flex-position-ids    FlexAttention with the documents found from position-id restarts (what
                       transformers does for packed inputs without offsets); needs --unpadded
                       (position ids cannot tell padding from a document's tail)
  sdpa-block-diagonal  `scaled_dot_product_attention` with a block-diagonal boolean mask (and the
                       causal triangle inside each block); padding rows attend to themselves so
                       that no row is fully masked (NaN), then are zeroed
  zigzag-ring          a pure-torch zigzag CP attention as ring attention runs it: every rank
                       attends its own q to every rank's k/v shard in turn (document mask and
                       causality from the global positions of the rows), and merges the partial
                       softmax results with their LSE (`out = Σ exp(lse_s − lse) · out_s`,
                       `lse = logaddexp`); use with --cp-size 2 or 4

`acc=f32` (zigzag-ring, anywhere after MODE): the partial results and merges in float32, as a ring
kernel accumulates, instead of float64.

BUG (planted, each caught and shrunk to <= 2 documents):
  flex-offsets off-by-one       doc id from searchsorted(right=False): a document's first token
                                is given the previous document's id
  flex-position-ids eos-mask    documents split after each EOS token of input_ids; packed
                                examples no longer carry their EOS, so the pack is one document
  sdpa-block-diagonal eos-mask  the same EOS-derived mask, as a boolean SDPA mask
  zigzag-ring no-doc-mask       the ring's remote steps use causality alone, no document mask
  zigzag-ring wrong-lse-merge   partial results merged with max(lse) instead of logaddexp
  zigzag-ring causal-per-chunk  the causal mask of each ring step compares local row indices
                                (a triangle per chunk), not positions in the document
"""

import os
import sys

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from thdcheck_adapter import serve_attention  # noqa: E402

MODE = sys.argv[1] if len(sys.argv) > 1 else "flex-offsets"
_REST = sys.argv[2:]
BUG = next((a for a in _REST if not a.startswith("acc=")), None)
# zigzag-ring: the dtype its partial results and merges are computed in (`acc=f32`: as a ring
# kernel accumulates; default f64).
ACC = {"f64": torch.float64, "f32": torch.float32}[
    next((a[4:] for a in _REST if a.startswith("acc=")), "f64")
]
DTYPES = {"f32": torch.float32, "bf16": torch.bfloat16, "f16": torch.float16}
EOS = 2

torch.set_num_threads(1)


def tensors(batch, shard=None):
    """q, k, v of the request (or of one rank's shard) as [T, H, D] tensors of its dtype."""
    src = shard if shard is not None else batch
    dt = DTYPES[batch["dtype"]]
    heads = {"q": batch["heads"], "k": batch["kv_heads"], "v": batch["kv_heads"]}
    return [
        torch.tensor(src[n], dtype=torch.float64).reshape(-1, heads[n], batch["head_dim"]).to(dt)
        for n in ("q", "k", "v")
    ]


def layout(batch):
    """Per stored token: its document (from the padded offsets) and whether it is real."""
    padded = torch.tensor(batch["cu_seqlens_padded"])
    real = torch.tensor(batch["cu_seqlens"])
    t = torch.arange(int(padded[-1]))
    doc = torch.searchsorted(padded, t, right=True) - 1
    is_real = (t - padded[doc]) < (real[doc + 1] - real[doc])
    if BUG == "off-by-one":
        # BUG: searchsorted(right=False) gives a document's first token the previous id.
        doc = (torch.searchsorted(padded, t, right=False) - 1).clamp(min=0)
    return doc, is_real


def eos_documents(total):
    """The document of every token from EOS tokens: a new document after each EOS. The packed
    examples carry no EOS (token ids here: 1), so every token is in document 0."""
    input_ids = torch.ones(total, dtype=torch.long)  # the pack's tokens: no EOS among them
    return torch.cumsum((input_ids == EOS).long(), 0) - (input_ids == EOS).long()


def flex(batch):
    from torch.nn.attention.flex_attention import create_block_mask, flex_attention

    q, k, v = tensors(batch)
    total = q.shape[0]
    if total == 0:
        return [], []
    causal = batch["causal"]
    if MODE == "flex-offsets":
        doc, is_real = layout(batch)

        def mask_mod(b, h, qi, ki):
            same = (doc[qi] == doc[ki]) & is_real[qi] & is_real[ki]
            return same & (ki <= qi) if causal else same
    else:
        pos = torch.tensor(batch["position_ids"])
        doc = eos_documents(total) if BUG == "eos-mask" else torch.cumsum((pos == 0).long(), 0)

        def mask_mod(b, h, qi, ki):
            same = doc[qi] == doc[ki]
            return same & (ki <= qi) if causal else same

    block = create_block_mask(mask_mod, 1, 1, total, total, device="cpu", BLOCK_SIZE=total)
    qq, kk, vv = (x.transpose(0, 1).unsqueeze(0) for x in (q, k, v))
    out, lse = flex_attention(
        qq, kk, vv, block_mask=block, return_lse=True,
        enable_gqa=batch["heads"] != batch["kv_heads"],
    )
    return out[0].transpose(0, 1), lse[0].transpose(0, 1).float()


def sdpa(batch):
    q, k, v = tensors(batch)
    total = q.shape[0]
    if total == 0:
        return []
    doc, is_real = layout(batch)
    if BUG == "eos-mask":
        doc, is_real = eos_documents(total), torch.ones(total, dtype=torch.bool)
    mask = (doc[:, None] == doc[None, :]) & is_real[:, None] & is_real[None, :]
    if batch["causal"]:
        mask &= torch.ones(total, total, dtype=torch.bool).tril()
    mask |= torch.diag(~is_real)  # a padding row attends to itself: no fully masked row
    out = torch.nn.functional.scaled_dot_product_attention(
        *(x.transpose(0, 1).unsqueeze(0) for x in (q, k, v)), attn_mask=mask,
        enable_gqa=batch["heads"] != batch["kv_heads"],
    )[0].transpose(0, 1)
    return out * is_real[:, None, None]


def zigzag_positions(padded, cp, rank):
    held = []
    for start, end in zip(padded, padded[1:]):
        c = (end - start) // (2 * cp)
        for chunk in (rank, 2 * cp - 1 - rank):
            held.extend(range(start + chunk * c, start + (chunk + 1) * c))
    return torch.tensor(held, dtype=torch.long)


def partial(q, k, v, mask, scale):
    """Attention of q over (k, v) under mask in ACC (f64 by default, `acc=f32` as a ring kernel
    accumulates): output and LSE (-inf where no key). In f32 every merge rounds once more than
    one naive pass: the fuzzer's bound at --cp-size N is the rule's on the same merge in the
    dtype (before it was, cp 4 in f32 failed at seed 0, case 198: |Δ| 4.3e-7 > 3.7e-7)."""
    scores = torch.einsum("qhd,khd->hqk", q.to(ACC), k.to(ACC)) * scale
    scores = scores.masked_fill(~mask[None], float("-inf"))
    lse = torch.logsumexp(scores, -1)  # [H, q]
    probs = torch.exp(scores - lse[..., None].clamp(min=-1e30)).nan_to_num(0.0)
    out = torch.einsum("hqk,khd->qhd", probs, v.to(ACC))
    return out, lse.transpose(0, 1)  # [q, H, D], [q, H]


def ring(batch):
    cp = batch["cp_size"]
    dt = DTYPES[batch["dtype"]]
    group = batch["heads"] // batch["kv_heads"]
    scale = batch["head_dim"] ** -0.5
    doc, is_real = layout(batch)
    padded = batch["cu_seqlens_padded"]
    shards = [tensors(batch, s) for s in batch["ranks"]]
    held = [zigzag_positions(padded, cp, r) for r in range(cp)]
    pos = [torch.tensor(s["position_ids"]) for s in batch["ranks"]]
    answers = []
    for r in range(cp):
        q = shards[r][0]
        n = q.shape[0]
        out = torch.zeros(n, batch["heads"], batch["head_dim"], dtype=ACC)
        lse = torch.full((n, batch["heads"]), float("-inf"), dtype=ACC)
        for step in range(cp):  # the ring: rank (r - step) % cp's k/v arrive at step `step`
            s = (r - step) % cp
            k, v = (x.repeat_interleave(group, 1) for x in shards[s][1:])
            gq, gk = held[r], held[s]
            mask = is_real[gq][:, None] & is_real[gk][None, :]
            if not (BUG == "no-doc-mask" and s != r):
                mask &= doc[gq][:, None] == doc[gk][None, :]
            if batch["causal"]:
                if BUG == "causal-per-chunk":
                    local_q, local_k = torch.arange(n), torch.arange(len(gk))
                    mask &= local_k[None, :] <= local_q[:, None]
                elif BUG == "no-doc-mask" and s != r:
                    mask &= gk[None, :] <= gq[:, None]  # global order: across documents
                else:
                    mask &= (pos[s][None, :] <= pos[r][:, None])
            o_s, l_s = partial(q, k, v, mask, scale)
            if BUG == "wrong-lse-merge":
                new = torch.maximum(lse, l_s)
            else:
                new = torch.logaddexp(lse, l_s)
            safe = torch.where(torch.isinf(new), torch.zeros_like(new), new)
            w_old = torch.exp(lse - safe).nan_to_num(0.0)[..., None]
            w_new = torch.exp(l_s - safe).nan_to_num(0.0)[..., None]
            out = out * w_old + o_s * w_new
            lse = new
        real_rows = is_real[held[r]]
        out = (out * real_rows[:, None, None]).to(dt)
        lse = torch.where(real_rows[:, None], lse, torch.zeros_like(lse))
        answers.append((out, lse))
    return answers


def attention(batch):
    if MODE in ("flex-offsets", "flex-position-ids"):
        return flex(batch)
    if MODE == "sdpa-block-diagonal":
        return sdpa(batch)
    if MODE == "zigzag-ring":
        if batch.get("ranks") is None:
            raise ValueError("zigzag-ring runs with --cp-size 2 or more")
        return ring(batch)
    raise ValueError("unknown mode %r" % MODE)


if __name__ == "__main__":
    serve_attention(attention)
