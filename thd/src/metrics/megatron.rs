//! Megatron-Bridge `flop_utils.py` (HEAD = #4511 + #4750): the per-micro-batch sequence-length
//! accumulators, their DP resolution, and `num_floating_point_operations` for dense GPT — with
//! two fixes: offsets are validated instead of squared blindly, and CP > 1 counts the global
//! (pre-CP) lengths consistently instead of falling back to the dense `S²`.

use serde::{Deserialize, Serialize};

use super::{AttnSums, ModelDims, megatron_flops};
use crate::{CuSeqlens, Error, Result, SeqLens};

/// `_real_subseq_lengths`: the real sub-sequence lengths of a packed micro-batch.
///
/// ```text
/// cu = cu_seqlens_unpadded (with its argmin) if given, else cu_seqlens (with its argmin)
/// neither given            → None (BSHD)
/// argmin given             → cu = cu[..argmin]   (legacy: right-padded with -1, argmin = first -1)
/// len(cu) < 2              → Some([])  (the caller falls back to BSHD)
/// otherwise                → Some(diff(cu))
/// ```
///
/// Fixed: upstream squares whatever `diff` gives, so a `-1` sentinel without its argmin adds
/// `(-9)²` of garbage; here offsets must start at 0 and never decrease.
///
/// # Errors
/// [`Error::ArgminOutOfRange`]; the [`CuSeqlens`] errors naming the index and value.
///
/// # Example
/// ```
/// use thd::metrics::megatron::real_subseq_lengths;
/// let padded = [0, 1024, 4096, 8192, 8192, 8192, 8192];
/// let lens = real_subseq_lengths(Some(&padded), Some(4), None, None)?.unwrap();
/// assert_eq!(lens.as_slice(), &[1024, 3072, 4096]);
/// let err = real_subseq_lengths(Some(&[0, 3, 8, -1, -1]), None, None, None).unwrap_err();
/// assert_eq!(err.to_string(), "cu_seqlens must be non-decreasing: cu_seqlens[3]=-1 < cu_seqlens[2]=8");
/// # Ok::<(), thd::Error>(())
/// ```
pub fn real_subseq_lengths(
    cu_seqlens: Option<&[i64]>,
    cu_seqlens_argmin: Option<usize>,
    cu_seqlens_unpadded: Option<&[i64]>,
    cu_seqlens_unpadded_argmin: Option<usize>,
) -> Result<Option<SeqLens>> {
    let (name, cu, argmin) = match (cu_seqlens_unpadded, cu_seqlens) {
        (Some(u), _) => ("cu_seqlens_unpadded", u, cu_seqlens_unpadded_argmin),
        (None, Some(c)) => ("cu_seqlens", c, cu_seqlens_argmin),
        (None, None) => return Ok(None),
    };
    let cu = match argmin {
        Some(a) if a > cu.len() => {
            return Err(Error::ArgminOutOfRange { name, argmin: a, len: cu.len() });
        }
        Some(a) => &cu[..a],
        None => cu,
    };
    if cu.len() < 2 {
        return Ok(Some(SeqLens::default()));
    }
    Ok(Some(CuSeqlens::from_i64(name, cu)?.seq_lens()))
}

/// Optional cross-attention metadata of a micro-batch (key/value side).
///
/// # Example
/// ```
/// use thd::metrics::megatron::CrossAttention;
/// let x = CrossAttention { cu_seqlens: &[0, 4, 12], cu_seqlens_unpadded: Some(&[0, 2, 9]) };
/// assert_eq!(x.cu_seqlens.len(), 3);
/// ```
#[derive(Debug, Clone, Copy)]
pub struct CrossAttention<'a> {
    /// Key/value offsets (padded storage).
    pub cu_seqlens: &'a [i64],
    /// Key/value real offsets, preferred for the `q·k` product.
    pub cu_seqlens_unpadded: Option<&'a [i64]>,
}

