//! The checks themselves: on arbitrary plain data (what a dumped Python batch or a subprocess
//! adapter may hand over) they return a verdict and never panic.

use proptest::collection::vec;
use proptest::prelude::*;
use thd::LabelConvention;

use crate::checks::{
    BatchOptions, BlockMask, DpoSegment, DpoView, IntSlice, LayoutView, ShardView, SideTensor,
    batch_facts, check_batch, check_cp_shard, check_documents, check_dpo, check_layout,
};

fn small() -> impl Strategy<Value = i64> {
    -3i64..12
}

proptest! {
    /// The count of valid labels is the obvious one: every label that is not -100, less each
    /// row's first position when labels are unshifted (Hugging Face shifts within each row), for
    /// `[B, S]` batches and flat ones alike.
    #[test]
    fn valid_labels_are_counted_the_obvious_way(
        rows in 1usize..5,
        width in 1usize..9,
        seed in vec(prop_oneof![Just(-100i64), 0i64..5], 40),
        shifted in any::<bool>(),
    ) {
        let labels: Vec<i64> = seed.iter().copied().cycle().take(rows * width).collect();
        let convention =
            if shifted { LabelConvention::Shifted } else { LabelConvention::Unshifted };
        let cu = [0, (rows * width) as i64];
        let view = LayoutView {
            num_tokens: rows * width,
            rows,
            cu_seqlens: IntSlice::from(&cu),
            labels: Some(IntSlice::from(labels.as_slice())),
            label_convention: convention,
            ..Default::default()
        };
        let w = if rows > 1 { width } else { rows * width };
        let want = labels
            .iter()
            .enumerate()
            .filter(|&(t, &x)| x != -100 && (shifted || t % w != 0))
            .count() as u64;
        prop_assert_eq!(batch_facts(&view, &[false]).valid_labels, Some(want));
    }

    #[test]
    fn layout_checks_never_panic(
        t in 0usize..12,
        cu in vec(small(), 0..6),
        padded in prop::option::of(vec(small(), 0..6)),
        pos in prop::option::of(vec(small(), 0..12)),
        labels in prop::option::of(vec(small(), 0..12)),
        ids in prop::option::of(vec(small(), 0..12)),
        n_real in prop::option::of(0usize..6),
        shifted in any::<bool>(),
        docs in vec(vec(small(), 0..4), 0..4),
    ) {
        let view = LayoutView {
            num_tokens: t,
            input_ids: ids.as_deref().map(IntSlice::from),
            cu_seqlens: IntSlice::from(&cu),
            cu_seqlens_padded: padded.as_deref().map(IntSlice::from),
            position_ids: pos.as_deref().map(IntSlice::from),
            labels: labels.as_deref().map(IntSlice::from),
            label_convention: if shifted { LabelConvention::Shifted } else { LabelConvention::Unshifted },
            num_real_seqs: n_real,
            facts: rules::contract::Contract { position_base: Some(0), ..Default::default() },
            ..Default::default()
        };
        let _ = check_layout(&view);
        let docs: Vec<&[i64]> = docs.iter().map(Vec::as_slice).collect();
        let _ = check_documents(&docs, &view);
    }

    /// A 4-D mask summary, EOS facts and side tensors of any shape, beside any offsets.
    #[test]
    fn format_checks_never_panic(
        t in 0usize..12,
        rows in 0usize..4,
        cu in vec(small(), 0..6),
        padded in prop::option::of(vec(small(), 0..6)),
        ids in prop::option::of(vec(small(), 0..12)),
        spans in prop::option::of(vec((small(), small()).prop_map(|(a, b)| [a, b]), 0..12)),
        gaps in vec(0usize..14, 0..4),
        bidirectional in any::<bool>(),
        eos in prop::option::of(small()),
        ends_with_eos in any::<bool>(),
        n_real in prop::option::of(0usize..6),
        entries in vec(0usize..14, 0..3),
    ) {
        let side: Vec<SideTensor> =
            entries.iter().map(|&entries| SideTensor { key: "side", entries, per_prediction: false }).collect();
        let view = LayoutView {
            num_tokens: t,
            rows,
            input_ids: ids.as_deref().map(IntSlice::from),
            cu_seqlens: IntSlice::from(&cu),
            cu_seqlens_padded: padded.as_deref().map(IntSlice::from),
            num_real_seqs: n_real,
            block_mask: spans.as_deref().map(|spans| BlockMask { key: "m", spans, gaps: &gaps }),
            facts: rules::contract::Contract {
                attention: bidirectional.then_some(rules::contract::Attention::Bidirectional),
                eos_token_id: eos,
                documents: ends_with_eos.then_some(rules::contract::DocumentsFact::Eos),
                ..Default::default()
            },
            side_tensors: &side,
            ..Default::default()
        };
        let _ = check_layout(&view);
        let _ = check_batch(&view, &BatchOptions::default());
    }

    #[test]
    fn shard_and_dpo_checks_never_panic(
        cp in 0usize..5,
        lens in vec(0u32..6, 0..4),
        storage in vec(0u32..9, 0..4),
        positions in vec(vec(prop::option::of(0usize..20), 0..10), 0..5),
        labels in vec(vec(small(), 0..10), 0..5),
        unshifted in vec(small(), 0..20),
        tags in vec(small(), 0..20),
        cu in vec(small(), 0..6),
        padded in prop::option::of(vec(small(), 0..6)),
        segs in vec((0u64..3, any::<bool>(), small(), 0u32..6), 0..5),
    ) {
        let _ = check_cp_shard(&ShardView {
            cp,
            lens: &lens,
            storage: &storage,
            positions: &positions,
            labels: Some(&labels),
            unshifted_labels: Some(&unshifted),
            position_ids: Some(&labels),
        });
        let expected: Vec<DpoSegment> = segs
            .iter()
            .map(|&(example, rejected, tag, len)| DpoSegment { example, rejected, tag, len })
            .collect();
        let view = DpoView { tags: &tags, cu_seqlens: &cu, cu_seqlens_padded: padded.as_deref(), seq_idx: Some(&tags) };
        let _ = check_dpo(&view, &expected);
    }

    /// Offsets stored as int32 and read in place give the report that the same offsets widened
    /// to int64 give, byte for byte, valid or not, for every rule `check_batch` runs.
    #[test]
    fn int32_offsets_judge_as_int64_ones(
        t in 0usize..12,
        cu in vec(small(), 0..6),
        padded in prop::option::of(vec(small(), 0..6)),
        cu_k in prop::option::of(vec(small(), 0..6)),
        absorbed in any::<bool>(),
        labels in prop::option::of(vec(small(), 0..12)),
        ids in prop::option::of(vec(small(), 0..12)),
        pos in prop::option::of(vec(small(), 0..12)),
        n_real in prop::option::of(0usize..6),
        pad in prop::option::of(0i64..3),
        cp in prop::option::of(1usize..4),
        causal in any::<bool>(),
    ) {
        let narrow = |v: &[i64]| -> Vec<i32> { v.iter().map(|&x| x as i32).collect() };
        let (cu32, padded32, k32) =
            (narrow(&cu), padded.as_deref().map(narrow), cu_k.as_deref().map(narrow));
        let base = LayoutView {
            num_tokens: t,
            input_ids: ids.as_deref().map(IntSlice::from),
            position_ids: pos.as_deref().map(IntSlice::from),
            labels: labels.as_deref().map(IntSlice::from),
            num_real_seqs: n_real,
            facts: rules::contract::Contract { pad_token_id: pad, ..Default::default() },
            ..Default::default()
        };
        let wide = LayoutView {
            cu_seqlens: IntSlice::from(&cu),
            cu_seqlens_padded: padded.as_deref().map(IntSlice::from),
            cu_seqlens_k: cu_k.as_deref().map(IntSlice::from),
            cu_seqlens_q_stored: padded.as_deref().filter(|_| absorbed).map(IntSlice::from),
            ..base
        };
        let stored = LayoutView {
            cu_seqlens: IntSlice::from(cu32.as_slice()),
            cu_seqlens_padded: padded32.as_deref().map(IntSlice::from),
            cu_seqlens_k: k32.as_deref().map(IntSlice::from),
            cu_seqlens_q_stored: padded32.as_deref().filter(|_| absorbed).map(IntSlice::from),
            ..base
        };
        let opts = BatchOptions { cp_size: cp, causal, pad_to_multiple_of: Some(4), ..Default::default() };
        prop_assert_eq!(
            format!("{:?}", check_batch(&wide, &opts)),
            format!("{:?}", check_batch(&stored, &opts))
        );
        prop_assert_eq!(check_layout(&wide), check_layout(&stored));
    }

    /// The padding ranges the rules walk instead of a flag per token are exactly the tokens
    /// the real-token mask leaves out, in order.
    #[test]
    fn padding_ranges_are_the_real_token_masks_complement(
        segs in vec((0i64..4, 0i64..3, any::<bool>()), 0..6),
        tail in 0usize..3,
        padded in any::<bool>(),
    ) {
        let mut cu = vec![0i64];
        let mut slots = vec![0i64];
        for &(len, extra, _) in &segs {
            cu.push(cu[cu.len() - 1] + len);
            slots.push(slots[slots.len() - 1] + len + if padded { extra } else { 0 });
        }
        let mock: Vec<bool> = segs.iter().map(|s| s.2).collect();
        let view = LayoutView {
            num_tokens: slots[slots.len() - 1] as usize + tail,
            cu_seqlens: IntSlice::from(&cu),
            cu_seqlens_padded: padded.then_some(IntSlice::from(&slots)),
            ..Default::default()
        };
        let want: Vec<usize> = view
            .real_token_mask(&mock)
            .iter()
            .enumerate()
            .filter(|(_, r)| !**r)
            .map(|(t, _)| t)
            .collect();
        let got: Vec<usize> = view.padding_ranges(&mock).flatten().collect();
        prop_assert_eq!(got, want);
    }
}
