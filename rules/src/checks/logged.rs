//! A logged number against the step's exact value (`thdcheck metrics --expect` and
//! `thdcheck fuzz logger`): counts are exact, rates within the tolerance, and a disagreement
//! that a parallel factor explains says so.

use crate::checks::input::LoggedKind;
use crate::checks::proof::Proof;
use crate::checks::rule::{Fuzz, Rule, rule};
use crate::violation::rel_diff;
use crate::{Checked, Location};

rule! {
    /// A logged count is the step's exact count. [`crate::checks::check_logged`].
    LOGGED_TOKENS = "logged-tokens", TokensCp, "a logged token or sequence count is the step's exact global count",
        fuzz: Fuzz::Logged(LoggedKind::Count),
        proof: Proof::Adapter("logger_rank_local_counts");
    /// Logged FLOPs are the step's. [`crate::checks::check_logged`].
    LOGGED_FLOPS = "logged-flops", Flops, "logged FLOPs and attention sums are the step's exact values",
        fuzz: Fuzz::Logged(LoggedKind::Flops),
        proof: Proof::Adapter("logger_pack_length_squared");
    /// A logged rate is the step's. [`crate::checks::check_logged`].
    LOGGED_RATE = "logged-rate", MfuPad, "a logged rate (TFLOP/s, MFU, tokens/s) is the step's, within the tolerance",
        fuzz: Fuzz::Logged(LoggedKind::Rate),
        proof: Proof::Test("rules/src/checks/proofs.rs::logged_rate_over_padded_tokens");
}

/// The rule of a logged value of `kind`: the one of this file's rules that judges that kind
/// (the registry's, [`LoggedKind::rule`]).
fn rule_of(kind: LoggedKind) -> Option<Rule> {
    [LOGGED_TOKENS, LOGGED_FLOPS, LOGGED_RATE]
        .into_iter()
        .find(|r| matches!(r.fuzz, Some(Fuzz::Logged(k)) if k == kind))
}

/// A logged or expected number: an exact integer or a float.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Number {
    /// An integer, exact.
    Int(i128),
    /// A float.
    Float(f64),
}

impl Number {
    fn as_f64(self) -> f64 {
        match self {
            Number::Int(i) => i as f64,
            Number::Float(f) => f,
        }
    }
}

impl std::fmt::Display for Number {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Number::Int(i) => write!(f, "{i}"),
            Number::Float(x) => write!(f, "{x}"),
        }
    }
}

/// How close two numbers must be: integers both ways are exact, anything else within
/// `max(atol, rtol·|expected|)` (and never NaN or infinite).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LoggedTolerance {
    /// Relative tolerance.
    pub rtol: f64,
    /// Absolute tolerance.
    pub atol: f64,
}

impl LoggedTolerance {
    /// True when `logged` agrees with `expected`.
    ///
    /// # Example
    /// ```
    /// use rules::checks::{Number, LoggedTolerance};
    /// let tol = LoggedTolerance { rtol: 1e-6, atol: 0.0 };
    /// assert!(tol.agrees(Number::Int(7), Number::Int(7)));
    /// assert!(!tol.agrees(Number::Int(7), Number::Int(8)));
    /// assert!(tol.agrees(Number::Float(1.0000001), Number::Float(1.0)));
    /// assert!(!tol.agrees(Number::Float(f64::NAN), Number::Float(1.0)));
    /// ```
    pub fn agrees(&self, logged: Number, expected: Number) -> bool {
        match (logged, expected) {
            (Number::Int(a), Number::Int(b)) => a == b,
            (a, b) => {
                let (a, b) = (a.as_f64(), b.as_f64());
                a.is_finite()
                    && b.is_finite()
                    && (a - b).abs() <= self.atol.max(self.rtol * b.abs())
            }
        }
    }
}

