"""Lightning-AI/litgpt: the fine-tuning batch (`SFTDataset.__getitem__` and `_sft_collate_fn` via
`get_sft_collate_fn`, litgpt/data/base.py, with the real `Tokenizer` of litgpt/tokenizer.py and
the `alpaca` prompt style of litgpt/prompts.py) and the pretraining batch (the `TextFiles` data
module of litgpt/data/text_files.py, run through LitData's `optimize` and `StreamingDataset` /
`TokensLoader`, then `pretrain.py` `fit`'s split into `input_ids` and `targets`) at main
26857050f (v0.5.13), and bug PR #1694 (issue #1682) at its parent ea01fbc57. Issue 39's blind
protocol: the profiles (`batches/litgpt/profile.toml`, `profile_pretrain.toml`) were written from
the code before any batch was made (blind/litgpt/NOTES.md); this module only runs the code.

LitGPT has no packing, no varlen path, no position ids and no context parallelism.

Contract (26857050f):
- `SFTDataset.__getitem__`: `encode(prompt)` (BOS when the tokenizer's config says
  `add_bos_token`) ++ `encode(output, bos=False, eos=True)`, int64, cut to `max_seq_length`
  only when it is > 0 (since #1694); `labels` a copy with the prompt set to -100 under
  `mask_prompt`;
- `_sft_collate_fn`: `pad_sequence(batch_first=True)` on the right, `input_ids` with `pad_id` 0
  (the default every data module uses, whatever the tokenizer), `labels` with -100, then
  `[:, :max_seq_length]` when > 0; `token_counts` a dict of two [B, 1] count tensors;
- the loss shifts (`chunked_cross_entropy(logits[..., :-1, :], targets[..., 1:])`): labels are
  unshifted; attention is causal SDPA without a mask, so the right padding is never attended by a
  real token; every example ends with its EOS unless it was cut by `max_seq_length`;
- pretraining: each loader item is a block of `max_seq_length + 1` ids of the token stream
  (`TokensLoader(block_size)`); `fit` takes `input_ids = train_data[:, 0:max_seq_length]`,
  `targets = train_data[:, 1:max_seq_length + 1]` and trains every target, across the
  documents of the stream (`TextFiles.tokenize`: `encode(text, bos=True, eos=False)` per file).

Saved: `input_ids`, `labels` as the collate returns them (`token_counts`, a nested dict, is not a
tensor and is left out); for pretraining `input_ids` and `targets` as `fit` computes them (those
two lines of `fit`, which run inside its training loop, are applied to the loader's batch as
written). Metadata: only `profile` (the blind profile file in the batch's folder).

The tokenizer is a LitGPT checkpoint directory written here (`tokenizer.json`,
`tokenizer_config.json`): a word-level vocabulary over the examples' words with Llama-2's special
ids (`<unk>` 0, `<s>` 1, `</s>` 2, `add_bos_token`), and for the EOS-0 case GPT-NeoX/Pythia's
(`<|endoftext|>` 0 as BOS and EOS, no BOS added).

Bug reproduction: PR #1694 (issue #1682, fixed by f655f01b1 "Preserve eos in encoding when
max_seq_length = -1"): at ea01fbc57 `__getitem__` sliced `[: self.max_seq_length]`
unconditionally, so with the default `max_seq_length = -1` every example lost its last token, the
EOS (input and label): no example is trained to stop.
"""

from __future__ import annotations

import shutil
import sys
import tempfile
from pathlib import Path

import common
from common import save_case, stub, upstream

REPO = "Lightning-AI/litgpt"
STACK = "litgpt"
COMMIT = "26857050fe3ff627cd714fe92f5838f51a3d5efa"
BUG_COMMIT = "ea01fbc5758ac0da07fe83db99f803f7ddfcf8dd"  # = f655f01b1^
FIX_COMMIT = "f655f01b19d32fcf7f7d3fd8b68b25b904c825e4"
BASE = "litgpt/data/base.py"
TOK = "litgpt/tokenizer.py"
PROMPTS = "litgpt/prompts.py"
TEXT_FILES = "litgpt/data/text_files.py"
PROFILE = "profile.toml"
PROFILE_PRETRAIN = "profile_pretrain.toml"

