use crate::{CuSeqlens, Error, LabelConvention, PackedBatch, PackedBatchParts, Result, SeqLens};

/// A BSHD-packed batch as NeMo Automodel's packer emits it: `rows` packs of `seq_len` tokens,
/// each pack holding up to `K` sequences described by `seq_lens` (real) and `seq_lens_padded`
/// (slots: separators, CP padding and, on a pack's last sequence, the pack padding), with
/// empty slots filled by a sentinel (default -1000).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct BshdBatch {
    /// Packs `B`.
    pub rows: usize,
    /// Tokens per pack `S`.
    pub seq_len: usize,
    /// Token ids, `[B, S]` row-major.
    pub input_ids: Vec<i64>,
    /// Labels, `[B, S]`.
    pub labels: Vec<i64>,
    /// Position ids, `[B, S]`, if the batch has them.
    pub position_ids: Option<Vec<i64>>,
    /// Real lengths, `[B][K]`, sentinel in empty slots.
    pub seq_lens: Option<Vec<Vec<i64>>>,
    /// Slot lengths, `[B][K]`, sentinel in the same empty slots.
    pub seq_lens_padded: Option<Vec<Vec<i64>>>,
}

/// What to do with a row whose slots do not fill it.
///
/// The offsets of all rows are one cumulative sum, so a row whose slots sum to less than `S`
/// shifts every later row's offsets onto the wrong tokens. Automodel's packer never emits such
/// rows (it adds the pack padding to the last slot), but `process_input_for_thd` accepts them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum RowTail {
    /// [`Error::RowSlotsMismatch`] unless every row but the last is filled exactly by its
    /// slots and the last one at most.
    #[default]
    Reject,
    /// Automodel's behaviour: offsets computed as if rows were contiguous, whatever they
    /// address. Only the total is checked.
    Upstream,
}

/// Options of [`bshd_to_thd`]; the defaults are Automodel's.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct BshdOptions {
    /// Value marking an empty slot in `seq_lens` / `seq_lens_padded` (Automodel: -1000).
    pub sentinel: i64,
    /// Pad id for the metadata-free padding mask (Automodel: 0).
    pub padding_token_id: i64,
    /// Rows whose slots do not fill them.
    pub row_tail: RowTail,
}

impl Default for BshdOptions {
    fn default() -> Self {
        Self { sentinel: -1000, padding_token_id: 0, row_tail: RowTail::Reject }
    }
}

/// A THD batch as Automodel's `process_input_for_thd` returns it, plus the layout it came
/// from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ThdInputs {
    /// Token ids, `[B·S]`.
    pub input_ids: Vec<i64>,
    /// Labels, `[B·S]`.
    pub labels: Vec<i64>,
    /// Position ids, `[B·S]`, if given.
    pub position_ids: Option<Vec<i64>>,
    /// Cumulative real lengths (last entry grown to `B·S` by trailing-pad absorption).
    pub cu_seqlens: Option<CuSeqlens>,
    /// Cumulative slot lengths, only when they differ from `cu_seqlens` after absorption.
    pub cu_seqlens_padded: Option<CuSeqlens>,
    /// `max(diff(cu_seqlens))` after absorption: the widest slot the kernel sees.
    pub max_seqlen: Option<usize>,
    /// True on every token that is padding according to the pack layout (not token values).
    pub padding_mask: Vec<bool>,
    /// The real lengths, sentinels removed, before absorption.
    pub real_seq_lens: Option<SeqLens>,
    /// The slot lengths (`seq_lens_padded`, or `seq_lens` without it), before absorption.
    pub slot_lens: Option<SeqLens>,
}

