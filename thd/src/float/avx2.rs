//! AVX2 + FMA kernels (x86-64). Every function here requires a CPU with both features; the
//! callers in [`super::sealed`] only reach them through `Isa::Avx2Fma`, which
//! [`super::Isa::detect`] returns only after detecting them at run time.
//!
//! The exponentials reduce `x = n·ln2 + r` with `|r| <= ln2/2` (Cody–Waite, two-part ln 2),
//! evaluate a polynomial for `e^r` and scale by `2^n` through the exponent bits:
//! - `f32`: degree-6 minimax polynomial (the Cephes `expf` coefficients), about 1 ulp;
//! - `f64`: degree-13 Taylor polynomial, truncation error below 1e-17 relative, about 1 ulp.
//!
//! Inputs below the smallest normal result give exactly 0 (so `-inf` masks give 0).

use std::arch::x86_64::*;

use super::{MR, Panels};

macro_rules! gemm_kernel {
    ($name:ident, $t:ty, $lanes:literal, $vec:ty, $zero:ident, $load:ident, $store:ident,
     $bcast:ident, $fmadd:ident, $add:ident, $set1:ident) => {
        /// `C = init + A·B` for one [`MR`] × (n_panels · 2 vectors) block; see [`Panels`].
        ///
        /// # Safety
        /// The CPU must support AVX2 and FMA, and `p.check(2 * lanes, c.len(), c_rs)` must
        /// hold (every pointer offset below is then inside its slice).
        #[target_feature(enable = "avx2,fma")]
        pub(super) unsafe fn $name(p: &Panels<'_, $t>, c: &mut [$t], c_rs: usize) {
            const NR: usize = 2 * $lanes;
            let (a, b, cp) = (p.a.as_ptr(), p.b.as_ptr(), c.as_mut_ptr());
            for panel in 0..p.n_panels {
                // Blocked summation: each run of `KC` depth steps is summed in registers and
                // then added to C, so the rounding error grows with `KC + depth / KC` terms
                // rather than `depth` (see `super::KC`).
                let mut t0 = 0;
                loop {
                    let t1 = p.depth.min(t0 + super::KC);
                    let mut acc: [[$vec; 2]; MR] = [[$zero(); 2]; MR];
                    // SAFETY (whole loop): offsets are r·a_rs + t < a.len() and
                    // panel·b_ps + t·b_rs + NR <= b.len() for r < MR, t < depth (checked).
                    unsafe {
                        let bp = b.add(panel * p.b_ps);
                        for t in t0..t1 {
                            let b0 = $load(bp.add(t * p.b_rs));
                            let b1 = $load(bp.add(t * p.b_rs + $lanes));
                            for r in 0..MR {
                                let ar = $bcast(&*a.add(r * p.a_rs + t));
                                acc[r][0] = $fmadd(ar, b0, acc[r][0]);
                                acc[r][1] = $fmadd(ar, b1, acc[r][1]);
                            }
                        }
                    }
                    for r in 0..MR {
                        // SAFETY: r·c_rs + panel·NR + NR <= c.len() (checked).
                        unsafe {
                            let cr = cp.add(r * c_rs + panel * NR);
                            if t0 > 0 {
                                acc[r][0] = $add($load(cr), acc[r][0]);
                                acc[r][1] = $add($load(cr.add($lanes)), acc[r][1]);
                            } else if let Some(alpha) = p.alpha {
                                let al = $set1(alpha[r]);
                                acc[r][0] = $fmadd(al, $load(cr), acc[r][0]);
                                acc[r][1] = $fmadd(al, $load(cr.add($lanes)), acc[r][1]);
                            }
                            $store(cr, acc[r][0]);
                            $store(cr.add($lanes), acc[r][1]);
                        }
                    }
                    t0 = t1;
                    if t0 >= p.depth {
                        break;
                    }
                }
            }
        }
    };
}

gemm_kernel!(
    gemm_panels_f32,
    f32,
    8,
    __m256,
    _mm256_setzero_ps,
    _mm256_loadu_ps,
    _mm256_storeu_ps,
    _mm256_broadcast_ss,
    _mm256_fmadd_ps,
    _mm256_add_ps,
    _mm256_set1_ps
);
gemm_kernel!(
    gemm_panels_f64,
    f64,
    4,
    __m256d,
    _mm256_setzero_pd,
    _mm256_loadu_pd,
    _mm256_storeu_pd,
    _mm256_broadcast_sd,
    _mm256_fmadd_pd,
    _mm256_add_pd,
    _mm256_set1_pd
);

