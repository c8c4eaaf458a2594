//! CP-SHARD: zigzag shards, their reassembly, and the labels and positions each rank holds.

use thd::IGNORE_INDEX;

use super::{CP_LABELS, CP_POSITION_IDS, CP_SHARD, CP_SPLIT_ACCEPTED, Rule};
use crate::{Checked, Location, Violation};

/// What the CP ranks hold, as plain data.
///
/// `positions[r][k]` is the global storage index of the token in rank `r`'s local slot `k`
/// (`None` for a slot that holds no token of the batch, e.g. a zero-filled one). A property can
/// get it by tagging every token with its index before the split.
#[derive(Debug, Clone, Copy)]
pub struct ShardView<'a> {
    /// The CP size.
    pub cp: usize,
    /// Real length of every segment.
    pub lens: &'a [u32],
    /// Storage (padded) length of every segment; real tokens first in each slot.
    pub storage: &'a [u32],
    /// Per rank, the global storage index held in every local slot.
    pub positions: &'a [Vec<Option<usize>>],
    /// Per rank, the local labels (shifted: local token `k` predicts `labels[r][k]`).
    pub labels: Option<&'a [Vec<i64>]>,
    /// The global labels before the shift (`Unshifted`, storage order), which define the
    /// expected targets.
    pub unshifted_labels: Option<&'a [i64]>,
    /// Per rank, the local position ids.
    pub position_ids: Option<&'a [Vec<i64>]>,
}

/// A violation of `rule` (its id) in the words of one of its parts, at CP size `cp`.
fn violation(rule: Rule, text: &str, cp: usize) -> Violation {
    rule.violation().rule_text(text).with_cp(cp)
}

fn v(text: &str, cp: usize) -> Violation {
    violation(CP_SHARD, text, cp)
}

/// `(segment, offset)` of a storage index, and whether it is a real token.
fn locate(lens: &[u32], storage: &[u32], g: usize) -> Option<(usize, usize, bool)> {
    let mut start = 0usize;
    for (i, (&s, &p)) in lens.iter().zip(storage).enumerate() {
        if g < start + p as usize {
            let j = g - start;
            return Some((i, j, j < s as usize));
        }
        start += p as usize;
    }
    None
}

/// The zigzag assignment, computed the obvious way: rank `r` holds chunks `r` and
/// `2·cp − 1 − r` of every segment's slot, segment by segment (the whole slot when `cp = 1`).
pub fn zigzag_positions(storage: &[u32], cp: usize, rank: usize) -> Vec<usize> {
    let mut out = Vec::new();
    let mut start = 0usize;
    for &p in storage {
        let p = p as usize;
        if cp == 1 {
            out.extend(start..start + p);
        } else {
            let h = p / (2 * cp);
            for c in [rank, 2 * cp - 1 - rank] {
                out.extend(start + c * h..start + (c + 1) * h);
            }
        }
        start += p;
    }
    out
}

/// The label global storage token `g` is trained on once the labels are rolled on the full
/// sequence (before any split): the next token's label within its own segment, -100 for the
/// last real token of a segment and for padding. `None` when `g` lies past the slots or its
/// target past the end of `unshifted`.
///
/// ```text
/// target(seg i, offset j) = unshifted[startᵢ + j + 1] if j + 1 < sᵢ, else -100;  pads -100
/// ```
///
/// # Example
/// ```
/// use properties::checks::rolled_label;
/// // Segments of 3 and 1 real tokens in slots of 4 and 4.
/// let unshifted = [10, 11, 12, -100, 20, -100, -100, -100];
/// assert_eq!(rolled_label(&[3, 1], &[4, 4], &unshifted, 1), Some(12));
/// assert_eq!(rolled_label(&[3, 1], &[4, 4], &unshifted, 2), Some(-100)); // end of segment 0
/// assert_eq!(rolled_label(&[3, 1], &[4, 4], &unshifted, 3), Some(-100)); // padding
/// assert_eq!(rolled_label(&[3, 1], &[4, 4], &unshifted, 8), None); // past the slots
/// ```
pub fn rolled_label(lens: &[u32], storage: &[u32], unshifted: &[i64], g: usize) -> Option<i64> {
    let (i, j, real) = locate(lens, storage, g)?;
    if real && j + 1 < lens[i] as usize {
        unshifted.get(g + 1).copied()
    } else {
        Some(IGNORE_INDEX)
    }
}

