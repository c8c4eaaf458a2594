//! `thdcheck metrics`: the record under a recipe, `--expect` over a logger's keys, CP rank files
//! and micro-batches.

use super::*;

#[test]
fn metrics_reads_a_real_loggers_keys_with_logger() {
    let dir = "examples/batches/good/cp_shards";
    let r = metrics_record(&["--batch", dir]);
    let tmp = tempfile::tempdir().unwrap();
    let logged = tmp.path().join("areal.json");
    // AReaL's stats_tracker keys: the global counts pass, loss is listed as not recomputed.
    let good = serde_json::json!({
        "sft/n_tokens": r["batch"]["tokens"]["real"],
        "sft/n_valid_tokens": r["batch"]["tokens"]["valid"],
        "sft/loss/avg": 2.5,
        "sft/vocab_min_logits/avg": 1.0,
    });
    std::fs::write(&logged, good.to_string()).unwrap();
    let args = |l: &str| {
        vec!["metrics", "--recipe", RECIPE, "--batch", dir, "--logger", "areal", "--expect"]
            .into_iter()
            .chain([l])
            .map(str::to_owned)
            .collect::<Vec<_>>()
    };
    let path = logged.to_str().unwrap().to_owned();
    let a = args(&path);
    let o = run_expect(&a.iter().map(String::as_str).collect::<Vec<_>>(), 0);
    let out = stdout(&o);
    assert!(out.contains("ok       sft/n_tokens (= batch.tokens.real)"), "{out}");
    assert!(out.contains("n/a      sft/loss/avg"), "{out}");
    assert!(out.contains("unknown  sft/vocab_min_logits/avg"), "{out}");
    // #1242: rank 0's shard counted as the batch.
    let half = r["batch"]["tokens"]["real"].as_u64().unwrap() / 2;
    std::fs::write(&logged, serde_json::json!({"sft/n_tokens": half}).to_string()).unwrap();
    let o = run_expect(&a.iter().map(String::as_str).collect::<Vec<_>>(), 1);
    assert!(stdout(&o).contains("CP factor 2"), "{}", stdout(&o));
}

