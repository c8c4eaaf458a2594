use serde::{Deserialize, Serialize};

use crate::SeqLens;

/// Token counts of an example, or of the part of it that a pack holds.
///
/// A single sequence (SFT, pretraining) has one branch. A DPO pair has two, `chosen` and
/// `rejected`, which are collated into two separate streams of the same capacity, so a pack
/// fits only if *each* branch fits (open-instruct `count_features_within_token_budget`).
///
/// # Example
/// ```
/// use thd::pack::Lens;
/// assert_eq!(Lens::Single { len: 7 }.branches(), [7, 0]);
/// assert_eq!(Lens::Pair { chosen: 7, rejected: 3 }.branches(), [7, 3]);
/// assert_eq!(Lens::Pair { chosen: 7, rejected: 3 }.total(), 10);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(untagged)]
pub enum Lens {
    /// One sequence of `len` tokens.
    Single {
        /// Tokens.
        len: u32,
    },
    /// A DPO pair: the chosen and the rejected completion, each with its prompt.
    Pair {
        /// Tokens of the chosen sequence.
        chosen: u32,
        /// Tokens of the rejected sequence.
        rejected: u32,
    },
}

impl Lens {
    /// Tokens on each branch: `[len, 0]` for a single sequence, `[chosen, rejected]` for a pair.
    ///
    /// # Example
    /// ```
    /// # use thd::pack::Lens;
    /// assert_eq!(Lens::Single { len: 4 }.branches(), [4, 0]);
    /// ```
    pub fn branches(self) -> [u64; 2] {
        match self {
            Lens::Single { len } => [u64::from(len), 0],
            Lens::Pair { chosen, rejected } => [u64::from(chosen), u64::from(rejected)],
        }
    }

    /// Tokens over all branches.
    ///
    /// # Example
    /// ```
    /// # use thd::pack::Lens;
    /// assert_eq!(Lens::Pair { chosen: 2, rejected: 5 }.total(), 7);
    /// ```
    pub fn total(self) -> u64 {
        let [a, b] = self.branches();
        a + b
    }

    /// True for a DPO pair.
    ///
    /// # Example
    /// ```
    /// # use thd::pack::Lens;
    /// assert!(!Lens::Single { len: 4 }.is_pair());
    /// ```
    pub fn is_pair(self) -> bool {
        matches!(self, Lens::Pair { .. })
    }

    /// The name of branch `b` (0 or 1) for messages: `single`, `chosen` or `rejected`.
    ///
    /// # Example
    /// ```
    /// # use thd::pack::Lens;
    /// assert_eq!(Lens::Pair { chosen: 1, rejected: 1 }.branch_name(1), "rejected");
    /// ```
    pub fn branch_name(self, b: usize) -> &'static str {
        match (self, b) {
            (Lens::Single { .. }, _) => "single",
            (Lens::Pair { .. }, 0) => "chosen",
            (Lens::Pair { .. }, _) => "rejected",
        }
    }
}

/// One training example as a packer sees it: an id and its token counts (no tokens: those are
/// a collator's [`crate::collate::Document`]s).
///
/// Ids need not be unique (an example appears once per epoch), but a packer must give back
/// exactly the ids it was given, as a multiset, unless it reports a drop.
///
/// # Example
/// ```
/// use thd::pack::{Example, Lens};
/// let e = Example::single(3, 100);
/// assert_eq!(e.lens, Lens::Single { len: 100 });
/// let p = Example::pair(4, 100, 50);
/// assert_eq!(p.lens.branches(), [100, 50]);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Example {
    /// The example's id (its index in the dataset).
    pub id: u64,
    /// Its token counts.
    #[serde(flatten)]
    pub lens: Lens,
}

impl Example {
    /// A single sequence of `len` tokens.
    ///
    /// # Example
    /// ```
    /// # use thd::pack::Example;
    /// assert_eq!(Example::single(0, 5).lens.total(), 5);
    /// ```
    pub fn single(id: u64, len: u32) -> Self {
        Self { id, lens: Lens::Single { len } }
    }

    /// A DPO pair with `chosen` and `rejected` tokens.
    ///
    /// # Example
    /// ```
    /// # use thd::pack::Example;
    /// assert_eq!(Example::pair(0, 5, 2).lens.total(), 7);
    /// ```
    pub fn pair(id: u64, chosen: u32, rejected: u32) -> Self {
        Self { id, lens: Lens::Pair { chosen, rejected } }
    }

    /// The whole example as a pack item (offset 0, no divisibility padding).
    ///
    /// # Example
    /// ```
    /// # use thd::pack::Example;
    /// let item = Example::single(9, 5).item();
    /// assert_eq!((item.id, item.offset, item.padded), (9, 0, item.lens));
    /// ```
    pub fn item(self) -> PackItem {
        PackItem { id: self.id, offset: 0, lens: self.lens, padded: self.lens }
    }
}

/// An example, or a piece of one, placed in a pack.
///
/// `offset` is the first token of the piece within its example: 0 unless a packer split the
/// example across packs (bionemo `split_samples=True`). `padded` is the storage the piece takes
/// in the pack, `lens` rounded up to the packer's divisibility (equal to `lens` otherwise).
///
/// # Example
/// ```
/// use thd::pack::{Lens, PackItem};
/// let piece = PackItem { id: 2, offset: 12, lens: Lens::Single { len: 3 }, padded: Lens::Single { len: 4 } };
/// assert_eq!(piece.lens.total(), 3);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct PackItem {
    /// The example's id.
    pub id: u64,
    /// First token of this piece within the example.
    pub offset: u32,
    /// Real tokens of the piece.
    pub lens: Lens,
    /// Storage of the piece in the pack (`>= lens` on every branch).
    pub padded: Lens,
}

