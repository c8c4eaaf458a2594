"""The `thdcheck` command installed with the package runs the binary's code: the same reports
and exit codes (0 pass, 1 violation, 2 unreadable input or bad usage)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

from _batches import REPO


def run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "thdcheck", *args], cwd=REPO, capture_output=True, text=True, timeout=600
    )


def test_check_the_example_batches_as_the_readme_does():
    p = run("check", "examples/batches")
    assert p.returncode == 0, p.stdout[-2000:] + p.stderr
    assert "=> PASS" in p.stdout or "as expected" in p.stdout, p.stdout[-500:]


def test_exit_codes_are_the_commands():
    assert run("--version").returncode == 0
    bad = run("check", "examples/batches/bad/dpo_offset_real_length.safetensors")
    assert bad.returncode == 1 and "VIOLATED dpo-offsets" in bad.stdout, bad.stdout
    missing = run("check", "no/such/file.safetensors")
    assert missing.returncode == 2 and "no/such/file.safetensors" in missing.stderr + missing.stdout
    usage = run("no-such-subcommand")
    assert usage.returncode == 2 and "no-such-subcommand" in usage.stderr


def test_the_console_script_is_installed_beside_the_interpreter():
    script = Path(sys.executable).with_name("thdcheck")
    found = script if script.exists() else shutil.which("thdcheck")
    assert found, f"no thdcheck script beside {sys.executable}"
    p = subprocess.run([os.fspath(found), "--version"], capture_output=True, text=True, timeout=60)
    assert p.returncode == 0 and p.stdout.startswith("thdcheck "), p.stdout + p.stderr


def test_python_m_thdcheck_runs_the_binary_and_says_when_it_is_missing(tmp_path, monkeypatch, capsys):
    """`python -m thdcheck` runs the `thdcheck-cli` binary; a `thdcheck` script (an older
    console script, which would run this module again) is not taken for it, and without the
    binary the message names the wheel to install, exit 2."""
    import sysconfig

    from thdcheck import __main__ as entry
    from thdcheck import _native

    assert not hasattr(_native, "main"), "the extension binds the libraries, not the command"
    found = entry.find_command()
    assert found and Path(found).read_bytes()[:2] != b"#!", found

    script = tmp_path / "thdcheck"
    script.write_text("#!/usr/bin/env python3\nimport thdcheck.__main__\n")
    script.chmod(0o755)
    monkeypatch.setattr(sysconfig, "get_path", lambda name: os.fspath(tmp_path))
    monkeypatch.setattr(sys, "executable", os.fspath(tmp_path / "python"))
    monkeypatch.setenv("PATH", os.fspath(tmp_path))
    assert entry.find_command() is None
    try:
        entry.main()
    except SystemExit as e:
        assert e.code == 2
    else:
        raise AssertionError("main() returned without the binary")
    assert "pip install thdcheck-cli" in capsys.readouterr().err
