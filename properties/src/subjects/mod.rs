//! Subjects: the code under test, one trait per pipeline stage, and the `run_*` functions that
//! drive a subject on a generated case and check every rule of its invariant.
//!
//! [`ThdSubject`] implements every trait with `thd`'s pipelines. The bug zoo implements the
//! same traits with historical bugs; a subprocess adapter can implement them too. A `run_*`
//! function returns `Ok(())` or the first [`Violation`], so the same code
//! serves a proptest suite, a zoo test and a fuzzing CLI.
//!
//! | invariant | trait | runner |
//! |---|---|---|
//! | LAYOUT | [`Collator`] | [`run_layout`] |
//! | LAYOUT (`block-mask`) | [`MaskBuilder`] | [`run_block_mask`] |
//! | LAYOUT (`eos-delimited`) | [`EosPacker`] | [`run_eos_pack`] |
//! | LAYOUT (`token-counts` of side tensors) | [`SideTensors`] | [`run_side_tensors`] |
//! | ATTN | [`Attention`] | [`run_attention`], [`run_isolation`] |
//! | LOSS | [`PackedLoss`] | [`run_loss`] |
//! | CP-LOSS | [`CpLossPipeline`] | [`run_cp_loss`] |
//! | CP-SHARD | [`Sharder`] | [`run_cp_shard`] (zigzag), [`run_cp_shard_contiguous`] |
//! | TOKENS-CP | [`Logger`] | [`run_tokens_cp`] |
//! | WORK | [`WorkCounter`] | [`run_work`] |
//! | MFU-PAD | [`ThroughputLogger`] | [`run_mfu_pad`] |
//! | FLOPS | [`FlopsCounter`] | [`run_flops`] |
//! | DPO | [`DpoCollator`] | [`run_dpo`] |
//! | PACKER | any [`thd::pack::Packer`] | [`run_packer_case`] |

mod attn;
mod cp;
mod cp_contiguous;
mod dpo;
mod formats;
mod layout;
mod loss;
mod metrics;
mod packer;

pub use attn::{Attention, oracle_attention, run_attention, run_isolation};
pub use cp::{Logger, Shard, Sharder, run_cp_shard, run_tokens_cp};
#[cfg(any(test, feature = "zoo"))]
pub(crate) use cp_contiguous::contiguous_shards;
pub use cp_contiguous::{ContiguousSplit, run_cp_shard_contiguous};
pub use dpo::{DpoCollator, DpoOut, run_dpo};
pub use formats::{
    EosPack, EosPacker, MaskBuilder, SideTensors, run_block_mask, run_eos_pack, run_side_tensors,
};
#[cfg(any(test, feature = "zoo"))]
pub(crate) use formats::{advantages, block_diagonal, documents, loss_mask, next_token_logprobs};
pub use layout::{Collated, Collator, collate_reference, run_layout};
pub(crate) use loss::oracle_loss as oracle_loss_of;
pub use loss::{CpLossPipeline, PackedLoss, oracle_loss, run_cp_loss, run_loss};
pub use metrics::{
    FlopsCounter, ThroughputLogger, WorkCounter, merged_cu_seqlens, metric_record, mfu_paddings,
    run_flops, run_mfu_pad, run_work,
};
pub use packer::run_packer_case;

use crate::{Invariant, Location, Violation};

/// `thd`'s pipelines: the reference implementation of every subject trait.
#[derive(Debug, Clone, Copy, Default)]
pub struct ThdSubject;

/// The violation for a subject that failed on a valid input.
pub(crate) fn failed(
    invariant: Invariant,
    subject: &str,
    err: impl std::fmt::Display,
) -> Violation {
    Violation::for_property_tests(invariant, "the pipeline accepts every valid input")
        .at(Location::default().context(subject))
        .expected("a result")
        .got(format!("an error: {err}"))
}

/// Prefix sums `[0, l₀, l₀+l₁, …]` as int64.
pub(crate) fn prefix(lens: &[u32]) -> Vec<i64> {
    let mut cu = Vec::with_capacity(lens.len() + 1);
    cu.push(0i64);
    for &l in lens {
        cu.push(cu.last().copied().unwrap_or(0) + i64::from(l));
    }
    cu
}

/// Per-segment lengths of int64 offsets.
pub(crate) fn diffs(cu: &[i64]) -> Vec<u32> {
    cu.windows(2).map(|w| (w[1] - w[0]).max(0) as u32).collect()
}

/// int64 copies of validated offsets.
pub(crate) fn wide(cu: &thd::CuSeqlens) -> Vec<i64> {
    cu.as_slice().iter().map(|&c| i64::from(c)).collect()
}
