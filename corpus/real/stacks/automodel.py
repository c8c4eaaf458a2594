"""NeMo Automodel's packed-SFT THD path, run from the Automodel mirror:

  `_package_tokenized_example` (datasets/llm/formatting_utils.py: labels = the sample's tokens
  shifted by one, `labels = labels[1:]`, so each sample's last label is its own EOS target)
  -> `pack_dataset` (datasets/llm/packed_sequence.py: seq_lens real, seq_lens_padded with the
  2·cp rounding and the pack padding on the last sequence, padding_idx / -100)
  -> `packed_sequence_thd_collater` (datasets/utils.py: [B, S] rows, -1000 sentinels)
  -> `process_input_for_thd` / `split_batch_into_thd_chunks` (distributed/thd_utils.py) at the
  commits under test, and for CP `make_cp_batch_for_te` -> `_shard_thd_chunk_for_te`.

The packer and collater always run at HEAD 36044ad3d (the pack layout they produce is the
input; `_pad_pack` has put the pack padding on the last sequence since 88bff26df). Stand-ins:
`datasets` (`Dataset.from_dict` returns the rows, tensors as lists as Arrow stores them), a
tokenizer object with no chat template (only `_has_chat_template` reads it), the CP device mesh
(size 2) with `torch.distributed.get_rank` patched, and TE's compiled
`tex.thd_get_partitioned_indices`, replaced by a Python port of the CUDA
`thd_partition_src_index` (nvidia-stacks.md 4.2, checked there against the Python zigzag on 200
random cases), host checks and the device assert included.

Contract (TE DotProductAttention, d0067d0da): `cu_seqlens` real lengths ("without offset"),
`cu_seqlens_padded` physical starts; `max_seqlen_q` is the maximum sequence length, and
Automodel's own fix (#2316, thd_utils.py comment at 987ba24e1) states it must be
>= max(cu_seqlens[i+1]-cu_seqlens[i]) of what the kernel is given. `padding_mask` is 1 = pad and
must follow the layout (#3223: pad id may equal a content id). Labels are shifted (TE dialect).
"""

from __future__ import annotations

import contextlib
import sys
import types

import torch

import common

REPO = "NVIDIA-NeMo/Automodel"
HEAD = "36044ad3d"
INITIAL = "88bff26df"         # #633: thd_utils added
PRE_2316_MAIN = "987ba24e1^"  # main just before #2316 (thd_utils identical to 88bff26df)
PRE_2316_BRANCH = "285ea0ccd^"  # refs/pull/2316/head: max_seqlen from real lengths before absorption
FIX_2316 = "987ba24e1"
PRE_3223 = "57a43e297^"
FIX_3223 = "57a43e297"
THD = "nemo_automodel/components/distributed/thd_utils.py"
FMT = "nemo_automodel/components/datasets/llm/formatting_utils.py"
PACK = "nemo_automodel/components/datasets/llm/packed_sequence.py"
COLL = "nemo_automodel/components/datasets/utils.py"
CP_HEAD = "nemo_automodel/components/distributed/context_parallel/utils.py"
CP_OLD = "nemo_automodel/components/distributed/cp_utils.py"
STACK = "automodel"

STUBS = [
    "datasets (stand-in: Dataset.from_dict returns the rows with tensors as lists; DatasetDict a class)",
    "tokenizer for _package_tokenized_example: object without chat_template (no chat template)",
    "packer + collater run at HEAD 36044ad3d to build the input batch",
]
CP_STUBS = STUBS + [
    "transformer_engine_torch.thd_get_partitioned_indices: Python port of the CUDA thd_partition_src_index "
    "(nvidia-stacks.md 4.2), with the host checks and the cu % (2*cp) device assert",
    "cp_mesh: stand-in with size()=2, get_group()=None; torch.distributed.get_rank patched to the rank",
    "nemo_automodel.* other than the files under test (context_parallel.sharder): permissive stand-ins",
]


# --- stand-ins --------------------------------------------------------------------------------

class _Dataset(list):
    @classmethod
    def from_dict(cls, d):
        keys = list(d)
        rows = cls()
        for i in range(len(d[keys[0]])):
            rows.append({k: (d[k][i].tolist() if isinstance(d[k][i], torch.Tensor) else d[k][i]) for k in keys})
        return rows


def _datasets_stub():
    return common.stub("datasets", Dataset=_Dataset, DatasetDict=type("DatasetDict", (dict,), {}),
                       load_dataset=None)


