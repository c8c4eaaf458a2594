//! The TransformerEngine family (TE, Megatron, Megatron-Bridge, NeMo Automodel, AReaL):
//! `cu_seqlens` / `cu_seqlens_q` (`_kv`, `_padded`), `max_seqlen`, or Automodel's `seq_lens` /
//! `seq_lens_padded` `[B, K]` with the -1000 sentinel; `padding_mask` (1 = pad); `labels`
//! shifted.

use rules::checks::KeyNames;
use rules::contract::{Contract, LabelsFact};
use thd::LabelConvention;

use super::common::{
    count, counted_tokens, first_present, ignore_extra, key_bound, labels_from_loss_mask,
    masked_labels, missing, offsets, opt_mask, padded_count, scalar, shard_bound, token_column,
};
use super::{Dialect, Format, Input, Read};
use crate::pack::{BatchData, validate_offsets};
use crate::profile::{MaskFact, OffsetsEnd, OffsetsFact, TrailingRepeats};
use crate::tensors::{BatchFile, Column, Ints};
use crate::{Error, Result};
use rules::words::plural;

/// NeMo Automodel's `split_batch_into_thd_chunks`: offsets `[C, K]` beside `[C, S]` token rows,
/// one pack per row, each its own attention call with its own offsets.
pub struct Chunks;

/// `cu_seqlens` / `cu_seqlens_q` offsets.
pub struct CuSeqlens;

/// Automodel's BSHD rows: `seq_lens` (`seq_lens_padded`) `[B, K]` with a sentinel in empty
/// slots.
pub struct SeqLens;

impl Format for Chunks {
    fn name(&self) -> &'static str {
        "te-chunks"
    }
    fn family(&self) -> Option<Dialect> {
        Some(Dialect::Te)
    }
    fn summary(&self) -> &'static str {
        "`cu_seqlens` [C, K] beside [C, S] token rows: one pack per chunk (NeMo Automodel split_batch_into_thd_chunks)"
    }
    fn claims(&self, input: &Input<'_>) -> Result<bool> {
        Ok(chunks(input.file).is_some())
    }
    fn read(&self, input: &Input<'_>) -> Result<Read> {
        let file = input.file;
        let rows = chunks(file).unwrap_or(1);
        let packs = (0..rows)
            .map(|r| {
                let mut p = te_pack(&file.row(r, rows)?, sentinel(input.facts), input.facts, 1)?;
                p.part = Some(format!("chunk {r}"));
                Ok(p)
            })
            .collect::<Result<Vec<_>>>()?;
        let note = format!(
            "{rows} chunks (NeMo Automodel split_batch_into_thd_chunks): each row is its own \
             pack with its own offsets"
        );
        Ok(Read { packs, dpo: None, notes: vec![note] })
    }
}

impl Format for CuSeqlens {
    fn name(&self) -> &'static str {
        "cu-seqlens"
    }
    fn family(&self) -> Option<Dialect> {
        Some(Dialect::Te)
    }
    fn summary(&self) -> &'static str {
        "`cu_seqlens` / `cu_seqlens_q` (`_kv`, `_padded`), `max_seqlen`; `padding_mask` 1 = pad; `labels` shifted"
    }
    fn claims(&self, input: &Input<'_>) -> Result<bool> {
        Ok(first_present(input.file, &["cu_seqlens", "cu_seqlens_q"]).is_some())
    }
    fn read(&self, input: &Input<'_>) -> Result<Read> {
        let pack = te_pack(input.file, sentinel(input.facts), input.facts, input.scale)?;
        Ok(Read { packs: vec![pack], dpo: None, notes: Vec::new() })
    }
}

impl Format for SeqLens {
    fn name(&self) -> &'static str {
        "seq-lens"
    }
    fn family(&self) -> Option<Dialect> {
        Some(Dialect::Te)
    }
    fn summary(&self) -> &'static str {
        "`seq_lens` / `seq_lens_padded` [B, K], the sentinel in empty slots (NeMo Automodel BSHD rows)"
    }
    fn claims(&self, input: &Input<'_>) -> Result<bool> {
        Ok(input.file.contains("seq_lens"))
    }
    fn read(&self, input: &Input<'_>) -> Result<Read> {
        let pack = te_pack(input.file, sentinel(input.facts), input.facts, input.scale)?;
        Ok(Read { packs: vec![pack], dpo: None, notes: Vec::new() })
    }
}

