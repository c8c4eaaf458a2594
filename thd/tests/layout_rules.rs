//! One test per LAYOUT rule of DESIGN.md: each builds a batch that breaks exactly that rule and
//! asserts the specific error (variant, index, value) and its message.

use thd::{CuSeqlens, Error, LabelConvention, PackedBatch, PackedBatchParts, SeqLens};

/// Two documents of 3 and 2 tokens, HF label convention, no padding.
fn good() -> PackedBatchParts {
    PackedBatchParts {
        input_ids: vec![11, 12, 13, 21, 22],
        labels: vec![-100, 12, 13, -100, 22],
        position_ids: Some(vec![0, 1, 2, 0, 1]),
        cu_seqlens: vec![0, 3, 5],
        ..Default::default()
    }
}

fn err(parts: PackedBatchParts) -> Error {
    PackedBatch::new(parts).expect_err("the batch breaks a LAYOUT rule")
}

#[test]
fn layout_accepts_a_well_formed_batch() {
    let b = PackedBatch::new(good()).unwrap();
    assert_eq!(b.num_segments(), 2);
    assert_eq!(b.real_tokens(1), 3..5);
}

#[test]
fn cu_seqlens_must_not_be_empty() {
    let e = err(PackedBatchParts { cu_seqlens: vec![], ..good() });
    assert_eq!(e, Error::CuSeqlensEmpty { name: "cu_seqlens" });
}

#[test]
fn cu_seqlens_must_start_at_zero() {
    let e = err(PackedBatchParts { cu_seqlens: vec![1, 3, 5], ..good() });
    assert_eq!(e, Error::CuSeqlensStart { name: "cu_seqlens", first: 1 });
    assert_eq!(e.to_string(), "cu_seqlens must start at 0, got cu_seqlens[0]=1");
}

#[test]
fn cu_seqlens_must_be_non_decreasing() {
    let e = CuSeqlens::try_from(vec![0, 5, 20, 17, 30]).unwrap_err();
    assert_eq!(e, Error::CuSeqlensDecreasing { name: "cu_seqlens", index: 3, value: 17, prev: 20 });
    assert_eq!(
        e.to_string(),
        "cu_seqlens must be non-decreasing: cu_seqlens[3]=17 < cu_seqlens[2]=20"
    );
}

#[test]
fn cu_seqlens_must_not_be_negative() {
    // A negative entry after the leading 0 is a decrease; it is reported as such, with the value.
    let e = err(PackedBatchParts { cu_seqlens: vec![0, -3, 5], ..good() });
    assert_eq!(e, Error::CuSeqlensDecreasing { name: "cu_seqlens", index: 1, value: -3, prev: 0 });
}

#[test]
fn cu_seqlens_must_end_within_the_tokens() {
    let e = err(PackedBatchParts { cu_seqlens: vec![0, 3, 6], ..good() });
    assert_eq!(
        e,
        Error::CuSeqlensBeyondTokens { name: "cu_seqlens", index: 2, value: 6, tokens: 5 }
    );
    assert_eq!(
        e.to_string(),
        "cu_seqlens must end at or before the token count: cu_seqlens[2]=6 > 5 tokens"
    );
}

#[test]
fn cu_seqlens_may_end_before_the_tokens() {
    // Static padding after the last segment: the pad tokens are outside every segment.
    let b = PackedBatch::new(PackedBatchParts {
        input_ids: vec![11, 12, 13, 21, 22, 0, 0],
        labels: vec![-100, 12, 13, -100, 22, -100, -100],
        position_ids: None,
        ..good()
    })
    .unwrap();
    assert_eq!(b.cu_seqlens().total(), 5);
    assert_eq!(b.num_tokens(), 7);
}

#[test]
fn cu_seqlens_must_fit_int32() {
    let big = i64::from(i32::MAX) + 1;
    let e = CuSeqlens::from_i64("cu_seq_lens_q", &[0, 7, big]).unwrap_err();
    assert_eq!(e, Error::CuSeqlensOverflow { name: "cu_seq_lens_q", index: 2, value: big });
    assert_eq!(
        e.to_string(),
        "cu_seq_lens_q must fit int32: cu_seq_lens_q[2]=2147483648 > 2147483647"
    );
    let e = SeqLens::new(vec![u32::MAX, 1]).to_cu_seqlens().unwrap_err();
    assert_eq!(e, Error::TotalLengthOverflow { total: u64::from(u32::MAX) + 1 });
}

