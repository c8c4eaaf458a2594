"""`thdcheck.guard`: the gate on every batch of a live training run.

    loader = DataLoader(ds, batch_size=8, collate_fn=thdcheck.guard(collate, profile="trl"))
    trainer = Trainer(..., data_collator=thdcheck.guard(DataCollatorWithFlattening()))

A guard wraps a collate function and runs `thdcheck.check` on what it returns (every batch, or
every `every`-th), with the same options as `check`. What it does on a violation is
`on_violation`: "raise" (a `GuardViolation`, an `AssertionError` carrying the report), "warn"
(one `ThdcheckWarning` per rule and process), or "dump" (the batch written as a `.safetensors`
file that `thdcheck check` replays, beside the report and the command that replays it; then a
warning per rule). A dump replays on its own: the guard's read options and its profile are in
its metadata (a profile that is no built-in one written whole, as `STEM.profile.toml`, beside
it). The batch itself is returned unchanged.

A guard is picklable (a `DataLoader` with `num_workers > 0` copies it into every worker; each
worker then warns once per rule). CPU tensors and arrays are read in place; a tensor on a GPU is
copied to the CPU only when it can be one the rules read: integer and bool tensors, and float
tensors no larger than the largest integer tensor (a float padding mask, per-token weights),
never logits or hidden states.
"""

from __future__ import annotations

import json
import os
import shlex
import struct
import tempfile
import warnings
from typing import Any, Callable, Mapping, Optional

__all__ = ["Guard", "GuardViolation", "ThdcheckWarning", "guard"]


class ThdcheckWarning(UserWarning):
    """A batch broke a rule (a guard with `on_violation="warn"` or `"dump"`)."""


class GuardViolation(AssertionError):
    """A batch broke a rule (a guard with `on_violation="raise"`); `report` is its `Report`
    (None when re-raised from a `DataLoader` worker, which passes the message alone)."""

    def __init__(self, message: str, report: Any = None) -> None:
        super().__init__(message)
        self.report = report

    def _repr_html_(self) -> Optional[str]:
        """The report's picture, when there is a report (a notebook shows the batch)."""
        html = getattr(self.report, "_repr_html_", None)
        return html() if html is not None else None


_ACTIONS = ("raise", "warn", "dump")


class Guard:
    """The wrapped collate function (see the module's doc). `stats` counts the batches seen,
    checked and violated and, per rule id, the violations."""

    def __init__(
        self,
        collate_fn: Callable[..., Any],
        *,
        every: int = 1,
        on_violation: str = "raise",
        dump_dir: str | os.PathLike | None = None,
        metrics: Any = None,
        **options: Any,
    ) -> None:
        if not callable(collate_fn):
            raise TypeError(f"guard: {collate_fn!r} is not callable")
        if isinstance(every, bool) or not isinstance(every, int) or every < 1:
            raise ValueError(f"guard: every={every!r}: expected an integer >= 1")
        if on_violation not in _ACTIONS:
            raise ValueError(f"guard: on_violation={on_violation!r}: expected one of {', '.join(_ACTIONS)}")
        if metrics is not None and not callable(getattr(metrics, "_produced", None)):
            raise TypeError(f"guard: metrics={metrics!r}: expected a thdcheck.MetricsGuard")
        self.collate_fn = collate_fn
        self.metrics = metrics
        self.every = every
        self.on_violation = on_violation
        self.dump_dir = os.fspath(dump_dir) if dump_dir is not None else "thdcheck-dumps"
        if on_violation == "dump":
            _dump_dir_usable(self.dump_dir)
        self.options = dict(options)
        self.options.pop("name", None)  # each batch is named by its number
        self.stats = {"batches": 0, "checked": 0, "violated": 0, "rules": {}}
        self._warned: set = set()
        # A bad option is an error now, not at the first batch of a long run.
        from thdcheck import BatchError, check

        try:
            check(_PROBE, **self.options)
        except BatchError as e:
            # The options are fine; this batch is not what they describe. What the metadata
            # says is read before the batch is understood: a value that does not parse is an
            # error of `metadata=`, here as it would be on every batch.
            if "__metadata__" in str(e):
                raise ValueError(f"guard: metadata={options.get('metadata')!r}: {_unprefixed(e)}") from None

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        batch = self.collate_fn(*args, **kwargs)
        self.stats["batches"] += 1
        if (self.stats["batches"] - 1) % self.every == 0:
            self._check(batch)
        if self.metrics is not None:
            self.metrics._produced(batch)
        return batch

    def _check(self, batch: Any) -> None:
        from thdcheck import check

        self.stats["checked"] += 1
        name = f"batch {self.stats['batches'] - 1}"
        report = check(_readable(batch), name=name, **self.options)
        if report.ok:
            return
        self.stats["violated"] += 1
        for rule in report.violated:
            self.stats["rules"][rule] = self.stats["rules"].get(rule, 0) + 1
        message = f"thdcheck guard: {name} violates {', '.join(report.violated)}"
        if self.on_violation == "raise":
            raise GuardViolation(f"{message}\n{report}", report)
        failed = False
        if self.on_violation == "dump":
            try:
                path, replay = self._dump(batch, report)
            except OSError as e:
                # The run goes on (that is what "dump" is for): the violation is reported, and
                # why its batch is not on disk.
                failed = True
                message += f"; could not dump it to {self.dump_dir!r}: {type(e).__name__}: {e}"
            else:
                message += f"; dumped to {path} (replay: {replay})"
        new = [r for r in report.violated if r not in self._warned]
        if failed and "dump failed" not in self._warned:  # said once, whatever the rules
            self._warned.add("dump failed")
            new = new or list(report.violated)
        if new:
            self._warned.update(new)
            warnings.warn(f"{message}\n{report}", ThdcheckWarning, stacklevel=3)

    def _dump(self, batch: Mapping[str, Any], report: Any) -> tuple:
        """Writes the batch, the profile it was read under (unless a built-in one) and the report
        with its replay line; returns (the batch's path, the replay line)."""
        os.makedirs(self.dump_dir, exist_ok=True)
        stem = f"thdcheck-{os.getpid()}-{self.stats['batches'] - 1:06d}"
        path = os.path.join(self.dump_dir, stem + ".safetensors")
        metadata, options = _dump_metadata(self.options), dict(self.options)
        # The profile the check read: the option's, else the metadata's, else pyproject.toml's.
        spec = self.options.get("profile")
        if spec is None:
            spec = (self.options.get("metadata") or {}).get("profile")
        profile = _resolved_profile(spec)
        if profile is not None:
            builtin, text = profile
            if builtin:
                metadata["profile"] = text
            else:
                # Beside the dump, named relative to it: the reader looks for a metadata profile
                # in the batch's own folder (and nowhere else).
                name = stem + ".profile.toml"
                with open(os.path.join(self.dump_dir, name), "w", encoding="utf-8") as f:
                    f.write(f"# The profile thdcheck.guard read {stem}.safetensors under (its `extends` applied).\n")
                    f.write(text)
                metadata["profile"] = name
                options["profile"] = os.path.join(self.dump_dir, name)
        write_safetensors(path, _readable(batch), metadata)
        replay = _replay(path, options)
        with open(os.path.join(self.dump_dir, stem + ".txt"), "w", encoding="utf-8") as f:
            f.write(f"{report}\nreplay: {replay}\n")
        return path, replay

    def __repr__(self) -> str:
        return f"<thdcheck.Guard of {self.collate_fn!r}: {self.stats}>"


