//! From a recipe to the rows of one optimizer step: seeded documents, the packer, the
//! collator and the padding, all through `thd`.
//!
//! ```text
//! documents  drawn in order from data.lengths (+ rejected, prompt share, image) with one
//!            SplitMix64 stream; token ids and MLM masks from per-document streams
//! step       dp · grad_acc micro-batches
//!   BSHD       micro_batch_size documents, each its own row statically padded to seq_length
//!   in_batch   micro_batch_size documents flattened into one row
//!   packer     pushes of packing.examples_per_push documents (bin packers pack each push
//!              as one window) until one pack per micro-batch is out
//! row        thd::collate::flatten → pad_for_cp (cp_divisibility) → pad_to_multiple_of (mock)
//!            DPO: collate_dpo (static_length) → concatenated
//! ```

use std::collections::BTreeSet;

use thd::collate::{
    self, CpPadding, DpoExample, DpoOptions, FlattenOptions, MockPadding, Overflow, StaticPadding,
};
use thd::pack::{
    self, BinPackingOptions, Pack, PackerSpec, SequentialOptions, TokenPackingOptions,
};
use thd::{CuSeqlens, IGNORE_INDEX, LabelConvention, PackedBatch, PackedBatchParts};

use crate::dist::SplitMix64;
use crate::error::pipeline_err;
use crate::recipe::{Format, MAX_DOCUMENTS, Recipe, RecipeObjective, Strategy};
use crate::{Error, Result};

/// Stream ids of the seeded draws (never renumber: every snapshot depends on them).
const STREAM_LENGTHS: u64 = 1;
const STREAM_TOKENS: u64 = 2;
const STREAM_MLM: u64 = 4;

/// One generated document (a DPO pair when `rejected_len > 0`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Doc {
    /// Tokens (image tokens + text); the chosen branch for DPO.
    pub len: u32,
    /// Rejected tokens (DPO), else 0.
    pub rejected_len: u32,
    /// Masked prefix (image tokens + prompt), shared by both DPO branches.
    pub prompt: u32,
    /// Patch grid `(h, w)` of the document's image.
    pub image: Option<(u32, u32)>,
}

/// The rows of one step and what the packer reported.
#[derive(Debug, Clone)]
pub(crate) struct Step {
    /// One entry per micro-batch (over all DP ranks); each holds its rows.
    pub micro_batches: Vec<Vec<PackedBatch>>,
    /// The packs (rows) the step uses, for packing statistics.
    pub packs: Vec<Pack>,
    /// Items the packer still held, or packed into later steps' packs.
    pub carried: u64,
    /// Items the packer dropped.
    pub dropped: u64,
    /// The documents of the step, by id.
    pub documents: Vec<Doc>,
}

/// The generator: documents by id, drawn lazily.
struct Docs<'a> {
    recipe: &'a Recipe,
    rng: SplitMix64,
    docs: Vec<Doc>,
}

impl<'a> Docs<'a> {
    fn new(recipe: &'a Recipe) -> Self {
        Self { recipe, rng: SplitMix64::stream(recipe.data.seed, STREAM_LENGTHS, 0), docs: vec![] }
    }

    fn draw(&mut self) -> u64 {
        let d = &self.recipe.data;
        let text = d.lengths.sample(&mut self.rng);
        let (image, image_tokens) = match &d.vision {
            None => (None, 0),
            Some(v) => {
                // In u64: a side rounded up to a multiple of m may pass u32 before validation
                // has bounded the image (golden::recipe::MAX_IMAGE_PATCHES); after it, both
                // sides and the image's tokens (≤ seq_length) fit u32.
                let m = u64::from(v.spatial_merge);
                let side = |g: u32| u64::from(g).div_ceil(m) * m;
                let h = side(v.grid_h.sample(&mut self.rng));
                let w = side(v.grid_w.sample(&mut self.rng));
                let fit = |x: u64| u32::try_from(x).unwrap_or(u32::MAX);
                (Some((fit(h), fit(w))), fit((h / m) * (w / m)))
            }
        };
        let rejected = d.rejected_lengths.as_ref().map_or(0, |r| r.sample(&mut self.rng));
        let prompt = match d.prompt_percent {
            None => image_tokens,
            Some([lo, hi]) => {
                let pct = self.rng.inclusive(u64::from(lo), u64::from(hi)) as u32;
                let text_both = if rejected > 0 { text.min(rejected) } else { text };
                image_tokens + (u64::from(text_both) * u64::from(pct) / 100) as u32
            }
        };
        self.docs.push(Doc { len: image_tokens + text, rejected_len: rejected, prompt, image });
        self.docs.len() as u64 - 1
    }

