"""The flattening collator with open-instruct's DPO offset bug (OI-B1, fixed in 005366f75):
the rejected offsets are shifted by the *real* chosen length instead of the padded one, so as
soon as the chosen pack is padded the rejected segments point at chosen padding."""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from flatten_collator import collate  # noqa: E402
from thdcheck_adapter import serve_collator  # noqa: E402


def real_chosen_length(chosen):
    return chosen["cu_seq_lens_k"][-1]  # BUG: ignores the chosen padding


if __name__ == "__main__":
    # The pre-005366f75 code had no padding segment either.
    serve_collator(
        lambda examples, m: collate(examples, m, offset=real_chosen_length, padding_segment=False)
    )
