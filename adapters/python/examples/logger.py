"""A correct throughput logger (stdlib only): what a Megatron-style logger should report for
one step of packed micro-batches. Real tokens and Σ s² come from the real documents only (the
first ``num_real_seqs`` offsets: a ``pad_to_multiple_of`` mock segment is hardware work, never
useful work); hardware work is every slot (``cu_seq_lens_q_padded`` when present); counts and
FLOPs are the step's, summed over micro-batches and times the DP size (the other DP ranks'
micro-batches are alike); rates are per GPU.

Run: thdcheck fuzz logger -- python3 adapters/python/examples/logger.py

The buggy loggers next to it reuse this file with one line changed (BUG = ...)."""

import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from thdcheck_adapter import serve_logger  # noqa: E402

# Which seed bug to reproduce: None (correct), "pack_length_squared", "mock_counted_as_useful"
# or "rank_local_counts".
BUG = None


def lengths(offsets):
    return [b - a for a, b in zip(offsets, offsets[1:])]


def megatron_flops(model, tokens, sum_squares):
    """Megatron-LM / Megatron-Bridge `num_floating_point_operations`, dense GPT, closed form,
    with the causal half: 6·T·[L·F·h·f + L·(2hq + 2hk + h·gate) + h·Vp] + 6·L·q·Σs²."""
    L, h, f = model["layers"], model["hidden"], model["ffn"]
    q, k = model["heads"] * model["head_dim"], model["kv_heads"] * model["head_dim"]
    gate = q if model.get("attention_output_gate") else 0
    vp = model.get("padded_vocab") or model["vocab"]
    per_token = 6 * (L * model["mlp_projections"] * h * f + L * (2 * h * q + 2 * h * k + h * gate) + h * vp)
    assert model["causal"] == "half", "this example implements Megatron's causal half only"
    return tokens * per_token + 6 * L * q * sum_squares


def step_stats(micro_batches):
    real = stored = valid = useful_sq = hardware_sq = 0
    for batch in micro_batches:
        rows = batch["input_ids"]
        if "cu_seq_lens_q" in batch:
            cu = batch["cu_seq_lens_q"]
            n_real = batch.get("num_real_seqs", len(cu) - 1)
            if BUG == "mock_counted_as_useful":
                n_real = len(cu) - 1  # bionemo #1561: the mock segment counted as a sequence
            real_lens = lengths(cu[: n_real + 1])
            slots = lengths(batch.get("cu_seq_lens_q_padded", cu))
        else:
            # No packing (BSHD): each row is one sequence; the mask's ones are its real tokens,
            # and the kernel computes the whole row.
            real_lens = [sum(m) for m in batch["attention_mask"]]
            if BUG == "mock_counted_as_useful":
                real_lens = [len(r) for r in rows]  # the padding counted as real tokens
            slots = [len(r) for r in rows]
        stored += sum(len(r) for r in rows)
        real += sum(real_lens)
        # Labels are read one position on, within each row: a row's first label is no target.
        valid += sum(1 for r in batch["labels"] for x in r[1:] if x != -100)
        if BUG == "pack_length_squared":
            useful_sq += sum(len(r) ** 2 for r in rows)  # PaLM-style: T² per pack
        else:
            useful_sq += sum(s * s for s in real_lens)
        hardware_sq += sum(s * s for s in slots)
    return real, stored, valid, useful_sq, hardware_sq


def log(request):
    model, dp = request["model"], request["dp_size"]
    real, stored, valid, useful_sq, hardware_sq = (x * dp for x in step_stats(request["micro_batches"]))
    if BUG == "rank_local_counts":
        # Megatron-Bridge dense CP / AReaL #1242: one CP rank's share logged as the step's.
        real, valid = real // request["cp_size"], valid // request["cp_size"]
    useful = megatron_flops(model, real, useful_sq)
    hardware = megatron_flops(model, stored, hardware_sq)
    t, gpus, peak = request["step_time_s"], request["num_gpus"], request["peak_tflops_per_gpu"]
    return {
        "tokens.real": real,
        "tokens.stored": stored,
        "tokens.valid": valid,
        "attention.useful_sum_squares": useful_sq,
        "attention.hardware_sum_squares": hardware_sq,
        "flops.useful": useful,
        "flops.hardware": hardware,
        "tflops_per_gpu.useful": useful / t / gpus / 1e12,
        "mfu_pct.useful": 100.0 * (useful / t / gpus) / (peak * 1e12),
        "mfu_pct.hardware": 100.0 * (hardware / t / gpus) / (peak * 1e12),
        "tokens_per_second_per_gpu": real / t / gpus,
    }


if __name__ == "__main__":
    serve_logger(log)
