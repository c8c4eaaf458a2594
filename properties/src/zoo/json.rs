//! The zoo's cases as JSON (the `serde` feature), for a benchmark against Hypothesis (issue 28,
//! `bench/zoo_vs_hypothesis.py`): a case another tool drew is judged by the variant's own driver
//! ([`judge`]), the variant is searched and shrunk as `selfcheck::zoo_variant` does with the
//! counterexample handed back as JSON ([`search`]), and one size function per case type
//! ([`CaseSize`]) measures both sides' counterexamples alike. `selfcheck`'s `dispatch!` calls
//! these per variant (`zoo_judge`, `zoo_search`, `zoo_size`).

use std::cell::Cell;
use std::fmt::Debug;
use std::panic::{AssertUnwindSafe, catch_unwind};

use proptest::strategy::Strategy;
use proptest::test_runner::TestRunner;
use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::checks::Split;
use crate::minimal::Reductions;
use crate::strategies::{
    AttnCase, CollateCase, CpLossCase, DpoCase, EosCase, FlopsCase, MaskCase, MfuCase,
    PackerStream, SftCase, ShardCase, WorkCase,
};
use crate::subjects::collate_reference;
use crate::{Checked, Verdict, Violation};

/// What [`search`] found: the verdict (as `selfcheck::zoo_variant` gives it), the cases drawn up
/// to and including the first failing one (all of them when none fails), and the shrunk case as
/// JSON.
#[derive(Debug, Clone)]
pub struct ZooSearch {
    /// Held, failed (the shrunk case, `{:#?}`, and its violation) or aborted.
    pub verdict: Verdict,
    /// Cases run before shrinking began (the first failing one included).
    pub cases_tried: u32,
    /// The shrunk case as JSON, when the search failed.
    pub case_json: Option<String>,
}

/// Runs `run` on one case, a panic (a case outside the strategy's domain) as an error.
fn guarded<C>(run: &impl Fn(&C) -> Checked, case: &C) -> Result<Option<Violation>, String> {
    match catch_unwind(AssertUnwindSafe(|| run(case))) {
        Ok(checked) => Ok(checked.err()),
        Err(panic) => Err(format!(
            "the driver panicked on this case (outside the strategy's domain?): {}",
            panic
                .downcast_ref::<String>()
                .map(String::as_str)
                .or_else(|| panic.downcast_ref::<&str>().copied())
                .unwrap_or("a panic")
        )),
    }
}

/// Parses `json` as a case of `strategy`'s type (the strategy is only its type).
fn parse<S: Strategy>(_strategy: &S, json: &str) -> Result<S::Value, String>
where
    S::Value: DeserializeOwned,
{
    serde_json::from_str(json).map_err(|e| format!("not a case of this variant's strategy: {e}"))
}

/// Judges the case `json` (of `strategy`'s type) with `run`: `Ok(None)` when it passes,
/// `Ok(Some(violation))` when it fails.
///
/// # Errors
/// `json` is not such a case, or the driver panicked on it.
pub fn judge<S: Strategy>(
    strategy: S,
    json: &str,
    run: impl Fn(&S::Value) -> Checked,
) -> Result<Option<Violation>, String>
where
    S::Value: DeserializeOwned,
{
    guarded(&run, &parse(&strategy, json)?)
}

/// `run` on `runner`'s cases from `strategy`, shrunk and minimized as
/// [`crate::selfcheck::run_minimized`] does, counting the cases drawn until the first failure;
/// a shrunk case that does not come back equal from its JSON is [`Verdict::Aborted`].
pub fn search<S: Strategy>(
    runner: TestRunner,
    strategy: S,
    run: impl Fn(&S::Value) -> Checked,
) -> ZooSearch
where
    S::Value: Serialize + DeserializeOwned + PartialEq + Reductions + Debug,
{
    let (tried, failed) = (Cell::new(0u32), Cell::new(false));
    let counted = |case: &S::Value| {
        if !failed.get() {
            tried.set(tried.get() + 1);
        }
        let checked = run(case);
        failed.set(failed.get() || checked.is_err());
        checked
    };
    let (verdict, case_json) = match crate::minimal::shrunk(runner, strategy, counted) {
        Ok(None) => (Verdict::Held, None),
        Ok(Some(case)) => {
            let json = serde_json::to_string(&case).expect("a case serializes");
            let back = serde_json::from_str::<S::Value>(&json).map_err(|e| e.to_string());
            match run(&case) {
                _ if back.as_ref() != Ok(&case) => (
                    Verdict::Aborted(format!(
                        "the shrunk case does not round-trip: {json} ({back:?})"
                    )),
                    Some(json),
                ),
                Err(violation) => {
                    (Verdict::Failed { case: format!("{case:#?}"), violation }, Some(json))
                }
                Ok(()) => (
                    Verdict::Aborted(format!("the shrunk case passes on a rerun: {case:?}")),
                    Some(json),
                ),
            }
        }
        Err(why) => (Verdict::Aborted(why), None),
    };
    ZooSearch { verdict, cases_tried: tried.get(), case_json }
}

