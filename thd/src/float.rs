//! The floating-point element types of the fast path: `f32` and `f64`.
//!
//! [`Float`] is sealed: the attention and loss kernels carry per-type SIMD code (in the private
//! `Sealed` supertrait), so only the types this crate implements them for can be used.
//!
//! The kernels come in two flavours, picked once per call by `Isa::detect`: AVX2+FMA
//! (`std::arch`, x86-64 only, runtime-detected) and a portable scalar fallback. Both compute
//! the same formulas; only the order of floating-point operations differs.

use std::fmt::{Debug, Display};
use std::iter::Sum;
use std::ops::{Add, AddAssign, Div, Mul, MulAssign, Neg, Sub};

#[cfg(target_arch = "x86_64")]
mod avx2;

/// An element type of the THD fast path: `f32` or `f64` (sealed).
///
/// Arithmetic in the kernels happens in `Self`; sums that decide a loss value are taken in
/// `f64` whatever `Self` is.
///
/// # Example
/// ```
/// use thd::Float;
/// fn halve<F: Float>(x: F) -> F {
///     x * F::from_f64(0.5)
/// }
/// assert_eq!(halve(3.0f32), 1.5);
/// assert_eq!(halve(3.0f64).to_f64(), 1.5);
/// ```
pub trait Float:
    sealed::Sealed
    + Copy
    + Send
    + Sync
    + 'static
    + Debug
    + Display
    + Default
    + PartialEq
    + PartialOrd
    + Add<Output = Self>
    + Sub<Output = Self>
    + Mul<Output = Self>
    + Div<Output = Self>
    + Neg<Output = Self>
    + AddAssign
    + MulAssign
    + Sum
{
    /// Additive identity.
    const ZERO: Self;
    /// Multiplicative identity.
    const ONE: Self;
    /// Negative infinity (the score of a masked key).
    const NEG_INFINITY: Self;
    /// Name of the type as PyTorch spells its dtype: `"f32"` or `"f64"`.
    const NAME: &'static str;

    /// Converts from `f64`, rounding to nearest.
    fn from_f64(x: f64) -> Self;
    /// Converts to `f64` (exact).
    fn to_f64(self) -> f64;
    /// `e^self` (the standard library's, within an ulp).
    fn exp(self) -> Self;
    /// The larger of two values (the non-NaN one if one is NaN).
    fn max(self, other: Self) -> Self;
}

macro_rules! impl_float {
    ($t:ty, $name:literal) => {
        impl Float for $t {
            const ZERO: Self = 0.0;
            const ONE: Self = 1.0;
            const NEG_INFINITY: Self = <$t>::NEG_INFINITY;
            const NAME: &'static str = $name;

            #[inline]
            fn from_f64(x: f64) -> Self {
                x as $t
            }
            #[inline]
            fn to_f64(self) -> f64 {
                self as f64
            }
            #[inline]
            fn exp(self) -> Self {
                <$t>::exp(self)
            }
            #[inline]
            fn max(self, other: Self) -> Self {
                <$t>::max(self, other)
            }
        }
    };
}

impl_float!(f32, "f32");
impl_float!(f64, "f64");

pub(crate) use sealed::{Isa, KC, MR, Panels};

/// Asks the CPU to bring `x` into cache (a hint: no effect on results, a no-op off x86-64).
///
/// The loss streams each logits row from memory twice (max, then exp-sum); prefetching the
/// next row while the exp-sum of this one runs overlaps the memory traffic with the arithmetic.
#[inline]
pub(crate) fn prefetch<T>(x: &[T]) {
    #[cfg(target_arch = "x86_64")]
    for line in x.chunks(64 / std::mem::size_of::<T>().max(1)) {
        // SAFETY: a prefetch never faults and never changes memory; the address is in `x`.
        unsafe {
            std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T1 }>(
                line.as_ptr().cast(),
            )
        };
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = x;
}

pub(crate) mod sealed {
    //! Kernel plumbing: `pub` items in a crate-private module, so the sealed trait's
    //! signatures may name them while nothing leaves the crate.

    /// Rows of the register-blocked micro-kernel ([`Panels`]).
    pub const MR: usize = 6;

    /// Depth steps summed in registers before they are added to `C` (blocked summation).
    ///
    /// One running sum over the whole depth makes the rounding error of a dot product grow
    /// with `depth` terms; summing blocks of `KC` first makes it grow with about
    /// `KC + depth / KC`. At head dim 111 a single running sum in f32 was twice as far from
    /// the f64 truth as the naive BSHD reference (`selfcheck`'s `mqa_odd_dim`), whose matmul
    /// blocks its depth too.
    pub const KC: usize = 16;

    /// Which instruction set the kernels use.
    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    pub enum Isa {
        /// Portable code (any target).
        Scalar,
        /// x86-64 AVX2 + FMA, detected at run time.
        #[cfg(target_arch = "x86_64")]
        Avx2Fma,
    }

