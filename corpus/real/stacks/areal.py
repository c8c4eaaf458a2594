"""inclusionAI/AReaL: packed micro-batches (areal/utils/data.py) and the Megatron context-parallel
zigzag split (areal/engine/megatron_utils/packed_context_parallel.py), run at pinned commits.

Pipeline, as MegatronEngine runs it for SFT (spec: /work/shared/reference/open-instruct-and-areal.md
Part 2 §2.2-2.3):
1. `LMEngine._train_lm` (areal/trainer/sft/lm_engine.py) pre-rolls the 2-D `loss_mask` per row
   (run for real: a fake engine captures what `train_batch` receives);
2. `amend_position_ids`, `pack_tensor_dict` (2-D rows -> one packed row + `cu_seqlens`);
3. `pad_mb_list` -> `pad_packed_tensor_dict`: every sequence padded to a multiple of
   `2*cp*tp`, then one dummy tail sequence up to a multiple of 256 (input 0, loss_mask 0,
   positions arange);
4. per CP rank: `preprocess_packed_seqs_context_parallel` (local input_ids + PackedSeqParams
   with the padded cu as both real and padded offsets) and, for the labels,
   `split_packed_seqs_for_context_parallel(torch.roll(padded input_ids, -1))`
   (megatron_engine.py forward_step: roll first, then split) and the split loss_mask.

AReaL's label convention: labels are the ids rolled by -1 (shifted), with **no -100**; what is
trained is said by the pre-rolled `loss_mask` (1 = the label at this position counts). Padding
is said by `loss_mask` 0 and by `padding_length` / `old_cu_seqlens` that the engine keeps next
to the padded dict (MicroBatchList); the kernel gets the padded cu as the real cu.
"""

from __future__ import annotations

import dataclasses
import logging
import types

import torch

from common import expect_group, save_case, stub, upstream

REPO = "inclusionAI/AReaL"
STACK = "areal"
PCP = "areal/engine/megatron_utils/packed_context_parallel.py"
DATA = "areal/utils/data.py"
LM = "areal/trainer/sft/lm_engine.py"


class _CP:
    """megatron.core.parallel_state stand-in: the CP rank and size a rank would see."""

    tp, cp, rank = 1, 1, 0


def _mpu():
    return stub(
        "megatron.core.parallel_state",
        get_tensor_model_parallel_world_size=lambda: _CP.tp,
        get_context_parallel_world_size=lambda: _CP.cp,
        get_context_parallel_rank=lambda: _CP.rank,
        get_context_parallel_group=lambda: None,
        get_data_parallel_group=lambda *a, **k: None,
        is_pipeline_last_stage=lambda *a, **k: True,
    )


@dataclasses.dataclass
class PackedSeqParams:  # megatron.core.packed_seq_params stand-in (a plain record)
    qkv_format: str = None
    cu_seqlens_q: torch.Tensor = None
    cu_seqlens_kv: torch.Tensor = None
    cu_seqlens_q_padded: torch.Tensor = None
    cu_seqlens_kv_padded: torch.Tensor = None
    max_seqlen_q: int = None
    max_seqlen_kv: int = None


def _identity_decorator(*a, **k):
    def wrap(fn):
        return fn
    return wrap


class _Any:
    def __init__(self, *a, **k):
        pass


