use std::ops::{Add, AddAssign};

use serde::{Deserialize, Serialize};

use super::CausalConvention;
use crate::{Error, IGNORE_INDEX, LabelConvention, PackedBatch, Result, SeqLens};

/// Attention work of a set of sequences, in exact integers.
///
/// ```text
/// seqs        = number of sequences
/// tokens      = Σ sᵢ
/// sum_squares = Σ sᵢ²
/// triangle    = Σ sᵢ(sᵢ+1)/2
/// ```
///
/// # Example
/// ```
/// use thd::metrics::AttnSums;
/// let w = AttnSums::of([3u64, 5, 7]);
/// assert_eq!((w.seqs, w.tokens, w.sum_squares, w.triangle), (3, 15, 83, 49));
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
pub struct AttnSums {
    /// Number of sequences.
    pub seqs: u64,
    /// `Σ sᵢ`.
    pub tokens: u64,
    /// `Σ sᵢ²`.
    pub sum_squares: u128,
    /// `Σ sᵢ(sᵢ+1)/2`.
    pub triangle: u128,
}

impl AttnSums {
    /// The sums over `lens`.
    ///
    /// # Example
    /// ```
    /// # use thd::metrics::AttnSums;
    /// assert_eq!(AttnSums::of([512u64]).sum_squares, 512 * 512);
    /// ```
    pub fn of<I: IntoIterator<Item = u64>>(lens: I) -> Self {
        lens.into_iter().fold(Self::default(), |acc, s| acc + Self::one(s))
    }

    /// The sums of `rows` sequences of `s` tokens each (a dense BSHD batch).
    ///
    /// # Example
    /// ```
    /// # use thd::metrics::AttnSums;
    /// assert_eq!(AttnSums::repeated(2, 512), AttnSums::of([512u64, 512]));
    /// ```
    pub fn repeated(rows: u64, s: u64) -> Self {
        let one = Self::one(s);
        let r = u128::from(rows);
        Self {
            seqs: rows,
            tokens: rows * s,
            sum_squares: one.sum_squares * r,
            triangle: one.triangle * r,
        }
    }

    fn one(s: u64) -> Self {
        let w = u128::from(s);
        Self { seqs: 1, tokens: s, sum_squares: w * w, triangle: w * (w + 1) / 2 }
    }

    /// Twice the counted query–key pairs under `causal` (see
    /// [`CausalConvention::pairs_x2`]): `2Σs²`, `Σs²` or `Σs(s+1)`.
    ///
    /// # Example
    /// ```
    /// # use thd::metrics::{AttnSums, CausalConvention};
    /// let w = AttnSums::of([3u64, 5]);
    /// assert_eq!(w.pairs_x2(CausalConvention::Half), 34);
    /// assert_eq!(w.pairs_x2(CausalConvention::ExactTriangle), 42);
    /// ```
    pub fn pairs_x2(&self, causal: CausalConvention) -> u128 {
        match causal {
            CausalConvention::None => 2 * self.sum_squares,
            CausalConvention::Half => self.sum_squares,
            CausalConvention::ExactTriangle => 2 * self.triangle,
        }
    }

    /// [`AttnSums::pairs_x2`], or `None` past `u128`.
    ///
    /// # Example
    /// ```
    /// # use thd::metrics::{AttnSums, CausalConvention};
    /// assert_eq!(AttnSums::of([3u64]).checked_pairs_x2(CausalConvention::None), Some(18));
    /// let huge = AttnSums { sum_squares: u128::MAX, ..AttnSums::default() };
    /// assert_eq!(huge.checked_pairs_x2(CausalConvention::None), None);
    /// ```
    pub fn checked_pairs_x2(&self, causal: CausalConvention) -> Option<u128> {
        match causal {
            CausalConvention::None => self.sum_squares.checked_mul(2),
            CausalConvention::Half => Some(self.sum_squares),
            CausalConvention::ExactTriangle => self.triangle.checked_mul(2),
        }
    }
}

impl Add for AttnSums {
    type Output = Self;
    fn add(self, o: Self) -> Self {
        Self {
            seqs: self.seqs + o.seqs,
            tokens: self.tokens + o.tokens,
            sum_squares: self.sum_squares + o.sum_squares,
            triangle: self.triangle + o.triangle,
        }
    }
}

