"""AReaL's real SFT training step under context parallelism as a `thdcheck fuzz loss` adapter.

    thdcheck fuzz loss --profile areal -- \
        python adapters/python/real/areal_cp_loss.py COMMIT [report=logged|objective]

imports inclusionAI/AReaL at COMMIT from a mirror (`corpus/real/common.py` reads every file with
`git show`; nothing upstream is copied here; set THDCHECK_MIRRORS) and runs, for every request,
one SFT step on every CP rank with AReaL's own code:

    LMEngine.train_lm              areal/trainer/sft/lm_engine.py (scope "sft", loss_mask roll)
    -> MegatronEngine.train_batch  areal/engine/megatron_engine.py
         compute_total_loss_weight areal/engine/core/train_engine.py
         -> forward_backward_batch (its forward_step: the CP inputs, CP-local or reassembled)
            -> packed_context_parallel_forward  areal/engine/megatron_utils/...
            -> _compute_logprobs_and_loss (gather_logprobs_entropy; reassemble/unpad at #1249)
               -> compute_packed_sft_loss  (the loss and its stats_tracker calls)
    -> MegatronEngine.export_stats -> stats_tracker.export_all(reduce_group=DP group)

with the rank's shard of the request as the model's output logits. The CP ranks run as threads
of this process; each has its own copy of `areal/utils/stats_tracker.py` (fresh per request), as
each rank is its own process in AReaL. The collectives are emulated in-process, over the group
the upstream call names: SUM all-reduce = the plain sum, over the group's ranks in rank order,
of what each rank contributes; MIN/MAX alike; all_gather / all_gather_object = the list of every
rank's value. Data parallelism is 1 (D = 1: the request is the whole global batch), so the DP
group is the rank alone and the DP+CP group is the CP group.

What is answered:
- `loss`: `sft/loss/avg` as global rank 0 logs it: `export_stats()` on CP rank 0 (StatsLogger
  commits on rank 0 only), i.e. Σ masked NLL / Σ n_valid_tokens over what rank 0's tracker holds,
  reduced over the DP group. This is the loss AReaL *reports* (the protocol's "reported loss").
  When rank 0 recorded no `sft/loss` (its CP-local weight is 0, so `_compute_logprobs_and_loss`
  returns before calling the loss function), the key is absent from what AReaL logs: answered as
  NaN. With `report=objective`, the backprop objective instead: Σ over ranks of the loss each
  rank hands Megatron, times Megatron-Core's cp_size / num_microbatches (the 2-tuple
  `(loss, {})` path) and DDP's 1 / (dp·cp) gradient average (the gradient the optimizer gets is
  this sum's gradient; optimizer loss scale 1).
- `n_valid_tokens`: `sft/n_valid_tokens` as rank 0 logs it (absent -> not answered).
- `parts`: every rank's (Σ masked NLL, Σ n_valid_tokens) from its own tracker (the numerator
  and denominator `export` would all-reduce), when the ranks' trackers hold disjoint shards
  (the CP-local loss: no rank all-gathered anything over CP). When the step all-gathers the
  logits (before #1223) or the logprobs (#1249's reassembly) over CP, every rank's loss
  function sees the whole batch: the trackers are replicated, not parts, and none are answered.

No workaround: an exception in upstream code (e.g. `compute_total_loss_weight`'s
"Global total loss weight must be positive" on a batch with no valid label) is the answer.

The request's layout is fed as one pseudo-sequence: thdcheck sends the shards but not the slot
boundaries, so the adapter inverts AReaL's own zigzag for one slot of T = cp·n_local tokens
(rank r's first n_local/2 tokens at [r·h, (r+1)·h), the rest at [T-(r+1)·h, T-r·h)); AReaL's
`split_packed_seqs_for_context_parallel` on that slot gives back exactly the request's shards
(checked on every request: the model asserts its local input ids; at cp 1 the shard is the
batch itself, in order, of any length). `input_ids` are chosen so
that AReaL's roll(-1) yields the request's label at every valid position; the 2-D loss_mask is
the request's mask rolled +1 (AReaL's per-token convention), which `_train_lm` (or, before
d58cca56f, `compute_packed_sft_loss`) rolls back. Loss and counts are sums over positions, so
the order is immaterial to them; per-sequence stats (ppl, n_seqs) are not answered. The engine's
`_prepare_mb_list` is replaced by its one-micro-batch path with tp = 1 (the real
`amend_position_ids`, `pack_tensor_dict`, `pad_mb_list(seq_align_to=2·cp)`, which adds AReaL's
256-token dummy tail); the model returns the request's logits (f64; AReaL casts them to float32
itself in `gather_logprobs_entropy`) and zeros on the dummy tail. Every answer declares
`"dtype": "float32"` (the protocol's way to say what the loss was computed in), so thdcheck
judges it to the float32 tolerance, 1e-5, with no `--rtol`: the logged stats are float32 sums,
not the f64 logits, and an undeclared answer is judged as float64 (1e-9).

Stubbed (imports the step never uses, or what a real cluster provides), nothing else:
- `megatron.core.parallel_state`: sizes and groups of the emulated ranks (tp = pp = dp = 1);
- `megatron.core.pipeline_parallel.get_forward_backward_func`: a schedule that calls
  `forward_step` then the loss function once per micro-batch (no backward: nothing here needs
  gradients);
- `megatron.core.packed_seq_params.PackedSeqParams`: a plain record;
- `torch.distributed` / `torch.distributed.nn.functional` as the module globals `dist` /
  `dist_F` of the upstream modules: the in-process collectives above;
- `areal.utils.stats_tracker` (the name the upstream modules import): dispatches to the calling
  rank's own copy of the real file (`scope_func_wrapper`, applied at import, enters the scope
  of the calling rank's tracker at call time);
- `areal.utils.logging.getLogger` (stdlib logging), `areal.utils.perf_tracer` (`trace_perf`,
  `trace_scope`: no-ops), `areal.infra.platforms` (`current_platform` not initialized: CPU;
  `is_npu_available` False), `areal.api.TrainEngine` (object);
- permissive stand-ins for every other import of these files (`mbridge`, `megatron.*`,
  `transformers`, `torchdata`, `einops`, `numba`, the rest of `areal.*`);
- `TORCH_COMPILE_DISABLE=1`: `torch.compile` of `_gather_logprobs_entropy` runs eagerly (the
  same ops; compiling each shape on a CPU would take minutes);
- the engine object: built without `__init__` (no model, optimizer or process groups to
  create): `config.is_critic = False`, `config.temperature = 1.0`, no tree training, no
  offload, no FP8, not a vision model, an optimizer whose loss scale is 1.
Real, at COMMIT: areal/trainer/sft/lm_engine.py, areal/engine/megatron_engine.py,
areal/engine/core/train_engine.py, areal/engine/megatron_utils/packed_context_parallel.py,
areal/utils/{data,math,seqpack,stats_tracker}.py, areal/utils/functional/vocab_parallel.py.

Commits worth fuzzing: d58cca56f^ (logits gathered over CP), d58cca56f (#1223: CP-local loss,
#1242 / AR-B1 counts and AR-B2 ratios from rank 0's slice), 2498d17e7 (the last commit before
the fix), 95e2379d0 (#1249: reassembly), HEAD. Needs torch (not in CI).
"""

