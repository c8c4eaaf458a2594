"""thdcheck in your own tests: the packed-sequence (THD) gate, in-process.

    import thdcheck
    batch = collator(examples)
    thdcheck.assert_batch_ok(batch, profile="transformers")
    thdcheck.fuzz_collator(collator_fn, cases=500)        # in-process `thdcheck fuzz collator`

`check(batch)` reads the dict a collator returns (torch tensors, numpy arrays, Python ints and
lists; int32 or int64; `[T]` or `[B, S]`) and runs every rule of `thdcheck check` on it, the
same Rust code, without a dump: CPU tensors and arrays are read in place. The keys are each
stack's own (see the thdcheck README, "Packing formats read"); what the tensors cannot say is a
keyword argument, as it is an option of the command.
"""

from __future__ import annotations

import json
import operator
import os
import struct
from typing import Any, Callable, Iterable, Mapping, Optional

from thdcheck import _native, adapter
from thdcheck._native import BatchError

__all__ = [
    "BatchError",
    "FuzzFailure",
    "Guard",
    "GuardViolation",
    "MetricsGuard",
    "MetricsReport",
    "MetricsViolation",
    "ThdcheckWarning",
    "FuzzResult",
    "Outcome",
    "Report",
    "assert_batch_ok",
    "check",
    "fuzz_attention",
    "fuzz_collator",
    "fuzz_cp_split",
    "fuzz_logger",
    "fuzz_loss",
    "fuzz_packer",
    "fuzz_packer_session",
    "guard",
    "lightning_callback",
    "metrics",
]
__version__ = _native.__version__

_TORCH_DTYPES = {
    "torch.int64": "I64",
    "torch.int32": "I32",
    "torch.int16": "I16",
    "torch.int8": "I8",
    "torch.uint8": "U8",
    "torch.uint16": "U16",
    "torch.uint32": "U32",
    "torch.uint64": "U64",
    "torch.bool": "BOOL",
    "torch.float64": "F64",
    "torch.float32": "F32",
    "torch.float16": "F16",
    "torch.bfloat16": "BF16",
}
_NUMPY_DTYPES = {
    "<i8": "I64",
    "<i4": "I32",
    "<i2": "I16",
    "|i1": "I8",
    "|u1": "U8",
    "<u2": "U16",
    "<u4": "U32",
    "<u8": "U64",
    "|b1": "BOOL",
    "<f8": "F64",
    "<f4": "F32",
    "<f2": "F16",
}


class Outcome:
    """One rule's outcome: `rule` (its id, e.g. "position-ids"), `invariant`, `status`
    ("ok", "violated" or "skipped"), `detail` (one line), and for a violation `location`
    (segment, token, key ...), `expected`, `got` and `note`; `part` names the DPO part."""

    __slots__ = ("rule", "invariant", "status", "detail", "location", "expected", "got", "note", "part", "notes")

    def __init__(self, d: Mapping[str, Any], part: str | None) -> None:
        v = d.get("violation") or {}
        self.rule: str = d["id"]
        self.invariant: str = d["invariant"]
        self.status: str = d["status"]
        self.detail: str = d["detail"]
        self.location: dict = dict(v.get("at") or {})
        self.expected: str | None = v.get("expected")
        self.got: str | None = v.get("got")
        self.note: str | None = v.get("note")
        self.part = part
        self.notes: list = list(d.get("notes") or [])

    @property
    def violated(self) -> bool:
        return self.status == "violated"

    def __repr__(self) -> str:
        return f"Outcome({self.rule!r}, {self.status!r}, {self.detail!r})"


