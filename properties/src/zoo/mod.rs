//! The bug zoo: buggy variants of collators, attention, losses, sharders, loggers, accounting
//! and packers, each reproducing a historical bug class. Every variant implements the same
//! subject trait as [`crate::subjects::ThdSubject`], and a test (`zoo_props`) runs the
//! invariant's property against it with a fixed-seed runner, expects a failure, and pins the
//! shrunk counterexample in an insta snapshot. A property is trusted only once it has been seen
//! to fail here.
//!
//! Each variant is declared once, in `zoo_variants!`: its module, the invariant that catches
//! it, the bug classes of `oracle-anchors.md` §4 it reproduces, the upstream bug, the strategy
//! that draws its cases, how its cases are run, and its pinned test (whose name is the
//! snapshot's). That one declaration makes the re-export and [`CATALOGUE`] here, the driver in
//! `selfcheck::zoo_variant` (the CLI's `selfcheck`), the test and snapshot in `zoo_props` and
//! the README's table (`readme_table`).
//!
//! Some bugs are also kept as plain functions on `thd`'s public types, for callers that need
//! the wrong value itself (the CLI's fixture generator, the AReaL twins in `upstream_areal`):
//! [`shift_after_split`] (labels rolled after the CP split), [`rank_local_stats`] (one rank's
//! shard logged as the batch) and [`mean_of_rank_means`] (the classic CP-loss reduction).

mod attn;
mod cp;
mod dpo;
mod formats;
#[cfg(any(test, feature = "serde"))]
pub mod json;
mod layout;
mod loss;
mod metrics;
mod packer;
#[cfg(test)]
mod upstream_areal;

pub use cp::{rank_local_stats, shift_after_split};
pub use loss::mean_of_rank_means;
pub use packer::reset_unseeded_runs;

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
    /// The strategy of `properties::strategies` its cases are drawn from, as declared.
    pub strategy: &'static str,
    /// Its pinned test in `zoo_props`, which is also its snapshot's name.
    pub test: &'static str,
}

