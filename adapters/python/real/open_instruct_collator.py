"""open-instruct's real padding-free collators as a `thdcheck fuzz collator` adapter.

    thdcheck fuzz collator [--mode dpo] -- python adapters/python/real/open_instruct_collator.py COMMIT

imports `open_instruct/padding_free_collator.py` at COMMIT from a mirror of allenai/open-instruct
(no upstream code is copied: `corpus/real/common.py` reads it with `git show`; set
THDCHECK_MIRRORS), and answers each request with what the real collator returns: SFT
`TensorDataCollatorWithFlattening(max_seq_length=…)`, DPO `TensorDataCollatorWithFlatteningDPO`
followed by `concatenated_inputs`, as `dpo_utils.concatenated_forward_olmo` sees them. No
workaround: the batch goes back as the collator built it. Needs torch (not in CI).

Commits worth fuzzing: f009311bc (OI-B2), 005366f75^ (OI-B1), 005366f75 and e6c3044aa (both
fixed, the chosen padding still in a rejected document: PR #1900).
"""

import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, ".."))
sys.path.insert(0, os.path.join(HERE, "..", "..", "..", "corpus", "real"))

import torch  # noqa: E402

from stacks.open_instruct import dpo_features, load  # noqa: E402
from thdcheck_adapter import serve_collator  # noqa: E402


def main():
    commit = sys.argv[1] if len(sys.argv) > 1 else "e6c3044aa"
    mod, _ = load(commit)

    def collate(examples, max_seq_length):
        args = {} if max_seq_length is None else {"max_seq_length": max_seq_length}
        if "input_ids" in examples[0]:
            feats = [
                {"input_ids": torch.tensor(e["input_ids"]), "labels": torch.tensor(e["input_ids"])}
                for e in examples
            ]
            return dict(mod.TensorDataCollatorWithFlattening(**args)(feats))
        feats = dpo_features(
            [e["chosen_input_ids"] for e in examples], [e["rejected_input_ids"] for e in examples]
        )
        batch = dict(mod.TensorDataCollatorWithFlatteningDPO(**args)(feats))
        concat, _ = mod.concatenated_inputs(batch)
        batch.update(concat)
        return batch

    serve_collator(collate)


if __name__ == "__main__":
    main()
