//! What every format reads the same way: per-token tensors, offsets, scalars, masks, labels
//! under a loss mask, the profile's renames and the CP shard a file states.

use rules::checks::IntSlice;
use rules::contract::{Contract, KeyOffsetsFact, LabelsFact, LossMaskFact};
use thd::LabelConvention;

use super::Dialect;
use crate::pack::{BatchData, validate_offsets};
use crate::profile::Profile;
use crate::tensors::{BatchFile, Column, Ints};
use crate::{Error, Result};
use rules::words::plural;

pub(super) fn missing(file: &BatchFile, key: &str, dialect: Dialect) -> Error {
    let keys: Vec<&str> = file.keys().collect();
    Error::MissingKey {
        key: key.to_owned(),
        dialect: dialect.name(),
        hint: if keys.is_empty() {
            "; the file has no tensors".into()
        } else {
            format!("; the file has {keys:?}: rename one with --map KEY={key}")
        },
    }
}

/// Reads a per-token tensor: shape `[T]` or `[B, S]`; returns `(rows, values)`.
pub(super) fn token_tensor(file: &BatchFile, key: &str) -> Result<(usize, Vec<i64>)> {
    let t = file.ints(key)?;
    let rows = token_rows(key, &t.shape)?;
    Ok((rows, t.values))
}

/// [`token_tensor`], read in place where the file allows ([`Column`]).
pub(super) fn token_column(file: &BatchFile, key: &str) -> Result<(usize, Column)> {
    let (shape, values) = file.column(key)?;
    let rows = token_rows(key, &shape)?;
    Ok((rows, values))
}

pub(super) fn token_rows(key: &str, shape: &[usize]) -> Result<usize> {
    match shape {
        [_] => Ok(1),
        // Rows of zero tokens carry nothing, and B comes from the header alone: a header
        // claiming [2^62, 0] must not make the reader allocate per row.
        [b, 0] if *b > 1 => Err(Error::Shape {
            key: key.to_owned(),
            shape: shape.to_vec(),
            expected: "[T] or [B, S] with S ≥ 1 when B > 1 (rows of zero tokens)".into(),
        }),
        [b, _] => Ok(*b),
        _ => Err(Error::Shape {
            key: key.to_owned(),
            shape: shape.to_vec(),
            expected: "[T] or [B, S] (one value per token)".into(),
        }),
    }
}

pub(super) fn same_tokens(key: &str, len: usize, reference: &str, tokens: usize) -> Result<()> {
    if len == tokens {
        Ok(())
    } else {
        Err(Error::CountMismatch {
            key: key.to_owned(),
            what: "tokens",
            got: len,
            reference: reference.to_owned(),
            expected: tokens,
        })
    }
}

/// An optional per-token integer tensor with the same token count as `input_ids`.
pub(super) fn opt_tokens(
    file: &BatchFile,
    key: &str,
    ids_key: &str,
    tokens: usize,
) -> Result<Option<Column>> {
    if !file.contains(key) {
        return Ok(None);
    }
    let (_, v) = token_column(file, key)?;
    same_tokens(key, v.len(), ids_key, tokens)?;
    Ok(Some(v))
}

/// An optional per-token integer tensor that must have one entry per token: read when it
/// does; when it has another count, left out of the pack and recorded as `(key, entries)` in
/// `counted`, for the `token-counts` rule to judge (a collator that builds position ids from the
/// length before truncation, ms-swift #5665's class). A wrong shape is still an error.
pub(super) fn counted_tokens(
    file: &BatchFile,
    key: &str,
    tokens: usize,
    counted: &mut Vec<(String, usize)>,
) -> Result<Option<Column>> {
    if !file.contains(key) {
        return Ok(None);
    }
    let (_, v) = token_column(file, key)?;
    if v.len() == tokens {
        Ok(Some(v))
    } else {
        counted.push((key.to_owned(), v.len()));
        Ok(None)
    }
}

