//! Twins of NeMo Automodel's THD conversion tests (`tests/unit_tests/distributed/
//! test_thd_utils.py`, `test_thd_padding_mask.py`), same inputs and expected outputs, plus the
//! reference's golden table for `process_input_for_thd`.
//!
//! Tests about dtypes, non-tensor keys and 3-D embeddings have no counterpart: offsets here
//! are always int32 [`thd::CuSeqlens`], tokens int64, and there is no key passthrough.

use thd::collate::{
    BshdBatch, BshdOptions, RowTail, bshd_to_thd, padding_mask_from_token_ids,
    split_into_thd_chunks,
};
use thd::{Error, LabelConvention};

const S: i64 = -1000;

fn batch(
    rows: usize,
    seq_len: usize,
    input_ids: Vec<i64>,
    seq_lens: Vec<Vec<i64>>,
    seq_lens_padded: Option<Vec<Vec<i64>>>,
) -> BshdBatch {
    let n = input_ids.len();
    BshdBatch {
        rows,
        seq_len,
        input_ids,
        labels: (0..n as i64).map(|t| t + 1).collect(),
        position_ids: None,
        seq_lens: Some(seq_lens),
        seq_lens_padded,
    }
}

fn full(rows: usize, seq_len: usize, per_row: usize) -> BshdBatch {
    let len = (seq_len / per_row) as i64;
    batch(
        rows,
        seq_len,
        (0..(rows * seq_len) as i64).collect(),
        vec![vec![len; per_row]; rows],
        Some(vec![vec![len; per_row]; rows]),
    )
}

fn cu(t: &thd::collate::ThdInputs) -> Vec<i32> {
    t.cu_seqlens.as_ref().unwrap().as_slice().to_vec()
}

fn cu_p(t: &thd::collate::ThdInputs) -> Option<Vec<i32>> {
    t.cu_seqlens_padded.as_ref().map(|c| c.as_slice().to_vec())
}

fn default() -> BshdOptions {
    BshdOptions::default()
}

// Upstream: NVIDIA-NeMo/Automodel tests/unit_tests/distributed/test_thd_utils.py::TestProcessInputForTHD::test_basic_conversion
#[test]
fn automodel_basic_conversion() {
    let mut b =
        batch(2, 6, (1..=12).collect(), vec![vec![6], vec![6]], Some(vec![vec![6], vec![6]]));
    b.position_ids = Some([(0..6).collect::<Vec<i64>>(), (0..6).collect()].concat());
    let t = bshd_to_thd(&b, &default()).unwrap();
    assert_eq!(t.input_ids, (1..=12).collect::<Vec<i64>>());
    assert_eq!((t.labels.len(), t.position_ids.as_ref().unwrap().len()), (12, 12));
    assert_eq!(cu(&t), vec![0, 6, 12]);
    assert_eq!(cu_p(&t), None); // equal to cu_seqlens: not emitted
}

// Upstream: NVIDIA-NeMo/Automodel tests/unit_tests/distributed/test_thd_utils.py::TestProcessInputForTHD::test_with_multiple_packed_sequences
#[test]
fn automodel_multiple_packed_sequences() {
    let b = batch(
        2,
        6,
        vec![1, 2, 3, 99, 4, 5, 6, 7, 99, 8, 9, 10],
        vec![vec![3, 2], vec![2, 3]],
        Some(vec![vec![4, 2], vec![3, 3]]),
    );
    let t = bshd_to_thd(&b, &default()).unwrap();
    assert_eq!(t.input_ids.len(), 12);
    assert_eq!(cu(&t), vec![0, 3, 5, 7, 10]);
    assert_eq!(cu_p(&t), Some(vec![0, 4, 6, 9, 12]));
}

// Upstream: NVIDIA-NeMo/Automodel tests/unit_tests/distributed/test_thd_utils.py::TestProcessInputForTHD::test_with_variable_num_sequences_and_padding
#[test]
fn automodel_variable_num_sequences_and_padding() {
    let b = batch(
        2,
        6,
        vec![1, 2, 3, 99, 4, 5, 6, 7, 8, 9, 10, 11],
        vec![vec![3, 2], vec![6, S]],
        Some(vec![vec![4, 2], vec![6, S]]),
    );
    let t = bshd_to_thd(&b, &default()).unwrap();
    assert_eq!(cu(&t), vec![0, 3, 5, 11]);
    assert_eq!(cu_p(&t), Some(vec![0, 4, 6, 12]));
}

