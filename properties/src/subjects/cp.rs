//! CP-SHARD and TOKENS-CP subjects: the sharder and the logger.

use thd::collate::{CpPadding, FlattenOptions, flatten, pad_for_cp};
use thd::cp::{CpLayout, logger_stats, shard_batch, token_nll};
use thd::{PackedBatch, PackedBatchParts};

use super::{ThdSubject, diffs, failed, oracle_loss_of, wide};
use crate::checks::{
    ShardLayout, ShardView, TokenRecord, check_cp_shard_in, check_reassembly,
    check_split_accepted_in, check_tokens_cp,
};
use crate::strategies::{SftCase, ShardCase};
use crate::{Checked, Invariant};

/// What one CP rank receives.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Shard {
    /// Local token ids.
    pub input_ids: Vec<i64>,
    /// Local labels (shifted: local token `t` predicts `labels[t]`).
    pub labels: Vec<i64>,
    /// Local position ids.
    pub position_ids: Vec<i64>,
}

/// A CP sharder and its inverse.
pub trait Sharder {
    /// A short name for reports.
    fn name(&self) -> &str;

    /// Splits `batch` (labels `Unshifted`) over `cp` ranks: labels rolled, then split.
    ///
    /// # Errors
    /// The sharder's message (e.g. a length not divisible by `2·cp`).
    fn shard(&self, batch: &PackedBatch, cp: usize) -> Result<Vec<Shard>, String>;

    /// Puts every rank's per-token values back in storage order.
    ///
    /// # Errors
    /// The sharder's message.
    fn reassemble(
        &self,
        batch: &PackedBatch,
        cp: usize,
        shards: &[Vec<i64>],
    ) -> Result<Vec<i64>, String>;
}

impl Sharder for ThdSubject {
    fn name(&self) -> &str {
        "thd::cp::shard_batch"
    }

    fn shard(&self, batch: &PackedBatch, cp: usize) -> Result<Vec<Shard>, String> {
        let (_, shards) = shard_batch(batch, cp).map_err(|e| e.to_string())?;
        Ok(shards
            .into_iter()
            .map(|s| Shard {
                input_ids: s.input_ids,
                labels: s.labels,
                position_ids: s.position_ids,
            })
            .collect())
    }

    fn reassemble(
        &self,
        batch: &PackedBatch,
        cp: usize,
        shards: &[Vec<i64>],
    ) -> Result<Vec<i64>, String> {
        let layout = CpLayout::from_batch(batch, cp).map_err(|e| e.to_string())?;
        layout.reassemble(shards, 1).map_err(|e| e.to_string())
    }
}

/// The batch of a shard case, every token id replaced by `1 + its storage index` so that a
/// shard says where each of its tokens came from.
pub(super) fn tagged_batch(case: &ShardCase) -> thd::Result<PackedBatch> {
    let flat = flatten(&case.sft.examples(), &FlattenOptions::default())?;
    let b = if case.pad_first { pad_for_cp(&flat, &CpPadding::for_cp(case.cp, 0))? } else { flat };
    PackedBatch::new(PackedBatchParts {
        input_ids: (1..=b.num_tokens() as i64).collect(),
        labels: b.labels().to_vec(),
        position_ids: Some(b.position_ids().to_vec()),
        cu_seqlens: wide(b.cu_seqlens()),
        cu_seqlens_padded: b.cu_seqlens_padded().map(wide),
        num_real_seqs: b.num_real_seqs(),
        label_convention: b.label_convention(),
    })
}

/// CP-SHARD: shard the case's batch with `subject`; every real token is held once, in zigzag
/// order, with the label of the next token of its own sequence and its own position; reassembly
/// is the identity; a layout is rejected only if some length is not divisible by `2·cp`.
///
/// # Errors
/// The first [`crate::Violation`].
///
/// # Panics
/// If the case cannot be collated (a bug in the strategy).
pub fn run_cp_shard(subject: &dyn Sharder, case: &ShardCase) -> Checked {
    run_cp_shard_in(subject, case, ShardLayout::Zigzag)
}