import os
import sys

os.environ.setdefault("TORCH_COMPILE_DISABLE", "1")

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, ".."))
sys.path.insert(0, os.path.join(HERE, "..", "..", "..", "corpus", "real"))

import contextlib  # noqa: E402
import importlib  # noqa: E402
import logging  # noqa: E402
import threading  # noqa: E402
import types  # noqa: E402

import torch  # noqa: E402
import torch.distributed as real_dist  # noqa: E402

from common import full_sha, permissive_stub, source, stub, upstream  # noqa: E402
from thdcheck_adapter import serve_loss  # noqa: E402

REPO = "inclusionAI/AReaL"
IGNORE_INDEX = -100
BARRIER_TIMEOUT_S = 60.0

# ---------------------------------------------------------------------------------------------
# The emulated ranks: a thread per CP rank; collectives over the ranks of a group.

_RANK = threading.local()  # .rank (CP rank = global rank, D = 1), .ctx (the request's _Step)


class _Group:
    """A process group of the emulated ranks: its collectives exchange one value per rank."""

    def __init__(self, name, ranks):
        self.name = name
        self.ranks = list(ranks)
        self.slots = [None] * len(self.ranks)
        self.barrier = threading.Barrier(len(self.ranks), timeout=BARRIER_TIMEOUT_S)

    def size(self):
        return len(self.ranks)

    def exchange(self, value):
        """Every rank's `value`, in the group's rank order (the data of an all-gather)."""
        if len(self.ranks) == 1:
            return [value]
        self.slots[self.ranks.index(_RANK.rank)] = value
        self.barrier.wait()
        out = list(self.slots)
        self.barrier.wait()
        return out

    def __repr__(self):
        return f"<emulated group {self.name} {self.ranks}>"


