//! What a rule of one pack is given: the [`LayoutView`] of a batch (plain slices, as a
//! collator emits them, with the names its file gives them), which of its segments are mock
//! ([`mock_segments`]), the run's [`BatchOptions`], and what a collator rule sees
//! ([`CollatorPack`]). Plain data, no rule: the rules of LAYOUT (`layout.rs`), of one pack
//! (`batch.rs`, `block_mask.rs`, `eos.rs`, `cp_shard.rs`) and the registry all read it.

use std::ops::Range;

use thd::{IGNORE_INDEX, LabelConvention};

use crate::Checked;
use crate::checks::ints::IntSlice;
use crate::contract::Contract;

/// What the user states that the batch cannot.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct BatchOptions {
    /// Check that the batch shards over this many CP ranks.
    pub cp_size: Option<usize>,
    /// Check that `T` is a multiple of this.
    pub pad_to_multiple_of: Option<usize>,
    /// Causal LM: check every valid label against the token it predicts; useful work is the
    /// exact triangle `Σ s(s+1)/2`.
    pub causal: bool,
    /// Masked LM (ESM, BERT): each label is the target at its own position, nothing is
    /// shifted, so no prediction can cross a boundary and `cross-doc-label` does not apply.
    pub masked_lm: bool,
}

/// The names of a batch's tensors, as the user's file spells them: messages quote these.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyNames {
    /// Token ids.
    pub input_ids: String,
    /// Real offsets (`cu_seq_lens_q`, `cu_seqlens`, `seq_lens`, ...).
    pub cu_seqlens: String,
    /// Storage offsets.
    pub cu_seqlens_padded: String,
    /// Key offsets (`cu_seq_lens_k`, `cu_seqlens_kv`).
    pub cu_seqlens_k: String,
    /// The declared maximum segment length (`max_length_q`, `max_seqlen`).
    pub max_seqlen: String,
    /// The mask (`attention_mask`, 1 = real; `padding_mask`, 1 = pad).
    pub mask: String,
    /// Labels.
    pub labels: String,
    /// Position ids.
    pub position_ids: String,
    /// Sequence index.
    pub seq_idx: String,
    /// The number of leading real segments.
    pub num_real_seqs: String,
}

impl Default for KeyNames {
    fn default() -> Self {
        Self {
            input_ids: "input_ids".into(),
            cu_seqlens: "cu_seqlens".into(),
            cu_seqlens_padded: "cu_seqlens_padded".into(),
            cu_seqlens_k: "cu_seqlens_k".into(),
            max_seqlen: "max_seqlen".into(),
            mask: "attention_mask".into(),
            labels: "labels".into(),
            position_ids: "position_ids".into(),
            seq_idx: "seq_idx".into(),
            num_real_seqs: "num_real_seqs".into(),
        }
    }
}

/// The default key names, for views that do not name their own.
fn default_keys() -> &'static KeyNames {
    static KEYS: std::sync::OnceLock<KeyNames> = std::sync::OnceLock::new();
    KEYS.get_or_init(KeyNames::default)
}

/// A 4-D attention mask summarised per query token, `T` entries row-major over `[B, S]`.
///
/// ```text
/// spans[t] = [lo, hi)   the hull of the keys query t may attend to, in flattened token indices
///                       (row b's keys are b·S .. (b+1)·S); lo == hi: no key at all
/// gaps                  the queries whose allowed keys are not one contiguous interval (sorted)
/// ```
///
/// # Example
/// ```
/// use rules::checks::{BlockMask, IntSlice, LayoutView, block_mask};
/// // Two documents of 2 tokens; the mask lets token 2 (the second document's first) see token 1.
/// let spans = [[0, 1], [0, 2], [1, 3], [2, 4]];
/// let view = LayoutView {
///     num_tokens: 4,
///     cu_seqlens: IntSlice::from(&[0, 2, 4]),
///     block_mask: Some(BlockMask { key: "attention_mask", spans: &spans, gaps: &[] }),
///     ..Default::default()
/// };
/// let o = block_mask(&view, &[false, false]);
/// let v = o.violation.unwrap();
/// assert_eq!((v.id, v.at.segment, v.at.token), ("block-mask", Some(1), Some(2)));
/// assert_eq!(v.expected, "keys [2, 3): segment 1's tokens 2..=2, up to the query (causal)");
/// assert_eq!(v.got, "query 2 sees keys [1, 3)");
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct BlockMask<'a> {
    /// The mask's name in the batch (`attention_mask`).
    pub key: &'a str,
    /// Per query token, `[lo, hi)`: the hull of the keys it may attend to.
    pub spans: &'a [[i64; 2]],
    /// The queries whose allowed keys are not one interval, sorted.
    pub gaps: &'a [usize],
}

