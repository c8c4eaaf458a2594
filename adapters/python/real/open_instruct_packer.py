"""open-instruct's real packers as a `thdcheck fuzz packer` adapter.

    thdcheck fuzz packer [--dp-size R] -- python adapters/python/real/open_instruct_packer.py \
        COMMIT mode=grpo [min_num_batches=N]
    thdcheck fuzz packer --fitting-only [--dp-size R] [--max-seqs-per-pack K] [--pairs] -- \
        python adapters/python/real/open_instruct_packer.py COMMIT mode=loader [drop_last=false] [dp_size=R]

imports open-instruct's files at COMMIT from a mirror of allenai/open-instruct
(`corpus/real/common.py` reads them with `git show`; nothing upstream is copied here; set
THDCHECK_MIRRORS). Needs torch (and for `mode=loader` `datasets` and transformers): not in CI.

**`mode=grpo`**: `open_instruct/rl_utils.py` `pack_sequences` (GRPO's packer, called by
`DataPreparationActor` in data_loader.py). Each example of `n` tokens is a rollout: a query of 1
token and a response of `n - 1` tokens (masks all 1, vLLM logprobs 0.0), with `pad_token_id=0`,
which occurs in no token (`pack_sequences` asserts it is absent from the queries and filters it
out of the responses). Token ids encode (example, position). The packs are read from what
`pack_sequences` returns: each pack's `dones` carries `i + 1` at the last token of rollout `i`
(in order), its `packed_seq_lens` the rollout lengths; the adapter takes the example order from
`dones` and checks `packed_seq_lens` and the tokens of `query_responses` against it (a mismatch is
raised as an adapter error, never repaired). `pack_sequences` fills a pack in order and starts a
new one when the next rollout does not fit (next fit); a rollout longer than the pack length is
placed alone in a pack of its own on purpose (its comment: "sequences longer than
effective_pack_length will naturally get their own pack(s) since the packing loop starts a new
pack when a sequence doesn't fit"), so examples longer than the capacity are declared `oversize`
(from the input). `min_num_batches` (adapter argument, default 1) lowers the pack length to
`total_tokens // min_num_batches` (never above `pack_length`) so that every rank gets a pack;
over-long rollouts still go alone.
With `--dp-size R` (the request's `dp_size`), the adapter runs what the `DataPreparationActor`
does with the packs (data_loader.py): `pack_sequences(..., min_num_batches=R)` and then
`prepare_collated_data_for_workers(packed, R, per_device_train_batch_size=1, pad_token_id=0,
pin_memory=False)` (upstream pins only when CUDA is available; no effect on the packs)
(numpy's global generator seeded with the request's seed for its per-rank shuffle), and answers
each worker's collated rows (padding 0 stripped) as that rank's packs. That function keeps the
first `(P // R) * R` packs and drops the rest on purpose ("Total packed sequences (P) is not
evenly divisible by dp_world_size (R). Truncating to ... sequences (dropping ...)", a warning):
the examples of those trailing packs of `pack_sequences`' answer are declared `dropped`.

**`mode=loader`**: `open_instruct/data_loader.py` `HFDataLoader` with world-aware packing
(`_reshard_with_packing`, enabled because the collator has a `max_seq_length`). For `dp_size`
R (the request's `dp_size`, else the adapter argument `dp_size=R`, else 1) the adapter builds one
loader per `dp_rank` 0..R-1 over the same `datasets.Dataset` (an `index` column = the example
ids, and `input_ids`, or `chosen_input_ids`/`chosen_labels`/`rejected_input_ids`/
`rejected_labels` with `--pairs`; `set_format("pt")` as upstream's own
`test_packing_equal_batches_across_ranks` does), with `seed` = the request's seed,
`batch_size = K * R` (the global batch size in sequences; the per-rank batch size K is the
request's `max_seqs_per_pack`, else the number of examples, i.e. no limit), `drop_last` (adapter
argument, upstream default True), and as collator the real one of the same commit with
`max_seq_length = capacity`: `TensorDataCollatorWithFlatteningDPO` for pairs (what dpo.py uses),
`TensorDataCollatorWithFlattening` otherwise. It iterates every rank's loader right after
construction (epoch 0, as that upstream test does) and answers every batch as a pack, in global
order (step k: rank 0's k-th batch, rank 1's, ...), with `ranks` (only when the request has
`dp_size`) and `padding` = the batches the loader flags `is_padding` (with `drop_last=False` the
last batch is repeated so every rank gets as many). The example ids of a batch are read from
the batch: `index` (pairs, as the upstream test reads it), else the token ids of each
`cu_seq_lens_q` segment of `input_ids`, which encode (example, position); a segment that is not
one example's tokens, whole and in order, is raised as an adapter error.
`drop_last=True` (upstream's default, the training loader in dpo.py) drops the batches beyond a
multiple of R by design ("If True, drop the last incomplete batch"); the adapter does not
declare them (it cannot tell them from a loss without inferring them from the output). Under
`--profile open_instruct` (`drops` includes `dp-remainder`) conservation accepts such an
unreported cut when what is lost fills fewer packs than the R ranks, so `drop_last=true` is
fuzzed with the profile; `drop_last=false` is dpo.py's reference-logprob cache loader ("We need
to process every example ... so we can't drop the last batch").
An example longer than `max_seq_length` starts a batch and is kept alone in it, undocumented:
upstream's data pipeline truncates every SFT and DPO row to `max_seq_length` before the loader
(dataset_transformation.py), and GRPO asserts that a prompt and its response fit the pack length
(data_loader.py L501), so no such example reaches it. The `open_instruct` profile states that
precondition (`[fuzz] fitting_only = true`): with `--profile open_instruct` alone the loader gets
only examples that fit. An empty dataset raises `IndexError` in
`_reshard_with_packing` (`num_streams = len(lengths[0])`): not caught, an adapter error.

Stubs (imports the functions under test never use): `open_instruct.logger_utils`
(`setup_logger` -> `logging.getLogger`); permissive stand-ins for the rest of `open_instruct.*`
(`model_utils`, `utils`, `dataset_transformation`, `environments`, `rubrics`), `ray` and `vllm`.
Real files at COMMIT: `padding_free_collator.py`, `tensor_utils.py`, `data_types.py`,
`rl_utils.py`, `data_loader.py`. `olmo_core.data.data_loader` (`DataLoaderBase`) is the real
file of allenai/OLMo-core at fa6c5014c, the revision open-instruct's pyproject.toml pins
(`[tool.uv.sources] ai2-olmo-core`), loaded by `corpus/real/stacks/olmo_core.py` (its own stubs
are listed there); nothing was pip-installed.
"""

