//! CP-SHARD and TOKENS-CP zoo: sharders that lose or mislabel tokens, loggers that count one
//! shard.

use thd::cp::{CpLayout, LoggerStats, shift_labels};
use thd::{IGNORE_INDEX, PackedBatch};

use crate::checks::TokenRecord;
use crate::subjects::{Logger, Shard, Sharder, ThdSubject};

fn err(e: thd::Error) -> String {
    e.to_string()
}

/// A rank's labels: `(batch, layout, rank) -> labels`.
type LabelsFn<'a> = dyn Fn(&PackedBatch, &CpLayout, usize) -> Result<Vec<i64>, String> + 'a;
/// A rank's position ids: `(layout, rank) -> positions`.
type PositionsFn<'a> = dyn Fn(&CpLayout, usize) -> Vec<i64> + 'a;

/// Shards with `thd`'s layout, labels given by `labels(batch, layout, rank)`, positions by
/// `positions(layout, rank, global)`.
fn shard_with(
    batch: &PackedBatch,
    cp: usize,
    labels: &LabelsFn<'_>,
    positions: Option<&PositionsFn<'_>>,
) -> Result<Vec<Shard>, String> {
    let layout = CpLayout::from_batch(batch, cp).map_err(err)?;
    (0..cp)
        .map(|r| {
            Ok(Shard {
                input_ids: layout.split(batch.input_ids(), r).map_err(err)?,
                labels: labels(batch, &layout, r)?,
                position_ids: match positions {
                    Some(f) => f(&layout, r),
                    None => layout.split(batch.position_ids(), r).map_err(err)?,
                },
            })
        })
        .collect()
}

/// **The wrong order:** split the unshifted labels across ranks first, then roll each rank's
/// local segments (AReaL before #1223).
///
/// A rank's two chunks of a segment are not contiguous in the sequence, so the last token of
/// its first chunk gets the first token of its *second* chunk as target instead of the next
/// token of the sequence, and the last token of the second chunk loses its target. AReaL's
/// example: cp = 2, one sequence 0..7, rank 0 holds positions `[0, 1, 6, 7]`; the right
/// targets are `[1, 2, 7, -]`, this order gives `[1, 6, 7, -]`.
///
/// Pinned to AReaL's numbers in `upstream_areal::areal_split_then_roll` (the zoo is test- or
/// feature-only, so its examples are unit tests, not doctests).
///
/// # Errors
/// The errors of [`CpLayout::split`]: a layout that is not the batch's, a rank out of range.
pub fn shift_after_split(
    batch: &PackedBatch,
    layout: &CpLayout,
    rank: usize,
) -> thd::Result<Vec<i64>> {
    let local = layout.split(batch.labels(), rank)?;
    let mut out = vec![IGNORE_INDEX; local.len()];
    for r in layout.local_cu_seqlens().segments() {
        if r.len() > 1 {
            out[r.start..r.end - 1].copy_from_slice(&local[r.start + 1..r.end]);
        }
    }
    Ok(out)
}

/// **One rank's shard reported as the batch** (AReaL #1242, `d58cca56f`): `n_tokens` is the
/// shard's stored length (padding included), and loss and perplexity come from that rank's
/// valid tokens only. The right statistics are [`thd::cp::logger_stats`].
///
/// ```text
/// n_tokens = T / cp;   n_valid_tokens = # local labels ≠ -100;   prompt_tokens = the difference
/// loss     = Σ local nll / n_valid_tokens;   ppl_j over the rank's part of real sequence j
/// ```
///
/// Pinned to AReaL's numbers in `upstream_areal::areal_rank_local_stats_runs`.
///
/// # Errors
/// [`thd::Error::CpRankOutOfRange`]; [`thd::Error::CpShardLength`] unless `nll` and `labels`
/// have `T/cp` entries.
///
pub fn rank_local_stats(
    layout: &CpLayout,
    rank: usize,
    nll: &[f64],
    labels: &[i64],
) -> thd::Result<LoggerStats> {
    if rank >= layout.cp() {
        return Err(thd::Error::CpRankOutOfRange { rank, cp: layout.cp() });
    }
    let expected = layout.local_tokens();
    for len in [nll.len(), labels.len()] {
        if len != expected {
            return Err(thd::Error::CpShardLength { rank, len, expected });
        }
    }
    let (mut sum, mut count) = (0.0, 0u64);
    let (mut min, mut max): (Option<f64>, Option<f64>) = (None, None);
    let mut ppl = Vec::new();
    for (i, r) in layout.local_cu_seqlens().segments().enumerate() {
        let (mut seq_sum, mut seq_count) = (0.0, 0u64);
        for t in r.filter(|&t| labels[t] != IGNORE_INDEX) {
            let x = nll[t];
            (sum, count) = (sum + x, count + 1);
            (seq_sum, seq_count) = (seq_sum + x, seq_count + 1);
            min = Some(min.map_or(x, |m| m.min(x)));
            max = Some(max.map_or(x, |m| m.max(x)));
        }
        if i < layout.num_real_segments() && seq_count > 0 {
            ppl.push((seq_sum / seq_count as f64).exp());
        }
    }
    let n_tokens = expected as u64;
    let n_seqs = ppl.len() as u64;
    Ok(LoggerStats {
        n_seqs,
        n_tokens,
        n_valid_tokens: count,
        prompt_tokens: n_tokens.saturating_sub(count),
        loss: if count == 0 { 0.0 } else { sum / count as f64 },
        loss_min: min,
        loss_max: max,
        ppl_avg: (n_seqs > 0).then(|| ppl.iter().sum::<f64>() / n_seqs as f64),
        ppl_min: ppl.iter().copied().reduce(f64::min),
        ppl_max: ppl.iter().copied().reduce(f64::max),
    })
}

