//! The formats a stack may hand the kernel besides offsets, read from files built here: a 4-D
//! block mask (boolean either way round, or additive), EOS-delimited documents, and per-token
//! side tensors. Each is read by its format module and judged by a rule; each planted bug (a
//! mask that lets two documents see each other, a missing EOS, a log-prob tensor one token
//! short) is flagged by the rule that names it.

use std::sync::Arc;

use reader::profile::Profile;
use reader::tensors::{BatchFile, write_raw};
use reader::{CheckOptions, FileReport, ReadOptions, check_file};
use safetensors::Dtype;

/// One tensor to write: name, dtype, shape, little-endian bytes.
type Tensor = (&'static str, Dtype, Vec<usize>, Vec<u8>);

fn ints(name: &'static str, shape: &[usize], v: &[i64]) -> Tensor {
    (name, Dtype::I64, shape.to_vec(), v.iter().flat_map(|x| x.to_le_bytes()).collect())
}

/// A `[1, 1, S, S]` mask from `allowed(q, k)`: boolean as stored (`true_masks` inverts it).
fn bool_mask(s: usize, true_masks: bool, allowed: impl Fn(usize, usize) -> bool) -> Tensor {
    let bytes =
        (0..s * s).map(|i| u8::from(allowed(i / s, i % s) != true_masks)).collect::<Vec<u8>>();
    ("attention_mask", Dtype::BOOL, vec![1, 1, s, s], bytes)
}

/// The same mask, additive f32: 0 attends, -inf masks.
fn additive_mask(s: usize, allowed: impl Fn(usize, usize) -> bool) -> Tensor {
    let bytes = (0..s * s)
        .flat_map(|i| if allowed(i / s, i % s) { 0f32 } else { f32::NEG_INFINITY }.to_le_bytes())
        .collect::<Vec<u8>>();
    ("attention_mask", Dtype::F32, vec![1, 1, s, s], bytes)
}

fn profile(toml: &str) -> Option<Arc<Profile>> {
    Some(Arc::new(Profile::parse(toml, "test profile", None).expect("the test profile parses")))
}

fn check(tensors: &[Tensor], meta: &[(&str, &str)], read: &ReadOptions) -> FileReport {
    let bytes =
        write_raw(tensors.iter().map(|(n, d, s, b)| (*n, *d, s.clone(), b.as_slice())), meta)
            .expect("the test's tensors serialise");
    check_file(BatchFile::from_bytes(bytes).unwrap(), read, &CheckOptions::default())
        .expect("the file reads")
}

/// Two documents [0, 3) and [3, 5) of a 5-token row.
const DOC: [usize; 5] = [0, 0, 0, 1, 1];

fn causal(q: usize, k: usize) -> bool {
    DOC[q] == DOC[k] && k <= q
}

/// The mask of a builder that forgot to cut at the boundary: document 1 sees document 0.
fn leaky(q: usize, k: usize) -> bool {
    k <= q
}

fn row() -> Vec<Tensor> {
    vec![
        ints("input_ids", &[1, 5], &[11, 12, 13, 21, 22]),
        ints("labels", &[1, 5], &[-100, 12, 13, -100, 22]),
        ints("position_ids", &[1, 5], &[0, 1, 2, 0, 1]),
    ]
}

#[test]
fn a_block_mask_of_each_kind_reads_and_passes() {
    let plain = ReadOptions::default();
    let masks = profile("name = \"masks\"\nblock_mask = \"true-masks\"\n");
    let inverted = ReadOptions { profile: masks, ..ReadOptions::default() };
    for (mask, read) in [
        (bool_mask(5, false, causal), &plain),
        (additive_mask(5, causal), &plain),
        (bool_mask(5, true, causal), &inverted),
    ] {
        let mut t = row();
        t.push(mask);
        let r = check(&t, &[], read);
        assert_eq!(r.format, "block-mask");
        assert!(r.violated().is_empty(), "{}", r.text("mask", true));
        assert!(r.text("mask", true).contains("ok       block-mask"), "{}", r.text("mask", true));
    }
}

#[test]
fn a_block_mask_that_lets_two_documents_see_each_other_is_flagged() {
    for mask in [bool_mask(5, false, leaky), additive_mask(5, leaky)] {
        let mut t = row();
        t.push(mask);
        let r = check(&t, &[], &ReadOptions::default());
        assert_eq!(r.violated(), ["block-mask"], "{}", r.text("leaky", true));
        let text = r.text("leaky", true);
        assert!(text.contains("two documents attend to each other"), "{text}");
    }
    // Read the wrong way round (the stack's `true` masks, the profile not saying so), a valid
    // mask is flagged too: what `true` means is a fact of the stack, not of the tensor.
    let mut t = row();
    t.push(bool_mask(5, true, causal));
    let r = check(&t, &[], &ReadOptions::default());
    assert_eq!(r.violated(), ["block-mask"]);
}

#[test]
fn a_mask_of_the_wrong_shape_is_refused_naming_the_key() {
    let mut t = row();
    t.push(("attention_mask", Dtype::BOOL, vec![1, 1, 5, 4], vec![1; 20]));
    let bytes =
        write_raw(t.iter().map(|(n, d, s, b)| (*n, *d, s.clone(), b.as_slice())), &[]).unwrap();
    let err = check_file(
        BatchFile::from_bytes(bytes).unwrap(),
        &ReadOptions::default(),
        &CheckOptions::default(),
    )
    .unwrap_err();
    assert!(err.to_string().contains("attention_mask"), "{err}");
    // A positive entry in an additive mask is not a mask value.
    let mut t = row();
    let mut bad = additive_mask(5, causal);
    bad.3[0..4].copy_from_slice(&1f32.to_le_bytes());
    t.push(bad);
    let bytes =
        write_raw(t.iter().map(|(n, d, s, b)| (*n, *d, s.clone(), b.as_slice())), &[]).unwrap();
    let err = check_file(
        BatchFile::from_bytes(bytes).unwrap(),
        &ReadOptions::default(),
        &CheckOptions::default(),
    )
    .unwrap_err();
    assert!(err.to_string().contains("attention_mask") && err.to_string().contains('1'), "{err}");
}

const EOS_PROFILE: &str = "name = \"eos\"\ndocuments = \"eos\"\neos_token_id = 2\n";

#[test]
fn eos_delimited_documents_read_from_the_eos_tokens() {
    let read = ReadOptions { profile: profile(EOS_PROFILE), ..ReadOptions::default() };
    // [11 12 2] [21 2] [31 32]: the last document of the row is cut by the pack length.
    let t = vec![
        ints("input_ids", &[1, 7], &[11, 12, 2, 21, 2, 31, 32]),
        ints("labels", &[1, 7], &[-100, 12, 2, -100, 2, -100, 32]),
        ints("position_ids", &[1, 7], &[0, 1, 2, 0, 1, 0, 1]),
    ];
    let r = check(&t, &[], &read);
    assert_eq!(r.format, "eos-delimited");
    assert!(r.violated().is_empty(), "{}", r.text("eos", true));
    let text = r.text("eos", true);
    assert!(text.contains("3 documents read from the EOS tokens (2)"), "{text}");
    // The EOS id is a tokenizer fact: metadata states it beside a profile that does not.
    let read = ReadOptions {
        profile: profile("name = \"eos\"\ndocuments = \"eos\"\n"),
        ..ReadOptions::default()
    };
    assert_eq!(check(&t, &[("eos_token_id", "2")], &read).format, "eos-delimited");
}

#[test]
fn an_eos_delimited_batch_whose_eos_is_missing_is_flagged() {
    let read = ReadOptions { profile: profile(EOS_PROFILE), ..ReadOptions::default() };
    // The packer dropped the EOS of the first document: read from the EOS tokens, the two
    // documents are one, and the position ids the collator wrote restart inside it.
    let t = vec![
        ints("input_ids", &[1, 6], &[11, 12, 21, 22, 2, 31]),
        ints("labels", &[1, 6], &[-100, 12, -100, 22, 2, -100]),
        ints("position_ids", &[1, 6], &[0, 1, 0, 1, 2, 0]),
    ];
    let r = check(&t, &[], &read);
    assert_eq!(r.violated(), ["position-ids"], "{}", r.text("no-eos", true));
    // With offsets that delimit the documents, the same packer is flagged by `eos-delimited`.
    let t = vec![
        ints("input_ids", &[1, 6], &[11, 12, 21, 22, 2, 31]),
        ints("labels", &[1, 6], &[-100, 12, -100, 22, 2, -100]),
        ints("cu_seq_lens_q", &[4], &[0, 2, 5, 6]),
    ];
    let r = check(&t, &[], &read);
    assert_eq!(r.format, "cu-seq-lens");
    assert_eq!(r.violated(), ["eos-delimited"], "{}", r.text("no-eos", true));
    // With a 4-D mask built from the true documents, by `block-mask` as well.
    let docs = [0usize, 0, 1, 1, 1, 2];
    let t = vec![
        ints("input_ids", &[1, 6], &[11, 12, 21, 22, 2, 31]),
        ints("labels", &[1, 6], &[-100, 12, -100, 22, 2, -100]),
        bool_mask(6, false, |q, k| docs[q] == docs[k] && k <= q),
    ];
    let r = check(&t, &[], &read);
    assert_eq!(r.format, "block-mask");
    assert_eq!(r.violated(), ["block-mask"], "{}", r.text("no-eos", true));
}

#[test]
fn a_side_tensor_one_token_short_is_flagged_by_token_counts() {
    let read = ReadOptions {
        profile: profile("name = \"rl\"\nside_tensors = [\"old_logprobs\", \"advantages\"]\n"),
        ..ReadOptions::default()
    };
    let floats = |name: &'static str, n: usize| -> Tensor {
        (name, Dtype::F32, vec![1, n], (0..n).flat_map(|_| 0.5f32.to_le_bytes()).collect())
    };
    let mut t = row();
    t.push(ints("cu_seq_lens_q", &[3], &[0, 3, 5]));
    t.push(floats("advantages", 5));
    let mut ok = t.clone();
    ok.push(floats("old_logprobs", 5));
    let r = check(&ok, &[], &read);
    assert!(r.violated().is_empty(), "{}", r.text("rl", true));
    t.push(floats("old_logprobs", 4));
    let r = check(&t, &[], &read);
    assert_eq!(r.violated(), ["token-counts"], "{}", r.text("rl", true));
    let text = r.text("rl", true);
    assert!(text.contains("old_logprobs") && text.contains("one entry short"), "{text}");
}

