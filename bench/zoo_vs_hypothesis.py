"""Shrinking as sharp as Hypothesis on the bug zoo (issue 28): for every planted Rust bug of the
zoo (`properties/src/zoo/mod.rs`, `zoo_variants!`: 41 variants), the time to a shrunk
counterexample and its size, thdcheck's search beside a Hypothesis property test of the SAME
invariant on the SAME buggy function:

  (a) thdcheck: `thdcheck._native.zoo_search(name, seed, 256)`: the variant's proptest strategy
      drawn by the seeded runner (`selfcheck::seeded_runner(seed, cases)`), shrunk by proptest
      and minimized one step at a time (`minimal::minimize`), exactly as the zoo's test and
      `thdcheck selfcheck` run it (`selfcheck::zoo_variant`); when 256 cases pass, again with
      2000 (the time is then both runs together, marked `*`). The time is this script's wall
      clock around the call (the GIL is released; `elapsed_s`, measured inside, is in --json).
  (b) Hypothesis: one `@given` test per variant, over a strategy per case type written as a
      Python team would write it (`st.fixed_dictionaries`, `st.lists`, `st.integers`,
      `st.sampled_from`; see STRATEGIES for the domains), whose body serializes the case and
      asserts `_native.zoo_judge(name, case_json) is None`: the variant's own driver in
      `properties` (the same closure `zoo_variant` runs: the same buggy function, the same
      invariant check), so both sides judge alike and only the search and the shrinking differ.
      Settings as in bench/shrink_vs_hypothesis.py (imported from there): `@seed(S)`, no
      deadline, no example database, `report_multiple_bugs=False`, the explain phase off, health
      checks off; `max_examples=256`, then 2000 when that passes (marked `*`). The shrunk example
      is the test's last call's input (Hypothesis replays the minimal example last); the time is
      the wall clock of the test call(s).
  (c) Size: `_native.zoo_size(name, case_json)` on both counterexamples: one function per case
      type (`properties::zoo::json::CaseSize`), a few named components (documents, Σ tokens,
      the longest, the padding `thd` adds, CP size, capacity, ...). Medians per component over
      the seeds: the lower middle of the seeds' size tuples in lexicographic order (a size some
      seed produced); "smaller" is the side whose median is <= in every component and < in
      one; "neither" names where each is smaller (helpers of shrink_vs_hypothesis.py); and per
      seed, how often Hypothesis's counterexample of the same rule is smaller.

Each side runs over seeds 0..N-1 (default 5). The found-rate is the seeds where a failure was
found (within 256 + 2000 cases / examples).

Domains. Each Hypothesis strategy draws the domain of the proptest strategy (same bounds, same
structure, same dependent fields), read from `properties/src/strategies/`; what differs is the
distribution (how often each value comes), never which cases can occur:
  - sequence lengths (`arb_seq_lens`): proptest mixes four shapes (arbitrary, 0/1-token, all
    equal, one huge among tiny), each a subset of "1..=max_segments lengths in min..=max";
    Hypothesis draws that set directly with `st.lists(st.integers(min, max), 1, max_segments)`;
  - weighted choices (`prop_oneof![3 => .., 1 => ..]`, `bool::weighted(p)`) are unweighted
    `st.one_of` / `st.booleans()` / `st.sampled_from`;
  - `prop_map` clamps (packer streams: a length drawn in 0..=96 then `min(capacity)`; arb_flops'
    `seq_len = max(longest packed row + extra, 1)`; DPO's budget `longest branch + extra`)
    are drawn as the clamped domain directly (lengths in 0..=max_len after the capacity) or
    computed the same way from the drawn parts;
  - seeds of token ids / logits / q, k, v (`seed in 0..1000`) and the vocabulary (2..=5) are drawn
    alike (they are not part of the size).

Controls (`--controls`, run first): each variant's Hypothesis test with the variant's correct
counterpart in the same driver (`_native.zoo_judge_reference`: `thd`'s subject, the plain
contiguous split for the contiguous CP split, the built-in sequential-budget or best-fit packer
under the same claims for the zoo packers), `--control-examples` examples (default 256) at seed
0: it must pass, or the test (or the strategy's domain) is wrong. Every case it draws is also
deserialized and run by the driver (a case the JSON or the driver refuses fails the control), so
it validates the strategy too.

Run it on a quiet machine (the load average is printed before and after):

    python bench/zoo_vs_hypothesis.py [--seeds N] [--only SUBSTRING] [--json OUT] [--controls]

Needs the `thdcheck` package built with the zoo (`pip install ./python`) and `hypothesis`.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import traceback
from pathlib import Path

import hypothesis
from hypothesis import given
from hypothesis import strategies as st

from thdcheck import _native

sys.path.insert(0, str(Path(__file__).resolve().parent))
from shrink_vs_hypothesis import fmt_s, hyp_settings, med, smaller  # noqa: E402

# -- Hypothesis strategies, one per case type (the JSON of the Rust case types) ---------------

CP = st.sampled_from([1, 2, 4, 8])


def seq_lens(min_len, max_len, max_segments):
    """`arb_seq_lens`: 1..=max_segments lengths in min_len..=max_len."""
    return st.lists(st.integers(min_len, max_len), min_size=1, max_size=max_segments)


# `arb_label_mask`: none, a prompt of 0..=8 tokens, a pattern of 1..=8 flags, all.
LABEL_MASK = st.one_of(
    st.just("None"),
    st.integers(0, 8).map(lambda k: {"Prompt": k}),
    st.lists(st.booleans(), min_size=1, max_size=8).map(lambda p: {"Pattern": p}),
    st.just("All"),
)

# `arb_sft_case(Sizes::SMALL)`: 1..=6 examples of 1..=24 tokens, vocab 2..=5, seed 0..1000.
SFT = st.fixed_dictionaries({
    "lens": seq_lens(1, 24, 6),
    "mask": LABEL_MASK,
    "vocab": st.integers(2, 5),
    "seed": st.integers(0, 999),
})

MULTIPLE = st.sampled_from([1, 2, 3, 8, 16])
# `arb_padding`.
PADDING = st.one_of(
    st.just("None"),
    st.integers(0, 8).map(lambda e: {"Static": {"extra": e}}),
    st.tuples(MULTIPLE, st.none() | st.integers(1, 4)).map(
        lambda t: {"Mock": {"multiple_of": t[0], "max_mock_len": t[1]}}),
    CP.map(lambda cp: {"Cp": {"cp": cp}}),
    st.tuples(MULTIPLE, CP).map(lambda t: {"CpThenMock": {"cp": t[1], "multiple_of": t[0]}}),
)

# `arb_collate_case`: position base 0 or 2 (RoBERTa).
COLLATE = st.fixed_dictionaries({"sft": SFT, "padding": PADDING, "position_base": st.sampled_from([0, 2])})

# `arb_cp_loss_case`: a CP split or 1..=6 micro-batches.
CP_LOSS = st.fixed_dictionaries({
    "sft": SFT,
    "split": st.one_of(CP.map(lambda cp: {"Cp": cp}), st.integers(1, 6).map(lambda k: {"MicroBatches": k})),
})


@st.composite
def micro_batch_loss(draw):
    """`arb_micro_batch_loss_case`: 1..=B micro-batches of a batch of B examples."""
    sft = draw(SFT)
    return {"sft": sft, "split": {"MicroBatches": draw(st.integers(1, len(sft["lens"])))}}


# `arb_shard_case`.
SHARD = st.fixed_dictionaries({"sft": SFT, "cp": CP, "pad_first": st.booleans()})

# `arb_mask_case`.
MASK = st.fixed_dictionaries({"bidirectional": st.booleans(), "collate": COLLATE})

# `arb_eos_case`: documents truncated to 2..=8 tokens, one row or rows of 2..=12.
EOS = st.fixed_dictionaries({
    "max_doc_len": st.integers(2, 8),
    "row_width": st.none() | st.integers(2, 12),
    "sft": SFT,
})


@st.composite
def attn(draw):
    """`arb_attn_case`: 1..=4 segments of 0..=12 tokens; plain, padded (0..=3 per segment),
    cross lengths (keys 0..=12 per segment) or CP in {2, 4, 8}; 1..=2 KV heads in groups of
    1..=3, head_dim 1..=6, causal or not."""
    lens = draw(seq_lens(0, 12, 4))
    n = len(lens)
    mode = draw(st.sampled_from(["plain", "padded", "cross", "cp"]))
    kv_heads, group = draw(st.integers(1, 2)), draw(st.integers(1, 3))
    return {
        "lens": lens,
        "lens_k": draw(st.lists(st.integers(0, 12), min_size=n, max_size=n)) if mode == "cross" else None,
        "pad": draw(st.lists(st.integers(0, 3), min_size=n, max_size=n)) if mode == "padded" else [0] * n,
        "cp": draw(st.sampled_from([2, 4, 8])) if mode == "cp" else 1,
        "heads": kv_heads * group,
        "kv_heads": kv_heads,
        "head_dim": draw(st.integers(1, 6)),
        "causal": draw(st.booleans()),
        "seed": draw(st.integers(0, 999)),
    }


@st.composite
def dpo(draw):
    """`arb_dpo_case`: 1..=5 pairs of 1..=16 tokens per branch; a budget of the longest branch
    plus 0..=40, or none."""
    pairs = draw(st.lists(st.tuples(st.integers(1, 16), st.integers(1, 16)), min_size=1, max_size=5))
    extra = draw(st.none() | st.integers(0, 40))
    longest = max(max(c, r) for c, r in pairs)
    return {"pairs": [list(p) for p in pairs], "max_seq_length": None if extra is None else longest + extra}


@st.composite
def work(draw):
    """`arb_work_case`: 1..=6 segments of 0..=64 tokens, padding 0..=7 each (or none), 0..=2
    mock segments of 1..=16, a static tail of 0..=8."""
    lens = draw(seq_lens(0, 64, 6))
    padded = draw(st.booleans())
    pad = draw(st.lists(st.integers(0, 7), min_size=len(lens), max_size=len(lens))) if padded else [0] * len(lens)
    return {
        "lens": lens,
        "pad": pad,
        "mocks": draw(st.lists(st.integers(1, 16), max_size=2)),
        "tail": draw(st.integers(0, 8)),
    }


@st.composite
def model_dims(draw):
    """`arb_model_dims`."""
    kv_heads, group = draw(st.integers(1, 2)), draw(st.integers(1, 4))
    vocab = draw(st.integers(1, 65_536))
    extra = draw(st.none() | st.integers(0, 128))
    return {
        "layers": draw(st.integers(1, 4)),
        "hidden": draw(st.integers(8, 1024)),
        "heads": kv_heads * group,
        "kv_heads": kv_heads,
        "head_dim": draw(st.integers(1, 128)),
        "ffn": draw(st.integers(8, 4096)),
        "mlp_projections": draw(st.sampled_from([2, 3])),
        "vocab": vocab,
        "padded_vocab": None if extra is None else vocab + extra,
        "causal": draw(st.sampled_from(["none", "half", "exact_triangle"])),
        "attention_output_gate": draw(st.booleans()),
    }


# `arb_mfu_case`.
MFU = st.fixed_dictionaries({
    "lens": seq_lens(1, 48, 6),
    "multiple_of": st.sampled_from([1, 2, 8, 16, 64]),
    "max_mock_len": st.none() | st.integers(1, 16),
    "cp": CP,
    "static_extra": st.integers(0, 32),
    "dims": model_dims(),
    "formula": st.sampled_from(["megatron_lm", "bionemo_perf_logger"]),
    "view": st.sampled_from(["varlen", "whole_pack"]),
    "slack": st.integers(0, 8),
})


@st.composite
def flops(draw):
    """`arb_flops_case`: 1..=4 micro-batches of 1..=3 rows, packed (rows of 1..=4 sequences of
    1..=16 tokens) or BSHD; seq_len the longest packed row plus 0..=16 (at least 1)."""
    mbs = draw(st.lists(
        st.tuples(st.booleans(), st.lists(st.lists(st.integers(1, 16), min_size=1, max_size=4), min_size=1, max_size=3)),
        min_size=1, max_size=4))
    extra = draw(st.integers(0, 16))
    longest = max((sum(row) for packed, rows in mbs if packed for row in rows), default=0)
    seq_len = max(longest + extra, 1)
    return {
        "seq_len": seq_len,
        "micro_batches": [{"rows": len(rows), "seq_len": seq_len, "packed": rows if packed else None}
                          for packed, rows in mbs],
    }


def packer_stream(pairs, over_long):
    """`arb_packer_stream`: capacity 1..=64, 0..=24 examples of 0..=C tokens (0..=1.5 C with
    `over_long`), DPO pairs (when `pairs`) or single sequences, batches of 1..=8, 1..=3 epochs,
    a reshuffle seed, shuffled or not."""
    @st.composite
    def draw_stream(draw):
        capacity = draw(st.integers(1, 64))
        max_len = capacity + capacity // 2 if over_long else capacity
        pair = draw(st.booleans()) if pairs else False
        length = st.integers(0, max_len)
        if pair:
            lens = draw(st.lists(st.tuples(length, length), max_size=24))
            dataset = [{"id": i, "chosen": a, "rejected": b} for i, (a, b) in enumerate(lens)]
        else:
            dataset = [{"id": i, "len": a} for i, a in enumerate(draw(st.lists(length, max_size=24)))]
        return {
            "capacity": capacity,
            "dataset": dataset,
            "batch_size": draw(st.integers(1, 8)),
            "epochs": draw(st.integers(1, 3)),
            "seed": draw(st.integers(0, 999)),
            "shuffle": draw(st.booleans()),
        }
    return draw_stream()


# The catalogue's `strategy` (as declared in zoo_variants!) -> the Hypothesis strategy.
STRATEGIES = {
    "arb_collate_case(Sizes::SMALL)": COLLATE,
    "arb_attn_case()": attn(),
    "arb_sft_case(Sizes::SMALL)": SFT,
    "arb_cp_loss_case(Sizes::SMALL)": CP_LOSS,
    "arb_micro_batch_loss_case(Sizes::SMALL)": micro_batch_loss(),
    "arb_shard_case(Sizes::SMALL)": SHARD,
    "arb_tokens_cp_case(Sizes::SMALL)": SFT,
    "arb_work_case()": work(),
    "arb_mfu_case()": MFU,
    "arb_flops_case()": flops(),
    "arb_dpo_case()": dpo(),
    "arb_mask_case(Sizes::SMALL)": MASK,
    "arb_eos_case(Sizes::SMALL)": EOS,
    "arb_packer_stream(PackerStreamParams::FITTING)": packer_stream(pairs=True, over_long=False),
    "arb_packer_stream(PackerStreamParams::OVER_LONG)": packer_stream(pairs=True, over_long=True),
    "arb_packer_stream(PackerStreamParams::SINGLES)": packer_stream(pairs=False, over_long=False),
}


# -- the two sides -------------------------------------------------------------------------------

LAST: dict = {}  # the case JSON of the test's last call (the shrunk example, after a failure)


class InvalidCase(Exception):
    """The judge refused a drawn case (bad JSON, or the driver panicked): a strategy bug."""


def hyp_test(name, strategy, judge=None):
    judge = judge or _native.zoo_judge

    @given(strategy)
    def test(case):
        case_json = json.dumps(case)
        LAST["case"] = case_json
        try:
            violation = judge(name, case_json)
        except ValueError as e:
            raise InvalidCase(f"{case_json}: {e}") from None
        LAST["violation"] = violation
        assert violation is None, violation

    return test


def run_hyp(name, strategy, seed):
    """(found, seconds, case JSON of the minimal example, its violation, max_examples used)."""
    total = 0.0
    for max_examples in (256, 2000):
        test = hypothesis.seed(seed)(hyp_settings(max_examples)(hyp_test(name, strategy)))
        LAST.clear()
        t0 = time.perf_counter()
        try:
            test()
        except InvalidCase:
            raise
        except AssertionError:
            total += time.perf_counter() - t0
            return True, total, LAST.get("case"), LAST.get("violation"), max_examples
        total += time.perf_counter() - t0
    return False, total, None, None, 2000


def run_thdcheck(name, seed):
    """(found, wall seconds, elapsed_s inside, report of the last call, cases asked for)."""
    wall = inner = 0.0
    for cases in (256, 2000):
        t0 = time.perf_counter()
        r = _native.zoo_search(name, seed, cases)
        wall += time.perf_counter() - t0
        inner += r["elapsed_s"]
        if r["failed"]:
            return True, wall, inner, r, cases
    return False, wall, inner, r, 2000


def first_line(text):
    return None if text is None else text.splitlines()[0][:160]


def show_size(size):
    return "—" if size is None else " ".join(f"{k}={v}" for k, v in size.items())


def med_size(sizes):
    """The median counterexample's size: the seeds' size tuples in lexicographic order of the
    components, the lower middle one. A size some seed really produced, where per-component
    medians (shrink_vs_hypothesis.py's) can mix seeds into a case neither side found: [2] on
    three seeds and [1, 1] on two is docs 1 and max 1 component-wise."""
    sizes = sorted(s for s in sizes if s is not None)
    return sizes[(len(sizes) - 1) // 2] if sizes else None


def per_seed(verdicts):
    """`k/n` seeds where Hypothesis's same-rule counterexample is smaller, with the rest named."""
    compared = [v for v in verdicts if v != "other rule"]
    worse = sum(v == "Hypothesis" for v in compared)
    extra = [f"{n} {what}" for what, n in (
        ("incomparable", sum(v.startswith("neither") for v in compared)),
        ("other rule", len(verdicts) - len(compared))) if n]
    return f"{worse}/{len(compared)}" + (f" ({', '.join(extra)})" if extra else "")


def measure(variant, seeds):
    name = variant["name"]
    strategy = STRATEGIES[variant["strategy"]]
    res = {"name": name, "caught_by": variant["caught_by"], "strategy": variant["strategy"], "seeds": seeds,
           "t_time": [], "t_elapsed": [], "t_cases": [], "t_size": [], "t_case": [], "t_violation": [], "t_2000": False,
           "h_time": [], "h_size": [], "h_case": [], "h_violation": [], "h_2000": False, "errors": [],
           "per_seed": []}
    names = None
    for s in range(seeds):
        t_n, h_n = len(res["t_size"]), len(res["h_size"])
        try:
            found, wall, inner, r, cases = run_thdcheck(name, s)
            if found:
                res["t_time"].append(wall)
                res["t_elapsed"].append(inner)
                res["t_cases"].append(r["cases_tried"])
                res["t_size"].append(r["size"])
                res["t_case"].append(r["case_json"])
                res["t_violation"].append(first_line(r["violation"]))
                res["t_2000"] |= cases == 2000
                names = names or list(r["size"])
        except Exception as e:  # noqa: BLE001
            res["errors"].append(f"thdcheck seed {s}: {e!r}")
        try:
            found, dt, case_json, violation, mx = run_hyp(name, strategy, s)
            if found and case_json is not None:
                size = _native.zoo_size(name, case_json)
                res["h_time"].append(dt)
                res["h_size"].append(size)
                res["h_case"].append(case_json)
                res["h_violation"].append(first_line(violation))
                res["h_2000"] |= mx == 2000
                names = names or list(size)
        except Exception as e:  # noqa: BLE001
            res["errors"].append(f"hypothesis seed {s}: {e!r}\n{traceback.format_exc()[-600:]}")
        # The same seed's two counterexamples side by side, when both sides found one.
        if len(res["t_size"]) > t_n and len(res["h_size"]) > h_n:
            t_s, h_s = res["t_size"][-1], res["h_size"][-1]
            if res["h_violation"][-1] != res["t_violation"][-1]:
                res["per_seed"].append("other rule")
            else:
                keys = list(t_s)
                res["per_seed"].append(smaller(tuple(t_s[k] for k in keys), tuple(h_s[k] for k in keys), keys))
    res["components"] = names
    # The violation's first line names the invariant and the rule: both sides should end on the
    # variant's own (thdcheck's minimization keeps it; Hypothesis may slip to another failure).
    res["rule_differs"] = sorted({h for h in res["h_violation"]} - {t for t in res["t_violation"]})
    tup = lambda sizes: [tuple(d[k] for k in names) for d in sizes] if names else []  # noqa: E731
    t, h = med_size(tup(res["t_size"])), med_size(tup(res["h_size"]))
    res["t_median_size"] = None if t is None else dict(zip(names, t))
    res["h_median_size"] = None if h is None else dict(zip(names, h))
    res["smaller"] = smaller(t, h, names or ())
    res["t_median_s"], res["h_median_s"] = med(res["t_time"]), med(res["h_time"])
    return res


def controls(variants, examples):
    """Each variant's Hypothesis test on the correct counterpart: it must pass."""
    print(f"\nControls (each Hypothesis test with the correct counterpart, {examples} examples, seed 0):")
    failed = []
    for v in variants:
        name = v["name"]
        test = hyp_test(name, STRATEGIES[v["strategy"]], judge=_native.zoo_judge_reference)
        test = hypothesis.seed(0)(hyp_settings(examples)(test))
        LAST.clear()
        t0 = time.perf_counter()
        try:
            test()
            print(f"  ok    {name}: passes ({time.perf_counter() - t0:.2f} s)")
        except Exception as e:  # noqa: BLE001
            failed.append(name)
            print(f"  FAIL  {name}: {type(e).__name__}: {str(e)[:300]}; case {LAST.get('case')}")
    return failed


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, default=5)
    ap.add_argument("--only", default=None, help="run the variants whose name contains this")
    ap.add_argument("--json", default=None, help="write every row's results (sizes, cases, times) here")
    ap.add_argument("--controls", action="store_true", help="first run each test on the correct counterpart")
    ap.add_argument("--control-examples", type=int, default=256)
    a = ap.parse_args()
    t_start = time.perf_counter()
    print(f"load average before: {os.getloadavg()}")
    print(f"python {sys.version.split()[0]}; hypothesis {hypothesis.__version__}; {os.cpu_count()} CPUs")
    variants = [dict(v, strategy=v["strategy"].replace(" ", ""))  # stringify! spaces out `::`
                for v in _native.zoo_variants() if a.only is None or a.only in v["name"]]
    missing = sorted({v["strategy"] for v in variants} - set(STRATEGIES))
    if missing:
        sys.exit(f"no Hypothesis strategy for {missing}")
    failed_controls = controls(variants, a.control_examples) if a.controls else []

    results = []
    for v in variants:
        t0 = time.perf_counter()
        res = measure(v, a.seeds)
        results.append(res)
        print(f"\n## {v['name']}  ({v['caught_by']}; {v['strategy']}; {time.perf_counter() - t0:.1f} s)")
        if res["t_case"]:
            print(f"   thdcheck   seed 0 shrunk: {res['t_case'][0][:300]}\n              {res['t_violation'][0]}")
        print(f"   thdcheck   sizes per seed: {[show_size(s) for s in res['t_size']]}; cases tried {res['t_cases']}")
        if res["h_case"]:
            print(f"   hypothesis seed 0 shrunk: {res['h_case'][0][:300]}\n              {res['h_violation'][0]}")
        print(f"   hypothesis sizes per seed: {[show_size(s) for s in res['h_size']]}")
        for rule in res["rule_differs"]:
            print(f"   NOTE Hypothesis ended on a failure thdcheck did not: {rule}")
        for e in res["errors"]:
            print(f"   ERROR {e}")

    print("\n| variant | caught by | thdcheck median s | Hypothesis median s | thdcheck median size "
          "| Hypothesis median size | smaller | per seed: Hypothesis smaller | found (thdcheck / Hypothesis) |")
    print("|---|---|---|---|---|---|---|---|---|")
    for r in results:
        print(f"| {r['name']} | {r['caught_by']} | {fmt_s(r['t_median_s'], r['t_2000'])} | "
              f"{fmt_s(r['h_median_s'], r['h_2000'])} | {show_size(r['t_median_size'])} | "
              f"{show_size(r['h_median_size'])}{' †' if r['rule_differs'] else ''} | {r['smaller']} | "
              f"{per_seed(r['per_seed'])} | {len(r['t_time'])}/{r['seeds']} / {len(r['h_time'])}/{r['seeds']} |")
    print("\nSizes: the median seed's (the lower middle of the seeds' sizes in lexicographic order). Smaller: the side whose size is <= in "
          "every component and < in one; `neither` when each is smaller in some component. `*`: found only at "
          "2000 cases / max_examples on some seed, after 256 passed (the time then includes the 256 attempt). `†`: "
          "Hypothesis ended on a violation (first line) that thdcheck's counterexamples did not show. Per seed: on "
          "how many seeds Hypothesis's counterexample of the same rule was smaller than thdcheck's of the same seed "
          "(<= in every component, < in one), out of the seeds compared; `incomparable` counts seeds where each "
          "side is smaller in some component, `other rule` those where Hypothesis ended on another rule. The "
          "median is one seed's size, so a row can read `same` while some seed differs: this column counts them.")
    worse = [r for r in results if r["smaller"] == "Hypothesis" or r["smaller"].startswith("neither")]
    if worse:
        print("\nWhere Hypothesis's counterexample is smaller in some component (seed 0's of each side):")
        for r in worse:
            print(f"  {r['name']} ({r['smaller']}):\n    thdcheck:   {r['t_case'][0] if r['t_case'] else '—'}"
                  f"\n    Hypothesis: {r['h_case'][0] if r['h_case'] else '—'}")
    t_all, h_all = med([r["t_median_s"] for r in results]), med([r["h_median_s"] for r in results])
    print(f"\nMedian over the variants of the median time: thdcheck {fmt_s(t_all)} s, Hypothesis {fmt_s(h_all)} s")
    if failed_controls:
        print(f"Controls that FAILED: {failed_controls}")
    print(f"load average after: {os.getloadavg()}; total {time.perf_counter() - t_start:.0f} s")
    if a.json:
        Path(a.json).write_text(json.dumps({"results": results, "failed_controls": failed_controls,
                                            "hypothesis": hypothesis.__version__}, indent=1))


if __name__ == "__main__":
    main()
