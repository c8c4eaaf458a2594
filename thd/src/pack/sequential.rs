use std::collections::VecDeque;

use serde::{Deserialize, Serialize};

use super::{
    Dropped, Example, OverLength, Pack, Packer, admit_all, check_capacity,
    count_within_token_budget,
};
use crate::Result;

/// What happens to the carried examples at an epoch boundary.
///
/// # Example
/// ```
/// use thd::pack::EpochEnd;
/// assert_eq!(EpochEnd::default(), EpochEnd::Drain);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum EpochEnd {
    /// Emit packs from the carry until it is empty (open-instruct `_iter_batches` at
    /// `ee0c460`: the `while overflow` loop after the epoch).
    #[default]
    Drain,
    /// Keep the carry across the reshuffle; it goes first into the next epoch's first batch and
    /// is drained by [`Packer::finish`] (the behaviour #1472's message describes, which upstream
    /// has only when the epoch generator is abandoned).
    Carry,
}

/// Options of [`SequentialBudget`].
///
/// # Example
/// ```
/// use thd::pack::{EpochEnd, OverLength, SequentialOptions};
/// let o = SequentialOptions { epoch_end: EpochEnd::Carry, ..Default::default() };
/// assert_eq!(o.over_length, OverLength::Error);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct SequentialOptions {
    /// Over-length policy.
    pub over_length: OverLength,
    /// Epoch-boundary behaviour.
    pub epoch_end: EpochEnd,
}

/// Sequential token budget with overflow carry (open-instruct #1472 + #1466, fixed).
///
/// Each pushed batch is appended to the carry; the longest prefix that fits the budget on every
/// branch ([`count_within_token_budget`]) becomes one pack and the rest is carried, in order,
/// to the next batch. At the end of an epoch the carry is drained (or kept, see [`EpochEnd`]).
/// Works for single sequences and for DPO pairs (the pair budget).
///
/// ```text
/// push(batch):  all = carry ++ admitted(batch);  k = count_within_token_budget(all, C)
///               emit all[..k];  carry = all[k..]                    (nothing if all is empty)
/// end_epoch:    Drain: repeat the emit step until carry is empty;  Carry: emit nothing
/// ```
///
/// Fixed relative to upstream: an example longer than `C` follows [`OverLength`] instead of
/// being emitted alone in an over-capacity pack.
///
/// # Example
/// ```
/// use thd::pack::{Example, Packer, SequentialBudget, SequentialOptions};
/// // open-instruct trace: 8 × (100,100), per_rank_bs 4, max_seq_length 300.
/// let mut p = SequentialBudget::new(300, SequentialOptions::default())?;
/// let xs: Vec<Example> = (0..8).map(|i| Example::pair(i, 100, 100)).collect();
/// let mut packs = p.push(&xs[..4])?;
/// packs.extend(p.push(&xs[4..])?);
/// packs.extend(p.end_epoch()?);
/// let ids: Vec<Vec<u64>> = packs.iter().map(|p| p.ids().collect()).collect();
/// assert_eq!(ids, vec![vec![0, 1, 2], vec![3, 4, 5], vec![6, 7]]);
/// # Ok::<(), thd::Error>(())
/// ```
#[derive(Debug, Clone)]
pub struct SequentialBudget {
    capacity: u32,
    options: SequentialOptions,
    carry: VecDeque<Example>,
    dropped: Vec<Dropped>,
}

impl SequentialBudget {
    /// A packer with budget `capacity` tokens per branch.
    ///
    /// # Errors
    /// [`Error::ZeroCapacity`](crate::Error::ZeroCapacity) if `capacity == 0`.
    ///
    /// # Example
    /// ```
    /// # use thd::pack::{SequentialBudget, SequentialOptions};
    /// assert!(SequentialBudget::new(0, SequentialOptions::default()).is_err());
    /// ```
    pub fn new(capacity: u32, options: SequentialOptions) -> Result<Self> {
        check_capacity("sequential_budget", capacity)?;
        Ok(Self { capacity, options, carry: VecDeque::new(), dropped: Vec::new() })
    }

    /// Emits the longest fitting prefix of the carry, if any.
    fn emit_one(&mut self) -> Option<Pack> {
        if self.carry.is_empty() {
            return None;
        }
        let all = self.carry.make_contiguous();
        let k = count_within_token_budget(all, Some(self.capacity));
        Some(Pack::new(self.carry.drain(..k).map(Example::item).collect()))
    }

    fn drain(&mut self) -> Vec<Pack> {
        std::iter::from_fn(|| self.emit_one()).collect()
    }
}

impl Packer for SequentialBudget {
    fn name(&self) -> &str {
        "sequential_budget"
    }

    fn capacity(&self) -> u32 {
        self.capacity
    }

    fn push(&mut self, batch: &[Example]) -> Result<Vec<Pack>> {
        let (kept, dropped) = admit_all(batch, self.capacity, self.options.over_length)?;
        self.dropped.extend(dropped);
        self.carry.extend(kept);
        Ok(self.emit_one().into_iter().collect())
    }

    fn end_epoch(&mut self) -> Result<Vec<Pack>> {
        Ok(match self.options.epoch_end {
            EpochEnd::Drain => self.drain(),
            EpochEnd::Carry => Vec::new(),
        })
    }

    fn finish(&mut self) -> Result<Vec<Pack>> {
        Ok(self.drain())
    }

    fn pending(&self) -> usize {
        self.carry.len()
    }

    fn dropped(&self) -> &[Dropped] {
        &self.dropped
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ids(packs: &[Pack]) -> Vec<Vec<u64>> {
        packs.iter().map(|p| p.ids().collect()).collect()
    }

    #[test]
    fn sequential_carry_survives_the_epoch_boundary_when_asked() {
        let opts = SequentialOptions { epoch_end: EpochEnd::Carry, ..Default::default() };
        let mut p = SequentialBudget::new(10, opts).unwrap();
        assert_eq!(ids(&p.push(&[Example::single(0, 6), Example::single(1, 6)]).unwrap()), [[0]]);
        assert!(p.end_epoch().unwrap().is_empty());
        assert_eq!(p.pending(), 1);
        // Next epoch: the carry goes first.
        assert_eq!(ids(&p.push(&[Example::single(2, 4)]).unwrap()), [[1, 2]]);
        assert!(p.finish().unwrap().is_empty());
    }

    #[test]
    fn sequential_push_of_nothing_still_emits_from_the_carry() {
        let mut p = SequentialBudget::new(10, SequentialOptions::default()).unwrap();
        p.push(&[Example::single(0, 6), Example::single(1, 6), Example::single(2, 6)]).unwrap();
        assert_eq!(ids(&p.push(&[]).unwrap()), [[1]]);
        assert_eq!(ids(&p.end_epoch().unwrap()), [[2]]);
        assert!(p.push(&[]).unwrap().is_empty());
    }

    #[test]
    fn sequential_error_leaves_the_carry_untouched() {
        let mut p = SequentialBudget::new(10, SequentialOptions::default()).unwrap();
        p.push(&[Example::single(0, 6), Example::single(1, 6)]).unwrap();
        assert!(p.push(&[Example::single(2, 3), Example::single(3, 11)]).is_err());
        assert_eq!(p.pending(), 1);
    }
}