class Report:
    """What `thdcheck check` says of one batch. `ok` is True when no rule is violated;
    `violated` lists the rule ids; `outcomes` every rule's `Outcome`; `str(report)` is the text
    the command prints and `to_dict()` its JSON."""

    def __init__(self, text: str, json_text: str, violated: list, picture: Any = None) -> None:
        self._text = text
        self._json = json_text
        self.violated: list = list(violated)
        self._picture = picture

    def _repr_html_(self) -> Optional[str]:
        """The picture (Jupyter, VS Code): each row a strip of tokens, documents in alternating
        colours, padding and mock segments, trained labels, position restarts, the mask's view,
        CP chunks, every violation marked at its token. `repr` stays the plain text."""
        return self._picture.html() if self._picture is not None else None

    def __getstate__(self) -> dict:
        # The picture is native and not picklable (a DataLoader worker sends its reports to the
        # main process): a pickled report keeps its text and JSON, and shows no picture.
        return {**self.__dict__, "_picture": None}

    @property
    def ok(self) -> bool:
        return not self.violated

    @property
    def checked(self) -> bool:
        """Whether any rule judged the batch: a batch on which every rule was skipped is
        `UNCHECKED`, never a pass (`assert_batch_ok` raises on it, as `check --strict` fails)."""
        d = self.to_dict()
        return d.get("cp_shard") is not None or any(o.status != "skipped" for o in self.outcomes)

    def to_dict(self) -> dict:
        return json.loads(self._json)

    @property
    def outcomes(self) -> list:
        d = self.to_dict()
        out = [Outcome(c, p.get("part")) for p in d["packs"] for c in p["checks"]]
        out += [Outcome(c, None) for c in d["checks"]]
        return out

    def __bool__(self) -> bool:
        return self.ok

    def __str__(self) -> str:
        return self._text

    def __repr__(self) -> str:
        if not self.ok:
            return f"<thdcheck.Report FAIL: {', '.join(self.violated)}>"
        return f"<thdcheck.Report {'PASS' if self.checked else 'UNCHECKED'}>"


# How deep a nested list may go: a tensor has a handful of dimensions; a self-referencing list
# has no bottom.
_MAX_DEPTH = 32
_I64 = (-(1 << 63), (1 << 63) - 1)


def _tensor(key: str, value: Any):
    """(key, dtype, shape, data) for the native checker, or None for a value that is no tensor
    (a string, None, a dict, a list of strings: skipped, as the subprocess protocol skips
    them). A value that looks like a tensor but cannot be read as one (floats where a list of
    integers is, a ragged or self-referencing list, an int beyond int64, a sparse or meta
    tensor) raises `BatchError` naming the key, as the protocol calls it a schema error.

    The data is either `bytes` (copied) or `(owner, data_ptr, nbytes)`, read in place: `owner`
    is the object that owns (or references) that memory, kept alive until the check is done."""
    if value is None or isinstance(value, (str, bytes, Mapping)):
        return None
    t = type(value)
    if t.__module__.startswith("torch") and hasattr(value, "data_ptr"):
        return _torch(key, value)
    if hasattr(value, "__array_interface__"):
        return _array(key, value)
    if isinstance(value, bool):
        return key, "BOOL", [], bytes([value])
    if isinstance(value, int):
        return key, "I64", [], _pack_ints(key, [value], [])
    if isinstance(value, float):
        raise BatchError(
            f"`{key}` = {value!r}: a float where thdcheck reads integers (a count or an id); "
            "pass an int, or leave the key out"
        )
    if isinstance(value, (list, tuple)):
        return _list(key, value)
    return None


def _torch(key: str, value: Any):
    x = value.detach()
    layout = str(getattr(x, "layout", "torch.strided"))
    if getattr(x, "is_nested", False):
        raise BatchError(f"`{key}`: a nested tensor; pass a padded one (`.to_padded_tensor(pad)`)")
    if layout != "torch.strided":
        raise BatchError(f"`{key}`: a {layout} tensor is not read; pass a dense one (`.to_dense()`)")
    if x.device.type == "meta":
        raise BatchError(f"`{key}`: a meta tensor has no data to check")
    code = _TORCH_DTYPES.get(str(x.dtype))
    if code is None:
        raise BatchError(f"`{key}`: dtype {x.dtype} is not one thdcheck reads")
    if x.device.type != "cpu":
        x = x.cpu()
    if not x.is_contiguous():
        x = x.contiguous()
    return key, code, list(x.shape), (x, x.data_ptr(), x.numel() * x.element_size())


