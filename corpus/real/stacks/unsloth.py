"""unslothai/unsloth: SFT sample packing and padding-free batches, Unsloth's collator wrappers
`enable_sample_packing` and `enable_padding_free_metadata` (unsloth/utils/packing.py) at main
015bdef0d, around the collator of the TRL it pins (`trl>=0.18.2,!=0.19.0,<=0.24.0`): TRL's
`DataCollatorForLanguageModeling(padding_free=True)` and `pack_dataset` (trl/trainer/sft_trainer.py,
trl/data_utils.py) at v0.24.0 04fd1203a, and at v0.23.0 6adfd138d (allowed by the pin, before
TRL #4170). Bug: PR #8959 (2886dfc38) at its parent d43892ea7. Issue 39's blind protocol: the
profile (`batches/unsloth/profile.toml`) was written from the code before any batch was made
(blind/unsloth/NOTES.md); this module only runs the code.

Contract (015bdef0d; llama.py `CausalLM_fast_forward`, packing.py):
- TRL flattens the examples into one row `[1, T]`: `input_ids`, `labels` (unshifted: the model
  shifts), `position_ids` restarting at 0 per document (from the packed rows' `seq_lengths`,
  else per example); v0.24.0 sets `labels[position_ids == 0] = -100`, v0.23.0 does not;
- Unsloth's wrapper adds `packed_seq_lengths` (int32 [N], every document's length, flattened
  over the examples' `seq_lengths`, or `[len(input_ids)]` per example) and drops any
  `attention_mask`; the model builds the kernel's `cu_seqlens = [0, cumsum(lengths)]` from it
  (`get_packed_info_from_kwargs`) for a causal varlen / block-diagonal attention;
- the loss masks each document's last prediction itself, from `packed_seq_lengths`
  (`mask_packed_sequence_boundaries`; on the fused-CE path `mask_packed_boundary_labels`, added
  by #8959): a live label at a document start is not trained across the boundary.

Run: the wrappers are applied to a stand-in trainer (`SimpleNamespace(data_collator=TRL's
collator, args=SimpleNamespace(remove_unused_columns=True))`) and model (`torch.nn.Module()`),
then the collator is called on the examples as the Trainer does. Saved: `input_ids`, `labels`,
`position_ids`, `packed_seq_lengths`; metadata `profile = profile.toml` (the blind profile, in
the batch's folder) and the collator's `pad_token_id`.

Bug reproduction: #8959 "Make the packed-boundary guard reachable on the fused cross-entropy
path" (2886dfc38): at d43892ea7 `mask_packed_sequence_boundaries` ran only after the fused-CE
branch had returned, i.e. never on a packed path, so each document's last token was trained on
the next document's first token wherever the batch's label there was live (TRL 0.20 - 0.23.0).
The batch is the collator's, the same before and after the fix (the wrapper differs only in a
comment): it is saved from packing.py at d43892ea7 with TRL v0.23.0, and the record says the loss
of that commit trains those labels.
"""

from __future__ import annotations

import types

from common import save_case, upstream

REPO = "unslothai/unsloth"
STACK = "unsloth"
COMMIT = "015bdef0d94a241bcd94eec7a405b1700632180d"
BUG_COMMIT = "d43892ea7659978c57e90f033f567414ded1c5d2"  # = 2886dfc38^
FIX_COMMIT = "2886dfc3834ed09e4a971479f88ec32ba0fd3bab"
FILE = "unsloth/utils/packing.py"
PROFILE = "profile.toml"
TRL = {"v0.24.0": "04fd1203af4fc1e629f58e0ac0d0c5bb95f82a45",
       "v0.23.0": "6adfd138d895b7ac257c4079eab7d519a0472aaa"}

# Blind run (issue 39): what thdcheck got wrong, with what it lacks (blind/unsloth/NOTES.md).
PENDING_LOSS_MASKS_BOUNDARIES = (
    "false alarm cross-doc-label: the labels at the documents' first tokens are live (TRL "
    "v0.23.0), but Unsloth's loss masks each document's last prediction itself from "
    "packed_seq_lengths (mask_packed_sequence_boundaries / mask_packed_boundary_labels). No fact "
    "says 'the loss masks the boundary targets' (NOTES 'Cannot state' 1); the bytes are those of "
    "the #8959 bug case, which is right only because the same rule fires")
DOCS = [{"input_ids": [11, 12, 13, 14, 15]}, {"input_ids": [21, 22, 23]},
        {"input_ids": [31, 32, 33, 34, 35, 36, 37]}]
COMPLETION = [{"input_ids": [41, 42, 43, 44, 45], "completion_mask": [0, 0, 1, 1, 1]},
              {"input_ids": [51, 52, 53], "completion_mask": [0, 1, 1]},
              {"input_ids": [61, 62, 63, 64], "completion_mask": [0, 0, 0, 1]}]


