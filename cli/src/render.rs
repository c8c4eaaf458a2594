//! What `--html` writes for the command's outcomes: the pictures are drawn by
//! `reader::picture` (which the Python package shares); this module only hands it each file's
//! result and verdict line, as the text report does.

use std::io::Write;

use reader::FileReport;
use reader::picture::{html, svg};

/// A file's section of the `check --html` page: its picture and text report, or its error.
///
/// # Errors
/// The writer's.
pub fn check_section(
    out: &mut dyn Write,
    name: &str,
    result: &Result<FileReport, reader::Error>,
    verdict: &str,
    causal: bool,
) -> std::io::Result<()> {
    match result {
        Ok(r) => {
            let passed = (!r.violated().is_empty() || r.checked()).then(|| r.violated().is_empty());
            let picture = svg::file(r, causal);
            let text = r.text(name, causal);
            html::section(out, name, verdict, passed, Some(&picture), &text)
        }
        Err(e) => html::section(out, name, verdict, None, None, &format!("error: {e}")),
    }
}
