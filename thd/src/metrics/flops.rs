use serde::{Deserialize, Serialize};

use super::{AttnSums, BatchWork, HardwareView, ModelDims};
use crate::{Error, Result};

/// Exact `u128` arithmetic that reports a FLOPs count past `u128` instead of wrapping it.
#[derive(Debug, Clone, Copy)]
pub(super) struct Exact(pub(super) &'static str);

impl Exact {
    fn err(self) -> Error {
        Error::FlopsOverflow { formula: self.0 }
    }

    /// The product of `xs`.
    pub(super) fn mul(self, xs: &[u128]) -> Result<u128> {
        xs.iter().try_fold(1u128, |a, &x| a.checked_mul(x)).ok_or_else(|| self.err())
    }

    /// The sum of `xs`.
    pub(super) fn add(self, xs: &[u128]) -> Result<u128> {
        xs.iter().try_fold(0u128, |a, &x| a.checked_add(x)).ok_or_else(|| self.err())
    }

    /// `pairs_x2` of `attn` under `causal`.
    fn pairs_x2(self, attn: &AttnSums, causal: super::CausalConvention) -> Result<u128> {
        attn.checked_pairs_x2(causal).ok_or_else(|| self.err())
    }
}

/// Which stack's FLOPs formula to apply. Both count training (forward + backward = 3 × forward)
/// and 2 FLOPs per multiply-add; they differ in the attention width, the vocabulary they charge
/// and their default causal convention (set on [`ModelDims::causal`]).
///
/// # Example
/// ```
/// use thd::metrics::FlopsFormula;
/// assert_ne!(FlopsFormula::MegatronLm, FlopsFormula::BionemoPerfLogger);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FlopsFormula {
    /// Megatron-LM / Megatron-Bridge `num_floating_point_operations` (dense GPT), see
    /// [`megatron_flops`]. Upstream always uses [`CausalConvention::Half`](super::CausalConvention::Half).
    MegatronLm,
    /// bionemo `perf_logger` (PR #1548), see [`bionemo_flops`]. Upstream never halves
    /// ([`CausalConvention::None`](super::CausalConvention::None)).
    BionemoPerfLogger,
}

/// Useful and hardware FLOPs of a step, exact (`u128`).
///
/// # Example
/// ```
/// use thd::metrics::Flops;
/// let f = Flops { useful: 10, hardware: 12 };
/// assert!(f.useful <= f.hardware);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
pub struct Flops {
    /// FLOPs of real tokens and real attention only: identical with and without any padding.
    pub useful: u128,
    /// FLOPs the hardware is made to do: all stored tokens, padded and mock attention.
    pub hardware: u128,
}

/// Megatron-LM's THD-aware dense GPT formula (`training.py`, PR #4103; Megatron-Bridge
/// `num_floating_point_operations`, closed form), for `tokens` tokens with attention work `attn`.
///
/// ```text
/// q = H·d,  k = K·d,  gate = q if attention_output_gate else 0,  F = mlp_projections
/// FLOPs = 6·tokens·[ L·F·h·f + L·(2·h·q + 2·h·k + h·gate) + h·Vp ]  +  6·L·q·W
/// W = pairs_x2(causal):  Half Σs² (upstream) · None 2Σs² · ExactTriangle Σs(s+1)
/// ```
///
/// Exact in `u128`; upstream computes in Python floats and may differ in the last ulp.
///
/// # Errors
/// [`ModelDims::validate`]'s errors; [`Error::FlopsOverflow`] past `u128`.
///
/// # Example
/// ```
/// use thd::metrics::{AttnSums, CausalConvention, ModelDims, megatron_flops};
/// // Megatron-Bridge TestDynamicSeqLenFlops config; batch 4 × 1024 dense.
/// let d = ModelDims { layers: 2, hidden: 128, heads: 8, kv_heads: 4, head_dim: 16, ffn: 256,
///     mlp_projections: 2, vocab: 1024, padded_vocab: None, causal: CausalConvention::Half,
///     attention_output_gate: false };
/// assert_eq!(megatron_flops(&d, 4096, &AttnSums::repeated(4, 1024))?, 15_300_820_992);
/// # Ok::<(), thd::Error>(())
/// ```
pub fn megatron_flops(dims: &ModelDims, tokens: u64, attn: &AttnSums) -> Result<u128> {
    dims.validate()?;
    let [l, h, f, q, k] =
        [dims.layers, dims.hidden, dims.ffn, dims.query_width(), dims.kv_width()].map(u128::from);
    let mlp = u128::from(dims.mlp_projections);
    let gate = if dims.attention_output_gate { q } else { 0 };
    let vp = u128::from(dims.padded_vocab());
    let x = Exact("megatron_flops");
    // 6·(L·F·h·f + L·(2·h·q + 2·h·k + h·gate) + h·Vp)
    let projections = x.add(&[x.mul(&[2, h, q])?, x.mul(&[2, h, k])?, x.mul(&[h, gate])?])?;
    let per_token = x.mul(&[
        6,
        x.add(&[x.mul(&[l, mlp, h, f])?, x.mul(&[l, projections])?, x.mul(&[h, vp])?])?,
    ])?;
    let attention = x.mul(&[6, l, q, x.pairs_x2(attn, dims.causal)?])?;
    x.add(&[x.mul(&[u128::from(tokens), per_token])?, attention])
}