impl ThdInputs {
    /// The exact layout as a validated [`PackedBatch`]: `cu_seqlens` from the real lengths,
    /// `cu_seqlens_padded` from the slots when they differ. Absorption is a kernel-shape
    /// convenience and is not applied: the absorbed pad tokens stay padding.
    ///
    /// # Errors
    /// [`Error::MissingKey`] without `seq_lens`; any LAYOUT error of the batch (position ids
    /// that do not restart, a label crossing a boundary under `convention`, ...).
    ///
    /// # Example
    /// ```
    /// use thd::LabelConvention;
    /// use thd::collate::{BshdBatch, BshdOptions, bshd_to_thd};
    /// let batch = BshdBatch {
    ///     rows: 1,
    ///     seq_len: 8,
    ///     input_ids: vec![1, 2, 3, 4, 5, 0, 0, 0],
    ///     labels: vec![-100, 2, 3, -100, 5, -100, -100, -100],
    ///     position_ids: Some(vec![0, 1, 2, 0, 1, 2, 3, 4]),
    ///     seq_lens: Some(vec![vec![3, 2]]),
    ///     seq_lens_padded: Some(vec![vec![3, 5]]),
    /// };
    /// let thd = bshd_to_thd(&batch, &BshdOptions::default())?;
    /// assert_eq!(thd.cu_seqlens.as_ref().unwrap().as_slice(), &[0, 3, 8]); // absorbed
    /// let packed = thd.to_packed_batch(LabelConvention::Unshifted)?;
    /// assert_eq!(packed.cu_seqlens().as_slice(), &[0, 3, 5]); // the real lengths
    /// assert_eq!(packed.cu_seqlens_padded().unwrap().as_slice(), &[0, 3, 8]);
    /// # Ok::<(), thd::Error>(())
    /// ```
    pub fn to_packed_batch(&self, convention: LabelConvention) -> Result<PackedBatch> {
        let (Some(real), Some(slots)) = (&self.real_seq_lens, &self.slot_lens) else {
            return Err(Error::MissingKey { key: "seq_lens", op: "ThdInputs::to_packed_batch" });
        };
        let cu = real.to_cu_seqlens()?;
        let cu_p = slots.to_cu_seqlens()?;
        PackedBatch::new(PackedBatchParts {
            input_ids: self.input_ids.clone(),
            labels: self.labels.clone(),
            position_ids: self.position_ids.clone(),
            cu_seqlens: widen(&cu),
            cu_seqlens_padded: (cu_p != cu).then(|| widen(&cu_p)),
            num_real_seqs: None,
            label_convention: convention,
        })
    }
}

