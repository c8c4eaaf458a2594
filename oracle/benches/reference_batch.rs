//! The reference-batch benchmark: THD fast path (`thd`) and oracle (`oracle`) attention on the
//! issue's reference batch, the scaling runs, and the packed loss.
//!
//! ```text
//! cargo bench -p oracle --bench reference_batch                  # everything
//! cargo bench -p oracle --bench reference_batch -- attn scale    # some groups: attn, oracle, scale, loss
//! ```
//!
//! Reference batch: 16 documents with the lengths of `bench/lengths.json`, H=8, KV=2, D=64,
//! causal; q, k, v standard normal from a seeded `StdRng`. Useful FLOPs =
//! Σ_docs 4·H·D·sᵢ(sᵢ+1)/2. Each figure is the median of timed runs after a warm-up. Besides the
//! table, every measurement is printed as one `BENCH {json}` line for `bench/run.sh`.
//! Threads: rayon's default (all cores; `RAYON_NUM_THREADS` overrides).

use std::time::Instant;

use candle_core::{DType, Device, Tensor};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use rand_distr::StandardNormal;
use thd::{AttnOptions, AttnShape, CuSeqlens, Float, LabelConvention, SeqLens};

const H: usize = 8;
const KV: usize = 2;
const D: usize = 64;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).filter(|a| !a.starts_with("--")).collect();
    let want = |g: &str| args.is_empty() || args.iter().any(|a| a == g);
    let lens = reference_lengths()?;
    println!(
        "reference batch: {} documents, T = {}, max len {}, H={H} KV={KV} D={D} causal, useful {:.3} GFLOP, {} threads",
        lens.len(),
        lens.iter().sum::<u32>(),
        lens.iter().max().unwrap_or(&0),
        useful_flops(&lens) / 1e9,
        std::env::var("RAYON_NUM_THREADS")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()))
    );
    println!("{:<44} {:>6} {:>10} {:>14}", "measurement", "dtype", "median s", "useful GFLOP/s");

    if want("attn") || want("oracle") {
        let batch = Batch::new(&lens, 1);
        let (_, fast64) = bench_fast::<f64>("attn fast_path", "ref16", &batch, 7)?;
        let (_, fast32) = bench_fast::<f32>("attn fast_path", "ref16", &batch, 9)?;
        if want("oracle") {
            let dev = Device::Cpu;
            let o64 = bench_oracle("attn oracle", "ref16", &batch, DType::F64, 3, &dev)?;
            let o32 = bench_oracle("attn oracle", "ref16", &batch, DType::F32, 3, &dev)?;
            let d64 = max_abs_diff(&fast64, &o64);
            let d32 = max_abs_diff(&fast32.iter().map(|&x| x as f64).collect::<Vec<_>>(), &o64);
            let n32 = max_abs_diff(&o32, &o64);
            println!(
                "check: max|fast_f64 - oracle_f64| = {d64:.2e} (gate 1e-12); max|fast_f32 - oracle_f64| = {d32:.2e} vs naive f32 {n32:.2e} (gate 2x + floor)"
            );
            emit(&format!(
                r#"{{"bench":"check","fast64_vs_oracle64":{d64:e},"fast32_vs_oracle64":{d32:e},"oracle32_vs_oracle64":{n32:e}}}"#
            ));
        }
    }
    if want("scale") {
        scaling(&lens)?;
    }
    if want("loss") {
        loss()?;
    }
    Ok(())
}

/// Lengths of `bench/lengths.json` (`{"lens": [..]}`), read without a JSON dependency.
fn reference_lengths() -> Result<Vec<u32>, Box<dyn std::error::Error>> {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../bench/lengths.json");
    let text = std::fs::read_to_string(path).map_err(|e| format!("{path}: {e}"))?;
    let list = text.split('[').nth(1).and_then(|s| s.split(']').next()).ok_or("no [..] list")?;
    Ok(list.split(',').map(|s| s.trim().parse()).collect::<Result<_, _>>()?)
}

/// Σ_docs 4·H·D·sᵢ(sᵢ+1)/2: the causal triangle, QKᵀ and PV.
fn useful_flops(lens: &[u32]) -> f64 {
    lens.iter().map(|&s| 4.0 * (H * D) as f64 * s as f64 * (s as f64 + 1.0) / 2.0).sum()
}

fn emit(json: &str) {
    println!("BENCH {json}");
}

/// q, k, v in f64 (standard normal, seeded) for a list of lengths.
struct Batch {
    lens: Vec<u32>,
    q: Vec<f64>,
    k: Vec<f64>,
    v: Vec<f64>,
}

impl Batch {
    fn new(lens: &[u32], seed: u64) -> Self {
        let t = lens.iter().sum::<u32>() as usize;
        let mut rng = StdRng::seed_from_u64(seed);
        let mut draw =
            |n: usize| -> Vec<f64> { (0..n).map(|_| rng.sample(StandardNormal)).collect() };
        let q = draw(t * H * D);
        let k = draw(t * KV * D);
        let v = draw(t * KV * D);
        Self { lens: lens.to_vec(), q, k, v }
    }

    fn tokens(&self) -> usize {
        self.lens.iter().sum::<u32>() as usize
    }
}

/// Median wall time of `runs` calls after one warm-up; returns (median, last output).
fn time<T>(runs: usize, mut f: impl FnMut() -> T) -> (f64, Vec<f64>, T) {
    let mut out = f();
    let mut ts = Vec::with_capacity(runs);
    for _ in 0..runs {
        let t0 = Instant::now();
        out = f();
        ts.push(t0.elapsed().as_secs_f64());
    }
    let mut sorted = ts.clone();
    sorted.sort_by(f64::total_cmp);
    (sorted[runs / 2], ts, out)
}

