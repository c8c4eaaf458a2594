//! One-step reductions of the property cases, for the zoo's 1-minimality test (issue 28): a
//! shrunk counterexample is 1-minimal when none of its reductions fails the same way.
//!
//! proptest shrinks a value tree: it stops where no simplification of *its* tree fails, which is
//! not the same as no smaller case failing (seen: five zoo variants stopped one step short, e.g.
//! `NanWhenAllIgnored` at a 2-token prompt over a 1-token example, `StarvedBestFit` at capacity
//! 16 where 15 fails alike) (a length drawn through a `prop_map` cannot be lowered
//! once the map is applied; two knobs shrink left to right once). [`Reductions`] names, for each
//! case type, every case one step smaller that its strategy could also have drawn: one example,
//! segment, pair, micro-batch or row removed, one length lowered by one, a CP size halved, a
//! count lowered. Each reduction stays in its strategy's domain (at least one example where the
//! strategy draws one, lengths within their lower bounds, CP sizes from {1, 2, 4, 8}, static
//! lengths still at least the longest row), so a reduction that passes is a smaller valid case
//! that does not show the bug, never an input the pipeline refuses.

use proptest::strategy::Strategy;
use proptest::test_runner::{TestError, TestRunner};

use crate::checks::Split;
use crate::strategies::{
    AttnCase, CollateCase, CpLossCase, DpoCase, EosCase, FlopsCase, LabelMask, MaskCase, MfuCase,
    PackerStream, Padding, SftCase, ShardCase, WorkCase,
};
use crate::{Checked, Violation};

/// Every case one step smaller than `self` in its strategy's domain.
pub trait Reductions: Sized {
    /// The reductions, each a valid case of the same strategy.
    fn reductions(&self) -> Vec<Self>;
}

/// The case `runner` shrinks to under `run`, then [`minimize`]d: `Ok(None)` if every case
/// passes, `Err` with proptest's reason if the run aborts.
///
/// # Errors
/// The run aborted (too many rejected cases).
pub fn shrunk<S>(
    mut runner: TestRunner,
    strategy: S,
    run: impl Fn(&S::Value) -> Checked,
) -> Result<Option<S::Value>, String>
where
    S: Strategy,
    S::Value: Reductions,
{
    let fail = |v: Violation| proptest::test_runner::TestCaseError::fail(v.to_string());
    match runner.run(&strategy, |case| run(&case).map_err(fail)) {
        Ok(()) => Ok(None),
        Err(TestError::Fail(_, minimal)) => Ok(Some(match run(&minimal) {
            Err(v) => minimize(minimal, &v, &run),
            Ok(()) => minimal,
        })),
        Err(TestError::Abort(why)) => Err(why.to_string()),
    }
}

/// The same failure: the same invariant, rule id and rule (a reduction that trades "a token on
/// two ranks" for "unequal pieces", both `cp-shard`, shows another defect).
fn same_failure(w: &Violation, v: &Violation) -> bool {
    w.invariant == v.invariant && w.id == v.id && w.rule == v.rule
}

/// After proptest's shrinking, the first reduction that fails as `v` does (same invariant, same
/// rule) replaces the case, until none does: a 1-minimal case. Every reduction removes an
/// element or lowers a count, so the loop ends.
pub fn minimize<C: Reductions>(mut case: C, v: &Violation, run: impl Fn(&C) -> Checked) -> C {
    while let Some(smaller) =
        case.reductions().into_iter().find(|r| matches!(run(r), Err(w) if same_failure(&w, v)))
    {
        case = smaller;
    }
    case
}

/// What [`minimality`] found.
#[derive(Debug, Clone)]
pub enum Minimality {
    /// The property failed: the shrunk case, and the reductions of it that fail the same way
    /// (none when it is 1-minimal).
    Caught {
        /// The shrunk case, as `{:#?}` prints it.
        case: String,
        /// Its reductions that fail with the same invariant and rule.
        failing: Vec<String>,
    },
    /// Every case passed (or the run aborted).
    NotCaught,
}

/// Runs `run` on `runner`'s cases from `strategy` until it fails, and judges every reduction of
/// the shrunk case.
pub fn minimality<S>(
    runner: TestRunner,
    strategy: S,
    run: impl Fn(&S::Value) -> Checked,
) -> Minimality
where
    S: Strategy,
    S::Value: Reductions + std::fmt::Debug,
{
    let Ok(Some(case)) = shrunk(runner, strategy, &run) else { return Minimality::NotCaught };
    match run(&case) {
        Err(v) => Minimality::Caught {
            case: format!("{case:#?}"),
            failing: failing_reductions(&case, &v, &run),
        },
        Ok(()) => Minimality::NotCaught,
    }
}