#[test]
fn padded_lengths_must_cover_real_lengths() {
    let e = err(PackedBatchParts {
        input_ids: vec![0; 8],
        labels: vec![-100; 8],
        position_ids: None,
        cu_seqlens: vec![0, 3, 5],
        cu_seqlens_padded: Some(vec![0, 2, 8]),
        ..Default::default()
    });
    assert_eq!(e, Error::PaddedShorterThanReal { segment: 0, real: 3, padded: 2 });
    assert_eq!(
        e.to_string(),
        "padded length must be >= real length: segment 0 has real length 3 but padded length 2"
    );
}

#[test]
fn padded_offsets_must_have_the_same_segments() {
    let e = err(PackedBatchParts {
        input_ids: vec![0; 8],
        labels: vec![-100; 8],
        position_ids: None,
        cu_seqlens: vec![0, 3, 5],
        cu_seqlens_padded: Some(vec![0, 4, 6, 8]),
        ..Default::default()
    });
    assert_eq!(e, Error::SegmentCountMismatch { real: 2, padded: 3 });
}

#[test]
fn padded_offsets_address_the_storage() {
    // TE layout: segments of 3 and 2 real tokens padded to 4 and 4; real tokens start at the
    // padded offsets.
    let b = PackedBatch::new(PackedBatchParts {
        input_ids: vec![11, 12, 13, 0, 21, 22, 0, 0],
        labels: vec![-100, 12, 13, -100, -100, 22, -100, -100],
        position_ids: None,
        cu_seqlens: vec![0, 3, 5],
        cu_seqlens_padded: Some(vec![0, 4, 8]),
        ..Default::default()
    })
    .unwrap();
    assert_eq!(b.real_tokens(1), 4..6);
    assert_eq!(b.position_ids(), &[0, 1, 2, 0, 0, 1, 0, 0]);
    let e = err(PackedBatchParts {
        input_ids: vec![0; 7],
        labels: vec![-100; 7],
        position_ids: None,
        cu_seqlens: vec![0, 3, 5],
        cu_seqlens_padded: Some(vec![0, 4, 8]),
        ..Default::default()
    });
    assert_eq!(
        e,
        Error::CuSeqlensBeyondTokens { name: "cu_seqlens_padded", index: 2, value: 8, tokens: 7 }
    );
}

#[test]
fn position_ids_must_restart_per_segment() {
    // The classic bug: position ids count through the whole pack (0..T).
    let e = err(PackedBatchParts { position_ids: Some(vec![0, 1, 2, 3, 4]), ..good() });
    assert_eq!(e, Error::PositionIdsNotReset { segment: 1, token: 3, offset: 0, got: 3 });
    assert_eq!(
        e.to_string(),
        "position_ids must restart at each segment start: segment 1, token 3 (offset 0 in the \
         segment) has position id 3, expected 0"
    );
}

#[test]
fn no_label_crosses_a_document_boundary_unshifted() {
    // HF convention: the last token of segment 0 (token 2) predicts labels[3], the next
    // document's first token.
    let e = err(PackedBatchParts { labels: vec![-100, 12, 13, 21, 22], ..good() });
    assert_eq!(e, Error::CrossDocumentLabel { segment: 0, token: 3, label: 21 });
    assert_eq!(
        e.to_string(),
        "no label may cross a document boundary: the target of segment 0's last token is \
         labels[3]=21, the next document's first token (expected -100 or the segment's own target)"
    );
}

#[test]
fn a_trained_boundary_label_that_is_not_the_next_token_is_the_segments_own_target() {
    // NeMo Automodel shifts labels per sample before packing (`labels = labels[1:]`): each
    // segment's last label is its own EOS target (2 here), not the next document's token.
    let per_sample = PackedBatchParts {
        labels: vec![12, 13, 2, 22, 2],
        label_convention: LabelConvention::Shifted,
        ..good()
    };
    PackedBatch::new(per_sample).unwrap();
    // transformers' DataCollatorWithFlattening(separator_id=2): the label read at segment 1's
    // first token is the separator, trained on purpose.
    PackedBatch::new(PackedBatchParts { labels: vec![2, 12, 13, 2, 22], ..good() }).unwrap();
}

