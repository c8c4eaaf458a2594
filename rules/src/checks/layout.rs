//! LAYOUT: offsets, position ids, boundary labels, masks and documents of one packed batch.
//!
//! Every rule here takes a [`LayoutView`] (plain slices, as a collator emits them) and returns
//! an [`Outcome`]. [`check_layout`] is the first-violation form the property tests use;
//! [`crate::checks::check_batch`] runs every rule for `thdcheck check` and the fuzzers.

use std::collections::HashMap;

use thd::{IGNORE_INDEX, LabelConvention};

use crate::checks::ints::IntSlice;
use crate::checks::proof::Proof;
use crate::checks::rule::{BatchInput, Fuzz, Outcome, first_violation, rule};
use crate::checks::view::{CollatorPack, LayoutView, mock_segments};
use crate::contract::{BoundaryLabelsFact, EmptySegmentsFact, KeyOffsetsFact, PositionsFact};
use crate::words::plural;
use crate::{Checked, Location, Violation};

rule! {
    /// `cu_seqlens` (and the padded / key offsets) are offsets: from 0, non-decreasing, int32,
    /// within `T`. [`crate::checks::check_offsets`].
    OFFSETS = "offsets", Layout, "offsets start at 0, never decrease, fit int32 and end within the tokens",
        proof: Proof::Test("rules/src/checks/proofs.rs::offsets_lengths_passed_as_offsets");
    /// Every per-token tensor (side tensors and the 4-D mask's rows included) has `T` entries.
    /// [`crate::checks::token_counts`].
    TOKEN_COUNTS = "token-counts", Layout, "every per-token tensor has one entry per token",
        proof: Proof::Zoo("LogprobsOneShort");
    /// `pᵢ ≥ sᵢ` for every slot. [`crate::checks::padded_slots`].
    PADDED_SLOTS = "padded-slots", Layout, "every storage slot holds its real tokens",
        batch: |c| Some(padded_slots(c.view)),
        layout: true,
        proof: Proof::Test("rules/src/checks/proofs.rs::padded_slots_rounded_down");
    /// Key offsets equal query offsets. [`crate::checks::qk_offsets`].
    QK_OFFSETS = "qk-offsets", Layout, "key offsets equal query offsets (self-attention packing)",
        batch: |c| Some(qk_offsets(c.view)),
        proof: Proof::Test("rules/src/checks/proofs.rs::qk_offsets_keys_count_the_padding");
    /// Automodel BSHD rows are filled by their slots. [`crate::checks::row_slots`].
    ROW_SLOTS = "row-slots", Layout, "every row but the last is filled exactly by its slots",
        batch: |c| Some(row_slots(c.view)),
        proof: Proof::Batch("examples/batches/bad/te_automodel_row_not_filled.safetensors");
    /// The declared maximum covers the widest slot. [`crate::checks::max_seqlen`].
    MAX_SEQLEN = "max-seqlen", Layout, "the declared max_seqlen covers the widest slot the kernel is given",
        batch: |c| Some(max_seqlen(c.view)),
        proof: Proof::Batch("examples/batches/bad/te_max_seqlen_before_absorb.safetensors");
    /// `num_real_seqs ≤ B`. [`crate::checks::num_real_seqs`].
    NUM_REAL_SEQS = "num-real-seqs", Layout, "num_real_seqs <= number of segments",
        batch: |c| Some(num_real_seqs(c.view)),
        layout: true,
        proof: Proof::Test("rules/src/checks/proofs.rs::num_real_seqs_counted_before_the_drops");
    /// No zero-length mock segment. [`crate::checks::mock_nonempty`].
    MOCK_NONEMPTY = "mock-nonempty", Layout, "every mock segment holds at least one token",
        batch: |c| Some(mock_nonempty(c.view)),
        layout: true,
        proof: Proof::Zoo("DuplicateZeroLengthSegment");
    /// Position ids restart at the base in every segment. [`crate::checks::position_ids`].
    POSITION_IDS = "position-ids", Layout, "position ids restart at each segment start",
        batch: |c| Some(position_ids(c.view)),
        layout: true,
        proof: Proof::Zoo("PositionsNotReset");
    /// No prediction crosses a segment boundary. [`crate::checks::cross_doc_label`].
    CROSS_DOC_LABEL = "cross-doc-label", Layout, "no label of a segment is a token of the next segment",
        batch: cross_doc_label_in,
        layout: true,
        proof: Proof::Zoo("LabelLeak");
    /// The mask agrees with the segments. [`crate::checks::mask`].
    MASK = "mask", Layout, "the attention / padding mask agrees with the segments",
        batch: |c| Some(mask(c.view, c.mock)),
        proof: Proof::Batch("examples/batches/bad/te_padding_mask_from_token_ids.safetensors");
    /// One distinct `seq_idx` per segment. [`crate::checks::seq_idx`].
    SEQ_IDX = "seq-idx", Layout, "seq_idx is constant over a segment and distinct between segments",
        batch: |c| Some(seq_idx(c.view, c.mock)),
        proof: Proof::Zoo("SeqIdxFromLastToken");
    /// A collator keeps its documents. [`crate::checks::check_documents`].
    DOCUMENTS = "documents", Layout, "the real segments are exactly the examples, in order",
        fuzz: Fuzz::Collator(Some(judge_documents)),
        proof: Proof::Test("cli/tests/cli/fuzz_collator.rs::fuzz_collator_accepts_declared_rewrites_only");
    /// A collator's batch is one `thdcheck check` reads. `thdcheck fuzz collator` / `logger`,
    /// when the reader refuses the batch.
    BATCH_READABLE = "batch-readable", Layout, "the batch a collator returns is one thdcheck check reads (known keys, integer tensors of consistent shapes)",
        fuzz: Fuzz::Collator(None),
        proof: Proof::Test("cli/tests/cli/fuzz_collator.rs::a_collator_with_a_misspelt_offsets_key_breaks_batch_readable");
    /// A static-shape collator fills exactly its length. [`crate::checks::check_static_shape`].
    STATIC_SHAPE = "static-shape", Layout, "with a static max_seq_length the pack holds exactly that many tokens",
        fuzz: Fuzz::Collator(Some(judge_static_shape)),
        proof: Proof::Test("rules/src/checks/proofs.rs::static_shape_padded_to_the_longest_only");
}

