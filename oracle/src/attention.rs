//! BSHD-equivalent attention: the truth that THD (varlen) attention is checked against.
//!
//! The computation is the one flash-attention's tests use as their reference (`attention_ref`):
//! scatter every sequence into a zero-padded `[B, S_max, ·, D]` batch, build a key-padding mask
//! (plus the causal mask), take `softmax(QKᵀ·scale + mask)·V`, and gather the real rows back.
//! Nothing here knows about `cu_seqlens` kernels: offsets are a running sum of the lengths.
//!
//! ```text
//! off[0] = 0, off[b+1] = off[b] + len[b]                      (per side, q and k)
//! visible(b, i, j) = j < sk_b  and  (not causal  or  j <= i + sk_b - sq_b)
//! out[off_q[b] + i, h] = Σ_j softmax_j(scale · q[b,i,h]·k[b,j,h/G] + (0 if visible else -inf)) · v[b,j,h/G]
//! out[...] = 0 for rows with no visible key, and for rows past Σ len_q          (G = H / KV)
//! ```
//!
//! Memory stays bounded: the batch is processed one batch row, one head and a block of query rows
//! at a time, so the largest temporary holds [`SCORE_BUDGET`] scores, never `[B, H, S, S]`. Every
//! block spans all `S_max_k` padded keys under the key-padding mask. Query-padding rows
//! (`i >= sq`) are not computed (`attention_ref` zeroes them and the gather drops them), so the
//! query side is read straight from the packed rows instead of a padded copy.

use candle_core::{D, DType, Device, Result, Tensor};

use crate::error::Error;

/// Options of [`varlen_attention`].
///
/// # Example
/// ```
/// let spec = oracle::AttnSpec { causal: true, ..Default::default() };
/// assert_eq!(spec.scale, None); // 1/sqrt(head_dim)
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct AttnSpec {
    /// Causal mask, aligned bottom-right when a sequence's q and k lengths differ.
    pub causal: bool,
    /// Softmax scale; `None` = `1/sqrt(head_dim)`.
    pub scale: Option<f64>,
}

/// Upper bound on the scores (`query rows × S_max_k`) materialised at once: 2²⁰ scores, 8 MiB in
/// f64. Small enough that the allocator reuses freed blocks instead of mapping fresh pages for
/// every temporary (on the reference batch: 3x fewer page faults than 16 MiB blocks, 40x fewer
/// than whole batch rows), large enough for efficient matmuls.
pub const SCORE_BUDGET: usize = 1 << 20;