/// What one micro-batch contributes (`accumulate_flops_metadata`'s arguments).
///
/// # Example
/// ```
/// use thd::metrics::megatron::MicroBatch;
/// let mb = MicroBatch { tokens: Some((1, 4096)), cu_seqlens: Some(&[0, 256, 512, 4096]), ..Default::default() };
/// assert_eq!(mb.cp_size, 1);
/// ```
#[derive(Debug, Clone, Copy)]
pub struct MicroBatch<'a> {
    /// `tokens.shape[:2]` = `(mbs, seq_len)` on this rank (`S/C` under CP); `None` is a no-op.
    pub tokens: Option<(u64, u64)>,
    /// Virtual pipeline stage; only `None` and `Some(0)` accumulate (#4750).
    pub vp_stage: Option<u32>,
    /// `cfg.model.seq_length` for the dense fallback (#4446); `None` or 0 uses the tensor's.
    pub config_seq_len: Option<u64>,
    /// Context-parallel size. The offsets below are global (pre-CP) in every case.
    pub cp_size: u64,
    /// Packed offsets (padded, or the only ones).
    pub cu_seqlens: Option<&'a [i64]>,
    /// Index of the first `-1` sentinel in `cu_seqlens` (legacy format).
    pub cu_seqlens_argmin: Option<usize>,
    /// Real offsets, preferred when present.
    pub cu_seqlens_unpadded: Option<&'a [i64]>,
    /// Index of the first `-1` sentinel in `cu_seqlens_unpadded`.
    pub cu_seqlens_unpadded_argmin: Option<usize>,
    /// Cross-attention key/value metadata.
    pub cross: Option<CrossAttention<'a>>,
    /// Legacy vision patch count.
    pub num_vision_patches: Option<u64>,
    /// Exact vision stats `(Σp, Σp², Σmerged)`.
    pub vision_patch_stats: Option<(u64, u128, u64)>,
}

impl Default for MicroBatch<'_> {
    fn default() -> Self {
        Self {
            tokens: None,
            vp_stage: None,
            config_seq_len: None,
            cp_size: 1,
            cu_seqlens: None,
            cu_seqlens_argmin: None,
            cu_seqlens_unpadded: None,
            cu_seqlens_unpadded_argmin: None,
            cross: None,
            num_vision_patches: None,
            vision_patch_stats: None,
        }
    }
}

/// Vision patches of Qwen-VL style `grid_thw` rows (images and videos): `Σ t·h·w`.
///
/// # Example
/// ```
/// use thd::metrics::megatron::vision_patches_from_grid_thw;
/// assert_eq!(vision_patches_from_grid_thw(&[[1, 4, 6], [2, 2, 2]]), 32);
/// ```
pub fn vision_patches_from_grid_thw(grid_thw: &[[u64; 3]]) -> u64 {
    grid_thw.iter().map(|[t, h, w]| t * h * w).sum()
}

