//! [`IntSlice`]: a per-token integer column (or an offsets vector) as the rules read it, `i64`
//! or `i32` as stored.
//!
//! A dumped batch holds its token ids, labels, positions and offsets as int32 or int64. The
//! command memory-maps the file and hands the rules the stored slice itself, so an int32 column
//! of 10⁸ tokens stays 400 MB instead of being widened to 800 MB; every value a rule reads is
//! widened on the fly.

use std::ops::Range;

/// A read-only column of integers, `i64` or `i32` as stored; every value reads as `i64`.
///
/// # Example
/// ```
/// use rules::checks::IntSlice;
/// let stored: &[i32] = &[0, 1, 2, 0, 1];
/// let pos = IntSlice::from(stored);
/// assert_eq!((pos.len(), pos.at(3), pos.get(9)), (5, 0, None));
/// assert_eq!(pos.slice(1..3).iter().collect::<Vec<i64>>(), vec![1, 2]);
/// assert_eq!(IntSlice::I64(&[0, 1, 2, 0, 1]), pos); // the same values, whatever the width
/// ```
#[derive(Debug, Clone, Copy)]
pub enum IntSlice<'a> {
    /// Stored as `i64`.
    I64(&'a [i64]),
    /// Stored as `i32`, read in place.
    I32(&'a [i32]),
}

impl Default for IntSlice<'_> {
    fn default() -> Self {
        IntSlice::I64(&[])
    }
}

impl<'a> IntSlice<'a> {
    /// Number of values.
    pub fn len(self) -> usize {
        match self {
            IntSlice::I64(v) => v.len(),
            IntSlice::I32(v) => v.len(),
        }
    }

    /// Whether there are none.
    pub fn is_empty(self) -> bool {
        self.len() == 0
    }

    /// Value `i`, if there is one.
    #[inline]
    pub fn get(self, i: usize) -> Option<i64> {
        match self {
            IntSlice::I64(v) => v.get(i).copied(),
            IntSlice::I32(v) => v.get(i).map(|&x| i64::from(x)),
        }
    }

    /// Value `i`.
    ///
    /// # Panics
    /// If `i` is out of bounds, as slice indexing does.
    #[inline]
    pub fn at(self, i: usize) -> i64 {
        match self {
            IntSlice::I64(v) => v[i],
            IntSlice::I32(v) => i64::from(v[i]),
        }
    }

    /// The first value, if any.
    pub fn first(self) -> Option<i64> {
        self.get(0)
    }

    /// The last value, if any.
    pub fn last(self) -> Option<i64> {
        self.len().checked_sub(1).map(|i| self.at(i))
    }

    /// The index of the first value for which `pred` is false, the values being partitioned
    /// by it (every `true` before every `false`), as [`slice::partition_point`].
    pub fn partition_point(self, mut pred: impl FnMut(i64) -> bool) -> usize {
        match self {
            IntSlice::I64(v) => v.partition_point(|&x| pred(x)),
            IntSlice::I32(v) => v.partition_point(|&x| pred(i64::from(x))),
        }
    }

    /// The values in `r`, if `r` is within bounds.
    pub fn get_slice(self, r: Range<usize>) -> Option<IntSlice<'a>> {
        match self {
            IntSlice::I64(v) => v.get(r).map(IntSlice::I64),
            IntSlice::I32(v) => v.get(r).map(IntSlice::I32),
        }
    }

    /// The values in `r`.
    ///
    /// # Panics
    /// If `r` is out of bounds, as slice indexing does.
    pub fn slice(self, r: Range<usize>) -> IntSlice<'a> {
        match self {
            IntSlice::I64(v) => IntSlice::I64(&v[r]),
            IntSlice::I32(v) => IntSlice::I32(&v[r]),
        }
    }

    /// Every value, widened.
    pub fn iter(self) -> IntsIter<'a> {
        match self {
            IntSlice::I64(v) => IntsIter::I64(v.iter()),
            IntSlice::I32(v) => IntsIter::I32(v.iter()),
        }
    }

    /// The values as an owned `i64` vector.
    pub fn to_vec(self) -> Vec<i64> {
        self.iter().collect()
    }
}

impl PartialEq for IntSlice<'_> {
    fn eq(&self, other: &Self) -> bool {
        self.len() == other.len() && self.iter().eq(other.iter())
    }
}

impl Eq for IntSlice<'_> {}

impl<'a> From<&'a [i64]> for IntSlice<'a> {
    fn from(v: &'a [i64]) -> Self {
        IntSlice::I64(v)
    }
}

impl<'a> From<&'a [i32]> for IntSlice<'a> {
    fn from(v: &'a [i32]) -> Self {
        IntSlice::I32(v)
    }
}

impl<'a> From<&'a Vec<i64>> for IntSlice<'a> {
    fn from(v: &'a Vec<i64>) -> Self {
        IntSlice::I64(v)
    }
}

impl<'a, const N: usize> From<&'a [i64; N]> for IntSlice<'a> {
    fn from(v: &'a [i64; N]) -> Self {
        IntSlice::I64(v)
    }
}

/// The iterator of [`IntSlice::iter`].
#[derive(Debug, Clone)]
pub enum IntsIter<'a> {
    /// Over `i64` values.
    I64(std::slice::Iter<'a, i64>),
    /// Over `i32` values, widened.
    I32(std::slice::Iter<'a, i32>),
}

impl Iterator for IntsIter<'_> {
    type Item = i64;

    #[inline]
    fn next(&mut self) -> Option<i64> {
        match self {
            IntsIter::I64(it) => it.next().copied(),
            IntsIter::I32(it) => it.next().map(|&x| i64::from(x)),
        }
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        match self {
            IntsIter::I64(it) => it.size_hint(),
            IntsIter::I32(it) => it.size_hint(),
        }
    }
}

impl DoubleEndedIterator for IntsIter<'_> {
    fn next_back(&mut self) -> Option<i64> {
        match self {
            IntsIter::I64(it) => it.next_back().copied(),
            IntsIter::I32(it) => it.next_back().map(|&x| i64::from(x)),
        }
    }
}

impl ExactSizeIterator for IntsIter<'_> {}