/// A logger is data: a user's profile file declares its own `[loggers.NAME]`, and
/// `--logger NAME --profile FILE` judges its keys as it judges a built-in logger's.
#[test]
fn metrics_reads_the_keys_of_a_logger_a_users_profile_declares() {
    let dir = "examples/batches/good/cp_shards";
    let tmp = tempfile::tempdir().unwrap();
    let profile = tmp.path().join("mine.toml");
    std::fs::write(
        &profile,
        "name = \"mine\"\n\n[loggers.my-trainer]\nsource = \"me/mystack@0123abcd train.py: log_step\"\n\n\
         [loggers.my-trainer.keys]\n\
         \"perf/tokens\" = { record = \"batch.tokens.real\", kind = \"count\" }\n\
         \"perf/mfu\" = { record = \"batch.mfu_pct.useful\", kind = \"rate\" }\n\
         \"loss\" = { not_recomputed = \"needs the logits\", kind = \"rate\" }\n",
    )
    .unwrap();
    let profile = profile.to_str().unwrap();
    let r = metrics_record(&["--batch", dir, "--profile", profile]);
    let logged = tmp.path().join("logged.json");
    let write = |v: serde_json::Value| std::fs::write(&logged, v.to_string()).unwrap();
    let logged_path = logged.to_str().unwrap();
    let args = |logger| vec!["metrics", "--recipe", RECIPE, "--batch", dir, "--logger", logger];
    let with = |logger, extra: &[&str], want| {
        let mut a = args(logger);
        a.extend_from_slice(&["--profile", profile, "--expect", logged_path]);
        a.extend_from_slice(extra);
        run_expect(&a, want)
    };
    write(serde_json::json!({
        "perf/tokens": r["batch"]["tokens"]["real"],
        "perf/mfu": r["batch"]["mfu_pct"]["useful"],
        "loss": 2.5,
        "perf/other": 1.0,
    }));
    let out = stdout(&with("my-trainer", &[], 0));
    assert!(out.contains("as MyTrainer's keys"), "{out}");
    assert!(out.contains("ok       perf/tokens (= batch.tokens.real)"), "{out}");
    assert!(out.contains("ok       perf/mfu (= batch.mfu_pct.useful)"), "{out}");
    assert!(
        out.contains("n/a      loss") && out.contains("not recomputed: needs the logits"),
        "{out}"
    );
    assert!(out.contains("unknown  perf/other"), "{out}");
    let v: serde_json::Value =
        serde_json::from_slice(&with("my-trainer", &["--json"], 0).stdout).unwrap();
    assert_eq!(v["comparison"]["logger"], "MyTrainer", "{v}");
    // Its counts are exact: rank 0's shard counted as the batch is named as the CP factor.
    let half = r["batch"]["tokens"]["real"].as_u64().unwrap() / 2;
    write(serde_json::json!({"perf/tokens": half}));
    assert!(stdout(&with("my-trainer", &[], 1)).contains("CP factor 2"));
    // The built-in loggers stay known beside the profile's own.
    write(serde_json::json!({"sft/n_tokens": r["batch"]["tokens"]["real"]}));
    with("areal", &[], 0);
    // A logger no profile declares is exit 2 listing the known ones.
    let mut a = args("my-trainer");
    a.extend_from_slice(&["--expect", logged_path]);
    let o = run_expect(&a, 2);
    assert!(stderr(&o).contains("--logger \"my-trainer\": no such logger"), "{}", stderr(&o));
    assert!(stderr(&o).contains("open-instruct-dpo-cache"), "{}", stderr(&o));
    let o = with("nosuch", &[], 2);
    assert!(stderr(&o).contains("those of --profile mine (my-trainer)"), "{}", stderr(&o));
    // A bad kind is exit 2 naming the file, the line and the values allowed.
    let bad = tmp.path().join("bad.toml");
    std::fs::write(
        &bad,
        "name = \"bad\"\n[loggers.mine]\n[loggers.mine.keys]\n\"perf/tokens\" = { record = \"batch.tokens.real\" }\n",
    )
    .unwrap();
    let bad = bad.to_str().unwrap();
    let o =
        run_expect(&[&args("mine")[..], &["--profile", bad, "--expect", logged_path]].concat(), 2);
    assert!(stderr(&o).contains(&format!("{bad}:4: missing field `kind`")), "{}", stderr(&o));
    std::fs::write(
        bad,
        "name = \"bad\"\n[loggers.mine]\n[loggers.mine.keys]\n\"perf/tokens\" = { record = \"batch.tokens.real\", kind = \"count\" }\n\
         \"perf/mfu\" = { record = \"batch.mfu_pct.useful\", kind = \"ratio\" }\n",
    )
    .unwrap();
    let o =
        run_expect(&[&args("mine")[..], &["--profile", bad, "--expect", logged_path]].concat(), 2);
    assert!(
        stderr(&o).contains(&format!(
            "{bad}:5: unknown variant `ratio`, expected one of `count`, `flops`, `rate`"
        )),
        "{}",
        stderr(&o)
    );
}

#[test]
fn metrics_prints_the_record_and_the_batch_under_the_recipe() {
    let o = run_expect(&["metrics", "--recipe", RECIPE], 0);
    assert!(stdout(&o).starts_with("recipe  esm2_t6_8m_l0_sanity_cp"), "{}", stdout(&o));
    let r = metrics_record(&[
        "--batch",
        "examples/batches/good/hf_bionemo_mock_num_real_seqs.safetensors",
    ]);
    // The mock segment is hardware work, not useful work (#1561).
    assert_eq!(r["batch"]["attention"]["useful_sum_squares"], 77);
    assert_eq!(r["batch"]["attention"]["hardware_sum_squares"], 78);
    assert_eq!(
        r["batch"]["tokens"],
        serde_json::json!({"real": 15, "stored": 16, "valid": 12, "prompt": 3})
    );
    assert_eq!(r["batch"]["sequences"]["real"], 3);
    // --step-time scales the rates, not the counts.
    let slow = metrics_record(&["--step-time", "0.04"]);
    let fast = metrics_record(&[]);
    assert_eq!(slow["tokens"], fast["tokens"]);
    let mfu = |r: &serde_json::Value| r["throughput"]["mfu_pct"]["useful"].as_f64().unwrap();
    assert!((mfu(&fast) / mfu(&slow) - 2.0).abs() < 1e-12);
}

