//! `thdcheck fuzz collator`: the formats it reads, the check options, declared rewrites, static
//! lengths and budgets.

use super::*;

#[test]
fn fuzz_collator_reads_answers_in_the_formats_of_axolotl_llm_foundry_trl_and_olmo_core() {
    let collator = example_adapter("sample_numbers_collator");
    for (format, profile) in [
        ("axolotl", "axolotl"),
        ("llm_foundry", "llm_foundry"),
        ("trl", "trl"),
        ("olmo_core", "olmo_core"),
    ] {
        let v = fuzz_json(
            &[
                "collator",
                "--json",
                "--cases",
                "64",
                "--profile",
                profile,
                "--pad-token-id",
                "0",
                "--",
                "python3",
                &collator,
                format,
            ],
            0,
        );
        assert_eq!(v["result"], "pass", "{format}: {v}");
    }
    // OLMo-core's labels are each row shifted: stated as SFT, its first boundary is a leak.
    let v = fuzz_json(
        &[
            "collator",
            "--json",
            "--cases",
            "64",
            "--objective",
            "sft",
            "--",
            "python3",
            &collator,
            "olmo_core",
        ],
        1,
    );
    assert_eq!(v["failure"]["checks"][0], "cross-doc-label", "{v}");
    // Without the profile too: a numbered mask is read as sample numbers, and a pack of one
    // sample (an all-ones mask, the padding's positions restarting) as one padded row, since a
    // 0/1 mask says which tokens can restart a document. It was flagged `mask` before, a false
    // alarm: one document cannot attend to another.
    let v = fuzz_json(
        &["collator", "--json", "--cases", "64", "--", "python3", &collator, "axolotl"],
        0,
    );
    assert_eq!(v["result"], "pass", "{v}");
}

#[test]
fn fuzz_collator_passes_flattening_and_catches_the_dpo_offset_bug() {
    let good = example_adapter("flatten_collator");
    for mode in ["sft", "dpo"] {
        let v = fuzz_json(
            &["collator", "--mode", mode, "--json", "--cases", "48", "--", "python3", &good],
            0,
        );
        assert_eq!(v["result"], "pass", "{mode}");
    }
    let bad = example_adapter("dpo_offset_bug_collator");
    let v = fuzz_json(
        &["collator", "--mode", "dpo", "--json", "--cases", "48", "--", "python3", &bad],
        1,
    );
    let f = &v["failure"];
    assert_eq!(f["checks"], serde_json::json!(["dpo-offsets"]));
    assert!(
        f["detail"].as_str().unwrap().contains("real chosen length 1, not the padded length 2"),
        "{f}"
    );
    // One pair, one chosen token padded to 2 (the rejected side may keep a second token: that
    // is what keeps the static length at 2 when the shrinker cannot move both at once).
    let examples = f["request"]["examples"].as_array().unwrap();
    assert_eq!(examples.len(), 1, "{f}");
    assert_eq!(examples[0]["chosen_input_ids"], serde_json::json!([1]), "{f}");
    assert_eq!(f["request"]["max_seq_length"], 2);

    // The 005366f75 layout: right shift, but rejected example 0 spans the chosen padding (#1900).
    let spans = example_adapter("dpo_spans_padding_collator");
    let v = fuzz_json(
        &["collator", "--mode", "dpo", "--json", "--cases", "48", "--", "python3", &spans],
        1,
    );
    let f = &v["failure"];
    assert_eq!(f["checks"], serde_json::json!(["dpo-offsets"]));
    assert!(f["detail"].as_str().unwrap().contains("#1900"), "{f}");
    assert_eq!(f["request"]["examples"].as_array().unwrap().len(), 1, "{f}");
}

#[test]
fn fuzz_collator_draws_token_id_zero_and_catches_a_mask_built_from_ids() {
    let bad = example_adapter("mask_from_ids_collator");
    let v = fuzz_json(&["collator", "--json", "--cases", "64", "--", "python3", &bad], 1);
    let f = &v["failure"];
    assert_eq!(f["kind"], "violation", "{v}");
    assert_eq!(f["checks"][0], "mask", "{v}");
    let examples = f["request"]["examples"].as_array().unwrap();
    assert!(
        examples.iter().any(|e| e["input_ids"].as_array().unwrap().contains(&serde_json::json!(0))),
        "the shrunk case holds a real token 0: {f}"
    );
    assert!(f.get("shrunk_as").is_none(), "{f}");
}

