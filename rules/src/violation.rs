//! [`Violation`]: what a check returns when an invariant does not hold.
//!
//! A violation names the invariant, the rule inside it, where it broke (segment, token, CP rank,
//! example id, pack, ...), and what was expected against what was found, so that a failing
//! property, a dumped Python batch and a subprocess adapter all print the same readable line.

use std::fmt;

use serde::Serialize;

/// The invariants of the gate (the table in `DESIGN.md`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "SCREAMING-KEBAB-CASE")]
pub enum Invariant {
    /// Offsets, position ids and boundary labels of a packed batch.
    Layout,
    /// THD attention equals the per-sequence BSHD oracle; segments are isolated.
    Attn,
    /// The packed loss equals the oracle's cross-entropy; all-ignored gives 0.
    Loss,
    /// CP-local (or micro-batch) sums reassemble the global loss.
    CpLoss,
    /// Zigzag shards cover every real token once; labels rolled before the split.
    CpShard,
    /// Useful attention work ≤ hardware work, equal exactly without padding.
    Work,
    /// Useful FLOPs and MFU are unchanged by any padding; hardware ≥ useful; MFU ≤ 100 %.
    MfuPad,
    /// Token counts and ratio metrics are the same for every CP size.
    TokensCp,
    /// Packers emit exactly what they were given, within capacity, deterministically.
    Packer,
    /// DPO concatenation keeps every segment on its own example's tokens.
    Dpo,
    /// FLOPs scale with real Σs and Σs², add over micro-batches, BSHD falls back to mbs·S².
    Flops,
}

impl Invariant {
    /// Every invariant, in the order of the design table.
    pub const ALL: [Invariant; 11] = [
        Invariant::Layout,
        Invariant::Attn,
        Invariant::Loss,
        Invariant::CpLoss,
        Invariant::CpShard,
        Invariant::Work,
        Invariant::MfuPad,
        Invariant::TokensCp,
        Invariant::Packer,
        Invariant::Dpo,
        Invariant::Flops,
    ];

    /// The id used in the design table and in messages: `LAYOUT`, `CP-LOSS`, ...
    ///
    /// # Example
    /// ```
    /// use rules::Invariant;
    /// assert_eq!(Invariant::MfuPad.id(), "MFU-PAD");
    /// ```
    pub fn id(self) -> &'static str {
        match self {
            Invariant::Layout => "LAYOUT",
            Invariant::Attn => "ATTN",
            Invariant::Loss => "LOSS",
            Invariant::CpLoss => "CP-LOSS",
            Invariant::CpShard => "CP-SHARD",
            Invariant::Work => "WORK",
            Invariant::MfuPad => "MFU-PAD",
            Invariant::TokensCp => "TOKENS-CP",
            Invariant::Packer => "PACKER",
            Invariant::Dpo => "DPO",
            Invariant::Flops => "FLOPS",
        }
    }
}

impl Invariant {
    /// What the invariant demands, in one line (the README's table of invariants).
    ///
    /// # Example
    /// ```
    /// use rules::Invariant;
    /// assert!(Invariant::Work.statement().starts_with("Σ real sᵢ²"));
    /// ```
    pub fn statement(self) -> &'static str {
        match self {
            Invariant::Layout => {
                "offsets valid and int32, padded ≥ real, position ids restart, no cross-document label"
            }
            Invariant::Attn => {
                "THD attention = oracle BSHD attention at every real token (f64, 1e-12); isolation"
            }
            Invariant::Loss => {
                "packed loss = oracle per-sequence cross-entropy; all-ignored gives 0"
            }
            Invariant::CpLoss => {
                "CP-local sums reassemble the global loss for cp ∈ {1,2,4,8} (rel. 1e-12)"
            }
            Invariant::CpShard => {
                "zigzag shards cover every token once; roll before split; no truncation"
            }
            Invariant::Work => "Σ real sᵢ² ≤ hardware work, equal exactly without padding",
            Invariant::MfuPad => "useful FLOPs/MFU bit-identical with and without any padding",
            Invariant::TokensCp => "token counts and ratio metrics identical for every cp",
            Invariant::Packer => {
                "nothing dropped or duplicated over epochs (a carry across an epoch boundary \
                 included), capacity (padded, per row, sequences per pack), even dealing over \
                 ranks, refusals only of what cannot fit, determinism, FFD ≤ 11/9·OPT + 6/9"
            }
            Invariant::Dpo => "each concatenated segment points at its own example's tokens",
            Invariant::Flops => {
                "Σsᵢ, Σsᵢ² from real lengths of every row; BSHD fallback bit-exact; additive"
            }
        }
    }
}

impl fmt::Display for Invariant {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.id())
    }
}

