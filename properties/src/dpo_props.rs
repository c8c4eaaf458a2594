//! DPO properties.

use proptest::prelude::*;

use crate::strategies::arb_dpo_case;
use crate::subjects::{ThdSubject, run_dpo};

proptest! {
    /// The concatenated chosen + rejected row keeps every segment on exactly its own example's
    /// tokens, with and without static padding.
    #[test]
    fn dpo_segments_point_at_their_own_examples(case in arb_dpo_case()) {
        run_dpo(&ThdSubject, &case)?;
    }
}
