//! `rules`: every invariant of `DESIGN.md` as a rule judging plain data, and the one registry
//! that lists them ([`checks::RULES`]). A rule is a named part of an invariant with its message
//! and its judge; what it returns is a [`Violation`] (or an [`checks::Outcome`] for a report).
//!
//! This crate links no candle, no proptest and no oracle: the readers of batches (`reader`),
//! the command and the Python package judge with it alone. The property tests, the strategies
//! and the zoo of planted bugs that prove each rule can fail are in `properties`, which builds on
//! this crate.
//!
//! # Example
//! ```
//! use rules::checks::{IntSlice, LayoutView, check_layout};
//! let batch = LayoutView {
//!     num_tokens: 5,
//!     cu_seqlens: IntSlice::from(&[0, 3, 5]),
//!     position_ids: Some(IntSlice::from(&[0, 1, 2, 3, 4])), // not reset at the second document
//!     ..Default::default()
//! };
//! let v = check_layout(&batch).unwrap_err();
//! assert_eq!(v.id, "position-ids");
//! ```

pub mod checks;
mod violation;
pub mod words;

pub use violation::{Checked, Invariant, Location, Verdict, Violation};
