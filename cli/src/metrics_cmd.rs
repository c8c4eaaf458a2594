//! `thdcheck metrics`: what a logger should report for a recipe (the golden record) and,
//! optionally, for one real dumped batch; with `--expect`, the gate for a Python logger.

use std::io::Write;
use std::path::Path;

use anyhow::{Context, Result, bail};
use serde_json::{Map, Value, json};
use thd::SeqLens;
use thd::metrics::{BatchWork, StepReport, StepTiming};
use thdcheck::checks::check_pack;
use thdcheck::dialect::{ReadOptions, parse};
use thdcheck::tensors::BatchFile;

use crate::cli::MetricsArgs;

/// Runs the command; returns the exit code.
pub fn run(args: &MetricsArgs) -> Result<u8> {
    let mut recipe = golden::Recipe::load(&args.recipe)?;
    if let Some(t) = args.step_time {
        if !(t.is_finite() && t > 0.0) {
            bail!("--step-time must be a positive number of seconds, got {t}");
        }
        recipe.timing.step_time_s = t;
    }
    let record = golden::metrics(&recipe)?;
    let mut doc = serde_json::from_str::<Value>(&serde_json::to_string(&record)?)?;
    let batch = match &args.batch {
        Some(path) => Some(batch_metrics(path, &recipe)?),
        None => None,
    };
    if let (Some(b), Value::Object(m)) = (&batch, &mut doc) {
        m.insert("batch".into(), b.clone());
    }
    let comparison = match &args.expect {
        Some(path) => Some(compare_file(path, &doc, args.rtol, args.atol)?),
        None => None,
    };
    let mismatches = comparison.as_ref().map_or(0, |c| c.iter().filter(|r| !r.ok).count());
    let mut out = std::io::stdout().lock();
    if args.json {
        let mut full = json!({ "version": 1, "record": doc });
        if let Some(c) = &comparison {
            full["comparison"] = json!({
                "rtol": args.rtol, "atol": args.atol, "mismatches": mismatches,
                "values": c.iter().map(|r| json!({
                    "key": r.key, "logged": r.logged, "expected": r.expected, "ok": r.ok,
                })).collect::<Vec<_>>(),
            });
        }
        writeln!(out, "{}", serde_json::to_string_pretty(&full)?)?;
    } else {
        writeln!(out, "{}", record.to_table())?;
        if let Some(b) = &batch {
            writeln!(
                out,
                "\nbatch {}",
                args.batch.as_deref().map(Path::display).map(|d| d.to_string()).unwrap_or_default()
            )?;
            for (k, v) in flatten(b) {
                writeln!(out, "  {k:<34} {v}")?;
            }
        }
        if let (Some(c), Some(path)) = (&comparison, &args.expect) {
            writeln!(
                out,
                "\ncompared with {} (integers exact; other numbers |Δ| ≤ max(atol {:e}, rtol {:e}·|expected|)):",
                path.display(),
                args.atol,
                args.rtol
            )?;
            for r in c {
                writeln!(
                    out,
                    "  {:<9}{:<40} logged {:<24} expected {}",
                    if r.ok { "ok" } else { "MISMATCH" },
                    r.key,
                    r.logged.to_string(),
                    r.expected
                )?;
            }
            if mismatches == 0 {
                writeln!(out, "=> PASS: {} logged values agree", c.len())?;
            } else {
                writeln!(out, "=> FAIL: {mismatches} of {} logged values disagree", c.len())?;
            }
        }
    }
    Ok(if mismatches > 0 { 1 } else { 0 })
}

