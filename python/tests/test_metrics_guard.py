"""thdcheck.MetricsGuard without torch: each step's micro-batches (numpy arrays, lists) against
the dict a logger writes for it. A right dict passes; a wrong one (tokens divided by the CP size,
a mock segment counted as tokens, attention charged over the whole pack, a rate off by the
micro-batch count) is caught under the logger's own key, with its rule. The numbers come from
the Rust core (`thdcheck.metrics`); the loggers here compute theirs by hand."""

from __future__ import annotations

import math
import pickle
import types
import warnings

import numpy as np
import pytest

import thdcheck
from _batches import REPO

RECIPES = REPO / "golden/tests/recipes"


def flat(docs, num_real_seqs=None, mock=0):
    """transformers' DataCollatorWithFlattening(return_flash_attn_kwargs=True), numpy flavour;
    `mock` pad tokens (id 0, labels -100) appended as a last segment, as bionemo's
    pad_to_multiple_of does."""
    ids, pos, cu = [], [], [0]
    for d in docs:
        ids += d
        pos += list(range(len(d)))
        cu.append(cu[-1] + len(d))
    labels = [-100 if i in cu[:-1] else t for i, t in enumerate(ids)]
    if mock:
        ids += [0] * mock
        pos += list(range(mock))
        labels += [-100] * mock
        cu.append(cu[-1] + mock)
    b = {
        "input_ids": np.array([ids]),
        "labels": np.array([labels]),
        "position_ids": np.array([pos]),
        "cu_seq_lens_q": np.array(cu, dtype=np.int32),
    }
    if num_real_seqs is not None:
        b["num_real_seqs"] = num_real_seqs
    return b


STEP = [[[5, 6, 7], [8, 9]], [[1, 2, 3, 4]]]  # two micro-batches: documents of 3, 2 and 4 tokens


def step_batches():
    return [flat(docs) for docs in STEP]


# The documents of STEP, as a logger sees them.
LENGTHS = [len(d) for docs in STEP for d in docs]
TOKENS = sum(LENGTHS)  # 9
VALID = TOKENS - len(LENGTHS)  # the first label of each document is -100

# A tiny Llama-like config (what `transformers.LlamaConfig(...)` holds), without transformers.
CONFIG = types.SimpleNamespace(
    model_type="llama", num_hidden_layers=2, hidden_size=32, num_attention_heads=4,
    num_key_value_heads=2, head_dim=None, intermediate_size=64, vocab_size=64,
)

MY_PROFILE = {
    "name": "mystack",
    "extends": "transformers",
    "loggers": {
        "my-trainer": {
            "source": "python/tests/test_metrics_guard.py: the hand-written loggers",
            "keys": {
                "train/tokens": {"record": "batch.tokens.real", "kind": "count"},
                "train/valid_tokens": {"record": "batch.tokens.valid", "kind": "count"},
                "train/flops": {"record": "batch.flops.useful", "kind": "flops"},
                "train/tokens_per_second": {"record": "batch.tokens_per_second", "kind": "rate"},
                "train/mfu": {"record": "batch.mfu_pct.useful", "kind": "rate"},
                "train/step_time": {"not_recomputed": "wall time", "kind": "rate"},
                "train/loss": {"not_recomputed": "needs the logits", "kind": "rate"},
            },
        }
    },
}


def megatron_flops(lengths, pack_lengths=None):
    """Megatron-LM's dense GPT formula for CONFIG, by hand: 6·T·(L·3·h·f + L·(2hq + 2hk) + h·V)
    + 6·L·q·Σs² (causal halved). `pack_lengths` charges the attention over those instead (the
    bug: a pack taken as one sequence)."""
    L, h, f, V = 2, 32, 64, 64
    q, k = 4 * 8, 2 * 8
    per_token = 6 * (L * 3 * h * f + L * (2 * h * q + 2 * h * k) + h * V)
    attn = sum(s * s for s in (pack_lengths or lengths))
    return sum(lengths) * per_token + 6 * L * q * attn


def record_guard(**kw):
    mg = thdcheck.MetricsGuard(**kw)
    for b in step_batches():
        mg.batch(b)
    return mg


