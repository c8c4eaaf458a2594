//! DPO zoo: concatenations whose rejected segments point at the wrong tokens.

use thd::collate::{DpoExample, DpoOptions, collate_dpo, seq_idx};

use crate::subjects::{DpoCollator, DpoOut, ThdSubject};

fn wide(cu: &thd::CuSeqlens) -> Vec<i64> {
    cu.as_slice().iter().map(|&c| i64::from(c)).collect()
}

/// Rejected offsets shifted by the *real* chosen token count instead of the padded chosen
/// length (open-instruct OI-B1, fixed in `005366f75`): with static padding every rejected
/// segment starts inside the chosen padding.
#[derive(Debug, Clone, Copy, Default)]
pub struct UnpaddedChosenOffset;

impl DpoCollator for UnpaddedChosenOffset {
    fn name(&self) -> &str {
        "zoo::UnpaddedChosenOffset"
    }

    fn concatenate(&self, pairs: &[DpoExample], opts: &DpoOptions) -> Result<DpoOut, String> {
        let b = collate_dpo(pairs, opts).map_err(|e| e.to_string())?;
        let chosen = wide(b.chosen.cu_seqlens());
        let offset = *chosen.last().expect("non-empty");
        let mut cu = chosen;
        cu.extend(wide(b.rejected.cu_seqlens())[1..].iter().map(|&x| x + offset));
        Ok(DpoOut {
            input_ids: [b.chosen.input_ids(), b.rejected.input_ids()].concat(),
            cu_seqlens: cu,
            cu_seqlens_padded: None,
            seq_idx: None,
            index: b.index,
        })
    }
}

/// open-instruct's `concatenated_cu_seq_lens` used as plain offsets: correct starts, but the
/// first rejected segment spans the chosen padding (open-instruct PR #1900: `cu_seq_lens =
/// [0, 50, 100, 550, 600]`, a 450-token segment of padding, initial loss 6× ln 2).
#[derive(Debug, Clone, Copy, Default)]
pub struct PlainOpenInstructOffsets;

impl DpoCollator for PlainOpenInstructOffsets {
    fn name(&self) -> &str {
        "zoo::PlainOpenInstructOffsets"
    }

    fn concatenate(&self, pairs: &[DpoExample], opts: &DpoOptions) -> Result<DpoOut, String> {
        let b = collate_dpo(pairs, opts).map_err(|e| e.to_string())?;
        let cat = b.concatenated().map_err(|e| e.to_string())?;
        Ok(DpoOut {
            input_ids: cat.batch.input_ids().to_vec(),
            cu_seqlens: cat.open_instruct_cu_seq_lens,
            cu_seqlens_padded: None,
            seq_idx: None,
            index: b.index,
        })
    }
}

/// Exact offsets, but the rejected `seq_idx` offset by the value of the last chosen *token*
/// instead of the number of chosen sequences (open-instruct OI-B2, fixed in `005366f75`):
/// `n_chosen − 1` without padding, `-1` with it.
#[derive(Debug, Clone, Copy, Default)]
pub struct SeqIdxFromLastToken;

impl DpoCollator for SeqIdxFromLastToken {
    fn name(&self) -> &str {
        "zoo::SeqIdxFromLastToken"
    }

    fn concatenate(&self, pairs: &[DpoExample], opts: &DpoOptions) -> Result<DpoOut, String> {
        let mut out = ThdSubject.concatenate(pairs, opts)?;
        let b = collate_dpo(pairs, opts).map_err(|e| e.to_string())?;
        let chosen = seq_idx(&b.chosen);
        let shift = *chosen.last().expect("non-empty");
        let rejected = seq_idx(&b.rejected).into_iter().map(|i| i + shift);
        out.seq_idx = Some(chosen.iter().copied().chain(rejected).collect());
        Ok(out)
    }
}
