//! `thdcheck fuzz packer`'s cases: a capacity, a seed and examples as they arrive, one request
//! (one epoch of one push) or a session of epochs of pushes (protocol version 2).
//!
//! The lengths have shapes of their own, not [`arb_seq_lens`](crate::strategies::arb_seq_lens)'s:
//! they are drawn as (first, second) pairs (the second is a DPO pair's rejected branch), most of
//! them as fractions of the capacity, with 0 to 24 examples and other weights. Rewriting them
//! over `arb_seq_lens` would draw other cases from the same seed, and the fuzzer's case streams
//! (its tests, the measured figures of the docs) are fixed.

use proptest::collection::vec;
use proptest::prelude::*;
use proptest::strategy::BoxedStrategy;
use thd::pack::Example;

/// What a packer asserts of a request (`--non-empty`, `--examples-multiple-of-dp`,
/// `--max-examples`, a profile's `[fuzz]`): every generated request, every push of a session
/// and every reduction tried while minimizing respects it, so an adapter never needs a guard.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Preconditions {
    /// At least one example.
    pub non_empty: bool,
    /// An example count divisible by the DP size (the request's `dp_size`).
    pub dp_multiple: bool,
    /// At most this many examples.
    pub max_examples: Option<usize>,
}

impl Preconditions {
    /// Whether a request of `n` examples, dealt to `dp` ranks, is one the packer accepts.
    ///
    /// # Example
    /// ```
    /// use properties::strategies::fuzz::Preconditions;
    /// let pre = Preconditions { non_empty: true, dp_multiple: true, max_examples: Some(4) };
    /// assert!(pre.admits(2, Some(2)) && !pre.admits(0, Some(2)) && !pre.admits(3, Some(2)));
    /// assert!(!pre.admits(6, Some(2)));
    /// ```
    pub fn admits(&self, n: usize, dp: Option<u64>) -> bool {
        let empty = self.non_empty && n == 0;
        let indivisible =
            self.dp_multiple && dp.is_some_and(|r| r > 0 && !(n as u64).is_multiple_of(r));
        !empty && !indivisible && self.max_examples.is_none_or(|m| n <= m)
    }

    /// The smallest example count ≥ 1 admitted (`None`: no non-empty request is).
    pub fn smallest_nonempty(&self, dp: Option<u64>) -> Option<usize> {
        let step = if self.dp_multiple { dp.map_or(1, |r| r.max(1)) } else { 1 };
        let n = usize::try_from(step).ok()?;
        self.admits(n, dp).then_some(n)
    }

    /// `raw` cut (or, when a non-empty request is needed, extended by cycling it) to a length
    /// the preconditions admit. `None` when no request is admitted at all.
    fn fit<T: Clone>(&self, mut raw: Vec<T>, filler: T, dp: Option<u64>) -> Option<Vec<T>> {
        if let Some(n) = (0..=raw.len()).rev().find(|&n| self.admits(n, dp)) {
            raw.truncate(n);
            return Some(raw);
        }
        let want = self.smallest_nonempty(dp)?;
        let source = if raw.is_empty() { vec![filler] } else { raw };
        Some(source.iter().cycle().take(want).cloned().collect())
    }
}

/// Which generators draw the cases (the command's `--generation`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Generation {
    /// The uniform shapes and the edge-biased swarm, mixed (two cases in three uniform).
    #[default]
    Mixed,
    /// The uniform shapes alone: lengths as fractions of the capacity, arbitrary, tiny or equal.
    Uniform,
    /// The edge-biased swarm alone: lengths at the capacity ± 1 and of one token, sums at
    /// k·capacity ± 1, counts at k·R ± 1 for the DP size R, each feature on in a random subset
    /// of the cases.
    Edge,
}

