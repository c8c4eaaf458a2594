//! `thdcheck fuzz logger`'s cases: one optimizer step, micro-batches of documents with their
//! prompts, one layout, a model, the CP and DP sizes and the step time. The command writes each
//! micro-batch as the batch dict a collator returns and judges the logged values against thd's
//! accounting of the same dicts.

use proptest::collection::vec;
use proptest::prelude::*;
use proptest::strategy::BoxedStrategy;
use serde::Serialize;
use thd::metrics::{CausalConvention, FlopsFormula, ModelDims};

/// How each micro-batch of a [`LoggerFuzzCase`] lays out its documents (sent as the request's
/// `layout`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum LoggerLayout {
    /// One row, the documents back to back (`cu_seq_lens_q`).
    Flat,
    /// bionemo's `pad_to_multiple_of`: a mock segment of pad tokens fills the pack to a multiple
    /// of `m`, marked by `num_real_seqs` (#1561's fix, Option A).
    MockPad(u32),
    /// Context-parallel padding: every document's slot padded to a multiple of `2·cp`, real
    /// offsets in `cu_seq_lens_q`, storage in `cu_seq_lens_q_padded`.
    CpPad,
    /// No packing (the BSHD fallback): one document per row of `[B, S]`, right-padded to the
    /// longest, `attention_mask` 0 on the padding, no offsets.
    Bshd,
}

/// The layouts a run draws from (the command's `--layout`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LoggerLayoutKind {
    /// [`LoggerLayout::Flat`].
    Flat,
    /// [`LoggerLayout::MockPad`], to a multiple of 8 or 16.
    MockPad,
    /// [`LoggerLayout::CpPad`].
    CpPad,
    /// [`LoggerLayout::Bshd`].
    Bshd,
}

/// One generated step.
#[derive(Debug, Clone)]
pub struct LoggerFuzzCase {
    /// Per micro-batch, per document: (length, prompt tokens without a label).
    pub micro_batches: Vec<Vec<(u32, u32)>>,
    /// The layout of every micro-batch.
    pub layout: LoggerLayout,
    /// The model (an index into [`logger_models`]).
    pub model: usize,
    /// CP size.
    pub cp: u64,
    /// DP size: the micro-batches are one DP rank's, the others alike.
    pub dp: u64,
    /// Step time, seconds.
    pub step_time_s: f64,
    /// The FLOPs formula.
    pub formula: FlopsFormula,
    /// The pad id of padding and mock tokens (real tokens never use it).
    pub pad: i64,
}

impl LoggerFuzzCase {
    /// Token `t` of document `d`: ids 1..=97, stepping over the pad id.
    pub fn token(&self, d: usize, t: usize) -> i64 {
        let id = 1 + ((d * 31 + t * 7) % 97) as i64;
        if id == self.pad { 98 } else { id }
    }

    /// The model, with the causal convention of the formula's upstream (Megatron halves,
    /// bionemo's perf_logger does not).
    pub fn dims(&self) -> ModelDims {
        let causal = match self.formula {
            FlopsFormula::MegatronLm => CausalConvention::Half,
            FlopsFormula::BionemoPerfLogger => CausalConvention::None,
        };
        ModelDims { causal, ..logger_models()[self.model] }
    }
}

/// The models requests use: small, one of each MLP and causal convention.
pub fn logger_models() -> [ModelDims; 2] {
    [
        ModelDims {
            layers: 2,
            hidden: 64,
            heads: 4,
            kv_heads: 2,
            head_dim: 16,
            ffn: 160,
            mlp_projections: 3,
            vocab: 100,
            padded_vocab: Some(128),
            causal: CausalConvention::Half,
            attention_output_gate: false,
        },
        ModelDims {
            layers: 1,
            hidden: 32,
            heads: 2,
            kv_heads: 2,
            head_dim: 16,
            ffn: 64,
            mlp_projections: 2,
            vocab: 50,
            padded_vocab: None,
            causal: CausalConvention::Half,
            attention_output_gate: false,
        },
    ]
}

