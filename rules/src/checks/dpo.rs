//! DPO: the concatenated chosen + rejected row keeps every segment on its own example.

use crate::checks::ints::IntSlice;
use crate::checks::layout::seq_idx;
use crate::checks::proof::Proof;
use crate::checks::rule::{Outcome, Rule, first_violation, rule};
use crate::checks::view::LayoutView;
use crate::{Checked, Location};

rule! {
    /// DPO concatenated offsets. [`crate::checks::dpo_offsets`].
    DPO_OFFSETS = "dpo-offsets", Dpo, "concatenated offsets shift the rejected ones by the padded chosen length, and no document holds the padding",
        proof: Proof::Batch("examples/batches/bad/dpo_offset_real_length.safetensors");
    /// DPO concatenated tensors. [`crate::checks::dpo_concat`].
    DPO_CONCAT = "dpo-concat", Dpo, "concatenated tensors are chosen ++ rejected",
        proof: Proof::Test("rules/src/checks/proofs.rs::dpo_concat_rejected_first");
    /// One segment per DPO example. [`crate::checks::check_dpo`].
    DPO_SEGMENT_COUNT = "dpo-segment-count", Dpo, "one segment per chosen and per rejected example",
        proof: Proof::Test("rules/src/checks/proofs.rs::dpo_segment_count_rejected_offsets_dropped");
    /// DPO offsets are ordered. [`crate::checks::check_dpo`].
    DPO_SEGMENT_ORDER = "dpo-segment-order", Dpo, "offsets are non-decreasing",
        proof: Proof::Test("rules/src/checks/proofs.rs::dpo_segment_order_rejected_not_shifted");
    /// A DPO segment holds its own example. [`crate::checks::check_dpo`].
    DPO_SEGMENT_TOKENS = "dpo-segment-tokens", Dpo, "every segment points at exactly its own example's tokens",
        proof: Proof::Zoo("UnpaddedChosenOffset");
    /// A DPO segment holds all of its example. [`crate::checks::check_dpo`].
    DPO_SEGMENT_LENGTH = "dpo-segment-length", Dpo, "every segment covers its whole example",
        proof: Proof::Test("rules/src/checks/proofs.rs::dpo_segment_length_label_lengths");
}

/// One expected segment of a concatenated DPO row.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DpoSegment {
    /// The pair's dataset index.
    pub example: u64,
    /// True for the rejected branch.
    pub rejected: bool,
    /// The tag every token of this example carries (tokens of no example carry another value).
    pub tag: i64,
    /// The example's length on this branch.
    pub len: u32,
}

/// A concatenated DPO row as plain data.
#[derive(Debug, Clone, Copy)]
pub struct DpoView<'a> {
    /// Per token of the row, the tag of the example it came from (padding carries a tag no
    /// example has). A property gets it by tagging token ids before collating.
    pub tags: &'a [i64],
    /// The offsets the model and the loss are given.
    pub cu_seqlens: &'a [i64],
    /// Storage offsets, when segments are addressed apart from their real lengths.
    pub cu_seqlens_padded: Option<&'a [i64]>,
    /// Example number of every token, when the collator emits it.
    pub seq_idx: Option<&'a [i64]>,
}

