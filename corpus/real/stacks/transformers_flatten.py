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

Older releases (bug reproductions and their controls) run in a subprocess from a side-by-side
`pip install --target` directory, so the 5.23.0 cases keep using the installed release:

    /tmp/realenv/bin/pip install --no-deps --target /tmp/tf_5.14.1 transformers==5.14.1 \
        huggingface_hub==1.33.0 tokenizers==0.22.2 httpx==0.28.1 httpcore==1.0.9 h11==0.16.0 \
        anyio==4.16.0 sniffio==1.3.1 idna==3.20 certifi==2026.10.18
    (the same with transformers==5.15.0 into /tmp/tf_5.15.0)

(5.14/5.15 need huggingface_hub < 2.0, which imports httpx, and tokenizers <= 0.23.0; torch,
numpy and safetensors come from /tmp/realenv.) `THDCHECK_TF_OLD=DIR` looks for `DIR/tf_VERSION`.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
import torch

import common
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


# Runs in a subprocess with PYTHONPATH=<the old release's --target dir>: calls the old
# DataCollatorWithFlattening on the features and torch.saves what it returned.
_OLD_RUNNER = r"""
import json, sys, torch, transformers, huggingface_hub, tokenizers
from transformers import DataCollatorWithFlattening
args = json.loads(sys.argv[1])
assert transformers.__version__ == args["version"], transformers.__version__
assert transformers.__file__.startswith(args["target"]), transformers.__file__
coll = DataCollatorWithFlattening(**args["kw"])
batch = coll(args["features"])
torch.save({"batch": dict(batch), "versions": {"transformers": transformers.__version__,
            "huggingface_hub": huggingface_hub.__version__, "tokenizers": tokenizers.__version__}},
           args["out"])
"""


def old_release(version):
    """The side-by-side install of `transformers==version` (see the module docstring)."""
    target = Path(os.environ.get("THDCHECK_TF_OLD", "/tmp")) / f"tf_{version}"
    if not (target / "transformers").is_dir():
        sys.exit(f"no transformers {version} at {target}: install it with pip install --no-deps "
                 f"--target {target} transformers=={version} (see stacks/transformers_flatten.py)")
    return target


def call_old(version, feats, kw):
    """What `DataCollatorWithFlattening(**kw)(feats)` of transformers `version` returns."""
    target = old_release(version)
    out = Path(tempfile.mkdtemp(prefix="tf-old-", dir=common.SCRATCH)) / "batch.pt"
    args = {"version": version, "target": str(target), "kw": kw, "features": feats, "out": str(out)}
    env = dict(os.environ, PYTHONPATH=str(target))
    subprocess.run([sys.executable, "-c", _OLD_RUNNER, json.dumps(args)], check=True, env=env)
    got = torch.load(out, weights_only=True)
    return got["batch"], got["versions"]