#[test]
fn metrics_expect_gates_a_logger() {
    let r = metrics_record(&[]);
    let dir = tempfile::tempdir().unwrap();
    let logged = dir.path().join("logged.json");
    let write = |v: serde_json::Value| std::fs::write(&logged, v.to_string()).unwrap();
    let logged_arg = logged.to_str().unwrap();
    let mfu = r["throughput"]["mfu_pct"]["useful"].as_f64().unwrap();

    // A correct logger: counts exact, MFU within rtol 1e-6 (float32-free Python arithmetic).
    write(serde_json::json!({
        "tokens": {"real": r["tokens"]["real"], "valid": r["tokens"]["valid"]},
        "throughput.mfu_pct.useful": mfu * (1.0 + 1e-9),
    }));
    let o = run_expect(&["metrics", "--recipe", RECIPE, "--expect", logged_arg], 0);
    assert!(stdout(&o).contains("=> PASS: 3 logged values agree"), "{}", stdout(&o));

    // The #1561 logger: useful MFU that counts the padding.
    let hw = r["throughput"]["mfu_pct"]["hardware"].as_f64().unwrap();
    write(
        serde_json::json!({"throughput": {"mfu_pct": {"useful": hw}}, "tokens": {"real": r["tokens"]["padded"]}}),
    );
    let o = run_expect(&["metrics", "--recipe", RECIPE, "--expect", logged_arg], 1);
    let out = stdout(&o);
    assert!(out.contains("MISMATCH tokens.real"), "{out}");
    assert!(out.contains("=> FAIL: 2 of 2 logged values disagree"), "{out}");

    // An unknown key is listed, not fatal; a JSON with nothing comparable is an error.
    write(serde_json::json!({"tokens": {"reel": 1, "real": r["tokens"]["real"]}}));
    let o = run_expect(&["metrics", "--recipe", RECIPE, "--expect", logged_arg], 0);
    assert!(stdout(&o).contains("unknown  tokens.reel"), "{}", stdout(&o));
    assert!(stdout(&o).contains("=> PASS: 1 logged values agree (1 logged values not compared"));
    write(serde_json::json!({"tokens": {"reel": 1}}));
    let o = run_expect(&["metrics", "--recipe", RECIPE, "--expect", logged_arg], 2);
    assert!(stderr(&o).contains("none of the logged values can be compared (tokens.reel)"));
    let o = run_expect(&["metrics", "--recipe", "no/such.toml"], 2);
    assert!(stderr(&o).contains("no/such.toml"), "{}", stderr(&o));
}

