#!/usr/bin/env python3
"""Regenerates the real-code corpus: `python corpus/real/generate.py [STACK ...]`.

Needs torch, transformers and safetensors (pip; never installed in CI) and mirrors of the
upstream repositories (see common.py). Each module in stacks/ runs the real upstream functions at
pinned commits and saves what they return; this script then writes batches/expected.toml from
the records (every file whose record expects a failure, with the checks it must violate).
CI only reads the committed output: `thdcheck check corpus/real/batches`.
"""

from __future__ import annotations

import importlib
import json
import shutil
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import common  # noqa: E402
import facts  # noqa: E402

STACKS = [p.stem for p in sorted((HERE / "stacks").glob("*.py")) if not p.stem.startswith("_")]


def expected_toml() -> str:
    lines = [
        "# Expected verdicts of the real-code corpus, written by corpus/real/generate.py from the",
        "# records (STACK/CASE.json: repository, commit, function, input, and why). A listed file",
        "# must violate exactly these checks (\"error\": be unreadable); every other file must pass.",
    ]
    records = []
    for rec_path in sorted(common.OUT.rglob("*.json")):
        records.append(json.loads(rec_path.read_text()))
    for rec in records:
        exp = rec["expected"]
        if exp == "pass":
            continue
        exp = exp if isinstance(exp, list) else [exp]
        items = ", ".join(f'"{e}"' for e in sorted(exp))
        lines.append(f'"{rec["path"]}" = [{items}]')
    return "\n".join(lines) + "\n"


def cases_md() -> str:
    """CASES.md: one line per case, from the records."""
    records = [json.loads(p.read_text()) for p in sorted(common.OUT.rglob("*.json"))]
    groups = {str(Path(r["path"]).parent) for r in records if r["path"].endswith("cp-group")}
    lines = [
        "# The real-code corpus, case by case",
        "",
        "Written by `corpus/real/generate.py` from the records (`batches/STACK/CASE.json` holds the",
        "exact input, the output, the stubs and the full reasoning). Rank files of a CP group are",
        "judged as their reassembled `cp-group`.",
        "",
        "`facts` (documents / real tokens / useful Σ s² / trained labels) are computed from each",
        "record's input by `corpus/real/facts.py`, never from the output; `*` marks a valid batch",
        "whose report differs, explained in its record's `facts_mismatch`.",
        "",
        "| case | upstream | function | expected | bug | facts |",
        "|---|---|---|---|---|---|",
    ]
    for r in records:
        if str(Path(r["path"]).parent) in groups and not r["path"].endswith("cp-group"):
            continue
        exp = r["expected"]
        exp = "pass" if exp == "pass" else ", ".join(exp if isinstance(exp, list) else [exp])
        commit = r["commit"] if r["commit"].startswith("pypi:") else r["commit"][:9]
        fn = r["function"].replace("|", "\\|")
        f = r.get("facts") or {}
        tl = f.get("trained_labels")
        fx = (f"{f.get('documents')} / {f.get('real_tokens')} / {f.get('useful_sum_sq')} / "
              f"{'–' if tl is None else tl}{' *' if r.get('facts_mismatch') else ''}") if f else ""
        lines.append(f"| `{r['path']}` | {r['repo']}@{commit} | `{fn}` | {exp} | {r.get('bug') or ''} "
                     f"| {fx} |")
    return "\n".join(lines) + "\n"


def pending_md() -> str:
    """pending/CASES.md: the cases saved outside the CI gate, with what the reader lacks."""
    records = [json.loads(p.read_text()) for p in sorted(common.PENDING.rglob("*.json"))]
    lines = [
        "# Pending real-code cases",
        "",
        "What the upstream functions return in a format `thdcheck check` cannot read or judge yet",
        "(written by `corpus/real/generate.py` from the records; each record's `pending` says what",
        "is missing and its `notes` the options that read it today, where any do). Not checked in",
        "CI. Rank files of a CP group are listed one by one.",
        "",
        "| case | upstream | expected | bug | missing |",
        "|---|---|---|---|---|",
    ]
    for r in records:
        exp = r["expected"]
        exp = "pass" if exp == "pass" else ", ".join(exp if isinstance(exp, list) else [exp])
        commit = r["commit"] if r["commit"].startswith("pypi:") else r["commit"][:9]
        why = r.get("pending", "").replace("|", "\\|")
        lines.append(f"| `{r['path']}` | {r['repo']}@{commit} | {exp} | {r.get('bug') or ''} | {why} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str]) -> None:
    if argv == ["--index"]:
        facts.main([])
        (common.OUT / "expected.toml").write_text(expected_toml())
        (HERE / "CASES.md").write_text(cases_md())
        if common.PENDING.exists():
            (common.PENDING / "CASES.md").write_text(pending_md())
        return
    stacks = argv or STACKS
    for stack in stacks:
        if stack not in STACKS:
            sys.exit(f"unknown stack {stack!r}; known: {', '.join(STACKS)}")
        # A stack's profile files (batches/STACK/*.toml: the blind profiles of issue 39, named by
        # its batches' metadata) are inputs, not output: kept across the regeneration.
        kept = {p.name: p.read_bytes() for p in (common.OUT / stack).glob("*.toml")}
        shutil.rmtree(common.OUT / stack, ignore_errors=True)
        shutil.rmtree(common.PENDING / stack, ignore_errors=True)
        for name, data in kept.items():
            (common.OUT / stack).mkdir(parents=True, exist_ok=True)
            (common.OUT / stack / name).write_bytes(data)
        module = importlib.import_module(f"stacks.{stack}")
        before = len(common.RECORDS)
        module.generate()
        print(f"{stack}: {len(common.RECORDS) - before} cases")
    facts.main([])  # the records' facts, from their inputs (facts.py)
    (common.OUT / "expected.toml").write_text(expected_toml())
    (HERE / "CASES.md").write_text(cases_md())
    if common.PENDING.exists():
        (common.PENDING / "CASES.md").write_text(pending_md())
    total = list(common.OUT.rglob("*.json"))
    bugs = [p for p in total if json.loads(p.read_text())["expected"] != "pass"]
    print(f"corpus: {len(total)} cases, {len(bugs)} expected to fail")


if __name__ == "__main__":
    main(sys.argv[1:])