#[test]
fn no_label_crosses_a_document_boundary_shifted() {
    // Megatron convention: labels were rolled over the whole pack instead of per sequence.
    let rolled_per_sequence = PackedBatchParts {
        labels: vec![12, 13, -100, 22, -100],
        label_convention: LabelConvention::Shifted,
        ..good()
    };
    PackedBatch::new(rolled_per_sequence.clone()).unwrap();
    let rolled_over_pack =
        PackedBatchParts { labels: vec![12, 13, 21, 22, -100], ..rolled_per_sequence };
    assert_eq!(
        err(rolled_over_pack),
        Error::CrossDocumentLabel { segment: 0, token: 2, label: 21 }
    );
}

#[test]
fn zero_length_segments_are_representable() {
    let b = PackedBatch::new(PackedBatchParts { cu_seqlens: vec![0, 3, 3, 5], ..good() }).unwrap();
    assert_eq!(b.num_segments(), 3);
    assert!(b.real_tokens(1).is_empty());
    assert_eq!(b.cu_seqlens().seq_lens().as_slice(), &[3, 0, 2]);
    // The label check skips the empty segment but still guards the boundary after segment 0.
    let e = err(PackedBatchParts {
        cu_seqlens: vec![0, 3, 3, 5],
        labels: vec![-100, 12, 13, 21, 22],
        ..good()
    });
    assert_eq!(e, Error::CrossDocumentLabel { segment: 0, token: 3, label: 21 });
}

#[test]
fn num_real_seqs_cannot_exceed_the_segments() {
    let e = err(PackedBatchParts { num_real_seqs: Some(3), ..good() });
    assert_eq!(e, Error::NumRealSeqsTooLarge { num_real_seqs: 3, segments: 2 });
    let b = PackedBatch::new(PackedBatchParts { num_real_seqs: Some(1), ..good() }).unwrap();
    assert_eq!(b.num_real_segments(), 1);
}

// See: AReaL #1103 (a padding step appended its tail offset when nothing needed padding).
#[test]
fn mock_segments_must_hold_a_token() {
    // The duplicated final offset makes segment 2 a zero-length mock segment.
    let e =
        err(PackedBatchParts { cu_seqlens: vec![0, 3, 5, 5], num_real_seqs: Some(2), ..good() });
    assert_eq!(e, Error::EmptyMockSegment { name: "cu_seqlens", segment: 2, next: 3, offset: 5 });
    assert_eq!(
        e.to_string(),
        "mock segment 2 holds no token: cu_seqlens[2] = cu_seqlens[3] = 5; a mock segment is padding and must hold at least one token (or be left out)"
    );
    // Storage is what counts: a mock segment with no real token but padded storage is fine,
    // and so is an empty *real* segment.
    let padded = PackedBatchParts {
        cu_seqlens: vec![0, 3, 4, 4],
        cu_seqlens_padded: Some(vec![0, 3, 4, 5]),
        position_ids: Some(vec![0, 1, 2, 0, 0]),
        labels: vec![-100, 12, 13, -100, -100],
        num_real_seqs: Some(2),
        ..good()
    };
    assert!(PackedBatch::new(padded).is_ok());
    assert!(PackedBatch::new(PackedBatchParts { cu_seqlens: vec![0, 3, 3, 5], ..good() }).is_ok());
}

#[test]
fn per_token_tensors_must_match_input_ids() {
    let e = err(PackedBatchParts { labels: vec![-100; 4], ..good() });
    assert_eq!(e, Error::TokenCountMismatch { key: "labels", len: 4, expected: 5 });
    let e = err(PackedBatchParts { position_ids: Some(vec![0; 6]), ..good() });
    assert_eq!(e, Error::TokenCountMismatch { key: "position_ids", len: 6, expected: 5 });
    assert_eq!(e.to_string(), "position_ids has 6 entries but input_ids has 5");
}