/// DPO: segment `j` of the concatenated row covers exactly the tokens of its own example
/// (chosen `0..bs`, then rejected `0..bs`), none of the padding and none of another example.
///
/// ```text
/// #segments = 2·bs
/// tokens[storageⱼ .. storageⱼ + sⱼ] all carry tagⱼ, and sⱼ = lenⱼ
/// seq_idx: constant per segment, distinct between segments (the LAYOUT `seq-idx` rule)
/// ```
///
/// # Errors
/// The first segment that points at a wrong token, naming the segment, the token and the
/// example.
///
/// # Example
/// ```
/// use rules::checks::{DpoSegment, DpoView, check_dpo};
/// // chosen [3, 5] padded to 10, rejected [2, 4]: tags 1, 2 (chosen), 3, 4 (rejected), 0 = pad.
/// let tags = [1, 1, 1, 2, 2, 2, 2, 2, 0, 0, 3, 3, 4, 4, 4, 4, 0, 0, 0, 0];
/// let seg = |example, rejected, tag, len| DpoSegment { example, rejected, tag, len };
/// let want = [seg(0, false, 1, 3), seg(1, false, 2, 5), seg(0, true, 3, 2), seg(1, true, 4, 4)];
/// // open-instruct before 005366f75: rejected offsets from the unpadded chosen length.
/// let wrong = DpoView { tags: &tags, cu_seqlens: &[0, 3, 8, 10, 14], cu_seqlens_padded: None, seq_idx: None };
/// assert_eq!(check_dpo(&wrong, &want).unwrap_err().at.segment, Some(2));
/// // After the fix, as plain offsets: the first rejected segment spans the chosen padding (#1900).
/// let spans_pad = DpoView { cu_seqlens: &[0, 3, 8, 12, 16], ..wrong };
/// assert_eq!(check_dpo(&spans_pad, &want).unwrap_err().at.token, Some(8));
/// // The exact layout: real lengths, storage offsets over the padded chosen pack.
/// let right = DpoView { cu_seqlens: &[0, 3, 8, 10, 14], cu_seqlens_padded: Some(&[0, 3, 10, 12, 16]), ..wrong };
/// assert!(check_dpo(&right, &want).is_ok());
/// ```
pub fn check_dpo(view: &DpoView<'_>, expected: &[DpoSegment]) -> Checked {
    let v = |rule: Rule| rule.violation();
    let cu = view.cu_seqlens;
    let storage = view.cu_seqlens_padded.unwrap_or(cu);
    if cu.len() != expected.len() + 1 || storage.len() != cu.len() {
        return Err(v(DPO_SEGMENT_COUNT)
            .expected(format!("{} segments", expected.len()))
            .got(format!("cu_seqlens {cu:?}, storage {storage:?}")));
    }
    for (j, seg) in expected.iter().enumerate() {
        let branch = if seg.rejected { "rejected" } else { "chosen" };
        let at = Location::default().segment(j).example(seg.example);
        let len = cu[j + 1] - cu[j];
        let start = storage[j];
        if len < 0 || start < 0 {
            return Err(v(DPO_SEGMENT_ORDER).at(at).expected(">= 0").got(len));
        }
        let (start, len) = (start as usize, len as usize);
        let range = start..start + len;
        if let Some(t) = range.clone().find(|&t| view.tags.get(t) != Some(&seg.tag)) {
            let got = match view.tags.get(t) {
                Some(&g) => match expected.iter().position(|s| s.tag == g) {
                    Some(k) => format!(
                        "a token of {} example {} (segment {k})",
                        if expected[k].rejected { "rejected" } else { "chosen" },
                        expected[k].example
                    ),
                    None => "a padding token".to_string(),
                },
                None => "past the end of the row".to_string(),
            };
            return Err(v(DPO_SEGMENT_TOKENS)
                .at(at.token(t))
                .expected(format!("a token of {branch} example {}", seg.example))
                .got(got)
                .note(format!("segment {j} spans tokens {range:?}; cu_seqlens {cu:?}")));
        }
        if len != seg.len as usize {
            return Err(v(DPO_SEGMENT_LENGTH)
                .at(at)
                .expected(format!("{} tokens of {branch} example {}", seg.len, seg.example))
                .got(format!("{len} tokens (tokens {range:?})")));
        }
    }
    // seq_idx: the shared LAYOUT rule (constant per segment, distinct between segments).
    if view.seq_idx.is_some() {
        let layout = LayoutView {
            num_tokens: view.tags.len(),
            cu_seqlens: IntSlice::from(cu),
            cu_seqlens_padded: view.cu_seqlens_padded.map(IntSlice::from),
            seq_idx: view.seq_idx.map(IntSlice::from),
            ..Default::default()
        };
        let mock = vec![false; expected.len()];
        first_violation(&[seq_idx(&layout, &mock)])?;
    }
    Ok(())
}

