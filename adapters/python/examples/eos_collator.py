"""The flattening collator that appends an EOS token (id 2) to every example, as tokenizers
with `add_eos_token` do. Correct under `thdcheck fuzz collator --add-eos 2`; without the flag,
`documents` reports the extra token."""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from flatten_collator import flatten  # noqa: E402
from thdcheck_adapter import serve_collator  # noqa: E402

EOS_ID = 2


def collate(examples, max_seq_length):
    return flatten([e["input_ids"] + [EOS_ID] for e in examples], max_seq_length)


if __name__ == "__main__":
    serve_collator(collate)
