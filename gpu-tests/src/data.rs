//! Seeded inputs: packed q/k/v, logits and labels, built in f64 on the CPU.
//!
//! Every body draws its data here from a fixed seed (`StdRng::seed_from_u64`, never OS
//! entropy), then converts and moves it to the device under test, so the CPU and CUDA variants
//! of a test see bit-identical inputs.

use candle_core::{DType, Device, Result, Tensor};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use rand_distr::StandardNormal;

/// The realistic size (`tests/realistic.rs`, `benches/gpu.rs`): two packs of 8192 tokens each,
/// documents of mixed lengths up to 4096 tokens.
pub const REALISTIC_PACKS: [&[u32]; 2] =
    [&[3000, 2500, 1500, 700, 300, 192], &[4096, 2048, 1024, 1000, 24]];

/// An attention case: per-sequence lengths and the head layout.
#[derive(Debug, Clone)]
pub struct GpuCase {
    /// Name shown in failure reports.
    pub name: &'static str,
    /// Query lengths, one per sequence.
    pub seqlens_q: Vec<u32>,
    /// Key/value lengths, one per sequence (often equal to `seqlens_q`).
    pub seqlens_k: Vec<u32>,
    /// Query heads `H`.
    pub heads: usize,
    /// Key/value heads `KV` (`H % KV == 0`).
    pub kv_heads: usize,
    /// Head dimension `D`.
    pub head_dim: usize,
    /// Causal (bottom-right aligned) or bidirectional.
    pub causal: bool,
}

impl GpuCase {
    /// A self-attention case (`seqlens_k == seqlens_q`).
    pub fn new(
        name: &'static str,
        lens: &[u32],
        heads: usize,
        kv_heads: usize,
        head_dim: usize,
    ) -> Self {
        Self {
            name,
            seqlens_q: lens.to_vec(),
            seqlens_k: lens.to_vec(),
            heads,
            kv_heads,
            head_dim,
            causal: false,
        }
    }

    /// The same case with causal masking switched to `causal` (and the name kept).
    pub fn causal(mut self, causal: bool) -> Self {
        self.causal = causal;
        self
    }

    /// Packed tokens on the query side (`Σ seqlens_q`).
    pub fn tokens_q(&self) -> usize {
        self.seqlens_q.iter().map(|&s| s as usize).sum()
    }

    /// Packed tokens on the key side (`Σ seqlens_k`).
    pub fn tokens_k(&self) -> usize {
        self.seqlens_k.iter().map(|&s| s as usize).sum()
    }

    /// `q: [Tq, H, D]`, `k, v: [Tk, KV, D]`, standard normal, f64 on the CPU.
    ///
    /// # Errors
    /// A candle error if the tensors cannot be built (never for sane sizes).
    pub fn qkv(&self, seed: u64) -> Result<(Tensor, Tensor, Tensor)> {
        let mut rng = StdRng::seed_from_u64(seed);
        let q = normal(&mut rng, &[self.tokens_q(), self.heads, self.head_dim])?;
        let k = normal(&mut rng, &[self.tokens_k(), self.kv_heads, self.head_dim])?;
        let v = normal(&mut rng, &[self.tokens_k(), self.kv_heads, self.head_dim])?;
        Ok((q, k, v))
    }

    /// The oracle's options for this case (default scale `1/sqrt(D)`).
    pub fn spec(&self) -> oracle::AttnSpec {
        oracle::AttnSpec { causal: self.causal, ..Default::default() }
    }

    /// The thd fast path's options and shape for this case.
    pub fn thd_shape(&self) -> (thd::AttnShape, thd::AttnOptions) {
        let shape =
            thd::AttnShape { heads: self.heads, kv_heads: self.kv_heads, head_dim: self.head_dim };
        (shape, thd::AttnOptions { causal: self.causal, ..Default::default() })
    }