def test_a_right_step_passes_under_record_keys():
    mg = record_guard()
    r = mg.step({"batch.tokens.real": TOKENS, "batch.tokens.valid": VALID, "batch.sequences.real": 3, "loss": 2.5})
    assert r.ok and r.checked == 3, r
    assert r.micro_batches == 2 and r.record["tokens"]["real"] == TOKENS
    assert {v.key: v.status for v in r.values}["loss"] == "unknown"
    assert mg.stats == {"steps": 1, "checked": 1, "violated": 0, "keys": {}}


def test_tokens_divided_by_the_cp_size_are_caught_under_the_loggers_key():
    mg = thdcheck.MetricsGuard(logger="areal")
    for b in step_batches():
        mg.batch(b)
    with pytest.raises(thdcheck.MetricsViolation, match="sft/n_tokens") as e:
        mg.step({"sft/n_tokens": TOKENS // 2, "sft/n_valid_tokens": VALID, "sft/loss/avg": 2.5})
    report = e.value.report
    assert isinstance(e.value, AssertionError)
    [bad] = report.mismatches
    assert (bad.key, bad.record, bad.rule, bad.logged, bad.expected) == (
        "sft/n_tokens", "batch.tokens.real", "logged-tokens", TOKENS // 2, TOKENS
    ), bad
    assert report.violated == ["logged-tokens"] and report.logger == "Areal"
    status = {v.key: v.status for v in report.values}
    assert status == {"sft/n_tokens": "mismatch", "sft/n_valid_tokens": "ok", "sft/loss/avg": "not-recomputed"}
    assert "MISMATCH sft/n_tokens (= batch.tokens.real)" in str(e.value), str(e.value)
    assert mg.stats["violated"] == 1 and mg.stats["keys"] == {"sft/n_tokens": 1}


def test_a_part_logged_as_the_whole_is_named_by_its_factor():
    # Two equal micro-batches, one logged as the step: the note names the micro-batch factor.
    mg = thdcheck.MetricsGuard(logger="areal")
    mg.batch(flat(STEP[0]))
    mg.batch(flat(STEP[0]))
    with pytest.raises(thdcheck.MetricsViolation) as e:
        mg.step({"sft/n_tokens": 5})
    [bad] = e.value.report.mismatches
    assert bad.rule == "logged-tokens" and "micro-batch factor 2" in bad.note, bad.note
    # One DP rank's batches (dp_size=2): a rank's own count logged as the global one.
    mg = thdcheck.MetricsGuard(logger="areal", dp_size=2)
    mg.batch(flat(STEP[0]))
    with pytest.raises(thdcheck.MetricsViolation) as e:
        mg.step({"sft/n_tokens": 5})
    assert "DP factor 2" in e.value.report.mismatches[0].note, e.value.report
    mg.batch(flat(STEP[0]))
    assert mg.step({"sft/n_tokens": 10}).ok


def test_a_mock_segment_counted_as_tokens_is_caught():
    # bionemo pad_to_multiple_of: a mock segment of 3 pad tokens closes the pack (marked by
    # num_real_seqs); a logger that counts every stored token counts it as work.
    mb = flat([[5, 6, 7], [8, 9]], num_real_seqs=2, mock=3)
    mg = thdcheck.MetricsGuard(logger="areal", profile="bionemo", pad_token_id=0)
    mg.batch(mb)
    with pytest.raises(thdcheck.MetricsViolation) as e:
        mg.step({"sft/n_tokens": mb["input_ids"].size, "sft/n_seqs": len(mb["cu_seq_lens_q"]) - 1})
    got = {v.key: (v.rule, v.logged, v.expected) for v in e.value.report.mismatches}
    assert got == {"sft/n_tokens": ("logged-tokens", 8, 5), "sft/n_seqs": ("logged-tokens", 3, 2)}, got
    assert e.value.report.warnings == [], e.value.report.warnings
    mg.batch(mb)
    assert mg.step({"sft/n_tokens": 5, "sft/n_seqs": 2}).ok


def test_flops_and_mfu_from_a_transformers_config():
    t, peak = 0.25, 100.0
    flops = megatron_flops(LENGTHS)
    mfu = flops / t / 1 / (peak * 1e12) * 100
    mg = record_guard(model=CONFIG, logger="my-trainer", profile=MY_PROFILE, peak_tflops=peak, step_time_key="train/step_time")
    r = mg.step({"train/tokens": TOKENS, "train/flops": flops, "train/mfu": mfu, "train/step_time": t,
                 "train/tokens_per_second": TOKENS / t, "train/loss": 3.1})
    assert r.ok and r.checked == 4, r
    assert r.logger == "MyTrainer"
    # The classic packed-attention bug: each pack's attention charged as one sequence.
    mg = record_guard(model=CONFIG, logger="my-trainer", profile=MY_PROFILE, peak_tflops=peak, step_time_key="train/step_time")
    wrong = megatron_flops(LENGTHS, pack_lengths=[5, 4])
    with pytest.raises(thdcheck.MetricsViolation) as e:
        mg.step({"train/flops": wrong, "train/mfu": wrong / t / (peak * 1e12) * 100, "train/step_time": t})
    got = {v.key: v.rule for v in e.value.report.mismatches}
    assert got == {"train/flops": "logged-flops", "train/mfu": "logged-rate"}, e.value.report


def test_a_config_gives_the_flops_its_recipe_gives():
    # llama3 L2_lingua_1b's [model] table as a transformers config; the recipe's formula.
    cfg = types.SimpleNamespace(
        model_type="llama", num_hidden_layers=25, hidden_size=2048, num_attention_heads=16,
        num_key_value_heads=8, head_dim=128, intermediate_size=6144, vocab_size=128256,
    )
    recipe = RECIPES / "llama3_l2_lingua_1b_thd.toml"
    want = thdcheck.metrics(str(recipe), step_batches())["record"]["batch"]["flops"]["useful"]
    mg = record_guard(model=cfg, flops_formula="bionemo_perf_logger")
    assert mg.step({"batch.flops.useful": want}).ok
    # The recipe itself, and a dict of its [model] keys, say the same.
    mg = record_guard(model=recipe)
    assert mg.step({"batch.flops.useful": want}).ok
    dims = dict(layers=25, hidden=2048, heads=16, kv_heads=8, head_dim=128, ffn=6144, mlp_projections=3, vocab=128256)
    mg = record_guard(model=dims, flops_formula="bionemo_perf_logger")
    assert mg.step({"batch.flops.useful": want}).ok


def test_rates_need_a_step_time_and_mfu_a_peak():
    mg = record_guard(model=CONFIG, logger="my-trainer", profile=MY_PROFILE)
    r = mg.step({"train/tokens": TOKENS, "train/tokens_per_second": 1.0, "train/mfu": 1.0})
    status = {v.key: (v.status, v.note) for v in r.values}
    assert r.ok and r.checked == 1, r
    assert status["train/tokens_per_second"][0] == "not-checked" and "step time" in status["train/tokens_per_second"][1]
    assert status["train/mfu"][0] == "not-checked"
    # A step time per call; then a rate off by the micro-batch count is `logged-rate`.
    for b in step_batches():
        mg.batch(b)
    with pytest.raises(thdcheck.MetricsViolation) as e:
        mg.step({"train/tokens_per_second": 5 / 0.5}, step_time=0.5)  # one micro-batch's tokens
    [bad] = e.value.report.mismatches
    assert (bad.key, bad.rule) == ("train/tokens_per_second", "logged-rate"), bad
    # Without a model, FLOPs are not checked either.
    mg = record_guard(logger="my-trainer", profile=MY_PROFILE, step_time=1.0)
    r = mg.step({"train/tokens": TOKENS, "train/flops": 1, "train/tokens_per_second": TOKENS / 1.0})
    assert r.ok and r.checked == 2 and {v.key: v.status for v in r.values}["train/flops"] == "not-checked", r


def test_warn_warns_once_per_key_and_rule():
    mg = thdcheck.MetricsGuard(logger="areal", on_violation="warn")
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        for _ in range(3):
            for b in step_batches():
                mg.batch(b)
            r = mg.step({"sft/n_tokens": TOKENS * 2})
            assert not r.ok
    ours = [w for w in seen if issubclass(w.category, thdcheck.ThdcheckWarning)]
    assert len(ours) == 1 and "sft/n_tokens (logged-tokens)" in str(ours[0].message), [str(w.message) for w in seen]
    assert mg.stats == {"steps": 3, "checked": 3, "violated": 3, "keys": {"sft/n_tokens": 3}}


def test_nothing_to_compare_is_no_error():
    mg = record_guard(logger="areal")
    r = mg.step({"eval_loss": 1.0, "epoch": 0.5})
    assert r.ok and r.checked == 0 and r.values == [] and "none of the logged values" in r.note, r


def test_a_nan_where_a_count_is_logged_is_a_mismatch():
    mg = record_guard(logger="areal")
    with pytest.raises(thdcheck.MetricsViolation) as e:
        mg.step({"sft/n_tokens": math.nan, "sft/loss/avg": math.nan})
    [bad] = e.value.report.mismatches
    assert (bad.key, bad.rule, bad.logged) == ("sft/n_tokens", "logged-tokens", "nan"), bad


def test_the_collate_guard_records_the_micro_batches():
    mg = thdcheck.MetricsGuard(logger="areal")
    collate = mg.guard(flat)
    assert isinstance(collate, thdcheck.Guard) and collate.metrics is mg
    for docs in STEP:
        collate(docs)
    assert mg.step({"sft/n_tokens": TOKENS}).ok
    # thdcheck.guard(metrics=...) is the same; a batch that breaks a rule still raises first.
    collate = thdcheck.guard(flat, metrics=mg, profile="transformers")
    collate(STEP[0])
    assert mg.step({"sft/n_tokens": 5}).ok
    with pytest.raises(TypeError, match="metrics="):
        thdcheck.guard(flat, metrics=object())


def test_a_metrics_guard_pickles_with_its_collate_guard():
    mg = thdcheck.MetricsGuard(model=CONFIG, logger="my-trainer", profile=MY_PROFILE, step_time=1.0)
    collate = mg.guard(flat)
    collate(STEP[0])
    c2 = pickle.loads(pickle.dumps(collate))
    m2 = c2.metrics
    assert m2.logger == "my-trainer" and m2.stats == mg.stats and m2._batches == []
    for docs in STEP:
        c2(docs)
    assert m2.step({"train/tokens": TOKENS, "train/flops": megatron_flops(LENGTHS)}).ok


def test_bad_options_fail_at_once():
    with pytest.raises(ValueError, match="no such logger"):
        thdcheck.MetricsGuard(logger="nope")
    with pytest.raises(ValueError, match="cannot read recipe"):
        thdcheck.MetricsGuard(model=str(RECIPES / "nope.toml"))
    with pytest.raises(ValueError, match="the recipe states them"):
        thdcheck.MetricsGuard(model=RECIPES / "qwen3_8b_sft_seq2048.toml", num_gpus=8)
    with pytest.raises(ValueError, match="on_violation"):
        thdcheck.MetricsGuard(on_violation="dump")
    with pytest.raises(ValueError, match="dp_size"):
        thdcheck.MetricsGuard(dp_size=0)
    with pytest.raises(ValueError, match="pad-token-id"):
        thdcheck.MetricsGuard(pad_token_id="x")
    with pytest.raises(ValueError, match="unknown field `nonsense`"):
        thdcheck.MetricsGuard(profile={"name": "bad", "nonsense": 1})
    with pytest.raises(ValueError, match="mixture of experts"):
        thdcheck.MetricsGuard(model=types.SimpleNamespace(**vars(CONFIG), num_local_experts=8))
    with pytest.raises(ValueError, match="mlp_projections"):
        thdcheck.MetricsGuard(model=types.SimpleNamespace(**dict(vars(CONFIG), model_type="mystery")))
    with pytest.raises(TypeError, match="transformers config"):
        thdcheck.MetricsGuard(model=object())
    with pytest.raises(ValueError, match="no micro-batches"):
        thdcheck.MetricsGuard().step({"batch.tokens.real": 1})


def test_a_dict_profile_reaches_the_command_as_toml():
    from thdcheck.metrics_guard import _toml

    text = _toml({"name": "x", "a": {"k/ey \"q\"\n": [1, 2.5, True, "é\x7f"]}, "e": {}}, "t")
    assert text == 'name = "x"\na = { "k/ey \\"q\\"\\n" = [1, 2.5, true, "é\\u007f"] }\ne = {}\n', text
    mg = thdcheck.MetricsGuard(logger="my-trainer", profile=MY_PROFILE)
    for b in step_batches():
        mg.batch(b)
    assert mg.step({"train/tokens": TOKENS, "train/valid_tokens": VALID}).ok


@pytest.mark.parametrize("recipe", sorted(RECIPES.glob("*.toml")), ids=lambda p: p.stem)
def test_a_recipe_gives_the_step_record_the_command_gives(recipe):
    # The guard reads a recipe's model, formula, GPUs and timing into a recipe whose own simulated
    # step is tiny (the command builds it on every call); the step's record is the command's.
    mg = record_guard(model=recipe)
    assert mg.recipe == str(recipe)
    r = mg.step({"batch.tokens.real": TOKENS})
    assert r.ok, r
    assert r.record == thdcheck.metrics(str(recipe), step_batches())["record"]["batch"]


def test_without_tomllib_the_recipe_file_itself_is_used(monkeypatch):
    # Python 3.9 and 3.10 have no tomllib: the command reads the recipe as it is (slower).
    recipe = RECIPES / "llama3_l2_lingua_1b_thd.toml"
    monkeypatch.setitem(__import__("sys").modules, "tomllib", None)
    mg = record_guard(model=recipe)
    assert mg._recipe() == str(recipe)
    assert mg.step({"batch.tokens.real": TOKENS}).record == thdcheck.metrics(str(recipe), step_batches())["record"]["batch"]


def test_errors_in_a_dict_model_or_profile_name_the_argument_not_a_temporary_file():
    import tempfile

    tmp = tempfile.gettempdir()
    dims = {"layers": 2, "hidden": 8, "heads": 1, "kv_heads": 1, "head_dim": 8, "ffn": 8,
            "mlp_projections": 3, "vocab": 8}
    cases = [
        (dict(model=dict(dims, layers="two")), "model=", "layers"),
        (dict(model=dict({k: v for k, v in dims.items() if k != "ffn"}, layers="two")), "model=", "layers"),
        (dict(model=dict(dims, vocab=None)), "model=", "vocab"),
        (dict(model=dict(dims, nonsense=1)), "model=", "nonsense"),
        (dict(model={k: v for k, v in dims.items() if k != "ffn"}), "model=", "ffn"),
        (dict(model=dims, flops_causal="sideways"), "flops_causal=", "sideways"),
        (dict(profile={"name": "bad", "labels": "sideways"}), "profile=", "labels"),
        (dict(profile={"name": "bad", "nonsense": 1}), "profile=", "nonsense"),
        (dict(profile={"name": "mine", "loggers": {"me": {"keys": {"train/x": {"kind": "count"}}}}}),
         "profile=", "loggers"),
    ]
    for kwargs, argument, field in cases:
        with pytest.raises((ValueError, TypeError)) as e:
            thdcheck.MetricsGuard(**kwargs)
        msg = str(e.value)
        assert argument in msg and field in msg, (kwargs, msg)
        assert "thdcheck-recipe-" not in msg and "thdcheck-profile-" not in msg and tmp not in msg, (kwargs, msg)


def test_bad_metadata_fails_at_construction():
    with pytest.raises(ValueError, match=r"metadata=\{'cp_size': 'x'\}: `__metadata__.cp_size`\[0\] = x"):
        thdcheck.MetricsGuard(metadata={"cp_size": "x"})
    thdcheck.MetricsGuard(metadata={"cp_size": 2})
