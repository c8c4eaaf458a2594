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

/// One distinct failure of a failed run: its minimal case as replayed, and how it was shrunk.
pub(super) struct Shrunk {
    pub(super) replayed: Replayed,
    /// The replay's shell command.
    pub(super) replay: String,
    /// The first failure: every run up to the scan (search, shrinking, minimizer, replay);
    /// another: the runs of its shrinking, minimizer and replay (its own case included).
    pub(super) runs: u64,
    pub(super) one_minimal: bool,
    pub(super) reductions: u64,
    pub(super) hung: bool,
    /// Runs that failed another way while shrinking, counted as passing.
    pub(super) other_classes: u64,
    /// The number in the run of the case that found it, for a failure after the first (which
    /// the header's passing cases place).
    pub(super) case: Option<u64>,
}

/// A run that failed: each distinct failure shrunk, and what else the scan found.
pub(super) struct Failed {
    /// The distinct failures, the first found first; at most `runner::MAX_DISTINCT`.
    pub(super) failures: Vec<Shrunk>,
    /// The distinct classes met beyond those, not shrunk: class → cases.
    pub(super) beyond: BTreeMap<String, u64>,
    /// The runs of the cases after the first failure (the rest of `--cases`).
    pub(super) continued: u64,
    /// Why those cases stopped early, if they did for crashes.
    pub(super) stopped: Option<String>,
    /// The scan's runs.
    pub(super) scanned: u64,
    /// Whether the target lists every reduction (the report then says if the case is
    /// 1-minimal).
    pub(super) minimizes: bool,
    /// The case was the one of `--request`.
    pub(super) given: bool,
    /// The other failing classes the scan found: class → (cases, detail).
    pub(super) also: BTreeMap<String, (u64, String)>,
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
pub(super) fn write_fail(out: &mut dyn Write, h: &Header<'_>, f: &Failed) -> Result<()> {
    if h.args.json || h.args.html.is_some() {
        write_doc(out, h.args, &fail_doc(h, f))?;
    }
    if !h.args.json {
        write_fail_text(out, h, f)?;
    }
    Ok(())
}

/// A failure's case, answer and replay, as the JSON document's `"failure"` holds them.
fn failure_doc(s: &Shrunk) -> Value {
    let Replayed { requests, failure, shrunk_as, .. } = &s.replayed;
    let request = requests.first().map(String::as_str).unwrap_or_default();
    let mut doc = json!({
        "kind": failure.kind, "checks": failure.checks, "detail": failure.detail,
        "request": serde_json::from_str::<Value>(request).unwrap_or(Value::Null),
        "response": failure.response.as_deref().map(clip), "replay": s.replay,
    });
    if requests.len() > 1 {
        doc["requests"] = requests
            .iter()
            .map(|r| serde_json::from_str::<Value>(r).unwrap_or(Value::Null))
            .collect();
    }
    if let Some(g) = shrunk_as {
        doc["shrunk_as"] = json!({
            "kind": g.kind, "checks": g.checks, "detail": g.detail,
            "response": g.response.as_deref().map(clip),
        });
    }
    doc
}

/// The JSON document of a failed run: the first failure as `"failure"` (with its runs and
/// minimality at the top), and every distinct failure in `"failures"`, each with its class,
/// where it was found and how it was shrunk.
fn fail_doc(h: &Header<'_>, f: &Failed) -> Value {
    let args = h.args;
    let first = &f.failures[0];
    let one_minimal = |s: &Shrunk| (f.minimizes && !f.given).then_some(s.one_minimal);
    let failures: Vec<Value> = f
        .failures
        .iter()
        .map(|s| {
            let mut d = failure_doc(s);
            let class = s.replayed.shrunk_as.as_ref().unwrap_or(&s.replayed.failure).signature();
            d["class"] = json!(class.distinct());
            d["case"] = json!(s.case.unwrap_or(h.passed));
            d["runs"] = json!(s.runs);
            d["one_minimal"] = json!(one_minimal(s));
            d["reductions"] = json!(s.reductions);
            d["other_failures_ignored"] = json!(s.other_classes);
            d
        })
        .collect();
    let mut doc = json!({
        "version": 1, "target": h.kind, "command": args.command, "result": "fail",
        "cases": h.passed, "seed": args.seed, "elapsed_s": h.elapsed.as_secs_f64(),
        "runs": first.runs, "scan_runs": f.scanned,
        "failure": failure_doc(first),
        "other_failures_ignored": first.other_classes,
        "one_minimal": one_minimal(first),
        "reductions": first.reductions,
        "also_failing": f.also.iter().map(|(class, (n, detail))| json!({
            "class": class, "cases": n, "detail": clip(detail),
        })).collect::<Vec<_>>(),
        "failures": failures,
        "continued_runs": f.continued,
    });
    if let Some(why) = &f.stopped {
        doc["continued_stopped"] = json!(why);
    }
    if !f.beyond.is_empty() {
        doc["not_shrunk"] =
            f.beyond.iter().map(|(class, n)| json!({"class": class, "cases": n})).collect();
    }
    doc
}

/// How the failing case came to be the one reported (the headline's end).
fn how_shrunk(f: &Failed, s: &Shrunk) -> String {
    if f.given {
        return "the request of --request, judged as given".to_owned();
    }
    if s.hung {
        return "not shrunk (every run of a hang waits the full timeout)".to_owned();
    }
    let others = match s.other_classes {
        0 => String::new(),
        n => format!(
            " ({n} run{} that failed another way counted as passing)",
            if n == 1 { "" } else { "s" }
        ),
    };
    let minimal = match (f.minimizes, s.one_minimal) {
        (false, _) => String::new(),
        (true, true) => format!(
            ", 1-minimal after {} reduction{}",
            s.reductions,
            if s.reductions == 1 { "" } else { "s" }
        ),
        (true, false) => {
            format!(", {} reductions, not 1-minimal: --max-shrink-runs spent", s.reductions)
        }
    };
    let Replayed { failure, shrunk_as, .. } = &s.replayed;
    format!(
        "shrunk to a minimal case in {} runs{minimal}, keeping the failure `{}`{others}",
        s.runs,
        shrunk_as.as_ref().map_or_else(|| failure.signature(), Failure::signature)
    )
}

/// The text report of a failed run: each distinct failure as a run with one failure reports
/// it, under a line that counts them when there are several.
fn write_fail_text(out: &mut dyn Write, h: &Header<'_>, f: &Failed) -> Result<()> {
    let args = h.args;
    writeln!(out, "thdcheck fuzz {}: {}", h.kind, h.command)?;
    let n = f.failures.len();
    if n > 1 {
        let classes: Vec<String> = f
            .failures
            .iter()
            .map(|s| {
                let g = s.replayed.shrunk_as.as_ref().unwrap_or(&s.replayed.failure);
                format!("`{}`", g.signature().distinct())
            })
            .collect();
        writeln!(
            out,
            "  found {n} distinct failures (seed {}), each shrunk on its own: {}",
            args.seed,
            classes.join(", ")
        )?;
    }
    for (i, s) in f.failures.iter().enumerate() {
        let which = if n > 1 { format!(" ({} of {n})", i + 1) } else { String::new() };
        let at = s.case.map_or_else(
            || format!("after {} passing cases", h.passed),
            |c| format!("at case {c}"),
        );
        writeln!(out, "  FAILED{which} {at} (seed {}); {}:", args.seed, how_shrunk(f, s))?;
        write_case(out, s)?;
    }
    if !f.beyond.is_empty() {
        let listed: Vec<String> =
            f.beyond.iter().map(|(class, k)| format!("`{class}` ({k} cases)")).collect();
        writeln!(
            out,
            "  {:<14}{} more distinct failure{} beyond the {} shrunk: {}",
            "not shrunk",
            f.beyond.len(),
            if f.beyond.len() == 1 { "" } else { "s" },
            n,
            listed.join(", ")
        )?;
    }
    if let Some(why) = &f.stopped {
        writeln!(out, "  {:<14}{why}", "more cases")?;
    }
    write_scan(out, h, f)
}

/// A failure's lines: what failed, the replay's note, the requests, the answer, the replay.
fn write_case(out: &mut dyn Write, s: &Shrunk) -> Result<()> {
    let Replayed { requests, failure, note, .. } = &s.replayed;
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
    writeln!(out, "  {:<14}{}", "replay", s.replay)?;
    Ok(())
}

/// The scan's line, and each other failing class it found.
fn write_scan(out: &mut dyn Write, h: &Header<'_>, f: &Failed) -> Result<()> {
    let args = h.args;
    let failure = &f.failures[0].replayed.failure;
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
    for (class, (n, detail)) in &f.also {
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
