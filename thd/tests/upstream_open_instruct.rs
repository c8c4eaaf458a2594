//! Twins of open-instruct's DPO packing tests (`open_instruct/test_padding_free_collator.py`,
//! class `TestDPOPackingIndices`, added by PR #1466 `ee0c460`), same inputs and expected
//! outputs, plus the reference's runs of the bugs that PR fixed.
//!
//! Logits are drawn from a seeded RNG where upstream uses `torch.randn`.

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use thd::collate::{
    Document, DpoBatch, DpoExample, DpoOptions, collate_dpo, count_features_within_token_budget,
    segment_logps,
};

/// `_make_dpo_features`: tensors of ones (input ids and labels), lengths cycling.
fn make_dpo_features(
    n: usize,
    chosen: &[usize],
    rejected: &[usize],
    start: i64,
) -> Vec<DpoExample> {
    (0..n)
        .map(|i| {
            let (c, r) = (chosen[i % chosen.len()], rejected[i % rejected.len()]);
            DpoExample {
                chosen: Document::with_labels(vec![1; c], vec![1; c]),
                rejected: Document::with_labels(vec![1; r], vec![1; r]),
                index: start + i as i64,
            }
        })
        .collect()
}

fn collate(max: usize, n: usize, chosen: &[usize], rejected: &[usize], start: i64) -> DpoBatch {
    let opts = DpoOptions { max_seq_length: Some(max), ..Default::default() };
    collate_dpo(&make_dpo_features(n, chosen, rejected, start), &opts).unwrap()
}

/// `concatenated_inputs` then `get_batch_logps` on random logits: `(bs, logps)`.
fn logps(batch: &DpoBatch, vocab: usize, average: bool, seed: u64) -> (usize, Vec<f64>) {
    let cat = batch.concatenated().unwrap();
    let mut rng = StdRng::seed_from_u64(seed);
    let logits: Vec<f64> =
        (0..cat.batch.num_tokens() * vocab).map(|_| rng.random::<f64>() * 4.0 - 2.0).collect();
    let segments = (0..cat.batch.num_segments()).map(|i| cat.batch.real_tokens(i));
    let lp = segment_logps(&logits, vocab, cat.batch.labels(), segments, average).unwrap();
    (cat.num_chosen, lp)
}

// Upstream: allenai/open-instruct open_instruct/test_padding_free_collator.py::TestDPOPackingIndices::test_indices_preserved
#[test]
fn open_instruct_indices_preserved() {
    for (max, start, expected) in [(1000, 10, vec![10, 11, 12, 13]), (500, 0, vec![0, 1, 2, 3])] {
        let b = collate(max, 4, &[50], &[50], start);
        assert_eq!(b.index, expected);
    }
}

// Upstream: allenai/open-instruct open_instruct/test_padding_free_collator.py::TestDPOPackingIndices::test_cu_seq_lens_matches_index_count
#[test]
fn open_instruct_cu_seq_lens_matches_index_count() {
    for (max, c, r) in [(1000, 50, 50), (200, 100, 100), (250, 100, 50)] {
        let b = collate(max, 4, &[c], &[r], 0);
        let n = b.index.len();
        assert_eq!(b.chosen.cu_seqlens().as_slice().len(), n + 1);
        assert_eq!(b.rejected.cu_seqlens().as_slice().len(), n + 1);
    }
}

// Upstream: allenai/open-instruct open_instruct/test_padding_free_collator.py::TestDPOPackingIndices::test_concatenated_inputs_returns_correct_bs
#[test]
fn open_instruct_concatenated_inputs_returns_correct_bs() {
    let b = collate(1000, 4, &[50], &[50], 0);
    let cat = b.concatenated().unwrap();
    assert_eq!(cat.num_chosen, b.index.len());
    assert_eq!(cat.open_instruct_cu_seq_lens.len(), 2 * cat.num_chosen + 1);
    assert_eq!(cat.batch.cu_seqlens().as_slice().len(), 2 * cat.num_chosen + 1);
}

