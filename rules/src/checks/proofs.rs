//! Planted bugs for the rules that no zoo variant, example adapter or committed batch fails:
//! each test builds the smallest input a real bug of the rule's class produces (the class is
//! cited above it), runs the rule's judge (the function the registry names, or the `check_*`
//! function beneath it), asserts that exactly this rule is violated with a readable message, and
//! runs a control, the same input done right, that holds. The registry names each test as its
//! rule's proof (`proof: Proof::Test("rules/src/checks/proofs.rs::NAME")`), and `properties`'
//! `proofs` test holds every rule to its proof.

use crate::checks::{
    ATTN_ISOLATION, ATTN_ROWS, AttnView, BatchInput, BatchOptions, CollatorPack, DPO_CONCAT,
    DPO_SEGMENT_COUNT, DPO_SEGMENT_LENGTH, DPO_SEGMENT_ORDER, DpoConcat, DpoSegment, DpoView,
    FLOPS_ADDITIVE, FLOPS_REAL_TOKENS, FLOPS_TENSOR_TOKENS, FlopsStats, Fuzz, HardwareKind,
    IntSlice, LOGGED_RATE, LOSS_COUNT, LOSS_EMPTY, LOSS_MEAN, LayoutView, LoggedKind,
    LoggedTolerance, LossRecord, MFU_HARDWARE, MFU_PHYSICAL, MFU_REAL_TOKENS, MFU_USEFUL,
    MetricRecord, MicroBatchView, NUM_REAL_SEQS, Number, OFFSETS, Outcome, PACKER_QUALITY,
    PADDED_SLOTS, QK_OFFSETS, QualityBound, Rule, STATIC_SHAPE, Status, WORK_BOUND, WORK_EXACT,
    WorkSums, WorkView, check_attention, check_dpo, check_flops, check_flops_additive,
    check_isolation, check_logged, check_loss, check_mfu_pad, check_quality, check_work,
    dpo_concat, offsets,
};
use crate::{Checked, Violation};

/// The violation `got` must be: of `rule`, with a message that says what was expected and what
/// was got, in words (no Rust `Option` in it).
fn violated(rule: &Rule, got: Checked) -> Violation {
    let v = got.expect_err(&format!("`{}` holds on its planted bug", rule.id));
    assert_eq!((v.id, v.invariant), (rule.id, rule.invariant), "{v}");
    let said = v.to_string();
    assert!(!v.expected.is_empty() && !v.got.is_empty(), "{said}");
    assert!(!said.contains("Some(") && !said.contains("None"), "{said}");
    v
}

/// [`violated`] for a rule's outcome: the outcome is this rule's, violated.
fn outcome_violated(rule: &Rule, o: Outcome) -> Violation {
    assert_eq!((o.rule, o.status), (rule.id, Status::Violated), "{o:?}");
    let v = violated(rule, Err(o.violation.clone().expect("a violated outcome has its violation")));
    assert_eq!(o.detail, v.summary());
    v
}

/// The control holds.
fn holds(rule: &Rule, got: Checked) {
    assert_eq!(got, Ok(()), "the control breaks `{}`", rule.id);
}

/// The registry's judge of a rule of one pack, on `view` with the default options.
fn judge_pack(rule: &Rule, view: &LayoutView<'_>) -> Outcome {
    let run = rule.batch.unwrap_or_else(|| panic!("`{}` is no rule of one pack", rule.id));
    let mock = vec![false; view.segments()];
    run(&BatchInput { view, mock: &mock, opts: &BatchOptions::default() })
        .unwrap_or_else(|| panic!("`{}` does not apply", rule.id))
}

/// An outcome that holds, as a `Checked`.
fn ok_outcome(o: Outcome) -> Checked {
    match o.violation {
        Some(v) => Err(v),
        None => {
            assert_eq!(o.status, Status::Ok, "{o:?}");
            Ok(())
        }
    }
}

