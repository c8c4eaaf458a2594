//! Twins of TransformerEngine's context-parallel utility tests
//! (`tests/pytorch/attention/test_cp_utils.py`), same inputs and expected outputs.
//!
//! TE's `get_batch_on_this_cp_rank` reads the rank from `torch.distributed`; here the rank is
//! an argument of [`CpLayout::split`]. TE's BSHD/SBHD formats are THD layouts whose segments
//! are the rows.

use thd::collate::{CpPadding, pad_sequences_for_cp};
use thd::cp::CpLayout;
use thd::{CuSeqlens, Error, PackedBatch, PackedBatchParts};

fn cu(v: &[i32]) -> CuSeqlens {
    CuSeqlens::try_from(v.to_vec()).unwrap()
}

fn pad(d: usize, pid: i64, label_pad: i64) -> CpPadding {
    CpPadding { divisibility: d, pad_token_id: pid, pad_label_id: label_pad }
}

// Upstream: NVIDIA/TransformerEngine tests/pytorch/attention/test_cp_utils.py::TestSequencePadding::test_padding_with_custom_padding_values_sequences_shorter_than_divisibility_factor
#[test]
fn te_padding_custom_values_shorter_than_divisibility_factor() {
    let (pid, lp) = (777, -200);
    let ids = [1, 1, 1, 2, 2, 3, 3, 3, 3];
    let labels = [-100, -100, -100, -100, -100, -100, -100, 13, -100];
    let out = pad_sequences_for_cp(&ids, &labels, &cu(&[0, 3, 5, 9]), &pad(8, pid, lp)).unwrap();
    #[rustfmt::skip]
    let expected_ids = vec![
        1, 1, 1, pid, pid, pid, pid, pid,
        2, 2, pid, pid, pid, pid, pid, pid,
        3, 3, 3, 3, pid, pid, pid, pid,
    ];
    #[rustfmt::skip]
    let expected_labels = vec![
        -100, -100, -100, lp, lp, lp, lp, lp,
        -100, -100, lp, lp, lp, lp, lp, lp,
        -100, -100, 13, -100, lp, lp, lp, lp,
    ];
    assert_eq!(out.input_ids, expected_ids);
    assert_eq!(out.labels, expected_labels);
    assert_eq!(out.position_ids, (0..24).map(|t| t % 8).collect::<Vec<i64>>());
    assert_eq!(out.cu_seqlens_padded.as_slice(), &[0, 8, 16, 24]);
}

// Upstream: NVIDIA/TransformerEngine tests/pytorch/attention/test_cp_utils.py::TestSequencePadding::test_mixed_sequence_lengths_with_divisibility_factor
#[test]
fn te_padding_mixed_sequence_lengths() {
    let (pid, lp) = (999, -300);
    let ids = [1, 1, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4];
    let labels = [
        10, 11, 20, 21, 22, 23, 24, 25, 26, 30, 31, 32, 33, 40, 41, 42, 43, 44, 45, 46, 47, 48, 49,
    ];
    let out =
        pad_sequences_for_cp(&ids, &labels, &cu(&[0, 2, 9, 13, 23]), &pad(6, pid, lp)).unwrap();
    #[rustfmt::skip]
    let expected_ids = vec![
        1, 1, pid, pid, pid, pid,
        2, 2, 2, 2, 2, 2, 2, pid, pid, pid, pid, pid,
        3, 3, 3, 3, pid, pid,
        4, 4, 4, 4, 4, 4, 4, 4, 4, 4, pid, pid,
    ];
    #[rustfmt::skip]
    let expected_labels = vec![
        10, 11, lp, lp, lp, lp,
        20, 21, 22, 23, 24, 25, 26, lp, lp, lp, lp, lp,
        30, 31, 32, 33, lp, lp,
        40, 41, 42, 43, 44, 45, 46, 47, 48, 49, lp, lp,
    ];
    let positions: Vec<i64> = [6, 12, 6, 12].iter().flat_map(|&n| 0..n).collect();
    assert_eq!(out.input_ids, expected_ids);
    assert_eq!(out.labels, expected_labels);
    assert_eq!(out.position_ids, positions);
    assert_eq!(out.cu_seqlens_padded.as_slice(), &[0, 6, 18, 24, 36]);
}

