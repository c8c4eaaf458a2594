"""bionemo recipes' real THD collator (`DataCollatorWithFlattening` of `collator.py`, wrapping
transformers' `DataCollatorForLanguageModeling`) as a `thdcheck fuzz collator` adapter.

    thdcheck fuzz collator --profile bionemo_esm2 (or bionemo_llama3) -- \
        python adapters/python/real/bionemo_collator.py RECIPE [OPTION=VALUE ...]

RECIPE is `esm2` (masked LM, ESM-2 tokenizer, pad id 1) or `llama3` (causal LM, nucleotide
tokenizer, `separator_id=-100` as the recipe sets it). OPTION=VALUE pairs go to the bionemo
collator (`pad_to_multiple_of=16`, `pad_sequences_to_be_divisible_by=4`) or, prefixed with
`mlm_`, to the wrapped HF collator (`mlm_probability=0.15`). The files are read at bionemo
`e40716591` from a mirror (`corpus/real/common.py`; THDCHECK_MIRRORS), never copied.
Needs torch and transformers (not in CI).
"""

import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, ".."))
sys.path.insert(0, os.path.join(HERE, "..", "..", "..", "corpus", "real"))

from transformers import DataCollatorForLanguageModeling  # noqa: E402

from stacks.bionemo import ESM_COLLATOR, ESM_TOK, LLAMA_COLLATOR, LLAMA_TOK, _load, _tokenizer  # noqa: E402
from thdcheck_adapter import serve_collator  # noqa: E402


def main():
    recipe = sys.argv[1] if len(sys.argv) > 1 else "esm2"
    outer, inner = {}, {}
    for arg in sys.argv[2:]:
        key, _, value = arg.partition("=")
        if key == "mlm_probability":
            inner[key] = json.loads(value)
        else:
            outer[key] = json.loads(value)
    if recipe == "esm2":
        mod, tok = _load(ESM_COLLATOR), _tokenizer(ESM_TOK)
        inner.setdefault("mlm_probability", 0.15)
        wrapped = DataCollatorForLanguageModeling(tokenizer=tok, seed=0, **inner)
    else:
        mod, tok = _load(LLAMA_COLLATOR), _tokenizer(LLAMA_TOK)
        if tok.pad_token is None:  # llama3 dataset.py: the recipe's own fallback
            tok.pad_token = tok.eos_token
        wrapped = DataCollatorForLanguageModeling(tokenizer=tok, mlm=False)
        outer.setdefault("separator_id", -100)
    collator = mod.DataCollatorWithFlattening(collator=wrapped, **outer)

    def collate(examples, max_seq_length):
        return dict(collator([{"input_ids": list(e["input_ids"])} for e in examples]))

    serve_collator(collate)


if __name__ == "__main__":
    main()
