//! The floating-point element types of the fast path: `f32` and `f64`.
//!
//! [`Float`] is sealed: the attention and loss kernels carry per-type SIMD code, so only the
//! types this crate implements them for can be used.

use std::fmt::{Debug, Display};
use std::iter::Sum;
use std::ops::{Add, AddAssign, Div, Mul, MulAssign, Neg, Sub};

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
    /// `e^self`, correctly rounded or within an ulp (the standard library's).
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

pub(crate) mod sealed {
    /// Keeps [`super::Float`] implementable only in this crate.
    pub trait Sealed {}
    impl Sealed for f32 {}
    impl Sealed for f64 {}
}
