"""NVIDIA/Megatron-LM (Megatron Core) at the core_v0.19.0 release (5be962670): the pretraining
sample of `GPTDataset.__getitem__` (megatron/core/datasets/gpt_dataset.py, with its real
`_query_document_sample_shuffle_indices` and `_get_ltor_masks_and_position_ids`), collated by
torch's `default_collate` (the DataLoader's), then `flatten_batch_for_packed_sequences` and
`get_batch_on_this_cp_rank` (megatron/core/utils.py), the order of `pretrain_gpt.py` `get_batch`.

How Megatron feeds it: the IndexedDataset holds tokenized documents, each ending with the EOD
token (tools/preprocess_data.py `--append-eod`); the sample index (`helpers.build_sample_idx`, the
C++ helper, compiled here from helpers.cpp at the same commit with pybind11) cuts the
concatenated documents into samples of `sequence_length + 1` tokens (`add_extra_token_to_sequence`,
default), consecutive samples sharing one token. The dataset object here is a stand-in holding
what `_build_document_sample_shuffle_indices` would build (document index in order, the real
sample index, the identity shuffle: order does not change a sample) and a list-backed
`IndexedDataset.get`.

Contract (gpt_dataset.py, core_v0.19.0):
- `tokens = text[:-1]`, `labels = text[1:]`: labels are **shifted**, and cross documents (a
  pretraining objective): the EOD of a document is labelled with the next document's first token;
  `eod_mask_loss` sets `loss_mask` 0 at every EOD input token (`_get_ltor_masks_and_position_ids`);
- `inter_document_masking` (#5298): `cu_seqlens` [S+1] int32 from the sample's document lengths
  (the extra token removed), right-padded with `sequence_length` (zero-length repeats, "the merge
  helper strips them later"), `max_seqlen`, `position_ids` restarting per document, no
  attention mask; a short (padded) sample folds its padding into its last document;
- without it, `create_attention_mask` gives a `[1, S, S]` bool mask (True = masked) that
  `reset_attention_mask` cuts at each EOD, and `reset_position_ids` restarts positions after each
  EOD: documents are delimited by EOD tokens only;
- `flatten_batch_for_packed_sequences` (utils.py) merges the per-sample `cu_seqlens` of a
  micro-batch into one 1-D stream (`_merge_cu_seqlens_across_micro_batch`, #5454) and reshapes
  tokens/labels/loss_mask/position_ids to `[1, B*S]`;
- `get_batch_on_this_cp_rank(..., use_per_sequence_balancing=inter_document_masking and not
  is_sft)`: pretraining zigzags the whole flattened row over `2*cp` chunks (rank r: chunks r and
  2cp-1-r), leaving `cu_seqlens` global; `_get_batch_on_this_cp_rank_per_document_balancing`
  (SFT) needs TransformerEngine's CUDA `thd_get_partitioned_indices` and is not run here.

No bug with a fix was found on this path (#5298 and #5454 are from June 2026 and unchanged
since; c94d58f32 "clone loss mask instead of assigning it to cached_loss_mask" zeroes real
targets' loss mask after a padded sample, which no batch-layout rule can see).
"""

from __future__ import annotations

import importlib.machinery
import importlib.util
import subprocess
import sys
import sysconfig
from types import SimpleNamespace

import numpy as np

from common import SCRATCH, permissive_stub, save_case, source, upstream

REPO = "NVIDIA/Megatron-LM"
STACK = "megatron_lm"
COMMIT = "core_v0.19.0"
DATASET = "megatron/core/datasets/gpt_dataset.py"
UTILS = "megatron/core/utils.py"
EOD = 2


class ListIndexedDataset:
    """Stand-in for IndexedDataset: `get(idx, offset, length)` returns the document's tokens
    `[offset : offset + length]` (length None: to the end), as IndexedDataset.get does."""

    def __init__(self, docs):
        self.docs = [np.asarray(d, dtype=np.int32) for d in docs]
        self.sequence_lengths = np.array([len(d) for d in docs], dtype=np.int32)

    def get(self, idx, offset=0, length=None):
        d = self.docs[idx]
        return d[offset:] if length is None else d[offset:offset + length]


