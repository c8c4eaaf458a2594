//! Throughput of `thdcheck check` on a 1M-token batch and of `thdcheck fuzz packer` against the
//! example Python packer (a bench binary, not timed tests):
//!
//! ```text
//! cargo bench -p thdcheck --bench throughput
//! ```
//!
//! Target for the layout checks: ≥ 1e8 tokens/s.

use std::hint::black_box;
use std::path::Path;
use std::process::Command;
use std::time::Instant;

use reader::checks::check_pack;
use reader::formats::{ReadOptions, parse};
use reader::tensors::{BatchFile, write_ints};
use reader::{CheckOptions, check_bytes};

const TOKENS: usize = 1 << 20;

/// A valid HF batch of `TOKENS` tokens: documents of 1..=4096 tokens (a fixed LCG), labels
/// with -100 at each start, restarting position ids, a full attention mask and seq_idx.
fn batch_bytes() -> Vec<u8> {
    let mut cu = vec![0i64];
    let mut s = 0x2545_f491_4f6c_dd1du64;
    while *cu.last().unwrap_or(&0) < TOKENS as i64 {
        s = s.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        let len = 1 + ((s >> 33) % 4096) as i64;
        cu.push((cu.last().unwrap_or(&0) + len).min(TOKENS as i64));
    }
    let mut ids = Vec::with_capacity(TOKENS);
    let mut labels = Vec::with_capacity(TOKENS);
    let mut pos = Vec::with_capacity(TOKENS);
    let mut seq_idx = Vec::with_capacity(TOKENS);
    for (i, w) in cu.windows(2).enumerate() {
        for j in 0..(w[1] - w[0]) {
            let t = 1 + (w[0] + j) % 30_000;
            ids.push(t);
            labels.push(if j == 0 { -100 } else { t });
            pos.push(j);
            seq_idx.push(i as i64);
        }
    }
    let max = cu.windows(2).map(|w| w[1] - w[0]).max().unwrap_or(0);
    write_ints(
        &[
            ("input_ids", vec![1, TOKENS], ids),
            ("labels", vec![1, TOKENS], labels),
            ("position_ids", vec![1, TOKENS], pos),
            ("attention_mask", vec![1, TOKENS], vec![1; TOKENS]),
            ("seq_idx", vec![1, TOKENS], seq_idx),
            ("cu_seq_lens_q", vec![cu.len()], cu.clone()),
            ("cu_seq_lens_k", vec![cu.len()], cu),
            ("max_length_q", vec![], vec![max]),
        ],
        &[],
    )
    .expect("valid batch")
}

/// Best of `reps` runs, in seconds.
fn best(reps: usize, mut f: impl FnMut()) -> f64 {
    (0..reps)
        .map(|_| {
            let t = Instant::now();
            f();
            t.elapsed().as_secs_f64()
        })
        .fold(f64::INFINITY, f64::min)
}

fn main() {
    let bytes = batch_bytes();
    let file = BatchFile::from_bytes(bytes.clone()).expect("parses");
    let parsed = parse(file.clone(), &ReadOptions::default()).expect("understood");
    let pack = &parsed.packs[0];
    let opts = CheckOptions::default();
    let report = check_pack(pack, &opts);
    assert!(report.checks.iter().all(|c| c.status != reader::checks::Status::Violated));
    println!(
        "batch: {} tokens, {} segments, {:.1} MiB safetensors",
        pack.tokens(),
        pack.segments(),
        bytes.len() as f64 / (1 << 20) as f64
    );

    let rate = |s: f64| TOKENS as f64 / s;
    let t_checks = best(20, || {
        black_box(check_pack(black_box(pack), &opts));
    });
    let t_read = best(10, || {
        black_box(BatchFile::from_bytes(black_box(bytes.clone())).expect("parses"));
    });
    let t_parse = best(10, || {
        black_box(parse(black_box(file.clone()), &ReadOptions::default()).expect("understood"));
    });
    let t_all = best(10, || {
        black_box(
            check_bytes(black_box(bytes.clone()), &ReadOptions::default(), &opts).expect("ok"),
        );
    });
    println!(
        "layout checks (check_pack)      {:>8.2} ms  {:.2e} tokens/s",
        t_checks * 1e3,
        rate(t_checks)
    );
    println!(
        "safetensors header + index      {:>8.2} ms  {:.2e} tokens/s",
        t_read * 1e3,
        rate(t_read)
    );
    println!(
        "dialect + decode to packs       {:>8.2} ms  {:.2e} tokens/s",
        t_parse * 1e3,
        rate(t_parse)
    );
    println!(
        "check_bytes end to end          {:>8.2} ms  {:.2e} tokens/s",
        t_all * 1e3,
        rate(t_all)
    );
    println!(
        "target ≥ 1e8 tokens/s for the layout checks: {}",
        if rate(t_checks) >= 1e8 { "met" } else { "NOT met" }
    );

    // fuzz packer against the example Python packer, through the real binary.
    let adapter =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../adapters/python/examples/greedy_packer.py");
    let out = Command::new(env!("CARGO_BIN_EXE_thdcheck"))
        .args(["fuzz", "packer", "--json", "--cases", "2000", "--", "python3"])
        .arg(&adapter)
        .output();
    match out {
        Ok(o) if o.status.success() => {
            let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap_or_default();
            println!(
                "fuzz packer (greedy_packer.py, 2 requests per case): {} cases in {:.2} s, {:.0} cases/s",
                v["cases"],
                v["elapsed_s"].as_f64().unwrap_or(0.0),
                v["cases_per_s"].as_f64().unwrap_or(0.0)
            );
        }
        Ok(o) => println!(
            "fuzz packer: exit {:?}: {}",
            o.status.code(),
            String::from_utf8_lossy(&o.stderr)
        ),
        Err(e) => println!("fuzz packer: cannot run python3: {e}"),
    }
}
