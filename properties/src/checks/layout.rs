//! LAYOUT: offsets, position ids, boundary labels and documents of one packed batch.

use thd::{IGNORE_INDEX, LabelConvention};

use crate::{Checked, Invariant, Location, Violation};

/// A packed batch as plain data (the tensors a collator emits, int64 like PyTorch).
///
/// Only `num_tokens` and `cu_seqlens` are required; every other field is checked when present.
#[derive(Debug, Clone, Copy, Default)]
pub struct LayoutView<'a> {
    /// Stored tokens `T` (the length of `input_ids`).
    pub num_tokens: usize,
    /// Token ids, `[T]`, when at hand.
    pub input_ids: Option<&'a [i64]>,
    /// Real offsets, `B + 1` entries.
    pub cu_seqlens: &'a [i64],
    /// Storage offsets when segments are padded; real tokens of segment `i` start at
    /// `cu_seqlens_padded[i]`.
    pub cu_seqlens_padded: Option<&'a [i64]>,
    /// Position ids, `[T]`.
    pub position_ids: Option<&'a [i64]>,
    /// Labels, `[T]`, -100 where ignored.
    pub labels: Option<&'a [i64]>,
    /// How labels line up with logits.
    pub label_convention: LabelConvention,
    /// How many leading segments are real; the rest are mock. `None`: all real.
    pub num_real_seqs: Option<usize>,
    /// The first position id of every sequence: 0 for most models, `padding_idx + 1` for
    /// RoBERTa-family models (transformers #47496).
    pub position_base: i64,
}

fn violation(rule: &str) -> Violation {
    Violation::new(Invariant::Layout, rule)
}

/// Checks one offsets vector: non-empty, starts at 0, non-decreasing, int32, ends within `T`.
fn check_offsets(name: &str, cu: &[i64], tokens: usize) -> Checked {
    let Some(&first) = cu.first() else {
        return Err(violation(&format!("{name} has at least one entry"))
            .expected("[0, ...]")
            .got("[]"));
    };
    if first != 0 {
        return Err(violation(&format!("{name} starts at 0")).expected(0).got(first));
    }
    for (i, w) in cu.windows(2).enumerate() {
        if w[1] < w[0] {
            return Err(violation(&format!("{name} is non-decreasing"))
                .at(Location::default().segment(i))
                .expected(format!("{name}[{}] >= {}", i + 1, w[0]))
                .got(format!("{name}[{}] = {}", i + 1, w[1])));
        }
    }
    let last = *cu.last().expect("non-empty");
    if last > i64::from(i32::MAX) {
        return Err(violation(&format!("{name} fits int32"))
            .expected(format!("<= {}", i32::MAX))
            .got(last));
    }
    if last as u64 > tokens as u64 {
        return Err(violation(&format!("{name} ends at or before the token count"))
            .expected(format!("{name}[-1] <= {tokens}"))
            .got(format!("{name}[-1] = {last}")));
    }
    Ok(())
}

/// The storage range of segment `i`'s real tokens.
fn real_range(view: &LayoutView<'_>, i: usize) -> std::ops::Range<usize> {
    let storage = view.cu_seqlens_padded.unwrap_or(view.cu_seqlens);
    let start = storage[i] as usize;
    start..start + (view.cu_seqlens[i + 1] - view.cu_seqlens[i]) as usize
}

