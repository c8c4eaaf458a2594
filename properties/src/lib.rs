//! `properties`: the gate. Every invariant of `DESIGN.md` as a check on plain data, the
//! proptest strategies that generate cases for them, the subjects (the code under test: `thd`'s
//! pipelines, a zoo variant, later a subprocess adapter), and the bug zoo that shows each
//! property can fail.
//!
//! - [`checks`]: one function per invariant, plain data in, [`Violation`] out.
//! - [`strategies`]: `arb_*` generators (sequence-length multisets, CP sizes, masks, DPO pairs,
//!   packer streams, model dims).
//! - [`subjects`]: a trait per pipeline stage, the `thd` reference implementation of each, and
//!   the `run_*` functions that drive a subject on a generated case and check the result.
//! - [`harness`]: `check_packer`, the generic packer harness, and exact OPT for small instances.
//! - `zoo` (tests, or feature `zoo`): buggy subjects reproducing the historical bug classes.
//!
//! # Example
//! ```
//! use properties::checks::{IntSlice, LayoutView, check_layout}; // the rules crate, re-exported
//! let batch = LayoutView {
//!     num_tokens: 5,
//!     cu_seqlens: IntSlice::from(&[0, 3, 5]),
//!     position_ids: Some(IntSlice::from(&[0, 1, 2, 3, 4])), // not reset at the second document
//!     ..Default::default()
//! };
//! let v = check_layout(&batch).unwrap_err();
//! assert_eq!(v.id, "position-ids");
//! assert_eq!(
//!     v.to_string(),
//!     "LAYOUT: position ids restart at each segment start\n  at: segment 1, token 3, `position_ids`\n  \
//!      expected: 0\n  got: 3\n  note: offset 0 within segment 1 (previous position 2); 1 segment not restarting"
//! );
//! ```

/// The rules and their registry (the `rules` crate), where the property tests and the zoo find
/// them as `properties::checks`.
pub use rules::checks;
pub mod harness;
#[cfg(any(test, feature = "zoo"))]
pub mod minimal;
pub mod selfcheck;
pub mod strategies;
pub mod subjects;
#[cfg(any(test, feature = "zoo"))]
pub mod zoo;

pub use rules::{Checked, Invariant, Location, Verdict, Violation};

#[cfg(test)]
mod attn_props;
#[cfg(test)]
mod checks_props;
#[cfg(test)]
mod cp_props;
#[cfg(test)]
mod dpo_props;
#[cfg(test)]
mod formats_props;
#[cfg(test)]
mod layout_differential_props;
#[cfg(test)]
mod layout_props;
#[cfg(test)]
mod loss_props;
#[cfg(test)]
mod metrics_props;
#[cfg(test)]
mod packer_props;
#[cfg(test)]
mod packer_sm_props;
#[cfg(test)]
mod proof_props;
#[cfg(test)]
mod quickcheck_props;
#[cfg(test)]
mod readme_table;
#[cfg(test)]
mod zoo_props;
