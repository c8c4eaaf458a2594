"""NovaSky-AI/SkyRL: the Megatron worker's packing of a micro-batch, `preprocess_packed_seqs`
(skyrl/backends/skyrl_train/distributed/megatron/megatron_utils.py, with the real
`get_packed_seq_align_size` of packing_utils.py) at main a9564572e, and the wrapper's
`_build_packed_valid_mask` (skyrl/backends/skyrl_train/workers/megatron/megatron_model_wrapper.py),
with Megatron Core's real `PackedSeqParams` (megatron/core/packed_seq_params.py at core_v0.19.0).

How SkyRL feeds it (megatron_model_wrapper.py, `forward` with `remove_microbatch_padding`): the
micro-batch holds `sequences` [B, S] and `attention_mask` [B, S] (one row per sequence, padded);
`preprocess_packed_seqs(sequences, attention_mask.to(bool), ...)` returns the packed tokens
[1, T] and a `PackedSeqParams(qkv_format="thd")`, and the model gets those two (no attention
mask, no position ids); the loss reads `packed_targets` and unpacks the outputs by
`attention_mask`.

Contract (megatron_utils.py `preprocess_packed_seqs`, a9564572e):
- each sequence's real tokens (`input_ids[i, attention_mask[i]]`) start a slot padded with 0 to
  a multiple of `align_size` (`tp_size`, or `tp_size * cp_size * 2` with CP:
  packing_utils.py `get_packed_seq_align_size`);
- the kernel gets the **padded** offsets only: `cu_seqlens_q = cu_seqlens_kv =
  cu_seqlens_q_padded = cu_seqlens_kv_padded = cu_seqlens_padded`, `max_seqlen_q/kv` the
  largest padded length; the real-length `cu_seqlens` it computes is never passed on. The
  real lengths are the rows of `attention_mask` (and, for the MTP draft loss, the wrapper's
  `_build_packed_valid_mask`: 1.0 on each slot's real tokens of the packed layout);
- the padding sits at the end of its slot, so under causal attention no real token sees it.

Saved: the packed `input_ids`, the PackedSeqParams tensors and ints under their field names, and
the micro-batch's `attention_mask` [B, S] (`packed_rows`) or the wrapper's packed valid mask
[1, T] under its batch key `mtp_packed_mask` (`packed_valid_mask`). Both are read under the
built-in `skyrl` profile, whose `offsets = "padded-slots"` says the kernel's offsets are the
slots and the real lengths are the mask's: without it, the alignment padding inside every slot
is read as real tokens.

Bug reproduction: #1407 (a sequence shorter than half its `tp*cp*2` slot crashes the CP > 1
path), fixed at bcc85e241, is `thdcheck fuzz cp-split` over the real function through this
`load`: adapters/python/real/skyrl_cp_split.py at bcc85e241^ (the bug) and bcc85e241 / a9564572e.
"""

from __future__ import annotations

import sys

import common
from common import save_case, stub, upstream

REPO = "NovaSky-AI/SkyRL"
STACK = "skyrl"
COMMIT = "a9564572eb8e91076be43c1bd5e4615e3de17265"
PKG = "skyrl/backends/skyrl_train/distributed/megatron"
UTILS = f"{PKG}/megatron_utils.py"
PACKING = f"{PKG}/packing_utils.py"
WRAPPER = "skyrl/backends/skyrl_train/workers/megatron/megatron_model_wrapper.py"
MLM = ("NVIDIA/Megatron-LM", "core_v0.19.0", "megatron/core/packed_seq_params.py")


def load(tp_size: int, cp_size: int = 1, cp_rank: int = 0):
    mpu = stub("megatron.core.parallel_state",
               get_tensor_model_parallel_world_size=lambda: tp_size,
               get_context_parallel_world_size=lambda: cp_size,
               get_context_parallel_rank=lambda: cp_rank)
    for name in ("megatron", "megatron.core", "skyrl", "skyrl.backends",
                 "skyrl.backends.skyrl_train", "skyrl.backends.skyrl_train.distributed",
                 f"{PKG.replace('/', '.')}", "skyrl.backends.skyrl_train.workers",
                 "skyrl.backends.skyrl_train.workers.megatron"):
        mod = stub(name)
        mod.__path__ = []
        sys.modules[name] = mod
    sys.modules["megatron.core"].parallel_state = mpu
    sys.modules["megatron.core.parallel_state"] = mpu
    psp = upstream(*MLM, name="megatron.core.packed_seq_params")
    upstream(REPO, COMMIT, PACKING, name=PACKING[:-3].replace("/", "."))
    permissive = common.permissive_stub("megatron", "loguru", "omegaconf", "skyrl")
    utils = upstream(REPO, COMMIT, UTILS, name=UTILS[:-3].replace("/", "."))
    wrapper = upstream(REPO, COMMIT, WRAPPER, name=WRAPPER[:-3].replace("/", "."))
    return utils, wrapper, psp, permissive


