"""`thdcheck.MetricsGuard`: every value a training loop logs, held against the step's batches.

    mg = thdcheck.MetricsGuard(model=config, logger="my-trainer", profile="mystack.toml")
    for step in ...:
        for mb in micro_batches:
            mg.batch(mb)                      # or collate through mg.guard(collate_fn)
            ...
        mg.step(logged)                       # the dict the logger writes for this step

`step(logged)` runs `thdcheck metrics` (the Rust core, through `thdcheck.metrics`) on the
micro-batches recorded since the last step, with the logged dict as `--expect`: tokens, valid
tokens, sequences, Σsᵢ², FLOPs, TFLOP/s, MFU and tokens/s are recomputed under the model's
dimensions (a recipe file, a `transformers` config, or a dict of the recipe's `[model]` keys)
and every logged value that disagrees is reported under the key the logger used, with its rule
(`logged-tokens`, `logged-flops`, `logged-rate`). Logged keys are read as `thdcheck metrics`
reads them: under a logger's names (`logger=`, a `[loggers.NAME]` table of a built-in profile or
of `profile=`; docs/loggers.md), else as record keys (`batch.tokens.real`).

`mg.callback()` is the same as a `transformers.TrainerCallback`: the micro-batches come from
the collate guard (`data_collator=mg.guard(collator)`), the logged dict from `on_log`.
"""

from __future__ import annotations

import collections
import json
import math
import os
import re
import tempfile
import warnings
import weakref
from typing import Any, Callable, Mapping

__all__ = ["MetricsGuard", "MetricsReport", "MetricsViolation", "LoggedValue"]

# What the binding says when no logged key maps onto the record (an eval log, the trainer's
# final summary): not an error for a guard, only nothing to compare.
_NONE_COMPARABLE = "none of the logged values can be compared"

# Record keys whose value depends on what the guard may not know. A rate divides by the step
# time; an MFU by the peak too; FLOPs (and what divides them) need the model's dimensions.
_TIMED = ("per_second", "tflops", "mfu_pct")
_PEAKED = ("mfu_pct",)
_MODELLED = ("flops", "mfu_pct")

_ACTIONS = ("raise", "warn")
_FORMULAS = {"megatron_lm": "megatron_bridge", "bionemo_perf_logger": "bionemo"}
_CAUSAL = {"megatron_lm": "half", "bionemo_perf_logger": "none"}

# transformers `model_type`s whose MLP is gated (gate, up, down: 3 projections) or not (2).
_GATED = {
    "llama", "mistral", "mixtral", "qwen2", "qwen3", "gemma", "gemma2", "gemma3", "gemma3_text",
    "phi3", "olmo", "olmo2", "olmo3", "granite", "cohere", "cohere2", "internlm2", "smollm3",
    "glm", "glm4", "exaone", "helium", "ministral", "seed_oss", "apertus",
}
_PLAIN_MLP = {
    "gpt2", "gpt_neox", "gptj", "opt", "bert", "roberta", "esm", "bloom", "falcon",
    "starcoder2", "gpt_bigcode", "phi", "codegen", "distilbert", "xlm-roberta",
}


class MetricsViolation(AssertionError):
    """A logged value disagrees with the step's batches (`on_violation="raise"`); `report` is the
    step's `MetricsReport`."""

    def __init__(self, message: str, report: Any = None) -> None:
        super().__init__(message)
        self.report = report


class LoggedValue:
    """One logged value against the batches: `key` (as the logger wrote it), `record` (the
    `thdcheck metrics` record key it is compared with), `logged`, `expected`, `status` ("ok",
    "mismatch", "not-recomputed", "not-checked" or "unknown"), and for a mismatch `rule`
    (`logged-tokens`, `logged-flops`, `logged-rate`) and `note` (what the gap looks like:
    "logged × 2 = expected: ... CP factor 2"); `note` also says why a value was not checked."""

    __slots__ = ("key", "record", "logged", "expected", "status", "rule", "note")

    def __init__(self, d: Mapping[str, Any]) -> None:
        detail = d.get("detail")
        self.key: str = d["key"]
        self.record: str | None = d.get("record")
        self.logged: Any = d.get("logged")
        self.expected: Any = d.get("expected")
        self.status: str = d["status"]
        self.rule: str | None = detail.get("id") if isinstance(detail, Mapping) else None
        note = detail.get("note") if isinstance(detail, Mapping) else detail
        self.note: str | None = note if isinstance(note, str) else None

    def line(self) -> str:
        via = f" (= {self.record})" if self.record and self.record != self.key else ""
        key = f"{self.key}{via}"
        logged = json.dumps(self.logged)
        if self.status == "ok":
            return f"  ok       {key:<52} logged {logged:<24} expected {self.expected}"
        if self.status == "mismatch":
            return (
                f"  MISMATCH {key:<52} logged {logged:<24} expected {self.expected}\n"
                f"           {self.rule}: {self.note}"
            )
        if self.status == "unknown":
            return f"  unknown  {key:<52} logged {logged:<24} not a key thdcheck knows: ignored"
        return f"  n/a      {key:<52} logged {logged:<24} {self.status}: {self.note}"

    def to_dict(self) -> dict:
        return {k: getattr(self, k) for k in self.__slots__}

    def __repr__(self) -> str:
        return f"LoggedValue({self.key!r}, {self.status!r}, logged={self.logged!r}, expected={self.expected!r})"