/// BSHD → THD (NeMo Automodel `process_input_for_thd`): flattens the rows and builds the
/// offsets from the per-pack sequence lengths.
///
/// ```text
/// valid  = seq_lens, row by row, sentinels removed;   valid_p likewise (or valid)
/// cu     = [0] ++ cumsum(valid)          (real lengths: logical offsets)
/// cu_p   = [0] ++ cumsum(valid_p)        (slots: physical offsets)
/// absorption: if cu[:-1] == cu_p[:-1] and cu[-1] < B·S:  cu[-1] = B·S, cu_p = cu
/// cu_seqlens_padded emitted iff cu_p != cu;  max_seqlen = max(diff(cu))
/// padding_mask[p] = p is not among the first valid[i] tokens of its slot i
/// ```
///
/// Absorption (Automodel #2316) grows the last segment over the trailing pack padding so TE
/// can skip the `pad_between_seqs` path; the gate is structural, not a CP-size check, and it
/// extends the last slot to `B·S`. Without `seq_lens`, no offsets are built and the padding
/// mask comes from token values, row by row ([`padding_mask_from_token_ids`]).
///
/// # Errors
/// [`Error::ShapeMismatch`] for tensors that are not `[B, S]` / `[B][K]`;
/// [`Error::NegativeSeqLen`], [`Error::SentinelMismatch`], [`Error::PaddedShorterThanReal`]
/// for bad lengths; [`Error::NoExamples`] if every slot is the sentinel (Automodel raises
/// `IndexError`); [`Error::RowSlotsMismatch`] for a row its slots do not fill (with
/// [`RowTail::Reject`]); [`Error::CuSeqlensBeyondTokens`] if the slots need more than `B·S`
/// tokens; [`Error::PadIdInContent`] on the metadata-free path.
///
/// # Example
/// ```
/// use thd::collate::{BshdBatch, BshdOptions, bshd_to_thd};
/// let batch = BshdBatch {
///     rows: 2,
///     seq_len: 6,
///     input_ids: vec![1, 2, 3, 99, 4, 5, 6, 7, 8, 9, 10, 11],
///     labels: vec![0; 12],
///     position_ids: None,
///     seq_lens: Some(vec![vec![3, 2], vec![6, -1000]]),
///     seq_lens_padded: Some(vec![vec![4, 2], vec![6, -1000]]),
/// };
/// let thd = bshd_to_thd(&batch, &BshdOptions::default())?;
/// assert_eq!(thd.cu_seqlens.unwrap().as_slice(), &[0, 3, 5, 11]);
/// assert_eq!(thd.cu_seqlens_padded.unwrap().as_slice(), &[0, 4, 6, 12]);
/// assert_eq!(thd.max_seqlen, Some(6));
/// assert_eq!(thd.padding_mask.iter().filter(|&&p| p).count(), 1); // token 3
/// # Ok::<(), thd::Error>(())
/// ```
pub fn bshd_to_thd(batch: &BshdBatch, opts: &BshdOptions) -> Result<ThdInputs> {
    check_batch_shapes(batch)?;
    let tokens = batch.rows * batch.seq_len;
    let mut out = ThdInputs {
        input_ids: batch.input_ids.clone(),
        labels: batch.labels.clone(),
        position_ids: batch.position_ids.clone(),
        cu_seqlens: None,
        cu_seqlens_padded: None,
        max_seqlen: None,
        padding_mask: Vec::new(),
        real_seq_lens: None,
        slot_lens: None,
    };
    let Some(seq_lens) = &batch.seq_lens else {
        let mut mask = Vec::with_capacity(tokens);
        if batch.seq_len > 0 {
            for (row, ids) in batch.input_ids.chunks(batch.seq_len).enumerate() {
                let m = padding_mask_from_token_ids(ids, opts.padding_token_id)
                    .map_err(|e| at_row_offset(e, row, row * batch.seq_len))?;
                mask.extend(m);
            }
        }
        out.padding_mask = mask;
        return Ok(out);
    };

    let rows = read_lengths(batch, seq_lens, batch.seq_lens_padded.as_deref(), opts.sentinel)?;
    let real: Vec<u32> = rows.iter().flatten().map(|&(r, _)| r).collect();
    if real.is_empty() {
        return Err(Error::NoExamples { collator: "bshd_to_thd" });
    }
    let slots: Vec<u32> = rows.iter().flatten().map(|&(_, s)| s).collect();
    check_rows(&rows, batch.seq_len, opts.row_tail)?;

    let real = SeqLens::new(real);
    let slots = SeqLens::new(slots);
    let cu = real.to_cu_seqlens()?;
    let cu_slots = slots.to_cu_seqlens()?;
    for (name, c) in [("cu_seqlens", &cu), ("cu_seqlens_padded", &cu_slots)] {
        if c.total() > tokens {
            return Err(Error::CuSeqlensBeyondTokens {
                name,
                index: c.num_segments(),
                value: c.total() as i64,
                tokens,
            });
        }
    }
    let mut final_cu = widen(&cu);
    let mut final_p = batch.seq_lens_padded.as_ref().map(|_| widen(&cu_slots));
    if let Some(p) = &final_p {
        let n = final_cu.len();
        if n > 1 && final_cu[..n - 1] == p[..n - 1] && final_cu[n - 1] < tokens as i64 {
            final_cu[n - 1] = tokens as i64;
            final_p = Some(final_cu.clone());
        }
    }
    let final_cu = CuSeqlens::from_i64("cu_seqlens", &final_cu)?;
    out.max_seqlen = Some(final_cu.max_seqlen());
    out.cu_seqlens_padded = match final_p {
        Some(p) if p.as_slice() != widen(&final_cu).as_slice() => {
            Some(CuSeqlens::from_i64("cu_seqlens_padded", &p)?)
        }
        _ => None,
    };
    out.cu_seqlens = Some(final_cu);
    out.padding_mask = layout_padding_mask(&real, &cu_slots, tokens);
    out.real_seq_lens = Some(real);
    out.slot_lens = Some(slots);
    Ok(out)
}