/// The size of the case `json` of `strategy`'s type ([`CaseSize`]).
///
/// # Errors
/// `json` is not such a case.
pub fn size<S: Strategy>(strategy: S, json: &str) -> Result<Vec<(String, u64)>, String>
where
    S::Value: DeserializeOwned + CaseSize,
{
    let case = parse(&strategy, json)?;
    Ok(case.size().into_iter().map(|(k, v)| (k.to_owned(), v)).collect())
}

/// A counterexample's size, in a few named components (smaller is simpler); the same function
/// measures thdcheck's and Hypothesis's counterexamples.
pub trait CaseSize {
    /// The components, in a fixed order per type.
    fn size(&self) -> Vec<(&'static str, u64)>;
}

fn sum(lens: &[u32]) -> u64 {
    lens.iter().map(|&s| u64::from(s)).sum()
}

fn max(lens: &[u32]) -> u64 {
    lens.iter().copied().max().map_or(0, u64::from)
}

/// Documents, Σ tokens, the longest document.
impl CaseSize for SftCase {
    fn size(&self) -> Vec<(&'static str, u64)> {
        vec![
            ("docs", self.lens.len() as u64),
            ("tokens", sum(&self.lens)),
            ("max", max(&self.lens)),
        ]
    }
}

/// [`SftCase`]'s, and the padding tokens `thd`'s collation of it adds.
impl CaseSize for CollateCase {
    fn size(&self) -> Vec<(&'static str, u64)> {
        let real = sum(&self.sft.lens);
        let stored = collate_reference(&self.sft.examples(), &self.padding)
            .map_or(real, |b| b.num_tokens() as u64);
        let mut out = self.sft.size();
        out.push(("pad", stored.saturating_sub(real)));
        out
    }
}

/// [`CollateCase`]'s.
impl CaseSize for MaskCase {
    fn size(&self) -> Vec<(&'static str, u64)> {
        self.collate.size()
    }
}

/// [`SftCase`]'s and the truncation length.
impl CaseSize for EosCase {
    fn size(&self) -> Vec<(&'static str, u64)> {
        let mut out = self.sft.size();
        out.push(("max_doc_len", self.max_doc_len as u64));
        out
    }
}

/// [`SftCase`]'s and the parts (CP size or micro-batches).
impl CaseSize for CpLossCase {
    fn size(&self) -> Vec<(&'static str, u64)> {
        let mut out = self.sft.size();
        out.push((
            "parts",
            match self.split {
                Split::Cp(cp) => cp as u64,
                Split::MicroBatches(k) => k as u64,
            },
        ));
        out
    }
}

/// [`SftCase`]'s and the CP size.
impl CaseSize for ShardCase {
    fn size(&self) -> Vec<(&'static str, u64)> {
        let mut out = self.sft.size();
        out.push(("cp", self.cp as u64));
        out
    }
}

/// Segments, Σ real query tokens, stored query tokens, query heads, head dim.
impl CaseSize for AttnCase {
    fn size(&self) -> Vec<(&'static str, u64)> {
        vec![
            ("segs", self.lens.len() as u64),
            ("tokens", sum(&self.lens)),
            ("stored", self.tokens_q() as u64),
            ("heads", self.heads as u64),
            ("head_dim", self.head_dim as u64),
        ]
    }
}

/// Pairs, Σ tokens (chosen + rejected), `max_seq_length` (0: none).
impl CaseSize for DpoCase {
    fn size(&self) -> Vec<(&'static str, u64)> {
        vec![
            ("pairs", self.pairs.len() as u64),
            ("tokens", self.pairs.iter().map(|&(c, r)| u64::from(c) + u64::from(r)).sum()),
            ("msl", self.max_seq_length.unwrap_or(0) as u64),
        ]
    }
}

/// Segments (mocks included), Σ real tokens, stored tokens.
impl CaseSize for WorkCase {
    fn size(&self) -> Vec<(&'static str, u64)> {
        vec![
            ("segs", self.real_lens().len() as u64),
            ("tokens", sum(&self.real_lens())),
            ("stored", self.stored_tokens()),
        ]
    }
}

/// Documents, Σ tokens, the longest, the CP size.
impl CaseSize for MfuCase {
    fn size(&self) -> Vec<(&'static str, u64)> {
        vec![
            ("docs", self.lens.len() as u64),
            ("tokens", sum(&self.lens)),
            ("max", max(&self.lens)),
            ("cp", self.cp as u64),
        ]
    }
}

/// Micro-batches, rows, sequences (packed rows), `seq_len`.
impl CaseSize for FlopsCase {
    fn size(&self) -> Vec<(&'static str, u64)> {
        let seqs = self
            .micro_batches
            .iter()
            .filter_map(|m| m.packed.as_ref())
            .flatten()
            .map(|row| row.len() as u64)
            .sum();
        vec![
            ("mbs", self.micro_batches.len() as u64),
            ("rows", self.micro_batches.iter().map(|m| m.rows).sum()),
            ("seqs", seqs),
            ("seq_len", self.seq_len),
        ]
    }
}

/// Examples, Σ tokens (a pair counts both branches), the longest branch, capacity, epochs.
impl CaseSize for PackerStream {
    fn size(&self) -> Vec<(&'static str, u64)> {
        let branches: Vec<u64> =
            self.dataset.iter().flat_map(|e| e.lens.branches().into_iter()).collect();
        vec![
            ("n", self.dataset.len() as u64),
            ("tokens", branches.iter().sum()),
            ("max", branches.iter().copied().max().unwrap_or(0)),
            ("capacity", u64::from(self.capacity)),
            ("epochs", u64::from(self.epochs)),
        ]
    }
}

#[cfg(test)]
mod tests {
    use crate::selfcheck::{Verdict, zoo_judge, zoo_judge_reference, zoo_search, zoo_size};
    use crate::zoo::CATALOGUE;

