//! Rust twins of bionemo's `test_perf_logger.py` (PR #1548; `TestFlopSplitAndAttention` is
//! identical in esm2, llama3, og2 and codonfm, and `TestDetectPeakTflops`), plus the worked
//! numbers of `reference/nvidia-stacks.md` §1.8, §1.9 and §1.12.

use thd::SeqLens;
use thd::metrics::bionemo::{BatchView, PerfWindow, attn_work_from_batch, peak_tflops_bf16};
use thd::metrics::{
    AttnSums, BatchWork, CausalConvention, FlopsFormula, HardwareView, ModelDims, StepTiming,
    Vocab, bionemo_attn_coeff, bionemo_flops, bionemo_non_attn_per_token, mfu_pct,
};

/// bionemo configs carry no head_dim; the formula derives `h / heads`.
fn cfg(layers: u64, hidden: u64, heads: u64, kv: u64, ffn: u64, vocab: u64, mlp: u32) -> ModelDims {
    ModelDims {
        layers,
        hidden,
        heads,
        kv_heads: kv,
        head_dim: hidden / heads,
        ffn,
        mlp_projections: mlp,
        vocab,
        padded_vocab: None,
        causal: CausalConvention::None,
        attention_output_gate: false,
    }
}

/// `_esm_cfg`: esm, h 1280, L 33, 20 heads, ffn 5120, V 33.
fn esm_cfg() -> ModelDims {
    cfg(33, 1280, 20, 20, 5120, 33, 2)
}

/// `_llama_cfg` (llama3): h 1024, L 8, 16 heads, 4 kv, ffn 4096, V 32000, gated.
fn llama_cfg() -> ModelDims {
    cfg(8, 1024, 16, 4, 4096, 32000, 3)
}

/// `_codon_cfg`: codonfm, h 1024, L 24, 16 heads, ffn 4096, V 69.
fn codon_cfg() -> ModelDims {
    cfg(24, 1024, 16, 16, 4096, 69, 2)
}

fn cu(q: &[i64]) -> BatchView<'_> {
    BatchView { cu_seq_lens_q: Some(q), ..Default::default() }
}

fn shape(b: u64, s: u64) -> BatchView<'static> {
    BatchView { input_ids_shape: Some((b, s)), ..Default::default() }
}

// Upstream: NVIDIA-BioNeMo/bionemo-framework (PR #1548) recipes/*/tests/test_perf_logger.py::TestFlopSplitAndAttention::test_bshd_shape_synthesis
#[test]
fn bshd_shape_synthesis() {
    assert_eq!(attn_work_from_batch(&shape(2, 512), 1, false).unwrap(), 2 * 512 * 512);
    // codonfm's copy uses zeros(4, 512).
    assert_eq!(attn_work_from_batch(&shape(4, 512), 1, false).unwrap(), 4 * 512 * 512);
}

// Upstream: NVIDIA-BioNeMo/bionemo-framework (PR #1548) recipes/*/tests/test_perf_logger.py::TestFlopSplitAndAttention::test_thd_single_doc_matches_bshd
#[test]
fn thd_single_doc_matches_bshd() {
    let thd = attn_work_from_batch(&cu(&[0, 512]), 1, false).unwrap();
    assert_eq!(thd, 512 * 512);
    assert_eq!(thd, attn_work_from_batch(&shape(1, 512), 1, false).unwrap());
}

// Upstream: NVIDIA-BioNeMo/bionemo-framework (PR #1548) recipes/*/tests/test_perf_logger.py::TestFlopSplitAndAttention::test_thd_multi_doc_uses_squared_sum
#[test]
fn thd_multi_doc_uses_squared_sum() {
    let w = attn_work_from_batch(&cu(&[0, 3, 8, 15]), 1, false).unwrap();
    assert_eq!(w, 83);
    assert!(w < 225);
}

// Upstream: NVIDIA-BioNeMo/bionemo-framework (PR #1548) recipes/*/tests/test_perf_logger.py::TestFlopSplitAndAttention::test_cp_size_divides_attention_only
#[test]
fn cp_size_divides_attention_only() {
    for dims in [esm_cfg(), llama_cfg(), codon_cfg()] {
        let w = PerfWindow {
            num_tokens: 15,
            num_unpadded_tokens: 15,
            attn_unpadded: 83,
            attn_padded: 83,
        };
        let (cp1, _) = w.flops(&dims, 1).unwrap();
        let (cp4, _) = w.flops(&dims, 4).unwrap();
        let non_attn = bionemo_non_attn_per_token(&dims, Vocab::Raw).unwrap() * 15;
        let coeff = bionemo_attn_coeff(&dims).unwrap();
        assert_eq!(cp1, non_attn + coeff * 83);
        assert_eq!(cp4, non_attn + coeff * 83 / 4);
    }
}

