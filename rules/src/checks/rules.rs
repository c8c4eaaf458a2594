//! The registry: every rule with an id, once, in report order ([`RULES`]). Each family file
//! declares its rules (with `rule!`, next to their messages and judges); this file only lists
//! them, and runs them in its order: the rules of one pack ([`check_batch`], [`check_layout`])
//! and each fuzz target's ([`judge_packer`], [`judge_cp_split`], [`judge_cp_loss`],
//! [`judge_collator`], [`judge_attention`]). No caller keeps a list of its own.

use crate::checks::batch::{BatchFacts, BatchReport, batch_facts};
use crate::checks::input::{AttentionInput, CpLossInput, CpSplitInput, LoggedKind, PackerInput};
use crate::checks::layout::{offsets, token_counts};
use crate::checks::proof::Proof;
use crate::checks::rule::{
    BatchInput, Fuzz, FuzzTarget, Outcome, Rule, Status, first_violation, rule,
};
use crate::checks::view::{BatchOptions, CollatorPack, LayoutView, mock_segments};
use crate::{Checked, Violation};

/// The registry's rules that `target` judges, in registry order.
///
/// # Example
/// ```
/// use rules::checks::{FuzzTarget, rules_of};
/// let ids: Vec<_> = rules_of(FuzzTarget::CpSplit).map(|r| r.id).collect();
/// assert_eq!(ids, ["cp-shard", "cp-labels", "cp-position-ids", "cp-split-accepted"]);
/// ```
pub fn rules_of(target: FuzzTarget) -> impl Iterator<Item = &'static Rule> {
    RULES.iter().filter(move |r| r.fuzz.is_some_and(|f| f.target() == target))
}

/// Runs the registry's judges of one target on `input` in registry order: the first violation,
/// and the id of every rule whose judge applied (`applied`, in order, each once).
fn judge_first<I: ?Sized>(
    input: &I,
    judge: impl Fn(&Fuzz) -> Option<fn(&I) -> Option<Checked>>,
    applied: &mut Vec<&'static str>,
) -> Checked {
    for rule in RULES {
        let Some(run) = rule.fuzz.as_ref().and_then(&judge) else { continue };
        if let Some(checked) = run(input) {
            if !applied.contains(&rule.id) {
                applied.push(rule.id);
            }
            checked?;
        }
    }
    Ok(())
}

/// PACKER at one point of a fuzz run: the registry's packer rules, in order, first violation.
///
/// # Errors
/// The first violation.
pub fn judge_packer(input: &PackerInput<'_>, applied: &mut Vec<&'static str>) -> Checked {
    judge_first(
        input,
        |f| match f {
            Fuzz::Packer(j) => *j,
            _ => None,
        },
        applied,
    )
}

/// A CP splitter's answer (or refusal): the registry's CP-split rules, in order.
///
/// # Errors
/// The first violation.
pub fn judge_cp_split(input: &CpSplitInput<'_>, applied: &mut Vec<&'static str>) -> Checked {
    judge_first(
        input,
        |f| match f {
            Fuzz::CpSplit(j) => *j,
            _ => None,
        },
        applied,
    )
}

/// A collator's batch, after `check`'s rules: the registry's collator rules, in order.
///
/// # Errors
/// The first violation.
pub fn judge_collator(input: &CollatorPack<'_>, applied: &mut Vec<&'static str>) -> Checked {
    judge_first(
        input,
        |f| match f {
            Fuzz::Collator(j) => *j,
            _ => None,
        },
        applied,
    )
}

/// A loss's answers: every rule of the registry's CP-loss rules that `input` breaks, in
/// registry order (each is a defect of its own, so each is reported).
pub fn judge_cp_loss(input: &CpLossInput<'_>, applied: &mut Vec<&'static str>) -> Vec<Violation> {
    let mut out = Vec::new();
    for rule in RULES {
        let Some(Fuzz::CpLoss(Some(run))) = rule.fuzz else { continue };
        if let Some(checked) = run(input) {
            if !applied.contains(&rule.id) {
                applied.push(rule.id);
            }
            out.extend(checked.err());
        }
    }
    out
}

/// An attention's answers: every rule of the registry's attention rules that `input` breaks,
/// in registry order (each is a defect of its own, so each is reported).
pub fn judge_attention(
    input: &AttentionInput<'_>,
    applied: &mut Vec<&'static str>,
) -> Vec<Violation> {
    let mut out = Vec::new();
    for rule in RULES {
        let Some(Fuzz::Attention(Some(run))) = rule.fuzz else { continue };
        if let Some(checked) = run(input) {
            if !applied.contains(&rule.id) {
                applied.push(rule.id);
            }
            out.extend(checked.err());
        }
    }
    out
}

