//! CP-LOSS: per-rank (or per-micro-batch) sums reassemble the global loss.

use std::fmt;

use super::{CP_LOSS, LossRecord};
use crate::violation::{close, rel_diff};
use crate::{Checked, Location, Violation};

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
    let breakdown = || {
        parts
            .iter()
            .enumerate()
            .map(|(r, p)| format!("{} {r}: nll {:.6} over {}", part_label(split), p.nll, p.count))
            .collect::<Vec<_>>()
            .join("; ")
    };
    let count: u64 = parts.iter().map(|p| p.count).sum();
    if count != global.count {
        return Err(violation(split, "the parts' valid-label counts add up to the global count")
            .expected(global.count)
            .got(count)
            .note(breakdown()));
    }
    let nll: f64 = parts.iter().map(|p| p.nll).sum();
    if !close(nll, global.nll, rtol) {
        return Err(violation(split, "the parts' Σ NLL add up to the global Σ NLL")
            .expected(global.nll)
            .got(nll)
            .note(format!("relative error {:.3e}; {}", rel_diff(nll, global.nll), breakdown())));
    }
    reported_rules(split, reported, global, rtol, &breakdown)
}

/// CP-LOSS for a pipeline that reports only the reduced loss, not its parts: the reported loss
/// is the global loss `Σ nll / Σ count` (0 when nothing is valid, never NaN). The last two
/// rules of [`check_cp_loss`], which runs them after checking the parts' sums.
///
/// ```text
/// reported finite, |reported − global.nll / global.count| ≤ rtol·|global mean|
/// ```
///
/// # Errors
/// The first rule broken.
///
/// # Example
/// ```
/// use properties::checks::{LossRecord, Split, check_reported_loss};
/// let global = LossRecord::from_sums(2.2, 5);
/// assert!(check_reported_loss(Split::Cp(2), 0.44, &global, 1e-12).is_ok());
/// // A rank with no valid label: its mean is 0/0, and the mean of the means is NaN.
/// let v = check_reported_loss(Split::Cp(2), f64::NAN, &global, 1e-12).unwrap_err();
/// assert_eq!(v.id, "cp-loss");
/// // An all-ignored batch reports exactly 0.
/// assert!(check_reported_loss(Split::Cp(4), 0.0, &LossRecord::from_sums(0.0, 0), 1e-12).is_ok());
/// ```
pub fn check_reported_loss(split: Split, reported: f64, global: &LossRecord, rtol: f64) -> Checked {
    reported_rules(split, reported, global, rtol, &|| "the parts were not reported".to_owned())
}

fn violation(split: Split, rule: &str) -> Violation {
    CP_LOSS.violation().rule_text(rule).at(Location::default().context(split.to_string()))
}

fn reported_rules(
    split: Split,
    reported: f64,
    global: &LossRecord,
    rtol: f64,
    breakdown: &dyn Fn() -> String,
) -> Checked {
    if !reported.is_finite() {
        return Err(violation(
            split,
            "the reported loss is finite (an empty part contributes 0, never NaN)",
        )
        .expected(global.mean)
        .got(reported)
        .note(breakdown()));
    }
    if !close(reported, global.mean, rtol) {
        return Err(violation(
            split,
            "the reported loss is Σ_r nll_r / Σ_r count_r, the global loss",
        )
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

#[cfg(test)]
mod tests {
    use super::*;

    /// The reduced-loss rules are the same whether or not the parts come with the loss.
    #[test]
    fn reported_loss_rules_are_those_of_check_cp_loss() {
        let parts = [PartLoss { nll: 1.5, count: 3 }, PartLoss { nll: 0.0, count: 0 }];
        let global = LossRecord::from_sums(1.5, 3);
        for reported in [0.5, f64::NAN, 0.25, f64::INFINITY] {
            let with = check_cp_loss(Split::Cp(2), &parts, reported, &global, 1e-12);
            let alone = check_reported_loss(Split::Cp(2), reported, &global, 1e-12);
            assert_eq!(with.is_ok(), alone.is_ok(), "{reported}");
            if let (Err(a), Err(b)) = (with, alone) {
                assert_eq!((a.id, &a.rule, &a.at), (b.id, &b.rule, &b.at));
                assert_eq!(a.id, "cp-loss");
            }
        }
        // The sums are checked first when the parts are given.
        let lost = [PartLoss { nll: 1.5, count: 2 }, PartLoss { nll: 0.0, count: 0 }];
        let v = check_cp_loss(Split::Cp(2), &lost, 0.5, &global, 1e-12).unwrap_err();
        assert!(v.rule.contains("counts add up"), "{v}");
        assert_eq!(v.at.context.as_deref(), Some("cp=2"));
    }
}
