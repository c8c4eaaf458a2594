//! CP shard files: one file per context-parallel rank (`cp_rank`, `cp_size` keys or metadata),
//! reassembled into the full pack so that every check runs on what the ranks hold together.
//!
//! How the ranks split the pack is a fact of the stack, not of the tensors: the zigzag (every
//! slot in `2·cp` chunks, rank r holding r and `2·cp−1−r`) unless the file's metadata
//! `cp_layout` or its profile's `cp_layout` says `contiguous`. Contiguous rank files that keep
//! the global offsets hold one piece of the whole pack each (rank r: tokens
//! `[r·T/cp, (r+1)·T/cp)`: Ulysses, slime's `--allgather-cp`); rank files whose offsets are local
//! (`global / cp`) hold piece r of every slot (ring-flash-attn's varlen ring).

use std::path::{Path, PathBuf};

use rules::checks::{IntSlice, KeyNames, ShardLayout, reassemble_shards};

use crate::facts::Facts;
use crate::formats::{Dialect, ReadOptions, parse};
use crate::pack::{BatchData, validate_offsets};
use crate::profile::CpLayout;
use crate::tensors::{BatchFile, Column};
use crate::{Error, Result};

/// One CP group's files read together.
#[derive(Debug, Clone)]
pub struct Group {
    /// The key family of the files (the last one read).
    pub dialect: Dialect,
    /// The format that read them (the last one read).
    pub format: &'static str,
    /// The facts the first file was read under, each with its origin (the ranks of a group
    /// share their metadata and profile).
    pub facts: Facts,
    /// The global batch, or what the split lost.
    pub batch: GroupBatch,
}

/// What the ranks of a group hold together.
#[derive(Debug, Clone)]
pub enum GroupBatch {
    /// The full pack, reassembled.
    Whole(Box<BatchData>),
    /// The ranks do not hold the pack their global offsets address: a zigzag split that lost
    /// tokens ([`lost_tokens`]), or contiguous pieces that overlap, leave a gap or are unequal
    /// ([`contiguous_pieces`]). Only the offsets and what each rank holds can be judged
    /// (`cp-shard`, [`crate::checks::lost_tokens_report`]).
    Lost {
        /// The global offsets, the split's layout and how many tokens each rank holds.
        global: SplitOffsets,
        /// The CP size.
        cp: usize,
        /// Their key.
        key: String,
    },
}

/// What a split that does not add up to the pack leaves to judge.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SplitOffsets {
    /// The global offsets.
    pub offsets: Vec<i64>,
    /// How the ranks were split ([`ShardLayout::Zigzag`] or [`ShardLayout::Contiguous`]).
    pub layout: ShardLayout,
    /// How many tokens each rank holds, rank 0 first.
    pub held: Vec<usize>,
}

