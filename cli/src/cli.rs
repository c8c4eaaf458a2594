//! Command-line arguments (clap derive).

use clap::{Parser, Subcommand};

/// Check packed-sequence (THD, varlen, cu_seqlens) training pipelines against an exact oracle.
#[derive(Debug, Parser)]
#[command(name = "thdcheck", version, about, after_help = AFTER_HELP)]
pub struct Cli {
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

const AFTER_HELP: &str = "Exit codes: 0 every check passed, 1 a check or invariant failed, \
2 usage, config or I/O error.\nDocs: README.md and DESIGN.md in the repository.";

/// The subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Compare the THD fast path with the BSHD oracle on the built-in cases and print a table.
    ///
    /// Attention in f64 must match the oracle to max|Δ| ≤ 1e-12; in f32 it must satisfy the
    /// FlashAttention rule (error ≤ 2 × the naive f32 reference's error + rounding floor).
    /// The packed loss must match the oracle's per-sequence cross-entropy.
    Selfcheck {
        /// Seed for the generated q, k, v and logits.
        #[arg(long, default_value_t = 0)]
        seed: u64,
    },
}