/// Which vocabulary the bionemo formula charges the LM head for.
///
/// # Example
/// ```
/// use thd::metrics::Vocab;
/// assert_ne!(Vocab::Raw, Vocab::Padded);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Vocab {
    /// `vocab` (bionemo's useful metric, `mfu_pct`).
    Raw,
    /// `padded_vocab` (bionemo's hardware metric, `mfu_padded_pct`).
    Padded,
}

/// bionemo `perf_logger`'s per-token non-attention FLOPs, exactly as PR #1548 computes them.
///
/// ```text
/// head_dim = h // H   (integer; the config's head_dim is not read)     kv_dim = K·head_dim
/// per_layer = 2h² (Q) + 4·h·kv_dim (K+V) + 2h² (O) + 2·F·h·f
/// non_attn  = 3·(L·per_layer + 2·h·V)          V = vocab or padded_vocab
/// ```
///
/// # Errors
/// [`ModelDims::validate`]'s errors; [`Error::FlopsOverflow`] past `u128`.
///
/// # Example
/// ```
/// use thd::metrics::{CausalConvention, ModelDims, Vocab, bionemo_non_attn_per_token};
/// let esm2_8m = ModelDims { layers: 6, hidden: 320, heads: 20, kv_heads: 20, head_dim: 16,
///     ffn: 1280, mlp_projections: 2, vocab: 33, padded_vocab: Some(64),
///     causal: CausalConvention::None, attention_output_gate: false };
/// assert_eq!(bionemo_non_attn_per_token(&esm2_8m, Vocab::Raw)?, 44_300_160);
/// assert_eq!(bionemo_non_attn_per_token(&esm2_8m, Vocab::Padded)?, 44_359_680);
/// # Ok::<(), thd::Error>(())
/// ```
pub fn bionemo_non_attn_per_token(dims: &ModelDims, vocab: Vocab) -> Result<u128> {
    dims.validate()?;
    let [l, h, heads, kv, f] =
        [dims.layers, dims.hidden, dims.heads, dims.kv_heads, dims.ffn].map(u128::from);
    let x = Exact("bionemo_non_attn_per_token");
    let kv_dim = x.mul(&[kv, h / heads])?;
    let mlp = u128::from(dims.mlp_projections);
    let per_layer = x.add(&[
        x.mul(&[2, h, h])?,
        x.mul(&[4, h, kv_dim])?,
        x.mul(&[2, h, h])?,
        x.mul(&[2, mlp, h, f])?,
    ])?;
    let v = u128::from(match vocab {
        Vocab::Raw => dims.vocab,
        Vocab::Padded => dims.padded_vocab(),
    });
    x.mul(&[3, x.add(&[x.mul(&[l, per_layer])?, x.mul(&[2, h, v])?])?])
}

