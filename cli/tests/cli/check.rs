//! `thdcheck check`: the example batches, every dialect and format, the options, expectations,
//! usage errors and malformed inputs.

use super::*;

#[test]
fn examples_get_their_expected_verdicts() {
    let o = run_expect(&["check", "examples/batches"], 0);
    let out = stdout(&o);
    assert!(out.contains("every verdict as expected"), "{out}");
    assert!(out.contains("=> FAIL: dpo-offsets violated, as expected"), "{out}");
    assert!(out.contains("VIOLATED mock-marked"), "{out}");
}

#[test]
fn examples_bad_directory_exits_1_and_good_exits_0() {
    let o = run_expect(&["check", "--quiet", "examples/batches/bad"], 1);
    assert!(
        stdout(&o).contains("bad/dpo_offset_real_length.safetensors: FAIL: dpo-offsets violated")
    );
    run_expect(&["check", "--quiet", "examples/batches/good"], 0);
    // --no-expect: the bad files count against the exit code again.
    run_expect(&["check", "--quiet", "--no-expect", "examples/batches"], 1);
}

#[test]
fn examples_are_what_the_generator_writes() {
    let examples = corpus::examples().unwrap();
    let root = repo().join("examples/batches");
    for e in &examples {
        let committed = std::fs::read(root.join(e.path)).unwrap_or_default();
        assert!(
            committed == e.bytes,
            "{} differs from the generator: run `cargo run -p thdcheck --example make_batches`",
            e.path
        );
    }
    let expected = std::fs::read_to_string(root.join("expected.toml")).unwrap_or_default();
    assert_eq!(expected, corpus::expected_toml(&examples));
    let readme = std::fs::read_to_string(root.join("README.md")).unwrap_or_default();
    assert_eq!(readme, corpus::readme(&examples));
}

#[test]
fn every_dialect_passes_its_good_example_and_fails_its_bad_one() {
    for (good, bad, dialect) in [
        ("good/hf_bionemo_flatten", "bad/hf_cross_doc_label", "hf"),
        ("good/te_absorbed_tail", "bad/te_max_seqlen_before_absorb", "te"),
        ("good/te_automodel_bshd", "bad/te_automodel_row_not_filled", "te"),
        ("good/dpo_open_instruct", "bad/dpo_offset_real_length", "dpo"),
    ] {
        let path = |p: &str| format!("examples/batches/{p}.safetensors");
        let o = run_expect(&["check", "--json", &path(good)], 0);
        let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
        assert_eq!(v["files"][0]["report"]["dialect"], dialect, "{good}");
        assert_eq!(v["files"][0]["verdict"], "pass");
        let o = run_expect(&["check", "--json", &path(bad)], 1);
        let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
        assert_eq!(v["files"][0]["verdict"], "fail", "{bad}");
        assert_eq!(v["summary"]["exit_code"], 1);
    }
}

#[test]
fn json_names_the_violation_and_its_location() {
    let o = run_expect(
        &["check", "--json", "examples/batches/bad/hf_position_ids_not_reset.safetensors"],
        1,
    );
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let checks = v["files"][0]["report"]["packs"][0]["checks"].as_array().unwrap();
    let c = checks.iter().find(|c| c["id"] == "position-ids").unwrap();
    assert_eq!(c["status"], "violated");
    assert_eq!(
        c["violation"]["at"],
        serde_json::json!({"segment": 1, "token": 4, "key": "position_ids"})
    );
    assert_eq!(
        (c["violation"]["expected"].as_str(), c["violation"]["got"].as_str()),
        (Some("0"), Some("4"))
    );
    assert_eq!(v["files"][0]["report"]["packs"][0]["facts"]["useful"]["sum_squares"], 50);
}

#[test]
fn map_renames_keys_and_dialect_overrides_detection() {
    let dir = tempfile::tempdir().unwrap();
    let p = temp_batch(
        dir.path(),
        "renamed.safetensors",
        &[
            ("tokens", vec![5], vec![1, 2, 3, 4, 5]),
            ("offsets", vec![3], vec![0, 3, 5]),
            ("positions", vec![5], vec![0, 1, 2, 0, 1]),
        ],
    );
    let p = p.to_str().unwrap();
    let o = run_expect(&["check", p], 2);
    assert!(stderr(&o).contains("cannot tell the dialect"), "{}", stderr(&o));
    let maps = ["--map", "tokens=input_ids", "--map", "positions=position_ids"];
    let o = run_expect(&[&["check", "--map", "offsets=cu_seqlens"][..], &maps, &[p]].concat(), 0);
    assert!(stdout(&o).contains("[te · cu-seqlens: "), "{}", stdout(&o));
    run_expect(&[&["check", "--map", "offsets=cu_seq_lens_q"][..], &maps, &[p]].concat(), 0);
    let o = run_expect(
        &[&["check", "--dialect", "hf", "--map", "offsets=cu_seqlens"][..], &maps, &[p]].concat(),
        2,
    );
    assert!(stderr(&o).contains("missing key `cu_seq_lens_q` (hf dialect"), "{}", stderr(&o));
    let o = run_expect(&["check", "--map", "nope=input_ids", p], 2);
    assert!(
        stderr(&o).contains("--map nope=input_ids: the file has no key `nope`"),
        "{}",
        stderr(&o)
    );
}