/// What [`arb_packer_fuzz_case`] draws: the packer command's flags that shape the cases. The
/// default is `thdcheck fuzz packer` without flags.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PackerFuzzParams {
    /// Sessions (protocol version 2: epochs of pushes) instead of one-shot requests
    /// (`--session`).
    pub session: bool,
    /// Every example is a DPO pair (`--pairs`).
    pub pairs: bool,
    /// Only examples that fit the capacity once padded (`--fitting-only`).
    pub fitting_only: bool,
    /// Every length takes `⌈len / m⌉·m` of the capacity (`--pad-sequences-to-multiple-of`);
    /// `None`: no padding.
    pub pad_to_multiple_of: Option<u64>,
    /// The DP size the requests deal to (`--dp-size`); the swarm puts counts at k·R ± 1.
    pub dp_size: Option<u64>,
    /// With `dp_size`, a range (`--dp-size LO..HI`): each case draws its DP size from
    /// `dp_size..=dp_size_max`. `None`: every case has `dp_size`.
    pub dp_size_max: Option<u64>,
    /// What the packer asserts of a request: every generated request (every push) respects it.
    pub preconditions: Preconditions,
    /// Which generators draw the cases (`--generation`).
    pub generation: Generation,
    /// Every request asks for a minimum number of packs, drawn per case (`--min-packs`).
    pub min_packs: bool,
    /// Examples of 0 tokens are drawn too, in the tiny shape (`--empty-examples`, the profile's
    /// `[fuzz] empty_examples`): for a stack whose pipeline can hand its packer an empty
    /// example (a row emptied by filtering); such an example must be packed or declared dropped
    /// like any other.
    pub empty_examples: bool,
}

impl PackerFuzzParams {
    /// The multiple every length is padded to (1: none).
    pub fn multiple(&self) -> u64 {
        self.pad_to_multiple_of.unwrap_or(1).max(1)
    }

    /// A generated length as the packer may get it: with `fitting_only`, at most the largest
    /// multiple of `m` within the capacity.
    fn fit_len(&self, len: u64, capacity: u64, m: u64) -> u64 {
        if self.fitting_only && len > 0 { len.min(capacity / m * m).max(1) } else { len }
    }
}

/// A generated case: the capacity, the seed, and the examples as they arrive: epochs of pushes
/// (a one-shot request is one epoch of one push). Ids run over the whole case.
#[derive(Debug, Clone)]
pub struct PackerFuzzCase {
    /// Pack capacity in tokens.
    pub capacity: u64,
    /// The packer's seed.
    pub seed: u64,
    /// `epochs[e][k]`: the examples of the k-th push of epoch e.
    pub epochs: Vec<Vec<Vec<Example>>>,
    /// The DP size the request deals to (`--dp-size`, lowered while minimizing).
    pub dp_size: Option<u64>,
    /// The packs asked for at least (`--min-packs`: drawn per case).
    pub min_packs: Option<u64>,
}

impl PackerFuzzCase {
    /// Every example, in the order they are pushed.
    pub fn examples(&self) -> impl Iterator<Item = &Example> {
        self.epochs.iter().flatten().flatten()
    }

    /// Ids `0..n` in order, after examples were removed.
    pub fn renumbered(mut self) -> Self {
        for (id, e) in self.epochs.iter_mut().flatten().flatten().enumerate() {
            e.id = id as u64;
        }
        self
    }
}

/// The edge-biased swarm's raw lengths, Hypothesis-style: each case turns on a random subset of
/// four features (swarm testing), and each feature puts values where off-by-one bugs live:
/// lengths at the capacity − 1, the capacity and the capacity + 1 (`on[0]`), one-token examples
/// (`on[1]`), a count at k·R − 1, k·R or k·R + 1 for the DP size R (4 without one, `on[2]`),
/// a first-branch sum at k·C − 1, k·C or k·C + 1 (`on[3]`: examples cut from the end or added
/// to reach it). The other lengths are fractions of the capacity, as the uniform shape's.
fn edge_lengths(
    capacity: u64,
    on: [bool; 4],
    draws: &[(u8, (u64, u64))],
    k: u64,
    off: u64,
    dp: Option<u64>,
) -> Vec<(u64, u64)> {
    let c = capacity.max(1);
    let at_edge = |r: u64| (c - 1 + r % 3).max(1);
    let mut lens: Vec<(u64, u64)> = draws
        .iter()
        .map(|&(sel, (a, b))| match sel {
            0 if on[0] => (at_edge(a), at_edge(b)),
            1 if on[1] => (1, 1),
            _ => ((c * a).div_ceil(32), (c * b).div_ceil(32)),
        })
        .collect();
    if on[2] {
        let r = dp.unwrap_or(4).max(1);
        let n = usize::try_from((k * r + off).saturating_sub(1)).unwrap_or(usize::MAX).min(4096);
        let source = if lens.is_empty() { vec![(1, 1)] } else { lens.clone() };
        lens = source.iter().cycle().take(n).copied().collect();
    }
    if on[3] {
        let target = (k * c + off).saturating_sub(1);
        let mut sum: u64 = lens.iter().map(|l| l.0).sum();
        while sum > target {
            sum -= lens.pop().map_or(0, |l| l.0);
        }
        while sum < target {
            let add = (target - sum).min(c);
            lens.push((add, add));
            sum += add;
        }
    }
    lens
}

