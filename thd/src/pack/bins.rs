//! The offline bin-packing core shared by [`FirstFit`](super::FirstFit),
//! [`BestFit`](super::BestFit) and [`FirstFitDecreasing`](super::FirstFitDecreasing).

use serde::{Deserialize, Serialize};

use super::{Dropped, Example, OverLength, Pack, admit_all, check_capacity};
use crate::Result;

/// Options of the offline bin packers.
///
/// # Example
/// ```
/// use thd::pack::BinPackingOptions;
/// let o = BinPackingOptions { window: Some(1000), ..Default::default() };
/// assert_eq!(o.window, Some(1000));
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct BinPackingOptions {
    /// Over-length policy.
    pub over_length: OverLength,
    /// Pack every `window` buffered examples as one instance. `None` packs the whole epoch at
    /// [`Packer::end_epoch`](super::Packer::end_epoch) (Megatron-Bridge packs the dataset
    /// offline). `Some(0)` behaves as `Some(1)`.
    pub window: Option<usize>,
}

/// How an item chooses its bin.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Rule {
    FirstFit,
    BestFit,
    FirstFitDecreasing,
}

/// Buffer + placement shared by the three offline strategies.
#[derive(Debug, Clone)]
pub(super) struct Offline {
    pub(super) rule: Rule,
    pub(super) capacity: u32,
    options: BinPackingOptions,
    buffer: Vec<Example>,
    pub(super) dropped: Vec<Dropped>,
}

impl Offline {
    pub(super) fn new(
        name: &'static str,
        rule: Rule,
        capacity: u32,
        options: BinPackingOptions,
    ) -> Result<Self> {
        check_capacity(name, capacity)?;
        Ok(Self { rule, capacity, options, buffer: Vec::new(), dropped: Vec::new() })
    }

    pub(super) fn push(&mut self, batch: &[Example]) -> Result<Vec<Pack>> {
        let (kept, dropped) = admit_all(batch, self.capacity, self.options.over_length)?;
        self.dropped.extend(dropped);
        self.buffer.extend(kept);
        let mut out = Vec::new();
        if let Some(w) = self.options.window {
            let w = w.max(1);
            while self.buffer.len() >= w {
                let window: Vec<Example> = self.buffer.drain(..w).collect();
                out.extend(place(&window, self.capacity, self.rule));
            }
        }
        Ok(out)
    }

    pub(super) fn end_epoch(&mut self) -> Vec<Pack> {
        let window = std::mem::take(&mut self.buffer);
        place(&window, self.capacity, self.rule)
    }

    pub(super) fn pending(&self) -> usize {
        self.buffer.len()
    }
}

/// Packs `items` (all known to fit an empty bin) into bins, in bin-creation order.
///
/// ```text
/// fits(bin, x)  ⇔  load_b(bin) + x_b ≤ C on every branch b
/// FirstFit:            the first bin that fits, else a new bin
/// BestFit:             among bins that fit, the one whose fullest branch is fullest after
///                      placing x (ties: the earlier bin), else a new bin
/// FirstFitDecreasing:  FirstFit over items stably sorted by (max branch, total) descending
/// ```
pub(super) fn place(items: &[Example], capacity: u32, rule: Rule) -> Vec<Pack> {
    let cap = u64::from(capacity);
    let mut order: Vec<usize> = (0..items.len()).collect();
    if rule == Rule::FirstFitDecreasing {
        order.sort_by_key(|&i| {
            let [a, b] = items[i].lens.branches();
            std::cmp::Reverse((a.max(b), a + b))
        });
    }
    let mut bins: Vec<(Pack, [u64; 2])> = Vec::new();
    for i in order {
        let e = items[i];
        let [x0, x1] = e.lens.branches();
        let after = |load: &[u64; 2]| [load[0] + x0, load[1] + x1];
        let fits = |load: &[u64; 2]| after(load).iter().all(|&v| v <= cap);
        let chosen = match rule {
            Rule::FirstFit | Rule::FirstFitDecreasing => bins.iter().position(|(_, l)| fits(l)),
            Rule::BestFit => bins
                .iter()
                .enumerate()
                .filter(|(_, (_, l))| fits(l))
                // max_by_key keeps the last maximum; compare on Reverse(index) to keep the first.
                .max_by_key(|(j, (_, l))| {
                    let [a, b] = after(l);
                    (a.max(b), a + b, std::cmp::Reverse(*j))
                })
                .map(|(j, _)| j),
        };
        match chosen {
            Some(j) => {
                bins[j].0.items.push(e.item());
                bins[j].1 = after(&bins[j].1);
            }
            None => bins.push((Pack::new(vec![e.item()]), [x0, x1])),
        }
    }
    bins.into_iter().map(|(p, _)| p).collect()
}

