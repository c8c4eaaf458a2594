"""Megatron-Bridge's real offline packer as a `thdcheck fuzz packer` adapter.

    thdcheck fuzz packer [--first-fit] -- python adapters/python/real/megatron_bridge_packer.py \
        COMMIT [algorithm=first_fit|first_fit_decreasing|first_fit_shuffle] [pipeline=true [pad=M]]

imports `src/megatron/bridge/data/packing/algorithms.py` (and, with `pipeline=true`,
`src/megatron/bridge/data/packing/offline.py`) at COMMIT from a mirror of
NVIDIA-NeMo/Megatron-Bridge (`corpus/real/common.py` reads them with `git show`; nothing upstream
is copied here; set THDCHECK_MIRRORS). Needs numpy, tqdm and (pipeline) torch: not in CI.

**The algorithms alone** (default; `algorithm=first_fit` is the default algorithm):
`first_fit(seqlens, pack_size)` and its two variants return bins of the *entries* they were
given. `first_fit` and `first_fit_decreasing` take `item_lengths=` for entries that are not
lengths (upstream's own API, used by its diffusion and Qwen-VL energon callers): the adapter
passes the example indices as the entries and the lengths as `item_lengths`, so the bins hold
example indices as upstream computed them. `first_fit_shuffle(seqlens, pack_size)` has no
`item_lengths` and returns bins of *lengths only*; the adapter maps them back deterministically:
each length in bin order takes the first not yet used example of that length in dataset order
(examples of equal length are interchangeable for the packing; which one upstream would put
where is not decided by the algorithm: in the pipeline, `fill_packing_strategy` draws it at
random). The shuffle uses numpy's global generator: the adapter seeds it with the request's
seed (`np.random.seed(seed)`, as `prepare_gpt_sft_packed_data` does) before every call.
An example longer than `pack_size` is placed alone in a bin of its own: upstream's own tests
document this (`tests/functional_tests/test_groups/data/packing/test_algorithms.py`:
`test_first_fit` packs 128 sequences of 4096 at pack size 2048 as 128 single bins,
`test_first_fit_decreasing` expects `[[8192], [4096], [1111], [1000]]` at 2048), so those
examples are declared `oversize`, computed from the input (length > capacity).
All three are first fit in some order, so `--first-fit` holds them to it.

**`pipeline=true`**: `offline.prepare_gpt_sft_packed_data` as the offline packer runs it
(`tokenize_dataset` -> `create_hist(dataset, max_seq_length)` -> `np.random.seed(seed)` ->
`create_packing_strategy(histogram, packed_sequence_size, packing_algorithm)` ->
`fill_packing_strategy(...)` -> `np.save` of the packed rows), with
`packed_sequence_size = max_seq_length = capacity` (the builder's default:
`max_seq_length=self._max_single_sequence_length or self.seq_length`), `pad_seq_to_mult=1`
(unless `pad=M`),
`num_tokenizer_workers=-1` (serial), `packing_algorithm` = `algorithm=` (upstream's default for
this function, `first_fit_shuffle`, unless given). The `dataset_builder` (injected by design) returns the request's
examples as an already tokenized dataset; the real `GPTSFTDataset` would have truncated an
over-long *text* at tokenization, which is out of scope here (the examples are token lists).
Lengths: `create_hist` counts `len(input_ids) - 1` ("transformer input and label have one less
token than the full sequence ... We want pack size to be the length of the actual input and
label, hence minus 1"), and a pack's runtime length is the sum of those; so a thdcheck example
of `n` tokens is a tokenized example of `n + 1` token ids (input = ids[:-1], n tokens).
Token ids encode (example, position) so the packed rows are read back honestly: each row's
`seq_start_id` splits its `input_ids` into segments, and each segment must be one example's ids,
whole and in order, or (with `pad=M`, below) a prefix of them followed by pad ids (anything else
is raised as an adapter error). `create_hist` *skips* an
example whose `len(input_ids) - 1` exceeds `max_seq_length` ("Skipped %d sequences longer than
the maximum packed sequence length", a warning): not truncated, discarded; those are answered as
`dropped` (from the input: length > capacity, and absent from the output).
`pad=M` (pipeline only; or thdcheck's `--pad-sequences-to-multiple-of M`, the request's
`pad_to_multiple_of`, which must agree) is `pad_seq_to_mult=M`: `tokenize_dataset` pads every
example's runtime length up to a multiple of M, capped at `max_runtime_pad_cap =
(max_seq_length // M) * M`, with the pad id (`eod`, 0 here, a token id no example uses) through
`_pre_pad_data_point`, which *truncates* a longer example to that cap instead (an INFO log
"Sequence length ... exceeds max_seq_length ...; truncating for packing" only when the example
exceeds `max_seq_length`; none when it fits `max_seq_length` but its padded length does not,
possible only when `max_seq_length % M != 0`). The adapter reads a segment's trailing pad ids as
padding and a truncated example as the piece `[i, 0, k]` it still holds (its first `k` runtime
tokens): the tokens cut off are then missing, which thdcheck reports as a conservation gap (a
truncated example is not the example). Use `--fitting-only` for the runs that must pass.
The ZeroDivisionError of `create_packing_strategy` on a dataset with nothing left
(`packing_factor = len(all_seq_lens) / len(packed_seq_lens)`: no examples, or all too long) is
not caught: it is an adapter error, which thdcheck reports and shrinks.

Stubs (imports the functions under test never use): `megatron.bridge.utils.safe_pickle`
(`safe_load_npy`, used by `calculate_avg_seqlen` only); for the pipeline,
`megatron.core.msc_utils.MultiStorageClientFeature` (`is_enabled() -> False`: the plain
`np.save` path) and `megatron.bridge.training.tokenizers.tokenizer.MegatronTokenizer` (a type
annotation); the tokenizer object passed has `eos_id` only (fill_packing_strategy's `pad_id`,
unused by it). `megatron`, `megatron.bridge`, ... are empty packages whose
`data.packing.algorithms` is the real file at COMMIT.
"""

