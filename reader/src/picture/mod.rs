//! A picture of a batch: each row a strip of tokens, as `thdcheck check --html`, `fuzz --html`
//! and the Python package's `_repr_html_` draw it.
//!
//! ```text
//! BatchData ──PackPicture::of──▶ PackPicture (plain data, O(segments + marks), in PackReport)
//!                                     │
//! FileReport (facts, outcomes) ───────┴──svg::pack──▶ <svg> ──html::page──▶ one offline page
//! ```
//!
//! [`PackPicture`] holds what the picture shows and the report does not: where every segment's
//! slot and real tokens are, which labels are trained, where the position ids restart, what the
//! mask says, the CP size. It is gathered when asked ([`crate::ReadOptions::picture`]) from the
//! same pack the rules judged, and it decides nothing: the verdicts drawn are the outcomes' own
//! (each violation at its [`rules::Location`]). Every list is capped ([`MAX_MARKS`]), so a pack
//! of 10⁸ tokens holds a picture of a few MB at most.

pub mod html;
pub mod svg;

use std::ops::Range;

use rules::checks::{BatchOptions, IntSlice, LayoutView};
use thd::{IGNORE_INDEX, LabelConvention};

use crate::pack::BatchData;

/// The most entries of one kind a picture keeps (segments, label runs, restarts, mask runs): past
/// it, segments are kept in groups ([`PackPicture::grouped`]) and marks are cut (`complete`
/// false), so that a picture stays small whatever the batch.
pub const MAX_MARKS: usize = 1 << 18;

/// One segment's slot, in flat token indices (storage order).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Slot {
    /// The slot's first token.
    pub start: usize,
    /// One past its last real token (`start + sᵢ`, clamped to the slot).
    pub real_end: usize,
    /// One past its last token (`start + pᵢ`).
    pub end: usize,
    /// A mock segment (padding dressed as a sequence, as the rules classify it).
    pub mock: bool,
}

/// Ascending token ranges of one kind (trained labels, mask-real tokens), cut at [`MAX_MARKS`].
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Runs {
    /// The runs, ascending, disjoint.
    pub runs: Vec<Range<usize>>,
    /// `false`: cut at [`MAX_MARKS`]; tokens past the last run were not looked at.
    pub complete: bool,
}

impl Runs {
    /// The runs of consecutive positions where `flags` yields `true`.
    fn of(flags: impl Iterator<Item = bool>) -> Self {
        let mut runs = Vec::new();
        let mut open: Option<usize> = None;
        let mut n = 0;
        for (t, f) in flags.enumerate() {
            n = t + 1;
            match (f, open) {
                (true, None) => open = Some(t),
                (false, Some(s)) => {
                    runs.push(s..t);
                    open = None;
                    if runs.len() >= MAX_MARKS {
                        return Self { runs, complete: false };
                    }
                }
                _ => {}
            }
        }
        if let Some(s) = open {
            runs.push(s..n);
        }
        Self { runs, complete: true }
    }

    /// [`Runs::of`] over the values of `v` (at most `n`), each mapped by `f`: one tight loop
    /// per stored width, for the 10⁸-token batches.
    fn of_ints(v: IntSlice<'_>, n: usize, f: impl FnMut(i64) -> bool) -> Self {
        let mut f = f;
        match v {
            IntSlice::I32(x) => Self::of(x[..n.min(x.len())].iter().map(|&y| f(i64::from(y)))),
            IntSlice::I64(x) => Self::of(x[..n.min(x.len())].iter().map(|&y| f(y))),
        }
    }
}

/// A trained label at a segment's end whose prediction leaves the segment: drawn as an arrow
/// from the predicting token to the next document's first token.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Crossing {
    /// The token whose prediction it is (the segment's last real token).
    pub from: usize,
    /// The next document's first token.
    pub to: usize,
    /// The label's value is that token's id: the prediction targets the next document.
    pub targets_next: bool,
}