#[test]
fn int32_flat_tokens_and_batched_rows_are_both_read() {
    let dir = tempfile::tempdir().unwrap();
    // [T] int64 tokens, int32 offsets ("cu_seq" names are written as int32).
    let flat = temp_batch(
        dir.path(),
        "flat.safetensors",
        &[("input_ids", vec![4], vec![1, 2, 3, 4]), ("cu_seq_lens_q", vec![3], vec![0, 2, 4])],
    );
    run_expect(&["check", flat.to_str().unwrap()], 0);
    // [B, S] rows with seq_lens: two rows of one sequence each.
    let rows = temp_batch(
        dir.path(),
        "rows.safetensors",
        &[
            ("input_ids", vec![2, 3], vec![1, 2, 3, 4, 5, 6]),
            ("position_ids", vec![2, 3], vec![0, 1, 2, 0, 1, 2]),
            ("seq_lens", vec![2, 1], vec![3, 3]),
        ],
    );
    let o = run_expect(&["check", rows.to_str().unwrap()], 0);
    assert!(stdout(&o).contains("(2 rows)"), "{}", stdout(&o));
}

#[test]
fn cp_size_and_pad_to_multiple_of_flags_add_checks() {
    let te = "examples/batches/good/te_thd_cp2.safetensors";
    let o = run_expect(&["check", "--cp-size", "4", te], 1);
    assert!(stdout(&o).contains("not divisible by 2*cp = 8"), "{}", stdout(&o));
    let hf = "examples/batches/good/hf_flatten.safetensors";
    run_expect(&["check", "--pad-to-multiple-of", "4", hf], 0);
    let o = run_expect(&["check", "--pad-to-multiple-of", "8", hf], 1);
    assert!(stdout(&o).contains("T = 12 is not a multiple of 8"), "{}", stdout(&o));
    let o = run_expect(&["check", "--causal", hf], 0);
    assert!(stdout(&o).contains("useful Σs(s+1)/2 = 31"), "{}", stdout(&o));
}

#[test]
fn expectations_that_do_not_hold_exit_1() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::copy(
        repo().join("examples/batches/good/hf_flatten.safetensors"),
        dir.path().join("a.safetensors"),
    )
    .unwrap();
    std::fs::write(dir.path().join("expected.toml"), "\"a.safetensors\" = [\"position-ids\"]\n")
        .unwrap();
    let o = run_expect(&["check", dir.path().to_str().unwrap()], 1);
    assert!(stdout(&o).contains("UNEXPECTED: expected violates position-ids"), "{}", stdout(&o));
    std::fs::write(dir.path().join("expected.toml"), "\"gone.safetensors\" = [\"mask\"]\n")
        .unwrap();
    let o = run_expect(&["check", dir.path().to_str().unwrap()], 2);
    assert!(
        stderr(&o).contains("lists files that do not exist: gone.safetensors"),
        "{}",
        stderr(&o)
    );
}

#[test]
fn usage_errors_exit_2() {
    run_expect(&["check"], 2);
    let o = run_expect(&["check", "--map", "no-equals", "x.safetensors"], 2);
    assert!(stderr(&o).contains("expected KEY=NAME"), "{}", stderr(&o));
    let o = run_expect(&["check", "does/not/exist.safetensors"], 2);
    assert!(stderr(&o).contains("cannot read does/not/exist.safetensors"), "{}", stderr(&o));
    run_expect(&["check", "--cp-size", "0", "examples/batches"], 2);
}

#[test]
fn malformed_inputs_exit_2_with_a_specific_message() {
    let dir = tempfile::tempdir().unwrap();
    let cases = corpus::malformed().unwrap();
    let mut paths = Vec::new();
    for m in &cases {
        let p = dir.path().join(m.name);
        std::fs::write(&p, &m.bytes).unwrap();
        paths.push(p);
    }
    // One run over the whole corpus: every file is reported, none panics, exit 2. Offsets that
    // contradict the batch are the `offsets` rule's violation (exit 1 alone), the rest errors.
    let o = run_expect(&["check", dir.path().to_str().unwrap()], 2);
    let (err, out) = (stderr(&o), stdout(&o));
    let mut violations = 0;
    for m in &cases {
        if let Some(rule) = m.violates {
            violations += 1;
            let detail = m.message.split_once(": ").map_or(m.message, |(_, d)| d);
            let report = out.split(&format!("{}{}", std::path::MAIN_SEPARATOR, m.name)).nth(1);
            let report = report.and_then(|r| r.split("\n\n").next()).unwrap_or_default();
            assert!(report.contains(&format!("VIOLATED {rule:<16} ")), "{}:\n{report}", m.name);
            assert!(report.contains(detail), "{}: expected `{detail}` in\n{report}", m.name);
            continue;
        }
        let line = err
            .lines()
            .find(|l| l.contains(&format!("{}{}: ", std::path::MAIN_SEPARATOR, m.name)))
            .unwrap_or_else(|| panic!("no error line for {}:\n{err}", m.name));
        assert!(line.starts_with("thdcheck: error: "), "{line}");
        assert!(line.contains(m.message), "{}: expected `{}` in\n{line}", m.name, m.message);
    }
    assert!(violations >= 6, "{violations} offsets cases");
    let summary = format!("0 pass, {violations} fail, {} unreadable", cases.len() - violations);
    assert!(out.contains(&summary), "{summary}\n{out}");
    // Listed as expected, the same corpus is a passing gate.
    let listed: String = cases
        .iter()
        .map(|m| format!("\"{}\" = [\"{}\"]\n", m.name, m.violates.unwrap_or("error")))
        .collect();
    std::fs::write(dir.path().join("expected.toml"), listed).unwrap();
    run_expect(&["check", "--quiet", dir.path().to_str().unwrap()], 0);
}

