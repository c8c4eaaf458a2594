use crate::{IGNORE_INDEX, LabelConvention, PackedBatch, PackedBatchParts, Result};

/// Labels rolled onto the logits that predict them, on the full sequence: the
/// [`LabelConvention::Shifted`] labels of a batch.
///
/// ```text
/// shifted[startᵢ + j] = labels[startᵢ + j + 1]   for j < sᵢ − 1
/// shifted[startᵢ + sᵢ − 1] = -100                (the last token predicts nothing)
/// shifted[padding] = -100
/// ```
///
/// This is the per-segment roll: unlike AReaL's `torch.roll(ids, -1)` on the packed tensor, the
/// last token of a segment never gets the next document's first token (or, at the end, the
/// batch's first token) as a target, whatever the loss mask says. A batch that is already
/// `Shifted` is returned as is.
///
/// # Example
/// ```
/// use thd::cp::shift_labels;
/// use thd::{PackedBatch, PackedBatchParts};
/// let batch = PackedBatch::new(PackedBatchParts {
///     input_ids: vec![1, 2, 3, 4, 5],
///     labels: vec![-100, 2, 3, -100, 5],
///     cu_seqlens: vec![0, 3, 5],
///     ..Default::default()
/// })?;
/// assert_eq!(shift_labels(&batch), vec![2, 3, -100, 5, -100]);
/// # Ok::<(), thd::Error>(())
/// ```
pub fn shift_labels(batch: &PackedBatch) -> Vec<i64> {
    if batch.label_convention() == LabelConvention::Shifted {
        return batch.labels().to_vec();
    }
    let labels = batch.labels();
    let mut out = vec![IGNORE_INDEX; labels.len()];
    for i in 0..batch.num_segments() {
        let r = batch.real_tokens(i);
        if r.len() > 1 {
            out[r.start..r.end - 1].copy_from_slice(&labels[r.start + 1..r.end]);
        }
    }
    out
}

/// The same batch with [`shift_labels`] applied and the convention set to
/// [`LabelConvention::Shifted`], ready to be split across CP ranks.
///
/// # Errors
/// Any LAYOUT error of the result (none for a valid input).
///
/// # Example
/// ```
/// use thd::cp::shifted_batch;
/// use thd::{LabelConvention, PackedBatch, PackedBatchParts};
/// let batch = PackedBatch::new(PackedBatchParts {
///     input_ids: vec![1, 2, 3],
///     labels: vec![-100, 2, 3],
///     cu_seqlens: vec![0, 3],
///     ..Default::default()
/// })?;
/// let shifted = shifted_batch(&batch)?;
/// assert_eq!(shifted.labels(), &[2, 3, -100]);
/// assert_eq!(shifted.label_convention(), LabelConvention::Shifted);
/// # Ok::<(), thd::Error>(())
/// ```
pub fn shifted_batch(batch: &PackedBatch) -> Result<PackedBatch> {
    let wide = |c: &crate::CuSeqlens| c.as_slice().iter().map(|&x| i64::from(x)).collect();
    PackedBatch::new(PackedBatchParts {
        input_ids: batch.input_ids().to_vec(),
        labels: shift_labels(batch),
        position_ids: Some(batch.position_ids().to_vec()),
        cu_seqlens: wide(batch.cu_seqlens()),
        cu_seqlens_padded: batch.cu_seqlens_padded().map(wide),
        num_real_seqs: batch.num_real_seqs(),
        label_convention: LabelConvention::Shifted,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn padding_and_segment_ends_get_no_target() {
        let batch = PackedBatch::new(PackedBatchParts {
            input_ids: vec![1, 2, 0, 0, 5, 6, 7, 0],
            labels: vec![-100, 2, -100, -100, -100, 6, 7, -100],
            cu_seqlens: vec![0, 2, 5],
            cu_seqlens_padded: Some(vec![0, 4, 8]),
            ..Default::default()
        })
        .unwrap();
        assert_eq!(shift_labels(&batch), vec![2, -100, -100, -100, 6, 7, -100, -100]);
    }
}
