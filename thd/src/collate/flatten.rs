use crate::collate::{Document, document::check_documents};
use crate::{Error, IGNORE_INDEX, LabelConvention, PackedBatch, PackedBatchParts, Result};

/// Which segment starts get the -100 label that stops a prediction across a document boundary.
///
/// Under the Hugging Face shift (`logits[t]` predicts `labels[t + 1]`), the label at a segment's
/// first token is what the previous segment's last token would learn to predict. Both variants
/// below mask every such label, so they give the same loss; they differ only at token 0, which
/// is never a target.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum BoundaryLabels {
    /// Every segment's first label is -100: Hugging Face `DataCollatorWithFlattening` and
    /// open-instruct (`[separator_id] ++ labels[1:]` with `separator_id = -100`).
    #[default]
    EverySequence,
    /// Every segment but the first: bionemo `DataCollatorWithFlattening(separator_id=-100)`,
    /// which writes `labels[cu[1:-1]] = -100`.
    AfterFirst,
}

/// What static padding does when the pack is already longer than `max_seq_length`.
///
/// Padding never truncates; the question is only whether that is an error.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum Overflow {
    /// Return [`Error::PackOverMaxLength`]: a static shape was asked for and cannot be met.
    #[default]
    Error,
    /// Leave the pack unpadded, longer than `max_seq_length` (open-instruct's `pad_to_length`,
    /// which silently breaks the static shape `torch.compile` relies on).
    LeaveUnpadded,
}

/// Right-pad a pack to a static length (open-instruct `max_seq_length`).
///
/// Pad tokens get label -100 and position id 0, and lie outside `cu_seqlens`: they are not a
/// segment.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct StaticPadding {
    /// The static pack length.
    pub max_seq_length: usize,
    /// Token id written into the padding (open-instruct: 0).
    pub pad_token_id: i64,
    /// What to do when the pack is already longer.
    pub overflow: Overflow,
}

/// Options of [`flatten`]; `FlattenOptions::default()` is the Hugging Face collator.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct FlattenOptions {
    /// Which segment starts get a -100 label.
    pub boundary: BoundaryLabels,
    /// Optional static padding to `max_seq_length`.
    pub static_padding: Option<StaticPadding>,
}