class MetricsReport:
    """What one step's check found. `ok` is True when no logged value disagrees; `mismatches`
    lists those that do (`LoggedValue`s, each under the logger's key, with its rule), `violated`
    their rule ids, `values` every logged value's outcome, `checked` how many were compared,
    `record` what thdcheck recomputed (`record.batch` of `thdcheck metrics --json`),
    `warnings` the batch rules the micro-batches broke while being counted; `str(report)` is
    the text, `to_dict()` the JSON-able form."""

    def __init__(self, step: int, micro_batches: int, values: list, record: dict, logger: str | None,
                 warnings: list, note: str | None = None) -> None:
        self.step = step
        self.micro_batches = micro_batches
        self.values: list = values
        self.record: dict = record
        self.logger = logger
        self.warnings: list = list(warnings)
        self.note = note

    @property
    def mismatches(self) -> list:
        return [v for v in self.values if v.status == "mismatch"]

    @property
    def violated(self) -> list:
        return sorted({v.rule for v in self.mismatches if v.rule})

    @property
    def checked(self) -> int:
        return sum(v.status in ("ok", "mismatch") for v in self.values)

    @property
    def ok(self) -> bool:
        return not self.mismatches

    def __bool__(self) -> bool:
        return self.ok

    def to_dict(self) -> dict:
        return {
            "step": self.step,
            "micro_batches": self.micro_batches,
            "logger": self.logger,
            "ok": self.ok,
            "checked": self.checked,
            "mismatches": len(self.mismatches),
            "violated": self.violated,
            "values": [v.to_dict() for v in self.values],
            "record": self.record,
            "warnings": self.warnings,
            "note": self.note,
        }

    def __str__(self) -> str:
        who = f" as {self.logger}'s keys" if self.logger else ""
        mb = f"{self.micro_batches} micro-batch{'es' if self.micro_batches != 1 else ''}"
        head = f"step {self.step} ({mb}): {len(self.mismatches)} of {self.checked} compared values disagree{who}"
        lines = [head] + [v.line() for v in self.values]
        if self.note:
            lines.append(f"  {self.note}")
        lines += [f"  warning: {w}" for w in self.warnings]
        return "\n".join(lines)

    def __repr__(self) -> str:
        state = "PASS" if self.ok else "FAIL: " + ", ".join(v.key for v in self.mismatches)
        return f"<thdcheck.MetricsReport step {self.step} {state}>"


