//! The oracle's input errors.
//!
//! The public functions return [`candle_core::Result`] (they are candle computations); an input
//! the oracle refuses is an [`Error`] wrapped into [`candle_core::Error`], so its message is the
//! one below, whatever candle adds around it (a backtrace when `RUST_BACKTRACE` is set).

/// Why the oracle refused its input. Messages name the argument and the values.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A tensor had the wrong rank.
    #[error("{tensor} must have rank {expected} ({layout}), got shape {shape:?}")]
    Rank {
        /// Which argument.
        tensor: &'static str,
        /// The rank the oracle expects.
        expected: usize,
        /// Its layout in words, e.g. `[T, H, D]`.
        layout: &'static str,
        /// The shape it had.
        shape: Vec<usize>,
    },
    /// A tensor was not a float tensor.
    #[error("{tensor} must be a float tensor, got {dtype}")]
    NotFloat {
        /// Which argument.
        tensor: &'static str,
        /// Its dtype, as candle prints it.
        dtype: String,
    },
    /// q, k and v had different dtypes.
    #[error("q, k and v must share a dtype, got q {q}, k {k}, v {v}")]
    DTypeMismatch {
        /// dtype of q.
        q: String,
        /// dtype of k.
        k: String,
        /// dtype of v.
        v: String,
    },
    /// k and v had different shapes.
    #[error("k and v must have the same shape [Tk, KV, D], got k {k:?} and v {v:?}")]
    KvShapeMismatch {
        /// Shape of k.
        k: Vec<usize>,
        /// Shape of v.
        v: Vec<usize>,
    },
    /// q and k/v had different head dimensions.
    #[error("q and k/v must share the head dimension, got {q} for q and {k} for k/v")]
    HeadDimMismatch {
        /// Head dimension of q.
        q: usize,
        /// Head dimension of k and v.
        k: usize,
    },
    /// The head dimension was 0.
    #[error("head_dim must be positive, got 0")]
    ZeroHeadDim,
    /// `heads` was not a positive multiple of `kv_heads` (GQA/MQA needs `heads % kv_heads == 0`).
    #[error("heads ({heads}) must be a positive multiple of kv_heads ({kv_heads})")]
    HeadsNotMultiple {
        /// Query heads.
        heads: usize,
        /// Key/value heads.
        kv_heads: usize,
    },
    /// `seqlens_q` and `seqlens_k` described different numbers of sequences.
    #[error("seqlens_q has {q} sequences but seqlens_k has {k}")]
    SeqCountMismatch {
        /// Entries of `seqlens_q`.
        q: usize,
        /// Entries of `seqlens_k`.
        k: usize,
    },
    /// The lengths add up to more tokens than the tensor holds.
    #[error("{lengths} sum to {sum} tokens but {tensor} holds only {tokens}")]
    TooManyTokens {
        /// Which lengths (`seqlens_q`, `seqlens_k`, `seqlens`).
        lengths: &'static str,
        /// Their sum.
        sum: u64,
        /// Which tensor.
        tensor: &'static str,
        /// Its token count (rows).
        tokens: usize,
    },
    /// `labels` did not have one entry per logits row.
    #[error("labels has {labels} entries but logits has {rows} rows")]
    LabelCount {
        /// Entries of `labels`.
        labels: usize,
        /// Rows of `logits`.
        rows: usize,
    },
    /// A label that is neither -100 nor a vocabulary id.
    #[error("label {label} at token {token} is neither -100 nor in 0..{vocab}")]
    LabelOutOfRange {
        /// Its value.
        label: i64,
        /// The token that carries it.
        token: usize,
        /// Vocabulary size (logits columns).
        vocab: usize,
    },
    /// Two tensors compared with [`crate::compare`] had different shapes.
    #[error("cannot compare shapes: actual {actual:?}, expected {expected:?}")]
    ShapeMismatch {
        /// Shape of the tensor under test.
        actual: Vec<usize>,
        /// Shape of the reference.
        expected: Vec<usize>,
    },
}

impl From<Error> for candle_core::Error {
    fn from(err: Error) -> Self {
        candle_core::Error::wrap(err)
    }
}
