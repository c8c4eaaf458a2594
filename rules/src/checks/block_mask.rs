//! LAYOUT, `block-mask`: a 4-D attention mask that delimits the documents of a pack.
//!
//! Some stacks hand the kernel a block-diagonal mask instead of offsets: Megatron-LM's
//! `get_ltor_masks_and_position_ids(reset_attention_mask=True)` cuts a causal `[B, 1, S, S]`
//! mask at every end of document, and Hugging Face models take a `[B, 1, S, S]` boolean or
//! additive-float mask. The reader summarises such a mask per query token as a [`BlockMask`]:
//! the hull of the keys the query may attend to and whether they are one interval.
//! [`BlockMaskSummary`] computes that summary from any dense mask, the obvious way.

use crate::Location;
use crate::checks::proof::Proof;
use crate::checks::rule::{Outcome, rule};
use crate::checks::view::{BlockMask, LayoutView};
use crate::words::plural;

rule! {
    /// A 4-D mask keeps each token to its own document. [`crate::checks::block_mask`].
    BLOCK_MASK = "block-mask", Layout, "the 4-D attention mask lets each token see exactly its own document (causal: up to itself)",
        batch: |c| Some(block_mask(c.view, c.mock)),
        layout: true,
        proof: Proof::Zoo("MaskNotReset");
}

/// The per-query summary of a dense mask, owned: what a reader (or a test) hands the
/// `block-mask` rule through [`BlockMaskSummary::view`].
///
/// # Example
/// ```
/// use rules::checks::BlockMaskSummary;
/// // One row of 3 tokens: a causal mask in which token 2 cannot see token 1.
/// let allowed = [
///     true, false, false, //
///     true, true, false, //
///     true, false, true,
/// ];
/// let s = BlockMaskSummary::from_dense(1, 3, &allowed);
/// assert_eq!(s.spans, [[0, 1], [0, 2], [0, 3]]);
/// assert_eq!(s.gaps, [2]);
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct BlockMaskSummary {
    /// Per query token, `[lo, hi)` in flattened token indices.
    pub spans: Vec<[i64; 2]>,
    /// The queries whose allowed keys are not one interval.
    pub gaps: Vec<usize>,
}

impl BlockMaskSummary {
    /// The summary of a mask of `rows` rows of `width` tokens; `allowed(b, q, k)` says whether
    /// query `q` of row `b` may attend to key `k` of the same row (a boolean mask as is, an
    /// additive mask as `value == 0`, Megatron's inverted mask as `!masked`).
    ///
    /// # Example
    /// ```
    /// use rules::checks::BlockMaskSummary;
    /// // Two rows of 2 tokens, each a causal mask: row 1's keys are tokens 2 and 3.
    /// let s = BlockMaskSummary::from_fn(2, 2, |_, q, k| k <= q);
    /// assert_eq!(s.spans, [[0, 1], [0, 2], [2, 3], [2, 4]]);
    /// assert!(s.gaps.is_empty());
    /// ```
    pub fn from_fn(
        rows: usize,
        width: usize,
        allowed: impl Fn(usize, usize, usize) -> bool,
    ) -> Self {
        let mut out = Self::default();
        for b in 0..rows {
            let base = (b * width) as i64;
            for q in 0..width {
                let (mut lo, mut hi, mut n) = (None, 0usize, 0usize);
                for k in (0..width).filter(|&k| allowed(b, q, k)) {
                    lo.get_or_insert(k);
                    hi = k + 1;
                    n += 1;
                }
                let t = b * width + q;
                match lo {
                    Some(lo) => {
                        out.spans.push([base + lo as i64, base + hi as i64]);
                        if n != hi - lo {
                            out.gaps.push(t);
                        }
                    }
                    None => out.spans.push([t as i64, t as i64]),
                }
            }
        }
        out
    }