def _array(key: str, value: Any):
    """An object with `__array_interface__` (a numpy array or scalar, or another library's
    array). numpy makes it an ndarray that owns or references its memory, and that ndarray is
    what is kept alive: a numpy scalar's `__array_interface__` points into a temporary array
    that nothing else holds, and another library's `data` may be a buffer object instead of a
    pointer."""
    try:
        import numpy as np
    except ImportError:
        return _array_without_numpy(key, value)
    try:
        if isinstance(value, (np.ndarray, np.generic)):
            arr = np.asarray(value)
        else:
            arr = _foreign(np, value)
    except BatchError as e:
        raise BatchError(f"`{key}`: {e}") from None
    except Exception as e:  # a malformed interface: say which key had it
        raise BatchError(f"`{key}`: not readable as an array ({type(e).__name__}: {e})") from None
    if arr.dtype.kind in "US":  # strings, skipped as a list of strings is
        return None
    if arr.dtype.kind not in "biuf" or arr.dtype.fields is not None:
        raise BatchError(f"`{key}`: numpy dtype {arr.dtype} is not one thdcheck reads")
    if arr.dtype.byteorder == ">":  # big-endian: the reader's bytes are little-endian
        arr = arr.astype(arr.dtype.newbyteorder("<"))
    if not arr.flags.c_contiguous:
        arr = arr.copy(order="C")
    code = _NUMPY_DTYPES.get(arr.dtype.str)
    if code is None:
        raise BatchError(f"`{key}`: numpy dtype {arr.dtype} is not one thdcheck reads")
    ptr, _readonly = arr.__array_interface__["data"]  # an ndarray's is always (int, bool)
    return key, code, list(arr.shape), (arr, ptr, arr.nbytes)


def _foreign(np, value: Any):
    """Another library's `__array_interface__` as an ndarray. Its `data` is a pointer `(int,
    read-only)`, trusted as numpy trusts it, or a buffer object (or absent: the object's own
    buffer), read with `np.frombuffer`, which checks the buffer holds the shape (numpy's
    `asarray` does not, and reads past a short one)."""
    ai = value.__array_interface__
    data = ai.get("data") if isinstance(ai, Mapping) else None
    if isinstance(data, tuple):
        return np.asarray(value)
    if ai.get("strides") is not None:
        raise BatchError("a strided `__array_interface__` over a buffer object is not read; pass a contiguous array")
    shape = tuple(int(n) for n in ai.get("shape", ()))
    count = 1
    for n in shape:
        count *= n
    buf = memoryview(value if data is None else data)
    return np.frombuffer(buf, dtype=np.dtype(ai["typestr"]), count=count, offset=int(ai.get("offset", 0))).reshape(shape)


def _array_without_numpy(key: str, value: Any):
    """The same without numpy: the bytes copied through the buffer protocol."""
    ai = value.__array_interface__
    typestr = ai.get("typestr") if isinstance(ai, Mapping) else None
    code = _NUMPY_DTYPES.get(typestr)
    if code is None:
        raise BatchError(f"`{key}`: array dtype {typestr!r} is not one thdcheck reads")
    if ai.get("strides") is not None:
        raise BatchError(f"`{key}`: a strided array without numpy installed; pass a contiguous one")
    data = ai.get("data")
    source = value if data is None or isinstance(data, tuple) else data
    try:
        view = memoryview(source)
    except TypeError:
        raise BatchError(f"`{key}`: its `__array_interface__` data is not readable without numpy") from None
    shape = [int(n) for n in ai.get("shape", ())]
    return key, code, shape, view.cast("B").tobytes()


def _at(i: int, shape: list) -> str:
    """Flat index `i` of a tensor of `shape` as `[r][c]` (empty for a scalar)."""
    out = []
    for n in reversed(shape):
        out.append(f"[{i % n}]")
        i //= n
    return "".join(reversed(out))


