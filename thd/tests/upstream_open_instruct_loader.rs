//! Rust twins of open-instruct's DPO packing and loader tests (`TestDPOPackingIndices` in
//! `open_instruct/test_padding_free_collator.py` at `ee0c460`, `test_data_loader_gpu.py`) and of
//! the traced behaviours in `reference/open-instruct-and-areal.md` §1.3–§1.4 (upstream has no test
//! for the overflow carry, `get_num_tokens` on packed batches or `PerfCallback`).
//!
//! The collator's prefix rule is [`count_within_token_budget`]; the loader with its overflow carry
//! is [`SequentialBudget`] driven by [`run_epochs`].

use thd::CuSeqlens;
use thd::metrics::open_instruct::{
    approximate_learner_utilization, global_num_tokens, num_nonempty_sequences, num_sequences,
    num_tokens, prefill_flops,
};
use thd::metrics::{CausalConvention, ModelDims};
use thd::pack::{
    EpochEnd, EpochPlan, Example, Pack, Packer, SequentialBudget, SequentialOptions,
    count_within_token_budget, run_epochs,
};

/// `_make_dpo_features(n, chosen_lengths, rejected_lengths, start_index)`: lengths cycle.
fn features(n: u64, chosen: &[u32], rejected: &[u32], start: u64) -> Vec<Example> {
    (0..n)
        .map(|i| {
            let k = i as usize;
            Example::pair(start + i, chosen[k % chosen.len()], rejected[k % rejected.len()])
        })
        .collect()
}

fn ids(pack: &Pack) -> Vec<u64> {
    pack.ids().collect()
}

/// The collator call on a list of features: the kept prefix (what `batch["index"]` reports).
fn collate(features: &[Example], max_seq_length: Option<u32>) -> Pack {
    let keep = count_within_token_budget(features, max_seq_length);
    Pack::new(features[..keep].iter().map(|e| e.item()).collect())
}

fn cu(pack: &Pack, branch: usize) -> CuSeqlens {
    pack.seq_lens(branch).to_cu_seqlens().unwrap()
}

// Reference (run): open-instruct-and-areal.md §1.3.C — the seven traced budget cases.
#[test]
fn count_features_within_token_budget_cases() {
    let four = |c, r| features(4, &[c], &[r], 0);
    assert_eq!(count_within_token_budget(&four(100, 100), Some(300)), 3);
    assert_eq!(count_within_token_budget(&four(100, 100), Some(150)), 1);
    assert_eq!(count_within_token_budget(&four(100, 50), Some(250)), 2);
    assert_eq!(count_within_token_budget(&[Example::pair(0, 400, 10)], Some(300)), 1);
    assert_eq!(
        count_within_token_budget(
            &[Example::pair(0, 10, 10), Example::pair(1, 400, 10)],
            Some(300)
        ),
        1
    );
    assert_eq!(
        count_within_token_budget(
            &[Example::pair(0, 150, 150), Example::pair(1, 150, 150)],
            Some(300)
        ),
        2
    );
    assert_eq!(count_within_token_budget(&four(100, 100), None), 4);
}

// Upstream: allenai/open-instruct open_instruct/test_padding_free_collator.py::TestDPOPackingIndices::test_indices_preserved
#[test]
fn indices_preserved() {
    // (no_truncation: max 1000, start 10) and (with_padding: max 500, start 0), 4 × (50, 50).
    for (max, start, expected) in [(1000, 10, vec![10, 11, 12, 13]), (500, 0, vec![0, 1, 2, 3])] {
        let pack = collate(&features(4, &[50], &[50], start), Some(max));
        assert_eq!(ids(&pack), expected);
    }
}

// Upstream: allenai/open-instruct open_instruct/test_padding_free_collator.py::TestDPOPackingIndices::test_cu_seq_lens_matches_index_count
#[test]
fn cu_seq_lens_matches_index_count() {
    for (max, c, r) in [(1000, 50, 50), (200, 100, 100), (250, 100, 50)] {
        let pack = collate(&features(4, &[c], &[r], 0), Some(max));
        let n = pack.len();
        assert_eq!(cu(&pack, 0).as_slice().len(), n + 1, "max={max}");
        assert_eq!(cu(&pack, 1).as_slice().len(), n + 1, "max={max}");
    }
}

