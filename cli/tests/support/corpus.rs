//! The example batches under `examples/batches/`: what the reference collators (`thd`) emit in
//! every dialect, and the same batches with one historical bug each.
//!
//! `cargo run -p thdcheck --example make_batches` writes them and `expected.toml`; a test
//! checks that the committed files are byte-identical to what this module produces.

use safetensors::Dtype;
use thd::PackedBatch;
use thd::collate::{
    BoundaryLabels, CpPadding, Document as Doc, DpoExample, DpoOptions, FlattenOptions,
    MockPadding, Overflow, StaticPadding, attention_mask, collate_dpo, flatten, pad_for_cp,
    pad_to_multiple_of, seq_idx,
};
use thd::cp::shift_labels;

use reader::Result;
use reader::tensors::write_raw;

/// One example batch file.
#[derive(Debug, Clone)]
pub struct ExampleBatch {
    /// Path under `examples/batches/`.
    pub path: &'static str,
    /// What it is and, for a bad one, which bug it reproduces.
    pub summary: &'static str,
    /// The checks it must violate (empty: it must pass).
    pub violates: &'static [&'static str],
    /// The file's bytes.
    pub bytes: Vec<u8>,
}

/// A tensor to write: name, dtype, shape, values.
#[derive(Clone)]
struct T(String, Dtype, Vec<usize>, Vec<i64>);

fn tok(name: impl Into<String>, v: &[i64]) -> T {
    T(name.into(), Dtype::I64, vec![1, v.len()], v.to_vec())
}
fn cu(name: impl Into<String>, v: &[i64]) -> T {
    T(name.into(), Dtype::I32, vec![v.len()], v.to_vec())
}
fn scalar(name: impl Into<String>, v: i64) -> T {
    T(name.into(), Dtype::I64, vec![], vec![v])
}
fn mask(name: impl Into<String>, v: &[bool]) -> T {
    T(name.into(), Dtype::BOOL, vec![1, v.len()], v.iter().map(|&b| i64::from(b)).collect())
}
fn widen(c: &thd::CuSeqlens) -> Vec<i64> {
    c.as_slice().iter().map(|&x| i64::from(x)).collect()
}

fn encode(tensors: &[T], metadata: &[(&str, &str)]) -> Result<Vec<u8>> {
    let bytes: Vec<Vec<u8>> = tensors
        .iter()
        .map(|T(_, d, _, v)| match d {
            Dtype::I32 => v.iter().flat_map(|&x| (x as i32).to_le_bytes()).collect(),
            Dtype::BOOL => v.iter().map(|&x| x as u8).collect(),
            _ => v.iter().flat_map(|&x| x.to_le_bytes()).collect(),
        })
        .collect();
    write_raw(
        tensors
            .iter()
            .zip(&bytes)
            .map(|(T(n, d, s, _), b)| (n.as_str(), *d, s.clone(), b.as_slice())),
        metadata,
    )
}

/// The HF / bionemo keys of a flattened pack.
fn hf_keys(prefix: &str, b: &PackedBatch) -> Vec<T> {
    let name = |k: &str| format!("{prefix}{k}");
    let c = widen(b.cu_seqlens());
    let max = b.cu_seqlens().max_seqlen() as i64;
    vec![
        tok(name("input_ids"), b.input_ids()),
        tok(name("labels"), b.labels()),
        tok(name("position_ids"), b.position_ids()),
        cu(name("cu_seq_lens_q"), &c),
        cu(name("cu_seq_lens_k"), &c),
        scalar(name("max_length_q"), max),
        scalar(name("max_length_k"), max),
    ]
}

fn docs(lens: &[usize], first_id: i64) -> Vec<Doc> {
    let mut next = first_id;
    lens.iter()
        .map(|&n| {
            let ids = (0..n as i64).map(|j| next + j).collect();
            next += n as i64;
            Doc::new(ids)
        })
        .collect()
}

fn set(ts: &mut [T], name: &str, v: Vec<i64>) {
    if let Some(t) = ts.iter_mut().find(|t| t.0 == name) {
        t.2 = if t.2.is_empty() {
            vec![]
        } else if t.2.len() == 2 {
            vec![1, v.len()]
        } else {
            vec![v.len()]
        };
        t.3 = v;
    }
}

