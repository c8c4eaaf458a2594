use serde::{Deserialize, Serialize};

use super::Flops;
use crate::{Error, Result};

/// How long a step took, on how many GPUs, against which peak.
///
/// # Example
/// ```
/// use thd::metrics::StepTiming;
/// let t = StepTiming { step_time_s: 1.0, num_gpus: 8, peak_flops_per_gpu: 989e12 };
/// t.validate()?;
/// # Ok::<(), thd::Error>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct StepTiming {
    /// Wall time of one optimizer step, seconds.
    pub step_time_s: f64,
    /// GPUs the step's FLOPs are spread over (DP·CP·TP·PP: every GPU of the job).
    pub num_gpus: u64,
    /// Peak FLOP/s of one GPU (dense BF16 in every stack here, e.g. 989e12 for H100).
    pub peak_flops_per_gpu: f64,
}

impl StepTiming {
    /// Checks that time and peak are positive and finite and that there is a GPU.
    ///
    /// # Errors
    /// [`Error::NotPositive`] naming the quantity; [`Error::ZeroCount`] for `num_gpus == 0`.
    ///
    /// # Example
    /// ```
    /// # use thd::metrics::StepTiming;
    /// let t = StepTiming { step_time_s: 0.0, num_gpus: 1, peak_flops_per_gpu: 1.0 };
    /// assert_eq!(t.validate().unwrap_err().to_string(), "step_time_s must be positive and finite, got 0");
    /// ```
    pub fn validate(&self) -> Result<()> {
        positive("step_time_s", self.step_time_s)?;
        positive("peak_flops_per_gpu", self.peak_flops_per_gpu)?;
        if self.num_gpus == 0 {
            return Err(Error::ZeroCount { quantity: "num_gpus" });
        }
        Ok(())
    }
}

fn positive(quantity: &'static str, v: f64) -> Result<()> {
    if v.is_finite() && v > 0.0 {
        Ok(())
    } else {
        Err(Error::NotPositive { quantity, value: v.to_string() })
    }
}

/// `value`, unless it is not a finite number (a divisor so small that the quotient overflows).
fn finite(quantity: &'static str, value: f64, divisor: &'static str) -> Result<f64> {
    if value.is_finite() {
        Ok(value)
    } else {
        Err(Error::RateNotFinite { quantity, value: value.to_string(), divisor })
    }
}

/// FLOP/s per GPU: `flops / time / gpus` (f64).
///
/// # Errors
/// [`Error::NotPositive`] for the time; [`Error::ZeroCount`] for `num_gpus == 0`;
/// [`Error::RateNotFinite`] when the time is so small that the rate is not a finite number.
///
/// # Example
/// ```
/// use thd::metrics::flops_per_second_per_gpu;
/// assert_eq!(flops_per_second_per_gpu(8_000, 0.5, 8)?, 2_000.0);
/// # Ok::<(), thd::Error>(())
/// ```
pub fn flops_per_second_per_gpu(flops: u128, time_s: f64, num_gpus: u64) -> Result<f64> {
    positive("time_s", time_s)?;
    if num_gpus == 0 {
        return Err(Error::ZeroCount { quantity: "num_gpus" });
    }
    finite("flops_per_second_per_gpu", flops as f64 / time_s / num_gpus as f64, "time_s")
}

/// Model FLOPs utilisation, in percent.
///
/// ```text
/// mfu_pct = 100 · flops / (step_time_s · num_gpus · peak_flops_per_gpu)
/// ```
///
/// # Errors
/// [`StepTiming::validate`]'s errors; [`Error::RateNotFinite`] when the time or the peak is so
/// small that the MFU is not a finite number.
///
/// # Example
/// ```
/// use thd::metrics::{StepTiming, mfu_pct};
/// let t = StepTiming { step_time_s: 1.0, num_gpus: 1, peak_flops_per_gpu: 989e12 };
/// let mfu = mfu_pct(897_304_567_480_320, &t)?; // bionemo og2-7B snapshot
/// assert!((mfu - 90.728).abs() < 1e-3);
/// # Ok::<(), thd::Error>(())
/// ```
pub fn mfu_pct(flops: u128, timing: &StepTiming) -> Result<f64> {
    timing.validate()?;
    let per_gpu = flops_per_second_per_gpu(flops, timing.step_time_s, timing.num_gpus)?;
    finite("mfu_pct", 100.0 * per_gpu / timing.peak_flops_per_gpu, "peak_flops_per_gpu")
}

/// Tokens per second per GPU (open-instruct `perf/tokens_per_second_per_gpu`, #1466).
///
/// ```text
/// tokens_per_second_per_gpu = tokens / time_s / num_gpus
/// ```
///
/// # Errors
/// [`Error::NotPositive`] for the time; [`Error::ZeroCount`] for `num_gpus == 0`;
/// [`Error::RateNotFinite`] when the time is so small that the rate is not a finite number.
///
/// # Example
/// ```
/// use thd::metrics::tokens_per_second_per_gpu;
/// assert_eq!(tokens_per_second_per_gpu(69_611, 1.0, 16)?, 4350.6875);
/// # Ok::<(), thd::Error>(())
/// ```
pub fn tokens_per_second_per_gpu(tokens: u64, time_s: f64, num_gpus: u64) -> Result<f64> {
    flops_per_second_per_gpu(u128::from(tokens), time_s, num_gpus)
}

