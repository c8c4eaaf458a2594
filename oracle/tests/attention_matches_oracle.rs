//! ATTN: `thd::varlen_attention` (the THD fast path) equals the oracle's BSHD attention.
//!
//! - f64 vs f64: `max|Δ| ≤ 1e-12` over the `small()` cases and a sampled grid (lengths 0, 1, 2,
//!   127, 128, 129, 1023; 1 to 12 sequences; head dims 8, 59, 64, 111, 128; MHA, GQA, MQA;
//!   causal and bidirectional; sq == sk, sq < sk, sq > sk).
//! - f32 fast path vs the f64 oracle by the FlashAttention rule, mean-error ratio printed.
//! - Isolation: perturbing segment j's q/k/v rows leaves every other output row bit-identical.

use candle_core::{DType, Device, Tensor, WithDType};
use oracle::cases::{AttnInputs, GridCase};
use oracle::compare::compare;
use oracle::tolerance::{ATTENTION_F64, flash_rule};
use oracle::varlen_attention;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

const DEV: Device = Device::Cpu;

/// The THD fast path on a case's inputs, as a `[Tq, H, D]` tensor of `F`.
fn thd_attention<F: thd::Float + WithDType>(case: &GridCase, x: &AttnInputs) -> Tensor {
    let data = |t: &Tensor| t.flatten_all().unwrap().to_vec1::<F>().unwrap();
    let out = thd_on_slices(case, &data(&x.q), &data(&x.k), &data(&x.v));
    Tensor::from_vec(out, x.q.dims(), &DEV).unwrap()
}

fn thd_on_slices<F: thd::Float>(case: &GridCase, q: &[F], k: &[F], v: &[F]) -> Vec<F> {
    let cu = |lens: &[u32]| thd::SeqLens::new(lens.to_vec()).to_cu_seqlens().unwrap();
    let shape =
        thd::AttnShape { heads: case.heads, kv_heads: case.kv_heads, head_dim: case.head_dim };
    let opts = thd::AttnOptions { causal: case.causal, ..Default::default() };
    thd::varlen_attention(q, k, v, &cu(&case.lens_q), &cu(&case.lens_k), shape, &opts)
        .unwrap_or_else(|e| panic!("{case}: thd refused: {e}"))
}

fn oracle_attention(case: &GridCase, x: &AttnInputs) -> Tensor {
    varlen_attention(&x.q, &x.k, &x.v, &case.lens_q, &case.lens_k, &case.spec())
        .unwrap_or_else(|e| panic!("{case}: oracle refused: {e}"))
}

const EDGE_LENS: [u32; 6] = [0, 1, 2, 127, 128, 129];
const HEAD_DIMS: [usize; 5] = [8, 59, 64, 111, 128];
const HEAD_LAYOUTS: [(usize, usize, &str); 3] = [(4, 4, "mha"), (6, 2, "gqa"), (4, 1, "mqa")];

/// Every (head dim, head layout, causal) combination once, with 1 to 12 sequences whose lengths
/// are mostly tile edges, and key lengths equal to, longer or shorter than the query lengths;
/// plus a few 1023/1024-token cases (the full product would take minutes in f64).
fn grid() -> Vec<GridCase> {
    let mut rng = StdRng::seed_from_u64(7);
    let mut cases = Vec::new();
    for (i, &head_dim) in HEAD_DIMS.iter().enumerate() {
        for (j, &(heads, kv_heads, layout)) in HEAD_LAYOUTS.iter().enumerate() {
            for causal in [false, true] {
                let n = rng.random_range(1..=12);
                let lens_q: Vec<u32> = (0..n)
                    .map(|_| {
                        if rng.random_bool(0.6) {
                            EDGE_LENS[rng.random_range(0..EDGE_LENS.len())]
                        } else {
                            rng.random_range(3..=100)
                        }
                    })
                    .collect();
                let (relation, lens_k): (&str, Vec<u32>) = match (i + j + usize::from(causal)) % 3 {
                    0 => ("sq_eq_sk", lens_q.clone()),
                    1 => {
                        ("sq_lt_sk", lens_q.iter().map(|&s| s + rng.random_range(0..=40)).collect())
                    }
                    _ => (
                        "sq_gt_sk",
                        lens_q
                            .iter()
                            .map(|&s| s.saturating_sub(rng.random_range(0..=40)))
                            .collect(),
                    ),
                };
                let mode = if causal { "causal" } else { "bidir" };
                let name = format!("grid_d{head_dim}_{layout}_{mode}_{relation}");
                let summary = format!("{n} sequences, {relation}");
                cases.push(
                    GridCase::new(name, summary, &lens_q, heads, kv_heads, head_dim, causal)
                        .with_lens_k(&lens_k),
                );
            }
        }
    }
    let c = GridCase::new;
    cases.extend([
        c("long_1023_causal", "1023 tokens beside a short one, MHA", &[1023, 5], 2, 2, 64, true),
        c("long_1023_bidir_gqa", "1023 tokens between short ones", &[3, 1023, 0], 4, 2, 128, false),
        c("long_1023_q_1024_k", "causal, one key more than queries", &[1023], 2, 1, 59, true)
            .with_lens_k(&[1024]),
        c("long_1024_q_1023_k", "causal, one query more than keys", &[1024, 2], 2, 1, 111, true)
            .with_lens_k(&[1023, 2]),
    ]);
    cases
}

