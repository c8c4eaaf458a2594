//! Golden metrics: the recipe configs of the seed stacks and, for each, the exact record of
//! every number a logger reports for one optimizer step, computed with `thd`.
//!
//! A [`Recipe`] (TOML) holds the model dimensions, micro-batch shape, packing and padding
//! options, parallelism, step time and peak, and a seeded document-length distribution;
//! [`metrics`] generates the step's batches from it with `thd`'s packers and collators and
//! returns a [`RecipeRecord`]: token counts, useful and hardware attention work, FLOPs under
//! each causal convention, TFLOP/s and MFU, the BSHD-approximation over-count, per-CP-rank
//! token counts, packing efficiency and a CP-local vs global loss sample. The record
//! serialises (serde) with stable, documented field names ([`record`]) and prints as a table
//! ([`RecipeRecord::to_table`]). `golden/tests/metrics.rs` pins one insta snapshot per recipe
//! in `golden/tests/recipes/`.
//!
//! | item | what |
//! |---|---|
//! | [`Recipe`], [`recipe`] | the TOML schema, [`Recipe::load`] with errors that name the key |
//! | [`metrics`] | recipe → [`RecipeRecord`] |
//! | [`record`] | the record's types: the schema Python loggers compare against |
//! | [`dist`] | the portable seeded generator and length distributions |
//!
//! # Example
//! ```
//! use golden::{Recipe, metrics};
//! let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/recipes/");
//! let r2048 = metrics(&Recipe::load(format!("{dir}qwen3_8b_sft_seq2048.toml"))?)?;
//! let r4096 = metrics(&Recipe::load(format!("{dir}qwen3_8b_sft_seq4096.toml"))?)?;
//! // Megatron-Bridge #3839: the same packs, seq_length 2048 vs 4096.
//! assert_eq!(r2048.throughput.tflops_per_gpu.useful, r4096.throughput.tflops_per_gpu.useful);
//! let approx = |r: &golden::RecipeRecord| r.throughput.tflops_per_gpu.bshd_approx;
//! assert!(approx(&r4096) > 1.9 * approx(&r2048));
//! # Ok::<(), golden::Error>(())
//! ```

mod data;
pub mod dist;
mod error;
mod loss_sample;
mod metrics;
pub mod recipe;
pub mod record;
mod table;

pub use error::{Error, Result};
pub use metrics::metrics;
pub use recipe::Recipe;
pub use record::RecipeRecord;
