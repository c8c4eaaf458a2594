//! What the fuzz targets' rules judge, as plain data: a packer's run at one point, a CP
//! splitter's answer, a loss's answers, an attention's answers, the records they are made of,
//! and the kind of a logged value. No rule here: [`Fuzz`](crate::checks::Fuzz) names the
//! judges' types, each family file (`packer.rs`, `cp_shard.rs`, `cp_loss.rs`, `tokens_cp.rs`,
//! `attention.rs`, `logged.rs`) judges them, and the registry runs the judges in its order.

use std::fmt;

use thd::pack::{Dropped, Example, Pack};

use crate::checks::shard_layout::ShardLayout;
use crate::{Checked, Location};

// ---- PACKER -------------------------------------------------------------------------------------

/// One packer run as plain data: what went in, what came out, and when.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PackerRun {
    /// Every example pushed, in order, over all epochs.
    pub pushed: Vec<Example>,
    /// Every pack emitted, in order, with the epoch that emitted it (`epochs` for the final
    /// `finish`) and the call that emitted it (a running index over `push`, `end_epoch` and
    /// `finish` calls).
    pub packs: Vec<EmittedPack>,
    /// Everything the packer reported as dropped.
    pub dropped: Vec<Dropped>,
    /// `pending()` after `finish`.
    pub pending_after_finish: usize,
    /// Examples the packer declares it placed alone in a pack beyond the capacity, on purpose
    /// (open-instruct's GRPO `pack_sequences`, Megatron-Bridge's first fit without the upstream
    /// filter; the packer protocol's `oversize`). Allowed only for an example longer than the
    /// capacity, alone in its pack.
    pub oversize: Vec<u64>,
    /// Packs that repeat earlier examples on purpose, marked as such by the packer (a padding
    /// batch, so that every rank gets the same number of batches: open-instruct's loader with
    /// `drop_last=False`): checked for capacity, excluded from conservation; they may only
    /// hold examples that were pushed.
    pub padding: Vec<EmittedPack>,
    /// At most this many items per pack, when the packer has such a limit (open-instruct's
    /// loader: its per-rank batch size).
    pub max_items: Option<usize>,
    /// The packer counts every example at `⌈len / m⌉·m` tokens (bionemo's
    /// `pad_sequences_to_be_divisible_by`): the items' `padded` say what they take, and an
    /// example fits the capacity only if its padded length does.
    pub pad_to_multiple_of: Option<u32>,
    /// The stack may lose each epoch's last, incomplete pack without reporting it (PyTorch's
    /// `drop_last`; `--drops drop-last`): at the end, the examples never emitted nor reported
    /// of one epoch are accepted when they fit together in one pack (padded, on every branch,
    /// and at most `max_items` of them).
    pub drop_last: bool,
    /// The stack may lose, unreported, the trailing packs beyond the last multiple of this DP
    /// size (open-instruct's `HFDataLoader(drop_last=True)`; `--drops dp-remainder` with
    /// `--dp-size`): the examples an epoch loses are accepted when they fill fewer packs than
    /// there are ranks (`⌈Σ padded / C⌉ < R` on every branch), as reported drops are.
    pub dp_remainder_lost: Option<u64>,
    /// The epoch each example of `pushed` was pushed in (parallel to it; none: epoch 0).
    pub pushed_epochs: Vec<usize>,
}

impl PackerRun {
    /// The tokens `len` real tokens take in a pack: `⌈len / m⌉·m` with `pad_to_multiple_of`.
    ///
    /// # Example
    /// ```
    /// use rules::checks::PackerRun;
    /// let run = PackerRun { pad_to_multiple_of: Some(4), ..Default::default() };
    /// assert_eq!((run.padded(5), run.padded(8), PackerRun::default().padded(5)), (8, 8, 5));
    /// ```
    pub fn padded(&self, len: u64) -> u64 {
        match self.pad_to_multiple_of {
            Some(m) if m > 1 => len.div_ceil(u64::from(m)) * u64::from(m),
            _ => len,
        }
    }

