//! Twins of bionemo-recipes' collator tests: ESM-2 `models/esm2/tests/test_collator.py`,
//! `test_collator_context_parallel.py`, and CodonFM
//! `recipes/codonfm_native_te/tests/test_collator.py`, same inputs and expected outputs.
//!
//! bionemo's MLM masking comes from the wrapped Hugging Face collator; here an example carries
//! its labels (all -100 for `mlm_probability = 0`), and the causal-LM collator uses the tokens.

use std::collections::BTreeMap;

use thd::collate::{
    BoundaryLabels, CpPadding, Document, FlattenOptions, MockPadding, attention_mask, flatten,
    pad_for_cp, pad_sequences_for_cp, pad_to_multiple_of,
};
use thd::cp::{CpLayout, shard_batch};
use thd::{CuSeqlens, Error, PackedBatch};

const ESM_PAD: i64 = 1;

fn esm_features() -> Vec<Vec<i64>> {
    vec![vec![0, 5, 6, 7, 2], vec![0, 8, 9, 10, 11, 2], vec![0, 12, 13, 2]]
}

/// MLM with `mlm_probability = 0`: every label -100.
fn mlm(features: &[Vec<i64>]) -> Vec<Document> {
    features.iter().map(|f| Document::with_labels(f.clone(), vec![-100; f.len()])).collect()
}

/// Causal LM with `separator_id = -100`.
fn clm(features: &[Vec<i64>]) -> PackedBatch {
    let ex: Vec<Document> = features.iter().map(|f| Document::new(f.clone())).collect();
    let opts = FlattenOptions { boundary: BoundaryLabels::AfterFirst, ..Default::default() };
    flatten(&ex, &opts).unwrap()
}

fn mock(m: usize) -> MockPadding {
    MockPadding { multiple_of: m, pad_token_id: ESM_PAD, max_mock_len: None }
}

fn positions(lens: &[i64]) -> Vec<i64> {
    lens.iter().flat_map(|&n| 0..n).collect()
}

// Upstream: NVIDIA-BioNeMo/bionemo-framework bionemo-recipes/models/esm2/tests/test_collator.py::test_data_collator_with_flattening_basic
#[test]
fn esm2_flattening_basic() {
    let b = flatten(&mlm(&esm_features()), &FlattenOptions::default()).unwrap();
    assert_eq!(b.input_ids(), &[0, 5, 6, 7, 2, 0, 8, 9, 10, 11, 2, 0, 12, 13, 2]);
    assert_eq!(b.cu_seqlens().as_slice(), &[0, 5, 11, 15]); // cu_seq_lens_q == cu_seq_lens_k
    assert_eq!(b.cu_seqlens().max_seqlen(), 6); // max_length_q/k
    assert_eq!(b.position_ids(), positions(&[5, 6, 4]));
    assert!(b.labels().iter().all(|&l| l == -100));
}

// Upstream: NVIDIA-BioNeMo/bionemo-framework bionemo-recipes/models/esm2/tests/test_collator.py::test_data_collator_with_flattening_with_labels
#[test]
fn esm2_flattening_with_labels() {
    let features = esm_features();
    let b = flatten(&mlm(&features), &FlattenOptions::default()).unwrap();
    assert!(b.labels().iter().all(|&l| l == -100));
    for (i, f) in features.iter().enumerate() {
        assert_eq!(&b.input_ids()[b.real_tokens(i)], f.as_slice(), "sequence {i} intact");
    }
}

// Upstream: NVIDIA-BioNeMo/bionemo-framework bionemo-recipes/models/esm2/tests/test_collator.py::test_data_collator_with_flattening_with_labels_causal_lm
#[test]
fn esm2_flattening_with_labels_causal_lm() {
    let b = clm(&esm_features());
    assert_eq!(b.labels(), &[0, 5, 6, 7, 2, -100, 8, 9, 10, 11, 2, -100, 12, 13, 2]);
}

