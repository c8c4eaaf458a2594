"""huggingface/trl: the SFT padding-free collator (`DataCollatorForLanguageModeling(padding_free=True)`,
trl/trainer/sft_trainer.py) fed by TRL's own packer (`pack_dataset`, trl/data_utils.py), run at
pinned releases.

The collator is TRL's own from v0.19.0 (before it, v0.16-v0.18, SFTTrainer used transformers'
`DataCollatorWithFlattening()`, which the `transformers_flatten` stack covers). `pad` comes from
trl/trainer/utils.py at the same release (the real file); `pack_dataset` is the real data_utils.py
at the same release, run on a real `datasets.Dataset`.

Contract (sft_trainer.py `DataCollatorForLanguageModeling`, v0.24.0 … v1.9.0, and its tests
tests/test_sft_trainer.py `test_padding_free`, `test_pad_to_multiple_of_and_padding_free`):
- one row `[1, T]`: `input_ids`, `labels`, `position_ids` (int64); **no `attention_mask`** ("For
  padding-free, we should NOT create attention_mask as it causes FlashAttention to ignore
  position_ids and compute wrong cu_seq_lens from the all-1s mask");
- documents are where `position_ids` restart at 0: `arange(len)` per example, or per document of a
  packed row from its `seq_lengths` (`get_position_ids_from_packed_seq_lengths`);
- labels unshifted (the model's loss shifts), the example's own `labels` or its `input_ids`, and
  `labels[position_ids == 0] = -100`: the first label of every document is never a target, so no
  document's last token is trained to predict the next document's first token;
- `pad_to_multiple_of`: right padding with input `pad_token_id`, label -100, position 0 (every pad
  token is a position-0 "restart" of its own, asserted by the upstream test: position_ids
  `[[0, 1, 2, 0, 1, 0, 0, 0]]`).

Bugs reproduced at their pre-fix releases:
- #3673 (fixed in v0.20.0): with packed `position_ids` the collator still returned an all-ones
  `attention_mask` beside them ("with the attention mask the flash-attention2 ignores the
  position_ids"), so the kernel sees one sequence per row;
- #4170 "Fix Flash Attention x Padding-Free loss" (merged 2025-09-30, in v0.23.1 and v0.24.0): before
  it the padding-free labels were the concatenated labels with nothing masked at document starts
  (the last token of each document was trained on the next document's first token), and with
  `pad_to_multiple_of` (#3996, v0.23.0) the returned `attention_mask` has 0s on the padding, which
  makes FlashAttention unpad by the mask (one sequence per row) instead of reading `position_ids`.
"""

from __future__ import annotations

import sys

from common import permissive_stub, save_case, upstream

REPO = "huggingface/trl"
FILE = "trl/trainer/sft_trainer.py"
DATA = "trl/data_utils.py"
UTILS = "trl/trainer/utils.py"
STACK = "trl"

_STUBS: list[str] = []


def load(tag: str):
    """(data_utils, sft_trainer) of `tag`: the real data_utils.py, trainer/utils.py and
    sft_trainer.py, imported as `trl.data_utils`, `trl.trainer.utils`, `trl.trainer.sft_trainer` so
    that their relative imports resolve; every other `trl.*` module and `accelerate` are permissive
    stand-ins (the collator and `pack_dataset` use none of them)."""
    global _STUBS
    if not _STUBS:
        # pack_dataset needs the real `datasets` (PyPI); other stacks of the same run install a
        # stand-in under that name (automodel, bionemo), so drop it first.
        if getattr(sys.modules.get("datasets"), "__file__", None) is None:
            for mod in [m for m in sys.modules if m == "datasets" or m.startswith("datasets.")]:
                del sys.modules[mod]
        import datasets

        datasets.disable_progress_bars()
        import pyarrow

        _STUBS = permissive_stub("accelerate", "trl") + [
            f"{DATA}, {UTILS} at the same release: real files (pack_dataset, pad)",
            f"datasets=={datasets.__version__}, pyarrow=={pyarrow.__version__} (PyPI, real)",
        ]
    data_utils = upstream(REPO, tag, DATA, name="trl.data_utils")
    upstream(REPO, tag, UTILS, name="trl.trainer.utils")
    sft = upstream(REPO, tag, FILE, name="trl.trainer.sft_trainer")
    return data_utils, sft


def _plain(batch: dict) -> dict:
    return {k: v for k, v in batch.items()}