def run(case: str, *, commit: str = COMMIT, trl: str = "v0.24.0", mode: str, examples=DOCS,
        expected="pass", why: str, bug: str | None = None, notes: str = "",
        pending: str | None = None) -> None:
    import torch
    from stacks import trl as trl_stack

    data_utils, sft = trl_stack.load(trl)  # first: it drops another stack's `datasets` stand-in
    from datasets import Dataset

    packing = upstream(REPO, commit, FILE, name=f"unsloth_packing_{commit[:9]}")
    kw = {"pad_token_id": 0, "padding_free": True}
    collator = sft.DataCollatorForLanguageModeling(**kw)
    trainer = types.SimpleNamespace(data_collator=collator,
                                    args=types.SimpleNamespace(remove_unused_columns=True))
    model = torch.nn.Module()
    fn = []
    features = [dict(e) for e in examples]
    if mode == "packing":
        packed = data_utils.pack_dataset(Dataset.from_list(examples), 16, "bfd")
        features = [dict(r) for r in packed]
        fn.append(f"TRL {trl} trl/data_utils.py pack_dataset(Dataset.from_list(examples), "
                  f"seq_length=16, strategy='bfd')")
        packing.enable_sample_packing(model, trainer)
        wrapper = "enable_sample_packing(model, trainer)"
    else:
        packing.enable_padding_free_metadata(model, trainer)
        wrapper = "enable_padding_free_metadata(model, trainer)"
    fn.append(f"TRL {trl} DataCollatorForLanguageModeling(pad_token_id=0, padding_free=True), "
              f"wrapped by unsloth/utils/packing.py {wrapper}; trainer.data_collator(features)")
    batch = dict(trainer.data_collator([dict(f) for f in features]))
    assert "packed_seq_lengths" in batch and "attention_mask" not in batch, set(batch)
    lens = [len(e["input_ids"]) for e in examples]
    assert sorted(batch["packed_seq_lengths"].tolist()) == sorted(lens), batch
    inp = {"examples": examples}
    if mode == "packing":
        inp["packed_rows"] = features
    save_case(STACK, case, batch, repo=REPO, commit=commit, file=f"{FILE}; trl/trainer/sft_trainer.py, "
              f"trl/data_utils.py at TRL {trl} {TRL[trl][:9]}", function=" -> ".join(fn),
              input=inp, expected=expected, why=why.format(sq=sum(n * n for n in lens), t=sum(lens)),
              bug=bug, metadata={"profile": PROFILE, "pad_token_id": 0}, pending=pending,
              notes=notes, stubs=["trainer: SimpleNamespace(data_collator, args.remove_unused_columns); "
                                  "model: torch.nn.Module() (the wrappers only mark it)",
                                  f"huggingface/trl {trl} {TRL[trl]}: the real sft_trainer.py, "
                                  "data_utils.py, trainer/utils.py (as stacks/trl.py loads them)",
                                  *trl_stack._STUBS])


def generate() -> None:
    run("packing_trl_v0.24.0", mode="packing",
        why="SFTConfig(packing=True) under Unsloth: TRL v0.24.0 bfd-packs documents of 5, 3 and 7 "
            "tokens into one row with seq_lengths, the collator flattens it ({t} tokens, "
            "position_ids restarting per document, labels = the ids with -100 at every "
            "position 0) and Unsloth's wrapper adds packed_seq_lengths (the kernel's offsets). "
            "Valid by Unsloth's contract: three causal documents, no label crossing a boundary; "
            "useful work Σ s² = {sq}.")
    run("padding_free_trl_v0.24.0", mode="padding_free",
        why="Padding-free without packing (auto-enabled by Unsloth): the three examples (5, 3, 7 "
            "tokens) flattened into [1, {t}], packed_seq_lengths [5, 3, 7] set from each "
            "example's length before TRL's collator runs. Valid; useful work Σ s² = {sq}.")
    run("padding_free_completion_trl_v0.24.0", mode="padding_free", examples=COMPLETION,
        why="Padding-free with prompt-completion examples (completion_mask; completion_only_loss "
            "defaults to True): the labels outside each completion are -100 besides the "
            "document starts. Valid; {t} tokens, useful work Σ s² = {sq}.")
    run("packing_trl_v0.23.0", trl="v0.23.0", mode="packing",
        why="The same packing under TRL v0.23.0 (allowed by Unsloth's pin): the collator does not "
            "mask the label at document starts (TRL #4170, fixed in v0.23.1), so the labels at "
            "the second and third documents' first tokens are live. Valid by Unsloth's contract "
            "at 015bdef0d: its loss masks each document's last prediction from "
            "packed_seq_lengths (mask_packed_boundary_labels on the fused-CE path since #8959, "
            "mask_packed_sequence_boundaries otherwise), so no document is trained on the next "
            "one's first token; useful work Σ s² = {sq}.",
        notes="blind/unsloth/NOTES.md 'Cannot state' 1: the batch's labels at document starts "
              "are live; the loss, not the batch, masks them.",
        pending=PENDING_LOSS_MASKS_BOUNDARIES)
    run("packing_trl_v0.23.0_d43892ea7", commit=BUG_COMMIT, trl="v0.23.0", mode="packing",
        expected=["cross-doc-label"], bug="#8959 (fixed by 2886dfc38)",
        why="The same batch from packing.py at d43892ea7 (the wrapper is the fix's but for two "
            "comments): before #8959 the boundary guard (mask_packed_sequence_boundaries) ran "
            "only after the fused cross-entropy branch had returned, i.e. never on a packed "
            "path, so the live labels at the documents' first tokens (TRL v0.23.0) were trained: "
            "each document's last token learns the next document's first token "
            "(cross-doc-label). The batch is byte-identical to packing_trl_v0.23.0's; only the "
            "loss of that commit makes it a bug.")
