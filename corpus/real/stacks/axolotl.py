"""axolotl-ai-cloud/axolotl: the multipack collators of src/axolotl/utils/collators/batching.py
(`V2BatchSamplerDataCollatorForSeq2Seq` for SFT, `PretrainingBatchSamplerDataCollatorForSeq2Seq`
for pretraining datasets, both over `DataCollatorForSeq2Seq`), run at pinned releases with a
word-level toy tokenizer (the collators only read `pad_token_id`, `padding_side` and call
`tokenizer.pad`).

How axolotl feeds them:
- SFT (`sample_packing: true`): every tokenized sample holds `input_ids`, `attention_mask` (all 1),
  `labels` (unshifted, prompt tokens -100 with the default `train_on_inputs: false`),
  `position_ids` = `range(len)` (utils/trainer.py `add_position_ids`) and `length`; the multipack
  batch sampler groups samples into bins and the collator receives a list of bins (one row each).
  The builder passes `padding=True`, `pad_to_multiple_of = multiple * ceil(sequence_len /
  multiple)` with `pad_to_sequence_len` (core/builders/causal.py). Up to v0.10.x the samples keep
  their `attention_mask`; from v0.11.0 (#2844, transformers 4.53.1) the trainer removes that
  column when `sample_packing_drop_attention_mask` (core/trainers/base.py), and since #3796
  (v0.18.0) that is every backend that isolates documents by position ids (flash, flex, sdpa,
  eager, ...), so current SFT batches have no mask;
- pretraining (`pretraining_dataset` + `sample_packing`, utils/data/pretraining.py): with
  `pretrain_multipack_attn` (default) the `attention_mask` column is dropped
  (`process_pretraining_datasets_for_packing(drop_attention_mask=multipack_attn)`, "workaround by
  using the position id logic"), labels default to a copy of `input_ids`, and each bin's columns go
  to `PretrainingBatchSamplerDataCollatorForSeq2Seq(tokenizer, return_tensors="pt", padding=True,
  pad_to_multiple_of=max_tokens, multipack_attn=...)`.

Contract of the collator output (batching.py, v0.10.0 … v0.18.0):
- `[B, S]`, one bin per row; `input_ids` right-padded with the pad id, `labels` with -100;
- `attention_mask`, when the samples carry one, is the **sample number** within the row:
  `(i + 1) * mask` for the i-th sample of the bin, 0 on padding (`[1,1,1,1,2,2,2,0]`): one document
  per run of equal non-zero ids (monkeypatch/utils.py `get_max_seqlen_in_batch` / `get_unpad_data`,
  the reader axolotl patches into `_get_unpad_data`);
- without a mask the documents are where `position_ids` restart; `position_ids` are concatenated per
  sample and the padding gets `range(remainder)` (#2739, in v0.10.0: "pad consecutive numbers for
  position ids. It will greatly reduce the size of cum_seqlens"), i.e. the padding of a row is
  **one final segment** (pad id, labels -100).

Bugs reproduced at their pre-fix releases:
- #2739 (v0.9.2 and before): padding position ids were `position_pad_token_id` = 0, so without an
  attention mask every pad token is a position-0 restart, a one-token sequence of its own ("flash
  attention has intrinsically a maximum batch size. padding position ids can have a chance
  creating a large training batch size for flash attention (cum_seqlens). This can cause the
  training to crash."). At v0.9.2 mask-less batches come from the pretraining path.
- #2495 "SP cu_seqlens fix" (v0.8.0, fixed in v0.8.1): with `sequence_parallel_degree > 1` the
  collator sliced each row into contiguous rank chunks and `adjust_position_ids_for_slice`
  subtracted the rank's start offset from **every** segment of the slice, so a document that
  starts inside a rank's chunk gets negative position ids; the fix keeps the global position ids
  and hands the global boundaries to ring attention (`update_ring_attn_params`).

Not reproducible from a batch: #3796 (v0.18.0) found that transformers casts the 2D mask to bool
before attention, so on backends that kept the numbered mask (SDPA/eager, v0.11 … v0.17) the
sample numbers never reached `_get_unpad_data` and documents leaked on padded rows; the collator
output is the same before and after, the fix is on the consumer side (drop the mask).
"""

from __future__ import annotations

import copy
import sys

from common import save_case, stub, upstream
from stacks._toy_tokenizer import DESCRIPTION as TOKENIZER, toy_tokenizer

REPO = "axolotl-ai-cloud/axolotl"
FILE = "src/axolotl/utils/collators/batching.py"
STACK = "axolotl"
HEAD = "v0.18.0"  # latest release
MASK_ERA = "v0.10.1"  # last release whose SFT samples keep attention_mask (#2844 is in v0.11.0)
FIX_2739 = "v0.10.0"  # first release with #2739 (92afa4fa2)
PRE_2739 = "v0.9.2"  # last release before it
PRE_2495 = "v0.8.0"  # sequence parallelism (#2412) without the SP cu_seqlens fix (#2495, v0.8.1)