/// Runs every rule on one pack, in report order. Rules that need what the batch lacks are
/// skipped; skips with nothing to say are left out.
///
/// | id | invariant | function |
/// |---|---|---|
/// | `offsets` | LAYOUT | [`offsets`](crate::checks::offsets) / [`check_offsets`](crate::checks::check_offsets) |
/// | `token-counts` | LAYOUT | [`token_counts`](crate::checks::token_counts) |
/// | `padded-slots` | LAYOUT | [`padded_slots`](crate::checks::padded_slots) |
/// | `qk-offsets` | LAYOUT | [`qk_offsets`](crate::checks::qk_offsets) |
/// | `row-slots` | LAYOUT | [`row_slots`](crate::checks::row_slots) |
/// | `max-seqlen` | LAYOUT | [`max_seqlen`](crate::checks::max_seqlen) |
/// | `num-real-seqs` | LAYOUT | [`num_real_seqs`](crate::checks::num_real_seqs) |
/// | `mock-nonempty` | LAYOUT | [`mock_nonempty`](crate::checks::mock_nonempty) |
/// | `position-ids` | LAYOUT | [`position_ids`](crate::checks::position_ids) |
/// | `cross-doc-label` | LAYOUT | [`cross_doc_label`](crate::checks::cross_doc_label) |
/// | `pad-labels` | LOSS | [`pad_labels`](crate::checks::pad_labels) |
/// | `mask` | LAYOUT | [`mask`](crate::checks::mask) |
/// | `block-mask` | LAYOUT | [`block_mask`](crate::checks::block_mask) (with a 4-D mask) |
/// | `seq-idx` | LAYOUT | [`seq_idx`](crate::checks::seq_idx) |
/// | `eos-delimited` | LAYOUT | [`eos_delimited`](crate::checks::eos_delimited) (documents that end with the EOS) |
/// | `mock-marked` | MFU-PAD | [`mock_marked`](crate::checks::mock_marked) |
/// | `label-targets` | LOSS | [`label_targets`](crate::checks::label_targets) (with `causal`) |
/// | `pad-multiple` | MFU-PAD | [`pad_multiple`](crate::checks::pad_multiple) (with `pad_to_multiple_of`) |
/// | `cp-shard` | CP-SHARD | [`cp_shard`](crate::checks::cp_shard) (with `cp_size`) |
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
    let off = offsets(view);
    let counts = token_counts(view);
    // The view's own tensors: a side tensor of another length (log-probs one short) leaves the
    // layout judgeable, and every other rule runs beside its `token-counts` violation.
    let core = LayoutView { side_tensors: &[], ..*view };
    if off.is_violated() || token_counts(&core).is_violated() {
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

/// The rules [`check_layout`] runs, in order: a batch's layout on its own.
pub fn layout_rules(view: &LayoutView<'_>) -> Vec<Outcome> {
    let off = offsets(view);
    if off.is_violated() {
        return vec![off];
    }
    let counts = token_counts(view);
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
    first_violation(&layout_rules(view))
}

impl LoggedKind {
    /// The registry's rule for a logged value of this kind (`Fuzz::Logged(kind)`), if any.
    ///
    /// # Example
    /// ```
    /// use rules::checks::LoggedKind;
    /// assert_eq!(LoggedKind::Flops.rule().map(|r| r.id), Some("logged-flops"));
    /// ```
    pub fn rule(self) -> Option<Rule> {
        RULES.iter().copied().find(|r| matches!(r.fuzz, Some(Fuzz::Logged(k)) if k == self))
    }
}

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
        batch: |c| Some(crate::checks::padded_slots(c.view)),
        layout: true,
        proof: Proof::Test("rules/src/checks/proofs.rs::padded_slots_rounded_down");
    /// Key offsets equal query offsets. [`crate::checks::qk_offsets`].
    QK_OFFSETS = "qk-offsets", Layout, "key offsets equal query offsets (self-attention packing)",
        batch: |c| Some(crate::checks::qk_offsets(c.view)),
        proof: Proof::Test("rules/src/checks/proofs.rs::qk_offsets_keys_count_the_padding");
    /// Automodel BSHD rows are filled by their slots. [`crate::checks::row_slots`].
    ROW_SLOTS = "row-slots", Layout, "every row but the last is filled exactly by its slots",
        batch: |c| Some(crate::checks::row_slots(c.view)),
        proof: Proof::Batch("examples/batches/bad/te_automodel_row_not_filled.safetensors");
    /// The declared maximum covers the widest slot. [`crate::checks::max_seqlen`].
    MAX_SEQLEN = "max-seqlen", Layout, "the declared max_seqlen covers the widest slot the kernel is given",
        batch: |c| Some(crate::checks::max_seqlen(c.view)),
        proof: Proof::Batch("examples/batches/bad/te_max_seqlen_before_absorb.safetensors");
    /// `num_real_seqs ≤ B`. [`crate::checks::num_real_seqs`].
    NUM_REAL_SEQS = "num-real-seqs", Layout, "num_real_seqs <= number of segments",
        batch: |c| Some(crate::checks::num_real_seqs(c.view)),
        layout: true,
        proof: Proof::Test("rules/src/checks/proofs.rs::num_real_seqs_counted_before_the_drops");
    /// No zero-length mock segment. [`crate::checks::mock_nonempty`].
    MOCK_NONEMPTY = "mock-nonempty", Layout, "every mock segment holds at least one token",
        batch: |c| Some(crate::checks::mock_nonempty(c.view)),
        layout: true,
        proof: Proof::Zoo("DuplicateZeroLengthSegment");
    /// Position ids restart at the base in every segment. [`crate::checks::position_ids`].
    POSITION_IDS = "position-ids", Layout, "position ids restart at each segment start",
        batch: |c| Some(crate::checks::position_ids(c.view)),
        layout: true,
        proof: Proof::Zoo("PositionsNotReset");
    /// No prediction crosses a segment boundary. [`crate::checks::cross_doc_label`].
    CROSS_DOC_LABEL = "cross-doc-label", Layout, "no label of a segment is a token of the next segment",
        batch: crate::checks::layout::cross_doc_label_in,
        layout: true,
        proof: Proof::Zoo("LabelLeak");
    /// Padding and mock tokens carry -100. [`crate::checks::pad_labels`].
    PAD_LABELS = "pad-labels", Loss, "padding and mock tokens carry label -100",
        batch: |c| Some(crate::checks::pad_labels(c.view, c.mock)),
        proof: Proof::Batch("corpus/real/batches/olmo_core/padded_label_mask_v1.3.1.safetensors");
    /// The mask agrees with the segments. [`crate::checks::mask`].
    MASK = "mask", Layout, "the attention / padding mask agrees with the segments",
        batch: |c| Some(crate::checks::mask(c.view, c.mock)),
        proof: Proof::Batch("examples/batches/bad/te_padding_mask_from_token_ids.safetensors");
    /// A 4-D mask keeps each token to its own document. [`crate::checks::block_mask`].
    BLOCK_MASK = "block-mask", Layout, "the 4-D attention mask lets each token see exactly its own document (causal: up to itself)",
        batch: |c| Some(crate::checks::block_mask(c.view, c.mock)),
        layout: true,
        proof: Proof::Zoo("MaskNotReset");
    /// One distinct `seq_idx` per segment. [`crate::checks::seq_idx`].
    SEQ_IDX = "seq-idx", Layout, "seq_idx is constant over a segment and distinct between segments",
        batch: |c| Some(crate::checks::seq_idx(c.view, c.mock)),
        proof: Proof::Zoo("SeqIdxFromLastToken");
    /// EOS-delimited documents end with it and hold none. [`crate::checks::eos_delimited`].
    EOS_DELIMITED = "eos-delimited", Layout, "every document ends with the EOS token and no EOS sits inside one",
        batch: |c| Some(crate::checks::eos_delimited(c.view, c.mock)),
        layout: true,
        proof: Proof::Zoo("EosTruncatedAway");
    /// A mock segment is marked. [`crate::checks::mock_marked`].
    MOCK_MARKED = "mock-marked", MfuPad, "an all-padding (mock) segment is marked by num_real_seqs and carries no label",
        batch: |c| Some(crate::checks::mock_marked(c.view, c.mock)),
        proof: Proof::Batch("examples/batches/bad/hf_mock_without_num_real_seqs.safetensors");
    /// Valid labels are the tokens they predict. [`crate::checks::label_targets`].
    LABEL_TARGETS = "label-targets", Loss, "each valid label is the token it must predict (causal LM)",
        batch: |c| Some(match (c.opts.causal, c.opts.masked_lm) {
            (true, _) => crate::checks::label_targets(c.view, c.mock),
            (false, true) => LABEL_TARGETS.skipped("masked LM: a label is the token at its own position"),
            (false, false) => LABEL_TARGETS.skipped(
                "attention not stated causal: a causal LM's profile states `attention = \"causal\"` (or pass --causal)",
            ),
        }),
        proof: Proof::Batch("examples/batches/bad/cp_rolled_after_split/cp-group");
    /// `T` is a multiple of `pad_to_multiple_of`. [`crate::checks::pad_multiple`].
    PAD_MULTIPLE = "pad-multiple", MfuPad, "T is a multiple of pad_to_multiple_of",
        batch: |c| c.opts.pad_to_multiple_of.map(|m| crate::checks::pad_multiple(c.view, m)),
        proof: Proof::Test("cli/tests/cli/fuzz_collator.rs::fuzz_collator_takes_the_check_options");
    /// The batch shards over the CP ranks. [`crate::checks::cp_shard`],
    /// [`crate::checks::contiguous_group`].
    CP_SHARD = "cp-shard", CpShard, "the batch splits into its CP layout's equal pieces (2·cp zigzag chunks of every slot or of the whole pack, or cp contiguous pieces) and every token lands on one rank",
        batch: |c| c.opts.cp_size.map(|cp| crate::checks::cp_shard(c.view, cp)),
        fuzz: Fuzz::CpSplit(Some(crate::checks::cp_shard::judge_cp_shard)),
        proof: Proof::Zoo("TruncatingSplit");
    /// DPO concatenated offsets. [`crate::checks::dpo_offsets`].
    DPO_OFFSETS = "dpo-offsets", Dpo, "concatenated offsets shift the rejected ones by the padded chosen length, and no document holds the padding",
        proof: Proof::Batch("examples/batches/bad/dpo_offset_real_length.safetensors");
    /// DPO concatenated tensors. [`crate::checks::dpo_concat`].
    DPO_CONCAT = "dpo-concat", Dpo, "concatenated tensors are chosen ++ rejected",
        proof: Proof::Test("rules/src/checks/proofs.rs::dpo_concat_rejected_first");
    /// A collator keeps its documents. [`crate::checks::check_documents`].
    DOCUMENTS = "documents", Layout, "the real segments are exactly the examples, in order",
        fuzz: Fuzz::Collator(Some(crate::checks::layout::judge_documents)),
        proof: Proof::Test("cli/tests/cli/fuzz_collator.rs::fuzz_collator_accepts_declared_rewrites_only");
    /// A collator's batch is one `thdcheck check` reads. `thdcheck fuzz collator` / `logger`,
    /// when the reader refuses the batch.
    BATCH_READABLE = "batch-readable", Layout, "the batch a collator returns is one thdcheck check reads (known keys, integer tensors of consistent shapes)",
        fuzz: Fuzz::Collator(None),
        proof: Proof::Test("cli/tests/cli/fuzz_collator.rs::a_collator_with_a_misspelt_offsets_key_breaks_batch_readable");
    /// A static-shape collator fills exactly its length. [`crate::checks::check_static_shape`].
    STATIC_SHAPE = "static-shape", Layout, "with a static max_seq_length the pack holds exactly that many tokens",
        fuzz: Fuzz::Collator(Some(crate::checks::layout::judge_static_shape)),
        proof: Proof::Test("rules/src/checks/proofs.rs::static_shape_padded_to_the_longest_only");
    /// Dealt packs balance over the data-parallel ranks. [`crate::checks::check_dealing`].
    /// Judged first: a rank short of packs explains whatever else is off.
    PACKER_DEALING = "packer-dealing", Packer, "every data-parallel rank gets the same number of packs",
        fuzz: Fuzz::Packer(Some(crate::checks::packer::judge_dealing)),
        proof: Proof::Adapter("padding_batch_packer");
    /// Packers conserve their input. [`crate::checks::check_conservation`] (with
    /// `packer-capacity`), [`crate::checks::check_emitted_so_far`] after each call of a
    /// session, [`crate::checks::check_refusal`] on a refusal.
    PACKER_CONSERVATION = "packer-conservation", Packer, "every example is emitted or reported dropped, exactly once",
        fuzz: Fuzz::Packer(Some(crate::checks::packer::judge_conservation)),
        proof: Proof::Zoo("DropsOverflow");
    /// Packs fit. Reported by `packer-conservation`'s functions, which account for every pack.
    PACKER_CAPACITY = "packer-capacity", Packer, "every pack is non-empty and respects the capacity (and the packer's maximum sequences per pack)",
        fuzz: Fuzz::Packer(None),
        proof: Proof::Zoo("KeepsOverLongExample");
    /// A packer drops only what its stack declares it may. [`crate::checks::check_drops`].
    PACKER_DROPS = "packer-drops", Packer, "an example is dropped only as declared: longer than the capacity (over-length), or in the trailing packs cut to a multiple of the DP size (dp-remainder)",
        fuzz: Fuzz::Packer(Some(crate::checks::packer::judge_drops)),
        proof: Proof::Test("cli/tests/fuzz_minimal.rs::drops_are_accepted_only_as_declared");
    /// A partitioner asked for k packs gives them. [`crate::checks::check_min_packs`].
    PACKER_MIN_PACKS = "packer-min-packs", Packer, "asked for at least k packs (k partitions, a minimum number of batches), the answer holds min(k, examples emitted) packs or more",
        fuzz: Fuzz::Packer(Some(crate::checks::packer::judge_min_packs)),
        proof: Proof::Adapter("balanced_packer");
    /// First-fit-like packers leave no two packs that fit together. [`crate::checks::check_pairwise_full`].
    PACKER_FIRST_FIT = "packer-first-fit", Packer, "any two packs together exceed the capacity",
        fuzz: Fuzz::Packer(Some(crate::checks::packer::judge_first_fit)),
        proof: Proof::Zoo("StarvedBestFit");
    /// A packing strategy stays within its proven bound of the optimum (the property tests of
    /// `thd`'s packers, on calls of at most 12 single sequences). [`crate::checks::check_quality`].
    PACKER_QUALITY = "packer-quality", Packer, "bins within the strategy's bound of the optimum (FF/BF <= floor(1.7·OPT), FFD <= 11/9·OPT + 6/9)",
        proof: Proof::Test("rules/src/checks/proofs.rs::packer_quality_strict_fit_test");
    /// Same input, same packs. [`crate::checks::check_deterministic`].
    PACKER_DETERMINISTIC = "packer-deterministic", Packer, "same input and options give the same packs",
        fuzz: Fuzz::Packer(Some(crate::checks::packer::judge_deterministic)),
        proof: Proof::Zoo("UnseededShuffle");
    /// A logged count is the step's exact count. [`crate::checks::check_logged`].
    LOGGED_TOKENS = "logged-tokens", TokensCp, "a logged token or sequence count is the step's exact global count",
        fuzz: Fuzz::Logged(LoggedKind::Count),
        proof: Proof::Adapter("logger_rank_local_counts");
    /// Logged FLOPs are the step's. [`crate::checks::check_logged`].
    LOGGED_FLOPS = "logged-flops", Flops, "logged FLOPs and attention sums are the step's exact values",
        fuzz: Fuzz::Logged(LoggedKind::Flops),
        proof: Proof::Adapter("logger_pack_length_squared");
    /// A logged rate is the step's. [`crate::checks::check_logged`].
    LOGGED_RATE = "logged-rate", MfuPad, "a logged rate (TFLOP/s, MFU, tokens/s) is the step's, within the tolerance",
        fuzz: Fuzz::Logged(LoggedKind::Rate),
        proof: Proof::Test("rules/src/checks/proofs.rs::logged_rate_over_padded_tokens");
    /// The parts' sums are the global sums. [`crate::checks::check_cp_loss`].
    CP_LOSS_PARTS = "cp-loss-parts", CpLoss, "the parts' valid-label counts and Σ NLL add up to the global ones",
        fuzz: Fuzz::CpLoss(Some(crate::checks::cp_loss::judge_parts)),
        proof: Proof::Adapter("cp_loss_three_bugs");
    /// The reduced loss is never NaN. [`crate::checks::check_cp_loss`],
    /// [`crate::checks::check_reported_loss`].
    CP_LOSS_FINITE = "cp-loss-finite", CpLoss, "the reported loss is finite, and 0 when nothing is valid (an empty part contributes 0, never NaN)",
        fuzz: Fuzz::CpLoss(Some(crate::checks::cp_loss::judge_finite)),
        proof: Proof::Zoo("NanOnEmptyRank");
    /// The reduced loss is the sum of the sums over the sum of the counts.
    /// [`crate::checks::check_cp_loss`], [`crate::checks::check_reported_loss`].
    CP_LOSS_REDUCTION = "cp-loss-reduction", CpLoss, "the reported loss is Σ_r nll_r / Σ_r count_r, the global loss (not the mean of the parts' means)",
        fuzz: Fuzz::CpLoss(Some(crate::checks::cp_loss::judge_reduction)),
        proof: Proof::Zoo("MeanOfRankMeans");
    /// Counts and the loss do not move with the CP size. [`crate::checks::check_tokens_cp`].
    TOKENS_CP = "tokens-cp", TokensCp, "token counts and the reported loss are the same for every cp size",
        fuzz: Fuzz::CpLoss(Some(crate::checks::tokens_cp::judge_tokens_cp)),
        proof: Proof::Zoo("RankZeroStats");
    /// A rank's labels are the targets rolled on the full sequence. [`crate::checks::check_cp_shard`]
    /// (in `fuzz cp-split`, reported by `cp-shard`'s function).
    CP_LABELS = "cp-labels", CpShard, "labels are rolled on the full sequence, then split",
        fuzz: Fuzz::CpSplit(None),
        proof: Proof::Zoo("SplitThenRoll");
    /// A rank's position ids are global. [`crate::checks::check_cp_shard`] (in `fuzz cp-split`,
    /// reported by `cp-shard`'s function).
    CP_POSITION_IDS = "cp-position-ids", CpShard, "a rank's position ids are each token's offset in its own sequence",
        fuzz: Fuzz::CpSplit(None),
        proof: Proof::Zoo("LocalPositionIds");
    /// A valid layout is never rejected. [`crate::checks::check_split_accepted`].
    CP_SPLIT_ACCEPTED = "cp-split-accepted", CpShard, "a layout with every length divisible by 2·cp is accepted",
        fuzz: Fuzz::CpSplit(Some(crate::checks::cp_shard::judge_split_accepted)),
        proof: Proof::Test("cli/tests/cli/fuzz_numbers.rs::fuzz_cp_split_passes_the_zigzag_and_catches_labels_rolled_after_the_split");
    /// THD attention gives one output row per query token. [`crate::checks::check_attention`].
    ATTN_ROWS = "attn-rows", Attn, "one output row per query token",
        proof: Proof::Test("rules/src/checks/proofs.rs::attn_rows_output_at_real_tokens_only");
    /// No NaN from a row without keys. [`crate::checks::check_attention`].
    ATTN_FINITE = "attn-finite", Attn, "outputs are finite; a row that sees no key gives 0, never NaN",
        proof: Proof::Zoo("NanOnKeylessRows");
    /// THD attention is the oracle's. [`crate::checks::check_attention`].
    ATTN_ORACLE = "attn-oracle", Attn, "THD attention equals the per-sequence BSHD oracle at every real token",
        proof: Proof::Zoo("AttendsToPadding");
    /// Segments do not see each other. [`crate::checks::check_isolation`].
    ATTN_ISOLATION = "attn-isolation", Attn, "perturbing one segment never changes another segment's output",
        proof: Proof::Test("rules/src/checks/proofs.rs::attn_isolation_no_document_mask");
    /// The loss is never NaN. [`crate::checks::check_loss`].
    LOSS_FINITE = "loss-finite", Loss, "the loss is finite; an all-ignored batch gives 0, never NaN",
        proof: Proof::Zoo("NanWhenAllIgnored");
    /// The loss counts the valid labels. [`crate::checks::check_loss`].
    LOSS_COUNT = "loss-count", Loss, "the loss counts exactly the valid label positions within each sequence",
        proof: Proof::Test("rules/src/checks/proofs.rs::loss_count_boundary_label_counted");
    /// Σ NLL is the oracle's. [`crate::checks::check_loss`].
    LOSS_NLL = "loss-nll", Loss, "Σ NLL equals the oracle's (labels shifted within each sequence)",
        proof: Proof::Zoo("LabelsNotShifted");
    /// An all-ignored batch gives 0. [`crate::checks::check_loss`].
    LOSS_EMPTY = "loss-empty", Loss, "an all-ignored batch gives loss 0",
        proof: Proof::Test("rules/src/checks/proofs.rs::loss_empty_placeholder_loss");
    /// The loss is the mean over valid labels. [`crate::checks::check_loss`].
    LOSS_MEAN = "loss-mean", Loss, "the loss is Σ NLL / count",
        proof: Proof::Test("rules/src/checks/proofs.rs::loss_mean_of_sequence_means");
    /// Useful work is Σ over the real segments. [`crate::checks::check_work`].
    WORK_USEFUL = "work-useful", Work, "useful work is Σ over real segments at real lengths",
        proof: Proof::Zoo("PackLengthSquared");
    /// Hardware work bounds useful work. [`crate::checks::check_work`].
    WORK_BOUND = "work-bound", Work, "hardware work >= useful work",
        proof: Proof::Test("rules/src/checks/proofs.rs::work_bound_causal_half_square");
    /// Equality exactly without padding. [`crate::checks::check_work`].
    WORK_EXACT = "work-exact", Work, "hardware = useful exactly when nothing is padded",
        proof: Proof::Test("rules/src/checks/proofs.rs::work_exact_hardware_at_real_lengths");
    /// Hardware FLOPs bound useful FLOPs. [`crate::checks::check_mfu_pad`].
    MFU_HARDWARE_FLOPS = "mfu-hardware-flops", MfuPad, "hardware FLOPs >= useful FLOPs",
        proof: Proof::Zoo("FullSquareCausal");
    /// Hardware MFU bounds useful MFU. [`crate::checks::check_mfu_pad`].
    MFU_HARDWARE = "mfu-hardware", MfuPad, "hardware MFU >= useful MFU",
        proof: Proof::Test("rules/src/checks/proofs.rs::mfu_hardware_mfus_swapped");
    /// Useful MFU is physical. [`crate::checks::check_mfu_pad`].
    MFU_PHYSICAL = "mfu-physical", MfuPad, "useful MFU <= 100 % for a physically possible step time",
        proof: Proof::Test("rules/src/checks/proofs.rs::mfu_physical_one_gpus_peak");
    /// Padding adds no useful FLOPs. [`crate::checks::check_mfu_pad`].
    MFU_USEFUL_FLOPS = "mfu-useful-flops", MfuPad, "useful FLOPs are bit-identical with and without padding",
        proof: Proof::Zoo("MockCountedAsUseful");
    /// Padding leaves useful MFU bit-identical. [`crate::checks::check_mfu_pad`].
    MFU_USEFUL = "mfu-useful", MfuPad, "useful MFU is bit-identical with and without padding",
        proof: Proof::Test("rules/src/checks/proofs.rs::mfu_useful_scaled_by_stored_tokens");
    /// Padding adds no real tokens. [`crate::checks::check_mfu_pad`].
    MFU_REAL_TOKENS = "mfu-real-tokens", MfuPad, "real tokens are unchanged by padding",
        proof: Proof::Test("rules/src/checks/proofs.rs::mfu_real_tokens_count_the_padding");
    /// The attention term is Σ sᵢ². [`crate::checks::check_flops`].
    FLOPS_ATTENTION = "flops-attention", Flops, "the attention term uses Σ sᵢ² of the real sequences of every row (mbs·S² without cu_seqlens)",
        proof: Proof::Zoo("ConfigSeqLength");
    /// The real-token count is Σ sᵢ. [`crate::checks::check_flops`].
    FLOPS_REAL_TOKENS = "flops-real-tokens", Flops, "the real-token count is Σ sᵢ over every row (mbs·S without cu_seqlens)",
        proof: Proof::Test("rules/src/checks/proofs.rs::flops_real_tokens_count_the_padding");
    /// The tensor-token count is Σ mbs·S. [`crate::checks::check_flops`].
    FLOPS_TENSOR_TOKENS = "flops-tensor-tokens", Flops, "the tensor-token count is Σ mbs·S",
        proof: Proof::Test("rules/src/checks/proofs.rs::flops_tensor_tokens_of_one_cp_shard");
    /// FLOPs accumulate additively. [`crate::checks::check_flops_additive`].
    FLOPS_ADDITIVE = "flops-additive", Flops, "accumulation over micro-batches is additive",
        proof: Proof::Test("rules/src/checks/proofs.rs::flops_additive_last_micro_batch_only");
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
    // ---- fuzz attention (issue 41): a user's packed attention against the oracle ----------
    /// The output is the oracle's within the FlashAttention rule.
    /// [`crate::checks::check_attention_output`].
    ATTENTION_OUTPUT = "attention-output", Attn, "at every real token the output equals the oracle's per-document f64 attention within the FlashAttention rule of its dtype (2·max|naive same-dtype − f64| + floor), and is finite",
        fuzz: Fuzz::Attention(Some(crate::checks::attention::judge_output)),
        proof: Proof::Test("cli/tests/cli/fuzz_numbers.rs::fuzz_attention_passes_the_plain_adapter_and_shrinks_each_planted_bug");
    /// Documents do not see each other. [`crate::checks::check_attention_isolation`].
    ATTENTION_ISOLATION = "attention-isolation", Attn, "perturbing the inputs of some documents (and the padding) leaves every other document's output bit-identical",
        fuzz: Fuzz::Attention(Some(crate::checks::attention::judge_isolation)),
        proof: Proof::Test("cli/tests/cli/fuzz_numbers.rs::fuzz_attention_passes_the_plain_adapter_and_shrinks_each_planted_bug");
    /// No query sees a later key of its document. [`crate::checks::check_attention_causal`].
    ATTENTION_CAUSAL = "attention-causal", Attn, "causal: perturbing a document's last token leaves every earlier query of the document bit-identical",
        fuzz: Fuzz::Attention(Some(crate::checks::attention::judge_causal)),
        proof: Proof::Test("cli/tests/cli/fuzz_numbers.rs::fuzz_attention_passes_the_plain_adapter_and_shrinks_each_planted_bug");
    /// Padding rows are finite. [`crate::checks::check_attention_padding`].
    ATTENTION_PADDING = "attention-padding", Attn, "every padding row of the output is finite (never NaN or infinite)",
        fuzz: Fuzz::Attention(Some(crate::checks::attention::judge_padding)),
        proof: Proof::Test("cli/tests/cli/fuzz_numbers.rs::fuzz_attention_passes_the_plain_adapter_and_shrinks_each_planted_bug");
    /// The log-sum-exp, when returned, is the oracle's. [`crate::checks::check_attention_lse`].
    ATTENTION_LSE = "attention-lse", Attn, "the log-sum-exp returned (natural log of Σ exp(scale·q·k) over the visible keys) equals the oracle's at every real token",
        fuzz: Fuzz::Attention(Some(crate::checks::attention::judge_lse)),
        proof: Proof::Test("cli/tests/cli/fuzz_numbers.rs::fuzz_attention_passes_the_plain_adapter_and_shrinks_each_planted_bug");
}

