"""BioNeMo recipes' THD collator (`collator.py` of the esm2 / llama3 native_te recipes), run from the
bionemo-framework mirror around the real Hugging Face `DataCollatorForLanguageModeling`
(transformers, installed release) and the recipes' own tokenizers (read from the mirror).

`collator.py` imports `datasets` and `nvtx` (used by the packing dataset and for profiling ranges:
stand-ins) and TE's `pad_thd_sequences_for_cp`, which is bound to the *real* TE function imported
from the TransformerEngine mirror (its own heavy imports stubbed, see stacks/te.py).
`DataCollatorForContextParallel` reads only `mesh_dim_names` and `size()` of its device mesh: a
two-line stand-in with a "cp" dimension of size 2.

Contract facts used below (bionemo-recipes/models/esm2/collator.py at e40716591, the canonical
copy; the recipes' copies are byte-identical but for the notice header):
- `cu_seq_lens_q` holds the real sequence boundaries; `_pt_pad_to_multiple_of` (L877-934) appends
  one mock sequence of length (-T) mod m to it, filled with the tokenizer's pad id, labels -100,
  attention_mask 0, and *nothing* marks it as mock (issue #1561; no `num_real_seqs` exists).
- `_pad_sequences_to_be_divisible_by` (L210-234) keeps `cu_seq_lens_q` real, adds
  `cu_seq_lens_q_padded`, sets `pad_between_seqs`; `max_length_q` stays the longest real
  sequence, which is TE's definition of max_seqlen ("the maximum ... sequence length in a batch").
- labels are unshifted (HF convention: the model's loss shifts); CLM with `separator_id=-100`
  sets the label of every sequence's first token but the first to -100 (L183-184).
"""

from __future__ import annotations

import subprocess
import types

import torch

import common

REPO = "NVIDIA-BioNeMo/bionemo-framework"
HEAD = "e40716591"
ESM_COLLATOR = "bionemo-recipes/recipes/esm2_native_te/collator.py"
LLAMA_COLLATOR = "bionemo-recipes/recipes/llama3_native_te/collator.py"
ESM_TOK = "bionemo-recipes/recipes/esm2_native_te/tokenizers/esm2"
LLAMA_TOK = "bionemo-recipes/recipes/llama3_native_te/tokenizers/nucleotide_fast_tokenizer"
STACK = "bionemo"
TE_REPO, TE_HEAD = "NVIDIA/TransformerEngine", "d0067d0da"
TE_FILE = "transformer_engine/pytorch/attention/dot_product_attention/context_parallel.py"

STUBS = [
    "datasets (stand-in; only TokenPackingDataset's annotation uses it)",
    "nvtx (stand-in; annotate() is an identity decorator)",
    f"transformer_engine...context_parallel: pad_thd_sequences_for_cp bound to the real function of "
    f"{TE_REPO}@{TE_HEAD}:{TE_FILE}",
    "torch.distributed DeviceMesh for DataCollatorForContextParallel: stand-in with mesh_dim_names=('cp',), size()=2",
]


def _tokenizer(path):
    from transformers import AutoTokenizer

    out = common.SCRATCH / "tokenizers" / path.replace("/", "_")
    out.mkdir(parents=True, exist_ok=True)
    names = subprocess.run(["git", "-C", str(common.mirror(REPO)), "ls-tree", "--name-only",
                            f"{HEAD}:{path}"], check=True, capture_output=True, text=True).stdout.split()
    for n in names:
        (out / n).write_text(common.source(REPO, HEAD, f"{path}/{n}"))
    return AutoTokenizer.from_pretrained(str(out))


class _Nvtx(types.ModuleType):
    def annotate(self, *args, **kwargs):
        class _Range:
            def __call__(self, fn):
                return fn

            def __enter__(self):
                return self

            def __exit__(self, *exc):
                return False

        return _Range()


def _load(path):
    common.permissive_stub("transformer_engine", "transformer_engine_torch")
    te = common.upstream(TE_REPO, TE_HEAD, TE_FILE)
    stubs = {
        "datasets": common.stub("datasets", IterableDataset=object, Dataset=object),
        "nvtx": _Nvtx("nvtx"),
        "transformer_engine.pytorch.attention.dot_product_attention.context_parallel": common.stub(
            "transformer_engine.pytorch.attention.dot_product_attention.context_parallel",
            pad_thd_sequences_for_cp=te.pad_thd_sequences_for_cp),
    }
    return common.upstream(REPO, HEAD, path, stubs=stubs)