/// LAYOUT, `offsets`: one offsets vector is non-empty, starts at 0, is non-decreasing, fits
/// int32 and ends within `tokens`. The command calls it on every offsets tensor it reads and
/// refuses a file that fails it (exit 2: offsets that are not offsets address nothing).
///
/// # Errors
/// The first rule broken, naming the key, the index and the value.
///
/// # Example
/// ```
/// use rules::checks::check_offsets;
/// assert!(check_offsets("cu_seqlens", &[0, 3, 5], 5).is_ok());
/// let v = check_offsets("cu_seqlens", &[0, 5, 3], 5).unwrap_err();
/// assert_eq!(v.summary(), "`cu_seqlens`: expected cu_seqlens[2] >= 5, got cu_seqlens[2] = 3");
/// let stored: &[i32] = &[0, 3, 5]; // int32 as stored, read in place
/// assert!(check_offsets("cu_seqlens", stored, 5).is_ok());
/// ```
pub fn check_offsets<'a>(name: &str, cu: impl Into<IntSlice<'a>>, tokens: usize) -> Checked {
    let cu = cu.into();
    let v = |rule: String| {
        Violation::new(OFFSETS.invariant, rule).id(OFFSETS.id).at(Location::default().key(name))
    };
    let Some(first) = cu.first() else {
        return Err(v(format!("{name} has at least one entry")).expected("[0, ...]").got("[]"));
    };
    if first != 0 {
        return Err(v(format!("{name} starts at 0"))
            .expected(0)
            .got(format!("{name}[0] = {first}")));
    }
    let mut prev = first;
    for (i, x) in cu.iter().enumerate().skip(1) {
        if x < prev {
            return Err(v(format!("{name} is non-decreasing"))
                .expected(format!("{name}[{i}] >= {prev}"))
                .got(format!("{name}[{i}] = {x}")));
        }
        prev = x;
    }
    if let Some(i) = cu.iter().position(|x| x > i64::from(i32::MAX)) {
        return Err(v(format!("{name} fits int32"))
            .expected(format!("<= {}", i32::MAX))
            .got(format!("{name}[{i}] = {}", cu.at(i))));
    }
    let last = cu.at(cu.len() - 1);
    if last as u64 > tokens as u64 {
        return Err(v(format!("{name} ends at or before the token count"))
            .expected(format!("{name}[{}] <= T = {tokens}", cu.len() - 1))
            .got(format!("{name}[{}] = {last}", cu.len() - 1)));
    }
    Ok(())
}

/// LAYOUT, `offsets` on a view: the real and storage offsets, and one storage entry per real one.
pub fn offsets(view: &LayoutView<'_>) -> Outcome {
    let k = view.keys();
    let t = view.num_tokens;
    let mut checked = check_offsets(&k.cu_seqlens, view.cu_seqlens, t);
    if let (Ok(()), Some(p)) = (&checked, view.cu_seqlens_padded) {
        checked = check_offsets(&k.cu_seqlens_padded, p, t);
        if checked.is_ok() && p.len() != view.cu_seqlens.len() {
            checked = Err(Violation::new(
                OFFSETS.invariant,
                "cu_seqlens_padded has one entry per segment, like cu_seqlens",
            )
            .at(Location::default().key(&k.cu_seqlens_padded))
            .expected(format!("{} entries", view.cu_seqlens.len()))
            .got(format!("{} entries", p.len())));
        }
    }
    if let (Ok(()), Some(ck)) = (&checked, view.cu_seqlens_k) {
        // Keys that reach back past this batch's tokens by design (a cached prefix) are
        // offsets of their own tensor, judged against the queries by `qk-offsets`.
        let reach = match view.facts.key_offsets {
            Some(KeyOffsetsFact::Longer) => i32::MAX as usize,
            _ => t,
        };
        checked = check_offsets(&k.cu_seqlens_k, ck, reach);
    }
    OFFSETS.from_checked(checked, format!("{} valid", plural(view.segments(), "segment")))
}

/// LAYOUT, `token-counts`: every per-token tensor has `T` entries.
pub fn token_counts(view: &LayoutView<'_>) -> Outcome {
    let k = view.keys();
    let t = view.num_tokens;
    let lens = [
        (&k.input_ids, "input_ids", view.input_ids.map(IntSlice::len)),
        (&k.position_ids, "position_ids", view.position_ids.map(IntSlice::len)),
        (&k.labels, "labels", view.labels.map(IntSlice::len)),
        (&k.mask, "mask", view.mask.map(<[bool]>::len)),
        (&k.seq_idx, "seq_idx", view.seq_idx.map(IntSlice::len)),
    ];
    for (key, what, len) in lens {
        if let Some(len) = len
            && len != t
        {
            return TOKEN_COUNTS.violated(
                Violation::new(TOKEN_COUNTS.invariant, format!("{what} has one entry per token"))
                    .at(Location::default().key(key.as_str()))
                    .expected(t)
                    .got(len),
            );
        }
    }
    if let Some(m) = view.block_mask
        && m.spans.len() != t
    {
        return TOKEN_COUNTS.violated(
            Violation::new(TOKEN_COUNTS.invariant, "the 4-D attention mask has one row per token")
                .at(Location::default().key(m.key))
                .expected(format!("{t} query rows (B·S)"))
                .got(format!("{} query rows", m.spans.len())),
        );
    }
    // One prediction per token of a slot but its last.
    let predictions = || t - (0..view.segments()).filter(|&i| !view.slot(i).is_empty()).count();
    for side in view.side_tensors {
        if side.per_prediction {
            let want = predictions();
            if side.entries != want {
                return TOKEN_COUNTS.violated(
                    Violation::new(
                        TOKEN_COUNTS.invariant,
                        "every per-prediction side tensor has one entry per prediction",
                    )
                    .at(Location::default().key(side.key))
                    .expected(format!("{want} (T − 1 per non-empty slot)"))
                    .got(side.entries),
                );
            }
            continue;
        }
        if side.entries != t {
            let mut v = Violation::new(
                TOKEN_COUNTS.invariant,
                "every per-token side tensor has one entry per token",
            )
            .at(Location::default().key(side.key))
            .expected(t)
            .got(side.entries);
            if side.entries + 1 == t {
                v = v.note(
                    "one entry short: a value per position of T − 1 (a shift by one, not padded \
                     back to T?)",
                );
            } else if side.entries == t + 1 {
                v = v.note("one entry too many");
            }
            return TOKEN_COUNTS.violated(v);
        }
    }
    if view.side_tensors.is_empty() {
        TOKEN_COUNTS.ok(format!("{t} tokens"))
    } else {
        TOKEN_COUNTS.ok(format!(
            "{t} tokens, and as many in each of {}",
            plural(view.side_tensors.len(), "side tensor")
        ))
    }
}

