"""The guard inside the real thing: transformers' own `Trainer` trains a tiny Llama built from a
config (no download; CPU; a few steps) on packed batches from `DataCollatorWithFlattening`,
guarded. The correct collator trains through; a planted collator bug (positions that keep
counting across documents, as before transformers #31629's flattening collator restarted them)
stops training at the first batch with the rule that names it. The metrics guard checks what a
logger logs at every step: a right one trains through, a planted logger bug stops training at
the first log with its rule. Skipped without torch and transformers (CI has neither)."""

from __future__ import annotations

import random
import time

import pytest

import thdcheck

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
pytest.importorskip("accelerate")  # the Trainer needs it


def _dataset(n: int = 32, seed: int = 0) -> list:
    rng = random.Random(seed)
    return [{"input_ids": [rng.randrange(3, 64) for _ in range(rng.randint(2, 24))]} for _ in range(n)]


def _trainer(collator, tmp_path):
    config = transformers.LlamaConfig(
        vocab_size=64,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=512,
    )
    torch.manual_seed(0)
    model = transformers.LlamaForCausalLM(config)
    args = transformers.TrainingArguments(
        output_dir=str(tmp_path),
        max_steps=3,
        per_device_train_batch_size=4,
        learning_rate=1e-3,
        logging_steps=1,
        save_strategy="no",
        report_to=[],
        use_cpu=True,
        dataloader_num_workers=0,
        remove_unused_columns=False,
    )
    return transformers.Trainer(model=model, args=args, train_dataset=_dataset(), data_collator=collator)


class PositionsNotReset:
    """The flattening collator with one planted bug: position ids count on across documents."""

    def __init__(self) -> None:
        self.inner = transformers.DataCollatorWithFlattening(return_flash_attn_kwargs=True)

    def __call__(self, features):
        batch = self.inner(features)
        batch["position_ids"] = torch.arange(batch["input_ids"].shape[1]).unsqueeze(0)
        return batch


def test_the_trainer_trains_through_the_guard_on_correct_packed_batches(tmp_path):
    collate = thdcheck.guard(
        transformers.DataCollatorWithFlattening(return_flash_attn_kwargs=True), profile="transformers"
    )
    out = _trainer(collate, tmp_path).train()
    assert out.global_step == 3
    assert collate.stats["checked"] >= 3 and collate.stats["violated"] == 0, collate.stats


def test_a_planted_collator_bug_stops_the_trainer_with_its_rule(tmp_path):
    collate = thdcheck.guard(PositionsNotReset(), profile="transformers")
    with pytest.raises(thdcheck.GuardViolation, match="position-ids") as e:
        _trainer(collate, tmp_path).train()
    assert e.value.report.violated == ["position-ids"], e.value.report
    assert collate.stats["violated"] == 1, collate.stats


# --- The metrics guard in the real thing -------------------------------------------------------
#
# A trainer whose `log` adds what a packed-training logger adds for each step (the logger under
# test): tokens, valid tokens, FLOPs by Megatron's formula, tokens/s and its own step time, under
# a logger declared in the user's profile. The guard recomputes them from the micro-batches the
# trainer trained (gradient accumulation 2; accelerate collates one batch ahead; evaluation
# collates through the same collator) and compares at every `on_log`.


STEP_LOGGER = {
    "name": "hf_step_logger",
    "extends": "transformers",
    "loggers": {
        "hf-step": {
            "source": "python/tests/test_trainer.py: StepLoggingTrainer.log",
            "keys": {
                "train/num_tokens": {"record": "batch.tokens.real", "kind": "count"},
                "train/num_valid_tokens": {"record": "batch.tokens.valid", "kind": "count"},
                "train/flops": {"record": "batch.flops.useful", "kind": "flops"},
                "train/tokens_per_second": {"record": "batch.tokens_per_second", "kind": "rate"},
                "train/step_time": {"not_recomputed": "wall time", "kind": "rate"},
                "loss": {"not_recomputed": "needs the logits", "kind": "rate"},
                "grad_norm": {"not_recomputed": "optimizer state", "kind": "rate"},
                "learning_rate": {"not_recomputed": "optimizer state", "kind": "rate"},
                "epoch": {"not_recomputed": "trainer state", "kind": "rate"},
            },
        }
    },
}


def _config():
    return transformers.LlamaConfig(
        vocab_size=64,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=512,
    )


def megatron_flops(config, tokens: int, attention_lengths: list) -> int:
    """Megatron-LM's dense GPT FLOPs (causal halved), as the logger under test computes them."""
    L, h, f, V = config.num_hidden_layers, config.hidden_size, config.intermediate_size, config.vocab_size
    d = h // config.num_attention_heads
    q, k = config.num_attention_heads * d, config.num_key_value_heads * d
    per_token = 6 * (L * 3 * h * f + L * (2 * h * q + 2 * h * k) + h * V)
    return tokens * per_token + 6 * L * q * sum(s * s for s in attention_lengths)


