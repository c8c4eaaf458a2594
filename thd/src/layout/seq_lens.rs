use crate::{CuSeqlens, Error, Result};

/// Per-segment token counts, one entry per packed segment (length `B`).
///
/// Zero-length segments are representable: they occupy no tokens but still own a slot in
/// [`CuSeqlens`].
///
/// # Example
/// ```
/// # use thd::SeqLens;
/// let lens = SeqLens::new(vec![4, 0, 2]);
/// assert_eq!(lens.total(), 6);
/// assert_eq!(lens.to_cu_seqlens()?.as_slice(), &[0, 4, 4, 6]);
/// # Ok::<(), thd::Error>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default)]
pub struct SeqLens(Vec<u32>);

impl SeqLens {
    /// Wraps per-segment lengths.
    pub fn new(lens: Vec<u32>) -> Self {
        Self(lens)
    }

    /// The lengths.
    pub fn as_slice(&self) -> &[u32] {
        &self.0
    }

    /// Number of segments `B`.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// True when there are no segments.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Σ sᵢ, the number of tokens the segments cover.
    pub fn total(&self) -> u64 {
        self.0.iter().map(|&s| u64::from(s)).sum()
    }

    /// Σ sᵢ², the square-attention work of the segments.
    pub fn sum_squares(&self) -> u128 {
        self.0.iter().map(|&s| u128::from(s) * u128::from(s)).sum()
    }

    /// The exclusive prefix sums.
    ///
    /// # Errors
    /// [`Error::TotalLengthOverflow`] if Σ sᵢ does not fit in int32.
    pub fn to_cu_seqlens(&self) -> Result<CuSeqlens> {
        let total = self.total();
        if total > i32::MAX as u64 {
            return Err(Error::TotalLengthOverflow { total });
        }
        let mut cu = Vec::with_capacity(self.0.len() + 1);
        let mut acc = 0i32;
        cu.push(acc);
        for &s in &self.0 {
            acc += s as i32; // cannot overflow: the total fits
            cu.push(acc);
        }
        Ok(CuSeqlens::from_valid(cu))
    }
}

impl From<Vec<u32>> for SeqLens {
    fn from(v: Vec<u32>) -> Self {
        Self(v)
    }
}