fn reassemble(batch: &PackedBatch, cp: usize, shards: &[Vec<i64>]) -> Result<Vec<i64>, String> {
    ThdSubject.reassemble(batch, cp, shards)
}

/// Labels split first and rolled on each rank's local segments, whose two zigzag chunks are
/// not contiguous (AReaL #1223: for cp = 2 and tokens 0..7 rank 0 needs `[1, 2, 7, -]` and
/// gets `[1, 6, 7, -]`).
#[derive(Debug, Clone, Copy, Default)]
pub struct SplitThenRoll;

impl Sharder for SplitThenRoll {
    fn name(&self) -> &str {
        "zoo::SplitThenRoll"
    }

    fn shard(&self, batch: &PackedBatch, cp: usize) -> Result<Vec<Shard>, String> {
        shard_with(batch, cp, &|b, l, r| shift_after_split(b, l, r).map_err(err), None)
    }

    fn reassemble(
        &self,
        batch: &PackedBatch,
        cp: usize,
        shards: &[Vec<i64>],
    ) -> Result<Vec<i64>, String> {
        reassemble(batch, cp, shards)
    }
}

/// The zigzag split without the divisibility check (AReaL `split_packed_seqs_for_context_parallel`):
/// a length not divisible by `2·cp` loses its middle tokens and leaves zero-filled slots
/// ("tokens 12 and 13 are lost").
#[derive(Debug, Clone, Copy, Default)]
pub struct TruncatingSplit;

impl TruncatingSplit {
    fn split(values: &[i64], storage: &[i64], cp: usize, rank: usize) -> Vec<i64> {
        let total = *storage.last().expect("non-empty") as usize;
        let mut out = vec![0; total / cp];
        for w in storage.windows(2) {
            let (start, len) = (w[0] as usize, (w[1] - w[0]) as usize);
            let half = len / cp / 2;
            let local = start / cp;
            for k in 0..half {
                if let Some(slot) = out.get_mut(local + k) {
                    *slot = values[start + half * rank + k];
                }
                if let Some(slot) = out.get_mut(local + half + k) {
                    *slot = values[start + len - half * (rank + 1) + k];
                }
            }
        }
        out
    }
}

impl Sharder for TruncatingSplit {
    fn name(&self) -> &str {
        "zoo::TruncatingSplit"
    }

    fn shard(&self, batch: &PackedBatch, cp: usize) -> Result<Vec<Shard>, String> {
        if cp == 1 {
            return ThdSubject.shard(batch, cp); // upstream returns early for C <= 1
        }
        let storage: Vec<i64> =
            batch.storage_cu_seqlens().as_slice().iter().map(|&c| i64::from(c)).collect();
        let labels = shift_labels(batch);
        Ok((0..cp)
            .map(|r| Shard {
                input_ids: Self::split(batch.input_ids(), &storage, cp, r),
                labels: Self::split(&labels, &storage, cp, r),
                position_ids: Self::split(batch.position_ids(), &storage, cp, r),
            })
            .collect())
    }

