//! Context parallelism (CP): zigzag sharding of a packed batch, its inverse, the attention
//! each rank computes, and the CP-local loss and logger statistics.
//!
//! The order of operations is the contract:
//! 1. pad every sequence to a multiple of `2·cp` ([`crate::collate::pad_for_cp`]);
//! 2. roll the labels on the full sequences ([`shift_labels`]), *then* split
//!    ([`CpLayout::split`]); the other order rolls across a rank's two non-contiguous chunks
//!    and gives different labels (AReaL #1223; `properties::zoo::shift_after_split` keeps it);
//! 3. each rank attends with its local queries to the gathered keys and values at global
//!    positions ([`cp_attention`]);
//! 4. each rank returns (Σ NLL, count) ([`cp_local_loss`]); the loss is Σ NLL / Σ count, and
//!    logger counts come from the global layout ([`logger_stats`]).
//!
//! # Example
//! ```
//! use thd::collate::{CpPadding, Document, FlattenOptions, flatten, pad_for_cp};
//! use thd::cp::shard_batch;
//! let batch = flatten(&[Document::new(vec![1, 2, 3]), Document::new(vec![5, 6])], &FlattenOptions::default())?;
//! let padded = pad_for_cp(&batch, &CpPadding::for_cp(2, 0))?;
//! let (layout, shards) = shard_batch(&padded, 2)?;
//! assert_eq!(shards[0].input_ids, vec![1, 0, 5, 0]);
//! assert_eq!(shards[1].input_ids, vec![2, 3, 6, 0]);
//! assert_eq!(shards[0].labels, vec![2, -100, 6, -100]); // rolled before the split
//! assert_eq!(layout.reassemble(&[shards[0].input_ids.clone(), shards[1].input_ids.clone()], 1)?, padded.input_ids());
//! # Ok::<(), thd::Error>(())
//! ```

mod attention;
mod labels;
mod loss;
mod stats;
mod zigzag;

pub use attention::{cp_attention, padded_varlen_attention};
pub use labels::{shift_labels, shifted_batch};
pub use loss::{CpLoss, cp_local_loss, token_nll};
pub use stats::{LoggerStats, logger_stats};
pub use zigzag::CpLayout;

use crate::{CuSeqlens, PackedBatch, Result};

/// What one CP rank receives: its share of every per-token tensor, labels already rolled.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CpShard {
    /// The rank.
    pub rank: usize,
    /// Local token ids, `[T/cp]`.
    pub input_ids: Vec<i64>,
    /// Local labels, shifted on the full sequence before the split
    /// ([`crate::LabelConvention::Shifted`]: `logits[t]` predicts `labels[t]`).
    pub labels: Vec<i64>,
    /// Local position ids: each token's position in its own sequence (for RoPE).
    pub position_ids: Vec<i64>,
    /// Local offsets: the storage offsets divided by `cp`.
    pub cu_seqlens: CuSeqlens,
}