/// Every storage token's [`rolled_label`], in storage order: the shifted labels a CP split
/// must hand out (Megatron, TransformerEngine and AReaL roll before the split). A token whose
/// target cannot be read gets -100.
///
/// # Example
/// ```
/// use properties::checks::{roll_labels, zigzag_positions};
/// let rolled = roll_labels(&[3, 1], &[4, 4], &[10, 11, 12, -100, 20, -100, -100, -100]);
/// assert_eq!(rolled, vec![11, 12, -100, -100, -100, -100, -100, -100]);
/// // Rank 1 of cp = 2 holds the middle chunks of every slot, with their rolled labels.
/// let rank1: Vec<i64> = zigzag_positions(&[4, 4], 2, 1).iter().map(|&g| rolled[g]).collect();
/// assert_eq!(rank1, vec![12, -100, -100, -100]);
/// ```
pub fn roll_labels(lens: &[u32], storage: &[u32], unshifted: &[i64]) -> Vec<i64> {
    let total: usize = storage.iter().map(|&p| p as usize).sum();
    (0..total).map(|g| rolled_label(lens, storage, unshifted, g).unwrap_or(IGNORE_INDEX)).collect()
}

/// Reassembles per-rank zigzag shards into the global storage order, the obvious way: rank
/// `r`'s local slot `k` goes to global index [`zigzag_positions`]`(storage, cp, r)[k]`.
///
/// # Errors
/// A sentence for a slot that does not split into `2·cp` chunks, a wrong number of shards, or a
/// shard whose length is not what the zigzag gives its rank.
///
/// # Example
/// ```
/// use properties::checks::zigzag_reassemble;
/// // One sequence of 4 over cp = 2: rank 0 holds chunks 0 and 3, rank 1 chunks 1 and 2.
/// let parts = vec![vec![10, 13], vec![11, 12]];
/// assert_eq!(zigzag_reassemble(&[4], 2, &parts).unwrap(), vec![10, 11, 12, 13]);
/// assert!(zigzag_reassemble(&[6], 2, &parts).is_err()); // 6 is not a multiple of 2·cp
/// ```
pub fn zigzag_reassemble<T: Clone + Default>(
    storage: &[u32],
    cp: usize,
    parts: &[Vec<T>],
) -> Result<Vec<T>, String> {
    if cp == 0 || parts.len() != cp {
        return Err(format!("{} shards for cp = {cp}", parts.len()));
    }
    if cp > 1
        && let Some(i) = storage.iter().position(|&p| !(p as usize).is_multiple_of(2 * cp))
    {
        return Err(format!(
            "segment {i}: slot of {} tokens is not divisible by 2*cp = {}",
            storage[i],
            2 * cp
        ));
    }
    let total: usize = storage.iter().map(|&p| p as usize).sum();
    let mut out = vec![T::default(); total];
    for (r, part) in parts.iter().enumerate() {
        let pos = zigzag_positions(storage, cp, r);
        if pos.len() != part.len() {
            return Err(format!(
                "rank {r} holds {} tokens, the zigzag gives it {}",
                part.len(),
                pos.len()
            ));
        }
        for (g, x) in pos.into_iter().zip(part) {
            out[g] = x.clone();
        }
    }
    Ok(out)
}

