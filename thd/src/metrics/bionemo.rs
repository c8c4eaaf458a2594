//! bionemo `perf_logger.py` (PR #1548 head `b9f31aec7`): the attention-work source table, the
//! per-window FLOPs and the GPU peak table, with the #1561 fix (Option A, `num_real_seqs`).

use serde::{Deserialize, Serialize};

use super::{AttnSums, ModelDims, Vocab, bionemo_attn_coeff, bionemo_non_attn_per_token};
use crate::{CuSeqlens, Error, Result};

/// The keys of a bionemo batch that `_attn_work_from_batch` reads.
///
/// # Example
/// ```
/// use thd::metrics::bionemo::BatchView;
/// let v = BatchView { cu_seq_lens_q: Some(&[0, 3, 8, 15]), ..Default::default() };
/// assert!(v.cu_seq_lens_q_padded.is_none());
/// ```
#[derive(Debug, Clone, Copy, Default)]
pub struct BatchView<'a> {
    /// `cu_seq_lens_q` (global, pre-CP; includes the mock segment after `pad_to_multiple_of`).
    pub cu_seq_lens_q: Option<&'a [i64]>,
    /// `cu_seq_lens_q_padded` (only on the per-sequence CP padding path).
    pub cu_seq_lens_q_padded: Option<&'a [i64]>,
    /// `attention_mask` rows (BSHD), per CP rank.
    pub attention_mask: Option<&'a [Vec<i64>]>,
    /// `input_ids.shape` as `(B, S_rank)`, per CP rank.
    pub input_ids_shape: Option<(u64, u64)>,
    /// The fix for issue #1561 ("Option A"): how many leading segments of `cu_seq_lens_q` are
    /// real. Upstream has no such key; `None` reproduces upstream.
    pub num_real_seqs: Option<usize>,
}

/// Global (pre-CP) `Σ Lᵢ²` that bionemo's logger charges for one batch, in its order of choice.
///
/// | `include_padding` | 1st | 2nd | 3rd | last resort |
/// |---|---|---|---|---|
/// | false (useful) | `cu_seq_lens_q` (first `num_real_seqs` segments, if given) | `attention_mask`: `Σ_rows (row_sum)² · C²` | `cu_seq_lens_q_padded` | `B · S_rank² · C²` |
/// | true (hardware) | `cu_seq_lens_q_padded` | `cu_seq_lens_q` (all segments) | — | `B · S_rank² · C²` |
///
/// ```text
/// THD sources are global lengths and are never multiplied by C²;
/// BSHD sources are per-rank (S_rank = S/C) and are multiplied by C².
/// cu = [0] gives 0 (no fallback), as upstream.
/// ```
///
/// # Errors
/// [`Error::ZeroCount`] if `cp_size == 0`; the [`CuSeqlens`] errors for negative or decreasing
/// offsets; [`Error::NumRealSeqsTooLarge`]; [`Error::RaggedMask`]/[`Error::MaskValue`];
/// [`Error::EmptyBatch`] when the batch has none of the keys.
///
/// # Example
/// ```
/// use thd::metrics::bionemo::{BatchView, attn_work_from_batch};
/// let v = BatchView { cu_seq_lens_q: Some(&[0, 5, 11]), cu_seq_lens_q_padded: Some(&[0, 8, 16]), ..Default::default() };
/// assert_eq!(attn_work_from_batch(&v, 1, false)?, 61);
/// assert_eq!(attn_work_from_batch(&v, 1, true)?, 128);
/// // #1561: the mock segment counts as useful work upstream; Option A excludes it.
/// let mock = BatchView { cu_seq_lens_q: Some(&[0, 5, 11, 15, 16]), ..Default::default() };
/// assert_eq!(attn_work_from_batch(&mock, 1, false)?, 78);
/// let fixed = BatchView { num_real_seqs: Some(3), ..mock };
/// assert_eq!(attn_work_from_batch(&fixed, 1, false)?, 77);
/// assert_eq!(attn_work_from_batch(&fixed, 1, true)?, 78);
/// # Ok::<(), thd::Error>(())
/// ```
pub fn attn_work_from_batch(
    view: &BatchView<'_>,
    cp_size: u64,
    include_padding: bool,
) -> Result<u128> {
    if cp_size == 0 {
        return Err(Error::ZeroCount { quantity: "cp_size" });
    }
    let c2 = u128::from(cp_size) * u128::from(cp_size);
    let thd = |name: &'static str, cu: &[i64], real: Option<usize>| -> Result<u128> {
        let lens = CuSeqlens::from_i64(name, cu)?.seq_lens();
        let n = real.unwrap_or(lens.len());
        if n > lens.len() {
            return Err(Error::NumRealSeqsTooLarge { num_real_seqs: n, segments: lens.len() });
        }
        Ok(AttnSums::of(lens.as_slice()[..n].iter().map(|&s| u64::from(s))).sum_squares)
    };
    let shape = || -> Result<u128> {
        let (b, s) = view.input_ids_shape.ok_or(Error::EmptyBatch {
            context: "attn_work_from_batch",
            what: "no cu_seq_lens_q, cu_seq_lens_q_padded, attention_mask or input_ids shape",
        })?;
        Ok(AttnSums::repeated(b, s).sum_squares * c2)
    };
    if include_padding {
        if let Some(cu) = view.cu_seq_lens_q_padded {
            return thd("cu_seq_lens_q_padded", cu, None);
        }
        if let Some(cu) = view.cu_seq_lens_q {
            return thd("cu_seq_lens_q", cu, None);
        }
        return shape();
    }
    if let Some(cu) = view.cu_seq_lens_q {
        return thd("cu_seq_lens_q", cu, view.num_real_seqs);
    }
    if let Some(rows) = view.attention_mask {
        return Ok(super::BatchWork::from_attention_mask(rows)?.useful.sum_squares * c2);
    }
    if let Some(cu) = view.cu_seq_lens_q_padded {
        return thd("cu_seq_lens_q_padded", cu, None);
    }
    shape()
}