class _CpMesh:
    mesh_dim_names = ("cp",)

    def __init__(self, size):
        self._size = size

    def size(self, dim=0):
        return self._size


def _features(tok, texts):
    enc = tok(texts)
    return [{"input_ids": ids, "attention_mask": am} for ids, am in zip(enc["input_ids"], enc["attention_mask"])]


def _save(case, batch, *, file, function, features, expected, why, bug=None, meta=None, notes="",
          collator_args=None):
    common.save_case(
        STACK, case, batch, repo=REPO, commit=HEAD, file=file, function=function,
        input={"features": features, "collator": collator_args or {}},
        expected=expected, why=why, bug=bug, metadata={"profile": "bionemo", **(meta or {})},
        notes=notes, stubs=STUBS)


def generate():
    from transformers import DataCollatorForLanguageModeling

    esm_mod = _load(ESM_COLLATOR)
    llama_mod = _load(LLAMA_COLLATOR)
    esm_tok = _tokenizer(ESM_TOK)
    nt_tok = _tokenizer(LLAMA_TOK)
    if nt_tok.pad_token is None:  # llama3 dataset.py L105-107 (the recipe's own fallback)
        nt_tok.pad_token = nt_tok.eos_token
    test_features = [{"input_ids": [0, 5, 6, 7, 2]}, {"input_ids": [0, 8, 9, 10, 11, 2]},
                     {"input_ids": [0, 12, 13, 2]}]
    proteins = ["MKTAYIAK", "ACDG", "LLVKSE"]

    # B1. Upstream test_data_collator_with_flattening_basic (MLM p=0, position ids on).
    coll = esm_mod.DataCollatorWithFlattening(
        collator=DataCollatorForLanguageModeling(tokenizer=esm_tok, mlm_probability=0.0),
        return_position_ids=True)
    _save("esm2_flatten_positions", coll([dict(f) for f in test_features], return_tensors="pt"),
          file=ESM_COLLATOR, function="DataCollatorWithFlattening.__call__", features=test_features,
          collator_args={"mlm_probability": 0.0, "return_position_ids": True},
          meta={"causal": "false", "pad_token_id": "1"}, expected="pass",
          why="Upstream models/esm2/tests/test_collator.py::test_data_collator_with_flattening_basic "
              "(cu [0,5,11,15], max_length 6, positions arange per sequence). Plain flattening: every "
              "token real, offsets real, max_length_q = longest sequence, labels all -100 (p=0).",
          notes="ESM-2 in these recipes uses rotary embeddings, so 0-based per-sequence position ids "
                "are the right base (no padding_idx+1 offset as in HF's learned-absolute ESM).")

    # B2. ESM-2 THD recipe collator, real MLM masking (seed 42), tokenizer features.
    feats = _features(esm_tok, proteins)
    coll = esm_mod.DataCollatorWithFlattening(
        collator=DataCollatorForLanguageModeling(tokenizer=esm_tok, mlm_probability=0.15, seed=42))
    _save("esm2_mlm_flatten", coll([dict(f) for f in feats]), file=ESM_COLLATOR,
          function="DataCollatorWithFlattening.__call__ (wrapping HF DataCollatorForLanguageModeling, mlm)",
          features=feats, collator_args={"mlm_probability": 0.15, "seed": 42},
          meta={"causal": "false", "pad_token_id": "1"}, expected="pass",
          why="ESM-2 recipe THD collator (esm2_native_te/dataset.py L209-217) without padding: MLM labels "
              "are the original ids at masked positions and -100 elsewhere (HF collator), CLS/EOS never "
              "masked, attention_mask all 1, cu real. Valid.")

    # B3. Issue #1561: pad_to_multiple_of appends an unmarked mock sequence (tokenizer features).
    coll = esm_mod.DataCollatorWithFlattening(
        collator=DataCollatorForLanguageModeling(tokenizer=esm_tok, mlm_probability=0.15, seed=42),
        pad_to_multiple_of=16)
    _save("esm2_mock_pad_m16", coll([dict(f) for f in feats]), file=ESM_COLLATOR,
          function="DataCollatorWithFlattening._pad_batch_to_multiple_of -> _pt_pad_to_multiple_of",
          features=feats, collator_args={"mlm_probability": 0.15, "seed": 42, "pad_to_multiple_of": 16},
          meta={"causal": "false", "pad_token_id": "1", "pad_to_multiple_of": "16"},
          expected=["mock-marked"],
          bug="bionemo-recipes issue #1561 (open; only a docstring note in PR #1548 29121fe3d): the mock "
              "pad sequence is appended to cu_seq_lens_q and nothing marks it, so the perf logger counts "
              "it as useful attention work",
          why="ESM-2 THD recipe path (dataset.py L214-217: pad_to_multiple_of=token_micro_batch_size; 16 "
              "here). T=24 real tokens, so _pt_pad_to_multiple_of (collator.py L877-934) appends one "
              "8-token segment of the tokenizer's pad id 1 with labels -100 and attention_mask 0 and "
              "extends cu_seq_lens_q to [0,10,16,24,32]; no key marks it mock (no num_real_seqs in any "
              "branch), so a consumer counts it as a real sequence.")

    # B4. #1561 with the upstream test features (no attention_mask) and m=32: a 17-token mock,
    # longer than any real sequence; only the pad id and the -100 labels show it.
    coll = esm_mod.DataCollatorWithFlattening(
        collator=DataCollatorForLanguageModeling(tokenizer=esm_tok, mlm_probability=0.0),
        return_position_ids=True, pad_to_multiple_of=32)
    _save("esm2_mock_pad_m32_no_mask", coll([dict(f) for f in test_features]), file=ESM_COLLATOR,
          function="DataCollatorWithFlattening._pad_batch_to_multiple_of -> _pt_pad_to_multiple_of",
          features=test_features,
          collator_args={"mlm_probability": 0.0, "return_position_ids": True, "pad_to_multiple_of": 32},
          meta={"causal": "false", "pad_token_id": "1", "pad_to_multiple_of": "32"},
          expected=["mock-marked"],
          bug="bionemo-recipes issue #1561: unmarked mock pad sequence in cu_seq_lens_q",
          why="Upstream test features (5/6/4 tokens, no attention_mask) with m=32: cu [0,5,11,15,32], "
              "a 17-token trailing segment made only of the tokenizer's pad id 1 with labels -100, "
              "max_length_q raised to 17 (L917-919); nothing marks it mock (no num_real_seqs in any "
              "branch). The pad id (metadata pad_token_id=1) is what identifies it.")

    # B5. llama3 recipe CLM: separator_id=-100 (dataset.py L273-277), nucleotide tokenizer.
    dna = ["ACGTACGT", "GGTCA", "TTAGCCA"]
    feats_dna = _features(nt_tok, dna)
    coll = llama_mod.DataCollatorWithFlattening(
        collator=DataCollatorForLanguageModeling(tokenizer=nt_tok, mlm=False), separator_id=-100)
    _save("llama3_clm_separator", coll([dict(f) for f in feats_dna]), file=LLAMA_COLLATOR,
          function="DataCollatorWithFlattening.__call__ (wrapping HF DataCollatorForLanguageModeling, mlm=False)",
          features=feats_dna, collator_args={"mlm": False, "separator_id": -100},
          meta={"causal": "true", "pad_token_id": str(nt_tok.pad_token_id)}, expected="pass",
          why="llama3_native_te THD collator: labels = input_ids (unshifted, HF CLM) with -100 at the "
              "first token of every sequence but the first (collator.py L183-184), so the shifted loss "
              "never predicts across a boundary. Real offsets, no padding. Valid causal batch.")

    # B6. llama3 with per-sequence CP padding (pad_sequences_to_be_divisible_by=4 = 2*cp),
    # upstream test_..._causal_lm_and_padding style features (input_ids only).
    coll = llama_mod.DataCollatorWithFlattening(
        collator=DataCollatorForLanguageModeling(tokenizer=esm_tok, mlm=False), separator_id=-100,
        pad_sequences_to_be_divisible_by=4)
    _save("clm_cp_padding_d4", coll([dict(f) for f in test_features]), file=LLAMA_COLLATOR,
          function="DataCollatorWithFlattening._pad_sequences_to_be_divisible_by -> TE pad_thd_sequences_for_cp",
          features=test_features,
          collator_args={"mlm": False, "separator_id": -100, "pad_sequences_to_be_divisible_by": 4,
                         "tokenizer": "esm2 (as the upstream test)"},
          meta={"causal": "true", "pad_token_id": "1", "cp_size": "2"}, expected="pass",
          why="Upstream test_data_collator_with_flattening_with_labels_causal_lm_and_padding shape "
              "(d=4 here): cu_seq_lens_q real [0,5,11,15], cu_seq_lens_q_padded [0,8,16,20], each pad "
              "after its own sequence with labels -100, pad_between_seqs True. max_length_q stays 6, "
              "the longest real sequence: TE's max_seqlen is 'the maximum sequence length in a batch' "
              "(dot_product_attention.py max_seqlen note), so below the widest slot (8) is valid.",
          notes="The path leaves position_ids/attention_mask unpadded (nvidia-stacks.md 1.3.2); the "
                "features here have neither, as in the upstream test.")

    # B7. ESM-2 CP collator: DataCollatorForContextParallel over the padded MLM collator, cp=2.
    inner = esm_mod.DataCollatorWithFlattening(
        collator=DataCollatorForLanguageModeling(tokenizer=esm_tok, mlm_probability=0.15, seed=42),
        pad_sequences_to_be_divisible_by=4)
    cp = esm_mod.DataCollatorForContextParallel(collator=inner, device_mesh=_CpMesh(2))
    shards = cp([dict(f) for f in feats])
    why = ("create_cp_dataloader (esm2 dataset.py) + DataCollatorForContextParallel (collator.py L402-463): "
           "pad each sequence to 2*cp=4, drop attention_mask, zigzag-split input_ids/labels by "
           "_split_batch_by_cp_rank; every shard keeps the global cu_seq_lens_q (real) and "
           "cu_seq_lens_q_padded; max_length_q = ceil64(widest padded slot) = 64 (>= every slot). "
           "Slots are multiples of 2*cp, so the ranks reassemble to the padded batch.")
    for r, shard in enumerate(shards):
        _save(f"esm2_cp2/rank{r}", shard, file=ESM_COLLATOR,
              function="DataCollatorForContextParallel.__call__ -> _split_batch_by_cp_rank",
              features=feats, collator_args={"mlm_probability": 0.15, "seed": 42,
                                             "pad_sequences_to_be_divisible_by": 4, "cp_size": 2},
              meta={"causal": "false", "pad_token_id": "1", "cp_rank": str(r), "cp_size": "2"},
              expected="pass", why=why,
              notes="bionemo shards carry no cp_rank/cp_size tensor (the list index is the rank): "
                    "stated in metadata. pad_between_seqs (True) saved as a 0-d bool.")
    common.expect_group(STACK, "esm2_cp2", expected="pass", why=why, repo=REPO, commit=HEAD,
                        file=ESM_COLLATOR, function="DataCollatorForContextParallel.__call__")

    # B8. llama3 CP collator, causal: labels pre-shifted before the split -> shift_labels.
    dna8 = ["ACGTACG", "GGTCAGGT"]  # 8 and 9 tokens with BOS/EOS
    feats8 = [{"input_ids": f["input_ids"]} for f in _features(nt_tok, dna8)]
    inner = llama_mod.DataCollatorWithFlattening(
        collator=DataCollatorForLanguageModeling(tokenizer=nt_tok, mlm=False), separator_id=-100,
        pad_sequences_to_be_divisible_by=4)
    cp = llama_mod.DataCollatorForContextParallel(collator=inner, device_mesh=_CpMesh(2), is_causal_lm=True)
    shards = cp([dict(f) for f in feats8])
    why = ("train_fsdp2_cp.py L230-235: DataCollatorForContextParallel(is_causal_lm=True) pads every "
           "sequence to 2*cp, shifts labels by one on the *full* padded stream (L416-418) and only then "
           "splits, giving shift_labels (labels None). Upstream test_..._thd_causal_lm has the same "
           "shape (8 and 9 tokens, d=4). Shifted labels never cross a boundary: each sequence's last "
           "real position targets -100 via the separator; valid.")
    for r, shard in enumerate(shards):
        _save(f"llama3_cp2_causal/rank{r}", shard, file=LLAMA_COLLATOR,
              function="DataCollatorForContextParallel.__call__(is_causal_lm=True) -> _split_batch_by_cp_rank",
              features=feats8, collator_args={"mlm": False, "separator_id": -100,
                                              "pad_sequences_to_be_divisible_by": 4, "cp_size": 2,
                                              "is_causal_lm": True},
              meta={"causal": "true", "pad_token_id": str(nt_tok.pad_token_id), "cp_rank": str(r),
                    "cp_size": "2"},
              expected="pass", why=why,
              notes="labels is None in the shard (not saved); shift_labels holds the pre-shifted labels.")
    common.expect_group(STACK, "llama3_cp2_causal", expected="pass", why=why, repo=REPO, commit=HEAD,
                        file=LLAMA_COLLATOR, function="DataCollatorForContextParallel.__call__")