/// Several THD chunks of a BSHD batch (NeMo Automodel `split_batch_into_thd_chunks`), one per
/// pipeline micro-batch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ThdChunks {
    /// One [`ThdInputs`] per chunk, in order.
    pub chunks: Vec<ThdInputs>,
    /// The sentinel the stacked offsets are right-padded with.
    pub sentinel: i64,
}

impl ThdChunks {
    /// `cu_seqlens` stacked to `[num_chunks, max_len]`, right-padded with the sentinel; `None`
    /// if the chunks have no offsets.
    ///
    /// # Example
    /// ```
    /// use thd::collate::{BshdBatch, BshdOptions, split_into_thd_chunks};
    /// let batch = BshdBatch {
    ///     rows: 2,
    ///     seq_len: 4,
    ///     input_ids: vec![0; 8],
    ///     labels: vec![0; 8],
    ///     position_ids: None,
    ///     seq_lens: Some(vec![vec![1, 2], vec![4, -1000]]),
    ///     seq_lens_padded: Some(vec![vec![2, 2], vec![4, -1000]]),
    /// };
    /// let chunks = split_into_thd_chunks(&batch, 2, &BshdOptions::default())?;
    /// assert_eq!(chunks.stacked_cu_seqlens(), Some(vec![vec![0, 1, 3], vec![0, 4, -1000]]));
    /// # Ok::<(), thd::Error>(())
    /// ```
    pub fn stacked_cu_seqlens(&self) -> Option<Vec<Vec<i64>>> {
        let cus: Option<Vec<&CuSeqlens>> =
            self.chunks.iter().map(|c| c.cu_seqlens.as_ref()).collect();
        Some(self.stack(&cus?))
    }

    /// `cu_seqlens_padded` stacked the same way, present if any chunk emits it (the chunks
    /// that do not contribute their `cu_seqlens`).
    ///
    /// # Example
    /// ```
    /// use thd::collate::{BshdBatch, BshdOptions, split_into_thd_chunks};
    /// let batch = BshdBatch {
    ///     rows: 2,
    ///     seq_len: 4,
    ///     input_ids: vec![0; 8],
    ///     labels: vec![0; 8],
    ///     position_ids: None,
    ///     seq_lens: Some(vec![vec![1, 2], vec![4, -1000]]),
    ///     seq_lens_padded: Some(vec![vec![2, 2], vec![4, -1000]]),
    /// };
    /// let chunks = split_into_thd_chunks(&batch, 2, &BshdOptions::default())?;
    /// assert_eq!(chunks.stacked_cu_seqlens_padded(), Some(vec![vec![0, 2, 4], vec![0, 4, -1000]]));
    /// # Ok::<(), thd::Error>(())
    /// ```
    pub fn stacked_cu_seqlens_padded(&self) -> Option<Vec<Vec<i64>>> {
        if self.chunks.iter().all(|c| c.cu_seqlens_padded.is_none()) {
            return None;
        }
        let cus: Option<Vec<&CuSeqlens>> = self
            .chunks
            .iter()
            .map(|c| c.cu_seqlens_padded.as_ref().or(c.cu_seqlens.as_ref()))
            .collect();
        Some(self.stack(&cus?))
    }

