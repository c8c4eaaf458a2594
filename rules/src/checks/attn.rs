//! ATTN: attention outputs against the oracle, and segment isolation.

use crate::checks::proof::Proof;
use crate::checks::rule::rule;
use crate::{Checked, Location};

rule! {
    /// THD attention gives one output row per query token. [`crate::checks::check_attention`].
    ATTN_ROWS = "attn-rows", Attn, "one output row per query token",
        proof: Proof::Test("rules/src/checks/proofs.rs::attn_rows_output_at_real_tokens_only");
    /// No NaN from a row without keys. [`crate::checks::check_attention`].
    ATTN_FINITE = "attn-finite", Attn, "outputs are finite; a row that sees no key gives 0, never NaN",
        proof: Proof::Zoo("NanOnKeylessRows");
    /// THD attention is the oracle's. [`crate::checks::check_attention`].
    ATTN_ORACLE = "attn-oracle", Attn, "THD attention equals the per-sequence BSHD oracle at every real token",
        proof: Proof::Zoo("AttendsToPadding");
    /// Segments do not see each other. [`crate::checks::check_isolation`].
    ATTN_ISOLATION = "attn-isolation", Attn, "perturbing one segment never changes another segment's output",
        proof: Proof::Test("rules/src/checks/proofs.rs::attn_isolation_no_document_mask");
}

/// Where the real query tokens of an attention output lie: `[T, heads, head_dim]` row-major,
/// segment `i`'s `lens_q[i]` real rows starting at storage offset `Σ_{j<i} storage_q[j]`.
#[derive(Debug, Clone, Copy)]
pub struct AttnView<'a> {
    /// Real query lengths per segment.
    pub lens_q: &'a [u32],
    /// Storage lengths per segment (padding included); `None`: the real lengths, back to back.
    pub storage_q: Option<&'a [u32]>,
    /// Query heads.
    pub heads: usize,
    /// Head dimension.
    pub head_dim: usize,
}

impl AttnView<'_> {
    /// `(segment, storage token)` of every real query row, in order.
    pub fn real_rows(&self) -> Vec<(usize, usize)> {
        let storage = self.storage_q.unwrap_or(self.lens_q);
        let mut start = 0usize;
        let mut rows = Vec::new();
        for (i, (&s, &p)) in self.lens_q.iter().zip(storage).enumerate() {
            rows.extend((start..start + s as usize).map(|t| (i, t)));
            start += p as usize;
        }
        rows
    }

    fn width(&self) -> usize {
        self.heads * self.head_dim
    }
}

/// ATTN: `got` equals `expected` (the oracle) at every real query token, and no value there is
/// NaN or infinite (a row that sees no key gives 0).
///
/// ```text
/// for every real row t, head h, dim d:  got finite  and  |got − expected| ≤ atol
/// ```
///
/// # Errors
/// The first non-finite value, else the worst difference above `atol`, with segment, token and
/// head.
///
/// # Example
/// ```
/// use rules::checks::{AttnView, check_attention};
/// let view = AttnView { lens_q: &[1, 1], storage_q: None, heads: 1, head_dim: 1 };
/// assert!(check_attention(&view, &[1.0, 2.0], &[1.0, 2.0], 1e-12).is_ok());
/// let v = check_attention(&view, &[1.0, f64::NAN], &[1.0, 0.0], 1e-12).unwrap_err();
/// assert_eq!(v.at.segment, Some(1));
/// ```
pub fn check_attention(view: &AttnView<'_>, got: &[f64], expected: &[f64], atol: f64) -> Checked {
    let w = view.width();
    let mut worst: Option<(f64, usize, usize, usize)> = None;
    for (seg, t) in view.real_rows() {
        for e in 0..w {
            let idx = t * w + e;
            let (g, x) = (got.get(idx).copied(), expected.get(idx).copied());
            let (Some(g), Some(x)) = (g, x) else {
                return Err(ATTN_ROWS
                    .violation()
                    .at(Location::default().segment(seg).token(t))
                    .expected(format!("{} values", expected.len()))
                    .got(format!("{} values", got.len())));
            };
            if !g.is_finite() {
                return Err(ATTN_FINITE
                    .violation()
                    .at(Location::default().segment(seg).token(t).head(e / view.head_dim))
                    .expected(x)
                    .got(g));
            }
            let d = (g - x).abs();
            if d > atol && worst.is_none_or(|(m, ..)| d > m) {
                worst = Some((d, seg, t, e));
            }
        }
    }
    if let Some((d, seg, t, e)) = worst {
        let idx = t * w + e;
        return Err(ATTN_ORACLE
            .violation()
            .at(Location::default().segment(seg).token(t).head(e / view.head_dim))
            .expected(expected[idx])
            .got(got[idx])
            .note(format!("|Δ| = {d:.3e} > atol {atol:e} (dim {})", e % view.head_dim)));
    }
    Ok(())
}

/// ATTN, isolation: after perturbing segment `perturbed`'s inputs, every other segment's output
/// is bit-identical.
///
/// # Errors
/// The first real token of another segment whose output changed.
///
/// # Example
/// ```
/// use rules::checks::{AttnView, check_isolation};
/// let view = AttnView { lens_q: &[1, 1], storage_q: None, heads: 1, head_dim: 1 };
/// assert!(check_isolation(&view, &[1.0, 2.0], &[1.0, 3.0], 1).is_ok());
/// assert!(check_isolation(&view, &[1.0, 2.0], &[1.5, 3.0], 1).is_err());
/// ```
pub fn check_isolation(
    view: &AttnView<'_>,
    before: &[f64],
    after: &[f64],
    perturbed: usize,
) -> Checked {
    let w = view.width();
    for (seg, t) in view.real_rows() {
        if seg == perturbed {
            continue;
        }
        for e in 0..w {
            let idx = t * w + e;
            let (b, a) = (before.get(idx), after.get(idx));
            if b.map(|x| x.to_bits()) != a.map(|x| x.to_bits()) {
                let show = |x: Option<&f64>| x.map_or("no value".to_string(), f64::to_string);
                return Err(ATTN_ISOLATION
                    .violation()
                    .at(Location::default().segment(seg).token(t).head(e / view.head_dim))
                    .expected(format!("{} (unchanged)", show(b)))
                    .got(show(a))
                    .note(format!("segment {perturbed}'s q, k and v were perturbed")));
            }
        }
    }
    Ok(())
}