def _pack_ints(key: str, flat: list, shape: list) -> bytes:
    try:
        return struct.pack(f"<{len(flat)}q", *flat)
    except struct.error:
        for i, x in enumerate(flat):
            if not _I64[0] <= x <= _I64[1]:
                raise BatchError(f"`{key}`{_at(i, shape)} = {x}: does not fit int64") from None
        raise


def _list(key: str, value: Any):
    """A (nested) list of ints as an I64 (or BOOL) tensor; a list of strings is skipped."""
    shape: list = []
    level = [value]
    above: set = set()  # the lists seen at shallower depths: one seen again is a cycle
    while level and isinstance(level[0], (list, tuple)):
        if len(shape) == _MAX_DEPTH:
            raise BatchError(f"`{key}`: lists nested more than {_MAX_DEPTH} deep")
        n = len(level[0])
        ids = set()
        for i, x in enumerate(level):
            if not isinstance(x, (list, tuple)) or len(x) != n:
                got = f"a list of {len(x)}" if isinstance(x, (list, tuple)) else repr(x)
                raise BatchError(
                    f"`{key}`: ragged nested lists: row {i} at depth {len(shape)} is {got}, "
                    f"expected a list of {n} (a tensor's rows have equal lengths)"
                )
            if id(x) in above:
                raise BatchError(f"`{key}`: a list that contains itself")
            ids.add(id(x))
        above |= ids
        shape.append(n)
        level = [y for x in level for y in x]
    if not level:
        return key, "I64", shape, b""
    if all(type(x) is int for x in level):
        return key, "I64", shape, _pack_ints(key, level, shape)
    if all(isinstance(x, bool) for x in level):
        return key, "BOOL", shape, bytes(level)
    if all(isinstance(x, str) for x in level):
        return None
    flat = []
    for i, x in enumerate(level):
        try:
            flat.append(operator.index(x))  # ints, bools, numpy integers
        except TypeError:
            if isinstance(x, (list, tuple)):
                raise BatchError(
                    f"`{key}`: ragged nested lists: {_at(i, shape)} is a list where its row "
                    "holds integers (a tensor's rows have equal depth)"
                ) from None
            what = "a float" if isinstance(x, float) else type(x).__name__
            raise BatchError(
                f"`{key}`{_at(i, shape)} = {x!r}: {what} where thdcheck reads integers "
                "(a list is read as an integer tensor)"
            ) from None
    return key, "I64", shape, _pack_ints(key, flat, shape)


def _tensors(batch: Mapping[str, Any], name: str) -> list:
    if not isinstance(batch, Mapping):
        raise BatchError(f"{name}: expected a dict of tensors, got {type(batch).__name__}")
    tensors = []
    for key, value in batch.items():
        t = _tensor(str(key), value)
        if t is not None:
            tensors.append(t)
    return tensors


def _metadata(metadata: Mapping[str, Any] | None) -> dict:
    if metadata is None:
        return {}
    if not isinstance(metadata, Mapping):
        raise TypeError(
            f"metadata={metadata!r}: expected a dict of what a dump carries as safetensors "
            "metadata, e.g. {'cp_rank': 0, 'cp_size': 2}"
        )
    return {str(k): str(v).lower() if isinstance(v, bool) else str(v) for k, v in metadata.items()}


def _int_option(name: str, value: Any, lo: int, hi: int) -> int | None:
    """An integer option, checked here so that a bad one is a `TypeError` / `ValueError` naming
    the option (not an `OverflowError` from the binding)."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        try:
            value = operator.index(value)  # numpy integers
        except TypeError:
            raise TypeError(f"{name}={value!r}: expected an integer") from None
    if not lo <= value <= hi:
        raise ValueError(f"{name}={value}: expected {lo}..={hi}")
    return int(value)


def _str_option(name: str, value: Any) -> str | None:
    if value is not None and not isinstance(value, str):
        raise TypeError(f"{name}={value!r}: expected a string")
    return value


def _profile_option(profile: Any) -> dict:
    """`profile=`: a built-in name, a path (str or os.PathLike) to a profile file, or a dict
    holding the profile's fields (docs/profiles.md), sent to the binding as JSON."""
    if profile is None:
        return {}
    if isinstance(profile, Mapping):
        try:
            return {"profile_json": json.dumps(dict(profile))}
        except (TypeError, ValueError) as e:
            raise TypeError(f"profile={profile!r}: a profile dict holds TOML values: {e}") from None
    if isinstance(profile, os.PathLike):
        return {"profile": os.fspath(profile)}
    if isinstance(profile, str):
        return {"profile": profile}
    raise TypeError(
        f"profile={profile!r}: expected a built-in profile name, a path to a profile file, or a "
        "dict of profile fields"
    )