    /// `max_seqlen` of every chunk, if all have one.
    ///
    /// # Example
    /// ```
    /// use thd::collate::{BshdBatch, BshdOptions, split_into_thd_chunks};
    /// let batch = BshdBatch {
    ///     rows: 2,
    ///     seq_len: 4,
    ///     input_ids: vec![0; 8],
    ///     labels: vec![0; 8],
    ///     position_ids: None,
    ///     seq_lens: Some(vec![vec![1, 2], vec![4, -1000]]),
    ///     seq_lens_padded: Some(vec![vec![2, 2], vec![4, -1000]]),
    /// };
    /// let chunks = split_into_thd_chunks(&batch, 2, &BshdOptions::default())?;
    /// assert_eq!(chunks.max_seqlen(), Some(vec![2, 4]));
    /// # Ok::<(), thd::Error>(())
    /// ```
    pub fn max_seqlen(&self) -> Option<Vec<usize>> {
        self.chunks.iter().map(|c| c.max_seqlen).collect()
    }

    fn stack(&self, cus: &[&CuSeqlens]) -> Vec<Vec<i64>> {
        let width = cus.iter().map(|c| c.as_slice().len()).max().unwrap_or(0);
        cus.iter()
            .map(|c| {
                let mut row = widen(c);
                row.resize(width, self.sentinel);
                row
            })
            .collect()
    }
}

/// Splits a BSHD batch into `num_chunks` groups of consecutive rows and converts each with
/// [`bshd_to_thd`] (NeMo Automodel `split_batch_into_thd_chunks`).
///
/// `num_chunks ≤ 1` gives one chunk holding the whole batch (Automodel then returns the
/// unstacked dict).
///
/// # Errors
/// [`Error::RowsNotDivisible`] if the rows do not split evenly (Automodel silently drops the
/// remainder rows); the errors of [`bshd_to_thd`] for each chunk.
///
/// # Example
/// ```
/// use thd::collate::{BshdBatch, BshdOptions, split_into_thd_chunks};
/// let batch = BshdBatch {
///     rows: 4,
///     seq_len: 4,
///     input_ids: (0..16).collect(),
///     labels: vec![0; 16],
///     position_ids: None,
///     seq_lens: Some(vec![vec![3, -1000], vec![2, 2], vec![2, -1000], vec![4, -1000]]),
///     seq_lens_padded: Some(vec![vec![4, -1000], vec![2, 2], vec![4, -1000], vec![4, -1000]]),
/// };
/// let chunks = split_into_thd_chunks(&batch, 2, &BshdOptions::default())?;
/// assert_eq!(chunks.stacked_cu_seqlens().unwrap(), vec![vec![0, 3, 5, 7], vec![0, 2, 6, -1000]]);
/// assert_eq!(
///     chunks.stacked_cu_seqlens_padded().unwrap(),
///     vec![vec![0, 4, 6, 8], vec![0, 4, 8, -1000]]
/// );
/// assert_eq!(chunks.max_seqlen(), Some(vec![3, 4]));
/// # Ok::<(), thd::Error>(())
/// ```
pub fn split_into_thd_chunks(
    batch: &BshdBatch,
    num_chunks: usize,
    opts: &BshdOptions,
) -> Result<ThdChunks> {
    if num_chunks <= 1 {
        return Ok(ThdChunks { chunks: vec![bshd_to_thd(batch, opts)?], sentinel: opts.sentinel });
    }
    if !batch.rows.is_multiple_of(num_chunks) {
        return Err(Error::RowsNotDivisible { rows: batch.rows, num_chunks });
    }
    check_batch_shapes(batch)?;
    let per = batch.rows / num_chunks;
    let s = batch.seq_len;
    let rows_of = |v: &[i64], c: usize| v[c * per * s..(c + 1) * per * s].to_vec();
    let chunks = (0..num_chunks)
        .map(|c| {
            let part = BshdBatch {
                rows: per,
                seq_len: s,
                input_ids: rows_of(&batch.input_ids, c),
                labels: rows_of(&batch.labels, c),
                position_ids: batch.position_ids.as_ref().map(|p| rows_of(p, c)),
                seq_lens: batch.seq_lens.as_ref().map(|l| l[c * per..(c + 1) * per].to_vec()),
                seq_lens_padded: batch
                    .seq_lens_padded
                    .as_ref()
                    .map(|l| l[c * per..(c + 1) * per].to_vec()),
            };
            bshd_to_thd(&part, opts).map_err(|e| at_row_offset(e, c * per, c * per * s))
        })
        .collect::<Result<Vec<_>>>()?;
    Ok(ThdChunks { chunks, sentinel: opts.sentinel })
}

