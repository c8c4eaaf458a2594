//! OLMo-core's documents: no offsets, `doc_lens` `[B, D]` holds the lengths of each row's
//! documents (`olmo_core/data/collator.py` `DataCollator`); the kernel gets their cumulative
//! sums, and `max_doc_lens` its maximum length.

use super::hf::{self, Boundaries};
use super::{Format, Input, Read};
use crate::profile::Dialect;
use crate::tensors::{BatchFile, Ints};
use crate::{Error, Result};
use rules::words::plural;

/// `doc_lens` beside `input_ids`, no offsets.
pub struct DocLens;

impl Format for DocLens {
    fn name(&self) -> &'static str {
        "doc-lens"
    }
    fn family(&self) -> Option<Dialect> {
        Some(Dialect::Hf)
    }
    fn summary(&self) -> &'static str {
        "no offsets: `doc_lens` [B, D], each row's document lengths, zeros after them (OLMo-core)"
    }
    fn claims(&self, input: &Input<'_>) -> Result<bool> {
        Ok(hf::no_offsets(input.file) && input.file.contains("doc_lens"))
    }
    fn read(&self, input: &Input<'_>) -> Result<Read> {
        hf::read_single(input, |file, rows, tokens, _| {
            let cu = doc_lens_offsets(file, rows, tokens)?;
            let note = format!(
                "no offsets: {} read from `doc_lens` (OLMo-core: the lengths of each row's \
                 documents, zeros after them; the kernel gets their cumulative sums)",
                plural(cu.len() - 1, "document")
            );
            Ok(Boundaries {
                cu: cu.into(),
                names: Some(("doc_lens (cumulative)".into(), "cu_seq_lens_q_padded".into())),
                max_doc_lens: true,
                notes: vec![note],
                ..Boundaries::default()
            })
        })
    }
}

/// OLMo-core's documents (`olmo_core/data/collator.py` `DataCollator`, `data/utils.py`
/// `get_document_lengths` / `get_cumulative_document_lengths`): `doc_lens` `[B, D]` holds the
/// lengths of each row's documents, zero-padded to the longest row's count; the model drops
/// every zero and takes the cumulative sums over the flattened batch as `cu_doc_lens`. Returns
/// those offsets.
///
/// # Errors
/// A shape other than `[B, D]` for `B` rows (or `[D]` for one), a negative length, or a row
/// whose lengths do not add up to the row's width (the documents would run into the next row):
/// [`Error::Value`] naming the entry.
pub(super) fn doc_lens_offsets(file: &BatchFile, rows: usize, tokens: usize) -> Result<Vec<i64>> {
    let key = "doc_lens";
    let Ints { shape, values } = file.ints(key)?;
    let per_row = match shape.as_slice() {
        [d] if rows == 1 => *d,
        [b, d] if *b == rows => *d,
        _ => {
            return Err(Error::Shape {
                key: key.to_owned(),
                shape,
                expected: format!("[B, D] with B = {rows}, the rows of input_ids"),
            });
        }
    };
    let width = tokens.checked_div(rows).unwrap_or(0) as i64;
    let mut cu = vec![0i64];
    for r in 0..rows {
        let row = &values[r * per_row..(r + 1) * per_row];
        let mut sum = 0i64;
        for (j, &len) in row.iter().enumerate() {
            if len < 0 || sum + len > width {
                return Err(Error::Value {
                    key: key.to_owned(),
                    index: r * per_row + j,
                    value: len.to_string(),
                    expected: if len < 0 {
                        "a document length (>= 0; 0 after a row's documents)"
                    } else {
                        "lengths that fit the row: a row's documents add up to its width"
                    },
                });
            }
            sum += len;
            if len > 0 {
                cu.push(cu[cu.len() - 1] + len);
            }
        }
        if sum != width {
            return Err(Error::Value {
                key: key.to_owned(),
                index: r * per_row,
                value: format!("row {r}: Σ = {sum}"),
                expected: "lengths that add up to the row's width (input_ids [B, S]: S)",
            });
        }
    }
    Ok(cu)
}