#[test]
fn plain_bshd_rows_with_a_padding_mask_are_one_sequence_each() {
    let dir = tempfile::tempdir().unwrap();
    // DataCollatorWithPadding / DataCollatorForLanguageModeling: labels copy the ids, -100 on
    // padding; row 0 is full, so its end meets row 1's start, whose label is row 1's own token.
    let ids = vec![5, 6, 7, 8, 8, 9, 0, 0];
    let p = temp_batch(
        dir.path(),
        "rows.safetensors",
        &[
            ("input_ids", vec![2, 4], ids.clone()),
            ("attention_mask", vec![2, 4], vec![1, 1, 1, 1, 1, 1, 0, 0]),
            ("labels", vec![2, 4], vec![5, 6, 7, 8, 8, 9, -100, -100]),
        ],
    );
    let o = run_expect(&["check", "--json", p.to_str().unwrap()], 0);
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let facts = &v["files"][0]["report"]["packs"][0]["facts"];
    assert_eq!(facts["real_tokens"], 6, "{facts}");
    assert_eq!(facts["pad_tokens"], 2, "{facts}");
    // Each row's first label is no target (the loss shifts within the row).
    assert_eq!(facts["valid_labels"], 4, "{facts}");
    // A dense kernel computes each row: 2 · 4².
    assert_eq!(facts["whole_pack"]["sum_squares"], 32, "{facts}");
    // Megatron's FLOPs statistics of a batch without offsets: each row a sequence, mbs·S².
    let o = run_expect(
        &[
            "metrics",
            "--recipe",
            "golden/tests/recipes/qwen3_8b_sft_seq4096.toml",
            "--batch",
            p.to_str().unwrap(),
            "--json",
        ],
        0,
    );
    let r: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let mega = &r["record"]["batch"]["megatron"];
    assert_eq!(
        (mega["seqlen_sum"].as_u64(), mega["seqlen_squared_sum"].as_u64()),
        (Some(8), Some(32))
    );
    assert_eq!(r["record"]["batch"]["attention"]["useful_sum_squares"], 4 * 4 + 2 * 2);
    // Left padding (the tokenizer's padding side) is an empty segment of its own, its slot the
    // padding; a 0 between a row's real tokens stays in the mask for the `mask` rule.
    let left = temp_batch(
        dir.path(),
        "left.safetensors",
        &[
            ("input_ids", vec![2, 4], ids.clone()),
            ("attention_mask", vec![2, 4], vec![1, 1, 1, 1, 0, 0, 1, 1]),
        ],
    );
    let o = run_expect(&["check", "--json", left.to_str().unwrap()], 0);
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let f = &v["files"][0]["report"]["packs"][0]["facts"];
    assert_eq!((f["real_tokens"].as_u64(), f["pad_tokens"].as_u64()), (Some(6), Some(2)), "{f}");
    let hole = temp_batch(
        dir.path(),
        "hole.safetensors",
        &[
            ("input_ids", vec![2, 4], ids),
            ("attention_mask", vec![2, 4], vec![1, 0, 1, 1, 1, 1, 0, 0]),
        ],
    );
    let o = run_expect(&["check", hole.to_str().unwrap()], 1);
    assert!(
        stdout(&o).contains("VIOLATED mask") && stdout(&o).contains("got attention_mask[1] = 0"),
        "{}",
        stderr(&o)
    );
}

#[test]
fn sample_numbers_are_documents_axolotl_masks_and_llm_foundry_sequence_ids() {
    let dir = tempfile::tempdir().unwrap();
    let facts = |p: &Path| -> serde_json::Value {
        let o = run_expect(&["check", "--json", p.to_str().unwrap()], 0);
        let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
        v["files"][0]["report"]["packs"][0]["facts"].clone()
    };
    // axolotl's multipack collator: the attention mask numbers the samples of a pack, 0 pads.
    let axolotl = temp_batch(
        dir.path(),
        "axolotl.safetensors",
        &[
            ("input_ids", vec![1, 8], vec![5, 6, 7, 8, 9, 0, 0, 0]),
            ("attention_mask", vec![1, 8], vec![1, 1, 1, 2, 2, 0, 0, 0]),
            ("labels", vec![1, 8], vec![-100, 6, 7, -100, 9, -100, -100, -100]),
            ("position_ids", vec![1, 8], vec![0, 1, 2, 0, 1, 0, 0, 0]),
        ],
    );
    let f = facts(&axolotl);
    assert_eq!((f["segments"].as_u64(), f["real_tokens"].as_u64()), (Some(2), Some(5)), "{f}");
    assert_eq!(f["pad_tokens"], 3, "{f}");
    // The position ids are checked against the samples, not read from them.
    let bad_pos = temp_batch(
        dir.path(),
        "axolotl_positions.safetensors",
        &[
            ("input_ids", vec![1, 8], vec![5, 6, 7, 8, 9, 0, 0, 0]),
            ("attention_mask", vec![1, 8], vec![1, 1, 1, 2, 2, 0, 0, 0]),
            ("position_ids", vec![1, 8], vec![0, 1, 2, 3, 4, 5, 6, 7]),
        ],
    );
    let o = run_expect(&["check", "--json", bad_pos.to_str().unwrap()], 1);
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["files"][0]["violated"], serde_json::json!(["position-ids"]), "{v}");
    // LLM Foundry's binpacking: sequence_id per token, -1 on padding, rows of [B, S].
    let foundry = temp_batch(
        dir.path(),
        "foundry.safetensors",
        &[
            ("input_ids", vec![2, 5], vec![5, 6, 7, 8, 9, 4, 3, 2, 0, 0]),
            ("sequence_id", vec![2, 5], vec![0, 0, 1, 1, 1, 0, 0, 0, -1, -1]),
            ("attention_mask", vec![2, 5], vec![1, 1, 1, 1, 1, 1, 1, 1, 0, 0]),
            ("labels", vec![2, 5], vec![-100, 6, -100, 8, 9, -100, 3, 2, -100, -100]),
        ],
    );
    let f = facts(&foundry);
    assert_eq!((f["segments"].as_u64(), f["real_tokens"].as_u64()), (Some(3), Some(8)), "{f}");
    assert_eq!(f["pad_tokens"], 2, "{f}");
    // Left padding (the tokenizer's padding side): an empty segment holds the padding.
    let left = temp_batch(
        dir.path(),
        "foundry_left.safetensors",
        &[
            ("input_ids", vec![1, 5], vec![0, 0, 5, 6, 7]),
            ("sequence_id", vec![1, 5], vec![-1, -1, 0, 0, 1]),
            ("labels", vec![1, 5], vec![-100, -100, -100, 6, -100]),
        ],
    );
    let f = facts(&left);
    assert_eq!((f["real_tokens"].as_u64(), f["pad_tokens"].as_u64()), (Some(3), Some(2)), "{f}");
    assert_eq!(f["useful"]["sum_squares"], 2 * 2 + 1, "{f}");
    // Padding between samples is not read yet: a clear error, never a wrong layout.
    let holes = temp_batch(
        dir.path(),
        "holes.safetensors",
        &[
            ("input_ids", vec![1, 5], vec![5, 6, 0, 8, 9]),
            ("sequence_id", vec![1, 5], vec![0, 0, -1, 1, 1]),
        ],
    );
    let o = run_expect(&["check", holes.to_str().unwrap()], 2);
    assert!(stderr(&o).contains("`sequence_id`[3] = 1"), "{}", stderr(&o));
}

