"""TransformerEngine's THD context-parallel helpers (`pad_thd_sequences_for_cp`,
`generate_positional_ids_for_cp`, `get_batch_on_this_cp_rank`), run from the TE mirror.

The file `transformer_engine/pytorch/attention/dot_product_attention/context_parallel.py` imports
TE's compiled extension and most of TE at its top; none of it is used by these three functions,
so every `transformer_engine*` import is a permissive stand-in (`common.permissive_stub`).
`get_batch_on_this_cp_rank` asks `torch.distributed` for the CP world size and rank; it is run
with both patched, exactly as TE's own test does (`tests/pytorch/attention/test_cp_utils.py`,
`TestContextParallelUtils._mock_distributed_env`).

Contract (TE `DotProductAttention` docs, HEAD d0067d0da): `cu_seqlens_q` holds the real lengths
("without offset"), `cu_seqlens_q_padded` the physical starts ("with offset"); for CP every
padded length is a multiple of 2·cp (the CUDA `thd_get_partitioned_indices` asserts
`cu[i] % (2·cp) == 0`); rank r holds chunks r and 2·cp−1−r of every sequence.
"""

from __future__ import annotations

import contextlib

import torch

import common

REPO = "NVIDIA/TransformerEngine"
HEAD = "d0067d0da"
ADDED = "483d9594f"  # TE #2129, where these helpers were added (same code as HEAD)
FILE = "transformer_engine/pytorch/attention/dot_product_attention/context_parallel.py"
TEST = "tests/pytorch/attention/test_cp_utils.py"
STACK = "te"


def _load(commit):
    stubs = common.permissive_stub("transformer_engine", "transformer_engine_torch")
    return common.upstream(REPO, commit, FILE), stubs


@contextlib.contextmanager
def _cp_env(cp_size, cp_rank):
    """TE's test `_mock_distributed_env`: patch torch.distributed's world size and rank."""
    ws, rk = torch.distributed.get_world_size, torch.distributed.get_rank
    torch.distributed.get_world_size = lambda group=None: cp_size
    torch.distributed.get_rank = lambda group=None: cp_rank
    try:
        yield
    finally:
        torch.distributed.get_world_size, torch.distributed.get_rank = ws, rk


