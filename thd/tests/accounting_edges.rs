//! Edges that cargo-mutants found unguarded (shard 0 of 25, `ci/mutants.sh 0`): each test pins
//! one value that a surviving mutant changed.

use thd::collate::{BshdBatch, BshdOptions, bshd_to_thd, split_into_thd_chunks};
use thd::cp::{CpLayout, padded_varlen_attention};
use thd::metrics::BatchWork;
use thd::metrics::megatron::{FlopsAccumulator, MicroBatch, resolve_global_stats};
use thd::pack::{
    BestFit, BinPackingOptions, Example, Packer, SequentialBudget, SequentialOptions, TokenPacking,
    TokenPackingOptions,
};
use thd::{AttnOptions, AttnShape, CuSeqlens, Error, SeqLens};

/// A `[rows, seq_len]` batch without seq_lens (the padding mask comes from the pad id), labels
/// all ignored.
fn bshd(rows: usize, seq_len: usize, input_ids: Vec<i64>) -> BshdBatch {
    let labels = vec![-100; input_ids.len()];
    BshdBatch {
        rows,
        seq_len,
        input_ids,
        labels,
        position_ids: None,
        seq_lens: None,
        seq_lens_padded: None,
    }
}

#[test]
fn seq_lens_sum_squares_is_the_sum_of_squares() {
    let lens = SeqLens::from(vec![3u32, 0, 2]);
    assert_eq!(lens.sum_squares(), 13);
}

#[test]
fn megatron_thd_micro_batches_add_up() {
    // Two THD micro-batches: every accumulator is their sum, not the last one's.
    let cu = [0i64, 3, 8];
    let mb = MicroBatch { tokens: Some((1, 8)), cu_seqlens: Some(&cu), ..Default::default() };
    let mut acc = FlopsAccumulator::default();
    acc.accumulate(&mb).unwrap();
    acc.accumulate(&mb).unwrap();
    assert_eq!((acc.seqlen_sum, acc.seqlen_sq_sum, acc.real_seqlen_sum), (16, 68, 16));
}

#[test]
fn megatron_vision_stats_add_up() {
    let mb = MicroBatch {
        tokens: Some((1, 8)),
        vision_patch_stats: Some((4, 10, 3)),
        ..Default::default()
    };
    let mut acc = FlopsAccumulator::default();
    acc.accumulate(&mb).unwrap();
    acc.accumulate(&mb).unwrap();
    assert_eq!(
        (acc.vision_patch_sum, acc.vision_patch_sq_sum, acc.vision_merged_token_sum),
        (8, 20, 6)
    );
}

#[test]
fn attention_mask_work_counts_the_ones() {
    // Not as many ones as zeros, so that counting the zeros cannot give the same numbers.
    let w = BatchWork::from_attention_mask(&[vec![1, 1, 1, 0], vec![1, 1, 0, 0]]).unwrap();
    assert_eq!(w.real_tokens, 5);
    assert_eq!(w.useful.sum_squares, 9 + 4);
    assert_eq!(w.valid_labels, 2 + 1); // one fewer than the real tokens of each row
}

#[test]
fn bshd_without_seq_lens_masks_every_row() {
    // No seq_lens: the padding mask comes from the pad id, row by row.
    let batch = bshd(2, 3, vec![5, 6, 0, 7, 0, 0]);
    let out = bshd_to_thd(&batch, &BshdOptions::default()).unwrap();
    assert_eq!(out.padding_mask, vec![false, false, true, false, true, true]);
}

#[test]
fn padded_attention_names_the_shape_it_expected() {
    let real = CuSeqlens::try_from(vec![0, 1]).unwrap();
    let padded = CuSeqlens::try_from(vec![0, 2]).unwrap();
    let layout = CpLayout::new(&real, Some(&padded), 1).unwrap();
    let shape = AttnShape { heads: 2, kv_heads: 1, head_dim: 3 };
    let e = padded_varlen_attention(
        &layout,
        &[0.0; 5],
        &[0.0; 6],
        &[0.0; 6],
        shape,
        &AttnOptions::default(),
    )
    .unwrap_err();
    assert!(matches!(e, Error::ShapeMismatch { key: "q", len: 5, expected: 12, .. }), "{e:?}");
}

#[test]
fn sequential_budget_is_named_and_knows_its_capacity() {
    let p = SequentialBudget::new(8, SequentialOptions::default()).unwrap();
    assert_eq!((p.name(), p.capacity()), ("sequential_budget", 8));
}

#[test]
fn offline_bin_packer_counts_what_it_holds() {
    // Packing the whole epoch at its end: pushed examples wait, and say how many they are.
    let mut p = BestFit::new(8, BinPackingOptions::default()).unwrap();
    assert_eq!(p.pending(), 0);
    assert!(p.push(&[Example::single(0, 3), Example::single(1, 4)]).unwrap().is_empty());
    assert_eq!(p.pending(), 2);
}

#[test]
fn megatron_config_seq_len_zero_uses_the_tensors_length() {
    let mb = MicroBatch { tokens: Some((1, 8)), config_seq_len: Some(0), ..Default::default() };
    let mut acc = FlopsAccumulator::default();
    acc.accumulate(&mb).unwrap();
    assert_eq!((acc.seqlen_sum, acc.seqlen_sq_sum), (8, 64));
}