_MODS = {}


def load():
    if _MODS:
        return _MODS
    stubs = permissive_stub("megatron", "transformer_engine", "transformer_engine_torch")
    # The sample index: the real C++ helper, compiled from helpers.cpp at the same commit.
    build = SCRATCH / "megatron_helpers"
    build.mkdir(parents=True, exist_ok=True)
    (build / "helpers.cpp").write_text(source(REPO, COMMIT, "megatron/core/datasets/helpers.cpp"))
    ext = build / f"helpers_cpp{sysconfig.get_config_var('EXT_SUFFIX')}"
    inc = subprocess.run([sys.executable, "-m", "pybind11", "--includes"], check=True,
                         capture_output=True, text=True).stdout.split()
    subprocess.run(["g++", "-O1", "-shared", "-std=c++17", "-fPIC", *inc, str(build / "helpers.cpp"),
                    "-o", str(ext)], check=True)
    loader = importlib.machinery.ExtensionFileLoader("helpers_cpp", str(ext))
    spec = importlib.util.spec_from_file_location("helpers_cpp", ext, loader=loader)
    cpp = importlib.util.module_from_spec(spec)
    loader.exec_module(cpp)
    sys.modules["megatron.core.datasets.helpers_cpp"] = cpp
    helpers = upstream(REPO, COMMIT, "megatron/core/datasets/helpers.py", name="mlm_helpers")
    gpt = upstream(REPO, COMMIT, DATASET, name="mlm_gpt_dataset")
    utils = upstream(REPO, COMMIT, UTILS, name="mlm_core_utils")
    _MODS.update(helpers=helpers, gpt=gpt, utils=utils, stubs=stubs)
    return _MODS


def dataset(docs, *, seq, pad=-1, drop_last=True, **cfg):
    """A GPTDataset stand-in with the real indices: `__getitem__` and
    `_query_document_sample_shuffle_indices` are GPTDataset's own, bound to it."""
    m = load()
    low = ListIndexedDataset(docs)
    sizes = low.sequence_lengths
    doc_index = np.arange(len(docs), dtype=np.int32)
    sample_index = m["helpers"].build_sample_idx(sizes, doc_index, seq, 1, int(sizes.sum()),
                                                 drop_last, True)
    config = SimpleNamespace(sequence_length=seq, add_extra_token_to_sequence=True,
                             tokenizer=SimpleNamespace(eod=EOD), **cfg)
    ds = SimpleNamespace(dataset=low, config=config, document_index=doc_index,
                         sample_index=sample_index,
                         shuffle_index=np.arange(len(sample_index) - 1, dtype=np.uint32),
                         _pad_token_id=pad,
                         masks_and_position_ids_are_cacheable=not any(
                             [cfg["reset_position_ids"], cfg["reset_attention_mask"],
                              cfg["eod_mask_loss"]]),
                         masks_and_position_ids_are_cached=False, cached_attention_mask=None,
                         cached_loss_mask=None, cached_position_ids=None)
    G = m["gpt"].GPTDataset
    ds._query_document_sample_shuffle_indices = G._query_document_sample_shuffle_indices.__get__(ds)
    ds.getitem = G.__getitem__.__get__(ds)
    return ds, sample_index


STUBS = ["megatron.*, transformer_engine*: permissive stand-ins (imports of gpt_dataset.py and "
         "utils.py the functions do not use)",
         "the GPTDataset object: a namespace with the real __getitem__ and "
         "_query_document_sample_shuffle_indices bound to it, config fields as GPTDatasetConfig "
         "names them, a list-backed IndexedDataset.get, document_index = arange, shuffle_index = "
         "arange, sample_index = the real helpers.build_sample_idx (helpers.cpp compiled with "
         "pybind11 and g++ at the same commit)",
         "_pad_token_id = -1 (_PAD_TOKEN_ID: a tokenizer without a pad token)"]


