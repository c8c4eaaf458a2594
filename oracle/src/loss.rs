//! Cross-entropy over packed sequences, with labels shifted *within* each sequence.
//!
//! ```text
//! off[0] = 0, off[b+1] = off[b] + len[b]
//! for every sequence b and every t in off[b] .. off[b+1] - 1:      (the last token predicts nothing)
//!     y = labels[t + 1];  skip if y == -100
//!     nll += logsumexp(logits[t, :]) - logits[t, y]                  (in f64, compensated sum)
//!     count += 1
//! mean = nll / count, or 0 when count == 0
//! ```
//!
//! Tokens past `Σ len` (padding after the last sequence) are never read.

use candle_core::{DType, Result, Tensor};

use crate::error::Error;

/// Label value that is ignored (PyTorch's `ignore_index` default).
pub const IGNORE_INDEX: i64 = -100;

/// Logits converted to f64 at once: 2²⁰ values (8 MiB), whole rows, at least one row.
const CHUNK_VALUES: usize = 1 << 20;

/// The summed negative log-likelihood and the number of labels it sums over.
///
/// Sums, not means, are what compose: across CP ranks or micro-batches the global loss is
/// `Σ nll_sum / Σ count`.
///
/// # Example
/// ```
/// let ce = oracle::CrossEntropy { nll_sum: 3.0, count: 2 };
/// assert_eq!(ce.mean(), 1.5);
/// assert_eq!(oracle::CrossEntropy { nll_sum: 0.0, count: 0 }.mean(), 0.0);
/// ```
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct CrossEntropy {
    /// Σ −log p(label) over the valid label positions.
    pub nll_sum: f64,
    /// Number of valid label positions.
    pub count: u64,
}

impl CrossEntropy {
    /// `nll_sum / count`; 0.0 when no label is valid (never NaN).
    pub fn mean(&self) -> f64 {
        if self.count == 0 { 0.0 } else { self.nll_sum / self.count as f64 }
    }
}

/// Cross-entropy of packed sequences, each predicting its own next token.
///
/// **Input:** `logits: [T, V]` (any float dtype); `labels: [T]`, token `t`'s own id or -100
/// (ignored); `seqlens`: per-sequence lengths, `Σ ≤ T`, zeros allowed.
/// **Output:** Σ NLL (accumulated in f64) and the count of valid labels.
///
/// Within each sequence, `logits[t]` predicts `labels[t + 1]`; the last position of a sequence
/// predicts nothing, so no label ever comes from the next sequence. The log-softmax, gather,
/// mask and sum are written out on f64 copies of the logits; the sum is compensated (Neumaier).
///
/// # Errors
/// An [`Error`] (wrapped in [`candle_core::Error`]) if `logits` is not a rank-2
/// float tensor, `labels.len() != T`, `Σ seqlens > T`, or a used label is outside `0..V`.
///
/// # Example
/// ```
/// use candle_core::{Device, Tensor};
/// // Two sequences [a, b] and [c]; two classes with equal logits: each prediction costs ln 2.
/// let logits = Tensor::zeros((3, 2), candle_core::DType::F64, &Device::Cpu)?;
/// let ce = oracle::cross_entropy(&logits, &[0, 1, 1], &[2, 1])?;
/// // Only token 0 predicts (label 1); token 1 ends sequence 0, token 2 ends sequence 1.
/// assert_eq!(ce.count, 1);
/// assert!((ce.nll_sum - std::f64::consts::LN_2).abs() < 1e-15);
/// # Ok::<(), candle_core::Error>(())
/// ```
pub fn cross_entropy(logits: &Tensor, labels: &[i64], seqlens: &[u32]) -> Result<CrossEntropy> {
    if logits.rank() != 2 {
        let shape = logits.dims().to_vec();
        return Err(Error::Rank { tensor: "logits", expected: 2, layout: "[T, V]", shape }.into());
    }
    if !logits.dtype().is_float() {
        let dtype = format!("{:?}", logits.dtype());
        return Err(Error::NotFloat { tensor: "logits", dtype }.into());
    }
    let (tokens, vocab) = logits.dims2()?;
    if labels.len() != tokens {
        return Err(Error::LabelCount { labels: labels.len(), rows: tokens }.into());
    }
    let sum: u64 = seqlens.iter().map(|&s| u64::from(s)).sum();
    if sum > tokens as u64 {
        let err = Error::TooManyTokens { lengths: "seqlens", sum, tensor: "logits", tokens };
        return Err(err.into());
    }
    let real = sum as usize;

    // target[t] = the label that position t predicts, or None.
    let mut target: Vec<Option<u32>> = vec![None; real];
    let mut start = 0usize;
    for &len in seqlens {
        let end = start + len as usize;
        for t in start..end.saturating_sub(1) {
            let y = labels[t + 1];
            if y == IGNORE_INDEX {
                continue;
            }
            if y < 0 || y >= vocab as i64 {
                return Err(Error::LabelOutOfRange { label: y, token: t + 1, vocab }.into());
            }
            target[t] = Some(y as u32);
        }
        start = end;
    }

    let mut nll_sum = CompensatedSum::default();
    let mut count = 0u64;
    let chunk_rows = (CHUNK_VALUES / vocab.max(1)).max(1);
    for (c, chunk) in target.chunks(chunk_rows).enumerate() {
        if chunk.iter().all(Option::is_none) {
            continue;
        }
        let rows = chunk.len();
        let x = logits.narrow(0, c * chunk_rows, rows)?.to_dtype(DType::F64)?; // [n, V]
        // log_softmax(x) = (x - max) - log Σ exp(x - max)
        let shifted = x.broadcast_sub(&x.max_keepdim(1)?)?;
        let log_z = shifted.exp()?.sum_keepdim(1)?.log()?;
        let log_p = shifted.broadcast_sub(&log_z)?;
        // Gather each row's target (index 0 stands in for ignored rows, which are skipped).
        let index: Vec<u32> = chunk.iter().map(|y| y.unwrap_or(0)).collect();
        let index = Tensor::from_vec(index, (rows, 1), x.device())?;
        let picked = log_p.gather(&index, 1)?.flatten_all()?.to_vec1::<f64>()?;
        for (log_p_y, y) in picked.iter().zip(chunk) {
            if y.is_some() {
                nll_sum.add(-log_p_y);
                count += 1;
            }
        }
    }
    Ok(CrossEntropy { nll_sum: nll_sum.total(), count })
}

/// Neumaier's compensated sum: the rounding error of each addition is carried along, so the
/// total of n terms is within a few ulps instead of `n·ε` (ndarray's reference uses Kahan).
#[derive(Debug, Default)]
struct CompensatedSum {
    sum: f64,
    carry: f64,
}

impl CompensatedSum {
    fn add(&mut self, x: f64) {
        let t = self.sum + x;
        self.carry +=
            if self.sum.abs() >= x.abs() { (self.sum - t) + x } else { (x - t) + self.sum };
        self.sum = t;
    }

    fn total(&self) -> f64 {
        self.sum + self.carry
    }
}
