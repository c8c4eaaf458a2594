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