// Upstream: NVIDIA-NeMo/Automodel tests/unit_tests/distributed/test_thd_utils.py::TestProcessInputForTHD::test_different_batch_sizes
#[test]
fn automodel_different_batch_sizes() {
    for rows in [1, 2, 4, 8] {
        let t = bshd_to_thd(&full(rows, 16, 1), &default()).unwrap();
        assert_eq!(t.input_ids.len(), rows * 16);
        assert_eq!(t.labels.len(), rows * 16);
        assert_eq!(cu(&t).len(), rows + 1);
    }
}

// Upstream: NVIDIA-NeMo/Automodel tests/unit_tests/distributed/test_thd_utils.py::TestProcessInputForTHD::test_different_sequence_lengths
#[test]
fn automodel_different_sequence_lengths() {
    for seq_len in [32, 64, 128, 256, 512, 1024] {
        let t = bshd_to_thd(&full(4, seq_len, 1), &default()).unwrap();
        assert_eq!(t.input_ids.len(), 4 * seq_len);
        assert_eq!(*cu(&t).last().unwrap() as usize, 4 * seq_len);
    }
}

// Upstream: NVIDIA-NeMo/Automodel tests/unit_tests/distributed/test_thd_utils.py::TestProcessInputForTHD::test_single_batch_single_sequence
#[test]
fn automodel_single_batch_single_sequence() {
    let t =
        bshd_to_thd(&batch(1, 4, vec![1, 2, 3, 4], vec![vec![4]], Some(vec![vec![4]])), &default())
            .unwrap();
    assert_eq!(t.input_ids.len(), 4);
    assert_eq!(cu(&t), vec![0, 4]);
}

// Upstream: NVIDIA-NeMo/Automodel tests/unit_tests/distributed/test_thd_utils.py::TestProcessInputForTHD::test_large_batch_with_packing
#[test]
fn automodel_large_batch_with_packing() {
    let t = bshd_to_thd(&full(16, 3 * 128, 3), &default()).unwrap();
    assert_eq!(t.input_ids.len(), 16 * 384);
    assert_eq!(cu(&t).len(), 16 * 3 + 1);
    assert_eq!(*cu(&t).last().unwrap(), 16 * 384);
}

// Upstream: NVIDIA-NeMo/Automodel tests/unit_tests/distributed/test_thd_utils.py::TestProcessInputForTHD::test_chunking_basic
#[test]
fn automodel_chunking_basic() {
    let c = split_into_thd_chunks(&full(4, 6, 1), 2, &default()).unwrap();
    assert_eq!(c.chunks.len(), 2);
    assert!(c.chunks.iter().all(|t| t.input_ids.len() == 12 && t.labels.len() == 12));
    assert_eq!(c.stacked_cu_seqlens().unwrap(), vec![vec![0, 6, 12], vec![0, 6, 12]]);
}

// Upstream: NVIDIA-NeMo/Automodel tests/unit_tests/distributed/test_thd_utils.py::TestProcessInputForTHD::test_chunking_with_packed_sequences
#[test]
fn automodel_chunking_with_packed_sequences() {
    let b = batch(
        4,
        6,
        vec![1, 2, 3, 99, 4, 5, 6, 7, 99, 8, 9, 10, 11, 12, 13, 99, 14, 15, 16, 17, 99, 18, 19, 20],
        vec![vec![3, 2], vec![2, 3], vec![3, 2], vec![2, 3]],
        Some(vec![vec![4, 2], vec![3, 3], vec![4, 2], vec![3, 3]]),
    );
    let c = split_into_thd_chunks(&b, 2, &default()).unwrap();
    assert_eq!(c.stacked_cu_seqlens().unwrap(), vec![vec![0, 3, 5, 7, 10]; 2]);
    assert_eq!(c.stacked_cu_seqlens_padded().unwrap(), vec![vec![0, 4, 6, 9, 12]; 2]);
}

