use serde::{Deserialize, Serialize};

use super::{
    BestFit, BinPackingOptions, FirstFit, FirstFitDecreasing, Packer, SequentialBudget,
    SequentialOptions, TokenPacking, TokenPackingOptions,
};
use crate::Result;

/// A built-in packer by name and options, as a config file or a fuzz case names it.
///
/// Serialised with a `strategy` tag and the options inline, e.g. JSON
/// `{"strategy":"first_fit_decreasing","capacity":4096,"window":1000}`.
///
/// # Example
/// ```
/// use thd::pack::{BinPackingOptions, Example, PackerSpec, pack_all};
/// let spec = PackerSpec::FirstFitDecreasing { capacity: 8, options: BinPackingOptions::default() };
/// let mut packer = spec.build()?;
/// assert_eq!(packer.name(), "first_fit_decreasing");
/// let packs = pack_all(packer.as_mut(), &[Example::single(0, 5), Example::single(1, 3)])?;
/// assert_eq!(packs.len(), 1);
/// # Ok::<(), thd::Error>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(tag = "strategy", rename_all = "snake_case")]
pub enum PackerSpec {
    /// [`SequentialBudget`].
    SequentialBudget {
        /// Tokens per pack (per branch).
        capacity: u32,
        /// Options.
        #[serde(flatten)]
        options: SequentialOptions,
    },
    /// [`TokenPacking`].
    TokenPacking {
        /// `max_tokens_per_batch`.
        capacity: u32,
        /// Options.
        #[serde(flatten)]
        options: TokenPackingOptions,
    },
    /// [`FirstFit`].
    FirstFit {
        /// Tokens per pack (per branch).
        capacity: u32,
        /// Options.
        #[serde(flatten)]
        options: BinPackingOptions,
    },
    /// [`BestFit`].
    BestFit {
        /// Tokens per pack (per branch).
        capacity: u32,
        /// Options.
        #[serde(flatten)]
        options: BinPackingOptions,
    },
    /// [`FirstFitDecreasing`].
    FirstFitDecreasing {
        /// Tokens per pack (per branch).
        capacity: u32,
        /// Options.
        #[serde(flatten)]
        options: BinPackingOptions,
    },
}

impl PackerSpec {
    /// Builds a fresh packer (no carried state).
    ///
    /// # Errors
    /// The constructor's errors ([`Error::ZeroCapacity`](crate::Error::ZeroCapacity), ...).
    ///
    /// # Example
    /// ```
    /// # use thd::pack::{PackerSpec, SequentialOptions};
    /// let spec = PackerSpec::SequentialBudget { capacity: 0, options: SequentialOptions::default() };
    /// assert!(spec.build().is_err());
    /// ```
    pub fn build(&self) -> Result<Box<dyn Packer>> {
        Ok(match *self {
            PackerSpec::SequentialBudget { capacity, options } => {
                Box::new(SequentialBudget::new(capacity, options)?)
            }
            PackerSpec::TokenPacking { capacity, options } => {
                Box::new(TokenPacking::new(capacity, options)?)
            }
            PackerSpec::FirstFit { capacity, options } => {
                Box::new(FirstFit::new(capacity, options)?)
            }
            PackerSpec::BestFit { capacity, options } => Box::new(BestFit::new(capacity, options)?),
            PackerSpec::FirstFitDecreasing { capacity, options } => {
                Box::new(FirstFitDecreasing::new(capacity, options)?)
            }
        })
    }

    /// The capacity the spec names.
    ///
    /// # Example
    /// ```
    /// # use thd::pack::{PackerSpec, BinPackingOptions};
    /// assert_eq!(PackerSpec::BestFit { capacity: 9, options: BinPackingOptions::default() }.capacity(), 9);
    /// ```
    pub fn capacity(&self) -> u32 {
        match *self {
            PackerSpec::SequentialBudget { capacity, .. }
            | PackerSpec::TokenPacking { capacity, .. }
            | PackerSpec::FirstFit { capacity, .. }
            | PackerSpec::BestFit { capacity, .. }
            | PackerSpec::FirstFitDecreasing { capacity, .. } => capacity,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pack::{Example, OverLength};

    #[test]
    fn spec_json_is_flat_with_a_strategy_tag() {
        let json = r#"{"strategy":"first_fit_decreasing","capacity":4096,"window":1000}"#;
        let spec: PackerSpec = serde_json::from_str(json).unwrap();
        let options = BinPackingOptions { window: Some(1000), ..Default::default() };
        assert_eq!(spec, PackerSpec::FirstFitDecreasing { capacity: 4096, options });
        let json = r#"{"strategy":"sequential_budget","capacity":300,"over_length":"drop"}"#;
        let spec: PackerSpec = serde_json::from_str(json).unwrap();
        let PackerSpec::SequentialBudget { options, .. } = spec else { panic!("{spec:?}") };
        assert_eq!(options.over_length, OverLength::Drop);
        let back: PackerSpec =
            serde_json::from_str(&serde_json::to_string(&spec).unwrap()).unwrap();
        assert_eq!(back, spec);
    }

    #[test]
    fn example_json_is_flat() {
        let e: Example = serde_json::from_str(r#"{"id":3,"len":5}"#).unwrap();
        assert_eq!(e, Example::single(3, 5));
        let p: Example = serde_json::from_str(r#"{"id":4,"chosen":5,"rejected":2}"#).unwrap();
        assert_eq!(p, Example::pair(4, 5, 2));
        assert_eq!(serde_json::to_string(&p).unwrap(), r#"{"id":4,"chosen":5,"rejected":2}"#);
    }
}