// Upstream: NVIDIA/TransformerEngine tests/pytorch/attention/test_cp_utils.py::TestSequencePadding::test_sequences_longer_than_divisibility_factor
#[test]
fn te_padding_sequences_longer_than_divisibility_factor() {
    let (pid, lp) = (888, -400);
    let ids: Vec<i64> = [vec![1; 7], vec![2; 11], vec![3; 5]].concat();
    let labels: Vec<i64> = [
        (100..107).collect::<Vec<i64>>(),
        (200..211).collect::<Vec<i64>>(),
        (300..305).collect::<Vec<i64>>(),
    ]
    .concat();
    let out = pad_sequences_for_cp(&ids, &labels, &cu(&[0, 7, 18, 23]), &pad(4, pid, lp)).unwrap();
    let expected_ids: Vec<i64> =
        [vec![1; 7], vec![pid], vec![2; 11], vec![pid], vec![3; 5], vec![pid; 3]].concat();
    let expected_labels: Vec<i64> = [
        (100..107).collect::<Vec<i64>>(),
        vec![lp],
        (200..211).collect::<Vec<i64>>(),
        vec![lp],
        (300..305).collect::<Vec<i64>>(),
        vec![lp; 3],
    ]
    .concat();
    let positions: Vec<i64> = [8, 12, 8].iter().flat_map(|&n| 0..n).collect();
    assert_eq!(out.input_ids, expected_ids);
    assert_eq!(out.labels, expected_labels);
    assert_eq!(out.position_ids, positions);
    assert_eq!(out.cu_seqlens_padded.as_slice(), &[0, 8, 20, 28]);
}

// Upstream: NVIDIA/TransformerEngine tests/pytorch/attention/test_cp_utils.py::TestContextParallelUtils::test_cp_rank_slicing_simple_case
#[test]
fn te_cp_rank_slicing_simple_case() {
    let layout = CpLayout::new(&cu(&[0, 8]), None, 2).unwrap();
    let ids = [1, 2, 3, 4, 5, 6, 7, 8];
    let labels = [10, 20, 30, 40, 50, 60, 70, 80];
    let pos = [0, 1, 2, 3, 4, 5, 6, 7];
    assert_eq!(layout.split(&ids, 0).unwrap(), vec![1, 2, 7, 8]);
    assert_eq!(layout.split(&labels, 0).unwrap(), vec![10, 20, 70, 80]);
    assert_eq!(layout.split(&pos, 0).unwrap(), vec![0, 1, 6, 7]);
    assert_eq!(layout.split(&ids, 1).unwrap(), vec![3, 4, 5, 6]);
    assert_eq!(layout.split(&labels, 1).unwrap(), vec![30, 40, 50, 60]);
    assert_eq!(layout.split(&pos, 1).unwrap(), vec![2, 3, 4, 5]);
}

// Upstream: NVIDIA/TransformerEngine tests/pytorch/attention/test_cp_utils.py::TestContextParallelUtils::test_cp_rank_slicing_multiple_sequences
#[test]
fn te_cp_rank_slicing_multiple_sequences() {
    let layout = CpLayout::new(&cu(&[0, 8, 16]), None, 2).unwrap();
    let ids = [1, 2, 3, 4, 5, 6, 7, 8, 11, 12, 13, 14, 15, 16, 17, 18];
    let labels = [10, 20, 30, 40, 50, 60, 70, 80, 110, 120, 130, 140, 150, 160, 170, 180];
    let pos = [0, 1, 2, 3, 4, 5, 6, 7, 0, 1, 2, 3, 4, 5, 6, 7];
    assert_eq!(layout.split(&ids, 0).unwrap(), vec![1, 2, 7, 8, 11, 12, 17, 18]);
    assert_eq!(layout.split(&labels, 0).unwrap(), vec![10, 20, 70, 80, 110, 120, 170, 180]);
    assert_eq!(layout.split(&pos, 0).unwrap(), vec![0, 1, 6, 7, 0, 1, 6, 7]);
}