// Upstream: NVIDIA-BioNeMo/bionemo-framework (PR #1548) recipes/*/tests/test_perf_logger.py::TestFlopSplitAndAttention::test_unpadded_preferred_over_padded
#[test]
fn unpadded_preferred_over_padded() {
    let v = BatchView {
        cu_seq_lens_q: Some(&[0, 5, 11]),
        cu_seq_lens_q_padded: Some(&[0, 8, 16]),
        ..Default::default()
    };
    assert_eq!(attn_work_from_batch(&v, 1, false).unwrap(), 61);
}

// Upstream: NVIDIA-BioNeMo/bionemo-framework (PR #1548) recipes/*/tests/test_perf_logger.py::TestFlopSplitAndAttention::test_padded_fallback_when_unpadded_absent
#[test]
fn padded_fallback_when_unpadded_absent() {
    let v = BatchView { cu_seq_lens_q_padded: Some(&[0, 8, 16]), ..Default::default() };
    assert_eq!(attn_work_from_batch(&v, 1, false).unwrap(), 128);
}

// Upstream: NVIDIA-BioNeMo/bionemo-framework (PR #1548) recipes/*/tests/test_perf_logger.py::TestFlopSplitAndAttention::test_bshd_cp_correction
#[test]
fn bshd_cp_correction() {
    assert_eq!(attn_work_from_batch(&shape(1, 16), 1, false).unwrap(), 256);
    assert_eq!(attn_work_from_batch(&shape(1, 16), 8, false).unwrap(), 16384);
    for c in [1, 2, 4, 8] {
        assert_eq!(attn_work_from_batch(&cu(&[0, 3, 8, 15]), c, false).unwrap(), 83, "cp={c}");
    }
}

// Upstream: NVIDIA-BioNeMo/bionemo-framework (PR #1548) recipes/*/tests/test_perf_logger.py::TestFlopSplitAndAttention::test_include_padding_thd
#[test]
fn include_padding_thd() {
    let v = BatchView {
        cu_seq_lens_q: Some(&[0, 5, 11]),
        cu_seq_lens_q_padded: Some(&[0, 8, 16]),
        ..Default::default()
    };
    assert_eq!(attn_work_from_batch(&v, 1, false).unwrap(), 61);
    assert_eq!(attn_work_from_batch(&v, 1, true).unwrap(), 128);
}

// Upstream: NVIDIA-BioNeMo/bionemo-framework (PR #1548) recipes/*/tests/test_perf_logger.py::TestFlopSplitAndAttention::test_include_padding_bshd_with_attention_mask
#[test]
fn include_padding_bshd_with_attention_mask() {
    let mask = vec![vec![1, 1, 1, 1, 1, 0, 0, 0], vec![1, 1, 1, 0, 0, 0, 0, 0]];
    let v = BatchView {
        attention_mask: Some(&mask),
        input_ids_shape: Some((2, 8)),
        ..Default::default()
    };
    assert_eq!(attn_work_from_batch(&v, 1, false).unwrap(), 34);
    assert_eq!(attn_work_from_batch(&v, 1, true).unwrap(), 128);
}

// Reference (run): nvidia-stacks.md §1.7.3 — THD wins over attention_mask when both are present.
#[test]
fn thd_wins_over_attention_mask() {
    let mask = vec![vec![1; 16]];
    let v = BatchView {
        cu_seq_lens_q: Some(&[0, 5, 11, 15, 16]),
        attention_mask: Some(&mask),
        ..Default::default()
    };
    assert_eq!(attn_work_from_batch(&v, 1, false).unwrap(), 78);
}

// Upstream: NVIDIA-BioNeMo/bionemo-framework (PR #1548) recipes/llama3_native_te/tests/test_perf_logger.py::TestDetectPeakTflops::test_returns_tuple_shape
// (the Python returns (name, peak); here the peak lookup by name, with the table-order quirks of §1.7.1)
#[test]
fn detect_peak_tflops() {
    assert_eq!(peak_tflops_bf16("NVIDIA H100 80GB HBM3"), Some(989.0));
    assert_eq!(peak_tflops_bf16("NVIDIA H200"), Some(989.0));
    assert_eq!(peak_tflops_bf16("NVIDIA GH200 480GB"), Some(989.0)); // "h200" matches first
    assert_eq!(peak_tflops_bf16("NVIDIA A100-SXM4-80GB"), Some(312.0));
    assert_eq!(peak_tflops_bf16("NVIDIA RTX A6000"), Some(155.0));
    assert_eq!(peak_tflops_bf16("NVIDIA L40S"), Some(181.0));
    assert_eq!(peak_tflops_bf16("NVIDIA B200"), Some(2250.0));
    assert_eq!(peak_tflops_bf16("NVIDIA GB300"), Some(2500.0)); // "b300" matches first
    assert_eq!(peak_tflops_bf16("cpu"), None);
}

