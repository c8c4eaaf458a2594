//! Collators: the batch they return is checked like a dumped file (`thdcheck check`, with the
//! same read and check options), and it must hold exactly the examples it was given, up to the
//! rewrites declared on the command line (`--mlm`, `--add-bos`, `--add-eos`).

use crate::protocol::{CollatorExample, CollatorMode, CollatorRequest, batch_to_safetensors};
use properties::strategies::fuzz::{CollatorFuzzParams, CollatorInput, arb_collator_fuzz_case};
use proptest::strategy::{BoxedStrategy, Strategy};
use reader::formats::{ReadOptions, parse};
use reader::pack::BatchData;
use reader::tensors::BatchFile;
use reader::{CheckOptions, FileReport};
use rules::checks::{
    CollatorPack, FuzzTarget, Outcome, check_dpo_concatenated_present, check_packs_present,
    judge_collator,
};
use serde::Deserialize;
use serde_json::Value;

use super::{Applied, Failure, Target, response};

/// The collator target.
pub struct CollatorTarget {
    /// SFT or DPO requests.
    pub mode: CollatorMode,
    /// How the returned batch is read (`thdcheck check`'s options).
    pub read: ReadOptions,
    /// How it is checked.
    pub opts: CheckOptions,
    /// What the collator may do to the examples' tokens.
    pub rewrites: Rewrites,
    /// Which requests ask for a static `max_seq_length`.
    pub static_length: StaticLength,
    /// Some requests' `max_seq_length` is below what the examples need: the collator keeps the
    /// longest prefix of examples that fits (open-instruct's `count_features_within_token_budget`).
    pub over_budget: bool,
    /// The rules the run judged, for the report.
    pub(crate) applied: Applied,
}

use crate::args::StaticLength;

/// Rewrites of the examples' tokens a collator declares; `documents` allows exactly these.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Rewrites {
    /// Masked LM: any input id may be replaced (mask or random token); only the segment
    /// lengths are compared, and labels are not compared with ids.
    pub mlm: bool,
    /// A token inserted at the start of each example.
    pub bos: Option<i64>,
    /// A token appended to each example.
    pub eos: Option<i64>,
}

impl Rewrites {
    /// Tokens the collator adds to each example.
    fn added(&self) -> usize {
        usize::from(self.bos.is_some()) + usize::from(self.eos.is_some())
    }

    /// The example as the collator should put it in the pack.
    fn apply(&self, ex: &[i64]) -> Vec<i64> {
        self.bos.into_iter().chain(ex.iter().copied()).chain(self.eos).collect()
    }
}

#[derive(Deserialize)]
struct CollatorResponse {
    batch: serde_json::Map<String, Value>,
}

impl StaticLength {
    fn generated(self) -> properties::strategies::fuzz::StaticLength {
        use properties::strategies::fuzz::StaticLength as Generated;
        match self {
            StaticLength::Sometimes => Generated::Sometimes,
            StaticLength::Never => Generated::Never,
            StaticLength::Always => Generated::Always,
        }
    }
}

impl Target for CollatorTarget {
    type Case = CollatorRequest;

