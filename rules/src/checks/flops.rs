//! FLOPS: the sequence-length statistics a FLOPs formula is fed.

use crate::checks::proof::Proof;
use crate::checks::rule::{Rule, rule};
use crate::{Checked, Location};

rule! {
    /// The attention term is Σ sᵢ². [`crate::checks::check_flops`].
    FLOPS_ATTENTION = "flops-attention", Flops, "the attention term uses Σ sᵢ² of the real sequences of every row (mbs·S² without cu_seqlens)",
        proof: Proof::Zoo("ConfigSeqLength");
    /// The real-token count is Σ sᵢ. [`crate::checks::check_flops`].
    FLOPS_REAL_TOKENS = "flops-real-tokens", Flops, "the real-token count is Σ sᵢ over every row (mbs·S without cu_seqlens)",
        proof: Proof::Test("rules/src/checks/proofs.rs::flops_real_tokens_count_the_padding");
    /// The tensor-token count is Σ mbs·S. [`crate::checks::check_flops`].
    FLOPS_TENSOR_TOKENS = "flops-tensor-tokens", Flops, "the tensor-token count is Σ mbs·S",
        proof: Proof::Test("rules/src/checks/proofs.rs::flops_tensor_tokens_of_one_cp_shard");
    /// FLOPs accumulate additively. [`crate::checks::check_flops_additive`].
    FLOPS_ADDITIVE = "flops-additive", Flops, "accumulation over micro-batches is additive",
        proof: Proof::Test("rules/src/checks/proofs.rs::flops_additive_last_micro_batch_only");
}

/// The statistics Megatron's `num_floating_point_operations` consumes (Megatron-LM #4103).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct FlopsStats {
    /// Tokens of the tensors (`mbs · S` per micro-batch): the dense/linear term.
    pub seqlen_sum: u64,
    /// `Σ sᵢ²` of the real sequences (packed) or `mbs · S²` (BSHD): the attention term.
    pub seqlen_sq_sum: u128,
    /// `Σ sᵢ` of the real sequences (packed) or `mbs · S` (BSHD).
    pub real_seqlen_sum: u64,
}

/// One micro-batch as plain data.
#[derive(Debug, Clone, PartialEq, Eq)]
#[cfg_attr(any(test, feature = "serde"), derive(serde::Serialize, serde::Deserialize))]
pub struct MicroBatchView {
    /// Rows (packs) in the micro-batch, `mbs`.
    pub rows: u64,
    /// Global tensor length of every row, `S` (before any CP split).
    pub seq_len: u64,
    /// Per row, the real lengths of its sequences; `None` for a BSHD batch (no `cu_seqlens`).
    pub packed: Option<Vec<Vec<u32>>>,
}

impl MicroBatchView {
    /// The statistics this micro-batch must contribute, computed the obvious way.
    ///
    /// # Example
    /// ```
    /// use rules::checks::MicroBatchView;
    /// let mb = MicroBatchView { rows: 2, seq_len: 8, packed: Some(vec![vec![3, 5], vec![8]]) };
    /// let s = mb.expected();
    /// assert_eq!((s.seqlen_sum, s.seqlen_sq_sum, s.real_seqlen_sum), (16, 9 + 25 + 64, 16));
    /// ```
    pub fn expected(&self) -> FlopsStats {
        let dense = self.rows * self.seq_len;
        match &self.packed {
            None => FlopsStats {
                seqlen_sum: dense,
                seqlen_sq_sum: u128::from(self.rows)
                    * u128::from(self.seq_len)
                    * u128::from(self.seq_len),
                real_seqlen_sum: dense,
            },
            Some(rows) => {
                let lens = rows.iter().flatten().map(|&s| u64::from(s));
                FlopsStats {
                    seqlen_sum: dense,
                    seqlen_sq_sum: lens.clone().map(|s| u128::from(s) * u128::from(s)).sum(),
                    real_seqlen_sum: lens.sum(),
                }
            }
        }
    }
}

