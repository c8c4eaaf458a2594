"""The flattening collator with a padding mask built from token values (a planted bug): pad id
0 marks padding, so `attention_mask = input_ids != 0`. Any real token whose id is 0 (a real
vocabulary entry in many tokenizers, and the pad id of others) is masked out as padding.
`thdcheck fuzz collator` draws id 0 regularly and reports it under the `mask` rule."""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from flatten_collator import flatten  # noqa: E402
from thdcheck_adapter import serve_collator  # noqa: E402

PAD_ID = 0


def collate(examples, max_seq_length):
    batch = flatten([e["input_ids"] for e in examples], max_seq_length)
    # BUG: padding is where the layout says, not where the id happens to be the pad id.
    batch["attention_mask"] = [[int(t != PAD_ID) for t in row] for row in batch["input_ids"]]
    return batch


if __name__ == "__main__":
    serve_collator(collate)
