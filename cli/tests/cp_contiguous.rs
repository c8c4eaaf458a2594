//! Contiguous CP (issue 26, item 5): rank files that each hold one contiguous piece of the pack
//! (Ulysses, slime's `--allgather-cp`, Nanotron) are reassembled when the stack says so (a
//! profile's `cp_layout = "contiguous"`, or the files' metadata `cp_layout`), and refused under
//! the default zigzag; pieces that overlap, leave a gap or are unequal are `cp-shard`
//! violations naming the rank and the token. `fuzz cp-split` and `fuzz loss` take the layout
//! (`--cp-layout`, default the profile's).

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use reader::tensors::write_ints;

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn thdcheck(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_thdcheck"))
        .args(args)
        .current_dir(repo())
        .output()
        .expect("the thdcheck binary runs")
}

fn text(o: &Output) -> String {
    format!("{}{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr))
}

/// Runs and asserts the exit code, printing both streams on a mismatch.
fn run_expect(args: &[&str], want: i32) -> Output {
    let o = thdcheck(args);
    assert_eq!(o.status.code(), Some(want), "thdcheck {args:?}\n{}", text(&o));
    assert!(!text(&o).contains("panicked"), "{}", text(&o));
    o
}

/// The pack of the tests: three documents of 5, 3 and 4 tokens (T = 12), labels shifted within
/// each document (its last token predicts nothing), position ids restarting per document.
const LENS: [usize; 3] = [5, 3, 4];

fn pack() -> (Vec<i64>, Vec<i64>, Vec<i64>, Vec<i64>) {
    let (mut ids, mut labels, mut pos, mut cu) = (Vec::new(), Vec::new(), Vec::new(), vec![0]);
    for (d, &n) in LENS.iter().enumerate() {
        for j in 0..n {
            let id = 10 * (d as i64 + 1) + j as i64;
            ids.push(id);
            labels.push(if j + 1 < n { id + 1 } else { -100 });
            pos.push(j as i64);
        }
        cu.push(cu[cu.len() - 1] + n as i64);
    }
    (ids, labels, pos, cu)
}

/// Writes rank `r`'s file holding the global tokens `held`, beside the global offsets `cu`
/// (TransformerEngine keys; `cp_rank`, `cp_size` and `extra` in the metadata).
fn rank_file(
    dir: &Path,
    r: usize,
    cp: usize,
    held: &[usize],
    cu: &[i64],
    extra: &[(&str, &str)],
) -> PathBuf {
    let (ids, labels, pos, _) = pack();
    let take = |v: &[i64]| -> Vec<i64> { held.iter().map(|&g| v[g]).collect() };
    let n = held.len();
    let (rank, size) = (r.to_string(), cp.to_string());
    let mut meta = vec![("cp_rank", rank.as_str()), ("cp_size", size.as_str()), ("causal", "true")];
    meta.extend_from_slice(extra);
    let bytes = write_ints(
        &[
            ("input_ids", vec![1, n], take(&ids)),
            ("labels", vec![1, n], take(&labels)),
            ("position_ids", vec![1, n], take(&pos)),
            ("cu_seqlens", vec![cu.len()], cu.to_vec()),
        ],
        &meta,
    )
    .unwrap();
    let path = dir.join(format!("rank{r}.safetensors"));
    std::fs::write(&path, bytes).unwrap();
    path
}

/// A CP group of two ranks holding the global tokens `pieces[r]`, in a fresh directory.
fn group(pieces: [std::ops::Range<usize>; 2], extra: &[(&str, &str)]) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let (_, _, _, cu) = pack();
    for (r, piece) in pieces.iter().enumerate() {
        rank_file(dir.path(), r, 2, &piece.clone().collect::<Vec<_>>(), &cu, extra);
    }
    dir
}

