//! `assert_close` for packed tensors: a report that says what differs and *where*, in the
//! vocabulary of the batch (segment, offset in the segment, head, dim), not as a flat index.
//!
//! ```text
//! row = flat / (H·D), head = (flat / D) mod H, dim = flat mod D          (for [T, H, D])
//! segment = the b with off[b] ≤ row < off[b+1]  (off = running sum of the lengths)
//! offset  = row − off[b];  rows ≥ Σ len are padding
//! ```
//!
//! The report names the case, dtype, shape, "mismatched N / M (x%)", the tolerance, and the
//! greatest absolute and relative differences with their locations (PyTorch `assert_close`).

use std::fmt;

use candle_core::{DType, Result, Tensor};

use crate::error::Error;
use crate::tolerance::{Tolerance, flat_f64};

/// Where a row (token) of a packed tensor sits.
///
/// # Example
/// ```
/// use oracle::compare::{TokenLocation, locate_token};
/// // Segments of lengths 2, 0, 3: token 3 is offset 1 of segment 2 (segment 1 is empty).
/// assert_eq!(locate_token(&[2, 0, 3], 3), TokenLocation::Segment { segment: 2, offset: 1, len: 3 });
/// assert_eq!(locate_token(&[2, 0, 3], 5), TokenLocation::Padding { real_tokens: 5 });
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TokenLocation {
    /// Inside a segment.
    Segment {
        /// Segment index.
        segment: usize,
        /// Position inside the segment (0-based).
        offset: usize,
        /// The segment's length.
        len: usize,
    },
    /// Past the last segment (padding rows).
    Padding {
        /// Σ lengths: where the padding starts.
        real_tokens: usize,
    },
}

/// Maps a token (row) index to its segment and offset, from per-segment lengths.
pub fn locate_token(seqlens: &[u32], token: usize) -> TokenLocation {
    let mut start = 0usize;
    for (segment, &len) in seqlens.iter().enumerate() {
        let len = len as usize;
        if token < start + len {
            return TokenLocation::Segment { segment, offset: token - start, len };
        }
        start += len;
    }
    TokenLocation::Padding { real_tokens: start }
}

/// A flat (row-major) element index of a packed tensor, resolved to its coordinates.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ElementLocation {
    /// Coordinates in the tensor's shape; `index[0]` is the token.
    pub index: Vec<usize>,
    /// The token's segment and offset (for a rank-0 tensor, token 0).
    pub token: TokenLocation,
}

/// Resolves flat index `flat` of a tensor of `shape` whose first dimension is tokens packed by
/// `seqlens`.
///
/// # Example
/// ```
/// use oracle::compare::locate;
/// // [T=5, H=2, D=3], segments [2, 3]: flat 23 is token 3, head 1, dim 2.
/// let at = locate(&[2, 3], &[5, 2, 3], 23);
/// assert_eq!(at.index, vec![3, 1, 2]);
/// assert_eq!(at.to_string(), "[3, 1, 2] = token 3 (segment 1, offset 1 of 3), head 1, dim 2");
/// ```
pub fn locate(seqlens: &[u32], shape: &[usize], flat: usize) -> ElementLocation {
    let mut index = vec![0; shape.len()];
    let mut rest = flat;
    for (i, &n) in shape.iter().enumerate().rev() {
        if n > 0 {
            index[i] = rest % n;
            rest /= n;
        }
    }
    let token = locate_token(seqlens, index.first().copied().unwrap_or(0));
    ElementLocation { index, token }
}

impl fmt::Display for ElementLocation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?}", self.index)?;
        let Some(&row) = self.index.first() else { return Ok(()) };
        match self.token {
            TokenLocation::Segment { segment, offset, len } => {
                write!(f, " = token {row} (segment {segment}, offset {offset} of {len})")?
            }
            TokenLocation::Padding { real_tokens } => {
                write!(f, " = token {row} (padding: past the {real_tokens} real tokens)")?
            }
        }
        match self.index.as_slice() {
            [_, head, dim] => write!(f, ", head {head}, dim {dim}"),
            [_, column] => write!(f, ", column {column}"),
            _ => Ok(()),
        }
    }
}

/// One element's difference.
#[derive(Debug, Clone, PartialEq)]
pub struct Difference {
    /// Where it is.
    pub at: ElementLocation,
    /// The value under test.
    pub actual: f64,
    /// The reference value.
    pub expected: f64,
    /// The absolute (or relative) difference that made it the worst.
    pub diff: f64,
}

impl fmt::Display for Difference {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{:.3e} at {}: actual {:e}, expected {:e}",
            self.diff, self.at, self.actual, self.expected
        )
    }
}

/// The outcome of [`compare`]: passed or not, with the numbers that say by how much.
#[derive(Debug, Clone, PartialEq)]
pub struct Report {
    /// The case's name (and op), as the caller gave it.
    pub case: String,
    /// dtype of the tensor under test.
    pub dtype: DType,
    /// Shape of both tensors.
    pub shape: Vec<usize>,
    /// The tolerance applied.
    pub tol: Tolerance,
    /// Elements outside the tolerance.
    pub mismatched: usize,
    /// All elements.
    pub total: usize,
    /// The greatest absolute difference (`None` when the tensors are empty).
    pub max_abs: Option<Difference>,
    /// The greatest relative difference `|a − e| / |e|`.
    pub max_rel: Option<Difference>,
    /// The first element outside the tolerance, in row-major order.
    pub first_mismatch: Option<Difference>,
    /// `mean|a − e|`.
    pub mean_abs: f64,
}

impl Report {
    /// Every element is within the tolerance.
    pub fn passed(&self) -> bool {
        self.mismatched == 0
    }