class MetricsGuard:
    """Recomputes what a logger logs from the micro-batches of each step (see the module's doc).

    `model`: a recipe file (`.toml`, golden/tests/recipes/: model, FLOPs formula, GPUs and peak
    come from it), a `transformers` config (`LlamaConfig(...)`, `AutoConfig.from_pretrained`),
    a dict of the recipe's `[model]` keys (`layers`, `hidden`, `heads`, `kv_heads`, `head_dim`,
    `ffn`, `mlp_projections`, `vocab`), or None (counts only: FLOPs and MFU are not checked).
    Without a recipe, `num_gpus` (default 1), `peak_tflops` (the peak MFU divides by, TFLOP/s
    per GPU; unset: MFU is not checked), `flops_formula` ("megatron_lm", the default, or
    "bionemo_perf_logger"), `flops_causal` ("half" / "none" / "exact_triangle"; default the
    formula's own) and `hardware_view` ("varlen" / "whole_pack") say what a recipe says;
    `mlp_projections` overrides what the config's `model_type` implies.

    `logger`, `profile`: the logged keys' names, as `thdcheck metrics --logger NAME --profile
    P` reads them (`profile` is also how the batches are read; a name, a `.toml` path or a dict
    of profile fields, which may hold `loggers`). `step_time` (seconds, every step),
    `step_time_key` (the logged key that holds the logger's own step time) or `step(...,
    step_time=)`: the time rates divide by; without one, rates are not checked. `dp_size`: the
    batches are one of this many data-parallel ranks'. `grad_acc`: each step must have this many
    micro-batches. `rtol`, `atol`: the tolerance on rates. `on_violation`: "raise" a
    `MetricsViolation`, or "warn" (one `ThdcheckWarning` per logged key and rule). The other
    keyword options are those of `thdcheck.check` (`pad_token_id`, `cp_size`, `metadata`, ...),
    for reading the batches.
    """

    def __init__(
        self,
        model: Any = None,
        *,
        logger: str | None = None,
        profile: Any = None,
        on_violation: str = "raise",
        step_time: float | None = None,
        step_time_key: str | None = None,
        num_gpus: int | None = None,
        peak_tflops: float | None = None,
        flops_formula: str | None = None,
        flops_causal: str | None = None,
        hardware_view: str | None = None,
        mlp_projections: int | None = None,
        dp_size: int = 1,
        grad_acc: int | None = None,
        rtol: float | None = None,
        atol: float | None = None,
        metadata: Mapping[str, Any] | None = None,
        **options: Any,
    ) -> None:
        if on_violation not in _ACTIONS:
            raise ValueError(f"MetricsGuard: on_violation={on_violation!r}: expected one of {', '.join(_ACTIONS)}")
        if logger is not None and not isinstance(logger, str):
            raise TypeError(f"MetricsGuard: logger={logger!r}: expected a logger's name")
        if step_time_key is not None and not isinstance(step_time_key, str):
            raise TypeError(f"MetricsGuard: step_time_key={step_time_key!r}: expected a logged key")
        self.step_time = _seconds("step_time", step_time)
        self.step_time_key = step_time_key
        self.on_violation = on_violation
        self.logger = logger
        if isinstance(profile, Mapping):
            _check_profile_dict(profile)  # named `profile=` and its field, not a temporary file
        self.profile = profile
        self.metadata = dict(metadata) if metadata is not None else None
        self.options = dict(options)
        self.options.pop("name", None)
        self._source: str | None = None
        recipe_keys = dict(num_gpus=num_gpus, peak_tflops=peak_tflops, flops_formula=flops_formula,
                           flops_causal=flops_causal, hardware_view=hardware_view)
        dims = None
        if _is_recipe(model):
            given = [k for k, v in recipe_keys.items() if v is not None]
            if given or mlp_projections is not None:
                raise ValueError(
                    f"MetricsGuard: {', '.join(given or ['mlp_projections'])} given with the recipe "
                    f"{os.fspath(model)}: the recipe states them (edit it, or pass model= a config)"
                )
            self._recipe_file: str | None = os.fspath(model)
            self._recipe_text: str | None = None
            self._source = self._recipe_file
            self._known = {"model": True, "peak": True}
        else:
            dims = _model_section(model, mlp_projections) if model is not None else None
            self._recipe_file = None
            self._recipe_text = _recipe_toml(dims, **recipe_keys)
            self._known = {"model": dims is not None, "peak": peak_tflops is not None and dims is not None}
        # The command's flags, once: the read options, the logger's, the step's.
        flags: dict = {k: v for k, v in self.options.items() if k not in ("map", "profile")}
        if self.options.get("map") is not None:
            m = self.options["map"]
            if not isinstance(m, Mapping):
                raise TypeError(f"MetricsGuard: map={m!r}: expected a dict {{key in the batch: key thdcheck reads}}")
            flags["map"] = [f"{k}={v}" for k, v in m.items()]
        flags.update(dp_size=_count("dp_size", dp_size), rtol=rtol, atol=atol)
        self._flags = flags
        self.grad_acc = None if grad_acc is None else _count("grad_acc", grad_acc)
        self.stats: dict = {"steps": 0, "checked": 0, "violated": 0, "keys": {}}
        self.last_report: MetricsReport | None = None
        self._reset_transient()
        # A bad model, recipe, profile, logger or option is an error now, not at the first log of
        # a long run: one step of two tokens, compared with a key no logger has.
        from thdcheck import BatchError, metrics

        try:
            # Two tokens the defaults read (documents from position restarts), so that what the
            # metadata says is read too.
            metrics(self._recipe(), [{"input_ids": [[1, 2]], "position_ids": [[0, 1]]}], expect={"thdcheck probe": 0},
                    metadata=self.metadata, **self._command_options(None))
        except BatchError as e:
            if "__metadata__" in str(e):  # read before the probe's batch: `metadata=` is at fault
                raise ValueError(f"MetricsGuard: metadata={metadata!r}: {str(e).split(': ', 1)[-1]}") from None
            made = self._files.get("recipe")
            if made is not None and made in str(e):
                # A recipe made from `model=` and the recipe options: name the argument at fault.
                raise _recipe_error(e, made, dims, isinstance(model, Mapping), recipe_keys) from None
            made = self._files.get("profile")
            if made is not None and made in str(e):
                raise ValueError(f"MetricsGuard: {str(e).replace(made, 'profile=')}") from None
            if _NONE_COMPARABLE not in str(e) and not str(e).startswith("batch 0"):
                raise
        if self._recipe_file is not None:
            # `thdcheck metrics` builds the recipe's own simulated step on every call (tens to
            # hundreds of ms); the step record needs only its model, formula, GPUs and timing.
            self._recipe_text = _step_recipe(self._recipe_file)
            if self._recipe_text is not None:
                self._recipe_file = None
                self._source = os.fspath(model)

    # -- the state a copy (pickle, a DataLoader worker) does not carry --------------------------

    def _reset_transient(self) -> None:
        self._batches: list = []
        self._fifo: collections.deque | None = None
        self._files: dict = {}
        self._warned: set = set()

    def __getstate__(self) -> dict:
        state = dict(self.__dict__)
        for k in ("_batches", "_fifo", "_files", "_warned"):
            state.pop(k, None)
        state["_callback_mode"] = self._fifo is not None
        return state

    def __setstate__(self, state: dict) -> None:
        callback_mode = state.pop("_callback_mode", False)
        self.__dict__.update(state)
        self._reset_transient()
        if callback_mode:
            self._fifo = collections.deque()

    # -- files the command reads ---------------------------------------------------------------

    def _file(self, what: str, text: str) -> str:
        path = self._files.get(what)
        if path is None:
            fd, path = tempfile.mkstemp(prefix=f"thdcheck-{what}-", suffix=".toml")
            with os.fdopen(fd, "w") as f:
                f.write(text)
            weakref.finalize(self, _unlink, path)
            self._files[what] = path
        return path

    def _recipe(self) -> str:
        return self._recipe_file or self._file("recipe", self._recipe_text or "")

    @property
    def recipe(self) -> str | None:
        """The recipe file `model=` named, if one did."""
        return self._source

    def _profile(self) -> str | None:
        p = self.profile
        if p is None:
            return None
        if isinstance(p, Mapping):
            return self._file("profile", _toml(p, "profile"))
        if isinstance(p, (str, os.PathLike)):
            return os.fspath(p)
        raise TypeError(
            f"MetricsGuard: profile={p!r}: expected a built-in profile name, a path to a profile "
            "file, or a dict of profile fields"
        )

    def _command_options(self, step_time: float | None) -> dict:
        out = dict(self._flags, logger=self.logger, profile=self._profile(), step_time=step_time)
        return out

    # -- recording -----------------------------------------------------------------------------

    def batch(self, batch: Mapping[str, Any]) -> None:
        """Records one micro-batch of the current step (the dict a collator returns: torch
        tensors, numpy arrays, lists). Its tensors are held, not copied, until `step()`."""
        if not isinstance(batch, Mapping):
            raise TypeError(f"MetricsGuard.batch: expected a dict of tensors, got {type(batch).__name__}")
        self._batches.append(dict(batch))

    def _produced(self, batch: Any) -> None:
        """A batch the collate guard returned: a micro-batch of this step, or (under the Trainer
        callback) queued until the trainer says which step trained it."""
        if not isinstance(batch, Mapping):
            return
        if self._fifo is not None:
            self._fifo.append(dict(batch))
        else:
            self.batch(batch)

    def guard(self, collate_fn: Callable[..., Any], **options: Any) -> Any:
        """`thdcheck.guard(collate_fn, metrics=self, ...)`: checks every batch as `thdcheck.guard`
        does (with this guard's read options, e.g. `profile` and `pad_token_id`, unless given)
        and records it as a micro-batch."""
        from thdcheck.guard import Guard

        read = dict(self.options)
        if self.metadata is not None:
            read["metadata"] = self.metadata
        if self.profile is not None:
            read["profile"] = self.profile
        read.update(options)
        return Guard(collate_fn, metrics=self, **read)

    # -- the check -----------------------------------------------------------------------------

    def step(self, logged: Mapping[str, Any], *, step_time: float | None = None) -> MetricsReport:
        """Compares `logged` (the dict the logger writes for this step) with the micro-batches
        recorded since the last `step()`, then forgets them. Returns the `MetricsReport`; on a
        mismatch raises `MetricsViolation` or warns, as `on_violation` says."""
        if not self._batches:
            raise ValueError(
                "MetricsGuard.step: no micro-batches recorded for this step: call .batch(mb) for each, "
                "or collate through .guard(collate_fn)"
            )
        batches, self._batches = self._batches, []
        report = self._compare(logged, batches, step_time)
        self._act(report)
        return report

    def _compare(self, logged: Mapping[str, Any], batches: list, step_time: float | None) -> MetricsReport:
        from thdcheck import BatchError, metrics

        if not isinstance(logged, Mapping):
            raise TypeError(f"MetricsGuard.step: logged={logged!r}: expected the dict the logger writes")
        plain = _json_values(logged)
        t = _seconds("step_time", step_time)
        if t is None and self.step_time_key is not None:
            t = _logged_seconds(plain.get(self.step_time_key))
        if t is None:
            t = self.step_time
        options = self._command_options(t)
        if self.grad_acc is not None:
            options["grad_acc"] = self.grad_acc
        step = self.stats["steps"]
        try:
            doc = metrics(self._recipe(), batches, expect=plain, metadata=self.metadata, **options)
        except BatchError as e:
            if _NONE_COMPARABLE not in str(e):
                raise
            note = "none of the logged values is one this guard can recompute" + (
                f" under {self.logger}'s keys" if self.logger else " (record keys such as batch.tokens.real, or give logger=)"
            )
            return MetricsReport(step, len(batches), [], {}, self.logger, [], note)
        cmp = doc.get("comparison") or {}
        values = [self._qualified(LoggedValue(v), t) for v in cmp.get("values", [])]
        record = doc["record"].get("batch", {})
        return MetricsReport(step, len(batches), values, record, cmp.get("logger"), doc.get("warnings", []))

    def _qualified(self, v: LoggedValue, step_time: float | None) -> LoggedValue:
        """A value the command compared with what the guard cannot know (the step time, the
        peak, the model) is reported as not checked, with the missing input named."""
        if v.status not in ("ok", "mismatch") or not v.record:
            return v
        rec = v.record
        why = None
        if not self._known["model"] and any(m in rec for m in _MODELLED):
            why = "needs the model's dimensions: give model= (a recipe, a transformers config or a dict)"
        elif step_time is None and any(m in rec for m in _TIMED):
            why = "a rate: no step time (give step_time=, step_time_key= or step(..., step_time=))"
        elif not self._known["peak"] and any(m in rec for m in _PEAKED):
            why = "an MFU: no peak (give peak_tflops=)"
        if why is not None:
            v.status, v.rule, v.note, v.expected = "not-checked", None, why, None
        return v

    def _act(self, report: MetricsReport) -> None:
        self.stats["steps"] += 1
        self.last_report = report
        if report.checked:
            self.stats["checked"] += 1
        if report.ok:
            return
        self.stats["violated"] += 1
        for v in report.mismatches:
            self.stats["keys"][v.key] = self.stats["keys"].get(v.key, 0) + 1
        bad = ", ".join(f"{v.key} ({v.rule})" for v in report.mismatches)
        message = f"thdcheck metrics guard: step {report.step}: logged values disagree with the batches: {bad}"
        if self.on_violation == "raise":
            raise MetricsViolation(f"{message}\n{report}", report)
        new = [(v.key, v.rule) for v in report.mismatches if (v.key, v.rule) not in self._warned]
        if new:
            from thdcheck.guard import ThdcheckWarning

            self._warned.update(new)
            warnings.warn(f"{message}\n{report}", ThdcheckWarning, stacklevel=3)

    # -- the Trainer ---------------------------------------------------------------------------

    def callback(self) -> Any:
        """This guard as a `transformers.TrainerCallback`: pass it in `callbacks=[...]` and the
        collator as `data_collator=mg.guard(collator)`. Every `on_log` whose dict holds a value
        the guard can recompute is compared with the micro-batches the trainer trained since the
        last such log; eval logs and the final summary are skipped. Needs
        `dataloader_num_workers=0` (the micro-batches are seen where they are collated)."""
        self._fifo = collections.deque()
        return _trainer_callback_class()(self)

    def __repr__(self) -> str:
        model = self._source or ("a model" if self._known["model"] else "no model")
        return f"<thdcheck.MetricsGuard {model}, logger {self.logger!r}: {self.stats}>"