class _Dist:
    """`torch.distributed` as the upstream modules call it, over `_Group`s."""

    ReduceOp = real_dist.ReduceOp
    ProcessGroup = real_dist.ProcessGroup

    @staticmethod
    def is_initialized():
        return True

    @staticmethod
    def get_world_size(group=None):
        return _group(group).size()

    @staticmethod
    def get_rank(group=None):
        return _group(group).ranks.index(_RANK.rank)

    @staticmethod
    def get_process_group_ranks(group):
        return list(_group(group).ranks)

    @staticmethod
    def all_reduce(tensor, op=real_dist.ReduceOp.SUM, group=None, async_op=False):
        values = _group(group).exchange(tensor.detach().clone())
        out = values[0].clone()
        for v in values[1:]:  # rank order: the plain sum of what each rank contributes
            if op == real_dist.ReduceOp.SUM:
                out = out + v
            elif op == real_dist.ReduceOp.MIN:
                out = torch.minimum(out, v)
            elif op == real_dist.ReduceOp.MAX:
                out = torch.maximum(out, v)
            else:
                raise NotImplementedError(f"emulated all_reduce: op {op}")
        with torch.no_grad():
            tensor.copy_(out)

    @staticmethod
    def all_gather(tensor_list, tensor, group=None, async_op=False):
        _note_gather(group)
        values = _group(group).exchange(tensor.detach().clone())
        with torch.no_grad():
            for dst, v in zip(tensor_list, values, strict=True):
                dst.copy_(v)

    @staticmethod
    def all_gather_object(object_list, obj, group=None):
        object_list[:] = _group(group).exchange(obj)

    def __getattr__(self, name):
        raise AttributeError(f"emulated torch.distributed has no {name}")


class _DistNN:
    """`torch.distributed.nn.functional`: the differentiable all_gather (forward only here)."""

    @staticmethod
    def all_gather(tensor, group=None):
        _note_gather(group)
        return tuple(_group(group).exchange(tensor))

    def __getattr__(self, name):
        raise AttributeError(f"emulated torch.distributed.nn.functional has no {name}")


def _group(group):
    if group is None:  # the default group: every rank of the step (D = 1)
        return _RANK.ctx.world
    assert isinstance(group, _Group), f"not an emulated group: {group!r}"
    return group


def _note_gather(group):
    """Tensors gathered over more than one rank: this rank's loss sees more than its shard."""
    if _group(group).size() > 1:
        _RANK.ctx.gathered[_RANK.rank] = True


def _mpu():
    """megatron.core.parallel_state of the calling rank: tp = pp = dp = 1, cp = the request's."""

    def ctx():
        return _RANK.ctx

    def _unknown(name):
        raise AttributeError(f"parallel_state stand-in has no {name}")

    fns = dict(
        get_context_parallel_world_size=lambda: ctx().cp,
        get_context_parallel_rank=lambda: _RANK.rank,
        get_context_parallel_group=lambda *a, **k: ctx().cp_group,
        get_tensor_model_parallel_world_size=lambda: 1,
        get_tensor_model_parallel_rank=lambda: 0,
        get_pipeline_model_parallel_world_size=lambda: 1,
        get_pipeline_model_parallel_rank=lambda: 0,
        is_pipeline_last_stage=lambda *a, **k: True,
        is_pipeline_first_stage=lambda *a, **k: True,
        get_data_parallel_world_size=lambda with_context_parallel=False, **k: (
            ctx().cp if with_context_parallel else 1
        ),
        get_data_parallel_rank=lambda with_context_parallel=False, **k: (
            _RANK.rank if with_context_parallel else 0
        ),
        get_data_parallel_group=lambda with_context_parallel=False, **k: (
            ctx().dp_cp_group if with_context_parallel else ctx().dp_groups[_RANK.rank]
        ),
    )
    mod = stub("megatron.core.parallel_state", **fns)
    mod.__getattr__ = _unknown
    return mod


def _forward_backward_func(
    *, forward_step_func, data_iterator, model, num_microbatches, forward_only=False, **_
):
    """Megatron-Core's schedule, reduced to what the loss sees: per micro-batch, forward_step,
    then the loss function on its output (the 2-tuple path of mcore 0.16 scales the returned
    loss by cp_size / num_microbatches; recorded for report=objective)."""
    ctx = _RANK.ctx
    for _ in range(num_microbatches):
        output, loss_func = forward_step_func(data_iterator, model)
        loss, _extra = loss_func(output)
        ctx.handed[_RANK.rank].append(float(loss.detach()) * ctx.cp / num_microbatches)
    return []


