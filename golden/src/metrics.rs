//! `metrics`: a recipe in, its [`RecipeRecord`] out, every number computed by `thd`.

use thd::PackedBatch;
use thd::cp::shard_batch;
use thd::metrics::{
    AttnSums, BatchWork, CausalConvention, FlopsFormula, ModelDims, StepTiming, Vocab,
    bionemo_flops, flops_per_second_per_gpu, megatron_flops, mfu_pct, tokens_per_second_per_gpu,
};
use thd::pack::PackingStats;

use crate::data::{Step, build_step};
use crate::error::pipeline_err;
use crate::loss_sample::loss_sample;
use crate::recipe::Recipe;
use crate::record::{
    AttentionWork, CpRecord, FlopsByConvention, FlopsSet, PackingRecord, RankTokens, Rates, Ratios,
    RecipeRecord, RecipeTokens, SCHEMA_VERSION, StepShape, Throughput, VisionRecord,
};
use crate::{Error, Result};

/// Computes the metric record of one optimizer step of `recipe`.
///
/// The step's rows are generated from the recipe's seeded documents and built with `thd`'s
/// packers and collators (see `golden/README.md`); every count is summed over all micro-batches
/// of all data-parallel ranks on the global (pre-CP) layout:
///
/// ```text
/// work           Σ_rows BatchWork::from_batch(row)
/// mock_inflated  Σ_rows AttnSums over every segment's cu_seqlens length (mock included)
/// bshd_approx    AttnSums::repeated(approx_rows · micro_batches, approx_row_length)
/// flops[c]       for c in {none, half, exact_triangle}: the recipe's formula on
///                (real, useful) (padded, hardware) (real, mock_inflated) (rows·len, bshd_approx)
/// throughput     flops[recipe causal] / step_time_s / num_gpus (÷ peak for MFU)
/// cp             shard_batch(row, cp) per row: real, stored and valid tokens per rank
/// loss_sample    seeded logits on the first row: global vs CP-local
/// ```
///
/// # Errors
/// [`Error::Pipeline`] naming the `thd` step that rejected the generated data;
/// [`Error::Invalid`] naming `timing.step_time_s` or `timing.peak_tflops_per_gpu` when a rate
/// would not be a finite number; [`Error::StepNotFilled`], [`Error::DpoPairsDropped`] or
/// [`Error::Oracle`].
///
/// # Example
/// ```
/// use golden::{Recipe, metrics};
/// let path = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/recipes/codonfm_encodon_1b.toml");
/// let record = metrics(&Recipe::load(path)?)?;
/// // CodonFM pads 4 × 130 tokens to 2048 with mock segments of 512, 512 and 504 (§1.9).
/// let mbs = record.step.micro_batches as u128;
/// assert_eq!(record.attention.useful.sum_squares, 67_600 * mbs);
/// assert_eq!(record.attention.hardware.sum_squares, 845_904 * mbs);
/// assert!(record.throughput.mfu_pct.useful < record.throughput.mfu_pct.hardware);
/// # Ok::<(), golden::Error>(())
/// ```
pub fn metrics(recipe: &Recipe) -> Result<RecipeRecord> {
    let step = build_step(recipe)?;
    let rows: Vec<&PackedBatch> = step.micro_batches.iter().flatten().collect();
    let dims = recipe.model_dims();
    let view = recipe.hardware_view();

    let mut work = BatchWork::default();
    let mut mock_inflated = AttnSums::default();
    let (mut segments, mut real_segments, mut mock_tokens) = (0u64, 0u64, 0u64);
    for row in &rows {
        work += BatchWork::from_batch(row);
        let lens = row.cu_seqlens().seq_lens();
        mock_inflated += AttnSums::of(lens.as_slice().iter().map(|&s| u64::from(s)));
        segments += row.num_segments() as u64;
        real_segments += row.num_real_segments() as u64;
        mock_tokens +=
            lens.as_slice()[row.num_real_segments()..].iter().map(|&s| u64::from(s)).sum::<u64>();
    }
    let micro_batches = step.micro_batches.len() as u64;
    let approx = AttnSums::repeated(
        recipe.batch.approx_rows.unwrap_or(recipe.batch.micro_batch_size) * micro_batches,
        u64::from(recipe.batch.approx_row_length.unwrap_or(recipe.batch.seq_length)),
    );
    let hardware = work.hardware(view);

    let set = |causal: CausalConvention| -> Result<FlopsSet> {
        let d = ModelDims { causal, ..dims };
        let flops_err = pipeline_err(recipe, "flops");
        let f = work.flops(&d, recipe.flops.formula, view).map_err(&flops_err)?;
        let other = |tokens: u64, attn: &AttnSums| match recipe.flops.formula {
            FlopsFormula::MegatronLm => megatron_flops(&d, tokens, attn),
            FlopsFormula::BionemoPerfLogger => bionemo_flops(&d, tokens, attn, Vocab::Raw),
        };
        Ok(FlopsSet {
            useful: f.useful,
            hardware: f.hardware,
            mock_inflated: other(work.real_tokens, &mock_inflated).map_err(&flops_err)?,
            bshd_approx: other(approx.tokens, &approx).map_err(&flops_err)?,
        })
    };
    let flops = FlopsByConvention {
        none: set(CausalConvention::None)?,
        half: set(CausalConvention::Half)?,
        exact_triangle: set(CausalConvention::ExactTriangle)?,
    };

    let p = &recipe.parallel;
    let t = &recipe.timing;
    let timing = StepTiming {
        step_time_s: t.step_time_s,
        num_gpus: p.num_gpus,
        peak_flops_per_gpu: t.peak_tflops_per_gpu * 1e12,
    };
    let headline = flops.get(recipe.flops.causal);
    let rate_err = |e: thd::Error| rate_error(recipe, e);
    let per_gpu = |f: u128| -> Result<f64> {
        Ok(flops_per_second_per_gpu(f, t.step_time_s, p.num_gpus).map_err(&rate_err)? / 1e12)
    };
    let mfu = |f: u128| mfu_pct(f, &timing).map_err(&rate_err);
    let throughput = Throughput {
        tflops_per_gpu: Rates {
            useful: per_gpu(headline.useful)?,
            hardware: per_gpu(headline.hardware)?,
            mock_inflated: per_gpu(headline.mock_inflated)?,
            bshd_approx: per_gpu(headline.bshd_approx)?,
        },
        mfu_pct: Rates {
            useful: mfu(headline.useful)?,
            hardware: mfu(headline.hardware)?,
            mock_inflated: mfu(headline.mock_inflated)?,
            bshd_approx: mfu(headline.bshd_approx)?,
        },
        tokens_per_second_per_gpu: tokens_per_second_per_gpu(
            work.real_tokens,
            t.step_time_s,
            p.num_gpus,
        )
        .map_err(&rate_err)?,
        flops_over_useful: Ratios {
            hardware: ratio(headline.hardware, headline.useful),
            mock_inflated: ratio(headline.mock_inflated, headline.useful),
            bshd_approx: ratio(headline.bshd_approx, headline.useful),
        },
    };

    let tokens = RecipeTokens {
        real: work.real_tokens,
        padded: work.padded_tokens,
        valid: work.valid_labels,
        padding: work.padded_tokens - work.real_tokens,
        mock: mock_tokens,
    };
    let cp = cp_record(recipe, &rows, &tokens)?;
    let first = rows.first().ok_or_else(|| Error::StepNotFilled {
        recipe: recipe.name.clone(),
        packs: 0,
        needed: 1,
        documents: 0,
    })?;
    Ok(RecipeRecord {
        schema: SCHEMA_VERSION,
        recipe: recipe.name.clone(),
        stack: recipe.stack.clone(),
        format: recipe.batch.format,
        objective: recipe.batch.objective,
        flops_formula: recipe.flops.formula,
        causal: recipe.flops.causal,
        hardware_view: view,
        step: StepShape {
            num_gpus: p.num_gpus,
            dp: p.dp(),
            cp: p.cp,
            tp: p.tp,
            pp: p.pp,
            micro_batches,
            rows: rows.len() as u64,
            documents: step.documents.len() as u64,
            segments,
            real_segments,
            mock_segments: segments - real_segments,
            step_time_s: t.step_time_s,
            peak_tflops_per_gpu: t.peak_tflops_per_gpu,
        },
        tokens,
        attention: AttentionWork {
            useful: work.useful.into(),
            hardware: hardware.into(),
            mock_inflated: mock_inflated.into(),
            bshd_approx: approx.into(),
            sum_squares_over_useful: Ratios {
                hardware: ratio(hardware.sum_squares, work.useful.sum_squares),
                mock_inflated: ratio(mock_inflated.sum_squares, work.useful.sum_squares),
                bshd_approx: ratio(approx.sum_squares, work.useful.sum_squares),
            },
        },
        flops,
        throughput,
        packing: packing_record(recipe, &step)?,
        cp,
        vision: vision_record(recipe, &step),
        loss_sample: loss_sample(recipe, first)?,
    })
}

