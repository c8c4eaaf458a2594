"""allenai/OLMo-core: the numpy token-file datasets of src/olmo_core/data/numpy_dataset.py
(`NumpyFSLDataset`, `NumpyPackedFSLDataset`, `NumpyPaddedFSLDataset`) read through the data
loader's `_get_dataset_item` (data_loader.py) and batched by `DataCollator.__call__`
(collator.py), run at the v2.5.0 release (002e0d794, the latest; HEAD fa6c5014c has the same
collator.py and data/utils.py, and numpy_dataset.py differs only in an error message), at that
main commit, and at v1.3.1 / v1.3.2 for the one layout bug with a fix commit. Each case writes its token
stream as a raw numpy memmap file (what the Dolma toolkit writes: headerless uint16/uint32 ids)
in a scratch directory, builds the dataset on it (`prepare()` where it exists), and collates
instances `0..B-1` in index order (the data loader shuffles; order does not change the layout).

Contract (file:line at v2.5.0):
- `DataCollator.__call__` (collator.py:42-178) returns `input_ids` [B, S] int64, right-padded
  with `pad_token_id` (all FSL datasets already return exactly `sequence_length` tokens, so the
  collator adds no padding here); `label_mask` [B, S] bool when the instances carry one (padded
  with False, :113-124); `index` [B] int64 (the loader's `_get_dataset_item` adds it,
  data_loader.py:603-608); `instance_mask` [B] bool when an `InstanceFilterConfig` is set;
  `doc_lens` [B, max_docs] (the instances' int32 `doc_lens` right-padded with 0, :136-141, :171);
  `max_doc_lens` a Python list with `max(doc_lens)` per row (:141, :174), saved here as an int64
  tensor [B] (the record says so); `metadata` (a list of dicts, when configured) is not a tensor
  and is not saved. No dataset in OLMo-core emits `attention_mask`. There is no `labels` key.
- Labels are derived by the train module (train_module/transformer/train_module.py:350-351)
  with `get_labels` (data/utils.py:590-605): `input_ids` with -100 where `label_mask` is False,
  `attention_mask` == 0 or the row's `instance_mask` is False, then shifted left one token within
  the row, the last position -100. Labels therefore cross documents by design (pretraining: a
  document's EOS predicts the next document's first token; only a masked target stops it).
- `doc_lens` = `get_document_lengths(input_ids, eos_token_id, bos_token_id)` (data/utils.py:
  339-377) of the whole instance, padding included (numpy_dataset.py:618-621 FSL, :1236-1239
  packed, computed after the padding of :1221-1227; iter_document_indices, data/utils.py:170-250,
  finds the packer's documents the same way): without `bos_token_id` a document ends at
  every EOS, and the row's tail after the last EOS is one more document; with `bos_token_id` a
  boundary is only an EOS immediately followed by a BOS, and the row end. The model turns them
  into `cu_doc_lens` = cumsum of the non-zero entries over the flattened batch
  (`get_cumulative_document_lengths`, data/utils.py:380-392; nn/transformer/model.py:396-400) and
  `max_doc_len = max(max_doc_lens)`: so the zeros are row padding of `doc_lens`, every row's
  entries sum to S, and the FlashAttention varlen documents are exactly the `doc_lens` entries.
- Padding (packed dataset, numpy_dataset.py:1221-1230; padded dataset :921-930): `pad_token_id`,
  `label_mask` False. What it becomes in `doc_lens` depends on the ids: pad != EOS, no BOS: one
  final document of pad tokens; pad == EOS without BOS (`from_hf` whenever the HF config has no
  pad id, tokenizer.py:135-158), or pad == EOS == BOS (TokenizerConfig.gpt2): every pad token is
  a one-token document; BOS set and pad != BOS: no boundary before the pads, so they are the
  tail of the last real document. Their labels are -100 in every case (label_mask False).
  (A trap, not a case here: with BOS == EOS configured, as gpt2 and Qwen3 do, data written with
  one EOS between documents has no "EOS BOS" pair, so whole rows become one document; a branch
  script, 1e3997149, works around it by dropping bos_token_id.)
- Positions (no position ids in the batch): at v2.5.0 RoPE uses the row positions 0..S-1
  (nn/rope.py has no per-document positions); since #663 (60d2487ab, after v2.5.0, in HEAD)
  `RotaryEmbedding` given `cu_doc_lens` restarts positions at 0 in every `doc_lens` document
  (HEAD nn/rope.py:508-555, nn/attention/__init__.py:519-537, other RoPE classes raise), so at
  HEAD the positions are implied by `doc_lens`, pad documents included.
- A row of `NumpyFSLDataset` is a fixed window of the concatenated token stream: its first
  document may be the tail of one that began in the previous row, its last may be cut (no EOS).

Bug reproduced at its pre-fix release: #55 (d72a6cae8, "Fix label mask tensor created by
`NumpyPaddedFSLDataset`", in v1.3.2): at v1.3.1 the padded dataset built `label_mask` as
`F.pad(torch.ones_like(input_ids), pad_shape, value=self.pad_token_id)`, an int64 mask padded
with the pad id, which `DataCollator` casts to bool: True on every pad token whenever
`pad_token_id != 0`, so the pads are trained/evaluated as labels (the LM evaluator,
eval/lm_evaluator.py, selects losses with `label_mask[idx][1:]`).

Not reproduced (no merged fix): #594 / PR #653 (open): SFT data whose chat template puts the EOS
id inside a conversation is split into many documents by the EOS scan; PR #843 (open): documents
without a terminating EOS merge with the next one (boundaries should come from the .csv.gz
metadata). Both need ground truth the batch does not hold.
"""