/// The per-step accumulators on Megatron-Bridge's `GlobalState` (reset before every step).
///
/// ```text
/// skip if vp_stage ∉ {None, 0} or tokens is None
/// sub = real_subseq_lengths(...)
/// THD  (sub non-empty):  seqlen_sum += mbs·seq_len·cp;   sq += Σ subᵢ²;   real += Σ subᵢ;  reduce = true
/// BSHD (otherwise):      S = config_seq_len or seq_len·cp
///                        seqlen_sum += mbs·S;            sq += mbs·S²;    real += mbs·S
/// cross:  #q = #kv, else error;  cross_sum += Σ kv_paddedᵢ;  cross_product += Σ qᵢ·kvᵢ (real)
/// vision: patches += n;  (Σp, Σp², Σmerged) += stats;  reduce = true when stats are given
/// ```
///
/// `real_seqlen_sum` is not upstream's; it lets [`num_floating_point_operations`] apply the
/// exact causal triangle. Fixed for CP > 1: upstream passes no offsets then (dense fallback, which
/// over-counts packed attention) and counts the linear term per CP rank; here the offsets are
/// the global ones and the linear term is `mbs·seq_len·cp`, the global token count. At
/// `cp_size = 1` both agree with upstream.
///
/// # Example
/// ```
/// use thd::metrics::megatron::{FlopsAccumulator, MicroBatch};
/// let mut acc = FlopsAccumulator::default();
/// acc.accumulate(&MicroBatch { tokens: Some((1, 128)), cu_seqlens: Some(&[0, 32, 128]), ..Default::default() })?;
/// acc.accumulate(&MicroBatch { tokens: Some((1, 128)), cu_seqlens: Some(&[0, 64, 128]), ..Default::default() })?;
/// assert_eq!((acc.seqlen_sum, acc.seqlen_sq_sum), (256, (32 * 32 + 96 * 96) + (64 * 64 + 64 * 64)));
/// # Ok::<(), thd::Error>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
pub struct FlopsAccumulator {
    /// `_flops_seqlen_sum`: tokens (padded), the linear term's driver.
    pub seqlen_sum: u64,
    /// `_flops_seqlen_sq_sum`: `Σ sᵢ²`, the attention term's driver.
    pub seqlen_sq_sum: u128,
    /// `Σ sᵢ` over the same sequences as `seqlen_sq_sum` (for the exact triangle).
    pub real_seqlen_sum: u64,
    /// `_flops_vision_patches`.
    pub vision_patches: u64,
    /// `_flops_vision_patch_sum`.
    pub vision_patch_sum: u64,
    /// `_flops_vision_patch_sq_sum`.
    pub vision_patch_sq_sum: u128,
    /// `_flops_vision_merged_token_sum`.
    pub vision_merged_token_sum: u64,
    /// `_flops_cross_seqlen_sum`.
    pub cross_seqlen_sum: u64,
    /// `_flops_cross_seqlen_product_sum`.
    pub cross_seqlen_product_sum: u128,
    /// `_flops_requires_global_reduce`: set by THD batches and exact vision stats.
    pub requires_global_reduce: bool,
}

impl FlopsAccumulator {
    /// Adds one micro-batch.
    ///
    /// # Errors
    /// [`Error::ZeroCount`] for `cp_size == 0`; [`real_subseq_lengths`]'s errors;
    /// [`Error::CrossAttentionSeqCount`] when query and key/value counts differ. On error nothing
    /// is added.
    ///
    /// # Example
    /// ```
    /// use thd::metrics::megatron::{FlopsAccumulator, MicroBatch};
    /// let mut acc = FlopsAccumulator::default();
    /// // Dense fallback with a CP-sliced tensor: config_seq_len wins (#4446).
    /// acc.accumulate(&MicroBatch { tokens: Some((1, 2048)), config_seq_len: Some(4096), ..Default::default() })?;
    /// assert_eq!((acc.seqlen_sum, acc.seqlen_sq_sum), (4096, 4096 * 4096));
    /// assert!(!acc.requires_global_reduce);
    /// # Ok::<(), thd::Error>(())
    /// ```
    pub fn accumulate(&mut self, mb: &MicroBatch<'_>) -> Result<()> {
        if mb.cp_size == 0 {
            return Err(Error::ZeroCount { quantity: "cp_size" });
        }
        if !matches!(mb.vp_stage, None | Some(0)) {
            return Ok(());
        }
        let Some((mbs, seq_len)) = mb.tokens else { return Ok(()) };
        let sub = real_subseq_lengths(
            mb.cu_seqlens,
            mb.cu_seqlens_argmin,
            mb.cu_seqlens_unpadded,
            mb.cu_seqlens_unpadded_argmin,
        )?;
        let global_len = seq_len * mb.cp_size;
        let mut next = *self;
        let query: Vec<u64> = match sub.filter(|s| !s.is_empty()) {
            Some(sub) => {
                let w = AttnSums::of(sub.as_slice().iter().map(|&s| u64::from(s)));
                next.seqlen_sum += mbs * global_len;
                next.seqlen_sq_sum += w.sum_squares;
                next.real_seqlen_sum += w.tokens;
                next.requires_global_reduce = true;
                sub.as_slice().iter().map(|&s| u64::from(s)).collect()
            }
            None => {
                let dense = mb.config_seq_len.filter(|&s| s > 0).unwrap_or(global_len);
                let w = AttnSums::repeated(mbs, dense);
                next.seqlen_sum += w.tokens;
                next.seqlen_sq_sum += w.sum_squares;
                next.real_seqlen_sum += w.tokens;
                vec![dense; mbs as usize]
            }
        };
        if let Some(x) = mb.cross {
            let padded = CuSeqlens::from_i64("cross_cu_seqlens", x.cu_seqlens)?.seq_lens();
            let real = match x.cu_seqlens_unpadded {
                Some(u) => CuSeqlens::from_i64("cross_cu_seqlens_unpadded", u)?.seq_lens(),
                None => padded.clone(),
            };
            if query.len() != real.len() || padded.len() != real.len() {
                return Err(Error::CrossAttentionSeqCount { query: query.len(), key: real.len() });
            }
            next.cross_seqlen_sum += padded.total();
            next.cross_seqlen_product_sum += query
                .iter()
                .zip(real.as_slice())
                .map(|(&q, &k)| u128::from(q) * u128::from(k))
                .sum::<u128>();
        }
        if let Some(n) = mb.num_vision_patches {
            next.vision_patches += n;
        }
        if let Some((p, p2, merged)) = mb.vision_patch_stats {
            next.vision_patch_sum += p;
            next.vision_patch_sq_sum += p2;
            next.vision_merged_token_sum += merged;
            next.requires_global_reduce = true;
        }
        *self = next;
        Ok(())
    }

