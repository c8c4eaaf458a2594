//! The invariants a batch file can prove on its own, each returning a [`Check`].
//!
//! | id | invariant | rule |
//! |---|---|---|
//! | `padded-slots` | LAYOUT | every storage slot holds its real tokens: `pᵢ ≥ sᵢ` |
//! | `qk-offsets` | LAYOUT | key offsets equal query offsets (self-attention packing) |
//! | `row-slots` | LAYOUT | Automodel rows: every row but the last is filled exactly by its slots |
//! | `max-seqlen` | LAYOUT | the declared maximum ≥ the widest slot the kernel is given |
//! | `position-ids` | LAYOUT | position ids restart at 0 at each segment start |
//! | `cross-doc-label` | LAYOUT | no segment's last prediction targets the next document |
//! | `pad-labels` | LOSS | padding and mock tokens carry label -100 |
//! | `mask` | LAYOUT | the attention / padding mask agrees with the segments |
//! | `seq-idx` | LAYOUT | one distinct `seq_idx` per segment, constant over its tokens |
//! | `mock-marked` | MFU-PAD | an all-padding (mock) segment is marked by `num_real_seqs` |
//! | `label-targets` | LOSS | with `--causal` (a causal LM): each valid label is the token it must predict |
//! | `pad-multiple` | MFU-PAD | `T` is a multiple of `--pad-to-multiple-of` |
//! | `cp-shard` | CP-SHARD | with `--cp-size`: every slot divisible by `2·cp`, every token on one rank |
//! | `dpo-offsets` | DPO | concatenated offsets shift the rejected ones by the *padded* chosen length |
//! | `dpo-concat` | DPO | concatenated tensors are `chosen ++ rejected` |
//!
//! The properties crate will own these checks; they take plain data so that they can be
//! swapped for its functions without touching the report.

use std::collections::HashMap;

use serde::Serialize;
use thd::metrics::AttnSums;
use thd::{IGNORE_INDEX, LabelConvention};

use crate::dialect::DpoOffsets;
use crate::pack::Pack;

/// Outcome of one check.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Status {
    /// The invariant holds.
    Ok,
    /// The invariant is broken.
    Violated,
    /// The file lacks what the check needs.
    Skipped,
}

/// Where a violation is.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Location {
    /// Segment index.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub segment: Option<usize>,
    /// Flat token index.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub token: Option<usize>,
    /// CP rank.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rank: Option<usize>,
    /// The file key at fault.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub key: Option<String>,
}

/// One check's result.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Check {
    /// Check id (`position-ids`, ...).
    pub id: &'static str,
    /// The DESIGN invariant it belongs to (`LAYOUT`, `DPO`, ...).
    pub invariant: &'static str,
    /// Outcome.
    pub status: Status,
    /// What holds, what is broken (expected vs got), or why it was skipped.
    pub detail: String,
    /// Where the first violation is.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub location: Option<Location>,
}

impl Check {
    fn ok(id: &'static str, invariant: &'static str, detail: impl Into<String>) -> Self {
        Self { id, invariant, status: Status::Ok, detail: detail.into(), location: None }
    }
    fn skipped(id: &'static str, invariant: &'static str, why: impl Into<String>) -> Self {
        Self { id, invariant, status: Status::Skipped, detail: why.into(), location: None }
    }
    fn violated(
        id: &'static str,
        invariant: &'static str,
        detail: impl Into<String>,
        location: Location,
    ) -> Self {
        Self {
            id,
            invariant,
            status: Status::Violated,
            detail: detail.into(),
            location: Some(location),
        }
    }
}

/// What the user states that the file cannot.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CheckOptions {
    /// Check that the batch shards over this many CP ranks.
    pub cp_size: Option<usize>,
    /// Check that `T` is a multiple of this.
    pub pad_to_multiple_of: Option<usize>,
    /// Causal attention: useful work is the exact triangle `Σ s(s+1)/2`.
    pub causal: bool,
}

