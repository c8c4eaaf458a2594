use serde::{Deserialize, Serialize};

use super::Pack;
use crate::{Error, Result};

/// Packing statistics of a list of packs at a capacity, in exact integers.
///
/// Each pack is taken to be stored at full capacity on every branch it uses (the static shape
/// open-instruct and bionemo pad to: `max_seq_length`, `token_micro_batch_size`), so pad tokens
/// include per-sequence divisibility padding and the tail of each pack.
///
/// ```text
/// real      = Σ_packs Σ_branches Σ_items lens
/// storage   = Σ_packs C · (2 if the pack holds a DPO pair else 1)
/// pad       = storage − real
/// wasted    = pad / storage                                  (0 when storage = 0)
/// lower     = max_b ⌈Σ real_b / C⌉                           (≤ OPT, the L1 bound)
/// efficiency = lower / packs                                  (1 when packs = 0)
/// ```
///
/// # Example
/// ```
/// use thd::pack::{Example, Pack, PackingStats};
/// let packs = vec![
///     Pack::new(vec![Example::single(0, 60).item(), Example::single(1, 30).item()]),
///     Pack::new(vec![Example::single(2, 50).item()]),
/// ];
/// let s = PackingStats::new(&packs, 100)?;
/// assert_eq!((s.real_tokens, s.pad_tokens, s.lower_bound_packs), (140, 60, 2));
/// assert_eq!(s.wasted_fraction(), 0.3);
/// assert_eq!(s.efficiency(), 1.0);
/// # Ok::<(), thd::Error>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct PackingStats {
    /// Capacity `C` per branch.
    pub capacity: u32,
    /// Number of packs.
    pub packs: u64,
    /// Number of items (examples or pieces) over all packs.
    pub items: u64,
    /// Real tokens, all branches.
    pub real_tokens: u64,
    /// Storage at full capacity, all branches.
    pub storage_tokens: u64,
    /// `storage − real`.
    pub pad_tokens: u64,
    /// `max_b ⌈Σ real_b / C⌉`: no packing of these tokens uses fewer packs.
    pub lower_bound_packs: u64,
}

impl PackingStats {
    /// Statistics of `packs` at `capacity`.
    ///
    /// # Errors
    /// [`Error::ZeroCapacity`] if `capacity == 0`; [`Error::PackOverCapacity`] naming the first
    /// pack whose storage exceeds the capacity on some branch.
    ///
    /// # Example
    /// ```
    /// # use thd::pack::{Example, Pack, PackingStats};
    /// let over = vec![Pack::new(vec![Example::pair(0, 10, 120).item()])];
    /// let err = PackingStats::new(&over, 100).unwrap_err();
    /// assert_eq!(err.to_string(), "pack 0 holds 120 tokens on the rejected branch, more than the capacity 100");
    /// ```
    pub fn new(packs: &[Pack], capacity: u32) -> Result<Self> {
        super::check_capacity("packing_stats", capacity)?;
        let cap = u64::from(capacity);
        let mut stats = Self {
            capacity,
            packs: packs.len() as u64,
            items: 0,
            real_tokens: 0,
            storage_tokens: 0,
            pad_tokens: 0,
            lower_bound_packs: 0,
        };
        let mut per_branch = [0u64; 2];
        for (index, pack) in packs.iter().enumerate() {
            for (b, &load) in pack.load().iter().enumerate() {
                if load > cap {
                    let kind = pack.items.iter().map(|i| i.lens).find(|l| l.is_pair());
                    let branch = kind.map_or("single", |l| l.branch_name(b));
                    return Err(Error::PackOverCapacity { pack: index, branch, load, capacity });
                }
            }
            let real = pack.real();
            per_branch = [per_branch[0] + real[0], per_branch[1] + real[1]];
            stats.items += pack.len() as u64;
            stats.storage_tokens += cap * if pack.is_pair() { 2 } else { 1 };
        }
        stats.real_tokens = per_branch[0] + per_branch[1];
        stats.pad_tokens = stats.storage_tokens - stats.real_tokens;
        stats.lower_bound_packs = per_branch.iter().map(|t| t.div_ceil(cap)).max().unwrap_or(0);
        Ok(stats)
    }

    /// `pad / storage`: the fraction of stored tokens that are padding.
    ///
    /// # Example
    /// ```
    /// # use thd::pack::{Example, Pack, PackingStats};
    /// let s = PackingStats::new(&[Pack::new(vec![Example::single(0, 25).item()])], 100)?;
    /// assert_eq!(s.wasted_fraction(), 0.75);
    /// # Ok::<(), thd::Error>(())
    /// ```
    pub fn wasted_fraction(&self) -> f64 {
        if self.storage_tokens == 0 {
            0.0
        } else {
            self.pad_tokens as f64 / self.storage_tokens as f64
        }
    }

    /// `⌈Σs/C⌉ / packs`: 1 when the pack count meets the lower bound.
    ///
    /// # Example
    /// ```
    /// # use thd::pack::{Example, Pack, PackingStats};
    /// let two = [Pack::new(vec![Example::single(0, 30).item()]), Pack::new(vec![Example::single(1, 30).item()])];
    /// assert_eq!(PackingStats::new(&two, 100)?.efficiency(), 0.5);
    /// # Ok::<(), thd::Error>(())
    /// ```
    pub fn efficiency(&self) -> f64 {
        if self.packs == 0 { 1.0 } else { self.lower_bound_packs as f64 / self.packs as f64 }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pack::{Example, Lens, PackItem};

    #[test]
    fn stats_count_divisibility_padding_as_pad() {
        let piece = PackItem {
            id: 0,
            offset: 0,
            lens: Lens::Single { len: 5 },
            padded: Lens::Single { len: 8 },
        };
        let s = PackingStats::new(&[Pack::new(vec![piece])], 8).unwrap();
        assert_eq!((s.real_tokens, s.pad_tokens), (5, 3));
    }

    #[test]
    fn stats_of_pairs_use_two_rows_and_the_larger_bound() {
        let packs = [
            Pack::new(vec![Example::pair(0, 90, 10).item()]),
            Pack::new(vec![Example::pair(1, 90, 10).item()]),
        ];
        let s = PackingStats::new(&packs, 100).unwrap();
        assert_eq!((s.storage_tokens, s.real_tokens, s.lower_bound_packs), (400, 200, 2));
        assert_eq!(PackingStats::new(&[], 100).unwrap().efficiency(), 1.0);
    }
}
