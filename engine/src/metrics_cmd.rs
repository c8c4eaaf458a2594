//! `thdcheck metrics`: what a logger should report for a recipe (the golden record) and,
//! optionally, for the real dumped batches of one step (micro-batches, CP rank files, a DP
//! size); with `--expect` (and `--logger`), the gate for a Python logger.

use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};

use crate::loggers::Logger;
use anyhow::{Context, Result, bail};
use reader::checks::{check_options, check_pack, option_facts};
use reader::formats::{ReadOptions, parse};
use reader::pack::BatchData;
use reader::shards::{GroupBatch, read_group};
use reader::tensors::BatchFile;
use rules::checks::{Factor, LoggedKind, LoggedTolerance, Number, check_logged, check_logged_text};
use serde_json::{Map, Value, json};
use thd::SeqLens;
use thd::metrics::megatron::{SeqlenStats, num_floating_point_operations};
use thd::metrics::{BatchWork, FlopsFormula, HardwareView, ModelDims, StepReport, StepTiming};

use crate::args::MetricsArgs;

/// What `metrics` computes before printing: the recipe's record, the batch record beside it,
/// and the comparison with the logged values.
struct Computed {
    record: golden::RecipeRecord,
    doc: Value,
    step: Option<Step>,
    comparison: Option<Vec<Compared>>,
    mismatches: usize,
    /// The logger of `--logger`, whose keys `--expect` was read under.
    logger: Option<Logger>,
}

/// Runs the command; returns the exit code.
///
/// # Errors
/// A recipe, batch or logged file that cannot be read, or options that contradict each other.
pub fn run(args: &MetricsArgs) -> Result<u8> {
    let c = compute(args, Vec::new())?;
    let mut out = std::io::stdout().lock();
    if args.json {
        writeln!(out, "{}", serde_json::to_string_pretty(&json_doc(args, &c))?)?;
    } else {
        print_text(&mut out, args, &c)?;
    }
    Ok(if c.mismatches > 0 { 1 } else { 0 })
}

/// The JSON document `thdcheck metrics --json` prints, for `args` and micro-batches held in
/// memory (the Python package's `thdcheck.metrics`), each `(label, batch)` one micro-batch
/// after the files of `args.batches`.
///
/// # Errors
/// Those of [`run`]; a batch that is one CP rank's shard (give the global batch).
pub fn record_json(args: &MetricsArgs, in_memory: Vec<(String, BatchFile)>) -> Result<Value> {
    Ok(json_doc(args, &compute(args, in_memory)?))
}

