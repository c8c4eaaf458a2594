//! WORK, MFU-PAD and FLOPS zoo: accounting that counts padding, pack lengths or the config.

use thd::metrics::megatron::{FlopsAccumulator, MicroBatch};
use thd::metrics::{
    BatchWork, CausalConvention, FlopsFormula, HardwareView, ModelDims, StepTiming,
};
use thd::{PackedBatch, SeqLens};

use crate::checks::{FlopsStats, MetricRecord, MicroBatchView, WorkSums};
use crate::subjects::{FlopsCounter, ThdSubject, ThroughputLogger, WorkCounter, merged_cu_seqlens};

fn e(x: thd::Error) -> String {
    x.to_string()
}

/// Useful work from the pack length: `T²` as if the pack were one sequence (PaLM App. B as in
/// nanoGPT, torchtitan and OLMo-core: `seq_len` is the pack length).
#[derive(Debug, Clone, Copy, Default)]
pub struct PackLengthSquared;

impl WorkCounter for PackLengthSquared {
    fn name(&self) -> &str {
        "zoo::PackLengthSquared"
    }

    fn work(&self, batch: &PackedBatch) -> Result<[WorkSums; 3], String> {
        let [_, varlen, whole] = ThdSubject.work(batch)?;
        Ok([whole, varlen, whole])
    }
}

fn lens(cu: &thd::CuSeqlens) -> SeqLens {
    cu.seq_lens()
}

fn record(
    work: BatchWork,
    useful_dims: &ModelDims,
    dims: &ModelDims,
    formula: FlopsFormula,
    view: HardwareView,
    timing: &StepTiming,
) -> Result<MetricRecord, String> {
    let useful = work.flops(useful_dims, formula, view).map_err(e)?.useful;
    let hardware = work.flops(dims, formula, view).map_err(e)?.hardware;
    crate::subjects::metric_record(
        thd::metrics::Flops { useful, hardware },
        work.real_tokens,
        timing,
    )
}

/// Mock segments counted as real: `num_real_seqs` ignored, so the `pad_to_multiple_of` mock's
/// `c²` lands in the useful Σ sᵢ² and useful and padded MFU collapse (bionemo-recipes #1561 /
/// PR #1548).
#[derive(Debug, Clone, Copy, Default)]
pub struct MockCountedAsUseful;

impl ThroughputLogger for MockCountedAsUseful {
    fn name(&self) -> &str {
        "zoo::MockCountedAsUseful"
    }

    fn record(
        &self,
        batch: &PackedBatch,
        dims: &ModelDims,
        formula: FlopsFormula,
        view: HardwareView,
        timing: &StepTiming,
    ) -> Result<MetricRecord, String> {
        let real = lens(batch.cu_seqlens());
        let padded = lens(batch.storage_cu_seqlens());
        let w =
            BatchWork::from_seq_lens(&real, &padded, None, batch.num_tokens() as u64).map_err(e)?;
        record(w, dims, dims, formula, view, timing)
    }
}

/// Useful work from the padded (storage) lengths: physical padded boundaries used as valid-token
/// boundaries (Megatron-LM PR #5541).
#[derive(Debug, Clone, Copy, Default)]
pub struct PaddedLengthsAsReal;

impl ThroughputLogger for PaddedLengthsAsReal {
    fn name(&self) -> &str {
        "zoo::PaddedLengthsAsReal"
    }

    fn record(
        &self,
        batch: &PackedBatch,
        dims: &ModelDims,
        formula: FlopsFormula,
        view: HardwareView,
        timing: &StepTiming,
    ) -> Result<MetricRecord, String> {
        let padded = lens(batch.storage_cu_seqlens());
        let w = BatchWork::from_seq_lens(
            &padded,
            &padded,
            batch.num_real_seqs(),
            batch.num_tokens() as u64,
        )
        .map_err(e)?;
        record(w, dims, dims, formula, view, timing)
    }
}

/// The static tail padding absorbed into the last real segment (a trailing pad the collator
/// does not describe becomes part of the last document: bert24's trailing pad segment, OLMo-core
/// `doc_lens` padded to `seq_len`), so its tokens count as real.
#[derive(Debug, Clone, Copy, Default)]
pub struct AbsorbedTrailingPad;

