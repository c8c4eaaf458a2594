#!/usr/bin/env python3
"""Writes each record's `facts` (issue 39): what a right batch built from the record's INPUT holds,
computed here from `input` alone, never from the output tensors (no cu_seqlens, position ids or
masks the upstream function returned are read), and never from thdcheck.

    python corpus/real/facts.py          # rewrite `facts` / `facts_from` of every record
    python corpus/real/facts.py --check  # exit 1 if any record's facts differ from a fresh run

`facts` = {"documents": the non-empty real sequences of the batch (a CP group: of the whole
reassembled batch), "real_tokens": Σ their lengths, "useful_sum_sq": Σ length², "trained_labels":
the label positions the stack's loss trains, or null where the input does not determine it}.
`facts_from` says how, in one line. For a bug reproduction (`expected` != "pass") the facts are
those of a CORRECT batch from the same input (the fixed behaviour), so they may differ from what
the buggy output shows. Each stack's function below reads the input the way the stack documents
its behaviour (truncation, budgets, which examples a batch holds, how labels are masked and
shifted); where the input is text, each example is tokenized alone again (`_words`: the toy
word-level tokenizers of the corpus split like the `Whitespace` pre-tokenizer) and the lengths
are checked against, and written beside, the stack's own per-example encoding
(`input["example_lengths (independent)"]`).

`MISMATCH` holds, per record path, why thdcheck's report differs from these facts where it does
(the tool is wrong or counts something else); `cli/tests/cli/real_corpus.rs`
`real_corpus_facts_match_records` lists those and holds every other valid record to its facts.
Run by `generate.py` after the stacks, so regenerating keeps the facts.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
OUT = HERE / "batches"
IGNORE = -100


def _data(v):
    """A recorded tensor ({"dtype", "shape", "data"}) or a plain list, as a list."""
    return v["data"] if isinstance(v, dict) and "data" in v else v


def _words(text: str) -> int:
    """Tokens of `text` under the corpus's word-level toy tokenizers (tokenizers' `Whitespace`
    pre-tokenizer: runs of word characters, runs of other non-space characters)."""
    return len(re.findall(r"\w+|[^\w\s]+", text))


def _trained_after(labels, start=1):
    """Label positions t >= start that are not -100 (unshifted labels: position 0 of a sequence
    has no prediction inside it)."""
    return sum(1 for t, l in enumerate(labels) if t >= start and l != IGNORE)


def _facts(lengths, trained):
    lengths = [n for n in lengths if n > 0]
    return {"documents": len(lengths), "real_tokens": sum(lengths),
            "useful_sum_sq": sum(n * n for n in lengths), "trained_labels": trained}


# --- per stack: (rec, input) -> (lengths, trained_labels, facts_from, extra input keys) --------

def areal(rec, i):
    rows = i["rows"]
    masks, loss = _data(rows["attention_mask"]), _data(rows["loss_mask"])
    lengths = [sum(m) for m in masks]
    trained = sum(sum(lm[1:n]) for lm, n in zip(loss, lengths))
    return lengths, trained, (
        "one sequence per input row, its length the row's attention_mask sum (the padding and "
        "any CP/dummy alignment are not real); trained = the per-token loss_mask on tokens 1.. of "
        "each sequence (a token is a target of its predecessor in the same sequence)"), {}


def automodel(rec, i):
    s = i["samples"]
    lengths = [len(x["input_ids"]) for x in s]
    trained = sum(sum(1 for l in x["labels"] if l != IGNORE) for x in s)
    return lengths, trained, (
        "every input sample is packed whole (each fits packed_sequence_size): its input_ids "
        "length; trained = its labels != -100 (already shifted per sample by "
        "_package_tokenized_example, so every one is a target)"), {}


def axolotl(rec, i):
    f = i["features"]
    if rec["case"].endswith("sp_rank1_v0.8.0"):
        # One SP rank's slice (tokens 4..7 of the 8-token row [5 | 3]): the tail of sample 0
        # (1 token) and sample 1 (3 tokens).
        return [1, 3], None, (
            "rank 1 of sequence_parallel_degree 2 holds tokens 4..7 of the row of samples of 5 and "
            "3 tokens: sample 0's last token and all of sample 1 (lengths 1, 3); trained null: the "
            "loss of a rank's slice is taken on the gathered row, not derivable per rank"), {}
    if isinstance(f, dict):  # pretraining: one stream, labels = the input_ids copy
        lengths = [len(x) for x in f["input_ids"]]
        return lengths, sum(lengths) - 1, (
            "pretraining multipack: the input documents' input_ids lengths, one row; trained = the "
            "row's real tokens minus 1 (labels are the ids, unshifted, trained across documents by "
            "the pretraining objective)"), {}
    lengths, trained = [], 0
    for row in f:
        for x in row:
            lengths.append(len(x["input_ids"]))
            trained += _trained_after(x["labels"])
    return lengths, trained, (
        "SFT multipack: each sample's input_ids length; trained = its labels != -100 at positions "
        ">= 1 (unshifted labels, the model shifts within the sample)"), {}


def bionemo(rec, i):
    feats = i["features"]
    lengths = [len(x["input_ids"]) for x in feats]
    c = i["collator"]
    if c.get("mlm") is False:
        return lengths, sum(n - 1 for n in lengths), (
            "each feature's input_ids length (padding to a multiple adds no real token); causal LM: "
            "labels = ids with separator -100 at every sequence start, so trained = Σ (length - 1)"), {}
    if c.get("mlm_probability") == 0.0:
        return lengths, 0, (
            "each feature's input_ids length (mock padding adds no real token); MLM with "
            "mlm_probability 0: no position is masked, trained = 0"), {}
    return lengths, None, (
        "each feature's input_ids length (padding to a multiple and the mock tail add no real "
        "token); trained null: MLM masks a random 15% (seed 42), a draw of the collator's RNG, not "
        "a function of the input"), {}


def deepspeed_ulysses(rec, i):
    b = i["rank 0's loader batch (this micro-batch)"]
    ids, labels = _data(b["input_ids"]), _data(b["labels"])
    lengths, trained = [], 0
    if "attention_mask" in b:
        for m, lab in zip(_data(b["attention_mask"]), labels):
            n = sum(m)
            lengths.append(n)
            trained += _trained_after(lab[:n])
        how = "rows of the loader batch, each one example of its attention_mask sum"
    else:
        pos = _data(b["position_ids"])
        for p, lab in zip(pos, labels):
            starts = [t for t, x in enumerate(p) if x == 0] + [len(p)]
            for a, z in zip(starts, starts[1:]):
                lengths.append(z - a)
                trained += _trained_after(lab[a:z])
        how = ("the examples the loader's packed row was flattened from (the data collator's "
               "position_ids restart at each, before any SP split)")
    return lengths, trained, (
        f"rank 0's loader micro-batch (the one the SP group splits): {how}; trained = labels != "
        "-100 at positions >= 1 of each example (refill shifts them into shift_labels; a correct "
        "batch never trains an example's first label)"), {}


_ALPACA = ("Below is an instruction that describes a task. Write a response that appropriately "
           "completes the request.\n\n### Instruction:\n{instruction}\n\n### Response:\n")


def litgpt(rec, i):
    if "text files" in i:
        files = i["text files"]
        train = [files[k] for k in sorted(files)][1:]  # TextFiles: the first file is validation
        stream = sum(1 + _words(t) for t in train)  # each file with its BOS
        block = 9  # max_seq_length 8 + 1
        blocks = stream // block
        batch = 2  # the stack's batch_size
        rows = min(batch, blocks)
        lengths = [block - 1] * rows
        return lengths, sum(lengths), (
            f"the train files ({', '.join(sorted(files)[1:])}) tokenized alone with a BOS each "
            f"({stream} ids), cut into {blocks} blocks of max_seq_length + 1 = 9, a batch of {batch}: "
            "each row one causal sequence of 8 tokens (pretraining, documents attended across by "
            "design), every position trained on the next token"), {
                "example_lengths (independent)": [1 + _words(t) for t in train]}
    bos = 0 if "add_bos_token false" in i["tokenizer"] else 1
    full, resp = [], []
    for ex in i["examples"]:
        prompt = bos + _words(_ALPACA.format(instruction=ex["instruction"]))
        r = _words(ex["output"]) + 1  # the response and its EOS
        full.append(prompt + r)
        resp.append(r)
    cap = i["max_seq_length"]
    lengths = [n if cap < 0 else min(n, cap) for n in full]
    if i["mask_prompt"]:
        trained = sum(r - (n - k) for r, n, k in zip(resp, full, lengths))
        how = "the response tokens and EOS that survive truncation (mask_prompt: the prompt is -100)"
    else:
        trained = sum(n - 1 for n in lengths)
        how = "every token but each row's first (no prompt mask; the loss shifts)"
    return lengths, trained, (
        "each alpaca example tokenized alone (prompt style alpaca, BOS if the tokenizer adds one, "
        f"the response, its EOS), cut to max_seq_length={cap}; one example per row; trained = "
        f"{how}"), {"example_lengths (independent)": full}


def llm_foundry(rec, i):
    def ex_len(e):
        t = e["turns"][0]
        return len(t["input_ids"]) + len(t["labels"]) + 1  # EOS appended to the last target

    def ex_trained(e):
        t = e["turns"][0]
        # labels: the target and its EOS (unshifted); the first token of an example is never a
        # target inside it (a context-less example's first label is masked by BinPackCollator or
        # dropped by the shift).
        return len(t["labels"]) + 1 - (0 if t["input_ids"] else 1)

    calls, cap, bins_out = i["calls"], 8, 2
    examples = []
    leftovers: list[list] = []
    for call in calls:
        bins = [list(b) for b in leftovers]
        for e in sorted(call, key=ex_len, reverse=True):  # first-fit decreasing
            for b in bins:
                if sum(ex_len(x) for x in b) + ex_len(e) <= cap:
                    b.append(e)
                    break
            else:
                bins.append([e])
        bins.sort(key=lambda b: sum(ex_len(x) for x in b), reverse=True)
        emitted, leftovers = bins[:bins_out], bins[bins_out:]
        examples = [e for b in emitted for e in b]
    lengths = [ex_len(e) for e in examples]
    return lengths, sum(ex_trained(e) for e in examples), (
        "each example = context ++ target ++ EOS (Seq2SeqFinetuningCollator); BinPackCollator "
        "first-fit-decreasing into 2 bins of max_seq_len 8, the fullest 2 emitted and the rest kept "
        "for the next call (a leftover bin of call 1 joins call 2); trained = each example's target "
        "and EOS, minus its first token when it has no context"), {}


_MB_EOS = 2


def megatron_bridge(rec, i):
    rows = i["rows"]
    if "row" in i:
        rows = [rows[i["row"]]]
    lengths, trained = [], 0
    for r in rows:
        ids, b, lm = r["input_ids"], r["seq_boundaries"], r["loss_mask"]
        for a, z in zip(b, b[1:]):
            n = ids[a:z].index(_MB_EOS)  # tokens = the sequence up to its EOS (the last id is a label)
            lengths.append(n)
            trained += sum(lm[a:a + n])
    return lengths, trained, (
        "each stored sequence of the step's row (seq_boundaries): its ids up to its first EOS are the "
        "tokens (the EOS is the last label; further EOS ids are the pad_seq_to_mult padding); trained "
        "= the stored (already rolled) loss_mask on those tokens"), {}


_MLM_EOD = 2
_MLM_EOD_MASK = {"inter_doc_cut_v0.19.0": False}


def megatron_lm(rec, i):
    docs, idx, rows, seq = i["documents"], i["sample_index"], i["rows"], 8
    starts, off = [], 0
    for d in docs:
        starts.append(off)
        off += len(d)
    stream = [t for d in docs for t in d]
    name = rec["case"].split("/")[1]
    eod_mask = _MLM_EOD_MASK.get(name, True)
    lengths, trained = [], 0
    for r in rows:
        a = starts[idx[r][0]] + idx[r][1]
        z = starts[idx[r + 1][0]] + idx[r + 1][1]
        ids = stream[a:z + 1]
        ids = ids + [None] * (seq + 1 - len(ids))  # a short last sample is padded
        tokens, labels = ids[:seq], ids[1:seq + 1]
        n = 0
        for t, (tok, lab) in enumerate(zip(tokens, labels)):
            if tok is None:
                break
            n += 1
            if lab is not None and not (eod_mask and tok == _MLM_EOD):
                trained += 1
            if tok == _MLM_EOD:
                lengths.append(n)
                n = 0
        lengths.append(n)
    return lengths, trained, (
        "the document stream cut by the sample index into samples of sequence_length 8 (+1 label); "
        "each sample's documents end at its EOD tokens (a document cut by the sample is a segment of "
        "each sample it is in); padding of a short sample is not real; trained = tokens whose next "
        f"token exists in the sample{', except EOD inputs (eod_mask_loss)' if eod_mask else ''} "
        "(pretraining: a document's EOD predicts the next document)"), {}


_SWIFT_MAX = {"padding_free_v4.5.2": 16}


def ms_swift(rec, i):
    samples = i["samples (ids, prompt length)"]
    cap = _SWIFT_MAX.get(rec["case"].split("/")[1], 6)
    lengths = [min(len(ids), cap) for ids, _ in samples]
    trained = sum(n - max(p, 1) for (ids, p), n in zip(samples, lengths))
    return lengths, trained, (
        f"each sample right-truncated to max_length={cap} (truncation_strategy 'right'); trained = "
        "its response tokens after the prompt (labels unshifted, every sample's first label -100)"), {}


def nanotron(rec, i):
    items, seq = i["items"], 8
    case = rec["case"]
    lengths, trained = [], 0
    if "no_doc_masking" in case:
        lengths = [seq] * len(items)
        return lengths, seq * len(items), (
            "use_doc_masking=False: each item's first 8 ids are one causal sequence (pretraining); "
            "every position is trained on the next id"), {}
    for it in items:
        pos = it["positions"]
        st = [t for t in range(seq) if pos[t] == 0] + [seq]
        lengths += [z - a for a, z in zip(st, st[1:])]
        trained += sum(1 for t in range(seq) if pos[t + 1] != 0)
    return lengths, trained, (
        "each item's first 8 ids, its documents the restarts of datatrove's positions; trained = "
        "positions whose next id continues the same document (label_mask drops each EOS a new "
        "document follows)"), {}


_OLMO = {  # eos, bos, pad per case (the tokenizer the input names)
    "fsl_bos_eq_eos_v2.5.0": (100257, 100257, 100277),
    "packed_bos_pad_v2.5.0": (128001, 128000, 128001),
}


def olmo_core(rec, i):
    name = rec["case"].split("/")[1]
    eos, bos, pad = _OLMO.get(name, (None, None, None))
    seq = i["sequence_length"]
    tf = i["token_file"]
    if i["documents"] is None:  # fixed-size windows of the token stream
        eos = eos or int(re.search(r"eos (\d+)", i["tokenizer"]).group(1))
        lengths, trained = [], 0
        for r in i["rows"]:
            row = tf[r * seq:(r + 1) * seq]
            n = 0
            for t, tok in enumerate(row):
                n += 1
                nxt = row[t + 1] if t + 1 < len(row) else None
                end = tok == eos and (bos is None or nxt == bos)
                if end and nxt is not None:
                    lengths.append(n)
                    n = 0
            lengths.append(n)
            if not _repetitive(row):
                trained += seq - 1
        return lengths, trained, (
            "rows = 8-token windows of the token file; documents end at each EOS (with a BOS "
            "configured: only at an EOS followed by a BOS), a document cut by a window a segment of "
            "each window; trained = 7 per row (labels shifted within the row, the last -100; "
            "pretraining across documents), 0 for a row the instance filter drops (a period <= 2 "
            "pattern repeated more than 4 times)"), {}
    docs = i["documents"]
    lengths = [len(d) for d in docs]
    mask = i["label_mask_file"]
    dmask, off = [], 0
    for d in docs:
        dmask.append(mask[off:off + len(d)] if mask else [True] * len(d))
        off += len(d)
    if name.startswith("padded"):
        bins = [[k] for k in range(len(docs))]
    else:  # best-fit decreasing of whole documents into rows of sequence_length
        bins, fill = [], []
        for k in sorted(range(len(docs)), key=lambda k: -len(docs[k])):
            fits = [b for b in range(len(bins)) if fill[b] + len(docs[k]) <= seq]
            if fits:
                b = min(fits, key=lambda b: seq - fill[b])
                bins[b].append(k)
                fill[b] += len(docs[k])
            else:
                bins.append([k])
                fill.append(len(docs[k]))
    trained = 0
    for b in bins:
        m = [x for k in b for x in dmask[k]]
        trained += sum(1 for t in range(1, len(m)) if m[t])
    return lengths, trained, (
        "the input documents, whole (padding of a row is not real); rows = "
        + ("one document each" if name.startswith("padded") else
           "best-fit-decreasing packs of the documents into sequence_length")
        + "; trained = per row, positions predicting a real next token whose label_mask is true "
          "(labels shifted within the row; pretraining across the row's documents)"), {}


def _repetitive(row, max_period=2, max_count=4):
    for p in range(1, max_period + 1):
        for a in range(len(row) - p):
            k = 1
            while row[a + k * p:a + (k + 1) * p] == row[a:a + p]:
                k += 1
            if k > max_count:
                return True
    return False


def open_instruct(rec, i):
    feats = i["features"]
    fn = rec["function"]
    m = re.search(r"max_seq_length=(\d+)", fn)
    cap = int(m.group(1)) if m else None
    if "chosen_input_ids" not in feats[0]:
        lengths, trained = [], 0
        for f in feats:
            ids = _data(f["input_ids"])
            lab = _data(f["labels"]) if "labels" in f else ids
            lengths.append(len(ids))
            trained += _trained_after(lab)
        return lengths, trained, (
            "every feature whole (pad_to_length pads, never truncates): its input_ids length; "
            "trained = labels (the ids when there is no labels key) != -100 at positions >= 1 "
            "([-100] ++ labels[1:] per sequence)"), {}
    keep = len(feats)
    if cap is not None:  # complete-pair prefix within the budget of each branch (2ef99d741, #1466)
        c = r = 0
        for k, f in enumerate(feats):
            c += len(_data(f["chosen_input_ids"]))
            r += len(_data(f["rejected_input_ids"]))
            if c > cap or r > cap:
                keep = k
                break
    lengths, trained = [], 0
    for side in ("chosen", "rejected"):
        for f in feats[:keep]:
            lengths.append(len(_data(f[f"{side}_input_ids"])))
            trained += _trained_after(_data(f[f"{side}_labels"]))
    return lengths, trained, (
        "DPO: the chosen and the rejected sequence of every pair the batch holds (with "
        f"max_seq_length={cap}: the longest prefix of whole pairs within it on each branch, as "
        "count_features_within_token_budget keeps); trained = labels != -100 at positions >= 1 of "
        "each sequence; compared with the report's concatenated pack"), {}


def picotron(rec, i):
    texts = i["texts"]
    enc = i["encoded (batch_encode_plus)"]
    indep = [1 + _words(t) for t in texts]
    assert indep == [len(e) for e in enc], (rec["case"], indep)
    seq, mbs = i["sequence_length"], i["micro_batch_size"]
    rows = min(mbs, (sum(indep) - 1) // seq)
    return [seq] * rows, seq * rows, (
        "the texts tokenized alone (BOS + words: the same lengths as batch_encode_plus), "
        f"concatenated ({sum(indep)} ids) and cut into rows of {seq}+1 every {seq}: each row one "
        "causal sequence of 16 tokens (pretraining, documents attended across by design), every "
        "position trained on the next id"), {"example_lengths (independent)": indep}


def _chatml_len(instr, out):
    # <|im_start|> user words <|im_end|> <|im_start|> assistant words <|im_end|>
    return 6 + _words(instr) + _words(out)


def roll(rec, i):
    if "examples" in i:
        ex = i["examples"]
        enc = i["encoded features (get_encode_function)"]
        indep = [_chatml_len(a, b) for a, b in zip(ex["instruction"], ex["output"])]
        assert indep == [len(e["input_ids"]) for e in enc], (rec["case"], indep)
        trained = sum(_words(b) + 1 for b in ex["output"])
        return indep, trained, (
            "each chatml example tokenized alone (the same lengths as get_encode_function): one "
            "sequence each (the alignment padding of a slot or row is not real); trained = the "
            "response tokens and the closing <|im_end|> (the prompt is -100)"), {
                "example_lengths (independent)": indep}
    rows = i["rows (prompt, response) token ids"]
    lengths = [len(p) + len(r) for p, r in rows]
    return lengths, sum(len(r) for p, r in rows), (
        "each RL sample = prompt ++ response (the slot padding is not real); trained = the response "
        "tokens (loss_mask = response_mask, each predicted by its predecessor in the sample)"), {}


def skyrl(rec, i):
    rows = i["rows (token ids of each sequence)"]
    return [len(r) for r in rows], None, (
        "each RL sequence's token ids (the tp alignment padding is not real); trained null: the "
        "batch carries no labels and the RL loss mask comes from the rollout, not the input"), {}


def slime(rec, i):
    s = i["samples (prompt, response, response loss mask)"]
    return [len(p) + len(r) for p, r, _ in s], sum(sum(m) for _, _, m in s), (
        "each sample = prompt ++ response (the CP/multiplier padding is not real); trained = the "
        "response loss mask's ones (full_loss_masks puts each at the logit that predicts it)"), {}


def te(rec, i):
    if "cu_seqlens" in i:
        cu = _data(i["cu_seqlens"])
        lengths = [b - a for a, b in zip(cu, cu[1:])]
        how = "the input's real cu_seqlens (pad_thd_sequences_for_cp adds padding only)"
    else:
        cu = _data(i["cu_seqlens_padded"])
        ids = _data(i["input_ids_padded"])[0]
        # The test's sequences are non-zero ids; its padding is the id 0 at each slot's end.
        lengths = []
        for a, b in zip(cu, cu[1:]):
            slot = ids[a:b]
            n = len(slot)
            while n and slot[n - 1] == 0:
                n -= 1
            lengths.append(n)
        how = ("each slot of the test's padded input up to its trailing pad ids 0 (the test's "
               "sequences, e.g. [1,1] and [2,2,2])")
    return lengths, None, (
        f"{how}; trained null: TE's helpers take labels as opaque per-token values (the unit "
        "tests' labels follow no loss convention)"), {}


def transformers_flatten(rec, i):
    feats = i["features"]
    lengths = [len(f["input_ids"]) for f in feats]
    trained = sum(_trained_after(f.get("labels", f["input_ids"])) for f in feats)
    sep = ""
    if "separator_id" in rec["function"]:
        # Each example's first label is the separator: the previous example's last token is
        # trained to predict it (by design), so every example but the first adds one target.
        trained += len(feats) - 1
        sep = ", plus one separator target per example after the first (separator_id)"
    return lengths, trained, (
        "every feature whole (DataCollatorWithFlattening never truncates): its input_ids length; "
        "trained = labels (the ids when absent) != -100 at positions >= 1 of each example (its "
        f"first label is -100 or the separator){sep}"), {}


_TRL_SEQ = {"bfd_v1.9.0": (6, "truncate"), "bfd_split_v1.9.0": (6, "split")}


def trl(rec, i):
    ex = i["examples"]
    cap, how = _TRL_SEQ.get(rec["case"].split("/")[1], (None, None))
    lengths, trained = [], 0
    for e in ex:
        n = len(e["input_ids"])
        labels = e.get("labels", e["input_ids"])
        if cap and n > cap:
            if how == "truncate":
                pieces = [(0, cap)]
            else:
                pieces = [(a, min(a + cap, n)) for a in range(0, n, cap)]
        else:
            pieces = [(0, n)]
        for a, z in pieces:
            lengths.append(z - a)
            trained += _trained_after(labels[a:z])
    return lengths, trained, (
        "each example a document (with seq_length 6: 'bfd' truncates longer ones, 'bfd_split' cuts "
        "them into fragments, each its own document); trained = labels (the ids when absent) != "
        "-100 at positions >= 1 of each document (a correct collator masks every position-0 "
        "label)"), {}


def unsloth(rec, i):
    ex = i["examples"]
    lengths = [len(e["input_ids"]) for e in ex]
    if "completion_mask" in ex[0]:
        trained = sum(sum(e["completion_mask"][1:]) for e in ex)
        how = "completion tokens at positions >= 1 (completion_only_loss)"
    else:
        trained = sum(n - 1 for n in lengths)
        how = "Σ (length - 1): every token but each document's first (position-0 labels masked)"
    return lengths, trained, (
        f"each example a document, whole (packing or padding-free keep them); trained = {how}"), {}


def xtuner(rec, i):
    if "instances" in i:
        inst = i["instances"]
        return ([len(x["input_ids"]) for x in inst],
                sum(_trained_after(x["labels"]) for x in inst), (
                    "one instance per row, its input_ids length (the EOS = pad id 0 is real); "
                    "trained = labels != -100 at positions >= 1 (HF shift within the row)"), {})
    if "pack" in i:
        pack = i["pack"]
        lengths = [x["num_tokens"] for x in pack]
        lengths[-1] -= 1  # sft_llm_collator shifts over the whole pack: the last id is a label only
        labels = [l for x in pack for l in x["labels"]][1:]
        return lengths, sum(1 for l in labels if l != IGNORE), (
            "the pack's items (num_tokens), the last one less its final id (v1's collator shifts "
            "over the whole pack, input_ids = ids[:-1]); the pad chunks are not real; trained = the "
            "pack's labels[1:] != -100"), {}
    docs, row, chunk = i["documents (input_ids, labels)"], i["row"], 12
    flat = [(k, t) for k, (ids, _) in enumerate(docs) for t in range(len(ids))]
    part = flat[row * chunk:(row + 1) * chunk]
    lengths, trained, prev = [], 0, None
    for pos, (k, t) in enumerate(part):
        if k != prev:
            lengths.append(0)
            prev = k
        lengths[-1] += 1
        if pos >= 1 and docs[k][1][t] != IGNORE:
            trained += 1
    return lengths, trained, (
        f"legacy Packer: the documents concatenated and cut into rows of chunk_size {chunk}; this "
        f"row's segments are the pieces of each document in row {row}; trained = labels != -100 at "
        "row positions >= 1 (HF shift within the row)"), {}


STACKS = {f.__name__: f for f in [areal, automodel, axolotl, bionemo, deepspeed_ulysses, litgpt,
                                  llm_foundry, megatron_bridge, megatron_lm, ms_swift, nanotron,
                                  olmo_core, open_instruct, picotron, roll, skyrl, slime, te,
                                  transformers_flatten, trl, unsloth, xtuner]}

# Where thdcheck's report (`check --json`) differs from a valid record's facts: why (the path is
# the record's `path`; rank records of a group inherit their group's line).
MISMATCH: dict[str, str] = {
    "olmo_core/packed_bos_pad_v2.5.0.safetensors": (
        "thdcheck counts the 5 pad tokens as real: with a BOS configured OLMo-core's doc_lens make "
        "the padding the tail of each row's last document ([8], [5,3], [2,6]), marked only by "
        "label_mask False; the documents are 7,5,3,2,2 = 19 tokens, Σ s² 91, report 24, 138"),
}


def _group_input(path: Path):
    for rank in sorted(path.parent.glob("rank*.json")):
        return json.loads(rank.read_text())["input"]
    raise SystemExit(f"{path}: a CP group without rank records")


def compute(path: Path, rec: dict) -> dict:
    stack = rec["case"].split("/")[0]
    inp = rec.get("input")
    if inp is None:
        inp = _group_input(path)
    lengths, trained, how, extra = STACKS[stack](rec, inp)
    out = {"facts": _facts(lengths, trained), "facts_from": how, "extra": extra}
    if path.name.startswith("rank") or path.name == "cp-group.json":
        out["facts_from"] = ("of the whole reassembled CP group (" + path.parent.name + "): " + how)
    key = rec["path"]
    gkey = str(Path(rec["path"]).parent / "cp-group") if path.name.startswith("rank") else None
    why = MISMATCH.get(key) or (MISMATCH.get(gkey) if gkey else None)
    out["mismatch"] = why
    return out


def updated(path: Path) -> str:
    rec = json.loads(path.read_text())
    got = compute(path, rec)
    new = {}
    for k, v in rec.items():
        if k in ("facts", "facts_from", "facts_mismatch"):
            continue
        if k == "input" and isinstance(v, dict):
            v = {kk: vv for kk, vv in v.items() if kk != "example_lengths (independent)"}
            v.update(got["extra"])
        new[k] = v
        if k == "why":
            new["facts"] = got["facts"]
            new["facts_from"] = got["facts_from"]
            if got["mismatch"]:
                new["facts_mismatch"] = got["mismatch"]
    return json.dumps(new, indent=1) + "\n"


def main(argv: list[str]) -> int:
    stale = []
    for p in sorted(OUT.rglob("*.json")):
        text = updated(p)
        if text != p.read_text():
            stale.append(p)
            if "--check" not in argv:
                p.write_text(text)
    if "--check" in argv and stale:
        print("\n".join(f"stale facts: {p}" for p in stale))
        return 1
    print(f"facts: {len(list(OUT.rglob('*.json')))} records, {len(stale)} "
          f"{'stale' if '--check' in argv else 'rewritten'}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
