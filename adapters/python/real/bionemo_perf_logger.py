"""bionemo recipes' real `PerfLogger` (`perf_logger.py`, PR #1548: FLOPs, TFLOP/s and MFU) as a
`thdcheck fuzz logger` adapter.

    thdcheck fuzz logger --formula bionemo-perf-logger [--layout ...] [--rtol 1e-6] -- \
        python adapters/python/real/bionemo_perf_logger.py COMMIT [RECIPE] [max_cp=N]

COMMIT is a bionemo-framework commit (`b9f31aec7`, the head of PR #1548); RECIPE is `llama3`
(default: `llama3_native_te`, gradient accumulation through `log_micro_step` + `log_step`, real
tokens counted as `attention_mask.sum()` else `input_ids.numel()`) or `esm2` (`esm2_native_te`,
one `log_step(batch)` per optimizer step, real tokens = `input_ids != 1`). The recipe's
`perf_logger.py`, `distributed_config.py` and `collator.py` are read at COMMIT from the mirror
(`corpus/real/common.py`), never copied. Needs torch, transformers, torchmetrics and omegaconf
(not in CI).

Per request, one optimizer step with `logger.frequency = 1` and `log_mfu = true`:
- the model config dict the train scripts pass (`config.to_dict()`): hidden_size, num_hidden_layers,
  num_attention_heads, num_key_value_heads, intermediate_size, vocab_size = vocab,
  padded_vocab_size = padded_vocab (None: the logger falls back to vocab_size), and model_type
  `llama` when the request's MLP has 3 projections, else `esm` (the logger's gated-MLP table
  decides 3 vs 2 projections from model_type). The logger's head_dim is hidden // heads: a
  request whose head_dim differs is refused.
- each micro-batch is the request's batch dict as tensors (input_ids/labels [1, T] int64,
  cu_seq_lens_* int32, num_real_seqs kept: the logger ignores it), plus the `attention_mask` the
  recipe's THD collator output carries (the tokenizers return one per sample; see `_tensors`):
  ones over the real tokens, zeros over a mock sequence (mock-pad), and for cp-pad the real length
  only (`_pad_sequences_to_be_divisible_by` does not pad it). llama3 counts real tokens as its
  sum; under CP the CP collator pops it and llama3 falls back to `input_ids.numel()`.
- cp_size > 1: the batch goes through the recipe's real `DataCollatorForContextParallel`
  (device-mesh stand-in with a "cp" dimension of cp_size; llama3 `is_causal_lm=True` as
  `train_fsdp2_cp.py` builds it, esm2 the default), which pops attention_mask, keeps the global
  `cu_seq_lens_*` and shards input_ids/labels with `_split_batch_by_cp_rank`. A batch without
  `cu_seq_lens_q_padded` (flat or mock-pad layouts at cp_size > 1, which the recipes never
  produce: their CP dataloaders force `pad_sequences_to_be_divisible_by = 2·cp`) makes that
  upstream function raise "cu_seqlens_padded is required for THD format": the adapter answers
  that error.
- one real `PerfLogger` per CP rank (`cp_size` in `args`), fed that rank's shards, then
  `log_step`; its `metrics.compute()` runs without torch.distributed, so the dict it passes to
  `wandb.log` is that rank's own values. torchmetrics' cross-rank sync (`sync_on_compute`, over the
  world) is then applied here, by each metric's type in the logger's own `MetricCollection`:
  MeanMetric → the mean over ranks (DP replicas are alike, so the mean over the CP ranks),
  SumMetric → the sum over the CP ranks × dp_size (no answered key is of another type).
- esm2 has no gradient accumulation (`train_*.py` call `log_step` once per batch): a request with
  more than one micro-batch is refused. esm2 counts `input_ids != 1` (ESM-2's pad id); a request
  that pads with id 0 (thdcheck's default, where 1 is a real token) has ids 0 and 1 swapped in
  input_ids and labels, so that its pad tokens are ESM-2's; one under `--profile bionemo_esm2`
  already pads with 1 and is taken as it is.

Answers the logged keys under the record names of `reader/profiles/bionemo.toml` (`[loggers.bionemo]`, docs/loggers.md
§1): `train/total_unpadded_tokens_per_batch` → `tokens.real`, `train/tokens_per_second_per_gpu` →
`stored_tokens_per_second_per_gpu`, `train/unpadded_tokens_per_second_per_gpu` →
`tokens_per_second_per_gpu`, `train/tflops_per_gpu` → `tflops_per_gpu.useful`,
`train/tflops_per_gpu_padded` → `tflops_per_gpu.hardware`, `train/mfu_pct` → `mfu_pct.useful`,
`train/mfu_padded_pct` → `mfu_pct.hardware`. torchmetrics keeps its states in float32 (torch's
default dtype), so the values are float32-rounded: judge them with `--rtol 1e-6`.

Stand-ins (the rest runs as upstream wrote it):
- `wandb` (init: no-op; log: records the metrics dict, which is what is answered), `tqdm` (the
  progress bar, after import), `nvtx` (annotate: identity), `nvdlfw_inspect.api` (fp8 stats: off);
- the module's `torch.cuda` and `torch.device`: no GPU here, so `torch.device("cuda:N")` is the CPU,
  memory statistics are 0, and `is_available()` / `get_device_name()` name the GPU whose entry in
  the logger's own `_GPU_PEAK_TFLOPS_BF16` table equals the request's `peak_tflops_per_gpu`
  (989 → "NVIDIA H100"), so the logger's peak detection gives the request's peak;
- the module's `time.perf_counter` (wall clock): 0 when the logger is built, `step_time_s` at
  `log_step`, so `step_time` = `step_time_s`;
- the model outputs (`loss` 0; esm2 also zero `logits` for the perplexity metric, not answered),
  `grad_norm` 0 and `lr` 0; `DistributedConfig(rank=0, local_rank=0, world_size=num_gpus)` (real
  class) for every emulated rank;
- for collator.py's imports: `datasets`, `nvtx`, and TransformerEngine's `pad_thd_sequences_for_cp`
  bound to the real TE function (as `corpus/real/stacks/bionemo.py`; not called here).

Option `max_cp=N` makes the adapter refuse (answer an error for) requests with cp_size > N, to
judge the cp_size <= N cases alone with `--ignore adapter-error`.
"""

