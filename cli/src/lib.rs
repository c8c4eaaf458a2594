//! `thdcheck` as a library: read a packed batch that a Python collator dumped with
//! `safetensors.torch.save_file`, understand its dialect, and check every invariant the file
//! can prove on its own. The `thdcheck` command, the fuzz target and the benchmarks use it.
//!
//! ```text
//! bytes ──tensors::BatchFile──▶ dialect::parse ──▶ [pack::BatchData] ──properties::checks──▶ report::FileReport
//!        (Error: exit 2)                                          (violations: exit 1)
//! ```
//!
//! # Example
//! ```
//! use thdcheck::tensors::write_ints;
//! use thdcheck::{CheckOptions, ReadOptions, check_bytes};
//! // Two documents whose position ids do not restart.
//! let bytes = write_ints(
//!     &[
//!         ("input_ids", vec![1, 5], vec![5, 6, 7, 8, 9]),
//!         ("labels", vec![1, 5], vec![-100, 6, 7, -100, 9]),
//!         ("position_ids", vec![1, 5], vec![0, 1, 2, 3, 4]),
//!         ("cu_seq_lens_q", vec![3], vec![0, 3, 5]),
//!     ],
//!     &[],
//! )?;
//! let report = check_bytes(bytes, &ReadOptions::default(), &CheckOptions::default())?;
//! assert_eq!(report.violated(), vec!["position-ids"]);
//! # Ok::<(), thdcheck::Error>(())
//! ```

pub mod args;
pub mod checks;
pub mod command;
pub mod dialect;
pub mod error;
pub mod expect;
pub mod files;
pub mod fuzz;
pub mod loggers;
pub mod metrics_cmd;
pub mod pack;
pub mod profile;
pub mod protocol;
pub mod report;
pub mod shards;
pub mod tensors;
pub mod words;

pub use checks::CheckOptions;
pub use dialect::{Dialect, ReadOptions};
pub use error::{Error, Result};
pub use report::FileReport;

/// Parses and checks the bytes of one batch file.
///
/// # Errors
/// Any [`Error`]: the file could not be read or understood (exit code 2).
pub fn check_bytes(bytes: Vec<u8>, read: &ReadOptions, opts: &CheckOptions) -> Result<FileReport> {
    check_file(tensors::BatchFile::from_bytes(bytes)?, read, opts)
}

/// Checks one batch, however its tensors are held ([`tensors::BatchFile::from_buffers`] for
/// tensors in memory).
///
/// # Errors
/// Any [`Error`]: the batch could not be understood (exit code 2).
pub fn check_file(
    file: tensors::BatchFile,
    read: &ReadOptions,
    opts: &CheckOptions,
) -> Result<FileReport> {
    let opts = checks::with_metadata(*opts, file.metadata())?;
    let parsed = dialect::parse(file, read)?;
    let opts = checks::with_profile(opts, parsed.profile.as_deref());
    Ok(FileReport::new(&parsed, &opts))
}
