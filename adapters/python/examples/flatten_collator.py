"""A flattening collator (Hugging Face / open-instruct DataCollatorWithFlattening): concatenate
the examples, -100 at every segment start, position ids restarting per segment, static padding
to max_seq_length (pad id 0, label -100, outside cu_seq_lens). For DPO requests it flattens the
chosen and rejected branches separately and concatenates them like open-instruct's
`concatenated_inputs` after both fixes: rejected offsets shifted by the *padded* chosen length
(005366f75), and the chosen padding its own segment, in no document (open-instruct PR #1900)."""

import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from thdcheck_adapter import serve_collator  # noqa: E402


def flatten(sequences, max_seq_length):
    input_ids, labels, position_ids, cu = [], [], [], [0]
    for seq in sequences:
        input_ids += seq
        labels += [-100] + seq[1:]
        position_ids += list(range(len(seq)))
        cu.append(len(input_ids))
    if max_seq_length is not None and len(input_ids) < max_seq_length:
        pad = max_seq_length - len(input_ids)
        input_ids += [0] * pad
        labels += [-100] * pad
        position_ids += [0] * pad
    longest = max((len(s) for s in sequences), default=0)
    return {
        "input_ids": [input_ids],
        "labels": [labels],
        "position_ids": [position_ids],
        "cu_seq_lens_q": cu,
        "cu_seq_lens_k": list(cu),
        "max_length_q": longest,
        "max_length_k": longest,
    }


def rejected_offset(chosen):
    """The shift of the rejected offsets: the padded chosen length."""
    return len(chosen["input_ids"][0])


def within_budget(examples, max_seq_length):
    """The longest prefix of examples that fits max_seq_length (on both branches for DPO), as
    open-instruct's count_features_within_token_budget keeps it."""
    if max_seq_length is None:
        return examples
    keys = ["input_ids"] if "input_ids" in examples[0] else ["chosen_input_ids", "rejected_input_ids"]
    totals = {k: 0 for k in keys}
    for n, e in enumerate(examples):
        for k in keys:
            totals[k] += len(e[k])
        if any(t > max_seq_length for t in totals.values()):
            return examples[:n]
    return examples


def collate(examples, max_seq_length, offset=rejected_offset, padding_segment=True):
    examples = within_budget(examples, max_seq_length)
    if "input_ids" in examples[0]:
        return flatten([e["input_ids"] for e in examples], max_seq_length)
    chosen = flatten([e["chosen_input_ids"] for e in examples], max_seq_length)
    rejected = flatten([e["rejected_input_ids"] for e in examples], max_seq_length)
    batch = {"chosen_" + k: v for k, v in chosen.items()}
    batch.update({"rejected_" + k: v for k, v in rejected.items()})
    shift = offset(chosen)
    real = chosen["cu_seq_lens_k"][-1]
    # The chosen padding (real..shift) as a segment of its own, so no document holds it.
    pad = [shift] if padding_segment and shift > real else []
    cu = chosen["cu_seq_lens_k"] + pad + [x + shift for x in rejected["cu_seq_lens_k"][1:]]
    for key in ("input_ids", "labels", "position_ids"):
        batch["concatenated_" + key] = [chosen[key][0] + rejected[key][0]]
    batch["concatenated_cu_seq_lens_q"] = cu
    batch["concatenated_cu_seq_lens_k"] = list(cu)
    batch["index"] = [e["index"] for e in examples]
    return batch


if __name__ == "__main__":
    serve_collator(collate)