    fn reassemble(
        &self,
        batch: &PackedBatch,
        cp: usize,
        shards: &[Vec<i64>],
    ) -> Result<Vec<i64>, String> {
        if cp == 1 {
            return reassemble(batch, cp, shards);
        }
        // The mirror of the split: whatever was lost stays 0.
        let storage = batch.storage_cu_seqlens().as_slice();
        let mut out = vec![0; batch.num_tokens()];
        for (rank, shard) in shards.iter().enumerate() {
            for w in storage.windows(2) {
                let (start, len) = (w[0] as usize, (w[1] - w[0]) as usize);
                let (half, local) = (len / cp / 2, start / cp);
                for k in 0..half {
                    out[start + half * rank + k] = shard.get(local + k).copied().unwrap_or(0);
                    out[start + len - half * (rank + 1) + k] =
                        shard.get(local + half + k).copied().unwrap_or(0);
                }
            }
        }
        Ok(out)
    }
}

/// Each rank numbers its tokens by its local segments (`arange` over the local offsets), so
/// RoPE sees positions `[0, 1, 2, 3]` where the rank holds `[0, 1, 6, 7]` (Megatron-LM #5243:
/// "rank 0 should get positions `[0,3,4,7]`, got `[0,3,0,3]`").
#[derive(Debug, Clone, Copy, Default)]
pub struct LocalPositionIds;

impl Sharder for LocalPositionIds {
    fn name(&self) -> &str {
        "zoo::LocalPositionIds"
    }

    fn shard(&self, batch: &PackedBatch, cp: usize) -> Result<Vec<Shard>, String> {
        let local = |l: &CpLayout, _r: usize| {
            l.local_cu_seqlens().segments().flat_map(|s| 0..s.len() as i64).collect::<Vec<_>>()
        };
        shard_with(batch, cp, &|b, l, r| l.split(&shift_labels(b), r).map_err(err), Some(&local))
    }

    fn reassemble(
        &self,
        batch: &PackedBatch,
        cp: usize,
        shards: &[Vec<i64>],
    ) -> Result<Vec<i64>, String> {
        reassemble(batch, cp, shards)
    }
}

/// Labels rolled per segment with the *unpadded* offsets on the padded stream, so rolls start
/// at the wrong tokens and cross into the neighbour's padding or tokens (Megatron-LM #4495: the
/// MTP roll under THD + CP "leaked across sequence boundaries").
#[derive(Debug, Clone, Copy, Default)]
pub struct RollWithUnpaddedOffsets;

impl Sharder for RollWithUnpaddedOffsets {
    fn name(&self) -> &str {
        "zoo::RollWithUnpaddedOffsets"
    }

    fn shard(&self, batch: &PackedBatch, cp: usize) -> Result<Vec<Shard>, String> {
        let roll = |b: &PackedBatch, l: &CpLayout, r: usize| {
            let labels = b.labels();
            let mut out = vec![IGNORE_INDEX; labels.len()];
            for seg in b.cu_seqlens().segments() {
                if seg.len() > 1 {
                    out[seg.start..seg.end - 1].copy_from_slice(&labels[seg.start + 1..seg.end]);
                }
            }
            l.split(&out, r).map_err(err)
        };
        shard_with(batch, cp, &roll, None)
    }

    fn reassemble(
        &self,
        batch: &PackedBatch,
        cp: usize,
        shards: &[Vec<i64>],
    ) -> Result<Vec<i64>, String> {
        reassemble(batch, cp, shards)
    }
}

/// Rank 0's shard reported as the batch: token counts of one shard (padding included) and the
/// loss and perplexity of its tokens only (AReaL #1242, counts 4× lower at CP = 4; verl #5983).
#[derive(Debug, Clone, Copy, Default)]
pub struct RankZeroStats;

impl Logger for RankZeroStats {
    fn name(&self) -> &str {
        "zoo::RankZeroStats"
    }

    fn stats(
        &self,
        layout: &CpLayout,
        nll: &[Vec<f64>],
        labels: &[Vec<i64>],
    ) -> Result<TokenRecord, String> {
        let s = rank_local_stats(layout, 0, &nll[0], &labels[0]).map_err(err)?;
        Ok(TokenRecord {
            n_tokens: s.n_tokens,
            n_valid_tokens: s.n_valid_tokens,
            prompt_tokens: s.prompt_tokens,
            n_seqs: s.n_seqs,
            loss: s.loss,
            ppl_avg: s.ppl_avg,
        })
    }
}

