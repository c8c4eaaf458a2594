use std::ops::Range;

use crate::{CuSeqlens, Error, PackedBatch, Result};

/// The zigzag (dual-chunk) sharding of a packed batch over `cp` context-parallel ranks.
///
/// Every segment's storage slot (its padded length `pᵢ`) is cut into `2·cp` equal chunks of
/// `hᵢ = pᵢ / (2·cp)` tokens; rank `r` holds chunks `r` and `2·cp − 1 − r` of every segment,
/// segment by segment, so each rank gets the same share of early (cheap) and late (expensive)
/// causal queries. A rank's local offsets are the storage offsets divided by `cp`.
///
/// ```text
/// local token j of rank r, in segment i:  k = j − cu_p[i]/cp
///   k <  hᵢ:  global = cu_p[i] + r·hᵢ + k
///   k >= hᵢ:  global = cu_p[i] + (2·cp − 1 − r)·hᵢ + (k − hᵢ)
/// ```
///
/// `cp = 1` is the identity and needs no divisibility.
///
/// # Example
/// ```
/// use thd::CuSeqlens;
/// use thd::cp::CpLayout;
/// let cu = CuSeqlens::try_from(vec![0, 8, 16])?;
/// let layout = CpLayout::new(&cu, None, 2)?;
/// assert_eq!(layout.indices(0)?, vec![0, 1, 6, 7, 8, 9, 14, 15]);
/// assert_eq!(layout.indices(1)?, vec![2, 3, 4, 5, 10, 11, 12, 13]);
/// assert_eq!(layout.local_cu_seqlens().as_slice(), &[0, 4, 8]);
///
/// // Lengths not divisible by 2·cp are rejected, never truncated.
/// let odd = CuSeqlens::try_from(vec![0, 6, 16])?;
/// let err = CpLayout::new(&odd, None, 2).unwrap_err();
/// assert!(err.to_string().starts_with("segment 0 has (padded) length 6, not divisible by 2*cp = 4"));
/// # Ok::<(), thd::Error>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CpLayout {
    cp: usize,
    real: CuSeqlens,
    storage: CuSeqlens,
    num_real_segments: usize,
}

impl CpLayout {
    /// A layout from real offsets and, when segments are padded, their storage offsets.
    ///
    /// # Errors
    /// [`Error::ZeroCpSize`]; [`Error::SegmentCountMismatch`] or
    /// [`Error::PaddedShorterThanReal`] for inconsistent offsets;
    /// [`Error::CpLengthNotDivisible`] naming the first storage length that is not a multiple
    /// of `2·cp` (for `cp > 1`).
    ///
    /// # Example
    /// ```
    /// # use thd::{CuSeqlens, cp::CpLayout};
    /// let real = CuSeqlens::try_from(vec![0, 5, 8])?;
    /// let padded = CuSeqlens::try_from(vec![0, 8, 12])?;
    /// assert!(CpLayout::new(&real, Some(&padded), 2).is_ok());
    /// assert!(CpLayout::new(&real, None, 2).is_err()); // 5 is not a multiple of 4
    /// # Ok::<(), thd::Error>(())
    /// ```
    pub fn new(real: &CuSeqlens, padded: Option<&CuSeqlens>, cp: usize) -> Result<Self> {
        if cp == 0 {
            return Err(Error::ZeroCpSize);
        }
        let storage = padded.unwrap_or(real);
        if storage.num_segments() != real.num_segments() {
            return Err(Error::SegmentCountMismatch {
                real: real.num_segments(),
                padded: storage.num_segments(),
            });
        }
        for (segment, (r, s)) in real.segments().zip(storage.segments()).enumerate() {
            if s.len() < r.len() {
                return Err(Error::PaddedShorterThanReal {
                    segment,
                    real: r.len() as i64,
                    padded: s.len() as i64,
                });
            }
            if cp > 1 && !s.len().is_multiple_of(2 * cp) {
                return Err(Error::CpLengthNotDivisible {
                    segment,
                    length: s.len(),
                    divisor: 2 * cp,
                });
            }
        }
        Ok(Self {
            cp,
            real: real.clone(),
            storage: storage.clone(),
            num_real_segments: real.num_segments(),
        })
    }

