//! The bug zoo: buggy variants of collators, attention, losses, sharders, loggers, accounting
//! and packers, each reproducing a historical bug class. Every variant implements the same
//! subject trait as [`crate::subjects::ThdSubject`], and a test (`zoo_props`) runs the
//! invariant's property against it with a fixed-seed runner, expects a failure, and pins the
//! shrunk counterexample in an insta snapshot. A property is trusted only once it has been seen
//! to fail here.
//!
//! [`CATALOGUE`] lists every variant with the invariant that catches it and the bug classes of
//! `oracle-anchors.md` §4 it reproduces.
//!
//! Some bugs are also kept as plain functions on `thd`'s public types, for callers that need
//! the wrong value itself (the CLI's fixture generator, the AReaL twins in `upstream_areal`):
//! [`shift_after_split`] (labels rolled after the CP split), [`rank_local_stats`] (one rank's
//! shard logged as the batch) and [`mean_of_rank_means`] (the classic CP-loss reduction).

mod attn;
mod cp;
mod dpo;
mod formats;
mod layout;
mod loss;
mod metrics;
mod packer;
#[cfg(test)]
mod upstream_areal;

pub use attn::{
    AttendsToPadding, IgnoresPaddedOffsets, NanOnKeylessRows, NoDocumentMask,
    RingAttentionIgnoresDocuments,
};
pub use cp::{
    LocalPositionIds, LossTimesCp, OverlappingContiguousSplit, PaddedTokensCounted, RankZeroStats,
    RollWithUnpaddedOffsets, SplitThenRoll, TruncatingSplit, rank_local_stats, shift_after_split,
};
pub use dpo::{PlainOpenInstructOffsets, SeqIdxFromLastToken, UnpaddedChosenOffset};
pub use formats::{EosTruncatedAway, LogprobsOneShort, MaskNotReset};
pub use layout::{DuplicateZeroLengthSegment, LabelLeak, PositionsNotReset, ZeroBasedPositions};
pub use loss::{
    LabelsNotShifted, MeanOfRankMeans, NanOnEmptyRank, NanWhenAllIgnored, OneShardDenominator,
    mean_of_rank_means,
};
pub use metrics::{
    AbsorbedTrailingPad, ConfigSeqLength, FirstSampleOffsets, FullSquareCausal,
    MockCountedAsUseful, PackLengthSquared, PaddedLengthsAsReal,
};
pub use packer::{
    DropsCarryAtEpochEnd, DropsOverflow, KeepsOverLongExample, StarvedBestFit, UnseededShuffle,
    reset_unseeded_runs,
};

use crate::Invariant;

/// One zoo variant: its name, the invariant whose property catches it, and the bug classes of
/// `oracle-anchors.md` §4 (numbers 1–24) it reproduces.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ZooEntry {
    /// The type's name in this module.
    pub name: &'static str,
    /// The invariant that catches it.
    pub caught_by: Invariant,
    /// §4 class numbers (empty: a class from the seeds or the issue list, not in §4's table).
    pub classes: &'static [u8],
    /// The upstream bug, in a few words.
    pub upstream: &'static str,
}

macro_rules! entry {
    ($name:literal, $inv:ident, [$($c:literal),*], $up:literal) => {
        ZooEntry { name: $name, caught_by: Invariant::$inv, classes: &[$($c),*], upstream: $up }
    };
}

