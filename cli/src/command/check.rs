//! `thdcheck check`: walk the paths, check every batch file, print reports and a summary, and
//! turn the verdicts (against expectations) into the exit code.

use std::io::Write;
use std::path::{Path, PathBuf};

use crate::expect::{Expectations, Expected, matches};
use anyhow::{Context, Result, bail};
use reader::tensors::BatchFile;
use reader::{CheckOptions, FileReport, ReadOptions, check_file};
use serde_json::json;

use crate::args::CheckArgs;

/// What happened to one file: its report or its error, and the verdict expected of it.
struct FileOutcome {
    path: PathBuf,
    result: Result<FileReport, reader::Error>,
    expected: Expected,
    expect_source: Option<PathBuf>,
}

impl FileOutcome {
    fn violated(&self) -> Option<Vec<&'static str>> {
        self.result.as_ref().ok().map(FileReport::violated)
    }
    fn as_expected(&self) -> bool {
        let v = self.violated();
        matches(&self.expected, v.as_deref())
    }
}

/// What is kept of an outcome once it is printed: enough for the CP groups, the summary and
/// the error lines. A file's report is dropped as soon as it is out, so that checking many
/// files (`--json` included: the document is streamed) holds one report at a time.
struct Kept {
    path: PathBuf,
    /// `Some(true)` pass, `Some(false)` fail, `None` unreadable.
    passed: Option<bool>,
    as_expected: bool,
    /// The verdict line, for the summary's list of unexpected verdicts.
    unexpected: Option<String>,
    /// The error, for the closing `thdcheck: error:` lines (unexpected errors only).
    error: Option<String>,
    /// The CP size of a shard file: its group is reassembled after every file is checked.
    cp_size: Option<usize>,
    /// Read, but no rule applied to it: reported apart, never as a pass.
    unchecked: bool,
    /// Read, and no labels found in it (the label rules skipped).
    no_labels: bool,
    /// The profile's `[map]` sources the file does not have (`None`: unreadable).
    map_missing: Option<Vec<String>>,
}

impl Kept {
    fn of(o: &FileOutcome) -> Self {
        let as_expected = o.as_expected();
        Self {
            path: o.path.clone(),
            passed: o.violated().map(|v| v.is_empty()),
            as_expected,
            unexpected: (!as_expected).then(|| verdict_line(o)),
            error: match (&o.result, as_expected) {
                (Err(e), false) => Some(e.to_string()),
                _ => None,
            },
            cp_size: match &o.result {
                Ok(FileReport { cp_shard: Some((_, size)), .. }) => Some(*size),
                _ => None,
            },
            unchecked: o.result.as_ref().is_ok_and(|r| !r.checked()),
            no_labels: o.result.as_ref().is_ok_and(|r| {
                r.cp_shard.is_none() && r.packs.iter().all(|p| p.facts.valid_labels.is_none())
            }),
            map_missing: o.result.as_ref().ok().map(|r| r.map_missing.clone()),
        }
    }
}

/// Where the outcomes go as they come: the text report, or the `--json` document written piece
/// by piece (byte for byte what `serde_json::to_string_pretty` writes for the whole document).
struct Printer<'a, W: Write> {
    out: W,
    args: &'a CheckArgs,
    files: usize,
    /// `--html`: the page, written as the outcomes come.
    html: Option<std::io::BufWriter<std::fs::File>>,
}

impl<W: Write> Printer<'_, W> {
    fn begin(&mut self) -> Result<()> {
        if self.args.json {
            write!(self.out, "{{\n  \"files\": [")?;
        }
        if let Some(h) = &mut self.html {
            reader::picture::html::begin(h, "thdcheck check")?;
        }
        Ok(())
    }

    fn outcome(&mut self, o: &FileOutcome) -> Result<()> {
        if let Some(h) = &mut self.html {
            crate::render::check_section(
                h,
                o.path.display().to_string().as_str(),
                &o.result,
                &verdict_line(o),
                self.args.batch.causal,
            )?;
        }
        if self.args.json {
            let sep = if self.files == 0 { "\n" } else { ",\n" };
            let v = serde_json::to_string_pretty(&file_json(o))?;
            write!(self.out, "{sep}{}", indented(&v, "    ", true))?;
        } else {
            print_text(&mut self.out, o, self.args)?;
        }
        self.files += 1;
        Ok(())
    }

    fn end(&mut self, kept: &[Kept], code: u8, exp: &[Expectations]) -> Result<()> {
        if let Some(mut h) = self.html.take() {
            let mut line = Vec::new();
            print_summary(&mut line, kept, exp)?;
            reader::picture::html::end(&mut h, String::from_utf8_lossy(&line).trim_end())?;
            h.flush()?;
        }
        if self.args.json {
            let close = if self.files == 0 { "]" } else { "\n  ]" };
            let summary = serde_json::to_string_pretty(&summary_json(kept, code))?;
            writeln!(
                self.out,
                "{close},\n  \"summary\": {},\n  \"version\": 1\n}}",
                indented(&summary, "  ", false)
            )?;
        } else {
            print_summary(&mut self.out, kept, exp)?;
        }
        Ok(())
    }
}

