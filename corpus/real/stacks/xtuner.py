"""InternLM/xtuner: the v1 packed-SFT collator `sft_llm_collator` (xtuner/v1/datasets/collator.py,
`build_text_ctx_labels` + the real `SequenceContext` of xtuner/v1/data_proto/sequence_context.py)
at the v1.0.1 release (91e30dd16), and the legacy (v0.x) varlen path: the dataset map `Packer`
(xtuner/dataset/utils.py) feeding `default_collate_fn(use_varlen_attn=True)`
(xtuner/dataset/collate_fns/default_collate_fn.py) at the v0.2.0 release (520f7a09a).

How xtuner v1 feeds the collator: the tokenize functions return `DataItem`s (`input_ids`,
`labels`, `num_tokens`; sft_tokenize_fn/openai.py: labels are the ids with the prompt -100,
unshifted; pt_tokenize_fn/text.py: labels = input_ids with `labels[0] = -100`), the pack dataset
(`pack_level="soft"`) groups items whose total fits `pack_max_length`, and
`DataloaderConfig.build_dataloader` (datasets/config.py) binds `sft_llm_collator(pack_max_length=,
pack_to_max_length=True (default), padding_token_idx=pad_token_id or 0)`; the default
`pad_chunk_size` is 256.

Contract of `build_text_ctx_labels` (collator.py, v1.0.1):
- the pack's items are concatenated into one row `[1, T]`; `input_ids = ids[:, :-1]` and
  `shifted_labels = labels[:, 1:]`: the labels are **shifted over the whole pack**, so the last
  token of item i is trained on item i+1's first label, which the tokenize functions make -100
  (the prompt in SFT, `labels[0] = -100` in pretraining);
- `num_tokens` per item, the last one minus the dropped token; with `pack_to_max_length` the row
  is padded to `pack_max_length` with `padding_token_idx` (labels -100) and the padding is split
  into `pad_chunk_size` pieces, **each its own `cu_seq_lens` segment** (`split_to_chunks`);
- `cu_seq_lens_q = cu_seq_lens_k = cumsum([0] + num_tokens + pad chunks)` (int32, the same
  tensor), `max_length_q = max_length_k = max(num_tokens)` (a 0-d CPU tensor, pad chunks
  included), `num_padding`; `SequenceContext.__init__` derives `position_ids` = `arange(len)` per
  segment (pad chunks included). The train engine reads `seq_ctx` and the loss context reads
  `shifted_labels` (its own key name).

Legacy contract (v0.2.0): `Packer(chunk_size, use_varlen_attn=True)` concatenates the dataset's
`input_ids`/`labels` (unshifted: the HF model shifts; encode_fn makes the BOS and the input -100)
and cuts them into rows of exactly `chunk_size`: a document crossing a row end continues at the
next row's start as its own segment; `cumulative_len` per row (a list, one IntTensor per row in
the collated batch) and `position_ids` = `range(len)` per segment. `default_collate_fn` asserts
batch size 1 with varlen attention and returns `input_ids`, `cumulative_len` (a Python list of one
int32 tensor: saved as that tensor), `position_ids`, `labels`, `max_seqlen` (int), no mask.

The legacy padded path (`use_varlen_attn=False`, default_collate_fn): samples right-padded with
`pad_index` (`DEFAULT_PAD_TOKEN_INDEX` = 0; no config sets it), labels with -100, an
`attention_mask` and `position_ids = arange(S)` per row.

Bug reproduced: #567 (899f87d93, "[Fix]Fix attention mask in `default_collate_fn`"): before it the
padded path built `attention_mask = input_ids.ne(pad_index)`, so a real token whose id is the pad
id (a tokenizer whose EOS is id 0) was masked out: every turn's EOS of a multi-turn sample, while
its label stays trained. #567's replacement loop (`attention_mask[:i] = True`, whole rows) was
fixed again in #829 (16e2f8f1a); the negative control runs at 16e2f8f1a.

The v1 and legacy varlen cases are read under the built-in `xtuner` / `xtuner_v0` profiles (their
key names and label conventions, reader/profiles/); the bug case #567 is flagged by `mask` and
`pad-labels` (the padded-rows format keeps a hole in a row's mask for the rules). The v1 collator's own fixes are VLM
position-id fixes (#1532).
"""

