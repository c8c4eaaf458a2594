"""modelscope/ms-swift: the template's padding-free batch, `Template._encode_truncated` then
`Template._data_collator` (with `packing_row`) of swift/template/base.py at the v4.5.2 release
(ff5128777; identical at main 3602360a5), and of swift/llm/template/base.py at 5f342eef2 (the
parent of bee677132, #5665) for the bug. Each sample goes through the real `Template.encode(...,
return_length=True)` (what swift/dataset/utils.py's EncodePreprocessor calls).

How ms-swift feeds it: `swift sft --padding_free true` (or `--packing true`, which packs the
rows offline and collates the same way) encodes each sample with the template (`encode` ->
`_encode_truncated` -> the template's `_encode`: ids and unshifted labels, the prompt -100 and
`labels[0] = -100` on every sample, base.py `_encode` tail), truncates it to `max_length` by
`truncation_strategy`, records `length`, and the data collator concatenates the samples of a batch
into one row (`_data_collator`: `batch[:] = [self.packing_row(batch)]`). The template's own
`_encode` (chat template + tokenizer) is replaced here by a stand-in returning ids and labels as
that tail leaves them; everything after it is the real code, bound to a namespace that holds the
template's configuration (`padding_free=True`, `is_training=True`, `padding_side='right'`,
`use_megatron=False`, `sequence_parallel_size=1`, `max_length`, `truncation_strategy`,
`placeholder_tokens=[]`, a tokenizer with `pad_token_id`).

Contract (v4.5.2): `packing_row` concatenates `input_ids`, `labels` (and `loss_scale`) and, when
the samples carry no `position_ids` (text models), builds `position_ids = sum(range(length))`
from each sample's `length`; `_data_collator` returns `input_ids`, `labels`, `position_ids`
`[1, T]` and no attention mask (padding-free: the flash-attention path reads the position-id
restarts). Labels are unshifted (HF shifts in the loss), every sample's first label -100.

Bug reproduced: #5665 "fix padding_free & truncate" (bee677132): before it, `_encode_truncated`
stored `encoded['length']` **before** truncating, so a sample cut to `max_length` kept its
untruncated length and `packing_row` gave it `range(untruncated)` position ids: the packed row's
`position_ids` are longer than its `input_ids` and every later sample's restarts are shifted.
The fix recomputes the length after `_truncate`.
"""

from __future__ import annotations

import copy
import sys
from types import SimpleNamespace

import common
from common import permissive_stub, save_case, upstream

REPO = "modelscope/ms-swift"
STACK = "ms_swift"
RELEASE = "v4.5.2"  # ff5128777
PRE_5665 = "bee677132^"  # 5f342eef2
FIX_5665 = "bee677132"
FILES = {RELEASE: "swift/template/base.py", PRE_5665: "swift/llm/template/base.py",
         FIX_5665: "swift/llm/template/base.py"}
METHODS = ["encode", "_encode_truncated", "_get_length", "_truncate", "_data_collator", "packing_row",
           "_data_collator_mm_data", "_pad_sequence", "_handle_megatron_cp", "_pad_3d_position_ids",
           "concat_tensor"]

_STUBBED = []


def template(commit, *, max_length, truncation_strategy="right", pad=0):
    if not _STUBBED:
        _STUBBED.extend(permissive_stub("swift", "modelscope", "peft", "PIL"))
        # A decorator factory used at class level (@retry_decorator(3)) must return a decorator.
        utils = common._PermissiveModule("swift.utils")
        utils.__path__ = []
        utils.retry_decorator = lambda *a, **k: (lambda f: f)
        sys.modules["swift.utils"] = utils
        _STUBBED.append("swift.utils.retry_decorator(n) -> identity decorator")
    # Imported under its package name, so its relative imports resolve (to stand-ins).
    mod = upstream(REPO, commit, FILES[commit], name=FILES[commit][:-3].replace("/", "."))
    T = mod.Template
    ns = SimpleNamespace(padding_free=True, is_training=True, padding_side="right",
                         use_megatron=False, sequence_parallel_size=1, mode="train",
                         task_type="causal_lm", max_length=max_length,
                         truncation_strategy=truncation_strategy, placeholder_tokens=[],
                         tokenizer=SimpleNamespace(pad_token_id=pad), _processor_inited=True,
                         remove_unused_columns=True, _preprocess_inputs=lambda inputs: None)
    for name in METHODS:
        f = T.__dict__.get(name)
        if f is None:
            continue
        if isinstance(f, staticmethod):
            setattr(ns, name, f.__func__)
        else:
            setattr(ns, name, f.__get__(ns))
    ns.TemplateInputs = mod.TemplateInputs
    return ns