/// bionemo `perf_logger`'s attention coefficient, `12·L·h` (full `QKᵀ` + `PV`, no causal
/// halving, width `h` rather than `H·d`).
///
/// # Errors
/// [`ModelDims::validate`]'s errors; [`Error::FlopsOverflow`] past `u128`.
///
/// # Example
/// ```
/// # use thd::metrics::{CausalConvention, ModelDims, bionemo_attn_coeff};
/// let esm2_8m = ModelDims { layers: 6, hidden: 320, heads: 20, kv_heads: 20, head_dim: 16,
///     ffn: 1280, mlp_projections: 2, vocab: 33, padded_vocab: Some(64),
///     causal: CausalConvention::None, attention_output_gate: false };
/// assert_eq!(bionemo_attn_coeff(&esm2_8m)?, 23_040);
/// # Ok::<(), thd::Error>(())
/// ```
pub fn bionemo_attn_coeff(dims: &ModelDims) -> Result<u128> {
    dims.validate()?;
    Exact("bionemo_attn_coeff").mul(&[12, u128::from(dims.layers), u128::from(dims.hidden)])
}

/// bionemo `perf_logger`'s formula for `tokens` tokens with attention work `attn`, global
/// (no `// cp_size`: see [`bionemo::PerfWindow`](super::bionemo::PerfWindow) for the per-rank
/// upstream replica).
///
/// ```text
/// FLOPs = non_attn(vocab)·tokens + 6·L·h·W
/// W = pairs_x2(causal):  None 2Σs² (upstream: 12·L·h·Σs²) · Half Σs² · ExactTriangle Σs(s+1)
/// ```
///
/// # Errors
/// [`ModelDims::validate`]'s errors; [`Error::FlopsOverflow`] past `u128`.
///
/// # Example
/// ```
/// use thd::metrics::{AttnSums, CausalConvention, ModelDims, Vocab, bionemo_flops};
/// // og2-7B worked snapshot: one micro-batch of 2 × 8192 docs.
/// let og2 = ModelDims { layers: 32, hidden: 4096, heads: 32, kv_heads: 8, head_dim: 128,
///     ffn: 14336, mlp_projections: 3, vocab: 256, padded_vocab: None,
///     causal: CausalConvention::None, attention_output_gate: false };
/// let f = bionemo_flops(&og2, 16384, &AttnSums::of([8192u64, 8192]), Vocab::Raw)?;
/// assert_eq!(f, 897_304_567_480_320);
/// # Ok::<(), thd::Error>(())
/// ```
pub fn bionemo_flops(dims: &ModelDims, tokens: u64, attn: &AttnSums, vocab: Vocab) -> Result<u128> {
    let non_attn = bionemo_non_attn_per_token(dims, vocab)?;
    let x = Exact("bionemo_flops");
    let (l, h) = (u128::from(dims.layers), u128::from(dims.hidden));
    let attention = x.mul(&[6, l, h, x.pairs_x2(attn, dims.causal)?])?;
    x.add(&[x.mul(&[non_attn, u128::from(tokens)])?, attention])
}