def run(case, docs, *, seq, rows, cfg, cp=None, drop_last=True, expected="pass", why, notes="", pending=None,
        metadata=None):
    m = load()
    import torch
    from torch.utils.data import default_collate

    ds, sample_index = dataset(docs, seq=seq, drop_last=drop_last, **cfg)
    samples = [ds.getitem(i) for i in rows]
    batch = default_collate(samples)
    fn = (f"GPTDataset.__getitem__ for samples {list(rows)} (sequence_length={seq}, "
          f"{', '.join(f'{k}={v}' for k, v in cfg.items())}) -> default_collate")
    if "cu_seqlens" in batch:
        batch = m["utils"].flatten_batch_for_packed_sequences(batch)
        fn += " -> flatten_batch_for_packed_sequences"
    # The EOD id is the tokenizer's (the documents end with it: the profile's documents = "eos").
    meta = {"causal": "true", "labels": "shifted", "objective": "pretrain", "profile": "megatron_lm",
            "eos_token_id": EOD}
    meta.update(metadata or {})
    inp = {"documents": docs, "sample_index": sample_index.tolist(), "rows": list(rows)}
    if cp is None:
        save_case(STACK, case, batch, repo=REPO, commit=COMMIT, file=f"{DATASET}, {UTILS}",
                  function=fn, input=inp, expected=expected, why=why, metadata=meta, notes=notes,
                  stubs=m["stubs"] + STUBS, pending=pending)
        return batch
    import torch.distributed as dist

    orig = dist.get_world_size, dist.get_rank
    try:
        for r in range(cp):
            dist.get_world_size = lambda group=None: cp
            dist.get_rank = lambda group=None, r=r: r
            shard = m["utils"].get_batch_on_this_cp_rank(
                {k: (v.clone() if isinstance(v, torch.Tensor) else v) for k, v in batch.items()},
                is_hybrid_cp=False, cp_group=None, use_per_sequence_balancing=True)
            save_case(STACK, f"{case}/rank{r}", shard, repo=REPO, commit=COMMIT,
                      file=f"{DATASET}, {UTILS}",
                      function=fn + f" -> get_batch_on_this_cp_rank(is_hybrid_cp=False, "
                                    f"use_per_sequence_balancing=True) on rank {r} of {cp}",
                      input=inp, expected=expected, why=why,
                      metadata={**meta, "cp_size": cp, "cp_rank": r}, notes=notes,
                      stubs=m["stubs"] + STUBS + [f"torch.distributed.get_world_size -> {cp}, "
                                                  f"get_rank -> {r} (no process group)"],
                      pending=pending)
    finally:
        dist.get_world_size, dist.get_rank = orig


