#!/usr/bin/env python3
"""Run the real-adapter suite (`suite.toml`, issue 40) and compare every run with its expectation.

    python3 adapters/python/real/suite.py [--thdcheck PATH] [--python PATH] [--only SUBSTRING]
                                          [--json OUT] [--timeout S] [--seed N] [--list]

Stdlib only (Python >= 3.11 for tomllib). For each `[[run]]` of suite.toml it runs, from the
repository root,

    THDCHECK_MIRRORS=... THDCHECK fuzz TARGET --json --profile P --cases N --seed S FLAGS \
        -- PYTHON adapters/python/real/ADAPTER ARGS

(no --first-failure: the run reports every distinct failure), reads the JSON report and compares
it with `expect`:
- "pass": the run's result is pass;
- a list of failures: every expected failure is among the reported ones, and every reported
  failure is an expected one. Reported = each shrunk failure (`failures`: a violation counts once
  per violated check, anything else as its kind and class), plus the classes the run met and did
  not shrink (`not_shrunk`) or met in its scan of fresh cases (`also_failing`). A violation
  matches `{kind = "violation", check = ID}`; any other failure matches `{kind = KIND, origin =
  S}` when S is a substring of its class (`adapter-error (ZeroDivisionError at algorithms.py:281)`).
A run that does not start (exit 2: a missing mirror or dependency), gives no JSON, or exceeds the
timeout (default 900 s) is a MISMATCH. Prints a table (name, expected, got, seconds, OK/MISMATCH)
and exits 0 only if every run matches.

Environment: THDCHECK_MIRRORS (default /work/.mirror) is passed on; THDCHECK and PY may name the
binary and the python instead of --thdcheck / --python.
"""

import argparse
import json
import os
import re
import signal
import subprocess
import sys
import time
import tomllib
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[2]


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--thdcheck", default=os.environ.get("THDCHECK", "thdcheck"),
                   help="the thdcheck binary (default: $THDCHECK, else thdcheck on PATH)")
    p.add_argument("--python", default=os.environ.get("PY", "/tmp/realenv/bin/python"),
                   help="the python with torch, transformers, ... (default: $PY, else /tmp/realenv/bin/python)")
    p.add_argument("--only", action="append", default=[],
                   help="run only the entries whose name contains this (repeatable: any of them)")
    p.add_argument("--json", metavar="OUT", help="write every run's outcome (and its report) to OUT")
    p.add_argument("--suite", default=str(HERE / "suite.toml"), help="the suite file")
    p.add_argument("--timeout", type=float, default=900.0, help="seconds per run (default 900)")
    p.add_argument("--seed", type=int, default=0, help="--seed of every run (default 0)")
    p.add_argument("--list", action="store_true", help="print the commands and exit")
    return p.parse_args(argv)


def load_suite(path):
    with open(path, "rb") as f:
        runs = tomllib.load(f)["run"]
    names = set()
    for r in runs:
        for key in ("name", "target", "adapter", "profile", "cases", "expect"):
            if key not in r:
                sys.exit(f"{path}: run {r.get('name', r)!r} has no `{key}`")
        if r["name"] in names:
            sys.exit(f"{path}: two runs named {r['name']!r}")
        names.add(r["name"])
        for bad in ("--ignore", "--fitting-only", "--rtol", "--non-empty", "--drops", "--first-failure"):
            if bad in r.get("flags", []):
                sys.exit(f"{path}: run {r['name']!r} has {bad}: that is the profile's (or hides failures)")
        if r["expect"] != "pass" and not r.get("why"):
            sys.exit(f"{path}: run {r['name']!r} expects a failure without a `why`")
    return runs


def command(run, args):
    adapter, *adapter_args = run["adapter"]
    return [args.thdcheck, "fuzz", run["target"], "--json", "--profile", run["profile"],
            "--cases", str(run["cases"]), "--seed", str(args.seed), *run.get("flags", []),
            "--", args.python, f"adapters/python/real/{adapter}", *adapter_args]


_CLASS = re.compile(r"^(?P<kind>[a-z-]+)(?: (?P<rest>.*))?$")


def reported(report):
    """Every failure the report states, as (kind, check-or-class, where)."""
    out = []
    for f in report.get("failures") or ([report["failure"]] if report.get("failure") else []):
        kind = f.get("kind", "")
        if kind == "violation":
            for check in f.get("checks") or [f.get("class", "").removeprefix("violation ")]:
                out.append(("violation", check, "shrunk"))
        else:
            out.append((kind, f.get("origin") or f.get("class", kind), "shrunk"))
    for where in ("not_shrunk", "also_failing"):
        for item in report.get(where) or []:
            cls = item.get("class", "") if isinstance(item, dict) else str(item)
            m = _CLASS.match(cls)
            kind, rest = (m.group("kind"), m.group("rest") or "") if m else (cls, "")
            if kind == "violation":
                out.append(("violation", rest.split()[0] if rest else "", where))
            else:
                out.append((kind, cls, where))
    return out