// ---- exp --------------------------------------------------------------------------------

/// `e^x` on 8 lanes; 0 where `x` is below the smallest normal result (including `-inf`).
#[target_feature(enable = "avx2,fma")]
fn exp_f32x8(x: __m256) -> __m256 {
    const LO: f32 = -87.336_54; // ln(2^-126): smallest normal result
    const HI: f32 = 88.376_26;
    let under = _mm256_cmp_ps::<_CMP_LT_OQ>(x, _mm256_set1_ps(LO));
    let x = _mm256_min_ps(_mm256_max_ps(x, _mm256_set1_ps(LO)), _mm256_set1_ps(HI));
    let n = _mm256_round_ps::<{ _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC }>(_mm256_mul_ps(
        x,
        _mm256_set1_ps(std::f32::consts::LOG2_E),
    ));
    let r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693_359_4), x);
    let r = _mm256_fnmadd_ps(n, _mm256_set1_ps(-2.121_944_4e-4), r);
    let mut p = _mm256_set1_ps(1.987_569_1e-4);
    for c in [1.398_199_9e-3, 8.333_452e-3, 4.166_579_6e-2, 0.166_666_65, 0.5] {
        p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(c));
    }
    let r2 = _mm256_mul_ps(r, r);
    // (p·r² + r) + 1, as Cephes: the small terms are summed before the 1, so r keeps its low
    // bits (adding 1 first rounds r to the ulp of 1 and costs about half an ulp more).
    let y = _mm256_add_ps(_mm256_fmadd_ps(p, r2, r), _mm256_set1_ps(1.0));
    let bits =
        _mm256_slli_epi32::<23>(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)));
    let y = _mm256_mul_ps(y, _mm256_castsi256_ps(bits));
    _mm256_andnot_ps(under, y)
}

/// `e^x` on 4 lanes; 0 where `x` is below the smallest normal result (including `-inf`).
#[target_feature(enable = "avx2,fma")]
fn exp_f64x4(x: __m256d) -> __m256d {
    const LO: f64 = -708.396_418_532_264; // ln(2^-1022)
    const HI: f64 = 709.782_712_893_384;
    let under = _mm256_cmp_pd::<_CMP_LT_OQ>(x, _mm256_set1_pd(LO));
    let x = _mm256_min_pd(_mm256_max_pd(x, _mm256_set1_pd(LO)), _mm256_set1_pd(HI));
    let n = _mm256_round_pd::<{ _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC }>(_mm256_mul_pd(
        x,
        _mm256_set1_pd(std::f64::consts::LOG2_E),
    ));
    // ln 2 = LN2_HI + LN2_LO, LN2_HI with trailing zero bits so n·LN2_HI is exact.
    let r = _mm256_fnmadd_pd(n, _mm256_set1_pd(6.931_457_519_531_25e-1), x);
    let r = _mm256_fnmadd_pd(n, _mm256_set1_pd(1.428_606_820_309_417_2e-6), r);
    // Taylor: Σ_{k<=13} r^k / k!, Horner from the top.
    let mut p = _mm256_set1_pd(INV_FACT[13]);
    for k in (0..13).rev() {
        p = _mm256_fmadd_pd(p, r, _mm256_set1_pd(INV_FACT[k]));
    }
    let n32 = _mm256_cvtpd_epi32(n);
    let bits = _mm256_slli_epi64::<52>(_mm256_add_epi64(
        _mm256_cvtepi32_epi64(n32),
        _mm256_set1_epi64x(1023),
    ));
    let y = _mm256_mul_pd(p, _mm256_castsi256_pd(bits));
    _mm256_andnot_pd(under, y)
}

/// `1/k!` for `k = 0..=13`.
const INV_FACT: [f64; 14] = {
    let mut t = [1.0; 14];
    let mut k = 1;
    while k < 14 {
        t[k] = t[k - 1] / k as f64;
        k += 1;
    }
    t
};

#[target_feature(enable = "avx2,fma")]
fn hmax_f32(v: __m256) -> f32 {
    let m = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps::<1>(v));
    let m = _mm_max_ps(m, _mm_movehl_ps(m, m));
    let m = _mm_max_ss(m, _mm_shuffle_ps::<1>(m, m));
    _mm_cvtss_f32(m)
}

