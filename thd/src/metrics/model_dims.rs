use serde::{Deserialize, Serialize};

use crate::{Error, Result};

/// How causal attention is counted. The stacks disagree, so the choice is explicit.
///
/// For one sequence of `s` tokens, the query–key pairs that attention computes:
///
/// ```text
/// None           s²              full QKᵀ and PV; bionemo perf_logger, PaLM/nanoGPT, torchtitan,
///                                OLMo-core (right for bidirectional models: ESM-2, CodonFM)
/// Half           s²/2            Megatron-LM (since 2025-03) and Megatron-Bridge: "only half of
///                                the attention matrix is non-zero"
/// ExactTriangle  s(s+1)/2        the exact causal triangle (FlashAttention-3 benchmarks, vLLM)
/// ```
///
/// For causal models, `None` reports exactly twice `Half`'s attention FLOPs (bionemo llama3/og2
/// vs Megatron-Bridge on the same batch).
///
/// # Example
/// ```
/// use thd::metrics::CausalConvention;
/// assert_eq!(CausalConvention::Half.pairs_x2(4), 16);          // 2 · 4²/2
/// assert_eq!(CausalConvention::ExactTriangle.pairs_x2(4), 20); // 2 · 4·5/2
/// assert_eq!(CausalConvention::None.pairs_x2(4), 32);          // 2 · 4²
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CausalConvention {
    /// Count the full `s × s` score matrix.
    None,
    /// Count half of it, `s²/2` (Megatron).
    Half,
    /// Count the causal triangle, `s(s+1)/2`.
    ExactTriangle,
}

impl CausalConvention {
    /// Twice the counted query–key pairs of one sequence of `s` tokens (an integer under every
    /// convention).
    ///
    /// # Example
    /// ```
    /// # use thd::metrics::CausalConvention;
    /// assert_eq!(CausalConvention::Half.pairs_x2(3), 9);
    /// ```
    pub fn pairs_x2(self, s: u64) -> u128 {
        let s = u128::from(s);
        match self {
            CausalConvention::None => 2 * s * s,
            CausalConvention::Half => s * s,
            CausalConvention::ExactTriangle => s * (s + 1),
        }
    }
}

/// The model dimensions every FLOPs formula here needs.
///
/// | field | Megatron | bionemo `config.to_dict()` | open-instruct `ModelDims` |
/// |---|---|---|---|
/// | `layers` | `num_layers` | `num_hidden_layers` | `num_layers` |
/// | `hidden` | `hidden_size` | `hidden_size` | `hidden_size` |
/// | `heads` | `num_attention_heads` | `num_attention_heads` | `num_attn_heads` |
/// | `kv_heads` | `num_query_groups` | `num_key_value_heads` | `num_kv_heads` |
/// | `head_dim` | `kv_channels` | (derived: `hidden / heads`) | `head_dim` |
/// | `ffn` | `ffn_hidden_size` | `intermediate_size` | `intermediate_size` |
/// | `mlp_projections` | 3 if `gated_linear_unit` else 2 | 3 for llama/mistral/qwen2 | (always 2·I up + I down) |
/// | `vocab` / `padded_vocab` | `padded_vocab_size` is what it uses | `vocab_size` / `padded_vocab_size` | `vocab_size` |
///
/// # Example
/// ```
/// use thd::metrics::{CausalConvention, ModelDims};
/// let llama_8b = ModelDims {
///     layers: 32, hidden: 4096, heads: 32, kv_heads: 8, head_dim: 128, ffn: 14336,
///     mlp_projections: 3, vocab: 128256, padded_vocab: None,
///     causal: CausalConvention::Half, attention_output_gate: false,
/// };
/// llama_8b.validate()?;
/// assert_eq!((llama_8b.query_width(), llama_8b.kv_width()), (4096, 1024));
/// # Ok::<(), thd::Error>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct ModelDims {
    /// Transformer layers `L`.
    pub layers: u64,
    /// Hidden size `h`.
    pub hidden: u64,
    /// Query heads `H`.
    pub heads: u64,
    /// Key/value heads `K` (query groups; `K = H` for MHA).
    pub kv_heads: u64,
    /// Head dimension `d` (`kv_channels`); `q = H·d` is the query projection width.
    pub head_dim: u64,
    /// FFN hidden size `f`.
    pub ffn: u64,
    /// Linear projections in the MLP: 2 (up, down) or 3 (gate, up, down: SwiGLU).
    pub mlp_projections: u32,
    /// Vocabulary size `V`.
    pub vocab: u64,
    /// Padded vocabulary `Vp ≥ V` (the LM head's real width); `None` means `V`.
    #[serde(default)]
    pub padded_vocab: Option<u64>,
    /// How causal attention is counted.
    pub causal: CausalConvention,
    /// Megatron's `attention_output_gate` (an extra `h × q` projection).
    #[serde(default)]
    pub attention_output_gate: bool,
}