    fn pack_example(&self, id: u64) -> pack::Example {
        let d = self.docs[id as usize];
        if self.recipe.batch.objective == RecipeObjective::Dpo {
            pack::Example::pair(id, d.len, d.rejected_len)
        } else {
            pack::Example::single(id, d.len)
        }
    }

    /// Token ids of one branch (0 chosen, 1 rejected); the prompt is shared.
    fn tokens(&self, id: u64, branch: u64) -> Vec<i64> {
        let d = self.docs[id as usize];
        let vocab = self.recipe.loss_sample.vocab as u64;
        let seed = self.recipe.data.seed;
        let draw = |stream: &mut SplitMix64, n: u32| -> Vec<i64> {
            (0..n).map(|_| stream.below(vocab) as i64).collect()
        };
        let mut chosen = SplitMix64::stream(seed, STREAM_TOKENS, id);
        if branch == 0 {
            return draw(&mut chosen, d.len);
        }
        let mut ids = draw(&mut chosen, d.prompt.min(d.rejected_len));
        let mut rejected = SplitMix64::stream(seed, STREAM_TOKENS + 1, id);
        ids.extend(draw(&mut rejected, d.rejected_len - ids.len() as u32));
        ids
    }

    /// Labels of one branch at each token's own position (-100 where ignored).
    fn labels(&self, id: u64, ids: &[i64]) -> Vec<i64> {
        let d = self.docs[id as usize];
        let mut labels = ids.to_vec();
        match self.recipe.batch.objective {
            RecipeObjective::Clm => {}
            RecipeObjective::Sft | RecipeObjective::Dpo => {
                let p = (d.prompt as usize).min(labels.len());
                labels[..p].fill(IGNORE_INDEX);
            }
            RecipeObjective::Mlm => {
                // Special tokens (the first and last of a document) are never masked.
                let p = self.recipe.batch.mlm_probability.unwrap_or(0.0);
                let mut rng = SplitMix64::stream(self.recipe.data.seed, STREAM_MLM, id);
                let n = labels.len();
                for (t, l) in labels.iter_mut().enumerate() {
                    let inner = t > 0 && t + 1 < n;
                    if !(inner && rng.unit() < p) {
                        *l = IGNORE_INDEX;
                    }
                }
            }
        }
        labels
    }

    /// The collator example of one pack item (a whole document or a piece of one).
    fn example(&self, item: &pack::PackItem) -> collate::Document {
        let ids = self.tokens(item.id, 0);
        let labels = self.labels(item.id, &ids);
        let (a, n) = (item.offset as usize, item.lens.branches()[0] as usize);
        let mut piece = labels[a..a + n].to_vec();
        if self.recipe.batch.objective == RecipeObjective::Mlm
            && let Some(last) = piece.last_mut()
        {
            // Labels sit at their own position: a piece's end is a sequence end.
            *last = IGNORE_INDEX;
        }
        collate::Document::with_labels(ids[a..a + n].to_vec(), piece)
    }

    fn dpo_example(&self, id: u64) -> DpoExample {
        let branch = |b: u64| {
            let ids = self.tokens(id, b);
            let labels = self.labels(id, &ids);
            collate::Document::with_labels(ids, labels)
        };
        DpoExample { chosen: branch(0), rejected: branch(1), index: id as i64 }
    }
}

