"""`python -m thdcheck ...`: the `thdcheck` command. The command is the Rust binary of the
`thdcheck-cli` wheel, which this package depends on (`pip install thdcheck` puts it on PATH);
this module runs it in place of the interpreter, with the same arguments, output and exit code.

    thdcheck check examples/batches
    python -m thdcheck check examples/batches
"""

from __future__ import annotations

import os
import shutil
import sys
import sysconfig
from pathlib import Path

_EXE = "thdcheck.exe" if os.name == "nt" else "thdcheck"


def _is_binary(path: Path) -> bool:
    """The command's binary, not a script (an older `thdcheck` console script would run this
    module again)."""
    try:
        with path.open("rb") as f:
            return f.read(2) != b"#!"
    except OSError:
        return False


def find_command() -> str | None:
    """The `thdcheck` binary: in this interpreter's scripts directory (where `pip install
    thdcheck-cli` puts it), else on PATH; None when neither holds it."""
    candidates = [Path(sysconfig.get_path("scripts")) / _EXE, Path(sys.executable).with_name(_EXE)]
    on_path = shutil.which("thdcheck")
    if on_path:
        candidates.append(Path(on_path))
    for c in candidates:
        if c.is_file() and os.access(c, os.X_OK) and _is_binary(c):
            return os.fspath(c)
    return None


def main() -> None:
    exe = find_command()
    if exe is None:
        sys.stderr.write(
            "thdcheck: the command is not installed in this environment. It is the `thdcheck-cli` "
            "wheel, a dependency of this package: `pip install thdcheck-cli`, or from a clone "
            "`pip install ./cli` (or `cargo install --path cli`).\n"
        )
        sys.exit(2)
    sys.stdout.flush()
    sys.stderr.flush()
    if os.name == "nt":  # no exec on Windows: wait for the child and pass its exit code on
        import subprocess

        sys.exit(subprocess.call([exe, *sys.argv[1:]]))
    os.execv(exe, [exe, *sys.argv[1:]])


if __name__ == "__main__":
    main()