EXAMPLES = [
    {"instruction": "Name a colour.", "input": "", "output": "Blue."},
    {"instruction": "Give two fruits.", "input": "", "output": "An apple and a pear."},
    {"instruction": "Say hello in French.", "input": "", "output": "Bonjour, my friend, how are you today?"},
]
LLAMA = ["<unk>", "<s>", "</s>"]
NEOX = ["<|endoftext|>", "<|padding|>"]
# Blind run (issue 39): what thdcheck got wrong, with what it lacks (blind/litgpt/NOTES.md).
PENDING_EOS_0 = (
    "false alarm pad-labels: under documents = row-pad-tail with pad_token_id 0 every trailing id 0 "
    "is read as padding, so each row's real EOS 0 (trained, label 0) becomes padding with a label "
    "(103 real tokens read for 106, useful sum s^2 3577 for 3786). The vocabulary has no fact for "
    "'the padding is the tail after each row's own length' (the labels' -100 tail, or lengths) "
    "when the pad id is also a real token id (NOTES 'Cannot state' 1)")
PENDING_EOS_DROPPED = (
    "bug missed (pass): the blind profile does not state documents = eos (a row cut at "
    "max_seq_length > 0 legitimately lacks its EOS, NOTES 'Cannot state' 6), so eos-delimited is "
    "skipped silently and nothing else can see a missing EOS. The vocabulary cannot say 'every "
    "row ends with the EOS unless cut at max_seq_length'")
PRETRAIN_TEXTS = [
    "the first file is held out for validation",
    "rivers carry water from the hills down to the sea",
    "an old clock ticked slowly in the quiet hall",
    "bright stars rose over the sleeping town",
]


def load(commit: str):
    """(base, tokenizer, prompts) of `commit`: the real files, imported as `litgpt.*` so that
    base.py's imports resolve to them."""
    for name in ("litgpt", "litgpt.data"):
        m = stub(name)
        m.__path__ = []
        sys.modules[name] = m
    stubs = {"lightning": stub("lightning", LightningDataModule=object),
             "litgpt.utils": stub("litgpt.utils", fix_and_load_json=None),
             "litgpt.config": stub("litgpt.config", Config=None)}
    tok = upstream(REPO, commit, TOK, name="litgpt.tokenizer", stubs=stubs)
    prompts = upstream(REPO, commit, PROMPTS, name="litgpt.prompts")
    base = upstream(REPO, commit, BASE, name="litgpt.data.base")
    return base, tok, prompts


STUBS = ["lightning.LightningDataModule = object (base class of DataModule, unused by SFTDataset "
         "and the collate)", "litgpt.utils.fix_and_load_json (used only for a broken "
         "generation_config.json; none is written)", "litgpt.config.Config (prompts.py type, unused "
         "by the alpaca style)", f"{TOK}, {PROMPTS}: the real files at the same commit"]


def checkpoint(kind: str, texts: list[str]) -> Path:
    from stacks import _word_tokenizer as wt

    d = Path(tempfile.mkdtemp(prefix="litgpt-tok-", dir=common.SCRATCH)) / f"toy-{kind}"
    if kind == "llama":
        return wt.save_checkpoint_dir(d, texts, LLAMA, "<unk>", bos="<s>", eos="</s>",
                                      add_bos_token=True)
    return wt.save_checkpoint_dir(d, texts, NEOX, "<|padding|>", bos="<|endoftext|>",
                                  eos="<|endoftext|>", add_bos_token=False,
                                  tokenizer_class="GPTNeoXTokenizer")


