"""Megatron-Bridge's offline-packed SFT batch (`GPTSFTPackedDataset.collate_fn`), as the training step
sees it (one row of the collated global batch: packed SFT requires micro-batch size 1, and since
#5400 "the training loop splits that global batch into MBS1 microbatches").

Two formats, run from the Megatron-Bridge mirror:
- legacy (`src/megatron/bridge/data/datasets/sft.py`, e.g. 7b1dc3791 #3839): `cu_seqlens` [B, K]
  right-padded with -1, `cu_seqlens_argmin` (index of the first -1), `max_seqlen` [B, 1],
  `cu_seqlens_unpadded` (+ argmin) only when `pad_seq_to_mult > 1`, and
  `attention_mask = LongTensor([1] * B)` (a [B] tensor, removed by #4519 fb9ec5f85);
- HEAD 067f987df (`src/megatron/bridge/data/packing/gpt_sft.py`): MCore/TE names `cu_seqlens_q`
  (logical) / `cu_seqlens_q_padded` (physical, only when `pad_seq_to_mult > 1`), `max_seqlen_q`,
  ragged rows extended with zero-length repeats (#5400), a per-token `padding_mask` (#5470),
  `attention_mask` None.
Both: `tokens` = each stored sequence minus its last token, `labels` = the sequence shifted by one
(already rolled), `loss_mask` 1 where a label is trained; pad positions hold the EOS id in tokens
and labels with loss_mask 0; a pack that does not fill `max_length` gets its tail as one more
segment ("the last seq needs to be the max seq len because rope and attn kernels expect no
padding", collate_fn).

Stand-ins: every `megatron.*` import other than the dataset files under test (permissive), `datasets`
and `tqdm`; the tokenizer is an object with `eos_id`; the dataset object is made with
`object.__new__` and the attributes `collate_fn` reads (no .npy file is loaded). The packed rows
(`input_ids`, `seq_start_id`, `loss_mask`) are what `fill_packing_strategy` stores: sequences
concatenated, loss mask rolled by one, and with `pad_seq_to_mult > 1` each stored sequence
pre-padded with EOS so its runtime length is a multiple (offline.py `_pre_pad_data_point`).
"""

from __future__ import annotations

import sys

import torch

import common

REPO = "NVIDIA-NeMo/Megatron-Bridge"
HEAD = "067f987df"
LEGACY = "7b1dc3791"           # #3839, legacy -1/argmin format
PRE_4519 = "fb9ec5f85^"        # legacy, last commit with attention_mask = LongTensor([1] * B)
LEGACY_FILE = "src/megatron/bridge/data/datasets/sft.py"
HEAD_FILE = "src/megatron/bridge/data/packing/gpt_sft.py"
HEAD_PARENT = "src/megatron/bridge/data/datasets/gpt_sft.py"
STACK = "megatron_bridge"
EOS = 2

STUBS = [
    "megatron.* (permissive stand-ins) except the dataset files under test",
    "datasets, tqdm (stand-ins)",
    "tokenizer: object with eos_id=2",
    "GPTSFTPackedDataset built with object.__new__ and the attributes collate_fn reads "
    "(pad_to_max_length, max_seq_length, _pad_seq_to_mult, pad_cu_seqlens=False, return_cu_seqlen=True, "
    "answer_only_loss=True, pack_metadata=None)",
    "packed rows built by hand in fill_packing_strategy's stored format (see module docstring)",
]


class _Tok:
    eos_id = EOS
    eod = EOS


def _common_stubs():
    common.permissive_stub("megatron")
    sys.modules["datasets"] = common.stub("datasets", load_dataset=None, Dataset=object,
                                          builder=common.stub("datasets.builder"))
    sys.modules["tqdm"] = common.stub("tqdm", tqdm=lambda x, **k: x)


def _legacy(commit):
    _common_stubs()
    return common.upstream(REPO, commit, LEGACY_FILE).GPTSFTPackedDataset


def _head():
    _common_stubs()
    parent = common.upstream(REPO, HEAD, HEAD_PARENT)
    sys.modules["megatron.bridge.data.datasets.gpt_sft"] = parent
    return common.upstream(REPO, HEAD, HEAD_FILE).GPTSFTPackedDataset


def _dataset(cls, max_seq_length, mult):
    ds = object.__new__(cls)
    ds.tokenizer = _Tok()
    ds.pad_to_max_length = True
    ds.max_seq_length = max_seq_length
    ds.pad_seq_length_to_mult = max(1, mult)
    ds._pad_seq_to_mult = mult
    ds.pad_cu_seqlens = False
    ds.return_cu_seqlen = True
    ds.answer_only_loss = True
    ds.pack_metadata = None
    ds.ceil_to_power_2 = False
    ds.virtual_tokens = 0
    return ds