impl CheckOptions {
    /// Fills what the command line left unset from the file's `__metadata__`: `cp_size`
    /// (when there is no `cp_rank`: a full batch meant for that CP size) and
    /// `pad_to_multiple_of`, as `save_file(batch, path, metadata={"cp_size": "2"})` writes them.
    ///
    /// # Errors
    /// [`crate::Error::Value`] for a value that is not a positive integer.
    pub fn with_metadata(
        mut self,
        meta: &std::collections::BTreeMap<String, String>,
    ) -> crate::Result<Self> {
        let get = |key: &str| -> crate::Result<Option<usize>> {
            match meta.get(key) {
                None => Ok(None),
                Some(v) => match v.trim().parse::<usize>() {
                    Ok(n) if n > 0 && n <= 1 << 16 => Ok(Some(n)),
                    _ => Err(crate::Error::Value {
                        key: format!("__metadata__.{key}"),
                        index: 0,
                        value: v.clone(),
                        expected: "an integer in 1..=65536",
                    }),
                },
            }
        };
        if self.cp_size.is_none() && !meta.contains_key("cp_rank") {
            self.cp_size = get("cp_size")?;
        }
        if self.pad_to_multiple_of.is_none() {
            self.pad_to_multiple_of = get("pad_to_multiple_of")?;
        }
        if let Some(v) = meta.get("causal") {
            self.causal |= matches!(v.trim(), "1" | "true" | "True");
        }
        Ok(self)
    }
}

/// Layout facts of one pack.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Facts {
    /// Rows of the stored tensors.
    pub rows: usize,
    /// Stored tokens `T`.
    pub tokens: usize,
    /// Segments `B`, mock ones included.
    pub segments: usize,
    /// Real segments.
    pub real_segments: usize,
    /// Mock segments (padding dressed as sequences).
    pub mock_segments: usize,
    /// Tokens of real segments (real lengths).
    pub real_tokens: u64,
    /// Tokens of mock segments.
    pub mock_tokens: u64,
    /// Every other token: in-slot padding and the tail.
    pub pad_tokens: u64,
    /// Loss positions with a valid target, if the file has labels.
    pub valid_labels: Option<u64>,
    /// Label convention used (`unshifted`: `labels[t]` is token `t`; `shifted`: already rolled).
    pub labels: &'static str,
    /// Useful attention work: real segments at real lengths.
    pub useful: AttnSums,
    /// Hardware attention work of a varlen kernel: every slot, mock ones included.
    pub hardware: AttnSums,
    /// Hardware attention work if the pack is one sequence (no offsets passed).
    pub whole_pack: AttnSums,
}

/// The facts and checks of one pack.
#[derive(Debug, Clone, Serialize)]
pub struct PackReport {
    /// Part of the file (`chosen`, ...), if any.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub part: Option<String>,
    /// Layout facts.
    pub facts: Facts,
    /// Every check, in a fixed order.
    pub checks: Vec<Check>,
    /// Things worth knowing that are not violations.
    pub notes: Vec<String>,
}

/// Which segments are mock, and how that was decided.
fn mock_segments(pack: &Pack) -> Vec<bool> {
    let n = pack.segments();
    match pack.num_real_seqs {
        Some(k) if k >= 0 && k as usize <= n => (0..n).map(|i| i >= k as usize).collect(),
        Some(_) => vec![false; n],
        None => (0..n).map(|i| all_padding(pack, i)).collect(),
    }
}

/// A non-empty segment whose real tokens are all masked out and carry no label.
fn all_padding(pack: &Pack, i: usize) -> bool {
    let r = pack.real(i);
    let Some(mask) = &pack.real_mask else { return false };
    !r.is_empty()
        && mask[r.clone()].iter().all(|&m| !m)
        && pack.labels.as_ref().is_none_or(|l| l[r].iter().all(|&x| x == IGNORE_INDEX))
}

/// Runs every pack-level check.
pub fn check_pack(pack: &Pack, opts: &CheckOptions) -> PackReport {
    let mock = mock_segments(pack);
    let facts = facts(pack, &mock);
    let mut notes = pack.notes.clone();
    let mut checks = vec![
        padded_slots(pack),
        qk_offsets(pack),
        row_slots(pack),
        max_seqlen(pack),
        position_ids(pack),
        cross_doc_label(pack),
        pad_labels(pack, &mock),
        mask(pack, &mock),
        seq_idx(pack, &mock, &mut notes),
        mock_marked(pack, &mock, &mut notes),
    ];
    if opts.causal {
        checks.push(label_targets(pack, &mock));
    }
    if let Some(m) = opts.pad_to_multiple_of {
        checks.push(pad_multiple(pack, m));
    }
    if let Some(cp) = opts.cp_size {
        checks.push(cp_shard(pack, cp));
    }
    checks.retain(|c| !(c.status == Status::Skipped && c.detail.is_empty()));
    PackReport { part: pack.part.clone(), facts, checks, notes }
}