/// An optional 0/1 mask; `invert` for padding masks (1 = pad).
pub(super) fn opt_mask(
    file: &BatchFile,
    key: &str,
    ids_key: &str,
    tokens: usize,
    invert: bool,
) -> Result<Option<Vec<bool>>> {
    if !file.contains(key) {
        return Ok(None);
    }
    let (shape, v) = file.mask(key)?;
    token_rows(key, &shape)?;
    same_tokens(key, v.len(), ids_key, tokens)?;
    Ok(Some(if invert { v.into_iter().map(|p| !p).collect() } else { v }))
}

/// Labels under a `loss_mask` (Megatron, Megatron-Bridge, AReaL: 1 = the label is trained):
/// the label of every token the mask leaves out counts as ignored (-100), since those stacks
/// keep a real token id there. Without labels, nothing to do.
pub(super) fn masked_labels(
    file: &BatchFile,
    labels: Option<Column>,
    ids_key: &str,
    tokens: usize,
    notes: &mut Vec<String>,
) -> Result<Option<Column>> {
    let key = "loss_mask";
    let mask = opt_mask(file, key, ids_key, tokens, false)?;
    let (Some(labels), Some(mask)) = (labels.as_ref(), mask) else { return Ok(labels) };
    if labels.ints().iter().zip(&mask).all(|(l, &m)| m || l == thd::IGNORE_INDEX) {
        // Nothing to rewrite: the labels stay in place.
        return Ok(Some(labels.clone()));
    }
    let mut labels = labels.clone().into_vec();
    let mut ignored = 0usize;
    for (l, &m) in labels.iter_mut().zip(&mask) {
        if !m && *l != thd::IGNORE_INDEX {
            *l = thd::IGNORE_INDEX;
            ignored += 1;
        }
    }
    notes.push(format!(
        "`{key}` leaves out {}: read as ignored (-100)",
        plural(ignored, "label that is a token id")
    ));
    Ok(Some(labels.into()))
}

/// Labels equal to `extra` (a second ignore value) read as -100.
pub(super) fn ignore_extra(labels: Option<Column>, extra: Option<i64>) -> Option<Column> {
    match (labels, extra) {
        (Some(l), Some(x)) if l.ints().iter().any(|v| v == x) => {
            let mut l = l.into_vec();
            l.iter_mut().filter(|v| **v == x).for_each(|v| *v = thd::IGNORE_INDEX);
            Some(l.into())
        }
        (l, _) => l,
    }
}

/// Without `labels`, AReaL's batches say what is trained with `loss_mask` alone, the targets
/// being the next tokens (`torch.roll(input_ids, -1)` in `compute_packed_sft_loss`). Before
/// AReaL `d58cca56f` the mask was per token and rolled by the loss (`unshifted`: `loss_mask[t]`
/// trains token `t` as a target); from it on, it is pre-rolled per row (`shifted`: it trains
/// the prediction at `t`). The fact `loss_mask` (metadata, profile; `labels` when stated) says
/// which; without it the labels stay unknown.
pub(super) fn labels_from_loss_mask(
    file: &BatchFile,
    pack: &mut BatchData,
    facts: &Contract,
) -> Result<()> {
    let Some(mask) = opt_mask(file, "loss_mask", "input_ids", pack.input_ids.len(), false)? else {
        return Ok(());
    };
    // The `labels` fact says it when `loss_mask` does not.
    let convention = match (facts.loss_mask, facts.labels.and_then(LabelsFact::convention)) {
        (Some(LossMaskFact::Unshifted), _) => LabelConvention::Unshifted,
        (Some(LossMaskFact::Shifted), _) => LabelConvention::Shifted,
        (None, Some(c)) => c,
        (None, None) => {
            pack.notes.push(
                "`loss_mask` without `labels`: state what it trains (the fact `loss_mask`, or \
                 --labels) to check the targets"
                    .into(),
            );
            return Ok(());
        }
    };
    let ids = pack.input_ids.ints();
    let labels: Vec<i64> = (0..ids.len())
        .map(|t| {
            let target = match convention {
                LabelConvention::Unshifted => Some(ids.at(t)),
                LabelConvention::Shifted => ids.get(t + 1),
            };
            target.filter(|_| mask[t]).unwrap_or(thd::IGNORE_INDEX)
        })
        .collect();
    pack.loss_mask_targets = Some(mask);
    pack.labels = Some(labels.into());
    pack.convention = convention;
    pack.keys.labels = "loss_mask (labels: the targets it trains)".into();
    Ok(())
}

