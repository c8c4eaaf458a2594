"""A Hypothesis stateful test of a streaming packer, in-process: the test a Python team would
write for its own packer, the baseline `bench/packer_session.py` times `thdcheck fuzz packer
--session` against (issue 13). It tests the example packers of `adapters/python/examples/`:
`StreamingPacker` (correct: the open pack is carried across calls and epochs) and `DropsCarry`
(forgets the open pack at `end_epoch`, the open-instruct #1472 bug class).

Rules: `start` a session (an `initialize` rule: capacity 1..=64, seed 0..=3), `push` up to 8
examples, `end_epoch`, `finish`. Most lengths are fractions of the capacity as in `thdcheck fuzz packer` (`⌈C·r/32⌉`,
r in 1..=48, so up to 1.5·C, some over it), so a failure shrinks with capacity and lengths
together. Invariants after every call: no pack over the capacity (nor empty), nothing emitted
twice, nothing emitted that was not pushed. At `finish` (and at teardown for a session left
open): every pushed example emitted exactly once or reported dropped, nothing pending.

    python3 -m venv /tmp/hypenv && /tmp/hypenv/bin/pip install hypothesis   # (pytest for the last line)
    python bench/hypothesis_streaming_packer.py [correct|drops-carry] [MAX_EXAMPLES] [SEED]
    pytest bench/hypothesis_streaming_packer.py     # the correct packer, as a team's own test

Defaults: correct, 3000 examples, seed 0; `stateful_step_count` 20, no deadline, no example
database, a fixed seed (reproducible).
"""

from __future__ import annotations

import importlib.util
import sys
import time
from pathlib import Path

import hypothesis
from hypothesis import note, settings
from hypothesis import strategies as st
from hypothesis.statistics import collector
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    rule,
    run_state_machine_as_test,
)

REPO = Path(__file__).resolve().parent.parent
EXAMPLES = REPO / "adapters/python/examples"
STEPS = 20


