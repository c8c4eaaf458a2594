//! ATTN zoo: attention that crosses document boundaries, reads the wrong rows, sees padding or
//! divides by zero.

use thd::{AttnOptions, CuSeqlens, varlen_attention};

use crate::strategies::AttnCase;
use crate::subjects::{Attention, ThdSubject};

fn opts(case: &AttnCase) -> AttnOptions {
    AttnOptions { causal: case.causal, ..Default::default() }
}

fn shape(case: &AttnCase) -> thd::AttnShape {
    thd::AttnShape { heads: case.heads, kv_heads: case.kv_heads, head_dim: case.head_dim }
}

fn whole(tokens: usize) -> Result<CuSeqlens, String> {
    CuSeqlens::try_from(vec![0, tokens as i32]).map_err(|e| e.to_string())
}

fn cu(lens: &[u32]) -> Result<CuSeqlens, String> {
    thd::SeqLens::new(lens.to_vec()).to_cu_seqlens().map_err(|e| e.to_string())
}

/// The real tokens of every segment gathered into one sequence and attended as a whole, then
/// scattered back: the documents are merged, the padding stays out.
fn merged_documents(case: &AttnCase, q: &[f64], k: &[f64], v: &[f64]) -> Result<Vec<f64>, String> {
    let (wq, wk) = (case.heads * case.head_dim, case.kv_heads * case.head_dim);
    let storage = case.storage();
    let rows: Vec<usize> = case
        .lens
        .iter()
        .zip(&storage)
        .scan(0usize, |start, (&s, &p)| {
            let r = *start..*start + s as usize;
            *start += p as usize;
            Some(r)
        })
        .flatten()
        .collect();
    let gather = |x: &[f64], w: usize| {
        rows.iter().flat_map(|&t| x[t * w..(t + 1) * w].to_vec()).collect::<Vec<_>>()
    };
    let (qr, kr, vr) = (gather(q, wq), gather(k, wk), gather(v, wk));
    let one = whole(rows.len())?;
    let out = varlen_attention(&qr, &kr, &vr, &one, &one, shape(case), &opts(case))
        .map_err(|e| e.to_string())?;
    let mut full = vec![0.0; q.len()];
    for (j, &t) in rows.iter().enumerate() {
        full[t * wq..(t + 1) * wq].copy_from_slice(&out[j * wq..(j + 1) * wq]);
    }
    Ok(full)
}

/// Every document of the pack attends to every other (causally by position in the pack): no
/// `cu_seqlens` reach the kernel (open-instruct's OLMo-core DPO forward before #1670; the
/// cross-document information flow of Megatron-LM #4495).
#[derive(Debug, Clone, Copy, Default)]
pub struct NoDocumentMask;

impl Attention for NoDocumentMask {
    fn name(&self) -> &str {
        "zoo::NoDocumentMask"
    }

    fn attend(&self, case: &AttnCase, q: &[f64], k: &[f64], v: &[f64]) -> Result<Vec<f64>, String> {
        if case.lens_k.is_some() {
            return ThdSubject.attend(case, q, k, v);
        }
        merged_documents(case, q, k, v)
    }
}

/// Correct without CP; under CP (ring attention) every rank's queries attend to the gathered
/// keys of every document, causally by position, ignoring the document boundaries (axolotl
/// #3608: step-0 loss 5.84 vs 3.17 at cp = 1 with document packing).
#[derive(Debug, Clone, Copy, Default)]
pub struct RingAttentionIgnoresDocuments;

impl Attention for RingAttentionIgnoresDocuments {
    fn name(&self) -> &str {
        "zoo::RingAttentionIgnoresDocuments"
    }

    fn attend(&self, case: &AttnCase, q: &[f64], k: &[f64], v: &[f64]) -> Result<Vec<f64>, String> {
        if case.cp == 1 || case.lens_k.is_some() {
            return ThdSubject.attend(case, q, k, v);
        }
        merged_documents(case, q, k, v)
    }
}