/// Where a violation happened. Every field is optional; [`fmt::Display`] prints the ones set,
/// outermost first (`cp=2, rank 1, segment 0, token 5`).
///
/// # Example
/// ```
/// use rules::Location;
/// let at = Location::default().cp(4).rank(3).segment(1).token(17);
/// assert_eq!(at.to_string(), "cp=4, rank 3, segment 1, token 17");
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Location {
    /// What produced the data: a padding variant, a micro-batch split, a packer run...
    #[serde(skip_serializing_if = "Option::is_none")]
    pub context: Option<String>,
    /// The CP size.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cp: Option<usize>,
    /// The CP rank (or the micro-batch, for a micro-batch split).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rank: Option<usize>,
    /// The epoch of a packer run.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub epoch: Option<usize>,
    /// The pack (row) index.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pack: Option<usize>,
    /// The example id (dataset index).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub example: Option<u64>,
    /// The segment index within a pack.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub segment: Option<usize>,
    /// The flat token index (storage order) within a pack, or within a rank's shard when
    /// `rank` is set.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub token: Option<usize>,
    /// The attention head.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub head: Option<usize>,
    /// The key (tensor name) of a batch file at fault, as the user's file spells it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub key: Option<String>,
}

macro_rules! setter {
    ($name:ident, $t:ty) => {
        #[doc = concat!("Sets `", stringify!($name), "`.")]
        pub fn $name(mut self, v: $t) -> Self {
            self.$name = Some(v);
            self
        }
    };
}

impl Location {
    setter!(cp, usize);
    setter!(rank, usize);
    setter!(epoch, usize);
    setter!(pack, usize);
    setter!(example, u64);
    setter!(segment, usize);
    setter!(token, usize);
    setter!(head, usize);

    /// Sets the key (tensor name) at fault.
    pub fn key(mut self, v: impl Into<String>) -> Self {
        self.key = Some(v.into());
        self
    }

    /// Sets the context (what produced the data).
    pub fn context(mut self, v: impl Into<String>) -> Self {
        self.context = Some(v.into());
        self
    }

    /// True when no field is set.
    pub fn is_empty(&self) -> bool {
        *self == Self::default()
    }
}

impl fmt::Display for Location {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut parts: Vec<String> = Vec::new();
        if let Some(c) = &self.context {
            parts.push(c.clone());
        }
        if let Some(v) = self.cp {
            parts.push(format!("cp={v}"));
        }
        let named = [
            ("rank", self.rank.map(|v| v as u64)),
            ("epoch", self.epoch.map(|v| v as u64)),
            ("pack", self.pack.map(|v| v as u64)),
            ("example", self.example),
            ("segment", self.segment.map(|v| v as u64)),
            ("token", self.token.map(|v| v as u64)),
            ("head", self.head.map(|v| v as u64)),
        ];
        parts.extend(named.iter().filter_map(|(k, v)| v.map(|v| format!("{k} {v}"))));
        if let Some(k) = &self.key {
            parts.push(format!("`{k}`"));
        }
        f.write_str(&parts.join(", "))
    }
}

/// A broken invariant: which one, which rule, where, expected vs got.
///
/// # Example
/// ```
/// use rules::Location;
/// use rules::checks::POSITION_IDS;
/// let v = POSITION_IDS.violation().at(Location::default().segment(1).token(3)).expected(0).got(3);
/// assert_eq!(v.id, "position-ids");
/// assert_eq!(
///     v.to_string(),
///     "LAYOUT: position ids restart at each segment start\n  at: segment 1, token 3\n  expected: 0\n  got: 3"
/// );
/// ```
///
/// Only `rules` builds one (`Violation::new` is crate-private and the struct cannot be
/// written literally elsewhere): a verdict outside this crate comes from a registered rule's
/// [`crate::checks::Rule::violation`] or a `check_*` function, never from a caller's own code.
/// These two doc tests prove it by failing to compile:
///
/// ```compile_fail
/// let v = rules::Violation::new(rules::Invariant::Layout, "a verdict of my own");
/// ```
///
/// ```compile_fail
/// let v = rules::Violation {
///     id: "",
///     invariant: rules::Invariant::Layout,
///     rule: String::from("a verdict of my own"),
///     at: Box::default(),
///     expected: String::new(),
///     got: String::new(),
///     note: None,
/// };
/// ```
#[derive(Debug, Clone, PartialEq, Serialize)]
#[non_exhaustive]
pub struct Violation {
    /// The id of the rule (`position-ids`, `packer-conservation`, ...; see
    /// [`crate::checks::RULES`]), empty for a check that has no rule id of its own.
    #[serde(skip_serializing_if = "str::is_empty")]
    pub id: &'static str,
    /// The invariant.
    pub invariant: Invariant,
    /// The rule within the invariant, in words.
    pub rule: String,
    /// Where (boxed: keeps `Result<(), Violation>` small).
    pub at: Box<Location>,
    /// What the invariant requires.
    pub expected: String,
    /// What the data says.
    pub got: String,
    /// Extra context (the numbers behind the values, the likely cause).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub note: Option<Box<str>>,
}

