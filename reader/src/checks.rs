//! What `thdcheck check` runs on a file: the rules of `rules::checks`, nothing of its own.
//!
//! A pack's [`crate::pack::BatchData::view`] goes to [`rules::checks::check_batch`]; a DPO
//! file's concatenation to [`rules::checks::dpo_offsets`] and
//! [`rules::checks::dpo_concat`]. The rule ids, their invariants and functions are listed
//! in `properties/README.md`.

use rules::checks::{
    BatchFacts, BatchOptions, DpoConcat, Outcome, check_batch, dpo_concat, dpo_offsets,
};
use serde::Serialize;

use crate::pack::BatchData;

pub use rules::checks::Status;

/// What the user states that the file cannot: the options of the batch rules.
pub type CheckOptions = BatchOptions;

/// Fills what the command line left unset from the file's `__metadata__`: `cp_size`
/// (when there is no `cp_rank`: a full batch meant for that CP size) and
/// `pad_to_multiple_of`, as `save_file(batch, path, metadata={"cp_size": "2"})` writes them.
///
/// # Errors
/// [`crate::Error::Value`] for a value that is not a positive integer.
pub fn with_metadata(
    mut opts: CheckOptions,
    meta: &std::collections::BTreeMap<String, String>,
) -> crate::Result<CheckOptions> {
    let get = |key: &str| -> crate::Result<Option<usize>> {
        match meta.get(key) {
            None => Ok(None),
            Some(v) => match v.trim().parse::<usize>() {
                Ok(n) if n > 0 && n <= rules::MAX_CP_SIZE as usize => Ok(Some(n)),
                _ => Err(crate::Error::Value {
                    key: format!("__metadata__.{key}"),
                    index: 0,
                    value: v.clone(),
                    expected: concat!("an integer in 1..=", rules::max_cp_size!()),
                }),
            },
        }
    };
    if opts.cp_size.is_none() && !meta.contains_key("cp_rank") {
        opts.cp_size = get("cp_size")?;
    }
    if opts.pad_to_multiple_of.is_none() {
        opts.pad_to_multiple_of = get("pad_to_multiple_of")?;
    }
    if let Some(v) = meta.get("causal") {
        opts.causal |= matches!(v.trim(), "1" | "true" | "True");
    }
    // `mlm = true` (or an encoder stated `causal = false`): labels are not shifted targets.
    let flag = |key: &str, want: &[&str]| meta.get(key).is_some_and(|v| want.contains(&v.trim()));
    opts.masked_lm |= flag("mlm", &["1", "true", "True"])
        || flag("causal", &["0", "false", "False"])
        || flag("objective", &["mlm"]);
    Ok(opts)
}

/// Fills what neither the command line nor the metadata stated from the profile: its
/// `attention` (causal: useful work is the triangle) and an `mlm` objective or bidirectional
/// attention (labels are targets at their own position).
pub fn with_profile(
    mut opts: CheckOptions,
    profile: Option<&crate::profile::Profile>,
) -> CheckOptions {
    use crate::formats::Objective;
    use crate::profile::Attention;
    let Some(p) = profile else { return opts };
    if opts.causal || opts.masked_lm {
        return opts;
    }
    match (p.attention, p.objective) {
        (_, Some(Objective::Mlm)) | (Some(Attention::Bidirectional), _) => opts.masked_lm = true,
        (Some(Attention::Causal), _) => opts.causal = true,
        _ => {}
    }
    opts
}

/// The facts and rule outcomes of one pack.
#[derive(Debug, Clone, Serialize)]
pub struct PackReport {
    /// Part of the file (`chosen`, ...), if any.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub part: Option<String>,
    /// Layout facts.
    pub facts: BatchFacts,
    /// Every rule outcome, in a fixed order.
    pub checks: Vec<Outcome>,
    /// Things worth knowing that are not violations: the reader's and the rules'.
    pub notes: Vec<String>,
    /// What a picture of the pack needs beyond the facts, when asked for
    /// ([`crate::ReadOptions::picture`]); not in the JSON report.
    #[serde(skip)]
    pub picture: Option<crate::picture::PackPicture>,
}