// ---------------------------------------------------------------------------------- LAYOUT

/// `offsets`. Bug class: the per-sequence lengths handed over where cumulative offsets are
/// expected (a collator's `seq_lens` [3, 2] written under the offsets key, never prefix-summed,
/// no leading 0).
#[test]
fn offsets_lengths_passed_as_offsets() {
    let lens = [3, 2];
    let bad = LayoutView { num_tokens: 5, cu_seqlens: IntSlice::from(&lens), ..Default::default() };
    let v = outcome_violated(&OFFSETS, offsets(&bad));
    assert_eq!(v.summary(), "`cu_seqlens`: expected 0, got cu_seqlens[0] = 3");
    let cu = [0, 3, 5];
    holds(&OFFSETS, ok_outcome(offsets(&LayoutView { cu_seqlens: IntSlice::from(&cu), ..bad })));
}

/// `padded-slots`. Bug class: storage offsets rounded *down* to the multiple (`s // m * m`
/// where `ceil(s / m) * m` was meant), so a slot is shorter than the sequence it holds.
#[test]
fn padded_slots_rounded_down() {
    let (lens, m) = ([3i64, 5], 4i64);
    let cum = |f: &dyn Fn(i64) -> i64| {
        let mut c = vec![0i64];
        for &s in &lens {
            c.push(c.last().unwrap() + f(s));
        }
        c
    };
    let (cu, floor, ceil) = (cum(&|s| s), cum(&|s| s / m * m), cum(&|s| (s + m - 1) / m * m));
    assert_eq!(floor, [0, 0, 4]);
    let bad = LayoutView {
        num_tokens: 8,
        cu_seqlens: IntSlice::from(&cu),
        cu_seqlens_padded: Some(IntSlice::from(&floor)),
        ..Default::default()
    };
    let v = outcome_violated(&PADDED_SLOTS, judge_pack(&PADDED_SLOTS, &bad));
    assert_eq!((v.at.segment, v.expected.as_str(), v.got.as_str()), (Some(0), ">= 3", "0"));
    let good = LayoutView { num_tokens: 12, cu_seqlens_padded: Some(IntSlice::from(&ceil)), ..bad };
    holds(&PADDED_SLOTS, ok_outcome(judge_pack(&PADDED_SLOTS, &good)));
}

/// `qk-offsets`. Bug class: self-attention key offsets built from the padded lengths (the
/// attention mask with its pad tail) while the query offsets hold the real ones: every key
/// window after the first is shifted.
#[test]
fn qk_offsets_keys_count_the_padding() {
    let (q, k_padded) = ([0, 3, 5], [0, 4, 8]);
    let bad = LayoutView {
        num_tokens: 8,
        cu_seqlens: IntSlice::from(&q),
        cu_seqlens_k: Some(IntSlice::from(&k_padded)),
        ..Default::default()
    };
    let v = outcome_violated(&QK_OFFSETS, judge_pack(&QK_OFFSETS, &bad));
    assert_eq!(v.summary(), "`cu_seqlens_k`: expected cu_seqlens[1] = 3, got cu_seqlens_k[1] = 4");
    let good = LayoutView { cu_seqlens_k: Some(IntSlice::from(&q)), ..bad };
    holds(&QK_OFFSETS, ok_outcome(judge_pack(&QK_OFFSETS, &good)));
}

/// `num-real-seqs`. Bug class: `num_real_seqs` taken from the examples handed to the packer,
/// before it dropped an over-length one: three announced, two segments emitted.
#[test]
fn num_real_seqs_counted_before_the_drops() {
    let (capacity, examples) = (6, [3usize, 9, 3]);
    let kept: Vec<usize> = examples.iter().copied().filter(|&s| s <= capacity).collect();
    let cu = [0, 3, 6];
    assert_eq!(kept.len() + 1, cu.len());
    let bad = LayoutView {
        num_tokens: 6,
        cu_seqlens: IntSlice::from(&cu),
        num_real_seqs: Some(examples.len()),
        ..Default::default()
    };
    let v = outcome_violated(&NUM_REAL_SEQS, judge_pack(&NUM_REAL_SEQS, &bad));
    assert_eq!(v.summary(), "`num_real_seqs`: expected <= 2, got 3");
    let good = LayoutView { num_real_seqs: Some(kept.len()), ..bad };
    holds(&NUM_REAL_SEQS, ok_outcome(judge_pack(&NUM_REAL_SEQS, &good)));
}

