//! The report of a run, the one renderer of `thdcheck fuzz`'s outcomes: the JSON document
//! (`--json`), the HTML page drawn from it (`--html`), and the text report.

use std::collections::BTreeMap;
use std::io::Write;
use std::time::Duration;

use anyhow::{Context, Result};
use serde_json::{Value, json};

use super::replay::Replayed;
use super::{Failure, clip, picture};
use crate::args::FuzzArgs;

/// What every report states: the run.
pub(super) struct Header<'a> {
    /// The target's request kind.
    pub(super) kind: &'static str,
    pub(super) args: &'a FuzzArgs,
    /// The adapter's command line, quoted for a shell.
    pub(super) command: &'a str,
    /// Cases that passed before the first failure (all of them in a pass).
    pub(super) passed: u64,
    /// How long the search took.
    pub(super) elapsed: Duration,
}

/// A run whose every case held.
pub(super) struct Passed<'a> {
    pub(super) adapter_starts: usize,
    /// What the passing cases measured (a packer's efficiency): text line and JSON.
    pub(super) summary: Option<(String, Value)>,
    /// The rules the run judged.
    pub(super) invariants: String,
    /// What `--ignore` let pass, per class.
    pub(super) ignored: &'a BTreeMap<String, u64>,
}

/// A run that failed: the minimal case as replayed, and what else the scan found.
pub(super) struct Failed<'a> {
    pub(super) replayed: &'a Replayed,
    /// The replay's shell command.
    pub(super) replay: &'a str,
    /// Every run up to the scan (search, shrinking, minimizer, replay).
    pub(super) runs: u64,
    /// The scan's runs.
    pub(super) scanned: u64,
    /// Whether the target lists every reduction (the report then says if the case is
    /// 1-minimal).
    pub(super) minimizes: bool,
    pub(super) one_minimal: bool,
    pub(super) reductions: u64,
    /// The case was the one of `--request`.
    pub(super) given: bool,
    pub(super) hung: bool,
    /// Runs that failed another way while shrinking, counted as passing.
    pub(super) other_classes: u64,
    /// The other failing classes the scan found: class → (cases, detail).
    pub(super) also: &'a BTreeMap<String, (u64, String)>,
    /// The runs the scan was given, and what the budget left for it.
    pub(super) scan_runs: u64,
    pub(super) budget_left: u64,
}

/// Writes the JSON document and the HTML page, as the options ask.
fn write_doc(out: &mut dyn Write, args: &FuzzArgs, doc: &Value) -> Result<()> {
    if let Some(path) = &args.html {
        picture::write_page(path, doc)
            .with_context(|| format!("--html {}: cannot write it", path.display()))?;
    }
    if args.json {
        writeln!(out, "{}", serde_json::to_string_pretty(doc)?)?;
    }
    Ok(())
}

/// The report of a passing run.
///
/// # Errors
/// The report or the page cannot be written.
pub(super) fn write_pass(out: &mut dyn Write, h: &Header<'_>, p: &Passed<'_>) -> Result<()> {
    let args = h.args;
    let rate = h.passed as f64 / h.elapsed.as_secs_f64().max(1e-9);
    if args.json || args.html.is_some() {
        let mut doc = json!({
            "version": 1, "target": h.kind, "command": args.command, "result": "pass",
            "cases": h.passed, "seed": args.seed, "elapsed_s": h.elapsed.as_secs_f64(),
            "cases_per_s": rate, "adapter_starts": p.adapter_starts,
        });
        if let Some((_, v)) = &p.summary {
            doc["summary"] = v.clone();
        }
        if !p.ignored.is_empty() {
            doc["ignored"] = json!(*p.ignored);
        }
        write_doc(out, args, &doc)?;
    }
    if args.json {
        return Ok(());
    }
    writeln!(
        out,
        "thdcheck fuzz {}: {}\n  {} cases (seed {}) in {:.2} s, {:.0} cases/s: every invariant held ({})",
        h.kind,
        h.command,
        h.passed,
        args.seed,
        h.elapsed.as_secs_f64(),
        rate,
        p.invariants
    )?;
    if let Some((line, _)) = &p.summary {
        writeln!(out, "  {line}")?;
    }
    for (class, n) in p.ignored {
        writeln!(
            out,
            "  ignored: {n} case{} failed as `{class}` (--ignore), counted as passing",
            if *n == 1 { "" } else { "s" }
        )?;
    }
    Ok(())
}

/// The report of a failed run.
///
/// # Errors
/// The report or the page cannot be written.
pub(super) fn write_fail(out: &mut dyn Write, h: &Header<'_>, f: &Failed<'_>) -> Result<()> {
    if h.args.json || h.args.html.is_some() {
        write_doc(out, h.args, &fail_doc(h, f))?;
    }
    if !h.args.json {
        write_fail_text(out, h, f)?;
    }
    Ok(())
}