/// A packed batch as plain data (the tensors a collator emits, int64 or int32 as stored),
/// flattened row-major to `T` tokens.
///
/// Only `num_tokens` and `cu_seqlens` are required; every other field is checked when present.
/// Nothing here is a `thd` layout type: the rules validate the offsets themselves.
#[derive(Debug, Clone, Copy, Default)]
pub struct LayoutView<'a> {
    /// Stored tokens `T` (the length of `input_ids`).
    pub num_tokens: usize,
    /// Rows of the stored tensors (`B` of `[B, S]`); 0 or 1 for `[T]`.
    pub rows: usize,
    /// Token ids, `[T]`, when at hand.
    pub input_ids: Option<IntSlice<'a>>,
    /// Real offsets, `B + 1` entries.
    pub cu_seqlens: IntSlice<'a>,
    /// Storage offsets when segments are padded; real tokens of segment `i` start at
    /// `cu_seqlens_padded[i]`.
    pub cu_seqlens_padded: Option<IntSlice<'a>>,
    /// Key offsets (`cu_seq_lens_k`), as stored.
    pub cu_seqlens_k: Option<IntSlice<'a>>,
    /// The offsets the key offsets must equal (the stored query offsets); `cu_seqlens` if `None`.
    pub cu_seqlens_q_stored: Option<IntSlice<'a>>,
    /// `max_seqlen` / `max_length_q` as declared.
    pub max_seqlen: Option<i64>,
    /// Position ids, `[T]`.
    pub position_ids: Option<IntSlice<'a>>,
    /// Labels, `[T]`, -100 where ignored.
    pub labels: Option<IntSlice<'a>>,
    /// How labels line up with logits.
    pub label_convention: LabelConvention,
    /// `true` where the mask says the token is real (attention_mask 1, padding_mask 0).
    pub mask: Option<&'a [bool]>,
    /// The mask is a padding mask (1 = pad): messages show its values that way.
    pub mask_is_padding: bool,
    /// Sequence index of every token.
    pub seq_idx: Option<IntSlice<'a>>,
    /// How many leading segments are real; the rest are mock. `None`: not stated.
    pub num_real_seqs: Option<usize>,
    /// Automodel BSHD rows: per row, the sum of its slots (checked against `S = T / rows`).
    pub row_slots: Option<&'a [i64]>,
    /// What the batch cannot show and its rules read: the resolved contract (the pad id, the
    /// first position id, the objective, the attention, where padding sits, EOS-delimited
    /// documents; [`crate::contract::Contract`]).
    pub facts: Contract,
    /// The documents were read from where the position ids restart (no offsets in the batch):
    /// a 2-D attention mask beside them is what the attention implementations would use.
    pub boundaries_from_positions: bool,
    /// The 4-D attention mask (`[B, 1, S, S]`, Megatron's `reset_attention_mask`, a Hugging
    /// Face boolean or additive mask), summarised per query token; judged by `block-mask`.
    /// `None`: the batch has none.
    pub block_mask: Option<BlockMask<'a>>,
    /// Per-token tensors shipped beside the tokens (log-probs, advantages, rolled targets, loss
    /// masks of RL trainers): each must have `T` entries (`token-counts`).
    pub side_tensors: &'a [SideTensor<'a>],
    /// The file's key names; `None` for the default names.
    pub keys: Option<&'a KeyNames>,
}

/// A per-token tensor beside the tokens (`old_logprobs`, `advantages`, `loss_mask`, ...), as the
/// `token-counts` rule needs it: its name and how many entries it holds.
///
/// # Example
/// ```
/// use rules::checks::{IntSlice, LayoutView, SideTensor, token_counts};
/// let side = [SideTensor { key: "old_logprobs", entries: 4, per_prediction: false }];
/// let view = LayoutView {
///     num_tokens: 5,
///     cu_seqlens: IntSlice::from(&[0, 5]),
///     side_tensors: &side,
///     ..Default::default()
/// };
/// let o = token_counts(&view);
/// assert_eq!(
///     o.detail,
///     "`old_logprobs`: expected 5, got 4 — one entry short: a value per position of T − 1 \
///      (a shift by one, not padded back to T?)"
/// );
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct SideTensor<'a> {
    /// The tensor's name in the batch.
    pub key: &'a str,
    /// Its number of entries along the token axis (flattened over rows).
    pub entries: usize,
    /// One entry per prediction rather than per token: each non-empty slot's length minus one
    /// (log-probs of the next token, `T − 1` per sequence), a profile's `prediction_tensors`.
    pub per_prediction: bool,
}

impl<'a> LayoutView<'a> {
    /// The width `S` of each row of a `[B, S]` batch with more than one row: rows are separate
    /// sequences to the loss (Hugging Face shifts labels per row) and to a dense kernel.
    pub fn row_width(&self) -> Option<usize> {
        (self.rows > 1 && self.num_tokens.is_multiple_of(self.rows))
            .then(|| self.num_tokens / self.rows)
    }