impl ModelDims {
    /// Checks every field a formula divides or multiplies by.
    ///
    /// # Errors
    /// [`Error::ModelDimZero`], [`Error::MlpProjections`], [`Error::HeadsNotMultiple`],
    /// [`Error::ModelDimOverflow`] or [`Error::PaddedVocabTooSmall`], naming the value.
    ///
    /// # Example
    /// ```
    /// # use thd::metrics::{CausalConvention, ModelDims};
    /// let mut d = ModelDims { layers: 2, hidden: 128, heads: 8, kv_heads: 3, head_dim: 16, ffn: 256,
    ///     mlp_projections: 2, vocab: 1024, padded_vocab: None, causal: CausalConvention::Half,
    ///     attention_output_gate: false };
    /// assert_eq!(d.validate().unwrap_err().to_string(), "heads (8) must be a positive multiple of kv_heads (3)");
    /// d.kv_heads = 4;
    /// d.validate()?;
    /// # Ok::<(), thd::Error>(())
    /// ```
    pub fn validate(&self) -> Result<()> {
        for (field, v) in [
            ("layers", self.layers),
            ("hidden", self.hidden),
            ("heads", self.heads),
            ("kv_heads", self.kv_heads),
            ("head_dim", self.head_dim),
            ("ffn", self.ffn),
            ("vocab", self.vocab),
        ] {
            if v == 0 {
                return Err(Error::ModelDimZero { field });
            }
        }
        if !matches!(self.mlp_projections, 2 | 3) {
            return Err(Error::MlpProjections { got: self.mlp_projections });
        }
        if !self.heads.is_multiple_of(self.kv_heads) {
            return Err(Error::HeadsNotMultiple {
                heads: self.heads as usize,
                kv_heads: self.kv_heads as usize,
            });
        }
        // kv_heads divides heads, so K·d ≤ H·d: one product to check.
        if self.heads.checked_mul(self.head_dim).is_none() {
            return Err(Error::ModelDimOverflow {
                what: "heads·head_dim",
                left: self.heads,
                right: self.head_dim,
            });
        }
        if let Some(p) = self.padded_vocab
            && p < self.vocab
        {
            return Err(Error::PaddedVocabTooSmall { vocab: self.vocab, padded_vocab: p });
        }
        Ok(())
    }

    /// Query projection width `q = H·d` (saturating: [`ModelDims::validate`] rejects dims whose
    /// product does not fit, and every formula validates first).
    ///
    /// # Example
    /// ```
    /// # use thd::metrics::{CausalConvention, ModelDims};
    /// # let d = ModelDims { layers: 2, hidden: 128, heads: 8, kv_heads: 4, head_dim: 16, ffn: 256,
    /// #     mlp_projections: 2, vocab: 1024, padded_vocab: None, causal: CausalConvention::Half,
    /// #     attention_output_gate: false };
    /// assert_eq!(d.query_width(), 128);
    /// ```
    pub fn query_width(&self) -> u64 {
        self.heads.saturating_mul(self.head_dim)
    }

