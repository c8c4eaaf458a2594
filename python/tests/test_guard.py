"""thdcheck.guard: a collate function wrapped for a live run raises, warns or dumps on a batch
that breaks a rule, returns every batch unchanged, pickles into DataLoader workers, and a dump
replays to the same verdict."""

from __future__ import annotations

import os
import pickle
import re
import shlex
import subprocess
import warnings
from pathlib import Path

import numpy as np
import pytest

import thdcheck
from _batches import REPO, load


def flatten(examples, position_bug=False):
    """transformers' DataCollatorWithFlattening(return_flash_attn_kwargs=True), numpy flavour;
    `position_bug` keeps counting positions across documents (they must restart)."""
    ids, pos, cu = [], [], [0]
    for x in examples:
        ids += x
        start = 0 if not position_bug else len(pos)
        pos += list(range(start, start + len(x)))
        cu.append(cu[-1] + len(x))
    labels = [-100 if i in cu[:-1] else t for i, t in enumerate(ids)]
    return {
        "input_ids": np.array([ids]),
        "labels": np.array([labels]),
        "position_ids": np.array([pos]),
        "cu_seq_lens_q": np.array(cu, dtype=np.int32),
        "cu_seq_lens_k": np.array(cu, dtype=np.int32),
        "max_length_q": max(len(x) for x in examples),
        "max_length_k": max(len(x) for x in examples),
    }


def buggy(examples):
    return flatten(examples, position_bug=True)


BATCHES = [[[5, 6, 7], [8, 9]], [[1, 2], [3, 4, 5, 6]], [[7], [8], [9]]]


def test_good_batches_pass_through_unchanged():
    g = thdcheck.guard(flatten)
    for examples in BATCHES:
        got = g(examples)
        want = flatten(examples)
        assert got.keys() == want.keys()
        assert all(np.array_equal(got[k], want[k]) for k in want)
    assert g.stats == {"batches": 3, "checked": 3, "violated": 0, "rules": {}}


def test_raise_names_the_rule_and_carries_the_report():
    g = thdcheck.guard(buggy)
    with pytest.raises(thdcheck.GuardViolation) as e:
        g(BATCHES[0])
    assert isinstance(e.value, AssertionError)
    assert e.value.report.violated == ["position-ids"], e.value.report
    assert "batch 0 violates position-ids" in str(e.value) and "VIOLATED position-ids" in str(e.value)


def test_warn_warns_once_per_rule_and_counts_every_batch():
    g = thdcheck.guard(buggy, on_violation="warn")
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        out = [g(b) for b in BATCHES]
    assert len(out) == 3 and all("input_ids" in b for b in out)
    ours = [w for w in seen if issubclass(w.category, thdcheck.ThdcheckWarning)]
    assert len(ours) == 1 and "position-ids" in str(ours[0].message), [str(w.message) for w in seen]
    assert g.stats["violated"] == 3 and g.stats["rules"] == {"position-ids": 3}, g.stats


def test_every_checks_one_batch_in_n():
    g = thdcheck.guard(buggy, every=2, on_violation="warn")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for b in BATCHES:
            g(b)
    assert (g.stats["batches"], g.stats["checked"], g.stats["violated"]) == (3, 2, 2), g.stats


def test_dump_writes_a_file_that_replays_to_the_same_verdict(tmp_path):
    g = thdcheck.guard(buggy, on_violation="dump", dump_dir=tmp_path, profile="transformers")
    with pytest.warns(thdcheck.ThdcheckWarning, match="dumped to"):
        g(BATCHES[1])
    files = sorted(tmp_path.glob("*.safetensors"))
    assert len(files) == 1
    report = files[0].with_suffix(".txt").read_text()
    assert "VIOLATED position-ids" in report and "--profile transformers" in report, report
    # Read back without the command: the same tensors give the same verdict.
    tensors, meta = load(files[0])
    assert thdcheck.check(tensors, metadata=meta, profile="transformers").violated == ["position-ids"]
    # And with the command, when it is built: the replay line the report gives.
    binary = REPO / "target/debug/thdcheck"
    if binary.exists():
        p = subprocess.run(
            [str(binary), "check", str(files[0]), "--profile", "transformers"], capture_output=True, text=True
        )
        assert p.returncode == 1 and "VIOLATED position-ids" in p.stdout, p.stdout + p.stderr


def test_a_guard_pickles_with_its_options_and_counts():
    g = thdcheck.guard(flatten, profile="transformers", on_violation="warn", every=3)
    g(BATCHES[0])
    h = pickle.loads(pickle.dumps(g))
    assert (h.every, h.on_violation, h.options, h.stats) == (g.every, g.on_violation, g.options, g.stats)
    assert h(BATCHES[1])["input_ids"].shape == (1, 6)


def test_bad_guard_options_fail_at_once():
    with pytest.raises(ValueError, match="on_violation='log'"):
        thdcheck.guard(flatten, on_violation="log")
    with pytest.raises(ValueError, match="every=0"):
        thdcheck.guard(flatten, every=0)
    with pytest.raises(ValueError, match="profile"):
        thdcheck.guard(flatten, profile="nope")
    with pytest.raises(TypeError, match="cp_size"):
        thdcheck.guard(flatten, cp_size="2")


