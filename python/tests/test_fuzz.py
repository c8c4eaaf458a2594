"""In-process fuzzing: the example adapters' functions, called directly (no subprocess), get
the verdicts `thdcheck fuzz` gives the adapters: the correct ones pass, the buggy ones fail
with the rule that names their bug, shrunk."""

from __future__ import annotations

import functools
import importlib.util
import json
import sys

import pytest

import thdcheck
from _batches import REPO

EXAMPLES = REPO / "adapters/python/examples"


def example(name: str):
    spec = importlib.util.spec_from_file_location(name, EXAMPLES / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)  # the adapters serve only under __main__
    return module


def test_correct_collators_pass():
    flatten = example("flatten_collator")
    r = thdcheck.fuzz_collator(flatten.collate, cases=64)
    assert r.cases == 64 and r.report["result"] == "pass"
    assert thdcheck.fuzz_collator(flatten.collate, cases=48, mode="dpo").cases == 48


def test_a_mask_built_from_token_ids_is_caught_and_shrunk():
    bad = example("mask_from_ids_collator")
    with pytest.raises(thdcheck.FuzzFailure) as e:
        thdcheck.fuzz_collator(bad.collate, cases=64)
    f = e.value.report["failure"]
    assert (f["kind"], f["checks"][0]) == ("violation", "mask"), f
    # Shrunk: one example is enough, and it holds the token 0 the mask mistakes for padding.
    examples = f["request"]["examples"]
    assert len(examples) <= 2 and any(0 in x["input_ids"] for x in examples), f
    msg = str(e.value)
    assert "mask" in msg and "replay    collate(" in msg, msg


def test_the_dpo_offset_bug_is_caught():
    bad = example("dpo_offset_bug_collator")
    collate = functools.partial(bad.collate, offset=bad.real_chosen_length, padding_segment=False)
    with pytest.raises(thdcheck.FuzzFailure) as e:
        thdcheck.fuzz_collator(collate, cases=64, mode="dpo")
    assert e.value.report["failure"]["checks"][0] == "dpo-offsets"


def test_packers_pass_and_the_dropping_one_is_caught():
    assert thdcheck.fuzz_packer(example("greedy_packer").pack, cases=128).cases == 128
    with pytest.raises(thdcheck.FuzzFailure) as e:
        thdcheck.fuzz_packer(example("greedy_packer_drops_overflow").pack, cases=128)
    f = e.value.report["failure"]
    assert f["checks"][0] == "packer-conservation", f
    assert len(f["request"]["examples"]) <= 3, f


@pytest.mark.parametrize(
    "name,flag,broken,check",
    [
        # over-long examples alone in their own pack, declared `oversize` / undeclared
        ("oversize_packer", "DECLARE", False, "packer-capacity"),
        # examples split across packs: pieces that tile them / overlap
        ("split_packer", "OVERLAP", True, "packer-conservation"),
        # a padding batch repeating packs: marked `padding` / unmarked
        ("padding_batch_packer", "MODE", "unmarked", "packer-conservation"),
    ],
)
def test_declared_packer_behaviours_pass_and_their_broken_variants_fail(name, flag, broken, check):
    packer = example(name)
    assert thdcheck.fuzz_packer(packer.pack, cases=128).cases == 128
    setattr(packer, flag, broken)
    with pytest.raises(thdcheck.FuzzFailure) as e:
        thdcheck.fuzz_packer(packer.pack, cases=128)
    assert e.value.report["failure"]["checks"][0] == check


def test_a_streaming_packer_session_passes_and_the_dropped_carry_is_caught():
    assert thdcheck.fuzz_packer_session(example("streaming_packer").StreamingPacker, cases=128).cases == 128
    with pytest.raises(thdcheck.FuzzFailure) as e:
        thdcheck.fuzz_packer_session(example("streaming_packer_drops_carry").DropsCarry, cases=128)
    f = e.value.report["failure"]
    assert f["checks"][0] == "packer-conservation", f
    assert [r["op"] for r in f["requests"]] == ["start", "push", "end_epoch", "finish"], f
    msg = str(e.value)
    assert "replay    packer.push([{'id': 0, 'len': 1}])" in msg and "packer.end_epoch()" in msg, msg