#[test]
fn axolotl_profile_allows_one_padding_segment_per_row_and_flags_one_per_pad_token() {
    let dir = tempfile::tempdir().unwrap();
    let batch = |name: &str, positions: Vec<i64>| {
        let p = dir.path().join(name);
        let bytes = write_ints(
            &[
                ("input_ids", vec![2, 4], vec![5, 6, 0, 0, 7, 8, 9, 0]),
                ("labels", vec![2, 4], vec![-100, 6, -100, -100, -100, 8, 9, -100]),
                ("position_ids", vec![2, 4], positions),
            ],
            &[("profile", "axolotl"), ("pad_token_id", "0")],
        )
        .unwrap();
        std::fs::write(&p, bytes).unwrap();
        p
    };
    // After #2739: the padding of each row continues its positions, one final segment.
    let fixed = batch("fixed.safetensors", vec![0, 1, 0, 1, 0, 1, 2, 0]);
    run_expect(&["check", fixed.to_str().unwrap()], 0);
    // #2739: every pad token at position 0, a FlashAttention sequence each.
    let split = batch("split.safetensors", vec![0, 1, 0, 0, 0, 1, 2, 0]);
    let o = run_expect(&["check", "--json", split.to_str().unwrap()], 1);
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["files"][0]["violated"], serde_json::json!(["mock-marked"]), "{v}");
}

#[test]
fn olmo_core_doc_lens_are_documents_and_its_row_stream_labels_are_by_design() {
    let dir = tempfile::tempdir().unwrap();
    // OLMo-core's DataCollator: `doc_lens` per row (zero-padded), `max_doc_lens`, a label_mask
    // and no labels; row 1 is a packed instance padded with pad id 0 (its final document).
    let batch = |name: &str, doc_lens: Vec<i64>, max: Vec<i64>, meta: &[(&str, &str)]| {
        let p = dir.path().join(name);
        let bytes = write_ints(
            &[
                ("input_ids", vec![2, 6], vec![5, 6, 2, 7, 8, 2, 9, 10, 11, 2, 0, 0]),
                ("doc_lens", vec![2, 2], doc_lens),
                ("max_doc_lens", vec![2], max),
                ("label_mask", vec![2, 6], vec![1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 0, 0]),
            ],
            meta,
        )
        .unwrap();
        std::fs::write(&p, bytes).unwrap();
        p
    };
    let olmo = [("profile", "olmo_core"), ("pad_token_id", "0")];
    let ok = batch("ok.safetensors", vec![3, 3, 4, 2], vec![3, 4], &olmo);
    let o = run_expect(&["check", ok.to_str().unwrap()], 0);
    let out = stdout(&o);
    assert!(out.contains("4 documents read from `doc_lens`"), "{out}");
    assert!(out.contains("the last prediction of 1 segment targets"), "{out}");
    assert!(out.contains("derived from input_ids as OLMo-core's get_labels does"), "{out}");
    // The same stream stated as SFT: the first document's EOS learns the next one's first token.
    let sft = batch(
        "sft.safetensors",
        vec![3, 3, 4, 2],
        vec![3, 4],
        &[olmo[0], olmo[1], ("objective", "sft")],
    );
    let o = run_expect(&["check", "--json", sft.to_str().unwrap()], 1);
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["files"][0]["violated"], serde_json::json!(["cross-doc-label"]), "{v}");
    // `--objective` overrides the metadata, as every option does.
    run_expect(&["check", "--objective", "pretrain", sft.to_str().unwrap()], 0);
    // A `max_doc_lens` below the longest document is what the kernel would be told.
    let short = batch("short.safetensors", vec![3, 3, 4, 2], vec![3, 3], &olmo);
    let o = run_expect(&["check", "--json", short.to_str().unwrap()], 1);
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["files"][0]["violated"], serde_json::json!(["max-seqlen"]), "{v}");
    // Lengths that run past a row: unreadable, naming the entry.
    let over = batch("over.safetensors", vec![3, 3, 4, 3], vec![3, 4], &olmo);
    let o = run_expect(&["check", over.to_str().unwrap()], 2);
    assert!(stderr(&o).contains("`doc_lens`[3] = 3"), "{}", stderr(&o));
    let under = batch("under.safetensors", vec![3, 2, 4, 2], vec![3, 4], &olmo);
    let o = run_expect(&["check", under.to_str().unwrap()], 2);
    assert!(stderr(&o).contains("row 0: Σ = 5"), "{}", stderr(&o));
    let bad = batch("bad.safetensors", vec![3, 3, 4, 2], vec![3, 4], &[("objective", "rl")]);
    let o = run_expect(&["check", bad.to_str().unwrap()], 2);
    assert!(stderr(&o).contains("__metadata__.objective"), "{}", stderr(&o));
}