class StepLoggingTrainer(transformers.Trainer):
    """Logs the step's tokens, valid tokens, FLOPs and tokens/s with each training log. `bug`
    plants one logger bug: "cp" (tokens divided by a CP size of 2), "pack" (each pack's attention
    charged as one sequence: Σ T² instead of Σ sᵢ²), "micro-batch" (tokens/s of the last
    micro-batch only)."""

    def __init__(self, *args, bug=None, **kwargs):
        super().__init__(*args, **kwargs)
        self.bug = bug
        self._window()

    def _window(self):
        self._tokens, self._valid, self._docs, self._packs, self._last, self._t0 = 0, 0, [], [], 0, None

    def training_step(self, model, inputs, num_items_in_batch=None):
        if self._t0 is None:
            self._t0 = time.perf_counter()
        n = int(inputs["input_ids"].numel())
        self._tokens += n
        self._last = n
        self._valid += int((inputs["labels"] != -100).sum())
        cu = inputs["cu_seq_lens_q"].tolist()
        self._docs += [b - a for a, b in zip(cu, cu[1:])]
        self._packs.append(n)
        return super().training_step(model, inputs, num_items_in_batch)

    def log(self, logs, start_time=None):
        if "loss" in logs and self._t0 is not None:
            t = time.perf_counter() - self._t0
            attention = self._packs if self.bug == "pack" else self._docs
            logs = dict(
                logs,
                **{
                    "train/num_tokens": self._tokens // 2 if self.bug == "cp" else self._tokens,
                    "train/num_valid_tokens": self._valid,
                    "train/flops": megatron_flops(self.model.config, self._tokens, attention),
                    "train/tokens_per_second": (self._last if self.bug == "micro-batch" else self._tokens) / t,
                    "train/step_time": t,
                },
            )
            self._window()
        super().log(logs, start_time)


def _logging_trainer(mg, tmp_path, bug=None, eval_steps=None):
    torch.manual_seed(0)
    model = transformers.LlamaForCausalLM(_config())
    args = transformers.TrainingArguments(
        output_dir=str(tmp_path),
        max_steps=3,
        per_device_train_batch_size=4,
        per_device_eval_batch_size=4,
        gradient_accumulation_steps=2,
        learning_rate=1e-3,
        logging_steps=1,
        eval_strategy="steps" if eval_steps else "no",
        eval_steps=eval_steps,
        save_strategy="no",
        report_to=[],
        use_cpu=True,
        dataloader_num_workers=0,
        remove_unused_columns=False,
    )
    collate = mg.guard(transformers.DataCollatorWithFlattening(return_flash_attn_kwargs=True), profile="transformers")
    return StepLoggingTrainer(
        model=model,
        args=args,
        train_dataset=_dataset(),
        eval_dataset=_dataset(8, seed=1) if eval_steps else None,
        data_collator=collate,
        callbacks=[mg.callback()],
        bug=bug,
    )


def _metrics_guard():
    return thdcheck.MetricsGuard(
        model=_config(), logger="hf-step", profile=STEP_LOGGER, step_time_key="train/step_time"
    )


def test_the_metrics_guard_passes_a_right_logger_through_training_and_evaluation(tmp_path):
    mg = _metrics_guard()
    out = _logging_trainer(mg, tmp_path, eval_steps=1).train()
    assert out.global_step == 3
    # Every training log was compared (4 of our keys each); the eval logs and the final summary
    # were skipped, and the eval batches never entered a step.
    assert mg.stats == {"steps": 3, "checked": 3, "violated": 0, "keys": {}}, mg.stats
    last = mg.last_report
    assert (last.step, last.micro_batches, last.checked) == (2, 2, 4), last
    assert {v.key for v in last.values if v.status == "ok"} == {
        "train/num_tokens", "train/num_valid_tokens", "train/flops", "train/tokens_per_second"
    }, last


@pytest.mark.parametrize(
    "bug, key, rule",
    [
        ("cp", "train/num_tokens", "logged-tokens"),
        ("pack", "train/flops", "logged-flops"),
        ("micro-batch", "train/tokens_per_second", "logged-rate"),
    ],
)
def test_a_planted_logger_bug_stops_the_trainer_with_its_rule(tmp_path, bug, key, rule):
    mg = _metrics_guard()
    trainer = _logging_trainer(mg, tmp_path, bug=bug)
    with pytest.raises(thdcheck.MetricsViolation, match=key) as e:
        trainer.train()
    report = e.value.report
    assert report.step == 0 and report.micro_batches == 2, report
    assert [(v.key, v.rule) for v in report.mismatches] == [(key, rule)], report
    assert trainer.state.global_step == 1


def test_the_metrics_callback_says_what_it_cannot_see(tmp_path):
    # Batches collated in DataLoader workers never reach the guard of the training process.
    mg = _metrics_guard()
    trainer = _logging_trainer(mg, tmp_path)
    trainer.args.dataloader_num_workers = 2
    with pytest.raises(ValueError, match="dataloader_num_workers=2"):
        trainer.train()
    # A collator that is not the guard's: the first step end says so.
    mg = _metrics_guard()
    trainer = _logging_trainer(mg, tmp_path)
    trainer.data_collator = transformers.DataCollatorWithFlattening(return_flash_attn_kwargs=True)
    with pytest.raises(RuntimeError, match="data_collator=mg.guard"):
        trainer.train()