/// BSHD-equivalent attention over THD (packed) inputs.
///
/// **Input:** `q: [Tq, H, D]`, `k, v: [Tk, KV, D]`, one float dtype (bf16, f16, f32, f64);
/// `seqlens_q`, `seqlens_k`: per-sequence lengths (the same count `B`; `Σ ≤ Tq`, `Σ ≤ Tk`;
/// zeros allowed). **Output:** `[Tq, H, D]` in the input dtype.
///
/// Computes in the input dtype: an f32 call is the "naive same-dtype reference" of the
/// FlashAttention tolerance rule, an f64 call is the truth. Each sequence's keys and values are
/// scattered into a zero-padded `[B, S_max_k, KV, D]` batch with a key-padding mask; for each
/// batch row the real queries' scores are `QKᵀ·scale + mask` (`-inf` where masked), softmax over
/// all `S_max_k` keys, times `V`, gathered back in sequence order.
///
/// - Causal is aligned bottom-right: query `i` sees key `j` iff `j <= i + sk - sq`.
/// - A query row that sees no key (causal with `sq > sk`, or `sk == 0`) outputs 0, never NaN.
/// - Rows past `Σ seqlens_q` output 0.
/// - GQA/MQA: `H % KV == 0`; query head `h` uses kv head `h / (H / KV)`.
///
/// # Errors
/// An [`Error`] (wrapped in [`candle_core::Error`]) for wrong ranks, dtypes,
/// `H % KV != 0`, a head dimension of 0 or mismatched between q and k/v, length lists of
/// different counts, or lengths that sum past the tensor.
///
/// # Example
/// ```
/// use candle_core::{Device, Tensor};
/// use oracle::{AttnSpec, varlen_attention};
/// let dev = Device::Cpu;
/// // Two sequences of lengths 1 and 2, one head, head_dim 1.
/// let q = Tensor::new(&[[[1.0f64]], [[0.0]], [[0.0]]], &dev)?;
/// let k = Tensor::new(&[[[1.0f64]], [[5.0]], [[5.0]]], &dev)?;
/// let v = Tensor::new(&[[[7.0f64]], [[2.0]], [[4.0]]], &dev)?;
/// let out = varlen_attention(&q, &k, &v, &[1, 2], &[1, 2], &AttnSpec::default())?;
/// // Sequence 0 has a single key: its output is that key's value row.
/// // Sequence 1's queries are 0, so its scores are uniform: the mean of its values.
/// assert_eq!(out.flatten_all()?.to_vec1::<f64>()?, vec![7.0, 3.0, 3.0]);
/// # Ok::<(), candle_core::Error>(())
/// ```
pub fn varlen_attention(
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    seqlens_q: &[u32],
    seqlens_k: &[u32],
    spec: &AttnSpec,
) -> Result<Tensor> {
    let shape = check_inputs(q, k, v, seqlens_q, seqlens_k)?;
    let Shape { tokens_q, heads, head_dim } = shape;
    let dtype = q.dtype();
    let dev = q.device();
    let scale = spec.scale.unwrap_or(1.0 / (head_dim as f64).sqrt());

    let max_q = seqlens_q.iter().copied().max().unwrap_or(0) as usize;
    let max_k = seqlens_k.iter().copied().max().unwrap_or(0) as usize;
    if max_q == 0 || max_k == 0 {
        // No query, or no key anywhere: every row is empty or fully masked.
        return Tensor::zeros((tokens_q, heads, head_dim), dtype, dev);
    }

    // 1. Scatter keys and values into the padded BSHD batch. Queries need no padded copy: batch
    //    row b's real query rows are q[off_q[b] .. off_q[b] + sq], and only those are computed.
    let k_pad = pad_batch(k, seqlens_k, max_k)?; // [B, S_max_k, KV, D]
    let v_pad = pad_batch(v, seqlens_k, max_k)?;

    // 2. Attention, one batch row at a time.
    let mut rows = Vec::with_capacity(seqlens_q.len() + 1);
    let mut off_q = 0usize;
    for (b, (&sq, &sk)) in seqlens_q.iter().zip(seqlens_k).enumerate() {
        let sq = sq as usize;
        if sq == 0 {
            continue;
        }
        let mask = RowMask::new(sq, sk as usize, max_k, spec.causal);
        let q_b = q.narrow(0, off_q, sq)?;
        let out = attend_row(&q_b, &k_pad.get(b)?, &v_pad.get(b)?, &mask, scale)?;
        // 3. Gather: the real query rows of this sequence, in order.
        rows.push(out);
        off_q += sq;
    }
    let real: usize = seqlens_q.iter().map(|&s| s as usize).sum();
    if real < tokens_q {
        rows.push(Tensor::zeros((tokens_q - real, heads, head_dim), dtype, dev)?);
    }
    Tensor::cat(&rows, 0)
}