// Upstream: allenai/open-instruct open_instruct/test_padding_free_collator.py::TestDPOPackingIndices::test_logps_count_matches_indices
#[test]
fn open_instruct_logps_count_matches_indices() {
    for (max, c, r, min_indices) in
        [(1000, 100, 100, 4), (300, 100, 100, 3), (150, 100, 100, 1), (250, 100, 50, 2)]
    {
        let b = collate(max, 4, &[c], &[r], 0);
        let (bs, lp) = logps(&b, 100, false, 7);
        let n = b.index.len();
        assert!(n >= min_indices);
        assert_eq!(lp.len(), 2 * bs);
        assert_eq!(lp[..bs].len(), n);
        assert_eq!(lp[bs..].len(), n);
    }
}

// Upstream: allenai/open-instruct open_instruct/test_padding_free_collator.py::TestDPOPackingIndices::test_simulate_reference_cache
#[test]
fn open_instruct_simulate_reference_cache() {
    for (max, expected_missing) in [(1000, vec![]), (300, vec![3, 7, 11, 15])] {
        let all = make_dpo_features(16, &[100], &[100], 0);
        let opts = DpoOptions { max_seq_length: Some(max), ..Default::default() };
        let (mut chosen, mut rejected) = (vec![f64::NEG_INFINITY; 16], vec![f64::NEG_INFINITY; 16]);
        for (k, group) in all.chunks(4).enumerate() {
            let b = collate_dpo(group, &opts).unwrap();
            let (bs, lp) = logps(&b, 100, false, k as u64);
            assert_eq!(bs, b.index.len());
            for (j, &i) in b.index.iter().enumerate() {
                chosen[i as usize] = lp[j];
                rejected[i as usize] = lp[bs + j];
            }
        }
        let missing =
            |v: &[f64]| -> Vec<usize> { (0..16).filter(|&i| v[i] == f64::NEG_INFINITY).collect() };
        assert_eq!(missing(&chosen), expected_missing, "max_seq_length={max}");
        assert_eq!(missing(&rejected), expected_missing, "max_seq_length={max}");
    }
}

// Upstream: allenai/open-instruct open_instruct/test_padding_free_collator.py::TestDPOPackingIndices::test_prefilter_keeps_complete_sequences
#[test]
fn open_instruct_prefilter_keeps_complete_sequences() {
    let b = collate(150, 4, &[100], &[100], 0);
    assert_eq!(b.index.len(), 1);
    assert_eq!(b.chosen.cu_seqlens().total(), 100);
    assert_eq!(b.rejected.cu_seqlens().total(), 100);
}

// Upstream: allenai/open-instruct open_instruct/test_padding_free_collator.py::TestDPOPackingIndices::test_average_log_prob_all_masked_segment
#[test]
fn open_instruct_average_log_prob_all_masked_segment() {
    let (vocab, t) = (100, 20);
    let mut labels = vec![1i64; t];
    labels[5..10].fill(-100);
    let segments = [0..5, 5..10, 10..20];
    let mut rng = StdRng::seed_from_u64(0);
    let logits: Vec<f64> = (0..t * vocab).map(|_| rng.random::<f64>()).collect();
    let lp = segment_logps(&logits, vocab, &labels, segments.clone(), true).unwrap();
    assert_eq!(lp.len(), 3);
    assert!(lp.iter().all(|x| !x.is_nan()));
    // Reference run with zero logits: [-ln 100, 0, -ln 100] (NaN in the middle before 9ea9bb79e).
    let zero = vec![0.0f64; t * vocab];
    let lp = segment_logps(&zero, vocab, &labels, segments, true).unwrap();
    let ln100 = (vocab as f64).ln();
    assert!((lp[0] + ln100).abs() < 1e-12 && lp[1] == 0.0 && (lp[2] + ln100).abs() < 1e-12);
}