// Upstream: NVIDIA/TransformerEngine tests/pytorch/attention/test_cp_utils.py::TestContextParallelUtils::test_cp_rank_slicing_with_cp_size_1
#[test]
fn te_cp_rank_slicing_with_cp_size_1() {
    let layout = CpLayout::new(&cu(&[0, 8]), None, 1).unwrap();
    let ids = [1, 2, 3, 4, 5, 6, 7, 8];
    assert_eq!(layout.split(&ids, 0).unwrap(), ids.to_vec());
    assert_eq!(layout.split(&[10, 20, 30, 40, 50, 60, 70, 80], 0).unwrap()[7], 80);
}

// Upstream: NVIDIA/TransformerEngine tests/pytorch/attention/test_cp_utils.py::TestContextParallelUtils::test_cp_rank_slicing_sequence_dim_detection
#[test]
fn te_cp_rank_slicing_sequence_dim_rows() {
    // (8, 2): the sequence is dimension 0, every token a row of 2 values.
    let layout = CpLayout::new(&cu(&[0, 8]), None, 2).unwrap();
    let ids: Vec<i64> = (1..=8).flat_map(|t| [t, 10 * t]).collect();
    let pos: Vec<i64> = (0..8).flat_map(|t| [t, t]).collect();
    assert_eq!(layout.split_rows(&ids, 2, 0).unwrap(), vec![1, 10, 2, 20, 7, 70, 8, 80]);
    assert_eq!(layout.split_rows(&pos, 2, 0).unwrap(), vec![0, 0, 1, 1, 6, 6, 7, 7]);
}

// Upstream: NVIDIA/TransformerEngine tests/pytorch/attention/test_cp_utils.py::TestContextParallelUtils::test_cp_rank_slicing_mixed_dimensions
#[test]
fn te_cp_rank_slicing_mixed_dimensions() {
    // 1-D ids and labels with [1, 8] position ids: a leading batch dimension of 1 changes nothing.
    let layout = CpLayout::new(&cu(&[0, 8]), None, 2).unwrap();
    let ids = [1, 2, 3, 4, 5, 6, 7, 8];
    let labels = [10, 20, 30, 40, 50, 60, 70, 80];
    let pos = [0, 1, 2, 3, 4, 5, 6, 7];
    assert_eq!(layout.split(&ids, 0).unwrap(), vec![1, 2, 7, 8]);
    assert_eq!(layout.split(&labels, 0).unwrap(), vec![10, 20, 70, 80]);
    assert_eq!(layout.split(&pos, 0).unwrap(), vec![0, 1, 6, 7]);
    assert_eq!(layout.split(&ids, 1).unwrap(), vec![3, 4, 5, 6]);
    assert_eq!(layout.split(&labels, 1).unwrap(), vec![30, 40, 50, 60]);
    assert_eq!(layout.split(&pos, 1).unwrap(), vec![2, 3, 4, 5]);
}

// Upstream: NVIDIA/TransformerEngine tests/pytorch/attention/test_cp_utils.py::TestContextParallelUtils::test_integration_with_padding_and_cp_slicing
#[test]
fn te_integration_with_padding_and_cp_slicing() {
    let out = pad_sequences_for_cp(
        &[1, 1, 2, 2, 2],
        &[10, 11, 20, 21, 22],
        &cu(&[0, 2, 5]),
        &pad(4, 0, -100),
    )
    .unwrap();
    assert_eq!(out.input_ids, vec![1, 1, 0, 0, 2, 2, 2, 0]);
    let layout = CpLayout::new(&cu(&[0, 2, 5]), Some(&out.cu_seqlens_padded), 2).unwrap();
    assert_eq!(layout.split(&out.input_ids, 0).unwrap(), vec![1, 0, 2, 0]);
}

