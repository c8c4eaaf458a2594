//! `thdcheck`: the command.
//!
//! Exit codes (documented here and in `--help`):
//! - **0** every check passed;
//! - **1** a check or invariant failed;
//! - **2** usage, config or I/O error (clap's own usage errors also exit 2).

use std::process::ExitCode;

use clap::Parser;

mod check_cmd;
mod cli;
mod selfcheck;

use cli::{Cli, Command};

fn main() -> ExitCode {
    restore_sigpipe();
    let cli = Cli::parse();
    let outcome = match cli.command {
        Command::Selfcheck { seed, cases, zoo } => {
            selfcheck::run(seed, cases, zoo).map(|ok| if ok { 0 } else { 1 })
        }
        Command::Check(args) => check_cmd::run(&args),
        Command::Fuzz(args) => thdcheck::fuzz::run(&args),
        Command::Metrics(args) => thdcheck::metrics_cmd::run(&args),
    };
    match outcome {
        Ok(code) => ExitCode::from(code),
        Err(err) => {
            eprintln!("thdcheck: error: {err:#}");
            ExitCode::from(2)
        }
    }
}

/// Rust ignores SIGPIPE, so `thdcheck check dir | head` would panic in `println!` once `head`
/// exits. Restoring the default action makes the command end quietly, as any Unix filter does.
#[cfg(unix)]
fn restore_sigpipe() {
    // SAFETY: called first thing in `main`, before any thread exists; SIG_DFL is a valid action.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    }
}

#[cfg(not(unix))]
fn restore_sigpipe() {}