from __future__ import annotations

import inspect
import shutil
import sys
import tempfile
import types
from pathlib import Path
from types import SimpleNamespace

import numpy as np

from common import mirror, permissive_stub, save_case, stub, upstream

REPO = "allenai/OLMo-core"
STACK = "olmo_core"
RELEASE = "v2.5.0"
HEAD = "fa6c5014c9f6e9ee789da2d9c20d5126fee8df0d"  # main at the time of writing
PRE_55 = "v1.3.1"  # NumpyPaddedFSLDataset label_mask padded with pad_token_id
FIX_55 = "v1.3.2"  # contains d72a6cae8 (#55)

COLLATOR = "src/olmo_core/data/collator.py"
DATASET = "src/olmo_core/data/numpy_dataset.py"
LOADER = "src/olmo_core/data/data_loader.py"
UTILS = "src/olmo_core/data/utils.py"

# Real files, in import order (those missing at a commit are skipped).
_REAL = [
    ("olmo_core.aliases", "src/olmo_core/aliases.py"),
    ("olmo_core.exceptions", "src/olmo_core/exceptions.py"),
    ("olmo_core.config", "src/olmo_core/config.py"),
    ("olmo_core.utils", "src/olmo_core/utils.py"),
    ("olmo_core.fs_cache", "src/olmo_core/fs_cache.py"),
    ("olmo_core.io", "src/olmo_core/io.py"),
    ("olmo_core.distributed.utils", "src/olmo_core/distributed/utils.py"),
    ("olmo_core.data.types", "src/olmo_core/data/types.py"),
    ("olmo_core.data.utils", UTILS),
    ("olmo_core.data.collator", COLLATOR),
    ("olmo_core.data.numpy_dataset", DATASET),
    ("olmo_core.data.data_loader", LOADER),
]
_PERMISSIVE = ("cached_path", "requests", "bettermap", "boto3",
               "botocore", "google", "olmo_core.distributed.parallel", "olmo_core.data.mixes",
               "olmo_core.data.source_mixture", "olmo_core.data.tokenizer")
_STUBS: list[str] = []

