//! CP-SHARD: zigzag or contiguous shards, their reassembly, and the labels and positions each
//! rank holds.

use thd::IGNORE_INDEX;

use crate::checks::input::{CpSplitInput, ShardView};
use crate::checks::proof::Proof;
use crate::checks::rule::{Fuzz, Outcome, Rule, rule};
use crate::checks::shard_layout::{ShardLayout, zigzag_ranges};
use crate::checks::view::LayoutView;
use crate::words::plural;
use crate::{Checked, Location, Violation};

rule! {
    /// The batch shards over the CP ranks. [`crate::checks::cp_shard`],
    /// [`crate::checks::contiguous_group`].
    CP_SHARD = "cp-shard", CpShard, "the batch splits into its CP layout's equal pieces (2·cp zigzag chunks of every slot or of the whole pack, or cp contiguous pieces) and every token lands on one rank",
        batch: |c| c.opts.cp_size.map(|cp| cp_shard(c.view, cp)),
        fuzz: Fuzz::CpSplit(Some(judge_cp_shard)),
        proof: Proof::Zoo("TruncatingSplit");
    /// A rank's labels are the targets rolled on the full sequence. [`crate::checks::check_cp_shard`]
    /// (in `fuzz cp-split`, reported by `cp-shard`'s function).
    CP_LABELS = "cp-labels", CpShard, "labels are rolled on the full sequence, then split",
        fuzz: Fuzz::CpSplit(None),
        proof: Proof::Zoo("SplitThenRoll");
    /// A rank's position ids are global. [`crate::checks::check_cp_shard`] (in `fuzz cp-split`,
    /// reported by `cp-shard`'s function).
    CP_POSITION_IDS = "cp-position-ids", CpShard, "a rank's position ids are each token's offset in its own sequence",
        fuzz: Fuzz::CpSplit(None),
        proof: Proof::Zoo("LocalPositionIds");
    /// A valid layout is never rejected. [`crate::checks::check_split_accepted`].
    CP_SPLIT_ACCEPTED = "cp-split-accepted", CpShard, "a layout with every length divisible by 2·cp is accepted",
        fuzz: Fuzz::CpSplit(Some(judge_split_accepted)),
        proof: Proof::Test("cli/tests/cli/fuzz_numbers.rs::fuzz_cp_split_passes_the_zigzag_and_catches_labels_rolled_after_the_split");
}

/// `cp-shard` (with `cp-labels` and `cp-position-ids`): the shards, in the input's layout.
pub(crate) fn judge_cp_shard(i: &CpSplitInput<'_>) -> Option<Checked> {
    i.view.map(|view| check_cp_shard_in(view, i.layout))
}

/// `cp-split-accepted`: a refusal only of a layout the splitter cannot take.
pub(crate) fn judge_split_accepted(i: &CpSplitInput<'_>) -> Option<Checked> {
    i.rejection.map(|why| check_split_accepted_in(i.layout, i.cp, i.storage, Some(why)))
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
/// use rules::checks::rolled_label;
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
/// use rules::checks::{roll_labels, zigzag_positions};
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
/// `r`'s local slot `k` goes to global index [`zigzag_positions`](crate::checks::zigzag_positions)`(storage, cp, r)[k]`
/// ([`reassemble_shards`] with [`ShardLayout::Zigzag`]).
///
/// # Errors
/// A sentence for a slot that does not split into `2·cp` chunks, a wrong number of shards, or a
/// shard whose length is not what the zigzag gives its rank.
///
/// # Example
/// ```
/// use rules::checks::zigzag_reassemble;
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
    reassemble_shards(ShardLayout::Zigzag, storage, cp, parts)
}

