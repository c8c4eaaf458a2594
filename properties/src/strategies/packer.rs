//! Packer specs, datasets and epoch plans.

use proptest::collection::vec;
use proptest::prelude::*;
use thd::pack::{
    BinPackingOptions, EpochEnd, Example, OverLength, PackerSpec, SequentialOptions,
    TokenPackingOptions,
};

/// A packer, the dataset it is fed, and how: batches of `batch_size`, `epochs` epochs,
/// reshuffled with `seed` when `shuffle`.
#[derive(Debug, Clone, PartialEq)]
pub struct PackerCase {
    /// The packer under test (built fresh for every run).
    pub spec: PackerSpec,
    /// The dataset; example `i` has id `i`.
    pub dataset: Vec<Example>,
    /// Examples per pushed batch.
    pub batch_size: usize,
    /// Epochs.
    pub epochs: u32,
    /// Reshuffle seed.
    pub seed: u64,
    /// Reshuffle every epoch.
    pub shuffle: bool,
}

/// A pack capacity in `1..=64`.
pub fn arb_capacity() -> impl Strategy<Value = u32> {
    1u32..=64
}

fn arb_over_length() -> impl Strategy<Value = OverLength> {
    prop_oneof![Just(OverLength::Error), Just(OverLength::Drop)]
}

/// Any built-in packer with any options, capacity 1–64.
pub fn arb_packer_spec() -> impl Strategy<Value = PackerSpec> {
    (
        arb_capacity(),
        0u8..5,
        arb_over_length(),
        any::<bool>(),
        prop::option::of(1u32..=8),
        any::<bool>(),
        any::<bool>(),
        prop::option::of(1usize..=6),
    )
        .prop_map(
            |(
                capacity,
                kind,
                over_length,
                carry,
                divisible_by,
                split_samples,
                drop_last,
                window,
            )| {
                let bins = BinPackingOptions { over_length, window };
                match kind {
                    0 => PackerSpec::SequentialBudget {
                        capacity,
                        options: SequentialOptions {
                            over_length,
                            epoch_end: if carry { EpochEnd::Carry } else { EpochEnd::Drain },
                        },
                    },
                    1 => PackerSpec::TokenPacking {
                        capacity,
                        options: TokenPackingOptions {
                            divisible_by,
                            split_samples,
                            drop_last,
                            over_length,
                        },
                    },
                    2 => PackerSpec::FirstFit { capacity, options: bins },
                    3 => PackerSpec::BestFit { capacity, options: bins },
                    _ => PackerSpec::FirstFitDecreasing { capacity, options: bins },
                }
            },
        )
}

/// The longest example a spec admits without an error (`None`: anything, over-length ones are
/// dropped), and whether it takes DPO pairs.
pub fn spec_limits(spec: &PackerSpec) -> (Option<u32>, bool) {
    match *spec {
        PackerSpec::SequentialBudget { capacity, options } => {
            ((options.over_length == OverLength::Error).then_some(capacity), true)
        }
        PackerSpec::TokenPacking { capacity, options } => {
            let d = options.divisible_by.unwrap_or(1);
            ((options.over_length == OverLength::Error).then_some(capacity / d * d), false)
        }
        PackerSpec::FirstFit { capacity, options }
        | PackerSpec::BestFit { capacity, options }
        | PackerSpec::FirstFitDecreasing { capacity, options } => {
            ((options.over_length == OverLength::Error).then_some(capacity), true)
        }
    }
}

/// A [`PackerCase`]: any built-in strategy and options, 0–24 examples (DPO pairs a third of the
/// time, for the strategies that take them) that fit under an `Error` policy and may be up to
/// 1.5× the capacity under `Drop`, batches of 1–8, 1–3 epochs. Lengths are drawn up to 96 and
/// capped, so every component shrinks on its own.
pub fn arb_packer_case() -> impl Strategy<Value = PackerCase> {
    // Knobs before data: proptest shrinks a tuple left to right, once.
    (
        arb_packer_spec(),
        prop::bool::weighted(1.0 / 3.0),
        1usize..=8,
        1u32..=3,
        0u64..1_000,
        any::<bool>(),
        vec((0u32..=96, 0u32..=96), 0..=24),
    )
        .prop_map(|(spec, pairs, batch_size, epochs, seed, shuffle, lens)| {
            let cap = spec.capacity();
            let (max_ok, pairs_ok) = spec_limits(&spec);
            let max_len = max_ok.unwrap_or(cap + cap / 2);
            let dataset = lens
                .into_iter()
                .enumerate()
                .map(|(i, (a, b))| {
                    let (a, b) = (a.min(max_len), b.min(max_len));
                    if pairs && pairs_ok {
                        Example::pair(i as u64, a, b)
                    } else {
                        Example::single(i as u64, a)
                    }
                })
                .collect();
            PackerCase { spec, dataset, batch_size, epochs, seed, shuffle }
        })
}