// Upstream: NVIDIA-NeMo/Automodel tests/unit_tests/distributed/test_thd_utils.py::TestProcessInputForTHDWithChunks::test_variable_length_cu_seqlens_padding
#[test]
fn automodel_variable_length_cu_seqlens_padding() {
    let b = batch(
        4,
        6,
        vec![1, 2, 3, 99, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 99, 99, 16, 17, 99, 18, 19, 20],
        vec![vec![3, 2, S], vec![6, S, S], vec![4, S, S], vec![2, 3, S]],
        Some(vec![vec![4, 2, S], vec![6, S, S], vec![4, S, S], vec![3, 3, S]]),
    );
    // Row 2's slots (4) do not fill its 6 tokens, so chunk 1's second sequence is addressed at
    // token 4 (a pad) instead of token 6. Upstream accepts this; the default refuses it.
    assert_eq!(
        split_into_thd_chunks(&b, 2, &default()).unwrap_err(),
        Error::RowSlotsMismatch { row: 2, slots: 4, seq_len: 6 }
    );
    let upstream = BshdOptions { row_tail: RowTail::Upstream, ..default() };
    let c = split_into_thd_chunks(&b, 2, &upstream).unwrap();
    assert_eq!(c.stacked_cu_seqlens().unwrap(), vec![vec![0, 3, 5, 11], vec![0, 4, 6, 9]]);
    // Reference run: the padded offsets of the two chunks.
    assert_eq!(c.stacked_cu_seqlens_padded().unwrap(), vec![vec![0, 4, 6, 12], vec![0, 4, 7, 10]]);
}

// Upstream: NVIDIA-NeMo/Automodel tests/unit_tests/distributed/test_thd_utils.py::TestProcessInputForTHDWithChunks::test_single_chunk
#[test]
fn automodel_single_chunk() {
    let c = split_into_thd_chunks(&full(2, 3, 1), 1, &default()).unwrap();
    assert_eq!(c.chunks.len(), 1);
    assert_eq!(c.chunks[0].input_ids.len(), 6);
    assert_eq!(cu(&c.chunks[0]), vec![0, 3, 6]);
}

// Upstream: NVIDIA-NeMo/Automodel tests/unit_tests/distributed/test_thd_utils.py::TestProcessInputForTHDWithChunks::test_many_chunks
#[test]
fn automodel_many_chunks() {
    let c = split_into_thd_chunks(&full(16, 32, 1), 8, &default()).unwrap();
    assert_eq!(c.chunks.len(), 8);
    assert!(c.chunks.iter().all(|t| t.input_ids.len() == 64));
    assert_eq!(c.stacked_cu_seqlens().unwrap(), vec![vec![0, 32, 64]; 8]);
}

// Upstream: NVIDIA-NeMo/Automodel tests/unit_tests/distributed/test_thd_utils.py::TestProcessInputForTHDWithChunks::test_custom_seq_lens_padding_value
#[test]
fn automodel_custom_seq_lens_padding_value() {
    let b = batch(4, 3, (1..=12).collect(), vec![vec![3, -999]; 4], Some(vec![vec![3, -999]; 4]));
    let opts = BshdOptions { sentinel: -999, ..default() };
    let c = split_into_thd_chunks(&b, 2, &opts).unwrap();
    let stacked = c.stacked_cu_seqlens().unwrap();
    assert_eq!((stacked.len(), stacked[0].len()), (2, 3));
    assert_eq!(stacked, vec![vec![0, 3, 6]; 2]);
}

// Upstream: NVIDIA-NeMo/Automodel tests/unit_tests/distributed/test_thd_utils.py::TestProcessInputForTHDWithChunks::test_cu_seqlens_padded_handling
#[test]
fn automodel_cu_seqlens_padded_handling() {
    let rows = vec![1, 2, 3, 99, 4, 5, 6, 7, 8, 9, 10, 11];
    let b = batch(
        4,
        6,
        [rows.clone(), rows].concat(),
        vec![vec![3, 2], vec![6, S], vec![3, 2], vec![6, S]],
        Some(vec![vec![4, 2], vec![6, S], vec![4, 2], vec![6, S]]),
    );
    let c = split_into_thd_chunks(&b, 2, &default()).unwrap();
    assert_eq!(c.stacked_cu_seqlens().unwrap().len(), 2);
    assert_eq!(c.stacked_cu_seqlens_padded().unwrap().len(), 2);
}

// Upstream: NVIDIA-NeMo/Automodel tests/unit_tests/distributed/test_thd_utils.py::TestProcessInputForTHDWithChunks::test_chunks_equivalence_to_no_chunks
#[test]
fn automodel_chunks_equivalence_to_no_chunks() {
    let b = full(2, 3, 1);
    let one = bshd_to_thd(&b, &default()).unwrap();
    let c = split_into_thd_chunks(&b, 1, &default()).unwrap();
    assert_eq!(c.chunks, vec![one]);
}

