//! Twins of AReaL's CP reassembly tests (`tests/test_reassemble_cp_logprobs.py`, PR #1249
//! `95e2379d0`) and of the reference's runs of its CP-local loss and logger statistics
//! (PR #1223 `d58cca56f`, issue #1242).
//!
//! There is no autograd here: the gradient tests become the equivalent statements about the
//! permutation (reassembly is a bijection, so the gradient of any loss through it is the split
//! of the gradient).

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use thd::cp::{CpLayout, CpLoss, logger_stats, shift_labels};
use thd::{CuSeqlens, Error, LossSum, PackedBatch, PackedBatchParts};

fn layout(lens: &[usize], cp: usize) -> CpLayout {
    let mut cu = vec![0i64];
    for &l in lens {
        cu.push(cu.last().unwrap() + l as i64);
    }
    CpLayout::new(&CuSeqlens::from_i64("cu_seqlens", &cu).unwrap(), None, cp).unwrap()
}

fn scaled(base: &[usize], cp: usize) -> Vec<usize> {
    base.iter().map(|&l| l * 2 * cp).collect()
}

/// AReaL's reference split (`_split_for_cp_rank`), written from its formula:
/// local `[start, start+half)` ← global `[half·r, half·(r+1))`,
/// local `[start+half, start+2·half)` ← global `[L − half·(r+1), L − half·r)`.
fn areal_split(values: &[i64], lens: &[usize], cp: usize, r: usize) -> Vec<i64> {
    let mut out = Vec::new();
    let mut start = 0;
    for &l in lens {
        let half = l / cp / 2;
        out.extend_from_slice(&values[start + half * r..start + half * (r + 1)]);
        out.extend_from_slice(&values[start + l - half * (r + 1)..start + l - half * r]);
        start += l;
    }
    out
}

fn round_trip(lens: &[usize], cp: usize) {
    let l = layout(lens, cp);
    let x: Vec<i64> = (0..l.num_tokens() as i64).map(|t| 3 * t + 1).collect();
    assert_eq!(l.reassemble(&l.split_all(&x, 1).unwrap(), 1).unwrap(), x, "{lens:?} cp={cp}");
}

// Upstream: inclusionAI/AReaL tests/test_reassemble_cp_logprobs.py::TestReassembleGradientFlow::test_gradient_through_advanced_indexing
#[test]
fn areal_gradient_through_advanced_indexing() {
    for cp in [2, 4] {
        round_trip(&scaled(&[4, 6], cp), cp);
        // loss = sum(reassembled): every local element's gradient is 1, i.e. each appears once.
        let l = layout(&scaled(&[4, 6], cp), cp);
        let mut seen = vec![0; l.num_tokens()];
        for &src in &l.reassemble_indices() {
            seen[src] += 1;
        }
        assert!(seen.iter().all(|&n| n == 1));
    }
}

// Upstream: inclusionAI/AReaL tests/test_reassemble_cp_logprobs.py::TestReassembleGradientFlow::test_gradient_with_weighted_loss
#[test]
fn areal_gradient_with_weighted_loss() {
    // loss = Σ w · reassembled: ∂loss/∂shard_r = split(w)_r.
    for cp in [2, 4] {
        let l = layout(&scaled(&[3, 5], cp), cp);
        let w: Vec<i64> = (0..l.num_tokens() as i64).map(|t| t * t - 7).collect();
        let idx = l.reassemble_indices();
        let mut grad_cat = vec![0; l.num_tokens()];
        for (dst, &src) in idx.iter().enumerate() {
            grad_cat[src] += w[dst];
        }
        assert_eq!(grad_cat, l.split_all(&w, 1).unwrap().concat());
    }
}

// Upstream: inclusionAI/AReaL tests/test_reassemble_cp_logprobs.py::TestReassembleGradientCorrectness::test_uniform_loss_gives_unit_gradient
#[test]
fn areal_uniform_loss_gives_unit_gradient() {
    for cp in [2, 4] {
        let l = layout(&scaled(&[4, 3], cp), cp);
        let ones = vec![1i64; l.num_tokens()];
        assert!(l.split_all(&ones, 1).unwrap().iter().flatten().all(|&g| g == 1));
    }
}

// Upstream: inclusionAI/AReaL tests/test_reassemble_cp_logprobs.py::TestReassembleGradientCorrectness::test_no_grad_duplication_or_loss
#[test]
fn areal_no_grad_duplication_or_loss() {
    // loss = Σ x²: the gradient on each local element is 2·x of that very element.
    for cp in [2, 4] {
        let l = layout(&scaled(&[4, 3], cp), cp);
        let x: Vec<i64> = (0..l.num_tokens() as i64).map(|t| 5 - t).collect();
        let shards = l.split_all(&x, 1).unwrap();
        let full = l.reassemble(&shards, 1).unwrap();
        let grad_full: Vec<i64> = full.iter().map(|v| 2 * v).collect();
        let grad_local = l.split_all(&grad_full, 1).unwrap();
        for (s, g) in shards.iter().zip(&grad_local) {
            assert!(s.iter().zip(g).all(|(a, b)| 2 * a == *b));
        }
    }
}

