//! ATTN for `thdcheck fuzz attention`: a user's packed (varlen, document-masked, context
//! parallel) attention judged on its answers. The caller (the fuzz target) computes the truth
//! with the oracle, per document in f64, and the FlashAttention bound from the oracle in the
//! request's dtype; the judges here only compare plain numbers.
//!
//! ```text
//! output     every real row t, head h, dim e:  out finite  and  |out − ref64| ≤ 2·naive + floor
//! isolation  perturbing the q, k, v of some documents (and the padding) leaves every real row
//!            of every other document bit-identical
//! causal     perturbing the last real token of every document leaves every earlier row of
//!            that document bit-identical (causal requests)
//! padding    every padding row is finite
//! lse        every real row's log-sum-exp (natural log, scaled scores) is the oracle's,
//!            |lse − ref| ≤ atol + rtol·|ref|, when the answer carries one
//! ```

use crate::checks::input::{AttentionInput, AttentionRow};
use crate::checks::proof::Proof;
use crate::checks::rule::{Fuzz, Rule, rule};
use crate::{Checked, Location, Violation};

rule! {
    /// The output is the oracle's within the FlashAttention rule.
    /// [`crate::checks::check_attention_output`].
    ATTENTION_OUTPUT = "attention-output", Attn, "at every real token the output equals the oracle's per-document f64 attention within the FlashAttention rule of its dtype (2·max|naive same-dtype − f64| + floor), and is finite",
        fuzz: Fuzz::Attention(Some(judge_output)),
        proof: Proof::Test("cli/tests/cli/fuzz_numbers.rs::fuzz_attention_passes_the_plain_adapter_and_shrinks_each_planted_bug");
    /// Documents do not see each other. [`crate::checks::check_attention_isolation`].
    ATTENTION_ISOLATION = "attention-isolation", Attn, "perturbing the inputs of some documents (and the padding) leaves every other document's output bit-identical",
        fuzz: Fuzz::Attention(Some(judge_isolation)),
        proof: Proof::Test("cli/tests/cli/fuzz_numbers.rs::fuzz_attention_passes_the_plain_adapter_and_shrinks_each_planted_bug");
    /// No query sees a later key of its document. [`crate::checks::check_attention_causal`].
    ATTENTION_CAUSAL = "attention-causal", Attn, "causal: perturbing a document's last token leaves every earlier query of the document bit-identical",
        fuzz: Fuzz::Attention(Some(judge_causal)),
        proof: Proof::Test("cli/tests/cli/fuzz_numbers.rs::fuzz_attention_passes_the_plain_adapter_and_shrinks_each_planted_bug");
    /// Padding rows are finite. [`crate::checks::check_attention_padding`].
    ATTENTION_PADDING = "attention-padding", Attn, "every padding row of the output is finite (never NaN or infinite)",
        fuzz: Fuzz::Attention(Some(judge_padding)),
        proof: Proof::Test("cli/tests/cli/fuzz_numbers.rs::fuzz_attention_passes_the_plain_adapter_and_shrinks_each_planted_bug");
    /// The log-sum-exp, when returned, is the oracle's. [`crate::checks::check_attention_lse`].
    ATTENTION_LSE = "attention-lse", Attn, "the log-sum-exp returned (natural log of Σ exp(scale·q·k) over the visible keys) equals the oracle's at every real token",
        fuzz: Fuzz::Attention(Some(judge_lse)),
        proof: Proof::Test("cli/tests/cli/fuzz_numbers.rs::fuzz_attention_passes_the_plain_adapter_and_shrinks_each_planted_bug");
}

fn non_finite(rule: &Rule, at: Location, x: f64) -> Violation {
    rule.violation().at(at).expected("a finite value").got(x)
}