fn compute(args: &MetricsArgs, in_memory: Vec<(String, BatchFile)>) -> Result<Computed> {
    let mut recipe = golden::Recipe::load(&args.recipe)?;
    if let Some(t) = args.step_time {
        if !(t.is_finite() && t > 0.0) {
            bail!("--step-time must be a positive number of seconds, got {t}");
        }
        recipe.timing.step_time_s = t;
    }
    if args.logger.is_some() && args.expect.is_none() {
        bail!("--logger names the keys of --expect LOGGED.json: give the logged values too");
    }
    let logger = match &args.logger {
        Some(name) => Some(Logger::resolve(name, args.read.profile.as_deref())?),
        None => None,
    };
    let record = golden::metrics(&recipe).map_err(|e| match (e, args.step_time) {
        (golden::Error::Invalid { key, reason, .. }, Some(t)) if key == "timing.step_time_s" => {
            anyhow::anyhow!("--step-time {t:?}: {reason}")
        }
        (e, _) => anyhow::Error::new(e).context(args.recipe.display().to_string()),
    })?;
    let mut doc = serde_json::from_str::<Value>(&serde_json::to_string(&record)?)?;
    let step = if args.batches.is_empty() && in_memory.is_empty() {
        if args.grad_acc.is_some() || args.dp_size > 1 {
            bail!("--grad-acc and --dp-size describe the batches of --batch: give them");
        }
        None
    } else {
        let read = args.read.read_options()?;
        let mut mbs = load_micro_batches(&args.batches, &read)?;
        for (label, file) in in_memory {
            let parsed = parse(file, &read).with_context(|| label.clone())?;
            if parsed.cp_shard.is_some() {
                bail!("{label}: one CP rank's shard; metrics counts the global batch");
            }
            let packs = parsed
                .packs
                .into_iter()
                .filter(|p| p.part.as_deref() != Some("concatenated"))
                .collect();
            mbs.push(MicroBatch { label, packs, cp: 1 });
        }
        if let Some(k) = args.grad_acc
            && k != mbs.len() as u64
        {
            bail!(
                "--grad-acc {k} but --batch gives {} micro-batches ({}): each file is a \
                 micro-batch, and the rank files of a CP group together are one",
                mbs.len(),
                mbs.iter().map(|m| m.label.as_str()).collect::<Vec<_>>().join(", ")
            );
        }
        let step = step_metrics(&mbs, &StepSpec::new(&recipe, args));
        Some(step.map_err(|e| match e.downcast_ref::<NotFinite>() {
            Some(nf) => match (nf.divisor, args.step_time) {
                (Divisor::StepTime, Some(t)) => anyhow::anyhow!(
                    "--step-time {t:?}: too small to divide this step's FLOPs by ({} would be {})",
                    nf.quantity,
                    nf.value
                ),
                _ => e.context(args.recipe.display().to_string()),
            },
            None => e,
        })?)
    };
    if let (Some(s), Value::Object(m)) = (&step, &mut doc) {
        m.insert("batch".into(), s.record.clone());
    }
    let comparison = match &args.expect {
        Some(path) => Some(compare_file(
            path,
            &doc,
            logger.as_ref(),
            LoggedTolerance { rtol: args.rtol, atol: args.atol },
            &step.as_ref().map(|s| s.factors.clone()).unwrap_or_default(),
        )?),
        None => None,
    };
    let mismatches =
        comparison.as_ref().map_or(0, |c| c.iter().filter(|r| r.is_mismatch()).count());
    Ok(Computed { record, doc, step, comparison, mismatches, logger })
}

fn json_doc(args: &MetricsArgs, c: &Computed) -> Value {
    let mut full = json!({ "version": 1, "record": c.doc });
    if let Some(cmp) = &c.comparison {
        full["comparison"] = json!({
            "rtol": args.rtol, "atol": args.atol, "mismatches": c.mismatches,
            "logger": c.logger.as_ref().map(Logger::title),
            "values": cmp.iter().map(Compared::to_json).collect::<Vec<_>>(),
        });
    }
    if let Some(s) = &c.step {
        full["warnings"] = json!(s.warnings);
    }
    full
}

fn print_text(out: &mut impl Write, args: &MetricsArgs, c: &Computed) -> Result<()> {
    let (record, step, comparison, mismatches) = (&c.record, &c.step, &c.comparison, c.mismatches);
    let logger = &c.logger;
    {
        writeln!(out, "{}", record.to_table())?;
        if let Some(s) = &step {
            writeln!(out, "\nbatch: {}", s.summary)?;
            for w in &s.warnings {
                writeln!(out, "  warning: {w}")?;
            }
            for (k, v) in flatten(&s.record) {
                writeln!(out, "  {k:<38} {v}")?;
            }
        }
        if let (Some(c), Some(path)) = (&comparison, &args.expect) {
            writeln!(
                out,
                "\ncompared with {}{} (integers exact; other numbers |Δ| ≤ max(atol {:e}, rtol {:e}·|expected|)):",
                path.display(),
                logger.as_ref().map(|l| format!(" as {}'s keys", l.title())).unwrap_or_default(),
                args.atol,
                args.rtol
            )?;
            for r in c {
                writeln!(out, "{}", r.line())?;
            }
            let compared = c.iter().filter(|r| r.status.compared()).count();
            let other = c.len() - compared;
            let rest = if other > 0 {
                format!(" ({other} logged values not compared, listed above)")
            } else {
                String::new()
            };
            if mismatches == 0 {
                writeln!(out, "=> PASS: {compared} logged values agree{rest}")?;
            } else {
                writeln!(out, "=> FAIL: {mismatches} of {compared} logged values disagree{rest}")?;
            }
        }
    }
    Ok(())
}