fn facts(pack: &Pack, mock: &[bool]) -> Facts {
    let n = pack.segments();
    let mut real_tokens = 0u64;
    let mut mock_tokens = 0u64;
    let mut useful = Vec::with_capacity(n);
    let mut hardware = Vec::with_capacity(n);
    for i in 0..n {
        let len = pack.real(i).len() as u64;
        if mock[i] {
            mock_tokens += pack.slot(i).len() as u64;
        } else {
            real_tokens += len;
            useful.push(len);
        }
        hardware.push(pack.slot(i).len() as u64);
    }
    let t = pack.tokens() as u64;
    let valid_labels = pack.labels.as_ref().map(|l| {
        let skip = usize::from(pack.convention == LabelConvention::Unshifted);
        l.iter().skip(skip).filter(|&&x| x != IGNORE_INDEX).count() as u64
    });
    Facts {
        rows: pack.rows,
        tokens: pack.tokens(),
        segments: n,
        real_segments: mock.iter().filter(|&&m| !m).count(),
        mock_segments: mock.iter().filter(|&&m| m).count(),
        real_tokens,
        mock_tokens,
        pad_tokens: t.saturating_sub(real_tokens + mock_tokens),
        valid_labels,
        labels: match pack.convention {
            LabelConvention::Unshifted => "unshifted",
            LabelConvention::Shifted => "shifted",
        },
        useful: AttnSums::of(useful),
        hardware: AttnSums::of(hardware),
        whole_pack: AttnSums::of([t]),
    }
}

fn key_loc(key: &str, segment: Option<usize>, token: Option<usize>) -> Location {
    Location { segment, token, rank: None, key: Some(key.to_owned()) }
}

fn plural(n: usize, one: &str) -> String {
    if n == 1 { format!("1 {one}") } else { format!("{n} {one}s") }
}

fn padded_slots(pack: &Pack) -> Check {
    const ID: &str = "padded-slots";
    let Some(pk) = &pack.keys.cu_padded else {
        return Check::skipped(ID, "LAYOUT", "");
    };
    let bad: Vec<usize> =
        (0..pack.segments()).filter(|&i| pack.slot(i).len() < pack.real_len(i)).collect();
    match bad.first() {
        None => Check::ok(ID, "LAYOUT", format!("every slot of `{pk}` holds its real tokens")),
        Some(&i) => Check::violated(
            ID,
            "LAYOUT",
            format!(
                "segment {i}: slot of {} tokens in `{pk}` is shorter than its real length {} in \
                 `{}` ({} affected)",
                pack.slot(i).len(),
                pack.real_len(i),
                pack.keys.cu,
                plural(bad.len(), "segment")
            ),
            key_loc(pk, Some(i), Some(pack.slot(i).start)),
        ),
    }
}

fn qk_offsets(pack: &Pack) -> Check {
    const ID: &str = "qk-offsets";
    let (Some(k), Some(key)) = (&pack.cu_k, &pack.keys.cu_k) else {
        return Check::skipped(ID, "LAYOUT", "");
    };
    // The query offsets may have been un-absorbed; compare with the stored ones.
    let q: Vec<i64> = match (&pack.cu_padded, pack.absorbed) {
        (Some(p), true) => p.clone(),
        _ => pack.cu.clone(),
    };
    if *k == q {
        return Check::ok(ID, "LAYOUT", format!("`{key}` equals `{}`", pack.keys.cu));
    }
    let i = k.iter().zip(&q).position(|(a, b)| a != b).unwrap_or(k.len().min(q.len()));
    Check::violated(
        ID,
        "LAYOUT",
        format!(
            "`{key}` differs from `{}` at [{i}]: {} vs {} (self-attention packing needs one set \
             of offsets)",
            pack.keys.cu,
            k.get(i).map_or("end".into(), i64::to_string),
            q.get(i).map_or("end".into(), i64::to_string)
        ),
        key_loc(key, None, None),
    )
}