/// DPO, `dpo-offsets`: a DPO collator's batch carries the concatenated offsets the model reads
/// (`concatenated_cu_seq_lens_k`): the contract of `thdcheck fuzz collator --mode dpo`.
///
/// # Errors
/// The `dpo-offsets` violation when they are absent.
///
/// # Example
/// ```
/// use rules::checks::check_dpo_concatenated_present;
/// assert!(check_dpo_concatenated_present(true).is_ok());
/// assert_eq!(check_dpo_concatenated_present(false).unwrap_err().id, "dpo-offsets");
/// ```
pub fn check_dpo_concatenated_present(present: bool) -> Checked {
    if present {
        return Ok(());
    }
    Err(DPO_OFFSETS
        .violation()
        .expected("concatenated_cu_seq_lens_k in the batch")
        .got("no concatenated offsets")
        .note("the DPO contract returns the concatenated keys too"))
}

/// A DPO batch file's concatenation as plain data: what `dpo-offsets` and `dpo-concat` judge.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct DpoConcat {
    /// The key of the concatenated offsets (`concatenated_cu_seq_lens_k` or `_q`).
    pub key: String,
    /// Their values.
    pub concatenated: Vec<i64>,
    /// Chosen real offsets.
    pub chosen: Vec<i64>,
    /// Rejected real offsets.
    pub rejected: Vec<i64>,
    /// Stored chosen tokens (the padded length the rejected offsets must be shifted by).
    pub chosen_tokens: usize,
    /// The concatenated tensors as stored, against `cat(chosen, rejected)`:
    /// `(key, stored, expected)`.
    pub tensors: Vec<(String, Vec<i64>, Vec<i64>)>,
}