// Upstream: allenai/open-instruct open_instruct/test_padding_free_collator.py::TestDPOPackingIndices::test_concatenated_inputs_returns_correct_bs
#[test]
fn concatenated_inputs_returns_correct_bs() {
    let pack = collate(&features(4, &[50], &[50], 0), Some(1000));
    let bs = cu(&pack, 0).num_segments();
    assert_eq!(bs, pack.len());
    // concatenated cu = chosen cu ++ (rejected cu[1:] + padded chosen length): 2·bs + 1 entries.
    assert_eq!(cu(&pack, 0).as_slice().len() + cu(&pack, 1).as_slice().len() - 1, 2 * bs + 1);
}

// Upstream: allenai/open-instruct open_instruct/test_padding_free_collator.py::TestDPOPackingIndices::test_logps_count_matches_indices
// (the logps have one entry per kept sequence and branch; here the kept counts)
#[test]
fn logps_count_matches_indices() {
    for (max, c, r, at_least) in
        [(1000, 50, 50, 4), (300, 100, 100, 3), (150, 100, 100, 1), (250, 100, 50, 2)]
    {
        let pack = collate(&features(4, &[c], &[r], 0), Some(max));
        assert!(pack.len() >= at_least, "max={max}");
        assert_eq!(pack.seq_lens(0).len() + pack.seq_lens(1).len(), 2 * pack.len());
    }
}

// Upstream: allenai/open-instruct open_instruct/test_padding_free_collator.py::TestDPOPackingIndices::test_simulate_reference_cache
// (collator called directly on groups of 4, no loader: the unkept tail of each call is lost)
#[test]
fn simulate_reference_cache() {
    let data = features(16, &[100], &[100], 0);
    for (max, missing) in [(1000u32, vec![]), (300, vec![3u64, 7, 11, 15])] {
        let mut seen = Vec::new();
        for group in data.chunks(4) {
            seen.extend(ids(&collate(group, Some(max))));
        }
        let lost: Vec<u64> = (0..16).filter(|i| !seen.contains(i)).collect();
        assert_eq!(lost, missing, "max={max}");
    }
}

// The same instance through the loader's overflow carry (#1472): nothing is lost.
#[test]
fn overflow_carry_loses_nothing_where_the_bare_collator_did() {
    let data = features(16, &[100], &[100], 0);
    let mut p = SequentialBudget::new(300, SequentialOptions::default()).unwrap();
    let plan = EpochPlan { batch_size: 4, epochs: 1, seed: 0, shuffle: false };
    let run = run_epochs(&mut p, &data, &plan).unwrap();
    let mut seen: Vec<u64> = run.all_packs().flat_map(Pack::ids).collect();
    seen.sort();
    assert_eq!(seen, (0..16).collect::<Vec<_>>());
    assert!(run.dropped.is_empty());
}

// Upstream: allenai/open-instruct open_instruct/test_padding_free_collator.py::TestDPOPackingIndices::test_prefilter_keeps_complete_sequences
#[test]
fn prefilter_keeps_complete_sequences() {
    let pack = collate(&features(4, &[100], &[100], 0), Some(150));
    assert_eq!(pack.len(), 1);
    assert_eq!(cu(&pack, 0).total(), 100);
    assert_eq!(cu(&pack, 1).total(), 100);
}

// Reference (run): open-instruct-and-areal.md §1.3.H — the `_iter_batches` trace: 8 × (100, 100),
// per_rank_bs 4, max_seq_length 300 → indices [0,1,2], [3,4,5], [6,7]; chosen cu [0,100,200,300]
// (the last [0,100,200]); get_num_tokens 600, 600, 400.
#[test]
fn iter_batches_overflow_trace() {
    let data = features(8, &[100], &[100], 0);
    let mut p = SequentialBudget::new(300, SequentialOptions::default()).unwrap();
    let plan = EpochPlan { batch_size: 4, epochs: 1, seed: 0, shuffle: false };
    let run = run_epochs(&mut p, &data, &plan).unwrap();
    let packs: Vec<&Pack> = run.all_packs().collect();
    let got: Vec<Vec<u64>> = packs.iter().map(|p| ids(p)).collect();
    assert_eq!(got, vec![vec![0, 1, 2], vec![3, 4, 5], vec![6, 7]]);
    assert_eq!(cu(packs[0], 0).as_slice(), &[0, 100, 200, 300]);
    assert_eq!(cu(packs[2], 0).as_slice(), &[0, 100, 200]);
    let tokens: Vec<u64> = packs.iter().map(|p| num_tokens(&[cu(p, 0), cu(p, 1)])).collect();
    assert_eq!(tokens, vec![600, 600, 400]);
}