fn row_slots(pack: &Pack) -> Check {
    const ID: &str = "row-slots";
    let Some(rows) = &pack.row_slots else {
        return Check::skipped(ID, "LAYOUT", "");
    };
    let s = (pack.tokens() / pack.rows.max(1)) as i64;
    let last = rows.len().saturating_sub(1);
    for (r, &sum) in rows.iter().enumerate() {
        let ok = if r < last { sum == s } else { sum <= s };
        if !ok {
            return Check::violated(
                ID,
                "LAYOUT",
                format!(
                    "row {r}: its slots hold {sum} tokens but a row has S={s}; the offsets are \
                     one cumulative sum over rows, so every later row's segments point at the \
                     wrong tokens"
                ),
                key_loc(
                    pack.keys.cu_padded.as_deref().unwrap_or(&pack.keys.cu),
                    None,
                    Some(r * s as usize),
                ),
            );
        }
    }
    Check::ok(ID, "LAYOUT", format!("each of {} fills its S={s} tokens", plural(rows.len(), "row")))
}

fn max_seqlen(pack: &Pack) -> Check {
    const ID: &str = "max-seqlen";
    let (Some(declared), Some(key)) = (pack.max_seqlen, &pack.keys.max_seqlen) else {
        return Check::skipped(ID, "LAYOUT", "no max_seqlen / max_length_q");
    };
    let slots = pack.padded_in_file || pack.absorbed;
    let width = |i: usize| if slots { pack.slot(i).len() } else { pack.real_len(i) };
    let widest = (0..pack.segments()).max_by_key(|&i| (width(i), std::cmp::Reverse(i)));
    let Some(i) = widest else {
        return Check::ok(ID, "LAYOUT", "no segments");
    };
    let w = width(i);
    let what = if slots { "slot" } else { "segment" };
    if declared >= w as i64 {
        Check::ok(ID, "LAYOUT", format!("`{key}` = {declared} ≥ widest {what} {w} (segment {i})"))
    } else {
        Check::violated(
            ID,
            "LAYOUT",
            format!(
                "`{key}` = {declared} < widest {what} {w} (segment {i}): the kernel sizes its \
                 grid by max_seqlen and skips or corrupts the rest"
            ),
            key_loc(key, Some(i), Some(pack.slot(i).start)),
        )
    }
}

fn position_ids(pack: &Pack) -> Check {
    const ID: &str = "position-ids";
    let (Some(pos), Some(key)) = (&pack.position_ids, &pack.keys.position_ids) else {
        return Check::skipped(ID, "LAYOUT", "no position_ids");
    };
    let mut first = None;
    let mut bad = 0usize;
    for i in 0..pack.segments() {
        let r = pack.real(i);
        let start = r.start;
        if let Some(j) = pos[r].iter().enumerate().position(|(j, &p)| p != j as i64) {
            bad += 1;
            first.get_or_insert((i, start + j, j));
        }
    }
    match first {
        None => Check::ok(
            ID,
            "LAYOUT",
            format!("restart at 0 in each of {}", plural(pack.segments(), "segment")),
        ),
        Some((i, t, j)) => {
            let prev =
                if t > 0 { format!(" (previous token: {})", pos[t - 1]) } else { String::new() };
            Check::violated(
                ID,
                "LAYOUT",
                format!(
                    "segment {i}: `{key}`[{t}] = {}, expected {j} (offset {j} of the segment){prev}; \
                     {} not restarting",
                    pos[t],
                    plural(bad, "segment")
                ),
                key_loc(key, Some(i), Some(t)),
            )
        }
    }
}

