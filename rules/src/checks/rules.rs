//! The registry: every rule with an id, once, in report order ([`RULES`]). Each family file
//! declares its rules with `rule!`, next to their messages and judges; this file only lists
//! them, finds them ([`rules_of`], [`LoggedKind::rule`]) and runs them in its order: the rules
//! of one pack ([`check_batch`], [`check_layout`]) and each fuzz target's ([`judge_packer`],
//! [`judge_cp_split`], [`judge_cp_loss`], [`judge_collator`], [`judge_attention`]). No caller
//! keeps a list of its own.

use crate::checks::attention::{
    ATTENTION_CAUSAL, ATTENTION_ISOLATION, ATTENTION_LSE, ATTENTION_OUTPUT, ATTENTION_PADDING,
};
use crate::checks::attn::{ATTN_FINITE, ATTN_ISOLATION, ATTN_ORACLE, ATTN_ROWS};
use crate::checks::batch::{
    BatchFacts, BatchReport, LABEL_TARGETS, MOCK_MARKED, PAD_LABELS, PAD_MULTIPLE, batch_facts,
};
use crate::checks::block_mask::BLOCK_MASK;
use crate::checks::cp_loss::{CP_LOSS_FINITE, CP_LOSS_PARTS, CP_LOSS_REDUCTION};
use crate::checks::cp_shard::{CP_LABELS, CP_POSITION_IDS, CP_SHARD, CP_SPLIT_ACCEPTED};
use crate::checks::dpo::{
    DPO_CONCAT, DPO_OFFSETS, DPO_SEGMENT_COUNT, DPO_SEGMENT_LENGTH, DPO_SEGMENT_ORDER,
    DPO_SEGMENT_TOKENS,
};
use crate::checks::eos::EOS_DELIMITED;
use crate::checks::flops::{
    FLOPS_ADDITIVE, FLOPS_ATTENTION, FLOPS_REAL_TOKENS, FLOPS_TENSOR_TOKENS,
};
use crate::checks::input::{AttentionInput, CpLossInput, CpSplitInput, LoggedKind, PackerInput};
use crate::checks::layout::{
    BATCH_READABLE, CROSS_DOC_LABEL, DOCUMENTS, MASK, MAX_SEQLEN, MOCK_NONEMPTY, NUM_REAL_SEQS,
    OFFSETS, PADDED_SLOTS, POSITION_IDS, QK_OFFSETS, ROW_SLOTS, SEQ_IDX, STATIC_SHAPE,
    TOKEN_COUNTS, offsets, token_counts,
};
use crate::checks::logged::{LOGGED_FLOPS, LOGGED_RATE, LOGGED_TOKENS};
use crate::checks::loss::{LOSS_COUNT, LOSS_EMPTY, LOSS_FINITE, LOSS_MEAN, LOSS_NLL};
use crate::checks::mfu_pad::{
    MFU_HARDWARE, MFU_HARDWARE_FLOPS, MFU_PHYSICAL, MFU_REAL_TOKENS, MFU_USEFUL, MFU_USEFUL_FLOPS,
};
use crate::checks::packer::{
    PACKER_CAPACITY, PACKER_CONSERVATION, PACKER_DEALING, PACKER_DETERMINISTIC, PACKER_DROPS,
    PACKER_FIRST_FIT, PACKER_MIN_PACKS, PACKER_QUALITY,
};
use crate::checks::rule::{BatchInput, Fuzz, FuzzTarget, Outcome, Rule, Status, first_violation};
use crate::checks::tokens_cp::TOKENS_CP;
use crate::checks::view::{BatchOptions, CollatorPack, LayoutView, mock_segments};
use crate::checks::work::{WORK_BOUND, WORK_EXACT, WORK_USEFUL};
use crate::{Checked, Violation};