/// What the picture of one pack shows beyond the report's facts and outcomes.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct PackPicture {
    /// Stored tokens `T`.
    pub tokens: usize,
    /// Rows of the stored tensors (1 for `[T]`).
    pub rows: usize,
    /// Every segment's slot, or every `grouped`-th segment's start when there are more than
    /// [`MAX_MARKS`] (each entry then covers `grouped` segments).
    pub slots: Vec<Slot>,
    /// 1: one entry per segment; `g`: each entry of `slots` stands for `g` segments.
    pub grouped: usize,
    /// The tokens whose label is trained (not -100), when the batch has labels.
    pub labels: Option<Runs>,
    /// The name of the labels' key, as the file spells it.
    pub labels_key: String,
    /// How labels line up with logits (`unshifted`, `shifted`).
    pub convention: &'static str,
    /// Trained labels at segment ends whose prediction leaves the segment.
    pub crossings: Vec<Crossing>,
    /// The tokens where the position ids restart (the first token, and every `t` whose
    /// position is not `position[t − 1] + 1`), when the batch has position ids.
    pub restarts: Option<Runs>,
    /// The mask's view: the runs of tokens the attention / padding mask says are real, and the
    /// mask's key.
    pub mask: Option<(String, Runs)>,
    /// A 4-D mask's view of the documents: the runs of queries that see keys from the same
    /// first key on, and the mask's key.
    pub mask_documents: Option<(String, Runs)>,
    /// The CP size the batch is meant for (its zigzag chunks are drawn as bands).
    pub cp_size: Option<usize>,
    /// 1: the labels, restarts and mask were read at every token; `k`: the pack has more than
    /// [`EXACT_TOKENS`] tokens and they were read every `k` tokens and at every segment's first,
    /// second and last real tokens and its slot's end (a pixel of its picture holds hundreds of
    /// tokens; what the rules found stays marked at its exact token).
    pub stride: usize,
}

/// Up to this many tokens a pack's labels, positions and mask are read at every token; past it,
/// at [`SAMPLES`] evenly spaced tokens and at every segment boundary, so that a picture costs
/// O(segments), not another pass over 10⁸ tokens.
pub const EXACT_TOKENS: usize = 1 << 22;
/// The evenly spaced tokens read in a pack past [`EXACT_TOKENS`].
pub const SAMPLES: usize = 1 << 18;

/// The tokens read in a large pack: every `stride`-th token and each segment's boundary tokens,
/// ascending, without repeats.
fn sample_points(view: &LayoutView<'_>, t: usize, stride: usize) -> Vec<usize> {
    let mut bounds = Vec::with_capacity(view.segments() * 4);
    for i in 0..view.segments() {
        let (r, slot) = (view.real(i), view.slot(i));
        bounds.extend([r.start, r.start + 1, r.end.saturating_sub(1), r.end, slot.end]);
    }
    bounds.retain(|&x| x < t);
    bounds.sort_unstable();
    let mut out: Vec<usize> = Vec::with_capacity(bounds.len() + t / stride + 1);
    let (mut b, mut s) = (bounds.into_iter().peekable(), (0..t).step_by(stride).peekable());
    loop {
        let next = match (b.peek(), s.peek()) {
            (Some(&x), Some(&y)) if x <= y => b.next(),
            (_, Some(_)) => s.next(),
            (Some(_), None) => b.next(),
            (None, None) => break,
        };
        if let Some(x) = next
            && out.last() != Some(&x)
        {
            out.push(x);
        }
    }
    out
}

/// The runs where `flag(point)` holds, each sampled point's flag standing for the tokens up to
/// the next point.
fn sampled_runs(points: &[usize], t: usize, mut flag: impl FnMut(usize) -> bool) -> Runs {
    let mut runs: Vec<Range<usize>> = Vec::new();
    for (k, &p) in points.iter().enumerate() {
        if !flag(p) {
            continue;
        }
        let end = points.get(k + 1).copied().unwrap_or(t);
        match runs.last_mut() {
            Some(r) if r.end == p => r.end = end,
            _ => runs.push(p..end),
        }
        if runs.len() >= MAX_MARKS {
            return Runs { runs, complete: false };
        }
    }
    Runs { runs, complete: true }
}

impl PackPicture {
    /// Gathers the picture of `pack` (the tensors the rules judged, under `opts`). O(T) over the
    /// labels, positions and mask; every list capped at [`MAX_MARKS`].
    pub fn of(pack: &BatchData, opts: &BatchOptions) -> Self {
        let view = pack.view();
        Self::of_view(&view, opts)
    }