/// One micro-batch: a file, or the global batch a CP group's rank files hold together.
pub(crate) struct MicroBatch {
    /// The file, or `DIR (cp_size N)`.
    pub label: String,
    /// Its packs (DPO: chosen and rejected; the concatenation is left out).
    pub packs: Vec<BatchData>,
    /// The CP size of a reassembled group (1 for a plain file).
    pub cp: usize,
}

/// Every micro-batch of `paths`, in order: a directory's files sorted, recursively. The rank
/// files of one directory and one CP size form one micro-batch, at the place of their first
/// file; a group missing ranks is an error (a rank's own counts are 1/cp of the batch's).
fn load_micro_batches(paths: &[PathBuf], read: &ReadOptions) -> Result<Vec<MicroBatch>> {
    let mut files = Vec::new();
    for path in paths {
        let meta =
            std::fs::metadata(path).with_context(|| format!("cannot read {}", path.display()))?;
        if meta.is_dir() {
            let (mut found, mut bad) = (Vec::new(), Vec::new());
            crate::files::walk(path, &mut found, &mut bad)?;
            if let Some((dir, e)) = bad.first() {
                bail!("cannot read {}: {e}", dir.display());
            }
            if found.is_empty() {
                bail!("no .safetensors files under {}", path.display());
            }
            files.extend(found);
        } else if meta.is_file() {
            files.push(path.clone());
        } else {
            bail!("{} is not a regular file or a directory (a FIFO or a device?)", path.display());
        }
    }
    enum Slot {
        One(MicroBatch),
        Group(PathBuf, usize, Vec<PathBuf>),
    }
    let mut slots: Vec<Slot> = Vec::new();
    for path in files {
        let name = path.display().to_string();
        let file = BatchFile::read(&path).with_context(|| name.clone())?;
        let parsed = parse(file, read).with_context(|| name.clone())?;
        if let Some((_, size)) = parsed.cp_shard {
            let dir = path.parent().map(Path::to_path_buf).unwrap_or_default();
            let slot = slots.iter_mut().find_map(|s| match s {
                Slot::Group(d, n, members) if *d == dir && *n == size => Some(members),
                _ => None,
            });
            match slot {
                Some(members) => members.push(path),
                None => slots.push(Slot::Group(dir, size, vec![path])),
            }
            continue;
        }
        let packs = parsed
            .packs
            .into_iter()
            .filter(|p| p.part.as_deref() != Some("concatenated"))
            .collect();
        slots.push(Slot::One(MicroBatch { label: name, packs, cp: 1 }));
    }
    slots
        .into_iter()
        .map(|slot| match slot {
            Slot::One(mb) => Ok(mb),
            Slot::Group(dir, size, members) => {
                let label = format!("{} (cp_size {size})", dir.display());
                let group = read_group(&dir, size, &members, read).with_context(|| {
                    format!(
                        "{label}: metrics counts the global batch, so it needs every rank's file \
                         of a CP group (one rank's counts are 1/{size} of the batch's)"
                    )
                })?;
                match group.batch {
                    GroupBatch::Whole(pack) => {
                        Ok(MicroBatch { label, packs: vec![*pack], cp: size })
                    }
                    GroupBatch::Lost { cp, key, global } => bail!(
                        "{label}: the ranks do not hold exactly the tokens their global `{key}` \
                         address (the {} split of cp {cp} lost, repeated or unevenly cut some): \
                         run `thdcheck check` on the directory",
                        global.layout.name()
                    ),
                }
            }
        })
        .collect()
}

