#!/usr/bin/env python3
"""The hostile-input suite (issue 15): what a hostile user or a broken adapter throws at the
gate, in one CI step of well under a minute. Python standard library only.

    python3 ci/hostile.py [THDCHECK_BINARY]       # default: target/debug/thdcheck
    python3 ci/hostile.py --python VENV/bin/python  # the Python package's group only

Six groups, each input run under a time limit and judged by what came back:
- files: every committed batch (examples/batches, corpus/real/batches) mutated deterministically
  (truncated, header bytes flipped, data bytes flipped, the header length, shapes, dtypes and
  offsets rewritten, huge shapes) plus non-files (a FIFO, symlink loops, an empty file, text):
  exit 0, 1 or 2 only, never a panic, an abort or a hang, and every exit 2 names its file;
- semantic: hand-made batches whose verdict is known (wrong verdicts the issue listed, among
  them): the exact violated rules, or exit 2 naming what is wrong;
- cli: misuse of the command line: exit 2 with a message, never a panic;
- adapters: adapters that crash, hang, flood, answer garbage or spawn children: the failure is
  named as what it was, and nothing the adapter spawned outlives thdcheck.
- issue24: recipes past what `metrics` simulates or whose products would wrap, FIFOs where a
  recipe, logged values or expected.toml belong, a tree past PATH_MAX, a 1 TiB garbage file:
  exit 2 naming the key or the path.
- python (`--python PY`, an interpreter with the package installed; CI runs it after building
  the wheel): hostile values given to `thdcheck.check`, each in a child interpreter, so that a
  segfault is counted as a crash: the error it must raise, or the verdict it must give.

Prints one line per group and a summary; exits 1 on any panic, hang or wrong verdict.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import signal
import struct
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# `--python PY`: only the Python package's group, with the interpreter that has it installed.
PYTHON = sys.argv[sys.argv.index("--python") + 1] if "--python" in sys.argv[1:-1] else None
_args = [a for i, a in enumerate(sys.argv[1:], 1) if a != "--python" and sys.argv[i - 1] != "--python"]
BIN = os.path.abspath(_args[0]) if _args else str(ROOT / "target/debug/thdcheck")
LIMIT = 60  # seconds for any one run; the whole suite takes a few
FAILURES: list[str] = []
COUNTS = {"inputs": 0, "panics": 0, "hangs": 0, "wrong": 0}


def run(args, *, timeout=LIMIT, cwd=ROOT, stdin=subprocess.DEVNULL):
    """Runs thdcheck; returns (exit code or 'hang', stdout, stderr)."""
    try:
        p = subprocess.run([BIN, *args], cwd=cwd, capture_output=True, timeout=timeout, stdin=stdin)
    except subprocess.TimeoutExpired:
        return "hang", b"", b""
    return p.returncode, p.stdout, p.stderr


def judge(what: str, code, out: bytes, err: bytes, ok_codes=(0, 1, 2)) -> bool:
    """Counts a panic, an abort, a signal or a hang; True when the run ended normally."""
    COUNTS["inputs"] += 1
    if code == "hang":
        COUNTS["hangs"] += 1
        FAILURES.append(f"hang: {what}")
        return False
    if code not in ok_codes or b"panicked" in err or b"RUST_BACKTRACE" in err:
        COUNTS["panics"] += 1
        FAILURES.append(f"exit {code} (panic, abort or signal): {what}: {err[-400:].decode(errors='replace')}")
        return False
    return True


def wrong(what: str, why: str) -> None:
    COUNTS["wrong"] += 1
    FAILURES.append(f"wrong verdict: {what}: {why}")


# --- safetensors by hand -------------------------------------------------------------------

def st_bytes(tensors: dict, metadata: dict | None = None, *, raw_header: dict | None = None) -> bytes:
    """tensors: name -> (dtype, shape, values). Little-endian, header padded to 8."""
    fmt = {"I64": "<q", "I32": "<i", "BOOL": "<?", "F32": "<f", "U8": "<B"}
    header, data = {}, b""
    for name in sorted(tensors):
        dtype, shape, values = tensors[name]
        b = b"".join(struct.pack(fmt[dtype], v) for v in values)
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [len(data), len(data) + len(b)]}
        data += b
    if metadata:
        header["__metadata__"] = {k: str(v) for k, v in metadata.items()}
    if raw_header is not None:
        header = raw_header
    h = json.dumps(header).encode()
    h += b" " * (-len(h) % 8)
    return struct.pack("<Q", len(h)) + h + data


def split(b: bytes):
    n = struct.unpack("<Q", b[:8])[0]
    return json.loads(b[8 : 8 + n]), b[8 + n :]


def join(header: dict, data: bytes) -> bytes:
    h = json.dumps(header).encode()
    h += b" " * (-len(h) % 8)
    return struct.pack("<Q", len(h)) + h + data


# --- group 1: mutated files and non-files -------------------------------------------------

def mutants(seed: bytes, rng: random.Random):
    yield "truncated-half", seed[: len(seed) // 2]
    yield "truncated-header", seed[: 8 + rng.randrange(0, 16)]
    yield "empty", b""
    yield "length-huge", struct.pack("<Q", 2**63 + 5) + seed[8:]
    yield "length-off-by-one", struct.pack("<Q", struct.unpack("<Q", seed[:8])[0] + 1) + seed[8:]
    for k in range(3):
        b = bytearray(seed)
        n = struct.unpack("<Q", seed[:8])[0]
        i = 8 + rng.randrange(max(1, n))
        b[i] = rng.randrange(256)
        yield f"header-byte-{k}", bytes(b)
    for k in range(3):
        b = bytearray(seed)
        if len(b) > 8:
            i = rng.randrange(8, len(b))
            b[i] ^= 1 << rng.randrange(8)
        yield f"data-bit-{k}", bytes(b)
    try:
        header, data = split(seed)
    except Exception:
        return
    names = [k for k in header if k != "__metadata__"]
    if not names:
        return
    for k in range(4):
        h = json.loads(json.dumps(header))
        name = rng.choice(names)
        e = h[name]
        choice = rng.randrange(7)
        if choice in (0, 1):
            # A huge shape of zero elements: valid safetensors once the tensor's bytes are cut.
            e["shape"] = [2**62, 0] if choice == 0 else [10**9, 0]
            yield f"header-edit-{k}-{choice}", cut(h, data, name)
            continue
        elif choice == 2:
            e["dtype"] = rng.choice(["I32", "I64", "F32", "BOOL", "U64", "F16", "BF16", "U8"])
        elif choice == 3:
            e["data_offsets"] = [e["data_offsets"][1], e["data_offsets"][0]]
        elif choice == 4:
            e["shape"] = list(reversed(e["shape"])) + [1]
        elif choice == 5:
            h["__metadata__"] = {"cp_size": str(rng.choice([0, 1, 2, 3, 65537, -1, 2**40])), "cp_rank": str(rng.choice([0, 1, -1, 9]))}
        else:
            del h[name]
        yield f"header-edit-{k}-{choice}", join(h, data)


def cut(header: dict, data: bytes, name: str) -> bytes:
    """`name` made zero bytes long, the other tensors' offsets moved to keep the data dense."""
    start, end = header[name]["data_offsets"]
    n = end - start
    for k, e in header.items():
        if k == "__metadata__":
            continue
        a, b = e["data_offsets"]
        if k == name:
            e["data_offsets"] = [start, start]
        elif a >= end:
            e["data_offsets"] = [a - n, b - n]
    return join(header, data[:start] + data[end:])