def example(name: str):
    """Import an example packer module by path (it imports its siblings and the adapter)."""
    sys.path.insert(0, str(EXAMPLES))
    sys.path.insert(0, str(EXAMPLES.parent))
    spec = importlib.util.spec_from_file_location(name, EXAMPLES / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


PACKERS = {
    "correct": lambda: example("streaming_packer").StreamingPacker,
    "drops-carry": lambda: example("streaming_packer_drops_carry").DropsCarry,
}


def answer(result):
    """A packer method's answer: a list of packs, or a dict with `packs`, `dropped`, `pending`."""
    if isinstance(result, dict):
        return list(result.get("packs", [])), list(result.get("dropped", [])), result.get("pending", 0)
    return list(result or []), [], 0


class PackerSession(RuleBasedStateMachine):
    """One packer class under test (`machine_for`). A test case starts a session, then runs
    `stateful_step_count` calls; `finish` checks the session and starts the next one (same
    capacity and seed), so no rule needs a precondition (a rule disabled by a precondition
    makes Hypothesis discard test cases); teardown finishes the session left open."""

    packer_class = None  # set by machine_for

    def __init__(self):
        super().__init__()
        self.packer = None

    # -- the session model -------------------------------------------------------------

    def _open(self, capacity, seed):
        self.packer = self.packer_class(capacity, seed)
        self.capacity, self.seed, self.epoch, self.next_id = capacity, seed, 0, 0
        self.lengths = {}  # id -> length of every pushed example
        self.emitted = []  # every id emitted so far, in order
        self.dropped = []  # every id reported dropped
        stats["sessions"] += 1
        stats["calls"] += 1

    def _record(self, call, result):
        stats["calls"] += 1
        packs, dropped, pending = answer(result)
        note(f"  {call} -> packs {packs}, dropped {dropped}" + (f", pending {pending}" if pending else ""))
        self.emitted += [i for pack in packs for i in pack]
        self.dropped += dropped
        for pack in packs:
            assert pack, f"{call} emitted an empty pack"
            size = sum(self.lengths.get(i, 0) for i in pack)
            assert size <= self.capacity, f"{call} emitted pack {pack} of {size} tokens > capacity {self.capacity}"
        return pending

    def _close(self, call):
        packer, self.packer = self.packer, None  # closed even when a check below fails
        pending = self._record(call, packer.finish())
        assert not pending, f"finish left {pending} examples pending"
        pushed = set(self.lengths)
        out = self.emitted + self.dropped
        lost = sorted(pushed - set(out))
        assert not lost, (
            f"examples {lost} (lengths {[self.lengths[i] for i in lost]}) were pushed but "
            f"never emitted nor reported dropped"
        )
        self._check_emitted()
        assert len(out) == len(set(out)), f"an example was both emitted and dropped, or dropped twice: {out}"
        for i in self.dropped:
            assert i in pushed, f"dropped id {i} was never pushed"

    # -- rules ---------------------------------------------------------------------------

    @initialize(capacity=st.integers(1, 64), seed=st.integers(0, 3))
    def start(self, capacity, seed):
        self._open(capacity, seed)

    @rule(ratios=st.lists(st.integers(1, 48), max_size=8))
    def push(self, ratios):
        """Push examples of lengths ⌈capacity·r/32⌉ (so r=32 is exactly the capacity)."""
        examples = []
        for r in ratios:
            length = -(-self.capacity * r // 32)
            examples.append({"id": self.next_id, "len": length})
            self.lengths[self.next_id] = length
            self.next_id += 1
        self._record(f"push(epoch {self.epoch}, {[(e['id'], e['len']) for e in examples]} as (id, len))",
                     self.packer.push(examples))

    @rule()
    def end_epoch(self):
        end = getattr(self.packer, "end_epoch", None)
        if end is not None:
            self._record(f"end_epoch({self.epoch})", end())
        self.epoch += 1

    @rule()
    def finish(self):
        """Finish the session, then start the next one (same capacity and seed)."""
        self._close("finish()")
        self._open(self.capacity, self.seed)

    def teardown(self):
        # A session left open is finished and checked too, unless a step already failed
        # (teardown runs as that failure propagates: the same session is not reported twice).
        if self.packer is not None and sys.exc_info()[1] is None:
            self._close("finish() at teardown")

    # -- invariants after every call ---------------------------------------------------------

    @invariant()
    def nothing_duplicated_or_invented(self):
        if self.packer is not None:
            self._check_emitted()

    def _check_emitted(self):
        assert len(self.emitted) == len(set(self.emitted)), f"an example was emitted twice: {self.emitted}"
        invented = [i for i in self.emitted if i not in self.lengths]
        assert not invented, f"emitted ids {invented} were never pushed"


stats = {"sessions": 0, "calls": 0}


def machine_for(packer_class):
    return type(f"{packer_class.__name__}Session", (PackerSession,), {"packer_class": packer_class})


def hypothesis_settings(max_examples: int) -> settings:
    return settings(
        max_examples=max_examples,
        stateful_step_count=STEPS,
        deadline=None,
        database=None,
        print_blob=False,
    )


def describe(e: BaseException) -> str:
    """The shrunk failing program Hypothesis attached to `e` and the error (each of a group)."""
    if isinstance(e, BaseExceptionGroup):
        return "\n\n".join(describe(x) for x in e.exceptions)
    notes = "\n".join(getattr(e, "__notes__", []))
    return f"{notes}\n{type(e).__name__}: {e}"


def run(which: str, max_examples: int, seed: int = 0) -> dict:
    """Run the test once. Returns seconds (wall time, with the shrinking and the explain phase
    of a failure), cases (valid test cases Hypothesis generated, failing ones included:
    max_examples for a pass), passing (the valid ones that passed), test_cases (every test case
    it ran, invalid, overrun and shrinking ones included), sessions (packer sessions started), calls (packer calls: start, push, end_epoch, finish)
    and failure (the shrunk counterexample, or None)."""
    machine = machine_for(PACKERS[which]())

    @hypothesis.seed(seed)
    def factory():
        return machine()

    statistics = []
    stats.update(sessions=0, calls=0)
    failure = None
    t0 = time.perf_counter()
    with collector.with_value(statistics.append):
        try:
            run_state_machine_as_test(factory, settings=hypothesis_settings(max_examples))
        except Exception as e:  # noqa: BLE001 - the failure Hypothesis found, shrunk
            failure = describe(e)
    seconds = time.perf_counter() - t0
    phases = [v for d in statistics for k, v in d.items() if k.endswith("-phase")]
    generated = [tc["status"] for d in statistics for tc in d.get("generate-phase", {}).get("test-cases", [])]
    return {
        "seconds": seconds,
        "cases": generated.count("valid") + generated.count("interesting"),
        "passing": generated.count("valid"),
        "test_cases": sum(len(p.get("test-cases", [])) for p in phases),
        "sessions": stats["sessions"],
        "calls": stats["calls"],
        "failure": failure,
    }


# `pytest bench/hypothesis_streaming_packer.py`: the correct packer, as a team's own test.
TestStreamingPacker = machine_for(PACKERS["correct"]()).TestCase
TestStreamingPacker.settings = hypothesis_settings(300)


def main() -> None:
    which = sys.argv[1] if len(sys.argv) > 1 else "correct"
    max_examples = int(sys.argv[2]) if len(sys.argv) > 2 else 3000
    seed = int(sys.argv[3]) if len(sys.argv) > 3 else 0
    if which not in PACKERS:
        sys.exit(f"usage: {sys.argv[0]} [correct|drops-carry] [MAX_EXAMPLES] [SEED]")
    r = run(which, max_examples, seed)
    print(f"hypothesis {hypothesis.__version__}, {which}, max_examples={max_examples}, seed={seed}, "
          f"stateful_step_count={STEPS}")
    print(f"{r['cases']} valid test cases generated ({r['test_cases']} run in all, {r['sessions']} "
          f"packer sessions, {r['calls']} packer calls), {r['seconds']:.2f} s")
    failure = r["failure"]
    if failure is None:
        print(f"passed: {r['cases'] / r['seconds']:.0f} cases/s, {r['calls'] / r['seconds']:.0f} packer calls/s")
    else:
        print(f"counterexample found and shrunk in {r['seconds']:.2f} s:")
        print(failure)
    sys.exit(0 if (failure is None) == (which == "correct") else 1)


if __name__ == "__main__":
    main()
