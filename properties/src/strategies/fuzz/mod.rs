//! The fuzzer's generators: the cases `thdcheck fuzz TARGET` sends to a stack's adapter, one
//! module per target, each with a parameter struct for the command's flags that shape them.
//!
//! A case here is plain data. What it becomes on the wire (the protocol's requests), how the
//! answers are judged, how a failing case is reduced to a 1-minimal one and the adapter I/O
//! stay with the engine crate (`engine/src/fuzz/TARGET.rs`, which implements `Target` over these).
//!
//! The case streams are fixed: the same seed draws the same cases, and the command's tests and
//! the measured figures of the docs depend on them. A change that draws other values from the
//! same RNG (another range, another order of the tuple's parts, another union) changes them.
//!
//! | module | target | strategy | case |
//! |---|---|---|---|
//! | [`packer`] | `fuzz packer` | [`arb_packer_fuzz_case`] ([`PackerFuzzParams`]) | [`PackerFuzzCase`] |
//! | [`collator`] | `fuzz collator` | [`arb_collator_fuzz_case`] ([`CollatorFuzzParams`]) | [`CollatorFuzzCase`] |
//! | [`logger`] | `fuzz logger` | [`arb_logger_fuzz_case`] ([`LoggerFuzzParams`]) | [`LoggerFuzzCase`] |
//! | [`loss`] | `fuzz loss` | [`arb_loss_fuzz_case`] | [`LossFuzzCase`] |
//! | [`cp_split`] | `fuzz cp-split` | [`arb_cp_split_fuzz_case`] ([`CpSplitFuzzParams`]) | [`CpSplitFuzzCase`] |
//! | [`attention`] | `fuzz attention` | [`arb_attention_fuzz_case`] ([`AttentionFuzzParams`]) | [`AttentionFuzzCase`] |
//! | [`cp_batch`] | the packed batch of `loss` and `cp-split` | [`arb_cp_batch`], [`arb_cp_batch_aligned`] | [`CpBatch`] |
//!
//! `thdcheck fuzz` judges each strategy's simplest case ([`simplest()`]) before its drawn ones,
//! as Hypothesis tries the smallest example early.

pub mod attention;
pub mod collator;
pub mod cp_batch;
pub mod cp_split;
pub mod logger;
pub mod loss;
pub mod packer;
mod simplest;

pub use attention::{
    AttentionFuzzCase, AttentionFuzzParams, AttnDoc, AttnDtype, QkvIndex, QkvTensor,
    arb_attention_fuzz_case,
};
pub use collator::{
    CollatorFuzzCase, CollatorFuzzParams, CollatorInput, StaticLength, arb_collator_fuzz_case,
    arb_token_ids,
};
pub use cp_batch::{CP_DOC_MAX, CpBatch, CpSegment, arb_cp_batch, arb_cp_batch_aligned};
pub use cp_split::{CpSplitFuzzCase, CpSplitFuzzParams, arb_cp_split_fuzz_case};
pub use logger::{
    LoggerFuzzCase, LoggerFuzzParams, LoggerLayout, LoggerLayoutKind, arb_logger_fuzz_case,
    logger_models,
};
pub use loss::{CP_SIZES, CpSizes, CpSizesTree, LossFuzzCase, arb_loss_fuzz_case};
pub use packer::{
    Generation, PackerFuzzCase, PackerFuzzParams, Preconditions, arb_packer_fuzz_case,
};
pub use simplest::simplest;
