//! `thd`: the exact reference implementation of packed-sequence ("THD", varlen, `cu_seqlens`)
//! training pipelines.
//!
//! The vocabulary follows the project's design document: a **pack** is one row of concatenated
//! **segments**; [`SeqLens`] holds per-segment lengths and [`CuSeqlens`] their exclusive prefix
//! sums, and the two are distinct types so that one can never be passed as the other.
//! [`PackedBatch`] validates every LAYOUT rule on construction.
//!
//! # Example
//! ```
//! use thd::{CuSeqlens, SeqLens};
//! let lens = SeqLens::new(vec![3, 0, 2]);
//! let cu = lens.to_cu_seqlens()?;
//! assert_eq!(cu.as_slice(), &[0, 3, 3, 5]);
//! assert_eq!(cu.seq_lens(), lens);
//! # Ok::<(), thd::Error>(())
//! ```

pub mod attention;
pub mod collate;
pub mod cp;
pub mod error;
pub mod float;
pub mod layout;
pub mod loss;
pub mod metrics;
pub mod pack;

pub use attention::{AttnOptions, AttnShape, varlen_attention};
pub use error::{Error, Result};
pub use float::Float;
pub use layout::{CuSeqlens, LabelConvention, PackedBatch, PackedBatchParts, SeqLens};
pub use loss::{LossSum, packed_cross_entropy};
pub use metrics::{BatchWork, ModelDims};
pub use pack::Packer;

/// Label value that loss functions ignore (PyTorch's `ignore_index` default).
pub const IGNORE_INDEX: i64 = -100;