/// The log-sum-exp of every query row's scaled scores over the keys it sees, in f64: what a
/// flash kernel returns beside its output (`softmax_lse`) and what a ring or zigzag CP
/// attention merges its partial results with.
///
/// ```text
/// lse[off_q[b] + i, h] = ln Σ_{j visible} exp(scale · q[b,i,h]·k[b,j,h/G])
/// lse = -inf for a row that sees no key and for rows past Σ len_q
/// ```
///
/// **Input:** as [`varlen_attention`] (`v` is not needed). **Output:** `Tq·H` values, row-major
/// `[Tq, H]`, computed in f64 whatever the input dtype (one plain loop per score).
///
/// # Errors
/// As [`varlen_attention`].
///
/// # Example
/// ```
/// use candle_core::{Device, Tensor};
/// use oracle::{AttnSpec, attention::varlen_lse};
/// let dev = Device::Cpu;
/// let q = Tensor::new(&[[[0.0f64]], [[0.0]]], &dev)?;
/// let k = Tensor::new(&[[[1.0f64]], [[2.0]]], &dev)?;
/// // One sequence of 2, causal: query 0 sees key 0, query 1 both keys (scores 0).
/// let lse = varlen_lse(&q, &k, &k, &[2], &[2], &AttnSpec { causal: true, ..Default::default() })?;
/// assert_eq!(lse, vec![0.0, 2f64.ln()]);
/// # Ok::<(), candle_core::Error>(())
/// ```
pub fn varlen_lse(
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    seqlens_q: &[u32],
    seqlens_k: &[u32],
    spec: &AttnSpec,
) -> Result<Vec<f64>> {
    let Shape { tokens_q, heads, head_dim } = check_inputs(q, k, v, seqlens_q, seqlens_k)?;
    let scale = spec.scale.unwrap_or(1.0 / (head_dim as f64).sqrt());
    let kv_heads = k.dims()[1];
    let group = heads / kv_heads;
    let qf = q.to_dtype(DType::F64)?.flatten_all()?.to_vec1::<f64>()?;
    let kf = k.to_dtype(DType::F64)?.flatten_all()?.to_vec1::<f64>()?;
    let mut out = vec![f64::NEG_INFINITY; tokens_q * heads];
    let (mut off_q, mut off_k) = (0usize, 0usize);
    for (&sq, &sk) in seqlens_q.iter().zip(seqlens_k) {
        let (sq, sk) = (sq as usize, sk as usize);
        let mask = RowMask::new(sq, sk, sk, spec.causal);
        for i in 0..sq {
            for h in 0..heads {
                let qrow = &qf[((off_q + i) * heads + h) * head_dim..][..head_dim];
                let scores: Vec<f64> = (0..sk)
                    .filter(|&j| mask.visible(i, j))
                    .map(|j| {
                        let krow =
                            &kf[((off_k + j) * kv_heads + h / group) * head_dim..][..head_dim];
                        scale * qrow.iter().zip(krow).map(|(a, b)| a * b).sum::<f64>()
                    })
                    .collect();
                let Some(top) = scores.iter().copied().reduce(f64::max) else { continue };
                let sum: f64 = scores.iter().map(|s| (s - top).exp()).sum();
                out[(off_q + i) * heads + h] = top + sum.ln();
            }
        }
        off_q += sq;
        off_k += sk;
    }
    Ok(out)
}

