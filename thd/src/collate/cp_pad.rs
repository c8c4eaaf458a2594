use crate::{CuSeqlens, Error, IGNORE_INDEX, PackedBatch, PackedBatchParts, Result, SeqLens};

/// Options of per-sequence padding for context parallelism.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct CpPadding {
    /// Every sequence is padded to a multiple of this (`2·cp` for zigzag, or `2·cp·tp`).
    pub divisibility: usize,
    /// Token id of the padding (TE default 0; ESM-2 uses 1).
    pub pad_token_id: i64,
    /// Label of the padding (TE default -100).
    pub pad_label_id: i64,
}

impl CpPadding {
    /// Padding for zigzag CP of size `cp`: divisibility `2·cp`, pad token `pad_token_id`,
    /// label -100.
    ///
    /// # Example
    /// ```
    /// # use thd::collate::CpPadding;
    /// assert_eq!(CpPadding::for_cp(4, 0).divisibility, 8);
    /// ```
    pub fn for_cp(cp: usize, pad_token_id: i64) -> Self {
        Self { divisibility: 2 * cp, pad_token_id, pad_label_id: IGNORE_INDEX }
    }
}

/// A THD stream with each sequence padded in place (TransformerEngine
/// `pad_thd_sequences_for_cp` plus `generate_positional_ids_for_cp`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CpPadded {
    /// Token ids, each sequence followed by its own padding.
    pub input_ids: Vec<i64>,
    /// Labels, padding labelled `pad_label_id`.
    pub labels: Vec<i64>,
    /// `arange(pᵢ)` per sequence: positions continue through the sequence's own padding.
    pub position_ids: Vec<i64>,
    /// Storage offsets `[0, p₀, p₀+p₁, …]` with `pᵢ = ⌈sᵢ/d⌉·d`.
    pub cu_seqlens_padded: CuSeqlens,
}

/// Pads every sequence of a THD stream to a multiple of `d` (TransformerEngine
/// `pad_thd_sequences_for_cp`).
///
/// **Input:** `input_ids`, `labels` of `T = cu_seqlens.total()` tokens. **Output:**
/// [`CpPadded`]; the real offsets `cu_seqlens` stay as they are and address the real tokens
/// through `cu_seqlens_padded`.
///
/// ```text
/// pᵢ = ⌈sᵢ / d⌉ · d                      (a zero-length sequence stays zero-length)
/// out = concat(seqᵢ ++ [pad]·(pᵢ − sᵢ))
/// cu_seqlens_padded = [0] ++ cumsum(pᵢ)
/// ```
///
/// # Errors
/// [`Error::ZeroFactor`] if `d == 0`; [`Error::TokenCountMismatch`] if `labels` and
/// `input_ids` differ in length; [`Error::UncoveredTokens`] if `cu_seqlens` does not cover
/// exactly the tokens given (TE drops the tokens past the last offset);
/// [`Error::TotalLengthOverflow`] if the padded total does not fit int32.
///
/// # Example
/// ```
/// use thd::CuSeqlens;
/// use thd::collate::{CpPadding, pad_sequences_for_cp};
/// let cu = CuSeqlens::try_from(vec![0, 2, 5])?;
/// let opts = CpPadding { divisibility: 4, pad_token_id: 0, pad_label_id: -100 };
/// let out = pad_sequences_for_cp(&[1, 1, 2, 2, 2], &[10, 11, 20, 21, 22], &cu, &opts)?;
/// assert_eq!(out.input_ids, vec![1, 1, 0, 0, 2, 2, 2, 0]);
/// assert_eq!(out.cu_seqlens_padded.as_slice(), &[0, 4, 8]);
/// assert_eq!(out.position_ids, vec![0, 1, 2, 3, 0, 1, 2, 3]);
/// # Ok::<(), thd::Error>(())
/// ```
pub fn pad_sequences_for_cp(
    input_ids: &[i64],
    labels: &[i64],
    cu_seqlens: &CuSeqlens,
    opts: &CpPadding,
) -> Result<CpPadded> {
    let d = opts.divisibility;
    if d == 0 {
        return Err(Error::ZeroFactor { name: "divisibility" });
    }
    if labels.len() != input_ids.len() {
        return Err(Error::TokenCountMismatch {
            key: "labels",
            len: labels.len(),
            expected: input_ids.len(),
        });
    }
    if cu_seqlens.total() != input_ids.len() {
        return Err(Error::UncoveredTokens {
            op: "pad_sequences_for_cp",
            covered: cu_seqlens.total(),
            tokens: input_ids.len(),
        });
    }
    let padded_lens: Vec<u32> = cu_seqlens
        .segments()
        .map(|r| padded_len(r.len(), d))
        .map(|p| u32::try_from(p).unwrap_or(u32::MAX))
        .collect();
    let cu_padded = SeqLens::new(padded_lens).to_cu_seqlens()?;
    let total = cu_padded.total();
    let mut out = CpPadded {
        input_ids: Vec::with_capacity(total),
        labels: Vec::with_capacity(total),
        position_ids: Vec::with_capacity(total),
        cu_seqlens_padded: cu_padded,
    };
    for r in cu_seqlens.segments() {
        let p = padded_len(r.len(), d);
        out.input_ids.extend_from_slice(&input_ids[r.clone()]);
        out.input_ids.resize(out.input_ids.len() + p - r.len(), opts.pad_token_id);
        out.labels.extend_from_slice(&labels[r.clone()]);
        out.labels.resize(out.labels.len() + p - r.len(), opts.pad_label_id);
        out.position_ids.extend(0..p as i64);
    }
    Ok(out)
}