/// The step's record: what thdcheck recomputes from the batches.
pub(crate) struct Step {
    pub record: Value,
    summary: String,
    warnings: Vec<String>,
    /// The parallel factors a wrong logged value may be off by.
    factors: Vec<Factor>,
}

/// Tokens, sequences, attention work, FLOPs and rates of one step: the micro-batches summed
/// (times `--dp-size`), under the recipe's model, formula, timing and GPU count.
/// What a step's numbers depend on besides its batches.
#[derive(Debug, Clone, Copy)]
pub(crate) struct StepSpec {
    /// The model.
    pub dims: ModelDims,
    /// The FLOPs formula.
    pub formula: FlopsFormula,
    /// What the hardware computes (varlen kernel or whole pack).
    pub view: HardwareView,
    /// Step time, GPUs, peak.
    pub timing: StepTiming,
    /// The batches are one of this many data-parallel ranks'.
    pub dp: u64,
    /// How the batch rules read the packs.
    pub check: reader::CheckOptions,
}

impl StepSpec {
    fn new(recipe: &golden::Recipe, args: &MetricsArgs) -> Self {
        Self {
            dims: recipe.model_dims(),
            formula: recipe.flops.formula,
            view: recipe.hardware_view(),
            timing: StepTiming {
                step_time_s: recipe.timing.step_time_s,
                num_gpus: recipe.parallel.num_gpus,
                peak_flops_per_gpu: recipe.timing.peak_tflops_per_gpu * 1e12,
            },
            dp: args.dp_size,
            check: args.read.check_options(),
        }
    }
}

/// The timing input a rate divides by.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Divisor {
    /// `timing.step_time_s` (or `--step-time`).
    StepTime,
    /// `timing.peak_tflops_per_gpu`.
    Peak,
}

/// A rate of the step record that would not be a finite number: its divisor is too small for
/// the step's FLOPs or tokens (`inf` would print as JSON `null`).
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct NotFinite {
    /// The rate, e.g. `tflops_per_gpu`.
    pub quantity: &'static str,
    /// What it would be (`inf`).
    pub value: f64,
    /// The input at fault.
    pub divisor: Divisor,
    /// That input's value.
    pub input: f64,
}

impl std::fmt::Display for NotFinite {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let key = match self.divisor {
            Divisor::StepTime => "timing.step_time_s",
            Divisor::Peak => "timing.peak_tflops_per_gpu",
        };
        write!(
            f,
            "{key} = {:?}: too small to divide this step's FLOPs by ({} would be {})",
            self.input, self.quantity, self.value
        )
    }
}

impl std::error::Error for NotFinite {}

/// `value`, or [`NotFinite`] naming the timing input it divides by.
fn finite(
    quantity: &'static str,
    value: f64,
    divisor: Divisor,
    timing: &StepTiming,
) -> Result<f64> {
    if value.is_finite() {
        return Ok(value);
    }
    let input = match divisor {
        Divisor::StepTime => timing.step_time_s,
        Divisor::Peak => timing.peak_flops_per_gpu / 1e12,
    };
    Err(NotFinite { quantity, value, divisor, input }.into())
}

