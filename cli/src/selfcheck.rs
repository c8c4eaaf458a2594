//! `thdcheck selfcheck`: the THD fast path (`thd`) against the BSHD oracle (`oracle`) on the
//! built-in cases, printed as a table.
//!
//! Per attention case: f64 fast path vs f64 oracle at `max|Δ| ≤ 1e-12`, and f32 fast path vs the
//! f64 oracle by the FlashAttention rule (naive reference: the oracle run in f32). Then the
//! packed loss vs the oracle's per-sequence cross-entropy in f64 and f32.

use anyhow::{Context, Result};
use candle_core::{DType, Device, Tensor};
use oracle::cases::{self, AttnCase};
use oracle::compare::compare;
use oracle::tolerance::{ToleranceClass, flash_rule, tolerance};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use rand_distr::StandardNormal;
use thd::{AttnOptions, AttnShape, Float, LabelConvention, SeqLens};

/// Runs every check and prints the table. `Ok(true)` when all of them pass.
pub fn run(seed: u64) -> Result<bool> {
    let dev = Device::Cpu;
    let mut all_ok = true;
    println!("thdcheck selfcheck: THD fast path vs BSHD oracle (seed {seed})\n");
    println!(
        "{:<18} {:>4} {:>6} {:>10} {:>6}  {:>11}  {:>22}  {:>6}  verdict",
        "case", "segs", "tokens", "H/KV/D", "mask", "f64 max|Δ|", "f32 max err / bound", "ratio"
    );
    for case in cases::small() {
        let row =
            attention_row(&case, seed, &dev).with_context(|| format!("case {}", case.name))?;
        all_ok &= row.ok;
        println!(
            "{:<18} {:>4} {:>6} {:>10} {:>6}  {:>11.2e}  {:>10.2e} / {:>9.2e}  {:>6.3}  {}",
            case.name,
            case.lens_q.len(),
            case.tokens_q(),
            format!("{}/{}/{}", case.heads, case.kv_heads, case.head_dim),
            if case.causal { "causal" } else { "bidir" },
            row.f64_max,
            row.f32_err,
            row.f32_bound,
            row.ratio,
            if row.ok { "ok" } else { "FAIL" },
        );
        for detail in row.details {
            println!("    {}", detail.replace('\n', "\n    "));
        }
    }

    println!();
    println!(
        "{:<20} {:>4} {:>6} {:>8}  {:>14} {:>15}  {:>9}  verdict",
        "loss case", "segs", "tokens", "vocab", "thd mean", "oracle mean", "|Δ|"
    );
    for (name, lens, vocab) in [
        ("loss_small", vec![5u32, 0, 7, 3], 11usize),
        ("loss_ignored", vec![1, 1, 1], 7),
        ("loss_wide_vocab", vec![33, 64, 1, 30], 1000),
    ] {
        for dtype in [DType::F64, DType::F32] {
            let row = loss_row(&lens, vocab, dtype, seed, &dev)
                .with_context(|| format!("loss case {name} ({})", dtype.as_str()))?;
            all_ok &= row.ok;
            println!(
                "{:<20} {:>4} {:>6} {:>8}  {:>14.9} {:>15.9}  {:>9.2e}  {}",
                format!("{name}/{}", dtype.as_str()),
                lens.len(),
                lens.iter().sum::<u32>(),
                vocab,
                row.thd,
                row.oracle,
                (row.thd - row.oracle).abs(),
                if row.ok { "ok" } else { "FAIL" },
            );
        }
    }
    println!();
    if all_ok {
        println!("verdict: ok (every check passed)");
    } else {
        println!("verdict: FAILED (see the rows marked FAIL)");
    }
    Ok(all_ok)
}

struct AttnRow {
    f64_max: f64,
    f32_err: f64,
    f32_bound: f64,
    ratio: f64,
    ok: bool,
    details: Vec<String>,
}