    fn kind(&self) -> &'static str {
        "collator"
    }

    fn invariants(&self) -> String {
        let dpo = match self.mode {
            CollatorMode::Sft => "",
            CollatorMode::Dpo => " and its concatenated chosen / rejected",
        };
        format!(
            "every `check` rule on the batch{dpo}, then {}",
            self.applied.text(FuzzTarget::Collator)
        )
    }

    /// [`arb_collator_fuzz_case`] with the command's mode, pad id, added tokens, static length
    /// and budget, as the protocol's request (pairs numbered by position).
    fn strategy(&self) -> BoxedStrategy<CollatorRequest> {
        let mode = self.mode;
        let params = CollatorFuzzParams {
            pairs: mode == CollatorMode::Dpo,
            pad_token_id: self.read.facts().contract.pad_token_id,
            added_tokens: self.rewrites.added(),
            static_length: self.static_length.generated(),
            over_budget: self.over_budget,
        };
        arb_collator_fuzz_case(params)
            .prop_map(move |case| CollatorRequest {
                mode,
                max_seq_length: case.max_seq_length,
                examples: case
                    .examples
                    .into_iter()
                    .enumerate()
                    .map(|(i, e)| match e {
                        CollatorInput::Single(input_ids) => CollatorExample::Single { input_ids },
                        CollatorInput::Pair { chosen, rejected } => CollatorExample::Pair {
                            chosen_input_ids: chosen,
                            rejected_input_ids: rejected,
                            index: i as i64,
                        },
                    })
                    .collect(),
            })
            .boxed()
    }

    fn minimizes(&self) -> bool {
        true
    }

    fn case_of(&self, request: &Value) -> Option<Result<CollatorRequest, String>> {
        Some(
            serde_json::from_value::<CollatorRequest>(request.clone())
                .map_err(|e| format!("not a collator request: {e}"))
                .and_then(|r| {
                    if r.mode == self.mode {
                        Ok(r)
                    } else {
                        Err(format!(
                            "a {:?} request, and the command's --mode is {:?}",
                            r.mode, self.mode
                        ))
                    }
                }),
        )
    }

    /// Smaller requests: runs of examples removed (one is kept; pairs renumbered), one token of
    /// an example removed (one is kept per branch), the static length lowered by one, to what
    /// the examples need, or dropped (`--static-length sometimes`). `max_seq_length` stays at
    /// least what the examples need (with `--over-budget`: what the first one needs).
    fn reductions(&self, case: &CollatorRequest) -> Vec<CollatorRequest> {
        let added = self.rewrites.added();
        let mut out = Vec::new();
        let n = case.examples.len();
        for k in (1..n).rev() {
            for at in 0..=n - k {
                let mut c = case.clone();
                c.examples.drain(at..at + k);
                for (i, e) in c.examples.iter_mut().enumerate() {
                    if let CollatorExample::Pair { index, .. } = e {
                        *index = i as i64;
                    }
                }
                out.push(c);
            }
        }
        for (i, e) in case.examples.iter().enumerate() {
            let branches: Vec<&Vec<i64>> = match e {
                CollatorExample::Single { input_ids } => vec![input_ids],
                CollatorExample::Pair { chosen_input_ids, rejected_input_ids, .. } => {
                    vec![chosen_input_ids, rejected_input_ids]
                }
            };
            for (b, ids) in branches.into_iter().enumerate() {
                if ids.len() < 2 {
                    continue;
                }
                for t in 0..ids.len() {
                    let mut c = case.clone();
                    match &mut c.examples[i] {
                        CollatorExample::Single { input_ids } => {
                            input_ids.remove(t);
                        }
                        CollatorExample::Pair { chosen_input_ids, rejected_input_ids, .. } => {
                            if b == 0 { chosen_input_ids } else { rejected_input_ids }.remove(t);
                        }
                    }
                    out.push(c);
                }
            }
        }
        if let Some(m) = case.max_seq_length {
            let need = |ex: &[CollatorExample]| {
                branch_totals(ex, added).into_iter().max().unwrap_or(0) as u64
            };
            let least = if self.over_budget {
                need(&case.examples[..1.min(n)])
            } else {
                need(&case.examples)
            };
            let mut lower = vec![least, m.saturating_sub(1)];
            lower.retain(|&l| l >= least && l < m);
            lower.dedup();
            out.extend(
                lower
                    .into_iter()
                    .map(|l| CollatorRequest { max_seq_length: Some(l), ..case.clone() }),
            );
            if self.static_length == StaticLength::Sometimes {
                out.push(CollatorRequest { max_seq_length: None, ..case.clone() });
            }
        }
        // With --over-budget, the budget must still leave room for the first example.
        out.retain(|c| {
            c.max_seq_length.is_none_or(|m| {
                let first = branch_totals(&c.examples[..1.min(c.examples.len())], added);
                first.into_iter().max().unwrap_or(0) as u64 <= m
            })
        });
        out
    }

    fn payload(&self, case: &CollatorRequest) -> Value {
        serde_json::to_value(case).unwrap_or(Value::Null)
    }

    fn judge(
        &self,
        case: &CollatorRequest,
        send: &mut dyn FnMut() -> Result<String, Failure>,
    ) -> Result<(), Failure> {
        let (resp, line) = response::<CollatorResponse>(send)?;
        check(case, &resp.batch, self).map_err(|mut f| {
            f.response = Some(line);
            f
        })
    }
}

