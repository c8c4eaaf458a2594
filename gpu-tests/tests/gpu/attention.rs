//! The oracle's attention on the device under test, in f64 / f32 / bf16 / f16, against the
//! oracle in f64 on the CPU.
//!
//! - f64 on the device must match the CPU within `ATTENTION_F64` (1e-12): the same sums in a
//!   different order (cuBLAS vs gemm).
//! - f32 / bf16 / f16 on the device are judged by the FlashAttention rule, with the oracle run
//!   on the CPU in the same dtype as the "naive" reference. On the CPU variant `out` and
//!   `naive` are the same computation, so the rule holds trivially: that variant only checks
//!   the body; the CUDA variant is the real test.

use candle_core::{DType, Device, Result};
use gpu_tests::check::{assert_close, assert_flash_rule};
use gpu_tests::data::GpuCase;
use gpu_tests::on_devices;
use oracle::varlen_attention;

/// Cases every device runs; small enough for the CPU variant to take well under a second.
fn small_cases() -> Vec<GpuCase> {
    let mut cases = Vec::new();
    for causal in [false, true] {
        cases.push(GpuCase::new("gqa_mixed_lengths", &[1, 7, 33, 0, 17], 4, 2, 32).causal(causal));
        cases.push(GpuCase::new("mqa_head_dim_40", &[5, 12], 3, 1, 40).causal(causal));
    }
    // Queries and keys of different lengths: with causal masking (bottom-right aligned) the
    // first queries of the second sequence see no key and must give 0, not NaN.
    let mut cross = GpuCase::new("cross_lengths", &[3, 8], 2, 2, 16).causal(true);
    cross.seqlens_k = vec![8, 3];
    cases.push(cross);
    cases
}

/// Cases only a GPU runs: lengths from FlashAttention's varlen grid, head_dim 128, GQA 4:1.
/// Capped at 512 tokens: the f64 and same-dtype references run on the CPU (the realistic size
/// is `realistic.rs`, which keeps its reference on the GPU).
fn gpu_cases() -> Vec<GpuCase> {
    [false, true]
        .into_iter()
        .map(|causal| {
            GpuCase::new("fa_grid_d128", &[1, 113, 128, 217, 256, 511, 512], 8, 2, 128)
                .causal(causal)
        })
        .collect()
}

fn cases(dev: &Device) -> Vec<GpuCase> {
    let mut cases = small_cases();
    if !dev.is_cpu() {
        cases.extend(gpu_cases());
    }
    cases
}

/// f64 on the device equals f64 on the CPU up to summation order.
fn attention_f64_matches_cpu(dev: &Device) -> Result<()> {
    for (seed, case) in cases(dev).iter().enumerate() {
        let (q, k, v) = case.qkv(seed as u64)?;
        let (sq, sk, spec) = (&case.seqlens_q, &case.seqlens_k, case.spec());
        let reference = varlen_attention(&q, &k, &v, sq, sk, &spec)?;
        let (qd, kd, vd) = (q.to_device(dev)?, k.to_device(dev)?, v.to_device(dev)?);
        let out = varlen_attention(&qd, &kd, &vd, sq, sk, &spec)?;
        assert_eq!(out.device().location(), dev.location());
        let name = format!("{}{}", case.name, if case.causal { "_causal" } else { "" });
        assert_close(&name, &out, &reference, sq, oracle::tolerance::ATTENTION_F64)?;
    }
    Ok(())
}
on_devices!(attention_f64_matches_cpu, cpu, cuda);

/// The oracle in `dtype` on `dev` against the f64 truth, by the FlashAttention rule.
fn flash_rule_holds(dev: &Device, dtype: DType) -> Result<()> {
    for (seed, case) in cases(dev).iter().enumerate() {
        let (q, k, v) = case.qkv(seed as u64)?;
        let (sq, sk, spec) = (&case.seqlens_q, &case.seqlens_k, case.spec());
        let reference = varlen_attention(&q, &k, &v, sq, sk, &spec)?;
        let (ql, kl, vl) = (q.to_dtype(dtype)?, k.to_dtype(dtype)?, v.to_dtype(dtype)?);
        let naive = varlen_attention(&ql, &kl, &vl, sq, sk, &spec)?;
        let (qd, kd, vd) = (ql.to_device(dev)?, kl.to_device(dev)?, vl.to_device(dev)?);
        let out = varlen_attention(&qd, &kd, &vd, sq, sk, &spec)?;
        assert_eq!(out.dtype(), dtype);
        let name = format!("{}{}", case.name, if case.causal { "_causal" } else { "" });
        assert_flash_rule(&name, &out, &naive, &reference)?;
    }
    Ok(())
}

fn attention_matches_oracle_f32(dev: &Device) -> Result<()> {
    flash_rule_holds(dev, DType::F32)
}
on_devices!(attention_matches_oracle_f32, cpu, cuda);

fn attention_matches_oracle_bf16(dev: &Device) -> Result<()> {
    flash_rule_holds(dev, DType::BF16)
}
on_devices!(attention_matches_oracle_bf16, cpu, cuda);

fn attention_matches_oracle_f16(dev: &Device) -> Result<()> {
    flash_rule_holds(dev, DType::F16)
}
on_devices!(attention_matches_oracle_f16, cpu, cuda);
