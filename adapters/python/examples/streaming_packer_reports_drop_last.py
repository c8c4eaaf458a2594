"""A drop_last streaming packer that says what it drops: at the end of an epoch it drops the open
pack (PyTorch's `drop_last`: the epoch's last, incomplete batch) and reports its examples as
`dropped`, where `streaming_packer_drops_carry.py` loses the same examples silently. Under
`thdcheck fuzz packer --session --drops drop-last` both pass: reporting a loss the stack
declares is never judged worse than keeping quiet about it.

    python3 streaming_packer_reports_drop_last.py        # the open pack: passes under drop-last
    python3 streaming_packer_reports_drop_last.py more   # BUG: also the last full pack, reported:
                                                         # packer-drops (more than one pack)"""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from streaming_packer import StreamingPacker  # noqa: E402
from thdcheck_adapter import serve_packer_session  # noqa: E402

MORE = sys.argv[1:] == ["more"]


class ReportsDropLast(StreamingPacker):
    def __init__(self, capacity, seed):
        super().__init__(capacity, seed)
        self.filled = []  # the packs filled this epoch, held back until it ends

    def push(self, examples):
        out = super().push(examples)
        self.filled.extend(out["packs"])
        return {"packs": [], "dropped": out["dropped"]}

    def end_epoch(self):
        packs, dropped = self.filled, self.carry  # the open pack: the epoch's incomplete batch
        if MORE and packs:
            packs, dropped = packs[:-1], packs[-1] + dropped  # BUG: a full pack too
        self.filled, self.carry, self.load = [], [], 0
        return {"packs": packs, "dropped": dropped}

    def finish(self):
        return {"packs": [], "pending": 0}


if __name__ == "__main__":
    serve_packer_session(ReportsDropLast)