/// Every rule with an id, in report order.
pub const RULES: &[Rule] = &[
    OFFSETS,
    TOKEN_COUNTS,
    PADDED_SLOTS,
    QK_OFFSETS,
    ROW_SLOTS,
    MAX_SEQLEN,
    NUM_REAL_SEQS,
    MOCK_NONEMPTY,
    POSITION_IDS,
    CROSS_DOC_LABEL,
    PAD_LABELS,
    MASK,
    BLOCK_MASK,
    SEQ_IDX,
    EOS_DELIMITED,
    MOCK_MARKED,
    LABEL_TARGETS,
    PAD_MULTIPLE,
    CP_SHARD,
    DPO_OFFSETS,
    DPO_CONCAT,
    DOCUMENTS,
    BATCH_READABLE,
    STATIC_SHAPE,
    PACKER_DEALING,
    PACKER_CONSERVATION,
    PACKER_CAPACITY,
    PACKER_DROPS,
    PACKER_MIN_PACKS,
    PACKER_FIRST_FIT,
    PACKER_QUALITY,
    PACKER_DETERMINISTIC,
    LOGGED_TOKENS,
    LOGGED_FLOPS,
    LOGGED_RATE,
    CP_LOSS_PARTS,
    CP_LOSS_FINITE,
    CP_LOSS_REDUCTION,
    TOKENS_CP,
    CP_LABELS,
    CP_POSITION_IDS,
    CP_SPLIT_ACCEPTED,
    ATTN_ROWS,
    ATTN_FINITE,
    ATTN_ORACLE,
    ATTN_ISOLATION,
    LOSS_FINITE,
    LOSS_COUNT,
    LOSS_NLL,
    LOSS_EMPTY,
    LOSS_MEAN,
    WORK_USEFUL,
    WORK_BOUND,
    WORK_EXACT,
    MFU_HARDWARE_FLOPS,
    MFU_HARDWARE,
    MFU_PHYSICAL,
    MFU_USEFUL_FLOPS,
    MFU_USEFUL,
    MFU_REAL_TOKENS,
    FLOPS_ATTENTION,
    FLOPS_REAL_TOKENS,
    FLOPS_TENSOR_TOKENS,
    FLOPS_ADDITIVE,
    DPO_SEGMENT_COUNT,
    DPO_SEGMENT_ORDER,
    DPO_SEGMENT_TOKENS,
    DPO_SEGMENT_LENGTH,
    // fuzz attention (issue 41): a user's packed attention against the oracle
    ATTENTION_OUTPUT,
    ATTENTION_ISOLATION,
    ATTENTION_CAUSAL,
    ATTENTION_PADDING,
    ATTENTION_LSE,
];

/// The registry's rules that `target` judges, in registry order.
///
/// # Example
/// ```
/// use rules::checks::{FuzzTarget, rules_of};
/// let ids: Vec<_> = rules_of(FuzzTarget::CpSplit).map(|r| r.id).collect();
/// assert_eq!(ids, ["cp-shard", "cp-labels", "cp-position-ids", "cp-split-accepted"]);
/// ```
pub fn rules_of(target: FuzzTarget) -> impl Iterator<Item = &'static Rule> {
    RULES.iter().filter(move |r| r.fuzz.is_some_and(|f| f.target() == target))
}

impl LoggedKind {
    /// The registry's rule for a logged value of this kind (`Fuzz::Logged(kind)`), if any.
    ///
    /// # Example
    /// ```
    /// use rules::checks::LoggedKind;
    /// assert_eq!(LoggedKind::Flops.rule().map(|r| r.id), Some("logged-flops"));
    /// ```
    pub fn rule(self) -> Option<Rule> {
        RULES.iter().copied().find(|r| matches!(r.fuzz, Some(Fuzz::Logged(k)) if k == self))
    }
}