def _row(seqs, mult=1):
    """One stored pack: each seq is (tokens ending in EOS, index of the first answer token)."""
    ids, mask, starts = [], [], []
    for toks, answer_from in seqs:
        toks = list(toks)
        m = [0] * answer_from + [1] * (len(toks) - answer_from)
        if mult > 1:
            runtime = len(toks) - 1
            target = -(-runtime // mult) * mult
            toks += [EOS] * (target - runtime)
            m += [0] * (target - runtime)
        m = m[1:] + [0]  # fill_packing_strategy: roll the loss mask by one to align with labels
        starts.append(len(ids))
        ids += toks
        mask += m
    return {"input_ids": ids, "seq_boundaries": starts + [len(ids)], "loss_mask": mask}


def _step_view(batch, row):
    """The micro-batch the training step gets: row `row` of every [B, ...] tensor."""
    out = {}
    for k, v in batch.items():
        if isinstance(v, torch.Tensor) and v.dim() >= 1 and v.shape[0] > row:
            out[k] = v[row:row + 1]
        else:
            out[k] = v
    return out


A = ([1, 5, 6, 7, EOS], 2)                     # runtime tokens [1,5,6,7], labels [5,6,7,2]
B = ([1, 8, 9, EOS], 1)                        # runtime tokens [1,8,9],   labels [8,9,2]
C = ([1, 10, 11, 12, 13, 14, 15, EOS], 1)      # 7 runtime tokens


def _save(case, batch, commit, file, inp, expected, why, bug=None, meta=None, notes=""):
    common.save_case(STACK, case, batch, repo=REPO, commit=commit, file=file,
                     function="GPTSFTPackedDataset.collate_fn (one row = the step's micro-batch)",
                     input=inp, expected=expected, why=why, bug=bug,
                     metadata={"profile": "megatron_bridge", "causal": "true", "pad_token_id": str(EOS),
                               **(meta or {})},
                     notes=notes, stubs=STUBS)


def generate():
    # M1. Legacy format: -1 sentinel + argmin, two ragged rows, the step's row 1.
    legacy = _legacy(LEGACY)
    rows = [_row([A, B]), _row([C])]
    full = _dataset(legacy, 8, 1).collate_fn(rows)
    _save("legacy_sentinel_row", _step_view(full, 1), LEGACY, LEGACY_FILE,
          {"rows": rows, "max_seq_length": 8, "pad_seq_to_mult": 1, "row": 1, "collated": full},
          "pass",
          "Legacy #3839 format: cu_seqlens [[0,7,8,-1,-1]] (-1 sentinel right-padding to the widest row, "
          "cu_seqlens_argmin 3 = first -1; get_packed_seq_params trims cu[:argmin]), max_seqlen 7 = widest "
          "slot. The 1-token tail [7,8) is the pack padding as its own segment (EOS token, label EOS, "
          "loss_mask 0), required so cu[-1] = max_length. labels are already shifted and loss_mask "
          "selects the trained ones. attention_mask here is LongTensor([1]*B) sliced to the row: unused "
          "when cp=1 (packed_seq_params carry the layout).",
          notes="token_count (a python list) is not saved.")

    # M2. Legacy CP prepadding (pad_seq_to_mult=4) with the pre-#4519 [B]-shaped attention_mask.
    pre = _legacy(PRE_4519)
    rows = [_row([A, B], mult=4)]
    b = _dataset(pre, 12, 4).collate_fn(rows)
    _save("legacy_cp_prepad_attention_mask_4519", b, PRE_4519, LEGACY_FILE,
          {"rows": rows, "max_seq_length": 12, "pad_seq_to_mult": 4, "collated": b},
          ["token-counts"],
          "pad_seq_to_mult=4 (CP 2): cu_seqlens physical [[0,4,8,12,-1]], cu_seqlens_unpadded logical "
          "[[0,4,7,7,-1]] with argmins. The batch also carries attention_mask = LongTensor([1] * B), a "
          "[B]=[1] tensor that is not a per-token mask of the 12 tokens; #4519 (fb9ec5f85) replaced it "
          "by None because the CP partition (_partition_packed_batch_for_cp) slices attention_mask along "
          "the token dimension: a per-token tensor with one entry where the batch has 12 tokens "
          "(token-counts).",
          bug="Megatron-Bridge #4519 (fb9ec5f85, 'handle packed SFT CP masks'): packed collate_fn returned "
              "attention_mask = LongTensor([1] * batch) instead of None",
          meta={"cp_size": "2"})

    # M3. HEAD: ragged rows extended with zero-length repeats (#5400), the step's row 1.
    head = _head()
    rows = [_row([A, B]), _row([C])]
    full = _dataset(head, 8, 1).collate_fn(rows)
    _save("head_zero_length_repeat_row", _step_view(full, 1), HEAD, HEAD_FILE,
          {"rows": rows, "max_seq_length": 8, "pad_seq_to_mult": 1, "row": 1, "collated": full},
          "pass",
          "HEAD: cu_seqlens_q [[0,7,8,8]]: row 1 has one fewer boundary than row 0, so #5400 extends it "
          "with a zero-length repeat ('retaining the direct MCore/TE cumulative-offset contract'; TE "
          "accepts zero-length sequences). Tail [7,8) is the pack padding as a segment, padding_mask True "
          "there (#5470), loss_mask 0. max_seqlen_q 7 = widest slot. Valid.",
          notes="attention_mask is None (not saved); token_count not saved.")

    # M4. HEAD with CP prepadding: logical vs physical offsets.
    rows = [_row([A, B], mult=4)]
    b = _dataset(head, 12, 4).collate_fn(rows)
    _save("head_cp_prepad", b, HEAD, HEAD_FILE,
          {"rows": rows, "max_seq_length": 12, "pad_seq_to_mult": 4, "collated": b}, "pass",
          "HEAD pad_seq_to_mult=4 (CP 2): cu_seqlens_q logical [[0,4,7,7]] (real lengths; the pack tail "
          "is a zero-length logical entry), cu_seqlens_q_padded physical [[0,4,8,12]] (every slot a "
          "multiple of 2*cp), max_seqlen_q 4 = widest slot, padding_mask marks the alignment pad (7) and "
          "the tail (8..11). TE convention (cu_seqlens_q 'without offset', _padded 'with offset'). Valid.",
          meta={"cp_size": "2"})