#[test]
fn megatron_bridge_sentinel_offsets_without_argmin_are_cut_at_the_first_negative_entry() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("mb.safetensors");
    // gpt_step._trim_padded_cu_seqlens_for_cp (067f987df): no argmin, cut at the first -1.
    let bytes = write_ints(
        &[
            ("tokens", vec![1, 8], vec![1, 5, 6, 7, 2, 1, 8, 9]),
            ("labels", vec![1, 8], vec![5, 6, 7, 2, 1, 8, 9, 2]),
            ("loss_mask", vec![1, 8], vec![1, 1, 1, 1, 1, 1, 1, 0]),
            ("position_ids", vec![1, 8], vec![0, 1, 2, 3, 4, 5, 6, 7]),
            ("cu_seqlens", vec![1, 4], vec![0, 8, -1, -1]),
        ],
        &[],
    )
    .unwrap();
    std::fs::write(&p, bytes).unwrap();
    let o = run_expect(&["check", p.to_str().unwrap()], 0);
    assert!(stdout(&o).contains("cut at its first negative entry, index 2"), "{}", stdout(&o));
    let r = metrics_record(&["--batch", p.to_str().unwrap()]);
    assert_eq!(r["batch"]["tokens"]["real"], 8);
}

#[test]
fn cp_rank_files_are_reassembled_and_an_incomplete_group_is_unreadable() {
    let o = run_expect(&["check", "--json", "examples/batches/good/cp_shards"], 0);
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let group = v["files"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["path"].as_str().unwrap().ends_with("cp-group"))
        .unwrap();
    assert_eq!(group["verdict"], "pass");
    assert_eq!(group["report"]["packs"][0]["facts"]["tokens"], 16);
    let o = run_expect(&["check", "examples/batches/bad/cp_rolled_after_split"], 1);
    assert!(stdout(&o).contains("VIOLATED label-targets"), "{}", stdout(&o));

    let dir = tempfile::tempdir().unwrap();
    std::fs::copy(
        repo().join("examples/batches/good/cp_shards/rank0.safetensors"),
        dir.path().join("rank0.safetensors"),
    )
    .unwrap();
    let o = run_expect(&["check", dir.path().to_str().unwrap()], 2);
    assert!(stderr(&o).contains("missing rank of cp_size 2: 1"), "{}", stderr(&o));

    // A rank without the padding mask the other has: unreadable, named (the group's mask was
    // dropped and every pad token counted as real).
    let dir = tempfile::tempdir().unwrap();
    let shards = repo().join("examples/batches/good/cp_shards");
    std::fs::copy(shards.join("rank0.safetensors"), dir.path().join("rank0.safetensors")).unwrap();
    let rank1 = reader::tensors::BatchFile::read(&shards.join("rank1.safetensors")).unwrap();
    let kept: Vec<(String, Vec<usize>, Vec<i64>)> = rank1
        .keys()
        .filter(|k| *k != "padding_mask")
        .map(|k| {
            let t = rank1.ints(k).unwrap();
            (k.to_owned(), t.shape, t.values)
        })
        .collect();
    let kept: Vec<(&str, Vec<usize>, Vec<i64>)> =
        kept.iter().map(|(k, s, v)| (k.as_str(), s.clone(), v.clone())).collect();
    let meta: Vec<(&str, &str)> =
        rank1.metadata().iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    std::fs::write(dir.path().join("rank1.safetensors"), write_ints(&kept, &meta).unwrap())
        .unwrap();
    let o = run_expect(&["check", dir.path().to_str().unwrap()], 2);
    assert!(
        stderr(&o).contains("rank 0 has mask (`padding_mask`), rank 1 has none"),
        "{}",
        stderr(&o)
    );

    // A lone rank of a 65536-rank group: the missing ranks are one range, not 448 KB of list.
    let dir = tempfile::tempdir().unwrap();
    temp_batch(
        dir.path(),
        "rank0.safetensors",
        &[
            ("input_ids", vec![4], vec![1, 2, 3, 4]),
            ("cu_seqlens", vec![2], vec![0, 4]),
            ("cp_rank", vec![], vec![0]),
            ("cp_size", vec![], vec![65536]),
        ],
    );
    let o = run_expect(&["check", dir.path().to_str().unwrap()], 2);
    assert!(stderr(&o).contains("missing ranks of cp_size 65536: 1..=65535"), "{}", stderr(&o));
    assert!(stderr(&o).len() < 2000, "{} bytes of stderr", stderr(&o).len());
}

