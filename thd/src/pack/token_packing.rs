use serde::{Deserialize, Serialize};

use super::{DropReason, Dropped, Example, Lens, OverLength, Pack, PackItem, Packer, admit};
use crate::{Error, Result};

/// Options of [`TokenPacking`], named after bionemo's `TokenPackingDataset` fields.
///
/// # Example
/// ```
/// use thd::pack::TokenPackingOptions;
/// let o = TokenPackingOptions { split_samples: true, ..Default::default() };
/// assert!(!o.drop_last);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct TokenPackingOptions {
    /// `pad_sequences_to_be_divisible_by`: each sample counts as `⌈len/d⌉·d` tokens (TE CP
    /// padding, `d = 2·cp`). `None` counts real lengths.
    pub divisible_by: Option<u32>,
    /// Split the sample that crosses the budget: the head fills the pack, the rest starts the
    /// next one.
    pub split_samples: bool,
    /// Drop the incomplete last pack of an epoch, recording each piece in
    /// [`Packer::dropped`]. Upstream's default is `true`; here it is `false` so that nothing is
    /// dropped unless asked for.
    pub drop_last: bool,
    /// Over-length policy (upstream raises `ValueError`, which is [`OverLength::Error`]).
    pub over_length: OverLength,
}

/// bionemo `TokenPackingDataset`: fill packs in stream order up to `max_tokens_per_batch`.
///
/// ```text
/// pl = ⌈len/d⌉·d (or len);  pl > max ⇒ OverLength policy
/// current += pl
/// current = max  ⇒ emit samples + [sample]; reset
/// current > max  ⇒ no split: emit samples; start [sample], current = pl
///                  split:    avail = max − (current − pl), rounded down to a multiple of d
///                            avail ≤ 0 ⇒ as "no split"
///                            else emit samples + [sample[..avail]];
///                                 start [sample[avail..]], current = padded(len − avail)
/// otherwise      ⇒ samples += [sample]
/// end_epoch      ⇒ emit samples, or drop them (reported) under drop_last
/// ```
///
/// Packs single sequences only. A split example appears as two [`PackItem`]s with the same id
/// and complementary `offset`/`len`.
///
/// # Example
/// ```
/// use thd::pack::{Example, Packer, TokenPacking, TokenPackingOptions};
/// // Upstream test: split 40/50/30 with max 100 → 100, then 20.
/// let opts = TokenPackingOptions { split_samples: true, ..Default::default() };
/// let mut p = TokenPacking::new(100, opts)?;
/// let mut packs = p.push(&[Example::single(0, 40), Example::single(1, 50), Example::single(2, 30)])?;
/// packs.extend(p.end_epoch()?);
/// let totals: Vec<u64> = packs.iter().map(|p| p.real()[0]).collect();
/// assert_eq!(totals, vec![100, 20]);
/// assert_eq!((packs[1].items[0].id, packs[1].items[0].offset), (2, 10));
/// # Ok::<(), thd::Error>(())
/// ```
#[derive(Debug, Clone)]
pub struct TokenPacking {
    max_tokens: u32,
    options: TokenPackingOptions,
    samples: Vec<PackItem>,
    current: u64,
    dropped: Vec<Dropped>,
}

impl TokenPacking {
    /// A packer with `max_tokens_per_batch = max_tokens`.
    ///
    /// # Errors
    /// [`Error::ZeroCapacity`] if `max_tokens == 0`; [`Error::ZeroCount`] if
    /// `divisible_by == Some(0)`.
    ///
    /// # Example
    /// ```
    /// # use thd::pack::{TokenPacking, TokenPackingOptions};
    /// let bad = TokenPackingOptions { divisible_by: Some(0), ..Default::default() };
    /// assert!(TokenPacking::new(16, bad).is_err());
    /// ```
    pub fn new(max_tokens: u32, options: TokenPackingOptions) -> Result<Self> {
        super::check_capacity("token_packing", max_tokens)?;
        if options.divisible_by == Some(0) {
            return Err(Error::ZeroCount { quantity: "pad_sequences_to_be_divisible_by" });
        }
        Ok(Self { max_tokens, options, samples: Vec::new(), current: 0, dropped: Vec::new() })
    }

    /// True when `max_tokens` is not a multiple of `divisible_by` (upstream warns then: the
    /// packs can never be exactly full of padded samples).
    ///
    /// # Example
    /// ```
    /// # use thd::pack::{TokenPacking, TokenPackingOptions};
    /// let d4 = TokenPackingOptions { divisible_by: Some(4), ..Default::default() };
    /// assert!(TokenPacking::new(10, d4)?.capacity_not_divisible());
    /// assert!(!TokenPacking::new(12, d4)?.capacity_not_divisible());
    /// # Ok::<(), thd::Error>(())
    /// ```
    pub fn capacity_not_divisible(&self) -> bool {
        self.options.divisible_by.is_some_and(|d| !self.max_tokens.is_multiple_of(d))
    }