/// Tokens per branch: `[Σ]` for SFT, `[Σ chosen, Σ rejected]` for DPO, with `added` tokens
/// more per example.
fn branch_totals(examples: &[CollatorExample], added: usize) -> Vec<usize> {
    let mut sft = 0;
    let (mut c, mut r) = (0, 0);
    for e in examples {
        match e {
            CollatorExample::Single { input_ids } => sft += input_ids.len() + added,
            CollatorExample::Pair { chosen_input_ids, rejected_input_ids, .. } => {
                c += chosen_input_ids.len() + added;
                r += rejected_input_ids.len() + added;
            }
        }
    }
    if c + r > 0 { vec![c, r] } else { vec![sft] }
}

fn check(
    req: &CollatorRequest,
    batch: &serde_json::Map<String, Value>,
    target: &CollatorTarget,
) -> Result<(), Failure> {
    let (read, opts, rewrites) = (&target.read, &target.opts, target.rewrites);
    let unreadable = |e: reader::Error| Failure {
        kind: "violation",
        checks: vec![rules::checks::BATCH_READABLE.id.into()],
        detail: format!("`thdcheck check` cannot read the batch: {e}"),
        response: None,
    };
    // A value that is not an integer, or rows of unequal length, breaks the protocol itself.
    let bytes = batch_to_safetensors(batch).map_err(|e| Failure {
        kind: "schema",
        checks: vec![],
        detail: format!("the answer breaks the protocol: `batch` {e}"),
        response: None,
    })?;
    if let Some(key) = unread_value_read_as_tensor(batch, read, opts) {
        let what = match &batch[key] {
            Value::String(s) => format!("a string ({:?})", s.chars().take(40).collect::<String>()),
            _ => "an object".to_owned(),
        };
        return Err(Failure {
            kind: "schema",
            checks: vec![],
            detail: format!(
                "the answer breaks the protocol: `batch` `{key}` is {what}, where `thdcheck \
                 check` reads a tensor"
            ),
            response: None,
        });
    }
    let file = BatchFile::from_bytes(bytes).map_err(unreadable)?;
    let parsed = parse(file, read).map_err(unreadable)?;
    let report = FileReport::new(&parsed, opts);
    // With --mlm the check options say masked LM: the rules themselves skip what compares a
    // shifted label with the next document (cross-doc-label); label-targets needs --causal.
    let violated: Vec<&Outcome> = report.all_checks().filter(|c| c.is_violated()).collect();
    if !violated.is_empty() {
        return Err(Failure {
            kind: "violation",
            checks: violated.iter().map(|c| c.rule.to_owned()).collect(),
            detail: violated
                .iter()
                .map(|c| format!("{}: {}", c.rule, c.detail))
                .collect::<Vec<_>>()
                .join("\n"),
            response: None,
        });
    }
    // The examples the collator keeps: the longest prefix that fits `max_seq_length` (all of
    // them unless the request is over budget).
    let kept = match req.max_seq_length {
        Some(m) => (0..=req.examples.len())
            .rev()
            .find(|&k| {
                branch_totals(&req.examples[..k], rewrites.added())
                    .into_iter()
                    .all(|t| t as u64 <= m)
            })
            .unwrap_or(0),
        None => req.examples.len(),
    };
    let examples = &req.examples[..kept];
    match req.mode {
        CollatorMode::Sft => {
            let docs: Vec<&[i64]> = examples
                .iter()
                .filter_map(|e| match e {
                    CollatorExample::Single { input_ids } => Some(input_ids.as_slice()),
                    CollatorExample::Pair { .. } => None,
                })
                .collect();
            check_packs_present(parsed.packs.len(), &["batch"]).map_err(Failure::from_violation)?;
            documents(target, &parsed.packs[0], &docs, req.max_seq_length, "batch")
        }
        CollatorMode::Dpo => {
            check_dpo_concatenated_present(parsed.dpo.is_some())
                .map_err(Failure::from_violation)?;
            let (mut chosen, mut rejected) = (Vec::new(), Vec::new());
            for e in examples {
                if let CollatorExample::Pair { chosen_input_ids, rejected_input_ids, .. } = e {
                    chosen.push(chosen_input_ids.as_slice());
                    rejected.push(rejected_input_ids.as_slice());
                }
            }
            check_packs_present(parsed.packs.len(), &["chosen", "rejected"])
                .map_err(Failure::from_violation)?;
            documents(target, &parsed.packs[0], &chosen, req.max_seq_length, "chosen")?;
            documents(target, &parsed.packs[1], &rejected, req.max_seq_length, "rejected")
        }
    }
}

