//! The human-readable table of a [`RecipeRecord`] (what `thdcheck metrics` prints without
//! `--json`).

use std::fmt::{self, Display, Write as _};

use crate::recipe::grouped as group;
use crate::record::{FlopsSet, Rates, Ratios, RecipeRecord, Sums};

impl RecipeRecord {
    /// The record as an aligned text table, one section per part of the record.
    ///
    /// # Example
    /// ```
    /// use golden::{Recipe, metrics};
    /// let path = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/recipes/codonfm_encodon_1b.toml");
    /// let table = metrics(&Recipe::load(path)?)?.to_table();
    /// assert!(table.starts_with("recipe  codonfm_encodon_1b"));
    /// assert!(table.contains("mfu %"));
    /// # Ok::<(), golden::Error>(())
    /// ```
    pub fn to_table(&self) -> String {
        self.to_string()
    }
}

fn sums_row(f: &mut fmt::Formatter<'_>, name: &str, s: &Sums) -> fmt::Result {
    writeln!(
        f,
        "  {name:<14} {:>8} {:>14} {:>24} {:>24}",
        group(s.seqs.into()),
        group(s.sum_lengths.into()),
        group(s.sum_squares),
        group(s.causal_triangle)
    )
}

fn rates_row(f: &mut fmt::Formatter<'_>, name: &str, r: &Rates, digits: usize) -> fmt::Result {
    writeln!(
        f,
        "  {name:<14} {:>14.digits$} {:>14.digits$} {:>14.digits$} {:>14.digits$}",
        r.useful, r.hardware, r.mock_inflated, r.bshd_approx
    )
}

fn ratios_row(f: &mut fmt::Formatter<'_>, name: &str, r: &Ratios) -> fmt::Result {
    writeln!(
        f,
        "  {name:<14} {:>13}x {:>13.4}x {:>13.4}x {:>13.4}x",
        1, r.hardware, r.mock_inflated, r.bshd_approx
    )
}

fn flops_row(f: &mut fmt::Formatter<'_>, name: &str, s: &FlopsSet) -> fmt::Result {
    let e = |x: u128| format!("{:.6e}", x as f64);
    writeln!(
        f,
        "  {name:<14} {:>14} {:>14} {:>14} {:>14}",
        e(s.useful),
        e(s.hardware),
        e(s.mock_inflated),
        e(s.bshd_approx)
    )
}

impl Display for RecipeRecord {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let s = &self.step;
        writeln!(
            f,
            "recipe  {} ({}, {}, {}, formula {}, causal {}, hardware {})",
            self.recipe,
            self.stack,
            names::format(self.format),
            names::objective(self.objective),
            names::formula(self.flops_formula),
            names::causal(self.causal),
            names::view(self.hardware_view),
        )?;
        writeln!(
            f,
            "step    {} GPUs (dp {} · cp {} · tp {} · pp {}), {} micro-batches, {} rows, {} documents, \
             {} segments ({} mock), {} s, peak {} TFLOP/s/GPU",
            s.num_gpus,
            s.dp,
            s.cp,
            s.tp,
            s.pp,
            s.micro_batches,
            s.rows,
            s.documents,
            s.segments,
            s.mock_segments,
            s.step_time_s,
            s.peak_tflops_per_gpu
        )?;
        let t = &self.tokens;
        writeln!(
            f,
            "tokens  real {}, padded {}, valid {}, padding {} (mock {})",
            group(t.real.into()),
            group(t.padded.into()),
            group(t.valid.into()),
            group(t.padding.into()),
            group(t.mock.into())
        )?;

        writeln!(f, "\nattention {:>12} {:>14} {:>24} {:>24}", "seqs", "Σs", "Σs²", "Σs(s+1)/2")?;
        let a = &self.attention;
        sums_row(f, "useful", &a.useful)?;
        sums_row(f, "hardware", &a.hardware)?;
        sums_row(f, "mock_inflated", &a.mock_inflated)?;
        sums_row(f, "bshd_approx", &a.bshd_approx)?;
        ratios_row(f, "Σs² / useful", &a.sum_squares_over_useful)?;

        let head = format!(
            "  {:<14} {:>14} {:>14} {:>14} {:>14}",
            "", "useful", "hardware", "mock_inflated", "bshd_approx"
        );
        writeln!(f, "\nflops ({})", names::formula(self.flops_formula))?;
        writeln!(f, "{head}")?;
        flops_row(f, "none", &self.flops.none)?;
        flops_row(f, "half", &self.flops.half)?;
        flops_row(f, "exact_triangle", &self.flops.exact_triangle)?;

