//! LAYOUT subjects for the packed-batch formats beyond offsets: a 4-D attention-mask builder,
//! an EOS-appending packer, and a producer of per-token side tensors.
//!
//! `thd` has none of the three, so [`ThdSubject`]'s implementations here are written the
//! obvious way on top of `thd`'s collation: the reference each zoo variant departs from.

use std::ops::Range;

use thd::IGNORE_INDEX;
use thd::collate::Document;

use super::layout::{Collated, Collator};
use super::{ThdSubject, failed};
use crate::checks::{BlockMaskSummary, IntSlice, LayoutView, SideTensor, check_layout};
use crate::strategies::{CollateCase, EosCase, MaskCase, SftCase};
use crate::{Checked, Invariant};
use rules::contract::{Attention, Contract, DocumentsFact};

/// The real documents and the mock segments of a collated pack, as token ranges.
pub(crate) fn documents(c: &Collated) -> (Vec<Range<usize>>, Vec<Range<usize>>) {
    let storage = c.cu_seqlens_padded.as_deref().unwrap_or(&c.cu_seqlens);
    let n = c.cu_seqlens.len() - 1;
    let real = c.num_real_seqs.unwrap_or(n);
    let range = |i: usize| {
        let start = storage[i] as usize;
        start..start + (c.cu_seqlens[i + 1] - c.cu_seqlens[i]) as usize
    };
    ((0..real.min(n)).map(range).collect(), (real.min(n)..n).map(range).collect())
}

/// The dense `[1, 1, T, T]` mask (`true` = may attend) in which every block of `blocks` is a
/// document (causal, or bidirectional) and every other token sees itself only.
pub(crate) fn block_diagonal(t: usize, blocks: &[Range<usize>], bidirectional: bool) -> Vec<bool> {
    let mut allowed = vec![false; t * t];
    let mut owned = vec![false; t];
    for b in blocks {
        for q in b.clone() {
            owned[q] = true;
            for k in b.start..if bidirectional { b.end } else { q + 1 } {
                allowed[q * t + k] = true;
            }
        }
    }
    for q in (0..t).filter(|&q| !owned[q]) {
        allowed[q * t + q] = true;
    }
    allowed
}

/// A 4-D attention-mask builder: a collated pack in, its dense `[1, 1, T, T]` mask out
/// (`true` = may attend), as Megatron's `get_ltor_masks_and_position_ids` or a Hugging Face
/// collator that returns a 4-D mask builds it.
pub trait MaskBuilder {
    /// A short name for reports.
    fn name(&self) -> &str;

    /// The mask of `pack`: causal, or `bidirectional`.
    fn build_mask(&self, pack: &Collated, bidirectional: bool) -> Vec<bool>;
}

/// The reference: one block per real document (its real tokens), one per mock segment (the
/// kernel runs a mock segment as a sequence of its own), every other pad token seeing itself.
impl MaskBuilder for ThdSubject {
    fn name(&self) -> &str {
        "block-diagonal mask"
    }

    fn build_mask(&self, pack: &Collated, bidirectional: bool) -> Vec<bool> {
        let (mut blocks, mock) = documents(pack);
        blocks.extend(mock);
        block_diagonal(pack.input_ids.len(), &blocks, bidirectional)
    }
}