fn cross_doc_label(pack: &Pack) -> Check {
    const ID: &str = "cross-doc-label";
    let (Some(labels), Some(key)) = (&pack.labels, &pack.keys.labels) else {
        return Check::skipped(ID, "LAYOUT", "no labels");
    };
    for i in 0..pack.segments() {
        let r = pack.real(i);
        if r.is_empty() {
            continue;
        }
        let t = match pack.convention {
            LabelConvention::Unshifted => r.end,
            LabelConvention::Shifted => r.end - 1,
        };
        if let Some(&l) = labels.get(t)
            && l != IGNORE_INDEX
        {
            let whose = match pack.convention {
                LabelConvention::Unshifted => format!(
                    "`{key}`[{t}] = {l}, the target of segment {i}'s last token (labels are \
                     unshifted: logits[t] predicts labels[t+1]); it must be -100"
                ),
                LabelConvention::Shifted => format!(
                    "`{key}`[{t}] = {l} on segment {i}'s last token (labels are shifted: \
                     logits[t] predicts labels[t]); it must be -100"
                ),
            };
            let next = match (i + 1 < pack.segments()).then(|| pack.real(i + 1).start) {
                Some(s) if pack.input_ids.get(s) == Some(&l) => {
                    format!(": it is segment {}'s first token (input_ids[{s}] = {l})", i + 1)
                }
                _ => String::new(),
            };
            return Check::violated(
                ID,
                "LAYOUT",
                format!("{whose}{next}"),
                key_loc(key, Some(i), Some(t)),
            );
        }
    }
    Check::ok(ID, "LAYOUT", "no prediction crosses a segment boundary")
}

fn pad_labels(pack: &Pack, mock: &[bool]) -> Check {
    const ID: &str = "pad-labels";
    let (Some(labels), Some(key)) = (&pack.labels, &pack.keys.labels) else {
        return Check::skipped(ID, "LOSS", "");
    };
    let real = real_token_mask(pack, mock);
    let mut bad =
        labels.iter().zip(&real).enumerate().filter(|(_, (l, r))| !**r && **l != IGNORE_INDEX);
    match bad.next() {
        None => Check::ok(ID, "LOSS", "padding and mock tokens carry -100"),
        Some((t, (l, _))) => {
            let n = 1 + bad.count();
            let seg = segment_of(pack, t);
            Check::violated(
                ID,
                "LOSS",
                format!(
                    "`{key}`[{t}] = {l} on a {} token: the loss trains on padding ({} with a label)",
                    match seg {
                        Some(i) if mock[i] => format!("mock (segment {i})"),
                        _ => "padding".into(),
                    },
                    plural(n, "padding token")
                ),
                key_loc(key, seg, Some(t)),
            )
        }
    }
}

/// `true` on the real tokens of real segments.
fn real_token_mask(pack: &Pack, mock: &[bool]) -> Vec<bool> {
    let mut real = vec![false; pack.tokens()];
    for i in 0..pack.segments() {
        if !mock[i] {
            real[pack.real(i)].fill(true);
        }
    }
    real
}

/// The segment whose slot holds token `t`.
fn segment_of(pack: &Pack, t: usize) -> Option<usize> {
    let s = pack.storage();
    let i = s.partition_point(|&c| c as usize <= t);
    (i >= 1 && i < s.len()).then(|| i - 1)
}

fn mask(pack: &Pack, mock: &[bool]) -> Check {
    const ID: &str = "mask";
    let (Some(mask), Some(key)) = (&pack.real_mask, &pack.keys.mask) else {
        return Check::skipped(ID, "LAYOUT", "no attention_mask / padding_mask");
    };
    let inverted = key.contains("padding");
    let show = |real: bool| if inverted { u8::from(!real) } else { u8::from(real) };
    let real = real_token_mask(pack, mock);
    let mut bad = mask.iter().zip(&real).enumerate().filter(|(_, (m, r))| m != r);
    let Some((t, (&m, &r))) = bad.next() else {
        return Check::ok(ID, "LAYOUT", format!("`{key}` agrees with the segments"));
    };
    let n = 1 + bad.count();
    let seg = segment_of(pack, t);
    let detail = if r {
        let i = seg.unwrap_or(0);
        // The commonest id among the tokens that are padding by the layout.
        let mut counts: HashMap<i64, usize> = HashMap::new();
        for (tok, &is_real) in pack.input_ids.iter().zip(&real) {
            if !is_real {
                *counts.entry(*tok).or_default() += 1;
            }
        }
        let pad_id =
            counts.into_iter().max_by_key(|&(id, c)| (c, std::cmp::Reverse(id))).map(|(id, _)| id);
        let why = match pad_id {
            Some(p) if p == pack.input_ids[t] => {
                format!("; its id {p} is the padding id: was the mask built from token values?")
            }
            _ => String::new(),
        };
        format!(
            "token {t} (segment {i}, offset {}) is a real token but `{key}`[{t}] = {}{why} ({} disagreeing)",
            t - pack.real(i).start,
            show(m),
            plural(n, "token")
        )
    } else {
        format!(
            "token {t} is {} but `{key}`[{t}] = {} marks it real ({} disagreeing)",
            match seg {
                Some(i) if mock[i] => format!("in mock segment {i}"),
                Some(i) => format!("padding in segment {i}'s slot"),
                None => "padding past the last segment".into(),
            },
            show(m),
            plural(n, "token")
        )
    };
    Check::violated(ID, "LAYOUT", detail, key_loc(key, seg, Some(t)))
}