/// Self-attention computed the way a context-parallel ring computes it, in the inputs' dtype:
/// each sequence's keys are cut into `pieces` (key `j` of sequence `b` goes to piece
/// `piece_of(b, j)`), the softmax is taken over each piece alone (its output and log-sum-exp),
/// and the partial results are merged one piece after another by their log-sum-exp:
///
/// ```text
/// lse = max(lse_a, lse_c) + ln(exp(lse_a − max) + exp(lse_c − max))
/// out = out_a · exp(lse_a − lse) + out_c · exp(lse_c − lse)
/// ```
///
/// Every step rounds in the dtype. It is the same-dtype reference of the FlashAttention rule for
/// a CP attention (`thdcheck fuzz attention --cp-size N`): the obvious computation of what a
/// ring merges, as [`varlen_attention`] in the dtype is for one kernel. Rows past `Σ seqlens`
/// output 0.
///
/// # Errors
/// As [`varlen_attention`], with `seqlens` for both queries and keys.
///
/// # Example
/// ```
/// use candle_core::{Device, Tensor};
/// use oracle::{AttnSpec, attention::varlen_attention_merged, varlen_attention};
/// let dev = Device::Cpu;
/// let x = Tensor::new(&[[[0.5f64]], [[1.0]], [[-1.0]], [[2.0]]], &dev)?;
/// let spec = AttnSpec { causal: true, ..Default::default() };
/// // Two pieces of two keys each: in f64 the merge gives the whole softmax back.
/// let merged = varlen_attention_merged(&x, &x, &x, &[4], &spec, 2, &|_, j| j / 2)?;
/// let whole = varlen_attention(&x, &x, &x, &[4], &[4], &spec)?;
/// let d = (merged - whole)?.abs()?.max_all()?.to_scalar::<f64>()?;
/// assert!(d < 1e-15);
/// # Ok::<(), candle_core::Error>(())
/// ```
pub fn varlen_attention_merged(
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    seqlens: &[u32],
    spec: &AttnSpec,
    pieces: usize,
    piece_of: &dyn Fn(usize, usize) -> usize,
) -> Result<Tensor> {
    let Shape { tokens_q, heads, head_dim } = check_inputs(q, k, v, seqlens, seqlens)?;
    let dtype = q.dtype();
    let dev = q.device();
    let scale = spec.scale.unwrap_or(1.0 / (head_dim as f64).sqrt());
    let group = heads / k.dims()[1];
    // A masked score: finite, so that a piece a row sees nothing of gives weight exp(−big) = 0
    // in the merge instead of 0/0 (f16 tops out at 65504).
    let hidden = if dtype == DType::F16 { -6.0e4 } else { -1.0e30 };
    let mut rows = Vec::with_capacity(seqlens.len() + 1);
    let mut off = 0usize;
    for (b, &s) in seqlens.iter().enumerate() {
        let s = s as usize;
        if s == 0 {
            continue;
        }
        let mask = RowMask::new(s, s, s, spec.causal);
        let mut heads_out = Vec::with_capacity(heads);
        for h in 0..heads {
            let q_h = q.narrow(0, off, s)?.narrow(1, h, 1)?.squeeze(1)?.affine(scale, 0.0)?;
            let k_h = k.narrow(0, off, s)?.narrow(1, h / group, 1)?.squeeze(1)?;
            let v_h = v.narrow(0, off, s)?.narrow(1, h / group, 1)?.squeeze(1)?;
            let scores = q_h.matmul(&k_h.t()?)?; // [s, s]
            let mut acc: Option<(Tensor, Tensor)> = None;
            for c in 0..pieces {
                if !(0..s).any(|j| piece_of(b, j) == c) {
                    continue;
                }
                let bias: Vec<f64> = (0..s)
                    .flat_map(|i| (0..s).map(move |j| (i, j)))
                    .map(
                        |(i, j)| {
                            if mask.visible(i, j) && piece_of(b, j) == c { 0.0 } else { hidden }
                        },
                    )
                    .collect();
                let bias = Tensor::from_vec(bias, (s, s), dev)?.to_dtype(dtype)?;
                let x = (&scores + bias)?;
                let m = x.max_keepdim(D::Minus1)?;
                let e = x.broadcast_sub(&m)?.exp()?;
                let l = e.sum_keepdim(D::Minus1)?;
                let out = e.matmul(&v_h)?.broadcast_div(&l)?; // [s, D]
                let lse = (m + l.log()?)?; // [s, 1]
                acc = Some(match acc {
                    None => (out, lse),
                    Some((out_a, lse_a)) => {
                        let top = lse_a.maximum(&lse)?;
                        let total = (top.clone()
                            + ((&lse_a - &top)?.exp()? + (&lse - &top)?.exp()?)?.log()?)?;
                        let wa = (&lse_a - &total)?.exp()?;
                        let wc = (&lse - &total)?.exp()?;
                        ((out_a.broadcast_mul(&wa)? + out.broadcast_mul(&wc)?)?, total)
                    }
                });
            }
            let out = match acc {
                Some((out, _)) => out,
                None => Tensor::zeros((s, head_dim), dtype, dev)?,
            };
            heads_out.push(out);
        }
        rows.push(Tensor::stack(&heads_out, 1)?); // [s, H, D]
        off += s;
    }
    if off < tokens_q {
        rows.push(Tensor::zeros((tokens_q - off, heads, head_dim), dtype, dev)?);
    }
    Tensor::cat(&rows, 0)
}

/// Sizes read from the checked inputs.
struct Shape {
    tokens_q: usize,
    heads: usize,
    head_dim: usize,
}

fn check_inputs(
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    seqlens_q: &[u32],
    seqlens_k: &[u32],
) -> Result<Shape> {
    for (name, t) in [("q", q), ("k", k), ("v", v)] {
        if t.rank() != 3 {
            let layout = if name == "q" { "[Tq, H, D]" } else { "[Tk, KV, D]" };
            let shape = t.dims().to_vec();
            return Err(Error::Rank { tensor: name, expected: 3, layout, shape }.into());
        }
        if !t.dtype().is_float() {
            return Err(Error::NotFloat { tensor: name, dtype: format!("{:?}", t.dtype()) }.into());
        }
    }
    if q.dtype() != k.dtype() || q.dtype() != v.dtype() {
        let [q, k, v] = [q, k, v].map(|t| format!("{:?}", t.dtype()));
        return Err(Error::DTypeMismatch { q, k, v }.into());
    }
    if k.dims() != v.dims() {
        return Err(Error::KvShapeMismatch { k: k.dims().to_vec(), v: v.dims().to_vec() }.into());
    }
    let (tokens_q, heads, head_dim) = q.dims3()?;
    let (tokens_k, kv_heads, head_dim_k) = k.dims3()?;
    if head_dim != head_dim_k {
        return Err(Error::HeadDimMismatch { q: head_dim, k: head_dim_k }.into());
    }
    if head_dim == 0 {
        return Err(Error::ZeroHeadDim.into());
    }
    if kv_heads == 0 || heads % kv_heads != 0 {
        return Err(Error::HeadsNotMultiple { heads, kv_heads }.into());
    }
    if seqlens_q.len() != seqlens_k.len() {
        return Err(Error::SeqCountMismatch { q: seqlens_q.len(), k: seqlens_k.len() }.into());
    }
    for (lengths, lens, tensor, tokens) in
        [("seqlens_q", seqlens_q, "q", tokens_q), ("seqlens_k", seqlens_k, "k", tokens_k)]
    {
        let sum: u64 = lens.iter().map(|&s| u64::from(s)).sum();
        if sum > tokens as u64 {
            return Err(Error::TooManyTokens { lengths, sum, tensor, tokens }.into());
        }
    }
    Ok(Shape { tokens_q, heads, head_dim })
}