/// Every example batch, good ones first.
///
/// # Errors
/// Only if a reference collator rejects its own input (a bug in this module).
pub fn examples() -> Result<Vec<ExampleBatch>> {
    let mut out = Vec::new();
    let mut push = |path, summary, violates, bytes| {
        out.push(ExampleBatch { path, summary, violates, bytes });
    };

    // bionemo DataCollatorWithFlattening, 5/6/4 tokens (separator -100 after the first).
    let bionemo = FlattenOptions { boundary: BoundaryLabels::AfterFirst, static_padding: None };
    let flat = flatten(&docs(&[5, 6, 4], 10), &bionemo)?;
    let mut keys = hf_keys("", &flat);
    keys.push(mask("attention_mask", &vec![true; flat.num_tokens()]));
    push(
        "good/hf_bionemo_flatten.safetensors",
        "bionemo DataCollatorWithFlattening, 5/6/4 tokens",
        &[][..],
        encode(&keys, &[])?,
    );

    // pad_to_multiple_of = 8: one mock segment, marked by num_real_seqs (Option A).
    let mock = pad_to_multiple_of(
        &flat,
        &MockPadding { multiple_of: 8, pad_token_id: 1, max_mock_len: None },
    )?;
    let mut keys = hf_keys("", &mock);
    keys.push(T(
        "attention_mask".into(),
        Dtype::I64,
        vec![1, mock.num_tokens()],
        attention_mask(&mock),
    ));
    keys.push(scalar("num_real_seqs", mock.num_real_segments() as i64));
    push(
        "good/hf_bionemo_mock_num_real_seqs.safetensors",
        "bionemo pad_to_multiple_of=8: a 1-token mock segment, marked by num_real_seqs",
        &[][..],
        encode(&keys, &[("pad_to_multiple_of", "8")])?,
    );
    let bad_mock: Vec<T> = keys.into_iter().filter(|t| t.0 != "num_real_seqs").collect();
    push(
        "bad/hf_mock_without_num_real_seqs.safetensors",
        "bionemo #1561: the mock segment is in cu_seq_lens_q and nothing marks it, so a logger counts it as useful work",
        &["mock-marked"][..],
        encode(&bad_mock, &[])?,
    );

    // Hugging Face flattening with position ids that do not restart, and with a cross-document label.
    let hf = flatten(&docs(&[4, 3, 5], 100), &FlattenOptions::default())?;
    push(
        "good/hf_flatten.safetensors",
        "Hugging Face DataCollatorWithFlattening, 4/3/5 tokens",
        &[][..],
        encode(&hf_keys("", &hf), &[])?,
    );
    let mut keys = hf_keys("", &hf);
    set(&mut keys, "position_ids", (0..hf.num_tokens() as i64).collect());
    push(
        "bad/hf_position_ids_not_reset.safetensors",
        "position ids run across the pack (arange(T)): RoPE sees one long document",
        &["position-ids"][..],
        encode(&keys, &[])?,
    );
    let mut keys = hf_keys("", &hf);
    set(&mut keys, "labels", hf.input_ids().to_vec());
    push(
        "bad/hf_cross_doc_label.safetensors",
        "labels copied from input_ids without -100 at segment starts: each document's last token learns the next document's first",
        &["cross-doc-label"][..],
        encode(&keys, &[])?,
    );

    // open-instruct SFT: static padding to max_seq_length, seq_idx -1 on the padding.
    let static_pad = FlattenOptions {
        boundary: BoundaryLabels::EverySequence,
        static_padding: Some(StaticPadding {
            max_seq_length: 16,
            pad_token_id: 0,
            overflow: Overflow::Error,
        }),
    };
    let oi = flatten(&docs(&[3, 5, 4], 200), &static_pad)?;
    let mut keys = hf_keys("", &oi);
    keys.push(tok("seq_idx", &seq_idx(&oi)));
    push(
        "good/hf_open_instruct_static_padding.safetensors",
        "open-instruct flattening padded to max_seq_length=16, seq_idx -1 on padding",
        &[][..],
        encode(&keys, &[])?,
    );

    // bionemo pad_sequences_to_be_divisible_by (TE CP padding), cp = 2.
    let cp2 = pad_for_cp(&hf, &CpPadding::for_cp(2, 0))?;
    let slots = widen(cp2.storage_cu_seqlens());
    let mut keys = hf_keys("", &cp2);
    keys.push(cu("cu_seq_lens_q_padded", &slots));
    keys.push(cu("cu_seq_lens_k_padded", &slots));
    set(&mut keys, "max_length_q", vec![cp2.storage_cu_seqlens().max_seqlen() as i64]);
    set(&mut keys, "max_length_k", vec![cp2.storage_cu_seqlens().max_seqlen() as i64]);
    push(
        "good/hf_bionemo_cp_padded.safetensors",
        "bionemo pad_sequences_to_be_divisible_by=4 (cp=2): real and padded offsets, max_length over the slots",
        &[][..],
        encode(&keys, &[("cp_size", "2")])?,
    );
    let keys: Vec<T> = hf_keys("", &cp2)
        .into_iter()
        .chain([cu("cu_seq_lens_q_padded", &slots), cu("cu_seq_lens_k_padded", &slots)])
        .collect();
    push(
        "good/hf_bionemo_cp_max_length_real.safetensors",
        "bionemo CP padding with max_length_q at the longest real sequence, below the widest slot: valid, TE's max_seqlen is the longest sequence (noted)",
        &[][..],
        encode(&keys, &[])?,
    );

    // TransformerEngine THD after CP padding: shifted labels, padding mask, cp = 2.
    let te = |b: &PackedBatch| -> Vec<T> {
        let real = thd::collate::attention_mask(b);
        vec![
            tok("input_ids", b.input_ids()),
            tok("labels", &shift_labels(b)),
            tok("position_ids", b.position_ids()),
            cu("cu_seqlens", &widen(b.cu_seqlens())),
            cu("cu_seqlens_padded", &widen(b.storage_cu_seqlens())),
            scalar("max_seqlen", b.storage_cu_seqlens().max_seqlen() as i64),
            mask("padding_mask", &real.iter().map(|&r| r == 0).collect::<Vec<_>>()),
        ]
    };
    push(
        "good/te_thd_cp2.safetensors",
        "TransformerEngine THD, every sequence padded to a multiple of 2·cp = 4, labels rolled per sequence",
        &[][..],
        encode(&te(&cp2), &[("cp_size", "2")])?,
    );
    push(
        "bad/te_cp_not_divisible.safetensors",
        "CP = 4 asked of a batch padded for CP = 2: slots of 4 and 8 tokens do not split into 2·cp = 8 chunks",
        &["cp-shard"][..],
        encode(&te(&cp2), &[("cp_size", "4")])?,
    );

    // One file per CP rank (Automodel's shard keys: global cu_seqlens, cp_rank, cp_size), cp = 2.
    let layout = thd::cp::CpLayout::from_batch(&cp2, 2)?;
    let pad_mask: Vec<i64> =
        thd::collate::attention_mask(&cp2).iter().map(|&r| i64::from(r == 0)).collect();
    let rolled = shift_labels(&cp2);
    let shard = |rank: usize, labels: Vec<i64>| -> Result<Vec<u8>> {
        let split = |v: &[i64]| layout.split(v, rank);
        let keys = vec![
            tok("input_ids", &split(cp2.input_ids())?),
            tok("labels", &labels),
            tok("position_ids", &split(cp2.position_ids())?),
            cu("cu_seqlens", &widen(cp2.storage_cu_seqlens())),
            mask("padding_mask", &split(&pad_mask)?.iter().map(|&p| p == 1).collect::<Vec<_>>()),
            scalar("cp_rank", rank as i64),
            scalar("cp_size", 2),
        ];
        encode(&keys, &[("causal", "true")])
    };
    for rank in 0..2 {
        let path = if rank == 0 {
            "good/cp_shards/rank0.safetensors"
        } else {
            "good/cp_shards/rank1.safetensors"
        };
        push(
            path,
            "one file per CP rank (cp = 2, zigzag), labels rolled on the full sequences before the split",
            &[][..],
            shard(rank, layout.split(&rolled, rank)?)?,
        );
    }
    for rank in 0..2 {
        let path = if rank == 0 {
            "bad/cp_rolled_after_split/rank0.safetensors"
        } else {
            "bad/cp_rolled_after_split/rank1.safetensors"
        };
        push(
            path,
            "labels rolled on each rank's shard after the split (the bug class of CP-local losses; AReaL itself rolls before the split, d58cca56f), so a chunk's last token targets the rank's other chunk",
            &[][..],
            shard(rank, properties::zoo::shift_after_split(&cp2, &layout, rank)?)?,
        );
    }

    // NeMo Automodel BSHD packs: seq_lens / seq_lens_padded [B, K] with the -1000 sentinel.
    // Two rows of S = 6: row 0 holds a (3 tokens + 1 pad slot) and b (2), row 1 holds c (6).
    let automodel = |ids: [i64; 12],
                     labels: [i64; 12],
                     pos: [i64; 12],
                     lens: [i64; 4],
                     padded: [i64; 4],
                     pad: [bool; 12]|
     -> Vec<T> {
        vec![
            T("input_ids".into(), Dtype::I64, vec![2, 6], ids.to_vec()),
            T("labels".into(), Dtype::I64, vec![2, 6], labels.to_vec()),
            T("position_ids".into(), Dtype::I64, vec![2, 6], pos.to_vec()),
            T("seq_lens".into(), Dtype::I64, vec![2, 2], lens.to_vec()),
            T("seq_lens_padded".into(), Dtype::I64, vec![2, 2], padded.to_vec()),
            T(
                "padding_mask".into(),
                Dtype::BOOL,
                vec![2, 6],
                pad.iter().map(|&b| i64::from(b)).collect(),
            ),
        ]
    };
    let ids = [10, 11, 12, 0, 13, 14, 20, 21, 22, 23, 24, 25];
    let labels = [11, 12, -100, -100, 14, -100, 21, 22, 23, 24, 25, -100];
    let pos = [0, 1, 2, 3, 0, 1, 0, 1, 2, 3, 4, 5];
    let mut pad = [false; 12];
    pad[3] = true;
    push(
        "good/te_automodel_bshd.safetensors",
        "NeMo Automodel BSHD packs (process_input_for_thd docstring): seq_lens [[3,2],[6,-1000]], padded [[4,2],[6,-1000]]",
        &[][..],
        encode(&automodel(ids, labels, pos, [3, 2, 6, -1000], [4, 2, 6, -1000], pad), &[])?,
    );
    let mut with_zero = ids;
    with_zero[8] = 0; // a real token whose id is the pad id
    let from_ids = with_zero.map(|t| t == 0);
    push(
        "bad/te_padding_mask_from_token_ids.safetensors",
        "Automodel before #3223: padding_mask = (input_ids == pad id) flags a real token whose id is 0",
        &["mask"][..],
        encode(
            &automodel(with_zero, labels, pos, [3, 2, 6, -1000], [4, 2, 6, -1000], from_ids),
            &[],
        )?,
    );
    // Row 0 = a (3) + b (2) + 1 pack-padding token that no slot accounts for.
    let mut tail = [false; 12];
    tail[5] = true;
    push(
        "bad/te_automodel_row_not_filled.safetensors",
        "a packer that leaves the pack padding out of seq_lens_padded: row 0's slots hold 5 of 6 tokens, so row 1's segment starts one token early",
        &["row-slots", "position-ids", "mask"][..],
        encode(
            &automodel(
                [10, 11, 12, 13, 14, 0, 20, 21, 22, 23, 24, 25],
                [11, 12, -100, 14, -100, -100, 21, 22, 23, 24, 25, -100],
                [0, 1, 2, 0, 1, 2, 0, 1, 2, 3, 4, 5],
                [3, 2, 6, -1000],
                [3, 2, 6, -1000],
                tail,
            ),
            &[],
        )?,
    );

    // TE THD after Automodel's trailing-pad absorption (#2316).
    let absorbed = vec![
        tok("input_ids", &[1, 2, 3, 4, 5, 0, 0, 0]),
        tok("labels", &[2, 3, -100, 5, -100, -100, -100, -100]),
        tok("position_ids", &[0, 1, 2, 0, 1, 2, 3, 4]),
        cu("cu_seqlens", &[0, 3, 8]),
        scalar("max_seqlen", 5),
        mask("padding_mask", &[false, false, false, false, false, true, true, true]),
    ];
    push(
        "good/te_absorbed_tail.safetensors",
        "Automodel process_input_for_thd with trailing-pad absorption: cu_seqlens [0,3,8], the last 3 tokens are padding",
        &[][..],
        encode(&absorbed, &[])?,
    );
    let mut before = absorbed.clone();
    set(&mut before, "max_seqlen", vec![3]);
    push(
        "bad/te_max_seqlen_before_absorb.safetensors",
        "Automodel before #2316: max_seqlen taken from the real lengths (3) before cu_seqlens absorbed the trailing padding, so the kernel computes a 5-token sequence beyond it (the 112-vs-576 cuDNN backward crash)",
        &["max-seqlen"][..],
        encode(&before, &[])?,
    );

    // open-instruct DPO: chosen [3,5], rejected [2,4], max_seq_length = 10.
    let pair = |i: i64, c: usize, r: usize| DpoExample {
        chosen: Doc::new((0..c as i64).map(|j| 300 + 10 * i + j).collect()),
        rejected: Doc::new((0..r as i64).map(|j| 400 + 10 * i + j).collect()),
        index: i,
    };
    let dpo = collate_dpo(
        &[pair(0, 3, 2), pair(1, 5, 4)],
        &DpoOptions { max_seq_length: Some(10), pad_token_id: 0, overflow: Overflow::Error },
    )?;
    let cat = dpo.concatenated()?;
    let dpo_keys = |cu_cat: &[i64], seq_idx_cat: &[i64]| -> Vec<T> {
        let mut k = hf_keys("chosen_", &dpo.chosen);
        k.extend(hf_keys("rejected_", &dpo.rejected));
        k.push(tok("chosen_seq_idx", &seq_idx(&dpo.chosen)));
        k.push(tok("rejected_seq_idx", &seq_idx(&dpo.rejected)));
        k.push(tok("concatenated_input_ids", cat.batch.input_ids()));
        k.push(tok("concatenated_labels", cat.batch.labels()));
        k.push(tok("concatenated_position_ids", cat.batch.position_ids()));
        k.push(cu("concatenated_cu_seq_lens_q", cu_cat));
        k.push(cu("concatenated_cu_seq_lens_k", cu_cat));
        k.push(tok("concatenated_seq_idx", seq_idx_cat));
        k.push(T("index".into(), Dtype::I64, vec![dpo.index.len()], dpo.index.clone()));
        k
    };
    // The chosen padding as its own segment: every segment is one document or only padding.
    let mut own = widen(dpo.chosen.cu_seqlens());
    let padded_len = dpo.chosen.num_tokens() as i64;
    own.push(padded_len);
    own.extend(widen(dpo.rejected.cu_seqlens())[1..].iter().map(|&x| x + padded_len));
    push(
        "good/dpo_open_instruct.safetensors",
        "open-instruct TensorDataCollatorWithFlatteningDPO + concatenated_inputs, rejected offsets + padded chosen length, the chosen padding its own segment",
        &[][..],
        encode(&dpo_keys(&own, &cat.open_instruct_seq_idx), &[])?,
    );
    push(
        "bad/dpo_rejected_spans_chosen_padding.safetensors",
        "open-instruct 005366f75..HEAD (PR #1900): rejected offsets + padded chosen length, but rejected example 0's segment spans the chosen padding",
        &["dpo-offsets"][..],
        encode(&dpo_keys(&cat.open_instruct_cu_seq_lens, &cat.open_instruct_seq_idx), &[])?,
    );
    let real_len = dpo.chosen.cu_seqlens().total() as i64;
    let mut buggy_cu = widen(dpo.chosen.cu_seqlens());
    buggy_cu.extend(widen(dpo.rejected.cu_seqlens())[1..].iter().map(|&x| x + real_len));
    push(
        "bad/dpo_offset_real_length.safetensors",
        "open-instruct OI-B1: rejected offsets shifted by the real chosen length (8), not the padded one (10)",
        &["dpo-offsets"][..],
        encode(&dpo_keys(&buggy_cu, &cat.open_instruct_seq_idx), &[])?,
    );
    // OI-B2 before the fix, without padding: rejected seq_idx + the last chosen token's id.
    let nopad = collate_dpo(&[pair(0, 3, 2), pair(1, 5, 4)], &DpoOptions::default())?;
    let c = seq_idx(&nopad.chosen);
    let last = *c.last().unwrap_or(&0);
    let buggy_idx: Vec<i64> =
        c.iter().copied().chain(seq_idx(&nopad.rejected).iter().map(|&i| i + last)).collect();
    let nopad_cat = nopad.concatenated()?;
    let mut k = hf_keys("chosen_", &nopad.chosen);
    k.extend(hf_keys("rejected_", &nopad.rejected));
    k.push(tok("concatenated_input_ids", nopad_cat.batch.input_ids()));
    k.push(cu("concatenated_cu_seq_lens_k", &nopad_cat.open_instruct_cu_seq_lens));
    k.push(tok("concatenated_seq_idx", &buggy_idx));
    push(
        "bad/dpo_seq_idx_collision.safetensors",
        "open-instruct OI-B2 (base f009311bc): rejected seq_idx offset by the last chosen id, so rejected 0 shares chosen 1's id",
        &["seq-idx"][..],
        encode(&k, &[])?,
    );
    Ok(out)
}