#[test]
fn a_zero_length_mock_segment_is_a_layout_violation() {
    // AReaL #1103: a duplicated offset appended when nothing needed padding. The property suite
    // caught it; the command passed it until both ran the same rule.
    let dir = tempfile::tempdir().unwrap();
    let p = temp_batch(
        dir.path(),
        "zero_len_mock.safetensors",
        &[
            ("input_ids", vec![12], (1..=12).collect()),
            ("cu_seq_lens_q", vec![5], vec![0, 4, 7, 12, 12]),
            ("num_real_seqs", vec![], vec![3]),
        ],
    );
    let o = run_expect(&["check", p.to_str().unwrap()], 1);
    let out = stdout(&o);
    assert!(out.contains("VIOLATED mock-nonempty"), "{out}");
    assert!(out.contains("cu_seq_lens_q[3] = cu_seq_lens_q[4] = 12"), "{out}");
}

#[test]
fn a_cp_size_beyond_what_a_file_may_state_is_a_usage_error() {
    let o = run_expect(
        &["check", "--cp-size", "4294967295", "examples/batches/good/te_thd_cp2.safetensors"],
        2,
    );
    assert!(stderr(&o).contains("--cp-size"), "{}", stderr(&o));
}

/// Hostile directory layouts: two symlinks to the directory itself, and a FIFO named like a
/// batch. The walk visits each directory once and never opens the FIFO (it would block
/// forever); naming the FIFO directly is an input error.
#[cfg(unix)]
#[test]
fn walk_survives_symlink_loops_and_fifos() {
    let dir = tempfile::tempdir().unwrap();
    let good = "hf_bionemo_flatten.safetensors";
    std::fs::copy(repo().join("examples/batches/good").join(good), dir.path().join(good)).unwrap();
    std::os::unix::fs::symlink(".", dir.path().join("a")).unwrap();
    std::os::unix::fs::symlink(".", dir.path().join("b")).unwrap();
    let fifo = dir.path().join("pipe.safetensors");
    let made = Command::new("mkfifo").arg(&fifo).status().expect("mkfifo runs");
    assert!(made.success());

    let out = thdcheck(["check".as_ref(), dir.path().as_os_str()]);
    let text = stdout(&out);
    assert_eq!(code(&out), 0, "{text}{}", stderr(&out));
    assert_eq!(text.matches(good).count(), 1, "checked once, not once per link:\n{text}");
    assert!(!text.contains("pipe.safetensors"), "{text}");

    let direct = thdcheck(["check".as_ref(), fifo.as_os_str()]);
    assert_eq!(code(&direct), 2, "{}", stderr(&direct));
    assert!(stderr(&direct).contains("not a regular file"), "{}", stderr(&direct));
}

/// A header may claim any row count for a tensor of zero elements: `[2^62, 0]` once overflowed
/// a per-row allocation (exit 101), `[10^9, 0]` tried to allocate 24 GB. Both are exit 2 now,
/// naming the key and the shape.
#[test]
fn zero_width_rows_are_a_shape_error_not_an_allocation() {
    let dir = tempfile::tempdir().unwrap();
    for (name, rows) in [("huge.safetensors", 1usize << 62), ("big.safetensors", 1_000_000_000)] {
        let bytes = write_ints(
            &[("input_ids", vec![rows, 0], vec![]), ("seq_lens", vec![rows, 0], vec![])],
            &[],
        )
        .unwrap();
        let path = dir.path().join(name);
        std::fs::write(&path, bytes).unwrap();
        let out = thdcheck(["check".as_ref(), path.as_os_str()]);
        let err = stdout(&out) + &stderr(&out);
        assert_eq!(code(&out), 2, "{name}: {err}");
        assert!(err.contains("input_ids") && err.contains(&rows.to_string()), "{name}: {err}");
    }
}

/// `thdcheck selfcheck | head -1`: the reader goes away, and the command ends quietly instead
/// of panicking in `println!`.
#[cfg(unix)]
#[test]
fn a_closed_stdout_is_not_a_panic() {
    let mut child = Command::new(env!("CARGO_BIN_EXE_thdcheck"))
        .args(["selfcheck"])
        .current_dir(repo())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    drop(child.stdout.take());
    let out = child.wait_with_output().unwrap();
    let err = stderr(&out);
    assert!(!err.contains("panicked"), "{err}");
    assert_ne!(out.status.code(), Some(101), "{err}");
}

/// `cu_seq_lens_k` goes through the same offsets reader as `cu_seq_lens_q`: a 2-D `[2, 3]`
/// tensor was accepted for k while the same shape for q was rejected.
#[test]
fn two_dimensional_key_offsets_are_a_shape_error() {
    let dir = tempfile::tempdir().unwrap();
    let bytes = write_ints(
        &[
            ("input_ids", vec![1, 4], vec![5, 6, 7, 8]),
            ("position_ids", vec![1, 4], vec![0, 1, 0, 1]),
            ("cu_seq_lens_q", vec![3], vec![0, 2, 4]),
            ("cu_seq_lens_k", vec![2, 3], vec![0, 2, 4, 0, 2, 4]),
        ],
        &[],
    )
    .unwrap();
    let path = dir.path().join("k2d.safetensors");
    std::fs::write(&path, bytes).unwrap();
    let out = thdcheck(["check".as_ref(), path.as_os_str()]);
    let err = stdout(&out) + &stderr(&out);
    assert_eq!(code(&out), 2, "{err}");
    assert!(err.contains("cu_seq_lens_k") && err.contains("[2, 3]"), "{err}");
}

