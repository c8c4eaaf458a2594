//! ATTN properties: `thd`'s attention against the candle oracle, in f64.

use proptest::prelude::*;
use proptest::sample::Index;

use crate::strategies::arb_attn_case;
use crate::subjects::{ThdSubject, run_attention, run_isolation};

proptest! {
    /// Plain, padded, cross-length and CP-split layouts; causal and bidirectional; MHA, GQA and
    /// MQA; zero-length segments: every real token matches the per-sequence BSHD oracle to
    /// 1e-12, and rows that see no key are 0.
    #[test]
    fn attention_matches_oracle_f64(case in arb_attn_case()) {
        run_attention(&ThdSubject, &case)?;
    }

    /// Perturbing one segment's q, k and v never changes another segment's output, bit for bit.
    #[test]
    fn attention_isolates_segments(case in arb_attn_case(), seg in any::<Index>()) {
        let segment = seg.index(case.lens.len());
        run_isolation(&ThdSubject, &case, segment)?;
    }
}
