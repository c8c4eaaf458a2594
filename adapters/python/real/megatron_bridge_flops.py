"""Megatron-Bridge's real FLOPs accounting (`flop_utils.py`: `accumulate_flops_metadata`, the DP
resolve, `num_floating_point_operations`) as a `thdcheck fuzz logger` adapter.

    thdcheck fuzz logger --formula megatron-lm [--layout flat --layout cp-pad] -- \
        python adapters/python/real/megatron_bridge_flops.py COMMIT [max_cp=N]

COMMIT is a Megatron-Bridge commit (`7b1dc3791`, the #3839 merge; `067f987df`, HEAD = the #4511 +
#4750 re-land). Its `flop_utils.py` is read from the mirror (`corpus/real/common.py`), together
with the two Megatron-LM files it imports at the submodule commit that Megatron-Bridge commit
pins (`3rdparty/Megatron-LM`): `megatron/training/vocab_utils.py` (the padded vocab) and, where
imported, `megatron/core/models/gpt/experimental_attention_variant_module_specs.py`. Nothing is
copied here. Needs torch (not in CI).

Per request, as one Megatron-Bridge training step on one DP rank (`train.py`):
- a fresh `GlobalState` stand-in with the per-step accumulators reset (`train.py` reset block);
- per micro-batch, `accumulate_flops_metadata` with the arguments `gpt_step._forward_step_common`
  gives it at that commit: `tokens` [1, T] (under CP > 1 the rank's [1, T/cp] slice, see below),
  the packed offsets in that commit's batch format only when `cp_size == 1` (`cp_use_thd`), and
  (HEAD) `vp_stage=None` and `config_seq_len = cfg.model.seq_length`;
- the DP resolve (`resolve_global_flops_runtime_stats` at HEAD, `resolve_global_flops_seqlen_stats`
  at #3839) with `data_parallel_size = dp_size` and a DP-group handle; torch.distributed is not
  initialised in this process, so upstream takes its own single-process branch, `local × DP`,
  which equals the SUM all-reduce here because the request's other DP ranks are alike;
- `num_floating_point_operations(cfg, batch_size = DP·mbs·num_microbatches, ...)` as `train.py`
  calls it;
- `megatron.tflops_per_gpu = flops / elapsed / world / 1e12`: the one line of `training_log`
  (`per_gpu_tf = num_flops / elapsed_time / get_world_size_safe() / 1e12`) with a one-step log
  interval (`num_flops` = this step's FLOPs, `elapsed_time` = `step_time_s`), computed here
  because `training_log` itself needs timers, writers and an optimizer; `megatron.tflops` is its
  `throughput/tflops` (`per_gpu_tf * world`).

Answers `megatron.seqlen_sum` and `megatron.seqlen_squared_sum` (the resolved global stats),
`megatron.flops`, `megatron.tflops_per_gpu`, `megatron.tflops`.

Batch format (what Megatron-Bridge's packed batches carry, one row = the step's micro-batch):
- HEAD (`gpt_step` reads `cu_seqlens_q` / `cu_seqlens_q_padded`, L546-554): `cu_seqlens_q` = the
  request's `cu_seq_lens_q`; with `cu_seq_lens_q_padded` (cp-pad layout) that is
  `cu_seqlens_q_padded`, so `cu_seqlens` = padded and `cu_seqlens_unpadded` = real offsets;
- #3839 (legacy `cu_seqlens` right-padded with -1 plus `cu_seqlens_argmin`, `sft.py`
  collate_fn): `cu_seqlens` = the padded offsets if any else `cu_seq_lens_q`, and
  `cu_seqlens_unpadded` (+ argmin) = `cu_seq_lens_q` only when padded (`pad_seq_to_mult > 1`).
- A mock segment (mock-pad layout) is an ordinary last segment of the offsets: no
  Megatron-Bridge format carries `num_real_seqs` (it is ignored).

Under CP > 1 `get_batch` partitions packed batches with TE's `thd_get_partitioned_indices`
(`_partition_packed_batch_for_cp`), which gives each rank T/cp tokens and requires every
sequence (and T) to be a multiple of 2·cp (TransformerEngine `context_parallel.cu`
L102 `assert(seqlen % (world_size * 2) == 0)`, L747 `NVTE_CHECK(total_tokens % (world_size * 2)
== 0)`). That kernel is not run here: the adapter checks the same precondition on the offsets TE
partitions with and raises TE's message for a batch that breaks it (flat or mock-pad layouts at
cp_size > 1, which Megatron-Bridge never produces: packed CP needs `pad_seq_to_mult = 2·cp`);
only `tokens.shape` is read by `accumulate_flops_metadata`, so the slice is the first T/cp tokens.

Model config (a plain namespace with the attributes `num_floating_point_operations` reads; the
rest default as in a dense `GPTModelProvider`): num_layers, hidden_size, ffn_hidden_size,
num_attention_heads, num_query_groups = kv_heads, kv_channels = head_dim, gated_linear_unit =
(mlp_projections == 3), attention_output_gate, vocab_size = vocab, make_vocab_size_divisible_by =
padded_vocab (or vocab), tensor_model_parallel_size 1 (so Megatron-LM's padded vocab equals the
request's), seq_length = the longest micro-batch; no MoE, MTP, MLA, SWA, hybrid layers, LoRA.
`config_seq_len` (the model config's `seq_length` in `gpt_step`) is the micro-batch's own
length T: Megatron-Bridge pads every pack to `seq_length`, and the requests' packs differ in
length, so each is taken as padded to its own length.

Stand-ins: every other `megatron.*` import of the loaded files (permissive; unused by the dense
GPT path: LoRA, ConfigContainer, hybrid-layer helpers, `get_attr_wrapped_model`,
`calculate_avg_seqlen`, Megatron-LM's `print_rank_0`), the `GlobalState` (a namespace) and the DP
process group (an opaque handle). Option `max_cp=N` makes the adapter refuse (answer an error
for) requests with cp_size > N, to judge the cp_size ≤ N cases alone with `--ignore adapter-error`.
"""

