//! `oracle`: the truth that `thd` is checked against. Slow, obvious, f64, on candle (CPU).
//!
//! - [`attention`]: BSHD-equivalent attention — each sequence scattered into a padded batch with
//!   a key-padding mask, `softmax(QKᵀ·scale + mask)·V`, gathered back ([`varlen_attention`]).
//! - [`loss`]: cross-entropy with labels shifted within each sequence, -100 ignored, summed in
//!   f64 ([`cross_entropy`]).
//! - [`tolerance`]: the per-dtype `(rtol, atol)` table and the FlashAttention rule.
//! - [`compare`]: `assert_close` with reports that name the segment, token, head and dim.
//! - [`cases`]: named, seeded cases (`small`, `reference`, `errors`).
//!
//! The oracle never calls `thd`: it takes plain lengths (`&[u32]`) and tensors and computes its
//! own offsets, the obvious way.
//!
//! # Example
//! ```
//! use candle_core::{DType, Device};
//! let case = &oracle::cases::small()[1];
//! let x = case.inputs(0, DType::F64, &Device::Cpu)?;
//! let out = oracle::varlen_attention(&x.q, &x.k, &x.v, &case.lens_q, &case.lens_k, &case.spec())?;
//! assert_eq!(out.dims(), x.q.dims());
//! # Ok::<(), candle_core::Error>(())
//! ```

pub mod attention;
pub mod cases;
pub mod compare;
pub mod error;
pub mod loss;
pub mod tolerance;

pub use attention::{AttnSpec, varlen_attention};
pub use error::Error;
pub use loss::{CrossEntropy, cross_entropy};
pub use tolerance::Tolerance;