def stubs(permissive):
    return ["megatron.core.parallel_state: get_tensor_model_parallel_world_size, "
            "get_context_parallel_world_size/rank as configured (no process groups)",
            "megatron.core.packed_seq_params: the real file of NVIDIA/Megatron-LM core_v0.19.0",
            f"{PACKING}: the real file at the same commit", *permissive]


def micro_batch(rows, width):
    """`sequences` and `attention_mask` [B, width]: each row's tokens, right-padded with 0."""
    import torch

    seqs = torch.zeros((len(rows), width), dtype=torch.long)
    mask = torch.zeros((len(rows), width), dtype=torch.long)
    for i, r in enumerate(rows):
        seqs[i, : len(r)] = torch.tensor(r)
        mask[i, : len(r)] = 1
    return seqs, mask


def run(case, rows, *, tp_size, mask_key, why):
    utils, wrapper, psp, permissive = load(tp_size)
    sequences, attention_mask = micro_batch(rows, max(len(r) for r in rows) + 2)
    tokens, p = utils.preprocess_packed_seqs(sequences, attention_mask.to(bool), pre_process=True)
    assert isinstance(p, psp.PackedSeqParams) and p.qkv_format == "thd"
    out = {"input_ids": tokens, "cu_seqlens_q": p.cu_seqlens_q, "cu_seqlens_kv": p.cu_seqlens_kv,
           "cu_seqlens_q_padded": p.cu_seqlens_q_padded,
           "cu_seqlens_kv_padded": p.cu_seqlens_kv_padded, "max_seqlen_q": p.max_seqlen_q,
           "max_seqlen_kv": p.max_seqlen_kv}
    if mask_key == "attention_mask":
        out["attention_mask"] = attention_mask
    else:
        out[mask_key] = wrapper._build_packed_valid_mask(attention_mask.to(bool), p)
    meta = {"causal": "true", "pad_token_id": 0, "profile": "skyrl"}
    save_case(STACK, case, out, repo=REPO, commit=COMMIT, file=f"{UTILS}, {PACKING}, {WRAPPER}",
              function=f"preprocess_packed_seqs(sequences, attention_mask.to(bool), "
                       f"pre_process=True) at tp_size={tp_size}, cp_size=1"
                       + ("" if mask_key == "attention_mask" else
                          "; _build_packed_valid_mask(attention_mask.to(bool), packed_seq_params)"),
              input={"rows (token ids of each sequence)": rows, "tp_size": tp_size,
                     "cp_size": 1},
              expected="pass", why=why, metadata=meta,
              notes="Saved the packed tokens, the PackedSeqParams tensors and ints under their "
                    "field names, and " + ("the micro-batch's attention_mask [B, S]"
                                           if mask_key == "attention_mask" else
                                           f"the packed valid mask under `{mask_key}`") + ".",
              stubs=stubs(permissive))


def generate() -> None:
    rows = [[11, 12, 13, 14, 15], [21, 22, 23], [31, 32, 33, 34, 35, 36]]
    run("packed_rows", rows, tp_size=4, mask_key="attention_mask",
        why="Three RL sequences of 5, 3 and 6 tokens at tensor parallelism 4: each slot is "
            "padded with 0 to a multiple of 4 (8, 4, 8), so the packed tokens are [1, 20] and "
            "cu_seqlens_q = cu_seqlens_kv = cu_seqlens_q_padded = [0,8,12,20], max_seqlen 8: the "
            "kernel gets the padded slots, and the real lengths 5, 3, 6 are the rows of the "
            "micro-batch's attention_mask [3, 8]. Valid: the padding ends each slot, so under "
            "causal attention no real token attends to it; useful work is Σ 5², 3², 6² = 70, "
            "not the slots' 144.")
    run("packed_valid_mask", rows, tp_size=4, mask_key="mtp_packed_mask",
        why="The same micro-batch with the wrapper's packed valid mask (_build_packed_valid_mask, "
            "kept as batch['mtp_packed_mask'] for the MTP draft loss): 1.0 on each slot's real "
            "tokens of the [1, 20] layout, 0.0 on the alignment padding. Valid, as above.")
