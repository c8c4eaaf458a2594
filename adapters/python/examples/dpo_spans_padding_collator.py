"""The flattening collator as open-instruct has it from 005366f75 to HEAD (PR #1900): the rejected
offsets are shifted by the padded chosen length, but no segment ends where the chosen documents
end, so rejected example 0's segment spans the chosen padding and it attends to the pad tokens
(`[0, 50, 100, 550, 600]`, initial DPO loss 6x ln 2)."""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from flatten_collator import collate  # noqa: E402
from thdcheck_adapter import serve_collator  # noqa: E402

if __name__ == "__main__":
    serve_collator(lambda examples, m: collate(examples, m, padding_segment=False))  # BUG