/// The empty-slot sentinel (default -1000, Automodel's).
fn sentinel(facts: &Contract) -> i64 {
    facts.sentinel.unwrap_or(-1000)
}

/// The error of a file none of the family's formats reads.
pub(super) fn unread(file: &BatchFile) -> Error {
    if file.contains("input_ids") {
        missing(file, "cu_seqlens", Dialect::Te)
    } else {
        missing(file, "input_ids", Dialect::Te)
    }
}

/// A TE / Megatron / Automodel pack.
fn te_pack(file: &BatchFile, sentinel: i64, facts: &Contract, scale: usize) -> Result<BatchData> {
    let mb = facts.offsets_end == Some(OffsetsEnd::FirstNegative);
    let d = Dialect::Te;
    if !file.contains("input_ids") {
        return Err(missing(file, "input_ids", d));
    }
    let (rows, input_ids) = token_column(file, "input_ids")?;
    let tokens = input_ids.len();
    let mut notes = Vec::new();
    let mut row_slots = None;
    // Per-token tensors of another length: judged by `token-counts`.
    let mut counted = Vec::new();
    let cu_key = first_present(file, &["cu_seqlens", "cu_seqlens_q"]);
    let padded_key = first_present(file, &["cu_seqlens_padded", "cu_seqlens_q_padded"]);
    let (cu_name, cu, cu_padded, padded_name) = match cu_key {
        Some(key) => {
            let mut cu =
                offsets(file, key, shard_bound(tokens, scale), Some(sentinel), mb, &mut notes)?;
            let padded = match padded_key {
                Some(pk) => {
                    let p = offsets(
                        file,
                        pk,
                        shard_bound(tokens, scale),
                        Some(sentinel),
                        mb,
                        &mut notes,
                    )?;
                    let cu = &mut cu;
                    if p.len() > cu.len() && facts.padding_segment_by_design() && !cu.is_empty() {
                        // The stack's padding segment(s) by design sit in the slots only (AReaL's
                        // `pad_packed_tensor_dict` keeps the real offsets as `old_cu_seqlens`):
                        // read whole, for the rules to judge as padding.
                        let extra = p.len() - cu.len();
                        let (pv, last) = (p.ints(), cu.ints().at(cu.len() - 1));
                        let widths: Vec<i64> =
                            (cu.len() - 1..p.len() - 1).map(|i| pv.at(i + 1) - pv.at(i)).collect();
                        let mut v = cu.ints().to_vec();
                        v.extend(widths.iter().scan(last, |acc, w| {
                            *acc += w;
                            Some(*acc)
                        }));
                        *cu = Column::from(v);
                        notes.push(format!(
                            "`{key}` ends {} before `{pk}`: the slots' final {} read whole (the \
                             profile's padding_segments: padding as segments by design)",
                            plural(extra, "segment"),
                            plural(extra, "padding segment")
                        ));
                    }
                    padded_count(pk, &p, key, cu)?;
                    Some(p)
                }
                None => None,
            };
            (key.to_owned(), cu, padded, padded_key.map(str::to_owned))
        }
        None if file.contains("seq_lens") => {
            let (cu, padded, slots) = from_seq_lens(file, rows, tokens, sentinel)?;
            row_slots = Some(slots);
            let has_padded = file.contains("seq_lens_padded");
            let padded_name = has_padded.then(|| "seq_lens_padded".to_owned());
            ("seq_lens".to_owned(), cu.into(), padded.map(Column::from), padded_name)
        }
        None => return Err(missing(file, "cu_seqlens", d)),
    };
    let cu_k_key = first_present(file, &["cu_seqlens_kv"]);
    let mut cu_k = match cu_k_key {
        Some(key) => {
            // Global on a shard, like `cu_seqlens` (AReaL's CP split keeps both).
            let bound = key_bound(tokens, scale, facts);
            let v = offsets(file, key, bound, Some(sentinel), mb, &mut notes)?;
            Some(v)
        }
        None => None,
    };
    let (mut cu, mut cu_padded) = (cu, cu_padded);
    if facts.trailing_repeats == Some(TrailingRepeats::RowPadding) {
        // The profile's ragged rows are padded with zero-length repeats of the last offset
        // (Megatron-Bridge #5400).
        let mut repeats = 0;
        // The last two entries are equal (the offsets hold at least two).
        let repeated = |c: &Column| {
            let (v, n) = (c.ints(), c.len());
            v.at(n - 1) == v.at(n - 2)
        };
        while cu.len() > 2 && repeated(&cu) && cu_padded.as_ref().is_none_or(repeated) {
            cu.truncate(cu.len() - 1);
            if let Some(p) = cu_padded.as_mut() {
                p.truncate(p.len() - 1);
            }
            if let Some(k) = cu_k.as_mut().filter(|k| k.len() > cu.len()) {
                k.truncate(k.len() - 1);
            }
            repeats += 1;
        }
        if repeats > 0 {
            notes.push(format!(
                "`{cu_name}`: {} of the last offset dropped (the profile's ragged-row padding)",
                plural(repeats, "zero-length repeat")
            ));
        }
    }
    let (mut mask_key, invert) = match first_present(file, &["padding_mask", "attention_mask"]) {
        Some("padding_mask") => (Some("padding_mask"), true),
        Some(k) => (Some(k), false),
        None => (None, false),
    };
    // Megatron-Bridge's legacy collate_fn returns `attention_mask = [1] * batch size` (sft.py,
    // until fb9ec5f85): unused at cp = 1, sliced along the tokens under CP (#4519).
    if facts.attention_mask == Some(MaskFact::RowFlags)
        && mask_key == Some("attention_mask")
        && let Some(e) = file.entry("attention_mask")
        && e.shape.len() == 1
        && e.shape[0] == rows
        && rows != tokens
    {
        let cp = file.metadata().get("cp_size").and_then(|c| c.trim().parse::<usize>().ok());
        if cp.is_some_and(|c| c > 1) {
            // Under CP the split slices it along the tokens (#4519): a per-token tensor of
            // the wrong length, for `token-counts`.
            counted.push(("attention_mask".to_owned(), e.shape[0]));
            notes.push(
                "`attention_mask` holds one value per row (Megatron-Bridge's legacy \
                 collate_fn), and with cp_size > 1 the CP split slices it along the tokens \
                 (#4519)"
                    .into(),
            );
        } else {
            notes.push(
                "`attention_mask` holds one value per row (Megatron-Bridge's legacy \
                 collate_fn): not a token mask, unused at cp = 1"
                    .into(),
            );
        }
        mask_key = None;
    }
    let (mut cu_name, mut padded_name) = (cu_name, padded_name);
    let pad_id_lengths = facts.offsets == Some(OffsetsFact::PaddedSlots)
        && mask_key.is_none()
        && !(cu_name != "seq_lens" && file.contains("seq_lens"))
        && facts.pad_token_id.is_some();
    if pad_id_lengths {
        // No mask, no lengths: the pad ids that end each slot are its padding, read once the
        // pack is whole (a CP rank's file after its group is reassembled).
        notes.push(format!(
            "`{cu_name}` read as storage slots (the profile's offsets = padded-slots): each \
             document's real length is its slot less the run of pad ids that ends it"
        ));
    } else if facts.offsets == Some(OffsetsFact::PaddedSlots) {
        // The profile's offsets hold storage slots, with no offsets of real lengths (verl's and
        // SkyRL's `preprocess_packed_seqs`): the real lengths are the padding mask's.
        let slots = cu_padded.clone().unwrap_or_else(|| cu.clone());
        // The real lengths: the padding mask's, or without one a per-document length tensor
        // beside the slots (`seq_lens`, after the profile's renames).
        let (key, (lens, per_row)) = match mask_key {
            Some(key) => (key, slot_lengths(file, key, invert, &slots, tokens)?),
            None if cu_name != "seq_lens" && file.contains("seq_lens") => {
                ("seq_lens", (lengths_of_slots(file, "seq_lens", &slots, sentinel)?, true))
            }
            None => {
                let mut e = missing(file, "attention_mask", d);
                if let Error::MissingKey { hint, .. } = &mut e {
                    hint.push_str(
                        "; offsets = padded-slots reads each document's real length from a \
                         padding mask, from `seq_lens` (one length per slot), or from the pad \
                         ids that end each slot (with `pad_token_id`)",
                    );
                }
                return Err(e);
            }
        };
        let mut real = Vec::with_capacity(lens.len() + 1);
        real.push(0i64);
        for l in &lens {
            real.push(real.last().copied().unwrap_or(0) + l);
        }
        notes.push(format!(
            "`{cu_name}` read as storage slots (the profile's offsets = padded-slots): each \
             document's real length is {} of `{key}`",
            if key == "seq_lens" {
                "its entry"
            } else if per_row {
                "its row's count of real tokens"
            } else {
                "its slot's count of real tokens"
            }
        ));
        // Key offsets that are the same slots are the same documents: their real lengths too.
        if cu_k.as_ref().is_some_and(|k| k.ints().iter().eq(slots.ints().iter())) {
            cu_k = Some(Column::from(real.clone()));
        }
        padded_name = Some(padded_name.unwrap_or_else(|| cu_name.clone()));
        cu_name = format!("{key} (real lengths)");
        cu_padded = Some(slots);
        cu = Column::from(real);
        if per_row {
            // One row per document, not a per-token mask: consumed here.
            mask_key = None;
        }
    }
    let real_mask = match mask_key {
        Some(k) => opt_mask(file, k, "input_ids", tokens, invert)?,
        None => None,
    };
    let max_key = first_present(file, &["max_seqlen", "max_seqlen_q"]);
    let labels_key = first_present(file, &["labels", "shift_labels"]);
    let mut pack = BatchData {
        part: None,
        keys: KeyNames {
            input_ids: "input_ids".into(),
            cu_seqlens: cu_name,
            cu_seqlens_padded: padded_name.unwrap_or_else(|| "cu_seqlens_padded".into()),
            cu_seqlens_k: cu_k_key.unwrap_or("cu_seqlens_kv").into(),
            max_seqlen: max_key.unwrap_or("max_seqlen").into(),
            mask: mask_key.unwrap_or("padding_mask").into(),
            labels: labels_key.unwrap_or("labels").into(),
            position_ids: "position_ids".into(),
            seq_idx: "seq_idx".into(),
            num_real_seqs: "num_real_seqs".into(),
        },
        mask_is_padding: invert,
        rows,
        labels: ignore_extra(
            masked_labels(
                file,
                match labels_key {
                    Some(k) => counted_tokens(file, k, tokens, &mut counted)?,
                    None => None,
                },
                "input_ids",
                tokens,
                &mut notes,
            )?,
            facts.ignore_index,
        ),
        convention: facts
            .labels
            .and_then(LabelsFact::convention)
            .unwrap_or(LabelConvention::Shifted),
        position_ids: counted_tokens(file, "position_ids", tokens, &mut counted)?,
        absorbed: false,
        cu,
        cu_padded,
        cu_k,
        max_seqlen: match max_key {
            Some(k) => scalar(file, k)?,
            None => None,
        },
        real_mask,
        seq_idx: counted_tokens(file, "seq_idx", tokens, &mut counted)?,
        num_real_seqs: count(file, "num_real_seqs")?,
        row_slots,
        side_tensors: counted,
        notes,
        input_ids,
        boundaries_from_positions: false,
        rows_are_sequences: false,
        ..BatchData::default()
    };
    if pack.labels.is_none() {
        labels_from_loss_mask(file, &mut pack, facts)?;
    }
    unabsorb(&mut pack);
    Ok(pack)
}

