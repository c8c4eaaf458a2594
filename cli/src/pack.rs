//! One pack in a dialect-free form: what the checks read.
//!
//! A [`Pack`] is built from the tensors of one file (or one part of a DPO file) by
//! [`crate::dialect`]. Building it validates everything that makes the file *understood*
//! (offsets that are offsets, shapes that agree); what is left for [`crate::checks`] are the
//! invariants a wrong collator breaks.

use std::ops::Range;

use serde::Serialize;
use thd::LabelConvention;

use crate::{Error, Result};

/// Which file key supplied each field, so that messages quote the user's names.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct KeyNames {
    /// Real offsets (`cu_seq_lens_q`, `cu_seqlens`, ...).
    pub cu: String,
    /// Storage offsets, if any.
    pub cu_padded: Option<String>,
    /// The declared maximum segment length, if any.
    pub max_seqlen: Option<String>,
    /// The mask, if any.
    pub mask: Option<String>,
    /// Labels, if any.
    pub labels: Option<String>,
    /// Position ids, if any.
    pub position_ids: Option<String>,
    /// Sequence index, if any.
    pub seq_idx: Option<String>,
    /// Key offsets, if any.
    pub cu_k: Option<String>,
}

/// One pack of `T` tokens and the segments that describe it.
#[derive(Debug, Clone, Default)]
pub struct Pack {
    /// Part of the file (`chosen`, `rejected`, `concatenated`), `None` for a plain batch.
    pub part: Option<String>,
    /// The keys the fields came from.
    pub keys: KeyNames,
    /// Rows of the stored tensors (`B` of `[B, S]`, 1 for `[T]`).
    pub rows: usize,
    /// Token ids, flattened row-major: `T` entries.
    pub input_ids: Vec<i64>,
    /// Labels, `T` entries.
    pub labels: Option<Vec<i64>>,
    /// How labels line up with logits.
    pub convention: LabelConvention,
    /// Position ids, `T` entries.
    pub position_ids: Option<Vec<i64>>,
    /// Real offsets: `B + 1` entries from 0, non-decreasing, within `T`.
    pub cu: Vec<i64>,
    /// Storage offsets (each slot `pᵢ ≥ sᵢ` is checked, not assumed).
    pub cu_padded: Option<Vec<i64>>,
    /// Whether the storage offsets come from the file (`false`: derived, e.g. for a DPO
    /// concatenation or trailing-pad absorption).
    pub padded_in_file: bool,
    /// Whether the real offsets were recovered from offsets that absorbed trailing padding
    /// (the stored offsets are then [`Pack::cu_padded`]).
    pub absorbed: bool,
    /// `max_seqlen` / `max_length_q` as declared.
    pub max_seqlen: Option<i64>,
    /// `true` where the mask says the token is real (attention_mask 1, padding_mask false).
    pub real_mask: Option<Vec<bool>>,
    /// Sequence index of every token.
    pub seq_idx: Option<Vec<i64>>,
    /// `num_real_seqs` as declared.
    pub num_real_seqs: Option<i64>,
    /// Automodel BSHD rows: per row, the sum of its slots (checked against `S`).
    pub row_slots: Option<Vec<i64>>,
    /// Key offsets (`cu_seq_lens_k`, `cu_seqlens_kv`) when the file has them.
    pub cu_k: Option<Vec<i64>>,
    /// Things worth knowing that are not violations.
    pub notes: Vec<String>,
}

impl Pack {
    /// Number of tokens `T`.
    pub fn tokens(&self) -> usize {
        self.input_ids.len()
    }

    /// Number of segments `B`.
    pub fn segments(&self) -> usize {
        self.cu.len().saturating_sub(1)
    }

    /// Storage offsets: padded if present, real otherwise.
    pub fn storage(&self) -> &[i64] {
        self.cu_padded.as_deref().unwrap_or(&self.cu)
    }

    /// Tokens of segment `i`'s slot (storage).
    pub fn slot(&self, i: usize) -> Range<usize> {
        let s = self.storage();
        s[i] as usize..s[i + 1] as usize
    }

    /// Real length `sᵢ`.
    pub fn real_len(&self, i: usize) -> usize {
        (self.cu[i + 1] - self.cu[i]) as usize
    }

    /// Tokens of segment `i`'s real part: the first `sᵢ` tokens of its slot (clamped to the
    /// slot, so that a slot shorter than the real length never indexes past it).
    pub fn real(&self, i: usize) -> Range<usize> {
        let slot = self.slot(i);
        slot.start..slot.start + self.real_len(i).min(slot.len())
    }
}

/// Validates offsets read from `key` against `tokens`: non-empty, from 0, non-decreasing (so
/// never negative), within int32, last entry at most `tokens`.
///
/// # Errors
/// [`Error::Offsets`] naming the index and value at fault.
///
/// # Example
/// ```
/// use thdcheck::pack::validate_offsets;
/// assert!(validate_offsets("cu_seqlens", &[0, 3, 5], 5).is_ok());
/// let err = validate_offsets("cu_seqlens", &[0, 5, 3], 5).unwrap_err();
/// assert_eq!(err.to_string(), "`cu_seqlens` must be non-decreasing: [2]=3 < [1]=5");
/// ```
pub fn validate_offsets(key: &str, values: &[i64], tokens: usize) -> Result<()> {
    let bad = |rule: String| Err(Error::Offsets { key: key.to_owned(), rule });
    let Some(&first) = values.first() else {
        return bad("is empty: offsets need B + 1 entries, starting with 0".into());
    };
    if first != 0 {
        return bad(format!("must start at 0, got [0]={first}"));
    }
    for (i, w) in values.windows(2).enumerate() {
        if w[1] < 0 {
            return bad(format!("has a negative offset [{}]={}", i + 1, w[1]));
        }
        if w[1] < w[0] {
            return bad(format!("must be non-decreasing: [{}]={} < [{}]={}", i + 1, w[1], i, w[0]));
        }
    }
    if let Some(i) = values.iter().position(|&v| v > i64::from(i32::MAX)) {
        return bad(format!("overflows int32: [{i}]={} > {}", values[i], i32::MAX));
    }
    let last = values[values.len() - 1];
    if last as u64 > tokens as u64 {
        return bad(format!("ends beyond the tokens: [{}]={last} > T={tokens}", values.len() - 1));
    }
    Ok(())
}
