//! Recipe files: a training configuration of one of the seed stacks, plus a seeded document
//! distribution that generates its batches.
//!
//! A recipe is a TOML file with these tables (every unknown key is an error):
//!
//! | table | keys |
//! |---|---|
//! | top level | `name`, `stack`, `source` |
//! | `[model]` | `name`, `layers`, `hidden`, `heads`, `kv_heads`, `head_dim`, `ffn`, `mlp_projections`, `vocab`, `padded_vocab`?, `attention_output_gate`? |
//! | `[flops]` | `formula` (`megatron_lm` / `bionemo_perf_logger`), `causal` (`none` / `half` / `exact_triangle`), `hardware_view`? (`varlen` / `whole_pack`) |
//! | `[batch]` | `format` (`thd` / `bshd`), `objective` (`clm` / `sft` / `mlm` / `dpo`), `micro_batch_size`, `seq_length`, `grad_acc`?, `mlm_probability`?, `approx_rows`?, `approx_row_length`? |
//! | `[packing]` (THD) | `strategy` (`in_batch` / `token_packing` / `sequential_budget` / `first_fit` / `best_fit` / `first_fit_decreasing`), `capacity`?, `split_samples`?, `examples_per_push`? |
//! | `[padding]` | `pad_token_id`?, `pad_to_multiple_of`?, `max_mock_len`?, `cp_divisibility`?, `static_length`? |
//! | `[parallel]` | `num_gpus`, `cp`?, `tp`?, `pp`? |
//! | `[timing]` | `step_time_s`, `peak_tflops_per_gpu`, `dtype`, `gpu` |
//! | `[data]` | `seed`, `lengths`, `rejected_lengths`?, `prompt_percent`?, `[data.vision]`? |
//! | `[loss_sample]` | `vocab`?, `seed`? |
//!
//! See `golden/README.md` for the meaning of each key and how the step is built.
//!
//! # What the simulation holds
//!
//! [`metrics`](crate::metrics) builds every row of one optimizer step in memory, so
//! [`Recipe::validate`] bounds what a recipe may ask for, from its keys alone and before
//! anything is built; a recipe past a bound is an [`Error::Invalid`] naming the key. Within the
//! bounds a step takes seconds and under 2 GiB (25 to 40 bytes per stored token, plus 8 bytes
//! per logit of the loss sample, twice: 1.7 GB for four rows of 2²² tokens and a loss sample of
//! 2²⁶ logits), and every count is exact: every FLOPs count fits `u128` and every token count
//! `u64`.
//!
//! | bound | value | keys it names |
//! |---|---|---|
//! | [`MAX_MODEL_DIM`] | each model dimension and `heads · head_dim` ≤ 2²⁴ | `model.*` |
//! | [`MAX_MICRO_BATCHES`] | `dp · grad_acc` ≤ 65,536 | `batch.grad_acc`, `parallel.num_gpus` |
//! | [`MAX_DOCUMENTS`] | documents drawn per step ≤ 1,000,000 (BSHD and `in_batch`: `dp · grad_acc · micro_batch_size`) | `batch.micro_batch_size` |
//! | [`MAX_EXAMPLES_PER_PUSH`] | `packing.examples_per_push` ≤ 16,384 (a bin packer is quadratic in its window) | `packing.examples_per_push` |
//! | [`MAX_ROW_TOKENS`] | stored tokens of one row ≤ 2²² (4,194,304) | `packing.capacity`, `batch.seq_length`, `padding.*` |
//! | [`MAX_STEP_TOKENS`] | stored tokens of the step ≤ 2²⁴ (16,777,216) | the largest factor |
//! | [`MAX_LOSS_SAMPLE_LOGITS`] | row tokens · `loss_sample.vocab` ≤ 2²⁶ (a row of 2²⁰ tokens at the default vocab of 64) | `loss_sample.vocab` |
//! | [`MAX_APPROX_TOKENS`] | tokens the BSHD approximation charges ≤ 2⁴⁰ | `batch.approx_*`, `batch.seq_length` |
//! | [`MAX_IMAGE_PATCHES`] | patches of one image, rounded up to `spatial_merge` < 2³² | `data.vision.*` |
//!
//! A row's bound is an upper bound from the keys: the packer's capacity (`in_batch`:
//! `micro_batch_size · seq_length`; BSHD: `seq_length`; DPO: both branches of `static_length`
//! or `capacity`), plus `cp_divisibility − 1` per segment, rounded up to `pad_to_multiple_of`.

use std::path::Path;

use serde::{Deserialize, Serialize};
use thd::metrics::{CausalConvention, FlopsFormula, HardwareView, ModelDims};

use crate::dist::LengthDist;
use crate::{Error, Result};

/// Each model dimension (`layers`, `hidden`, `heads`, `kv_heads`, `head_dim`, `ffn`, `vocab`,
/// `padded_vocab`) and the query width `heads · head_dim` is at most this (2²⁴): with the step
/// bounds below, every FLOPs count fits `u128`.
pub const MAX_MODEL_DIM: u64 = 1 << 24;
/// Micro-batches of one step, `dp · grad_acc` (the CLI's `--grad-acc` and `--dp-size` range).
pub const MAX_MICRO_BATCHES: u64 = 65_536;
/// Documents one step may draw (BSHD and `in_batch` checked from the keys; packers stop and
/// report when they have not filled the step after this many).
pub const MAX_DOCUMENTS: u64 = 1_000_000;
/// Documents per push into a packer: first fit and best fit are quadratic in their window.
pub const MAX_EXAMPLES_PER_PUSH: usize = 16_384;
/// Stored tokens of one row (an upper bound from the keys, padding included).
pub const MAX_ROW_TOKENS: u64 = 1 << 22;
/// Stored tokens of one step: every row is held in memory (about 25 bytes a token).
pub const MAX_STEP_TOKENS: u64 = 1 << 24;
/// Logits of the loss sample: one row's tokens times `loss_sample.vocab` (8 bytes each, held
/// twice: global and split over the CP ranks).
pub const MAX_LOSS_SAMPLE_LOGITS: u64 = 1 << 26;
/// Tokens the BSHD approximation charges: `approx_rows · dp · grad_acc · approx_row_length`.
pub const MAX_APPROX_TOKENS: u64 = 1 << 40;
/// Patches of one image after its sides are rounded up to a multiple of `spatial_merge`.
pub const MAX_IMAGE_PATCHES: u64 = u32::MAX as u64;