/// Offsets: shape `[N]` or `[1, N]`, validated against `tokens`; trailing sentinel entries
/// (Automodel keeps them on the CP path) are stripped with a note. Read in place where the file
/// stores int32 / int64 ([`BatchFile::column`]): a batch of 10⁸ segments is not widened.
pub(super) fn offsets(
    file: &BatchFile,
    key: &str,
    tokens: usize,
    sentinel: Option<i64>,
    first_negative: bool,
    notes: &mut Vec<String>,
) -> Result<Column> {
    let (shape, mut values) = file.column(key)?;
    match shape.as_slice() {
        [_] | [1, _] => {}
        _ => {
            return Err(Error::Shape {
                key: key.to_owned(),
                shape,
                expected: "[B + 1] (one row per chunk is not supported: dump each chunk to its \
                           own file)"
                    .into(),
            });
        }
    }
    // Megatron-Bridge: `-1` past the offsets, and `{key}_argmin` the index of the first one.
    let argmin = format!("{key}_argmin");
    if let Some(a) = scalar(file, &argmin)? {
        let a =
            usize::try_from(a).ok().filter(|&a| a <= values.len()).ok_or_else(|| Error::Value {
                key: argmin.clone(),
                index: 0,
                value: a.to_string(),
                expected: "an index into the offsets",
            })?;
        if a < values.len() {
            notes.push(format!(
                "`{key}`: cut at `{argmin}` = {a} ({} sentinel entries, Megatron-Bridge)",
                values.len() - a
            ));
            values.truncate(a);
        }
    } else if first_negative && let Some(first) = values.ints().iter().position(|v| v < 0) {
        // Without the argmin, the profile's `offsets_end = "first-negative"` cuts at the first
        // negative entry (Megatron-Bridge's `gpt_step._trim_padded_cu_seqlens_for_cp`).
        notes.push(format!(
            "`{key}`: cut at its first negative entry, index {first} ({} sentinel entries; \
             the profile's offsets end there without `{argmin}`)",
            values.len() - first
        ));
        values.truncate(first);
    }
    if let Some(s) = sentinel {
        let keep = values.ints().iter().rposition(|v| v != s).map_or(0, |i| i + 1);
        if keep < values.len() {
            notes.push(format!(
                "`{key}`: {} trailing sentinel entries ({s}) ignored",
                values.len() - keep
            ));
            values.truncate(keep);
        }
    }
    validate_offsets(key, values.ints(), tokens)?;
    Ok(values)
}

/// A scalar: shape `[]` or `[1]`.
pub(super) fn scalar(file: &BatchFile, key: &str) -> Result<Option<i64>> {
    if !file.contains(key) {
        return Ok(None);
    }
    let Ints { shape, values } = file.ints(key)?;
    match (shape.as_slice(), values.as_slice()) {
        // Megatron-Bridge row-slices its batch, leaving `[1, 1]` scalars.
        (s, [v]) if s.iter().all(|&d| d == 1) => Ok(Some(*v)),
        _ => Err(Error::Shape {
            key: key.to_owned(),
            shape,
            expected: "a scalar ([], [1] or [1, 1])".into(),
        }),
    }
}

/// A count: a scalar that is not negative.
pub(super) fn count(file: &BatchFile, key: &str) -> Result<Option<usize>> {
    match scalar(file, key)? {
        Some(v) if v < 0 => Err(Error::Value {
            key: key.to_owned(),
            index: 0,
            value: v.to_string(),
            expected: "a count >= 0",
        }),
        v => Ok(v.map(|v| v as usize)),
    }
}

pub(super) fn first_present<'a>(file: &BatchFile, keys: &[&'a str]) -> Option<&'a str> {
    keys.iter().copied().find(|k| file.contains(k))
}

