//! Why a batch file could not be read or understood (exit code 2).

use std::path::PathBuf;

/// A batch file that could not be read or understood: the message names the key, dtype, shape,
/// index or value at fault. The CLI maps every variant to exit code 2.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The file could not be opened or read.
    #[error("cannot read {path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The OS error.
        source: std::io::Error,
    },
    /// The bytes are not a valid safetensors file (truncated, bad header, bad offsets).
    #[error("not a valid safetensors file: {detail}")]
    Format {
        /// What the safetensors parser (or the pre-check) reported.
        detail: String,
    },
    /// A tensor has a dtype this key cannot have.
    #[error("`{key}` has dtype {dtype}, expected {expected}")]
    Dtype {
        /// The key in the file.
        key: String,
        /// Its dtype, as safetensors names it (`F32`, `I64`, ...).
        dtype: String,
        /// What the key needs.
        expected: &'static str,
    },
    /// A tensor has a shape this key cannot have.
    #[error("`{key}` has shape {shape:?}, expected {expected}")]
    Shape {
        /// The key in the file.
        key: String,
        /// Its shape.
        shape: Vec<usize>,
        /// What the key needs.
        expected: String,
    },
    /// A key the dialect needs is missing.
    #[error("missing key `{key}` ({dialect} dialect{hint})")]
    MissingKey {
        /// The key (after `--map` renaming).
        key: String,
        /// The dialect that needs it.
        dialect: &'static str,
        /// Extra advice, starting with "; " or empty.
        hint: String,
    },
    /// No known dialect matches the keys.
    #[error(
        "cannot tell the dialect from the keys {keys:?}: expected `cu_seq_lens_q` (hf), \
         `cu_seqlens`/`cu_seqlens_q`/`seq_lens` (te) or `chosen_`/`rejected_` prefixes (dpo); \
         use --dialect and --map KEY=NAME"
    )]
    UnknownDialect {
        /// The keys of the file, sorted.
        keys: Vec<String>,
    },
    /// A profile that does not parse, or names what is not there: the file (or option), the
    /// line, the field and the values allowed.
    #[error("{origin}{}: {message}", line.map(|l| format!(":{l}")).unwrap_or_default())]
    Profile {
        /// The file, `built-in profiles/NAME.toml`, `--profile` or `profile=`.
        origin: String,
        /// The 1-based line, where the parser knows it.
        line: Option<usize>,
        /// What is wrong and what is allowed.
        message: String,
    },
    /// `--map FROM=TO` names a key the file does not have.
    #[error("--map {from}={to}: the file has no key `{from}`")]
    MapSource {
        /// The key to rename.
        from: String,
        /// Its new name.
        to: String,
    },
    /// Offsets that are not offsets: empty, not from 0, decreasing or negative, past int32, or
    /// past the token count.
    #[error("`{key}` {rule}")]
    Offsets {
        /// The key in the file.
        key: String,
        /// The rule broken, with index and value (`[2]=3 < [1]=5: must be non-decreasing`).
        rule: String,
        /// The offsets as read, and the token count they address: what the `offsets` rule
        /// judges when the batch is reported (a batch that contradicts itself is a violation).
        values: Vec<i64>,
        /// The token count.
        tokens: usize,
    },
    /// A float where a number is needed is NaN or infinite.
    #[error("`{key}`[{index}] is {value}, expected a finite number")]
    NotFinite {
        /// The key in the file.
        key: String,
        /// Flat index of the value.
        index: usize,
        /// The value (`NaN`, `inf`).
        value: f64,
    },
    /// A value outside what the key allows (a mask value that is not 0 or 1, a negative
    /// length, an integer that does not fit int64).
    #[error("`{key}`[{index}] = {value}, expected {expected}")]
    Value {
        /// The key in the file.
        key: String,
        /// Flat index of the value.
        index: usize,
        /// The value as written.
        value: String,
        /// What the key needs.
        expected: &'static str,
    },
    /// Two keys disagree on a count they must share (tokens, segments, ranks).
    #[error("`{key}` has {got} {what}, but `{reference}` has {expected}")]
    CountMismatch {
        /// The key at fault.
        key: String,
        /// What is counted (`tokens`, `segments`).
        what: &'static str,
        /// Its count.
        got: usize,
        /// The key it is compared with.
        reference: String,
        /// That key's count.
        expected: usize,
    },
    /// An expectations file that cannot be read.
    #[error("expectations file {path}: {detail}")]
    Expect {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        detail: String,
    },
    /// A reference collator (`thd`) rejected its input while building an example batch.
    #[error("reference collator: {0}")]
    Collator(#[from] thd::Error),
    /// A set of CP shard files that does not form one batch.
    #[error("cp shards in {group}: {detail}")]
    Shards {
        /// The group (directory and cp size).
        group: String,
        /// What is wrong.
        detail: String,
    },
}

/// `Result` with [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;
