//! `thdcheck fuzz packer`: one-shot requests and sessions, budgets, padding packs, dealing,
//! refusals.

use super::*;

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
    // Minimized at the user's DP size (the shrinker never changes what the user fixed).
    assert_eq!(f["request"]["dp_size"], 3, "{f}");
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

/// The strategy's simplest case is judged first: a packer that fails only on an empty request
/// (open-instruct's loader: `IndexError` on no examples) fails case 0, not when the stream
/// happens to draw one (case 47 of seed 0); under `--non-empty` the request is never sent.
#[test]
fn fuzz_judges_the_simplest_case_first() {
    let script = "import sys\nsys.path.insert(0, 'adapters/python')\n\
                  from thdcheck_adapter import serve_packer\n\
                  def p(lens, cap, seed):\n    \
                  if not lens: raise IndexError('list index out of range')\n    \
                  fits = [i for i, l in enumerate(lens) if l <= cap]\n    \
                  return [[i] for i in fits], [i for i in range(len(lens)) if i not in fits]\n\
                  serve_packer(p)";
    let v = fuzz_json(&["packer", "--json", "--seed", "0", "--", "python3", "-c", script], 1);
    let f = &v["failure"];
    assert_eq!((f["kind"].as_str(), v["cases"].as_u64()), (Some("adapter-error"), Some(0)), "{v}");
    assert_eq!(
        (&f["request"]["examples"], &f["request"]["capacity"]),
        (&serde_json::json!([]), &serde_json::json!(1)),
        "{f}"
    );
    assert!(v["runs"].as_u64().unwrap() <= 2, "no shrinking to do: {v}");
    let v = fuzz_json(
        &["packer", "--json", "--seed", "0", "--non-empty", "--", "python3", "-c", script],
        0,
    );
    assert_eq!(v["cases"], 256, "{v}");
}

/// A target's report lists the registry's rules it judged, no list of its own: dealing only
/// with a DP size.
#[test]
fn fuzz_reports_the_rules_the_registry_gave_it() {
    let held = |flags: &[&str], adapter: &str| -> String {
        let adapter = example_adapter(adapter);
        let o = run_expect(
            &[&["fuzz", "packer", "--cases", "16"][..], flags, &["--", "python3", &adapter]]
                .concat(),
            0,
        );
        let out = stdout(&o);
        let line = out.lines().find(|l| l.contains("every invariant held")).unwrap_or_default();
        line.split_once("held (").map(|(_, r)| r.trim_end_matches(')').to_owned()).unwrap()
    };
    assert_eq!(
        held(&[], "greedy_packer"),
        "packer-conservation, packer-capacity, packer-drops, packer-deterministic"
    );
    assert_eq!(
        held(&["--dp-size", "2"], "padding_batch_packer"),
        "packer-dealing, packer-conservation, packer-capacity, packer-drops, packer-deterministic"
    );
}

/// `--drops drop-last`: a stack that loses each epoch's last, incomplete pack unreported
/// (PyTorch's `drop_last`, bionemo's `TokenPackingDataset` default) may lose what fits one
/// pack, no more. The forgotten carry passes; losing a full pack besides is caught and shrunk
/// to two one-token examples at capacity 1 (which no one pack holds).
#[test]
fn fuzz_packer_drop_last_accepts_one_lost_pack_an_epoch() {
    let flags = [
        "packer",
        "--session",
        "--json",
        "--cases",
        "128",
        "--drops",
        "over-length",
        "--drops",
        "drop-last",
        "--",
        "python3",
    ];
    let carry = example_adapter("streaming_packer_drops_carry");
    let v = fuzz_json(&[&flags[..], &[carry.as_str()]].concat(), 0);
    assert_eq!(v["result"], "pass", "{v}");
    let two = example_adapter("streaming_packer_drops_two_packs");
    let v = fuzz_json(&[&flags[..], &[two.as_str()]].concat(), 1);
    let f = &v["failure"];
    assert_eq!(f["checks"], serde_json::json!(["packer-conservation"]), "{f}");
    assert!(f["detail"].as_str().unwrap().contains("drop-last"), "{f}");
    assert_eq!(f["requests"][0]["capacity"], 1, "{f}");
    assert_eq!(
        f["requests"][1]["examples"],
        serde_json::json!([{"id": 0, "len": 1}, {"id": 1, "len": 1}]),
        "{f}"
    );
}

