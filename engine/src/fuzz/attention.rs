//! Packed attention: q, k and v of a packed layout of documents (real and padded offsets,
//! position ids; with `--cp-size` every zigzag rank's shard) in the `--dtype`, causal or not;
//! the adapter answers the output (and optionally the log-sum-exp), every rank's with CP.
//!
//! A case is sent several times: as drawn, then (two documents or more) with the inputs of the
//! even documents and of the padding perturbed, and with those of the odd documents perturbed
//! (isolation: every other document's output must not move by one bit), then (causal) with the
//! last real token of every document perturbed (causality: no earlier query of the document may
//! move). The truth is the oracle's per-document attention in f64 (`oracle::varlen_attention`
//! on the real rows, back to back), the FlashAttention bound the oracle's own error in the dtype
//! (`oracle::tolerance::flash_rule`), the LSE `oracle::attention::varlen_lse`; the rules of
//! `rules::checks::attention` compare. Neither `thd` nor the adapter's code computes any of
//! it.

use std::cell::Cell;

use candle_core::{DType, Device, Tensor};
use oracle::AttnSpec;
use oracle::tolerance::{ToleranceClass, tolerance};
use properties::strategies::fuzz::{
    AttentionFuzzCase, AttentionFuzzParams, AttnDoc, AttnDtype, QkvIndex, QkvTensor,
    arb_attention_fuzz_case,
};
use proptest::prelude::*;
use proptest::strategy::BoxedStrategy;
use rules::checks::{
    AttentionInput, AttentionLayout, FlashBound, FuzzTarget, Perturbed, judge_attention,
    zigzag_positions,
};
use serde_json::Value;

use super::{Applied, Failure, Target, response};
use crate::protocol::{
    AttentionRequest, AttentionResponse, AttentionShard, JsonF64, Rows3, quote_non_finite,
};

/// The attention target.
pub struct AttentionTarget {
    /// The rules the run judged, for the report.
    pub(crate) applied: Applied,
    /// What the flags fix of the cases.
    pub params: AttentionFuzzParams,
    /// The dtype of q, k, v.
    pub dtype: AttnDtype,
    /// The largest `max|out − ref64| / bound` of the passing answers.
    worst_ratio: Cell<f64>,
}

impl AttentionTarget {
    /// A target for `params` in `dtype`.
    pub fn new(params: AttentionFuzzParams, dtype: AttnDtype) -> Self {
        Self { applied: Applied::default(), params, dtype, worst_ratio: Cell::new(0.0) }
    }
}

/// One request of a case.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Run {
    /// As drawn.
    Base,
    /// The documents of this parity perturbed (and with parity 0, every padding row).
    Isolation(usize),
    /// Every document's last real token perturbed.
    Causal,
}

impl Run {
    fn bumps(self, case: &AttentionFuzzCase, doc: usize, j: usize) -> bool {
        let len = case.docs[doc].len as usize;
        match self {
            Run::Base => false,
            Run::Isolation(parity) => doc % 2 == parity || (parity == 0 && j >= len),
            Run::Causal => len >= 2 && j + 1 == len,
        }
    }
}

fn runs(case: &AttentionFuzzCase) -> Vec<Run> {
    let mut out = vec![Run::Base];
    if case.docs.len() >= 2 {
        out.extend([Run::Isolation(0), Run::Isolation(1)]);
    }
    if case.causal && case.docs.iter().any(|d| d.len >= 2) {
        out.push(Run::Causal);
    }
    out
}

fn nest(flat: &[f64], heads: usize, dim: usize) -> Rows3 {
    flat.chunks(heads * dim).map(|row| row.chunks(dim).map(<[f64]>::to_vec).collect()).collect()
}

fn offsets(lens: &[u32]) -> Vec<i64> {
    std::iter::once(0)
        .chain(lens.iter().scan(0i64, |a, &l| {
            *a += i64::from(l);
            Some(*a)
        }))
        .collect()
}