import os
import sys
import tempfile
import types
from collections import defaultdict, deque
from pathlib import Path

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, ".."))
sys.path.insert(0, os.path.join(HERE, "..", "..", "..", "corpus", "real"))

os.environ.setdefault("TQDM_DISABLE", "1")  # progress bars on stderr, per request

import numpy as np  # noqa: E402

from common import stub, upstream  # noqa: E402
from thdcheck_adapter import serve_packer  # noqa: E402

REPO = "NVIDIA-NeMo/Megatron-Bridge"
ALGORITHMS = "src/megatron/bridge/data/packing/algorithms.py"
OFFLINE = "src/megatron/bridge/data/packing/offline.py"
POS = 1_000_000  # token id = example index * POS + position (lengths are far below)


def _package(name):
    mod = types.ModuleType(name)
    mod.__path__ = []
    sys.modules[name] = mod
    return mod


def load(commit, pipeline):
    for name in ("megatron", "megatron.bridge", "megatron.bridge.data", "megatron.bridge.data.packing",
                 "megatron.bridge.utils", "megatron.core", "megatron.bridge.training",
                 "megatron.bridge.training.tokenizers"):
        _package(name)
    stubs = {"megatron.bridge.utils.safe_pickle": stub(
        "megatron.bridge.utils.safe_pickle", safe_load_npy=lambda *a, **k: None)}
    algorithms = upstream(REPO, commit, ALGORITHMS, name="megatron.bridge.data.packing.algorithms",
                          stubs=stubs)
    if not pipeline:
        return algorithms, None

    class _MSC:
        @staticmethod
        def is_enabled():
            return False

    stubs = {
        "megatron.core.msc_utils": stub("megatron.core.msc_utils", MultiStorageClientFeature=_MSC),
        "megatron.bridge.training.tokenizers.tokenizer": stub(
            "megatron.bridge.training.tokenizers.tokenizer", MegatronTokenizer=object),
    }
    offline = upstream(REPO, commit, OFFLINE, name="megatron.bridge.data.packing.offline", stubs=stubs)
    return algorithms, offline


def example_ids(i, n):
    """The token ids of example `i`, a runtime length of `n` (n + 1 stored ids); never 0, the
    pad id (`eod`) of the dataset below."""
    return [1 + i * POS + p for p in range(n + 1)]


def make_algorithm_packer(algorithms, algorithm):
    fn = getattr(algorithms, algorithm)

    def pack(lengths, capacity, seed):
        if algorithm == "first_fit_shuffle":
            np.random.seed(seed)
            bins = fn(list(lengths), capacity)  # lengths only: map back (see the docstring)
            free = defaultdict(deque)
            for i, n in enumerate(lengths):
                free[n].append(i)
            packs = [[free[n].popleft() for n in b] for b in bins]
        else:
            packs = fn(list(range(len(lengths))), capacity, item_lengths=list(lengths))
        oversize = [i for i, n in enumerate(lengths) if n > capacity]
        return {"packs": packs, "dropped": [], "oversize": oversize}

    return pack


