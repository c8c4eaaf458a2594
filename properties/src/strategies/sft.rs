//! Supervised examples with label masks, and the CP / micro-batch splits of them.

use proptest::collection::vec;
use proptest::prelude::*;
use thd::IGNORE_INDEX;
use thd::collate::Document;

use super::lens::{SeqLensParams, arb_cp, arb_seq_lens};
use super::{mix, noise};
use crate::checks::{Split, TokenCounts};

/// How big the batches of the SFT-family strategies are ([`arb_sft_case`] and every strategy
/// built on it): `1..=max_examples` examples of `1..=max_len` tokens.
///
/// # Example
/// ```
/// use proptest::strategy::{Strategy, ValueTree};
/// use proptest::test_runner::TestRunner;
/// use properties::strategies::{Sizes, arb_sft_case};
/// let case = arb_sft_case(Sizes::TINY).new_tree(&mut TestRunner::deterministic()).unwrap().current();
/// assert!((1..=4).contains(&case.lens.len()) && case.lens.iter().all(|&s| (1..=8).contains(&s)));
/// assert_eq!(Sizes::default(), Sizes::SMALL);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Sizes {
    /// The most examples in a batch (at least 1).
    pub max_examples: usize,
    /// The longest example, in tokens (at least 1).
    pub max_len: u32,
}

impl Sizes {
    /// 1–6 examples of 1–24 tokens: the property suites, the zoo and `thdcheck selfcheck`.
    pub const SMALL: Sizes = Sizes { max_examples: 6, max_len: 24 };
    /// 1–4 examples of 1–8 tokens: doc examples and the slower suites.
    pub const TINY: Sizes = Sizes { max_examples: 4, max_len: 8 };
}

/// [`Sizes::SMALL`].
impl Default for Sizes {
    fn default() -> Self {
        Self::SMALL
    }
}

/// A batch of SFT examples: lengths, which labels are ignored, and a seed for token ids and
/// logits.
///
/// Token ids, labels and the logits of every real token are functions of `(example, offset)`,
/// not of where the token lands in a pack, so the same case collated with any padding or split
/// over any CP size gives the model the same inputs at every real token.
#[derive(Debug, Clone, PartialEq)]
#[cfg_attr(any(test, feature = "serde"), derive(serde::Serialize, serde::Deserialize))]
pub struct SftCase {
    /// Example lengths (each ≥ 1: collators reject empty examples).
    pub lens: Vec<u32>,
    /// Which labels are -100.
    pub mask: LabelMask,
    /// Vocabulary size.
    pub vocab: usize,
    /// Seed of token ids and logits.
    pub seed: u64,
}

impl SftCase {
    /// Token id of `example`'s token `offset`.
    pub fn token(&self, example: usize, offset: usize) -> i64 {
        (mix(self.seed, &[1, example as u64, offset as u64]) % self.vocab as u64) as i64
    }

    /// Whether `example`'s label at `offset` is ignored (-100).
    pub fn ignored(&self, example: usize, offset: usize) -> bool {
        let t: usize = self.lens[..example].iter().map(|&s| s as usize).sum::<usize>() + offset;
        match &self.mask {
            LabelMask::None => false,
            LabelMask::All => true,
            LabelMask::Prompt(k) => offset < *k as usize,
            LabelMask::Pattern(p) => !p.is_empty() && p[t % p.len()],
        }
    }

    /// The examples as a collator receives them: token ids and labels (the token, or -100).
    pub fn examples(&self) -> Vec<Document> {
        (0..self.lens.len())
            .map(|i| {
                let ids: Vec<i64> = (0..self.lens[i] as usize).map(|j| self.token(i, j)).collect();
                let labels = ids
                    .iter()
                    .enumerate()
                    .map(|(j, &y)| if self.ignored(i, j) { IGNORE_INDEX } else { y })
                    .collect();
                Document::with_labels(ids, labels)
            })
            .collect()
    }

    /// Logits of `example`'s token `offset`, `[vocab]`, in `[-3, 3)`.
    pub fn logits_row(&self, example: usize, offset: usize) -> Vec<f64> {
        (0..self.vocab)
            .map(|v| 3.0 * noise(self.seed, &[2, example as u64, offset as u64, v as u64]))
            .collect()
    }

    /// Logits `[T, vocab]` of a pack whose segment `i` holds example `i`'s tokens at the start
    /// of a storage slot of `storage[i]` tokens (later slots are mock); every other row
    /// (padding) gets values of its own.
    pub fn logits(&self, storage: &[u32], num_tokens: usize) -> Vec<f64> {
        self.logits_from(0, storage, num_tokens)
    }

