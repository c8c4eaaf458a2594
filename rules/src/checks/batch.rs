//! Every rule a batch file can prove on its own, run together: what `thdcheck check` and
//! `thdcheck fuzz collator` print for one pack.
//!
//! | id | invariant | function |
//! |---|---|---|
//! | `offsets` | LAYOUT | [`offsets`](crate::checks::offsets) / [`check_offsets`](crate::checks::check_offsets) |
//! | `token-counts` | LAYOUT | [`token_counts`](crate::checks::token_counts) |
//! | `padded-slots` | LAYOUT | [`padded_slots`](crate::checks::padded_slots) |
//! | `qk-offsets` | LAYOUT | [`qk_offsets`](crate::checks::qk_offsets) |
//! | `row-slots` | LAYOUT | [`row_slots`](crate::checks::row_slots) |
//! | `max-seqlen` | LAYOUT | [`max_seqlen`](crate::checks::max_seqlen) |
//! | `num-real-seqs` | LAYOUT | [`num_real_seqs`](crate::checks::num_real_seqs) |
//! | `mock-nonempty` | LAYOUT | [`mock_nonempty`](crate::checks::mock_nonempty) |
//! | `position-ids` | LAYOUT | [`position_ids`](crate::checks::position_ids) |
//! | `cross-doc-label` | LAYOUT | [`cross_doc_label`](crate::checks::cross_doc_label) |
//! | `pad-labels` | LOSS | [`pad_labels`] |
//! | `mask` | LAYOUT | [`mask`](crate::checks::mask) |
//! | `block-mask` | LAYOUT | [`block_mask`](crate::checks::block_mask) (with a 4-D mask) |
//! | `seq-idx` | LAYOUT | [`seq_idx`](crate::checks::seq_idx) |
//! | `eos-delimited` | LAYOUT | [`eos_delimited`](crate::checks::eos_delimited) (documents that end with the EOS) |
//! | `mock-marked` | MFU-PAD | [`mock_marked`] |
//! | `label-targets` | LOSS | [`label_targets`] (with `causal`) |
//! | `pad-multiple` | MFU-PAD | [`pad_multiple`] (with `pad_to_multiple_of`) |
//! | `cp-shard` | CP-SHARD | [`cp_shard`] (with `cp_size`) |

use serde::Serialize;
use thd::{IGNORE_INDEX, LabelConvention};

use crate::Location;
use crate::checks::WorkSums;
use crate::checks::layout;
use crate::checks::rule::{BatchInput, Outcome, Status};
use crate::checks::rules::{CP_SHARD, LABEL_TARGETS, MOCK_MARKED, PAD_LABELS, PAD_MULTIPLE, RULES};
use crate::checks::shard_layout::zigzag_ranges;
use crate::checks::view::{BatchOptions, LayoutView};
use crate::contract::{BoundaryLabelsFact, DocumentAttention};
use crate::words::plural;

/// Layout facts of one pack: what the report shows above the rules.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct BatchFacts {
    /// Rows of the stored tensors.
    pub rows: usize,
    /// Stored tokens `T`.
    pub tokens: usize,
    /// Segments `B`, mock ones included.
    pub segments: usize,
    /// Real segments: the documents, each holding at least one token.
    pub real_segments: usize,
    /// Zero-length segments that are no mock segment (a repeated offset): no document, counted
    /// apart wherever they sit (left out of the JSON when there are none).
    #[serde(skip_serializing_if = "is_zero")]
    pub empty_segments: usize,
    /// Mock segments (padding dressed as sequences).
    pub mock_segments: usize,
    /// Tokens of real segments (real lengths).
    pub real_tokens: u64,
    /// Tokens of mock segments.
    pub mock_tokens: u64,
    /// Every other token: in-slot padding and the tail.
    pub pad_tokens: u64,
    /// Loss positions with a valid target, if the batch has labels.
    pub valid_labels: Option<u64>,
    /// Real segments with at least one valid target in their real tokens (AReaL's `n_seqs`), if
    /// the batch has labels. Under the unshifted convention a segment's first label is the
    /// previous position's target, so it does not count for the segment.
    pub labelled_segments: Option<u64>,
    /// Label convention used (`unshifted`: `labels[t]` is token `t`; `shifted`: already rolled).
    pub labels: &'static str,
    /// Useful attention work: real segments at real lengths.
    pub useful: WorkSums,
    /// Hardware attention work of a varlen kernel: every slot, mock ones included.
    pub hardware: WorkSums,
    /// Hardware attention work if each row is one sequence (no offsets passed).
    pub whole_pack: WorkSums,
}

