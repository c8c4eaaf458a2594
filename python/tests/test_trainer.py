"""The guard inside the real thing: transformers' own `Trainer` trains a tiny Llama built from a
config (no download; CPU; a few steps) on packed batches from `DataCollatorWithFlattening`,
guarded. The correct collator trains through; a planted collator bug (positions that keep
counting across documents, as before transformers #31629's flattening collator restarted them)
stops training at the first batch with the rule that names it. Skipped without torch and
transformers (CI has neither)."""

from __future__ import annotations

import random

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