impl BatchWork {
    /// Useful and hardware FLOPs of this (global, pre-CP) work under `formula`.
    ///
    /// ```text
    /// useful   = formula(real_tokens,   useful attention)        LM head: Megatron Vp, bionemo V
    /// hardware = formula(padded_tokens, hardware(view) attention) LM head: Vp for both
    /// ```
    ///
    /// Useful FLOPs depend on real lengths and real segments only, so padding of any kind
    /// (`pad_to_multiple_of` mock segments, CP divisibility, static `max_seq_length`) leaves
    /// them bit-identical; hardware ≥ useful.
    ///
    /// # Errors
    /// [`ModelDims::validate`]'s errors.
    ///
    /// # Example
    /// ```
    /// use thd::SeqLens;
    /// use thd::metrics::{BatchWork, CausalConvention, FlopsFormula, HardwareView, ModelDims};
    /// let d = ModelDims { layers: 2, hidden: 128, heads: 8, kv_heads: 4, head_dim: 16, ffn: 256,
    ///     mlp_projections: 2, vocab: 1024, padded_vocab: None, causal: CausalConvention::Half,
    ///     attention_output_gate: false };
    /// let real = SeqLens::new(vec![256, 1792]);
    /// let unpadded = BatchWork::from_seq_lens(&real, &real, None, 2048)?;
    /// let padded = BatchWork::from_seq_lens(&real, &SeqLens::new(vec![512, 2048]), None, 4096)?;
    /// let a = unpadded.flops(&d, FlopsFormula::MegatronLm, HardwareView::Varlen)?;
    /// let b = padded.flops(&d, FlopsFormula::MegatronLm, HardwareView::Varlen)?;
    /// assert_eq!(a.useful, b.useful);
    /// assert!(b.hardware > a.hardware);
    /// # Ok::<(), thd::Error>(())
    /// ```
    pub fn flops(
        &self,
        dims: &ModelDims,
        formula: FlopsFormula,
        view: HardwareView,
    ) -> Result<Flops> {
        let hw = self.hardware(view);
        Ok(match formula {
            FlopsFormula::MegatronLm => Flops {
                useful: megatron_flops(dims, self.real_tokens, &self.useful)?,
                hardware: megatron_flops(dims, self.padded_tokens, &hw)?,
            },
            FlopsFormula::BionemoPerfLogger => Flops {
                useful: bionemo_flops(dims, self.real_tokens, &self.useful, Vocab::Raw)?,
                hardware: bionemo_flops(dims, self.padded_tokens, &hw, Vocab::Padded)?,
            },
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::SeqLens;
    use crate::metrics::CausalConvention;

    fn tiny(causal: CausalConvention) -> ModelDims {
        ModelDims {
            layers: 2,
            hidden: 128,
            heads: 8,
            kv_heads: 4,
            head_dim: 16,
            ffn: 256,
            mlp_projections: 2,
            vocab: 1000,
            padded_vocab: Some(1024),
            causal,
            attention_output_gate: false,
        }
    }

    #[test]
    fn flops_hardware_ge_useful_under_every_convention_and_view() {
        let real = SeqLens::new(vec![5, 0, 9]);
        let padded = SeqLens::new(vec![8, 0, 12, 4]);
        let real4 = SeqLens::new(vec![5, 0, 9, 4]);
        let w = BatchWork::from_seq_lens(&real4, &padded, Some(3), 30).unwrap();
        for causal in
            [CausalConvention::None, CausalConvention::Half, CausalConvention::ExactTriangle]
        {
            for formula in [FlopsFormula::MegatronLm, FlopsFormula::BionemoPerfLogger] {
                for view in [HardwareView::Varlen, HardwareView::WholePack] {
                    let f = w.flops(&tiny(causal), formula, view).unwrap();
                    assert!(f.useful < f.hardware, "{causal:?} {formula:?} {view:?}");
                    let bare = BatchWork::from_seq_lens(&real, &real, None, 14).unwrap();
                    assert_eq!(bare.flops(&tiny(causal), formula, view).unwrap().useful, f.useful);
                }
            }
        }
    }

    #[test]
    fn attention_term_is_affine_in_the_work_with_slope_6_l_q() {
        let d = tiny(CausalConvention::Half);
        let a = megatron_flops(&d, 100, &AttnSums::of([100u64])).unwrap();
        let b = megatron_flops(&d, 100, &AttnSums::of([60u64, 40])).unwrap();
        let delta = AttnSums::of([100u64]).sum_squares - AttnSums::of([60u64, 40]).sum_squares;
        assert_eq!(a - b, 6 * 2 * 128 * delta);
    }

    #[test]
    fn flops_past_u128_are_an_error_not_a_wrapped_count() {
        let mut d = tiny(CausalConvention::None);
        (d.layers, d.hidden, d.ffn) = (1 << 42, 1 << 43, 1 << 43);
        let attn = AttnSums::of([7u64]);
        let overflow = |formula| Err(Error::FlopsOverflow { formula });
        assert_eq!(megatron_flops(&d, 1, &attn), overflow("megatron_flops"));
        assert_eq!(bionemo_flops(&d, 1, &attn, Vocab::Raw), overflow("bionemo_non_attn_per_token"));
        // Dims that fit, a token count that does not.
        let d = tiny(CausalConvention::None);
        let huge = AttnSums { sum_squares: u128::MAX / 2 + 1, ..attn };
        assert_eq!(megatron_flops(&d, 1, &huge), overflow("megatron_flops"));
        assert_eq!(bionemo_flops(&d, u64::MAX, &huge, Vocab::Raw), overflow("bionemo_flops"));
    }

    #[test]
    fn gate_adds_h_q_per_layer_and_token() {
        let mut d = tiny(CausalConvention::Half);
        let base = megatron_flops(&d, 10, &AttnSums::default()).unwrap();
        d.attention_output_gate = true;
        let gated = megatron_flops(&d, 10, &AttnSums::default()).unwrap();
        assert_eq!(gated - base, 6 * 10 * 2 * 128 * 128);
    }
}
