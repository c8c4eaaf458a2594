use crate::cp::CpLayout;
use crate::{AttnOptions, AttnShape, CuSeqlens, Error, Float, Result, SeqLens, varlen_attention};

/// Context-parallel attention on one rank, emulated: the rank's local queries attend to the
/// gathered keys and values of their own sequence, at their global positions.
///
/// **Input:** `q_local: [T/cp, heads, head_dim]` (the rank's shard, [`CpLayout::split_rows`]),
/// `k, v: [T, kv_heads, head_dim]` (all ranks' shards gathered back into storage order,
/// [`CpLayout::reassemble`]). **Output:** `[T/cp, heads, head_dim]`, 0 on padding rows.
///
/// ```text
/// for each segment i and each chunk c ∈ {r, 2·cp − 1 − r} the rank holds (hᵢ tokens from g₀ = c·hᵢ):
///   nq = clamp(sᵢ − g₀, 0, hᵢ)                     real queries in the chunk
///   causal:  keys = k[startᵢ .. startᵢ + g₀ + nq]  (bottom-right aligned: query g₀+j sees keys ≤ g₀+j)
///   else:    keys = k[startᵢ .. startᵢ + sᵢ]       (the whole real sequence)
/// ```
///
/// Reassembling every rank's output gives the non-CP attention at every real token
/// ([`padded_varlen_attention`]).
///
/// # Errors
/// [`Error::CpRankOutOfRange`]; [`Error::ShapeMismatch`] if `q_local`, `k` or `v` do not have
/// the layout's row counts; the errors of [`varlen_attention`] for a bad [`AttnShape`].
///
/// # Example
/// ```
/// use thd::cp::{CpLayout, cp_attention, padded_varlen_attention};
/// use thd::{AttnOptions, AttnShape, CuSeqlens};
/// let cu = CuSeqlens::try_from(vec![0, 8])?;
/// let layout = CpLayout::new(&cu, None, 2)?;
/// let shape = AttnShape { heads: 1, kv_heads: 1, head_dim: 1 };
/// let q: Vec<f64> = (0..8).map(|t| 0.1 * t as f64).collect();
/// let (k, v) = (q.clone(), (0..8).map(f64::from).collect::<Vec<_>>());
/// let causal = AttnOptions { causal: true, ..Default::default() };
/// let shards = (0..2)
///     .map(|r| cp_attention(&layout, r, &layout.split(&q, r)?, &k, &v, shape, &causal))
///     .collect::<Result<Vec<_>, _>>()?;
/// let out = layout.reassemble(&shards, 1)?;
/// let reference = padded_varlen_attention(&layout, &q, &k, &v, shape, &causal)?;
/// assert!(out.iter().zip(&reference).all(|(a, b)| (a - b).abs() < 1e-12));
/// # Ok::<(), thd::Error>(())
/// ```
pub fn cp_attention<F: Float>(
    layout: &CpLayout,
    rank: usize,
    q_local: &[F],
    k: &[F],
    v: &[F],
    shape: AttnShape,
    opts: &AttnOptions,
) -> Result<Vec<F>> {
    shape.group_size()?;
    let (q_row, kv_row) = (shape.heads * shape.head_dim, shape.kv_heads * shape.head_dim);
    check("q_local", q_local.len(), layout.local_tokens(), q_row, shape.heads, shape.head_dim)?;
    check("k", k.len(), layout.num_tokens(), kv_row, shape.kv_heads, shape.head_dim)?;
    check("v", v.len(), layout.num_tokens(), kv_row, shape.kv_heads, shape.head_dim)?;
    layout.indices(rank)?; // checks the rank
    // Local rows run segment by segment, each segment's two chunks in order (`chunks`).
    let mut q_sub: Vec<F> = Vec::new();
    let mut k_sub: Vec<F> = Vec::new();
    let mut v_sub: Vec<F> = Vec::new();
    let mut q_lens = Vec::new();
    let mut k_lens = Vec::new();
    let mut q_rows = Vec::new(); // local row of each sub-query
    let mut local = 0usize;
    for i in 0..layout.num_segments() {
        let start = layout.storage().segment(i).start;
        let s = layout.real().segment(i).len();
        for c in layout.chunks(i, rank) {
            let g0 = c.start - start;
            let nq = s.saturating_sub(g0).min(c.len());
            let nk = if opts.causal { g0 + nq } else { s };
            if nq > 0 {
                q_sub.extend_from_slice(&q_local[local * q_row..(local + nq) * q_row]);
                k_sub.extend_from_slice(&k[start * kv_row..(start + nk) * kv_row]);
                v_sub.extend_from_slice(&v[start * kv_row..(start + nk) * kv_row]);
                q_rows.extend(local..local + nq);
                q_lens.push(nq as u32);
                k_lens.push(nk as u32);
            }
            local += c.len();
        }
    }
    let cu_q: CuSeqlens = SeqLens::new(q_lens).to_cu_seqlens()?;
    let cu_k: CuSeqlens = SeqLens::new(k_lens).to_cu_seqlens()?;
    let sub = varlen_attention(&q_sub, &k_sub, &v_sub, &cu_q, &cu_k, shape, opts)?;
    let mut out = vec![F::ZERO; q_local.len()];
    for (j, row) in q_rows.into_iter().enumerate() {
        out[row * q_row..(row + 1) * q_row].copy_from_slice(&sub[j * q_row..(j + 1) * q_row]);
    }
    Ok(out)
}