/// Reads the rank files of one CP group (`cp_rank`, `cp_size` of `size`, in `dir`) and
/// reassembles them by their CP layout (the fact `cp_layout`, the file's metadata over its
/// profile, zigzag by default: [`reassemble`] for the zigzag,
/// [`contiguous_pieces`] for contiguous pieces); a split that lost, duplicated or unevenly cut
/// tokens is returned as such.
///
/// # Errors
/// A file that cannot be read or parsed, or shards that do not form one batch
/// ([`Error::Shards`]: missing or repeated ranks, different offsets, ranks of different CP
/// layouts, …).
pub fn read_group(dir: &Path, size: usize, files: &[PathBuf], read: &ReadOptions) -> Result<Group> {
    let mut shards = Vec::new();
    let mut layouts: Vec<(usize, CpLayout)> = Vec::new();
    let mut facts: Option<Facts> = None;
    let mut dialect = Dialect::Te;
    let mut format = "cu-seqlens";
    for path in files {
        let file = BatchFile::read(path)?;
        let parsed = parse(file, read)?;
        facts.get_or_insert_with(|| parsed.facts.clone());
        dialect = parsed.dialect;
        format = parsed.format;
        let (rank, size) = parsed.cp_shard.unwrap_or((0, size));
        layouts.push((rank, parsed.facts.contract.cp_layout.unwrap_or(CpLayout::Zigzag)));
        if let Some(pack) = parsed.packs.into_iter().next() {
            shards.push(Shard { rank, size, pack });
        }
    }
    let group = format!("{} (cp_size {size})", dir.display());
    let layout = layouts.first().map_or(CpLayout::Zigzag, |l| l.1);
    if let Some((rank, other)) = layouts.iter().find(|l| l.1 != layout) {
        return Err(Error::Shards {
            group,
            detail: format!(
                "rank {} is split {}, rank {rank} {}: the ranks of a group share one CP layout \
                 (metadata or profile `cp_layout`)",
                layouts[0].0,
                name(layout),
                name(*other)
            ),
        });
    }
    let batch = match layout {
        CpLayout::Contiguous => contiguous_pieces(&group, &shards)?,
        CpLayout::ZigzagSequence => {
            GroupBatch::Whole(Box::new(reassemble_sequence(&group, &shards)?))
        }
        CpLayout::Zigzag => match lost_tokens(&shards) {
            Some((offsets, cp)) => GroupBatch::Lost {
                global: SplitOffsets {
                    offsets,
                    layout: ShardLayout::Zigzag,
                    held: shards.iter().map(|s| s.pack.tokens()).collect(),
                },
                cp,
                key: shards[0].pack.keys.cu_seqlens.clone(),
            },
            None => GroupBatch::Whole(Box::new(reassemble(&group, &shards)?)),
        },
    };
    let facts = facts.unwrap_or_default();
    let mut batch = batch;
    if let GroupBatch::Whole(pack) = &mut batch {
        // Real lengths the ranks' files could not read alone (the pad ids ending each slot).
        crate::formats::slot_padding(pack, &facts.contract);
    }
    Ok(Group { dialect, format, facts, batch })
}

fn name(layout: CpLayout) -> &'static str {
    match layout {
        CpLayout::Zigzag => "zigzag",
        CpLayout::Contiguous => "contiguous",
        CpLayout::ZigzagSequence => "zigzag-sequence",
    }
}

/// One rank's shard as read from its file.
#[derive(Debug, Clone)]
pub struct Shard {
    /// The rank.
    pub rank: usize,
    /// The CP size.
    pub size: usize,
    /// Its pack (local tokens; offsets local or global).
    pub pack: BatchData,
}

/// Sorted numbers as ranges, at most eight of them shown: `0, 2..=5, 9` (a lone rank of a
/// 65536-rank group is one line, not a list of 65535 numbers).
fn ranges(v: &[usize]) -> String {
    let mut runs: Vec<(usize, usize)> = Vec::new();
    for &x in v {
        match runs.last_mut() {
            Some((_, end)) if *end + 1 == x => *end = x,
            _ => runs.push((x, x)),
        }
    }
    let show = |&(a, b): &(usize, usize)| if a == b { a.to_string() } else { format!("{a}..={b}") };
    let mut out: Vec<String> = runs.iter().take(8).map(show).collect();
    if runs.len() > 8 {
        out.push(format!("… ({} more runs)", runs.len() - 8));
    }
    out.join(", ")
}

/// When the shards' (global) offsets address more tokens than the ranks hold together, what was
/// lost: `(the global offsets, cp)`. The Python zigzag splits of TransformerEngine and bionemo
/// floor `L / (2·cp)` and silently drop the rest of a slot that is not a multiple of `2·cp`; the
/// `cp-shard` rule names the slot.
pub fn lost_tokens(shards: &[Shard]) -> Option<(Vec<i64>, usize)> {
    let first = shards.first()?;
    let cp = first.size;
    let held: usize = shards.iter().map(|s| s.pack.tokens()).sum();
    let global = first.pack.storage().to_vec();
    let last = usize::try_from(*global.last()?).ok()?;
    (shards.len() == cp && last > held && last != first.pack.tokens()).then_some((global, cp))
}