/// Every variant, declared once, grouped by the invariant that catches it. Calls
/// `$then! { Name { module, caught_by, classes, upstream, strategy, driver | run, test } ... }`:
/// `driver: f` runs each case as `f(&zoo::Name, case)` (the subjects' runners); `run: expr` is
/// any `Fn(&Case) -> Checked` (the packers, built per capacity). Adding a variant is adding its
/// type to its module and one entry here; the catalogue, the driver, the test and the README row
/// follow (`THDCHECK_BLESS=1 cargo test -p properties readme`, `cargo insta review`).
macro_rules! zoo_variants {
    ($then:ident) => {
        $crate::zoo::zoo_entries! { $then;
        LabelLeak {
            module: layout,
            caught_by: Layout,
            classes: [],
            upstream: "label across a document boundary: the next document's first token (AReaL AR-P3)",
            strategy: arb_collate_case(Sizes::SMALL),
            driver: run_layout,
            test: layout_catches_label_leak,
        }
        PositionsNotReset {
            module: layout,
            caught_by: Layout,
            classes: [22],
            upstream: "position ids not reset per sequence",
            strategy: arb_collate_case(Sizes::SMALL),
            driver: run_layout,
            test: layout_catches_positions_not_reset,
        }
        ZeroBasedPositions {
            module: layout,
            caught_by: Layout,
            classes: [22],
            upstream: "transformers #47496 (RoBERTa 0-based positions)",
            strategy: arb_collate_case(Sizes::SMALL),
            driver: run_layout,
            test: layout_catches_zero_based_positions,
        }
        DuplicateZeroLengthSegment {
            module: layout,
            caught_by: Layout,
            classes: [15],
            upstream: "AReaL #1103 (duplicated cu_seqlens entry)",
            strategy: arb_collate_case(Sizes::SMALL),
            driver: run_layout,
            test: layout_catches_duplicate_zero_length_segment,
        }
        NoDocumentMask {
            module: attn,
            caught_by: Attn,
            classes: [13],
            upstream: "open-instruct DPO forward before #1670 (no doc_lens)",
            strategy: arb_attn_case(),
            driver: run_attention,
            test: attn_catches_no_document_mask,
        }
        RingAttentionIgnoresDocuments {
            module: attn,
            caught_by: Attn,
            classes: [6],
            upstream: "axolotl #3608 (ring attention + packing)",
            strategy: arb_attn_case(),
            driver: run_attention,
            test: attn_catches_ring_attention_ignoring_documents,
        }
        IgnoresPaddedOffsets {
            module: attn,
            caught_by: Attn,
            classes: [9],
            upstream: "cudnn-frontend #737 (ragged offsets ignored)",
            strategy: arb_attn_case(),
            driver: run_attention,
            test: attn_catches_ignored_padded_offsets,
        }
        AttendsToPadding {
            module: attn,
            caught_by: Attn,
            classes: [7, 23],
            upstream: "verl #1381, TransformerEngine #3331",
            strategy: arb_attn_case(),
            driver: run_attention,
            test: attn_catches_attending_to_padding,
        }
        NanOnKeylessRows {
            module: attn,
            caught_by: Attn,
            classes: [8],
            upstream: "TransformerEngine #2186 (NaN for some THD lengths)",
            strategy: arb_attn_case(),
            driver: run_attention,
            test: attn_catches_nan_on_keyless_rows,
        }
        NanWhenAllIgnored {
            module: loss,
            caught_by: Loss,
            classes: [3],
            upstream: "Megatron-LM #7498 empty mask; open-instruct OI-B4",
            strategy: arb_sft_case(Sizes::SMALL),
            driver: run_loss,
            test: loss_catches_nan_when_all_ignored,
        }
        LabelsNotShifted {
            module: loss,
            caught_by: Loss,
            classes: [],
            upstream: "AReaL #1223 roll contract (AR-B3 / AR-P4)",
            strategy: arb_sft_case(Sizes::SMALL),
            driver: run_loss,
            test: loss_catches_labels_not_shifted,
        }
        MeanOfRankMeans {
            module: loss,
            caught_by: CpLoss,
            classes: [1, 2],
            upstream: "Megatron-LM #7452 finding 9 / PR #7513 (mean of per-rank means)",
            strategy: arb_cp_loss_case(Sizes::SMALL),
            driver: run_cp_loss,
            test: cp_loss_catches_mean_of_rank_means,
        }
        MeanOfMicroBatchMeans {
            module: loss,
            caught_by: CpLoss,
            classes: [16, 24],
            upstream: "transformers PR #34191, torchtune #1875 (gradient accumulation); AReaL #1730",
            strategy: arb_micro_batch_loss_case(Sizes::SMALL),
            driver: run_cp_loss,
            test: cp_loss_catches_mean_of_micro_batch_means,
        }
        OneShardDenominator {
            module: loss,
            caught_by: CpLoss,
            classes: [4],
            upstream: "verl #5983 (token count reduced over DP only)",
            strategy: arb_cp_loss_case(Sizes::SMALL),
            driver: run_cp_loss,
            test: cp_loss_catches_one_shard_denominator,
        }
        NanOnEmptyRank {
            module: loss,
            caught_by: CpLoss,
            classes: [3],
            upstream: "Megatron-LM #7498; NeMo Speech #14488",
            strategy: arb_cp_loss_case(Sizes::SMALL),
            driver: run_cp_loss,
            test: cp_loss_catches_nan_on_empty_rank,
        }
        SplitThenRoll {
            module: cp,
            caught_by: CpShard,
            classes: [],
            upstream: "AReaL #1223 (roll before split)",
            strategy: arb_shard_case(Sizes::SMALL),
            driver: run_cp_shard,
            test: cp_shard_catches_split_then_roll,
        }
        TruncatingSplit {
            module: cp,
            caught_by: CpShard,
            classes: [],
            upstream: "AReaL split_packed_seqs_for_context_parallel (no divisibility check)",
            strategy: arb_shard_case(Sizes::SMALL),
            driver: run_cp_shard,
            test: cp_shard_catches_truncating_split,
        }
        LocalPositionIds {
            module: cp,
            caught_by: CpShard,
            classes: [12],
            upstream: "Megatron-LM #5243 (RoPE positions under CP)",
            strategy: arb_shard_case(Sizes::SMALL),
            driver: run_cp_shard,
            test: cp_shard_catches_local_position_ids,
        }
        RollWithUnpaddedOffsets {
            module: cp,
            caught_by: CpShard,
            classes: [13],
            upstream: "Megatron-LM #4495 (MTP roll with unpadded cu_seqlens)",
            strategy: arb_shard_case(Sizes::SMALL),
            driver: run_cp_shard,
            test: cp_shard_catches_roll_with_unpadded_offsets,
        }
        OverlappingContiguousSplit {
            module: cp,
            caught_by: CpShard,
            classes: [],
            upstream: "planted, no upstream issue: a contiguous CP split (the layout of Ulysses, slime --allgather-cp, Nanotron) with an inclusive end index puts a token on two ranks",
            strategy: arb_shard_case(Sizes::SMALL),
            driver: run_cp_shard_contiguous,
            test: cp_shard_catches_overlapping_contiguous_split,
        }
        RankZeroStats {
            module: cp,
            caught_by: TokensCp,
            classes: [4],
            upstream: "AReaL #1242; verl #5983",
            strategy: arb_tokens_cp_case(Sizes::SMALL),
            driver: run_tokens_cp,
            test: tokens_cp_catches_rank_zero_stats,
        }
        LossTimesCp {
            module: cp,
            caught_by: TokensCp,
            classes: [5],
            upstream: "transformers #48167 (eval_loss × cp)",
            strategy: arb_tokens_cp_case(Sizes::SMALL),
            driver: run_tokens_cp,
            test: tokens_cp_catches_loss_times_cp,
        }
        PaddedTokensCounted {
            module: cp,
            caught_by: TokensCp,
            classes: [10],
            upstream: "Megatron-LM PR #5541 (padded boundaries as real)",
            strategy: arb_tokens_cp_case(Sizes::SMALL),
            driver: run_tokens_cp,
            test: tokens_cp_catches_padded_tokens_counted,
        }
        PackLengthSquared {
            module: metrics,
            caught_by: Work,
            classes: [17, 19],
            upstream: "pack length² instead of Σsᵢ² (PaLM/nanoGPT, OLMo-core)",
            strategy: arb_work_case(),
            driver: run_work,
            test: work_catches_pack_length_squared,
        }
        MockCountedAsUseful {
            module: metrics,
            caught_by: MfuPad,
            classes: [18],
            upstream: "bionemo-recipes #1561 (mock segment in useful Σs²)",
            strategy: arb_mfu_case(),
            driver: run_mfu_pad,
            test: mfu_pad_catches_mock_counted_as_useful,
        }
        PaddedLengthsAsReal {
            module: metrics,
            caught_by: MfuPad,
            classes: [10],
            upstream: "Megatron-LM PR #5541",
            strategy: arb_mfu_case(),
            driver: run_mfu_pad,
            test: mfu_pad_catches_padded_lengths_as_real,
        }
        AbsorbedTrailingPad {
            module: metrics,
            caught_by: MfuPad,
            classes: [10],
            upstream: "trailing pad absorbed into the last document (bert24, OLMo-core doc_lens)",
            strategy: arb_mfu_case(),
            driver: run_mfu_pad,
            test: mfu_pad_catches_absorbed_trailing_pad,
        }
        FullSquareCausal {
            module: metrics,
            caught_by: MfuPad,
            classes: [19],
            upstream: "torchtitan #341, Megatron-LM #831 (MFU > 100 %)",
            strategy: arb_mfu_case(),
            driver: run_mfu_pad,
            test: mfu_pad_catches_full_square_causal,
        }
        ConfigSeqLength {
            module: metrics,
            caught_by: Flops,
            classes: [17],
            upstream: "Megatron-Bridge #1636 (FLOPs from dataset seq_length)",
            strategy: arb_flops_case(),
            driver: run_flops,
            test: flops_catches_config_seq_length,
        }
        FirstSampleOffsets {
            module: metrics,
            caught_by: Flops,
            classes: [11],
            upstream: "Megatron-LM PR #5454 (cu_seqlens[0] with mbs > 1)",
            strategy: arb_flops_case(),
            driver: run_flops,
            test: flops_catches_first_sample_offsets,
        }
        UnpaddedChosenOffset {
            module: dpo,
            caught_by: Dpo,
            classes: [],
            upstream: "open-instruct OI-B1 (fixed in 005366f75)",
            strategy: arb_dpo_case(),
            driver: run_dpo,
            test: dpo_catches_unpadded_chosen_offset,
        }
        PlainOpenInstructOffsets {
            module: dpo,
            caught_by: Dpo,
            classes: [14],
            upstream: "open-instruct PR #1900 (450-token padding segment)",
            strategy: arb_dpo_case(),
            driver: run_dpo,
            test: dpo_catches_plain_open_instruct_offsets,
        }
        // Caught by the shared LAYOUT `seq-idx` rule, which check_dpo applies to the concatenation.
        SeqIdxFromLastToken {
            module: dpo,
            caught_by: Layout,
            classes: [],
            upstream: "open-instruct OI-B2 (fixed in 005366f75)",
            strategy: arb_dpo_case(),
            driver: run_dpo,
            test: dpo_catches_seq_idx_from_last_token,
        }
        MaskNotReset {
            module: formats,
            caught_by: Layout,
            classes: [],
            upstream: "a 4-D block mask not reset at the last document boundary (Megatron-LM reset_attention_mask class)",
            strategy: arb_mask_case(Sizes::SMALL),
            driver: run_block_mask,
            test: layout_catches_mask_not_reset,
        }
        EosTruncatedAway {
            module: formats,
            caught_by: Layout,
            classes: [],
            upstream: "EOS appended before truncation to max_length: a document at the maximum loses its EOS",
            strategy: arb_eos_case(Sizes::SMALL),
            driver: run_eos_pack,
            test: layout_catches_eos_truncated_away,
        }
        LogprobsOneShort {
            module: formats,
            caught_by: Layout,
            classes: [],
            upstream: "per-token log-probs gathered over logits[:-1], not padded back to T (RL side tensors)",
            strategy: arb_collate_case(Sizes::SMALL),
            driver: run_side_tensors,
            test: layout_catches_logprobs_one_short,
        }
        DropsOverflow {
            module: packer,
            caught_by: Packer,
            classes: [21],
            upstream: "trl #482, unsloth #524; open-instruct OI-B7",
            strategy: arb_packer_stream(PackerStreamParams::FITTING),
            run: packer_stream(|capacity| Box::new(zoo::DropsOverflow { capacity }), PackerClaims::default()),
            test: packer_catches_drops_overflow,
        }
        DropsCarryAtEpochEnd {
            module: packer,
            caught_by: Packer,
            classes: [21],
            upstream: "open-instruct #1472 class: the overflow carry reset with the epoch's state",
            strategy: arb_packer_stream(PackerStreamParams::FITTING),
            run: packer_stream(|c| Box::new(zoo::DropsCarryAtEpochEnd::new(c)), PackerClaims::default()),
            test: packer_catches_drops_carry_at_epoch_end,
        }
        KeepsOverLongExample {
            module: packer,
            caught_by: Packer,
            classes: [],
            upstream: "open-instruct count_features_within_token_budget keeps ≥ 1",
            strategy: arb_packer_stream(PackerStreamParams::OVER_LONG),
            run: packer_stream(|c| Box::new(zoo::KeepsOverLongExample::new(c)), PackerClaims::default()),
            test: packer_catches_keeps_over_long_example,
        }
        // It presents itself as best fit over the epoch, so it is held to best fit's claims.
        StarvedBestFit {
            module: packer,
            caught_by: Packer,
            classes: [20],
            upstream: "sandyresearch/parcae #8 (best fit starved of documents)",
            strategy: arb_packer_stream(PackerStreamParams::SINGLES),
            run: packer_stream(|c| Box::new(zoo::StarvedBestFit::new(c)), PackerClaims::of_spec(&PackerSpec::BestFit { capacity: 1, options: BinPackingOptions::default() })),
            test: packer_catches_starved_best_fit,
        }
        // Its answers depend on a process-wide run counter, reset before the cases.
        UnseededShuffle {
            module: packer,
            caught_by: Packer,
            classes: [],
            upstream: "an unseeded shuffle: packs differ run to run",
            strategy: arb_packer_stream(PackerStreamParams::FITTING),
            run: { zoo::reset_unseeded_runs(); packer_stream(|c| Box::new(zoo::UnseededShuffle::new(c)), PackerClaims::default()) },
            test: packer_catches_unseeded_shuffle,
        }
        }
    };
}
pub(crate) use zoo_variants;

