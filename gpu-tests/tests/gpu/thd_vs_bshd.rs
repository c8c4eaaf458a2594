//! THD vs BSHD on the device under test (the ATTN invariant).
//!
//! A packed batch run through the oracle on the device must equal each sequence run alone
//! (the BSHD view) and the thd CPU fast path over the same pack; perturbing one segment must
//! leave every other segment's output bit-identical; rows that see no key give 0, never NaN.

use candle_core::{DType, Device, IndexOp, Result, Tensor};
use gpu_tests::check::{assert_close, assert_flash_rule, max_abs_diff};
use gpu_tests::data::GpuCase;
use gpu_tests::on_devices;
use oracle::tolerance::ATTENTION_F64;
use oracle::varlen_attention;

fn case(dev: &Device, causal: bool) -> GpuCase {
    let lens: &[u32] =
        if dev.is_cpu() { &[9, 1, 0, 24, 6] } else { &[300, 1, 0, 1024, 77, 512, 129] };
    GpuCase::new("pack", lens, 4, 2, 64).causal(causal)
}

/// Offsets of the sequences in the pack (the obvious running sum).
fn offsets(lens: &[u32]) -> Vec<usize> {
    lens.iter()
        .scan(0usize, |acc, &l| {
            let start = *acc;
            *acc += l as usize;
            Some(start)
        })
        .collect()
}

/// In f64: the pack on the device == each sequence alone on the CPU == thd's fast path.
fn packed_matches_each_sequence_alone(dev: &Device) -> Result<()> {
    for causal in [false, true] {
        let case = case(dev, causal);
        let lens = &case.seqlens_q;
        let (q, k, v) = case.qkv(7)?;
        let packed = varlen_attention(
            &q.to_device(dev)?,
            &k.to_device(dev)?,
            &v.to_device(dev)?,
            lens,
            lens,
            &case.spec(),
        )?;

        // BSHD view: every sequence alone, a batch of one.
        let mut alone = Vec::new();
        for (&start, &len) in offsets(lens).iter().zip(lens) {
            let rows = |t: &Tensor| t.narrow(0, start, len as usize);
            alone.push(varlen_attention(
                &rows(&q)?,
                &rows(&k)?,
                &rows(&v)?,
                &[len],
                &[len],
                &case.spec(),
            )?);
        }
        let alone = Tensor::cat(&alone, 0)?;
        let name = format!("pack_vs_each_alone causal={causal}");
        assert_close(&name, &packed, &alone, lens, ATTENTION_F64)?;

        let fast = case.thd_attention(&q, &k, &v)?;
        let name = format!("pack_vs_thd_fast_path causal={causal}");
        assert_close(&name, &packed, &fast, lens, ATTENTION_F64)?;
    }
    Ok(())
}
on_devices!(packed_matches_each_sequence_alone, cpu, cuda);

/// In f32: the oracle on the device and thd's f32 fast path on the CPU, both judged by the
/// FlashAttention rule against the f64 oracle, with the CPU oracle in f32 as the naive reference.
fn packed_f32_matches_thd_fast_path(dev: &Device) -> Result<()> {
    let case = case(dev, true);
    let lens = &case.seqlens_q;
    let (q, k, v) = case.qkv(11)?;
    let reference = varlen_attention(&q, &k, &v, lens, lens, &case.spec())?;
    let f32 = |t: &Tensor| t.to_dtype(DType::F32);
    let (q, k, v) = (f32(&q)?, f32(&k)?, f32(&v)?);
    let naive = varlen_attention(&q, &k, &v, lens, lens, &case.spec())?;
    let out = varlen_attention(
        &q.to_device(dev)?,
        &k.to_device(dev)?,
        &v.to_device(dev)?,
        lens,
        lens,
        &case.spec(),
    )?;
    assert_flash_rule("pack_f32_oracle_on_device", &out, &naive, &reference)?;
    let fast = case.thd_attention(&q, &k, &v)?;
    assert_flash_rule("pack_f32_thd_fast_path", &fast, &naive, &reference)?;
    Ok(())
}
on_devices!(packed_f32_matches_thd_fast_path, cpu, cuda);

/// Adding 1 to one segment's q, k and v changes that segment's rows and no other row, bit for
/// bit, in every dtype the device computes in.
fn perturbing_one_segment_changes_no_other(dev: &Device) -> Result<()> {
    let case = case(dev, true);
    let lens = &case.seqlens_q;
    let starts = offsets(lens);
    let target = 3; // the longest segment
    let (start, len) = (starts[target], lens[target] as usize);
    let (q, k, v) = case.qkv(13)?;
    let bump = |t: &Tensor| -> Result<Tensor> {
        let rows = t.narrow(0, start, len)?.affine(1.0, 1.0)?;
        t.slice_assign(&[start..start + len, 0..t.dim(1)?, 0..t.dim(2)?], &rows)
    };
    let (q2, k2, v2) = (bump(&q)?, bump(&k)?, bump(&v)?);
    for dtype in [DType::F64, DType::F32, DType::BF16] {
        let on = |t: &Tensor| t.to_dtype(dtype)?.to_device(dev);
        let before = varlen_attention(&on(&q)?, &on(&k)?, &on(&v)?, lens, lens, &case.spec())?;
        let after = varlen_attention(&on(&q2)?, &on(&k2)?, &on(&v2)?, lens, lens, &case.spec())?;
        for (i, (&s, &l)) in starts.iter().zip(lens).enumerate() {
            let l = l as usize;
            let diff = max_abs_diff(&before.narrow(0, s, l)?, &after.narrow(0, s, l)?)?;
            if i == target {
                assert!(diff > 0.0, "{dtype:?}: perturbing segment {i} did not change it");
            } else {
                assert!(
                    diff == 0.0,
                    "{dtype:?}: perturbing segment {target} changed segment {i} by {diff:e}"
                );
            }
        }
    }
    Ok(())
}
on_devices!(perturbing_one_segment_changes_no_other, cpu, cuda);

/// Sequence 1 has queries but no keys; sequence 2's first causal query (bottom-right aligned,
/// `sq > sk`) sees no key. Their rows are exactly 0 and nothing is NaN, in every dtype.
fn rows_without_keys_are_zero(dev: &Device) -> Result<()> {
    let mut case = GpuCase::new("no_keys", &[0, 3, 2], 2, 1, 8).causal(true);
    case.seqlens_k = vec![4, 0, 1];
    let (q, k, v) = case.qkv(17)?;
    for dtype in [DType::F64, DType::F32, DType::BF16, DType::F16] {
        let on = |t: &Tensor| t.to_dtype(dtype)?.to_device(dev);
        let out = varlen_attention(
            &on(&q)?,
            &on(&k)?,
            &on(&v)?,
            &case.seqlens_q,
            &case.seqlens_k,
            &case.spec(),
        )?;
        let out = out.to_dtype(DType::F64)?.to_device(&Device::Cpu)?;
        let all = out.flatten_all()?.to_vec1::<f64>()?;
        assert!(all.iter().all(|x| x.is_finite()), "{dtype:?}: non-finite output {all:?}");
        let empty = out.i(0..4)?.flatten_all()?.to_vec1::<f64>()?; // 3 rows of seq 1, first of seq 2
        assert!(empty.iter().all(|&x| x == 0.0), "{dtype:?}: rows without keys are {empty:?}");
        let last = out.i(4)?.flatten_all()?.to_vec1::<f64>()?;
        assert!(last.iter().any(|&x| x != 0.0), "{dtype:?}: the last query sees one key");
    }
    Ok(())
}
on_devices!(rows_without_keys_are_zero, cpu, cuda);
