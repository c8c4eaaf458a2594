//! How close is close enough: a per-dtype `(rtol, atol)` table and the FlashAttention rule.
//!
//! Fixed tolerances start from PyTorch's `torch.testing.assert_close` defaults
//! (`_DTYPE_PRECISIONS`); each row that departs from them says why. A lower-precision attention
//! is judged by the FlashAttention rule instead, which needs no per-shape tuning because it is
//! relative to the intrinsic error of the dtype:
//!
//! ```text
//! max|out − ref64| ≤ 2 · max|naive − ref64| + floor
//! floor = 2 · max|(r + 0.3 − 0.3) − r|,  r = ref64 rounded to the dtype, arithmetic in the dtype
//! ```
//!
//! `naive` is the same computation done plainly in the low dtype (the oracle called on the
//! low-precision inputs). The floor is FA3's "numerical error if we just do any arithmetic on
//! out_ref" (`hopper/test_flash_attn.py`); the factor 2 is FA2/FA3's forward rule. The ratio of
//! *mean* errors is reported as well (FlexAttention's statistic), since a max can hide a bias.

use std::fmt;

use candle_core::{DType, Result, Tensor};

use crate::error::Error;

/// `|actual − expected| ≤ atol + rtol·|expected|`, set together (PyTorch `get_tolerances`).
///
/// # Example
/// ```
/// use oracle::Tolerance;
/// let tol = Tolerance::new(1e-3, 1e-6);
/// assert!(tol.allows(1.0005, 1.0));
/// assert!(!tol.allows(1.01, 1.0));
/// assert!(!tol.allows(f64::NAN, 1.0)); // NaN is never close
/// assert!(Tolerance::abs(1e-12).allows(1.0 + 1e-13, 1.0));
/// assert_eq!(Tolerance::abs(1e-12).to_string(), "rtol 0, atol 1e-12");
/// ```
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Tolerance {
    /// Relative tolerance, a fraction of `|expected|`.
    pub rtol: f64,
    /// Absolute tolerance.
    pub atol: f64,
}

impl Tolerance {
    /// A tolerance with both parts.
    pub const fn new(rtol: f64, atol: f64) -> Self {
        Self { rtol, atol }
    }

    /// An absolute-only tolerance (`rtol = 0`).
    pub const fn abs(atol: f64) -> Self {
        Self { rtol: 0.0, atol }
    }

    /// Whether `actual` is close to `expected`. NaN is never close; equal infinities are.
    pub fn allows(&self, actual: f64, expected: f64) -> bool {
        if actual == expected {
            return true; // also equal infinities
        }
        (actual - expected).abs() <= self.atol + self.rtol * expected.abs()
    }
}

impl fmt::Display for Tolerance {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let num = |x: f64| if x == 0.0 { "0".to_string() } else { format!("{x:e}") };
        write!(f, "rtol {}, atol {}", num(self.rtol), num(self.atol))
    }
}

/// THD attention vs the oracle, both in f64 (DESIGN "Tolerances"): the two compute the same sums
/// in a different order, over at most a few thousand terms of magnitude ≤ 1, so their difference
/// is a few ulps of 1 (~1e-15); 1e-12 leaves room and still catches any wrong term.
pub const ATTENTION_F64: Tolerance = Tolerance::abs(1e-12);

/// The class of comparison a fixed tolerance row is for (a column of [`tolerance`]'s table):
/// the same dtype gets a looser row for long reductions.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum ToleranceClass {
    /// Elementwise ops and short reductions: PyTorch's defaults.
    Elementwise,
    /// Attention output compared at a fixed tolerance (when no same-dtype naive reference is at
    /// hand; prefer [`flash_rule`]).
    Attention,
    /// A loss value (Σ NLL / count) compared with the oracle's.
    Loss,
}