/// LAYOUT, `padded-slots`: every storage slot holds its real tokens, `pᵢ ≥ sᵢ`.
pub fn padded_slots(view: &LayoutView<'_>) -> Outcome {
    let k = view.keys();
    let Some(p) = view.cu_seqlens_padded else {
        return PADDED_SLOTS.skipped("");
    };
    let cu = view.cu_seqlens;
    let mut short =
        (0..view.segments()).filter(|&i| p.at(i + 1) - p.at(i) < cu.at(i + 1) - cu.at(i));
    let Some(i) = short.next() else {
        return PADDED_SLOTS
            .ok(format!("every slot of `{}` holds its real tokens", k.cu_seqlens_padded));
    };
    let bad = 1 + short.count();
    PADDED_SLOTS.violated(
        Violation::new(PADDED_SLOTS.invariant, "padded length >= real length")
            .at(Location::default().segment(i).token(p.at(i) as usize).key(&k.cu_seqlens_padded))
            .expected(format!(">= {}", cu.at(i + 1) - cu.at(i)))
            .got(p.at(i + 1) - p.at(i))
            .note(format!(
                "the slot in `{}` is shorter than the real length in `{}` ({} affected)",
                k.cu_seqlens_padded,
                k.cu_seqlens,
                plural(bad, "segment")
            )),
    )
}

/// LAYOUT, `qk-offsets`: key offsets equal the stored query offsets (self-attention packing
/// has one set of offsets).
pub fn qk_offsets(view: &LayoutView<'_>) -> Outcome {
    let k = view.keys();
    let Some(ck) = view.cu_seqlens_k else { return QK_OFFSETS.skipped("") };
    let q = view.cu_seqlens_q_stored.unwrap_or(view.cu_seqlens);
    if ck == q {
        return QK_OFFSETS.ok(format!("`{}` equals `{}`", k.cu_seqlens_k, k.cu_seqlens));
    }
    if view.facts.key_offsets == Some(KeyOffsetsFact::Longer) {
        // Keys that reach back by design: as many documents, none with fewer keys than queries.
        let len = |v: IntSlice<'_>, i: usize| v.at(i + 1) - v.at(i);
        let short = if ck.len() == q.len() {
            (0..q.len().saturating_sub(1)).find(|&i| len(ck, i) < len(q, i))
        } else {
            Some(0)
        };
        let Some(i) = short else {
            return QK_OFFSETS.ok(format!(
                "each document's keys in `{}` reach at least as far as its queries in `{}` \
                 (key_offsets = longer)",
                k.cu_seqlens_k, k.cu_seqlens
            ));
        };
        let what = if ck.len() == q.len() {
            format!("document {i} has {} keys for {} queries", len(ck, i), len(q, i))
        } else {
            format!("{} key offsets for {} query offsets", ck.len(), q.len())
        };
        return QK_OFFSETS.violated(
            QK_OFFSETS
                .violation()
                .at(Location::default().segment(i).key(&k.cu_seqlens_k))
                .expected("as many documents as the queries, each with at least as many keys")
                .got(what),
        );
    }
    let i = ck.iter().zip(q.iter()).position(|(a, b)| a != b).unwrap_or(ck.len().min(q.len()));
    let show = |v: Option<i64>| v.map_or("end".into(), |v| v.to_string());
    QK_OFFSETS.violated(
        QK_OFFSETS
            .violation()
            .at(Location::default().key(&k.cu_seqlens_k))
            .expected(format!("{}[{i}] = {}", k.cu_seqlens, show(q.get(i))))
            .got(format!("{}[{i}] = {}", k.cu_seqlens_k, show(ck.get(i)))),
    )
}

/// LAYOUT, `row-slots`: Automodel BSHD rows; every row but the last is filled exactly by its
/// slots (the offsets are one cumulative sum over rows).
pub fn row_slots(view: &LayoutView<'_>) -> Outcome {
    let k = view.keys();
    let Some(rows) = view.row_slots else { return ROW_SLOTS.skipped("") };
    let s = (view.num_tokens / view.rows.max(1)) as i64;
    let last = rows.len().saturating_sub(1);
    for (r, &sum) in rows.iter().enumerate() {
        let ok = if r < last { sum == s } else { sum <= s };
        if !ok {
            let key =
                if view.cu_seqlens_padded.is_some() { &k.cu_seqlens_padded } else { &k.cu_seqlens };
            return ROW_SLOTS.violated(
                ROW_SLOTS
                    .violation()
                    .at(Location::default().pack(r).token(r * s as usize).key(key))
                    .expected(format!("row {r}'s slots hold S = {s} tokens"))
                    .got(format!("{sum} tokens"))
                    .note(
                        "the offsets are one cumulative sum over rows, so every later row's \
                         segments point at the wrong tokens",
                    ),
            );
        }
    }
    ROW_SLOTS.ok(format!("each of {} fills its S={s} tokens", plural(rows.len(), "row")))
}