/// `1234567` → `1,234,567` (the tables' numbers and the limits in recipe errors).
pub(crate) fn grouped(n: u128) -> String {
    let s = n.to_string();
    let mut out = String::with_capacity(s.len() + s.len() / 3);
    for (i, c) in s.chars().enumerate() {
        if i > 0 && (s.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// How a micro-batch is stored.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Format {
    /// `[B, S]` rows, one document per row, right-padded to `seq_length`.
    Bshd,
    /// Packed rows with `cu_seqlens`.
    Thd,
}

/// What the labels are.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RecipeObjective {
    /// Causal LM pretraining: every token but a document's first is a target.
    Clm,
    /// Supervised fine-tuning: the prompt (`data.prompt_percent` of each document) is masked.
    Sft,
    /// Masked LM (ESM-2, CodonFM): a `batch.mlm_probability` share of the inner tokens are
    /// targets at their own position (labels already aligned, no shift).
    Mlm,
    /// DPO: chosen and rejected branches, prompts masked, concatenated into one row.
    Dpo,
}

/// Which packer fills the THD rows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Strategy {
    /// No packer: every micro-batch is the next `micro_batch_size` documents concatenated
    /// (CodonFM `CodonTHDCollator`, VLM in-batch packing).
    InBatch,
    /// bionemo `TokenPackingDataset` ([`thd::pack::TokenPacking`]).
    TokenPacking,
    /// open-instruct sequential budget with overflow carry ([`thd::pack::SequentialBudget`]).
    SequentialBudget,
    /// First fit over each pushed window ([`thd::pack::FirstFit`]).
    FirstFit,
    /// Best fit over each pushed window ([`thd::pack::BestFit`]).
    BestFit,
    /// First fit decreasing over each pushed window (Megatron-Bridge offline packing).
    FirstFitDecreasing,
}

impl Strategy {
    /// The name reports use.
    ///
    /// # Example
    /// ```
    /// use golden::recipe::Strategy;
    /// assert_eq!(Strategy::FirstFitDecreasing.name(), "first_fit_decreasing");
    /// ```
    pub fn name(self) -> &'static str {
        match self {
            Strategy::InBatch => "in_batch",
            Strategy::TokenPacking => "token_packing",
            Strategy::SequentialBudget => "sequential_budget",
            Strategy::FirstFit => "first_fit",
            Strategy::BestFit => "best_fit",
            Strategy::FirstFitDecreasing => "first_fit_decreasing",
        }
    }
}

/// `[model]`: the dimensions every FLOPs formula needs.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ModelSection {
    /// The model's name, e.g. `Qwen3-8B`.
    pub name: String,
    /// Transformer layers `L`.
    pub layers: u64,
    /// Hidden size `h`.
    pub hidden: u64,
    /// Query heads `H`.
    pub heads: u64,
    /// Key/value heads `K`.
    pub kv_heads: u64,
    /// Head dimension `d` (`q = H·d` may differ from `h`).
    pub head_dim: u64,
    /// FFN hidden size (for an MoE: the active experts' total, see the recipe's comment).
    pub ffn: u64,
    /// 2 (up, down) or 3 (SwiGLU).
    pub mlp_projections: u32,
    /// Vocabulary size.
    pub vocab: u64,
    /// Padded vocabulary (LM head width), if larger.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub padded_vocab: Option<u64>,
    /// Megatron's `attention_output_gate`.
    #[serde(default)]
    pub attention_output_gate: bool,
}

/// `[flops]`: which formula the stack's logger uses and how it counts causal attention.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FlopsSection {
    /// The FLOPs formula.
    pub formula: FlopsFormula,
    /// The causal convention of the headline numbers (`throughput`); the record gives the
    /// FLOPs under all three.
    pub causal: CausalConvention,
    /// What the attention kernel computes; forced to `whole_pack` for BSHD.
    #[serde(default)]
    pub hardware_view: HardwareView,
}

/// `[batch]`: the shape of a micro-batch and the labels.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BatchSection {
    /// BSHD or THD.
    pub format: Format,
    /// What the labels are.
    pub objective: RecipeObjective,
    /// The config's micro-batch size: BSHD rows, `in_batch` documents, and the rows the BSHD
    /// approximation charges.
    pub micro_batch_size: u64,
    /// The config's sequence length: BSHD row length, the longest document, the BSHD
    /// approximation's row length.
    pub seq_length: u32,
    /// Micro-batches per optimizer step on each data-parallel rank.
    #[serde(default = "one")]
    pub grad_acc: u64,
    /// MLM masking probability (`objective = "mlm"` only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mlm_probability: Option<f64>,
    /// Rows the BSHD approximation charges per micro-batch (default `micro_batch_size`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub approx_rows: Option<u64>,
    /// Row length of the BSHD approximation (default `seq_length`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub approx_row_length: Option<u32>,
}

/// `[packing]`: the packer of THD recipes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PackingSection {
    /// The packer.
    pub strategy: Strategy,
    /// Tokens per pack (per branch for DPO); `in_batch` defaults to `micro_batch_size ·
    /// seq_length`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub capacity: Option<u32>,
    /// `token_packing`: split the sample that crosses the budget.
    #[serde(default)]
    pub split_samples: bool,
    /// Documents per loader batch pushed into the packer (per-rank batch for
    /// `sequential_budget`, the packing window for the bin packers).
    #[serde(default = "default_push")]
    pub examples_per_push: usize,
}

/// `[padding]`: how each row is padded after packing.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PaddingSection {
    /// Token id of every pad (ESM-2 1, CodonFM 3, else 0); no metric depends on it.
    #[serde(default)]
    pub pad_token_id: i64,
    /// Append mock segments so each row's token count is a multiple of this.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pad_to_multiple_of: Option<usize>,
    /// Split the mock into segments of at most this many tokens (CodonFM).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_mock_len: Option<usize>,
    /// Pad every sequence to a multiple of this (TE CP divisibility, `2·cp·tp`); also the
    /// `token_packing` packer's `divisible_by`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cp_divisibility: Option<usize>,
    /// DPO: the per-branch budget and static length (open-instruct `max_seq_length`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub static_length: Option<usize>,
}

/// `[parallel]`: the GPUs of the job.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ParallelSection {
    /// Every GPU of the job (`dp·cp·tp·pp`).
    pub num_gpus: u64,
    /// Context-parallel size.
    #[serde(default = "one")]
    pub cp: u64,
    /// Tensor-parallel size.
    #[serde(default = "one")]
    pub tp: u64,
    /// Pipeline-parallel size.
    #[serde(default = "one")]
    pub pp: u64,
}

