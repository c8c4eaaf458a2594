"""thdcheck.lightning_callback in Lightning's own Trainer: a tiny module trained for a few steps
on packed batches (CPU, no download). Correct batches and logs train through; a planted
collator bug (positions counting on across documents) stops training at the first batch with
`position-ids`; a planted logger bug (the token count halved, as a CP-local count divided by
the CP size) is caught at the first optimizer step with `logged-tokens`, under the module's own
key. Needs torch and lightning, so CI (which has neither) skips it."""

from __future__ import annotations

import warnings

import pytest

import thdcheck

torch = pytest.importorskip("torch")
L = pytest.importorskip("lightning.pytorch")

VOCAB = 64
DOCS = [[5, 6, 7], [8, 9], [1, 2, 3, 4], [10, 11], [12], [13, 14, 15, 16, 17], [18, 19, 20]]
STEPS = [DOCS[0:2], DOCS[2:4], DOCS[4:7]]  # three batches of packed documents

# The logged names, mapped onto thdcheck's record the way a user's profile does it.
PROFILE = {
    "name": "lightning_test",
    "extends": "transformers",
    "loggers": {
        "tiny": {
            "source": "python/tests/test_lightning.py: Tiny.training_step",
            "keys": {
                "train/tokens": {"record": "batch.tokens.real", "kind": "count"},
                "train/loss": {"not_recomputed": "needs the logits", "kind": "rate"},
            },
        }
    },
}


def flatten(docs, position_bug=False):
    """transformers' DataCollatorWithFlattening(return_flash_attn_kwargs=True), in torch."""
    ids, pos, cu = [], [], [0]
    for d in docs:
        ids += d
        start = len(pos) if position_bug else 0
        pos += list(range(start, start + len(d)))
        cu.append(cu[-1] + len(d))
    labels = [-100 if i in cu[:-1] else t for i, t in enumerate(ids)]
    longest = max(len(d) for d in docs)
    return {
        "input_ids": torch.tensor([ids]),
        "labels": torch.tensor([labels]),
        "position_ids": torch.tensor([pos]),
        "cu_seq_lens_q": torch.tensor(cu, dtype=torch.int32),
        "cu_seq_lens_k": torch.tensor(cu, dtype=torch.int32),
        "max_length_q": longest,
        "max_length_k": longest,
    }


class Tiny(L.LightningModule):
    def __init__(self, halve_tokens=False):
        super().__init__()
        self.emb = torch.nn.Embedding(VOCAB, 8)
        self.head = torch.nn.Linear(8, VOCAB)
        self.halve_tokens = halve_tokens

    def training_step(self, batch, batch_idx):
        logits = self.head(self.emb(batch["input_ids"]))
        # Unshifted labels: position t predicts labels[t + 1].
        loss = torch.nn.functional.cross_entropy(
            logits[:, :-1].reshape(-1, VOCAB), batch["labels"][:, 1:].reshape(-1), ignore_index=-100
        )
        tokens = int(batch["cu_seq_lens_q"][-1])
        if self.halve_tokens:
            tokens //= 2
        self.log("train/tokens", float(tokens), on_step=True, batch_size=1)
        self.log("train/loss", loss, on_step=True, batch_size=1)
        return loss

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)


def train(module, callback, position_bug=False):
    loader = torch.utils.data.DataLoader(
        STEPS, batch_size=None, collate_fn=lambda docs: flatten(docs, position_bug)
    )
    trainer = L.Trainer(
        max_steps=len(STEPS), accelerator="cpu", logger=False, enable_checkpointing=False,
        enable_progress_bar=False, enable_model_summary=False, callbacks=[callback],
    )
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", category=UserWarning, module="lightning")
        warnings.filterwarnings("ignore", message=".*does not have many workers.*")
        trainer.fit(module, loader)
    return trainer


def test_correct_batches_and_logs_train_through():
    mg = thdcheck.MetricsGuard(logger="tiny", profile=PROFILE)
    cb = thdcheck.lightning_callback(metrics=mg)
    trainer = train(Tiny(), cb)
    assert trainer.global_step == len(STEPS)
    assert cb.guard.stats == {"batches": 3, "checked": 3, "violated": 0, "rules": {}}
    assert mg.stats["steps"] == 3 and mg.stats["checked"] == 3 and mg.stats["violated"] == 0
    assert [v.key for v in mg.last_report.values if v.status == "ok"] == ["train/tokens"]


def test_a_collator_bug_stops_training_at_the_first_batch():
    cb = thdcheck.lightning_callback(profile="transformers")
    with pytest.raises(thdcheck.GuardViolation, match="position-ids"):
        train(Tiny(), cb, position_bug=True)
    assert cb.guard.stats["batches"] == 1


def test_a_logger_bug_is_caught_at_the_first_step_under_its_key():
    mg = thdcheck.MetricsGuard(logger="tiny", profile=PROFILE)
    with pytest.raises(thdcheck.MetricsViolation, match=r"train/tokens \(logged-tokens\)") as e:
        train(Tiny(halve_tokens=True), thdcheck.lightning_callback(metrics=mg))
    bad = e.value.report.mismatches[0]
    assert (bad.key, bad.rule) == ("train/tokens", "logged-tokens")
    assert mg.stats["steps"] == 1


def test_bad_options_fail_when_the_callback_is_made():
    with pytest.raises(TypeError, match="metrics"):
        thdcheck.lightning_callback(metrics=object())
    with pytest.raises(ValueError, match="every"):
        thdcheck.lightning_callback(every=0)
