//! Context parallelism emulated on the device under test (CP-SHARD, CP-LOSS).
//!
//! The zigzag layout comes from `thd::cp` (plain index arithmetic); every FLOP runs on the
//! device: each rank's local queries attend, through the oracle, to the gathered keys of their
//! own sequence at global positions, and each rank's Σ NLL and count come from the oracle's
//! cross-entropy on the rank's local logits. Reassembled, both must equal the unsharded oracle
//! on the CPU, for cp in {1, 2, 4, 8}.

use candle_core::{DType, Device, Result, Tensor};
use gpu_tests::check::{assert_close, assert_flash_rule, assert_scalar_close, device_name};
use gpu_tests::data::{GpuCase, logits_and_labels};
use gpu_tests::on_devices;
use oracle::tolerance::{ATTENTION_F64, ToleranceClass, tolerance};
use oracle::{CrossEntropy, Tolerance, cross_entropy, varlen_attention};
use thd::collate::{CpPadding, Document, FlattenOptions, flatten, pad_for_cp};
use thd::cp::{CpLayout, shard_batch};
use thd::{CuSeqlens, SeqLens};

const CP_SIZES: [usize; 4] = [1, 2, 4, 8];

fn wrap(e: thd::Error) -> candle_core::Error {
    candle_core::Error::wrap(e)
}

fn seq_lens(dev: &Device) -> Vec<u32> {
    if dev.is_cpu() { vec![9, 1, 4, 13, 2] } else { vec![700, 1, 333, 1024, 77, 129] }
}

/// Offsets of `lens` (real or padded), as thd's type.
fn cu(lens: &[u32]) -> Result<CuSeqlens> {
    SeqLens::new(lens.to_vec()).to_cu_seqlens().map_err(wrap)
}

/// Storage row → real row, or `pad` for a padding row.
fn storage_to_real(layout: &CpLayout, pad: u32) -> Vec<u32> {
    let mut map = vec![pad; layout.num_tokens()];
    for i in 0..layout.num_segments() {
        let (real, storage) = (layout.real().segment(i), layout.storage().segment(i));
        for j in 0..real.len() {
            map[storage.start + j] = (real.start + j) as u32;
        }
    }
    map
}

/// Rows of `x` picked by `rows` (on `x`'s device).
fn gather(x: &Tensor, rows: &[u32]) -> Result<Tensor> {
    let idx = Tensor::new(rows, x.device())?;
    x.index_select(&idx, 0)
}

/// One rank's attention on the device, written into `out` (real-token order) and `seen`.
///
/// For every segment and each of the rank's two chunks (first query at position `g0` of its
/// sequence, `nq` real queries): causal queries see keys `0 .. g0 + nq` of their sequence,
/// bottom-right aligned; bidirectional ones see the whole sequence. One oracle call per rank.
fn rank_attention(
    layout: &CpLayout,
    rank: usize,
    case: &GpuCase,
    (q, k, v): (&Tensor, &Tensor, &Tensor),
    real_row: &[u32],
    out_rows: &mut Vec<u32>,
) -> Result<Option<Tensor>> {
    let (mut qi, mut ki, mut sq, mut sk) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for i in 0..layout.num_segments() {
        let start = layout.storage().segment(i).start;
        let s = layout.real().segment(i).len();
        for c in layout.chunks(i, rank) {
            let g0 = c.start - start;
            let nq = s.saturating_sub(g0).min(c.len());
            let nk = if case.causal { g0 + nq } else { s };
            if nq == 0 {
                continue;
            }
            qi.extend((c.start..c.start + nq).map(|r| r as u32));
            ki.extend((start..start + nk).map(|r| r as u32));
            out_rows.extend(qi[qi.len() - nq..].iter().map(|&r| real_row[r as usize]));
            sq.push(nq as u32);
            sk.push(nk as u32);
        }
    }
    if qi.is_empty() {
        return Ok(None);
    }
    let (qr, kr, vr) = (gather(q, &qi)?, gather(k, &ki)?, gather(v, &ki)?);
    varlen_attention(&qr, &kr, &vr, &sq, &sk, &case.spec()).map(Some)
}