/// LAYOUT, `block-mask`: collate the case with `thd`, build its 4-D mask with `subject`, and
/// check the pack with the mask summarised per query (as a reader hands it over).
///
/// # Errors
/// The first [`crate::Violation`], with the builder, the direction and the padding as context.
///
/// # Example
/// ```
/// use proptest::strategy::{Strategy, ValueTree};
/// use proptest::test_runner::TestRunner;
/// use properties::strategies::{Sizes, arb_mask_case};
/// use properties::subjects::{ThdSubject, run_block_mask};
/// let case = arb_mask_case(Sizes::TINY).new_tree(&mut TestRunner::deterministic()).unwrap().current();
/// assert!(run_block_mask(&ThdSubject, &case).is_ok());
/// ```
pub fn run_block_mask(subject: &dyn MaskBuilder, case: &MaskCase) -> Checked {
    let c = &case.collate;
    let pack = ThdSubject
        .collate(&c.sft.examples(), &c.padding, c.position_base)
        .map_err(|e| failed(Invariant::Layout, "thd::collate", e))?;
    let t = pack.input_ids.len();
    let dense = subject.build_mask(&pack, case.bidirectional);
    if dense.len() != t * t {
        return Err(failed(
            Invariant::Layout,
            subject.name(),
            format!("a mask of {} entries for {t} tokens", dense.len()),
        ));
    }
    let summary = BlockMaskSummary::from_dense(1, t, &dense);
    let view = LayoutView {
        block_mask: Some(summary.view("attention_mask")),
        facts: Contract {
            attention: case.bidirectional.then_some(Attention::Bidirectional),
            ..pack.view(c.position_base).facts
        },
        ..pack.view(c.position_base)
    };
    let how = if case.bidirectional { "bidirectional" } else { "causal" };
    check_layout(&view).map_err(|v| v.within(format!("{}, {how}, {}", subject.name(), c.padding)))
}

/// A pretraining pack: documents each ending with the EOS, concatenated and cut into rows.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct EosPack {
    /// Token ids, `rows · width` of them (the last row padded with the EOS id).
    pub input_ids: Vec<i64>,
    /// Offsets of the pieces of documents, flattened over the rows (a document cut at a row's
    /// end is two segments).
    pub cu_seqlens: Vec<i64>,
    /// Rows.
    pub rows: usize,
}

impl EosPack {
    /// Concatenates `docs` (their EOS already appended) and cuts the stream into rows of
    /// `row_width` tokens (one row if `None`), padding the last row with `pad`.
    ///
    /// # Example
    /// ```
    /// use properties::subjects::EosPack;
    /// let p = EosPack::cut(&[vec![5, 2], vec![6, 7, 2]], Some(3), 2);
    /// assert_eq!(p.input_ids, [5, 2, 6, 7, 2, 2]);
    /// assert_eq!(p.cu_seqlens, [0, 2, 3, 5]);
    /// assert_eq!(p.rows, 2);
    /// ```
    pub fn cut(docs: &[Vec<i64>], row_width: Option<usize>, pad: i64) -> Self {
        let mut input_ids: Vec<i64> = docs.concat();
        let total = input_ids.len();
        let w = row_width.unwrap_or(total).max(1);
        let rows = total.div_ceil(w).max(1);
        input_ids.resize(rows * w, pad);
        let mut ends: Vec<usize> = docs
            .iter()
            .scan(0usize, |end, d| {
                *end += d.len();
                Some(*end)
            })
            .chain((1..rows).map(|r| r * w).filter(|&b| b < total))
            .collect();
        ends.sort_unstable();
        ends.dedup();
        let cu_seqlens = std::iter::once(0).chain(ends.into_iter().map(|e| e as i64)).collect();
        Self { input_ids, cu_seqlens, rows }
    }

    /// The LAYOUT view: documents end with `eos`.
    pub fn view(&self, eos: i64) -> LayoutView<'_> {
        LayoutView {
            num_tokens: self.input_ids.len(),
            rows: self.rows,
            input_ids: Some(IntSlice::from(self.input_ids.as_slice())),
            cu_seqlens: IntSlice::from(&self.cu_seqlens),
            facts: Contract {
                eos_token_id: Some(eos),
                documents: Some(DocumentsFact::Eos),
                ..Contract::default()
            },
            ..Default::default()
        }
    }
}

/// An EOS-appending packer: documents in, a pretraining pack out.
pub trait EosPacker {
    /// A short name for reports.
    fn name(&self) -> &str;

    /// Packs the case's documents, each ending with the EOS and at most `max_doc_len` tokens
    /// long, into rows.
    ///
    /// # Errors
    /// The packer's message.
    fn pack(&self, case: &EosCase) -> Result<EosPack, String>;
}