// Upstream: NVIDIA-BioNeMo/bionemo-framework bionemo-recipes/models/esm2/tests/test_collator.py::test_data_collator_pads_to_multiple_of
#[test]
fn esm2_pads_to_multiple_of() {
    let b = flatten(&mlm(&esm_features()), &FlattenOptions::default()).unwrap();
    let p = pad_to_multiple_of(&b, &mock(8)).unwrap();
    assert_eq!(p.num_tokens(), 16);
    assert_eq!(p.input_ids()[15], ESM_PAD);
    assert_eq!(p.cu_seqlens().as_slice(), &[0, 5, 11, 15, 16]);
    assert_eq!(p.position_ids(), positions(&[5, 6, 4, 1]));
    assert_eq!(attention_mask(&p), [vec![1; 15], vec![0]].concat());
    assert_eq!(p.cu_seqlens().max_seqlen(), 6);
    // Option A: the mock never counts as real.
    assert_eq!(p.num_real_seqs(), Some(3));
    // Reference runs: m=32 gives one 17-token mock; m=5 and m=1 change nothing.
    let p32 = pad_to_multiple_of(&b, &mock(32)).unwrap();
    assert_eq!(p32.cu_seqlens().as_slice(), &[0, 5, 11, 15, 32]);
    assert_eq!(p32.cu_seqlens().max_seqlen(), 17);
    assert_eq!(&p32.position_ids()[15..], positions(&[17]).as_slice());
    for m in [5, 1] {
        let same = pad_to_multiple_of(&b, &mock(m)).unwrap();
        assert_eq!(same.cu_seqlens(), b.cu_seqlens());
        assert_eq!(same.input_ids(), b.input_ids());
    }
}

// Upstream: NVIDIA-BioNeMo/bionemo-framework bionemo-recipes/models/esm2/tests/test_collator.py::test_data_collator_with_flattening_causal_lm_and_padding
#[test]
fn esm2_causal_lm_and_padding() {
    let b = clm(&esm_features());
    let p =
        pad_for_cp(&b, &CpPadding { divisibility: 6, pad_token_id: ESM_PAD, pad_label_id: -100 })
            .unwrap();
    assert_eq!(
        p.labels(),
        &[0, 5, 6, 7, 2, -100, -100, 8, 9, 10, 11, 2, -100, 12, 13, 2, -100, -100]
    );
    let pp = ESM_PAD;
    assert_eq!(p.input_ids(), &[0, 5, 6, 7, 2, pp, 0, 8, 9, 10, 11, 2, 0, 12, 13, 2, pp, pp]);
    assert_eq!(p.cu_seqlens().as_slice(), &[0, 5, 11, 15]);
    assert_eq!(p.cu_seqlens_padded().unwrap().as_slice(), &[0, 6, 12, 18]);
    // bionemo leaves position_ids at 15 entries here; every per-token field is padded instead.
    assert_eq!(p.position_ids().len(), 18);
}

// Upstream: NVIDIA-BioNeMo/bionemo-framework bionemo-recipes/models/esm2/tests/test_collator.py::test_mlm_data_collator_with_flattening_basic
#[test]
fn esm2_mlm_flattening_basic() {
    let features =
        vec![vec![0, 5, 6, 7, 2], vec![0, 8, 9, 10, 11, 2], vec![0, 12, 13, 14, 15, 16, 2]];
    let b = flatten(&mlm(&features), &FlattenOptions::default()).unwrap();
    assert_eq!(b.cu_seqlens().as_slice(), &[0, 5, 11, 18]);
    assert_eq!(b.cu_seqlens().max_seqlen(), 7);
    assert_eq!(b.position_ids(), positions(&[5, 6, 7]));
}

// Upstream: NVIDIA-BioNeMo/bionemo-framework bionemo-recipes/models/esm2/tests/test_collator.py::test_mlm_data_collator_with_flattening_pad_to_multiple_of
#[test]
fn esm2_mlm_pad_to_multiple_of() {
    let features =
        vec![vec![0, 5, 6, 7, 2], vec![0, 8, 9, 10, 11, 2], vec![0, 12, 13, 14, 15, 16, 2]];
    let b = flatten(&mlm(&features), &FlattenOptions::default()).unwrap();
    let p = pad_to_multiple_of(&b, &mock(8)).unwrap();
    let r = p.num_tokens() - b.num_tokens();
    assert_eq!(p.num_tokens() % 8, 0);
    assert!(p.input_ids()[b.num_tokens()..].iter().all(|&t| t == ESM_PAD));
    assert!(p.labels()[b.num_tokens()..].iter().all(|&l| l == -100));
    assert_eq!(p.cu_seqlens().as_slice().len(), features.len() + 2);
    assert!(r < 7);
    assert_eq!(p.cu_seqlens().max_seqlen(), 7); // unchanged: the remainder is shorter
    assert!(attention_mask(&p)[b.num_tokens()..].iter().all(|&m| m == 0));
}