    impl Isa {
        /// The best instruction set this CPU supports.
        pub fn detect() -> Self {
            #[cfg(target_arch = "x86_64")]
            if std::arch::is_x86_feature_detected!("avx2")
                && std::arch::is_x86_feature_detected!("fma")
            {
                return Self::Avx2Fma;
            }
            Self::Scalar
        }

        /// Every instruction set usable here (tests run each kernel against the others).
        #[cfg(test)]
        pub fn all_available() -> Vec<Self> {
            let mut v = vec![Self::Scalar];
            if Self::detect() != Self::Scalar {
                v.push(Self::detect());
            }
            v
        }
    }

    /// Operands of a register-blocked product over [`MR`] rows:
    ///
    /// ```text
    /// C[r][p·NR + c] = init[r][p·NR + c] + Σ_{t < depth} a[r·a_rs + t] · b[p·b_ps + t·b_rs + c]
    ///     r < MR, c < NR, p < n_panels,    init = alpha[r] · C (alpha given) or 0
    /// ```
    ///
    /// `C` is stored at `c[r·c_rs + p·NR + c]`. Attention uses it twice per key tile: scores
    /// `S = Q·Kᵀ` (B = packed Kᵀ panels) and `O = alpha·O + P·V` (B = packed V rows).
    pub struct Panels<'a, F> {
        /// Inner dimension.
        pub depth: usize,
        /// Left operand, `MR` rows of stride `a_rs`.
        pub a: &'a [F],
        /// Row stride of `a`.
        pub a_rs: usize,
        /// Right operand.
        pub b: &'a [F],
        /// Stride of `b` along the inner dimension.
        pub b_rs: usize,
        /// Stride of `b` between column panels of `NR` columns.
        pub b_ps: usize,
        /// Column panels of `NR` columns.
        pub n_panels: usize,
        /// Per-row factor applied to the old `C` (accumulate), or `None` (overwrite).
        pub alpha: Option<&'a [F; MR]>,
    }

    impl<F> Panels<'_, F> {
        /// Panics unless every index the product touches is inside the slices (a bug in the
        /// caller, never a user error). The SIMD kernels rely on this check.
        pub fn check(&self, nr: usize, c_len: usize, c_rs: usize) {
            if self.n_panels == 0 {
                return;
            }
            if self.depth > 0 {
                assert!((MR - 1) * self.a_rs + self.depth <= self.a.len(), "a out of bounds");
                let b_end = (self.n_panels - 1) * self.b_ps + (self.depth - 1) * self.b_rs + nr;
                assert!(b_end <= self.b.len(), "b out of bounds");
            }
            assert!((MR - 1) * c_rs + self.n_panels * nr <= c_len, "c out of bounds");
        }
    }

    /// Per-type kernels behind [`super::Float`]; private to the crate, so `Float` is sealed.
    pub trait Sealed: Sized + Copy + 'static {
        /// Columns of the micro-kernel: two SIMD vectors (16 for `f32`, 8 for `f64`).
        const NR: usize;

        /// `C = init + A·B` over [`super::MR`] rows, see [`Panels`].
        fn gemm_panels(isa: Isa, p: &Panels<'_, Self>, c: &mut [Self], c_rs: usize);

        /// Largest element (`-inf` for an empty slice).
        fn max_of(isa: Isa, x: &[Self]) -> Self;

        /// Replaces each `x` by `e^(x - m)` and returns their sum (`-inf` entries become 0).
        fn exp_sub_sum(isa: Isa, x: &mut [Self], m: Self) -> Self;

        /// `Σ e^(x - m)`, accumulated in `f64`.
        fn sum_exp_sub(isa: Isa, x: &[Self], m: Self) -> f64;
    }

    macro_rules! impl_sealed {
        ($t:ty, $nr:literal, $gemm:ident, $max:ident, $exp_sum:ident, $sum_exp:ident) => {
            impl Sealed for $t {
                const NR: usize = $nr;

                fn gemm_panels(isa: Isa, p: &Panels<'_, Self>, c: &mut [Self], c_rs: usize) {
                    p.check(Self::NR, c.len(), c_rs);
                    match isa {
                        Isa::Scalar => super::scalar::gemm_panels(Self::NR, p, c, c_rs),
                        // SAFETY: `Isa::Avx2Fma` is only constructed by `Isa::detect` after
                        // checking that the CPU has AVX2 and FMA; bounds were checked above.
                        #[cfg(target_arch = "x86_64")]
                        Isa::Avx2Fma => unsafe { super::avx2::$gemm(p, c, c_rs) },
                    }
                }

                fn max_of(isa: Isa, x: &[Self]) -> Self {
                    match isa {
                        Isa::Scalar => super::scalar::max_of(x),
                        // SAFETY: AVX2 and FMA are present (see `gemm_panels`).
                        #[cfg(target_arch = "x86_64")]
                        Isa::Avx2Fma => unsafe { super::avx2::$max(x) },
                    }
                }

                fn exp_sub_sum(isa: Isa, x: &mut [Self], m: Self) -> Self {
                    match isa {
                        Isa::Scalar => super::scalar::exp_sub_sum(x, m),
                        // SAFETY: AVX2 and FMA are present (see `gemm_panels`).
                        #[cfg(target_arch = "x86_64")]
                        Isa::Avx2Fma => unsafe { super::avx2::$exp_sum(x, m) },
                    }
                }

                fn sum_exp_sub(isa: Isa, x: &[Self], m: Self) -> f64 {
                    match isa {
                        Isa::Scalar => super::scalar::sum_exp_sub(x, m),
                        // SAFETY: AVX2 and FMA are present (see `gemm_panels`).
                        #[cfg(target_arch = "x86_64")]
                        Isa::Avx2Fma => unsafe { super::avx2::$sum_exp(x, m) },
                    }
                }
            }
        };
    }

    impl_sealed!(f32, 16, gemm_panels_f32, max_of_f32, exp_sub_sum_f32, sum_exp_sub_f32);
    impl_sealed!(f64, 8, gemm_panels_f64, max_of_f64, exp_sub_sum_f64, sum_exp_sub_f64);
}

