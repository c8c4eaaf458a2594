"""`profile=`: a built-in name, a path or a dict gives the verdict the command gives with the
same profile, and without one the nearest pyproject.toml's `[tool.thdcheck]` applies."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

import thdcheck
from _batches import REPO, load

AXOLOTL = REPO / "corpus/real/batches/axolotl/v2_position_ids_v0.18.0.safetensors"
PER_ROW = 'name = "mine"\npadding_segments = "per-row"\n'


def _batch():
    tensors, meta = load(AXOLOTL)
    meta = {k: v for k, v in meta.items() if k != "profile"}
    return tensors, meta


def _command(*args: str, cwd: Path) -> int:
    exe = Path(sys.executable).with_name("thdcheck")
    cmd = [os.fspath(exe)] if exe.exists() else [sys.executable, "-m", "thdcheck"]
    return subprocess.run(cmd + list(args), cwd=cwd, capture_output=True, timeout=120).returncode


@pytest.mark.parametrize(
    "profile, violated",
    [
        ("axolotl", []),
        ("transformers", ["mock-marked"]),
        ({"name": "mine", "padding_segments": "per-row"}, []),
        ({"name": "mine", "extends": "axolotl", "padding_segments": "none"}, ["mock-marked"]),
    ],
)
def test_a_name_or_a_dict_gives_the_commands_verdict(profile, violated, tmp_path):
    tensors, meta = _batch()
    report = thdcheck.check(tensors, metadata=meta, profile=profile)
    assert report.violated == violated, report.text
    if isinstance(profile, dict):
        body = "".join(f"{k} = {v!r}\n".replace("'", '"') for k, v in profile.items())
        (tmp_path / "p.toml").write_text(body)
        spec = "p.toml"
    else:
        spec = profile
    # The same batch dumped with the same metadata, through the command.
    np_meta = {str(k): str(v) for k, v in meta.items()}
    from thdcheck.guard import write_safetensors

    write_safetensors(tmp_path / "b.safetensors", tensors, np_meta)
    code = _command("check", "--profile", spec, "b.safetensors", cwd=tmp_path)
    assert code == (1 if violated else 0)


def test_a_path_and_pathlike_name_a_profile_file(tmp_path):
    (tmp_path / "mine.toml").write_text(PER_ROW)
    tensors, meta = _batch()
    assert thdcheck.check(tensors, metadata=meta, profile=tmp_path / "mine.toml").violated == []
    assert thdcheck.check(tensors, metadata=meta, profile=str(tmp_path / "mine.toml")).ok


def test_pyproject_tool_thdcheck_applies_when_nothing_names_a_profile(tmp_path, monkeypatch):
    tensors, meta = _batch()
    (tmp_path / "sub").mkdir()
    monkeypatch.chdir(tmp_path / "sub")
    assert thdcheck.check(tensors, metadata=meta).violated == ["mock-marked"]
    (tmp_path / "pyproject.toml").write_text('[tool.thdcheck]\nprofile = "axolotl"\n')
    assert thdcheck.check(tensors, metadata=meta).violated == []
    # An explicit profile wins over the project's.
    assert thdcheck.check(tensors, metadata=meta, profile="transformers").violated == [
        "mock-marked"
    ]
    (tmp_path / "pyproject.toml").write_text(
        "[tool.thdcheck.profile]\nname = \"proj\"\npadding_segment = \"any\"\n"
    )
    with pytest.raises(ValueError, match=r"pyproject.toml \[tool.thdcheck.profile\]: unknown field `padding_segment`"):
        thdcheck.check(tensors, metadata=meta)


def test_a_bad_profile_names_the_field_and_values(tmp_path):
    tensors, meta = _batch()
    (tmp_path / "bad.toml").write_text('name = "x"\n\nlabels = "rolled"\n')
    with pytest.raises(ValueError, match=r"bad.toml:3: unknown variant `rolled`, expected one of"):
        thdcheck.check(tensors, metadata=meta, profile=tmp_path / "bad.toml")
    with pytest.raises(TypeError, match=r"a profile dict holds TOML values"):
        thdcheck.check(tensors, metadata=meta, profile={"name": "x", "pad_token_id": object()})


MEGATRON_EOD = REPO / "corpus/real/batches/megatron_lm/eod_mask_mbs2_v0.19.0.safetensors"


def test_a_4d_mask_and_eos_documents_read_in_process_as_the_command_reads_them():
    """Megatron-LM's EOD-masked batch: the EOD id as a keyword (a tokenizer fact) beside the
    stack's profile; a mask that lets a document see the one before it is flagged by
    `block-mask`, as the command flags it."""
    tensors, meta = load(MEGATRON_EOD)
    meta = {k: v for k, v in meta.items() if k != "eos_token_id"}
    report = thdcheck.check(tensors, metadata=meta, profile="megatron_lm", eos_token_id=2)
    assert report.violated == [], str(report)
    assert "block-mask" in str(report) and "eos-delimited" in str(report)
    leaky = {k: v.copy() for k, v in tensors.items()}
    # Row 0 holds documents [0, 5) and [5, 8); True masks a key (Megatron's convention).
    leaky["attention_mask"][0, 0, 5, 0] = False
    report = thdcheck.check(leaky, metadata=meta, profile="megatron_lm", eos_token_id=2)
    assert report.violated == ["block-mask"], str(report)
    assert "two documents attend to each other" in str(report)


def test_a_metadata_profile_path_is_refused_for_a_batch_in_memory(tmp_path):
    # A batch is data from anywhere: its metadata names a built-in profile, or (for a file) one
    # in the batch's own folder; a batch held in memory has none, so a path is refused at once
    # (a FIFO named there used to block the check forever; a secret file's values were printed).
    fifo = tmp_path / "fifo.toml"
    os.mkfifo(fifo)
    secret = tmp_path / "secret.toml"
    secret.write_text('name = "x"\nlabels = "hunter2-SECRET"\n')
    batch = {"input_ids": [[1, 2, 3]], "cu_seq_lens_q": [0, 3], "position_ids": [[0, 1, 2]]}
    for spec in (str(fifo), str(secret), "/dev/zero"):
        with pytest.raises(ValueError, match="__metadata__.profile") as e:
            thdcheck.check(batch, metadata={"profile": spec})
        assert "hunter2" not in str(e.value) and "profile=" in str(e.value), str(e.value)
    assert thdcheck.check(batch, metadata={"profile": "trl"}).ok