def _key_map(map: Any) -> list:
    """`map={stack's key: key thdcheck reads}` as the binding's pairs."""
    if map is None:
        return []
    if not isinstance(map, Mapping):
        raise TypeError(
            f"map={map!r}: expected a dict {{key in the batch: key thdcheck reads}}, "
            "e.g. {'cu_seqlens_q': 'cu_seq_lens_q'}"
        )
    for k, v in map.items():
        if not isinstance(k, str) or not isinstance(v, str):
            raise TypeError(f"map: {k!r}: {v!r}: keys and values are key names (strings)")
    return list(map.items())


def check(
    batch: Mapping[str, Any],
    *,
    profile: str | os.PathLike | Mapping[str, Any] | None = None,
    cp_size: int | None = None,
    pad_to_multiple_of: int | None = None,
    pad_token_id: int | None = None,
    position_base: int | None = None,
    objective: str | None = None,
    labels: str | None = None,
    ignore_index: int | None = None,
    eos_token_id: int | None = None,
    causal: bool = False,
    mlm: bool = False,
    dialect: str | None = None,
    map: Mapping[str, str] | None = None,
    sentinel: int | None = None,
    metadata: Mapping[str, Any] | None = None,
    name: str = "batch",
) -> Report:
    """Checks one batch as `thdcheck check` checks a dumped file, and returns its `Report`.

    The keyword arguments are the command's options (`--profile`, `--cp-size`, ...);
    `profile` is a built-in profile's name, a path to a profile file, or a dict of profile
    fields (docs/profiles.md: `{"name": "mine", "extends": "trl", "pad_token_id": 0}`); without
    it, the `[tool.thdcheck]` table of the nearest `pyproject.toml` applies, as for the command.
    `metadata` holds what a dump would carry as safetensors metadata (e.g. `{"cp_rank": 0,
    "cp_size": 2}`). Raises `BatchError` (a `ValueError`) naming the key, index and value when
    the batch cannot be read, as the command exits 2.
    """
    name = str(name)
    i64 = _I64
    options = dict(
        name=name,
        metadata=_metadata(metadata),
        dialect=_str_option("dialect", dialect),
        map=_key_map(map),
        labels=_str_option("labels", labels),
        sentinel=None if sentinel is None else _int_option("sentinel", sentinel, *i64),
        position_base=_int_option("position_base", position_base, *i64),
        pad_token_id=_int_option("pad_token_id", pad_token_id, *i64),
        ignore_index=_int_option("ignore_index", ignore_index, *i64),
        eos_token_id=_int_option("eos_token_id", eos_token_id, *i64),
        **_profile_option(profile),
        objective=_str_option("objective", objective),
        cp_size=_int_option("cp_size", cp_size, 1, 1 << 16),
        pad_to_multiple_of=_int_option("pad_to_multiple_of", pad_to_multiple_of, 1, 1 << 16),
        causal=bool(causal),
        mlm=bool(mlm),
    )
    tensors = _tensors(batch, name)
    text, json_text, violated, picture = _native.check(tensors, **options)
    return Report(text, json_text, violated, picture)


def assert_batch_ok(batch: Mapping[str, Any], **options: Any) -> Report:
    """`check(batch, **options)`, raising an `AssertionError` whose message is the report when a
    rule is violated or no rule applied (pytest shows it in full). Returns the report otherwise."""
    report = check(batch, **options)
    if not report.ok:
        raise AssertionError(f"thdcheck: {', '.join(report.violated)} violated\n{report}")
    if not report.checked:
        raise AssertionError(f"thdcheck: no rule applied to the batch: not a pass\n{report}")
    return report


