//! Integration tests of the `thdcheck` binary: every exit code, every dialect, the example
//! batches and the malformed-input corpus, run as a user runs them.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use thdcheck::tensors::write_ints;

#[path = "support/corpus.rs"]
mod corpus;

fn thdcheck<I, S>(args: I) -> Output
where
    I: IntoIterator<Item = S>,
    S: AsRef<std::ffi::OsStr>,
{
    Command::new(env!("CARGO_BIN_EXE_thdcheck"))
        .args(args)
        .current_dir(repo())
        .output()
        .expect("the thdcheck binary runs")
}

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn code(o: &Output) -> i32 {
    o.status.code().expect("exited, not killed")
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// Runs and asserts the exit code, printing both streams on a mismatch; never a panic.
fn run_expect(args: &[&str], want: i32) -> Output {
    let o = thdcheck(args);
    assert_eq!(
        code(&o),
        want,
        "thdcheck {args:?}\nstdout:\n{}\nstderr:\n{}",
        stdout(&o),
        stderr(&o)
    );
    assert!(!stderr(&o).contains("panicked"), "{}", stderr(&o));
    o
}

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

fn temp_batch(dir: &Path, name: &str, tensors: &[(&str, Vec<usize>, Vec<i64>)]) -> PathBuf {
    let p = dir.join(name);
    std::fs::write(&p, write_ints(tensors, &[]).unwrap()).unwrap();
    p
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
    // One run over the whole corpus: every file is reported, none panics, exit 2.
    let o = run_expect(&["check", "--quiet", dir.path().to_str().unwrap()], 2);
    let err = stderr(&o);
    for m in &cases {
        let line = err
            .lines()
            .find(|l| l.contains(&format!("{}{}: ", std::path::MAIN_SEPARATOR, m.name)))
            .unwrap_or_else(|| panic!("no error line for {}:\n{err}", m.name));
        assert!(line.starts_with("thdcheck: error: "), "{line}");
        assert!(line.contains(m.message), "{}: expected `{}` in\n{line}", m.name, m.message);
    }
    assert!(
        stdout(&o).contains(&format!("0 pass, 0 fail, {} unreadable", cases.len())),
        "{}",
        stdout(&o)
    );
    // Listed as expected errors, the same corpus is a passing gate.
    let listed: String = cases.iter().map(|m| format!("\"{}\" = [\"error\"]\n", m.name)).collect();
    std::fs::write(dir.path().join("expected.toml"), listed).unwrap();
    run_expect(&["check", "--quiet", dir.path().to_str().unwrap()], 0);
}

// ---- fuzz: the example Python adapters as real subprocesses ---------------------------------

fn example_adapter(name: &str) -> String {
    format!("adapters/python/examples/{name}.py")
}

fn fuzz_json(args: &[&str], want: i32) -> serde_json::Value {
    let o = run_expect(&[&["fuzz"][..], args].concat(), want);
    serde_json::from_slice(&o.stdout).unwrap_or_else(|e| panic!("{e}: {}", stdout(&o)))
}

#[test]
fn fuzz_packer_passes_the_greedy_packer_and_shrinks_the_one_that_drops_the_overflow() {
    let good = example_adapter("greedy_packer");
    let v = fuzz_json(&["packer", "--json", "--cases", "64", "--", "python3", &good], 0);
    assert_eq!(v["result"], "pass");
    assert_eq!(v["cases"], 64);
    // The efficiency of the passing answers: never below the lower bound or the optimum.
    let e = &v["summary"];
    let n = |k: &str| e[k].as_u64().unwrap_or_else(|| panic!("{k}: {e}"));
    assert!(n("packs") >= n("lower_bound") && n("lower_bound") > 0, "{e}");
    assert!(n("small_packs") >= n("small_optimum") && n("small_cases") > 0, "{e}");

    let bad = example_adapter("greedy_packer_drops_overflow");
    let v = fuzz_json(&["packer", "--json", "--cases", "64", "--", "python3", &bad], 1);
    let f = &v["failure"];
    assert_eq!(f["kind"], "violation");
    assert_eq!(f["checks"], serde_json::json!(["packer-conservation"]));
    assert!(
        f["detail"].as_str().unwrap().contains("lost (neither emitted nor reported dropped)"),
        "{f}"
    );
    // Shrunk: two examples that do not fit together, the second one lost; the capacity and
    // the lengths shrink together, down to 1 (independent lengths left the capacity at 20).
    assert_eq!(f["request"]["examples"].as_array().unwrap().len(), 2, "{f}");
    assert_eq!(f["request"]["capacity"], 1, "{f}");
    assert!(f["replay"].as_str().unwrap().starts_with("echo '{"), "{f}");

    let o = run_expect(&["fuzz", "packer", "--cases", "64", "--", "python3", &bad], 1);
    let out = stdout(&o);
    assert!(out.contains("shrunk to a minimal case"), "{out}");
    assert!(out.contains("violation     packer-conservation: example 1"), "{out}");
    assert!(out.contains("replay        echo '"), "{out}");
}

#[test]
fn fuzz_packer_allows_a_declared_oversize_example_alone_and_flags_it_undeclared() {
    // open-instruct's GRPO pack_sequences keeps an over-long example alone in its own pack: with
    // the protocol's `oversize` that is legitimate; without it, a capacity violation.
    let packer = example_adapter("oversize_packer");
    let v = fuzz_json(&["packer", "--json", "--cases", "256", "--", "python3", &packer], 0);
    assert_eq!(v["result"], "pass", "{v}");
    let v = fuzz_json(
        &["packer", "--json", "--cases", "256", "--", "python3", &packer, "undeclared"],
        1,
    );
    let f = &v["failure"];
    assert_eq!(f["checks"], serde_json::json!(["packer-capacity"]), "{f}");
    assert_eq!(f["request"]["capacity"], 1, "{f}");
}

#[test]
fn fuzz_packer_reads_pieces_of_split_examples_and_catches_pieces_that_do_not_tile() {
    // bionemo's split_samples: an example crossing a pack boundary is split, `[id, start, end]`.
    let packer = example_adapter("split_packer");
    let v = fuzz_json(&["packer", "--json", "--cases", "256", "--", "python3", &packer], 0);
    assert_eq!(v["result"], "pass", "{v}");
    assert_eq!(v["summary"]["packs"], v["summary"]["lower_bound"], "every pack full: {v}");
    let v =
        fuzz_json(&["packer", "--json", "--cases", "256", "--", "python3", &packer, "overlap"], 1);
    assert_eq!(v["failure"]["checks"], serde_json::json!(["packer-conservation"]), "{v}");
    // A piece outside its example is a malformed answer.
    let bad = "import sys, json\nfor l in sys.stdin:\n    r = json.loads(l)\n    \
               ps = [[[e['id'], 0, e['len'] + 1]] for e in r['examples']]\n    \
               print(json.dumps({'thdcheck': 1, 'id': r['id'], 'packs': ps}), flush=True)";
    let v = fuzz_json(&["packer", "--json", "--cases", "8", "--", "python3", "-c", bad], 1);
    assert_eq!(v["failure"]["kind"], "schema", "{v}");
    assert!(v["failure"]["detail"].as_str().unwrap().contains("is not a range"), "{v}");
}

#[test]
fn fuzz_packer_excludes_marked_padding_packs_from_conservation() {
    // open-instruct's loader with drop_last=False repeats a batch so every rank gets as many:
    // marked `padding`, the repeats are legitimate; unmarked, they are duplicates.
    let packer = example_adapter("padding_batch_packer");
    let v = fuzz_json(&["packer", "--json", "--cases", "256", "--", "python3", &packer], 0);
    assert_eq!(v["result"], "pass", "{v}");
    let v =
        fuzz_json(&["packer", "--json", "--cases", "256", "--", "python3", &packer, "unmarked"], 1);
    let f = &v["failure"];
    assert_eq!(f["checks"], serde_json::json!(["packer-conservation"]), "{f}");
    assert!(f["detail"].as_str().unwrap().contains("duplicated"), "{f}");
}

#[test]
fn fuzz_packer_deals_packs_evenly_over_the_ranks_with_dp_size() {
    // With --dp-size the answer says which rank gets each pack; marked padding packs even the
    // counts out (open-instruct's loader), and without them the ranks are uneven.
    let packer = example_adapter("padding_batch_packer");
    let run = |extra: &[&str], want| {
        let mut a = vec!["packer", "--json", "--cases", "128", "--dp-size", "3", "--", "python3"];
        a.push(&packer);
        a.extend(extra);
        fuzz_json(&a, want)
    };
    assert_eq!(run(&[], 0)["result"], "pass");
    let v = run(&["uneven"], 1);
    let f = &v["failure"];
    assert_eq!(f["checks"], serde_json::json!(["packer-dealing"]), "{f}");
    // Minimized to the smallest DP size that shows it (one pack on one of two ranks).
    assert_eq!(f["request"]["dp_size"], 2, "{f}");
    assert!(f["detail"].as_str().unwrap().contains("packs per rank"), "{f}");
}

#[test]
fn fuzz_packer_holds_a_packer_to_each_budget_it_is_given() {
    // One planted bug per budget in budget_packer.py; the correct packer passes each one.
    let packer = example_adapter("budget_packer");
    for (flags, bug, rule_text) in [
        (&["--pad-sequences-to-multiple-of", "4"][..], "real-lengths", "tokens on branch 0"),
        (&["--max-seqs-per-pack", "2"][..], "no-seq-limit", "items"),
        (&["--pairs"][..], "chosen-only", "tokens on branch 1"),
    ] {
        let args = |extra: &[&'static str]| {
            let mut a = vec!["packer", "--json", "--cases", "128"];
            a.extend(flags);
            a.extend(["--", "python3", packer.as_str()]);
            a.extend(extra);
            a
        };
        assert_eq!(fuzz_json(&args(&[]), 0)["result"], "pass", "{flags:?}");
        let v = fuzz_json(&args(&[bug]), 1);
        let f = &v["failure"];
        assert_eq!(f["checks"], serde_json::json!(["packer-capacity"]), "{bug}: {f}");
        assert!(f["detail"].as_str().unwrap().contains(rule_text), "{bug}: {f}");
        // Shrunk to one pack's worth: one example, or the limit plus one.
        assert!(f["request"]["examples"].as_array().unwrap().len() <= 3, "{bug}: {f}");
    }
}

#[test]
fn fuzz_packer_accepts_a_refusal_only_of_a_request_that_cannot_be_packed() {
    // bionemo's TokenPackingDataset raises on an over-long example: a refusal, accepted for a
    // request holding one; refusing a request that fits loses its examples.
    let packer = example_adapter("budget_packer");
    let v =
        fuzz_json(&["packer", "--json", "--cases", "128", "--", "python3", &packer, "refuse"], 0);
    assert_eq!(v["result"], "pass", "{v}");
    let v = fuzz_json(
        &[
            "packer",
            "--json",
            "--cases",
            "128",
            "--fitting-only",
            "--pad-sequences-to-multiple-of",
            "8",
            "--",
            "python3",
            &packer,
            "refuse",
        ],
        0,
    );
    assert_eq!(v["result"], "pass", "{v}");
    assert!(v["summary"]["packs"].as_u64().unwrap() > 128, "fitting-only cases get packed: {v}");
    let v = fuzz_json(
        &["packer", "--json", "--cases", "128", "--", "python3", &packer, "refuse-all"],
        1,
    );
    let f = &v["failure"];
    assert_eq!(f["checks"], serde_json::json!(["packer-conservation"]), "{f}");
    assert_eq!(f["request"]["examples"], serde_json::json!([]), "{f}");
    assert!(f["response"].as_str().unwrap().contains("rejected"), "{f}");
    // Under --ignore, a passing run counts what it let pass: the refusals of packable requests
    // (those of a request with an over-long example are accepted, not ignored).
    let v = fuzz_json(
        &[
            "packer",
            "--json",
            "--cases",
            "32",
            "--ignore",
            "packer-conservation",
            "--",
            "python3",
            &packer,
            "refuse-all",
        ],
        0,
    );
    let n = v["ignored"]["violation packer-conservation"].as_u64().unwrap_or(0);
    assert!((1..32).contains(&n), "{v}");
}

#[test]
fn fuzz_packer_session_keeps_a_streaming_packer_s_state_and_catches_a_dropped_carry() {
    let good = example_adapter("streaming_packer");
    let v =
        fuzz_json(&["packer", "--session", "--json", "--cases", "128", "--", "python3", &good], 0);
    assert_eq!(v["result"], "pass", "{v}");
    // open-instruct #1472 class: the carry is forgotten at the end of an epoch. Shrunk to one
    // 1-token example in one epoch: start, push, end_epoch, finish.
    let bad = example_adapter("streaming_packer_drops_carry");
    let v =
        fuzz_json(&["packer", "--session", "--json", "--cases", "128", "--", "python3", &bad], 1);
    let f = &v["failure"];
    assert_eq!(f["checks"], serde_json::json!(["packer-conservation"]), "{f}");
    let ops: Vec<&str> =
        f["requests"].as_array().unwrap().iter().map(|r| r["op"].as_str().unwrap()).collect();
    assert_eq!(ops, ["start", "push", "end_epoch", "finish"], "{f}");
    assert_eq!(f["requests"][0]["capacity"], 1, "{f}");
    assert_eq!(f["requests"][0]["thdcheck"], 2, "{f}");
    assert_eq!(f["requests"][1]["examples"], serde_json::json!([{"id": 0, "len": 1}]), "{f}");
    assert!(f["replay"].as_str().unwrap().starts_with("printf"), "{f}");
    // A one-shot request sent to a session packer says so.
    let v = fuzz_json(&["packer", "--json", "--cases", "4", "--", "python3", &good], 1);
    assert_eq!(v["failure"]["kind"], "adapter-error", "{v}");
    assert!(v["failure"]["detail"].as_str().unwrap().contains("--session"), "{v}");
}

#[test]
fn fuzz_packer_session_checks_first_fit_per_call() {
    // A session packer that packs each push first fit on its own: two packs of one call never
    // fit together, but packs of different pushes may; per call, it is first fit.
    let script = "import sys\nsys.path.insert(0, 'adapters/python')\n\
                  from thdcheck_adapter import serve_packer_session\n\
                  class P:\n    def __init__(self, capacity, seed): self.c = capacity\n    \
                  def push(self, ex):\n        packs, loads, dropped = [], [], []\n        \
                  for e in ex:\n            if e['len'] > self.c: dropped.append(e['id']); continue\n            \
                  k = next((k for k, l in enumerate(loads) if l + e['len'] <= self.c), None)\n            \
                  if k is None: packs.append([]); loads.append(0); k = len(packs) - 1\n            \
                  packs[k].append(e['id']); loads[k] += e['len']\n        \
                  return {'packs': packs, 'dropped': dropped}\n    \
                  def finish(self): return []\n\
                  serve_packer_session(P)\n";
    let first_fit = |adapter: &[&str], want| {
        let head = ["packer", "--session", "--first-fit", "--json", "--cases", "256", "--"];
        fuzz_json(&[&head[..], adapter].concat(), want)
    };
    assert_eq!(first_fit(&["python3", "-c", script], 0)["result"], "pass");
    // The streaming next-fit packer is not first fit: caught within one call.
    let next_fit = example_adapter("streaming_packer");
    let v = first_fit(&["python3", &next_fit], 1);
    assert_eq!(v["failure"]["checks"], serde_json::json!(["packer-first-fit"]), "{v}");
    let detail = v["failure"]["detail"].as_str().unwrap();
    assert!(detail.contains("among the packs of call"), "{v}");
    // The call is shown as the JSON the adapter read, not as Rust's `Push { .. Single { .. } }`.
    assert!(detail.contains(r#""examples":[{"#) && !detail.contains("Example {"), "{detail}");
}

/// The Python helper seeds the global `random` from the request's seed before every call, so a
/// packer that shuffles with it (never seeding it itself) answers the same request the same
/// way: packer-deterministic holds, and the shrunk case replays.
#[test]
fn fuzz_packer_replays_a_shuffle_of_the_global_random() {
    let shuffles = example_adapter("global_shuffle_packer");
    let v = fuzz_json(&["packer", "--json", "--cases", "64", "--", "python3", &shuffles], 0);
    assert_eq!((v["result"].as_str(), v["cases"].as_u64()), (Some("pass"), Some(64)), "{v}");
}

#[test]
fn fuzz_loss_accepts_a_loud_refusal_of_a_batch_with_nothing_to_learn_only() {
    // AReaL asserts that the global loss weight is positive: an error on a batch without a
    // valid label is a refusal, not a wrong number; an error on any other batch still fails.
    let dir = tempfile::tempdir().unwrap();
    let write = |name: &str, when: &str| {
        let p = dir.path().join(name);
        let body = format!(
            "import os, sys\nsys.path.insert(0, {examples:?})\nimport cp_loss\n\
             def loss(ranks, cp):\n    out = cp_loss.loss(ranks, cp)\n    \
             if {when}:\n        raise AssertionError('total loss weight must be positive')\n    \
             return out\ncp_loss.serve_loss(loss)\n",
            examples = std::fs::canonicalize(concat!(
                env!("CARGO_MANIFEST_DIR"),
                "/../adapters/python/examples"
            ))
            .unwrap(),
        );
        std::fs::write(&p, body).unwrap();
        p.to_str().unwrap().to_owned()
    };
    let refuses_empty = write("refuses_empty.py", "out['n_valid_tokens'] == 0");
    let v = fuzz_json(&["loss", "--json", "--cases", "64", "--", "python3", &refuses_empty], 0);
    assert_eq!(v["result"], "pass", "{v}");
    let refuses_one = write("refuses_one.py", "out['n_valid_tokens'] == 1");
    let v = fuzz_json(&["loss", "--json", "--cases", "64", "--", "python3", &refuses_one], 1);
    assert_eq!(v["failure"]["kind"], "adapter-error", "{v}");
}

#[test]
fn fuzz_logger_passes_the_correct_logger_and_names_each_seed_bug() {
    let good = example_adapter("logger");
    let v = fuzz_json(&["logger", "--json", "--cases", "64", "--", "python3", &good], 0);
    assert_eq!(v["result"], "pass", "{v}");
    // Each buggy logger: the check that names its bug, shrunk to a one-document step.
    // The BSHD fallback: one document per row, no offsets.
    let v = fuzz_json(
        &["logger", "--json", "--cases", "32", "--layout", "bshd", "--", "python3", &good],
        0,
    );
    assert_eq!(v["result"], "pass", "{v}");
    let palm = example_adapter("logger_pack_length_squared");
    let v = fuzz_json(
        &["logger", "--json", "--cases", "32", "--layout", "bshd", "--", "python3", &palm],
        1,
    );
    assert_eq!(v["failure"]["request"]["layout"], "bshd", "{v}");
    assert_eq!(v["failure"]["checks"][0], "logged-flops", "{v}");
    for (name, check, key) in [
        ("logger_pack_length_squared", "logged-flops", "attention.useful_sum_squares"),
        ("logger_mock_counted_as_useful", "logged-tokens", "tokens.real"),
        ("logger_rank_local_counts", "logged-tokens", "tokens.real"),
    ] {
        let bad = example_adapter(name);
        let v = fuzz_json(&["logger", "--json", "--cases", "64", "--", "python3", &bad], 1);
        let f = &v["failure"];
        assert_eq!(f["kind"], "violation", "{name}: {f}");
        assert_eq!(f["checks"][0], check, "{name}: {f}");
        assert!(f["detail"].as_str().unwrap().contains(&format!("`{key}`")), "{name}: {f}");
        let mbs = f["request"]["micro_batches"].as_array().unwrap();
        assert_eq!(mbs.len(), 1, "{name}: {f}");
        assert!(mbs[0]["cu_seq_lens_q"].as_array().unwrap().len() <= 3, "{name}: {f}");
    }
    // A key that is not in the record is a schema failure, not a silent pass.
    let typo = "import json,sys\nfor l in sys.stdin:\n r=json.loads(l)\n print(json.dumps({'thdcheck':1,'id':r['id'],'logged':{'tokens.reel':1}}),flush=True)";
    let script = typo.replace("\\n", "\n");
    let v = fuzz_json(&["logger", "--json", "--cases", "4", "--", "python3", "-c", &script], 1);
    assert_eq!(v["failure"]["kind"], "schema", "{v}");
    assert!(
        v["failure"]["detail"]
            .as_str()
            .unwrap()
            .contains("`logged.tokens.reel` is not a record key")
    );
}

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
    // A pack of one sample has an all-ones mask: without the profile it is a 0/1 mask beside
    // position-id restarts, which the attention implementations would read instead.
    let v = fuzz_json(
        &["collator", "--json", "--cases", "64", "--", "python3", &collator, "axolotl"],
        1,
    );
    assert_eq!(v["failure"]["checks"][0], "mask", "{v}");
    assert!(
        v["failure"]["detail"].as_str().unwrap().contains("attention_mask = \"sample-numbers\""),
        "{v}"
    );
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
fn fuzz_reports_crash_hang_garbage_schema_and_adapter_errors_as_such() {
    let cases: [(&str, &str, &[&str]); 5] = [
        ("crash", "import sys\nsys.stdin.readline()\nsys.exit(3)", &["--max-shrink-runs", "2"]),
        (
            "hang",
            "import sys, time\nsys.stdin.readline()\ntime.sleep(30)",
            &["--timeout-ms", "200", "--startup-timeout-ms", "200"],
        ),
        ("not-json", "import sys\nfor l in sys.stdin: print('hello', flush=True)", &[]),
        (
            "schema",
            "import sys, json\nfor l in sys.stdin: print(json.dumps({'thdcheck': 2, 'id': 0}), flush=True)",
            &[],
        ),
        (
            "adapter-error",
            "import sys\nsys.path.insert(0, 'adapters/python')\nfrom thdcheck_adapter import serve_packer\n\
             def p(lens, cap, seed): raise ValueError('boom')\nserve_packer(p)",
            &[],
        ),
    ];
    for (kind, script, extra) in cases {
        let args =
            [&["packer", "--json", "--cases", "4"][..], extra, &["--", "python3", "-c", script]]
                .concat();
        let v = fuzz_json(&args, 1);
        assert_eq!(v["failure"]["kind"], kind, "{v}");
    }
    let o = run_expect(&["fuzz", "packer", "--", "/nonexistent/adapter"], 2);
    assert!(
        stderr(&o).contains("cannot start the adapter `/nonexistent/adapter`"),
        "{}",
        stderr(&o)
    );
    run_expect(&["fuzz", "packer"], 2);
}

/// The first request waits --startup-timeout-ms, later ones --timeout-ms. Nothing here depends
/// on the machine's speed: the start-up (6 s of sleep) outlasts the per-request timeout (5 s)
/// however fast the machine, a correct packer answers well within 5 s however slow, and a
/// 1 ms allowance is a hang either way; the hang is run once (not replayed, no scan).
#[test]
fn fuzz_gives_the_first_request_the_startup_allowance() {
    // 6 s of start-up (an `import torch` under load), then a correct packer.
    let slow = "import time, runpy\ntime.sleep(6)\n\
                runpy.run_path('adapters/python/examples/greedy_packer.py', run_name='__main__')";
    let base = ["packer", "--json", "--cases", "16", "--timeout-ms", "5000"];
    let v = fuzz_json(&[&base[..], &["--", "python3", "-c", slow]].concat(), 0);
    assert_eq!(v["result"], "pass", "{v}");
    let v = fuzz_json(
        &[&base[..], &["--startup-timeout-ms", "1", "--", "python3", "-c", slow]].concat(),
        1,
    );
    let f = &v["failure"];
    assert_eq!(f["kind"], "hang", "{v}");
    assert!(f["detail"].as_str().unwrap().contains("--startup-timeout-ms"), "{f}");
    assert_eq!((v["runs"].as_u64(), v["scan_runs"].as_u64()), (Some(1), Some(0)), "{v}");
    let o = run_expect(&["fuzz", "--help"], 0);
    assert!(stdout(&o).contains("--startup-timeout-ms"), "{}", stdout(&o));
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

// ---- metrics: the golden record and the logger gate ------------------------------------------

const RECIPE: &str = "golden/tests/recipes/esm2_t6_8m_l0_sanity_cp.toml";

fn metrics_record(extra: &[&str]) -> serde_json::Value {
    let o = run_expect(&[&["metrics", "--recipe", RECIPE, "--json"][..], extra].concat(), 0);
    serde_json::from_slice::<serde_json::Value>(&o.stdout).unwrap()["record"].clone()
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
    let rank1 = thdcheck::tensors::BatchFile::read(&shards.join("rank1.safetensors")).unwrap();
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

/// `selfcheck` holds for every seed, not only the default one. These seeds once failed the f32
/// FlashAttention rule: 3, 20, 30, 35, 39 and 2^64-1 on `mqa_odd_dim` (head dim 111: one
/// running f32 sum over the depth), 37 on `gqa_odd_dim`, 129 on `keys_empty` (the exp
/// polynomial added 1 before the small terms, and `o · (1/l)` rounded twice).
#[test]
fn selfcheck_holds_on_the_seeds_that_once_failed() {
    for seed in ["0", "3", "20", "30", "35", "37", "39", "129", "18446744073709551615"] {
        let out = thdcheck(["selfcheck", "--seed", seed]);
        assert_eq!(code(&out), 0, "seed {seed}:\n{}{}", stdout(&out), stderr(&out));
    }
}

/// `selfcheck` runs every invariant driver of the property suites on thd's pipelines, and with
/// `--zoo` every planted bug through its driver: each must be caught by the invariant the
/// catalogue names.
#[test]
fn selfcheck_runs_every_driver_and_catches_every_planted_bug() {
    let out = thdcheck(["selfcheck", "--zoo", "--cases", "8"]);
    let text = stdout(&out);
    assert_eq!(code(&out), 0, "{text}{}", stderr(&out));
    for driver in ["run_layout", "run_attention", "run_isolation", "run_loss", "run_cp_loss"] {
        assert!(text.contains(driver), "{driver} missing:\n{text}");
    }
    for entry in properties::zoo::CATALOGUE {
        let line = text
            .lines()
            .find(|l| l.split_whitespace().next() == Some(entry.name))
            .unwrap_or_else(|| panic!("{} missing:\n{text}", entry.name));
        assert!(line.ends_with("caught"), "{line}");
    }
    assert!(!text.contains("FAIL"), "{text}");
    let zero = thdcheck(["selfcheck", "--cases", "0"]);
    assert_eq!(code(&zero), 2, "--cases 0 is a usage error:\n{}", stderr(&zero));
    // The same for fuzz, which said "every invariant held" after zero cases (issue 15).
    let zero = thdcheck(["fuzz", "packer", "--cases", "0", "--", "python3", "-c", "pass"]);
    assert_eq!(code(&zero), 2, "fuzz --cases 0 is a usage error:\n{}", stderr(&zero));
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

/// The real-code corpus (`corpus/real/`, what the upstream functions returned at pinned
/// commits): every file gets the verdict its record derives from the stack's contract.
#[test]
fn real_corpus_gets_its_recorded_verdicts() {
    let o = run_expect(&["check", "--quiet", "corpus/real/batches"], 0);
    assert!(stdout(&o).contains("every verdict as expected"), "{}", stdout(&o));
}

/// `expected.toml` of the real corpus is what its records say, not an edit by hand: every
/// record's verdict (a group's for its rank files) is the line `generate.py` writes.
#[test]
fn real_corpus_expected_toml_matches_its_records() {
    let dir = repo().join("corpus/real/batches");
    let mut records = Vec::new();
    let mut stack = vec![dir.clone()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                stack.push(p);
            } else if p.extension().is_some_and(|x| x == "json") {
                let v: serde_json::Value =
                    serde_json::from_str(&std::fs::read_to_string(&p).unwrap()).unwrap();
                for key in ["repo", "commit", "function", "why", "expected", "path"] {
                    assert!(!v[key].is_null(), "{}: no `{key}`", p.display());
                }
                records.push(v);
            }
        }
    }
    assert!(records.len() >= 40, "{} records", records.len());
    let toml: toml::Table =
        std::fs::read_to_string(dir.join("expected.toml")).unwrap().parse().unwrap();
    let mut listed = 0;
    for r in &records {
        let path = r["path"].as_str().unwrap();
        match &r["expected"] {
            serde_json::Value::String(s) if s == "pass" => {
                assert!(
                    !toml.contains_key(path),
                    "{path}: record says pass, expected.toml lists it"
                );
            }
            want => {
                let mut want: Vec<String> = match want {
                    serde_json::Value::String(s) => vec![s.clone()],
                    v => v.as_array().unwrap().iter().map(|x| x.as_str().unwrap().into()).collect(),
                };
                want.sort();
                let got: Vec<String> = toml[path]
                    .as_array()
                    .unwrap_or_else(|| panic!("{path}: not in expected.toml"))
                    .iter()
                    .map(|x| x.as_str().unwrap().into())
                    .collect();
                assert_eq!(got, want, "{path}");
                listed += 1;
            }
        }
    }
    assert_eq!(listed, toml.len(), "expected.toml lists files no record expects to fail");
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

/// Whether process `pid` is gone (or a zombie nobody waits for any more), waiting up to 10 s
/// for it to go (a loaded machine schedules the kill late; a gone process returns at once).
fn gone(pid: u32) -> bool {
    for _ in 0..500 {
        match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
            Err(_) => return true,
            Ok(s) if s.rsplit(')').next().is_some_and(|r| r.trim_start().starts_with('Z')) => {
                return true;
            }
            Ok(_) => std::thread::sleep(std::time::Duration::from_millis(20)),
        }
    }
    false
}

/// An adapter that spawns a child (writing its pid to `pidfile`), answers its first request
/// (a correct packer), then hangs on the next one: it hangs however slowly the machine starts
/// Python, since the first request has the start-up allowance and the hang comes after it.
fn forking_hanger(pidfile: &Path) -> String {
    format!(
        "import subprocess\np = subprocess.Popen(['sleep', '60'])\n\
         open({:?}, 'w').write(str(p.pid))\n{SINGLETON_PACKER}import time\n\
         r = json.loads(sys.stdin.readline())\nreply(r, **answer(r))\n\
         sys.stdin.readline()\ntime.sleep(60)",
        pidfile.display().to_string()
    )
}

/// The pid the adapter wrote to `pidfile`, waiting up to 60 s for it (Python starts in seconds
/// on a loaded machine).
fn read_pid(pidfile: &Path) -> u32 {
    for _ in 0..3000 {
        if let Ok(s) = std::fs::read_to_string(pidfile)
            && let Ok(pid) = s.trim().parse()
        {
            return pid;
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    panic!("the adapter never wrote {}", pidfile.display());
}

/// A hang kills the adapter's whole process group: what it spawned does not outlive thdcheck.
/// The hang is not replayed (it would cost a second timeout): one run in all. The start-up
/// allowance is generous and the per-request timeout short: the adapter answers its first
/// request, so the hang is the second request's whatever the machine's speed (a 300 ms
/// allowance once timed out before a loaded machine's Python had written its child's pid).
#[test]
fn fuzz_hang_kills_what_the_adapter_spawned_and_costs_one_timeout() {
    let dir = tempfile::tempdir().unwrap();
    let pidfile = dir.path().join("child.pid");
    let script = forking_hanger(&pidfile);
    let v = fuzz_json(
        &[
            "packer",
            "--json",
            "--cases",
            "4",
            "--timeout-ms",
            "300",
            "--startup-timeout-ms",
            "120000",
            "--",
            "python3",
            "-c",
            &script,
        ],
        1,
    );
    assert_eq!(v["failure"]["kind"], "hang", "{v}");
    assert!(v["failure"]["detail"].as_str().unwrap().contains("within 300 ms"), "{v}");
    assert_eq!(v["runs"], 1, "a hang is run once: {v}");
    assert!(gone(read_pid(&pidfile)), "the adapter's child survived the hang");
}

/// Sends `sig` to a thdcheck this test started and waits for it: it must not exit successfully.
#[cfg(unix)]
fn signal_and_wait(thdcheck: &mut std::process::Child, sig: libc::c_int) {
    // SAFETY: a signal to the process this test started.
    unsafe {
        libc::kill(thdcheck.id() as i32, sig);
    }
    let status = thdcheck.wait().unwrap();
    assert!(!status.success(), "thdcheck exited successfully after signal {sig}");
}

/// SIGTERM to thdcheck takes the adapter's process group with it.
#[test]
#[cfg(unix)]
fn fuzz_sigterm_kills_the_adapter_group() {
    let dir = tempfile::tempdir().unwrap();
    let pidfile = dir.path().join("child.pid");
    let script = forking_hanger(&pidfile);
    let mut thdcheck = Command::new(env!("CARGO_BIN_EXE_thdcheck"))
        .args(["fuzz", "packer", "--quiet", "--timeout-ms", "120000", "--"])
        .args(["python3", "-c", &script])
        .current_dir(repo())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let child = read_pid(&pidfile);
    signal_and_wait(&mut thdcheck, libc::SIGTERM);
    assert!(gone(child), "the adapter's child survived SIGTERM to thdcheck");
}

/// Garbage is named as what it is: an endless line is cut at --max-line-bytes (`too-long`,
/// never buffered without bound), a non-UTF-8 line is `not-json`, a batch value of the wrong
/// type breaks the protocol (`schema`), not an invariant.
#[test]
fn fuzz_names_too_long_non_utf8_and_wrong_typed_answers() {
    let endless = "import sys\nsys.stdin.readline()\nwhile True: sys.stdout.write('x' * 65536)";
    let v = fuzz_json(
        &[
            "packer",
            "--json",
            "--cases",
            "2",
            "--max-line-bytes",
            "100000",
            "--",
            "python3",
            "-c",
            endless,
        ],
        1,
    );
    assert_eq!(v["failure"]["kind"], "too-long", "{v}");
    let binary = "import sys\nfor l in sys.stdin: sys.stdout.buffer.write(b'\\xff\\xfe{}\\n'); sys.stdout.flush()";
    let v = fuzz_json(&["packer", "--json", "--cases", "2", "--", "python3", "-c", binary], 1);
    assert_eq!(v["failure"]["kind"], "not-json", "{v}");
    assert!(v["failure"]["detail"].as_str().unwrap().contains("not UTF-8"), "{v}");
    let typed = "import sys, json\nfor l in sys.stdin:\n    r = json.loads(l)\n    \
                 print(json.dumps({'thdcheck': 1, 'id': r['id'], 'batch': {'input_ids': ['a']}}), flush=True)";
    let v = fuzz_json(&["collator", "--json", "--cases", "2", "--", "python3", "-c", typed], 1);
    assert_eq!(v["failure"]["kind"], "schema", "{v}");
}

/// An adapter that crashes on its 5th request: reported as a crash with its exit status, and
/// the replay sends every request the crashed process had received, so it crashes again.
#[test]
fn fuzz_stateful_crash_is_a_crash_with_a_replay_that_reproduces_it() {
    let script = "import sys\nsys.path.insert(0, 'adapters/python')\n\
                  from thdcheck_adapter import serve_packer\nn = [0]\n\
                  def p(lens, cap, seed):\n    n[0] += 1\n    \
                  if n[0] == 5: sys.exit(7)\n    \
                  fit = [i for i, n in enumerate(lens) if n <= cap]\n    \
                  return [[i] for i in fit], [i for i in range(len(lens)) if i not in fit]\n\
                  serve_packer(p)";
    let v = fuzz_json(&["packer", "--json", "--cases", "32", "--", "python3", "-c", script], 1);
    let f = &v["failure"];
    assert_eq!(f["kind"], "crash", "{v}");
    assert!(f["detail"].as_str().unwrap().contains("exit status: 7"), "{v}");
    let replay = f["replay"].as_str().unwrap();
    assert!(replay.contains(" < "), "{replay}");
    let o = Command::new("sh").args(["-c", replay]).current_dir(repo()).output().unwrap();
    assert_eq!(o.status.code(), Some(7), "the replay does not reproduce the crash: {replay}");
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

/// Every distinct failing class is reported; `--ignore` the first and the next one is shrunk on
/// its own. The planted mask-from-ids collator does not pad, so with `--pad-to-multiple-of 8` it
/// breaks two rules: `mask` (on a token 0) and `pad-multiple`.
#[test]
fn fuzz_reports_every_failing_class_and_ignore_shrinks_the_next() {
    let bad = example_adapter("mask_from_ids_collator");
    let base = ["collator", "--json", "--cases", "64", "--pad-to-multiple-of", "8"];
    let v = fuzz_json(&[&base[..], &["--", "python3", &bad]].concat(), 1);
    let first = v["failure"]["checks"][0].as_str().unwrap().to_owned();
    let also: Vec<String> = v["also_failing"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a["class"].as_str().unwrap().to_owned())
        .collect();
    let other = if first == "mask" { "pad-multiple" } else { "mask" };
    assert!(also.contains(&format!("violation {other}")), "{v}");
    let v = fuzz_json(&[&base[..], &["--ignore", &first, "--", "python3", &bad]].concat(), 1);
    assert_eq!(v["failure"]["checks"], serde_json::json!([other]), "{v}");
}

/// `--first-failure` stops at the first class (no scan of fresh cases, 0 scan runs);
/// `--also-failing N` bounds the scan to N fresh cases; the other class is still found within 8.
#[test]
fn fuzz_first_failure_skips_the_scan_and_also_failing_bounds_it() {
    let bad = example_adapter("mask_from_ids_collator");
    let base = ["collator", "--json", "--cases", "64", "--pad-to-multiple-of", "8"];
    let v = fuzz_json(&[&base[..], &["--first-failure", "--", "python3", &bad]].concat(), 1);
    assert_eq!(v["scan_runs"], 0, "{v}");
    assert!(v.get("also_failing").is_none_or(|a| a.as_array().is_some_and(Vec::is_empty)), "{v}");
    let v = fuzz_json(&[&base[..], &["--also-failing", "8", "--", "python3", &bad]].concat(), 1);
    let scanned = v["scan_runs"].as_u64().unwrap();
    assert!((1..=8).contains(&scanned), "{v}");
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

// ---- fuzz loss and cp-split: CP-LOSS, TOKENS-CP and CP-SHARD on real subprocesses -------------

/// Logits rows in every request of a shrunk loss case.
fn loss_rows(failure: &serde_json::Value) -> usize {
    let ranks = failure["request"]["ranks"].as_array().unwrap();
    ranks.iter().map(|r| r["logits"].as_array().unwrap().len()).sum()
}

#[test]
fn fuzz_loss_passes_the_reduced_sums_and_catches_the_mean_of_rank_means() {
    let good = example_adapter("cp_loss");
    let v = fuzz_json(&["loss", "--json", "--cases", "48", "--", "python3", &good], 0);
    assert_eq!((v["result"].as_str(), v["cases"].as_u64()), (Some("pass"), Some(48)), "{v}");

    // The mean of per-rank means: wrong on ranks with unequal counts (cp-loss-reduction), and
    // NaN as soon as a rank has no valid label (cp-loss-finite): two rules, each shrunk alone.
    let bad = example_adapter("cp_loss_mean_of_rank_means");
    let v = fuzz_json(&["loss", "--json", "--cases", "48", "--", "python3", &bad], 1);
    let f = &v["failure"];
    assert_eq!(
        (f["kind"].as_str(), &f["checks"]),
        (Some("violation"), &serde_json::json!(["cp-loss-reduction"])),
        "{v}"
    );
    assert!(f["request"]["cp_size"].as_u64().unwrap() >= 2, "{f}");
    let also = serde_json::to_string(&v["also_failing"]).unwrap();
    assert!(also.contains("cp-loss-finite"), "{v}");
    let ignore = ["--ignore", "cp-loss-reduction"];
    let v = fuzz_json(
        &[&["loss", "--json", "--cases", "48"][..], &ignore, &["--", "python3", &bad]].concat(),
        1,
    );
    let f = &v["failure"];
    assert_eq!(f["checks"], serde_json::json!(["cp-loss-finite"]), "{v}");
    assert!(f["detail"].as_str().unwrap().contains("never NaN"), "{f}");
    assert!(loss_rows(f) <= 4, "not shrunk: {f}");
    assert!(f.get("requests").is_none(), "shrunk to one CP size: {f}");

    // Without the NaN (empty ranks skipped), the unequal counts still weigh the ranks wrongly.
    let skip_empty = "import sys\nsys.path.insert(0, 'adapters/python')\n\
                      sys.path.insert(0, 'adapters/python/examples')\n\
                      from thdcheck_adapter import serve_loss\nfrom cp_loss import local_sums\n\
                      def loss(ranks, cp):\n    parts = [local_sums(r['logits'], r['labels']) for r in ranks]\n    \
                      means = [n / c for n, c in parts if c]\n    \
                      return {'loss': sum(means) / len(means) if means else 0.0, 'parts': parts}\n\
                      serve_loss(loss)";
    let v = fuzz_json(&["loss", "--json", "--cases", "48", "--", "python3", "-c", skip_empty], 1);
    let f = &v["failure"];
    assert_eq!(f["checks"], serde_json::json!(["cp-loss-reduction"]), "{v}");
    assert!(f["detail"].as_str().unwrap().contains("Σ_r nll_r / Σ_r count_r"), "{f}");
    assert!(f["request"]["cp_size"].as_u64().unwrap() >= 2, "{f}");
    assert!(loss_rows(f) <= 8, "not shrunk: {f}");

    let o = run_expect(
        &[&["fuzz", "loss", "--cases", "48"][..], &ignore, &["--", "python3", &bad]].concat(),
        1,
    );
    let out = stdout(&o);
    assert!(out.contains("violation     cp-loss-finite: the reported loss is finite"), "{out}");
    assert!(out.contains("replay        echo '"), "{out}");
}

/// One CP loss with three bugs: each rank drops its last valid target (the parts miss the
/// global count), a rank with nothing valid gives NaN, and the loss is the mean of the ranks'
/// means. Each is a rule of its own: `--ignore` the class shrunk to shrink the next on its own,
/// and the three ignored pass.
#[test]
fn fuzz_loss_shrinks_each_cp_loss_rule_on_its_own() {
    let bad = example_adapter("cp_loss_three_bugs");
    let fuzz = |ignored: &[String]| {
        let mut args: Vec<&str> = vec!["loss", "--json", "--cases", "48"];
        for i in ignored {
            args.extend(["--ignore", i.as_str()]);
        }
        args.extend(["--", "python3", &bad]);
        fuzz_json(&args, if ignored.len() == 3 { 0 } else { 1 })
    };
    let mut ignored: Vec<String> = Vec::new();
    while ignored.len() < 3 {
        let v = fuzz(&ignored);
        let f = &v["failure"];
        let checks = f["checks"].as_array().unwrap();
        let class = checks[0].as_str().unwrap().to_owned();
        assert!(!ignored.contains(&class), "{class} was ignored: {v}");
        // What is ignored is not reported. (The minimal case of the dropped target is one valid
        // label, dropped: that rank is then empty, and its NaN is reported next to it.)
        assert!(checks.iter().all(|c| !ignored.iter().any(|i| c == i.as_str())), "{v}");
        let detail = f["detail"].as_str().unwrap();
        match class.as_str() {
            "cp-loss-parts" => {
                assert!(detail.contains("counts add up to the global count"), "{f}");
                assert_eq!(f["request"]["cp_size"], 1, "{f}");
                assert!(loss_rows(f) <= 2, "not shrunk: {f}");
            }
            "cp-loss-finite" => {
                assert!(detail.contains("never NaN") && detail.contains("got NaN"), "{f}");
                assert!(loss_rows(f) <= 2, "not shrunk: {f}");
            }
            "cp-loss-reduction" => {
                assert!(detail.contains("of the parts reported"), "{f}");
                assert!(f["request"]["cp_size"].as_u64().unwrap() >= 2, "{f}");
                assert!(loss_rows(f) <= 8, "not shrunk: {f}");
            }
            other => panic!("{other}: not a cp-loss rule: {v}"),
        }
        ignored.push(class);
    }
    let v = fuzz(&ignored);
    assert_eq!(v["result"], "pass", "{v}");
}

/// AReaL #1242's class: the loss is right, but the count logged is one rank's.
#[test]
fn fuzz_loss_catches_a_valid_token_count_from_one_rank() {
    let bad = example_adapter("cp_loss_rank_local_counts");
    let v = fuzz_json(&["loss", "--json", "--cases", "48", "--", "python3", &bad], 1);
    let f = &v["failure"];
    assert_eq!(f["checks"], serde_json::json!(["tokens-cp"]), "{v}");
    assert!(f["detail"].as_str().unwrap().contains("n_valid_tokens is the global count"), "{f}");
    assert_eq!(f["request"]["cp_size"], 2, "{f}");
    assert!(loss_rows(f) <= 4, "not shrunk: {f}");
}

#[test]
fn fuzz_cp_split_passes_the_zigzag_and_catches_labels_rolled_after_the_split() {
    let good = example_adapter("cp_split");
    let v = fuzz_json(&["cp-split", "--json", "--cases", "64", "--", "python3", &good], 0);
    assert_eq!((v["result"].as_str(), v["cases"].as_u64()), (Some("pass"), Some(64)), "{v}");

    let bad = example_adapter("cp_split_roll_after_split");
    let v = fuzz_json(&["cp-split", "--json", "--cases", "64", "--", "python3", &bad], 1);
    let f = &v["failure"];
    assert_eq!(f["checks"], serde_json::json!(["cp-labels"]), "{v}");
    assert!(
        f["detail"].as_str().unwrap().contains("rolled on the full sequence, then split"),
        "{f}"
    );
    assert!(f["request"]["cp_size"].as_u64().unwrap() >= 2, "{f}");
    assert!(f["request"]["input_ids"].as_array().unwrap().len() <= 8, "not shrunk: {f}");

    // A splitter that refuses every layout, and one that truncates a slot that does not split.
    let helper = "import sys\nsys.path.insert(0, 'adapters/python')\n\
                  sys.path.insert(0, 'adapters/python/examples')\n\
                  from thdcheck_adapter import serve_cp_split\nimport cp_split as c\n";
    let refuse = format!("{helper}def no(b, cp): raise ValueError('no')\nserve_cp_split(no)");
    let v = fuzz_json(&["cp-split", "--json", "--cases", "16", "--", "python3", "-c", &refuse], 1);
    assert_eq!(v["failure"]["checks"], serde_json::json!(["cp-split-accepted"]), "{v}");
    let truncate = format!(
        "{helper}def zigzag(cu, cp, r):\n    \
         h = [(cu[i], (cu[i + 1] - cu[i]) // (2 * cp)) for i in range(len(cu) - 1)]\n    \
         return [[s + c * n + k for c in (r, 2 * cp - 1 - r) for k in range(n)] for s, n in h]\n\
         c.zigzag = zigzag\nserve_cp_split(c.split)"
    );
    let v =
        fuzz_json(&["cp-split", "--json", "--cases", "64", "--", "python3", "-c", &truncate], 1);
    let f = &v["failure"];
    assert_eq!(f["checks"], serde_json::json!(["cp-shard"]), "{v}");
    assert!(f["detail"].as_str().unwrap().contains("held by no rank"), "{f}");
}

/// Answers of the wrong shape are `schema` failures, never panics; a bare NaN (Python's
/// json.dumps) is read as NaN and judged.
#[test]
fn fuzz_loss_and_cp_split_name_malformed_answers() {
    let raw = |body: &str| {
        format!(
            "import sys, json\nfor l in sys.stdin:\n    r = json.loads(l)\n    \
             print(json.dumps(dict({{'thdcheck': 1, 'id': r['id']}}, **{body})), flush=True)"
        )
    };
    for (kind, body, want) in [
        ("loss", "{'loss': 0.0, 'parts': []}", "schema"),
        ("loss", "{'loss': 0.0, 'parts': [{'nll': 0.0, 'count': -1}] * r['cp_size']}", "schema"),
        ("loss", "{'loss': [0.0]}", "schema"),
        ("loss", "{'loss': 'zero'}", "schema"),
        ("loss", "{'loss': float('nan')}", "violation"),
        ("cp-split", "{'ranks': []}", "schema"),
        ("cp-split", "{}", "schema"),
        ("cp-split", "{'ranks': [{'input_ids': [1000], 'labels': []}] * r['cp_size']}", "schema"),
        (
            "cp-split",
            "{'ranks': [{'input_ids': [7, 7], 'labels': [0, 0]}] * r['cp_size']}",
            "violation",
        ),
    ] {
        let v = fuzz_json(&[kind, "--json", "--cases", "4", "--", "python3", "-c", &raw(body)], 1);
        assert_eq!(v["failure"]["kind"], want, "{kind} {body}: {v}");
    }
}

// ---- fuzz: the adapter driver under hostile adapters (issue 24) -----------------------------

/// A Python packer, stdlib only, that answers each one-shot request (protocol 1) correctly with
/// one pack per example (over-long ones dropped), and each session request (protocol 2) the
/// same way (`start`, `end_epoch`, `finish`: nothing); `answer(r)` is the payload.
const SINGLETON_PACKER: &str = "import json, os, sys\n\
    def answer(r):\n    \
        ex = r.get('examples', [])\n    \
        return {'packs': [[e['id']] for e in ex if e['len'] <= r.get('capacity', 1 << 30)],\n            \
                'dropped': [e['id'] for e in ex if e['len'] > r.get('capacity', 1 << 30)]}\n\
    def reply(r, **payload):\n    \
        sys.stdout.write(json.dumps(dict({'thdcheck': r['thdcheck'], 'id': r['id']}, **payload)) + '\\n')\n    \
        sys.stdout.flush()\n";

/// An adapter gone before the next request (it closed its stdin, answered once or wrote half a
/// line, and exited) is a `crash` or `not-json` with exit 1 in every kind and at every session
/// op, never thdcheck killed by SIGPIPE (exit 141, no report). Closing stdin before answering
/// makes the next write hit a closed pipe whatever the machine's speed.
#[test]
fn fuzz_an_adapter_gone_before_the_next_request_is_reported_not_a_sigpipe() {
    let half = "import os, sys\nsys.stdin.readline()\nos.close(0)\n\
                sys.stdout.write('{\"thdch')\nsys.stdout.flush()";
    let error_once = "import json, os, sys\nr = json.loads(sys.stdin.readline())\nos.close(0)\n\
                      print(json.dumps({'thdcheck': 1, 'id': r['id'], 'error': 'once'}), flush=True)";
    for kind in ["packer", "collator", "logger", "loss", "cp-split"] {
        let base = [kind, "--json", "--cases", "4", "--max-shrink-runs", "4"];
        let v = fuzz_json(&[&base[..], &["--", "python3", "-c", half]].concat(), 1);
        assert_eq!(v["failure"]["kind"], "not-json", "{kind}: {v}");
        let v = fuzz_json(&[&base[..], &["--", "python3", "-c", error_once]].concat(), 1);
        assert_eq!(v["failure"]["kind"], "adapter-error", "{kind}: {v}");
    }
    // A correct first answer, then gone: the determinism request finds a closed pipe.
    let once = format!(
        "{SINGLETON_PACKER}r = json.loads(sys.stdin.readline())\nos.close(0)\nreply(r, **answer(r))"
    );
    let v = fuzz_json(&["packer", "--json", "--cases", "4", "--", "python3", "-c", &once], 1);
    assert_eq!(v["failure"]["kind"], "crash", "{v}");
    // A session whose packer answers op `op` and is gone before the next request.
    for op in ["start", "push", "end_epoch", "finish"] {
        let script = format!(
            "{SINGLETON_PACKER}for l in sys.stdin:\n    r = json.loads(l)\n    \
             if r['op'] == {op:?}: os.close(0)\n    \
             reply(r, **(answer(r) if r['op'] != 'start' else {{}}))\n    \
             if r['op'] == {op:?}: sys.exit(0)"
        );
        let v = fuzz_json(
            &[
                "packer",
                "--session",
                "--fitting-only",
                "--json",
                "--cases",
                "8",
                "--max-shrink-runs",
                "8",
                "--",
                "python3",
                "-c",
                &script,
            ],
            1,
        );
        assert_eq!(v["failure"]["kind"], "crash", "{op}: {v}");
    }
}

/// An answer that holds far more than a valid answer to its request can (a million empty packs
/// for a few examples, a batch of a million rows) is a `schema` fault, judged before it is
/// decoded: what an answer costs in memory is bounded by its request, not by --max-line-bytes
/// alone (bench/adapter_flood.sh measures the memory of a 250 MB answer).
#[test]
fn fuzz_an_answer_holding_more_than_its_request_allows_is_schema() {
    let flood = |body: &str| {
        format!(
            "import json, sys\nfor l in sys.stdin:\n    r = json.loads(l)\n    \
             sys.stdout.write(('{{\"thdcheck\":1,\"id\":%d,{body}}}\\n') % r['id'])\n    \
             sys.stdout.flush()"
        )
    };
    let packs = flood("\"packs\":[' + '[],' * 3000000 + '[]]");
    let v = fuzz_json(&["packer", "--json", "--cases", "2", "--", "python3", "-c", &packs], 1);
    assert_eq!(v["failure"]["kind"], "schema", "{v}");
    assert!(v["failure"]["detail"].as_str().unwrap().contains("JSON values"), "{v}");
    let batch = flood("\"batch\":{\"input_ids\":[' + '[0],' * 3000000 + '[0]]}");
    let v = fuzz_json(&["collator", "--json", "--cases", "2", "--", "python3", "-c", &batch], 1);
    assert_eq!(v["failure"]["kind"], "schema", "{v}");
}

/// A Python prefix that starts `sleep 60` in a session of its own (`start_new_session`, out of
/// the adapter's process group) and writes its pid to `pidfile`; with `daemon`, a double-fork
/// daemon instead (its parent exits at once, so it is orphaned while the adapter runs).
fn new_session_sleeper(pidfile: &Path, daemon: bool) -> String {
    let pidfile = pidfile.display().to_string();
    if daemon {
        format!(
            "import os, sys\nif os.fork() == 0:\n    os.setsid()\n    if os.fork() == 0:\n        \
             open({pidfile:?}, 'w').write(str(os.getpid()))\n        \
             os.execvp('sleep', ['sleep', '60'])\n    os._exit(0)\nos.wait()\n"
        )
    } else {
        format!(
            "import subprocess, sys\np = subprocess.Popen(['sleep', '60'], start_new_session=True, \
             stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL)\n\
             open({pidfile:?}, 'w').write(str(p.pid))\n"
        )
    }
}

/// What the adapter started in a session of its own (out of its process group) does not outlive
/// thdcheck: not on a pass, not on a hang, not on SIGTERM, SIGINT or SIGHUP.
#[test]
#[cfg(target_os = "linux")]
fn fuzz_descendants_in_a_new_session_do_not_outlive_thdcheck() {
    let greedy = "import runpy\n\
                  runpy.run_path('adapters/python/examples/greedy_packer.py', run_name='__main__')";
    for daemon in [false, true] {
        let dir = tempfile::tempdir().unwrap();
        let pidfile = dir.path().join("sleeper.pid");
        let script = format!("{}{greedy}", new_session_sleeper(&pidfile, daemon));
        let v = fuzz_json(&["packer", "--json", "--cases", "8", "--", "python3", "-c", &script], 0);
        assert_eq!(v["result"], "pass", "{v}");
        assert!(gone(read_pid(&pidfile)), "a new-session descendant survived a pass ({daemon})");
    }
    // A hang: the adapter answers its first request, then hangs on the second.
    let dir = tempfile::tempdir().unwrap();
    let pidfile = dir.path().join("sleeper.pid");
    let script = format!(
        "{}{SINGLETON_PACKER}import time\nr = json.loads(sys.stdin.readline())\n\
         reply(r, **answer(r))\nsys.stdin.readline()\ntime.sleep(60)",
        new_session_sleeper(&pidfile, false)
    );
    let v = fuzz_json(
        &[
            "packer",
            "--json",
            "--timeout-ms",
            "300",
            "--startup-timeout-ms",
            "120000",
            "--",
            "python3",
            "-c",
            &script,
        ],
        1,
    );
    assert_eq!(v["failure"]["kind"], "hang", "{v}");
    assert!(gone(read_pid(&pidfile)), "a new-session descendant survived a hang");
    for sig in [libc::SIGTERM, libc::SIGINT, libc::SIGHUP] {
        let dir = tempfile::tempdir().unwrap();
        let pidfile = dir.path().join("sleeper.pid");
        let script = format!(
            "{}import time\nsys.stdin.readline()\ntime.sleep(60)",
            new_session_sleeper(&pidfile, true)
        );
        let mut thdcheck = Command::new(env!("CARGO_BIN_EXE_thdcheck"))
            .args(["fuzz", "packer", "--quiet", "--timeout-ms", "120000"])
            .args(["--startup-timeout-ms", "120000", "--", "python3", "-c", &script])
            .current_dir(repo())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap();
        let sleeper = read_pid(&pidfile);
        signal_and_wait(&mut thdcheck, sig);
        assert!(gone(sleeper), "a new-session descendant survived signal {sig}");
    }
}

/// A failure costs at most --max-shrink-runs more runs, the scan for other failing classes
/// included, and none of that scan for a crash (every run restarts the adapter) or garbage; the
/// report counts the scan's runs apart (`scan_runs`). Run counts, not wall time, are asserted.
#[test]
fn fuzz_the_scan_for_other_classes_is_in_the_shrink_budget() {
    let dies = "import time\ntime.sleep(0.2)";
    let v = fuzz_json(
        &[
            "packer",
            "--json",
            "--cases",
            "300",
            "--max-shrink-runs",
            "10",
            "--",
            "python3",
            "-c",
            dies,
        ],
        1,
    );
    assert_eq!(v["failure"]["kind"], "crash", "{v}");
    assert_eq!(v["scan_runs"], 0, "{v}");
    assert!(v["runs"].as_u64().unwrap() <= 12, "{v}");
    let bad = example_adapter("greedy_packer_drops_overflow");
    let args = ["packer", "--cases", "300", "--max-shrink-runs", "100", "--", "python3", &bad];
    let v = fuzz_json(&[&args[..1], &["--json"], &args[1..]].concat(), 1);
    assert_eq!(v["failure"]["kind"], "violation", "{v}");
    let (runs, scan) = (v["runs"].as_u64().unwrap(), v["scan_runs"].as_u64().unwrap());
    let passed = v["cases"].as_u64().unwrap();
    // Shrinking took part of the budget, the scan the rest (never 256 whatever the budget).
    assert!(scan > 0 && runs - passed + scan <= 100 + 2, "{v}");
    let o = run_expect(&[&["fuzz"][..], &args].concat(), 1);
    assert!(stdout(&o).contains(&format!("{scan} runs of fresh cases")), "{}", stdout(&o));
}

/// An adapter that exits while a child it forked keeps its stdout open is a `crash` (it
/// exited), not a `hang`: the exit is seen while waiting for the line.
#[test]
fn fuzz_an_adapter_that_exits_while_its_child_holds_stdout_is_a_crash() {
    let script = "import subprocess, sys\nsys.stdin.readline()\n\
                  subprocess.Popen(['sleep', '60'])\nsys.exit(3)";
    let v = fuzz_json(
        &[
            "packer",
            "--json",
            "--cases",
            "2",
            "--max-shrink-runs",
            "2",
            "--timeout-ms",
            "30000",
            "--startup-timeout-ms",
            "30000",
            "--",
            "python3",
            "-c",
            script,
        ],
        1,
    );
    assert_eq!(v["failure"]["kind"], "crash", "{v}");
    assert!(v["failure"]["detail"].as_str().unwrap().contains("exit status: 3"), "{v}");
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

/// An answer carrying an earlier request's id is stale output (the adapter wrote two lines for
/// one request): its fault depends on the requests before it, so it is `flaky`, not `schema`.
#[test]
fn fuzz_a_stale_answer_is_flaky() {
    let twice = format!(
        "{SINGLETON_PACKER}for l in sys.stdin:\n    r = json.loads(l)\n    \
         reply(r, **answer(r))\n    reply(r, **answer(r))"
    );
    let v = fuzz_json(&["packer", "--json", "--cases", "8", "--", "python3", "-c", &twice], 1);
    assert_eq!(v["failure"]["kind"], "flaky", "{v}");
    let twice = "import json, sys\nsys.path.insert(0, 'adapters/python/examples')\n\
                 import flatten_collator as fc\nfor l in sys.stdin:\n    r = json.loads(l)\n    \
                 b = json.dumps({'thdcheck': 1, 'id': r['id'], 'batch': \
                 fc.collate(r['examples'], r['max_seq_length'])})\n    print(b)\n    \
                 print(b, flush=True)";
    let v = fuzz_json(&["collator", "--json", "--cases", "8", "--", "python3", "-c", twice], 1);
    assert_eq!(v["failure"]["kind"], "flaky", "{v}");
}

/// The protocol version of an answer is the request's: 1 to a one-shot request, 2 in a packer
/// session; and a session's `start` is answered with nothing (an empty payload).
#[test]
fn fuzz_an_answer_of_the_wrong_version_or_a_start_answered_with_packs_is_schema() {
    let as_version = |version: u64| {
        format!(
            "{SINGLETON_PACKER}for l in sys.stdin:\n    r = json.loads(l)\n    \
             r['thdcheck'] = {version}\n    reply(r, **answer(r))"
        )
    };
    let base = ["packer", "--json", "--cases", "8", "--fitting-only"];
    let v = fuzz_json(&[&base[..], &["--", "python3", "-c", &as_version(2)]].concat(), 1);
    assert_eq!(v["failure"]["kind"], "schema", "{v}");
    assert!(v["failure"]["detail"].as_str().unwrap().contains("version 2"), "{v}");
    let v =
        fuzz_json(&[&base[..], &["--session", "--", "python3", "-c", &as_version(1)]].concat(), 1);
    assert_eq!(v["failure"]["kind"], "schema", "{v}");
    assert!(v["failure"]["detail"].as_str().unwrap().contains("version 1"), "{v}");
    // The right version passes (the packer itself is correct).
    let v =
        fuzz_json(&[&base[..], &["--session", "--", "python3", "-c", &as_version(2)]].concat(), 0);
    assert_eq!(v["result"], "pass", "{v}");
    for start in ["{'packs': [[0]]}", "{'dropped': [3]}", "{'rejected': 'no'}", "{'pending': 2}"] {
        let script = format!(
            "{SINGLETON_PACKER}for l in sys.stdin:\n    r = json.loads(l)\n    \
             reply(r, **({start} if r['op'] == 'start' else answer(r)))"
        );
        let v = fuzz_json(&[&base[..], &["--session", "--", "python3", "-c", &script]].concat(), 1);
        assert_eq!(v["failure"]["kind"], "schema", "{start}: {v}");
        assert!(v["failure"]["detail"].as_str().unwrap().contains("start"), "{start}: {v}");
    }
    let empty = format!(
        "{SINGLETON_PACKER}for l in sys.stdin:\n    r = json.loads(l)\n    \
         reply(r, **({{'packs': []}} if r['op'] == 'start' else answer(r)))"
    );
    let v = fuzz_json(&[&base[..], &["--session", "--", "python3", "-c", &empty]].concat(), 0);
    assert_eq!(v["result"], "pass", "{v}");
}
