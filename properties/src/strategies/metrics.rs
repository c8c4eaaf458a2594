//! Accounting cases: pack lengths with padding, padding variants, model dims, micro-batches.

use proptest::collection::vec;
use proptest::prelude::*;
use proptest::sample::select;
use thd::metrics::{CausalConvention, FlopsFormula, HardwareView, ModelDims};
use thd::{IGNORE_INDEX, PackedBatch, PackedBatchParts};

use super::lens::{SeqLensParams, arb_cp, arb_seq_lens};
use crate::checks::MicroBatchView;

/// One pack described by lengths: real segments, their padding, mock segments and a static
/// tail.
#[derive(Debug, Clone, PartialEq, Eq)]
#[cfg_attr(any(test, feature = "serde"), derive(serde::Serialize, serde::Deserialize))]
pub struct WorkCase {
    /// Real lengths of the real segments (0 allowed).
    pub lens: Vec<u32>,
    /// Padding after each real segment's tokens, inside its slot.
    pub pad: Vec<u32>,
    /// Lengths of mock segments appended after the real ones.
    pub mocks: Vec<u32>,
    /// Static padding after the last segment (no segment covers it).
    pub tail: u32,
}

impl WorkCase {
    /// Real length of every segment, mocks included.
    pub fn real_lens(&self) -> Vec<u32> {
        self.lens.iter().chain(&self.mocks).copied().collect()
    }

    /// Storage length of every segment, mocks included.
    pub fn storage_lens(&self) -> Vec<u32> {
        self.lens
            .iter()
            .zip(&self.pad)
            .map(|(s, p)| s + p)
            .chain(self.mocks.iter().copied())
            .collect()
    }

    /// Stored tokens `T`.
    pub fn stored_tokens(&self) -> u64 {
        self.storage_lens().iter().map(|&p| u64::from(p)).sum::<u64>() + u64::from(self.tail)
    }

    /// The pack as a validated batch (token ids 0, every label -100).
    ///
    /// # Panics
    /// Never for a generated case (the layout is valid by construction).
    pub fn batch(&self) -> PackedBatch {
        let prefix = |l: &[u32]| {
            let mut cu = vec![0i64];
            for &s in l {
                cu.push(cu.last().unwrap() + i64::from(s));
            }
            cu
        };
        let t = self.stored_tokens() as usize;
        let padded = self.pad.iter().any(|&p| p > 0).then(|| prefix(&self.storage_lens()));
        PackedBatch::new(PackedBatchParts {
            input_ids: vec![0; t],
            labels: vec![IGNORE_INDEX; t],
            position_ids: None,
            cu_seqlens: prefix(&self.real_lens()),
            cu_seqlens_padded: padded,
            num_real_seqs: (!self.mocks.is_empty()).then_some(self.lens.len()),
            label_convention: Default::default(),
        })
        .expect("a generated WorkCase is a valid layout")
    }
}

/// A [`WorkCase`]: `1..=6` real segments of `0..=64` tokens; padding (half the cases), `0..=2`
/// mock segments of `1..=16` tokens, a static tail of `0..=8`.
pub fn arb_work_case() -> impl Strategy<Value = WorkCase> {
    // Knobs before data: proptest shrinks a tuple left to right, once.
    let tail = prop_oneof![2 => Just(0u32), 1 => 1u32..=8];
    (
        any::<bool>(),
        vec(1u32..=16, 0..=2),
        tail,
        vec(0u32..=7, 6),
        arb_seq_lens(SeqLensParams { min_len: 0, max_len: 64, max_segments: 6 }),
    )
        .prop_map(|(padded, mocks, tail, pad, lens)| {
            let pad = if padded { pad[..lens.len()].to_vec() } else { vec![0; lens.len()] };
            WorkCase { lens, pad, mocks, tail }
        })
}

