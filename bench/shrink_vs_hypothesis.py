"""Fuzzing as sharp as Hypothesis (issue 28): for every planted bug of the example adapters
(`adapters/python/examples/`) and of the real packers whose upstream mirror is here, the time to
a shrunk counterexample and its size, measured three ways on the SAME Python function:

  (a) `thdcheck fuzz TARGET --json --first-failure --seed S FLAGS -- python ADAPTER ARGS`
      (subprocess; the time is the report's `elapsed_s` and this script's wall clock around the
      whole command, Python start-up included);
  (b) the in-process API (`thdcheck.fuzz_packer(fn, seed=S, ...)`, `fuzz_packer_session`,
      `fuzz_collator`, `fuzz_loss`, `fuzz_cp_split`, `fuzz_logger`; the same engine, no
      subprocess; the wall clock of the call, which raises `FuzzFailure` with `.report`);
  (c) a Hypothesis property test of the same invariant, written as a Python team would write it
      (`@given` over `st.lists` / `st.integers`, the capacity drawn, the dp size / pad multiple /
      sequence limit / mode fixed as the CLI flag, plain `assert`s of the invariant), with
      `@seed(S)`, no deadline, no example database, `report_multiple_bugs=False`, the explain
      phase off (so the time is to the shrunk counterexample), health checks off (a loaded
      machine must not fail a run as "too slow"); `max_examples=256`, and when that passes
      `max_examples=2000` (the time is then both runs together, marked `*`). The minimal example
      is the inputs of the test's last call (Hypothesis replays the shrunk example last).

thdcheck runs with its default `--cases 256` (`cases=256` in-process), and when that passes with
`--cases 2000`, as Hypothesis escalates (marked `*` likewise). Each is run over seeds 0..N-1
(default 5) and the medians are printed as a markdown table. Besides the planted bugs listed in
the adapters, the rare ones (`balanced_packer.py unchecked`, `split_packer.py short-tail`: only
where Σ s sits at a multiple of the capacity, or one past it) are rows when the adapter has the
mode.

The real packers (`adapters/python/real/`, upstream read from the mirrors at the commits its
README measured) are rows for their known failures, with that README's flags:

  open_instruct_packer.py e6c3044aa mode=loader drop_last=false, `--fitting-only`: the
      `HFDataLoader` raises `IndexError` on an empty dataset (`_reshard_with_packing`,
      `num_streams = len(lengths[0])`). The Hypothesis test draws the capacity first and only
      lengths that fit it, as `--fitting-only` does;
  megatron_bridge_packer.py 067f987df pipeline=true (first_fit_shuffle), `--first-fit`:
      `create_packing_strategy` raises `ZeroDivisionError` when nothing is left to pack (no
      examples, or all longer than the capacity: `create_hist` skips them). The Hypothesis test
      does not check first fit;
  bionemo_packer.py e40716591 (upstream default `drop_last=True`), `--session --fitting-only`:
      the last partial batch is lost (`packer-conservation`).

The first two fail on the empty request on both sides, as an uncaught upstream exception
(thdcheck's `adapter-error`; the Hypothesis test's falsifying exception): thdcheck draws 0 to
24 examples a request (3 to 5% of the cases are empty at seeds 0-2; none with `--non-empty` or a
profile's `[fuzz] non_empty = true`, which `--profile open_instruct` sets, so these rows run
without a profile), and shrinks the rest (Megatron-Bridge: examples all too long) to it;
Hypothesis's `st.lists` has `min_size=0` and tries the empty list first. Their controls:
open-instruct's `mode=grpo` (`pack_sequences`, same commit), Megatron-Bridge's
`first_fit_shuffle` alone (`pipeline=false`), bionemo's `drop_last=false`.

What "size" is, per kind. Both sides go through the SAME size function, applied to a request in
the protocol's form (`docs/protocol.md`): thdcheck's `failure.request` (`failure.requests` for a
session), and the request the Hypothesis test built from its drawn inputs, so the units are the
same. The medians are taken per component; "smaller" is the side whose median size is no larger
in every component and smaller in one ("neither" names the components where each is smaller):

  packer    n examples, Σ lengths (a pair counts chosen + rejected), max length, capacity C
            (dp size and pad multiple shown, fixed by the flag);
  session   n examples, Σ lengths, pushes, epochs, capacity C;
  collator  n examples, Σ tokens (a DPO pair: chosen + rejected), max_seq_length (0 = none);
  loss      tokens T (the padded pack, all ranks), valid targets V (labels != -100), CP size
            (thdcheck: its first request, at the smallest failing CP size; Hypothesis: the first
            CP size of 1, 2, 4, 8 at which its case fails);
  cp-split  tokens T (the padded pack), sequences, CP size;
  logger    micro-batches, documents (real ones, not a mock segment), stored tokens (one rank's,
            as the request holds them), CP size.

The Hypothesis tests (one per kind, parameterised by the row's flags) check what the row's
thdcheck run checks, as plain asserts: packers: conservation (every index in exactly one
non-padding pack or in `dropped`; pieces `(i, start, end)` tile example i; a refusal only of a
request with an example that cannot fit), capacity (no empty pack, Σ padded lengths <= C on each
row, at most K entries, a declared `oversize` example alone and over C), dealing (with a dp size:
every rank as many packs); sessions: the same over the whole session (every pushed example
emitted once or dropped, nothing pending at finish, no pack over C); collators: DPO offsets (the
concatenated segments, padding-only ones aside, are exactly the chosen then the rejected
documents), the padding mask (1 on the real tokens, 0 on the padding); losses: the row's CP-LOSS
rule (`cp-loss-reduction`: a finite loss equals Σ nll / Σ count of the parts it reports;
`cp-loss-finite`: finite, 0 when nothing is valid; `cp-loss-parts`: the parts add up to the
global Σ nll and count; `tokens-cp`: n_valid_tokens is the global count), over the batch cut in
zigzag at CP 1, 2, 4 and 8 as `thdcheck fuzz loss` sends it; CP splits: each rank's labels are
the targets rolled on the full sequence (and every real token held once); loggers: the step's
counts (tokens real / stored / valid, useful and hardware Σ s²), times the dp size.
Input domains follow thdcheck's where it matters for the size: the mask test draws no example
made only of the pad id 0 (thdcheck never does: that is a mock segment by definition; without
the filter Hypothesis shrinks to `[0]`, one token under thdcheck's `[1, 0]`), the logger test's
mock multiples are thdcheck's 8 and 16 (it draws no `bshd` layout). Otherwise each test draws as
a team would (capacity 1..64 and lengths 1..128 independently, token ids 1..50000, ...).

Run it on a quiet machine (the load average is printed before and after):

    python bench/shrink_vs_hypothesis.py [--seeds N] [--only SUBSTRING] [--controls]
    THDCHECK=path/to/thdcheck THDCHECK_MIRRORS=/work/.mirror python bench/shrink_vs_hypothesis.py

Needs the `thdcheck` package (`pip install ./python`) and `hypothesis`; the real packer rows
need torch (open-instruct's also `datasets`) and their mirrors under THDCHECK_MIRRORS (default
/work/.mirror: open-instruct and OLMo-core, Megatron-Bridge, bionemo-framework and
TransformerEngine), else they are skipped with the reason. `--controls` runs each Hypothesis
test on the correct counterpart of the buggy adapter first (it must pass: the test is not itself
wrong). A row that errors prints the error and the script goes on.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import math
import os
import statistics
import subprocess
import sys
import time
import traceback
from pathlib import Path

import hypothesis
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

import thdcheck

REPO = Path(__file__).resolve().parent.parent
EXAMPLES = REPO / "adapters/python/examples"
REAL = REPO / "adapters/python/real"
BIN = os.environ.get("THDCHECK", str(REPO / "target/release/thdcheck"))
MIRRORS = Path(os.environ.get("THDCHECK_MIRRORS", "/work/.mirror"))
PY = sys.executable
IGNORE = -100

for p in (EXAMPLES, EXAMPLES.parent):
    if str(p) not in sys.path:
        sys.path.insert(0, str(p))


def load(path: Path, args=(), name=None):
    """Import an adapter file as a fresh module, with `sys.argv` as its command line would set it
    (the examples read their bug mode from argv at import); its `__main__` block does not run."""
    saved = sys.argv
    sys.argv = [str(path), *args]
    try:
        name = name or f"bench_{path.stem}_{'_'.join(args)}".replace("=", "_").replace("-", "_")
        spec = importlib.util.spec_from_file_location(name, path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return module
    finally:
        sys.argv = saved


# -- sizes: one function per kind, on a request in the protocol's form -----------------------


def _rows_of(e):
    return [e["len"]] if "len" in e else [e["chosen"], e["rejected"]]


def size_packer(req):
    ex = req["examples"]
    toks = [x for e in ex for x in _rows_of(e)]
    return (len(ex), sum(toks), max(toks, default=0), req["capacity"], req.get("dp_size") or 0)


def show_packer(s, req):
    extra = "".join(f" {k}={req[k]}" for k in ("pad_to_multiple_of", "max_seqs_per_pack") if req.get(k))
    dp = f" dp={s[4]}" if s[4] else ""
    return f"n={s[0]} Σ={s[1]} max={s[2]} C={s[3]}{dp}{extra}"


def size_session(reqs):
    start = next(r for r in reqs if r.get("op") == "start")
    pushes = [r for r in reqs if r.get("op") == "push"]
    ex = [e for r in pushes for e in r["examples"]]
    epochs = len({r["epoch"] for r in pushes} | {r["epoch"] for r in reqs if r.get("op") == "end_epoch"})
    return (len(ex), sum(x for e in ex for x in _rows_of(e)), len(pushes), epochs, start["capacity"])


def show_session(s, req):
    return f"n={s[0]} Σ={s[1]} push={s[2]} ep={s[3]} C={s[4]}"


def size_collator(req):
    ex = req["examples"]
    toks = sum(len(v) for e in ex for k, v in e.items() if k.endswith("input_ids"))
    return (len(ex), toks, req.get("max_seq_length") or 0)


def show_collator(s, req):
    return f"n={s[0]} Σtok={s[1]} msl={s[2]}"


def size_loss(req):
    ranks = req["ranks"]
    labels = [y for r in ranks for y in r["labels"]]
    return (len(labels), sum(1 for y in labels if y != IGNORE), req["cp_size"])


def show_loss(s, req):
    return f"T={s[0]} V={s[1]} cp={s[2]}"


def size_cp_split(req):
    return (len(req["input_ids"]), len(req["cu_seqlens"]) - 1, req["cp_size"])


def show_cp_split(s, req):
    return f"T={s[0]} seqs={s[1]} cp={s[2]}"


def size_logger(req):
    docs = stored = 0
    for mb in req["micro_batches"]:
        stored += sum(len(r) for r in mb["input_ids"])
        if "cu_seq_lens_q" in mb:
            docs += mb.get("num_real_seqs", len(mb["cu_seq_lens_q"]) - 1)
        else:
            docs += len(mb["input_ids"])
    return (len(req["micro_batches"]), docs, stored, req["cp_size"])


def show_logger(s, req):
    return f"mb={s[0]} docs={s[1]} stored={s[2]} cp={s[3]}"


SIZES = {
    "packer": (size_packer, show_packer),
    "session": (size_session, show_session),
    "collator": (size_collator, show_collator),
    "loss": (size_loss, show_loss),
    "cp-split": (size_cp_split, show_cp_split),
    "logger": (size_logger, show_logger),
}


def report_request(kind, report):
    f = report["failure"]
    if kind == "session":
        return f.get("requests") or [f["request"]]
    return f["request"]


# -- Hypothesis tests: one per kind, as a Python team would write them -----------------------

LAST: dict = {}  # the request the test's last call built (the shrunk example, after a failure)


def hyp_settings(max_examples):
    return settings(
        max_examples=max_examples,
        deadline=None,
        database=None,
        derandomize=False,
        report_multiple_bugs=False,
        print_blob=False,
        phases=(Phase.explicit, Phase.reuse, Phase.generate, Phase.target, Phase.shrink),
        suppress_health_check=list(HealthCheck),
    )


def packer_answer(out):
    if not isinstance(out, dict):
        out = {"packs": out[0], "dropped": out[1], **({"oversize": out[2]} if len(out) > 2 else {})}
    return out


def check_packer(lengths, capacity, out, *, pad=1, max_seqs=None, dp_size=None):
    """The invariants of a one-shot packer's answer (indices into `lengths`)."""
    n = len(lengths)
    rows = lambda i: list(lengths[i]) if isinstance(lengths[i], (tuple, list)) else [lengths[i]]  # noqa: E731
    padded = lambda x: -(-x // pad) * pad  # noqa: E731
    fits = lambda i: all(padded(x) <= capacity for x in rows(i))  # noqa: E731
    out = packer_answer(out)
    packs = [list(p) for p in out.get("packs", [])]
    padding = set(out.get("padding", []))
    dropped = list(out.get("dropped", []))
    oversize = set(out.get("oversize", []))
    # conservation: every example in exactly one (non-padding) pack or dropped; pieces tile it
    whole = [0] * n
    pieces = {i: [] for i in range(n)}
    for k, p in enumerate(packs):
        if k in padding:
            continue
        for x in p:
            if isinstance(x, (tuple, list)):
                pieces[x[0]].append((x[1], x[2]))
            else:
                whole[x] += 1
    for i in dropped:
        whole[i] += 1
    for i in range(n):
        if pieces[i]:
            assert whole[i] == 0, f"example {i} both whole and in pieces"
            cover = sorted(pieces[i])
            pos = 0
            for a, b in cover:
                assert a == pos and b > a, f"example {i}'s pieces {cover} do not tile 0..{rows(i)[0]}"
                pos = b
            assert pos == rows(i)[0], f"example {i}'s pieces {cover} do not tile 0..{rows(i)[0]}"
        else:
            assert whole[i] == 1, f"example {i} appears {whole[i]} times"
    # capacity
    for k, p in enumerate(packs):
        assert p, f"pack {k} is empty"
        if len(p) == 1 and not isinstance(p[0], (tuple, list)) and p[0] in oversize:
            assert not fits(p[0]), f"example {p[0]} declared oversize but fits"
            continue
        if max_seqs is not None:
            assert len(p) <= max_seqs, f"pack {k} holds {len(p)} > {max_seqs} sequences"
        loads = None
        for x in p:
            r = [x[2] - x[1]] if isinstance(x, (tuple, list)) else rows(x)
            r = [padded(v) for v in r]
            loads = r if loads is None else [a + b for a, b in zip(loads, r)]
        assert all(v <= capacity for v in loads), f"pack {k} holds {loads} tokens > capacity {capacity}"
    # dealing
    if dp_size:
        ranks = out.get("ranks", [])
        counts = [sum(1 for r in ranks if r == q) for q in range(dp_size)]
        assert len(set(counts)) <= 1, f"packs per rank {counts}"


def hyp_packer(pack, *, pairs=False, pad=None, max_seqs=None, dp_size=None, rejects=(), fitting=False):
    def items(length):
        return st.lists(st.tuples(length, length) if pairs else length, max_size=16)

    def body(capacity, lengths):
        req = {"capacity": capacity, "seed": 0, "examples": [
            {"id": i, "chosen": x[0], "rejected": x[1]} if pairs else {"id": i, "len": x}
            for i, x in enumerate(lengths)]}
        kw = {}
        for key, v in (("pad_to_multiple_of", pad), ("max_seqs_per_pack", max_seqs), ("dp_size", dp_size)):
            if v is not None:
                kw[key] = req[key] = v
        LAST["req"] = req
        try:
            out = pack(list(lengths), capacity, 0, **kw)
        except tuple(rejects):
            m = pad or 1
            assert any(-(-x // m) * m > capacity for e in lengths for x in (e if pairs else [e])), \
                "refused a request that can be packed"
            return
        check_packer(lengths, capacity, out, pad=pad or 1, max_seqs=max_seqs, dp_size=dp_size)

    if fitting:
        # as `--fitting-only`: every (padded) length fits, so the capacity is drawn first
        m = pad or 1

        @st.composite
        def requests(draw):
            capacity = draw(st.integers(m, 64))
            return capacity, draw(items(st.integers(1, capacity // m * m)))

        @given(requests())
        def test(request):
            body(*request)

        return test

    @given(capacity=st.integers(1, 64), lengths=items(st.integers(1, 128)))
    def test(capacity, lengths):
        body(capacity, lengths)

    return test


def hyp_session(start, *, fitting=False, rejects=()):
    @st.composite
    def sessions(draw):
        capacity = draw(st.integers(1, 64))
        length = st.integers(1, capacity) if fitting else st.integers(1, 128)
        epochs = draw(st.lists(st.lists(st.lists(length, max_size=8), max_size=3), min_size=1, max_size=3))
        return capacity, epochs

    @given(sessions())
    def test(session):
        capacity, epochs = session
        reqs = [{"op": "start", "capacity": capacity, "seed": 0}]
        lengths, emitted, dropped = {}, [], []

        def record(out):
            out = {"packs": out} if isinstance(out, list) else packer_answer(out)
            for p in out.get("packs", []):
                assert p, "an empty pack"
                assert sum(lengths[i] for i in p) <= capacity, f"pack {p} over capacity {capacity}"
                emitted.extend(p)
            dropped.extend(out.get("dropped", []))
            return out.get("pending", 0)

        packer = start(capacity, 0)
        for e, pushes in enumerate(epochs):
            for push in pushes:
                ex = []
                for n in push:
                    lengths[len(lengths)] = n
                    ex.append({"id": len(lengths) - 1, "len": n})
                reqs.append({"op": "push", "epoch": e, "examples": ex})
            reqs.append({"op": "end_epoch", "epoch": e})
        reqs.append({"op": "finish"})
        LAST["req"] = reqs
        for r in reqs[1:]:
            if r["op"] == "push":
                try:
                    record(packer.push(r["examples"]))
                except tuple(rejects):
                    assert any(x["len"] > capacity for x in r["examples"]), "refused a push that fits"
                    return
            elif r["op"] == "end_epoch":
                record(packer.end_epoch() if hasattr(packer, "end_epoch") else [])
            else:
                assert not record(packer.finish()), "examples left pending at finish"
        out = emitted + dropped
        assert len(out) == len(set(out)), f"an example emitted twice: {out}"
        lost = sorted(set(lengths) - set(out))
        assert not lost, f"examples {lost} never emitted nor dropped"
        for i in dropped:
            assert lengths[i] > capacity, f"example {i} dropped though it fits"

    return test


def collator_max_len(examples, extra, dpo):
    if extra is None:
        return None
    if dpo:
        need = max(sum(len(e["chosen_input_ids"]) for e in examples), sum(len(e["rejected_input_ids"]) for e in examples))
    else:
        need = sum(len(e["input_ids"]) for e in examples)
    return need + extra


def hyp_collator(collate, *, dpo=False, check="dpo-offsets"):
    tokens = st.lists(st.integers(0 if check == "mask" else 1, 50000), min_size=1, max_size=8)
    if check == "mask":
        # thdcheck's domain: an example is never made only of the pad id (a mock segment)
        tokens = tokens.filter(any)
    if dpo:
        example = st.fixed_dictionaries({"chosen_input_ids": tokens, "rejected_input_ids": tokens})
    else:
        example = st.fixed_dictionaries({"input_ids": tokens})

    @given(examples=st.lists(example, min_size=1, max_size=4), extra=st.none() | st.integers(0, 8))
    def test(examples, extra):
        examples = [dict(e, index=i) if dpo else e for i, e in enumerate(examples)]
        m = collator_max_len(examples, extra, dpo)
        LAST["req"] = {"mode": "dpo" if dpo else "sft", "max_seq_length": m, "examples": examples}
        batch = collate(examples, m)
        if check == "dpo-offsets":
            cu = list(batch["concatenated_cu_seq_lens_q"])
            ids = list(batch["concatenated_input_ids"][0])
            segments = [ids[a:b] for a, b in zip(cu, cu[1:])]
            docs = [e["chosen_input_ids"] for e in examples] + [e["rejected_input_ids"] for e in examples]
            real = [s for s in segments if any(t != 0 for t in s)]  # pad id 0; padding-only segments aside
            assert real == docs, f"segments {segments} are not the documents {docs}"
        elif check == "mask":
            total = sum(len(e["input_ids"]) for e in examples)
            width = len(batch["input_ids"][0])
            if "attention_mask" in batch:
                assert list(batch["attention_mask"][0]) == [1] * total + [0] * (width - total), "mask"

    return test


def zigzag_ranks(logits, labels, slots, cp):
    """Every rank's shard of the packed batch: chunks r and 2cp-1-r of every slot."""
    ranks = [{"cp_rank": r, "labels": [], "logits": []} for r in range(cp)]
    for a, b in slots:
        h = (b - a) // (2 * cp)
        for r in range(cp):
            for c in (r, 2 * cp - 1 - r):
                ranks[r]["labels"] += labels[a + c * h: a + (c + 1) * h]
                ranks[r]["logits"] += logits[a + c * h: a + (c + 1) * h]
    return ranks


def nll_of(row, y):
    top = max(row)
    return top + math.log(sum(math.exp(x - top) for x in row)) - row[y]


def close(a, b, rtol=1e-9):
    return abs(a - b) <= rtol * max(abs(a), abs(b), 1e-300) or abs(a - b) < 1e-12


def hyp_loss(loss, *, check):
    @st.composite
    def batches(draw):
        vocab = draw(st.integers(2, 8))
        segments = draw(st.lists(st.lists(st.one_of(st.just(IGNORE), st.integers(0, vocab - 1)), max_size=12),
                                 min_size=1, max_size=4))
        logit = st.integers(-300, 299).map(lambda v: v / 100)
        logits = [[draw(st.lists(logit, min_size=vocab, max_size=vocab)) for _ in seg] for seg in segments]
        return vocab, segments, logits

    @given(batches())
    def test(batch):
        vocab, segments, seg_logits = batch
        for cp in (1, 2, 4, 8):
            labels, logits, slots = [], [], []
            for seg, lg in zip(segments, seg_logits):
                rolled = seg[1:] + [IGNORE] if seg else []  # token j predicts the label of token j+1
                pad = -len(seg) % (2 * cp)
                slots.append((len(labels), len(labels) + len(seg) + pad))
                labels += rolled + [IGNORE] * pad
                logits += lg + [[0.0] * vocab] * pad
            valid = [(row, y) for row, y in zip(logits, labels) if y != IGNORE]
            g_nll, g_count = sum(nll_of(r, y) for r, y in valid), len(valid)
            ranks = zigzag_ranks(logits, labels, slots, cp)
            LAST["req"] = {"cp_size": cp, "vocab": vocab, "ranks": ranks}
            out = loss([dict(r) for r in ranks], cp)
            out = out if isinstance(out, dict) else {"loss": out}
            value = float(out["loss"])
            parts = out.get("parts")
            if check == "cp-loss-finite":
                assert math.isfinite(value), f"loss {value} at cp {cp}"
                assert g_count or value == 0, f"loss {value} with nothing valid"
            elif check == "cp-loss-reduction":
                if math.isfinite(value):
                    n = sum(p[0] for p in parts) if parts else g_nll
                    c = sum(p[1] for p in parts) if parts else g_count
                    if c:
                        assert close(value, n / c), f"loss {value} != Σnll/Σcount {n / c} at cp {cp}"
            elif check == "cp-loss-parts":
                if parts is not None:
                    assert sum(p[1] for p in parts) == g_count, f"counts {[p[1] for p in parts]} != {g_count}"
                    assert close(sum(p[0] for p in parts), g_nll), "Σ nll of the parts"
            elif check == "tokens-cp":
                if out.get("n_valid_tokens") is not None:
                    assert out["n_valid_tokens"] == g_count, f"n_valid_tokens {out['n_valid_tokens']} != {g_count}"

    return test


def hyp_cp_split(split):
    @given(lengths=st.lists(st.integers(1, 12), min_size=1, max_size=4), cp=st.sampled_from([1, 2, 4, 8]),
           data=st.data())
    def test(lengths, cp, data):
        ids, labels, pos, cu, cup = [], [], [], [0], [0]
        for n in lengths:
            slot = n + (-n % (2 * cp))
            for j in range(slot):
                t = 1000 + len(ids)
                ids.append(t)
                ignored = j < n and data.draw(st.booleans())
                labels.append(t if j < n and not ignored else IGNORE)
                pos.append(j)
            cu.append(cu[-1] + n)
            cup.append(cup[-1] + slot)
        req = {"cp_size": cp, "input_ids": ids, "labels": labels, "position_ids": pos,
               "cu_seqlens": cu, "cu_seqlens_padded": cup}
        LAST["req"] = req
        # the targets rolled on the full sequence: token g predicts the label of g + 1 in its sequence
        target = [IGNORE] * len(ids)
        for i in range(len(lengths)):
            a, n = cup[i], cu[i + 1] - cu[i]
            for j in range(n - 1):
                target[a + j] = labels[a + j + 1]
        real = {cup[i] + j for i in range(len(lengths)) for j in range(cu[i + 1] - cu[i])}
        out = split({k: list(v) for k, v in req.items() if k != "cp_size"}, cp)
        held = []
        for r, rank in enumerate(out):
            for k, t in enumerate(rank["input_ids"]):
                g = t - 1000
                held.append(g)
                assert rank["labels"][k] == target[g], (
                    f"rank {r} token {g}: label {rank['labels'][k]}, expected {target[g]}")
        assert sorted(g for g in held if g in real) == sorted(real), "a real token lost or duplicated"

    return test


LOGGER_MODEL = {"attention_output_gate": False, "causal": "half", "ffn": 160, "head_dim": 16, "heads": 4,
                "hidden": 64, "kv_heads": 2, "layers": 2, "mlp_projections": 3, "padded_vocab": 128, "vocab": 100}


def hyp_logger(log):
    @st.composite
    def steps(draw):
        cp = draw(st.sampled_from([1, 2, 4]))
        dp = draw(st.sampled_from([1, 2]))
        layout = "cp_pad" if cp > 1 else draw(st.sampled_from(["flat", "mock_pad", "cp_pad"]))
        m = draw(st.sampled_from([8, 16])) if layout == "mock_pad" else None  # thdcheck's multiples
        doc = st.lists(st.integers(1, 99), min_size=1, max_size=24)
        mbs = draw(st.lists(st.lists(doc, min_size=1, max_size=4), min_size=1, max_size=3))
        return cp, dp, layout, m, mbs

    @given(steps())
    def test(step):
        cp, dp, layout, m, mbs = step
        batches, want = [], dict.fromkeys(["real", "stored", "valid", "useful", "hardware"], 0)
        for docs in mbs:
            ids, labels, cu, cup, slots = [], [], [0], [0], []
            for d in docs:
                pad = -len(d) % (2 * cp) if layout == "cp_pad" else 0
                ids += d + [0] * pad
                labels += [IGNORE] + d[1:] + [IGNORE] * pad
                cu.append(cu[-1] + len(d))
                cup.append(cup[-1] + len(d) + pad)
                slots.append(len(d) + pad)
            mb = {"input_ids": [ids], "labels": [labels]}
            if layout == "mock_pad" and len(ids) % m:
                mock = -len(ids) % m
                ids += [0] * mock
                labels += [IGNORE] * mock
                slots.append(mock)
                mb.update(cu_seq_lens_q=cu + [len(ids)], cu_seq_lens_k=cu + [len(ids)], num_real_seqs=len(docs))
            else:
                mb.update(cu_seq_lens_q=cu, cu_seq_lens_k=list(cu))
            if layout == "cp_pad":
                mb.update(cu_seq_lens_q_padded=cup, cu_seq_lens_k_padded=list(cup))
            batches.append(mb)
            want["real"] += sum(len(d) for d in docs)
            want["stored"] += len(ids)
            want["valid"] += sum(1 for y in labels[1:] if y != IGNORE)
            want["useful"] += sum(len(d) ** 2 for d in docs)
            want["hardware"] += sum(s * s for s in slots)
        req = {"model": dict(LOGGER_MODEL), "formula": "megatron_lm", "hardware_view": "varlen", "cp_size": cp,
               "dp_size": dp, "num_gpus": cp * dp, "step_time_s": 0.5, "peak_tflops_per_gpu": 989.0,
               "layout": layout if m is None else {"mock_pad": m}, "micro_batches": batches}
        LAST["req"] = req
        got = log(json.loads(json.dumps(req)))
        assert got["tokens.real"] == want["real"] * dp, "tokens.real"
        assert got["tokens.stored"] == want["stored"] * dp, "tokens.stored"
        assert got["tokens.valid"] == want["valid"] * dp, "tokens.valid"
        assert got["attention.useful_sum_squares"] == want["useful"] * dp, "attention.useful_sum_squares"
        assert got["attention.hardware_sum_squares"] == want["hardware"] * dp, "attention.hardware_sum_squares"

    return test


# -- the rows ------------------------------------------------------------------------------


class Row:
    """One planted bug: how the CLI runs it, the in-process call, the Hypothesis test."""

    def __init__(self, name, kind, target, flags, adapter, args, inproc, hyp, env=None, seeds=None, control=None):
        self.name, self.kind, self.target, self.flags = name, kind, target, flags
        self.adapter, self.args, self.env, self.seeds = adapter, args, env, seeds
        self.inproc = inproc  # (seed, cases) -> report dict
        self.hyp = hyp  # () -> a fresh Hypothesis test of the buggy function
        self.control = control  # () -> the same test of the correct counterpart, or None


def fuzz_report(fn, *args, **kw):
    try:
        return fn(*args, **kw).report
    except thdcheck.FuzzFailure as e:
        return e.report


def ex(name):
    return EXAMPLES / f"{name}.py"


def packer_row(name, args, flags, opts, hyp_kw, control_args=None):
    mod = load(ex(name), args)
    good = load(ex(name), control_args) if control_args is not None else None
    label = name + (" " + " ".join(args) if args else "") + (" " + " ".join(flags) if flags else "")
    rejects = (ValueError,) if name == "budget_packer" else ()
    return Row(
        label, "packer", "packer", flags, ex(name), args,
        lambda s, c: fuzz_report(thdcheck.fuzz_packer, mod.pack, seed=s, cases=c, rejects=rejects, **opts),
        lambda: hyp_packer(mod.pack, rejects=rejects, **hyp_kw),
        control=(lambda: hyp_packer(good.pack, rejects=rejects, **hyp_kw)) if good else None,
    )


LOSS_RULES = ("cp-loss-parts", "cp-loss-finite", "cp-loss-reduction", "tokens-cp")


def loss_row(name, check, control="cp_loss"):
    """One CP-LOSS rule of a buggy loss, pinned on both sides: thdcheck ignores the other
    rules (so the class it shrinks is this one), the Hypothesis test asserts only this one."""
    mod = load(ex(name))
    good = load(ex(control))
    ignore = [r for r in LOSS_RULES if r != check]
    flags = [x for i in ignore for x in ("--ignore", i)]
    return Row(
        f"{name} ({check})", "loss", "loss", flags, ex(name), [],
        lambda s, c: fuzz_report(thdcheck.fuzz_loss, mod.loss, seed=s, cases=c, ignore=list(ignore)),
        lambda: hyp_loss(mod.loss, check=check),
        control=lambda: hyp_loss(good.loss, check=check),
    )


def logger_row(name):
    wrapper = load(ex(name), name=f"bench_{name}")
    lg = wrapper.logger  # the shared `logger` module; each wrapper sets its BUG
    bug = lg.BUG

    def log(request):
        lg.BUG = bug
        return lg.log(request)

    def good(request):
        lg.BUG = None
        return lg.log(request)

    return Row(name, "logger", "logger", [], ex(name), [],
               lambda s, c: fuzz_report(thdcheck.fuzz_logger, log, seed=s, cases=c),
               lambda: hyp_logger(log), control=lambda: hyp_logger(good))


def rows():
    out = []

    def add(make):
        try:
            out.append(make())
        except Exception as e:  # noqa: BLE001
            print(f"row setup failed: {e!r}\n{traceback.format_exc()}")

    add(lambda: packer_row("greedy_packer_drops_overflow", [], [], {}, {}))
    add(lambda: packer_row("padding_batch_packer", ["unmarked"], ["--dp-size", "4"], {"dp_size": 4},
                           {"dp_size": 4}, control_args=[]))
    add(lambda: packer_row("padding_batch_packer", ["uneven"], ["--dp-size", "3"], {"dp_size": 3},
                           {"dp_size": 3}, control_args=[]))
    add(lambda: packer_row("budget_packer", ["real-lengths"], ["--pad-sequences-to-multiple-of", "4"],
                           {"pad_sequences_to_multiple_of": 4}, {"pad": 4}, control_args=[]))
    add(lambda: packer_row("budget_packer", ["no-seq-limit"], ["--max-seqs-per-pack", "2"],
                           {"max_seqs_per_pack": 2}, {"max_seqs": 2}, control_args=[]))
    add(lambda: packer_row("budget_packer", ["chosen-only"], ["--pairs"], {"pairs": True}, {"pairs": True},
                           control_args=[]))
    add(lambda: packer_row("budget_packer", ["refuse-all"], [], {}, {}, control_args=["refuse"]))
    add(lambda: packer_row("oversize_packer", ["undeclared"], [], {}, {}, control_args=[]))
    add(lambda: packer_row("split_packer", ["overlap"], [], {}, {}, control_args=[]))
    # rare bugs (only where Σ s sits at a multiple of the capacity, or one past it), in the
    # adapters that have the mode
    for name, mode in (("balanced_packer", "unchecked"), ("split_packer", "short-tail")):
        if ex(name).exists() and f'"{mode}"' in ex(name).read_text():
            add(lambda name=name, mode=mode: packer_row(name, [mode], [], {}, {}, control_args=[]))
        else:
            print(f"skip {name} {mode}: no such adapter or mode in {ex(name).relative_to(REPO)}")

    def drops_carry():
        mod = load(ex("streaming_packer_drops_carry"))
        good = load(ex("streaming_packer"))
        return Row("streaming_packer_drops_carry --session", "session", "packer", ["--session"],
                   ex("streaming_packer_drops_carry"), [],
                   lambda s, c: fuzz_report(thdcheck.fuzz_packer_session, mod.DropsCarry, seed=s, cases=c),
                   lambda: hyp_session(mod.DropsCarry), control=lambda: hyp_session(good.StreamingPacker))

    add(drops_carry)

    def collator(name, make, dpo, check, flags, opts):
        mod = load(ex(name))
        good = load(ex("flatten_collator"))
        return Row(name + (" --mode dpo" if dpo else ""), "collator", "collator", flags, ex(name), [],
                   lambda s, c: fuzz_report(thdcheck.fuzz_collator, make(mod), seed=s, cases=c, **opts),
                   lambda: hyp_collator(make(mod), dpo=dpo, check=check),
                   control=lambda: hyp_collator(good.collate, dpo=dpo, check=check))

    # the collate functions as the adapters' `__main__` blocks serve them
    add(lambda: collator("dpo_offset_bug_collator",
                         lambda m: lambda e, n: m.collate(e, n, offset=m.real_chosen_length, padding_segment=False),
                         True, "dpo-offsets", ["--mode", "dpo"], {"mode": "dpo"}))
    add(lambda: collator("dpo_spans_padding_collator",
                         lambda m: lambda e, n: m.collate(e, n, padding_segment=False),
                         True, "dpo-offsets", ["--mode", "dpo"], {"mode": "dpo"}))
    add(lambda: collator("mask_from_ids_collator", lambda m: m.collate, False, "mask", [], {}))

    add(lambda: loss_row("cp_loss_mean_of_rank_means", "cp-loss-reduction"))
    add(lambda: loss_row("cp_loss_mean_of_rank_means", "cp-loss-finite"))
    add(lambda: loss_row("cp_loss_rank_local_counts", "tokens-cp"))
    add(lambda: loss_row("cp_loss_three_bugs", "cp-loss-parts"))
    add(lambda: loss_row("cp_loss_three_bugs", "cp-loss-finite"))
    add(lambda: loss_row("cp_loss_three_bugs", "cp-loss-reduction"))

    def cp_split():
        mod = load(ex("cp_split_roll_after_split"))
        good = load(ex("cp_split"))
        return Row("cp_split_roll_after_split", "cp-split", "cp-split", [], ex("cp_split_roll_after_split"), [],
                   lambda s, c: fuzz_report(thdcheck.fuzz_cp_split, mod.split, seed=s, cases=c),
                   lambda: hyp_cp_split(mod.split), control=lambda: hyp_cp_split(good.split))

    add(cp_split)
    for name in ("logger_pack_length_squared", "logger_mock_counted_as_useful", "logger_rank_local_counts"):
        add(lambda name=name: logger_row(name))
    out += real_rows()
    return out


def real_rows():
    """The real packers under adapters/python/real/: those whose mirror is here and that have a
    known failing mode, each at the commit `adapters/python/real/README.md` measured."""
    out = []
    os.environ["THDCHECK_MIRRORS"] = str(MIRRORS)
    if str(REPO / "corpus/real") not in sys.path:
        sys.path.insert(0, str(REPO / "corpus/real"))

    def mirrored(name, repos, bug):
        missing = [r for r in repos if not (MIRRORS / r.replace("/", "+") / "repo").exists()]
        if missing:
            print(f"skip {name}: no mirror of {', '.join(missing)} under {MIRRORS} (its known failure: {bug})")
        return not missing

    # open-instruct's HFDataLoader (mode=loader): IndexError on an empty dataset. The flags of
    # the README's failing row; the Hypothesis test draws fitting lengths (`fitting=True`) as
    # `--fitting-only` does, and its empty list as `st.lists` does by default. Control: GRPO's
    # `pack_sequences` of the same commit (mode=grpo), which takes an empty dataset.
    if mirrored("open_instruct_packer", ("allenai/open-instruct", "allenai/OLMo-core"),
                "mode=loader: IndexError on an empty dataset"):
        try:
            oi = load(REAL / "open_instruct_packer.py", ["e6c3044aa", "mode=loader", "drop_last=false"],
                      name="bench_open_instruct_packer")
            up = oi.Upstream("e6c3044aa")
            up.data_loader  # import now: a broken import is a skipped row, not a row of errors
            loader = oi.make_loader_packer(up, False, 1)
            grpo = oi.make_grpo_packer(up, 1)
            out.append(Row(
                "open_instruct_packer e6c3044aa mode=loader drop_last=false --fitting-only", "packer", "packer",
                ["--fitting-only"], REAL / "open_instruct_packer.py", ["e6c3044aa", "mode=loader", "drop_last=false"],
                lambda s, c: fuzz_report(thdcheck.fuzz_packer, loader, seed=s, cases=c, fitting_only=True),
                lambda: hyp_packer(loader, fitting=True),
                env={"THDCHECK_MIRRORS": str(MIRRORS)},
                control=lambda: hyp_packer(grpo, fitting=True),
            ))
        except Exception as e:  # noqa: BLE001
            print(f"skip open_instruct_packer: setup failed: {e!r}")

    # Megatron-Bridge's offline packer (pipeline=true, first_fit_shuffle): ZeroDivisionError on a
    # dataset with nothing to pack (no examples, or all longer than the capacity). The flags of
    # the README's failing row. Control: the same algorithm alone (pipeline=false).
    if mirrored("megatron_bridge_packer", ("NVIDIA-NeMo/Megatron-Bridge",),
                "pipeline=true: ZeroDivisionError on an empty dataset"):
        try:
            mb = load(REAL / "megatron_bridge_packer.py", ["067f987df", "pipeline=true"],
                      name="bench_megatron_bridge_packer")
            algorithms, offline = mb.load("067f987df", True)
            pipeline = mb.make_pipeline_packer(offline, "first_fit_shuffle", None)
            alone = mb.make_algorithm_packer(algorithms, "first_fit_shuffle")
            out.append(Row(
                "megatron_bridge_packer 067f987df pipeline=true --first-fit", "packer", "packer",
                ["--first-fit"], REAL / "megatron_bridge_packer.py", ["067f987df", "pipeline=true"],
                lambda s, c: fuzz_report(thdcheck.fuzz_packer, pipeline, seed=s, cases=c, first_fit=True),
                lambda: hyp_packer(pipeline),
                env={"THDCHECK_MIRRORS": str(MIRRORS)},
                control=lambda: hyp_packer(alone),
            ))
        except Exception as e:  # noqa: BLE001
            print(f"skip megatron_bridge_packer: setup failed: {e!r}")

    bionemo = ("NVIDIA-BioNeMo/bionemo-framework", "NVIDIA/TransformerEngine")
    missing = [r for r in bionemo if not (MIRRORS / r.replace("/", "+") / "repo").exists()]
    if missing:
        print(f"skip bionemo_packer: no mirror of {', '.join(missing)} under {MIRRORS}")
        return out
    try:
        bp = load(REAL / "bionemo_packer.py", ["e40716591"], name="bench_bionemo_packer")
        import stacks.bionemo as sb

        sb.HEAD = "e40716591"
        # stacks.bionemo installs a stub `datasets` in sys.modules for the collator's import;
        # left there, the real `datasets` of the open-instruct loader row (same process) can no
        # longer pickle its own classes by reference (`Dataset.from_dict` ends in RecursionError)
        saved = {k: sys.modules[k] for k in ("datasets",) if k in sys.modules}
        try:
            mod = bp._load(bp.recipe_collator("llama3_native_te"))
        finally:
            sys.modules.update(saved)

        def start(drop_last):
            return lambda capacity, seed, **_: bp.Session(mod, capacity, seed, None, False, drop_last)

        out.append(Row(
            "bionemo_packer e40716591 (drop_last=True) --session --fitting-only", "session", "packer",
            ["--session", "--fitting-only"], REAL / "bionemo_packer.py", ["e40716591"],
            lambda s, c: fuzz_report(thdcheck.fuzz_packer_session, start(True), seed=s, cases=c, rejects=(ValueError,),
                                  fitting_only=True),
            lambda: hyp_session(start(True), fitting=True, rejects=(ValueError,)),
            env={"THDCHECK_MIRRORS": str(MIRRORS)},
            control=lambda: hyp_session(start(False), fitting=True, rejects=(ValueError,)),
        ))
    except Exception as e:  # noqa: BLE001
        print(f"skip bionemo_packer: setup failed: {e!r}")
    return out


# -- running ---------------------------------------------------------------------------------


def run_cli(row, seed, cases=256):
    cmd = [BIN, "fuzz", row.target, "--json", "--first-failure", "--seed", str(seed), "--cases", str(cases),
           *row.flags, "--",
           PY, str(row.adapter), *row.args]
    env = dict(os.environ, **(row.env or {}))
    t0 = time.perf_counter()
    p = subprocess.run(cmd, capture_output=True, text=True, cwd=REPO, env=env, timeout=300)
    wall = time.perf_counter() - t0
    if p.returncode not in (0, 1):
        raise RuntimeError(f"exit {p.returncode}: {p.stderr[-800:]}")
    report = json.loads(p.stdout)
    return report, wall


def run_hyp(row, seed, make=None):
    """Returns (found, seconds, request of the minimal example, note, max_examples used)."""
    total = 0.0
    for max_examples in (256, 2000):
        test = (make or row.hyp)()
        test = hypothesis.seed(seed)(hyp_settings(max_examples)(test))
        LAST.clear()
        t0 = time.perf_counter()
        try:
            test()
        except Exception as e:  # noqa: BLE001: the falsifying example's exception
            total += time.perf_counter() - t0
            return True, total, LAST.get("req"), f"{type(e).__name__}: {str(e).splitlines()[0][:100]}", max_examples
        total += time.perf_counter() - t0
    return False, total, None, "passed", 2000


def med(xs):
    xs = [x for x in xs if x is not None]
    return statistics.median(xs) if xs else None


def med_size(sizes):
    sizes = [s for s in sizes if s is not None]
    if not sizes:
        return None
    return tuple(statistics.median_low([s[k] for s in sizes]) for k in range(len(sizes[0])))


COMPONENTS = {
    "packer": ("n", "Σ", "max", "C", "dp"),
    "session": ("n", "Σ", "push", "ep", "C"),
    "collator": ("n", "Σtok", "msl"),
    "loss": ("T", "V", "cp"),
    "cp-split": ("T", "seqs", "cp"),
    "logger": ("mb", "docs", "stored", "cp"),
}


def smaller(t, h, names):
    """Which size is smaller: the one <= in every component (and not equal)."""
    if t is None or h is None:
        return "—"
    if t == h:
        return "same"
    if all(a <= b for a, b in zip(t, h)):
        return "thdcheck"
    if all(b <= a for a, b in zip(t, h)):
        return "Hypothesis"
    return "neither (" + ", ".join(
        f"{k}: {'thdcheck' if a < b else 'Hypothesis'}" for k, a, b in zip(names, t, h) if a != b) + ")"


def fmt_s(x, star=False):
    return "—" if x is None else f"{x:.3f}{'*' if star else ''}"


def measure(row, seeds):
    size_fn, show = SIZES[row.kind]
    res = {"cli": [], "cli_wall": [], "inproc": [], "hyp": [], "t_size": [], "i_size": [], "h_size": [],
           "t_show": None, "h_show": None, "errors": [], "hyp_2000": False, "hyp_missed": 0, "t_missed": 0, "t_2000": False, "i_missed": 0}
    n = min(seeds, row.seeds or seeds)
    for s in range(n):
        try:  # --cases 256, then 2000 when 256 pass (as the Hypothesis side escalates)
            elapsed = wall = 0.0
            for cases in (256, 2000):
                report, w = run_cli(row, s, cases)
                elapsed, wall = elapsed + report["elapsed_s"], wall + w
                if report["result"] == "fail":
                    break
            if report["result"] == "fail":
                req = report_request(row.kind, report)
                res["t_size"].append(size_fn(req))
                res["t_show"] = res["t_show"] or (req, report["failure"].get("checks") or report["failure"]["kind"])
                res["cli"].append(elapsed)
                res["cli_wall"].append(wall)
                res["t_2000"] |= cases == 2000
            else:
                res["t_missed"] += 1
        except Exception as e:  # noqa: BLE001
            res["errors"].append(f"cli seed {s}: {e!r}")
        try:
            dt = 0.0
            for cases in (256, 2000):
                t0 = time.perf_counter()
                report = row.inproc(s, cases)
                dt += time.perf_counter() - t0
                if report["result"] == "fail":
                    break
            if report["result"] == "fail":
                res["inproc"].append(dt)
                res["i_size"].append(size_fn(report_request(row.kind, report)))
            else:
                res["i_missed"] += 1
        except Exception as e:  # noqa: BLE001
            res["errors"].append(f"in-process seed {s}: {e!r}")
        try:
            found, dt, req, note, mx = run_hyp(row, s)
            if found and req is not None:
                res["hyp"].append(dt)
                res["h_size"].append(size_fn(req))
                res["h_show"] = res["h_show"] or (req, note)
                res["hyp_2000"] |= mx == 2000
            else:
                res["hyp_missed"] += 1
        except Exception as e:  # noqa: BLE001
            res["errors"].append(f"hypothesis seed {s}: {e!r}\n{traceback.format_exc()[-600:]}")
    res["n"] = n
    return res


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, default=5)
    ap.add_argument("--only", default=None, help="run the rows whose name contains this")
    ap.add_argument("--controls", action="store_true", help="first run each Hypothesis test on the correct adapter")
    a = ap.parse_args()
    t_start = time.perf_counter()
    print(f"load average before: {os.getloadavg()}")
    print(f"thdcheck binary: {BIN}; python {sys.version.split()[0]}; hypothesis {hypothesis.__version__}; "
          f"{os.cpu_count()} CPUs")
    all_rows = [r for r in rows() if a.only is None or a.only in r.name]
    if a.controls:
        print("\nControls (each Hypothesis test on the correct counterpart, 256 examples, seed 0):")
        for row in all_rows:
            if row.control is None:
                continue
            try:
                test = hypothesis.seed(0)(hyp_settings(256)(row.control()))
                t0 = time.perf_counter()
                test()
                print(f"  ok    {row.name}: passes ({time.perf_counter() - t0:.2f} s)")
            except Exception as e:  # noqa: BLE001
                print(f"  FAIL  {row.name}: the test fails the correct adapter: {type(e).__name__}: {e}"[:400])
    results = []
    for row in all_rows:
        t0 = time.perf_counter()
        try:
            res = measure(row, a.seeds)
        except Exception as e:  # noqa: BLE001
            print(f"\n## {row.name}: ERROR {e!r}\n{traceback.format_exc()}")
            continue
        size_fn, show = SIZES[row.kind]
        print(f"\n## {row.name}  ({row.kind}; {res['n']} seeds; {time.perf_counter() - t0:.1f} s)")
        print(f"   cli: thdcheck fuzz {row.target} --json --first-failure --seed S {' '.join(row.flags)} -- "
              f"python {row.adapter.relative_to(REPO)} {' '.join(row.args)}")
        if res["t_show"]:
            req, checks = res["t_show"]
            print(f"   thdcheck  seed 0 shrunk ({checks}): {json.dumps(req)[:400]}")
        print(f"   thdcheck  sizes per seed: {[show(s, {}) for s in res['t_size']]}"
              + (f"; {res['t_missed']} seeds found nothing in 256 + 2000 cases" if res["t_missed"] else ""))
        if res["i_size"] != res["t_size"]:
            print(f"   in-proc   sizes per seed: {[show(s, {}) for s in res['i_size']]}")
        if res["h_show"]:
            req, note = res["h_show"]
            print(f"   hypothesis seed 0 shrunk ({note}): {json.dumps(req)[:400]}")
        print(f"   hypothesis sizes per seed: {[show(s, {}) for s in res['h_size']]}"
              + (f"; {res['hyp_missed']} seeds found nothing in 256 + 2000 examples" if res["hyp_missed"] else ""))
        for e in res["errors"]:
            print(f"   ERROR {e}")
        results.append((row, res))

    print("\n| bug | thdcheck CLI median s (elapsed_s / wall) | thdcheck in-process median s | Hypothesis median s "
          "| thdcheck shrunk size | Hypothesis shrunk size | which is smaller |")
    print("|---|---|---|---|---|---|---|")
    for row, res in results:
        size_fn, show = SIZES[row.kind]
        t, h = med_size(res["t_size"]), med_size(res["h_size"])
        extra_req = res["t_show"][0] if res["t_show"] and isinstance(res["t_show"][0], dict) else {}
        h_req = res["h_show"][0] if res["h_show"] and isinstance(res["h_show"][0], dict) else {}
        which = smaller(t, h, COMPONENTS[row.kind])
        cli = f"{fmt_s(med(res['cli']), res['t_2000'])} / {fmt_s(med(res['cli_wall']), res['t_2000'])}"
        if res["t_missed"]:
            cli += f" ({res['t_missed']}/{res['n']} not found)"
        inproc = fmt_s(med(res["inproc"])) + (f" ({res['i_missed']}/{res['n']} not found)" if res["i_missed"] else "")
        hyp_t = fmt_s(med(res["hyp"]), res["hyp_2000"])
        if res["hyp_missed"]:
            hyp_t += f" ({res['hyp_missed']}/{res['n']} not found)"
        name = row.name + ("" if res["n"] == a.seeds else f" ({res['n']} seeds)")
        print(f"| {name} | {cli} | {inproc} | {hyp_t} | "
              f"{'—' if t is None else show(t, extra_req)} | {'—' if h is None else show(h, h_req)} | {which} |")
    print("\nSizes: medians per component over the seeds (median_low). Smaller: the side whose size is <= in "
          "every component and < in one; `neither` when each is smaller in some component. `*`: found only at "
          "max_examples=2000 (Hypothesis) / --cases 2000 (thdcheck) on some seed, after 256 passed (the time "
          "then includes the 256 attempt).")
    print(f"load average after: {os.getloadavg()}; total {time.perf_counter() - t_start:.0f} s")


if __name__ == "__main__":
    main()