/// Shards a packed batch over `cp` ranks: the layout and one [`CpShard`] per rank.
///
/// # Errors
/// The errors of [`CpLayout::from_batch`]: a zero `cp`, tokens outside every segment, or a
/// storage length not divisible by `2·cp` (named, never truncated).
///
/// # Example
/// ```
/// use thd::cp::shard_batch;
/// use thd::{PackedBatch, PackedBatchParts};
/// let batch = PackedBatch::new(PackedBatchParts {
///     input_ids: vec![1, 2, 3, 4],
///     labels: vec![-100, 2, 3, 4],
///     cu_seqlens: vec![0, 4],
///     ..Default::default()
/// })?;
/// let (_, shards) = shard_batch(&batch, 2)?;
/// assert_eq!((shards[0].input_ids.clone(), shards[0].labels.clone()), (vec![1, 4], vec![2, -100]));
/// assert_eq!(shards[1].position_ids, vec![1, 2]);
/// assert!(shard_batch(&batch, 4).is_err()); // 4 tokens do not split into 8 chunks
/// # Ok::<(), thd::Error>(())
/// ```
pub fn shard_batch(batch: &PackedBatch, cp: usize) -> Result<(CpLayout, Vec<CpShard>)> {
    let layout = CpLayout::from_batch(batch, cp)?;
    let labels = shift_labels(batch);
    let shards = (0..cp)
        .map(|rank| {
            Ok(CpShard {
                rank,
                input_ids: layout.split(batch.input_ids(), rank)?,
                labels: layout.split(&labels, rank)?,
                position_ids: layout.split(batch.position_ids(), rank)?,
                cu_seqlens: layout.local_cu_seqlens(),
            })
        })
        .collect::<Result<Vec<_>>>()?;
    Ok((layout, shards))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::collate::{CpPadding, Document, FlattenOptions, flatten, pad_for_cp};
    use crate::{LabelConvention, packed_cross_entropy};

    fn lcg(seed: u64, n: usize) -> Vec<f64> {
        let mut s = seed;
        (0..n)
            .map(|_| {
                s = s.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
                ((s >> 11) as f64 / (1u64 << 53) as f64) * 6.0 - 3.0
            })
            .collect()
    }

    /// Collate, pad for CP, shard, compute CP-local sums: the loss and the logger statistics are
    /// those of the unsharded batch for every cp, and the mean of rank means (the classic bug,
    /// computed here by hand) is not.
    #[test]
    fn cp_local_loss_equals_the_global_loss_for_every_cp() {
        let vocab = 7;
        let examples: Vec<Document> = [9usize, 1, 4, 13, 2]
            .iter()
            .enumerate()
            .map(|(i, &n)| {
                let ids: Vec<i64> = (0..n as i64).map(|t| (t * 3 + i as i64) % vocab).collect();
                let mut labels = ids.clone();
                labels[..n / 3].fill(-100); // a prompt
                Document::with_labels(ids, labels)
            })
            .collect();
        let batch = flatten(&examples, &FlattenOptions::default()).unwrap();
        let logits = lcg(11, batch.num_tokens() * vocab as usize);
        let global = packed_cross_entropy(
            &logits,
            vocab as usize,
            batch.labels(),
            LabelConvention::Unshifted,
        )
        .unwrap();
        let mut mean_of_means_differs = false;
        let mut first_stats = None;
        for cp in [1usize, 2, 4, 8] {
            let padded = pad_for_cp(&batch, &CpPadding::for_cp(cp, 0)).unwrap();
            // The model sees the padded stream: each real token keeps its logits row.
            let mut plogits = vec![0.0; padded.num_tokens() * vocab as usize];
            for i in 0..batch.num_segments() {
                let (src, dst) = (batch.real_tokens(i), padded.real_tokens(i));
                let v = vocab as usize;
                plogits[dst.start * v..dst.end * v]
                    .copy_from_slice(&logits[src.start * v..src.end * v]);
            }
            let (layout, shards) = shard_batch(&padded, cp).unwrap();
            let local_logits = layout.split_all(&plogits, vocab as usize).unwrap();
            let labels: Vec<Vec<i64>> = shards.iter().map(|s| s.labels.clone()).collect();
            let loss = cp_local_loss(&local_logits, vocab as usize, &labels).unwrap();
            assert_eq!(loss.global().count, global.count, "cp={cp}");
            let rel = (loss.global().nll - global.nll).abs() / global.nll;
            assert!(rel <= 1e-12, "cp={cp}: relative error {rel}");
            let mean_of_means =
                loss.per_rank.iter().map(|s| s.mean()).sum::<f64>() / loss.per_rank.len() as f64;
            mean_of_means_differs |= (mean_of_means - global.mean()).abs() > 1e-9;

            let nll: Vec<Vec<f64>> = local_logits
                .iter()
                .zip(&labels)
                .map(|(x, y)| token_nll(x, vocab as usize, y).unwrap())
                .collect();
            let stats = logger_stats(&layout, &nll, &labels).unwrap();
            assert_eq!(stats.n_tokens, 29);
            assert_eq!(stats.n_valid_tokens, global.count);
            assert!((stats.loss - global.mean()).abs() <= 1e-12 * global.mean());
            let first = *first_stats.get_or_insert(stats);
            assert_eq!((stats.n_seqs, stats.prompt_tokens), (first.n_seqs, first.prompt_tokens));
            let ppl = |s: &LoggerStats| s.ppl_avg.unwrap();
            assert!((ppl(&stats) - ppl(&first)).abs() <= 1e-12 * ppl(&first), "cp={cp}");
        }
        assert!(mean_of_means_differs, "the planted bug must be visible on this batch");
    }
}
