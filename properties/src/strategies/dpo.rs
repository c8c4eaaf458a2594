//! DPO preference pairs and budgets.

use proptest::collection::vec;
use proptest::prelude::*;
use thd::collate::{Document, DpoExample};

/// DPO pairs `(chosen length, rejected length)` and the per-branch budget / static length.
#[derive(Debug, Clone, PartialEq, Eq)]
#[cfg_attr(any(test, feature = "serde"), derive(serde::Serialize, serde::Deserialize))]
pub struct DpoCase {
    /// Chosen and rejected lengths of every pair (each ≥ 1).
    pub pairs: Vec<(u32, u32)>,
    /// open-instruct `max_seq_length`: the budget per branch and the static pack length.
    pub max_seq_length: Option<usize>,
}

impl DpoCase {
    /// Tag of pair `k`'s tokens on a branch: chosen `1 + 2k`, rejected `2 + 2k` (padding is 0).
    pub fn tag(k: usize, rejected: bool) -> i64 {
        1 + 2 * k as i64 + i64::from(rejected)
    }

    /// The pairs as a collator receives them, every token id its tag, labels the tokens.
    pub fn examples(&self) -> Vec<DpoExample> {
        self.pairs
            .iter()
            .enumerate()
            .map(|(k, &(c, r))| DpoExample {
                chosen: Document::new(vec![Self::tag(k, false); c as usize]),
                rejected: Document::new(vec![Self::tag(k, true); r as usize]),
                index: k as i64,
            })
            .collect()
    }
}

/// A [`DpoCase`]: 1–5 pairs of 1–16 tokens per branch; a budget (3 in 4) of the longest single
/// branch plus 0–40 tokens, so a lone pair always fits.
pub fn arb_dpo_case() -> impl Strategy<Value = DpoCase> {
    // Knobs before data: proptest shrinks a tuple left to right, once.
    let budget = prop_oneof![3 => (0usize..=40).prop_map(Some), 1 => Just(None)];
    (budget, vec((1u32..=16, 1u32..=16), 1..=5)).prop_map(|(extra, pairs)| {
        let longest = pairs.iter().map(|&(c, r)| c.max(r)).max().unwrap_or(1) as usize;
        DpoCase { max_seq_length: extra.map(|e| longest + e), pairs }
    })
}
