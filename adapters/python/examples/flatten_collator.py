"""A flattening collator (Hugging Face / open-instruct DataCollatorWithFlattening): concatenate
the examples, -100 at every segment start, position ids restarting per segment, static padding
to max_seq_length (pad id 0, label -100, outside cu_seq_lens). For DPO requests it flattens the
chosen and rejected branches separately and concatenates them like open-instruct's
`concatenated_inputs` (fixed, 005366f75): rejected offsets shifted by the *padded* chosen
length, with the chosen padding as its own segment (open-instruct PR #1900), so that the first
rejected example does not span it wherever the offsets are read as document lengths."""

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


def collate(examples, max_seq_length, offset=rejected_offset, padding_segment=True):
    if "input_ids" in examples[0]:
        return flatten([e["input_ids"] for e in examples], max_seq_length)
    chosen = flatten([e["chosen_input_ids"] for e in examples], max_seq_length)
    rejected = flatten([e["rejected_input_ids"] for e in examples], max_seq_length)
    batch = {"chosen_" + k: v for k, v in chosen.items()}
    batch.update({"rejected_" + k: v for k, v in rejected.items()})
    shift = offset(chosen)
    cu = list(chosen["cu_seq_lens_k"])
    padded = len(chosen["input_ids"][0])
    if padding_segment and cu[-1] < padded:
        cu.append(padded)  # PR #1900: the chosen padding is a segment of its own
    cu += [x + shift for x in rejected["cu_seq_lens_k"][1:]]
    for key in ("input_ids", "labels", "position_ids"):
        batch["concatenated_" + key] = [chosen[key][0] + rejected[key][0]]
    batch["concatenated_cu_seq_lens_q"] = cu
    batch["concatenated_cu_seq_lens_k"] = list(cu)
    batch["index"] = [e["index"] for e in examples]
    return batch


if __name__ == "__main__":
    serve_collator(collate)
