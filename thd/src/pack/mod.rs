//! Packers: which examples share a pack.
//!
//! A packer is fed the batches a data loader yields ([`Packer::push`]), may carry examples from
//! one batch to the next, and gives everything back at the end of an epoch
//! ([`Packer::end_epoch`]) or of training ([`Packer::finish`]). Every strategy here, and any
//! external one driven over a subprocess, implements the same object-safe trait, so one fuzz
//! harness checks them all (the PACKER invariant):
//!
//! ```text
//! multiset(ids pushed) = multiset(ids emitted) ⊎ multiset(ids in dropped())   (after finish)
//! every pack: Σ padded ≤ capacity, on each branch
//! same input, same options (and seed) ⇒ same packs
//! ```
//!
//! | strategy | upstream | emits |
//! |---|---|---|
//! | [`SequentialBudget`] | open-instruct `HFDataLoader` overflow carry (#1472) + `count_features_within_token_budget` (#1466) | one pack per pushed batch (the longest prefix that fits), the rest carried; drained at epoch end |
//! | [`TokenPacking`] | bionemo `TokenPackingDataset` | a pack whenever the running total reaches or would pass the budget; optional splitting and divisibility padding |
//! | [`FirstFit`], [`BestFit`], [`FirstFitDecreasing`] | Megatron-Bridge offline packing (`first_fit_decreasing`, `first_fit_shuffle`) | all bins of a window (default: the epoch) |
//!
//! Over-length examples follow an explicit [`OverLength`] policy: an error naming the example
//! id and length, or a drop recorded in [`Packer::dropped`]. Nothing is lost silently.
//!
//! # Example
//! ```
//! use thd::pack::{Example, Packer, SequentialBudget, SequentialOptions};
//! let mut packer = SequentialBudget::new(300, SequentialOptions::default())?;
//! let batch: Vec<Example> = (0..4).map(|i| Example::pair(i, 100, 100)).collect();
//! let packs = packer.push(&batch)?;
//! assert_eq!(packs[0].ids().collect::<Vec<_>>(), vec![0, 1, 2]); // 3 fit, 1 carried
//! assert_eq!(packer.pending(), 1);
//! let tail = packer.end_epoch()?;
//! assert_eq!(tail[0].ids().collect::<Vec<_>>(), vec![3]);
//! # Ok::<(), thd::Error>(())
//! ```

mod best_fit;
mod bins;
mod budget;
mod epochs;
mod example;
mod first_fit;
mod first_fit_decreasing;
mod sequential;
mod spec;
mod stats;
mod token_packing;

use serde::{Deserialize, Serialize};

pub use best_fit::BestFit;
pub use bins::BinPackingOptions;
pub use budget::count_within_token_budget;
pub use epochs::{EpochPlan, EpochRun, epoch_order, run_epochs};
pub use example::{Example, Lens, Pack, PackItem};
pub use first_fit::FirstFit;
pub use first_fit_decreasing::FirstFitDecreasing;
pub use sequential::{EpochEnd, SequentialBudget, SequentialOptions};
pub use spec::PackerSpec;
pub use stats::PackingStats;
pub use token_packing::{TokenPacking, TokenPackingOptions};

use crate::{Error, Result};

/// A streaming packer: batches of examples in, packs out, state carried between batches.
///
/// Contract (checked by the fuzz harness for every implementation):
/// - `push` and `end_epoch` return packs in emission order; a pack is never empty;
/// - every pack's storage ([`Pack::load`]) is at most [`Packer::capacity`] on each branch;
/// - after `finish`, `pending() == 0` and every pushed example was emitted or reported in
///   `dropped()`: once per push, whole, or as pieces (same id) whose `offset..offset + len`
///   ranges tile `0..len` exactly once;
/// - on `Err`, nothing from the failing call was consumed (the state is as before the call);
/// - the output depends only on the inputs and the options (seeded where there is randomness).
///
/// # Example
/// ```
/// use thd::pack::{Example, FirstFit, Packer, BinPackingOptions};
/// fn drain(p: &mut dyn Packer, xs: &[Example]) -> thd::Result<usize> {
///     let mut packs = p.push(xs)?;
///     packs.extend(p.finish()?);
///     Ok(packs.len())
/// }
/// let mut ff = FirstFit::new(10, BinPackingOptions::default())?;
/// let xs = [Example::single(0, 6), Example::single(1, 6), Example::single(2, 4)];
/// assert_eq!(drain(&mut ff, &xs)?, 2);
/// # Ok::<(), thd::Error>(())
/// ```
pub trait Packer {
    /// A short, stable name for reports (`sequential_budget`, `first_fit`, ...).
    ///
    /// # Example
    /// ```
    /// use thd::pack::{BestFit, BinPackingOptions, Packer};
    /// assert_eq!(BestFit::new(8, BinPackingOptions::default())?.name(), "best_fit");
    /// # Ok::<(), thd::Error>(())
    /// ```
    fn name(&self) -> &str;

