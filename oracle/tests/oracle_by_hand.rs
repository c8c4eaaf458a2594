//! The oracle against values computed by hand: before it judges anything, it must get the
//! cases right whose answers need no computer.

use candle_core::{DType, Device, Result, Tensor};
use oracle::{AttnSpec, CrossEntropy, cross_entropy, varlen_attention};

const DEV: Device = Device::Cpu;

/// `[T, H, D]` tensor from nested rows.
fn t3(rows: &[&[&[f64]]]) -> Result<Tensor> {
    let (t, h, d) = (rows.len(), rows[0].len(), rows[0][0].len());
    let flat: Vec<f64> =
        rows.iter().flat_map(|r| r.iter().flat_map(|h| h.iter().copied())).collect();
    Tensor::from_vec(flat, (t, h, d), &DEV)
}

fn flat(x: &Tensor) -> Vec<f64> {
    x.flatten_all().unwrap().to_dtype(DType::F64).unwrap().to_vec1().unwrap()
}

fn assert_near(got: &[f64], want: &[f64], tol: f64) {
    assert_eq!(got.len(), want.len(), "got {got:?}, want {want:?}");
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        assert!((g - w).abs() <= tol, "element {i}: got {g}, want {w} (all: {got:?})");
    }
}

#[test]
fn attention_single_key_returns_its_value_row() -> Result<()> {
    // One sequence, one key: whatever the query, softmax is [1] and the output is v[0].
    let q = t3(&[&[&[3.0, -1.0], &[0.5, 2.0]]])?;
    let k = t3(&[&[&[1.0, 1.0]]])?;
    let v = t3(&[&[&[7.0, -2.0]]])?;
    for causal in [false, true] {
        let out = varlen_attention(&q, &k, &v, &[1], &[1], &AttnSpec { causal, scale: None })?;
        assert_eq!(flat(&out), [7.0, -2.0, 7.0, -2.0], "causal {causal}"); // MQA: both heads
    }
    Ok(())
}

#[test]
fn attention_uniform_scores_give_the_mean_of_values() -> Result<()> {
    // q = 0: every score is 0, softmax is uniform over the visible keys.
    let q = Tensor::zeros((3, 1, 1), DType::F64, &DEV)?;
    let k = t3(&[&[&[1.0]], &[&[-4.0]], &[&[9.0]]])?;
    let v = t3(&[&[&[3.0]], &[&[6.0]], &[&[12.0]]])?;
    let bidir = varlen_attention(&q, &k, &v, &[3], &[3], &AttnSpec::default())?;
    assert_near(&flat(&bidir), &[7.0, 7.0, 7.0], 1e-14);
    // Causal: query i averages v[0..=i].
    let causal = varlen_attention(&q, &k, &v, &[3], &[3], &AttnSpec { causal: true, scale: None })?;
    assert_near(&flat(&causal), &[3.0, 4.5, 7.0], 1e-14);
    Ok(())
}

#[test]
fn attention_two_keys_by_hand() -> Result<()> {
    // D = 1, scale 1: scores [0, ln 3] → softmax [1/4, 3/4]; v = [4, 8] → 1 + 6 = 7.
    let q = t3(&[&[&[1.0]]])?;
    let k = t3(&[&[&[0.0]], &[&[3f64.ln()]]])?;
    let v = t3(&[&[&[4.0]], &[&[8.0]]])?;
    let spec = AttnSpec { causal: false, scale: Some(1.0) };
    assert_near(&flat(&varlen_attention(&q, &k, &v, &[1], &[2], &spec)?), &[7.0], 1e-14);
    // The default scale is 1/sqrt(D): with D = 4 and q·k = 2 ln 3 the scores are [0, ln 3] again.
    let h = 3f64.ln() / 2.0;
    let q = t3(&[&[&[1.0, 1.0, 1.0, 1.0]]])?;
    let k = t3(&[&[&[0.0; 4]], &[&[h; 4]]])?;
    let v = t3(&[&[&[4.0; 4]], &[&[8.0; 4]]])?;
    let out = varlen_attention(&q, &k, &v, &[1], &[2], &AttnSpec::default())?;
    assert_near(&flat(&out), &[7.0; 4], 1e-14);
    Ok(())
}

