//! OLMo-core's padded instances (`NumpyPaddedFSLDataset`): one document per row, padded at
//! its end with the pad id; no mask, no `doc_lens`. Read only under a profile whose
//! `documents = "row-pad-tail"`.

use rules::checks::IntSlice;
use rules::contract::LabelsFact;
use thd::{IGNORE_INDEX, LabelConvention};

use super::common::token_tensor;
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
        Ok(hf::no_offsets(input.file) && input.facts.documents == Some(DocumentsFact::RowPadTail))
    }
    fn read(&self, input: &Input<'_>) -> Result<Read> {
        let pad = input.facts.pad_token_id;
        let shifted =
            input.facts.labels.and_then(LabelsFact::convention) == Some(LabelConvention::Shifted);
        hf::read_single(input, |file, rows, tokens, ids| {
            // The labels tell a document's last token that is the pad id (an EOS equal to it:
            // GPT-2, Pythia) from the padding: it is trained, the padding is not.
            let labels = match file.contains("labels") {
                true => Some(token_tensor(file, "labels")?.1).filter(|l| l.len() == tokens),
                false => None,
            };
            let trained = |t: usize| {
                labels.as_ref().is_some_and(|l| match shifted {
                    false => l[t] != IGNORE_INDEX,
                    true => {
                        !t.is_multiple_of(tokens / rows.max(1))
                            && l[t - 1] != IGNORE_INDEX
                            && l[t - 1] == ids.at(t)
                    }
                })
            };
            let (real, storage, kept) = pad_tail_rows(ids, rows, pad, trained);
            let width = tokens / rows.max(1);
            let kept_note = (kept > 0).then(|| {
                format!(
                    "the first trailing pad id of {} is trained: read as its document's last \
                     token (an EOS equal to the pad id), the pad ids after it as the padding",
                    plural(kept, "row")
                )
            });
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
                notes: std::iter::once(note).chain(kept_note).collect(),
                ..Boundaries::default()
            })
        })
    }
}

/// Rows of one document each, padded at the end with `pad` (none read without it). The first
/// pad id of a row's tail is its document's last token when `trained(t)` says so (one at most:
/// a document has one end, so padding that carries labels past it is still padding, judged by
/// `pad-labels`). Returns the real and the storage offsets, and how many rows kept one.
pub(super) fn pad_tail_rows(
    input_ids: IntSlice<'_>,
    rows: usize,
    pad: Option<i64>,
    trained: impl Fn(usize) -> bool,
) -> (Vec<i64>, Vec<i64>, usize) {
    let width = input_ids.len().checked_div(rows).unwrap_or(0);
    let (mut real, mut storage, mut kept) = (vec![0i64], vec![0i64], 0);
    for r in 0..rows {
        let row = input_ids.slice(r * width..(r + 1) * width);
        let mut tail = pad.map_or(0, |p| row.iter().rev().take_while(|&x| x == p).count());
        if tail > 0 && trained(r * width + width - tail) {
            tail -= 1;
            kept += 1;
        }
        real.push(real[real.len() - 1] + (width - tail) as i64);
        storage.push(((r + 1) * width) as i64);
    }
    (real, storage, kept)
}