def guard(collate_fn: Callable[..., Any], **options: Any) -> Guard:
    """Wraps `collate_fn` in a `Guard`: `every=1`, `on_violation="raise"|"warn"|"dump"`,
    `dump_dir="thdcheck-dumps"`, `metrics=` a `MetricsGuard` that every batch is also given to
    (as a micro-batch of the step it trains), and the options of `thdcheck.check` (`profile`,
    `pad_token_id`, `cp_size`, ...)."""
    return Guard(collate_fn, **options)


def _is_torch(value: Any) -> bool:
    return type(value).__module__.startswith("torch") and hasattr(value, "data_ptr")


def _readable(batch: Any) -> Any:
    """The batch as the rules need it: tensors on a GPU copied to the CPU only when they can be
    read by a rule (see the module's doc); everything else as it is."""
    if not isinstance(batch, Mapping):
        return batch
    devices = [v for v in batch.values() if _is_torch(v) and v.device.type != "cpu"]
    if not devices:
        return batch
    widest = max(
        (v.numel() for v in batch.values() if _is_torch(v) and not v.is_floating_point()),
        default=0,
    )
    out = {}
    streams = set()
    for key, value in batch.items():
        # A meta tensor has no data to copy: `check` refuses it with a `BatchError` naming it.
        if _is_torch(value) and value.device.type not in ("cpu", "meta"):
            if value.is_floating_point() and value.numel() > widest:
                continue  # logits, hidden states: no rule reads them
            try:
                value = _to_host(value.detach(), streams)
            except Exception as e:
                from thdcheck import BatchError

                raise BatchError(
                    f"`{key}`: a {value.device.type} tensor that cannot be copied to the CPU "
                    f"to be checked ({type(e).__name__}: {e})"
                ) from e
        out[key] = value
    for stream in streams:
        stream.synchronize()  # the copies were queued behind the collate's own work
    return out


def _to_host(x: Any, streams: set) -> Any:
    """A CUDA tensor copied into page-locked host memory without blocking (torch's caching host
    allocator reuses the buffers batch after batch), its stream noted for one synchronization
    after all the copies. A plain `.cpu()` writes into fresh pageable memory: on an H100 the guard
    took 15.5 ms on a 1e6-token batch that way, 4.4 ms this way (bench/python_guard_cuda.py).
    Other devices: `.cpu()`."""
    import torch

    if x.device.type != "cuda":
        return x.to("cpu")
    x = x.contiguous()
    host = torch.empty(x.shape, dtype=x.dtype, pin_memory=True)
    host.copy_(x, non_blocking=True)
    streams.add(torch.cuda.current_stream(x.device))
    return host


