use crate::{Error, IGNORE_INDEX, PackedBatch, PackedBatchParts, Result};

/// Options of [`pad_to_multiple_of`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct MockPadding {
    /// Pad the token count `T` up to a multiple of this (bionemo / CodonFM `pad_to_multiple_of`).
    pub multiple_of: usize,
    /// Token id of the mock tokens (ESM-2: 1, CodonFM: 3).
    pub pad_token_id: i64,
    /// `None`: one mock segment, whatever its length (bionemo `_pt_pad_to_multiple_of`).
    /// `Some(S)`: split the mock into segments of at most `S` tokens (CodonFM
    /// `CodonTHDCollator`, which keeps every segment within `max_seq_length` for fused RoPE).
    pub max_mock_len: Option<usize>,
}

/// Appends mock segments so the token count becomes a multiple of `multiple_of`, and records
/// how many segments are real (bionemo's "Option A").
///
/// **Input:** a [`PackedBatch`] whose (storage) offsets cover every token. **Output:** the same
/// batch with `r = (−T) mod m` more tokens, described by one mock segment (or several of at most
/// `max_mock_len` tokens), and `num_real_seqs` set.
///
/// ```text
/// r            = (m − T mod m) mod m                  (0: nothing appended)
/// input_ids   += [pad_token_id]·r,  labels += [-100]·r
/// cu_seqlens  += [cu[-1] + c₁, cu[-1] + c₁ + c₂, …]   c = one chunk of r, or chunks ≤ max_mock_len
/// position_ids += arange(c₁) ++ arange(c₂) ++ …
/// num_real_seqs = the batch's num_real_seqs, or B    (the mock never counts as real)
/// ```
///
/// The mock carries only labels -100, so it adds no loss, but a kernel given `cu_seqlens`
/// computes its `c²` attention: hardware work, not useful work. Loggers tell them apart with
/// `num_real_seqs` (the mocks are always a suffix). A batch with `cu_seqlens_padded` gets the
/// mock appended to both offsets (the mock is its own padded slot), so a CP-padded batch can get
/// an AReaL-style dummy tail.
///
/// # Errors
/// [`Error::ZeroFactor`] if `multiple_of` or `max_mock_len` is 0; [`Error::UncoveredTokens`]
/// if tokens lie past the last offset (static padding), which a mock appended after them would
/// misdescribe.
///
/// # Example
/// ```
/// use thd::collate::{Document, FlattenOptions, MockPadding, flatten, pad_to_multiple_of};
/// let ex = [Document::new(vec![0, 5, 6, 7, 2]), Document::new(vec![0, 8, 9, 10, 11, 2])];
/// let batch = flatten(&ex, &FlattenOptions::default())?;
/// let opts = MockPadding { multiple_of: 8, pad_token_id: 1, max_mock_len: None };
/// let padded = pad_to_multiple_of(&batch, &opts)?;
/// assert_eq!(padded.num_tokens(), 16);
/// assert_eq!(padded.cu_seqlens().as_slice(), &[0, 5, 11, 16]); // one mock of 5 tokens
/// assert_eq!(padded.num_real_seqs(), Some(2));
///
/// // CodonFM: the mock is split into segments of at most 2 tokens.
/// let codon = MockPadding { max_mock_len: Some(2), ..opts };
/// let chunked = pad_to_multiple_of(&batch, &codon)?;
/// assert_eq!(chunked.cu_seqlens().as_slice(), &[0, 5, 11, 13, 15, 16]);
/// # Ok::<(), thd::Error>(())
/// ```
pub fn pad_to_multiple_of(batch: &PackedBatch, opts: &MockPadding) -> Result<PackedBatch> {
    if opts.multiple_of == 0 {
        return Err(Error::ZeroFactor { name: "pad_to_multiple_of" });
    }
    if opts.max_mock_len == Some(0) {
        return Err(Error::ZeroFactor { name: "max_mock_len" });
    }
    let tokens = batch.num_tokens();
    let covered = batch.storage_cu_seqlens().total();
    if covered != tokens {
        return Err(Error::UncoveredTokens { op: "pad_to_multiple_of", covered, tokens });
    }
    let m = opts.multiple_of;
    let remainder = (m - tokens % m) % m;
    let chunks = mock_chunks(remainder, opts.max_mock_len);

    let mut input_ids = batch.input_ids().to_vec();
    let mut labels = batch.labels().to_vec();
    let mut position_ids = batch.position_ids().to_vec();
    input_ids.resize(tokens + remainder, opts.pad_token_id);
    labels.resize(tokens + remainder, IGNORE_INDEX);
    let mut cu: Vec<i64> = batch.cu_seqlens().as_slice().iter().map(|&c| i64::from(c)).collect();
    let mut padded: Option<Vec<i64>> =
        batch.cu_seqlens_padded().map(|p| p.as_slice().iter().map(|&c| i64::from(c)).collect());
    for &c in &chunks {
        position_ids.extend(0..c as i64);
        let last = *cu.last().expect("validated offsets are non-empty");
        cu.push(last + c as i64);
        if let Some(p) = padded.as_mut() {
            let last = *p.last().expect("validated offsets are non-empty");
            p.push(last + c as i64);
        }
    }
    PackedBatch::new(PackedBatchParts {
        input_ids,
        labels,
        position_ids: Some(position_ids),
        cu_seqlens: cu,
        cu_seqlens_padded: padded,
        num_real_seqs: Some(batch.num_real_segments()),
        label_convention: batch.label_convention(),
    })
}

