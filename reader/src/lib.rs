//! The reader of thdcheck: a packed batch that a Python collator dumped with
//! `safetensors.torch.save_file` (or handed over in memory), read in its stack's format into the
//! one view the rules of `rules::checks` judge. The `thdcheck` command, its fuzzers, the
//! benchmarks and the Python package all read batches through this crate.
//!
//! ```text
//! bytes ──tensors::BatchFile──▶ formats::parse ──▶ [pack::BatchData] ──rules::checks──▶ report::FileReport
//!        (Error: exit 2)        (one module per            (the view)       (rules: ok / violated / noted)
//!                                format, profile facts)
//! ```
//!
//! A stack's contract (how it shifts labels, where it pads, what the kernel reads) is a
//! [`profile::Profile`], data a user can write; a packing format is a module of [`formats`]
//! behind the [`formats::Format`] trait, tried in the order of [`formats::FORMATS`]. A reader
//! never decides a verdict: what it finds that is worth judging is handed to the rules.
//!
//! # Example
//! ```
//! use reader::tensors::write_ints;
//! use reader::{CheckOptions, ReadOptions, check_bytes};
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
//! assert_eq!(report.format, "cu-seq-lens");
//! # Ok::<(), reader::Error>(())
//! ```

pub mod checks;
pub mod error;
pub mod facts;
pub mod formats;
pub mod pack;
pub mod picture;
pub mod profile;
pub mod report;
pub mod shards;
pub mod tensors;

pub use checks::CheckOptions;
pub use error::{Error, Result};
pub use formats::{Dialect, ReadOptions};
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
    // The batch rules' options are facts like any other: one layer over the file's metadata
    // and the profile.
    let mut read = read.clone();
    read.stated = read.stated.or(checks::option_facts(opts));
    let dialect = read.dialect.or_else(|| formats::detect(file.keys()).ok());
    let parsed = match formats::parse(file, &read) {
        // Offsets that contradict the batch are its `offsets` violation, not a file that
        // cannot be read: a CI script tells a broken batch (exit 1) from a misconfigured gate.
        Err(Error::Offsets { key, values, tokens, .. }) => {
            return Ok(FileReport {
                dialect: dialect.unwrap_or(Dialect::Hf),
                format: "offsets",
                cp_shard: None,
                packs: vec![checks::broken_offsets_report(&key, &values, tokens)],
                checks: Vec::new(),
                notes: Vec::new(),
                contract: Vec::new(),
                unread_keys: Vec::new(),
                map_missing: Vec::new(),
            });
        }
        other => other?,
    };
    let opts = checks::check_options(&parsed.facts.contract);
    // The pictures (`--html`) are gathered from the packs alone, on a thread of their own
    // beside the rules: the page costs the check no more wall time than its drawing.
    let (mut report, pictures) = std::thread::scope(|s| {
        let pictures = (read.picture && parsed.cp_shard.is_none()).then(|| {
            s.spawn(|| {
                parsed.packs.iter().map(|p| picture::PackPicture::of(p, &opts)).collect::<Vec<_>>()
            })
        });
        let report = FileReport::new(&parsed, &opts);
        (report, pictures.map(|h| h.join()))
    });
    if let Some(pictures) = pictures {
        let pictures = pictures.unwrap_or_else(|e| std::panic::resume_unwind(e));
        for (p, pic) in report.packs.iter_mut().zip(pictures) {
            p.picture = Some(pic);
        }
    }
    Ok(report)
}

/// Checks a CP group read by [`shards::read_group`]: its reassembled pack under the options
/// over the facts the group was read under, or, when the ranks lost tokens, what can be judged
/// of them (`cp-shard`); reported as one file (`DIR/cp-group`).
pub fn check_group(g: shards::Group, read: &ReadOptions, opts: &CheckOptions) -> FileReport {
    let pack = match g.batch {
        shards::GroupBatch::Lost { global, cp, key } => {
            checks::lost_tokens_report(&global, cp, &key)
        }
        shards::GroupBatch::Whole(pack) => {
            // The options over the facts the group was read under.
            let opts = checks::check_options(&checks::option_facts(opts).settled().or(pack.facts));
            let mut report = checks::check_pack(&pack, &opts);
            if read.picture {
                report.picture = Some(picture::PackPicture::of(&pack, &opts));
            }
            report
        }
    };
    FileReport {
        dialect: g.dialect,
        format: g.format,
        cp_shard: None,
        packs: vec![pack],
        checks: Vec::new(),
        notes: Vec::new(),
        contract: g.facts.in_force(),
        unread_keys: Vec::new(),
        map_missing: Vec::new(),
    }
}
