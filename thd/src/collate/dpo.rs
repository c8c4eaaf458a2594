use std::ops::Range;

use crate::collate::{
    BoundaryLabels, Document, FlattenOptions, Overflow, StaticPadding, flatten, seq_idx,
};
use crate::{
    Error, Float, LabelConvention, PackedBatch, PackedBatchParts, Result, packed_cross_entropy,
};

use super::bshd::widen;

/// One preference pair: a chosen and a rejected completion of the same prompt.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct DpoExample {
    /// The preferred sequence.
    pub chosen: Document,
    /// The dispreferred sequence.
    pub rejected: Document,
    /// The example's dataset index (open-instruct `index`).
    pub index: i64,
}

impl DpoExample {
    /// `(chosen length, rejected length)`.
    ///
    /// # Example
    /// ```
    /// use thd::collate::{DpoExample, Document};
    /// let pair = DpoExample { chosen: Document::new(vec![1; 3]), rejected: Document::new(vec![1; 2]), index: 0 };
    /// assert_eq!(pair.lens(), (3, 2));
    /// ```
    pub fn lens(&self) -> (usize, usize) {
        (self.chosen.len(), self.rejected.len())
    }
}

/// How many leading pairs fit a token budget on both branches (open-instruct
/// `count_features_within_token_budget`).
///
/// ```text
/// the largest k such that Σ_{i<k} chosenᵢ ≤ budget and Σ_{i<k} rejectedᵢ ≤ budget,
/// but at least 1 when there is a pair (a lone over-budget pair is kept);  no budget: all
/// ```
///
/// The comparison is strict on overflow, so an exact fit is kept. The caller carries the rest
/// over to the next batch (open-instruct's loader overflow), so nothing is dropped.
///
/// # Example
/// ```
/// use thd::collate::count_features_within_token_budget;
/// let pairs = [(100, 100); 4];
/// assert_eq!(count_features_within_token_budget(&pairs, Some(300)), 3);
/// assert_eq!(count_features_within_token_budget(&pairs, Some(150)), 1);
/// assert_eq!(count_features_within_token_budget(&[(100, 50); 4], Some(250)), 2);
/// assert_eq!(count_features_within_token_budget(&[(400, 10)], Some(300)), 1);
/// assert_eq!(count_features_within_token_budget(&pairs, None), 4);
/// ```
pub fn count_features_within_token_budget(
    lens: &[(usize, usize)],
    max_seq_length: Option<usize>,
) -> usize {
    let Some(budget) = max_seq_length else {
        return lens.len();
    };
    let (mut chosen, mut rejected) = (0usize, 0usize);
    for (i, &(c, r)) in lens.iter().enumerate() {
        chosen = chosen.saturating_add(c);
        rejected = rejected.saturating_add(r);
        if i > 0 && (chosen > budget || rejected > budget) {
            return i;
        }
    }
    lens.len()
}

/// Options of [`collate_dpo`]; the defaults are open-instruct's except for [`Overflow`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct DpoOptions {
    /// Token budget per branch and static pack length; `None`: keep every pair, no padding.
    pub max_seq_length: Option<usize>,
    /// Token id of the static padding (open-instruct: 0).
    pub pad_token_id: i64,
    /// What to do with a lone pair longer than the budget (open-instruct keeps it unpadded).
    pub overflow: Overflow,
}

/// A collated DPO batch: the chosen and rejected branches packed separately.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DpoBatch {
    /// Chosen sequences, one pack (statically padded if a budget was given).
    pub chosen: PackedBatch,
    /// Rejected sequences, one pack.
    pub rejected: PackedBatch,
    /// Dataset indices of the pairs kept, in order; the caller carries the others over.
    pub index: Vec<i64>,
}