/// A user's profile stating the contiguous layout, written beside the test's files.
fn contiguous_profile(dir: &Path) -> PathBuf {
    let p = dir.join("contiguous_stack.toml");
    std::fs::write(
        &p,
        "name = \"contiguous_stack\"\nstack = \"a Ulysses-style trainer (test)\"\n\
         cp_layout = \"contiguous\"\n",
    )
    .unwrap();
    p
}

fn group_report(o: &Output) -> serde_json::Value {
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    v["files"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["path"].as_str().unwrap().ends_with("cp-group"))
        .cloned()
        .unwrap_or_else(|| panic!("no cp-group in {v}"))
}

#[test]
fn contiguous_shards_pass_under_their_profile_and_are_refused_as_zigzag() {
    let profiles = tempfile::tempdir().unwrap();
    let profile = contiguous_profile(profiles.path());
    let profile = profile.to_str().unwrap();
    let good = group([0..6, 6..12], &[]);
    let dir = good.path().to_str().unwrap();

    // Under the stack's profile: the pack is the two pieces back to back, judged as a whole.
    let o = run_expect(&["check", "--json", "--profile", profile, dir], 0);
    let g = group_report(&o);
    assert_eq!(g["verdict"], "pass", "{g}");
    let pack = &g["report"]["packs"][0];
    assert_eq!(pack["facts"]["tokens"], 12, "{g}");
    assert_eq!(pack["facts"]["real_segments"], 3, "{g}");
    let notes = pack["notes"].to_string();
    assert!(notes.contains("contiguous: rank r holds tokens [r·T/cp, (r+1)·T/cp)"), "{notes}");
    assert!(!notes.contains("zigzag"), "{notes}");
    // label-targets ran on the reassembled labels: rank 0's last token predicts rank 1's first.
    let targets = pack["checks"].as_array().unwrap().iter().find(|c| c["id"] == "label-targets");
    assert_eq!(targets.map(|c| c["status"].clone()), Some("ok".into()), "{g}");

    // The same files under the default zigzag: slots of 5, 3 and 4 tokens do not split into
    // 2·cp = 4 chunks, so the group is refused. The layout is a fact of the stack.
    let o = run_expect(&["check", dir], 2);
    assert!(text(&o).contains("slot of 5 tokens is not divisible by 2*cp = 4"), "{}", text(&o));

    // The profile named by the files' metadata (a file in their folder) works as well as
    // --profile; one elsewhere is refused (a batch names no file outside its folder).
    let named = group([0..6, 6..12], &[("profile", "contiguous_stack.toml")]);
    contiguous_profile(named.path());
    run_expect(&["check", named.path().to_str().unwrap()], 0);
    let elsewhere = group([0..6, 6..12], &[("profile", profile)]);
    run_expect(&["check", elsewhere.path().to_str().unwrap()], 2);
    // So does the run's flag in the metadata (slime's --allgather-cp), which beats the profile.
    let flagged = group([0..6, 6..12], &[("cp_layout", "contiguous")]);
    run_expect(&["check", flagged.path().to_str().unwrap()], 0);
    let zigzag = group([0..6, 6..12], &[("cp_layout", "zigzag")]);
    run_expect(&["check", "--profile", profile, zigzag.path().to_str().unwrap()], 2);
    let bogus = group([0..6, 6..12], &[("cp_layout", "ring")]);
    let o = run_expect(&["check", bogus.path().to_str().unwrap()], 2);
    assert!(text(&o).contains("__metadata__.cp_layout"), "{}", text(&o));
}