/// `[T, KV, D]` → zero-padded `[B, s_max, KV, D]`: sequence `b` occupies rows `0..len[b]` of
/// batch row `b`. Offsets are the running sum of the lengths.
fn pad_batch(x: &Tensor, lens: &[u32], s_max: usize) -> Result<Tensor> {
    let (_, heads, dim) = x.dims3()?;
    let mut start = 0usize;
    let mut rows = Vec::with_capacity(lens.len());
    for &len in lens {
        let len = len as usize;
        let row = if len == 0 {
            Tensor::zeros((s_max, heads, dim), x.dtype(), x.device())?
        } else {
            x.narrow(0, start, len)?.pad_with_zeros(0, 0, s_max - len)?
        };
        rows.push(row);
        start += len;
    }
    Tensor::stack(&rows, 0)
}

/// The mask of one padded batch row: which (real query, padded key) pairs are visible.
struct RowMask {
    /// Real query and key lengths of this sequence.
    sq: usize,
    sk: usize,
    /// Padded key length of the batch, `S_max_k`.
    max_k: usize,
    causal: bool,
}

impl RowMask {
    fn new(sq: usize, sk: usize, max_k: usize, causal: bool) -> Self {
        Self { sq, sk, max_k, causal }
    }

    /// Key `j` is visible from query `i`: a real key, and (causal) not after the query,
    /// aligned bottom-right: `j <= i + sk - sq`, i.e. `j + sq <= i + sk`.
    fn visible(&self, i: usize, j: usize) -> bool {
        j < self.sk && (!self.causal || j + self.sq <= i + self.sk)
    }

    /// Additive mask `[sq, max_k]` of the real query rows: 0 where visible, `-inf` elsewhere.
    fn additive(&self, dtype: DType, dev: &Device) -> Result<Tensor> {
        let mut bias = Vec::with_capacity(self.sq * self.max_k);
        for i in 0..self.sq {
            bias.extend(
                (0..self.max_k).map(|j| if self.visible(i, j) { 0.0 } else { f64::NEG_INFINITY }),
            );
        }
        Tensor::from_vec(bias, (self.sq, self.max_k), dev)?.to_dtype(dtype)
    }

    /// Whether every real query row sees at least one key (query 0 sees the fewest).
    fn every_row_sees_a_key(&self) -> bool {
        (0..self.max_k).any(|j| self.visible(0, j))
    }

    /// `[sq, 1, 1]` as u8: 1 where a real query row sees at least one key.
    fn any_visible(&self, dev: &Device) -> Result<Tensor> {
        let rows: Vec<u8> =
            (0..self.sq).map(|i| u8::from((0..self.max_k).any(|j| self.visible(i, j)))).collect();
        Tensor::from_vec(rows, (self.sq, 1, 1), dev)
    }
}

