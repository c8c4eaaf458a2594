//! GPU bench: the oracle's attention (GFLOP/s) and loss (tokens/s) on CUDA, at the size of
//! `tests/realistic.rs` (two 8192-token packs, H=32, KV=8, D=128, causal; vocabulary 32k).
//!
//! ```text
//! cargo bench -p gpu-tests --features cuda --bench gpu
//! GPU_BENCH_EXPORT=target/sdpa cargo bench -p gpu-tests --features cuda --bench gpu
//! python3 gpu-tests/bench/torch_sdpa.py target/sdpa/batch.safetensors
//! ```
//!
//! - useful GFLOP/s counts `4·H·D·Σ visible (query, key) pairs` (the exact causal triangle per
//!   sequence, see DESIGN "useful work"); hardware GFLOP/s counts what the oracle computes:
//!   every sequence padded to the longest, all `S_max²` pairs, masked or not.
//! - `GPU_BENCH_EXPORT=DIR` writes the batch (q, k, v in f32, cu_seqlens, the f64 oracle
//!   output) to `DIR/batch.safetensors` for `bench/torch_sdpa.py`, which times PyTorch's SDPA
//!   on the same batch and compares it with the oracle.
//! - `GPU_BENCH_ITERS` (default 5) sets the timed iterations after one warm-up.
//!
//! The oracle is a slow, obvious reference; these figures say what a GPU run of the test suite
//! costs, and how far it is from a real kernel (the torch script's figures), not that it is fast.

use std::collections::HashMap;
use std::time::Instant;

use candle_core::{DType, Device, Result, Tensor};
use gpu_tests::data::{GpuCase, REALISTIC_PACKS, logits_and_labels};
use oracle::{cross_entropy, varlen_attention};

const VOCAB: usize = 32_000;

/// Mean seconds per call of `f` over `iters` calls after one warm-up, synchronising the device.
fn time<T>(dev: &Device, iters: usize, mut f: impl FnMut() -> Result<T>) -> Result<f64> {
    f()?;
    dev.synchronize()?;
    let start = Instant::now();
    for _ in 0..iters {
        f()?;
    }
    dev.synchronize()?;
    Ok(start.elapsed().as_secs_f64() / iters as f64)
}

fn main() -> Result<()> {
    let dev = gpu_tests::device("cuda")?;
    let iters: usize =
        std::env::var("GPU_BENCH_ITERS").ok().and_then(|s| s.parse().ok()).unwrap_or(5);
    let lens: Vec<u32> = REALISTIC_PACKS.concat();
    let case = GpuCase::new("packs_2x8k_h32_kv8_d128", &lens, 32, 8, 128).causal(true);
    let s_max = *lens.iter().max().unwrap_or(&0) as f64;
    let hardware = 4.0 * (case.heads * case.head_dim) as f64 * lens.len() as f64 * s_max * s_max;
    println!(
        "attention: {} tokens in {} sequences (max {s_max}), H={} KV={} D={} causal",
        case.tokens_q(),
        lens.len(),
        case.heads,
        case.kv_heads,
        case.head_dim
    );
    println!(
        "{:<6} {:>10} {:>16} {:>18}",
        "dtype", "ms/iter", "useful GFLOP/s", "hardware GFLOP/s"
    );

    let (q, k, v) = case.qkv(31)?;
    for dtype in [DType::BF16, DType::F16, DType::F32, DType::F64] {
        let on = |t: &Tensor| t.to_dtype(dtype)?.to_device(&dev);
        let (qd, kd, vd) = (on(&q)?, on(&k)?, on(&v)?);
        let secs =
            time(&dev, iters, || varlen_attention(&qd, &kd, &vd, &lens, &lens, &case.spec()))?;
        println!(
            "{:<6} {:>10.2} {:>16.1} {:>18.1}",
            dtype.as_str(),
            secs * 1e3,
            case.useful_flops() / secs / 1e9,
            hardware / secs / 1e9
        );
    }

    let (logits, labels) = logits_and_labels(&lens, VOCAB, 3.0, 20, 37)?;
    println!("loss: {} tokens, vocabulary {VOCAB}", case.tokens_q());
    println!("{:<6} {:>10} {:>16} {:>14}", "dtype", "ms/iter", "Mtokens/s", "logits GB/s");
    for dtype in [DType::BF16, DType::F32] {
        let x = logits.to_dtype(dtype)?.to_device(&dev)?;
        let secs = time(&dev, iters, || cross_entropy(&x, &labels, &lens))?;
        let bytes = (x.elem_count() * dtype.size_in_bytes()) as f64;
        println!(
            "{:<6} {:>10.2} {:>16.2} {:>14.1}",
            dtype.as_str(),
            secs * 1e3,
            case.tokens_q() as f64 / secs / 1e6,
            bytes / secs / 1e9
        );
    }

    if let Ok(dir) = std::env::var("GPU_BENCH_EXPORT") {
        std::fs::create_dir_all(&dir).map_err(candle_core::Error::wrap)?;
        // The truth of exactly the exported (f32-rounded) inputs.
        let f32 = |t: &Tensor| t.to_dtype(DType::F32);
        let (q, k, v) = (f32(&q)?, f32(&k)?, f32(&v)?);
        let f64_on = |t: &Tensor| t.to_dtype(DType::F64)?.to_device(&dev);
        let truth =
            varlen_attention(&f64_on(&q)?, &f64_on(&k)?, &f64_on(&v)?, &lens, &lens, &case.spec())?;
        let mut cu = vec![0i64];
        for &l in &lens {
            cu.push(cu[cu.len() - 1] + i64::from(l));
        }
        let tensors: HashMap<String, Tensor> = [
            ("q", q),
            ("k", k),
            ("v", v),
            ("cu_seqlens", Tensor::new(cu, &Device::Cpu)?),
            ("causal", Tensor::new(&[u8::from(case.causal)], &Device::Cpu)?),
            ("out_oracle_f64", truth.to_device(&Device::Cpu)?),
        ]
        .into_iter()
        .map(|(name, t)| (name.to_string(), t))
        .collect();
        let path = std::path::Path::new(&dir).join("batch.safetensors");
        candle_core::safetensors::save(&tensors, &path)?;
        println!("exported {} (for gpu-tests/bench/torch_sdpa.py)", path.display());
    }
    Ok(())
}
