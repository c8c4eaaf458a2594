//! One pack in a dialect-free form: what the reader builds and the rules judge.
//!
//! A [`BatchData`] is built from the tensors of one file (or one part of a DPO file) by
//! the modules of [`crate::formats`]. Building it validates everything that makes the file *understood*
//! (offsets that are offsets, shapes that agree); every verdict comes from the rules of
//! `rules::checks`, applied to its [`BatchData::view`].

use rules::checks::{BlockMaskSummary, IntSlice, KeyNames, LayoutView, SideTensor, check_offsets};
use rules::contract::Contract;
use thd::LabelConvention;

use crate::tensors::Column;
use crate::{Error, Result};

/// One pack of `T` tokens and the segments that describe it, as read from a file: owned
/// tensors and the file's key names. The rules judge its [`BatchData::view`].
#[derive(Debug, Clone, Default)]
pub struct BatchData {
    /// Part of the file (`chosen`, `rejected`, `concatenated`), `None` for a plain batch.
    pub part: Option<String>,
    /// The keys the fields came from, as the file spells them.
    pub keys: KeyNames,
    /// The mask is a padding mask (1 = pad).
    pub mask_is_padding: bool,
    /// Rows of the stored tensors (`B` of `[B, S]`, 1 for `[T]`).
    pub rows: usize,
    /// Token ids, flattened row-major: `T` entries (in place in the file where they can be).
    pub input_ids: Column,
    /// Labels, `T` entries.
    pub labels: Option<Column>,
    /// How labels line up with logits.
    pub convention: LabelConvention,
    /// Position ids, `T` entries.
    pub position_ids: Option<Column>,
    /// The documents were read from position-id restarts (see [`LayoutView`]).
    pub boundaries_from_positions: bool,
    /// Read from plain `[B, S]` rows without offsets (BSHD): each row is one sequence.
    pub rows_are_sequences: bool,
    /// Real offsets: `B + 1` entries from 0, non-decreasing, within `T` (in place in the file
    /// where the file stores them as they are read).
    pub cu: Column,
    /// Storage offsets (each slot `pᵢ ≥ sᵢ` is checked, not assumed).
    pub cu_padded: Option<Column>,
    /// Whether the real offsets were recovered from offsets that absorbed trailing padding
    /// (the stored offsets are then [`BatchData::cu_padded`]).
    pub absorbed: bool,
    /// `max_seqlen` / `max_length_q` as declared.
    pub max_seqlen: Option<i64>,
    /// `true` where the mask says the token is real (attention_mask 1, padding_mask false).
    pub real_mask: Option<Vec<bool>>,
    /// Sequence index of every token.
    pub seq_idx: Option<Column>,
    /// `num_real_seqs` as declared.
    pub num_real_seqs: Option<usize>,
    /// Automodel BSHD rows: per row, the sum of its slots (checked against `S`).
    pub row_slots: Option<Vec<i64>>,
    /// Key offsets (`cu_seq_lens_k`, `cu_seqlens_kv`) when the file has them.
    pub cu_k: Option<Column>,
    /// A 4-D attention mask, summarised per query: `(key, summary)`.
    pub block_mask: Option<(String, BlockMaskSummary)>,
    /// The loss mask the labels were derived from, when the file has no labels (the targets
    /// are the tokens it trains, AReaL's and slime's batches): a CP group derives them again on
    /// the reassembled tokens, since a rank's next token is not the sequence's.
    pub loss_mask_targets: Option<Vec<bool>>,
    /// The profile's per-token side tensors present in the file: `(key, entries)`.
    pub side_tensors: Vec<(String, usize)>,
    /// Side tensors with one entry per prediction (the profile's `prediction_tensors`):
    /// `(key, entries)`.
    pub prediction_tensors: Vec<(String, usize)>,
    /// The facts in force ([`crate::facts::Facts`]), the same for every pack of a file.
    pub facts: Contract,
    /// Things worth knowing that are not violations.
    pub notes: Vec<String>,
}