/// `--expect` and a directory's expected.toml match files however the paths are spelled:
/// absolute, with `./` or `..`, or from another working directory.
#[test]
fn expectations_match_paths_however_they_are_spelled() {
    let abs = repo().join("examples/batches").canonicalize().unwrap();
    let abs = abs.to_str().unwrap();
    for args in [
        vec!["check", "--quiet", abs],
        vec!["check", "--quiet", "./examples/../examples/batches"],
        vec![
            "check",
            "--quiet",
            "examples/batches/bad",
            "--expect",
            "examples/batches/expected.toml",
        ],
        vec!["check", "--quiet", abs, "--expect", "./examples/batches/expected.toml"],
    ] {
        let o = run_expect(&args, 0);
        assert!(stdout(&o).contains("every verdict as expected"), "{args:?}: {}", stdout(&o));
    }
}

/// A file on which every rule was skipped is reported apart (`UNCHECKED`, counted as unchecked,
/// JSON verdict "unchecked"), never as `PASS (0 checks hold)`; `--strict` fails on it.
#[test]
fn a_file_no_rule_applied_to_is_reported_apart_and_fails_under_strict() {
    let dir = tempfile::tempdir().unwrap();
    // Offsets that hold no document: every token is padding, no rule has anything to judge.
    let f = temp_batch(
        dir.path(),
        "nothing.safetensors",
        &[("input_ids", vec![1, 4], vec![1, 2, 3, 4]), ("cu_seq_lens_q", vec![1], vec![0])],
    );
    let f = f.to_str().unwrap();
    let o = run_expect(&["check", f], 0);
    assert!(stdout(&o).contains("=> UNCHECKED (no rule applied"), "{}", stdout(&o));
    assert!(
        stdout(&o).contains("1 file: 0 pass, 0 fail, 1 unchecked, 0 unreadable"),
        "{}",
        stdout(&o)
    );
    assert!(stderr(&o).contains("warning: no rule applied to 1 file"), "{}", stderr(&o));
    let o = run_expect(&["check", "--strict", f], 1);
    assert!(stderr(&o).contains("error (--strict): no rule applied to 1 file"), "{}", stderr(&o));
    let o = run_expect(&["check", "--json", f], 0);
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["files"][0]["verdict"], "unchecked", "{v}");
    assert_eq!(
        (v["summary"]["pass"].as_u64(), v["summary"]["unchecked"].as_u64()),
        (Some(0), Some(1))
    );
}

/// Labels under a key of the stack's own are listed as not read (never silently ignored); a
/// `[map]` written the wrong way round warns that no file has its source (an error under
/// `--strict`, as is a file whose labels were not found); a `[map]` onto a key the file has
/// says it was not applied.
#[test]
fn keys_no_rule_read_are_listed_and_a_map_no_file_matches_is_said() {
    let dir = tempfile::tempdir().unwrap();
    // Two documents; `tgt` holds the labels, the second document's first token leaks into the
    // first document's last label.
    let f = temp_batch(
        dir.path(),
        "tgt.safetensors",
        &[
            ("input_ids", vec![1, 6], vec![5, 6, 7, 8, 9, 10]),
            ("position_ids", vec![1, 6], vec![0, 1, 2, 0, 1, 2]),
            ("tgt", vec![1, 6], vec![6, 7, 8, 9, 10, -100]),
        ],
    );
    let f = f.to_str().unwrap();
    let o = run_expect(&["check", f], 0);
    assert!(stdout(&o).contains("unread   `tgt` (no rule looked at it"), "{}", stdout(&o));
    run_expect(&["check", "--strict", f], 1);
    let wrong = dir.path().join("wrong.toml");
    std::fs::write(&wrong, "name = \"mine\"\nlabels = \"shifted\"\n[map]\nlabels = \"tgt\"\n")
        .unwrap();
    let o = run_expect(&["check", "--profile", wrong.to_str().unwrap(), f], 0);
    assert!(
        stderr(&o)
            .contains("warning: the profile's [map] renames `labels`, which no file checked has"),
        "{}",
        stderr(&o)
    );
    run_expect(&["check", "--strict", "--profile", wrong.to_str().unwrap(), f], 1);
    // The right way round, the labels are read and the leak is the violation it is.
    let right = dir.path().join("right.toml");
    std::fs::write(&right, "name = \"mine\"\nlabels = \"shifted\"\n[map]\ntgt = \"labels\"\n")
        .unwrap();
    let o = run_expect(&["check", "--strict", "--profile", right.to_str().unwrap(), f], 1);
    assert!(stdout(&o).contains("VIOLATED cross-doc-label"), "{}", stdout(&o));
    // A rename onto a key the file already has is not applied, and says so.
    let onto = dir.path().join("onto.toml");
    std::fs::write(&onto, "name = \"mine\"\n[map]\ntgt = \"input_ids\"\n").unwrap();
    let o = run_expect(&["check", "--profile", onto.to_str().unwrap(), f], 0);
    assert!(
        stdout(&o).contains("[map] tgt → input_ids not applied: the file has its own `input_ids`"),
        "{}",
        stdout(&o)
    );
    let o = run_expect(&["check", "--map", "tgt=input_ids", f], 0);
    assert!(
        stdout(&o).contains("--map tgt=input_ids: replaces the file's own `input_ids`"),
        "{}",
        stdout(&o)
    );
}