// Upstream: NVIDIA/TransformerEngine tests/pytorch/attention/test_cp_utils.py::TestContextParallelUtils::test_bshd_format_basic
#[test]
fn te_bshd_format_basic() {
    // [2, 8] rows: each row is a segment of length 8.
    let layout = CpLayout::new(&cu(&[0, 8, 16]), None, 2).unwrap();
    let ids: Vec<i64> = (0..16).collect();
    let labels: Vec<i64> = ids.iter().map(|x| 10 * x).collect();
    assert_eq!(layout.split(&ids, 0).unwrap(), vec![0, 1, 6, 7, 8, 9, 14, 15]);
    assert_eq!(layout.split(&labels, 0).unwrap().len(), 8); // (2, 4)
    assert_eq!(layout.split(&ids, 1).unwrap(), vec![2, 3, 4, 5, 10, 11, 12, 13]);
}

// Upstream: NVIDIA/TransformerEngine tests/pytorch/attention/test_cp_utils.py::TestContextParallelUtils::test_sbhd_format_basic
#[test]
fn te_sbhd_format_basic() {
    // [8, 2] sequence-first: token t is the row [2t, 2t+1].
    let layout = CpLayout::new(&cu(&[0, 8]), None, 2).unwrap();
    let ids: Vec<i64> = (0..16).collect();
    let rows = |idx: &[i64]| idx.iter().flat_map(|&t| [2 * t, 2 * t + 1]).collect::<Vec<_>>();
    assert_eq!(layout.split_rows(&ids, 2, 0).unwrap(), rows(&[0, 1, 6, 7]));
    assert_eq!(layout.split_rows(&ids, 2, 1).unwrap(), rows(&[2, 3, 4, 5]));
}

// Upstream: NVIDIA/TransformerEngine tests/pytorch/attention/test_cp_utils.py::TestContextParallelUtils::test_bshd_format_error_handling
#[test]
fn te_bshd_format_error_handling() {
    // seq_len 7 is not divisible by 2·cp = 4: an error that names the segment and length.
    let err = CpLayout::new(&cu(&[0, 7, 14]), None, 2).unwrap_err();
    assert_eq!(err, Error::CpLengthNotDivisible { segment: 0, length: 7, divisor: 4 });
    assert!(err.to_string().contains("not divisible by 2*cp = 4"));
}

// Upstream: NVIDIA/TransformerEngine tests/pytorch/attention/test_cp_utils.py::TestTHDKernels (thd_get_partitioned_indices)
#[test]
fn te_thd_get_partitioned_indices() {
    let layout = CpLayout::new(&cu(&[0, 8, 16]), None, 2).unwrap();
    assert_eq!(layout.indices(0).unwrap(), vec![0, 1, 6, 7, 8, 9, 14, 15]);
    assert_eq!(layout.indices(1).unwrap(), vec![2, 3, 4, 5, 10, 11, 12, 13]);
}

// Upstream: NVIDIA/TransformerEngine tests/pytorch/attention/test_cp_utils.py::TestTHDKernels (reorder round-trip)
#[test]
fn te_thd_reorder_round_trip() {
    let layout = CpLayout::new(&cu(&[0, 8, 16]), None, 2).unwrap();
    let x: Vec<i64> = (100..116).collect();
    let shards = layout.split_all(&x, 1).unwrap();
    assert_eq!(layout.reassemble(&shards, 1).unwrap(), x);
}

/// TE's CUDA partitioner treats tokens past `cu[-1]` as part of the last sequence and hands
/// overlapping indices to the ranks (`cu=[0,8]`, `T=16`, cp=2 → r0 `[0,1,6,7,8,9,10,11]`,
/// r1 `[2,3,4,5,6,7,8,9]`). Here such a batch is refused.
#[test]
fn te_tokens_past_the_last_offset_are_refused() {
    let batch = PackedBatch::new(PackedBatchParts {
        input_ids: (0..16).collect(),
        labels: vec![-100; 16],
        cu_seqlens: vec![0, 8],
        ..Default::default()
    })
    .unwrap();
    assert_eq!(
        CpLayout::from_batch(&batch, 2),
        Err(Error::UncoveredTokens { op: "cp split", covered: 8, tokens: 16 })
    );
}