/// What [`arb_logger_fuzz_case`] draws: the logger command's flags that shape the cases. The
/// default is `thdcheck fuzz logger` without flags.
#[derive(Debug, Clone, PartialEq)]
pub struct LoggerFuzzParams {
    /// The layouts drawn from (`--layout`; at least one).
    pub layouts: Vec<LoggerLayoutKind>,
    /// The formula the logger implements (`--formula`), the same in every case.
    pub formula: FlopsFormula,
    /// The pad id (`--pad-token-id`).
    pub pad: i64,
    /// At most this many micro-batches per step (`--max-micro-batches`).
    pub max_micro_batches: usize,
    /// The largest CP size (`--max-cp`: 1, 2 or 4).
    pub max_cp: u64,
}

/// Every layout, Megatron's formula, pad id 0, up to 3 micro-batches, cp up to 4.
impl Default for LoggerFuzzParams {
    fn default() -> Self {
        Self {
            layouts: vec![
                LoggerLayoutKind::Flat,
                LoggerLayoutKind::MockPad,
                LoggerLayoutKind::CpPad,
                LoggerLayoutKind::Bshd,
            ],
            formula: FlopsFormula::MegatronLm,
            pad: 0,
            max_micro_batches: 3,
            max_cp: 4,
        }
    }
}

/// `thdcheck fuzz logger`'s cases: 1..=`max_micro_batches` micro-batches of 1..=4 documents of
/// 1..=24 tokens (a prompt of up to 4), one layout, cp ∈ {1, 2, 4} up to `max_cp`, dp ∈ {1, 2},
/// step time 0.5 or 2 s. A stack pads every slot to a multiple of 2·cp before it shards, so at
/// cp > 1 the layout is cp-pad when the run draws it, else the CP size is 1.
///
/// # Example
/// ```
/// use proptest::strategy::{Strategy, ValueTree};
/// use proptest::test_runner::TestRunner;
/// use properties::strategies::fuzz::{LoggerFuzzParams, arb_logger_fuzz_case};
/// let mut runner = TestRunner::deterministic();
/// let s = arb_logger_fuzz_case(LoggerFuzzParams::default());
/// let case = s.new_tree(&mut runner).unwrap().current();
/// assert!((1..=3).contains(&case.micro_batches.len()) && [1, 2, 4].contains(&case.cp));
/// ```
pub fn arb_logger_fuzz_case(params: LoggerFuzzParams) -> BoxedStrategy<LoggerFuzzCase> {
    let doc = (1u32..=24, 0u32..=4).prop_map(|(len, prompt)| (len, prompt.min(len)));
    let layout = proptest::sample::select(params.layouts.clone()).prop_flat_map(|k| match k {
        LoggerLayoutKind::Flat => Just(LoggerLayout::Flat).boxed(),
        LoggerLayoutKind::MockPad => {
            prop_oneof![Just(8u32), Just(16)].prop_map(LoggerLayout::MockPad).boxed()
        }
        LoggerLayoutKind::CpPad => Just(LoggerLayout::CpPad).boxed(),
        LoggerLayoutKind::Bshd => Just(LoggerLayout::Bshd).boxed(),
    });
    let formula = params.formula;
    let pad = params.pad;
    // A stack pads every slot to a multiple of 2·cp before it shards: at cp > 1 only the
    // cp-pad layout is a batch a real stack builds.
    let cp_padded = params.layouts.contains(&LoggerLayoutKind::CpPad);
    (
        vec(vec(doc, 1..=4), 1..=params.max_micro_batches.max(1)),
        layout,
        0usize..2,
        proptest::sample::select(
            [1u64, 2, 4].into_iter().filter(|&c| c <= params.max_cp).collect::<Vec<_>>(),
        ),
        prop_oneof![Just(1u64), Just(2)],
        prop_oneof![Just(0.5f64), Just(2.0)],
    )
        .prop_map(move |(micro_batches, layout, model, cp, dp, step_time_s)| {
            let (layout, cp) = match (layout, cp) {
                (LoggerLayout::CpPad, _) | (_, 1) => (layout, cp),
                _ if cp_padded => (LoggerLayout::CpPad, cp),
                _ => (layout, 1),
            };
            LoggerFuzzCase { micro_batches, layout, model, cp, dp, step_time_s, formula, pad }
        })
        .boxed()
}