def generate() -> None:
    E = EOD
    # Documents as preprocess_data.py --append-eod writes them.
    docs = [[11, 12, 13, 14, E], [21, 22, E], [31, 32, 33, 34, 35, 36, E], [41, 42, 43, E],
            [51, 52, 53, 54, 55, E], [61, 62, E]]
    idm = dict(reset_position_ids=False, reset_attention_mask=False, eod_mask_loss=True,
               create_attention_mask=False, inter_document_masking=True)
    run("inter_doc_mbs2_v0.19.0", docs, seq=8, rows=[0, 1], cfg=idm,
        why="Inter-document masking (#5298) with eod_mask_loss, sequence_length 8, a micro-batch "
            "of samples 0 and 1 (tokens 0..8 and 8..16 of the document stream, sharing token 8). "
            "Sample 0: documents 5 + 3 = 8; sample 1: the 7-token document 3 then the first token "
            "of document 4. flatten_batch_for_packed_sequences merges cu_seqlens [0,5,8,8...] "
            "and [0,7,8,8...] into [0,5,8,15,16] over one [1,16] row, max_seqlen 7, "
            "position_ids restarting per document. labels are text[1:] (shifted): each EOD is "
            "labelled with the next document's first token, loss_mask 0 there (eod_mask_loss). "
            "Pretraining (objective pretrain). Valid.",
        notes="Sample 0 ends at a document end, so its extra (label) token is document 3's first "
              "token under loss_mask 0 (an EOD input).")
    run("inter_doc_cut_v0.19.0", docs, seq=8, rows=[1, 2], cfg=dict(idm, eod_mask_loss=False),
        why="The same stream without eod_mask_loss, samples 1 and 2: sample 1 ends inside "
            "document 4 (its first token), so its last label is document 4's second token, the "
            "true next token of the same document, which continues at sample 2's start as a "
            "segment of its own; every EOD is labelled with the next document's first token and "
            "trained (Megatron's pretraining objective, loss_mask all 1). cu_seqlens "
            "[0,7,8,11,16] after the merge. Valid as pretraining (objective pretrain).")
    # A short last sample (drop_last_partial_sequence False): padding folded into the last document.
    short = [[11, 12, 13, E], [21, 22, 23, 24, 25, E], [31, 32, E]]
    run("inter_doc_padded_v0.19.0", short, seq=8, rows=[1], cfg=idm, drop_last=False,
        # GPTDataset.__getitem__ writes id 0 where _pad_token_id padded the sample
        # (tokens[tokens == self._pad_token_id] = 0).
        metadata={"pad_token_id": 0},
        why="A validation dataset without drop_last_partial_validation_sequence: sample 1 holds "
            "the last 5 tokens (document 1's tail [25 E] after the shared token 24, and document "
            "2 [31 32 E]) and 3 pad tokens (_pad_token_id -1, mapped to id 0 in tokens and "
            "labels, loss_mask 0). inter_document_masking folds the shortfall into the last "
            "document (\"fold the padding into the last document so cu_seqlens[-1] equals "
            "sequence_length\"): cu_seqlens [0,2,8]. Valid: the pads follow the last real token "
            "in its own segment under causal attention, and carry loss_mask 0.",
        notes="drop_last_partial_sequence=False in build_sample_idx (what GPTDataset passes for "
              "a validation split without drop_last_partial_validation_sequence).")

    # Classic path: 4-D-style [1,S,S] mask cut at EOD, positions reset at EOD.
    classic = dict(reset_position_ids=True, reset_attention_mask=True, eod_mask_loss=True,
                   create_attention_mask=True, inter_document_masking=False)
    run("eod_mask_mbs2_v0.19.0", docs, seq=8, rows=[0, 1], cfg=classic,
        why="The pre-#5298 way to isolate documents: reset_attention_mask cuts the [1, S, S] "
            "causal mask after each EOD, reset_position_ids restarts positions after each EOD, "
            "eod_mask_loss zeroes the loss at EOD inputs. default_collate stacks [2, 1, 8, 8]. "
            "Samples 0 and 1: documents [5,3] and [7,1] by their EODs. Valid.")

    # CP: per-sequence zigzag of the flattened pretraining row.
    run("inter_doc_cp2_v0.19.0", docs, seq=8, rows=[0, 1], cfg=idm, cp=2,
        why="pretrain_gpt.get_batch with --context-parallel-size 2 and inter-document masking: "
            "get_batch_on_this_cp_rank(use_per_sequence_balancing=True) views the [1,16] row as "
            "4 chunks of 4 and keeps chunks (0,3) on rank 0 and (1,2) on rank 1 for tokens, "
            "labels, loss_mask and position_ids; cu_seqlens and max_seqlen stay global. Expected "
            "valid by Megatron's design (utils.py: 'use per-sequence zigzag even when cu_seqlens "
            "is present (e.g., for inter-document masking where document lengths are not "
            "divisible by 2 * cp_size)'); not established here is how the attention kernel "
            "pairs the global offsets with the row-level chunks.")
