//! The Hugging Face family's pack (transformers, bionemo, TRL, open-instruct and the stacks
//! whose profiles map onto its names): the per-token tensors under a key prefix, around the
//! document boundaries one of the family's formats read ([`Boundaries`]).

use rules::checks::{IntSlice, KeyNames};
use rules::contract::{Contract, LabelsFact};
use thd::LabelConvention;

use super::common::{
    count, counted_tokens, derived_input_labels, first_present, key_bound, labels_from_loss_mask,
    masked_labels, max_doc_len, missing, offsets, opt_mask, padded_count, scalar, shard_bound,
    token_column,
};
use super::{Dialect, Format, Input, Read};
use crate::pack::BatchData;
use crate::tensors::{BatchFile, Column};
use crate::{Error, Result};

/// Where a format found the documents of a pack: the real offsets, and what else the source
/// told (storage slots, a mask, the names its messages use).
#[derive(Debug, Default)]
pub(super) struct Boundaries {
    /// Real offsets, `B + 1` entries (in place in the file where it stores them).
    pub cu: Column,
    /// Storage offsets when the source tells them (rows, sample slots); otherwise the file's
    /// `cu_seq_lens_q_padded` if present.
    pub storage: Option<Vec<i64>>,
    /// The real-token mask the source implies (sample numbers); otherwise `attention_mask`.
    pub real_mask: Option<Vec<bool>>,
    /// `(offsets, storage offsets)` as messages name them, when not the file's keys.
    pub names: Option<(String, String)>,
    /// Read from position-id restarts.
    pub from_positions: bool,
    /// Each row is one sequence (no offsets, BSHD).
    pub rows_are_sequences: bool,
    /// `max_seqlen` is OLMo-core's `max_doc_lens`.
    pub max_doc_lens: bool,
    /// The `attention_mask` is not a per-token mask (a 4-D block mask): no real-token mask.
    pub no_token_mask: bool,
    /// The position ids the source read, when they are not the file's tensor as is (a CP
    /// rank's piece of global position ids).
    pub position_ids: Option<Vec<i64>>,
    /// What the source noted.
    pub notes: Vec<String>,
}

/// The offsets the kernel gets, `cu_seq_lens_q` (`DataCollatorWithFlattening` with
/// `return_flash_attn_kwargs`, bionemo, TRL): the family's first format. A file with only the
/// `concatenated_` keys of a DPO batch is read as one pack under that prefix.
pub struct CuSeqLens;

impl Format for CuSeqLens {
    fn name(&self) -> &'static str {
        "cu-seq-lens"
    }
    fn family(&self) -> Option<Dialect> {
        Some(Dialect::Hf)
    }
    fn summary(&self) -> &'static str {
        "`cu_seq_lens_q` (`_k`, `_q_padded`), `max_length_q`; `attention_mask` 1 = real; `labels` unshifted or `shift_labels`"
    }
    fn claims(&self, input: &Input<'_>) -> Result<bool> {
        Ok(input.file.contains("cu_seq_lens_q")
            || input.file.contains("concatenated_cu_seq_lens_q"))
    }
    fn read(&self, input: &Input<'_>) -> Result<Read> {
        let file = input.file;
        let mut notes = Vec::new();
        let prefix =
            if !file.contains("cu_seq_lens_q") && file.contains("concatenated_cu_seq_lens_q") {
                notes.push(
                    "only the concatenated_ keys: checked as one HF pack (dump the chosen_ and \
                 rejected_ keys too to check the DPO offsets)"
                        .into(),
                );
                "concatenated_"
            } else {
                ""
            };
        let ids = input_ids(file, prefix, Dialect::Hf)?;
        let b = offsets_boundaries(file, prefix, ids.1.len(), input.scale)?;
        let pack = pack(file, prefix, None, input.facts, input.scale, ids, b)?;
        Ok(Read { packs: vec![pack], dpo: None, notes })
    }
}

/// Whether the file has no offsets of either family: what the formats that find documents
/// elsewhere (sample numbers, position restarts, rows) require. Offsets under another family's
/// name are a missing key, not something to paper over.
pub(super) fn no_offsets(file: &BatchFile) -> bool {
    !file.contains("cu_seq_lens_q")
        && first_present(file, &["cu_seqlens", "cu_seqlens_q", "seq_lens"]).is_none()
}

/// The error of a family none of whose formats reads the file: its first missing key.
pub(super) fn unread(input: &Input<'_>) -> Error {
    let file = input.file;
    if file.contains("input_ids") {
        missing(file, "cu_seq_lens_q", Dialect::Hf)
    } else {
        missing(file, "input_ids", Dialect::Hf)
    }
}