/// Every rule with an id, in report order.
pub const RULES: &[Rule] = &[
    OFFSETS,
    TOKEN_COUNTS,
    PADDED_SLOTS,
    QK_OFFSETS,
    ROW_SLOTS,
    MAX_SEQLEN,
    NUM_REAL_SEQS,
    MOCK_NONEMPTY,
    POSITION_IDS,
    CROSS_DOC_LABEL,
    PAD_LABELS,
    MASK,
    BLOCK_MASK,
    SEQ_IDX,
    EOS_DELIMITED,
    MOCK_MARKED,
    LABEL_TARGETS,
    PAD_MULTIPLE,
    CP_SHARD,
    DPO_OFFSETS,
    DPO_CONCAT,
    DOCUMENTS,
    BATCH_READABLE,
    STATIC_SHAPE,
    PACKER_DEALING,
    PACKER_CONSERVATION,
    PACKER_CAPACITY,
    PACKER_DROPS,
    PACKER_MIN_PACKS,
    PACKER_FIRST_FIT,
    PACKER_QUALITY,
    PACKER_DETERMINISTIC,
    LOGGED_TOKENS,
    LOGGED_FLOPS,
    LOGGED_RATE,
    CP_LOSS_PARTS,
    CP_LOSS_FINITE,
    CP_LOSS_REDUCTION,
    TOKENS_CP,
    CP_LABELS,
    CP_POSITION_IDS,
    CP_SPLIT_ACCEPTED,
    ATTN_ROWS,
    ATTN_FINITE,
    ATTN_ORACLE,
    ATTN_ISOLATION,
    LOSS_FINITE,
    LOSS_COUNT,
    LOSS_NLL,
    LOSS_EMPTY,
    LOSS_MEAN,
    WORK_USEFUL,
    WORK_BOUND,
    WORK_EXACT,
    MFU_HARDWARE_FLOPS,
    MFU_HARDWARE,
    MFU_PHYSICAL,
    MFU_USEFUL_FLOPS,
    MFU_USEFUL,
    MFU_REAL_TOKENS,
    FLOPS_ATTENTION,
    FLOPS_REAL_TOKENS,
    FLOPS_TENSOR_TOKENS,
    FLOPS_ADDITIVE,
    DPO_SEGMENT_COUNT,
    DPO_SEGMENT_ORDER,
    DPO_SEGMENT_TOKENS,
    DPO_SEGMENT_LENGTH,
    ATTENTION_OUTPUT,
    ATTENTION_ISOLATION,
    ATTENTION_CAUSAL,
    ATTENTION_PADDING,
    ATTENTION_LSE,
];

