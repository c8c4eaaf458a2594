//! Variable-length (THD) attention directly on packed `[T, heads, head_dim]` tensors.
//!
//! Each segment attends only to its own keys: the kernel walks `cu_seqlens` segment by segment,
//! the way varlen kernels address memory, and never builds a `T × T` document mask.

use crate::{CuSeqlens, Error, Float, Result};

/// Head layout of an attention call.
///
/// `heads` query heads share `kv_heads` key/value heads: MHA when equal, GQA when `heads` is a
/// larger multiple, MQA when `kv_heads == 1`.
///
/// # Example
/// ```
/// # use thd::AttnShape;
/// let gqa = AttnShape { heads: 8, kv_heads: 2, head_dim: 64 };
/// assert_eq!(gqa.group_size()?, 4);
/// # Ok::<(), thd::Error>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AttnShape {
    /// Query heads `H`.
    pub heads: usize,
    /// Key/value heads `KV`; `heads` must be a positive multiple of it.
    pub kv_heads: usize,
    /// Head dimension `D` (any positive value, odd ones too).
    pub head_dim: usize,
}

impl AttnShape {
    /// Query heads per key/value head (`heads / kv_heads`), after checking the shape.
    ///
    /// # Errors
    /// [`Error::HeadsNotMultiple`] unless `heads` is a positive multiple of `kv_heads`;
    /// [`Error::ZeroHeadDim`] if `head_dim == 0`.
    ///
    /// # Example
    /// ```
    /// # use thd::{AttnShape, Error};
    /// let bad = AttnShape { heads: 6, kv_heads: 4, head_dim: 8 };
    /// assert_eq!(bad.group_size(), Err(Error::HeadsNotMultiple { heads: 6, kv_heads: 4 }));
    /// ```
    pub fn group_size(&self) -> Result<usize> {
        let Self { heads, kv_heads, head_dim } = *self;
        if heads == 0 || kv_heads == 0 || !heads.is_multiple_of(kv_heads) {
            return Err(Error::HeadsNotMultiple { heads, kv_heads });
        }
        if head_dim == 0 {
            return Err(Error::ZeroHeadDim);
        }
        Ok(heads / kv_heads)
    }
}

/// Options of an attention call; `AttnOptions { causal: true, ..Default::default() }`.
///
/// # Example
/// ```
/// # use thd::AttnOptions;
/// let opts = AttnOptions { causal: true, ..Default::default() };
/// assert_eq!(opts.scale, None); // 1/sqrt(head_dim)
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct AttnOptions {
    /// Mask keys after the query (aligned bottom-right when query and key lengths differ).
    pub causal: bool,
    /// Softmax scale applied to `q·k`; `None` = `1/sqrt(head_dim)`.
    pub scale: Option<f64>,
}

