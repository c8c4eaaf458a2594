//! Rule ids and report entries: what every caller (the property suites, `thdcheck check`,
//! `thdcheck fuzz`, selfcheck) gets back from a rule.
//!
//! A [`Rule`] is a named part of an invariant (`position-ids` of LAYOUT). Applied to a view it
//! gives an [`Outcome`]: it holds, it is violated (with the [`Violation`]: where, expected, got),
//! it was skipped (the data lacks what it needs, and why), plus notes that are worth knowing but
//! are not violations. [`first_violation`] turns a list of outcomes into the `Result` the
//! property tests use, so the tests and the command run the same functions.
//!
//! No rule lives here: a family file declares its rules with `rule!` (constants, each with its
//! doc comment, next to their messages and judges), and the registry (`rules.rs`) lists them.

use serde::Serialize;

use crate::checks::input::{AttentionJudge, CpLossJudge, CpSplitJudge, LoggedKind, PackerJudge};
use crate::checks::proof::Proof;
use crate::checks::view::{BatchOptions, CollatorJudge, LayoutView};
use crate::{Checked, Invariant, Violation};

/// One rule of an invariant, with the id users see in reports and `expected.toml`, and, for a
/// rule of one pack, the function that judges it: `check_batch` runs the registry's
/// [`Rule::batch`] functions in registry order, and `check_layout` those marked
/// [`Rule::layout`]; where `thdcheck fuzz` judges it, [`Rule::fuzz`]; the planted bug that
/// must fail it, [`Rule::proof`]. No other list of them exists.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct Rule {
    /// The id (`position-ids`, `dpo-offsets`, ...).
    pub id: &'static str,
    /// The invariant it belongs to.
    pub invariant: Invariant,
    /// What it requires, in one line.
    pub statement: &'static str,
    /// How it judges one pack, when it is a rule of one pack.
    #[serde(skip)]
    pub batch: Option<BatchRun>,
    /// Part of LAYOUT on a pack alone ([`crate::checks::check_layout`]).
    #[serde(skip)]
    pub layout: bool,
    /// The fuzz target that judges it, and how.
    #[serde(skip)]
    pub fuzz: Option<Fuzz>,
    /// The planted bug that must fail it ([`Proof`]). Optional in `rule!`, but `properties`'
    /// `proofs` test fails for a rule without one.
    #[serde(skip)]
    pub proof: Option<Proof>,
}

impl PartialEq for Rule {
    fn eq(&self, other: &Self) -> bool {
        (self.id, self.invariant, self.statement) == (other.id, other.invariant, other.statement)
    }
}

impl Eq for Rule {}

/// How a rule came out.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Status {
    /// The rule holds.
    Ok,
    /// The rule is broken.
    Violated,
    /// The data lacks what the rule needs.
    Skipped,
}

/// One rule applied to one view: the report entry.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Outcome {
    /// The rule's id (`id` in JSON, as reports always named it).
    #[serde(rename = "id")]
    pub rule: &'static str,
    /// The invariant it belongs to.
    pub invariant: Invariant,
    /// How it came out.
    pub status: Status,
    /// What holds, why it was skipped, or the violation on one line.
    pub detail: String,
    /// The violation, when violated.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub violation: Option<Violation>,
    /// Facts worth knowing that are not violations.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub notes: Vec<String>,
}

impl Rule {
    /// A violation of this rule, with the rule's statement as its text.
    pub fn violation(&self) -> Violation {
        Violation::new(self.invariant, self.statement).id(self.id)
    }

    /// The rule holds: `detail` says what was seen.
    pub fn ok(&self, detail: impl Into<String>) -> Outcome {
        self.outcome(Status::Ok, detail.into(), None)
    }

    /// The rule cannot run on this data: `why`.
    pub fn skipped(&self, why: impl Into<String>) -> Outcome {
        self.outcome(Status::Skipped, why.into(), None)
    }

    /// The rule is broken.
    pub fn violated(&self, v: Violation) -> Outcome {
        let v = v.id(self.id);
        self.outcome(Status::Violated, v.summary(), Some(v))
    }

    /// `Ok` as [`Rule::ok`], `Err` as [`Rule::violated`].
    pub fn from_checked(&self, c: Checked, ok: impl Into<String>) -> Outcome {
        match c {
            Ok(()) => self.ok(ok),
            Err(v) => self.violated(v),
        }
    }

    fn outcome(&self, status: Status, detail: String, violation: Option<Violation>) -> Outcome {
        Outcome {
            rule: self.id,
            invariant: self.invariant,
            status,
            detail,
            violation,
            notes: Vec::new(),
        }
    }
}

impl Outcome {
    /// Adds notes.
    pub fn with_notes(mut self, notes: Vec<String>) -> Self {
        self.notes.extend(notes);
        self
    }

    /// True when violated.
    pub fn is_violated(&self) -> bool {
        self.status == Status::Violated
    }
}

/// The first violation among `outcomes`, as the `Result` the property tests use.
///
/// # Errors
/// The violation of the first violated outcome.
///
/// # Example
/// ```
/// use rules::checks::{POSITION_IDS, first_violation};
/// let ok = [POSITION_IDS.ok("restart in every segment")];
/// assert!(first_violation(&ok).is_ok());
/// let bad = [POSITION_IDS.violated(POSITION_IDS.violation().expected(0).got(3))];
/// assert_eq!(first_violation(&bad).unwrap_err().id, "position-ids");
/// ```
pub fn first_violation(outcomes: &[Outcome]) -> Checked {
    match outcomes.iter().find_map(|o| o.violation.as_ref()) {
        Some(v) => Err(v.clone()),
        None => Ok(()),
    }
}