_CALLBACK_CLASS = None


def _trainer_callback_class():
    """The `transformers.TrainerCallback` subclass, made when first asked for (transformers is
    imported only then)."""
    global _CALLBACK_CLASS
    if _CALLBACK_CLASS is not None:
        return _CALLBACK_CLASS
    from transformers import TrainerCallback

    class MetricsCallback(TrainerCallback):
        """`MetricsGuard.callback()`. The collate guard queues every batch it returns; the
        trainer's step events say how many of them each optimizer step trained (accelerate
        collates one batch ahead, and evaluation collates through the same collator, so the
        queue is not the step)."""

        def __init__(self, guard: MetricsGuard) -> None:
            self.guard = guard
            self._trained = 0  # micro-batches of the current optimizer step so far
            self._ahead = 0    # batches collated ahead of the next step, at the last step end

        def on_train_begin(self, args, state, control, **kwargs):
            if getattr(args, "dataloader_num_workers", 0):
                raise ValueError(
                    "thdcheck MetricsGuard: dataloader_num_workers="
                    f"{args.dataloader_num_workers}: the metrics guard sees the micro-batches where "
                    "they are collated, which must be the training process: set it to 0"
                )
            g = self.guard
            g._fifo = collections.deque()
            g._batches = []
            self._trained = self._ahead = 0

        def on_substep_end(self, args, state, control, **kwargs):
            self._trained += 1

        def on_step_end(self, args, state, control, **kwargs):
            g, n = self.guard, self._trained + 1
            self._trained = 0
            if len(g._fifo) < n:
                raise RuntimeError(
                    f"thdcheck MetricsGuard: the trainer trained {n} micro-batch(es) this step but "
                    f"the guard saw {len(g._fifo)}: collate through it (data_collator=mg.guard(collator))"
                )
            for _ in range(n):
                g._batches.append(g._fifo.popleft())
            self._ahead = len(g._fifo)

        def _drop_eval_batches(self) -> None:
            fifo = self.guard._fifo
            while fifo is not None and len(fifo) > self._ahead:
                fifo.pop()

        def on_evaluate(self, args, state, control, **kwargs):
            self._drop_eval_batches()

        def on_predict(self, args, state, control, **kwargs):
            self._drop_eval_batches()

        def on_log(self, args, state, control, logs=None, **kwargs):
            g = self.guard
            if not logs or not g._batches:
                return
            report = g._compare(logs, g._batches, None)
            if report.values:  # the log was about the trained steps: they are done
                g._batches = []
                g._act(report)

    _CALLBACK_CLASS = MetricsCallback
    return MetricsCallback