// Upstream: NVIDIA-BioNeMo/bionemo-framework bionemo-recipes/models/esm2/tests/test_collator.py::test_mlm_data_collator_with_flattening_pad_sequences_to_be_divisible_by
#[test]
fn esm2_mlm_pad_sequences_to_be_divisible_by() {
    let features =
        vec![vec![0, 5, 6, 7, 2], vec![0, 8, 9, 10, 11, 2], vec![0, 12, 13, 14, 15, 16, 2]];
    let b = flatten(&mlm(&features), &FlattenOptions::default()).unwrap();
    let p =
        pad_for_cp(&b, &CpPadding { divisibility: 16, pad_token_id: ESM_PAD, pad_label_id: -100 })
            .unwrap();
    assert_eq!(p.num_tokens() % 16, 0);
    assert_eq!(*p.input_ids().last().unwrap(), ESM_PAD);
    assert_eq!(*p.labels().last().unwrap(), -100);
    assert!(p.cu_seqlens_padded().is_some()); // pad_between_seqs
}

// Upstream: NVIDIA-BioNeMo/bionemo-framework bionemo-recipes/models/esm2/tests/test_collator_context_parallel.py::test_pad_thd_sequences_for_cp
#[test]
fn esm2_pad_thd_sequences_for_cp() {
    let ids: Vec<i64> = [vec![1; 7], vec![2; 11], vec![3; 5]].concat();
    let labels =
        [10, 11, 12, 13, 14, 15, 16, 20, 21, 22, 23, 24, 25, 26, 27, 28, 29, 30, 5, 6, 7, 8, 9];
    let cu = CuSeqlens::try_from(vec![0, 7, 18, 23]).unwrap();
    let opts = CpPadding { divisibility: 4, pad_token_id: 1, pad_label_id: -100 };
    let out = pad_sequences_for_cp(&ids, &labels, &cu, &opts).unwrap();
    let expected_ids: Vec<i64> =
        [vec![1; 7], vec![1], vec![2; 11], vec![1], vec![3; 5], vec![1; 3]].concat();
    #[rustfmt::skip]
    let expected_labels = vec![
        10, 11, 12, 13, 14, 15, 16, -100,
        20, 21, 22, 23, 24, 25, 26, 27, 28, 29, 30, -100,
        5, 6, 7, 8, 9, -100, -100, -100,
    ];
    assert_eq!(out.input_ids, expected_ids);
    assert_eq!(out.labels, expected_labels);
    assert_eq!(out.cu_seqlens_padded.as_slice(), &[0, 8, 20, 28]);
}

fn scatter(ids: &[i64], labels: &[i64], cu: &[i32], cp: usize) -> Vec<(Vec<i64>, Vec<i64>)> {
    let cu = CuSeqlens::try_from(cu.to_vec()).unwrap();
    let p = pad_sequences_for_cp(ids, labels, &cu, &CpPadding::for_cp(cp, 1)).unwrap();
    let layout = CpLayout::new(&cu, Some(&p.cu_seqlens_padded), cp).unwrap();
    (0..cp)
        .map(|r| (layout.split(&p.input_ids, r).unwrap(), layout.split(&p.labels, r).unwrap()))
        .collect()
}

// Upstream: NVIDIA-BioNeMo/bionemo-framework bionemo-recipes/models/esm2/tests/test_collator_context_parallel.py::test_dataloader_scatter_nopadding
#[test]
fn esm2_dataloader_scatter_nopadding() {
    let dp0 = scatter(&[1, 2, 3, 4, 5, 6, 7, 8], &[10, 20, 30, 40, 50, 60, 70, 80], &[0, 8], 2);
    assert_eq!(dp0[0], (vec![1, 2, 7, 8], vec![10, 20, 70, 80]));
    assert_eq!(dp0[1], (vec![3, 4, 5, 6], vec![30, 40, 50, 60]));
    let dp1 = scatter(
        &[9, 10, 11, 12, 13, 14, 15, 16],
        &[90, 100, 110, 120, 130, 140, 150, 160],
        &[0, 8],
        2,
    );
    assert_eq!(dp1[0], (vec![9, 10, 15, 16], vec![90, 100, 150, 160]));
    assert_eq!(dp1[1], (vec![11, 12, 13, 14], vec![110, 120, 130, 140]));
}

