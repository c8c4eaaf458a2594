"""transformers' real `DataCollatorWithFlattening` as a `thdcheck fuzz collator` adapter.

    thdcheck fuzz collator --profile transformers -- python adapters/python/real/transformers_flatten_collator.py [OPTION=VALUE ...]

OPTION=VALUE pairs go to the constructor as they are (`return_flash_attn_kwargs=true`,
`return_seq_idx=true`, `separator_id=2`, `return_position_ids=false`); the default constructor
returns `input_ids`, `labels` and `position_ids` only, whose restarts are the documents. The
collator never pads to a static length. Needs transformers (not in CI).
"""

import json
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from transformers import DataCollatorWithFlattening  # noqa: E402

from thdcheck_adapter import serve_collator  # noqa: E402


def main():
    kwargs = {}
    for arg in sys.argv[1:]:
        key, _, value = arg.partition("=")
        kwargs[key] = json.loads(value)
    collator = DataCollatorWithFlattening(return_tensors="pt", **kwargs)

    def collate(examples, max_seq_length):
        return dict(collator([{"input_ids": e["input_ids"]} for e in examples]))

    serve_collator(collate)


if __name__ == "__main__":
    main()