    /// The summary of a dense boolean mask `[rows, width, width]` (the `[B, 1, S, S]` tensor
    /// flattened, `true` = may attend).
    ///
    /// # Panics
    /// If `allowed` does not hold `rows · width²` entries.
    pub fn from_dense(rows: usize, width: usize, allowed: &[bool]) -> Self {
        assert_eq!(allowed.len(), rows * width * width, "a [B, 1, S, S] mask");
        Self::from_fn(rows, width, |b, q, k| allowed[(b * width + q) * width + k])
    }

    /// The view the rule reads, under the mask's name `key`.
    ///
    /// # Example
    /// ```
    /// use rules::checks::BlockMaskSummary;
    /// let s = BlockMaskSummary::from_fn(1, 2, |_, q, k| k <= q);
    /// assert_eq!(s.view("attention_mask").spans, [[0, 1], [0, 2]]);
    /// ```
    pub fn view<'a>(&'a self, key: &'a str) -> BlockMask<'a> {
        BlockMask { key, spans: &self.spans, gaps: &self.gaps }
    }
}

/// LAYOUT, `block-mask`: the 4-D attention mask lets every real token see exactly its own
/// document, causally up to itself (or all of it, [`crate::contract::Contract::bidirectional`]).
///
/// ```text
/// real token t of segment i (real tokens startᵢ .. endᵢ):
///     spans[t] = [startᵢ, t + 1)   causal        spans[t] = [startᵢ, endᵢ)   bidirectional
///     t ∉ gaps
/// ```
///
/// Padding queries (in-slot padding, the tail, mock segments: `mock`) are not judged; a real
/// query that sees a padding key is (its span reaches past its document). Skipped without a
/// block mask, or when the mask has not one row per token (`token-counts` says so).
///
/// # Example
/// ```
/// use rules::checks::{BlockMaskSummary, IntSlice, LayoutView, block_mask};
/// // Megatron without reset_attention_mask: one causal triangle over the pack of two documents.
/// let causal = BlockMaskSummary::from_fn(1, 5, |_, q, k| k <= q);
/// let view = LayoutView {
///     num_tokens: 5,
///     cu_seqlens: IntSlice::from(&[0, 3, 5]),
///     block_mask: Some(causal.view("attention_mask")),
///     ..Default::default()
/// };
/// let v = block_mask(&view, &[false, false]).violation.unwrap();
/// assert_eq!(
///     v.to_string(),
///     "LAYOUT: the 4-D attention mask lets each token see exactly its own document (causal: up to itself)\n  \
///      at: segment 1, token 3, `attention_mask`\n  \
///      expected: keys [3, 4): segment 1's tokens 3..=3, up to the query (causal)\n  \
///      got: query 3 sees keys [0, 4)\n  \
///      note: it sees segment 0 (tokens 0..3): two documents attend to each other; 2 real tokens disagree"
/// );
/// ```
pub fn block_mask(view: &LayoutView<'_>, mock: &[bool]) -> Outcome {
    let Some(m) = view.block_mask else { return BLOCK_MASK.skipped("") };
    let n = view.num_tokens;
    if m.spans.len() != n {
        return BLOCK_MASK.skipped(format!(
            "`{}` has {} query rows for {n} tokens (token-counts)",
            m.key,
            m.spans.len()
        ));
    }
    let mut gap = vec![false; n];
    for &t in m.gaps.iter().filter(|&&t| t < n) {
        gap[t] = true;
    }
    // The real segment that owns each token (padding and mock segments own none).
    let mut owner: Vec<Option<usize>> = vec![None; n];
    for i in (0..view.segments()).filter(|&i| !mock.get(i).copied().unwrap_or(false)) {
        for t in view.real(i).filter(|&t| t < n) {
            owner[t] = Some(i);
        }
    }
    let mut first = None;
    let (mut bad, mut queries) = (0usize, 0usize);
    for t in 0..n {
        let Some(i) = owner[t] else { continue };
        queries += 1;
        let r = view.real(i);
        let want = [r.start as i64, if view.facts.bidirectional() { r.end } else { t + 1 } as i64];
        if m.spans[t] != want || gap[t] {
            bad += 1;
            first.get_or_insert((t, i, want));
        }
    }
    let how = if view.facts.bidirectional() { "bidirectional" } else { "causal, up to itself" };
    let Some((t, i, want)) = first else {
        return BLOCK_MASK.ok(format!(
            "`{}`: each of {} sees exactly its own document ({how})",
            m.key,
            plural(queries, "real token")
        ));
    };
    let got = m.spans[t];
    let r = view.real(i);
    let mut at = Location::default().segment(i).token(t).key(m.key);
    let mut query = format!("query {t}");
    if let Some(w) = view.row_width() {
        at = at.pack(t / w);
        query += &format!(" (row {}, column {})", t / w, t % w);
    }
    let expected = if view.facts.bidirectional() {
        format!("keys [{}, {}): all of segment {i}'s tokens (bidirectional)", want[0], want[1])
    } else {
        format!(
            "keys [{}, {}): segment {i}'s tokens {}..={t}, up to the query (causal)",
            want[0], want[1], r.start
        )
    };
    let got_text = if got[0] >= got[1] {
        format!("{query} sees no key")
    } else {
        let hole = if gap[t] { ", not one interval" } else { "" };
        format!("{query} sees keys [{}, {}){hole}", got[0], got[1])
    };
    let mut why = reasons(view, &owner, mock, t, i, got, gap[t]);
    why.push(plural(bad, "real token") + if bad == 1 { " disagrees" } else { " disagree" });
    BLOCK_MASK.violated(
        BLOCK_MASK.violation().at(at).expected(expected).got(got_text).note(why.join("; ")),
    )
}