#[target_feature(enable = "avx2,fma")]
fn hmax_f64(v: __m256d) -> f64 {
    let m = _mm_max_pd(_mm256_castpd256_pd128(v), _mm256_extractf128_pd::<1>(v));
    let m = _mm_max_sd(m, _mm_unpackhi_pd(m, m));
    _mm_cvtsd_f64(m)
}

#[target_feature(enable = "avx2,fma")]
fn hsum_f32(v: __m256) -> f32 {
    let s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps::<1>(v));
    let s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    let s = _mm_add_ss(s, _mm_shuffle_ps::<1>(s, s));
    _mm_cvtss_f32(s)
}

#[target_feature(enable = "avx2,fma")]
fn hsum_f64(v: __m256d) -> f64 {
    let s = _mm_add_pd(_mm256_castpd256_pd128(v), _mm256_extractf128_pd::<1>(v));
    let s = _mm_add_sd(s, _mm_unpackhi_pd(s, s));
    _mm_cvtsd_f64(s)
}

/// Largest element, `-inf` when empty.
///
/// # Safety
/// The CPU must support AVX2 and FMA.
#[target_feature(enable = "avx2,fma")]
pub(super) unsafe fn max_of_f32(x: &[f32]) -> f32 {
    // Four independent chains: one `max` chain is latency-bound well below memory bandwidth.
    let mut acc = [_mm256_set1_ps(f32::NEG_INFINITY); 4];
    let mut blocks = x.chunks_exact(32);
    for c in &mut blocks {
        for (i, a) in acc.iter_mut().enumerate() {
            // SAFETY: `c` holds 32 elements, so `8 * i + 8 <= 32`.
            *a = _mm256_max_ps(*a, unsafe { _mm256_loadu_ps(c.as_ptr().add(8 * i)) });
        }
    }
    let mut m = _mm256_max_ps(_mm256_max_ps(acc[0], acc[1]), _mm256_max_ps(acc[2], acc[3]));
    let mut chunks = blocks.remainder().chunks_exact(8);
    for c in &mut chunks {
        // SAFETY: `c` holds exactly 8 elements.
        m = _mm256_max_ps(m, unsafe { _mm256_loadu_ps(c.as_ptr()) });
    }
    chunks.remainder().iter().fold(hmax_f32(m), |a, &b| a.max(b))
}

/// Largest element, `-inf` when empty.
///
/// # Safety
/// The CPU must support AVX2 and FMA.
#[target_feature(enable = "avx2,fma")]
pub(super) unsafe fn max_of_f64(x: &[f64]) -> f64 {
    let mut acc = [_mm256_set1_pd(f64::NEG_INFINITY); 4];
    let mut blocks = x.chunks_exact(16);
    for c in &mut blocks {
        for (i, a) in acc.iter_mut().enumerate() {
            // SAFETY: `c` holds 16 elements, so `4 * i + 4 <= 16`.
            *a = _mm256_max_pd(*a, unsafe { _mm256_loadu_pd(c.as_ptr().add(4 * i)) });
        }
    }
    let mut m = _mm256_max_pd(_mm256_max_pd(acc[0], acc[1]), _mm256_max_pd(acc[2], acc[3]));
    let mut chunks = blocks.remainder().chunks_exact(4);
    for c in &mut chunks {
        // SAFETY: `c` holds exactly 4 elements.
        m = _mm256_max_pd(m, unsafe { _mm256_loadu_pd(c.as_ptr()) });
    }
    chunks.remainder().iter().fold(hmax_f64(m), |a, &b| a.max(b))
}

/// `x = e^(x - m)` in place; returns the sum.
///
/// # Safety
/// The CPU must support AVX2 and FMA.
#[target_feature(enable = "avx2,fma")]
pub(super) unsafe fn exp_sub_sum_f32(x: &mut [f32], m: f32) -> f32 {
    let mv = _mm256_set1_ps(m);
    let mut acc = _mm256_setzero_ps();
    let mut chunks = x.chunks_exact_mut(8);
    for c in &mut chunks {
        // SAFETY: `c` holds exactly 8 elements.
        unsafe {
            let e = exp_f32x8(_mm256_sub_ps(_mm256_loadu_ps(c.as_ptr()), mv));
            _mm256_storeu_ps(c.as_mut_ptr(), e);
            acc = _mm256_add_ps(acc, e);
        }
    }
    let mut sum = hsum_f32(acc);
    for v in chunks.into_remainder() {
        *v = lane0_f32(exp_f32x8(_mm256_set1_ps(*v - m)));
        sum += *v;
    }
    sum
}

