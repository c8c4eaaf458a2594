//! OLMo-core's padded instances (`NumpyPaddedFSLDataset`): one document per row, padded at
//! its end with the pad id; no mask, no `doc_lens`. Read only under a profile whose
//! `documents = "row-pad-tail"`.

use rules::checks::IntSlice;

use super::hf::{self, Boundaries};
use super::{Format, Input, Read};
use crate::Result;
use crate::profile::{Dialect, DocumentsFact};
use rules::words::plural;

/// One document per row before its trailing pad ids.
pub struct PadTail;

impl Format for PadTail {
    fn name(&self) -> &'static str {
        "row-pad-tail"
    }
    fn family(&self) -> Option<Dialect> {
        Some(Dialect::Hf)
    }
    fn summary(&self) -> &'static str {
        "no offsets, no mask: one document per row, its trailing pad ids the padding (profile fact `documents = \"row-pad-tail\"`)"
    }
    fn claims(&self, input: &Input<'_>) -> Result<bool> {
        Ok(hf::no_offsets(input.file)
            && input.opts.fact(|p| p.documents) == Some(DocumentsFact::RowPadTail))
    }
    fn read(&self, input: &Input<'_>) -> Result<Read> {
        let pad = input.opts.pad_token_id;
        hf::read_single(input, |_, rows, tokens, ids| {
            let (real, storage) = pad_tail_rows(ids, rows, pad);
            let width = tokens / rows.max(1);
            let note = match pad {
                Some(pad) => format!(
                    "no offsets: {} of {width} tokens, one document each (OLMo-core padded \
                     instances), its trailing pad ids ({pad}) the padding",
                    plural(rows, "row"),
                ),
                None => format!(
                    "no offsets: {} of {width} tokens, one document each (OLMo-core padded \
                     instances); without a pad id (--pad-token-id) every token is read as real",
                    plural(rows, "row"),
                ),
            };
            Ok(Boundaries {
                cu: real.into(),
                storage: Some(storage),
                names: Some(("input_ids (each row before its pad tail)".into(), "the rows".into())),
                rows_are_sequences: true,
                notes: vec![note],
                ..Boundaries::default()
            })
        })
    }
}

/// Rows of one document each, padded at the end with `pad` (none read without it). Returns the
/// real and the storage offsets.
pub(super) fn pad_tail_rows(
    input_ids: IntSlice<'_>,
    rows: usize,
    pad: Option<i64>,
) -> (Vec<i64>, Vec<i64>) {
    let width = input_ids.len().checked_div(rows).unwrap_or(0);
    let (mut real, mut storage) = (vec![0i64], vec![0i64]);
    for r in 0..rows {
        let row = input_ids.slice(r * width..(r + 1) * width);
        let tail = pad.map_or(0, |p| row.iter().rev().take_while(|&x| x == p).count());
        real.push(real[real.len() - 1] + (width - tail) as i64);
        storage.push(((r + 1) * width) as i64);
    }
    (real, storage)
}