/// LAYOUT, `max-seqlen`: the declared maximum covers every sequence length the kernel
/// computes: the lengths of the query offsets as stored (`cu_seqlens`, which after Automodel's
/// trailing-pad absorption includes the tail, #2316), never less.
///
/// TransformerEngine documents `max_seqlen_q` for THD as "the maximum query ... sequence length
/// in a batch" (`DotProductAttention.forward`, "max_seqlen note", TE `d0067d0da`); only when it
/// is unset does TE deduce a value, rounded up, from the padded offsets. So a declared maximum
/// at the longest real length, below the widest padded slot (bionemo and Automodel CP), is
/// valid: it is noted, not flagged.
pub fn max_seqlen(view: &LayoutView<'_>) -> Outcome {
    let k = view.keys();
    let Some(declared) = view.max_seqlen else {
        return MAX_SEQLEN.skipped("no max_seqlen / max_length_q");
    };
    let computed = |i: usize| match view.cu_seqlens_q_stored {
        Some(q) => (q.at(i + 1) - q.at(i)).max(0) as usize,
        None => view.real_len(i),
    };
    let widest = (0..view.segments()).max_by_key(|&i| (computed(i), std::cmp::Reverse(i)));
    let Some(i) = widest else { return MAX_SEQLEN.ok("no segments") };
    let w = computed(i);
    let what = if view.cu_seqlens_q_stored.is_some() {
        "sequence the kernel computes (its stored offsets, with the absorbed tail)"
    } else {
        "sequence"
    };
    if declared >= w as i64 {
        let mut o = MAX_SEQLEN
            .ok(format!("`{}` = {declared} ≥ longest {what} {w} (segment {i})", k.max_seqlen));
        if let Some(p) = view.cu_seqlens_padded {
            let slot =
                (0..view.segments()).map(|j| (p.at(j + 1) - p.at(j)).max(0)).max().unwrap_or(0);
            if declared < slot {
                o.notes.push(format!(
                    "`{}` = {declared} is below the widest padded slot ({slot}): valid, TE's \
                     max_seqlen is the longest sequence, not slot",
                    k.max_seqlen
                ));
            }
        }
        return o;
    }
    MAX_SEQLEN.violated(
        MAX_SEQLEN
            .violation()
            .at(Location::default().segment(i).token(view.slot(i).start).key(&k.max_seqlen))
            .expected(format!(">= {w} (the longest {what}, segment {i})"))
            .got(format!("{} = {declared}", k.max_seqlen))
            .note("the kernel sizes its grid by max_seqlen and skips or corrupts the rest"),
    )
}

/// LAYOUT, `num-real-seqs`: at most `B` leading real segments.
pub fn num_real_seqs(view: &LayoutView<'_>) -> Outcome {
    let b = view.segments();
    match view.num_real_seqs {
        None => NUM_REAL_SEQS.skipped(""),
        Some(n) if n <= b => NUM_REAL_SEQS.ok(format!("{n} of {}", plural(b, "segment"))),
        Some(n) => NUM_REAL_SEQS.violated(
            NUM_REAL_SEQS
                .violation()
                .at(Location::default().key(&view.keys().num_real_seqs))
                .expected(format!("<= {b}"))
                .got(n),
        ),
    }
}

/// LAYOUT, `mock-nonempty`: every segment past `num_real_seqs` holds at least one token, and
/// where the stack's last segment is its padding by design (AReaL's `pad_packed_tensor_dict`)
/// that segment is not empty: a duplicated final offset appended when nothing needed padding
/// (AReaL #1103, `[0, 4, 7, 12, 12]`, which crashes the conv1d of linear-attention models).
/// Zero-length sequences are otherwise legal (Automodel's tests pack `[[2, 0, 2]]`, TE pads
/// `[0, 3, 3]`); Megatron-Bridge's ragged-row repeats are dropped by the reader.
pub fn mock_nonempty(view: &LayoutView<'_>) -> Outcome {
    let k = view.keys();
    let b = view.segments();
    let (name, storage) = match view.cu_seqlens_padded {
        Some(p) => (&k.cu_seqlens_padded, p),
        None => (&k.cu_seqlens, view.cu_seqlens),
    };
    let empty = |i: usize| storage.at(i + 1) == storage.at(i);
    let violated_as = |i: usize, expected: &str, note: &str| {
        MOCK_NONEMPTY.violated(
            MOCK_NONEMPTY
                .violation()
                .at(Location::default().segment(i).key(name.as_str()))
                .expected(expected)
                .got(format!(
                    "a zero-length segment: {name}[{i}] = {name}[{}] = {}",
                    i + 1,
                    storage.at(i)
                ))
                .note(note),
        )
    };
    let violated =
        |i: usize, note: &str| violated_as(i, "a non-empty mock segment (or none at all)", note);
    if view.facts.empty_segments == Some(EmptySegmentsFact::Forbidden)
        && let Some(i) = (0..b).find(|&i| empty(i))
    {
        let n = (0..b).filter(|&i| empty(i)).count();
        return violated_as(
            i,
            "a segment of at least one token",
            &format!(
                "the stack cannot take a zero-length sequence (the profile's empty_segments = \
                 forbidden); {} in the pack",
                plural(n, "zero-length segment")
            ),
        );
    }
    let Some(n_real) = view.num_real_seqs.filter(|&n| n <= b) else {
        // A stack whose last segment is its padding by design (AReaL) must not append one that
        // is empty; elsewhere a trailing zero-length sequence is legal (TE pads `[0, 3, 3]`).
        if view.num_real_seqs.is_none()
            && view.facts.padding_segment_by_design()
            && b > 1
            && empty(b - 1)
            && storage.at(b) > 0
        {
            return violated(
                b - 1,
                "the pack ends in a duplicated offset: padding appended its tail offset when \
                 nothing needed padding (AReaL #1103)",
            );
        }
        return MOCK_NONEMPTY.skipped("");
    };
    for i in n_real..b {
        if empty(i) {
            return violated(
                i,
                "a duplicated offset appended when nothing needed padding (AReaL #1103)",
            );
        }
    }
    MOCK_NONEMPTY.ok(format!("{} non-empty", plural(b - n_real, "mock segment")))
}