/// `static-shape`. Bug class: a collator asked for a static `max_seq_length` pads only to the
/// longest pack (`padding=True`, "longest", where `padding="max_length"` was asked): the shape
/// changes from step to step and compiled graphs recompile.
#[test]
fn static_shape_padded_to_the_longest_only() {
    let examples: [&[i64]; 2] = [&[5, 6, 7], &[8, 9]];
    let cu = [0, 3, 5];
    let bad = LayoutView { num_tokens: 5, cu_seqlens: IntSlice::from(&cu), ..Default::default() };
    let Some(Fuzz::Collator(Some(judge))) = STATIC_SHAPE.fuzz else {
        panic!("static-shape is judged by `fuzz collator`")
    };
    let pack = |view| CollatorPack { examples: &examples, view, max_seq_length: Some(8) };
    let v = violated(&STATIC_SHAPE, judge(&pack(&bad)).expect("a static length applies"));
    assert_eq!(v.got, "5 tokens");
    assert!(v.expected.contains("max_seq_length = 8"), "{v}");
    let good = LayoutView { num_tokens: 8, ..bad };
    holds(&STATIC_SHAPE, judge(&pack(&good)).expect("a static length applies"));
}

// ---------------------------------------------------------------------------------- DPO

/// Chosen `[3, 5]` padded to 10, rejected `[2, 4]` padded to 10; tags 1, 2 (chosen), 3, 4
/// (rejected), 0 = padding. The example of [`check_dpo`].
const DPO_TAGS: [i64; 20] = [1, 1, 1, 2, 2, 2, 2, 2, 0, 0, 3, 3, 4, 4, 4, 4, 0, 0, 0, 0];

fn dpo_want() -> [DpoSegment; 4] {
    let seg = |example, rejected, tag, len| DpoSegment { example, rejected, tag, len };
    [seg(0, false, 1, 3), seg(1, false, 2, 5), seg(0, true, 3, 2), seg(1, true, 4, 4)]
}

/// The exact layout: real lengths, storage offsets over the padded chosen pack.
fn dpo_right() -> DpoView<'static> {
    DpoView {
        tags: &DPO_TAGS,
        cu_seqlens: &[0, 3, 8, 10, 14],
        cu_seqlens_padded: Some(&[0, 3, 10, 12, 16]),
        seq_idx: None,
    }
}

/// `dpo-segment-count`. Bug class: the concatenated forward given only the chosen branch's
/// offsets (the rejected `cu_seqlens` never appended): two segments for four examples.
#[test]
fn dpo_segment_count_rejected_offsets_dropped() {
    let bad = DpoView { cu_seqlens: &[0, 3, 8], cu_seqlens_padded: None, ..dpo_right() };
    let v = violated(&DPO_SEGMENT_COUNT, check_dpo(&bad, &dpo_want()));
    assert_eq!(v.expected, "4 segments");
    holds(&DPO_SEGMENT_COUNT, check_dpo(&dpo_right(), &dpo_want()));
}