/// The `(rtol, atol)` for a class of comparison in a dtype. Non-float dtypes compare exactly.
///
/// | dtype | Elementwise (PyTorch) | Attention | Loss |
/// |---|---|---|---|
/// | f16  | 1e-3, 1e-5   | 1e-1, 1e-3 | 1e-3, 1e-4 |
/// | bf16 | 1.6e-2, 1e-5 | 1e-1, 1e-3 | 1e-3, 1e-4 |
/// | f32  | 1.3e-6, 1e-5 | 1e-2, 1e-3 | 1e-5, 1e-6 |
/// | f64  | 1e-7, 1e-7   | 0, 1e-12   | 1e-12, 1e-12 |
///
/// # Example
/// ```
/// use candle_core::DType;
/// use oracle::tolerance::{ToleranceClass, tolerance};
/// assert_eq!(tolerance(ToleranceClass::Loss, DType::F32), oracle::Tolerance::new(1e-5, 1e-6));
/// ```
pub fn tolerance(class: ToleranceClass, dtype: DType) -> Tolerance {
    use DType::*;
    match (class, dtype) {
        // PyTorch `_DTYPE_PRECISIONS`.
        (ToleranceClass::Elementwise, F16) => Tolerance::new(1e-3, 1e-5),
        (ToleranceClass::Elementwise, BF16) => Tolerance::new(1.6e-2, 1e-5),
        (ToleranceClass::Elementwise, F32) => Tolerance::new(1.3e-6, 1e-5),
        (ToleranceClass::Elementwise, F64) => Tolerance::new(1e-7, 1e-7),
        // Override: a softmax over thousands of keys followed by a long dot product accumulates
        // far more than one rounding; burn's attention tests use rel_abs(1e-2, 1e-3) and rtol 1e-1
        // in half precision. PyTorch's SDPA tests note 1.3e-6 is for elementwise ops only.
        (ToleranceClass::Attention, F16 | BF16) => Tolerance::new(1e-1, 1e-3),
        (ToleranceClass::Attention, F32) => Tolerance::new(1e-2, 1e-3),
        // Override: f64 vs f64 is the DESIGN rule, see [`ATTENTION_F64`].
        (ToleranceClass::Attention, F64) => ATTENTION_F64,
        // Override: flash-attention's cross-entropy test (`tests/losses/test_cross_entropy.py`)
        // asserts the f32 loss at rtol 1e-5, atol 1e-6 and f16/bf16 gradients at 1e-3, 1e-4.
        (ToleranceClass::Loss, F16 | BF16) => Tolerance::new(1e-3, 1e-4),
        (ToleranceClass::Loss, F32) => Tolerance::new(1e-5, 1e-6),
        // Override: both sides accumulate the loss in f64 (DESIGN: 1e-12 in f64); the sums differ
        // only by ordering.
        (ToleranceClass::Loss, F64) => Tolerance::new(1e-12, 1e-12),
        // Integers and 8-bit floats: exact (no rule here has measured anything looser).
        _ => Tolerance::abs(0.0),
    }
}

/// The factor of the FlashAttention forward rule (`2 ·` in FA2 and FA3).
pub const FLASH_RULE_FACTOR: f64 = 2.0;

/// The outcome of [`flash_rule`]: the errors it measured and whether the rule held.
#[derive(Debug, Clone, PartialEq)]
pub struct FlashReport {
    /// dtype of the output under test (the low dtype).
    pub dtype: DType,
    /// `max|out − ref64|`.
    pub max_err: f64,
    /// Flat index of `max_err` (row-major; map it with [`crate::compare::locate`]).
    pub worst: usize,
    /// `max|naive − ref64|`.
    pub naive_max_err: f64,
    /// The rounding floor `2·max|(r + 0.3 − 0.3) − r|` in the low dtype.
    pub floor: f64,
    /// `FLASH_RULE_FACTOR · naive_max_err + floor`.
    pub bound: f64,
    /// `mean|out − ref64|`.
    pub mean_err: f64,
    /// `mean|naive − ref64|`.
    pub naive_mean_err: f64,
}

impl FlashReport {
    /// `max_err ≤ bound` (and nothing is NaN).
    pub fn passed(&self) -> bool {
        self.max_err <= self.bound
    }

    /// `mean_err / naive_mean_err`: about 1 for a path as accurate as the naive one, below 1 for a
    /// more accurate one (0 when both are 0, infinite when only the naive one is exact).
    pub fn mean_ratio(&self) -> f64 {
        if self.mean_err == 0.0 {
            0.0
        } else if self.naive_mean_err == 0.0 {
            f64::INFINITY
        } else {
            self.mean_err / self.naive_mean_err
        }
    }
}

impl fmt::Display for FlashReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}: max|out−ref64| {:.3e} (at flat index {}) {} {}·max|naive−ref64| {:.3e} + floor {:.3e} = {:.3e}; mean error ratio out/naive {:.3}",
            self.dtype.as_str(),
            self.max_err,
            self.worst,
            if self.passed() { "≤" } else { "> (FAILS)" },
            FLASH_RULE_FACTOR,
            self.naive_max_err,
            self.floor,
            self.bound,
            self.mean_ratio(),
        )
    }
}