class FuzzFailure(AssertionError):
    """A fuzzed function broke an invariant. `str()` is the shrunk case, ready to replay;
    `report` is the command's JSON report (`failure.kind`, `checks`, `detail`, `request`, ...)."""

    def __init__(self, message: str, report: dict) -> None:
        super().__init__(message)
        self.report = report

    def _repr_html_(self) -> str:
        """The shrunk request and the answer, drawn (`fuzz --html`'s picture)."""
        return _native.fuzz_html(json.dumps(self.report))


class FuzzResult:
    """A fuzz run that passed: `cases` run, `cases_per_s`, and the JSON `report`."""

    def __init__(self, report: dict) -> None:
        self.report = report
        self.cases: int = report["cases"]
        self.cases_per_s: float = report["cases_per_s"]

    def __repr__(self) -> str:
        return f"<thdcheck.FuzzResult {self.report['target']}: {self.cases} cases passed>"

    def _repr_html_(self) -> str:
        """The run drawn as `fuzz --html` draws it (a pass: the cases and the seed)."""
        return _native.fuzz_html(json.dumps(self.report))


def _flags(options: Mapping[str, Any]) -> list:
    """Keyword arguments as the command's flags: `pad_token_id=0` -> `--pad-token-id 0`."""
    argv = []
    for key, value in options.items():
        if value is None or value is False:
            continue
        flag = "--" + key.replace("_", "-")
        if value is True:
            argv.append(flag)
        elif isinstance(value, (list, tuple)):
            for v in value:
                argv += [flag, str(v)]
        else:
            argv += [flag, str(value)]
    return argv


def _fuzz(target: str, handler: Callable[[dict], dict], call: str, options: Mapping[str, Any]):
    # The requests are answered as an adapter answers them (thdcheck.adapter, the same file as
    # adapters/python/thdcheck_adapter.py), only without the subprocess.
    def answer(line: str) -> str:
        return adapter.answer(handler, line)

    # Stop at the first failing class unless asked for the others (`first_failure=False`,
    # `also_failing=N`): in a test, the first shrunk failure is what is wanted, at once.
    options = dict(options)
    if "also_failing" not in options:
        options.setdefault("first_failure", True)

    report = json.loads(_native.fuzz([target, *_flags(options)], answer))
    if report["result"] == "pass":
        return FuzzResult(report)
    f = report["failure"]
    requests = f.get("requests") or [f["request"]]
    lines = [
        f"thdcheck fuzz {target}: {f['kind']} after {report['cases']} passing cases "
        f"(seed {report['seed']}), shrunk in {report['runs']} runs",
        f"  {f['detail']}",
    ]
    for r in requests:
        lines.append(f"  request   {json.dumps(r)}")
        shown = call(r) if callable(call) else call.format(**{k: repr(v) for k, v in r.items()})
        lines.append(f"  replay    {shown}")
    if f.get("response"):
        lines.append(f"  response  {f['response']}")
    # Without first_failure, every other distinct failure the run met, shrunk on its own.
    for g in report.get("failures", [])[1:]:
        lines.append(f"  also failed: `{g['class']}` at case {g['case']}, shrunk to")
        lines.append(f"    request   {json.dumps(g['request'])}")
        lines.append(f"    {g['detail'].splitlines()[0] if g['detail'] else ''}")
    for a in report.get("also_failing", []):
        lines.append(f"  also failing: `{a['class']}` in {a['cases']} more cases")
    raise FuzzFailure("\n".join(lines), report)


