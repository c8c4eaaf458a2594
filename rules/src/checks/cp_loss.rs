//! CP-LOSS: per-rank (or per-micro-batch) sums reassemble the global loss.

use crate::checks::input::{CpLossInput, CpLossJudge, LossRecord, PartLoss, Split};
use crate::checks::proof::Proof;
use crate::checks::rule::{Fuzz, Rule, rule};
use crate::violation::{close, rel_diff};
use crate::{Checked, Location, Violation};

rule! {
    /// The parts' sums are the global sums. [`crate::checks::check_cp_loss`].
    CP_LOSS_PARTS = "cp-loss-parts", CpLoss, "the parts' valid-label counts and Σ NLL add up to the global ones",
        fuzz: Fuzz::CpLoss(Some(judge_parts)),
        proof: Proof::Adapter("cp_loss_three_bugs");
    /// The reduced loss is never NaN. [`crate::checks::check_cp_loss`],
    /// [`crate::checks::check_reported_loss`].
    CP_LOSS_FINITE = "cp-loss-finite", CpLoss, "the reported loss is finite, and 0 when nothing is valid (an empty part contributes 0, never NaN)",
        fuzz: Fuzz::CpLoss(Some(judge_finite)),
        proof: Proof::Zoo("NanOnEmptyRank");
    /// The reduced loss is the sum of the sums over the sum of the counts.
    /// [`crate::checks::check_cp_loss`], [`crate::checks::check_reported_loss`].
    CP_LOSS_REDUCTION = "cp-loss-reduction", CpLoss, "the reported loss is Σ_r nll_r / Σ_r count_r, the global loss (not the mean of the parts' means)",
        fuzz: Fuzz::CpLoss(Some(judge_reduction)),
        proof: Proof::Zoo("MeanOfRankMeans");
}

fn part_label(split: Split) -> &'static str {
    match split {
        Split::Cp(_) => "rank",
        Split::MicroBatches(_) => "micro-batch",
    }
}

/// CP-LOSS: the parts' sums add up to the global sums, and the loss reported from them is the
/// global loss `Σ nll / Σ count` (0 when nothing is valid, never NaN). The first rule broken;
/// [`cp_loss_violations`] gives every one.
///
/// ```text
/// cp-loss-parts      Σ_r count_r = global.count (exact), |Σ_r nll_r − global.nll| ≤ rtol·|global.nll|
/// cp-loss-finite     reported finite, and 0 when nothing is valid
/// cp-loss-reduction  |reported − Σ_r nll_r / Σ_r count_r| ≤ rtol·|that mean|
/// ```
///
/// The classic bug, the mean of per-rank means `(1/cp) Σ_r nll_r/count_r`, fails
/// `cp-loss-reduction` whenever ranks hold different numbers of valid labels (and
/// `cp-loss-finite` when one holds none).
///
/// # Errors
/// The first rule broken; the note lists every part's sums.
///
/// # Example
/// ```
/// use rules::checks::{LossRecord, PartLoss, Split, check_cp_loss};
/// let parts = [PartLoss { nll: 0.8, count: 2 }, PartLoss { nll: 1.4, count: 3 }];
/// let global = LossRecord::from_sums(2.2, 5);
/// assert!(check_cp_loss(Split::Cp(2), &parts, 0.44, &global, 1e-12).is_ok());
/// let mean_of_means = (0.8 / 2.0 + 1.4 / 3.0) / 2.0;
/// let v = check_cp_loss(Split::Cp(2), &parts, mean_of_means, &global, 1e-12).unwrap_err();
/// assert_eq!(v.id, "cp-loss-reduction");
/// ```
pub fn check_cp_loss(
    split: Split,
    parts: &[PartLoss],
    reported: f64,
    global: &LossRecord,
    rtol: f64,
) -> Checked {
    match cp_loss_violations(split, parts, reported, global, rtol).into_iter().next() {
        Some(v) => Err(v),
        None => Ok(()),
    }
}