// Upstream: NVIDIA-NeMo/Automodel tests/unit_tests/distributed/test_thd_utils.py::TestProcessInputForTHDWithChunks::test_position_ids_none_handling
#[test]
fn automodel_position_ids_none_handling() {
    let c = split_into_thd_chunks(&full(4, 3, 1), 2, &default()).unwrap();
    assert!(c.chunks.iter().all(|t| t.position_ids.is_none()));
}

// Upstream: NVIDIA-NeMo/Automodel tests/unit_tests/distributed/test_thd_utils.py::TestProcessInputForTHDWithChunks::test_padding_mask_correctness
#[test]
fn automodel_padding_mask_correctness() {
    // Token id 0 appears as content, but seq_lens == seq_lens_padded == S: nothing is padding.
    let b = batch(
        4,
        3,
        vec![0, 1, 2, 3, 0, 5, 0, 0, 8, 9, 10, 11],
        vec![vec![3]; 4],
        Some(vec![vec![3]; 4]),
    );
    let c =
        split_into_thd_chunks(&b, 2, &BshdOptions { padding_token_id: 0, ..default() }).unwrap();
    assert!(c.chunks.iter().all(|t| t.padding_mask == vec![false; 6]));
}

// Upstream: NVIDIA-NeMo/Automodel tests/unit_tests/distributed/test_thd_utils.py::TestProcessInputForTHDWithChunks::test_different_chunk_sizes
#[test]
fn automodel_different_chunk_sizes() {
    for n in [2, 4, 8] {
        let c = split_into_thd_chunks(&full(16, 8, 1), n, &default()).unwrap();
        assert_eq!(c.chunks.len(), n);
        assert!(c.chunks.iter().all(|t| t.input_ids.len() == 16 / n * 8));
    }
}

fn absorb_batch(rows: usize, seq_lens: Vec<Vec<i64>>, padded: Vec<Vec<i64>>) -> BshdBatch {
    let mut b = batch(rows, 1024, vec![0; rows * 1024], seq_lens, Some(padded));
    b.labels = vec![0; rows * 1024];
    b
}

// Upstream: NVIDIA-NeMo/Automodel tests/unit_tests/distributed/test_thd_utils.py::TestTrailingPadAbsorption::test_short_microbatch_absorbs_with_truthful_max_seqlen
#[test]
fn automodel_short_microbatch_absorbs_with_truthful_max_seqlen() {
    let b = absorb_batch(
        1,
        vec![vec![112, 112, 112, 112, 112, S, S, S, S]],
        vec![vec![112, 112, 112, 112, 112 + (1024 - 5 * 112), S, S, S, S]],
    );
    let t = bshd_to_thd(&b, &default()).unwrap();
    assert_eq!(cu(&t), vec![0, 112, 224, 336, 448, 1024]);
    assert_eq!(cu_p(&t), None);
    assert_eq!(t.max_seqlen, Some(576));
}

// Upstream: NVIDIA-NeMo/Automodel tests/unit_tests/distributed/test_thd_utils.py::TestTrailingPadAbsorption::test_full_microbatch_absorbs_with_bumped_max_seqlen
#[test]
fn automodel_full_microbatch_absorbs_with_bumped_max_seqlen() {
    let b = absorb_batch(1, vec![vec![112; 9]], vec![[vec![112; 8], vec![128]].concat()]);
    let t = bshd_to_thd(&b, &default()).unwrap();
    assert_eq!(*cu(&t).last().unwrap(), 1024);
    assert_eq!(cu_p(&t), None);
    assert_eq!(t.max_seqlen, Some(128));
}

// Upstream: NVIDIA-NeMo/Automodel tests/unit_tests/distributed/test_thd_utils.py::TestTrailingPadAbsorption::test_split_into_chunks_mixed_short_and_full
#[test]
fn automodel_split_into_chunks_mixed_short_and_full() {
    let b = absorb_batch(
        2,
        vec![vec![112; 9], vec![112, 112, 112, 112, 112, S, S, S, S]],
        vec![
            [vec![112; 8], vec![128]].concat(),
            vec![112, 112, 112, 112, 112 + (1024 - 5 * 112), S, S, S, S],
        ],
    );
    let c = split_into_thd_chunks(&b, 2, &default()).unwrap();
    assert_eq!(c.stacked_cu_seqlens_padded(), None);
    let stacked = c.stacked_cu_seqlens().unwrap();
    for (row, widest) in stacked.iter().zip([128, 576]) {
        let real: Vec<i64> = row.iter().copied().filter(|&x| x != S).collect();
        assert_eq!(*real.last().unwrap(), 1024);
        assert_eq!(real.windows(2).map(|w| w[1] - w[0]).max(), Some(widest));
    }
    assert_eq!(c.max_seqlen(), Some(vec![128, 576]));
}