# -- helpers ---------------------------------------------------------------------------------


def _unlink(path: str) -> None:
    try:
        os.unlink(path)
    except OSError:
        pass


def _is_recipe(model: Any) -> bool:
    return isinstance(model, os.PathLike) or (isinstance(model, str) and model.endswith(".toml"))


def _seconds(name: str, value: Any) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not (math.isfinite(value) and value > 0):
        raise ValueError(f"MetricsGuard: {name}={value!r}: expected a positive number of seconds")
    return float(value)


def _logged_seconds(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value) if math.isfinite(value) and value > 0 else None


def _count(name: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"MetricsGuard: {name}={value!r}: expected an integer >= 1")
    return value


def _json_values(logged: Mapping[str, Any]) -> dict:
    """The logged dict as JSON values: tensors and numpy scalars as numbers, a non-finite float
    as its text (JSON has no NaN; a NaN where a count is expected is then a mismatch)."""
    from thdcheck.adapter import _plain

    def fix(v: Any) -> Any:
        if isinstance(v, float) and not math.isfinite(v):
            return repr(v)
        if isinstance(v, dict):
            return {str(k): fix(x) for k, x in v.items()}
        if isinstance(v, list):
            return [fix(x) for x in v]
        return v

    return {str(k): fix(_plain(v)) for k, v in logged.items()}