/// `dpo-segment-order`. Bug class: the rejected offsets appended without the shift by the
/// chosen pack's length (`chosen ++ rejected[1:]`): the offsets fall back to 2 after 8.
#[test]
fn dpo_segment_order_rejected_not_shifted() {
    let (chosen, rejected) = ([0i64, 3, 8], [0i64, 2, 6]);
    let unshifted: Vec<i64> = chosen.iter().chain(&rejected[1..]).copied().collect();
    let bad = DpoView { cu_seqlens: &unshifted, cu_seqlens_padded: None, ..dpo_right() };
    let v = violated(&DPO_SEGMENT_ORDER, check_dpo(&bad, &dpo_want()));
    assert_eq!((v.at.segment, v.got.as_str()), (Some(2), "-6"));
    holds(&DPO_SEGMENT_ORDER, check_dpo(&dpo_right(), &dpo_want()));
}

/// `dpo-segment-length`. Bug class: the offsets built from the label lengths after the shift
/// (`sᵢ − 1` per sequence) while the storage offsets are right: each segment starts on its own
/// example and stops one token short.
#[test]
fn dpo_segment_length_label_lengths() {
    let mut short = vec![0i64];
    for s in dpo_want() {
        short.push(short.last().unwrap() + i64::from(s.len) - 1);
    }
    let bad = DpoView { cu_seqlens: &short, ..dpo_right() };
    let v = violated(&DPO_SEGMENT_LENGTH, check_dpo(&bad, &dpo_want()));
    assert_eq!(v.at.segment, Some(0));
    assert_eq!(v.expected, "3 tokens of chosen example 0");
    holds(&DPO_SEGMENT_LENGTH, check_dpo(&dpo_right(), &dpo_want()));
}

/// `dpo-concat`. Bug class: the concatenated tensors built `cat(rejected, chosen)` while the
/// offsets (and the loss's split at the chosen length) assume chosen first.
#[test]
fn dpo_concat_rejected_first() {
    let (chosen, rejected) = (vec![11i64, 12, 13, 0], vec![21i64, 22, 23, 24]);
    let cat = |a: &[i64], b: &[i64]| [a, b].concat();
    let concat = |stored| DpoConcat {
        key: "concatenated_cu_seq_lens_k".into(),
        concatenated: vec![0, 3, 4, 8],
        chosen: vec![0, 3],
        rejected: vec![0, 4],
        chosen_tokens: chosen.len(),
        tensors: vec![("concatenated_input_ids".into(), stored, cat(&chosen, &rejected))],
    };
    let o = dpo_concat(&concat(cat(&rejected, &chosen))).expect("a stored concatenation");
    let v = outcome_violated(&DPO_CONCAT, o);
    assert_eq!(
        v.summary(),
        "token 0, `concatenated_input_ids`: expected 11 (chosen token), got \
         concatenated_input_ids[0] = 21"
    );
    let o = dpo_concat(&concat(cat(&chosen, &rejected))).expect("a stored concatenation");
    holds(&DPO_CONCAT, ok_outcome(o));
}

// ---------------------------------------------------------------------------------- PACKER

/// First fit with `fits(used, len)` deciding whether an example joins an open pack: the
/// number of packs.
fn first_fit(lens: &[u64], fits: impl Fn(u64, u64) -> bool) -> usize {
    let mut packs: Vec<u64> = Vec::new();
    for &s in lens {
        match packs.iter_mut().find(|used| fits(**used, s)) {
            Some(used) => *used += s,
            None => packs.push(s),
        }
    }
    packs.len()
}

/// `packer-quality`. Bug class: a first-fit packer whose fit test is strict
/// (`used + len < capacity`, an off-by-one): no pack is ever filled to exactly its capacity,
/// so four halves take four packs where two are optimal.
#[test]
fn packer_quality_strict_fit_test() {
    let (lens, capacity) = ([5u64, 5, 5, 5], 10);
    let opt = lens.iter().sum::<u64>().div_ceil(capacity) as usize; // attained: two pairs
    let strict = first_fit(&lens, |used, s| used + s < capacity);
    let right = first_fit(&lens, |used, s| used + s <= capacity);
    assert_eq!((strict, right, opt), (4, 2, 2));
    let v = violated(&PACKER_QUALITY, check_quality(QualityBound::FirstFit, strict, opt));
    assert_eq!(v.summary(), "expected <= ⌊1.7·2⌋ = 3, got 4 bins (OPT = 2)");
    holds(&PACKER_QUALITY, check_quality(QualityBound::FirstFit, right, opt));
}