/// The JSON document of a failed run.
fn fail_doc(h: &Header<'_>, f: &Failed<'_>) -> Value {
    let Replayed { requests, failure, shrunk_as, .. } = f.replayed;
    let request = requests.first().map(String::as_str).unwrap_or_default();
    let args = h.args;
    let mut doc = json!({
        "version": 1, "target": h.kind, "command": args.command, "result": "fail",
        "cases": h.passed, "seed": args.seed, "elapsed_s": h.elapsed.as_secs_f64(),
        "runs": f.runs, "scan_runs": f.scanned,
        "failure": {
            "kind": failure.kind, "checks": failure.checks, "detail": failure.detail,
            "request": serde_json::from_str::<Value>(request).unwrap_or(Value::Null),
            "response": failure.response.as_deref().map(clip), "replay": f.replay,
        },
        "other_failures_ignored": f.other_classes,
        "one_minimal": (f.minimizes && !f.given).then_some(f.one_minimal),
        "reductions": f.reductions,
        "also_failing": f.also.iter().map(|(class, (n, detail))| json!({
            "class": class, "cases": n, "detail": clip(detail),
        })).collect::<Vec<_>>(),
    });
    if requests.len() > 1 {
        doc["failure"]["requests"] = requests
            .iter()
            .map(|r| serde_json::from_str::<Value>(r).unwrap_or(Value::Null))
            .collect();
    }
    if let Some(g) = shrunk_as {
        doc["failure"]["shrunk_as"] = json!({
            "kind": g.kind, "checks": g.checks, "detail": g.detail,
            "response": g.response.as_deref().map(clip),
        });
    }
    doc
}

/// How the failing case came to be the one reported (the headline's end).
fn how_shrunk(f: &Failed<'_>) -> String {
    if f.given {
        return "the request of --request, judged as given".to_owned();
    }
    if f.hung {
        return "not shrunk (every run of a hang waits the full timeout)".to_owned();
    }
    let others = match f.other_classes {
        0 => String::new(),
        n => format!(
            " ({n} run{} that failed another way counted as passing)",
            if n == 1 { "" } else { "s" }
        ),
    };
    let minimal = match (f.minimizes, f.one_minimal) {
        (false, _) => String::new(),
        (true, true) => format!(
            ", 1-minimal after {} reduction{}",
            f.reductions,
            if f.reductions == 1 { "" } else { "s" }
        ),
        (true, false) => {
            format!(", {} reductions, not 1-minimal: --max-shrink-runs spent", f.reductions)
        }
    };
    let Replayed { failure, shrunk_as, .. } = f.replayed;
    format!(
        "shrunk to a minimal case in {} runs{minimal}, keeping the failure `{}`{others}",
        f.runs,
        shrunk_as.as_ref().map_or_else(|| failure.signature(), Failure::signature)
    )
}

/// The text report of a failed run.
fn write_fail_text(out: &mut dyn Write, h: &Header<'_>, f: &Failed<'_>) -> Result<()> {
    let args = h.args;
    let Replayed { requests, failure, note, .. } = f.replayed;
    writeln!(
        out,
        "thdcheck fuzz {}: {}\n  FAILED after {} passing cases (seed {}); {}:",
        h.kind,
        h.command,
        h.passed,
        args.seed,
        how_shrunk(f)
    )?;
    writeln!(out, "  {:<14}{}", failure.kind, failure.detail.replace('\n', "\n                "))?;
    if let Some(n) = note {
        writeln!(out, "  {:<14}{}", "note", n.replace('\n', "\n                "))?;
    }
    for r in requests {
        writeln!(out, "  {:<14}{r}", "request")?;
    }
    if let Some(r) = &failure.response {
        writeln!(out, "  {:<14}{}", "response", clip(r))?;
    }
    writeln!(out, "  {:<14}{}", "replay", f.replay)?;
    let scan = if f.scanned > 0 {
        format!(
            "{} runs of fresh cases for other failing classes (within --max-shrink-runs){}",
            f.scanned,
            if f.also.is_empty() { ": none found" } else { "" }
        )
    } else if args.first_failure {
        "0 runs: --first-failure".to_owned()
    } else if args.also_failing == 0 {
        "0 runs: --also-failing 0".to_owned()
    } else if f.scan_runs == 0 && f.budget_left > 0 {
        format!("0 runs: no scan for other classes after a `{}`", failure.kind)
    } else {
        "0 runs: --max-shrink-runs spent".to_owned()
    };
    writeln!(out, "  {:<14}{scan}", "scan")?;
    for (class, (n, detail)) in f.also {
        writeln!(
            out,
            "  {:<14}`{class}` in {n} of {} more cases (shrink it with --ignore '{}'): {}",
            "also failing",
            f.scanned,
            failure.signature(),
            clip(detail).lines().next().unwrap_or_default()
        )?;
    }
    Ok(())
}