fn report(name: &str, case: &str, dtype: &str, lens: &[u32], median: f64, runs: &[f64]) {
    let gflops = useful_flops(lens) / median / 1e9;
    println!("{:<44} {dtype:>6} {median:>10.4} {gflops:>14.1}", format!("{name} {case}"));
    let runs: Vec<String> = runs.iter().map(|t| format!("{t:.5}")).collect();
    emit(&format!(
        r#"{{"bench":"{name}","case":"{case}","dtype":"{dtype}","n_docs":{},"T":{},"median_s":{median:.6},"useful_gflops":{gflops:.3},"runs":[{}]}}"#,
        lens.len(),
        lens.iter().sum::<u32>(),
        runs.join(",")
    ));
}

fn bench_fast<F: Float>(
    name: &str,
    case: &str,
    b: &Batch,
    runs: usize,
) -> Result<(f64, Vec<F>), Box<dyn std::error::Error>> {
    let cu: CuSeqlens = SeqLens::new(b.lens.clone()).to_cu_seqlens()?;
    let conv = |x: &[f64]| x.iter().map(|&y| F::from_f64(y)).collect::<Vec<F>>();
    let (q, k, v) = (conv(&b.q), conv(&b.k), conv(&b.v));
    let shape = AttnShape { heads: H, kv_heads: KV, head_dim: D };
    let opts = AttnOptions { causal: true, scale: None };
    let (med, ts, out) = time(runs, || thd::varlen_attention(&q, &k, &v, &cu, &cu, shape, &opts));
    report(name, case, F::NAME, &b.lens, med, &ts);
    Ok((med, out?))
}

fn bench_oracle(
    name: &str,
    case: &str,
    b: &Batch,
    dtype: DType,
    runs: usize,
    dev: &Device,
) -> Result<Vec<f64>, Box<dyn std::error::Error>> {
    let t = b.tokens();
    let q = Tensor::from_slice(&b.q, (t, H, D), dev)?.to_dtype(dtype)?;
    let k = Tensor::from_slice(&b.k, (t, KV, D), dev)?.to_dtype(dtype)?;
    let v = Tensor::from_slice(&b.v, (t, KV, D), dev)?.to_dtype(dtype)?;
    let spec = oracle::AttnSpec { causal: true, scale: None };
    let (med, ts, out) =
        time(runs, || oracle::varlen_attention(&q, &k, &v, &b.lens, &b.lens, &spec));
    let dt = if dtype == DType::F64 { "f64" } else { "f32" };
    report(name, case, dt, &b.lens, med, &ts);
    Ok(out?.to_dtype(DType::F64)?.flatten_all()?.to_vec1::<f64>()?)
}

fn max_abs_diff(a: &[f64], b: &[f64]) -> f64 {
    a.iter().zip(b).map(|(x, y)| (x - y).abs()).fold(0.0, f64::max)
}

/// The fast path on 16 documents, on the same lengths twice (32 documents), and on doubled
/// lengths: time must follow Σ sᵢ(sᵢ+1)/2, not T².
fn scaling(lens: &[u32]) -> Result<(), Box<dyn std::error::Error>> {
    let cases: [(&str, Vec<u32>); 3] = [
        ("ref16", lens.to_vec()),
        ("ref16x2=32docs", lens.iter().chain(lens).copied().collect()),
        ("ref16_doubled_lengths", lens.iter().map(|&s| 2 * s).collect()),
    ];
    let mut base: Option<(f64, f64, f64)> = None;
    for (case, l) in &cases {
        let b = Batch::new(l, 3);
        let (med, _) = bench_fast::<f32>("scale fast_path", case, &b, 5)?;
        let work: f64 = l.iter().map(|&s| s as f64 * (s as f64 + 1.0) / 2.0).sum();
        let t2 = (b.tokens() as f64).powi(2);
        match base {
            None => base = Some((med, work, t2)),
            Some((m0, w0, t0)) => println!(
                "  {case}: time x{:.2}, Σs(s+1)/2 x{:.2}, T² x{:.2}",
                med / m0,
                work / w0,
                t2 / t0
            ),
        }
    }
    Ok(())
}

/// Packed cross-entropy on logits [16384 × 32000] f32, 10% of labels -100.
fn loss() -> Result<(), Box<dyn std::error::Error>> {
    const T: usize = 16384;
    const V: usize = 32000;
    let mut rng = StdRng::seed_from_u64(2);
    let logits: Vec<f32> = (0..T * V).map(|_| rng.sample(StandardNormal)).collect();
    let labels: Vec<i64> = (0..T)
        .map(|_| if rng.random::<f64>() < 0.1 { -100 } else { rng.random_range(0..V as i64) })
        .collect();
    let ignored = labels.iter().filter(|&&y| y == -100).count();
    let (med, ts, out) =
        time(7, || thd::packed_cross_entropy(&logits, V, &labels, LabelConvention::Shifted));
    let out = out?;
    let gbps = (T * V * 4) as f64 / med / 1e9;
    println!(
        "{:<44} {:>6} {med:>10.4} {:>14}   {gbps:.1} GB/s of logits, mean loss {:.6}",
        "loss packed_cross_entropy [16384x32000]",
        "f32",
        "-",
        out.mean()
    );
    let runs: Vec<String> = ts.iter().map(|t| format!("{t:.5}")).collect();
    emit(&format!(
        r#"{{"bench":"loss packed_cross_entropy","dtype":"f32","T":{T},"V":{V},"n_ignored":{ignored},"median_s":{med:.6},"GBps_logits":{gbps:.3},"loss":{},"runs":[{}]}}"#,
        out.mean(),
        runs.join(",")
    ));
    Ok(())
}
