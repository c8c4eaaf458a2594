"""alibaba/ROLL: the Megatron strategy's sequence packing (`MegatronInferStrategy._pack_sequences`,
called by `inner_forward_step`, roll/distributed/strategy/megatron_strategy.py, with the CP split
`PretrainedModel.get_batch_on_this_cp_rank` of ROLL's mcore_adapter/src/mcore_adapter/models/
model_factory.py) and the FSDP2 strategy's padded rows with Ulysses CP
(`FSDP2InferStrategy.get_feature_on_cp_rank`, `FSDP2TrainStrategy.get_labels_on_cp_rank`,
roll/distributed/strategy/fsdp2_strategy.py), both fed by the SFT pipeline's encoding
(`get_encode_function`, roll/pipeline/sft/sft_pipeline.py, the `chatml` template of
roll/datasets/chat_template.py) and collator (`DataCollatorForSFT`, roll/datasets/collator.py),
at main 8eb27cc2d, with Megatron Core's real `PackedSeqParams` (megatron/core/packed_seq_params.py
at core_v0.16.1, within mcore_adapter's `megatron-core>=0.15.0,<0.17.0`). Issue 39's blind
protocol: the profiles (`batches/roll/profile.toml`, `profile_fsdp2.toml`) were written from the
code before any batch was made (blind/roll/NOTES.md); this module only runs the code.

Contract (8eb27cc2d):
- SFT rows: `DataCollatorForSFT(padding="max_length", max_length, padded_keys=["input_ids",
  "attention_mask"])`: right-padded `input_ids`, `attention_mask`, `position_ids =
  clip(cumsum(attention_mask) - 1, 0)`, `labels` padded with -100 and shifted per row
  (`labels[:, 1:] ++ [-100]`): `labels[t]` is the target of `logits[t]`, each row's last real
  label -100;
- Megatron packing: each row's `attention_mask.sum()` real tokens start a slot padded with 0
  (labels -100, loss_mask 0) to a multiple of `lcm(16, 2·cp·tp)` (`lcm(16, tp)` at cp 1); at
  cp > 1 every slot is split by `get_batch_on_this_cp_rank` into 2·cp chunks, rank r keeping r
  and 2·cp−1−r; the kernel gets only the slots as offsets (`PackedSeqParams(cu_seqlens_q =
  cu_seqlens_kv = cu_seqlens_q_padded = cu_seqlens_kv_padded = cu_seqlens_padded)`, global),
  `max_seqlen` the widest slot; the model gets `attention_mask=None`, the packed `labels` and
  `loss_mask` (`labels != -100`, or the RL `response_mask`);
- FSDP2: the padded rows as the collator returns them; with Ulysses CP rank r keeps the columns
  `[r·S/cp, (r+1)·S/cp)` of `input_ids`, `attention_mask`, `position_ids` and of the labels.

Run: `inner_forward_step` is called on a stand-in strategy (`use_sequence_packing=True`, the real
`_pack_sequences`, `_get_pad_factor`, `_get_feature_on_this_cp_rank` bound to it, its model's
`get_batch_on_this_cp_rank` the real one of model_factory.py) with a stand-in model that records
what it is called with and stops the step: what is saved is exactly what the Megatron model gets.
The FSDP2 slices are the real `get_feature_on_cp_rank` / `get_labels_on_cp_rank` on a stand-in
self holding `worker.rank_info` (cp_size, cp_rank).

Saved (Megatron): `input_ids`, `labels` (SFT), `loss_mask`, the PackedSeqParams tensors and ints
under their field names, and the micro-batch's `attention_mask` [B, S] (the real lengths, as the
profile's `offsets = "padded-slots"` reads them); metadata `profile = profile.toml`,
`cp_rank`/`cp_size` on rank files, `loss_mask_convention = unshifted` on the RL case (no labels;
`response_mask[t] = 1` on response token t). (FSDP2): `input_ids`, `attention_mask`,
`position_ids`, `labels`; `profile = profile_fsdp2.toml`, the tokenizer's `pad_token_id`.

The tokenizer is a word-level vocabulary over the examples (stacks/_word_tokenizer.py) with
Qwen-style special tokens (`<|endoftext|>` 0 the pad, `<|im_start|>` 1, `<|im_end|>` 2 the EOS).

Bug reproduction: none. blind/roll/NOTES.md ("Batches to generate" 5) records the search:
`git log -L` on `_pack_sequences` and `DataCollatorForSFT`, and ROLL's issues and PRs, found no
fix of a wrong packed batch.
"""