// Reference (run): open-instruct-and-areal.md §1.3.H — #1472's "overflow persists across epoch
// reshuffles", which upstream's drain loop makes true only for an abandoned generator; here an
// explicit option. Over two shuffled epochs every example is emitted once per epoch.
#[test]
fn overflow_across_reshuffles_is_drained_at_the_end() {
    let data = features(10, &[120, 70, 200], &[90, 150], 0);
    for epoch_end in [EpochEnd::Drain, EpochEnd::Carry] {
        let opts = SequentialOptions { epoch_end, ..Default::default() };
        let mut p = SequentialBudget::new(300, opts).unwrap();
        let plan = EpochPlan { batch_size: 3, epochs: 2, seed: 7, shuffle: true };
        let run = run_epochs(&mut p, &data, &plan).unwrap();
        let mut seen: Vec<u64> = run.all_packs().flat_map(Pack::ids).collect();
        seen.sort();
        let expected: Vec<u64> = (0..10).flat_map(|i| [i, i]).collect();
        assert_eq!(seen, expected, "{epoch_end:?}");
        assert_eq!(p.pending(), 0);
        assert!(run.all_packs().all(|p| p.load().iter().all(|&l| l <= 300)));
        let again =
            run_epochs(&mut SequentialBudget::new(300, opts).unwrap(), &data, &plan).unwrap();
        assert_eq!(again, run, "deterministic for a seed");
    }
}

// Reference (run): open-instruct-and-areal.md §1.4 OI-B5 — chosen cu [0,3,8], rejected cu [0,2,6],
// both padded to 10: get_num_tokens is 14 (not numel = 20), × dp_world_size.
#[test]
fn get_num_tokens_excludes_padding() {
    let chosen = CuSeqlens::try_from(vec![0, 3, 8]).unwrap();
    let rejected = CuSeqlens::try_from(vec![0, 2, 6]).unwrap();
    let local = num_tokens(&[chosen.clone(), rejected.clone()]);
    assert_eq!(local, 14);
    assert_eq!(global_num_tokens(local, 2), 28);
    assert_eq!(num_sequences(&[chosen, rejected]), 4);
}

// Reference: open-instruct-and-areal.md §1.3.G — #1719 counts only strictly increasing boundaries.
#[test]
fn get_num_sequences_after_1719_skips_empty_segments() {
    let cu = CuSeqlens::try_from(vec![0, 3, 3, 8]).unwrap();
    assert_eq!(num_sequences(std::slice::from_ref(&cu)), 3);
    assert_eq!(num_nonempty_sequences(&[cu]), 2);
}

// Upstream: allenai/open-instruct open_instruct/test_data_loader_gpu.py::test_global_num_tokens_in_batch
#[test]
fn global_num_tokens_in_batch() {
    assert_eq!(global_num_tokens(4 * 128, 2), 1024);
}

fn tiny_model_dims() -> ModelDims {
    // ModelDims(num_layers=1, hidden_size=4, intermediate_size=8, vocab_size=10, num_attn_heads=2, head_dim=2)
    ModelDims {
        layers: 1,
        hidden: 4,
        heads: 2,
        kv_heads: 2,
        head_dim: 2,
        ffn: 8,
        mlp_projections: 3,
        vocab: 10,
        padded_vocab: None,
        causal: CausalConvention::None,
        attention_output_gate: false,
    }
}

// Reference (run): open-instruct-and-areal.md §1.4 OI-B8 — LM head per token (#1457):
// prefill_flops([3, 5]) = 4080 (3440 body + 640 head), training ×3 = 12240.
#[test]
fn prefill_flops_counts_the_lm_head_per_token() {
    let d = tiny_model_dims();
    assert_eq!(prefill_flops(&d, &[3, 5], None).unwrap(), 4080);
    assert_eq!(3 * prefill_flops(&d, &[3, 5], None).unwrap(), 12240);
}

// Reference (run): open-instruct-and-areal.md §1.4 OI-B9 — PerfCallback sequence count: 600 tokens
// as 8 config-derived sequences (before, 3,974,400) vs 6 counted from cu_seq_lens (after, 5,054,400).
#[test]
fn perf_callback_counts_sequences_from_cu_seq_lens() {
    let d = tiny_model_dims();
    let pack = collate(&features(4, &[100], &[100], 0), Some(300));
    let n = num_sequences(&[cu(&pack, 0), cu(&pack, 1)]);
    let tokens = num_tokens(&[cu(&pack, 0), cu(&pack, 1)]);
    assert_eq!((n, tokens), (6, 600));
    assert_eq!(approximate_learner_utilization(&d, tokens, n, 1.0, 1, 1e12).unwrap().0, 5_054_400);
    assert_eq!(approximate_learner_utilization(&d, tokens, 8, 1.0, 1, 1e12).unwrap().0, 3_974_400);
}