#[test]
fn position_ids_of_another_count_are_judged_by_token_counts_not_refused() {
    // ms-swift #5665's class: position ids built from the length before truncation, 14 for 10
    // tokens. The documents are read from the ones beside the tokens; the count is the verdict.
    let mut pos: Vec<i64> = (0..10).collect();
    pos.extend(0..4);
    let t = vec![
        ints("input_ids", &[1, 10], &(1..=10).collect::<Vec<_>>()),
        ints("position_ids", &[1, 14], &pos),
    ];
    let r = check(&t, &[], &ReadOptions::default());
    assert_eq!(r.format, "position-restarts");
    assert_eq!(r.violated(), ["token-counts"], "{}", r.text("5665", true));
    assert!(r.text("5665", true).contains("`position_ids` has 14 entries for 10 tokens"));
}

/// The fact `loss_mask` (a batch without labels, its targets what its `loss_mask` trains): a
/// mask pre-rolled (`shifted`) that trains the last token of a document trains the prediction of
/// the next document's first token, flagged; the same mask read `unshifted` trains each
/// document's own tokens. Stated in the profile or the metadata (its older name too), with its
/// origin in the report; `--labels` states it only where `loss_mask` does not.
#[test]
fn the_loss_mask_fact_says_what_a_loss_mask_trains_and_hides_no_leak() {
    let batch = vec![
        ints("input_ids", &[1, 5], &[11, 12, 13, 21, 22]),
        ints("position_ids", &[1, 5], &[0, 1, 2, 0, 1]),
        ints("loss_mask", &[1, 5], &[0, 1, 1, 0, 1]),
    ];
    let read = |toml: &str| ReadOptions { profile: profile(toml), ..ReadOptions::default() };
    let shifted = check(&batch, &[], &read("name = \"rl\"\nloss_mask = \"shifted\"\n"));
    assert_eq!(shifted.violated(), ["cross-doc-label"], "{}", shifted.text("x", false));
    let from = serde_json::to_value(&shifted.contract).unwrap();
    assert_eq!(
        from[0],
        serde_json::json!({"fact": "loss_mask", "value": "shifted", "from": "profile", "profile": "rl"})
    );
    let unshifted = check(&batch, &[], &read("name = \"rl\"\nloss_mask = \"unshifted\"\n"));
    assert!(unshifted.violated().is_empty(), "{}", unshifted.text("x", false));
    // The metadata, under the fact's name or its older one, over the profile.
    for key in ["loss_mask", "loss_mask_convention"] {
        let r =
            check(&batch, &[(key, "shifted")], &read("name = \"rl\"\nloss_mask = \"unshifted\"\n"));
        assert_eq!(r.violated(), ["cross-doc-label"], "{key}");
        assert_eq!(serde_json::to_value(&r.contract).unwrap()[0]["from"], "metadata", "{key}");
    }
    // Without it, the labels fact says it; without either, the targets are unknown (noted).
    let labels = check(&batch, &[("labels", "shifted")], &ReadOptions::default());
    assert_eq!(labels.violated(), ["cross-doc-label"]);
    let unknown = check(&batch, &[], &ReadOptions::default());
    assert!(unknown.violated().is_empty());
    assert!(
        unknown.packs[0].notes.iter().any(|n| n.contains("the fact `loss_mask`")),
        "{unknown:?}"
    );
}

