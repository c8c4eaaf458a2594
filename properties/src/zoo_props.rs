//! The zoo, caught: every buggy variant of [`crate::zoo`] is run through its invariant's
//! property with a fixed-seed runner; the property must fail, and the shrunk counterexample and
//! the violation it prints are pinned in an insta snapshot (`src/snapshots/`).

use std::fmt::Debug;

use proptest::strategy::Strategy;

use crate::minimal::Minimality;
use crate::selfcheck::{Verdict, ZOO_CASES, run_cases, zoo_minimality, zoo_runner, zoo_variant};
use crate::strategies::{Sizes, arb_cp_loss_case};
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
    Some((report(name, &case, &v), v))
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
    ($(($name:ident, $module:ident, $inv:ident, [$($class:literal),*], $upstream:literal,
            $strategy:expr, $how:ident, $run:expr, $test:ident))*) => {
        $(
            #[test]
            fn $test() {
                caught(stringify!($name), stringify!($test));
            }
        )*
    };
}
crate::zoo::zoo_variants!(zoo_tests);

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

/// Every variant has its test by construction (`zoo_tests!` above); its name is its own.
#[test]
fn every_invariant_has_a_variant_and_every_test_name_is_unique() {
    let mut tests: Vec<&str> = CATALOGUE.iter().map(|e| e.test).collect();
    tests.sort_unstable();
    tests.dedup();
    assert_eq!(tests.len(), CATALOGUE.len(), "two variants share a test (and a snapshot)");
    for inv in Invariant::ALL {
        assert!(CATALOGUE.iter().any(|e| e.caught_by == inv), "no zoo variant for {inv}");
    }
}

/// Every variant's pinned counterexample is 1-minimal: no case one step smaller that its
/// strategy could draw (an example, segment, pair, micro-batch or row removed, a length or a
/// count lowered by one, a CP size halved: `minimal::Reductions`) fails with the same rule.
#[test]
fn every_zoo_counterexample_is_one_minimal() {
    let mut not_minimal = Vec::new();
    for e in CATALOGUE {
        match zoo_minimality(e.name, zoo_runner).expect("a variant") {
            Minimality::Caught { case, failing } if !failing.is_empty() => {
                not_minimal.push(format!(
                    "{}: {} smaller cases fail the same way, e.g.\n{}\nshrunk case:\n{case}",
                    e.name,
                    failing.len(),
                    failing[0]
                ));
            }
            Minimality::Caught { .. } => {}
            Minimality::NotCaught => panic!("{} is not caught", e.name),
        }
    }
    assert!(not_minimal.is_empty(), "{}", not_minimal.join("\n\n"));
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
    let (_, v) = catch(arb_cp_loss_case(Sizes::SMALL), |c| run_cp_loss(&zoo::SplitThenRoll, c));
    assert_eq!(v.invariant, Invariant::CpLoss, "{v}");
}

/// Every bug class of `oracle-anchors.md` §4 (1–24) is reproduced by some variant.
#[test]
fn every_oracle_anchor_class_has_a_variant() {
    let missing: Vec<u8> =
        (1..=24).filter(|c| !CATALOGUE.iter().any(|e| e.classes.contains(c))).collect();
    assert!(missing.is_empty(), "§4 classes without a zoo variant: {missing:?}");
}