    /// The longest branch of example `e`, padded: what must fit the capacity.
    pub(crate) fn padded_longest(&self, e: &Example) -> u64 {
        e.lens.branches().into_iter().map(|l| self.padded(l)).max().unwrap_or(0)
    }
}

/// A pack and when it was emitted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EmittedPack {
    /// Epoch index (`epochs` for the final `finish`).
    pub epoch: usize,
    /// Index of the `push` / `end_epoch` / `finish` call that returned it.
    pub call: usize,
    /// The pack.
    pub pack: Pack,
}

/// Where in a `thdcheck fuzz packer` run a PACKER rule is judged ([`PackerInput::point`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PackerPoint {
    /// The answer to a one-shot request: everything pushed at once.
    Once,
    /// After each call of a session: the packs so far.
    Call,
    /// A session call that closes an epoch (`end_epoch`, `finish`).
    EpochEnd,
    /// A session's `finish`: everything pushed is accounted for.
    Finish,
    /// The packer refused the request (a one-shot request, or a session's push).
    Refused,
    /// The same requests answered a second time.
    Replay,
}

/// What a PACKER rule sees at one point of a fuzz run; [`crate::checks::judge_packer`] runs
/// the registry's packer rules on it.
#[derive(Debug, Clone, Copy)]
pub struct PackerInput<'a> {
    /// Where in the run.
    pub point: PackerPoint,
    /// Everything pushed and emitted so far (at [`PackerPoint::Refused`], what the refused call
    /// pushed).
    pub run: &'a PackerRun,
    /// The capacity.
    pub capacity: u32,
    /// The packs of this answer (a one-shot answer's, a session call's).
    pub packs: &'a [Pack],
    /// Packs dealt to each data-parallel rank so far.
    pub ranks: &'a [u64],
    /// The request's data-parallel size.
    pub dp_size: Option<u64>,
    /// The request's minimum number of packs.
    pub min_packs: Option<u64>,
    /// The drops the stack declares.
    pub declared: DeclaredDrops,
    /// The packer is held to first fit (`--first-fit`).
    pub first_fit: bool,
    /// The two runs' packs, at [`PackerPoint::Replay`].
    pub replay: Option<(&'a [EmittedPack], &'a [EmittedPack])>,
}

impl<'a> PackerInput<'a> {
    /// The input at `point`, with nothing dealt, no packs, no replay and the default
    /// declarations.
    pub fn new(point: PackerPoint, run: &'a PackerRun, capacity: u32) -> Self {
        Self {
            point,
            run,
            capacity,
            packs: &[],
            ranks: &[],
            dp_size: None,
            min_packs: None,
            declared: DeclaredDrops::default(),
            first_fit: false,
            replay: None,
        }
    }
}

/// The drops a packer's stack declares (`thdcheck fuzz packer --drops`, a profile's `[fuzz]
/// drops`): anything else reported as dropped is a
/// [`check_drops`](crate::checks::check_drops) violation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DeclaredDrops {
    /// An example longer than the capacity (padded, on some branch) may be dropped: every stack
    /// may, so this is the default.
    pub over_length: bool,
    /// With packs dealt to this many data-parallel ranks, the trailing packs beyond the last
    /// multiple of it may be dropped (open-instruct's loader with `drop_last`): those examples
    /// fit in fewer packs than there are ranks.
    pub dp_remainder: Option<u64>,
}

impl Default for DeclaredDrops {
    fn default() -> Self {
        Self { over_length: true, dp_remainder: None }
    }
}

/// How a PACKER rule judges one point of a run: `None` where it does not apply.
pub type PackerJudge = for<'a> fn(&PackerInput<'a>) -> Option<Checked>;

// ---- CP-SHARD -----------------------------------------------------------------------------------