/// DPO collator (open-instruct `TensorDataCollatorWithFlatteningDPO`): keeps the longest prefix
/// of pairs that fits the budget on both branches, then flattens each branch on its own.
///
/// # Errors
/// [`Error::NoExamples`] for an empty batch; the errors of [`flatten`] for either branch,
/// including [`Error::PackOverMaxLength`] for a lone over-budget pair with
/// [`Overflow::Error`].
///
/// # Example
/// ```
/// use thd::collate::{DpoExample, DpoOptions, Document, collate_dpo};
/// let pair = |i, c, r| DpoExample {
///     chosen: Document::new(vec![1; c]),
///     rejected: Document::new(vec![1; r]),
///     index: i,
/// };
/// let opts = DpoOptions { max_seq_length: Some(300), ..Default::default() };
/// let batch = collate_dpo(&[pair(0, 100, 100), pair(1, 100, 100), pair(2, 100, 100), pair(3, 100, 100)], &opts)?;
/// assert_eq!(batch.index, vec![0, 1, 2]); // pair 3 goes to the next batch
/// assert_eq!(batch.chosen.cu_seqlens().as_slice(), &[0, 100, 200, 300]);
/// # Ok::<(), thd::Error>(())
/// ```
pub fn collate_dpo(examples: &[DpoExample], opts: &DpoOptions) -> Result<DpoBatch> {
    if examples.is_empty() {
        return Err(Error::NoExamples { collator: "collate_dpo" });
    }
    let lens: Vec<(usize, usize)> = examples.iter().map(DpoExample::lens).collect();
    let kept = &examples[..count_features_within_token_budget(&lens, opts.max_seq_length)];
    let flat = FlattenOptions {
        boundary: BoundaryLabels::EverySequence,
        static_padding: opts.max_seq_length.map(|max_seq_length| StaticPadding {
            max_seq_length,
            pad_token_id: opts.pad_token_id,
            overflow: opts.overflow,
        }),
    };
    let branch = |f: fn(&DpoExample) -> &Document| -> Vec<Document> {
        kept.iter().map(|e| f(e).clone()).collect()
    };
    Ok(DpoBatch {
        chosen: flatten(&branch(|e| &e.chosen), &flat)?,
        rejected: flatten(&branch(|e| &e.rejected), &flat)?,
        index: kept.iter().map(|e| e.index).collect(),
    })
}

/// The chosen and rejected packs concatenated into one row (open-instruct
/// `concatenated_inputs`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DpoConcatenated {
    /// The exact layout: `cu_seqlens` holds the real lengths and `cu_seqlens_padded` the
    /// storage slots (the chosen static padding belongs to the last chosen slot), so every
    /// segment addresses exactly its own example's tokens.
    pub batch: PackedBatch,
    /// Number of chosen segments `bs`; segments `bs..2·bs` are the rejected ones.
    pub num_chosen: usize,
    /// Example number of every token, -1 on all padding.
    pub seq_idx: Vec<i64>,
    /// open-instruct's `concatenated_cu_seq_lens_{q,k}`: `chosen_cu ++ (rejected_cu[1:] +
    /// padded chosen length)`. As plain offsets, the first rejected segment also spans the
    /// chosen padding (correct for the loss, which ignores it; not for attention).
    pub open_instruct_cu_seq_lens: Vec<i64>,
    /// open-instruct's `concatenated_seq_idx`: `rejected_seq_idx + bs`, so the rejected
    /// padding reads `bs − 1`, the last chosen example's number.
    pub open_instruct_seq_idx: Vec<i64>,
}

impl DpoBatch {
    /// Real tokens on both branches, padding excluded (open-instruct `get_num_tokens`:
    /// `Σ cu_seq_lens_k[-1]`).
    ///
    /// # Example
    /// ```
    /// use thd::collate::{DpoExample, DpoOptions, Document, collate_dpo};
    /// let pair = DpoExample { chosen: Document::new(vec![1; 3]), rejected: Document::new(vec![1; 2]), index: 0 };
    /// let opts = DpoOptions { max_seq_length: Some(8), ..Default::default() };
    /// assert_eq!(collate_dpo(&[pair], &opts)?.num_tokens(), 5); // padding excluded
    /// # Ok::<(), thd::Error>(())
    /// ```
    pub fn num_tokens(&self) -> usize {
        self.chosen.cu_seqlens().total() + self.rejected.cu_seqlens().total()
    }