import inspect
import os
import sys
import types

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, ".."))
sys.path.insert(0, os.path.join(HERE, "..", "..", "..", "corpus", "real"))

import torch  # noqa: E402

import common  # noqa: E402
from stacks import bionemo as sb  # noqa: E402
from thdcheck_adapter import serve_logger  # noqa: E402

REPO = "NVIDIA-BioNeMo/bionemo-framework"
RECIPES = {"llama3": "bionemo-recipes/recipes/llama3_native_te", "esm2": "bionemo-recipes/recipes/esm2_native_te"}
CAUSAL = {"llama3": True, "esm2": False}  # DataCollatorForContextParallel(is_causal_lm=...)
ESM2_PAD = 1
# reader/profiles/bionemo.toml [loggers.bionemo]: logged key -> record key.
RECORD = {
    "train/total_unpadded_tokens_per_batch": "tokens.real",
    "train/tokens_per_second_per_gpu": "stored_tokens_per_second_per_gpu",
    "train/unpadded_tokens_per_second_per_gpu": "tokens_per_second_per_gpu",
    "train/tflops_per_gpu": "tflops_per_gpu.useful",
    "train/tflops_per_gpu_padded": "tflops_per_gpu.hardware",
    "train/mfu_pct": "mfu_pct.useful",
    "train/mfu_padded_pct": "mfu_pct.hardware",
}


class _Wandb(types.ModuleType):
    def __init__(self):
        super().__init__("wandb")
        self.logged = []
        self.Run = object  # an annotation of NsightProfiler (llama3)

    def init(self, **kwargs):
        return types.SimpleNamespace()

    def log(self, metrics, step=None):
        self.logged.append(dict(metrics))

    def finish(self):
        pass


class _NoBar:
    def __init__(self, *args, **kwargs):
        pass

    def update(self, *args, **kwargs):
        pass

    def set_postfix(self, *args, **kwargs):
        pass

    def close(self):
        pass


class _Clock:
    """The module's `time`: `perf_counter()` returns `now`."""

    def __init__(self):
        self.now = 0.0

    def perf_counter(self):
        return self.now


class _TorchOnCpu(types.ModuleType):
    """The module's `torch`: torch itself, but `torch.device(...)` is the CPU and `torch.cuda`
    answers the calls the logger makes (no GPU here)."""

    def __init__(self, device_name):
        super().__init__("torch")
        self.cuda = types.SimpleNamespace(
            is_available=lambda: True,
            get_device_name=lambda index=0: device_name,
            max_memory_allocated=lambda *a, **k: 0,
            memory_allocated=lambda *a, **k: 0,
            reset_peak_memory_stats=lambda *a, **k: None,
        )

    def __getattr__(self, name):
        return getattr(torch, name)

    @staticmethod
    def device(*args, **kwargs):
        return torch.device("cpu")