const PAD_AND_EOS: i64 = 154820;

fn one_row(ids: Vec<i64>, seq_lens: Vec<i64>, padded: Vec<i64>) -> BshdBatch {
    let n = ids.len();
    let mut b = batch(1, n, ids, vec![seq_lens], Some(vec![padded]));
    b.position_ids = Some((0..n as i64).collect());
    b
}

// Upstream: NVIDIA-NeMo/Automodel tests/unit_tests/distributed/test_thd_padding_mask.py::test_pad_id_that_is_also_eos_is_not_masked
#[test]
fn automodel_pad_id_that_is_also_eos_is_not_masked() {
    let e = PAD_AND_EOS;
    let b = one_row(vec![7, 8, e, e, 9, 10, e, e], vec![3, 3], vec![4, 4]);
    let t = bshd_to_thd(&b, &BshdOptions { padding_token_id: e, ..default() }).unwrap();
    assert_eq!(t.padding_mask, vec![false, false, false, true, false, false, false, true]);
}

// Upstream: NVIDIA-NeMo/Automodel tests/unit_tests/distributed/test_thd_padding_mask.py::test_content_token_equal_to_default_pad_id_is_not_masked
#[test]
fn automodel_content_token_equal_to_default_pad_id_is_not_masked() {
    let b = one_row(vec![5, 0, 6, 99, 7, 8, 9, 99], vec![3, 3], vec![4, 4]);
    let t = bshd_to_thd(&b, &BshdOptions { padding_token_id: 0, ..default() }).unwrap();
    assert_eq!(t.padding_mask, vec![false, false, false, true, false, false, false, true]);
}

// Upstream: NVIDIA-NeMo/Automodel tests/unit_tests/distributed/test_thd_padding_mask.py::test_trailing_pack_pad_is_masked
#[test]
fn automodel_trailing_pack_pad_is_masked() {
    let b = one_row(vec![1, 2, 3, 0, 0, 0], vec![3], vec![3]);
    let t = bshd_to_thd(&b, &default()).unwrap();
    assert_eq!(t.padding_mask, vec![false, false, false, true, true, true]);
}

// Upstream: NVIDIA-NeMo/Automodel tests/unit_tests/distributed/test_thd_padding_mask.py::test_token_value_fallback_rejects_a_pad_id_used_as_content
#[test]
fn automodel_token_value_fallback_rejects_a_pad_id_used_as_content() {
    let err = padding_mask_from_token_ids(&[5, 0, 6, 0], 0).unwrap_err();
    assert_eq!(err, Error::PadIdInContent { index: 1, pad_token_id: 0 });
    assert!(err.to_string().contains("also occurs as content"));
}

// Upstream: NVIDIA-NeMo/Automodel tests/unit_tests/distributed/test_thd_padding_mask.py::test_token_value_fallback_accepts_a_right_padded_run
#[test]
fn automodel_token_value_fallback_accepts_a_right_padded_run() {
    assert_eq!(
        padding_mask_from_token_ids(&[5, 6, 0, 0], 0).unwrap(),
        vec![false, false, true, true]
    );
}