// ---------------------------------------------------------------------------------- ATTN

/// Bidirectional single-head attention, `head_dim` 1, over `[T]` q, k, v: each real query of
/// a segment attends to the keys of `keys_of(segment)`.
fn attend(
    q: &[f64],
    k: &[f64],
    v: &[f64],
    keys: impl Fn(usize) -> std::ops::Range<usize>,
) -> Vec<f64> {
    (0..q.len())
        .map(|t| {
            let r = keys(t);
            let w: Vec<f64> = r.clone().map(|j| (q[t] * k[j]).exp()).collect();
            let z: f64 = w.iter().sum();
            r.zip(&w).map(|(j, w)| w / z * v[j]).sum()
        })
        .collect()
}

/// `attn-isolation`. Bug class: attention over the whole pack with no document mask (the
/// open-instruct DPO forward before #1670, axolotl #3608): perturbing one segment's values
/// changes another segment's output.
#[test]
fn attn_isolation_no_document_mask() {
    let lens = [2u32, 2];
    let view = AttnView { lens_q: &lens, storage_q: None, heads: 1, head_dim: 1 };
    let (q, k) = ([0.1, 0.2, 0.3, 0.4], [0.5, -0.5, 0.25, 1.0]);
    let (v, v_perturbed) = ([1.0, 2.0, 3.0, 4.0], [-7.0, 9.0, 3.0, 4.0]); // segment 0's values
    let whole = |_: usize| 0..4;
    let own = |t: usize| if t < 2 { 0..2 } else { 2..4 };
    let got = violated(
        &ATTN_ISOLATION,
        check_isolation(&view, &attend(&q, &k, &v, whole), &attend(&q, &k, &v_perturbed, whole), 0),
    );
    assert_eq!((got.at.segment, got.at.token), (Some(1), Some(2)));
    holds(
        &ATTN_ISOLATION,
        check_isolation(&view, &attend(&q, &k, &v, own), &attend(&q, &k, &v_perturbed, own), 0),
    );
}

/// `attn-rows`. Bug class: a varlen kernel's output left at the real tokens (`[Σ sᵢ]` rows,
/// unpadded) while the caller reads it as the padded `[T]` storage: the padding was never
/// scattered back, so rows run out.
#[test]
fn attn_rows_output_at_real_tokens_only() {
    let (lens, storage) = ([1u32, 1], [2u32, 2]);
    let view = AttnView { lens_q: &lens, storage_q: Some(&storage), heads: 1, head_dim: 1 };
    let oracle = [1.0, 0.0, 2.0, 0.0]; // [T] storage, padding rows 0
    let unpadded = [1.0, 2.0];
    let v = violated(&ATTN_ROWS, check_attention(&view, &unpadded, &oracle, 1e-12));
    assert_eq!(v.summary(), "segment 1, token 2: expected 4 values, got 2 values");
    holds(&ATTN_ROWS, check_attention(&view, &oracle, &oracle, 1e-12));
}

// ---------------------------------------------------------------------------------- LOSS

/// Σ NLL and the count of valid labels of a pack whose every token's NLL is `nll`, labels
/// shifted within each sequence (`within`) or over the whole pack.
fn shifted_loss(lens: &[u64], nll: f64, within: bool) -> LossRecord {
    let total: u64 = lens.iter().sum();
    let count = if within { lens.iter().map(|s| s.saturating_sub(1)).sum() } else { total - 1 };
    LossRecord::from_sums(nll * count as f64, count)
}