pub(crate) fn step_metrics(mbs: &[MicroBatch], spec: &StepSpec) -> Result<Step> {
    let mut work = BatchWork::default();
    let (mut real_seqs, mut labelled, mut valid) = (0u64, Some(0u64), Some(0u64));
    // Megatron's attention statistics: Σ sᵢ² of the real sequences, or for a batch without
    // offsets (BSHD) each row as one sequence, mbs·S² (the FLOPS invariant's fallback).
    let (mut mega_sq, mut mega_real) = (0u128, 0u64);
    let mut warnings = Vec::new();
    let mut cp = 1usize;
    for mb in mbs {
        cp = cp.max(mb.cp);
        for pack in &mb.packs {
            // The options over the facts the micro-batch was read under (its metadata, its
            // profile).
            let opts = check_options(&option_facts(&spec.check).settled().or(pack.facts));
            let report = check_pack(pack, &opts);
            let violated: Vec<&str> =
                report.checks.iter().filter(|o| o.violation.is_some()).map(|o| o.rule).collect();
            if !violated.is_empty() {
                warnings.push(format!(
                    "{} violates {}: the counts below are what its layout says; run `thdcheck \
                     check` on it",
                    mb.label,
                    violated.join(", ")
                ));
            }
            let n = pack.segments();
            let view = pack.view();
            let real = SeqLens::new((0..n).map(|i| view.real(i).len() as u32).collect());
            let slots = SeqLens::new((0..n).map(|i| view.slot(i).len() as u32).collect());
            let mut w = BatchWork::from_seq_lens(
                &real,
                &slots,
                // The segments before the mock ones, empty ones included (their positions).
                Some(report.facts.real_segments + report.facts.empty_segments),
                pack.tokens() as u64,
            )
            .with_context(|| mb.label.clone())?;
            // Mock segments that num_real_seqs does not state are found by the rules.
            w.real_tokens = report.facts.real_tokens;
            w.valid_labels = report.facts.valid_labels.unwrap_or(0);
            real_seqs += report.facts.real_segments as u64;
            if pack.rows_are_sequences {
                mega_sq += report.facts.whole_pack.sum_squares;
                mega_real += pack.tokens() as u64;
            } else {
                mega_sq += report.facts.useful.sum_squares;
                mega_real += report.facts.real_tokens;
            }
            valid = valid.zip(report.facts.valid_labels).map(|(a, b)| a + b);
            labelled = labelled.zip(report.facts.labelled_segments).map(|(a, b)| a + b);
            work += w;
        }
    }
    let dp = spec.dp;
    let one_rank = work;
    for _ in 1..dp {
        work += one_rank;
    }
    let (real_seqs, labelled, valid) =
        (real_seqs * dp, labelled.map(|x| x * dp), valid.map(|x| x * dp));
    let (dims, timing) = (spec.dims, spec.timing);
    let flops = work.flops(&dims, spec.formula, spec.view)?;
    let rates = StepReport::new(flops, work.real_tokens, &timing).map_err(|e| match e {
        thd::Error::RateNotFinite { quantity, divisor, .. } => {
            let d = if divisor == "peak_flops_per_gpu" { Divisor::Peak } else { Divisor::StepTime };
            finite(quantity, f64::INFINITY, d, &timing).unwrap_err()
        }
        e => e.into(),
    })?;
    let time = |quantity, x: f64| finite(quantity, x, Divisor::StepTime, &timing);
    let tokens_per_second =
        time("tokens_per_second", work.real_tokens as f64 / timing.step_time_s)?;
    let stored_per_gpu = time(
        "stored_tokens_per_second_per_gpu",
        work.padded_tokens as f64 / timing.step_time_s / timing.num_gpus as f64,
    )?;
    let valid_per_second = valid
        .map(|v| time("valid_tokens_per_second", v as f64 / timing.step_time_s))
        .transpose()?;
    let hw = work.hardware(spec.view);
    let no_labels = "the batches have no labels";
    let mut record = json!({
        "micro_batches": mbs.len(),
        "cp_size": cp,
        "dp_size": dp,
        "tokens": {
            "real": work.real_tokens,
            "stored": work.padded_tokens,
            "valid": valid.map_or(Value::Null, Value::from),
            "prompt": valid.map_or(Value::Null, |v| Value::from(work.real_tokens.saturating_sub(v))),
        },
        "sequences": {
            "real": real_seqs,
            "with_valid_labels": labelled.map_or(Value::Null, Value::from),
        },
        "attention": {
            "useful_sum_squares": big(work.useful.sum_squares),
            "hardware_sum_squares": big(hw.sum_squares),
        },
        "flops": { "useful": big(flops.useful), "hardware": big(flops.hardware) },
        "tflops_per_gpu": { "useful": rates.tflops_per_gpu, "hardware": rates.tflops_per_gpu_padded },
        "mfu_pct": { "useful": rates.mfu_pct, "hardware": rates.mfu_padded_pct },
        "tokens_per_second_per_gpu": rates.tokens_per_second_per_gpu,
        // The same step-wide, and of stored tokens and valid labels (what some loggers count).
        "tokens_per_second": tokens_per_second,
        "stored_tokens_per_second_per_gpu": stored_per_gpu,
        "valid_tokens_per_second": valid_per_second.map_or(Value::Null, Value::from),
        "padding_fraction": if work.padded_tokens == 0 {
            0.0
        } else {
            1.0 - work.real_tokens as f64 / work.padded_tokens as f64
        },
    });
    // Megatron-Bridge's runtime statistics: the tensors' tokens (linear term) and Σ sᵢ² of the
    // real sequences (attention term), accumulated over micro-batches and DP.
    if spec.formula == FlopsFormula::MegatronLm {
        let stats = SeqlenStats {
            seqlen_sum: work.padded_tokens,
            seqlen_squared_sum: mega_sq * u128::from(dp),
            real_seqlen_sum: mega_real * dp,
        };
        let f = num_floating_point_operations(&dims, 0, Some(&stats), 0)?;
        let per_gpu = time(
            "megatron.tflops_per_gpu",
            f as f64 / timing.step_time_s / timing.num_gpus as f64 / 1e12,
        )?;
        record["megatron"] = json!({
            "seqlen_sum": stats.seqlen_sum,
            "seqlen_squared_sum": big(stats.seqlen_squared_sum),
            "flops": big(f),
            "tflops_per_gpu": per_gpu,
            "tflops": per_gpu * timing.num_gpus as f64,
        });
    }
    record["not_recomputed"] = json!({
        "loss": "needs the logits (use `thdcheck fuzz loss` for a loss function)",
        "ppl": "needs the logits",
        "step_time": "wall time, taken from the recipe or --step-time",
    });
    if valid.is_none() {
        record["not_recomputed"]["tokens.valid"] = json!(no_labels);
    }
    let summary = format!(
        "{} micro-batch{}{}{} ({})",
        mbs.len(),
        if mbs.len() == 1 { "" } else { "es" },
        if cp > 1 { format!(", CP groups of {cp} ranks reassembled") } else { String::new() },
        if dp > 1 { format!(", × dp_size {dp}") } else { String::new() },
        mbs.iter().map(|m| m.label.as_str()).collect::<Vec<_>>().join(", ")
    );
    let factors = vec![
        ("CP", cp as u64),
        ("DP", dp),
        ("micro-batch", mbs.len() as u64),
        ("GPU", timing.num_gpus),
    ];
    Ok(Step { record, summary, warnings, factors })
}