from __future__ import annotations

import functools
import sys
import types

import common
from common import expect_group, save_case, stub, upstream

REPO = "alibaba/ROLL"
STACK = "roll"
COMMIT = "8eb27cc2dc34c4d1310b169d9b86d339004d811a"
MEGATRON = "roll/distributed/strategy/megatron_strategy.py"
FACTORY = "mcore_adapter/src/mcore_adapter/models/model_factory.py"
FSDP2 = "roll/distributed/strategy/fsdp2_strategy.py"
COLLATOR = "roll/datasets/collator.py"
PIPELINE = "roll/pipeline/sft/sft_pipeline.py"
TEMPLATE = "roll/datasets/chat_template.py"
PSP = ("NVIDIA/Megatron-LM", "core_v0.16.1", "megatron/core/packed_seq_params.py")
PROFILE = "profile.toml"
PROFILE_FSDP2 = "profile_fsdp2.toml"
MAX_LENGTH = 32
SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]

SFT = {"instruction": ["Add two and two.",
                       "Name three colours that appear in a rainbow after a summer storm.",
                       "Write one short sentence about the sea."],
       "output": ["Four.",
                  "Red, orange and violet.",
                  "The grey sea rolled slowly under a low sky, and gulls cried over the harbour."]}


# Blind run (issue 39): what thdcheck got wrong, with what it lacks (blind/roll/NOTES.md).
PENDING_FSDP2 = (
    "false alarm position-ids, mask, mock-marked: with position_ids = clip(cumsum(attention_mask) "
    "- 1, 0) beside the padding mask, the position-restarts reader takes the restarts as the "
    "documents: every pad token (its position repeating the row's last real one) becomes a "
    "segment of its own (27 mock segments), which then 'do not restart' (position-ids), are "
    "unmarked (mock-marked), and the mask beside restarts is TRL #3673's (mask). The padding mask "
    "should decide the documents (one per row) and the position ids only be checked on the real "
    "tokens; no fact says so (NOTES 'Cannot state' 5)")


class _Captured(Exception):
    def __init__(self, kwargs):
        super().__init__("model called")
        self.kwargs = kwargs


def _torch_without_pinning():
    """model_factory.py's `torch`, except that `torch.tensor(..., pin_memory=True)` (a host-memory
    pinning of the 2-entry chunk index, which needs a GPU driver) is made without pinning."""
    import torch

    class _Torch(types.ModuleType):
        def __getattr__(self, name):
            return getattr(torch, name)

        @staticmethod
        def tensor(*args, **kwargs):
            kwargs.pop("pin_memory", None)
            return torch.tensor(*args, **kwargs)

    return _Torch("torch")


_LOADED: dict = {}


def _permissive(name: str):
    m = common._PermissiveModule(name)
    m.__path__ = []
    sys.modules[name] = m
    return m


