//! Loggers: the adapter gets the micro-batches of one step (the batch dicts a collator returns,
//! global before any CP split) with the model, the CP and DP sizes, the GPU count, the step time
//! and the peak, and answers the values it would log, under the record names of
//! `thdcheck metrics` (`tokens.real`, `flops.useful`, `mfu_pct.useful`, …). Each value is judged
//! against thd's exact accounting of the same dicts, read as `thdcheck check` reads a dumped
//! file, with `rules::checks::check_logged` (`logged-tokens` TOKENS-CP, `logged-flops`
//! FLOPS, `logged-rate` MFU-PAD): counts and FLOPs exact, rates within the tolerance, and a
//! value off by the CP, DP, micro-batch or GPU factor says so.

use std::collections::BTreeMap;

use crate::protocol::batch_to_safetensors;
use properties::strategies::fuzz::{
    LoggerFuzzCase, LoggerFuzzParams, LoggerLayout, LoggerLayoutKind, arb_logger_fuzz_case,
};
use proptest::strategy::{BoxedStrategy, Strategy};
use reader::formats::{ReadOptions, parse};
use reader::tensors::BatchFile;
use rules::checks::{FuzzTarget, LoggedKind, LoggedTolerance, Number, RULES, check_logged};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};
use thd::metrics::{FlopsFormula, HardwareView, ModelDims, StepTiming};

use super::{Applied, Failure, Target, response};
use crate::metrics_cmd::{MicroBatch, StepSpec, flatten_record, step_metrics};

use crate::args::{Formula, LayoutKind};

impl Formula {
    fn thd(self) -> FlopsFormula {
        match self {
            Formula::MegatronLm => FlopsFormula::MegatronLm,
            Formula::BionemoPerfLogger => FlopsFormula::BionemoPerfLogger,
        }
    }
}

impl LayoutKind {
    fn generated(self) -> LoggerLayoutKind {
        match self {
            LayoutKind::Flat => LoggerLayoutKind::Flat,
            LayoutKind::MockPad => LoggerLayoutKind::MockPad,
            LayoutKind::CpPad => LoggerLayoutKind::CpPad,
            LayoutKind::Bshd => LoggerLayoutKind::Bshd,
        }
    }
}

/// The logger request (after the envelope).
#[derive(Debug, Clone, Serialize)]
struct LoggerRequest<'a> {
    model: ModelDims,
    formula: FlopsFormula,
    hardware_view: &'static str,
    cp_size: u64,
    dp_size: u64,
    num_gpus: u64,
    step_time_s: f64,
    peak_tflops_per_gpu: f64,
    layout: LoggerLayout,
    micro_batches: &'a [Map<String, Value>],
}

/// The answer: logged values under record names.
#[derive(Debug, Clone, Deserialize)]
struct LoggerResponse {
    logged: BTreeMap<String, Value>,
}

/// The logger target.
pub struct LoggerTarget {
    /// The rules the run judged, for the report.
    pub(crate) applied: Applied,
    /// Tolerance for rates.
    pub tol: LoggedTolerance,
    /// Peak TFLOP/s per GPU sent with every request.
    pub peak_tflops: f64,
    /// The formula the logger implements.
    pub formula: Formula,
    /// The layouts generated.
    pub layouts: Vec<LayoutKind>,
    /// The pad id (`--pad-token-id`, default 0).
    pub pad: i64,
    /// At most this many micro-batches per step.
    pub max_micro_batches: usize,
    /// The largest CP size.
    pub max_cp: u64,
}

/// The default relative tolerance of logged rates: a float32 metric accumulator (bionemo's
/// torchmetrics) rounds a correct TFLOP/s or MFU at about 4e-8 relative; a rate computed from a
/// wrong count or a wrong Σs² is off by far more (the smallest seed bug, one mock token in a
/// 24-token step, moves the useful MFU by about 1e-2).
pub const DEFAULT_RTOL: f64 = 1e-6;

