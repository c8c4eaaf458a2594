"""Test helpers: the repository's committed batches, read with numpy (no safetensors package),
and the verdicts `thdcheck check` must give them (their expected.toml)."""

from __future__ import annotations

import json
import re
import struct
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[2]

_DTYPES = {
    "I64": "<i8", "I32": "<i4", "I16": "<i2", "I8": "i1", "U8": "u1", "U16": "<u2", "U32": "<u4",
    "U64": "<u8", "BOOL": "?", "F64": "<f8", "F32": "<f4", "F16": "<f2",
}


def load(path: Path):
    """(tensors as numpy arrays, metadata) of a .safetensors file."""
    raw = path.read_bytes()
    n = struct.unpack("<Q", raw[:8])[0]
    header = json.loads(raw[8 : 8 + n])
    data = raw[8 + n :]
    meta = header.pop("__metadata__", {}) or {}
    out = {}
    for name, e in header.items():
        a, b = e["data_offsets"]
        arr = np.frombuffer(data[a:b], dtype=_DTYPES[e["dtype"]]).reshape(e["shape"])
        out[name] = arr.copy()  # writable and owned, as a collator's output is
    return out, meta


def expected(root: Path) -> dict:
    """path relative to root -> sorted violated rule ids ("error": unreadable), from the
    directory's expected.toml (the format written by the repository's generators)."""
    out = {}
    for line in (root / "expected.toml").read_text().splitlines():
        m = re.match(r'^"([^"]+)"\s*=\s*\[(.*)\]', line.strip())
        if m:
            out[m.group(1)] = sorted(re.findall(r'"([^"]+)"', m.group(2)))
    return out


def _profile_file_by_path(p: Path, meta: dict) -> dict:
    """A profile file the metadata names beside the batch (the blind stacks'), by its full path:
    a batch held in memory names built-in profiles only, so `in_memory` passes it as `profile=`,
    as a user would."""
    if meta.get("profile", "").endswith(".toml"):
        meta = dict(meta, profile=str(p.parent / meta["profile"]))
    return meta


def in_memory(meta: dict) -> tuple[dict, str | None]:
    """`(metadata, profile=)` of a batch checked in memory: a profile file leaves the metadata."""
    if meta.get("profile", "").endswith(".toml"):
        meta = dict(meta)
        return meta, meta.pop("profile")
    return meta, None


def every_file(root: Path):
    """Every batch file under root, CP rank files included, with its expected verdict (None for
    a CP rank file: the command judges it as its group, not alone)."""
    exp = expected(root)
    for p in sorted(root.rglob("*.safetensors")):
        rel = p.relative_to(root).as_posix()
        tensors, meta = load(p)
        meta = _profile_file_by_path(p, meta)
        cp_rank = "cp_rank" in meta or "cp_rank" in tensors
        yield rel, tensors, meta, None if cp_rank else exp.get(rel, [])


def cases(root: Path):
    """Every batch file under root that is checked alone (CP rank files are judged as their
    group, which this package does not reassemble), with its expected verdict."""
    exp = expected(root)
    for p in sorted(root.rglob("*.safetensors")):
        rel = p.relative_to(root).as_posix()
        tensors, meta = load(p)
        if "cp_rank" in meta or "cp_rank" in tensors:
            continue
        meta = _profile_file_by_path(p, meta)
        yield rel, tensors, meta, exp.get(rel, [])