def files_group(tmp: Path) -> str:
    t0 = time.time()
    seeds = sorted((ROOT / "examples/batches").rglob("*.safetensors")) + sorted(
        (ROOT / "corpus/real/batches").rglob("*.safetensors")
    )
    rng = random.Random(15)
    groups = []
    for i, s in enumerate(seeds):
        d = tmp / f"mut{i // 25}"
        d.mkdir(exist_ok=True)
        for name, b in mutants(s.read_bytes(), rng):
            (d / f"{i}_{s.stem}_{name}.safetensors").write_bytes(b)
        if d not in groups:
            groups.append(d)
    odd = tmp / "odd"
    odd.mkdir()
    (odd / "text.safetensors").write_text("input_ids,labels\n1,2\n")
    (odd / "zip.safetensors").write_bytes(b"PK\x03\x04" + b"\0" * 64)
    (odd / "loop").mkdir()
    os.symlink("..", odd / "loop" / "up")
    os.symlink(".", odd / "loop" / "self")
    os.mkfifo(odd / "fifo.safetensors")
    groups.append(odd)
    files = 0
    for d in groups:
        paths = sorted(p for p in d.iterdir() if p.is_file() and not p.is_fifo())
        files += len(paths)
        code, out, err = run(["check", "--quiet", str(d)])
        if judge(f"check {d.name}/ ({len(paths)} files)", code, out, err):
            COUNTS["inputs"] += len(paths) - 1
            # Every unreadable file is named in what was printed.
            for line in err.decode(errors="replace").splitlines():
                if line.startswith("thdcheck: error:") and str(d) not in line:
                    wrong(line, "an error that names no file")
            continue
        COUNTS["inputs"] -= 1
        for p in paths:  # find the file at fault
            code, out, err = run(["check", "--quiet", str(p)], timeout=20)
            judge(f"check {p.name}", code, out, err)
    # A FIFO named directly is an error, not a hang.
    code, out, err = run(["check", str(odd / "fifo.safetensors")], timeout=10)
    if judge("check a FIFO", code, out, err) and code != 2:
        wrong("check a FIFO", f"exit {code}, expected 2")
    return f"files      {files} mutated and odd files in {len(groups)} runs, {time.time() - t0:.1f} s"


# --- group 2: semantic cases with known verdicts ------------------------------------------