/// Reassembles the zigzag shards of one CP group (labels rolled before the split) into the
/// full pack: storage offsets from the shards' offsets (local ones are multiplied by `cp`),
/// real lengths from the padding mask (the real tokens lead each slot), labels `shifted`.
///
/// # Errors
/// [`Error::Shards`] when the shards do not form one batch: ranks missing or repeated,
/// different token counts or offsets, offsets that are neither local nor global, lengths that
/// do not split into `2·cp` chunks.
pub fn reassemble(group: &str, shards: &[Shard]) -> Result<BatchData> {
    let bad = |detail: String| Error::Shards { group: group.to_owned(), detail };
    let ranks = in_rank_order(group, shards)?;
    let cp = ranks.len();
    let local = ranks[0].pack.tokens();
    let stored = ranks[0].pack.storage().to_vec();
    for s in &ranks {
        if s.pack.tokens() != local {
            return Err(bad(format!(
                "rank {} has {} tokens, rank 0 has {local}",
                s.rank,
                s.pack.tokens()
            )));
        }
        if s.pack.storage() != IntSlice::from(stored.as_slice()) {
            return Err(bad(format!("rank {} has other offsets than rank 0", s.rank)));
        }
    }
    let last = *stored.last().unwrap_or(&0) as usize;
    let global: Vec<i64> = if last == local * cp {
        stored
    } else if last == local {
        stored.iter().map(|&x| x * cp as i64).collect()
    } else {
        return Err(bad(format!(
            "offsets end at {last}: neither the local token count {local} nor cp·{local} = {}",
            local * cp
        )));
    };
    build(group, &ranks, ShardLayout::Zigzag, global, last == local * cp)
}

/// Reassembles the per-sequence zigzag shards of one CP group (Megatron-LM's
/// `get_batch_on_this_cp_rank` with `use_per_sequence_balancing`): the whole pack in `2·cp`
/// chunks, rank r holding chunks r and 2·cp−1−r, whatever its documents; every rank keeps the
/// global offsets, which are the documents of the reassembled pack.
///
/// # Errors
/// [`Error::Shards`] when the shards do not form one batch: ranks missing or repeated,
/// different token counts or offsets, offsets that do not end at the ranks' tokens together,
/// a pack that does not split into `2·cp` chunks.
pub fn reassemble_sequence(group: &str, shards: &[Shard]) -> Result<BatchData> {
    let bad = |detail: String| Error::Shards { group: group.to_owned(), detail };
    let ranks = in_rank_order(group, shards)?;
    let cp = ranks.len();
    let local = ranks[0].pack.tokens();
    let stored = ranks[0].pack.cu.clone();
    for s in &ranks {
        if s.pack.tokens() != local {
            return Err(bad(format!(
                "rank {} has {} tokens, rank 0 has {local}",
                s.rank,
                s.pack.tokens()
            )));
        }
        if s.pack.cu != stored {
            return Err(bad(format!("rank {} has other offsets than rank 0", s.rank)));
        }
    }
    let total = local * cp;
    if stored.ints().last().unwrap_or(0) as usize != total {
        return Err(bad(format!(
            "offsets end at {}: the per-sequence zigzag keeps the global offsets, which end at \
             cp·{local} = {total}",
            stored.ints().last().unwrap_or(0)
        )));
    }
    let mut pack = build(group, &ranks, ShardLayout::Zigzag, vec![0, total as i64], true)?;
    pack.keys.cu_seqlens = format!("{} (global)", ranks[0].pack.keys.cu_seqlens);
    pack.cu = stored;
    pack.cu_padded = None;
    pack.notes = vec![format!(
        "reassembled from {cp} rank files (per-sequence zigzag: the whole pack in {} chunks, \
         rank r holding r and {}−r, labels rolled before the split)",
        2 * cp,
        2 * cp - 1
    )];
    Ok(pack)
}