def test_packer_options_reach_the_function_and_refusals_are_judged():
    budget = example("budget_packer")
    # max_seqs_per_pack is passed to pack() as a keyword argument, and held to.
    assert thdcheck.fuzz_packer(budget.pack, cases=64, max_seqs_per_pack=2).cases == 64
    budget.ARGS = {"no-seq-limit"}
    with pytest.raises(thdcheck.FuzzFailure) as e:
        thdcheck.fuzz_packer(budget.pack, cases=64, max_seqs_per_pack=2)
    assert e.value.report["failure"]["checks"][0] == "packer-capacity"
    # A ValueError declared as a refusal: accepted for an over-long example only.
    budget.ARGS = {"refuse"}
    assert thdcheck.fuzz_packer(budget.pack, cases=64, rejects=(ValueError,)).cases == 64
    budget.ARGS = {"refuse-all"}
    with pytest.raises(thdcheck.FuzzFailure) as e:
        thdcheck.fuzz_packer(budget.pack, cases=64, rejects=(ValueError,))
    assert e.value.report["failure"]["checks"][0] == "packer-conservation"
    # Undeclared, the same exception is an adapter error.
    budget.ARGS = {"refuse"}
    with pytest.raises(thdcheck.FuzzFailure) as e:
        thdcheck.fuzz_packer(budget.pack, cases=64)
    assert e.value.report["failure"]["kind"] == "adapter-error"


def test_an_exception_is_an_adapter_error_with_its_traceback():
    def collate(examples, max_seq_length):
        raise KeyError("boom")

    with pytest.raises(thdcheck.FuzzFailure) as e:
        thdcheck.fuzz_collator(collate, cases=8)
    f = e.value.report["failure"]
    assert f["kind"] == "adapter-error" and "KeyError" in f["detail"], f


@pytest.mark.parametrize("stop", [KeyboardInterrupt, SystemExit, "sigint"])
def test_ctrl_c_and_system_exit_stop_the_run_instead_of_being_shrunk(stop):
    # They were answered as adapter errors and shrinking went on: Ctrl-C did not stop pytest.
    import os
    import signal

    greedy = example("greedy_packer")
    calls = []

    def pack(lengths, capacity, seed):
        calls.append(1)
        if len(calls) == 5:
            if stop == "sigint":
                os.kill(os.getpid(), signal.SIGINT)  # as Ctrl-C delivers it
            else:
                raise stop("stop")
        return greedy.pack(lengths, capacity, seed)

    want = KeyboardInterrupt if stop == "sigint" else stop
    with pytest.raises(want):
        thdcheck.fuzz_packer(pack, cases=64)
    assert len(calls) == 5, f"the function was called {len(calls)} times after the interrupt"


def test_a_packer_index_outside_the_request_is_a_schema_fault():
    # Python's ids[-1] wrapped to the last example and the answer passed.
    greedy = example("greedy_packer")

    def pack(lengths, capacity, seed):
        packs, dropped = greedy.pack(lengths, capacity, seed)
        if packs and len(lengths) > 1:
            packs[0] = [-1 if i == len(lengths) - 1 else i for i in packs[0]]
        return packs, dropped

    with pytest.raises(thdcheck.FuzzFailure) as e:
        thdcheck.fuzz_packer(pack, cases=64)
    f = e.value.report["failure"]
    assert f["kind"] == "schema" and "index -1" in f["detail"], f
    assert len(f["request"]["examples"]) == 2, f  # shrunk

    def past_the_end(lengths, capacity, seed):
        return [[len(lengths)]], []

    with pytest.raises(thdcheck.FuzzFailure) as e:
        thdcheck.fuzz_packer(past_the_end, cases=8)
    f = e.value.report["failure"]
    assert f["kind"] == "schema" and "indices 0.." in f["detail"], f


def test_the_first_failure_is_the_default_and_the_scan_is_asked_for():
    bad = example("greedy_packer_drops_overflow")
    with pytest.raises(thdcheck.FuzzFailure) as e:
        thdcheck.fuzz_packer(bad.pack, cases=64)
    assert e.value.report["scan_runs"] == 0, e.value.report
    with pytest.raises(thdcheck.FuzzFailure) as e:
        thdcheck.fuzz_packer(bad.pack, cases=64, also_failing=16)
    assert 0 < e.value.report["scan_runs"] <= 16, e.value.report
    with pytest.raises(thdcheck.FuzzFailure) as e:
        thdcheck.fuzz_packer(bad.pack, cases=64, first_failure=False)
    assert e.value.report["scan_runs"] > 0, e.value.report


