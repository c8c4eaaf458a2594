use std::ops::Range;

use crate::{Error, Result, SeqLens};

/// Exclusive prefix sums of [`SeqLens`]: `B + 1` entries, `cu[0] == 0`, non-decreasing, int32.
///
/// Segment `i` covers tokens `cu[i]..cu[i+1]`.
///
/// # Example
/// ```
/// # use thd::CuSeqlens;
/// let cu = CuSeqlens::try_from(vec![0, 3, 3, 7])?;
/// assert_eq!(cu.num_segments(), 3);
/// assert_eq!(cu.segment(2), 3..7);
/// assert_eq!(cu.seq_lens().as_slice(), &[3, 0, 4]);
///
/// let err = CuSeqlens::try_from(vec![0, 20, 17]).unwrap_err();
/// assert_eq!(err.to_string(), "cu_seqlens must be non-decreasing: cu_seqlens[2]=17 < cu_seqlens[1]=20");
/// # Ok::<(), thd::Error>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct CuSeqlens(Vec<i32>);

impl CuSeqlens {
    /// Validates offsets given as int64 (the dtype most Python collators emit) under `name`
    /// (`cu_seqlens`, `cu_seqlens_padded`, `cu_seq_lens_q`, ...), which the error quotes.
    ///
    /// # Errors
    /// [`Error::CuSeqlensEmpty`], [`Error::CuSeqlensStart`], [`Error::CuSeqlensDecreasing`] or
    /// [`Error::CuSeqlensOverflow`], naming the index and value at fault.
    pub fn from_i64(name: &'static str, values: &[i64]) -> Result<Self> {
        let Some(&first) = values.first() else {
            return Err(Error::CuSeqlensEmpty { name });
        };
        if first != 0 {
            return Err(Error::CuSeqlensStart { name, first });
        }
        for (index, w) in values.windows(2).enumerate() {
            if w[1] < w[0] {
                return Err(Error::CuSeqlensDecreasing {
                    name,
                    index: index + 1,
                    value: w[1],
                    prev: w[0],
                });
            }
        }
        // Non-decreasing from 0, so only the upper bound can fail; report the first entry past it.
        if let Some(index) = values.iter().position(|&v| v > i64::from(i32::MAX)) {
            return Err(Error::CuSeqlensOverflow { name, index, value: values[index] });
        }
        Ok(Self(values.iter().map(|&v| v as i32).collect()))
    }

    /// Offsets already known to be valid (built by this crate).
    pub(crate) fn from_valid(values: Vec<i32>) -> Self {
        debug_assert!(values.first() == Some(&0) && values.windows(2).all(|w| w[0] <= w[1]));
        Self(values)
    }

    /// The offsets.
    pub fn as_slice(&self) -> &[i32] {
        &self.0
    }

    /// Number of segments `B` (one less than the number of offsets).
    pub fn num_segments(&self) -> usize {
        self.0.len() - 1
    }

    /// The last offset: the number of tokens the segments cover.
    pub fn total(&self) -> usize {
        *self.0.last().expect("validated: at least one entry") as usize
    }

    /// Token range of segment `i`.
    ///
    /// # Panics
    /// If `i >= self.num_segments()`.
    pub fn segment(&self, i: usize) -> Range<usize> {
        self.0[i] as usize..self.0[i + 1] as usize
    }

    /// Token ranges of all segments, in order.
    pub fn segments(&self) -> impl ExactSizeIterator<Item = Range<usize>> + '_ {
        self.0.windows(2).map(|w| w[0] as usize..w[1] as usize)
    }

    /// Per-segment lengths.
    pub fn seq_lens(&self) -> SeqLens {
        SeqLens::new(self.0.windows(2).map(|w| (w[1] - w[0]) as u32).collect())
    }

    /// Length of the longest segment (`max_seqlen`), 0 when there are none.
    pub fn max_seqlen(&self) -> usize {
        self.segments().map(|r| r.len()).max().unwrap_or(0)
    }
}

impl TryFrom<Vec<i32>> for CuSeqlens {
    type Error = Error;

    fn try_from(values: Vec<i32>) -> Result<Self> {
        let wide: Vec<i64> = values.iter().map(|&v| i64::from(v)).collect();
        Self::from_i64("cu_seqlens", &wide)
    }
}

impl TryFrom<&[i64]> for CuSeqlens {
    type Error = Error;

    fn try_from(values: &[i64]) -> Result<Self> {
        Self::from_i64("cu_seqlens", values)
    }
}