fn is_zero(n: &usize) -> bool {
    *n == 0
}

/// The facts and rule outcomes of one pack.
#[derive(Debug, Clone, Serialize)]
pub struct BatchReport {
    /// Layout facts.
    pub facts: BatchFacts,
    /// Every rule that applies, in report order.
    pub outcomes: Vec<Outcome>,
}

/// Which segments are mock: past `num_real_seqs` when stated (and in range), else the non-empty
/// segments whose real tokens are all masked out and carry no label.
pub fn mock_segments(view: &LayoutView<'_>) -> Vec<bool> {
    let n = view.segments();
    match view.num_real_seqs {
        Some(k) if k <= n => (0..n).map(|i| i >= k).collect(),
        Some(_) => vec![false; n],
        None => (0..n).map(|i| all_padding(view, i)).collect(),
    }
}

/// A non-empty segment whose real tokens are all masked out (or, without a mask, all the pad
/// id) and carry no label.
fn all_padding(view: &LayoutView<'_>, i: usize) -> bool {
    let r = view.real(i);
    let padding = match (view.mask, view.facts.pad_token_id, view.input_ids) {
        (Some(mask), _, _) => mask[r.clone()].iter().all(|&m| !m),
        (None, Some(pad), Some(ids)) => ids.slice(r.clone()).iter().all(|x| x == pad),
        _ => return false,
    };
    // Where the stack puts its padding as a segment of its own (a profile's `padding_segments`),
    // a row's final segment of pad ids is that padding whatever its labels: trained labels on it
    // are `pad-labels`' violation, not a document of pad tokens.
    let by_design = view.facts.padding_segment_by_design()
        && view.mask.is_none()
        && (r.end == view.num_tokens || view.row_width().is_some_and(|w| r.end.is_multiple_of(w)));
    !r.is_empty()
        && padding
        && (by_design || view.labels.is_none_or(|l| l.slice(r).iter().all(|x| x == IGNORE_INDEX)))
}

/// Under `padding_segments = "per-row"` with a pad id and no mask: the first row whose last
/// document ends with a run of pad ids carrying no label (two or more under shifted labels,
/// whose last label is -100 anyway), i.e. the row's padding absorbed into its last document
/// instead of a segment of its own: `(segment, first pad token, end)`.
fn absorbed_padding(view: &LayoutView<'_>, mock: &[bool]) -> Option<(usize, usize, usize)> {
    let (Some(pad), Some(ids), None) = (view.facts.pad_token_id, view.input_ids, view.mask) else {
        return None;
    };
    if !(view.facts.padding_segment_by_design() && view.facts.padding_segment_per_row()) {
        return None;
    }
    let width = view.row_width().unwrap_or(view.num_tokens.max(1));
    let least = match view.label_convention {
        LabelConvention::Shifted => 2,
        LabelConvention::Unshifted => 1,
    };
    (0..view.segments()).find_map(|i| {
        let r = view.real(i);
        let ends_row = r.end == view.num_tokens || r.end.is_multiple_of(width);
        if mock[i] || r.is_empty() || !ends_row {
            return None;
        }
        let run = ids.slice(r.clone()).iter().rev().take_while(|&x| x == pad).count();
        let start = r.end - run;
        let unlabelled =
            view.labels.is_none_or(|l| l.slice(start..r.end).iter().all(|x| x == IGNORE_INDEX));
        (run >= least && run < r.len() && unlabelled).then_some((i, start, r.end))
    })
}