def _model_section(model: Any, mlp_projections: int | None) -> dict:
    """The recipe's `[model]` table from a dict of its keys or a transformers config."""
    if isinstance(model, Mapping):
        dims = dict(model)
        for k, v in dims.items():
            if not isinstance(k, str) or isinstance(v, bool) or not isinstance(v, (int, float, str)):
                raise TypeError(
                    f"MetricsGuard: model=: field `{k}` = {v!r}: expected a number (or the name), "
                    "as the recipe's [model] keys"
                )
        dims.setdefault("name", "model")
        if mlp_projections is not None:
            dims["mlp_projections"] = mlp_projections
        return dims
    text = getattr(model, "get_text_config", None)
    if callable(text):  # a multimodal config: the language model's dimensions
        model = text()
    model_type = str(getattr(model, "model_type", "") or "")
    if getattr(model, "num_hidden_layers", None) is None and getattr(model, "n_layer", None) is None:
        raise TypeError(
            f"MetricsGuard: model={model!r}: expected a recipe path (.toml), a transformers config, "
            "or a dict of the recipe's [model] keys"
        )
    for moe in ("num_local_experts", "num_experts", "n_routed_experts", "moe_num_experts"):
        if getattr(model, moe, None):
            raise ValueError(
                f"MetricsGuard: {model_type or 'this'} config is a mixture of experts ({moe}="
                f"{getattr(model, moe)}): FLOPs need the active experts' width; pass model= a dict "
                "of the recipe's [model] keys with ffn = the active experts' total"
            )

    def need(*names: str) -> int:
        for n in names:
            v = getattr(model, n, None)
            if v is not None:
                return int(v)
        raise ValueError(f"MetricsGuard: the {model_type or 'model'} config has none of {', '.join(names)}")

    layers = need("num_hidden_layers", "n_layer", "num_layers")
    hidden = need("hidden_size", "n_embd", "d_model")
    heads = need("num_attention_heads", "n_head")
    kv = getattr(model, "num_key_value_heads", None) or heads
    head_dim = getattr(model, "head_dim", None) or hidden // heads
    ffn = need("intermediate_size", "n_inner", "ffn_dim")
    if mlp_projections is None:
        if model_type in _GATED:
            mlp_projections = 3
        elif model_type in _PLAIN_MLP:
            mlp_projections = 2
        else:
            raise ValueError(
                f"MetricsGuard: model_type {model_type!r}: is its MLP gated? pass mlp_projections=3 "
                "(gate, up, down: SwiGLU) or 2 (up, down)"
            )
    name = str(getattr(model, "_name_or_path", "") or model_type or "model")
    return {
        "name": name, "layers": layers, "hidden": hidden, "heads": heads, "kv_heads": int(kv),
        "head_dim": int(head_dim), "ffn": ffn, "mlp_projections": mlp_projections,
        "vocab": need("vocab_size"),
    }


