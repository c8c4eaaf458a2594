//! No offsets: documents start where `position_ids` restart (transformers'
//! `DataCollatorWithFlattening` by default, TRL's padding-free collators).

use super::common::token_tensor;
use super::hf::{self, Boundaries};
use super::{Format, Input, Read};
use crate::Result;
use crate::profile::{CpLayout, Dialect};
use crate::tensors::BatchFile;
use rules::words::plural;

/// Documents from position-id restarts.
pub struct PositionRestarts;

impl Format for PositionRestarts {
    fn name(&self) -> &'static str {
        "position-restarts"
    }
    fn family(&self) -> Option<Dialect> {
        Some(Dialect::Hf)
    }
    fn summary(&self) -> &'static str {
        "no offsets: a document starts wherever `position_ids` do not continue (DataCollatorWithFlattening)"
    }
    fn claims(&self, input: &Input<'_>) -> Result<bool> {
        let file = input.file;
        if !hf::no_offsets(file) || !file.contains("position_ids") {
            return Ok(false);
        }
        let rows = match file.entry("input_ids").map(|e| e.shape.as_slice()) {
            Some([b, _]) => *b,
            _ => 1,
        };
        Ok(!rows_only(file, "position_ids", "attention_mask", rows)?)
    }
    fn read(&self, input: &Input<'_>) -> Result<Read> {
        let (scale, rank) = (input.scale, input.rank);
        let contiguous = input.facts.cp_layout == Some(CpLayout::Contiguous);
        let mut global_note = None;
        let mut read = hf::read_single(input, |file, rows, tokens, _| {
            let pos_key = "position_ids";
            let (_, mut pos) = token_tensor(file, pos_key)?;
            if scale > 1 && contiguous && pos.len() == tokens * scale && rows > 0 {
                // A contiguous CP shard beside the global position ids of its rows
                // (Nanotron's cp_return_global_position_ids): the rank's piece of each row.
                let (w, gw) = (tokens / rows, tokens * scale / rows);
                pos = (0..rows)
                    .flat_map(|b| pos[b * gw + rank * w..b * gw + (rank + 1) * w].to_vec())
                    .collect();
                global_note = Some(format!(
                    "`{pos_key}` holds the global positions of each row ({gw} each): rank {rank}'s \
                     contiguous piece of each row read"
                ));
            }
            let mut count_note = None;
            if global_note.is_none() && pos.len() != tokens && !pos.is_empty() && tokens > 0 {
                // Position ids of another count than the tokens (ms-swift #5665 built them from
                // the length before truncation): the documents are read from the ones beside
                // the tokens, and `token-counts` judges the tensor.
                count_note = Some(format!(
                    "`{pos_key}` has {} entries for {tokens} tokens: the documents are read from \
                     {}",
                    pos.len(),
                    if pos.len() > tokens {
                        "its first ones, beside the tokens"
                    } else {
                        "the ones there are, the last running to the end"
                    }
                ));
                pos.truncate(tokens);
            }
            let cu = if pos.len() == tokens {
                restarts(&pos, rows, tokens)
            } else {
                let mut cu = restarts(&pos, 1, pos.len());
                cu.push(tokens as i64);
                cu.dedup();
                cu
            };
            let note = format!(
                "no offsets: {} read from where `{pos_key}` restarts (transformers \
                 DataCollatorWithFlattening's default output): the restarts are the boundaries, \
                 so only where each document's positions start (the base) and how they step is \
                 checked",
                plural(cu.len() - 1, "document")
            );
            let mut b = Boundaries {
                cu: cu.into(),
                from_positions: true,
                notes: vec![note].into_iter().chain(count_note).collect(),
                ..Boundaries::default()
            };
            if global_note.is_some() {
                b.position_ids = Some(pos);
            }
            Ok(b)
        })?;
        if let (Some(note), Some(p)) = (global_note, read.packs.first_mut()) {
            p.notes.push(note);
        }
        Ok(read)
    }
}

/// Whether `position_ids` restart only where a row starts (`arange(S)` per row) beside an
/// `attention_mask`, the padding's positions aside: a padded batch of one sequence per row
/// (BSHD), whose mask, not its positions, tells the padding. Read as packed documents, each row's padding would count as
/// real tokens of its one segment.
///
/// # Errors
/// A `position_ids` tensor that cannot be read.
pub(super) fn rows_only(
    file: &BatchFile,
    pos_key: &str,
    mask_key: &str,
    rows: usize,
) -> Result<bool> {
    if !file.contains(mask_key) || rows < 1 {
        return Ok(false);
    }
    let (_, pos) = token_tensor(file, pos_key)?;
    let width = pos.len() / rows;
    if width == 0 || !pos.len().is_multiple_of(rows) {
        return Ok(false);
    }
    // A 0/1 padding mask says which tokens are padding, whatever positions they carry (ROLL's
    // `clip(cumsum(mask) - 1, 0)` repeats the last position over the padding, left padding
    // holds 0s): only real tokens can restart a document. A mask of other values (sample
    // numbers) tells nothing here.
    let real = file.mask(mask_key).ok().map(|(_, m)| m).filter(|m| m.len() == pos.len());
    // Across masked tokens (a hole in the mask, xtuner #567) the positions may have moved on:
    // there a real token continues its row when its position only grows.
    Ok(pos.chunks(width).enumerate().all(|(r, row)| {
        let (mut last, mut gap): (Option<i64>, bool) = (None, false);
        row.iter().enumerate().all(|(i, &p)| {
            if real.as_ref().is_some_and(|m| !m[r * width + i]) {
                gap = true;
                return true;
            }
            let continues = last.is_none_or(|l| if gap { p > l } else { p == l.wrapping_add(1) });
            (last, gap) = (Some(p), false);
            continues
        })
    }))
}

/// Document offsets from position ids: a document starts at token 0, at every row start of a
/// `[B, S]` tensor, and wherever a position id does not continue the previous one (`p[t] ≠
/// p[t−1] + 1`).
///
/// ```text
/// position_ids [0 1 2 0 1 0 1 2 3] → cu_seqlens [0 3 5 9]
/// ```
pub fn restarts(pos: &[i64], rows: usize, tokens: usize) -> Vec<i64> {
    let row_len = if rows > 0 { tokens / rows.max(1) } else { tokens };
    let mut cu = vec![0i64];
    for t in 1..pos.len() {
        let row_start = row_len > 0 && t % row_len == 0;
        if row_start || pos[t] != pos[t - 1].wrapping_add(1) {
            cu.push(t as i64);
        }
    }
    if !pos.is_empty() {
        cu.push(pos.len() as i64);
    }
    cu
}
