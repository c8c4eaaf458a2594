//! The command line: the subcommands; `check`'s arguments are in [`crate::args`], those of
//! `fuzz` and `metrics` in [`engine::args`] (shared with the Python package).

use clap::{Parser, Subcommand};
use engine::args::{FUZZ_AFTER_HELP, FuzzArgs, METRICS_AFTER_HELP, MetricsArgs};

use crate::args::{CHECK_AFTER_HELP, CheckArgs};

/// Check packed-sequence (THD, varlen, cu_seqlens) training pipelines against an exact oracle.
#[derive(Debug, Parser)]
#[command(name = "thdcheck", version, about, after_help = AFTER_HELP)]
pub struct Cli {
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

const AFTER_HELP: &str = "Exit codes: 0 every check passed, 1 a check or invariant failed, \
2 usage, config or I/O error.\nDocs: README.md and DESIGN.md in the repository, docs/ for the \
batch format and the adapter protocol.";

/// The subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Compare the THD fast path with the BSHD oracle on the built-in cases and print a table.
    ///
    /// Attention in f64 must match the oracle to max|Δ| ≤ 1e-12; in f32 it must satisfy the
    /// FlashAttention rule (error ≤ 2 × the naive f32 reference's error + rounding floor).
    /// The packed loss must match the oracle's per-sequence cross-entropy. Then every invariant
    /// driver of the property suites runs on thd's pipelines (`--cases` seeded cases each),
    /// with the same checks the `check` and `fuzz` commands use.
    Selfcheck {
        /// Seed for the generated q, k, v and logits and for the drivers' cases.
        #[arg(long, default_value_t = 0)]
        seed: u64,
        /// Cases per invariant driver (the property suites' drivers, on thd's pipelines).
        #[arg(long, default_value_t = 32, value_parser = clap::value_parser!(u32).range(1..=100_000))]
        cases: u32,
        /// Also run every planted bug of the zoo through its driver (4096 fixed cases each) and
        /// show that the invariant the catalogue names catches it, with the shrunk input.
        #[arg(long)]
        zoo: bool,
    },
    /// Check batches that a Python collator dumped with safetensors.torch.save_file.
    ///
    /// Reads every FILE (a directory: every .safetensors under it), detects the dialect from
    /// the keys, and checks every invariant the file can prove: offsets, max_seqlen, position
    /// ids, cross-document labels, masks, seq_idx, mock segments, DPO offsets, CP sharding.
    /// Prints a report per file and a verdict; a directory's expected.toml lists files that
    /// must fail, and with which checks.
    #[command(after_help = CHECK_AFTER_HELP)]
    Check(CheckArgs),
    /// Drive a packer, collator, CP loss or CP splitter subprocess with generated cases and
    /// shrink any failure.
    ///
    /// The adapter reads one JSON request per line on stdin and writes one JSON response per
    /// line on stdout (docs/protocol.md; adapters/python/thdcheck_adapter.py does the plumbing).
    /// Every answer is checked; a violation, crash, hang or malformed answer is shrunk to a
    /// minimal request and printed ready to replay.
    #[command(after_help = FUZZ_AFTER_HELP)]
    Fuzz(FuzzArgs),
    /// Recompute what a logger should report for a recipe (and a real batch), and compare.
    ///
    /// Prints the golden record of the recipe (tokens, attention work, FLOPs under each causal
    /// convention, TFLOP/s and MFU useful vs hardware, CP-rank counts); with --batch, the same
    /// for one dumped batch under the recipe's model and timing; with --expect, compares a
    /// Python logger's JSON (keys as in --json, nested or dotted) and exits 1 on a mismatch.
    #[command(after_help = METRICS_AFTER_HELP)]
    Metrics(MetricsArgs),
    /// List, show or suggest stack profiles: a stack's contract as data (docs/profiles.md).
    #[command(subcommand)]
    Profile(ProfileCommand),
}

/// `thdcheck profile …`.
#[derive(Debug, Subcommand)]
pub enum ProfileCommand {
    /// The built-in profiles, one line each.
    List,
    /// A profile's facts, each with the upstream file and commit it was read from.
    Show {
        /// A built-in profile's name, or a profile file.
        #[arg(value_name = "NAME|FILE")]
        profile: String,
    },
    /// Read known-good batches of a stack and print the profile they evidence, each fact
    /// marked as seen in the data or not determinable, ready to review.
    Suggest {
        /// The profile's name.
        #[arg(long, default_value = "mystack")]
        name: String,
        /// Rename a key of the files before reading, e.g. --map tokens=input_ids (repeatable):
        /// written into the suggested profile's `[map]`.
        #[arg(long = "map", value_name = "KEY=NAME", value_parser = parse_map)]
        map: Vec<(String, String)>,
        /// Known-good batch files (directories: every .safetensors under them).
        #[arg(required = true, value_name = "FILE")]
        paths: Vec<std::path::PathBuf>,
    },
}

/// `KEY=NAME`: a key in the file = the name the format reads.
fn parse_map(s: &str) -> Result<(String, String), String> {
    match s.split_once('=') {
        Some((from, to)) if !from.is_empty() && !to.is_empty() => {
            Ok((from.to_owned(), to.to_owned()))
        }
        _ => Err(format!(
            "expected KEY=NAME (a key in the file = the name the format reads), got `{s}`"
        )),
    }
}