/// CP attention of every rank on `dev`, reassembled into real-token order (on the CPU).
fn cp_attention_on(
    dev: &Device,
    case: &GpuCase,
    layout: &CpLayout,
    qkv_real: (&Tensor, &Tensor, &Tensor),
    dtype: DType,
) -> Result<Tensor> {
    let t_real = case.tokens_q() as u32;
    let real_row = storage_to_real(layout, t_real);
    // Storage order: real rows in place, padding rows 0 (a zero row appended at index T).
    let storage = |x: &Tensor| -> Result<Tensor> {
        let zero = Tensor::zeros((1, x.dim(1)?, x.dim(2)?), x.dtype(), x.device())?;
        let x = Tensor::cat(&[x, &zero], 0)?.to_dtype(dtype)?.to_device(dev)?;
        gather(&x, &real_row)
    };
    let (q, k, v) = (storage(qkv_real.0)?, storage(qkv_real.1)?, storage(qkv_real.2)?);
    let (mut pieces, mut rows) = (Vec::new(), Vec::new());
    for rank in 0..layout.cp() {
        if let Some(out) = rank_attention(layout, rank, case, (&q, &k, &v), &real_row, &mut rows)? {
            pieces.push(out.to_device(&Device::Cpu)?);
        }
    }
    // Every real token exactly once (CP-SHARD), then back into real-token order.
    let mut sorted = rows.clone();
    sorted.sort_unstable();
    assert_eq!(
        sorted,
        (0..t_real).collect::<Vec<_>>(),
        "cp={}: ranks do not cover every real token once",
        layout.cp()
    );
    let mut inverse = vec![0u32; rows.len()];
    for (pos, &r) in rows.iter().enumerate() {
        inverse[r as usize] = pos as u32;
    }
    gather(&Tensor::cat(&pieces, 0)?, &inverse)
}

/// Reassembled CP attention on the device equals the unsharded oracle (f64: 1e-12; bf16: the
/// FlashAttention rule against the unsharded CPU oracle in bf16) and thd's CPU CP emulation.
fn cp_attention_matches_unsharded(dev: &Device) -> Result<()> {
    for causal in [true, false] {
        let case = GpuCase::new("cp", &seq_lens(dev), 4, 2, 64).causal(causal);
        let l = &case.seqlens_q;
        let (q, k, v) = case.qkv(41)?;
        let reference = varlen_attention(&q, &k, &v, l, l, &case.spec())?;
        let bf = |t: &Tensor| t.to_dtype(DType::BF16);
        let naive_bf16 = varlen_attention(&bf(&q)?, &bf(&k)?, &bf(&v)?, l, l, &case.spec())?;
        for cp in CP_SIZES {
            let padded: Vec<u32> =
                l.iter().map(|&s| s.div_ceil(2 * cp as u32) * 2 * cp as u32).collect();
            let layout = CpLayout::new(&cu(l)?, Some(&cu(&padded)?), cp).map_err(wrap)?;
            // The ranks' outputs come back to the CPU to be reassembled: name the device that
            // computed them, or a CUDA run's log reads "[cpu]".
            let name = format!("cp{cp}_attention causal={causal} computed on {}", device_name(dev));
            let out = cp_attention_on(dev, &case, &layout, (&q, &k, &v), DType::F64)?;
            assert_close(&name, &out, &reference, l, ATTENTION_F64)?;
            if cp == 2 {
                let fast = thd_cp_attention(&case, &layout, (&q, &k, &v))?;
                assert_close(&format!("{name} vs thd::cp"), &out, &fast, l, ATTENTION_F64)?;
            }
            let out = cp_attention_on(dev, &case, &layout, (&q, &k, &v), DType::BF16)?;
            assert_flash_rule(&format!("{name} bf16"), &out, &naive_bf16, &reference)?;
        }
    }
    Ok(())
}
on_devices!(cp_attention_matches_unsharded, cpu, cuda);

/// thd's CPU CP emulation (`thd::cp::cp_attention` per rank), reassembled to real-token order.
fn thd_cp_attention(
    case: &GpuCase,
    layout: &CpLayout,
    (q, k, v): (&Tensor, &Tensor, &Tensor),
) -> Result<Tensor> {
    let t_real = case.tokens_q() as u32;
    let real_row = storage_to_real(layout, t_real);
    let storage = |x: &Tensor| -> Result<Vec<f64>> {
        let zero = Tensor::zeros((1, x.dim(1)?, x.dim(2)?), DType::F64, &Device::Cpu)?;
        gather(&Tensor::cat(&[x, &zero], 0)?, &real_row)?.flatten_all()?.to_vec1::<f64>()
    };
    let (q, k, v) = (storage(q)?, storage(k)?, storage(v)?);
    let (shape, opts) = case.thd_shape();
    let width = case.heads * case.head_dim;
    let shards = (0..layout.cp())
        .map(|r| {
            let q_local = layout.split_rows(&q, width, r)?;
            thd::cp::cp_attention(layout, r, &q_local, &k, &v, shape, &opts)
        })
        .collect::<thd::Result<Vec<_>>>()
        .map_err(wrap)?;
    let full = layout.reassemble(&shards, width).map_err(wrap)?;
    let full =
        Tensor::from_vec(full, (layout.num_tokens(), case.heads, case.head_dim), &Device::Cpu)?;
    let real: Vec<u32> =
        (0..layout.num_tokens() as u32).filter(|&s| real_row[s as usize] != t_real).collect();
    gather(&full, &real)
}