/// One padded batch row: the real query rows `q: [sq, H, D]`, the padded keys and values
/// `k, v: [S_max_k, KV, D]` → `[sq, H, D]`.
fn attend_row(q: &Tensor, k: &Tensor, v: &Tensor, mask: &RowMask, scale: f64) -> Result<Tensor> {
    let (_, heads, _) = q.dims3()?;
    let (_, kv_heads, _) = k.dims3()?;
    let dev = q.device();
    let group = heads / kv_heads; // query head h uses kv head h / group
    let q = q.affine(scale, 0.0)?.transpose(0, 1)?.contiguous()?; // [H, sq, D]
    let k = k.transpose(0, 1)?.contiguous()?; // [KV, S_max_k, D]
    let v = v.transpose(0, 1)?.contiguous()?;
    let bias = mask.additive(q.dtype(), dev)?; // [sq, S_max_k]

    let block = (SCORE_BUDGET / mask.max_k).clamp(1, mask.sq);
    let mut heads_out = Vec::with_capacity(heads);
    for h in 0..heads {
        let (q_h, k_h, v_h) = (q.get(h)?, k.get(h / group)?, v.get(h / group)?);
        let k_t = k_h.t()?; // [D, S_max_k]
        let mut blocks = Vec::with_capacity(mask.sq.div_ceil(block));
        for r0 in (0..mask.sq).step_by(block) {
            let n = block.min(mask.sq - r0);
            let scores = q_h.narrow(0, r0, n)?.matmul(&k_t)?; // [n, S_max_k], q·scale·kᵀ
            let probs = softmax_last_dim(&(scores + bias.narrow(0, r0, n)?)?)?;
            blocks.push(probs.matmul(&v_h)?); // [n, D]
        }
        heads_out.push(Tensor::cat(&blocks, 0)?);
    }
    let out = Tensor::stack(&heads_out, 1)?; // [sq, H, D]
    // A row that sees no key has softmax 0/0 = NaN: its output is defined as 0.
    if mask.every_row_sees_a_key() {
        return Ok(out);
    }
    let seen = mask.any_visible(dev)?.broadcast_as(out.shape())?;
    seen.where_cond(&out, &Tensor::zeros(out.shape(), out.dtype(), dev)?)
}

/// `softmax(x)` over the last dimension: `exp(x - max) / Σ exp(x - max)`.
fn softmax_last_dim(x: &Tensor) -> Result<Tensor> {
    let max = x.max_keepdim(D::Minus1)?;
    let e = x.broadcast_sub(&max)?.exp()?;
    let sum = e.sum_keepdim(D::Minus1)?;
    e.broadcast_div(&sum)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The merged reference in f64 is the truth; in f32 it is off it (every step rounds) by a
    /// few units in the last place at most.
    #[test]
    fn merged_attention_rounds_at_every_merge_and_only_there() {
        let dev = Device::Cpu;
        let vals: Vec<f64> = (0..24).map(|i| ((i * 37 % 11) as f64 - 5.0) / 3.0).collect();
        let x = Tensor::from_vec(vals, (12, 1, 2), &dev).unwrap();
        let spec = AttnSpec { causal: true, ..Default::default() };
        let lens = [12u32];
        let piece = |_: usize, j: usize| j / 3;
        let exact = varlen_attention(&x, &x, &x, &lens, &lens, &spec).unwrap();
        let merged64 = varlen_attention_merged(&x, &x, &x, &lens, &spec, 4, &piece).unwrap();
        let gap = |a: &Tensor| {
            (a.to_dtype(DType::F64).unwrap() - &exact)
                .unwrap()
                .abs()
                .unwrap()
                .max_all()
                .unwrap()
                .to_scalar::<f64>()
                .unwrap()
        };
        assert!(gap(&merged64) < 1e-14, "{}", gap(&merged64));
        let x32 = x.to_dtype(DType::F32).unwrap();
        let merged32 = varlen_attention_merged(&x32, &x32, &x32, &lens, &spec, 4, &piece).unwrap();
        let one32 = varlen_attention(&x32, &x32, &x32, &lens, &lens, &spec).unwrap();
        let (m, o) = (gap(&merged32), gap(&one32));
        assert!(m > 0.0 && m < 64.0 * f64::from(f32::EPSILON), "merged {m}, one pass {o}");
    }

    #[test]
    fn row_mask_is_bottom_right_aligned() {
        // sq = 2, sk = 4: query 0 sees keys 0..=2, query 1 sees keys 0..=3.
        let m = RowMask::new(2, 4, 5, true);
        let seen: Vec<Vec<bool>> =
            (0..2).map(|i| (0..5).map(|j| m.visible(i, j)).collect()).collect();
        assert_eq!(seen[0], [true, true, true, false, false]);
        assert_eq!(seen[1], [true, true, true, true, false]);
        // sq = 3, sk = 1: query 0 and 1 see nothing, query 2 sees key 0.
        let m = RowMask::new(3, 1, 1, true);
        assert_eq!((0..3).map(|i| m.visible(i, 0)).collect::<Vec<_>>(), [false, false, true]);
        assert!(!m.every_row_sees_a_key());
        assert!(RowMask::new(2, 4, 5, true).every_row_sees_a_key());
        assert!(!RowMask::new(2, 0, 5, false).every_row_sees_a_key());
    }
}
