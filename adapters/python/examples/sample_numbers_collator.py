"""A packing collator without offsets, in the formats of axolotl, LLM Foundry, TRL and OLMo-core
(stdlib only): the examples back to back in one row, static padding to max_seq_length (pad id
0, label -100). Labels are unshifted with -100 at every example's first token, so no prediction
crosses a boundary (OLMo-core has no labels: see below).

    python3 sample_numbers_collator.py axolotl      # attention_mask = 1, 2, 3 … per example, 0 on
                                                    # padding, and position ids restarting per example
                                                    # (axolotl's multipack collators)
    python3 sample_numbers_collator.py llm_foundry  # sequence_id = 0, 1, 2 … per example, -1 on
                                                    # padding, beside a 0/1 attention_mask
                                                    # (LLM Foundry's BinPackCollator)
    python3 sample_numbers_collator.py trl          # position_ids restarting per example and no
                                                    # attention_mask, padding at position 0 per
                                                    # token (TRL's padding-free collator)
    python3 sample_numbers_collator.py olmo_core    # doc_lens / max_doc_lens per row, label_mask,
                                                    # no labels (OLMo-core's DataCollator; fuzz it
                                                    # with --profile olmo_core: its labels are the
                                                    # row shifted, across examples by design)

`thdcheck fuzz collator` reads the answers as `thdcheck check` reads a dumped file, so a
collator in either format is fuzzed without translating its output."""

import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from thdcheck_adapter import serve_collator  # noqa: E402

FORMAT = sys.argv[1] if len(sys.argv) > 1 else "axolotl"


def collate(examples, max_seq_length):
    ids, labels, numbers, positions = [], [], [], []
    for i, e in enumerate(examples):
        seq = e["input_ids"]
        ids += seq
        labels += [-100] + seq[1:]
        numbers += [i] * len(seq)
        positions += list(range(len(seq)))
    pad = 0 if max_seq_length is None else max_seq_length - len(ids)
    ids += [0] * pad
    labels += [-100] * pad
    if FORMAT == "trl":
        return {
            "input_ids": [ids],
            "labels": [labels],
            "position_ids": [positions + [0] * pad],
        }
    if FORMAT == "olmo_core":
        lens = [len(e["input_ids"]) for e in examples] + ([pad] if pad else [])
        return {
            "input_ids": [ids],
            "doc_lens": [lens],
            "max_doc_lens": [max(lens, default=0)],
            "label_mask": [[1] * len(numbers) + [0] * pad],
        }
    if FORMAT == "llm_foundry":
        return {
            "input_ids": [ids],
            "labels": [labels],
            "attention_mask": [[1] * len(numbers) + [0] * pad],
            "sequence_id": [numbers + [-1] * pad],
        }
    # axolotl: the padding continues the last example's positions (range(r), #2739's fix).
    return {
        "input_ids": [ids],
        "labels": [labels],
        "attention_mask": [[n + 1 for n in numbers] + [0] * pad],
        "position_ids": [positions + list(range(pad))],
    }


if __name__ == "__main__":
    if FORMAT not in ("axolotl", "llm_foundry", "trl", "olmo_core"):
        sys.exit("usage: sample_numbers_collator.py axolotl|llm_foundry|trl|olmo_core")
    serve_collator(collate)