// Reference (run): nvidia-stacks.md §1.12 — per-token constants of every recipe model and of the
// test fixtures (non_attn with raw and padded vocab, coeff = 12·L·h).
#[test]
fn recipe_constants() {
    let pad = |mut d: ModelDims, p: u64| {
        d.padded_vocab = Some(p);
        d
    };
    let cases: [(&str, ModelDims, u128, u128, u128); 17] = [
        ("esm2_t6_8M", pad(cfg(6, 320, 20, 20, 1280, 33, 2), 64), 44_300_160, 44_359_680, 23_040),
        (
            "esm2_t33_650M",
            pad(cfg(33, 1280, 20, 20, 5120, 33, 2), 64),
            3_893_091_840,
            3_893_329_920,
            506_880,
        ),
        (
            "esm2_t36_3B",
            pad(cfg(36, 2560, 40, 40, 10240, 33, 2), 64),
            16_987_438_080,
            16_987_914_240,
            1_105_920,
        ),
        (
            "esm2_t48_15B",
            pad(cfg(48, 5120, 40, 40, 20480, 33, 2), 64),
            90_597_980_160,
            90_598_932_480,
            2_949_120,
        ),
        (
            "Llama-3.2-1B",
            cfg(16, 2048, 32, 8, 8192, 128256, 3),
            7_414_480_896,
            7_414_480_896,
            393_216,
        ),
        ("lingua-1B", cfg(25, 2048, 16, 8, 6144, 128256, 3), 9_125_756_928, 9_125_756_928, 614_400),
        (
            "Llama-3.1-8B",
            cfg(32, 4096, 32, 8, 14336, 128256, 3),
            45_027_950_592,
            45_027_950_592,
            1_572_864,
        ),
        (
            "Llama-3.1-70B",
            cfg(80, 8192, 64, 8, 28672, 128256, 3),
            417_010_286_592,
            417_010_286_592,
            7_864_320,
        ),
        (
            "og2_7b_thd_gqa",
            cfg(32, 4096, 32, 8, 14336, 256, 3),
            41_882_222_592,
            41_882_222_592,
            1_572_864,
        ),
        ("L0_sanity", cfg(2, 384, 6, 6, 1536, 128256, 3), 323_813_376, 323_813_376, 9_216),
        ("encodon_200k", cfg(2, 128, 4, 4, 512, 69, 2), 2_412_288, 2_412_288, 3_072),
        ("encodon_80m", cfg(6, 1024, 8, 8, 4096, 69, 2), 453_408_768, 453_408_768, 73_728),
        ("encodon_600m", cfg(12, 2048, 16, 16, 8192, 69, 2), 3_624_726_528, 3_624_726_528, 294_912),
        ("encodon_1b", cfg(18, 2048, 16, 16, 8192, 69, 2), 5_436_665_856, 5_436_665_856, 442_368),
        (
            "encodon_5b",
            cfg(24, 4096, 32, 32, 16384, 69, 2),
            28_992_724_992,
            28_992_724_992,
            1_179_648,
        ),
        ("_esm_cfg", esm_cfg(), 3_893_091_840, 3_893_091_840, 506_880),
        ("_llama_cfg", llama_cfg(), 926_416_896, 926_416_896, 98_304),
    ];
    for (name, d, raw, padded, coeff) in cases {
        assert_eq!(bionemo_non_attn_per_token(&d, Vocab::Raw).unwrap(), raw, "{name}");
        assert_eq!(bionemo_non_attn_per_token(&d, Vocab::Padded).unwrap(), padded, "{name}");
        assert_eq!(bionemo_attn_coeff(&d).unwrap(), coeff, "{name}");
    }
    assert_eq!(bionemo_non_attn_per_token(&codon_cfg(), Vocab::Raw).unwrap(), 1_812_363_264);
    assert_eq!(bionemo_attn_coeff(&codon_cfg()).unwrap(), 294_912);
}

fn timing_1s_h100() -> StepTiming {
    StepTiming { step_time_s: 1.0, num_gpus: 1, peak_flops_per_gpu: 989e12 }
}

fn close(a: f64, b: f64, rtol: f64) -> bool {
    (a - b).abs() <= rtol * b.abs()
}

// Reference (run): nvidia-stacks.md §1.12 worked snapshot — og2-7B, 2 × 8192 docs, 1 s, H100.
#[test]
fn og2_worked_snapshot() {
    let og2 = cfg(32, 4096, 32, 8, 14336, 256, 3);
    let w = PerfWindow {
        num_tokens: 16384,
        num_unpadded_tokens: 16384,
        attn_unpadded: 2 * 8192 * 8192,
        attn_padded: 2 * 8192 * 8192,
    };
    let (f, _) = w.flops(&og2, 1).unwrap();
    assert_eq!(f, 897_304_567_480_320);
    let mfu = mfu_pct(f, &timing_1s_h100()).unwrap();
    assert!(close(mfu, 90.728_2, 1e-5), "{mfu}");
}