def run(case: str, tag: str, examples: list[dict], *, pack: tuple[int, str] | None = None,
        collator: dict, expected="pass", why: str, bug: str | None = None, notes: str = "",
        metadata: dict | None = None) -> None:
    """Collates `examples` (after `pack_dataset(Dataset.from_list(examples), *pack)` when `pack`
    is given: the packed rows are one batch) with `DataCollatorForLanguageModeling(**collator)`
    of release `tag`, and saves what it returns."""
    from datasets import Dataset

    data_utils, sft = load(tag)
    fn = []
    features = examples
    if pack is not None:
        seq_length, strategy = pack
        packed = data_utils.pack_dataset(Dataset.from_list(examples), seq_length, strategy)
        features = [dict(row) for row in packed]
        fn.append(f"{DATA}:pack_dataset(Dataset.from_list(examples), seq_length={seq_length}, "
                  f"strategy={strategy!r})")
    coll = sft.DataCollatorForLanguageModeling(**collator)
    batch = coll(features)
    args = ", ".join(f"{k}={v!r}" for k, v in collator.items())
    fn.append(f"DataCollatorForLanguageModeling({args}).__call__")
    meta = {"causal": "true", "profile": STACK, "pad_token_id": collator["pad_token_id"]}
    if collator.get("pad_to_multiple_of"):
        meta["pad_to_multiple_of"] = collator["pad_to_multiple_of"]
    meta.update(metadata or {})
    inp = {"examples": examples}
    if pack is not None:
        inp["packed_rows"] = features
    save_case(STACK, case, _plain(batch), repo=REPO, commit=tag, file=FILE, function=" -> ".join(fn),
              input=inp, expected=expected, why=why, bug=bug, metadata=meta, notes=notes,
              stubs=list(_STUBS))