#[test]
fn fuzz_collator_takes_the_check_options() {
    let good = example_adapter("flatten_collator");
    // The flattening collator pads to max_seq_length only, never to a multiple of 8.
    let v = fuzz_json(
        &[
            "collator",
            "--json",
            "--cases",
            "50",
            "--pad-to-multiple-of",
            "8",
            "--",
            "python3",
            &good,
        ],
        1,
    );
    assert_eq!(v["failure"]["checks"][0], "pad-multiple", "{v}");
    // The read options reach the reader: a forced TE dialect finds no `cu_seqlens`.
    let o = run_expect(
        &["fuzz", "collator", "--json", "--cases", "4", "--dialect", "te", "--", "python3", &good],
        1,
    );
    assert!(stdout(&o).contains("batch-readable"), "{}", stdout(&o));
    // A pad id makes it into the cases and the correct collator still passes.
    let v = fuzz_json(
        &[
            "collator",
            "--json",
            "--cases",
            "50",
            "--pad-token-id",
            "7",
            "--causal",
            "--",
            "python3",
            &good,
        ],
        0,
    );
    assert_eq!(v["result"], "pass", "{v}");
    // --mlm and --causal exclude each other.
    run_expect(&["fuzz", "collator", "--mlm", "--causal", "--", "python3", &good], 2);
}

#[test]
fn fuzz_collator_accepts_declared_rewrites_only() {
    let eos = example_adapter("eos_collator");
    let v = fuzz_json(
        &["collator", "--json", "--cases", "50", "--add-eos", "2", "--", "python3", &eos],
        0,
    );
    assert_eq!(v["result"], "pass", "{v}");
    let v = fuzz_json(&["collator", "--json", "--cases", "50", "--", "python3", &eos], 1);
    assert_eq!(v["failure"]["checks"][0], "documents", "{v}");
    // BOS declared but not inserted.
    let v = fuzz_json(
        &[
            "collator",
            "--json",
            "--cases",
            "50",
            "--add-bos",
            "1",
            "--add-eos",
            "2",
            "--",
            "python3",
            &eos,
        ],
        1,
    );
    assert_eq!(v["failure"]["checks"][0], "documents", "{v}");
    // Masked LM: ids replaced or kept, labels the originals; only the lengths are compared.
    let mlm = example_adapter("mlm_collator");
    let v = fuzz_json(&["collator", "--json", "--cases", "50", "--mlm", "--", "python3", &mlm], 0);
    assert_eq!(v["result"], "pass", "{v}");
    let v = fuzz_json(&["collator", "--json", "--cases", "50", "--", "python3", &mlm], 1);
    let first = v["failure"]["checks"][0].as_str().unwrap();
    assert!(["documents", "cross-doc-label"].contains(&first), "{v}");
}

/// `--static-length never` fits a collator that never pads to a static length (transformers'
/// DataCollatorWithFlattening): no request carries one. By default half the requests do, and a
/// collator that refuses them is reported.
#[test]
fn fuzz_static_length_never_sends_no_static_length() {
    let script = "import sys\nsys.path.insert(0, 'adapters/python')\n\
                  sys.path.insert(0, 'adapters/python/examples')\n\
                  from thdcheck_adapter import serve_collator\nfrom flatten_collator import collate\n\
                  def c(ex, m):\n    assert m is None, 'static length %r' % m\n    return collate(ex, None)\n\
                  serve_collator(c)";
    let base = ["collator", "--json", "--cases", "48"];
    let v = fuzz_json(
        &[&base[..], &["--static-length", "never", "--", "python3", "-c", script]].concat(),
        0,
    );
    assert_eq!(v["result"], "pass", "{v}");
    let v = fuzz_json(&[&base[..], &["--", "python3", "-c", script]].concat(), 1);
    assert_eq!(v["failure"]["kind"], "adapter-error", "{v}");
}