    /// thd's CPU fast path (`thd::varlen_attention`) on this case's packed `q, k, v` (CPU
    /// tensors, f32 or f64), as a `[Tq, H, D]` tensor of the same dtype.
    ///
    /// # Errors
    /// A candle error for another dtype; thd's errors (wrapped) for inconsistent inputs.
    pub fn thd_attention(&self, q: &Tensor, k: &Tensor, v: &Tensor) -> Result<Tensor> {
        let cu = |lens: &[u32]| {
            thd::SeqLens::new(lens.to_vec()).to_cu_seqlens().map_err(candle_core::Error::wrap)
        };
        let (cu_q, cu_k) = (cu(&self.seqlens_q)?, cu(&self.seqlens_k)?);
        let (shape, opts) = self.thd_shape();
        let out = match q.dtype() {
            DType::F64 => {
                let f = |t: &Tensor| t.flatten_all()?.to_vec1::<f64>();
                let o = thd::varlen_attention(&f(q)?, &f(k)?, &f(v)?, &cu_q, &cu_k, shape, &opts);
                Tensor::new(o.map_err(candle_core::Error::wrap)?, &Device::Cpu)?
            }
            DType::F32 => {
                let f = |t: &Tensor| t.flatten_all()?.to_vec1::<f32>();
                let o = thd::varlen_attention(&f(q)?, &f(k)?, &f(v)?, &cu_q, &cu_k, shape, &opts);
                Tensor::new(o.map_err(candle_core::Error::wrap)?, &Device::Cpu)?
            }
            other => candle_core::bail!("the thd fast path has no {other:?} kernel"),
        };
        out.reshape(q.dims())
    }

    /// Useful attention FLOPs of the forward pass (`QKᵀ` and `PV`, 2 FLOPs per multiply-add):
    /// `4·H·D·Σ visible (query, key) pairs`, the exact causal triangle when causal.
    pub fn useful_flops(&self) -> f64 {
        let pairs: f64 = self
            .seqlens_q
            .iter()
            .zip(&self.seqlens_k)
            .map(|(&sq, &sk)| visible_pairs(sq as u64, sk as u64, self.causal) as f64)
            .sum();
        4.0 * (self.heads * self.head_dim) as f64 * pairs
    }
}

/// Visible (query, key) pairs of one sequence: `sq·sk`, or with bottom-right causal masking
/// `Σ_i clamp(i + sk − sq + 1, 0, sk)` over queries `i`.
fn visible_pairs(sq: u64, sk: u64, causal: bool) -> u64 {
    if !causal {
        return sq * sk;
    }
    (0..sq).map(|i| (i + sk + 1).saturating_sub(sq).min(sk)).sum()
}

/// A standard-normal f64 tensor of `shape` on the CPU.
///
/// # Errors
/// A candle error if the shape cannot be built.
pub fn normal(rng: &mut StdRng, shape: &[usize]) -> Result<Tensor> {
    let n = shape.iter().product();
    let data: Vec<f64> = (0..n).map(|_| rng.sample(StandardNormal)).collect();
    Tensor::from_vec(data, shape, &Device::Cpu)
}

/// Logits `[T, V]` (standard normal times `scale`, f64 on the CPU) and labels `[T]`.
///
/// Labels follow the oracle's convention (token `t`'s own id; position `t` predicts `t + 1`
/// within its sequence) and also the thd fast path's `Unshifted` one: the first token of every
/// sequence is -100, so no label is ever predicted across a boundary. About `ignore_pct`% of the
/// other labels are -100 too (prompt tokens).
///
/// # Errors
/// A candle error if the tensor cannot be built.
pub fn logits_and_labels(
    seqlens: &[u32],
    vocab: usize,
    scale: f64,
    ignore_pct: u32,
    seed: u64,
) -> Result<(Tensor, Vec<i64>)> {
    let mut rng = StdRng::seed_from_u64(seed);
    let tokens: usize = seqlens.iter().map(|&s| s as usize).sum();
    let logits = normal(&mut rng, &[tokens, vocab])?.affine(scale, 0.0)?;
    let mut labels = Vec::with_capacity(tokens);
    for &len in seqlens {
        for i in 0..len {
            let ignored = i == 0 || rng.random_range(0..100) < ignore_pct;
            labels.push(if ignored {
                thd::IGNORE_INDEX
            } else {
                rng.random_range(0..vocab as i64)
            });
        }
    }
    Ok((logits, labels))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn causal_pairs_are_the_bottom_right_triangle() {
        assert_eq!(visible_pairs(4, 4, true), 10);
        assert_eq!(visible_pairs(2, 4, true), 3 + 4);
        assert_eq!(visible_pairs(4, 2, true), 1 + 2); // the first two queries see nothing
        assert_eq!(visible_pairs(3, 5, false), 15);
    }
}