/// Every variant, grouped by the invariant that catches it.
pub const CATALOGUE: &[ZooEntry] = &[
    entry!(
        "LabelLeak",
        Layout,
        [],
        "label across a document boundary: the next document's first token (AReaL AR-P3)"
    ),
    entry!("PositionsNotReset", Layout, [22], "position ids not reset per sequence"),
    entry!("ZeroBasedPositions", Layout, [22], "transformers #47496 (RoBERTa 0-based positions)"),
    entry!("DuplicateZeroLengthSegment", Layout, [15], "AReaL #1103 (duplicated cu_seqlens entry)"),
    entry!("NoDocumentMask", Attn, [13], "open-instruct DPO forward before #1670 (no doc_lens)"),
    entry!("RingAttentionIgnoresDocuments", Attn, [6], "axolotl #3608 (ring attention + packing)"),
    entry!("IgnoresPaddedOffsets", Attn, [9], "cudnn-frontend #737 (ragged offsets ignored)"),
    entry!("AttendsToPadding", Attn, [7, 23], "verl #1381, TransformerEngine #3331"),
    entry!("NanOnKeylessRows", Attn, [8], "TransformerEngine #2186 (NaN for some THD lengths)"),
    entry!("NanWhenAllIgnored", Loss, [3], "Megatron-LM #7498 empty mask; open-instruct OI-B4"),
    entry!("LabelsNotShifted", Loss, [], "AReaL #1223 roll contract (AR-B3 / AR-P4)"),
    entry!(
        "MeanOfRankMeans",
        CpLoss,
        [1, 2, 16, 24],
        "Megatron-LM #7452/#7513; transformers PR #34191; AReaL #1730"
    ),
    entry!("OneShardDenominator", CpLoss, [4], "verl #5983 (token count reduced over DP only)"),
    entry!("NanOnEmptyRank", CpLoss, [3], "Megatron-LM #7498; NeMo Speech #14488"),
    entry!("SplitThenRoll", CpShard, [], "AReaL #1223 (roll before split)"),
    entry!(
        "TruncatingSplit",
        CpShard,
        [],
        "AReaL split_packed_seqs_for_context_parallel (no divisibility check)"
    ),
    entry!("LocalPositionIds", CpShard, [12], "Megatron-LM #5243 (RoPE positions under CP)"),
    entry!(
        "RollWithUnpaddedOffsets",
        CpShard,
        [13],
        "Megatron-LM #4495 (MTP roll with unpadded cu_seqlens)"
    ),
    entry!(
        "OverlappingContiguousSplit",
        CpShard,
        [],
        "planted, no upstream issue: a contiguous CP split (the layout of Ulysses, slime --allgather-cp, Nanotron) with an inclusive end index puts a token on two ranks"
    ),
    entry!("RankZeroStats", TokensCp, [4], "AReaL #1242; verl #5983"),
    entry!("LossTimesCp", TokensCp, [5], "transformers #48167 (eval_loss × cp)"),
    entry!(
        "PaddedTokensCounted",
        TokensCp,
        [10],
        "Megatron-LM PR #5541 (padded boundaries as real)"
    ),
    entry!(
        "PackLengthSquared",
        Work,
        [17, 19],
        "pack length² instead of Σsᵢ² (PaLM/nanoGPT, OLMo-core)"
    ),
    entry!(
        "MockCountedAsUseful",
        MfuPad,
        [18],
        "bionemo-recipes #1561 (mock segment in useful Σs²)"
    ),
    entry!("PaddedLengthsAsReal", MfuPad, [10], "Megatron-LM PR #5541"),
    entry!(
        "AbsorbedTrailingPad",
        MfuPad,
        [10],
        "trailing pad absorbed into the last document (bert24, OLMo-core doc_lens)"
    ),
    entry!("FullSquareCausal", MfuPad, [19], "torchtitan #341, Megatron-LM #831 (MFU > 100 %)"),
    entry!("ConfigSeqLength", Flops, [17], "Megatron-Bridge #1636 (FLOPs from dataset seq_length)"),
    entry!("FirstSampleOffsets", Flops, [11], "Megatron-LM PR #5454 (cu_seqlens[0] with mbs > 1)"),
    entry!("UnpaddedChosenOffset", Dpo, [], "open-instruct OI-B1 (fixed in 005366f75)"),
    entry!(
        "PlainOpenInstructOffsets",
        Dpo,
        [14],
        "open-instruct PR #1900 (450-token padding segment)"
    ),
    // Caught by the shared LAYOUT `seq-idx` rule, which check_dpo applies to the concatenation.
    entry!("SeqIdxFromLastToken", Layout, [], "open-instruct OI-B2 (fixed in 005366f75)"),
    entry!(
        "MaskNotReset",
        Layout,
        [],
        "a 4-D block mask not reset at the last document boundary (Megatron-LM reset_attention_mask class)"
    ),
    entry!(
        "EosTruncatedAway",
        Layout,
        [],
        "EOS appended before truncation to max_length: a document at the maximum loses its EOS"
    ),
    entry!(
        "LogprobsOneShort",
        Layout,
        [],
        "per-token log-probs gathered over logits[:-1], not padded back to T (RL side tensors)"
    ),
    entry!("DropsOverflow", Packer, [21], "trl #482, unsloth #524; open-instruct OI-B7"),
    entry!(
        "DropsCarryAtEpochEnd",
        Packer,
        [21],
        "open-instruct #1472 class: the overflow carry reset with the epoch's state"
    ),
    entry!(
        "KeepsOverLongExample",
        Packer,
        [],
        "open-instruct count_features_within_token_budget keeps ≥ 1"
    ),
    entry!(
        "StarvedBestFit",
        Packer,
        [20],
        "sandyresearch/parcae #8 (best fit starved of documents)"
    ),
    entry!("UnseededShuffle", Packer, [], "an unseeded shuffle: packs differ run to run"),
];
