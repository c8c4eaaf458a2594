use std::path::PathBuf;

/// Everything that can go wrong loading a recipe or computing its record.
///
/// Messages name the file, the key and the value at fault, so that a CLI can print them as is.
///
/// # Example
/// ```
/// use golden::Recipe;
/// let err = Recipe::from_toml_str("name = 3", "inline").unwrap_err();
/// assert!(err.to_string().starts_with("recipe inline: "));
/// ```
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The recipe file could not be read.
    #[error("cannot read recipe {path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The IO error.
        source: std::io::Error,
    },
    /// The file is not valid TOML, or a key is unknown, missing or of the wrong type (the
    /// message names the key and shows the line).
    #[error("recipe {origin}: {message}")]
    Parse {
        /// The file (or another description of where the text came from).
        origin: String,
        /// The TOML parser's message.
        message: String,
    },
    /// A value is well-typed but not allowed (or inconsistent with another key).
    #[error("recipe {origin}: {key} = {value}: {reason}")]
    Invalid {
        /// The file (or another description of where the text came from).
        origin: String,
        /// Dotted key, e.g. `parallel.cp`.
        key: String,
        /// The value, as written.
        value: String,
        /// What is wrong with it.
        reason: String,
    },
    /// A step of the pipeline (collating, padding, packing, sharding, FLOPs) rejected the
    /// generated data.
    #[error("recipe {recipe}: {stage}: {source}")]
    Pipeline {
        /// The recipe's name.
        recipe: String,
        /// The pipeline step.
        stage: &'static str,
        /// The error `thd` returned.
        source: thd::Error,
    },
    /// The independent loss of the oracle could not be computed.
    #[error("recipe {recipe}: oracle cross-entropy: {source}")]
    Oracle {
        /// The recipe's name.
        recipe: String,
        /// The error candle returned.
        source: candle_core::Error,
    },
    /// The packer had not emitted a pack per micro-batch after `documents` documents.
    #[error(
        "recipe {recipe}: only {packs} of the step's {needed} packs after {documents} documents \
         (golden::recipe::MAX_DOCUMENTS): packing.capacity takes more data.lengths documents \
         per pack than a step may draw"
    )]
    StepNotFilled {
        /// The recipe's name.
        recipe: String,
        /// Packs emitted.
        packs: usize,
        /// Packs the step needs (one per micro-batch).
        needed: usize,
        /// Documents drawn.
        documents: u64,
    },
    /// The DPO collator kept fewer pairs than the packer put in the pack (the two budgets
    /// disagree).
    #[error("recipe {recipe}: collate_dpo kept {collated} of the {packed} pairs the packer packed")]
    DpoPairsDropped {
        /// The recipe's name.
        recipe: String,
        /// Pairs in the pack.
        packed: usize,
        /// Pairs the collator kept.
        collated: usize,
    },
}

/// `Result` with this crate's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Wraps a `thd` error of pipeline step `stage` of `recipe`.
pub(crate) fn pipeline_err<'a>(
    recipe: &'a crate::Recipe,
    stage: &'static str,
) -> impl Fn(thd::Error) -> Error + 'a {
    move |source| Error::Pipeline { recipe: recipe.name.clone(), stage, source }
}