/// Position ids beside a 0/1 padding mask: only real tokens restart a document. ROLL's FSDP2
/// rows (`clip(cumsum(mask) - 1, 0)`: the last position repeated over the padding) are one
/// sequence per row; a real token whose position restarts is still a new document (the mask
/// hides no packing).
#[test]
fn a_padding_mask_says_which_positions_can_restart_a_document() {
    let rows = |pos: &[i64], mask: &[i64]| {
        let t = vec![
            ints("input_ids", &[2, 7], &[5, 6, 7, 8, 9, 0, 0, 5, 6, 7, 8, 9, 4, 0]),
            ints("attention_mask", &[2, 7], mask),
            ints("position_ids", &[2, 7], pos),
        ];
        check(&t, &[], &ReadOptions::default())
    };
    let mask = [1, 1, 1, 1, 1, 0, 0, 1, 1, 1, 1, 1, 1, 0];
    let roll = rows(&[0, 1, 2, 3, 4, 4, 4, 0, 1, 2, 3, 4, 5, 5], &mask);
    assert_eq!(roll.format, "padded-rows", "{}", roll.text("roll", false));
    assert!(roll.violated().is_empty(), "{}", roll.text("roll", false));
    assert_eq!((roll.packs[0].facts.real_segments, roll.packs[0].facts.real_tokens), (2, 11));
    // A hole in the mask (xtuner #567: the EOS masked out mid-row): the positions run on
    // across it, so the row is still one sequence, and `mask` judges the hole.
    let hole = [1, 1, 0, 1, 1, 0, 0, 1, 1, 1, 1, 1, 1, 0];
    let holed = rows(&[0, 1, 2, 3, 4, 4, 4, 0, 1, 2, 3, 4, 5, 5], &hole);
    assert_eq!(holed.format, "padded-rows", "{}", holed.text("hole", false));
    // Two documents in the first row: its positions restart on a real token.
    let packed = rows(&[0, 1, 2, 0, 1, 1, 1, 0, 1, 2, 3, 4, 5, 5], &mask);
    assert_eq!(packed.format, "position-restarts", "{}", packed.text("packed", false));
}

