//! Integration tests of the `thdcheck` binary, run as a user runs it: every exit code, every
//! dialect, the example batches and the malformed-input corpus. The contents, by feature (one
//! binary, each file a module):
//!
//! - [`check`]: `thdcheck check`: the example batches, every dialect and format, the options,
//!   expectations, usage errors and malformed inputs.
//! - [`metrics`]: `thdcheck metrics`: the record under a recipe, `--expect` over a logger's
//!   keys, CP rank files and micro-batches.
//! - [`fuzz_packer`]: `thdcheck fuzz packer`: one-shot requests and sessions, budgets, padding
//!   packs, dealing, refusals.
//! - [`fuzz_collator`]: `thdcheck fuzz collator`: the formats it reads, the check options,
//!   declared rewrites, static lengths and budgets.
//! - [`fuzz_numbers`]: `thdcheck fuzz loss`, `cp-split` and `logger`: the numbers a CP loss, a
//!   CP splitter and a logger report.
//! - [`fuzz_adapters`]: a misbehaving adapter reported as what it did (crashes, hangs, garbage,
//!   schema breaks, stale answers, descendants that must not outlive the command); the failing
//!   classes and the shrink budget.
//! - [`real_corpus`]: the real-code corpus (`corpus/real`) gets its recorded verdicts.
//! - [`selfcheck`]: `thdcheck selfcheck`: every driver, every planted bug.
//! - [`registry`]: no crate but `properties` builds a verdict (its source is read).
//!
//! Beside this binary: `tests/fuzz_minimal.rs` (1-minimal counterexamples, edge-biased
//! generation, preconditions and declared drops), `tests/profiles.rs` (stack profiles as data),
//! `tests/cp_contiguous.rs` (contiguous CP shards), `tests/hostile_metrics.rs` (hostile recipes
//! and logs); `tests/support/` holds what they share.

mod check;
mod fuzz_adapters;
mod fuzz_collator;
mod fuzz_numbers;
mod fuzz_packer;
mod metrics;
mod real_corpus;
mod registry;
mod selfcheck;

use std::path::{Path, PathBuf};
use std::process::Command;

use reader::tensors::write_ints;

#[path = "../support/corpus.rs"]
mod corpus;
#[path = "../support/run.rs"]
mod run;
use run::{code, example_adapter, fuzz_json, repo, run_expect, stderr, stdout, thdcheck};

fn temp_batch(dir: &Path, name: &str, tensors: &[(&str, Vec<usize>, Vec<i64>)]) -> PathBuf {
    let p = dir.join(name);
    std::fs::write(&p, write_ints(tensors, &[]).unwrap()).unwrap();
    p
}

// ---- metrics: the golden record and the logger gate ------------------------------------------

const RECIPE: &str = "golden/tests/recipes/esm2_t6_8m_l0_sanity_cp.toml";

fn metrics_record(extra: &[&str]) -> serde_json::Value {
    let o = run_expect(&[&["metrics", "--recipe", RECIPE, "--json"][..], extra].concat(), 0);
    serde_json::from_slice::<serde_json::Value>(&o.stdout).unwrap()["record"].clone()
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

// ---- fuzz loss and cp-split: CP-LOSS, TOKENS-CP and CP-SHARD on real subprocesses -------------

/// Logits rows in every request of a shrunk loss case.
fn loss_rows(failure: &serde_json::Value) -> usize {
    let ranks = failure["request"]["ranks"].as_array().unwrap();
    ranks.iter().map(|r| r["logits"].as_array().unwrap().len()).sum()
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
