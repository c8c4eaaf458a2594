//! The `thdcheck` command as a library function (the binary's `main` and the tests call it): the
//! subcommands' definitions (`cli`), `check`, `profile` and `selfcheck`; `fuzz` and `metrics`
//! are the engine crate's [`engine::fuzz`] and [`engine::metrics_cmd`], which the Python package
//! calls in-process too.
//!
//! Exit codes: **0** every check passed; **1** a check or invariant failed; **2** usage, config
//! or I/O error (clap's own usage errors too).

mod check;
pub mod cli;
mod profile;
mod selfcheck;
mod suggest;

use std::ffi::OsString;

use clap::Parser;
use cli::{Cli, Command};

/// Runs the command line `argv` (the program name first) and returns the exit code, printing
/// as the `thdcheck` binary prints. `--help` and `--version` print and return 0; a usage error
/// prints clap's message and returns 2.
///
/// # Example
/// ```
/// assert_eq!(thdcheck::command::main(["thdcheck", "--version"]), 0);
/// assert_eq!(thdcheck::command::main(["thdcheck", "no-such-command"]), 2);
/// ```
pub fn main<I, T>(argv: I) -> u8
where
    I: IntoIterator<Item = T>,
    T: Into<OsString> + Clone,
{
    let cli = match Cli::try_parse_from(argv) {
        Ok(cli) => cli,
        Err(e) => {
            let _ = e.print();
            return if e.use_stderr() { 2 } else { 0 };
        }
    };
    let outcome = match cli.command {
        Command::Selfcheck { seed, cases, zoo } => {
            selfcheck::run(seed, cases, zoo).map(|ok| if ok { 0 } else { 1 })
        }
        Command::Check(args) => check::run(&args),
        Command::Fuzz(args) => engine::fuzz::run(&args),
        Command::Metrics(args) => engine::metrics_cmd::run(&args),
        Command::Profile(cmd) => profile::run(&cmd),
    };
    match outcome {
        Ok(code) => code,
        Err(err) => {
            eprintln!("thdcheck: error: {err:#}");
            2
        }
    }
}