/// `x = e^(x - m)` in place; returns the sum.
///
/// # Safety
/// The CPU must support AVX2 and FMA.
#[target_feature(enable = "avx2,fma")]
pub(super) unsafe fn exp_sub_sum_f64(x: &mut [f64], m: f64) -> f64 {
    let mv = _mm256_set1_pd(m);
    let mut acc = _mm256_setzero_pd();
    let mut chunks = x.chunks_exact_mut(4);
    for c in &mut chunks {
        // SAFETY: `c` holds exactly 4 elements.
        unsafe {
            let e = exp_f64x4(_mm256_sub_pd(_mm256_loadu_pd(c.as_ptr()), mv));
            _mm256_storeu_pd(c.as_mut_ptr(), e);
            acc = _mm256_add_pd(acc, e);
        }
    }
    let mut sum = hsum_f64(acc);
    for v in chunks.into_remainder() {
        *v = _mm256_cvtsd_f64(exp_f64x4(_mm256_set1_pd(*v - m)));
        sum += *v;
    }
    sum
}

#[target_feature(enable = "avx2,fma")]
fn lane0_f32(v: __m256) -> f32 {
    _mm256_cvtss_f32(v)
}

/// `Σ e^(x - m)` in `f64`: `f32` lanes over blocks of 512 elements, blocks summed in `f64`.
///
/// # Safety
/// The CPU must support AVX2 and FMA.
#[target_feature(enable = "avx2,fma")]
pub(super) unsafe fn sum_exp_sub_f32(x: &[f32], m: f32) -> f64 {
    let mv = _mm256_set1_ps(m);
    let mut total = 0.0f64;
    let mut blocks = x.chunks_exact(512);
    for block in &mut blocks {
        // Four independent accumulators hide the add latency.
        let mut acc = [_mm256_setzero_ps(); 4];
        for c in block.chunks_exact(32) {
            for (i, a) in acc.iter_mut().enumerate() {
                // SAFETY: `c` holds 32 elements, so `8 * i + 8 <= 32`.
                let v = unsafe { _mm256_loadu_ps(c.as_ptr().add(8 * i)) };
                *a = _mm256_add_ps(*a, exp_f32x8(_mm256_sub_ps(v, mv)));
            }
        }
        let s = _mm256_add_ps(_mm256_add_ps(acc[0], acc[1]), _mm256_add_ps(acc[2], acc[3]));
        total += f64::from(hsum_f32(s));
    }
    let rest = blocks.remainder();
    let mut chunks = rest.chunks_exact(8);
    let mut acc = _mm256_setzero_ps();
    for c in &mut chunks {
        // SAFETY: `c` holds exactly 8 elements.
        let v = unsafe { _mm256_loadu_ps(c.as_ptr()) };
        acc = _mm256_add_ps(acc, exp_f32x8(_mm256_sub_ps(v, mv)));
    }
    total += f64::from(hsum_f32(acc));
    for &v in chunks.remainder() {
        total += f64::from(lane0_f32(exp_f32x8(_mm256_set1_ps(v - m))));
    }
    total
}

/// `Σ e^(x - m)`.
///
/// # Safety
/// The CPU must support AVX2 and FMA.
#[target_feature(enable = "avx2,fma")]
pub(super) unsafe fn sum_exp_sub_f64(x: &[f64], m: f64) -> f64 {
    let mv = _mm256_set1_pd(m);
    let mut acc = [_mm256_setzero_pd(); 4];
    let mut chunks = x.chunks_exact(16);
    for c in &mut chunks {
        for (i, a) in acc.iter_mut().enumerate() {
            // SAFETY: `c` holds 16 elements, so `4 * i + 4 <= 16`.
            let v = unsafe { _mm256_loadu_pd(c.as_ptr().add(4 * i)) };
            *a = _mm256_add_pd(*a, exp_f64x4(_mm256_sub_pd(v, mv)));
        }
    }
    let s = _mm256_add_pd(_mm256_add_pd(acc[0], acc[1]), _mm256_add_pd(acc[2], acc[3]));
    let mut total = hsum_f64(s);
    for &v in chunks.remainder() {
        total += _mm256_cvtsd_f64(exp_f64x4(_mm256_set1_pd(v - m)));
    }
    total
}