/// Pads every segment of a [`PackedBatch`] to a multiple of `d` for context parallelism
/// (bionemo `pad_sequences_to_be_divisible_by`, TE per-sequence padding).
///
/// **Output:** a batch with `cu_seqlens` unchanged (real lengths), `cu_seqlens_padded` the
/// storage slots, position ids `arange(pᵢ)` per slot, and `num_real_seqs` carried over.
/// Unlike bionemo, every per-token field is padded (bionemo leaves `position_ids` and
/// `attention_mask` at the unpadded length).
///
/// # Errors
/// [`Error::AlreadyPadded`] if the batch already has `cu_seqlens_padded`;
/// [`Error::UncoveredTokens`] if tokens lie past the last offset; the errors of
/// [`pad_sequences_for_cp`]; any LAYOUT error of the result (e.g. a `pad_label_id` other than
/// -100 where the boundary label must be ignored).
///
/// # Example
/// ```
/// use thd::collate::{CpPadding, Document, FlattenOptions, flatten, pad_for_cp};
/// let ex = [Document::new(vec![1, 2, 3]), Document::new(vec![5, 6])];
/// let batch = flatten(&ex, &FlattenOptions::default())?;
/// let padded = pad_for_cp(&batch, &CpPadding::for_cp(2, 0))?;
/// assert_eq!(padded.input_ids(), &[1, 2, 3, 0, 5, 6, 0, 0]);
/// assert_eq!(padded.cu_seqlens().as_slice(), &[0, 3, 5]);
/// assert_eq!(padded.cu_seqlens_padded().unwrap().as_slice(), &[0, 4, 8]);
/// # Ok::<(), thd::Error>(())
/// ```
pub fn pad_for_cp(batch: &PackedBatch, opts: &CpPadding) -> Result<PackedBatch> {
    if batch.cu_seqlens_padded().is_some() {
        return Err(Error::AlreadyPadded { op: "pad_for_cp" });
    }
    if batch.cu_seqlens().total() != batch.num_tokens() {
        return Err(Error::UncoveredTokens {
            op: "pad_for_cp",
            covered: batch.cu_seqlens().total(),
            tokens: batch.num_tokens(),
        });
    }
    let out = pad_sequences_for_cp(batch.input_ids(), batch.labels(), batch.cu_seqlens(), opts)?;
    PackedBatch::new(PackedBatchParts {
        input_ids: out.input_ids,
        labels: out.labels,
        position_ids: Some(out.position_ids),
        cu_seqlens: batch.cu_seqlens().as_slice().iter().map(|&c| i64::from(c)).collect(),
        cu_seqlens_padded: Some(
            out.cu_seqlens_padded.as_slice().iter().map(|&c| i64::from(c)).collect(),
        ),
        num_real_seqs: batch.num_real_seqs(),
        label_convention: batch.label_convention(),
    })
}

/// `⌈len / d⌉ · d`.
fn padded_len(len: usize, d: usize) -> usize {
    len.div_ceil(d) * d
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn padded_len_rounds_up_and_keeps_zero() {
        assert_eq!(padded_len(0, 4), 0);
        assert_eq!(padded_len(1, 4), 4);
        assert_eq!(padded_len(4, 4), 4);
        assert_eq!(padded_len(5, 4), 8);
    }

    #[test]
    fn zero_length_sequence_gets_no_padding() {
        let cu = CuSeqlens::try_from(vec![0, 3, 3]).unwrap();
        let opts = CpPadding { divisibility: 4, pad_token_id: 9, pad_label_id: -100 };
        let out = pad_sequences_for_cp(&[1, 2, 3], &[1, 2, 3], &cu, &opts).unwrap();
        assert_eq!(out.input_ids, vec![1, 2, 3, 9]);
        assert_eq!(out.cu_seqlens_padded.as_slice(), &[0, 4, 4]);
    }
}