from __future__ import annotations

import copy
import sys

from common import permissive_stub, save_case, stub, upstream

REPO = "InternLM/xtuner"
STACK = "xtuner"
V1 = "v1.0.1"  # 91e30dd16; collator.py identical at HEAD b934f462
LEGACY = "v0.2.0"  # 520f7a09a; dataset/utils.py and default_collate_fn.py identical at HEAD
V1_FILE = "xtuner/v1/datasets/collator.py"
V1_CTX = "xtuner/v1/data_proto/sequence_context.py"
LEGACY_PACKER = "xtuner/dataset/utils.py"
LEGACY_COLLATE = "xtuner/dataset/collate_fns/default_collate_fn.py"


def _pkg(name):
    mod = stub(name)
    mod.__path__ = []
    sys.modules[name] = mod
    return mod


def load_v1():
    for name in ("xtuner", "xtuner.v1", "xtuner.v1.datasets"):
        _pkg(name)
    dp = _pkg("xtuner.v1.data_proto")
    upstream(REPO, V1, "xtuner/v1/data_proto/utils.py", name="xtuner.v1.data_proto.utils")
    ctx = upstream(REPO, V1, V1_CTX, name="xtuner.v1.data_proto.sequence_context")
    dp.SequenceContext = ctx.SequenceContext
    import logging

    utils = _pkg("xtuner.v1.utils")
    utils.IGNORE_INDEX = -100
    utils.get_logger = lambda *a, **k: logging.getLogger("xtuner")
    upstream(REPO, V1, "xtuner/v1/utils/pad.py", name="xtuner.v1.utils.pad")
    upstream(REPO, V1, "xtuner/v1/datasets/data_item.py", name="xtuner.v1.datasets.data_item")
    return upstream(REPO, V1, V1_FILE, name="xtuner.v1.datasets.collator")


V1_STUBS = ["xtuner.v1.utils: IGNORE_INDEX = -100 (its value at v1.0.1), get_logger -> logging "
            "(the package __init__ imports the model loaders; pad.py, data_item.py, "
            "data_proto/utils.py and sequence_context.py are the real files)"]

PEND_V1 = ("the loss context's own key `shifted_labels` needs `--map shifted_labels=shift_labels` "
           "(no metadata key for a rename yet); the pad chunks, each a segment by design, need "
           "a profile whose padding may be any number of final segments (`--profile trl` today)")
PEND_LEGACY = ("the offsets are `cumulative_len` and the maximum `max_seqlen`: "
               "`--map cumulative_len=cu_seq_lens_q --map max_seqlen=max_length_q` (no metadata key "
               "for a rename yet)")


def v1_case(case, items, *, pack_max_length, pad, pad_chunk_size, objective, why, notes=""):
    mod = load_v1()
    out = mod.sft_llm_collator([copy.deepcopy(items)], pack_max_length=pack_max_length,
                               padding_token_idx=pad, pack_to_max_length=True,
                               pad_chunk_size=pad_chunk_size)
    assert len(out) == 1
    ctx = out[0]["seq_ctx"]
    batch = {"input_ids": ctx.input_ids, "cu_seq_lens_q": ctx.cu_seq_lens_q,
             "cu_seq_lens_k": ctx.cu_seq_lens_k, "max_length_q": ctx.max_length_q,
             "max_length_k": ctx.max_length_k, "position_ids": ctx.position_ids,
             "num_padding": ctx.num_padding, "shifted_labels": out[0]["shifted_labels"]}
    meta = {"causal": "true", "labels": "shifted", "pad_token_id": pad, "objective": objective,
            "profile": "xtuner"}
    save_case(STACK, case, batch, repo=REPO, commit=V1, file=f"{V1_FILE}, {V1_CTX}",
              function=f"sft_llm_collator([pack], pack_max_length={pack_max_length}, "
                       f"padding_token_idx={pad}, pack_to_max_length=True, "
                       f"pad_chunk_size={pad_chunk_size})[0] (seq_ctx fields + shifted_labels)",
              input={"pack": items}, expected="pass", why=why, metadata=meta,
              notes=("Saved: the SequenceContext's tensors (input_ids, cu_seq_lens_q/k, "
                     "max_length_q/k, position_ids), num_padding (int), and shifted_labels. Needs "
                     "--map shifted_labels=shift_labels. " + notes),
              stubs=V1_STUBS)
    return batch