#[test]
fn metrics_counts_the_global_batch_of_cp_rank_files_and_names_the_cp_factor() {
    let dir = "examples/batches/good/cp_shards";
    let r = metrics_record(&["--batch", dir]);
    // The two ranks reassembled: the global counts, not one rank's.
    assert_eq!(r["batch"]["cp_size"], 2);
    assert_eq!(r["batch"]["tokens"]["real"], 12);
    assert_eq!(r["batch"]["tokens"]["stored"], 16);
    // One rank alone cannot give the global batch: an error, never its local counts.
    let o = run_expect(
        &["metrics", "--recipe", RECIPE, "--batch", &format!("{dir}/rank0.safetensors")],
        2,
    );
    assert!(stderr(&o).contains("needs every rank's file of a CP group"), "{}", stderr(&o));
    assert!(stderr(&o).contains("missing rank of cp_size 2: 1"), "{}", stderr(&o));
    // A logger that reports rank 0's tokens as the batch's (Megatron-Bridge dense CP, AReaL
    // #1242): the mismatch names the CP factor.
    let tmp = tempfile::tempdir().unwrap();
    let logged = tmp.path().join("logged.json");
    std::fs::write(&logged, r#"{"batch": {"tokens": {"real": 6}, "sequences": {"real": 2}}}"#)
        .unwrap();
    let o = run_expect(
        &["metrics", "--recipe", RECIPE, "--batch", dir, "--expect", logged.to_str().unwrap()],
        1,
    );
    let out = stdout(&o);
    assert!(out.contains("MISMATCH batch.tokens.real"), "{out}");
    assert!(out.contains("logged-tokens: logged × 2 = expected"), "{out}");
    assert!(out.contains("CP factor 2"), "{out}");
}

#[test]
fn metrics_sums_micro_batches_and_scales_by_the_dp_size() {
    let a = "examples/batches/good/hf_bionemo_mock_num_real_seqs.safetensors";
    let b = "examples/batches/good/hf_flatten.safetensors";
    let tokens = |r: &serde_json::Value, k: &str| r["batch"]["tokens"][k].as_u64().unwrap();
    let (ra, rb) = (metrics_record(&["--batch", a]), metrics_record(&["--batch", b]));
    let both = metrics_record(&["--batch", a, "--batch", b, "--grad-acc", "2"]);
    assert_eq!(both["batch"]["micro_batches"], 2);
    for k in ["real", "stored", "valid"] {
        assert_eq!(tokens(&both, k), tokens(&ra, k) + tokens(&rb, k), "{k}");
    }
    let sq =
        |r: &serde_json::Value| r["batch"]["attention"]["useful_sum_squares"].as_u64().unwrap();
    assert_eq!(sq(&both), sq(&ra) + sq(&rb));
    let dp = metrics_record(&["--batch", a, "--batch", b, "--dp-size", "4"]);
    assert_eq!(tokens(&dp, "real"), 4 * tokens(&both, "real"));
    assert_eq!(dp["batch"]["dp_size"], 4);
    // --grad-acc states the micro-batch count: a different count is an error naming both.
    let o = run_expect(&["metrics", "--recipe", RECIPE, "--batch", a, "--grad-acc", "3"], 2);
    assert!(
        stderr(&o).contains("--grad-acc 3 but --batch gives 1 micro-batches"),
        "{}",
        stderr(&o)
    );
    let o = run_expect(&["metrics", "--recipe", RECIPE, "--dp-size", "2"], 2);
    assert!(stderr(&o).contains("describe the batches of --batch"), "{}", stderr(&o));
}

/// `metrics` names the batch file it could not read, and a negative tolerance or step time is
/// named as such (it was an "unexpected argument").
#[test]
fn metrics_errors_name_the_file_and_the_bad_number() {
    let dir = tempfile::tempdir().unwrap();
    let bad = dir.path().join("bad.safetensors");
    std::fs::write(&bad, b"this is not a safetensors file").unwrap();
    let recipe = "golden/tests/recipes/qwen3_8b_sft_seq4096.toml";
    let out = thdcheck([
        "metrics".as_ref(),
        "--recipe".as_ref(),
        recipe.as_ref(),
        "--batch".as_ref(),
        bad.as_os_str(),
    ]);
    assert_eq!(code(&out), 2, "{}", stderr(&out));
    assert!(stderr(&out).contains("bad.safetensors"), "{}", stderr(&out));
    for (flag, value, says) in
        [("--rtol", "-1e-6", "≥ 0"), ("--atol", "-1", "≥ 0"), ("--step-time", "-2", "> 0")]
    {
        let out = thdcheck(["metrics", "--recipe", recipe, flag, value]);
        assert_eq!(code(&out), 2, "{flag} {value}: {}", stderr(&out));
        assert!(stderr(&out).contains(says), "{flag} {value}: {}", stderr(&out));
    }
}

/// The keys a logger's `record` may name (`reader::profile::STEP_RECORD_KEYS`, checked when a
/// profile loads) are exactly the step record's: a key the record gains or loses fails here.
#[test]
fn the_record_keys_a_logger_may_name_are_the_step_records() {
    let o = run_expect(
        &[
            "metrics",
            "--recipe",
            "golden/tests/recipes/qwen3_8b_sft_seq4096.toml",
            "--batch",
            "examples/batches/good/te_thd_cp2.safetensors",
            "--json",
        ],
        0,
    );
    let doc: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    fn leaves(prefix: &str, v: &serde_json::Value, out: &mut Vec<String>) {
        match v.as_object() {
            Some(m) => m.iter().for_each(|(k, v)| leaves(&format!("{prefix}.{k}"), v, out)),
            None => out.push(prefix.to_owned()),
        }
    }
    let mut keys = Vec::new();
    leaves("batch", &doc["record"]["batch"], &mut keys);
    keys.retain(|k| !k.starts_with("batch.not_recomputed."));
    keys.sort();
    let mut want: Vec<String> =
        reader::profile::STEP_RECORD_KEYS.iter().map(|k| (*k).to_owned()).collect();
    want.sort();
    assert_eq!(keys, want);
}