def load():
    """(megatron_strategy, model_factory, fsdp2_strategy, collator, sft_pipeline, psp, mpu)."""
    if _LOADED:
        return _LOADED["mods"]
    perm = common.permissive_stub("megatron", "mcore_adapter", "roll", "ray", "codetiming",
                                  "accelerate", "tensordict", "peft")
    for name in ("megatron", "megatron.core", "mcore_adapter", "roll", "roll.utils"):
        _permissive(name)
    mpu = types.SimpleNamespace(cp=1, tp=1, rank=0)
    mpu_mod = stub("megatron.core.mpu",
                   get_context_parallel_world_size=lambda: mpu.cp,
                   get_tensor_model_parallel_world_size=lambda: mpu.tp,
                   get_context_parallel_rank=lambda: mpu.rank)
    sys.modules["megatron.core"].mpu = mpu_mod
    sys.modules["megatron.core.mpu"] = mpu_mod
    cpu = types.SimpleNamespace(device_type="cpu")
    sys.modules["roll.platforms"] = stub("roll.platforms", current_platform=cpu)
    sys.modules["mcore_adapter.platforms"] = stub("mcore_adapter.platforms", current_platform=cpu)
    psp = upstream(*PSP, name="megatron.core.packed_seq_params")
    upstream(REPO, COMMIT, "roll/utils/constants.py", name="roll.utils.constants")
    upstream(REPO, COMMIT, "roll/utils/prompt.py", name="roll.utils.prompt")
    upstream(REPO, COMMIT, TEMPLATE, name="roll.datasets.chat_template")
    collator = upstream(REPO, COMMIT, COLLATOR, name="roll.datasets.collator")
    pipeline = upstream(REPO, COMMIT, PIPELINE, name="roll.pipeline.sft.sft_pipeline")
    strategy = upstream(REPO, COMMIT, MEGATRON, name="roll.distributed.strategy.megatron_strategy")
    factory = upstream(REPO, COMMIT, FACTORY, name="mcore_adapter.models.model_factory")
    factory.torch = _torch_without_pinning()
    fsdp2 = upstream(REPO, COMMIT, FSDP2, name="roll.distributed.strategy.fsdp2_strategy")
    stubs = ["megatron.core.mpu: get_context_parallel_world_size / get_tensor_model_parallel_"
             "world_size / get_context_parallel_rank as configured (no process groups)",
             f"megatron.core.packed_seq_params: the real file of NVIDIA/Megatron-LM {PSP[1]}",
             "roll.platforms / mcore_adapter.platforms: current_platform.device_type = 'cpu'",
             f"{MEGATRON}, {FACTORY}, {FSDP2}, {COLLATOR}, {PIPELINE}, {TEMPLATE}, "
             f"roll/utils/constants.py, roll/utils/prompt.py: the real files at {COMMIT[:9]}",
             "model_factory.torch: torch, but torch.tensor drops pin_memory=True (host pinning of "
             "get_batch_on_this_cp_rank's 2-entry chunk index needs a GPU driver)",
             "the strategy (self): a SimpleNamespace with use_sequence_packing=True, "
             "is_multimodal=False, enable_router_replay=False, the real _pack_sequences, "
             "_get_pad_factor, _get_feature_on_this_cp_rank, inner_forward_step bound to it, and "
             "models_unwrapped[0] = a model whose config.context_parallel_size is cp and whose "
             "get_batch_on_this_cp_rank is model_factory.PretrainedModel's",
             "the Megatron model: a callable that records its keyword arguments and stops the "
             "step (what it is called with is saved)", *perm]
    _LOADED["mods"] = (strategy, factory, fsdp2, collator, pipeline, psp, mpu, stubs)
    return _LOADED["mods"]


def tokenizer():
    from stacks import _word_tokenizer as wt

    texts = SFT["instruction"] + SFT["output"] + ["user assistant", "the cat sat on a mat"]
    tok = wt.hf_tokenizer(texts, SPECIALS, "<|endoftext|>", pad="<|endoftext|>", eos="<|im_end|>")
    tok.model_input_names = ["input_ids", "attention_mask"]
    return tok


def tokenizer_desc() -> str:
    from stacks import _word_tokenizer as wt

    return (wt.description(SPECIALS) + "; pad <|endoftext|> (0), eos <|im_end|> (2), "
            "model_input_names input_ids, attention_mask (Qwen-style)")


def sft_rows():
    """The SFT pipeline's encoding (chatml) and DataCollatorForSFT, as SFTPipeline builds them."""
    strategy, factory, fsdp2, collator, pipeline, psp, mpu, stubs = load()
    tok = tokenizer()
    tok.padding_side = "right"
    encode = pipeline.get_encode_function("chatml", tok, "instruction", None, "output")
    enc = encode(SFT)
    features = [{k: enc[k][i] for k in enc} for i in range(len(SFT["output"]))]
    coll = collator.DataCollatorForSFT(tokenizer=tok, padding="max_length", max_length=MAX_LENGTH,
                                       padded_keys=["input_ids", "attention_mask"],
                                       label_pad_token_id=-100)
    batch = dict(coll(features))
    return features, batch