/// Every CP-LOSS rule [`check_cp_loss`] finds broken, in its order: `cp-loss-parts` (the parts'
/// sums against the global sums), then `cp-loss-finite` or `cp-loss-reduction` (the reported
/// loss). Each is a defect of its own, so each is judged on its own: when the parts are wrong,
/// the reported loss is judged against the parts' own sums (a correct reduction of wrong parts
/// breaks `cp-loss-parts` only); when they are right, against the global loss.
///
/// # Example
/// ```
/// use rules::checks::{LossRecord, PartLoss, Split, cp_loss_violations};
/// let global = LossRecord::from_sums(2.2, 5);
/// // Each rank lost a label, and the loss is the mean of the ranks' means.
/// let parts = [PartLoss { nll: 0.4, count: 1 }, PartLoss { nll: 0.9, count: 2 }];
/// let mean_of_means = (0.4 / 1.0 + 0.9 / 2.0) / 2.0;
/// let ids: Vec<_> = cp_loss_violations(Split::Cp(2), &parts, mean_of_means, &global, 1e-12)
///     .iter()
///     .map(|v| v.id)
///     .collect();
/// assert_eq!(ids, ["cp-loss-parts", "cp-loss-reduction"]);
/// // The same parts, reduced right: only the parts are wrong.
/// let v = cp_loss_violations(Split::Cp(2), &parts, 1.3 / 3.0, &global, 1e-12);
/// assert_eq!(v.iter().map(|v| v.id).collect::<Vec<_>>(), ["cp-loss-parts"]);
/// ```
pub fn cp_loss_violations(
    split: Split,
    parts: &[PartLoss],
    reported: f64,
    global: &LossRecord,
    rtol: f64,
) -> Vec<Violation> {
    let input = CpLossInput::Answer { split, parts: Some(parts), reported, global, rtol };
    answer_violations(&input)
}

/// Every rule an answer breaks, each judged on its own, in the registry's order:
/// `cp-loss-parts`, `cp-loss-finite`, `cp-loss-reduction` (what
/// [`judge_cp_loss`](crate::checks::judge_cp_loss) gives on an answer: `tokens-cp` judges the
/// counts across CP sizes, never an answer).
fn answer_violations(input: &CpLossInput<'_>) -> Vec<Violation> {
    let judges: [CpLossJudge; 3] = [judge_parts, judge_finite, judge_reduction];
    judges.into_iter().filter_map(|judge| judge(input)?.err()).collect()
}

/// `cp-loss-parts`: the parts' sums against the global sums, when the parts are reported.
pub(crate) fn judge_parts(input: &CpLossInput<'_>) -> Option<Checked> {
    let CpLossInput::Answer { split, parts: Some(parts), global, rtol, .. } = *input else {
        return None;
    };
    Some(wrong_parts(split, parts, global, rtol).map_or(Ok(()), Err))
}

/// `cp-loss-finite`: the reported loss is finite, and 0 when nothing is valid.
pub(crate) fn judge_finite(input: &CpLossInput<'_>) -> Option<Checked> {
    reported_of(input, CP_LOSS_FINITE)
}

/// `cp-loss-reduction`: the reported loss is the global loss (the parts' own, when they miss
/// the global sums: a correct reduction of wrong parts breaks `cp-loss-parts` only).
pub(crate) fn judge_reduction(input: &CpLossInput<'_>) -> Option<Checked> {
    reported_of(input, CP_LOSS_REDUCTION)
}

/// The reported loss's verdict, as far as it is `rule`'s (each answer breaks at most one of
/// `cp-loss-finite` and `cp-loss-reduction`).
fn reported_of(input: &CpLossInput<'_>, rule: Rule) -> Option<Checked> {
    let CpLossInput::Answer { split, parts, reported, global, rtol } = *input else {
        return None;
    };
    let v = match parts {
        None => {
            let breakdown = || "the parts were not reported".to_owned();
            reported_rule(split, reported, global, Against::Global, rtol, &breakdown)
        }
        Some(parts) => {
            let breakdown = || breakdown(split, parts);
            match wrong_parts(split, parts, global, rtol) {
                None => reported_rule(split, reported, global, Against::Global, rtol, &breakdown),
                Some(_) => {
                    let count: u64 = parts.iter().map(|p| p.count).sum();
                    let nll: f64 = parts.iter().map(|p| p.nll).sum();
                    let own = LossRecord::from_sums(nll, count);
                    reported_rule(split, reported, &own, Against::Parts, rtol, &breakdown)
                }
            }
        }
    };
    Some(match v {
        Some(v) if v.id == rule.id => Err(v),
        _ => Ok(()),
    })
}

