"""The `thdcheck` command, installed with the package (`pip install thdcheck` puts it on PATH):
the same Rust code as the binary built with cargo, run in this process.

    thdcheck check examples/batches
    python -m thdcheck check examples/batches
"""

from __future__ import annotations

import signal
import sys


def main() -> None:
    from thdcheck import _native

    # As the binary: Ctrl-C and a closed pipe end the command at once (Python would otherwise
    # hold SIGINT for Python code that never runs, and ignore SIGPIPE).
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    if hasattr(signal, "SIGPIPE"):
        signal.signal(signal.SIGPIPE, signal.SIG_DFL)
    sys.stdout.flush()
    sys.exit(_native.main(["thdcheck", *sys.argv[1:]]))


if __name__ == "__main__":
    main()