    fn scaled(&self, k: u64) -> Self {
        let k128 = u128::from(k);
        Self {
            seqlen_sum: self.seqlen_sum * k,
            seqlen_sq_sum: self.seqlen_sq_sum * k128,
            real_seqlen_sum: self.real_seqlen_sum * k,
            vision_patches: self.vision_patches * k,
            vision_patch_sum: self.vision_patch_sum * k,
            vision_patch_sq_sum: self.vision_patch_sq_sum * k128,
            vision_merged_token_sum: self.vision_merged_token_sum * k,
            cross_seqlen_sum: self.cross_seqlen_sum * k,
            cross_seqlen_product_sum: self.cross_seqlen_product_sum * k128,
            requires_global_reduce: self.requires_global_reduce,
        }
    }

    fn plus(&self, o: &Self) -> Self {
        Self {
            seqlen_sum: self.seqlen_sum + o.seqlen_sum,
            seqlen_sq_sum: self.seqlen_sq_sum + o.seqlen_sq_sum,
            real_seqlen_sum: self.real_seqlen_sum + o.real_seqlen_sum,
            vision_patches: self.vision_patches + o.vision_patches,
            vision_patch_sum: self.vision_patch_sum + o.vision_patch_sum,
            vision_patch_sq_sum: self.vision_patch_sq_sum + o.vision_patch_sq_sum,
            vision_merged_token_sum: self.vision_merged_token_sum + o.vision_merged_token_sum,
            cross_seqlen_sum: self.cross_seqlen_sum + o.cross_seqlen_sum,
            cross_seqlen_product_sum: self.cross_seqlen_product_sum + o.cross_seqlen_product_sum,
            requires_global_reduce: self.requires_global_reduce || o.requires_global_reduce,
        }
    }
}

/// Global sequence statistics of one step, as `num_floating_point_operations` takes them.
///
/// # Example
/// ```
/// use thd::metrics::megatron::SeqlenStats;
/// let s = SeqlenStats { seqlen_sum: 2048, seqlen_squared_sum: 256 * 256 + 1792 * 1792, real_seqlen_sum: 2048 };
/// assert_eq!(s.attn().sum_squares, 3_276_800);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct SeqlenStats {
    /// Tokens (linear term).
    pub seqlen_sum: u64,
    /// `Σ sᵢ²` (attention term).
    pub seqlen_squared_sum: u128,
    /// `Σ sᵢ` over the same sequences (exact triangle only).
    pub real_seqlen_sum: u64,
}