// Upstream: NVIDIA-BioNeMo/bionemo-framework bionemo-recipes/models/esm2/tests/test_collator_context_parallel.py::test_dataloader_scatter_with_pad_between_seqs
#[test]
fn esm2_dataloader_scatter_with_pad_between_seqs() {
    let p = 1;
    let dp0 = scatter(&[1, 2, 3, 5, 6], &[10, 20, 30, 50, 60], &[0, 3, 5], 2);
    assert_eq!(dp0[0].0, vec![1, p, 5, p]);
    assert_eq!(dp0[1].0, vec![2, 3, 6, p]);
    assert_eq!(dp0[0].1, vec![10, -100, 50, -100]);
    let dp1 = scatter(&[9, 10, 11, 13, 14, 15], &[90, 100, 110, 130, 140, 150], &[0, 3, 6], 2);
    assert_eq!(dp1[0].0, vec![9, p, 13, p]);
    assert_eq!(dp1[1].0, vec![10, 11, 14, 15]);
}

// Upstream: NVIDIA-BioNeMo/bionemo-framework bionemo-recipes/models/esm2/tests/test_collator_context_parallel.py::test_split_batch_by_cp_rank_bshd_* (cp 2 and 4, 3-D tensors)
#[test]
fn esm2_split_batch_by_cp_rank_bshd() {
    let two = CpLayout::new(&CuSeqlens::try_from(vec![0, 8]).unwrap(), None, 2).unwrap();
    let ids: Vec<i64> = (1..=8).collect();
    assert_eq!(two.split(&ids, 0).unwrap(), vec![1, 2, 7, 8]);
    assert_eq!(two.split(&ids, 1).unwrap(), vec![3, 4, 5, 6]);
    // cp = 4, S = 16: rank r holds chunks r and 7 − r.
    let four = CpLayout::new(&CuSeqlens::try_from(vec![0, 16]).unwrap(), None, 4).unwrap();
    let ids: Vec<i64> = (1..=16).collect();
    let expected = [[1, 2, 15, 16], [3, 4, 13, 14], [5, 6, 11, 12], [7, 8, 9, 10]];
    let mut all = Vec::new();
    for (r, e) in expected.iter().enumerate() {
        let shard = four.split(&ids, r).unwrap();
        assert_eq!(shard, e.to_vec());
        all.extend(shard);
    }
    all.sort_unstable();
    assert_eq!(all, ids);
    // [2, 8, hidden]: whole hidden rows move with their token.
    let rows = CpLayout::new(&CuSeqlens::try_from(vec![0, 8, 16]).unwrap(), None, 2).unwrap();
    let hidden = 3;
    let x: Vec<i64> = (0..16 * hidden as i64).collect();
    let r0 = rows.split_rows(&x, hidden, 0).unwrap();
    let tok = |t: i64| (t * 3..t * 3 + 3).collect::<Vec<_>>();
    assert_eq!(r0, [0, 1, 6, 7, 8, 9, 14, 15].iter().flat_map(|&t| tok(t)).collect::<Vec<_>>());
}

// Upstream: NVIDIA-BioNeMo/bionemo-framework bionemo-recipes/models/esm2/tests/test_collator_context_parallel.py::test_bshd_and_thd_equivalence
#[test]
fn esm2_bshd_and_thd_equivalence() {
    // Two 32-token sequences (30 residues + CLS/EOS), cp = 2.
    let s1: Vec<i64> = (0..32).map(|t| 100 + t).collect();
    let s2: Vec<i64> = (0..32).map(|t| 200 + t).collect();
    let thd = CpLayout::new(&CuSeqlens::try_from(vec![0, 32, 64]).unwrap(), None, 2).unwrap();
    let row = CpLayout::new(&CuSeqlens::try_from(vec![0, 32]).unwrap(), None, 2).unwrap();
    let stream = [s1.clone(), s2.clone()].concat();
    for r in 0..2 {
        let shard = thd.split(&stream, r).unwrap();
        assert_eq!(shard[..16], row.split(&s1, r).unwrap()[..]);
        assert_eq!(shard[16..], row.split(&s2, r).unwrap()[..]);
    }
}