fn seq_idx(pack: &Pack, mock: &[bool], notes: &mut Vec<String>) -> Check {
    const ID: &str = "seq-idx";
    let (Some(idx), Some(key)) = (&pack.seq_idx, &pack.keys.seq_idx) else {
        return Check::skipped(ID, "LAYOUT", "");
    };
    let mut owner: HashMap<i64, usize> = HashMap::new();
    for i in 0..pack.segments() {
        let r = pack.real(i);
        let Some(&v) = idx.get(r.start).filter(|_| !r.is_empty()) else { continue };
        if let Some(j) = idx[r.clone()].iter().position(|&x| x != v) {
            let t = r.start + j;
            return Check::violated(
                ID,
                "LAYOUT",
                format!("segment {i}: `{key}`[{t}] = {}, but the segment starts with {v}", idx[t]),
                key_loc(key, Some(i), Some(t)),
            );
        }
        if let Some(&j) = owner.get(&v) {
            return Check::violated(
                ID,
                "LAYOUT",
                format!(
                    "segments {j} and {i} share `{key}` = {v}: a kernel keyed on seq_idx runs them as one sequence"
                ),
                key_loc(key, Some(i), Some(r.start)),
            );
        }
        owner.insert(v, i);
    }
    let real = real_token_mask(pack, mock);
    if let Some(t) = (0..pack.tokens()).find(|&t| !real[t] && owner.contains_key(&idx[t])) {
        notes.push(format!(
            "`{key}`[{t}] = {} on a padding token reuses segment {}'s id",
            idx[t], owner[&idx[t]]
        ));
    }
    Check::ok(ID, "LAYOUT", format!("one distinct id per segment ({})", plural(owner.len(), "id")))
}

fn mock_marked(pack: &Pack, mock: &[bool], notes: &mut Vec<String>) -> Check {
    const ID: &str = "mock-marked";
    let n = pack.segments();
    match pack.num_real_seqs {
        Some(k) if k < 0 || k as usize > n => Check::violated(
            ID,
            "MFU-PAD",
            format!("num_real_seqs = {k} but there are {}", plural(n, "segment")),
            Location { key: Some("num_real_seqs".into()), ..Default::default() },
        ),
        Some(k) => {
            let k = k as usize;
            for i in k..n {
                let valid = pack
                    .labels
                    .as_ref()
                    .map_or(0, |l| l[pack.real(i)].iter().filter(|&&x| x != IGNORE_INDEX).count());
                if valid > 0 {
                    return Check::violated(
                        ID,
                        "MFU-PAD",
                        format!(
                            "segment {i} is past num_real_seqs = {k} (mock) but carries {}",
                            plural(valid, "valid label")
                        ),
                        Location {
                            segment: Some(i),
                            key: Some("num_real_seqs".into()),
                            ..Default::default()
                        },
                    );
                }
            }
            for i in 0..k {
                if all_padding(pack, i) {
                    notes.push(format!(
                        "segment {i} is all padding but num_real_seqs = {k} counts it as real"
                    ));
                }
            }
            Check::ok(
                ID,
                "MFU-PAD",
                format!(
                    "num_real_seqs = {k}: {} excluded from useful work",
                    plural(n - k, "mock segment")
                ),
            )
        }
        None => {
            let mocks: Vec<usize> = (0..n).filter(|&i| mock[i]).collect();
            match mocks.first() {
                None if pack.real_mask.is_none() => Check::skipped(
                    ID,
                    "MFU-PAD",
                    "no mask and no num_real_seqs: a mock segment cannot be told apart",
                ),
                None => Check::ok(ID, "MFU-PAD", "no all-padding segment"),
                Some(&i) => {
                    if mocks.iter().enumerate().any(|(j, &m)| m != n - mocks.len() + j) {
                        notes.push("mock segments are not all at the end of the pack".into());
                    }
                    let r = pack.slot(i);
                    Check::violated(
                        ID,
                        "MFU-PAD",
                        format!(
                            "segment {i} (tokens {}..{}) is all padding (mask 0, labels -100) but \
                             no num_real_seqs marks it: a logger that counts `{}` counts it as \
                             useful work (bionemo #1561); {} excluded here",
                            r.start,
                            r.end,
                            pack.keys.cu,
                            plural(mocks.len(), "mock segment")
                        ),
                        key_loc(&pack.keys.cu, Some(i), Some(r.start)),
                    )
                }
            }
        }
    }
}