def semantic_group(tmp: Path) -> str:
    t0 = time.time()
    I = lambda v: ("I64", [len(v)], v)  # noqa: E731
    I32 = lambda v: ("I32", [len(v)], v)  # noqa: E731
    ids12 = list(range(1, 13))
    cases = [
        # (name, tensors, metadata, expected: list of violated rules | "error:<substring>" | [])
        ("zero_length_mock_areal_1103", {"input_ids": I(ids12), "cu_seqlens": I32([0, 4, 7, 12, 12]),
         "num_real_seqs": ("I64", [], [3])}, None, ["mock-nonempty"]),
        ("two_dimensional_cu_k", {"input_ids": I(ids12), "cu_seq_lens_q": I32([0, 5, 12]),
         "cu_seq_lens_k": ("I32", [1, 3], [0, 5, 12])}, None, []),
        ("two_dimensional_cu_k_2rows", {"input_ids": I(ids12), "cu_seq_lens_q": I32([0, 5, 12]),
         "cu_seq_lens_k": ("I32", [3, 1], [0, 5, 12])}, None, "error:cu_seq_lens_k"),
        ("cp_size_tensor_without_rank", {"input_ids": I(ids12), "cu_seqlens": I32([0, 4, 12]),
         "cp_size": ("I64", [], [2])}, None, "error:cp_rank"),
        ("cp_size_zero", {"input_ids": I(ids12), "cu_seqlens": I32([0, 4, 12])},
         {"cp_size": 0, "cp_rank": 0}, "error:cp_size"),
        # Offsets that contradict the batch: the `offsets` rule's violation (exit 1), not exit 2.
        ("offsets_past_the_tokens", {"input_ids": I(ids12), "cu_seq_lens_q": I32([0, 5, 13])},
         None, ["offsets"]),
        ("offsets_decreasing", {"input_ids": I(ids12), "cu_seq_lens_q": I32([0, 7, 5, 12])},
         None, ["offsets"]),
        ("positions_not_reset", {"input_ids": I(ids12), "cu_seq_lens_q": I32([0, 5, 12]),
         "position_ids": I(list(range(12)))}, None, ["position-ids"]),
        ("label_leak", {"input_ids": I(ids12), "cu_seq_lens_q": I32([0, 5, 12]),
         "labels": I(ids12)}, None, ["cross-doc-label"]),
        ("pad_trained", {"input_ids": I(ids12[:10] + [0, 0]), "cu_seq_lens_q": I32([0, 5, 10]),
         "cu_seq_lens_q_padded": I32([0, 5, 12]), "labels": I([-100] + ids12[1:5] + [-100] + ids12[6:10] + [0, 0])},
         None, ["pad-labels"]),
        ("doc_lens_past_the_row", {"input_ids": ("I64", [2, 6], ids12), "doc_lens": ("I64", [2, 2], [3, 3, 4, 3])},
         None, "error:doc_lens"),
        ("sequence_id_holes", {"input_ids": ("I64", [1, 6], ids12[:6]), "sequence_id": ("I64", [1, 6], [0, 0, -1, 1, 1, -1])},
         None, "error:sequence_id"),
        ("float_labels", {"input_ids": I(ids12), "cu_seq_lens_q": I32([0, 12]), "labels": ("F32", [12], [1.0] * 12)},
         None, "error:labels"),
        ("mask_not_binary", {"input_ids": I(ids12), "cu_seq_lens_q": I32([0, 12]), "attention_mask": I([1] * 11 + [2])},
         None, "error:attention_mask"),
    ]
    # Shapes of zero elements whose rows alone would ask for memory ([2^62, 0] once panicked
    # with "capacity overflow", [10^9, 0] asked for 24 GB).
    for rows in (2**62, 10**9):
        for key, dialect_keys in (("input_ids", {"cu_seq_lens_q": I32([0])}),
                                  ("seq_lens", {"input_ids": ("I64", [rows, 0], [])})):
            tensors = {key: ("I64", [rows, 0], []), **dialect_keys}
            cases.append((f"huge_rows_{key}_{rows}", tensors, None, f"error:{key}"))
    sem = tmp / "semantic"
    sem.mkdir()
    for name, tensors, meta, expected in cases:
        p = sem / f"{name}.safetensors"
        p.write_bytes(st_bytes(tensors, meta))
        code, out, err = run(["check", "--json", str(p)])
        if not judge(name, code, out, err):
            continue
        if isinstance(expected, str):
            sub = expected.split(":", 1)[1]
            if code != 2 or sub not in err.decode(errors="replace") or p.name not in err.decode(errors="replace"):
                wrong(name, f"expected exit 2 naming the file and `{sub}`, got exit {code}: {err.decode(errors='replace')[-300:]}")
            continue
        try:
            got = json.loads(out)["files"][0].get("violated", [])
        except Exception as e:  # noqa: BLE001
            wrong(name, f"exit {code}, no JSON report ({e}): {err.decode(errors='replace')[-300:]}")
            continue
        if sorted(got) != sorted(expected) or code != (1 if expected else 0):
            wrong(name, f"expected {expected or 'pass'}, got exit {code} violating {got}")
    # CP groups (the example rank files, edited): a global `cu_seqlens_kv` beside the global
    # `cu_seqlens` is read like it (it was rejected); a rank without `padding_mask` makes the
    # group unreadable (the whole group's mask was dropped and padding counted as real).
    ranks = [(ROOT / f"examples/batches/good/cp_shards/rank{r}.safetensors").read_bytes() for r in (0, 1)]
    groups = [
        ("cp_global_kv", [with_tensor(b, "cu_seqlens_kv", "I32", [4], [0, 4, 8, 16]) for b in ranks], []),
        ("cp_rank_without_mask", [ranks[0], without_tensor(ranks[1], "padding_mask")], "error:rank 1"),
    ]
    for name, files, expected in groups:
        d = sem / name
        d.mkdir()
        for r, b in enumerate(files):
            (d / f"rank{r}.safetensors").write_bytes(b)
        code, out, err = run(["check", "--json", str(d)])
        if not judge(name, code, out, err):
            continue
        if isinstance(expected, str):
            if code != 2 or expected.split(":", 1)[1] not in err.decode(errors="replace"):
                wrong(name, f"expected exit 2 naming {expected}, got exit {code}: {err.decode(errors='replace')[-300:]}")
        elif code != 0:
            wrong(name, f"expected the group to pass, got exit {code}: {out.decode(errors='replace')[-300:]}")
    return f"semantic   {len(cases) + len(groups)} batches with known verdicts, {time.time() - t0:.1f} s"


def with_tensor(b: bytes, name: str, dtype: str, shape: list, values: list) -> bytes:
    """The file with one more tensor, appended after the others."""
    header, data = split(b)
    fmt = {"I64": "<q", "I32": "<i"}[dtype]
    extra = b"".join(struct.pack(fmt, v) for v in values)
    header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [len(data), len(data) + len(extra)]}
    return join(header, data + extra)


def without_tensor(b: bytes, name: str) -> bytes:
    """The file without one tensor."""
    header, data = split(b)
    out = cut(header, data, name)
    header, data = split(out)
    del header[name]
    return join(header, data)