def test_a_failure_is_one_minimal_and_preconditions_are_stated_not_guarded():
    # A dealing bug shrinks to the smallest case that shows it at the user's DP size: one
    # one-token example, on the three ranks the user fixed.
    def uneven(lengths, capacity, seed, dp_size=None):
        packs = [[i] for i, n in enumerate(lengths) if n <= capacity]
        dropped = [i for i, n in enumerate(lengths) if n > capacity]
        return {"packs": packs, "dropped": dropped, "ranks": [k % dp_size for k in range(len(packs))]}

    with pytest.raises(thdcheck.FuzzFailure) as e:
        thdcheck.fuzz_packer(uneven, dp_size=3)
    r = e.value.report
    assert r["one_minimal"] is True, r
    req = r["failure"]["request"]
    assert (req["capacity"], req["dp_size"], req["examples"]) == (1, 3, [{"id": 0, "len": 1}]), req

    # A packer that asserts a non-empty step divisible by the DP size is never sent another.
    def strict(lengths, capacity, seed, dp_size=None):
        assert lengths and len(lengths) % dp_size == 0, len(lengths)
        return {"packs": [[i] for i in range(len(lengths))], "ranks": [k % dp_size for k in range(len(lengths))]}

    with pytest.raises(thdcheck.FuzzFailure) as e:
        thdcheck.fuzz_packer(strict, dp_size=2, fitting_only=True)
    assert e.value.report["failure"]["kind"] == "adapter-error", e.value.report
    ok = thdcheck.fuzz_packer(strict, dp_size=2, fitting_only=True, non_empty=True, examples_multiple_of_dp=True)
    assert ok.cases == 256


def test_options_are_the_commands_and_bad_ones_are_value_errors():
    # OLMo-core's format: pretraining labels pass under its profile, fail stated as SFT.
    fmt = example("sample_numbers_collator")
    fmt.FORMAT = "olmo_core"
    assert thdcheck.fuzz_collator(fmt.collate, cases=32, pad_token_id=0).cases == 32
    with pytest.raises(thdcheck.FuzzFailure) as e:
        thdcheck.fuzz_collator(fmt.collate, cases=32, objective="sft")
    assert e.value.report["failure"]["checks"][0] == "cross-doc-label"
    with pytest.raises(ValueError, match="cases"):
        thdcheck.fuzz_collator(fmt.collate, cases=0)
    with pytest.raises(ValueError, match="profile"):
        thdcheck.fuzz_collator(fmt.collate, profile="nope")


def test_metrics_counts_a_batch_in_memory_and_compares_a_logger():
    recipe = REPO / "golden/tests/recipes/qwen3_8b_sft_seq4096.toml"
    batch = {
        "input_ids": [[5, 6, 7, 8, 9, 10]],
        "labels": [[-100, 6, 7, -100, 9, 10]],
        "position_ids": [[0, 1, 2, 0, 1, 2]],
        "cu_seq_lens_q": [0, 3, 6],
    }
    doc = thdcheck.metrics(recipe, [batch, batch], grad_acc=2)
    b = doc["record"]["batch"]
    assert b["tokens"]["real"] == 12, b
    # A logger that reports one micro-batch's tokens as the step's: off by the micro-batch count.
    doc = thdcheck.metrics(recipe, [batch, batch], expect={"batch.tokens.real": 6})
    assert doc["comparison"]["mismatches"] == 1, doc["comparison"]
    assert "micro-batch" in json.dumps(doc["comparison"]["values"]), doc["comparison"]
    ok = thdcheck.metrics(recipe, [batch, batch], expect={"batch.tokens.real": 12})
    assert ok["comparison"]["mismatches"] == 0
    with pytest.raises(ValueError, match="grad-acc"):
        thdcheck.metrics(recipe, [batch], grad_acc=3)