/// Re-indexes an error of a chunk's conversion to the rows and tokens of the whole batch.
fn at_row_offset(e: Error, rows: usize, tokens: usize) -> Error {
    match e {
        Error::RowSlotsMismatch { row, slots, seq_len } => {
            Error::RowSlotsMismatch { row: row + rows, slots, seq_len }
        }
        Error::NegativeSeqLen { key, row, col, value, sentinel } => {
            Error::NegativeSeqLen { key, row: row + rows, col, value, sentinel }
        }
        Error::SentinelMismatch { row, col, real, padded } => {
            Error::SentinelMismatch { row: row + rows, col, real, padded }
        }
        Error::PadIdInContent { index, pad_token_id } => {
            Error::PadIdInContent { index: index + tokens, pad_token_id }
        }
        other => other,
    }
}

/// The `[B, S]` tensors and the `[B][K]` length tables have `B` rows.
fn check_batch_shapes(batch: &BshdBatch) -> Result<()> {
    let (b, tokens) = (batch.rows, batch.rows * batch.seq_len);
    let shape = format!("[{b}, {}]", batch.seq_len);
    check_shape("input_ids", batch.input_ids.len(), tokens, &shape)?;
    check_shape("labels", batch.labels.len(), tokens, &shape)?;
    if let Some(p) = &batch.position_ids {
        check_shape("position_ids", p.len(), tokens, &shape)?;
    }
    for (key, table) in [("seq_lens", &batch.seq_lens), ("seq_lens_padded", &batch.seq_lens_padded)]
    {
        if let Some(t) = table {
            check_shape(key, t.len(), b, &format!("[{b}, K]"))?;
        }
    }
    Ok(())
}

/// Padding mask from token values, for batches without pack metadata (Automodel
/// `thd_padding_mask_from_token_ids`): the pad id must form one trailing run.
///
/// # Errors
/// [`Error::PadIdInContent`] if a pad id is followed by a non-pad token: the pad id is also a
/// content token, and masking by value would hide real tokens.
///
/// # Example
/// ```
/// use thd::collate::padding_mask_from_token_ids;
/// assert_eq!(padding_mask_from_token_ids(&[5, 6, 0, 0], 0)?, vec![false, false, true, true]);
/// assert!(padding_mask_from_token_ids(&[5, 0, 6, 0], 0).is_err());
/// # Ok::<(), thd::Error>(())
/// ```
pub fn padding_mask_from_token_ids(input_ids: &[i64], pad_token_id: i64) -> Result<Vec<bool>> {
    let first = input_ids.iter().position(|&t| t == pad_token_id).unwrap_or(input_ids.len());
    if let Some(off) = input_ids[first..].iter().position(|&t| t != pad_token_id) {
        return Err(Error::PadIdInContent { index: first + off - 1, pad_token_id });
    }
    Ok((0..input_ids.len()).map(|t| t >= first).collect())
}