/// Applies the FlashAttention rule to `out` (the path under test, low dtype), `naive` (the
/// same-dtype naive reference) and `reference` (the f64 truth; any dtype, read as f64).
///
/// # Errors
/// [`Error::ShapeMismatch`] if the shapes differ; a candle error if `naive` is not in `out`'s
/// dtype (the rule compares errors of one dtype).
///
/// # Example
/// ```
/// use candle_core::{DType, Device, Tensor};
/// let dev = Device::Cpu;
/// let truth = Tensor::new(&[0.1f64, 0.2, 0.3], &dev)?;
/// let naive = truth.to_dtype(DType::F32)?; // off by the f32 rounding of each value
/// let report = oracle::tolerance::flash_rule(&naive, &naive, &truth)?;
/// assert!(report.passed());
/// assert_eq!(report.mean_ratio(), 1.0);
/// # Ok::<(), candle_core::Error>(())
/// ```
pub fn flash_rule(out: &Tensor, naive: &Tensor, reference: &Tensor) -> Result<FlashReport> {
    for other in [naive, reference] {
        if other.dims() != out.dims() {
            let err = Error::ShapeMismatch {
                actual: out.dims().to_vec(),
                expected: other.dims().to_vec(),
            };
            return Err(err.into());
        }
    }
    if naive.dtype() != out.dtype() {
        return Err(candle_core::Error::DTypeMismatchBinaryOp {
            lhs: out.dtype(),
            rhs: naive.dtype(),
            op: "flash_rule (out vs naive)",
        });
    }
    let dtype = out.dtype();
    let truth = flat_f64(reference)?;
    let errors = |x: &Tensor| -> Result<Vec<f64>> {
        Ok(flat_f64(x)?.iter().zip(&truth).map(|(a, e)| (a - e).abs()).collect())
    };
    let (err, naive_err) = (errors(out)?, errors(naive)?);
    let (worst, max_err) = max_with_index(&err);
    let (_, naive_max_err) = max_with_index(&naive_err);

    // Rounding floor: any arithmetic on the reference, in the low dtype.
    let r = reference.to_dtype(dtype)?;
    let r_again = r.affine(1.0, 0.3)?.affine(1.0, -0.3)?;
    let floor_err: Vec<f64> =
        flat_f64(&r_again)?.iter().zip(flat_f64(&r)?).map(|(a, b)| (a - b).abs()).collect();
    let floor = 2.0 * max_with_index(&floor_err).1;

    let n = err.len().max(1) as f64;
    Ok(FlashReport {
        dtype,
        max_err,
        worst,
        naive_max_err,
        floor,
        bound: FLASH_RULE_FACTOR * naive_max_err + floor,
        mean_err: err.iter().sum::<f64>() / n,
        naive_mean_err: naive_err.iter().sum::<f64>() / n,
    })
}

/// All elements, row-major, as f64.
pub(crate) fn flat_f64(x: &Tensor) -> Result<Vec<f64>> {
    x.flatten_all()?.to_dtype(DType::F64)?.to_vec1::<f64>()
}

/// The largest value and its index; NaN counts as larger than anything. `(0, 0.0)` when empty.
fn max_with_index(xs: &[f64]) -> (usize, f64) {
    let mut best = (0, 0.0f64);
    for (i, &x) in xs.iter().enumerate() {
        if x.is_nan() {
            return (i, f64::NAN);
        }
        if x > best.1 {
            best = (i, x);
        }
    }
    best
}

#[cfg(test)]
mod tests {
    use super::*;
    use candle_core::Device;

    #[test]
    fn nan_fails_the_flash_rule() {
        let dev = Device::Cpu;
        let truth = Tensor::new(&[1.0f64, 2.0], &dev).unwrap();
        let naive = truth.to_dtype(DType::F32).unwrap();
        let out = Tensor::new(&[1.0f32, f32::NAN], &dev).unwrap();
        let report = flash_rule(&out, &naive, &truth).unwrap();
        assert!(!report.passed(), "{report}");
        assert_eq!(report.worst, 1);
    }

    #[test]
    fn floor_is_the_rounding_of_plus_minus_point_three() {
        let dev = Device::Cpu;
        // 1/3 in f32: (r + 0.3) - 0.3 differs from r by at most an ulp or two of 0.6.
        let truth = Tensor::new(&[1.0f64 / 3.0], &dev).unwrap();
        let r = truth.to_dtype(DType::F32).unwrap();
        let report = flash_rule(&r, &r, &truth).unwrap();
        assert!(report.floor < 4.0 * f64::from(f32::EPSILON), "{report}");
    }
}
