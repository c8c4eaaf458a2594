//! WORK, MFU-PAD and FLOPS subjects: work counters, throughput loggers, FLOPs accumulators.

use thd::PackedBatch;
use thd::collate::Document;
use thd::metrics::megatron::{FlopsAccumulator, MicroBatch};
use thd::metrics::{
    AttnSums, BatchWork, FlopsFormula, HardwareView, ModelDims, StepReport, StepTiming,
};

use super::{ThdSubject, collate_reference, failed, prefix};
use crate::checks::{
    FlopsStats, HardwareKind, MetricRecord, MicroBatchView, WorkSums, WorkView, check_flops,
    check_flops_additive, check_mfu_pad, check_work,
};
use crate::strategies::{FlopsCase, MfuCase, Padding, WorkCase};
use crate::{Checked, Invariant};

/// Counts the attention work of a pack.
pub trait WorkCounter {
    /// A short name for reports.
    fn name(&self) -> &str;

    /// `[useful, hardware (varlen), hardware (whole pack)]`.
    ///
    /// # Errors
    /// The counter's message.
    fn work(&self, batch: &PackedBatch) -> Result<[WorkSums; 3], String>;
}

pub(crate) fn sums(a: &AttnSums) -> WorkSums {
    WorkSums { tokens: a.tokens, sum_squares: a.sum_squares, triangle: a.triangle }
}

impl WorkCounter for ThdSubject {
    fn name(&self) -> &str {
        "thd::metrics::BatchWork"
    }

    fn work(&self, batch: &PackedBatch) -> Result<[WorkSums; 3], String> {
        let w = BatchWork::from_batch(batch);
        Ok([sums(&w.useful), sums(&w.hardware_varlen), sums(&w.hardware_whole_pack)])
    }
}

/// WORK: `subject`'s useful work is exactly Σ over real segments, at most the hardware work of
/// either view, and equal to it exactly when nothing is padded.
///
/// # Errors
/// The first [`crate::Violation`].
pub fn run_work(subject: &dyn WorkCounter, case: &WorkCase) -> Checked {
    let [useful, varlen, whole] =
        subject.work(&case.batch()).map_err(|e| failed(Invariant::Work, subject.name(), e))?;
    let (lens, storage) = (case.real_lens(), case.storage_lens());
    let view = WorkView {
        lens: &lens,
        storage: &storage,
        num_real: case.lens.len(),
        stored_tokens: case.stored_tokens(),
    };
    check_work(&view, &useful, &varlen, HardwareKind::Varlen)
        .map_err(|v| v.within(subject.name()))?;
    check_work(&view, &useful, &whole, HardwareKind::WholePack)
        .map_err(|v| v.within(subject.name()))
}

/// A throughput logger: one step's batch in, FLOPs and MFU out.
pub trait ThroughputLogger {
    /// A short name for reports.
    fn name(&self) -> &str;

    /// The metrics of a step that processed `batch` in `timing`.
    ///
    /// # Errors
    /// The logger's message.
    fn record(
        &self,
        batch: &PackedBatch,
        dims: &ModelDims,
        formula: FlopsFormula,
        view: HardwareView,
        timing: &StepTiming,
    ) -> Result<MetricRecord, String>;
}

/// The [`MetricRecord`] of a step from its FLOPs, through `thd`'s [`StepReport`].
///
/// # Errors
/// `thd`'s message for an invalid timing.
pub fn metric_record(
    flops: thd::metrics::Flops,
    real_tokens: u64,
    timing: &StepTiming,
) -> Result<MetricRecord, String> {
    let r = StepReport::new(flops, real_tokens, timing).map_err(|e| e.to_string())?;
    Ok(MetricRecord {
        real_tokens,
        useful_flops: flops.useful,
        hardware_flops: flops.hardware,
        mfu_pct: r.mfu_pct,
        mfu_padded_pct: r.mfu_padded_pct,
    })
}

impl ThroughputLogger for ThdSubject {
    fn name(&self) -> &str {
        "thd::metrics::StepReport"
    }

    fn record(
        &self,
        batch: &PackedBatch,
        dims: &ModelDims,
        formula: FlopsFormula,
        view: HardwareView,
        timing: &StepTiming,
    ) -> Result<MetricRecord, String> {
        let w = BatchWork::from_batch(batch);
        metric_record(
            w.flops(dims, formula, view).map_err(|e| e.to_string())?,
            w.real_tokens,
            timing,
        )
    }
}

/// The padding variants of an [`MfuCase`], with labels for reports.
pub fn mfu_paddings(case: &MfuCase) -> Vec<(String, Padding)> {
    let mut out = vec![
        (
            format!("pad_to_multiple_of={}", case.multiple_of),
            Padding::Mock { multiple_of: case.multiple_of, max_mock_len: case.max_mock_len },
        ),
        (
            format!("static max_seq_length (+{})", case.static_extra),
            Padding::Static { extra: case.static_extra },
        ),
    ];
    if case.cp > 1 {
        out.push((format!("cp={} divisibility", case.cp), Padding::Cp { cp: case.cp }));
        out.push((
            format!("cp={} divisibility + pad_to_multiple_of={}", case.cp, case.multiple_of),
            Padding::CpThenMock { cp: case.cp, multiple_of: case.multiple_of },
        ));
    }
    out
}