fn attention_row(case: &AttnCase, seed: u64, dev: &Device) -> Result<AttnRow> {
    let inputs = case.inputs(seed, DType::F64, dev)?;
    let spec = case.spec();
    let reference = oracle::varlen_attention(
        &inputs.q,
        &inputs.k,
        &inputs.v,
        &case.lens_q,
        &case.lens_k,
        &spec,
    )?;

    let out64 = fast_path::<f64>(case, &inputs.q, &inputs.k, &inputs.v)?;
    let report = compare(
        &format!("{} (thd f64 vs oracle f64)", case.name),
        &out64,
        &reference,
        &case.lens_q,
        tolerance(ToleranceClass::Attention, DType::F64),
    )?;
    let f64_max = report.max_abs.as_ref().map_or(0.0, |d| d.diff);

    let low = inputs.to_dtype(DType::F32)?;
    let naive =
        oracle::varlen_attention(&low.q, &low.k, &low.v, &case.lens_q, &case.lens_k, &spec)?;
    let out32 = fast_path::<f32>(case, &low.q, &low.k, &low.v)?;
    let flash = flash_rule(&out32, &naive, &reference)?;

    let mut details = Vec::new();
    if !report.passed() {
        details.push(report.to_string());
    }
    if !flash.passed() {
        details.push(format!("{} (thd f32): {flash}", case.name));
    }
    Ok(AttnRow {
        f64_max,
        f32_err: flash.max_err,
        f32_bound: flash.bound,
        ratio: flash.mean_ratio(),
        ok: report.passed() && flash.passed(),
        details,
    })
}

/// Runs `thd::varlen_attention` in `F` on the case's tensors and returns `[Tq, H, D]` in `F`.
fn fast_path<F: Float + candle_core::WithDType>(
    case: &AttnCase,
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
) -> Result<Tensor> {
    let flat = |t: &Tensor| -> Result<Vec<F>> { Ok(t.flatten_all()?.to_vec1::<F>()?) };
    let cu_q = SeqLens::new(case.lens_q.clone()).to_cu_seqlens()?;
    let cu_k = SeqLens::new(case.lens_k.clone()).to_cu_seqlens()?;
    let shape = AttnShape { heads: case.heads, kv_heads: case.kv_heads, head_dim: case.head_dim };
    let opts = AttnOptions { causal: case.causal, scale: None };
    let out = thd::varlen_attention(&flat(q)?, &flat(k)?, &flat(v)?, &cu_q, &cu_k, shape, &opts)?;
    Ok(Tensor::from_vec(out, q.dims(), q.device())?)
}

struct LossRow {
    thd: f64,
    oracle: f64,
    ok: bool,
}

/// Seeded logits and raw labels (about 1 in 5 ignored); the collator's labels carry -100 at
/// every sequence start, and the oracle shifts within each sequence on its own.
fn loss_row(lens: &[u32], vocab: usize, dtype: DType, seed: u64, dev: &Device) -> Result<LossRow> {
    let mut rng = StdRng::seed_from_u64(seed ^ 0x10_55);
    let tokens: usize = lens.iter().map(|&s| s as usize).sum();
    let logits: Vec<f64> =
        (0..tokens * vocab).map(|_| 3.0 * rng.sample::<f64, _>(StandardNormal)).collect();
    let raw: Vec<i64> = (0..tokens)
        .map(|_| {
            if rng.random_ratio(1, 5) {
                thd::IGNORE_INDEX
            } else {
                rng.random_range(0..vocab as i64)
            }
        })
        .collect();
    let mut collated = raw.clone();
    let mut start = 0;
    for &s in lens {
        if s > 0 {
            collated[start] = thd::IGNORE_INDEX;
        }
        start += s as usize;
    }
    let logits = Tensor::from_vec(logits, (tokens, vocab), dev)?.to_dtype(dtype)?;
    let expected = oracle::cross_entropy(&logits.to_dtype(DType::F64)?, &raw, lens)?.mean();
    let got = match dtype {
        DType::F32 => {
            let flat = logits.flatten_all()?.to_vec1::<f32>()?;
            thd::packed_cross_entropy(&flat, vocab, &collated, LabelConvention::Unshifted)?
        }
        _ => {
            let flat = logits.flatten_all()?.to_vec1::<f64>()?;
            thd::packed_cross_entropy(&flat, vocab, &collated, LabelConvention::Unshifted)?
        }
    }
    .mean();
    let ok = tolerance(ToleranceClass::Loss, dtype).allows(got, expected);
    Ok(LossRow { thd: got, oracle: expected, ok })
}