/// The real length of every storage slot `slots` delimits, from the padding mask `key`: one
/// row per slot (`[B, S]`, B slots: its row's real tokens), or one entry per token (each
/// slot's real tokens). The flag says which.
fn slot_lengths(
    file: &BatchFile,
    key: &str,
    invert: bool,
    slots: &Column,
    tokens: usize,
) -> Result<(Vec<i64>, bool)> {
    let (shape, v) = file.mask(key)?;
    let real = |b: &bool| *b != invert;
    let n = slots.len().saturating_sub(1);
    let bound = |x: i64| usize::try_from(x).unwrap_or(0).min(v.len());
    if shape.len() == 2 && shape[0] == n && v.len() != tokens {
        let width = shape[1];
        let lens = v.chunks(width.max(1)).map(|r| r.iter().filter(|b| real(b)).count() as i64);
        return Ok((lens.collect(), true));
    }
    if v.len() == tokens {
        let s = slots.ints();
        let lens = (0..n).map(|i| {
            let (a, b) = (bound(s.at(i)), bound(s.at(i + 1)));
            v[a..b.max(a)].iter().filter(|b| real(b)).count() as i64
        });
        return Ok((lens.collect(), false));
    }
    Err(Error::Shape {
        key: key.to_owned(),
        shape,
        expected: format!(
            "one row per document ([{n}, S], offsets = padded-slots) or one entry per token \
             ({tokens})"
        ),
    })
}

