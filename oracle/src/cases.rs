//! Named attention cases: `small()` for tests, `reference()` for benchmarks, `errors()` for the
//! inputs the oracle must refuse (PyTorch's `sample_inputs` / `reference_inputs` /
//! `ErrorInput`). Data is seeded (`StdRng::seed_from_u64`), standard normal, drawn in f64 and
//! rounded to the requested dtype.

use std::fmt;

use candle_core::{DType, Device, Result, Tensor};
use rand::SeedableRng;
use rand::rngs::StdRng;
use rand_distr::{Distribution, StandardNormal};

use crate::attention::AttnSpec;
use crate::error::Error;

/// Lengths of the reference batch: 16 documents uniform in [1, 2048]
/// (`torch.randint(1, 2049, (16,), generator=manual_seed(0))`, `shared/bench/lengths.json`).
pub const REFERENCE_LENS: [u32; 16] =
    [685, 560, 1654, 1217, 836, 764, 1732, 1384, 1034, 1748, 278, 1779, 1829, 600, 1095, 1497];

/// One attention case: the layout of a THD batch and the attention options.
#[derive(Debug, Clone, PartialEq)]
pub struct GridCase {
    /// Short identifier, `snake_case`.
    pub name: String,
    /// One line: what the case exercises.
    pub summary: String,
    /// Per-sequence query lengths.
    pub lens_q: Vec<u32>,
    /// Per-sequence key/value lengths (same count as `lens_q`).
    pub lens_k: Vec<u32>,
    /// Query heads `H`.
    pub heads: usize,
    /// Key/value heads `KV` (`H % KV == 0`).
    pub kv_heads: usize,
    /// Head dimension `D`.
    pub head_dim: usize,
    /// Causal (bottom-right aligned) or bidirectional.
    pub causal: bool,
}

/// The q, k, v tensors of a case: `[Tq, H, D]`, `[Tk, KV, D]`, `[Tk, KV, D]`.
#[derive(Debug, Clone)]
pub struct AttnInputs {
    /// Queries.
    pub q: Tensor,
    /// Keys.
    pub k: Tensor,
    /// Values.
    pub v: Tensor,
}

impl AttnInputs {
    /// The same inputs in another dtype (upcasting f32 to f64 is exact).
    pub fn to_dtype(&self, dtype: DType) -> Result<Self> {
        Ok(Self {
            q: self.q.to_dtype(dtype)?,
            k: self.k.to_dtype(dtype)?,
            v: self.v.to_dtype(dtype)?,
        })
    }
}

impl GridCase {
    /// A case with the same lengths for q and k.
    ///
    /// # Example
    /// ```
    /// let case = oracle::cases::GridCase::new("demo", "two docs", &[3, 5], 4, 2, 8, true);
    /// assert_eq!((case.tokens_q(), case.tokens_k()), (8, 8));
    /// assert!(case.spec().causal);
    /// ```
    pub fn new(
        name: impl Into<String>,
        summary: impl Into<String>,
        lens: &[u32],
        heads: usize,
        kv_heads: usize,
        head_dim: usize,
        causal: bool,
    ) -> Self {
        Self {
            name: name.into(),
            summary: summary.into(),
            lens_q: lens.to_vec(),
            lens_k: lens.to_vec(),
            heads,
            kv_heads,
            head_dim,
            causal,
        }
    }

    /// The same case with different key lengths (`sq != sk`: bottom-right causal).
    ///
    /// # Example
    /// ```
    /// let case = oracle::cases::GridCase::new("kv", "more keys", &[2], 1, 1, 4, true).with_lens_k(&[5]);
    /// assert_eq!((case.tokens_q(), case.tokens_k()), (2, 5));
    /// ```
    pub fn with_lens_k(mut self, lens_k: &[u32]) -> Self {
        self.lens_k = lens_k.to_vec();
        self
    }

    /// The attention options of the case (default scale).
    pub fn spec(&self) -> AttnSpec {
        AttnSpec { causal: self.causal, scale: None }
    }

    /// Σ query lengths.
    pub fn tokens_q(&self) -> usize {
        self.lens_q.iter().map(|&s| s as usize).sum()
    }

    /// Σ key lengths.
    pub fn tokens_k(&self) -> usize {
        self.lens_k.iter().map(|&s| s as usize).sum()
    }