/// Flattening collator: concatenates examples into one pack (Hugging Face / bionemo /
/// open-instruct `DataCollatorWithFlattening`).
///
/// **Input:** `B ≥ 1` non-empty examples. **Output:** an [`LabelConvention::Unshifted`]
/// [`PackedBatch`] with `cu_seqlens = [0, L₀, L₀+L₁, …]`.
///
/// ```text
/// input_ids    = concat(example.input_ids)
/// labels       = concat(label_source), then labels[cu[i]] = -100 at each boundary start
/// position_ids = concat(arange(Lᵢ))
/// static padding: input_ids += [pad]·(S − T), labels += [-100]·(S − T), position_ids += [0]·(S − T)
///                 cu_seqlens unchanged (the padding is not a segment)
/// ```
///
/// # Errors
/// [`Error::NoExamples`], [`Error::EmptyExample`] or [`Error::ExampleLabelsLength`] for bad
/// input; [`Error::PackOverMaxLength`] if static padding would have to truncate (with
/// [`Overflow::Error`]); [`Error::CuSeqlensOverflow`] if the pack does not fit int32 offsets.
///
/// # Example
/// ```
/// use thd::collate::{Document, FlattenOptions, Overflow, StaticPadding, flatten};
/// let examples = [Document::new(vec![0, 5, 6, 2]), Document::new(vec![0, 7, 2])];
/// let batch = flatten(&examples, &FlattenOptions::default())?;
/// assert_eq!(batch.cu_seqlens().as_slice(), &[0, 4, 7]);
/// assert_eq!(batch.labels(), &[-100, 5, 6, 2, -100, 7, 2]);
/// assert_eq!(batch.position_ids(), &[0, 1, 2, 3, 0, 1, 2]);
///
/// let pad = StaticPadding { max_seq_length: 10, pad_token_id: 0, overflow: Overflow::Error };
/// let opts = FlattenOptions { static_padding: Some(pad), ..Default::default() };
/// let padded = flatten(&examples, &opts)?;
/// assert_eq!(padded.num_tokens(), 10);
/// assert_eq!(padded.cu_seqlens().as_slice(), &[0, 4, 7]); // padding is no segment
/// assert_eq!(&padded.labels()[7..], &[-100, -100, -100]);
/// # Ok::<(), thd::Error>(())
/// ```
pub fn flatten(examples: &[Document], opts: &FlattenOptions) -> Result<PackedBatch> {
    check_documents("flatten", examples)?;
    let total: usize = examples.iter().map(Document::len).sum();
    let mut input_ids = Vec::with_capacity(total);
    let mut labels = Vec::with_capacity(total);
    let mut cu = Vec::with_capacity(examples.len() + 1);
    cu.push(0i64);
    for (i, e) in examples.iter().enumerate() {
        let start = input_ids.len();
        input_ids.extend_from_slice(&e.input_ids);
        labels.extend_from_slice(e.label_source());
        let mask_start = match opts.boundary {
            BoundaryLabels::EverySequence => true,
            BoundaryLabels::AfterFirst => i > 0,
        };
        if mask_start {
            labels[start] = IGNORE_INDEX;
        }
        cu.push(input_ids.len() as i64);
    }
    if let Some(pad) = &opts.static_padding {
        if total > pad.max_seq_length {
            if pad.overflow == Overflow::Error {
                return Err(Error::PackOverMaxLength {
                    tokens: total,
                    max_seq_length: pad.max_seq_length,
                });
            }
        } else {
            input_ids.resize(pad.max_seq_length, pad.pad_token_id);
            labels.resize(pad.max_seq_length, IGNORE_INDEX);
        }
    }
    PackedBatch::new(PackedBatchParts {
        input_ids,
        labels,
        position_ids: None,
        cu_seqlens: cu,
        cu_seqlens_padded: None,
        num_real_seqs: None,
        label_convention: LabelConvention::Unshifted,
    })
}

/// The example index of every token (open-instruct `seq_idx`): `i` on segment `i`'s real
/// tokens, -1 on every token that belongs to no segment or is padding inside a slot.
///
/// # Example
/// ```
/// use thd::collate::{Document, FlattenOptions, Overflow, StaticPadding, flatten, seq_idx};
/// let pad = StaticPadding { max_seq_length: 6, pad_token_id: 0, overflow: Overflow::Error };
/// let opts = FlattenOptions { static_padding: Some(pad), ..Default::default() };
/// let batch = flatten(&[Document::new(vec![1, 2]), Document::new(vec![3, 4, 5])], &opts)?;
/// assert_eq!(seq_idx(&batch), vec![0, 0, 1, 1, 1, -1]);
/// # Ok::<(), thd::Error>(())
/// ```
pub fn seq_idx(batch: &PackedBatch) -> Vec<i64> {
    let mut idx = vec![-1; batch.num_tokens()];
    for i in 0..batch.num_segments() {
        for t in batch.real_tokens(i) {
            idx[t] = i as i64;
        }
    }
    idx
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn after_first_keeps_the_first_label() {
        let ex = [Document::new(vec![0, 5, 2]), Document::new(vec![0, 6, 2])];
        let opts = FlattenOptions { boundary: BoundaryLabels::AfterFirst, ..Default::default() };
        let b = flatten(&ex, &opts).unwrap();
        assert_eq!(b.labels(), &[0, 5, 2, -100, 6, 2]);
    }

    #[test]
    fn overflow_policies() {
        let ex = [Document::new(vec![1, 2, 3])];
        let mut pad =
            StaticPadding { max_seq_length: 2, pad_token_id: 0, overflow: Overflow::Error };
        let opts = FlattenOptions { static_padding: Some(pad), ..Default::default() };
        assert_eq!(
            flatten(&ex, &opts),
            Err(Error::PackOverMaxLength { tokens: 3, max_seq_length: 2 })
        );
        pad.overflow = Overflow::LeaveUnpadded;
        let opts = FlattenOptions { static_padding: Some(pad), ..Default::default() };
        assert_eq!(flatten(&ex, &opts).unwrap().num_tokens(), 3);
    }
}