/// The batch dict of micro-batch `i` of a case.
fn batch(case: &LoggerFuzzCase, i: usize) -> Map<String, Value> {
    let docs = &case.micro_batches[i];
    if case.layout == LoggerLayout::Bshd {
        return rows(case, docs);
    }
    let (mut ids, mut labels) = (Vec::new(), Vec::new());
    let (mut cu, mut cu_padded) = (vec![0i64], vec![0i64]);
    let multiple = 2 * case.cp as usize;
    for (d, &(len, prompt)) in docs.iter().enumerate() {
        for t in 0..len as usize {
            let id = case.token(d, t);
            ids.push(id);
            // Unshifted labels: a document's first token and its prompt predict nothing.
            labels.push(if t == 0 || t < prompt as usize { -100 } else { id });
        }
        cu.push(cu[cu.len() - 1] + i64::from(len));
        let slot = match case.layout {
            LoggerLayout::CpPad => (len as usize).div_ceil(multiple) * multiple,
            _ => len as usize,
        };
        for _ in len as usize..slot {
            ids.push(case.pad);
            labels.push(-100);
        }
        cu_padded.push(cu_padded[cu_padded.len() - 1] + slot as i64);
    }
    let mut batch = Map::new();
    let n_real = docs.len();
    if let LoggerLayout::MockPad(m) = case.layout {
        let t = ids.len();
        let target = t.div_ceil(m as usize) * m as usize;
        if target > t {
            ids.resize(target, case.pad);
            labels.resize(target, -100);
            cu.push(target as i64);
        }
        batch.insert("num_real_seqs".into(), json!(n_real));
    }
    let t = ids.len();
    batch.insert("input_ids".into(), json!([ids]));
    batch.insert("labels".into(), json!([labels]));
    batch.insert("cu_seq_lens_q".into(), json!(cu));
    batch.insert("cu_seq_lens_k".into(), json!(cu));
    if case.layout == LoggerLayout::CpPad {
        batch.insert("cu_seq_lens_q_padded".into(), json!(cu_padded));
        batch.insert("cu_seq_lens_k_padded".into(), json!(cu_padded));
    }
    debug_assert!(cu_padded.last().copied().unwrap_or(0) as usize <= t);
    batch
}

/// One document per row, right-padded to the longest (`[B, S]`, no offsets).
fn rows(case: &LoggerFuzzCase, docs: &[(u32, u32)]) -> Map<String, Value> {
    let width = docs.iter().map(|&(len, _)| len as usize).max().unwrap_or(0);
    let (mut ids, mut labels, mut mask) = (Vec::new(), Vec::new(), Vec::new());
    for (d, &(len, prompt)) in docs.iter().enumerate() {
        let (mut row, mut row_labels, mut row_mask) = (Vec::new(), Vec::new(), Vec::new());
        for t in 0..width {
            if t < len as usize {
                let id = case.token(d, t);
                row.push(id);
                row_labels.push(if t == 0 || t < prompt as usize { -100 } else { id });
                row_mask.push(1);
            } else {
                row.push(case.pad);
                row_labels.push(-100);
                row_mask.push(0);
            }
        }
        ids.push(row);
        labels.push(row_labels);
        mask.push(row_mask);
    }
    let mut batch = Map::new();
    batch.insert("input_ids".into(), json!(ids));
    batch.insert("labels".into(), json!(labels));
    batch.insert("attention_mask".into(), json!(mask));
    batch
}

/// Every micro-batch's batch dict.
fn batches(case: &LoggerFuzzCase) -> Vec<Map<String, Value>> {
    (0..case.micro_batches.len()).map(|i| batch(case, i)).collect()
}

/// The step as `thdcheck metrics` accounts it.
fn spec(case: &LoggerFuzzCase, peak_tflops: f64) -> StepSpec {
    StepSpec {
        dims: case.dims(),
        formula: case.formula,
        view: HardwareView::Varlen,
        timing: StepTiming {
            step_time_s: case.step_time_s,
            num_gpus: case.cp * case.dp,
            peak_flops_per_gpu: peak_tflops * 1e12,
        },
        dp: case.dp,
        check: reader::CheckOptions::default(),
    }
}

impl Target for LoggerTarget {
    type Case = LoggerFuzzCase;