    /// Concatenates chosen and rejected, offsetting the rejected segments by the *padded*
    /// chosen length (the fix of open-instruct `005366f75`; the real chosen length points the
    /// rejected segments at the wrong tokens whenever the chosen pack is padded).
    ///
    /// # Errors
    /// Any LAYOUT error of the concatenated batch (none for batches built by
    /// [`collate_dpo`]).
    ///
    /// # Example
    /// ```
    /// use thd::collate::{DpoExample, DpoOptions, Document, collate_dpo};
    /// let pairs = [
    ///     DpoExample { chosen: Document::new(vec![1; 3]), rejected: Document::new(vec![1; 2]), index: 0 },
    ///     DpoExample { chosen: Document::new(vec![1; 5]), rejected: Document::new(vec![1; 4]), index: 1 },
    /// ];
    /// let opts = DpoOptions { max_seq_length: Some(10), ..Default::default() };
    /// let batch = collate_dpo(&pairs, &opts)?;
    /// assert_eq!(batch.num_tokens(), 14);
    /// let cat = batch.concatenated()?;
    /// assert_eq!(cat.open_instruct_cu_seq_lens, vec![0, 3, 8, 12, 16]);
    /// assert_eq!(cat.batch.cu_seqlens().as_slice(), &[0, 3, 8, 10, 14]);
    /// assert_eq!(cat.batch.cu_seqlens_padded().unwrap().as_slice(), &[0, 3, 10, 12, 16]);
    /// assert_eq!(cat.batch.real_tokens(2), 10..12); // rejected 0: its own tokens only
    /// # Ok::<(), thd::Error>(())
    /// ```
    pub fn concatenated(&self) -> Result<DpoConcatenated> {
        let (c, r) = (&self.chosen, &self.rejected);
        let offset = c.num_tokens() as i64;
        let n_chosen = c.num_segments();
        let cat = |a: &[i64], b: &[i64]| [a, b].concat();

        let real_c = widen(c.cu_seqlens());
        let real_r = widen(r.cu_seqlens());
        let mut cu = real_c.clone();
        let last_c = *real_c.last().expect("validated offsets are non-empty");
        cu.extend(real_r[1..].iter().map(|&x| x + last_c));

        let mut slots = widen(c.storage_cu_seqlens());
        if n_chosen > 0 {
            *slots.last_mut().expect("validated offsets are non-empty") = offset;
        }
        slots.extend(widen(r.storage_cu_seqlens())[1..].iter().map(|&x| x + offset));

        let mut oi_cu = widen(c.cu_seqlens());
        oi_cu.extend(real_r[1..].iter().map(|&x| x + offset));
        let oi_seq_idx =
            cat(&seq_idx(c), &seq_idx(r).iter().map(|&i| i + n_chosen as i64).collect::<Vec<_>>());

        let batch = PackedBatch::new(PackedBatchParts {
            input_ids: cat(c.input_ids(), r.input_ids()),
            labels: cat(c.labels(), r.labels()),
            position_ids: Some(cat(c.position_ids(), r.position_ids())),
            cu_seqlens_padded: (slots != cu).then_some(slots),
            cu_seqlens: cu,
            num_real_seqs: None,
            label_convention: LabelConvention::Unshifted,
        })?;
        Ok(DpoConcatenated {
            seq_idx: seq_idx(&batch),
            batch,
            num_chosen: n_chosen,
            open_instruct_cu_seq_lens: oi_cu,
            open_instruct_seq_idx: oi_seq_idx,
        })
    }
}

/// Per-segment log-probability of the labels (open-instruct `get_batch_logps`), summed or
/// averaged over each segment's valid labels.
///
/// **Input:** `logits: [T, vocab]`, `labels: [T]` ([`LabelConvention::Unshifted`]), and the
/// token range of each segment's real tokens (e.g. `batch.real_tokens(i)`).
///
/// ```text
/// logp_j = Σ_{t, t+1 ∈ segment j, labels[t+1] ≠ -100} log softmax(logits[t])[labels[t+1]]
/// average: logp_j / max(1, count_j)                (a fully masked segment gives 0, not NaN)
/// ```
///
/// Only predictions made inside a segment count; open-instruct's bucketize also assigns a
/// segment the prediction of its first label from the previous segment's last token, which is
/// the same whenever each segment's first label is -100 (as every collator here makes it).
///
/// # Errors
/// [`Error::ZeroVocab`], [`Error::ShapeMismatch`] unless `logits.len() == labels.len() ·
/// vocab`, [`Error::TokensBeyondTensor`] for a range past the end, [`Error::LabelOutOfRange`].
///
/// # Example
/// ```
/// use thd::collate::segment_logps;
/// // Uniform logits over 4 classes: every valid label costs ln 4.
/// let labels = [-100, 1, 2, -100, -100];
/// let logits = [0.0f64; 5 * 4];
/// let lp = segment_logps(&logits, 4, &labels, [0..3, 3..5], false)?;
/// assert!((lp[0] + 2.0 * 4f64.ln()).abs() < 1e-12);
/// assert_eq!(lp[1], 0.0);
/// # Ok::<(), thd::Error>(())
/// ```
pub fn segment_logps<F: Float>(
    logits: &[F],
    vocab: usize,
    labels: &[i64],
    segments: impl IntoIterator<Item = Range<usize>>,
    average: bool,
) -> Result<Vec<f64>> {
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
    segments
        .into_iter()
        .map(|r| {
            if r.end > t || r.start > r.end {
                return Err(Error::TokensBeyondTensor { key: "labels", needed: r.end, tokens: t });
            }
            let s = packed_cross_entropy(
                &logits[r.start * vocab..r.end * vocab],
                vocab,
                &labels[r],
                LabelConvention::Unshifted,
            )?;
            let logp = -s.nll;
            Ok(if average { logp / s.count.max(1) as f64 } else { logp })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn budget_keeps_at_least_one_and_exact_fits() {
        assert_eq!(count_features_within_token_budget(&[], Some(10)), 0);
        assert_eq!(count_features_within_token_budget(&[(10, 10), (400, 10)], Some(300)), 1);
        assert_eq!(count_features_within_token_budget(&[(150, 150), (150, 150)], Some(300)), 2);
    }
}
