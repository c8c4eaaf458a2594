//! CP-SHARD's geometry: how a CP split lays a batch's tokens over the ranks ([`ShardLayout`])
//! and which global positions each rank holds, computed the obvious way. Plain data, no rule:
//! the CP-SHARD rules (`cp_shard.rs`) and the fuzz inputs (`input.rs`) read it.

use serde::Serialize;

/// How a CP split lays the tokens of a batch over the ranks (a profile's `cp_layout`).
///
/// ```text
/// Zigzag           every slot in 2·cp equal chunks; rank r holds chunks r and 2·cp−1−r of each
/// Contiguous       the whole pack (the slots back to back, T tokens) in cp equal pieces;
///                  rank r holds tokens [r·T/cp, (r+1)·T/cp)
/// ContiguousSlots  every slot in cp equal pieces; rank r holds piece r of each
/// ZigzagSequence   the whole pack in 2·cp equal chunks, whatever its documents; rank r holds
///                  chunks r and 2·cp−1−r of it
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum ShardLayout {
    /// Dual-chunk load balancing (TransformerEngine, Megatron `get_batch_on_this_cp_rank`,
    /// bionemo, AReaL, slime's default path).
    #[default]
    Zigzag,
    /// One contiguous piece of the whole pack per rank (DeepSpeed Ulysses, slime's
    /// `--allgather-cp`, Nanotron, llama3-style ring attention); the ranks keep the global
    /// offsets.
    Contiguous,
    /// One contiguous piece of every slot per rank (ring-flash-attn's `ring_flash_attn_varlen`,
    /// whose ranks keep the local offsets `cu_seqlens / cp`).
    ContiguousSlots,
    /// The zigzag of the whole pack as one sequence, whatever its documents (Megatron-LM's
    /// `get_batch_on_this_cp_rank(use_per_sequence_balancing=True)` for inter-document
    /// masking); the ranks keep the global offsets.
    ZigzagSequence,
}

impl ShardLayout {
    /// Its name in reports: `zigzag`, `contiguous`, `contiguous per slot`, `zigzag-sequence`.
    pub fn name(self) -> &'static str {
        match self {
            ShardLayout::Zigzag => "zigzag",
            ShardLayout::Contiguous => "contiguous",
            ShardLayout::ContiguousSlots => "contiguous per slot",
            ShardLayout::ZigzagSequence => "zigzag-sequence",
        }
    }

    /// Whether the layout is one of the contiguous ones.
    pub fn is_contiguous(self) -> bool {
        matches!(self, ShardLayout::Contiguous | ShardLayout::ContiguousSlots)
    }

    /// The first length that keeps the layout from splitting `storage` into equal pieces over
    /// `cp` ranks, as a sentence; `None` when it splits.
    ///
    /// # Example
    /// ```
    /// use rules::checks::ShardLayout;
    /// assert!(ShardLayout::Zigzag.indivisible(&[4, 8], 2).is_none());
    /// assert!(ShardLayout::Zigzag.indivisible(&[6], 2).is_some());
    /// assert!(ShardLayout::Contiguous.indivisible(&[3, 3], 2).is_none()); // T = 6
    /// assert!(ShardLayout::ContiguousSlots.indivisible(&[3, 3], 2).is_some());
    /// assert!(ShardLayout::ZigzagSequence.indivisible(&[3, 5], 2).is_none()); // T = 8
    /// ```
    pub fn indivisible(self, storage: &[u32], cp: usize) -> Option<String> {
        if cp <= 1 {
            return None;
        }
        let slot = |unit: usize, what: &str| {
            storage.iter().position(|&p| !(p as usize).is_multiple_of(unit)).map(|i| {
                format!(
                    "segment {i}: slot of {} tokens is not divisible by {what} = {unit}",
                    storage[i]
                )
            })
        };
        match self {
            ShardLayout::Zigzag => slot(2 * cp, "2*cp"),
            ShardLayout::ContiguousSlots => slot(cp, "cp"),
            ShardLayout::Contiguous => {
                let total: usize = storage.iter().map(|&p| p as usize).sum();
                (!total.is_multiple_of(cp))
                    .then(|| format!("the pack of {total} tokens is not divisible by cp = {cp}"))
            }
            ShardLayout::ZigzagSequence => {
                let total: usize = storage.iter().map(|&p| p as usize).sum();
                (!total.is_multiple_of(2 * cp)).then(|| {
                    format!("the pack of {total} tokens is not divisible by 2*cp = {}", 2 * cp)
                })
            }
        }
    }

    /// The global storage indices rank `rank` holds, in local order, computed the obvious way
    /// ([`zigzag_positions`], [`contiguous_positions`], [`contiguous_slot_positions`]).
    pub fn positions(self, storage: &[u32], cp: usize, rank: usize) -> Vec<usize> {
        match self {
            ShardLayout::Zigzag => zigzag_positions(storage, cp, rank),
            ShardLayout::Contiguous => contiguous_positions(storage, cp, rank),
            ShardLayout::ContiguousSlots => contiguous_slot_positions(storage, cp, rank),
            ShardLayout::ZigzagSequence => {
                zigzag_positions(&[storage.iter().sum::<u32>()], cp, rank)
            }
        }
    }

    /// What rank `rank` holds, in words: `chunks 1 and 2 of every slot`, `tokens 12..24 of
    /// the pack`, `piece 1 of every slot`.
    pub fn piece(self, storage: &[u32], cp: usize, rank: usize) -> String {
        match self {
            ShardLayout::Zigzag => format!("chunks {rank} and {} of every slot", 2 * cp - 1 - rank),
            ShardLayout::Contiguous => {
                let n = storage.iter().map(|&p| p as usize).sum::<usize>() / cp.max(1);
                format!("tokens {}..{} of the pack", rank * n, (rank + 1) * n)
            }
            ShardLayout::ContiguousSlots => format!("piece {rank} of every slot"),
            ShardLayout::ZigzagSequence => {
                format!("chunks {rank} and {} of the whole pack", 2 * cp - 1 - rank)
            }
        }
    }

    /// The rank whose piece holds global storage token `g`, when the layout splits `storage`.
    pub(crate) fn owner(self, storage: &[u32], cp: usize, g: usize) -> Option<usize> {
        if self.indivisible(storage, cp).is_some() {
            return None;
        }
        (0..cp).find(|&r| self.positions(storage, cp, r).contains(&g))
    }
}