#[test]
fn contiguous_pieces_that_overlap_leave_a_gap_or_are_unequal_are_named() {
    let profiles = tempfile::tempdir().unwrap();
    let profile = contiguous_profile(profiles.path());
    let profile = profile.to_str().unwrap();
    let check = |pieces: [std::ops::Range<usize>; 2]| -> (String, serde_json::Value) {
        let dir = group(pieces, &[]);
        let d = dir.path().to_str().unwrap();
        let o = run_expect(&["check", "--profile", profile, d], 1);
        let json = run_expect(&["check", "--json", "--profile", profile, d], 1);
        let g = group_report(&json);
        let c = g["report"]["packs"][0]["checks"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["id"] == "cp-shard")
            .cloned()
            .unwrap_or_else(|| panic!("no cp-shard in {g}"));
        assert_eq!(c["status"], "violated", "{g}");
        (text(&o), c["violation"].clone())
    };

    // The overlap bug: rank 0's end index is one too far, so token 6 is on both ranks.
    let (out, v) = check([0..7, 6..12]);
    assert!(out.contains("VIOLATED cp-shard"), "{out}");
    assert!(out.contains("contiguous"), "{out}");
    assert_eq!((v["at"]["rank"].as_u64(), v["at"]["token"].as_u64()), (Some(0), Some(6)), "{v}");
    assert_eq!(v["expected"], "held by rank 1 only (tokens 6..12 of the pack)", "{v}");
    assert_eq!(v["got"], "held by ranks 0 and 1", "{v}");
    assert!(v["note"].as_str().unwrap().contains("the contiguous pieces overlap"), "{v}");

    // A gap: token 5 is on no rank.
    let (_, v) = check([0..5, 6..12]);
    assert_eq!((v["at"]["rank"].as_u64(), v["at"]["token"].as_u64()), (Some(0), Some(5)), "{v}");
    assert_eq!(v["got"], "held by no rank", "{v}");

    // Unequal pieces that cover the pack once: 7 + 5 tokens.
    let (_, v) = check([0..7, 7..12]);
    assert_eq!((v["at"]["rank"].as_u64(), v["expected"].as_str()), (Some(0), Some("6")), "{v}");
    assert_eq!(v["got"], "7", "{v}");
    assert!(v["rule"].as_str().unwrap().contains("equal contiguous piece"), "{v}");
}

/// ring-flash-attn's varlen ring splits every sequence, and its ranks keep the local offsets
/// (`cu_seqlens / cp`): read as piece r of every slot.
#[test]
fn contiguous_pieces_of_every_slot_are_read_from_local_offsets() {
    let dir = tempfile::tempdir().unwrap();
    // Slots of 4, 2 and 6 tokens (every one a multiple of cp = 2): global offsets [0,4,6,12].
    let cu_local = [0, 2, 3, 6];
    let held = [[0usize, 1, 4, 6, 7, 8], [2, 3, 5, 9, 10, 11]];
    let (ids, _, _, _) = pack();
    // Position ids of the slots [4, 2, 6] (not of the pack's documents).
    let slot_pos = [0, 1, 2, 3, 0, 1, 0, 1, 2, 3, 4, 5];
    for (r, h) in held.iter().enumerate() {
        let take = |v: &[i64]| -> Vec<i64> { h.iter().map(|&g| v[g]).collect() };
        let bytes = write_ints(
            &[
                ("input_ids", vec![1, 6], take(&ids)),
                ("position_ids", vec![1, 6], take(&slot_pos)),
                ("cu_seqlens", vec![4], cu_local.to_vec()),
            ],
            &[("cp_rank", &r.to_string()), ("cp_size", "2"), ("cp_layout", "contiguous")],
        )
        .unwrap();
        std::fs::write(dir.path().join(format!("rank{r}.safetensors")), bytes).unwrap();
    }
    let o = run_expect(&["check", "--json", dir.path().to_str().unwrap()], 0);
    let g = group_report(&o);
    let pack = &g["report"]["packs"][0];
    assert_eq!(pack["facts"]["tokens"], 12, "{g}");
    assert!(pack["notes"].to_string().contains("piece r of every slot"), "{g}");
}

