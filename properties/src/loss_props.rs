//! LOSS and CP-LOSS properties: the packed loss and its CP / micro-batch reassembly against the
//! oracle.

use proptest::prelude::*;

use crate::checks::Split;
use crate::strategies::{CpLossCase, Sizes, arb_cp_loss_case, arb_sft_case};
use crate::subjects::{ThdSubject, run_cp_loss, run_loss};

proptest! {
    /// The packed loss of flattened examples equals the oracle's mean cross-entropy over all
    /// valid labels, shifted within each sequence, with none, some or all labels ignored; all
    /// ignored gives exactly 0.
    #[test]
    fn packed_loss_matches_oracle(case in arb_sft_case(Sizes::SMALL)) {
        run_loss(&ThdSubject, &case)?;
    }

    /// CP-local sums over zigzag shards (cp ∈ {1, 2, 4, 8}), or micro-batch sums, reassemble the
    /// oracle's global loss to a relative 1e-12.
    #[test]
    fn cp_loss_local_sums_reassemble_the_global_loss(case in arb_cp_loss_case(Sizes::SMALL)) {
        run_cp_loss(&ThdSubject, &case)?;
    }

    /// The same batch for every cp in {1, 2, 4, 8} in one case: the global loss each time.
    #[test]
    fn cp_loss_is_the_same_for_every_cp(sft in arb_sft_case(Sizes { max_examples: 5, max_len: 20 })) {
        for cp in [1usize, 2, 4, 8] {
            run_cp_loss(&ThdSubject, &CpLossCase { sft: sft.clone(), split: Split::Cp(cp) })?;
        }
    }
}