impl Default for ParallelSection {
    fn default() -> Self {
        Self { num_gpus: 1, cp: 1, tp: 1, pp: 1 }
    }
}

impl ParallelSection {
    /// Data-parallel size, `num_gpus / (cp·tp·pp)`.
    ///
    /// # Example
    /// ```
    /// use golden::recipe::ParallelSection;
    /// assert_eq!(ParallelSection { num_gpus: 8, cp: 2, tp: 2, pp: 1 }.dp(), 2);
    /// ```
    pub fn dp(&self) -> u64 {
        self.num_gpus / (self.cp * self.tp * self.pp).max(1)
    }
}

/// `[timing]`: what the logger divides by.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TimingSection {
    /// Wall time of one optimizer step, seconds.
    pub step_time_s: f64,
    /// The dense peak the logger divides by, TFLOP/s per GPU.
    pub peak_tflops_per_gpu: f64,
    /// Compute dtype (informational; the peak is the one for this dtype).
    pub dtype: String,
    /// GPU model (informational).
    pub gpu: String,
}

/// `[data.vision]`: one image per sample, its patch grid, and the merge into LLM tokens.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct VisionSection {
    /// Patch rows per image (rounded up to a multiple of `spatial_merge`).
    pub grid_h: LengthDist,
    /// Patch columns per image (rounded up to a multiple of `spatial_merge`).
    pub grid_w: LengthDist,
    /// Patches merged per side into one LLM token (Qwen-VL: 2, i.e. 4 patches per token).
    pub spatial_merge: u32,
}

/// `[data]`: the seeded documents.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DataSection {
    /// Seed of every draw.
    pub seed: u64,
    /// Document (text) lengths in tokens; the chosen branch for DPO.
    pub lengths: LengthDist,
    /// DPO: rejected lengths.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rejected_lengths: Option<LengthDist>,
    /// SFT / DPO: the prompt share of each document's text, percent, drawn uniformly on
    /// `[lo, hi]`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prompt_percent: Option<[u32; 2]>,
    /// VLM: an image per sample whose merged tokens precede the text.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub vision: Option<VisionSection>,
}

/// `[loss_sample]`: the seeded logits of the loss sample.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LossSampleSection {
    /// Vocabulary of the sample (token ids and logits columns).
    #[serde(default = "default_sample_vocab")]
    pub vocab: usize,
    /// Seed of the logits.
    #[serde(default)]
    pub seed: u64,
}

impl Default for LossSampleSection {
    fn default() -> Self {
        Self { vocab: default_sample_vocab(), seed: 0 }
    }
}

/// A recipe: one training configuration of a seed stack and the documents that feed it.
///
/// # Example
/// ```
/// use golden::Recipe;
/// let path = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/recipes/codonfm_encodon_1b.toml");
/// let recipe = Recipe::load(path)?;
/// assert_eq!(recipe.name, "codonfm_encodon_1b");
/// assert_eq!(recipe.padding.pad_to_multiple_of, Some(2048));
/// # Ok::<(), golden::Error>(())
/// ```
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Recipe {
    /// Short name, the file's stem.
    pub name: String,
    /// The stack the recipe comes from, by the name of its profile (`thdcheck profile list`:
    /// `bionemo`, `megatron_bridge`, ...); informational, it selects nothing. A stack is data:
    /// naming a new one is a new profile, not a new variant here.
    pub stack: String,
    /// Where the numbers come from (config file, PR, reference section).
    pub source: String,
    /// Model dimensions.
    pub model: ModelSection,
    /// FLOPs formula and conventions.
    pub flops: FlopsSection,
    /// Micro-batch shape and labels.
    pub batch: BatchSection,
    /// The packer (THD only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub packing: Option<PackingSection>,
    /// Padding after packing.
    #[serde(default)]
    pub padding: PaddingSection,
    /// GPUs.
    #[serde(default)]
    pub parallel: ParallelSection,
    /// Step time and peak.
    pub timing: TimingSection,
    /// Documents.
    pub data: DataSection,
    /// Loss sample.
    #[serde(default)]
    pub loss_sample: LossSampleSection,
}

fn one() -> u64 {
    1
}

fn default_push() -> usize {
    64
}

fn default_sample_vocab() -> usize {
    64
}