def megatron_step(batch: dict, *, cp: int, rank: int):
    """What `inner_forward_step` hands the Megatron model at CP rank `rank` of `cp`."""
    strategy, factory, fsdp2, collator, pipeline, psp, mpu, stubs = load()
    mpu.cp, mpu.tp, mpu.rank = cp, 1, rank
    cls = strategy.MegatronInferStrategy
    model = types.SimpleNamespace(config=types.SimpleNamespace(context_parallel_size=cp))
    model.get_batch_on_this_cp_rank = functools.partial(
        factory.PretrainedModel.get_batch_on_this_cp_rank, model)
    self = types.SimpleNamespace(use_sequence_packing=True, is_multimodal=False,
                                 enable_router_replay=False, models_unwrapped=[model])
    for name in ("_pack_sequences", "_get_pad_factor", "_get_feature_on_this_cp_rank",
                 "inner_forward_step"):
        setattr(self, name, types.MethodType(cls.__dict__[name], self))

    def megatron_model(**kwargs):
        raise _Captured(kwargs)

    data = types.SimpleNamespace(batch={k: v.clone() for k, v in batch.items()}, meta_info={},
                                 non_tensor_batch={})
    try:
        self.inner_forward_step(None, iter([data]), megatron_model)
    except _Captured as c:
        kw = c.kwargs
    else:
        raise AssertionError("the model was not called")
    assert kw["attention_mask"] is None and kw["position_ids"] is None
    p = kw["packed_seq_params"]
    assert isinstance(p, psp.PackedSeqParams) and p.qkv_format == "thd"
    out = {"input_ids": kw["input_ids"]}
    if kw["labels"] is not None:
        out["labels"] = kw["labels"]
    out.update({"loss_mask": kw["loss_mask"], "cu_seqlens_q": p.cu_seqlens_q,
                "cu_seqlens_kv": p.cu_seqlens_kv, "cu_seqlens_q_padded": p.cu_seqlens_q_padded,
                "cu_seqlens_kv_padded": p.cu_seqlens_kv_padded, "max_seqlen_q": p.max_seqlen_q,
                "max_seqlen_kv": p.max_seqlen_kv, "attention_mask": batch["attention_mask"]})
    return out


def rl_rows():
    """A right-padded RL micro-batch as `postprocess_generate` (roll/utils/functionals.py) leaves
    it: prompt + response tokens, `attention_mask` 1 on them, `response_mask` 1 on the response
    tokens (`new_response_mask[i][prompt_len:valid_length] = 1`), padding 0 on the right."""
    import torch

    rows = [([11, 12, 13, 14], [15, 16, 17, 2]), ([21, 22], [23, 24, 25, 26, 27, 28, 29, 30, 2]),
            ([31, 32, 33, 34, 35, 36, 37, 38, 39, 40], [41, 2])]
    width = 24
    ids = torch.zeros((len(rows), width), dtype=torch.long)
    am = torch.zeros_like(ids)
    rm = torch.zeros_like(ids)
    for i, (p, r) in enumerate(rows):
        n = len(p) + len(r)
        ids[i, :n] = torch.tensor(p + r)
        am[i, :n] = 1
        rm[i, len(p):n] = 1
    pos = torch.clip(torch.cumsum(am, dim=-1) - 1, min=0)
    return rows, {"input_ids": ids, "attention_mask": am, "position_ids": pos, "response_mask": rm}


def fsdp2_slices(batch: dict, *, cp: int, rank: int) -> dict:
    strategy, factory, fsdp2, collator, pipeline, psp, mpu, stubs = load()
    self = types.SimpleNamespace(worker=types.SimpleNamespace(
        rank_info=types.SimpleNamespace(cp_size=cp, cp_rank=rank)))
    feats = fsdp2.FSDP2InferStrategy.__dict__["get_feature_on_cp_rank"](
        self, batch["input_ids"], batch["attention_mask"], batch["position_ids"])
    feats["labels"] = fsdp2.FSDP2TrainStrategy.__dict__["get_labels_on_cp_rank"](self, batch["labels"])
    return feats


