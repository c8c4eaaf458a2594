use super::bins::{Offline, Rule, offline_packer};
use super::{BinPackingOptions, Dropped, Example, Pack, Packer};
use crate::Result;

/// First fit decreasing: sort the window by length, longest first (stable), then first fit.
///
/// Megatron-Bridge's `first_fit_decreasing` packing util. FFD uses at most `11/9·OPT + 6/9`
/// packs (Dósa 2007); a unit test checks this exhaustively on small instances.
/// For DPO pairs the sort key is the longer branch, then the total.
///
/// Every window (default: the epoch) is packed as one instance when it is complete, so packs
/// come out of [`Packer::push`] only with [`BinPackingOptions::window`] set, and otherwise all
/// at [`Packer::end_epoch`]. Any two packs of one window together exceed the capacity.
///
/// # Example
/// ```
/// use thd::pack::{BinPackingOptions, Example, FirstFitDecreasing, pack_all};
/// let mut p = FirstFitDecreasing::new(10, BinPackingOptions::default())?;
/// let xs: Vec<Example> = [5, 7, 3, 2].iter().enumerate().map(|(i, &l)| Example::single(i as u64, l)).collect();
/// let packs = pack_all(&mut p, &xs)?;
/// let lens: Vec<Vec<u32>> = packs.iter().map(|p| p.seq_lens(0).as_slice().to_vec()).collect();
/// assert_eq!(lens, [vec![7, 3], vec![5, 2]]);
/// # Ok::<(), thd::Error>(())
/// ```
#[derive(Debug, Clone)]
pub struct FirstFitDecreasing(Offline);

impl FirstFitDecreasing {
    /// A packer with `capacity` tokens per pack (per branch for DPO pairs).
    ///
    /// # Errors
    /// [`Error::ZeroCapacity`](crate::Error::ZeroCapacity) if `capacity == 0`.
    ///
    /// # Example
    /// ```
    /// # use thd::pack::{BinPackingOptions, FirstFitDecreasing};
    /// assert!(FirstFitDecreasing::new(0, BinPackingOptions::default()).is_err());
    /// ```
    pub fn new(capacity: u32, options: BinPackingOptions) -> Result<Self> {
        Ok(Self(Offline::new(Self::NAME, Rule::FirstFitDecreasing, capacity, options)?))
    }
}

offline_packer!(FirstFitDecreasing, "first_fit_decreasing");