/// Every rank normalises its local Σ NLL by the per-rank share of the count, `N / cp`, and the
/// ranks' values are summed: the loss reported is `cp ×` the true one (transformers #48167:
/// `eval_loss` 1.99× at cp = 2, 4.01× at cp = 4).
#[derive(Debug, Clone, Copy, Default)]
pub struct LossTimesCp;

impl Logger for LossTimesCp {
    fn name(&self) -> &str {
        "zoo::LossTimesCp"
    }

    fn stats(
        &self,
        layout: &CpLayout,
        nll: &[Vec<f64>],
        labels: &[Vec<i64>],
    ) -> Result<TokenRecord, String> {
        let mut r = ThdSubject.stats(layout, nll, labels)?;
        let share = r.n_valid_tokens as f64 / layout.cp() as f64;
        let local: Vec<f64> = nll
            .iter()
            .zip(labels)
            .map(|(x, y)| {
                x.iter().zip(y).filter(|(_, y)| **y != IGNORE_INDEX).map(|(x, _)| x).sum()
            })
            .collect();
        r.loss = if share == 0.0 { 0.0 } else { local.iter().map(|s| s / share).sum() };
        Ok(r)
    }
}

/// Tokens counted from the padded storage (`cu_seqlens_padded`), so CP divisibility padding
/// shows up as real tokens (Megatron-LM PR #5541: "padding appear\[s\] to be real data").
#[derive(Debug, Clone, Copy, Default)]
pub struct PaddedTokensCounted;

impl Logger for PaddedTokensCounted {
    fn name(&self) -> &str {
        "zoo::PaddedTokensCounted"
    }

    fn stats(
        &self,
        layout: &CpLayout,
        nll: &[Vec<f64>],
        labels: &[Vec<i64>],
    ) -> Result<TokenRecord, String> {
        let mut r = ThdSubject.stats(layout, nll, labels)?;
        r.n_tokens = layout.num_tokens() as u64;
        r.prompt_tokens = r.n_tokens - r.n_valid_tokens;
        Ok(r)
    }
}

/// The same wrong labels seen through the loss: each rank's CP-local loss with split-then-roll
/// labels no longer adds up to the global loss (so CP-LOSS catches it too).
impl crate::subjects::CpLossPipeline for SplitThenRoll {
    fn name(&self) -> &str {
        "zoo::SplitThenRoll"
    }

    fn rank_labels(
        &self,
        batch: &PackedBatch,
        layout: &CpLayout,
        rank: usize,
    ) -> Result<Vec<i64>, String> {
        shift_after_split(batch, layout, rank).map_err(err)
    }

    fn reduce(&self, parts: &[crate::checks::PartLoss]) -> f64 {
        crate::subjects::CpLossPipeline::reduce(&ThdSubject, parts)
    }
}

/// A contiguous splitter whose end index is one too far (an inclusive end, `[r·n, (r+1)·n]`
/// instead of `[r·n, (r+1)·n)`): every rank but the last also keeps the first token of the next
/// rank's piece, so that token is on two ranks (its attention and its loss counted twice) and
/// the pieces are no longer equal.
#[derive(Debug, Clone, Copy, Default)]
pub struct OverlappingContiguousSplit;

impl Sharder for OverlappingContiguousSplit {
    fn name(&self) -> &str {
        "zoo::OverlappingContiguousSplit"
    }

    fn shard(&self, batch: &PackedBatch, cp: usize) -> Result<Vec<Shard>, String> {
        let total = batch.num_tokens();
        if cp == 0 || !total.is_multiple_of(cp) {
            return Err(format!("the pack of {total} tokens is not divisible by cp = {cp}"));
        }
        let n = total / cp;
        crate::subjects::contiguous_shards(batch, cp, |r| Ok(r * n..((r + 1) * n + 1).min(total)))
    }

    fn reassemble(
        &self,
        batch: &PackedBatch,
        cp: usize,
        shards: &[Vec<i64>],
    ) -> Result<Vec<i64>, String> {
        // The mirror of the split: each rank's piece written from its start.
        let n = batch.num_tokens() / cp.max(1);
        let mut out = vec![0; batch.num_tokens()];
        for (r, shard) in shards.iter().enumerate() {
            for (k, &x) in shard.iter().enumerate() {
                if let Some(slot) = out.get_mut(r * n + k) {
                    *slot = x;
                }
            }
        }
        Ok(out)
    }
}
