//! `thdcheck` as a library: read a packed batch that a Python collator dumped with
//! `safetensors.torch.save_file`, read it in its stack's format, and check every invariant the file
//! can prove on its own. The `thdcheck` command, the fuzz target and the benchmarks use it.
//!
//! ```text
//! bytes ──tensors::BatchFile──▶ formats::parse ──▶ [pack::BatchData] ──rules::checks──▶ report::FileReport
//!        (Error: exit 2)                                          (violations: exit 1)
//! ```
//!
//! Reading and the rules' glue live in the `reader` crate, and what `fuzz` and `metrics` run in
//! the `engine` crate, both re-exported here under the names the command has always used
//! ([`tensors`], [`formats`], [`profile`], [`pack`], [`report`], [`fuzz`], ...).
//!
//! # Example
//! ```
//! use thdcheck::tensors::write_ints;
//! use thdcheck::{CheckOptions, ReadOptions, check_bytes};
//! let bytes = write_ints(
//!     &[("input_ids", vec![1, 4], vec![5, 6, 7, 8]), ("cu_seq_lens_q", vec![3], vec![0, 2, 4])],
//!     &[],
//! )?;
//! let report = check_bytes(bytes, &ReadOptions::default(), &CheckOptions::default())?;
//! assert!(report.violated().is_empty());
//! # Ok::<(), thdcheck::Error>(())
//! ```

pub mod args;
pub mod command;
pub mod expect;
pub mod render;

// `fuzz` and `metrics` run in the engine crate, which the Python package calls too.
pub use engine::{files, fuzz, loggers, metrics_cmd, protocol};

pub use reader::{
    CheckOptions, Dialect, Error, FileReport, ReadOptions, Result, check_bytes, check_file, checks,
    error, formats, pack, profile, report, shards, tensors, words,
};