/// A rate that is not a finite number names the timing key it divides by (the recipe passed
/// [`Recipe::validate`], so nothing else can fail); any other error is the pipeline's.
fn rate_error(recipe: &Recipe, e: thd::Error) -> Error {
    let t = &recipe.timing;
    match e {
        thd::Error::RateNotFinite { quantity, value, divisor } => {
            let (key, v) = if divisor == "peak_flops_per_gpu" {
                ("timing.peak_tflops_per_gpu", t.peak_tflops_per_gpu)
            } else {
                ("timing.step_time_s", t.step_time_s)
            };
            Error::Invalid {
                origin: recipe.name.clone(),
                key: key.into(),
                // Debug prints 1e-320 as written, not as 320 decimals.
                value: format!("{v:?}"),
                reason: format!(
                    "too small to divide the step's FLOPs by: {quantity} would be {value}, not a \
                     finite number"
                ),
            }
        }
        source => Error::Pipeline { recipe: recipe.name.clone(), stage: "rates", source },
    }
}

/// `x / useful` (0 when `useful` is 0).
fn ratio(x: u128, useful: u128) -> f64 {
    if useful == 0 { 0.0 } else { x as f64 / useful as f64 }
}

/// Real, stored and valid tokens per CP rank, summed over the step's rows.
fn cp_record(recipe: &Recipe, rows: &[&PackedBatch], tokens: &RecipeTokens) -> Result<CpRecord> {
    let cp = recipe.parallel.cp as usize;
    let mut per_rank: Vec<RankTokens> = (0..cp)
        .map(|r| RankTokens { rank: Some(r as u64), real: 0, stored: 0, valid: 0 })
        .collect();
    if cp == 1 {
        // The identity: rank 0 holds every row whole (static padding included).
        per_rank[0].real = tokens.real;
        per_rank[0].stored = tokens.padded;
        per_rank[0].valid = tokens.valid;
    } else {
        let err = pipeline_err(recipe, "shard_batch");
        for row in rows {
            let (layout, shards) = shard_batch(row, cp).map_err(&err)?;
            for (r, shard) in shards.iter().enumerate() {
                let real: usize = layout.real_lens_on_rank(r).map_err(&err)?
                    [..layout.num_real_segments()]
                    .iter()
                    .map(|[a, b]| a + b)
                    .sum();
                per_rank[r].real += real as u64;
                per_rank[r].stored += shard.input_ids.len() as u64;
                per_rank[r].valid +=
                    shard.labels.iter().filter(|&&l| l != thd::IGNORE_INDEX).count() as u64;
            }
        }
    }
    let totals =
        per_rank.iter().fold(RankTokens { rank: None, real: 0, stored: 0, valid: 0 }, |a, r| {
            RankTokens {
                rank: None,
                real: a.real + r.real,
                stored: a.stored + r.stored,
                valid: a.valid + r.valid,
            }
        });
    Ok(CpRecord {
        size: cp as u64,
        totals_match_global: totals.real == tokens.real
            && totals.stored == tokens.padded
            && totals.valid == tokens.valid,
        per_rank,
        totals,
    })
}