/// `label-targets` without causal attention is listed as skipped with the reason and the fact
/// that enables it, not left out of the report.
#[test]
fn label_targets_is_listed_as_skipped_without_causal_attention() {
    let o = run_expect(&["check", "examples/batches/good/hf_flatten.safetensors"], 0);
    assert!(
        stdout(&o).contains("skipped  label-targets    attention not stated causal"),
        "{}",
        stdout(&o)
    );
    let o = run_expect(&["check", "--causal", "examples/batches/good/hf_flatten.safetensors"], 0);
    assert!(stdout(&o).contains("ok       label-targets"), "{}", stdout(&o));
}

/// Offsets past the token count (a collator bug) are the batch's `offsets` violation, exit 1:
/// a CI script tells a broken batch from a misconfigured gate (exit 2).
#[test]
fn offsets_past_the_tokens_are_a_violation_not_an_unreadable_file() {
    let dir = tempfile::tempdir().unwrap();
    let f = temp_batch(
        dir.path(),
        "past.safetensors",
        &[
            ("input_ids", vec![1, 6], vec![1, 2, 3, 4, 5, 6]),
            ("labels", vec![1, 6], vec![1, 2, 3, 4, 5, 6]),
            ("cu_seq_lens_q", vec![3], vec![0, 3, 9]),
        ],
    );
    let o = run_expect(&["check", f.to_str().unwrap()], 1);
    assert!(
        stdout(&o).contains("VIOLATED offsets          `cu_seq_lens_q`: expected cu_seq_lens_q[2] <= T = 6, got cu_seq_lens_q[2] = 9"),
        "{}",
        stdout(&o)
    );
}

/// Two bugs a correct profile (`padding_segments = "per-row"`, pad id 7) let through: the row's
/// padding absorbed into its last document (positions not restarted: useful Σs² 52 where the
/// documents give 25) is `mock-marked`'s violation, and a padding segment with trained labels
/// is `pad-labels`'. The correct batch passes with the padding excluded from useful work.
#[test]
fn per_row_padding_absorbed_or_trained_is_flagged_under_its_profile() {
    let dir = tempfile::tempdir().unwrap();
    let profile = dir.path().join("inhouse.toml");
    std::fs::write(
        &profile,
        "name = \"inhouse\"\npadding_segments = \"per-row\"\npad_token_id = 7\n",
    )
    .unwrap();
    let ids = vec![11, 12, 13, 14, 21, 22, 23, 7, 7, 7];
    let restart = vec![0, 1, 2, 3, 0, 1, 2, 0, 1, 2];
    let labels = vec![-100, 12, 13, 14, -100, 22, 23, -100, -100, -100];
    let batch = |name: &str, pos: &[i64], labels: &[i64]| {
        temp_batch(
            dir.path(),
            name,
            &[
                ("input_ids", vec![1, 10], ids.clone()),
                ("position_ids", vec![1, 10], pos.to_vec()),
                ("labels", vec![1, 10], labels.to_vec()),
            ],
        )
    };
    let p = profile.to_str().unwrap();
    let check = |f: &Path, code| {
        let json = run_expect(&["check", "--json", "--profile", p, f.to_str().unwrap()], code);
        let v: serde_json::Value = serde_json::from_slice(&json.stdout).unwrap();
        v["files"][0].clone()
    };
    let ok = check(&batch("ok.safetensors", &restart, &labels), 0);
    assert_eq!(ok["report"]["packs"][0]["facts"]["useful"]["sum_squares"], 25, "{ok}");
    let absorbed =
        check(&batch("absorbed.safetensors", &[0, 1, 2, 3, 0, 1, 2, 3, 4, 5], &labels), 1);
    assert_eq!(absorbed["violated"], serde_json::json!(["mock-marked"]), "{absorbed}");
    let mut trained = labels.clone();
    trained[8] = 7;
    trained[9] = 7;
    let trained = check(&batch("trained.safetensors", &restart, &trained), 1);
    assert_eq!(trained["violated"], serde_json::json!(["pad-labels"]), "{trained}");
    // Without the profile's fact nothing says the padding is a segment of its own.
    let plain = batch("plain.safetensors", &[0, 1, 2, 3, 0, 1, 2, 3, 4, 5], &labels);
    run_expect(&["check", "--pad-token-id", "7", plain.to_str().unwrap()], 0);
}

#[test]
fn check_html_draws_every_example() {
    let dir = tempfile::tempdir().unwrap();
    let page = dir.path().join("out.html");
    let o =
        run_expect(&["check", "--quiet", "--html", page.to_str().unwrap(), "examples/batches"], 0);
    // The text report is unchanged by --html.
    assert!(stdout(&o).contains("every verdict as expected"), "{}", stdout(&o));
    let html = std::fs::read_to_string(&page).unwrap();
    // A section per file and per CP group, each with its verdict; a picture for each file that
    // holds packs (a CP shard's picture is its group's).
    assert_eq!(html.matches("<section").count(), 26);
    assert_eq!(html.matches("<svg").count(), 26);
    assert!(html.contains("FAIL: cross-doc-label violated, as expected"));
    assert!(html.contains("cross-doc-label [token 4]"), "the violation marked at its token");
    assert!(html.ends_with("</html>\n"));
    assert!(!html.contains("<script") && !html.contains("https://"), "self-contained");
}
