//! The bug zoo, attention wing: buggy THD variants that the oracle comparison must reject with
//! a message naming the segment and token. A property is only trusted after it has been seen to
//! fail (DESIGN "What done means here").

use candle_core::{DType, Device, Tensor};
use oracle::cases::{AttnInputs, GridCase};
use oracle::compare::compare;
use oracle::tolerance::ATTENTION_F64;
use oracle::varlen_attention;

const DEV: Device = Device::Cpu;

fn flat(t: &Tensor) -> Vec<f64> {
    t.flatten_all().unwrap().to_vec1().unwrap()
}

/// The THD fast path on raw slices with the given offsets, as a `[Tq, H, D]` tensor.
fn thd_with_offsets(
    case: &GridCase,
    q: &Tensor,
    k: &[f64],
    v: &[f64],
    cu_q: Vec<i32>,
    cu_k: Vec<i32>,
) -> Tensor {
    let cu = |v: Vec<i32>| thd::CuSeqlens::try_from(v).unwrap();
    let shape =
        thd::AttnShape { heads: case.heads, kv_heads: case.kv_heads, head_dim: case.head_dim };
    let opts = thd::AttnOptions { causal: case.causal, ..Default::default() };
    let out = thd::varlen_attention(&flat(q), k, v, &cu(cu_q), &cu(cu_k), shape, &opts).unwrap();
    Tensor::from_vec(out, q.dims(), &DEV).unwrap()
}

/// Exclusive prefix sums, computed here (the test's own, the obvious way).
fn offsets(lens: &[u32]) -> Vec<i32> {
    std::iter::once(0)
        .chain(lens.iter().scan(0i32, |acc, &l| {
            *acc += l as i32;
            Some(*acc)
        }))
        .collect()
}

fn oracle_out(case: &GridCase, x: &AttnInputs) -> Tensor {
    varlen_attention(&x.q, &x.k, &x.v, &case.lens_q, &case.lens_k, &case.spec()).unwrap()
}

// Bug 1: an off-by-one in a segment offset. The key offsets are built with the boundary between
// segments 1 and 2 one token late, so segment 1 attends to the first key of segment 2 (a
// cross-document leak) and segment 2 loses it. Its queries are still addressed correctly.
#[test]
fn off_by_one_key_offset_is_rejected_naming_segment_and_token() {
    let case =
        GridCase::new("off_by_one_cu_k", "cu_k[2] one token late", &[4, 6, 5], 4, 2, 8, true);
    let x = case.inputs(11, DType::F64, &DEV).unwrap();
    let cu_q = offsets(&case.lens_q);
    let mut cu_k = offsets(&case.lens_k);
    cu_k[2] += 1; // the planted bug
    let buggy = thd_with_offsets(&case, &x.q, &flat(&x.k), &flat(&x.v), cu_q, cu_k);

    let report = compare(
        "attention f64 off_by_one_cu_k",
        &buggy,
        &oracle_out(&case, &x),
        &case.lens_q,
        ATTENTION_F64,
    )
    .unwrap();
    let msg =
        report.clone().into_result().expect_err("the off-by-one must be rejected").to_string();
    println!("{msg}");
    // Segment 0 is untouched; the first wrong output is segment 1's first query (token 4): with
    // one extra key, bottom-right alignment shifts every query of the segment by one key.
    assert!(
        msg.contains("first mismatch at [4, 0, 0] = token 4 (segment 1, offset 0 of 6)"),
        "{msg}"
    );
    assert!(msg.contains("mismatched "), "{msg}");
    let first = report.first_mismatch.as_ref().unwrap();
    assert_eq!(
        first.at.token,
        oracle::compare::TokenLocation::Segment { segment: 1, offset: 0, len: 6 }
    );
    // Segment 0 is bit-identical to the correct fast path: the bug is where the message says.
    let correct = thd_with_offsets(
        &case,
        &x.q,
        &flat(&x.k),
        &flat(&x.v),
        offsets(&case.lens_q),
        offsets(&case.lens_k),
    );
    assert_eq!(flat(&buggy)[..4 * 4 * 8], flat(&correct)[..4 * 4 * 8]);
}

// Bug 2: causal mask aligned top-left (FlashAttention before 2.1) when a sequence has more keys
// than queries: query i sees keys 0..=i instead of 0..=i + sk - sq. Emulated with thd by giving
// each segment only its first sq keys (exactly what a top-left mask lets a query see).
#[test]
fn top_left_causal_alignment_is_rejected() {
    let case = GridCase::new("top_left_causal", "causal, sq < sk", &[3, 2], 2, 2, 4, true)
        .with_lens_k(&[3, 5]);
    let x = case.inputs(12, DType::F64, &DEV).unwrap();
    // Keys of segment b truncated to its first sq_b rows.
    let (k, v) = (flat(&x.k), flat(&x.v));
    let row = case.kv_heads * case.head_dim;
    let (mut k_tl, mut v_tl) = (Vec::new(), Vec::new());
    let mut start = 0;
    for (&sq, &sk) in case.lens_q.iter().zip(&case.lens_k) {
        let n = sq.min(sk) as usize;
        k_tl.extend_from_slice(&k[start * row..(start + n) * row]);
        v_tl.extend_from_slice(&v[start * row..(start + n) * row]);
        start += sk as usize;
    }
    let lens_tl: Vec<u32> = case.lens_q.iter().zip(&case.lens_k).map(|(&q, &k)| q.min(k)).collect();
    let buggy =
        thd_with_offsets(&case, &x.q, &k_tl, &v_tl, offsets(&case.lens_q), offsets(&lens_tl));

    let report = compare(
        "attention f64 top_left_causal",
        &buggy,
        &oracle_out(&case, &x),
        &case.lens_q,
        ATTENTION_F64,
    )
    .unwrap();
    let msg = report.into_result().expect_err("top-left alignment must be rejected").to_string();
    println!("{msg}");
    // Segment 0 has sq == sk (both alignments agree); segment 1 (token 3 on) differs.
    assert!(
        msg.contains("first mismatch at [3, 0, 0] = token 3 (segment 1, offset 0 of 2)"),
        "{msg}"
    );
}
