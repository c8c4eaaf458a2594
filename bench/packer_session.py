"""`thdcheck fuzz packer --session` (a subprocess speaking the JSON-lines protocol) against the
Hypothesis stateful test a Python team would write in-process
(`bench/hypothesis_streaming_packer.py`) on the same streaming packers (issue 13): the
throughput on the correct packer, and the time to a shrunk counterexample on the packer that
forgets its carry at the end of an epoch (open-instruct #1472), median over seeds; the one-shot
protocol on the greedy packer for reference. Run on a quiet machine (nothing else running),
with a release build and a Python that has Hypothesis:

    cargo build --release -p thdcheck
    python3 -m venv /tmp/hypenv && /tmp/hypenv/bin/pip install hypothesis
    /tmp/hypenv/bin/python bench/packer_session.py [CASES] [SEEDS]   # default 3000 5; THDCHECK=path/to/thdcheck

The adapters run under the same interpreter as this script. Wall times include start-up (the
adapter process for thdcheck) and, for a failure, the shrinking; a Hypothesis test case is one
run of up to 20 calls of the state machine, each `finish` starting a new session.
"""

from __future__ import annotations

import importlib.util
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path

import hypothesis

REPO = Path(__file__).resolve().parent.parent
CASES = int(sys.argv[1]) if len(sys.argv) > 1 else 3000
SEEDS = int(sys.argv[2]) if len(sys.argv) > 2 else 5
BIN = os.environ.get("THDCHECK", str(REPO / "target/release/thdcheck"))
EXAMPLES = REPO / "adapters/python/examples"


def load(path: Path):
    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


hyp = load(REPO / "bench/hypothesis_streaming_packer.py")


def thdcheck(*args: str, adapter: str) -> tuple[float, int, dict]:
    """Run `thdcheck fuzz packer ARGS --json -- python adapter`: (wall s, exit code, report)."""
    cmd = [BIN, "fuzz", "packer", *args, "--json", "--", sys.executable, str(EXAMPLES / adapter)]
    t0 = time.perf_counter()
    p = subprocess.run(cmd, capture_output=True, text=True, cwd=REPO)
    seconds = time.perf_counter() - t0
    try:
        report = json.loads(p.stdout)
    except json.JSONDecodeError:
        sys.exit(f"{' '.join(cmd)}: exit {p.returncode}, no JSON report\n{p.stdout}\n{p.stderr}")
    return seconds, p.returncode, report


def session_case(failure: dict) -> str:
    """The failing case of a thdcheck report, one line per call of a session."""
    lines = []
    for key in ("detail", "checks"):
        if key in failure:
            lines.append(f"{key}: {failure[key]}")
    case = next((failure[k] for k in ("session", "calls", "requests", "request") if k in failure), None)
    if isinstance(case, dict) and isinstance(case.get("calls"), list):
        case = case["calls"]
    if isinstance(case, list):
        lines += [json.dumps(c, separators=(",", ":")) for c in case]
    elif case is not None:
        lines.append(json.dumps(case, separators=(",", ":")))
    if "replay" in failure:
        lines.append(f"replay: {failure['replay']}")
    return "\n".join(lines)


def main() -> None:
    version = subprocess.run([BIN, "--version"], capture_output=True, text=True).stdout.strip()
    print(f"{version}; hypothesis {hypothesis.__version__}; Python {platform.python_version()}; "
          f"{os.cpu_count()} CPUs; {CASES} cases, {SEEDS} seeds\n")

    # Throughput on correct packers: (a) session, (b) Hypothesis, (d) one-shot for reference.
    rows = []
    s, rc, r = thdcheck("--session", "--cases", str(CASES), adapter="streaming_packer.py")
    assert rc == 0 and r["result"] == "pass", r
    rows.append(("thdcheck `fuzz packer --session`", "streaming_packer.py", r["cases"], s))
    h = hyp.run("correct", CASES, 0)
    assert h["failure"] is None, h["failure"]
    rows.append((f"Hypothesis stateful ({h['sessions']} sessions)", "StreamingPacker", h["cases"], h["seconds"]))
    s, rc, r = thdcheck("--cases", str(CASES), adapter="greedy_packer.py")
    assert rc == 0 and r["result"] == "pass", r
    rows.append(("thdcheck `fuzz packer` (one-shot)", "greedy_packer.py", r["cases"], s))
    print("| tool | packer | cases | wall s | cases/s |")
    print("|---|---|---:|---:|---:|")
    for tool, packer, cases, seconds in rows:
        print(f"| {tool} | {packer} | {cases} | {seconds:.2f} | {cases / seconds:.0f} |")

    # (c) Time to the first counterexample, found and shrunk, on the carry-dropping packer.
    times = {"thdcheck": [], "Hypothesis": []}
    cases = {"thdcheck": [], "Hypothesis": []}
    minimal = {}
    for seed in range(SEEDS):
        s, rc, r = thdcheck("--session", "--cases", str(CASES), "--seed", str(seed),
                            adapter="streaming_packer_drops_carry.py")
        assert rc != 0 and r["result"] == "fail", f"thdcheck missed the carry-drop bug with seed {seed}: {r}"
        times["thdcheck"].append(s)
        cases["thdcheck"].append(r.get("cases"))
        minimal.setdefault("thdcheck", session_case(r["failure"]))
        h = hyp.run("drops-carry", CASES, seed)
        assert h["failure"] is not None, f"Hypothesis missed the carry-drop bug with seed {seed}"
        times["Hypothesis"].append(h["seconds"])
        cases["Hypothesis"].append(h["cases"])
        minimal.setdefault("Hypothesis", h["failure"])
    print(f"\nTime to the first counterexample on streaming_packer_drops_carry.py (found and shrunk), seeds 0..{SEEDS - 1}:\n")
    print("| tool | median s | per seed s | cases before the failure |")
    print("|---|---:|---|---|")
    for tool in times:
        per_seed = ", ".join(f"{t:.2f}" for t in times[tool])
        print(f"| {tool} | {statistics.median(times[tool]):.2f} | {per_seed} | {cases[tool]} |")
    for tool, text in minimal.items():
        print(f"\n{tool} minimal case (seed 0):\n```\n{text.strip()}\n```")


if __name__ == "__main__":
    main()
