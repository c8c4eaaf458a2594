//! open-instruct accounting (#1457, #1466, #1719): token and sequence counts from
//! `*cu_seq_lens_k`, and `ModelDims.prefill_flops` / `approximate_learner_utilization`.

use super::ModelDims;
use crate::{CuSeqlens, Error, Result};

/// `get_num_tokens` on a packed batch: `Σ cu[-1]` over the `*cu_seq_lens_k` keys (chosen and
/// rejected for DPO), which excludes padding to `max_seq_length`.
///
/// # Example
/// ```
/// use thd::CuSeqlens;
/// use thd::metrics::open_instruct::num_tokens;
/// let chosen = CuSeqlens::try_from(vec![0, 3, 8])?;
/// let rejected = CuSeqlens::try_from(vec![0, 2, 6])?;
/// assert_eq!(num_tokens(&[chosen, rejected]), 14); // OI-B5: not 20 (numel with padding)
/// # Ok::<(), thd::Error>(())
/// ```
pub fn num_tokens(cu_seq_lens_k: &[CuSeqlens]) -> u64 {
    cu_seq_lens_k.iter().map(|cu| cu.total() as u64).sum()
}

/// `get_num_sequences` at `ee0c460` (#1466): `Σ (len(cu) − 1)`, zero-length segments
/// included.
///
/// # Example
/// ```
/// # use thd::CuSeqlens;
/// # use thd::metrics::open_instruct::num_sequences;
/// let cu = CuSeqlens::try_from(vec![0, 100, 200, 300])?;
/// assert_eq!(num_sequences(&[cu.clone(), cu]), 6);
/// # Ok::<(), thd::Error>(())
/// ```
pub fn num_sequences(cu_seq_lens_k: &[CuSeqlens]) -> u64 {
    cu_seq_lens_k.iter().map(|cu| cu.num_segments() as u64).sum()
}

/// `get_num_sequences` since #1719 (`8ea2d9ee6`): only strictly increasing boundaries count, so
/// zero-length segments are not sequences.
///
/// # Example
/// ```
/// # use thd::CuSeqlens;
/// # use thd::metrics::open_instruct::num_nonempty_sequences;
/// let cu = CuSeqlens::try_from(vec![0, 100, 100, 300])?;
/// assert_eq!(num_nonempty_sequences(&[cu]), 2);
/// # Ok::<(), thd::Error>(())
/// ```
pub fn num_nonempty_sequences(cu_seq_lens_k: &[CuSeqlens]) -> u64 {
    cu_seq_lens_k.iter().map(|cu| cu.segments().filter(|r| !r.is_empty()).count() as u64).sum()
}

/// `HFDataLoader.global_num_tokens_in_batch`: the local count times the DP world size.
///
/// # Example
/// ```
/// use thd::metrics::open_instruct::global_num_tokens;
/// assert_eq!(global_num_tokens(4 * 128, 2), 1024); // test_global_num_tokens_in_batch
/// ```
pub fn global_num_tokens(local_tokens: u64, dp_world_size: u64) -> u64 {
    local_tokens * dp_world_size
}

/// `ModelDims.prefill_flops(lengths)` after #1457: forward FLOPs of sequences of the given
/// lengths, LM head charged per token.
///
/// ```text
/// per sequence of L tokens (kv = min(L, window)), H heads, K kv heads, d head dim, I = ffn:
///   attn = 2·L·h·(H·d) + 2·2·L·h·(K·d) + 2·H·L·kv·d + 4·H·L·kv + 2·H·L·kv·d + 2·L·(H·d)·h
///   mlp  = 2·L·h·(2·I) + L·I + 2·L·I·h
///   total += layers·(attn + mlp) + L·2·h·V
/// ```
///
/// The MLP term is upstream's fixed SwiGLU shape (`mlp_projections` is not read) and causal
/// attention is not halved (`causal` is not read).
///
/// # Errors
/// [`ModelDims::validate`]'s errors.
///
/// # Example
/// ```
/// use thd::metrics::{CausalConvention, ModelDims};
/// use thd::metrics::open_instruct::prefill_flops;
/// let tiny = ModelDims { layers: 1, hidden: 4, heads: 2, kv_heads: 2, head_dim: 2, ffn: 8,
///     mlp_projections: 3, vocab: 10, padded_vocab: None, causal: CausalConvention::None,
///     attention_output_gate: false };
/// assert_eq!(prefill_flops(&tiny, &[3, 5], None)?, 4080); // OI-B8, after the fix
/// # Ok::<(), thd::Error>(())
/// ```
pub fn prefill_flops(dims: &ModelDims, lengths: &[u64], window: Option<u64>) -> Result<u128> {
    dims.validate()?;
    let [layers, h, heads, kv_heads, d, i, v] =
        [dims.layers, dims.hidden, dims.heads, dims.kv_heads, dims.head_dim, dims.ffn, dims.vocab]
            .map(u128::from);
    let mut total = 0u128;
    for &len in lengths {
        let l = u128::from(len);
        let kv = u128::from(window.map_or(len, |w| w.min(len)));
        let attn = 2 * l * h * (heads * d)
            + 2 * 2 * l * h * (kv_heads * d)
            + 2 * heads * l * kv * d
            + 4 * heads * l * kv
            + 2 * heads * l * kv * d
            + 2 * l * (heads * d) * h;
        let mlp = 2 * l * h * (2 * i) + l * i + 2 * l * i * h;
        total += layers * (attn + mlp) + l * 2 * h * v;
    }
    Ok(total)
}