/// The reductions of `case` that fail as `v` does (same invariant, same rule), as `Debug` text:
/// empty when `case` is 1-minimal.
pub fn failing_reductions<C: Reductions + std::fmt::Debug>(
    case: &C,
    v: &Violation,
    run: impl Fn(&C) -> Checked,
) -> Vec<String> {
    case.reductions()
        .into_iter()
        .filter(|r| matches!(run(r), Err(w) if same_failure(&w, v)))
        .map(|r| format!("{r:?}"))
        .collect()
}

/// `v` with element `i` removed.
fn without<T: Clone>(v: &[T], i: usize) -> Vec<T> {
    let mut out = v.to_vec();
    out.remove(i);
    out
}

/// The values below `x` a reduction tries, at least `min`, smallest first: every one of them
/// when there are at most 32, else `min`, a quarter, half and three quarters of `x`, `x − 2`
/// and `x − 1`. Lowering by one alone stops where a failure needs a parity or a residue (a
/// length that must stay odd: 3 fails, 2 passes, 1 fails; a CP split that fails at 12 and 2
/// tokens only) or holds only at the bottom; the bench against Hypothesis found seven zoo
/// variants stopped that way (issue 28), and Hypothesis tries every smaller integer too.
fn smaller(x: u32, min: u32) -> Vec<u32> {
    if x <= min {
        return Vec::new();
    }
    if x - min <= 32 {
        return (min..x).collect();
    }
    let mut out: Vec<u32> = Vec::with_capacity(6);
    for c in [min, x / 4, x / 2, x - x / 4, x - 2, x - 1] {
        if c >= min && c < x && !out.contains(&c) {
            out.push(c);
        }
    }
    out
}

/// [`smaller`] for a `usize` knob (every knob of the strategies is far below `u32::MAX`).
fn smaller_usize(x: usize, min: usize) -> Vec<usize> {
    let narrow = |v: usize| u32::try_from(v).unwrap_or(u32::MAX);
    smaller(narrow(x), narrow(min)).into_iter().map(|c| c as usize).collect()
}

/// `v` with element `i` lowered to each of [`smaller`]`(v[i], min)`.
fn lowered(v: &[u32], i: usize, min: u32) -> Vec<Vec<u32>> {
    smaller(v[i], min)
        .into_iter()
        .map(|c| {
            let mut out = v.to_vec();
            out[i] = c;
            out
        })
        .collect()
}

/// Per-segment lengths at least `min`: the first half kept, two neighbours removed, one removed
/// (keeping one), or one lowered. Removing two at once passes a failure that needs an even
/// count (a CP split of 2 over 1-token segments fails at 4 and at 2 segments, not at 3).
fn length_steps(lens: &[u32], min: u32) -> Vec<(Option<usize>, Vec<u32>)> {
    let n = lens.len();
    let mut out = Vec::new();
    if n > 3 {
        out.push((None, lens[..n / 2].to_vec()));
    }
    if n > 2 {
        out.extend((0..n - 1).map(|i| (None, [&lens[..i], &lens[i + 2..]].concat())));
    }
    if n > 1 {
        out.extend((0..n).map(|i| (Some(i), without(lens, i))));
    }
    out.extend((0..lens.len()).flat_map(|i| lowered(lens, i, min).into_iter().map(|l| (None, l))));
    out
}

impl Reductions for SftCase {
    fn reductions(&self) -> Vec<Self> {
        let mut out: Vec<Self> = length_steps(&self.lens, 1)
            .into_iter()
            .map(|(_, lens)| SftCase { lens, ..self.clone() })
            .collect();
        // Two neighbours as one document, while it stays within every size the strategies
        // draw (`Sizes::TINY`): fewer documents, as many tokens (a contiguous CP split that
        // fails at [1, 1] fails at [2] too). The loop still ends: every reduction lowers
        // (tokens, documents) lexicographically, or the mask.
        for i in 0..self.lens.len().saturating_sub(1) {
            let merged = self.lens[i] + self.lens[i + 1];
            if merged <= crate::strategies::Sizes::TINY.max_len {
                let lens = [&self.lens[..i], &[merged][..], &self.lens[i + 2..]].concat();
                out.push(SftCase { lens, ..self.clone() });
            }
        }
        if self.mask != LabelMask::None {
            // No mask, alone and with each smaller set of lengths (a CP loss that gives NaN at
            // [8] with a 7-token prompt does at [2] with none; neither step alone shows it).
            out.push(SftCase { mask: LabelMask::None, ..self.clone() });
            let unmasked: Vec<Self> = out
                .iter()
                .filter(|r| r.lens != self.lens)
                .map(|r| SftCase { mask: LabelMask::None, ..r.clone() })
                .collect();
            out.extend(unmasked);
        }
        if let LabelMask::Prompt(k) = self.mask {
            out.extend(
                smaller(k, 0)
                    .into_iter()
                    .map(|k| SftCase { mask: LabelMask::Prompt(k), ..self.clone() }),
            );
        }
        if let LabelMask::Pattern(p) = &self.mask
            && p.len() > 1
        {
            out.push(SftCase {
                mask: LabelMask::Pattern(p[..p.len() - 1].to_vec()),
                ..self.clone()
            });
        }
        out
    }
}