# Tokenizer ids as OLMo-core's TokenizerConfig states them (src/olmo_core/data/tokenizer.py).
DOLMA2 = dict(eos=100257, pad=100277, bos=None, dtype=np.uint32, vocab=100278,
              name="TokenizerConfig.dolma2() (eos 100257, pad 100277, no bos)")
DOLMA2_SIGDIG = dict(eos=100257, pad=100277, bos=100257, dtype=np.uint32, vocab=100278,
                     name="TokenizerConfig.dolma2_sigdig() (eos = bos = 100257, pad 100277)")
NO_PAD = dict(eos=100257, pad=100257, bos=None, dtype=np.uint32, vocab=100278,
              name="dolma2 ids with pad = eos = 100257, no bos: what TokenizerConfig.from_hf gives "
                   "for a tokenizer whose HF config has no pad_token_id")
LLAMA3 = dict(eos=128001, pad=128001, bos=128000, dtype=np.uint32, vocab=128256,
              name="Llama-3-style ids as TokenizerConfig.from_hf reads them from an HF config with "
                   "bos 128000, eos 128001 and no pad_token_id (so pad = eos = 128001)")
NEOX = dict(eos=50279, pad=1, bos=None, dtype=np.uint16, vocab=50280,
            name="TokenizerConfig.gpt_neox_olmo_dolma_v1_5() (eos 50279, pad 1)")


def load(commit: str) -> SimpleNamespace:
    """The real OLMo-core files at `commit` as `olmo_core.*` modules (package __init__ files are
    not run: `olmo_core`, `olmo_core.data`, `olmo_core.distributed` are empty packages)."""
    global _STUBS
    if not _STUBS:
        _STUBS = permissive_stub(*_PERMISSIVE) + [
            "olmo_core, olmo_core.data, olmo_core.distributed: empty packages (their __init__ "
            "files are not run)",
            "dataclass_extensions: Registrable (register(name) -> identity decorator), encode, "
            "decode (config (de)serialization, unused)",
            "real files at the same commit (those that exist there): "
            + ", ".join(p for _, p in _REAL),
        ]
    for name in [n for n in list(sys.modules) if n == "olmo_core" or n.startswith("olmo_core.")]:
        if not any(name == p or name.startswith(p + ".") for p in _PERMISSIVE):
            del sys.modules[name]
    sys.modules["dataclass_extensions"] = stub(
        "dataclass_extensions", Registrable=_Registrable, encode=lambda x: x,
        decode=lambda cls, d: cls(**d))
    for pkg in ("olmo_core", "olmo_core.data", "olmo_core.distributed"):
        mod = types.ModuleType(pkg)
        mod.__path__ = []
        sys.modules[pkg] = mod
    mods = {}
    tree = set(_ls(commit))
    for name, path in _REAL:
        if path in tree:
            mods[name.rsplit(".", 1)[-1] if name.startswith("olmo_core.data.") else name] = \
                upstream(REPO, commit, path, name=name)
    return SimpleNamespace(collator=mods["collator"], nd=mods["numpy_dataset"],
                           dl=mods["data_loader"], utils=mods["utils"])


class _Registrable:
    """Stand-in for dataclass_extensions.Registrable (config registry, unused here)."""

    @classmethod
    def register(cls, name, *args, **kwargs):
        return lambda c: c


def _ls(commit: str) -> list[str]:
    import subprocess

    out = subprocess.run(["git", "-C", str(mirror(REPO)), "ls-tree", "-r", "--name-only", commit,
                          "src/olmo_core/"], check=True, capture_output=True, text=True)
    return out.stdout.split()


def write(tmp: Path, name: str, data, dtype) -> Path:
    """A raw token (or bool label-mask) memmap file, as the Dolma toolkit writes them."""
    path = tmp / name
    mm = np.memmap(path, mode="w+", dtype=dtype, shape=(len(data),))
    mm[:] = np.asarray(data, dtype=dtype)
    mm.flush()
    del mm
    return path


