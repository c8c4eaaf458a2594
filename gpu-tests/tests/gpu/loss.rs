//! The oracle's cross-entropy on the device under test (the LOSS invariant), and the loss
//! reassembled from sums computed piecewise on the device (what CP ranks and micro-batches do).

use candle_core::{DType, Device, Result, Tensor};
use gpu_tests::check::assert_scalar_close;
use gpu_tests::data::logits_and_labels;
use gpu_tests::on_devices;
use oracle::tolerance::{ToleranceClass, tolerance};
use oracle::{CrossEntropy, Tolerance, cross_entropy};

/// Both sides accumulate in f64 from the same low-precision logits: only the order differs.
const SAME_INPUT: Tolerance = Tolerance::new(1e-12, 1e-12);

fn pack(dev: &Device) -> (Vec<u32>, usize) {
    if dev.is_cpu() {
        (vec![5, 1, 0, 40, 18], 96)
    } else {
        (vec![700, 1, 0, 2048, 333, 1015], 32_000)
    }
}

/// For each dtype: the loss on the device equals the CPU oracle on the same (rounded) logits,
/// and the f64 truth within the dtype's loss tolerance.
fn cross_entropy_matches_oracle(dev: &Device) -> Result<()> {
    let (lens, vocab) = pack(dev);
    let (logits, labels) = logits_and_labels(&lens, vocab, 3.0, 20, 23)?;
    let truth = cross_entropy(&logits, &labels, &lens)?;
    assert!(truth.count > 0);
    for dtype in [DType::F64, DType::F32, DType::BF16, DType::F16] {
        let low = logits.to_dtype(dtype)?;
        let cpu = cross_entropy(&low, &labels, &lens)?;
        let out = cross_entropy(&low.to_device(dev)?, &labels, &lens)?;
        assert_eq!(out.count, truth.count, "{dtype:?}: valid-label count");
        let name = format!("loss_{dtype:?}");
        assert_scalar_close(
            &format!("{name}_vs_cpu_same_dtype"),
            dev,
            out.mean(),
            cpu.mean(),
            SAME_INPUT,
        );
        let tol = tolerance(ToleranceClass::Loss, dtype);
        assert_scalar_close(&format!("{name}_vs_f64_truth"), dev, out.mean(), truth.mean(), tol);
    }
    Ok(())
}
on_devices!(cross_entropy_matches_oracle, cpu, cuda);

/// Σ of per-segment sums computed on the device == the whole pack on the CPU, and the naive
/// mean of per-segment means does not equal it (so this check could fail).
fn loss_reassembles_from_segment_sums(dev: &Device) -> Result<()> {
    let (lens, vocab) = pack(dev);
    let (logits, labels) = logits_and_labels(&lens, vocab, 2.0, 30, 29)?;
    let whole = cross_entropy(&logits, &labels, &lens)?;
    let logits = logits.to_dtype(DType::F32)?.to_device(dev)?;
    let whole_f32 = cross_entropy(&logits, &labels, &lens)?;

    let (mut sum, mut means, mut start) = (CrossEntropy { nll_sum: 0.0, count: 0 }, Vec::new(), 0);
    for &len in &lens {
        let l = len as usize;
        let part = cross_entropy(&logits.narrow(0, start, l)?, &labels[start..start + l], &[len])?;
        sum.nll_sum += part.nll_sum;
        sum.count += part.count;
        if part.count > 0 {
            means.push(part.mean());
        }
        start += l;
    }
    assert_eq!(sum.count, whole.count);
    assert_scalar_close("segment_sums_vs_pack_f32", dev, sum.mean(), whole_f32.mean(), SAME_INPUT);
    assert_scalar_close(
        "segment_sums_vs_f64_truth",
        dev,
        sum.mean(),
        whole.mean(),
        tolerance(ToleranceClass::Loss, DType::F32),
    );
    let mean_of_means = means.iter().sum::<f64>() / means.len() as f64;
    let gap = (mean_of_means - whole.mean()).abs();
    assert!(
        gap > 1e-3,
        "mean of per-segment means {mean_of_means} should differ from {}",
        whole.mean()
    );
    Ok(())
}
on_devices!(loss_reassembles_from_segment_sums, cpu, cuda);

/// Every label ignored: count 0 and loss 0, never NaN, on the device.
fn all_ignored_gives_zero(dev: &Device) -> Result<()> {
    let logits = Tensor::ones((6, 10), DType::F32, dev)?;
    let ce = cross_entropy(&logits, &[thd::IGNORE_INDEX; 6], &[2, 4])?;
    assert_eq!((ce.count, ce.mean()), (0, 0.0));
    Ok(())
}
on_devices!(all_ignored_gives_zero, cpu, cuda);