fn check_f64(cases: &[GridCase]) {
    let mut failures = Vec::new();
    let mut worst = 0.0f64;
    for (seed, case) in cases.iter().enumerate() {
        let x = case.inputs(seed as u64, DType::F64, &DEV).unwrap();
        let name = format!("attention f64 {case}");
        let report = compare(
            &name,
            &thd_attention::<f64>(case, &x),
            &oracle_attention(case, &x),
            &case.lens_q,
            ATTENTION_F64,
        )
        .unwrap();
        worst = worst.max(report.max_abs.as_ref().map_or(0.0, |d| d.diff));
        if !report.passed() {
            failures.push(report.to_string());
        }
    }
    println!("{} cases, worst |thd − oracle| = {worst:.3e}", cases.len());
    assert!(
        failures.is_empty(),
        "{} of {} cases failed:\n{}",
        failures.len(),
        cases.len(),
        failures.join("\n")
    );
}

#[test]
fn attention_matches_oracle_f64_small_cases() {
    check_f64(&oracle::cases::small());
}

#[test]
fn attention_matches_oracle_f64_grid() {
    let cases = grid();
    // The grid covers what it claims to.
    let lens: Vec<u32> =
        cases.iter().flat_map(|c| c.lens_q.iter().chain(&c.lens_k).copied()).collect();
    for want in [0, 1, 2, 127, 128, 129, 1023] {
        assert!(lens.contains(&want), "grid lacks length {want}");
    }
    let counts: Vec<usize> = cases.iter().map(|c| c.lens_q.len()).collect();
    assert!(counts.contains(&1) && counts.iter().any(|&n| n >= 10), "{counts:?}");
    check_f64(&cases);
}

#[test]
fn attention_matches_oracle_f32_by_flash_rule() {
    let mut cases = oracle::cases::small();
    cases.extend(
        grid().into_iter().filter(|c| c.head_dim == 128 || c.name.starts_with("long_1023_causal")),
    );
    let mut failures = Vec::new();
    for (seed, case) in cases.iter().enumerate() {
        // Inputs drawn in f32 so that the f64 truth sees exactly the same numbers.
        let x32 = case.inputs(100 + seed as u64, DType::F32, &DEV).unwrap();
        let truth = oracle_attention(case, &x32.to_dtype(DType::F64).unwrap());
        let naive = oracle_attention(case, &x32);
        let out = thd_attention::<f32>(case, &x32);
        let report = flash_rule(&out, &naive, &truth).unwrap();
        let at = oracle::compare::locate(&case.lens_q, out.dims(), report.worst);
        println!("{}: {report}; worst at {at}", case.name);
        if !report.passed() {
            failures.push(format!("{case}: {report}; worst at {at}"));
        }
    }
    assert!(failures.is_empty(), "FlashAttention rule failed:\n{}", failures.join("\n"));
}

/// Perturbs the q rows and the k/v rows of segment `j` of a case's inputs.
fn perturb_segment(case: &GridCase, x: &AttnInputs, j: usize) -> AttnInputs {
    let start = |lens: &[u32]| lens[..j].iter().map(|&s| s as usize).sum::<usize>();
    let bump = |t: &Tensor, lens: &[u32]| -> Tensor {
        let (rows, heads, dim) = t.dims3().unwrap();
        let (s, n) = (start(lens), lens[j] as usize);
        let mut data = t.flatten_all().unwrap().to_vec1::<f64>().unwrap();
        for (i, e) in data[s * heads * dim..(s + n) * heads * dim].iter_mut().enumerate() {
            *e += 0.25 + (i % 7) as f64 * 0.5;
        }
        Tensor::from_vec(data, (rows, heads, dim), &DEV).unwrap()
    };
    AttnInputs {
        q: bump(&x.q, &case.lens_q),
        k: bump(&x.k, &case.lens_k),
        v: bump(&x.v, &case.lens_k),
    }
}

#[test]
fn attention_segments_are_isolated() {
    let c = GridCase::new;
    let cases = [
        c("isolation_causal_gqa", "five segments, one empty", &[5, 0, 7, 3, 9], 4, 2, 8, true),
        c("isolation_bidir_mqa", "four segments", &[6, 1, 4, 8], 3, 1, 5, false),
        c("isolation_sq_ne_sk", "causal, uneven q/k", &[4, 2, 6], 2, 2, 8, true)
            .with_lens_k(&[6, 2, 3]),
    ];
    for case in &cases {
        let x = case.inputs(7, DType::F64, &DEV).unwrap();
        let base = thd_attention::<f64>(case, &x).flatten_all().unwrap().to_vec1::<f64>().unwrap();
        let row = case.heads * case.head_dim;
        for j in 0..case.lens_q.len() {
            let y = perturb_segment(case, &x, j);
            let out =
                thd_attention::<f64>(case, &y).flatten_all().unwrap().to_vec1::<f64>().unwrap();
            let (s, n) = (case.lens_q[..j].iter().sum::<u32>() as usize, case.lens_q[j] as usize);
            for (i, (a, b)) in out.iter().zip(&base).enumerate() {
                let token = i / row;
                if token < s || token >= s + n {
                    assert_eq!(
                        a.to_bits(),
                        b.to_bits(),
                        "{case}: perturbing segment {j} changed token {token}"
                    );
                }
            }
            if n > 0 && case.lens_k[j] > 0 {
                let changed = out[s * row..(s + n) * row] != base[s * row..(s + n) * row];
                assert!(changed, "{case}: perturbing segment {j} did not change it");
            }
        }
    }
}
