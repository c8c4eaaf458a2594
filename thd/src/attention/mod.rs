//! Variable-length (THD) attention directly on packed `[T, heads, head_dim]` tensors.
//!
//! Each segment attends only to its own keys: the kernel walks `cu_seqlens` segment by segment,
//! the way varlen kernels address memory, and never builds a `T × T` document mask.

mod tiled;

use crate::float::Isa;
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
    varlen_attention_on(Isa::detect(), q, k, v, cu_q, cu_k, shape, opts)
}

/// [`varlen_attention`] with the kernels of a given instruction set.
#[allow(clippy::too_many_arguments)] // private: the public API is `varlen_attention`
fn varlen_attention_on<F: Float>(
    isa: Isa,
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
    let geo = tiled::Geometry {
        heads: shape.heads,
        kv_heads: shape.kv_heads,
        group,
        head_dim: d,
        causal: opts.causal,
        scale: F::from_f64(scale),
    };
    let mut out = vec![F::ZERO; q.len()];
    let segments = cu_q.segments().zip(cu_k.segments());
    tiled::run(isa, q, k, v, segments, cu_q.total(), &geo, &mut out);
    Ok(out)
}

/// Number of token rows of `len` elements in rows of `row` elements, or [`Error::RaggedTensor`].
fn rows(key: &'static str, len: usize, row: usize) -> Result<usize> {
    if !len.is_multiple_of(row) {
        return Err(Error::RaggedTensor { key, len, row });
    }
    Ok(len / row)
}

#[cfg(test)]
mod tests {
    use rand::rngs::StdRng;
    use rand::{Rng, SeedableRng};

    use super::*;

    fn cu(lens: &[i32]) -> CuSeqlens {
        let mut v = vec![0];
        for &l in lens {
            v.push(v.last().unwrap() + l);
        }
        CuSeqlens::try_from(v).unwrap()
    }

    /// Straight from the formula, in f64: one query row at a time, two-pass softmax.
    fn naive(
        q: &[f64],
        k: &[f64],
        v: &[f64],
        cu_q: &CuSeqlens,
        cu_k: &CuSeqlens,
        shape: AttnShape,
        causal: bool,
    ) -> Vec<f64> {
        let AttnShape { heads, kv_heads, head_dim: d } = shape;
        let group = heads / kv_heads;
        let scale = 1.0 / (d as f64).sqrt();
        let mut out = vec![0.0; q.len()];
        for (rq, rk) in cu_q.segments().zip(cu_k.segments()) {
            let (sq, sk) = (rq.len() as i64, rk.len() as i64);
            for i in 0..sq {
                for h in 0..heads {
                    let g = h / group;
                    let qi = &q[(rq.start + i as usize) * heads * d + h * d..][..d];
                    let keys: Vec<usize> = (0..sk)
                        .filter(|&j| !causal || j <= i + sk - sq)
                        .map(|j| j as usize)
                        .collect();
                    if keys.is_empty() {
                        continue;
                    }
                    let kr = |j: usize| (rk.start + j) * kv_heads * d + g * d;
                    let s: Vec<f64> = keys
                        .iter()
                        .map(|&j| scale * (0..d).map(|e| qi[e] * k[kr(j) + e]).sum::<f64>())
                        .collect();
                    let mx = s.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
                    let p: Vec<f64> = s.iter().map(|x| (x - mx).exp()).collect();
                    let z: f64 = p.iter().sum();
                    for e in 0..d {
                        let o: f64 = keys.iter().zip(&p).map(|(&j, pj)| pj * v[kr(j) + e]).sum();
                        out[(rq.start + i as usize) * heads * d + h * d + e] = o / z;
                    }
                }
            }
        }
        out
    }

    fn random(n: usize, rng: &mut StdRng) -> Vec<f64> {
        (0..n).map(|_| rng.random_range(-2.0..2.0)).collect()
    }

    fn max_abs_diff(a: &[f64], b: &[f64]) -> f64 {
        a.iter().zip(b).map(|(x, y)| (x - y).abs()).fold(0.0, f64::max)
    }

