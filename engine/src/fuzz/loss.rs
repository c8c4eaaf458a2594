//! CP-local losses: one global packed batch, sent at every CP size in {1, 2, 4, 8} (one request
//! each) as every rank's shard of f64 logits and of labels rolled before the split: the zigzag,
//! or with `--cp-layout contiguous` (or a profile's `cp_layout`) piece r of `cp` equal
//! contiguous pieces of the whole pack, slots padded to multiples of `cp` (the request then
//! says `"cp_layout": "contiguous"`). The
//! loss the adapter reports must be the oracle's global loss (CP-LOSS: [`cp_loss_violations`]
//! with the parts it reports, [`check_reported_loss`] without), and the valid-token count it
//! reports, if any, the global count at every CP size (TOKENS-CP: [`check_tokens_cp`]).
//!
//! The expected loss is `oracle::cross_entropy` on the unsharded batch (each segment's real
//! tokens, labels shifted within it); the shards are cut with `properties`' own
//! [`ShardLayout::positions`] and [`roll_labels`], never with `thd`'s CP code.

use crate::args::CpSplitLayout;
use crate::protocol::{LossDtype, LossRequest, LossResponse, LossShard, quote_non_finite};
use candle_core::{Device, Tensor};
use properties::strategies::fuzz::{LossFuzzCase, arb_loss_fuzz_case};
use proptest::prelude::*;
use proptest::strategy::BoxedStrategy;
use rules::checks::{
    CpLossInput, FuzzTarget, LossRecord, PartLoss, ShardLayout, Split, TokenCounts, TokenRecord,
    judge_cp_loss, roll_labels,
};
use serde_json::Value;
use thd::IGNORE_INDEX;

use super::{Applied, Failure, Target, cp_batch, response};

/// The default relative tolerance of the reported loss and Σ NLL against the oracle, for an
/// adapter that computes in f64. The logits travel exactly (JSON round-trips of f64 are exact
/// both ways), so the adapter and the oracle differ only in how they compute: another
/// log-sum-exp and another summation order (Python's `sum` against the oracle's compensated
/// sum) move the result by a few ulps per token, about 1e-14 relative on these sizes. 1e-9
/// leaves five orders of magnitude for that, and a reduction bug (the mean of rank means, a
/// count from one rank) moves the loss by far more. An adapter in float32 declares it
/// (`"dtype": "float32"`) and is judged to 1e-5 (`FLOAT32_RTOL`).
pub const DEFAULT_RTOL: f64 = 1e-9;

/// The relative tolerance of a loss its adapter declares computed in float32 (`"dtype":
/// "float32"`): DESIGN.md's loss tolerance in f32. Each log-softmax and each partial sum rounds
/// at 2⁻²⁴ ≈ 6e-8 relative; 1e-5 leaves the hundred-odd roundings of these small batches room,
/// and a reduction bug (the mean of rank means, a count off by the CP factor) moves the loss by
/// tens of percent.
pub const FLOAT32_RTOL: f64 = 1e-5;

/// The tolerance a loss is judged to: the user's `--rtol`, else its declared dtype's.
pub fn rtol_for(user: Option<f64>, dtype: Option<LossDtype>) -> f64 {
    user.unwrap_or(match dtype {
        Some(LossDtype::Float32) => FLOAT32_RTOL,
        Some(LossDtype::Float64) | None => DEFAULT_RTOL,
    })
}

/// The loss target.
pub struct LossTarget {
    /// The user's relative tolerance of the loss and Σ NLL against the oracle (`--rtol`);
    /// `None`: the one of the dtype each answer declares ([`rtol_for`]).
    pub rtol: Option<f64>,
    /// How the shards are cut.
    pub layout: CpSplitLayout,
    /// The rules the run judged, for the report.
    pub(crate) applied: Applied,
}