import os
import subprocess
import sys
import types

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, ".."))
sys.path.insert(0, os.path.join(HERE, "..", "..", "..", "corpus", "real"))

import torch  # noqa: E402

import common  # noqa: E402
from thdcheck_adapter import serve_logger  # noqa: E402

REPO = "NVIDIA-NeMo/Megatron-Bridge"
MLM = "NVIDIA/Megatron-LM"
FLOP_UTILS = "src/megatron/bridge/training/utils/flop_utils.py"
VOCAB_UTILS = "src/megatron/bridge/utils/vocab_utils.py"
GPT_STEP = "src/megatron/bridge/training/gpt_step.py"
MLM_VOCAB = "megatron/training/vocab_utils.py"
MLM_ATTN_VARIANTS = "megatron/core/models/gpt/experimental_attention_variant_module_specs.py"


def _mlm_commit(commit):
    """The Megatron-LM commit `commit` pins as its `3rdparty/Megatron-LM` submodule."""
    out = subprocess.run(["git", "-C", str(common.mirror(REPO)), "ls-tree", commit, "3rdparty/Megatron-LM"],
                         check=True, capture_output=True, text=True).stdout.split()
    return out[2]


def load(commit):
    """flop_utils at `commit`, and how that commit's gpt_step / train.py call it."""
    common.permissive_stub("megatron")
    mlm = _mlm_commit(commit)
    common.upstream(MLM, mlm, MLM_VOCAB, name="megatron.training.vocab_utils")
    common.upstream(REPO, commit, VOCAB_UTILS, name="megatron.bridge.utils.vocab_utils")
    flop_src = common.source(REPO, commit, FLOP_UTILS)
    if "experimental_attention_variant_module_specs" in flop_src:
        common.upstream(MLM, mlm, MLM_ATTN_VARIANTS,
                        name="megatron.core.models.gpt.experimental_attention_variant_module_specs")
    fu = common.upstream(REPO, commit, FLOP_UTILS, name="megatron.bridge.training.utils.flop_utils")
    step_src = common.source(REPO, commit, GPT_STEP)
    start = step_src.index("accumulate_flops_metadata(")  # the call in _forward_step_common
    call = step_src[start:step_src.index("\n    )\n", start)]
    wiring = {
        # HEAD: gpt_step reads MCore keys (cu_seqlens_q / cu_seqlens_q_padded) and passes
        # vp_stage and config_seq_len (#4511, #4750).
        "mcore_keys": 'packed_seq_metadata.get("cu_seqlens_q")' in step_src,
        "config_seq_len": "config_seq_len=" in call,
        "vp_stage": "vp_stage=" in call,
        "cp_use_thd": "cp_use_thd = pg_collection.cp.size() == 1" in step_src and "if cp_use_thd else None" in call,
    }
    return fu, wiring