/// The oracle's Σ NLL for labels already rolled (`logits[t]` predicts `labels[t]`): one zero
/// row appended and -100 prepended turn them into the oracle's within-sequence shift.
fn rolled_cross_entropy(logits: &Tensor, rolled: &[i64]) -> Result<CrossEntropy> {
    let extra = Tensor::zeros((1, logits.dim(1)?), logits.dtype(), logits.device())?;
    let logits = Tensor::cat(&[logits, &extra], 0)?;
    let labels: Vec<i64> =
        std::iter::once(thd::IGNORE_INDEX).chain(rolled.iter().copied()).collect();
    cross_entropy(&logits, &labels, &[labels.len() as u32])
}

/// CP-local sums computed on the device give the global loss for every cp (relative error
/// ≤ 1e-12 against the CPU oracle on the same f32 logits); the mean of rank means does not.
fn cp_local_loss_matches_global(dev: &Device) -> Result<()> {
    let lens = seq_lens(dev);
    let vocab = if dev.is_cpu() { 11 } else { 8192 };
    let (logits, ids) = logits_and_labels(&lens, vocab, 3.0, 0, 43)?;
    let logits = logits.to_dtype(DType::F32)?;
    let (mut examples, mut start) = (Vec::new(), 0);
    for &len in &lens {
        let ids: Vec<i64> = ids[start..start + len as usize].iter().map(|&y| y.max(0)).collect();
        let mut labels = ids.clone();
        labels[..len as usize / 3].fill(thd::IGNORE_INDEX); // a prompt
        examples.push(Document::with_labels(ids, labels));
        start += len as usize;
    }
    let batch = flatten(&examples, &FlattenOptions::default()).map_err(wrap)?;
    let truth = cross_entropy(&logits, batch.labels(), &lens)?;
    let on_dev = logits.to_device(dev)?;

    let mut mean_of_means_differs = false;
    for cp in CP_SIZES {
        let padded = pad_for_cp(&batch, &CpPadding::for_cp(cp, 0)).map_err(wrap)?;
        let (layout, shards) = shard_batch(&padded, cp).map_err(wrap)?;
        let t_real = batch.num_tokens() as u32;
        let real_row = storage_to_real(&layout, t_real);
        let zero = Tensor::zeros((1, vocab), DType::F32, dev)?;
        let storage = gather(&Tensor::cat(&[&on_dev, &zero], 0)?, &real_row)?;
        let (mut sum, mut means) = (CrossEntropy { nll_sum: 0.0, count: 0 }, Vec::new());
        for (rank, shard) in shards.iter().enumerate() {
            let rows: Vec<u32> =
                layout.indices(rank).map_err(wrap)?.iter().map(|&r| r as u32).collect();
            let part = rolled_cross_entropy(&gather(&storage, &rows)?, &shard.labels)?;
            sum.nll_sum += part.nll_sum;
            sum.count += part.count;
            means.push(part.mean());
        }
        assert_eq!(sum.count, truth.count, "cp={cp}: valid-label count");
        assert_scalar_close(
            &format!("cp{cp}_local_loss"),
            dev,
            sum.mean(),
            truth.mean(),
            Tolerance::new(1e-12, 0.0),
        );
        let mean_of_means = means.iter().sum::<f64>() / cp as f64;
        mean_of_means_differs |=
            cp > 1 && (mean_of_means - truth.mean()).abs() > 1e-9 * truth.mean();
    }
    assert!(
        mean_of_means_differs,
        "the mean of rank means should differ from the loss for some cp > 1"
    );
    // And the f32 loss is the f64 truth's within the loss tolerance.
    let truth64 = cross_entropy(&logits.to_dtype(DType::F64)?, batch.labels(), &lens)?;
    assert_scalar_close(
        "cp_loss_f32_vs_f64",
        dev,
        truth.mean(),
        truth64.mean(),
        tolerance(ToleranceClass::Loss, DType::F32),
    );
    Ok(())
}
on_devices!(cp_local_loss_matches_global, cpu, cuda);