def tokenizer_desc(kind: str) -> str:
    from stacks import _word_tokenizer as wt

    if kind == "llama":
        return ("litgpt Tokenizer over a checkpoint dir holding " + wt.description(LLAMA)
                + "; tokenizer_config: bos <s>, eos </s>, add_bos_token true (Llama-2's ids)")
    return ("litgpt Tokenizer over a checkpoint dir holding " + wt.description(NEOX)
            + "; tokenizer_config: bos = eos = <|endoftext|> (id 0), add_bos_token false "
              "(GPT-NeoX / Pythia's ids)")


def sft_texts(prompts, examples) -> list[str]:
    style = prompts.PromptStyle.from_name("alpaca")
    return [style.apply(prompt=e["instruction"], **e) for e in examples] + [e["output"] for e in examples]


def independent_rows(tokenizer, prompts, examples, max_seq_length: int, mask_prompt: bool,
                     bos: bool, drop_last: bool = False):
    """What the contract gives, from the tokenizer's own vocabulary (for the record and the
    assertion): [BOS] + words(prompt) ++ words(output) + [EOS], cut to max_seq_length > 0."""
    style = prompts.PromptStyle.from_name("alpaca")
    rows, labels = [], []
    for e in examples:
        p = tokenizer.processor.encode(style.apply(prompt=e["instruction"], **e)).ids
        p = ([tokenizer.bos_id] if bos else []) + p
        r = tokenizer.processor.encode(e["output"]).ids + [tokenizer.eos_id]
        ids = p + r
        if drop_last:
            ids = ids[:-1]
        if max_seq_length > 0:
            ids = ids[:max_seq_length]
        lab = list(ids)
        if mask_prompt:
            lab[: len(p)] = [-100] * min(len(p), len(lab))
        rows.append(ids)
        labels.append(lab)
    return rows, labels


def run_sft(case: str, *, commit: str = COMMIT, kind: str = "llama", max_seq_length: int = -1,
            mask_prompt: bool = True, examples=EXAMPLES, expected="pass", why: str,
            bug: str | None = None, notes: str = "", drop_last: bool = False,
            pending: str | None = None) -> None:
    import torch

    base, tok_mod, prompts = load(commit)
    tokenizer = tok_mod.Tokenizer(checkpoint(kind, sft_texts(prompts, examples)))
    ds = base.SFTDataset(data=examples, tokenizer=tokenizer, prompt_style="alpaca",
                         max_seq_length=max_seq_length, mask_prompt=mask_prompt)
    collate = base.get_sft_collate_fn(max_seq_length=max_seq_length)
    batch = collate([ds[i] for i in range(len(ds))])
    assert {"input_ids", "labels"} <= set(batch) <= {"input_ids", "labels", "token_counts"}, set(batch)
    rows, labels = independent_rows(tokenizer, prompts, examples, max_seq_length, mask_prompt,
                                    bos=kind == "llama", drop_last=drop_last)
    width = max(len(r) for r in rows)
    for i, (r, l) in enumerate(zip(rows, labels)):
        assert batch["input_ids"][i, : len(r)].tolist() == r, (i, batch["input_ids"][i], r)
        assert batch["labels"][i, : len(l)].tolist() == l
        assert (batch["input_ids"][i, len(r):] == 0).all() and (batch["labels"][i, len(r):] == -100).all()
    assert batch["input_ids"].shape[1] == width
    lens = [len(r) for r in rows]
    why = why.format(lens=lens, width=width, sq=sum(n * n for n in lens),
                     eos=tokenizer.eos_id, bos=tokenizer.bos_id)
    save_case(STACK, case, {k: batch[k] for k in ("input_ids", "labels")}, repo=REPO,
              commit=commit, file=f"{BASE}, {TOK}, {PROMPTS}",
              function=f"SFTDataset(data, Tokenizer(dir), prompt_style='alpaca', "
                       f"max_seq_length={max_seq_length}, mask_prompt={mask_prompt})[0..{len(examples) - 1}]"
                       f" -> get_sft_collate_fn(max_seq_length={max_seq_length})(samples)",
              input={"examples": examples, "max_seq_length": max_seq_length,
                     "mask_prompt": mask_prompt, "tokenizer": tokenizer_desc(kind),
                     "rows (expected, independently tokenized)": rows},
              expected=expected, why=why, bug=bug, metadata={"profile": PROFILE},
              notes=(("token_counts (a dict of two [B, 1] count tensors, not per-token) is left out. "
                      if "token_counts" in batch else "")
                     + notes).strip(),
              stubs=STUBS, pending=pending)


