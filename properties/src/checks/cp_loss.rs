//! CP-LOSS: per-rank (or per-micro-batch) sums reassemble the global loss.

use std::fmt;

use super::LossRecord;
use crate::violation::{close, rel_diff};
use crate::{Checked, Invariant, Location, Violation};

/// How one global batch was split into parts that each compute a local loss.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Split {
    /// Context parallelism over `cp` ranks (zigzag shards of every sequence).
    Cp(usize),
    /// Gradient accumulation over this many micro-batches (whole sequences each).
    MicroBatches(usize),
}

impl fmt::Display for Split {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Split::Cp(cp) => write!(f, "cp={cp}"),
            Split::MicroBatches(1) => write!(f, "1 micro-batch"),
            Split::MicroBatches(n) => write!(f, "{n} micro-batches"),
        }
    }
}

/// One part's local sums: Σ NLL over its valid labels and their count.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct PartLoss {
    /// Σ NLL.
    pub nll: f64,
    /// Valid labels.
    pub count: u64,
}

fn part_label(split: Split) -> &'static str {
    match split {
        Split::Cp(_) => "rank",
        Split::MicroBatches(_) => "micro-batch",
    }
}

/// CP-LOSS: the parts' sums add up to the global sums, and the loss reported from them is the
/// global loss `Σ nll / Σ count` (0 when nothing is valid, never NaN).
///
/// ```text
/// Σ_r count_r = global.count        (exact)
/// |Σ_r nll_r − global.nll| ≤ rtol·|global.nll|
/// reported finite, |reported − global.nll / global.count| ≤ rtol·|global mean|
/// ```
///
/// The classic bug, the mean of per-rank means `(1/cp) Σ_r nll_r/count_r`, fails the last
/// rule whenever ranks hold different numbers of valid labels.
///
/// # Errors
/// The first rule broken; the note lists every part's sums.
///
/// # Example
/// ```
/// use properties::checks::{LossRecord, PartLoss, Split, check_cp_loss};
/// let parts = [PartLoss { nll: 0.8, count: 2 }, PartLoss { nll: 1.4, count: 3 }];
/// let global = LossRecord::from_sums(2.2, 5);
/// assert!(check_cp_loss(Split::Cp(2), &parts, 0.44, &global, 1e-12).is_ok());
/// let mean_of_means = (0.8 / 2.0 + 1.4 / 3.0) / 2.0;
/// assert!(check_cp_loss(Split::Cp(2), &parts, mean_of_means, &global, 1e-12).is_err());
/// ```
pub fn check_cp_loss(
    split: Split,
    parts: &[PartLoss],
    reported: f64,
    global: &LossRecord,
    rtol: f64,
) -> Checked {
    let ctx = split.to_string();
    let breakdown = || {
        parts
            .iter()
            .enumerate()
            .map(|(r, p)| format!("{} {r}: nll {:.6} over {}", part_label(split), p.nll, p.count))
            .collect::<Vec<_>>()
            .join("; ")
    };
    let v =
        |rule: &str| Violation::new(Invariant::CpLoss, rule).at(Location::default().context(&ctx));
    let count: u64 = parts.iter().map(|p| p.count).sum();
    if count != global.count {
        return Err(v("the parts' valid-label counts add up to the global count")
            .expected(global.count)
            .got(count)
            .note(breakdown()));
    }
    let nll: f64 = parts.iter().map(|p| p.nll).sum();
    if !close(nll, global.nll, rtol) {
        return Err(v("the parts' Σ NLL add up to the global Σ NLL")
            .expected(global.nll)
            .got(nll)
            .note(format!("relative error {:.3e}; {}", rel_diff(nll, global.nll), breakdown())));
    }
    if !reported.is_finite() {
        return Err(v("the reported loss is finite (an empty part contributes 0, never NaN)")
            .expected(global.mean)
            .got(reported)
            .note(breakdown()));
    }
    if !close(reported, global.mean, rtol) {
        return Err(v("the reported loss is Σ_r nll_r / Σ_r count_r, the global loss")
            .expected(global.mean)
            .got(reported)
            .note(format!(
                "relative error {:.3e}; {}",
                rel_diff(reported, global.mean),
                breakdown()
            )));
    }
    Ok(())
}
