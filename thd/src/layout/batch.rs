use std::ops::Range;

use crate::{CuSeqlens, Error, IGNORE_INDEX, Result};

/// How `labels` line up with the logits that predict them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum LabelConvention {
    /// Hugging Face / bionemo / open-instruct: `labels[t]` is token `t` itself (or -100) and the
    /// loss shifts, so `logits[t]` predicts `labels[t + 1]`. Each segment's first label must be
    /// -100, or the previous segment's last token learns to predict it.
    #[default]
    Unshifted,
    /// Megatron / TransformerEngine / AReaL: labels were rolled by the collator, so `logits[t]`
    /// predicts `labels[t]`. Each segment's last label must be -100.
    Shifted,
}

/// The raw pieces of a packed batch, as a collator emits them (int64 everywhere, like PyTorch).
///
/// Build a [`PackedBatch`] from it with [`PackedBatch::new`], which validates every LAYOUT rule.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PackedBatchParts {
    /// Token ids, `[T]`.
    pub input_ids: Vec<i64>,
    /// Labels, `[T]`, -100 where ignored.
    pub labels: Vec<i64>,
    /// Position ids, `[T]`; `None` derives them (restart at 0 per segment, 0 on padding).
    pub position_ids: Option<Vec<i64>>,
    /// Real offsets, `B + 1` entries.
    pub cu_seqlens: Vec<i64>,
    /// Storage offsets when segments are padded (each `pᵢ ≥ sᵢ`); real tokens of segment `i`
    /// start at `cu_seqlens_padded[i]`.
    pub cu_seqlens_padded: Option<Vec<i64>>,
    /// How many leading segments are real; the rest are mock (padding dressed as sequences).
    pub num_real_seqs: Option<usize>,
    /// How labels line up with logits.
    pub label_convention: LabelConvention,
}

/// A validated packed (THD) batch: one pack of `T` tokens holding `B` segments.
///
/// # Example
/// ```
/// use thd::{PackedBatch, PackedBatchParts};
/// let batch = PackedBatch::new(PackedBatchParts {
///     input_ids: vec![5, 6, 7, 8, 9],
///     labels: vec![-100, 6, 7, -100, 9],
///     cu_seqlens: vec![0, 3, 5],
///     ..Default::default()
/// })?;
/// assert_eq!(batch.position_ids(), &[0, 1, 2, 0, 1]);
///
/// // The first segment's last token would learn to predict token 8 of the second document.
/// let leak = PackedBatch::new(PackedBatchParts {
///     input_ids: vec![5, 6, 7, 8, 9],
///     labels: vec![-100, 6, 7, 8, 9],
///     cu_seqlens: vec![0, 3, 5],
///     ..Default::default()
/// });
/// assert!(leak.unwrap_err().to_string().contains("labels[3]=8"));
/// # Ok::<(), thd::Error>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PackedBatch {
    input_ids: Vec<i64>,
    labels: Vec<i64>,
    position_ids: Vec<i64>,
    cu_seqlens: CuSeqlens,
    cu_seqlens_padded: Option<CuSeqlens>,
    num_real_seqs: Option<usize>,
    label_convention: LabelConvention,
}

impl PackedBatch {
    /// Validates `parts` against every LAYOUT rule.
    ///
    /// ```text
    /// cu[0] = 0, cu[i] ≤ cu[i+1], cu[B] ≤ T, every offset ≤ i32::MAX     (real and padded)
    /// padded has the same B, and pᵢ ≥ sᵢ for every segment
    /// position_ids[startᵢ + j] = j              for j < sᵢ
    /// Unshifted: labels[startᵢ + sᵢ] = -100     (the target of segment i's last token)
    /// Shifted:   labels[startᵢ + sᵢ - 1] = -100
    /// num_real_seqs ≤ B; every mock segment (i ≥ num_real_seqs) holds ≥ 1 stored token
    /// ```
    ///
    /// # Errors
    /// The first rule broken, as an [`Error`] naming the index and value.
    pub fn new(parts: PackedBatchParts) -> Result<Self> {
        let PackedBatchParts {
            input_ids,
            labels,
            position_ids,
            cu_seqlens,
            cu_seqlens_padded,
            num_real_seqs,
            label_convention,
        } = parts;
        let tokens = input_ids.len();
        check_len("labels", labels.len(), tokens)?;
        if let Some(p) = &position_ids {
            check_len("position_ids", p.len(), tokens)?;
        }
        let cu = CuSeqlens::from_i64("cu_seqlens", &cu_seqlens)?;
        let padded = match &cu_seqlens_padded {
            Some(v) => Some(CuSeqlens::from_i64("cu_seqlens_padded", v)?),
            None => None,
        };
        let (storage_name, storage) = match &padded {
            Some(p) => ("cu_seqlens_padded", p),
            None => ("cu_seqlens", &cu),
        };
        if storage.total() > tokens {
            return Err(Error::CuSeqlensBeyondTokens {
                name: storage_name,
                index: storage.num_segments(),
                value: storage.total() as i64,
                tokens,
            });
        }
        if let Some(p) = &padded {
            if p.num_segments() != cu.num_segments() {
                return Err(Error::SegmentCountMismatch {
                    real: cu.num_segments(),
                    padded: p.num_segments(),
                });
            }
            for (segment, (r, s)) in cu.segments().zip(p.segments()).enumerate() {
                if s.len() < r.len() {
                    return Err(Error::PaddedShorterThanReal {
                        segment,
                        real: r.len() as i64,
                        padded: s.len() as i64,
                    });
                }
            }
        }
        if let Some(n) = num_real_seqs
            && n > cu.num_segments()
        {
            return Err(Error::NumRealSeqsTooLarge {
                num_real_seqs: n,
                segments: cu.num_segments(),
            });
        }
        if let Some(n) = num_real_seqs
            && let Some(segment) =
                (n..storage.num_segments()).find(|&i| storage.segment(i).is_empty())
        {
            return Err(Error::EmptyMockSegment {
                name: storage_name,
                segment,
                next: segment + 1,
                offset: storage.segment(segment).start as i64,
            });
        }
        let mut batch = Self {
            input_ids,
            labels,
            position_ids: Vec::new(),
            cu_seqlens: cu,
            cu_seqlens_padded: padded,
            num_real_seqs,
            label_convention,
        };
        batch.position_ids = match position_ids {
            Some(p) => p,
            None => batch.derived_position_ids(),
        };
        batch.check_position_ids()?;
        batch.check_label_boundaries()?;
        Ok(batch)
    }

