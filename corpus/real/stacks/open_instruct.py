"""allenai/open-instruct: the padding-free collators of `open_instruct/padding_free_collator.py`.

SFT: `TensorDataCollatorWithFlattening` (with and without static padding to `max_seq_length`).
DPO: `TensorDataCollatorWithFlatteningDPO` followed by `concatenated_inputs`, saved together (the
collator's `chosen_*` / `rejected_*` / `index` keys plus the `concatenated_*` keys), as
`dpo_utils.concatenated_forward_olmo` sees them.

Commits (docs: /work/shared/reference/open-instruct-and-areal.md, Part 1):
- `f009311bc` base of #1466: no padding; OI-B2 (rejected seq_idx + last chosen seq_idx value).
- `005366f75^` inside #1466: static padding to max_seq_length; OI-B1 (rejected cu offset by the
  real chosen length `chosen_cu[-1]`, not the padded `chosen_input_ids.shape[-1]`) and OI-B2.
- `005366f75` the fix of both (truncation era: over-long packs are truncated and cu clamped).
- `ee0c460` #1466 merged (prefix budget, no truncation), `e6c3044aa` HEAD.

Label convention (every commit): per sequence `[separator_id] ++ labels[1:]` (unshifted, the loss
shifts: `get_batch_logps` takes `labels[:, 1:]`), separator -100; padding: input_ids 0,
labels -100, position_ids 0, seq_idx -1; cu_seq_lens never cover the padding.
"""

from __future__ import annotations

import logging

import torch

from common import save_case, stub, upstream

REPO = "allenai/open-instruct"
FILE = "open_instruct/padding_free_collator.py"
STACK = "open_instruct"


def load(commit: str):
    """padding_free_collator.py at `commit`, with its `open_instruct` imports: `tensor_utils`
    is the real file at the same commit (where it exists), `logger_utils` a stub."""
    stubs = {}
    names = []
    pkg = stub("open_instruct")
    pkg.__path__ = []  # a package, so `from open_instruct import x` reads attributes
    src_has_tu = True
    try:
        tu = upstream(REPO, commit, "open_instruct/tensor_utils.py")
        pkg.tensor_utils = tu
    except Exception:  # tensor_utils.py is new in ee0c460
        src_has_tu = False
    pkg.logger_utils = stub("open_instruct.logger_utils", setup_logger=lambda name: logging.getLogger(name))
    names.append("open_instruct.logger_utils (setup_logger -> logging.getLogger)")
    stubs["open_instruct"] = pkg
    stubs["open_instruct.logger_utils"] = pkg.logger_utils
    if src_has_tu:
        stubs["open_instruct.tensor_utils"] = pkg.tensor_utils
    mod = upstream(REPO, commit, FILE, stubs=stubs)
    return mod, names


def t(xs):
    return torch.tensor(xs, dtype=torch.long)


def sft_features(seqs, prompt=None, labels=True):
    """Features of token lists; `prompt[i]` leading tokens of sequence i get label -100."""
    feats = []
    for i, s in enumerate(seqs):
        f = {"input_ids": t(s)}
        if labels:
            lab = list(s)
            for j in range((prompt or [0] * len(seqs))[i]):
                lab[j] = -100
            f["labels"] = t(lab)
        feats.append(f)
    return feats


def dpo_features(chosen, rejected, start=0):
    """DPO features: labels are the token ids (open-instruct's DPO data has the prompt masked;
    here the whole sequence is the response, which the collator treats the same way)."""
    return [
        {"chosen_input_ids": t(c), "chosen_labels": t(c), "rejected_input_ids": t(r),
         "rejected_labels": t(r), "index": start + i}
        for i, (c, r) in enumerate(zip(chosen, rejected))
    ]


def save_sft(case, commit, feats, *, max_seq_length=None, expected="pass", why, bug=None, notes="", **kw):
    mod, stubs = load(commit)
    args = {} if max_seq_length is None else {"max_seq_length": max_seq_length}
    coll = mod.TensorDataCollatorWithFlattening(**args, **kw)
    batch = coll(feats)
    meta = {"causal": "true", "profile": STACK, "pad_token_id": 0}
    if max_seq_length is not None:
        meta["max_seq_length"] = max_seq_length
    save_case(STACK, case, batch, repo=REPO, commit=commit, file=FILE,
              function=f"TensorDataCollatorWithFlattening({', '.join(f'{k}={v}' for k, v in {**args, **kw}.items())}).__call__",
              input={"features": feats}, expected=expected, why=why, bug=bug, metadata=meta,
              notes=notes, stubs=stubs)


def save_dpo(case, commit, chosen, rejected, *, max_seq_length=None, expected="pass", why, bug=None, notes=""):
    mod, stubs = load(commit)
    feats = dpo_features(chosen, rejected)
    args = {} if max_seq_length is None else {"max_seq_length": max_seq_length}
    coll = mod.TensorDataCollatorWithFlatteningDPO(**args)
    batch = coll(feats)
    concat, bs = mod.concatenated_inputs(batch)
    out = dict(batch)
    out.update(concat)
    meta = {"causal": "true", "profile": STACK, "pad_token_id": 0}
    if max_seq_length is not None:
        meta["max_seq_length"] = max_seq_length
    save_case(STACK, case, out, repo=REPO, commit=commit, file=FILE,
              function=f"TensorDataCollatorWithFlatteningDPO({', '.join(f'{k}={v}' for k, v in args.items())}).__call__ + concatenated_inputs",
              input={"features": feats, "concatenated_inputs_bs": bs}, expected=expected, why=why,
              bug=bug, metadata=meta, notes=notes, stubs=stubs)