/// `attention-output`: every real row within the FlashAttention bound of the oracle, and
/// finite. The first element out of bound is reported (document, query, head, dim, both
/// values), with the largest error.
///
/// # Example
/// ```
/// use rules::checks::{AttentionInput, AttentionLayout, FlashBound, check_attention_output};
/// let layout = AttentionLayout { lens: &[1, 1], storage: &[1, 2], heads: 1, head_dim: 1, causal: true };
/// let bound = FlashBound { dtype: "f32", naive_max_err: 1e-7, floor: 1e-8 };
/// let input = |out| AttentionInput {
///     layout, out, truth: &[0.5, 0.25, 0.0], bound, lse: None, truth_lse: &[0.0; 3],
///     lse_tol: (0.0, 0.0), isolation: &[], causality: None,
/// };
/// assert!(check_attention_output(&input(&[0.5, 0.25, 9.0])).is_ok()); // a padding row: any value
/// let v = check_attention_output(&input(&[0.5, 0.3, 0.0])).unwrap_err();
/// assert!(v.summary().starts_with("document 1, query 0, token 1, head 0"));
/// ```
pub fn check_attention_output(input: &AttentionInput<'_>) -> Checked {
    let l = &input.layout;
    let w = l.width();
    let bound = input.bound.bound();
    let mut first: Option<(AttentionRow, usize, f64, f64)> = None;
    let mut worst = 0.0f64;
    for row in l.rows().into_iter().filter(|r| r.real) {
        for e in 0..w {
            let i = row.token * w + e;
            let (g, x) = (input.out[i], input.truth[i]);
            if !g.is_finite() {
                return Err(non_finite(&ATTENTION_OUTPUT, l.at(&row, e / l.head_dim), g)
                    .note(format!("dim {}; the oracle gives {x}", e % l.head_dim)));
            }
            let d = (g - x).abs();
            if d > bound {
                worst = worst.max(d);
                if first.is_none() {
                    first = Some((row, e, x, g));
                }
            }
        }
    }
    let Some((row, e, x, g)) = first else { return Ok(()) };
    Err(ATTENTION_OUTPUT
        .violation()
        .at(l.at(&row, e / l.head_dim))
        .expected(format!("{x} (oracle, f64)"))
        .got(g)
        .note(format!(
            "dim {}: |Δ| {:.3e} > {} (largest |Δ| {worst:.3e}); offsets {:?}",
            e % l.head_dim,
            (g - x).abs(),
            input.bound,
            l.offsets()
        )))
}

/// `attention-isolation`: in every isolation answer, every real row of a document that was
/// not perturbed is bit-identical to the first answer's (tolerance-free).
///
/// # Example
/// ```
/// use rules::checks::{AttentionInput, AttentionLayout, FlashBound, Perturbed, check_attention_isolation};
/// let layout = AttentionLayout { lens: &[1, 1], storage: &[1, 1], heads: 1, head_dim: 1, causal: false };
/// let bound = FlashBound { dtype: "bf16", naive_max_err: 0.0, floor: 0.0 };
/// let leak = [Perturbed { docs: &[true, false], padding: false, out: &[0.9, 0.26] }];
/// let input = AttentionInput {
///     layout, out: &[0.5, 0.25], truth: &[0.5, 0.25], bound, lse: None, truth_lse: &[0.0; 2],
///     lse_tol: (0.0, 0.0), isolation: &leak, causality: None,
/// };
/// let v = check_attention_isolation(&input).unwrap_err();
/// assert!(v.summary().starts_with("document 1, query 0"));
/// ```
pub fn check_attention_isolation(input: &AttentionInput<'_>) -> Checked {
    let l = &input.layout;
    let w = l.width();
    for run in input.isolation {
        for row in l.rows().into_iter().filter(|r| r.real && !run.docs[r.doc]) {
            for e in 0..w {
                let i = row.token * w + e;
                let (b, a) = (input.out[i], run.out[i]);
                if b.to_bits() != a.to_bits() {
                    let docs: Vec<usize> = (0..run.docs.len()).filter(|&d| run.docs[d]).collect();
                    return Err(ATTENTION_ISOLATION
                        .violation()
                        .at(l.at(&row, e / l.head_dim))
                        .expected(format!("{b} (unchanged)"))
                        .got(a)
                        .note(format!(
                            "dim {}: the keys of document{} {docs:?}{} were perturbed; offsets {:?}",
                            e % l.head_dim,
                            if docs.len() == 1 { "" } else { "s" },
                            if run.padding { " and of the padding" } else { "" },
                            l.offsets()
                        )));
                }
            }
        }
    }
    Ok(())
}

/// `attention-causal`: with every document's last real token (key `len − 1`) perturbed, every
/// earlier query of the document is bit-identical (causal requests only).
///
/// # Example
/// ```
/// use rules::checks::{AttentionInput, AttentionLayout, FlashBound, check_attention_causal};
/// let layout = AttentionLayout { lens: &[2], storage: &[2], heads: 1, head_dim: 1, causal: true };
/// let bound = FlashBound { dtype: "f32", naive_max_err: 0.0, floor: 0.0 };
/// let input = AttentionInput {
///     layout, out: &[0.5, 0.25], truth: &[0.5, 0.25], bound, lse: None, truth_lse: &[0.0; 2],
///     lse_tol: (0.0, 0.0), isolation: &[], causality: Some(&[0.6, 0.9]),
/// };
/// let v = check_attention_causal(&input).unwrap_err();
/// assert!(v.summary().starts_with("document 0, query 0, key 1"));
/// ```
pub fn check_attention_causal(input: &AttentionInput<'_>) -> Checked {
    let l = &input.layout;
    let Some(after) = input.causality else { return Ok(()) };
    let w = l.width();
    for row in l.rows() {
        let last = l.lens[row.doc] as usize;
        if !row.real || row.offset + 1 >= last {
            continue;
        }
        for e in 0..w {
            let i = row.token * w + e;
            if input.out[i].to_bits() != after[i].to_bits() {
                return Err(ATTENTION_CAUSAL
                    .violation()
                    .at(Location::default()
                        .context(format!(
                            "document {}, query {}, key {}",
                            row.doc,
                            row.offset,
                            last - 1
                        ))
                        .token(row.token)
                        .head(e / l.head_dim))
                    .expected(format!("{} (unchanged)", input.out[i]))
                    .got(after[i])
                    .note(format!(
                        "dim {}: key {} (the document's last token) was perturbed and query {} \
                         comes before it; offsets {:?}",
                        e % l.head_dim,
                        last - 1,
                        row.offset,
                        l.offsets()
                    )));
            }
        }
    }
    Ok(())
}