/// Runs every rule on one pack, in report order. Rules that need what the batch lacks are
/// skipped; skips with nothing to say are left out.
///
/// | id | invariant | function |
/// |---|---|---|
/// | `offsets` | LAYOUT | [`offsets`](crate::checks::offsets) / [`check_offsets`](crate::checks::check_offsets) |
/// | `token-counts` | LAYOUT | [`token_counts`](crate::checks::token_counts) |
/// | `padded-slots` | LAYOUT | [`padded_slots`](crate::checks::padded_slots) |
/// | `qk-offsets` | LAYOUT | [`qk_offsets`](crate::checks::qk_offsets) |
/// | `row-slots` | LAYOUT | [`row_slots`](crate::checks::row_slots) |
/// | `max-seqlen` | LAYOUT | [`max_seqlen`](crate::checks::max_seqlen) |
/// | `num-real-seqs` | LAYOUT | [`num_real_seqs`](crate::checks::num_real_seqs) |
/// | `mock-nonempty` | LAYOUT | [`mock_nonempty`](crate::checks::mock_nonempty) |
/// | `position-ids` | LAYOUT | [`position_ids`](crate::checks::position_ids) |
/// | `cross-doc-label` | LAYOUT | [`cross_doc_label`](crate::checks::cross_doc_label) |
/// | `pad-labels` | LOSS | [`pad_labels`](crate::checks::pad_labels) |
/// | `mask` | LAYOUT | [`mask`](crate::checks::mask) |
/// | `block-mask` | LAYOUT | [`block_mask`](crate::checks::block_mask) (with a 4-D mask) |
/// | `seq-idx` | LAYOUT | [`seq_idx`](crate::checks::seq_idx) |
/// | `eos-delimited` | LAYOUT | [`eos_delimited`](crate::checks::eos_delimited) (documents that end with the EOS) |
/// | `mock-marked` | MFU-PAD | [`mock_marked`](crate::checks::mock_marked) |
/// | `label-targets` | LOSS | [`label_targets`](crate::checks::label_targets) (with `causal`) |
/// | `pad-multiple` | MFU-PAD | [`pad_multiple`](crate::checks::pad_multiple) (with `pad_to_multiple_of`) |
/// | `cp-shard` | CP-SHARD | [`cp_shard`](crate::checks::cp_shard) (with `cp_size`) |
///
/// # Example
/// ```
/// use rules::checks::{BatchOptions, IntSlice, LayoutView, check_batch};
/// let view = LayoutView {
///     num_tokens: 5,
///     input_ids: Some(IntSlice::from(&[5, 6, 7, 8, 9])),
///     cu_seqlens: IntSlice::from(&[0, 3, 5]),
///     position_ids: Some(IntSlice::from(&[0, 1, 2, 3, 4])),
///     ..Default::default()
/// };
/// let report = check_batch(&view, &BatchOptions::default());
/// let violated: Vec<_> = report.outcomes.iter().filter(|o| o.is_violated()).map(|o| o.rule).collect();
/// assert_eq!(violated, ["position-ids"]);
/// assert_eq!(report.facts.useful.sum_squares, 13);
/// ```
pub fn check_batch(view: &LayoutView<'_>, opts: &BatchOptions) -> BatchReport {
    let off = offsets(view);
    let counts = token_counts(view);
    // The view's own tensors: a side tensor of another length (log-probs one short) leaves the
    // layout judgeable, and every other rule runs beside its `token-counts` violation.
    let core = LayoutView { side_tensors: &[], ..*view };
    if off.is_violated() || token_counts(&core).is_violated() {
        // Nothing else can address the tokens.
        return BatchReport { facts: BatchFacts::default(), outcomes: vec![off, counts] };
    }
    let mock = mock_segments(view);
    // The registry's rules of one pack, in its order (`offsets` and `token-counts` above).
    let input = BatchInput { view, mock: &mock, opts };
    let mut outcomes: Vec<Outcome> =
        RULES.iter().filter_map(|r| r.batch.and_then(|run| run(&input))).collect();
    if counts.is_violated() {
        outcomes.insert(0, counts);
    }
    outcomes.retain(|o| !(o.status == Status::Skipped && o.detail.is_empty()));
    BatchReport { facts: batch_facts(view, &mock), outcomes }
}