def run(case, commit, *, dataset, tok, docs=None, stream=None, masks=None, sequence_length,
        rows, kwargs=None, expected="pass", why, bug=None, notes=""):
    """Builds `dataset` (class name in numpy_dataset.py) over one token file at `commit`, reads
    instances `rows` through the loader's `_get_dataset_item` and collates them."""
    m = load(commit)
    tmp = Path(tempfile.mkdtemp(prefix="olmo-core-"))
    tokens = stream if stream is not None else [t for d in docs for t in d]
    paths = [write(tmp, "part-0-00000.npy", tokens, tok["dtype"])]
    cls = getattr(m.nd, dataset)
    kw = dict(sequence_length=sequence_length, pad_token_id=tok["pad"], eos_token_id=tok["eos"],
              vocab_size=tok["vocab"], dtype=tok["dtype"])
    if "vocab_size" not in inspect.signature(cls.__init__).parameters:
        del kw["vocab_size"]  # v1.3.x datasets take no vocab_size
    shown_kw = {}
    for k, v in (kwargs or {}).items():
        # a string value names a real object built from the loaded numpy_dataset module
        kw[k] = eval(v, vars(m.nd)) if isinstance(v, str) else v
        shown_kw[k] = v
    if tok["bos"] is not None:
        kw["bos_token_id"] = tok["bos"]
    if masks is not None:
        kw["label_mask_paths"] = [write(tmp, "part-0-00000.mask.npy", masks, np.bool_)]
    ds = cls(*paths, **kw)
    ds.work_dir = tmp / "work"
    if hasattr(ds, "prepare"):
        ds.prepare()
    # NumpyDataLoaderBase._get_dataset_item (v2.5.0) / DataLoaderBase._get_dataset_item (v1.3.x)
    owner = getattr(m.dl, "NumpyDataLoaderBase", None) or m.dl.DataLoaderBase
    items = [owner._get_dataset_item(SimpleNamespace(dataset=ds), i) for i in rows]
    collator = m.collator.DataCollator(pad_token_id=tok["pad"])
    batch = collator(items)
    shutil.rmtree(tmp, ignore_errors=True)
    labels = m.utils.get_labels(dict(batch))
    out = dict(batch)
    notes_all = [f"Labels the train module derives (get_labels, data/utils.py, at this commit; not "
                 f"saved, there is no labels key): {labels.tolist()}."]
    if labels.shape[-1] != out["input_ids"].shape[-1]:
        notes_all[0] += (" (At this commit get_labels returns labels[..., 1:], S-1 per row: "
                         "entry i is the target of token i.)")
    if "max_doc_lens" in out:
        import torch

        assert isinstance(out["max_doc_lens"], list)
        out["max_doc_lens"] = torch.tensor(out["max_doc_lens"], dtype=torch.int64)
        notes_all.append("max_doc_lens is a Python list of ints in the collator's output "
                         "(collator.py:141,174); saved as an int64 tensor [B].")
    if notes:
        notes_all.append(notes)
    kw_shown = {k: (v.__name__ if k == "dtype" else shown_kw.get(k, v)) for k, v in kw.items()}
    fn = (f"DataCollator(pad_token_id={tok['pad']}).__call__([loader._get_dataset_item(i) for i in "
          f"{list(rows)}]) over {dataset}(token file, {', '.join(f'{k}={v}' for k, v in kw_shown.items() if k != 'label_mask_paths')}"
          f"{', label_mask_paths=[mask file]' if masks is not None else ''})")
    meta = {"profile": STACK, "causal": "true", "objective": "pretrain",
            "pad_token_id": tok["pad"], "eos_token_id": tok["eos"]}
    if tok["bos"] is not None:
        meta["bos_token_id"] = tok["bos"]
    save_case(STACK, case, out, repo=REPO, commit=commit, file=f"{DATASET}, {COLLATOR}, {LOADER}",
              function=fn,
              input={"tokenizer": tok["name"], "token_file": tokens, "label_mask_file": masks,
                     "documents": docs, "sequence_length": sequence_length, "rows": list(rows)},
              expected=expected, why=why, bug=bug, metadata=meta, notes=" ".join(notes_all),
              stubs=list(_STUBS))
    return out


