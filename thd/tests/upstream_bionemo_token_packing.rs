//! Rust twins of bionemo's `TokenPackingDataset` tests (`models/esm2/tests/test_collator.py`,
//! `test_token_packing_dataset*`), with the cases recorded in `reference/nvidia-stacks.md` §1.11.
//! Upstream's tests use `drop_last=False` where the last batch is asserted.

use thd::Error;
use thd::pack::{Example, OverLength, Pack, Packer, TokenPacking, TokenPackingOptions, pack_all};

fn run(lens: &[u32], max: u32, opts: TokenPackingOptions) -> thd::Result<Vec<Pack>> {
    let xs: Vec<Example> =
        lens.iter().enumerate().map(|(i, &l)| Example::single(i as u64, l)).collect();
    pack_all(&mut TokenPacking::new(max, opts)?, &xs)
}

fn real_lens(packs: &[Pack]) -> Vec<Vec<u32>> {
    packs.iter().map(|p| p.seq_lens(0).as_slice().to_vec()).collect()
}

fn split() -> TokenPackingOptions {
    TokenPackingOptions { split_samples: true, ..Default::default() }
}

fn div(d: u32) -> TokenPackingOptions {
    TokenPackingOptions { divisible_by: Some(d), ..Default::default() }
}

// Upstream: NVIDIA-BioNeMo/bionemo-framework models/esm2/tests/test_collator.py::test_token_packing_dataset* (40/40/30, max 100 → [80], [30])
#[test]
fn token_packing_emits_when_the_next_sample_overflows() {
    let packs = run(&[40, 40, 30], 100, TokenPackingOptions::default()).unwrap();
    assert_eq!(packs.iter().map(|p| p.real()[0]).collect::<Vec<_>>(), vec![80, 30]);
}

// Upstream: NVIDIA-BioNeMo/bionemo-framework models/esm2/tests/test_collator.py::test_token_packing_dataset* (40/30/30 → one batch of 100)
#[test]
fn token_packing_emits_an_exact_fit_at_once() {
    let mut p = TokenPacking::new(100, TokenPackingOptions::default()).unwrap();
    let xs = [Example::single(0, 40), Example::single(1, 30), Example::single(2, 30)];
    let packs = p.push(&xs).unwrap();
    assert_eq!(real_lens(&packs), vec![vec![40, 30, 30]]);
    assert_eq!(p.pending(), 0);
}

// Upstream: NVIDIA-BioNeMo/bionemo-framework models/esm2/tests/test_collator.py::test_token_packing_dataset* (split 40/50/30 → 100, then 20)
#[test]
fn token_packing_split_fills_the_pack() {
    let packs = run(&[40, 50, 30], 100, split()).unwrap();
    assert_eq!(real_lens(&packs), vec![vec![40, 50, 10], vec![20]]);
    let pieces: Vec<(u64, u32)> =
        packs.iter().flat_map(|p| p.items.iter().map(|i| (i.id, i.offset))).collect();
    assert_eq!(pieces, vec![(0, 0), (1, 0), (2, 0), (2, 10)]);
}

// Upstream: NVIDIA-BioNeMo/bionemo-framework models/esm2/tests/test_collator.py::test_token_packing_dataset* (padded lens 5,3,7,6 with d=4, max 20 → [5,3,7], [6])
#[test]
fn token_packing_counts_padded_lengths() {
    let packs = run(&[5, 3, 7, 6], 20, div(4)).unwrap();
    assert_eq!(real_lens(&packs), vec![vec![5, 3, 7], vec![6]]);
    assert_eq!(packs[0].load(), [20, 0]);
}

// Upstream: NVIDIA-BioNeMo/bionemo-framework models/esm2/tests/test_collator.py::test_token_packing_dataset* (split 5,3,15 with d=4, max 24 → [5,3,12], [3])
#[test]
fn token_packing_split_rounds_down_to_the_divisibility() {
    let opts =
        TokenPackingOptions { divisible_by: Some(4), split_samples: true, ..Default::default() };
    let packs = run(&[5, 3, 15], 24, opts).unwrap();
    assert_eq!(real_lens(&packs), vec![vec![5, 3, 12], vec![3]]);
    assert_eq!(packs[1].padded_seq_lens(0).as_slice(), &[4]);
}

// Upstream: NVIDIA-BioNeMo/bionemo-framework models/esm2/tests/test_collator.py::test_token_packing_dataset* (max 12, d=8 → 3 batches of 1)
// (sample lengths reconstructed: any three in 5..=8 pad to 8, and two 8s exceed 12)
#[test]
fn token_packing_padding_can_force_one_sample_per_pack() {
    let packs = run(&[5, 6, 7], 12, div(8)).unwrap();
    assert_eq!(real_lens(&packs), vec![vec![5], vec![6], vec![7]]);
}

// Upstream: NVIDIA-BioNeMo/bionemo-framework models/esm2/tests/test_collator.py::test_token_packing_dataset* (raw 9 with d=4, max 10 raises "Padded sample length.*12.*exceeds…10")
#[test]
fn token_packing_rejects_a_padded_sample_over_the_budget() {
    let err = run(&[9], 10, div(4)).unwrap_err();
    assert_eq!(err, Error::ExampleTooLong { id: 0, len: 12, branch: "single", capacity: 10 });
    let dropped = TokenPackingOptions { over_length: OverLength::Drop, ..div(4) };
    let mut p = TokenPacking::new(10, dropped).unwrap();
    assert!(pack_all(&mut p, &[Example::single(0, 9)]).unwrap().is_empty());
    assert_eq!(p.dropped().len(), 1);
}

// Upstream: NVIDIA-BioNeMo/bionemo-framework models/esm2/tests/test_collator.py::test_token_packing_dataset* (a warning iff max % d != 0)
#[test]
fn token_packing_flags_a_capacity_not_divisible() {
    assert!(TokenPacking::new(10, div(4)).unwrap().capacity_not_divisible());
    assert!(!TokenPacking::new(12, div(4)).unwrap().capacity_not_divisible());
    assert!(
        !TokenPacking::new(10, TokenPackingOptions::default()).unwrap().capacity_not_divisible()
    );
}
