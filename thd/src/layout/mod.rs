//! Layout types: the vocabulary of a packed batch.
//!
//! - [`SeqLens`]: per-segment lengths (`B` entries).
//! - [`CuSeqlens`]: exclusive prefix sums (`B + 1` entries, from 0, non-decreasing, int32).
//! - [`PackedBatch`]: tokens, labels, position ids and offsets, validated against every LAYOUT
//!   rule on construction.

mod batch;
mod cu_seqlens;
mod seq_lens;

pub use batch::{LabelConvention, PackedBatch, PackedBatchParts};
pub use cu_seqlens::CuSeqlens;
pub use seq_lens::SeqLens;