    /// [`PackPicture::of`] for a view.
    pub fn of_view(view: &LayoutView<'_>, opts: &BatchOptions) -> Self {
        let t = view.num_tokens;
        let n = view.segments();
        // The rules' own classification of mock segments (num_real_seqs, or all padding).
        let mock = rules::checks::mock_segments(view);
        let grouped = n.div_ceil(MAX_MARKS).max(1);
        let slots = (0..n)
            .step_by(grouped)
            .map(|i| {
                let last = (i + grouped).min(n) - 1;
                let (slot, real) = (view.slot(i), view.real(last));
                Slot {
                    start: slot.start.min(t),
                    real_end: real.end.min(t),
                    end: view.slot(last).end.min(t),
                    mock: (i..=last).all(|j| mock.get(j).copied().unwrap_or(false)),
                }
            })
            .collect();
        let stride = if t > EXACT_TOKENS { t.div_ceil(SAMPLES) } else { 1 };
        let points = (stride > 1).then(|| sample_points(view, t, stride));
        let restart_at = |p: IntSlice<'_>, i: usize| {
            i == 0 || p.get(i) != p.get(i - 1).map(|q| q.wrapping_add(1))
        };
        let (labels, restarts, mask) = match &points {
            Some(points) => (
                view.labels.map(|l| {
                    sampled_runs(points, t, |i| l.get(i).is_some_and(|y| y != IGNORE_INDEX))
                }),
                view.position_ids.map(|p| {
                    let runs: Vec<Range<usize>> = points
                        .iter()
                        .filter(|&&i| i < p.len() && restart_at(p, i))
                        .take(MAX_MARKS)
                        .map(|&i| i..i + 1)
                        .collect();
                    Runs { complete: runs.len() < MAX_MARKS, runs }
                }),
                view.mask.map(|m| {
                    let runs = sampled_runs(points, t, |i| m.get(i).copied().unwrap_or(false));
                    (view.keys().mask.clone(), runs)
                }),
            ),
            None => (
                view.labels.map(|l| Runs::of_ints(l, t, |y| y != IGNORE_INDEX)),
                view.position_ids.map(|p| {
                    // The first token restarts: no position before it is one less than any.
                    let mut prev = None::<i64>;
                    let mut runs = Runs::of_ints(p, t, |x| {
                        let restart = prev.is_none_or(|q| x != q.wrapping_add(1));
                        prev = Some(x);
                        restart
                    });
                    // A restart is one token: a run of restarts (every position 0) is many ticks.
                    let ticks = runs.runs.iter().flat_map(|r| r.clone().map(|s| s..s + 1));
                    let ticks: Vec<Range<usize>> = ticks.take(MAX_MARKS).collect();
                    runs.complete &= ticks.len() < MAX_MARKS;
                    runs.runs = ticks;
                    runs
                }),
                view.mask.map(|m| {
                    (view.keys().mask.clone(), Runs::of(m[..m.len().min(t)].iter().copied()))
                }),
            ),
        };
        let mask_documents = view.block_mask.map(|b| {
            let spans = b.spans;
            let mut runs = Vec::new();
            let mut q = 0;
            while q < spans.len() && runs.len() < MAX_MARKS {
                let [lo, hi] = spans[q];
                if lo >= hi {
                    q += 1;
                    continue;
                }
                let s = q;
                while q < spans.len() && spans[q][0] == lo && spans[q][0] < spans[q][1] {
                    q += 1;
                }
                runs.push(s..q);
            }
            (b.key.to_owned(), Runs { complete: q >= spans.len(), runs })
        });
        Self {
            tokens: t,
            rows: view.rows.max(1),
            slots,
            grouped,
            labels,
            labels_key: view.keys().labels.clone(),
            convention: match view.label_convention {
                _ if opts.masked_lm => "masked-lm",
                LabelConvention::Unshifted => "unshifted",
                LabelConvention::Shifted => "shifted",
            },
            crossings: if opts.masked_lm { Vec::new() } else { crossings(view, &mock) },
            restarts,
            mask,
            mask_documents,
            cp_size: opts.cp_size.filter(|&c| c > 1),
            stride,
        }
    }

    /// The width `S` of a row.
    pub fn row_width(&self) -> usize {
        if self.rows > 1 && self.tokens.is_multiple_of(self.rows) {
            self.tokens / self.rows
        } else {
            self.tokens
        }
    }
}

/// The trained labels at segment ends whose prediction reads a token past the segment: under
/// the unshifted convention the label at the next segment's first token (when it follows at
/// once, within a row), under the shifted one the label of the segment's last token.
fn crossings(view: &LayoutView<'_>, mock: &[bool]) -> Vec<Crossing> {
    let (Some(labels), n) = (view.labels, view.segments()) else { return Vec::new() };
    let width = view.row_width();
    let row_start = |t: usize| width.is_some_and(|w| t.is_multiple_of(w));
    let mut out = Vec::new();
    let mut next_doc = None;
    // Backwards, so that each segment finds the next real document in O(1).
    for i in (0..n).rev() {
        let r = view.real(i);
        let here = (!r.is_empty() && !mock.get(i).copied().unwrap_or(false)).then_some(r.start);
        if let (Some(next), Some(_)) = (next_doc, here) {
            let tok = match view.label_convention {
                LabelConvention::Unshifted if r.end == next && !row_start(next) => Some(next),
                LabelConvention::Unshifted => None,
                LabelConvention::Shifted => Some(r.end - 1),
            };
            if let Some(y) = tok.and_then(|k| labels.get(k)).filter(|&y| y != IGNORE_INDEX) {
                let targets_next = view.input_ids.and_then(|ids| ids.get(next)) == Some(y);
                out.push(Crossing { from: r.end - 1, to: next, targets_next });
                if out.len() >= MAX_MARKS {
                    break;
                }
            }
        }
        if here.is_some() {
            next_doc = here;
        }
    }
    out.reverse();
    out
}