impl AttentionTarget {
    fn request(&self, case: &AttentionFuzzCase, run: Run) -> AttentionRequest {
        let storage = case.storage();
        let bump = |doc: usize, j: usize| run.bumps(case, doc, j);
        let [q, k, v] =
            [QkvTensor::Q, QkvTensor::K, QkvTensor::V].map(|t| case.tensor(t, self.dtype, &bump));
        let position_ids: Vec<i64> =
            storage.iter().flat_map(|&p| (0..i64::from(p)).collect::<Vec<_>>()).collect();
        let mut req = AttentionRequest {
            dtype: self.dtype.name().to_owned(),
            causal: case.causal,
            heads: case.heads,
            kv_heads: case.kv_heads,
            head_dim: case.head_dim,
            cu_seqlens: offsets(&case.lens()),
            cu_seqlens_padded: offsets(&storage),
            max_seqlen: case.lens().into_iter().max().unwrap_or(0),
            position_ids: position_ids.clone(),
            q: None,
            k: None,
            v: None,
            cp_size: None,
            cp_layout: None,
            ranks: None,
        };
        let (hq, hk, d) = (case.heads, case.kv_heads, case.head_dim);
        if case.cp == 1 {
            req.q = Some(nest(&q, hq, d));
            req.k = Some(nest(&k, hk, d));
            req.v = Some(nest(&v, hk, d));
            return req;
        }
        let rows = |x: &[f64], heads: usize, held: &[usize]| -> Rows3 {
            held.iter()
                .map(|&g| nest(&x[g * heads * d..(g + 1) * heads * d], heads, d)[0].clone())
                .collect()
        };
        req.cp_size = Some(case.cp);
        req.cp_layout = Some("zigzag".into());
        req.ranks = Some(
            (0..case.cp)
                .map(|r| {
                    let held = zigzag_positions(&storage, case.cp, r);
                    AttentionShard {
                        cp_rank: r,
                        position_ids: held.iter().map(|&g| position_ids[g]).collect(),
                        q: rows(&q, hq, &held),
                        k: rows(&k, hk, &held),
                        v: rows(&v, hk, &held),
                    }
                })
                .collect(),
        );
        req
    }

    /// The answer in storage order: `[T, heads, head_dim]` and `[T, heads]` (the LSE, if any).
    fn read(
        &self,
        case: &AttentionFuzzCase,
        resp: AttentionResponse,
        line: &str,
    ) -> Result<(Vec<f64>, Option<Vec<f64>>), Failure> {
        let (h, d) = (case.heads, case.head_dim);
        let t = case.tokens();
        type Parts = Vec<(Vec<usize>, Vec<Vec<Vec<JsonF64>>>, Option<Vec<Vec<JsonF64>>>)>;
        let parts: Parts = if case.cp == 1 {
            let Some(out) = resp.out else {
                return Err(Failure::schema("`out` is expected (no `cp_size` was sent)", line));
            };
            vec![((0..t).collect(), out, resp.lse)]
        } else {
            let Some(ranks) = resp.ranks else {
                return Err(Failure::schema("`ranks` is expected (one per CP rank)", line));
            };
            if ranks.len() != case.cp {
                return Err(Failure::schema(
                    format!("{} entries in `ranks` for cp_size {}", ranks.len(), case.cp),
                    line,
                ));
            }
            if ranks.iter().any(|r| r.lse.is_some()) && ranks.iter().any(|r| r.lse.is_none()) {
                return Err(Failure::schema("`lse` on some ranks only", line));
            }
            let storage = case.storage();
            ranks
                .into_iter()
                .enumerate()
                .map(|(r, a)| (zigzag_positions(&storage, case.cp, r), a.out, a.lse))
                .collect()
        };
        let with_lse = parts.iter().all(|p| p.2.is_some()) && !parts.is_empty();
        let mut out = vec![0.0; t * h * d];
        let mut lse = vec![0.0; t * h];
        for (r, (held, o, l)) in parts.into_iter().enumerate() {
            let whose = if case.cp == 1 { String::new() } else { format!("rank {r}: ") };
            if o.len() != held.len() {
                return Err(Failure::schema(
                    format!("{whose}{} rows in `out` for {} tokens", o.len(), held.len()),
                    line,
                ));
            }
            for (row, &g) in o.iter().zip(&held) {
                if row.len() != h || row.iter().any(|x| x.len() != d) {
                    return Err(Failure::schema(
                        format!("{whose}`out` rows are [heads {h}, head_dim {d}]"),
                        line,
                    ));
                }
                for (i, x) in row.iter().flatten().enumerate() {
                    out[g * h * d + i] = x.0;
                }
            }
            if let Some(l) = l.filter(|_| with_lse) {
                if l.len() != held.len() || l.iter().any(|x| x.len() != h) {
                    return Err(Failure::schema(
                        format!("{whose}`lse` is [{} tokens, heads {h}]", held.len()),
                        line,
                    ));
                }
                for (row, &g) in l.iter().zip(&held) {
                    for (i, x) in row.iter().enumerate() {
                        lse[g * h + i] = x.0;
                    }
                }
            }
        }
        Ok((out, with_lse.then_some(lse)))
    }
}