def legacy_case(case, docs, *, chunk_size, row, why, notes=""):
    # utils.py imports PIL and requests for image helpers the Packer never calls.
    stubs = permissive_stub("PIL", "requests")
    for name in ("xtuner", "xtuner.parallel"):
        _pkg(name)
    sys.modules["xtuner.utils"] = stub("xtuner.utils", DEFAULT_IMAGE_TOKEN="<image>",
                                       IGNORE_INDEX=-100, IMAGE_TOKEN_INDEX=-200,
                                       DEFAULT_PAD_TOKEN_INDEX=0)
    sys.modules["xtuner.parallel.sequence"] = stub(
        "xtuner.parallel.sequence", get_sequence_parallel_world_size=lambda: 1,
        pad_for_sequence_parallel=lambda t, *a, **k: t)
    utils = upstream(REPO, LEGACY, LEGACY_PACKER)
    coll = upstream(REPO, LEGACY, LEGACY_COLLATE)
    packer = utils.Packer(chunk_size=chunk_size, use_varlen_attn=True)
    # One map batch of the dataset (datasets.map(Packer, batched=True)).
    packed = packer({"input_ids": [d[0] for d in docs], "labels": [d[1] for d in docs]})
    instance = {k: v[row] for k, v in packed.items()}
    batch = coll.default_collate_fn([instance], pad_index=0, return_hf_format=True,
                                    use_varlen_attn=True)
    assert isinstance(batch["cumulative_len"], list) and len(batch["cumulative_len"]) == 1
    batch = dict(batch)
    batch["cumulative_len"] = batch["cumulative_len"][0]
    meta = {"causal": "true", "labels": "unshifted", "pad_token_id": 0, "profile": "xtuner_v0"}
    save_case(STACK, case, batch, repo=REPO, commit=LEGACY,
              file=f"{LEGACY_PACKER}, {LEGACY_COLLATE}",
              function=f"default_collate_fn([Packer(chunk_size={chunk_size}, use_varlen_attn=True)"
                       f"(map batch)[row {row}]], pad_index=0, return_hf_format=True, "
                       "use_varlen_attn=True)",
              input={"documents (input_ids, labels)": docs, "row": row}, expected="pass", why=why,
              metadata=meta,
              notes=("cumulative_len is a Python list of one int32 tensor in the collated batch; "
                     "saved as that tensor. Needs --map cumulative_len=cu_seq_lens_q --map "
                     "max_seqlen=max_length_q. " + notes),
              stubs=stubs + ["xtuner.utils: the constants of xtuner/utils/constants.py",
                             "xtuner.parallel.sequence: get_sequence_parallel_world_size -> 1 "
                             "(no sequence parallelism)"])


PRE_567 = "899f87d93^"  # 0d89d949a: attention_mask = input_ids.ne(pad_index)
FIX_829 = "16e2f8f1a"  # #567's loop fixed to attention_mask[i, :length] (#829)