/// CP-SHARD on the shards of one batch.
///
/// ```text
/// every real token is held by exactly one rank            (nothing lost, nothing duplicated)
/// rank r holds chunks r and 2·cp−1−r of every slot        (zigzag; whole slots for cp = 1)
/// labels[r][k] = target of its global token               (rolled on the full sequence, then split)
///     target(seg i, offset j) = unshifted[startᵢ + j + 1] if j + 1 < sᵢ, else -100; pads -100
/// position_ids[r][k] = offset of its token in its segment  (real tokens)
/// ```
///
/// # Errors
/// The first rule broken, naming the rank, local slot, segment and global token.
///
/// # Example
/// ```
/// use properties::checks::{ShardView, check_cp_shard};
/// // One sequence of 4 tokens over cp = 2, but token 2 was lost (a zero-filled slot).
/// let positions = vec![vec![Some(0), Some(3)], vec![Some(1), None]];
/// let view = ShardView { cp: 2, lens: &[4], storage: &[4], positions: &positions,
///     labels: None, unshifted_labels: None, position_ids: None };
/// let v = check_cp_shard(&view).unwrap_err();
/// assert_eq!(v.at.token, Some(2));
/// ```
pub fn check_cp_shard(view: &ShardView<'_>) -> Checked {
    let cp = view.cp;
    let total: usize = view.storage.iter().map(|&p| p as usize).sum();
    if cp == 0 {
        return Err(v("the CP size is at least 1", cp).expected(">= 1").got(0));
    }
    if view.lens.len() != view.storage.len() {
        return Err(v("one storage length per segment", cp)
            .expected(view.lens.len())
            .got(view.storage.len()));
    }
    if let Some(i) = (0..view.lens.len()).find(|&i| view.lens[i] > view.storage[i]) {
        return Err(v("padded length >= real length", cp)
            .at(Location::default().cp(cp).segment(i))
            .expected(format!(">= {}", view.lens[i]))
            .got(view.storage[i]));
    }
    if view.positions.len() != cp {
        return Err(v("one shard per rank", cp).expected(cp).got(view.positions.len()));
    }
    let mut holders: Vec<Vec<usize>> = vec![Vec::new(); total];
    for (r, shard) in view.positions.iter().enumerate() {
        for g in shard.iter().flatten() {
            if let Some(h) = holders.get_mut(*g) {
                h.push(r);
            }
        }
    }
    let mut start = 0usize;
    for (i, (&s, &p)) in view.lens.iter().zip(view.storage).enumerate() {
        for j in 0..s as usize {
            let g = start + j;
            if holders[g].len() != 1 {
                let got = if holders[g].is_empty() {
                    "held by no rank".to_string()
                } else {
                    format!("held by ranks {:?}", holders[g])
                };
                return Err(v("every real token is held by exactly one rank", cp)
                    .at(Location::default().cp(cp).segment(i).token(g))
                    .expected("held by exactly one rank")
                    .got(got)
                    .note(format!(
                        "segment {i} has {s} real token(s) in a slot of {p}; lengths not divisible \
                         by 2·cp must be rejected or padded, never truncated"
                    )));
            }
        }
        start += p as usize;
    }
    let divisible = cp == 1 || view.storage.iter().all(|&p| (p as usize).is_multiple_of(2 * cp));
    if divisible {
        for (r, shard) in view.positions.iter().enumerate() {
            let want = zigzag_positions(view.storage, cp, r);
            if shard.len() != want.len() {
                return Err(v("every rank holds T / cp tokens", cp)
                    .at(Location::default().cp(cp).rank(r))
                    .expected(want.len())
                    .got(shard.len()));
            }
            if let Some(k) = (0..want.len()).find(|&k| shard[k] != Some(want[k])) {
                return Err(v("rank r holds chunks r and 2·cp−1−r of every segment (zigzag)", cp)
                    .at(Location::default().cp(cp).rank(r).token(k))
                    .expected(format!("global token {}", want[k]))
                    .got(format!("{:?}", shard[k])));
            }
        }
    }
    if let (Some(labels), Some(unshifted)) = (view.labels, view.unshifted_labels) {
        for (r, shard) in view.positions.iter().enumerate() {
            for (k, g) in shard.iter().enumerate() {
                let Some(&g) = g.as_ref() else { continue };
                let Some((i, j, real)) = locate(view.lens, view.storage, g) else { continue };
                let s = view.lens[i] as usize;
                // A target past the end of the given labels cannot be judged.
                let Some(want) = rolled_label(view.lens, view.storage, unshifted, g) else {
                    continue;
                };
                let got = labels.get(r).and_then(|l| l.get(k)).copied();
                if got != Some(want) {
                    let what = if !real {
                        "padding predicts nothing".to_string()
                    } else if j + 1 == s {
                        "the last token of a sequence predicts nothing".to_string()
                    } else {
                        format!("the next token of the same sequence (global token {})", g + 1)
                    };
                    return Err(violation(CP_LABELS, "labels are rolled on the full sequence, then split", cp)
                        .at(Location::default().cp(cp).rank(r).segment(i).token(k))
                        .expected(format!("{want} ({what})"))
                        .got(got.map_or("nothing".into(), |y| y.to_string()))
                        .note(format!("local slot {k} of rank {r} holds global token {g}, offset {j} of segment {i}")));
                }
            }
        }
    }
    if let Some(pos) = view.position_ids {
        for (r, shard) in view.positions.iter().enumerate() {
            for (k, g) in shard.iter().enumerate() {
                let Some(&g) = g.as_ref() else { continue };
                let Some((i, j, true)) = locate(view.lens, view.storage, g) else { continue };
                let got = pos.get(r).and_then(|p| p.get(k)).copied();
                if got != Some(j as i64) {
                    return Err(violation(CP_POSITION_IDS, "a rank's position ids are each token's offset in its own sequence", cp)
                        .at(Location::default().cp(cp).rank(r).segment(i).token(k))
                        .expected(j)
                        .got(got.map_or("nothing".into(), |y| y.to_string()))
                        .note(format!("local slot {k} holds global token {g} (RoPE must see global positions, Megatron #5243)")));
                }
            }
        }
    }
    Ok(())
}