// Upstream: NVIDIA-BioNeMo/bionemo-framework bionemo-recipes/models/esm2/tests/test_collator_context_parallel.py::test_data_collator_for_context_parallel_returns_correct_list_size
#[test]
fn esm2_cp_collator_returns_one_shard_per_rank() {
    let features = vec![vec![0, 5, 6, 7, 8, 9, 10, 2], vec![0, 11, 12, 13, 14, 15, 16, 17, 2]];
    for cp in [2, 4] {
        let b = flatten(&mlm(&features), &FlattenOptions::default()).unwrap();
        let p = pad_for_cp(&b, &CpPadding::for_cp(cp, ESM_PAD)).unwrap();
        let (_, shards) = shard_batch(&p, cp).unwrap();
        assert_eq!(shards.len(), cp);
    }
}

// Upstream: NVIDIA-BioNeMo/bionemo-framework bionemo-recipes/models/esm2/tests/test_collator_context_parallel.py::test_data_collator_for_context_parallel_thd_causal_lm
#[test]
fn esm2_cp_collator_thd_causal_lm() {
    let features = vec![vec![0, 5, 6, 7, 8, 9, 10, 2], vec![0, 11, 12, 13, 14, 15, 16, 17, 2]];
    let p = pad_for_cp(&clm(&features), &CpPadding::for_cp(2, ESM_PAD)).unwrap();
    let (_, shards) = shard_batch(&p, 2).unwrap();
    assert_eq!(shards[0].input_ids, vec![0, 5, 10, 2, 0, 11, 12, 1, 1, 1]);
    assert_eq!(shards[0].labels, vec![5, 6, 2, -100, 11, 12, 13, -100, -100, -100]);
    assert_eq!(shards[1].input_ids, vec![6, 7, 8, 9, 13, 14, 15, 16, 17, 2]);
    assert_eq!(shards[1].labels, vec![7, 8, 9, 10, 14, 15, 16, 17, 2, -100]);
}

// Upstream: NVIDIA-BioNeMo/bionemo-framework bionemo-recipes/models/esm2/tests/test_collator_context_parallel.py::test_data_collator_for_context_parallel_thd_correctness
#[test]
fn esm2_cp_collator_thd_correctness() {
    // Inputs reconstructed (the fixture is not in the reference): 16 padded tokens over cp = 2.
    let features = vec![vec![0, 5, 6, 7, 8, 9, 10, 2], vec![0, 11, 12, 13, 14, 2]];
    let b = flatten(&mlm(&features), &FlattenOptions::default()).unwrap();
    let p = pad_for_cp(&b, &CpPadding::for_cp(2, ESM_PAD)).unwrap();
    let (layout, shards) = shard_batch(&p, 2).unwrap();
    assert_eq!(layout.max_seqlen_rounded(64).unwrap(), 64);
    let mut union = BTreeMap::<i64, usize>::new();
    for s in &shards {
        assert_eq!(s.input_ids.len(), 8);
        for &t in &s.input_ids {
            *union.entry(t).or_default() += 1;
        }
    }
    let mut original = BTreeMap::<i64, usize>::new();
    for &t in p.input_ids() {
        *original.entry(t).or_default() += 1;
    }
    assert_eq!(union, original);
}

// Upstream: NVIDIA-BioNeMo/bionemo-framework bionemo-recipes/models/esm2/tests/test_collator_context_parallel.py::test_data_collator_for_context_parallel_thd_max_length_rounding
#[test]
fn esm2_cp_collator_max_length_rounding() {
    for (len, rounded) in [(8, 64), (64, 64), (65, 128), (100, 128), (128, 128), (129, 192)] {
        let layout = CpLayout::new(&CuSeqlens::try_from(vec![0, len]).unwrap(), None, 1).unwrap();
        assert_eq!(layout.max_seqlen_rounded(64).unwrap(), rounded, "{len}");
    }
}