def generate() -> None:
    # ---------------- SFT ----------------
    # Token id 0 inside the content (a real token whose id equals the pad id), a 1-token
    # sequence, prompt tokens masked with -100.
    seqs = [[5, 0, 7], [11, 12, 0, 14, 15], [9]]
    save_sft(
        "sft_f009311bc", "f009311bc", sft_features(seqs, prompt=[1, 2, 0]),
        why="Padding-free SFT collator at the #1466 base: one row, cu_seq_lens_q=k over the real "
            "tokens, position_ids restart per sequence, labels [-100] ++ labels[1:] per sequence "
            "(padding_free_collator.py@f009311bc __call__), seq_idx = example number. Valid.",
    )
    save_sft(
        "sft_static_pad_005366f75p", "005366f75^", sft_features(seqs, prompt=[1, 2, 0]),
        max_seq_length=12,
        why="Static padding introduced in #1466 (97dd31a78): 9 real tokens right-padded to "
            "max_seq_length=12 with input 0, label -100, position 0, seq_idx -1; cu_seq_lens stay "
            "[0,3,8,9] (padding outside every segment). The pad id 0 also occurs as a real token. Valid.",
    )
    save_sft(
        "sft_static_pad_ee0c460", "ee0c460", sft_features([[0, 3], [4, 0, 0, 7]], labels=False),
        max_seq_length=9,
        why="#1466 merged: tensor_utils.pad_to_length pads to max_seq_length=9; no labels key, so "
            "labels are [-100] ++ input_ids[1:] (_collect_flattened_features). Content starts with "
            "token 0 (= pad id) and has 0s inside. Valid.",
    )
    save_sft(
        "sft_exact_fit_e6c3044aa", "e6c3044aa", sft_features([[21], [22, 23, 24], [25, 26]], prompt=[0, 1, 0]),
        max_seq_length=6,
        why="HEAD: the pack fills max_seq_length=6 exactly, so pad_to_length is a no-op and there is "
            "no padding; a 1-token sequence contributes only its separator label. Valid.",
    )
    save_sft(
        "sft_overlong_e6c3044aa", "e6c3044aa", sft_features([[31, 32, 33, 34], [35, 36, 37]]),
        max_seq_length=5,
        why="HEAD: 7 tokens > max_seq_length=5; pad_to_length never truncates (tensor_utils.py: "
            "returns the tensor when size >= length), so the row is 7 long and the cu cover it. "
            "Valid layout (only the static shape is lost).",
    )

    # ---------------- DPO ----------------
    save_dpo(
        "dpo_seq_idx_collision_f009311bc", "f009311bc", [[300, 301, 302], [310, 0, 312, 313, 314]],
        [[400, 401], [410, 411, 412, 413]],
        expected=["seq-idx"], bug="OI-B2",
        why="concatenated_inputs@f009311bc offsets rejected seq_idx by chosen_seq_idx[0,-1] (=1, "
            "the last chosen example's id) instead of the number of chosen sequences (2), so rejected "
            "example 0 gets seq_idx 1 like chosen example 1 (fixed in 005366f75). Offsets are right "
            "(no padding: chosen cu[-1] = chosen length).",
    )
    save_dpo(
        "dpo_seq_idx_collision_single_f009311bc", "f009311bc", [[0, 5, 6, 7]], [[8, 0]],
        expected=["seq-idx"], bug="OI-B2",
        why="One pair at f009311bc: rejected seq_idx + chosen_seq_idx[0,-1] = +0, so the rejected "
            "example has seq_idx 0, the chosen example's id: two segments share one seq_idx.",
    )
    save_dpo(
        "dpo_offset_real_length_005366f75p", "005366f75^", [[300, 301, 302], [310, 311, 312, 313, 314]],
        [[400, 401], [410, 411, 412, 413]], max_seq_length=10,
        expected=["dpo-offsets", "seq-idx"], bug="OI-B1, OI-B2",
        why="005366f75^: chosen padded 8->10 but concatenated_inputs adds chosen_cu[-1]=8 to the "
            "rejected offsets: cu [0,3,8,10,14] instead of [0,3,8,12,16] (OI-B1); rejected seq_idx "
            "+ chosen_seq_idx[0,-1] = -1 (a pad), giving rejected ids -1 and 0, colliding with the "
            "padding marker and chosen example 0 (OI-B2). Both fixed in 005366f75.",
    )
    save_dpo(
        "dpo_offset_single_pair_005366f75p", "005366f75^", [[7, 8, 9, 0]], [[17, 18]], max_seq_length=6,
        expected=["dpo-offsets", "seq-idx"], bug="OI-B1, OI-B2",
        why="One pair, chosen 4 padded to 6: rejected offset +4 (real) instead of +6 (padded): "
            "concatenated cu [0,4,6] instead of [0,4,8] (OI-B1). The seq_idx offset is chosen_seq_idx[0,-1] "
            "= -1 (a pad), so the rejected example gets seq_idx -1, the collator's own padding marker "
            "(F.pad(seq_idx_tensor, ..., value=-1)), the id of the chosen padding right before it (OI-B2).",
        notes="First written as [dpo-offsets] only (one distinct id per segment); corrected after "
              "re-reading the collator: -1 is the padding id, so the example is tagged as padding.",
    )
    save_dpo(
        "dpo_no_padding_005366f75p", "005366f75^", [[300, 301, 302], [310, 311, 312, 313, 314]],
        [[400, 401], [410, 411, 412, 413]], max_seq_length=8,
        expected=["seq-idx"], bug="OI-B2",
        why="Negative control of OI-B1: chosen fills max_seq_length=8, so chosen_cu[-1] equals the "
            "padded length and the offsets are right; the seq_idx offset is still chosen_seq_idx[0,-1]=1 "
            "(rejected example 0 collides with chosen example 1).",
    )
    save_dpo(
        "dpo_padded_005366f75", "005366f75", [[300, 301, 302], [310, 311, 312, 313, 314]],
        [[400, 401], [410, 411, 412, 413]], max_seq_length=10,
        expected=["dpo-offsets"], bug="#1900",
        why="005366f75 (the OI-B1 fix): rejected offsets + chosen_input_ids.shape[-1] (10): cu "
            "[0,3,8,12,16]; rejected seq_idx + len(chosen_cu)-1 = 2, 3. The OI-B1 offsets are fixed, "
            "but segment 2 = [8,12) spans the chosen padding [8,10) before rejected example 0: "
            "open-instruct PR #1900 (open, 2026-09-18, 'Fix packing in olmo-core DPO path') shows this very layout (upstream test "
            "test_concatenated_cu_seq_lens_with_padding, [0,50,100,550,600]) making the first "
            "rejected example attend to the padding (initial loss 6x ln 2).",
        notes="First recorded as pass (the upstream test of 005366f75 asserts this layout); changed "
              "after reading PR #1900, whose description names this layout as the bug.",
    )
    save_dpo(
        "dpo_truncated_005366f75", "005366f75", [[11, 12], [13, 14], [15, 16]],
        [[21, 22, 23, 24, 25, 26], [31, 32, 33, 34, 35, 36], [41, 42, 43, 44, 45, 46]],
        max_seq_length=10,
        expected=["dpo-offsets", "pad-labels"], bug="OI-B7, #1900",
        why="Truncation era (005366f75^..2ef99d741): rejected (18 tokens) is truncated to 10, so only "
            "2 examples stay valid; the collator cuts chosen_cu to [0,2,4] but leaves chosen example 2's "
            "tokens [15,16] (label 16) in chosen_input_ids past cu[-1], i.e. in the padding with a "
            "real label. get_batch_logps then adds that token's logp to rejected example 0's segment. "
            "Replaced by the complete-example prefix filter in 2ef99d741. The concatenated cu also "
            "put the chosen padding [4,10) into rejected example 0's segment (#1900).",
    )
    save_dpo(
        "dpo_budget_ee0c460", "ee0c460", [[0, 51, 52], [53, 0, 55, 56, 57], [58]],
        [[61, 62], [63, 64, 0, 66], [67, 68, 69, 70, 71, 72]], max_seq_length=10,
        expected=["dpo-offsets"], bug="#1900",
        why="#1466 merged: count_features_within_token_budget keeps the 2-pair prefix (the third "
            "pair's rejected would make 12 > 10); both branches padded to 10; cu "
            "[0,3,8,12,16] and seq_idx offset by 2. Token 0 occurs in content. Budget and seq_idx "
            "are right, but segment 2 = [8,12) holds the chosen padding [8,10) (open-instruct PR #1900 (open, 2026-09-18, 'Fix packing in olmo-core DPO path')).",
    )
    save_dpo(
        "dpo_head_e6c3044aa", "e6c3044aa", [[81], [82, 83, 84, 0]], [[91, 92, 93], [94]], max_seq_length=7,
        expected=["dpo-offsets"], bug="#1900",
        why="HEAD (pre-#1900): 1-token sequences on both branches, chosen padded 5->7 and rejected "
            "4->7; concatenated cu [0,1,5,10,11]. dpo_utils.concatenated_forward_olmo passes doc_lens "
            "from these cu to the model (#1670), so the first rejected segment [5,10) spans the "
            "chosen padding [5,7): rejected example 0 attends to 2 pad tokens (open-instruct PR #1900 (open, 2026-09-18, 'Fix packing in olmo-core DPO path')).",
    )
    save_dpo(
        "dpo_no_max_e6c3044aa", "e6c3044aa", [[101, 102, 103], [104, 105]], [[111], [112, 113, 114]],
        why="HEAD without max_seq_length: no padding, no budget; cu [0,3,5,6,9], seq_idx 0..3. Valid.",
    )