    #[test]
    fn tiled_matches_naive_f64_on_every_isa() {
        let mut rng = StdRng::seed_from_u64(7);
        // (query lengths, key lengths, heads, kv_heads, head_dim)
        type Case = (&'static [i32], &'static [i32], usize, usize, usize);
        let cases: &[Case] = &[
            (&[5, 0, 130, 1, 64], &[5, 0, 130, 1, 64], 8, 2, 64),
            (&[0, 0], &[0, 0], 2, 1, 3),
            (&[200, 7], &[200, 7], 3, 3, 59),
            (&[65, 3, 129], &[70, 0, 100], 4, 1, 17), // sq != sk, a zero-length key segment
            (&[300], &[300], 12, 4, 8),
            (&[1, 2, 3], &[1, 2, 3], 1, 1, 111),
        ];
        for &(lq, lk, heads, kv_heads, d) in cases {
            let (cu_q, cu_k) = (cu(lq), cu(lk));
            let shape = AttnShape { heads, kv_heads, head_dim: d };
            let extra = 2; // rows beyond cu_q.total() must come out 0
            let q = random((cu_q.total() + extra) * heads * d, &mut rng);
            let k = random(cu_k.total() * kv_heads * d, &mut rng);
            let v = random(cu_k.total() * kv_heads * d, &mut rng);
            for causal in [false, true] {
                let want = naive(&q, &k, &v, &cu_q, &cu_k, shape, causal);
                let opts = AttnOptions { causal, scale: None };
                for isa in Isa::all_available() {
                    let got =
                        varlen_attention_on(isa, &q, &k, &v, &cu_q, &cu_k, shape, &opts).unwrap();
                    let err = max_abs_diff(&got, &want);
                    assert!(
                        err <= 1e-13,
                        "{isa:?} {lq:?}/{lk:?} H{heads} KV{kv_heads} D{d} causal={causal}: {err}"
                    );
                    assert!(got[cu_q.total() * heads * d..].iter().all(|&x| x == 0.0));
                }
            }
        }
    }

    #[test]
    fn tiled_f32_close_to_naive_f64() {
        let mut rng = StdRng::seed_from_u64(8);
        let (cu_q, shape) = (cu(&[333, 70]), AttnShape { heads: 8, kv_heads: 2, head_dim: 64 });
        let q = random(cu_q.total() * 8 * 64, &mut rng);
        let kv = random(cu_q.total() * 2 * 64, &mut rng);
        let want = naive(&q, &kv, &kv, &cu_q, &cu_q, shape, true);
        let f = |x: &[f64]| x.iter().map(|&y| y as f32).collect::<Vec<_>>();
        let opts = AttnOptions { causal: true, scale: None };
        for isa in Isa::all_available() {
            let got =
                varlen_attention_on(isa, &f(&q), &f(&kv), &f(&kv), &cu_q, &cu_q, shape, &opts)
                    .unwrap();
            let got: Vec<f64> = got.iter().map(|&x| x as f64).collect();
            assert!(max_abs_diff(&got, &want) < 1e-5, "{isa:?}");
        }
    }

    #[test]
    fn uniform_scores_average_the_values() {
        // q = 0: every visible key scores equally, so each row is the mean of its visible v rows.
        let cu_q = cu(&[4]);
        let shape = AttnShape { heads: 1, kv_heads: 1, head_dim: 2 };
        let q = [0.0f64; 8];
        let k = [1.0, -3.0, 2.0, 5.0, 0.5, 0.5, -1.0, 4.0];
        let v = [1.0, 10.0, 3.0, 20.0, 5.0, 30.0, 7.0, 40.0];
        let full =
            varlen_attention(&q, &k, &v, &cu_q, &cu_q, shape, &AttnOptions::default()).unwrap();
        assert_eq!(full, [4.0, 25.0].repeat(4));
        let causal = AttnOptions { causal: true, ..Default::default() };
        let out = varlen_attention(&q, &k, &v, &cu_q, &cu_q, shape, &causal).unwrap();
        assert_eq!(out, vec![1.0, 10.0, 2.0, 15.0, 3.0, 20.0, 4.0, 25.0]);
    }

    #[test]
    fn single_key_returns_its_value_row() {
        let cu_q = cu(&[1]);
        let shape = AttnShape { heads: 2, kv_heads: 1, head_dim: 3 };
        let q = [0.3f32, -1.0, 2.0, 7.0, 1.0, -4.0];
        let out = varlen_attention(
            &q,
            &[9.0, 9.0, 9.0],
            &[1.5, -2.0, 0.25],
            &cu_q,
            &cu_q,
            shape,
            &AttnOptions::default(),
        )
        .unwrap();
        assert_eq!(out, [1.5, -2.0, 0.25].repeat(2));
    }