/// The layout facts of a pack whose offsets hold ([`layout::offsets`]).
pub fn batch_facts(view: &LayoutView<'_>, mock: &[bool]) -> BatchFacts {
    let n = view.segments();
    let (mut real_tokens, mut mock_tokens) = (0u64, 0u64);
    // Accumulated segment by segment (exact integer sums): no vector of lengths is built.
    let (mut useful, mut hardware) = (WorkSums::default(), WorkSums::default());
    for i in 0..n {
        let len = view.real(i).len() as u64;
        if mock[i] {
            mock_tokens += view.slot(i).len() as u64;
        } else {
            real_tokens += len;
            useful.add(len);
        }
        hardware.add(view.slot(i).len() as u64);
    }
    let t = view.num_tokens as u64;
    // Unshifted labels are read one position on, within each row of a `[B, S]` batch (Hugging
    // Face shifts per row): a row's first label is no target.
    let width = view.row_width().unwrap_or(view.num_tokens.max(1));
    // Counted over all tokens, then each row's first position taken back out: a modulo per
    // token made this loop the hottest of `check` (35 % of a 1e6-token batch's profile).
    let valid_labels = view.labels.map(|l| {
        let valid = l.iter().filter(|&x| x != IGNORE_INDEX).count();
        let row_firsts = match view.label_convention {
            LabelConvention::Unshifted => {
                (0..l.len()).step_by(width).filter(|&t| l.at(t) != IGNORE_INDEX).count()
            }
            LabelConvention::Shifted => 0,
        };
        // The loss masks each document's last prediction itself (`boundary_labels =
        // "masked-by-loss"`): a label there is never trained, so not counted.
        let boundaries = if view.facts.boundary_labels == Some(BoundaryLabelsFact::MaskedByLoss) {
            let at = |i: usize| match view.label_convention {
                LabelConvention::Shifted => view.real(i).end.checked_sub(1),
                // The next document's first label, unless it opens a row (left out above).
                LabelConvention::Unshifted => (i + 1 < n)
                    .then(|| view.real(i + 1).start)
                    .filter(|&t| !t.is_multiple_of(width)),
            };
            (0..n)
                .filter(|&i| !view.real(i).is_empty())
                .filter_map(at)
                .filter(|&t| l.get(t).is_some_and(|x| x != IGNORE_INDEX))
                .count()
        } else {
            0
        };
        (valid - row_firsts - boundaries) as u64
    });
    let labelled_segments = view.labels.map(|l| {
        let skip = usize::from(view.label_convention == LabelConvention::Unshifted);
        (0..n)
            .filter(|&i| {
                !mock[i] && l.slice(view.real(i)).iter().skip(skip).any(|x| x != IGNORE_INDEX)
            })
            .count() as u64
    });
    // Each row as one sequence (a `[B, S]` batch is B sequences of S to a dense kernel).
    let whole_pack = if view.num_tokens == 0 {
        WorkSums::of([0])
    } else {
        WorkSums::of(std::iter::repeat_n(width as u64, view.num_tokens / width))
    };
    BatchFacts {
        rows: view.rows.max(1),
        tokens: view.num_tokens,
        segments: n,
        real_segments: (0..n).filter(|&i| !mock[i] && !view.real(i).is_empty()).count(),
        empty_segments: (0..n).filter(|&i| !mock[i] && view.real(i).is_empty()).count(),
        mock_segments: mock.iter().filter(|&&m| m).count(),
        real_tokens,
        mock_tokens,
        pad_tokens: t.saturating_sub(real_tokens + mock_tokens),
        valid_labels,
        labelled_segments,
        labels: match view.label_convention {
            LabelConvention::Unshifted => "unshifted",
            LabelConvention::Shifted => "shifted",
        },
        useful,
        // Documents that attend to each other by design: the kernel computes every row whole.
        hardware: if view.facts.document_attention == Some(DocumentAttention::Shared) {
            whole_pack
        } else {
            hardware
        },
        whole_pack,
    }
}

/// Runs every rule on one pack, in report order. Rules that need what the batch lacks are
/// skipped; skips with nothing to say are left out.
///
/// # Example
/// ```
/// use rules::checks::{BatchOptions, IntSlice, LayoutView, check_batch};
/// let view = LayoutView {
///     num_tokens: 5,
///     input_ids: Some(IntSlice::from(&[5, 6, 7, 8, 9])),
///     cu_seqlens: IntSlice::from(&[0, 3, 5]),
///     position_ids: Some(IntSlice::from(&[0, 1, 2, 3, 4])),
///     ..Default::default()
/// };
/// let report = check_batch(&view, &BatchOptions::default());
/// let violated: Vec<_> = report.outcomes.iter().filter(|o| o.is_violated()).map(|o| o.rule).collect();
/// assert_eq!(violated, ["position-ids"]);
/// assert_eq!(report.facts.useful.sum_squares, 13);
/// ```
pub fn check_batch(view: &LayoutView<'_>, opts: &BatchOptions) -> BatchReport {
    let off = layout::offsets(view);
    let counts = layout::token_counts(view);
    // The view's own tensors: a side tensor of another length (log-probs one short) leaves the
    // layout judgeable, and every other rule runs beside its `token-counts` violation.
    let core = LayoutView { side_tensors: &[], ..*view };
    if off.is_violated() || layout::token_counts(&core).is_violated() {
        // Nothing else can address the tokens.
        return BatchReport { facts: BatchFacts::default(), outcomes: vec![off, counts] };
    }
    let mock = mock_segments(view);
    // The registry's rules of one pack, in its order (`offsets` and `token-counts` above).
    let input = BatchInput { view, mock: &mock, opts };
    let mut outcomes: Vec<Outcome> =
        RULES.iter().filter_map(|r| r.batch.and_then(|run| run(&input))).collect();
    if counts.is_violated() {
        outcomes.insert(0, counts);
    }
    outcomes.retain(|o| !(o.status == Status::Skipped && o.detail.is_empty()));
    BatchReport { facts: batch_facts(view, &mock), outcomes }
}