def fuzz_collator(
    collate: Callable[[list, Any], Mapping[str, Any]],
    *,
    cases: int = 256,
    seed: int = 0,
    **options: Any,
) -> FuzzResult:
    """Fuzz `collate(examples, max_seq_length) -> batch` in this process, as `thdcheck fuzz
    collator` fuzzes an adapter: the same generated examples, the same rules on every batch,
    the same shrinking. Raises `FuzzFailure` with the shrunk case; returns a `FuzzResult`.

    `examples` are `{"input_ids": [...]}` (DPO, `mode="dpo"`: `chosen_input_ids`,
    `rejected_input_ids`, `index`); the batch holds the keys a dumped file would (lists,
    numpy arrays or torch tensors). The keyword options are the command's: `mode`,
    `static_length`, `profile`, `pad_token_id`, `objective`, `add_bos`, `mlm`, ...
    """
    return _fuzz(
        "collator",
        adapter.collator_handler(collate),
        "collate({examples}, {max_seq_length})",
        dict(options, cases=cases, seed=seed),
    )


def fuzz_packer(
    pack: Callable[..., Any],
    *,
    cases: int = 256,
    seed: int = 0,
    rejects: tuple = (),
    **options: Any,
) -> FuzzResult:
    """Fuzz `pack(lengths, capacity, seed, **packer_options) -> (packs, dropped)` in this process,
    as `thdcheck fuzz packer` fuzzes an adapter: packs are lists of indices into `lengths` (or
    pieces `(index, start, end)`), `dropped` the indices dropped on purpose; the answer may be a
    dict with `packs`, `dropped`, `oversize`, `padding`, `ranks`. An exception of a type in
    `rejects` is a refusal (accepted only for a request that cannot be packed). Options are the
    command's: `first_fit`, `pad_sequences_to_multiple_of`, `max_seqs_per_pack`, `dp_size`,
    `pairs`, `fitting_only`, ... (the packer options the request sets are passed to `pack` as
    keyword arguments). Raises `FuzzFailure` with the shrunk case; returns a `FuzzResult`."""

    return _fuzz("packer", adapter.packer_handler(pack, rejects), "pack(lengths of {examples}, {capacity}, {seed})", dict(options, cases=cases, seed=seed))


def fuzz_packer_session(
    start: Callable[..., Any],
    *,
    cases: int = 256,
    seed: int = 0,
    rejects: tuple = (),
    **options: Any,
) -> FuzzResult:
    """Fuzz a streaming packer through sessions (`thdcheck fuzz packer --session`) in this
    process: `start(capacity, seed, **packer_options)` returns an object with `push(examples)`,
    `end_epoch()` (optional) and `finish()`, each returning the packs it emits now (lists of
    example ids) or a dict as `fuzz_packer`'s answers (plus `pending`). Every session pushes a
    few batches over 1 to 3 epochs; conservation is checked over the whole session. Options
    as `fuzz_packer`'s."""

    def call(r: dict) -> str:
        return {
            "start": f"packer = start({r.get('capacity')!r}, {r.get('seed')!r})",
            "push": f"packer.push({r.get('examples')!r})",
            "end_epoch": "packer.end_epoch()",
        }.get(r.get("op"), "packer.finish()")

    return _fuzz("packer", adapter.packer_session_handler(start, rejects), call, dict(options, cases=cases, seed=seed, session=True))


def fuzz_logger(log: Callable[[dict], Mapping[str, Any]], *, cases: int = 256, seed: int = 0, **options: Any) -> FuzzResult:
    """Fuzz `log(request) -> logged values` in this process, as `thdcheck fuzz logger` fuzzes an
    adapter (docs/protocol.md: the request holds `micro_batches`, `model`, `formula`, `cp_size`,
    `dp_size`, `num_gpus`, `step_time_s`, `peak_tflops_per_gpu`; return the values under the
    record names of `thdcheck metrics --json`). Options: `formula`, `layout`, `max_cp`, `rtol`, ..."""
    return _fuzz("logger", adapter.logger_handler(log), "log({micro_batches}, ...)", dict(options, cases=cases, seed=seed))