    /// [`SftCase::logits`] of a pack whose segment `i` holds example `first + i`.
    pub fn logits_from(&self, first: usize, storage: &[u32], num_tokens: usize) -> Vec<f64> {
        let mut out = Vec::with_capacity(num_tokens * self.vocab);
        let mut row = 0usize;
        for (i, &p) in storage.iter().enumerate() {
            let ex = first + i;
            for j in 0..p as usize {
                if ex < self.lens.len() && j < self.lens[ex] as usize {
                    out.extend(self.logits_row(ex, j));
                } else {
                    out.extend(
                        (0..self.vocab).map(|v| 3.0 * noise(self.seed, &[3, row as u64, v as u64])),
                    );
                }
                row += 1;
            }
        }
        while row < num_tokens {
            out.extend((0..self.vocab).map(|v| 3.0 * noise(self.seed, &[3, row as u64, v as u64])));
            row += 1;
        }
        out
    }

    /// The examples' labels concatenated as they are (no boundary masking): what the oracle,
    /// which shifts within each sequence itself, is given.
    pub fn raw_labels(&self) -> Vec<i64> {
        self.examples().iter().flat_map(|e| e.label_source().to_vec()).collect()
    }

    /// The counts a logger must report for this batch.
    pub fn expected_counts(&self) -> TokenCounts {
        let n_tokens: u64 = self.lens.iter().map(|&s| u64::from(s)).sum();
        let valid: Vec<u64> = (0..self.lens.len())
            .map(|i| (1..self.lens[i] as usize).filter(|&j| !self.ignored(i, j)).count() as u64)
            .collect();
        let n_valid_tokens = valid.iter().sum();
        TokenCounts {
            n_tokens,
            n_valid_tokens,
            prompt_tokens: n_tokens - n_valid_tokens,
            n_seqs: valid.iter().filter(|&&c| c > 0).count() as u64,
        }
    }
}

/// Which labels of a batch are ignored (-100).
#[derive(Debug, Clone, PartialEq, Eq)]
#[cfg_attr(any(test, feature = "serde"), derive(serde::Serialize, serde::Deserialize))]
pub enum LabelMask {
    /// None: every token is a target.
    None,
    /// The first `k` tokens of every example (a prompt).
    Prompt(u32),
    /// Token `t` of the concatenated examples is ignored iff `pattern[t % len]`.
    Pattern(Vec<bool>),
    /// All: nothing to learn (the loss must be exactly 0).
    All,
}

/// A [`LabelMask`]: none (3 in 8), a prompt of 0–8 tokens, a pattern of 1–8 flags, all (1 in 8).
///
/// Independent of the lengths, so lengths and mask shrink separately.
pub fn arb_label_mask() -> impl Strategy<Value = LabelMask> {
    prop_oneof![
        3 => Just(LabelMask::None),
        2 => (0u32..=8).prop_map(LabelMask::Prompt),
        2 => vec(any::<bool>(), 1..=8).prop_map(LabelMask::Pattern),
        1 => Just(LabelMask::All),
    ]
}

prop_compose! {
    /// An SFT batch of `1..=max_examples` examples of `1..=max_len` tokens ([`Sizes`]).
    pub fn arb_sft_case(sizes: Sizes)
        (
            mask in arb_label_mask(),
            vocab in 2usize..=5,
            seed in 0u64..1_000,
            lens in arb_seq_lens(SeqLensParams {
                min_len: 1,
                max_len: sizes.max_len,
                max_segments: sizes.max_examples,
            }),
        )
        -> SftCase
    {
        SftCase { lens, mask, vocab, seed }
    }
}

/// A batch and how it is split: over a CP size from {1, 2, 4, 8}, or into micro-batches.
#[derive(Debug, Clone, PartialEq)]
#[cfg_attr(any(test, feature = "serde"), derive(serde::Serialize, serde::Deserialize))]
pub struct CpLossCase {
    /// The global batch.
    pub sft: SftCase,
    /// The split.
    pub split: Split,
}

/// A [`CpLossCase`]: a CP split (3 in 4) or a split into `1..=6` micro-batches of
/// `⌈B/k⌉` consecutive examples.
pub fn arb_cp_loss_case(sizes: Sizes) -> impl Strategy<Value = CpLossCase> {
    let split = prop_oneof![3 => arb_cp().prop_map(Split::Cp), 1 => (1usize..=6).prop_map(Split::MicroBatches)];
    // Knobs before data: proptest shrinks a tuple left to right, once.
    (split, arb_sft_case(sizes)).prop_map(|(split, sft)| CpLossCase { sft, split })
}

/// A [`CpLossCase`] split into `1..=B` micro-batches only (gradient accumulation), no CP.
pub fn arb_micro_batch_loss_case(sizes: Sizes) -> impl Strategy<Value = CpLossCase> {
    arb_sft_case(sizes).prop_flat_map(|sft| {
        let n = sft.lens.len();
        (Just(sft), 1..=n).prop_map(|(sft, k)| CpLossCase { sft, split: Split::MicroBatches(k) })
    })
}

