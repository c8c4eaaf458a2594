use crate::{Error, Float, LabelConvention, LossSum, Result, packed_cross_entropy};

/// The CP-local loss: every rank's Σ NLL and valid-label count on its own shard.
///
/// ```text
/// loss = Σ_r nll_r / Σ_r count_r          (equals the loss on the whole batch)
/// ```
///
/// Not `(1/cp) Σ_r nll_r / count_r`, the mean of per-rank means: that is the classic bug, wrong
/// whenever the counts differ (the bug zoo in `properties` keeps it, `MeanOfRankMeans`).
#[derive(Debug, Clone, PartialEq, Default)]
pub struct CpLoss {
    /// One [`LossSum`] per rank, in rank order.
    pub per_rank: Vec<LossSum>,
}

impl CpLoss {
    /// Σ over ranks: the global Σ NLL and count.
    ///
    /// # Example
    /// ```
    /// use thd::LossSum;
    /// use thd::cp::CpLoss;
    /// let l = CpLoss { per_rank: vec![LossSum { nll: 0.8, count: 2 }, LossSum { nll: 1.4, count: 3 }] };
    /// assert_eq!(l.global().count, 5);
    /// assert!((l.loss() - 0.44).abs() < 1e-15);
    /// ```
    pub fn global(&self) -> LossSum {
        self.per_rank.iter().fold(LossSum::default(), |a, &b| a + b)
    }

    /// The global mean loss, `Σ nll / Σ count` (0 when nothing is valid).
    ///
    /// # Example
    /// ```
    /// use thd::{LossSum, cp::CpLoss};
    /// let l = CpLoss { per_rank: vec![LossSum { nll: 3.0, count: 1 }, LossSum { nll: 1.0, count: 3 }] };
    /// assert_eq!(l.loss(), 1.0);
    /// assert_eq!(CpLoss::default().loss(), 0.0);
    /// ```
    pub fn loss(&self) -> f64 {
        self.global().mean()
    }
}

/// Computes the CP-local loss from every rank's local logits and local labels.
///
/// **Input:** per rank, `logits: [T/cp, vocab]` and the labels *rolled before the split*
/// ([`crate::cp::shift_labels`], then [`crate::cp::CpLayout::split`]): with
/// [`LabelConvention::Shifted`] labels, `logits[t]` predicts `labels[t]` and no rank needs a
/// neighbour's token.
///
/// # Errors
/// [`Error::CpShardCount`] if `logits` and `labels` hold different numbers of ranks; the
/// errors of [`packed_cross_entropy`] for any rank.
///
/// # Example
/// ```
/// use thd::cp::cp_local_loss;
/// // Two ranks, vocabulary 2, equal logits: every valid label costs ln 2.
/// let logits = vec![vec![0.0f64; 4], vec![0.0f64; 4]];
/// let labels = vec![vec![1, -100], vec![0, 1]];
/// let loss = cp_local_loss(&logits, 2, &labels)?;
/// assert_eq!(loss.per_rank[1].count, 2);
/// assert!((loss.loss() - std::f64::consts::LN_2).abs() < 1e-12);
/// # Ok::<(), thd::Error>(())
/// ```
pub fn cp_local_loss<F: Float>(
    logits: &[Vec<F>],
    vocab: usize,
    labels: &[Vec<i64>],
) -> Result<CpLoss> {
    if logits.len() != labels.len() {
        return Err(Error::CpShardCount { got: logits.len(), cp: labels.len() });
    }
    let per_rank = logits
        .iter()
        .zip(labels)
        .map(|(x, y)| packed_cross_entropy(x, vocab, y, LabelConvention::Shifted))
        .collect::<Result<Vec<_>>>()?;
    Ok(CpLoss { per_rank })
}

/// Negative log-likelihood of every token's (shifted) label, 0 where the label is -100.
///
/// **Input:** `logits: [T, vocab]`, `labels: [T]` ([`LabelConvention::Shifted`]).
/// **Output:** `[T]` in f64, the per-token values a logger reduces.
///
/// # Errors
/// The errors of [`packed_cross_entropy`].
///
/// # Example
/// ```
/// use thd::cp::token_nll;
/// let nll = token_nll(&[0.0f32, 0.0, 0.0, 0.0], 2, &[1, -100])?;
/// assert!((nll[0] - std::f64::consts::LN_2).abs() < 1e-6);
/// assert_eq!(nll[1], 0.0);
/// # Ok::<(), thd::Error>(())
/// ```
pub fn token_nll<F: Float>(logits: &[F], vocab: usize, labels: &[i64]) -> Result<Vec<f64>> {
    // One call over everything validates shapes and labels with global indices.
    packed_cross_entropy(logits, vocab, labels, LabelConvention::Shifted)?;
    labels
        .iter()
        .enumerate()
        .map(|(t, y)| {
            let row = &logits[t * vocab..(t + 1) * vocab];
            Ok(packed_cross_entropy(row, vocab, std::slice::from_ref(y), LabelConvention::Shifted)?
                .nll)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn empty_ranks_do_not_make_nan() {
        let l = CpLoss { per_rank: vec![LossSum::default(), LossSum { nll: 2.0, count: 1 }] };
        assert_eq!(l.loss(), 2.0);
        assert_eq!(CpLoss::default().loss(), 0.0);
    }

    #[test]
    fn shard_count_mismatch_is_an_error() {
        let r = cp_local_loss::<f64>(&[vec![]], 2, &[]);
        assert_eq!(r, Err(Error::CpShardCount { got: 1, cp: 0 }));
    }
}
