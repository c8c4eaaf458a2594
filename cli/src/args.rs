//! `check`'s command-line arguments (clap derive). The options of `fuzz`, `metrics` and of
//! reading a batch are the engine's ([`engine::args`], shared with the Python package).

use std::path::PathBuf;

use clap::Args;
use engine::args::BatchOpts;

/// `thdcheck check --help`: exit codes.
pub const CHECK_AFTER_HELP: &str = "Exit codes: 0 every file got its expected verdict (pass unless \
an expected.toml lists it), 1 some file violated an invariant (or passed when it was expected to \
fail), 2 some file could not be read or understood.\nDump a batch: see docs/batch-files.md.";

/// Options of `thdcheck check`.
#[derive(Debug, Args)]
pub struct CheckArgs {
    /// Batch files or directories (searched recursively for *.safetensors).
    #[arg(required = true, value_name = "FILE|DIR")]
    pub paths: Vec<PathBuf>,
    // How to read and check each batch (shared with `fuzz collator`).
    /// How the batches are read and checked.
    #[command(flatten)]
    pub batch: BatchOpts,
    /// Expected verdicts (default: DIR/expected.toml for each directory argument).
    #[arg(long, value_name = "FILE")]
    pub expect: Option<PathBuf>,
    /// Ignore expected.toml files: every file must pass.
    #[arg(long, conflicts_with = "expect")]
    pub no_expect: bool,
    /// One JSON document on stdout instead of the text report.
    #[arg(long)]
    pub json: bool,
    /// Only the verdict line of each file and the summary.
    #[arg(short, long)]
    pub quiet: bool,
    /// Fail (exit 1) on what is otherwise a warning: a file no rule applied to, a file whose
    /// labels were not found, a profile `[map]` source that no file has.
    #[arg(long)]
    pub strict: bool,
    /// Also write one self-contained HTML page (inline SVG and CSS, opens offline) drawing
    /// every file's rows as strips of tokens, each violation marked at its token.
    #[arg(long, value_name = "FILE")]
    pub html: Option<PathBuf>,
}