/// The bionemo `attention_mask`: 1 on the real tokens of real segments, 0 on mock segments and
/// on padding.
///
/// # Example
/// ```
/// use thd::collate::{Document, FlattenOptions, MockPadding, attention_mask, flatten, pad_to_multiple_of};
/// let batch = flatten(&[Document::new(vec![0, 5, 2])], &FlattenOptions::default())?;
/// let opts = MockPadding { multiple_of: 4, pad_token_id: 1, max_mock_len: None };
/// let padded = pad_to_multiple_of(&batch, &opts)?;
/// assert_eq!(attention_mask(&padded), vec![1, 1, 1, 0]);
/// # Ok::<(), thd::Error>(())
/// ```
pub fn attention_mask(batch: &PackedBatch) -> Vec<i64> {
    let mut mask = vec![0; batch.num_tokens()];
    for i in 0..batch.num_real_segments() {
        for t in batch.real_tokens(i) {
            mask[t] = 1;
        }
    }
    mask
}

/// Lengths of the mock segments for a remainder `r`: one, or chunks of at most `max`.
fn mock_chunks(remainder: usize, max: Option<usize>) -> Vec<usize> {
    if remainder == 0 {
        return Vec::new();
    }
    match max {
        None => vec![remainder],
        Some(max) => {
            let mut chunks = vec![max; remainder / max];
            if !remainder.is_multiple_of(max) {
                chunks.push(remainder % max);
            }
            chunks
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mock_chunks_cover_the_remainder() {
        assert_eq!(mock_chunks(0, Some(5)), Vec::<usize>::new());
        assert_eq!(mock_chunks(7, None), vec![7]);
        assert_eq!(mock_chunks(10, Some(5)), vec![5, 5]);
        assert_eq!(mock_chunks(12, Some(5)), vec![5, 5, 2]);
        assert_eq!(mock_chunks(3, Some(5)), vec![3]);
    }

    #[test]
    fn a_cp_padded_batch_gets_the_mock_in_both_offsets() {
        // AReaL-style dummy tail: lengths [5, 3] padded to [8, 4], then to a multiple of 16.
        let batch = PackedBatch::new(PackedBatchParts {
            input_ids: vec![1; 12],
            labels: vec![-100; 12],
            cu_seqlens: vec![0, 5, 8],
            cu_seqlens_padded: Some(vec![0, 8, 12]),
            ..Default::default()
        })
        .unwrap();
        let opts = MockPadding { multiple_of: 16, pad_token_id: 0, max_mock_len: None };
        let p = pad_to_multiple_of(&batch, &opts).unwrap();
        assert_eq!(p.cu_seqlens().as_slice(), &[0, 5, 8, 12]);
        assert_eq!(p.cu_seqlens_padded().unwrap().as_slice(), &[0, 8, 12, 16]);
        assert_eq!(p.num_real_segments(), 2);
        assert_eq!(p.real_tokens(2), 12..16);
    }

    #[test]
    fn static_padding_must_be_covered_first() {
        let batch = PackedBatch::new(PackedBatchParts {
            input_ids: vec![1, 2, 0],
            labels: vec![-100, 2, -100],
            cu_seqlens: vec![0, 2],
            ..Default::default()
        })
        .unwrap();
        let opts = MockPadding { multiple_of: 4, pad_token_id: 0, max_mock_len: None };
        assert_eq!(
            pad_to_multiple_of(&batch, &opts),
            Err(Error::UncoveredTokens { op: "pad_to_multiple_of", covered: 2, tokens: 3 })
        );
        let zero = MockPadding { multiple_of: 0, ..opts };
        assert_eq!(
            pad_to_multiple_of(&batch, &zero),
            Err(Error::ZeroFactor { name: "pad_to_multiple_of" })
        );
    }
}