/// The contiguous assignment of the whole pack, computed the obvious way: the slots back to
/// back are `T` tokens, and rank `r` holds `[r·⌊T/cp⌋, (r+1)·⌊T/cp⌋)` (every token when
/// `cp = 1`; a pack that is not a multiple of `cp` has no equal split, and its tail is on no
/// rank here).
///
/// # Example
/// ```
/// use rules::checks::contiguous_positions;
/// // Slots of 6, 7, 7 and 4 tokens over cp = 2 (slime's --allgather-cp): 12 tokens each.
/// assert_eq!(contiguous_positions(&[6, 7, 7, 4], 2, 1), (12..24).collect::<Vec<_>>());
/// ```
pub fn contiguous_positions(storage: &[u32], cp: usize, rank: usize) -> Vec<usize> {
    let total: usize = storage.iter().map(|&p| p as usize).sum();
    let n = total / cp.max(1);
    (rank * n..(rank + 1) * n).collect()
}

/// The contiguous assignment of every slot, computed the obvious way: rank `r` holds piece `r`
/// of `cp` equal pieces of every segment's slot, segment by segment.
///
/// # Example
/// ```
/// use rules::checks::contiguous_slot_positions;
/// assert_eq!(contiguous_slot_positions(&[4, 2], 2, 1), vec![2, 3, 5]);
/// ```
pub fn contiguous_slot_positions(storage: &[u32], cp: usize, rank: usize) -> Vec<usize> {
    let mut out = Vec::new();
    let mut start = 0usize;
    for &p in storage {
        let n = p as usize / cp.max(1);
        out.extend(start + rank * n..start + (rank + 1) * n);
        start += p as usize;
    }
    out
}

/// The zigzag assignment, computed the obvious way: rank `r` holds chunks `r` and
/// `2·cp − 1 − r` of every segment's slot, segment by segment (the whole slot when `cp = 1`).
pub fn zigzag_positions(storage: &[u32], cp: usize, rank: usize) -> Vec<usize> {
    let mut out = Vec::new();
    zigzag_ranges(storage.iter().map(|&p| p as usize), cp, rank, |r| out.extend(r));
    out
}

/// [`zigzag_positions`] as the ranges of global positions rank `rank` holds, in order, handed
/// to `each` one by one: the slot lengths `storage` are read as they come, nothing is collected.
pub(crate) fn zigzag_ranges(
    storage: impl IntoIterator<Item = usize>,
    cp: usize,
    rank: usize,
    mut each: impl FnMut(std::ops::Range<usize>),
) {
    let mut start = 0usize;
    for p in storage {
        if cp == 1 {
            each(start..start + p);
        } else {
            let h = p / (2 * cp);
            for c in [rank, 2 * cp - 1 - rank] {
                each(start + c * h..start + (c + 1) * h);
            }
        }
        start += p;
    }
}