def fuzz_loss(loss: Callable[[list, int], Any], *, cases: int = 256, seed: int = 0, **options: Any) -> FuzzResult:
    """Fuzz `loss(ranks, cp_size) -> loss | {"loss", "parts", "n_valid_tokens"}` in this process,
    as `thdcheck fuzz loss` fuzzes an adapter: the reported loss is judged against the oracle's
    global loss for cp 1, 2, 4 and 8."""

    return _fuzz("loss", adapter.loss_handler(loss), "loss({ranks}, {cp_size})", dict(options, cases=cases, seed=seed))


def fuzz_cp_split(split: Callable[[dict, int], list], *, cases: int = 256, seed: int = 0, **options: Any) -> FuzzResult:
    """Fuzz `split(batch, cp_size) -> [rank dict, ...]` in this process, as `thdcheck fuzz
    cp-split` fuzzes an adapter; raising refuses the layout (allowed only when a slot is not a
    multiple of 2·cp_size)."""

    return _fuzz("cp-split", adapter.cp_split_handler(split), "split({input_ids}, {cp_size})", dict(options, cases=cases, seed=seed))


def fuzz_attention(attention: Callable[[dict], Any], *, cases: int = 256, seed: int = 0, **options: Any) -> FuzzResult:
    """Fuzz `attention(batch) -> out | (out, lse) | {"out", "lse"}` in this process, as
    `thdcheck fuzz attention` fuzzes an adapter: the output at every real token is judged against
    the oracle's per-document f64 attention (the FlashAttention rule of the request's dtype),
    documents must not see each other (bit-exact), nor a query a later key when `causal=True`.
    `batch` is the request (`q`, `k`, `v`, `cu_seqlens`, `cu_seqlens_padded`, `position_ids`,
    `heads`, `kv_heads`, `head_dim`, `dtype`, `causal`; with `cp_size` > 1, `ranks`: every
    rank's zigzag shard, answered with every rank's output). Options are the command's:
    `dtype="bf16"`, `cp_size=2`, `causal=True`, ...

    ```python
    import thdcheck
    def attention(batch):            # your varlen / document-masked attention
        ...                          # -> [T][heads][head_dim]
    thdcheck.fuzz_attention(attention, dtype="bf16", causal=True)
    ```
    """

    return _fuzz("attention", adapter.attention_handler(attention), lambda r: "attention(request)", dict(options, cases=cases, seed=seed))


def metrics(
    recipe: str,
    batches: Iterable[Mapping[str, Any]] = (),
    *,
    expect: Mapping[str, Any] | str | None = None,
    metadata: Mapping[str, Any] | None = None,
    **options: Any,
) -> dict:
    """What `thdcheck metrics --json --recipe RECIPE` prints, for micro-batches held in memory
    (each dict one micro-batch of the step, checked and counted as `--batch` files are): the
    recipe's record, the batch record (tokens, Σs², FLOPs, MFU, rates) under `record.batch`,
    and with `expect` (a logger's values, as a dict or a JSON file) the comparison, whose
    `comparison.mismatches` is 0 when every logged value agrees. Options are the command's:
    `dp_size`, `grad_acc`, `step_time`, `logger`, `rtol`, `profile`, `pad_token_id`, ...
    """
    import os
    import tempfile

    argv = ["--recipe", str(recipe), *_flags(options)]
    tmp = None
    if expect is not None and not isinstance(expect, (str, os.PathLike)):
        tmp = tempfile.NamedTemporaryFile("w", suffix=".json", delete=False)
        json.dump(adapter._plain(expect), tmp)
        tmp.close()
        expect = tmp.name
    if expect is not None:
        argv += ["--expect", str(expect)]
    try:
        mbs = [
            (f"batch {i}", _tensors(b, f"batch {i}"), _metadata(metadata))
            for i, b in enumerate(batches)
        ]
        return json.loads(_native.metrics(argv, mbs))
    finally:
        if tmp is not None:
            os.unlink(tmp.name)


from thdcheck.guard import Guard, GuardViolation, ThdcheckWarning, guard  # noqa: E402
from thdcheck.metrics_guard import MetricsGuard, MetricsReport, MetricsViolation  # noqa: E402
from thdcheck.lightning import lightning_callback  # noqa: E402
