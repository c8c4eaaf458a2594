//! LAYOUT zoo for the formats beyond offsets: a 4-D mask that lets two documents see each
//! other, an EOS packer that loses a document's EOS, a side tensor one token short.

use thd::collate::Document;

use crate::strategies::{EosCase, SftCase};
use crate::subjects::{
    Collated, EosPack, EosPacker, MaskBuilder, SideTensors, advantages, block_diagonal, documents,
    loss_mask, next_token_logprobs,
};

/// A block-diagonal mask builder that walks the boundaries between documents one short
/// (`range(1, len(starts) - 1)`): the last boundary is never reset, so the last two documents of
/// the pack form one block and attend to each other (the class of a 4-D mask built without
/// `reset_attention_mask` at every end of document, Megatron-LM `get_ltor_masks_and_position_ids`).
#[derive(Debug, Clone, Copy, Default)]
pub struct MaskNotReset;

impl MaskBuilder for MaskNotReset {
    fn name(&self) -> &str {
        "zoo::MaskNotReset"
    }

    fn build_mask(&self, pack: &Collated, bidirectional: bool) -> Vec<bool> {
        let (mut blocks, mock) = documents(pack);
        if blocks.len() >= 2 {
            let last = blocks.pop().expect("two blocks");
            let before = blocks.pop().expect("two blocks");
            blocks.push(before.start..last.end);
        }
        blocks.extend(mock);
        block_diagonal(pack.input_ids.len(), &blocks, bidirectional)
    }
}

/// An EOS-appending packer that appends the EOS before truncating each document to its
/// maximum length (`(ids + [eos])[:max_len]`, or `tokenizer(text + eos_token, truncation=True,
/// max_length=max_len)`): a document at the maximum loses its EOS and runs into the next one.
#[derive(Debug, Clone, Copy, Default)]
pub struct EosTruncatedAway;

impl EosPacker for EosTruncatedAway {
    fn name(&self) -> &str {
        "zoo::EosTruncatedAway"
    }

    fn pack(&self, case: &EosCase) -> Result<EosPack, String> {
        let eos = case.eos_token_id();
        let docs: Vec<Vec<i64>> = case
            .sft
            .examples()
            .into_iter()
            .map(|Document { mut input_ids, .. }| {
                input_ids.push(eos);
                input_ids.truncate(case.max_doc_len);
                input_ids
            })
            .collect();
        Ok(EosPack::cut(&docs, case.row_width, eos))
    }
}

/// Per-token log-probs gathered over `logits[:-1]` against `input_ids[1:]` and shipped as they
/// are, not padded back to `T` (the trailing 0 of the roll convention forgotten): `old_logprobs`
/// is one entry short, and every later position pairs with the wrong token's log-prob.
#[derive(Debug, Clone, Copy, Default)]
pub struct LogprobsOneShort;

impl SideTensors for LogprobsOneShort {
    fn name(&self) -> &str {
        "zoo::LogprobsOneShort"
    }

    fn side_tensors(&self, case: &SftCase, pack: &Collated) -> Vec<(String, Vec<f64>)> {
        vec![
            ("old_logprobs".into(), next_token_logprobs(case, pack)),
            ("advantages".into(), advantages(case, pack)),
            ("loss_mask".into(), loss_mask(pack)),
        ]
    }
}