# --- group 3: command-line misuse ----------------------------------------------------------

def cli_group(tmp: Path) -> str:
    t0 = time.time()
    ok_file = str(ROOT / "examples/batches/good/hf_flatten.safetensors")
    misuse = [
        ["check"],
        ["check", "/nonexistent/file.safetensors"],
        ["check", "--cp-size", "4294967295", ok_file],
        ["check", "--cp-size", "0", ok_file],
        ["check", "--pad-to-multiple-of", "0", ok_file],
        ["check", "--profile", "nope", ok_file],
        ["check", "--objective", "rl", ok_file],
        ["check", "--map", "nokey", ok_file],
        ["check", "--map", "absent=input_ids", ok_file],
        ["check", "--expect", "/nonexistent.toml", ok_file],
        ["fuzz", "packer", "--cases", "0", "--", "python3", "adapters/python/examples/greedy_packer.py"],
        ["fuzz", "packer"],
        ["fuzz", "packer", "--", "/nonexistent/adapter"],
        ["fuzz", "logger", "--rtol", "-1", "--", "python3", "adapters/python/examples/logger.py"],
        ["metrics", "--recipe", "/nonexistent.toml"],
        ["metrics", "--recipe", "golden/tests/recipes/qwen3_8b_sft_seq4096.toml", "--batch", "/nonexistent.safetensors"],
        ["metrics", "--recipe", "golden/tests/recipes/qwen3_8b_sft_seq4096.toml", "--step-time", "-3"],
        ["selfcheck", "--cases", "0"],
        ["nonsense"],
    ]
    for args in misuse:
        code, out, err = run(args, timeout=30)
        if judge(" ".join(args), code, out, err) and code != 2:
            wrong(" ".join(args), f"exit {code}, expected 2: {err.decode(errors='replace')[-200:]}")
        elif code == 2 and not err.strip():
            wrong(" ".join(args), "exit 2 with no message")
        elif any(a.startswith("-") and a[1:].isdigit() for a in args) and b"invalid value" not in err:
            # A negative number is a bad value of its option, not an unknown argument.
            wrong(" ".join(args), f"not named as an invalid value: {err.decode(errors='replace')[:200]}")
    return f"cli        {len(misuse)} misuses, {time.time() - t0:.1f} s"


# --- group 4: adapters that misbehave -------------------------------------------------------

def alive(marker: str) -> bool:
    for p in Path("/proc").iterdir():
        if p.name.isdigit():
            try:
                if marker.encode() in (p / "cmdline").read_bytes():
                    return True
            except OSError:
                pass
    return False


# A stdlib packer for the adapter-driver faults: `answer(r)` is a correct payload (one pack per
# example, over-long ones dropped; nothing for a session's start, end_epoch, finish), `reply`
# writes it under the request's version and id.
ONCE = ("import json, os, sys\n"
        "def answer(r):\n    ex = r.get('examples', []); cap = r.get('capacity', 1 << 30)\n"
        "    return {'packs': [[e['id']] for e in ex if e['len'] <= cap], 'dropped': [e['id'] for e in ex if e['len'] > cap]}\n"
        "def reply(r, **p):\n    sys.stdout.write(json.dumps(dict({'thdcheck': r['thdcheck'], 'id': r['id']}, **p)) + '\\n'); sys.stdout.flush()\n")