def _check_profile_dict(profile: Mapping[str, Any]) -> None:
    """A `profile=` dict read as the command will read it; an error names `profile=` and the
    field at fault (the first one that fails beside the `name` alone), not the temporary file
    the command is given."""
    from thdcheck import _native, _profile_option

    def error(p: Mapping[str, Any]) -> str | None:
        try:
            _native.resolved_profile(**_profile_option(p))
        except (TypeError, ValueError) as e:
            return str(e).removeprefix("profile=: ")
        return None

    whole = error(profile)
    if whole is None:
        return
    base = {"name": profile["name"]} if isinstance(profile.get("name"), str) and error({"name": profile["name"]}) is None else {"name": "x"}
    for key, value in profile.items():
        if key != "name" and error(dict(base, **{key: value})) is not None:
            raise ValueError(f"MetricsGuard: profile=: field `{key}` = {value!r}: {whole}")
    raise ValueError(f"MetricsGuard: profile=: {whole}")


# A model the recipe schema accepts, field by field: what a field at fault is replaced with to
# tell which one it is.
_PLACEHOLDER = {"name": "none", "layers": 1, "hidden": 8, "heads": 1, "kv_heads": 1, "head_dim": 8,
                "ffn": 8, "mlp_projections": 2, "vocab": 8}


def _recipe_error(e: Exception, path: str, dims: dict | None, from_dict: bool, recipe_keys: dict) -> ValueError:
    """The error of the recipe made from `model=` (its `[model]` keys: `dims`) and the recipe
    options, naming the argument and the field at fault instead of the temporary file: each
    field given is replaced by one known to be accepted (or dropped, if the schema has no such
    field), the others kept and any missing one filled in, until the recipe reads."""
    from thdcheck import BatchError, metrics

    lines = [x.strip() for x in str(e).splitlines() if x.strip()]
    detail = (lines[-1] if lines else str(e)).replace(f"recipe {path}: ", "")

    def reads(model: dict | None, keys: dict) -> bool:
        fd, trial = tempfile.mkstemp(prefix="thdcheck-recipe-", suffix=".toml")
        try:
            with os.fdopen(fd, "w") as f:
                f.write(_recipe_toml(model, **keys))
            metrics(trial)
            return True
        except (BatchError, ValueError, TypeError):
            return False
        finally:
            _unlink(trial)

    if from_dict and dims and reads(dict(_PLACEHOLDER, **dims), recipe_keys):
        return ValueError(f"MetricsGuard: model=: {detail}")  # a field missing: the message names it
    for key in list(dims or {}) if from_dict else []:
        trial = dict(_PLACEHOLDER, **dims)  # a field missing too is not what this one is tried for
        if key in _PLACEHOLDER:
            trial[key] = _PLACEHOLDER[key]
        else:
            del trial[key]
        if reads(trial, recipe_keys):
            return ValueError(f"MetricsGuard: model=: field `{key}` = {dims[key]!r}: {detail}")
    for key, value in recipe_keys.items():
        if isinstance(value, str) and reads(dims, dict(recipe_keys, **{key: None})):
            return ValueError(f"MetricsGuard: {key}={value!r}: {detail}")
    return ValueError(f"MetricsGuard: model=: {detail}")


