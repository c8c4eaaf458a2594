//! Every rule of the gate, once, on plain data (slices, lengths, records), so that Rust property
//! tests, batches dumped by a Python collator (`thdcheck check`), subprocess adapters
//! (`thdcheck fuzz`) and selfcheck are judged by the same code. A batch rule returns an
//! [`Outcome`] (ok, violated with its [`Violation`](crate::Violation), skipped with why, plus
//! notes) under its id in [`RULES`]; the `check_*` functions return `Ok(())` or the first
//! violation, which is what the property tests use ([`first_violation`]). No rule here calls
//! the `thd` code it judges: offsets, zigzag and contiguous positions and sums are computed the
//! obvious way.
//! The table of rule ids and their functions is in `properties/README.md`.
//!
//! Where a rule lives: its family's file (`layout.rs`, `batch.rs`, `cp_shard.rs`, `packer.rs`,
//! ...) declares it as a constant with `rule!`, beside its messages and its judge; the registry,
//! `rules.rs`, lists every rule in report order ([`RULES`]) and holds the functions that run
//! them in that order ([`check_batch`], [`check_layout`], the `judge_*` of each fuzz target).
//! Beneath the families, and never importing one: `rule.rs` (what a rule is: [`Rule`],
//! [`Outcome`], [`Fuzz`], the macro), `input.rs` (what the fuzz targets' rules judge, as plain
//! data), `view.rs` (what a rule of one pack is given), `shard_layout.rs`, `ints.rs` and
//! `proof.rs`. A family reads those and, at most, another family (DPO reads LAYOUT's
//! `seq-idx`), never the registry. Every public name is re-exported below by name.
//!
//! | invariant | checks |
//! |---|---|
//! | LAYOUT | [`check_layout`], [`check_documents`] |
//! | ATTN | [`check_attention`], [`check_isolation`]; a user's attention (`fuzz attention`): [`check_attention_output`], [`check_attention_isolation`], [`check_attention_causal`], [`check_attention_padding`], [`check_attention_lse`] |
//! | LOSS | [`check_loss`] |
//! | CP-LOSS | [`check_cp_loss`] (every broken rule: [`cp_loss_violations`]), [`check_reported_loss`] |
//! | CP-SHARD | [`check_cp_shard`] / [`check_cp_shard_in`] (zigzag or contiguous: [`ShardLayout`]), [`contiguous_group`], [`check_reassembly`], [`check_split_accepted`] / [`check_split_accepted_in`] |
//! | WORK | [`check_work`] |
//! | MFU-PAD | [`check_mfu_pad`] |
//! | TOKENS-CP | [`check_tokens_cp`] |
//! | PACKER | [`check_conservation`], [`check_emitted_so_far`], [`check_refusal`], [`check_dealing`], [`check_drops`], [`check_min_packs`], [`check_pairwise_full`], [`check_quality`], [`check_deterministic`] |
//! | DPO | [`check_dpo`] |
//! | FLOPS | [`check_flops`], [`check_flops_additive`] |
//! | TOKENS-CP, FLOPS, MFU-PAD (a logged value) | [`check_logged`] |

mod attention;
mod attn;
mod batch;
mod block_mask;
mod cp_loss;
mod cp_shard;
mod dpo;
mod eos;
mod flops;
mod input;
mod ints;
mod layout;
mod logged;
mod loss;
mod mfu_pad;
mod packer;
mod proof;
#[cfg(test)]
mod proofs;
mod rule;
mod rules;
mod shard_layout;
mod tokens_cp;
mod view;
mod work;