/// Causal LM: a valid label is the next token of the segment (shifted) or the token itself
/// (unshifted). Catches labels rolled after a CP split, or rolled across the pack.
fn label_targets(pack: &Pack, mock: &[bool]) -> Check {
    const ID: &str = "label-targets";
    let (Some(labels), Some(key)) = (&pack.labels, &pack.keys.labels) else {
        return Check::skipped(ID, "LOSS", "no labels");
    };
    for i in 0..pack.segments() {
        if mock[i] {
            continue;
        }
        let r = pack.real(i);
        for t in r.clone() {
            let l = labels[t];
            if l == IGNORE_INDEX {
                continue;
            }
            let (want, what) = match pack.convention {
                LabelConvention::Shifted if t + 1 < r.end => {
                    (Some(pack.input_ids[t + 1]), "the next token")
                }
                LabelConvention::Shifted => (None, "nothing (the segment's last token)"),
                LabelConvention::Unshifted => (Some(pack.input_ids[t]), "the token itself"),
            };
            if want != Some(l) {
                let shown = want.map_or("-100".to_owned(), |w| w.to_string());
                return Check::violated(
                    ID,
                    "LOSS",
                    format!(
                        "segment {i}: `{key}`[{t}] = {l}, expected {shown} ({what}, offset {} of the \
                         segment): labels rolled after a split, or across segments?",
                        t - r.start
                    ),
                    key_loc(key, Some(i), Some(t)),
                );
            }
        }
    }
    Check::ok(ID, "LOSS", "every valid label is the token it must predict")
}

fn pad_multiple(pack: &Pack, m: usize) -> Check {
    const ID: &str = "pad-multiple";
    let t = pack.tokens();
    if m == 0 {
        return Check::skipped(ID, "MFU-PAD", "--pad-to-multiple-of 0");
    }
    if t.is_multiple_of(m) {
        Check::ok(ID, "MFU-PAD", format!("T = {t} is a multiple of {m}"))
    } else {
        Check::violated(
            ID,
            "MFU-PAD",
            format!("T = {t} is not a multiple of {m} (remainder {})", t % m),
            Location { token: Some(t), ..Default::default() },
        )
    }
}

fn cp_shard(pack: &Pack, cp: usize) -> Check {
    const ID: &str = "cp-shard";
    let as_cu = |name: &'static str, v: &[i64]| thd::CuSeqlens::from_i64(name, v);
    let real = match as_cu("cu_seqlens", &pack.cu) {
        Ok(c) => c,
        Err(e) => return Check::violated(ID, "CP-SHARD", e.to_string(), Location::default()),
    };
    let padded = match pack.cu_padded.as_deref().map(|p| as_cu("cu_seqlens_padded", p)).transpose()
    {
        Ok(p) => p,
        Err(e) => return Check::violated(ID, "CP-SHARD", e.to_string(), Location::default()),
    };
    let layout = match thd::cp::CpLayout::new(&real, padded.as_ref(), cp) {
        Ok(l) => l,
        Err(e) => {
            let seg = match &e {
                thd::Error::CpLengthNotDivisible { segment, .. } => Some(*segment),
                _ => None,
            };
            return Check::violated(
                ID,
                "CP-SHARD",
                e.to_string(),
                Location { segment: seg, ..Default::default() },
            );
        }
    };
    let covered = layout.storage().total();
    if covered != pack.tokens() {
        return Check::violated(
            ID,
            "CP-SHARD",
            format!(
                "tokens {covered}..{} lie past the last slot: TransformerEngine's partitioner \
                 treats them as part of the last sequence and hands the ranks overlapping tokens",
                pack.tokens()
            ),
            Location { token: Some(covered), ..Default::default() },
        );
    }
    let mut seen = vec![0u8; pack.tokens()];
    for rank in 0..cp {
        let idx = match layout.indices(rank) {
            Ok(i) => i,
            Err(e) => {
                return Check::violated(
                    ID,
                    "CP-SHARD",
                    e.to_string(),
                    Location { rank: Some(rank), ..Default::default() },
                );
            }
        };
        for t in idx {
            if let Some(s) = seen.get_mut(t) {
                *s = s.saturating_add(1);
            }
        }
    }
    if let Some(t) = seen.iter().position(|&s| s != 1) {
        return Check::violated(
            ID,
            "CP-SHARD",
            format!("token {t} is on {} ranks, expected exactly 1", seen[t]),
            Location { token: Some(t), ..Default::default() },
        );
    }
    Check::ok(
        ID,
        "CP-SHARD",
        format!(
            "zigzag over cp = {cp}: {} × {} tokens, every token on exactly one rank",
            plural(cp, "rank"),
            pack.tokens() / cp
        ),
    )
}