/// LOSS, `pad-labels`: padding and mock tokens carry label -100.
pub fn pad_labels(view: &LayoutView<'_>, mock: &[bool]) -> Outcome {
    let k = view.keys();
    let Some(labels) = view.labels else { return PAD_LABELS.skipped("") };
    // The padding tokens range by range: no flag per token is built.
    let mut bad = view
        .padding_ranges(mock)
        .flatten()
        .filter_map(|t| labels.get(t).filter(|&l| l != IGNORE_INDEX).map(|l| (t, l)));
    let Some((t, l)) = bad.next() else {
        return PAD_LABELS.ok("padding and mock tokens carry -100");
    };
    let n = 1 + bad.count();
    let seg = view.segment_of(t);
    let what = match seg {
        Some(i) if mock[i] => format!("mock (segment {i})"),
        _ => "padding".into(),
    };
    let mut at = Location::default().token(t).key(&k.labels);
    at.segment = seg;
    PAD_LABELS.violated(
        PAD_LABELS
            .violation()
            .at(at)
            .expected(format!("-100 on a {what} token"))
            .got(format!("{}[{t}] = {l}", k.labels))
            .note(format!(
                "the loss trains on padding ({} with a label)",
                plural(n, "padding token")
            )),
    )
}

/// MFU-PAD, `mock-marked`: an all-padding (mock) segment is marked by `num_real_seqs`, and a
/// segment past `num_real_seqs` carries no valid label.
pub fn mock_marked(view: &LayoutView<'_>, mock: &[bool]) -> Outcome {
    let k = view.keys();
    let n = view.segments();
    match view.num_real_seqs {
        Some(kk) if kk > n => {
            MOCK_MARKED.skipped("num_real_seqs exceeds the segments (num-real-seqs)")
        }
        Some(kk) => {
            for i in kk..n {
                let valid = view.labels.map_or(0, |l| {
                    l.slice(view.real(i)).iter().filter(|&x| x != IGNORE_INDEX).count()
                });
                if valid > 0 {
                    return MOCK_MARKED.violated(
                        MOCK_MARKED
                            .violation()
                            .at(Location::default().segment(i).key(&k.num_real_seqs))
                            .expected(format!(
                                "no valid label on segment {i}, past num_real_seqs = {kk} (mock)"
                            ))
                            .got(plural(valid, "valid label")),
                    );
                }
            }
            let notes = (0..kk)
                .filter(|&i| all_padding(view, i))
                .map(|i| {
                    format!("segment {i} is all padding but num_real_seqs = {kk} counts it as real")
                })
                .collect();
            MOCK_MARKED
                .ok(format!(
                    "num_real_seqs = {kk}: {} excluded from useful work",
                    plural(n - kk, "mock segment")
                ))
                .with_notes(notes)
        }
        None => {
            // The mock segments, in order, read again from `mock` each time they are needed
            // rather than collected (a batch may hold 10⁸ segments).
            let mocks = || (0..n).filter(|&i| mock[i]);
            if let Some((seg, start, end)) = absorbed_padding(view, mock) {
                let pad = view.facts.pad_token_id.unwrap_or_default();
                return MOCK_MARKED.violated(
                    MOCK_MARKED
                        .violation()
                        .at(Location::default().segment(seg).token(start).key(&k.cu_seqlens))
                        .expected("the row's padding as a segment of its own (padding_segments = per-row)")
                        .got(format!(
                            "tokens {start}..{end} (the pad id {pad}, no label) end segment {seg}: \
                             its padding counted as useful work"
                        ))
                        .note("a collator that forgot to restart positions (or offsets) at its padding"),
                );
            }
            let Some(i) = mocks().next() else {
                return if view.mask.is_none() && view.facts.pad_token_id.is_none() {
                    MOCK_MARKED.skipped(
                        "no mask, no num_real_seqs and no pad id: a mock segment cannot be told \
                         apart (state --pad-token-id or metadata pad_token_id)",
                    )
                } else {
                    MOCK_MARKED.ok("no all-padding segment")
                };
            };
            let r = view.slot(i);
            let n_mock = mocks().count();
            let width = view.row_width().unwrap_or(view.num_tokens.max(1));
            // Padding belongs at the end of the pack, or of its row in a `[B, S]` batch.
            let mut notes = Vec::new();
            let at_an_end =
                |j: usize, m: usize| m == n - n_mock + j || view.slot(m).end.is_multiple_of(width);
            if mocks().enumerate().any(|(j, m)| !at_an_end(j, m)) {
                notes.push(
                    "mock segments are not all at the end of the pack or of their row".into(),
                );
            }
            if view.facts.padding_segment_by_design() && view.facts.padding_segment_per_row() {
                // One padding segment per row, ending the row: a second one in a row is the
                // padding cut into pieces (axolotl #2739: one FlashAttention sequence per pad).
                let mut seen = std::collections::BTreeSet::new();
                for m in mocks() {
                    let s = view.slot(m);
                    let row = s.start / width;
                    if !seen.insert(row)
                        || !(s.end.is_multiple_of(width) || s.end == view.num_tokens)
                    {
                        return MOCK_MARKED.violated(
                            MOCK_MARKED
                                .violation()
                                .at(Location::default()
                                    .segment(m)
                                    .token(s.start)
                                    .key(&k.cu_seqlens))
                                .expected("at most one padding segment per row, ending the row")
                                .got(format!(
                                    "{} of padding in row {row}, segment {m} at tokens {}..{}",
                                    plural(
                                        mocks()
                                            .filter(|&x| view.slot(x).start / width == row)
                                            .count(),
                                        "segment"
                                    ),
                                    s.start,
                                    s.end
                                ))
                                .note("each pad token its own sequence (axolotl #2739)"),
                        );
                    }
                }
            }
            if view.facts.padding_segment_by_design() {
                return MOCK_MARKED
                    .ok(format!(
                        "{} of padding (tokens {}..{} first), by design: the stack gives the \
                         kernels its pack padding as a final segment; excluded from useful work",
                        plural(n_mock, "segment"),
                        r.start,
                        r.end
                    ))
                    .with_notes(notes);
            }
            MOCK_MARKED
                .violated(
                    MOCK_MARKED
                        .violation()
                        .at(Location::default().segment(i).token(r.start).key(&k.cu_seqlens))
                        .expected(format!("num_real_seqs = {} marking the mock segment", n - n_mock))
                        .got(format!(
                            "segment {i} (tokens {}..{}) is all padding ({}, labels -100) and unmarked",
                            r.start,
                            r.end,
                            match (view.mask, view.facts.pad_token_id) {
                                (None, Some(pad)) => format!("every token the pad id {pad}"),
                                _ => "mask 0".into(),
                            }
                        ))
                        .note(format!(
                            "a logger that counts `{}` counts it as useful work (bionemo #1561); {} \
                             excluded here",
                            k.cu_seqlens,
                            plural(n_mock, "mock segment")
                        )),
                )
                .with_notes(notes)
        }
    }
}