impl LossTarget {
    /// The request at CP size `cp`: slots padded to a multiple of `2·cp` (contiguous: `cp`;
    /// zigzag-sequence: the pack, at its end), labels rolled on the full sequence, then every
    /// rank's zigzag chunks (contiguous: its piece of the whole pack; zigzag-sequence: its two
    /// chunks of the whole pack).
    fn request(&self, case: &LossFuzzCase, cp: usize) -> LossRequest {
        let (layout, storage) = match self.layout {
            CpSplitLayout::Zigzag => (ShardLayout::Zigzag, case.batch.storage(cp, true, false)),
            CpSplitLayout::Contiguous => {
                (ShardLayout::Contiguous, case.batch.storage(cp, true, true))
            }
            CpSplitLayout::ZigzagSequence => {
                (ShardLayout::ZigzagSequence, case.batch.sequence_storage(cp, true))
            }
        };
        let slots = case.batch.slots(&storage);
        let unshifted: Vec<i64> = slots
            .iter()
            .map(|&(i, j, real)| if real { case.label(i, j) } else { IGNORE_INDEX })
            .collect();
        let rolled = roll_labels(&case.batch.lens(), &storage, &unshifted);
        let ranks = (0..cp)
            .map(|r| {
                let held = layout.positions(&storage, cp, r);
                LossShard {
                    cp_rank: r,
                    logits: held.iter().map(|&g| case.logits(slots[g].0, slots[g].1)).collect(),
                    labels: held.iter().map(|&g| rolled[g]).collect(),
                }
            })
            .collect();
        LossRequest { cp_size: cp, vocab: case.vocab, ranks }
    }

    /// The request at CP size `cp` as sent: a contiguous one says so.
    fn payload_at(&self, case: &LossFuzzCase, cp: usize) -> Value {
        let mut v = serde_json::to_value(self.request(case, cp)).unwrap_or(Value::Null);
        if let Some(name) = super::cp_split::layout_name(self.layout)
            && let Some(map) = v.as_object_mut()
        {
            map.insert("cp_layout".into(), name.into());
        }
        v
    }
}

/// The oracle's loss on the unsharded batch: every segment's real tokens, one after the
/// other, labels unshifted (the oracle shifts within each segment), f64.
fn oracle(case: &LossFuzzCase) -> LossRecord {
    let lens = case.batch.lens();
    let (mut rows, mut labels) = (Vec::new(), Vec::new());
    for (i, &s) in lens.iter().enumerate() {
        for j in 0..s as usize {
            rows.extend(case.logits(i, j));
            labels.push(case.label(i, j));
        }
    }
    let logits = Tensor::from_vec(rows, (labels.len(), case.vocab), &Device::Cpu)
        .expect("a [T, vocab] tensor of the generated logits");
    let ce = oracle::cross_entropy(&logits, &labels, &lens)
        .expect("the oracle accepts every generated batch");
    LossRecord::from_sums(ce.nll_sum, ce.count)
}

impl Target for LossTarget {
    type Case = LossFuzzCase;