import logging
import os
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, ".."))
sys.path.insert(0, os.path.join(HERE, "..", "..", "..", "corpus", "real"))

os.environ.setdefault("TQDM_DISABLE", "1")
os.environ.setdefault("HF_DATASETS_DISABLE_PROGRESS_BARS", "1")

from common import permissive_stub, upstream  # noqa: E402
from thdcheck_adapter import serve_packer  # noqa: E402

REPO = "allenai/open-instruct"
OLMO_CORE_PIN = "fa6c5014c9f6e9ee789da2d9c20d5126fee8df0d"  # open-instruct pyproject.toml
POS = 1_000_000  # token id = 1 + example * POS + position (+ POS // 2 for a rejected branch)
_PERMISSIVE = ("open_instruct", "ray", "vllm")


class Upstream:
    """The real open-instruct modules at one commit, loaded on first use."""

    def __init__(self, commit):
        self.commit = commit
        self._loaded = {}

    def _base(self):
        if "pfc" in self._loaded:
            return
        import stacks.open_instruct as so

        pfc, _ = so.load(self.commit)  # padding_free_collator (+ tensor_utils, logger_utils stub)
        pkg = sys.modules["open_instruct"]
        sys.modules["open_instruct.padding_free_collator"] = pkg.padding_free_collator = pfc
        pkg.logger_utils.setup_logger = lambda name=None, *a, **k: logging.getLogger(name)
        pkg.data_types = upstream(REPO, self.commit, "open_instruct/data_types.py", name="open_instruct.data_types")
        permissive_stub(*_PERMISSIVE)
        pkg.rl_utils = upstream(REPO, self.commit, "open_instruct/rl_utils.py", name="open_instruct.rl_utils")
        self._loaded["pfc"] = pfc

    @property
    def pfc(self):
        self._base()
        return self._loaded["pfc"]

    @property
    def rl_utils(self):
        self._base()
        return sys.modules["open_instruct.rl_utils"]

    @property
    def data_loader(self):
        if "dl" not in self._loaded:
            self._base()
            import stacks.olmo_core as soc

            soc.load(OLMO_CORE_PIN)  # registers olmo_core.data.data_loader (DataLoaderBase)
            self._loaded["dl"] = upstream(REPO, self.commit, "open_instruct/data_loader.py",
                                          name="open_instruct.data_loader")
        return self._loaded["dl"]