/// LAYOUT on one packed batch.
///
/// ```text
/// cu[0] = 0, cu[i] ≤ cu[i+1], cu[B] ≤ T, every offset ≤ i32::MAX          (real and padded)
/// padded: same B, pᵢ ≥ sᵢ
/// num_real_seqs ≤ B; every mock segment holds ≥ 1 token                 (AReaL #1103)
/// position_ids[startᵢ + j] = base + j                      j < sᵢ        (Megatron #5243, HF #47496)
/// Unshifted: labels[startᵢ + sᵢ] = -100   Shifted: labels[startᵢ + sᵢ − 1] = -100   (no label leak)
/// ```
///
/// # Errors
/// The first rule broken, with the segment and token.
///
/// # Example
/// ```
/// use properties::checks::{LayoutView, check_layout};
/// let leak = LayoutView {
///     num_tokens: 5,
///     cu_seqlens: &[0, 3, 5],
///     labels: Some(&[-100, 6, 7, 8, 9]),
///     ..Default::default()
/// };
/// let v = check_layout(&leak).unwrap_err();
/// assert_eq!(v.at.segment, Some(0));
/// assert_eq!(v.at.token, Some(3));
/// ```
pub fn check_layout(view: &LayoutView<'_>) -> Checked {
    let t = view.num_tokens;
    check_offsets("cu_seqlens", view.cu_seqlens, t)?;
    let b = view.cu_seqlens.len() - 1;
    if let Some(p) = view.cu_seqlens_padded {
        check_offsets("cu_seqlens_padded", p, t)?;
        if p.len() != view.cu_seqlens.len() {
            return Err(violation("cu_seqlens_padded has one entry per segment, like cu_seqlens")
                .expected(format!("{} entries", view.cu_seqlens.len()))
                .got(format!("{} entries", p.len())));
        }
        for i in 0..b {
            let (s, pl) = (view.cu_seqlens[i + 1] - view.cu_seqlens[i], p[i + 1] - p[i]);
            if pl < s {
                return Err(violation("padded length >= real length")
                    .at(Location::default().segment(i))
                    .expected(format!(">= {s}"))
                    .got(pl));
            }
        }
    }
    for (key, len) in [
        ("input_ids", view.input_ids.map(<[i64]>::len)),
        ("position_ids", view.position_ids.map(<[i64]>::len)),
        ("labels", view.labels.map(<[i64]>::len)),
    ] {
        if let Some(len) = len
            && len != t
        {
            return Err(violation(&format!("{key} has one entry per token")).expected(t).got(len));
        }
    }
    let n_real = view.num_real_seqs.unwrap_or(b);
    if n_real > b {
        return Err(violation("num_real_seqs <= number of segments")
            .expected(format!("<= {b}"))
            .got(n_real));
    }
    for i in n_real..b {
        let (name, storage) = match view.cu_seqlens_padded {
            Some(p) => ("cu_seqlens_padded", p),
            None => ("cu_seqlens", view.cu_seqlens),
        };
        if storage[i + 1] == storage[i] {
            return Err(violation("every mock segment holds at least one token")
                .at(Location::default().segment(i))
                .expected("a non-empty mock segment (or none at all)")
                .got(format!(
                    "a zero-length segment: {name}[{i}] = {name}[{}] = {}",
                    i + 1,
                    storage[i]
                ))
                .note("a duplicated offset appended when nothing needed padding (AReaL #1103)"));
        }
    }
    if let Some(pos) = view.position_ids {
        for i in 0..b {
            for (j, tok) in real_range(view, i).enumerate() {
                let want = view.position_base + j as i64;
                if pos[tok] != want {
                    return Err(violation("position ids restart at each segment start")
                        .at(Location::default().segment(i).token(tok))
                        .expected(want)
                        .got(pos[tok])
                        .note(format!("offset {j} within segment {i}")));
                }
            }
        }
    }
    if let Some(labels) = view.labels {
        for i in 0..b {
            let r = real_range(view, i);
            if r.is_empty() {
                continue;
            }
            let tok = match view.label_convention {
                LabelConvention::Unshifted => r.end,
                LabelConvention::Shifted => r.end - 1,
            };
            if let Some(&y) = labels.get(tok)
                && y != IGNORE_INDEX
            {
                let what = match view.label_convention {
                    LabelConvention::Unshifted => "the first label after the segment",
                    LabelConvention::Shifted => "the label of the segment's last token",
                };
                return Err(violation("no label of a segment is a token of the next segment")
                    .at(Location::default().segment(i).token(tok))
                    .expected(format!("{what} = -100"))
                    .got(format!("labels[{tok}] = {y}"))
                    .note(format!(
                        "the last token of segment {i} would learn to predict {y} across the boundary"
                    )));
            }
        }
    }
    Ok(())
}