impl AddAssign for AttnSums {
    fn add_assign(&mut self, o: Self) {
        *self = *self + o;
    }
}

/// Which sequences the attention kernel is made to compute: the hardware side of the WORK
/// invariant.
///
/// # Example
/// ```
/// use thd::metrics::HardwareView;
/// assert_eq!(HardwareView::default(), HardwareView::Varlen);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum HardwareView {
    /// A varlen kernel: every segment, mock ones included, at its padded (storage) length.
    #[default]
    Varlen,
    /// The kernel sees each pack (row) as one sequence of `T` tokens (no `cu_seqlens` passed,
    /// or BSHD).
    WholePack,
}

/// Token and attention counts of one batch (or of many, summed), computed from the global,
/// pre-CP layout so that every count is the same for any CP size.
///
/// ```text
/// real segments   i < num_real_seqs (all segments when it is absent); the rest are mock
/// real_tokens     Σ_{real i} sᵢ                       sᵢ from cu_seqlens (real lengths)
/// padded_tokens   T, the stored tokens of the row(s) (padding, mock segments, tail)
/// valid_labels    positions whose loss target is not -100:
///                   Unshifted: #{t ≥ 1 : labels[t] ≠ -100}   (logits[t-1] predicts labels[t])
///                   Shifted:   #{t : labels[t] ≠ -100}
/// useful          AttnSums over real segments, real lengths sᵢ
/// hardware        Varlen:    AttnSums over all segments, padded lengths pᵢ (mock included)
///                 WholePack: AttnSums of one sequence of T tokens per row
/// ```
///
/// `useful ≤ hardware` under every view and convention (the WORK invariant), with equality
/// exactly when there is no padding and no mock segment (and, for `WholePack`, one segment).
///
/// # Example
/// ```
/// use thd::{PackedBatch, PackedBatchParts};
/// use thd::metrics::{BatchWork, HardwareView};
/// // bionemo pad_to_multiple_of=8 on 5/6/4 tokens: one mock segment of 1 token (#1561).
/// let batch = PackedBatch::new(PackedBatchParts {
///     input_ids: vec![0; 16],
///     labels: vec![-100; 16],
///     cu_seqlens: vec![0, 5, 11, 15, 16],
///     num_real_seqs: Some(3),
///     ..Default::default()
/// })?;
/// let w = BatchWork::from_batch(&batch);
/// assert_eq!(w.useful.sum_squares, 77);                        // 25 + 36 + 16
/// assert_eq!(w.hardware(HardwareView::Varlen).sum_squares, 78); // + the mock's 1
/// assert_eq!(w.hardware(HardwareView::WholePack).sum_squares, 256);
/// assert_eq!((w.real_tokens, w.padded_tokens), (15, 16));
/// # Ok::<(), thd::Error>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
pub struct BatchWork {
    /// Tokens of real segments.
    pub real_tokens: u64,
    /// Stored tokens, all padding included.
    pub padded_tokens: u64,
    /// Loss positions with a valid target.
    pub valid_labels: u64,
    /// Attention work of real segments at real lengths.
    pub useful: AttnSums,
    /// Attention work of all segments at padded lengths.
    pub hardware_varlen: AttnSums,
    /// Attention work of each row as one sequence.
    pub hardware_whole_pack: AttnSums,
}

impl BatchWork {
    /// The counts of one validated pack.
    ///
    /// # Example
    /// ```
    /// use thd::{PackedBatch, PackedBatchParts};
    /// use thd::metrics::BatchWork;
    /// // TE CP padding: real 3 and 2, padded to 4 each.
    /// let b = PackedBatch::new(PackedBatchParts {
    ///     input_ids: vec![1, 2, 3, 0, 5, 6, 0, 0],
    ///     labels: vec![-100, 2, 3, -100, -100, 6, -100, -100],
    ///     cu_seqlens: vec![0, 3, 5],
    ///     cu_seqlens_padded: Some(vec![0, 4, 8]),
    ///     ..Default::default()
    /// })?;
    /// let w = BatchWork::from_batch(&b);
    /// assert_eq!((w.useful.sum_squares, w.hardware_varlen.sum_squares), (13, 32));
    /// assert_eq!(w.valid_labels, 3);
    /// # Ok::<(), thd::Error>(())
    /// ```
    pub fn from_batch(batch: &PackedBatch) -> Self {
        let real = batch.cu_seqlens().seq_lens();
        let padded = batch.storage_cu_seqlens().seq_lens();
        let labels = batch.labels();
        let valid_labels = match batch.label_convention() {
            LabelConvention::Unshifted => {
                labels.iter().skip(1).filter(|&&l| l != IGNORE_INDEX).count()
            }
            LabelConvention::Shifted => labels.iter().filter(|&&l| l != IGNORE_INDEX).count(),
        } as u64;
        let mut w =
            Self::lengths(&real, &padded, batch.num_real_segments(), batch.num_tokens() as u64);
        w.valid_labels = valid_labels;
        w
    }