/// LOSS, `label-targets` (causal LM): a valid label is the next token of the segment (shifted)
/// or the token itself (unshifted). Catches labels rolled after a CP split, or across the pack.
pub fn label_targets(view: &LayoutView<'_>, mock: &[bool]) -> Outcome {
    let k = view.keys();
    let (Some(labels), Some(ids)) = (view.labels, view.input_ids) else {
        return LABEL_TARGETS.skipped("no labels");
    };
    for i in 0..view.segments() {
        if mock[i] {
            continue;
        }
        let r = view.real(i);
        for t in r.clone() {
            let l = labels.at(t);
            if l == IGNORE_INDEX {
                continue;
            }
            // The boundary label (a shifted segment's last, an unshifted segment's first) is
            // `cross-doc-label`'s: -100, a per-sample EOS target (Automodel) or a separator
            // (transformers `separator_id`) are all valid there; the next document is not.
            let want = match view.label_convention {
                LabelConvention::Shifted if t + 1 < r.end => ids.at(t + 1),
                LabelConvention::Unshifted if t > r.start => ids.at(t),
                _ => continue,
            };
            let what = match view.label_convention {
                LabelConvention::Shifted => "the next token",
                LabelConvention::Unshifted => "the token itself",
            };
            if want != l {
                let shown = want;
                return LABEL_TARGETS.violated(
                    LABEL_TARGETS
                        .violation()
                        .at(Location::default().segment(i).token(t).key(&k.labels))
                        .expected(format!(
                            "{shown} ({what}, offset {} of the segment)",
                            t - r.start
                        ))
                        .got(format!("{}[{t}] = {l}", k.labels))
                        .note("labels rolled after a split, or across segments?"),
                );
            }
        }
    }
    LABEL_TARGETS.ok("every valid label is the token it must predict")
}

