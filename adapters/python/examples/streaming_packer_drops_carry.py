"""A buggy streaming packer (the open-instruct #1472 class): like streaming_packer.py, but at
the end of an epoch it resets its state for the next one and forgets the open pack, so the
examples carried over the epoch boundary are never emitted nor reported. A one-shot request
cannot see it; `thdcheck fuzz packer --session` finds it and shrinks it to one example, one
epoch."""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from streaming_packer import StreamingPacker  # noqa: E402
from thdcheck_adapter import serve_packer_session  # noqa: E402


class DropsCarry(StreamingPacker):
    def end_epoch(self):
        self.carry, self.load = [], 0  # BUG: the carried examples are lost
        return []


if __name__ == "__main__":
    serve_packer_session(DropsCarry)
