//! `thdcheck check`: walk the paths, check every batch file, print reports and a summary, and
//! turn the verdicts (against expectations) into the exit code.

use std::io::Write;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};
use serde_json::json;
use thdcheck::expect::{Expectations, Expected, matches};
use thdcheck::tensors::BatchFile;
use thdcheck::{CheckOptions, FileReport, ReadOptions, check_file};

use crate::cli::CheckArgs;

/// What happened to one file.
struct Outcome {
    path: PathBuf,
    result: Result<FileReport, thdcheck::Error>,
    expected: Expected,
    expect_source: Option<PathBuf>,
}

impl Outcome {
    fn violated(&self) -> Option<Vec<&'static str>> {
        self.result.as_ref().ok().map(FileReport::violated)
    }
    fn as_expected(&self) -> bool {
        let v = self.violated();
        matches(&self.expected, v.as_deref())
    }
}

/// Runs the command; returns the exit code.
pub fn run(args: &CheckArgs) -> Result<u8> {
    let read = args.batch.read_options();
    let opts = args.batch.check_options();
    let mut expectations: Vec<Expectations> = Vec::new();
    if let Some(e) = &args.expect {
        expectations.push(Expectations::load(e)?);
    }
    let mut files = Vec::new();
    // Subdirectories that cannot be read: reported as unreadable (exit 2), the rest checked.
    let mut unreadable_dirs = Vec::new();
    for path in &args.paths {
        let meta =
            std::fs::metadata(path).with_context(|| format!("cannot read {}", path.display()))?;
        if meta.is_dir() {
            let e = path.join(thdcheck::expect::FILE_NAME);
            // Anything named expected.toml is read: one that is a FIFO, a directory or a
            // dangling link is an error, never a silently ignored expectation.
            if !args.no_expect && args.expect.is_none() && std::fs::symlink_metadata(&e).is_ok() {
                expectations.push(Expectations::load(&e)?);
            }
            thdcheck::files::walk(path, &mut files, &mut unreadable_dirs)?;
        } else if meta.is_file() {
            files.push(path.clone());
        } else {
            bail!("{} is not a regular file or a directory (a FIFO or a device?)", path.display());
        }
    }
    for e in &expectations {
        let missing = e.missing();
        if !missing.is_empty() {
            bail!("{} lists files that do not exist: {}", e.source.display(), missing.join(", "));
        }
    }
    if files.is_empty() && unreadable_dirs.is_empty() {
        bail!(
            "no .safetensors files under {}",
            args.paths.iter().map(|p| p.display().to_string()).collect::<Vec<_>>().join(", ")
        );
    }

    let outcomes: Vec<Outcome> = files
        .into_iter()
        .map(|path| {
            let covering = expectations.iter().find(|e| e.covers(&path));
            // Read as `metrics` reads: a large file is mapped, and its 8-byte header length is
            // checked before anything else is read.
            let result = BatchFile::read(&path).and_then(|file| check_file(file, &read, &opts));
            Outcome {
                expected: covering.map_or(Expected::Pass, |e| e.expected(&path)),
                expect_source: covering.map(|e| e.source.clone()),
                path,
                result,
            }
        })
        .collect();

    let mut outcomes = outcomes;
    outcomes.extend(unreadable_dirs.into_iter().map(|(path, source)| Outcome {
        expected: Expected::Pass,
        expect_source: None,
        result: Err(thdcheck::Error::Io { path: path.clone(), source }),
        path,
    }));
    outcomes.extend(cp_groups(&outcomes, &read, &opts, &expectations));

    let unexpected_errors =
        outcomes.iter().filter(|o| !o.as_expected() && o.result.is_err()).count();
    let unexpected = outcomes.iter().filter(|o| !o.as_expected()).count();
    let code = if unexpected_errors > 0 {
        2
    } else if unexpected > 0 {
        1
    } else {
        0
    };
    let mut stdout = std::io::stdout().lock();
    if args.json {
        let doc = json!({
            "version": 1,
            "files": outcomes.iter().map(file_json).collect::<Vec<_>>(),
            "summary": summary_json(&outcomes, code),
        });
        writeln!(stdout, "{}", serde_json::to_string_pretty(&doc)?)?;
    } else {
        for o in &outcomes {
            print_text(&mut stdout, o, args)?;
        }
        print_summary(&mut stdout, &outcomes, &expectations)?;
    }
    for o in &outcomes {
        if let (Err(e), false) = (&o.result, o.as_expected()) {
            eprintln!("thdcheck: error: {}: {e}", o.path.display());
        }
    }
    Ok(code)
}