/// MFU-PAD, `pad-multiple`: `T` is a multiple of `m`.
pub fn pad_multiple(view: &LayoutView<'_>, m: usize) -> Outcome {
    let t = view.num_tokens;
    if m == 0 {
        return PAD_MULTIPLE.skipped("pad_to_multiple_of 0");
    }
    if t.is_multiple_of(m) {
        return PAD_MULTIPLE.ok(format!("T = {t} is a multiple of {m}"));
    }
    PAD_MULTIPLE.violated(
        PAD_MULTIPLE
            .violation()
            .at(Location::default().token(t))
            .expected(format!("a multiple of {m}"))
            .got(format!("T = {t} is not a multiple of {m} (remainder {})", t % m)),
    )
}

/// CP-SHARD, `cp-shard`: with `cp` ranks, every slot splits into `2·cp` equal zigzag chunks, the
/// slots cover every stored token, and every token lands on exactly one rank. The zigzag is
/// computed here the obvious way ([`zigzag_positions`](crate::checks::zigzag_positions)), never
/// by the sharder under test.
pub fn cp_shard(view: &LayoutView<'_>, cp: usize) -> Outcome {
    let k = view.keys();
    if cp == 0 {
        return CP_SHARD.violated(CP_SHARD.violation().expected("cp >= 1").got("cp = 0"));
    }
    let key = if view.cu_seqlens_padded.is_some() { &k.cu_seqlens_padded } else { &k.cu_seqlens };
    // The slot lengths, read from the offsets as they are needed (no vector per segment).
    let storage = || (0..view.segments()).map(|i| view.slot(i).len() as u32 as usize);
    if cp > 1
        && let Some((i, p)) = storage().enumerate().find(|&(_, p)| !p.is_multiple_of(2 * cp))
    {
        return CP_SHARD.violated(
            CP_SHARD
                .violation()
                .with_cp(cp)
                .at(Location::default().cp(cp).segment(i).token(view.slot(i).start).key(key))
                .expected(format!("a slot length divisible by 2*cp = {}", 2 * cp))
                .got(format!(
                    "segment {i}: slot of {p} tokens is not divisible by 2*cp = {}",
                    2 * cp
                ))
                .note("pad each sequence to a multiple of 2·cp before the split; a sharder that truncates drops tokens"),
        );
    }
    let covered: usize = storage().sum();
    if covered != view.num_tokens {
        return CP_SHARD.violated(
            CP_SHARD
                .violation()
                .at(Location::default().cp(cp).token(covered).key(key))
                .expected(format!("slots covering all T = {} tokens", view.num_tokens))
                .got(format!("tokens {covered}..{} lie past the last slot", view.num_tokens))
                .note(
                    "TransformerEngine's partitioner treats them as part of the last sequence and \
                     hands the ranks overlapping tokens",
                ),
        );
    }
    // Two bits per token, not a counter: held at least once, held more than once. The count
    // of the first token held other than once is taken again for the message.
    let (mut once, mut more) = (Bits::new(view.num_tokens), Bits::new(view.num_tokens));
    for rank in 0..cp {
        zigzag_ranges(storage(), cp, rank, |r| {
            for g in r {
                if once.get(g) {
                    more.set(g);
                } else {
                    once.set(g);
                }
            }
        });
    }
    if let Some(t) = (0..view.num_tokens).find(|&t| !once.get(t) || more.get(t)) {
        let mut ranks = 0usize;
        for rank in 0..cp {
            zigzag_ranges(storage(), cp, rank, |r| ranks += usize::from(r.contains(&t)));
        }
        return CP_SHARD.violated(
            CP_SHARD
                .violation()
                .at(Location::default().cp(cp).token(t))
                .expected("on exactly 1 rank")
                .got(format!("token {t} is on {ranks} ranks")),
        );
    }
    CP_SHARD.ok(format!(
        "zigzag over cp = {cp}: {} × {} tokens, every token on exactly one rank",
        plural(cp, "rank"),
        view.num_tokens / cp
    ))
}