    /// The key names.
    pub fn keys(&self) -> &'a KeyNames {
        match self.keys {
            Some(k) => k,
            None => default_keys(),
        }
    }

    /// Segments `B`, mock ones included.
    pub fn segments(&self) -> usize {
        self.cu_seqlens.len().saturating_sub(1)
    }

    /// Storage offsets: padded if present, real otherwise.
    #[inline]
    pub fn storage(&self) -> IntSlice<'a> {
        self.cu_seqlens_padded.unwrap_or(self.cu_seqlens)
    }

    /// Tokens of segment `i`'s slot. Valid offsets assumed ([`check_offsets`](crate::checks::check_offsets)).
    #[inline]
    pub fn slot(&self, i: usize) -> Range<usize> {
        let s = self.storage();
        s.at(i) as usize..s.at(i + 1) as usize
    }

    /// Real length `sᵢ`.
    #[inline]
    pub fn real_len(&self, i: usize) -> usize {
        (self.cu_seqlens.at(i + 1) - self.cu_seqlens.at(i)) as usize
    }

    /// Tokens of segment `i`'s real part: the first `sᵢ` tokens of its slot (clamped to the
    /// slot, so that a slot shorter than the real length never indexes past it).
    #[inline]
    pub fn real(&self, i: usize) -> Range<usize> {
        let slot = self.slot(i);
        slot.start..slot.start + self.real_len(i).min(slot.len())
    }

    /// The segment whose slot holds token `t`.
    pub fn segment_of(&self, t: usize) -> Option<usize> {
        let s = self.storage();
        let i = s.partition_point(|c| c as usize <= t);
        (i >= 1 && i < s.len()).then(|| i - 1)
    }

    /// `true` on the real tokens of the segments not marked in `mock`.
    pub fn real_token_mask(&self, mock: &[bool]) -> Vec<bool> {
        let mut real = vec![false; self.num_tokens];
        for i in 0..self.segments() {
            if !mock.get(i).copied().unwrap_or(false) {
                let r = self.real(i);
                if let Some(s) = real.get_mut(r) {
                    s.fill(true);
                }
            }
        }
        real
    }

    /// The tokens [`LayoutView::real_token_mask`] leaves `false`, as ascending ranges, without
    /// a vector of `T` flags: each mock segment's slot, the padding after each other segment's
    /// real tokens, and the tail after the last slot. Valid offsets assumed ([`check_offsets`](crate::checks::check_offsets)):
    /// the slots then tile `0..storage[B]` in order.
    pub fn padding_ranges<'m>(
        &self,
        mock: &'m [bool],
    ) -> impl Iterator<Item = Range<usize>> + use<'a, 'm> {
        let view = *self;
        let t = view.num_tokens;
        let tail = view.storage().last().map_or(0, |e| (e.max(0) as usize).min(t))..t;
        (0..view.segments())
            .map(move |i| {
                let slot = view.slot(i);
                let start = if mock.get(i).copied().unwrap_or(false) {
                    slot.start
                } else {
                    view.real(i).end
                };
                start.min(t)..slot.end.min(t)
            })
            .chain(std::iter::once(tail))
            .filter(|r| !r.is_empty())
    }
}

/// What a collator rule sees in `thdcheck fuzz collator`, after `check`'s rules held on the
/// batch: the examples the collator was given (those it keeps) and the pack it returned;
/// [`crate::checks::judge_collator`] runs the registry's collator rules on it.
#[derive(Debug, Clone, Copy)]
pub struct CollatorPack<'a> {
    /// The examples' token ids, as the pack must hold them.
    pub examples: &'a [&'a [i64]],
    /// The pack.
    pub view: &'a LayoutView<'a>,
    /// The request's static length, if any.
    pub max_seq_length: Option<u64>,
}

/// How a collator rule judges one pack: `None` where it does not apply.
pub type CollatorJudge = for<'a> fn(&CollatorPack<'a>) -> Option<Checked>;

/// Which segments are mock: past `num_real_seqs` when stated (and in range), else the non-empty
/// segments whose real tokens are all masked out and carry no label.
pub fn mock_segments(view: &LayoutView<'_>) -> Vec<bool> {
    let n = view.segments();
    match view.num_real_seqs {
        Some(k) if k <= n => (0..n).map(|i| i >= k).collect(),
        Some(_) => vec![false; n],
        None => (0..n).map(|i| all_padding(view, i)).collect(),
    }
}

/// A non-empty segment whose real tokens are all masked out (or, without a mask, all the pad
/// id) and carry no label.
pub(crate) fn all_padding(view: &LayoutView<'_>, i: usize) -> bool {
    let r = view.real(i);
    let padding = match (view.mask, view.facts.pad_token_id, view.input_ids) {
        (Some(mask), _, _) => mask[r.clone()].iter().all(|&m| !m),
        (None, Some(pad), Some(ids)) => ids.slice(r.clone()).iter().all(|x| x == pad),
        _ => return false,
    };
    // Where the stack puts its padding as a segment of its own (a profile's `padding_segments`),
    // a row's final segment of pad ids is that padding whatever its labels: trained labels on it
    // are `pad-labels`' violation, not a document of pad tokens.
    let by_design = view.facts.padding_segment_by_design()
        && view.mask.is_none()
        && (r.end == view.num_tokens || view.row_width().is_some_and(|w| r.end.is_multiple_of(w)));
    !r.is_empty()
        && padding
        && (by_design || view.labels.is_none_or(|l| l.slice(r).iter().all(|x| x == IGNORE_INDEX)))
}