def run(case, feats, *, expected="pass", why, notes="", bug=None, metadata=None, return_tensors=None,
        release=None, **kw):
    """Runs the collator of the installed release, or of `release` (an older PyPI release, in a
    subprocess) and saves what it returned."""
    old_versions = None
    if release is None:
        from transformers import DataCollatorWithFlattening

        coll = DataCollatorWithFlattening(**kw)
        batch = coll(feats) if return_tensors is None else coll(feats, return_tensors=return_tensors)
    else:
        assert return_tensors is None
        batch, old_versions = call_old(release, feats, kw)
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
    commit = COMMIT if release is None else f"pypi:transformers=={release}"
    path = save_case(STACK, case, out, repo=REPO, commit=commit, file=FILE, function=fn,
                     input={"features": feats}, expected=expected, why=why, bug=bug, metadata=meta,
                     notes=notes)
    if old_versions is not None:
        # The record's versions are the subprocess's (the old release), not this process's.
        record = common.RECORDS[-1]
        record["versions"].update(old_versions)
        record["versions"]["installed_as"] = (
            f"pip install --no-deps --target tf_{release} (see stacks/transformers_flatten.py), "
            "run in a subprocess with PYTHONPATH set to it")
        path.with_suffix(".json").write_text(json.dumps(record, indent=1) + "\n")


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
        metadata={"position_ids_start": 2, "position_base": 2})

    # transformers #47496: before `position_ids_start` (PR #47525, first released in 5.15.0) the
    # collator numbered every example's positions from 0, while RoBERTa-family models number
    # theirs from padding_idx + 1. 5.14.1 is the last release without the option.
    roberta = [{"input_ids": [0, 31414, 232, 2]}, {"input_ids": [0, 30086, 2]}]
    roberta_meta = {"causal": "false", "position_base": 2, "pad_token_id": 1}
    roberta_contract = (
        "A RoBERTa model (RobertaConfig.pad_token_id = 1, so RobertaEmbeddings.padding_idx = 1) numbers "
        "its positions itself from padding_idx + 1 = 2 (modeling_roberta.py at 5.14.1, "
        "create_position_ids_from_input_ids: 'Position numbers begin at padding_idx+1'; rows 0 and "
        "padding_idx of the position table are reserved). Position ids handed to the model replace its "
        "own, so a packed batch must restart them at 2 in every example. ")
    roberta_bug = ("transformers #47496 (0-based position_ids of DataCollatorWithFlattening silently degrade "
                   "RoBERTa-family models; fixed by PR #47525, position_ids_start, first released in 5.15.0)")
    run("roberta_v5_14_1_flash_attn_kwargs", roberta, release="5.14.1", return_flash_attn_kwargs=True,
        expected=["position-ids"], bug=roberta_bug, metadata=roberta_meta,
        why=roberta_contract +
            "transformers 5.14.1 (the release #47496 was reported on, and the last before 5.15.0) has no "
            "position_ids_start: DataCollatorWithFlattening always writes list(range(len(input_ids))), so "
            "the two examples get positions [0,1,2,3,0,1,2] instead of [2,3,4,5,2,3,4]: every token reads "
            "the embedding of the position two before its own, the first two tokens of each example the reserved rows 0 and 1. "
            "cu_seq_lens [0,4,7] and max_length 4 are right. The metadata states what the model's config "
            "says and the tensors cannot: position_base = 2, pad_token_id = 1, and causal = false (an "
            "encoder; the collator's causal-LM labels are not what it trains on). Must fail position-ids.",
        notes="RoBERTa-style ids (<s> = 0, </s> = 2, pad 1 absent); no labels key, so labels are "
              "[-100] ++ input_ids[1:], unused by an encoder. The same features at 5.15.0 with "
              "position_ids_start=2: roberta_v5_15_0_position_ids_start_2 (pass).")
    run("roberta_v5_14_1_default", roberta, release="5.14.1",
        expected=["position-ids"], bug=roberta_bug, metadata=roberta_meta,
        why=roberta_contract +
            "Default options of 5.14.1 (position ids only, the path of #47496's report): positions "
            "[0,1,2,3,0,1,2], the examples marked only by the restarts to 0, which the model's flash "
            "attention path finds (prepare_fa_kwargs_from_position_ids: position_ids == 0 at 5.14.1). "
            "The boundaries are right, the numbering is 2 below the model's: must fail position-ids.")
    run("roberta_v5_15_0_position_ids_start_2", roberta, release="5.15.0", return_flash_attn_kwargs=True,
        position_ids_start=2, metadata=roberta_meta,
        why=roberta_contract +
            "Control: transformers 5.15.0, the first release with PR #47525's position_ids_start, called "
            "with position_ids_start=2 as its docstring tells RoBERTa users to: positions [2,3,4,5,2,3,4], "
            "cu_seq_lens [0,4,7], max_length 4. Valid for the stated position_base = 2.")
    run("base0_v5_14_1_default", feats, release="5.14.1", metadata={"position_base": 0},
        why="Control: the pre-#47525 collator is right for a model that numbers positions from 0 "
            "(Llama-like, RoPE; the default DataCollatorWithFlattening was written for, #31629): 5.14.1 "
            "with default options on the features of default_position_ids_only returns the same batch as "
            "5.23.0 (positions restart at 0 at [0,4,5,8], labels [-100] ++ labels[1:]). The bug of "
            "#47496 is in the pairing of collator and model, which only the stated position_base shows. "
            "Valid.")