/// The oracle on the real rows, scattered to storage order: the output, the LSE and the
/// FlashAttention rule's terms in the dtype.
fn oracle(case: &AttentionFuzzCase, dtype: AttnDtype) -> (Vec<f64>, Vec<f64>, FlashBound) {
    let (h, hk, d) = (case.heads, case.kv_heads, case.head_dim);
    let lens = case.lens();
    let real: usize = lens.iter().map(|&s| s as usize).sum();
    let t = case.tokens();
    let mut bound = FlashBound { dtype: dtype.name(), naive_max_err: 0.0, floor: 0.0 };
    let (mut truth, mut lse) = (vec![0.0; t * h * d], vec![0.0; t * h]);
    if real == 0 {
        return (truth, lse, bound);
    }
    let dev = Device::Cpu;
    let tensor = |which: QkvTensor, heads: usize| {
        let mut x = Vec::with_capacity(real * heads * d);
        for (doc, &s) in lens.iter().enumerate() {
            for j in 0..s as usize {
                for hh in 0..heads {
                    x.extend((0..d).map(|e| {
                        let at = QkvIndex { doc, token: j, head: hh, dim: e };
                        case.value(which, at, dtype, false)
                    }));
                }
            }
        }
        Tensor::from_vec(x, (real, heads, d), &dev).expect("a [T, H, D] tensor")
    };
    let (q, k, v) = (tensor(QkvTensor::Q, h), tensor(QkvTensor::K, hk), tensor(QkvTensor::V, hk));
    let spec = AttnSpec { causal: case.causal, ..Default::default() };
    let exact = oracle::varlen_attention(&q, &k, &v, &lens, &lens, &spec)
        .expect("the oracle accepts every generated layout");
    let low = match dtype {
        AttnDtype::F32 => DType::F32,
        AttnDtype::Bf16 => DType::BF16,
        AttnDtype::F16 => DType::F16,
    };
    let cast = |x: &Tensor| x.to_dtype(low).expect("a cast to the dtype");
    let naive = oracle::varlen_attention(&cast(&q), &cast(&k), &cast(&v), &lens, &lens, &spec)
        .expect("the oracle accepts every generated layout");
    let report = oracle::tolerance::flash_rule(&naive, &naive, &exact)
        .expect("the naive and exact outputs have one shape");
    bound.naive_max_err = report.naive_max_err;
    let mut floor = report.floor;
    if case.cp > 1 {
        // A CP attention merges each rank's partial softmax by its log-sum-exp, rounding in the
        // dtype at every merge: its naive reference is that merge computed the obvious way in
        // the dtype (zigzag: rank r holds chunks r and 2·cp−1−r of every slot).
        let storage = case.storage();
        let cp = case.cp;
        let piece = |doc: usize, j: usize| {
            let chunk = (storage[doc] as usize / (2 * cp)).max(1);
            let c = (j / chunk).min(2 * cp - 1);
            if c < cp { c } else { 2 * cp - 1 - c }
        };
        let merged = oracle::attention::varlen_attention_merged(
            &cast(&q),
            &cast(&k),
            &cast(&v),
            &lens,
            &spec,
            cp,
            &piece,
        )
        .expect("the oracle accepts every generated layout");
        let ring = oracle::tolerance::flash_rule(&merged, &merged, &exact)
            .expect("the merged and exact outputs have one shape");
        bound.naive_max_err = bound.naive_max_err.max(ring.naive_max_err);
        floor = floor.max(ring.floor);
    }
    let exact = exact.flatten_all().and_then(|x| x.to_vec1::<f64>()).expect("f64 values");
    // FA3's floor can be 0 (`r + 0.3 − 0.3` exact in the dtype for every value), and so can the
    // naive error (a row of one key): an answer rounded once to the dtype is then out of a bound
    // of 0. The floor is at least one unit in the last place of the dtype at the largest value.
    let top = exact.iter().fold(0.0f64, |m, x| m.max(x.abs()));
    let ulp = if top > 0.0 {
        2f64.powi(top.log2().floor() as i32 - (dtype.significand_bits() - 1))
    } else {
        0.0
    };
    bound.floor = floor.max(ulp);
    let exact_lse = oracle::attention::varlen_lse(&q, &k, &v, &lens, &lens, &spec)
        .expect("the oracle accepts every generated layout");
    // Scatter: document `doc`'s real rows sit at the start of its slot.
    let (mut packed, mut slot) = (0usize, 0usize);
    for (&s, &p) in lens.iter().zip(&case.storage()) {
        for j in 0..s as usize {
            let (src, dst) = (packed + j, slot + j);
            truth[dst * h * d..(dst + 1) * h * d]
                .copy_from_slice(&exact[src * h * d..(src + 1) * h * d]);
            lse[dst * h..(dst + 1) * h].copy_from_slice(&exact_lse[src * h..(src + 1) * h]);
        }
        packed += s as usize;
        slot += p as usize;
    }
    (truth, lse, bound)
}