/// The contiguous shards of one CP group: every rank keeps the same offsets, either the global
/// ones (the whole pack split: rank r holds tokens `[r·T/cp, (r+1)·T/cp)`) or local ones that
/// end at the rank's token count (every slot split: rank r holds piece r of each, the global
/// offsets are `cp ×` them). Pieces of the whole pack that overlap, leave a gap or are unequal
/// come back as [`GroupBatch::Lost`], for `cp-shard` to name ([`rules::checks::contiguous_group`]).
///
/// # Errors
/// [`Error::Shards`] when the shards do not form one batch: ranks missing or repeated,
/// different offsets, offsets that are not offsets.
pub fn contiguous_pieces(group: &str, shards: &[Shard]) -> Result<GroupBatch> {
    let bad = |detail: String| Error::Shards { group: group.to_owned(), detail };
    let ranks = in_rank_order(group, shards)?;
    let cp = ranks.len();
    if ranks[0].pack.boundaries_from_positions {
        return Ok(GroupBatch::Whole(Box::new(contiguous_rows(group, &ranks)?)));
    }
    let stored = ranks[0].pack.storage().to_vec();
    if let Some(s) = ranks.iter().find(|s| s.pack.storage() != IntSlice::from(stored.as_slice())) {
        return Err(bad(format!("rank {} has other offsets than rank 0", s.rank)));
    }
    let held: Vec<usize> = ranks.iter().map(|s| s.pack.tokens()).collect();
    let last = usize::try_from(*stored.last().unwrap_or(&0)).unwrap_or(0);
    let key = &ranks[0].pack.keys.cu_seqlens;
    if cp > 1 && held.iter().all(|&n| n == last) {
        // Local offsets: every slot was split, piece r of each on rank r.
        let global: Vec<i64> = stored.iter().map(|&x| x * cp as i64).collect();
        validate_offsets(key, &global, last * cp)?;
        let pack = build(group, &ranks, ShardLayout::ContiguousSlots, global, false)?;
        return Ok(GroupBatch::Whole(Box::new(pack)));
    }
    validate_offsets(key, &stored, last)?;
    if !last.is_multiple_of(cp) || held.iter().any(|&n| n * cp != last) {
        let global = SplitOffsets { offsets: stored, layout: ShardLayout::Contiguous, held };
        return Ok(GroupBatch::Lost { global, cp, key: key.clone() });
    }
    let pack = build(group, &ranks, ShardLayout::Contiguous, stored, true)?;
    Ok(GroupBatch::Whole(Box::new(pack)))
}

/// Contiguous CP pieces of every row of a `[B, S]` batch whose documents are where its position
/// ids restart (Nanotron's `DataCollatorForCLMWithPositionIds`: rank r keeps tokens
/// `[r·S/cp, (r+1)·S/cp)` of each row beside the global position ids): the rows put back
/// together, piece by piece, and the documents read again from their position ids.
///
/// # Errors
/// [`Error::Shards`] when the ranks hold different rows or token counts, or some carry a
/// tensor the others lack.
fn contiguous_rows(group: &str, ranks: &[&Shard]) -> Result<BatchData> {
    let bad = |detail: String| Error::Shards { group: group.to_owned(), detail };
    let cp = ranks.len();
    let first = &ranks[0].pack;
    let (rows, local) = (first.rows, first.tokens());
    if let Some(s) = ranks.iter().find(|s| s.pack.rows != rows || s.pack.tokens() != local) {
        return Err(bad(format!(
            "rank {} holds {} rows of {} tokens, rank 0 {rows} rows of {local}",
            s.rank,
            s.pack.rows,
            s.pack.tokens()
        )));
    }
    let w = local / rows.max(1);
    let join =
        |what: &str, get: &dyn Fn(&BatchData) -> Option<Vec<i64>>| -> Result<Option<Vec<i64>>> {
            let parts: Vec<Option<Vec<i64>>> = ranks.iter().map(|s| get(&s.pack)).collect();
            match (parts.iter().position(Option::is_some), parts.iter().position(Option::is_none)) {
                (Some(i), Some(j)) => Err(bad(format!(
                    "rank {} has {what}, rank {} has none: the ranks must carry the same tensors",
                    ranks[i].rank, ranks[j].rank
                ))),
                (None, _) => Ok(None),
                (Some(_), None) => {
                    let parts: Vec<Vec<i64>> = parts.into_iter().flatten().collect();
                    Ok(Some(
                        (0..rows)
                            .flat_map(|b| {
                                parts.iter().flat_map(move |p| p[b * w..(b + 1) * w].to_vec())
                            })
                            .collect(),
                    ))
                }
            }
        };
    let input_ids = join("input ids", &|p| Some(p.input_ids.ints().to_vec()))?.unwrap_or_default();
    let labels = join("labels", &|p| p.labels.as_ref().map(|c| c.ints().to_vec()))?;
    let mask = join("a mask", &|p| {
        p.real_mask.as_ref().map(|m| m.iter().map(|&b| i64::from(b)).collect())
    })?
    .map(|m| m.into_iter().map(|x| x == 1).collect::<Vec<bool>>());
    let Some(position_ids) =
        join("position ids", &|p| p.position_ids.as_ref().map(|c| c.ints().to_vec()))?
    else {
        return Err(bad("no position ids: the documents of the rows cannot be read".into()));
    };
    let cu = crate::formats::restarts(&position_ids, rows, input_ids.len());
    let keys = &first.keys;
    Ok(BatchData {
        part: Some(format!("{cp} ranks reassembled")),
        keys: KeyNames {
            cu_seqlens: format!("{} (restarts of the reassembled rows)", keys.position_ids),
            mask: keys.mask.clone(),
            labels: keys.labels.clone(),
            position_ids: keys.position_ids.clone(),
            ..KeyNames::default()
        },
        rows,
        input_ids: input_ids.into(),
        labels: labels.map(Column::from),
        convention: first.convention,
        facts: first.facts,
        position_ids: Some(position_ids.into()),
        cu: cu.into(),
        real_mask: mask,
        boundaries_from_positions: true,
        notes: vec![format!(
            "reassembled from {cp} rank files (contiguous: rank r holds tokens [r·{w}, (r+1)·{w}) \
             of each of the {rows} rows; the documents where the position ids restart)"
        )],
        ..BatchData::default()
    })
}