#[cfg(test)]
mod tests {
    use super::*;
    use crate::checks::input::{LossRecord, PartLoss, Split};
    use crate::checks::{
        LoggedTolerance, Number, check_logged, check_reported_loss, cp_loss_violations,
    };

    /// `cp_loss_violations` and `check_reported_loss` run the CP-LOSS judges themselves: what
    /// they find is what the registry's run finds on the same answer, in the same order.
    #[test]
    fn the_cp_loss_checks_find_what_the_registry_finds() {
        let global = LossRecord::from_sums(2.2, 5);
        let right = [PartLoss { nll: 0.8, count: 2 }, PartLoss { nll: 1.4, count: 3 }];
        let short = [PartLoss { nll: 0.4, count: 1 }, PartLoss { nll: 0.9, count: 2 }];
        let empty = [PartLoss { nll: 0.0, count: 0 }, PartLoss { nll: 2.2, count: 5 }];
        for parts in [&right[..], &short, &empty] {
            for reported in [0.44, 1.3 / 3.0, (0.4 + 0.45) / 2.0, f64::NAN, 0.0] {
                let ids = |v: Vec<Violation>| v.into_iter().map(|v| v.id).collect::<Vec<_>>();
                let answer = |parts| CpLossInput::Answer {
                    split: Split::Cp(2),
                    parts,
                    reported,
                    global: &global,
                    rtol: 1e-12,
                };
                let mine = cp_loss_violations(Split::Cp(2), parts, reported, &global, 1e-12);
                let registry = judge_cp_loss(&answer(Some(parts)), &mut Vec::new());
                assert_eq!(ids(mine), ids(registry), "{parts:?}, reported {reported}");
                let mine = check_reported_loss(Split::Cp(2), reported, &global, 1e-12).err();
                let registry = judge_cp_loss(&answer(None), &mut Vec::new());
                assert_eq!(ids(mine.into_iter().collect()), ids(registry), "reported {reported}");
            }
        }
    }

    /// `check_logged` judges a value by its kind's rule in the registry.
    #[test]
    fn a_logged_value_breaks_the_registrys_rule_of_its_kind() {
        let tol = LoggedTolerance { rtol: 1e-6, atol: 0.0 };
        for kind in [LoggedKind::Count, LoggedKind::Flops, LoggedKind::Rate] {
            let v = check_logged("key", kind, Number::Int(1), Number::Int(2), tol, &[]);
            assert_eq!(v.err().map(|v| v.id), kind.rule().map(|r| r.id), "{kind:?}");
        }
    }
}
