"""A word-level Hugging Face tokenizer built in memory (no network) from the texts a stack module
feeds its upstream code, for stacks whose batch builders tokenize text themselves (LitGPT's
`Tokenizer`, ROLL's chat-template encoding, picotron's `batch_encode_plus`). Words are
`\\w+|[^\\w\\s]+` (the `Whitespace` pre-tokenizer); the special tokens come first with ids 0, 1, …
in the order given, then the words sorted. Not a stack (the leading underscore keeps
generate.py from running it)."""

from __future__ import annotations

import json
import re
from pathlib import Path

WORD = re.compile(r"\w+|[^\w\s]+")


def vocab(texts: list[str], specials: list[str]) -> dict[str, int]:
    """Special tokens first, then every word of `texts` (specials cut out first), sorted."""
    words: set[str] = set()
    for text in texts:
        for s in specials:
            text = text.replace(s, " ")
        words.update(WORD.findall(text))
    out = {s: i for i, s in enumerate(specials)}
    for w in sorted(words):
        out.setdefault(w, len(out))
    return out


def backend(texts: list[str], specials: list[str], unk: str, bos_template: str | None = None):
    """A `tokenizers.Tokenizer`: WordLevel over `vocab(texts, specials)`, `Whitespace`
    pre-tokenizer, the specials as added special tokens; `bos_template` (a special) is prepended
    to every encoding by a `TemplateProcessing` post-processor (a Llama-style BOS)."""
    from tokenizers import Tokenizer, models, pre_tokenizers, processors

    v = vocab(texts, specials)
    tok = Tokenizer(models.WordLevel(vocab=v, unk_token=unk))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.add_special_tokens(list(specials))
    if bos_template is not None:
        tok.post_processor = processors.TemplateProcessing(
            single=f"{bos_template} $A", pair=f"{bos_template} $A {bos_template} $B",
            special_tokens=[(bos_template, v[bos_template])])
    return tok


def description(specials: list[str], bos_template: str | None = None) -> str:
    ids = ", ".join(f"{s}={i}" for i, s in enumerate(specials))
    return (f"an in-memory word-level tokenizer (tokenizers WordLevel + Whitespace pre-tokenizer) over "
            f"the words of the input texts: {ids}, then the words sorted"
            + (f"; a {bos_template} is prepended to every encoding (Llama-style)" if bos_template else ""))


def save_checkpoint_dir(path: Path, texts: list[str], specials: list[str], unk: str, *,
                        bos: str | None, eos: str | None, add_bos_token: bool,
                        tokenizer_class: str = "PreTrainedTokenizerFast") -> Path:
    """Writes `tokenizer.json` and `tokenizer_config.json` into `path` (a LitGPT-style checkpoint
    directory read by `litgpt.tokenizer.Tokenizer`)."""
    path.mkdir(parents=True, exist_ok=True)
    backend(texts, specials, unk).save(str(path / "tokenizer.json"))
    config = {"tokenizer_class": tokenizer_class, "add_bos_token": add_bos_token,
              "bos_token": bos, "eos_token": eos}
    (path / "tokenizer_config.json").write_text(json.dumps(config))
    return path


def hf_tokenizer(texts: list[str], specials: list[str], unk: str, *, pad: str | None = None,
                 bos: str | None = None, eos: str | None = None, bos_template: str | None = None,
                 padding_side: str = "right"):
    """A `transformers.PreTrainedTokenizerFast` over `backend(...)`."""
    from transformers import PreTrainedTokenizerFast

    kw = {k: v for k, v in {"pad_token": pad, "bos_token": bos, "eos_token": eos,
                            "unk_token": unk}.items() if v is not None}
    return PreTrainedTokenizerFast(tokenizer_object=backend(texts, specials, unk, bos_template),
                                   padding_side=padding_side, **kw)
