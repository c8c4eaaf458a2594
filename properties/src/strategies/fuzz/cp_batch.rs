//! The packed batches the CP targets (`thdcheck fuzz loss`, `fuzz cp-split`) generate: a few
//! short segments, some empty, some mock (padding dressed as a sequence, labels -100), label
//! masks with -100 runs (a prompt, a pattern, everything), and storage slots padded to a
//! multiple of `2·cp` as TransformerEngine and bionemo pad them for the zigzag (of `cp` for a
//! contiguous split), sometimes with one block more. Short segments at cp = 8 leave whole ranks
//! with padding only (empty ranks).

use proptest::collection::vec;
use proptest::prelude::*;
use proptest::strategy::BoxedStrategy;

use crate::strategies::{LabelMask, arb_label_mask};

/// One segment of a generated [`CpBatch`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CpSegment {
    /// Real length (0: an empty segment).
    pub len: u32,
    /// A mock segment: every label is -100.
    pub mock: bool,
    /// One `2·cp` block of padding more than the round-up needs.
    pub slack: bool,
}

/// A packed batch before any CP size is chosen.
#[derive(Debug, Clone, PartialEq)]
pub struct CpBatch {
    /// Which labels of the real segments are -100.
    pub mask: LabelMask,
    /// The segments, in storage order.
    pub segments: Vec<CpSegment>,
}

impl CpBatch {
    /// Real length of every segment.
    pub fn lens(&self) -> Vec<u32> {
        self.segments.iter().map(|s| s.len).collect()
    }

    /// Storage length of every segment's slot at CP size `cp`: with `padded`, the real length
    /// rounded up to a multiple of `2·cp` (no round-up at cp = 1), plus `2·cp` with `slack`;
    /// without, the real length. For a `contiguous` split the blocks are `cp` tokens instead of
    /// `2·cp` (every slot a multiple of `cp`, so the whole pack is too).
    pub fn storage(&self, cp: usize, padded: bool, contiguous: bool) -> Vec<u32> {
        let block = if contiguous { cp as u32 } else { 2 * cp as u32 };
        let unit = if cp == 1 { 1 } else { block };
        self.segments
            .iter()
            .map(|s| {
                if padded {
                    s.len.div_ceil(unit) * unit + if s.slack { block } else { 0 }
                } else {
                    s.len
                }
            })
            .collect()
    }

    /// Storage length of every segment's slot when the splitter pads each sequence itself to
    /// the least multiple of `align·2·cp` tokens (of `align` at cp 1), never a spare block:
    /// SkyRL's `preprocess_packed_seqs`, whose alignment is `tp·cp·2`, `tp` at cp 1
    /// (`--cp-slot-align`, the profile's `[fuzz] cp_slot_align`).
    ///
    /// # Example
    /// ```
    /// use properties::strategies::fuzz::{CpBatch, CpSegment};
    /// use properties::strategies::LabelMask;
    /// let seg = |len| CpSegment { len, mock: false, slack: true };
    /// let batch = CpBatch { mask: LabelMask::None, segments: vec![seg(1), seg(0), seg(5)] };
    /// assert_eq!(batch.aligned_storage(1, 1), vec![1, 0, 5]);
    /// assert_eq!(batch.aligned_storage(1, 2), vec![2, 0, 6]);
    /// assert_eq!(batch.aligned_storage(2, 2), vec![8, 0, 8]);
    /// ```
    pub fn aligned_storage(&self, cp: usize, align: u32) -> Vec<u32> {
        let align = align.max(1);
        let unit = if cp == 1 { align } else { 2 * cp as u32 * align };
        self.segments.iter().map(|s| s.len.div_ceil(unit) * unit).collect()
    }

    /// Storage length of every slot for a split of the whole pack as one sequence in `2·cp`
    /// chunks (Megatron-LM's per-sequence zigzag): the real lengths, and, when `padded`, the
    /// last slot grown until the pack is a multiple of `2·cp` (the row padded at its end).
    ///
    /// # Example
    /// ```
    /// use proptest::strategy::{Strategy, ValueTree};
    /// use proptest::test_runner::TestRunner;
    /// use properties::strategies::fuzz::arb_cp_batch;
    /// let batch = arb_cp_batch().new_tree(&mut TestRunner::deterministic()).unwrap().current();
    /// let storage = batch.sequence_storage(4, true);
    /// assert_eq!(storage.iter().sum::<u32>() % 8, 0);
    /// ```
    pub fn sequence_storage(&self, cp: usize, padded: bool) -> Vec<u32> {
        let mut out: Vec<u32> = self.segments.iter().map(|s| s.len).collect();
        let block = 2 * cp as u32;
        if padded && cp > 1 {
            let total: u32 = out.iter().sum();
            if let Some(last) = out.last_mut() {
                *last += (block - total % block) % block;
            }
        }
        out
    }

    /// Every storage token of `storage`, in order: `(segment, offset, real)`.
    pub fn slots(&self, storage: &[u32]) -> Vec<(usize, usize, bool)> {
        let mut out = Vec::new();
        for (i, (s, &p)) in self.segments.iter().zip(storage).enumerate() {
            out.extend((0..p as usize).map(|j| (i, j, j < s.len as usize)));
        }
        out
    }