/// An exact integer as JSON (a float only past `u64`).
fn big(x: u128) -> Value {
    u64::try_from(x).map_or_else(|_| json!(x as f64), Value::from)
}

/// How one logged value (`--expect`) came out against the recomputed record: its `status` in
/// the JSON report.
#[derive(Debug, Clone, PartialEq)]
enum LoggedStatus {
    Ok,
    Mismatch(Box<rules::Violation>),
    /// The logger writes it, but it cannot be recomputed from batches: why.
    NotRecomputed(String),
    /// Not a key of the record (or of the logger).
    Unknown,
    /// A record key without a value here (e.g. valid tokens of unlabelled batches).
    NoValue,
}

impl LoggedStatus {
    fn compared(&self) -> bool {
        matches!(self, LoggedStatus::Ok | LoggedStatus::Mismatch(_))
    }
}

/// One logged value against the recomputed one.
struct Compared {
    key: String,
    /// The record key it was compared with.
    record: Option<String>,
    logged: Value,
    expected: Option<Value>,
    status: LoggedStatus,
}

impl Compared {
    fn is_mismatch(&self) -> bool {
        matches!(self.status, LoggedStatus::Mismatch(_))
    }

    fn line(&self) -> String {
        let via = match &self.record {
            Some(r) if *r != self.key => format!(" (= {r})"),
            _ => String::new(),
        };
        let key = format!("{}{via}", self.key);
        match &self.status {
            LoggedStatus::Ok => format!(
                "  ok       {key:<52} logged {:<24} expected {}",
                self.logged.to_string(),
                self.expected.clone().unwrap_or_default()
            ),
            LoggedStatus::Mismatch(v) => format!(
                "  MISMATCH {key:<52} logged {:<24} expected {}\n           {}: {}",
                self.logged.to_string(),
                self.expected.clone().unwrap_or_default(),
                v.id,
                v.note.as_deref().unwrap_or(&v.rule)
            ),
            LoggedStatus::NotRecomputed(why) => {
                format!("  n/a      {key:<52} logged {:<24} not recomputed: {why}", self.logged)
            }
            LoggedStatus::NoValue => format!(
                "  n/a      {key:<52} logged {:<24} not recomputed: no value for these batches",
                self.logged
            ),
            LoggedStatus::Unknown => format!(
                "  unknown  {key:<52} logged {:<24} not a key thdcheck knows: ignored",
                self.logged
            ),
        }
    }