fn breakdown(split: Split, parts: &[PartLoss]) -> String {
    parts
        .iter()
        .enumerate()
        .map(|(r, p)| format!("{} {r}: nll {:.6} over {}", part_label(split), p.nll, p.count))
        .collect::<Vec<_>>()
        .join("; ")
}

/// `cp-loss-parts`'s violation: the parts' count, then their Σ NLL, against the global ones.
fn wrong_parts(
    split: Split,
    parts: &[PartLoss],
    global: &LossRecord,
    rtol: f64,
) -> Option<Violation> {
    let count: u64 = parts.iter().map(|p| p.count).sum();
    let nll: f64 = parts.iter().map(|p| p.nll).sum();
    if count != global.count {
        Some(
            violation(
                CP_LOSS_PARTS,
                split,
                "the parts' valid-label counts add up to the global count",
            )
            .expected(global.count)
            .got(count)
            .note(breakdown(split, parts)),
        )
    } else if !close(nll, global.nll, rtol) {
        Some(
            violation(CP_LOSS_PARTS, split, "the parts' Σ NLL add up to the global Σ NLL")
                .expected(global.nll)
                .got(nll)
                .note(format!(
                    "relative error {:.3e}; {}",
                    rel_diff(nll, global.nll),
                    breakdown(split, parts)
                )),
        )
    } else {
        None
    }
}

/// CP-LOSS for a pipeline that reports only the reduced loss, not its parts: the reported loss
/// is the global loss `Σ nll / Σ count` (0 when nothing is valid, never NaN). The last two
/// rules of [`check_cp_loss`] (`cp-loss-finite`, `cp-loss-reduction`).
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
/// use rules::checks::{LossRecord, Split, check_reported_loss};
/// let global = LossRecord::from_sums(2.2, 5);
/// assert!(check_reported_loss(Split::Cp(2), 0.44, &global, 1e-12).is_ok());
/// // A rank with no valid label: its mean is 0/0, and the mean of the means is NaN.
/// let v = check_reported_loss(Split::Cp(2), f64::NAN, &global, 1e-12).unwrap_err();
/// assert_eq!(v.id, "cp-loss-finite");
/// // An all-ignored batch reports exactly 0.
/// assert!(check_reported_loss(Split::Cp(4), 0.0, &LossRecord::from_sums(0.0, 0), 1e-12).is_ok());
/// ```
pub fn check_reported_loss(split: Split, reported: f64, global: &LossRecord, rtol: f64) -> Checked {
    let input = CpLossInput::Answer { split, parts: None, reported, global, rtol };
    match answer_violations(&input).into_iter().next() {
        Some(v) => Err(v),
        None => Ok(()),
    }
}

fn violation(rule: Rule, split: Split, text: &str) -> Violation {
    rule.violation().rule_text(text).at(Location::default().context(split.to_string()))
}

/// What the reported loss is judged against.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Against {
    /// The global sums (no parts, or parts that add up to them).
    Global,
    /// The parts' own sums (which do not add up to the global ones: `cp-loss-parts`).
    Parts,
}