def test_loggers_cp_losses_and_cp_splits_in_process():
    log = example("logger")
    assert thdcheck.fuzz_logger(log.log, cases=32).cases == 32
    log.BUG = "rank_local_counts"  # one CP rank's counts logged as the step's
    with pytest.raises(thdcheck.FuzzFailure) as e:
        thdcheck.fuzz_logger(log.log, cases=64, layout="cp-pad")
    assert e.value.report["failure"]["checks"][0] == "logged-tokens", e.value.report["failure"]
    assert thdcheck.fuzz_loss(example("cp_loss").loss, cases=16).cases == 16
    with pytest.raises(thdcheck.FuzzFailure) as e:
        thdcheck.fuzz_loss(example("cp_loss_mean_of_rank_means").loss, cases=64)
    failure = e.value.report["failure"]
    assert failure["checks"][0] in ("cp-loss-reduction", "cp-loss-finite"), failure
    assert thdcheck.fuzz_cp_split(example("cp_split").split, cases=32).cases == 32
    with pytest.raises(thdcheck.FuzzFailure):
        thdcheck.fuzz_cp_split(example("cp_split_roll_after_split").split, cases=64)


def test_the_helper_seeds_the_global_rngs_from_the_request(monkeypatch):
    import random
    import types

    from thdcheck import adapter

    calls = []
    numpy = types.SimpleNamespace(random=types.SimpleNamespace(seed=lambda s: calls.append(("numpy", s))))
    torch = types.SimpleNamespace(manual_seed=lambda s: calls.append(("torch", s)))
    monkeypatch.setitem(sys.modules, "numpy", numpy)
    monkeypatch.setitem(sys.modules, "torch", torch)
    adapter.seed_globals({"seed": 7})
    first = random.random()
    adapter.seed_globals({"seed": 7})
    assert random.random() == first
    assert calls == [("numpy", 7), ("torch", 7)] * 2
    calls.clear()
    adapter.seed_globals({"op": "push", "examples": []})  # no seed: nothing seeded
    assert calls == []
    # Neither numpy nor torch is imported by the helper.
    monkeypatch.delitem(sys.modules, "numpy")
    monkeypatch.delitem(sys.modules, "torch")
    adapter.seed_globals({"seed": 2**63 + 5})
    assert "numpy" not in sys.modules and "torch" not in sys.modules
    # A packer shuffling with the global random passes packer-deterministic, in process too.
    assert thdcheck.fuzz_packer(example("global_shuffle_packer").pack, cases=32).cases == 32


def _plain_attention(mask_documents):
    """A per-document softmax attention in plain Python (GQA, causal, padding rows 0); with
    `mask_documents=False` the planted bug of a mask built from nothing: every token sees every
    real token of the pack."""
    import math

    def attention(batch):
        real, padded = batch["cu_seqlens"], batch["cu_seqlens_padded"]
        doc = [None] * padded[-1]
        for d in range(len(real) - 1):
            for t in range(padded[d], padded[d] + real[d + 1] - real[d]):
                doc[t] = d
        q, k, v = batch["q"], batch["k"], batch["v"]
        heads, kv, dim = batch["heads"], batch["kv_heads"], batch["head_dim"]
        out = [[[0.0] * dim for _ in range(heads)] for _ in doc]
        for i, di in enumerate(doc):
            if di is None:
                continue
            keys = [j for j, dj in enumerate(doc) if dj is not None
                    and (dj == di or not mask_documents) and (not batch["causal"] or j <= i)]
            for h in range(heads):
                g = h // (heads // kv)
                s = [sum(a * b for a, b in zip(q[i][h], k[j][g])) / math.sqrt(dim) for j in keys]
                top = max(s)
                w = [math.exp(x - top) for x in s]
                out[i][h] = [sum(wi * v[j][g][e] for wi, j in zip(w, keys)) / sum(w) for e in range(dim)]
        return out

    return attention


def test_fuzz_attention_in_process_passes_a_correct_attention_and_shrinks_a_missing_mask():
    r = thdcheck.fuzz_attention(_plain_attention(True), cases=64, causal=True)
    assert r.cases == 64, r.report
    with pytest.raises(thdcheck.FuzzFailure) as e:
        thdcheck.fuzz_attention(_plain_attention(False), cases=64)
    f = e.value.report["failure"]
    assert f["checks"][0] in ("attention-output", "attention-isolation"), f
    assert len(f["request"]["cu_seqlens"]) <= 3, f  # at most two documents
    assert "attention(request)" in str(e.value), str(e.value)
