//! WORK: useful attention work against hardware work.

use crate::checks::proof::Proof;
use crate::checks::rule::{Rule, rule};
use crate::{Checked, Location};

rule! {
    /// Useful work is Σ over the real segments. [`crate::checks::check_work`].
    WORK_USEFUL = "work-useful", Work, "useful work is Σ over real segments at real lengths",
        proof: Proof::Zoo("PackLengthSquared");
    /// Hardware work bounds useful work. [`crate::checks::check_work`].
    WORK_BOUND = "work-bound", Work, "hardware work >= useful work",
        proof: Proof::Test("rules/src/checks/proofs.rs::work_bound_causal_half_square");
    /// Equality exactly without padding. [`crate::checks::check_work`].
    WORK_EXACT = "work-exact", Work, "hardware = useful exactly when nothing is padded",
        proof: Proof::Test("rules/src/checks/proofs.rs::work_exact_hardware_at_real_lengths");
}

/// Attention work of a set of sequences: `Σ sᵢ`, `Σ sᵢ²` and `Σ sᵢ(sᵢ+1)/2`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize)]
pub struct WorkSums {
    /// `Σ sᵢ`.
    pub tokens: u64,
    /// `Σ sᵢ²`.
    pub sum_squares: u128,
    /// `Σ sᵢ(sᵢ+1)/2`, the exact causal triangle.
    pub triangle: u128,
}

impl WorkSums {
    /// The sums over `lens`, computed the obvious way.
    ///
    /// # Example
    /// ```
    /// use rules::checks::WorkSums;
    /// let w = WorkSums::of([3, 5]);
    /// assert_eq!((w.tokens, w.sum_squares, w.triangle), (8, 34, 21));
    /// ```
    pub fn of(lens: impl IntoIterator<Item = u64>) -> Self {
        let mut w = Self::default();
        for s in lens {
            w.add(s);
        }
        w
    }

    /// Adds one sequence of length `s` to the sums (what [`WorkSums::of`] does for each).
    ///
    /// # Example
    /// ```
    /// use rules::checks::WorkSums;
    /// let mut w = WorkSums::default();
    /// w.add(3);
    /// w.add(5);
    /// assert_eq!(w, WorkSums::of([3, 5]));
    /// ```
    pub fn add(&mut self, s: u64) {
        let s128 = u128::from(s);
        self.tokens += s;
        self.sum_squares += s128 * s128;
        self.triangle += s128 * (s128 + 1) / 2;
    }
}

/// Which sequences the hardware computes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum HardwareKind {
    /// A varlen kernel: every segment (mock ones too) at its storage length.
    Varlen,
    /// The whole pack as one sequence (no `cu_seqlens` passed, or BSHD).
    WholePack,
}

/// A pack's lengths as plain data.
#[derive(Debug, Clone, Copy)]
pub struct WorkView<'a> {
    /// Real length of every segment.
    pub lens: &'a [u32],
    /// Storage (padded) length of every segment.
    pub storage: &'a [u32],
    /// Leading real segments; the rest are mock.
    pub num_real: usize,
    /// Stored tokens `T` of the pack (all padding included).
    pub stored_tokens: u64,
}

/// WORK: useful work is exactly `Σ` over the real segments' real lengths, hardware work is at
/// least that, and the two are equal exactly when nothing is padded.
///
/// ```text
/// useful = sums(sᵢ, i < num_real)                                      (exact)
/// hardware ≥ useful                      (tokens, Σs², triangle)
/// hardware = useful  ⇔  Varlen:    every pᵢ = sᵢ (real) and every mock segment is empty
///                       WholePack: T² = Σ sᵢ² (one real segment fills the pack)
/// ```
///
/// # Errors
/// The first rule broken.
///
/// # Example
/// ```
/// use rules::checks::{HardwareKind, WorkSums, WorkView, check_work};
/// let view = WorkView { lens: &[3, 5], storage: &[3, 5], num_real: 2, stored_tokens: 8 };
/// let useful = WorkSums::of([3, 5]);
/// assert!(check_work(&view, &useful, &WorkSums::of([8]), HardwareKind::WholePack).is_ok());
/// // PaLM-style: the pack length squared reported as useful work.
/// assert!(check_work(&view, &WorkSums::of([8]), &WorkSums::of([8]), HardwareKind::WholePack).is_err());
/// ```
pub fn check_work(
    view: &WorkView<'_>,
    useful: &WorkSums,
    hardware: &WorkSums,
    kind: HardwareKind,
) -> Checked {
    let ctx = match kind {
        HardwareKind::Varlen => "varlen kernel",
        HardwareKind::WholePack => "whole pack as one sequence",
    };
    let v = |rule: Rule| rule.violation().at(Location::default().context(ctx));
    let real = &view.lens[..view.num_real.min(view.lens.len())];
    let want = WorkSums::of(real.iter().map(|&s| u64::from(s)));
    if *useful != want {
        return Err(v(WORK_USEFUL)
            .expected(format!("{want:?}"))
            .got(format!("{useful:?}"))
            .note(format!("real lengths {real:?}")));
    }
    if hardware.tokens < useful.tokens
        || hardware.sum_squares < useful.sum_squares
        || hardware.triangle < useful.triangle
    {
        return Err(v(WORK_BOUND).expected(format!(">= {useful:?}")).got(format!("{hardware:?}")));
    }
    let padding_free = match kind {
        HardwareKind::Varlen => {
            view.lens.iter().zip(view.storage).take(view.num_real).all(|(s, p)| s == p)
                && view.storage.iter().skip(view.num_real).all(|&p| p == 0)
        }
        HardwareKind::WholePack => {
            u128::from(view.stored_tokens) * u128::from(view.stored_tokens) == want.sum_squares
        }
    };
    let equal = hardware == useful;
    if equal != padding_free {
        let (e, g) = if padding_free {
            ("hardware = useful (nothing is padded)", "hardware > useful")
        } else {
            (
                "hardware > useful (padding, a mock segment or cross-segment attention)",
                "hardware = useful",
            )
        };
        return Err(v(WORK_EXACT).expected(e).got(format!("{g}: {hardware:?}")).note(format!(
            "real {:?}, storage {:?}, {} real, T = {}",
            view.lens, view.storage, view.num_real, view.stored_tokens
        )));
    }
    Ok(())
}