/// The ranks of one group share one layout.
#[test]
fn ranks_of_different_layouts_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let (_, _, _, cu) = pack();
    rank_file(dir.path(), 0, 2, &(0..6).collect::<Vec<_>>(), &cu, &[("cp_layout", "contiguous")]);
    rank_file(dir.path(), 1, 2, &(6..12).collect::<Vec<_>>(), &cu, &[]);
    let o = run_expect(&["check", dir.path().to_str().unwrap()], 2);
    assert!(text(&o).contains("rank 0 is split contiguous, rank 1 zigzag"), "{}", text(&o));
}

/// slime's `--allgather-cp` rank files of the real-code corpus (contiguous, stated in their
/// metadata) pass; read as the zigzag they are refused.
#[test]
fn slime_allgather_rank_files_pass_as_contiguous() {
    let dir = "corpus/real/batches/slime/thd_allgather_cp2";
    let o = run_expect(&["check", "--no-expect", dir], 0);
    assert!(text(&o).contains("contiguous: rank r holds tokens"), "{}", text(&o));
    // Without the metadata the slime profile's default (the zigzag of its get_batch) applies.
    let copy = tempfile::tempdir().unwrap();
    for r in 0..2 {
        let file =
            reader::tensors::BatchFile::read(&repo().join(format!("{dir}/rank{r}.safetensors")))
                .unwrap();
        let tensors: Vec<(String, Vec<usize>, Vec<i64>)> = file
            .keys()
            .map(|k| {
                let t = file.ints(k).unwrap();
                (k.to_owned(), t.shape, t.values)
            })
            .collect();
        let tensors: Vec<(&str, Vec<usize>, Vec<i64>)> =
            tensors.iter().map(|(k, s, v)| (k.as_str(), s.clone(), v.clone())).collect();
        let meta: Vec<(&str, &str)> = file
            .metadata()
            .iter()
            .filter(|(k, _)| *k != "cp_layout")
            .map(|(k, v)| (k.as_str(), v.as_str()))
            .collect();
        std::fs::write(
            copy.path().join(format!("rank{r}.safetensors")),
            write_ints(&tensors, &meta).unwrap(),
        )
        .unwrap();
    }
    let o = run_expect(&["check", copy.path().to_str().unwrap()], 2);
    assert!(text(&o).contains("not divisible by 2*cp = 4"), "{}", text(&o));
}

// ---- fuzz: the layout of the shards -------------------------------------------------------

/// A cp-split adapter built on the example splitter, with `body` defining `held(cu, cp, r)`:
/// the storage indices rank r holds, as a list of index lists.
fn splitter(body: &str) -> String {
    format!(
        "import sys\nsys.path.insert(0, 'adapters/python')\n\
         sys.path.insert(0, 'adapters/python/examples')\n\
         from thdcheck_adapter import serve_cp_split\nimport cp_split as c\n{body}\n\
         c.zigzag = held\nserve_cp_split(c.split)"
    )
}

/// The whole pack in cp pieces; `extra` tokens more at the end of every piece but the last.
fn whole_pack(extra: usize) -> String {
    splitter(&format!(
        "def held(cu, cp, r):\n    t = cu[-1]\n    \
         if t % cp: raise ValueError('the pack of %d tokens is not divisible by cp' % t)\n    \
         n = t // cp\n    return [list(range(r * n, min((r + 1) * n + {extra}, t)))]"
    ))
}

fn fuzz_json(args: &[&str], want: i32) -> serde_json::Value {
    let o = run_expect(&[&["fuzz"][..], args].concat(), want);
    serde_json::from_slice(&o.stdout).unwrap_or_else(|e| panic!("{e}: {}", text(&o)))
}