/// Everything a logger reports for one step, from global FLOPs and token counts.
///
/// # Example
/// ```
/// use thd::metrics::{Flops, StepReport, StepTiming};
/// let t = StepTiming { step_time_s: 2.0, num_gpus: 4, peak_flops_per_gpu: 1e12 };
/// let r = StepReport::new(Flops { useful: 4e12 as u128, hardware: 6e12 as u128 }, 8000, &t)?;
/// assert_eq!((r.mfu_pct, r.mfu_padded_pct), (50.0, 75.0));
/// assert_eq!(r.tokens_per_second_per_gpu, 1000.0);
/// # Ok::<(), thd::Error>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct StepReport {
    /// The FLOPs the report is based on.
    pub flops: Flops,
    /// Useful TFLOP/s per GPU.
    pub tflops_per_gpu: f64,
    /// Hardware TFLOP/s per GPU.
    pub tflops_per_gpu_padded: f64,
    /// Useful MFU (%), `train/mfu_pct`.
    pub mfu_pct: f64,
    /// Hardware MFU (%), `train/mfu_padded_pct`.
    pub mfu_padded_pct: f64,
    /// Real tokens per second per GPU.
    pub tokens_per_second_per_gpu: f64,
}

impl StepReport {
    /// The report for one step of `flops` over `real_tokens` real tokens.
    ///
    /// # Errors
    /// [`StepTiming::validate`]'s errors; [`Error::RateNotFinite`] for a rate that is not a
    /// finite number.
    ///
    /// # Example
    /// ```
    /// # use thd::metrics::{Flops, StepReport, StepTiming};
    /// let t = StepTiming { step_time_s: f64::NAN, num_gpus: 1, peak_flops_per_gpu: 1.0 };
    /// assert!(StepReport::new(Flops::default(), 0, &t).is_err());
    /// ```
    pub fn new(flops: Flops, real_tokens: u64, timing: &StepTiming) -> Result<Self> {
        timing.validate()?;
        let (t, g) = (timing.step_time_s, timing.num_gpus);
        Ok(Self {
            flops,
            tflops_per_gpu: flops_per_second_per_gpu(flops.useful, t, g)? / 1e12,
            tflops_per_gpu_padded: flops_per_second_per_gpu(flops.hardware, t, g)? / 1e12,
            mfu_pct: mfu_pct(flops.useful, timing)?,
            mfu_padded_pct: mfu_pct(flops.hardware, timing)?,
            tokens_per_second_per_gpu: tokens_per_second_per_gpu(real_tokens, t, g)?,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timing_rejects_each_bad_quantity_by_name() {
        let ok = StepTiming { step_time_s: 1.0, num_gpus: 1, peak_flops_per_gpu: 1.0 };
        let cases = [
            (
                StepTiming { step_time_s: -1.0, ..ok },
                "step_time_s must be positive and finite, got -1",
            ),
            (
                StepTiming { step_time_s: f64::INFINITY, ..ok },
                "step_time_s must be positive and finite, got inf",
            ),
            (
                StepTiming { peak_flops_per_gpu: 0.0, ..ok },
                "peak_flops_per_gpu must be positive and finite, got 0",
            ),
            (StepTiming { num_gpus: 0, ..ok }, "num_gpus must be positive, got 0"),
        ];
        for (t, msg) in cases {
            assert_eq!(t.validate().unwrap_err().to_string(), msg);
        }
    }

    #[test]
    fn rates_that_overflow_f64_are_an_error_naming_the_divisor() {
        // Positive and finite, but subnormal: 1e20 FLOPs over 1e-320 s is past f64::MAX.
        let t = StepTiming { step_time_s: 1e-320, num_gpus: 1, peak_flops_per_gpu: 1.0 };
        let err = flops_per_second_per_gpu(100_000_000_000_000_000_000, t.step_time_s, 1);
        assert_eq!(
            err.unwrap_err().to_string(),
            "flops_per_second_per_gpu is not a finite number (inf): time_s is too small to divide by"
        );
        let t = StepTiming { step_time_s: 1.0, num_gpus: 1, peak_flops_per_gpu: 1e-308 };
        assert!(matches!(
            mfu_pct(100_000_000_000_000_000_000, &t),
            Err(Error::RateNotFinite { divisor: "peak_flops_per_gpu", .. })
        ));
    }

    #[test]
    fn mfu_scales_inversely_with_gpus_and_time() {
        let t = StepTiming { step_time_s: 1.0, num_gpus: 1, peak_flops_per_gpu: 100.0 };
        assert_eq!(mfu_pct(50, &t).unwrap(), 50.0);
        assert_eq!(mfu_pct(50, &StepTiming { num_gpus: 2, ..t }).unwrap(), 25.0);
        assert_eq!(mfu_pct(50, &StepTiming { step_time_s: 2.0, ..t }).unwrap(), 25.0);
    }
}
