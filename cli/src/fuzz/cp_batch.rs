//! The packed batches the CP targets (`loss`, `cp-split`) generate: a few short segments, some
//! empty, some mock (padding dressed as a sequence, labels -100), label masks with -100 runs
//! (a prompt, a pattern, everything), and storage slots padded to a multiple of `2·cp` as
//! TransformerEngine and bionemo pad them for the zigzag (of `cp` for a contiguous split),
//! sometimes with one block more. Short segments at cp = 8 leave whole ranks with padding only
//! (empty ranks).

use properties::strategies::{LabelMask, arb_label_mask};
use proptest::collection::vec;
use proptest::prelude::*;

/// One segment of a generated batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Segment {
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
    pub segments: Vec<Segment>,
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

impl CpBatch {
    /// Real tokens whose label is not -100.
    fn valid(&self) -> usize {
        (0..self.segments.len())
            .map(|i| (0..self.segments[i].len as usize).filter(|&j| !self.ignored(i, j)).count())
            .sum()
    }

    /// What a reduction must lower, lexicographically: real tokens, segments, mock segments,
    /// slack blocks, valid labels. Every reduction lowers it, so minimizing ends.
    fn size(&self) -> (u64, usize, usize, usize, usize) {
        (
            self.segments.iter().map(|s| u64::from(s.len)).sum(),
            self.segments.len(),
            self.segments.iter().filter(|s| s.mock).count(),
            self.segments.iter().filter(|s| s.slack).count(),
            self.valid(),
        )
    }

    /// Smaller batches, the biggest cuts first: a segment removed (one is kept), a segment
    /// emptied, halved or one token shorter, a mock segment made plain, a slack block removed,
    /// then fewer valid labels (every label ignored, a prompt one token longer, one more flag of
    /// the pattern set). Each is smaller by [`CpBatch::size`].
    pub fn reductions(&self) -> Vec<CpBatch> {
        let mut out = Vec::new();
        let with = |f: &dyn Fn(&mut CpBatch)| {
            let mut b = self.clone();
            f(&mut b);
            b
        };
        for i in 0..self.segments.len() {
            if self.segments.len() > 1 {
                out.push(with(&|b| {
                    b.segments.remove(i);
                }));
            }
        }
        for (i, seg) in self.segments.iter().enumerate() {
            let mut lens = vec![0, seg.len / 2, seg.len.saturating_sub(1)];
            lens.retain(|&l| l < seg.len);
            lens.dedup();
            for l in lens {
                out.push(with(&|b| b.segments[i].len = l));
            }
        }
        for i in 0..self.segments.len() {
            out.push(with(&|b| b.segments[i].mock = false));
            out.push(with(&|b| b.segments[i].slack = false));
        }
        out.push(with(&|b| b.mask = LabelMask::All));
        let longest = self.segments.iter().map(|s| s.len).max().unwrap_or(0);
        match &self.mask {
            LabelMask::None => out.push(with(&|b| b.mask = LabelMask::Prompt(1))),
            LabelMask::Prompt(k) if *k < longest => {
                out.push(with(&|b| b.mask = LabelMask::Prompt(k + 1)));
            }
            LabelMask::Pattern(p) => {
                for (t, _) in p.iter().enumerate().filter(|(_, ignored)| !**ignored) {
                    out.push(with(&|b| {
                        if let LabelMask::Pattern(q) = &mut b.mask {
                            q[t] = true;
                        }
                    }));
                }
            }
            _ => {}
        }
        let size = self.size();
        out.retain(|b| b.size() < size);
        out
    }
}

/// 1..=4 segments of 0..=12 real tokens; 3 in 20 mock, 1 in 5 with a block of slack; label
/// masks from `properties::strategies::arb_label_mask` (none, a prompt, a pattern, all).
/// Everything shrinks towards one unmasked segment of no tokens.
pub fn arb_cp_batch() -> impl Strategy<Value = CpBatch> {
    let segment = (0u32..=12, prop::bool::weighted(0.15), prop::bool::weighted(0.2))
        .prop_map(|(len, mock, slack)| Segment { len, mock, slack });
    (arb_label_mask(), vec(segment, 1..=4)).prop_map(|(mask, segments)| CpBatch { mask, segments })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every reduction is smaller (so minimizing ends), and every step by one is among them:
    /// each segment removed, each length one shorter, each mock and slack flag cleared, one
    /// more label ignored.
    #[test]
    fn reductions_are_smaller_and_cover_every_step_by_one() {
        let seg = |len, mock, slack| Segment { len, mock, slack };
        let b = CpBatch {
            mask: LabelMask::Prompt(1),
            segments: vec![seg(3, false, true), seg(2, true, false)],
        };
        let r = b.reductions();
        assert!(r.iter().all(|c| c.size() < b.size()), "{r:#?}");
        let has = |f: &dyn Fn(&CpBatch) -> bool| r.iter().any(f);
        assert!(has(&|c| c.segments == [seg(2, true, false)]));
        assert!(has(&|c| c.segments == [seg(3, false, true)]));
        assert!(has(&|c| c.segments == [seg(2, false, true), seg(2, true, false)]));
        assert!(has(&|c| c.segments == [seg(3, false, true), seg(1, true, false)]));
        assert!(has(&|c| c.segments == [seg(3, false, true), seg(2, false, false)]));
        assert!(has(&|c| c.segments == [seg(3, false, false), seg(2, true, false)]));
        assert!(has(&|c| c.mask == LabelMask::Prompt(2)));
        // Nothing left to remove from one empty plain segment with every label ignored.
        let least = CpBatch { mask: LabelMask::All, segments: vec![seg(0, false, false)] };
        assert!(least.reductions().is_empty(), "{:#?}", least.reductions());
    }

    #[test]
    fn storage_rounds_up_to_two_cp_blocks() {
        let b = CpBatch {
            mask: LabelMask::Prompt(1),
            segments: vec![
                Segment { len: 3, mock: false, slack: false },
                Segment { len: 0, mock: false, slack: true },
                Segment { len: 4, mock: true, slack: false },
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