    /// The layout of a [`PackedBatch`]: its offsets, and `num_real_seqs` so that statistics
    /// skip mock segments.
    ///
    /// # Errors
    /// [`Error::UncoveredTokens`] if tokens lie past the last storage offset (TE's CUDA
    /// partitioner would then hand overlapping indices to the ranks); the errors of
    /// [`CpLayout::new`].
    ///
    /// # Example
    /// ```
    /// use thd::cp::CpLayout;
    /// use thd::{PackedBatch, PackedBatchParts};
    /// let batch = PackedBatch::new(PackedBatchParts {
    ///     input_ids: vec![1, 2, 3, 0, 5, 6, 0, 0],
    ///     labels: vec![-100, 2, 3, -100, -100, 6, -100, -100],
    ///     cu_seqlens: vec![0, 3, 5],
    ///     cu_seqlens_padded: Some(vec![0, 4, 8]),
    ///     ..Default::default()
    /// })?;
    /// let layout = CpLayout::from_batch(&batch, 2)?;
    /// assert_eq!(layout.split(batch.input_ids(), 0)?, vec![1, 0, 5, 0]);
    /// assert_eq!(layout.split(batch.input_ids(), 1)?, vec![2, 3, 6, 0]);
    /// # Ok::<(), thd::Error>(())
    /// ```
    pub fn from_batch(batch: &PackedBatch, cp: usize) -> Result<Self> {
        let covered = batch.storage_cu_seqlens().total();
        if covered != batch.num_tokens() {
            return Err(Error::UncoveredTokens {
                op: "cp split",
                covered,
                tokens: batch.num_tokens(),
            });
        }
        let mut layout = Self::new(batch.cu_seqlens(), batch.cu_seqlens_padded(), cp)?;
        layout.num_real_segments = batch.num_real_segments();
        Ok(layout)
    }

    /// Marks the trailing segments from `n` on as mock (padding dressed as sequences), so
    /// statistics skip them.
    ///
    /// # Errors
    /// [`Error::NumRealSeqsTooLarge`] if `n` exceeds the segment count.
    ///
    /// # Example
    /// ```
    /// # use thd::{CuSeqlens, cp::CpLayout};
    /// let cu = CuSeqlens::try_from(vec![0, 4, 8])?;
    /// let layout = CpLayout::new(&cu, None, 2)?.with_num_real_segments(1)?;
    /// assert_eq!(layout.num_real_segments(), 1);
    /// # Ok::<(), thd::Error>(())
    /// ```
    pub fn with_num_real_segments(mut self, n: usize) -> Result<Self> {
        if n > self.num_segments() {
            return Err(Error::NumRealSeqsTooLarge {
                num_real_seqs: n,
                segments: self.num_segments(),
            });
        }
        self.num_real_segments = n;
        Ok(self)
    }

    /// The CP size.
    ///
    /// # Example
    /// ```
    /// # use thd::{CuSeqlens, cp::CpLayout};
    /// let layout = CpLayout::new(&CuSeqlens::try_from(vec![0, 8, 12])?, None, 2)?;
    /// assert_eq!(layout.cp(), 2);
    /// # Ok::<(), thd::Error>(())
    /// ```
    pub fn cp(&self) -> usize {
        self.cp
    }

    /// Real offsets (what attention and loss see).
    ///
    /// # Example
    /// ```
    /// # use thd::{CuSeqlens, cp::CpLayout};
    /// let layout = CpLayout::new(&CuSeqlens::try_from(vec![0, 8, 12])?, None, 2)?;
    /// assert_eq!(layout.real().as_slice(), &[0, 8, 12]);
    /// # Ok::<(), thd::Error>(())
    /// ```
    pub fn real(&self) -> &CuSeqlens {
        &self.real
    }