/// The DPO checks of a file: offsets and concatenated tensors.
pub fn check_dpo(dpo: &DpoOffsets) -> Vec<Check> {
    let mut out = Vec::new();
    let tc = dpo.chosen_tokens as i64;
    let shift = |by: i64| -> Vec<i64> {
        let mut v = dpo.chosen.clone();
        v.extend(dpo.rejected.iter().skip(1).map(|&x| x + by));
        v
    };
    let expected = shift(tc);
    let key = &dpo.key;
    let n_chosen = dpo.chosen.len().saturating_sub(1);
    if dpo.concatenated == expected {
        out.push(Check::ok(
            "dpo-offsets",
            "DPO",
            format!("`{key}` shifts the rejected offsets by the padded chosen length {tc}"),
        ));
    } else {
        let real_len = *dpo.chosen.last().unwrap_or(&0);
        let i = dpo
            .concatenated
            .iter()
            .zip(&expected)
            .position(|(a, b)| a != b)
            .unwrap_or(dpo.concatenated.len().min(expected.len()));
        let detail = if dpo.concatenated == shift(real_len) {
            let j = i.saturating_sub(n_chosen + 1);
            let got = |k: usize| dpo.concatenated.get(k).copied().unwrap_or(0);
            format!(
                "`{key}` shifts the rejected offsets by the real chosen length {real_len}, not the \
                 padded length {tc} (open-instruct OI-B1): rejected segment {j} (segment {}) \
                 covers tokens {}..{}, but its tokens are {}..{}",
                n_chosen + j,
                got(n_chosen + j),
                got(n_chosen + j + 1),
                tc + dpo.rejected.get(j).copied().unwrap_or(0),
                tc + dpo.rejected.get(j + 1).copied().unwrap_or(0),
            )
        } else {
            format!(
                "`{key}`[{i}] = {}, expected {} (chosen offsets, then rejected offsets + padded \
                 chosen length {tc})",
                dpo.concatenated.get(i).map_or("end".into(), i64::to_string),
                expected.get(i).map_or("end".into(), i64::to_string)
            )
        };
        out.push(Check::violated(
            "dpo-offsets",
            "DPO",
            detail,
            Location {
                segment: Some(i.saturating_sub(1)),
                key: Some(key.clone()),
                ..Default::default()
            },
        ));
    }
    let mut concat = Check::ok("dpo-concat", "DPO", "concatenated tensors are chosen ++ rejected");
    for (key, stored, want) in &dpo.tensors {
        if stored.len() != want.len() {
            concat = Check::violated(
                "dpo-concat",
                "DPO",
                format!(
                    "`{key}` has {} tokens, chosen + rejected have {}",
                    stored.len(),
                    want.len()
                ),
                Location { key: Some(key.clone()), ..Default::default() },
            );
            break;
        }
        if let Some(t) = stored.iter().zip(want).position(|(a, b)| a != b) {
            let side = if t < dpo.chosen_tokens { "chosen" } else { "rejected" };
            concat = Check::violated(
                "dpo-concat",
                "DPO",
                format!("`{key}`[{t}] = {}, expected {} ({side} token)", stored[t], want[t]),
                Location { token: Some(t), key: Some(key.clone()), ..Default::default() },
            );
            break;
        }
    }
    if !dpo.tensors.is_empty() {
        out.push(concat);
    }
    out
}