/// Tokens, attention work, FLOPs and rates of one dumped batch under the recipe's model,
/// formula, timing and GPU count. DPO files count the chosen and rejected packs.
fn batch_metrics(path: &Path, recipe: &golden::Recipe) -> Result<Value> {
    let file = BatchFile::read(path).with_context(|| format!("{}", path.display()))?;
    let parsed =
        parse(file, &ReadOptions::default()).with_context(|| format!("{}", path.display()))?;
    let mut work = BatchWork::default();
    for pack in parsed.packs.iter().filter(|p| p.part.as_deref() != Some("concatenated")) {
        let report = check_pack(pack, &thdcheck::CheckOptions::default());
        let n = pack.segments();
        let view = pack.view();
        let real = SeqLens::new((0..n).map(|i| view.real(i).len() as u32).collect());
        let slots = SeqLens::new((0..n).map(|i| view.slot(i).len() as u32).collect());
        let mut w = BatchWork::from_seq_lens(
            &real,
            &slots,
            Some(report.facts.real_segments),
            pack.tokens() as u64,
        )?;
        if let Some(v) = report.facts.valid_labels {
            w.valid_labels = v;
        }
        work.real_tokens += w.real_tokens;
        work.padded_tokens += w.padded_tokens;
        work.valid_labels += w.valid_labels;
        work.useful += w.useful;
        work.hardware_varlen += w.hardware_varlen;
        work.hardware_whole_pack += w.hardware_whole_pack;
    }
    let dims = recipe.model_dims();
    let flops = work.flops(&dims, recipe.flops.formula, recipe.hardware_view())?;
    let timing = StepTiming {
        step_time_s: recipe.timing.step_time_s,
        num_gpus: recipe.parallel.num_gpus,
        peak_flops_per_gpu: recipe.timing.peak_tflops_per_gpu * 1e12,
    };
    let step = StepReport::new(flops, work.real_tokens, &timing)?;
    let hw = work.hardware(recipe.hardware_view());
    Ok(json!({
        "tokens": { "real": work.real_tokens, "stored": work.padded_tokens, "valid": work.valid_labels },
        "attention": {
            "useful_sum_squares": big(work.useful.sum_squares),
            "hardware_sum_squares": big(hw.sum_squares),
        },
        "flops": { "useful": big(flops.useful), "hardware": big(flops.hardware) },
        "tflops_per_gpu": { "useful": step.tflops_per_gpu, "hardware": step.tflops_per_gpu_padded },
        "mfu_pct": { "useful": step.mfu_pct, "hardware": step.mfu_padded_pct },
        "tokens_per_second_per_gpu": step.tokens_per_second_per_gpu,
    }))
}

/// An exact integer as JSON (a float only past `u64`).
fn big(x: u128) -> Value {
    u64::try_from(x).map_or_else(|_| json!(x as f64), Value::from)
}

/// One logged value against the recomputed one.
struct Compared {
    key: String,
    logged: Value,
    expected: Value,
    ok: bool,
}

fn compare_file(path: &Path, doc: &Value, rtol: f64, atol: f64) -> Result<Vec<Compared>> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("cannot read {}", path.display()))?;
    let logged: Value =
        serde_json::from_str(&text).with_context(|| format!("{} is not JSON", path.display()))?;
    if !logged.is_object() {
        bail!("{}: expected a JSON object of logged values", path.display());
    }
    let expected: Map<String, Value> = flatten(doc).into_iter().collect();
    let mut out = Vec::new();
    for (key, value) in flatten(&logged) {
        let Some(e) = expected.get(&key) else {
            let mut near: Vec<&String> = expected
                .keys()
                .filter(|k| k.ends_with(key.rsplit('.').next().unwrap_or("")))
                .collect();
            near.truncate(5);
            bail!(
                "{}: logged key `{key}` is not in the record (similar keys: {near:?}); see `thdcheck metrics --json`",
                path.display()
            );
        };
        out.push(Compared {
            ok: agrees(&value, e, rtol, atol),
            key,
            logged: value,
            expected: e.clone(),
        });
    }
    if out.is_empty() {
        bail!("{}: no logged values to compare", path.display());
    }
    Ok(out)
}

/// Integers must match exactly; other numbers within `max(atol, rtol·|expected|)`.
fn agrees(logged: &Value, expected: &Value, rtol: f64, atol: f64) -> bool {
    match (logged, expected) {
        (Value::Number(l), Value::Number(e)) => {
            if let (Some(a), Some(b)) = (
                l.as_i64().or(l.as_u64().map(|x| x as i64)),
                e.as_i64().or(e.as_u64().map(|x| x as i64)),
            ) && (l.is_i64() || l.is_u64())
                && (e.is_i64() || e.is_u64())
            {
                return a == b;
            }
            match (l.as_f64(), e.as_f64()) {
                (Some(a), Some(b)) => (a - b).abs() <= atol.max(rtol * b.abs()),
                _ => false,
            }
        }
        _ => logged == expected,
    }
}

/// Nested objects as dotted keys (`throughput.mfu_pct.useful`); arrays index with `[i]`.
fn flatten(v: &Value) -> Vec<(String, Value)> {
    fn walk(prefix: &str, v: &Value, out: &mut Vec<(String, Value)>) {
        match v {
            Value::Object(m) => {
                for (k, x) in m {
                    let key = if prefix.is_empty() { k.clone() } else { format!("{prefix}.{k}") };
                    walk(&key, x, out);
                }
            }
            Value::Array(a) if a.iter().any(|x| x.is_object() || x.is_array()) => {
                for (i, x) in a.iter().enumerate() {
                    walk(&format!("{prefix}[{i}]"), x, out);
                }
            }
            _ => out.push((prefix.to_owned(), v.clone())),
        }
    }
    let mut out = Vec::new();
    walk("", v, &mut out);
    out
}
