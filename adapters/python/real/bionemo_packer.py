"""bionemo recipes' real `TokenPackingDataset` as a `thdcheck fuzz packer --session` adapter.

    thdcheck fuzz packer --session [--pad-to-multiple-of M] [--fitting-only] -- \
        python adapters/python/real/bionemo_packer.py COMMIT [recipe=llama3_native_te] \
        [split_samples=true] [pad=M] [drop_last=false]

imports `bionemo-recipes/recipes/<recipe>/collator.py` at COMMIT from a mirror of
NVIDIA-BioNeMo/bionemo-framework (`corpus/real/stacks/bionemo.py` `_load`, through
`corpus/real/common.py`: read with `git show`, nothing upstream copied here; set
THDCHECK_MIRRORS). Needs torch (not in CI). The recipes' copies of `TokenPackingDataset` are
identical at e40716591 (llama3_native_te, esm2_native_te, esm2_peft_te,
opengenome2_llama_native_te).

`TokenPackingDataset(dataset, max_tokens_per_batch=capacity, drop_last=..., split_samples=...,
pad_sequences_to_be_divisible_by=M)` is an IterableDataset: its `__iter__` pulls samples from
`dataset` and yields a batch (a list of samples) as soon as it decides one. It is streaming by
construction, so the adapter drives it as a session, not one-shot: one `iter()` per epoch (the
recipes' training loops re-iterate the dataloader each epoch after `set_epoch`), run in a thread
whose source is fed by the session's pushes. After each pushed sample the adapter waits until
the packer asks for the next one (a handshake, so every answer is deterministic), and answers
the batches it yielded meanwhile: those are the packs of that `push`. `end_epoch` ends the
source, so `__iter__` returns, yielding the final partial batch unless `drop_last`; the next
push starts the next epoch's `iter()`. `finish` does the same for the last epoch. Nothing
else is buffered by the adapter: the packs of a call are exactly what upstream yielded during it.

Samples are `{"input_ids": [...], "id": id}` with token ids `id * 1_000_000 + position`, so a
batch entry (a whole sample or, with `split_samples=True`, a part made by
`_split_sample_by_num_tokens`) is read back as the tokens it holds: a whole example is its id,
a part is the piece `[id, start, end]` (its first and last positions; the tokens must be
consecutive and in order, else an adapter error).

The request's `seed` is unused: `TokenPackingDataset` does not shuffle (the stream order is the
push order). Options: `pad=M` (or thdcheck's `--pad-to-multiple-of M`, the request's `pad_to_multiple_of`,
which wins; they must agree if both are given) is `pad_sequences_to_be_divisible_by=M`: each
sample takes its length rounded up to a multiple of M of the batch. `split_samples=true` fills
every batch exactly by splitting the sample that overflows it. `drop_last` is upstream's
default, True: the final partial batch of every epoch is dropped by design ("Whether to drop
the last batch if it's less than max_length"); the adapter does not declare those drops (it
cannot see them without inferring them), so conservation runs use `drop_last=false`.

A sample whose (padded) length exceeds `max_tokens_per_batch` makes `__iter__` raise
`ValueError` ("Set truncation or a maximum length in your tokenizer or dataset ..."): served with
`rejects=(ValueError,)`, i.e. answered as a refusal, which thdcheck accepts only for a call
that holds an example that cannot fit. After a refusal the epoch's iteration is dead (as it
would be in training); the next push starts a new one.
"""

import os
import queue
import sys
import threading

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, ".."))
sys.path.insert(0, os.path.join(HERE, "..", "..", "..", "corpus", "real"))

from stacks.bionemo import _load  # noqa: E402
from thdcheck_adapter import serve_packer_session  # noqa: E402

POS = 1_000_000
_END = object()


def recipe_collator(recipe):
    return f"bionemo-recipes/recipes/{recipe}/collator.py"


