"""huggingface/transformers `DataCollatorWithFlattening` (transformers/data/data_collator.py),
run from the installed pip release with each of its return options.

Contract (data_collator.py, DataCollatorWithFlattening.__call__, 5.23.0):
- one row `[1, T]`, no padding ever;
- labels per example `[separator_id] ++ labels[1:]` (or `input_ids[1:]` without a `labels`
  key): unshifted, the model's loss shifts; separator -100 by default;
- `position_ids` (default on) restart at `position_ids_start` (0) for every example: with
  nothing else, the model finds the boundaries from the restarts
  (modeling_flash_attention_utils: prepare_fa_kwargs_from_position_ids);
- `return_flash_attn_kwargs`: `cu_seq_lens_q/k` (int32, the same list) and `max_length_q/k`
  (Python ints, the longest example);
- `return_seq_idx`: int32 example number per token.
"""

from __future__ import annotations

import numpy as np
import torch

from common import save_case

REPO = "huggingface/transformers"
COMMIT = "pypi:transformers==5.23.0"
FILE = "transformers/data/data_collator.py"
STACK = "transformers_flatten"


def features(seqs, prompt=None, labels=True):
    out = []
    for i, s in enumerate(seqs):
        f = {"input_ids": list(s)}
        if labels:
            lab = list(s)
            for j in range((prompt or [0] * len(seqs))[i]):
                lab[j] = -100
            f["labels"] = lab
        out.append(f)
    return out


def run(case, feats, *, expected="pass", why, notes="", bug=None, metadata=None, return_tensors=None, **kw):
    from transformers import DataCollatorWithFlattening

    coll = DataCollatorWithFlattening(**kw)
    batch = coll(feats) if return_tensors is None else coll(feats, return_tensors=return_tensors)
    conv = []
    out = {}
    for k, v in batch.items():
        if isinstance(v, np.ndarray):
            out[k] = torch.from_numpy(v)
            conv.append(k)
        else:
            out[k] = v
    if conv:
        notes = (notes + " " if notes else "") + f"numpy arrays {conv} saved via torch.from_numpy (same dtype and values)."
    meta = {"causal": "true", "profile": "transformers"}
    meta.update(metadata or {})
    args = ", ".join(f"{k}={v!r}" for k, v in kw.items())
    fn = f"DataCollatorWithFlattening({args}).__call__" + (f"(return_tensors={return_tensors!r})" if return_tensors else "")
    save_case(STACK, case, out, repo=REPO, commit=COMMIT, file=FILE, function=fn,
              input={"features": feats}, expected=expected, why=why, bug=bug, metadata=meta, notes=notes)


def generate() -> None:
    seqs = [[101, 0, 103, 104], [105], [106, 107, 0]]
    feats = features(seqs, prompt=[2, 0, 1])
    run("default_position_ids_only", feats,
        why="Default options: only input_ids, labels and position_ids; the segments are the "
            "position_ids restarts [0,4,5,8] (transformers finds them the same way, "
            "prepare_fa_kwargs_from_position_ids). Labels [-100] ++ labels[1:] per example. Valid.")
    run("flash_attn_kwargs", feats, return_flash_attn_kwargs=True,
        why="return_flash_attn_kwargs=True adds cu_seq_lens_q=k=[0,4,5,8] (int32) and "
            "max_length_q=k=4, the longest example. A 1-token example and token 0 in content. Valid.")
    run("seq_idx", feats, return_flash_attn_kwargs=True, return_seq_idx=True,
        why="return_seq_idx=True adds seq_idx (int32) = example number per token. Valid.")
    run("seq_idx_without_cu", feats, return_seq_idx=True,
        why="seq_idx and position_ids, no cu_seq_lens: both mark the same 3 examples. Valid.")
    run("cu_without_position_ids", features([[201, 202], [203, 204, 205]], labels=False),
        return_flash_attn_kwargs=True, return_position_ids=False,
        why="return_position_ids=False with flash kwargs: the segments come from cu_seq_lens only; "
            "no labels key, so labels are [-100] ++ input_ids[1:]. Valid.")
    run("separator_id", features([[301, 302, 303], [304, 305]]), return_flash_attn_kwargs=True,
        separator_id=2,
        why="separator_id=2 (an EOS-like id not in the content): every example's first label is 2 "
            "instead of -100, by design (docstring: `separator_id` separates sequences within the "
            "concatenated labels). With the loss's shift the last token of each example predicts the "
            "separator, never the next example's first token. Valid.",
        notes="label-targets (causal): the first label of each example is the separator, not the token "
              "itself; the collator documents this, so the label at a segment start is not a target of "
              "that segment's tokens.",
        metadata={"separator_id": 2})
    run("numpy", feats, return_tensors="np", return_flash_attn_kwargs=True, return_seq_idx=True,
        why="return_tensors='np': the same batch as numpy arrays (int64 ids/labels/positions, int32 "
            "cu and seq_idx). Valid.")
    run("position_ids_start_2", features([[401, 402, 403], [404, 405]]), return_flash_attn_kwargs=True,
        position_ids_start=2,
        why="position_ids_start=2 for RoBERTa-like models (padding_idx + 1): positions restart at 2 in "
            "every example (the fix of transformers #47496). Valid.",
        metadata={"position_ids_start": 2})