def run_pretrain() -> None:
    """TextFiles.prepare_data (LitData optimize with TokensLoader) -> train_dataloader -> the first
    batch -> fit's two lines."""
    import litdata
    import torch

    base, tok_mod, prompts = load(COMMIT)
    sys.modules["litgpt.data"].DataModule = base.DataModule
    tf = upstream(REPO, COMMIT, TEXT_FILES, name="litgpt.data.text_files")
    tokenizer = tok_mod.Tokenizer(checkpoint("llama", PRETRAIN_TEXTS))
    work = Path(tempfile.mkdtemp(prefix="litgpt-text-", dir=common.SCRATCH))
    for i, t in enumerate(PRETRAIN_TEXTS):
        (work / f"{i}.txt").write_text(t + "\n")
    max_seq_length, batch_size = 8, 2
    data = tf.TextFiles(train_data_path=work, num_workers=0)
    data.connect(tokenizer=tokenizer, batch_size=batch_size, max_seq_length=max_seq_length)
    # LitData starts its optimize workers with `spawn` (re-importing the worker function by module
    # name, which the scratch-imported upstream modules do not have) unless it runs in a notebook:
    # the `ipykernel` marker makes it `fork`, so the worker inherits them.
    sys.modules["ipykernel"] = stub("ipykernel")
    try:
        data.prepare_data()
    finally:
        del sys.modules["ipykernel"]
    loader = data.train_dataloader()
    train_data = next(iter(loader))
    # pretrain.py fit (26857050f, lines 348-349), applied as written (model.max_seq_length = 8):
    input_ids = train_data[:, 0:max_seq_length].contiguous().long()
    targets = train_data[:, 1:(max_seq_length + 1)].contiguous().long()
    # Independently: the train files are 1.txt .. 3.txt (0.txt is the validation split), each
    # [BOS] + words, concatenated; every item is a block of 9 consecutive ids of that stream.
    stream = []
    for t in PRETRAIN_TEXTS[1:]:
        stream += [tokenizer.bos_id] + tokenizer.processor.encode(t).ids
    blocks = [stream[i:i + 9] for i in range(0, len(stream) - 8, 9)]
    for row in train_data.tolist():
        assert row in blocks, (row, blocks)
    save_case(STACK, "pretrain_text_files", {"input_ids": input_ids, "targets": targets},
              repo=REPO, commit=COMMIT, file=f"{TEXT_FILES}, {BASE}, {TOK}, litgpt/pretrain.py",
              function=f"TextFiles(train_data_path, num_workers=0).connect(tokenizer, "
                       f"batch_size={batch_size}, max_seq_length={max_seq_length}); prepare_data() "
                       f"(litdata optimize, TokensLoader(block_size={max_seq_length + 1})); "
                       f"next(iter(train_dataloader())); pretrain.py fit: input_ids = "
                       f"train_data[:, 0:{max_seq_length}], targets = train_data[:, 1:{max_seq_length + 1}]",
              input={"text files": {f"{i}.txt": t for i, t in enumerate(PRETRAIN_TEXTS)},
                     "train split": "1.txt .. 3.txt (TextFiles: the first file is the validation split)",
                     "token stream (expected, independently tokenized)": stream,
                     "blocks of 9 (expected)": blocks, "train_data (the loader's batch)": train_data,
                     "tokenizer": tokenizer_desc("llama"),
                     "litdata": litdata.__version__},
              expected="pass",
              why=f"The three train files tokenized with a BOS each ({len(stream)} ids), optimized "
                  f"into blocks of max_seq_length + 1 = 9 ids, {len(blocks)} blocks; the shuffled "
                  f"loader's first batch is {batch_size} of them, and fit trains input_ids = the "
                  f"first 8 ids of each block on targets = the next 8. Valid by LitGPT's contract: "
                  f"each row is one causal sequence of 8 real tokens (no padding, no mask), every "
                  f"target the next token; the BOS-delimited documents inside a row are attended "
                  f"and trained across by design (pretraining). Useful work {batch_size} x 8^2 = "
                  f"{batch_size * 64}.",
              metadata={"profile": PROFILE_PRETRAIN},
              notes="StreamingDataset(shuffle=True): which blocks form the first batch depends on "
                    "LitData's shuffle; each row is asserted to be one of the stream's blocks.",
              stubs=STUBS + ["ipykernel: an empty module in sys.modules during prepare_data, so that "
                             "LitData's optimize forks its worker (its notebook path) instead of "
                             "spawning one that cannot re-import the scratch-imported modules",
                             f"litgpt.data.DataModule = base.py's DataModule (litgpt/data/__init__.py "
                             f"imports every data module)",
                             f"litdata=={litdata.__version__} (PyPI, real: optimize, "
                             f"StreamingDataset, TokensLoader, StreamingDataLoader)"])
    shutil.rmtree(work, ignore_errors=True)


