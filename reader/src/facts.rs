//! The one resolution of a batch's facts: the options, the batch's `__metadata__`, the stack's
//! profile (named, the project's `pyproject.toml`, or told by the keys) resolve here, once, into
//! the [`Contract`] every format and rule reads, each fact with where it came from.
//!
//! Precedence, fact by fact: an option (the command line, a Python keyword) over the batch's
//! metadata over the profile; what none states is the format's reading or the defaults of packed
//! training. `thdcheck profile show` and the JSON report print the facts with their origins.
//!
//! ```
//! use std::collections::BTreeMap;
//! use reader::facts::{Facts, Origin};
//! use rules::contract::Contract;
//! let option = Contract { pad_token_id: Some(0), ..Default::default() };
//! let meta = BTreeMap::from([("pad_token_id".to_owned(), "7".to_owned()),
//!                            ("eos_token_id".to_owned(), "2".to_owned())]);
//! let facts = Facts::resolve(option, &meta, None)?;
//! assert_eq!(facts.contract.pad_token_id, Some(0));
//! assert_eq!(facts.contract.eos_token_id, Some(2));
//! assert_eq!(facts.origin("pad_token_id"), Some(&Origin::Option));
//! assert_eq!(facts.origin("eos_token_id"), Some(&Origin::Metadata));
//! # Ok::<(), reader::Error>(())
//! ```

use std::collections::BTreeMap;

use rules::contract::Contract;
use serde::Serialize;

use crate::profile::Profile;
use crate::{Error, Result};

/// Where a fact came from.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase", tag = "from", content = "profile")]
pub enum Origin {
    /// An option: the command line, a Python keyword argument.
    Option,
    /// The batch's `__metadata__`.
    Metadata,
    /// The profile of that name.
    Profile(String),
}

impl std::fmt::Display for Origin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Origin::Option => f.write_str("option"),
            Origin::Metadata => f.write_str("metadata"),
            Origin::Profile(name) => write!(f, "profile {name}"),
        }
    }
}

/// One fact in force, as the JSON report lists it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct FactInForce {
    /// The fact's name ([`Contract::FACTS`]).
    pub fact: &'static str,
    /// Its value as written.
    pub value: String,
    /// Where it came from.
    #[serde(flatten)]
    pub origin: Origin,
}

/// The resolved contract of one batch and where each of its facts came from.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Facts {
    /// The facts in force.
    pub contract: Contract,
    /// Each stated fact's origin, by name.
    origins: BTreeMap<&'static str, Origin>,
}

impl Facts {
    /// Resolves the options over the batch's metadata over the profile, fact by fact.
    ///
    /// A rank file's `cp_size` (beside its `cp_rank`) is its shard's, read by the shard reader
    /// ([`crate::shards`]), not the CP size a whole batch must shard over.
    ///
    /// # Errors
    /// [`Error::Value`] naming the metadata key whose value is not one of the fact's.
    pub fn resolve(
        option: Contract,
        meta: &BTreeMap<String, String>,
        profile: Option<&Profile>,
    ) -> Result<Self> {
        let metadata = Self::metadata(meta)?;
        let mut layers = vec![(Origin::Option, option.settled()), (Origin::Metadata, metadata)];
        if let Some(p) = profile {
            layers.push((Origin::Profile(p.label()), p.facts.settled()));
        }
        Ok(Self::layered(layers))
    }

    /// The facts a batch's `__metadata__` states (its keys that name no fact are left to
    /// whoever reads them).
    ///
    /// # Errors
    /// [`Error::Value`] naming the metadata key whose value is not one of the fact's.
    pub fn metadata(meta: &BTreeMap<String, String>) -> Result<Contract> {
        let shard = meta.contains_key("cp_rank");
        let written = meta
            .iter()
            .filter(|(k, _)| !(shard && k.as_str() == "cp_size"))
            .map(|(k, v)| (k.as_str(), v.as_str()));
        Contract::from_written(written).map_err(|(key, value, expected)| Error::Value {
            key: format!("__metadata__.{key}"),
            index: 0,
            value,
            expected,
        })
    }

    /// The facts of `layers`, highest first.
    pub fn layered(layers: Vec<(Origin, Contract)>) -> Self {
        let mut out = Self::default();
        for (origin, layer) in layers {
            for (name, _) in layer.stated() {
                out.origins.entry(name).or_insert_with(|| origin.clone());
            }
            out.contract = out.contract.or(layer);
        }
        out
    }

    /// Where the fact `name` came from, if it is stated.
    pub fn origin(&self, name: &str) -> Option<&Origin> {
        self.origins.get(name)
    }

    /// Every fact in force with its origin, in [`Contract::FACTS`] order.
    pub fn in_force(&self) -> Vec<FactInForce> {
        self.contract
            .stated()
            .into_iter()
            .map(|(fact, value)| FactInForce {
                fact,
                value,
                origin: self.origins.get(fact).cloned().unwrap_or(Origin::Option),
            })
            .collect()
    }
}