/// CP groups (the shard files of one directory, reassembled) and the checks they must violate.
pub const GROUPS: &[(&str, &[&str], &str)] = &[
    ("good/cp_shards/cp-group", &[], "the two rank files of good/cp_shards, reassembled"),
    (
        "bad/cp_rolled_after_split/cp-group",
        &["label-targets"],
        "the two rank files of bad/cp_rolled_after_split, reassembled: labels rolled after the split",
    ),
];

/// The `expected.toml` that goes with [`examples`].
pub fn expected_toml(examples: &[ExampleBatch]) -> String {
    let mut s = String::from(
        "# Expected verdicts of the example batches (generated by `cargo run -p thdcheck --example \
         make_batches`).\n# A listed file must violate exactly these checks; every other file \
         must pass.\n",
    );
    for e in examples.iter().filter(|e| !e.violates.is_empty()) {
        let mut ids: Vec<&str> = e.violates.to_vec();
        ids.sort_unstable();
        let list: Vec<String> = ids.iter().map(|i| format!("\"{i}\"")).collect();
        s.push_str(&format!("\"{}\" = [{}]\n", e.path, list.join(", ")));
    }
    for (path, ids, _) in GROUPS.iter().filter(|g| !g.1.is_empty()) {
        let list: Vec<String> = ids.iter().map(|i| format!("\"{i}\"")).collect();
        s.push_str(&format!("\"{path}\" = [{}]\n", list.join(", ")));
    }
    s
}