/// LAYOUT, `position-ids`: `position_ids[startᵢ + j] = base + j` for every real token. With no
/// stated base, 0 or one base shared by every segment (RoBERTa/ESM start at `padding_idx + 1`)
/// is accepted and a non-zero one noted.
pub fn position_ids(view: &LayoutView<'_>) -> Outcome {
    let k = view.keys();
    let Some(pos) = view.position_ids else { return POSITION_IDS.skipped("no position_ids") };
    let b = view.segments();
    let base = view.facts.position_base.unwrap_or_else(|| {
        // Streamed, not collected: a batch of 10⁸ one-token segments holds no per-segment vector.
        let mut firsts =
            (0..b).filter(|&i| !view.real(i).is_empty()).map(|i| pos.at(view.real(i).start));
        match firsts.next() {
            Some(f) if f > 0 && firsts.all(|x| x == f) => f,
            _ => 0,
        }
    });
    // Per row by design: each real token's offset in its row, not in its document.
    let row_width = (view.facts.positions == Some(PositionsFact::PerRow))
        .then(|| view.num_tokens.checked_div(view.rows.max(1)))
        .flatten()
        .filter(|&w| w > 0);
    // A row's first document may continue one cut at the previous row's end.
    let continued = view.facts.positions == Some(PositionsFact::Continued);
    let width = view.num_tokens.checked_div(view.rows.max(1)).filter(|&w| w > 0);
    let mut first = None;
    let mut bad = 0usize;
    for i in 0..b {
        let r = view.real(i);
        let start = r.start;
        let offset = |j: usize| match row_width {
            Some(w) => (start + j) % w,
            None => j,
        };
        let from = match (continued, width) {
            (true, Some(w)) if start.is_multiple_of(w) && !r.is_empty() => pos.at(start).max(base),
            _ => base,
        };
        if let Some(j) =
            pos.slice(r).iter().enumerate().position(|(j, p)| p != from + offset(j) as i64)
        {
            bad += 1;
            first.get_or_insert((i, start + j, offset(j), from + offset(j) as i64));
        }
    }
    match first {
        None => {
            let mut o = POSITION_IDS.ok(match row_width {
                Some(_) => format!(
                    "count from {base} along each of {} (positions = per-row), through {}",
                    plural(view.rows.max(1), "row"),
                    plural(b, "segment")
                ),
                None if continued => format!(
                    "restart at {base} in each of {} (a row's first may continue the previous \
                     row's last: positions = continued)",
                    plural(b, "segment")
                ),
                None => format!("restart at {base} in each of {}", plural(b, "segment")),
            });
            if base != 0 && view.facts.position_base.is_none() {
                o.notes.push(format!(
                    "`{}` start at {base} in every segment (RoBERTa/ESM-style padding_idx + 1); \
                     pass the position base to pin it",
                    k.position_ids
                ));
            }
            o
        }
        Some((i, t, j, want)) => {
            let prev = if t > 0 {
                format!(" (previous position {})", pos.at(t - 1))
            } else {
                String::new()
            };
            POSITION_IDS.violated(
                POSITION_IDS
                    .violation()
                    .at(Location::default().segment(i).token(t).key(&k.position_ids))
                    .expected(want)
                    .got(pos.at(t))
                    .note(match row_width {
                        Some(_) => format!(
                            "offset {j} within its row (segment {i}){prev}; {} not counting \
                             along its row",
                            plural(bad, "segment")
                        ),
                        None => format!(
                            "offset {j} within segment {i}{prev}; {} not restarting",
                            plural(bad, "segment")
                        ),
                    }),
            )
        }
    }
}

/// LAYOUT, `cross-doc-label`: no segment's last prediction targets the next document: the
/// label at the boundary is not the next segment's first token.
///
/// ```text
/// Unshifted: labels[startᵢ₊₁] ≠ input_ids[startᵢ₊₁]   Shifted: labels[startᵢ + sᵢ − 1] ≠ input_ids[startᵢ₊₁]
/// ```
///
/// A trained label at the boundary is not itself a leak: NeMo Automodel shifts labels per sample
/// before packing (`labels = labels[1:]`), so each segment's last label is its own EOS target;
/// transformers' `DataCollatorWithFlattening(separator_id=…)` trains the separator on purpose.
/// A leak is a label that *is* the next document's first token, which a label copied or rolled
/// across the pack always is. Without `input_ids` the rule cannot tell the two apart: skipped.
/// A pretraining objective trains the stream across documents on purpose
/// ([`Contract::cross_doc_labels_by_design`](crate::contract::Contract::cross_doc_labels_by_design)),
/// or the loss masks each document's last prediction itself
/// (`boundary_labels = "masked-by-loss"`): such labels are then counted in a note.
pub fn cross_doc_label(view: &LayoutView<'_>) -> Outcome {
    let k = view.keys();
    let Some(labels) = view.labels else { return CROSS_DOC_LABEL.skipped("no labels") };
    let Some(ids) = view.input_ids else {
        return CROSS_DOC_LABEL
            .skipped("no input_ids: a boundary label cannot be compared with the next document");
    };
    let (mut trained, mut by_design, mut masked) = (0usize, 0usize, 0usize);
    let n = view.segments();
    // Padding is not a document, even as a segment of its own (bionemo's mock, Megatron-Bridge's
    // pack tail, whose pad id may be the EOS that a segment's last label rightly targets).
    let mock = mock_segments(view);
    // Rows of a `[B, S]` batch are separate sequences for the loss: Hugging Face shifts the
    // labels within each row, so no prediction reads the label at a row's start.
    let width = view.row_width();
    let row_start = |t: usize| width.is_some_and(|w| t.is_multiple_of(w));
    for i in 0..n {
        let r = view.real(i);
        // The next document: the next segment that holds a real token.
        let Some((j, next)) = (i + 1..n)
            .map(|j| (j, view.real(j)))
            .find(|(j, r)| !r.is_empty() && !mock[*j])
            .filter(|_| !r.is_empty())
        else {
            continue;
        };
        let tok = match view.label_convention {
            // The loss shifts: the prediction at the segment's last token reads the label at the
            // next stored token; only when that is the next segment's first token can it leak.
            LabelConvention::Unshifted if r.end == next.start && !row_start(next.start) => r.end,
            LabelConvention::Unshifted => continue,
            LabelConvention::Shifted => r.end - 1,
        };
        let Some(y) = labels.get(tok).filter(|&y| y != IGNORE_INDEX) else { continue };
        let first = ids.at(next.start);
        if y != first {
            trained += 1;
            continue;
        }
        if view.facts.cross_doc_labels_by_design() {
            by_design += 1;
            continue;
        }
        if view.facts.boundary_labels == Some(BoundaryLabelsFact::MaskedByLoss) {
            masked += 1;
            continue;
        }
        let what = match view.label_convention {
            LabelConvention::Unshifted => "the label the segment's last prediction reads",
            LabelConvention::Shifted => "the label of the segment's last token",
        };
        return CROSS_DOC_LABEL.violated(
            CROSS_DOC_LABEL
                .violation()
                .at(Location::default().segment(i).token(tok).key(&k.labels))
                .expected(format!("{what} = -100 (or the segment's own target)"))
                .got(format!(
                    "labels[{tok}] = {y}, segment {j}'s first token ({}[{}] = {first})",
                    k.input_ids,
                    next.start
                ))
                .note(format!(
                    "the last token of segment {i} learns to predict the next document's first token"
                )),
        );
    }
    let mut o = CROSS_DOC_LABEL.ok(if by_design > 0 {
        "predictions of the next document's first token are the objective's (pretraining)"
    } else if masked > 0 {
        "the labels that cross into the next document are at predictions the loss masks itself"
    } else {
        "no prediction targets the next segment's first token"
    });
    if trained > 0 {
        o.notes.push(format!(
            "{} a trained label at the boundary that is not the next document's token (a per-sample \
             EOS target or a separator)",
            plural(trained, "segment") + if trained == 1 { " ends with" } else { " end with" }
        ));
    }
    if masked > 0 {
        o.notes.push(format!(
            "the last prediction of {} the next document's first token, a label the loss never \
             reads: it masks each document's last prediction itself (boundary_labels = \
             \"masked-by-loss\")",
            plural(masked, "segment") + if masked == 1 { " targets" } else { " target" }
        ));
    }
    if by_design > 0 {
        o.notes.push(format!(
            "the last prediction of {} the next document's first token: the objective trains \
             across documents by design (pretraining; stated by the profile or --objective \
             pretrain)",
            plural(by_design, "segment") + if by_design == 1 { " targets" } else { " target" }
        ));
    }
    o
}