/// Model dims: 1–4 layers, 1–2 KV heads in groups of 1–4, head_dim 1–128, hidden 8–1024,
/// FFN 8–4096 with 2 or 3 projections, vocab 1–65536 (sometimes padded), any causal convention.
pub fn arb_model_dims() -> impl Strategy<Value = ModelDims> {
    (
        1u64..=4,
        1u64..=2,
        1u64..=4,
        1u64..=128,
        8u64..=1024,
        8u64..=4096,
        select(vec![2u32, 3]),
        1u64..=65_536,
        prop::option::of(0u64..=128),
        select(vec![
            CausalConvention::None,
            CausalConvention::Half,
            CausalConvention::ExactTriangle,
        ]),
        any::<bool>(),
    )
        .prop_map(
            |(layers, kv_heads, group, head_dim, hidden, ffn, mlp, vocab, extra, causal, gate)| {
                ModelDims {
                    layers,
                    hidden,
                    heads: kv_heads * group,
                    kv_heads,
                    head_dim,
                    ffn,
                    mlp_projections: mlp,
                    vocab,
                    padded_vocab: extra.map(|e| vocab + e),
                    causal,
                    attention_output_gate: gate,
                }
            },
        )
}

/// The same examples, and the paddings a collator may add to them.
#[derive(Debug, Clone, PartialEq)]
#[cfg_attr(any(test, feature = "serde"), derive(serde::Serialize, serde::Deserialize))]
pub struct MfuCase {
    /// Example lengths.
    pub lens: Vec<u32>,
    /// `pad_to_multiple_of` (bionemo / CodonFM mock segment).
    pub multiple_of: usize,
    /// CodonFM splits the mock into segments of at most this many tokens.
    pub max_mock_len: Option<usize>,
    /// CP size whose divisibility padding (`2·cp` per sequence) is applied.
    pub cp: usize,
    /// Static padding to `Σ lens + static_extra` (open-instruct `max_seq_length`).
    pub static_extra: usize,
    /// The model.
    pub dims: ModelDims,
    /// The FLOPs formula.
    pub formula: FlopsFormula,
    /// What the hardware computes.
    pub view: HardwareView,
    /// The step time is `(1 + slack/4)` times the fastest the hardware work allows at peak.
    pub slack: u32,
}

/// An [`MfuCase`].
pub fn arb_mfu_case() -> impl Strategy<Value = MfuCase> {
    // Knobs before data: proptest shrinks a tuple left to right, once.
    (
        select(vec![1usize, 2, 8, 16, 64]),
        prop::option::of(1usize..=16),
        arb_cp(),
        0usize..=32,
        select(vec![FlopsFormula::MegatronLm, FlopsFormula::BionemoPerfLogger]),
        select(vec![HardwareView::Varlen, HardwareView::WholePack]),
        0u32..=8,
        arb_model_dims(),
        arb_seq_lens(SeqLensParams { min_len: 1, max_len: 48, max_segments: 6 }),
    )
        .prop_map(
            |(multiple_of, max_mock_len, cp, static_extra, formula, view, slack, dims, lens)| {
                MfuCase {
                    lens,
                    multiple_of,
                    max_mock_len,
                    cp,
                    static_extra,
                    dims,
                    formula,
                    view,
                    slack,
                }
            },
        )
}

/// Micro-batches of one step, all with the dataset's `seq_length` as tensor length.
#[derive(Debug, Clone, PartialEq, Eq)]
#[cfg_attr(any(test, feature = "serde"), derive(serde::Serialize, serde::Deserialize))]
pub struct FlopsCase {
    /// The config (dataset) `seq_length`, also every row's tensor length.
    pub seq_len: u64,
    /// The micro-batches.
    pub micro_batches: Vec<MicroBatchView>,
}

/// A [`FlopsCase`]: 1–4 micro-batches of 1–3 rows, packed (3 in 4) with rows of 1–4 sequences
/// of 1–16 tokens, or BSHD; `seq_len` is the longest row plus 0–16 tokens of padding.
pub fn arb_flops_case() -> impl Strategy<Value = FlopsCase> {
    let mb = (prop::bool::weighted(0.75), vec(vec(1u32..=16, 1..=4), 1..=3));
    (vec(mb, 1..=4), 0u64..=16).prop_map(|(mbs, extra)| {
        let longest = mbs
            .iter()
            .filter(|(packed, _)| *packed)
            .flat_map(|(_, rows)| {
                rows.iter().map(|row| row.iter().map(|&s| u64::from(s)).sum::<u64>())
            })
            .max()
            .unwrap_or(0);
        let seq_len = (longest + extra).max(1);
        let micro_batches = mbs
            .into_iter()
            .map(|(packed, rows)| MicroBatchView {
                rows: rows.len() as u64,
                seq_len,
                packed: packed.then_some(rows),
            })
            .collect();
        FlopsCase { seq_len, micro_batches }
    })
}