/// `loss-count`. Bug class: labels shifted over the whole pack instead of within each
/// sequence: the last token of every sequence but the last gets a label (the next document's
/// first token) and is counted.
#[test]
fn loss_count_boundary_label_counted() {
    let lens = [3, 2];
    let oracle = shifted_loss(&lens, std::f64::consts::LN_2, true);
    let got = shifted_loss(&lens, std::f64::consts::LN_2, false);
    let v = violated(&LOSS_COUNT, check_loss(&got, &oracle, 1e-12));
    assert_eq!((v.expected.as_str(), v.got.as_str()), ("3 valid labels", "4 valid labels"));
    holds(&LOSS_COUNT, check_loss(&oracle, &oracle, 1e-12));
}

/// `loss-empty`. Bug class: an all-ignored step reports a placeholder instead of 0
/// (`loss = nll / count if count else torch.tensor(1.0)`): finite, so `loss-finite` holds.
#[test]
fn loss_empty_placeholder_loss() {
    let oracle = LossRecord::from_sums(0.0, 0);
    let placeholder = LossRecord { nll: 0.0, count: 0, mean: 1.0 };
    let v = violated(&LOSS_EMPTY, check_loss(&placeholder, &oracle, 1e-12));
    assert_eq!(v.summary(), "expected 0, got 1");
    holds(&LOSS_EMPTY, check_loss(&oracle, &oracle, 1e-12));
}

/// `loss-mean`. Bug class: the mean of the sequences' means instead of the mean over tokens (a
/// sequence-level reduction; the gradient-accumulation class of transformers PR #34191): a
/// sequence of one valid label weighs as much as one of three.
#[test]
fn loss_mean_of_sequence_means() {
    let per_token: [&[f64]; 2] = [&[1.0, 1.0, 1.0], &[3.0]];
    let nll: f64 = per_token.iter().flat_map(|s| s.iter()).sum();
    let count = per_token.iter().map(|s| s.len() as u64).sum();
    let seq_means: Vec<f64> =
        per_token.iter().map(|s| s.iter().sum::<f64>() / s.len() as f64).collect();
    let mean_of_means = seq_means.iter().sum::<f64>() / seq_means.len() as f64;
    let oracle = LossRecord::from_sums(nll, count);
    let got = LossRecord { mean: mean_of_means, ..oracle };
    let v = violated(&LOSS_MEAN, check_loss(&got, &oracle, 1e-12));
    assert_eq!((v.expected.as_str(), v.got.as_str()), ("1.5", "2"));
    holds(&LOSS_MEAN, check_loss(&oracle, &oracle, 1e-12));
}

// ---------------------------------------------------------------------------------- WORK

/// `work-bound`. Bug class: the causal hardware work counted as half the square, `S² / 2`
/// (dropping the diagonal), against the exact useful triangle `S(S+1)/2`.
#[test]
fn work_bound_causal_half_square() {
    let view = WorkView { lens: &[4], storage: &[4], num_real: 1, stored_tokens: 4 };
    let useful = WorkSums::of([4]);
    let half_square = WorkSums { triangle: 16 / 2, ..useful };
    let v =
        violated(&WORK_BOUND, check_work(&view, &useful, &half_square, HardwareKind::WholePack));
    assert!(v.got.contains("triangle: 8"), "{v}");
    holds(&WORK_BOUND, check_work(&view, &useful, &WorkSums::of([4]), HardwareKind::WholePack));
}

/// `work-exact`. Bug class: the hardware work of a varlen kernel counted at the real lengths,
/// leaving out the padding it computes: hardware = useful on a padded pack.
#[test]
fn work_exact_hardware_at_real_lengths() {
    let view = WorkView { lens: &[3], storage: &[4], num_real: 1, stored_tokens: 4 };
    let useful = WorkSums::of([3]);
    let v =
        violated(&WORK_EXACT, check_work(&view, &useful, &WorkSums::of([3]), HardwareKind::Varlen));
    assert!(v.expected.starts_with("hardware > useful"), "{v}");
    holds(&WORK_EXACT, check_work(&view, &useful, &WorkSums::of([4]), HardwareKind::Varlen));
}