# megatron.core.packed_seq_params stand-in (a plain record), shared with the corpus generator.
from stacks.areal import PackedSeqParams  # noqa: E402


def _identity_decorator_factory(*a, **k):
    def wrap(fn):
        return fn

    return wrap


@contextlib.contextmanager
def _no_scope(*a, **k):
    yield


class _TrackerProxy(types.ModuleType):
    """`areal.utils.stats_tracker` for the upstream modules: the calling rank's own copy."""

    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        return getattr(_RANK.ctx.trackers[_RANK.rank], name)

    @staticmethod
    def scope_func_wrapper(name):
        # Applied once at import (LMEngine.train_lm); enters the calling rank's scope per call.
        def decorator(func):
            def wrapper(*args, **kwargs):
                tracker = _RANK.ctx.trackers[_RANK.rank]
                return tracker.scope_func_wrapper(name)(func)(*args, **kwargs)

            return wrapper

        return decorator


# ---------------------------------------------------------------------------------------------
# Loading AReaL at a commit.


class _Areal:
    def __init__(self, commit):
        self.commit = commit
        self.sha = full_sha(REPO, commit)
        self.stubs = permissive_stub(
            "areal", "megatron", "mbridge", "transformers", "torchdata", "einops", "numba"
        )

        def pkg(name, **attrs):
            mod = importlib.import_module(name)  # a permissive package, made by the finder
            for k, v in attrs.items():
                setattr(mod, k, v)
            return mod

        def install(name, mod):
            sys.modules[name] = mod
            parent, _, child = name.rpartition(".")
            if parent:
                setattr(importlib.import_module(parent), child, mod)
            return mod

        pkg("areal")
        pkg("areal.utils")
        install("areal.utils.logging", stub("areal.utils.logging", getLogger=logging.getLogger))
        install(
            "areal.utils.perf_tracer",
            stub("areal.utils.perf_tracer", trace_perf=_identity_decorator_factory,
                 trace_scope=_no_scope),
        )
        platform = types.SimpleNamespace(is_initialized=lambda: False, device_type="cpu")
        pkg("areal.infra")
        install(
            "areal.infra.platforms",
            stub("areal.infra.platforms", current_platform=platform, is_npu_available=False),
        )
        pkg("areal.api", TrainEngine=object)
        pkg("megatron")
        pkg("megatron.core")
        self.mpu = install("megatron.core.parallel_state", _mpu())
        install(
            "megatron.core.pipeline_parallel",
            stub("megatron.core.pipeline_parallel",
                 get_forward_backward_func=lambda *a, **k: _forward_backward_func),
        )
        install(
            "megatron.core.packed_seq_params",
            stub("megatron.core.packed_seq_params", PackedSeqParams=PackedSeqParams),
        )

        def real(path, name):
            return install(name, upstream(REPO, commit, path, name=name))

        real("areal/utils/math.py", "areal.utils.math")
        real("areal/utils/seqpack.py", "areal.utils.seqpack")
        self.data = real("areal/utils/data.py", "areal.utils.data")
        install("areal.utils.stats_tracker", _TrackerProxy("areal.utils.stats_tracker"))
        # A fresh copy of the real stats_tracker per rank per request (one process each in AReaL).
        st_path = "areal/utils/stats_tracker.py"
        self.st_code = compile(source(REPO, commit, st_path), f"{self.sha[:12]}/{st_path}", "exec")

        vp = real("areal/utils/functional/vocab_parallel.py",
                  "areal.utils.functional.vocab_parallel")
        pkg("areal.utils.functional", gather_logprobs=vp.gather_logprobs,
            gather_logprobs_entropy=vp.gather_logprobs_entropy)
        pkg("areal.engine")
        te = real("areal/engine/core/train_engine.py", "areal.engine.core.train_engine")
        pkg("areal.engine.core", **{k: getattr(te, k) for k in te.__all__})
        pkg("areal.engine.megatron_utils")
        pcp = real("areal/engine/megatron_utils/packed_context_parallel.py",
                   "areal.engine.megatron_utils.packed_context_parallel")
        pkg("areal.trainer")
        pkg("areal.trainer.sft")
        self.lm = real("areal/trainer/sft/lm_engine.py", "areal.trainer.sft.lm_engine")
        self.me = real("areal/engine/megatron_engine.py", "areal.engine.megatron_engine")

        for mod in (self.data, te, pcp, self.me, vp):
            if hasattr(mod, "dist"):
                mod.dist = _Dist()
        if hasattr(pcp, "dist_F"):
            pcp.dist_F = _DistNN()

    def tracker(self, rank, serial):
        name = f"areal_stats_tracker_rank{rank}_{serial}"
        mod = types.ModuleType(name)
        mod.__file__ = self.st_code.co_filename
        exec(self.st_code, mod.__dict__)
        mod.dist = _Dist()
        return mod