    /// The counts of one pack given by lengths only, when labels are not at hand.
    ///
    /// `valid_labels` is then `Σ_{real i} max(sᵢ − 1, 0)`: every token of a real segment except
    /// the last has a target (pretraining, no masked prompt).
    ///
    /// # Errors
    /// [`Error::SegmentCountMismatch`] if `padded` has a different number of segments;
    /// [`Error::PaddedShorterThanReal`] if some `pᵢ < sᵢ`; [`Error::NumRealSeqsTooLarge`];
    /// [`Error::CuSeqlensBeyondTokens`] if `Σ pᵢ > stored_tokens`.
    ///
    /// # Example
    /// ```
    /// use thd::SeqLens;
    /// use thd::metrics::BatchWork;
    /// let real = SeqLens::new(vec![130, 130, 130, 130, 512, 512, 504]);
    /// let w = BatchWork::from_seq_lens(&real, &real, Some(4), 2048)?;
    /// assert_eq!(w.useful.sum_squares, 67_600);                // CodonFM encodon_1b, §1.9
    /// assert_eq!(w.hardware_varlen.sum_squares, 845_904);
    /// # Ok::<(), thd::Error>(())
    /// ```
    pub fn from_seq_lens(
        real: &SeqLens,
        padded: &SeqLens,
        num_real_seqs: Option<usize>,
        stored_tokens: u64,
    ) -> Result<Self> {
        if real.len() != padded.len() {
            return Err(Error::SegmentCountMismatch { real: real.len(), padded: padded.len() });
        }
        for (segment, (&s, &p)) in real.as_slice().iter().zip(padded.as_slice()).enumerate() {
            if p < s {
                return Err(Error::PaddedShorterThanReal {
                    segment,
                    real: i64::from(s),
                    padded: i64::from(p),
                });
            }
        }
        let n_real = num_real_seqs.unwrap_or(real.len());
        if n_real > real.len() {
            return Err(Error::NumRealSeqsTooLarge { num_real_seqs: n_real, segments: real.len() });
        }
        if padded.total() > stored_tokens {
            return Err(Error::CuSeqlensBeyondTokens {
                name: "cu_seqlens_padded",
                index: padded.len(),
                value: padded.total() as i64,
                tokens: stored_tokens as usize,
            });
        }
        let mut w = Self::lengths(real, padded, n_real, stored_tokens);
        w.valid_labels =
            real.as_slice()[..n_real].iter().map(|&s| u64::from(s.saturating_sub(1))).sum();
        Ok(w)
    }

