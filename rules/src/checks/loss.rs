//! LOSS: the packed cross-entropy against the oracle.

use crate::checks::input::LossRecord;
use crate::checks::proof::Proof;
use crate::checks::rule::rule;
use crate::violation::{close, rel_diff};
use crate::{Checked, Location};

rule! {
    /// The loss is never NaN. [`crate::checks::check_loss`].
    LOSS_FINITE = "loss-finite", Loss, "the loss is finite; an all-ignored batch gives 0, never NaN",
        proof: Proof::Zoo("NanWhenAllIgnored");
    /// The loss counts the valid labels. [`crate::checks::check_loss`].
    LOSS_COUNT = "loss-count", Loss, "the loss counts exactly the valid label positions within each sequence",
        proof: Proof::Test("rules/src/checks/proofs.rs::loss_count_boundary_label_counted");
    /// Σ NLL is the oracle's. [`crate::checks::check_loss`].
    LOSS_NLL = "loss-nll", Loss, "Σ NLL equals the oracle's (labels shifted within each sequence)",
        proof: Proof::Zoo("LabelsNotShifted");
    /// An all-ignored batch gives 0. [`crate::checks::check_loss`].
    LOSS_EMPTY = "loss-empty", Loss, "an all-ignored batch gives loss 0",
        proof: Proof::Test("rules/src/checks/proofs.rs::loss_empty_placeholder_loss");
    /// The loss is the mean over valid labels. [`crate::checks::check_loss`].
    LOSS_MEAN = "loss-mean", Loss, "the loss is Σ NLL / count",
        proof: Proof::Test("rules/src/checks/proofs.rs::loss_mean_of_sequence_means");
}

/// LOSS: the reported loss equals the oracle's mean cross-entropy over all valid label
/// positions, labels shifted within each sequence; all ignored gives exactly 0.
///
/// ```text
/// got.count = oracle.count                            (exact)
/// |got.nll − oracle.nll| ≤ rtol·|oracle.nll|
/// got.mean finite; got.mean = 0 when count = 0; |got.mean − oracle.mean| ≤ rtol·|oracle.mean|
/// ```
///
/// # Errors
/// The first rule broken.
///
/// # Example
/// ```
/// use rules::checks::{LossRecord, check_loss};
/// let oracle = LossRecord::from_sums(0.0, 0);
/// let nan = LossRecord { nll: 0.0, count: 0, mean: f64::NAN };
/// assert!(check_loss(&nan, &oracle, 1e-12).is_err());
/// ```
pub fn check_loss(got: &LossRecord, oracle: &LossRecord, rtol: f64) -> Checked {
    if !got.mean.is_finite() {
        return Err(LOSS_FINITE
            .violation()
            .expected(oracle.mean)
            .got(got.mean)
            .note(format!("{} valid labels", got.count)));
    }
    if got.count != oracle.count {
        return Err(LOSS_COUNT
            .violation()
            .expected(format!("{} valid labels", oracle.count))
            .got(format!("{} valid labels", got.count))
            .note("a label counted across a document boundary, or a shift by the wrong amount"));
    }
    if !close(got.nll, oracle.nll, rtol) {
        return Err(LOSS_NLL
            .violation()
            .expected(oracle.nll)
            .got(got.nll)
            .note(format!("relative error {:.3e} > {rtol:e}", rel_diff(got.nll, oracle.nll))));
    }
    if got.count == 0 && got.mean != 0.0 {
        return Err(LOSS_EMPTY.violation().expected(0).got(got.mean));
    }
    if !close(got.mean, oracle.mean, rtol) {
        return Err(LOSS_MEAN
            .violation()
            .at(Location::default())
            .expected(oracle.mean)
            .got(got.mean)
            .note(format!("Σ NLL {} over {} labels", got.nll, got.count)));
    }
    Ok(())
}