#[test]
fn attention_causal_is_bottom_right_aligned() -> Result<()> {
    // sq = 1, sk = 3: the one query is the last position, so it sees all 3 keys (mean 5), not
    // only key 0 (top-left alignment would give 3).
    let q = Tensor::zeros((1, 1, 1), DType::F64, &DEV)?;
    let k = Tensor::zeros((3, 1, 1), DType::F64, &DEV)?;
    let v = t3(&[&[&[3.0]], &[&[5.0]], &[&[7.0]]])?;
    let out = varlen_attention(&q, &k, &v, &[1], &[3], &AttnSpec { causal: true, scale: None })?;
    assert_near(&flat(&out), &[5.0], 1e-14);
    Ok(())
}

#[test]
fn attention_fully_masked_row_is_zero_not_nan() -> Result<()> {
    // Causal, sq = 3 > sk = 1: queries 0 and 1 see no key (j <= i - 2), query 2 sees key 0.
    let q = Tensor::ones((3, 2, 2), DType::F64, &DEV)?;
    let k = Tensor::ones((1, 1, 2), DType::F64, &DEV)?;
    let v = t3(&[&[&[5.0, 6.0]]])?;
    let out = varlen_attention(&q, &k, &v, &[3], &[1], &AttnSpec { causal: true, scale: None })?;
    assert_eq!(flat(&out), [0., 0., 0., 0., 0., 0., 0., 0., 5., 6., 5., 6.]);
    // A sequence with queries and no keys at all, next to a normal one.
    let q = Tensor::ones((3, 1, 1), DType::F64, &DEV)?;
    let k = Tensor::ones((1, 1, 1), DType::F64, &DEV)?;
    let v = t3(&[&[&[4.0]]])?;
    let out = varlen_attention(&q, &k, &v, &[2, 1], &[0, 1], &AttnSpec::default())?;
    assert_eq!(flat(&out), [0.0, 0.0, 4.0]);
    Ok(())
}

#[test]
fn attention_rows_past_the_sequences_are_zero() -> Result<()> {
    let q = Tensor::ones((4, 1, 1), DType::F64, &DEV)?;
    let k = Tensor::ones((2, 1, 1), DType::F64, &DEV)?;
    let v = t3(&[&[&[2.0]], &[&[9.0]]])?;
    // One sequence of 2 queries and 2 keys; q rows 2 and 3 are padding.
    let out = varlen_attention(&q, &k, &v, &[2], &[2], &AttnSpec::default())?;
    assert_near(&flat(&out), &[5.5, 5.5, 0.0, 0.0], 1e-14);
    Ok(())
}

#[test]
fn attention_gqa_query_head_uses_kv_head_h_over_group() -> Result<()> {
    // H = 4, KV = 2, one key: head h's output is v[0, h / 2].
    let q = Tensor::ones((1, 4, 1), DType::F64, &DEV)?;
    let k = Tensor::ones((1, 2, 1), DType::F64, &DEV)?;
    let v = t3(&[&[&[10.0], &[20.0]]])?;
    let out = varlen_attention(&q, &k, &v, &[1], &[1], &AttnSpec::default())?;
    assert_eq!(flat(&out), [10.0, 10.0, 20.0, 20.0]);
    Ok(())
}

#[test]
fn attention_zero_length_sequences_take_no_rows() -> Result<()> {
    // Lengths [0, 1, 0, 1]: two single-token sequences, each attending only to itself.
    let q = Tensor::ones((2, 1, 1), DType::F64, &DEV)?;
    let k = Tensor::ones((2, 1, 1), DType::F64, &DEV)?;
    let v = t3(&[&[&[1.0]], &[&[2.0]]])?;
    let out = varlen_attention(&q, &k, &v, &[0, 1, 0, 1], &[0, 1, 0, 1], &AttnSpec::default())?;
    assert_eq!(flat(&out), [1.0, 2.0]);
    // All sequences empty: every row is padding.
    let out = varlen_attention(&q, &k, &v, &[0, 0], &[0, 0], &AttnSpec::default())?;
    assert_eq!(flat(&out), [0.0, 0.0]);
    Ok(())
}