/// The packs first fit fills with the examples that fit, in order (each into the first pack
/// with room).
fn first_fit_packs(lens: &[u64], capacity: u64) -> u64 {
    let mut loads: Vec<u64> = Vec::new();
    for &l in lens.iter().filter(|&&l| l <= capacity) {
        match loads.iter_mut().find(|load| **load + l <= capacity) {
            Some(load) => *load += l,
            None => loads.push(l),
        }
    }
    loads.len() as u64
}

/// `thdcheck fuzz packer`'s cases. Capacities in 1..=64; up to 24 examples (a session: 1 to 3
/// epochs of up to 3 pushes of up to 8). Most lengths are fractions of the capacity
/// (`⌈C·r/32⌉`, r in 1..=48, so up to 1.5·C and some over it): shrinking the capacity then
/// shrinks every length with it, and a failure shrinks to the smallest capacity that shows it
/// (independent lengths left it at 12 or 21). The rest of the uniform one-shot cases are
/// arbitrary lengths of 1..=96, tiny ones, all equal (the shapes of
/// [`arb_seq_lens`](crate::strategies::arb_seq_lens), drawn the fuzzer's way). Beside them
/// ([`Generation`]), the edge-biased swarm: lengths at the capacity ± 1 and of one token, sums
/// at k·C ± 1, counts at k·R ± 1, each feature on in a random subset of the cases. With
/// `fitting_only` every (padded) length fits: `min(len, ⌊C/M⌋·M)`, capacity ≥ M. Every request
/// (every push) holds as many examples as the preconditions admit. With `min_packs`, each case
/// asks for one more pack than first fit needs, as many as there are examples, or any number
/// up to that.
///
/// # Example
/// ```
/// use proptest::strategy::{Strategy, ValueTree};
/// use proptest::test_runner::TestRunner;
/// use properties::strategies::fuzz::{PackerFuzzParams, Preconditions, arb_packer_fuzz_case};
/// let params = PackerFuzzParams {
///     preconditions: Preconditions { non_empty: true, ..Preconditions::default() },
///     ..PackerFuzzParams::default()
/// };
/// let mut runner = TestRunner::deterministic();
/// for _ in 0..50 {
///     let case = arb_packer_fuzz_case(params).new_tree(&mut runner).unwrap().current();
///     assert!(case.examples().count() >= 1 && (1..=64).contains(&case.capacity));
/// }
/// ```
pub fn arb_packer_fuzz_case(params: PackerFuzzParams) -> BoxedStrategy<PackerFuzzCase> {
    if let (Some(lo), Some(hi)) = (params.dp_size, params.dp_size_max.filter(|&h| h > 0)) {
        // A range: the DP size first, then a case at that size (a fixed size draws nothing, so
        // its case streams stay what they were).
        let fixed =
            move |r: u64| PackerFuzzParams { dp_size: Some(r), dp_size_max: None, ..params };
        return (lo..=hi.max(lo)).prop_flat_map(move |r| arb_packer_fuzz_case(fixed(r))).boxed();
    }
    let cfg = params;
    let m = params.multiple();
    let min_cap = if cfg.fitting_only { m } else { 1 };
    let caps = min_cap..=64u64.max(2 * m);
    let dp = cfg.dp_size;
    // (first, second) raw lengths of one example; the second is the rejected branch.
    let raw = |r: std::ops::RangeInclusive<u64>| (r.clone(), r);
    let ratios = if cfg.fitting_only { 1u64..=32 } else { 1u64..=48 };
    let shape = move |capacity: u64, epochs: Vec<Vec<Vec<(u64, u64)>>>, relative: bool| {
        let len = |r: u64| {
            let l = if relative { (capacity * r).div_ceil(32) } else { r };
            u32::try_from(cfg.fit_len(l, capacity, m)).unwrap_or(u32::MAX)
        };
        let mut id = 0u64;
        let epochs = epochs
            .into_iter()
            .map(|pushes| {
                pushes
                    .into_iter()
                    .map(|lens| {
                        let lens = cfg.preconditions.fit(lens, (1, 1), dp).unwrap_or_default();
                        lens.into_iter()
                            .map(|(a, b)| {
                                id += 1;
                                if cfg.pairs {
                                    Example::pair(id - 1, len(a), len(b))
                                } else {
                                    Example::single(id - 1, len(a))
                                }
                            })
                            .collect()
                    })
                    .collect()
            })
            .collect();
        (epochs, dp)
    };
    if cfg.session {
        return (caps, vec(vec(vec(raw(ratios), 0..=8), 0..=3), 1..=3), 0u64..=3)
            .prop_map(move |(capacity, epochs, seed)| {
                let (epochs, dp_size) = shape(capacity, epochs, true);
                PackerFuzzCase { capacity, seed, epochs, dp_size, min_packs: None }
            })
            .boxed();
    }
    let one_shot = |lens: Vec<(u64, u64)>| vec![vec![lens]];
    let relative = (caps.clone(), vec(raw(ratios.clone()), 0..=24), 0u64..=3).prop_map(
        move |(capacity, lens, seed)| {
            let (epochs, dp_size) = shape(capacity, one_shot(lens), true);
            PackerFuzzCase { capacity, seed, epochs, dp_size, min_packs: None }
        },
    );
    // The tiny shape takes empty examples too where the stack's pipeline can send them.
    let tiny = if cfg.empty_examples { 0u64..=2 } else { 1u64..=2 };
    let absolute = prop_oneof![
        2 => vec(raw(1u64..=96), 0..=24),
        1 => vec(raw(tiny), 0..=24),
        1 => (1u64..=96, 0usize..=24).prop_map(|(l, n)| vec![(l, l); n]),
    ];
    // The relative shape first: a union shrinks towards its earlier alternatives.
    let uniform = prop_oneof![
        3 => relative,
        1 => (caps.clone(), absolute, 0u64..=3).prop_map(move |(capacity, lens, seed)| {
            let (epochs, dp_size) = shape(capacity, one_shot(lens), false);
            PackerFuzzCase { capacity, seed, epochs, dp_size, min_packs: None }
        }),
    ];
    let edge = (
        caps,
        any::<[bool; 4]>(),
        vec((0u8..=3, raw(ratios)), 0..=24),
        1u64..=4,
        0u64..=2,
        0u64..=3,
    )
        .prop_map(move |(capacity, on, draws, k, off, seed)| {
            let lens = edge_lengths(capacity, on, &draws, k, off, dp);
            let (epochs, dp_size) = shape(capacity, one_shot(lens), false);
            PackerFuzzCase { capacity, seed, epochs, dp_size, min_packs: None }
        });
    let cases = match cfg.generation {
        Generation::Uniform => uniform.boxed(),
        Generation::Edge => edge.boxed(),
        Generation::Mixed => prop_oneof![2 => uniform, 1 => edge].boxed(),
    };
    if !cfg.min_packs {
        return cases;
    }
    // `--min-packs`: one more pack than first fit needs (the edge), as many as there are
    // examples, or any number up to that.
    (cases, 0u8..3, any::<proptest::sample::Index>())
        .prop_map(|(mut case, pick, at)| {
            let n = case.examples().count().max(1);
            let lens: Vec<u64> = case.examples().map(|e| e.lens.branches()[0]).collect();
            let k = match pick {
                0 => first_fit_packs(&lens, case.capacity) + 1,
                1 => n as u64,
                _ => at.index(n) as u64 + 1,
            };
            case.min_packs = Some(k.max(1));
            case
        })
        .boxed()
}
