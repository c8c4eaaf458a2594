//! Running the `thdcheck` binary as a user runs it, from the repository root: the helpers the
//! integration tests share (`#[path = "support/run.rs"] mod run;`).

#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// The repository root.
pub fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// `thdcheck ARGS…` from the repository root.
pub fn thdcheck<I, S>(args: I) -> Output
where
    I: IntoIterator<Item = S>,
    S: AsRef<std::ffi::OsStr>,
{
    Command::new(env!("CARGO_BIN_EXE_thdcheck"))
        .args(args)
        .current_dir(repo())
        .output()
        .expect("the thdcheck binary runs")
}

/// Its standard output.
pub fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// Its standard error.
pub fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// Its exit code (never killed by a signal).
pub fn code(o: &Output) -> i32 {
    o.status.code().expect("exited, not killed")
}

/// Both streams, for messages.
pub fn text(o: &Output) -> String {
    format!("{}{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr))
}

/// Runs and asserts the exit code, printing both streams on a mismatch; never a panic.
pub fn run_expect(args: &[&str], want: i32) -> Output {
    let o = thdcheck(args);
    assert_eq!(
        code(&o),
        want,
        "thdcheck {args:?}\nstdout:\n{}\nstderr:\n{}",
        stdout(&o),
        stderr(&o)
    );
    assert!(!text(&o).contains("panicked"), "{}", text(&o));
    o
}

/// `thdcheck fuzz ARGS…` (with `--json`) expecting exit `want`: its report.
pub fn fuzz_json(args: &[&str], want: i32) -> serde_json::Value {
    let o = run_expect(&[&["fuzz"][..], args].concat(), want);
    serde_json::from_slice(&o.stdout).unwrap_or_else(|e| panic!("{e}: {}", text(&o)))
}

/// An example adapter's path, relative to the repository root.
pub fn example_adapter(name: &str) -> String {
    format!("adapters/python/examples/{name}.py")
}