#[test]
fn fuzz_cp_split_follows_the_contiguous_layout() {
    let good = whole_pack(0);
    let args = |adapter: &str| -> Vec<String> {
        ["cp-split", "--json", "--cases", "64", "--cp-layout", "contiguous", "--", "python3", "-c"]
            .iter()
            .map(|s| s.to_string())
            .chain([adapter.to_owned()])
            .collect()
    };
    let run = |adapter: &str, want| {
        let a = args(adapter);
        fuzz_json(&a.iter().map(String::as_str).collect::<Vec<_>>(), want)
    };
    let v = run(&good, 0);
    assert_eq!(v["result"], "pass", "{v}");
    // Every slot in cp pieces (ring-flash-attn's varlen ring) is contiguous CP too.
    let per_slot = splitter(
        "def held(cu, cp, r):\n    out = []\n    for i in range(len(cu) - 1):\n        \
         s, e = cu[i], cu[i + 1]\n        \
         if (e - s) % cp: raise ValueError('slot %d not divisible by cp' % i)\n        \
         n = (e - s) // cp\n        out.append(list(range(s + r * n, s + (r + 1) * n)))\n    \
         return out",
    );
    assert_eq!(run(&per_slot, 0)["result"], "pass");

    // The overlap bug: caught by cp-shard, the request says it is contiguous.
    let v = run(&whole_pack(1), 1);
    let f = &v["failure"];
    assert_eq!(f["checks"], serde_json::json!(["cp-shard"]), "{v}");
    assert_eq!(f["request"]["cp_layout"], "contiguous", "{f}");
    assert!(f["request"]["input_ids"].as_array().unwrap().len() <= 4, "not shrunk: {f}");
    assert!(f["detail"].as_str().unwrap().contains("contiguous"), "{f}");

    // The zigzag example is no contiguous splitter (and refuses slots of cp tokens).
    let zigzag = ["cp-split", "--json", "--cases", "64", "--cp-layout", "contiguous", "--"];
    let v =
        fuzz_json(&[&zigzag[..], &["python3", "adapters/python/examples/cp_split.py"]].concat(), 1);
    assert_eq!(v["result"], "fail", "{v}");

    // The profile's cp_layout is the default; the option wins over it.
    let profiles = tempfile::tempdir().unwrap();
    let profile = contiguous_profile(profiles.path());
    let profile = profile.to_str().unwrap();
    let v = fuzz_json(
        &[
            "cp-split",
            "--json",
            "--cases",
            "32",
            "--profile",
            profile,
            "--",
            "python3",
            "-c",
            &good,
        ],
        0,
    );
    assert_eq!(v["result"], "pass", "{v}");
    let v = fuzz_json(
        &[
            "cp-split",
            "--json",
            "--cases",
            "32",
            "--profile",
            profile,
            "--cp-layout",
            "zigzag",
            "--",
            "python3",
            "-c",
            &good,
        ],
        1,
    );
    assert_eq!(v["failure"]["checks"], serde_json::json!(["cp-shard"]), "{v}");
    assert!(v["failure"]["request"].get("cp_layout").is_none(), "{v}");
}