def tokens(i, n, branch=0):
    return [1 + i * POS + branch * (POS // 2) + p for p in range(n)]


def decode(seg, lens, branch=0):
    """The example whose tokens (of `branch`) `seg` is, whole and in order (`lens[i]`: example
    i's length on that branch); else an AssertionError."""
    i = (seg[0] - 1) // POS if seg else -1
    if not 0 <= i < len(lens):
        raise AssertionError(f"segment {seg} holds no example's tokens")
    if seg != tokens(i, lens[i], branch):
        raise AssertionError(f"segment {seg} is not example {i}'s {lens[i]} tokens, whole and in order")
    return i


# ----------------------------------------------------------------------------- GRPO
def make_grpo_packer(up, min_num_batches):
    import numpy as np
    import torch

    def run_pack_sequences(lengths, capacity, min_batches):
        queries = [tokens(i, n)[:1] for i, n in enumerate(lengths)]
        responses = [tokens(i, n)[1:] for i, n in enumerate(lengths)]
        packed = up.rl_utils.pack_sequences(
            queries=queries, responses=responses, masks=[[1] * len(r) for r in responses],
            pack_length=capacity, pad_token_id=0, vllm_logprobs=[[0.0] * len(r) for r in responses],
            min_num_batches=min_batches)
        packs = []
        for qr, dones, seq_lens in zip(packed.query_responses, packed.dones, packed.packed_seq_lens):
            order = [int(d) - 1 for d in dones.tolist() if d != 0]
            if [lengths[i] for i in order] != seq_lens.tolist():
                raise AssertionError(f"dones {dones.tolist()} disagree with packed_seq_lens {seq_lens.tolist()}")
            flat = qr.tolist()
            pos = 0
            for i in order:
                decode(flat[pos:pos + lengths[i]], lengths)
                pos += lengths[i]
            if pos != len(flat):
                raise AssertionError(f"pack of {len(flat)} tokens, segments cover {pos}")
            packs.append(order)
        return packed, packs

    def pack(lengths, capacity, seed, dp_size=None, **_):
        oversize = [i for i, n in enumerate(lengths) if n > capacity]
        if dp_size is None:
            _, packs = run_pack_sequences(lengths, capacity, min_num_batches)
            return {"packs": packs, "dropped": [], "oversize": oversize}
        packed, packs = run_pack_sequences(lengths, capacity, dp_size)
        # what DataPreparationActor fills in before prepare_collated_data_for_workers
        packed.advantages = [torch.zeros(len(q), dtype=torch.float32) for q in packed.query_responses]
        packed.response_masks = [m.bool() for m in packed.response_masks]
        state = np.random.get_state()
        np.random.seed(seed)
        try:
            workers = up.data_loader.prepare_collated_data_for_workers(
                packed, dp_size, per_device_train_batch_size=1, pad_token_id=0, pin_memory=False)
        finally:
            np.random.set_state(state)
        kept = (len(packs) // dp_size) * dp_size
        dropped = [i for p in packs[kept:] for i in p]  # the truncation upstream announces
        out, ranks = [], []
        for r, w in enumerate(workers):
            for mb in w.query_responses:
                for row in mb.tolist():
                    flat = [t for t in row if t != 0]
                    pack, pos = [], 0
                    while pos < len(flat):
                        i = (flat[pos] - 1) // POS
                        n = lengths[i] if 0 <= i < len(lengths) else 1
                        pack.append(decode(flat[pos:pos + n], lengths))
                        pos += n
                    out.append(pack)
                    ranks.append(r)
        return {"packs": out, "dropped": dropped, "oversize": [i for i in oversize if i not in dropped],
                "ranks": ranks}

    return pack


# ----------------------------------------------------------------------------- loader
def make_loader_packer(up, drop_last, default_dp):
    from datasets import Dataset

    def pack(lengths, capacity, seed, dp_size=None, max_seqs_per_pack=None, **_):
        dl, pfc = up.data_loader, up.pfc
        world = dp_size or default_dp
        per_rank = max_seqs_per_pack or max(1, len(lengths))
        pairs = bool(lengths) and isinstance(lengths[0], (tuple, list))
        ids = list(range(len(lengths)))
        if pairs:
            chosen = [tokens(i, c, 0) for i, (c, _) in enumerate(lengths)]
            rejected = [tokens(i, r, 1) for i, (_, r) in enumerate(lengths)]
            data = {"chosen_input_ids": chosen, "chosen_labels": chosen,
                    "rejected_input_ids": rejected, "rejected_labels": rejected, "index": ids}
            collator = pfc.TensorDataCollatorWithFlatteningDPO(max_seq_length=capacity)
        else:
            data = {"input_ids": [tokens(i, n) for i, n in enumerate(lengths)], "index": ids}
            collator = pfc.TensorDataCollatorWithFlattening(max_seq_length=capacity)
        ds = Dataset.from_dict(data)
        ds.set_format(type="pt")
        per_rank_batches = []
        with tempfile.TemporaryDirectory(prefix="oi-loader-") as work_dir:
            for rank in range(world):
                loader = dl.HFDataLoader(dataset=ds, batch_size=per_rank * world, seed=seed, dp_rank=rank,
                                         dp_world_size=world, work_dir=work_dir, collator=collator,
                                         drop_last=drop_last)
                per_rank_batches.append(list(loader))
        packs, ranks, padding = [], [], []
        steps = max((len(b) for b in per_rank_batches), default=0)
        for k in range(steps):
            for rank, batches in enumerate(per_rank_batches):
                if k >= len(batches):
                    continue
                batch = batches[k]
                if pairs:
                    pack = [int(x) for x in batch["index"].tolist()]
                    for branch, key in ((0, "chosen_"), (1, "rejected_")):
                        cu = batch[key + "cu_seq_lens_q"].tolist()
                        flat = batch[key + "input_ids"][0].tolist()
                        got = [decode(flat[a:b], [l[branch] for l in lengths], branch)
                               for a, b in zip(cu, cu[1:])]
                        if got != pack:
                            raise AssertionError(f"{key}segments hold examples {got}, index says {pack}")
                else:
                    cu = batch["cu_seq_lens_q"].tolist()
                    flat = batch["input_ids"][0].tolist()
                    pack = [decode(flat[a:b], lengths) for a, b in zip(cu, cu[1:])]
                if batch.get("is_padding"):
                    padding.append(len(packs))
                packs.append(pack)
                ranks.append(rank)
        out = {"packs": packs, "dropped": [], "padding": padding}
        if dp_size is not None:
            out["ranks"] = ranks
        return out

    return pack


def main():
    commit = sys.argv[1] if len(sys.argv) > 1 else "e6c3044aa"
    opts = dict(a.partition("=")[::2] for a in sys.argv[2:])
    mode = opts.pop("mode", "grpo")
    truth = ("1", "true", "yes")
    up = Upstream(commit)
    if mode == "grpo":
        min_num_batches = int(opts.pop("min_num_batches", "1"))
        pack = make_grpo_packer(up, min_num_batches)
        up.rl_utils  # import now: a broken import fails at start, not per request
    elif mode == "loader":
        drop_last = opts.pop("drop_last", "true").lower() in truth
        pack = make_loader_packer(up, drop_last, int(opts.pop("dp_size", "1")))
        up.data_loader
    else:
        sys.exit(f"unknown mode {mode!r} (grpo or loader)")
    if opts:
        sys.exit(f"unknown options {sorted(opts)}")
    serve_packer(pack)


if __name__ == "__main__":
    main()
