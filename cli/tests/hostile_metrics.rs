//! Hostile inputs to `thdcheck metrics` and to the files `thdcheck check` walks (issue 24, item
//! 3): recipes whose sizes the simulation cannot hold, products that would wrap, rates that
//! would print `inf`, FIFOs and directories where a file is expected, trees deeper than
//! `PATH_MAX`, and a huge garbage file. The promise under test: exit 0, 1 or 2 (2 naming the
//! file and the recipe key at fault), never a panic, an abort, a hang or a silent wrong number.
//!
//! Every run has a 60 s deadline (a regression fails instead of hanging the suite) and a 4 GiB
//! data limit (a regression that grows without bound aborts instead of exhausting the machine).

#![cfg(unix)]

use std::ffi::OsStr;
use std::io::Read;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// How long any one run may take before it counts as a hang.
const DEADLINE: Duration = Duration::from_secs(60);

/// The data segment limit of each run (`RLIMIT_DATA`): far above what any accepted input needs.
const DATA_LIMIT: u64 = 4 << 30;

/// What a run gave: the exit code (`None`: killed by a signal) and both streams.
struct Run {
    code: Option<i32>,
    stdout: String,
    stderr: String,
}

impl std::fmt::Display for Run {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "exit {:?}\nstdout:\n{}\nstderr:\n{}", self.code, self.stdout, self.stderr)
    }
}

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// Runs `thdcheck args` under the deadline and the data limit; a hang is killed and reported
/// as a run without an exit code.
fn run<S: AsRef<OsStr>>(args: &[S]) -> Run {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_thdcheck"));
    cmd.args(args)
        .current_dir(repo())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    // SAFETY: between fork and exec only setrlimit runs, which is async-signal-safe.
    unsafe {
        cmd.pre_exec(|| {
            let limit = libc::rlimit { rlim_cur: DATA_LIMIT, rlim_max: DATA_LIMIT };
            if libc::setrlimit(libc::RLIMIT_DATA, &limit) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let mut child = cmd.spawn().expect("the thdcheck binary starts");
    let drain = |pipe: Option<Box<dyn Read + Send>>| {
        std::thread::spawn(move || {
            let mut text = String::new();
            if let Some(mut p) = pipe {
                let mut bytes = Vec::new();
                let _ = p.read_to_end(&mut bytes);
                text = String::from_utf8_lossy(&bytes).into_owned();
            }
            text
        })
    };
    let out = drain(child.stdout.take().map(|p| Box::new(p) as _));
    let err = drain(child.stderr.take().map(|p| Box::new(p) as _));
    let start = Instant::now();
    let status = loop {
        if let Some(s) = child.try_wait().expect("wait on thdcheck") {
            break s;
        }
        if start.elapsed() > DEADLINE {
            let _ = child.kill();
            let _ = child.wait();
            let args: Vec<_> = args.iter().map(|a| a.as_ref().to_string_lossy()).collect();
            return Run {
                code: None,
                stdout: String::new(),
                stderr: format!("thdcheck {args:?} still ran after {DEADLINE:?}: a hang"),
            };
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    Run {
        code: status.code(),
        stdout: out.join().unwrap_or_default(),
        stderr: err.join().unwrap_or_default(),
    }
}

/// Why `r` is not an exit 2 whose message contains every one of `names`, if it is not.
fn exit_2_naming(r: &Run, names: &[&str]) -> Result<(), String> {
    if r.code != Some(2) || r.stderr.contains("panicked") {
        return Err(format!("expected exit 2\n{r}"));
    }
    match names.iter().find(|n| !r.stderr.contains(**n)) {
        Some(n) => Err(format!("the message should name {n:?}\n{r}")),
        None => Ok(()),
    }
}

/// Asserts that no case failed, listing every one that did.
fn assert_all(failures: Vec<String>) {
    assert!(failures.is_empty(), "{} cases failed:\n\n{}", failures.len(), failures.join("\n\n"));
}

/// The text of a committed recipe.
fn recipe(name: &str) -> String {
    std::fs::read_to_string(repo().join("golden/tests/recipes").join(format!("{name}.toml")))
        .expect("a committed recipe")
}

/// `text` with the first `key = …` line set to `key = value`.
fn with(text: &str, key: &str, value: impl std::fmt::Display) -> String {
    let mut done = false;
    let lines: Vec<String> = text
        .lines()
        .map(|line| {
            let t = line.trim_start();
            let is_key = t.strip_prefix(key).is_some_and(|rest| rest.trim_start().starts_with('='));
            if is_key && !done {
                done = true;
                format!("{key} = {value}")
            } else {
                line.to_owned()
            }
        })
        .collect();
    assert!(done, "no `{key} =` line to replace");
    lines.join("\n") + "\n"
}

/// Writes `text` as `name.toml` in `dir` and runs `metrics --recipe` on it with `extra` args.
fn metrics(dir: &Path, name: &str, text: &str, extra: &[&str]) -> (PathBuf, Run) {
    let path = dir.join(format!("{name}.toml"));
    std::fs::write(&path, text).unwrap();
    let mut args: Vec<&OsStr> = vec!["metrics".as_ref(), "--recipe".as_ref(), path.as_os_str()];
    args.extend(extra.iter().map(|a| OsStr::new(*a)));
    let r = run(&args);
    (path, r)
}

/// Runs `metrics --recipe` on every `(name, recipe text, dotted key)` case and asserts that each
/// exits 2 naming its key and its file, listing every case that does not.
fn each_exits_2_naming(dir: &Path, cases: &[(&str, String, &str)]) {
    let mut failures = Vec::new();
    for (name, text, dotted) in cases {
        let (path, r) = metrics(dir, name, text, &[]);
        if let Err(e) = exit_2_naming(&r, &[dotted, &path.display().to_string()]) {
            failures.push(format!("{name}: {e}"));
        }
    }
    assert_all(failures);
}

const MAX_I64: u64 = i64::MAX as u64;

#[test]
fn recipe_sizes_near_2_pow_63_exit_2_naming_the_key() {
    let dir = tempfile::tempdir().unwrap();
    let cases = [
        ("qwen3_8b_sft_seq4096", "examples_per_push", MAX_I64, "packing.examples_per_push"),
        ("qwen3_8b_sft_seq4096", "pad_to_multiple_of", MAX_I64, "padding.pad_to_multiple_of"),
        ("codonfm_encodon_1b", "micro_batch_size", MAX_I64, "batch.micro_batch_size"),
        ("olmo2_7b_dpo_16k", "static_length", MAX_I64, "padding.static_length"),
        (
            "megatron_bridge_vlm_in_batch_seq4096",
            "spatial_merge",
            1 << 31,
            "data.vision.spatial_merge",
        ),
    ];
    let mut failures = Vec::new();
    for (base, key, value, dotted) in cases {
        let name = format!("{base}_{key}");
        let (path, r) = metrics(dir.path(), &name, &with(&recipe(base), key, value), &[]);
        if let Err(e) = exit_2_naming(&r, &[dotted, &path.display().to_string()]) {
            failures.push(format!("{key} = {value}: {e}"));
        }
    }
    assert_all(failures);
}

#[test]
fn recipes_past_what_the_simulation_holds_exit_2_naming_the_key() {
    let dir = tempfile::tempdir().unwrap();
    let codon = recipe("codonfm_encodon_1b");
    let qwen = recipe("qwen3_8b_sft_seq4096");
    let cases = [
        // 8 · 2^20 micro-batches of 2,048 tokens: 12 GB.
        ("grad_acc", with(&codon, "grad_acc", 1 << 20), "batch.grad_acc"),
        // First fit decreasing over windows of 2^20 documents: quadratic, minutes.
        ("push", with(&qwen, "examples_per_push", 1 << 20), "packing.examples_per_push"),
        // 2^40 data-parallel ranks.
        ("gpus", with(&qwen, "num_gpus", 1u64 << 40), "parallel.num_gpus"),
        // One row of 2^30 tokens.
        ("row", with(&codon, "pad_to_multiple_of", 1 << 30), "padding.pad_to_multiple_of"),
        // One row of 2^22 tokens is held, but not its loss sample: 2^22 tokens × 64 logits.
        (
            "loss_sample",
            with(&with(&codon, "pad_to_multiple_of", 1 << 22), "num_gpus", 1),
            "loss_sample.vocab",
        ),
    ];
    each_exits_2_naming(dir.path(), &cases);
}

#[test]
fn products_that_would_wrap_exit_2_naming_the_key() {
    let dir = tempfile::tempdir().unwrap();
    let qwen = recipe("qwen3_8b_sft_seq4096");
    let codon = recipe("codonfm_encodon_1b");
    let huge_model =
        with(&with(&with(&qwen, "layers", 1u64 << 42), "hidden", 1u64 << 43), "ffn", 1u64 << 43);
    let cases = [
        // heads · head_dim: 2^32 query heads (a multiple of the 8 KV heads).
        ("heads", with(&qwen, "heads", 1u64 << 32), "model.heads"),
        (
            "heads_head_dim",
            with(&with(&qwen, "heads", 1u64 << 32), "head_dim", 1u64 << 32),
            "model.heads",
        ),
        // L · h · f past u128.
        ("layers_hidden_ffn", huge_model, "model.layers"),
        // in_batch capacity micro_batch_size · seq_length = 4 · 1,073,742,424 past u32.
        (
            "capacity",
            with(&with(&codon, "micro_batch_size", 4), "seq_length", 1_073_742_424u64),
            "batch.seq_length",
        ),
    ];
    each_exits_2_naming(dir.path(), &cases);
}

#[test]
fn rates_that_would_not_be_finite_exit_2_naming_the_key() {
    let dir = tempfile::tempdir().unwrap();
    let qwen = recipe("qwen3_8b_sft_seq4096");
    let mut failures = Vec::new();
    for (key, dotted) in [
        ("step_time_s", "timing.step_time_s"),
        ("peak_tflops_per_gpu", "timing.peak_tflops_per_gpu"),
    ] {
        let (path, r) = metrics(dir.path(), key, &with(&qwen, key, "1e-320"), &["--json"]);
        failures.extend(exit_2_naming(&r, &[dotted, &path.display().to_string()]).err());
    }
    // The same time given on the command line is named as the option.
    let (_, r) = metrics(dir.path(), "override", &qwen, &["--step-time", "1e-320"]);
    failures.extend(exit_2_naming(&r, &["--step-time"]).err());
    // And with batches: the step record's rates too.
    let batch = "examples/batches/good/hf_flatten.safetensors";
    let (_, r) = metrics(dir.path(), "batch", &qwen, &["--batch", batch, "--step-time", "1e-320"]);
    failures.extend(exit_2_naming(&r, &["--step-time"]).err());
    assert_all(failures);
}

/// A FIFO at `path` (the `mkfifo` command: no `unsafe` needed).
fn mkfifo(path: &Path) {
    let made = Command::new("mkfifo").arg(path).status().expect("mkfifo runs");
    assert!(made.success(), "mkfifo {}", path.display());
}

#[test]
fn a_fifo_as_recipe_or_expect_exits_2_naming_it() {
    let dir = tempfile::tempdir().unwrap();
    let fifo = dir.path().join("fifo.toml");
    mkfifo(&fifo);
    let named = fifo.display().to_string();
    let mut failures = Vec::new();
    let r = run(&[OsStr::new("metrics"), "--recipe".as_ref(), fifo.as_os_str()]);
    failures.extend(exit_2_naming(&r, &[&named]).err());

    let logged = dir.path().join("logged.json");
    mkfifo(&logged);
    let qwen = repo().join("golden/tests/recipes/qwen3_8b_sft_seq4096.toml");
    let r = run(&[
        OsStr::new("metrics"),
        "--recipe".as_ref(),
        qwen.as_os_str(),
        "--expect".as_ref(),
        logged.as_os_str(),
    ]);
    failures.extend(exit_2_naming(&r, &[&logged.display().to_string()]).err());

    let good = repo().join("examples/batches/good/hf_flatten.safetensors");
    let r = run(&[OsStr::new("check"), "--expect".as_ref(), fifo.as_os_str(), good.as_os_str()]);
    failures.extend(exit_2_naming(&r, &[&named]).err());
    assert_all(failures);
}

#[test]
fn an_expected_toml_that_is_no_file_exits_2_naming_it() {
    let good = std::fs::read(repo().join("examples/batches/good/hf_flatten.safetensors")).unwrap();
    let mut failures = Vec::new();
    for kind in ["fifo", "directory"] {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("good.safetensors"), &good).unwrap();
        let expected = dir.path().join("expected.toml");
        if kind == "fifo" {
            mkfifo(&expected);
        } else {
            std::fs::create_dir(&expected).unwrap();
        }
        let r = run(&[OsStr::new("check"), dir.path().as_os_str()]);
        failures.extend(exit_2_naming(&r, &[&expected.display().to_string()]).err());
        // --no-expect reads no expectations: the directory checks as usual.
        let r = run(&[OsStr::new("check"), "--no-expect".as_ref(), dir.path().as_os_str()]);
        if r.code != Some(0) {
            failures.push(format!("{kind} with --no-expect: expected exit 0\n{r}"));
        }
    }
    assert_all(failures);
}

/// Makes `levels` nested directories of `name_len`-character names under `root` by directory
/// handles (their paths may be longer than `PATH_MAX`) and writes `file` at the bottom as
/// `name`. Returns how many bytes the deepest directory's path has.
fn deep_tree(root: &Path, levels: usize, name_len: usize, name: &str, file: &[u8]) -> usize {
    use std::ffi::CString;
    use std::os::unix::ffi::OsStrExt;
    let c = |s: &[u8]| CString::new(s).unwrap();
    let root_c = c(root.as_os_str().as_bytes());
    // SAFETY: plain POSIX calls on NUL-terminated strings and descriptors this function owns.
    unsafe {
        let mut fd = libc::open(root_c.as_ptr(), libc::O_RDONLY | libc::O_DIRECTORY);
        assert!(fd >= 0, "open {}", root.display());
        let mut len = root.as_os_str().len();
        for i in 0..levels {
            let d = c(format!("{i:0>name_len$}").as_bytes());
            assert_eq!(libc::mkdirat(fd, d.as_ptr(), 0o755), 0, "mkdirat level {i}");
            let next = libc::openat(fd, d.as_ptr(), libc::O_RDONLY | libc::O_DIRECTORY);
            assert!(next >= 0, "openat level {i}");
            libc::close(fd);
            fd = next;
            len += 1 + name_len;
        }
        let f = c(name.as_bytes());
        let out = libc::openat(fd, f.as_ptr(), libc::O_WRONLY | libc::O_CREAT, 0o644);
        assert!(out >= 0, "create {name}");
        let written = libc::write(out, file.as_ptr().cast(), file.len());
        assert_eq!(written, file.len() as isize);
        libc::close(out);
        libc::close(fd);
        len
    }
}

#[test]
fn a_file_past_path_max_is_reported_not_skipped() {
    let dir = tempfile::tempdir().unwrap();
    let good = std::fs::read(repo().join("examples/batches/good/hf_flatten.safetensors")).unwrap();
    std::fs::write(dir.path().join("good.safetensors"), &good).unwrap();
    // 22 levels of 200-character names: about 4,400 bytes, past Linux's PATH_MAX of 4,096.
    let len = deep_tree(dir.path(), 22, 200, "garbage.safetensors", b"not a safetensors file");
    assert!(len > libc::PATH_MAX as usize, "{len}");
    // The first directory of the chain: the report names a path under it.
    let first = dir.path().join(format!("{:0>200}", 0)).display().to_string();
    let mut failures = Vec::new();
    for cmd in [&["check", "--quiet"][..], &["check", "--json"][..]] {
        let mut args: Vec<&OsStr> = cmd.iter().map(OsStr::new).collect();
        args.push(dir.path().as_os_str());
        let r = run(&args);
        let all = format!("{}{}", r.stdout, r.stderr);
        if r.code != Some(2) || r.stderr.contains("panicked") {
            failures.push(format!("{cmd:?}: expected exit 2\n{r}"));
        } else if !all.contains(&first) || !all.contains("PATH_MAX") {
            failures.push(format!("{cmd:?}: the report should name {first} and PATH_MAX\n{r}"));
        }
    }
    let qwen = repo().join("golden/tests/recipes/qwen3_8b_sft_seq4096.toml");
    let r = run(&[
        OsStr::new("metrics"),
        "--recipe".as_ref(),
        qwen.as_os_str(),
        "--batch".as_ref(),
        dir.path().as_os_str(),
    ]);
    failures.extend(exit_2_naming(&r, &[&first, "PATH_MAX"]).err());
    assert_all(failures);
}

#[test]
fn a_deep_but_reachable_tree_is_walked_whole() {
    let dir = tempfile::tempdir().unwrap();
    let good = std::fs::read(repo().join("examples/batches/good/hf_flatten.safetensors")).unwrap();
    // 1,000 levels of 1-character names: a path of about 2,000 bytes, under PATH_MAX.
    let len = deep_tree(dir.path(), 1000, 1, "deep.safetensors", &good);
    assert!(len < libc::PATH_MAX as usize - 64, "{len}");
    let r = run(&[OsStr::new("check"), "--quiet".as_ref(), dir.path().as_os_str()]);
    assert_eq!(r.code, Some(0), "{r}");
    assert!(r.stdout.contains("deep.safetensors: PASS"), "{r}");
}

#[test]
fn a_huge_garbage_file_is_rejected_by_its_header_without_reading_it() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("huge.safetensors");
    // A 1 TiB sparse file whose 8-byte header length says 2^63: nothing to read past byte 8.
    let f = std::fs::File::create(&path).unwrap();
    std::io::Write::write_all(&mut &f, &(1u64 << 63).to_le_bytes()).unwrap();
    f.set_len(1 << 40).unwrap();
    drop(f);
    let mut failures = Vec::new();
    for cmd in ["check", "metrics"] {
        let r = if cmd == "check" {
            run(&[OsStr::new("check"), path.as_os_str()])
        } else {
            let qwen = repo().join("golden/tests/recipes/qwen3_8b_sft_seq4096.toml");
            run(&[
                OsStr::new("metrics"),
                "--recipe".as_ref(),
                qwen.as_os_str(),
                "--batch".as_ref(),
                path.as_os_str(),
            ])
        };
        let names = ["huge.safetensors", "not a valid safetensors file", "header"];
        failures.extend(exit_2_naming(&r, &names).err().map(|e| format!("{cmd}: {e}")));
    }
    assert_all(failures);
}

/// A logged value that is not a number is judged by the rule of its kind: a rate's
/// `logged-rate` (MFU-PAD), a count's `logged-tokens` (TOKENS-CP). Every such value used to be a
/// TOKENS-CP `logged-tokens` mismatch, whatever its key.
#[test]
fn a_logged_value_that_is_not_a_number_is_its_kinds_mismatch() {
    let dir = tempfile::tempdir().unwrap();
    let logged = dir.path().join("logged.json");
    std::fs::write(&logged, r#"{"throughput.mfu_pct.useful": "n/a", "tokens.real": "many"}"#)
        .unwrap();
    let (_, r) = metrics(
        dir.path(),
        "r",
        &recipe("qwen3_8b_sft_seq4096"),
        &["--json", "--expect", logged.to_str().unwrap()],
    );
    assert_eq!(r.code, Some(1), "{}", r.stderr);
    let doc: serde_json::Value = serde_json::from_str(&r.stdout).expect("JSON");
    let ids: Vec<(String, String)> = doc["comparison"]["values"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| (v["key"].as_str().unwrap().into(), v["detail"]["id"].as_str().unwrap().into()))
        .collect();
    assert_eq!(
        ids,
        [
            ("throughput.mfu_pct.useful".to_owned(), "logged-rate".to_owned()),
            ("tokens.real".to_owned(), "logged-tokens".to_owned())
        ],
        "{}",
        r.stdout
    );
}
