"""deepspeedai/DeepSpeed: Ulysses sequence parallelism for HF models (ALST), the data-loader adapter
`UlyssesSPDataLoaderAdapter.refill` (deepspeed/runtime/sequence_parallel/ulysses_sp.py) at master
edaa72212 (its file last changed at bd71eed64), and the bug fixed by #7887 ("[SP] add SP deny
list instead of allow", bf0126b53) at its parent 5dce124e0. Issue 39's blind protocol: the profile
(`batches/deepspeed_ulysses/profile.toml`) was written from the code before any batch was made
(blind/deepspeed_ulysses/NOTES.md); this module only runs the code.

The adapter builds no batch: it takes what the wrapped DataLoader yields on every SP rank,
all-gathers the ranks' batches, and for each of them (one micro-batch per rank's sample, in turn)
rolls `labels` over the whole row into `shift_labels` (`pad(labels, (0, 1), -100)[..., 1:]`,
`labels` removed) and keeps the rank's contiguous `1/sp` slice of every tensor
(`[:, chunk_len·sp_rank : chunk_len·(sp_rank+1)]`); the model all-gathers `position_ids` back
(`UlyssesSPAttentionHF.forward`) and the loss reads `shift_labels`. Since #7887 `refill`
refuses a batch without `position_ids`.

Run here without a process group: `deepspeed.comm` is a stand-in whose `all_gather` fills each
slot of `tensor_list` with that simulated rank's tensor of the same key (the seqlen gather with
each rank's length), which is what `torch.distributed.all_gather` returns; `refill` runs once per
simulated rank (`sp_rank` 0 and 1, `sp_world_size` 2), and the first micro-batch (rank 0's
sample, sharded) is saved as two rank files (`cp_rank`, `cp_size` metadata). The wrapped
loaders' batches come from real collators: transformers' `DataCollatorWithFlattening` (packed
`[1, T]`, restarting `position_ids`, -100 on each example's first label),
`DataCollatorForLanguageModeling(mlm=False)` (padded rows; `position_ids = arange(S)` added as
the adapter's error message asks), and TRL v0.23.0's padding-free collator over `pack_dataset`
rows (the real files, as in stacks/trl.py).

Metadata: `profile = profile.toml` (the blind profile, in the batch's folder), `cp_rank`,
`cp_size`; the wrapped collator's `pad_token_id` where it pads (the profile leaves it to the
collator).

Bug reproductions:
- #7887 (pre-fix 5dce124e0): `refill` accepted a batch without `position_ids`; the HF model
  then built `position_ids = arange(S/sp)` on each rank after sharding (from `cache_position`),
  which `UlyssesSPAttentionHF.forward` all-gathered into positions restarting at every shard
  boundary ("which after all_gather looks like packed sequences and breaks sdpa/flex_attention
  causal masking", the fix's comment). Saved: the refill output at 5dce124e0 with the
  `position_ids = arange(S/sp)` each rank's forward makes added.
- TRL #4170 through the adapter: TRL v0.23.0's padding-free labels keep every document's first
  label live; the adapter's whole-row shift then trains each document's last token on the next
  document's first token.
"""

from __future__ import annotations

import copy
import sys
import types

from common import expect_group, save_case, stub, upstream

REPO = "deepspeedai/DeepSpeed"
STACK = "deepspeed_ulysses"
COMMIT = "edaa7221267243c7be7fb49c5d5f5c4fb97b4641"
BUG_COMMIT = "5dce124e096ad8af371e5ae670d24f1e7bde44bc"  # = bf0126b53^
FIX_COMMIT = "bf0126b53039aa0c29c3a74fb291da4da1998676"
FILE = "deepspeed/runtime/sequence_parallel/ulysses_sp.py"
PROFILE = "profile.toml"
SP = 2
# Blind run (issue 39): what thdcheck got wrong, with what it lacks
# (blind/deepspeed_ulysses/NOTES.md).
PENDING_CONTIGUOUS_RESTARTS = (
    "unreadable (exit 2: 'cp shards ... rank 1 has other offsets than rank 0'): the contiguous "
    "reassembly wants every rank file to carry the same global offsets, but documents marked only "
    "by position-id restarts give each rank the restarts of its own piece; a contiguous split of a "
    "packed [1, T] row (Ulysses) is not reassembled by concatenating the pieces and reading the "
    "restarts of the whole row")


