//! Collators: the batch they return is checked like a dumped file (`thdcheck check`), and it
//! must hold exactly the examples it was given.

use properties::checks::{Outcome, check_documents, check_static_shape};
use proptest::collection::vec;
use proptest::prelude::*;
use proptest::strategy::BoxedStrategy;
use serde::Deserialize;
use serde_json::Value;
use thdcheck::dialect::{ReadOptions, parse};
use thdcheck::pack::BatchData;
use thdcheck::protocol::{CollatorExample, CollatorMode, CollatorRequest, batch_to_safetensors};
use thdcheck::tensors::BatchFile;
use thdcheck::{CheckOptions, FileReport};

use super::{Failure, Target, response};

/// The collator target.
pub struct CollatorTarget {
    /// SFT or DPO requests.
    pub mode: CollatorMode,
}

#[derive(Deserialize)]
struct CollatorResponse {
    batch: serde_json::Map<String, Value>,
}

fn tokens(max_len: usize) -> impl Strategy<Value = Vec<i64>> {
    vec(1i64..=50_000, 1..=max_len)
}

impl Target for CollatorTarget {
    type Case = CollatorRequest;

    fn kind(&self) -> &'static str {
        "collator"
    }

    fn invariants(&self) -> &'static str {
        match self.mode {
            CollatorMode::Sft => {
                "every `check` invariant on the batch, documents kept, static shape"
            }
            CollatorMode::Dpo => {
                "every `check` invariant on the batch incl. dpo-offsets, documents kept, static shape"
            }
        }
    }

    /// SFT: 1..=6 examples of 1..=12 tokens; DPO: 1..=4 pairs of 1..=8 tokens each side. Half
    /// the requests ask for static padding to a `max_seq_length` that the examples fit.
    fn strategy(&self) -> BoxedStrategy<CollatorRequest> {
        let mode = self.mode;
        let examples = match mode {
            CollatorMode::Sft => {
                vec(tokens(12).prop_map(|input_ids| CollatorExample::Single { input_ids }), 1..=6)
                    .boxed()
            }
            CollatorMode::Dpo => vec((tokens(8), tokens(8)), 1..=4)
                .prop_map(|pairs| {
                    pairs
                        .into_iter()
                        .enumerate()
                        .map(|(i, (c, r))| CollatorExample::Pair {
                            chosen_input_ids: c,
                            rejected_input_ids: r,
                            index: i as i64,
                        })
                        .collect()
                })
                .boxed(),
        };
        (examples, prop::option::of(0u64..=6))
            .prop_map(move |(examples, extra)| {
                let need = branch_totals(&examples).into_iter().max().unwrap_or(0) as u64;
                CollatorRequest { mode, max_seq_length: extra.map(|e| need + e), examples }
            })
            .boxed()
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
        check(case, &resp.batch).map_err(|mut f| {
            f.response = Some(line);
            f
        })
    }
}

/// Tokens per branch: `[Σ]` for SFT, `[Σ chosen, Σ rejected]` for DPO.
fn branch_totals(examples: &[CollatorExample]) -> Vec<usize> {
    let mut sft = 0;
    let (mut c, mut r) = (0, 0);
    for e in examples {
        match e {
            CollatorExample::Single { input_ids } => sft += input_ids.len(),
            CollatorExample::Pair { chosen_input_ids, rejected_input_ids, .. } => {
                c += chosen_input_ids.len();
                r += rejected_input_ids.len();
            }
        }
    }
    if c + r > 0 { vec![c, r] } else { vec![sft] }
}

fn check(req: &CollatorRequest, batch: &serde_json::Map<String, Value>) -> Result<(), Failure> {
    let unreadable = |e: thdcheck::Error| Failure {
        kind: "violation",
        checks: vec!["batch-readable".into()],
        detail: format!("`thdcheck check` cannot read the batch: {e}"),
        response: None,
    };
    let bytes = batch_to_safetensors(batch).map_err(unreadable)?;
    let file = BatchFile::from_bytes(bytes).map_err(unreadable)?;
    let parsed = parse(file, &ReadOptions::default()).map_err(unreadable)?;
    let report = FileReport::new(&parsed, &CheckOptions::default());
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
    match req.mode {
        CollatorMode::Sft => {
            let docs: Vec<&[i64]> = req
                .examples
                .iter()
                .filter_map(|e| match e {
                    CollatorExample::Single { input_ids } => Some(input_ids.as_slice()),
                    CollatorExample::Pair { .. } => None,
                })
                .collect();
            let pack =
                parsed.packs.first().ok_or_else(|| Failure::violation("documents", "no pack"))?;
            documents(pack, &docs, req.max_seq_length, "batch")
        }
        CollatorMode::Dpo => {
            if parsed.dpo.is_none() {
                return Err(Failure::violation(
                    "dpo-offsets",
                    "no concatenated_cu_seq_lens_k in the batch: the DPO contract returns the concatenated keys too",
                ));
            }
            let (mut chosen, mut rejected) = (Vec::new(), Vec::new());
            for e in &req.examples {
                if let CollatorExample::Pair { chosen_input_ids, rejected_input_ids, .. } = e {
                    chosen.push(chosen_input_ids.as_slice());
                    rejected.push(rejected_input_ids.as_slice());
                }
            }
            let (Some(c), Some(r)) = (parsed.packs.first(), parsed.packs.get(1)) else {
                return Err(Failure::violation("documents", "no chosen / rejected packs"));
            };
            documents(c, &chosen, req.max_seq_length, "chosen")?;
            documents(r, &rejected, req.max_seq_length, "rejected")
        }
    }
}

/// The pack's real segments are exactly the examples, in order ([`check_documents`]); with a
/// `max_seq_length` the pack is exactly that long ([`check_static_shape`]).
fn documents(
    pack: &BatchData,
    docs: &[&[i64]],
    max_seq_length: Option<u64>,
    what: &str,
) -> Result<(), Failure> {
    let view = pack.view();
    let within = |v: properties::Violation| Failure::from_violation(v.within(what));
    check_documents(docs, &view).map_err(within)?;
    if let Some(m) = max_seq_length {
        check_static_shape(&view, m).map_err(within)?;
    }
    Ok(())
}
