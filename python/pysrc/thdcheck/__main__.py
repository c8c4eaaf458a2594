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
from typing import NoReturn

_EXE = "thdcheck.exe" if os.name == "nt" else "thdcheck"


# The first bytes of an executable file format the binary can be: ELF (Linux), Mach-O (thin
# and universal, either byte order: macOS), PE (Windows).
_MAGIC = (
    b"\x7fELF",
    b"\xfe\xed\xfa\xce",
    b"\xfe\xed\xfa\xcf",
    b"\xce\xfa\xed\xfe",
    b"\xcf\xfa\xed\xfe",
    b"\xca\xfe\xba\xbe",
    b"MZ",
)


def _is_binary(path: Path) -> bool:
    """The command's binary, not a script: an older `thdcheck` console script (`#!`) would run
    this module again, and a script without `#!` is no program `exec` can start."""
    try:
        with path.open("rb") as f:
            head = f.read(4)
    except OSError:
        return False
    return any(head.startswith(m) for m in _MAGIC)


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


def _not_installed(detail: str = "") -> NoReturn:
    sys.stderr.write(
        "thdcheck: the command is not installed in this environment. It is the `thdcheck-cli` "
        "wheel, a dependency of this package: `pip install thdcheck-cli`, or from a clone "
        f"`pip install ./cli` (or `cargo install --path cli`).{detail}\n"
    )
    sys.exit(2)


def main() -> None:
    exe = find_command()
    if exe is None:
        _not_installed()
    sys.stdout.flush()
    sys.stderr.flush()
    try:
        if os.name == "nt":  # no exec on Windows: wait for the child and pass its exit code on
            import subprocess

            sys.exit(subprocess.call([exe, *sys.argv[1:]]))
        os.execv(exe, [exe, *sys.argv[1:]])
    except OSError as e:  # a file that looked like the binary and is none (or cannot start)
        _not_installed(f" ({exe} cannot be run: {e.strerror or e})")


if __name__ == "__main__":
    main()