    fn padded(&self, len: u32) -> u32 {
        match self.options.divisible_by {
            Some(d) => len.div_ceil(d).saturating_mul(d),
            None => len,
        }
    }

    fn piece(&self, id: u64, offset: u32, len: u32) -> PackItem {
        PackItem {
            id,
            offset,
            lens: Lens::Single { len },
            padded: Lens::Single { len: self.padded(len) },
        }
    }

    fn take(&mut self) -> Pack {
        self.current = 0;
        Pack::new(std::mem::take(&mut self.samples))
    }

    fn step(&mut self, id: u64, len: u32, out: &mut Vec<Pack>) {
        let max = u64::from(self.max_tokens);
        let item = self.piece(id, 0, len);
        let pl = u64::from(self.padded(len));
        self.current += pl;
        if self.current == max {
            self.samples.push(item);
            out.push(self.take());
        } else if self.current > max {
            let mut avail = max - (self.current - pl);
            if let Some(d) = self.options.divisible_by {
                avail = avail / u64::from(d) * u64::from(d);
            }
            if self.options.split_samples && avail > 0 {
                // avail < len here: avail is a multiple of d below pl = ⌈len/d⌉·d.
                let head = avail as u32;
                self.samples.push(self.piece(id, 0, head));
                out.push(self.take());
                let rest = self.piece(id, head, len - head);
                self.current = u64::from(self.padded(len - head));
                self.samples.push(rest);
            } else {
                if !self.samples.is_empty() {
                    out.push(self.take());
                }
                self.samples.push(item);
                self.current = pl;
            }
        } else {
            self.samples.push(item);
        }
    }
}

impl Packer for TokenPacking {
    fn name(&self) -> &str {
        "token_packing"
    }

    fn capacity(&self) -> u32 {
        self.max_tokens
    }

    fn push(&mut self, batch: &[Example]) -> Result<Vec<Pack>> {
        // Validate the whole batch first so that an error consumes nothing.
        let mut admitted = Vec::with_capacity(batch.len());
        for e in batch {
            let Lens::Single { len } = e.lens else {
                return Err(Error::PairNotSupported { packer: "token_packing", id: e.id });
            };
            let padded = Lens::Single { len: self.padded(len) };
            admitted.push(admit(e.id, padded, self.max_tokens, self.options.over_length)?);
        }
        let mut out = Vec::new();
        for (e, ok) in batch.iter().zip(admitted) {
            let Lens::Single { len } = e.lens else { unreachable!("checked above") };
            if ok {
                self.step(e.id, len, &mut out);
            } else {
                self.dropped.push(Dropped { item: e.item(), reason: DropReason::OverLength });
            }
        }
        Ok(out)
    }

    fn end_epoch(&mut self) -> Result<Vec<Pack>> {
        if self.samples.is_empty() {
            return Ok(Vec::new());
        }
        let pack = self.take();
        if self.options.drop_last {
            let gone =
                pack.items.into_iter().map(|item| Dropped { item, reason: DropReason::DropLast });
            self.dropped.extend(gone);
            return Ok(Vec::new());
        }
        Ok(vec![pack])
    }

    fn pending(&self) -> usize {
        self.samples.len()
    }

    fn dropped(&self) -> &[Dropped] {
        &self.dropped
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn token_packing_drop_last_reports_every_piece() {
        let opts = TokenPackingOptions { drop_last: true, ..Default::default() };
        let mut p = TokenPacking::new(100, opts).unwrap();
        let packs =
            p.push(&[Example::single(0, 40), Example::single(1, 40), Example::single(2, 30)]);
        assert_eq!(packs.unwrap().len(), 1);
        assert!(p.end_epoch().unwrap().is_empty());
        assert_eq!(p.dropped().len(), 1);
        assert_eq!(p.dropped()[0].reason, DropReason::DropLast);
        assert_eq!(p.dropped()[0].item.id, 2);
    }

    #[test]
    fn token_packing_rejects_pairs_before_consuming() {
        let mut p = TokenPacking::new(100, TokenPackingOptions::default()).unwrap();
        let err = p.push(&[Example::single(0, 10), Example::pair(1, 5, 5)]).unwrap_err();
        assert_eq!(err, Error::PairNotSupported { packer: "token_packing", id: 1 });
        assert_eq!(p.pending(), 0);
    }
}