def generate() -> None:
    E = DOLMA2["eos"]
    # 1. NumpyFSLDataset, generate_doc_lengths: the token stream is cut into windows of 8.
    stream = [11, 12, 13, E, 21, 22, E, 31,
              32, 33, 34, 35, E, 41, 42, E,
              51, 52, 53, 54, 55, 56, 57, 58]
    run("fsl_doc_lens_v2.5.0", RELEASE, dataset="NumpyFSLDataset", tok=DOLMA2, stream=stream,
        sequence_length=8, rows=[0, 1, 2], kwargs={"generate_doc_lengths": True},
        why="Concatenate-and-chunk pretraining with intra-document masking (dolma2 ids, no BOS): "
            "rows are 8-token windows of the stream. Row 0 [11 12 13 E 21 22 E 31]: doc_lens "
            "[4,3,1] (the last document is cut by the window, no EOS); row 1 starts with the tail of "
            "that document: [5,3]; row 2 has no EOS: one document [8]. The collator pads doc_lens "
            "with 0 to [[4,3,1],[5,3,0],[8,0,0]]; every row sums to 8; max_doc_lens [4,5,8]. No "
            "label_mask: get_labels shifts input_ids within the row, so each EOS predicts the next "
            "document's first token (pretraining by design) and the last position is -100. Valid.")

    # 2. BOS == EOS (dolma2_sigdig): boundaries only at EOS followed by BOS (#291).
    X = DOLMA2_SIGDIG["eos"]
    stream = [X, 11, 12, X, X, 21, 22, 23,
              X, X, 31, X, X, 41, 42, X,
              X, 51, 52, 53, 54, X, X, 61]
    run("fsl_bos_eq_eos_v2.5.0", RELEASE, dataset="NumpyFSLDataset", tok=DOLMA2_SIGDIG,
        stream=stream, sequence_length=8, rows=[0, 1, 2], kwargs={"generate_doc_lengths": True},
        why="Documents written as [BOS ... EOS] with BOS = EOS = 100257 (dolma2_sigdig), "
            "generate_doc_lengths: get_document_lengths with bos_token_id splits only where an EOS "
            "is followed by a BOS (#291, utils_test 'BOS ... same as EOS'), so a lone 100257 is not "
            "a boundary. Row 0 [X 11 12 X | X 21 22 23]: [4,4] (second document cut); row 1 "
            "[X | X 31 X | X 41 42 X]: [1,3,4] (its first token is the EOS of row 0's last "
            "document); row 2 [X 51 52 53 54 X | X 61]: [6,2]. doc_lens [[4,4,0],[1,3,4],[6,2,0]], "
            "max_doc_lens [4,4,6]. Valid (without bos_token_id the same rows would split at every "
            "100257, isolating each BOS).")

    # 3. NumpyPackedFSLDataset (OBFD), pad != eos: padding is one final document.
    docs = [[11, 12, 13, 14, 15, 16, E], [21, 22, 23, 24, E], [31, 32, E], [41, E], [51, E]]
    packed_why = ("Best-fit-decreasing packing of whole documents (lengths 7,5,3,2,2) into rows "
                  "of 8: [7-doc + 1 pad], [5-doc, 3-doc], [2-doc, 2-doc + 4 pads]; label_mask False "
                  "on the pads; doc_lens computed after padding (numpy_dataset.py:1221-1239). ")
    run("packed_pad_v2.5.0", RELEASE, dataset="NumpyPackedFSLDataset", tok=DOLMA2, docs=docs,
        sequence_length=8, rows=[0, 1, 2], kwargs={"generate_doc_lengths": True},
        why=packed_why + "With pad 100277 != EOS the tail after the last EOS is one final "
            "document of pads: doc_lens [[7,1,0],[5,3,0],[2,2,4]], max_doc_lens [7,5,4]. Labels "
            "(get_labels) are -100 on every pad target and after the row end; the EOS of the last "
            "real document predicts a pad, masked. Valid.")
    run("packed_pad_fa6c5014c", HEAD, dataset="NumpyPackedFSLDataset", tok=DOLMA2, docs=docs,
        sequence_length=8, rows=[0, 1, 2], kwargs={"generate_doc_lengths": True},
        why="The same packing at main fa6c5014c (data/collator.py and data/utils.py unchanged since "
            "v2.5.0, numpy_dataset.py only an error message): same batch. Valid.",
        notes="At this commit RotaryEmbedding restarts positions in every doc_lens document (#663), "
              "the pad document included; at v2.5.0 positions are 0..S-1 per row.")

    # 4. pad == eos, no bos: every pad token is a one-token document.
    run("packed_pad_is_eos_v2.5.0", RELEASE, dataset="NumpyPackedFSLDataset", tok=NO_PAD,
        docs=docs, sequence_length=8, rows=[0, 1, 2], kwargs={"generate_doc_lengths": True},
        why=packed_why + "With pad = EOS (from_hf of a tokenizer without a pad id) every pad is an "
            "EOS, so get_document_lengths ends a document at each: doc_lens "
            "[[7,1,0,0,0,0],[5,3,0,0,0,0],[2,2,1,1,1,1]]. The padding is several one-token "
            "documents, each attending only to itself, all with label_mask False (labels -100). "
            "This is OLMo-core's contract (get_document_lengths splits at every EOS; nothing in "
            "OLMo-core treats it as a bug: the review of PR #843 asks to keep 'EOS padding as "
            "separate document segments' when pad_token_id == eos_token_id). Valid.",
        notes="Same shape as axolotl's #2739 bug (one segment per pad token), but here by design, "
              "with no upstream report; the pads are never predicted.")

    # 5. bos set, pad = eos != bos: the padding joins the last document.
    B, L = LLAMA3["bos"], LLAMA3["eos"]
    ldocs = [[B, 11, 12, 13, 14, 15, L], [B, 21, 22, 23, L], [B, 31, L], [B, L], [B, L]]
    run("packed_bos_pad_v2.5.0", RELEASE, dataset="NumpyPackedFSLDataset", tok=LLAMA3, docs=ldocs,
        sequence_length=8, rows=[0, 1, 2], kwargs={"generate_doc_lengths": True},
        why=packed_why + "Llama-3 ids (bos 128000, eos 128001, pad = eos): with bos_token_id a "
            "boundary is only an EOS followed by a BOS, and a pad (128001) is not a BOS, so the "
            "padding is the tail of the row's last document: doc_lens [[8,0],[5,3],[2,6]] "
            "([B 11..15 E P] is one 8-token document; [B E | B E P P P P] is [2,6]). The pads are "
            "label_mask False, and causal attention never lets a real token see a later pad, so "
            "the real tokens' outputs and every valid label are those of the unpadded documents. "
            "OLMo-core's contract (get_document_lengths: 'When provided, every document must "
            "start with a BOS token'). Valid.",
        notes="A padded document: the last segment of a padded row holds real tokens then pad "
              "tokens (label_mask False); max_doc_lens counts the pads.")

    # 6. SFT-style label mask file with the packed dataset.
    sdocs = [[11, 12, 13, 14, 15, 16, E], [21, 22, 23, 24, E], [31, 32, E], [41, E], [51, E]]
    smask = [[0, 0, 0, 1, 1, 1, 1], [0, 0, 1, 1, 1], [0, 1, 1], [0, 1], [0, 1]]
    run("packed_label_mask_v2.5.0", RELEASE, dataset="NumpyPackedFSLDataset", tok=DOLMA2, docs=sdocs,
        masks=[bool(b) for d in smask for b in d], sequence_length=8, rows=[0, 1, 2],
        kwargs={"generate_doc_lengths": True},
        why=packed_why + "SFT-style: a bool label-mask file parallel to the tokens "
            "(label_mask_paths, #241) marks the prompt tokens False, so every document begins with "
            "a masked target and get_labels gives no label across a boundary (the EOS of one "
            "document predicts the next one's first, masked, token). doc_lens "
            "[[7,1,0],[5,3,0],[2,2,4]], pads label_mask False. Valid.")

    # 7. instance filter: a repetitive row gets instance_mask False.
    stream = [11, 12, 13, E, 21, 22, 23, 24,
              7, 7, 7, 7, 7, 7, E, 31,
              41, 42, E, 51, 52, 53, 54, E]
    run("fsl_instance_mask_v2.5.0", RELEASE, dataset="NumpyFSLDataset", tok=DOLMA2, stream=stream,
        sequence_length=8, rows=[0, 1, 2],
        kwargs={"generate_doc_lengths": True,
                "instance_filter_config": "InstanceFilterConfig(repetition_max_period=2, "
                                          "repetition_min_period=1, repetition_max_count=4)"},
        why="generate_doc_lengths with an InstanceFilterConfig (max period 2, max count 4): row 1 "
            "[7 7 7 7 7 7 E 31] repeats a period-1 pattern 6 times, so its instance_mask is False "
            "(numpy_dataset.py _validate_instance) and get_labels sets all its labels to -100; "
            "instance_mask [True, False, True], doc_lens [[4,4],[7,1],[3,5]] (no row has 3 "
            "documents, so no zero padding). Valid.")

    # 8/9. #55: NumpyPaddedFSLDataset label_mask padded with pad_token_id (v1.3.1), fixed in v1.3.2.
    N = NEOX["eos"]
    pdocs = [[11, 12, 13, 14, 15, N], [21, 22, 23, N]]
    run("padded_label_mask_v1.3.1", PRE_55, dataset="NumpyPaddedFSLDataset", tok=NEOX, docs=pdocs,
        sequence_length=8, rows=[0, 1], expected=["pad-labels"], bug="#55",
        kwargs={"metadata": {"label": "c4-validation"}},
        why="The in-loop evaluation dataset of v1.3.1 (padded_fsl: one document per row, padded to "
            "sequence_length; gpt_neox_olmo_dolma_v1_5 ids, pad 1): __getitem__ builds label_mask "
            "as F.pad(torch.ones_like(input_ids), pad_shape, value=pad_token_id), an int64 mask "
            "padded with 1, which DataCollator casts to bool: label_mask is True on the pad tokens "
            "(rows [11..15 E P P] and [21 22 23 E P P P P]), so get_labels keeps the pads as "
            "targets and the LM evaluator's loss includes them. Fixed by d72a6cae8 (#55, v1.3.2): "
            "ones_like(..., dtype=bool) padded with False.",
        notes="No doc_lens (the padded dataset never generates them): each row is one document "
              "followed by pad tokens (pad_token_id 1 != eos 50279). metadata={'label': ...} as the "
              "LM evaluator requires it (its list of dicts is not saved).")
    run("padded_label_mask_v1.3.2", FIX_55, dataset="NumpyPaddedFSLDataset", tok=NEOX, docs=pdocs,
        sequence_length=8, rows=[0, 1], kwargs={"metadata": {"label": "c4-validation"}},
        why="The same documents at v1.3.2 (#55 fixed): label_mask False on the pads, labels -100 "
            "there. Valid (negative control of #55).",
        notes="No doc_lens (the padded dataset never generates them): each row is one document "
              "followed by pad tokens (pad_token_id 1 != eos 50279). metadata={'label': ...} as the "
              "LM evaluator requires it (its list of dicts is not saved).")
