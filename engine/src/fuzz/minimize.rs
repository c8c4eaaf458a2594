//! The minimizer: after proptest's shrinking, the case itself is reduced until no reduction
//! fails the same way (1-minimal), or the shrink budget is spent.
//!
//! Proptest's shrinking stops where no simpler value of the generator's draws fails (a count
//! modulo the DP size is not monotone in them); [`Target::reductions`] lists smaller cases of
//! the request itself, and the first of them that fails the same way replaces the case, until
//! none does.

use super::Target;
use super::runner::Run;

/// The case the minimizer ends with.
pub(super) struct Minimized<C> {
    /// The smallest case that fails as the failure found.
    pub(super) case: C,
    /// How many reductions replaced the case.
    pub(super) reductions: u64,
    /// Whether no reduction of `case` fails the same way (`false` when the budget was spent,
    /// the failure hung, the target does not list every reduction, or the case was given).
    pub(super) one_minimal: bool,
}

/// Reduces `shrunk` (proptest's result) to a 1-minimal case within `--max-shrink-runs`; the
/// case of `--request` (`given`) and a hang are kept as they are.
pub(super) fn minimize<T: Target>(
    run: &mut Run<'_, '_, T>,
    shrunk: T::Case,
    given: bool,
) -> Minimized<T::Case> {
    let mut minimal = shrunk;
    let mut reductions = 0u64;
    let mut one_minimal = !run.hung && run.target.minimizes() && !given;
    if one_minimal {
        'fixpoint: loop {
            for candidate in run.target.reductions(&minimal) {
                if run.budget_spent() {
                    one_minimal = false;
                    break 'fixpoint;
                }
                let Err(f) = run.judge(&candidate) else { continue };
                let same = run.same_class(&f);
                if f.kind == "hang" {
                    // Every further run of a hang waits the full timeout.
                    one_minimal = same;
                    if same {
                        run.keep(f);
                        minimal = candidate;
                    }
                    break 'fixpoint;
                }
                if same {
                    run.keep(f);
                    minimal = candidate;
                    reductions += 1;
                    continue 'fixpoint;
                }
                run.other_classes += 1;
            }
            break;
        }
    }
    Minimized { case: minimal, reductions, one_minimal }
}