def load(commit: str):
    """(data, pcp, lm) modules at `commit`, and the list of stubbed imports."""
    math_mod = upstream(REPO, commit, "areal/utils/math.py")
    utils = stub("areal.utils")
    utils.__path__ = []
    utils.logging = stub("areal.utils.logging", getLogger=lambda name: logging.getLogger(name))
    utils.seqpack = stub("areal.utils.seqpack", get_allocate_fn=lambda *a, **k: None)
    utils.math = math_mod
    utils.stats_tracker = stub("areal.utils.stats_tracker", scope_func_wrapper=_identity_decorator,
                               scalar=lambda **k: None, denominator=lambda **k: None,
                               stat=lambda *a, **k: None)
    utils.perf_tracer = stub("areal.utils.perf_tracer", trace_perf=_identity_decorator)
    areal = stub("areal")
    areal.__path__ = []
    mc = stub("megatron.core")
    mc.parallel_state = _mpu()
    stubs = {
        "areal": areal,
        "areal.utils": utils,
        "areal.utils.logging": utils.logging,
        "areal.utils.seqpack": utils.seqpack,
        "areal.utils.math": math_mod,
        "areal.utils.stats_tracker": utils.stats_tracker,
        "areal.utils.perf_tracer": utils.perf_tracer,
        "areal.api": stub("areal.api", TrainEngine=object),
        "areal.api.cli_args": stub("areal.api.cli_args", MicroBatchSpec=_Any, NormConfig=_Any),
        "areal.infra": stub("areal.infra", TrainController=_Any),
        "areal.infra.platforms": stub("areal.infra.platforms", current_platform=None),
        "areal.infra.rpc": stub("areal.infra.rpc"),
        "areal.infra.rpc.serialization": stub("areal.infra.rpc.serialization", serialize_value=lambda v: v),
        "areal.experimental": stub("areal.experimental"),
        "areal.experimental.training_service": stub("areal.experimental.training_service"),
        "areal.experimental.training_service.controller": stub("areal.experimental.training_service.controller"),
        "areal.experimental.training_service.controller.controller": stub(
            "areal.experimental.training_service.controller.controller", GatewayTrainController=_Any),
        "einops": stub("einops", rearrange=None),
        "torchdata": stub("torchdata"),
        "torchdata.stateful_dataloader": stub("torchdata.stateful_dataloader", StatefulDataLoader=_Any),
        "megatron": stub("megatron"),
        "megatron.core": mc,
        "megatron.core.parallel_state": mc.parallel_state,
        "megatron.core.packed_seq_params": stub("megatron.core.packed_seq_params", PackedSeqParams=PackedSeqParams),
    }
    data = upstream(REPO, commit, DATA, stubs=stubs)
    utils.data = data
    sys_stub = {"areal.utils.data": data}
    pcp = upstream(REPO, commit, PCP, stubs=sys_stub)
    lm = upstream(REPO, commit, LM, stubs=sys_stub)
    names = sorted(k for k in stubs if k != "areal.utils.math") + [
        "areal.utils.math, areal.utils.data: the real files at the same commit"]
    return data, pcp, lm, names


def rows(seqs, loss, S):
    """2-D right-padded SFT rows: input_ids, attention_mask, loss_mask (ints)."""
    B = len(seqs)
    ids = torch.zeros(B, S, dtype=torch.long)
    att = torch.zeros(B, S, dtype=torch.long)
    lm = torch.zeros(B, S, dtype=torch.long)
    for i, (s, m) in enumerate(zip(seqs, loss)):
        ids[i, : len(s)] = torch.tensor(s)
        att[i, : len(s)] = 1
        lm[i, : len(m)] = torch.tensor(m)
    return {"input_ids": ids, "attention_mask": att, "loss_mask": lm}


def prepared(data_mod, lm_mod, batch, *, seq_align_to, pad_to_maximum=False, max_tokens_per_mb=None):
    """The real _train_lm roll, amend_position_ids, pack_tensor_dict and pad_mb_list."""
    captured = {}

    class FakeEngine:
        def train(self):
            pass

        def train_batch(self, input_, loss_fn, loss_weight_fn):
            captured.update(input_)
            return {}

    lm_mod.LMEngine(FakeEngine())._train_lm(dict(batch))
    inp = data_mod.amend_position_ids(dict(captured))
    mb = data_mod.pack_tensor_dict(inp)
    total = int(mb["cu_seqlens"][-1])
    spec = types.SimpleNamespace(max_tokens_per_mb=max_tokens_per_mb)
    mbl = types.SimpleNamespace(mbs=[mb], group_lens=[total], mb_spec=spec)
    mbl = data_mod.pad_mb_list(mbl, pad_value=0.0, pad_to_maximum=pad_to_maximum, seq_align_to=seq_align_to)
    padded = dict(mbl.padded_mbs[0])
    padded["max_seqlen"] = int(padded["max_seqlen"])  # as MegatronEngine._prepare_mb_list does
    return captured, mb, padded, mbl


