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
adapter process for thdcheck) and, for a failure, the shrinking. A thdcheck case is one session
(1 to 3 epochs of up to 3 pushes), sent twice (the replay checks determinism); a Hypothesis
test case is 20 steps of the state machine, each `finish` starting a new session; so the table
also counts packer calls (thdcheck's in a second, untimed run of the same cases).
"""

from __future__ import annotations

import importlib.util
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
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


# Runs an adapter counting the requests it reads: each process keeps its count in a file of
# its own under the folder argv[2], rewritten after every request (thdcheck ends an adapter
# with SIGKILL, so nothing runs at exit). The packer calls of a thdcheck run are counted in a
# second, untimed run of the same cases (same seed).
COUNTING = """
import os, runpy, sys
adapter, folder = sys.argv[1], sys.argv[2]
count = open(os.path.join(folder, str(os.getpid())), "w")
def counted(lines):
    calls = 0
    for line in lines:
        if line.strip():
            calls += 1
            count.seek(0)
            count.write(str(calls))
            count.flush()
        yield line
sys.stdin = counted(sys.stdin)
sys.argv = [adapter]
runpy.run_path(adapter, run_name="__main__")
"""


def thdcheck_calls(*args: str, adapter: str) -> int:
    """The packer calls (requests read, over every adapter start) of a thdcheck run."""
    with tempfile.TemporaryDirectory() as folder:
        cmd = [BIN, "fuzz", "packer", *args, "--json", "--", sys.executable, "-c", COUNTING,
               str(EXAMPLES / adapter), folder]
        subprocess.run(cmd, capture_output=True, text=True, cwd=REPO, check=False)
        return sum(int(f.read_text() or 0) for f in Path(folder).iterdir())


def session_case(failure: dict) -> str:
    """The shrunk case of a failing thdcheck report: the violation, then a session's requests
    (`requests`; a one-shot failure has only `request`) and the last answer."""
    requests = failure.get("requests") or [failure.get("request")]
    lines = [failure.get("detail", failure.get("kind", ""))]
    lines += ["-> " + json.dumps(q, separators=(",", ":")) for q in requests if q is not None]
    if "response" in failure:
        lines.append(f"<- {failure['response']} (last answer)")
    return "\n".join(lines)


def main() -> None:
    version = subprocess.run([BIN, "--version"], capture_output=True, text=True).stdout.strip()
    print(f"{version}; hypothesis {hypothesis.__version__}; Python {platform.python_version()}; "
          f"{os.cpu_count()} CPUs; {CASES} cases, {SEEDS} seeds\n")

    # Throughput on correct packers: (a) session, (b) Hypothesis, (d) one-shot for reference.
    rows = []
    for args, adapter in [(["--session"], "streaming_packer.py"), ([], "greedy_packer.py")]:
        args = [*args, "--cases", str(CASES)]
        s, rc, r = thdcheck(*args, adapter=adapter)
        assert rc == 0 and r["result"] == "pass", r
        calls = thdcheck_calls(*args, adapter=adapter)
        tool = f"thdcheck `fuzz packer{' --session' if '--session' in args else ''}`"
        rows.append((tool, adapter, r["cases"], calls, s))
        if "--session" in args:
            h = hyp.run("correct", CASES, 0)
            assert h["failure"] is None, h["failure"]
            rows.append((f"Hypothesis stateful, in-process ({h['sessions']} sessions)", "StreamingPacker",
                         h["cases"], h["calls"], h["seconds"]))
    print("| tool | packer | cases | packer calls | wall s | cases/s | calls/s |")
    print("|---|---|---:|---:|---:|---:|---:|")
    for tool, packer, cases, calls, seconds in rows:
        print(f"| {tool} | {packer} | {cases} | {calls} | {seconds:.2f} | {cases / seconds:.0f} | {calls / seconds:.0f} |")
    print("\nthdcheck's calls include the replay of every case (determinism); a Hypothesis case is "
          f"{hyp.STEPS} steps of the state machine, each finish starting a new session.")

    # (c) Time to the first counterexample, found and shrunk, on the carry-dropping packer.
    times = {"thdcheck": [], "Hypothesis": []}
    cases = {"thdcheck": [], "Hypothesis": []}
    minimal = {}
    for seed in range(SEEDS):
        s, rc, r = thdcheck("--session", "--cases", str(CASES), "--seed", str(seed),
                            adapter="streaming_packer_drops_carry.py")
        assert rc != 0 and r["result"] == "fail", f"thdcheck missed the carry-drop bug with seed {seed}: {r}"
        times["thdcheck"].append(s)
        cases["thdcheck"].append(f"{r.get('cases')}/{r.get('runs')}")
        minimal.setdefault("thdcheck", session_case(r["failure"]))
        h = hyp.run("drops-carry", CASES, seed)
        assert h["failure"] is not None, f"Hypothesis missed the carry-drop bug with seed {seed}"
        times["Hypothesis"].append(h["seconds"])
        cases["Hypothesis"].append(f"{h['passing']}/{h['test_cases']}")
        minimal.setdefault("Hypothesis", h["failure"])
    print(f"\nTime to the first counterexample on streaming_packer_drops_carry.py (found and shrunk), seeds 0..{SEEDS - 1}:\n")
    print("| tool | median s | per seed s | passing cases / runs in all (shrinking included), per seed |")
    print("|---|---:|---|---|")
    for tool in times:
        per_seed = ", ".join(f"{t:.2f}" for t in times[tool])
        print(f"| {tool} | {statistics.median(times[tool]):.2f} | {per_seed} | {', '.join(cases[tool])} |")
    print(f"\nthdcheck's runs include, after the shrinking, one pass over min(CASES, 256) fresh cases "
          "looking for other failure classes (`also_failing`); Hypothesis' include its invalid, "
          "overrun and shrinking test cases.")
    for tool, text in minimal.items():
        print(f"\n{tool} minimal case (seed 0):\n```\n{text.strip()}\n```")


if __name__ == "__main__":
    main()