    /// Storage offsets (padded, each slot a multiple of `2·cp`).
    ///
    /// # Example
    /// ```
    /// # use thd::{CuSeqlens, cp::CpLayout};
    /// let layout = CpLayout::new(&CuSeqlens::try_from(vec![0, 8, 12])?, None, 2)?;
    /// assert_eq!(layout.storage().as_slice(), &[0, 8, 12]);
    /// # Ok::<(), thd::Error>(())
    /// ```
    pub fn storage(&self) -> &CuSeqlens {
        &self.storage
    }

    /// Number of segments, mock ones included.
    ///
    /// # Example
    /// ```
    /// # use thd::{CuSeqlens, cp::CpLayout};
    /// let layout = CpLayout::new(&CuSeqlens::try_from(vec![0, 8, 12])?, None, 2)?;
    /// assert_eq!(layout.num_segments(), 2);
    /// # Ok::<(), thd::Error>(())
    /// ```
    pub fn num_segments(&self) -> usize {
        self.real.num_segments()
    }

    /// Number of leading real (non-mock) segments.
    ///
    /// # Example
    /// ```
    /// # use thd::{CuSeqlens, cp::CpLayout};
    /// let layout = CpLayout::new(&CuSeqlens::try_from(vec![0, 8, 12])?, None, 2)?;
    /// assert_eq!(layout.num_real_segments(), 2);
    /// # Ok::<(), thd::Error>(())
    /// ```
    pub fn num_real_segments(&self) -> usize {
        self.num_real_segments
    }

    /// Global token count `T` (storage).
    ///
    /// # Example
    /// ```
    /// # use thd::{CuSeqlens, cp::CpLayout};
    /// let layout = CpLayout::new(&CuSeqlens::try_from(vec![0, 8, 12])?, None, 2)?;
    /// assert_eq!(layout.num_tokens(), 12);
    /// # Ok::<(), thd::Error>(())
    /// ```
    pub fn num_tokens(&self) -> usize {
        self.storage.total()
    }

    /// Tokens each rank holds, `T / cp`.
    ///
    /// # Example
    /// ```
    /// # use thd::{CuSeqlens, cp::CpLayout};
    /// let layout = CpLayout::new(&CuSeqlens::try_from(vec![0, 8, 12])?, None, 2)?;
    /// assert_eq!(layout.local_tokens(), 6);
    /// # Ok::<(), thd::Error>(())
    /// ```
    pub fn local_tokens(&self) -> usize {
        self.storage.total() / self.cp
    }

    /// A rank's local offsets: the storage offsets divided by `cp`.
    ///
    /// # Example
    /// ```
    /// # use thd::{CuSeqlens, cp::CpLayout};
    /// let layout = CpLayout::new(&CuSeqlens::try_from(vec![0, 8, 12])?, None, 2)?;
    /// assert_eq!(layout.local_cu_seqlens().as_slice(), &[0, 4, 6]);
    /// # Ok::<(), thd::Error>(())
    /// ```
    pub fn local_cu_seqlens(&self) -> CuSeqlens {
        let cp = self.cp as i32;
        CuSeqlens::from_valid(self.storage.as_slice().iter().map(|&c| c / cp).collect())
    }

    /// The two global chunks of segment `i` that `rank` holds, in local order.
    ///
    /// # Panics
    /// If `i >= self.num_segments()` or `rank >= self.cp()`.
    ///
    /// # Example
    /// ```
    /// # use thd::{CuSeqlens, cp::CpLayout};
    /// let layout = CpLayout::new(&CuSeqlens::try_from(vec![0, 8, 12])?, None, 2)?;
    /// assert_eq!(layout.chunks(0, 1), [2..4, 4..6]);
    /// assert_eq!(layout.chunks(1, 0), [8..9, 11..12]);
    /// # Ok::<(), thd::Error>(())
    /// ```
    pub fn chunks(&self, i: usize, rank: usize) -> [Range<usize>; 2] {
        let slot = self.storage.segment(i);
        let h = slot.len() / (2 * self.cp);
        let chunk = |c: usize| slot.start + c * h..slot.start + (c + 1) * h;
        if self.cp == 1 {
            // The whole slot in one piece, whatever its parity.
            return [slot.clone(), slot.end..slot.end];
        }
        [chunk(rank), chunk(2 * self.cp - 1 - rank)]
    }

