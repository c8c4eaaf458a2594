//! Invariant checks (the gate). Filled in by the properties issue.