def _padded_case(te, stubs, commit, case, ids, labels, cu, d, *, pad_id=0, label_pad=-100,
                 why, test, extra_meta=None, notes=""):
    ids_p, labels_p, cu_p = te.pad_thd_sequences_for_cp(
        ids.unsqueeze(0), labels.unsqueeze(0), cu, d, padding_token_id=pad_id, padding_label_id=label_pad)
    pos_p = te.generate_positional_ids_for_cp(cu, d)
    batch = {"input_ids": ids_p, "labels": labels_p, "position_ids": pos_p,
             "cu_seqlens": cu, "cu_seqlens_padded": cu_p}
    meta = {"profile": "te", "cp_size": str(d // 2)}
    meta.update(extra_meta or {})
    common.save_case(
        STACK, case, batch, repo=REPO, commit=commit, file=FILE,
        function="pad_thd_sequences_for_cp + generate_positional_ids_for_cp",
        input={"input_ids": ids, "labels": labels, "cu_seqlens": cu, "divisibility_factor": d,
               "padding_token_id": pad_id, "padding_label_id": label_pad, "from_test": test},
        expected="pass", why=why, metadata=meta, stubs=stubs,
        notes="cu_seqlens is the caller's real-length offsets (TE's cu_seqlens_q), saved next to the "
              "padded offsets the function returns (cu_seqlens_q_padded). " + notes)


def _rank_group(te, stubs, commit, group, cu_p, ids_p, labels_p, pos_p, cp_size, *, cu_real,
                expected, why, bug=None, test=None, notes=""):
    for r in range(cp_size):
        with _cp_env(cp_size, r):
            ids_r, labels_r, pos_r = te.get_batch_on_this_cp_rank(cu_p, ids_p, labels_p, pos_p)
        batch = {"input_ids": ids_r, "labels": labels_r, "position_ids": pos_r,
                 "cu_seqlens": cu_real, "cu_seqlens_padded": cu_p,
                 "cp_rank": torch.tensor(r), "cp_size": torch.tensor(cp_size)}
        common.save_case(
            STACK, f"{group}/rank{r}", batch, repo=REPO, commit=commit, file=FILE,
            function="get_batch_on_this_cp_rank",
            input={"cu_seqlens_padded": cu_p, "input_ids_padded": ids_p, "labels_padded": labels_p,
                   "position_ids_padded": pos_p, "cp_size": cp_size, "cp_rank": r, "from_test": test},
            # A rank file carries no verdict of its own: thdcheck judges the reassembled group.
            expected="pass", why=why, bug=bug, metadata={"profile": "te"}, stubs=stubs,
            notes="Rank file: this rank's zigzag shard of the token tensors as the function returns it; "
                  "cu_seqlens / cu_seqlens_padded are the global offsets every CP rank hands TE "
                  "attention; cp_rank / cp_size are what torch.distributed reported. " + notes)
    common.expect_group(STACK, group, expected=expected, why=why, bug=bug, repo=REPO, commit=commit,
                        file=FILE, function="get_batch_on_this_cp_rank")


def generate():
    te_added, stubs = _load(ADDED)
    te, stubs = _load(HEAD)

    # 1. TE test_padding_with_custom_padding_values_sequences_shorter_than_divisibility_factor.
    _padded_case(
        te, stubs, HEAD, "pad_custom_values_d8",
        torch.tensor([1, 1, 1, 2, 2, 3, 3, 3, 3]),
        torch.tensor([-100, -100, -100, -100, -100, -100, -100, 13, -100]),
        torch.tensor([0, 3, 5, 9]), 8, pad_id=777, label_pad=-200,
        test=f"{TEST}::TestSequencePadding::test_padding_with_custom_padding_values_sequences_shorter_than_divisibility_factor",
        extra_meta={"ignore_index": "-200", "pad_token_id": "777"},
        why="TE's own unit-test input and output (expected cu_seqlens_padded [0,8,16,24], positions "
            "[0..7]x3). Valid per pad_thd_sequences_for_cp's contract: each sequence is padded at its "
            "own end to a multiple of d=8=2*cp, real offsets unchanged, pad labels = the caller's "
            "padding_label_id (-200 here; the API takes any id, the loss must ignore that id).",
        notes="The label pad is -200, not -100: this is TE's test choice, documented by the "
              "padding_label_id parameter; metadata ignore_index says so (the loss's second ignore value).")

    # 2. test_mixed_sequence_lengths_with_divisibility_factor (d = 6, cp = 3).
    ids = torch.tensor([1, 1, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4])
    labels = torch.tensor([10, 11, 20, 21, 22, 23, 24, 25, 26, 30, 31, 32, 33,
                           40, 41, 42, 43, 44, 45, 46, 47, 48, 49])
    _padded_case(
        te, stubs, HEAD, "pad_mixed_lengths_d6", ids, labels, torch.tensor([0, 2, 9, 13, 23]), 6,
        test=f"{TEST}::TestSequencePadding::test_mixed_sequence_lengths_with_divisibility_factor",
        why="TE unit-test input (lengths 2/7/4/10, d=6 -> cu_padded [0,6,18,24,36]). Every slot a "
            "multiple of 2*cp=6, pad ids 0 / labels -100 at each sequence's end, positions run "
            "arange(padded_len) per sequence: valid for cp_size=3.")

    # 3. test_sequences_longer_than_divisibility_factor (d = 4), run at the commit that added it.
    ids = torch.tensor([1] * 7 + [2] * 11 + [3] * 5)
    labels = torch.tensor(list(range(100, 107)) + list(range(200, 211)) + list(range(300, 305)))
    _padded_case(
        te_added, stubs, ADDED, "pad_longer_d4_at_2129", ids, labels, torch.tensor([0, 7, 18, 23]), 4,
        test=f"{TEST}::TestSequencePadding::test_sequences_longer_than_divisibility_factor",
        why="TE unit-test input (lengths 7/11/5, d=4 -> cu_padded [0,8,20,28]), run at TE #2129 "
            "(483d9594f) where the helper was added (byte-identical at HEAD). Valid for cp_size=2.")

    # 4. test_integration_with_padding_and_cp_slicing: pad, then every rank's shard.
    ids = torch.tensor([1, 1, 2, 2, 2])
    labels = torch.tensor([10, 11, 20, 21, 22])
    cu = torch.tensor([0, 2, 5])
    ids_p, labels_p, cu_p = te.pad_thd_sequences_for_cp(ids.unsqueeze(0), labels.unsqueeze(0), cu, 4,
                                                        padding_token_id=0, padding_label_id=-100)
    pos_p = te.generate_positional_ids_for_cp(cu, 4)
    _rank_group(
        te, stubs, HEAD, "cp2_integration", cu_p, ids_p.unsqueeze(0), labels_p.unsqueeze(0), pos_p, 2,
        cu_real=cu, test=f"{TEST}::TestContextParallelUtils::test_integration_with_padding_and_cp_slicing",
        expected="pass",
        why="TE unit test: [1,1]+[2,2,2] padded to 4+4 then zigzag-split for cp=2 (rank0 ids "
            "[1,0,2,0] as the test asserts). Slots are multiples of 2*cp, each rank holds chunks r and "
            "3-r of every sequence: the ranks reassemble to the padded batch.")

    # 5. test_cp_rank_slicing_multiple_sequences: two sequences of 8, cp = 2.
    ids = torch.tensor([[1, 2, 3, 4, 5, 6, 7, 8, 11, 12, 13, 14, 15, 16, 17, 18]])
    labels = torch.tensor([[10, 20, 30, 40, 50, 60, 70, 80, 110, 120, 130, 140, 150, 160, 170, 180]])
    pos = torch.tensor([0, 1, 2, 3, 4, 5, 6, 7, 0, 1, 2, 3, 4, 5, 6, 7])
    cu = torch.tensor([0, 8, 16])
    _rank_group(
        te, stubs, HEAD, "cp2_two_sequences", cu, ids, labels, pos, 2, cu_real=cu,
        test=f"{TEST}::TestContextParallelUtils::test_cp_rank_slicing_multiple_sequences",
        expected="pass",
        why="TE unit test (rank0 ids [1,2,7,8,11,12,17,18]); no padding, lengths 8 = 2*2*cp: "
            "valid zigzag shards.")

    # 6. Lengths not divisible by 2*cp handed to the Python split: tokens silently dropped.
    ids = torch.arange(1, 17).unsqueeze(0)
    labels = torch.arange(101, 117).unsqueeze(0)
    pos = torch.cat([torch.arange(6), torch.arange(10)])
    cu = torch.tensor([0, 6, 16])
    _rank_group(
        te, stubs, HEAD, "cp2_not_divisible_drops_tokens", cu, ids, labels, pos, 2, cu_real=cu,
        expected=["cp-shard"],
        bug="TE Python get_batch_on_this_cp_rank floors Lpad/(2*cp) and silently drops the remainder "
            "(nvidia-stacks.md 4.2); the CUDA thd_get_partitioned_indices asserts cu[i] % (2*cp) == 0",
        why="Slots of 6 and 10 tokens are not multiples of 2*cp=4: slice = L//4 gives rank0 ids "
            "[1,4,7,8,13,14] and rank1 [2,3,9,10,11,12]; ids 5,6 (idx 4,5) and 15,16 (idx 14,15) land "
            "on no rank. The "
            "contract (CUDA kernel assert cu % (2*cp) == 0; 'every padded sequence length must be a "
            "multiple of 2C') is violated -> cp-shard.",
        notes="Input made for this case (not a TE test): a caller that forgot pad_thd_sequences_for_cp.")