/// One pack: the examples (or pieces) that share a row, in the order they are concatenated.
///
/// For DPO pairs the pack is two rows, one per branch, built from the same examples in the
/// same order.
///
/// # Example
/// ```
/// use thd::pack::{Example, Pack};
/// let pack = Pack::new(vec![Example::single(0, 3).item(), Example::single(1, 5).item()]);
/// assert_eq!(pack.load(), [8, 0]);
/// assert_eq!(pack.seq_lens(0).as_slice(), &[3, 5]);
/// assert_eq!(pack.ids().collect::<Vec<_>>(), vec![0, 1]);
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Pack {
    /// The items, in row order.
    pub items: Vec<PackItem>,
}

impl Pack {
    /// Wraps items.
    ///
    /// # Example
    /// ```
    /// # use thd::pack::Pack;
    /// assert!(Pack::new(vec![]).is_empty());
    /// ```
    pub fn new(items: Vec<PackItem>) -> Self {
        Self { items }
    }

    /// Number of items (segments per branch).
    ///
    /// # Example
    /// ```
    /// # use thd::pack::{Example, Pack};
    /// assert_eq!(Pack::new(vec![Example::single(0, 3).item()]).len(), 1);
    /// ```
    pub fn len(&self) -> usize {
        self.items.len()
    }

    /// True when the pack holds nothing.
    ///
    /// # Example
    /// ```
    /// # use thd::pack::Pack;
    /// assert!(Pack::default().is_empty());
    /// ```
    pub fn is_empty(&self) -> bool {
        self.items.is_empty()
    }

    /// The example ids, in row order.
    ///
    /// # Example
    /// ```
    /// # use thd::pack::{Example, Pack};
    /// let pack = Pack::new(vec![Example::single(7, 3).item()]);
    /// assert_eq!(pack.ids().next(), Some(7));
    /// ```
    pub fn ids(&self) -> impl ExactSizeIterator<Item = u64> + '_ {
        self.items.iter().map(|i| i.id)
    }

    /// Storage per branch, `Σ padded`: what the capacity bounds.
    ///
    /// # Example
    /// ```
    /// # use thd::pack::{Example, Pack};
    /// let pack = Pack::new(vec![Example::pair(0, 3, 2).item(), Example::pair(1, 4, 4).item()]);
    /// assert_eq!(pack.load(), [7, 6]);
    /// ```
    pub fn load(&self) -> [u64; 2] {
        sum_branches(self.items.iter().map(|i| i.padded))
    }

    /// Real tokens per branch, `Σ lens`.
    ///
    /// # Example
    /// ```
    /// # use thd::pack::{Example, Pack};
    /// assert_eq!(Pack::new(vec![Example::single(0, 3).item()]).real(), [3, 0]);
    /// ```
    pub fn real(&self) -> [u64; 2] {
        sum_branches(self.items.iter().map(|i| i.lens))
    }

    /// True when any item is a DPO pair (the pack then occupies two rows).
    ///
    /// # Example
    /// ```
    /// # use thd::pack::{Example, Pack};
    /// assert!(Pack::new(vec![Example::pair(0, 3, 2).item()]).is_pair());
    /// ```
    pub fn is_pair(&self) -> bool {
        self.items.iter().any(|i| i.lens.is_pair())
    }

    /// Real per-segment lengths of branch `b` (0: single or chosen, 1: rejected), ready for a
    /// collator.
    ///
    /// # Example
    /// ```
    /// # use thd::pack::{Example, Pack};
    /// let pack = Pack::new(vec![Example::pair(0, 3, 2).item(), Example::pair(1, 4, 4).item()]);
    /// assert_eq!(pack.seq_lens(1).as_slice(), &[2, 4]);
    /// ```
    pub fn seq_lens(&self, b: usize) -> SeqLens {
        branch_lens(self.items.iter().map(|i| i.lens), b)
    }

    /// Padded per-segment lengths of branch `b` (the storage each segment takes).
    ///
    /// # Example
    /// ```
    /// # use thd::pack::{Lens, Pack, PackItem};
    /// let item = PackItem { id: 0, offset: 0, lens: Lens::Single { len: 3 }, padded: Lens::Single { len: 4 } };
    /// assert_eq!(Pack::new(vec![item]).padded_seq_lens(0).as_slice(), &[4]);
    /// ```
    pub fn padded_seq_lens(&self, b: usize) -> SeqLens {
        branch_lens(self.items.iter().map(|i| i.padded), b)
    }
}

fn sum_branches(lens: impl Iterator<Item = Lens>) -> [u64; 2] {
    lens.fold([0, 0], |[a, b], l| {
        let [x, y] = l.branches();
        [a + x, b + y]
    })
}

fn branch_lens(lens: impl Iterator<Item = Lens>, b: usize) -> SeqLens {
    SeqLens::new(lens.map(|l| l.branches()[b.min(1)] as u32).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pack_sums_branches_separately() {
        let pack = Pack::new(vec![Example::pair(0, 3, 9).item(), Example::single(1, 4).item()]);
        assert_eq!(pack.real(), [7, 9]);
        assert!(pack.is_pair());
        assert_eq!(pack.seq_lens(1).as_slice(), &[9, 0]);
    }
}