    /// `Ok(self)` if it passed, else a [`Mismatch`] whose message is this report.
    pub fn into_result(self) -> std::result::Result<Self, Mismatch> {
        if self.passed() { Ok(self) } else { Err(Mismatch(Box::new(self))) }
    }
}

impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let pct = 100.0 * self.mismatched as f64 / self.total.max(1) as f64;
        write!(f, "{} ({}, shape {:?}): ", self.case, self.dtype.as_str(), self.shape)?;
        if self.passed() {
            write!(f, "all {} elements close ({})", self.total, self.tol)?;
        } else {
            write!(
                f,
                "mismatched {} / {} ({pct:.2}%) with {}",
                self.mismatched, self.total, self.tol
            )?;
        }
        if let Some(d) = &self.max_abs {
            write!(f, "\n  greatest absolute difference {d}")?;
        }
        if let Some(d) = &self.max_rel {
            write!(f, "\n  greatest relative difference {d}")?;
        }
        if let Some(d) = self.first_mismatch.as_ref().filter(|_| !self.passed()) {
            write!(
                f,
                "\n  first mismatch at {}: actual {:e}, expected {:e}",
                d.at, d.actual, d.expected
            )?;
        }
        write!(f, "\n  mean absolute difference {:.3e}", self.mean_abs)
    }
}

/// A failed [`Report`], as an error.
#[derive(Debug, Clone, PartialEq)]
pub struct Mismatch(pub Box<Report>);

impl fmt::Display for Mismatch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

impl std::error::Error for Mismatch {}

/// Compares `actual` with `expected` elementwise (both read as f64) and reports.
///
/// `seqlens` are the per-segment lengths packed along the first dimension (pass `&[]` for a
/// tensor that is not packed: every row then reads as padding). NaN is never close.
///
/// # Errors
/// [`Error::ShapeMismatch`] if the shapes differ.
///
/// # Example
/// ```
/// use candle_core::{Device, Tensor};
/// use oracle::{Tolerance, compare::compare};
/// let dev = Device::Cpu;
/// let expected = Tensor::new(&[[1.0f64], [2.0], [3.0]], &dev)?;
/// let actual = Tensor::new(&[[1.0f64], [2.0], [3.5]], &dev)?;
/// let report = compare("demo", &actual, &expected, &[1, 2], Tolerance::abs(1e-12))?;
/// assert!(!report.passed());
/// let msg = report.to_string();
/// assert!(msg.contains("mismatched 1 / 3 (33.33%)"), "{msg}");
/// assert!(msg.contains("token 2 (segment 1, offset 1 of 2)"), "{msg}");
/// # Ok::<(), candle_core::Error>(())
/// ```
pub fn compare(
    case: &str,
    actual: &Tensor,
    expected: &Tensor,
    seqlens: &[u32],
    tol: Tolerance,
) -> Result<Report> {
    if actual.dims() != expected.dims() {
        let err = Error::ShapeMismatch {
            actual: actual.dims().to_vec(),
            expected: expected.dims().to_vec(),
        };
        return Err(err.into());
    }
    let shape = actual.dims().to_vec();
    let (a, e) = (flat_f64(actual)?, flat_f64(expected)?);
    let diff_at = |i: usize, diff: f64| Difference {
        at: locate(seqlens, &shape, i),
        actual: a[i],
        expected: e[i],
        diff,
    };

    let mut mismatched = 0;
    let mut first = None;
    let mut worst_abs: Option<(usize, f64)> = None;
    let mut worst_rel: Option<(usize, f64)> = None;
    let mut sum_abs = 0.0;
    for (i, (&x, &y)) in a.iter().zip(&e).enumerate() {
        // abs() before folding the max; NaN ranks above everything.
        let abs = if x == y { 0.0 } else { (x - y).abs() };
        let rel = if abs == 0.0 { 0.0 } else { abs / y.abs() };
        let rank = |d: f64| if d.is_nan() { f64::INFINITY } else { d };
        if worst_abs.is_none_or(|(_, w)| rank(abs) > rank(w)) {
            worst_abs = Some((i, abs));
        }
        if worst_rel.is_none_or(|(_, w)| rank(rel) > rank(w)) {
            worst_rel = Some((i, rel));
        }
        sum_abs += abs;
        if !tol.allows(x, y) {
            mismatched += 1;
            first.get_or_insert(i);
        }
    }
    Ok(Report {
        case: case.to_string(),
        dtype: actual.dtype(),
        tol,
        mismatched,
        total: a.len(),
        max_abs: worst_abs.map(|(i, d)| diff_at(i, d)),
        max_rel: worst_rel.map(|(i, d)| diff_at(i, d)),
        first_mismatch: first.map(|i| diff_at(i, (a[i] - e[i]).abs())),
        mean_abs: sum_abs / a.len().max(1) as f64,
        shape,
    })
}

/// [`compare`], panicking with the report when it fails (for tests).
///
/// # Panics
/// If an element is outside the tolerance, or the shapes differ.
///
/// # Example
/// ```
/// use candle_core::{Device, Tensor};
/// let t = Tensor::new(&[[1.0f32, 2.0]], &Device::Cpu)?;
/// oracle::compare::assert_close("same", &t, &t, &[1], oracle::Tolerance::abs(0.0));
/// # Ok::<(), candle_core::Error>(())
/// ```
#[track_caller]
pub fn assert_close(
    case: &str,
    actual: &Tensor,
    expected: &Tensor,
    seqlens: &[u32],
    tol: Tolerance,
) {
    match compare(case, actual, expected, seqlens, tol) {
        Ok(report) if report.passed() => {}
        Ok(report) => panic!("{report}"),
        Err(err) => panic!("{case}: {err}"),
    }
}
