//! `thdcheck fuzz cp-split`'s cases: a packed batch ([`CpBatch`]) and the CP size it is split
//! for, its slots padded for the split or left at their real lengths. The command tags every
//! token, builds the request for the stack's layout and judges the shards.

use proptest::prelude::*;

use super::cp_batch::{CpBatch, arb_cp_batch_aligned};
use crate::strategies::arb_cp;

/// What `fuzz cp-split`'s flags make of its cases.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CpSplitFuzzParams {
    /// `--cp-slot-align K` (the profile's `[fuzz] cp_slot_align`): the splitter pads each
    /// sequence to a multiple of `K·2·cp` itself, so its chunks hold `K` tokens or more and the
    /// documents are drawn long enough to cross them ([`arb_cp_batch_aligned`]).
    pub slot_align: Option<u32>,
}

/// A batch and the CP size it is split for.
#[derive(Debug, Clone, PartialEq)]
pub struct CpSplitFuzzCase {
    /// The CP size.
    pub cp: usize,
    /// Slots padded to a multiple of `2·cp` (contiguous: of `cp`; else real lengths, often not
    /// divisible).
    pub padded: bool,
    /// The batch.
    pub batch: CpBatch,
}

impl CpSplitFuzzCase {
    /// Storage length of every slot, for a `contiguous` split or the zigzag
    /// ([`CpBatch::storage`]).
    pub fn storage(&self, contiguous: bool) -> Vec<u32> {
        self.batch.storage(self.cp, self.padded, contiguous)
    }

    /// Storage length of every slot for the zigzag of the whole pack
    /// ([`CpBatch::sequence_storage`]).
    pub fn sequence_storage(&self) -> Vec<u32> {
        self.batch.sequence_storage(self.cp, self.padded)
    }
}

/// `thdcheck fuzz cp-split`'s cases: a CP size from {1, 2, 4, 8}, slots padded (to a multiple
/// of `2·cp`, contiguous: `cp`) in 4 cases of 5, else the real lengths, which a splitter may
/// refuse, and a [`CpBatch`] ([`arb_cp_batch_aligned`] to `params.slot_align`: with a
/// splitter's own slot alignment the documents grow with the slot, so they cross its chunks).
///
/// # Example
/// ```
/// use proptest::strategy::{Strategy, ValueTree};
/// use proptest::test_runner::TestRunner;
/// use properties::strategies::fuzz::{CpSplitFuzzParams, arb_cp_split_fuzz_case};
/// let case = arb_cp_split_fuzz_case(CpSplitFuzzParams::default())
///     .new_tree(&mut TestRunner::deterministic())
///     .unwrap()
///     .current();
/// assert!([1, 2, 4, 8].contains(&case.cp));
/// ```
pub fn arb_cp_split_fuzz_case(params: CpSplitFuzzParams) -> impl Strategy<Value = CpSplitFuzzCase> {
    let batch = arb_cp_batch_aligned(params.slot_align.unwrap_or(1));
    (arb_cp(), prop::bool::weighted(0.8), batch).prop_map(|(cp, padded, batch)| CpSplitFuzzCase {
        cp,
        padded,
        batch,
    })
}