// Upstream: allenai/open-instruct open_instruct/test_padding_free_collator.py::TestDPOPackingIndices::test_concatenated_cu_seq_lens_with_padding
#[test]
fn open_instruct_concatenated_cu_seq_lens_with_padding() {
    let b = collate(500, 2, &[50], &[50], 0);
    let cat = b.concatenated().unwrap();
    assert_eq!(cat.num_chosen, 2);
    assert_eq!((b.chosen.num_tokens(), b.rejected.num_tokens()), (500, 500));
    assert_eq!(cat.batch.num_tokens(), 1000);
    assert_eq!(cat.open_instruct_cu_seq_lens, vec![0, 50, 100, 550, 600]);
    // The exact layout: every segment on its own tokens.
    assert_eq!(
        (0..4).map(|i| cat.batch.real_tokens(i)).collect::<Vec<_>>(),
        vec![0..50, 50..100, 500..550, 550..600]
    );
    // Token counts per segment, as in the reference's run of the fix: [49, 49, 49, 49].
    let zero = vec![0.0f64; 1000 * 3];
    let lp = segment_logps(
        &zero,
        3,
        cat.batch.labels(),
        (0..4).map(|i| cat.batch.real_tokens(i)),
        false,
    )
    .unwrap();
    for x in lp {
        assert!((x / -(3f64.ln()) - 49.0).abs() < 1e-9);
    }
}

/// OI-B1/OI-B2/OI-B5 runs: chosen [3, 5], rejected [2, 4], `max_seq_length = 10`.
#[test]
fn open_instruct_offsets_use_the_padded_chosen_length() {
    let pairs = vec![
        DpoExample {
            chosen: Document::new(vec![1; 3]),
            rejected: Document::new(vec![1; 2]),
            index: 0,
        },
        DpoExample {
            chosen: Document::new(vec![1; 5]),
            rejected: Document::new(vec![1; 4]),
            index: 1,
        },
    ];
    let b = collate_dpo(&pairs, &DpoOptions { max_seq_length: Some(10), ..Default::default() })
        .unwrap();
    let cat = b.concatenated().unwrap();
    assert_eq!(cat.open_instruct_cu_seq_lens, vec![0, 3, 8, 12, 16]);
    assert_eq!(
        cat.open_instruct_seq_idx,
        vec![0, 0, 0, 1, 1, 1, 1, 1, -1, -1, 2, 2, 3, 3, 3, 3, 1, 1, 1, 1]
    );
    assert_eq!(cat.seq_idx, vec![0, 0, 0, 1, 1, 1, 1, 1, -1, -1, 2, 2, 3, 3, 3, 3, -1, -1, -1, -1]);
    assert_eq!(b.num_tokens(), 14); // get_num_tokens, padding excluded
    // Valid labels per segment with uniform logits: [2, 4, 1, 3] (the buggy offsets gave [2, 4, 0, 4]).
    let zero = vec![0.0f64; 20 * 2];
    let lp = segment_logps(
        &zero,
        2,
        cat.batch.labels(),
        (0..4).map(|i| cat.batch.real_tokens(i)),
        false,
    )
    .unwrap();
    let counts: Vec<f64> = lp.iter().map(|x| (x / -(2f64.ln())).round()).collect();
    assert_eq!(counts, vec![2.0, 4.0, 1.0, 3.0]);
}

/// `count_features_within_token_budget` reference runs.
#[test]
fn open_instruct_count_features_within_token_budget_runs() {
    let c = count_features_within_token_budget;
    assert_eq!(c(&[(100, 100); 4], Some(300)), 3);
    assert_eq!(c(&[(100, 100); 4], Some(150)), 1);
    assert_eq!(c(&[(100, 50); 4], Some(250)), 2);
    assert_eq!(c(&[(400, 10)], Some(300)), 1);
    assert_eq!(c(&[(10, 10), (400, 10)], Some(300)), 1);
    assert_eq!(c(&[(150, 150), (150, 150)], Some(300)), 2);
    assert_eq!(c(&[(100, 100); 4], None), 4);
}

/// A lone over-budget pair: open-instruct keeps it unpadded (breaking the static shape);
/// here that is an explicit choice.
#[test]
fn open_instruct_lone_over_budget_pair() {
    let pair = make_dpo_features(1, &[400], &[10], 0);
    let strict = DpoOptions { max_seq_length: Some(300), ..Default::default() };
    assert_eq!(
        collate_dpo(&pair, &strict),
        Err(thd::Error::PackOverMaxLength { tokens: 400, max_seq_length: 300 })
    );
    let upstream = DpoOptions { overflow: thd::collate::Overflow::LeaveUnpadded, ..strict };
    let b = collate_dpo(&pair, &upstream).unwrap();
    assert_eq!((b.chosen.num_tokens(), b.rejected.num_tokens()), (400, 300));
}