/// The `README.md` that goes with [`examples`]: one line per file.
pub fn readme(examples: &[ExampleBatch]) -> String {
    let mut s = String::from(
        "# Example batches\n\nWhat the reference collators (`thd`) emit in each dialect (`good/`), and \
         the same batches with one historical bug each (`bad/`). Generated by `cargo run -p \
         thdcheck --example make_batches`; a test keeps these files byte-identical to the \
         generator.\n\n```sh\ncargo run --release -p thdcheck -- check examples/batches        # \
         exit 0: every verdict as expected.toml says\ncargo run --release -p thdcheck -- check \
         examples/batches/bad    # exit 1: violations\n```\n\n| file | expected | what |\n|---|---|---|\n",
    );
    for e in examples {
        let verdict = if e.violates.is_empty() { "pass".to_owned() } else { e.violates.join(", ") };
        s.push_str(&format!("| `{}` | {verdict} | {} |\n", e.path, e.summary));
    }
    for (path, ids, summary) in GROUPS {
        let verdict = if ids.is_empty() { "pass".to_owned() } else { ids.join(", ") };
        s.push_str(&format!("| `{path}` | {verdict} | {summary} |\n"));
    }
    s
}

/// One file the reader must reject with exit code 2 and a specific message, or (offsets that
/// contradict the batch) report as the violation of a rule.
#[derive(Debug, Clone)]
pub struct Malformed {
    /// File name.
    pub name: &'static str,
    /// The file's bytes.
    pub bytes: Vec<u8>,
    /// A substring the error message must contain (for a violation: its rule's statement, then
    /// `: ` and the detail the report prints).
    pub message: &'static str,
    /// The rule it violates (exit 1), or `None`: unreadable (exit 2).
    pub violates: Option<&'static str>,
}