/// The logger's accumulators over one logging window (all micro-batches of the logged step).
///
/// ```text
/// flops_unpadded = non_attn(V)·num_unpadded_tokens + (12·L·h · attn_unpadded) // cp_size
/// flops_padded   = non_attn(Vp)·num_tokens          + (12·L·h · attn_padded)   // cp_size
/// tflops = flops / step_time / 1e12;   mfu_pct = tflops / peak_tflops · 100
/// ```
///
/// Per rank: token counts are the rank's, `Σ` is global and divided (floor) by `cp_size`. The
/// integer `//` is upstream's; [`BatchWork::flops`](super::BatchWork::flops) is the exact global
/// alternative.
///
/// # Example
/// ```
/// use thd::metrics::{CausalConvention, ModelDims};
/// use thd::metrics::bionemo::PerfWindow;
/// // §1.8: ESM-2 8M, features 5/6/4, pad_to_multiple_of 8 (16 tokens, Σ = 78 upstream).
/// let esm2_8m = ModelDims { layers: 6, hidden: 320, heads: 20, kv_heads: 20, head_dim: 16,
///     ffn: 1280, mlp_projections: 2, vocab: 33, padded_vocab: Some(64),
///     causal: CausalConvention::None, attention_output_gate: false };
/// let w = PerfWindow { num_tokens: 16, num_unpadded_tokens: 15, attn_unpadded: 78, attn_padded: 78 };
/// assert_eq!(w.flops(&esm2_8m, 1)?, (666_299_520, 711_552_000));
/// # Ok::<(), thd::Error>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
pub struct PerfWindow {
    /// `input_ids.numel()` summed.
    pub num_tokens: u64,
    /// Real (non-pad) tokens summed.
    pub num_unpadded_tokens: u64,
    /// `attn_work_from_batch(include_padding=False)` summed.
    pub attn_unpadded: u128,
    /// `attn_work_from_batch(include_padding=True)` summed.
    pub attn_padded: u128,
}