/// Portable kernels: plain loops over the same formulas as the SIMD ones.
mod scalar {
    use super::{Float, KC, MR, Panels};

    /// The widest `NR` of any element type (f32: 16).
    const MAX_NR: usize = 16;

    pub(super) fn gemm_panels<F: Float>(nr: usize, p: &Panels<'_, F>, c: &mut [F], c_rs: usize) {
        for panel in 0..p.n_panels {
            for r in 0..MR {
                let crow = &mut c[r * c_rs + panel * nr..][..nr];
                match p.alpha {
                    Some(alpha) => crow.iter_mut().for_each(|x| *x *= alpha[r]),
                    None => crow.fill(F::ZERO),
                }
                let arow = &p.a[r * p.a_rs..];
                // Blocked summation, as in the SIMD kernels: KC steps in a partial sum, then
                // added to C.
                let mut part = [F::ZERO; MAX_NR];
                for t0 in (0..p.depth).step_by(KC) {
                    let part = &mut part[..nr];
                    part.fill(F::ZERO);
                    for t in t0..p.depth.min(t0 + KC) {
                        let brow = &p.b[panel * p.b_ps + t * p.b_rs..][..nr];
                        let a = arow[t];
                        for (cv, &bv) in part.iter_mut().zip(brow) {
                            *cv += a * bv;
                        }
                    }
                    for (cv, &s) in crow.iter_mut().zip(part.iter()) {
                        *cv += s;
                    }
                }
            }
        }
    }

    pub(super) fn max_of<F: Float>(x: &[F]) -> F {
        x.iter().fold(F::NEG_INFINITY, |m, &v| m.max(v))
    }

    pub(super) fn exp_sub_sum<F: Float>(x: &mut [F], m: F) -> F {
        let mut sum = F::ZERO;
        for v in x.iter_mut() {
            *v = (*v - m).exp();
            sum += *v;
        }
        sum
    }

    pub(super) fn sum_exp_sub<F: Float>(x: &[F], m: F) -> f64 {
        x.iter().map(|&v| (v - m).exp().to_f64()).sum()
    }
}

#[cfg(test)]
mod tests {
    use super::sealed::Sealed;
    use super::*;

    /// Runs the bounds check of two column panels of nr = 2 (a and c as large as they need) on
    /// a `b` of `b_len` elements.
    fn check_two_panels(depth: usize, b_rs: usize, b_ps: usize, b_len: usize) {
        let a = [0.0f64; MR * 2];
        let b = vec![0.0f64; b_len];
        let p =
            sealed::Panels { depth, a: &a, a_rs: 2, b: &b, b_rs, b_ps, n_panels: 2, alpha: None };
        p.check(2, (MR - 1) * 4 + 2 * 2, 4);
    }

    /// The bounds check admits a `b` that ends exactly where the last panel's last row ends:
    /// panel start 8, (depth − 1)·b_rs = 3, and nr = 2 columns make 13 elements.
    #[test]
    fn panels_check_admits_an_exact_b() {
        check_two_panels(2, 3, 8, 8 + 3 + 2);
    }

    /// ... and refuses one element less.
    #[test]
    #[should_panic(expected = "b out of bounds")]
    fn panels_check_refuses_a_b_one_short() {
        check_two_panels(2, 3, 8, 8 + 3 + 2 - 1);
    }

