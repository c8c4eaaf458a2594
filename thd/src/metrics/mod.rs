//! Accounting: tokens, attention work, FLOPs and MFU of packed batches.
//!
//! Counts are exact integers (`u64` tokens, `u128` Σs² and FLOPs); only rates (TFLOP/s, MFU,
//! tokens/s) are `f64`. Everything is computed from the **global, pre-CP** layout (real
//! `cu_seqlens`, `num_real_seqs`), so every count is the same for any CP size, and **useful**
//! work (real tokens of real segments) is kept apart from **hardware** work (padding, mock
//! segments, a pack seen as one sequence).
//!
//! | item | what | upstream |
//! |---|---|---|
//! | [`ModelDims`], [`CausalConvention`] | model shape; how causal attention is counted | — |
//! | [`BatchWork`], [`AttnSums`], [`HardwareView`] | per-batch tokens, valid labels, Σs, Σs², Σs(s+1)/2, useful and hardware | — |
//! | [`megatron_flops`], [`FlopsFormula::MegatronLm`] | `6·T·[…] + 6·L·q·W` | Megatron-LM PR #4103, Megatron-Bridge #3839 |
//! | [`bionemo_flops`], [`FlopsFormula::BionemoPerfLogger`] | `non_attn·T + 12·L·h·Σs²` | bionemo PR #1548 |
//! | [`megatron`] | accumulators, DP resolution, `num_floating_point_operations` | Megatron-Bridge `flop_utils.py` |
//! | [`bionemo`] | `_attn_work_from_batch`, window FLOPs, GPU peak table | bionemo `perf_logger.py` |
//! | [`open_instruct`] | counts from `cu_seq_lens_k`, `prefill_flops` | open-instruct #1457/#1466/#1719 |
//! | [`mfu_pct`], [`StepReport`], [`tokens_per_second_per_gpu`] | rates | all |
//!
//! # Example
//! ```
//! use thd::{PackedBatch, PackedBatchParts};
//! use thd::metrics::{BatchWork, CausalConvention, FlopsFormula, HardwareView, ModelDims, StepReport, StepTiming};
//! let dims = ModelDims { layers: 2, hidden: 128, heads: 8, kv_heads: 4, head_dim: 16, ffn: 256,
//!     mlp_projections: 2, vocab: 1024, padded_vocab: None, causal: CausalConvention::Half,
//!     attention_output_gate: false };
//! // Two documents and a mock segment from pad_to_multiple_of.
//! let batch = PackedBatch::new(PackedBatchParts {
//!     input_ids: vec![7; 8],
//!     labels: vec![-100, 7, 7, -100, 7, 7, -100, -100],
//!     cu_seqlens: vec![0, 3, 6, 8],
//!     num_real_seqs: Some(2),
//!     ..Default::default()
//! })?;
//! let work = BatchWork::from_batch(&batch);
//! let flops = work.flops(&dims, FlopsFormula::MegatronLm, HardwareView::Varlen)?;
//! let timing = StepTiming { step_time_s: 1e-3, num_gpus: 1, peak_flops_per_gpu: 989e12 };
//! let report = StepReport::new(flops, work.real_tokens, &timing)?;
//! assert!(report.mfu_pct < report.mfu_padded_pct);
//! # Ok::<(), thd::Error>(())
//! ```

pub mod bionemo;
mod flops;
pub mod megatron;
mod mfu;
mod model_dims;
pub mod open_instruct;
mod work;

pub use flops::{
    Flops, FlopsFormula, Vocab, bionemo_attn_coeff, bionemo_flops, bionemo_non_attn_per_token,
    megatron_flops,
};
pub use mfu::{
    StepReport, StepTiming, flops_per_second_per_gpu, mfu_pct, tokens_per_second_per_gpu,
};
pub use model_dims::{CausalConvention, ModelDims, megatron_padded_vocab};
pub use work::{AttnSums, BatchWork, HardwareView};