/// Non-CP attention over a (possibly padded) layout: each segment's real tokens attend to the
/// real tokens of the same segment; padding rows get 0.
///
/// **Input:** `q: [T, heads, head_dim]`, `k, v: [T, kv_heads, head_dim]` in storage order.
/// The real tokens are gathered into a contiguous THD batch, passed to [`varlen_attention`],
/// and scattered back.
///
/// # Errors
/// [`Error::ShapeMismatch`] for tensors without the layout's `T` rows; the errors of
/// [`varlen_attention`].
///
/// # Example
/// ```
/// use thd::cp::{CpLayout, padded_varlen_attention};
/// use thd::{AttnOptions, AttnShape, CuSeqlens};
/// let real = CuSeqlens::try_from(vec![0, 1])?;
/// let padded = CuSeqlens::try_from(vec![0, 2])?;
/// let layout = CpLayout::new(&real, Some(&padded), 1)?;
/// let shape = AttnShape { heads: 1, kv_heads: 1, head_dim: 1 };
/// let out = padded_varlen_attention(&layout, &[0.0, 9.0], &[0.0, 9.0], &[5.0, 7.0], shape, &AttnOptions::default())?;
/// assert_eq!(out, vec![5.0, 0.0]); // the pad key is never seen, the pad row is 0
/// # Ok::<(), thd::Error>(())
/// ```
pub fn padded_varlen_attention<F: Float>(
    layout: &CpLayout,
    q: &[F],
    k: &[F],
    v: &[F],
    shape: AttnShape,
    opts: &AttnOptions,
) -> Result<Vec<F>> {
    shape.group_size()?;
    let (q_row, kv_row) = (shape.heads * shape.head_dim, shape.kv_heads * shape.head_dim);
    check("q", q.len(), layout.num_tokens(), q_row, shape.heads, shape.head_dim)?;
    check("k", k.len(), layout.num_tokens(), kv_row, shape.kv_heads, shape.head_dim)?;
    check("v", v.len(), layout.num_tokens(), kv_row, shape.kv_heads, shape.head_dim)?;
    let rows: Vec<usize> = (0..layout.num_segments())
        .flat_map(|i| {
            let start = layout.storage().segment(i).start;
            start..start + layout.real().segment(i).len()
        })
        .collect();
    let gather = |x: &[F], w: usize| -> Vec<F> {
        rows.iter().flat_map(|&t| x[t * w..(t + 1) * w].iter().copied()).collect()
    };
    let cu = layout.real().seq_lens().to_cu_seqlens()?;
    let dense = varlen_attention(
        &gather(q, q_row),
        &gather(k, kv_row),
        &gather(v, kv_row),
        &cu,
        &cu,
        shape,
        opts,
    )?;
    let mut out = vec![F::ZERO; q.len()];
    for (j, &t) in rows.iter().enumerate() {
        out[t * q_row..(t + 1) * q_row].copy_from_slice(&dense[j * q_row..(j + 1) * q_row]);
    }
    Ok(out)
}

fn check(
    key: &'static str,
    len: usize,
    tokens: usize,
    row: usize,
    heads: usize,
    head_dim: usize,
) -> Result<()> {
    if len != tokens * row {
        return Err(Error::ShapeMismatch {
            key,
            len,
            expected: tokens * row,
            shape: format!("[{tokens}, {heads}, {head_dim}]"),
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lcg(seed: u64, n: usize) -> Vec<f64> {
        let mut s = seed;
        (0..n)
            .map(|_| {
                s = s.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
                ((s >> 11) as f64 / (1u64 << 53) as f64) * 2.0 - 1.0
            })
            .collect()
    }

    #[test]
    fn cp_matches_non_cp_with_padding_gqa_and_zero_length_segments() {
        let shape = AttnShape { heads: 4, kv_heads: 2, head_dim: 3 };
        for cp in [1usize, 2, 4] {
            let d = 2 * cp as i64;
            let real_lens = [5i64, 0, 2 * d, 1, 3 * d - 1];
            let mut real = vec![0i64];
            let mut padded = vec![0i64];
            for &s in &real_lens {
                real.push(real.last().unwrap() + s);
                padded.push(padded.last().unwrap() + (s + d - 1) / d * d);
            }
            let real = CuSeqlens::from_i64("cu_seqlens", &real).unwrap();
            let padded = CuSeqlens::from_i64("cu_seqlens_padded", &padded).unwrap();
            let layout = CpLayout::new(&real, Some(&padded), cp).unwrap();
            let t = layout.num_tokens();
            let q = lcg(1, t * 12);
            let k = lcg(2, t * 6);
            let v = lcg(3, t * 6);
            for causal in [true, false] {
                let opts = AttnOptions { causal, ..Default::default() };
                let shards: Vec<Vec<f64>> = (0..cp)
                    .map(|r| {
                        let ql = layout.split_rows(&q, 12, r).unwrap();
                        cp_attention(&layout, r, &ql, &k, &v, shape, &opts).unwrap()
                    })
                    .collect();
                let out = layout.reassemble(&shards, 12).unwrap();
                let reference = padded_varlen_attention(&layout, &q, &k, &v, shape, &opts).unwrap();
                let worst =
                    out.iter().zip(&reference).map(|(a, b)| (a - b).abs()).fold(0.0, f64::max);
                assert!(worst <= 1e-12, "cp={cp} causal={causal} worst={worst}");
            }
        }
    }
}