/// CP-SHARD under `layout`: [`run_cp_shard`]'s property for a sharder that claims that layout
/// (the contexts of zigzag violations do not name the layout, the others' do).
pub(super) fn run_cp_shard_in(
    subject: &dyn Sharder,
    case: &ShardCase,
    layout: ShardLayout,
) -> Checked {
    let batch = tagged_batch(case).expect("a generated shard case collates");
    let cp = case.cp;
    let lens = diffs(&wide(batch.cu_seqlens()));
    let storage = diffs(&wide(batch.storage_cu_seqlens()));
    let named = match layout {
        ShardLayout::Zigzag => String::new(),
        other => format!(", {}", other.name()),
    };
    let ctx = format!(
        "{}{named}, {}",
        subject.name(),
        if case.pad_first { "padded for CP" } else { "not padded" }
    );
    let shards = match subject.shard(&batch, cp) {
        Ok(s) => s,
        Err(e) => {
            return check_split_accepted_in(layout, cp, &storage, Some(&e))
                .map_err(|v| v.within(&ctx));
        }
    };
    let t = batch.num_tokens() as i64;
    let positions: Vec<Vec<Option<usize>>> = shards
        .iter()
        .map(|s| {
            s.input_ids.iter().map(|&id| (1..=t).contains(&id).then(|| (id - 1) as usize)).collect()
        })
        .collect();
    let labels: Vec<Vec<i64>> = shards.iter().map(|s| s.labels.clone()).collect();
    let pos: Vec<Vec<i64>> = shards.iter().map(|s| s.position_ids.clone()).collect();
    let view = ShardView {
        cp,
        lens: &lens,
        storage: &storage,
        positions: &positions,
        labels: Some(&labels),
        unshifted_labels: Some(batch.labels()),
        position_ids: Some(&pos),
    };
    check_cp_shard_in(&view, layout).map_err(|v| v.within(&ctx))?;
    let ids: Vec<Vec<i64>> = shards.iter().map(|s| s.input_ids.clone()).collect();
    let back = subject
        .reassemble(&batch, cp, &ids)
        .map_err(|e| failed(Invariant::CpShard, subject.name(), e))?;
    check_reassembly(cp, batch.input_ids(), &back).map_err(|v| v.within(&ctx))
}

/// A logger: per-rank local NLL and labels in, the batch's statistics out.
pub trait Logger {
    /// A short name for reports.
    fn name(&self) -> &str;

    /// The statistics of one global batch from every rank's local per-token NLL and local
    /// (shifted) labels.
    ///
    /// # Errors
    /// The logger's message.
    fn stats(
        &self,
        layout: &CpLayout,
        nll: &[Vec<f64>],
        labels: &[Vec<i64>],
    ) -> Result<TokenRecord, String>;
}

impl Logger for ThdSubject {
    fn name(&self) -> &str {
        "thd::cp::logger_stats"
    }

    fn stats(
        &self,
        layout: &CpLayout,
        nll: &[Vec<f64>],
        labels: &[Vec<i64>],
    ) -> Result<TokenRecord, String> {
        let s = logger_stats(layout, nll, labels).map_err(|e| e.to_string())?;
        Ok(TokenRecord {
            n_tokens: s.n_tokens,
            n_valid_tokens: s.n_valid_tokens,
            prompt_tokens: s.prompt_tokens,
            n_seqs: s.n_seqs,
            loss: s.loss,
            ppl_avg: s.ppl_avg,
        })
    }
}

/// TOKENS-CP: the case's batch, sharded for cp ∈ {1, 2, 4, 8}; `subject`'s counts are the global
/// ones for every cp, and its loss and perplexity do not move.
///
/// # Errors
/// The first [`crate::Violation`].
///
/// # Panics
/// If the case cannot be collated or sharded by `thd` (a bug in the strategy).
pub fn run_tokens_cp(subject: &dyn Logger, case: &SftCase) -> Checked {
    let flat = flatten(&case.examples(), &FlattenOptions::default()).expect("collates");
    let mut records = Vec::new();
    for cp in [1usize, 2, 4, 8] {
        let batch = pad_for_cp(&flat, &CpPadding::for_cp(cp, 0)).expect("pads");
        let (layout, shards) = shard_batch(&batch, cp).expect("shards");
        let storage = diffs(&wide(layout.storage()));
        let logits = layout
            .split_all(&case.logits(&storage, batch.num_tokens()), case.vocab)
            .expect("splits");
        let labels: Vec<Vec<i64>> = shards.iter().map(|s| s.labels.clone()).collect();
        let nll: Vec<Vec<f64>> = logits
            .iter()
            .zip(&labels)
            .map(|(x, y)| token_nll(x, case.vocab, y).expect("nll"))
            .collect();
        let r = subject
            .stats(&layout, &nll, &labels)
            .map_err(|e| failed(Invariant::TokensCp, subject.name(), e))?;
        records.push((cp, r));
    }
    let reference = oracle_loss_of(case).mean;
    check_tokens_cp(&case.expected_counts(), reference, &records, 1e-12)
        .map_err(|v| v.within(subject.name()))
}