/// `text` with `indent` before every line (`first`: the first line too).
fn indented(text: &str, indent: &str, first: bool) -> String {
    let mut out = String::with_capacity(text.len() + text.len() / 8);
    for (i, line) in text.split('\n').enumerate() {
        if i > 0 {
            out.push('\n');
        }
        if i > 0 || first {
            out.push_str(indent);
        }
        out.push_str(line);
    }
    out
}

/// Runs the command; returns the exit code.
pub fn run(args: &CheckArgs) -> Result<u8> {
    let mut read = args.batch.read_options()?;
    read.picture = args.html.is_some();
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
            let e = path.join(crate::expect::FILE_NAME);
            // Anything named expected.toml is read: one that is a FIFO, a directory or a
            // dangling link is an error, never a silently ignored expectation.
            if !args.no_expect && args.expect.is_none() && std::fs::symlink_metadata(&e).is_ok() {
                expectations.push(Expectations::load(&e)?);
            }
            engine::files::walk(path, &mut files, &mut unreadable_dirs)?;
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

    let expected = |path: &Path| {
        let covering = expectations.iter().find(|e| e.covers(path));
        (covering.map_or(Expected::Pass, |e| e.expected(path)), covering.map(|e| e.source.clone()))
    };
    let html = match &args.html {
        Some(path) => Some(std::io::BufWriter::new(
            std::fs::File::create(path)
                .with_context(|| format!("--html {}: cannot write it", path.display()))?,
        )),
        None => None,
    };
    let mut printer = Printer { out: std::io::stdout().lock(), args, files: 0, html };
    printer.begin()?;
    let mut kept = Vec::with_capacity(files.len() + unreadable_dirs.len());
    for path in files {
        // Read as `metrics` reads: a large file is mapped, and its 8-byte header length is
        // checked before anything else is read.
        let result = BatchFile::read(&path).and_then(|file| check_file(file, &read, &opts));
        let (expected, expect_source) = expected(&path);
        let o = FileOutcome { path, result, expected, expect_source };
        printer.outcome(&o)?;
        kept.push(Kept::of(&o));
    }
    for (path, source) in unreadable_dirs {
        let o = FileOutcome {
            expected: Expected::Pass,
            expect_source: None,
            result: Err(reader::Error::Io { path: path.clone(), source }),
            path,
        };
        printer.outcome(&o)?;
        kept.push(Kept::of(&o));
    }
    for o in cp_groups(&kept, &read, &opts, &expectations) {
        printer.outcome(&o)?;
        kept.push(Kept::of(&o));
    }

    let unexpected_errors = kept.iter().filter(|k| !k.as_expected && k.passed.is_none()).count();
    let unexpected = kept.iter().filter(|k| !k.as_expected).count();
    let warnings = run_warnings(&kept, args.strict);
    let code = if unexpected_errors > 0 {
        2
    } else if unexpected > 0 || (args.strict && !warnings.is_empty()) {
        1
    } else {
        0
    };
    printer.end(&kept, code, &expectations)?;
    drop(printer);
    for k in &kept {
        if let Some(e) = &k.error {
            eprintln!("thdcheck: error: {}: {e}", k.path.display());
        }
    }
    let level = if args.strict { "error (--strict)" } else { "warning" };
    for w in &warnings {
        eprintln!("thdcheck: {level}: {w}");
    }
    Ok(code)
}