/// Megatron-LM's per-sequence zigzag (`zigzag-sequence`, its pretraining path with
/// inter-document masking): the whole pack in 2·cp chunks, whatever its documents. The example
/// splitter passes under it and under the megatron_lm profile, whose `cp_layout` it is (the
/// fuzzers refused that profile before); the per-slot zigzag fails it and it fails the per-slot
/// zigzag; a planted bug (a rank's two chunks handed out in the wrong order) is caught by
/// `cp-shard` on a one-token-per-chunk pack; the loss fuzzer sends such shards too.
#[test]
fn fuzz_cp_split_and_loss_follow_the_whole_pack_zigzag() {
    let sequence = "adapters/python/examples/cp_split_sequence.py";
    let per_slot = "adapters/python/examples/cp_split.py";
    let split = |layout: &[&str], adapter: &str, want| {
        let args =
            [&["cp-split", "--json", "--cases", "64"][..], layout, &["--", "python3"]].concat();
        let mut args = args;
        if adapter.ends_with(".py") {
            args.push(adapter);
        } else {
            args.extend(["-c", adapter]);
        }
        fuzz_json(&args, want)
    };
    let v = split(&["--cp-layout", "zigzag-sequence"], sequence, 0);
    assert_eq!(v["result"], "pass", "{v}");
    let v = split(&["--profile", "megatron_lm"], sequence, 0);
    assert_eq!(v["result"], "pass", "{v}");
    let v = split(&["--cp-layout", "zigzag-sequence"], per_slot, 1);
    assert_eq!(v["failure"]["request"]["cp_layout"], "zigzag-sequence", "{v}");
    let v = split(&["--cp-layout", "zigzag"], sequence, 1);
    assert_eq!(v["failure"]["checks"], serde_json::json!(["cp-shard"]), "{v}");

    let reversed = splitter(
        "def held(cu, cp, r):\n    t = cu[-1]\n    \
         if cp == 1: return [list(range(t))]\n    \
         if t % (2 * cp): raise ValueError('not divisible')\n    h = t // (2 * cp)\n    \
         return [[c * h + k for c in (2 * cp - 1 - r, r) for k in range(h)]]",
    );
    let v = split(&["--cp-layout", "zigzag-sequence"], &reversed, 1);
    let f = &v["failure"];
    assert_eq!(f["checks"], serde_json::json!(["cp-shard"]), "{v}");
    assert!(f["detail"].as_str().unwrap().contains("of the whole pack"), "{f}");
    assert_eq!(f["request"]["cp_size"], 2, "not shrunk: {f}");
    assert_eq!(f["request"]["input_ids"].as_array().unwrap().len(), 4, "not shrunk: {f}");

    let loss = |adapter: &str, want| {
        fuzz_json(
            &[
                "loss",
                "--json",
                "--cases",
                "32",
                "--cp-layout",
                "zigzag-sequence",
                "--",
                "python3",
                adapter,
            ],
            want,
        )
    };
    assert_eq!(loss("adapters/python/examples/cp_loss.py", 0)["result"], "pass");
    let v = loss("adapters/python/examples/cp_loss_mean_of_rank_means.py", 1);
    assert_eq!(v["failure"]["request"]["cp_layout"], "zigzag-sequence", "{v}");
}

#[test]
fn fuzz_loss_sends_contiguous_shards() {
    let good = "adapters/python/examples/cp_loss.py";
    let v = fuzz_json(
        &["loss", "--json", "--cases", "32", "--cp-layout", "contiguous", "--", "python3", good],
        0,
    );
    assert_eq!(v["result"], "pass", "{v}");
    // A wrong reduction is still caught; its requests are contiguous: rank r holds piece r of
    // the pack, so the ranks' logits rows are equal in number and the labels read in order.
    let bad = "adapters/python/examples/cp_loss_mean_of_rank_means.py";
    let v = fuzz_json(
        &["loss", "--json", "--cases", "64", "--cp-layout", "contiguous", "--", "python3", bad],
        1,
    );
    let req = &v["failure"]["request"];
    assert_eq!(req["cp_layout"], "contiguous", "{v}");
    let ranks = req["ranks"].as_array().unwrap();
    let rows: Vec<usize> = ranks.iter().map(|r| r["logits"].as_array().unwrap().len()).collect();
    assert!(rows.iter().all(|&n| n == rows[0]), "{rows:?}");
}