    #[test]
    fn rows_without_keys_are_zero_not_nan() {
        // Causal with sq = 3 > sk = 1, bottom-right aligned: only the last query sees key 0.
        let (cu_q, cu_k) = (cu(&[3, 2]), cu(&[1, 0]));
        let shape = AttnShape { heads: 1, kv_heads: 1, head_dim: 1 };
        let causal = AttnOptions { causal: true, ..Default::default() };
        let out =
            varlen_attention(&[1.0f64; 5], &[1.0], &[6.0], &cu_q, &cu_k, shape, &causal).unwrap();
        assert_eq!(out, vec![0.0, 0.0, 6.0, 0.0, 0.0]);
        let full = varlen_attention(
            &[1.0f64; 5],
            &[1.0],
            &[6.0],
            &cu_q,
            &cu_k,
            shape,
            &AttnOptions::default(),
        )
        .unwrap();
        assert_eq!(full, vec![6.0, 6.0, 6.0, 0.0, 0.0]);
    }

    #[test]
    fn gqa_maps_query_head_to_kv_head_h_over_group() {
        // 4 query heads, 2 kv heads: heads 0, 1 read kv head 0; heads 2, 3 read kv head 1.
        let cu_q = cu(&[1]);
        let shape = AttnShape { heads: 4, kv_heads: 2, head_dim: 1 };
        let out = varlen_attention(
            &[1.0f64; 4],
            &[0.0, 0.0],
            &[10.0, 20.0],
            &cu_q,
            &cu_q,
            shape,
            &AttnOptions::default(),
        )
        .unwrap();
        assert_eq!(out, vec![10.0, 10.0, 20.0, 20.0]);
    }

    #[test]
    fn explicit_scale_is_used() {
        // Two keys with scores 0 and ln 3 / scale: weights 1/4 and 3/4.
        let cu_q = cu(&[1]);
        let cu_k = cu(&[2]);
        let shape = AttnShape { heads: 1, kv_heads: 1, head_dim: 1 };
        let opts = AttnOptions { causal: false, scale: Some(0.5) };
        let k = [0.0, 2.0 * 3f64.ln()];
        let out = varlen_attention(&[1.0f64], &k, &[0.0, 4.0], &cu_q, &cu_k, shape, &opts).unwrap();
        assert!((out[0] - 3.0).abs() < 1e-15, "{out:?}");
    }

    #[test]
    fn shape_errors_name_the_fault() {
        let c = cu(&[2]);
        let s = AttnShape { heads: 2, kv_heads: 1, head_dim: 2 };
        let o = AttnOptions::default();
        let (q, kv) = (vec![0.0f32; 8], vec![0.0f32; 4]);
        let bad = AttnShape { heads: 3, kv_heads: 2, head_dim: 2 };
        assert_eq!(
            varlen_attention(&q, &kv, &kv, &c, &c, bad, &o),
            Err(Error::HeadsNotMultiple { heads: 3, kv_heads: 2 })
        );
        let zero = AttnShape { heads: 0, kv_heads: 0, head_dim: 2 };
        assert!(matches!(
            varlen_attention(&q, &kv, &kv, &c, &c, zero, &o),
            Err(Error::HeadsNotMultiple { .. })
        ));
        let no_d = AttnShape { head_dim: 0, ..s };
        assert_eq!(varlen_attention(&q, &kv, &kv, &c, &c, no_d, &o), Err(Error::ZeroHeadDim));
        assert_eq!(
            varlen_attention(&q[..7], &kv, &kv, &c, &c, s, &o),
            Err(Error::RaggedTensor { key: "q", len: 7, row: 4 })
        );
        assert!(matches!(
            varlen_attention(&q, &kv, &kv[..2], &c, &c, s, &o),
            Err(Error::ShapeMismatch { key: "v", .. })
        ));
        assert_eq!(
            varlen_attention(&q, &kv, &kv, &c, &cu(&[1, 1]), s, &o),
            Err(Error::AttnSegmentCountMismatch { q: 1, k: 2 })
        );
        assert_eq!(
            varlen_attention(&q[..4], &kv, &kv, &c, &c, s, &o),
            Err(Error::TokensBeyondTensor { key: "q", needed: 2, tokens: 1 })
        );
        assert_eq!(
            varlen_attention(&q, &kv[..2], &kv[..2], &c, &c, s, &o),
            Err(Error::TokensBeyondTensor { key: "k", needed: 2, tokens: 1 })
        );
    }
}