    /// The counts of a right- or left-padded BSHD batch from its `attention_mask` rows.
    ///
    /// ```text
    /// useful      rows with sᵣ = Σ mask[r]
    /// hardware    B rows of S tokens (both views: a dense kernel computes the full rows)
    /// valid       Σ_r max(sᵣ − 1, 0)
    /// ```
    ///
    /// # Errors
    /// [`Error::RaggedMask`] if rows differ in length; [`Error::MaskValue`] for a value other
    /// than 0 or 1.
    ///
    /// # Example
    /// ```
    /// use thd::metrics::BatchWork;
    /// // bionemo test_include_padding_bshd_with_attention_mask: rows of 5 and 3 real of 8.
    /// let mask = vec![vec![1, 1, 1, 1, 1, 0, 0, 0], vec![1, 1, 1, 0, 0, 0, 0, 0]];
    /// let w = BatchWork::from_attention_mask(&mask)?;
    /// assert_eq!((w.useful.sum_squares, w.hardware_varlen.sum_squares), (34, 128));
    /// # Ok::<(), thd::Error>(())
    /// ```
    pub fn from_attention_mask(rows: &[Vec<i64>]) -> Result<Self> {
        let width = rows.first().map_or(0, Vec::len);
        let mut useful = AttnSums::default();
        for (row, r) in rows.iter().enumerate() {
            if r.len() != width {
                return Err(Error::RaggedMask { row, len: r.len(), expected: width });
            }
            if let Some((col, &value)) = r.iter().enumerate().find(|(_, v)| !matches!(v, 0 | 1)) {
                return Err(Error::MaskValue { row, col, value });
            }
            useful += AttnSums::one(r.iter().filter(|&&v| v == 1).count() as u64);
        }
        let hardware = AttnSums::repeated(rows.len() as u64, width as u64);
        Ok(Self {
            real_tokens: useful.tokens,
            padded_tokens: hardware.tokens,
            valid_labels: rows
                .iter()
                .map(|r| (r.iter().filter(|&&v| v == 1).count() as u64).saturating_sub(1))
                .sum(),
            useful,
            hardware_varlen: hardware,
            hardware_whole_pack: hardware,
        })
    }

    fn lengths(real: &SeqLens, padded: &SeqLens, n_real: usize, stored: u64) -> Self {
        let useful = AttnSums::of(real.as_slice()[..n_real].iter().map(|&s| u64::from(s)));
        Self {
            real_tokens: useful.tokens,
            padded_tokens: stored,
            valid_labels: 0,
            useful,
            hardware_varlen: AttnSums::of(padded.as_slice().iter().map(|&p| u64::from(p))),
            hardware_whole_pack: AttnSums::one(stored),
        }
    }

    /// The hardware attention work under `view`.
    ///
    /// # Example
    /// ```
    /// # use thd::SeqLens;
    /// # use thd::metrics::{BatchWork, HardwareView};
    /// let l = SeqLens::new(vec![3, 5]);
    /// let w = BatchWork::from_seq_lens(&l, &l, None, 8)?;
    /// assert_eq!(w.hardware(HardwareView::WholePack).sum_squares, 64);
    /// # Ok::<(), thd::Error>(())
    /// ```
    pub fn hardware(&self, view: HardwareView) -> AttnSums {
        match view {
            HardwareView::Varlen => self.hardware_varlen,
            HardwareView::WholePack => self.hardware_whole_pack,
        }
    }
}

impl Add for BatchWork {
    type Output = Self;
    fn add(self, o: Self) -> Self {
        Self {
            real_tokens: self.real_tokens + o.real_tokens,
            padded_tokens: self.padded_tokens + o.padded_tokens,
            valid_labels: self.valid_labels + o.valid_labels,
            useful: self.useful + o.useful,
            hardware_varlen: self.hardware_varlen + o.hardware_varlen,
            hardware_whole_pack: self.hardware_whole_pack + o.hardware_whole_pack,
        }
    }
}

impl AddAssign for BatchWork {
    fn add_assign(&mut self, o: Self) {
        *self = *self + o;
    }
}

