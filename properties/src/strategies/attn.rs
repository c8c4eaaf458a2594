//! Attention layouts: lengths, padding, cross lengths, GQA, causal, CP.

use proptest::collection::vec;
use proptest::prelude::*;

use super::lens::{SeqLensParams, arb_cp_gt1, arb_seq_lens};
use super::noise;

/// An attention call on a packed batch. q, k and v are functions of `seed` and the storage row.
#[derive(Debug, Clone, PartialEq)]
#[cfg_attr(any(test, feature = "serde"), derive(serde::Serialize, serde::Deserialize))]
pub struct AttnCase {
    /// Real query lengths per segment (and key lengths, unless `lens_k` is set).
    pub lens: Vec<u32>,
    /// Real key lengths per segment, when they differ from the queries' (cross attention or
    /// decoding; bottom-right causal alignment). Only with `cp = 1` and no padding.
    pub lens_k: Option<Vec<u32>>,
    /// Padding tokens after each segment's real tokens (storage only).
    pub pad: Vec<u32>,
    /// CP size; with `cp > 1` every slot is rounded up to a multiple of `2·cp`.
    pub cp: usize,
    /// Query heads.
    pub heads: usize,
    /// Key/value heads (`heads` is a multiple).
    pub kv_heads: usize,
    /// Head dimension.
    pub head_dim: usize,
    /// Causal (bottom-right aligned).
    pub causal: bool,
    /// Seed of q, k, v.
    pub seed: u64,
}

impl AttnCase {
    /// Storage length of every query slot.
    pub fn storage(&self) -> Vec<u32> {
        let d = if self.cp > 1 { 2 * self.cp as u32 } else { 1 };
        self.lens.iter().zip(&self.pad).map(|(&s, &p)| (s + p).div_ceil(d) * d).collect()
    }

    /// Real key lengths.
    pub fn real_k(&self) -> Vec<u32> {
        self.lens_k.clone().unwrap_or_else(|| self.lens.clone())
    }

    /// Storage length of every key slot.
    pub fn storage_k(&self) -> Vec<u32> {
        match &self.lens_k {
            Some(k) => k.clone(),
            None => self.storage(),
        }
    }

    /// Stored query tokens.
    pub fn tokens_q(&self) -> usize {
        self.storage().iter().map(|&p| p as usize).sum()
    }

    /// Stored key tokens.
    pub fn tokens_k(&self) -> usize {
        self.storage_k().iter().map(|&p| p as usize).sum()
    }

    fn tensor(
        &self,
        which: u64,
        rows: usize,
        heads: usize,
        bump: Option<(usize, usize)>,
    ) -> Vec<f64> {
        let w = heads * self.head_dim;
        (0..rows * w)
            .map(|e| {
                let row = e / w;
                let x = noise(self.seed, &[which, row as u64, (e % w) as u64]);
                match bump {
                    Some((a, b)) if (a..b).contains(&row) => x + 0.75,
                    _ => x,
                }
            })
            .collect()
    }

    /// `(q, k, v)` in storage order: `[Tq, heads, head_dim]`, `[Tk, kv_heads, head_dim]` twice.
    pub fn qkv(&self) -> (Vec<f64>, Vec<f64>, Vec<f64>) {
        self.qkv_perturbed(None)
    }

    /// `(q, k, v)` with segment `segment`'s storage rows (q and k/v) shifted, if given.
    pub fn qkv_perturbed(&self, segment: Option<usize>) -> (Vec<f64>, Vec<f64>, Vec<f64>) {
        let slot = |storage: &[u32], i: usize| {
            let start: u32 = storage[..i].iter().sum();
            (start as usize, (start + storage[i]) as usize)
        };
        let (bq, bk) = match segment {
            Some(i) => (Some(slot(&self.storage(), i)), Some(slot(&self.storage_k(), i))),
            None => (None, None),
        };
        (
            self.tensor(1, self.tokens_q(), self.heads, bq),
            self.tensor(2, self.tokens_k(), self.kv_heads, bk),
            self.tensor(3, self.tokens_k(), self.kv_heads, bk),
        )
    }
}

/// An [`AttnCase`] of `1..=4` segments of `0..=12` tokens: plain (3 in 8), padded (2 in 8),
/// cross lengths (1 in 8) or split over CP ∈ {2, 4, 8} (2 in 8); 1–2 KV heads with groups of
/// 1–3 (MHA, GQA, MQA), head_dim 1–6, causal or not.
pub fn arb_attn_case() -> impl Strategy<Value = AttnCase> {
    let mode = prop_oneof![3 => Just(0u8), 2 => Just(1u8), 1 => Just(2u8), 2 => Just(3u8)];
    // Knobs before data: proptest shrinks a tuple left to right, once.
    (
        mode,
        arb_cp_gt1(),
        (1usize..=2, 1usize..=3, 1usize..=6),
        any::<bool>(),
        0u64..1_000,
        vec(0u32..=3, 4),
        vec(0u32..=12, 4),
        arb_seq_lens(SeqLensParams { min_len: 0, max_len: 12, max_segments: 4 }),
    )
        .prop_map(
            |(mode, cp, (kv_heads, group, head_dim), causal, seed, pad, lens_k, lens)| {
                let n = lens.len();
                AttnCase {
                    // Per-segment values are taken from the last segment backwards, so that dropping a
                    // leading segment while shrinking keeps the other segments' padding.
                    pad: if mode == 1 {
                        pad[..n].iter().rev().copied().collect()
                    } else {
                        vec![0; n]
                    },
                    lens_k: (mode == 2).then(|| lens_k[..n].iter().rev().copied().collect()),
                    cp: if mode == 3 { cp } else { 1 },
                    lens,
                    heads: kv_heads * group,
                    kv_heads,
                    head_dim,
                    causal,
                    seed,
                }
            },
        )
}

/// The size tier that crosses the fast path's 128-key tiles: `1..=3` segments of `0..=300`
/// tokens (lengths at and around 128 and 256 come up often), head dims up to 128 (odd ones
/// included: 1, 63, 65, 111, 127, 128, or any in between), MHA, GQA (groups up to 4) and MQA,
/// causal or not, plain, padded or split over CP ∈ {2, 4}. Few cases: each costs an oracle
/// call on hundreds of tokens.
pub fn arb_attn_case_large() -> impl Strategy<Value = AttnCase> {
    let len = prop_oneof![
        3 => 0u32..=300,
        2 => 127u32..=130,
        2 => 255u32..=258,
    ];
    let head_dim = prop_oneof![
        2 => proptest::sample::select(vec![1usize, 63, 64, 65, 111, 127, 128]),
        1 => 1usize..=128,
    ];
    let mode = prop_oneof![2 => Just(0u8), 1 => Just(1u8), 1 => Just(3u8)];
    (
        mode,
        prop_oneof![Just(2usize), Just(4usize)],
        (1usize..=2, 1usize..=4, head_dim),
        any::<bool>(),
        0u64..1_000,
        vec(0u32..=9, 3),
        vec(len, 1..=3),
    )
        .prop_map(|(mode, cp, (kv_heads, group, head_dim), causal, seed, pad, lens)| {
            let n = lens.len();
            AttnCase {
                pad: if mode == 1 { pad[..n].to_vec() } else { vec![0; n] },
                lens_k: None,
                cp: if mode == 3 { cp } else { 1 },
                lens,
                heads: kv_heads * group,
                kv_heads,
                head_dim,
                causal,
                seed,
            }
        })
}
