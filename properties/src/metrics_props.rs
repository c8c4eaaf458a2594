//! WORK, MFU-PAD and FLOPS properties.

use proptest::prelude::*;

use crate::strategies::{arb_flops_case, arb_mfu_case, arb_work_case};
use crate::subjects::{ThdSubject, run_flops, run_mfu_pad, run_work};

proptest! {
    /// Σ real sᵢ² ≤ hardware work (varlen and whole pack), equal exactly without padding.
    #[test]
    fn useful_work_le_hardware_work(case in arb_work_case()) {
        run_work(&ThdSubject, &case)?;
    }

    /// Useful FLOPs and MFU are bit-identical with and without pad_to_multiple_of, CP
    /// divisibility, static padding and CP + mock; hardware ≥ useful; useful MFU ≤ 100 %.
    #[test]
    fn useful_mfu_is_unchanged_by_padding(case in arb_mfu_case()) {
        run_mfu_pad(&ThdSubject, &case)?;
    }

    /// FLOPs statistics are the real Σs and Σs² of every row (BSHD: mbs·S²), whatever the
    /// config seq_length, and add up over micro-batches.
    #[test]
    fn flops_scale_with_real_lengths(case in arb_flops_case()) {
        run_flops(&ThdSubject, &case)?;
    }
}
