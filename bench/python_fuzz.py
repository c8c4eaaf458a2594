"""In-process fuzzing (`thdcheck.fuzz_collator(fn)`) against the subprocess protocol
(`thdcheck fuzz collator -- python3 adapter.py`) on the same collator and the same cases
(issue 14). Run on a quiet machine, with the package installed (`pip install ./python`):

    python bench/python_fuzz.py [CASES]       # default 3000; THDCHECK=path/to/thdcheck
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import thdcheck

REPO = Path(__file__).resolve().parent.parent
CASES = int(sys.argv[1]) if len(sys.argv) > 1 else 3000
BIN = os.environ.get("THDCHECK", str(REPO / "target/release/thdcheck"))


def example(name: str):
    spec = importlib.util.spec_from_file_location(name, REPO / "adapters/python/examples" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def main() -> None:
    rows = []
    for target, name, fn, fuzz in [
        ("collator", "flatten_collator", "collate", thdcheck.fuzz_collator),
        ("packer", "greedy_packer", "pack", thdcheck.fuzz_packer),
    ]:
        t0 = time.perf_counter()
        r = fuzz(getattr(example(name), fn), cases=CASES)
        t_in = time.perf_counter() - t0
        t0 = time.perf_counter()
        p = subprocess.run(
            [BIN, "fuzz", target, "--json", "--cases", str(CASES), "--", sys.executable,
             str(REPO / "adapters/python/examples" / f"{name}.py")],
            capture_output=True, text=True, check=True,
        )
        t_sub = time.perf_counter() - t0
        sub = json.loads(p.stdout)
        rows.append((target, name, r.cases / t_in, sub["cases"] / t_sub))
    print(f"{CASES} cases each, wall time including start-up")
    for target, name, inproc, sub in rows:
        print(f"  {target:<9}{name:<18} in-process {inproc:8.0f} cases/s   subprocess {sub:8.0f} cases/s   {inproc / sub:.2f}x")


if __name__ == "__main__":
    main()
