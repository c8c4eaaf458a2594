"""mosaicml/llm-foundry: finetuning with `packing_ratio` (llmfoundry/data/finetuning/dataloader.py
`build_collate_fn`): `BinPackCollator` (llmfoundry/data/packing.py) around
`Seq2SeqFinetuningCollator` (llmfoundry/data/finetuning/collator.py), run at the v0.21.0 release
with a word-level toy tokenizer (`pad_token_id`, `eos_token_id`, `padding_side`, `.pad()` only).

Contract (packing.py and collator.py at v0.21.0; tests/data/test_packing.py):
- `Seq2SeqFinetuningCollator` (decoder-only): per example `input_ids` = context ++ target (++ EOS
  appended to the last turn's target), `labels` = -100 on the context (`target_prompts='none'`) and
  the target tokens themselves (unshifted: the model shifts, ComposerMPTCausalLM `get_targets` rolls
  by -1), `attention_mask` 1, padded to `max_seq_len`, `sequence_id = attention_mask - 1`;
- `BinPackCollator.pack`: trims every example by its `attention_mask`, first-fit-decreasing packs
  them into `target_batch_size` bins of at most `max_seq_len` tokens (the rest stay as leftover bins
  for the next call), and concatenates; `sequence_id` numbers the examples of a bin 0, 1, 2, …
  (`add_on[k] + 1 + max(example[k])`); the first label of every appended example is set to -100
  ("Prevents the last token in example from being trained to predict the first token in add_on");
- `_convert_to_batch` pads every bin to `max_seq_len` on the tokenizer's `padding_side` with
  input `pad_token_id`, label -100, `attention_mask` 0, `sequence_id` -1;
- output `[target_batch_size, max_seq_len]`: `input_ids`, `labels`, `attention_mask` (0/1, 1 on
  every real token of every document), `sequence_id` (int64); no position ids (MPT derives
  positions within a sequence from `sequence_id` when `attn_uses_sequence_id`,
  modeling_mpt.gen_sequence_id_info). The documents of a row are the runs of equal
  `sequence_id` >= 0; what keeps them apart in attention is `sequence_id`, not the 0/1 mask.

No layout bug of BinPackCollator with a fix commit was found (its boundary-label guard and the -1
padding are in the first version, 300cc5c58); the fixes around `sequence_id` -1 are on the
consumer side (modeling_mpt #940, loss_perp_v_len_callback #1324). The cases below are valid.
"""

from __future__ import annotations

import copy

from common import permissive_stub, save_case, upstream
from stacks._toy_tokenizer import DESCRIPTION as TOKENIZER, toy_tokenizer

REPO = "mosaicml/llm-foundry"
FILE = "llmfoundry/data/packing.py"
COLLATOR = "llmfoundry/data/finetuning/collator.py"
CONSTS = "llmfoundry/utils/consts.py"
STACK = "llm_foundry"
TAG = "v0.21.0"

_STUBS: list[str] = []


def load(tag: str):
    global _STUBS
    if not _STUBS:
        _STUBS = permissive_stub("composer", "llmfoundry") + [
            f"{CONSTS}, {COLLATOR} at the same release: real files",
            f"tokenizer: {TOKENIZER}",
        ]
    upstream(REPO, tag, CONSTS, name="llmfoundry.utils.consts")
    coll = upstream(REPO, tag, COLLATOR, name="llmfoundry.data.finetuning.collator")
    pack = upstream(REPO, tag, FILE, name="llmfoundry.data.packing")
    return coll, pack


def example(context, target):
    """A finetuning example as the dataset yields it: one turn (prompt ids, response ids)."""
    return {"turns": [{"input_ids": list(context), "labels": list(target)}]}


