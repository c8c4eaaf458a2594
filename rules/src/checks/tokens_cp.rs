//! TOKENS-CP: what a logger reports does not depend on the CP size.

use crate::checks::input::{CpLossInput, TokenCounts, TokenRecord};
use crate::checks::proof::Proof;
use crate::checks::rule::{Fuzz, rule};
use crate::violation::{close, rel_diff};
use crate::{Checked, Location};

rule! {
    /// Counts and the loss do not move with the CP size. [`crate::checks::check_tokens_cp`].
    TOKENS_CP = "tokens-cp", TokensCp, "token counts and the reported loss are the same for every cp size",
        fuzz: Fuzz::CpLoss(Some(judge_tokens_cp)),
        proof: Proof::Zoo("RankZeroStats");
}

/// A count of a [`TokenRecord`].
type Field = fn(&TokenRecord) -> u64;

/// TOKENS-CP: for every CP size the counts are exactly the global ones, and every ratio metric
/// equals the one reported at the first CP size (and the reference loss) to `rtol`.
///
/// ```text
/// ∀ cp: n_tokens, n_valid_tokens, prompt_tokens, n_seqs = expected   (exact)
/// ∀ cp: |loss − reference_loss| ≤ rtol·|reference_loss|;  ppl_avg = records[0].ppl_avg (rtol)
/// ```
///
/// # Errors
/// The first metric that moves, naming the CP size.
///
/// # Example
/// ```
/// use rules::checks::{TokenCounts, TokenRecord, check_tokens_cp};
/// let want = TokenCounts { n_tokens: 8, n_valid_tokens: 5, prompt_tokens: 3, n_seqs: 2 };
/// let good = TokenRecord { n_tokens: 8, n_valid_tokens: 5, prompt_tokens: 3, n_seqs: 2, loss: 0.44, ppl_avg: Some(1.6) };
/// // AReaL #1242: rank 0's shard reported as the batch.
/// let shard = TokenRecord { n_tokens: 6, n_valid_tokens: 2, prompt_tokens: 4, loss: 0.4, ..good };
/// let v = check_tokens_cp(&want, 0.44, &[(1, good), (2, shard)], 1e-12).unwrap_err();
/// assert_eq!((v.id, v.at.cp), ("tokens-cp", Some(2)));
/// ```
pub fn check_tokens_cp(
    expected: &TokenCounts,
    reference_loss: f64,
    records: &[(usize, TokenRecord)],
    rtol: f64,
) -> Checked {
    let Some(&(_, first)) = records.first() else { return Ok(()) };
    for &(cp, r) in records {
        let v = |rule: &str| TOKENS_CP.violation().rule_text(rule).at(Location::default().cp(cp));
        let fields: [(&str, u64, Field); 4] = [
            ("n_tokens", expected.n_tokens, |r| r.n_tokens),
            ("n_valid_tokens", expected.n_valid_tokens, |r| r.n_valid_tokens),
            ("prompt_tokens", expected.prompt_tokens, |r| r.prompt_tokens),
            ("n_seqs", expected.n_seqs, |r| r.n_seqs),
        ];
        for (name, want, field) in fields {
            if want != field(&r) {
                let by_cp: Vec<String> =
                    records.iter().map(|(c, x)| format!("cp={c}: {}", field(x))).collect();
                return Err(v(&format!("{name} is the global count, the same for every cp size"))
                    .expected(want)
                    .got(field(&r))
                    .note(format!(
                        "{name} by cp size: {}; counts come from the global layout (real \
                         cu_seqlens), not from one CP shard or the padded storage",
                        by_cp.join(", ")
                    )));
            }
        }
        if !close(r.loss, reference_loss, rtol) {
            let by_cp: Vec<String> =
                records.iter().map(|(c, x)| format!("cp={c}: {:.6}", x.loss)).collect();
            return Err(v("the reported loss is the same for every cp size")
                .expected(reference_loss)
                .got(format!("{} (by cp size: {})", r.loss, by_cp.join(", ")))
                .note(format!(
                    "ratio {:.6}, relative error {:.3e}",
                    r.loss / reference_loss,
                    rel_diff(r.loss, reference_loss)
                )));
        }
        let same_ppl = match (r.ppl_avg, first.ppl_avg) {
            (Some(a), Some(b)) => close(a, b, rtol),
            (a, b) => a == b,
        };
        if !same_ppl {
            return Err(v("the reported perplexity is the same for every cp size")
                .expected(format!("{} (cp={})", ppl(first.ppl_avg), records[0].0))
                .got(ppl(r.ppl_avg)));
        }
    }
    Ok(())
}

/// A reported perplexity in words: the value, or that there is none (never `Some(..)`).
fn ppl(p: Option<f64>) -> String {
    p.map_or_else(|| "no perplexity reported".to_owned(), |p| p.to_string())
}

/// `tokens-cp` in `thdcheck fuzz loss`: the counts every CP size reported.
pub(crate) fn judge_tokens_cp(input: &CpLossInput<'_>) -> Option<Checked> {
    let CpLossInput::AcrossCp { expected, loss, by_cp, rtol } = *input else {
        return None;
    };
    Some(check_tokens_cp(expected, loss, by_cp, rtol))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The perplexity is printed as a value or in words, never as Rust's `Some(..)` / `None`.
    #[test]
    fn a_perplexity_reads_without_option_syntax() {
        let rec = |ppl_avg| TokenRecord {
            n_tokens: 8,
            n_valid_tokens: 5,
            loss: 0.44,
            ppl_avg,
            ..Default::default()
        };
        let expected = TokenCounts { n_tokens: 8, n_valid_tokens: 5, ..Default::default() };
        for (a, b) in [(Some(1.5), Some(2.5)), (Some(1.5), None), (None, Some(2.5))] {
            let v =
                check_tokens_cp(&expected, 0.44, &[(1, rec(a)), (2, rec(b))], 1e-12).unwrap_err();
            let text = format!("{v} {}", v.summary());
            assert!(!text.contains("Some(") && !text.contains("None"), "{text}");
            assert!(text.contains(&format!("{} (cp=1)", ppl(a))), "{text}");
        }
    }
}