/// The declarations' grammar, read once: every entry of [`zoo_variants!`] becomes the tuple
/// `(Name, module, Invariant, [classes], "upstream", strategy, driver | run, how, test)` that
/// `$then` (the catalogue here, the drivers in `selfcheck`, the tests in `zoo_props`) expands.
macro_rules! zoo_entries {
    ($then:ident; $($name:ident {
        module: $module:ident,
        caught_by: $inv:ident,
        classes: [$($class:literal),*],
        upstream: $upstream:literal,
        strategy: $strategy:expr,
        $how:ident: $run:expr,
        test: $test:ident $(,)?
    })*) => {
        $then! { $(($name, $module, $inv, [$($class),*], $upstream, $strategy, $how, $run, $test))* }
    };
}
pub(crate) use zoo_entries;

macro_rules! catalogue {
    ($(($name:ident, $module:ident, $inv:ident, [$($class:literal),*], $upstream:literal,
        $strategy:expr, $how:ident, $run:expr, $test:ident))*) => {
        $(pub use $module::$name;)*

        /// Every variant (`zoo_variants!`), grouped by the invariant that catches it.
        pub const CATALOGUE: &[ZooEntry] = &[$(ZooEntry {
            name: stringify!($name),
            caught_by: Invariant::$inv,
            classes: &[$($class),*],
            upstream: $upstream,
            strategy: stringify!($strategy),
            test: stringify!($test),
        }),*];
    };
}
zoo_variants!(catalogue);
