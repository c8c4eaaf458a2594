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
pub mod contract;
mod violation;
pub mod words;

pub use violation::{Checked, Invariant, Location, Verdict, Violation};

/// [`MAX_CP_SIZE`] as a literal, for the messages that must be a `&'static str`
/// (`concat!("at most ", rules::max_cp_size!())`) and for clap help texts.
#[macro_export]
macro_rules! max_cp_size {
    () => {
        65536
    };
}

/// The largest context-parallel size thdcheck accepts anywhere: a file's `cp_size` tensor, its
/// `__metadata__`, `--cp-size`, the Python binding's `cp_size=`. No real job comes near it; it
/// bounds what reading a CP group allocates.
///
/// # Example
/// ```
/// assert_eq!(rules::MAX_CP_SIZE, 1 << 16);
/// assert_eq!(concat!("1..=", rules::max_cp_size!()), "1..=65536");
/// ```
pub const MAX_CP_SIZE: u32 = max_cp_size!();