    fn kind(&self) -> &'static str {
        "logger"
    }

    fn invariants(&self) -> String {
        self.applied.text(FuzzTarget::Logger)
    }

    /// [`arb_logger_fuzz_case`] with the command's layouts, formula, pad id, micro-batches and
    /// largest CP size.
    fn strategy(&self) -> BoxedStrategy<LoggerFuzzCase> {
        arb_logger_fuzz_case(LoggerFuzzParams {
            layouts: self.layouts.iter().map(|k| k.generated()).collect(),
            formula: self.formula.thd(),
            pad: self.pad,
            max_micro_batches: self.max_micro_batches,
            max_cp: self.max_cp,
        })
        .boxed()
    }

    fn minimizes(&self) -> bool {
        true
    }

    /// Smaller steps: a micro-batch or a document removed (one of each is kept), a document
    /// one token shorter or its prompt one shorter, half the CP size (to 1 only where the
    /// layout allows any CP size), DP size 1, model 0.
    fn reductions(&self, case: &LoggerFuzzCase) -> Vec<LoggerFuzzCase> {
        let mut out = Vec::new();
        let mbs = &case.micro_batches;
        for m in 0..mbs.len() {
            if mbs.len() > 1 {
                let mut c = case.clone();
                c.micro_batches.remove(m);
                out.push(c);
            }
            for d in 0..mbs[m].len() {
                if mbs[m].len() > 1 {
                    let mut c = case.clone();
                    c.micro_batches[m].remove(d);
                    out.push(c);
                }
                let (len, prompt) = mbs[m][d];
                if len > 1 {
                    let mut c = case.clone();
                    c.micro_batches[m][d] = (len - 1, prompt.min(len - 1));
                    out.push(c);
                }
                if prompt > 0 {
                    let mut c = case.clone();
                    c.micro_batches[m][d] = (len, prompt - 1);
                    out.push(c);
                }
            }
        }
        if case.cp > 1 {
            out.push(LoggerFuzzCase { cp: case.cp / 2, ..case.clone() });
        }
        if case.dp > 1 {
            out.push(LoggerFuzzCase { dp: 1, ..case.clone() });
        }
        if case.model > 0 {
            out.push(LoggerFuzzCase { model: 0, ..case.clone() });
        }
        out
    }

    fn payload(&self, case: &LoggerFuzzCase) -> Value {
        let batches = batches(case);
        serde_json::to_value(LoggerRequest {
            model: case.dims(),
            formula: case.formula,
            hardware_view: "varlen",
            cp_size: case.cp,
            dp_size: case.dp,
            num_gpus: case.cp * case.dp,
            step_time_s: case.step_time_s,
            peak_tflops_per_gpu: self.peak_tflops,
            layout: case.layout,
            micro_batches: &batches,
        })
        .unwrap_or(Value::Null)
    }

    fn judge(
        &self,
        case: &LoggerFuzzCase,
        send: &mut dyn FnMut() -> Result<String, Failure>,
    ) -> Result<(), Failure> {
        let (resp, line) = response::<LoggerResponse>(send)?;
        let with = |mut f: Failure| {
            f.response = Some(line.clone());
            f
        };
        let expected = expected(case, self.peak_tflops).map_err(with)?;
        let schema = |detail: String| Failure {
            kind: "schema",
            checks: vec![],
            detail,
            response: Some(line.clone()),
        };
        if resp.logged.is_empty() {
            return Err(schema("`logged` holds no value: answer at least one record key".into()));
        }
        let factors =
            [("CP", case.cp), ("DP", case.dp), ("micro-batch", case.micro_batches.len() as u64)];
        let mut violations = Vec::new();
        for (key, value) in &resp.logged {
            let Some(want) = expected.get(key) else {
                let known: Vec<&String> = expected.keys().collect();
                return Err(schema(format!(
                    "`logged.{key}` is not a record key; the keys are {known:?}"
                )));
            };
            let Some(got) = number(value) else {
                return Err(schema(format!("`logged.{key}` = {value} is not a number")));
            };
            let Some(want) = number(want) else { continue };
            let kind = LoggedKind::of_record_key(key);
            if let Some(rule) = kind.rule() {
                self.applied.with(|a| {
                    if !a.contains(&rule.id) {
                        a.push(rule.id);
                    }
                });
            }
            if let Err(v) = check_logged(key, kind, got, want, self.tol, &factors) {
                violations.push(v);
            }
        }
        // Counts feed FLOPs, FLOPs feed rates: the most basic wrong value names the failure
        // (the registry's order).
        let rank = |id: &str| RULES.iter().position(|r| r.id == id);
        violations.sort_by_key(|v| rank(v.id));
        let mut checks: Vec<String> = violations.iter().map(|v| v.id.to_owned()).collect();
        checks.dedup();
        match violations.first() {
            None => Ok(()),
            Some(_) => Err(with(Failure {
                kind: "violation",
                checks,
                detail: violations
                    .iter()
                    .map(|v| format!("{}: {}", v.id, v.summary()))
                    .collect::<Vec<_>>()
                    .join("\n"),
                response: None,
            })),
        }
    }
}

/// The record of the case's step, flattened (`tokens.real` → value), computed by reading the
/// same dicts the adapter got.
fn expected(case: &LoggerFuzzCase, peak_tflops: f64) -> Result<BTreeMap<String, Value>, Failure> {
    let internal = |e: String| Failure {
        kind: "violation",
        checks: vec![rules::checks::BATCH_READABLE.id.into()],
        detail: format!("thdcheck cannot read its own generated batch (a thdcheck bug): {e}"),
        response: None,
    };
    let mut mbs = Vec::new();
    for (i, batch) in batches(case).iter().enumerate() {
        let bytes = batch_to_safetensors(batch).map_err(|e| internal(e.to_string()))?;
        let file = BatchFile::from_bytes(bytes).map_err(|e| internal(e.to_string()))?;
        let parsed = parse(file, &ReadOptions::default()).map_err(|e| internal(e.to_string()))?;
        mbs.push(MicroBatch { label: format!("micro-batch {i}"), packs: parsed.packs, cp: 1 });
    }
    let step = step_metrics(&mbs, &spec(case, peak_tflops)).map_err(|e| internal(e.to_string()))?;
    Ok(flatten_record(&step.record))
}

fn number(v: &Value) -> Option<Number> {
    crate::metrics_cmd::number(v)
}
