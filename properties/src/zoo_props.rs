//! The zoo, caught: every buggy variant of [`crate::zoo`] is run through its invariant's
//! property with a fixed-seed runner; the property must fail, and the shrunk counterexample and
//! the violation it prints are pinned in an insta snapshot (`src/snapshots/`).

use std::fmt::Debug;

use proptest::strategy::Strategy;

use crate::selfcheck::{Verdict, ZOO_CASES, run_cases, zoo_runner, zoo_variant};
use crate::strategies::arb_cp_loss_case;
use crate::subjects::run_cp_loss;
use crate::zoo::{self, CATALOGUE};
use crate::{Checked, Invariant, Violation};

/// Runs `run` on the zoo runner's cases until it fails; returns the shrunk case and its
/// violation.
fn catch<S>(strategy: S, run: impl Fn(&S::Value) -> Checked) -> (String, Violation)
where
    S: Strategy,
    S::Value: Debug,
{
    caught_or_panic(run_cases(zoo_runner(), strategy, run))
}

fn caught_or_panic(verdict: Verdict) -> (String, Violation) {
    match verdict {
        Verdict::Failed { case, violation } => (case, violation),
        Verdict::Aborted(why) => panic!("aborted: {why}"),
        Verdict::Held => {
            panic!("the variant passed {ZOO_CASES} cases: the property cannot see it")
        }
    }
}

/// Cuts every decimal fraction to 9 digits, so that the last bits of a float (which may differ
/// between the AVX2 and scalar kernels) do not make snapshots flaky.
fn round_floats(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut digits_after_dot: Option<usize> = None;
    let mut prev = ' ';
    for c in text.chars() {
        match (c, digits_after_dot) {
            ('.', None) if prev.is_ascii_digit() => {
                digits_after_dot = Some(0);
                out.push(c);
            }
            (d, Some(n)) if d.is_ascii_digit() => {
                if n < 9 {
                    out.push(d);
                }
                digits_after_dot = Some(n + 1);
            }
            _ => {
                digits_after_dot = None;
                out.push(c);
            }
        }
        prev = c;
    }
    out
}

fn report(name: &str, case: &str, v: &Violation) -> String {
    let entry = CATALOGUE.iter().find(|e| e.name == name).expect("catalogued");
    let classes = if entry.classes.is_empty() {
        "-".to_string()
    } else {
        entry.classes.iter().map(|c| format!("#{c}")).collect::<Vec<_>>().join(", ")
    };
    round_floats(&format!(
        "variant: zoo::{name}\nupstream: {}\noracle-anchors §4: {classes}\ncaught by: {}\n\nminimal input:\n{case}\n\nviolation:\n{v}\n",
        entry.upstream, v.invariant
    ))
}

/// The shrunk counterexample of variant `name` as the pinned report, and its violation, or
/// `None` if `name` is not a variant.
fn pin(name: &str) -> Option<(String, Violation)> {
    let (case, v) = caught_or_panic(zoo_variant(name, zoo_runner)?);
    let shown = if name == "MeanOfMicroBatchMeans" { "MeanOfRankMeans" } else { name };
    Some((report(shown, &case, &v), v))
}

/// Catches `name`, checks the invariant that caught it, and pins the report.
fn caught(name: &str, snapshot: &str) {
    let (text, v) = pin(name).unwrap_or_else(|| panic!("{name} is not a zoo variant"));
    let entry = CATALOGUE.iter().find(|e| e.name == name).expect("catalogued");
    assert_eq!(v.invariant, entry.caught_by, "{name} was caught by the wrong invariant:\n{text}");
    assert_registered(name, &v);
    // The violation is read by users: no Rust `Option` in it (the case dump above it is Rust's).
    let said = format!("{v}");
    assert!(!said.contains("Some(") && !said.contains("None,"), "{name}: {said}");
    insta::assert_snapshot!(snapshot, text);
}

/// Every violation that catches a zoo bug names a rule of the registry, of its invariant: a
/// check that builds a violation without a rule id is a check `--ignore`, `expected.toml` and
/// the docs cannot name.
fn assert_registered(name: &str, v: &Violation) {
    let rule = crate::checks::RULES.iter().find(|r| r.id == v.id);
    assert!(
        rule.is_some_and(|r| r.invariant == v.invariant),
        "{name} was caught by a violation whose id {:?} is no registered rule of {}:\n{v}",
        v.id,
        v.invariant
    );
}

macro_rules! zoo_tests {
    ($($test:ident => $name:literal),* $(,)?) => {
        $(
            #[test]
            fn $test() {
                caught($name, stringify!($test));
            }
        )*
        /// Every catalogued variant has a test above.
        const TESTED: &[&str] = &[$($name),*];
    };
}

