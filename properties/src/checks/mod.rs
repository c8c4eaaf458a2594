//! One check per invariant, on plain data (slices, lengths, records), so that Rust property
//! tests, batches dumped by a Python collator and subprocess adapters are judged by the same
//! code. Each returns `Ok(())` or the first [`Violation`](crate::Violation).
//!
//! | invariant | checks |
//! |---|---|
//! | LAYOUT | [`check_layout`], [`check_documents`] |
//! | ATTN | [`check_attention`], [`check_isolation`] |
//! | LOSS | [`check_loss`] |
//! | CP-LOSS | [`check_cp_loss`] |
//! | CP-SHARD | [`check_cp_shard`], [`check_reassembly`], [`check_split_accepted`] |
//! | WORK | [`check_work`] |
//! | MFU-PAD | [`check_mfu_pad`] |
//! | TOKENS-CP | [`check_tokens_cp`] |
//! | PACKER | [`check_conservation`], [`check_emitted_so_far`], [`check_pairwise_full`], [`check_quality`], [`check_deterministic`] |
//! | DPO | [`check_dpo`] |
//! | FLOPS | [`check_flops`], [`check_flops_additive`] |

mod attn;
mod cp_loss;
mod cp_shard;
mod dpo;
mod flops;
mod layout;
mod loss;
mod mfu_pad;
mod packer;
mod tokens_cp;
mod work;

pub use attn::{AttnView, check_attention, check_isolation};
pub use cp_loss::{PartLoss, Split, check_cp_loss};
pub use cp_shard::{
    ShardView, check_cp_shard, check_reassembly, check_split_accepted, zigzag_positions,
};
pub use dpo::{DpoSegment, DpoView, check_dpo};
pub use flops::{FlopsStats, MicroBatchView, check_flops, check_flops_additive};
pub use layout::{LayoutView, check_documents, check_layout};
pub use loss::{LossRecord, check_loss};
pub use mfu_pad::{MetricRecord, check_mfu_pad};
pub use packer::{
    EmittedPack, PackerRun, QualityBound, check_conservation, check_deterministic,
    check_emitted_so_far, check_pairwise_full, check_quality,
};
pub use tokens_cp::{TokenCounts, TokenRecord, check_tokens_cp};
pub use work::{HardwareKind, WorkSums, WorkView, check_work};