impl Reductions for CollateCase {
    fn reductions(&self) -> Vec<Self> {
        let mut out: Vec<Self> = self
            .sft
            .reductions()
            .into_iter()
            .map(|sft| CollateCase { sft, ..self.clone() })
            .collect();
        // A simpler padding: none at all, a CP-then-mock padding as either of its parts, a mock
        // without a cap on its pieces, a smaller CP size. Never back up that order, so the loop
        // ends.
        let simpler = match self.padding {
            Padding::None => vec![],
            Padding::Static { .. } => vec![Padding::None],
            Padding::Mock { multiple_of, max_mock_len } => {
                let mut v = vec![Padding::None];
                if max_mock_len.is_some() {
                    v.push(Padding::Mock { multiple_of, max_mock_len: None });
                }
                v
            }
            Padding::Cp { cp } => {
                let mut v = vec![Padding::None];
                if cp > 1 {
                    v.push(Padding::Cp { cp: cp / 2 });
                }
                v
            }
            Padding::CpThenMock { cp, multiple_of } => {
                let mut v = vec![
                    Padding::None,
                    Padding::Mock { multiple_of, max_mock_len: None },
                    Padding::Cp { cp },
                ];
                if cp > 1 {
                    v.push(Padding::CpThenMock { cp: cp / 2, multiple_of });
                }
                v
            }
        };
        out.extend(simpler.into_iter().map(|padding| CollateCase { padding, ..self.clone() }));
        if let Padding::Static { extra } = self.padding {
            out.extend(
                smaller_usize(extra, 0).into_iter().map(|extra| CollateCase {
                    padding: Padding::Static { extra },
                    ..self.clone()
                }),
            );
        }
        out
    }
}

impl Reductions for CpLossCase {
    fn reductions(&self) -> Vec<Self> {
        let mut out: Vec<Self> = self
            .sft
            .reductions()
            .into_iter()
            .map(|sft| {
                // A micro-batch split of k is drawn from 1..=n: fewer examples, at most n parts.
                let split = match self.split {
                    Split::MicroBatches(k) => Split::MicroBatches(k.min(sft.lens.len())),
                    cp => cp,
                };
                CpLossCase { sft, split }
            })
            .collect();
        match self.split {
            Split::Cp(cp) if cp > 1 => {
                out.push(CpLossCase { split: Split::Cp(cp / 2), ..self.clone() })
            }
            Split::MicroBatches(k) if k > 1 => {
                out.push(CpLossCase { split: Split::MicroBatches(k - 1), ..self.clone() });
            }
            _ => {}
        }
        out
    }
}

impl Reductions for ShardCase {
    fn reductions(&self) -> Vec<Self> {
        let smaller = self.sft.reductions();
        let mut out: Vec<Self> =
            smaller.iter().map(|sft| ShardCase { sft: sft.clone(), ..self.clone() }).collect();
        // The other padding order, with a smaller batch: a split that fails at 4 tokens padded
        // last fails at 2 padded first (never the order alone, so the loop ends).
        out.extend(smaller.into_iter().map(|sft| ShardCase {
            sft,
            pad_first: !self.pad_first,
            ..self.clone()
        }));
        if self.cp > 1 {
            out.push(ShardCase { cp: self.cp / 2, ..self.clone() });
        }
        out
    }
}

impl Reductions for MaskCase {
    fn reductions(&self) -> Vec<Self> {
        self.collate
            .reductions()
            .into_iter()
            .map(|collate| MaskCase { collate, ..self.clone() })
            .collect()
    }
}