def generate() -> None:
    strategy, factory, fsdp2, collator, pipeline, psp, mpu, stubs = load()
    features, rows = sft_rows()
    # The real lengths, from the encoded examples (before the collator and the packer).
    lens = [len(f["input_ids"]) for f in features]
    assert rows["attention_mask"].sum(-1).tolist() == lens
    slots = [-(-n // 16) * 16 for n in lens]
    sq = sum(n * n for n in lens)
    tok = tokenizer_desc()
    inp = {"examples": SFT, "tokenizer": tok, "template": "chatml",
           "encoded features (get_encode_function)": features,
           "micro-batch (DataCollatorForSFT, max_length 32)": rows}
    fn_rows = ("sft_pipeline.get_encode_function('chatml', tokenizer, 'instruction', None, "
               "'output')(examples) -> DataCollatorForSFT(tokenizer, padding='max_length', "
               f"max_length={MAX_LENGTH}, padded_keys=['input_ids', 'attention_mask'], "
               "label_pad_token_id=-100)(features)")
    mfile = f"{MEGATRON}, {FACTORY}, {COLLATOR}, {PIPELINE}, {TEMPLATE}"

    # ---------------- Megatron packing, SFT, cp 1 ----------------
    out = megatron_step(rows, cp=1, rank=0)
    assert out["cu_seqlens_q"].tolist() == [0] + [sum(slots[:i + 1]) for i in range(len(slots))]
    save_case(STACK, "megatron_sft_cp1", out, repo=REPO, commit=COMMIT, file=mfile,
              function=f"{fn_rows} -> MegatronInferStrategy.inner_forward_step (use_sequence_packing, "
                       "_pack_sequences) at cp 1, tp 1: the Megatron model's arguments",
              input=inp, expected="pass",
              why=f"Three chatml SFT examples of {lens} real tokens in a [3, 32] micro-batch; "
                  f"_pack_sequences pads each to a multiple of lcm(16, 1) = 16 (slots {slots}), "
                  f"packs them into [1, {sum(slots)}] and gives the kernel cu_seqlens_q = "
                  f"cu_seqlens_kv = cu_seqlens_*_padded = the slots' offsets, max_seqlen the widest "
                  f"slot ({max(slots)}); labels (shifted per row by the collator) and loss_mask "
                  f"packed alike, padding -100 / 0. Valid by ROLL's contract: each slot starts "
                  f"with its real tokens, the alignment padding at its end is never attended by a "
                  f"real token (causal) nor a target, no label reaches into the next sample; "
                  f"{sum(lens)} real tokens, useful work Σ s² = {sq} (not the slots' "
                  f"{sum(s * s for s in slots)}).",
              metadata={"profile": PROFILE}, stubs=stubs,
              notes="attention_mask is the micro-batch's [B, S] mask (the real lengths), not an "
                    "argument of the model (it gets attention_mask=None).")

    # ---------------- Megatron packing, SFT, cp 2 ----------------
    for r in range(2):
        out = megatron_step(rows, cp=2, rank=r)
        save_case(STACK, f"megatron_sft_cp2/rank{r}", out, repo=REPO, commit=COMMIT, file=mfile,
                  function=f"{fn_rows} -> MegatronInferStrategy.inner_forward_step at cp_rank={r} "
                           f"of 2, tp 1 (get_batch_on_this_cp_rank per slot)",
                  input=inp, expected="pass",
                  why=f"CP rank {r} of 2: chunks {r} and {3 - r} of each slot's 4 chunks (pad "
                      f"factor lcm(16, 2·2·1) = 16: slots {slots}), global offsets. Read with its "
                      f"cp-group.",
                  metadata={"profile": PROFILE, "cp_rank": r, "cp_size": 2}, stubs=stubs)
    expect_group(STACK, "megatron_sft_cp2", expected="pass", repo=REPO, commit=COMMIT, file=mfile,
                 function="MegatronInferStrategy.inner_forward_step at cp_rank 0 and 1 of 2",
                 why=f"The two ranks' zigzag chunks reassemble the cp-1 pack (slots {slots}, real "
                     f"lengths {lens}): valid, useful work Σ s² = {sq}.")

    # ---------------- Megatron packing, RL micro-batch ----------------
    rl, rl_batch = rl_rows()
    out = megatron_step(rl_batch, cp=1, rank=0)
    assert "labels" not in out
    rl_lens = [len(p) + len(r) for p, r in rl]
    rl_slots = [-(-n // 16) * 16 for n in rl_lens]
    save_case(STACK, "megatron_rl_cp1", out, repo=REPO, commit=COMMIT, file=f"{MEGATRON}, {FACTORY}",
              function="MegatronInferStrategy.inner_forward_step (use_sequence_packing) at cp 1, "
                       "tp 1 on a right-padded RL micro-batch with response_mask: the Megatron "
                       "model's arguments",
              input={"rows (prompt, response) token ids": rl, "micro-batch": rl_batch},
              expected="pass",
              why=f"An RL micro-batch as postprocess_generate leaves it (right padding; "
                  f"response_mask 1 on the response tokens, each ending with the EOS 2): samples "
                  f"of {rl_lens} tokens packed into slots {rl_slots}; no labels (the RL loss is "
                  f"computed per sample on the unpacked output), loss_mask = the packed "
                  f"response_mask (unshifted: 1 on response token t), 0 on the alignment padding. "
                  f"Valid by ROLL's contract; useful work Σ s² = {sum(n * n for n in rl_lens)}.",
              metadata={"profile": PROFILE, "loss_mask_convention": "unshifted"}, stubs=stubs,
              notes="The micro-batch is built here as postprocess_generate (roll/utils/"
                    "functionals.py) returns it (its input_ids, attention_mask, position_ids = "
                    "clip(cumsum(attention_mask) - 1, 0), response_mask); that function needs "
                    "ROLL's DataProto and generation outputs and is not run.")

    # ---------------- FSDP2 padded rows, cp 1 and cp 2 ----------------
    ffile = f"{FSDP2}, {COLLATOR}, {PIPELINE}, {TEMPLATE}"
    fsdp_rows = {k: rows[k] for k in ("input_ids", "attention_mask", "position_ids", "labels")}
    save_case(STACK, "fsdp2_sft_rows", fsdp_rows, repo=REPO, commit=COMMIT, file=ffile,
              function=f"{fn_rows} (the FSDP2 strategy's micro-batch, as _fsdp2_forward and "
                       "op_compute_language_loss read it at cp 1)",
              input=inp, expected="pass",
              why=f"The three examples ({lens} real tokens) as the FSDP2 strategy gets them: one "
                  f"per row, right-padded to 32 with the pad id 0, attention_mask 1 on real "
                  f"tokens, position_ids = clip(cumsum(attention_mask) - 1, 0) (0 .. n-1 on the "
                  f"real tokens, n-1 repeated on the padding), labels shifted per row (the loss "
                  f"does not shift). Valid by ROLL's contract: the padding is masked out of "
                  f"attention and the loss; useful work Σ s² = {sq}.",
              metadata={"profile": PROFILE_FSDP2, "pad_token_id": 0}, stubs=stubs,
              notes="blind/roll/NOTES.md 'Cannot state' 5: the padding's position ids repeat the "
                    "last real position.", pending=PENDING_FSDP2)
    for r in range(2):
        sl = fsdp2_slices(fsdp_rows, cp=2, rank=r)
        save_case(STACK, f"fsdp2_sft_cp2/rank{r}", sl, repo=REPO, commit=COMMIT, file=ffile,
                  function=f"{fn_rows} -> FSDP2InferStrategy.get_feature_on_cp_rank(input_ids, "
                           f"attention_mask, position_ids), FSDP2TrainStrategy.get_labels_on_cp_rank"
                           f"(labels) at cp_rank={r} of 2",
                  input=inp, expected="pass",
                  why=f"Ulysses CP rank {r} of 2: columns [{16 * r}, {16 * r + 16}) of every key. "
                      f"Read with its cp-group.",
                  metadata={"profile": PROFILE_FSDP2, "pad_token_id": 0, "cp_rank": r,
                            "cp_size": 2}, stubs=stubs, pending=PENDING_FSDP2)
    expect_group(STACK, "fsdp2_sft_cp2", expected="pass", repo=REPO, commit=COMMIT, file=ffile,
                 function="get_feature_on_cp_rank / get_labels_on_cp_rank at cp_rank 0 and 1 of 2",
                 why=f"The two contiguous halves reassemble the FSDP2 rows: valid as at cp 1 "
                     f"(useful work Σ s² = {sq}).", pending=PENDING_FSDP2)