def encode_stand_in(sample):
    """What the template's `_encode` returns for a chat sample: ids, labels with the prompt -100
    and labels[0] = -100, loss_scale None (default loss scale)."""
    ids, prompt = sample
    labels = [-100] * prompt + list(ids[prompt:])
    labels[0] = -100
    return {"input_ids": list(ids), "labels": labels, "loss_scale": None}


def run(case, commit, samples, *, max_length, expected="pass", why, bug=None, notes=""):
    t = template(commit, max_length=max_length)
    encoded = []
    for s in samples:
        t._encode = lambda inputs, s=s: encode_stand_in(s)
        inputs = t.TemplateInputs()  # a stand-in class; encode only reads .chosen
        inputs.chosen = SimpleNamespace(channel=None, extra_kwargs={})
        encoded.append(t.encode(inputs, return_length=True))
    shown = copy.deepcopy(encoded)
    batch = t._data_collator(encoded)
    meta = {"causal": "true", "pad_token_id": 0, "profile": "ms_swift"}
    save_case(STACK, case, batch, repo=REPO, commit=commit, file=FILES[commit],
              function="Template._data_collator([Template.encode(s, return_length=True) for s in samples]) "
                       f"(padding_free=True, max_length={max_length}, truncation_strategy='right')",
              input={"samples (ids, prompt length)": samples, "encoded": shown},
              expected=expected, why=why, bug=bug, metadata=meta, notes=notes,
              stubs=_STUBBED + [
                  "swift.*, modelscope, peft, PIL: permissive stand-ins (imports of base.py the "
                  "methods do not use)",
                  "the Template object: a namespace with the real methods bound to it "
                  f"({', '.join(METHODS)}) and the configuration padding_free=True, "
                  "is_training=True, padding_side='right', use_megatron=False, "
                  "sequence_parallel_size=1, placeholder_tokens=[], tokenizer.pad_token_id=0",
                  "Template._encode: a stand-in returning the sample's ids and labels as _encode "
                  "leaves them (prompt -100, labels[0] = -100, loss_scale None: the default binary "
                  "loss scale); _preprocess_inputs: no-op; TemplateInputs: a stand-in whose "
                  ".chosen has channel None"])


def generate() -> None:
    sft = [([1, 11, 12, 13, 14, 2], 2), ([1, 21, 22, 2], 2), ([1, 31, 32, 33, 34, 35, 2], 3)]
    run("padding_free_v4.5.2", RELEASE, sft, max_length=16,
        why="Three chat samples (6, 4, 7 tokens; prompt 2, 2, 3 tokens) in one padding-free row: "
            "input_ids and labels concatenated, position_ids [0..5, 0..3, 0..6] from each "
            "sample's length, no attention_mask. labels unshifted, each sample's first label and "
            "prompt -100, so no sample's EOS is trained on the next sample's first token. Valid.")
    long = [([1, 11, 12, 13, 14, 15, 16, 17, 18, 2], 2), ([1, 21, 22, 2], 2)]
    trunc_why = ("A 10-token sample right-truncated to max_length 6 (truncation_strategy 'right') "
                 "packed before a 4-token sample. ")
    run("padding_free_truncated_v4.5.2", RELEASE, long, max_length=6,
        why=trunc_why + "Since #5665 the length is taken after truncation (6), so position_ids "
            "[0..5, 0..3] match the 10 input ids. Valid (negative control of #5665).")
    run("padding_free_truncated_5f342eef2", PRE_5665, long, max_length=6, expected=["token-counts"],
        bug="#5665",
        why=trunc_why + "Before #5665 (bee677132), _encode_truncated stored length = 10, computed "
            "before _truncate, and packing_row built position_ids from it: range(10) + range(4) "
            "= 14 position ids for 10 tokens, so the second sample's restart sits at token 10 "
            "instead of 6 and the row's position_ids and input_ids disagree in length. Fixed by "
            "bee677132 ('[bugfix] fix padding_free & truncate', recomputing the length after "
            "truncation). A per-token tensor with 14 entries for 10 tokens: token-counts.",
        notes="The model gets position_ids [1, 14] beside input_ids [1, 10]; no segment layout "
              "exists for it, so the documents the check reads beside the tokens (the first 10 "
              "position ids) are not the real ones: the verdict is the count.")
    run("padding_free_truncated_bee677132", FIX_5665, long, max_length=6,
        why=trunc_why + "At the fix commit bee677132: length 6 after truncation, position_ids "
            "[0..5, 0..3]. Valid.")
