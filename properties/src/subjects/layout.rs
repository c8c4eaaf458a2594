//! LAYOUT subject: a collator.

use thd::collate::{
    CpPadding, Document, FlattenOptions, MockPadding, Overflow, StaticPadding, flatten, pad_for_cp,
    pad_to_multiple_of,
};
use thd::{LabelConvention, PackedBatch};

use super::{ThdSubject, failed, wide};
use crate::checks::{IntSlice, LayoutView, check_documents, check_layout};
use crate::strategies::{CollateCase, Padding};
use crate::{Checked, Invariant};
use rules::contract::Contract;

/// A collated pack as plain data.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Collated {
    /// Token ids.
    pub input_ids: Vec<i64>,
    /// Labels.
    pub labels: Vec<i64>,
    /// Position ids.
    pub position_ids: Vec<i64>,
    /// Real offsets.
    pub cu_seqlens: Vec<i64>,
    /// Storage offsets, if segments are padded.
    pub cu_seqlens_padded: Option<Vec<i64>>,
    /// Leading real segments, if there are mock ones.
    pub num_real_seqs: Option<usize>,
    /// How labels line up with logits.
    pub label_convention: LabelConvention,
}

impl Collated {
    /// The plain data of a validated batch.
    pub fn from_batch(b: &PackedBatch) -> Self {
        Self {
            input_ids: b.input_ids().to_vec(),
            labels: b.labels().to_vec(),
            position_ids: b.position_ids().to_vec(),
            cu_seqlens: wide(b.cu_seqlens()),
            cu_seqlens_padded: b.cu_seqlens_padded().map(wide),
            num_real_seqs: b.num_real_seqs(),
            label_convention: b.label_convention(),
        }
    }

    /// The LAYOUT view, with RoPE positions starting at `position_base`.
    pub fn view(&self, position_base: i64) -> LayoutView<'_> {
        LayoutView {
            num_tokens: self.input_ids.len(),
            input_ids: Some((&self.input_ids).into()),
            cu_seqlens: IntSlice::from(&self.cu_seqlens),
            cu_seqlens_padded: self.cu_seqlens_padded.as_deref().map(IntSlice::from),
            position_ids: Some((&self.position_ids).into()),
            labels: Some((&self.labels).into()),
            label_convention: self.label_convention,
            num_real_seqs: self.num_real_seqs,
            facts: Contract { position_base: Some(position_base), ..Contract::default() },
            ..Default::default()
        }
    }
}

/// A collator: examples in, one pack out, with the padding asked for.
pub trait Collator {
    /// A short name for reports.
    fn name(&self) -> &str;

    /// Collates `examples` with `padding`; position ids start at `position_base`.
    ///
    /// # Errors
    /// The collator's message.
    fn collate(
        &self,
        examples: &[Document],
        padding: &Padding,
        position_base: i64,
    ) -> Result<Collated, String>;
}

/// `thd`'s collation of `examples` with `padding` (flatten, then the padding asked for).
///
/// # Errors
/// `thd`'s error.
pub fn collate_reference(examples: &[Document], padding: &Padding) -> thd::Result<PackedBatch> {
    let flat = |static_padding| {
        flatten(examples, &FlattenOptions { static_padding, ..Default::default() })
    };
    let mock =
        |multiple_of, max_mock_len| MockPadding { multiple_of, pad_token_id: 1, max_mock_len };
    match *padding {
        Padding::None => flat(None),
        Padding::Static { extra } => {
            let total: usize = examples.iter().map(Document::len).sum();
            flat(Some(StaticPadding {
                max_seq_length: total + extra,
                pad_token_id: 0,
                overflow: Overflow::Error,
            }))
        }
        Padding::Mock { multiple_of, max_mock_len } => {
            pad_to_multiple_of(&flat(None)?, &mock(multiple_of, max_mock_len))
        }
        Padding::Cp { cp } => pad_for_cp(&flat(None)?, &CpPadding::for_cp(cp, 0)),
        Padding::CpThenMock { cp, multiple_of } => pad_to_multiple_of(
            &pad_for_cp(&flat(None)?, &CpPadding::for_cp(cp, 0))?,
            &mock(multiple_of, None),
        ),
    }
}

impl Collator for ThdSubject {
    fn name(&self) -> &str {
        "thd::collate"
    }

    fn collate(
        &self,
        examples: &[Document],
        padding: &Padding,
        position_base: i64,
    ) -> Result<Collated, String> {
        let mut c =
            Collated::from_batch(&collate_reference(examples, padding).map_err(|e| e.to_string())?);
        // thd numbers positions from 0; a RoBERTa-aware collator offsets every real position.
        let b = c.cu_seqlens.len() - 1;
        for i in 0..b {
            let start = c.cu_seqlens_padded.as_ref().unwrap_or(&c.cu_seqlens)[i] as usize;
            let len = (c.cu_seqlens[i + 1] - c.cu_seqlens[i]) as usize;
            for p in &mut c.position_ids[start..start + len] {
                *p += position_base;
            }
        }
        Ok(c)
    }
}

/// LAYOUT: collate the case's examples with `subject` and check the pack and its documents.
///
/// # Errors
/// The first [`crate::Violation`], with the padding as context.
pub fn run_layout(subject: &dyn Collator, case: &CollateCase) -> Checked {
    let examples = case.sft.examples();
    let out = subject
        .collate(&examples, &case.padding, case.position_base)
        .map_err(|e| failed(Invariant::Layout, subject.name(), e))?;
    let ctx = format!("{}, {}", subject.name(), case.padding);
    let view = out.view(case.position_base);
    check_layout(&view).map_err(|v| v.within(&ctx))?;
    let docs: Vec<&[i64]> = examples.iter().map(|e| e.input_ids.as_slice()).collect();
    check_documents(&docs, &view).map_err(|v| v.within(&ctx))
}