impl Reductions for EosCase {
    fn reductions(&self) -> Vec<Self> {
        let mut out: Vec<Self> =
            self.sft.reductions().into_iter().map(|sft| EosCase { sft, ..self.clone() }).collect();
        for max_doc_len in smaller_usize(self.max_doc_len, 2) {
            out.push(EosCase { max_doc_len, ..self.clone() });
        }
        if let Some(w) = self.row_width {
            out.extend(
                smaller_usize(w, 2)
                    .into_iter()
                    .map(|w| EosCase { row_width: Some(w), ..self.clone() }),
            );
        }
        out
    }
}

impl Reductions for AttnCase {
    fn reductions(&self) -> Vec<Self> {
        let n = self.lens.len();
        let mut out = Vec::new();
        for i in 0..n {
            if n > 1 {
                out.push(AttnCase {
                    lens: without(&self.lens, i),
                    pad: without(&self.pad, i),
                    lens_k: self.lens_k.as_ref().map(|k| without(k, i)),
                    ..self.clone()
                });
            }
            for lens in lowered(&self.lens, i, 0) {
                out.push(AttnCase { lens, ..self.clone() });
            }
            for pad in lowered(&self.pad, i, 0) {
                out.push(AttnCase { pad, ..self.clone() });
            }
            for k in self.lens_k.as_ref().map(|k| lowered(k, i, 0)).unwrap_or_default() {
                out.push(AttnCase { lens_k: Some(k), ..self.clone() });
            }
        }
        // A CP split is drawn from {2, 4, 8} and applied only with neither padding nor key
        // lengths: halving keeps it in {1, 2, 4}, 1 being the unsplit case.
        if self.cp > 1 {
            out.push(AttnCase { cp: self.cp / 2, ..self.clone() });
        }
        for head_dim in smaller_usize(self.head_dim, 1) {
            out.push(AttnCase { head_dim, ..self.clone() });
        }
        if self.heads > self.kv_heads {
            out.push(AttnCase { heads: self.heads - self.kv_heads, ..self.clone() });
        }
        out
    }
}

impl Reductions for DpoCase {
    fn reductions(&self) -> Vec<Self> {
        let fits = |pairs: &[(u32, u32)], max: Option<usize>| {
            max.is_none_or(|m| pairs.iter().all(|&(c, r)| c.max(r) as usize <= m))
        };
        let mut out = Vec::new();
        let n = self.pairs.len();
        for i in 0..n {
            if n > 1 {
                out.push(DpoCase { pairs: without(&self.pairs, i), ..self.clone() });
            }
            let (c, r) = self.pairs[i];
            let lower_c = smaller(c, 1).into_iter().map(|c| (c, r));
            for (c, r) in lower_c.chain(smaller(r, 1).into_iter().map(|r| (c, r))) {
                let mut pairs = self.pairs.clone();
                pairs[i] = (c, r);
                out.push(DpoCase { pairs, ..self.clone() });
            }
        }
        if let Some(m) = self.max_seq_length {
            // No budget is the simpler knob (the strategy draws it a quarter of the time), then
            // a lower one that the pairs still fit.
            out.push(DpoCase { max_seq_length: None, ..self.clone() });
            for m in smaller_usize(m, 1) {
                if fits(&self.pairs, Some(m)) {
                    out.push(DpoCase { max_seq_length: Some(m), ..self.clone() });
                }
            }
        }
        out
    }
}

impl Reductions for WorkCase {
    fn reductions(&self) -> Vec<Self> {
        let n = self.lens.len();
        let mut out = Vec::new();
        for i in 0..n {
            if n > 1 {
                out.push(WorkCase {
                    lens: without(&self.lens, i),
                    pad: without(&self.pad, i),
                    ..self.clone()
                });
            }
            for lens in lowered(&self.lens, i, 0) {
                out.push(WorkCase { lens, ..self.clone() });
            }
            for pad in lowered(&self.pad, i, 0) {
                out.push(WorkCase { pad, ..self.clone() });
            }
        }
        for i in 0..self.mocks.len() {
            out.push(WorkCase { mocks: without(&self.mocks, i), ..self.clone() });
            for mocks in lowered(&self.mocks, i, 1) {
                out.push(WorkCase { mocks, ..self.clone() });
            }
        }
        for tail in smaller(self.tail, 0) {
            out.push(WorkCase { tail, ..self.clone() });
        }
        // Last, a document's token moved into the static tail (the strategy draws tails up to
        // 8): the stored tokens stay, the documents' shrink, so a failure that needs only some
        // stored tokens beyond the documents can lose a whole document after it (issue 28:
        // `PackLengthSquared` at [1, 1] becomes [0] with a 1-token tail). The loop still ends:
        // every reduction lowers (stored tokens, document tokens, elements) lexicographically.
        if self.tail < 8 {
            for i in (0..n).filter(|&i| self.lens[i] > 0) {
                let mut lens = self.lens.clone();
                lens[i] -= 1;
                out.push(WorkCase { lens, tail: self.tail + 1, ..self.clone() });
            }
        }
        out
    }
}