fn packing_record(recipe: &Recipe, step: &Step) -> Result<PackingRecord> {
    let capacity = recipe.capacity();
    let s =
        PackingStats::new(&step.packs, capacity).map_err(pipeline_err(recipe, "packing stats"))?;
    Ok(PackingRecord {
        strategy: recipe.packing.map_or("bshd_rows", |p| p.strategy.name()).to_string(),
        capacity,
        packs: s.packs,
        items: s.items,
        real_tokens: s.real_tokens,
        storage_tokens: s.storage_tokens,
        pad_tokens: s.pad_tokens,
        lower_bound_packs: s.lower_bound_packs,
        efficiency: s.efficiency(),
        wasted_fraction: s.wasted_fraction(),
        carried: step.carried,
        dropped: step.dropped,
    })
}

fn vision_record(recipe: &Recipe, step: &Step) -> Option<VisionRecord> {
    let v = recipe.data.vision.as_ref()?;
    let grids: Vec<[u64; 3]> = step
        .documents
        .iter()
        .filter_map(|d| d.image)
        .map(|(h, w)| [1, u64::from(h), u64::from(w)])
        .collect();
    let merge = u64::from(v.spatial_merge) * u64::from(v.spatial_merge);
    Some(VisionRecord {
        images: grids.len() as u64,
        patches: thd::metrics::megatron::vision_patches_from_grid_thw(&grids),
        patch_sum_squares: grids.iter().map(|[t, h, w]| u128::from(t * h * w).pow(2)).sum(),
        merged_tokens: grids.iter().map(|[t, h, w]| t * h * w / merge).sum(),
    })
}