impl SeqlenStats {
    /// The attention work these stats describe (`triangle = (Σs² + Σs)/2`).
    ///
    /// # Example
    /// ```
    /// # use thd::metrics::megatron::SeqlenStats;
    /// let s = SeqlenStats { seqlen_sum: 8, seqlen_squared_sum: 34, real_seqlen_sum: 8 };
    /// assert_eq!(s.attn().triangle, 21); // 3·4/2 + 5·6/2
    /// ```
    pub fn attn(&self) -> AttnSums {
        AttnSums {
            seqs: 0,
            tokens: self.real_seqlen_sum,
            sum_squares: self.seqlen_squared_sum,
            triangle: (self.seqlen_squared_sum + u128::from(self.real_seqlen_sum)) / 2,
        }
    }
}

/// `resolve_global_flops_runtime_stats`: the step's global statistics.
///
/// ```text
/// reduce = local.requires_global_reduce and DP > 1 and dp_ranks is Some
/// global = reduce ? Σ_{r ∈ dp_ranks} acc_r (SUM all-reduce) : local × DP (extrapolation)
/// seqlen_sum = 0 ⇒ None (the caller falls back to cfg.seq_length)
/// ```
///
/// `dp_ranks` stands for the all-reduce: every pure-DP rank's accumulator, this one included.
/// `vp_size` is not an argument: HEAD does not rescale (#4511).
///
/// # Errors
/// [`Error::ZeroCount`] if `data_parallel_size == 0`.
///
/// # Example
/// ```
/// use thd::metrics::megatron::{FlopsAccumulator, resolve_global_stats};
/// let local = FlopsAccumulator { seqlen_sum: 1000, seqlen_sq_sum: 250_000, real_seqlen_sum: 1000, ..Default::default() };
/// let (stats, acc) = resolve_global_stats(&local, 4, None)?;
/// assert_eq!(stats.map(|s| (s.seqlen_sum, s.seqlen_squared_sum)), Some((4000, 1_000_000)));
/// assert_eq!(acc.seqlen_sum, 4000);
/// # Ok::<(), thd::Error>(())
/// ```
pub fn resolve_global_stats(
    local: &FlopsAccumulator,
    data_parallel_size: u64,
    dp_ranks: Option<&[FlopsAccumulator]>,
) -> Result<(Option<SeqlenStats>, FlopsAccumulator)> {
    if data_parallel_size == 0 {
        return Err(Error::ZeroCount { quantity: "data_parallel_size" });
    }
    let global = match dp_ranks {
        Some(ranks) if local.requires_global_reduce && data_parallel_size > 1 => {
            ranks.iter().fold(FlopsAccumulator::default(), |a, r| a.plus(r))
        }
        _ => local.scaled(data_parallel_size),
    };
    let stats = (global.seqlen_sum > 0).then_some(SeqlenStats {
        seqlen_sum: global.seqlen_sum,
        seqlen_squared_sum: global.seqlen_sq_sum,
        real_seqlen_sum: global.real_seqlen_sum,
    });
    Ok((stats, global))
}

/// `num_floating_point_operations` for a standard dense GPT (no MoE/MLA/SWA/MTP), global.
///
/// ```text
/// stats given:  T = seqlen_sum,              W from (Σs², Σs)
/// stats None:   T = batch_size·seq_length,   W = batch_size sequences of seq_length
/// FLOPs = megatron_flops(dims, T, W)   (6·T·[…] + 6·L·q·pairs_x2; upstream: Half)
/// ```
///
/// `batch_size = DP·mbs·num_microbatches`. ViT FLOPs (`num_vision_patches`) are not modelled.
///
/// # Errors
/// [`ModelDims::validate`]'s errors.
///
/// # Example
/// ```
/// use thd::metrics::{CausalConvention, ModelDims};
/// use thd::metrics::megatron::{SeqlenStats, num_floating_point_operations};
/// let d = ModelDims { layers: 2, hidden: 128, heads: 8, kv_heads: 4, head_dim: 16, ffn: 256,
///     mlp_projections: 2, vocab: 1024, padded_vocab: None, causal: CausalConvention::Half,
///     attention_output_gate: false };
/// assert_eq!(num_floating_point_operations(&d, 4, None, 1024)?, 15_300_820_992);
/// let s = SeqlenStats { seqlen_sum: 2048, seqlen_squared_sum: 256 * 256 + 1792 * 1792, real_seqlen_sum: 2048 };
/// assert_eq!(num_floating_point_operations(&d, 2, Some(&s), 1024)?, 9_462_349_824);
/// # Ok::<(), thd::Error>(())
/// ```
pub fn num_floating_point_operations(
    dims: &ModelDims,
    batch_size: u64,
    stats: Option<&SeqlenStats>,
    seq_length: u64,
) -> Result<u128> {
    match stats {
        Some(s) => megatron_flops(dims, s.seqlen_sum, &s.attn()),
        None => {
            let w = AttnSums::repeated(batch_size, seq_length);
            megatron_flops(dims, w.tokens, &w)
        }
    }
}