    /// Key (and value) projection width `k = K·d` (saturating, as [`ModelDims::query_width`]).
    ///
    /// # Example
    /// ```
    /// # use thd::metrics::{CausalConvention, ModelDims};
    /// # let d = ModelDims { layers: 2, hidden: 128, heads: 8, kv_heads: 4, head_dim: 16, ffn: 256,
    /// #     mlp_projections: 2, vocab: 1024, padded_vocab: None, causal: CausalConvention::Half,
    /// #     attention_output_gate: false };
    /// assert_eq!(d.kv_width(), 64);
    /// ```
    pub fn kv_width(&self) -> u64 {
        self.kv_heads.saturating_mul(self.head_dim)
    }

    /// `Vp`: the padded vocabulary, or `V` when none is given.
    ///
    /// # Example
    /// ```
    /// # use thd::metrics::{CausalConvention, ModelDims};
    /// # let mut d = ModelDims { layers: 6, hidden: 320, heads: 20, kv_heads: 20, head_dim: 16, ffn: 1280,
    /// #     mlp_projections: 2, vocab: 33, padded_vocab: None, causal: CausalConvention::None,
    /// #     attention_output_gate: false };
    /// assert_eq!(d.padded_vocab(), 33);
    /// d.padded_vocab = Some(64);
    /// assert_eq!(d.padded_vocab(), 64);
    /// ```
    pub fn padded_vocab(&self) -> u64 {
        self.padded_vocab.unwrap_or(self.vocab)
    }
}

/// Megatron's padded vocabulary: `V` rounded up to a multiple of
/// `make_vocab_size_divisible_by · tp`.
///
/// ```text
/// m = divisible_by · tp;   Vp = ⌈V / m⌉ · m
/// ```
///
/// # Errors
/// [`Error::ZeroCount`] if `divisible_by` or `tp` is 0.
///
/// # Example
/// ```
/// use thd::metrics::megatron_padded_vocab;
/// assert_eq!(megatron_padded_vocab(128256, 128, 1)?, 128256);
/// assert_eq!(megatron_padded_vocab(32000, 128, 8)?, 32768);
/// assert_eq!(megatron_padded_vocab(1000, 128, 1)?, 1024);
/// # Ok::<(), thd::Error>(())
/// ```
pub fn megatron_padded_vocab(vocab: u64, divisible_by: u64, tp: u64) -> Result<u64> {
    if divisible_by == 0 {
        return Err(Error::ZeroCount { quantity: "make_vocab_size_divisible_by" });
    }
    if tp == 0 {
        return Err(Error::ZeroCount { quantity: "tensor_model_parallel_size" });
    }
    let m = divisible_by * tp;
    Ok(vocab.div_ceil(m) * m)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tiny() -> ModelDims {
        ModelDims {
            layers: 1,
            hidden: 4,
            heads: 2,
            kv_heads: 2,
            head_dim: 2,
            ffn: 8,
            mlp_projections: 2,
            vocab: 10,
            padded_vocab: None,
            causal: CausalConvention::None,
            attention_output_gate: false,
        }
    }

    #[test]
    fn model_dims_reject_each_bad_field_by_name() {
        let mut d = tiny();
        d.ffn = 0;
        assert_eq!(d.validate().unwrap_err(), Error::ModelDimZero { field: "ffn" });
        let mut d = tiny();
        d.mlp_projections = 4;
        assert_eq!(
            d.validate().unwrap_err().to_string(),
            "model dims: mlp_projections must be 2 or 3, got 4"
        );
        let mut d = tiny();
        d.heads = 1 << 32;
        d.head_dim = 1 << 32;
        assert_eq!(
            d.validate().unwrap_err().to_string(),
            "model dims: heads·head_dim = 4294967296 · 4294967296 does not fit u64"
        );
        let mut d = tiny();
        d.padded_vocab = Some(8);
        assert_eq!(
            d.validate().unwrap_err(),
            Error::PaddedVocabTooSmall { vocab: 10, padded_vocab: 8 }
        );
        assert!(tiny().validate().is_ok());
    }

    #[test]
    fn causal_conventions_order_half_le_triangle_le_none() {
        for s in [0u64, 1, 2, 7, 1000] {
            let half = CausalConvention::Half.pairs_x2(s);
            let tri = CausalConvention::ExactTriangle.pairs_x2(s);
            let none = CausalConvention::None.pairs_x2(s);
            assert!(half <= tri && tri <= none, "s={s}");
        }
    }
}
