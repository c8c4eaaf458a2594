//! The loss sample: seeded logits on one row, the global loss, the CP-local sums and the
//! CP-invariant logger statistics, plus the oracle's independent value.

use candle_core::{Device, Tensor};
use thd::cp::{cp_local_loss, logger_stats, shard_batch, token_nll};
use thd::{LabelConvention, LossSum, PackedBatch, PackedBatchParts, packed_cross_entropy};

use crate::data::widen;
use crate::dist::SplitMix64;
use crate::error::pipeline_err;
use crate::recipe::Recipe;
use crate::record::{LoggerRecord, LossSample, RankLoss};
use crate::{Error, Result};

/// Stream id of the logits (never renumber).
const STREAM_LOGITS: u64 = 3;

/// The loss sample of `row` under the recipe's CP size.
///
/// ```text
/// logits[t, v] = 6·u − 3,  u uniform in [0, 1) (SplitMix64 stream 3, loss_sample.seed),
///                drawn for the real tokens in segment order; 0 on padding
/// global       = packed_cross_entropy(logits, labels)                 (unsharded)
/// cp_local     = Σ_r nll_r / Σ_r count_r over shard_batch(row, cp)     (labels rolled, then split)
/// oracle       = oracle::cross_entropy on the real tokens of every segment (causal only)
/// ```
///
/// Tokens past the last storage offset (static padding) carry label -100 and are left out, so
/// that the row can be sharded.
pub(crate) fn loss_sample(recipe: &Recipe, row: &PackedBatch) -> Result<LossSample> {
    let err = |stage| pipeline_err(recipe, stage);
    let row = covered(row).map_err(err("loss sample"))?;
    let v = recipe.loss_sample.vocab;
    let mut rng = SplitMix64::stream(recipe.data.seed, STREAM_LOGITS, recipe.loss_sample.seed);
    // Rows follow the real tokens in order, wherever padding puts them, so the sample is the
    // same for every CP size; padding rows are 0 (their labels are -100).
    let mut logits = vec![0.0f64; row.num_tokens() * v];
    for i in 0..row.num_segments() {
        for t in row.real_tokens(i) {
            for x in &mut logits[t * v..(t + 1) * v] {
                *x = 6.0 * rng.unit() - 3.0;
            }
        }
    }
    let global = packed_cross_entropy(&logits, v, row.labels(), row.label_convention())
        .map_err(err("packed_cross_entropy"))?;

    let cp = recipe.parallel.cp as usize;
    let (layout, shards) = shard_batch(&row, cp).map_err(err("shard_batch"))?;
    let local_logits = layout.split_all(&logits, v).map_err(err("cp split"))?;
    let labels: Vec<Vec<i64>> = shards.iter().map(|s| s.labels.clone()).collect();
    let loss = cp_local_loss(&local_logits, v, &labels).map_err(err("cp_local_loss"))?;
    let nll = local_logits
        .iter()
        .zip(&labels)
        .map(|(x, y)| token_nll(x, v, y))
        .collect::<thd::Result<Vec<_>>>()
        .map_err(err("token_nll"))?;
    let stats = logger_stats(&layout, &nll, &labels).map_err(err("logger_stats"))?;

    let oracle_loss = match row.label_convention() {
        LabelConvention::Unshifted => Some(oracle_loss(recipe, &row, &logits, v)?),
        LabelConvention::Shifted => None,
    };
    let cp_local = loss.loss();
    let scale = global.mean().abs().max(f64::MIN_POSITIVE);
    Ok(LossSample {
        vocab: v as u64,
        tokens: row.num_tokens() as u64,
        valid: global.count,
        global_loss: global.mean(),
        oracle_loss,
        cp_local_loss: cp_local,
        mean_of_rank_means: buggy_mean_of_rank_means(&loss.per_rank),
        cp_local_matches_global: loss.global().count == global.count
            && (cp_local - global.mean()).abs() <= 1e-12 * scale,
        per_rank: loss
            .per_rank
            .iter()
            .enumerate()
            .map(|(r, s)| RankLoss { rank: r as u64, nll: s.nll, count: s.count, mean: s.mean() })
            .collect(),
        logger: LoggerRecord {
            n_seqs: stats.n_seqs,
            n_tokens: stats.n_tokens,
            n_valid_tokens: stats.n_valid_tokens,
            prompt_tokens: stats.prompt_tokens,
            loss: stats.loss,
            ppl_avg: stats.ppl_avg,
            ppl_min: stats.ppl_min,
            ppl_max: stats.ppl_max,
        },
    })
}

/// What a logger with the classic CP-loss bug would show: the mean of per-rank means,
/// `(1/cp) Σ_r nll_r / count_r` (an empty rank counting 0), reported next to the right value so
/// the difference can be read in the record. `thd` does not offer it (the bug zoo in
/// `properties` reproduces it; golden does not depend on the gate).
fn buggy_mean_of_rank_means(per_rank: &[LossSum]) -> f64 {
    if per_rank.is_empty() {
        return 0.0;
    }
    per_rank.iter().map(LossSum::mean).sum::<f64>() / per_rank.len() as f64
}

/// The row without the tokens past its last storage offset (they carry label -100).
fn covered(row: &PackedBatch) -> thd::Result<PackedBatch> {
    let n = row.storage_cu_seqlens().total();
    if n == row.num_tokens() {
        return Ok(row.clone());
    }
    PackedBatch::new(PackedBatchParts {
        input_ids: row.input_ids()[..n].to_vec(),
        labels: row.labels()[..n].to_vec(),
        position_ids: Some(row.position_ids()[..n].to_vec()),
        cu_seqlens: widen(row.cu_seqlens()),
        cu_seqlens_padded: row.cu_seqlens_padded().map(widen),
        num_real_seqs: row.num_real_seqs(),
        label_convention: row.label_convention(),
    })
}

/// The oracle's mean loss over the real tokens of every segment, gathered contiguously.
fn oracle_loss(recipe: &Recipe, row: &PackedBatch, logits: &[f64], v: usize) -> Result<f64> {
    let (mut rows, mut labels, mut seqlens) = (vec![], vec![], vec![]);
    for i in 0..row.num_segments() {
        let r = row.real_tokens(i);
        rows.extend_from_slice(&logits[r.start * v..r.end * v]);
        labels.extend_from_slice(&row.labels()[r.clone()]);
        seqlens.push(r.len() as u32);
    }
    let err = |source| Error::Oracle { recipe: recipe.name.clone(), source };
    let t = Tensor::from_vec(rows, (labels.len(), v), &Device::Cpu).map_err(err)?;
    Ok(oracle::cross_entropy(&t, &labels, &seqlens).map_err(err)?.mean())
}
