//! A realistic-size case, CUDA only: two 8192-token packs of causal GQA attention (H=32, KV=8,
//! D=128) and their loss over a 32k vocabulary. Too slow for CPU CI (about 2 TFLOP of f64
//! work with the oracle's padding), seconds on an H100.
//!
//! The f64 truth is the oracle in f64 *on the GPU*, itself checked against the thd CPU fast
//! path on the short segments (cheap on the CPU); the low dtypes are checked against it with
//! the fixed attention tolerances and the mean error is printed.

use candle_core::{DType, Device, Result, Tensor};
use gpu_tests::check::{assert_close, assert_scalar_close};
use gpu_tests::data::{AttnCase, REALISTIC_PACKS, logits_and_labels};
use gpu_tests::on_devices;
use oracle::tolerance::{ATTENTION_F64, Check, tolerance};
use oracle::{cross_entropy, varlen_attention};

fn realistic_case() -> AttnCase {
    let lens: Vec<u32> = REALISTIC_PACKS.concat();
    let mut case = AttnCase::new("packs_2x8k_h32_kv8_d128", &lens, 32, 8, 128).causal(true);
    case.seqlens_k = lens;
    case
}

fn realistic_attention(dev: &Device) -> Result<()> {
    let case = realistic_case();
    let lens = &case.seqlens_q;
    let (q, k, v) = case.qkv(31)?;
    let on = |t: &Tensor, dtype| t.to_dtype(dtype)?.to_device(dev);
    let truth = varlen_attention(
        &on(&q, DType::F64)?,
        &on(&k, DType::F64)?,
        &on(&v, DType::F64)?,
        lens,
        lens,
        &case.spec(),
    )?;

    // The f64 device result on the short segments (≤ 700 tokens) vs thd's f64 CPU fast path.
    let mut start = 0;
    for &len in lens {
        let l = len as usize;
        if len <= 700 {
            let rows = |t: &Tensor| t.narrow(0, start, l);
            let one = AttnCase { seqlens_q: vec![len], seqlens_k: vec![len], ..case.clone() };
            let (shape, opts) = one.thd_shape();
            let cu =
                thd::SeqLens::new(vec![len]).to_cu_seqlens().map_err(candle_core::Error::wrap)?;
            let flat = |t: Tensor| t.flatten_all()?.to_vec1::<f64>();
            let fast = thd::varlen_attention(
                &flat(rows(&q)?)?,
                &flat(rows(&k)?)?,
                &flat(rows(&v)?)?,
                &cu,
                &cu,
                shape,
                &opts,
            )
            .map_err(candle_core::Error::wrap)?;
            let fast = Tensor::from_vec(fast, (l, case.heads, case.head_dim), &Device::Cpu)?;
            assert_close(
                &format!("segment_{len}_f64_vs_thd"),
                &truth.narrow(0, start, l)?,
                &fast,
                &[len],
                ATTENTION_F64,
            )?;
        }
        start += l;
    }

    for dtype in [DType::F32, DType::BF16, DType::F16] {
        let out = varlen_attention(
            &on(&q, dtype)?,
            &on(&k, dtype)?,
            &on(&v, dtype)?,
            lens,
            lens,
            &case.spec(),
        )?;
        assert_close(
            &format!("{}_{dtype:?}", case.name),
            &out,
            &truth,
            lens,
            tolerance(Check::Attention, dtype),
        )?;
    }
    Ok(())
}
on_devices!(realistic_attention, cuda);

fn realistic_loss(dev: &Device) -> Result<()> {
    let lens: Vec<u32> = REALISTIC_PACKS.concat();
    let (logits, labels) = logits_and_labels(&lens, 32_000, 3.0, 20, 37)?;
    let logits = logits.to_dtype(DType::F32)?;
    let on_dev = cross_entropy(&logits.to_device(dev)?, &labels, &lens)?;
    let flat = logits.flatten_all()?.to_vec1::<f32>()?;
    let fast = thd::packed_cross_entropy(&flat, 32_000, &labels, thd::LabelConvention::Unshifted)
        .map_err(candle_core::Error::wrap)?;
    assert_eq!(on_dev.count, fast.count);
    assert_scalar_close(
        "loss_16k_tokens_v32k_vs_thd",
        dev,
        on_dev.mean(),
        fast.mean(),
        tolerance(Check::Loss, DType::F32),
    );
    Ok(())
}
on_devices!(realistic_loss, cuda);