/// `cross-doc-label` in [`check_batch`]: under a masked-LM objective every label is the target
/// at its own position, so none can cross a boundary.
pub(crate) fn cross_doc_label_in(c: &BatchInput<'_, '_>) -> Option<Outcome> {
    Some(if c.opts.masked_lm {
        CROSS_DOC_LABEL.skipped(
            "masked LM: every label is the target at its own position, none crosses a boundary",
        )
    } else {
        cross_doc_label(c.view)
    })
}

/// LAYOUT, `mask`: the attention / padding mask marks exactly the real tokens of real segments.
pub fn mask(view: &LayoutView<'_>, mock: &[bool]) -> Outcome {
    let k = view.keys();
    let Some(m) = view.mask else { return MASK.skipped("no attention_mask / padding_mask") };
    if view.boundaries_from_positions && !view.mask_is_padding {
        // Padding-free batches carry their boundaries in the position ids only: given a mask,
        // FlashAttention unpads by it (each row one sequence) and SDPA / eager build a causal
        // mask over the row, so the documents attend to each other (TRL #3673, #3996;
        // transformers' DataCollatorWithFlattening returns no attention_mask for this reason).
        let k = view.keys();
        return MASK.violated(
            MASK.violation()
                .at(Location::default().key(&k.mask))
                .expected(format!(
                    "no attention mask beside documents marked only by where `{}` restarts",
                    k.position_ids
                ))
                .got(format!("`{}` of {} tokens", k.mask, m.len()))
                .note(
                    "the attention implementations read the mask, not the restarts: each row \
                     becomes one sequence and the documents attend across their boundaries \
                     (TRL #3673); a mask that numbers the samples is read as such with a \
                     value above 1, or under a profile whose attention_mask = \"sample-numbers\"",
                ),
        );
    }
    let show = |real: bool| if view.mask_is_padding { u8::from(!real) } else { u8::from(real) };
    let real = view.real_token_mask(mock);
    let mut bad = m.iter().zip(&real).enumerate().filter(|(_, (m, r))| m != r);
    let Some((t, (&mv, &r))) = bad.next() else {
        return MASK.ok(format!("`{}` agrees with the segments", k.mask));
    };
    let n = 1 + bad.count();
    let seg = view.segment_of(t);
    let (expected, note) = if r {
        let i = seg.unwrap_or(0);
        // The commonest id among the tokens that are padding by the layout.
        let mut counts: HashMap<i64, usize> = HashMap::new();
        if let Some(ids) = view.input_ids {
            for (tok, &is_real) in ids.iter().zip(&real) {
                if !is_real {
                    *counts.entry(tok).or_default() += 1;
                }
            }
        }
        let pad_id =
            counts.into_iter().max_by_key(|&(id, c)| (c, std::cmp::Reverse(id))).map(|(id, _)| id);
        let why = match (pad_id, view.input_ids.and_then(|ids| ids.get(t))) {
            (Some(p), Some(id)) if p == id => {
                format!("; its id {p} is the padding id: was the mask built from token values?")
            }
            _ => String::new(),
        };
        (
            format!(
                "{} (a real token: segment {i}, offset {})",
                show(true),
                t - view.real(i).start
            ),
            format!("{}{why}", plural(n, "token") + " disagreeing"),
        )
    } else {
        let what = match seg {
            Some(i) if mock.get(i).copied().unwrap_or(false) => format!("in mock segment {i}"),
            Some(i) => format!("padding in segment {i}'s slot"),
            None => "padding past the last segment".into(),
        };
        (format!("{} (the token is {what})", show(false)), plural(n, "token") + " disagreeing")
    };
    let mut at = Location::default().token(t).key(&k.mask);
    at.segment = seg;
    MASK.violated(
        MASK.violation()
            .at(at)
            .expected(expected)
            .got(format!("{}[{t}] = {}", k.mask, show(mv)))
            .note(note),
    )
}