def save_padded(case, commit, padded, mbl, *, inp, expected, why, bug=None, stubs, metadata, notes="", function):
    out = dict(padded)
    out["padding_length"] = int(mbl.padding_lengths[0])
    if getattr(mbl, "old_cu_seqlens_list", None):
        out["old_cu_seqlens"] = mbl.old_cu_seqlens_list[0]
    save_case(STACK, case, out, repo=REPO, commit=commit, file=DATA, function=function, input=inp,
              expected=expected, why=why, bug=bug, metadata=metadata, stubs=stubs,
              notes=("padding_length and old_cu_seqlens are pad_packed_tensor_dict's other return values "
                     "(MicroBatchList.padding_lengths / old_cu_seqlens_list), saved under the "
                     "MicroBatchItem names. " + notes).strip())


def cp_group(group, commit, batch, *, C=2, rank_expected=None, group_expected="pass", why, bug=None, notes=""):
    data, pcp, lm, stubs = load(commit)
    _CP.cp, _CP.tp = C, 1
    captured, mb, padded, mbl = prepared(data, lm, batch, seq_align_to=2 * C)
    cu = padded["cu_seqlens"]
    rolled = torch.roll(padded["input_ids"], shifts=-1, dims=-1)  # megatron_engine.py forward_step
    inp = {"rows": batch, "cp_size": C, "tp_size": 1, "padded_cu_seqlens": cu, "old_cu_seqlens": mbl.old_cu_seqlens_list[0]}
    for r in range(C):
        _CP.rank = r
        local_ids, psp = pcp.preprocess_packed_seqs_context_parallel(padded["input_ids"], cu)
        labels = pcp.split_packed_seqs_for_context_parallel(rolled, cu)
        loss_mask = pcp.split_packed_seqs_for_context_parallel(padded["loss_mask"], cu)
        out = {
            "input_ids": local_ids,
            "labels": labels,
            "loss_mask": loss_mask,
            "cu_seqlens_q": psp.cu_seqlens_q,
            "cu_seqlens_kv": psp.cu_seqlens_kv,
            "cu_seqlens_q_padded": psp.cu_seqlens_q_padded,
            "cu_seqlens_kv_padded": psp.cu_seqlens_kv_padded,
            "max_seqlen_q": int(psp.max_seqlen_q),
            "max_seqlen_kv": int(psp.max_seqlen_kv),
            "cp_rank": r,
            "cp_size": C,
        }
        exp = (rank_expected or {}).get(r, "pass")
        save_case(
            STACK, f"{group}/rank{r}", out, repo=REPO, commit=commit, file=PCP,
            function="preprocess_packed_seqs_context_parallel (input_ids, PackedSeqParams) + "
                     "split_packed_seqs_for_context_parallel(roll(padded input_ids, -1)) (labels) and "
                     "(padded loss_mask); after LMEngine._train_lm, amend_position_ids, pack_tensor_dict, pad_mb_list",
            input=inp, expected=exp, bug=bug if exp != "pass" else None,
            why=why if exp != "pass" else
            f"CP rank {r} of {C}: its zigzag chunks (r and 2C-1-r of each padded sequence), labels rolled on "
            "the full padded pack before the split (megatron_engine.py forward_step), loss_mask split alike.",
            metadata={"causal": "true", "cp_size": C, "profile": STACK},
            stubs=stubs,
            notes="`labels` is cp_inputs['_cp_local_labels'] (the key the loss reads), saved as `labels`; "
                  "labels are shifted ids with no -100, `loss_mask` (pre-rolled, split) says which count. "
                  "cu_seqlens_*/max_seqlen_* are the PackedSeqParams the kernel gets (global, padded = real). "
                  "AReaL passes the global unsplit position_ids to the model (mcore computes THD RoPE from "
                  "packed_seq_params), so no per-rank position_ids exist and none are saved. "
                  "The roll before the split is one torch.roll call written here (megatron_engine.py "
                  "forward_step: rolled_ids = torch.roll(padded_mb['input_ids'], shifts=-1, dims=-1)). " + notes,
        )
    expect_group(STACK, group, expected=group_expected, why=why, bug=bug, repo=REPO, commit=commit, file=PCP,
                 function="preprocess_packed_seqs_context_parallel + split_packed_seqs_for_context_parallel")
    return padded, mbl, stubs