def load(commit, recipe):
    d = RECIPES[recipe]
    wandb = _Wandb()
    common.upstream(REPO, commit, f"{d}/distributed_config.py", name="distributed_config")
    api = common.stub("nvdlfw_inspect.api", step=lambda: None, end_debug=lambda: None)
    pl = common.upstream(REPO, commit, f"{d}/perf_logger.py", stubs={
        "nvtx": sb._Nvtx("nvtx"), "nvdlfw_inspect": common.stub("nvdlfw_inspect", api=api),
        "nvdlfw_inspect.api": api, "wandb": wandb})
    pl.tqdm = _NoBar
    pl.time = _Clock()
    # collator.py, for DataCollatorForContextParallel (its heavy imports as corpus/real/stacks/bionemo.py).
    common.permissive_stub("transformer_engine", "transformer_engine_torch")
    te = common.upstream(sb.TE_REPO, sb.TE_HEAD, sb.TE_FILE)
    cp_mod = "transformer_engine.pytorch.attention.dot_product_attention.context_parallel"
    coll = common.upstream(REPO, commit, f"{d}/collator.py", stubs={
        "datasets": common.stub("datasets", IterableDataset=object, Dataset=object),
        "nvtx": sb._Nvtx("nvtx"),
        cp_mod: common.stub(cp_mod, pad_thd_sequences_for_cp=te.pad_thd_sequences_for_cp)})
    return pl, coll, wandb


def _pads_with_zero(mb, real):
    """Whether the request pads with id 0 (thdcheck's default) rather than ESM-2's own pad id 1
    (`--profile bionemo_esm2`, whose pad_token_id is 1): read from a padding token (a mock
    sequence's, or a CP slot's past its real length), else from whether id 1 is a real token."""
    ids = mb["input_ids"][0]
    pad_at = list(range(real, len(ids)))
    q, qp = mb["cu_seq_lens_q"], mb.get("cu_seq_lens_q_padded")
    if qp is not None:
        pad_at += [t for i in range(len(q) - 1) for t in range(qp[i] + q[i + 1] - q[i], qp[i + 1])]
    if pad_at:
        return ids[pad_at[0]] == 0
    return ESM2_PAD in ids


def _tensors(mb, recipe):
    """The request's batch dict as the recipe's THD collator returns it (see the module docstring)."""
    out = {}
    # attention_mask: `_pt_flatten_collate` concatenates the tokenizer's per-sample masks (ones over
    # the real tokens); `_pt_pad_to_multiple_of` appends zeros for the mock sequence;
    # `_pad_sequences_to_be_divisible_by` pads input_ids and labels only, so the mask keeps the real
    # length. DataCollatorForContextParallel pops it under CP.
    cu = mb["cu_seq_lens_q"]
    real = cu[mb["num_real_seqs"]] if "num_real_seqs" in mb else cu[-1]
    mock = len(mb["input_ids"][0]) - real if "num_real_seqs" in mb else 0
    out["attention_mask"] = torch.tensor([[1] * real + [0] * mock], dtype=torch.int64)
    swap = recipe == "esm2" and _pads_with_zero(mb, real)
    for k, v in mb.items():
        if k in ("input_ids", "labels"):
            t = torch.tensor(v, dtype=torch.int64)
            if swap:  # the request's pad id 0 is ESM-2's pad id 1, and vice versa
                t = torch.where(t == 0, ESM2_PAD, torch.where(t == ESM2_PAD, 0, t))
            out[k] = t
        elif k.startswith("cu_seq_lens"):
            out[k] = torch.tensor(v, dtype=torch.int32)
        else:
            out[k] = v
    return out