// Upstream: inclusionAI/AReaL tests/test_reassemble_cp_logprobs.py::TestReassembleGradientCorrectness::test_advanced_indexing_is_bijective_permutation
#[test]
fn areal_reassemble_indices_are_a_permutation() {
    let l = layout(&[4 * 4, 6 * 4, 3 * 4], 2);
    let mut idx = l.reassemble_indices();
    idx.sort_unstable();
    assert_eq!(idx, (0..l.num_tokens()).collect::<Vec<_>>());
}

// Upstream: inclusionAI/AReaL tests/test_reassemble_cp_logprobs.py::TestSplitReassembleRoundtrip::test_roundtrip_single_sequence
#[test]
fn areal_roundtrip_single_sequence() {
    for cp in [2, 4] {
        for base in [&[16][..], &[32, 16], &[64, 32, 16], &[8, 8, 8, 8]] {
            round_trip(&scaled(base, cp), cp);
        }
    }
}

// Upstream: inclusionAI/AReaL tests/test_reassemble_cp_logprobs.py::TestSplitReassembleRoundtrip::test_roundtrip_large_batch
#[test]
fn areal_roundtrip_large_batch() {
    let mut rng = StdRng::seed_from_u64(42);
    for cp in [2, 4, 8] {
        let lens: Vec<usize> = (0..16).map(|_| rng.random_range(1..=8) * 2 * cp).collect();
        round_trip(&lens, cp);
    }
}

// Upstream: inclusionAI/AReaL tests/test_reassemble_cp_logprobs.py::TestReassembleCpPackedLogprobs::test_reassemble_matches_reference
#[test]
fn areal_reassemble_matches_reference() {
    for cp in [2, 4] {
        let lens = scaled(&[8, 4, 6], cp);
        let l = layout(&lens, cp);
        let x: Vec<i64> = (0..l.num_tokens() as i64).collect();
        let shards: Vec<Vec<i64>> = (0..cp).map(|r| areal_split(&x, &lens, cp, r)).collect();
        assert_eq!(l.reassemble(&shards, 1).unwrap(), x);
        let cat = shards.concat();
        let via_indices: Vec<i64> = l.reassemble_indices().iter().map(|&i| cat[i]).collect();
        assert_eq!(via_indices, x);
    }
}

// Upstream: inclusionAI/AReaL tests/test_reassemble_cp_logprobs.py::TestReassembleCpPackedLogprobs::test_noop_when_cp_size_1
#[test]
fn areal_noop_when_cp_size_1() {
    let l = layout(&[5, 3], 1);
    let x: Vec<i64> = (0..8).collect();
    assert_eq!(l.split(&x, 0).unwrap(), x);
    assert_eq!(l.reassemble(std::slice::from_ref(&x), 1).unwrap(), x);
}

// Upstream: inclusionAI/AReaL tests/test_reassemble_cp_logprobs.py::TestReassembleCpPackedLogprobs::test_gradient_flows_through_reassembly
#[test]
fn areal_gradient_flows_through_reassembly() {
    // loss = sum: rank 0's local gradient is all ones (each of its elements is used once).
    for cp in [2, 4] {
        let l = layout(&scaled(&[8, 4, 6], cp), cp);
        let rank0 = l.indices(0).unwrap();
        let idx = l.reassemble_indices();
        let uses = |j: usize| idx.iter().filter(|&&src| src == j).count();
        assert!((0..rank0.len()).all(|j| uses(j) == 1));
    }
}

// Upstream: inclusionAI/AReaL tests/test_reassemble_cp_logprobs.py::TestSplitReassembleConsistencyWithMegatron::test_split_matches_megatron_impl
#[test]
fn areal_split_matches_megatron_impl() {
    for cp in [2, 4] {
        let lens = scaled(&[5, 3, 7], cp);
        let l = layout(&lens, cp);
        let x: Vec<i64> = (0..l.num_tokens() as i64).map(|t| 1000 + t).collect();
        for r in 0..cp {
            assert_eq!(l.split(&x, r).unwrap(), areal_split(&x, &lens, cp, r), "cp={cp} r={r}");
        }
    }
}