    fn derived_position_ids(&self) -> Vec<i64> {
        let mut pos = vec![0; self.input_ids.len()];
        for i in 0..self.num_segments() {
            for (j, t) in self.real_tokens(i).enumerate() {
                pos[t] = j as i64;
            }
        }
        pos
    }

    fn check_position_ids(&self) -> Result<()> {
        for segment in 0..self.num_segments() {
            for (offset, token) in self.real_tokens(segment).enumerate() {
                let got = self.position_ids[token];
                if got != offset as i64 {
                    return Err(Error::PositionIdsNotReset { segment, token, offset, got });
                }
            }
        }
        Ok(())
    }

    /// No segment's last prediction targets the next document's first token. A trained label at
    /// the boundary that is some other token is the segment's own target (NeMo Automodel shifts
    /// labels per sample before packing, so each segment ends on its EOS target; transformers'
    /// `separator_id` trains a separator), not a leak.
    fn check_label_boundaries(&self) -> Result<()> {
        let n = self.num_segments();
        // Mock segments (past `num_real_seqs`) are padding, not documents.
        let documents = self.num_real_segments().min(n);
        for segment in 0..n {
            let real = self.real_tokens(segment);
            // The next document: the next real segment that holds a token.
            let next =
                (segment + 1..documents).map(|j| self.real_tokens(j)).find(|r| !r.is_empty());
            let Some(next) = next.filter(|_| !real.is_empty()) else { continue };
            let token = match self.label_convention {
                LabelConvention::Unshifted if real.end == next.start => real.end,
                LabelConvention::Unshifted => continue,
                LabelConvention::Shifted => real.end - 1,
            };
            if let Some(&label) = self.labels.get(token)
                && label != IGNORE_INDEX
                && label == self.input_ids[next.start]
            {
                return Err(Error::CrossDocumentLabel { segment, token, label });
            }
        }
        Ok(())
    }

    /// Token ids, `[T]`.
    pub fn input_ids(&self) -> &[i64] {
        &self.input_ids
    }

    /// Labels, `[T]`.
    pub fn labels(&self) -> &[i64] {
        &self.labels
    }

    /// Position ids, `[T]`.
    pub fn position_ids(&self) -> &[i64] {
        &self.position_ids
    }

    /// Real offsets.
    pub fn cu_seqlens(&self) -> &CuSeqlens {
        &self.cu_seqlens
    }

    /// Storage offsets, when segments are padded.
    pub fn cu_seqlens_padded(&self) -> Option<&CuSeqlens> {
        self.cu_seqlens_padded.as_ref()
    }

    /// The offsets that address storage: padded if present, real otherwise.
    pub fn storage_cu_seqlens(&self) -> &CuSeqlens {
        self.cu_seqlens_padded.as_ref().unwrap_or(&self.cu_seqlens)
    }

    /// `num_real_seqs` as given.
    pub fn num_real_seqs(&self) -> Option<usize> {
        self.num_real_seqs
    }

    /// How labels line up with logits.
    pub fn label_convention(&self) -> LabelConvention {
        self.label_convention
    }

    /// Number of tokens `T` (storage, padding included).
    pub fn num_tokens(&self) -> usize {
        self.input_ids.len()
    }

    /// Number of segments `B`, mock ones included.
    pub fn num_segments(&self) -> usize {
        self.cu_seqlens.num_segments()
    }

    /// Number of real (non-mock) segments: `num_real_seqs`, or all of them.
    pub fn num_real_segments(&self) -> usize {
        self.num_real_seqs.unwrap_or(self.num_segments())
    }

    /// Flat indices of segment `i`'s real tokens.
    ///
    /// # Panics
    /// If `i >= self.num_segments()`.
    pub fn real_tokens(&self, i: usize) -> Range<usize> {
        let start = self.storage_cu_seqlens().segment(i).start;
        start..start + self.cu_seqlens.segment(i).len()
    }
}

fn check_len(key: &'static str, len: usize, expected: usize) -> Result<()> {
    if len == expected { Ok(()) } else { Err(Error::TokenCountMismatch { key, len, expected }) }
}