/// bionemo's (and TE's) Python THD split floors `L / (2·cp)` and silently drops the rest:
/// `cu=[0,6,16]`, cp=2 loses tokens 4, 5, 14 and 15. Here the length is an error.
#[test]
fn esm2_split_never_drops_tokens() {
    let err = CpLayout::new(&CuSeqlens::try_from(vec![0, 6, 16]).unwrap(), None, 2).unwrap_err();
    assert_eq!(err, Error::CpLengthNotDivisible { segment: 0, length: 6, divisor: 4 });
}

// ---- CodonFM ---------------------------------------------------------------------------------

const CLS: i64 = 0;
const SEP: i64 = 1;
const CODON_PAD: i64 = 3;
const ATG: i64 = 19;

/// `CodonTokenizer` on a run of ATG codons with `mlm_probability = 0`: CLS, codons, SEP; labels
/// all -100.
fn codon(seq: &str) -> Document {
    let ids: Vec<i64> = [vec![CLS], vec![ATG; seq.len() / 3], vec![SEP]].concat();
    let n = ids.len();
    Document::with_labels(ids, vec![-100; n])
}

fn codon_batch(seqs: &[&str], m: Option<usize>, max_seq_length: usize) -> PackedBatch {
    let ex: Vec<Document> = seqs.iter().map(|s| codon(s)).collect();
    let b = flatten(&ex, &FlattenOptions::default()).unwrap();
    match m {
        None => b,
        Some(m) => pad_to_multiple_of(
            &b,
            &MockPadding {
                multiple_of: m,
                pad_token_id: CODON_PAD,
                max_mock_len: Some(max_seq_length),
            },
        )
        .unwrap(),
    }
}

const THREE: [&str; 3] = ["ATGATG", "ATGATGATG", "ATG"];

// Upstream: NVIDIA-BioNeMo/bionemo-framework bionemo-recipes/recipes/codonfm_native_te/tests/test_collator.py::TestCodonTHDCollatorPadding::test_no_padding_when_disabled
#[test]
fn codonfm_no_padding_when_disabled() {
    assert_eq!(codon_batch(&THREE, None, 512).cu_seqlens().as_slice().len(), 4);
}

// Upstream: NVIDIA-BioNeMo/bionemo-framework bionemo-recipes/recipes/codonfm_native_te/tests/test_collator.py::TestCodonTHDCollatorPadding::test_pads_to_multiple_of_8
#[test]
fn codonfm_pads_to_multiple_of_8() {
    assert_eq!(codon_batch(&THREE, Some(8), 512).num_tokens() % 8, 0);
}

// Upstream: NVIDIA-BioNeMo/bionemo-framework bionemo-recipes/recipes/codonfm_native_te/tests/test_collator.py::TestCodonTHDCollatorPadding::test_pads_to_multiple_of_32
#[test]
fn codonfm_pads_to_multiple_of_32() {
    let b = codon_batch(&THREE, Some(32), 512);
    assert_eq!(b.num_tokens() % 32, 0);
    assert_eq!(b.labels().len() % 32, 0);
}

// Upstream: NVIDIA-BioNeMo/bionemo-framework bionemo-recipes/recipes/codonfm_native_te/tests/test_collator.py::TestCodonTHDCollatorPadding::test_padding_tokens_are_pad_id
#[test]
fn codonfm_padding_tokens_are_pad_id() {
    let b = codon_batch(&["ATGATG"], Some(64), 512);
    assert_eq!(b.num_tokens(), 64);
    let n = b.cu_seqlens().as_slice().len();
    let real_end = b.cu_seqlens().as_slice()[n - 2] as usize;
    assert!(b.input_ids()[real_end..].iter().all(|&t| t == CODON_PAD));
}

// Upstream: NVIDIA-BioNeMo/bionemo-framework bionemo-recipes/recipes/codonfm_native_te/tests/test_collator.py::TestCodonTHDCollatorPadding::test_padding_labels_are_minus_100
#[test]
fn codonfm_padding_labels_are_minus_100() {
    let b = codon_batch(&["ATGATG"], Some(64), 512);
    let n = b.cu_seqlens().as_slice().len();
    let real_end = b.cu_seqlens().as_slice()[n - 2] as usize;
    assert!(b.labels()[real_end..].iter().all(|&l| l == -100));
}

