//! The rules of one pack beyond its layout (`pad-labels`, `mock-marked`, `label-targets`,
//! `pad-multiple`) and the layout facts `thdcheck check` prints above the rules
//! ([`BatchFacts`]). The registry's [`check_batch`](crate::checks::check_batch) runs them with
//! every other rule of one pack.

use serde::Serialize;
use thd::{IGNORE_INDEX, LabelConvention};

use crate::Location;
use crate::checks::proof::Proof;
use crate::checks::rule::{Outcome, rule};
use crate::checks::view::{LayoutView, all_padding};
use crate::checks::work::WorkSums;
use crate::contract::{BoundaryLabelsFact, DocumentAttention};
use crate::words::plural;

rule! {
    /// Padding and mock tokens carry -100. [`crate::checks::pad_labels`].
    PAD_LABELS = "pad-labels", Loss, "padding and mock tokens carry label -100",
        batch: |c| Some(pad_labels(c.view, c.mock)),
        proof: Proof::Batch("corpus/real/batches/olmo_core/padded_label_mask_v1.3.1.safetensors");
    /// A mock segment is marked. [`crate::checks::mock_marked`].
    MOCK_MARKED = "mock-marked", MfuPad, "an all-padding (mock) segment is marked by num_real_seqs and carries no label",
        batch: |c| Some(mock_marked(c.view, c.mock)),
        proof: Proof::Batch("examples/batches/bad/hf_mock_without_num_real_seqs.safetensors");
    /// Valid labels are the tokens they predict. [`crate::checks::label_targets`].
    LABEL_TARGETS = "label-targets", Loss, "each valid label is the token it must predict (causal LM)",
        batch: |c| Some(match (c.opts.causal, c.opts.masked_lm) {
            (true, _) => label_targets(c.view, c.mock),
            (false, true) => LABEL_TARGETS.skipped("masked LM: a label is the token at its own position"),
            (false, false) => LABEL_TARGETS.skipped(
                "attention not stated causal: a causal LM's profile states `attention = \"causal\"` (or pass --causal)",
            ),
        }),
        proof: Proof::Batch("examples/batches/bad/cp_rolled_after_split/cp-group");
    /// `T` is a multiple of `pad_to_multiple_of`. [`crate::checks::pad_multiple`].
    PAD_MULTIPLE = "pad-multiple", MfuPad, "T is a multiple of pad_to_multiple_of",
        batch: |c| c.opts.pad_to_multiple_of.map(|m| pad_multiple(c.view, m)),
        proof: Proof::Test("cli/tests/cli/fuzz_collator.rs::fuzz_collator_takes_the_check_options");
}

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

/// The layout facts of a pack whose offsets hold ([`offsets`](crate::checks::offsets)).
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