def generate() -> None:
    run_sft("sft_mask_prompt",
            why="Three alpaca examples of {lens} tokens ([BOS] + prompt, then the response and its "
                "EOS {eos}), right-padded with 0 to {width}; labels the ids with the prompt -100 "
                "and the padding -100. Valid by LitGPT's contract: one example per row, its EOS "
                "trained, the padding the row's tail (never attended under causal SDPA, label "
                "-100); labels unshifted (the loss shifts). Useful work Σ s² = {sq}.")
    run_sft("sft_no_mask_prompt", mask_prompt=False,
            why="The same three examples ({lens} tokens) with mask_prompt=False: every real "
                "token's label is the token itself, the padding -100. Valid; useful work Σ s² = "
                "{sq}.")
    run_sft("sft_truncated_38", max_seq_length=38,
            why="max_seq_length=38: __getitem__ cuts each example to 38 tokens (only the third, "
                "of 41, is longer: it loses its response's last words and its EOS, by design), "
                "the collate pads to the longest ({width}) and cuts to 38; rows of {lens} tokens. Valid: a truncated "
                "example is documented behaviour (no EOS is promised when it is cut); useful "
                "work Σ s² = {sq}.")
    run_sft("sft_eos_id_0", kind="neox",
            why="A GPT-NeoX/Pythia-style tokenizer whose EOS is id 0 (<|endoftext|>, also the "
                "BOS, not added): rows of {lens} tokens, each ending with its EOS 0, right-padded "
                "with the collate's pad id 0 to {width}. Valid by LitGPT's contract: the EOS is "
                "a real, trained token (label 0), the padding after it label -100; useful work "
                "Σ s² = {sq}. The padding is told from the EOS only by the labels (-100 on "
                "padding), not by the ids.",
            notes="blind/litgpt/NOTES.md 'Cannot state' 1: the pad id 0 is not the tokenizer's.",
            pending=PENDING_EOS_0)
    run_pretrain()
    run_sft("sft_eos_dropped_1694", commit=BUG_COMMIT, drop_last=True,
            expected=["eos-delimited"], bug="#1682 (PR #1694)",
            why="At ea01fbc57 (before f655f01b1) __getitem__ slices [: max_seq_length] even at "
                "the default -1, dropping every example's last token, its EOS: rows of {lens} "
                "tokens (one fewer than at the fix), none ending with the EOS {eos}, so no "
                "example is trained to stop (issue #1682). Invalid by LitGPT's contract: every "
                "example not cut by a max_seq_length > 0 ends with its EOS (the rule naming it: "
                "eos-delimited).", pending=PENDING_EOS_DROPPED)