/// One real length per slot of `slots` from `key` (a 1-D tensor, or `[1, K]`; trailing
/// sentinel entries are empty slots' and dropped): each from 0 to its slot's width.
fn lengths_of_slots(
    file: &BatchFile,
    key: &str,
    slots: &Column,
    sentinel: i64,
) -> Result<Vec<i64>> {
    let Ints { shape, mut values } = file.ints(key)?;
    if !matches!(shape.as_slice(), [_] | [1, _]) {
        return Err(Error::Shape {
            key: key.to_owned(),
            shape,
            expected: "[K] or [1, K]: one real length per slot of the offsets".into(),
        });
    }
    while values.last() == Some(&sentinel) {
        values.pop();
    }
    let n = slots.len().saturating_sub(1);
    if values.len() != n {
        return Err(Error::CountMismatch {
            key: key.to_owned(),
            got: values.len(),
            what: "real lengths",
            reference: "the offsets (slots)".into(),
            expected: n,
        });
    }
    let s = slots.ints();
    for (i, &l) in values.iter().enumerate() {
        let width = s.at(i + 1) - s.at(i);
        if !(0..=width).contains(&l) {
            return Err(Error::Value {
                key: key.to_owned(),
                index: i,
                value: l.to_string(),
                expected: "a real length from 0 to its slot's width (offsets = padded-slots)",
            });
        }
    }
    Ok(values)
}

