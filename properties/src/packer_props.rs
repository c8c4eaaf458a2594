//! PACKER properties: every built-in strategy through the generic harness.

use proptest::prelude::*;
use thd::pack::{BinPackingOptions, Example, FirstFitDecreasing, pack_all};

use crate::checks::{QualityBound, check_quality};
use crate::harness::{PackerClaims, optimal_bins};
use crate::strategies::{arb_packer_case, arb_small_instance};
use crate::subjects::run_packer_case;

proptest! {
    /// Any built-in strategy with any options, over epochs of batches (reshuffled or not):
    /// nothing lost or duplicated unless reported dropped, capacity respected, deterministic,
    /// first-fit-like packs pairwise full, within the FF / FFD bound of OPT.
    #[test]
    fn builtin_packers_pass_the_harness(case in arb_packer_case()) {
        let spec = case.spec;
        run_packer_case(&|| spec.build().expect("valid spec"), &case, &PackerClaims::of_spec(&spec))?;
    }

    /// FFD ≤ 11/9·OPT + 6/9 on small instances, OPT by exhaustive DP.
    #[test]
    fn ffd_within_11_9_of_opt((cap, lens) in arb_small_instance()) {
        let xs: Vec<Example> = lens.iter().enumerate().map(|(i, &l)| Example::single(i as u64, l)).collect();
        let mut ffd = FirstFitDecreasing::new(cap, BinPackingOptions::default()).expect("cap > 0");
        let packs = pack_all(&mut ffd, &xs).expect("every item fits");
        check_quality(QualityBound::FirstFitDecreasing, packs.len(), optimal_bins(&lens, cap))?;
    }
}

/// Efficiency against the lower bound ⌈Σs/C⌉ for every built-in strategy on one fixed stream
/// (printed with `--nocapture`). First-fit-like packs are pairwise over capacity, so they use
/// fewer than 2·Σs/C + 1 packs.
#[test]
fn builtin_packer_efficiency_against_lower_bound() {
    use crate::harness::{PackerPlan, check_packer};
    use crate::strategies::mix;
    use thd::pack::{OverLength, PackerSpec, SequentialOptions, TokenPackingOptions};
    let cap = 512u32;
    // One long document among many short ones, as in SFT data.
    let data: Vec<Example> = (0..200u64)
        .map(|i| {
            Example::single(i, if i % 50 == 7 { 500 } else { 1 + (mix(3, &[i]) % 160) as u32 })
        })
        .collect();
    let plan = PackerPlan { batch_size: 16, epochs: 2, seed: 11, shuffle: true };
    let bins = BinPackingOptions { over_length: OverLength::Error, window: None };
    let specs = [
        PackerSpec::SequentialBudget { capacity: cap, options: SequentialOptions::default() },
        PackerSpec::TokenPacking { capacity: cap, options: TokenPackingOptions::default() },
        PackerSpec::FirstFit { capacity: cap, options: bins },
        PackerSpec::BestFit { capacity: cap, options: bins },
        PackerSpec::FirstFitDecreasing { capacity: cap, options: bins },
    ];
    for spec in specs {
        let claims = PackerClaims::of_spec(&spec);
        let r = check_packer(&|| spec.build().expect("valid"), &data, &plan, &claims)
            .unwrap_or_else(|v| panic!("{v}"));
        println!(
            "{:<22} packs {:>4}  lower bound {:>4}  efficiency {:.3}  fill {:.3}",
            r.name, r.packs, r.lower_bound, r.efficiency, r.fill
        );
        assert!(r.lower_bound <= r.packs, "{}: fewer packs than the lower bound", r.name);
        if claims.first_fit_like {
            // Per epoch (one instance): packs < 2·Σs/C + 1.
            let per_epoch: u64 = data.iter().map(|e| e.lens.total()).sum();
            let bound = u64::from(plan.epochs) * (2 * per_epoch / u64::from(cap) + 1);
            assert!(r.packs <= bound, "{}: {} packs > {bound}", r.name, r.packs);
        }
    }
}