    /// Seeded standard-normal inputs with exactly `Σ lens` rows, in `dtype`.
    ///
    /// # Example
    /// ```
    /// use candle_core::{DType, Device};
    /// let case = &oracle::cases::small()[0];
    /// let a = case.inputs(7, DType::F64, &Device::Cpu)?;
    /// let b = case.inputs(7, DType::F64, &Device::Cpu)?;
    /// assert_eq!(a.q.dims(), &[case.tokens_q(), case.heads, case.head_dim]);
    /// assert_eq!(a.q.to_vec3::<f64>()?, b.q.to_vec3::<f64>()?); // same seed, same data
    /// # Ok::<(), candle_core::Error>(())
    /// ```
    pub fn inputs(&self, seed: u64, dtype: DType, dev: &Device) -> Result<AttnInputs> {
        self.inputs_with_tokens(seed, self.tokens_q(), self.tokens_k(), dtype, dev)
    }

    /// Like [`inputs`](Self::inputs) with explicit row counts (extra rows are padding).
    pub fn inputs_with_tokens(
        &self,
        seed: u64,
        tokens_q: usize,
        tokens_k: usize,
        dtype: DType,
        dev: &Device,
    ) -> Result<AttnInputs> {
        let mut rng = StdRng::seed_from_u64(seed);
        let mut normal = |shape: (usize, usize, usize)| -> Result<Tensor> {
            let n = shape.0 * shape.1 * shape.2;
            let data: Vec<f64> = (0..n).map(|_| StandardNormal.sample(&mut rng)).collect();
            Tensor::from_vec(data, shape, dev)?.to_dtype(dtype)
        };
        let q = normal((tokens_q, self.heads, self.head_dim))?;
        let k = normal((tokens_k, self.kv_heads, self.head_dim))?;
        let v = normal((tokens_k, self.kv_heads, self.head_dim))?;
        Ok(AttnInputs { q, k, v })
    }
}

impl fmt::Display for GridCase {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}: {} (lens_q {:?}, lens_k {:?}, H {}, KV {}, D {}, {})",
            self.name,
            self.summary,
            self.lens_q,
            self.lens_k,
            self.heads,
            self.kv_heads,
            self.head_dim,
            if self.causal { "causal" } else { "bidirectional" }
        )
    }
}

/// Small cases covering the edges: empty, single-token and boundary-length sequences, sq != sk
/// both ways, fully masked rows, GQA/MQA, odd head dims. Fast enough for every test run.
///
/// # Example
/// ```
/// let cases = oracle::cases::small();
/// assert!(cases.iter().any(|c| c.lens_q.contains(&0)));
/// assert!(cases.iter().any(|c| c.lens_q != c.lens_k));
/// for c in &cases {
///     assert_eq!(c.heads % c.kv_heads, 0, "{c}");
/// }
/// ```
pub fn small() -> Vec<GridCase> {
    let c = GridCase::new;
    vec![
        c("single_token", "one sequence of one token", &[1], 2, 2, 8, true),
        c("two_docs_mha", "two sequences, MHA, causal", &[3, 5], 4, 4, 8, true),
        c("two_docs_bidir", "two sequences, bidirectional", &[5, 3], 4, 4, 8, false),
        c(
            "empty_between",
            "a zero-length sequence between two real ones",
            &[4, 0, 6],
            2,
            1,
            16,
            true,
        ),
        c("empty_first_last", "zero-length sequences at both ends", &[0, 7, 0], 4, 2, 8, false),
        c("gqa_odd_dim", "GQA 6/2 with the odd head dim 59", &[9, 2, 13], 6, 2, 59, true),
        c("mqa_odd_dim", "MQA 6/1 with the odd head dim 111", &[11, 1, 6], 6, 1, 111, false),
        c("tile_edges", "lengths around a 128-token tile", &[127, 128, 129], 2, 1, 64, true),
        c(
            "many_short",
            "12 sequences of 1 to 12 tokens",
            &[1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12],
            4,
            2,
            8,
            true,
        ),
        c("sq_lt_sk", "causal, fewer queries than keys (bottom-right)", &[3, 1, 5], 4, 2, 8, true)
            .with_lens_k(&[7, 4, 5]),
        c(
            "sq_gt_sk",
            "causal, more queries than keys: leading rows see nothing (0)",
            &[6, 4],
            4,
            2,
            8,
            true,
        )
        .with_lens_k(&[2, 4]),
        c(
            "keys_empty",
            "a sequence with queries and no keys: all its rows are 0",
            &[3, 2],
            2,
            2,
            8,
            false,
        )
        .with_lens_k(&[0, 5]),
    ]
}

