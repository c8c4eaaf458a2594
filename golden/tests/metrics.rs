//! One insta YAML snapshot of the full metric record per recipe in `tests/recipes/`.
//!
//! A change to a collator, a packer, a FLOPs formula or a logger that moves any reported
//! number fails here, and the snapshot diff shows which number moved and by how much.
//! Review with `cargo insta review`; see `golden/README.md`.

use golden::{Recipe, metrics};

#[test]
fn recipe_metrics() {
    insta::glob!("recipes/*.toml", |path| {
        let recipe = Recipe::load(path).unwrap();
        let record = metrics(&recipe).unwrap();
        insta::with_settings!({ info => &recipe, omit_expression => true }, {
            insta::assert_yaml_snapshot!(record, {
                ".step.step_time_s" => insta::rounded_redaction(6),
                ".step.peak_tflops_per_gpu" => insta::rounded_redaction(6),
                ".attention.sum_squares_over_useful.*" => insta::rounded_redaction(6),
                ".throughput.tflops_per_gpu.*" => insta::rounded_redaction(6),
                ".throughput.mfu_pct.*" => insta::rounded_redaction(6),
                ".throughput.flops_over_useful.*" => insta::rounded_redaction(6),
                ".throughput.tokens_per_second_per_gpu" => insta::rounded_redaction(3),
                ".packing.efficiency" => insta::rounded_redaction(6),
                ".packing.wasted_fraction" => insta::rounded_redaction(6),
                // Losses go through exp/ln, whose last ulp may differ between platforms and
                // between the SIMD and scalar paths: 8 decimals on values near ln(vocab).
                ".loss_sample.*" => insta::rounded_redaction(8),
                ".loss_sample.per_rank[].nll" => insta::rounded_redaction(3),
                ".loss_sample.per_rank[].mean" => insta::rounded_redaction(8),
                ".loss_sample.logger.*" => insta::rounded_redaction(8),
            });
        });
    });
}

/// Every recipe's record keeps the invariants the snapshots are meant to show, whatever the
/// pinned values: useful ≤ hardware, CP totals equal the global counts, the CP-local loss
/// equals the global loss.
#[test]
fn recipe_metrics_keep_their_invariants() {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/recipes");
    let mut n = 0;
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_none_or(|e| e != "toml") {
            continue;
        }
        n += 1;
        let recipe = Recipe::load(&path).unwrap();
        assert_eq!(Some(recipe.name.as_str()), path.file_stem().and_then(|s| s.to_str()));
        let r = metrics(&recipe).unwrap();
        let name = &r.recipe;
        for set in [r.flops.none, r.flops.half, r.flops.exact_triangle] {
            assert!(set.useful <= set.hardware, "{name}: useful > hardware");
            assert!(set.useful <= set.mock_inflated, "{name}: useful > mock_inflated");
        }
        assert!(r.cp.totals_match_global, "{name}: CP totals differ from the global counts");
        assert!(r.loss_sample.cp_local_matches_global, "{name}: CP-local loss differs");
        if let Some(oracle) = r.loss_sample.oracle_loss {
            let g = r.loss_sample.global_loss;
            assert!((oracle - g).abs() <= 1e-12 * g, "{name}: oracle {oracle} vs thd {g}");
        }
        assert_eq!(r.loss_sample.logger.n_valid_tokens, r.loss_sample.valid, "{name}");
    }
    assert!(n >= 12, "only {n} recipes");
}