// Reference (run): nvidia-stacks.md §1.8 — issue #1561 on ESM-2 8M, features 5/6/4, m = 8:
// upstream Σ is 78 on both sides (the mock's 1² counted as useful), yet the metrics differ through
// the non-attention terms. Option A (num_real_seqs = 3) gives the real useful Σ = 77.
#[test]
fn pad_to_multiple_of_collapse_and_option_a_fix() {
    let d = pad_vocab(cfg(6, 320, 20, 20, 1280, 33, 2), 64);
    let view = cu(&[0, 5, 11, 15, 16]);
    let useful = attn_work_from_batch(&view, 1, false).unwrap();
    let hardware = attn_work_from_batch(&view, 1, true).unwrap();
    assert_eq!((useful, hardware), (78, 78));
    let w = PerfWindow {
        num_tokens: 16,
        num_unpadded_tokens: 15,
        attn_unpadded: useful,
        attn_padded: hardware,
    };
    let (fu, fp) = w.flops(&d, 1).unwrap();
    assert_eq!((fu, fp), (666_299_520, 711_552_000));
    assert!(close(mfu_pct(fu, &timing_1s_h100()).unwrap(), 6.737e-5, 1e-3));
    assert!(close(mfu_pct(fp, &timing_1s_h100()).unwrap(), 7.195e-5, 1e-3));

    let fixed = BatchView { num_real_seqs: Some(3), ..view };
    assert_eq!(attn_work_from_batch(&fixed, 1, false).unwrap(), 77);
    assert_eq!(attn_work_from_batch(&fixed, 1, true).unwrap(), 78);
}

fn pad_vocab(mut d: ModelDims, p: u64) -> ModelDims {
    d.padded_vocab = Some(p);
    d
}

// Reference (run): nvidia-stacks.md §1.9 — CodonFM encodon_1b, 4 × 130 real tokens padded with
// mock segments to 2048: upstream's useful FLOPs 3.2013e12 (+12%) vs the true 2.8570e12.
#[test]
fn codonfm_mock_inflation_counterexample() {
    let d = cfg(18, 2048, 16, 16, 8192, 69, 2);
    let cu_q = [0, 130, 260, 390, 520, 1032, 1544, 2048];
    let upstream = attn_work_from_batch(&cu(&cu_q), 1, false).unwrap();
    assert_eq!(upstream, 845_904);
    let fixed =
        attn_work_from_batch(&BatchView { num_real_seqs: Some(4), ..cu(&cu_q) }, 1, false).unwrap();
    assert_eq!(fixed, 67_600);
    let inflated = bionemo_flops(
        &d,
        520,
        &AttnSums { sum_squares: upstream, ..Default::default() },
        Vocab::Raw,
    );
    assert!(close(inflated.unwrap() as f64, 3.2013e12, 1e-4));

    // The exact global path agrees with the fixed logger and is padding-independent.
    let real = SeqLens::new(vec![130, 130, 130, 130, 512, 512, 504]);
    let w = BatchWork::from_seq_lens(&real, &real, Some(4), 2048).unwrap();
    let f = w.flops(&d, FlopsFormula::BionemoPerfLogger, HardwareView::Varlen).unwrap();
    assert!(close(f.useful as f64, 2.8570e12, 1e-4));
    let bare = SeqLens::new(vec![130; 4]);
    let w0 = BatchWork::from_seq_lens(&bare, &bare, None, 520).unwrap();
    assert_eq!(
        w0.flops(&d, FlopsFormula::BionemoPerfLogger, HardwareView::Varlen).unwrap().useful,
        f.useful
    );
}

// Reference (run): nvidia-stacks.md §1.10 item 2 — without causal halving bionemo's attention
// FLOPs are exactly 2× Megatron's (og2-7B, 2 × 8192 docs: 2.111e14 vs 1.056e14); the non-attention
// terms are identical. Here the convention is the only switch.
#[test]
fn causal_factor_is_an_explicit_option() {
    let none = cfg(32, 4096, 32, 8, 14336, 256, 3);
    let half = ModelDims { causal: CausalConvention::Half, ..none };
    let w = AttnSums::of([8192u64, 8192]);
    let attn = |d: &ModelDims| {
        bionemo_flops(d, 16384, &w, Vocab::Raw).unwrap()
            - bionemo_flops(d, 16384, &AttnSums::default(), Vocab::Raw).unwrap()
    };
    assert_eq!(attn(&none), 2 * attn(&half));
    assert!(close(attn(&none) as f64, 2.111e14, 1e-3));
    assert!(close(attn(&half) as f64, 1.056e14, 1e-3));
}