def _cu(offsets):
    return torch.tensor([offsets], dtype=torch.int32)  # [B=1, K], as the packed batches carry them


def _legacy(offsets):
    """Legacy format (`sft.py` collate_fn): right-padded with -1, argmin = index of the first -1."""
    cu = torch.IntTensor([list(offsets) + [-1]])
    return cu, torch.argmin(cu, dim=1, keepdim=True)


def _cp_slice(tokens, partition_offsets, cp):
    """The rank's tokens under CP (only the shape is read): TE's precondition, then T/cp tokens."""
    total = tokens.shape[1]
    if total <= 0 or total % (2 * cp) != 0:
        raise ValueError(f"TransformerEngine thd_get_partitioned_indices: NVTE_CHECK(total_tokens > 0 && "
                         f"total_tokens % (world_size * 2) == 0) fails: total_tokens={total}, world_size={cp}")
    for a, b in zip(partition_offsets, partition_offsets[1:]):
        if (b - a) % (2 * cp) != 0:
            raise ValueError(f"TransformerEngine thd_partition_indices_kernel: assert(seqlen % (world_size * 2) "
                             f"== 0) fails: a sequence of {b - a} tokens, world_size={cp} (Megatron-Bridge packed "
                             f"CP needs pad_seq_to_mult = 2*cp)")
    return tokens[:, : total // cp]


def accumulate(fu, wiring, state, mb, cp, config_seq_len):
    """One micro-batch through `accumulate_flops_metadata`, wired as that commit's gpt_step does."""
    ids = mb["input_ids"]
    tokens = torch.tensor(ids, dtype=torch.long)
    real = list(mb["cu_seq_lens_q"])
    padded = mb.get("cu_seq_lens_q_padded")
    if cp > 1:
        tokens = _cp_slice(tokens, padded if padded is not None else real, cp)
    kwargs = {}
    if wiring["mcore_keys"]:
        cu_seqlens_q, cu_seqlens_q_padded = _cu(real), (_cu(padded) if padded is not None else None)
        kwargs["cu_seqlens"] = cu_seqlens_q_padded if cu_seqlens_q_padded is not None else cu_seqlens_q
        kwargs["cu_seqlens_unpadded"] = cu_seqlens_q if cu_seqlens_q_padded is not None else None
        kwargs["cu_seqlens_argmin"] = kwargs["cu_seqlens_unpadded_argmin"] = None
    else:
        kwargs["cu_seqlens"], kwargs["cu_seqlens_argmin"] = _legacy(padded if padded is not None else real)
        if padded is not None:
            kwargs["cu_seqlens_unpadded"], kwargs["cu_seqlens_unpadded_argmin"] = _legacy(real)
        else:
            kwargs["cu_seqlens_unpadded"] = kwargs["cu_seqlens_unpadded_argmin"] = None
    if wiring["cp_use_thd"] and cp != 1:
        kwargs = {k: None for k in kwargs}  # `x if cp_use_thd else None` for each offset argument
    if wiring["vp_stage"]:
        kwargs["vp_stage"] = None  # get_model_chunk_vp_stage of an unchunked model
    if wiring["config_seq_len"]:
        kwargs["config_seq_len"] = config_seq_len
    fu.accumulate_flops_metadata(state, tokens, **kwargs)


def model_cfg(m, seq_length):
    padded_vocab = m.get("padded_vocab") or m["vocab"]
    model = types.SimpleNamespace(
        num_layers=m["layers"], hidden_size=m["hidden"], ffn_hidden_size=m["ffn"],
        num_attention_heads=m["heads"], num_query_groups=m["kv_heads"], kv_channels=m["head_dim"],
        gated_linear_unit=m["mlp_projections"] == 3, attention_output_gate=bool(m.get("attention_output_gate")),
        vocab_size=m["vocab"], make_vocab_size_divisible_by=padded_vocab, tensor_model_parallel_size=1,
        seq_length=seq_length, virtual_pipeline_model_parallel_size=None,
        num_moe_experts=None, moe_ffn_hidden_size=None, moe_shared_expert_intermediate_size=None,
        moe_router_topk=2, moe_layer_freq=1, mtp_num_layers=None, multi_latent_attention=False,
        experimental_attention_variant=None, window_size=None, window_attn_skip_freq=None,
        is_hybrid_model=False, hybrid_layer_pattern=None, hybrid_attention_ratio=0.0, hybrid_mlp_ratio=0.0,
    )
    if m["mlp_projections"] not in (2, 3):
        raise ValueError(f"mlp_projections={m['mlp_projections']}: Megatron's dense MLP has 2 or 3 (GLU)")
    return types.SimpleNamespace(model=model, peft=None, dataset=None)


def main():
    commit = sys.argv[1] if len(sys.argv) > 1 else "067f987df"
    opts = dict(a.split("=", 1) for a in sys.argv[2:])
    max_cp = int(opts["max_cp"]) if "max_cp" in opts else None
    fu, wiring = load(commit)
    dp_group = object()  # the pure-DP process group handle (torch.distributed is not initialised)

    def log(req):
        cp, dp, mbs = req["cp_size"], req["dp_size"], req["micro_batches"]
        if max_cp is not None and cp > max_cp:
            raise ValueError(f"refused: cp_size={cp} > max_cp={max_cp} (adapter option)")
        cfg = model_cfg(req["model"], max(len(mb["input_ids"][0]) for mb in mbs))
        state = types.SimpleNamespace(
            _flops_seqlen_sum=0, _flops_seqlen_sq_sum=0, _flops_vision_patches=0, _flops_vision_patch_sum=0,
            _flops_vision_patch_sq_sum=0, _flops_vision_merged_token_sum=0, _flops_cross_seqlen_sum=0,
            _flops_cross_seqlen_product_sum=0, _flops_requires_global_reduce=False)
        for mb in mbs:
            accumulate(fu, wiring, state, mb, cp, config_seq_len=len(mb["input_ids"][0]))
        batch_size = dp * 1 * len(mbs)  # train.py: dp_size * micro_batch_size * get_num_microbatches()
        if hasattr(fu, "resolve_global_flops_runtime_stats"):  # HEAD train.py L592-610
            s = fu.resolve_global_flops_runtime_stats(
                state, data_parallel_size=dp, vp_size=cfg.model.virtual_pipeline_model_parallel_size,
                dp_group=dp_group, include_vision_patch_stats=True,
                include_cross_attention_stats=hasattr(
                    cfg.model, "_get_num_floating_point_operations_with_runtime_stats"))
            seqlen_sum, seqlen_squared_sum = s.seqlen_sum, s.seqlen_squared_sum
            flops = fu.num_floating_point_operations(
                cfg, batch_size=batch_size, seqlen_sum=s.seqlen_sum, seqlen_squared_sum=s.seqlen_squared_sum,
                num_vision_patches=0 if s.has_exact_vision_stats else s.num_vision_patches,
                cross_seqlen_sum=s.cross_seqlen_sum, cross_seqlen_product_sum=s.cross_seqlen_product_sum)
        else:  # #3839 train.py L560-572
            seqlen_sum, seqlen_squared_sum, patches = fu.resolve_global_flops_seqlen_stats(
                state, data_parallel_size=dp, vp_size=cfg.model.virtual_pipeline_model_parallel_size,
                dp_group=dp_group)
            flops = fu.num_floating_point_operations(
                cfg, batch_size=batch_size, seqlen_sum=seqlen_sum, seqlen_squared_sum=seqlen_squared_sum,
                num_vision_patches=patches)
        world = req["num_gpus"]
        per_gpu_tf = flops / req["step_time_s"] / world / 1e12  # training_log: per_gpu_tf line
        logged = {"megatron.flops": flops, "megatron.tflops_per_gpu": per_gpu_tf,
                  "megatron.tflops": per_gpu_tf * world}
        if seqlen_sum is not None:
            logged["megatron.seqlen_sum"] = seqlen_sum
            logged["megatron.seqlen_squared_sum"] = seqlen_squared_sum
        return logged

    serve_logger(log)


if __name__ == "__main__":
    main()