/// A parallel factor that can explain a wrong logged value: `("CP", 2)` means a value that is
/// exactly 1/2 (or 2×) of the right one was counted on one CP rank (or summed twice).
pub type Factor = (&'static str, u64);

/// The rule for one logged value: it is the step's exact value.
///
/// ```text
/// Count, Flops:  logged = expected   (integers exact; a float logged for an integer within tol)
/// Rate:          |logged − expected| ≤ max(atol, rtol·|expected|), finite
/// ```
///
/// When they disagree and `logged·f = expected` (or `logged = expected·f`) for one of the
/// `factors` (f > 1), the note names it: a rank-local count reported as global is `1/cp` of
/// it, a per-micro-batch value `1/grad_acc`.
///
/// # Errors
/// The violation of the kind's rule in the registry ([`LoggedKind::rule`]: `logged-tokens`
/// TOKENS-CP, `logged-flops` FLOPS or `logged-rate` MFU-PAD), at the key.
///
/// # Example
/// ```
/// use rules::checks::{LoggedKind, Number, LoggedTolerance, check_logged};
/// let tol = LoggedTolerance { rtol: 1e-6, atol: 0.0 };
/// // AReaL #1242 / Megatron-Bridge dense CP: rank 0's tokens logged as the step's.
/// let v = check_logged("n_tokens", LoggedKind::Count, Number::Int(6), Number::Int(12), tol, &[("CP", 2)])
///     .unwrap_err();
/// assert_eq!(v.id, "logged-tokens");
/// assert!(v.note.as_deref().unwrap().contains("CP factor 2"));
/// assert!(check_logged("mfu", LoggedKind::Rate, Number::Float(41.0), Number::Float(41.0), tol, &[]).is_ok());
/// ```
pub fn check_logged(
    key: &str,
    kind: LoggedKind,
    logged: Number,
    expected: Number,
    tol: LoggedTolerance,
    factors: &[Factor],
) -> Checked {
    if tol.agrees(logged, expected) {
        return Ok(());
    }
    let Some(rule) = rule_of(kind) else { return Ok(()) };
    let mut v = rule.violation().at(Location::default().key(key)).expected(expected).got(logged);
    let explained = factors.iter().filter(|(_, f)| *f > 1).find_map(|&(name, f)| {
        let scaled = |n: Number, by: u64| match n {
            Number::Int(i) => Number::Int(i * i128::from(by)),
            Number::Float(x) => Number::Float(x * by as f64),
        };
        if tol.agrees(scaled(logged, f), expected) {
            Some(format!(
                "logged × {f} = expected: a value of one of {f} parts reported as the whole \
                 ({name} factor {f}; e.g. one rank's count logged as the global one)"
            ))
        } else if tol.agrees(logged, scaled(expected, f)) {
            Some(format!(
                "logged = expected × {f}: counted {f} times ({name} factor {f}; e.g. a global \
                 value summed again over the {f} ranks)"
            ))
        } else {
            None
        }
    });
    v = match explained {
        Some(n) => v.note(n),
        None if matches!((logged, expected), (Number::Int(_), Number::Int(_))) => {
            v.note(format!("Δ = {}", logged.as_f64() - expected.as_f64()))
        }
        None => v.note(format!(
            "relative error {:.3e} > rtol {:e}",
            rel_diff(logged.as_f64(), expected.as_f64()),
            tol.rtol
        )),
    };
    Err(v)
}

/// The rule for a logged value that is not a number (a string, `null`, a list) where the step
/// has one: it holds only if the value is the expected one, written the same way. The rule is
/// the kind's (a count's `logged-tokens`, FLOPs' `logged-flops`, a rate's `logged-rate`), as for
/// a number.
///
/// # Errors
/// The kind's violation at the key, noting that the logged value is not a number.
///
/// # Example
/// ```
/// use rules::checks::{LoggedKind, check_logged_text};
/// let v = check_logged_text("mfu", LoggedKind::Rate, "\"n/a\"", "41.5").unwrap_err();
/// assert_eq!(v.id, "logged-rate");
/// assert!(check_logged_text("tag", LoggedKind::Count, "\"x\"", "\"x\"").is_ok());
/// ```
pub fn check_logged_text(key: &str, kind: LoggedKind, logged: &str, expected: &str) -> Checked {
    if logged == expected {
        return Ok(());
    }
    let Some(rule) = rule_of(kind) else { return Ok(()) };
    Err(rule
        .violation()
        .at(Location::default().key(key))
        .expected(expected)
        .got(logged)
        .note("not a number"))
}
