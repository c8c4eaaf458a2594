//! No offsets: documents delimited by the EOS token, which ends every document (Megatron-LM's
//! `reset_attention_mask` / `reset_position_ids`, where the model derives its document mask
//! from the token ids). Read only under a profile whose `documents = "eos"`, with the EOS id (the profile's or
//! metadata `eos_token_id`).

use rules::checks::IntSlice;

use super::hf::{self, Boundaries};
use super::{Format, Input, Read};
use crate::Result;
use crate::profile::{Dialect, DocumentsFact};
use rules::words::plural;

/// A document ends after every EOS token.
pub struct Eos;

/// The EOS id of a profile whose documents are EOS-delimited.
pub(super) fn eos_id(input: &Input<'_>) -> Option<i64> {
    (input.facts.documents == Some(DocumentsFact::Eos))
        .then_some(input.facts.eos_token_id)
        .flatten()
}

impl Format for Eos {
    fn name(&self) -> &'static str {
        "eos-delimited"
    }
    fn family(&self) -> Option<Dialect> {
        None
    }
    fn summary(&self) -> &'static str {
        "no offsets: a document ends after every EOS token (profile facts `documents = \"eos\"`, `eos_token_id`); a row's trailing pad ids are its last slot's padding"
    }
    fn claims(&self, input: &Input<'_>) -> Result<bool> {
        Ok(hf::no_offsets(input.file) && eos_id(input).is_some())
    }
    fn read(&self, input: &Input<'_>) -> Result<Read> {
        let eos = eos_id(input).unwrap_or_default();
        let pad = input.facts.pad_token_id.filter(|&p| p != eos);
        hf::read_single(input, |_, rows, _, ids| {
            let (cu, storage) = eos_offsets(ids, rows, eos, pad);
            let note = format!(
                "no offsets: {} read from the EOS tokens ({eos}) of `input_ids`, a document \
                 ending after each",
                plural(cu.len() - 1, "document")
            );
            Ok(Boundaries {
                storage: (storage != cu).then_some(storage),
                cu: cu.into(),
                names: Some((
                    format!("input_ids (documents ending at EOS {eos})"),
                    "input_ids (each document and its row's trailing padding)".into(),
                )),
                notes: vec![note],
                ..Boundaries::default()
            })
        })
    }
}

/// Document offsets from EOS tokens: within each row, a document ends after every `eos`; what
/// follows a row's last EOS is a document of its own (cut by the pack length) unless it is
/// only `pad` ids, which are then the padding of the row's last slot. Returns the real and the
/// storage offsets.
///
/// ```text
/// ids [5 6 2 7 2 9 0 0], eos 2, pad 0 → cu [0 3 5 6], storage [0 3 5 8]
/// ```
pub(super) fn eos_offsets(
    ids: IntSlice<'_>,
    rows: usize,
    eos: i64,
    pad: Option<i64>,
) -> (Vec<i64>, Vec<i64>) {
    let width = ids.len().checked_div(rows.max(1)).unwrap_or(0);
    let (mut cu, mut storage) = (vec![0i64], vec![0i64]);
    for r in 0..rows.max(1) {
        let (start, end) = (r * width, (r + 1) * width);
        let row = ids.slice(start..end);
        let tail = pad.map_or(0, |p| row.iter().rev().take_while(|&x| x == p).count());
        let real_end = end - tail;
        let mut doc_start = start;
        for t in start..real_end {
            if ids.at(t) == eos {
                cu.push(t as i64 + 1);
                storage.push(t as i64 + 1);
                doc_start = t + 1;
            }
        }
        if doc_start < real_end {
            cu.push(real_end as i64);
            storage.push(end as i64);
        } else if let Some(last) = storage.last_mut()
            && *last as usize == doc_start
            && doc_start > start
        {
            // The row's padding belongs to its last document's slot.
            *last = end as i64;
        } else if end > doc_start {
            // A row of padding only: an empty segment whose slot is the padding.
            cu.push(doc_start as i64);
            storage.push(end as i64);
        }
    }
    (cu, storage)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn documents_end_after_each_eos_and_padding_joins_the_last_slot() {
        let ids = [5i64, 6, 2, 7, 2, 9, 0, 0];
        let (cu, st) = eos_offsets(IntSlice::I64(&ids), 1, 2, Some(0));
        assert_eq!(cu, [0, 3, 5, 6]);
        assert_eq!(st, [0, 3, 5, 8]);
        // Ending on an EOS, then padding: the padding is the last document's slot.
        let ids = [5i64, 2, 7, 2, 0, 0];
        let (cu, st) = eos_offsets(IntSlice::I64(&ids), 1, 2, Some(0));
        assert_eq!((cu, st), (vec![0, 2, 4], vec![0, 2, 6]));
        // Two rows: a document never runs into the next row.
        let ids = [5i64, 6, 7, 2, 8, 9];
        let (cu, st) = eos_offsets(IntSlice::I64(&ids), 2, 2, None);
        assert_eq!((cu, st), (vec![0, 3, 4, 6], vec![0, 3, 4, 6]));
    }
}