/// Attention over a packed (THD) batch, segment by segment.
///
/// **Input:** `q: [Tq, heads, head_dim]`, `k, v: [Tk, kv_heads, head_dim]`, row-major.
/// Segment `i`'s queries are the rows `cu_q.segment(i)` of `q`, its keys and values the rows
/// `cu_k.segment(i)` of `k` and `v` (both offsets hold the same number of segments `B`).
/// **Output:** `[Tq, heads, head_dim]`.
///
/// ```text
/// out[t, h] = Σ_j softmax_j(scale · q[t, h] · k[j, h / g]) · v[j, h / g]     g = heads / kv_heads
/// causal:   query i of a segment sees key j iff j <= i + sk - sq   (bottom-right aligned)
/// ```
///
/// A query row that sees no key (a zero-length key segment, or causal with `sq > sk`) outputs
/// 0, never NaN; so do rows of `q` beyond `cu_q.total()`. Zero-length segments are fine.
///
/// # Errors
/// [`Error::HeadsNotMultiple`] / [`Error::ZeroHeadDim`] for a bad [`AttnShape`];
/// [`Error::RaggedTensor`] if a tensor is not a whole number of token rows;
/// [`Error::ShapeMismatch`] if `v` and `k` differ in size;
/// [`Error::AttnSegmentCountMismatch`] if `cu_q` and `cu_k` hold different segment counts;
/// [`Error::TokensBeyondTensor`] if an offset addresses rows the tensor does not have.
///
/// # Example
/// ```
/// use thd::{AttnOptions, AttnShape, CuSeqlens, varlen_attention};
/// // Two segments of lengths 2 and 1, one head of dimension 1.
/// let cu = CuSeqlens::try_from(vec![0, 2, 3])?;
/// let shape = AttnShape { heads: 1, kv_heads: 1, head_dim: 1 };
/// let (q, k, v) = ([0.0f64; 3], [0.0f64; 3], [1.0, 3.0, 10.0]);
/// let causal = AttnOptions { causal: true, ..Default::default() };
/// let out = varlen_attention(&q, &k, &v, &cu, &cu, shape, &causal)?;
/// // Equal scores: each query averages the values it may see, within its own segment.
/// assert_eq!(out, vec![1.0, 2.0, 10.0]);
/// # Ok::<(), thd::Error>(())
/// ```
pub fn varlen_attention<F: Float>(
    q: &[F],
    k: &[F],
    v: &[F],
    cu_q: &CuSeqlens,
    cu_k: &CuSeqlens,
    shape: AttnShape,
    opts: &AttnOptions,
) -> Result<Vec<F>> {
    let group = shape.group_size()?;
    let d = shape.head_dim;
    let q_row = shape.heads * d;
    let kv_row = shape.kv_heads * d;
    let tq = rows("q", q.len(), q_row)?;
    let tk = rows("k", k.len(), kv_row)?;
    if v.len() != k.len() {
        return Err(Error::ShapeMismatch {
            key: "v",
            len: v.len(),
            expected: k.len(),
            shape: format!("[{tk}, {}, {d}], like k", shape.kv_heads),
        });
    }
    if cu_q.num_segments() != cu_k.num_segments() {
        return Err(Error::AttnSegmentCountMismatch {
            q: cu_q.num_segments(),
            k: cu_k.num_segments(),
        });
    }
    if cu_q.total() > tq {
        return Err(Error::TokensBeyondTensor { key: "q", needed: cu_q.total(), tokens: tq });
    }
    if cu_k.total() > tk {
        return Err(Error::TokensBeyondTensor { key: "k", needed: cu_k.total(), tokens: tk });
    }
    let scale = opts.scale.unwrap_or(1.0 / (d as f64).sqrt());

    let mut out = vec![F::ZERO; q.len()];
    let mut scores = Vec::new();
    for (rq, rk) in cu_q.segments().zip(cu_k.segments()) {
        let (sq, sk) = (rq.len(), rk.len());
        for i in 0..sq {
            // Keys visible to query i: all, or bottom-right aligned causal prefix.
            let visible = if opts.causal { (i + sk).saturating_sub(sq - 1).min(sk) } else { sk };
            if visible == 0 {
                continue;
            }
            for h in 0..shape.heads {
                let g = h / group;
                let qv = &q[(rq.start + i) * q_row + h * d..][..d];
                scores.clear();
                let mut mx = F::NEG_INFINITY;
                for j in 0..visible {
                    let kv = &k[(rk.start + j) * kv_row + g * d..][..d];
                    let s = F::from_f64(scale) * qv.iter().zip(kv).map(|(&a, &b)| a * b).sum();
                    mx = mx.max(s);
                    scores.push(s);
                }
                let mut denom = F::ZERO;
                for s in scores.iter_mut() {
                    *s = (*s - mx).exp();
                    denom += *s;
                }
                let o = &mut out[(rq.start + i) * q_row + h * d..][..d];
                for (j, &p) in scores.iter().enumerate() {
                    let vv = &v[(rk.start + j) * kv_row + g * d..][..d];
                    for (oe, &ve) in o.iter_mut().zip(vv) {
                        *oe += p * ve;
                    }
                }
                for oe in o.iter_mut() {
                    *oe = *oe / denom;
                }
            }
        }
    }
    Ok(out)
}

/// Number of token rows of `len` elements in rows of `row` elements, or [`Error::RaggedTensor`].
fn rows(key: &'static str, len: usize, row: usize) -> Result<usize> {
    if !len.is_multiple_of(row) {
        return Err(Error::RaggedTensor { key, len, row });
    }
    Ok(len / row)
}