// ---------------------------------------------------------------------------------- MFU-PAD

/// MFU in percent of a step that could do 1000 FLOPs at peak.
fn mfu(flops: u128) -> f64 {
    flops as f64 * 100.0 / 1000.0
}

/// A step of 15 real tokens and 77 useful FLOPs, padded to 16 tokens (80 hardware FLOPs).
fn padded_step() -> MetricRecord {
    MetricRecord {
        real_tokens: 15,
        useful_flops: 77,
        hardware_flops: 80,
        mfu_pct: mfu(77),
        mfu_padded_pct: mfu(80),
    }
}

/// The same examples without padding.
fn unpadded_step() -> MetricRecord {
    MetricRecord { hardware_flops: 77, mfu_padded_pct: mfu(77), ..padded_step() }
}

/// `mfu-hardware`. Bug class: the two MFUs swapped in the logger (useful MFU from the hardware
/// FLOPs, hardware MFU from the useful ones).
#[test]
fn mfu_hardware_mfus_swapped() {
    let right = padded_step();
    let swapped =
        MetricRecord { mfu_pct: right.mfu_padded_pct, mfu_padded_pct: right.mfu_pct, ..right };
    let v = violated(&MFU_HARDWARE, check_mfu_pad(&swapped, &[], true));
    assert_eq!(v.summary(), "no padding: expected >= 8, got 7.7");
    holds(&MFU_HARDWARE, check_mfu_pad(&right, &[], true));
}

/// `mfu-physical`. Bug class: the FLOPs of every rank divided by one GPU's peak (the world size
/// missing from the denominator): 8 GPUs at 50 % log 400 %.
#[test]
fn mfu_physical_one_gpus_peak() {
    let (gpus, peak_per_gpu, flops) = (8u128, 1_000u128, 4_000u128);
    let pct = |peak: u128| flops as f64 * 100.0 / peak as f64;
    let rec = |p| MetricRecord {
        real_tokens: 4,
        useful_flops: flops,
        hardware_flops: flops,
        mfu_pct: p,
        mfu_padded_pct: p,
    };
    let v = violated(&MFU_PHYSICAL, check_mfu_pad(&rec(pct(peak_per_gpu)), &[], true));
    assert_eq!((v.expected.as_str(), v.got.as_str()), ("<= 100", "400"));
    holds(&MFU_PHYSICAL, check_mfu_pad(&rec(pct(gpus * peak_per_gpu)), &[], true));
}

/// `mfu-useful`. Bug class: the useful MFU scaled by the stored tokens (tokens per second of
/// the padded tensor × FLOPs per token) while the useful FLOPs are right: padding raises it.
#[test]
fn mfu_useful_scaled_by_stored_tokens() {
    let right = padded_step();
    let scaled = MetricRecord { mfu_pct: right.mfu_pct * 16.0 / 15.0, ..right };
    let v = violated(
        &MFU_USEFUL,
        check_mfu_pad(&unpadded_step(), &[("pad_to_multiple_of=16".into(), scaled)], true),
    );
    assert_eq!(v.at.context.as_deref(), Some("pad_to_multiple_of=16"));
    holds(
        &MFU_USEFUL,
        check_mfu_pad(&unpadded_step(), &[("pad_to_multiple_of=16".into(), right)], true),
    );
}

/// `mfu-real-tokens`. Bug class: the real tokens counted as the stored ones, padding included
/// (Megatron-LM PR #5541, padded boundaries taken as real).
#[test]
fn mfu_real_tokens_count_the_padding() {
    let right = padded_step();
    let counted = MetricRecord { real_tokens: 16, ..right };
    let v = violated(
        &MFU_REAL_TOKENS,
        check_mfu_pad(&unpadded_step(), &[("pad_to_multiple_of=16".into(), counted)], true),
    );
    assert_eq!(v.summary(), "pad_to_multiple_of=16: expected 15, got 16");
    holds(
        &MFU_REAL_TOKENS,
        check_mfu_pad(&unpadded_step(), &[("pad_to_multiple_of=16".into(), right)], true),
    );
}

