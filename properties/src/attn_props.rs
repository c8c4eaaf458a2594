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

/// Cases of the large tier: 6 in `cargo test` (each is an oracle call on hundreds of tokens);
/// the long fuzz (`PROPTEST_CASES=N`) runs N / 16 of them.
fn large_cases() -> u32 {
    std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|v| v.parse::<u32>().ok())
        .map_or(6, |n| (n / 16).max(6))
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(large_cases()))]

    /// The size tier that crosses the fast path's 128-key tiles, causal tile skipping and the
    /// head-dim tails (up to 128, odd ones included), with GQA and CP: every real token matches
    /// the oracle as in `attention_matches_oracle_f64`.
    #[test]
    fn attention_matches_oracle_f64_across_tiles(case in crate::strategies::arb_attn_case_large()) {
        run_attention(&ThdSubject, &case)?;
    }
}
