//! Sequence-length multisets and CP sizes.

use proptest::collection::vec;
use proptest::prelude::*;
use proptest::sample::{Index, select};

/// The bounds of [`arb_seq_lens`]: every length in `min_len..=max_len`, `1..=max_segments` of
/// them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SeqLensParams {
    /// The shortest sequence (0 allows empty ones).
    pub min_len: u32,
    /// The longest sequence.
    pub max_len: u32,
    /// The most sequences (at least 1).
    pub max_segments: usize,
}

/// Sequence lengths in `min_len..=max_len`, `1..=max_segments` of them, in four shapes:
/// arbitrary; 0- and 1-token sequences; all equal; one huge sequence among tiny ones.
///
/// The arbitrary shape comes first, so a shrunk counterexample ends up there.
///
/// # Example
/// ```
/// use proptest::strategy::{Strategy, ValueTree};
/// use proptest::test_runner::TestRunner;
/// use properties::strategies::{SeqLensParams, arb_seq_lens};
/// let mut runner = TestRunner::deterministic();
/// let bounds = SeqLensParams { min_len: 0, max_len: 64, max_segments: 8 };
/// for _ in 0..100 {
///     let lens = arb_seq_lens(bounds).new_tree(&mut runner).unwrap().current();
///     assert!((1..=8).contains(&lens.len()) && lens.iter().all(|&s| s <= 64));
/// }
/// ```
pub fn arb_seq_lens(bounds: SeqLensParams) -> impl Strategy<Value = Vec<u32>> {
    let SeqLensParams { min_len, max_len, max_segments } = bounds;
    assert!(min_len <= max_len && max_segments >= 1);
    let n = 1..=max_segments;
    let tiny_max = (min_len + 1).min(max_len);
    let huge_min = (max_len / 2).max(min_len);
    prop_oneof![
        4 => vec(min_len..=max_len, n.clone()),
        1 => vec(min_len..=tiny_max, n.clone()),
        1 => (min_len..=max_len, n.clone()).prop_map(|(l, n)| vec![l; n]),
        1 => (vec(min_len..=(min_len + 2).min(max_len), 0..max_segments), huge_min..=max_len, any::<Index>())
            .prop_map(|(mut tiny, huge, at)| {
                let i = at.index(tiny.len() + 1);
                tiny.insert(i, huge);
                tiny
            }),
    ]
}

/// A CP size from {1, 2, 4, 8}.
pub fn arb_cp() -> impl Strategy<Value = usize> {
    select(vec![1usize, 2, 4, 8])
}

/// A CP size from {2, 4, 8}.
pub fn arb_cp_gt1() -> impl Strategy<Value = usize> {
    select(vec![2usize, 4, 8])
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::strategy::ValueTree;
    use proptest::test_runner::TestRunner;

    #[test]
    fn seq_lens_cover_every_shape() {
        let mut runner = TestRunner::deterministic();
        let (mut zero, mut equal, mut huge) = (false, false, false);
        for _ in 0..500 {
            let bounds = SeqLensParams { min_len: 0, max_len: 100, max_segments: 8 };
            let l = arb_seq_lens(bounds).new_tree(&mut runner).unwrap().current();
            zero |= l.contains(&0);
            equal |= l.len() > 2 && l.windows(2).all(|w| w[0] == w[1]);
            huge |= l.len() > 2
                && l.iter().filter(|&&s| s >= 50).count() == 1
                && l.iter().filter(|&&s| s <= 2).count() == l.len() - 1;
        }
        assert!(zero && equal && huge, "zero {zero}, equal {equal}, huge {huge}");
    }
}
