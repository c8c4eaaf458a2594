//! LAYOUT properties: every `thd` collation keeps the layout contract and the documents.

use proptest::prelude::*;

use crate::strategies::{Sizes, arb_collate_case};
use crate::subjects::{ThdSubject, run_layout};

proptest! {
    /// Flattening with any padding (static, mock, CP, CP then mock) gives offsets from 0,
    /// non-decreasing, within the tokens; positions restarting per segment; no label across a
    /// boundary; non-empty mock segments; and one real segment per example, holding its tokens.
    #[test]
    fn collated_batches_keep_the_layout(case in arb_collate_case(Sizes::SMALL)) {
        run_layout(&ThdSubject, &case)?;
    }
}
