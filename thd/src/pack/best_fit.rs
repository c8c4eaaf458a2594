use super::bins::{Offline, Rule, offline_packer};
use super::{BinPackingOptions, Dropped, Example, Pack, Packer};
use crate::Result;

/// Best fit: each example goes into the open pack it fills most tightly, else into a new pack.
///
/// For DPO pairs "tightest" is judged on the fuller branch after placement, then on the total.
///
/// Every window (default: the epoch) is packed as one instance when it is complete, so packs
/// come out of [`Packer::push`] only with [`BinPackingOptions::window`] set, and otherwise all
/// at [`Packer::end_epoch`]. Any two packs of one window together exceed the capacity.
///
/// # Example
/// ```
/// use thd::pack::{BinPackingOptions, Example, BestFit, pack_all};
/// let mut p = BestFit::new(10, BinPackingOptions::default())?;
/// let xs: Vec<Example> = [5, 7, 3, 2].iter().enumerate().map(|(i, &l)| Example::single(i as u64, l)).collect();
/// let packs = pack_all(&mut p, &xs)?;
/// let lens: Vec<Vec<u32>> = packs.iter().map(|p| p.seq_lens(0).as_slice().to_vec()).collect();
/// assert_eq!(lens, [vec![5, 2], vec![7, 3]]);
/// # Ok::<(), thd::Error>(())
/// ```
#[derive(Debug, Clone)]
pub struct BestFit(Offline);

impl BestFit {
    /// A packer with `capacity` tokens per pack (per branch for DPO pairs).
    ///
    /// # Errors
    /// [`Error::ZeroCapacity`](crate::Error::ZeroCapacity) if `capacity == 0`.
    ///
    /// # Example
    /// ```
    /// # use thd::pack::{BinPackingOptions, BestFit};
    /// assert!(BestFit::new(0, BinPackingOptions::default()).is_err());
    /// ```
    pub fn new(capacity: u32, options: BinPackingOptions) -> Result<Self> {
        Ok(Self(Offline::new(Self::NAME, Rule::BestFit, capacity, options)?))
    }
}

offline_packer!(BestFit, "best_fit");