pub(super) fn padded_count(
    key: &str,
    padded: &Column,
    real_key: &str,
    real: &Column,
) -> Result<()> {
    if padded.len() == real.len() {
        Ok(())
    } else {
        Err(Error::CountMismatch {
            key: key.to_owned(),
            what: "offsets",
            got: padded.len(),
            reference: real_key.to_owned(),
            expected: real.len(),
        })
    }
}

/// How far a file's offsets may reach: its tokens, or for one CP rank's shard (whose offsets
/// may be global) anything an offset can be; the group's reassembly holds them to the tokens
/// the ranks hold together, and reports offsets past them as lost tokens (`cp-shard`).
pub(super) fn shard_bound(tokens: usize, scale: usize) -> usize {
    if scale > 1 { i32::MAX as usize } else { tokens }
}

/// How far key offsets may reach: as the query offsets, unless the keys reach back past this
/// batch's tokens by design (`key_offsets = "longer"`: a cached prefix), then anything an offset
/// can be (`qk-offsets` judges them against the queries).
pub(super) fn key_bound(tokens: usize, scale: usize, facts: &Contract) -> usize {
    if facts.key_offsets == Some(KeyOffsetsFact::Longer) {
        i32::MAX as usize
    } else {
        shard_bound(tokens, scale)
    }
}

/// Renames the stack's key names to the format's: first each `[map_when.KEY]` group whose key
/// is in the file (its renames read the original names together), then `map`. A rename whose
/// source is absent, or whose target is already in the file, is skipped: a profile describes
/// every file of its stack.
pub(super) fn apply_profile_map(
    file: &mut BatchFile,
    p: &Profile,
    notes: &mut Vec<String>,
) -> Result<Vec<String>> {
    let mut renamed = Vec::new();
    let mut groups: Vec<Vec<(&String, &String)>> = p
        .map_when
        .iter()
        .filter(|(when, _)| file.contains(when))
        .map(|(_, m)| m.iter().collect())
        .collect();
    groups.push(p.map.iter().collect());
    let mut missing = Vec::new();
    for group in groups {
        missing.extend(
            group.iter().filter(|(from, _)| !file.contains(from)).map(|(from, _)| (*from).clone()),
        );
        let moving: Vec<(&String, &String)> =
            group.into_iter().filter(|(from, _)| file.contains(from)).collect();
        let taken = |to: &str| file.contains(to) && !moving.iter().any(|(f, _)| f.as_str() == to);
        for (from, to) in moving.iter().filter(|(_, to)| taken(to)) {
            notes.push(format!(
                "profile `{}`: [map] {from} → {to} not applied: the file has its own `{to}`, \
                 read as it is",
                p.name
            ));
        }
        let moving: Vec<(&String, &String)> =
            moving.iter().copied().filter(|(_, to)| !taken(to)).collect();
        // Out of the way first, so that `a → b, b → c` reads the original `b`.
        for (i, (from, _)) in moving.iter().enumerate() {
            file.rename(from, &format!("\u{0}profile-map-{i}"))?;
        }
        for (i, (from, to)) in moving.iter().enumerate() {
            file.rename(&format!("\u{0}profile-map-{i}"), to)?;
            renamed.push(format!("{from} → {to}"));
        }
    }
    if !renamed.is_empty() {
        notes.push(format!("profile `{}`: read {}", p.name, renamed.join(", ")));
    }
    Ok(missing)
}

/// OLMo-core's `max_doc_lens` (one per row; the model passes their maximum to the kernel as
/// `max_doc_len`), or `None` without it.
pub(super) fn max_doc_len(file: &BatchFile, rows: usize) -> Result<Option<i64>> {
    let key = "max_doc_lens";
    if !file.contains(key) {
        return Ok(None);
    }
    let Ints { shape, values } = file.ints(key)?;
    if values.len() != rows {
        return Err(Error::Shape {
            key: key.to_owned(),
            shape,
            expected: format!("[B] with B = {rows}, one per row of input_ids"),
        });
    }
    Ok(values.into_iter().max())
}