/// The rules [`check_layout`] runs, in order: a batch's layout on its own.
pub fn layout_rules(view: &LayoutView<'_>) -> Vec<Outcome> {
    let off = offsets(view);
    if off.is_violated() {
        return vec![off];
    }
    let counts = token_counts(view);
    if counts.is_violated() {
        return vec![off, counts];
    }
    let mock = mock_segments(view);
    let opts = BatchOptions::default();
    let input = BatchInput { view, mock: &mock, opts: &opts };
    let layout =
        RULES.iter().filter(|r| r.layout).filter_map(|r| r.batch.and_then(|run| run(&input)));
    [off, counts].into_iter().chain(layout).collect()
}

/// LAYOUT on one packed batch: the first violation of [`layout_rules`].
///
/// ```text
/// cu[0] = 0, cu[i] ≤ cu[i+1], cu[B] ≤ T, every offset ≤ i32::MAX          (real and padded)
/// padded: same B, pᵢ ≥ sᵢ
/// num_real_seqs ≤ B; every mock segment holds ≥ 1 token                 (AReaL #1103)
/// position_ids[startᵢ + j] = base + j                      j < sᵢ        (Megatron #5243, HF #47496)
/// Unshifted: labels[startᵢ₊₁] ≠ input_ids[startᵢ₊₁]   Shifted: labels[startᵢ + sᵢ − 1] ≠ input_ids[startᵢ₊₁]
/// 4-D mask: real query t of segment i sees keys [startᵢ, t + 1)   (bidirectional: [startᵢ, endᵢ))
/// EOS: input_ids[endᵢ − 1] = eos (but a row's last segment), eos ∉ input_ids[startᵢ .. endᵢ − 1]
/// side tensors: T entries each
/// ```
///
/// # Errors
/// The first rule broken, with the segment and token.
///
/// # Example
/// ```
/// use rules::checks::{IntSlice, LayoutView, check_layout};
/// let leak = LayoutView {
///     num_tokens: 5,
///     cu_seqlens: IntSlice::from(&[0, 3, 5]),
///     input_ids: Some(IntSlice::from(&[5, 6, 7, 8, 9])),
///     labels: Some(IntSlice::from(&[-100, 6, 7, 8, 9])),
///     ..Default::default()
/// };
/// let v = check_layout(&leak).unwrap_err();
/// assert_eq!((v.id, v.at.segment, v.at.token), ("cross-doc-label", Some(0), Some(3)));
/// ```
pub fn check_layout(view: &LayoutView<'_>) -> crate::Checked {
    first_violation(&layout_rules(view))
}

/// Runs the registry's judges of one target on `input` in registry order: the first violation,
/// and the id of every rule whose judge applied (`applied`, in order, each once).
fn judge_first<I: ?Sized>(
    input: &I,
    judge: impl Fn(&Fuzz) -> Option<fn(&I) -> Option<Checked>>,
    applied: &mut Vec<&'static str>,
) -> Checked {
    for rule in RULES {
        let Some(run) = rule.fuzz.as_ref().and_then(&judge) else { continue };
        if let Some(checked) = run(input) {
            if !applied.contains(&rule.id) {
                applied.push(rule.id);
            }
            checked?;
        }
    }
    Ok(())
}

/// PACKER at one point of a fuzz run: the registry's packer rules, in order, first violation.
///
/// # Errors
/// The first violation.
pub fn judge_packer(input: &PackerInput<'_>, applied: &mut Vec<&'static str>) -> Checked {
    judge_first(
        input,
        |f| match f {
            Fuzz::Packer(j) => *j,
            _ => None,
        },
        applied,
    )
}

/// A CP splitter's answer (or refusal): the registry's CP-split rules, in order.
///
/// # Errors
/// The first violation.
pub fn judge_cp_split(input: &CpSplitInput<'_>, applied: &mut Vec<&'static str>) -> Checked {
    judge_first(
        input,
        |f| match f {
            Fuzz::CpSplit(j) => *j,
            _ => None,
        },
        applied,
    )
}

