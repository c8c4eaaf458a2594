//! `thdcheck`: the command.
//!
//! Exit codes (documented here and in `--help`):
//! - **0** every check passed;
//! - **1** a check or invariant failed;
//! - **2** usage, config or I/O error (clap's own usage errors also exit 2).

use std::process::ExitCode;

fn main() -> ExitCode {
    restore_sigpipe();
    ExitCode::from(thdcheck::command::main(std::env::args_os()))
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