/// Per row, the `(real, slot)` lengths of its non-sentinel entries.
fn read_lengths(
    batch: &BshdBatch,
    seq_lens: &[Vec<i64>],
    padded: Option<&[Vec<i64>]>,
    sentinel: i64,
) -> Result<Vec<Vec<(u32, u32)>>> {
    let b = batch.rows;
    let mut segment = 0;
    let mut rows = Vec::with_capacity(b);
    for (row, lens) in seq_lens.iter().enumerate() {
        let prow = padded.map(|p| &p[row]);
        if let Some(p) = prow {
            check_shape("seq_lens_padded", p.len(), lens.len(), &format!("[{b}, {}]", lens.len()))?;
        }
        let mut out = Vec::new();
        for (col, &real) in lens.iter().enumerate() {
            let slot = prow.map_or(real, |p| p[col]);
            if (real == sentinel) != (slot == sentinel) {
                return Err(Error::SentinelMismatch { row, col, real, padded: slot });
            }
            if real == sentinel {
                continue;
            }
            for (key, value) in [("seq_lens", real), ("seq_lens_padded", slot)] {
                if value < 0 {
                    return Err(Error::NegativeSeqLen { key, row, col, value, sentinel });
                }
            }
            if slot < real {
                return Err(Error::PaddedShorterThanReal { segment, real, padded: slot });
            }
            let fit = |v: i64| {
                u32::try_from(v).map_err(|_| Error::TotalLengthOverflow { total: v as u64 })
            };
            out.push((fit(real)?, fit(slot)?));
            segment += 1;
        }
        rows.push(out);
    }
    Ok(rows)
}

/// The slots of each row must tile it (every row but the last exactly, the last at most).
fn check_rows(rows: &[Vec<(u32, u32)>], seq_len: usize, policy: RowTail) -> Result<()> {
    if policy == RowTail::Upstream {
        return Ok(());
    }
    let last = rows.len().saturating_sub(1);
    for (row, r) in rows.iter().enumerate() {
        let slots: i64 = r.iter().map(|&(_, s)| i64::from(s)).sum();
        let fits = if row == last { slots <= seq_len as i64 } else { slots == seq_len as i64 };
        if !fits {
            return Err(Error::RowSlotsMismatch { row, slots, seq_len });
        }
    }
    Ok(())
}

/// True on every token outside the first `real[i]` tokens of slot `i`.
fn layout_padding_mask(real: &SeqLens, cu_slots: &CuSeqlens, tokens: usize) -> Vec<bool> {
    let mut mask = vec![true; tokens];
    for (slot, &s) in cu_slots.segments().zip(real.as_slice()) {
        for t in slot.start..slot.start + s as usize {
            mask[t] = false;
        }
    }
    mask
}

fn check_shape(key: &'static str, len: usize, expected: usize, shape: &str) -> Result<()> {
    if len == expected {
        Ok(())
    } else {
        Err(Error::ShapeMismatch { key, len, expected, shape: shape.to_owned() })
    }
}

pub(crate) fn widen(cu: &CuSeqlens) -> Vec<i64> {
    cu.as_slice().iter().map(|&c| i64::from(c)).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layout_mask_marks_slot_tails_and_the_row_tail() {
        let real = SeqLens::new(vec![3, 0, 2]);
        let slots = SeqLens::new(vec![4, 0, 2]).to_cu_seqlens().unwrap();
        let m = layout_padding_mask(&real, &slots, 8);
        assert_eq!(m, vec![false, false, false, true, false, false, true, true]);
    }

    #[test]
    fn check_rows_reports_the_short_row() {
        let rows = vec![vec![(3, 4)], vec![(2, 2)]];
        assert_eq!(
            check_rows(&rows, 6, RowTail::Reject),
            Err(Error::RowSlotsMismatch { row: 0, slots: 4, seq_len: 6 })
        );
        assert_eq!(check_rows(&rows, 6, RowTail::Upstream), Ok(()));
        assert_eq!(check_rows(&[vec![(2, 4)], vec![(1, 1)]], 4, RowTail::Reject), Ok(()));
    }

    #[test]
    fn pad_run_error_points_at_the_pad_before_content() {
        assert_eq!(
            padding_mask_from_token_ids(&[5, 0, 0, 6, 0], 0),
            Err(Error::PadIdInContent { index: 2, pad_token_id: 0 })
        );
        assert_eq!(padding_mask_from_token_ids(&[], 0), Ok(vec![]));
    }
}
