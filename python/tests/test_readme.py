"""python/README.md as a reader of a clone meets it: no leftover placeholder, and every command
that installs from `dist/` comes after the commands that make `dist/` (ci/test.sh's)."""

from __future__ import annotations

import re

from _batches import REPO

README = REPO / "python/README.md"


def _sh_blocks(text: str) -> list:
    return [b.splitlines() for b in re.findall(r"```sh\n(.*?)```", text, flags=re.S)]


def test_no_placeholder_line_is_left():
    # An all-capitals word alone on a line (MEASURED_BUILD) is a figure nobody filled in.
    left = [x for x in README.read_text().splitlines() if re.fullmatch(r"[A-Z][A-Z0-9]*(_[A-Z0-9]+)+", x.strip())]
    assert not left, left


def test_dist_is_made_before_it_is_installed_from():
    text = README.read_text()
    uses = 0
    for block in _sh_blocks(text):
        for i, line in enumerate(block):
            m = re.search(r"--find-links\s+(\S+)", line)
            if not m:
                continue
            uses += 1
            folder = m.group(1)
            made = [x for x in block[:i] if "maturin build" in x and re.search(rf"-o\s+(\.\./)?{re.escape(folder)}\b", x)]
            assert made, f"`{line.strip()}`: no earlier `maturin build ... -o {folder}` in its block"
    assert uses, "the README no longer installs from dist/: update this test"
    # The commands are the ones CI runs.
    ci = (REPO / "ci/test.sh").read_text()
    assert "maturin\" build --release -q --zig" in ci and "--compatibility manylinux2014" in ci
