"""`thdcheck.lightning_callback`: the batch guard and the metrics guard as a Lightning callback.

    import lightning as L
    import thdcheck

    mg = thdcheck.MetricsGuard(model=config, logger="my-trainer", profile="mystack.toml")
    trainer = L.Trainer(callbacks=[thdcheck.lightning_callback(profile="mystack.toml", metrics=mg)])

Lightning hands every callback the batch it is about to train (`on_train_batch_start`, after the
batch is moved to the device), so no collate function needs wrapping: the callback runs
`thdcheck.check` on it with the options of `thdcheck.guard` (`every`, `on_violation`,
`dump_dir`, and the read options such as `profile` and `pad_token_id`), and records it as a
micro-batch of the step when a `MetricsGuard` is given. When an optimizer step ends (every
`accumulate_grad_batches` batches), the values the module logged with `self.log(...)` for that
step (`trainer.callback_metrics`) are compared with that step's micro-batches: every logged
value the guard can recompute that disagrees is reported under its key, with its rule.

Works with `lightning.pytorch` (the `lightning` package) or the older `pytorch_lightning`;
imported only when the callback is made.
"""

from __future__ import annotations

from typing import Any

__all__ = ["lightning_callback"]


def _callback_base() -> type:
    try:
        from lightning.pytorch import Callback
    except ImportError:
        try:
            from pytorch_lightning import Callback
        except ImportError:
            raise ImportError(
                "thdcheck.lightning_callback needs Lightning: pip install lightning"
            ) from None
    return Callback


def lightning_callback(*, metrics: Any = None, **options: Any) -> Any:
    """A Lightning `Callback` that checks every training batch (`thdcheck.guard`'s options:
    `every`, `on_violation`, `dump_dir` and `thdcheck.check`'s read options) and, with
    `metrics=` a `MetricsGuard`, compares what the module logs at each optimizer step with
    that step's micro-batches. `callback.guard.stats` and `metrics.stats` count what was seen."""
    from thdcheck.guard import Guard
    from thdcheck.metrics_guard import MetricsGuard

    if metrics is not None and not isinstance(metrics, MetricsGuard):
        raise TypeError(f"lightning_callback: metrics={metrics!r}: expected a thdcheck.MetricsGuard")
    if metrics is not None:
        read = dict(metrics.options)
        if metrics.metadata is not None:
            read.setdefault("metadata", metrics.metadata)
        if metrics.profile is not None:
            read.setdefault("profile", metrics.profile)
        read.update(options)
        options = read
    guard = Guard(_identity, metrics=metrics, **options)

    class ThdcheckCallback(_callback_base()):
        """`thdcheck.lightning_callback()`."""

        def __init__(self) -> None:
            self.guard = guard
            self.metrics = metrics

        def on_train_start(self, trainer: Any, pl_module: Any) -> None:
            if self.metrics is not None:
                self.metrics._batches = []

        def on_train_batch_start(self, trainer: Any, pl_module: Any, batch: Any, batch_idx: int) -> None:
            self.guard(batch)  # checks it (raise / warn / dump) and records it for the metrics

        def on_train_batch_end(self, trainer: Any, pl_module: Any, outputs: Any, batch: Any, batch_idx: int) -> None:
            mg = self.metrics
            if mg is None or not mg._batches:
                return
            acc = max(1, int(getattr(trainer, "accumulate_grad_batches", 1) or 1))
            if (batch_idx + 1) % acc:
                return  # the optimizer step is not over yet
            logged = dict(getattr(trainer, "callback_metrics", {}) or {})
            batches, mg._batches = mg._batches, []
            if not logged:
                return
            report = mg._compare(logged, batches, None)
            if report.values:
                mg._act(report)

    return ThdcheckCallback()


def _identity(batch: Any) -> Any:
    return batch
