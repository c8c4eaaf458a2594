use crate::cp::CpLayout;
use crate::{Error, IGNORE_INDEX, Result};

/// What an SFT logger reports for one batch (AReaL's `sft/*` stats).
///
/// ```text
/// n_tokens       = Σ sᵢ over real segments         (real tokens: no padding, no mock segment)
/// n_valid_tokens = # labels ≠ -100                 (shifted labels)
/// prompt_tokens  = n_tokens − n_valid_tokens
/// loss           = Σ nll / n_valid_tokens          (0 when nothing is valid); loss_min / loss_max per token
/// ppl_j          = exp(Σ_{seq j} nll / count_j)    for real sequences with count_j > 0 (n_seqs of them)
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct LoggerStats {
    /// Real sequences with at least one valid label.
    pub n_seqs: u64,
    /// Real tokens.
    pub n_tokens: u64,
    /// Valid labels.
    pub n_valid_tokens: u64,
    /// Real tokens without a valid label (`n_tokens − n_valid_tokens`, saturating).
    pub prompt_tokens: u64,
    /// Mean NLL over valid labels.
    pub loss: f64,
    /// Smallest per-token NLL, if any label is valid.
    pub loss_min: Option<f64>,
    /// Largest per-token NLL, if any label is valid.
    pub loss_max: Option<f64>,
    /// Mean of the per-sequence perplexities, if `n_seqs > 0`.
    pub ppl_avg: Option<f64>,
    /// Smallest per-sequence perplexity.
    pub ppl_min: Option<f64>,
    /// Largest per-sequence perplexity.
    pub ppl_max: Option<f64>,
}

/// Logger statistics computed the CP-invariant way: counts from the global layout, and every
/// ratio from numerators and denominators summed over all ranks (per sequence for the
/// perplexity), so the result is the same for every `cp`. Reporting one rank's shard as the
/// batch instead is AReaL #1242 (`properties::zoo::rank_local_stats` keeps that bug).
///
/// **Input:** per rank, the local per-token NLL (e.g. [`crate::cp::token_nll`]) and the local
/// shifted labels, both `[T/cp]`.
///
/// # Errors
/// [`Error::CpShardCount`] unless there is one `nll` and one `labels` per rank;
/// [`Error::CpShardLength`] unless each has `T/cp` entries.
///
/// # Example
/// ```
/// use thd::CuSeqlens;
/// use thd::cp::{CpLayout, logger_stats};
/// // AReaL #1242: lengths [5, 3] padded to [8, 4] for cp = 2; nll 0.1·(1..8) on the real tokens.
/// let real = CuSeqlens::try_from(vec![0, 5, 8])?;
/// let padded = CuSeqlens::try_from(vec![0, 8, 12])?;
/// let layout = CpLayout::new(&real, Some(&padded), 2)?;
/// let nll = [0.1, 0.2, 0.3, 0.4, 0.5, 0.0, 0.0, 0.0, 0.6, 0.7, 0.8, 0.0];
/// let labels = [-100, 1, 1, 1, -100, -100, -100, -100, 1, 1, -100, -100];
/// let (nll, labels) = (layout.split_all(&nll, 1)?, layout.split_all(&labels, 1)?);
/// let stats = logger_stats(&layout, &nll, &labels)?;
/// assert_eq!((stats.n_tokens, stats.n_valid_tokens, stats.prompt_tokens), (8, 5, 3));
/// assert!((stats.loss - 0.44).abs() < 1e-12);
/// # Ok::<(), thd::Error>(())
/// ```
pub fn logger_stats(
    layout: &CpLayout,
    nll: &[Vec<f64>],
    labels: &[Vec<i64>],
) -> Result<LoggerStats> {
    for shards in [nll.len(), labels.len()] {
        if shards != layout.cp() {
            return Err(Error::CpShardCount { got: shards, cp: layout.cp() });
        }
    }
    let mut acc = Acc::new(layout.num_segments());
    for rank in 0..layout.cp() {
        acc.add_rank(layout, rank, &nll[rank], &labels[rank])?;
    }
    let n_tokens: usize =
        (0..layout.num_real_segments()).map(|i| layout.real().segment(i).len()).sum();
    Ok(acc.finish(n_tokens as u64, layout.num_real_segments()))
}