/// FLOPS: the statistics accumulated over `micro_batches` are exactly the real ones.
///
/// ```text
/// packed:  Σ sᵢ and Σ sᵢ² over the real sequences of every row of every micro-batch
///          (never the config seq_length, never only the first row's offsets)
/// BSHD:    mbs · S and mbs · S²                                    (bit-exact)
/// tensor tokens: Σ mbs · S
/// ```
///
/// # Errors
/// The first statistic that differs, with the micro-batch's contribution in the note.
///
/// # Example
/// ```
/// use rules::checks::{FlopsStats, MicroBatchView, check_flops};
/// let mb = MicroBatchView { rows: 1, seq_len: 8, packed: Some(vec![vec![3, 5]]) };
/// // Megatron-Bridge #1636: FLOPs from the config seq_length.
/// let config = FlopsStats { seqlen_sum: 8, seqlen_sq_sum: 64, real_seqlen_sum: 8 };
/// assert!(check_flops(&[mb], &config).is_err());
/// ```
pub fn check_flops(micro_batches: &[MicroBatchView], got: &FlopsStats) -> Checked {
    let want =
        micro_batches.iter().map(MicroBatchView::expected).fold(FlopsStats::default(), |a, b| {
            FlopsStats {
                seqlen_sum: a.seqlen_sum + b.seqlen_sum,
                seqlen_sq_sum: a.seqlen_sq_sum + b.seqlen_sq_sum,
                real_seqlen_sum: a.real_seqlen_sum + b.real_seqlen_sum,
            }
        });
    let summary = micro_batches
        .iter()
        .map(|mb| match &mb.packed {
            Some(rows) => format!("packed {rows:?} (S={})", mb.seq_len),
            None => format!("BSHD {}×{}", mb.rows, mb.seq_len),
        })
        .collect::<Vec<_>>()
        .join("; ");
    let v = |rule: Rule| {
        rule.violation().at(Location::default().context(match micro_batches.len() {
            1 => "1 micro-batch".to_string(),
            n => format!("{n} micro-batches"),
        }))
    };
    if got.seqlen_sq_sum != want.seqlen_sq_sum {
        return Err(v(FLOPS_ATTENTION)
            .expected(want.seqlen_sq_sum)
            .got(got.seqlen_sq_sum)
            .note(summary));
    }
    if got.real_seqlen_sum != want.real_seqlen_sum {
        return Err(v(FLOPS_REAL_TOKENS)
            .expected(want.real_seqlen_sum)
            .got(got.real_seqlen_sum)
            .note(summary));
    }
    if got.seqlen_sum != want.seqlen_sum {
        return Err(v(FLOPS_TENSOR_TOKENS)
            .expected(want.seqlen_sum)
            .got(got.seqlen_sum)
            .note(summary));
    }
    Ok(())
}

/// FLOPS, additivity: accumulating all micro-batches at once gives the sum of accumulating
/// them one by one.
///
/// # Errors
/// The statistic that is not additive.
///
/// # Example
/// ```
/// use rules::checks::{FlopsStats, check_flops_additive};
/// let a = FlopsStats { seqlen_sum: 8, seqlen_sq_sum: 34, real_seqlen_sum: 8 };
/// let both = FlopsStats { seqlen_sum: 16, seqlen_sq_sum: 68, real_seqlen_sum: 16 };
/// assert!(check_flops_additive(&[a, a], &both).is_ok());
/// ```
pub fn check_flops_additive(parts: &[FlopsStats], whole: &FlopsStats) -> Checked {
    let sum = FlopsStats {
        seqlen_sum: parts.iter().map(|p| p.seqlen_sum).sum(),
        seqlen_sq_sum: parts.iter().map(|p| p.seqlen_sq_sum).sum(),
        real_seqlen_sum: parts.iter().map(|p| p.real_seqlen_sum).sum(),
    };
    if sum != *whole {
        return Err(FLOPS_ADDITIVE
            .violation()
            .expected(format!("{sum:?} (Σ of {} micro-batches accumulated alone)", parts.len()))
            .got(format!("{whole:?}")));
    }
    Ok(())
}