/// Automodel's trailing-pad absorption (#2316) grows the last segment over the pack padding
/// and drops `cu_seqlens_padded`; the padding mask still tells the pad tokens. Recover the real
/// length so that they are counted as padding, not as real tokens.
fn unabsorb(pack: &mut BatchData) {
    let (Some(mask), None, n) = (&pack.real_mask, &pack.cu_padded, pack.segments()) else {
        return;
    };
    if n == 0 {
        return;
    }
    let cu = pack.cu.ints();
    let last = cu.at(n - 1) as usize..cu.at(n) as usize;
    if last.end != pack.tokens() || last.is_empty() {
        return;
    }
    let real_end = last.start + mask[last.clone()].iter().rposition(|&r| r).map_or(0, |i| i + 1);
    let tail_is_pad = mask[real_end..last.end].iter().all(|&r| !r);
    let head_is_real = mask[last.start..real_end].iter().all(|&r| r);
    if real_end < last.end && tail_is_pad && head_is_real {
        // The offsets change: owned from here on (only this Automodel layout pays for it).
        let mut real = cu.to_vec();
        let mut padded = real.clone();
        padded[n] = last.end as i64;
        real[n] = real_end as i64;
        pack.cu = real.into();
        pack.cu_padded = Some(padded.into());
        pack.absorbed = true;
        pack.notes.push(format!(
            "the last segment absorbed {} trailing pad tokens (Automodel #2316): real length {}, \
             slot {}",
            last.end - real_end,
            real_end - last.start,
            last.len()
        ));
    }
}