/// LAYOUT, `seq-idx`: `seq_idx` is constant over each segment's real tokens and distinct between
/// segments (what a kernel keyed on `seq_idx`, e.g. Mamba's, needs). A padding token reusing a
/// segment's id is noted.
pub fn seq_idx(view: &LayoutView<'_>, mock: &[bool]) -> Outcome {
    let k = view.keys();
    let Some(idx) = view.seq_idx.filter(|i| i.len() == view.num_tokens) else {
        return SEQ_IDX.skipped("");
    };
    let real = view.real_token_mask(mock);
    let mut owner: HashMap<i64, usize> = HashMap::new();
    for i in 0..view.segments() {
        let r = view.real(i);
        let Some(v) = idx.get(r.start).filter(|_| !r.is_empty()) else { continue };
        if let Some(j) = idx.slice(r.clone()).iter().position(|x| x != v) {
            let t = r.start + j;
            return SEQ_IDX.violated(
                SEQ_IDX
                    .violation()
                    .at(Location::default().segment(i).token(t).key(&k.seq_idx))
                    .expected(format!("{v} (the segment's first value)"))
                    .got(format!("{}[{t}] = {}", k.seq_idx, idx.at(t))),
            );
        }
        if let Some(&j) = owner.get(&v) {
            return SEQ_IDX.violated(
                SEQ_IDX
                    .violation()
                    .at(Location::default().segment(i).token(r.start).key(&k.seq_idx))
                    .expected(format!("an id other than segment {j}'s"))
                    .got(format!("{}[{}] = {v}, shared with segment {j}", k.seq_idx, r.start))
                    .note("a kernel keyed on seq_idx runs the two segments as one sequence"),
            );
        }
        owner.insert(v, i);
        // Causal kernels keyed on seq_idx carry state forward: padding just before a segment
        // that carries the segment's id runs into it.
        if r.start > 0 && !real[r.start - 1] && idx.at(r.start - 1) == v {
            let t = r.start - 1;
            return SEQ_IDX.violated(
                SEQ_IDX
                    .violation()
                    .at(Location::default().segment(i).token(t).key(&k.seq_idx))
                    .expected(format!("an id other than segment {i}'s on the padding before it"))
                    .got(format!("{}[{t}] = {v}, segment {i}'s id", k.seq_idx))
                    .note("a causal kernel keyed on seq_idx runs the padding into the segment"),
            );
        }
    }
    let mut o = SEQ_IDX.ok(format!("one distinct id per segment ({})", plural(owner.len(), "id")));
    if let Some(t) = (0..view.num_tokens).find(|&t| !real[t] && owner.contains_key(&idx.at(t))) {
        o.notes.push(format!(
            "`{}`[{t}] = {} on a padding token reuses segment {}'s id",
            k.seq_idx,
            idx.at(t),
            owner[&idx.at(t)]
        ));
    }
    o
}