/// `--over-budget`: some requests need more than their `max_seq_length`; a collator that keeps
/// the longest prefix that fits passes, one that packs everything is caught.
#[test]
fn fuzz_over_budget_requests_run_the_budget_filter() {
    let good = example_adapter("flatten_collator");
    for mode in ["sft", "dpo"] {
        let v = fuzz_json(
            &[
                "collator",
                "--over-budget",
                "--mode",
                mode,
                "--json",
                "--cases",
                "64",
                "--",
                "python3",
                &good,
            ],
            0,
        );
        assert_eq!(v["result"], "pass", "{mode}: {v}");
    }
    let greedy = "import sys\nsys.path.insert(0, 'adapters/python')\n\
                  sys.path.insert(0, 'adapters/python/examples')\n\
                  from thdcheck_adapter import serve_collator\nimport flatten_collator as f\n\
                  f.within_budget = lambda ex, m: ex\nserve_collator(f.collate)";
    let v = fuzz_json(
        &["collator", "--over-budget", "--json", "--cases", "64", "--", "python3", "-c", greedy],
        1,
    );
    assert_eq!(v["failure"]["kind"], "violation", "{v}");
}

/// A string where the batch reader reads a tensor is a `schema` fault (it was read as an absent
/// key and judged: `qk-offsets ... = end`); a string under a key nothing reads is left out, as a
/// dump leaves it out.
#[test]
fn fuzz_collator_a_string_where_a_tensor_belongs_is_schema() {
    let with = |key: &str, value: &str| {
        format!(
            "import json, sys\nsys.path.insert(0, 'adapters/python/examples')\n\
             import flatten_collator as fc\nfor l in sys.stdin:\n    r = json.loads(l)\n    \
             b = fc.collate(r['examples'], r['max_seq_length'])\n    b[{key:?}] = {value}\n    \
             print(json.dumps({{'thdcheck': 1, 'id': r['id'], 'batch': b}}), flush=True)"
        )
    };
    for key in ["cu_seq_lens_q", "cu_seq_lens_k", "labels", "position_ids"] {
        let script = with(key, "'end'");
        let v =
            fuzz_json(&["collator", "--json", "--cases", "8", "--", "python3", "-c", &script], 1);
        assert_eq!(v["failure"]["kind"], "schema", "{key}: {v}");
        assert!(v["failure"]["detail"].as_str().unwrap().contains(key), "{key}: {v}");
    }
    let script = with("source", "'alpaca'");
    let v = fuzz_json(&["collator", "--json", "--cases", "8", "--", "python3", "-c", &script], 0);
    assert_eq!(v["result"], "pass", "{v}");
}

/// `batch-readable`'s planted bug: a collator that emits its offsets under a misspelt key
/// (`cu_seq_len_q`, no position ids beside them), so the model reads no `cu_seq_lens_q` and
/// attends across the documents; `thdcheck check` cannot tell the batch's dialect. The same
/// collator with the keys spelt right passes.
#[test]
fn a_collator_with_a_misspelt_offsets_key_breaks_batch_readable() {
    let helper = "import sys\nsys.path.insert(0, 'adapters/python')\n\
                  sys.path.insert(0, 'adapters/python/examples')\n\
                  from thdcheck_adapter import serve_collator\nimport flatten_collator as f\n";
    let misspelt = format!(
        "{helper}def collate(examples, m):\n    \
         b = f.collate(examples, m)\n    \
         b['cu_seq_len_q'] = b.pop('cu_seq_lens_q')\n    \
         b['cu_seq_len_k'] = b.pop('cu_seq_lens_k')\n    \
         del b['position_ids']\n    \
         return b\n\
         serve_collator(collate)"
    );
    let run = |adapter: &str, want| {
        fuzz_json(&["collator", "--json", "--cases", "16", "--", "python3", "-c", adapter], want)
    };
    let v = run(&misspelt, 1);
    assert_eq!(v["failure"]["checks"], serde_json::json!(["batch-readable"]), "{v}");
    assert!(v["failure"]["detail"].as_str().unwrap().contains("cannot tell the dialect"), "{v}");
    assert_eq!(run(&format!("{helper}serve_collator(f.collate)"), 0)["result"], "pass");
}