def padded_case(case, commit, samples, *, expected="pass", why, bug=None, notes=""):
    """The non-varlen path of default_collate_fn: a batch of samples right-padded with
    pad_index (DEFAULT_PAD_TOKEN_INDEX = 0: no xtuner config sets pad_index), labels with -100,
    attention_mask, position_ids = arange(S) per row."""
    for name in ("xtuner", "xtuner.parallel"):
        _pkg(name)
    sys.modules["xtuner.utils"] = stub("xtuner.utils", DEFAULT_PAD_TOKEN_INDEX=0, IGNORE_INDEX=-100)
    sys.modules["xtuner.parallel.sequence.setup_distributed"] = stub(
        "xtuner.parallel.sequence.setup_distributed", get_sequence_parallel_world_size=lambda: 1,
        get_sequence_parallel_rank=lambda: 0)
    seq = _pkg("xtuner.parallel.sequence")
    seq.get_sequence_parallel_world_size = lambda: 1
    dc = upstream(REPO, commit, "xtuner/parallel/sequence/data_collate.py",
                  name="xtuner.parallel.sequence.data_collate")
    for k in ("pad_for_sequence_parallel", "split_for_sequence_parallel"):
        if hasattr(dc, k):
            setattr(seq, k, getattr(dc, k))
    coll = upstream(REPO, commit, LEGACY_COLLATE)
    instances = [{"input_ids": list(i), "labels": list(l)} for i, l in samples]
    batch = coll.default_collate_fn(copy.deepcopy(instances), return_hf_format=True)
    meta = {"causal": "true", "labels": "unshifted", "pad_token_id": 0}
    save_case(STACK, case, dict(batch), repo=REPO, commit=commit, file=LEGACY_COLLATE,
              function="default_collate_fn(instances, pad_index=0 (default), return_hf_format=True)",
              input={"instances": instances}, expected=expected, why=why, bug=bug, metadata=meta,
              notes=notes,
              stubs=["xtuner.utils: DEFAULT_PAD_TOKEN_INDEX = 0, IGNORE_INDEX = -100 "
                     "(xtuner/utils/constants.py)",
                     "xtuner.parallel.sequence: the real data_collate.py at the same commit, "
                     "setup_distributed: sequence-parallel world size 1, rank 0"])