def test_torch_dataloader_workers_run_the_guard():
    pytest.importorskip("torch")
    from torch.utils.data import DataLoader

    # Each worker gets a pickled copy; the violation raised there reaches the main process.
    guarded = thdcheck.guard(_as_torch_buggy)
    loader = DataLoader(BATCHES * 2, batch_size=None, collate_fn=guarded, num_workers=2)
    with pytest.raises(thdcheck.GuardViolation, match="position-ids"):
        list(loader)


def _as_torch_buggy(examples):
    import torch

    return {k: torch.as_tensor(v) for k, v in buggy(examples).items()}


def test_worker_processes_get_the_guard_pickled_without_torch():
    import multiprocessing

    guarded = thdcheck.guard(flatten, profile="transformers")
    with multiprocessing.get_context("spawn").Pool(2) as pool:
        out = pool.map(guarded, BATCHES)
    assert [b["input_ids"].tolist() for b in out] == [flatten(b)["input_ids"].tolist() for b in BATCHES]
    bad = thdcheck.guard(buggy)
    with multiprocessing.get_context("spawn").Pool(1) as pool:
        with pytest.raises(thdcheck.GuardViolation, match="position-ids"):
            pool.map(bad, BATCHES[:1])


def _on_gpu(examples, bug=False, hidden=64):
    import torch

    batch = {k: torch.as_tensor(v).to("cuda") for k, v in flatten(examples, position_bug=bug).items()}
    # What a model's forward adds to what the loop holds: no rule reads a float tensor wider
    # than the widest integer one, so the guard must not copy it to the CPU.
    batch["hidden_states"] = torch.zeros(1, batch["input_ids"].shape[1], hidden, device="cuda")
    return batch


def test_batches_on_a_gpu_get_the_cpu_verdict_and_stay_on_the_gpu():
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device")
    from thdcheck.guard import _readable

    good = thdcheck.guard(_on_gpu)
    for examples in BATCHES:
        out = good(examples)
        assert all(v.device.type == "cuda" for v in out.values())
        read = _readable(out)  # what the guard copies to the CPU: the integer tensors only
        assert "hidden_states" not in read and all(v.device.type == "cpu" for v in read.values())
        assert thdcheck.check(flatten(examples)).ok
    assert good.stats["violated"] == 0
    bad = thdcheck.guard(lambda ex: _on_gpu(ex, bug=True), on_violation="warn")
    with pytest.warns(UserWarning, match="position-ids"):
        out = bad(BATCHES[0])
    assert out["hidden_states"].device.type == "cuda"
    cpu = thdcheck.check(buggy(BATCHES[0]))
    assert bad.stats["rules"] == {r: 1 for r in cpu.violated}

# -- issue 37: a dump that keeps the run going and replays on its own ---------------------------


def _command():
    """The `thdcheck` binary: the installed wheel's (CI), else the workspace's debug build."""
    from thdcheck.__main__ import find_command

    found = find_command()
    if found is None and (REPO / "target/debug/thdcheck").exists():
        found = str(REPO / "target/debug/thdcheck")
    if found is None:
        pytest.skip("no thdcheck binary (pip install ./cli, or cargo build -p thdcheck)")
    return found


def _replay_argv(txt: Path) -> list:
    line = [x for x in txt.read_text().splitlines() if x.startswith("replay: ")][-1]
    return shlex.split(line[len("replay: "):])


def test_the_replay_line_is_one_shell_command_with_a_dict_profile_and_spaces(tmp_path):
    d = tmp_path / "dumps with a space"
    profile = {"name": "mine", "extends": "transformers", "pad_token_id": 0}
    g = thdcheck.guard(buggy, on_violation="dump", dump_dir=d, profile=profile, pad_token_id=0)
    with pytest.warns(thdcheck.ThdcheckWarning, match="replay: "):
        g(BATCHES[1])
    (dump,) = d.glob("*.safetensors")
    argv = _replay_argv(dump.with_suffix(".txt"))
    assert argv[:3] == ["thdcheck", "check", str(dump)], argv
    written = Path(argv[argv.index("--profile") + 1])
    assert written.parent == d and written.suffix == ".toml" and written.is_file(), argv
    assert argv[argv.index("--pad-token-id") + 1] == "0", argv
    # The line runs as printed.
    p = subprocess.run([_command(), *argv[1:]], capture_output=True, text=True, timeout=120)
    assert p.returncode == 1 and "VIOLATED position-ids" in p.stdout, p.stdout + p.stderr


