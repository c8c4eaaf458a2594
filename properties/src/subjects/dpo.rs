//! DPO subject: the DPO collator and its chosen + rejected concatenation.

use thd::collate::{DpoExample, DpoOptions, Overflow, collate_dpo};

use super::{ThdSubject, failed, wide};
use crate::checks::{DpoSegment, DpoView, check_dpo};
use crate::strategies::DpoCase;
use crate::{Checked, Invariant};

/// A concatenated DPO row as plain data.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct DpoOut {
    /// Token ids of the row (chosen pack, then rejected pack).
    pub input_ids: Vec<i64>,
    /// The offsets the model and loss are given.
    pub cu_seqlens: Vec<i64>,
    /// Storage offsets, if segments are addressed apart from their real lengths.
    pub cu_seqlens_padded: Option<Vec<i64>>,
    /// Example number of every token, if emitted.
    pub seq_idx: Option<Vec<i64>>,
    /// Dataset indices of the pairs kept (the rest go to the next batch).
    pub index: Vec<i64>,
}

/// A DPO collator that packs both branches and concatenates them into one row.
pub trait DpoCollator {
    /// A short name for reports.
    fn name(&self) -> &str;

    /// Collates `pairs` (keeping a prefix within the budget) and concatenates the branches.
    ///
    /// # Errors
    /// The collator's message.
    fn concatenate(&self, pairs: &[DpoExample], opts: &DpoOptions) -> Result<DpoOut, String>;
}

impl DpoCollator for ThdSubject {
    fn name(&self) -> &str {
        "thd::collate::collate_dpo"
    }

    fn concatenate(&self, pairs: &[DpoExample], opts: &DpoOptions) -> Result<DpoOut, String> {
        let batch = collate_dpo(pairs, opts).map_err(|e| e.to_string())?;
        let cat = batch.concatenated().map_err(|e| e.to_string())?;
        Ok(DpoOut {
            input_ids: cat.batch.input_ids().to_vec(),
            cu_seqlens: wide(cat.batch.cu_seqlens()),
            cu_seqlens_padded: cat.batch.cu_seqlens_padded().map(wide),
            seq_idx: Some(cat.seq_idx),
            index: batch.index,
        })
    }
}

/// DPO: collate and concatenate the case's pairs with `subject`; every segment of the row holds
/// exactly its own example's tokens (the tags), nothing of the padding or of another example.
///
/// # Errors
/// The first [`crate::Violation`].
pub fn run_dpo(subject: &dyn DpoCollator, case: &DpoCase) -> Checked {
    let opts = DpoOptions {
        max_seq_length: case.max_seq_length,
        pad_token_id: 0,
        overflow: Overflow::Error,
    };
    let out = subject
        .concatenate(&case.examples(), &opts)
        .map_err(|e| failed(Invariant::Dpo, subject.name(), e))?;
    let mut want = Vec::new();
    for rejected in [false, true] {
        for &k in &out.index {
            let (c, r) = case.pairs[k as usize];
            let len = if rejected { r } else { c };
            want.push(DpoSegment {
                example: k as u64,
                rejected,
                tag: DpoCase::tag(k as usize, rejected),
                len,
            });
        }
    }
    let view = DpoView {
        tags: &out.input_ids,
        cu_seqlens: &out.cu_seqlens,
        cu_seqlens_padded: out.cu_seqlens_padded.as_deref(),
        seq_idx: out.seq_idx.as_deref(),
    };
    check_dpo(&view, &want).map_err(|v| {
        let budget = match case.max_seq_length {
            Some(m) => format!("max_seq_length {m}"),
            None => "no max_seq_length".to_owned(),
        };
        v.within(format!("{}, {budget}", subject.name()))
    })
}