/// The CP groups among the files: shard files (`cp_rank`, `cp_size`) of one directory and one
/// CP size, reassembled and checked as one batch, reported as `DIR/cp-group`.
fn cp_groups(
    outcomes: &[Outcome],
    read: &ReadOptions,
    opts: &CheckOptions,
    expectations: &[Expectations],
) -> Vec<Outcome> {
    use std::collections::BTreeMap;
    let mut groups: BTreeMap<(PathBuf, usize), Vec<&Outcome>> = BTreeMap::new();
    for o in outcomes {
        if let Ok(FileReport { cp_shard: Some((_, size)), .. }) = &o.result {
            let dir = o.path.parent().map(Path::to_path_buf).unwrap_or_default();
            groups.entry((dir, *size)).or_default().push(o);
        }
    }
    groups
        .into_iter()
        .map(|((dir, size), members)| {
            let path = dir.join("cp-group");
            let files: Vec<PathBuf> = members.iter().map(|m| m.path.clone()).collect();
            let result = thdcheck::shards::read_group(&dir, size, &files, read).and_then(|g| {
                let pack = match g.batch {
                    thdcheck::shards::GroupBatch::Lost { global, cp, key } => {
                        thdcheck::checks::lost_tokens_report(&global, cp, &key)
                    }
                    thdcheck::shards::GroupBatch::Whole(pack) => {
                        let opts = thdcheck::checks::with_metadata(*opts, &g.metadata)?;
                        thdcheck::checks::check_pack(&pack, &opts)
                    }
                };
                Ok(FileReport {
                    dialect: g.dialect,
                    cp_shard: None,
                    packs: vec![pack],
                    checks: Vec::new(),
                    notes: Vec::new(),
                })
            });
            let covering = expectations.iter().find(|e| e.covers(&path));
            Outcome {
                expected: covering.map_or(Expected::Pass, |e| e.expected(&path)),
                expect_source: covering.map(|e| e.source.clone()),
                path,
                result,
            }
        })
        .collect()
}

fn verdict_line(o: &Outcome) -> String {
    let base = match &o.result {
        Ok(r) => r.verdict(),
        Err(_) => "UNREADABLE".to_owned(),
    };
    match (&o.expected, o.as_expected()) {
        (Expected::Pass, true) => base,
        (_, true) => format!("{base}, as expected"),
        (e, false) => format!("{base}; UNEXPECTED: expected {e}"),
    }
}

fn print_text(out: &mut impl Write, o: &Outcome, args: &CheckArgs) -> Result<()> {
    match &o.result {
        Ok(r) => {
            if args.quiet {
                writeln!(out, "{}: {}", o.path.display(), verdict_line(o))?;
                return Ok(());
            }
            // The report's own text, with the expectation in the verdict line.
            let text = r.text(&o.path.display().to_string(), args.batch.causal);
            let body = text.strip_suffix(&format!("  => {}\n", r.verdict())).unwrap_or(&text);
            write!(out, "{body}")?;
            writeln!(out, "  => {}\n", verdict_line(o))?;
        }
        Err(e) => {
            if args.quiet {
                writeln!(out, "{}: {}", o.path.display(), verdict_line(o))?;
            } else {
                writeln!(out, "{}\n  error    {e}\n  => {}\n", o.path.display(), verdict_line(o))?;
            }
        }
    }
    Ok(())
}

fn print_summary(out: &mut impl Write, outcomes: &[Outcome], exp: &[Expectations]) -> Result<()> {
    let pass = outcomes.iter().filter(|o| o.violated().is_some_and(|v| v.is_empty())).count();
    let errors = outcomes.iter().filter(|o| o.result.is_err()).count();
    let fail = outcomes.len() - pass - errors;
    let unexpected: Vec<&Outcome> = outcomes.iter().filter(|o| !o.as_expected()).collect();
    let groups = outcomes.iter().filter(|o| o.path.ends_with("cp-group")).count();
    let n = outcomes.len() - groups;
    let mut files = if n == 1 { "1 file".to_owned() } else { format!("{n} files") };
    if groups > 0 {
        files.push_str(&format!(" + {groups} cp group{}", if groups == 1 { "" } else { "s" }));
    }
    let mut line = format!("thdcheck: {files}: {pass} pass, {fail} fail, {errors} unreadable");
    if !exp.is_empty() {
        let sources: Vec<String> = exp.iter().map(|e| e.source.display().to_string()).collect();
        if unexpected.is_empty() {
            line.push_str(&format!("; every verdict as expected ({})", sources.join(", ")));
        } else {
            line.push_str(&format!(
                "; {} not as expected ({})",
                unexpected.len(),
                sources.join(", ")
            ));
        }
    }
    writeln!(out, "{line}")?;
    for o in unexpected {
        writeln!(out, "  unexpected: {}: {}", o.path.display(), verdict_line(o))?;
    }
    Ok(())
}

fn file_json(o: &Outcome) -> serde_json::Value {
    let mut v = json!({
        "path": o.path.display().to_string(),
        "expected": o.expected.to_string(),
        "as_expected": o.as_expected(),
    });
    if let Some(s) = &o.expect_source {
        v["expected_from"] = json!(s.display().to_string());
    }
    match &o.result {
        Ok(r) => {
            let violated = r.violated();
            v["verdict"] = json!(if violated.is_empty() { "pass" } else { "fail" });
            v["violated"] = json!(violated);
            v["report"] = serde_json::to_value(r).unwrap_or(serde_json::Value::Null);
        }
        Err(e) => {
            v["verdict"] = json!("error");
            v["error"] = json!(e.to_string());
        }
    }
    v
}

fn summary_json(outcomes: &[Outcome], code: u8) -> serde_json::Value {
    let count = |f: &dyn Fn(&Outcome) -> bool| outcomes.iter().filter(|o| f(o)).count();
    json!({
        "files": outcomes.len(),
        "pass": count(&|o| o.violated().is_some_and(|v| v.is_empty())),
        "fail": count(&|o| o.violated().is_some_and(|v| !v.is_empty())),
        "error": count(&|o| o.result.is_err()),
        "unexpected": count(&|o| !o.as_expected()),
        "exit_code": code,
    })
}
