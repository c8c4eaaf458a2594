//! What proves a rule can fail: the planted bug that must turn it red.
//!
//! Every entry of the registry ([`crate::checks::RULES`]) names one ([`crate::checks::Rule::proof`]),
//! and a test holds every rule to it (`properties`' `proofs` test; the planted Python adapters
//! in `cli/tests/fuzz_minimal.rs`): a rule without a proof, or whose proof no longer fails it,
//! fails that test. A rule is trusted only after a planted bug turns it red.

/// The planted bug that must fail a rule, and where it lives.
///
/// # Example
/// ```
/// use rules::checks::{LABEL_TARGETS, Proof, RULES};
/// assert_eq!(RULES.iter().find(|r| r.id == "cross-doc-label").unwrap().proof, Some(Proof::Zoo("LabelLeak")));
/// assert_eq!(LABEL_TARGETS.proof.unwrap().kind(), "batch");
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Proof {
    /// A variant of the zoo of planted bugs (`properties::zoo::CATALOGUE`, by name): run with
    /// the zoo's runner, it fails with this rule's id.
    Zoo(&'static str),
    /// A planted example adapter, `adapters/python/examples/NAME.py` (name without `.py`),
    /// listed in `cli/tests/fuzz_minimal.rs`'s tables (`PACKER_BUGS`, `OTHER_BUGS`) with this
    /// rule as the one it must break.
    Adapter(&'static str),
    /// A committed batch (path from the repository root) whose `expected.toml` (the nearest one
    /// above it) lists this rule among its violations; `thdcheck check`'s tests hold every
    /// listed verdict.
    Batch(&'static str),
    /// A named test, `path/from/the/root.rs::test_name`, that builds the broken input a real
    /// bug of the rule's class produces and asserts this rule's violation (with a control that
    /// holds).
    Test(&'static str),
}

impl Proof {
    /// The kind, as the README's table prints it: `zoo`, `adapter`, `batch` or `test`.
    pub fn kind(&self) -> &'static str {
        match self {
            Proof::Zoo(_) => "zoo",
            Proof::Adapter(_) => "adapter",
            Proof::Batch(_) => "batch",
            Proof::Test(_) => "test",
        }
    }

    /// What it names: the variant, the adapter, the batch's path or the test.
    pub fn name(&self) -> &'static str {
        match self {
            Proof::Zoo(n) | Proof::Adapter(n) | Proof::Batch(n) | Proof::Test(n) => n,
        }
    }
}

impl std::fmt::Display for Proof {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} `{}`", self.kind(), self.name())
    }
}
