//! CP-SHARD and TOKENS-CP properties.

use proptest::prelude::*;

use crate::strategies::{Sizes, arb_shard_case, arb_tokens_cp_case};
use crate::subjects::{ThdSubject, run_cp_shard, run_tokens_cp};

proptest! {
    /// Zigzag shards of a CP-padded batch cover every real token once, in chunk order, with
    /// labels rolled before the split and global positions; reassembly is the identity; an
    /// unpadded batch with a length not divisible by 2·cp is rejected.
    #[test]
    fn cp_shards_cover_every_token_once(case in arb_shard_case(Sizes::SMALL)) {
        run_cp_shard(&ThdSubject, &case)?;
    }

    /// n_tokens, n_valid_tokens, prompt_tokens and n_seqs are the global counts for every cp in
    /// {1, 2, 4, 8}; the loss and perplexity do not move.
    #[test]
    fn logger_stats_are_the_same_for_every_cp(case in arb_tokens_cp_case(Sizes::SMALL)) {
        run_tokens_cp(&ThdSubject, &case)?;
    }
}