/// A small bin-packing instance for exact-OPT bounds: capacity 1–20, 1–9 items of `1..=C`.
pub fn arb_small_instance() -> impl Strategy<Value = (u32, Vec<u32>)> {
    (1u32..=20).prop_flat_map(|cap| (Just(cap), vec(1..=cap, 1..=9)))
}

/// A dataset and an epoch plan for a packer given only its capacity (a zoo packer, or an
/// external packer driven over a subprocess).
#[derive(Debug, Clone, PartialEq)]
#[cfg_attr(any(test, feature = "serde"), derive(serde::Serialize, serde::Deserialize))]
pub struct PackerStream {
    /// Tokens per pack.
    pub capacity: u32,
    /// The dataset; example `i` has id `i`.
    pub dataset: Vec<Example>,
    /// Examples per pushed batch.
    pub batch_size: usize,
    /// Epochs.
    pub epochs: u32,
    /// Reshuffle seed.
    pub seed: u64,
    /// Reshuffle every epoch.
    pub shuffle: bool,
}

/// What [`arb_packer_stream`] draws beyond its fixed shape.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PackerStreamParams {
    /// A third of the streams hold DPO pairs (chosen, rejected) instead of single sequences.
    pub pairs: bool,
    /// Examples may be up to 1.5× the capacity (over-long ones the packer must drop or refuse),
    /// instead of at most the capacity.
    pub over_long: bool,
}

impl PackerStreamParams {
    /// Single sequences or DPO pairs, every example within the capacity (the default).
    pub const FITTING: PackerStreamParams = PackerStreamParams { pairs: true, over_long: false };
    /// Single sequences or DPO pairs, examples up to 1.5× the capacity.
    pub const OVER_LONG: PackerStreamParams = PackerStreamParams { pairs: true, over_long: true };
    /// Single sequences only, every one within the capacity.
    pub const SINGLES: PackerStreamParams = PackerStreamParams { pairs: false, over_long: false };
}

/// [`PackerStreamParams::FITTING`].
impl Default for PackerStreamParams {
    fn default() -> Self {
        Self::FITTING
    }
}

/// A [`PackerStream`]: capacity 1–64, 0–24 single examples (DPO pairs a third of the time with
/// `pairs`), each at most the capacity, or up to 1.5× it with `over_long`.
///
/// # Example
/// ```
/// use proptest::strategy::{Strategy, ValueTree};
/// use proptest::test_runner::TestRunner;
/// use properties::strategies::{PackerStreamParams, arb_packer_stream};
/// let mut runner = TestRunner::deterministic();
/// let s = arb_packer_stream(PackerStreamParams::SINGLES).new_tree(&mut runner).unwrap().current();
/// assert!(s.dataset.iter().all(|e| e.lens.branches()[0] <= u64::from(s.capacity)));
/// ```
pub fn arb_packer_stream(params: PackerStreamParams) -> impl Strategy<Value = PackerStream> {
    let PackerStreamParams { pairs, over_long } = params;
    (
        arb_capacity(),
        prop::bool::weighted(if pairs { 1.0 / 3.0 } else { 0.0 }),
        1usize..=8,
        1u32..=3,
        0u64..1_000,
        any::<bool>(),
        vec((0u32..=96, 0u32..=96), 0..=24),
    )
        .prop_map(move |(capacity, pair, batch_size, epochs, seed, shuffle, lens)| {
            let max_len = if over_long { capacity + capacity / 2 } else { capacity };
            let dataset = lens
                .into_iter()
                .enumerate()
                .map(|(i, (a, b))| {
                    let (a, b) = (a.min(max_len), b.min(max_len));
                    if pair { Example::pair(i as u64, a, b) } else { Example::single(i as u64, a) }
                })
                .collect();
            PackerStream { capacity, dataset, batch_size, epochs, seed, shuffle }
        })
}