/// The reference: each document truncated to `max_doc_len − 1` tokens, then its EOS appended
/// (truncation before the EOS, so it is never cut away).
impl EosPacker for ThdSubject {
    fn name(&self) -> &str {
        "EOS packer"
    }

    fn pack(&self, case: &EosCase) -> Result<EosPack, String> {
        let eos = case.eos_token_id();
        let docs: Vec<Vec<i64>> = case
            .sft
            .examples()
            .into_iter()
            .map(|Document { mut input_ids, .. }| {
                input_ids.truncate(case.max_doc_len - 1);
                input_ids.push(eos);
                input_ids
            })
            .collect();
        Ok(EosPack::cut(&docs, case.row_width, eos))
    }
}

/// LAYOUT, `eos-delimited`: pack the case with `subject` and check the pack.
///
/// # Errors
/// The first [`crate::Violation`], with the packer and the rows as context.
///
/// # Example
/// ```
/// use proptest::strategy::{Strategy, ValueTree};
/// use proptest::test_runner::TestRunner;
/// use properties::strategies::{Sizes, arb_eos_case};
/// use properties::subjects::{ThdSubject, run_eos_pack};
/// let case = arb_eos_case(Sizes::TINY).new_tree(&mut TestRunner::deterministic()).unwrap().current();
/// assert!(run_eos_pack(&ThdSubject, &case).is_ok());
/// ```
pub fn run_eos_pack(subject: &dyn EosPacker, case: &EosCase) -> Checked {
    let pack = subject.pack(case).map_err(|e| failed(Invariant::Layout, subject.name(), e))?;
    let rows = match case.row_width {
        Some(w) => format!("rows of {w}"),
        None => "one row".into(),
    };
    let ctx =
        format!("{}, documents of at most {} tokens, {rows}", subject.name(), case.max_doc_len);
    check_layout(&pack.view(case.eos_token_id())).map_err(|v| v.within(ctx))
}

/// A producer of per-token side tensors (an RL trainer's `old_logprobs`, `advantages`,
/// `loss_mask`), shipped beside a collated pack.
pub trait SideTensors {
    /// A short name for reports.
    fn name(&self) -> &str;

    /// The side tensors of `pack`, collated from `case`: `(key, values)`.
    fn side_tensors(&self, case: &SftCase, pack: &Collated) -> Vec<(String, Vec<f64>)>;
}

/// `log_softmax(logits[t])[ids[t + 1]]` for `t < T − 1`: the log-prob of the next token, the
/// gather every RL trainer does over `logits[:-1]` and `input_ids[1:]`.
pub(crate) fn next_token_logprobs(case: &SftCase, pack: &Collated) -> Vec<f64> {
    let t = pack.input_ids.len();
    let storage = pack.cu_seqlens_padded.as_deref().unwrap_or(&pack.cu_seqlens);
    let slots: Vec<u32> = storage.windows(2).map(|w| (w[1] - w[0]) as u32).collect();
    let logits = case.logits(&slots, t);
    let v = case.vocab;
    (0..t.saturating_sub(1))
        .map(|q| {
            let row = &logits[q * v..(q + 1) * v];
            let max = row.iter().copied().fold(f64::NEG_INFINITY, f64::max);
            let lse = max + row.iter().map(|x| (x - max).exp()).sum::<f64>().ln();
            let next = pack.input_ids[q + 1].clamp(0, v as i64 - 1) as usize;
            row[next] - lse
        })
        .collect()
}

/// The reference: next-token log-probs padded back to `T` with a trailing 0 (the position with
/// no next token), one advantage per document broadcast over its real tokens, and the loss mask
/// of the labels.
impl SideTensors for ThdSubject {
    fn name(&self) -> &str {
        "side tensors"
    }