/// Runs every batch rule on one pack.
pub fn check_pack(pack: &BatchData, opts: &CheckOptions) -> PackReport {
    let sides = pack.side_views();
    let mut view = pack.view();
    view.side_tensors = &sides;
    let report = check_batch(&view, opts);
    let mut notes = pack.notes.clone();
    notes.extend(report.outcomes.iter().flat_map(|o| o.notes.iter().cloned()));
    PackReport {
        part: pack.part.clone(),
        facts: report.facts,
        checks: report.outcomes,
        notes,
        picture: None,
    }
}

/// A CP group whose ranks do not hold the pack their global offsets address: only the offsets
/// and what each rank holds can be judged, by the `cp-shard` rule. A zigzag split that lost
/// tokens is judged on a view of the global layout ([`rules::checks::cp_shard`]); contiguous
/// pieces that overlap, leave a gap or are unequal by what each rank holds
/// ([`rules::checks::contiguous_group`]).
pub fn lost_tokens_report(
    global: &crate::shards::SplitOffsets,
    cp: usize,
    key: &str,
) -> PackReport {
    use rules::checks::ShardLayout;
    let offsets = global.offsets.as_slice();
    let tokens = offsets.last().map_or(0, |&t| t.max(0) as usize);
    let facts =
        BatchFacts { tokens, segments: offsets.len().saturating_sub(1), ..Default::default() };
    if global.layout != ShardLayout::Zigzag {
        let held: Vec<String> = global.held.iter().map(usize::to_string).collect();
        return PackReport {
            part: Some(format!("{cp} ranks, contiguous, offsets and counts only")),
            facts,
            checks: vec![rules::checks::contiguous_group(offsets, &global.held, key)],
            picture: None,
            notes: vec![format!(
                "contiguous CP split: the ranks hold {} tokens, not {cp} equal pieces of the {tokens} \
                 their offsets address, so the pack is not reassembled and only the split is checked",
                held.join(" + ")
            )],
        };
    }
    let keys = rules::checks::KeyNames { cu_seqlens: key.to_owned(), ..Default::default() };
    let view = rules::checks::LayoutView {
        num_tokens: tokens,
        cu_seqlens: rules::checks::IntSlice::from(offsets),
        keys: Some(&keys),
        ..Default::default()
    };
    let outcome = rules::checks::cp_shard(&view, cp);
    PackReport {
        part: Some(format!("{cp} ranks, offsets only")),
        facts,
        checks: vec![outcome],
        picture: None,
        notes: vec![format!(
            "the ranks hold fewer tokens than their offsets address ({tokens}): tokens were lost \
             in the split, so only the offsets are checked"
        )],
    }
}

/// A pack whose offsets the `offsets` rule refuses (past the token count, decreasing, not
/// starting at 0): nothing else can address its tokens, so that rule alone is reported, as the
/// violation of a batch that contradicts itself (exit 1), not as a file that cannot be read.
pub fn broken_offsets_report(key: &str, values: &[i64], tokens: usize) -> PackReport {
    let keys = rules::checks::KeyNames { cu_seqlens: key.to_owned(), ..Default::default() };
    let view = rules::checks::LayoutView {
        num_tokens: tokens,
        cu_seqlens: rules::checks::IntSlice::from(values),
        keys: Some(&keys),
        ..Default::default()
    };
    let facts =
        BatchFacts { tokens, segments: values.len().saturating_sub(1), ..Default::default() };
    PackReport {
        part: None,
        facts,
        checks: vec![rules::checks::offsets(&view)],
        picture: None,
        notes: vec![format!(
            "`{key}` does not address the {tokens} tokens: only the offsets are checked"
        )],
    }
}

/// The DPO rules of a file: offsets and concatenated tensors.
pub fn dpo_outcomes(dpo: &DpoConcat) -> Vec<Outcome> {
    std::iter::once(dpo_offsets(dpo)).chain(dpo_concat(dpo)).collect()
}
