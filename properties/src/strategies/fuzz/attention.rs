//! `thdcheck fuzz attention`'s cases: a packed layout of documents (real lengths, padding after
//! each, zero-length documents included), the head shape (heads, KV heads for GQA, head
//! dimension), causal or not, and the seed of q, k and v. Every value is exactly representable
//! in the requested dtype ([`AttnDtype::round`]), so the adapter computes on the very inputs the
//! oracle reads.
//!
//! A value is a function of (seed, tensor, the document's tag, the token's offset in its
//! document, head, dim): removing a document or a trailing token leaves every other value as it
//! was, so a reduction changes only what it removes.

use proptest::collection::vec;
use proptest::prelude::*;

use crate::strategies::noise;

/// The dtype of q, k, v and of the answer (`--dtype`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum AttnDtype {
    /// float32 (24 significant bits).
    #[default]
    F32,
    /// bfloat16 (8 significant bits, float32's exponent range).
    Bf16,
    /// float16 (11 significant bits).
    F16,
}

impl AttnDtype {
    /// The name a request carries: `f32`, `bf16`, `f16`.
    pub fn name(self) -> &'static str {
        match self {
            AttnDtype::F32 => "f32",
            AttnDtype::Bf16 => "bf16",
            AttnDtype::F16 => "f16",
        }
    }

    /// Significant bits of the format (the implicit one included).
    pub fn significand_bits(self) -> i32 {
        match self {
            AttnDtype::F32 => 24,
            AttnDtype::Bf16 => 8,
            AttnDtype::F16 => 11,
        }
    }

    /// `x` rounded to a value of this dtype (nearest, for the magnitudes generated here:
    /// `|x| < 8`); below `2⁻¹⁴` (float16's smallest normal) it is 0.
    ///
    /// # Example
    /// ```
    /// use properties::strategies::fuzz::AttnDtype;
    /// assert_eq!(AttnDtype::Bf16.round(1.0 + 1.0 / 1024.0), 1.0);
    /// assert_eq!(AttnDtype::F16.round(1.0 + 1.0 / 1024.0), 1.0 + 1.0 / 1024.0);
    /// let x = AttnDtype::F32.round(0.1);
    /// assert_eq!(x, f64::from(0.1f32));
    /// ```
    pub fn round(self, x: f64) -> f64 {
        if !x.is_finite() || x.abs() < 2f64.powi(-14) {
            return if x.is_finite() { 0.0 } else { x };
        }
        let mut e = x.abs().log2().floor() as i32;
        while x.abs() >= 2f64.powi(e + 1) {
            e += 1;
        }
        while x.abs() < 2f64.powi(e) {
            e -= 1;
        }
        let scale = 2f64.powi(self.significand_bits() - 1 - e);
        (x * scale).round() / scale
    }
}

/// One document of a pack: its real tokens, the padding stored after them, and the tag its
/// values are drawn from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AttnDoc {
    /// Real tokens (0: an empty document, two equal offsets).
    pub len: u32,
    /// Padding tokens stored after the real ones (before rounding the slot up for CP).
    pub pad: u32,
    /// The document's values are drawn from it.
    pub tag: u64,
}

/// Which tensor a value belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum QkvTensor {
    /// Queries, `[T, heads, head_dim]`.
    Q,
    /// Keys, `[T, kv_heads, head_dim]`.
    K,
    /// Values, `[T, kv_heads, head_dim]`.
    V,
}

/// Where a value of q, k or v sits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QkvIndex {
    /// The document.
    pub doc: usize,
    /// The token's offset in the document's slot.
    pub token: usize,
    /// The head.
    pub head: usize,
    /// The dim.
    pub dim: usize,
}

/// One attention call on a packed layout.
#[derive(Debug, Clone, PartialEq)]
pub struct AttentionFuzzCase {
    /// The documents, in storage order.
    pub docs: Vec<AttnDoc>,
    /// Query heads (a multiple of `kv_heads`).
    pub heads: usize,
    /// Key / value heads.
    pub kv_heads: usize,
    /// Head dimension.
    pub head_dim: usize,
    /// Causal within each document.
    pub causal: bool,
    /// CP size: 1, or the size every slot is padded for (a multiple of `2·cp`, zigzag).
    pub cp: usize,
    /// Seed of q, k and v.
    pub seed: u64,
}

impl AttentionFuzzCase {
    /// Real lengths.
    pub fn lens(&self) -> Vec<u32> {
        self.docs.iter().map(|d| d.len).collect()
    }

    /// Slot (storage) lengths: real plus padding, rounded up to a multiple of `2·cp` when
    /// `cp > 1`.
    pub fn storage(&self) -> Vec<u32> {
        let m = if self.cp > 1 { 2 * self.cp as u32 } else { 1 };
        self.docs.iter().map(|d| (d.len + d.pad).div_ceil(m) * m).collect()
    }