    fn side_tensors(&self, case: &SftCase, pack: &Collated) -> Vec<(String, Vec<f64>)> {
        let mut logprobs = next_token_logprobs(case, pack);
        logprobs.push(0.0);
        vec![
            ("old_logprobs".into(), logprobs),
            ("advantages".into(), advantages(case, pack)),
            ("loss_mask".into(), loss_mask(pack)),
        ]
    }
}

/// One advantage per real document, on its real tokens; 0 elsewhere.
pub(crate) fn advantages(case: &SftCase, pack: &Collated) -> Vec<f64> {
    let mut out = vec![0.0; pack.input_ids.len()];
    for (i, r) in documents(pack).0.into_iter().enumerate() {
        out[r].fill(crate::strategies::noise(case.seed, &[4, i as u64]));
    }
    out
}

/// 1 where the label is a target, 0 where it is -100.
pub(crate) fn loss_mask(pack: &Collated) -> Vec<f64> {
    pack.labels.iter().map(|&l| f64::from(u8::from(l != IGNORE_INDEX))).collect()
}

/// LAYOUT, `token-counts`: collate the case with `thd`, compute its side tensors with
/// `subject`, and check the pack with them.
///
/// # Errors
/// The first [`crate::Violation`], with the producer and the padding as context.
///
/// # Example
/// ```
/// use proptest::strategy::{Strategy, ValueTree};
/// use proptest::test_runner::TestRunner;
/// use properties::strategies::{Sizes, arb_collate_case};
/// use properties::subjects::{ThdSubject, run_side_tensors};
/// let case = arb_collate_case(Sizes::TINY).new_tree(&mut TestRunner::deterministic()).unwrap().current();
/// assert!(run_side_tensors(&ThdSubject, &case).is_ok());
/// ```
pub fn run_side_tensors(subject: &dyn SideTensors, case: &CollateCase) -> Checked {
    let pack = ThdSubject
        .collate(&case.sft.examples(), &case.padding, case.position_base)
        .map_err(|e| failed(Invariant::Layout, "thd::collate", e))?;
    let tensors = subject.side_tensors(&case.sft, &pack);
    let side: Vec<SideTensor<'_>> = tensors
        .iter()
        .map(|(key, v)| SideTensor { key, entries: v.len(), per_prediction: false })
        .collect();
    let view = LayoutView { side_tensors: &side, ..pack.view(case.position_base) };
    check_layout(&view).map_err(|v| v.within(format!("{}, {}", subject.name(), case.padding)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_reference_mask_is_block_diagonal() {
        // Documents 0..2 and 2..3, a pad token at 3.
        let m = block_diagonal(4, &[0..2, 2..3], false);
        let rows: Vec<Vec<u8>> =
            m.chunks(4).map(|r| r.iter().map(|&b| u8::from(b)).collect()).collect();
        assert_eq!(rows, [[1, 0, 0, 0], [1, 1, 0, 0], [0, 0, 1, 0], [0, 0, 0, 1]]);
        let doc = 0..2;
        let m = block_diagonal(3, std::slice::from_ref(&doc), true);
        assert_eq!(&m[..3], [true, true, false]);
    }

    #[test]
    fn an_eos_pack_cuts_documents_at_row_ends() {
        // Documents of 3 and 4 tokens (EOS = 9) in rows of 3: the second is cut twice.
        let p = EosPack::cut(&[vec![1, 2, 9], vec![3, 4, 5, 9]], Some(3), 9);
        assert_eq!(p.input_ids, [1, 2, 9, 3, 4, 5, 9, 9, 9]);
        assert_eq!(p.cu_seqlens, [0, 3, 6, 7]);
        assert_eq!(p.rows, 3);
        let o = crate::checks::eos_delimited(&p.view(9), &[false; 3]);
        assert!(!o.is_violated(), "{o:?}");
        assert!(o.notes[0].starts_with("1 document cut by the pack length"), "{o:?}");
        // One row: the offsets are the documents'.
        assert_eq!(EosPack::cut(&[vec![1, 9], vec![9]], None, 9).cu_seqlens, [0, 2, 3]);
    }
}