class FakeGroup:
    """The SP group of simulated rank `rank`: every rank's wrapped-loader batch."""

    def __init__(self, rank: int, batches: list[dict]):
        self.rank = rank
        self.batches = batches


def fake_comm():
    """`deepspeed.comm` with the collectives `refill` calls, over a `FakeGroup`."""
    import torch

    def all_gather(tensor_list, tensor, group=None):
        mine = group.batches[group.rank]
        if tensor.dim() == 0:  # the seqlen gather
            for i, t in enumerate(tensor_list):
                t.fill_(group.batches[i]["input_ids"].shape[1])
            return
        key = next(k for k, v in mine.items() if v is tensor)
        for i, t in enumerate(tensor_list):
            t.copy_(group.batches[i][key])

    def all_gather_object(object_list, obj, group=None):
        key = next(k for k, v in group.batches[group.rank].items() if v is obj)
        for i in range(len(object_list)):
            object_list[i] = group.batches[i][key]

    return stub("deepspeed.comm", all_gather=all_gather, all_gather_object=all_gather_object,
                ProcessGroup=object)


def load(commit: str):
    mods = {}
    for name in ("deepspeed", "deepspeed.runtime", "deepspeed.sequence", "deepspeed.utils"):
        m = stub(name)
        m.__path__ = []
        mods[name] = m
    comm = fake_comm()
    mods["deepspeed"].comm = comm
    mods.update({
        "deepspeed.comm": comm,
        "deepspeed.runtime.utils": stub("deepspeed.runtime.utils", see_memory_usage=None),
        "deepspeed.sequence.layer": stub("deepspeed.sequence.layer", _DimZeroAllToAll=None),
        "deepspeed.utils.logging": stub("deepspeed.utils.logging", logger=None),
        "einops": stub("einops", rearrange=None),
    })
    return upstream(REPO, commit, FILE, name=f"ulysses_sp_{commit[:9]}", stubs=mods)


STUBS = ["deepspeed.comm: all_gather / all_gather_object over the simulated SP group (each slot "
         "gets that rank's tensor of the same key, as torch.distributed.all_gather returns it); no "
         "process group", "deepspeed.runtime.utils.see_memory_usage, deepspeed.sequence.layer."
         "_DimZeroAllToAll, deepspeed.utils.logging.logger, einops.rearrange (attention-side, "
         "unused by refill)"]


def shards(commit: str, batches: list[dict]) -> list[dict]:
    """The first micro-batch each simulated SP rank's adapter yields (rank 0's sample, sharded),
    one per rank."""
    mod = load(commit)
    out = []
    for r in range(SP):
        own = [copy.deepcopy(b) for b in batches]
        adapter = mod.UlyssesSPDataLoaderAdapter(iter([own[r]]), sp_rank=r,
                                                 sp_group=FakeGroup(r, own),
                                                 sp_world_size=SP, device="cpu")
        mb = next(adapter)
        assert len(adapter.micro_batches) == SP - 1
        out.append(mb)
    return out


def save_group(group: str, source: dict, other: dict, rank_batches: list[dict], *, commit: str,
               function: str, expected, why: str, rank_why: str, bug: str | None = None,
               metadata: dict | None = None, notes: str = "", extra_stubs=(),
               pending: str | None = None) -> None:
    meta = {"profile": PROFILE, **(metadata or {})}
    for r, b in enumerate(rank_batches):
        save_case(STACK, f"{group}/rank{r}", b, repo=REPO, commit=commit, file=FILE,
                  function=f"{function}; UlyssesSPDataLoaderAdapter(dl, sp_rank={r}, sp_group, "
                           f"sp_world_size={SP}, device='cpu'): the first micro-batch (refill)",
                  input={"rank 0's loader batch (this micro-batch)": source,
                         "rank 1's loader batch (the next micro-batch, not saved)": other,
                         "sp_rank": r, "sp_world_size": SP},
                  expected="pass", why=rank_why.format(r=r), bug=None,
                  metadata={**meta, "cp_rank": r, "cp_size": SP}, notes=notes,
                  stubs=STUBS + list(extra_stubs), pending=pending)
    expect_group(STACK, group, expected=expected, why=why, bug=bug, repo=REPO, commit=commit,
                 pending=pending,
                 file=FILE, function=f"{function} -> UlyssesSPDataLoaderAdapter.refill at sp_rank "
                                     f"0 and 1 of {SP}")