/// LAYOUT, documents: the real segments are exactly the examples, in order.
///
/// ```text
/// #real segments = #examples;  sᵢ = len(exampleᵢ);  tokens of real segment i = exampleᵢ
/// ```
///
/// Catches a segment lost or duplicated (only the first row's offsets used with mbs > 1,
/// Megatron #5454), padding absorbed into a real segment, and truncation.
///
/// # Errors
/// The first segment that differs.
///
/// # Example
/// ```
/// use properties::checks::{LayoutView, check_documents};
/// let absorbed = LayoutView {
///     num_tokens: 6,
///     input_ids: Some(&[1, 2, 3, 4, 0, 0]),
///     cu_seqlens: &[0, 2, 6], // the static padding absorbed into the last segment
///     ..Default::default()
/// };
/// let v = check_documents(&[&[1, 2], &[3, 4]], &absorbed).unwrap_err();
/// assert_eq!(v.at.segment, Some(1));
/// ```
pub fn check_documents(examples: &[&[i64]], view: &LayoutView<'_>) -> Checked {
    // The offsets must be sound before they can address anything.
    check_layout(&LayoutView { position_ids: None, labels: None, num_real_seqs: None, ..*view })?;
    let b = view.cu_seqlens.len() - 1;
    let n_real = view.num_real_seqs.unwrap_or(b).min(b);
    if n_real != examples.len() {
        return Err(violation("one real segment per example")
            .expected(format!("{} real segments", examples.len()))
            .got(format!("{n_real} real segments (cu_seqlens {:?})", view.cu_seqlens)));
    }
    for (i, ex) in examples.iter().enumerate() {
        let r = real_range(view, i);
        if r.len() != ex.len() {
            return Err(violation("each real segment has its example's length")
                .at(Location::default().segment(i))
                .expected(ex.len())
                .got(r.len()));
        }
        if let Some(ids) = view.input_ids {
            let got = ids.get(r.clone()).unwrap_or(&[]);
            if let Some(j) = (0..ex.len()).find(|&j| got.get(j) != Some(&ex[j])) {
                return Err(violation("each real segment holds its example's tokens")
                    .at(Location::default().segment(i).token(r.start + j))
                    .expected(ex[j])
                    .got(got.get(j).map_or("nothing".to_string(), i64::to_string)));
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layout_accepts_a_padded_batch_and_names_each_broken_rule() {
        let ok = LayoutView {
            num_tokens: 8,
            cu_seqlens: &[0, 3, 5],
            cu_seqlens_padded: Some(&[0, 4, 8]),
            position_ids: Some(&[0, 1, 2, 3, 0, 1, 2, 3]),
            labels: Some(&[-100, 2, 3, -100, -100, 6, -100, -100]),
            ..Default::default()
        };
        assert_eq!(check_layout(&ok), Ok(()));
        let bad = LayoutView { cu_seqlens: &[0, 3, 2], ..ok };
        assert_eq!(check_layout(&bad).unwrap_err().rule, "cu_seqlens is non-decreasing");
        let bad = LayoutView { cu_seqlens_padded: Some(&[0, 2, 8]), ..ok };
        assert_eq!(check_layout(&bad).unwrap_err().rule, "padded length >= real length");
        let bad = LayoutView { position_ids: Some(&[0, 1, 2, 3, 4, 5, 6, 7]), ..ok };
        let v = check_layout(&bad).unwrap_err();
        assert_eq!((v.at.segment, v.at.token, v.got.as_str()), (Some(1), Some(4), "4"));
        let bad = LayoutView {
            num_real_seqs: Some(1),
            cu_seqlens: &[0, 3, 3],
            cu_seqlens_padded: Some(&[0, 8, 8]),
            position_ids: None,
            labels: None,
            ..ok
        };
        assert_eq!(
            check_layout(&bad).unwrap_err().rule,
            "every mock segment holds at least one token"
        );
    }
}
