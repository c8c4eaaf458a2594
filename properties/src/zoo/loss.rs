//! LOSS and CP-LOSS zoo: losses that divide wrong or shift wrong.

use thd::collate::{FlattenOptions, flatten};
use thd::{LabelConvention, LossSum, packed_cross_entropy};

use crate::checks::{LossRecord, PartLoss};
use crate::strategies::SftCase;
use crate::subjects::{CpLossPipeline, PackedLoss, ThdSubject};

/// The mean taken as `nll / count` with no guard: an all-ignored batch gives NaN (Megatron-LM
/// #7498: "the empty mask must produce exactly zero"; open-instruct OI-B4).
#[derive(Debug, Clone, Copy, Default)]
pub struct NanWhenAllIgnored;

impl PackedLoss for NanWhenAllIgnored {
    fn name(&self) -> &str {
        "zoo::NanWhenAllIgnored"
    }

    fn loss(&self, case: &SftCase) -> Result<LossRecord, String> {
        let r = ThdSubject.loss(case)?;
        Ok(LossRecord { mean: r.nll / r.count as f64, ..r })
    }
}

/// Labels used as if already rolled (`logits[t]` scored against `labels[t]`, the token
/// itself): the roll is skipped, or the pre-rolled mask is rolled again (AReaL pitfall AR-P4,
/// the contract change of #1223).
#[derive(Debug, Clone, Copy, Default)]
pub struct LabelsNotShifted;

impl PackedLoss for LabelsNotShifted {
    fn name(&self) -> &str {
        "zoo::LabelsNotShifted"
    }

    fn loss(&self, case: &SftCase) -> Result<LossRecord, String> {
        let batch =
            flatten(&case.examples(), &FlattenOptions::default()).map_err(|e| e.to_string())?;
        let logits = case.logits(&case.lens, batch.num_tokens());
        let s = packed_cross_entropy(&logits, case.vocab, batch.labels(), LabelConvention::Shifted)
            .map_err(|e| e.to_string())?;
        Ok(LossRecord { nll: s.nll, count: s.count, mean: s.mean() })
    }
}

/// The mean of per-rank means, `(1/cp) Σ_r nll_r / count_r`, an empty rank counting 0
/// (Megatron-LM #7452 finding 9 and PR #7513: "with one valid token, CP=2 halves the gradient";
/// over micro-batches, transformers PR #34191 / torchtune #1875 gradient accumulation and AReaL
/// #1730).
#[derive(Debug, Clone, Copy, Default)]
pub struct MeanOfRankMeans;

impl CpLossPipeline for MeanOfRankMeans {
    fn name(&self) -> &str {
        "zoo::MeanOfRankMeans"
    }

    fn reduce(&self, parts: &[PartLoss]) -> f64 {
        let sums: Vec<LossSum> =
            parts.iter().map(|p| LossSum { nll: p.nll, count: p.count }).collect();
        mean_of_rank_means(&sums)
    }
}

/// The same reduction over the micro-batches of one optimizer step (gradient accumulation):
/// `(x₁/n₁ + x₂/n₂)/2 ≠ (x₁+x₂)/(n₁+n₂)` (transformers PR #34191, torchtune #1875; AReaL #1730,
/// M2PO's loss changing with the micro-batch split). Caught by the CP-LOSS property on a
/// micro-batch split: the math of a CP split.
#[derive(Debug, Clone, Copy, Default)]
pub struct MeanOfMicroBatchMeans;

impl CpLossPipeline for MeanOfMicroBatchMeans {
    fn name(&self) -> &str {
        "zoo::MeanOfMicroBatchMeans"
    }

    fn reduce(&self, parts: &[PartLoss]) -> f64 {
        MeanOfRankMeans.reduce(parts)
    }
}

/// **The classic bug:** the mean of per-rank means, `(1/cp) Σ_r nll_r / count_r`, an empty rank
/// counting 0 (0 for no rank at all). The right reduction is [`thd::cp::CpLoss::loss`],
/// `Σ_r nll_r / Σ_r count_r`; the two differ whenever the counts do.
///
/// Pinned to AReaL's numbers in `upstream_areal::areal_mean_of_rank_means_run`.
pub fn mean_of_rank_means(per_rank: &[LossSum]) -> f64 {
    if per_rank.is_empty() {
        return 0.0;
    }
    per_rank.iter().map(LossSum::mean).sum::<f64>() / per_rank.len() as f64
}

/// The global Σ NLL divided by the valid-token count of one part only: the count all-reduced
/// over the data-parallel group but not over CP (verl #5983: "undercounted by a factor of CP",
/// inflating the token-mean loss).
#[derive(Debug, Clone, Copy, Default)]
pub struct OneShardDenominator;

impl CpLossPipeline for OneShardDenominator {
    fn name(&self) -> &str {
        "zoo::OneShardDenominator"
    }

    fn reduce(&self, parts: &[PartLoss]) -> f64 {
        let nll: f64 = parts.iter().map(|p| p.nll).sum();
        let count = parts.first().map_or(0, |p| p.count);
        if count == 0 { 0.0 } else { nll / count as f64 }
    }
}

/// Every rank takes its local mean and weights it by its count: right in exact arithmetic, but
/// a rank with no valid label computes 0/0 and the NaN poisons the sum (Megatron-LM #7498;
/// NeMo Speech #14488 "NaN loss with CP when every token on a rank is masked"; AReaL's +1e-5).
#[derive(Debug, Clone, Copy, Default)]
pub struct NanOnEmptyRank;

impl CpLossPipeline for NanOnEmptyRank {
    fn name(&self) -> &str {
        "zoo::NanOnEmptyRank"
    }

    fn reduce(&self, parts: &[PartLoss]) -> f64 {
        let total: u64 = parts.iter().map(|p| p.count).sum();
        let weighted: f64 = parts.iter().map(|p| p.nll / p.count as f64 * p.count as f64).sum();
        if total == 0 { 0.0 } else { weighted / total as f64 }
    }
}