#[test]
fn attention_f32_and_bf16_compute_in_their_dtype() -> Result<()> {
    let case = &oracle::cases::small()[5];
    let x = case.inputs(3, DType::F64, &DEV)?;
    let truth = varlen_attention(&x.q, &x.k, &x.v, &case.lens_q, &case.lens_k, &case.spec())?;
    for (dtype, tol) in [(DType::F32, 1e-5), (DType::BF16, 5e-2)] {
        let y = x.to_dtype(dtype)?;
        let out = varlen_attention(&y.q, &y.k, &y.v, &case.lens_q, &case.lens_k, &case.spec())?;
        assert_eq!(out.dtype(), dtype);
        let err =
            flat(&out).iter().zip(flat(&truth)).map(|(a, b)| (a - b).abs()).fold(0.0, f64::max);
        assert!(err > 0.0 && err < tol, "{dtype:?}: max error {err}");
    }
    Ok(())
}

#[test]
fn attention_refuses_each_error_case_with_its_error() -> Result<()> {
    for e in oracle::cases::errors() {
        let x = e.case.inputs_with_tokens(0, e.tokens_q, e.tokens_k, DType::F64, &DEV)?;
        let err =
            varlen_attention(&x.q, &x.k, &x.v, &e.case.lens_q, &e.case.lens_k, &e.case.spec())
                .expect_err(&e.case.name);
        let (got, want) = (err.to_string(), e.expected.to_string());
        assert!(got.contains(&want), "{}: got `{got}`, want `{want}`", e.case);
    }
    Ok(())
}

#[test]
fn cross_entropy_two_classes_by_hand() -> Result<()> {
    // logits [0, ln 3]: p = [1/4, 3/4]. Token 0 predicts token 1's label.
    let logits = Tensor::new(&[[0.0, 3f64.ln()], [0.0, 0.0]], &DEV)?;
    let ce = cross_entropy(&logits, &[-100, 1], &[2])?;
    assert_eq!(ce.count, 1);
    assert!((ce.nll_sum - (4.0f64 / 3.0).ln()).abs() < 1e-15, "{ce:?}");
    let ce = cross_entropy(&logits, &[-100, 0], &[2])?;
    assert!((ce.nll_sum - 4f64.ln()).abs() < 1e-15, "{ce:?}");
    Ok(())
}

#[test]
fn cross_entropy_three_classes_by_hand() -> Result<()> {
    // −log softmax([1, 2, 3])[0] = log(e + e² + e³) − 1; then [0, 0, 0] with label 2: ln 3.
    let e = std::f64::consts::E;
    let logits = Tensor::new(&[[1.0f64, 2.0, 3.0], [0.0, 0.0, 0.0], [5.0, 5.0, 5.0]], &DEV)?;
    let ce = cross_entropy(&logits, &[7, 0, 2], &[3])?;
    let want = (e + e * e + e * e * e).ln() - 1.0 + 3f64.ln();
    assert_eq!(ce.count, 2);
    assert!((ce.nll_sum - want).abs() < 1e-14, "{ce:?} vs {want}");
    assert!((ce.mean() - want / 2.0).abs() < 1e-14);
    Ok(())
}

#[test]
fn cross_entropy_shifts_within_each_sequence() -> Result<()> {
    // Sequences [0, 1] and [2, 3]: positions 0 and 2 predict; position 1 (the end of sequence 0)
    // must not predict token 2's label, which belongs to the next sequence.
    let logits = Tensor::new(&[[0.0, 3f64.ln()], [50.0, 0.0], [0.0, 0.0], [9.0, 9.0]], &DEV)?;
    let ce = cross_entropy(&logits, &[0, 1, 1, 1], &[2, 2])?;
    assert_eq!(ce.count, 2);
    assert!((ce.nll_sum - ((4.0f64 / 3.0).ln() + 2f64.ln())).abs() < 1e-14, "{ce:?}");
    // One sequence of all four: now position 1 predicts label 1 at cost ≈ 50, position 3 nothing.
    let one = cross_entropy(&logits, &[0, 1, 1, 1], &[4])?;
    assert_eq!(one.count, 3);
    assert!(one.nll_sum > 50.0, "{one:?}");
    Ok(())
}