/// The labels OLMo-core's train module derives (`olmo_core/data/utils.py` `get_labels`):
/// `input_ids`, -100 where `label_mask` is false, `attention_mask` is 0 or the row's
/// `instance_mask` is false, shifted left within each row by the loss (unshifted here).
pub(super) fn derived_input_labels(
    file: &BatchFile,
    input_ids: IntSlice<'_>,
    rows: usize,
    notes: &mut Vec<String>,
) -> Result<Vec<i64>> {
    let tokens = input_ids.len();
    let mut labels = input_ids.to_vec();
    for key in ["label_mask", "attention_mask"] {
        if let Some(m) = opt_mask(file, key, "input_ids", tokens, false)? {
            labels.iter_mut().zip(m).filter(|(_, m)| !m).for_each(|(l, _)| *l = thd::IGNORE_INDEX);
        }
    }
    let key = "instance_mask";
    if file.contains(key) {
        let (shape, m) = file.mask(key)?;
        if m.len() != rows {
            return Err(Error::Shape {
                key: key.to_owned(),
                shape,
                expected: format!("[B] with B = {rows}, one per row of input_ids"),
            });
        }
        let width = tokens.checked_div(rows).unwrap_or(0);
        for (r, _) in m.iter().enumerate().filter(|(_, m)| !**m) {
            labels[r * width..(r + 1) * width].fill(thd::IGNORE_INDEX);
        }
    }
    notes.push(
        "no labels: derived from input_ids as OLMo-core's get_labels does (label_mask, \
         attention_mask and instance_mask read as -100; shifted within each row)"
            .into(),
    );
    Ok(labels)
}

/// `(cp_rank, cp_size)` from `cp_rank` / `cp_size` tensors or `__metadata__` entries.
pub(super) fn cp_shard(file: &BatchFile) -> Result<Option<(usize, usize)>> {
    let get = |key: &str| -> Result<Option<i64>> {
        if let Some(v) = scalar(file, key)? {
            return Ok(Some(v));
        }
        match file.metadata().get(key) {
            Some(s) => s.trim().parse::<i64>().map(Some).map_err(|_| Error::Value {
                key: format!("__metadata__.{key}"),
                index: 0,
                value: s.clone(),
                expected: "an integer",
            }),
            None => Ok(None),
        }
    };
    match (get("cp_rank")?, get("cp_size")?) {
        (_, Some(s)) if s < 1 => Err(Error::Value {
            key: "cp_size".into(),
            index: 0,
            value: s.to_string(),
            expected: "cp_size ≥ 1",
        }),
        // A `cp_size` tensor alone was silently ignored. Metadata `cp_size` alone states the CP
        // size a global batch must shard for (like `--cp-size`); a tensor cannot say which.
        (None, Some(_)) if file.contains("cp_size") => Err(Error::MissingKey {
            key: "cp_rank".into(),
            dialect: "CP shard",
            hint: "; the file has a `cp_size` tensor: add `cp_rank` for one rank's shard, or \
                   state the size of a global batch in __metadata__ or with --cp-size"
                .into(),
        }),
        (Some(_), None) => Err(Error::MissingKey {
            key: "cp_size".into(),
            dialect: "CP shard",
            hint: "; the file has `cp_rank` but no `cp_size`".into(),
        }),
        (Some(_), Some(s)) if s > i64::from(rules::MAX_CP_SIZE) => Err(Error::Value {
            key: "cp_size".into(),
            index: 0,
            value: s.to_string(),
            expected: concat!("a CP size of at most ", rules::max_cp_size!()),
        }),
        (Some(r), Some(s)) if s >= 1 && (0..s).contains(&r) => Ok(Some((r as usize, s as usize))),
        (Some(r), Some(_)) => Err(Error::Value {
            key: "cp_rank".into(),
            index: 0,
            value: r.to_string(),
            expected: "0 ≤ cp_rank < cp_size",
        }),
        _ => Ok(None),
    }
}
