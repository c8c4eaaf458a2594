//! open-instruct's DPO batches: the Hugging Face keys under `chosen_`, `rejected_` and
//! `concatenated_`; the concatenated offsets must shift the rejected ones by the padded chosen
//! length (open-instruct #1420).

use rules::checks::{DpoConcat, KeyNames};
use rules::contract::{Contract, LabelsFact};
use thd::LabelConvention;

use super::common::{first_present, opt_tokens, scalar, token_tensor};
use super::hf::{self};
use super::{Dialect, Format, Input, Read};
use crate::Result;
use crate::pack::{BatchData, validate_offsets};
use crate::tensors::{BatchFile, Column};

/// The chosen and rejected packs and their concatenation.
pub struct Dpo;

impl Format for Dpo {
    fn name(&self) -> &'static str {
        "dpo"
    }
    fn family(&self) -> Option<Dialect> {
        Some(Dialect::Dpo)
    }
    fn summary(&self) -> &'static str {
        "the `cu-seq-lens` keys under `chosen_`, `rejected_` and `concatenated_` (open-instruct DPO)"
    }
    fn claims(&self, _: &Input<'_>) -> Result<bool> {
        Ok(true)
    }
    fn read(&self, input: &Input<'_>) -> Result<Read> {
        let (file, facts) = (input.file, input.facts);
        let part = |prefix: &str, name: &str| -> Result<BatchData> {
            let ids = hf::input_ids(file, prefix, Dialect::Dpo)?;
            if !file.contains(&format!("{prefix}cu_seq_lens_q")) {
                return Err(super::common::missing(
                    file,
                    &format!("{prefix}cu_seq_lens_q"),
                    Dialect::Dpo,
                ));
            }
            let b = hf::offsets_boundaries(file, prefix, ids.1.len(), 1)?;
            hf::pack(file, prefix, Some(name), facts, 1, ids, b)
        };
        let chosen = part("chosen_", "chosen")?;
        let rejected = part("rejected_", "rejected")?;
        let mut notes = Vec::new();
        let (concat, dpo) = dpo_concatenated(file, &chosen, &rejected, facts, &mut notes)?;
        let mut packs = vec![chosen, rejected];
        packs.extend(concat);
        Ok(Read { packs, dpo, notes })
    }
}

/// The DPO concatenation: the concatenated pack (with exact offsets rebuilt from the branches)
/// and the inputs of the offset check.
fn dpo_concatenated(
    file: &BatchFile,
    chosen: &BatchData,
    rejected: &BatchData,
    facts: &Contract,
    notes: &mut Vec<String>,
) -> Result<(Option<BatchData>, Option<DpoConcat>)> {
    let off_key =
        first_present(file, &["concatenated_cu_seq_lens_k", "concatenated_cu_seq_lens_q"]);
    let ids_key = "concatenated_input_ids";
    let tc = chosen.tokens();
    let expected_ids: Vec<i64> =
        chosen.input_ids.ints().iter().chain(rejected.input_ids.ints().iter()).collect();
    let mut tensors = Vec::new();
    let stored_ids =
        if file.contains(ids_key) { Some(token_tensor(file, ids_key)?.1) } else { None };
    if let Some(ids) = &stored_ids {
        tensors.push((ids_key.to_owned(), ids.clone(), expected_ids.clone()));
    }
    let pairs = [
        ("concatenated_labels", chosen.labels.as_ref(), rejected.labels.as_ref()),
        ("concatenated_position_ids", chosen.position_ids.as_ref(), rejected.position_ids.as_ref()),
    ];
    for (key, c, r) in pairs {
        if let (true, Some(c), Some(r)) = (file.contains(key), c, r) {
            let both = c.ints().iter().chain(r.ints().iter()).collect();
            tensors.push((key.to_owned(), token_tensor(file, key)?.1, both));
        }
    }
    let offsets = match off_key {
        Some(key) => {
            let v = file.ints(key)?.values;
            let total = stored_ids.as_ref().map_or(expected_ids.len(), Vec::len);
            validate_offsets(key, &v, total)?;
            Some(DpoConcat {
                key: key.to_owned(),
                concatenated: v,
                chosen: chosen.cu.ints().to_vec(),
                rejected: rejected.cu.ints().to_vec(),
                chosen_tokens: tc,
                tensors,
            })
        }
        None => {
            notes.push("no concatenated_cu_seq_lens_k: the DPO offsets are not checked".into());
            None
        }
    };
    // The exact layout of the concatenation, checked with the stored tensors where they match.
    let Some(ids) = stored_ids else {
        return Ok((None, offsets));
    };
    if ids.len() != expected_ids.len() || chosen.segments() == 0 {
        return Ok((None, offsets));
    }
    let last_c = chosen.cu.ints().last().unwrap_or(0);
    let mut cu = chosen.cu.ints().to_vec();
    cu.extend(rejected.cu.ints().iter().skip(1).map(|x| x + last_c));
    let mut slots: Vec<i64> = chosen.storage().to_vec();
    if let Some(l) = slots.last_mut() {
        *l = tc as i64;
    }
    slots.extend(rejected.storage().iter().skip(1).map(|x| x + tc as i64));
    let read = |key: &str| -> Result<Option<Column>> { opt_tokens(file, key, ids_key, ids.len()) };
    let pack = BatchData {
        part: Some("concatenated".into()),
        keys: KeyNames {
            input_ids: ids_key.into(),
            cu_seqlens: format!("{} (rebuilt from the branches)", off_key.unwrap_or("offsets")),
            max_seqlen: "concatenated_max_length_q".into(),
            labels: "concatenated_labels".into(),
            position_ids: "concatenated_position_ids".into(),
            seq_idx: "concatenated_seq_idx".into(),
            ..KeyNames::default()
        },
        mask_is_padding: false,
        rows: 1,
        labels: read("concatenated_labels")?,
        convention: facts
            .labels
            .and_then(LabelsFact::convention)
            .unwrap_or(LabelConvention::Unshifted),
        position_ids: read("concatenated_position_ids")?,
        absorbed: false,
        boundaries_from_positions: false,
        rows_are_sequences: false,
        cu_padded: (slots != cu).then(|| Column::from(slots)),
        cu: cu.into(),
        cu_k: None,
        max_seqlen: scalar(file, "concatenated_max_length_q")?,
        real_mask: None,
        seq_idx: read("concatenated_seq_idx")?,
        num_real_seqs: None,
        row_slots: None,
        side_tensors: Vec::new(),
        notes: Vec::new(),
        input_ids: ids.into(),
        ..BatchData::default()
    };
    Ok((Some(pack), offsets))
}