impl Reductions for MfuCase {
    fn reductions(&self) -> Vec<Self> {
        let mut out: Vec<Self> = length_steps(&self.lens, 1)
            .into_iter()
            .map(|(_, lens)| MfuCase { lens, ..self.clone() })
            .collect();
        if self.cp > 1 {
            out.push(MfuCase { cp: self.cp / 2, ..self.clone() });
        }
        for slack in smaller(self.slack, 0) {
            out.push(MfuCase { slack, ..self.clone() });
        }
        for static_extra in smaller_usize(self.static_extra, 0) {
            out.push(MfuCase { static_extra, ..self.clone() });
        }
        if let Some(k) = self.max_mock_len {
            out.extend(
                smaller_usize(k, 1)
                    .into_iter()
                    .map(|k| MfuCase { max_mock_len: Some(k), ..self.clone() }),
            );
        }
        out
    }
}

impl Reductions for FlopsCase {
    fn reductions(&self) -> Vec<Self> {
        let longest = |mbs: &[crate::checks::MicroBatchView]| {
            mbs.iter()
                .filter_map(|m| m.packed.as_ref())
                .flat_map(|rows| rows.iter().map(|r| r.iter().map(|&s| u64::from(s)).sum::<u64>()))
                .max()
                .unwrap_or(0)
        };
        let mut out = Vec::new();
        let n = self.micro_batches.len();
        for i in 0..n {
            if n > 1 {
                out.push(FlopsCase {
                    micro_batches: without(&self.micro_batches, i),
                    ..self.clone()
                });
            }
            let Some(rows) = self.micro_batches[i].packed.as_ref() else { continue };
            for r in 0..rows.len() {
                let mut smaller = Vec::new();
                if rows.len() > 1 {
                    smaller.push(without(rows, r));
                }
                for (_, row) in length_steps(&rows[r], 1) {
                    let mut rows = rows.clone();
                    rows[r] = row;
                    smaller.push(rows);
                }
                for rows in smaller {
                    let mut mbs = self.micro_batches.clone();
                    mbs[i].rows = rows.len() as u64;
                    mbs[i].packed = Some(rows);
                    out.push(FlopsCase { micro_batches: mbs, ..self.clone() });
                }
            }
        }
        if self.seq_len > longest(&self.micro_batches).max(1) {
            let seq_len = self.seq_len - 1;
            let micro_batches = self
                .micro_batches
                .iter()
                .map(|m| crate::checks::MicroBatchView { seq_len, ..m.clone() })
                .collect();
            out.push(FlopsCase { seq_len, micro_batches });
        }
        out
    }
}

impl Reductions for PackerStream {
    fn reductions(&self) -> Vec<Self> {
        use thd::pack::Lens;
        let len = |e: &thd::pack::Example| match e.lens {
            Lens::Single { len } => len,
            Lens::Pair { chosen, rejected } => chosen + rejected,
        };
        let mut out = Vec::new();
        let n = self.dataset.len();
        for i in 0..n {
            if n > 1 {
                // Ids are indices into the dataset: renumbered after a removal.
                let mut dataset = without(&self.dataset, i);
                for (k, e) in dataset.iter_mut().enumerate() {
                    e.id = k as u64;
                }
                out.push(PackerStream { dataset, ..self.clone() });
            }
            if let Lens::Single { len } = self.dataset[i].lens {
                for len in smaller(len, 1) {
                    let mut dataset = self.dataset.clone();
                    dataset[i].lens = Lens::Single { len };
                    out.push(PackerStream { dataset, ..self.clone() });
                }
            }
        }
        // Lower the capacity only where every example still fits: whether the strategy draws
        // over-long examples is not recorded in the case.
        if self.capacity > 1 && self.dataset.iter().all(|e| len(e) < self.capacity) {
            out.push(PackerStream { capacity: self.capacity - 1, ..self.clone() });
        }
        if self.epochs > 1 {
            out.push(PackerStream { epochs: self.epochs - 1, ..self.clone() });
        }
        if self.batch_size > 1 {
            out.push(PackerStream { batch_size: self.batch_size - 1, ..self.clone() });
        }
        if self.seed != 0 {
            out.push(PackerStream { seed: 0, ..self.clone() });
        }
        out
    }
}