/// A key whose value the batch leaves out as a dump does (a string, an object) although the
/// reader reads it: with a tensor in its place, the batch reads otherwise (another dialect,
/// other offsets, another error). Left out, such a key reads as absent and the batch is judged
/// without it (`cu_seq_lens_q: "end"` was a `qk-offsets` violation).
fn unread_value_read_as_tensor<'a>(
    batch: &'a serde_json::Map<String, Value>,
    read: &ReadOptions,
    opts: &CheckOptions,
) -> Option<&'a str> {
    let left_out: Vec<&String> = batch
        .iter()
        .filter(|(_, v)| matches!(v, Value::String(_) | Value::Object(_)))
        .map(|(k, _)| k)
        .collect();
    if left_out.is_empty() {
        return None;
    }
    // How the batch reads: its dialect and every rule's outcome, or the error's class (the
    // keys a missing-key error lists are not part of it).
    let reading = |batch: &serde_json::Map<String, Value>| -> String {
        let parsed = batch_to_safetensors(batch)
            .and_then(BatchFile::from_bytes)
            .and_then(|file| parse(file, read));
        match parsed {
            Err(reader::Error::MissingKey { key, .. }) => format!("missing {key}"),
            Err(reader::Error::UnknownDialect { .. }) => "unknown dialect".into(),
            Err(e) => e.to_string(),
            Ok(p) => {
                let report = FileReport::new(&p, opts);
                let outcomes: Vec<String> = report
                    .all_checks()
                    .map(|c| format!("{} {} {}", c.rule, c.is_violated(), c.detail))
                    .collect();
                format!("{:?} {} {}", p.dialect, p.packs.len(), outcomes.join("\n"))
            }
        }
    };
    let base = reading(batch);
    left_out
        .into_iter()
        .find(|key| {
            [Value::from(0), Value::from(vec![0])].into_iter().any(|probe| {
                let mut with = batch.clone();
                with.insert((*key).clone(), probe);
                reading(&with) != base
            })
        })
        .map(String::as_str)
}

/// The registry's collator rules on a pack: its real segments are exactly the examples, in
/// order (`documents`), with the declared BOS / EOS around each and, for MLM, only their
/// lengths compared; with a `max_seq_length` the pack is exactly that long (`static-shape`).
fn documents(
    target: &CollatorTarget,
    pack: &BatchData,
    docs: &[&[i64]],
    max_seq_length: Option<u64>,
    what: &str,
) -> Result<(), Failure> {
    let rewrites = target.rewrites;
    let mut view = pack.view();
    let expected: Vec<Vec<i64>> = docs.iter().map(|d| rewrites.apply(d)).collect();
    let expected: Vec<&[i64]> = expected.iter().map(Vec::as_slice).collect();
    if rewrites.mlm {
        // The ids may be masked or replaced: the segments must still have the examples' lengths.
        view.input_ids = None;
    }
    let input = CollatorPack { examples: &expected, view: &view, max_seq_length };
    target
        .applied
        .with(|a| judge_collator(&input, a))
        .map_err(|v| Failure::from_violation(v.within(what)))
}