impl BatchData {
    /// Number of tokens `T`.
    pub fn tokens(&self) -> usize {
        self.input_ids.len()
    }

    /// Number of segments `B`.
    pub fn segments(&self) -> usize {
        self.cu.len().saturating_sub(1)
    }

    /// Storage offsets: padded if present, real otherwise.
    pub fn storage(&self) -> IntSlice<'_> {
        self.cu_padded.as_ref().unwrap_or(&self.cu).ints()
    }

    /// The side tensors as the view takes them ([`LayoutView::side_tensors`]).
    pub fn side_views(&self) -> Vec<SideTensor<'_>> {
        let per_token = self.side_tensors.iter().map(|(key, entries)| SideTensor {
            key,
            entries: *entries,
            per_prediction: false,
        });
        let per_prediction = self.prediction_tensors.iter().map(|(key, entries)| SideTensor {
            key,
            entries: *entries,
            per_prediction: true,
        });
        per_token.chain(per_prediction).collect()
    }

    /// The plain-data view the rules of `rules::checks` judge; its side tensors are set
    /// from [`BatchData::side_views`] by the caller, which owns them.
    pub fn view(&self) -> LayoutView<'_> {
        LayoutView {
            num_tokens: self.input_ids.len(),
            rows: self.rows,
            input_ids: Some(self.input_ids.ints()),
            cu_seqlens: self.cu.ints(),
            cu_seqlens_padded: self.cu_padded.as_ref().map(Column::ints),
            cu_seqlens_k: self.cu_k.as_ref().map(Column::ints),
            cu_seqlens_q_stored: if self.absorbed {
                self.cu_padded.as_ref().map(Column::ints)
            } else {
                None
            },
            max_seqlen: self.max_seqlen,
            position_ids: self.position_ids.as_ref().map(Column::ints),
            labels: self.labels.as_ref().map(Column::ints),
            label_convention: self.convention,
            mask: self.real_mask.as_deref(),
            mask_is_padding: self.mask_is_padding,
            seq_idx: self.seq_idx.as_ref().map(Column::ints),
            num_real_seqs: self.num_real_seqs,
            row_slots: self.row_slots.as_deref(),
            boundaries_from_positions: self.boundaries_from_positions,
            keys: Some(&self.keys),
            block_mask: self.block_mask.as_ref().map(|(key, s)| s.view(key)),
            facts: self.facts,
            side_tensors: &[],
        }
    }
}

/// Validates offsets read from `key` against `tokens` with the shared LAYOUT `offsets` rule
/// ([`rules::checks::check_offsets`]): offsets that are not offsets address nothing, so the
/// file is refused (exit 2) with the rule's message.
///
/// # Errors
/// [`Error::Offsets`] naming the key, the index and the value at fault.
///
/// # Example
/// ```
/// use reader::pack::validate_offsets;
/// assert!(validate_offsets("cu_seqlens", &[0, 3, 5], 5).is_ok());
/// let err = validate_offsets("cu_seqlens", &[0, 5, 3], 5).unwrap_err();
/// assert_eq!(
///     err.to_string(),
///     "`cu_seqlens` is non-decreasing: expected cu_seqlens[2] >= 5, got cu_seqlens[2] = 3"
/// );
/// ```
pub fn validate_offsets<'a>(
    key: &str,
    values: impl Into<IntSlice<'a>>,
    tokens: usize,
) -> Result<()> {
    let values = values.into();
    check_offsets(key, values, tokens).map_err(|v| Error::Offsets {
        values: values.iter().collect(),
        tokens,
        key: key.to_owned(),
        rule: format!(
            "{}: expected {}, got {}",
            v.rule.strip_prefix(key).map_or(v.rule.as_str(), str::trim_start),
            v.expected,
            v.got
        ),
    })
}
