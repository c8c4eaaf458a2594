//! What a misbehaving adapter does, reported as what it did: crashes, hangs, garbage, schema
//! breaks, stale answers, descendants that must not outlive the command; the failing classes and
//! the shrink budget.

use super::*;

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

/// Every distinct failing class is reported, each shrunk on its own in the same run (issue 40);
/// `--ignore` the first and the next one is the first shrunk. The planted mask-from-ids collator
/// does not pad, so with `--pad-to-multiple-of 8` it breaks two rules: `mask` (on a token 0) and
/// `pad-multiple`.
#[test]
fn fuzz_reports_every_failing_class_and_ignore_shrinks_the_next() {
    let bad = example_adapter("mask_from_ids_collator");
    let base = ["collator", "--json", "--cases", "64", "--pad-to-multiple-of", "8"];
    let v = fuzz_json(&[&base[..], &["--", "python3", &bad]].concat(), 1);
    let first = v["failure"]["checks"][0].as_str().unwrap().to_owned();
    let shrunk: Vec<String> = v["failures"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a["class"].as_str().unwrap().to_owned())
        .collect();
    let other = if first == "mask" { "pad-multiple" } else { "mask" };
    assert!(shrunk.contains(&format!("violation {other}")), "{v}");
    for f in v["failures"].as_array().unwrap() {
        assert_eq!(f["one_minimal"], true, "{v}");
    }
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
    // It reads each request, then dies: a crash of every case (one that dies before reading
    // its first request did not start, exit 2).
    let dies = "import sys, time\nsys.stdin.readline()\ntime.sleep(0.2)";
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

/// An adapter that writes two answers to every request: the second answer to one request is
/// read as the answer to the next, carrying the earlier id. That is a protocol fault of the
/// adapter, reported as what it did (`schema`: "wrote 2 answers to one request"), not `flaky`
/// (issue 37), for a packer (which sends each request twice) and for a collator (one request a
/// case, whose replay in a fresh process reads only the first answer).
#[test]
fn fuzz_two_answers_to_one_request_is_schema() {
    let twice = format!(
        "{SINGLETON_PACKER}for l in sys.stdin:\n    r = json.loads(l)\n    \
         reply(r, **answer(r))\n    reply(r, **answer(r))"
    );
    let v = fuzz_json(&["packer", "--json", "--cases", "8", "--", "python3", "-c", &twice], 1);
    assert_eq!(v["failure"]["kind"], "schema", "{v}");
    assert!(v["failure"]["detail"].as_str().unwrap().contains("wrote 2 answers to one request"));
    let twice = "import json, sys\nsys.path.insert(0, 'adapters/python/examples')\n\
                 import flatten_collator as fc\nfor l in sys.stdin:\n    r = json.loads(l)\n    \
                 b = json.dumps({'thdcheck': 1, 'id': r['id'], 'batch': \
                 fc.collate(r['examples'], r['max_seq_length'])})\n    print(b)\n    \
                 print(b, flush=True)";
    let v = fuzz_json(&["collator", "--json", "--cases", "8", "--", "python3", "-c", twice], 1);
    assert_eq!(v["failure"]["kind"], "schema", "{v}");
    let detail = v["failure"]["detail"].as_str().unwrap();
    assert!(detail.contains("wrote 2 answers to one request"), "{v}");
    // Its replay shows both answers of the one request.
    let replay = v["failure"]["replay"].as_str().unwrap();
    let o = Command::new("sh").args(["-c", replay]).current_dir(repo()).output().unwrap();
    assert_eq!(String::from_utf8_lossy(&o.stdout).lines().count(), 2, "{replay}");
}

/// An adapter that cannot start (an `ImportError`, as `from thdcheck_adapter import …` gives a
/// wheel user outside a checkout) exits before it reads its first request: a setup error,
/// exit 2, reported as what it did (its exit code, the tail of its stderr), not a `crash` with
/// exit 1, the code of a failed check (issue 37). An adapter that reads its request and then
/// dies is still a crash (exit 1), shrunk to the case that kills it.
#[test]
fn fuzz_an_adapter_that_cannot_start_is_a_setup_error() {
    let script = "import sys\nimport thdcheck_no_such_module\nserve(sys.stdin)";
    for target in ["packer", "collator", "cp-split"] {
        let o = run_expect(&["fuzz", target, "--json", "--", "python3", "-c", script], 2);
        let e = stderr(&o);
        assert!(e.contains("exited (exit status: 1) before reading its first request"), "{e}");
        assert!(e.contains("No module named 'thdcheck_no_such_module'"), "{e}");
        assert!(stdout(&o).is_empty(), "{}", stdout(&o));
    }
    // Dies on the drawn cases holding an example of 3 tokens or more: a crash, shrunk to one.
    let dies = "import sys\nsys.path.insert(0, 'adapters/python')\n\
                from thdcheck_adapter import serve_packer\n\
                def p(lens, cap, seed):\n    if any(n >= 3 for n in lens): sys.exit(5)\n    \
                return [[i] for i in range(len(lens)) if lens[i] <= cap], \
                [i for i in range(len(lens)) if lens[i] > cap]\n\
                serve_packer(p)";
    let v = fuzz_json(&["packer", "--json", "--", "python3", "-c", dies], 1);
    let f = &v["failure"];
    assert_eq!(f["kind"], "crash", "{v}");
    assert!(f["detail"].as_str().unwrap().contains("exit status: 5"), "{v}");
    assert_eq!(f["request"]["examples"], serde_json::json!([{"id": 0, "len": 3}]), "{v}");
    // The docs show the import of a checkout and of an installed wheel.
    let doc = std::fs::read_to_string(repo().join("docs/protocol.md")).unwrap();
    assert!(doc.contains("from thdcheck.adapter import serve_packer"), "docs/protocol.md");
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