#[test]
fn megatron_scales_the_local_stats_unless_they_need_the_reduce() {
    // Dense stats (no global reduce needed) are the local ones times DP, even when the ranks'
    // accumulators are at hand; only THD stats are summed over the ranks.
    let local = FlopsAccumulator { seqlen_sum: 10, seqlen_sq_sum: 100, ..Default::default() };
    let other = FlopsAccumulator { seqlen_sum: 7, seqlen_sq_sum: 49, ..Default::default() };
    let (stats, _) = resolve_global_stats(&local, 2, Some(&[local, other])).unwrap();
    assert_eq!(stats.map(|s| (s.seqlen_sum, s.seqlen_squared_sum)), Some((20, 200)));
    let thd = FlopsAccumulator {
        requires_global_reduce: true,
        real_seqlen_sum: 9,
        vision_patches: 3,
        ..local
    };
    let other = FlopsAccumulator { real_seqlen_sum: 2, vision_patches: 1, ..other };
    let (stats, sum) = resolve_global_stats(&thd, 2, Some(&[thd, other])).unwrap();
    assert_eq!(stats.map(|s| (s.seqlen_sum, s.seqlen_squared_sum)), Some((17, 149)));
    assert_eq!((sum.real_seqlen_sum, sum.vision_patches), (11, 4));
}

#[test]
fn bshd_of_empty_rows_is_empty_not_a_panic() {
    // seq_len 0: no row to mask (chunks of 0 would panic).
    let batch = bshd(2, 0, vec![]);
    let out = bshd_to_thd(&batch, &BshdOptions::default()).unwrap();
    assert!(out.padding_mask.is_empty() && out.input_ids.is_empty());
}

#[test]
fn megatron_argmin_may_be_the_length_but_not_past_it() {
    use thd::metrics::megatron::real_subseq_lengths;
    // argmin = len: no sentinel, every offset kept.
    let lens = real_subseq_lengths(Some(&[0, 3, 8]), Some(3), None, None).unwrap().unwrap();
    assert_eq!(lens.as_slice(), &[3, 5]);
    let e = real_subseq_lengths(Some(&[0, 3, 8]), Some(4), None, None).unwrap_err();
    assert!(matches!(e, Error::ArgminOutOfRange { argmin: 4, len: 3, .. }), "{e:?}");
}

/// A pad id inside a row's content is named at its index in the whole `[B, S]` batch, also when
/// the batch is split into chunks.
#[test]
fn bshd_pad_id_in_content_is_named_at_its_batch_index() {
    let batch = bshd(2, 3, vec![5, 6, 7, 8, 0, 9]);
    let opts = BshdOptions::default();
    let at = |e: Error| match e {
        Error::PadIdInContent { index, .. } => index,
        e => panic!("{e:?}"),
    };
    assert_eq!(at(bshd_to_thd(&batch, &opts).unwrap_err()), 4);
    assert_eq!(at(split_into_thd_chunks(&batch, 2, &opts).unwrap_err()), 4);
}

#[test]
fn attention_shapes_need_query_heads() {
    let shape = AttnShape { heads: 0, kv_heads: 1, head_dim: 8 };
    assert_eq!(shape.group_size(), Err(Error::HeadsNotMultiple { heads: 0, kv_heads: 1 }));
}

#[test]
fn offsets_reach_exactly_int32_max() {
    // A total of i32::MAX tokens still has int32 offsets; one more does not.
    let cu = SeqLens::from(vec![i32::MAX as u32]).to_cu_seqlens().unwrap();
    assert_eq!(cu.as_slice(), &[0, i32::MAX]);
    assert!(SeqLens::from(vec![i32::MAX as u32, 1]).to_cu_seqlens().is_err());
}

#[test]
fn megatron_one_dp_rank_needs_no_reduce() {
    let thd = FlopsAccumulator {
        seqlen_sum: 10,
        seqlen_sq_sum: 100,
        requires_global_reduce: true,
        ..Default::default()
    };
    let other = FlopsAccumulator { seqlen_sum: 7, seqlen_sq_sum: 49, ..Default::default() };
    let (stats, _) = resolve_global_stats(&thd, 1, Some(&[thd, other])).unwrap();
    assert_eq!(stats.map(|s| (s.seqlen_sum, s.seqlen_squared_sum)), Some((10, 100)));
}

#[test]
fn bshd_chunks_of_several_rows_name_the_batch_index() {
    // 4 rows of 3 in 2 chunks of 2 rows: a pad id inside row 2 (chunk 1) is at 2·3 + 1.
    let batch = bshd(4, 3, vec![5, 6, 7, 8, 9, 10, 11, 0, 12, 13, 14, 15]);
    match split_into_thd_chunks(&batch, 2, &BshdOptions::default()).unwrap_err() {
        Error::PadIdInContent { index, .. } => assert_eq!(index, 7),
        e => panic!("{e:?}"),
    }
}

#[test]
fn token_packing_never_splits_off_an_empty_head() {
    // max 6, d = 4: after a 4-token sample, a 3-token one (padded 4) leaves room for 2, which
    // rounds down to 0: the sample starts the next pack whole, no empty piece is split off.
    let opts =
        TokenPackingOptions { divisible_by: Some(4), split_samples: true, ..Default::default() };
    let mut p = TokenPacking::new(6, opts).unwrap();
    let mut packs = p.push(&[Example::single(0, 4), Example::single(1, 3)]).unwrap();
    packs.extend(p.end_epoch().unwrap());
    let ids: Vec<Vec<u64>> = packs.iter().map(|p| p.ids().collect()).collect();
    assert_eq!(ids, [vec![0], vec![1]]);
    assert!(packs.iter().all(|p| !p.is_empty()));
}