def run(case, calls, *, max_seq_len, target_batch_size, padding_side="right",
        max_leftover_bins_to_keep=None, why, notes="", expected="pass", bug=None, tag=TAG):
    """Feeds each list of examples in `calls` to one BinPackCollator in turn (as the dataloader
    does, `device_batch_size * packing_ratio` examples per call) and saves the last output."""
    coll_mod, pack_mod = load(tag)
    tok = toy_tokenizer(padding_side)
    inner = coll_mod.Seq2SeqFinetuningCollator(tokenizer=tok, max_seq_len=max_seq_len,
                                               decoder_only_format=True)
    packer = pack_mod.BinPackCollator(collator=inner, target_batch_size=target_batch_size,
                                      max_seq_len=max_seq_len, pad_token_id=tok.pad_token_id,
                                      padding_side=padding_side,
                                      max_leftover_bins_to_keep=max_leftover_bins_to_keep)
    outputs = [packer(copy.deepcopy(c)) for c in calls]
    batch = outputs[-1]
    fn = (f"BinPackCollator(collator=Seq2SeqFinetuningCollator(tokenizer, max_seq_len={max_seq_len}, "
          f"decoder_only_format=True), target_batch_size={target_batch_size}, max_seq_len={max_seq_len}, "
          f"pad_token_id={tok.pad_token_id}, padding_side={padding_side!r}, "
          f"max_leftover_bins_to_keep={max_leftover_bins_to_keep}).__call__")
    if len(calls) > 1:
        fn += f" (call {len(calls)} of {len(calls)})"
    meta = {"causal": "true", "profile": STACK, "pad_token_id": tok.pad_token_id,
            "max_seq_len": max_seq_len}
    save_case(STACK, case, dict(batch), repo=REPO, commit=tag, file=FILE, function=fn,
              input={"calls": calls, "eos_token_id": tok.eos_token_id}, expected=expected, why=why,
              bug=bug, metadata=meta, notes=notes, stubs=list(_STUBS))


def generate() -> None:
    # Four examples, lengths with the appended EOS (2): 5, 4, 3, 2. First-fit decreasing into 2
    # bins of 8: [5,3] (full) and [4,2] (2 pad tokens). Token 0 (= pad id) inside a response.
    four = [example([11, 12], [13, 14]), example([21, 22], [23]), example([31], [0]), example([], [42])]
    run("binpack_right_v0.21.0", [four], max_seq_len=8, target_batch_size=2,
        why="packing_ratio 2 (4 examples -> 2 rows of max_seq_len 8): rows [5-token ex, 3-token ex] "
            "and [4-token ex, 2-token ex, 2 pads]; sequence_id [[0,0,0,0,0,1,1,1],[0,0,0,0,1,1,-1,-1]], "
            "attention_mask 1 on every real token, labels -100 on prompts and on the first token of "
            "every appended example, pads: input 0, label -100, mask 0, sequence_id -1. The response "
            "token 0 (= pad id) is real (mask 1, its own sequence_id). Valid.")
    run("binpack_left_v0.21.0", [four], max_seq_len=8, target_batch_size=2, padding_side="left",
        why="Same examples with a left-padding tokenizer (BinPackCollator takes padding_side from it, "
            "dataloader.py build_collate_fn): each row is padded on the left, so the 2 pads of row 1 "
            "come first (sequence_id -1, mask 0, label -100) and its documents follow. Valid for the "
            "collator.",
        notes="MPT's flash path refuses this layout outright ('Left padding is not supported with "
              "flash attention when attn_uses_sequence_id is set to True', modeling_mpt.py); the torch "
              "attention path accepts it.")
    # Leftovers: call 1 packs 5 examples (lengths 6, 5, 3, 2, 2) into bins [6,2], [5,3], [2];
    # the smallest bin [2] is kept; call 2 (4 examples: 4, 3, 3, 2) packs into it.
    call1 = [example([51, 52, 53], [54, 55]), example([61, 62], [63, 64]), example([71], [72]),
             example([], [82]), example([], [92])]
    call2 = [example([101, 102], [103]), example([111], [112]), example([121], [122]),
             example([], [132])]
    run("binpack_leftover_v0.21.0", [call1, call2], max_seq_len=8, target_batch_size=2,
        why="The second call of one collator: a bin left over from the first call (a 2-token "
            "example) is packed together with this call's examples, so a row mixes examples of two "
            "dataloader calls; sequence_id still numbers the row's documents 0, 1, … and every "
            "appended example's first label is -100. Valid.")
