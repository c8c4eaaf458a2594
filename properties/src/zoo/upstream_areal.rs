//! The zoo's buggy helpers pinned to AReaL's own numbers (PR #1223 `d58cca56f`, issue #1242):
//! split-then-roll labels, the mean of rank means and rank 0's logger statistics give exactly
//! what upstream's buggy code gave. The right values, from `thd`, are pinned next to AReaL's
//! reference runs in `thd/tests/upstream_areal.rs`; each test here repeats the right value once
//! so that the two can be read side by side.

use thd::cp::{CpLayout, CpLoss, logger_stats, shift_labels};
use thd::{CuSeqlens, LossSum, PackedBatch, PackedBatchParts};

use super::{mean_of_rank_means, rank_local_stats, shift_after_split};

/// Labels split first, then rolled: for cp = 2 and tokens 0..7, rank 0's targets are
/// `[1, 6, 7, ·]` instead of `[1, 2, 7, ·]` (rolled before the split).
#[test]
fn areal_split_then_roll() {
    let batch = PackedBatch::new(PackedBatchParts {
        input_ids: (0..8).collect(),
        labels: [vec![-100], (1..8).collect()].concat(),
        cu_seqlens: vec![0, 8],
        ..Default::default()
    })
    .unwrap();
    let l = CpLayout::from_batch(&batch, 2).unwrap();
    assert_eq!(l.split(&shift_labels(&batch), 0).unwrap(), vec![1, 2, 7, -100]);
    assert_eq!(shift_after_split(&batch, &l, 0).unwrap(), vec![1, 6, 7, -100]);
}

/// The #1223 / #1242 example: rows `loss_mask = [[0,0,1,1,1,0],[0,1,1,0,0,0]]`, lengths [5, 3],
/// logp = −0.1·(1..8), cp = 2, padded to [8, 4] (`align = 4`).
struct Case1242 {
    layout: CpLayout,
    nll: Vec<Vec<f64>>,
    labels: Vec<Vec<i64>>,
}

fn case_1242(tail: bool) -> Case1242 {
    let real = if tail { vec![0, 5, 8, 8] } else { vec![0, 5, 8] };
    let padded = if tail { vec![0, 8, 12, 256] } else { vec![0, 8, 12] };
    let real = CuSeqlens::from_i64("cu_seqlens", &real).unwrap();
    let padded = CuSeqlens::from_i64("cu_seqlens_padded", &padded).unwrap();
    let mut layout = CpLayout::new(&real, Some(&padded), 2).unwrap();
    if tail {
        layout = layout.with_num_real_segments(2).unwrap(); // the dummy tail sequence
    }
    let t = layout.num_tokens();
    // The per-row roll of the mask: [0,1,1,1,0] and [1,1,0]; nll 0.1·(k+1) on real token k.
    let mut nll = vec![0.0; t];
    let mut labels = vec![-100i64; t];
    for (k, slot) in [0usize, 1, 2, 3, 4, 8, 9, 10].into_iter().enumerate() {
        nll[slot] = 0.1 * (k + 1) as f64;
    }
    for slot in [1usize, 2, 3, 8, 9] {
        labels[slot] = 1;
    }
    Case1242 {
        nll: layout.split_all(&nll, 1).unwrap(),
        labels: layout.split_all(&labels, 1).unwrap(),
        layout,
    }
}

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() < 5e-6
}

/// CP-local loss (#1223): rank 0 `0.4` with weight 2, rank 1 `0.46667` with weight 3; the
/// global loss is `0.44`, the mean of rank means is not.
#[test]
fn areal_mean_of_rank_means_run() {
    let e = case_1242(false);
    let per_rank: Vec<LossSum> = (0..2)
        .map(|r| {
            let valid: Vec<f64> = e.nll[r]
                .iter()
                .zip(&e.labels[r])
                .filter(|(_, l)| **l != -100)
                .map(|(x, _)| *x)
                .collect();
            LossSum { nll: valid.iter().sum(), count: valid.len() as u64 }
        })
        .collect();
    assert!(close(per_rank[0].mean(), 0.4) && per_rank[0].count == 2);
    assert!(close(per_rank[1].mean(), 0.46667) && per_rank[1].count == 3);
    assert!((mean_of_rank_means(&per_rank) - 0.44).abs() > 1e-3);
    assert!((CpLoss { per_rank }.loss() - 0.44).abs() < 1e-12);
}

/// AR-B1/AR-B2 (#1242): rank 0's (and rank 1's) shard reported as the batch, vs the
/// CP-invariant statistics (8 real tokens, 5 valid, loss 0.44).
#[test]
fn areal_rank_local_stats_runs() {
    let e = case_1242(false);
    let s = logger_stats(&e.layout, &e.nll, &e.labels).unwrap();
    assert_eq!((s.n_tokens, s.n_valid_tokens, s.prompt_tokens, s.n_seqs), (8, 5, 3, 2));

    let b = rank_local_stats(&e.layout, 0, &e.nll[0], &e.labels[0]).unwrap();
    assert_eq!((b.n_tokens, b.n_valid_tokens, b.prompt_tokens), (6, 2, 4));
    assert!(
        close(b.loss, 0.4) && close(b.loss_min.unwrap(), 0.2) && close(b.loss_max.unwrap(), 0.6)
    );
    assert!(close(b.ppl_avg.unwrap(), 1.52176));
    assert!(close(b.ppl_min.unwrap(), 1.22140) && close(b.ppl_max.unwrap(), 1.82212));
    let b1 = rank_local_stats(&e.layout, 1, &e.nll[1], &e.labels[1]).unwrap();
    assert_eq!((b1.n_tokens, b1.n_valid_tokens, b1.prompt_tokens), (6, 3, 3));
    assert!(close(b1.loss, 0.46667) && close(b1.ppl_avg.unwrap(), 1.71641));

    // With the 256-token page padding (cu [0, 8, 12, 256]): rank 0 reports half the page.
    let e = case_1242(true);
    let s = logger_stats(&e.layout, &e.nll, &e.labels).unwrap();
    assert_eq!((s.n_tokens, s.n_valid_tokens, s.prompt_tokens, s.n_seqs), (8, 5, 3, 2));
    let b = rank_local_stats(&e.layout, 0, &e.nll[0], &e.labels[0]).unwrap();
    assert_eq!((b.n_tokens, b.n_valid_tokens, b.prompt_tokens), (128, 2, 126));
}

/// The error cases of the reproduction (the logger it models never got them wrong).
#[test]
fn rank_local_stats_rejects_bad_shards() {
    let l = CpLayout::new(&CuSeqlens::try_from(vec![0, 4]).unwrap(), None, 2).unwrap();
    assert_eq!(
        rank_local_stats(&l, 0, &[0.0], &[1]),
        Err(thd::Error::CpShardLength { rank: 0, len: 1, expected: 2 })
    );
    assert_eq!(
        rank_local_stats(&l, 2, &[0.0; 2], &[1; 2]),
        Err(thd::Error::CpRankOutOfRange { rank: 2, cp: 2 })
    );
    assert_eq!(mean_of_rank_means(&[]), 0.0);
    let empty_rank = [LossSum::default(), LossSum { nll: 2.0, count: 1 }];
    assert_eq!(mean_of_rank_means(&empty_rank), 1.0);
}