/// Reads one plain pack (no prefix) whose boundaries `boundaries` finds from the file, its rows,
/// its tokens and its token ids.
pub(super) fn read_single(
    input: &Input<'_>,
    boundaries: impl FnOnce(&BatchFile, usize, usize, IntSlice<'_>) -> Result<Boundaries>,
) -> Result<Read> {
    let (rows, ids) = input_ids(input.file, "", Dialect::Hf)?;
    let b = boundaries(input.file, rows, ids.len(), ids.ints())?;
    let pack = pack(input.file, "", None, input.facts, input.scale, (rows, ids), b)?;
    Ok(Read { packs: vec![pack], dpo: None, notes: Vec::new() })
}

/// The `input_ids` of a pack under `prefix`: `(rows, ids)`.
pub(super) fn input_ids(
    file: &BatchFile,
    prefix: &str,
    family: Dialect,
) -> Result<(usize, Column)> {
    let ids_key = format!("{prefix}input_ids");
    if !file.contains(&ids_key) {
        return Err(missing(file, &ids_key, family));
    }
    token_column(file, &ids_key)
}

/// Boundaries from the offsets the kernel gets, `{prefix}cu_seq_lens_q`. `scale` is the CP size
/// of a rank's shard, whose offsets may be the global ones (bionemo's CP collator keeps the
/// batch's `cu_seq_lens_q`), 1 otherwise.
pub(super) fn offsets_boundaries(
    file: &BatchFile,
    prefix: &str,
    tokens: usize,
    scale: usize,
) -> Result<Boundaries> {
    let mut notes = Vec::new();
    let cu = offsets(
        file,
        &format!("{prefix}cu_seq_lens_q"),
        shard_bound(tokens, scale),
        None,
        false,
        &mut notes,
    )?;
    Ok(Boundaries { cu, notes, ..Boundaries::default() })
}

/// Builds the pack from the boundaries `b` a format read: every per-token tensor under
/// `prefix`, checked for shape only (the rules judge the values).
#[allow(clippy::too_many_arguments)]
pub(super) fn pack(
    file: &BatchFile,
    prefix: &str,
    part: Option<&str>,
    facts: &Contract,
    scale: usize,
    (rows, input_ids): (usize, Column),
    b: Boundaries,
) -> Result<BatchData> {
    let k = |name: &str| format!("{prefix}{name}");
    let ids_key = k("input_ids");
    let tokens = input_ids.len();
    let Boundaries {
        cu,
        storage,
        real_mask: source_mask,
        names,
        from_positions,
        rows_are_sequences,
        max_doc_lens,
        no_token_mask,
        position_ids: source_positions,
        mut notes,
    } = b;
    let cu_key = k("cu_seq_lens_q");
    let pos_key = k("position_ids");
    let derived_labels = part.is_none() && facts.labels == Some(LabelsFact::FromInputIds);
    // Per-token tensors of another length: judged by `token-counts`.
    let mut counted = Vec::new();
    let cu_k_key = k("cu_seq_lens_k");
    let cu_k = if file.contains(&cu_k_key) {
        // The same reader as the q offsets: a 2-D `[B, N]` key offset is the same shape error.
        Some(offsets(file, &cu_k_key, key_bound(tokens, scale, facts), None, false, &mut notes)?)
    } else {
        None
    };
    let padded_key = k("cu_seq_lens_q_padded");
    let cu_padded = if storage.is_some() {
        storage.map(Column::from)
    } else if file.contains(&padded_key) {
        let p = offsets(file, &padded_key, shard_bound(tokens, scale), None, false, &mut notes)?;
        padded_count(&padded_key, &p, &cu_key, &cu)?;
        Some(p)
    } else {
        None
    };
    let (labels_key, convention) =
        match (file.contains(&k("labels")), file.contains(&k("shift_labels"))) {
            (true, _) => (Some(k("labels")), LabelConvention::Unshifted),
            (false, true) => (Some(k("shift_labels")), LabelConvention::Shifted),
            _ => (None, LabelConvention::Unshifted),
        };
    let labels = match &labels_key {
        Some(key) => counted_tokens(file, key, tokens, &mut counted)?,
        None if derived_labels => {
            Some(derived_input_labels(file, input_ids.ints(), rows, &mut notes)?.into())
        }
        None => None,
    };
    // A `loss_mask` beside labels that keep token ids where it is 0 (Megatron-LM's GPTDataset):
    // those labels are not trained.
    let labels = if prefix.is_empty() {
        masked_labels(file, labels, &ids_key, tokens, &mut notes)?
    } else {
        labels
    };
    let seq_idx_key = k("seq_idx");
    let mask_key = k("attention_mask");
    let max_key = k("max_length_q");
    let (cu_key, padded_key) = names.unwrap_or((cu_key, padded_key));
    let mut pack = BatchData {
        part: part.map(str::to_owned),
        keys: KeyNames {
            input_ids: ids_key.clone(),
            cu_seqlens: cu_key,
            cu_seqlens_padded: padded_key,
            cu_seqlens_k: cu_k_key,
            max_seqlen: if max_doc_lens { "max_doc_lens".to_owned() } else { max_key.clone() },
            mask: mask_key.clone(),
            labels: match &labels_key {
                Some(key) => key.clone(),
                None if derived_labels => "labels (input_ids under label_mask)".to_owned(),
                None => k("labels"),
            },
            position_ids: pos_key.clone(),
            seq_idx: seq_idx_key.clone(),
            num_real_seqs: k("num_real_seqs"),
        },
        mask_is_padding: false,
        rows,
        labels,
        convention: facts.labels.and_then(LabelsFact::convention).unwrap_or(convention),
        position_ids: match source_positions {
            Some(p) => Some(p.into()),
            None => counted_tokens(file, &pos_key, tokens, &mut counted)?,
        },
        absorbed: false,
        cu,
        cu_padded,
        cu_k,
        max_seqlen: if max_doc_lens { max_doc_len(file, rows)? } else { scalar(file, &max_key)? },
        real_mask: match source_mask {
            Some(m) => Some(m),
            None if no_token_mask => None,
            None => opt_mask(file, &mask_key, &ids_key, tokens, false)?,
        },
        seq_idx: counted_tokens(file, &seq_idx_key, tokens, &mut counted)?,
        num_real_seqs: count(file, &k("num_real_seqs"))?,
        row_slots: None,
        side_tensors: counted,
        notes,
        input_ids,
        boundaries_from_positions: from_positions,
        rows_are_sequences,
        ..BatchData::default()
    };
    // A batch without labels whose `loss_mask` says what is trained (RL trainers), read as in
    // the TransformerEngine family.
    if part.is_none() && pack.labels.is_none() {
        labels_from_loss_mask(file, &mut pack, facts)?;
    }
    Ok(pack)
}