def adapters_group(tmp: Path) -> str:
    t0 = time.time()
    marker = f"thdcheck-hostile-{os.getpid()}"
    # An adapter that starts a child of its own, then hangs: the child must not outlive thdcheck.
    spawn = (
        "import subprocess, sys, time\n"
        f"subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(300)', '{marker}'])\n"
        "sys.stdin.readline()\ntime.sleep(300)"
    )
    faults = [
        ("crash", "import sys\nsys.stdin.readline()\nsys.exit(3)", []),
        ("crash", "import sys\nfor i, l in enumerate(sys.stdin):\n    if i == 2: sys.exit(7)\n"
                  "    import json; r = json.loads(l); print(json.dumps({'thdcheck': 1, 'id': r['id'], 'packs': [[j] for j in range(len(r['lengths']))]}), flush=True)", []),
        ("hang", "import sys, time\nsys.stdin.readline()\ntime.sleep(300)", ["--timeout-ms", "300", "--startup-timeout-ms", "300"]),
        ("not-json", "import sys\nfor l in sys.stdin: print('hello', flush=True)", []),
        ("not-json", "import sys\nfor l in sys.stdin: sys.stdout.buffer.write(b'\\xff\\xfe\\n'); sys.stdout.flush()", []),
        ("too-long", "import sys\nsys.stdin.readline()\nwhile True: sys.stdout.write('x' * 65536)", ["--max-line-bytes", "1000000"]),
        ("not-json", "import sys\nsys.stdin.readline()\nsys.stdout.write('y' * 20_000_000 + '\\n'); sys.stdout.flush()\nsys.stdin.readline()", []),
        ("schema", "import sys, json\nfor l in sys.stdin: print(json.dumps({'thdcheck': 1, 'id': json.loads(l)['id'], 'packs': 'nope'}), flush=True)", []),
        ("hang", spawn, ["--timeout-ms", "300", "--startup-timeout-ms", "300"]),
        # Packer sessions (protocol 2): a crash at `finish`, a push answered with no packs
        # list, an answer of an unknown version.
        ("crash", "import sys, json\nfor l in sys.stdin:\n    r = json.loads(l)\n    if r.get('op') == 'finish': sys.exit(5)\n"
                  "    print(json.dumps({'thdcheck': 2, 'id': r['id'], 'packs': [[e['id']] for e in r.get('examples', [])]}), flush=True)", ["--session", "--fitting-only"]),
        ("schema", "import sys, json\nfor l in sys.stdin: print(json.dumps({'thdcheck': 2, 'id': json.loads(l)['id'], 'packs': {'a': 1}}), flush=True)", ["--session"]),
        ("schema", "import sys, json\nfor l in sys.stdin: print(json.dumps({'thdcheck': 3, 'id': json.loads(l)['id'], 'packs': []}), flush=True)", ["--session"]),
        # The adapter driver (issue 24, item 2): gone before the next request (thdcheck once
        # died of SIGPIPE, exit 141), half a line then gone, a child holding stdout after the
        # adapter exits (once a hang), the wrong version either way, a session `start` answered
        # with packs, two answers per request (stale ids), a flood of empty packs, and children
        # that leave the process group (a new session, a double-fork daemon holding stdout).
        ("crash", f"{ONCE}r = json.loads(sys.stdin.readline())\nos.close(0)\nreply(r, **answer(r))", []),
        ("not-json", "import os, sys\nsys.stdin.readline()\nos.close(0)\nsys.stdout.write('{\"thdch'); sys.stdout.flush()", []),
        ("crash", "import subprocess, sys\nsys.stdin.readline()\nsubprocess.Popen(['sleep', '300'])\nsys.exit(3)", ["--timeout-ms", "20000", "--startup-timeout-ms", "20000"]),
        ("schema", f"{ONCE}for l in sys.stdin:\n    r = json.loads(l); r['thdcheck'] = 2; reply(r, **answer(r))", []),
        ("schema", f"{ONCE}for l in sys.stdin:\n    r = json.loads(l); r['thdcheck'] = 1; reply(r, **answer(r))", ["--session", "--fitting-only"]),
        ("schema", f"{ONCE}for l in sys.stdin:\n    r = json.loads(l); reply(r, **({{'packs': [[0]]}} if r['op'] == 'start' else answer(r)))", ["--session", "--fitting-only"]),
        ("schema", f"{ONCE}for l in sys.stdin:\n    r = json.loads(l); reply(r, **answer(r)); reply(r, **answer(r))", []),
        ("schema", "import sys, json\nfor l in sys.stdin: sys.stdout.write(('{\"thdcheck\":1,\"id\":%d,\"packs\":[' + '[],' * 1000000 + '[]]}\\n') % json.loads(l)['id']); sys.stdout.flush()", []),
        ("hang", f"import subprocess, sys, time\nsubprocess.Popen([sys.executable, '-c', 'import time; time.sleep(300)', '{marker}'], start_new_session=True)\n"
                 "sys.stdin.readline()\ntime.sleep(300)", ["--timeout-ms", "300", "--startup-timeout-ms", "300"]),
        ("crash", "import os, sys\nif os.fork() == 0:\n    os.setsid()\n    if os.fork() == 0:\n"
                  f"        os.execvp(sys.executable, [sys.executable, '-c', 'import time; time.sleep(300)', '{marker}'])\n"
                  "    os._exit(0)\nos.wait()\nsys.stdin.readline()\nsys.exit(3)", ["--timeout-ms", "20000", "--startup-timeout-ms", "20000"]),
    ]
    for kind, script, extra in faults:
        args = ["fuzz", "packer", "--json", "--cases", "8", "--max-shrink-runs", "4", *extra, "--", "python3", "-c", script]
        code, out, err = run(args, timeout=30)
        what = f"adapter {kind}: {script.splitlines()[-1][:60]}"
        if not judge(what, code, out, err):
            continue
        if len(out) > 1_000_000:
            wrong(what, f"a report of {len(out)} bytes (the answer copied whole?)")
        try:
            got = json.loads(out)["failure"]["kind"]
        except Exception:  # noqa: BLE001
            got = f"exit {code}, no failure in the JSON: {err.decode(errors='replace')[-200:]}"
        if got != kind:
            wrong(what, f"expected `{kind}`, got `{got}`")
    # Issue 37: an adapter that cannot start (an ImportError before it reads anything) is a
    # setup error, exit 2 saying what it did; a profile's cp_slot_align past the option's bound
    # is exit 2 naming the file and line (2^32 - 1 once aborted on a 100 GB allocation).
    setup = [
        (["fuzz", "packer", "--json", "--", "python3", "-c", "import thdcheck_no_such_module"],
         b"before reading its first request"),
    ]
    for value in ("4294967295", "0", "-1", "1025"):
        prof = tmp / f"align_{value}.toml"
        prof.write_text(f'name = "a"\n[fuzz]\ncp_slot_align = {value}\n')
        setup.append((["fuzz", "cp-split", "--profile", str(prof), "--", "python3", "-c", "pass"],
                      f"{prof}:3: cp_slot_align = {value}".encode()))
    for args, want in setup:
        code, out, err = run(args, timeout=30)
        what = f"setup error: {' '.join(args[:4])}"
        if judge(what, code, out, err) and (code != 2 or want not in err):
            wrong(what, f"expected exit 2 saying {want!r}, got exit {code}: {err[-300:]!r}")
    time.sleep(0.2)
    if alive(marker):
        wrong("adapter children", "a process the adapter spawned outlived thdcheck")
        subprocess.run(["pkill", "-f", marker])
    # SIGTERM to thdcheck while its adapter hangs: the adapter's group goes with it.
    hang = f"import sys, time\nsys.stdin.readline()\ntime.sleep(300)  # {marker}"
    p = subprocess.Popen([BIN, "fuzz", "packer", "--timeout-ms", "60000", "--", "python3", "-c", hang],
                         cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    time.sleep(0.5)
    p.send_signal(signal.SIGTERM)
    try:
        p.wait(timeout=10)
    except subprocess.TimeoutExpired:
        COUNTS["hangs"] += 1
        FAILURES.append("hang: thdcheck ignored SIGTERM")
        p.kill()
    COUNTS["inputs"] += 1
    time.sleep(0.2)
    if alive(marker):
        wrong("SIGTERM", "the hanging adapter outlived thdcheck")
        subprocess.run(["pkill", "-f", marker])
    return f"adapters   {len(faults) + len(setup) + 1} misbehaving adapters, {time.time() - t0:.1f} s"


# --- the Python package ------------------------------------------------------------------------

# Each hostile value of the issue-24 round, checked in a child interpreter (a crash there is a
# crash, not the end of this suite): what the call must raise, or "ok" / a rule list.
PY_HOSTILE = r'''
import json, sys
import numpy as np
import thdcheck

def hf(**over):
    b = {"input_ids": np.array([[5, 6, 7, 8, 9]]), "labels": np.array([[-100, 6, 7, -100, 9]]),
         "position_ids": np.array([[0, 1, 2, 0, 1]]), "cu_seq_lens_q": np.array([0, 3, 5], dtype=np.int32),
         "cu_seq_lens_k": np.array([0, 3, 5], dtype=np.int32)}
    b.update(over)
    return b

class Foreign:
    def __init__(self, data, typestr="<i4", shape=(3,)):
        self.__array_interface__ = {"shape": shape, "typestr": typestr, "data": data, "version": 3}

selfref = []; selfref.append(selfref)
doubling = []; doubling.extend([doubling, doubling])
CASES = {
    "numpy scalars": (lambda: hf(max_length_q=np.int64(1), max_length_k=np.int64(5)), {}, ["max-seqlen"]),
    "buffer data": (lambda: hf(cu_seq_lens_q=Foreign(np.array([0, 3, 5], dtype=np.int32).tobytes())), {}, []),
    "short buffer data": (lambda: hf(cu_seq_lens_q=Foreign(b"\0")), {}, "BatchError"),
    "float list": (lambda: hf(cu_seq_lens_q=[0.0, 3.0, 9.0]), {}, "BatchError"),
    "None in list": (lambda: hf(cu_seq_lens_q=[0, None, 5]), {}, "BatchError"),
    "str in list": (lambda: hf(cu_seq_lens_q=[0, "3", 5]), {}, "BatchError"),
    "ragged": (lambda: hf(labels=[[1, 2], [3]]), {}, "BatchError"),
    "float scalar": (lambda: hf(max_length_q=3.0), {}, "BatchError"),
    "self-referencing list": (lambda: hf(labels=selfref), {}, "BatchError"),
    "doubling list": (lambda: hf(labels=doubling), {}, "BatchError"),
    "int beyond int64": (lambda: hf(max_length_q=2**64), {}, "BatchError"),
    "cp_size -1": (hf, {"cp_size": -1}, "ValueError"),
    "cp_size 2**64": (hf, {"cp_size": 2**64}, "ValueError"),
    "map as pairs": (hf, {"map": [("a", "b")]}, "TypeError"),
    "metadata str": (hf, {"metadata": "x"}, "TypeError"),
}
name = sys.argv[1]
make, options, want = CASES[name]
try:
    got = thdcheck.check(make(), **options).violated
except Exception as e:
    got = type(e).__name__
    msg = str(e)
print(json.dumps({"got": got, "want": want}))
'''


def python_group(tmp: Path, python: str) -> str:
    """The Python package under hostile values: each in a child interpreter (a segfault there is
    counted as a crash), with the error or verdict it must give."""
    t0 = time.time()
    names = [
        "numpy scalars", "buffer data", "short buffer data", "float list", "None in list",
        "str in list", "ragged", "float scalar", "self-referencing list", "doubling list",
        "int beyond int64", "cp_size -1", "cp_size 2**64", "map as pairs", "metadata str",
    ]
    script = tmp / "py_hostile.py"
    script.write_text(PY_HOSTILE)
    for name in names:
        COUNTS["inputs"] += 1
        try:
            p = subprocess.run([python, str(script), name], capture_output=True, timeout=LIMIT)
        except subprocess.TimeoutExpired:
            COUNTS["hangs"] += 1
            FAILURES.append(f"hang: python {name}")
            continue
        if p.returncode != 0:
            COUNTS["panics"] += 1
            FAILURES.append(f"python {name}: exit {p.returncode}: {p.stderr[-400:].decode(errors='replace')}")
            continue
        r = json.loads(p.stdout.decode().strip().splitlines()[-1])
        if r["got"] != r["want"]:
            wrong(f"python {name}", f"got {r['got']}, want {r['want']}")
    return f"python     {len(names)} hostile values in child interpreters, {time.time() - t0:.1f} s"


# --- group: hostile recipes, FIFOs, deep trees, huge files (issue 24, item 3) -------------

def recipes_and_trees_group(tmp: Path) -> str:
    """`metrics` on recipes past what the simulation holds or whose products would wrap, FIFOs
    where a recipe, logged values or an expected.toml should be, a tree deeper than PATH_MAX and
    a 1 TiB sparse garbage file: exit 2 naming the key or the path, never a panic, an abort or a
    hang. Each run is limited to 4 GiB of data, so a regression aborts instead of swapping."""
    import resource

    t0 = time.time()
    d = tmp / "issue24"
    d.mkdir()

    def limited(args, timeout=LIMIT):
        def limit():
            resource.setrlimit(resource.RLIMIT_DATA, (4 << 30, 4 << 30))
        try:
            p = subprocess.run([BIN, *args], cwd=ROOT, capture_output=True, timeout=timeout,
                               stdin=subprocess.DEVNULL, preexec_fn=limit)
        except subprocess.TimeoutExpired:
            return "hang", b"", b""
        return p.returncode, p.stdout, p.stderr

    def expect_2(what, args, names, timeout=LIMIT):
        code, out, err = limited(args, timeout)
        if not judge(what, code, out, err):
            return
        text = (out + err).decode(errors="replace")
        if code != 2:
            wrong(what, f"exit {code}, expected 2: {text[-300:]}")
        for n in names:
            if n not in text:
                wrong(what, f"the message does not name {n!r}: {text[-300:]}")

    def recipe(name, **keys):
        lines = (ROOT / "golden/tests/recipes" / f"{name}.toml").read_text().splitlines()
        for k, v in keys.items():
            i = next(i for i, l in enumerate(lines) if l.split("=")[0].strip() == k)
            lines[i] = f"{k} = {v}"
        return "\n".join(lines) + "\n"

    q, c = "qwen3_8b_sft_seq4096", "codonfm_encodon_1b"
    big = 2**63 - 1
    recipes = [
        ("packing.examples_per_push", recipe(q, examples_per_push=big)),
        ("padding.pad_to_multiple_of", recipe(q, pad_to_multiple_of=big)),
        ("batch.micro_batch_size", recipe(c, micro_batch_size=big)),
        ("padding.static_length", recipe("olmo2_7b_dpo_16k", static_length=big)),
        ("data.vision.spatial_merge", recipe("megatron_bridge_vlm_in_batch_seq4096", spatial_merge=2**31)),
        ("batch.grad_acc", recipe(c, grad_acc=2**20)),
        ("packing.examples_per_push", recipe(q, examples_per_push=2**20)),
        ("parallel.num_gpus", recipe(q, num_gpus=2**40)),
        ("padding.pad_to_multiple_of", recipe(c, pad_to_multiple_of=2**30)),
        ("model.heads", recipe(q, heads=2**32)),
        ("model.layers", recipe(q, layers=2**42, hidden=2**43, ffn=2**43)),
        ("batch.seq_length", recipe(c, micro_batch_size=4, seq_length=1_073_742_424)),
        ("timing.step_time_s", recipe(q, step_time_s="1e-320")),
        ("timing.peak_tflops_per_gpu", recipe(q, peak_tflops_per_gpu="1e-320")),
    ]
    for i, (key, text) in enumerate(recipes):
        path = d / f"r{i}.toml"
        path.write_text(text)
        expect_2(f"metrics {key} ({path.name})", ["metrics", "--recipe", str(path)], [key, str(path)])

    # FIFOs where a file is read: named, never waited on.
    good = ROOT / "examples/batches/good/hf_flatten.safetensors"
    fifo = d / "fifo.toml"
    os.mkfifo(fifo)
    qwen = str(ROOT / "golden/tests/recipes" / f"{q}.toml")
    expect_2("metrics --recipe FIFO", ["metrics", "--recipe", str(fifo)], [str(fifo)], 10)
    expect_2("metrics --expect FIFO", ["metrics", "--recipe", qwen, "--expect", str(fifo)], [str(fifo)], 10)
    expect_2("check --expect FIFO", ["check", "--expect", str(fifo), str(good)], [str(fifo)], 10)
    for kind in ("fifo", "dir"):
        sub = d / f"expected-{kind}"
        sub.mkdir()
        shutil.copy(good, sub / "good.safetensors")
        (os.mkfifo if kind == "fifo" else os.mkdir)(sub / "expected.toml")
        expect_2(f"check DIR with an expected.toml {kind}", ["check", str(sub)], [str(sub / "expected.toml")], 10)

    # A garbage file 22 levels of 200-character names down: past PATH_MAX, reported, not skipped.
    deep = d / "deep"
    deep.mkdir()
    shutil.copy(good, deep / "good.safetensors")
    fd = os.open(deep, os.O_RDONLY)
    for level in range(22):
        name = f"{level:0>200}"
        os.mkdir(name, dir_fd=fd)
        fd, old = os.open(name, os.O_RDONLY, dir_fd=fd), fd
        os.close(old)
    out = os.open("garbage.safetensors", os.O_WRONLY | os.O_CREAT, 0o644, dir_fd=fd)
    os.write(out, b"not a safetensors file")
    os.close(out)
    os.close(fd)
    expect_2("check a tree past PATH_MAX", ["check", "--quiet", str(deep)], ["PATH_MAX"])
    expect_2("metrics --batch a tree past PATH_MAX", ["metrics", "--recipe", qwen, "--batch", str(deep)], ["PATH_MAX"])

    # A 1 TiB sparse file whose header length says 2^63: rejected by its first 8 bytes.
    huge = d / "huge.safetensors"
    with open(huge, "wb") as f:
        f.write(struct.pack("<Q", 2**63))
        f.truncate(1 << 40)
    expect_2("check a 1 TiB garbage file", ["check", str(huge)], ["header", str(huge)])
    return f"issue24    {len(recipes)} hostile recipes, 5 FIFOs, a deep tree, a huge file, {time.time() - t0:.1f} s"


# --- group: profile paths and suggest (issue 37, items 1-2) ---------------------------------
def profiles_group(tmp: Path) -> str:
    """A profile path is untrusted input, whichever way it is named (--profile, a batch's
    metadata, pyproject.toml, extends): a FIFO or a device is exit 2 naming it, never a hang, an
    unbounded read or (through pyproject.toml) a pass; a batch's metadata never makes the
    checker read or print a file outside its folder. `profile suggest` never makes one of its
    inputs fail and names the file in every error."""
    t0 = time.time()
    d = tmp / "issue37"
    d.mkdir()
    n0 = COUNTS["inputs"]
    good = ROOT / "examples/batches/good/hf_flatten.safetensors"
    secret = d / "secret.toml"
    secret.write_text('name = "x"\nlabels = "hunter2-SECRET"\n')
    batches = d / "batches"
    batches.mkdir()
    os.mkfifo(batches / "fifo.toml")
    (batches / "bad.toml").write_text('name = "x"\npad_token_id = "hunter2-SECRET"\n')
    (batches / "ext.toml").write_text('name = "x"\nextends = "fifo.toml"\n')
    os.symlink(secret, batches / "link.toml")
    tensors = {"input_ids": ("I64", [1, 5], [5, 6, 7, 8, 9]), "cu_seq_lens_q": ("I32", [3], [0, 3, 5])}

    def expect(what, args, code_want, names=(), secret_ok=False, cwd=ROOT):
        code, out, err = run(args, timeout=20, cwd=cwd)
        if not judge(what, code, out, err):
            return
        text = (out + err).decode(errors="replace")
        if code != code_want:
            wrong(what, f"exit {code}, expected {code_want}: {text[-300:]}")
        for n in names:
            if n not in text:
                wrong(what, f"the message does not name {n!r}: {text[-300:]}")
        if not secret_ok and "hunter2" in text:
            wrong(what, f"printed a value of a file the batch named: {text[-300:]}")

    for i, spec in enumerate(["fifo.toml", "/dev/zero", str(secret), "../secret.toml", "link.toml",
                              "bad.toml", "ext.toml", "/proc/self/environ", "nosuch.toml"]):
        b = batches / f"b{i}.safetensors"
        b.write_bytes(st_bytes(tensors, {"profile": spec}))
        expect(f"metadata profile = {spec!r}", ["check", str(b)], 2, [b.name])
    for spec in [str(batches / "fifo.toml"), "/dev/zero", "/dev/stdin"]:
        expect(f"--profile {spec}", ["check", "--profile", spec, str(good)], 2, [spec])
    proj = d / "proj"
    proj.mkdir()
    for spec in ["/dev/zero", str(batches / "fifo.toml")]:
        (proj / "pyproject.toml").write_text(f"[tool.thdcheck]\nprofile = {json.dumps(spec)}\n")
        expect(f"pyproject.toml profile = {spec}", ["check", str(good)], 2, [spec], cwd=proj)
    (proj / "pyproject.toml").unlink()
    os.mkfifo(proj / "pyproject.toml")
    expect("pyproject.toml is a FIFO", ["check", str(good)], 2, ["pyproject.toml"], cwd=proj)

    # suggest: AReaL's two paths disagree on the labels; the suggestion keeps neither reading,
    # and under it neither input fails a rule it passes under the defaults.
    areal = ROOT / "corpus/real/batches/areal"
    inputs = [areal / "packed_mb_first_token_trained_d58cca56f.safetensors",
              areal / "pad_to_maximum_exact_be621da55.safetensors"]
    code, out, err = run(["profile", "suggest", *map(str, inputs)])
    if judge("suggest over AReaL's two paths", code, out, err):
        if code != 0:
            wrong("suggest over AReaL's two paths", f"exit {code}: {err[-300:]!r}")
        else:
            prof = d / "suggested.toml"
            prof.write_bytes(out)
            empty = d / "empty.toml"
            empty.write_text('name = "empty"\n')
            for f in inputs:
                v = {}
                for name, p in (("suggested", prof), ("defaults", empty)):
                    c2, o2, e2 = run(["check", "--json", "--no-expect", "--profile", str(p), str(f)])
                    judge(f"check {f.name} under the {name}", c2, o2, e2)
                    v[name] = set(json.loads(o2)["files"][0].get("violated", [])) if c2 in (0, 1) else {"error"}
                if not v["suggested"] <= v["defaults"]:
                    wrong(f"suggest over AReaL: {f.name}", f"{v['suggested']} under it, {v['defaults']} under the defaults")
    skyrl = sorted(map(str, (ROOT / "corpus/real/batches/skyrl").glob("*.safetensors")))
    expect("suggest over SkyRL's two paths", ["profile", "suggest", *skyrl], 0)
    expect("suggest a FIFO", ["profile", "suggest", str(batches / "fifo.toml")], 2, ["fifo.toml"])
    garbage = d / "garbage.safetensors"
    garbage.write_bytes(b"not a batch")
    expect("suggest a garbage file", ["profile", "suggest", str(good), str(garbage)], 2, [garbage.name])
    return f"issue37    {COUNTS['inputs'] - n0} profile-path and suggest cases, {time.time() - t0:.1f} s"


def main() -> int:
    if PYTHON is not None:
        return finish(time.time(), [python_group])
    if not os.path.exists(BIN):
        print(f"hostile: no binary at {BIN} (cargo build -p thdcheck first)", file=sys.stderr)
        return 2
    return finish(time.time(), [files_group, semantic_group, cli_group, adapters_group,
                                recipes_and_trees_group, profiles_group])


def finish(t0: float, groups: list) -> int:
    tmp = Path(tempfile.mkdtemp(prefix="thdcheck-hostile-"))
    try:
        for group in groups:
            print(group(tmp, PYTHON) if group is python_group else group(tmp), flush=True)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    c = COUNTS
    print(f"hostile: {c['inputs']} inputs in {time.time() - t0:.1f} s: {c['panics']} panics, "
          f"{c['hangs']} hangs, {c['wrong']} wrong verdicts")
    for f in FAILURES:
        print("  " + f)
    return 1 if FAILURES else 0


if __name__ == "__main__":
    sys.exit(main())