/// Reassembles per-rank shards of `layout` into the global storage order, the obvious way:
/// rank `r`'s local slot `k` goes to global index `layout.positions(storage, cp, r)[k]`.
///
/// # Errors
/// A sentence for lengths the layout does not split into equal pieces
/// ([`ShardLayout::indivisible`]), a wrong number of shards, or a shard whose length is not
/// what the layout gives its rank.
///
/// # Example
/// ```
/// use rules::checks::{ShardLayout, reassemble_shards};
/// // Two slots of 3 and 1 tokens over cp = 2, the whole pack in two contiguous pieces.
/// let parts = vec![vec![10, 11], vec![12, 20]];
/// let back = reassemble_shards(ShardLayout::Contiguous, &[3, 1], 2, &parts).unwrap();
/// assert_eq!(back, vec![10, 11, 12, 20]);
/// assert!(reassemble_shards(ShardLayout::Contiguous, &[3, 2], 2, &parts).is_err()); // T = 5
/// ```
pub fn reassemble_shards<T: Clone + Default>(
    layout: ShardLayout,
    storage: &[u32],
    cp: usize,
    parts: &[Vec<T>],
) -> Result<Vec<T>, String> {
    if cp == 0 || parts.len() != cp {
        return Err(format!("{} shards for cp = {cp}", parts.len()));
    }
    if let Some(why) = layout.indivisible(storage, cp) {
        return Err(why);
    }
    let total: usize = storage.iter().map(|&p| p as usize).sum();
    let mut out = vec![T::default(); total];
    for (r, part) in parts.iter().enumerate() {
        let pos = layout.positions(storage, cp, r);
        if pos.len() != part.len() {
            let split = if layout.is_contiguous() { "the contiguous split" } else { "the zigzag" };
            return Err(format!(
                "rank {r} holds {} tokens, {split} gives it {}",
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

/// CP-SHARD on the shards of one batch, zigzag ([`check_cp_shard_in`] with
/// [`ShardLayout::Zigzag`]).
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
/// use rules::checks::{ShardView, check_cp_shard};
/// // One sequence of 4 tokens over cp = 2, but token 2 was lost (a zero-filled slot).
/// let positions = vec![vec![Some(0), Some(3)], vec![Some(1), None]];
/// let view = ShardView { cp: 2, lens: &[4], storage: &[4], positions: &positions,
///     labels: None, unshifted_labels: None, position_ids: None };
/// let v = check_cp_shard(&view).unwrap_err();
/// assert_eq!(v.at.token, Some(2));
/// ```
pub fn check_cp_shard(view: &ShardView<'_>) -> Checked {
    check_cp_shard_in(view, ShardLayout::Zigzag)
}

/// CP-SHARD on the shards of one batch split by `layout`.
///
/// ```text
/// every real token is held by exactly one rank            (no overlap, no gap, no truncation)
/// rank r holds what the layout gives it                    (when the lengths split; see ShardLayout)
/// contiguous: the pieces are equal                         (T / cp tokens on every rank)
/// labels[r][k] = target of its global token               (rolled on the full sequence, then split)
/// position_ids[r][k] = offset of its token in its segment  (real tokens)
/// ```
///
/// # Errors
/// The first rule broken, naming the rank, the token (global for a token held twice or never,
/// local otherwise), the segment, expected and got.
///
/// # Example
/// ```
/// use rules::checks::{ShardLayout, ShardView, check_cp_shard_in};
/// // One sequence of 4 tokens over cp = 2, contiguous pieces that overlap by one token.
/// let positions = vec![vec![Some(0), Some(1), Some(2)], vec![Some(2), Some(3)]];
/// let view = ShardView { cp: 2, lens: &[4], storage: &[4], positions: &positions,
///     labels: None, unshifted_labels: None, position_ids: None };
/// let v = check_cp_shard_in(&view, ShardLayout::Contiguous).unwrap_err();
/// assert_eq!((v.id, v.at.rank, v.at.token), ("cp-shard", Some(0), Some(2)));
/// assert_eq!(v.got, "held by ranks 0 and 1");
/// ```
pub fn check_cp_shard_in(view: &ShardView<'_>, layout: ShardLayout) -> Checked {
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
                if layout.is_contiguous() {
                    return Err(contiguous_coverage(view, layout, (i, j, g), &holders[g]));
                }
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
    let indivisible = layout.indivisible(view.storage, cp);
    if indivisible.is_none() {
        for (r, shard) in view.positions.iter().enumerate() {
            let want = layout.positions(view.storage, cp, r);
            if shard.len() != want.len() {
                let text = if layout.is_contiguous() {
                    "every rank holds an equal contiguous piece of T / cp tokens"
                } else {
                    "every rank holds T / cp tokens"
                };
                let mut e = v(text, cp)
                    .at(Location::default().cp(cp).rank(r))
                    .expected(want.len())
                    .got(shard.len());
                if layout.is_contiguous() {
                    e = e.note(format!(
                        "rank {r} must hold {} ({}), it holds {}",
                        layout.piece(view.storage, cp, r),
                        plural(want.len(), "token"),
                        held(shard)
                    ));
                }
                return Err(e);
            }
            if let Some(k) = (0..want.len()).find(|&k| shard[k] != Some(want[k])) {
                if layout.is_contiguous() {
                    return Err(v("rank r holds piece r of the contiguous split", cp)
                        .at(Location::default().cp(cp).rank(r).token(k))
                        .expected(format!("global token {}", want[k]))
                        .got(shard[k].map_or("a token not of the batch".into(), |g| {
                            format!("global token {g}")
                        }))
                        .note(format!(
                            "rank {r} must hold {} ({}); it holds {}",
                            layout.piece(view.storage, cp, r),
                            layout.name(),
                            held(shard)
                        )));
                }
                let text = if layout == ShardLayout::ZigzagSequence {
                    "rank r holds chunks r and 2·cp−1−r of the whole pack (zigzag-sequence)"
                } else {
                    "rank r holds chunks r and 2·cp−1−r of every segment (zigzag)"
                };
                return Err(v(text, cp)
                    .at(Location::default().cp(cp).rank(r).token(k))
                    .expected(format!("global token {}", want[k]))
                    .got(shard[k].map_or("a token not of the batch".into(), |g| {
                        format!("global token {g}")
                    })));
            }
        }
    } else if layout.is_contiguous()
        && let Some(r) = (1..cp).find(|&r| view.positions[r].len() != view.positions[0].len())
    {
        // No equal split exists: the pieces came out unequal (torch.chunk of a length that
        // is not a multiple of cp) instead of being padded or refused.
        return Err(v("every rank holds an equal contiguous piece of T / cp tokens", cp)
            .at(Location::default().cp(cp).rank(r))
            .expected(format!("{} tokens, as rank 0", view.positions[0].len()))
            .got(view.positions[r].len())
            .note(format!(
                "{}: a contiguous split pads it to a multiple of cp or refuses it, never cuts \
                 unequal pieces",
                indivisible.unwrap_or_default()
            )));
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
/// use rules::checks::check_reassembly;
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
/// use rules::checks::check_split_accepted;
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

/// What a shard holds, as runs of global storage tokens: `global tokens 0..13`, `global tokens
/// 0..4, 6..8 and 1 token not of the batch`.
fn held(shard: &[Option<usize>]) -> String {
    let mut runs: Vec<(usize, usize)> = Vec::new();
    for &g in shard.iter().flatten() {
        match runs.last_mut() {
            Some((_, end)) if *end == g => *end += 1,
            _ => runs.push((g, g + 1)),
        }
    }
    let foreign = shard.iter().filter(|g| g.is_none()).count();
    let mut parts: Vec<String> = runs.iter().take(4).map(|(a, b)| format!("{a}..{b}")).collect();
    if runs.len() > 4 {
        parts.push(format!("… ({} more runs)", runs.len() - 4));
    }
    let mut out = if parts.is_empty() {
        "no token of the batch".to_string()
    } else {
        format!("global tokens {}", parts.join(", "))
    };
    if foreign > 0 {
        out += &format!(" and {} not of the batch", plural(foreign, "token"));
    }
    out
}

/// Ranks as words: `0`, `0 and 1`, `0, 1 and 2`.
fn and_list(ranks: &[usize]) -> String {
    match ranks {
        [] => String::new(),
        [one] => one.to_string(),
        [init @ .., last] => {
            let init: Vec<String> = init.iter().map(usize::to_string).collect();
            format!("{} and {last}", init.join(", "))
        }
    }
}

/// The coverage violation of a contiguous split: global token `g` (offset `j` of segment `i`)
/// is on `holders` (none: a gap; several: the pieces overlap), named at the rank that is wrong.
fn contiguous_coverage(
    view: &ShardView<'_>,
    layout: ShardLayout,
    (i, j, g): (usize, usize, usize),
    holders: &[usize],
) -> Violation {
    let cp = view.cp;
    let owner = layout.owner(view.storage, cp, g);
    let expected = match owner {
        Some(o) => format!("held by rank {o} only ({})", layout.piece(view.storage, cp, o)),
        None => "held by exactly one rank".to_string(),
    };
    let at = Location::default().cp(cp).segment(i).token(g);
    let e = v("every real token is held by exactly one rank", cp).expected(expected);
    if holders.is_empty() {
        let at = match owner {
            Some(o) => at.rank(o),
            None => at,
        };
        return e.at(at).got("held by no rank").note(format!(
            "global token {g}, offset {j} of segment {i}: the contiguous pieces leave a gap; \
             a pack that does not split into cp equal pieces is padded or refused, never \
             truncated"
        ));
    }
    let wrong = holders.iter().copied().find(|&r| Some(r) != owner).unwrap_or(holders[0]);
    e.at(at.rank(wrong)).got(format!("held by ranks {}", and_list(holders))).note(format!(
        "global token {g}, offset {j} of segment {i}: the contiguous pieces overlap; rank \
         {wrong} holds {}",
        held(&view.positions[wrong])
    ))
}

/// CP-SHARD, divisibility, for a splitter of `layout`: it may reject a layout only when the
/// lengths do not split into the layout's equal pieces ([`ShardLayout::indivisible`]); a
/// valid layout must be accepted.
///
/// # Errors
/// A valid layout rejected.
///
/// # Example
/// ```
/// use rules::checks::{ShardLayout, check_split_accepted_in};
/// // 3 + 3 tokens: the whole pack splits over cp = 2, each slot does not.
/// assert!(check_split_accepted_in(ShardLayout::Contiguous, 2, &[3, 3], Some("no")).is_err());
/// assert!(check_split_accepted_in(ShardLayout::ContiguousSlots, 2, &[3, 3], Some("no")).is_ok());
/// ```
pub fn check_split_accepted_in(
    layout: ShardLayout,
    cp: usize,
    storage: &[u32],
    rejection: Option<&str>,
) -> Checked {
    if layout == ShardLayout::Zigzag {
        return check_split_accepted(cp, storage, rejection);
    }
    let what = match layout {
        ShardLayout::ContiguousSlots => "every slot divides into cp contiguous pieces",
        ShardLayout::ZigzagSequence => "pack divides into 2·cp chunks",
        _ => "pack divides into cp contiguous pieces",
    };
    match rejection {
        Some(msg) if layout.indivisible(storage, cp).is_none() => {
            Err(violation(CP_SPLIT_ACCEPTED, &format!("a layout whose {what} is accepted"), cp)
                .expected("shards")
                .got(format!("an error: {msg}")))
        }
        _ => Ok(()),
    }
}

/// The contiguous layout the shards of `view` follow more closely: the whole pack
/// ([`ShardLayout::Contiguous`]) or every slot ([`ShardLayout::ContiguousSlots`]), by the
/// number of local slots that hold what the layout gives them (the whole pack on a tie). Both
/// are contiguous CP (Ulysses and slime split the pack, ring-flash-attn's varlen ring every
/// sequence), so a splitter is judged by the one it meant.
///
/// # Example
/// ```
/// use rules::checks::{ShardLayout, ShardView, closest_contiguous};
/// // Slots of 2 and 2 over cp = 2: rank 0 holds the first token of each slot.
/// let positions = vec![vec![Some(0), Some(2)], vec![Some(1), Some(3)]];
/// let view = ShardView { cp: 2, lens: &[2, 2], storage: &[2, 2], positions: &positions,
///     labels: None, unshifted_labels: None, position_ids: None };
/// assert_eq!(closest_contiguous(&view), ShardLayout::ContiguousSlots);
/// ```
pub fn closest_contiguous(view: &ShardView<'_>) -> ShardLayout {
    let agree = |layout: ShardLayout| -> usize {
        view.positions
            .iter()
            .enumerate()
            .map(|(r, shard)| {
                let want = layout.positions(view.storage, view.cp, r);
                shard.iter().zip(&want).filter(|(g, w)| **g == Some(**w)).count()
            })
            .sum()
    };
    if agree(ShardLayout::ContiguousSlots) > agree(ShardLayout::Contiguous) {
        ShardLayout::ContiguousSlots
    } else {
        ShardLayout::Contiguous
    }
}

/// CP-SHARD, `cp-shard`, on the rank files of a CP group split contiguously (the whole pack in
/// `cp` pieces, every rank keeping the `global` offsets): all the files can show is how many
/// tokens each rank holds (`held[r]`) against the `T` tokens the offsets address. The pieces are
/// read back to back when they add up to `T` (then only unequal pieces can be wrong), else
/// each from where the layout starts it (`r·⌊T/cp⌋`), so that a token on two ranks (pieces
/// that overlap) or on none (a gap) is named with its rank. Every stored token counts, padding
/// included: the ranks hold the stream as it is.
///
/// # Example
/// ```
/// use rules::checks::{Status, contiguous_group};
/// // 8 tokens over cp = 2; rank 0 kept one token of rank 1's piece.
/// let o = contiguous_group(&[0, 5, 8], &[5, 4], "cu_seqlens");
/// assert_eq!(o.status, Status::Violated);
/// let v = o.violation.unwrap();
/// assert_eq!((v.at.rank, v.at.token), (Some(0), Some(4)));
/// assert!(contiguous_group(&[0, 5, 8], &[4, 4], "cu_seqlens").violation.is_none());
/// ```
pub fn contiguous_group(global: &[i64], held: &[usize], key: &str) -> Outcome {
    let cp = held.len();
    if cp == 0 {
        return CP_SHARD.violated(CP_SHARD.violation().expected("cp >= 1").got("cp = 0"));
    }
    let storage: Vec<u32> = global
        .windows(2)
        .map(|w| u32::try_from((w[1] - w[0]).max(0)).unwrap_or(u32::MAX))
        .collect();
    let total: usize = storage.iter().map(|&p| p as usize).sum();
    let n = total / cp;
    let back_to_back = held.iter().sum::<usize>() == total;
    let mut start = 0usize;
    let positions: Vec<Vec<Option<usize>>> = held
        .iter()
        .enumerate()
        .map(|(r, &c)| {
            let from = if back_to_back { start } else { r * n };
            start += c;
            (from..from + c).map(|g| (g < total).then_some(g)).collect()
        })
        .collect();
    let view = ShardView {
        cp,
        lens: &storage,
        storage: &storage,
        positions: &positions,
        labels: None,
        unshifted_labels: None,
        position_ids: None,
    };
    match check_cp_shard_in(&view, ShardLayout::Contiguous) {
        Ok(()) => CP_SHARD.ok(format!(
            "contiguous over cp = {cp}: {} × {n} tokens of the pack, every token on exactly one rank",
            plural(cp, "rank")
        )),
        Err(e) => {
            let at = (*e.at).clone().key(key);
            let note = format!(
                "{}; the ranks hold {} tokens against the {total} of `{key}`",
                e.note.as_deref().unwrap_or("the contiguous split"),
                held.iter().map(usize::to_string).collect::<Vec<_>>().join(" + ")
            );
            CP_SHARD.violated(e.at(at).note(note))
        }
    }
}

/// CP-SHARD, `cp-shard`: with `cp` ranks, every slot splits into `2·cp` equal zigzag chunks, the
/// slots cover every stored token, and every token lands on exactly one rank. The zigzag is
/// computed here the obvious way ([`zigzag_positions`](crate::checks::zigzag_positions)), never
/// by the sharder under test.
pub fn cp_shard(view: &LayoutView<'_>, cp: usize) -> Outcome {
    let k = view.keys();
    if cp == 0 {
        return CP_SHARD.violated(CP_SHARD.violation().expected("cp >= 1").got("cp = 0"));
    }
    let key = if view.cu_seqlens_padded.is_some() { &k.cu_seqlens_padded } else { &k.cu_seqlens };
    // The slot lengths, read from the offsets as they are needed (no vector per segment).
    let storage = || (0..view.segments()).map(|i| view.slot(i).len() as u32 as usize);
    if cp > 1
        && let Some((i, p)) = storage().enumerate().find(|&(_, p)| !p.is_multiple_of(2 * cp))
    {
        return CP_SHARD.violated(
            CP_SHARD
                .violation()
                .with_cp(cp)
                .at(Location::default().cp(cp).segment(i).token(view.slot(i).start).key(key))
                .expected(format!("a slot length divisible by 2*cp = {}", 2 * cp))
                .got(format!(
                    "segment {i}: slot of {p} tokens is not divisible by 2*cp = {}",
                    2 * cp
                ))
                .note("pad each sequence to a multiple of 2·cp before the split; a sharder that truncates drops tokens"),
        );
    }
    let covered: usize = storage().sum();
    if covered != view.num_tokens {
        return CP_SHARD.violated(
            CP_SHARD
                .violation()
                .at(Location::default().cp(cp).token(covered).key(key))
                .expected(format!("slots covering all T = {} tokens", view.num_tokens))
                .got(format!("tokens {covered}..{} lie past the last slot", view.num_tokens))
                .note(
                    "TransformerEngine's partitioner treats them as part of the last sequence and \
                     hands the ranks overlapping tokens",
                ),
        );
    }
    // Two bits per token, not a counter: held at least once, held more than once. The count
    // of the first token held other than once is taken again for the message.
    let (mut once, mut more) = (Bits::new(view.num_tokens), Bits::new(view.num_tokens));
    for rank in 0..cp {
        zigzag_ranges(storage(), cp, rank, |r| {
            for g in r {
                if once.get(g) {
                    more.set(g);
                } else {
                    once.set(g);
                }
            }
        });
    }
    if let Some(t) = (0..view.num_tokens).find(|&t| !once.get(t) || more.get(t)) {
        let mut ranks = 0usize;
        for rank in 0..cp {
            zigzag_ranges(storage(), cp, rank, |r| ranks += usize::from(r.contains(&t)));
        }
        return CP_SHARD.violated(
            CP_SHARD
                .violation()
                .at(Location::default().cp(cp).token(t))
                .expected("on exactly 1 rank")
                .got(format!("token {t} is on {ranks} ranks")),
        );
    }
    CP_SHARD.ok(format!(
        "zigzag over cp = {cp}: {} × {} tokens, every token on exactly one rank",
        plural(cp, "rank"),
        view.num_tokens / cp
    ))
}

/// One bit per token.
struct Bits(Vec<u64>);

impl Bits {
    fn new(n: usize) -> Self {
        Bits(vec![0; n.div_ceil(64)])
    }

    fn get(&self, i: usize) -> bool {
        self.0[i / 64] >> (i % 64) & 1 == 1
    }

    fn set(&mut self, i: usize) {
        self.0[i / 64] |= 1 << (i % 64);
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

    /// A view of one batch of storage `storage` (every token real) whose ranks hold `positions`.
    fn all_real<'a>(storage: &'a [u32], positions: &'a [Vec<Option<usize>>]) -> ShardView<'a> {
        ShardView {
            cp: positions.len(),
            lens: storage,
            storage,
            positions,
            labels: None,
            unshifted_labels: None,
            position_ids: None,
        }
    }

    fn run(from: usize, to: usize) -> Vec<Option<usize>> {
        (from..to).map(Some).collect()
    }

    /// A contiguous split passes under its layout and fails under the zigzag; pieces that
    /// overlap, leave a gap or come out unequal are named with the rank and the token.
    #[test]
    fn contiguous_splits_are_judged_by_their_layout() {
        let storage = [6, 7, 7, 4]; // slime --allgather-cp: 24 tokens, 12 per rank
        let good = vec![run(0, 12), run(12, 24)];
        let view = all_real(&storage, &good);
        assert!(check_cp_shard_in(&view, ShardLayout::Contiguous).is_ok());
        assert_eq!(closest_contiguous(&view), ShardLayout::Contiguous);
        // Slots that split both ways: the contiguous pieces are not the zigzag's.
        let halves = vec![run(0, 6), run(6, 12)];
        assert!(check_cp_shard_in(&all_real(&[8, 4], &halves), ShardLayout::Contiguous).is_ok());
        let v = check_cp_shard(&all_real(&[8, 4], &halves)).unwrap_err();
        assert_eq!((v.at.rank, v.at.token), (Some(0), Some(2)), "{v}");

        let overlap = vec![run(0, 13), run(12, 24)];
        let v =
            check_cp_shard_in(&all_real(&storage, &overlap), ShardLayout::Contiguous).unwrap_err();
        assert_eq!(
            (v.id, v.at.rank, v.at.token, v.at.segment),
            ("cp-shard", Some(0), Some(12), Some(1))
        );
        assert_eq!(v.expected, "held by rank 1 only (tokens 12..24 of the pack)");
        assert_eq!(v.got, "held by ranks 0 and 1");
        assert!(v.note.as_deref().unwrap().contains("rank 0 holds global tokens 0..13"), "{v}");

        let gap = vec![run(0, 11), run(12, 24)];
        let v = check_cp_shard_in(&all_real(&storage, &gap), ShardLayout::Contiguous).unwrap_err();
        assert_eq!((v.at.rank, v.at.token, v.got.as_str()), (Some(0), Some(11), "held by no rank"));

        let unequal = vec![run(0, 13), run(13, 24)];
        let v =
            check_cp_shard_in(&all_real(&storage, &unequal), ShardLayout::Contiguous).unwrap_err();
        assert_eq!((v.at.rank, v.expected.as_str(), v.got.as_str()), (Some(0), "12", "13"));
        assert!(v.rule.contains("equal contiguous piece"), "{v}");

        // 7 tokens over cp = 2 cut as torch.chunk does: 4 + 3.
        let chunked = vec![run(0, 4), run(4, 7)];
        let v = check_cp_shard_in(&all_real(&[7], &chunked), ShardLayout::Contiguous).unwrap_err();
        assert_eq!((v.at.rank, v.got.as_str()), (Some(1), "3"));
        assert!(v.note.as_deref().unwrap().contains("not divisible by cp = 2"), "{v}");

        // Per slot: rank r holds piece r of each slot.
        let slots = [4, 2];
        let per_slot = vec![vec![Some(0), Some(1), Some(4)], vec![Some(2), Some(3), Some(5)]];
        let view = all_real(&slots, &per_slot);
        assert!(check_cp_shard_in(&view, ShardLayout::ContiguousSlots).is_ok());
        assert_eq!(closest_contiguous(&view), ShardLayout::ContiguousSlots);
        let v = check_cp_shard_in(&view, ShardLayout::Contiguous).unwrap_err();
        assert_eq!((v.at.rank, v.at.token), (Some(0), Some(2)), "{v}");
        assert_eq!(
            reassemble_shards(
                ShardLayout::ContiguousSlots,
                &slots,
                2,
                &[vec![1, 2, 5], vec![3, 4, 6]]
            ),
            Ok(vec![1, 2, 3, 4, 5, 6])
        );
    }

    /// A CP group's rank files show only how many tokens each rank holds.
    #[test]
    fn contiguous_groups_are_judged_by_their_counts() {
        let global = [0, 6, 13, 20, 24];
        let ok = contiguous_group(&global, &[12, 12], "cu_seqlens_q");
        assert_eq!(ok.status, crate::checks::Status::Ok, "{ok:?}");
        assert!(ok.detail.starts_with("contiguous over cp = 2"), "{}", ok.detail);
        for (held, rank, token, got) in [
            (&[13, 12][..], 0, 12, "held by ranks 0 and 1"),
            (&[12, 11][..], 1, 23, "held by no rank"),
        ] {
            let v = contiguous_group(&global, held, "cu_seqlens_q").violation.unwrap();
            assert_eq!((v.at.rank, v.at.token, v.got.as_str()), (Some(rank), Some(token), got));
            assert_eq!(v.at.key.as_deref(), Some("cu_seqlens_q"));
        }
        // Back to back but unequal: 13 + 11.
        let v = contiguous_group(&global, &[13, 11], "cu_seqlens_q").violation.unwrap();
        assert_eq!((v.at.rank, v.expected.as_str(), v.got.as_str()), (Some(0), "12", "13"));
    }
}