/// What a run read without judging, said once after the summary (failures under `--strict`):
/// files no rule applied to, files without labels, and `[map]` sources no file had.
fn run_warnings(kept: &[Kept], strict: bool) -> Vec<String> {
    let mut out = Vec::new();
    let unchecked: Vec<String> =
        kept.iter().filter(|k| k.unchecked).map(|k| k.path.display().to_string()).collect();
    if !unchecked.is_empty() {
        out.push(format!(
            "no rule applied to {} ({}): not a pass; a profile or options state what the \
             batch holds",
            rules::words::plural(unchecked.len(), "file"),
            unchecked.join(", ")
        ));
    }
    // Many batches carry no labels by design (the report says so): a failure only when asked.
    let unlabelled = kept.iter().filter(|k| k.no_labels && !k.unchecked).count();
    if strict && unlabelled > 0 {
        out.push(format!(
            "no labels read in {}: the label rules were skipped (labels under a key of the \
             stack's own need `[map] KEY = \"labels\"` or `--map KEY=labels`)",
            rules::words::plural(unlabelled, "file")
        ));
    }
    let mut read = kept.iter().filter_map(|k| k.map_missing.as_ref()).peekable();
    if read.peek().is_some() {
        let first: Vec<String> = read.next().cloned().unwrap_or_default();
        let rest: Vec<&Vec<String>> = read.collect();
        for key in first.iter().filter(|key| rest.iter().all(|m| m.contains(key))) {
            out.push(format!(
                "the profile's [map] renames `{key}`, which no file checked has (a `[map]` entry \
                 is KEY_IN_THE_FILE = \"NAME_THDCHECK_READS\")"
            ));
        }
    }
    out
}

/// The CP groups among the files: shard files (`cp_rank`, `cp_size`) of one directory and one
/// CP size, reassembled and checked as one batch, reported as `DIR/cp-group`.
fn cp_groups(
    kept: &[Kept],
    read: &ReadOptions,
    opts: &CheckOptions,
    expectations: &[Expectations],
) -> Vec<FileOutcome> {
    use std::collections::BTreeMap;
    let mut groups: BTreeMap<(PathBuf, usize), Vec<PathBuf>> = BTreeMap::new();
    for k in kept {
        if let Some(size) = k.cp_size {
            let dir = k.path.parent().map(Path::to_path_buf).unwrap_or_default();
            groups.entry((dir, size)).or_default().push(k.path.clone());
        }
    }
    groups
        .into_iter()
        .map(|((dir, size), files)| {
            let path = dir.join("cp-group");
            let result = reader::shards::read_group(&dir, size, &files, read)
                .map(|g| reader::check_group(g, read, opts));
            let covering = expectations.iter().find(|e| e.covers(&path));
            FileOutcome {
                expected: covering.map_or(Expected::Pass, |e| e.expected(&path)),
                expect_source: covering.map(|e| e.source.clone()),
                path,
                result,
            }
        })
        .collect()
}

fn verdict_line(o: &FileOutcome) -> String {
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

fn print_text(out: &mut impl Write, o: &FileOutcome, args: &CheckArgs) -> Result<()> {
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

fn print_summary(out: &mut impl Write, kept: &[Kept], exp: &[Expectations]) -> Result<()> {
    let pass = kept.iter().filter(|k| k.passed == Some(true)).count();
    let errors = kept.iter().filter(|k| k.passed.is_none()).count();
    let fail = kept.len() - pass - errors;
    let unexpected: Vec<&Kept> = kept.iter().filter(|k| !k.as_expected).collect();
    let groups = kept.iter().filter(|k| k.path.ends_with("cp-group")).count();
    let n = kept.len() - groups;
    let mut files = if n == 1 { "1 file".to_owned() } else { format!("{n} files") };
    if groups > 0 {
        files.push_str(&format!(" + {groups} cp group{}", if groups == 1 { "" } else { "s" }));
    }
    let unchecked = kept.iter().filter(|k| k.unchecked).count();
    let pass = pass - unchecked;
    let unchecked = if unchecked > 0 { format!(", {unchecked} unchecked") } else { String::new() };
    let mut line =
        format!("thdcheck: {files}: {pass} pass, {fail} fail{unchecked}, {errors} unreadable");
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
    for k in unexpected {
        writeln!(
            out,
            "  unexpected: {}: {}",
            k.path.display(),
            k.unexpected.as_deref().unwrap_or_default()
        )?;
    }
    Ok(())
}

fn file_json(o: &FileOutcome) -> serde_json::Value {
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
            v["verdict"] = json!(match (violated.is_empty(), r.checked()) {
                (false, _) => "fail",
                (true, true) => "pass",
                (true, false) => "unchecked",
            });
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

fn summary_json(kept: &[Kept], code: u8) -> serde_json::Value {
    let count = |f: &dyn Fn(&Kept) -> bool| kept.iter().filter(|k| f(k)).count();
    json!({
        "files": kept.len(),
        "pass": count(&|k| k.passed == Some(true) && !k.unchecked),
        "unchecked": count(&|k| k.unchecked),
        "fail": count(&|k| k.passed == Some(false)),
        "error": count(&|k| k.passed.is_none()),
        "unexpected": count(&|k| !k.as_expected),
        "exit_code": code,
    })
}
