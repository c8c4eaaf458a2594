//! Packed cross-entropy: Σ NLL and the count of valid labels over a THD batch.
//!
//! A loss is returned as a [`LossSum`], never as a mean, so that sums from context-parallel
//! ranks and micro-batches add up exactly; take [`LossSum::mean`] once, at the end.

use std::ops::{Add, AddAssign};

use rayon::prelude::*;

use crate::float::{Isa, prefetch};
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
    Ok(sum_rows(Isa::detect(), logits, vocab, labels, convention))
}

/// Rows per work item: the per-item sums are added in row order, so the result does not
/// depend on how rayon splits the work.
const ROWS_PER_ITEM: usize = 16;
/// Elements of a row summed between two prefetches of the next row.
const PREFETCH_CHUNK: usize = 1024;

/// The loss of already-validated inputs with the kernels of `isa`.
fn sum_rows<F: Float>(
    isa: Isa,
    logits: &[F],
    vocab: usize,
    labels: &[i64],
    convention: LabelConvention,
) -> LossSum {
    let target = |row: usize| -> i64 {
        match convention {
            LabelConvention::Unshifted => labels.get(row + 1).copied().unwrap_or(IGNORE_INDEX),
            LabelConvention::Shifted => labels[row],
        }
    };
    let partial: Vec<LossSum> = logits
        .par_chunks(ROWS_PER_ITEM * vocab)
        .enumerate()
        .map(|(item, rows)| {
            let mut sum = LossSum::default();
            for (i, x) in rows.chunks_exact(vocab).enumerate() {
                let y = target(item * ROWS_PER_ITEM + i);
                if y == IGNORE_INDEX {
                    continue;
                }
                // logsumexp(x) - x[y], with the max taken out so no exp overflows. The next
                // row is prefetched piece by piece while this one's exponentials run.
                let next = rows.get((i + 1) * vocab..(i + 2) * vocab).unwrap_or(&[]);
                let mut next_chunks = next.chunks(PREFETCH_CHUNK);
                let m = F::max_of(isa, x);
                let mut s = 0.0;
                for chunk in x.chunks(PREFETCH_CHUNK) {
                    prefetch(next_chunks.next().unwrap_or(&[]));
                    s += F::sum_exp_sub(isa, chunk, m);
                }
                let lse = m.to_f64() + s.ln();
                sum += LossSum { nll: lse - x[y as usize].to_f64(), count: 1 };
            }
            sum
        })
        .collect();
    partial.into_iter().fold(LossSum::default(), |a, b| a + b)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Straight from the formula, in f64 with the standard library's exp and ln.
    fn naive(logits: &[f64], vocab: usize, targets: impl Iterator<Item = (usize, i64)>) -> LossSum {
        let mut sum = LossSum::default();
        for (row, y) in targets.filter(|&(_, y)| y != IGNORE_INDEX) {
            let x = &logits[row * vocab..][..vocab];
            let m = x.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
            let lse = m + x.iter().map(|v| (v - m).exp()).sum::<f64>().ln();
            sum += LossSum { nll: lse - x[y as usize], count: 1 };
        }
        sum
    }

    #[test]
    fn two_token_vocab_by_hand() {
        // Row 0: logits (0, ln 3): p = (1/4, 3/4). Row 1: logits (2, 2): p = (1/2, 1/2).
        let logits = [0.0, 3f64.ln(), 2.0, 2.0];
        let shifted = packed_cross_entropy(&logits, 2, &[0, 1], LabelConvention::Shifted).unwrap();
        assert_eq!(shifted.count, 2);
        assert!((shifted.nll - (4f64.ln() + 2f64.ln())).abs() < 1e-15, "{shifted:?}");
        // Unshifted: row 0 predicts labels[1] = 1 (p = 3/4); row 1 predicts nothing.
        let unshifted =
            packed_cross_entropy(&logits, 2, &[0, 1], LabelConvention::Unshifted).unwrap();
        assert_eq!(unshifted.count, 1);
        assert!((unshifted.nll - (4.0f64 / 3.0).ln()).abs() < 1e-15, "{unshifted:?}");
    }

    #[test]
    fn all_ignored_is_zero_not_nan() {
        let loss =
            packed_cross_entropy(&[1.0f32; 6], 3, &[-100, -100], LabelConvention::Shifted).unwrap();
        assert_eq!(loss, LossSum { nll: 0.0, count: 0 });
        assert_eq!(loss.mean(), 0.0);
        let empty = packed_cross_entropy::<f64>(&[], 3, &[], LabelConvention::Unshifted).unwrap();
        assert_eq!(empty.mean(), 0.0);
    }

    #[test]
    fn errors_name_index_and_value() {
        let l = [0.0f64; 6];
        assert_eq!(
            packed_cross_entropy(&l, 3, &[0, 3], LabelConvention::Shifted),
            Err(Error::LabelOutOfRange { index: 1, label: 3, vocab: 3 })
        );
        assert_eq!(
            packed_cross_entropy(&l, 3, &[-1, 0], LabelConvention::Unshifted),
            Err(Error::LabelOutOfRange { index: 0, label: -1, vocab: 3 })
        );
        assert_eq!(
            packed_cross_entropy(&l, 0, &[], LabelConvention::Shifted),
            Err(Error::ZeroVocab)
        );
        assert!(matches!(
            packed_cross_entropy(&l, 4, &[0, 0], LabelConvention::Shifted),
            Err(Error::ShapeMismatch { key: "logits", len: 6, expected: 8, .. })
        ));
        let msg =
            packed_cross_entropy(&l, 3, &[0, 7], LabelConvention::Shifted).unwrap_err().to_string();
        assert_eq!(msg, "labels[1]=7 is outside the vocabulary [0, 3) and is not -100");
    }

    #[test]
    fn kernels_match_naive_f64_and_f32() {
        // Odd vocab (SIMD tails), large logits (exp overflow without the max), many rows
        // (several work items), some ignored labels.
        let (t, vocab) = (45, 1037);
        let logits: Vec<f64> =
            (0..t * vocab).map(|i| ((i * 2654435761) % 1000) as f64 * 0.09 - 40.0).collect();
        let labels: Vec<i64> = (0..t)
            .map(|i| if i % 7 == 3 { IGNORE_INDEX } else { ((i * 31) % vocab) as i64 })
            .collect();
        let l32: Vec<f32> = logits.iter().map(|&x| x as f32).collect();
        for conv in [LabelConvention::Shifted, LabelConvention::Unshifted] {
            let targets: Vec<(usize, i64)> = match conv {
                LabelConvention::Shifted => labels.iter().copied().enumerate().collect(),
                LabelConvention::Unshifted => labels[1..].iter().copied().enumerate().collect(),
            };
            let want = naive(&logits, vocab, targets.into_iter());
            for isa in Isa::all_available() {
                let got = sum_rows(isa, &logits, vocab, &labels, conv);
                assert_eq!(got.count, want.count);
                assert!((got.nll - want.nll).abs() <= 1e-12 * want.nll.abs(), "{isa:?} {conv:?}");
                let got32 = sum_rows(isa, &l32, vocab, &labels, conv);
                assert!((got32.mean() - want.mean()).abs() <= 1e-5 * want.mean().abs() + 1e-6);
            }
        }
    }

    #[test]
    fn masked_vocab_entries_contribute_nothing() {
        // Padded vocabulary entries masked to -inf (as tensor-parallel vocab padding does).
        for isa in Isa::all_available() {
            let mut row = vec![f32::NEG_INFINITY; 37];
            row[0] = 0.0;
            row[36] = 0.0;
            let loss = sum_rows(isa, &row, 37, &[36], LabelConvention::Shifted);
            assert!((loss.nll - std::f64::consts::LN_2).abs() < 1e-7, "{isa:?} {loss:?}");
        }
    }

    #[test]
    fn sums_add_across_ranks() {
        let mut acc = LossSum::default();
        acc += LossSum { nll: 2.0, count: 1 };
        acc += LossSum { nll: 4.0, count: 3 };
        assert_eq!(acc, LossSum { nll: 6.0, count: 4 });
        assert_eq!(acc.mean(), 1.5);
    }
}