/// The rows and packs of one optimizer step.
pub(crate) fn build_step(recipe: &Recipe) -> Result<Step> {
    let micro_batches = recipe.parallel.dp() * recipe.batch.grad_acc;
    let mbs = recipe.batch.micro_batch_size;
    let mut docs = Docs::new(recipe);
    let mut step =
        Step { micro_batches: vec![], packs: vec![], carried: 0, dropped: 0, documents: vec![] };
    match (recipe.batch.format, recipe.packing.map(|p| p.strategy)) {
        (Format::Bshd, _) => {
            for _ in 0..micro_batches {
                let mut rows = vec![];
                for _ in 0..mbs {
                    let id = docs.draw();
                    let pack = Pack::new(vec![docs.pack_example(id).item()]);
                    rows.push(bshd_row(recipe, &docs, id)?);
                    step.packs.push(pack);
                }
                step.micro_batches.push(rows);
            }
        }
        (Format::Thd, Some(Strategy::InBatch) | None) => {
            for _ in 0..micro_batches {
                let ids: Vec<u64> = (0..mbs).map(|_| docs.draw()).collect();
                let pack = Pack::new(ids.iter().map(|&id| docs.pack_example(id).item()).collect());
                step.micro_batches.push(vec![thd_row(recipe, &docs, &pack)?]);
                step.packs.push(pack);
            }
        }
        (Format::Thd, Some(strategy)) => {
            let (packs, carried, dropped) =
                stream_packs(recipe, &mut docs, strategy, micro_batches as usize)?;
            for pack in &packs {
                let row = if recipe.batch.objective == RecipeObjective::Dpo {
                    dpo_row(recipe, &docs, pack)?
                } else {
                    thd_row(recipe, &docs, pack)?
                };
                step.micro_batches.push(vec![row]);
            }
            (step.packs, step.carried, step.dropped) = (packs, carried, dropped);
        }
    }
    let ids: BTreeSet<u64> = step.packs.iter().flat_map(Pack::ids).collect();
    step.documents = ids.iter().map(|&id| docs.docs[id as usize]).collect();
    Ok(step)
}

/// Pushes documents into the recipe's packer until `needed` packs are out; returns them with
/// the carried and dropped item counts.
fn stream_packs(
    recipe: &Recipe,
    docs: &mut Docs<'_>,
    strategy: Strategy,
    needed: usize,
) -> Result<(Vec<Pack>, u64, u64)> {
    let pk = recipe.packing.expect("a THD recipe with a packer has [packing]");
    let capacity = recipe.capacity();
    let bins = BinPackingOptions::default();
    let spec = match strategy {
        Strategy::TokenPacking => PackerSpec::TokenPacking {
            capacity,
            options: TokenPackingOptions {
                divisible_by: recipe.padding.cp_divisibility.map(|d| d as u32),
                split_samples: pk.split_samples,
                ..Default::default()
            },
        },
        Strategy::SequentialBudget => {
            PackerSpec::SequentialBudget { capacity, options: SequentialOptions::default() }
        }
        Strategy::FirstFit => PackerSpec::FirstFit { capacity, options: bins },
        Strategy::BestFit => PackerSpec::BestFit { capacity, options: bins },
        Strategy::FirstFitDecreasing => PackerSpec::FirstFitDecreasing { capacity, options: bins },
        Strategy::InBatch => unreachable!("in_batch has no packer"),
    };
    let offline =
        matches!(strategy, Strategy::FirstFit | Strategy::BestFit | Strategy::FirstFitDecreasing);
    let err = pipeline_err(recipe, "packer");
    let mut packer = spec.build().map_err(&err)?;
    let mut packs = vec![];
    while packs.len() < needed {
        if docs.docs.len() as u64 >= MAX_DOCUMENTS {
            return Err(Error::StepNotFilled {
                recipe: recipe.name.clone(),
                packs: packs.len(),
                needed,
                documents: MAX_DOCUMENTS,
            });
        }
        let ids: Vec<u64> = (0..pk.examples_per_push).map(|_| docs.draw()).collect();
        let batch: Vec<pack::Example> = ids.iter().map(|&id| docs.pack_example(id)).collect();
        packs.extend(packer.push(&batch).map_err(&err)?);
        if offline {
            packs.extend(packer.end_epoch().map_err(&err)?);
        }
    }
    let later: u64 = packs[needed..].iter().map(|p| p.len() as u64).sum();
    packs.truncate(needed);
    Ok((packs, packer.pending() as u64 + later, packer.dropped().len() as u64))
}