#[test]
fn cross_entropy_all_ignored_is_zero_not_nan() -> Result<()> {
    let logits = Tensor::zeros((4, 5), DType::F32, &DEV)?;
    let ce = cross_entropy(&logits, &[-100; 4], &[2, 2])?;
    assert_eq!(ce, CrossEntropy { nll_sum: 0.0, count: 0 });
    assert_eq!(ce.mean(), 0.0);
    // Single-token and empty sequences predict nothing either.
    let ce = cross_entropy(&logits, &[1, 2, 3, 4], &[1, 0, 1, 1])?;
    assert_eq!((ce.count, ce.mean()), (0, 0.0));
    // Tokens past Σ seqlens are never read, whatever their labels.
    let ce = cross_entropy(&logits, &[1, 2, 3, 999], &[2])?;
    assert_eq!(ce.count, 1);
    Ok(())
}

#[test]
fn cross_entropy_accumulates_in_f64_from_any_dtype() -> Result<()> {
    // 3 classes, equal logits in bf16: each prediction costs exactly ln 3 in f64.
    let logits = Tensor::ones((3000, 3), DType::BF16, &DEV)?;
    let labels: Vec<i64> = (0..3000).map(|t| t % 3).collect();
    let ce = cross_entropy(&logits, &labels, &[3000])?;
    assert_eq!(ce.count, 2999);
    assert!((ce.mean() - 3f64.ln()).abs() < 1e-15, "{ce:?}");
    Ok(())
}

#[test]
fn cross_entropy_refuses_bad_labels() {
    let logits = Tensor::zeros((3, 4), DType::F64, &DEV).unwrap();
    let err = cross_entropy(&logits, &[0, 4, 0], &[3]).unwrap_err().to_string();
    assert!(err.contains("label 4 at token 1 is neither -100 nor in 0..4"), "{err}");
    let err = cross_entropy(&logits, &[0, -1, 0], &[3]).unwrap_err().to_string();
    assert!(err.contains("label -1 at token 1"), "{err}");
    let err = cross_entropy(&logits, &[0, 0], &[2]).unwrap_err().to_string();
    assert!(err.contains("labels has 2 entries but logits has 3 rows"), "{err}");
    let err = cross_entropy(&logits, &[0, 0, 0], &[2, 2]).unwrap_err().to_string();
    assert!(err.contains("seqlens sum to 4 tokens but logits holds only 3"), "{err}");
}

#[test]
fn cross_entropy_matches_a_plain_loop_across_row_chunks() -> Result<()> {
    // A vocabulary large enough that the oracle converts 3 rows at a time; the plain loop below
    // computes the same thing with no tensors.
    let (vocab, seqlens, tokens) = ((1usize << 18) + 3, [4u32, 3, 0, 2], 9usize);
    let logits: Vec<f32> = (0..tokens * vocab).map(|i| ((i * 7919) % 1013) as f32 / 97.0).collect();
    let labels: Vec<i64> = vec![5, 17, -100, 1 << 18, 9, 0, 33, 2, 11];
    let mut want = 0.0;
    let mut count = 0;
    let mut start = 0;
    for len in seqlens.map(|s| s as usize) {
        for t in start..(start + len).saturating_sub(1) {
            let y = labels[t + 1];
            if y < 0 {
                continue;
            }
            let row: Vec<f64> =
                logits[t * vocab..(t + 1) * vocab].iter().map(|&x| x as f64).collect();
            let max = row.iter().copied().fold(f64::NEG_INFINITY, f64::max);
            let lse = max + row.iter().map(|x| (x - max).exp()).sum::<f64>().ln();
            want += lse - row[y as usize];
            count += 1;
        }
        start += len;
    }
    let logits = Tensor::from_vec(logits, (tokens, vocab), &DEV)?;
    let ce = cross_entropy(&logits, &labels, &seqlens)?;
    assert_eq!(ce.count, count);
    assert!((ce.nll_sum - want).abs() <= 1e-12 * want.abs(), "{ce:?} vs {want}");
    Ok(())
}
