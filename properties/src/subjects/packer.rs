//! PACKER subject: any [`Packer`], through the generic harness.

use thd::pack::Packer;

use crate::Violation;
use crate::harness::{PackerClaims, PackerPlan, PackerReport, check_packer};
use crate::strategies::PackerCase;

/// PACKER: run fresh packers from `make` over the case's dataset and plan, with `claims`.
///
/// # Errors
/// The first [`Violation`].
pub fn run_packer_case(
    make: &dyn Fn() -> Box<dyn Packer>,
    case: &PackerCase,
    claims: &PackerClaims,
) -> Result<PackerReport, Violation> {
    let plan = PackerPlan {
        batch_size: case.batch_size,
        epochs: case.epochs,
        seed: case.seed,
        shuffle: case.shuffle,
    };
    check_packer(make, &case.dataset, &plan, claims)
}