/// MFU-PAD: the case's examples collated without padding and with every padding variant;
/// `subject`'s useful FLOPs and MFU are bit-identical across them, hardware ≥ useful, and
/// useful MFU ≤ 100 % at a step time the hardware work can physically take.
///
/// # Errors
/// The first [`crate::Violation`].
///
/// # Panics
/// If `thd` cannot collate the case (a bug in the strategy).
pub fn run_mfu_pad(subject: &dyn ThroughputLogger, case: &MfuCase) -> Checked {
    let examples: Vec<Document> =
        case.lens.iter().map(|&s| Document::new(vec![5; s as usize])).collect();
    let base = collate_reference(&examples, &Padding::None).expect("collates");
    let variants: Vec<(String, PackedBatch)> = mfu_paddings(case)
        .into_iter()
        .map(|(label, p)| (label, collate_reference(&examples, &p).expect("pads")))
        .collect();
    // The fastest step the hardware work allows at peak (thd's hardware count is the truth).
    let peak = 1e12;
    let hw = |b: &PackedBatch| {
        BatchWork::from_batch(b)
            .flops(&case.dims, case.formula, case.view)
            .map(|f| f.hardware)
            .unwrap_or(0)
    };
    let max_hw = variants.iter().map(|(_, b)| hw(b)).max().unwrap_or(0).max(hw(&base));
    // A relative margin of 1e-9 keeps f64 rounding (an ulp over 100 %) out of the verdict.
    let step_time_s =
        (max_hw as f64 / peak).max(1e-9) * (1.0 + f64::from(case.slack) / 4.0) * (1.0 + 1e-9);
    let timing = StepTiming { step_time_s, num_gpus: 1, peak_flops_per_gpu: peak };
    let name = subject.name();
    let rec = |b: &PackedBatch| {
        subject
            .record(b, &case.dims, case.formula, case.view, &timing)
            .map_err(|e| failed(Invariant::MfuPad, name, e))
    };
    let baseline = rec(&base)?;
    let records =
        variants.iter().map(|(l, b)| Ok((l.clone(), rec(b)?))).collect::<Result<Vec<_>, _>>()?;
    check_mfu_pad(&baseline, &records, true).map_err(|v| {
        v.within(format!(
            "{name}, {:?}, {:?}, causal attention counted {}",
            case.formula,
            case.view,
            match case.dims.causal {
                // The enum's `None` would read as Rust's `Option::None` in a report.
                thd::metrics::CausalConvention::None => "as the full square",
                thd::metrics::CausalConvention::Half => "as half the square",
                thd::metrics::CausalConvention::ExactTriangle => "as the exact triangle",
            }
        ))
    })
}

/// Accumulates the FLOPs statistics of a step's micro-batches.
pub trait FlopsCounter {
    /// A short name for reports.
    fn name(&self) -> &str;

    /// The statistics of `micro_batches`, the config `seq_length` being `config_seq_len`.
    ///
    /// # Errors
    /// The counter's message.
    fn stats(
        &self,
        micro_batches: &[MicroBatchView],
        config_seq_len: u64,
    ) -> Result<FlopsStats, String>;
}

/// The merged real offsets of a packed micro-batch: every row's sequences, back to back.
pub fn merged_cu_seqlens(rows: &[Vec<u32>]) -> Vec<i64> {
    prefix(&rows.iter().flatten().copied().collect::<Vec<_>>())
}

impl FlopsCounter for ThdSubject {
    fn name(&self) -> &str {
        "thd::metrics::megatron::FlopsAccumulator"
    }

    fn stats(
        &self,
        micro_batches: &[MicroBatchView],
        config_seq_len: u64,
    ) -> Result<FlopsStats, String> {
        let mut acc = FlopsAccumulator::default();
        for mb in micro_batches {
            let cu = mb.packed.as_ref().map(|rows| merged_cu_seqlens(rows));
            acc.accumulate(&MicroBatch {
                tokens: Some((mb.rows, mb.seq_len)),
                config_seq_len: Some(config_seq_len),
                cu_seqlens: cu.as_deref(),
                ..Default::default()
            })
            .map_err(|e| e.to_string())?;
        }
        Ok(FlopsStats {
            seqlen_sum: acc.seqlen_sum,
            seqlen_sq_sum: acc.seqlen_sq_sum,
            real_seqlen_sum: acc.real_seqlen_sum,
        })
    }
}

/// FLOPS: `subject`'s statistics over the case's micro-batches are the real Σs and Σs² (BSHD:
/// mbs·S and mbs·S²), and accumulating them all equals the sum of accumulating each alone.
///
/// # Errors
/// The first [`crate::Violation`].
pub fn run_flops(subject: &dyn FlopsCounter, case: &FlopsCase) -> Checked {
    let name = subject.name();
    let stats = |mbs: &[MicroBatchView]| {
        subject.stats(mbs, case.seq_len).map_err(|e| failed(Invariant::Flops, name, e))
    };
    let whole = stats(&case.micro_batches)?;
    check_flops(&case.micro_batches, &whole).map_err(|v| v.within(name))?;
    let parts = case
        .micro_batches
        .iter()
        .map(|mb| stats(std::slice::from_ref(mb)))
        .collect::<Result<Vec<_>, _>>()?;
    check_flops_additive(&parts, &whole).map_err(|v| v.within(name))
}
