//! Reductions of the packed batches the CP targets (`loss`, `cp-split`) generate
//! ([`properties::strategies::fuzz::CpBatch`], drawn by `arb_cp_batch`): the steps the
//! minimizer tries after proptest's shrinking.

use properties::strategies::LabelMask;
use properties::strategies::fuzz::CpBatch;

/// Real tokens whose label is not -100.
fn valid(batch: &CpBatch) -> usize {
    (0..batch.segments.len())
        .map(|i| (0..batch.segments[i].len as usize).filter(|&j| !batch.ignored(i, j)).count())
        .sum()
}

/// What a reduction must lower, lexicographically: real tokens, segments, mock segments,
/// slack blocks, valid labels. Every reduction lowers it, so minimizing ends.
fn size(batch: &CpBatch) -> (u64, usize, usize, usize, usize) {
    (
        batch.segments.iter().map(|s| u64::from(s.len)).sum(),
        batch.segments.len(),
        batch.segments.iter().filter(|s| s.mock).count(),
        batch.segments.iter().filter(|s| s.slack).count(),
        valid(batch),
    )
}

/// Smaller batches, the biggest cuts first: a segment removed (one is kept), a segment
/// emptied, halved or one token shorter, a mock segment made plain, a slack block removed,
/// then fewer valid labels (every label ignored, a prompt one token longer, one more flag of
/// the pattern set). Each is smaller by [`size`].
pub fn reductions(batch: &CpBatch) -> Vec<CpBatch> {
    let mut out = Vec::new();
    let with = |f: &dyn Fn(&mut CpBatch)| {
        let mut b = batch.clone();
        f(&mut b);
        b
    };
    for i in 0..batch.segments.len() {
        if batch.segments.len() > 1 {
            out.push(with(&|b| {
                b.segments.remove(i);
            }));
        }
    }
    for (i, seg) in batch.segments.iter().enumerate() {
        let mut lens = vec![0, seg.len / 2, seg.len.saturating_sub(1)];
        lens.retain(|&l| l < seg.len);
        lens.dedup();
        for l in lens {
            out.push(with(&|b| b.segments[i].len = l));
        }
    }
    for i in 0..batch.segments.len() {
        out.push(with(&|b| b.segments[i].mock = false));
        out.push(with(&|b| b.segments[i].slack = false));
    }
    out.push(with(&|b| b.mask = LabelMask::All));
    let longest = batch.segments.iter().map(|s| s.len).max().unwrap_or(0);
    match &batch.mask {
        LabelMask::None => out.push(with(&|b| b.mask = LabelMask::Prompt(1))),
        LabelMask::Prompt(k) if *k < longest => {
            // Halfway to the longest document first: documents grow with --cp-slot-align
            // (to 4096 tokens), one label a step would spend the shrink budget.
            let half = k + (longest - k) / 2;
            if half > k + 1 {
                out.push(with(&|b| b.mask = LabelMask::Prompt(half)));
            }
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
    let least = size(batch);
    out.retain(|b| size(b) < least);
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use properties::strategies::fuzz::CpSegment;

    /// Every reduction is smaller (so minimizing ends), and every step by one is among them:
    /// each segment removed, each length one shorter, each mock and slack flag cleared, one
    /// more label ignored.
    #[test]
    fn reductions_are_smaller_and_cover_every_step_by_one() {
        let seg = |len, mock, slack| CpSegment { len, mock, slack };
        let b = CpBatch {
            mask: LabelMask::Prompt(1),
            segments: vec![seg(3, false, true), seg(2, true, false)],
        };
        let r = reductions(&b);
        assert!(r.iter().all(|c| size(c) < size(&b)), "{r:#?}");
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
        assert!(reductions(&least).is_empty(), "{:#?}", reductions(&least));
    }
}
