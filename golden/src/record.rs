//! The metric record of one recipe step: every number a logger reports, computed exactly.
//!
//! The field names are a contract: Python teams compare their logger's JSON with this record
//! (`thdcheck metrics --recipe FILE --json`), and the golden snapshots pin it. A change of name
//! or meaning bumps [`SCHEMA_VERSION`].
//!
//! Conventions used throughout:
//! - every count is **global and pre-CP**: summed over all data-parallel ranks and all
//!   micro-batches of one optimizer step, on the unsharded layout, so it is the same for every
//!   CP size;
//! - **useful** counts real tokens of real segments only; **hardware** counts what the kernel
//!   is made to compute (padding, mock segments, the `hardware_view`);
//! - FLOPs are exact integers (training: forward + backward); rates are `f64`.

use serde::Serialize;
use thd::metrics::{AttnSums, CausalConvention, FlopsFormula, HardwareView};

use crate::recipe::{Format, RecipeObjective};

/// Version of the record's schema.
pub const SCHEMA_VERSION: u32 = 1;

/// Everything pinned for one recipe (one optimizer step).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RecipeRecord {
    /// [`SCHEMA_VERSION`].
    pub schema: u32,
    /// The recipe's name.
    pub recipe: String,
    /// Which stack the recipe comes from.
    pub stack: String,
    /// BSHD or THD.
    pub format: Format,
    /// What the labels are.
    pub objective: RecipeObjective,
    /// The FLOPs formula of `flops` and `throughput`.
    pub flops_formula: FlopsFormula,
    /// The causal convention of `throughput` (the stack's logger's).
    pub causal: CausalConvention,
    /// What `hardware` means: `varlen` (every segment at its padded length) or `whole_pack`
    /// (each row as one sequence).
    pub hardware_view: HardwareView,
    /// The step: GPUs, micro-batches, rows, segments, time.
    pub step: StepShape,
    /// Token counts.
    pub tokens: RecipeTokens,
    /// Attention work (Σs, Σs², Σs(s+1)/2) under each accounting.
    pub attention: AttentionWork,
    /// FLOPs under each causal convention.
    pub flops: FlopsByConvention,
    /// TFLOP/s per GPU, MFU and tokens/s under the recipe's convention.
    pub throughput: Throughput,
    /// How well the packer filled the rows.
    pub packing: PackingRecord,
    /// Per-CP-rank token counts and their totals.
    pub cp: CpRecord,
    /// Vision patches (VLM recipes only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub vision: Option<VisionRecord>,
    /// CP-local vs global loss on seeded logits for the first micro-batch.
    pub loss_sample: LossSample,
}

/// The shape of the step.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct StepShape {
    /// Every GPU of the job.
    pub num_gpus: u64,
    /// Data-parallel size.
    pub dp: u64,
    /// Context-parallel size.
    pub cp: u64,
    /// Tensor-parallel size.
    pub tp: u64,
    /// Pipeline-parallel size.
    pub pp: u64,
    /// Micro-batches of the step over all DP ranks: `dp · grad_acc`.
    pub micro_batches: u64,
    /// Stored rows: one packed row per THD micro-batch, `micro_batch_size` rows per BSHD one.
    pub rows: u64,
    /// Distinct documents (examples, or pairs for DPO) in the step.
    pub documents: u64,
    /// Segments, real and mock.
    pub segments: u64,
    /// Real segments (documents, or pieces of split documents; chosen and rejected count
    /// separately for DPO).
    pub real_segments: u64,
    /// Mock segments (padding dressed as sequences).
    pub mock_segments: u64,
    /// Wall time of the step, seconds (from the recipe).
    pub step_time_s: f64,
    /// Peak the MFU divides by, TFLOP/s per GPU (from the recipe).
    pub peak_tflops_per_gpu: f64,
}

/// Token counts of the step.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct RecipeTokens {
    /// `Σ sᵢ` over real segments: real tokens, no padding, no mock segment.
    pub real: u64,
    /// Stored tokens: every row's length, all padding included.
    pub padded: u64,
    /// Loss positions with a target (labels ≠ -100).
    pub valid: u64,
    /// `padded − real`.
    pub padding: u64,
    /// Tokens in mock segments (a part of `padding`).
    pub mock: u64,
}

/// The attention sums of one set of sequences.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Sums {
    /// Number of sequences.
    pub seqs: u64,
    /// `Σ sᵢ`.
    pub sum_lengths: u64,
    /// `Σ sᵢ²`.
    pub sum_squares: u128,
    /// `Σ sᵢ(sᵢ+1)/2`, the exact causal triangle.
    pub causal_triangle: u128,
}