def sample(ids, prompt=0, mask=True):
    """One tokenized SFT sample as axolotl's dataset holds it: labels = ids with the first
    `prompt` tokens -100, position_ids = range(len), length; `attention_mask` (all 1) unless the
    trainer dropped the column."""
    s = {"input_ids": list(ids)}
    if mask:
        s["attention_mask"] = [1] * len(ids)
    s["labels"] = [-100] * prompt + list(ids[prompt:])
    s["position_ids"] = list(range(len(ids)))
    s["length"] = len(ids)
    return s


def bins(spec, mask=True):
    return [[sample(ids, p, mask) for ids, p in b] for b in spec]


def pretraining_bin(docs):
    """The columns of one multipack bin of a pretraining dataset after
    process_pretraining_datasets_for_packing(drop_attention_mask=True): input_ids, position_ids
    (add_position_ids), length, and labels = input_ids.copy() (encode_packed_pretraining)."""
    return {"input_ids": [list(d) for d in docs], "position_ids": [list(range(len(d))) for d in docs],
            "length": [len(d) for d in docs], "labels": [list(d) for d in docs]}


def run(case, commit, features, *, collator="V2BatchSamplerDataCollatorForSeq2Seq", collator_kwargs,
        expected="pass", why, bug=None, notes="", rank=None, metadata=None):
    mod = upstream(REPO, commit, FILE)
    stubs = [f"tokenizer: {TOKENIZER}"]
    if rank is not None:
        r, w = rank
        # __post_init__ imports get_ring_attn_group and asks torch.distributed for the SP rank.
        for name in ("axolotl", "axolotl.monkeypatch", "axolotl.monkeypatch.attention"):
            sys.modules[name] = stub(name)
        sys.modules["axolotl.monkeypatch.attention.ring_attn"] = stub(
            "axolotl.monkeypatch.attention.ring_attn", get_ring_attn_group=lambda: None)
        mod.dist = stub("torch.distributed", get_rank=lambda group=None: r,
                        get_world_size=lambda group=None: w)
        stubs += ["axolotl.monkeypatch.attention.ring_attn.get_ring_attn_group -> None",
                  f"the module's `dist` (torch.distributed): get_rank -> {r}, get_world_size -> {w} "
                  "(the SP group of one rank; no process group)"]
    tok = toy_tokenizer()
    coll = getattr(mod, collator)(tok, **collator_kwargs)
    batch = coll(copy.deepcopy(features))
    args = ", ".join(f"{k}={v!r}" for k, v in collator_kwargs.items())
    meta = {"causal": "true", "profile": STACK, "pad_token_id": tok.pad_token_id}
    if rank is not None:
        # pad_to_multiple_of applies to the whole row, not to one rank's slice of it.
        meta["sp_rank"], meta["sp_size"] = rank
    elif collator_kwargs.get("pad_to_multiple_of"):
        meta["pad_to_multiple_of"] = collator_kwargs["pad_to_multiple_of"]
    meta.update(metadata or {})
    save_case(STACK, case, dict(batch), repo=REPO, commit=commit, file=FILE,
              function=f"{collator}(tokenizer, {args}).__call__",
              input={"features": features}, expected=expected, why=why, bug=bug, metadata=meta,
              notes=notes, stubs=stubs)


