//! `thdcheck fuzz collator`'s cases: examples as token ids (single sequences, or DPO pairs) and
//! the static `max_seq_length` a request may ask for. The command turns a case into its
//! protocol request (`CollatorRequest`, pairs numbered by position).

use proptest::collection::vec;
use proptest::prelude::*;
use proptest::strategy::BoxedStrategy;

/// One example of a collator request, as token ids.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CollatorInput {
    /// One sequence (SFT).
    Single(Vec<i64>),
    /// A preference pair (DPO).
    Pair {
        /// The chosen branch.
        chosen: Vec<i64>,
        /// The rejected branch.
        rejected: Vec<i64>,
    },
}

/// A generated collator request: the examples, in order, and the static pack length asked for
/// (per branch for pairs), if any.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CollatorFuzzCase {
    /// Static pack length; `None`: no static padding.
    pub max_seq_length: Option<u64>,
    /// The examples, in order.
    pub examples: Vec<CollatorInput>,
}

/// Which requests ask for a static `max_seq_length` (the command's `--static-length`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum StaticLength {
    /// Half the requests, at or above what the examples need.
    #[default]
    Sometimes,
    /// No request: `max_seq_length` is always `None`.
    Never,
    /// Every request.
    Always,
}

/// What [`arb_collator_fuzz_case`] draws: the collator command's flags that shape the cases.
/// The default is `thdcheck fuzz collator` without flags.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CollatorFuzzParams {
    /// Every example is a DPO pair (`--mode dpo`), else a single sequence.
    pub pairs: bool,
    /// The pad id (`--pad-token-id`, or the profile's): it comes up among the token ids, but
    /// no example is made only of it.
    pub pad_token_id: Option<i64>,
    /// Tokens the collator adds to every example (`--add-bos`, `--add-eos`): a static length
    /// leaves room for them.
    pub added_tokens: usize,
    /// Which requests ask for a static length (`--static-length`).
    pub static_length: StaticLength,
    /// One request in four with a static length gets less than its examples need, but room
    /// for the first one (`--over-budget`): the collator's budget filter runs.
    pub over_budget: bool,
}

/// Token ids, `1..=max_len` of them: mostly large, but 0 (a common pad id) and the pad id (when
/// given) come up regularly, so a mask or a split built from token values is caught. An example
/// is never made only of the pad id: without a mask, that is a mock segment by definition.
///
/// # Example
/// ```
/// use proptest::strategy::{Strategy, ValueTree};
/// use proptest::test_runner::TestRunner;
/// use properties::strategies::fuzz::arb_token_ids;
/// let mut runner = TestRunner::deterministic();
/// for _ in 0..100 {
///     let ids = arb_token_ids(3, Some(5)).new_tree(&mut runner).unwrap().current();
///     assert!((1..=3).contains(&ids.len()) && ids.iter().any(|&t| t != 5));
/// }
/// ```
pub fn arb_token_ids(max_len: usize, pad: Option<i64>) -> BoxedStrategy<Vec<i64>> {
    let id = match pad {
        Some(p) if p != 0 => prop_oneof![8 => 1i64..=50_000, 1 => Just(0i64), 1 => Just(p)].boxed(),
        _ => prop_oneof![8 => 1i64..=50_000, 2 => Just(0i64)].boxed(),
    };
    vec(id, 1..=max_len)
        .prop_map(move |mut ids| {
            if let Some(p) = pad.filter(|&p| ids.iter().all(|&t| t == p)) {
                ids[0] = if p == 1 { 2 } else { 1 };
            }
            ids
        })
        .boxed()
}

/// Tokens per branch: `[Σ]` for single sequences, `[Σ chosen, Σ rejected]` for pairs, with
/// `added` tokens more per example.
fn branch_totals(examples: &[CollatorInput], added: usize) -> Vec<usize> {
    let mut sft = 0;
    let (mut c, mut r) = (0, 0);
    for e in examples {
        match e {
            CollatorInput::Single(ids) => sft += ids.len() + added,
            CollatorInput::Pair { chosen, rejected } => {
                c += chosen.len() + added;
                r += rejected.len() + added;
            }
        }
    }
    if c + r > 0 { vec![c, r] } else { vec![sft] }
}

/// `thdcheck fuzz collator`'s cases. Single sequences: 1..=6 examples of 1..=12 tokens; pairs:
/// 1..=4 pairs of 1..=8 tokens each side ([`arb_token_ids`]). Half the requests
/// ([`StaticLength`]: none, or all) ask for static padding to a `max_seq_length` that the
/// examples (with the added tokens) fit, 0..=6 tokens above what they need; with
/// `over_budget`, one of those in four gets less (but room for the first example).
///
/// # Example
/// ```
/// use proptest::strategy::{Strategy, ValueTree};
/// use proptest::test_runner::TestRunner;
/// use properties::strategies::fuzz::{
///     CollatorFuzzParams, CollatorInput, StaticLength, arb_collator_fuzz_case,
/// };
/// let params = CollatorFuzzParams { static_length: StaticLength::Always, ..Default::default() };
/// let mut runner = TestRunner::deterministic();
/// let case = arb_collator_fuzz_case(params).new_tree(&mut runner).unwrap().current();
/// let need: usize = case
///     .examples
///     .iter()
///     .map(|e| match e {
///         CollatorInput::Single(ids) => ids.len(),
///         CollatorInput::Pair { .. } => unreachable!("single sequences"),
///     })
///     .sum();
/// assert!(case.max_seq_length.is_some_and(|m| m >= need as u64));
/// ```
pub fn arb_collator_fuzz_case(params: CollatorFuzzParams) -> BoxedStrategy<CollatorFuzzCase> {
    let pad = params.pad_token_id;
    let added = params.added_tokens;
    let examples = if params.pairs {
        vec((arb_token_ids(8, pad), arb_token_ids(8, pad)), 1..=4)
            .prop_map(|pairs| {
                pairs
                    .into_iter()
                    .map(|(chosen, rejected)| CollatorInput::Pair { chosen, rejected })
                    .collect()
            })
            .boxed()
    } else {
        vec(arb_token_ids(12, pad).prop_map(CollatorInput::Single), 1..=6).boxed()
    };
    let extra = match params.static_length {
        StaticLength::Sometimes => prop::option::of(0u64..=6).boxed(),
        StaticLength::Never => Just(None).boxed(),
        StaticLength::Always => (0u64..=6).prop_map(Some).boxed(),
    };
    let over = params.over_budget;
    (examples, extra, 0u64..4, any::<proptest::sample::Index>())
        .prop_map(move |(examples, extra, coin, at)| {
            // With BOS / EOS the collator's examples are longer: the static length fits them.
            let need = branch_totals(&examples, added).into_iter().max().unwrap_or(0) as u64;
            let first = branch_totals(&examples[..1.min(examples.len())], added).into_iter().max();
            let first = first.unwrap_or(0) as u64;
            // One request in four gets less than the examples need (but room for the first
            // one), so the collator's budget filter runs.
            let max_seq_length = match extra {
                Some(_) if over && coin == 0 && first < need => {
                    Some(first + at.index((need - first) as usize) as u64)
                }
                e => e.map(|e| need + e),
            };
            CollatorFuzzCase { max_seq_length, examples }
        })
        .boxed()
}