/// Running sums over the valid tokens of one or more ranks.
struct Acc {
    nll: f64,
    count: u64,
    min: Option<f64>,
    max: Option<f64>,
    seq: Vec<(f64, u64)>,
}

impl Acc {
    fn new(segments: usize) -> Self {
        Self { nll: 0.0, count: 0, min: None, max: None, seq: vec![(0.0, 0); segments] }
    }

    fn add_rank(
        &mut self,
        layout: &CpLayout,
        rank: usize,
        nll: &[f64],
        labels: &[i64],
    ) -> Result<()> {
        let expected = layout.local_tokens();
        for len in [nll.len(), labels.len()] {
            if len != expected {
                return Err(Error::CpShardLength { rank, len, expected });
            }
        }
        let local = layout.local_cu_seqlens();
        for (i, r) in local.segments().enumerate() {
            for t in r {
                if labels[t] == IGNORE_INDEX {
                    continue;
                }
                let x = nll[t];
                self.nll += x;
                self.count += 1;
                self.min = Some(self.min.map_or(x, |m| m.min(x)));
                self.max = Some(self.max.map_or(x, |m| m.max(x)));
                self.seq[i].0 += x;
                self.seq[i].1 += 1;
            }
        }
        Ok(())
    }

    fn finish(self, n_tokens: u64, num_real: usize) -> LoggerStats {
        let ppl: Vec<f64> = self.seq[..num_real]
            .iter()
            .filter(|&&(_, c)| c > 0)
            .map(|&(s, c)| (s / c as f64).exp())
            .collect();
        let n_seqs = ppl.len() as u64;
        LoggerStats {
            n_seqs,
            n_tokens,
            n_valid_tokens: self.count,
            prompt_tokens: n_tokens.saturating_sub(self.count),
            loss: if self.count == 0 { 0.0 } else { self.nll / self.count as f64 },
            loss_min: self.min,
            loss_max: self.max,
            ppl_avg: (n_seqs > 0).then(|| ppl.iter().sum::<f64>() / n_seqs as f64),
            ppl_min: ppl.iter().copied().reduce(f64::min),
            ppl_max: ppl.iter().copied().reduce(f64::max),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::CuSeqlens;

    #[test]
    fn stats_are_the_same_for_every_cp() {
        let real = [0i64, 5, 8, 9];
        let padded = [0i64, 8, 16, 24];
        let real = CuSeqlens::from_i64("cu_seqlens", &real).unwrap();
        let padded = CuSeqlens::from_i64("cu_seqlens_padded", &padded).unwrap();
        let nll: Vec<f64> = (0..24).map(|t| 0.05 * t as f64).collect();
        let labels: Vec<i64> = (0..24).map(|t| if t % 3 == 0 { -100 } else { 1 }).collect();
        let one = CpLayout::new(&real, Some(&padded), 1).unwrap();
        let base =
            logger_stats(&one, std::slice::from_ref(&nll), std::slice::from_ref(&labels)).unwrap();
        for cp in [2, 4] {
            let l = CpLayout::new(&real, Some(&padded), cp).unwrap();
            let s =
                logger_stats(&l, &l.split_all(&nll, 1).unwrap(), &l.split_all(&labels, 1).unwrap())
                    .unwrap();
            assert_eq!(
                (s.n_tokens, s.n_valid_tokens, s.n_seqs),
                (base.n_tokens, base.n_valid_tokens, base.n_seqs)
            );
            assert!((s.loss - base.loss).abs() < 1e-12);
            assert!((s.ppl_avg.unwrap() - base.ppl_avg.unwrap()).abs() < 1e-12);
        }
    }

    #[test]
    fn bad_shards_are_errors() {
        let cu = CuSeqlens::try_from(vec![0, 4]).unwrap();
        let l = CpLayout::new(&cu, None, 2).unwrap();
        assert_eq!(
            logger_stats(&l, &[vec![]], &[vec![]]),
            Err(Error::CpShardCount { got: 1, cp: 2 })
        );
        assert_eq!(
            logger_stats(&l, &[vec![0.0; 2], vec![0.0]], &[vec![1; 2], vec![1; 2]]),
            Err(Error::CpShardLength { rank: 1, len: 1, expected: 2 })
        );
    }
}
