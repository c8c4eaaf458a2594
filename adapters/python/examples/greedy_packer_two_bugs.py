"""A greedy packer with two distinct bugs, so that one run of `thdcheck fuzz packer` reports both,
each shrunk on its own (issue 40: a crash of the simplest case must not hide a different bug of
a later one):

- it logs the mean example length before packing, which divides by zero on an empty request (an
  empty dataset divides by zero in Megatron-Bridge's packing): an adapter error,
  `ZeroDivisionError`, on the simplest case;
- a request of 3 or more examples goes through a look-ahead loop that stops one example short:
  the last example is neither packed nor reported dropped (`packer-conservation`).

With `dp_size` (`--dp-size R`) the packs are dealt round-robin and padded with marked repeats of
the first pack, as `padding_batch_packer.py` does, so every rank gets as many (no other rule
breaks).
"""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from greedy_packer import pack as greedy  # noqa: E402
from thdcheck_adapter import serve_packer  # noqa: E402


def pack(lengths, capacity, seed, dp_size=None):
    mean = sum(lengths) / len(lengths)  # BUG 1: ZeroDivisionError on an empty request
    print("packing %d examples, mean length %.1f" % (len(lengths), mean), file=sys.stderr)
    if len(lengths) >= 3:
        # BUG 2: the look-ahead loop stops one short; the last example is lost.
        packs, dropped = greedy(lengths[:-1], capacity, seed)
    else:
        packs, dropped = greedy(lengths, capacity, seed)
    out = {"packs": packs, "dropped": dropped}
    if dp_size:
        out["padding"] = []
        while packs and len(packs) % dp_size:
            out["padding"].append(len(packs))
            packs.append(list(packs[0]))
        out["ranks"] = [k % dp_size for k in range(len(packs))]
    return out


if __name__ == "__main__":
    serve_packer(pack)
