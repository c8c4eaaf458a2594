//! Assertions shared by the bodies: the FlashAttention rule and fixed tolerances, with the
//! case, dtype and device in every message.
//!
//! Every check prints its figures to stderr (`cargo test-cuda -- --nocapture` shows them), so
//! a GPU run leaves the measured errors in its log, not just "ok".

use candle_core::{Device, Result, Tensor};
use oracle::Tolerance;
use oracle::tolerance::flash_rule;

/// A short name for a device in messages: `cpu` or `cuda`.
pub fn device_name(dev: &Device) -> &'static str {
    match dev {
        Device::Cpu => "cpu",
        Device::Cuda(_) => "cuda",
        Device::Metal(_) => "metal",
    }
}

/// Asserts the FlashAttention rule for `out` (under test) given the same-dtype `naive` output
/// and the f64 `reference`, and prints the report.
///
/// # Panics
/// If the rule does not hold (the message carries the case and the full report).
///
/// # Errors
/// A candle error if the tensors cannot be read back (shapes or dtypes that differ).
#[track_caller]
pub fn assert_flash_rule(
    case: &str,
    out: &Tensor,
    naive: &Tensor,
    reference: &Tensor,
) -> Result<()> {
    let report = flash_rule(out, naive, reference)?;
    let dev = device_name(out.device());
    eprintln!("{case} [{dev}] {report}");
    assert!(report.passed(), "{case} [{dev}]: FlashAttention rule fails: {report}");
    Ok(())
}

/// Asserts `actual` is within `tol` of `expected` elementwise (oracle's report on failure).
/// `seqlens` map a flat index to (segment, offset) in the message.
///
/// # Panics
/// If an element is outside the tolerance.
///
/// # Errors
/// A candle error if the shapes differ or a tensor cannot be read back.
#[track_caller]
pub fn assert_close(
    case: &str,
    actual: &Tensor,
    expected: &Tensor,
    seqlens: &[u32],
    tol: Tolerance,
) -> Result<()> {
    let report = oracle::compare::compare(case, actual, expected, seqlens, tol)?;
    let dev = device_name(actual.device());
    let worst = report.max_abs.as_ref().map_or(0.0, |d| d.diff);
    eprintln!(
        "{case} [{dev}] {:?}: max|Δ| {worst:.3e}, mean|Δ| {:.3e} ({tol})",
        actual.dtype(),
        report.mean_abs
    );
    assert!(report.passed(), "[{dev}] {report}");
    Ok(())
}

/// Asserts that two scalars (losses) agree within `tol`, printing both.
///
/// # Panics
/// If they do not.
#[track_caller]
pub fn assert_scalar_close(case: &str, dev: &Device, actual: f64, expected: f64, tol: Tolerance) {
    let dev = device_name(dev);
    eprintln!(
        "{case} [{dev}]: {actual:.15e} vs {expected:.15e} (Δ {:.3e}, {tol})",
        (actual - expected).abs()
    );
    assert!(
        tol.allows(actual, expected),
        "{case} [{dev}]: {actual:e} vs expected {expected:e} is outside {tol}"
    );
}

/// `max|a − b|` over all elements (read as f64; NaN propagates as NaN).
///
/// # Errors
/// A candle error if the shapes differ or a tensor cannot be read back.
pub fn max_abs_diff(a: &Tensor, b: &Tensor) -> Result<f64> {
    // Moved to the CPU before any cast: on CUDA, candle launches a cast of an empty tensor (a
    // zero-length segment's rows) with a grid of 0 blocks, which the driver refuses with
    // CUDA_ERROR_INVALID_VALUE (seen on the first H100 run, 2026-11-26).
    let host = |t: &Tensor| -> Result<Vec<f64>> {
        if t.elem_count() == 0 {
            return Ok(Vec::new());
        }
        t.flatten_all()?
            .to_device(&candle_core::Device::Cpu)?
            .to_dtype(candle_core::DType::F64)?
            .to_vec1::<f64>()
    };
    let (a, b) = (host(a)?, host(b)?);
    if a.len() != b.len() {
        return Err(candle_core::Error::Msg(format!(
            "max_abs_diff: {} vs {} elements",
            a.len(),
            b.len()
        )));
    }
    Ok(a.iter()
        .zip(&b)
        .map(|(x, y)| if x == y { 0.0 } else { (x - y).abs() })
        .fold(0.0, |m, d| if m.is_nan() || d.is_nan() { f64::NAN } else { m.max(d) }))
}