impl PerfWindow {
    /// `(flops_unpadded, flops_padded)` for this rank.
    ///
    /// # Errors
    /// [`Error::ZeroCount`] if `cp_size == 0`; [`ModelDims::validate`]'s errors.
    ///
    /// # Example
    /// ```
    /// # use thd::metrics::{CausalConvention, ModelDims};
    /// # use thd::metrics::bionemo::PerfWindow;
    /// # let d = ModelDims { layers: 6, hidden: 320, heads: 20, kv_heads: 20, head_dim: 16,
    /// #     ffn: 1280, mlp_projections: 2, vocab: 33, padded_vocab: Some(64),
    /// #     causal: CausalConvention::None, attention_output_gate: false };
    /// let w = PerfWindow { num_tokens: 0, num_unpadded_tokens: 0, attn_unpadded: 83, attn_padded: 83 };
    /// assert_eq!(w.flops(&d, 4)?.0, 23_040 * 83 / 4); // attention term only, floor-divided
    /// # Ok::<(), thd::Error>(())
    /// ```
    pub fn flops(&self, dims: &ModelDims, cp_size: u64) -> Result<(u128, u128)> {
        if cp_size == 0 {
            return Err(Error::ZeroCount { quantity: "cp_size" });
        }
        let coeff = bionemo_attn_coeff(dims)?;
        let cp = u128::from(cp_size);
        let x = super::flops::Exact("bionemo PerfWindow::flops");
        let window = |vocab, tokens: u64, attn: u128| -> Result<u128> {
            let linear = x.mul(&[bionemo_non_attn_per_token(dims, vocab)?, u128::from(tokens)])?;
            x.add(&[linear, x.mul(&[coeff, attn])? / cp])
        };
        let unpadded = window(Vocab::Raw, self.num_unpadded_tokens, self.attn_unpadded)?;
        let padded = window(Vocab::Padded, self.num_tokens, self.attn_padded)?;
        Ok((unpadded, padded))
    }
}

/// Dense BF16 peak TFLOP/s of a GPU from its device name: bionemo's `_GPU_PEAK_TFLOPS_BF16`
/// and `_detect_peak_tflops_bf16` (the first key, in table order, that is a case-insensitive
/// substring of the name).
///
/// | key | H100 | H200 | A100 | A6000 | L40 | GH200 | B200 | GB200 | B300 | GB300 |
/// |---|---|---|---|---|---|---|---|---|---|---|
/// | TFLOP/s | 989 | 989 | 312 | 155 | 181 | 989 | 2250 | 2250 | 2500 | 2500 |
///
/// "GH200" matches "H200" first and "GB200" matches "B200" first; the values are equal.
///
/// # Example
/// ```
/// use thd::metrics::bionemo::peak_tflops_bf16;
/// assert_eq!(peak_tflops_bf16("NVIDIA H100 80GB HBM3"), Some(989.0));
/// assert_eq!(peak_tflops_bf16("NVIDIA GB200"), Some(2250.0));
/// assert_eq!(peak_tflops_bf16("Tesla T4"), None);
/// ```
pub fn peak_tflops_bf16(device_name: &str) -> Option<f64> {
    const TABLE: [(&str, f64); 10] = [
        ("h100", 989.0),
        ("h200", 989.0),
        ("a100", 312.0),
        ("a6000", 155.0),
        ("l40", 181.0),
        ("gh200", 989.0),
        ("b200", 2250.0),
        ("gb200", 2250.0),
        ("b300", 2500.0),
        ("gb300", 2500.0),
    ];
    let name = device_name.to_lowercase();
    TABLE.iter().find(|(k, _)| name.contains(k)).map(|&(_, v)| v)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn attn_work_rejects_sentinels_and_bad_counts_by_value() {
        let v = BatchView { cu_seq_lens_q: Some(&[0, 3, 8, -1]), ..Default::default() };
        assert_eq!(
            attn_work_from_batch(&v, 1, false).unwrap_err().to_string(),
            "cu_seq_lens_q must be non-decreasing: cu_seq_lens_q[3]=-1 < cu_seq_lens_q[2]=8"
        );
        let v = BatchView {
            cu_seq_lens_q: Some(&[0, 3]),
            num_real_seqs: Some(2),
            ..Default::default()
        };
        assert!(matches!(
            attn_work_from_batch(&v, 1, false),
            Err(Error::NumRealSeqsTooLarge { .. })
        ));
        assert!(matches!(attn_work_from_batch(&v, 0, false), Err(Error::ZeroCount { .. })));
        assert!(matches!(
            attn_work_from_batch(&BatchView::default(), 1, true),
            Err(Error::EmptyBatch { .. })
        ));
    }

    #[test]
    fn attn_work_empty_cu_is_zero_without_fallback() {
        let v = BatchView {
            cu_seq_lens_q: Some(&[0]),
            input_ids_shape: Some((1, 8)),
            ..Default::default()
        };
        assert_eq!(attn_work_from_batch(&v, 1, false).unwrap(), 0);
    }
}