impl std::iter::Sum for BatchWork {
    fn sum<I: Iterator<Item = Self>>(iter: I) -> Self {
        iter.fold(Self::default(), Add::add)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::PackedBatchParts;

    #[test]
    fn work_useful_le_hardware_with_equality_without_padding() {
        let l = SeqLens::new(vec![3, 5, 0, 7]);
        let w = BatchWork::from_seq_lens(&l, &l, None, 15).unwrap();
        assert_eq!(w.useful, w.hardware_varlen);
        assert!(w.useful.sum_squares < w.hardware_whole_pack.sum_squares);
        let p = SeqLens::new(vec![4, 6, 0, 8]);
        let w = BatchWork::from_seq_lens(&l, &p, Some(3), 20).unwrap();
        assert!(w.useful.triangle < w.hardware_varlen.triangle);
        assert_eq!(w.real_tokens, 8);
        assert_eq!(w.valid_labels, 6);
    }

    #[test]
    fn work_rejects_inconsistent_lengths_by_value() {
        let l = SeqLens::new(vec![3, 5]);
        let p = SeqLens::new(vec![3, 4]);
        assert_eq!(
            BatchWork::from_seq_lens(&l, &p, None, 8).unwrap_err(),
            Error::PaddedShorterThanReal { segment: 1, real: 5, padded: 4 }
        );
        assert!(matches!(
            BatchWork::from_seq_lens(&l, &l, Some(3), 8),
            Err(Error::NumRealSeqsTooLarge { num_real_seqs: 3, segments: 2 })
        ));
        assert!(matches!(
            BatchWork::from_seq_lens(&l, &l, None, 7),
            Err(Error::CuSeqlensBeyondTokens { value: 8, tokens: 7, .. })
        ));
    }

    #[test]
    fn work_counts_shifted_labels_without_the_shift() {
        let b = PackedBatch::new(PackedBatchParts {
            input_ids: vec![1, 2, 3, 4],
            labels: vec![2, 3, -100, -100],
            cu_seqlens: vec![0, 3, 4],
            label_convention: LabelConvention::Shifted,
            ..Default::default()
        })
        .unwrap();
        assert_eq!(BatchWork::from_batch(&b).valid_labels, 2);
    }

    #[test]
    fn work_mask_errors_name_row_and_column() {
        assert_eq!(
            BatchWork::from_attention_mask(&[vec![1, 1], vec![1]]).unwrap_err(),
            Error::RaggedMask { row: 1, len: 1, expected: 2 }
        );
        assert_eq!(
            BatchWork::from_attention_mask(&[vec![1, 2]]).unwrap_err(),
            Error::MaskValue { row: 0, col: 1, value: 2 }
        );
        assert_eq!(BatchWork::from_attention_mask(&[]).unwrap(), BatchWork::default());
    }

    #[test]
    fn work_useful_is_the_same_after_any_collator_padding() {
        use crate::collate::{CpPadding, Document, FlattenOptions, MockPadding, flatten};
        use crate::collate::{pad_for_cp, pad_to_multiple_of};
        use crate::metrics::{CausalConvention, FlopsFormula, ModelDims};
        let ex = [Document::new(vec![3; 5]), Document::new(vec![4; 6]), Document::new(vec![5; 4])];
        let bare = flatten(&ex, &FlattenOptions::default()).unwrap();
        let mock = MockPadding { multiple_of: 32, pad_token_id: 1, max_mock_len: Some(8) };
        let padded = [
            pad_to_multiple_of(&bare, &mock).unwrap(),
            pad_for_cp(&bare, &CpPadding::for_cp(4, 0)).unwrap(),
            pad_to_multiple_of(&pad_for_cp(&bare, &CpPadding::for_cp(2, 0)).unwrap(), &mock)
                .unwrap(),
        ];
        let dims = ModelDims {
            layers: 2,
            hidden: 64,
            heads: 4,
            kv_heads: 2,
            head_dim: 16,
            ffn: 128,
            mlp_projections: 3,
            vocab: 100,
            padded_vocab: Some(128),
            causal: CausalConvention::ExactTriangle,
            attention_output_gate: false,
        };
        let w0 = BatchWork::from_batch(&bare);
        for b in &padded {
            let w = BatchWork::from_batch(b);
            assert_eq!(
                (w.real_tokens, w.valid_labels, w.useful),
                (w0.real_tokens, w0.valid_labels, w0.useful)
            );
            assert!(w.padded_tokens > w0.padded_tokens);
            for formula in [FlopsFormula::MegatronLm, FlopsFormula::BionemoPerfLogger] {
                for view in [HardwareView::Varlen, HardwareView::WholePack] {
                    let f0 = w0.flops(&dims, formula, view).unwrap();
                    let f = w.flops(&dims, formula, view).unwrap();
                    assert_eq!(f.useful, f0.useful, "{formula:?} {view:?}");
                    assert!(f.hardware > f.useful, "{formula:?} {view:?}");
                }
            }
        }
    }

    #[test]
    fn work_sums_over_micro_batches() {
        let a = BatchWork::from_seq_lens(&SeqLens::new(vec![2]), &SeqLens::new(vec![2]), None, 2);
        let a = a.unwrap();
        let total: BatchWork = [a, a].into_iter().sum();
        assert_eq!((total.useful.sum_squares, total.padded_tokens), (8, 4));
    }
}