/// What a rule of one pack sees ([`crate::checks::check_batch`]): the view whose offsets hold,
/// its mock segments, and the run's options.
#[derive(Debug, Clone, Copy)]
pub struct BatchInput<'a, 'v> {
    /// The pack.
    pub view: &'a LayoutView<'v>,
    /// Which segments are mock ([`crate::checks::mock_segments`]).
    pub mock: &'a [bool],
    /// The run's options (CP size, causal, masked LM, the multiple to pad to).
    pub opts: &'a BatchOptions,
}

/// How a rule judges one pack: its outcome, or `None` when the run's options leave it out
/// (`label-targets` without `--causal`, `cp-shard` without `--cp-size`).
pub type BatchRun = for<'a, 'v> fn(&BatchInput<'a, 'v>) -> Option<Outcome>;

/// Where `thdcheck fuzz` judges a rule, and with what: the target whose answers it reads and
/// the function that judges one point of a run (`None`: the rule is reported by the function of
/// another rule of the same target, named in its doc). Each target runs its rules' functions in
/// registry order ([`judge_packer`](crate::checks::judge_packer),
/// [`judge_cp_split`](crate::checks::judge_cp_split),
/// [`judge_cp_loss`](crate::checks::judge_cp_loss),
/// [`judge_collator`](crate::checks::judge_collator)); a logged value is judged by the rule of
/// its [`LoggedKind`] ([`LoggedKind::rule`]). No target keeps a list of its own.
#[derive(Debug, Clone, Copy)]
pub enum Fuzz {
    /// `fuzz collator`, after `check`'s rules on the batch.
    Collator(Option<CollatorJudge>),
    /// `fuzz packer`, one-shot and sessions.
    Packer(Option<PackerJudge>),
    /// `fuzz cp-split`.
    CpSplit(Option<CpSplitJudge>),
    /// `fuzz loss`.
    CpLoss(Option<CpLossJudge>),
    /// `fuzz logger` and `thdcheck metrics --expect`: a logged value of this kind.
    Logged(LoggedKind),
    /// `fuzz attention`.
    Attention(Option<AttentionJudge>),
}

/// What `thdcheck fuzz` drives: the fuzz targets, one per kind of adapter, as the command line
/// names them (`cp-split`; with the `clap` feature, a `clap::ValueEnum`) and as [`Fuzz`] assigns
/// them their rules ([`rules_of`](crate::checks::rules_of)).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "clap", derive(clap::ValueEnum))]
pub enum FuzzTarget {
    /// A packer: examples with lengths in, packs of ids out.
    Packer,
    /// A collator: examples' tokens in, a batch (the keys a dumped file has) out.
    Collator,
    /// A throughput logger: a step's micro-batches (with model, CP, DP, GPUs, step time) in,
    /// the values it would log (record names of `thdcheck metrics`) out.
    Logger,
    /// A CP-local loss: one global batch as every rank's shard (zigzag, or contiguous with
    /// --cp-layout; f64 logits, labels rolled before the split), at cp 1, 2, 4 and 8, in; the
    /// reported loss (and optionally each rank's Σ NLL and count, and the valid-token count it
    /// logs) out.
    Loss,
    /// A CP splitter: a packed batch and a CP size in, every rank's input_ids, labels and
    /// position_ids out (zigzag, or contiguous with --cp-layout; labels rolled before the
    /// split), or a refusal.
    CpSplit,
    /// A packed attention: q, k, v of a packed layout (offsets, padded offsets, position ids;
    /// with --cp-size every zigzag rank's shard) in the --dtype, causal or not, in; the output
    /// (and optionally the log-sum-exp) out, judged against the oracle's f64 attention per
    /// document.
    Attention,
}

impl Fuzz {
    /// The target that judges it.
    pub fn target(&self) -> FuzzTarget {
        match self {
            Fuzz::Collator(_) => FuzzTarget::Collator,
            Fuzz::Packer(_) => FuzzTarget::Packer,
            Fuzz::CpSplit(_) => FuzzTarget::CpSplit,
            Fuzz::CpLoss(_) => FuzzTarget::Loss,
            Fuzz::Logged(_) => FuzzTarget::Logger,
            Fuzz::Attention(_) => FuzzTarget::Attention,
        }
    }
}

/// Declares rules as constants, each with its doc comment: `NAME = "id", Invariant, "statement"`,
/// then what applies of `batch:` (how it judges one pack, a [`BatchRun`]), `layout: true` (part
/// of LAYOUT on a pack alone), `fuzz:` (a [`Fuzz`]) and `proof:` (a [`Proof`]). A family file
/// declares its rules with it, next to their judges; the registry
/// ([`RULES`](crate::checks::RULES)) lists them.
macro_rules! rule {
    (@some) => {
        None
    };
    (@some $e:expr) => {
        Some($e)
    };
    (@batch) => {
        None
    };
    (@batch $run:expr) => {
        Some($run as $crate::checks::rule::BatchRun)
    };
    ($($(#[$doc:meta])* $name:ident = $id:literal, $inv:ident, $statement:literal
        $(, batch: $batch:expr)? $(, layout: $layout:literal)? $(, fuzz: $fuzz:expr)?
        $(, proof: $proof:expr)?;)*) => {
        $(
            $(#[$doc])*
            pub const $name: $crate::checks::rule::Rule = $crate::checks::rule::Rule {
                id: $id,
                invariant: $crate::Invariant::$inv,
                statement: $statement,
                batch: $crate::checks::rule::rule!(@batch $($batch)?),
                layout: false $(|| $layout)?,
                fuzz: $crate::checks::rule::rule!(@some $($fuzz)?),
                proof: $crate::checks::rule::rule!(@some $($proof)?),
            };
        )*
    };
}
pub(crate) use rule;