impl Target for AttentionTarget {
    type Case = AttentionFuzzCase;

    fn kind(&self) -> &'static str {
        "attention"
    }

    fn invariants(&self) -> String {
        let cp = match self.params.cp {
            1 => String::new(),
            cp => format!(", cp {cp} zigzag"),
        };
        format!(
            "{} ({}{cp}, against the oracle's f64 attention per document)",
            self.applied.text(FuzzTarget::Attention),
            self.dtype.name()
        )
    }

    /// [`arb_attention_fuzz_case`] with the flags' CP size, causality and padding.
    fn strategy(&self) -> BoxedStrategy<AttentionFuzzCase> {
        arb_attention_fuzz_case(self.params).boxed()
    }

    fn minimizes(&self) -> bool {
        true
    }

    /// One document removed, one document one token shorter, one padding token fewer, a
    /// smaller head shape (fewer heads or KV heads), the head dimension one lower.
    fn reductions(&self, case: &AttentionFuzzCase) -> Vec<AttentionFuzzCase> {
        let mut out = Vec::new();
        let with_docs = |docs: Vec<AttnDoc>| AttentionFuzzCase { docs, ..case.clone() };
        for i in 0..case.docs.len() {
            let mut docs = case.docs.clone();
            docs.remove(i);
            out.push(with_docs(docs));
        }
        for i in 0..case.docs.len() {
            for shorter in [true, false] {
                let mut docs = case.docs.clone();
                let n = if shorter { &mut docs[i].len } else { &mut docs[i].pad };
                if *n > 0 {
                    *n -= 1;
                    out.push(with_docs(docs));
                }
            }
        }
        for (h, kv) in [(1, 1), (2, 1), (2, 2), (4, 1), (4, 2)] {
            if h <= case.heads && kv <= case.kv_heads && (h, kv) != (case.heads, case.kv_heads) {
                out.push(AttentionFuzzCase { heads: h, kv_heads: kv, ..case.clone() });
            }
        }
        if case.head_dim > 1 {
            out.push(AttentionFuzzCase { head_dim: case.head_dim - 1, ..case.clone() });
        }
        out
    }

    fn payload(&self, case: &AttentionFuzzCase) -> Value {
        serde_json::to_value(self.request(case, Run::Base)).unwrap_or(Value::Null)
    }

    fn payloads(&self, case: &AttentionFuzzCase) -> Vec<Value> {
        runs(case)
            .into_iter()
            .map(|run| serde_json::to_value(self.request(case, run)).unwrap_or(Value::Null))
            .collect()
    }

    fn judge(
        &self,
        case: &AttentionFuzzCase,
        send: &mut dyn FnMut() -> Result<String, Failure>,
    ) -> Result<(), Failure> {
        let mut answers = Vec::new();
        let mut first_line = String::new();
        for run in runs(case) {
            // Python's json.dumps writes a NaN as a bare NaN: read it as one.
            let mut quoted = || {
                send().map(|raw| {
                    if raw.contains("NaN") || raw.contains("Infinity") {
                        quote_non_finite(&raw)
                    } else {
                        raw
                    }
                })
            };
            let (resp, line) = response::<AttentionResponse>(&mut quoted)?;
            let answer = self.read(case, resp, &line)?;
            if run == Run::Base {
                first_line = line;
            }
            answers.push((run, answer));
        }
        let (truth, truth_lse, bound) = oracle(case, self.dtype);
        let lens = case.lens();
        let storage = case.storage();
        let layout = AttentionLayout {
            lens: &lens,
            storage: &storage,
            heads: case.heads,
            head_dim: case.head_dim,
            causal: case.causal,
        };
        let (out, lse) = &answers[0].1;
        let parity: Vec<Vec<bool>> =
            (0..2).map(|p| (0..case.docs.len()).map(|d| d % 2 == p).collect()).collect();
        let isolation: Vec<Perturbed<'_>> = answers
            .iter()
            .filter_map(|(run, (o, _))| match run {
                Run::Isolation(p) => {
                    Some(Perturbed { docs: &parity[*p], padding: *p == 0, out: o })
                }
                _ => None,
            })
            .collect();
        let causality =
            answers.iter().find(|(run, _)| *run == Run::Causal).map(|(_, (o, _))| o.as_slice());
        let tol = tolerance(ToleranceClass::Attention, DType::F32);
        let input = AttentionInput {
            layout,
            out,
            truth: &truth,
            bound,
            lse: lse.as_deref(),
            truth_lse: &truth_lse,
            lse_tol: (tol.rtol, tol.atol),
            isolation: &isolation,
            causality,
        };
        let violations = self.applied.with(|a| judge_attention(&input, a));
        let Some(first) = violations.first() else {
            if bound.bound() > 0.0 {
                let w = case.heads * case.head_dim;
                let worst = layout
                    .rows()
                    .iter()
                    .filter(|r| r.real)
                    .flat_map(|r| {
                        (r.token * w..(r.token + 1) * w).map(|i| (out[i] - truth[i]).abs())
                    })
                    .fold(0.0f64, f64::max);
                self.worst_ratio.set(self.worst_ratio.get().max(worst / bound.bound()));
            }
            return Ok(());
        };
        let mut failure = Failure::stated(first.clone());
        failure.response = Some(first_line);
        for v in &violations[1..] {
            failure.checks.push(v.id.to_owned());
            failure.detail += &format!("\n{}: {}: {}", v.id, v.rule, v.summary());
        }
        Err(failure)
    }

    fn summary(&self) -> Option<(String, Value)> {
        let r = self.worst_ratio.get();
        Some((
            format!(
                "largest max|out − ref64| / FlashAttention bound over the passing cases: {r:.3}"
            ),
            serde_json::json!({ "worst_error_over_bound": r }),
        ))
    }
}