# ---------------------------------------------------------------------------------------------
# One request: the pseudo-sequence, the engine of each rank, the step.


def _zigzag_positions(n_local, cp, rank):
    """The positions in one slot of T = cp·n_local that AReaL's split gives `rank`, in order."""
    if cp == 1:  # the whole slot (any length: AReaL aligns to tp = 1 without CP)
        return list(range(n_local))
    half = n_local // 2
    total = cp * n_local
    return list(range(rank * half, (rank + 1) * half)) + list(
        range(total - (rank + 1) * half, total - rank * half)
    )


class _Model:
    """The model: returns the rank's logits from the request (zeros on AReaL's dummy tail)."""

    def __init__(self, step):
        self.step = step

    def __call__(self, input_ids, attention_mask=None, position_ids=None,
                 packed_seq_params=None, **kwargs):
        step, rank = self.step, _RANK.rank
        logits = step.logits[rank]
        n = logits.shape[0]
        got = input_ids.reshape(-1)
        expected = step.local_ids[rank]
        if got.shape[0] < n or not torch.equal(got[:n], expected):
            raise AssertionError(
                f"rank {rank}: AReaL's split does not give back the request's shard "
                f"(local ids {got.tolist()} vs {expected.tolist()})"
            )
        out = torch.zeros(got.shape[0], logits.shape[1], dtype=logits.dtype)
        out[:n] = logits
        return out.unsqueeze(0)

    def train(self, mode=True):
        return self

    def zero_grad_buffer(self):
        pass


class _Optimizer:
    param_groups = [{"lr": 0.0}]

    def zero_grad(self, *a, **k):
        pass

    def get_loss_scale(self):
        return torch.tensor(1.0)

    def step(self):
        return True, None, None