def matches(expected, got):
    kind, what, _ = got
    if expected.get("kind") != kind:
        return False
    if kind == "violation":
        return expected.get("check") == what
    origin = expected.get("origin")
    return origin is None or origin in what


def describe_expected(e):
    if e == "pass":
        return "pass"
    return ", ".join(x["kind"] + " " + (x.get("check") or x.get("origin") or "") for x in e)


def describe_got(result, found):
    if result != "fail":
        return result
    seen = []
    for kind, what, where in found:
        if kind == "violation":
            label = f"violation {what}"
        else:
            label = what if what.startswith(kind) else f"{kind} {what}"
        if where != "shrunk":
            label += f" [{where.replace('_', ' ')}]"
        if label not in seen:
            seen.append(label)
    return "fail: " + "; ".join(seen)


def judge(run, report):
    """(ok, result, found)"""
    result = report.get("result", "?")
    found = reported(report) if result == "fail" else []
    expect = run["expect"]
    if expect == "pass":
        return result == "pass", result, found
    if result != "fail":
        return False, result, found
    every_expected_seen = all(any(matches(e, g) for g in found) for e in expect)
    nothing_else = all(any(matches(e, g) for e in expect) for g in found)
    return every_expected_seen and nothing_else, result, found


def execute(run, args, env):
    cmd = command(run, args)
    start = time.monotonic()
    # A session of its own, so that a timeout can stop thdcheck with SIGTERM (it then kills its
    # adapter's process group itself), and SIGKILL only what is left after a grace period.
    proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, start_new_session=True)
    try:
        stdout, stderr = proc.communicate(timeout=args.timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            stdout, stderr = proc.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            stdout, stderr = proc.communicate()
        return {"result": f"timeout after {args.timeout:g} s", "seconds": time.monotonic() - start,
                "cmd": cmd, "stderr": (stderr or "")[-4000:]}
    seconds = time.monotonic() - start
    out = {"seconds": seconds, "cmd": cmd, "exit": proc.returncode, "stderr": stderr[-4000:]}
    try:
        out["report"] = json.loads(stdout)
    except json.JSONDecodeError:
        last = (stderr.strip().splitlines() or [""])[-1]
        out["result"] = "setup-error" if proc.returncode == 2 else f"no-json (exit {proc.returncode})"
        out["why"] = last[:300]
    return out


def main(argv=None):
    args = parse_args(argv)
    runs = load_suite(args.suite)
    if args.only:
        runs = [r for r in runs if any(s in r["name"] for s in args.only)]
    if not runs:
        sys.exit("no run selected")
    env = dict(os.environ)
    env.setdefault("THDCHECK_MIRRORS", "/work/.mirror")
    if args.list:
        for r in runs:
            print(f"{r['name']}: THDCHECK_MIRRORS={env['THDCHECK_MIRRORS']} " + " ".join(command(r, args)))
        return 0

    width = max(len(r["name"]) for r in runs)
    rows, outcomes, t0 = [], [], time.monotonic()
    for i, run in enumerate(runs, 1):
        print(f"[{i}/{len(runs)}] {run['name']} ...", file=sys.stderr, flush=True)
        out = execute(run, args, env)
        if "report" in out:
            ok, result, found = judge(run, out["report"])
            got = describe_got(result, found)
        else:
            ok, got = False, out["result"] + (f": {out['why']}" if out.get("why") else "")
        verdict = "OK" if ok else "MISMATCH"
        rows.append((run["name"], describe_expected(run["expect"]), got, out["seconds"], verdict))
        print(f"    {verdict}  {got}  ({out['seconds']:.1f} s)", file=sys.stderr, flush=True)
        outcomes.append({"name": run["name"], "expect": run["expect"], "got": got, "ok": ok,
                         "seconds": round(out["seconds"], 2),
                         "command": "THDCHECK_MIRRORS=" + env["THDCHECK_MIRRORS"] + " " + " ".join(out["cmd"]),
                         "report": out.get("report"), "stderr": None if ok else out.get("stderr")})
    total = time.monotonic() - t0

    print(f"{'name':<{width}}  {'expected':<45}  {'got':<60}  {'s':>7}  verdict")
    for name, exp, got, sec, verdict in rows:
        print(f"{name:<{width}}  {exp:<45}  {got:<60}  {sec:7.1f}  {verdict}")
    bad = sum(1 for r in rows if r[4] != "OK")
    print(f"{len(rows) - bad} of {len(rows)} OK, {bad} MISMATCH; {total:.1f} s in all (seed {args.seed})")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"seed": args.seed, "thdcheck": args.thdcheck, "python": args.python,
                       "seconds": round(total, 1), "runs": outcomes}, f, indent=1)
    return 0 if bad == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