fn reported_rule(
    split: Split,
    reported: f64,
    sums: &LossRecord,
    against: Against,
    rtol: f64,
    breakdown: &dyn Fn() -> String,
) -> Option<Violation> {
    let own = match against {
        Against::Global => String::new(),
        Against::Parts => "judged against the parts' own sums (they miss the global ones); ".into(),
    };
    if !reported.is_finite() {
        return Some(
            violation(
                CP_LOSS_FINITE,
                split,
                "the reported loss is finite (an empty part contributes 0, never NaN)",
            )
            .expected(sums.mean)
            .got(reported)
            .note(format!("{own}{}", breakdown())),
        );
    }
    if against == Against::Global && sums.count == 0 && reported != 0.0 {
        return Some(
            violation(CP_LOSS_FINITE, split, "the reported loss is 0 when nothing is valid")
                .expected(0.0)
                .got(reported)
                .note(format!("{own}{}", breakdown())),
        );
    }
    // Parts whose Σ NLL is not a number give nothing to judge the reduction against.
    if !sums.mean.is_finite() || close(reported, sums.mean, rtol) {
        return None;
    }
    let text = match against {
        Against::Global => "the reported loss is Σ_r nll_r / Σ_r count_r, the global loss",
        Against::Parts => "the reported loss is Σ_r nll_r / Σ_r count_r of the parts reported",
    };
    Some(violation(CP_LOSS_REDUCTION, split, text).expected(sums.mean).got(reported).note(format!(
        "{own}relative error {:.3e}; {}",
        rel_diff(reported, sums.mean),
        breakdown()
    )))
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
                assert!(a.id.starts_with("cp-loss-"), "{}", a.id);
            }
        }
        // The sums are checked first when the parts are given.
        let lost = [PartLoss { nll: 1.5, count: 2 }, PartLoss { nll: 0.0, count: 0 }];
        let v = check_cp_loss(Split::Cp(2), &lost, 0.5, &global, 1e-12).unwrap_err();
        assert!(v.rule.contains("counts add up"), "{v}");
        assert_eq!(v.at.context.as_deref(), Some("cp=2"));
    }

    /// Each defect breaks its own rule and no other: `--ignore` of one leaves the others seen.
    #[test]
    fn each_defect_is_its_own_rule() {
        let ids = |parts: &[PartLoss], reported: f64, global: &LossRecord| {
            cp_loss_violations(Split::Cp(2), parts, reported, global, 1e-12)
                .iter()
                .map(|v| v.id)
                .collect::<Vec<_>>()
        };
        let global = LossRecord::from_sums(2.2, 5);
        let right = [PartLoss { nll: 0.8, count: 2 }, PartLoss { nll: 1.4, count: 3 }];
        assert!(ids(&right, 0.44, &global).is_empty());
        // The mean of the ranks' means.
        assert_eq!(ids(&right, (0.4 + 1.4 / 3.0) / 2.0, &global), ["cp-loss-reduction"]);
        // NaN, and a non-zero loss when nothing is valid.
        assert_eq!(ids(&right, f64::NAN, &global), ["cp-loss-finite"]);
        let empty = LossRecord::from_sums(0.0, 0);
        let none = [PartLoss::default(), PartLoss::default()];
        assert_eq!(ids(&none, f64::NAN, &empty), ["cp-loss-finite"]);
        assert_eq!(ids(&none, 0.5, &empty), ["cp-loss-finite"]);
        assert!(ids(&none, 0.0, &empty).is_empty());
        // A rank dropped a target and the loss is reduced right from the parts: parts only.
        let dropped = [PartLoss { nll: 0.8, count: 2 }, PartLoss { nll: 0.9, count: 2 }];
        assert_eq!(ids(&dropped, 1.7 / 4.0, &global), ["cp-loss-parts"]);
        // ... and wrongly: both, each with its own text.
        let v = cp_loss_violations(Split::Cp(2), &dropped, 0.4, &global, 1e-12);
        assert_eq!(
            v.iter().map(|v| v.id).collect::<Vec<_>>(),
            ["cp-loss-parts", "cp-loss-reduction"]
        );
        assert!(v[1].rule.contains("of the parts reported"), "{}", v[1]);
        // Parts that sum to NaN give nothing to judge the reduction against.
        let nan = [PartLoss { nll: f64::NAN, count: 2 }, PartLoss { nll: 1.4, count: 3 }];
        assert_eq!(ids(&nan, 0.44, &global), ["cp-loss-parts"]);
    }
}