class _Epoch:
    """One `iter(TokenPackingDataset)` running in a thread, fed one sample at a time."""

    def __init__(self, make_dataset):
        self.inbox = queue.Queue()
        self.outbox = queue.Queue()
        self.thread = threading.Thread(target=self._run, args=(make_dataset,), daemon=True)
        self.thread.start()
        self._wait()  # until the packer asks for its first sample

    def _source(self):
        while True:
            self.outbox.put(("hungry", None))
            item = self.inbox.get()
            if item is _END:
                return
            yield item

    def _run(self, make_dataset):
        try:
            for batch in make_dataset(self._source()):
                self.outbox.put(("batch", batch))
        except BaseException as e:  # noqa: BLE001 - handed to the caller's thread
            self.outbox.put(("error", e))
            return
        self.outbox.put(("done", None))

    def _wait(self):
        """The batches yielded until the packer asks for the next sample (or ends)."""
        batches = []
        while True:
            kind, value = self.outbox.get()
            if kind == "batch":
                batches.append(value)
            elif kind == "error":
                self.thread.join()
                raise value
            else:
                return batches, kind

    def feed(self, sample):
        self.inbox.put(sample)
        batches, kind = self._wait()
        assert kind == "hungry", kind
        return batches

    def end(self):
        self.inbox.put(_END)
        batches, kind = self._wait()
        assert kind == "done", kind
        self.thread.join()
        return batches


def entry(sample):
    ids = list(sample["input_ids"])
    i, start = divmod(ids[0], POS)
    if ids != [i * POS + start + k for k in range(len(ids))]:
        raise AssertionError(f"batch entry {ids} is not consecutive tokens of one example")
    return i, start, start + len(ids)


class Session:
    def __init__(self, mod, capacity, seed, pad, split_samples, drop_last):
        self.mod = mod
        self.kwargs = dict(max_tokens_per_batch=capacity, drop_last=drop_last, split_samples=split_samples,
                           pad_sequences_to_be_divisible_by=pad)
        self.lengths = {}
        self.epoch = None

    def _make(self, source):
        return iter(self.mod.TokenPackingDataset(source, **self.kwargs))

    def _packs(self, batches):
        packs = []
        for batch in batches:
            pack = []
            for sample in batch:
                i, start, end = entry(sample)
                whole = start == 0 and end == self.lengths.get(i)
                pack.append(i if whole else [i, start, end])
            packs.append(pack)
        return packs

    def push(self, examples):
        if self.epoch is None:
            self.epoch = _Epoch(self._make)
        out = []
        for e in examples:
            n = e["len"]
            self.lengths[e["id"]] = n
            sample = {"input_ids": [e["id"] * POS + p for p in range(n)], "id": e["id"]}
            try:
                out += self.epoch.feed(sample)
            except BaseException:
                self.epoch = None  # the iteration raised: it is over
                raise
        return {"packs": self._packs(out), "dropped": []}

    def end_epoch(self):
        if self.epoch is None:
            return {"packs": []}
        epoch, self.epoch = self.epoch, None
        return {"packs": self._packs(epoch.end())}

    def finish(self):
        out = self.end_epoch()
        out["pending"] = 0
        return out


def main():
    commit = sys.argv[1] if len(sys.argv) > 1 else "e40716591"
    opts = dict(a.partition("=")[::2] for a in sys.argv[2:])
    truth = ("1", "true", "yes")
    recipe = opts.pop("recipe", "llama3_native_te")
    split_samples = opts.pop("split_samples", "false").lower() in truth
    drop_last = opts.pop("drop_last", "true").lower() in truth
    pad_arg = int(opts["pad"]) if "pad" in opts else None
    opts.pop("pad", None)
    if opts:
        sys.exit(f"unknown options {sorted(opts)}")
    import stacks.bionemo as sb

    sb.HEAD = commit  # the collator is read at COMMIT (stacks.bionemo reads its HEAD)
    mod = _load(recipe_collator(recipe))

    def start(capacity, seed, pad_to_multiple_of=None, **_):
        if pad_arg is not None and pad_to_multiple_of is not None and pad_arg != pad_to_multiple_of:
            raise RuntimeError(f"pad={pad_arg} but the request's pad_to_multiple_of is {pad_to_multiple_of}")
        pad = pad_to_multiple_of if pad_to_multiple_of is not None else pad_arg
        return Session(mod, capacity, seed, pad, split_samples, drop_last)

    serve_packer_session(start, rejects=(ValueError,))


if __name__ == "__main__":
    main()
