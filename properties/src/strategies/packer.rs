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

fn arb_spec(capacity: u32) -> impl Strategy<Value = PackerSpec> {
    let bins = || {
        (arb_over_length(), prop::option::of(1usize..=6))
            .prop_map(|(over_length, window)| BinPackingOptions { over_length, window })
    };
    prop_oneof![
        (arb_over_length(), prop_oneof![Just(EpochEnd::Drain), Just(EpochEnd::Carry)]).prop_map(
            move |(over_length, epoch_end)| PackerSpec::SequentialBudget {
                capacity,
                options: SequentialOptions { over_length, epoch_end }
            }
        ),
        (prop::option::of(1u32..=8), any::<bool>(), any::<bool>(), arb_over_length()).prop_map(
            move |(divisible_by, split_samples, drop_last, over_length)| PackerSpec::TokenPacking {
                capacity,
                options: TokenPackingOptions {
                    divisible_by,
                    split_samples,
                    drop_last,
                    over_length
                },
            }
        ),
        bins().prop_map(move |options| PackerSpec::FirstFit { capacity, options }),
        bins().prop_map(move |options| PackerSpec::BestFit { capacity, options }),
        bins().prop_map(move |options| PackerSpec::FirstFitDecreasing { capacity, options }),
    ]
}

/// The longest example a spec admits without an error (`None`: anything, over-length ones are
/// dropped), and whether it takes DPO pairs.
fn limits(spec: &PackerSpec) -> (Option<u32>, bool) {
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

/// A [`PackerCase`]: any built-in strategy and options, 0–24 examples (DPO pairs for a third
/// of the strategies that take them) that fit under an `Error` policy and may be up to 1.5×
/// the capacity under `Drop`, batches of 1–8, 1–3 epochs.
pub fn arb_packer_case() -> impl Strategy<Value = PackerCase> {
    arb_capacity().prop_flat_map(arb_spec).prop_flat_map(|spec| {
        let cap = spec.capacity();
        let (max_ok, pairs_ok) = limits(&spec);
        let max_len = max_ok.unwrap_or(cap + cap / 2);
        let pairs =
            if pairs_ok { prop::bool::weighted(1.0 / 3.0).boxed() } else { Just(false).boxed() };
        (
            Just(spec),
            pairs,
            vec((0..=max_len, 0..=max_len), 0..=24),
            1usize..=8,
            1u32..=3,
            0u64..1_000,
            any::<bool>(),
        )
            .prop_map(|(spec, pairs, lens, batch_size, epochs, seed, shuffle)| {
                let dataset = lens
                    .into_iter()
                    .enumerate()
                    .map(|(i, (a, b))| {
                        if pairs {
                            Example::pair(i as u64, a, b)
                        } else {
                            Example::single(i as u64, a)
                        }
                    })
                    .collect();
                PackerCase { spec, dataset, batch_size, epochs, seed, shuffle }
            })
    })
}

/// A small bin-packing instance for exact-OPT bounds: capacity 1–20, 1–9 items of `1..=C`.
pub fn arb_small_instance() -> impl Strategy<Value = (u32, Vec<u32>)> {
    (1u32..=20).prop_flat_map(|cap| (Just(cap), vec(1..=cap, 1..=9)))
}