    /// Global (storage) index of every token `rank` holds, in local order (TE
    /// `thd_get_partitioned_indices`).
    ///
    /// # Errors
    /// [`Error::CpRankOutOfRange`].
    ///
    /// # Example
    /// ```
    /// # use thd::{CuSeqlens, cp::CpLayout};
    /// let layout = CpLayout::new(&CuSeqlens::try_from(vec![0, 8, 12])?, None, 2)?;
    /// assert_eq!(layout.indices(0)?, vec![0, 1, 6, 7, 8, 11]);
    /// # Ok::<(), thd::Error>(())
    /// ```
    pub fn indices(&self, rank: usize) -> Result<Vec<usize>> {
        self.check_rank(rank)?;
        let mut idx = Vec::with_capacity(self.local_tokens());
        for i in 0..self.num_segments() {
            for c in self.chunks(i, rank) {
                idx.extend(c);
            }
        }
        Ok(idx)
    }

    /// The values `rank` holds of a per-token tensor `[T]` (TE `get_batch_on_this_cp_rank`).
    ///
    /// # Errors
    /// [`Error::CpRankOutOfRange`]; [`Error::ShapeMismatch`] unless `values.len() == T`.
    ///
    /// # Example
    /// ```
    /// # use thd::{CuSeqlens, cp::CpLayout};
    /// let layout = CpLayout::new(&CuSeqlens::try_from(vec![0, 8, 12])?, None, 2)?;
    /// let ids: Vec<i64> = (100..112).collect();
    /// assert_eq!(layout.split(&ids, 1)?, vec![102, 103, 104, 105, 109, 110]);
    /// # Ok::<(), thd::Error>(())
    /// ```
    pub fn split<T: Copy>(&self, values: &[T], rank: usize) -> Result<Vec<T>> {
        self.split_rows(values, 1, rank)
    }

    /// The rows `rank` holds of a tensor `[T, width]` (row-major), e.g. `q: [T, H·D]`.
    ///
    /// # Errors
    /// [`Error::CpRankOutOfRange`]; [`Error::ShapeMismatch`] unless
    /// `values.len() == T · width`.
    ///
    /// # Example
    /// ```
    /// # use thd::{CuSeqlens, cp::CpLayout};
    /// let cu = CuSeqlens::try_from(vec![0, 4])?;
    /// let layout = CpLayout::new(&cu, None, 2)?;
    /// let rows = [1, 10, 2, 20, 3, 30, 4, 40]; // [4, 2]
    /// assert_eq!(layout.split_rows(&rows, 2, 0)?, vec![1, 10, 4, 40]);
    /// # Ok::<(), thd::Error>(())
    /// ```
    pub fn split_rows<T: Copy>(&self, values: &[T], width: usize, rank: usize) -> Result<Vec<T>> {
        self.check_len("values", values.len(), width)?;
        let idx = self.indices(rank)?;
        let mut out = Vec::with_capacity(idx.len() * width);
        for t in idx {
            out.extend_from_slice(&values[t * width..(t + 1) * width]);
        }
        Ok(out)
    }

    /// Every rank's shard of a per-token tensor `[T, width]`.
    ///
    /// # Errors
    /// As [`CpLayout::split_rows`].
    ///
    /// # Example
    /// ```
    /// # use thd::{CuSeqlens, cp::CpLayout};
    /// let layout = CpLayout::new(&CuSeqlens::try_from(vec![0, 8])?, None, 2)?;
    /// let shards = layout.split_all(&[1, 2, 3, 4, 5, 6, 7, 8], 1)?;
    /// assert_eq!(shards, vec![vec![1, 2, 7, 8], vec![3, 4, 5, 6]]);
    /// assert_eq!(layout.reassemble(&shards, 1)?, vec![1, 2, 3, 4, 5, 6, 7, 8]);
    /// # Ok::<(), thd::Error>(())
    /// ```
    pub fn split_all<T: Copy>(&self, values: &[T], width: usize) -> Result<Vec<Vec<T>>> {
        (0..self.cp).map(|r| self.split_rows(values, width, r)).collect()
    }

