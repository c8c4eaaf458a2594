//! No offsets: a 4-D attention mask `[B, 1, S, S]` (or `[B, S, S]`), the block-diagonal mask
//! the kernel is given instead of offsets (Megatron-LM's `get_ltor_masks_and_position_ids`
//! with `reset_attention_mask`, a transformers model given a 4-D mask). Boolean (what `true`
//! means is the profile's `block_mask` fact, default: attends) or additive float (0 attends).
//!
//! The documents come from what else the batch says, in this order: the EOS tokens under
//! `documents = "eos"`, the position-id restarts (unless `documents = "block-mask"`), or the mask itself (a document starts at a
//! query whose first visible key is itself). The mask is then summarised per query
//! ([`BlockMaskSummary`]) and judged against them by the `block-mask` rule: the reader never
//! decides whether it is right.

use rules::checks::BlockMaskSummary;
use safetensors::Dtype;

use super::common::{same_tokens, token_tensor};
use super::eos::{eos_id, eos_offsets};
use super::hf::{self, Boundaries};
use super::position_restarts::restarts;
use super::{Format, Input, Read};
use crate::profile::{BlockMaskFact, Dialect, DocumentsFact};
use crate::{Error, Result};
use rules::words::plural;

/// The key of the mask.
const KEY: &str = "attention_mask";

/// A 4-D block-diagonal attention mask.
pub struct BlockMask;

impl Format for BlockMask {
    fn name(&self) -> &'static str {
        "block-mask"
    }
    fn family(&self) -> Option<Dialect> {
        None
    }
    fn summary(&self) -> &'static str {
        "no offsets: a 4-D `attention_mask` [B, 1, S, S] (boolean: profile fact `block_mask`; additive float: 0 attends); documents from EOS tokens, position restarts or the mask"
    }
    fn claims(&self, input: &Input<'_>) -> Result<bool> {
        Ok(hf::no_offsets(input.file)
            && input.file.entry(KEY).is_some_and(|e| matches!(e.shape.len(), 3 | 4)))
    }
    fn read(&self, input: &Input<'_>) -> Result<Read> {
        let (file, facts) = (input.file, input.facts);
        let float = file
            .entry(KEY)
            .is_some_and(|e| matches!(e.dtype, Dtype::F64 | Dtype::F32 | Dtype::F16 | Dtype::BF16));
        let inverted = !float && facts.block_mask == Some(BlockMaskFact::TrueMasks);
        let eos = eos_id(input);
        let pad = facts.pad_token_id;
        let mut summary = None;
        let mut read = hf::read_single(input, |file, rows, tokens, ids| {
            let (mask_rows, width, raw) = file.block_mask(KEY)?;
            same_tokens(KEY, mask_rows * width, "input_ids", tokens)?;
            if mask_rows != rows && rows > 1 {
                return Err(Error::CountMismatch {
                    key: KEY.into(),
                    what: "rows",
                    got: mask_rows,
                    reference: "input_ids".into(),
                    expected: rows,
                });
            }
            let allowed: Vec<bool> =
                if inverted { raw.into_iter().map(|m| !m).collect() } else { raw };
            let s = BlockMaskSummary::from_dense(mask_rows, width, &allowed);
            drop(allowed);
            let (cu, storage, from_positions, source) = if let Some(eos) = eos {
                let (cu, st) = eos_offsets(ids, mask_rows, eos, pad.filter(|&p| p != eos));
                (cu, Some(st), false, format!("the EOS tokens ({eos})"))
            } else if file.contains("position_ids")
                && facts.documents != Some(DocumentsFact::BlockMask)
            {
                let (_, pos) = token_tensor(file, "position_ids")?;
                same_tokens("position_ids", pos.len(), "input_ids", tokens)?;
                (restarts(&pos, mask_rows, tokens), None, true, "the position-id restarts".into())
            } else {
                let mut cu = vec![0i64];
                for t in 1..tokens {
                    if (width > 0 && t % width == 0) || s.spans[t][0] == t as i64 {
                        cu.push(t as i64);
                    }
                }
                if tokens > 0 {
                    cu.push(tokens as i64);
                }
                let why = if facts.documents == Some(DocumentsFact::BlockMask) {
                    "the mask itself (the profile's documents = block-mask: a document starts at a query whose first visible key is itself)"
                } else {
                    "the mask itself (a document starts at a query whose first visible key is itself: a mask that joins two documents reads as one; state `documents = \"eos\"` or dump position_ids to check it)"
                };
                (cu, None, false, why.into())
            };
            let note = format!(
                "no offsets: a 4-D `{KEY}` ({}{}); {} read from {source}",
                if float { "additive" } else { "boolean" },
                if inverted { ", true = masked" } else { "" },
                plural(cu.len() - 1, "document"),
            );
            summary = Some(s);
            Ok(Boundaries {
                storage: storage.filter(|st| *st != cu),
                cu: cu.into(),
                names: Some((
                    format!(
                        "{KEY} (4-D; documents from {})",
                        source.split(" (").next().unwrap_or("")
                    ),
                    format!("{KEY} (4-D; slots)"),
                )),
                from_positions,
                no_token_mask: true,
                notes: vec![note],
                ..Boundaries::default()
            })
        })?;
        if let (Some(pack), Some(s)) = (read.packs.first_mut(), summary) {
            pack.block_mask = Some((KEY.to_owned(), s));
        }
        Ok(read)
    }
}