    /// Every variant's shrunk case comes back as JSON that parses back to the same case (else
    /// the search is aborted), fails the variant's driver with the same invariant and rule, passes the correct
    /// counterpart, and has a size.
    #[test]
    fn shrunk_cases_round_trip_and_still_fail() {
        for entry in CATALOGUE {
            let name = entry.name;
            // A few cases at a time, over seeds until one fails (the rare bugs need more).
            let found = (0..64)
                .map(|seed| zoo_search(name, seed, 64).expect("a catalogued variant"))
                .find(|s| !matches!(s.verdict, Verdict::Held))
                .unwrap_or_else(|| panic!("{name}: not caught in 64 seeds × 64 cases"));
            let Verdict::Failed { violation, .. } = &found.verdict else {
                panic!("{name}: {:?}", found.verdict);
            };
            assert_eq!(violation.invariant, entry.caught_by, "{name}");
            let json = found.case_json.expect("a failed search hands back its case");
            let again = zoo_judge(name, &json).expect("a variant").expect("its own JSON parses");
            let again = again.unwrap_or_else(|| panic!("{name}: {json} passes when judged"));
            assert_eq!((again.invariant, again.id), (violation.invariant, violation.id), "{name}");
            assert_eq!(
                zoo_judge_reference(name, &json).expect("a variant"),
                Ok(None),
                "{name}: the correct counterpart fails {json}"
            );
            let size = zoo_size(name, &json).expect("a variant").expect("its size");
            assert!(!size.is_empty(), "{name}");
        }
    }

    #[test]
    fn bad_json_is_an_error_not_a_panic() {
        for entry in CATALOGUE {
            for bad in ["", "{", "[]", r#"{"lens": "many"}"#, "null"] {
                assert!(
                    matches!(zoo_judge(entry.name, bad), Some(Err(_))),
                    "{}: {bad}",
                    entry.name
                );
                assert!(matches!(zoo_size(entry.name, bad), Some(Err(_))), "{}: {bad}", entry.name);
            }
        }
        assert!(zoo_judge("NoSuchVariant", "{}").is_none());
        assert!(zoo_search("NoSuchVariant", 0, 1).is_none());
    }
}