    /// The inverse of [`CpLayout::split_all`]: puts every rank's rows back at their global
    /// positions (AReaL `reassemble_cp_packed_logprobs`).
    ///
    /// # Errors
    /// [`Error::CpShardCount`] unless there is one shard per rank; [`Error::CpShardLength`]
    /// unless each has `T / cp · width` elements.
    ///
    /// # Example
    /// ```
    /// # use thd::{CuSeqlens, cp::CpLayout};
    /// let layout = CpLayout::new(&CuSeqlens::try_from(vec![0, 8, 12])?, None, 2)?;
    /// let ids: Vec<i64> = (100..112).collect();
    /// assert_eq!(layout.reassemble(&layout.split_all(&ids, 1)?, 1)?, ids);
    /// # Ok::<(), thd::Error>(())
    /// ```
    pub fn reassemble<T: Copy + Default>(&self, shards: &[Vec<T>], width: usize) -> Result<Vec<T>> {
        if shards.len() != self.cp {
            return Err(Error::CpShardCount { got: shards.len(), cp: self.cp });
        }
        let expected = self.local_tokens() * width;
        let mut out = vec![T::default(); self.num_tokens() * width];
        for (rank, shard) in shards.iter().enumerate() {
            if shard.len() != expected {
                return Err(Error::CpShardLength { rank, len: shard.len(), expected });
            }
            for (j, t) in self.indices(rank)?.into_iter().enumerate() {
                out[t * width..(t + 1) * width].copy_from_slice(&shard[j * width..(j + 1) * width]);
            }
        }
        Ok(out)
    }

    /// `indices[dst] = src` into the concatenation of all ranks' shards (AReaL
    /// `_build_cp_reassemble_indices`): `out[dst] = cat(shards)[indices[dst]]`.
    ///
    /// # Example
    /// ```
    /// # use thd::{CuSeqlens, cp::CpLayout};
    /// let layout = CpLayout::new(&CuSeqlens::try_from(vec![0, 8, 12])?, None, 2)?;
    /// assert_eq!(layout.reassemble_indices(), vec![0, 1, 6, 7, 8, 9, 2, 3, 4, 10, 11, 5]);
    /// # Ok::<(), thd::Error>(())
    /// ```
    pub fn reassemble_indices(&self) -> Vec<usize> {
        let local = self.local_tokens();
        let mut out = vec![0; self.num_tokens()];
        for rank in 0..self.cp {
            let idx = self.indices(rank).expect("rank < cp");
            for (j, t) in idx.into_iter().enumerate() {
                out[t] = rank * local + j;
            }
        }
        out
    }

    /// Real tokens of each segment in each of `rank`'s two chunks, assuming the padding sits at
    /// the end of each slot (TE `get_cu_seqlens_on_cp_rank`).
    ///
    /// ```text
    /// first  = clamp(sᵢ − c₁·hᵢ, 0, hᵢ)    c₁ = r
    /// second = clamp(sᵢ − c₂·hᵢ, 0, hᵢ)    c₂ = 2·cp − 1 − r
    /// ```
    ///
    /// # Errors
    /// [`Error::CpRankOutOfRange`].
    ///
    /// # Example
    /// ```
    /// # use thd::{CuSeqlens, cp::CpLayout};
    /// let real = CuSeqlens::try_from(vec![0, 5])?;
    /// let padded = CuSeqlens::try_from(vec![0, 8])?;
    /// let layout = CpLayout::new(&real, Some(&padded), 2)?;
    /// assert_eq!(layout.real_lens_on_rank(0)?, vec![[2, 0]]); // chunks 0 and 3
    /// assert_eq!(layout.real_lens_on_rank(1)?, vec![[2, 1]]); // chunks 1 and 2
    /// # Ok::<(), thd::Error>(())
    /// ```
    pub fn real_lens_on_rank(&self, rank: usize) -> Result<Vec<[usize; 2]>> {
        self.check_rank(rank)?;
        Ok((0..self.num_segments())
            .map(|i| {
                let (start, s) = (self.storage.segment(i).start, self.real.segment(i).len());
                self.chunks(i, rank).map(|c| (start + s).clamp(c.start, c.end) - c.start)
            })
            .collect())
    }