/// DPO, `dpo-offsets`: the concatenated offsets are the chosen ones, then the rejected ones
/// shifted by the *padded* chosen length, and no segment holds the chosen padding.
///
/// ```text
/// no chosen padding (R = Tc):  chosen ++ (rejected[1:] + Tc)
/// chosen padding (R < Tc):     chosen ++ [Tc] ++ (rejected[1:] + Tc)    (padding its own segment)
/// ```
///
/// Two upstream bugs break it. open-instruct OI-B1 (before `005366f75`) shifted the rejected
/// offsets by the real chosen length `R`, so every rejected segment points at the wrong tokens.
/// Its fix, `chosen ++ (rejected[1:] + Tc)` with `R < Tc`, makes the first rejected segment
/// start at `R` and span the chosen padding: with the offsets as document lengths (the
/// OLMo-core path's `doc_lens`, flash-attn varlen) the first rejected example attends to the
/// padding (open-instruct PR #1900: `[0, 50, 100, 550, 600]`, initial loss 6× ln 2).
///
/// # Example
/// ```
/// use rules::checks::{DpoConcat, dpo_offsets};
/// let d = DpoConcat {
///     key: "concatenated_cu_seq_lens_k".into(),
///     concatenated: vec![0, 3, 5, 7], // shifted by the real chosen length 3
///     chosen: vec![0, 3],
///     rejected: vec![0, 2, 4],
///     chosen_tokens: 4,
///     tensors: vec![],
/// };
/// let o = dpo_offsets(&d);
/// assert!(o.detail.contains("real chosen length 3, not the padded length 4"), "{}", o.detail);
/// // 005366f75: shifted by the padded length, but the first rejected segment spans the padding.
/// let spans = DpoConcat { concatenated: vec![0, 3, 6, 8], ..d.clone() };
/// assert!(dpo_offsets(&spans).detail.contains("#1900"));
/// // The padding as its own segment: every segment holds one document or only padding.
/// let own = DpoConcat { concatenated: vec![0, 3, 4, 6, 8], ..d };
/// assert_eq!(dpo_offsets(&own).status, rules::checks::Status::Ok);
/// ```
pub fn dpo_offsets(d: &DpoConcat) -> Outcome {
    let tc = d.chosen_tokens as i64;
    let real_len = *d.chosen.last().unwrap_or(&0);
    let shift = |by: i64, pad_segment: bool| -> Vec<i64> {
        let mut v = d.chosen.clone();
        if pad_segment {
            v.push(tc);
        }
        v.extend(d.rejected.iter().skip(1).map(|&x| x + by));
        v
    };
    let key = &d.key;
    let n_chosen = d.chosen.len().saturating_sub(1);
    let padded = real_len < tc;
    let expected = shift(tc, padded);
    if d.concatenated == expected {
        return DPO_OFFSETS.ok(if padded {
            format!(
                "`{key}` shifts the rejected offsets by the padded chosen length {tc}, the chosen \
                 padding ({real_len}..{tc}) its own segment"
            )
        } else {
            format!("`{key}` shifts the rejected offsets by the chosen length {tc}")
        });
    }
    let i = d
        .concatenated
        .iter()
        .zip(&expected)
        .position(|(a, b)| a != b)
        .unwrap_or(d.concatenated.len().min(expected.len()));
    let show = |v: Option<&i64>| v.map_or("end".into(), i64::to_string);
    let mut v = DPO_OFFSETS
        .violation()
        .at(Location::default().segment(i.saturating_sub(1)).key(key.as_str()))
        .expected(format!("{key}[{i}] = {}", show(expected.get(i))))
        .got(format!("{key}[{i}] = {}", show(d.concatenated.get(i))));
    let got = |k: usize| d.concatenated.get(k).copied().unwrap_or(0);
    if padded && d.concatenated == shift(real_len, false) {
        let j = i.saturating_sub(n_chosen + 1);
        v = v.note(format!(
            "the rejected offsets are shifted by the real chosen length {real_len}, not the padded \
             length {tc} (open-instruct OI-B1): rejected segment {j} (segment {}) covers tokens \
             {}..{}, but its tokens are {}..{}",
            n_chosen + j,
            got(n_chosen + j),
            got(n_chosen + j + 1),
            tc + d.rejected.get(j).copied().unwrap_or(0),
            tc + d.rejected.get(j + 1).copied().unwrap_or(0),
        ));
    } else if padded && d.concatenated == shift(tc, false) {
        v = v
            .at(Location::default().segment(n_chosen).token(real_len as usize).key(key.as_str()))
            .expected(format!(
                "the chosen padding {real_len}..{tc} in no document: {key} = {expected:?}"
            ))
            .got(format!(
                "segment {n_chosen} (rejected example 0) spans tokens {}..{}, of which {real_len}..{tc} \
                 are the chosen padding",
                got(n_chosen),
                got(n_chosen + 1)
            ))
            .note(
                "the first rejected example attends to the chosen padding wherever the offsets are \
                 document lengths (open-instruct PR #1900: [0, 50, 100, 550, 600], initial loss 6× \
                 ln 2)",
            );
    } else {
        v = v.note(format!("chosen offsets, then rejected offsets + padded chosen length {tc}"));
    }
    DPO_OFFSETS.violated(v)
}

/// DPO, `dpo-concat`: every stored concatenated tensor is `chosen ++ rejected`. `None` when the
/// file stores none.
pub fn dpo_concat(d: &DpoConcat) -> Option<Outcome> {
    if d.tensors.is_empty() {
        return None;
    }
    for (key, stored, want) in &d.tensors {
        if stored.len() != want.len() {
            return Some(
                DPO_CONCAT.violated(
                    DPO_CONCAT
                        .violation()
                        .at(Location::default().key(key.as_str()))
                        .expected(format!("{} tokens (chosen + rejected)", want.len()))
                        .got(format!("{} tokens", stored.len())),
                ),
            );
        }
        if let Some(t) = stored.iter().zip(want).position(|(a, b)| a != b) {
            let side = if t < d.chosen_tokens { "chosen" } else { "rejected" };
            return Some(
                DPO_CONCAT.violated(
                    DPO_CONCAT
                        .violation()
                        .at(Location::default().token(t).key(key.as_str()))
                        .expected(format!("{} ({side} token)", want[t]))
                        .got(format!("{key}[{t}] = {}", stored[t])),
                ),
            );
        }
    }
    Some(DPO_CONCAT.ok("concatenated tensors are chosen ++ rejected"))
}