    fn kind(&self) -> &'static str {
        "loss"
    }

    fn invariants(&self) -> String {
        format!(
            "{} at cp 1, 2, 4, 8 against the oracle's global loss",
            self.applied.text(FuzzTarget::Loss)
        )
    }

    /// [`arb_loss_fuzz_case`]: a batch and its values, sent at cp 1, 2, 4 and 8.
    fn strategy(&self) -> BoxedStrategy<LossFuzzCase> {
        arb_loss_fuzz_case().boxed()
    }

    fn minimizes(&self) -> bool {
        true
    }

    /// The batch's reductions ([`cp_batch::reductions`]), then the vocabulary lowered (to 2,
    /// by one) and the largest CP size dropped (one is kept).
    fn reductions(&self, case: &LossFuzzCase) -> Vec<LossFuzzCase> {
        let mut out: Vec<LossFuzzCase> = cp_batch::reductions(&case.batch)
            .into_iter()
            .map(|batch| LossFuzzCase { batch, ..case.clone() })
            .collect();
        let mut vocabs = vec![2, case.vocab.saturating_sub(1)];
        vocabs.retain(|&v| v >= 2 && v < case.vocab);
        vocabs.dedup();
        out.extend(vocabs.into_iter().map(|vocab| LossFuzzCase { vocab, ..case.clone() }));
        if case.cps.len() > 1 {
            for drop_first in [false, true] {
                let mut cps = case.cps.clone();
                if drop_first {
                    cps.remove(0)
                } else {
                    cps.pop().unwrap_or(1)
                };
                out.push(LossFuzzCase { cps, ..case.clone() });
            }
        }
        out
    }

    /// The first request (the smallest CP size left).
    fn payload(&self, case: &LossFuzzCase) -> Value {
        case.cps.first().map_or(Value::Null, |&cp| self.payload_at(case, cp))
    }

    fn payloads(&self, case: &LossFuzzCase) -> Vec<Value> {
        case.cps.iter().map(|&cp| self.payload_at(case, cp)).collect()
    }

    fn judge(
        &self,
        case: &LossFuzzCase,
        send: &mut dyn FnMut() -> Result<String, Failure>,
    ) -> Result<(), Failure> {
        let global = oracle(case);
        let mut records = Vec::new();
        // Every violated rule, with the answer it was read from: a wrong count and a wrong loss
        // are both reported, so `--ignore` of one still shows the other.
        let mut violations: Vec<(rules::Violation, String)> = Vec::new();
        // The losses compared across CP sizes, to the loosest tolerance an answer declared.
        let mut across_rtol = self.rtol.unwrap_or(0.0);
        for &cp in &case.cps {
            // Python's json.dumps writes a NaN loss as a bare NaN: read it as one.
            // Quoted only when there is something to quote: the answer is not copied otherwise.
            let mut quoted = || {
                send().map(|raw| {
                    if raw.contains("NaN") || raw.contains("Infinity") {
                        quote_non_finite(&raw)
                    } else {
                        raw
                    }
                })
            };
            let (resp, line) = match response::<LossResponse>(&mut quoted) {
                Ok(r) => r,
                // A batch with no valid label has nothing to learn: refusing it loudly (AReaL's
                // `compute_total_loss_weight` asserts the global weight is positive) is not a
                // wrong number. A NaN or a wrong value still fails.
                Err(f) if f.kind == "adapter-error" && global.count == 0 => continue,
                Err(f) => return Err(f),
            };
            let parts: Option<Vec<PartLoss>> = match &resp.parts {
                Some(parts) if parts.len() != cp => {
                    return Err(Failure::schema(
                        format!(
                            "`parts` has {} entries for cp_size {cp} (one per rank)",
                            parts.len()
                        ),
                        &line,
                    ));
                }
                Some(parts) => {
                    Some(parts.iter().map(|p| PartLoss { nll: p.nll, count: p.count }).collect())
                }
                None => None,
            };
            let rtol = rtol_for(self.rtol, resp.dtype);
            across_rtol = across_rtol.max(rtol);
            let answer = CpLossInput::Answer {
                split: Split::Cp(cp),
                parts: parts.as_deref(),
                reported: resp.loss,
                global: &global,
                rtol,
            };
            let checked = self.applied.with(|a| judge_cp_loss(&answer, a));
            // Each rule once, from the first answer that breaks it.
            for v in checked {
                if !violations.iter().any(|(w, _)| w.id == v.id) {
                    violations.push((v, line.clone()));
                }
            }
            if let Some(n) = resp.n_valid_tokens {
                // The adapter reports only the valid-token count and the loss: the other counts
                // of the record stay 0 on both sides.
                let record =
                    TokenRecord { n_valid_tokens: n, loss: resp.loss, ..Default::default() };
                records.push((cp, record, line));
            }
        }
        if !records.is_empty() {
            let expected = TokenCounts { n_valid_tokens: global.count, ..Default::default() };
            let by_cp: Vec<(usize, TokenRecord)> =
                records.iter().map(|(c, r, _)| (*c, *r)).collect();
            // The loss is judged by the cp-loss rules above; here only the counts (the loss of every
            // record is the global one, so tokens-cp's loss rule cannot fire twice).
            let by_cp: Vec<(usize, TokenRecord)> = by_cp
                .into_iter()
                .map(|(c, r)| (c, TokenRecord { loss: global.mean, ..r }))
                .collect();
            let across = CpLossInput::AcrossCp {
                expected: &expected,
                loss: global.mean,
                by_cp: &by_cp,
                rtol: across_rtol,
            };
            for v in self.applied.with(|a| judge_cp_loss(&across, a)) {
                let line = records
                    .iter()
                    .find(|(c, _, _)| Some(*c) == v.at.cp)
                    .map(|(_, _, l)| l.clone())
                    .unwrap_or_default();
                violations.push((v, line));
            }
        }
        let Some((_, line)) = violations.first() else { return Ok(()) };
        let mut failure = Failure::stated(violations[0].0.clone());
        failure.response = Some(line.clone());
        for (v, _) in &violations[1..] {
            failure.checks.push(v.id.to_owned());
            failure.detail += &format!("\n{}: {}: {}", v.id, v.rule, v.summary());
        }
        Err(failure)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use properties::strategies::LabelMask;
    use properties::strategies::fuzz::{CP_SIZES, CpBatch, CpSegment};

    /// Every rank's shard at every CP size holds the storage tokens once; the valid labels are
    /// the oracle's, wherever they land.
    #[test]
    fn requests_shard_the_batch_the_oracle_sees() {
        let case = LossFuzzCase {
            cps: CP_SIZES.to_vec(),
            batch: CpBatch {
                mask: LabelMask::Prompt(1),
                segments: vec![
                    CpSegment { len: 3, mock: false, slack: false },
                    CpSegment { len: 0, mock: false, slack: true },
                    CpSegment { len: 2, mock: true, slack: false },
                    CpSegment { len: 5, mock: false, slack: true },
                ],
            },
            vocab: 3,
            seed: 7,
        };
        let global = oracle(&case);
        // Segment 0: tokens 1, 2 are valid targets of 0, 1; segment 3: 1..=4 of 0..=3.
        assert_eq!(global.count, 2 + 4);
        let target = |layout| LossTarget { rtol: None, layout, applied: Applied::default() };
        let (zigzag, contiguous) =
            (target(CpSplitLayout::Zigzag), target(CpSplitLayout::Contiguous));
        for cp in CP_SIZES {
            for (target, stored) in [
                (&zigzag, case.batch.storage(cp, true, false)),
                (&contiguous, case.batch.storage(cp, true, true)),
            ] {
                let req = target.request(&case, cp);
                assert_eq!(req.ranks.len(), cp);
                let rows: Vec<usize> = req.ranks.iter().map(|r| r.logits.len()).collect();
                assert_eq!(rows.iter().sum::<usize>(), stored.iter().sum::<u32>() as usize);
                assert!(rows.iter().all(|&n| n == rows[0]), "equal shards: {rows:?}");
                let valid: usize =
                    req.ranks.iter().map(|r| r.labels.iter().filter(|&&y| y >= 0).count()).sum();
                assert_eq!(valid as u64, global.count, "cp={cp}, {:?}", target.layout);
            }
        }
        // A contiguous request says so; a zigzag one is as before.
        assert_eq!(contiguous.payload_at(&case, 2)["cp_layout"], "contiguous");
        assert!(zigzag.payload_at(&case, 2).get("cp_layout").is_none());
        // Nothing valid: loss 0.
        let empty =
            LossFuzzCase { batch: CpBatch { mask: LabelMask::All, ..case.batch.clone() }, ..case };
        assert_eq!(oracle(&empty), LossRecord::from_sums(0.0, 0));
    }
}