def generate() -> None:
    # Language-modeling examples (no prompt): labels = input_ids, so only the collator's own
    # document-start masking keeps the boundaries out of the loss. Token 0 (= pad id) in content.
    lm = [{"input_ids": [101, 0, 103, 104]}, {"input_ids": [105]}, {"input_ids": [106, 107, 0]}]
    # Prompt-completion examples as v1.x dataset preparation leaves them (labels prebuilt, prompt -100).
    pc = [{"input_ids": [111, 112, 113, 114], "labels": [-100, -100, 113, 114]},
          {"input_ids": [115, 116, 117], "labels": [-100, 116, 117]}]
    # Documents for the packer: 5, 1, 4, 3 and an over-long 8 tokens, seq_length 6.
    docs = [{"input_ids": [121, 122, 123, 124, 125]}, {"input_ids": [126]},
            {"input_ids": [131, 132, 133, 134]}, {"input_ids": [141, 142, 143]}]
    overlong = docs + [{"input_ids": [151, 152, 153, 154, 155, 156, 157, 158]}]

    # ---------------- valid (v1.9.0, the pinned current release) ----------------
    run("padding_free_v1.9.0", "v1.9.0", lm, collator={"pad_token_id": 0, "padding_free": True},
        why="v1.9.0 padding-free: one row [1,8], position_ids [0,1,2,3,0,0,1,2] (arange per example), "
            "labels = input_ids with labels[position_ids == 0] = -100 (the docstring example "
            "'labels': [[-100, 2, 3, -100, 5]]), no attention_mask. A 1-token example is a whole "
            "document whose only label is -100; token 0 (= pad id) inside content is real. Valid.")
    run("padding_free_labels_v1.9.0", "v1.9.0", pc, collator={"pad_token_id": 0, "padding_free": True},
        why="v1.9.0 with labels prebuilt by dataset preparation (#6037: prompt tokens -100): the "
            "collator uses them as is and still sets -100 where position_ids == 0. Valid.")
    run("padding_free_pad_multiple_v1.9.0", "v1.9.0",
        [{"input_ids": [1, 2, 3], "labels": [1, 2, 3]}, {"input_ids": [4, 5], "labels": [4, 5]}],
        collator={"pad_token_id": 0, "padding_free": True, "pad_to_multiple_of": 4},
        why="The upstream test test_pad_to_multiple_of_and_padding_free at v1.9.0, verbatim input and "
            "collator: keys exactly {input_ids, position_ids, labels}, input_ids [[1,2,3,4,5,0,0,0]], "
            "position_ids [[0,1,2,0,1,0,0,0]], labels [[-100,2,3,-100,5,-100,-100,-100]]. The 3 pad "
            "tokens (pad id, label -100, position 0) are padding, by TRL's design a position-0 restart "
            "each; they hold no label. Valid.",
        notes="Each pad token is its own position-0 'document' to a position-id reader: they are "
              "padding (pad id, label -100), never useful work.")
    run("bfd_v1.9.0", "v1.9.0", overlong, pack=(6, "bfd"),
        collator={"pad_token_id": 0, "padding_free": True},
        why="SFTTrainer's default packing (strategy 'bfd', padding-free forced on): pack_dataset "
            "truncates the 8-token document to 6 (documented: 'truncates sequences that exceed "
            "seq_length, discarding overflow tokens', #5076) and best-fit packs the rest into rows "
            "with seq_lengths; the collator turns seq_lengths into position ids and masks each "
            "document's first label. Valid.",
        notes="The 2 overflow tokens of the long document are dropped by design of 'bfd'; the batch "
              "cannot show them.")
    run("bfd_split_v1.9.0", "v1.9.0", overlong, pack=(6, "bfd_split"),
        collator={"pad_token_id": 0, "padding_free": True},
        why="strategy 'bfd_split' (the splitting of #4632, an option since #5076 as 'bfd-requeue', "
            "renamed in #5189): the 8-token document is split into fragments of 6 and 2, each packed "
            "as its own document (positions restart, first label -100), as documented ('splits "
            "overflow sequences for packing into other examples ... may break conversation "
            "structure'). Valid layout.")

    # ---------------- bugs at pre-fix releases ----------------
    run("ffd_v0.19.0", "v0.19.0", docs, pack=(6, "ffd"),
        collator={"pad_token_id": 0, "padding_free": True, "return_position_ids": True},
        expected=["cross-doc-label", "mask"], bug="#3673, #4170",
        why="v0.19.0, packing_strategy='ffd' (padding-free forced on, return_position_ids=True "
            "under flash_attention_2): pack_dataset adds a position_ids column; the collator returns "
            "them with an all-ones attention_mask [1,13] (fixed by #3673 in v0.20.0: 'with the "
            "attention mask the flash-attention2 ignores the position_ids'), so the mask says one "
            "sequence where the positions say four; and labels are the concatenated input_ids with no "
            "document-start masking (fixed by #4170), so each document's last token is trained on "
            "the next document's first token.",
        notes="transformers drops an all-ones 2D mask on its FlashAttention path (masking_utils."
              "flash_attention_mask) but not on SDPA/eager, where it disables packed-sequence "
              "detection (transformers PR #46634); TRL's #3673 states the mask must not be returned.")
    run("bfd_v0.23.0", "v0.23.0", docs, pack=(6, "bfd"),
        collator={"pad_token_id": 0, "padding_free": True, "return_position_ids": True},
        expected=["cross-doc-label"], bug="#4170",
        why="v0.23.0 (after #3673: no attention_mask with packed seq_lengths, positions from "
            "seq_lengths are right) but before #4170: labels are the concatenated input_ids, so the "
            "label at every document start is that document's first token, which the previous "
            "document's last token is trained to predict. Fixed in v0.23.1/v0.24.0 by "
            "labels[position_ids == 0] = -100.")
    run("padding_free_pad_multiple_v0.23.0", "v0.23.0", [{"input_ids": [1, 2, 3]}, {"input_ids": [4, 5]}],
        collator={"pad_token_id": 0, "padding_free": True, "return_position_ids": True,
                  "pad_to_multiple_of": 4},
        expected=["cross-doc-label", "mask"], bug="#4170",
        why="v0.23.0, the upstream test test_pad_to_multiple_of_and_padding_free of #3996, verbatim "
            "(return_position_ids=True is the default and what SFTTrainer passes under flash "
            "attention): input_ids [[1,2,3,4,5,0,0,0]], attention_mask [[1,1,1,1,1,0,0,0]], "
            "position_ids [[0,1,2,0,1,0,0,0]], labels [[1,2,3,4,5,-100,-100,-100]]. The mask has "
            "zeros, so FlashAttention unpads by it (one sequence of 5 per row: the two examples "
            "attend to each other) and ignores the position_ids; label 4 at the second example's "
            "start is a cross-document target. #4170 removed the mask in padding-free mode and "
            "masked position-0 labels (the test's expected labels became [[-100,2,3,-100,5,...]]).")
