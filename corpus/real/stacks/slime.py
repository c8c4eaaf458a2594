"""THUDM/slime: the Megatron backend's micro-batch builder `get_batch`
(slime/backends/megatron_utils/data.py, with the real `DataIterator` and `slice_with_cp` of
cp_utils.py) at main 624b824a8, with Megatron Core's real `PackedSeqParams`
(megatron/core/packed_seq_params.py at core_v0.19.0) for the packed-sequence parameters.

How slime feeds it: the rollout data of a DP rank holds per-sample `tokens` (prompt + response
ids, 1-D LongTensors), `total_lengths`, `response_lengths` and `loss_masks` (one value per
response token; 0 on tool-call outputs and the like), and `micro_batch_indices`;
model.py `forward_only` / `train` call `get_batch(data_iterator, keys,
args.data_pad_size_multiplier, args.allgather_cp)` and hand `tokens`, `packed_seq_params` and
`full_loss_masks` to the model; the loss reads the per-sample `unconcat_tokens` and `loss_masks`.

Contract (data.py `get_batch`, 624b824a8):
- default path: each sample is cut by `slice_with_cp` (cp_utils.py) into 2*cp chunks after
  padding it with 0 to a multiple of 2*cp, and the rank keeps chunks r and 2cp-1-r (zigzag per
  sequence); the rank's pieces are concatenated, padded with 0 to a multiple of
  `tp_size * pad_multiplier` as one more `cu_seqlens` segment, and `cu_seqlens` (the rank's
  offsets times `cp_size`, i.e. the **global padded** offsets) is passed as `cu_seqlens_q` and
  `cu_seqlens_kv` of a `PackedSeqParams(qkv_format="thd")` with `max_seqlen_q/kv` = the largest
  padded length; there are no real-length offsets, so a sample's CP padding is part of its slot;
- `tokens` [1, T_rank]; no `labels`: the targets are the next tokens, and `full_loss_masks`
  [1, T_rank] aligns each sample's response loss mask with the logits that predict it
  (`F.pad(loss_mask, (prompt_length - 1, 1))`, "prompt_length-1 left pad, 1 right pad"), sliced
  like the tokens: a shifted loss mask (1 at t = token t+1 is a trained target);
- `allgather_cp` (DSA): the whole stream is concatenated and padded to a multiple of
  `cp * tp * pad_multiplier` (the padding one final segment), `cu_seqlens` is global and **not**
  scaled, and each rank keeps one **contiguous** `chunk(cp_size)` of the stream. The run's flag
  is stated in the rank files' metadata, `cp_layout = contiguous` (the `slime` profile keeps the
  default path's zigzag), and the group is reassembled from the contiguous pieces.

Saved: `tokens`, the PackedSeqParams tensors `cu_seqlens_q`, `cu_seqlens_kv`, `max_seqlen_q`,
`max_seqlen_kv`, and `full_loss_masks` (the per-sample lists are not tensors of the batch).
Every case is read under the built-in `slime` profile, which maps `full_loss_masks` to
`loss_mask` with `labels = "shifted"`: the targets are the next tokens it trains, derived for a
CP group on the reassembled tokens (a rank's own next token is another chunk's).
No bug with a fix touching `get_batch` / `slice_with_cp` was found (#838 widened the final
padding to `tp_size * 128`, #1205 added `full_loss_masks`, #2175 fixed routing replay).
"""

from __future__ import annotations

import sys

from common import save_case, stub, upstream

REPO = "THUDM/slime"
STACK = "slime"
COMMIT = "624b824a898ab0ec1fcb4d373004c7f3852bf515"
DATA = "slime/backends/megatron_utils/data.py"
CP_UTILS = "slime/backends/megatron_utils/cp_utils.py"
MLM = ("NVIDIA/Megatron-LM", "core_v0.19.0", "megatron/core/packed_seq_params.py")


def load(cp_size, cp_rank, tp_size=1):
    mpu = stub("megatron.core.mpu", get_context_parallel_world_size=lambda: cp_size,
               get_context_parallel_rank=lambda: cp_rank,
               get_tensor_model_parallel_world_size=lambda: tp_size,
               get_virtual_pipeline_model_parallel_world_size=lambda: None)
    for name in ("megatron", "slime", "slime.utils", "slime.backends",
                 "slime.backends.megatron_utils"):
        mod = stub(name)
        mod.__path__ = []
        sys.modules[name] = mod
    core = stub("megatron.core", mpu=mpu)
    core.__path__ = []
    sys.modules["megatron.core"] = core
    sys.modules["megatron.core.mpu"] = mpu
    psp = upstream(*MLM, name="megatron.core.packed_seq_params")
    sys.modules["slime.utils.accelerator"] = stub(
        "slime.utils.accelerator", current_device=lambda: "cpu", device=lambda: "cpu")
    sys.modules["slime.utils"].accelerator = sys.modules["slime.utils.accelerator"]
    sys.modules["slime.utils.types"] = stub("slime.utils.types", RolloutBatch=dict)
    upstream(REPO, COMMIT, CP_UTILS, name="slime.backends.megatron_utils.cp_utils")
    data = upstream(REPO, COMMIT, DATA, name="slime.backends.megatron_utils.data")
    return data, psp


STUBS = ["megatron.core.mpu: get_context_parallel_world_size/rank, "
         "get_tensor_model_parallel_world_size as configured (no process groups)",
         "slime.utils.accelerator: current_device()/device() -> 'cpu'",
         "slime.utils.types.RolloutBatch -> dict (a type alias)",
         "megatron.core.packed_seq_params: the real file of NVIDIA/Megatron-LM core_v0.19.0"]