/// What is wrong with query `t` of segment `i` seeing the hull `got`, in words.
fn reasons(
    view: &LayoutView<'_>,
    owner: &[Option<usize>],
    mock: &[bool],
    t: usize,
    i: usize,
    got: [i64; 2],
    gap: bool,
) -> Vec<String> {
    let n = view.num_tokens as i64;
    let own = view.real(i);
    let [lo, hi] = got;
    if lo >= hi {
        return vec!["the query sees no key, not even itself (a fully masked row)".into()];
    }
    let mut why = Vec::new();
    if lo < 0 || hi > n {
        why.push(format!("the span reaches past the {n} tokens"));
    }
    // Keys of the hull outside the query's own document: other documents, or padding.
    let hull = lo.clamp(0, n) as usize..hi.clamp(0, n) as usize;
    let outside = hull.filter(|k| !own.contains(k));
    let (mut others, mut pad) = (Vec::<usize>::new(), None);
    for k in outside {
        match owner[k] {
            Some(j) if !others.contains(&j) => others.push(j),
            Some(_) => {}
            None => {
                pad.get_or_insert(k);
            }
        }
    }
    let span = if gap { "its span reaches" } else { "it sees" };
    for &j in &others {
        let r = view.real(j);
        why.push(format!(
            "{span} segment {j} (tokens {}..{}): two documents attend to each other",
            r.start, r.end
        ));
    }
    if let Some(k) = pad {
        let what = match view.segment_of(k) {
            Some(s) if mock.get(s).copied().unwrap_or(false) => format!("mock segment {s}"),
            _ => "padding".into(),
        };
        why.push(format!("{span} token {k}, {what}: a real token attends to a pad key"));
    }
    if !(lo..hi).contains(&(t as i64)) {
        why.push("the token cannot see itself".into());
    } else if !view.facts.bidirectional() && hi > t as i64 + 1 && (hi as usize) <= own.end {
        why.push("it sees later tokens of its own document: the mask is not causal".into());
    }
    if lo > own.start as i64 || (view.facts.bidirectional() && hi < own.end as i64) {
        why.push(format!("it misses tokens of its own document ({}..{})", own.start, own.end));
    }
    if gap {
        why.push("its keys are not one interval: the block has a hole".into());
    }
    why
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The contract of a bidirectional (encoder) or a causal model.
    fn both_ways(bidirectional: bool) -> crate::contract::Contract {
        crate::contract::Contract {
            attention: bidirectional.then_some(crate::contract::Attention::Bidirectional),
            ..Default::default()
        }
    }
    use crate::checks::IntSlice;

    fn view<'a>(cu: &'a [i64], padded: Option<&'a [i64]>, m: BlockMask<'a>) -> LayoutView<'a> {
        LayoutView {
            num_tokens: m.spans.len(),
            cu_seqlens: IntSlice::from(cu),
            cu_seqlens_padded: padded.map(IntSlice::from),
            block_mask: Some(m),
            ..Default::default()
        }
    }

    /// The block-diagonal mask of `docs` (real ranges), padding seeing itself only.
    fn blocks(n: usize, docs: &[(usize, usize)], bidirectional: bool) -> BlockMaskSummary {
        BlockMaskSummary::from_fn(1, n, |_, q, k| {
            match docs.iter().find(|d| (d.0..d.1).contains(&q)) {
                Some(&(a, b)) => (a..b).contains(&k) && (bidirectional || k <= q),
                None => k == q,
            }
        })
    }

    #[test]
    fn a_block_diagonal_mask_holds_causal_and_bidirectional() {
        // Two documents of 3 and 2 tokens, each padded by one token (slots of 4 and 3).
        let (cu, padded) = ([0, 3, 5], [0, 4, 7]);
        for bidirectional in [false, true] {
            let s = blocks(7, &[(0, 3), (4, 6)], bidirectional);
            let base = view(&cu, Some(&padded), s.view("mask"));
            let v = LayoutView { facts: both_ways(bidirectional), ..base };
            let o = block_mask(&v, &[false, false]);
            assert_eq!(o.status, crate::checks::Status::Ok, "{o:?}");
            assert!(o.detail.contains("each of 5 real tokens"), "{o:?}");
            // The other profile's mask is wrong: causal where bidirectional is due, and back.
            let other = LayoutView { facts: both_ways(!bidirectional), ..v };
            let v = block_mask(&other, &[false, false]).violation.unwrap();
            assert_eq!((v.at.segment, v.at.token), (Some(0), Some(0)), "{v}");
        }
        // Causal given to a bidirectional profile: token 0 misses the rest of its document.
        let s = blocks(7, &[(0, 3), (4, 6)], false);
        let v = LayoutView { facts: both_ways(true), ..view(&cu, Some(&padded), s.view("mask")) };
        let v = block_mask(&v, &[false, false]).violation.unwrap();
        assert_eq!(v.expected, "keys [0, 3): all of segment 0's tokens (bidirectional)");
        assert!(v.note.as_deref().unwrap().contains("misses tokens of its own document"), "{v}");
        // Bidirectional given to a causal profile: token 0 sees the future.
        let s = blocks(7, &[(0, 3), (4, 6)], true);
        let v = block_mask(&view(&cu, Some(&padded), s.view("mask")), &[false, false]);
        let v = v.violation.unwrap();
        assert_eq!(v.got, "query 0 sees keys [0, 3)");
        assert!(v.note.as_deref().unwrap().starts_with("it sees later tokens"), "{v}");
    }

    #[test]
    fn merged_documents_name_the_document_reached() {
        // The second and third documents form one block: document 2 sees document 1.
        let s = blocks(6, &[(0, 2), (2, 6)], false);
        let v = block_mask(&view(&[0, 2, 4, 6], None, s.view("attention_mask")), &[false; 3]);
        let v = v.violation.unwrap();
        assert_eq!((v.at.segment, v.at.token), (Some(2), Some(4)));
        assert_eq!(v.got, "query 4 sees keys [2, 5)");
        assert_eq!(
            v.note.as_deref(),
            Some(
                "it sees segment 1 (tokens 2..4): two documents attend to each other; \
                 2 real tokens disagree"
            )
        );
    }

    #[test]
    fn padding_keys_self_blindness_and_holes_are_named() {
        // One document of 2 tokens and a pad token; the document's second token sees the pad.
        let spans = [[0, 1], [0, 3], [2, 3]];
        let v = block_mask(
            &view(&[0, 2], None, BlockMask { key: "m", spans: &spans, gaps: &[] }),
            &[false],
        );
        let note = v.violation.unwrap().note.unwrap();
        assert!(note.starts_with("it sees token 2, padding: a real token attends to a pad key"));
        // Token 1 sees only token 0: it cannot see itself.
        let spans = [[0, 1], [0, 1], [2, 3]];
        let v = block_mask(
            &view(&[0, 2], None, BlockMask { key: "m", spans: &spans, gaps: &[] }),
            &[false],
        );
        let v = v.violation.unwrap();
        assert!(v.note.as_deref().unwrap().starts_with("the token cannot see itself"), "{v}");
        // A fully masked real row.
        let spans = [[0, 1], [1, 1], [2, 3]];
        let v = block_mask(
            &view(&[0, 2], None, BlockMask { key: "m", spans: &spans, gaps: &[] }),
            &[false],
        );
        let v = v.violation.unwrap();
        assert_eq!(v.got, "query 1 sees no key");
        // The right hull with a hole in it.
        let spans = [[0, 1], [0, 2], [0, 3], [3, 4]];
        let v = block_mask(
            &view(&[0, 3], None, BlockMask { key: "m", spans: &spans, gaps: &[2] }),
            &[false],
        );
        let v = v.violation.unwrap();
        assert_eq!(
            (v.at.token, v.got.as_str()),
            (Some(2), "query 2 sees keys [0, 3), not one interval")
        );
        // Padding queries are not judged: the pad row may see anything.
        let spans = [[0, 1], [0, 2], [0, 3]];
        let o = block_mask(
            &view(&[0, 2], None, BlockMask { key: "m", spans: &spans, gaps: &[2] }),
            &[false],
        );
        assert!(!o.is_violated(), "{o:?}");
    }

    #[test]
    fn rows_are_named_and_mock_segments_are_padding() {
        // Two rows of 3: row 0 one document of 3, row 1 a document of 2 and a mock of 1; the
        // mask of row 1 lets the mock token be seen by nobody and see itself.
        let s = BlockMaskSummary::from_fn(2, 3, |b, q, k| match b {
            0 => k <= q,
            _ => (q < 2 && k <= q) || (q == 2 && k == 2),
        });
        let v = LayoutView {
            rows: 2,
            num_real_seqs: Some(2),
            ..view(&[0, 3, 5, 6], None, s.view("attention_mask"))
        };
        assert!(!block_mask(&v, &[false, false, true]).is_violated());
        // Row 1 built as one causal triangle but for the document's second token, which also
        // sees the mock token after it.
        let spans = [[0, 1], [0, 2], [0, 3], [3, 4], [3, 6], [3, 6]];
        let m = BlockMask { key: "attention_mask", spans: &spans, gaps: &[] };
        let v = block_mask(&LayoutView { block_mask: Some(m), ..v }, &[false, false, true]);
        let v = v.violation.unwrap();
        assert_eq!((v.at.pack, v.at.segment, v.at.token), (Some(1), Some(1), Some(4)));
        assert_eq!(v.got, "query 4 (row 1, column 1) sees keys [3, 6)");
        assert!(v.note.as_deref().unwrap().contains("token 5, mock segment 2"), "{v}");
    }

    #[test]
    fn a_mask_of_the_wrong_shape_is_token_counts() {
        let spans = [[0, 1], [0, 2]];
        let v = view(&[0, 3], None, BlockMask { key: "attention_mask", spans: &spans, gaps: &[] });
        let v = LayoutView { num_tokens: 3, ..v };
        assert_eq!(block_mask(&v, &[false]).status, crate::checks::Status::Skipped);
        let o = crate::checks::token_counts(&v);
        assert_eq!(o.detail, "`attention_mask`: expected 3 query rows (B·S), got 2 query rows");
        // Spans outside the tokens are a violation, never a panic.
        let spans = [[-4, 1], [0, 9], [7, 2]];
        let v = view(&[0, 3], None, BlockMask { key: "m", spans: &spans, gaps: &[5, 1] });
        let v = block_mask(&v, &[false]).violation.unwrap();
        assert!(v.note.as_deref().unwrap().contains("past the 3 tokens"), "{v}");
    }
}