/// The shards by rank, each rank once, every rank of the CP size there.
fn in_rank_order<'a>(group: &str, shards: &'a [Shard]) -> Result<Vec<&'a Shard>> {
    let bad = |detail: String| Error::Shards { group: group.to_owned(), detail };
    let Some(first) = shards.first() else { return Err(bad("no shards".into())) };
    let cp = first.size;
    let mut by_rank: Vec<Option<&Shard>> = vec![None; cp];
    for s in shards {
        if s.size != cp {
            return Err(bad(format!(
                "rank {} says cp_size {}, rank {} says {cp}",
                s.rank, s.size, first.rank
            )));
        }
        match by_rank.get_mut(s.rank) {
            Some(slot @ None) => *slot = Some(s),
            Some(Some(_)) => return Err(bad(format!("two files for rank {}", s.rank))),
            None => return Err(bad(format!("rank {} ≥ cp_size {cp}", s.rank))),
        }
    }
    by_rank.iter().copied().collect::<Option<Vec<_>>>().ok_or_else(|| {
        let missing: Vec<usize> = (0..cp).filter(|&r| by_rank[r].is_none()).collect();
        bad(format!(
            "missing {} of cp_size {cp}: {}",
            if missing.len() == 1 { "rank" } else { "ranks" },
            ranges(&missing)
        ))
    })
}