/// A collator's batch, after `check`'s rules: the registry's collator rules, in order.
///
/// # Errors
/// The first violation.
pub fn judge_collator(input: &CollatorPack<'_>, applied: &mut Vec<&'static str>) -> Checked {
    judge_first(
        input,
        |f| match f {
            Fuzz::Collator(j) => *j,
            _ => None,
        },
        applied,
    )
}

/// A loss's answers: every rule of the registry's CP-loss rules that `input` breaks, in
/// registry order (each is a defect of its own, so each is reported).
pub fn judge_cp_loss(input: &CpLossInput<'_>, applied: &mut Vec<&'static str>) -> Vec<Violation> {
    let mut out = Vec::new();
    for rule in RULES {
        let Some(Fuzz::CpLoss(Some(run))) = rule.fuzz else { continue };
        if let Some(checked) = run(input) {
            if !applied.contains(&rule.id) {
                applied.push(rule.id);
            }
            out.extend(checked.err());
        }
    }
    out
}

/// An attention's answers: every rule of the registry's attention rules that `input` breaks,
/// in registry order (each is a defect of its own, so each is reported).
pub fn judge_attention(
    input: &AttentionInput<'_>,
    applied: &mut Vec<&'static str>,
) -> Vec<Violation> {
    let mut out = Vec::new();
    for rule in RULES {
        let Some(Fuzz::Attention(Some(run))) = rule.fuzz else { continue };
        if let Some(checked) = run(input) {
            if !applied.contains(&rule.id) {
                applied.push(rule.id);
            }
            out.extend(checked.err());
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::checks::input::{LossRecord, PartLoss, Split};
    use crate::checks::{
        LoggedTolerance, Number, check_logged, check_reported_loss, cp_loss_violations,
    };

    /// `cp_loss_violations` and `check_reported_loss` run the CP-LOSS judges themselves: what
    /// they find is what the registry's run finds on the same answer, in the same order.
    #[test]
    fn the_cp_loss_checks_find_what_the_registry_finds() {
        let global = LossRecord::from_sums(2.2, 5);
        let right = [PartLoss { nll: 0.8, count: 2 }, PartLoss { nll: 1.4, count: 3 }];
        let short = [PartLoss { nll: 0.4, count: 1 }, PartLoss { nll: 0.9, count: 2 }];
        let empty = [PartLoss { nll: 0.0, count: 0 }, PartLoss { nll: 2.2, count: 5 }];
        for parts in [&right[..], &short, &empty] {
            for reported in [0.44, 1.3 / 3.0, (0.4 + 0.45) / 2.0, f64::NAN, 0.0] {
                let ids = |v: Vec<Violation>| v.into_iter().map(|v| v.id).collect::<Vec<_>>();
                let answer = |parts| CpLossInput::Answer {
                    split: Split::Cp(2),
                    parts,
                    reported,
                    global: &global,
                    rtol: 1e-12,
                };
                let mine = cp_loss_violations(Split::Cp(2), parts, reported, &global, 1e-12);
                let registry = judge_cp_loss(&answer(Some(parts)), &mut Vec::new());
                assert_eq!(ids(mine), ids(registry), "{parts:?}, reported {reported}");
                let mine = check_reported_loss(Split::Cp(2), reported, &global, 1e-12).err();
                let registry = judge_cp_loss(&answer(None), &mut Vec::new());
                assert_eq!(ids(mine.into_iter().collect()), ids(registry), "reported {reported}");
            }
        }
    }

    /// `check_logged` judges a value by its kind's rule in the registry.
    #[test]
    fn a_logged_value_breaks_the_registrys_rule_of_its_kind() {
        let tol = LoggedTolerance { rtol: 1e-6, atol: 0.0 };
        for kind in [LoggedKind::Count, LoggedKind::Flops, LoggedKind::Rate] {
            let v = check_logged("key", kind, Number::Int(1), Number::Int(2), tol, &[]);
            assert_eq!(v.err().map(|v| v.id), kind.rule().map(|r| r.id), "{kind:?}");
        }
    }
}