    /// Whether the label of segment `i`'s real token `j` is -100 (a mock segment, or masked).
    pub fn ignored(&self, i: usize, j: usize) -> bool {
        if self.segments[i].mock {
            return true;
        }
        // The pattern runs over the real tokens of the whole batch.
        let t = self.segments[..i].iter().map(|s| s.len as usize).sum::<usize>() + j;
        match &self.mask {
            LabelMask::None => false,
            LabelMask::All => true,
            LabelMask::Prompt(k) => j < *k as usize,
            LabelMask::Pattern(p) => !p.is_empty() && p[t % p.len()],
        }
    }
}

/// 1..=4 segments of 0..=12 real tokens; 3 in 20 mock, 1 in 5 with a block of slack; label
/// masks from [`arb_label_mask`] (none, a prompt, a pattern, all). Everything shrinks towards
/// one unmasked segment of no tokens.
///
/// # Example
/// ```
/// use proptest::strategy::{Strategy, ValueTree};
/// use proptest::test_runner::TestRunner;
/// use properties::strategies::fuzz::arb_cp_batch;
/// let batch = arb_cp_batch().new_tree(&mut TestRunner::deterministic()).unwrap().current();
/// assert!((1..=4).contains(&batch.segments.len()));
/// assert!(batch.storage(2, true, false).iter().all(|s| s % 4 == 0));
/// ```
pub fn arb_cp_batch() -> impl Strategy<Value = CpBatch> {
    arb_cp_batch_aligned(1)
}

/// The longest document [`arb_cp_batch`] draws.
pub const CP_DOC_MAX: u32 = 12;

/// [`arb_cp_batch`] for slots the splitter pads itself to multiples of `align·2·cp` tokens
/// (`--cp-slot-align`): a chunk of such a slot holds `align` tokens or more, so documents of at
/// most [`CP_DOC_MAX`] tokens never cross one once `align` is 12 or more, and a split that
/// breaks only across a chunk (labels rolled after the split) passed every case. The document
/// lengths scale with the slot: when `4·align` is over [`CP_DOC_MAX`], a document is drawn in
/// equal parts from `0..=12` (as before, and where shrinking goes first), from `0..=4·align`
/// (up to four chunks of the smallest slot), or at a chunk boundary (`j·align − 1`, `j·align`,
/// `j·align + 1` for `j` in 1..=4); at a smaller `align` the strategy is [`arb_cp_batch`]'s
/// (the same cases, seed for seed).
///
/// # Example
/// ```
/// use proptest::strategy::{Strategy, ValueTree};
/// use proptest::test_runner::TestRunner;
/// use properties::strategies::fuzz::arb_cp_batch_aligned;
/// let mut runner = TestRunner::deterministic();
/// let longest = (0..200)
///     .map(|_| arb_cp_batch_aligned(16).new_tree(&mut runner).unwrap().current())
///     .flat_map(|b| b.lens())
///     .max();
/// assert!(longest.unwrap() > 16 && longest.unwrap() <= 4 * 16 + 1);
/// ```
pub fn arb_cp_batch_aligned(align: u32) -> BoxedStrategy<CpBatch> {
    let segment = (doc_len(align), prop::bool::weighted(0.15), prop::bool::weighted(0.2))
        .prop_map(|(len, mock, slack)| CpSegment { len, mock, slack });
    (arb_label_mask(), vec(segment, 1..=4))
        .prop_map(|(mask, segments)| CpBatch { mask, segments })
        .boxed()
}

/// A document's real length for slots aligned to `align` ([`arb_cp_batch_aligned`]).
fn doc_len(align: u32) -> BoxedStrategy<u32> {
    let chunk = align.max(1);
    let long = chunk.saturating_mul(4);
    if long <= CP_DOC_MAX {
        return (0..=CP_DOC_MAX).boxed();
    }
    prop_oneof![
        0..=CP_DOC_MAX,
        0..=long,
        (1..=4u32, 0..=2u32).prop_map(move |(j, d)| (j * chunk + d).saturating_sub(1)),
    ]
    .boxed()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn storage_rounds_up_to_two_cp_blocks() {
        let b = CpBatch {
            mask: LabelMask::Prompt(1),
            segments: vec![
                CpSegment { len: 3, mock: false, slack: false },
                CpSegment { len: 0, mock: false, slack: true },
                CpSegment { len: 4, mock: true, slack: false },
            ],
        };
        assert_eq!(b.storage(1, true, false), vec![3, 2, 4]);
        assert_eq!(b.storage(2, true, false), vec![4, 4, 4]);
        assert_eq!(b.storage(8, true, false), vec![16, 16, 16]);
        assert_eq!(b.storage(4, false, false), vec![3, 0, 4]);
        assert_eq!(b.storage(2, true, true), vec![4, 2, 4]);
        assert_eq!(b.storage(4, true, true), vec![4, 4, 4]);
        assert_eq!(b.storage(1, true, true), vec![3, 1, 4]);
        assert_eq!(
            b.slots(&[4, 0, 1]),
            vec![(0, 0, true), (0, 1, true), (0, 2, true), (0, 3, false), (2, 0, true)]
        );
        assert!(b.ignored(0, 0) && !b.ignored(0, 1) && b.ignored(2, 3));
    }
}