    /// Stored tokens.
    pub fn tokens(&self) -> usize {
        self.storage().iter().map(|&p| p as usize).sum()
    }

    /// Heads of `which`.
    pub fn heads_of(&self, which: QkvTensor) -> usize {
        if which == QkvTensor::Q { self.heads } else { self.kv_heads }
    }

    /// The value of `which` at `at` (a token of a document's slot, real or padding), in `dtype`;
    /// `bumped`: the perturbed value (another value of the dtype).
    pub fn value(&self, which: QkvTensor, at: QkvIndex, dtype: AttnDtype, bumped: bool) -> f64 {
        let QkvIndex { doc, token, head, dim } = at;
        let parts = [which as u64, self.docs[doc].tag, token as u64, head as u64, dim as u64];
        let x = 1.5 * noise(self.seed, &parts);
        dtype.round(if bumped { x + 0.75 } else { x })
    }

    /// The whole `[T, heads_of(which), head_dim]` tensor in storage order, flat (row-major);
    /// `bump(doc, j)` says which tokens carry their perturbed value.
    pub fn tensor(
        &self,
        which: QkvTensor,
        dtype: AttnDtype,
        bump: &dyn Fn(usize, usize) -> bool,
    ) -> Vec<f64> {
        let heads = self.heads_of(which);
        let mut out = Vec::with_capacity(self.tokens() * heads * self.head_dim);
        for (doc, &slot) in self.storage().iter().enumerate() {
            for j in 0..slot as usize {
                let b = bump(doc, j);
                for h in 0..heads {
                    for e in 0..self.head_dim {
                        let at = QkvIndex { doc, token: j, head: h, dim: e };
                        out.push(self.value(which, at, dtype, b));
                    }
                }
            }
        }
        out
    }
}

/// What the command's flags fix of the cases.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AttentionFuzzParams {
    /// The CP size (1: no CP).
    pub cp: usize,
    /// `Some(c)`: every case is causal (`true`) or bidirectional; `None`: either.
    pub causal: Option<bool>,
    /// Padding after some documents (`false`: none; the draws are the same, the padding is
    /// dropped).
    pub padded: bool,
}

impl Default for AttentionFuzzParams {
    fn default() -> Self {
        Self { cp: 1, causal: None, padded: true }
    }
}

/// `thdcheck fuzz attention`'s cases: 0 to 4 documents of 0 to 7 real tokens, padding after one
/// in four (1 to 3 tokens), a head shape from `(heads, kv_heads)` ∈ {(1,1), (2,1), (2,2), (4,1),
/// (4,2)} (MHA, GQA, MQA), head dimension 1 to 8, causal or not (or as `params` fixes it).
/// Everything shrinks towards no document, one head, head dimension 1, bidirectional.
///
/// # Example
/// ```
/// use proptest::strategy::{Strategy, ValueTree};
/// use proptest::test_runner::TestRunner;
/// use properties::strategies::fuzz::{AttentionFuzzParams, arb_attention_fuzz_case};
/// let params = AttentionFuzzParams { cp: 2, causal: Some(true), padded: true };
/// let case = arb_attention_fuzz_case(params)
///     .new_tree(&mut TestRunner::deterministic())
///     .unwrap()
///     .current();
/// assert!(case.causal && case.heads % case.kv_heads == 0);
/// assert!(case.storage().iter().all(|&p| p % 4 == 0));
/// ```
pub fn arb_attention_fuzz_case(
    params: AttentionFuzzParams,
) -> impl Strategy<Value = AttentionFuzzCase> {
    let doc = (0u32..=7, prop_oneof![3 => Just(0u32), 1 => 1u32..=3], any::<u64>())
        .prop_map(|(len, pad, tag)| AttnDoc { len, pad, tag });
    let shape = prop_oneof![Just((1, 1)), Just((2, 1)), Just((2, 2)), Just((4, 1)), Just((4, 2))];
    let causal = match params.causal {
        Some(c) => Just(c).boxed(),
        None => any::<bool>().boxed(),
    };
    let (cp, padded) = (params.cp.max(1), params.padded);
    (vec(doc, 0..=4), shape, 1usize..=8, causal, any::<u64>()).prop_map(
        move |(mut docs, (heads, kv_heads), head_dim, causal, seed)| AttentionFuzzCase {
            docs: {
                if !padded {
                    docs.iter_mut().for_each(|d| d.pad = 0);
                }
                docs
            },
            heads,
            kv_heads,
            head_dim,
            causal,
            cp,
            seed,
        },
    )
}