def test_a_dump_replays_on_its_own_with_no_options(tmp_path):
    """What the guard was given (the options and a dict profile) travels in the dump's metadata:
    `thdcheck check DUMP`, with no option, gives the guard's verdict."""
    binary = _command()
    # The profile makes positions start at 1 (position-ids), the options ask for a CP split the
    # documents cannot take (cp-shard): each is a violation only when it reaches the replay.
    profile = {"name": "mine", "extends": "transformers", "position_base": 1}
    options = dict(profile=profile, cp_size=2, pad_token_id=0, causal=True, ignore_index=-1)
    assert thdcheck.check(flatten(BATCHES[0])).ok  # read without the options: no violation
    want = thdcheck.check(flatten(BATCHES[0]), **options).violated
    assert want == ["cp-shard", "position-ids"], want
    g = thdcheck.guard(flatten, on_violation="dump", dump_dir=tmp_path / "d", **options)
    with pytest.warns(thdcheck.ThdcheckWarning):
        g(BATCHES[0])
    (dump,) = (tmp_path / "d").glob("*.safetensors")
    _, meta = load(dump)
    assert meta["cp_size"] == "2" and meta["pad_token_id"] == "0" and meta["causal"] == "true", meta
    assert meta["ignore_index"] == "-1" and (dump.parent / meta["profile"]).is_file(), meta
    assert "/" not in meta["profile"], meta  # a file in the dump's own folder, named relative to it
    # From the dump's own directory and from another: a metadata profile is read beside the batch.
    for cwd in (dump.parent, tmp_path):
        p = subprocess.run([binary, "check", str(dump)], capture_output=True, text=True, timeout=120, cwd=cwd)
        assert p.returncode == 1, (cwd, p.stdout + p.stderr)
        got = sorted(set(re.findall(r"VIOLATED (\S+)", p.stdout)))
        assert got == sorted(want), (got, want, p.stdout)


def test_a_builtin_profile_is_named_and_a_file_profile_written_whole(tmp_path):
    # A built-in profile travels by name; a file (which may extend another file) is written
    # beside the dump with its `extends` applied, so that it needs no other file.
    base = tmp_path / "base.toml"
    base.write_text('name = "base"\nextends = "transformers"\npad_token_id = 3\n')
    top = tmp_path / "top.toml"
    top.write_text('name = "top"\nextends = "base.toml"\nposition_base = 0\n')
    for profile, want in (("transformers", "transformers"), (top, None)):
        d = tmp_path / f"d-{want}"
        g = thdcheck.guard(buggy, on_violation="dump", dump_dir=d, profile=profile)
        with pytest.warns(thdcheck.ThdcheckWarning):
            g(BATCHES[0])
        (dump,) = d.glob("*.safetensors")
        _, meta = load(dump)
        if want is not None:
            assert meta["profile"] == want, meta
            continue
        written = d / meta["profile"]
        text = written.read_text()
        assert not any(x.startswith("extends") for x in text.splitlines()), text
        assert "pad_token_id = 3" in text and 'name = "top"' in text, text
        tensors, _ = load(dump)
        assert thdcheck.check(tensors, profile=written).violated == ["position-ids"]


@pytest.mark.parametrize("where", ["a regular file", "a path under a file", "an empty path"])
def test_an_unusable_dump_dir_is_refused_at_construction(tmp_path, where):
    f = tmp_path / "not-a-dir"
    f.write_text("x")
    dump_dir = {"a regular file": f, "a path under a file": f / "dumps", "an empty path": ""}[where]
    with pytest.raises(ValueError) as e:
        thdcheck.guard(buggy, on_violation="dump", dump_dir=dump_dir)
    assert f"dump_dir={os.fspath(dump_dir)!r}" in str(e.value), e.value
    assert type(e.value) is ValueError, type(e.value)


def test_a_dump_that_cannot_be_written_later_warns_and_the_run_goes_on(tmp_path):
    d = tmp_path / "dumps"
    g = thdcheck.guard(buggy, on_violation="dump", dump_dir=d)
    assert d.is_dir()  # made (and proven writable) at construction
    d.rmdir()
    d.write_text("the directory became a file")
    with pytest.warns(thdcheck.ThdcheckWarning, match="position-ids") as seen:
        out = g(BATCHES[0])
    assert "input_ids" in out
    text = "\n".join(str(w.message) for w in seen)
    assert "could not dump" in text and str(d) in text, text


def test_a_meta_tensor_is_a_batch_error_naming_its_key():
    torch = pytest.importorskip("torch")

    def meta_labels(examples):
        b = {k: torch.as_tensor(v) for k, v in flatten(examples).items()}
        b["labels"] = torch.empty(b["input_ids"].shape, dtype=torch.long, device="meta")
        return b

    for action in ("raise", "warn"):
        g = thdcheck.guard(meta_labels, on_violation=action)
        with pytest.raises(thdcheck.BatchError, match="`labels`.*meta"):
            g(BATCHES[0])


def test_bad_metadata_fails_at_construction():
    with pytest.raises(ValueError, match=r"guard: metadata=\{'cp_size': 'x'\}: `__metadata__.cp_size`\[0\] = x"):
        thdcheck.guard(flatten, metadata={"cp_size": "x"})
    for bad in ({"pad_token_id": "zero"}, {"labels": "sideways"}, {"objective": "x"},
                {"cp_rank": "a", "cp_size": 2}, {"profile": "no_such_profile"}):
        key = next(iter(bad))
        with pytest.raises(ValueError, match=key):
            thdcheck.guard(flatten, metadata=bad)
    # Good metadata is still accepted.
    thdcheck.guard(flatten, metadata={"cp_size": 2, "pad_token_id": 0})