pub use attention::{
    ATTENTION_CAUSAL, ATTENTION_ISOLATION, ATTENTION_LSE, ATTENTION_OUTPUT, ATTENTION_PADDING,
    check_attention_causal, check_attention_isolation, check_attention_lse, check_attention_output,
    check_attention_padding,
};
pub use attn::{
    ATTN_FINITE, ATTN_ISOLATION, ATTN_ORACLE, ATTN_ROWS, AttnView, check_attention, check_isolation,
};
pub use batch::{
    BatchFacts, BatchReport, LABEL_TARGETS, MOCK_MARKED, PAD_LABELS, PAD_MULTIPLE, batch_facts,
    label_targets, mock_marked, pad_labels, pad_multiple,
};
pub use block_mask::{BLOCK_MASK, BlockMaskSummary, block_mask};
pub use cp_loss::{
    CP_LOSS_FINITE, CP_LOSS_PARTS, CP_LOSS_REDUCTION, check_cp_loss, check_reported_loss,
    cp_loss_violations,
};
pub use cp_shard::{
    CP_LABELS, CP_POSITION_IDS, CP_SHARD, CP_SPLIT_ACCEPTED, check_cp_shard, check_cp_shard_in,
    check_reassembly, check_split_accepted, check_split_accepted_in, closest_contiguous,
    contiguous_group, cp_shard, reassemble_shards, roll_labels, rolled_label, zigzag_reassemble,
};
pub use dpo::{
    DPO_CONCAT, DPO_OFFSETS, DPO_SEGMENT_COUNT, DPO_SEGMENT_LENGTH, DPO_SEGMENT_ORDER,
    DPO_SEGMENT_TOKENS, DpoConcat, DpoSegment, DpoView, check_dpo, check_dpo_concatenated_present,
    dpo_concat, dpo_offsets,
};
pub use eos::{EOS_DELIMITED, eos_delimited};
pub use flops::{
    FLOPS_ADDITIVE, FLOPS_ATTENTION, FLOPS_REAL_TOKENS, FLOPS_TENSOR_TOKENS, FlopsStats,
    MicroBatchView, check_flops, check_flops_additive,
};
pub use input::{
    AttentionInput, AttentionJudge, AttentionLayout, AttentionRow, CpLossInput, CpLossJudge,
    CpSplitInput, CpSplitJudge, DeclaredDrops, EmittedPack, FlashBound, LoggedKind, LossRecord,
    PackerInput, PackerJudge, PackerPoint, PackerRun, PartLoss, Perturbed, ShardView, Split,
    TokenCounts, TokenRecord,
};
pub use ints::{IntSlice, IntsIter};
pub use layout::{
    BATCH_READABLE, CROSS_DOC_LABEL, DOCUMENTS, MASK, MAX_SEQLEN, MOCK_NONEMPTY, NUM_REAL_SEQS,
    OFFSETS, PADDED_SLOTS, POSITION_IDS, QK_OFFSETS, ROW_SLOTS, SEQ_IDX, STATIC_SHAPE,
    TOKEN_COUNTS, check_documents, check_offsets, check_packs_present, check_static_shape,
    cross_doc_label, mask, max_seqlen, mock_nonempty, num_real_seqs, offsets, padded_slots,
    position_ids, qk_offsets, row_slots, seq_idx, token_counts,
};
pub use logged::{
    Factor, LOGGED_FLOPS, LOGGED_RATE, LOGGED_TOKENS, LoggedTolerance, Number, check_logged,
    check_logged_text,
};
pub use loss::{LOSS_COUNT, LOSS_EMPTY, LOSS_FINITE, LOSS_MEAN, LOSS_NLL, check_loss};
pub use mfu_pad::{
    MFU_HARDWARE, MFU_HARDWARE_FLOPS, MFU_PHYSICAL, MFU_REAL_TOKENS, MFU_USEFUL, MFU_USEFUL_FLOPS,
    MetricRecord, check_mfu_pad,
};
pub use packer::{
    PACKER_CAPACITY, PACKER_CONSERVATION, PACKER_DEALING, PACKER_DETERMINISTIC, PACKER_DROPS,
    PACKER_FIRST_FIT, PACKER_MIN_PACKS, PACKER_QUALITY, QualityBound, check_conservation,
    check_dealing, check_deterministic, check_drops, check_emitted_so_far, check_min_packs,
    check_pairwise_full, check_quality, check_refusal,
};
pub use proof::Proof;
pub use rule::{BatchInput, BatchRun, Fuzz, FuzzTarget, Outcome, Rule, Status, first_violation};
pub use rules::{
    RULES, check_batch, check_layout, judge_attention, judge_collator, judge_cp_loss,
    judge_cp_split, judge_packer, layout_rules, rules_of,
};
pub use shard_layout::{
    ShardLayout, contiguous_positions, contiguous_slot_positions, zigzag_positions,
};
pub use tokens_cp::{TOKENS_CP, check_tokens_cp};
pub use view::{
    BatchOptions, BlockMask, CollatorJudge, CollatorPack, KeyNames, LayoutView, SideTensor,
    mock_segments,
};
pub use work::{HardwareKind, WORK_BOUND, WORK_EXACT, WORK_USEFUL, WorkSums, WorkView, check_work};
