//! `thdcheck fuzz loss`'s cases: one global packed batch ([`CpBatch`]) with its vocabulary and
//! the seed of its labels and logits, sent at every CP size of [`CP_SIZES`]. The command cuts
//! the shards (zigzag or contiguous) and computes the oracle's loss.

use proptest::prelude::*;
use proptest::strategy::{NewTree, ValueTree};
use proptest::test_runner::TestRunner;
use thd::IGNORE_INDEX;

use super::cp_batch::{CpBatch, arb_cp_batch};
use crate::strategies::{mix, noise};

/// The CP sizes every case is sent at, in this order.
pub const CP_SIZES: [usize; 4] = [1, 2, 4, 8];

/// A global batch with its vocabulary and values, and the CP sizes it is sent at.
#[derive(Debug, Clone, PartialEq)]
pub struct LossFuzzCase {
    /// The CP sizes, from [`CP_SIZES`]: all four, fewer only while shrinking.
    pub cps: Vec<usize>,
    /// The batch.
    pub batch: CpBatch,
    /// Vocabulary size.
    pub vocab: usize,
    /// Seed of the labels and logits.
    pub seed: u64,
}

impl LossFuzzCase {
    /// Segment `i`'s token `j`'s label: a token id in `0..vocab`, or -100.
    pub fn label(&self, i: usize, j: usize) -> i64 {
        if self.batch.ignored(i, j) {
            IGNORE_INDEX
        } else {
            (mix(self.seed, &[1, i as u64, j as u64]) % self.vocab as u64) as i64
        }
    }

    /// The logits of segment `i`'s slot token `j` (padding too), in [-3, 3) with two decimals
    /// so that a counterexample reads.
    pub fn logits(&self, i: usize, j: usize) -> Vec<f64> {
        (0..self.vocab)
            .map(|v| (300.0 * noise(self.seed, &[2, i as u64, j as u64, v as u64])).round() / 100.0)
            .collect()
    }
}

/// `thdcheck fuzz loss`'s cases: vocabularies of 2..=8, a seed for labels and logits, and a
/// [`CpBatch`]; every case is sent at cp 1, 2, 4 and 8 ([`CpSizes`]). Shrinking shrinks the
/// batch first (while it fails at some CP size), then drops CP sizes, the largest first, so
/// that the smallest failing one stays.
///
/// # Example
/// ```
/// use proptest::strategy::{Strategy, ValueTree};
/// use proptest::test_runner::TestRunner;
/// use properties::strategies::fuzz::{CP_SIZES, arb_loss_fuzz_case};
/// let case = arb_loss_fuzz_case().new_tree(&mut TestRunner::deterministic()).unwrap().current();
/// assert_eq!(case.cps, CP_SIZES);
/// assert!((2..=8).contains(&case.vocab) && case.logits(0, 0).len() == case.vocab);
/// ```
pub fn arb_loss_fuzz_case() -> impl Strategy<Value = LossFuzzCase> {
    (2usize..=8, 0u64..1000, arb_cp_batch(), CpSizes)
        .prop_map(|(vocab, seed, batch, cps)| LossFuzzCase { cps, batch, vocab, seed })
}

/// The CP sizes of a case: always all of [`CP_SIZES`]; shrinking drops one at a time, the
/// largest first, down to one. It draws nothing from the runner.
#[derive(Debug, Clone, Copy)]
pub struct CpSizes;

impl Strategy for CpSizes {
    type Tree = CpSizesTree;
    type Value = Vec<usize>;

    fn new_tree(&self, _: &mut TestRunner) -> NewTree<Self> {
        Ok(CpSizesTree { kept: CP_SIZES.to_vec(), next: Some(CP_SIZES.len() - 1), undo: None })
    }
}

/// [`CpSizes`]' value tree.
#[derive(Debug, Clone)]
pub struct CpSizesTree {
    kept: Vec<usize>,
    /// The index to try dropping next (counting down).
    next: Option<usize>,
    /// The last drop: its index and CP size.
    undo: Option<(usize, usize)>,
}

impl ValueTree for CpSizesTree {
    type Value = Vec<usize>;

    fn current(&self) -> Vec<usize> {
        self.kept.clone()
    }

    fn simplify(&mut self) -> bool {
        let Some(i) = self.next.filter(|&i| self.kept.len() > 1 && i < self.kept.len()) else {
            return false;
        };
        self.undo = Some((i, self.kept.remove(i)));
        self.next = i.checked_sub(1);
        true
    }

    fn complicate(&mut self) -> bool {
        match self.undo.take() {
            Some((i, cp)) => {
                self.kept.insert(i, cp);
                true
            }
            None => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Shrinking keeps the smallest CP size that still fails.
    #[test]
    fn cp_sizes_shrink_to_the_smallest_failing_one() {
        for (fails, want) in [
            (&[2usize, 4, 8][..], vec![2]),
            (&[8][..], vec![8]),
            (&[1, 2, 4, 8][..], vec![1]),
            (&[4][..], vec![4]),
        ] {
            let mut tree = CpSizes.new_tree(&mut TestRunner::deterministic()).unwrap();
            assert_eq!(tree.current(), CP_SIZES.to_vec());
            let failing = |v: &[usize]| v.iter().any(|c| fails.contains(c));
            while tree.simplify() {
                while !failing(&tree.current()) {
                    if !tree.complicate() {
                        break;
                    }
                }
            }
            assert_eq!(tree.current(), want, "failing at {fails:?}");
        }
    }
}