/// `(cu, cu_padded, per-row slot sums)` built from `seq_lens`.
type SeqLensOffsets = (Vec<i64>, Option<Vec<i64>>, Vec<i64>);

/// Automodel BSHD: offsets from `seq_lens` / `seq_lens_padded` (`[B, K]`, sentinel in empty
/// slots), row by row. Returns `(cu, cu_padded, per-row slot sums)`.
fn from_seq_lens(
    file: &BatchFile,
    rows: usize,
    tokens: usize,
    sentinel: i64,
) -> Result<SeqLensOffsets> {
    let lens = |key: &str| -> Result<Vec<Vec<i64>>> {
        let Ints { shape, values } = file.ints(key)?;
        let width = match shape.as_slice() {
            [b, k] if *b == rows => *k,
            [k] if rows == 1 => *k,
            _ => {
                return Err(Error::Shape {
                    key: key.to_owned(),
                    shape,
                    expected: format!("[B, K] with B = {rows} rows of input_ids"),
                });
            }
        };
        if let Some(i) = values.iter().position(|&v| v < 0 && v != sentinel) {
            return Err(Error::Value {
                key: key.to_owned(),
                index: i,
                value: values[i].to_string(),
                expected: "a length ≥ 0 or the sentinel",
            });
        }
        Ok(if width == 0 {
            vec![Vec::new(); rows]
        } else {
            values.chunks(width).map(<[i64]>::to_vec).collect()
        })
    };
    let real = lens("seq_lens")?;
    let padded =
        if file.contains("seq_lens_padded") { Some(lens("seq_lens_padded")?) } else { None };
    if let Some(p) = &padded {
        for (r, (a, b)) in real.iter().zip(p).enumerate() {
            if a.len() != b.len() {
                return Err(Error::CountMismatch {
                    key: "seq_lens_padded".into(),
                    what: "slots per row",
                    got: b.len(),
                    reference: "seq_lens".into(),
                    expected: a.len(),
                });
            }
            if let Some(j) = (0..a.len()).find(|&j| (a[j] == sentinel) != (b[j] == sentinel)) {
                return Err(Error::Value {
                    key: "seq_lens_padded".into(),
                    index: r * a.len() + j,
                    value: b[j].to_string(),
                    expected: "the sentinel exactly where seq_lens has it",
                });
            }
        }
    }
    let cum = |rows: &[Vec<i64>]| -> Vec<i64> {
        let mut cu = vec![0i64];
        for v in rows.iter().flatten().filter(|&&v| v != sentinel) {
            let last = *cu.last().unwrap_or(&0);
            cu.push(last.saturating_add(*v));
        }
        cu
    };
    let cu = cum(&real);
    let slots_src = padded.as_ref().unwrap_or(&real);
    let cu_p = cum(slots_src);
    let row_sums = slots_src
        .iter()
        .map(|r| r.iter().filter(|&&v| v != sentinel).fold(0i64, |a, &v| a.saturating_add(v)))
        .collect();
    if padded.is_some() {
        validate_offsets("seq_lens_padded (cumulative)", &cu_p, tokens)?;
    }
    validate_offsets("seq_lens (cumulative)", &cu, tokens)?;
    Ok((cu, padded.map(|_| cu_p), row_sums))
}

/// The rows of a chunked TE file: offsets `[C, K]` with `C > 1` beside `[C, S]` token rows.
fn chunks(file: &BatchFile) -> Option<usize> {
    let key = first_present(file, &["cu_seqlens", "cu_seqlens_q"])?;
    let (offsets, ids) = (file.entry(key)?, file.entry("input_ids")?);
    match (offsets.shape.as_slice(), ids.shape.as_slice()) {
        ([c, _], [b, _]) if *c > 1 && c == b => Some(*c),
        _ => None,
    }
}
