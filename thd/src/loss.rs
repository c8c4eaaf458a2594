//! Packed cross-entropy: Σ NLL and the count of valid labels over a THD batch.
//!
//! A loss is returned as a [`LossSum`], never as a mean, so that sums from context-parallel
//! ranks and micro-batches add up exactly; take [`LossSum::mean`] once, at the end.

use std::ops::{Add, AddAssign};

use crate::{Error, Float, IGNORE_INDEX, LabelConvention, Result};

/// Σ NLL over valid labels and their count: the quantity that adds across CP ranks and
/// micro-batches (a mean of means does not).
///
/// # Example
/// ```
/// # use thd::LossSum;
/// let rank0 = LossSum { nll: 3.0, count: 1 };
/// let rank1 = LossSum { nll: 1.0, count: 3 };
/// assert_eq!((rank0 + rank1).mean(), 1.0); // not (3.0 + 1.0/3.0) / 2
/// assert_eq!(LossSum::default().mean(), 0.0); // all ignored: 0, never NaN
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct LossSum {
    /// Σ of the negative log-likelihoods of the valid labels.
    pub nll: f64,
    /// Number of valid labels (not -100).
    pub count: u64,
}

impl LossSum {
    /// The mean loss `nll / count`, or 0.0 when `count == 0` (never NaN).
    ///
    /// # Example
    /// ```
    /// # use thd::LossSum;
    /// assert_eq!(LossSum { nll: 6.0, count: 4 }.mean(), 1.5);
    /// ```
    pub fn mean(&self) -> f64 {
        if self.count == 0 { 0.0 } else { self.nll / self.count as f64 }
    }
}

impl Add for LossSum {
    type Output = Self;

    fn add(self, rhs: Self) -> Self {
        Self { nll: self.nll + rhs.nll, count: self.count + rhs.count }
    }
}

impl AddAssign for LossSum {
    fn add_assign(&mut self, rhs: Self) {
        *self = *self + rhs;
    }
}

/// Cross-entropy summed over the valid labels of a packed batch.
///
/// **Input:** `logits: [T, vocab]` row-major, `labels: [T]`. **Output:** Σ NLL (in f64) and the
/// count of valid labels.
///
/// ```text
/// Unshifted (HF):                  logits[t] predicts labels[t + 1],  t in 0..T-1
/// Shifted (Megatron / TE / AReaL): logits[t] predicts labels[t],      t in 0..T
/// nll(t, y) = logsumexp(logits[t]) - logits[t][y]                      (y == -100: skipped)
/// ```
///
/// The function sees no segment offsets: keeping a label from crossing a document boundary
/// is the collator's job (-100 at each segment start for `Unshifted`, at each segment end for
/// `Shifted`), which [`crate::PackedBatch`] checks.
///
/// # Errors
/// [`Error::ZeroVocab`] if `vocab == 0`; [`Error::ShapeMismatch`] unless
/// `logits.len() == labels.len() * vocab`; [`Error::LabelOutOfRange`] for the first label
/// (in token order, target or not) that is neither -100 nor in `[0, vocab)`.
///
/// # Example
/// ```
/// use thd::{LabelConvention, packed_cross_entropy};
/// // Two tokens, vocabulary of 2: equal logits, so each valid label costs ln 2.
/// let logits = [0.0f32, 0.0, 5.0, 5.0];
/// let loss = packed_cross_entropy(&logits, 2, &[1, -100], LabelConvention::Shifted)?;
/// assert_eq!(loss.count, 1);
/// assert!((loss.mean() - std::f64::consts::LN_2).abs() < 1e-6);
/// # Ok::<(), thd::Error>(())
/// ```
pub fn packed_cross_entropy<F: Float>(
    logits: &[F],
    vocab: usize,
    labels: &[i64],
    convention: LabelConvention,
) -> Result<LossSum> {
    if vocab == 0 {
        return Err(Error::ZeroVocab);
    }
    let t = labels.len();
    if logits.len() != t * vocab {
        return Err(Error::ShapeMismatch {
            key: "logits",
            len: logits.len(),
            expected: t * vocab,
            shape: format!("[{t}, {vocab}] for {t} labels"),
        });
    }
    if let Some((index, &label)) = labels
        .iter()
        .enumerate()
        .find(|&(_, &y)| y != IGNORE_INDEX && (y < 0 || y as u64 >= vocab as u64))
    {
        return Err(Error::LabelOutOfRange { index, label, vocab });
    }
    let target = |row: usize| -> i64 {
        match convention {
            LabelConvention::Unshifted => labels.get(row + 1).copied().unwrap_or(IGNORE_INDEX),
            LabelConvention::Shifted => labels[row],
        }
    };
    let mut sum = LossSum::default();
    for (row, x) in logits.chunks_exact(vocab).enumerate() {
        let y = target(row);
        if y == IGNORE_INDEX {
            continue;
        }
        let mx = x.iter().fold(f64::NEG_INFINITY, |m, &e| m.max(e.to_f64()));
        let s: f64 = x.iter().map(|&e| (e.to_f64() - mx).exp()).sum();
        sum += LossSum { nll: mx + s.ln() - x[y as usize].to_f64(), count: 1 };
    }
    Ok(sum)
}