    fn to_json(&self) -> Value {
        let (status, detail) = match &self.status {
            LoggedStatus::Ok => ("ok", Value::Null),
            LoggedStatus::Mismatch(v) => {
                ("mismatch", serde_json::to_value(v).unwrap_or(Value::Null))
            }
            LoggedStatus::NotRecomputed(why) => ("not-recomputed", json!(why)),
            LoggedStatus::NoValue => ("not-recomputed", json!("no value for these batches")),
            LoggedStatus::Unknown => ("unknown", Value::Null),
        };
        json!({
            "key": self.key, "record": self.record, "logged": self.logged,
            "expected": self.expected, "ok": matches!(self.status, LoggedStatus::Ok),
            "status": status, "detail": detail,
        })
    }
}

/// A JSON number as an exact integer or a float.
pub(crate) fn number(v: &Value) -> Option<Number> {
    if let Some(i) = v.as_i64() {
        return Some(Number::Int(i128::from(i)));
    }
    if let Some(u) = v.as_u64() {
        return Some(Number::Int(i128::from(u)));
    }
    v.as_f64().map(Number::Float)
}

fn compare_file(
    path: &Path,
    doc: &Value,
    logger: Option<&Logger>,
    tol: LoggedTolerance,
    factors: &[Factor],
) -> Result<Vec<Compared>> {
    let cannot = || format!("cannot read {}", path.display());
    // Opening a FIFO would block until a writer comes.
    if !std::fs::metadata(path).with_context(cannot)?.is_file() {
        bail!("{}: not a regular file (a directory, a FIFO or a device?)", path.display());
    }
    let text = std::fs::read_to_string(path).with_context(cannot)?;
    let logged: Value =
        serde_json::from_str(&text).with_context(|| format!("{} is not JSON", path.display()))?;
    if !logged.is_object() {
        bail!("{}: expected a JSON object of logged values", path.display());
    }
    let expected: Map<String, Value> = flatten(doc).into_iter().collect();
    // A logger's dict is flat with `/` in its keys (`train/mfu_pct`); nested JSON is read too.
    let entries = match logger {
        Some(_) => flatten_with(&logged, "/"),
        None => flatten(&logged),
    };
    let mut out = Vec::new();
    for (key, value) in entries {
        let (record_key, kind) = match logger.map(|l| l.find(&key)) {
            Some(Some(k)) => match &k.record {
                Ok(r) => (r.clone(), LoggedKind::from(k.kind)),
                Err(why) => {
                    out.push(Compared {
                        key,
                        record: None,
                        logged: value,
                        expected: None,
                        status: LoggedStatus::NotRecomputed(why.clone()),
                    });
                    continue;
                }
            },
            Some(None) => {
                out.push(Compared {
                    key,
                    record: None,
                    logged: value,
                    expected: None,
                    status: LoggedStatus::Unknown,
                });
                continue;
            }
            None => {
                let kind = LoggedKind::of_record_key(&key);
                (key.clone(), kind)
            }
        };
        let status_for = |e: &Value| -> LoggedStatus {
            match (number(&value), number(e)) {
                (Some(l), Some(x)) => match check_logged(&key, kind, l, x, tol, factors) {
                    Ok(()) => LoggedStatus::Ok,
                    Err(v) => LoggedStatus::Mismatch(Box::new(v)),
                },
                _ => match check_logged_text(&key, kind, &value.to_string(), &e.to_string()) {
                    Ok(()) => LoggedStatus::Ok,
                    Err(v) => LoggedStatus::Mismatch(Box::new(v)),
                },
            }
        };
        let (expected, status) = match expected.get(&record_key) {
            None if logger.is_none() => match expected_why(doc, &record_key) {
                Some(why) => (None, LoggedStatus::NotRecomputed(why)),
                None => (None, LoggedStatus::Unknown),
            },
            None => (None, LoggedStatus::NoValue),
            Some(Value::Null) => (None, LoggedStatus::NoValue),
            Some(e) => (Some(e.clone()), status_for(e)),
        };
        out.push(Compared { key, record: Some(record_key), logged: value, expected, status });
    }
    if !out.iter().any(|c| c.status.compared()) {
        let keys: Vec<&str> = out.iter().map(|c| c.key.as_str()).take(8).collect();
        bail!(
            "{}: none of the logged values can be compared ({}{}); see `thdcheck metrics --json` \
             for the record's keys{}",
            path.display(),
            keys.join(", "),
            if out.len() > 8 { ", …" } else { "" },
            if logger.is_none() { " or pass --logger NAME" } else { "" }
        );
    }
    Ok(out)
}