class _Step:
    serial = 0

    def __init__(self, areal, ranks, cp):
        _Step.serial += 1
        self.areal, self.cp = areal, cp
        assert len(ranks) == cp, f"{len(ranks)} shards for cp_size {cp}"
        n_local = len(ranks[0]["labels"])
        assert all(len(r["labels"]) == n_local for r in ranks), "unequal shards"
        assert cp == 1 or n_local % 2 == 0, f"a shard of {n_local} tokens is not two chunks"
        total = cp * n_local
        self.total = total
        mask = torch.zeros(total, dtype=torch.bool)
        target = torch.zeros(total, dtype=torch.long)
        self.logits, self.local_ids = [], []
        for r, shard in enumerate(ranks):
            for k, g in enumerate(_zigzag_positions(n_local, cp, r)):
                y = shard["labels"][k]
                if y != IGNORE_INDEX:
                    mask[g], target[g] = True, y
            self.logits.append(torch.tensor(shard["logits"], dtype=torch.float64))
        # input_ids such that roll(input_ids, -1)[g] is the label at every valid position g.
        ids = torch.zeros(total, dtype=torch.long)
        for g in range(total):
            if mask[g]:
                ids[(g + 1) % total] = target[g]
        self.local_ids = [ids[_zigzag_positions(n_local, cp, r)] for r in range(cp)]
        self.row = {
            "input_ids": ids.unsqueeze(0),
            "attention_mask": torch.ones(1, total, dtype=torch.bool),
            # AReaL's per-token loss mask: token g+1 is trained where position g predicts it.
            "loss_mask": torch.roll(mask, 1).long().unsqueeze(0),
        }
        self.world = _Group("world", range(cp))
        self.cp_group = _Group("cp", range(cp))
        self.dp_cp_group = _Group("dp+cp", range(cp))  # D = 1
        self.dp_groups = [_Group(f"dp(rank {r})", [r]) for r in range(cp)]
        self.trackers = [areal.tracker(r, _Step.serial) for r in range(cp)]
        self.handed = [[] for _ in range(cp)]
        self.gathered = [False] * cp
        self.results = [None] * cp
        self.errors = [None] * cp

    def abort(self):
        for g in [self.world, self.cp_group, self.dp_cp_group, *self.dp_groups]:
            g.barrier.abort()

    def prepare_mb_list(self, input_):
        """MegatronEngine._prepare_mb_list for one micro-batch, tp = 1 (the request is the
        layout): the real amend_position_ids, pack_tensor_dict and pad_mb_list."""
        data = self.areal.data
        input_ = data.amend_position_ids(input_)
        mb = data.pack_tensor_dict(dict(input_))
        spec = types.SimpleNamespace(max_tokens_per_mb=None, n_mbs=1)
        mb_list = data.MicroBatchList(data=input_, mb_spec=spec, mbs=[mb], group_lens=[self.total])
        align = 2 * self.cp if self.cp > 1 else 1
        mb_list = data.pad_mb_list(mb_list, pad_value=0.0, pad_to_maximum=False, seq_align_to=align)
        mb_list.mbs = [dict(**m) for m in mb_list.mbs]
        mb_list.padded_mbs = [dict(**m) for m in mb_list.padded_mbs]
        for m in mb_list.mbs + mb_list.padded_mbs:
            m["max_seqlen"] = int(m["max_seqlen"])
        return mb_list

    def engine(self):
        me = self.areal.me
        engine = object.__new__(me.MegatronEngine)
        engine.config = types.SimpleNamespace(
            is_critic=False, temperature=1.0, pad_to_maximum=False
        )
        engine.enable_tree_training = False
        engine.is_offload = False
        engine._offload_depth = 0
        engine.enable_fp8 = False
        engine.is_vision_model = False
        engine.process_group_initialized = True
        engine._initialized = True
        engine.device = torch.device("cpu")
        engine.model = [_Model(self)]
        engine.optimizer = _Optimizer()
        engine._prepare_mb_list = self.prepare_mb_list
        return engine

    def run_rank(self, rank):
        _RANK.rank, _RANK.ctx = rank, self
        try:
            torch.set_num_threads(1)
            engine = self.engine()
            batch = {k: v.clone() for k, v in self.row.items()}  # every CP rank gets the batch
            self.areal.lm.LMEngine(engine).train_lm([batch])
            tracker = self.trackers[rank].DEFAULT_TRACKER
            if "sft/loss" in tracker.stats:
                part = (
                    tracker._sum_of("sft/loss", None),
                    tracker._sum_of("sft/n_valid_tokens", None),
                )
            else:  # the loss function was not called on this rank (its weight is 0)
                part = (0.0, 0.0)
            self.results[rank] = (part, engine.export_stats())
        except BaseException as e:  # noqa: BLE001 - re-raised by the driver
            self.errors[rank] = e
            self.abort()

    def run(self):
        threads = [threading.Thread(target=self.run_rank, args=(r,)) for r in range(self.cp)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        errors = [e for e in self.errors if e is not None]
        if errors:
            first = next((e for e in errors if not isinstance(e, threading.BrokenBarrierError)),
                         errors[0])
            raise first
        return self.results


def main():
    args = sys.argv[1:]
    commit = args[0] if args else "95e2379d0"
    report = "logged"
    for a in args[1:]:
        key, _, value = a.partition("=")
        if key != "report" or value not in ("logged", "objective"):
            sys.exit(f"unknown argument {a!r} (report=logged|objective)")
        report = value
    areal = _Areal(commit)

    def loss(ranks, cp_size):
        step = _Step(areal, ranks, cp_size)
        results = step.run()
        logged = results[0][1]  # what global rank 0 commits
        # AReaL's log-probs, the loss and its stats are float32 (gather_logprobs_entropy casts).
        out = {"dtype": "float32"}
        if report == "logged":
            out["loss"] = logged.get("sft/loss/avg", float("nan"))
        else:
            # mcore's cp/num_microbatches is in `handed`; DDP averages gradients over dp·cp.
            out["loss"] = sum(sum(h) for h in step.handed) / (1 * cp_size)
        if "sft/n_valid_tokens" in logged:
            out["n_valid_tokens"] = logged["sft/n_valid_tokens"]
        # Parts only where each rank's tracker holds its own shard: no rank gathered the
        # logits / logprobs of the others (else every tracker holds the whole batch).
        if not any(step.gathered):
            out["parts"] = [p for p, _ in results]
        return out

    serve_loss(loss)


if __name__ == "__main__":
    main()