class _Dataset:
    """What the injected `dataset_builder` returns: the tokenized examples, in order."""

    def __init__(self, items, pad_seq_length_to_mult):
        self.items = items
        self.tokenizer = types.SimpleNamespace(eod=0)
        self.pad_seq_length_to_mult = pad_seq_length_to_mult

    def __len__(self):
        return len(self.items)

    def __getitem__(self, i):
        return self.items[i]


def read_segment(seg, lengths):
    """A packed segment (stored ids) as an entry: the example it holds, or `[i, 0, k]` when
    `_pre_pad_data_point` truncated it to its first `k` runtime tokens; trailing pad ids (0,
    from `pad_seq_to_mult`) are padding. Anything else is an AssertionError."""
    real = list(seg)
    while real and real[-1] == 0:
        real.pop()
    i = (real[0] - 1) // POS if real else -1
    if not 0 <= i < len(lengths) or len(real) < 1 or real != example_ids(i, lengths[i])[:len(real)]:
        raise AssertionError(f"packed segment {seg} is not a prefix of one example's token ids "
                             "followed by padding")
    if len(real) == lengths[i] + 1:
        return i
    # stored ids [0, k] kept: the runtime input holds tokens 0..k-1 (labels 1..k) of the n
    k = len(real) - 1
    if k < 1:
        raise AssertionError(f"packed segment {seg} keeps no runtime token of example {i}")
    return [i, 0, k]


def make_pipeline_packer(offline, algorithm, pad_arg):
    def pack(lengths, capacity, seed, pad_to_multiple_of=None, **_):
        if pad_arg is not None and pad_to_multiple_of is not None and pad_arg != pad_to_multiple_of:
            raise RuntimeError(f"pad={pad_arg} but the request's pad_to_multiple_of is {pad_to_multiple_of}")
        mult = pad_to_multiple_of or pad_arg or 1
        items = [{"input_ids": example_ids(i, n), "answer_start_idx": 1} for i, n in enumerate(lengths)]
        with tempfile.TemporaryDirectory(prefix="mb-pack-") as tmp:
            out = Path(tmp) / "packed.npy"
            offline.prepare_gpt_sft_packed_data(
                input_path=Path(tmp) / "train.jsonl",
                output_path=out,
                output_metadata_path=None,
                packed_sequence_size=capacity,
                tokenizer=types.SimpleNamespace(eos_id=0),
                max_seq_length=capacity,
                seed=seed,
                packing_algorithm=algorithm,
                pad_seq_to_mult=mult,
                num_tokenizer_workers=-1,
                dataset_builder=lambda path, **kw: _Dataset(items, kw["dataset_kwargs"]["pad_seq_length_to_mult"]),
            )
            rows = np.load(out, allow_pickle=True)
        packs = []
        for row in rows:
            ids = list(row["input_ids"])
            bounds = list(row["seq_start_id"]) + [len(ids)]
            packs.append([read_segment(ids[a:b], lengths) for a, b in zip(bounds, bounds[1:])])
        seen = {e if isinstance(e, int) else e[0] for p in packs for e in p}
        dropped = [i for i, n in enumerate(lengths) if n > capacity and i not in seen]
        return {"packs": packs, "dropped": dropped}

    return pack


def main():
    commit = sys.argv[1] if len(sys.argv) > 1 else "067f987df"
    opts = dict(a.partition("=")[::2] for a in sys.argv[2:])
    pipeline = opts.pop("pipeline", "false").lower() in ("1", "true", "yes")
    algorithm = opts.pop("algorithm", "first_fit_shuffle" if pipeline else "first_fit")
    pad_arg = int(opts.pop("pad")) if "pad" in opts else None
    if pad_arg is not None and not pipeline:
        sys.exit("pad=M applies to pipeline=true (tokenize_dataset's pad_seq_to_mult)")
    if opts:
        sys.exit(f"unknown options {sorted(opts)}")
    algorithms, offline = load(commit, pipeline)
    if algorithm not in ("first_fit", "first_fit_decreasing", "first_fit_shuffle"):
        sys.exit(f"unknown algorithm {algorithm!r}")
    if pipeline:
        serve_packer(make_pipeline_packer(offline, algorithm, pad_arg))
    else:
        serve_packer(make_algorithm_packer(algorithms, algorithm))


if __name__ == "__main__":
    main()
