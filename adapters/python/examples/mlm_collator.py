"""A flattening masked-LM collator (DataCollatorForLanguageModeling(mlm=True) +
flattening), deterministic for replay: every third real token is replaced by the mask id 103,
the next one is kept as it is (BERT's "keep" share), both carry their original token as label;
every other token and the padding carry -100. Labels are not shifted: no prediction crosses a
document. Correct under `thdcheck fuzz collator --mlm`."""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from flatten_collator import flatten  # noqa: E402
from thdcheck_adapter import serve_collator  # noqa: E402

MASK_ID = 103


def collate(examples, max_seq_length):
    batch = flatten([e["input_ids"] for e in examples], max_seq_length)
    ids = batch["input_ids"][0]
    real = batch["cu_seq_lens_q"][-1]
    labels, masked = [], []
    for i, t in enumerate(ids):
        if i < real and i % 3 == 0:
            labels.append(t)
            masked.append(MASK_ID)
        elif i < real and i % 3 == 1:
            labels.append(t)
            masked.append(t)
        else:
            labels.append(-100)
            masked.append(t)
    batch["input_ids"] = [masked]
    batch["labels"] = [labels]
    return batch


if __name__ == "__main__":
    serve_collator(collate)
