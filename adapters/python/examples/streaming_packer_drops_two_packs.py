"""A buggy drop_last streaming packer: it keeps the packs it filled during an epoch and, at the
end of the epoch, emits all but the last two, losing a full pack besides the open one. A stack
whose loader drops each epoch's last, incomplete pack (`--drops drop-last`, PyTorch's
`drop_last`) may lose what fits one pack, not more: `thdcheck fuzz packer --session --drops
over-length --drops drop-last` finds it (`packer-conservation`) and shrinks it to two examples
that do not fit one pack together. `streaming_packer_drops_carry.py`, which loses only the open
pack, passes under the same flags."""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from streaming_packer import StreamingPacker  # noqa: E402
from thdcheck_adapter import serve_packer_session  # noqa: E402


class DropsTwoPacks(StreamingPacker):
    def __init__(self, capacity, seed):
        super().__init__(capacity, seed)
        self.filled = []  # the packs filled this epoch, held back until it ends

    def push(self, examples):
        out = super().push(examples)
        self.filled.extend(out["packs"])
        return {"packs": [], "dropped": out["dropped"]}

    def end_epoch(self):
        packs = self.filled + ([self.carry] if self.carry else [])
        self.filled, self.carry, self.load = [], [], 0
        return packs[:-2]  # BUG: the open pack and the last full one are lost

    def finish(self):
        return {"packs": [], "pending": 0}


if __name__ == "__main__":
    serve_packer_session(DropsTwoPacks)