/// The malformed-input corpus: truncated or non-safetensors bytes, wrong dtypes and shapes,
/// offsets that are not offsets, missing keys, NaN where a number is needed.
///
/// # Errors
/// Only if serialising a case fails (a bug in this module).
pub fn malformed() -> Result<Vec<Malformed>> {
    let ids = |n: usize| (0..n as i64).collect::<Vec<i64>>();
    let hf = |cu_v: &[i64]| -> Vec<T> {
        vec![
            tok("input_ids", &ids(5)),
            tok("labels", &[-100, 1, 2, -100, 4]),
            cu("cu_seq_lens_q", cu_v),
        ]
    };
    let good = encode(&hf(&[0, 3, 5]), &[])?;
    let mut out = Vec::new();
    let mut case = |name, bytes, message: &'static str| {
        // Offsets that are not offsets of this batch: the `offsets` rule's violation.
        let offsets = [
            "is non-decreasing",
            "starts at 0",
            "has at least one entry",
            "ends at or before",
            "fits int32",
        ];
        let violates = offsets.iter().any(|o| message.contains(o)).then_some("offsets");
        out.push(Malformed { name, bytes, message, violates });
    };

    case("truncated.safetensors", good[..good.len() - 7].to_vec(), "not a valid safetensors file");
    case("empty.safetensors", Vec::new(), "fewer than the 8-byte header length");
    case(
        "text.safetensors",
        b"input_ids,labels\n1,2\n".to_vec(),
        "the file starts with text \"input_ids,labels",
    );
    let mut bad_json = 12u64.to_le_bytes().to_vec();
    bad_json.extend_from_slice(b"{not json!!}");
    case("bad_header_json.safetensors", bad_json, "invalid JSON in header");
    let mut bad_utf8 = 4u64.to_le_bytes().to_vec();
    bad_utf8.extend_from_slice(&[0xff, 0xfe, 0x7b, 0x7d]);
    case("bad_header_utf8.safetensors", bad_utf8, "invalid UTF-8 in header");
    let mut huge = u64::MAX.to_le_bytes().to_vec();
    huge.extend_from_slice(b"{}");
    case("header_length_huge.safetensors", huge, "header too large");
    let hdr = br#"{"input_ids":{"dtype":"I64","shape":[1,5],"data_offsets":[0,48]}}"#;
    let mut offs = (hdr.len() as u64).to_le_bytes().to_vec();
    offs.extend_from_slice(hdr);
    offs.extend_from_slice(&[0u8; 48]);
    case(
        "header_offsets_mismatch.safetensors",
        offs,
        "tensor `input_ids`: shape [1, 5] of I64 needs 40 bytes, its data_offsets [0, 48] hold 48",
    );
    case(
        "torch_save_zip.safetensors",
        b"PK\x03\x04 torch.save archive".to_vec(),
        "torch.save zip archive",
    );

    let f32_cu: Vec<u8> = [0f32, 3.0, 5.0].iter().flat_map(|v| v.to_le_bytes()).collect();
    let ids_bytes: Vec<u8> = ids(5).iter().flat_map(|v| v.to_le_bytes()).collect();
    case(
        "cu_seqlens_float.safetensors",
        write_raw(
            [
                ("input_ids", Dtype::I64, vec![1, 5], ids_bytes.as_slice()),
                ("cu_seq_lens_q", Dtype::F32, vec![3], f32_cu.as_slice()),
            ],
            &[],
        )?,
        "`cu_seq_lens_q` has dtype F32, expected an integer dtype",
    );
    case(
        "cu_seqlens_decreasing.safetensors",
        encode(&hf(&[0, 5, 3]), &[])?,
        "`cu_seq_lens_q` is non-decreasing: expected cu_seq_lens_q[2] >= 5, got cu_seq_lens_q[2] = 3",
    );
    case(
        "cu_seqlens_negative.safetensors",
        encode(&hf(&[0, -2, 5]), &[])?,
        "`cu_seq_lens_q` is non-decreasing: expected cu_seq_lens_q[1] >= 0, got cu_seq_lens_q[1] = -2",
    );
    case(
        "cu_seqlens_not_from_zero.safetensors",
        encode(&hf(&[1, 3, 5]), &[])?,
        "`cu_seq_lens_q` starts at 0: expected 0, got cu_seq_lens_q[0] = 1",
    );
    case(
        "cu_seqlens_empty.safetensors",
        encode(&hf(&[]), &[])?,
        "`cu_seq_lens_q` has at least one entry: expected [0, ...], got []",
    );
    case(
        "cu_seqlens_beyond_tokens.safetensors",
        encode(&hf(&[0, 3, 9]), &[])?,
        "`cu_seq_lens_q` ends at or before the token count: expected cu_seq_lens_q[2] <= T = 5, got cu_seq_lens_q[2] = 9",
    );
    let overflow = vec![
        tok("input_ids", &ids(5)),
        T("cu_seqlens".into(), Dtype::I64, vec![2], vec![0, 3_000_000_000]),
    ];
    case(
        "cu_seqlens_overflow_int32.safetensors",
        encode(&overflow, &[])?,
        "`cu_seqlens` fits int32: expected <= 2147483647, got cu_seqlens[1] = 3000000000",
    );
    let padded_count = vec![
        tok("input_ids", &ids(5)),
        cu("cu_seq_lens_q", &[0, 3, 5]),
        cu("cu_seq_lens_q_padded", &[0, 5]),
    ];
    case(
        "padded_offsets_count.safetensors",
        encode(&padded_count, &[])?,
        "`cu_seq_lens_q_padded` has 2 offsets, but `cu_seq_lens_q` has 3",
    );
    case(
        "missing_input_ids.safetensors",
        encode(&[cu("cu_seq_lens_q", &[0, 3, 5]), tok("labels", &ids(5))], &[])?,
        "missing key `input_ids` (hf dialect",
    );
    case(
        "missing_offsets.safetensors",
        encode(&[tok("input_ids", &ids(5)), tok("labels", &ids(5))], &[])?,
        "cannot tell the dialect from the keys [\"input_ids\", \"labels\"]",
    );
    case(
        "dpo_missing_rejected.safetensors",
        encode(&[tok("chosen_input_ids", &ids(5)), cu("chosen_cu_seq_lens_q", &[0, 5])], &[])?,
        "missing key `rejected_input_ids` (dpo dialect",
    );
    // `labels` of another count than the tokens is read, and judged by `token-counts`; one of
    // no token layout at all is not.
    case(
        "labels_shape_mismatch.safetensors",
        encode(
            &[
                tok("input_ids", &ids(5)),
                T("labels".into(), Dtype::I64, vec![1, 5, 1], ids(5)),
                cu("cu_seq_lens_q", &[0, 5]),
            ],
            &[],
        )?,
        "`labels` has shape [1, 5, 1], expected [T] or [B, S]",
    );
    case(
        "input_ids_3d.safetensors",
        encode(
            &[
                T("input_ids".into(), Dtype::I64, vec![1, 5, 1], ids(5)),
                cu("cu_seq_lens_q", &[0, 5]),
            ],
            &[],
        )?,
        "`input_ids` has shape [1, 5, 1], expected [T] or [B, S]",
    );
    case(
        "max_length_not_scalar.safetensors",
        encode(
            &[
                tok("input_ids", &ids(5)),
                cu("cu_seq_lens_q", &[0, 5]),
                T("max_length_q".into(), Dtype::I64, vec![2], vec![5, 5]),
            ],
            &[],
        )?,
        "`max_length_q` has shape [2], expected a scalar",
    );
    let nan_mask: Vec<u8> =
        [1f32, 1.0, f32::NAN, 1.0, 1.0].iter().flat_map(|v| v.to_le_bytes()).collect();
    let cu_bytes: Vec<u8> = [0i32, 5].iter().flat_map(|v| v.to_le_bytes()).collect();
    case(
        "attention_mask_nan.safetensors",
        write_raw(
            [
                ("input_ids", Dtype::I64, vec![1, 5], ids_bytes.as_slice()),
                ("cu_seq_lens_q", Dtype::I32, vec![2], cu_bytes.as_slice()),
                ("attention_mask", Dtype::F32, vec![1, 5], nan_mask.as_slice()),
            ],
            &[],
        )?,
        "`attention_mask`[2] is NaN, expected a finite number",
    );
    case(
        "attention_mask_value.safetensors",
        encode(
            &[
                tok("input_ids", &ids(5)),
                cu("cu_seq_lens_q", &[0, 5]),
                tok("attention_mask", &[1, 2, 1, 1, 1]),
            ],
            &[],
        )?,
        "`attention_mask`[1] = 2, expected 0 or 1",
    );
    case(
        "seq_lens_negative.safetensors",
        encode(
            &[tok("input_ids", &ids(6)), T("seq_lens".into(), Dtype::I64, vec![1, 2], vec![3, -5])],
            &[],
        )?,
        "`seq_lens`[1] = -5, expected a length ≥ 0 or the sentinel",
    );
    case(
        "seq_lens_beyond_tokens.safetensors",
        encode(
            &[tok("input_ids", &ids(6)), T("seq_lens".into(), Dtype::I64, vec![1, 2], vec![4, 5])],
            &[],
        )?,
        "`seq_lens (cumulative)` ends at or before the token count: expected seq_lens (cumulative)[2] <= T = 6, got seq_lens (cumulative)[2] = 9",
    );
    // Found by the cargo-fuzz target: a shard's cp_size near 2^62 overflowed `T · cp_size`.
    case(
        "cp_size_huge.safetensors",
        encode(
            &[
                tok("input_ids", &ids(4)),
                cu("cu_seqlens", &[0, 4]),
                scalar("cp_rank", 0),
                scalar("cp_size", 1 << 62),
            ],
            &[],
        )?,
        "`cp_size`[0] = 4611686018427387904, expected a CP size of at most 65536",
    );
    case(
        "cp_size_tensor_without_rank.safetensors",
        encode(&[tok("input_ids", &ids(4)), cu("cu_seqlens", &[0, 4]), scalar("cp_size", 2)], &[])?,
        "missing key `cp_rank` (CP shard dialect; the file has a `cp_size` tensor",
    );
    case(
        "cp_size_zero.safetensors",
        encode(
            &[
                tok("input_ids", &ids(4)),
                cu("cu_seqlens", &[0, 4]),
                scalar("cp_rank", 0),
                scalar("cp_size", 0),
            ],
            &[],
        )?,
        "`cp_size`[0] = 0, expected cp_size ≥ 1",
    );
    case(
        "metadata_cp_size.safetensors",
        encode(&hf(&[0, 3, 5]), &[("cp_size", "two")])?,
        "`__metadata__.cp_size`[0] = two, expected an integer in 1..=65536",
    );
    Ok(out)
}