/// What the CP ranks hold, as plain data.
///
/// `positions[r][k]` is the global storage index of the token in rank `r`'s local slot `k`
/// (`None` for a slot that holds no token of the batch, e.g. a zero-filled one). A property can
/// get it by tagging every token with its index before the split.
#[derive(Debug, Clone, Copy)]
pub struct ShardView<'a> {
    /// The CP size.
    pub cp: usize,
    /// Real length of every segment.
    pub lens: &'a [u32],
    /// Storage (padded) length of every segment; real tokens first in each slot.
    pub storage: &'a [u32],
    /// Per rank, the global storage index held in every local slot.
    pub positions: &'a [Vec<Option<usize>>],
    /// Per rank, the local labels (shifted: local token `k` predicts `labels[r][k]`).
    pub labels: Option<&'a [Vec<i64>]>,
    /// The global labels before the shift (`Unshifted`, storage order), which define the
    /// expected targets.
    pub unshifted_labels: Option<&'a [i64]>,
    /// Per rank, the local position ids.
    pub position_ids: Option<&'a [Vec<i64>]>,
}

/// What a CP-SHARD rule sees in `thdcheck fuzz cp-split`: the splitter's refusal or its
/// shards; [`crate::checks::judge_cp_split`] runs the registry's CP-split rules on it.
#[derive(Debug, Clone, Copy)]
pub struct CpSplitInput<'a> {
    /// The layout the shards are judged in.
    pub layout: ShardLayout,
    /// The CP size.
    pub cp: usize,
    /// Storage (padded) length of every segment of the request.
    pub storage: &'a [u32],
    /// The splitter's refusal, when it refused.
    pub rejection: Option<&'a str>,
    /// The ranks' shards, when it answered.
    pub view: Option<&'a ShardView<'a>>,
}

/// How a CP-split rule judges one answer: `None` where it does not apply.
pub type CpSplitJudge = for<'a> fn(&CpSplitInput<'a>) -> Option<Checked>;

// ---- CP-LOSS, with the records of LOSS and TOKENS-CP --------------------------------------------

/// How one global batch was split into parts that each compute a local loss.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[cfg_attr(any(test, feature = "serde"), derive(serde::Serialize, serde::Deserialize))]
pub enum Split {
    /// Context parallelism over `cp` ranks (zigzag shards of every sequence).
    Cp(usize),
    /// Gradient accumulation over this many micro-batches (whole sequences each).
    MicroBatches(usize),
}

impl fmt::Display for Split {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Split::Cp(cp) => write!(f, "cp={cp}"),
            Split::MicroBatches(1) => write!(f, "1 micro-batch"),
            Split::MicroBatches(n) => write!(f, "{n} micro-batches"),
        }
    }
}

/// One part's local sums: Σ NLL over its valid labels and their count.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct PartLoss {
    /// Σ NLL.
    pub nll: f64,
    /// Valid labels.
    pub count: u64,
}

/// What a CP-LOSS rule sees in `thdcheck fuzz loss`; [`crate::checks::judge_cp_loss`] runs the
/// registry's CP-loss rules on it.
#[derive(Debug, Clone, Copy)]
pub enum CpLossInput<'a> {
    /// One split's answer: its parts (when reported) and its reduced loss, against the
    /// oracle's global sums.
    Answer {
        /// The split (`cp=2`, ...).
        split: Split,
        /// The parts' sums, when reported.
        parts: Option<&'a [PartLoss]>,
        /// The reported loss.
        reported: f64,
        /// The oracle's global sums.
        global: &'a LossRecord,
        /// Relative tolerance.
        rtol: f64,
    },
    /// The counts every CP size reported (TOKENS-CP).
    AcrossCp {
        /// The oracle's counts.
        expected: &'a TokenCounts,
        /// The oracle's loss.
        loss: f64,
        /// Each CP size's record.
        by_cp: &'a [(usize, TokenRecord)],
        /// Relative tolerance.
        rtol: f64,
    },
}

/// How a CP-LOSS rule judges one input: `None` where it does not apply.
pub type CpLossJudge = for<'a> fn(&CpLossInput<'a>) -> Option<Checked>;

/// A loss as a pipeline reports it: Σ NLL over valid labels, their count, and the mean.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct LossRecord {
    /// Σ NLL over valid labels.
    pub nll: f64,
    /// Number of valid labels.
    pub count: u64,
    /// The reported loss (`nll / count`, 0 when `count == 0`).
    pub mean: f64,
}