def generate() -> None:
    # SFT: two bins of sequence_len 8 (pad_to_sequence_len: pad_to_multiple_of = 8): row 0 holds a
    # 4-token sample (2 prompt tokens) and a 3-token one (1 prompt token) with token 0 (= pad id)
    # in its response; row 1 a 3-token and a 2-token sample, so 3 pad tokens.
    spec = [[([1, 11, 12, 13], 2), ([1, 0, 15], 1)], [([1, 21, 22], 1), ([1, 23], 1)]]
    kw = {"padding": True, "pad_to_multiple_of": 8, "return_tensors": "pt"}

    run("v2_numbered_mask_v0.10.1", MASK_ERA, bins(spec), collator_kwargs=kw,
        why="SFT multipack at v0.10.1 (samples keep attention_mask): attention_mask "
            "[[1,1,1,1,2,2,2,0],[1,1,1,2,2,0,0,0]] numbers the samples of each row, 0 on padding; "
            "position_ids restart per sample, padding positions range(r) = [0] and [0,1,2] (#2739); "
            "labels unshifted, prompt -100, pads -100; the pad id 0 inside row 0's second sample is "
            "real (its mask is 2). Valid.")
    run("v2_position_ids_v0.18.0", HEAD, bins(spec, mask=False), collator_kwargs=kw,
        why="SFT multipack at v0.18.0: the trainer removed the attention_mask column "
            "(sample_packing_drop_attention_mask, every position-id-isolating backend since #3796), "
            "so the batch is input_ids, labels, position_ids [[0,1,2,3,0,1,2,0],[0,1,2,0,1,0,1,2]]: "
            "the documents are the restarts and the padding of each row is one final segment "
            "(positions range(r), pad id, labels -100), by design since #2739. Valid.")
    run("v2_numbered_mask_v0.9.2", PRE_2739, bins(spec), collator_kwargs=kw,
        why="SFT multipack at v0.9.2, before #2739: the padding position ids are 0s, but the "
            "numbered attention_mask (0 on padding) says where the documents and the padding are, "
            "and the mask is what axolotl's patched _get_unpad_data reads. Valid (negative control "
            "of #2739).")

    # Pretraining multipack (pretrain_multipack_attn, the default): no attention_mask, labels =
    # input_ids; one bin of a 5-token and a 4-token document, max_tokens 12 -> 3 pad tokens.
    pre = pretraining_bin([[1, 31, 32, 33, 2], [1, 41, 42, 2]])
    pkw = {"return_tensors": "pt", "padding": True, "pad_to_multiple_of": 12, "multipack_attn": True}
    boundary = ("Labels are the input_ids copy that encode_packed_pretraining makes, so the label "
                "at the second document's start is its BOS: the first document's EOS is trained to "
                "predict it. That is axolotl's pretraining design (no fix, no issue), not #2739; "
                "the batch cannot say its objective, so the metadata states it as a user would "
                "(objective = pretrain, --objective pretrain).")
    pmeta = {"objective": "pretrain"}
    run("pretrain_position_ids_v0.10.0", FIX_2739, pre, collator="PretrainingBatchSamplerDataCollatorForSeq2Seq",
        collator_kwargs=pkw, metadata=pmeta,
        why="Pretraining multipack at v0.10.0 (wrap_pretraining_dataset's collator, mask dropped): "
            "one row of 12, position_ids [0,1,2,3,4,0,1,2,3,0,1,2]: two documents and the padding "
            "as one final segment (range(3), pad id, labels -100, #2739). Valid.",
        notes=boundary)
    run("pretrain_position_ids_v0.9.2", PRE_2739, pre, collator="PretrainingBatchSamplerDataCollatorForSeq2Seq",
        collator_kwargs=pkw, expected=["mock-marked"], bug="#2739", metadata=pmeta,
        why="The same bin at v0.9.2: padding position ids 0, so position_ids "
            "[0,1,2,3,4,0,1,2,3,0,0,0] make the 3 pad tokens 3 one-token sequences of padding, "
            "each a cu_seqlens entry FlashAttention gets as real (with max_tokens padding the tail "
            "is up to a whole sequence: #2739 'can cause the training to crash'). axolotl's "
            "contract since #2739 is one final padding segment per row.",
        notes="The check id is the closest one the tool has: padding segments that are not the "
              "profile's single final padding segment (docs/batch-files.md mock-marked: 'unless "
              "the stack's profile puts its padding in a final segment by design'). The same "
              "zero-padded layout is valid for TRL (trl/padding_free_pad_multiple_v1.9.0), whose "
              "test asserts it. " + boundary)

    # Sequence parallelism, 2 ranks, one SFT bin of exactly sequence_len 8: a 5-token and a
    # 3-token sample; global position ids [0,1,2,3,4,0,1,2]; rank 1 gets tokens 4..7.
    sp = bins([[([1, 31, 32, 33, 34], 1), ([1, 41, 42], 1)]])
    run("sp_rank1_v0.8.0", PRE_2495, sp,
        collator_kwargs={**kw, "sequence_parallel_degree": 2}, rank=(1, 2),
        expected=["position-ids"], bug="#2495",
        why="v0.8.0, sequence_parallel_degree=2, rank 1: the row is sliced to tokens 4..7 "
            "(attention_mask [1,2,2,2], global positions [4,0,1,2]) and adjust_position_ids_for_slice "
            "subtracts start_idx=4 from every segment of the slice: position_ids [0,-4,-3,-2]. The "
            "second sample starts inside rank 1's chunk at position -4 instead of 0. Fixed in v0.8.1 "
            "(#2495: slice only, keep the global positions, pass the global cu_seqlens to ring "
            "attention).",
        notes="A rank's contiguous SP slice (ring attention), not a zigzag CP shard: saved with "
              "sp_rank/sp_size metadata, not cp_rank/cp_size, so no CP reassembly applies. Its first "
              "token continues the 5-token sample of rank 0 (global position 4).")
