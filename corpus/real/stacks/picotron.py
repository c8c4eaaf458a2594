"""huggingface/picotron: the pretraining data loader `MicroBatchDataLoader` (picotron/data.py) at
main 59714b1bf (2025-08-26), its staticmethod `tokenizer_group_text` and its `collate_batch`,
and the bug fixed by f6c9a39d1 ("fix spliting input twice for context parallel (done in
dataloader)") at its parent 363dbd5c0 (utils.py `MicroBatchDataLoader`, then train.py's
`parallel_input` of src/parallel/context_parallel.py). Issue 39's blind protocol: the profile
(`batches/picotron/profile.toml`) was written from the code before any batch was made
(blind/picotron/NOTES.md); this module only runs the code.

Contract (data.py at 59714b1bf; train.py `train_step`, model.py, context_parallel.py):
- `tokenizer_group_text(texts, tokenizer, sequence_length)`: `tokenizer.batch_encode_plus` of
  one `dataset.map` batch of texts (BOS/EOS only as the tokenizer adds them), concatenated, cut
  into rows of `sequence_length + 1` ids starting every `sequence_length` (consecutive rows share
  one id: a row's last id is the next row's first), the remainder dropped;
- `collate_batch`: B rows stacked; on CP rank r of cp, `input_ids = ids[:, r·S/cp : (r+1)·S/cp]`,
  `target_ids = ids[:, r·S/cp + 1 : (r+1)·S/cp + 1]` (the next tokens: the loss,
  `F.cross_entropy(outputs, target_ids)`, does not shift), `position_ids = arange(r·S/cp,
  (r+1)·S/cp)` for every row, `hidden_states = None`; no mask, no padding;
- each row is one causal sequence (`flash_attn_func(causal=True)`, SDPA `is_causal`, ring
  attention): the documents inside it attend to each other and are trained across
  (pretraining).

Saved: `input_ids`, `target_ids`, `position_ids` as `collate_batch` returns them
(`hidden_states`, None, is not a tensor); metadata `profile = profile.toml` (the blind profile,
in the batch's folder), `cp_rank`/`cp_size` on rank files. The tokenizer is transformers 4.47.0,
picotron's pin (requirements.txt), which still has `batch_encode_plus` (5.x removed it): the
tokenization runs in a subprocess with `PYTHONPATH` at a `pip install --no-deps --target` of
that release:

    /tmp/realenv/bin/pip install --no-deps --target /tmp/tf_4.47.0 transformers==4.47.0 \\
        tokenizers==0.21.0 huggingface_hub==0.26.5

Bug reproduction (363dbd5c0, fixed by f6c9a39d1, a direct commit): the loader already keeps the
rank's contiguous slice (`collate_batch` of utils.py, with `position_ids = arange(start, end)`),
and `train_step` then calls `parallel_input(input_ids, target_ids)`, which slices the tokens and
targets again by `cp_rank` but not the position ids: at cp 2, S 16, rank 0 trains tokens 0-3 and
rank 1 tokens 12-15 of each row, tokens 4-11 never, and each rank's `position_ids` [B, 8]
outgrow its tokens [B, 4]. Saved what `train_step` hands the model and the loss: `input_ids`
and `target_ids` after `parallel_input`, the collate's `position_ids` (its `attn_mask`, never
passed to the model, is left out).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import types
from pathlib import Path

import common
from common import expect_group, save_case, stub, upstream

REPO = "huggingface/picotron"
STACK = "picotron"
COMMIT = "59714b1bf25541dbeb6f5a721ed15f6d0768e786"
FILE = "picotron/data.py"
BUG_COMMIT = "363dbd5c05a5df364ddd338dbabe7a23b0983a0a"  # = f6c9a39d1^
FIX_COMMIT = "f6c9a39d17837cd5cf0b3a401bc635fbdf38c465"
BUG_FILE = "utils.py"
BUG_CP = "src/parallel/context_parallel.py"
PROFILE = "profile.toml"
TF = "4.47.0"
SEQ = 16

# Four short documents; the tokenizer prepends a BOS (<s>) to each, as Llama's does.
TEXTS = [
    "the cat sat on the mat and looked at the garden for a while",
    "rain fell over the hills all night long",
    "she wrote three letters to her brother in the city before noon",
    "a small boat drifted past the old harbour wall at dawn",
]
SPECIALS = ["<unk>", "<s>", "</s>"]
# Blind run (issue 39): what thdcheck got wrong, with what it lacks (blind/picotron/NOTES.md).
PENDING_SPLIT_TWICE = (
    "bug caught by the wrong rule: the cp-group is flagged by position-ids, not by token-counts / "
    "cp-shard. Each rank file's position_ids [3, 8] beside its input_ids [3, 4] is read without a "
    "token-counts violation (a CP rank file's per-token lengths are not checked before the "
    "reassembly), and the contiguous reassembly keeps only as many position ids per rank as it "
    "has tokens, so tokens 4-11 that land on no rank (cp-shard) are not seen; the position-ids "
    "violation it reports is an artefact of that cut")

# Runs under PYTHONPATH=<transformers 4.47.0 --target dir>: imports the upstream file with
# `common.upstream` and calls its `tokenizer_group_text` on TEXTS; prints the rows as JSON.
_CHILD = r"""
import json, sys
args = json.loads(sys.argv[1])
sys.path[:0] = args["paths"]
import transformers
assert transformers.__file__.startswith(args["target"]), transformers.__file__
import common
from common import stub
from stacks import _word_tokenizer as wt
mods = {"datasets": stub("datasets", Features=None, Sequence=None, Value=None, load_dataset=None)}
for name in args["pkgs"]:
    m = stub(name)
    m.__path__ = []
    mods[name] = m