def _step_recipe(path: str) -> str | None:
    """The recipe at `path` reduced to what a step's record reads (the model, the FLOPs formula,
    causal convention and hardware view, `parallel.num_gpus`, the timing), its own simulated
    step made a two-token document; None where Python has no TOML reader (before 3.11): the
    file itself is used then."""
    try:
        import tomllib
    except ImportError:
        return None
    with open(path, "rb") as f:
        r = tomllib.load(f)
    flops = dict(r["flops"])
    if r["batch"]["format"] == "bshd":  # the record's view of BSHD rows, whatever the recipe says
        flops["hardware_view"] = "whole_pack"
    return _toml({
        "name": str(r["name"]),
        "stack": r["stack"],
        "source": f"thdcheck.MetricsGuard: the step record of {path}",
        "model": r["model"],
        "flops": flops,
        "batch": {"format": "thd", "objective": "clm", "micro_batch_size": 1, "seq_length": 2},
        "packing": {"strategy": "in_batch"},
        "parallel": {"num_gpus": r.get("parallel", {}).get("num_gpus", 1)},
        "timing": r["timing"],
        "data": {"seed": 0, "lengths": {"kind": "fixed", "len": 2}},
    }, "recipe")


def _recipe_toml(dims: dict | None, *, num_gpus, peak_tflops, flops_formula, flops_causal, hardware_view) -> str:
    """A recipe whose model, formula, GPUs and peak are these, and whose own simulated step (which
    `thdcheck metrics` always builds) is a single two-token document: cheap."""
    formula = flops_formula or "megatron_lm"
    if formula not in _FORMULAS:
        raise ValueError(f"MetricsGuard: flops_formula={formula!r}: expected one of {', '.join(_FORMULAS)}")
    if dims is None:  # counts only: a placeholder model, whose FLOPs are reported as not checked
        dims = {"name": "none", "layers": 1, "hidden": 8, "heads": 1, "kv_heads": 1, "head_dim": 8,
                "ffn": 8, "mlp_projections": 2, "vocab": 8}
    peak = 1.0 if peak_tflops is None else peak_tflops
    if isinstance(peak, bool) or not isinstance(peak, (int, float)) or not (math.isfinite(peak) and peak > 0):
        raise ValueError(f"MetricsGuard: peak_tflops={peak_tflops!r}: expected a positive TFLOP/s per GPU")
    return _toml({
        "name": "thdcheck_metrics_guard",
        # The recipe schema names four stacks; informational only (it selects nothing).
        "stack": _FORMULAS[formula],
        "source": "thdcheck.MetricsGuard",
        "model": dims,
        "flops": {"formula": formula, "causal": flops_causal or _CAUSAL[formula],
                  "hardware_view": hardware_view or "varlen"},
        "batch": {"format": "thd", "objective": "clm", "micro_batch_size": 1, "seq_length": 2},
        "packing": {"strategy": "in_batch"},
        "parallel": {"num_gpus": _count("num_gpus", 1 if num_gpus is None else num_gpus)},
        "timing": {"step_time_s": 1.0, "peak_tflops_per_gpu": float(peak), "dtype": "unknown", "gpu": "unknown"},
        "data": {"seed": 0, "lengths": {"kind": "fixed", "len": 2}},
    }, "recipe")


_BARE = re.compile(r"[A-Za-z0-9_-]+")


def _toml(table: Mapping[str, Any], what: str) -> str:
    """A dict as TOML (every nested table inline): how a dict profile or a generated recipe
    reaches the command, which reads files."""

    def key(k: Any) -> str:
        if not isinstance(k, str):
            raise TypeError(f"{what}: key {k!r}: expected a string")
        return k if _BARE.fullmatch(k) else string(k)

    def string(s: str) -> str:
        return json.dumps(s, ensure_ascii=False).replace("\x7f", "\\u007f")

    def value(v: Any) -> str:
        if isinstance(v, bool):
            return "true" if v else "false"
        if isinstance(v, int):
            return str(v)
        if isinstance(v, float):
            return repr(v) if math.isfinite(v) else ("nan" if v != v else ("inf" if v > 0 else "-inf"))
        if isinstance(v, str):
            return string(v)
        if isinstance(v, os.PathLike):
            return string(os.fspath(v))
        if isinstance(v, Mapping):
            return "{ " + ", ".join(f"{key(k)} = {value(x)}" for k, x in v.items()) + " }" if v else "{}"
        if isinstance(v, (list, tuple)):
            return "[" + ", ".join(value(x) for x in v) + "]"
        raise TypeError(f"{what}: {v!r}: a {type(v).__name__} is no TOML value")

    return "".join(f"{key(k)} = {value(v)}\n" for k, v in table.items())