def main():
    positional = [a for a in sys.argv[1:] if "=" not in a]
    opts = dict(a.split("=", 1) for a in sys.argv[1:] if "=" in a)
    commit = positional[0] if positional else "b9f31aec7"
    recipe = positional[1] if len(positional) > 1 else "llama3"
    max_cp = int(opts["max_cp"]) if "max_cp" in opts else None
    if recipe not in RECIPES:
        sys.exit(f"RECIPE must be one of {sorted(RECIPES)}")
    pl, coll, wandb = load(commit, recipe)
    from omegaconf import OmegaConf
    from transformers.modeling_outputs import CausalLMOutputWithPast, MaskedLMOutput

    dist_config_cls = sys.modules["distributed_config"].DistributedConfig
    takes_start_step = "start_step" in inspect.signature(pl.PerfLogger.__init__).parameters
    names = {v: k for k, v in reversed(list(pl._GPU_PEAK_TFLOPS_BF16.items()))}  # peak -> first key

    def log(req):
        m, cp, dp = req["model"], req["cp_size"], req["dp_size"]
        if max_cp is not None and cp > max_cp:
            raise ValueError(f"refused: cp_size={cp} > max_cp={max_cp} (adapter option)")
        if m["hidden"] // m["heads"] != m["head_dim"]:
            raise ValueError(f"head_dim {m['head_dim']} != hidden // heads: bionemo's formula cannot express it")
        if recipe == "esm2" and len(req["micro_batches"]) > 1:
            raise ValueError("esm2's training loop calls PerfLogger.log_step once per batch (no gradient "
                             "accumulation): a step of several micro-batches is not an esm2 step")
        peak = req["peak_tflops_per_gpu"]
        if peak not in names:
            raise ValueError(f"peak {peak} is not in the logger's _GPU_PEAK_TFLOPS_BF16 table")
        pl.torch = _TorchOnCpu(f"NVIDIA {names[peak]}")
        config = {"hidden_size": m["hidden"], "num_hidden_layers": m["layers"],
                  "num_attention_heads": m["heads"], "num_key_value_heads": m["kv_heads"],
                  "intermediate_size": m["ffn"], "vocab_size": m["vocab"],
                  "padded_vocab_size": m.get("padded_vocab"),
                  "model_type": "llama" if m["mlp_projections"] == 3 else "esm"}
        batches = [_tensors(mb, recipe) for mb in req["micro_batches"]]
        if cp > 1:
            shards = [coll.DataCollatorForContextParallel(
                collator=lambda features, b=b: dict(b), device_mesh=sb._CpMesh(cp), qkv_format="thd",
                is_causal_lm=CAUSAL[recipe])(None) for b in batches]
        else:
            shards = [[b] for b in batches]
        args = OmegaConf.create({
            "logger": {"frequency": 1}, "log_mfu": True, "cp_size": cp, "num_train_steps": 1,
            "dataset": {"max_seq_length": max(b["input_ids"].shape[1] for b in batches)},
            "wandb": {}, "wandb_init_args": {}, "profiler": {"enabled": False},
            "fp8_stats_config": {"enabled": False}, "quant_stats_config": {"enabled": False}})
        dist_config = dist_config_cls(rank=0, local_rank=0, world_size=req["num_gpus"])
        per_rank, kinds = [], {}
        for rank in range(cp):
            pl.time.now = 0.0
            kwargs = {"start_step": 0} if takes_start_step else {}
            logger = pl.PerfLogger(dist_config=dist_config, args=args, model_config_dict=config, **kwargs)
            kinds = {k: type(v).__name__ for k, v in logger.metrics.items()}
            step = 1
            for mb in shards:
                batch = mb[rank]
                if recipe == "llama3":
                    outputs = CausalLMOutputWithPast(loss=torch.tensor(0.0))
                    logger.log_micro_step(step=step, batch=batch, outputs=outputs)
            pl.time.now = req["step_time_s"]
            if recipe == "llama3":
                logger.log_step(step=step, grad_norm=torch.tensor(0.0), lr=0.0)
            else:
                batch = shards[0][rank]
                width = max(128, int(batch["labels"].max()) + 1)
                logits = torch.zeros(1, batch["input_ids"].shape[1], width)
                outputs = MaskedLMOutput(loss=torch.tensor(0.0), logits=logits)
                logger.log_step(step=step, batch=batch, outputs=outputs, grad_norm=0.0, lr=0.0)
            per_rank.append(wandb.logged.pop())
        logged = {}
        for key, record in RECORD.items():
            if key not in per_rank[0]:
                continue
            values = [r[key] for r in per_rank]
            kind = kinds.get(key)
            if kind == "MeanMetric":
                logged[record] = sum(values) / len(values)
            elif kind == "SumMetric":
                logged[record] = sum(values) * dp
            else:
                raise ValueError(f"{key}: unexpected metric type {kind}")
        return logged

    serve_logger(log)


if __name__ == "__main__":
    main()
