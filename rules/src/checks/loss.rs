//! LOSS: the packed cross-entropy against the oracle.

use super::{LOSS_COUNT, LOSS_EMPTY, LOSS_FINITE, LOSS_MEAN, LOSS_NLL};
use crate::checks::input::LossRecord;
use crate::violation::{close, rel_diff};
use crate::{Checked, Location};

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
