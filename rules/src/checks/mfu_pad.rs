//! MFU-PAD: useful FLOPs and MFU do not move when padding is added.

use crate::checks::proof::Proof;
use crate::checks::rule::{Rule, rule};
use crate::{Checked, Location};

rule! {
    /// Hardware FLOPs bound useful FLOPs. [`crate::checks::check_mfu_pad`].
    MFU_HARDWARE_FLOPS = "mfu-hardware-flops", MfuPad, "hardware FLOPs >= useful FLOPs",
        proof: Proof::Zoo("FullSquareCausal");
    /// Hardware MFU bounds useful MFU. [`crate::checks::check_mfu_pad`].
    MFU_HARDWARE = "mfu-hardware", MfuPad, "hardware MFU >= useful MFU",
        proof: Proof::Test("rules/src/checks/proofs.rs::mfu_hardware_mfus_swapped");
    /// Useful MFU is physical. [`crate::checks::check_mfu_pad`].
    MFU_PHYSICAL = "mfu-physical", MfuPad, "useful MFU <= 100 % for a physically possible step time",
        proof: Proof::Test("rules/src/checks/proofs.rs::mfu_physical_one_gpus_peak");
    /// Padding adds no useful FLOPs. [`crate::checks::check_mfu_pad`].
    MFU_USEFUL_FLOPS = "mfu-useful-flops", MfuPad, "useful FLOPs are bit-identical with and without padding",
        proof: Proof::Zoo("MockCountedAsUseful");
    /// Padding leaves useful MFU bit-identical. [`crate::checks::check_mfu_pad`].
    MFU_USEFUL = "mfu-useful", MfuPad, "useful MFU is bit-identical with and without padding",
        proof: Proof::Test("rules/src/checks/proofs.rs::mfu_useful_scaled_by_stored_tokens");
    /// Padding adds no real tokens. [`crate::checks::check_mfu_pad`].
    MFU_REAL_TOKENS = "mfu-real-tokens", MfuPad, "real tokens are unchanged by padding",
        proof: Proof::Test("rules/src/checks/proofs.rs::mfu_real_tokens_count_the_padding");
}

/// What a throughput logger reports for one step.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct MetricRecord {
    /// Real tokens (no padding, no mock segment).
    pub real_tokens: u64,
    /// FLOPs of the useful work.
    pub useful_flops: u128,
    /// FLOPs the hardware was made to compute.
    pub hardware_flops: u128,
    /// Useful MFU, percent.
    pub mfu_pct: f64,
    /// Hardware MFU, percent.
    pub mfu_padded_pct: f64,
}

fn check_one(label: &str, r: &MetricRecord, physical: bool) -> Checked {
    let v = |rule: Rule| rule.violation().at(Location::default().context(label));
    if r.hardware_flops < r.useful_flops {
        return Err(v(MFU_HARDWARE_FLOPS)
            .expected(format!(">= {}", r.useful_flops))
            .got(r.hardware_flops));
    }
    if r.mfu_padded_pct.partial_cmp(&r.mfu_pct).is_none_or(|o| o.is_lt()) {
        return Err(v(MFU_HARDWARE).expected(format!(">= {}", r.mfu_pct)).got(r.mfu_padded_pct));
    }
    if physical && r.mfu_pct.partial_cmp(&100.0).is_none_or(|o| o.is_gt()) {
        return Err(v(MFU_PHYSICAL)
            .expected("<= 100")
            .got(r.mfu_pct)
            .note(format!("useful {} vs hardware {} FLOPs", r.useful_flops, r.hardware_flops)));
    }
    Ok(())
}

/// MFU-PAD: over the same examples collated with and without padding, the useful numbers are
/// bit-identical, and each record is consistent.
///
/// ```text
/// every record:   hardware ≥ useful;  mfu_padded ≥ mfu;  mfu ≤ 100 if `physical`
/// every variant:  real_tokens, useful_flops (exact) and mfu_pct (bit-exact) = the baseline's
/// ```
///
/// `physical` says the step time is at least what the hardware FLOPs need at peak, so a useful
/// MFU above 100 % can only come from counting work that was not done.
///
/// # Errors
/// The first rule broken, naming the padding variant.
///
/// # Example
/// ```
/// use rules::checks::{MetricRecord, check_mfu_pad};
/// let base = MetricRecord { real_tokens: 15, useful_flops: 77, hardware_flops: 77, mfu_pct: 7.7, mfu_padded_pct: 7.7 };
/// // bionemo #1561: the mock segment's 1² counted as useful.
/// let mock = MetricRecord { useful_flops: 78, hardware_flops: 78, mfu_pct: 7.8, mfu_padded_pct: 7.8, ..base };
/// let v = check_mfu_pad(&base, &[("pad_to_multiple_of=8".into(), mock)], true).unwrap_err();
/// assert_eq!(v.at.context.as_deref(), Some("pad_to_multiple_of=8"));
/// ```
pub fn check_mfu_pad(
    baseline: &MetricRecord,
    variants: &[(String, MetricRecord)],
    physical: bool,
) -> Checked {
    check_one("no padding", baseline, physical)?;
    for (label, r) in variants {
        let v = |rule: Rule| rule.violation().at(Location::default().context(label));
        if r.useful_flops != baseline.useful_flops {
            return Err(v(MFU_USEFUL_FLOPS)
                .expected(baseline.useful_flops)
                .got(r.useful_flops)
                .note(format!(
                    "Δ = {} FLOPs counted as useful",
                    r.useful_flops as i128 - baseline.useful_flops as i128
                )));
        }
        if r.mfu_pct.to_bits() != baseline.mfu_pct.to_bits() {
            return Err(v(MFU_USEFUL).expected(baseline.mfu_pct).got(r.mfu_pct));
        }
        if r.real_tokens != baseline.real_tokens {
            return Err(v(MFU_REAL_TOKENS).expected(baseline.real_tokens).got(r.real_tokens));
        }
        check_one(label, r, physical)?;
    }
    Ok(())
}