/// CP-SHARD, reassembly: gathering the shards back gives the original tensor exactly.
///
/// # Errors
/// The first token that differs.
///
/// # Example
/// ```
/// use properties::checks::check_reassembly;
/// assert!(check_reassembly(2, &[1, 2, 3], &[1, 2, 3]).is_ok());
/// assert_eq!(check_reassembly(2, &[1, 2, 3], &[1, 3, 2]).unwrap_err().at.token, Some(1));
/// ```
pub fn check_reassembly(cp: usize, original: &[i64], reassembled: &[i64]) -> Checked {
    if original.len() != reassembled.len() {
        return Err(v("reassembly is the identity", cp)
            .expected(format!("{} tokens", original.len()))
            .got(format!("{} tokens", reassembled.len())));
    }
    if let Some(t) = (0..original.len()).find(|&t| original[t] != reassembled[t]) {
        return Err(v("reassembly is the identity", cp)
            .at(Location::default().cp(cp).token(t))
            .expected(original[t])
            .got(reassembled[t]));
    }
    Ok(())
}

/// CP-SHARD, divisibility: a splitter may reject a layout only when some storage length is not
/// a multiple of `2·cp`; a valid layout must be accepted.
///
/// # Errors
/// A valid layout rejected.
///
/// # Example
/// ```
/// use properties::checks::check_split_accepted;
/// assert!(check_split_accepted(2, &[8, 4], Some("not divisible")).is_err());
/// assert!(check_split_accepted(2, &[6], Some("not divisible")).is_ok());
/// ```
pub fn check_split_accepted(cp: usize, storage: &[u32], rejection: Option<&str>) -> Checked {
    let divisible = cp == 1 || storage.iter().all(|&p| (p as usize).is_multiple_of(2 * cp));
    match rejection {
        Some(msg) if divisible => Err(violation(
            CP_SPLIT_ACCEPTED,
            "a layout with every length divisible by 2·cp is accepted",
            cp,
        )
        .expected("shards")
        .got(format!("an error: {msg}"))),
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Each part of CP-SHARD reports under its own id.
    #[test]
    fn shard_rules_report_their_ids() {
        // One sequence of 4 over cp = 2: rank 0 holds tokens 0 and 3, rank 1 tokens 1 and 2.
        let positions = vec![vec![Some(0), Some(3)], vec![Some(1), Some(2)]];
        let unshifted = [10, 11, 12, 13];
        let right = roll_labels(&[4], &[4], &unshifted);
        let labels: Vec<Vec<i64>> =
            positions.iter().map(|p| p.iter().map(|g| right[g.unwrap()]).collect()).collect();
        let pos = vec![vec![0, 3], vec![1, 2]];
        let view = ShardView {
            cp: 2,
            lens: &[4],
            storage: &[4],
            positions: &positions,
            labels: Some(&labels),
            unshifted_labels: Some(&unshifted),
            position_ids: Some(&pos),
        };
        assert!(check_cp_shard(&view).is_ok());
        // Rolled after the split: rank 0's token 0 gets token 3's label.
        let after = vec![vec![13, -100], vec![12, -100]];
        let v = check_cp_shard(&ShardView { labels: Some(&after), ..view }).unwrap_err();
        assert_eq!((v.id, v.at.rank, v.at.token), ("cp-labels", Some(0), Some(0)));
        let local = vec![vec![0, 1], vec![0, 1]];
        let v = check_cp_shard(&ShardView { position_ids: Some(&local), ..view }).unwrap_err();
        assert_eq!(v.id, "cp-position-ids");
        let lost = vec![vec![Some(0), Some(3)], vec![Some(1), None]];
        assert_eq!(
            check_cp_shard(&ShardView { positions: &lost, ..view }).unwrap_err().id,
            "cp-shard"
        );
        assert_eq!(check_split_accepted(2, &[4], Some("no")).unwrap_err().id, "cp-split-accepted");
        assert_eq!(check_reassembly(2, &[1, 2], &[2, 1]).unwrap_err().id, "cp-shard");
    }
}