/// Megatron-Bridge's logged throughput (`training_log` since #3839): FLOPs done in the
/// interval, per GPU, in TFLOP/s.
///
/// ```text
/// tflops_per_gpu = (flops_so_far − flops_at_last_log) / interval_s / world_size / 1e12
/// ```
///
/// # Errors
/// [`Error::NotPositive`] for a non-positive or non-finite interval; [`Error::ZeroCount`] for
/// `world_size == 0`.
///
/// # Example
/// ```
/// use thd::metrics::megatron::interval_tflops_per_gpu;
/// assert_eq!(interval_tflops_per_gpu(8_000_000_000_000, 0, 0.5, 8)?, 2.0);
/// # Ok::<(), thd::Error>(())
/// ```
pub fn interval_tflops_per_gpu(
    flops_so_far: u128,
    flops_at_last_log: u128,
    interval_s: f64,
    world_size: u64,
) -> Result<f64> {
    let per_s = super::flops_per_second_per_gpu(
        flops_so_far.saturating_sub(flops_at_last_log),
        interval_s,
        world_size,
    )?;
    Ok(per_s / 1e12)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accumulate_errors_leave_the_state_unchanged() {
        let mut acc = FlopsAccumulator::default();
        let bad = MicroBatch {
            tokens: Some((1, 8)),
            cu_seqlens: Some(&[0, 4, 8]),
            cross: Some(CrossAttention { cu_seqlens: &[0, 8], cu_seqlens_unpadded: None }),
            ..Default::default()
        };
        assert_eq!(
            acc.accumulate(&bad).unwrap_err(),
            Error::CrossAttentionSeqCount { query: 2, key: 1 }
        );
        assert_eq!(acc, FlopsAccumulator::default());
        let argmin = MicroBatch {
            tokens: Some((1, 8)),
            cu_seqlens: Some(&[0, 8]),
            cu_seqlens_argmin: Some(3),
            ..Default::default()
        };
        assert_eq!(
            acc.accumulate(&argmin).unwrap_err(),
            Error::ArgminOutOfRange { name: "cu_seqlens", argmin: 3, len: 2 }
        );
    }

    #[test]
    fn cp_gt_1_counts_global_tokens_and_global_lengths() {
        // One pack of 4096 tokens (docs 1024 + 3072) split over cp = 2: each rank holds 2048.
        let mut cp2 = FlopsAccumulator::default();
        cp2.accumulate(&MicroBatch {
            tokens: Some((1, 2048)),
            cp_size: 2,
            cu_seqlens: Some(&[0, 1024, 4096]),
            ..Default::default()
        })
        .unwrap();
        let mut cp1 = FlopsAccumulator::default();
        cp1.accumulate(&MicroBatch {
            tokens: Some((1, 4096)),
            cu_seqlens: Some(&[0, 1024, 4096]),
            ..Default::default()
        })
        .unwrap();
        assert_eq!(cp2, cp1);
    }

    #[test]
    fn dense_fallback_without_config_len_uses_the_global_tensor_length() {
        let mut acc = FlopsAccumulator::default();
        acc.accumulate(&MicroBatch { tokens: Some((2, 512)), cp_size: 2, ..Default::default() })
            .unwrap();
        assert_eq!((acc.seqlen_sum, acc.seqlen_sq_sum), (2048, 2 * 1024 * 1024));
    }
}