/// LAYOUT, documents: a collator's answer holds the packs its contract asks for (`want`: one
/// for SFT, chosen and rejected for DPO) before its documents can be compared.
///
/// # Errors
/// The `documents` violation, naming what is missing.
///
/// # Example
/// ```
/// use rules::checks::check_packs_present;
/// assert!(check_packs_present(1, &["batch"]).is_ok());
/// assert_eq!(check_packs_present(1, &["chosen", "rejected"]).unwrap_err().id, "documents");
/// ```
pub fn check_packs_present(packs: usize, want: &[&str]) -> Checked {
    if packs >= want.len() {
        return Ok(());
    }
    Err(DOCUMENTS
        .violation()
        .expected(format!("{} pack(s): {}", want.len(), want.join(", ")))
        .got(format!("{packs} pack(s)")))
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
/// use rules::checks::{IntSlice, LayoutView, check_documents};
/// let absorbed = LayoutView {
///     num_tokens: 6,
///     input_ids: Some(IntSlice::from(&[1, 2, 3, 4, 0, 0])),
///     cu_seqlens: IntSlice::from(&[0, 2, 6]), // the static padding absorbed into the last segment
///     ..Default::default()
/// };
/// let v = check_documents(&[&[1, 2], &[3, 4]], &absorbed).unwrap_err();
/// assert_eq!(v.at.segment, Some(1));
/// ```
pub fn check_documents(examples: &[&[i64]], view: &LayoutView<'_>) -> Checked {
    // The offsets must be sound before they can address anything.
    first_violation(&[offsets(view)])?;
    let v = || DOCUMENTS.violation();
    // Mock segments (after `num_real_seqs`, or all padding: a pad tail the stack gives the
    // kernels as segments of their own, TRL's or OLMo-core's) hold no example; `mock-marked`
    // judges whether the stack may leave them unmarked.
    let mock = mock_segments(view);
    let real: Vec<usize> = (0..view.segments()).filter(|&i| !mock[i]).collect();
    if real.len() != examples.len() {
        return Err(v()
            .rule_text("one real segment per example")
            .expected(format!("{} real segments", examples.len()))
            .got(format!(
                "{} real segments (cu_seqlens {:?})",
                real.len(),
                view.cu_seqlens.to_vec()
            )));
    }
    for (ex, &i) in examples.iter().zip(&real) {
        let r = view.real(i);
        if r.len() != ex.len() {
            return Err(v()
                .rule_text("each real segment has its example's length")
                .at(Location::default().segment(i))
                .expected(ex.len())
                .got(r.len()));
        }
        if let Some(ids) = view.input_ids {
            let got = ids.get_slice(r.clone()).unwrap_or_default();
            if let Some(j) = (0..ex.len()).find(|&j| got.get(j) != Some(ex[j])) {
                return Err(v()
                    .rule_text("each real segment holds its example's tokens")
                    .at(Location::default().segment(i).token(r.start + j))
                    .expected(ex[j])
                    .got(got.get(j).map_or("nothing".to_string(), |x| x.to_string())));
            }
        }
    }
    Ok(())
}

/// LAYOUT, `static-shape`: a collator asked for a static `max_seq_length` returns exactly that
/// many tokens (when the examples fit).
///
/// # Errors
/// The token count, against the length asked for.
///
/// # Example
/// ```
/// use rules::checks::{IntSlice, LayoutView, check_static_shape};
/// let view = LayoutView { num_tokens: 6, cu_seqlens: IntSlice::from(&[0, 6]), ..Default::default() };
/// assert!(check_static_shape(&view, 6).is_ok());
/// assert_eq!(check_static_shape(&view, 8).unwrap_err().id, "static-shape");
/// ```
pub fn check_static_shape(view: &LayoutView<'_>, max_seq_length: u64) -> Checked {
    if view.num_tokens as u64 == max_seq_length {
        return Ok(());
    }
    Err(STATIC_SHAPE
        .violation()
        .at(Location::default().key(&view.keys().input_ids))
        .expected(format!("max_seq_length = {max_seq_length} tokens (the examples fit)"))
        .got(format!("{} tokens", view.num_tokens)))
}

/// `documents`: [`check_documents`].
pub(crate) fn judge_documents(i: &CollatorPack<'_>) -> Option<Checked> {
    Some(check_documents(i.examples, i.view))
}

/// `static-shape`: [`check_static_shape`], with a static length.
pub(crate) fn judge_static_shape(i: &CollatorPack<'_>) -> Option<Checked> {
    i.max_seq_length.map(|m| check_static_shape(i.view, m))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::checks::check_layout;
    use crate::contract::Contract;

    #[test]
    fn layout_accepts_a_padded_batch_and_names_each_broken_rule() {
        let ok = LayoutView {
            num_tokens: 8,
            cu_seqlens: IntSlice::from(&[0, 3, 5]),
            cu_seqlens_padded: Some(IntSlice::from(&[0, 4, 8])),
            position_ids: Some(IntSlice::from(&[0, 1, 2, 3, 0, 1, 2, 3])),
            labels: Some(IntSlice::from(&[-100, 2, 3, -100, -100, 6, -100, -100])),
            ..Default::default()
        };
        assert_eq!(check_layout(&ok), Ok(()));
        let bad = LayoutView { cu_seqlens: IntSlice::from(&[0, 3, 2]), ..ok };
        assert_eq!(check_layout(&bad).unwrap_err().rule, "cu_seqlens is non-decreasing");
        let bad = LayoutView { cu_seqlens_padded: Some(IntSlice::from(&[0, 2, 8])), ..ok };
        assert_eq!(check_layout(&bad).unwrap_err().rule, "padded length >= real length");
        let bad =
            LayoutView { position_ids: Some(IntSlice::from(&[0, 1, 2, 3, 4, 5, 6, 7])), ..ok };
        let v = check_layout(&bad).unwrap_err();
        assert_eq!((v.at.segment, v.at.token, v.got.as_str()), (Some(1), Some(4), "4"));
        let bad = LayoutView {
            num_real_seqs: Some(1),
            cu_seqlens: IntSlice::from(&[0, 3, 3]),
            cu_seqlens_padded: Some(IntSlice::from(&[0, 8, 8])),
            position_ids: None,
            labels: None,
            ..ok
        };
        assert_eq!(
            check_layout(&bad).unwrap_err().rule,
            "every mock segment holds at least one token"
        );
    }

    /// One row of two documents whose labels are the row copied: each document's last
    /// prediction targets the next document's first token.
    const STREAM: [i64; 5] = [5, 6, 7, 8, 9];

    fn stream() -> LayoutView<'static> {
        LayoutView {
            num_tokens: 5,
            cu_seqlens: IntSlice::from(&[0, 3, 5]),
            input_ids: Some(IntSlice::from(&STREAM)),
            labels: Some(IntSlice::from(&STREAM)),
            ..Default::default()
        }
    }

    #[test]
    fn a_pretraining_objective_notes_labels_across_documents_instead_of_flagging_them() {
        let stream = stream();
        let o = cross_doc_label(&stream);
        assert!(o.is_violated(), "{o:?}");
        let o = cross_doc_label(&LayoutView {
            facts: Contract {
                objective: Some(crate::contract::Objective::Pretrain),
                ..Contract::default()
            },
            ..stream
        });
        assert!(!o.is_violated(), "{o:?}");
        assert!(o.notes.iter().any(|n| n.contains("of 1 segment targets")), "{o:?}");
    }

    /// `boundary_labels = "masked-by-loss"` (the loss masks each document's last prediction
    /// itself): a live label there is noted, not flagged; the same batch under the default is a
    /// leak, and a wrong label inside a document is still `label-targets`' violation.
    #[test]
    fn a_loss_that_masks_the_boundaries_itself_excuses_only_the_boundary_label() {
        let stream = stream();
        assert!(cross_doc_label(&stream).is_violated());
        let masked = LayoutView {
            facts: Contract {
                boundary_labels: Some(BoundaryLabelsFact::MaskedByLoss),
                ..Contract::default()
            },
            ..stream
        };
        let o = cross_doc_label(&masked);
        assert!(!o.is_violated(), "{o:?}");
        assert!(o.notes.iter().any(|n| n.contains("masked-by-loss")), "{o:?}");
        // A label inside a document that is not the token it predicts: not a boundary, still
        // flagged.
        let wrong = [5, 6, 9, 8, 9];
        let inside = LayoutView { labels: Some(IntSlice::from(&wrong)), ..masked };
        let opts = crate::checks::BatchOptions { causal: true, ..Default::default() };
        let report = crate::checks::check_batch(&inside, &opts);
        let violated: Vec<&str> =
            report.outcomes.iter().filter(|o| o.is_violated()).map(|o| o.rule).collect();
        assert_eq!(violated, ["label-targets"], "{report:?}");
    }

    #[test]
    fn a_shared_position_base_is_noted_and_a_stated_one_is_exact() {
        let roberta = LayoutView {
            num_tokens: 5,
            cu_seqlens: IntSlice::from(&[0, 3, 5]),
            position_ids: Some(IntSlice::from(&[2, 3, 4, 2, 3])),
            ..Default::default()
        };
        let o = position_ids(&roberta);
        assert_eq!(o.status, crate::checks::Status::Ok);
        assert!(o.notes[0].contains("start at 2"), "{o:?}");
        assert!(
            position_ids(&LayoutView {
                facts: Contract { position_base: Some(0), ..roberta.facts },
                ..roberta
            })
            .is_violated()
        );
        // Positions that never restart are not a base.
        let running =
            LayoutView { position_ids: Some(IntSlice::from(&[2, 3, 4, 5, 6])), ..roberta };
        assert!(position_ids(&running).is_violated());
    }
}
