"""A word-level Hugging Face fast tokenizer built in memory (no files, no network) for collators
that only read `pad_token_id`, `eos_token_id`, `padding_side` and call `tokenizer.pad(...)`
(axolotl's `DataCollatorForSeq2Seq`, LLM Foundry's `Seq2SeqFinetuningCollator`). Ids: `<pad>` 0,
`<s>` 1, `</s>` 2, `t3` … `t255` = 3 … 255. Not a stack (the leading underscore keeps
generate.py from running it)."""

from __future__ import annotations

DESCRIPTION = ("transformers.PreTrainedTokenizerFast over an in-memory tokenizers WordLevel vocabulary "
               "(<pad>=0, <s>=1, </s>=2, t3..t255=3..255); only pad/eos ids, padding_side and .pad() "
               "are used")


def toy_tokenizer(padding_side: str = "right"):
    from tokenizers import Tokenizer, models
    from transformers import PreTrainedTokenizerFast

    vocab = {"<pad>": 0, "<s>": 1, "</s>": 2, **{f"t{i}": i for i in range(3, 256)}}
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<pad>"))
    return PreTrainedTokenizerFast(tokenizer_object=tok, pad_token="<pad>", bos_token="<s>",
                                   eos_token="</s>", padding_side=padding_side)
