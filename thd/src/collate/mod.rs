//! Collators: documents in, one validated pack out.
//!
//! Each function reproduces one upstream collator's *fixed* behaviour; where the stacks
//! disagree, the difference is an explicit option, never a silent choice.
//!
//! | concept | upstream | here |
//! |---|---|---|
//! | flattening | HF / bionemo / open-instruct `DataCollatorWithFlattening` | [`flatten`] ([`BoundaryLabels`], [`StaticPadding`]) |
//! | mock segment | bionemo `_pt_pad_to_multiple_of`, CodonFM `CodonTHDCollator` | [`pad_to_multiple_of`] (records `num_real_seqs`) |
//! | CP divisibility | TransformerEngine `pad_thd_sequences_for_cp` | [`pad_sequences_for_cp`], [`pad_for_cp`] |
//! | BSHD → THD | NeMo Automodel `process_input_for_thd`, `split_batch_into_thd_chunks` | [`bshd_to_thd`], [`split_into_thd_chunks`] |
//! | DPO | open-instruct `TensorDataCollatorWithFlatteningDPO`, `concatenated_inputs` | [`collate_dpo`], [`DpoBatch::concatenated`] |
//!
//! # Example
//! ```
//! use thd::collate::{CpPadding, Document, FlattenOptions, MockPadding, flatten, pad_for_cp, pad_to_multiple_of};
//! let ex = [Document::new(vec![0, 5, 6, 7, 2]), Document::new(vec![0, 8, 9, 2])];
//! let batch = flatten(&ex, &FlattenOptions::default())?;
//! // FP8 alignment: a mock segment, useful work still tells it apart.
//! let aligned = pad_to_multiple_of(&batch, &MockPadding { multiple_of: 16, pad_token_id: 1, max_mock_len: None })?;
//! assert_eq!((aligned.num_segments(), aligned.num_real_segments()), (3, 2));
//! // CP = 2: every sequence padded to a multiple of 4 in place.
//! let cp = pad_for_cp(&batch, &CpPadding::for_cp(2, 1))?;
//! assert_eq!(cp.cu_seqlens_padded().unwrap().as_slice(), &[0, 8, 12]);
//! # Ok::<(), thd::Error>(())
//! ```

mod bshd;
mod cp_pad;
mod document;
mod dpo;
mod flatten;
mod mock;

pub use bshd::{
    BshdBatch, BshdOptions, RowTail, ThdChunks, ThdInputs, bshd_to_thd,
    padding_mask_from_token_ids, split_into_thd_chunks,
};
pub use cp_pad::{CpPadded, CpPadding, pad_for_cp, pad_sequences_for_cp};
pub use document::Document;
pub use dpo::{
    DpoBatch, DpoConcatenated, DpoExample, DpoOptions, collate_dpo,
    count_features_within_token_budget, segment_logps,
};
pub use flatten::{BoundaryLabels, FlattenOptions, Overflow, StaticPadding, flatten, seq_idx};
pub use mock::{MockPadding, attention_mask, pad_to_multiple_of};