/// Nanotron's layout: a `[B, S]` batch whose documents are where the position ids restart,
/// each rank keeping the contiguous piece `[r·S/cp, (r+1)·S/cp)` of every row beside the global
/// position ids of the rows. Rows `[11 12 13 2 | 21 22 23 24]` and `[25 2 31 32 | 2 41 42 43]`.
#[test]
fn contiguous_pieces_of_every_row_beside_global_positions_are_reassembled_row_by_row() {
    let dir = tempfile::tempdir().unwrap();
    let rows: [[i64; 8]; 2] = [[11, 12, 13, 2, 21, 22, 23, 24], [25, 2, 31, 32, 2, 41, 42, 43]];
    let pos: [[i64; 8]; 2] = [[0, 1, 2, 3, 0, 1, 2, 3], [0, 1, 0, 1, 2, 0, 1, 2]];
    // Shifted labels within each document (its last token trains nothing).
    let label = |b: usize, t: usize| -> i64 {
        if t + 1 < 8 && pos[b][t + 1] != 0 { rows[b][t + 1] } else { -100 }
    };
    let write = |name: &str, rank: usize, piece: usize| -> PathBuf {
        let sub = dir.path().join(name);
        std::fs::create_dir_all(&sub).unwrap();
        let take = |f: &dyn Fn(usize, usize) -> i64| -> Vec<i64> {
            (0..2)
                .flat_map(|b| (piece * 4..piece * 4 + 4).map(move |t| (b, t)))
                .map(|(b, t)| f(b, t))
                .collect()
        };
        let bytes = write_ints(
            &[
                ("input_ids", vec![2, 4], take(&|b, t| rows[b][t])),
                ("labels", vec![2, 4], take(&label)),
                ("position_ids", vec![2, 8], pos.iter().flatten().copied().collect()),
            ],
            &[
                ("cp_rank", &rank.to_string()),
                ("cp_size", "2"),
                ("profile", "nanotron"),
                ("causal", "true"),
            ],
        )
        .unwrap();
        let p = sub.join(format!("rank{rank}.safetensors"));
        std::fs::write(&p, bytes).unwrap();
        sub
    };
    let good = write("good", 0, 0);
    write("good", 1, 1);
    let o = run_expect(&["check", good.to_str().unwrap()], 0);
    assert!(text(&o).contains("of each of the 2 rows"), "{}", text(&o));
    // A splitter that hands rank 1 the first piece again (every token of it on two ranks): row
    // 1's document [31 32 2] crosses the pieces, and the label of 32 (the 2 of rank 1's true
    // piece) no longer predicts the token that follows it.
    let twice = write("twice", 0, 0);
    write("twice", 1, 0);
    let o = run_expect(&["check", twice.to_str().unwrap()], 1);
    assert!(text(&o).contains("VIOLATED label-targets"), "{}", text(&o));
}

/// A splitter that pads every sequence itself to the least multiple of `align·2·cp` (of `align`
/// at cp 1), as SkyRL's `preprocess_packed_seqs` does: it cannot take a slot of the request's
/// choosing, so it refuses unless the request's slots are its own round-up, then splits as the
/// example does.
fn own_slots(align: usize) -> String {
    format!(
        "import sys\nsys.path.insert(0, 'adapters/python')\n\
         sys.path.insert(0, 'adapters/python/examples')\n\
         from thdcheck_adapter import serve_cp_split\nimport cp_split as c\n\
         def split(batch, cp):\n    unit = {align} if cp == 1 else {align} * 2 * cp\n    \
         cu, pad = batch['cu_seqlens'], batch['cu_seqlens_padded']\n    \
         for i in range(len(cu) - 1):\n        n = cu[i + 1] - cu[i]\n        \
         own = -(-n // unit) * unit\n        \
         if pad[i + 1] - pad[i] != own:\n            \
         raise ValueError('slot %d: %d tokens; this splitter pads %d to %d' % (i, pad[i + 1] - pad[i], n, own))\n    \
         return c.split(batch, cp)\n\
         serve_cp_split(split)"
    )
}