/// The `Packer` impl shared by the offline bin packers (first fit, best fit, first fit
/// decreasing): each wraps an [`Offline`] and differs only in its rule and name.
macro_rules! offline_packer {
    ($ty:ident, $name:literal) => {
        impl $ty {
            const NAME: &'static str = $name;
        }

        impl Packer for $ty {
            fn name(&self) -> &str {
                Self::NAME
            }

            fn capacity(&self) -> u32 {
                self.0.capacity
            }

            fn push(&mut self, batch: &[Example]) -> Result<Vec<Pack>> {
                self.0.push(batch)
            }

            fn end_epoch(&mut self) -> Result<Vec<Pack>> {
                Ok(self.0.end_epoch())
            }

            fn pending(&self) -> usize {
                self.0.pending()
            }

            fn dropped(&self) -> &[Dropped] {
                &self.0.dropped
            }
        }
    };
}
pub(super) use offline_packer;

#[cfg(test)]
mod tests {
    use super::*;

    fn lens(packs: &[Pack]) -> Vec<Vec<u32>> {
        packs.iter().map(|p| p.seq_lens(0).as_slice().to_vec()).collect()
    }

    fn singles(xs: &[u32]) -> Vec<Example> {
        xs.iter().enumerate().map(|(i, &l)| Example::single(i as u64, l)).collect()
    }

    #[test]
    fn rules_differ_on_a_textbook_instance() {
        // C = 10: FF puts 3 into the first bin with room; BF into the tightest.
        let xs = singles(&[5, 7, 3, 2]);
        assert_eq!(lens(&place(&xs, 10, Rule::FirstFit)), [vec![5, 3, 2], vec![7]]);
        assert_eq!(lens(&place(&xs, 10, Rule::BestFit)), [vec![5, 2], vec![7, 3]]);
        assert_eq!(lens(&place(&xs, 10, Rule::FirstFitDecreasing)), [vec![7, 3], vec![5, 2]]);
    }

    #[test]
    fn pairs_must_fit_on_both_branches() {
        let xs = vec![Example::pair(0, 6, 1), Example::pair(1, 1, 6), Example::pair(2, 4, 4)];
        let packs = place(&xs, 10, Rule::FirstFit);
        assert_eq!(packs.len(), 2);
        assert_eq!(packs[0].load(), [7, 7]);
    }

    /// OPT by dynamic programming over subsets (n ≤ ~12).
    fn opt(lens: &[u32], cap: u32) -> usize {
        let n = lens.len();
        let sum = |m: usize| (0..n).filter(|i| m >> i & 1 == 1).map(|i| lens[i]).sum::<u32>();
        let mut dp = vec![usize::MAX; 1 << n];
        dp[0] = 0;
        for m in 1usize..1 << n {
            let low = m & m.wrapping_neg();
            let mut s = m;
            while s > 0 {
                if s & low != 0 && sum(s) <= cap && dp[m ^ s] != usize::MAX {
                    dp[m] = dp[m].min(dp[m ^ s] + 1);
                }
                s = (s - 1) & m;
            }
        }
        dp[(1 << n) - 1]
    }

    #[test]
    fn rules_meet_the_textbook_bounds_on_every_small_instance() {
        // Every sequence of 1..=5 lengths in 1..=7 at C = 7 (orders matter for FF and BF).
        const C: u32 = 7;
        for n in 1..=5u32 {
            for code in 0..C.pow(n) {
                let lens: Vec<u32> = (0..n).map(|k| code / C.pow(k) % C + 1).collect();
                let xs = singles(&lens);
                let best = opt(&lens, C);
                for rule in [Rule::FirstFit, Rule::BestFit, Rule::FirstFitDecreasing] {
                    let packs = place(&xs, C, rule);
                    let mut ids: Vec<u64> = packs.iter().flat_map(Pack::ids).collect();
                    ids.sort();
                    assert_eq!(ids, (0..u64::from(n)).collect::<Vec<_>>(), "{rule:?} {lens:?}");
                    let loads: Vec<u64> = packs.iter().map(|p| p.load()[0]).collect();
                    assert!(loads.iter().all(|&l| l <= u64::from(C)), "{rule:?} {lens:?}");
                    for i in 0..loads.len() {
                        for j in i + 1..loads.len() {
                            assert!(loads[i] + loads[j] > u64::from(C), "{rule:?} {lens:?}");
                        }
                    }
                    let k = packs.len();
                    match rule {
                        Rule::FirstFitDecreasing => assert!(9 * k <= 11 * best + 6, "{lens:?}"),
                        _ => assert!(10 * k <= 17 * best, "{rule:?} {lens:?}"),
                    }
                }
            }
        }
    }

    #[test]
    fn window_packs_each_chunk_on_its_own() {
        let opts = BinPackingOptions { window: Some(2), ..Default::default() };
        let mut o = Offline::new("first_fit", Rule::FirstFit, 10, opts).unwrap();
        let out = o.push(&singles(&[3, 3, 3])).unwrap();
        assert_eq!(lens(&out), [vec![3, 3]]);
        assert_eq!(o.pending(), 1);
        assert_eq!(lens(&o.end_epoch()), [vec![3]]);
    }
}