/// A batch for the TOKENS-CP property (which runs every CP size itself).
pub type TokensCpCase = SftCase;

/// An [`SftCase`] for TOKENS-CP.
pub fn arb_tokens_cp_case(sizes: Sizes) -> impl Strategy<Value = TokensCpCase> {
    arb_sft_case(sizes)
}

/// A batch to shard: the CP size, and whether it was padded for CP first (if not, lengths not
/// divisible by `2·cp` must be rejected).
#[derive(Debug, Clone, PartialEq)]
#[cfg_attr(any(test, feature = "serde"), derive(serde::Serialize, serde::Deserialize))]
pub struct ShardCase {
    /// The batch.
    pub sft: SftCase,
    /// The CP size.
    pub cp: usize,
    /// Pad every sequence to a multiple of `2·cp` before sharding.
    pub pad_first: bool,
}

prop_compose! {
    /// A [`ShardCase`]; 7 in 8 are padded first.
    pub fn arb_shard_case(sizes: Sizes)
        (cp in arb_cp(), pad_first in prop::bool::weighted(0.875), sft in arb_sft_case(sizes))
        -> ShardCase
    {
        ShardCase { sft, cp, pad_first }
    }
}

/// A padding a collator adds to a pack.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(any(test, feature = "serde"), derive(serde::Serialize, serde::Deserialize))]
pub enum Padding {
    /// None.
    None,
    /// Static right padding to `Σ lens + extra` tokens (open-instruct `max_seq_length`).
    Static {
        /// Tokens of padding.
        extra: usize,
    },
    /// A mock segment up to a multiple of `multiple_of` (bionemo / CodonFM
    /// `pad_to_multiple_of`), split into pieces of at most `max_mock_len`.
    Mock {
        /// The multiple.
        multiple_of: usize,
        /// CodonFM's cap on a mock segment.
        max_mock_len: Option<usize>,
    },
    /// Every sequence padded to a multiple of `2·cp` (TransformerEngine).
    Cp {
        /// CP size.
        cp: usize,
    },
    /// CP padding, then a mock tail (AReaL's dummy sequence).
    CpThenMock {
        /// CP size.
        cp: usize,
        /// The multiple of the mock.
        multiple_of: usize,
    },
}

/// The padding in words, for a violation's context (never Rust's `None` / `Some(..)`).
impl std::fmt::Display for Padding {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match *self {
            Padding::None => f.write_str("no padding"),
            Padding::Static { extra } => write!(f, "static padding (+{extra})"),
            Padding::Mock { multiple_of, max_mock_len: None } => {
                write!(f, "a mock segment to a multiple of {multiple_of}")
            }
            Padding::Mock { multiple_of, max_mock_len: Some(m) } => {
                write!(f, "mock segments of at most {m} tokens to a multiple of {multiple_of}")
            }
            Padding::Cp { cp } => write!(f, "CP padding (cp={cp})"),
            Padding::CpThenMock { cp, multiple_of } => {
                write!(
                    f,
                    "CP padding (cp={cp}), then a mock segment to a multiple of {multiple_of}"
                )
            }
        }
    }
}

/// Examples and the padding a collator is asked to add.
#[derive(Debug, Clone, PartialEq)]
#[cfg_attr(any(test, feature = "serde"), derive(serde::Serialize, serde::Deserialize))]
pub struct CollateCase {
    /// The examples.
    pub sft: SftCase,
    /// The padding.
    pub padding: Padding,
    /// The position id of every sequence's first token (0, or 2 for RoBERTa-family models).
    pub position_base: i64,
}

/// Any [`Padding`].
pub fn arb_padding() -> impl Strategy<Value = Padding> {
    let multiple = prop::sample::select(vec![1usize, 2, 3, 8, 16]);
    prop_oneof![
        Just(Padding::None),
        (0usize..=8).prop_map(|extra| Padding::Static { extra }),
        (multiple.clone(), prop::option::of(1usize..=4))
            .prop_map(|(multiple_of, max_mock_len)| Padding::Mock { multiple_of, max_mock_len }),
        arb_cp().prop_map(|cp| Padding::Cp { cp }),
        (multiple, arb_cp()).prop_map(|(multiple_of, cp)| Padding::CpThenMock { cp, multiple_of }),
    ]
}

prop_compose! {
    /// A [`CollateCase`]; position base 0 (7 in 8) or 2.
    pub fn arb_collate_case(sizes: Sizes)
        (padding in arb_padding(), roberta in prop::bool::weighted(0.125), sft in arb_sft_case(sizes))
        -> CollateCase
    {
        CollateCase { sft, padding, position_base: if roberta { 2 } else { 0 } }
    }
}