/// One document per row before its pad tail (`documents = "row-pad-tail"`), the pad id also the
/// EOS (LitGPT over a Pythia tokenizer): the first trailing pad id, trained, is the document's
/// EOS. Padding labelled past it (a collator padding its labels with the pad id) is still
/// padding, and `pad-labels` flags it.
#[test]
fn a_trained_eos_equal_to_the_pad_id_ends_its_document_and_hides_no_labelled_padding() {
    let read = ReadOptions {
        profile: profile(
            "name = \"p\"\nformat = \"hf\"\ndocuments = \"row-pad-tail\"\npad_token_id = 0\n",
        ),
        ..ReadOptions::default()
    };
    let ids = [5, 6, 0, 0, 0, 7, 8, 9, 0, 0];
    let valid = [-100, 6, 0, -100, -100, -100, 8, 9, 0, -100];
    let r = check(&[ints("input_ids", &[2, 5], &ids), ints("labels", &[2, 5], &valid)], &[], &read);
    assert!(r.violated().is_empty(), "{}", r.text("eos", false));
    assert_eq!(r.packs[0].facts.real_tokens, 7, "{}", r.text("eos", false));
    let labelled_padding = [-100, 6, 0, 0, 0, -100, 8, 9, 0, -100];
    let r = check(
        &[ints("input_ids", &[2, 5], &ids), ints("labels", &[2, 5], &labelled_padding)],
        &[],
        &read,
    );
    assert_eq!(r.violated(), ["pad-labels"], "{}", r.text("padded labels", false));
}