/// With padded storage, the kernel addresses segments by the real `cu_seqlens` and ignores
/// `cu_seqlens_padded` (cuDNN frontend #737: TE-style padded THD "silently mis-addressed").
#[derive(Debug, Clone, Copy, Default)]
pub struct IgnoresPaddedOffsets;

impl Attention for IgnoresPaddedOffsets {
    fn name(&self) -> &str {
        "zoo::IgnoresPaddedOffsets"
    }

    fn attend(&self, case: &AttnCase, q: &[f64], k: &[f64], v: &[f64]) -> Result<Vec<f64>, String> {
        if case.lens_k.is_some() || case.cp > 1 {
            return ThdSubject.attend(case, q, k, v);
        }
        let real = cu(&case.lens)?;
        varlen_attention(q, k, v, &real, &real, shape(case), &opts(case)).map_err(|e| e.to_string())
    }
}

/// Padding is attended as if it were real: the kernel gets the padded lengths as the sequence
/// lengths (verl #1381: log-probs change when a padding suffix is added; TransformerEngine
/// #3331: padding handling blind to where the real tokens end).
#[derive(Debug, Clone, Copy, Default)]
pub struct AttendsToPadding;

impl Attention for AttendsToPadding {
    fn name(&self) -> &str {
        "zoo::AttendsToPadding"
    }

    fn attend(&self, case: &AttnCase, q: &[f64], k: &[f64], v: &[f64]) -> Result<Vec<f64>, String> {
        if case.lens_k.is_some() || case.cp > 1 {
            return ThdSubject.attend(case, q, k, v);
        }
        let storage = cu(&case.storage())?;
        varlen_attention(q, k, v, &storage, &storage, shape(case), &opts(case))
            .map_err(|e| e.to_string())
    }
}

/// A naive softmax that divides by the sum of no terms: a query row that sees no key (a
/// zero-length key segment, or causal with more queries than keys) becomes NaN instead of 0
/// (TransformerEngine #2186: NaN for some THD lengths).
#[derive(Debug, Clone, Copy, Default)]
pub struct NanOnKeylessRows;

impl Attention for NanOnKeylessRows {
    fn name(&self) -> &str {
        "zoo::NanOnKeylessRows"
    }

    fn attend(&self, case: &AttnCase, q: &[f64], k: &[f64], v: &[f64]) -> Result<Vec<f64>, String> {
        let Some(lens_k) = &case.lens_k else { return ThdSubject.attend(case, q, k, v) };
        let (h, kvh, d) = (case.heads, case.kv_heads, case.head_dim);
        let g = h / kvh;
        let scale = 1.0 / (d as f64).sqrt();
        let mut out = vec![0.0; q.len()];
        let (mut q0, mut k0) = (0usize, 0usize);
        for (&sq, &sk) in case.lens.iter().zip(lens_k) {
            let (sq, sk) = (sq as usize, sk as usize);
            for i in 0..sq {
                for head in 0..h {
                    let qrow = &q[((q0 + i) * h + head) * d..][..d];
                    let visible: Vec<usize> =
                        (0..sk).filter(|&j| !case.causal || j + sq <= i + sk).collect();
                    let scores: Vec<f64> = visible
                        .iter()
                        .map(|&j| {
                            let krow = &k[((k0 + j) * kvh + head / g) * d..][..d];
                            scale * qrow.iter().zip(krow).map(|(a, b)| a * b).sum::<f64>()
                        })
                        .collect();
                    let m = scores.iter().copied().fold(f64::NEG_INFINITY, f64::max);
                    let e: Vec<f64> = scores.iter().map(|s| (s - m).exp()).collect();
                    let z: f64 = e.iter().sum();
                    for dd in 0..d {
                        let acc: f64 = visible
                            .iter()
                            .zip(&e)
                            .map(|(&j, w)| w * v[((k0 + j) * kvh + head / g) * d + dd])
                            .sum();
                        out[((q0 + i) * h + head) * d + dd] = acc / z;
                    }
                }
            }
            q0 += sq;
            k0 += sk;
        }
        Ok(out)
    }
}