// ---------------------------------------------------------------------------------- FLOPS

/// One packed row of `S` = 8 holding sequences of 3 and 4 real tokens (one token of padding).
fn padded_micro_batch() -> MicroBatchView {
    MicroBatchView { rows: 1, seq_len: 8, packed: Some(vec![vec![3, 4]]) }
}

/// `flops-real-tokens`. Bug class: the real-token count taken from the tensor (`mbs · S`,
/// padding included) while `Σ sᵢ²` is read from the offsets.
#[test]
fn flops_real_tokens_count_the_padding() {
    let mb = padded_micro_batch();
    let right = mb.expected();
    let got = FlopsStats { real_seqlen_sum: mb.rows * mb.seq_len, ..right };
    let v = violated(&FLOPS_REAL_TOKENS, check_flops(std::slice::from_ref(&mb), &got));
    assert_eq!((v.expected.as_str(), v.got.as_str()), ("7", "8"));
    holds(&FLOPS_REAL_TOKENS, check_flops(&[mb], &right));
}

/// `flops-tensor-tokens`. Bug class: the tensor tokens of one CP rank's shard (`S / cp`, the
/// local length after the split) counted as the step's.
#[test]
fn flops_tensor_tokens_of_one_cp_shard() {
    let (mb, cp) = (padded_micro_batch(), 2);
    let right = mb.expected();
    let got = FlopsStats { seqlen_sum: mb.rows * mb.seq_len / cp, ..right };
    let v = violated(&FLOPS_TENSOR_TOKENS, check_flops(std::slice::from_ref(&mb), &got));
    assert_eq!((v.expected.as_str(), v.got.as_str()), ("8", "4"));
    holds(&FLOPS_TENSOR_TOKENS, check_flops(&[mb], &right));
}

/// `flops-additive`. Bug class: an accumulator that assigns instead of adding
/// (`self.stats = stats` per micro-batch): only the last micro-batch survives.
#[test]
fn flops_additive_last_micro_batch_only() {
    let parts = [
        padded_micro_batch().expected(),
        MicroBatchView { rows: 1, seq_len: 8, packed: Some(vec![vec![8]]) }.expected(),
    ];
    let accumulate = |add: bool| {
        parts.iter().fold(FlopsStats::default(), |acc, p| match add {
            true => FlopsStats {
                seqlen_sum: acc.seqlen_sum + p.seqlen_sum,
                seqlen_sq_sum: acc.seqlen_sq_sum + p.seqlen_sq_sum,
                real_seqlen_sum: acc.real_seqlen_sum + p.real_seqlen_sum,
            },
            false => *p,
        })
    };
    let v = violated(&FLOPS_ADDITIVE, check_flops_additive(&parts, &accumulate(false)));
    assert!(v.expected.contains("Σ of 2 micro-batches"), "{v}");
    holds(&FLOPS_ADDITIVE, check_flops_additive(&parts, &accumulate(true)));
}

// ---------------------------------------------------------------------------------- LOGGED

/// `logged-rate`. Bug class: tokens per second logged from the stored tokens, padding
/// included (16 per step where 15 are real).
#[test]
fn logged_rate_over_padded_tokens() {
    let (real, stored, seconds) = (15.0, 16.0, 0.5);
    let tol = LoggedTolerance { rtol: 1e-6, atol: 0.0 };
    let check = |logged: f64| {
        let key = "train/tokens_per_second";
        check_logged(
            key,
            LoggedKind::Rate,
            Number::Float(logged),
            Number::Float(real / seconds),
            tol,
            &[],
        )
    };
    let v = violated(&LOGGED_RATE, check(stored / seconds));
    assert_eq!((v.expected.as_str(), v.got.as_str()), ("30", "32"));
    holds(&LOGGED_RATE, check(real / seconds));
}