/// The rules [`check_layout`] runs, in order: a batch's layout on its own.
pub fn layout_rules(view: &LayoutView<'_>) -> Vec<Outcome> {
    let off = layout::offsets(view);
    if off.is_violated() {
        return vec![off];
    }
    let counts = layout::token_counts(view);
    if counts.is_violated() {
        return vec![off, counts];
    }
    let mock = mock_segments(view);
    let opts = BatchOptions::default();
    let input = BatchInput { view, mock: &mock, opts: &opts };
    let layout =
        RULES.iter().filter(|r| r.layout).filter_map(|r| r.batch.and_then(|run| run(&input)));
    [off, counts].into_iter().chain(layout).collect()
}

/// `cross-doc-label` in [`check_batch`]: under a masked-LM objective every label is the target
/// at its own position, so none can cross a boundary.
pub(crate) fn cross_doc_label_in(c: &BatchInput<'_, '_>) -> Option<Outcome> {
    Some(if c.opts.masked_lm {
        crate::checks::rules::CROSS_DOC_LABEL.skipped(
            "masked LM: every label is the target at its own position, none crosses a boundary",
        )
    } else {
        layout::cross_doc_label(c.view)
    })
}

/// LAYOUT on one packed batch: the first violation of [`layout_rules`].
///
/// ```text
/// cu[0] = 0, cu[i] ≤ cu[i+1], cu[B] ≤ T, every offset ≤ i32::MAX          (real and padded)
/// padded: same B, pᵢ ≥ sᵢ
/// num_real_seqs ≤ B; every mock segment holds ≥ 1 token                 (AReaL #1103)
/// position_ids[startᵢ + j] = base + j                      j < sᵢ        (Megatron #5243, HF #47496)
/// Unshifted: labels[startᵢ₊₁] ≠ input_ids[startᵢ₊₁]   Shifted: labels[startᵢ + sᵢ − 1] ≠ input_ids[startᵢ₊₁]
/// 4-D mask: real query t of segment i sees keys [startᵢ, t + 1)   (bidirectional: [startᵢ, endᵢ))
/// EOS: input_ids[endᵢ − 1] = eos (but a row's last segment), eos ∉ input_ids[startᵢ .. endᵢ − 1]
/// side tensors: T entries each
/// ```
///
/// # Errors
/// The first rule broken, with the segment and token.
///
/// # Example
/// ```
/// use rules::checks::{IntSlice, LayoutView, check_layout};
/// let leak = LayoutView {
///     num_tokens: 5,
///     cu_seqlens: IntSlice::from(&[0, 3, 5]),
///     input_ids: Some(IntSlice::from(&[5, 6, 7, 8, 9])),
///     labels: Some(IntSlice::from(&[-100, 6, 7, 8, 9])),
///     ..Default::default()
/// };
/// let v = check_layout(&leak).unwrap_err();
/// assert_eq!((v.id, v.at.segment, v.at.token), ("cross-doc-label", Some(0), Some(3)));
/// ```
pub fn check_layout(view: &LayoutView<'_>) -> crate::Checked {
    crate::checks::first_violation(&layout_rules(view))
}

/// One bit per token.
struct Bits(Vec<u64>);

impl Bits {
    fn new(n: usize) -> Self {
        Bits(vec![0; n.div_ceil(64)])
    }

    fn get(&self, i: usize) -> bool {
        self.0[i / 64] >> (i % 64) & 1 == 1
    }

    fn set(&mut self, i: usize) {
        self.0[i / 64] |= 1 << (i % 64);
    }
}