    /// Tokens a pack holds on each branch.
    ///
    /// # Example
    /// ```
    /// use thd::pack::{Packer, TokenPacking, TokenPackingOptions};
    /// assert_eq!(TokenPacking::new(4096, TokenPackingOptions::default())?.capacity(), 4096);
    /// # Ok::<(), thd::Error>(())
    /// ```
    fn capacity(&self) -> u32;

    /// Feeds one loader batch; returns the packs it completes (possibly none).
    ///
    /// # Errors
    /// [`Error::ExampleTooLong`] under [`OverLength::Error`]; strategy-specific errors.
    ///
    /// # Example
    /// ```
    /// use thd::pack::{Example, Packer, TokenPacking, TokenPackingOptions};
    /// let mut p = TokenPacking::new(10, TokenPackingOptions::default())?;
    /// let packs = p.push(&[Example::single(0, 4), Example::single(1, 6), Example::single(2, 3)])?;
    /// assert_eq!(packs.len(), 1); // 4 + 6 fill a pack; 3 is carried
    /// assert_eq!(p.pending(), 1);
    /// # Ok::<(), thd::Error>(())
    /// ```
    fn push(&mut self, batch: &[Example]) -> Result<Vec<Pack>>;

    /// Ends an epoch; returns the packs that the epoch boundary releases (all carried state for
    /// most strategies).
    ///
    /// # Errors
    /// Strategy-specific.
    ///
    /// # Example
    /// ```
    /// use thd::pack::{BinPackingOptions, Example, FirstFit, Packer};
    /// let mut p = FirstFit::new(10, BinPackingOptions::default())?;
    /// assert!(p.push(&[Example::single(0, 4), Example::single(1, 7)])?.is_empty()); // offline
    /// assert_eq!(p.end_epoch()?.len(), 2);
    /// # Ok::<(), thd::Error>(())
    /// ```
    fn end_epoch(&mut self) -> Result<Vec<Pack>>;

    /// Ends training: returns every pack still held, so that nothing stays pending.
    ///
    /// # Errors
    /// Strategy-specific.
    ///
    /// # Example
    /// ```
    /// use thd::pack::{EpochEnd, Example, Packer, SequentialBudget, SequentialOptions};
    /// let opts = SequentialOptions { epoch_end: EpochEnd::Carry, ..Default::default() };
    /// let mut p = SequentialBudget::new(10, opts)?;
    /// p.push(&[Example::single(0, 6), Example::single(1, 6)])?;
    /// assert!(p.end_epoch()?.is_empty()); // carried across the epoch boundary
    /// assert_eq!(p.finish()?.len(), 1);
    /// assert_eq!(p.pending(), 0);
    /// # Ok::<(), thd::Error>(())
    /// ```
    fn finish(&mut self) -> Result<Vec<Pack>> {
        self.end_epoch()
    }

    /// Examples (or pieces) currently carried, not yet emitted.
    ///
    /// # Example
    /// ```
    /// use thd::pack::{BinPackingOptions, Example, FirstFitDecreasing, Packer};
    /// let mut p = FirstFitDecreasing::new(10, BinPackingOptions::default())?;
    /// p.push(&[Example::single(0, 4)])?;
    /// assert_eq!(p.pending(), 1);
    /// # Ok::<(), thd::Error>(())
    /// ```
    fn pending(&self) -> usize;

    /// Everything dropped so far, with the reason.
    ///
    /// # Example
    /// ```
    /// use thd::pack::{BinPackingOptions, DropReason, Example, FirstFit, OverLength, Packer};
    /// let opts = BinPackingOptions { over_length: OverLength::Drop, ..Default::default() };
    /// let mut p = FirstFit::new(10, opts)?;
    /// p.push(&[Example::single(7, 11)])?;
    /// assert_eq!((p.dropped()[0].item.id, p.dropped()[0].reason), (7, DropReason::OverLength));
    /// # Ok::<(), thd::Error>(())
    /// ```
    fn dropped(&self) -> &[Dropped];
}

