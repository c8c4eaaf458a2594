//! What `thdcheck fuzz` and `thdcheck metrics` run, as a library. The `thdcheck` command and the
//! Python package (`thdcheck.fuzz_packer`, `thdcheck.metrics`, …) both call it, so an in-process
//! run and the command give the same verdict on the same input.
//!
//! ```text
//! args ──▶ fuzz::run / fuzz::run_in_process ──▶ properties' strategies draw requests
//!            │                                  ──protocol──▶ the adapter (a process or a callback)
//!            └─▶ the registry's judges (rules::checks) ──▶ a report, exit 0 / 1 / 2
//! args ──▶ metrics_cmd::run / record_json ──▶ golden's record of a recipe, beside what a logger logged
//! ```
//!
//! Batches are read by the `reader` crate and judged by the `rules` crate (each crate named
//! where it is used: no re-exports); nothing here decides a verdict of its own.

pub mod args;
pub mod files;
pub mod fuzz;
pub mod loggers;
pub mod metrics_cmd;
pub mod protocol;