/// `approximate_learner_utilization`: training FLOPs and MFU (%) from a token total and a
/// sequence count, as open-instruct's `PerfCallback` computes them.
///
/// ```text
/// avg = total_tokens / num_sequences;  lengths = [⌊avg⌋] · num_sequences
/// flops = 3 · prefill_flops(lengths)          (forward ×1 + backward ×2)
/// mfu   = 100 · flops / training_time_s / (device_flops · num_gpus)
/// ```
///
/// The mean length under-counts attention (`n·avg² ≤ Σ sᵢ²`) and drops `total mod n` tokens;
/// pass the real lengths to [`prefill_flops`] for the exact value. Upstream derives the count
/// as `int(total / avg)`, which float rounding can make one short; here the count is an input.
///
/// # Errors
/// [`Error::EmptyBatch`] if `num_sequences == 0`; [`ModelDims::validate`]'s errors; the
/// [`StepTiming`](super::StepTiming) errors for time, GPUs and peak.
///
/// # Example
/// ```
/// # use thd::metrics::{CausalConvention, ModelDims};
/// use thd::metrics::open_instruct::approximate_learner_utilization;
/// # let tiny = ModelDims { layers: 1, hidden: 4, heads: 2, kv_heads: 2, head_dim: 2, ffn: 8,
/// #     mlp_projections: 3, vocab: 10, padded_vocab: None, causal: CausalConvention::None,
/// #     attention_output_gate: false };
/// // OI-B9: 600 tokens in 6 packed sequences (after #1466) vs 8 from the config (before).
/// assert_eq!(approximate_learner_utilization(&tiny, 600, 6, 1.0, 1, 1e12)?.0, 5_054_400);
/// assert_eq!(approximate_learner_utilization(&tiny, 600, 8, 1.0, 1, 1e12)?.0, 3_974_400);
/// # Ok::<(), thd::Error>(())
/// ```
pub fn approximate_learner_utilization(
    dims: &ModelDims,
    total_tokens: u64,
    num_sequences: u64,
    training_time_s: f64,
    num_gpus: u64,
    device_flops: f64,
) -> Result<(u128, f64)> {
    if num_sequences == 0 {
        return Err(Error::EmptyBatch {
            context: "approximate_learner_utilization",
            what: "no sequences",
        });
    }
    let avg = total_tokens / num_sequences;
    let lengths = vec![avg; num_sequences as usize];
    let flops = 3 * prefill_flops(dims, &lengths, None)?;
    let timing = super::StepTiming {
        step_time_s: training_time_s,
        num_gpus,
        peak_flops_per_gpu: device_flops,
    };
    Ok((flops, super::mfu_pct(flops, &timing)?))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::metrics::CausalConvention;

    #[test]
    fn window_caps_the_attended_keys() {
        let d = ModelDims {
            layers: 1,
            hidden: 4,
            heads: 2,
            kv_heads: 2,
            head_dim: 2,
            ffn: 8,
            mlp_projections: 3,
            vocab: 10,
            padded_vocab: None,
            causal: CausalConvention::None,
            attention_output_gate: false,
        };
        let full = prefill_flops(&d, &[5], None).unwrap();
        assert_eq!(prefill_flops(&d, &[5], Some(100)).unwrap(), full);
        assert!(prefill_flops(&d, &[5], Some(2)).unwrap() < full);
        assert!(matches!(
            approximate_learner_utilization(&d, 10, 0, 1.0, 1, 1.0),
            Err(Error::EmptyBatch { .. })
        ));
    }
}