def flatten(examples):
    from transformers import DataCollatorWithFlattening

    return dict(DataCollatorWithFlattening()(examples))


def padded(examples):
    from stacks._toy_tokenizer import toy_tokenizer
    from transformers import DataCollatorForLanguageModeling

    b = dict(DataCollatorForLanguageModeling(tokenizer=toy_tokenizer(), mlm=False)(examples))
    return b


def generate() -> None:
    import torch
    import transformers

    tf = f"transformers=={transformers.__version__} (PyPI)"

    # ---------------- packed source: DataCollatorWithFlattening ----------------
    ex_a = [{"input_ids": [11, 12, 13, 14, 15]}, {"input_ids": [21, 22, 23]},
            {"input_ids": [31, 32, 33, 34, 35, 36]}]
    ex_b = [{"input_ids": [41, 42, 43, 44]}, {"input_ids": [51, 52, 53, 54, 55, 56]}]
    a, b = flatten(ex_a), flatten(ex_b)
    assert set(a) == {"input_ids", "labels", "position_ids"}, set(a)
    out = shards(COMMIT, [a, b])
    save_group("packed_flattening_sp2", a, b, out, commit=COMMIT,
               function="transformers DataCollatorWithFlattening()(examples) on each rank's loader",
               expected="pass",
               why="Rank 0's sample: three examples of 5, 3 and 6 tokens flattened into [1, 14] "
                   "(position_ids [0..4, 0..2, 0..5], labels -100 on each example's first token). "
                   "refill rolls the labels over the row into shift_labels (each example's last "
                   "token gets -100, the next example's first label; the row's last -100) and gives "
                   "rank r the contiguous tokens [7r, 7r+7), position ids global. Valid by the "
                   "adapter's contract with a flash-attention kernel (documents from the gathered "
                   "position_ids): 14 real tokens, useful work Σ s² = 25 + 9 + 36 = 70.",
               rank_why="SP rank {r} of 2: tokens [7·{r}, 7·{r}+7) of rank 0's flattened sample, its "
                        "position_ids and shift_labels. Read with its cp-group.",
               extra_stubs=[tf], pending=PENDING_CONTIGUOUS_RESTARTS)

    # ---------------- padded source: DataCollatorForLanguageModeling ----------------
    rows_a = [{"input_ids": [11, 12, 13, 14, 15]}, {"input_ids": [21, 22, 23, 24, 25, 26, 27, 28]}]
    rows_b = [{"input_ids": [31, 32, 33]}, {"input_ids": [41, 42, 43, 44, 45, 46]}]
    pa, pb = padded(rows_a), padded(rows_b)
    for p in (pa, pb):
        p["position_ids"] = torch.arange(p["input_ids"].shape[1]).unsqueeze(0).expand_as(
            p["input_ids"]).contiguous()
    out = shards(COMMIT, [pa, pb])
    save_group("padded_lm_sp2", pa, pb, out, commit=COMMIT,
               function="transformers DataCollatorForLanguageModeling(toy tokenizer, mlm=False)"
                        "(examples), position_ids = arange(S) added by the caller",
               expected="pass", metadata={"pad_token_id": 0},
               why="Rank 0's sample: two rows of 5 and 8 tokens right-padded with 0 to [2, 8] "
                   "(attention_mask 1 on real tokens, labels = ids with -100 on the padding), "
                   "position_ids arange(8) per row as the adapter's error message asks for "
                   "non-packed sequences. refill shifts each row's labels into shift_labels and "
                   "gives rank r columns [4r, 4r+4) of every key. Valid: one example per row, the "
                   "padding at the row's end unattended by real tokens under causal attention and "
                   "never a target; 13 real tokens, useful work Σ s² = 25 + 64 = 89.",
               rank_why="SP rank {r} of 2: columns [4·{r}, 4·{r}+4) of rank 0's padded rows "
                        "(input_ids, attention_mask, position_ids, shift_labels). Read with its "
                        "cp-group.",
               extra_stubs=[tf, "the toy tokenizer of stacks/_toy_tokenizer.py (<pad> 0)"])

    # ---------------- TRL v0.23.0 padding-free source (TRL #4170) ----------------
    from stacks import trl as trl_stack

    data_utils, sft = trl_stack.load("v0.23.0")  # first: it drops another stack's `datasets` stand-in
    from datasets import Dataset

    docs_a = [{"input_ids": [61, 62, 63, 64, 65]}, {"input_ids": [71, 72, 73]},
              {"input_ids": [81, 82, 83, 84]}]
    docs_b = [{"input_ids": [91, 92, 93, 94, 95, 96]}, {"input_ids": [97, 98]}]
    coll = sft.DataCollatorForLanguageModeling(pad_token_id=0, padding_free=True,
                                               return_position_ids=True)

    def trl_batch(docs):
        packed = data_utils.pack_dataset(Dataset.from_list(docs), 16, "bfd")
        return dict(coll([dict(r) for r in packed]))

    ta, tb = trl_batch(docs_a), trl_batch(docs_b)
    assert "attention_mask" not in ta and ta["input_ids"].shape[1] % SP == 0, ta
    out = shards(COMMIT, [ta, tb])
    save_group("trl_v0.23.0_padding_free_sp2", ta, tb, out, commit=COMMIT,
               function="TRL v0.23.0 pack_dataset(Dataset.from_list(docs), 16, 'bfd') -> "
                        "DataCollatorForLanguageModeling(pad_token_id=0, padding_free=True, "
                        "return_position_ids=True) on each rank's loader",
               expected=["cross-doc-label"], bug="TRL #4170 (through the adapter)",
               metadata={"pad_token_id": 0},
               why="Rank 0's sample: TRL v0.23.0 packs documents of 5, 3 and 4 tokens into one "
                   "row [1, 12] with position_ids restarting per document and labels = the "
                   "input_ids, nothing masked at document starts (TRL #4170, fixed in v0.23.1). "
                   "refill's whole-row shift makes each document's last token's shift_label the "
                   "next document's first token: the last token of a document is trained to "
                   "predict the next one (SFT: cross-doc-label). The adapter passes it through "
                   "(blind/deepspeed_ulysses/NOTES.md, 'Cannot state' 2).",
               rank_why="SP rank {r} of 2: tokens [6·{r}, 6·{r}+6) of rank 0's TRL row. Read with "
                        "its cp-group.",
               extra_stubs=list(trl_stack._STUBS),
               pending="bug not judged: " + PENDING_CONTIGUOUS_RESTARTS)

    # ---------------- bug #7887: no position_ids before sharding (5dce124e0) ----------------
    qa, qb = padded(rows_a), padded(rows_b)
    assert "position_ids" not in qa
    out = shards(BUG_COMMIT, [qa, qb])
    for mb in out:
        assert "position_ids" not in mb
        # What the HF model does on each rank when no position_ids are passed (cache_position =
        # arange(local length)): the positions UlyssesSPAttentionHF.forward all-gathers.
        s = mb["input_ids"].shape[1]
        mb["position_ids"] = torch.arange(s).unsqueeze(0).expand_as(mb["input_ids"]).contiguous()
    save_group("padded_no_position_ids_5dce124e0_sp2", qa, qb, out, commit=BUG_COMMIT,
               function="transformers DataCollatorForLanguageModeling(toy tokenizer, mlm=False)"
                        "(examples), no position_ids",
               expected=["position-ids"], bug="#7887 (fixed by bf0126b53)",
               metadata={"pad_token_id": 0},
               why="At 5dce124e0 refill accepts rank 0's padded rows (5 and 8 tokens, [2, 8]) "
                   "without position_ids and shards them; each rank's HF forward then makes "
                   "position_ids = arange(4) (cache_position) for its 4 columns, which "
                   "UlyssesSPAttentionHF gathers into [0,1,2,3,0,1,2,3] per row: the positions "
                   "restart at the shard boundary in the middle of every example (one example "
                   "per row, by its mask and labels), so RoPE sees wrong positions and FA2 "
                   "reads the restart as a document boundary, cutting the example's attention "
                   "(#7887: 'looks like packed sequences'). Invalid: the position ids do not "
                   "continue within a sequence (position-ids). Fixed by bf0126b53, which "
                   "requires position_ids in refill.",
               rank_why="SP rank {r} of 2 at 5dce124e0: columns [4·{r}, 4·{r}+4) of rank 0's rows, "
                        "with the local position_ids = arange(4) its HF forward makes. Read with "
                        "its cp-group.",
               notes="position_ids added after refill: the model's own default (HF "
                     "LlamaModel.forward: position_ids = cache_position.unsqueeze(0)), which is "
                     "what the attention all-gathers at that commit.",
               extra_stubs=[tf, "the toy tokenizer of stacks/_toy_tokenizer.py (<pad> 0)"])