impl From<AttnSums> for Sums {
    fn from(a: AttnSums) -> Self {
        Self {
            seqs: a.seqs,
            sum_lengths: a.tokens,
            sum_squares: a.sum_squares,
            causal_triangle: a.triangle,
        }
    }
}

/// Attention work under each accounting.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct AttentionWork {
    /// Real segments at real lengths: what the model is meant to compute.
    pub useful: Sums,
    /// What the kernel computes under the record's `hardware_view`.
    pub hardware: Sums,
    /// Every segment at its `cu_seqlens` length, mock segments included (CP padding
    /// excluded): what a logger that reads `cu_seqlens` without `num_real_seqs` sums
    /// (bionemo #1561, Megatron-Bridge's counted pack tail).
    pub mock_inflated: Sums,
    /// Every micro-batch as `approx_rows` sequences of `approx_row_length` tokens: the BSHD /
    /// pack-length approximation (Megatron-Bridge before #3839, `mbs · seq_length²`).
    pub bshd_approx: Sums,
    /// `Σs²` of each accounting divided by useful `Σs²`.
    pub sum_squares_over_useful: Ratios,
}

/// Ratios to the useful value (1 when equal; 0 when the useful value is 0).
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Ratios {
    /// Hardware / useful.
    pub hardware: f64,
    /// Mock-inflated / useful.
    pub mock_inflated: f64,
    /// BSHD approximation / useful.
    pub bshd_approx: f64,
}

/// FLOPs of the step under one causal convention (exact integers).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct FlopsSet {
    /// Real tokens, useful attention (bionemo: raw vocabulary).
    pub useful: u128,
    /// Stored tokens, hardware attention (bionemo: padded vocabulary).
    pub hardware: u128,
    /// Real tokens, mock-inflated attention (the #1561 logger).
    pub mock_inflated: u128,
    /// Approximation tokens (`rows · row_length`), approximation attention.
    pub bshd_approx: u128,
}

/// FLOPs under each causal convention, with the recipe's formula.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct FlopsByConvention {
    /// Full `s²` (bionemo, PaLM, OLMo-core; right for bidirectional models).
    pub none: FlopsSet,
    /// `s²/2` (Megatron).
    pub half: FlopsSet,
    /// `s(s+1)/2`, the exact causal triangle.
    pub exact_triangle: FlopsSet,
}

impl FlopsByConvention {
    /// The set for `causal`.
    ///
    /// # Example
    /// ```
    /// use golden::record::{FlopsByConvention, FlopsSet};
    /// use thd::metrics::CausalConvention;
    /// let s = |x| FlopsSet { useful: x, hardware: x, mock_inflated: x, bshd_approx: x };
    /// let f = FlopsByConvention { none: s(3), half: s(1), exact_triangle: s(2) };
    /// assert_eq!(f.get(CausalConvention::ExactTriangle).useful, 2);
    /// ```
    pub fn get(&self, causal: CausalConvention) -> FlopsSet {
        match causal {
            CausalConvention::None => self.none,
            CausalConvention::Half => self.half,
            CausalConvention::ExactTriangle => self.exact_triangle,
        }
    }
}

/// A rate under each accounting.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Rates {
    /// Useful.
    pub useful: f64,
    /// Hardware.
    pub hardware: f64,
    /// Mock-inflated.
    pub mock_inflated: f64,
    /// BSHD approximation.
    pub bshd_approx: f64,
}

/// What the logger divides out, under the recipe's causal convention.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Throughput {
    /// `flops / step_time_s / num_gpus / 1e12`.
    pub tflops_per_gpu: Rates,
    /// `100 · flops / (step_time_s · num_gpus · peak)`: `useful` is bionemo's `mfu_pct`,
    /// `hardware` its `mfu_padded_pct`.
    pub mfu_pct: Rates,
    /// Real tokens per second per GPU.
    pub tokens_per_second_per_gpu: f64,
    /// FLOPs of each accounting divided by useful FLOPs: the over-count of a logger that uses
    /// it (`bshd_approx` is the #3839 "baseline over-count").
    pub flops_over_useful: Ratios,
}

