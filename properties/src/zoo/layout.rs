//! LAYOUT zoo: collators that break the pack's layout.

use thd::collate::Document;

use crate::strategies::Padding;
use crate::subjects::{Collated, Collator, ThdSubject};

fn reference(examples: &[Document], padding: &Padding, base: i64) -> Result<Collated, String> {
    ThdSubject.collate(examples, padding, base)
}

/// Segment starts keep their own label instead of -100, so the previous segment's last token
/// learns to predict the next document's first token (a `separator_id` other than -100 in the
/// Hugging Face / open-instruct flattening collators; AReaL pitfall AR-P3).
#[derive(Debug, Clone, Copy, Default)]
pub struct LabelLeak;

impl Collator for LabelLeak {
    fn name(&self) -> &str {
        "zoo::LabelLeak"
    }

    fn collate(
        &self,
        examples: &[Document],
        padding: &Padding,
        base: i64,
    ) -> Result<Collated, String> {
        let mut c = reference(examples, padding, base)?;
        let storage = c.cu_seqlens_padded.clone().unwrap_or_else(|| c.cu_seqlens.clone());
        for (i, e) in examples.iter().enumerate() {
            c.labels[storage[i] as usize] = e.label_source()[0];
        }
        Ok(c)
    }
}

/// Position ids count through the whole pack (`arange(T)`) instead of restarting at every
/// document (the class of transformers #47496 and Megatron #5243: RoPE sees the wrong
/// positions).
#[derive(Debug, Clone, Copy, Default)]
pub struct PositionsNotReset;

impl Collator for PositionsNotReset {
    fn name(&self) -> &str {
        "zoo::PositionsNotReset"
    }

    fn collate(
        &self,
        examples: &[Document],
        padding: &Padding,
        base: i64,
    ) -> Result<Collated, String> {
        let mut c = reference(examples, padding, base)?;
        c.position_ids = (0..c.position_ids.len() as i64).map(|p| p + base).collect();
        Ok(c)
    }
}

/// Positions always from 0, whatever the model's first position (transformers #47496:
/// `DataCollatorWithFlattening` gave RoBERTa-family models 0-based positions, whose first
/// position is `padding_idx + 1 = 2`).
#[derive(Debug, Clone, Copy, Default)]
pub struct ZeroBasedPositions;

impl Collator for ZeroBasedPositions {
    fn name(&self) -> &str {
        "zoo::ZeroBasedPositions"
    }

    fn collate(
        &self,
        examples: &[Document],
        padding: &Padding,
        _base: i64,
    ) -> Result<Collated, String> {
        reference(examples, padding, 0)
    }
}

/// When the pack already is a multiple of `pad_to_multiple_of`, the padding step still appends
/// its tail offset, duplicating `cu_seqlens[-1]`: a zero-length mock segment (AReaL #1103,
/// `pad_packed_tensor_dict` with `pad_length = 0`; it crashed conv1d).
#[derive(Debug, Clone, Copy, Default)]
pub struct DuplicateZeroLengthSegment;

impl Collator for DuplicateZeroLengthSegment {
    fn name(&self) -> &str {
        "zoo::DuplicateZeroLengthSegment"
    }

    fn collate(
        &self,
        examples: &[Document],
        padding: &Padding,
        base: i64,
    ) -> Result<Collated, String> {
        let mut c = reference(examples, padding, base)?;
        let mocks = matches!(padding, Padding::Mock { .. } | Padding::CpThenMock { .. });
        let added = c.num_real_seqs.is_some_and(|n| n < c.cu_seqlens.len() - 1);
        if mocks && !added {
            let last = *c.cu_seqlens.last().expect("non-empty");
            c.cu_seqlens.push(last);
            if let Some(p) = c.cu_seqlens_padded.as_mut() {
                let last = *p.last().expect("non-empty");
                p.push(last);
            }
            c.num_real_seqs = Some(examples.len());
        }
        Ok(c)
    }
}