zoo_tests! {
    layout_catches_label_leak => "LabelLeak",
    layout_catches_positions_not_reset => "PositionsNotReset",
    layout_catches_zero_based_positions => "ZeroBasedPositions",
    layout_catches_duplicate_zero_length_segment => "DuplicateZeroLengthSegment",
    attn_catches_no_document_mask => "NoDocumentMask",
    attn_catches_ring_attention_ignoring_documents => "RingAttentionIgnoresDocuments",
    attn_catches_ignored_padded_offsets => "IgnoresPaddedOffsets",
    attn_catches_attending_to_padding => "AttendsToPadding",
    attn_catches_nan_on_keyless_rows => "NanOnKeylessRows",
    loss_catches_nan_when_all_ignored => "NanWhenAllIgnored",
    loss_catches_labels_not_shifted => "LabelsNotShifted",
    cp_loss_catches_mean_of_rank_means => "MeanOfRankMeans",
    cp_loss_catches_one_shard_denominator => "OneShardDenominator",
    cp_loss_catches_nan_on_empty_rank => "NanOnEmptyRank",
    cp_shard_catches_split_then_roll => "SplitThenRoll",
    cp_shard_catches_truncating_split => "TruncatingSplit",
    cp_shard_catches_local_position_ids => "LocalPositionIds",
    cp_shard_catches_roll_with_unpadded_offsets => "RollWithUnpaddedOffsets",
    cp_shard_catches_overlapping_contiguous_split => "OverlappingContiguousSplit",
    tokens_cp_catches_rank_zero_stats => "RankZeroStats",
    tokens_cp_catches_loss_times_cp => "LossTimesCp",
    tokens_cp_catches_padded_tokens_counted => "PaddedTokensCounted",
    work_catches_pack_length_squared => "PackLengthSquared",
    mfu_pad_catches_mock_counted_as_useful => "MockCountedAsUseful",
    mfu_pad_catches_padded_lengths_as_real => "PaddedLengthsAsReal",
    mfu_pad_catches_absorbed_trailing_pad => "AbsorbedTrailingPad",
    mfu_pad_catches_full_square_causal => "FullSquareCausal",
    flops_catches_config_seq_length => "ConfigSeqLength",
    flops_catches_first_sample_offsets => "FirstSampleOffsets",
    dpo_catches_unpadded_chosen_offset => "UnpaddedChosenOffset",
    dpo_catches_plain_open_instruct_offsets => "PlainOpenInstructOffsets",
    dpo_catches_seq_idx_from_last_token => "SeqIdxFromLastToken",
    layout_catches_mask_not_reset => "MaskNotReset",
    layout_catches_eos_truncated_away => "EosTruncatedAway",
    layout_catches_logprobs_one_short => "LogprobsOneShort",
    packer_catches_drops_overflow => "DropsOverflow",
    packer_catches_drops_carry_at_epoch_end => "DropsCarryAtEpochEnd",
    packer_catches_keeps_over_long_example => "KeepsOverLongExample",
    packer_catches_starved_best_fit => "StarvedBestFit",
    packer_catches_unseeded_shuffle => "UnseededShuffle",
}

/// Gradient accumulation: the mean of micro-batch means, caught by the same property.
#[test]
fn cp_loss_catches_mean_of_micro_batch_means() {
    let (text, v) = pin("MeanOfMicroBatchMeans").expect("a variant");
    assert_eq!(v.invariant, Invariant::CpLoss);
    assert_registered("MeanOfMicroBatchMeans", &v);
    insta::assert_snapshot!("cp_loss_catches_mean_of_micro_batch_means", text);
}

/// The planted bugs of the formats beyond offsets are caught by the rule written for them, not
/// by a neighbour that happens to notice.
#[test]
fn format_variants_are_caught_by_their_rule() {
    for (name, rule) in [
        ("MaskNotReset", "block-mask"),
        ("EosTruncatedAway", "eos-delimited"),
        ("LogprobsOneShort", "token-counts"),
    ] {
        let (text, v) = pin(name).expect("a variant");
        assert_eq!(v.id, rule, "{name} was caught by the wrong rule:\n{text}");
    }
}

/// A contiguous split whose pieces overlap is caught by `cp-shard`, which names the token both
/// ranks hold and the rank that should not hold it.
#[test]
fn overlapping_contiguous_split_names_the_token_on_two_ranks() {
    let (text, v) = pin("OverlappingContiguousSplit").expect("a variant");
    assert_eq!((v.id, v.got.as_str()), ("cp-shard", "held by ranks 0 and 1"), "{text}");
    assert_eq!(v.at.rank, Some(0), "{text}");
    assert!(v.expected.starts_with("held by rank 1 only"), "{text}");
}

#[test]
fn every_variant_is_tested_and_every_invariant_has_one() {
    for e in CATALOGUE {
        assert!(TESTED.contains(&e.name), "{} has no zoo test", e.name);
    }
    for inv in Invariant::ALL {
        assert!(CATALOGUE.iter().any(|e| e.caught_by == inv), "no zoo variant for {inv}");
    }
}

#[test]
fn round_floats_cuts_long_fractions_only() {
    assert_eq!(
        round_floats("1.23456789012345 vs 7.5, v1.2 [0.1, 2]"),
        "1.234567890 vs 7.5, v1.2 [0.1, 2]"
    );
}

/// A variant caught by one invariant is often caught by another: split-then-roll labels also
/// break the CP-local loss.
#[test]
fn split_then_roll_is_also_caught_by_cp_loss() {
    let (_, v) = catch(arb_cp_loss_case(6, 24), |c| run_cp_loss(&zoo::SplitThenRoll, c));
    assert_eq!(v.invariant, Invariant::CpLoss, "{v}");
}

/// Every bug class of `oracle-anchors.md` §4 (1–24) is reproduced by some variant.
#[test]
fn every_oracle_anchor_class_has_a_variant() {
    let missing: Vec<u8> =
        (1..=24).filter(|c| !CATALOGUE.iter().any(|e| e.classes.contains(c))).collect();
    assert!(missing.is_empty(), "§4 classes without a zoo variant: {missing:?}");
}