impl Recipe {
    /// Reads and validates a recipe file.
    ///
    /// # Errors
    /// [`Error::Io`] if the file cannot be read or is not a regular file (a FIFO, a directory);
    /// [`Error::Parse`] for invalid TOML or an
    /// unknown, missing or mistyped key (the message names it and shows the line);
    /// [`Error::Invalid`] naming the key and value that [`Recipe::validate`] rejects.
    ///
    /// # Example
    /// ```
    /// use golden::Recipe;
    /// let err = Recipe::load("no/such/recipe.toml").unwrap_err();
    /// assert!(err.to_string().starts_with("cannot read recipe no/such/recipe.toml"));
    /// ```
    pub fn load(path: impl AsRef<Path>) -> Result<Self> {
        let path = path.as_ref();
        let io = |source| Error::Io { path: path.to_path_buf(), source };
        // Opening a FIFO would block until a writer comes, and a directory is no recipe.
        let meta = std::fs::metadata(path).map_err(io)?;
        if !meta.is_file() {
            return Err(io(std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                "not a regular file (a directory, a FIFO or a device?)",
            )));
        }
        let text = std::fs::read_to_string(path).map_err(io)?;
        Self::from_toml_str(&text, &path.display().to_string())
    }

    /// Parses and validates recipe text; `origin` names it in errors.
    ///
    /// # Errors
    /// [`Error::Parse`] or [`Error::Invalid`], as for [`Recipe::load`].
    ///
    /// # Example
    /// ```
    /// use golden::Recipe;
    /// let path = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/recipes/codonfm_encodon_1b.toml");
    /// let text = std::fs::read_to_string(path).unwrap();
    /// let bad = text.replace("num_gpus = 8", "num_gpus = 0");
    /// let err = Recipe::from_toml_str(&bad, "edited").unwrap_err();
    /// assert_eq!(err.to_string(), "recipe edited: parallel.num_gpus = 0: must be at least 1");
    /// let typo = text.replace("seq_length = 512", "seq_lenght = 512");
    /// assert!(Recipe::from_toml_str(&typo, "edited").unwrap_err().to_string().contains("seq_lenght"));
    /// ```
    pub fn from_toml_str(text: &str, origin: &str) -> Result<Self> {
        let recipe: Recipe = toml::from_str(text).map_err(|e| Error::Parse {
            origin: origin.to_string(),
            message: e.to_string().trim_end().to_string(),
        })?;
        recipe.validate(origin)?;
        Ok(recipe)
    }

    /// The model as `thd` takes it, with the recipe's causal convention.
    ///
    /// # Example
    /// ```
    /// # use golden::Recipe;
    /// # let path = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/recipes/codonfm_encodon_1b.toml");
    /// let dims = Recipe::load(path)?.model_dims();
    /// assert_eq!((dims.layers, dims.hidden), (18, 2048));
    /// # Ok::<(), golden::Error>(())
    /// ```
    pub fn model_dims(&self) -> ModelDims {
        let m = &self.model;
        ModelDims {
            layers: m.layers,
            hidden: m.hidden,
            heads: m.heads,
            kv_heads: m.kv_heads,
            head_dim: m.head_dim,
            ffn: m.ffn,
            mlp_projections: m.mlp_projections,
            vocab: m.vocab,
            padded_vocab: m.padded_vocab,
            causal: self.flops.causal,
            attention_output_gate: m.attention_output_gate,
        }
    }

    /// The hardware view the record uses: the recipe's, except `whole_pack` for BSHD (a dense
    /// kernel computes every row in full).
    ///
    /// # Example
    /// ```
    /// # use golden::Recipe;
    /// use thd::metrics::HardwareView;
    /// # let path = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/recipes/esm2_t33_650m_l1.toml");
    /// assert_eq!(Recipe::load(path)?.hardware_view(), HardwareView::WholePack);
    /// # Ok::<(), golden::Error>(())
    /// ```
    pub fn hardware_view(&self) -> HardwareView {
        match self.batch.format {
            Format::Bshd => HardwareView::WholePack,
            Format::Thd => self.flops.hardware_view,
        }
    }

    /// The pack capacity: the packer's, or `micro_batch_size · seq_length` for `in_batch`, or
    /// `seq_length` for BSHD rows.
    ///
    /// # Example
    /// ```
    /// # use golden::Recipe;
    /// # let path = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/recipes/codonfm_encodon_1b.toml");
    /// assert_eq!(Recipe::load(path)?.capacity(), 2048); // 4 · 512
    /// # Ok::<(), golden::Error>(())
    /// ```
    ///
    /// [`Recipe::validate`] bounds the product by [`MAX_ROW_TOKENS`]; an unvalidated recipe whose
    /// product does not fit `u32` gets `u32::MAX`, never a truncated capacity.
    pub fn capacity(&self) -> u32 {
        match &self.packing {
            None => self.batch.seq_length,
            Some(p) => p.capacity.unwrap_or_else(|| {
                let c =
                    self.batch.micro_batch_size.saturating_mul(u64::from(self.batch.seq_length));
                u32::try_from(c).unwrap_or(u32::MAX)
            }),
        }
    }

    /// Checks every rule a well-typed recipe must also satisfy.
    ///
    /// # Errors
    /// [`Error::Invalid`] naming the first key (dotted) and value that break a rule, and why.
    ///
    /// # Example
    /// ```
    /// # use golden::Recipe;
    /// # let path = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/recipes/codonfm_encodon_1b.toml");
    /// let mut recipe = Recipe::load(path)?;
    /// recipe.parallel.cp = 2;
    /// let err = recipe.validate("edited").unwrap_err();
    /// assert_eq!(err.to_string(), "recipe edited: parallel.cp = 2: cp > 1 needs batch.format = \"thd\" and padding.cp_divisibility");
    /// # Ok::<(), golden::Error>(())
    /// ```
    pub fn validate(&self, origin: &str) -> Result<()> {
        let bad = |key: &str, value: String, reason: String| {
            Err(Error::Invalid { origin: origin.to_string(), key: key.into(), value, reason })
        };
        if self.name.is_empty() {
            return bad("name", "\"\"".into(), "must not be empty".into());
        }
        let m = &self.model;
        for (key, v) in [
            ("model.layers", Some(m.layers)),
            ("model.hidden", Some(m.hidden)),
            ("model.heads", Some(m.heads)),
            ("model.kv_heads", Some(m.kv_heads)),
            ("model.head_dim", Some(m.head_dim)),
            ("model.ffn", Some(m.ffn)),
            ("model.vocab", Some(m.vocab)),
            ("model.padded_vocab", m.padded_vocab),
        ] {
            if let Some(v) = v.filter(|&v| v > MAX_MODEL_DIM) {
                return bad(
                    key,
                    v.to_string(),
                    format!(
                        "must be at most {} (golden::recipe::MAX_MODEL_DIM: every FLOPs count of \
                         a simulated step then fits u128)",
                        grouped(MAX_MODEL_DIM.into())
                    ),
                );
            }
        }
        // Both factors are at most 2^24 here: the product fits.
        let q = m.heads * m.head_dim;
        if q > MAX_MODEL_DIM {
            let (key, v) = if m.heads >= m.head_dim {
                ("model.heads", m.heads)
            } else {
                ("model.head_dim", m.head_dim)
            };
            return bad(
                key,
                v.to_string(),
                format!(
                    "the query width heads · head_dim = {} · {} must be at most {} \
                     (golden::recipe::MAX_MODEL_DIM)",
                    m.heads,
                    m.head_dim,
                    grouped(MAX_MODEL_DIM.into())
                ),
            );
        }
        if let Err(e) = self.model_dims().validate() {
            return bad("model", self.model.name.clone(), e.to_string());
        }
        let b = &self.batch;
        let p = &self.parallel;
        let pad = &self.padding;
        for (key, v) in [
            ("batch.micro_batch_size", b.micro_batch_size),
            ("batch.seq_length", u64::from(b.seq_length)),
            ("batch.grad_acc", b.grad_acc),
            ("parallel.num_gpus", p.num_gpus),
            ("parallel.cp", p.cp),
            ("parallel.tp", p.tp),
            ("parallel.pp", p.pp),
            ("loss_sample.vocab", self.loss_sample.vocab as u64),
        ] {
            if v == 0 {
                return bad(key, "0".into(), "must be at least 1".into());
            }
        }
        let model_parallel = u128::from(p.cp) * u128::from(p.tp) * u128::from(p.pp);
        if u128::from(p.num_gpus) % model_parallel != 0 {
            return bad(
                "parallel.num_gpus",
                p.num_gpus.to_string(),
                format!("must be a multiple of cp·tp·pp = {model_parallel}"),
            );
        }
        if let Some(0) = b.approx_rows {
            return bad("batch.approx_rows", "0".into(), "must be at least 1".into());
        }
        if let Some(0) = b.approx_row_length {
            return bad("batch.approx_row_length", "0".into(), "must be at least 1".into());
        }
        match (b.objective, b.mlm_probability) {
            (RecipeObjective::Mlm, None) => {
                return bad(
                    "batch.mlm_probability",
                    "(missing)".into(),
                    "objective = \"mlm\" needs it".into(),
                );
            }
            (RecipeObjective::Mlm, Some(x)) if !(0.0..=1.0).contains(&x) => {
                return bad("batch.mlm_probability", x.to_string(), "must be in [0, 1]".into());
            }
            (RecipeObjective::Mlm, _) | (_, None) => {}
            (_, Some(x)) => {
                return bad(
                    "batch.mlm_probability",
                    x.to_string(),
                    "only for objective = \"mlm\"".into(),
                );
            }
        }
        if matches!(b.objective, RecipeObjective::Sft | RecipeObjective::Dpo) {
            match self.data.prompt_percent {
                None => {
                    return bad(
                        "data.prompt_percent",
                        "(missing)".into(),
                        "objective \"sft\" and \"dpo\" need [lo, hi] percent".into(),
                    );
                }
                Some([lo, hi]) if lo > hi || hi > 100 => {
                    return bad(
                        "data.prompt_percent",
                        format!("[{lo}, {hi}]"),
                        "needs lo ≤ hi ≤ 100".into(),
                    );
                }
                Some(_) => {}
            }
        }
        if p.cp > 1 && (b.format != Format::Thd || pad.cp_divisibility.is_none()) {
            return bad(
                "parallel.cp",
                p.cp.to_string(),
                "cp > 1 needs batch.format = \"thd\" and padding.cp_divisibility".into(),
            );
        }
        let two_cp = 2 * u128::from(p.cp);
        if let Some(d) = pad.cp_divisibility
            && (d == 0 || (p.cp > 1 && !(d as u128).is_multiple_of(two_cp)))
        {
            return bad(
                "padding.cp_divisibility",
                d.to_string(),
                format!("must be a positive multiple of 2·cp = {two_cp}"),
            );
        }
        for (key, v) in [
            ("padding.pad_to_multiple_of", pad.pad_to_multiple_of),
            ("padding.max_mock_len", pad.max_mock_len),
            ("padding.static_length", pad.static_length),
        ] {
            if v == Some(0) {
                return bad(key, "0".into(), "must be at least 1".into());
            }
        }
        if pad.max_mock_len.is_some() && pad.pad_to_multiple_of.is_none() {
            return bad(
                "padding.max_mock_len",
                format!("{}", pad.max_mock_len.unwrap_or(0)),
                "needs padding.pad_to_multiple_of".into(),
            );
        }
        match (b.format, &self.packing) {
            (Format::Bshd, Some(pk)) => {
                return bad(
                    "packing.strategy",
                    format!("\"{}\"", pk.strategy.name()),
                    "BSHD rows are not packed: remove [packing]".into(),
                );
            }
            (Format::Bshd, None) => {
                if pad.pad_to_multiple_of.is_some() || pad.cp_divisibility.is_some() {
                    return bad(
                        "batch.format",
                        "\"bshd\"".into(),
                        "BSHD rows take no mock or CP padding".into(),
                    );
                }
            }
            (Format::Thd, None) => {
                return bad("batch.format", "\"thd\"".into(), "needs a [packing] table".into());
            }
            (Format::Thd, Some(pk)) => {
                if pk.strategy != Strategy::InBatch && pk.capacity.is_none() {
                    return bad(
                        "packing.capacity",
                        "(missing)".into(),
                        format!("strategy \"{}\" needs it", pk.strategy.name()),
                    );
                }
                if pk.capacity == Some(0) {
                    return bad("packing.capacity", "0".into(), "must be at least 1".into());
                }
                if pk.examples_per_push == 0 {
                    return bad(
                        "packing.examples_per_push",
                        "0".into(),
                        "must be at least 1".into(),
                    );
                }
                if pk.split_samples && pk.strategy != Strategy::TokenPacking {
                    return bad(
                        "packing.split_samples",
                        "true".into(),
                        "only for strategy \"token_packing\"".into(),
                    );
                }
            }
        }
        if b.objective == RecipeObjective::Dpo {
            let pk = self.packing.map(|p| p.strategy);
            if pk != Some(Strategy::SequentialBudget) {
                return bad(
                    "packing.strategy",
                    pk.map_or("(missing)".into(), |s| format!("\"{}\"", s.name())),
                    "objective \"dpo\" packs pairs with \"sequential_budget\"".into(),
                );
            }
            if self.data.rejected_lengths.is_none() {
                return bad(
                    "data.rejected_lengths",
                    "(missing)".into(),
                    "objective \"dpo\" needs it".into(),
                );
            }
            if pad.pad_to_multiple_of.is_some() || pad.cp_divisibility.is_some() {
                return bad(
                    "batch.objective",
                    "\"dpo\"".into(),
                    "DPO rows take static padding only (padding.static_length)".into(),
                );
            }
        } else {
            if pad.static_length.is_some() {
                return bad(
                    "padding.static_length",
                    format!("{}", pad.static_length.unwrap_or(0)),
                    "only for objective \"dpo\"".into(),
                );
            }
            if self.data.rejected_lengths.is_some() {
                return bad(
                    "data.rejected_lengths",
                    "(table)".into(),
                    "only for objective \"dpo\"".into(),
                );
            }
        }
        let mut dists = vec![("data.lengths", &self.data.lengths)];
        if let Some(r) = &self.data.rejected_lengths {
            dists.push(("data.rejected_lengths", r));
        }
        let mut image_tokens = 0u64;
        if let Some(v) = &self.data.vision {
            if v.spatial_merge == 0 {
                return bad("data.vision.spatial_merge", "0".into(), "must be at least 1".into());
            }
            if b.format != Format::Thd {
                return bad("data.vision", "(table)".into(), "needs batch.format = \"thd\"".into());
            }
            dists.push(("data.vision.grid_h", &v.grid_h));
            dists.push(("data.vision.grid_w", &v.grid_w));
            let m = u64::from(v.spatial_merge);
            // Sides are at most 2^32 − 1 rounded up to a multiple of m < 2^32: they fit u64.
            let (gh, gw) = (u64::from(v.grid_h.max()), u64::from(v.grid_w.max()));
            let (h, w) = (gh.div_ceil(m) * m, gw.div_ceil(m) * m);
            if u128::from(h) * u128::from(w) > u128::from(MAX_IMAGE_PATCHES) {
                let (key, value) =
                    if u128::from(gh) * u128::from(gw) <= u128::from(MAX_IMAGE_PATCHES) {
                        ("data.vision.spatial_merge", m.to_string())
                    } else if gh >= gw {
                        ("data.vision.grid_h", format!("max {gh}"))
                    } else {
                        ("data.vision.grid_w", format!("max {gw}"))
                    };
                return bad(
                    key,
                    value,
                    format!(
                        "an image of up to {h} × {w} patches (sides rounded up to a multiple of \
                         spatial_merge = {m}) must have fewer than 2^32 patches \
                         (golden::recipe::MAX_IMAGE_PATCHES)"
                    ),
                );
            }
            image_tokens = (h / m) * (w / m);
        }
        for (key, d) in &dists {
            if let Some(why) = d.problem() {
                return bad(key, format!("{d:?}"), why);
            }
            if d.min() == 0 {
                return bad(key, format!("{d:?}"), "lengths must be at least 1".into());
            }
        }
        let longest = u64::from(self.data.lengths.max()) + image_tokens;
        if longest > u64::from(b.seq_length) {
            return bad(
                "data.lengths",
                format!("max {longest}"),
                format!("documents must fit batch.seq_length = {}", b.seq_length),
            );
        }
        if let Some(r) = &self.data.rejected_lengths
            && r.max() > b.seq_length
        {
            return bad(
                "data.rejected_lengths",
                format!("max {}", r.max()),
                format!("documents must fit batch.seq_length = {}", b.seq_length),
            );
        }
        let t = &self.timing;
        for (key, v) in [
            ("timing.step_time_s", t.step_time_s),
            ("timing.peak_tflops_per_gpu", t.peak_tflops_per_gpu),
        ] {
            if !(v.is_finite() && v > 0.0) {
                return bad(key, v.to_string(), "must be positive and finite".into());
            }
        }
        if !(t.peak_tflops_per_gpu * 1e12).is_finite() {
            return bad(
                "timing.peak_tflops_per_gpu",
                t.peak_tflops_per_gpu.to_string(),
                "must be a finite number of FLOP/s once multiplied by 10^12".into(),
            );
        }
        self.check_simulation_bounds(origin)
    }

    /// The bounds of [what the simulation holds](self#what-the-simulation-holds), from the keys
    /// alone; every other rule of [`Recipe::validate`] has passed.
    fn check_simulation_bounds(&self, origin: &str) -> Result<()> {
        let bad = |key: &str, value: String, reason: String| {
            Err(Error::Invalid { origin: origin.to_string(), key: key.into(), value, reason })
        };
        let (b, p, pad) = (&self.batch, &self.parallel, &self.padding);
        let n = |x: u128| grouped(x);

        // Micro-batches: dp · grad_acc.
        let dp = p.dp();
        let micro_batches = u128::from(dp) * u128::from(b.grad_acc);
        if micro_batches > u128::from(MAX_MICRO_BATCHES) {
            let (key, value) = if b.grad_acc >= dp {
                ("batch.grad_acc", b.grad_acc)
            } else {
                ("parallel.num_gpus", p.num_gpus)
            };
            return bad(
                key,
                value.to_string(),
                format!(
                    "dp {dp} × grad_acc {} = {} micro-batches per step; the simulation runs at \
                     most {} (golden::recipe::MAX_MICRO_BATCHES)",
                    b.grad_acc,
                    n(micro_batches),
                    n(MAX_MICRO_BATCHES.into())
                ),
            );
        }
        // From here on dp · grad_acc ≤ 2^16 and every product below is taken in u128.
        let mbs = u128::from(b.micro_batch_size);
        let strategy = self.packing.map(|pk| pk.strategy);
        let unpacked = b.format == Format::Bshd || strategy == Some(Strategy::InBatch);
        if unpacked && micro_batches * mbs > u128::from(MAX_DOCUMENTS) {
            return bad(
                "batch.micro_batch_size",
                b.micro_batch_size.to_string(),
                format!(
                    "{} micro-batches × micro_batch_size {} = {} documents per step; the \
                     simulation draws at most {} (golden::recipe::MAX_DOCUMENTS)",
                    n(micro_batches),
                    b.micro_batch_size,
                    n(micro_batches * mbs),
                    n(MAX_DOCUMENTS.into())
                ),
            );
        }
        if let Some(pk) = &self.packing
            && pk.examples_per_push > MAX_EXAMPLES_PER_PUSH
        {
            return bad(
                "packing.examples_per_push",
                pk.examples_per_push.to_string(),
                format!(
                    "must be at most {} (golden::recipe::MAX_EXAMPLES_PER_PUSH: the bin packers \
                     are quadratic in their window)",
                    n(MAX_EXAMPLES_PER_PUSH as u128)
                ),
            );
        }

        // One row: padding keys alone, then the content, then the content padded.
        let max_row = u128::from(MAX_ROW_TOKENS);
        let row_limit = format!("a row holds at most {} tokens", n(max_row));
        let dpo = b.objective == RecipeObjective::Dpo;
        for (key, v, limit) in [
            ("padding.pad_to_multiple_of", pad.pad_to_multiple_of, max_row),
            ("padding.cp_divisibility", pad.cp_divisibility, max_row),
            ("padding.static_length", pad.static_length, max_row / 2),
            (
                "packing.capacity",
                self.packing.and_then(|pk| pk.capacity.map(|c| c as usize)),
                if dpo { max_row / 2 } else { max_row },
            ),
        ] {
            if let Some(v) = v.filter(|&v| v as u128 > limit) {
                return bad(
                    key,
                    v.to_string(),
                    format!(
                        "must be at most {} ({row_limit}: golden::recipe::MAX_ROW_TOKENS)",
                        n(limit)
                    ),
                );
            }
        }
        let seq = u128::from(b.seq_length);
        let (content, key, value): (u128, &str, String) = match (b.format, &self.packing) {
            (Format::Bshd, _) => (seq, "batch.seq_length", b.seq_length.to_string()),
            (Format::Thd, Some(pk)) if pk.strategy == Strategy::InBatch => {
                // The row holds micro_batch_size documents of at most seq_length tokens; its
                // capacity (what packing statistics divide by) defaults to that product.
                match pk.capacity.map(u128::from).filter(|&c| c > mbs * seq) {
                    Some(c) => (c, "packing.capacity", c.to_string()),
                    None if seq > max_row => {
                        (mbs * seq, "batch.seq_length", b.seq_length.to_string())
                    }
                    None => (mbs * seq, "batch.micro_batch_size", b.micro_batch_size.to_string()),
                }
            }
            (Format::Thd, Some(pk)) => {
                let capacity = u128::from(pk.capacity.unwrap_or(0));
                let branch = capacity.max(pad.static_length.map_or(0, |l| l as u128));
                match pad.static_length {
                    Some(l) if dpo && l as u128 >= capacity => {
                        (2 * branch, "padding.static_length", l.to_string())
                    }
                    _ => {
                        let c = pk.capacity.unwrap_or(0).to_string();
                        (if dpo { 2 * branch } else { branch }, "packing.capacity", c)
                    }
                }
            }
            (Format::Thd, None) => (seq, "batch.seq_length", b.seq_length.to_string()),
        };
        if content > max_row {
            let what = match key {
                "batch.micro_batch_size" => format!(
                    "micro_batch_size {} × seq_length {} = {} tokens per in_batch row",
                    b.micro_batch_size,
                    b.seq_length,
                    n(content)
                ),
                _ => format!("rows of up to {} tokens", n(content)),
            };
            return bad(
                key,
                value,
                format!("{what}; {row_limit} (golden::recipe::MAX_ROW_TOKENS)"),
            );
        }
        // CP divisibility pads each segment by less than d: segments of at least the shortest
        // document (two pieces of a split one besides), or micro_batch_size of them in_batch.
        // The row's key (for the step's bound) is whichever of content and padding is larger.
        let (mut row, mut row_key, mut row_value) = (content, key, value);
        if let Some(d) = pad.cp_divisibility {
            let shortest = u128::from(self.data.lengths.min().max(1));
            let segments =
                if strategy == Some(Strategy::InBatch) { mbs } else { content / shortest + 2 };
            let added = segments * (d as u128 - 1);
            row += added;
            if added > content {
                (row_key, row_value) = ("padding.cp_divisibility", d.to_string());
            }
            if row > max_row {
                return bad(
                    "padding.cp_divisibility",
                    d.to_string(),
                    format!(
                        "rows of up to {} tokens once each of up to {} segments is padded to a \
                         multiple of {d}; {row_limit} (golden::recipe::MAX_ROW_TOKENS)",
                        n(row),
                        n(segments)
                    ),
                );
            }
        }
        if let Some(m) = pad.pad_to_multiple_of {
            if m as u128 > row {
                (row_key, row_value) = ("padding.pad_to_multiple_of", m.to_string());
            }
            row = row.div_ceil(m as u128) * m as u128;
            if row > max_row {
                return bad(
                    "padding.pad_to_multiple_of",
                    m.to_string(),
                    format!(
                        "rows of up to {} tokens once rounded up to a multiple of {m}; {row_limit} \
                         (golden::recipe::MAX_ROW_TOKENS)",
                        n(row)
                    ),
                );
            }
        }

        // The step: every row of every micro-batch is held.
        let rows_per_micro_batch = if b.format == Format::Bshd { mbs } else { 1 };
        let step = micro_batches * rows_per_micro_batch * row;
        if step > u128::from(MAX_STEP_TOKENS) {
            let mut factors = vec![
                ("batch.grad_acc", u128::from(b.grad_acc), b.grad_acc.to_string()),
                ("parallel.num_gpus", u128::from(dp), p.num_gpus.to_string()),
                (row_key, row, row_value),
            ];
            if b.format == Format::Bshd {
                factors.push(("batch.micro_batch_size", mbs, b.micro_batch_size.to_string()));
            }
            let (key, _, value) =
                factors.into_iter().max_by_key(|f| f.1).expect("three factors at least");
            return bad(
                key,
                value,
                format!(
                    "dp {dp} × grad_acc {} micro-batches × {} rows of up to {} tokens = {} \
                     stored tokens per step; the simulation holds at most {} \
                     (golden::recipe::MAX_STEP_TOKENS)",
                    b.grad_acc,
                    rows_per_micro_batch,
                    n(row),
                    n(step),
                    n(MAX_STEP_TOKENS.into())
                ),
            );
        }
        let vocab = self.loss_sample.vocab as u128;
        if row * vocab > u128::from(MAX_LOSS_SAMPLE_LOGITS) {
            return bad(
                "loss_sample.vocab",
                self.loss_sample.vocab.to_string(),
                format!(
                    "the loss sample draws row tokens × vocab logits: up to {} × {} = {}; the \
                     simulation holds at most {} (golden::recipe::MAX_LOSS_SAMPLE_LOGITS): lower \
                     loss_sample.vocab",
                    n(row),
                    self.loss_sample.vocab,
                    n(row * vocab),
                    n(MAX_LOSS_SAMPLE_LOGITS.into())
                ),
            );
        }

        // The BSHD approximation: arithmetic only, but its FLOPs must fit u128.
        let approx_rows = u128::from(b.approx_rows.unwrap_or(b.micro_batch_size));
        let approx_len = u128::from(b.approx_row_length.unwrap_or(b.seq_length));
        let approx = approx_rows * micro_batches * approx_len;
        if approx > u128::from(MAX_APPROX_TOKENS) {
            let (key, value) = match (b.approx_rows, b.approx_row_length) {
                (Some(r), _) if u128::from(r) >= approx_len => ("batch.approx_rows", r.to_string()),
                (_, Some(l)) => ("batch.approx_row_length", l.to_string()),
                (Some(r), None) if u128::from(r) >= seq => ("batch.approx_rows", r.to_string()),
                _ if mbs > seq => ("batch.micro_batch_size", b.micro_batch_size.to_string()),
                _ => ("batch.seq_length", b.seq_length.to_string()),
            };
            return bad(
                key,
                value,
                format!(
                    "the BSHD approximation charges {} rows × {} micro-batches × {} tokens = {} \
                     tokens; at most {} (golden::recipe::MAX_APPROX_TOKENS)",
                    n(approx_rows),
                    n(micro_batches),
                    n(approx_len),
                    n(approx),
                    n(MAX_APPROX_TOKENS.into())
                ),
            );
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn encodon() -> String {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/recipes/codonfm_encodon_1b.toml");
        std::fs::read_to_string(path).unwrap()
    }

    fn error(text: &str) -> String {
        Recipe::from_toml_str(text, "r.toml").unwrap_err().to_string()
    }

    #[test]
    fn recipe_errors_name_the_key_and_value() {
        let text = encodon();
        let typo = error(&text.replace("grad_acc = 1", "grad_accum = 1"));
        assert!(typo.contains("unknown field `grad_accum`"), "{typo}");
        let ty = error(&text.replace("micro_batch_size = 4", "micro_batch_size = \"4\""));
        assert!(ty.contains("micro_batch_size = \"4\"") && ty.contains("expected u64"), "{ty}");
        let variant = error(&text.replace("causal = \"none\"", "causal = \"full\""));
        assert!(variant.contains("causal") && variant.contains("full"), "{variant}");
        let missing = error(&text.replace("seq_length = 512\n", ""));
        assert!(missing.contains("seq_length"), "{missing}");
        assert_eq!(
            error(&text.replace("mlm_probability = 0.15", "mlm_probability = 1.5")),
            "recipe r.toml: batch.mlm_probability = 1.5: must be in [0, 1]"
        );
        assert_eq!(
            error(&text.replace("len = 130", "len = 600")),
            "recipe r.toml: data.lengths = max 600: documents must fit batch.seq_length = 512"
        );
        assert_eq!(
            error(&text.replace("max_mock_len = 512", "max_mock_len = 0")),
            "recipe r.toml: padding.max_mock_len = 0: must be at least 1"
        );
    }

    /// The key an invalid recipe names, and the message.
    fn invalid(text: &str) -> (String, String) {
        match Recipe::from_toml_str(text, "r.toml") {
            Err(e @ Error::Invalid { .. }) => {
                let Error::Invalid { key, .. } = &e else { unreachable!() };
                (key.clone(), e.to_string())
            }
            other => panic!("expected Error::Invalid, got {other:?}"),
        }
    }

    fn valid(text: &str) {
        if let Err(e) = Recipe::from_toml_str(text, "r.toml") {
            panic!("{e}");
        }
    }

    fn qwen() -> String {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/recipes/qwen3_8b_sft_seq4096.toml");
        std::fs::read_to_string(path).unwrap()
    }

    #[test]
    fn recipes_at_the_simulation_bounds_pass_and_past_them_name_the_key() {
        let (enc, q) = (encodon(), qwen());
        let push =
            |n: usize| q.replace("examples_per_push = 512", &format!("examples_per_push = {n}"));
        valid(&push(MAX_EXAMPLES_PER_PUSH));
        assert_eq!(invalid(&push(MAX_EXAMPLES_PER_PUSH + 1)).0, "packing.examples_per_push");
        // 8 GPUs × 8,192 micro-batches each is the bound; the rows (2,048 tokens) are not.
        let (key, msg) = invalid(&enc.replace("grad_acc = 1", "grad_acc = 8193"));
        assert_eq!(key, "batch.grad_acc", "{msg}");
        // One row of 2^20 tokens (its loss sample 2^26 logits), then 16 of them (2^24 tokens).
        let rows = |pad: u64, gpus: u64, acc: u64| {
            enc.replace("pad_to_multiple_of = 2048", &format!("pad_to_multiple_of = {pad}"))
                .replace("num_gpus = 8", &format!("num_gpus = {gpus}"))
                .replace("grad_acc = 1", &format!("grad_acc = {acc}"))
        };
        valid(&rows(1 << 20, 8, 2));
        let (key, msg) = invalid(&rows(1 << 20, 8, 3));
        assert_eq!(key, "padding.pad_to_multiple_of", "{msg}");
        assert!(msg.contains("25,165,824 stored tokens per step"), "{msg}");
        let (key, msg) = invalid(&(rows(1 << 20, 1, 1) + "\n[loss_sample]\nvocab = 65\n"));
        assert_eq!(key, "loss_sample.vocab", "{msg}");
        assert_eq!(invalid(&rows(MAX_ROW_TOKENS + 1, 1, 1)).0, "padding.pad_to_multiple_of");
        // Model dimensions, and the query width heads · head_dim.
        let (key, msg) = invalid(&q.replace("heads = 32", "heads = 16777217"));
        assert_eq!(key, "model.heads", "{msg}");
        let (key, msg) = invalid(
            &q.replace("heads = 32", "heads = 8192").replace("head_dim = 128", "head_dim = 4096"),
        );
        assert_eq!(key, "model.heads", "{msg}");
        assert!(msg.contains("heads · head_dim = 8192 · 4096"), "{msg}");
        // The BSHD approximation: 2^40 rows of 4,096 tokens in each of 32 micro-batches.
        let approx = q.replace("grad_acc = 4", "grad_acc = 4\napprox_rows = 1099511627776");
        assert_eq!(invalid(&approx).0, "batch.approx_rows");
        // Products that used to wrap (a panic in debug builds).
        let tp = q.replace("num_gpus = 8", "num_gpus = 8\ntp = 1099511627776\npp = 1099511627776");
        let (key, msg) = invalid(&tp);
        assert_eq!(key, "parallel.num_gpus", "{msg}");
        let peak = q.replace("peak_tflops_per_gpu = 989.0", "peak_tflops_per_gpu = 1e300");
        assert_eq!(invalid(&peak).0, "timing.peak_tflops_per_gpu");
    }

    #[test]
    fn the_in_batch_capacity_is_never_truncated() {
        // micro_batch_size · seq_length = 4 · 1,073,742,424 = 2^32 + 2,400: `as u32` gave 2,400.
        let text = encodon().replace("seq_length = 512", "seq_length = 1073742424");
        let (key, msg) = invalid(&text);
        assert_eq!(key, "batch.seq_length", "{msg}");
        let mut r = Recipe::from_toml_str(&encodon(), "r.toml").unwrap();
        r.batch.seq_length = 1_073_742_424;
        assert_eq!(r.capacity(), u32::MAX);
    }

    #[test]
    fn recipe_rejects_inconsistent_tables() {
        let text = encodon();
        let bshd = error(&text.replace("format = \"thd\"", "format = \"bshd\""));
        assert_eq!(
            bshd,
            "recipe r.toml: packing.strategy = \"in_batch\": BSHD rows are not packed: remove [packing]"
        );
        let dpo = error(&text.replace("objective = \"mlm\"", "objective = \"dpo\""));
        assert!(
            dpo.contains("batch.mlm_probability = 0.15: only for objective = \"mlm\""),
            "{dpo}"
        );
        let gpus = error(&text.replace("num_gpus = 8", "num_gpus = 6\ncp = 4"));
        assert_eq!(
            gpus,
            "recipe r.toml: parallel.num_gpus = 6: must be a multiple of cp·tp·pp = 4"
        );
    }
}
