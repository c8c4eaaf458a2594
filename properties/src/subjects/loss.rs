//! LOSS and CP-LOSS subjects: the packed loss, and the per-rank / per-micro-batch pipeline.

use candle_core::{Device, Tensor};
use thd::collate::{CpPadding, FlattenOptions, flatten, pad_for_cp};
use thd::cp::{CpLayout, CpLoss, shift_labels};
use thd::{LabelConvention, LossSum, PackedBatch, packed_cross_entropy};

use super::{ThdSubject, diffs, failed, wide};
use crate::checks::{LossRecord, PartLoss, Split, check_cp_loss, check_loss};
use crate::strategies::{CpLossCase, SftCase};
use crate::{Checked, Invariant};

/// A packed loss: collate the examples and compute Σ NLL, the count and the mean.
pub trait PackedLoss {
    /// A short name for reports.
    fn name(&self) -> &str;

    /// The loss of `case`'s examples, collated into one pack, under the case's logits.
    ///
    /// # Errors
    /// The implementation's message.
    fn loss(&self, case: &SftCase) -> Result<LossRecord, String>;
}

impl PackedLoss for ThdSubject {
    fn name(&self) -> &str {
        "thd::packed_cross_entropy"
    }

    fn loss(&self, case: &SftCase) -> Result<LossRecord, String> {
        let batch =
            flatten(&case.examples(), &FlattenOptions::default()).map_err(|e| e.to_string())?;
        let logits = case.logits(&case.lens, batch.num_tokens());
        let s =
            packed_cross_entropy(&logits, case.vocab, batch.labels(), LabelConvention::Unshifted)
                .map_err(|e| e.to_string())?;
        Ok(LossRecord { nll: s.nll, count: s.count, mean: s.mean() })
    }
}

/// The oracle's loss over `case` (each example alone, labels shifted within it, f64).
///
/// # Panics
/// If candle fails on a valid case.
pub fn oracle_loss(case: &SftCase) -> LossRecord {
    let t: usize = case.lens.iter().map(|&s| s as usize).sum();
    let logits = Tensor::from_vec(case.logits(&case.lens, t), (t, case.vocab), &Device::Cpu)
        .expect("logits");
    let ce = oracle::cross_entropy(&logits, &case.raw_labels(), &case.lens)
        .expect("the oracle accepts every case");
    LossRecord::from_sums(ce.nll_sum, ce.count)
}

/// LOSS: `subject`'s loss equals the oracle's (f64, relative error ≤ 1e-12).
///
/// # Errors
/// The first [`crate::Violation`].
pub fn run_loss(subject: &dyn PackedLoss, case: &SftCase) -> Checked {
    let got = subject.loss(case).map_err(|e| failed(Invariant::Loss, subject.name(), e))?;
    check_loss(&got, &oracle_loss(case), 1e-12).map_err(|v| v.within(subject.name()))
}

/// The CP-local loss pipeline: which labels each rank gets, and how the parts' sums become the
/// reported loss.
pub trait CpLossPipeline {
    /// A short name for reports.
    fn name(&self) -> &str;

    /// The labels rank `rank` computes its local loss with (`Shifted`: local logits `t`
    /// predicts local label `t`). `batch` is padded for `layout.cp()`.
    ///
    /// # Errors
    /// The implementation's message.
    fn rank_labels(
        &self,
        batch: &PackedBatch,
        layout: &CpLayout,
        rank: usize,
    ) -> Result<Vec<i64>, String> {
        layout.split(&shift_labels(batch), rank).map_err(|e| e.to_string())
    }

    /// The loss reported from the parts' sums (CP ranks or micro-batches).
    fn reduce(&self, parts: &[PartLoss]) -> f64;
}

impl CpLossPipeline for ThdSubject {
    fn name(&self) -> &str {
        "thd::cp"
    }

    fn reduce(&self, parts: &[PartLoss]) -> f64 {
        CpLoss { per_rank: parts.iter().map(|p| LossSum { nll: p.nll, count: p.count }).collect() }
            .loss()
    }
}

fn part(s: LossSum) -> PartLoss {
    PartLoss { nll: s.nll, count: s.count }
}

/// The parts' sums of a case: every CP rank's local loss on its shard, or every micro-batch's.
fn parts(subject: &dyn CpLossPipeline, case: &CpLossCase) -> Result<Vec<PartLoss>, String> {
    let sft = &case.sft;
    let examples = sft.examples();
    let err = |e: thd::Error| e.to_string();
    match case.split {
        Split::Cp(cp) => {
            let flat = flatten(&examples, &FlattenOptions::default()).map_err(err)?;
            let batch = pad_for_cp(&flat, &CpPadding::for_cp(cp, 0)).map_err(err)?;
            let layout = CpLayout::from_batch(&batch, cp).map_err(err)?;
            let storage = diffs(&wide(layout.storage()));
            let logits = layout
                .split_all(&sft.logits(&storage, batch.num_tokens()), sft.vocab)
                .map_err(err)?;
            (0..cp)
                .map(|r| {
                    let labels = subject.rank_labels(&batch, &layout, r)?;
                    packed_cross_entropy(&logits[r], sft.vocab, &labels, LabelConvention::Shifted)
                        .map(part)
                        .map_err(err)
                })
                .collect()
        }
        Split::MicroBatches(k) => {
            let size = examples.len().div_ceil(k.max(1));
            examples
                .chunks(size)
                .enumerate()
                .map(|(m, group)| {
                    let batch = flatten(group, &FlattenOptions::default()).map_err(err)?;
                    let first = m * size;
                    let lens = &sft.lens[first..first + group.len()];
                    let logits = sft.logits_from(first, lens, batch.num_tokens());
                    packed_cross_entropy(
                        &logits,
                        sft.vocab,
                        batch.labels(),
                        LabelConvention::Unshifted,
                    )
                    .map(part)
                    .map_err(err)
                })
                .collect()
        }
    }
}

/// CP-LOSS: the parts' sums add up to the oracle's global sums and the reported loss is the
/// global loss (f64, relative error ≤ 1e-12), for a CP split or a micro-batch split.
///
/// # Errors
/// The first [`crate::Violation`].
pub fn run_cp_loss(subject: &dyn CpLossPipeline, case: &CpLossCase) -> Checked {
    let parts = parts(subject, case).map_err(|e| failed(Invariant::CpLoss, subject.name(), e))?;
    let reported = subject.reduce(&parts);
    check_cp_loss(case.split, &parts, reported, &oracle_loss(&case.sft), 1e-12)
        .map_err(|v| v.within(subject.name()))
}
