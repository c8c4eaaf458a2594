//! The `thdcheck` command as a library: its subcommands ([`command::main`], which the binary's
//! `main` calls), `check`'s arguments ([`args`]), the expected verdicts of a directory
//! ([`expect`]) and the `--html` page ([`render`]). It holds no reading, judging or fuzzing of its
//! own: it wires the library crates, as ripgrep's `core` wires `grep-searcher` and
//! `grep-printer`, and each is named where it is used (no re-exports):
//!
//! ```text
//! reader   read a batch in its stack's format, run the rules on it   reader::check_file, reader::tensors
//! rules    the rules and their registry                              rules::checks::RULES
//! engine   what `fuzz` and `metrics` run (the Python package too)     engine::fuzz::run, engine::metrics_cmd::run
//! ```

pub mod args;
pub mod command;
pub mod expect;
pub mod render;