/// The reference's golden table for `process_input_for_thd` (runs at Automodel `36044ad3d`).
#[test]
fn automodel_process_input_for_thd_golden_table() {
    struct Case {
        name: &'static str,
        rows: usize,
        seq_len: usize,
        seq_lens: Vec<Vec<i64>>,
        padded: Option<Vec<Vec<i64>>>,
        cu: Vec<i32>,
        cu_p: Option<Vec<i32>>,
        max_seqlen: usize,
        pads: Vec<usize>,
    }
    let cases = [
        Case {
            name: "docstring",
            rows: 2,
            seq_len: 6,
            seq_lens: vec![vec![3, 2], vec![6, S]],
            padded: Some(vec![vec![4, 2], vec![6, S]]),
            cu: vec![0, 3, 5, 11],
            cu_p: Some(vec![0, 4, 6, 12]),
            max_seqlen: 6,
            pads: vec![3],
        },
        Case {
            name: "absorb",
            rows: 1,
            seq_len: 8,
            seq_lens: vec![vec![3, 2]],
            padded: Some(vec![vec![3, 5]]),
            cu: vec![0, 3, 8],
            cu_p: None,
            max_seqlen: 5,
            pads: vec![5, 6, 7],
        },
        Case {
            name: "absorb, row not full",
            rows: 1,
            seq_len: 6,
            seq_lens: vec![vec![3]],
            padded: Some(vec![vec![3]]),
            cu: vec![0, 6],
            cu_p: None,
            max_seqlen: 6,
            pads: vec![3, 4, 5],
        },
        Case {
            name: "two rows, trailing pads",
            rows: 2,
            seq_len: 4,
            seq_lens: vec![vec![3], vec![3]],
            padded: Some(vec![vec![4], vec![4]]),
            cu: vec![0, 3, 6],
            cu_p: Some(vec![0, 4, 8]),
            max_seqlen: 3,
            pads: vec![3, 7],
        },
        Case {
            name: "CP-style",
            rows: 1,
            seq_len: 12,
            seq_lens: vec![vec![3, 5]],
            padded: Some(vec![vec![4, 8]]),
            cu: vec![0, 3, 8],
            cu_p: Some(vec![0, 4, 12]),
            max_seqlen: 5,
            pads: vec![3, 9, 10, 11],
        },
        Case {
            name: "padded shorter than row",
            rows: 1,
            seq_len: 12,
            seq_lens: vec![vec![3, 5]],
            padded: Some(vec![vec![4, 6]]),
            cu: vec![0, 3, 8],
            cu_p: Some(vec![0, 4, 10]),
            max_seqlen: 5,
            pads: vec![3, 9, 10, 11],
        },
        Case {
            name: "zero-length sequence",
            rows: 1,
            seq_len: 4,
            seq_lens: vec![vec![2, 0, 2]],
            padded: Some(vec![vec![2, 0, 2]]),
            cu: vec![0, 2, 2, 4],
            cu_p: None,
            max_seqlen: 2,
            pads: vec![],
        },
        Case {
            name: "seq_lens_padded None",
            rows: 1,
            seq_len: 4,
            seq_lens: vec![vec![3]],
            padded: None,
            cu: vec![0, 3],
            cu_p: None,
            max_seqlen: 3,
            pads: vec![3],
        },
    ];
    for c in cases {
        let n = c.rows * c.seq_len;
        let t =
            bshd_to_thd(&batch(c.rows, c.seq_len, vec![7; n], c.seq_lens, c.padded), &default())
                .unwrap();
        assert_eq!(cu(&t), c.cu, "{}", c.name);
        assert_eq!(cu_p(&t), c.cu_p, "{}", c.name);
        assert_eq!(t.max_seqlen, Some(c.max_seqlen), "{}", c.name);
        let pads: Vec<usize> = (0..n).filter(|&p| t.padding_mask[p]).collect();
        assert_eq!(pads, c.pads, "{}", c.name);
    }
    // All sentinel: Automodel raises IndexError; here a typed error.
    let err = bshd_to_thd(&batch(1, 2, vec![7; 2], vec![vec![S]], Some(vec![vec![S]])), &default());
    assert_eq!(err, Err(Error::NoExamples { collator: "bshd_to_thd" }));
}

/// The absorbed trailing pad stays padding in the exact layout.
#[test]
fn automodel_absorbed_layout_as_packed_batch() {
    let mut b = one_row(vec![1, 2, 3, 4, 5, 0, 0, 0], vec![3, 2], vec![3, 5]);
    b.labels = vec![-100, 2, 3, -100, 5, -100, -100, -100];
    b.position_ids = Some(vec![0, 1, 2, 0, 1, 2, 3, 4]);
    let t = bshd_to_thd(&b, &default()).unwrap();
    let p = t.to_packed_batch(LabelConvention::Unshifted).unwrap();
    assert_eq!(p.cu_seqlens().as_slice(), &[0, 3, 5]);
    assert_eq!(p.cu_seqlens_padded().unwrap().as_slice(), &[0, 3, 8]);
}

/// Automodel's `split_batch_into_thd_chunks` drops `B mod num_chunks` rows; here an error.
#[test]
fn automodel_remainder_rows_are_an_error() {
    assert_eq!(
        split_into_thd_chunks(&full(5, 4, 1), 2, &default()),
        Err(Error::RowsNotDivisible { rows: 5, num_chunks: 2 })
    );
}