// Upstream: NVIDIA-BioNeMo/bionemo-framework bionemo-recipes/recipes/codonfm_native_te/tests/test_collator.py::TestCodonTHDCollatorPadding::test_cu_seq_lens_includes_mock_sequences
#[test]
fn codonfm_cu_seq_lens_includes_mock_sequences() {
    let b = codon_batch(&THREE, Some(64), 512);
    let cu = b.cu_seqlens().as_slice();
    assert!(cu.len() >= 3 + 2);
    assert_eq!(*cu.last().unwrap() as usize, b.num_tokens());
    assert!(cu.windows(2).all(|w| w[1] > w[0]));
    assert_eq!(b.num_real_seqs(), Some(3));
}

// Upstream: NVIDIA-BioNeMo/bionemo-framework bionemo-recipes/recipes/codonfm_native_te/tests/test_collator.py::TestCodonTHDCollatorPadding::test_cu_seq_lens_q_equals_k
#[test]
fn codonfm_cu_seq_lens_q_equals_k() {
    // One offsets object serves q and k; padding to 16 must leave it valid.
    let b = codon_batch(&["ATGATG", "ATGATGATG"], Some(16), 512);
    assert_eq!(b.cu_seqlens().as_slice(), &[0, 4, 9, 16]);
}

// Upstream: NVIDIA-BioNeMo/bionemo-framework bionemo-recipes/recipes/codonfm_native_te/tests/test_collator.py::TestCodonTHDCollatorPadding::test_no_padding_when_already_aligned
#[test]
fn codonfm_no_padding_when_already_aligned() {
    let b = codon_batch(&["ATGATG", "ATGATGATG"], Some(1), 512);
    assert_eq!(b.cu_seqlens().as_slice().len(), 3);
}

// Upstream: NVIDIA-BioNeMo/bionemo-framework bionemo-recipes/recipes/codonfm_native_te/tests/test_collator.py::TestCodonTHDCollatorPadding::test_exact_values_small_batch
#[test]
fn codonfm_exact_values_small_batch() {
    let b = codon_batch(&["ATG", "ATGATG"], Some(8), 512);
    assert_eq!(b.num_tokens(), 8);
    assert_eq!(b.cu_seqlens().as_slice(), &[0, 3, 7, 8]);
    assert_eq!(b.input_ids(), &[0, 19, 1, 0, 19, 19, 1, 3]);
    assert!(b.labels().iter().all(|&l| l == -100));
    assert_eq!(b.cu_seqlens().max_seqlen(), 4);
}

// Upstream: NVIDIA-BioNeMo/bionemo-framework bionemo-recipes/recipes/codonfm_native_te/tests/test_collator.py::TestCodonTHDCollatorPadding::test_max_length_capped_at_max_seq_length
#[test]
fn codonfm_max_length_capped_at_max_seq_length() {
    let b = codon_batch(&["ATG"], Some(128), 10);
    assert_eq!(b.num_tokens(), 128);
    assert!(b.cu_seqlens().max_seqlen() <= 10);
}

// Upstream: NVIDIA-BioNeMo/bionemo-framework bionemo-recipes/recipes/codonfm_native_te/tests/test_collator.py::TestCodonTHDCollatorPadding::test_padding_splits_long_sequences
#[test]
fn codonfm_padding_splits_long_sequences() {
    let b = codon_batch(&["ATG"], Some(100), 5);
    assert_eq!(b.num_tokens(), 100);
    let cu = b.cu_seqlens();
    assert!(cu.max_seqlen() <= 5);
    // Reference run: [0, 3, 8, 13, …, 98, 100] — 19 chunks of 5 and one of 2.
    let expected: Vec<i32> =
        [vec![0, 3], (1..=19).map(|k| 3 + 5 * k).collect::<Vec<_>>(), vec![100]].concat();
    assert_eq!(cu.as_slice(), expected.as_slice());
    assert_eq!(b.num_real_seqs(), Some(1));
}

// Upstream: NVIDIA-BioNeMo/bionemo-framework bionemo-recipes/recipes/codonfm_native_te/tests/test_collator.py::TestCreateTHDDataloaderPadding::test_default_pad_to_multiple_of
#[test]
fn codonfm_default_pad_to_multiple_of() {
    // create_thd_dataloader pads to micro_batch_size · max_seq_length = 2 · 512.
    let b = codon_batch(&THREE, Some(2 * 512), 512);
    assert_eq!(b.num_tokens(), 1024);
    assert!(b.cu_seqlens().max_seqlen() <= 512);
}