/// `--drops dp-remainder` covers a loader that cuts its packs to a multiple of the DP size
/// without reporting the cut (open-instruct's `HFDataLoader(drop_last=True)`): what it loses
/// must fill fewer packs than there are ranks. Cutting a full round more is caught.
#[test]
fn fuzz_packer_dp_remainder_accepts_an_unreported_cut() {
    let run = |mode: &str, drops: &[&str], want| {
        let adapter = example_adapter("truncating_loader");
        let a = [
            &["packer", "--json", "--dp-size", "2", "--cases", "128"][..],
            drops,
            &["--", "python3", &adapter, mode],
        ]
        .concat();
        fuzz_json(&a, want)
    };
    let declared = ["--drops", "over-length", "--drops", "dp-remainder"];
    assert_eq!(run("cut", &declared, 0)["result"], "pass");
    let v = run("cut", &[], 1);
    assert_eq!(v["failure"]["checks"], serde_json::json!(["packer-conservation"]), "{v}");
    let v = run("overcut", &declared, 1);
    let f = &v["failure"];
    assert_eq!(f["checks"], serde_json::json!(["packer-conservation"]), "{f}");
    assert!(f["detail"].as_str().unwrap().contains("dp-remainder"), "{f}");
    // At the user's dp 2 (kept by the shrinker), one example fills fewer packs than the ranks
    // (its loss is the accepted remainder): two are the fewest that show the overcut.
    assert_eq!(f["request"]["dp_size"], 2, "{f}");
    assert_eq!(
        f["request"]["examples"],
        serde_json::json!([{"id": 0, "len": 1}, {"id": 1, "len": 1}]),
        "{f}"
    );
}

/// `--empty-examples` (a profile's `[fuzz] empty_examples`) draws examples of 0 tokens, which
/// must be packed like any other: a packer that silently skips them is caught and shrunk to
/// one empty example; without the fact none is drawn (issue 28: "empty examples where the
/// profile allows them").
#[test]
fn fuzz_packer_empty_examples_are_drawn_where_the_stack_allows_them() {
    let script = "import sys\nsys.path.insert(0, 'adapters/python')\n\
                  from thdcheck_adapter import serve_packer\n\
                  def p(lens, cap, seed):\n    \
                  fits = [i for i, l in enumerate(lens) if 0 < l <= cap]\n    \
                  return [[i] for i in fits], [i for i, l in enumerate(lens) if l > cap]\n\
                  serve_packer(p)";
    let dir = tempfile::tempdir().unwrap();
    let profile = dir.path().join("empties.toml");
    std::fs::write(&profile, "name = \"empties\"\n[fuzz]\nempty_examples = true\n").unwrap();
    let profile = profile.display().to_string();
    for flags in [&["--empty-examples"][..], &["--profile", &profile][..]] {
        let args: Vec<&str> =
            [&["packer", "--json"][..], flags, &["--", "python3", "-c", script]].concat();
        let v = fuzz_json(&args, 1);
        let f = &v["failure"];
        assert_eq!(f["checks"], serde_json::json!(["packer-conservation"]), "{flags:?}: {f}");
        assert_eq!(
            (&f["request"]["examples"], &f["request"]["capacity"]),
            (&serde_json::json!([{"id": 0, "len": 0}]), &serde_json::json!(1)),
            "{flags:?}: {f}"
        );
    }
    let v = fuzz_json(&["packer", "--json", "--cases", "512", "--", "python3", "-c", script], 0);
    assert_eq!(v["result"], "pass", "{v}");
}

/// `--mode` is the collator's contract (sft or dpo); any other target refuses it, exit 2 naming
/// the option, instead of accepting `--mode dpo` and fuzzing SFT requests (issue 37). The
/// contradictory options refused before still are.
#[test]
fn fuzz_refuses_mode_outside_the_collator() {
    for target in ["packer", "logger", "loss", "cp-split"] {
        for mode in ["dpo", "sft"] {
            let o = run_expect(&["fuzz", target, "--mode", mode, "--", "true"], 2);
            assert!(stderr(&o).contains("--mode"), "{target} --mode {mode}: {}", stderr(&o));
        }
    }
    let refused: [&[&str]; 4] = [
        &["packer", "--min-packs", "--session"],
        &["packer", "--first-failure", "--also-failing", "3"],
        &["packer", "--examples-multiple-of-dp"],
        &["collator", "--mlm", "--causal"],
    ];
    for args in refused {
        run_expect(&[&["fuzz"][..], args, &["--", "true"]].concat(), 2);
    }
    let v = fuzz_json(
        &[
            "collator",
            "--mode",
            "dpo",
            "--json",
            "--cases",
            "4",
            "--",
            "python3",
            &example_adapter("flatten_collator"),
        ],
        0,
    );
    assert_eq!(v["result"], "pass", "{v}");
}

#[test]
fn fuzz_html_draws_the_shrunk_request_and_the_answer() {
    let bad = example_adapter("greedy_packer_drops_overflow");
    let dir = tempfile::tempdir().unwrap();
    let page = dir.path().join("fuzz.html");
    let p = page.to_str().unwrap();
    let o = run_expect(&["fuzz", "packer", "--cases", "64", "--html", p, "--", "python3", &bad], 1);
    // The text report is unchanged; the page draws the 1-minimal case.
    assert!(stdout(&o).contains("shrunk to a minimal case"), "{}", stdout(&o));
    let html = std::fs::read_to_string(&page).unwrap();
    assert!(html.contains("FAIL: violation packer-conservation"), "{html}");
    assert!(html.contains("request: 2 examples, capacity 1"), "{html}");
    assert!(html.contains("pack 0: #0 = 1 tokens"), "{html}");
    assert!(html.contains("dropped: none"), "{html}");
    assert_eq!(html.matches("<svg").count(), 1);
}