impl ThroughputLogger for AbsorbedTrailingPad {
    fn name(&self) -> &str {
        "zoo::AbsorbedTrailingPad"
    }

    fn record(
        &self,
        batch: &PackedBatch,
        dims: &ModelDims,
        formula: FlopsFormula,
        view: HardwareView,
        timing: &StepTiming,
    ) -> Result<MetricRecord, String> {
        let mut real = lens(batch.cu_seqlens()).as_slice().to_vec();
        let mut padded = lens(batch.storage_cu_seqlens()).as_slice().to_vec();
        let tail = batch.num_tokens() - batch.storage_cu_seqlens().total();
        let last = batch.num_real_segments().saturating_sub(1);
        if tail > 0 && !real.is_empty() {
            real[last] += tail as u32;
            padded[last] += tail as u32;
        }
        let w = BatchWork::from_seq_lens(
            &SeqLens::new(real),
            &SeqLens::new(padded),
            batch.num_real_seqs(),
            batch.num_tokens() as u64,
        )
        .map_err(e)?;
        record(w, dims, dims, formula, view, timing)
    }
}

/// Causal attention counted as the full square for useful work, while the kernel computes the
/// triangle: useful FLOPs exceed the hardware's and MFU passes 100 % (torchtitan #341,
/// Megatron-LM #831, fla-org/flame #7 "133% MFU").
#[derive(Debug, Clone, Copy, Default)]
pub struct FullSquareCausal;

impl ThroughputLogger for FullSquareCausal {
    fn name(&self) -> &str {
        "zoo::FullSquareCausal"
    }

    fn record(
        &self,
        batch: &PackedBatch,
        dims: &ModelDims,
        formula: FlopsFormula,
        view: HardwareView,
        timing: &StepTiming,
    ) -> Result<MetricRecord, String> {
        let full = ModelDims { causal: CausalConvention::None, ..*dims };
        record(BatchWork::from_batch(batch), &full, dims, formula, view, timing)
    }
}

fn accumulate(
    micro_batches: &[MicroBatchView],
    config: u64,
    cu: &dyn Fn(&MicroBatchView) -> Option<Vec<i64>>,
) -> Result<FlopsStats, String> {
    let mut acc = FlopsAccumulator::default();
    for mb in micro_batches {
        let cu = cu(mb);
        acc.accumulate(&MicroBatch {
            tokens: Some((mb.rows, mb.seq_len)),
            config_seq_len: Some(config),
            cu_seqlens: cu.as_deref(),
            ..Default::default()
        })
        .map_err(e)?;
    }
    Ok(FlopsStats {
        seqlen_sum: acc.seqlen_sum,
        seqlen_sq_sum: acc.seqlen_sq_sum,
        real_seqlen_sum: acc.real_seqlen_sum,
    })
}

/// The packing metadata never reaches the FLOPs counter, which uses the config `seq_length`
/// for every row (Megatron-Bridge #1636: "the same TFLOP/s/GPU even if I double the packing
/// size").
#[derive(Debug, Clone, Copy, Default)]
pub struct ConfigSeqLength;

impl FlopsCounter for ConfigSeqLength {
    fn name(&self) -> &str {
        "zoo::ConfigSeqLength"
    }

    fn stats(&self, micro_batches: &[MicroBatchView], config: u64) -> Result<FlopsStats, String> {
        accumulate(micro_batches, config, &|_| None)
    }
}

/// With `mbs > 1`, only the first row's offsets are used (`cu_seqlens[0]`), so the other rows'
/// sequences vanish from Σ sᵢ and Σ sᵢ² (Megatron-LM PR #5454).
#[derive(Debug, Clone, Copy, Default)]
pub struct FirstSampleOffsets;

impl FlopsCounter for FirstSampleOffsets {
    fn name(&self) -> &str {
        "zoo::FirstSampleOffsets"
    }

    fn stats(&self, micro_batches: &[MicroBatchView], config: u64) -> Result<FlopsStats, String> {
        accumulate(micro_batches, config, &|mb| {
            mb.packed.as_ref().map(|rows| merged_cu_seqlens(&rows[..1]))
        })
    }
}