        let th = &self.throughput;
        writeln!(f, "\nthroughput (causal {})", names::causal(self.causal))?;
        writeln!(f, "{head}")?;
        rates_row(f, "TFLOP/s/GPU", &th.tflops_per_gpu, 3)?;
        rates_row(f, "mfu %", &th.mfu_pct, 3)?;
        ratios_row(f, "flops / useful", &th.flops_over_useful)?;
        writeln!(f, "  tokens/s/GPU   {:.1}", th.tokens_per_second_per_gpu)?;

        let p = &self.packing;
        writeln!(
            f,
            "\npacking {} (capacity {}): {} packs, {} items, real {}, storage {}, pad {}, \
             lower bound {} packs, efficiency {:.4}, wasted {:.4}, carried {}, dropped {}",
            p.strategy,
            p.capacity,
            p.packs,
            p.items,
            group(p.real_tokens.into()),
            group(p.storage_tokens.into()),
            group(p.pad_tokens.into()),
            p.lower_bound_packs,
            p.efficiency,
            p.wasted_fraction,
            p.carried,
            p.dropped
        )?;

        let cp = &self.cp;
        writeln!(
            f,
            "\ncp {} {:>10} {:>12} {:>12} {:>12}",
            cp.size, "rank", "real", "stored", "valid"
        )?;
        for r in &cp.per_rank {
            writeln!(
                f,
                "  {:>14} {:>12} {:>12} {:>12}",
                r.rank.unwrap_or(0),
                group(r.real.into()),
                group(r.stored.into()),
                group(r.valid.into())
            )?;
        }
        writeln!(
            f,
            "  {:>14} {:>12} {:>12} {:>12}   match global: {}",
            "total",
            group(cp.totals.real.into()),
            group(cp.totals.stored.into()),
            group(cp.totals.valid.into()),
            cp.totals_match_global
        )?;

        if let Some(v) = &self.vision {
            writeln!(
                f,
                "\nvision  {} images, {} patches, Σ patches² {}, {} merged tokens",
                v.images,
                group(v.patches.into()),
                group(v.patch_sum_squares),
                group(v.merged_tokens.into())
            )?;
        }

        let l = &self.loss_sample;
        let opt = |x: Option<f64>| x.map_or("-".to_string(), |x| format!("{x:.9}"));
        writeln!(
            f,
            "\nloss sample (vocab {}, {} tokens, {} valid): global {:.9}, oracle {}, cp-local {:.9} \
             (matches: {}), mean of rank means {:.9}",
            l.vocab,
            l.tokens,
            l.valid,
            l.global_loss,
            opt(l.oracle_loss),
            l.cp_local_loss,
            l.cp_local_matches_global,
            l.mean_of_rank_means
        )?;
        for r in &l.per_rank {
            writeln!(
                f,
                "  rank {:<4} nll {:.6}  count {}  mean {:.9}",
                r.rank, r.nll, r.count, r.mean
            )?;
        }
        let g = &l.logger;
        let mut line = String::new();
        let _ = write!(
            line,
            "  logger    n_seqs {}, n_tokens {}, n_valid_tokens {}, prompt_tokens {}, loss {:.9}, ppl avg {} min {} max {}",
            g.n_seqs,
            g.n_tokens,
            g.n_valid_tokens,
            g.prompt_tokens,
            g.loss,
            opt(g.ppl_avg),
            opt(g.ppl_min),
            opt(g.ppl_max)
        );
        writeln!(f, "{line}")
    }
}

/// The names the record's JSON uses for the enums, for the table header.
mod names {
    use thd::metrics::{CausalConvention, FlopsFormula, HardwareView};

    use crate::recipe::{Format, RecipeObjective};

    pub(super) fn format(f: Format) -> &'static str {
        match f {
            Format::Bshd => "bshd",
            Format::Thd => "thd",
        }
    }

    pub(super) fn objective(o: RecipeObjective) -> &'static str {
        match o {
            RecipeObjective::Clm => "clm",
            RecipeObjective::Sft => "sft",
            RecipeObjective::Mlm => "mlm",
            RecipeObjective::Dpo => "dpo",
        }
    }

    pub(super) fn formula(f: FlopsFormula) -> &'static str {
        match f {
            FlopsFormula::MegatronLm => "megatron_lm",
            FlopsFormula::BionemoPerfLogger => "bionemo_perf_logger",
        }
    }

    pub(super) fn causal(c: CausalConvention) -> &'static str {
        match c {
            CausalConvention::None => "none",
            CausalConvention::Half => "half",
            CausalConvention::ExactTriangle => "exact_triangle",
        }
    }

    pub(super) fn view(v: HardwareView) -> &'static str {
        match v {
            HardwareView::Varlen => "varlen",
            HardwareView::WholePack => "whole_pack",
        }
    }
}
