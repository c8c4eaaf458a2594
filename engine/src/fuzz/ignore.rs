//! `--ignore CLASS`: the failure classes a run lets pass. An ignored check is dropped from a
//! violation (which passes when none is left), an ignored kind passes, so that the next class is
//! the one shrunk; what was let pass is counted per class for the report.

use std::collections::BTreeMap;

use super::Failure;

/// What an adapter can do besides breaking a rule: the failure kinds `--ignore` may name.
pub const FAILURE_KINDS: &[&str] =
    &["violation", "adapter-error", "crash", "hang", "too-long", "not-json", "schema", "flaky"];

/// Checks every `--ignore` value against the failure kinds and the rule registry: a kind
/// (`crash`), a rule id (`dpo-offsets`), or a kind and a rule id (`violation dpo-offsets`). A
/// misspelt class would otherwise ignore nothing, silently.
///
/// # Errors
/// The first value that names neither, with what may be named.
pub fn check_ignore(values: &[String]) -> anyhow::Result<()> {
    let rule = |id: &str| rules::checks::RULES.iter().any(|r| r.id == id);
    for value in values {
        let known = match value.split_once(' ') {
            Some((kind, id)) => FAILURE_KINDS.contains(&kind) && rule(id),
            None => FAILURE_KINDS.contains(&value.as_str()) || rule(value),
        };
        if !known {
            let ids: Vec<&str> = rules::checks::RULES.iter().map(|r| r.id).collect();
            anyhow::bail!(
                "--ignore {value:?}: not a failure kind ({}) nor a rule id ({}), nor a kind and \
                 a rule id (`violation dpo-offsets`)",
                FAILURE_KINDS.join(", "),
                ids.join(", ")
            );
        }
    }
    Ok(())
}

/// The classes `--ignore` names, applied to each case's judgement.
pub(super) struct IgnoreFilter<'a> {
    classes: &'a [String],
    /// What `--ignore` let pass, per class: a passing run says how many answers it did not
    /// judge.
    pub(super) ignored: BTreeMap<String, u64>,
}

impl<'a> IgnoreFilter<'a> {
    /// The filter of the `--ignore` values `classes` (checked by [`check_ignore`]).
    pub(super) fn new(classes: &'a [String]) -> Self {
        Self { classes, ignored: BTreeMap::new() }
    }

    fn is_ignored(&self, kind: &str, check: Option<&str>) -> bool {
        self.classes
            .iter()
            .any(|c| *c == kind || check.is_some_and(|k| *c == k || *c == format!("{kind} {k}")))
    }

    /// A case's judgement with the ignored classes let pass.
    pub(super) fn judge(&mut self, judged: Result<(), Failure>) -> Result<(), Failure> {
        judged.or_else(|f| self.unignored(f).map_or(Ok(()), Err))
    }

    /// What is left of `f` once the ignored checks are dropped, or `None` (counted) when
    /// nothing is.
    pub(super) fn unignored(&mut self, mut f: Failure) -> Option<Failure> {
        let class = f.signature().to_string();
        let kept = if f.checks.is_empty() {
            (!self.is_ignored(f.kind, None)).then_some(f)
        } else {
            f.checks.retain(|k| !self.is_ignored(f.kind, Some(k)));
            // The detail has a line per violated check, `check: …`: keep the kept checks' lines.
            let kept: Vec<&str> = f
                .detail
                .lines()
                .filter(|l| {
                    l.split_once(':').is_none_or(|(k, _)| !self.is_ignored(f.kind, Some(k)))
                })
                .collect();
            if !kept.is_empty() {
                f.detail = kept.join("\n");
            }
            (!f.checks.is_empty()).then_some(f)
        };
        if kept.is_none() {
            *self.ignored.entry(class).or_default() += 1;
        }
        kept
    }
}

#[cfg(test)]
mod tests {
    use super::check_ignore;

    #[test]
    fn ignore_names_a_kind_a_rule_or_both() {
        let ok = |v: &str| check_ignore(&[v.to_owned()]);
        for v in
            ["crash", "adapter-error", "cp-loss-finite", "violation dpo-offsets", "batch-readable"]
        {
            assert!(ok(v).is_ok(), "{v}");
        }
        for v in ["crsh", "cp loss", "cp-loss", "violation nope", "nope dpo-offsets", ""] {
            let e = ok(v).unwrap_err().to_string();
            assert!(e.contains(&format!("--ignore {v:?}")) && e.contains("crash"), "{e}");
        }
    }
}