    /// The widest storage slot rounded up to a multiple of `multiple` (bionemo's
    /// `DataCollatorForContextParallel` reports `max_length_q = ⌈max pᵢ / 64⌉ · 64`).
    ///
    /// # Errors
    /// [`Error::ZeroFactor`] if `multiple == 0`.
    ///
    /// # Example
    /// ```
    /// # use thd::{CuSeqlens, cp::CpLayout};
    /// let layout = CpLayout::new(&CuSeqlens::try_from(vec![0, 8, 72])?, None, 2)?;
    /// assert_eq!(layout.max_seqlen_rounded(64)?, 64);
    /// # Ok::<(), thd::Error>(())
    /// ```
    pub fn max_seqlen_rounded(&self, multiple: usize) -> Result<usize> {
        if multiple == 0 {
            return Err(Error::ZeroFactor { name: "multiple" });
        }
        Ok(self.storage.max_seqlen().div_ceil(multiple) * multiple)
    }

    fn check_rank(&self, rank: usize) -> Result<()> {
        if rank >= self.cp {
            return Err(Error::CpRankOutOfRange { rank, cp: self.cp });
        }
        Ok(())
    }

    fn check_len(&self, key: &'static str, len: usize, width: usize) -> Result<()> {
        let expected = self.num_tokens() * width;
        if len != expected {
            return Err(Error::ShapeMismatch {
                key,
                len,
                expected,
                shape: format!("[{}, {width}]", self.num_tokens()),
            });
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn layout(cu: Vec<i32>, cp: usize) -> CpLayout {
        CpLayout::new(&CuSeqlens::try_from(cu).unwrap(), None, cp).unwrap()
    }

    #[test]
    fn ranks_partition_the_tokens() {
        for cp in [1, 2, 3, 4, 8] {
            let d = 2 * cp as i32;
            let l = layout(vec![0, d, d, 4 * d, 7 * d], cp);
            let mut all: Vec<usize> = (0..cp).flat_map(|r| l.indices(r).unwrap()).collect();
            assert!((0..cp).all(|r| l.indices(r).unwrap().len() == l.local_tokens()));
            all.sort_unstable();
            assert_eq!(all, (0..l.num_tokens()).collect::<Vec<_>>(), "cp={cp}");
        }
    }

    #[test]
    fn cp_one_is_the_identity_even_for_odd_lengths() {
        let l = layout(vec![0, 3, 8], 1);
        assert_eq!(l.indices(0).unwrap(), (0..8).collect::<Vec<_>>());
        assert_eq!(l.local_cu_seqlens().as_slice(), &[0, 3, 8]);
    }

    #[test]
    fn cp_four_sixteen_tokens() {
        let l = layout(vec![0, 16], 4);
        assert_eq!(l.indices(0).unwrap(), vec![0, 1, 14, 15]);
        assert_eq!(l.indices(3).unwrap(), vec![6, 7, 8, 9]);
        assert_eq!(l.indices(4), Err(Error::CpRankOutOfRange { rank: 4, cp: 4 }));
    }

    #[test]
    fn reassembly_rejects_bad_shards() {
        let l = layout(vec![0, 4], 2);
        assert_eq!(l.reassemble(&[vec![1, 2]], 1), Err(Error::CpShardCount { got: 1, cp: 2 }));
        assert_eq!(
            l.reassemble(&[vec![1, 2], vec![3]], 1),
            Err(Error::CpShardLength { rank: 1, len: 1, expected: 2 })
        );
    }
}