/// The pack the `ranks` hold together under `layout`, at the `global` storage offsets (which the
/// rank files carried as such when `global_in_files`).
fn build(
    group: &str,
    ranks: &[&Shard],
    layout: ShardLayout,
    global: Vec<i64>,
    global_in_files: bool,
) -> Result<BatchData> {
    let bad = |detail: String| Error::Shards { group: group.to_owned(), detail };
    let cp = ranks.len();
    let storage: Vec<u32> = global.windows(2).map(|w| (w[1] - w[0]) as u32).collect();
    let total = global.last().copied().unwrap_or(0);
    let join = |get: &dyn Fn(&BatchData) -> Option<Vec<i64>>| -> Result<Option<Vec<i64>>> {
        let parts: Option<Vec<Vec<i64>>> = ranks.iter().map(|s| get(&s.pack)).collect();
        parts.map(|p| reassemble_shards(layout, &storage, cp, &p).map_err(&bad)).transpose()
    };
    // A tensor some ranks have and others lack cannot be reassembled: dropping it for the whole
    // group would miscount (a rank without `padding_mask` made every pad token real).
    // (what, key, present) of each optional per-token tensor of a rank.
    let optional = |p: &BatchData| {
        [
            ("mask", p.keys.mask.clone(), p.real_mask.is_some()),
            ("labels", p.keys.labels.clone(), p.labels.is_some()),
            ("position ids", p.keys.position_ids.clone(), p.position_ids.is_some()),
        ]
    };
    for i in 0..3 {
        let with = ranks.iter().find(|s| optional(&s.pack)[i].2);
        let without = ranks.iter().find(|s| !optional(&s.pack)[i].2);
        if let (Some(with), Some(without)) = (with, without) {
            let (what, key, _) = &optional(&with.pack)[i];
            return Err(bad(format!(
                "rank {} has {what} (`{key}`), rank {} has none: the ranks must carry the same \
                 tensors",
                with.rank, without.rank
            )));
        }
    }
    let input_ids = join(&|p| Some(p.input_ids.ints().to_vec()))?.unwrap_or_default();
    // Labels a loss mask stands for are the targets of the whole sequence: derived again from
    // the reassembled tokens (a rank's own next token is another chunk's).
    let loss_mask = if ranks.iter().all(|s| s.pack.loss_mask_targets.is_some()) {
        join(&|p| p.loss_mask_targets.as_ref().map(|m| m.iter().map(|&b| i64::from(b)).collect()))?
            .map(|m| m.into_iter().map(|x| x == 1).collect::<Vec<bool>>())
    } else {
        None
    };
    let labels = match &loss_mask {
        Some(m) => Some(
            (0..input_ids.len())
                .map(|t| {
                    let target = match ranks[0].pack.convention {
                        thd::LabelConvention::Unshifted => Some(input_ids[t]),
                        thd::LabelConvention::Shifted => input_ids.get(t + 1).copied(),
                    };
                    target.filter(|_| m[t]).unwrap_or(thd::IGNORE_INDEX)
                })
                .collect(),
        ),
        None => join(&|p| p.labels.as_ref().map(|c| c.ints().to_vec()))?,
    };
    let position_ids = join(&|p| p.position_ids.as_ref().map(|c| c.ints().to_vec()))?;
    let mask = join(&|p| p.real_mask.as_ref().map(|m| m.iter().map(|&b| i64::from(b)).collect()))?
        .map(|m| m.into_iter().map(|x| x == 1).collect::<Vec<bool>>());
    // Real lengths: the shards' own global real offsets when they carry them beside the padded
    // ones (bionemo's CP collator), else the leading real tokens of each slot (all of it
    // without a mask).
    let first = &ranks[0].pack;
    let carried = first.cu_padded.is_some()
        && first.cu.len() == global.len()
        && global_in_files
        && first.cu.ints().iter().zip(&global).all(|(r, &p)| r <= p);
    let mut real = vec![0i64];
    if carried {
        real = first.cu.ints().to_vec();
    }
    for w in global.windows(2).filter(|_| !carried) {
        let slot = w[0] as usize..w[1] as usize;
        let n = match &mask {
            Some(m) => m[slot.clone()].iter().take_while(|&&r| r).count(),
            None => slot.len(),
        };
        real.push(real[real.len() - 1] + n as i64);
    }
    let keys = &ranks[0].pack.keys;
    Ok(BatchData {
        part: Some(format!("{cp} ranks reassembled")),
        keys: KeyNames {
            cu_seqlens: format!("{} (real lengths from the mask)", keys.cu_seqlens),
            cu_seqlens_padded: format!("{} (global)", keys.cu_seqlens),
            mask: keys.mask.clone(),
            labels: keys.labels.clone(),
            position_ids: keys.position_ids.clone(),
            ..KeyNames::default()
        },
        mask_is_padding: ranks[0].pack.mask_is_padding,
        boundaries_from_positions: ranks[0].pack.boundaries_from_positions,
        rows_are_sequences: ranks[0].pack.rows_are_sequences,
        rows: 1,
        input_ids: input_ids.into(),
        labels: labels.map(Column::from),
        convention: ranks[0].pack.convention,
        position_ids: position_ids.map(Column::from),
        cu: real.into(),
        cu_padded: Some(global.into()),
        absorbed: false,
        max_seqlen: None,
        real_mask: mask,
        seq_idx: None,
        num_real_seqs: None,
        row_slots: None,
        cu_k: None,
        block_mask: None,
        loss_mask_targets: loss_mask.clone(),
        side_tensors: Vec::new(),
        prediction_tensors: Vec::new(),
        facts: ranks[0].pack.facts,
        notes: vec![format!(
            "reassembled from {cp} rank files ({}, {})",
            match layout {
                ShardLayout::Zigzag => "zigzag".to_string(),
                ShardLayout::Contiguous => format!(
                    "contiguous: rank r holds tokens [r·T/cp, (r+1)·T/cp) of the pack, T = {total}"
                ),
                ShardLayout::ContiguousSlots => {
                    "contiguous: rank r holds piece r of every slot, local offsets × cp".to_string()
                }
                ShardLayout::ZigzagSequence => "zigzag-sequence".to_string(),
            },
            if loss_mask.is_some() {
                "the labels the targets of the loss mask on the reassembled tokens"
            } else {
                "labels rolled before the split"
            }
        )],
    })
}