def rollout(samples):
    """Per-sample rollout fields: (prompt ids, response ids, response loss mask)."""
    import torch

    return {
        "tokens": [torch.tensor(p + r, dtype=torch.long) for p, r, _ in samples],
        "total_lengths": [len(p) + len(r) for p, r, _ in samples],
        "response_lengths": [len(r) for _, r, _ in samples],
        "loss_masks": [torch.tensor(m, dtype=torch.int) for _, _, m in samples],
        "micro_batch_indices": [list(range(len(samples)))],
    }


def run(case, samples, *, cp, pad_multiplier, allgather_cp=False, why, notes="", pending=None):
    """Saves what get_batch returns on every CP rank; `allgather_cp` states the contiguous
    layout in the metadata (`cp_layout`), as the run's --allgather-cp flag says it."""
    keys = ["tokens", "total_lengths", "response_lengths", "loss_masks"]
    for r in range(cp):
        data, psp = load(cp, r)
        it = data.DataIterator(rollout(samples), rollout(samples)["micro_batch_indices"])
        batch = data.get_batch(it, keys, pad_multiplier, allgather_cp)
        p = batch["packed_seq_params"]
        assert isinstance(p, psp.PackedSeqParams) and p.qkv_format == "thd"
        out = {"tokens": batch["tokens"], "cu_seqlens_q": p.cu_seqlens_q,
               "cu_seqlens_kv": p.cu_seqlens_kv, "max_seqlen_q": p.max_seqlen_q,
               "max_seqlen_kv": p.max_seqlen_kv, "full_loss_masks": batch["full_loss_masks"]}
        meta = {"causal": "true", "pad_token_id": 0, "loss_mask_convention": "shifted",
                "profile": "slime"}
        name = case
        if cp > 1:
            meta.update(cp_size=cp, cp_rank=r)
            if allgather_cp:
                meta.update(cp_layout="contiguous")
            name = f"{case}/rank{r}"
        save_case(STACK, name, out, repo=REPO, commit=COMMIT, file=f"{DATA}, {CP_UTILS}",
                  function=f"get_batch(DataIterator(rollout, [[0..{len(samples) - 1}]]), {keys}, "
                           f"pad_multiplier={pad_multiplier}, allgather_cp={allgather_cp})"
                           + (f" on CP rank {r} of {cp}" if cp > 1 else ""),
                  input={"samples (prompt, response, response loss mask)": samples, "cp_size": cp,
                         "tp_size": 1},
                  expected="pass", why=why, metadata=meta,
                  notes=("Saved the PackedSeqParams tensors and ints under their field names; "
                         "unconcat_tokens, loss_masks, total_lengths and response_lengths are "
                         "per-sample lists. " + notes),
                  stubs=STUBS, pending=pending)


def generate() -> None:
    # (prompt, response, response loss mask)
    samples = [([1, 11, 12], [13, 14, 2], [1, 1, 1]),
               ([1, 21, 22, 23, 24], [25, 2], [1, 1]),
               ([1, 31], [32, 33, 34, 35, 2], [1, 1, 0, 1, 1])]
    run("thd_cp1", samples, cp=1, pad_multiplier=8,
        why="Three RL samples (6, 7 and 7 tokens) without CP, data_pad_size_multiplier 8: "
            "tokens [1, 24] = the 20 tokens then 4 pads (id 0) as one final cu_seqlens segment: "
            "cu_seqlens_q = cu_seqlens_kv = [0,6,13,20,24], max_seqlen 7. full_loss_masks puts "
            "each response mask at the logits that predict it: sample 0 [0,0,1,1,1,0] (the "
            "prompt's last token predicts the first response token; the EOS predicts nothing), "
            "sample 2 keeps its 0 (a masked response token). Valid.")
    run("thd_cp2", samples, cp=2, pad_multiplier=4,
        why="The same samples with context parallelism 2: each sample is padded with 0 to a "
            "multiple of 4 (6 -> 8, 7 -> 8) and cut into 4 chunks, rank r keeping chunks r and 3-r; "
            "each rank holds 2+2 tokens per sample = 12, padded to a multiple of 4 (no pad "
            "needed); cu_seqlens = rank offsets [0,4,8,12] * 2 = [0,8,16,24] (the global padded "
            "lengths), max_seqlen 8. full_loss_masks is padded and sliced the same way. Valid: "
            "the standard per-sequence zigzag of TransformerEngine's THD context parallelism.",
        notes="The CP padding of each sample sits inside its cu_seqlens slot (no real-length "
              "offsets exist): pad id 0, loss mask 0, after the sample's real tokens.")
    run("thd_allgather_cp2", samples, cp=2, pad_multiplier=4, allgather_cp=True,
        why="--allgather-cp (DSA mode) with CP 2: the three samples are concatenated (20 tokens) "
            "and padded to a multiple of cp * pad_multiplier = 8 (24, the 4 pads a final "
            "segment), cu_seqlens [0,6,13,20,24] global, and rank r keeps the contiguous tokens "
            "[12r, 12r+12). Valid by slime's design (the DSA attention all-gathers the keys). "
            "The run's --allgather-cp is stated in the metadata as cp_layout = contiguous: "
            "slime's default CP path is the per-sample zigzag (thd_cp2).")