/// Packing statistics ([`thd::pack::PackingStats`]) of the step's rows.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PackingRecord {
    /// `in_batch`, a packer's name, or `bshd_rows`.
    pub strategy: String,
    /// Tokens per row (per branch for DPO).
    pub capacity: u32,
    /// Rows (packs).
    pub packs: u64,
    /// Items (documents or pieces) over all packs.
    pub items: u64,
    /// Real tokens, all branches.
    pub real_tokens: u64,
    /// Storage at full capacity, all branches.
    pub storage_tokens: u64,
    /// `storage − real`.
    pub pad_tokens: u64,
    /// `max_b ⌈Σ real_b / capacity⌉`.
    pub lower_bound_packs: u64,
    /// `lower_bound_packs / packs`.
    pub efficiency: f64,
    /// `pad_tokens / storage_tokens`.
    pub wasted_fraction: f64,
    /// Documents the packer still held when the step was full (carried to the next step).
    pub carried: u64,
    /// Documents the packer dropped (always reported, never silent).
    pub dropped: u64,
}

/// Token counts of one CP rank (or their totals), summed over the step's micro-batches.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct RankTokens {
    /// The rank (absent in totals).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rank: Option<u64>,
    /// Real tokens of real segments the rank holds.
    pub real: u64,
    /// Tokens the rank stores (`T/cp` per row).
    pub stored: u64,
    /// Valid labels the rank holds (labels rolled before the split).
    pub valid: u64,
}

/// Per-CP-rank token counts and their invariant totals.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CpRecord {
    /// CP size.
    pub size: u64,
    /// One entry per rank.
    pub per_rank: Vec<RankTokens>,
    /// Σ over ranks.
    pub totals: RankTokens,
    /// `totals` equal `tokens.real`, `tokens.padded` and `tokens.valid` (TOKENS-CP, CP-SHARD).
    pub totals_match_global: bool,
}

/// Vision patches of a VLM step (ViT FLOPs are not modelled by `thd`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct VisionRecord {
    /// Images.
    pub images: u64,
    /// `Σ t·h·w` patches ([`thd::metrics::megatron::vision_patches_from_grid_thw`]).
    pub patches: u64,
    /// `Σ (patches per image)²` (each image is its own ViT sequence).
    pub patch_sum_squares: u128,
    /// LLM tokens the patches merge into.
    pub merged_tokens: u64,
}

/// `Σ NLL` and count of one rank.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct RankLoss {
    /// The rank.
    pub rank: u64,
    /// `Σ NLL` over the rank's valid labels.
    pub nll: f64,
    /// Valid labels on the rank.
    pub count: u64,
    /// `nll / count` (0 when empty).
    pub mean: f64,
}

/// What a CP-invariant logger reports for the sample ([`thd::cp::logger_stats`]).
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct LoggerRecord {
    /// Real sequences with at least one valid label.
    pub n_seqs: u64,
    /// Real tokens.
    pub n_tokens: u64,
    /// Valid labels.
    pub n_valid_tokens: u64,
    /// `n_tokens − n_valid_tokens`.
    pub prompt_tokens: u64,
    /// Mean NLL over valid labels.
    pub loss: f64,
    /// Mean per-sequence perplexity.
    pub ppl_avg: Option<f64>,
    /// Smallest per-sequence perplexity.
    pub ppl_min: Option<f64>,
    /// Largest per-sequence perplexity.
    pub ppl_max: Option<f64>,
}

/// The loss of the first micro-batch's first row on seeded logits (uniform in `[-3, 3)`),
/// computed globally and CP-locally.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct LossSample {
    /// Vocabulary of the sample.
    pub vocab: u64,
    /// Stored tokens of the sample row.
    pub tokens: u64,
    /// Valid labels.
    pub valid: u64,
    /// `thd::packed_cross_entropy` on the unsharded row: the global mean loss.
    pub global_loss: f64,
    /// `oracle::cross_entropy` on the real tokens (causal objectives; `None` for MLM, which
    /// the oracle does not model).
    pub oracle_loss: Option<f64>,
    /// `Σ_r nll_r / Σ_r count_r` from the CP-local sums ([`thd::cp::cp_local_loss`]).
    pub cp_local_loss: f64,
    /// The classic bug: the mean of per-rank means.
    pub mean_of_rank_means: f64,
    /// `cp_local_loss` equals `global_loss` within relative 1e-12 (CP-LOSS).
    pub cp_local_matches_global: bool,
    /// Per-rank sums.
    pub per_rank: Vec<RankLoss>,
    /// The CP-invariant logger statistics.
    pub logger: LoggerRecord,
}