impl LossRecord {
    /// A record from sums, with the mean taken the right way (0 when nothing is valid).
    pub fn from_sums(nll: f64, count: u64) -> Self {
        Self { nll, count, mean: if count == 0 { 0.0 } else { nll / count as f64 } }
    }
}

/// What an SFT logger reports for one global batch (AReaL's `sft/*`).
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct TokenRecord {
    /// Real tokens.
    pub n_tokens: u64,
    /// Valid labels.
    pub n_valid_tokens: u64,
    /// Real tokens without a valid label.
    pub prompt_tokens: u64,
    /// Real sequences with at least one valid label.
    pub n_seqs: u64,
    /// Mean NLL over valid labels.
    pub loss: f64,
    /// Mean per-sequence perplexity, if any sequence has a valid label.
    pub ppl_avg: Option<f64>,
}

/// The counts a logger must report, from the global layout.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct TokenCounts {
    /// Real tokens.
    pub n_tokens: u64,
    /// Valid labels.
    pub n_valid_tokens: u64,
    /// `n_tokens − n_valid_tokens`.
    pub prompt_tokens: u64,
    /// Real sequences with at least one valid label.
    pub n_seqs: u64,
}

// ---- ATTN ---------------------------------------------------------------------------------------

/// Where the rows of a packed attention answer lie: `[T, heads, head_dim]` row-major, storage
/// order, document `d`'s `lens[d]` real rows first in its slot of `storage[d]` rows.
#[derive(Debug, Clone, Copy)]
pub struct AttentionLayout<'a> {
    /// Real lengths per document.
    pub lens: &'a [u32],
    /// Slot (storage) lengths per document, padding included.
    pub storage: &'a [u32],
    /// Query heads.
    pub heads: usize,
    /// Head dimension.
    pub head_dim: usize,
    /// The request was causal.
    pub causal: bool,
}

/// One row of the layout.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AttentionRow {
    /// Storage index.
    pub token: usize,
    /// Its document.
    pub doc: usize,
    /// Its offset in the document's slot (the query index for a real row).
    pub offset: usize,
    /// A real token (not padding).
    pub real: bool,
}

impl AttentionLayout<'_> {
    /// Every row in storage order.
    pub fn rows(&self) -> Vec<AttentionRow> {
        let mut out = Vec::new();
        let mut token = 0;
        for (doc, (&s, &p)) in self.lens.iter().zip(self.storage).enumerate() {
            for offset in 0..p as usize {
                out.push(AttentionRow { token, doc, offset, real: offset < s as usize });
                token += 1;
            }
        }
        out
    }

    /// The storage offsets, `B + 1` entries.
    pub fn offsets(&self) -> Vec<u64> {
        std::iter::once(0)
            .chain(self.storage.iter().scan(0u64, |a, &p| {
                *a += u64::from(p);
                Some(*a)
            }))
            .collect()
    }

    pub(crate) fn width(&self) -> usize {
        self.heads * self.head_dim
    }

    pub(crate) fn at(&self, row: &AttentionRow, h: usize) -> Location {
        let what = if row.real { "query" } else { "padding row" };
        Location::default()
            .context(format!("document {}, {what} {}", row.doc, row.offset))
            .token(row.token)
            .head(h)
    }
}

/// The FlashAttention rule's terms for one request, measured by the caller on the oracle:
/// `bound = 2·naive_max_err + floor`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct FlashBound {
    /// The dtype of the request (`f32`, `bf16`, `f16`).
    pub dtype: &'static str,
    /// `max|naive − ref64|` of the oracle computed in the dtype, over the real rows.
    pub naive_max_err: f64,
    /// `2·max|(ref64 + 0.3 − 0.3) − ref64|` in the dtype (FA3's floor), at least one unit in
    /// the last place of the dtype at `max|ref64|` (an answer rounded once to the dtype).
    pub floor: f64,
}