def generate() -> None:
    # v1 SFT: three chat samples (BOS 1, EOS 2, prompt -100), pack_max_length 24, 2-token pad chunks.
    sft = [
        {"input_ids": [1, 11, 12, 13, 14, 15, 2], "labels": [-100, -100, -100, 13, 14, 15, 2],
         "num_tokens": 7},
        {"input_ids": [1, 21, 22, 23, 2], "labels": [-100, -100, 22, 23, 2], "num_tokens": 5},
        {"input_ids": [1, 31, 0, 33, 34, 2], "labels": [-100, -100, 0, 33, 34, 2], "num_tokens": 6},
    ]
    v1_case("sft_pack_v1.0.1", sft, pack_max_length=24, pad=0, pad_chunk_size=3,
            objective="sft",
            why="Three SFT items (7, 5, 6 tokens; BOS and prompt -100, EOS trained; token 0 = the "
                "pad id inside the third response) packed into pack_max_length 24 with "
                "pad_chunk_size 3. The row is the 18 ids minus the last (17) then 7 pads: "
                "cu_seq_lens [0,7,12,17,20,23,24] (items 7,5,5, pad chunks 3,3,1), position_ids "
                "restarting per segment (pad chunks too), max_length 7. shifted_labels = "
                "labels[1:]: each item's last token (its EOS) is trained on the next item's first "
                "label, -100 (BOS); pads -100. Valid: xtuner's padding is split into pad chunks, "
                "each a segment of its own by design (split_to_chunks).")
    pt = [
        {"input_ids": [1, 41, 42, 43, 2], "labels": [-100, 41, 42, 43, 2], "num_tokens": 5},
        {"input_ids": [1, 51, 52, 2], "labels": [-100, 51, 52, 2], "num_tokens": 4},
        {"input_ids": [1, 61, 62, 63, 64, 65, 2], "labels": [-100, 61, 62, 63, 64, 65, 2],
         "num_tokens": 7},
    ]
    v1_case("pretrain_pack_v1.0.1", pt, pack_max_length=16, pad=0, pad_chunk_size=256,
            objective="sft",
            why="Pretraining items as pt_tokenize_fn/text.py makes them (add_bos/add_eos, labels = "
                "input_ids with labels[0] = -100), 5+4+7 = 16 tokens = pack_max_length: after the "
                "global shift the row holds 15 ids and one pad token (one 1-token pad chunk), "
                "cu_seq_lens [0,5,9,15,16], max_length 6. Because each item's first label is -100, no item's EOS is trained "
                "on the next item's BOS even though the labels are shifted over the whole pack: "
                "the documents are trained independently (objective sft). Valid.",
            notes="labels[0] = -100 in the pretraining tokenize fn is what keeps the global shift "
                  "from crossing documents.")

    # Legacy: four documents through the Packer into rows of 12; row 0 and row 1.
    docs = [
        ([1, 11, 12, 13, 14, 2], [-100, -100, 12, 13, 14, 2]),
        ([1, 21, 22, 23, 24, 25, 26, 2], [-100, -100, -100, 23, 24, 25, 26, 2]),
        ([1, 31, 32, 2], [-100, -100, 32, 2]),
        ([1, 41, 42, 43, 44, 45, 2], [-100, 41, 42, 43, 44, 45, 2]),
    ]
    legacy_case("varlen_row0_v0.2.0", docs, chunk_size=12, row=0,
                why="Legacy varlen SFT (Packer chunk_size 12, 25 tokens -> two full rows, the "
                    "residual 1 token kept for the next map batch): row 0 = document 1 (6) + the "
                    "first 6 tokens of document 2, cumulative_len [0,6,12], position_ids "
                    "[0..5,0..5], labels unshifted (BOS and input -100), max_seqlen 6. Valid.")
    legacy_case("varlen_row1_v0.2.0", docs, chunk_size=12, row=1,
                why="Row 1 of the same map batch: the last 2 tokens of document 2 (a continuation "
                    "at the row start, its own segment), document 3 (4), and the first 6 tokens "
                    "of document 4: cumulative_len [0,2,6,12], position_ids restart at each. The "
                    "continuation's first label is a real token (26): HF shifts within the row, "
                    "so it is no target. Valid.")

    # #567: the non-varlen collate masked every token equal to pad_index. A tokenizer whose EOS
    # id is 0 (= DEFAULT_PAD_TOKEN_INDEX, the pad_index every config uses), encode_fn output
    # (BOS 1 and inputs -100, outputs and each turn's EOS trained, a BOS after each EOS).
    E = 0
    multi = ([1, 11, 12, 13, E, 1, 14, 15, 16, E], [-100, -100, 12, 13, E, -100, -100, 15, 16, E])
    single = ([1, 21, 22, E], [-100, -100, 22, E])
    padded_case("padded_eos_is_pad_0d89d949a", PRE_567, [multi, single],
                expected=["mask", "pad-labels"], bug="#567",
                why="A two-turn sample (each turn's output ends with EOS = id 0) and a one-turn "
                    "sample, right-padded with pad_index 0. Before #567 the collate built "
                    "attention_mask = input_ids.ne(pad_index), so every EOS of the data is masked "
                    "as padding: row 0 [1,1,1,1,0,1,1,1,1,0] (turn 2 can no longer attend to "
                    "turn 1's EOS), row 1 [1,1,1,0,0,...]; those EOS positions keep their trained "
                    "labels (the EOS is a target). #567 ('Some tokenizers have the same eos token "
                    "and pad token, so input_ids cannot be masked directly based on the pad token "
                    "id') builds the mask from the sample lengths instead.",
                notes="#567's own loop had a second bug (attention_mask[:i] = True sets whole rows, "
                      "so the padding of shorter rows was marked real), fixed in #829 "
                      "(16e2f8f1a); that one is harmless to a causal LM with right padding and "
                      "not reproduced.")
    padded_case("padded_eos_is_pad_16e2f8f1a", FIX_829, [multi, single],
                why="The same batch after #567 and #829: attention_mask from the sample lengths, "
                    "row 0 all ones, row 1 [1,1,1,1,0,0,0,0,0,0]; the EOS tokens (id 0 = the pad "
                    "id) are real. Valid (negative control of #567).")
