//! Proptest strategies: `arb_*` functions returning `impl Strategy`, shared by every suite.
//!
//! Dependent values (padding per segment, masks per token, a budget that fits the longest pair)
//! are built with `prop_flat_map` / `prop_compose!`, never with `prop_assume!`, so no case is
//! rejected and shrinking stays inside valid inputs. Tensors (token ids, logits, q/k/v) are not
//! generated element by element: a case carries a `seed` and the values are a fixed function of
//! it ([`noise`]), so a shrunk counterexample prints as a handful of lengths and flags.
//!
//! | module | strategies |
//! |---|---|
//! | [`lens`] | sequence-length multisets: arbitrary, 0- and 1-token, all equal, one huge among tiny |
//! | [`sft`] | examples with label masks (none / some / all ignored), CP sizes, micro-batch splits |
//! | [`attn`] | attention layouts: padding, GQA, causal, cross lengths, CP |
//! | [`metrics`] | model dims, padding variants, FLOPs micro-batches |
//! | [`dpo`] | DPO pairs and budgets |
//! | [`formats`] | packs with a 4-D attention mask, EOS-delimited pretraining streams cut into rows |
//! | [`packer`] | packer specs, datasets and epoch plans |
//! | [`fuzz`] | the cases of `thdcheck fuzz`: packer requests and sessions, collator requests, logger steps, CP batches for the loss and the splitter |
//!
//! Sizes and switches are parameter structs, never positional numbers or flags:
//! [`Sizes`] for the SFT family (`arb_collate_case(Sizes::SMALL)`), [`SeqLensParams`] for
//! [`arb_seq_lens`], [`PackerStreamParams`] for [`arb_packer_stream`], and one per fuzz target
//! (`fuzz::PackerFuzzParams`, ...).

pub mod attn;
pub mod dpo;
pub mod formats;
pub mod fuzz;
pub mod lens;
pub mod metrics;
pub mod packer;
pub mod sft;

pub use attn::{AttnCase, arb_attn_case, arb_attn_case_large};
pub use dpo::{DpoCase, arb_dpo_case};
pub use formats::{EosCase, MaskCase, arb_eos_case, arb_mask_case};
pub use lens::{SeqLensParams, arb_cp, arb_cp_gt1, arb_seq_lens};
pub use metrics::{
    FlopsCase, MfuCase, WorkCase, arb_flops_case, arb_mfu_case, arb_model_dims, arb_work_case,
};
pub use packer::{
    PackerCase, PackerStream, PackerStreamParams, arb_capacity, arb_packer_case, arb_packer_spec,
    arb_packer_stream, arb_small_instance, spec_limits,
};
pub use sft::{
    CollateCase, CpLossCase, LabelMask, Padding, SftCase, ShardCase, Sizes, TokensCpCase,
    arb_collate_case, arb_cp_loss_case, arb_label_mask, arb_micro_batch_loss_case, arb_padding,
    arb_sft_case, arb_shard_case, arb_tokens_cp_case,
};

/// SplitMix64 over `seed` and `parts`: the deterministic source of every tensor value.
pub fn mix(seed: u64, parts: &[u64]) -> u64 {
    let mut z = seed ^ 0x9E37_79B9_7F4A_7C15;
    for &p in parts {
        z = z.wrapping_add(p).wrapping_add(0x9E37_79B9_7F4A_7C15);
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^= z >> 31;
    }
    z
}

/// A value in `[-1, 1)` determined by `seed` and `parts`.
///
/// # Example
/// ```
/// use properties::strategies::noise;
/// assert_eq!(noise(7, &[1, 2]), noise(7, &[1, 2]));
/// assert!((-1.0..1.0).contains(&noise(7, &[1, 2])));
/// ```
pub fn noise(seed: u64, parts: &[u64]) -> f64 {
    (mix(seed, parts) >> 11) as f64 / (1u64 << 52) as f64 - 1.0
}
