//! Plain `[B, S]` rows with a 0/1 `attention_mask` and no offsets (BSHD,
//! `DataCollatorWithPadding`): one sequence per row.

use super::common::opt_mask;
use super::hf::{self, Boundaries};
use super::{Format, Input, Read};
use crate::Result;
use crate::profile::Dialect;
use crate::tensors::BatchFile;
use rules::words::plural;

/// One sequence per row, its real tokens the mask's leading ones.
pub struct PaddedRows;

impl Format for PaddedRows {
    fn name(&self) -> &'static str {
        "padded-rows"
    }
    fn family(&self) -> Option<Dialect> {
        Some(Dialect::Hf)
    }
    fn summary(&self) -> &'static str {
        "no offsets: [B, S] rows, one sequence each, `attention_mask` 1 on the real tokens (BSHD)"
    }
    fn claims(&self, input: &Input<'_>) -> Result<bool> {
        Ok(hf::no_offsets(input.file) && input.file.contains("attention_mask"))
    }
    fn read(&self, input: &Input<'_>) -> Result<Read> {
        hf::read_single(input, |file, rows, tokens, _| {
            let mask_key = "attention_mask";
            let (real, storage) = bshd_rows(file, mask_key, "input_ids", rows, tokens)?;
            let note = format!(
                "no offsets: {} of {} tokens, one sequence each (BSHD), `{mask_key}` marks the \
                 padding",
                plural(rows, "row"),
                tokens / rows.max(1),
            );
            Ok(Boundaries {
                cu: real.into(),
                storage: Some(storage),
                names: Some((
                    format!("{mask_key} (real tokens of each row)"),
                    "the rows (BSHD)".into(),
                )),
                rows_are_sequences: true,
                notes: vec![note],
                ..Boundaries::default()
            })
        })
    }
}

/// Plain `[B, S]` rows with a 0/1 padding mask and no offsets (BSHD, `DataCollatorWithPadding`):
/// one sequence per row. Its real part runs from the row's first real token to its last; padding
/// before it (left padding) is an empty segment of its own, padding after it the slot's padding,
/// and a 0 between real tokens stays in the mask for the `mask` rule to judge (xtuner #567
/// masked every token equal to the pad id, EOS included). Returns the real offsets and the
/// storage offsets (`[0, S, 2S, …]`, plus each left padding's end).
///
/// # Errors
/// A mask of another shape than the tokens.
pub(super) fn bshd_rows(
    file: &BatchFile,
    mask_key: &str,
    ids_key: &str,
    rows: usize,
    tokens: usize,
) -> Result<(Vec<i64>, Vec<i64>)> {
    let mask = opt_mask(file, mask_key, ids_key, tokens, false)?.unwrap_or_default();
    let width = tokens.checked_div(rows).unwrap_or(0);
    let (mut real, mut storage) = (vec![0i64], vec![0i64]);
    for r in 0..rows {
        let row = &mask[r * width..(r + 1) * width];
        let lead = row.iter().take_while(|&&m| !m).count();
        let last = row.iter().rposition(|&m| m).map_or(lead, |i| i + 1);
        if lead > 0 && lead < width {
            real.push(real[real.len() - 1]);
            storage.push((r * width + lead) as i64);
        }
        real.push(real[real.len() - 1] + (last - lead) as i64);
        storage.push(((r + 1) * width) as i64);
    }
    Ok((real, storage))
}