def thd_get_partitioned_indices(cu_seqlens, total_tokens, world_size, rank):
    """Python port of TE's CUDA `thd_get_partitioned_indices` / `thd_partition_src_index`."""
    assert cu_seqlens.dim() == 1 and cu_seqlens.numel() >= 2
    assert 0 <= rank < world_size
    assert total_tokens > 0 and total_tokens % (2 * world_size) == 0, "host check: T % (2*cp) == 0"
    cu = [int(x) for x in cu_seqlens.tolist()]
    assert all(c % (2 * world_size) == 0 for c in cu), "device assert: cu[i] % (2*cp) == 0"
    cu_s = [c // world_size for c in cu]
    out = []
    for t in range(total_tokens // world_size):
        seq = max(i for i in range(len(cu_s) - 1) if cu_s[i] <= t) if t < cu_s[-1] else len(cu_s) - 2
        half = (cu_s[seq + 1] - cu_s[seq]) // 2
        idx = t - cu_s[seq]
        off = rank if idx < half else 2 * world_size - 2 - rank
        out.append(idx + cu[seq] + half * off)
    return torch.tensor(out, dtype=torch.int32).long()


class _Mesh:
    def __init__(self, size):
        self._size = size

    def size(self, dim=None):
        return self._size

    def get_group(self):
        return None


@contextlib.contextmanager
def _rank(r):
    old = torch.distributed.get_rank
    torch.distributed.get_rank = lambda group=None: r
    try:
        yield
    finally:
        torch.distributed.get_rank = old


class _Tok:
    """No chat template: `_has_chat_template` is False, so the EOS asserts of the plain path run."""


# --- pipeline ---------------------------------------------------------------------------------

def _modules():
    sys.modules["datasets"] = _datasets_stub()
    fmt = common.upstream(REPO, HEAD, FMT)
    pack = common.upstream(REPO, HEAD, PACK, stubs={"datasets": _datasets_stub()})
    coll = common.upstream(REPO, HEAD, COLL)
    return fmt, pack, coll


def _sample(fmt, full, answer_from, eos, pad):
    mask = [0] * answer_from + [1] * (len(full) - answer_from)
    out = fmt._package_tokenized_example(tokenizer=_Tok(), input_ids=list(full), assistant_masks=mask,
                                         eos_token_id=eos, pad_token_id=pad, seq_length=None)
    return out


def _collated(mods, samples, size, pad, cp_size=1):
    fmt, pack, coll = mods
    rows = pack.pack_dataset([dict(s) for s in samples], split="train", packed_sequence_size=size,
                             padding_idx=pad, cp_size=cp_size)
    for r in rows:  # the ___PAD_TOKEN_IDS___ side channel is dropped by pack_dataset already
        r.pop("___PAD_TOKEN_IDS___", None)
    return coll.packed_sequence_thd_collater(rows)


def _clone(batch):
    return {k: (v.clone() if isinstance(v, torch.Tensor) else v) for k, v in batch.items()}


def _thd(commit):
    return common.upstream(REPO, commit, THD)


def _save(case, batch, commit, function, inp, expected, why, bug=None, meta=None, notes="", stubs=None,
          file=THD):
    common.save_case(STACK, case, batch, repo=REPO, commit=commit, file=file, function=function,
                     input=inp, expected=expected, why=why, bug=bug,
                     metadata={"profile": "automodel", "causal": "true", **(meta or {})},
                     notes=notes, stubs=stubs or STUBS)


def _cp_group(group, commit, cp_mod, batch, inp, expected_group, expected_rank, why, bug=None, meta=None,
              notes=""):
    sys.modules["transformer_engine_torch"] = common.stub(
        "transformer_engine_torch", thd_get_partitioned_indices=thd_get_partitioned_indices)
    for r in range(2):
        with _rank(r):
            out = cp_mod.make_cp_batch_for_te(_Mesh(2), _clone(batch), qkv_format="thd")
        m = dict(meta or {})
        if "cp_rank" not in out:
            m.update({"cp_rank": str(r), "cp_size": "2"})
        _save(f"{group}/rank{r}", out, commit, "make_cp_batch_for_te -> _shard_thd_chunk_for_te",
              {**inp, "cp_size": 2, "cp_rank": r}, expected_rank[r], why, bug=bug, meta=m,
              notes=notes, stubs=CP_STUBS,
              file=CP_HEAD if commit == HEAD else CP_OLD)
    common.expect_group(STACK, group, expected=expected_group, why=why, bug=bug, repo=REPO, commit=commit,
                        file=CP_HEAD if commit == HEAD else CP_OLD, function="make_cp_batch_for_te")


def generate():
    mods = _modules()
    fmt = mods[0]
    EOS, PAD = 2, 0
    s1 = _sample(fmt, [1, 5, 6, 7, 2], 2, EOS, PAD)      # input [1,5,6,7]   labels [-100,6,7,2]
    s2 = _sample(fmt, [1, 8, 9, 2], 1, EOS, PAD)         # input [1,8,9]     labels [8,9,2]
    s3 = _sample(fmt, [1, 10, 11, 12, 13, 2], 1, EOS, PAD)
    s4 = _sample(fmt, [1, 14, 15, 2], 1, EOS, PAD)
    s0 = _sample(fmt, [1, 0, 5, 2], 1, EOS, PAD)         # a real token with id 0 (GLM: "!")
    samples_in = lambda ss: [{k: v for k, v in s.items() if k != "___PAD_TOKEN_IDS___"} for s in ss]

    head = _thd(HEAD)

    # --- packed-dataset path (valid; per-sample shifted labels) ----------------------------------
    b = _collated(mods, [s1, s2, s3, s4], 8, PAD)
    inp = {"samples": samples_in([s1, s2, s3, s4]), "packed_sequence_size": 8, "collated": b}
    _save("packed_sft_two_rows", head.process_input_for_thd(_clone(b)), HEAD,
          "pack_dataset -> packed_sequence_thd_collater -> process_input_for_thd", inp, "pass",
          "Automodel packed SFT: each sample is shifted on its own (formatting_utils.py "
          "_package_tokenized_example: input_ids = tokens[:-1], labels = tokens[1:]), so a segment's last "
          "label is that sample's own EOS target, never the next document's token. Two [1,8] rows: "
          "cu_seqlens real [0,4,7,12,15] (logical, TE convention), cu_seqlens_padded [0,4,8,13,16], "
          "max_seqlen 5 >= every slot, padding_mask from the layout. Valid.",
          meta={"pad_token_id": "0"})

    _save("packed_sft_chunks", head.split_batch_into_thd_chunks(_clone(b), 2), HEAD,
          "split_batch_into_thd_chunks(num_chunks=2)", {**inp, "num_chunks": 2}, "pass",
          "Same packs split into 2 chunks (one row each): [2, 8] token tensors; chunk 0's trailing pad is "
          "absorbed, so per-chunk cu_seqlens [[0,4,8],[0,5,8]] and no cu_seqlens_padded (each chunk its "
          "own stream), max_seqlen [4,5] >= each chunk's slots. Valid (each chunk is one attention call).",
          meta={"pad_token_id": "0"},
          notes="Chunked output: offsets address each chunk's own row, not the flattened [2*8] stream.")

    b_eos = _collated(mods, [s2, s4], 6, PAD)
    _save("packed_sft_exact_fill", head.process_input_for_thd(_clone(b_eos)), HEAD,
          "pack_dataset -> packed_sequence_thd_collater -> process_input_for_thd",
          {"samples": samples_in([s2, s4]), "packed_sequence_size": 6, "collated": b_eos}, "pass",
          "Two 3-token samples fill a 6-token pack exactly (no padding anywhere): labels [8,9,2 | 14,15,2], "
          "each segment's last label is its own sample's EOS target (2), never the next segment's first "
          "token (BOS 1). cu [0,3,6], max_seqlen 3. Valid.",
          meta={"pad_token_id": "0"})

    # --- #633 initial code: padding_mask = (input_ids == 0) ----------------------------------------
    b0 = _collated(mods, [s0, s2], 8, PAD)
    inp0 = {"samples": samples_in([s0, s2]), "packed_sequence_size": 8, "collated": b0}
    _save("mask_from_ids_content_zero_88bff", _thd(INITIAL).process_input_for_thd(_clone(b0)), INITIAL,
          "process_input_for_thd", inp0, ["mask"],
          "Pack [1,0,5 | 1,8,9 | pad,pad]: token 0 at index 1 is real content (seq_lens [3,3]), but "
          "padding_mask = (input_ids == padding_token_id=0) (thd_utils.py@88bff26df L131) marks it as "
          "padding, disagreeing with the layout (the test test_thd_padding_mask.py 'content id 0' "
          "added with the fix expects no padding there).",
          bug="Automodel #3223 (fixed 57a43e297): padding_mask derived from token ids; a real token "
              "whose id equals the pad id is masked out of MoE routing",
          meta={"pad_token_id": "0"},
          notes="At 88bff26df cu_seqlens is the cumsum of seq_lens_padded ([0,3,8]) and no max_seqlen is "
                "emitted; TE then deduces max_seqlen itself.")

    # --- #2316: max_seqlen vs the absorbed trailing pad -------------------------------------------
    b_full = _collated(mods, [s2, s4], 8, PAD)          # 3 + 3 real, 2 pad: a "full" pack
    b_short = _collated(mods, [s2, s4], 16, PAD)        # 3 + 3 real, 10 pad: a "short" pack
    inp_full = {"samples": samples_in([s2, s4]), "packed_sequence_size": 8, "collated": b_full}
    inp_short = {"samples": samples_in([s2, s4]), "packed_sequence_size": 16, "collated": b_short}
    branch = _thd(PRE_2316_BRANCH)
    _save("max_seqlen_before_absorb_2316_branch", branch.process_input_for_thd(_clone(b_full)),
          PRE_2316_BRANCH, "process_input_for_thd", inp_full, ["max-seqlen"],
          "Scaled-down 9x112+16 'full pack' of the #2316 tests: seq_lens [3,3], pack pad 2 <= max real "
          "length 3, so the trailing pad is absorbed (cu_seqlens [0,3,8], last slot 5) but max_seqlen "
          "was computed before absorption from the real lengths (= 3). The kernel is given a 5-token "
          "sequence with max_seqlen 3: TE contract 'max_seqlen_q >= max(cu[i+1]-cu[i])' broken "
          "(285ea0ccd message: 'explicit UB ... cuDNN-fused-attn-bwd ... crash on 576 vs 112').",
          bug="Automodel PR #2316 branch before 285ea0ccd (refs/pull/2316/head): max_seqlen from the real "
              "lengths before the trailing-pad absorption",
          meta={"pad_token_id": "0"})
    b2 = _collated(mods, [s2, s4, s1, s2], 8, PAD)
    _save("max_seqlen_before_absorb_2316_branch_chunks", branch.split_batch_into_thd_chunks(_clone(b2), 2),
          PRE_2316_BRANCH, "split_batch_into_thd_chunks(num_chunks=2)",
          {"samples": samples_in([s2, s4, s1, s2]), "packed_sequence_size": 8, "collated": b2,
           "num_chunks": 2}, ["max-seqlen"],
          "Two chunks (the #2316 'chunks, one of each' test, scaled): chunk 0 = [3,3]+2 pad absorbed to "
          "cu [0,3,8] with max_seqlen 3 < slot 5; chunk 1 = [4,3]+1 pad absorbed to [0,4,8], max 4 = "
          "slot 4. Chunk 0 breaks max_seqlen >= slot.",
          bug="Automodel PR #2316 branch before 285ea0ccd: max_seqlen before absorption (chunked path)",
          meta={"pad_token_id": "0"})
    _save("short_pack_main_before_2316", _thd(PRE_2316_MAIN).process_input_for_thd(_clone(b_short)),
          PRE_2316_MAIN, "process_input_for_thd", inp_short, "pass",
          "The 'short pack' (5x112 + 464 pad in 1024, scaled: 3+3 real + 10 pad in 16) on main just "
          "before #2316: cu_seqlens is the cumsum of seq_lens_padded ([0,3,16]) and no max_seqlen is "
          "emitted, so TE deduces it from the offsets. The pre-absorption max_seqlen bug never reached "
          "main; the batch is valid for attention (causal: the trailing pad sits after the real tokens "
          "of the last slot and padding_mask marks it).",
          meta={"pad_token_id": "0"})
    _save("short_pack_fixed_2316", _thd(FIX_2316).process_input_for_thd(_clone(b_short)), FIX_2316,
          "process_input_for_thd", inp_short, "pass",
          "#2316 fix (987ba24e1): cu_seqlens real then trailing pad absorbed ([0,3,16]), max_seqlen from "
          "the final cu = 13 (the test's 576 analogue) >= every slot. Valid.",
          meta={"pad_token_id": "0"})
    _save("full_pack_fixed_2316", _thd(FIX_2316).process_input_for_thd(_clone(b_full)), FIX_2316,
          "process_input_for_thd", inp_full, "pass",
          "#2316 fix on the full pack: cu [0,3,8], max_seqlen 5 (the test's 128 analogue). Valid.",
          meta={"pad_token_id": "0"})

    # --- #3223: pad id == eos id (GLM) ------------------------------------------------------------
    E = 2
    t1 = _sample(fmt, [1, 7, E, 8, E], 1, E, E)   # a chat turn delimiter E inside the sample
    t2 = _sample(fmt, [1, 9, E, 10, E], 1, E, E)
    be = _collated(mods, [t1, t2], 10, E)
    inp_e = {"samples": samples_in([t1, t2]), "packed_sequence_size": 10, "padding_idx": E, "collated": be}
    _save("mask_pad_eq_eos_before_3223", _thd(PRE_3223).process_input_for_thd(_clone(be), padding_token_id=E),
          PRE_3223, "process_input_for_thd(padding_token_id=eos)", inp_e, ["mask"],
          "pad id = eos id = 2 (GLM: 154820). Real tokens at indices 2 and 6 are the in-sample EOS "
          "delimiter; padding_mask = (input_ids == 2) marks them as padding together with the 2 real "
          "pad tokens (8, 9). The layout (seq_lens [4,4]) says they are real: the mask disagrees "
          "(test_thd_padding_mask.py at 57a43e297: stream [7,8,E,E,9,10,E,E] -> only the pads True).",
          bug="Automodel #3223 (57a43e297): padding_mask from token ids when pad id = eos",
          meta={"pad_token_id": str(E)})
    _save("mask_pad_eq_eos_fixed_3223", _thd(FIX_3223).process_input_for_thd(_clone(be), padding_token_id=E),
          FIX_3223, "process_input_for_thd(padding_token_id=eos)", inp_e, "pass",
          "#3223 fix: padding_mask from the pack layout (_thd_padding_mask): only indices 8, 9 are pad. "
          "cu [0,4,10] absorbed, max_seqlen 6. Valid.",
          meta={"pad_token_id": str(E)})

    # --- CP path (cp = 2): packer pads every sample to 2*cp -----------------------------------------
    bcp = _collated(mods, [s0, s2], 8, PAD, cp_size=2)
    inp_cp = {"samples": samples_in([s0, s2]), "packed_sequence_size": 8, "cp_size": 2, "collated": bcp}
    permissive = common.permissive_stub("nemo_automodel")
    sys.modules["nemo_automodel.components.distributed.thd_utils"] = common.upstream(REPO, INITIAL, THD)
    cp_old = common.upstream(REPO, INITIAL, CP_OLD)
    _cp_group("cp2_mask_from_ids_88bff", INITIAL, cp_old, bcp, inp_cp, ["mask", "pad-labels"],
              ["pass", "pass"],
              "pack_dataset(cp_size=2) pads [1,0,5] and [1,8,9] to 4 each (cu_padded [0,4,8]); "
              "_shard_thd_chunk_for_te (cp_utils.py@88bff26df) zigzag-splits and recomputes padding_mask "
              "= (input_ids == 0) on the shard: rank 1 holds the real token 0 (global index 1) and marks "
              "it padding. Rank 0 holds only BOS and CP pad tokens: its mask is right. Rank files "
              "carry no verdict of their own (thdcheck checks them as their reassembled group). "
              "The group violates mask, and pad-labels follows from it: the only padding marker "
              "at 88bff26df is that mask, so the real token 0 it calls padding carries a trained "
              "label (5) where padding must carry -100.",
              bug="Automodel #3223 class on the CP path: padding_mask from token ids after sharding",
              meta={"pad_token_id": "0"},
              notes="At 88bff26df the CP output has no cp_rank/cp_size keys: stated in metadata.")
    sys.modules["nemo_automodel.components.distributed.thd_utils"] = head
    cp_head = common.upstream(REPO, HEAD, CP_HEAD)
    _cp_group("cp2_head", HEAD, cp_head, bcp, inp_cp, "pass", ["pass", "pass"],
              "HEAD make_cp_batch_for_te: cu_seqlens = global cu_seqlens_padded [0,4,8] (sentinels "
              "kept), max_seqlen 4, padding_mask from the layout sharded with the same indices, "
              "cp_rank/cp_size in the batch. Slots multiples of 2*cp; labels shifted per sample before "
              "packing (never rolled after the split). Valid.",
              meta={"pad_token_id": "0"})