/// What to do with an example that does not fit an empty pack.
///
/// Upstream behaviours differ and none is silent-safe: bionemo `TokenPackingDataset` raises,
/// open-instruct `count_features_within_token_budget` keeps an over-long first example anyway
/// (an over-capacity pack that breaks static shapes). Here the choice is explicit.
///
/// # Example
/// ```
/// use thd::pack::{Example, OverLength, Packer, SequentialBudget, SequentialOptions};
/// let opts = SequentialOptions { over_length: OverLength::Drop, ..Default::default() };
/// let mut p = SequentialBudget::new(300, opts)?;
/// let packs = p.push(&[Example::single(0, 400), Example::single(1, 10)])?;
/// assert_eq!(packs.len(), 1);
/// assert_eq!(p.dropped()[0].item.id, 0);
///
/// let mut strict = SequentialBudget::new(300, SequentialOptions::default())?;
/// let err = strict.push(&[Example::single(0, 400)]).unwrap_err();
/// assert!(err.to_string().starts_with("example 0 needs 400 tokens"));
/// # Ok::<(), thd::Error>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OverLength {
    /// Fail with [`Error::ExampleTooLong`] naming the example id, branch and length.
    #[default]
    Error,
    /// Drop the example and record it in [`Packer::dropped`].
    Drop,
}

/// Why an example (or piece) left the stream without being packed.
///
/// # Example
/// ```
/// use thd::pack::DropReason;
/// assert_ne!(DropReason::OverLength, DropReason::DropLast);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DropReason {
    /// Longer than the capacity, under [`OverLength::Drop`].
    OverLength,
    /// In the incomplete last pack of an epoch, under bionemo's `drop_last=True`.
    DropLast,
}

/// A reported drop.
///
/// # Example
/// ```
/// use thd::pack::{DropReason, Dropped, Example};
/// let d = Dropped { item: Example::single(4, 900).item(), reason: DropReason::OverLength };
/// assert_eq!(d.item.id, 4);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Dropped {
    /// What was dropped (a whole example, or the piece left of a split one).
    pub item: PackItem,
    /// Why.
    pub reason: DropReason,
}

/// Pushes `examples` as one batch, then [`Packer::finish`]es: the offline use of any packer.
///
/// # Errors
/// Whatever the packer returns.
///
/// # Example
/// ```
/// use thd::pack::{BinPackingOptions, Example, FirstFitDecreasing, pack_all};
/// let mut ffd = FirstFitDecreasing::new(8, BinPackingOptions::default())?;
/// let packs = pack_all(&mut ffd, &[Example::single(0, 5), Example::single(1, 3), Example::single(2, 4)])?;
/// assert_eq!(packs.len(), 2);
/// # Ok::<(), thd::Error>(())
/// ```
pub fn pack_all(packer: &mut dyn Packer, examples: &[Example]) -> Result<Vec<Pack>> {
    let mut packs = packer.push(examples)?;
    packs.extend(packer.finish()?);
    Ok(packs)
}

/// Checks that `padded` fits an empty pack of `capacity`; `Ok(false)` means drop it.
fn admit(id: u64, padded: Lens, capacity: u32, policy: OverLength) -> Result<bool> {
    for (b, &len) in padded.branches().iter().enumerate() {
        if len > u64::from(capacity) {
            return match policy {
                OverLength::Error => {
                    Err(Error::ExampleTooLong { id, len, branch: padded.branch_name(b), capacity })
                }
                OverLength::Drop => Ok(false),
            };
        }
    }
    Ok(true)
}

/// Splits `batch` into admitted items and drops, or fails before anything is consumed.
fn admit_all(
    batch: &[Example],
    capacity: u32,
    policy: OverLength,
) -> Result<(Vec<Example>, Vec<Dropped>)> {
    let mut kept = Vec::with_capacity(batch.len());
    let mut dropped = Vec::new();
    for &e in batch {
        if admit(e.id, e.lens, capacity, policy)? {
            kept.push(e);
        } else {
            dropped.push(Dropped { item: e.item(), reason: DropReason::OverLength });
        }
    }
    Ok((kept, dropped))
}

fn check_capacity(packer: &'static str, capacity: u32) -> Result<()> {
    if capacity == 0 { Err(Error::ZeroCapacity { packer }) } else { Ok(()) }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn admit_names_the_branch_that_overflows() {
        let err = admit(5, Lens::Pair { chosen: 10, rejected: 400 }, 300, OverLength::Error);
        assert_eq!(
            err.unwrap_err(),
            Error::ExampleTooLong { id: 5, len: 400, branch: "rejected", capacity: 300 }
        );
        assert!(!admit(5, Lens::Single { len: 301 }, 300, OverLength::Drop).unwrap());
        assert!(admit(5, Lens::Single { len: 300 }, 300, OverLength::Error).unwrap());
    }

    #[test]
    fn admit_all_consumes_nothing_on_error() {
        let batch = [Example::single(0, 1), Example::single(1, 999)];
        assert!(admit_all(&batch, 10, OverLength::Error).is_err());
        let (kept, dropped) = admit_all(&batch, 10, OverLength::Drop).unwrap();
        assert_eq!(kept, vec![Example::single(0, 1)]);
        assert_eq!(dropped[0].reason, DropReason::OverLength);
    }
}