/// `attention-padding`: every padding row of the output is finite.
///
/// # Example
/// ```
/// use rules::checks::{AttentionInput, AttentionLayout, FlashBound, check_attention_padding};
/// let layout = AttentionLayout { lens: &[1], storage: &[2], heads: 1, head_dim: 1, causal: true };
/// let bound = FlashBound { dtype: "f32", naive_max_err: 0.0, floor: 0.0 };
/// let input = AttentionInput {
///     layout, out: &[0.5, f64::NAN], truth: &[0.5, 0.0], bound, lse: None, truth_lse: &[0.0; 2],
///     lse_tol: (0.0, 0.0), isolation: &[], causality: None,
/// };
/// assert!(check_attention_padding(&input).unwrap_err().summary().contains("padding row 1"));
/// ```
pub fn check_attention_padding(input: &AttentionInput<'_>) -> Checked {
    let l = &input.layout;
    let w = l.width();
    for row in l.rows().into_iter().filter(|r| !r.real) {
        for e in 0..w {
            let g = input.out[row.token * w + e];
            if !g.is_finite() {
                return Err(non_finite(&ATTENTION_PADDING, l.at(&row, e / l.head_dim), g)
                    .note(format!("offsets {:?}, real lengths {:?}", l.offsets(), l.lens)));
            }
        }
    }
    Ok(())
}

/// `attention-lse`: every real row's log-sum-exp within `atol + rtol·|ref|` of the oracle's.
///
/// # Example
/// ```
/// use rules::checks::{AttentionInput, AttentionLayout, FlashBound, check_attention_lse};
/// let layout = AttentionLayout { lens: &[1], storage: &[1], heads: 1, head_dim: 1, causal: true };
/// let bound = FlashBound { dtype: "f32", naive_max_err: 0.0, floor: 0.0 };
/// let input = |lse| AttentionInput {
///     layout, out: &[0.5], truth: &[0.5], bound, lse: Some(lse), truth_lse: &[1.0],
///     lse_tol: (1e-2, 1e-3), isolation: &[], causality: None,
/// };
/// assert!(check_attention_lse(&input(&[1.001])).is_ok());
/// assert!(check_attention_lse(&input(&[1.0 / 2f64.ln()])).is_err()); // base 2
/// ```
pub fn check_attention_lse(input: &AttentionInput<'_>) -> Checked {
    let l = &input.layout;
    let Some(lse) = input.lse else { return Ok(()) };
    let (rtol, atol) = input.lse_tol;
    for row in l.rows().into_iter().filter(|r| r.real) {
        for h in 0..l.heads {
            let i = row.token * l.heads + h;
            let (g, x) = (lse[i], input.truth_lse[i]);
            let tol = atol + rtol * x.abs();
            if !g.is_finite() || (g - x).abs() > tol {
                return Err(ATTENTION_LSE
                    .violation()
                    .at(l.at(&row, h))
                    .expected(format!("{x} (oracle, f64)"))
                    .got(g)
                    .note(format!(
                        "|Δ| {:.3e} > {atol:e} + {rtol:e}·|ref| = {tol:.3e}; offsets {:?}",
                        (g - x).abs(),
                        l.offsets()
                    )));
            }
        }
    }
    Ok(())
}

/// The registry's judge of `attention-output`.
pub(crate) fn judge_output(input: &AttentionInput<'_>) -> Option<Checked> {
    Some(check_attention_output(input))
}

/// The registry's judge of `attention-isolation`: with two documents or more.
pub(crate) fn judge_isolation(input: &AttentionInput<'_>) -> Option<Checked> {
    (!input.isolation.is_empty()).then(|| check_attention_isolation(input))
}

/// The registry's judge of `attention-causal`: causal requests.
pub(crate) fn judge_causal(input: &AttentionInput<'_>) -> Option<Checked> {
    input.causality.map(|_| check_attention_causal(input))
}

/// The registry's judge of `attention-padding`: layouts with padding rows.
pub(crate) fn judge_padding(input: &AttentionInput<'_>) -> Option<Checked> {
    let l = &input.layout;
    (l.storage.iter().sum::<u32>() > l.lens.iter().sum::<u32>())
        .then(|| check_attention_padding(input))
}

/// The registry's judge of `attention-lse`: answers that carry one.
pub(crate) fn judge_lse(input: &AttentionInput<'_>) -> Option<Checked> {
    input.lse.map(|_| check_attention_lse(input))
}