# A probe the options are tried on at construction: readable under the defaults (documents from
# position restarts), so that what the metadata says (`cp_rank` too) is read.
_PROBE = {"input_ids": [[1, 2]], "position_ids": [[0, 1]]}

# The read options the reader also takes from a batch's `__metadata__` (reader/src/formats/mod.rs
# `ReadOptions::with_metadata`, reader/src/checks.rs `with_metadata`), under the same names.
# `dialect`, `map` and `sentinel` have no metadata key: the replay line carries them.
_METADATA_OPTIONS = (
    "pad_token_id", "position_base", "ignore_index", "eos_token_id", "objective", "labels",
    "pad_to_multiple_of", "cp_size",
)


def _unprefixed(e: Exception) -> str:
    """A probe's error without the probe's batch name."""
    return str(e).split(": ", 1)[1] if str(e).startswith("batch: ") else str(e)


def _dump_dir_usable(path: str) -> None:
    """`dump_dir` made (if need be) and written to once, at construction: a path that cannot
    hold a dump is an error now, not at the first violation of a long run."""
    if path == "":
        raise ValueError(
            "guard: dump_dir='': an empty path; name the directory the dumps go to "
            "(the default is 'thdcheck-dumps')"
        )
    try:
        os.makedirs(path, exist_ok=True)
        with tempfile.TemporaryFile(dir=path):
            pass
    except OSError as e:
        what = "a file, not a directory" if os.path.isfile(path) else (e.strerror or str(e))
        at = f" ({e.filename})" if e.filename and os.fspath(e.filename) != path else ""
        raise ValueError(f"guard: dump_dir={path!r}: no directory a dump can be written to: {what}{at}") from None


def _dump_metadata(options: Mapping[str, Any]) -> dict:
    """The dump's `__metadata__`: the guard's `metadata=`, then its read options, as the reader
    reads them from a file, so that `thdcheck check DUMP` reads the batch as the guard did."""
    meta = dict(options.get("metadata") or {})
    for key in _METADATA_OPTIONS:
        value = options.get(key)
        if value is None:
            continue
        if key == "cp_size" and "cp_rank" in meta:
            continue  # beside `cp_rank`, metadata `cp_size` is the shard group's: the replay line keeps it
        meta[key] = value
    if options.get("causal"):
        meta["causal"] = True
    if options.get("mlm"):
        meta["mlm"] = True
    return meta


def _resolved_profile(profile: Any) -> tuple | None:
    """`(True, name)` for a built-in profile, `(False, TOML text)` for any other (a file, a dict,
    the project's `pyproject.toml`), None when no profile is named."""
    from thdcheck import _native, _profile_option

    return _native.resolved_profile(**_profile_option(profile))


def _replay(path: str, options: Mapping[str, Any]) -> str:
    """The command that replays a dump, one line a shell reads as it is meant (paths with spaces,
    a profile written beside the dump in place of a dict)."""
    argv = ["thdcheck", "check", path]
    for key, value in options.items():
        if key in ("metadata", "name") or value is None or value is False:
            continue
        flag = "--" + key.replace("_", "-")
        if value is True:
            argv.append(flag)
        elif key == "map":
            for k, v in value.items():
                argv += [flag, f"{k}={v}"]
        else:
            argv += [flag, os.fspath(value) if isinstance(value, os.PathLike) else str(value)]
    return shlex.join(argv)


def write_safetensors(path: str, batch: Mapping[str, Any], metadata: Mapping[str, Any] | None = None) -> None:
    """Writes the tensors of `batch` (everything `thdcheck.check` reads as a tensor, converted
    the same way) as the `.safetensors` file `safetensors.torch.save_file` would write, so that
    `thdcheck check` replays the verdict; no `safetensors` package needed."""
    from thdcheck import _metadata, _tensors

    header: dict = {}
    chunks = []
    offset = 0
    for key, code, shape, data in _tensors(batch, "batch"):
        raw = data if isinstance(data, bytes) else _owned_bytes(data)
        header[key] = {"dtype": code, "shape": list(shape), "data_offsets": [offset, offset + len(raw)]}
        chunks.append(raw)
        offset += len(raw)
    meta = _metadata(metadata)
    if meta:
        header["__metadata__"] = meta
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)  # the data starts 8-byte aligned, as save_file writes it
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for c in chunks:
            f.write(c)


def _owned_bytes(held: tuple) -> bytes:
    """The bytes of `(owner, data_ptr, nbytes)`: a numpy array or a CPU torch tensor."""
    owner, _ptr, nbytes = held
    if hasattr(owner, "tobytes"):
        return owner.tobytes()
    # A torch tensor: through its untyped storage view, without numpy.
    flat = owner.reshape(-1)
    import ctypes

    return ctypes.string_at(flat.data_ptr(), nbytes)
