"""A correct streaming packer (a packer session, `thdcheck fuzz packer --session`): examples
arrive a few at a time over several epochs; it fills the open pack in arrival order and emits
a pack as soon as the next example does not fit. The open pack (the overflow carry) outlives
every call and every epoch boundary: it is emitted exactly once, when it fills or at `finish`.
Examples longer than the capacity are dropped and reported as dropped."""

import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from thdcheck_adapter import serve_packer_session  # noqa: E402


class StreamingPacker:
    def __init__(self, capacity, seed):
        self.capacity = capacity
        self.carry, self.load = [], 0  # the open pack, carried across calls and epochs

    def push(self, examples):
        packs, dropped = [], []
        for e in examples:
            if e["len"] > self.capacity:
                dropped.append(e["id"])
                continue
            if self.load + e["len"] > self.capacity:
                packs.append(self.carry)
                self.carry, self.load = [], 0
            self.carry.append(e["id"])
            self.load += e["len"]
        return {"packs": packs, "dropped": dropped}

    def end_epoch(self):
        return []  # the carry goes on into the next epoch

    def finish(self):
        packs = [self.carry] if self.carry else []
        self.carry, self.load = [], 0
        return {"packs": packs, "pending": 0}


if __name__ == "__main__":
    serve_packer_session(StreamingPacker)
