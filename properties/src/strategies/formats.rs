//! Packed-batch formats beyond offsets: a pack with a 4-D attention mask, an EOS-delimited
//! pretraining stream cut into rows. (Per-token side tensors ride on a [`CollateCase`].)

use proptest::prelude::*;

use super::sft::{CollateCase, SftCase, Sizes, arb_collate_case, arb_sft_case};

/// A collated pack whose documents a 4-D attention mask must keep apart.
#[derive(Debug, Clone, PartialEq)]
#[cfg_attr(any(test, feature = "serde"), derive(serde::Serialize, serde::Deserialize))]
pub struct MaskCase {
    /// Each real token sees its whole document (an MLM / encoder), not only up to itself.
    pub bidirectional: bool,
    /// The examples and the padding of the pack.
    pub collate: CollateCase,
}

prop_compose! {
    /// A [`MaskCase`]: causal (3 in 4) or bidirectional, over any [`CollateCase`].
    ///
    /// # Example
    /// ```
    /// use proptest::strategy::{Strategy, ValueTree};
    /// use proptest::test_runner::TestRunner;
    /// use properties::strategies::{Sizes, arb_mask_case};
    /// let case = arb_mask_case(Sizes::TINY).new_tree(&mut TestRunner::deterministic()).unwrap().current();
    /// assert!((1..=4).contains(&case.collate.sft.lens.len()));
    /// ```
    pub fn arb_mask_case(sizes: Sizes)
        (bidirectional in prop::bool::weighted(0.25), collate in arb_collate_case(sizes))
        -> MaskCase
    {
        MaskCase { bidirectional, collate }
    }
}

/// Documents an EOS-appending packer concatenates (each truncated to `max_doc_len` tokens, its
/// EOS included) and cuts into rows.
#[derive(Debug, Clone, PartialEq)]
#[cfg_attr(any(test, feature = "serde"), derive(serde::Serialize, serde::Deserialize))]
pub struct EosCase {
    /// The longest document, its EOS included (≥ 2).
    pub max_doc_len: usize,
    /// `None`: one row holding the whole stream; `Some(w)`: rows of `w` tokens, the last one
    /// padded (documents cut at row ends, as Megatron's and Hugging Face's `group_texts` do).
    pub row_width: Option<usize>,
    /// The documents (token ids below `vocab`).
    pub sft: SftCase,
}

impl EosCase {
    /// The EOS id: the first id past the vocabulary the documents draw from, so that no
    /// document holds it.
    ///
    /// # Example
    /// ```
    /// use proptest::strategy::{Strategy, ValueTree};
    /// use proptest::test_runner::TestRunner;
    /// use properties::strategies::{Sizes, arb_eos_case};
    /// let case = arb_eos_case(Sizes::TINY).new_tree(&mut TestRunner::deterministic()).unwrap().current();
    /// let eos = case.eos_token_id();
    /// assert!(case.sft.examples().iter().all(|d| !d.input_ids.contains(&eos)));
    /// ```
    pub fn eos_token_id(&self) -> i64 {
        self.sft.vocab as i64
    }
}

prop_compose! {
    /// An [`EosCase`]: documents truncated to 2–8 tokens, in one row (1 in 3) or rows of 2–12.
    ///
    /// # Example
    /// ```
    /// use proptest::strategy::{Strategy, ValueTree};
    /// use proptest::test_runner::TestRunner;
    /// use properties::strategies::{Sizes, arb_eos_case};
    /// let case = arb_eos_case(Sizes::TINY).new_tree(&mut TestRunner::deterministic()).unwrap().current();
    /// assert!(case.max_doc_len >= 2);
    /// ```
    pub fn arb_eos_case(sizes: Sizes)
        (
            max_doc_len in 2usize..=8,
            row_width in prop_oneof![1 => Just(None), 2 => (2usize..=12).prop_map(Some)],
            sft in arb_sft_case(sizes),
        )
        -> EosCase
    {
        EosCase { max_doc_len, row_width, sft }
    }
}