/// Reference runs of `preprocess_packed_seqs_context_parallel` / `_build_cp_reassemble_indices`.
#[test]
fn areal_split_runs() {
    let l = layout(&[8, 4], 2);
    assert_eq!(l.indices(0).unwrap(), vec![0, 1, 6, 7, 8, 11]);
    assert_eq!(l.indices(1).unwrap(), vec![2, 3, 4, 5, 9, 10]);
    assert_eq!(l.local_cu_seqlens().as_slice(), &[0, 4, 6]);
    assert_eq!(l.reassemble_indices(), vec![0, 1, 6, 7, 8, 9, 2, 3, 4, 10, 11, 5]);
    let l = layout(&[16], 4);
    let expect = [[0, 1, 14, 15], [2, 3, 12, 13], [4, 5, 10, 11], [6, 7, 8, 9]];
    for (r, e) in expect.iter().enumerate() {
        assert_eq!(l.indices(r).unwrap(), e.to_vec());
    }
    let l = layout(&[8], 4);
    for r in 0..4 {
        assert_eq!(l.indices(r).unwrap(), vec![r, 7 - r]);
    }
    // `split_packed_seqs_for_context_parallel` does not validate: L = 6 with cp = 2 loses tokens
    // 12 and 13 (of 10..15). Here the length is an error.
    let err = CpLayout::new(&CuSeqlens::try_from(vec![0, 6]).unwrap(), None, 2).unwrap_err();
    assert_eq!(err, Error::CpLengthNotDivisible { segment: 0, length: 6, divisor: 4 });
}

/// Labels are rolled before the split: for cp = 2 and tokens 0..7, rank 0's targets are
/// `[1, 2, 7, ·]`. (AReaL's `torch.roll` wraps the last target to token 0; the per-segment roll
/// here ignores it.) Split-then-roll's `[1, 6, 7, ·]` is pinned with the bug, in
/// `properties/src/zoo/upstream_areal.rs`.
#[test]
fn areal_roll_before_split() {
    let batch = PackedBatch::new(PackedBatchParts {
        input_ids: (0..8).collect(),
        labels: [vec![-100], (1..8).collect()].concat(),
        cu_seqlens: vec![0, 8],
        ..Default::default()
    })
    .unwrap();
    let l = CpLayout::from_batch(&batch, 2).unwrap();
    assert_eq!(l.split(&shift_labels(&batch), 0).unwrap(), vec![1, 2, 7, -100]);
}

/// The #1223 / #1242 example: rows `loss_mask = [[0,0,1,1,1,0],[0,1,1,0,0,0]]`, lengths [5, 3],
/// logp = −0.1·(1..8), cp = 2, padded to [8, 4] (`align = 4`).
struct Example1242 {
    layout: CpLayout,
    nll: Vec<Vec<f64>>,
    labels: Vec<Vec<i64>>,
}

fn example_1242(tail: bool) -> Example1242 {
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
    Example1242 {
        nll: layout.split_all(&nll, 1).unwrap(),
        labels: layout.split_all(&labels, 1).unwrap(),
        layout,
    }
}

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() < 5e-6
}

/// CP-local loss (#1223): rank 0 `0.4` with weight 2, rank 1 `0.46667` with weight 3, global
/// `0.44` (the mean of rank means, which is not, is pinned in
/// `properties/src/zoo/upstream_areal.rs`).
#[test]
fn areal_cp_local_loss_run() {
    let e = example_1242(false);
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
    let loss = CpLoss { per_rank };
    assert!((loss.loss() - 0.44).abs() < 1e-12);
}

/// AR-B1/AR-B2 (#1242): the CP-invariant statistics (rank 0's shard, the bug, is pinned in
/// `properties/src/zoo/upstream_areal.rs`).
#[test]
fn areal_logger_stats_runs() {
    let e = example_1242(false);
    let s = logger_stats(&e.layout, &e.nll, &e.labels).unwrap();
    assert_eq!((s.n_tokens, s.n_valid_tokens, s.prompt_tokens, s.n_seqs), (8, 5, 3, 2));
    assert!(
        close(s.loss, 0.44) && close(s.loss_min.unwrap(), 0.2) && close(s.loss_max.unwrap(), 0.7)
    );
    assert!(close(s.ppl_avg.unwrap(), 1.63270));
    assert!(close(s.ppl_min.unwrap(), 1.34986) && close(s.ppl_max.unwrap(), 1.91554));

    // With the 256-token page padding (cu [0, 8, 12, 256]): the dummy tail is no sequence.
    let e = example_1242(true);
    let s = logger_stats(&e.layout, &e.nll, &e.labels).unwrap();
    assert_eq!((s.n_tokens, s.n_valid_tokens, s.prompt_tokens, s.n_seqs), (8, 5, 3, 2));
}