/// `--cp-slot-align K` (a profile's `[fuzz] cp_slot_align`): every request's slots are the
/// splitter's own round-up, so a splitter that pads its own slots (SkyRL) is judged on its
/// split, not on slots it never takes (issue 26: the false alarm of SkyRL's fixed commits).
#[test]
fn fuzz_cp_split_gives_a_self_padding_splitter_its_own_slots() {
    for align in [1usize, 2] {
        let adapter = own_slots(align);
        let k = align.to_string();
        let run = |extra: &[&str], want| {
            let args: Vec<&str> = [&["cp-split", "--json", "--cases", "64"][..], extra]
                .concat()
                .into_iter()
                .chain(["--", "python3", "-c", &adapter])
                .collect();
            fuzz_json(&args, want)
        };
        let v = run(&["--cp-slot-align", &k], 0);
        assert_eq!(v["result"], "pass", "align {align}: {v}");
        // Without it, the request's own slots (a spare block, none at all) are refused, and
        // the refusal of a layout that could be split is `cp-split-accepted`.
        let v = run(&[], 1);
        assert_eq!(v["failure"]["checks"][0], "cp-split-accepted", "align {align}: {v}");
    }
    // The layouts whose slots are not per-sequence zigzag chunks are refused, exit 2.
    let o = thdcheck(&[
        "fuzz",
        "cp-split",
        "--cp-slot-align",
        "2",
        "--cp-layout",
        "contiguous",
        "--",
        "true",
    ]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(text(&o).contains("applies to the zigzag layout"), "{}", text(&o));
}

/// `[fuzz] cp_slot_align` and `--cp-slot-align` have one bound (1 to 1024) and one message,
/// whichever way the value comes (issue 37): a profile's 2^32 − 1 once aborted the command on
/// an allocation of about 100 GB. A profile's value is refused at load, exit 2, naming the
/// file, the line, the field and the value.
#[test]
fn cp_slot_align_has_one_bound_whichever_way_it_comes() {
    let dir = tempfile::tempdir().unwrap();
    let bound = "cp_slot_align is a factor from 1 to 1024";
    for value in ["4294967295", "4294967296", "2147483648", "1025", "0"] {
        let path = dir.path().join("big.toml");
        std::fs::write(&path, format!("name = \"big\"\n[fuzz]\ncp_slot_align = {value}\n"))
            .unwrap();
        let p = path.display().to_string();
        let o = run_expect(&["fuzz", "cp-split", "--cases", "2", "--profile", &p, "--", "true"], 2);
        let t = text(&o);
        assert!(t.contains(&format!("{p}:3")), "{value}: {t}");
        assert!(t.contains(&format!("cp_slot_align = {value}")) && t.contains(bound), "{t}");
        let o = run_expect(&["fuzz", "cp-split", "--cp-slot-align", value, "--", "true"], 2);
        let t = text(&o);
        assert!(t.contains(&format!("cp_slot_align = {value}")) && t.contains(bound), "{t}");
    }
}

/// `--cp-slot-align K` scales the documents with the slot: with K ≥ 12 no document of the
/// old 0..=12 tokens crossed a chunk (a chunk of a slot is K tokens or more), so the splitter
/// that rolls its labels after the split passed every case at K = 12 … 1024 (issue 37). Real K
/// is the tensor-parallel size (8 and 16 are common): the planted splitter fails at 16 and 64,
/// shrunk to one document one token longer than a chunk at cp 2, and the correct one passes.
#[test]
fn fuzz_cp_split_slot_align_documents_cross_the_chunks() {
    let run = |adapter: &str, k: &str, want| {
        fuzz_json(&["cp-split", "--json", "--cp-slot-align", k, "--", "python3", adapter], want)
    };
    for k in [16u64, 64] {
        let ks = k.to_string();
        let v = run("adapters/python/examples/cp_split_roll_after_split.py", &ks, 1);
        let f = &v["failure"];
        assert_eq!(f["checks"], serde_json::json!(["cp-labels"]), "K = {k}: {v}");
        assert_eq!(f["request"]["cp_size"], 2, "K = {k}: {f}");
        assert_eq!(f["request"]["cu_seqlens"], serde_json::json!([0, k + 1]), "K = {k}: {f}");
        let v = run("adapters/python/examples/cp_split.py", &ks, 0);
        assert_eq!(v["result"], "pass", "K = {k}: {v}");
    }
}