/// One THD row: flatten the pack's items, then the recipe's CP and mock padding.
fn thd_row(recipe: &Recipe, docs: &Docs<'_>, pack: &Pack) -> Result<PackedBatch> {
    let examples: Vec<collate::Document> = pack.items.iter().map(|i| docs.example(i)).collect();
    let mut row = collate::flatten(&examples, &FlattenOptions::default())
        .map_err(pipeline_err(recipe, "flatten"))?;
    if recipe.batch.objective == RecipeObjective::Mlm {
        row =
            relabel(&row, LabelConvention::Shifted).map_err(pipeline_err(recipe, "mlm labels"))?;
    }
    let pad = &recipe.padding;
    if let Some(d) = pad.cp_divisibility {
        let opts = CpPadding {
            divisibility: d,
            pad_token_id: pad.pad_token_id,
            pad_label_id: IGNORE_INDEX,
        };
        row = collate::pad_for_cp(&row, &opts).map_err(pipeline_err(recipe, "pad_for_cp"))?;
    }
    if let Some(m) = pad.pad_to_multiple_of {
        let opts = MockPadding {
            multiple_of: m,
            pad_token_id: pad.pad_token_id,
            max_mock_len: pad.max_mock_len,
        };
        row = collate::pad_to_multiple_of(&row, &opts)
            .map_err(pipeline_err(recipe, "pad_to_multiple_of"))?;
    }
    Ok(row)
}

/// One BSHD row: a document statically padded to `seq_length` (the padding is no segment).
fn bshd_row(recipe: &Recipe, docs: &Docs<'_>, id: u64) -> Result<PackedBatch> {
    let item = docs.pack_example(id).item();
    let opts = FlattenOptions {
        static_padding: Some(StaticPadding {
            max_seq_length: recipe.batch.seq_length as usize,
            pad_token_id: recipe.padding.pad_token_id,
            overflow: Overflow::Error,
        }),
        ..Default::default()
    };
    let row =
        collate::flatten(&[docs.example(&item)], &opts).map_err(pipeline_err(recipe, "flatten"))?;
    if recipe.batch.objective == RecipeObjective::Mlm {
        return relabel(&row, LabelConvention::Shifted).map_err(pipeline_err(recipe, "mlm labels"));
    }
    Ok(row)
}

/// One DPO row: the pairs collated (static padding per branch) and concatenated.
fn dpo_row(recipe: &Recipe, docs: &Docs<'_>, pack: &Pack) -> Result<PackedBatch> {
    let pairs: Vec<DpoExample> = pack.ids().map(|id| docs.dpo_example(id)).collect();
    let opts = DpoOptions {
        max_seq_length: recipe.padding.static_length,
        pad_token_id: recipe.padding.pad_token_id,
        overflow: Overflow::Error,
    };
    let batch = collate::collate_dpo(&pairs, &opts).map_err(pipeline_err(recipe, "collate_dpo"))?;
    if batch.index.len() != pairs.len() {
        return Err(Error::DpoPairsDropped {
            recipe: recipe.name.clone(),
            packed: pairs.len(),
            collated: batch.index.len(),
        });
    }
    Ok(batch.concatenated().map_err(pipeline_err(recipe, "dpo concatenated"))?.batch)
}

/// The same batch with its labels declared under `convention` (MLM labels sit at their own
/// position: nothing to shift).
fn relabel(b: &PackedBatch, convention: LabelConvention) -> thd::Result<PackedBatch> {
    PackedBatch::new(PackedBatchParts {
        input_ids: b.input_ids().to_vec(),
        labels: b.labels().to_vec(),
        position_ids: Some(b.position_ids().to_vec()),
        cu_seqlens: widen(b.cu_seqlens()),
        cu_seqlens_padded: b.cu_seqlens_padded().map(widen),
        num_real_seqs: b.num_real_seqs(),
        label_convention: convention,
    })
}

/// `i64` offsets, as [`PackedBatchParts`] takes them.
pub(crate) fn widen(cu: &CuSeqlens) -> Vec<i64> {
    cu.as_slice().iter().map(|&c| i64::from(c)).collect()
}