/// Why a `batch.*` key has no value: listed under `batch.not_recomputed`.
fn expected_why(doc: &Value, key: &str) -> Option<String> {
    let rest = key.strip_prefix("batch.")?;
    let leaf = rest.rsplit('.').next()?;
    let why = doc.get("batch")?.get("not_recomputed")?;
    Some(why.get(rest).or_else(|| why.get(leaf))?.as_str()?.to_owned())
}

/// A step record's numbers by dotted key (`tokens.real`), the text of `not_recomputed` left out.
pub(crate) fn flatten_record(record: &Value) -> BTreeMap<String, Value> {
    flatten(record).into_iter().filter(|(k, _)| !k.starts_with("not_recomputed.")).collect()
}

/// Nested objects as dotted keys (`throughput.mfu_pct.useful`); arrays index with `[i]`.
fn flatten(v: &Value) -> Vec<(String, Value)> {
    flatten_with(v, ".")
}

/// Nested objects as keys joined with `sep`; arrays index with `[i]`.
fn flatten_with(v: &Value, sep: &str) -> Vec<(String, Value)> {
    fn walk(prefix: &str, sep: &str, v: &Value, out: &mut Vec<(String, Value)>) {
        match v {
            Value::Object(m) => {
                for (k, x) in m {
                    let key =
                        if prefix.is_empty() { k.clone() } else { format!("{prefix}{sep}{k}") };
                    walk(&key, sep, x, out);
                }
            }
            Value::Array(a) if a.iter().any(|x| x.is_object() || x.is_array()) => {
                for (i, x) in a.iter().enumerate() {
                    walk(&format!("{prefix}[{i}]"), sep, x, out);
                }
            }
            _ => out.push((prefix.to_owned(), v.clone())),
        }
    }
    let mut out = Vec::new();
    walk("", sep, v, &mut out);
    out
}