def generate() -> None:
    # The reference example (Part 2, §2.4): rows of 5 and 3 tokens, prompt masked, token 0 in content.
    sft = rows([[10, 0, 12, 13, 14], [20, 21, 22]], [[0, 0, 1, 1, 1], [0, 1, 1]], S=6)
    for commit in ("d58cca56f", "95e2379d0"):
        padded, mbl, stubs = cp_group(
            f"cp2_{commit}", commit, sft,
            why=f"AReaL@{commit} CP=2: sequences 5 and 3 padded to 8 and 4 (multiples of 2*cp), a 244-token "
                "dummy tail to 256; each rank holds chunks r and 3-r of every slot; labels = split(roll(ids)) "
                "and the pre-rolled loss_mask is 0 at every sequence end, padding and the dummy tail. Valid.",
        )
        save_padded(
            f"padded_mb_cp2_{commit}", commit, padded, mbl, inp={"rows": sft, "seq_align_to": 4},
            expected="pass", stubs=stubs, metadata={"cp_size": 2, "causal": "true", "profile": STACK},
            function="LMEngine._train_lm (loss_mask roll) + amend_position_ids + pack_tensor_dict + "
                     "pad_mb_list(seq_align_to=2*cp=4) -> pad_packed_tensor_dict",
            why="The full padded micro-batch before the CP split: cu_seqlens [0,8,12,256] (every slot a "
                "multiple of 2*cp=4), input/loss_mask 0 on the padding, position_ids restart per slot "
                "(also over padding and the dummy tail). No labels tensor exists at this stage. Valid.",
        )

    # AR-P3: a row that fills S and is trained from its first token: the 2-D roll wraps
    # loss_mask[0] = 1 onto the last position, so the last token of each sequence is trained on
    # the next packed token (the next sequence's first token, or the dummy tail's 0).
    full = rows([[30, 31, 32, 33], [40, 41, 42, 43]], [[1, 1, 1, 1], [1, 1, 1, 1]], S=4)
    cp_group(
        "cp2_full_rows_cross_doc_95e2379d0", "95e2379d0", full,
        group_expected=["cross-doc-label"], bug="AR-P3 (latent, still at HEAD)",
        why="Rows that fill S=4 with loss_mask[0]=1: LMEngine._train_lm rolls the 2-D mask per row, so the "
            "last position gets mask[0]=1, while the label there is the next packed token "
            "(roll over the whole pack): sequence 0's last token 33 is trained to predict 40 (the next "
            "document) and sequence 1's last token 43 to predict the dummy tail's 0. Both positions are "
            "on rank 0 (chunk 3-0 of each 4-token slot).",
        notes="Rank files carry no verdict of their own (the corpus convention of examples/batches "
              "cp_rolled_after_split: checks run on the reassembled group). The defect is at segment "
              "boundaries only, which is cross-doc-label's rule (label-targets: each valid label is the next "
              "token of the stream, which 40 and 0 are).",
    )

    # AReaL #1103: pad_packed_tensor_dict appends pad_to_length to cu_seqlens even when
    # pad_length == 0 (FSDP engine, pad_to_maximum, the pack exactly at max_tokens_per_mb).
    rows1103 = rows([[50, 51, 52, 53], [60, 0, 62], [70, 71, 72, 73, 74]], [[0, 1, 1, 1], [0, 1, 1], [0, 0, 1, 1, 1]], S=5)
    for commit, exp, why in (
        ("be621da55^", ["mock-nonempty"],
         "AReaL #1103 before its fix: the FSDP path (pad_mb_list(pad_to_maximum=True), no seq_align_to) "
         "with 12 tokens and max_tokens_per_mb=12 gives pad_length 0, yet pad_packed_tensor_dict still "
         "appends pad_to_length: cu_seqlens [0,4,7,12,12], a zero-length dummy segment (crashes "
         "causal conv1d kernels)."),
        ("be621da55", "pass",
         "The fix (#1104): pad_length == 0 returns the data unchanged: cu_seqlens [0,4,7,12], no dummy. Valid."),
    ):
        data, pcp, lm, stubs = load(commit)
        _CP.cp, _CP.tp, _CP.rank = 1, 1, 0
        captured, mb, padded, mbl = prepared(data, lm, rows1103, seq_align_to=None, pad_to_maximum=True,
                                             max_tokens_per_mb=12)
        save_padded(
            f"pad_to_maximum_exact_{commit.replace('^', 'p')}", commit, padded, mbl,
            inp={"rows": rows1103, "pad_to_maximum": True, "max_tokens_per_mb": 12},
            expected=exp, why=why, bug="AReaL #1103" if exp != "pass" else None, stubs=stubs,
            metadata={"causal": "true", "profile": STACK},
            function="LMEngine._train_lm + amend_position_ids + pack_tensor_dict + "
                     "pad_mb_list(pad_to_maximum=True) -> pad_packed_tensor_dict",
            notes="Before d58cca56f LMEngine._train_lm does not roll loss_mask: here loss_mask[t] marks "
                  "token t as a target (unshifted) and compute_packed_sft_loss rolls it on the packed row.",
        )

    # AR-B3: where the loss_mask is rolled. Before d58cca56f compute_packed_sft_loss rolled the
    # *packed* 1-D mask (and labels = roll(packed input_ids)), so a sequence whose first token has
    # loss_mask 1 makes the previous sequence's last token predict it. d58cca56f rolls each 2-D row
    # in LMEngine._train_lm instead. Saved: the packed micro-batch the loss receives (orig_mb).
    rows_b3 = rows([[81, 82, 83], [84, 85]], [[1, 1, 1], [1, 1]], S=4)
    for commit, exp, conv, why in (
        ("d58cca56f^", ["cross-doc-label"], "unshifted",
         "AR-B3 before d58cca56f: loss_mask is per token (unshifted) and compute_packed_sft_loss rolls the "
         "packed 1-D mask; sequence 1's first token (84) has loss_mask 1, so sequence 0's last token 83 is "
         "trained to predict 84, the next document (and 85 wraps to 81)."),
        ("d58cca56f", "pass", "shifted",
         "d58cca56f: LMEngine._train_lm rolls each 2-D row before packing, so the pre-rolled mask is 0 at "
         "both sequence ends ([1,1,0,1,0]): no cross-document target. Valid."),
    ):
        data, pcp, lm, stubs = load(commit)
        _CP.cp, _CP.tp, _CP.rank = 1, 1, 0
        captured, mb, padded, mbl = prepared(data, lm, rows_b3, seq_align_to=None)
        out = dict(mb)
        save_case(
            STACK, f"packed_mb_first_token_trained_{commit.replace('^', 'p')}", out, repo=REPO,
            commit=commit, file=DATA,
            function="LMEngine._train_lm + amend_position_ids + pack_tensor_dict (the orig_mb the loss gets)",
            input={"rows": rows_b3}, expected=exp, why=why, bug="AR-B3" if exp != "pass" else None,
            metadata={"causal": "true", "profile": STACK, "loss_mask_convention": conv},
            stubs=stubs,
            notes="No labels tensor: the loss uses roll(input_ids, -1) on this packed row. "
                  "loss_mask_convention (metadata) says whether loss_mask[t] marks token t (unshifted) or "
                  "the prediction at t of token t+1 (shifted, pre-rolled).",
        )
