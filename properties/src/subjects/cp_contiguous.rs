//! CP-SHARD for contiguous splits: a sharder that gives rank `r` the `r`-th of `cp` equal
//! contiguous pieces of the whole pack (DeepSpeed Ulysses, slime's `--allgather-cp`, Nanotron,
//! llama3-style ring attention), judged by [`check_cp_shard_in`] with
//! [`ShardLayout::Contiguous`]. `thd` shards only the zigzag, so the reference subject,
//! [`ContiguousSplit`], is the split written out plainly.

use thd::PackedBatch;
use thd::cp::shift_labels;

use super::cp::run_cp_shard_in;
use super::{Shard, Sharder};
use crate::Checked;
use crate::checks::ShardLayout;
use crate::strategies::ShardCase;

/// The contiguous split, plainly: the labels rolled on the full sequences, then the storage
/// stream (`T` tokens, slots back to back) cut into `cp` pieces of `T / cp`; rank `r` gets
/// piece `r` of the token ids, rolled labels and position ids. A pack that is not a multiple of
/// `cp` is refused.
#[derive(Debug, Clone, Copy, Default)]
pub struct ContiguousSplit;

impl ContiguousSplit {
    /// The storage range rank `rank` holds, or why the pack does not split.
    fn piece(
        batch: &PackedBatch,
        cp: usize,
        rank: usize,
    ) -> Result<std::ops::Range<usize>, String> {
        let total = batch.num_tokens();
        if cp == 0 || !total.is_multiple_of(cp) {
            return Err(format!("the pack of {total} tokens is not divisible by cp = {cp}"));
        }
        let n = total / cp;
        Ok(rank * n..(rank + 1) * n)
    }
}

/// Every rank's [`Shard`] when rank `r` holds the storage tokens `range(r)`.
pub(crate) fn contiguous_shards(
    batch: &PackedBatch,
    cp: usize,
    range: impl Fn(usize) -> Result<std::ops::Range<usize>, String>,
) -> Result<Vec<Shard>, String> {
    let labels = shift_labels(batch);
    (0..cp)
        .map(|r| {
            let piece = range(r)?;
            Ok(Shard {
                input_ids: batch.input_ids()[piece.clone()].to_vec(),
                labels: labels[piece.clone()].to_vec(),
                position_ids: batch.position_ids()[piece].to_vec(),
            })
        })
        .collect()
}

impl Sharder for ContiguousSplit {
    fn name(&self) -> &str {
        "properties::ContiguousSplit"
    }

    fn shard(&self, batch: &PackedBatch, cp: usize) -> Result<Vec<Shard>, String> {
        contiguous_shards(batch, cp, |r| Self::piece(batch, cp, r))
    }

    fn reassemble(
        &self,
        batch: &PackedBatch,
        cp: usize,
        shards: &[Vec<i64>],
    ) -> Result<Vec<i64>, String> {
        let mut out = vec![0; batch.num_tokens()];
        for (r, shard) in shards.iter().enumerate() {
            let piece = Self::piece(batch, cp, r)?;
            if shard.len() != piece.len() {
                return Err(format!("rank {r} holds {} tokens, not {}", shard.len(), piece.len()));
            }
            out[piece].copy_from_slice(shard);
        }
        Ok(out)
    }
}

/// CP-SHARD, contiguous: shard the case's batch with `subject`, which claims the contiguous
/// layout of the whole pack; every real token is held by exactly one rank (no overlap, no gap),
/// rank `r` holds piece `r` of `cp` equal pieces, with the label of the next token of its own
/// sequence and its own position; reassembly is the identity; a pack is refused only if it is
/// not a multiple of `cp`. The batch is the one of [`super::run_cp_shard`] (sequences padded
/// to `2·cp` in 7 cases of 8, which is also a multiple of `cp`).
///
/// # Errors
/// The first [`crate::Violation`].
///
/// # Panics
/// If the case cannot be collated (a bug in the strategy).
pub fn run_cp_shard_contiguous(subject: &dyn Sharder, case: &ShardCase) -> Checked {
    run_cp_shard_in(subject, case, ShardLayout::Contiguous)
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;
    use crate::strategies::{Sizes, arb_shard_case};
    use crate::subjects::cp::tagged_batch;

    proptest! {
        /// The plain contiguous split holds the property it is judged by: every real token on
        /// one rank, piece r on rank r, labels rolled before the split, global positions; a pack
        /// that is not a multiple of cp refused.
        #[test]
        fn contiguous_shards_cover_every_token_once(case in arb_shard_case(Sizes::SMALL)) {
            run_cp_shard_contiguous(&ContiguousSplit, &case)?;
        }

        /// The zigzag sharder is no contiguous one: the property sees the difference whenever
        /// the ranks hold more than one chunk.
        #[test]
        fn the_zigzag_is_not_contiguous(case in arb_shard_case(Sizes::SMALL)) {
            let verdict = run_cp_shard_contiguous(&super::super::ThdSubject, &case);
            let tokens = tagged_batch(&case).unwrap().num_tokens();
            if case.cp == 1 {
                prop_assert!(verdict.is_ok(), "{verdict:?}");
            } else if case.pad_first && tokens > 0 {
                prop_assert!(verdict.is_err(), "cp = {}, {tokens} tokens", case.cp);
            }
        }
    }
}