mods[args["pgm"]] = stub(args["pgm"], process_group_manager=None)
if args["utils"]:
    mods[args["utils"]] = stub(args["utils"], print=print)
mod = common.upstream(args["repo"], args["commit"], args["file"], stubs=mods)
tok = wt.hf_tokenizer(args["texts"], args["specials"], "<unk>", bos="<s>", eos="</s>",
                      bos_template="<s>")
rows = mod.MicroBatchDataLoader.tokenizer_group_text(args["texts"], tok, args["seq"])
print(json.dumps({"rows": [r.tolist() for r in rows["input_ids"]],
                  "encoded": [tok(t)["input_ids"] for t in args["texts"]],
                  "transformers": transformers.__version__}))
"""


def tf_target() -> Path:
    target = Path(os.environ.get("THDCHECK_TF_OLD", "/tmp")) / f"tf_{TF}"
    if not (target / "transformers").is_dir():
        sys.exit(f"no transformers {TF} at {target}: pip install --no-deps --target {target} "
                 f"transformers=={TF} tokenizers==0.21.0 huggingface_hub==0.26.5 "
                 f"(see stacks/picotron.py)")
    return target


def rows_of(commit: str, file: str, *, pgm: str, pkgs: list[str], utils: str | None) -> dict:
    """`tokenizer_group_text(TEXTS, tokenizer, SEQ)` of `file` at `commit`, under transformers
    4.47.0 (a subprocess)."""
    target = tf_target()
    here = Path(__file__).resolve().parent
    args = {"paths": [str(here.parent)], "target": str(target), "repo": REPO,
            "commit": commit, "file": file, "pgm": pgm, "pkgs": pkgs, "utils": utils,
            "texts": TEXTS, "specials": SPECIALS, "seq": SEQ}
    env = dict(os.environ, PYTHONPATH=str(target))
    out = subprocess.run([sys.executable, "-c", _CHILD, json.dumps(args)], env=env, check=True,
                         capture_output=True, text=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def loader(commit: str, file: str, *, pgm_name: str, pkgs: list[str], utils: str | None,
           cp_rank: int, cp: int):
    """The upstream module at `commit` with `pgm.process_group_manager` a stand-in holding only
    what `collate_batch` reads (`cp_rank`, `cp_world_size`)."""
    pgm = stub(pgm_name, process_group_manager=types.SimpleNamespace(
        cp_rank=cp_rank, cp_world_size=cp, dp_world_size=1, dp_rank=0, global_rank=0,
        pp_world_size=1))
    mods = {"datasets": stub("datasets", Features=None, Sequence=None, Value=None,
                             load_dataset=None), pgm_name: pgm}
    for name in pkgs:
        m = stub(name)
        m.__path__ = []
        mods[name] = m
    if utils:
        mods[utils] = stub(utils, print=print)
    prior = sys.modules.get("datasets")
    mod = upstream(REPO, commit, file, name=f"picotron_{commit[:9]}_{Path(file).stem}_{cp_rank}",
                   stubs=mods)
    # The `datasets` stand-in served this import only: other stacks of the run need the real one.
    if prior is None:
        del sys.modules["datasets"]
    else:
        sys.modules["datasets"] = prior
    return mod


STUBS = [
    "datasets: Features, Sequence, Value, load_dataset (imported by the module, unused by "
    "tokenizer_group_text and collate_batch)",
    "pgm.process_group_manager: a SimpleNamespace with cp_rank, cp_world_size (what "
    "collate_batch and parallel_input read), no process group",
    "picotron.utils.print / builtins print (the module's rank-aware print, unused)",
    f"transformers=={TF} (picotron's pin) from a --target install, for batch_encode_plus, in a "
    "subprocess; the tokenizer: ",
]


def tokenizer_note() -> str:
    from stacks import _word_tokenizer as wt

    return wt.description(SPECIALS, "<s>")


def expected_rows(encoded: list[list[int]]) -> list[list[int]]:
    """The rows the contract gives (for the record's `why`): the ids concatenated, cut into
    SEQ + 1 every SEQ, the remainder dropped."""
    flat = [t for e in encoded for t in e]
    total = ((len(flat) - 1) // SEQ) * SEQ + 1
    return [flat[i:i + SEQ + 1] for i in range(0, total - SEQ, SEQ)]


def generate() -> None:
    import torch

    pkgs = ["picotron"]
    got = rows_of(COMMIT, FILE, pgm="picotron.process_group_manager", pkgs=pkgs,
                  utils="picotron.utils")
    rows = got["rows"]
    assert rows == expected_rows(got["encoded"]), (rows, got["encoded"])
    stubs = STUBS[:-1] + [STUBS[-1] + tokenizer_note()]
    doc_lens = [len(e) for e in got["encoded"]]
    items = [{"input_ids": r} for r in rows]
    inp = {"texts": TEXTS, "encoded (batch_encode_plus)": got["encoded"],
           "rows (tokenizer_group_text)": rows, "sequence_length": SEQ,
           "micro_batch_size": len(rows), "transformers (tokenizer)": got["transformers"]}
    fn_tok = (f"MicroBatchDataLoader.tokenizer_group_text(texts, tokenizer, sequence_length={SEQ}) "
              f"-> MicroBatchDataLoader.collate_batch(rows)")
    # Useful work under the profile: each row one causal sequence of S tokens.
    b = len(rows)

    # ---------------- cp = 1 ----------------
    mod = loader(COMMIT, FILE, pgm_name="picotron.process_group_manager", pkgs=pkgs,
                 utils="picotron.utils", cp_rank=0, cp=1)
    self = types.SimpleNamespace(seq_length_per_gpu=SEQ // 1)
    batch = mod.MicroBatchDataLoader.collate_batch(self, items)
    assert batch["hidden_states"] is None
    save_case(STACK, "cp1", batch, repo=REPO, commit=COMMIT, file=FILE,
              function=fn_tok + " at cp_world_size=1", input=inp, expected="pass",
              why=f"Four texts of {doc_lens} tokens (each with its BOS) concatenated "
                  f"({sum(doc_lens)} ids) and cut into {b} rows of {SEQ}+1 ids every {SEQ} "
                  f"(the last {sum(doc_lens) - (b * SEQ + 1)} ids dropped); collate_batch at cp 1: "
                  f"input_ids = rows[:, :16], target_ids = rows[:, 1:17] (the next tokens), "
                  f"position_ids = arange(16) per row. Valid by picotron's contract: each row is one "
                  f"causal sequence of 16 real tokens (the BOS-delimited documents inside it are "
                  f"attended and trained across by design: pretraining), every target the next "
                  f"token; useful work {b} x 16^2 = {b * SEQ * SEQ} (Σ s², one sequence per row).",
              metadata={"profile": PROFILE}, stubs=stubs,
              notes="hidden_states (None, pipeline-parallel plumbing) is not a tensor: not saved. "
                    "Row 1's first id is row 0's last (the rows overlap by one id).")

    # ---------------- cp = 2 ----------------
    for r in range(2):
        mod = loader(COMMIT, FILE, pgm_name="picotron.process_group_manager", pkgs=pkgs,
                     utils="picotron.utils", cp_rank=r, cp=2)
        self = types.SimpleNamespace(seq_length_per_gpu=SEQ // 2)
        batch = mod.MicroBatchDataLoader.collate_batch(self, items)
        save_case(STACK, f"cp2/rank{r}", batch, repo=REPO, commit=COMMIT, file=FILE,
                  function=fn_tok + f" at cp_rank={r}, cp_world_size=2", input=inp,
                  expected="pass",
                  why=f"CP rank {r} of 2: the contiguous slice [{8 * r}, {8 * r + 8}) of every row "
                      f"(input_ids), its next tokens (target_ids) and global position_ids "
                      f"arange({8 * r}, {8 * r + 8}). Read with its cp-group.",
                  metadata={"profile": PROFILE, "cp_rank": r, "cp_size": 2}, stubs=stubs)
    expect_group(STACK, "cp2", expected="pass", repo=REPO, commit=COMMIT, file=FILE,
                 function=fn_tok + " at cp_rank 0 and 1 of 2",
                 why=f"The two ranks' contiguous halves reassemble the cp-1 batch exactly "
                     f"({b} rows of 16 tokens, targets the next tokens, positions 0..15): valid, "
                     f"useful work {b * SEQ * SEQ} as at cp 1.")

    # ---------------- bug: the CP split applied twice (363dbd5c0) ----------------
    got_bug = rows_of(BUG_COMMIT, BUG_FILE, pgm="src.distributed.process_group_manager",
                      pkgs=["src", "src.distributed"], utils=None)
    assert got_bug["rows"] == rows
    bug_pkgs = ["src", "src.distributed", "src.parallel"]
    for r in range(2):
        utils = loader(BUG_COMMIT, BUG_FILE, pgm_name="src.distributed.process_group_manager",
                       pkgs=bug_pkgs, utils=None, cp_rank=r, cp=2)
        cp_mod = upstream(REPO, BUG_COMMIT, BUG_CP, name=f"picotron_bug_cp_{r}", stubs={
            "src.distributed.process_group_manager":
                sys.modules["src.distributed.process_group_manager"],
            "src.distributed.distributed_primtives": stub(
                "src.distributed.distributed_primtives", ContextComms=None)})
        self = types.SimpleNamespace(seq_length_per_gpu=SEQ // 2)
        coll = utils.MicroBatchDataLoader.collate_batch(self, items)
        input_ids, target_ids = cp_mod.parallel_input(coll["input_ids"], coll["target_ids"])
        batch = {"input_ids": input_ids, "target_ids": target_ids,
                 "position_ids": coll["position_ids"]}
        assert input_ids.shape == (b, 4) and coll["position_ids"].shape == (b, 8)
        save_case(STACK, f"cp2_split_twice_363dbd5c0/rank{r}", batch, repo=REPO,
                  commit=BUG_COMMIT, file=f"{BUG_FILE}, {BUG_CP}, train.py",
                  function=f"MicroBatchDataLoader.collate_batch(rows) at cp_rank={r}, "
                           f"cp_world_size=2 -> parallel_input(input_ids, target_ids) "
                           f"(train.py train_step)",
                  input={**inp, "cp_rank": r, "cp_world_size": 2}, expected=["token-counts"],
                  bug=f"split twice for CP (fixed by {FIX_COMMIT[:9]})",
                  why=f"At 363dbd5c0 the loader already keeps rank {r}'s slice [{8 * r}, "
                      f"{8 * r + 8}) (collate_batch, position_ids arange({8 * r}, {8 * r + 8})) "
                      f"and train_step's parallel_input slices input_ids and target_ids again to "
                      f"their half [{4 * r}, {4 * r + 4}) of the slice, not position_ids: the "
                      f"model gets tokens [B, 4] beside position_ids [B, 8] (every per-token "
                      f"tensor must hold one entry per token: token-counts). Fixed by f6c9a39d1, "
                      f"which removed parallel_input from train_step.",
                  metadata={"profile": PROFILE, "cp_rank": r, "cp_size": 2}, stubs=stubs,
                  notes="attn_mask [B, 8, 8] (collate_batch at that commit) is never passed to "
                        "the model by train_step: not saved.", pending=PENDING_SPLIT_TWICE)
    expect_group(STACK, "cp2_split_twice_363dbd5c0", expected=["cp-shard", "token-counts"],
                 bug=f"split twice for CP (fixed by {FIX_COMMIT[:9]})", repo=REPO,
                 commit=BUG_COMMIT, file=f"{BUG_FILE}, {BUG_CP}",
                 function="collate_batch -> parallel_input at cp_rank 0 and 1 of 2",
                 why="Together the two ranks hold tokens 0-3 and 12-15 of each 16-token row: "
                     "tokens 4-11 land on no rank (cp-shard: every token lands on one rank), and "
                     "each rank's position_ids hold 8 entries for 4 tokens (token-counts).",
                 pending=PENDING_SPLIT_TWICE)
