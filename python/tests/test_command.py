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


def test_python_m_thdcheck_with_a_script_on_path_says_install_not_traceback(tmp_path):
    """A `thdcheck` on PATH that is no binary (a shell or Python script without `#!`, which
    `exec` refuses, or with one, which would run this module again): exit 2 with the install
    message, never a traceback and never 1 (the "a check failed" code)."""
    scripts = {
        "shell script": "echo not the thdcheck binary\nexit 0\n",
        "python script": "import sys\nprint('not the thdcheck binary')\n",
        "script with #!": "#!/bin/sh\necho not the thdcheck binary\n",
        "empty file": "",
    }
    for what, text in scripts.items():
        bin_dir = tmp_path / what.replace(" ", "-").replace("#!", "shebang")
        bin_dir.mkdir()
        fake = bin_dir / "thdcheck"
        fake.write_text(text)
        fake.chmod(0o755)
        # The interpreter's own scripts directory holds the real binary: point it elsewhere.
        code = (
            "import sys, sysconfig, runpy\n"
            f"sysconfig.get_path = lambda name: {os.fspath(bin_dir)!r}\n"
            f"sys.executable = {os.fspath(bin_dir / 'python')!r}\n"
            "sys.argv = ['thdcheck', '--version']\n"
            "runpy.run_module('thdcheck', run_name='__main__')\n"
        )
        env = dict(os.environ, PATH=f"{bin_dir}{os.pathsep}/usr/bin{os.pathsep}/bin")
        p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, env=env)
        assert p.returncode == 2, (what, p.returncode, p.stdout, p.stderr)
        assert "Traceback" not in p.stderr and "pip install thdcheck-cli" in p.stderr, (what, p.stderr)
        assert "not the thdcheck binary" not in p.stdout, (what, p.stdout)