    /// The bounds check the SIMD kernels rely on sees the last column panel of `b`: two panels
    /// of stride 4 need `b` to reach index 4 + nr, one element short panics.
    #[test]
    #[should_panic(expected = "b out of bounds")]
    fn panels_check_covers_the_last_panel_of_b() {
        check_two_panels(1, 1, 4, 4 + 2 - 1);
    }

    /// Relative error in ulps of `got` against the correctly rounded-ish `want`.
    fn ulps(got: f64, want: f64, eps: f64) -> f64 {
        if want == 0.0 {
            if got == 0.0 { 0.0 } else { f64::INFINITY }
        } else {
            ((got - want) / want).abs() / eps
        }
    }

    #[test]
    fn exp_kernels_within_two_ulps() {
        let xs: Vec<f64> = (0..20_000).map(|i| -(i as f64) * 0.0371).chain([0.0, -1e-9]).collect();
        for isa in Isa::all_available() {
            let mut v32: Vec<f32> = xs.iter().map(|&x| x as f32).collect();
            let want32: Vec<f32> = v32.iter().map(|x| x.exp()).collect();
            f32::exp_sub_sum(isa, &mut v32, 0.0);
            for (i, (&g, &w)) in v32.iter().zip(&want32).enumerate() {
                if w > 1e-37 {
                    let e = ulps(g as f64, w as f64, f32::EPSILON as f64);
                    assert!(e <= 2.0, "{isa:?} f32 exp({}) = {g}, want {w} ({e} ulp)", xs[i]);
                } else {
                    assert!(g.abs() <= 2e-37, "{isa:?} f32 exp({}) = {g}, want ~0", xs[i]);
                }
            }
            let mut v64 = xs.clone();
            f64::exp_sub_sum(isa, &mut v64, 0.0);
            for (i, &g) in v64.iter().enumerate() {
                let w = xs[i].exp();
                if w > 1e-300 {
                    let e = ulps(g, w, f64::EPSILON);
                    assert!(e <= 2.0, "{isa:?} f64 exp({}) = {g}, want {w} ({e} ulp)", xs[i]);
                }
            }
        }
    }

    #[test]
    fn exp_kernels_map_neg_infinity_to_zero_and_sum() {
        for isa in Isa::all_available() {
            let mut x = vec![0.0f32; 19];
            x[3] = f32::NEG_INFINITY;
            x[18] = f32::NEG_INFINITY;
            let s = f32::exp_sub_sum(isa, &mut x, 1.0);
            assert_eq!(x[3], 0.0);
            assert_eq!(x[18], 0.0);
            assert!((s as f64 - 17.0 * (-1.0f64).exp()).abs() < 1e-5, "{isa:?}: {s}");
            let y = [f64::NEG_INFINITY, 2.0, 2.0, f64::NEG_INFINITY, 2.0];
            assert!((f64::sum_exp_sub(isa, &y, 2.0) - 3.0).abs() < 1e-15);
            assert_eq!(f64::max_of(isa, &y), 2.0);
            assert_eq!(f32::max_of(isa, &[]), f32::NEG_INFINITY);
        }
    }

    #[test]
    fn gemm_panels_matches_naive_product() {
        fn run<F: Float>(isa: Isa) {
            let (depth, n_panels) = (13, 3);
            let nr = F::NR;
            let (a_rs, b_rs, c_rs) = (depth + 2, nr * n_panels, nr * n_panels + 5);
            let val = |i: usize| F::from_f64(((i * 7919) % 23) as f64 - 11.0);
            let a: Vec<F> = (0..MR * a_rs).map(val).collect();
            let b: Vec<F> = (0..depth * b_rs).map(|i| val(i + 5)).collect();
            let alpha: [F; MR] = std::array::from_fn(|r| F::from_f64(r as f64 - 2.0));
            let c0: Vec<F> = (0..MR * c_rs).map(|i| val(i + 3)).collect();
            for acc in [false, true] {
                let mut c = c0.clone();
                let p = Panels {
                    depth,
                    a: &a,
                    a_rs,
                    b: &b,
                    b_rs,
                    b_ps: nr,
                    n_panels,
                    alpha: acc.then_some(&alpha),
                };
                F::gemm_panels(isa, &p, &mut c, c_rs);
                for r in 0..MR {
                    for col in 0..c_rs {
                        let mut want = if acc { alpha[r] * c0[r * c_rs + col] } else { F::ZERO };
                        if col < nr * n_panels {
                            for t in 0..depth {
                                want += a[r * a_rs + t] * b[t * b_rs + col];
                            }
                        } else {
                            want = c0[r * c_rs + col]; // outside the panels: untouched
                        }
                        assert_eq!(c[r * c_rs + col], want, "{isa:?} {} r{r} c{col}", F::NAME);
                    }
                }
            }
        }
        for isa in Isa::all_available() {
            run::<f32>(isa);
            run::<f64>(isa);
        }
    }
}