impl FlashBound {
    /// `2·naive_max_err + floor`.
    pub fn bound(&self) -> f64 {
        2.0 * self.naive_max_err + self.floor
    }
}

impl std::fmt::Display for FlashBound {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "bound {:.3e} = 2·max|naive {} − ref64| {:.3e} + floor {:.3e}",
            self.bound(),
            self.dtype,
            self.naive_max_err,
            self.floor
        )
    }
}

/// The answer to a request whose inputs were perturbed.
#[derive(Debug, Clone, Copy)]
pub struct Perturbed<'a> {
    /// Per document: its q, k and v were perturbed (every token of its slot, padding included).
    pub docs: &'a [bool],
    /// The padding rows' q, k and v were perturbed too (every padding row of every document).
    pub padding: bool,
    /// The output, `[T, heads, head_dim]`.
    pub out: &'a [f64],
}

/// What the registry's attention rules judge: one case's answers and the oracle's numbers, all
/// in storage order.
#[derive(Debug, Clone, Copy)]
pub struct AttentionInput<'a> {
    /// The layout.
    pub layout: AttentionLayout<'a>,
    /// The answer's output, `[T, heads, head_dim]`.
    pub out: &'a [f64],
    /// The oracle's (f64), `[T, heads, head_dim]` (padding rows: anything).
    pub truth: &'a [f64],
    /// The FlashAttention rule's terms.
    pub bound: FlashBound,
    /// The answer's log-sum-exp, `[T, heads]`, if it gave one.
    pub lse: Option<&'a [f64]>,
    /// The oracle's log-sum-exp, `[T, heads]`.
    pub truth_lse: &'a [f64],
    /// `(rtol, atol)` of the log-sum-exp.
    pub lse_tol: (f64, f64),
    /// The answers to the isolation requests (some documents perturbed).
    pub isolation: &'a [Perturbed<'a>],
    /// The answer with every document's last real token perturbed (causal requests).
    pub causality: Option<&'a [f64]>,
}

/// How a rule judges an attention answer (`None`: it does not apply).
pub type AttentionJudge = fn(&AttentionInput<'_>) -> Option<Checked>;

// ---- logged values ------------------------------------------------------------------------------

/// What kind of number a logged value is, which picks its rule (and invariant).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum LoggedKind {
    /// A token or sequence count (TOKENS-CP): exact.
    Count,
    /// FLOPs or an attention sum (FLOPS): exact when logged as an integer.
    Flops,
    /// A rate (TFLOP/s, MFU, tokens/s) or a ratio (MFU-PAD): within the tolerance.
    Rate,
}

impl LoggedKind {
    /// The kind of a key of the step record (`thdcheck metrics --json`, dotted), which picks
    /// the rule that judges a logged value of it: attention sums, sequence-length sums and
    /// FLOPs (not TFLOP/s) are FLOPS; token and sequence counts (not per second) are counts;
    /// everything else (rates, MFU, fractions) is a rate.
    ///
    /// # Example
    /// ```
    /// use rules::checks::LoggedKind;
    /// assert_eq!(LoggedKind::of_record_key("batch.flops.useful"), LoggedKind::Flops);
    /// assert_eq!(LoggedKind::of_record_key("batch.tflops_per_gpu.useful"), LoggedKind::Rate);
    /// assert_eq!(LoggedKind::of_record_key("batch.tokens.valid"), LoggedKind::Count);
    /// assert_eq!(LoggedKind::of_record_key("batch.tokens_per_second"), LoggedKind::Rate);
    /// ```
    pub fn of_record_key(record_key: &str) -> LoggedKind {
        if record_key.contains("flops.") && !record_key.contains("tflops")
            || record_key.ends_with(".flops")
            || record_key.contains("sum_squares")
            || record_key.contains("seqlen")
        {
            LoggedKind::Flops
        } else if record_key.contains("tokens.") && !record_key.contains("per_second")
            || record_key.contains("sequences.")
            || record_key.contains(".seqs")
        {
            LoggedKind::Count
        } else {
            LoggedKind::Rate
        }
    }
}