impl Violation {
    /// A violation of `rule` of `invariant`, with no location or values yet (crate-private:
    /// callers get violations from the rules).
    pub(crate) fn new(invariant: Invariant, rule: impl Into<String>) -> Self {
        Self {
            id: "",
            invariant,
            rule: rule.into(),
            at: Box::default(),
            expected: String::new(),
            got: String::new(),
            note: None,
        }
    }

    /// [`Violation::new`] for the property tests and subjects of `properties`, which judge
    /// pipelines outside any registered rule (a pipeline that refuses a valid input). Hidden:
    /// a test refuses it in every crate but `properties` (`cli/tests/cli/registry.rs`).
    #[doc(hidden)]
    pub fn for_property_tests(invariant: Invariant, rule: impl Into<String>) -> Self {
        Self::new(invariant, rule)
    }

    /// Replaces the rule text (a rule whose statement has several parts names the part).
    pub fn rule_text(mut self, rule: impl Into<String>) -> Self {
        self.rule = rule.into();
        self
    }

    /// Sets the rule id.
    pub fn id(mut self, id: &'static str) -> Self {
        self.id = id;
        self
    }

    /// Sets the location.
    pub fn at(mut self, at: Location) -> Self {
        self.at = Box::new(at);
        self
    }

    /// Sets the expected value.
    pub fn expected(mut self, v: impl fmt::Display) -> Self {
        self.expected = v.to_string();
        self
    }

    /// Sets the value found.
    pub fn got(mut self, v: impl fmt::Display) -> Self {
        self.got = v.to_string();
        self
    }

    /// Adds a note.
    pub fn note(mut self, v: impl Into<String>) -> Self {
        self.note = Some(v.into().into_boxed_str());
        self
    }

    /// Adds `context` to the location (prefixing an existing one).
    pub fn within(mut self, context: impl fmt::Display) -> Self {
        self.at.context = Some(match self.at.context.take() {
            Some(c) => format!("{context}, {c}"),
            None => context.to_string(),
        });
        self
    }

    /// Sets the CP size of the location.
    pub fn with_cp(mut self, cp: usize) -> Self {
        self.at.cp = Some(cp);
        self
    }
}

impl Violation {
    /// The violation on one line, for a report row: where, expected, got and the note.
    ///
    /// # Example
    /// ```
    /// use rules::Location;
    /// use rules::checks::POSITION_IDS;
    /// let v = POSITION_IDS
    ///     .violation()
    ///     .at(Location::default().segment(1).token(4).key("position_ids"))
    ///     .expected(0)
    ///     .got(4);
    /// assert_eq!(v.summary(), "segment 1, token 4, `position_ids`: expected 0, got 4");
    /// ```
    pub fn summary(&self) -> String {
        let mut s = String::new();
        if !self.at.is_empty() {
            s = format!("{}: ", self.at);
        }
        match (self.expected.is_empty(), self.got.is_empty()) {
            (false, false) => s += &format!("expected {}, got {}", self.expected, self.got),
            (false, true) => s += &format!("expected {}", self.expected),
            (true, false) => s += &self.got,
            (true, true) => s += &self.rule,
        }
        if let Some(n) = &self.note {
            s += &format!(" — {n}");
        }
        s
    }
}

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.invariant, self.rule)?;
        if !self.at.is_empty() {
            write!(f, "\n  at: {}", self.at)?;
        }
        if !self.expected.is_empty() {
            write!(f, "\n  expected: {}", self.expected)?;
        }
        if !self.got.is_empty() {
            write!(f, "\n  got: {}", self.got)?;
        }
        if let Some(n) = &self.note {
            write!(f, "\n  note: {n}")?;
        }
        Ok(())
    }
}

impl std::error::Error for Violation {}

/// The result of a check: `Ok(())` or the first violation found.
pub type Checked = Result<(), Violation>;

/// Relative difference `|a − b| / max(|b|, tiny)`, with NaN when either is NaN.
pub(crate) fn rel_diff(a: f64, b: f64) -> f64 {
    if a.is_nan() || b.is_nan() {
        return f64::NAN;
    }
    if a == b {
        return 0.0;
    }
    (a - b).abs() / b.abs().max(f64::MIN_POSITIVE)
}

/// True when `a` and `b` agree to relative error `rtol` (both finite, or bit-identical).
pub(crate) fn close(a: f64, b: f64, rtol: f64) -> bool {
    a == b || (a.is_finite() && b.is_finite() && rel_diff(a, b) <= rtol)
}

/// What one driver did over its cases.
#[derive(Debug, Clone)]
pub enum Verdict {
    /// Every case held.
    Held,
    /// A case failed: the shrunk case (`{:#?}`) and its violation.
    Failed {
        /// The minimal failing case, pretty-printed.
        case: String,
        /// The violation it produces.
        violation: Violation,
    },
    /// The runner gave up (too many rejected cases): a strategy bug.
    Aborted(String),
}