/// The benchmark batches (H=8, KV=2, D=64, causal): the reference batch, twice as many documents
/// (the list repeated), and doubled lengths. Time must follow Σ sᵢ², not T².
///
/// # Example
/// ```
/// let r = oracle::cases::reference();
/// assert_eq!(r[0].tokens_q(), 18692);
/// assert_eq!(r[1].tokens_q(), 2 * 18692);
/// assert_eq!(*r[2].lens_q.iter().max().unwrap(), 2 * 1829);
/// ```
pub fn reference() -> Vec<GridCase> {
    let twice: Vec<u32> = REFERENCE_LENS.iter().chain(&REFERENCE_LENS).copied().collect();
    let doubled: Vec<u32> = REFERENCE_LENS.iter().map(|s| 2 * s).collect();
    vec![
        GridCase::new(
            "reference",
            "16 documents uniform in [1, 2048]",
            &REFERENCE_LENS,
            8,
            2,
            64,
            true,
        ),
        GridCase::new(
            "reference_32_docs",
            "the 16 reference lengths, twice",
            &twice,
            8,
            2,
            64,
            true,
        ),
        GridCase::new(
            "reference_2x_len",
            "the 16 reference lengths, doubled",
            &doubled,
            8,
            2,
            64,
            true,
        ),
    ]
}

/// An input the oracle must refuse, and the error it must give.
#[derive(Debug, Clone, PartialEq)]
pub struct ErrorCase {
    /// The case (its lengths and heads).
    pub case: GridCase,
    /// Rows of q to build (may differ from Σ lens_q).
    pub tokens_q: usize,
    /// Rows of k and v to build.
    pub tokens_k: usize,
    /// The error [`varlen_attention`](crate::varlen_attention) must return.
    pub expected: Error,
}

/// Inputs [`varlen_attention`](crate::varlen_attention) must refuse, each with its error.
///
/// # Example
/// ```
/// use candle_core::{DType, Device};
/// for e in oracle::cases::errors() {
///     let x = e.case.inputs_with_tokens(0, e.tokens_q, e.tokens_k, DType::F64, &Device::Cpu)?;
///     let err = oracle::varlen_attention(&x.q, &x.k, &x.v, &e.case.lens_q, &e.case.lens_k, &e.case.spec())
///         .unwrap_err();
///     assert!(err.to_string().contains(&e.expected.to_string()), "{}: {err}", e.case.name);
/// }
/// # Ok::<(), candle_core::Error>(())
/// ```
pub fn errors() -> Vec<ErrorCase> {
    let err = |case: GridCase, tokens_q: usize, tokens_k: usize, expected: Error| ErrorCase {
        case,
        tokens_q,
        tokens_k,
        expected,
    };
    let c = GridCase::new;
    vec![
        err(
            c("heads_not_multiple", "6 query heads cannot share 4 kv heads", &[3], 6, 4, 8, true),
            3,
            3,
            Error::HeadsNotMultiple { heads: 6, kv_heads: 4 },
        ),
        err(
            c("zero_kv_heads", "no kv heads", &[3], 2, 0, 8, true),
            3,
            3,
            Error::HeadsNotMultiple { heads: 2, kv_heads: 0 },
        ),
        err(c("zero_head_dim", "head_dim 0", &[3], 2, 2, 0, true), 3, 3, Error::ZeroHeadDim),
        err(
            c("seq_count_mismatch", "2 query lengths, 3 key lengths", &[2, 2], 2, 2, 8, true)
                .with_lens_k(&[1, 1, 2]),
            4,
            4,
            Error::SeqCountMismatch { q: 2, k: 3 },
        ),
        err(
            c("q_lengths_overflow", "query lengths sum past the q rows", &[4, 5], 2, 2, 8, true),
            8,
            9,
            Error::TooManyTokens { lengths: "seqlens_q", sum: 9, tensor: "q", tokens: 8 },
        ),
        err(
            c("k_lengths_overflow", "key lengths sum past the k rows", &[4, 5], 2, 2, 8, true),
            9,
            7,
            Error::TooManyTokens { lengths: "seqlens_k", sum: 9, tensor: "k", tokens: 7 },
        ),
    ]
}
