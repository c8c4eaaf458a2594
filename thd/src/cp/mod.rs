//! Context parallelism (CP): zigzag sharding of a packed batch, its inverse, the attention
//! each rank computes, and the CP-local loss and logger statistics.
//!
//! The order of operations is the contract:
//! 1. pad every sequence to a multiple of `2·cp` ([`crate::collate::pad_for_cp`]);
//! 2. roll the labels on the full sequences ([`shift_labels`]), *then* split
//!    ([`CpLayout::split`]); the other order gives different labels ([`shift_after_split`]);
//! 3. each rank attends with its local queries to the gathered keys and values at global
//!    positions ([`cp_attention`]);
//! 4. each rank returns (Σ NLL, count) ([`cp_local_loss`]); the loss is Σ NLL / Σ count, and
//!    logger counts come from the global layout ([`logger_stats`]).
//!
//! # Example
//! ```
//! use thd::collate::{CpPadding, Example, FlattenOptions, flatten, pad_for_cp};
//! use thd::cp::shard_batch;
//! let batch = flatten(&[Example::new(vec![1, 2, 3]), Example::new(vec![5, 6])], &FlattenOptions::default())?;
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
pub use labels::{shift_after_split, shift_labels, shifted_batch};
pub use loss::{CpLoss, cp_local_loss, token_nll};
pub use stats::{LoggerStats, logger_stats, rank_local_stats};
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
/// See the [module documentation](self).
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
