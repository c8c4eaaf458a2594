//! ATTN subject: an attention implementation on a packed (possibly padded, possibly CP-split)
//! layout.

use candle_core::{Device, Tensor};
use thd::cp::{CpLayout, cp_attention, padded_varlen_attention};
use thd::{AttnOptions, AttnShape, CuSeqlens, SeqLens, varlen_attention};

use super::{ThdSubject, failed};
use crate::checks::{AttnView, check_attention, check_isolation};
use crate::strategies::AttnCase;
use crate::{Checked, Invariant};

/// Attention over a packed batch.
pub trait Attention {
    /// A short name for reports.
    fn name(&self) -> &str;

    /// Attention of `case`'s layout: `q: [Tq, heads, head_dim]`, `k, v: [Tk, kv_heads,
    /// head_dim]` in storage order; returns `[Tq, heads, head_dim]` (padding rows: anything).
    ///
    /// # Errors
    /// The implementation's message.
    fn attend(&self, case: &AttnCase, q: &[f64], k: &[f64], v: &[f64]) -> Result<Vec<f64>, String>;
}

pub(crate) fn shape(case: &AttnCase) -> AttnShape {
    AttnShape { heads: case.heads, kv_heads: case.kv_heads, head_dim: case.head_dim }
}

pub(crate) fn cu(lens: &[u32]) -> Result<CuSeqlens, String> {
    SeqLens::new(lens.to_vec()).to_cu_seqlens().map_err(|e| e.to_string())
}

impl Attention for ThdSubject {
    fn name(&self) -> &str {
        "thd::varlen_attention"
    }

    fn attend(&self, case: &AttnCase, q: &[f64], k: &[f64], v: &[f64]) -> Result<Vec<f64>, String> {
        let opts = AttnOptions { causal: case.causal, ..Default::default() };
        let err = |e: thd::Error| e.to_string();
        if let Some(lens_k) = &case.lens_k {
            return varlen_attention(q, k, v, &cu(&case.lens)?, &cu(lens_k)?, shape(case), &opts)
                .map_err(err);
        }
        let storage = cu(&case.storage())?;
        let layout = CpLayout::new(&cu(&case.lens)?, Some(&storage), case.cp).map_err(err)?;
        if case.cp == 1 && case.pad.iter().all(|&p| p == 0) {
            return varlen_attention(q, k, v, &storage, &storage, shape(case), &opts).map_err(err);
        }
        if case.cp == 1 {
            return padded_varlen_attention(&layout, q, k, v, shape(case), &opts).map_err(err);
        }
        let w = case.heads * case.head_dim;
        let shards = (0..case.cp)
            .map(|r| {
                cp_attention(&layout, r, &layout.split_rows(q, w, r)?, k, v, shape(case), &opts)
            })
            .collect::<thd::Result<Vec<_>>>()
            .map_err(err)?;
        layout.reassemble(&shards, w).map_err(err)
    }
}

/// Rows of the real tokens of every slot, gathered back to back.
fn gather(x: &[f64], lens: &[u32], storage: &[u32], width: usize) -> Vec<f64> {
    let mut out = Vec::new();
    let mut start = 0usize;
    for (&s, &p) in lens.iter().zip(storage) {
        out.extend_from_slice(&x[start * width..(start + s as usize) * width]);
        start += p as usize;
    }
    out
}

/// The oracle's attention for `case`, scattered back to the storage layout (0 on padding).
///
/// # Panics
/// If candle fails on a valid case (a bug in the oracle or the strategy).
pub fn oracle_attention(case: &AttnCase, q: &[f64], k: &[f64], v: &[f64]) -> Vec<f64> {
    let (wq, wk) = (case.heads * case.head_dim, case.kv_heads * case.head_dim);
    let (lens_k, storage, storage_k) = (case.real_k(), case.storage(), case.storage_k());
    let qr = gather(q, &case.lens, &storage, wq);
    let kr = gather(k, &lens_k, &storage_k, wk);
    let vr = gather(v, &lens_k, &storage_k, wk);
    let dev = Device::Cpu;
    let t = |x: Vec<f64>, heads: usize| {
        let rows = x.len() / (heads * case.head_dim);
        Tensor::from_vec(x, (rows, heads, case.head_dim), &dev).expect("oracle input")
    };
    let spec = oracle::AttnSpec { causal: case.causal, scale: None };
    let out = oracle::varlen_attention(
        &t(qr, case.heads),
        &t(kr, case.kv_heads),
        &t(vr, case.kv_heads),
        &case.lens,
        &lens_k,
        &spec,
    )
    .and_then(|o| o.flatten_all()?.to_vec1::<f64>())
    .expect("the oracle accepts every generated case");
    let mut full = vec![0.0; case.tokens_q() * wq];
    let (mut src, mut start) = (0usize, 0usize);
    for (&s, &p) in case.lens.iter().zip(&storage) {
        let n = s as usize * wq;
        full[start * wq..start * wq + n].copy_from_slice(&out[src..src + n]);
        src += n;
        start += p as usize;
    }
    full
}

fn view<'a>(case: &'a AttnCase, storage: &'a [u32]) -> AttnView<'a> {
    AttnView {
        lens_q: &case.lens,
        storage_q: Some(storage),
        heads: case.heads,
        head_dim: case.head_dim,
    }
}

fn context(case: &AttnCase) -> String {
    let mut parts = vec![if case.causal { "causal" } else { "bidirectional" }.to_string()];
    parts.push(format!("heads {}/{} kv, head_dim {}", case.heads, case.kv_heads, case.head_dim));
    if case.cp > 1 {
        parts.push(format!("cp={}", case.cp));
    }
    if case.pad.iter().any(|&p| p > 0) || case.cp > 1 {
        parts.push(format!("storage {:?}", case.storage()));
    }
    if let Some(k) = &case.lens_k {
        parts.push(format!("key lengths {k:?}"));
    }
    parts.join(", ")
}

/// ATTN: `subject`'s attention equals the oracle's (f64, `max|Δ| ≤ 1e-12`) at every real token
/// and is finite everywhere it matters.
///
/// # Errors
/// The first [`crate::Violation`].
pub fn run_attention(subject: &dyn Attention, case: &AttnCase) -> Checked {
    let (q, k, v) = case.qkv();
    let got =
        subject.attend(case, &q, &k, &v).map_err(|e| failed(Invariant::Attn, subject.name(), e))?;
    let want = oracle_attention(case, &q, &k, &v);
    let storage = case.storage();
    check_attention(&view(case, &storage), &got, &want, 1e-12).map_err(|v| v.within(context(case)))
}

/// ATTN, isolation: perturbing segment `segment`'s q, k and v leaves every other segment's
/// output bit-identical.
///
/// # Errors
/// The first [`crate::Violation`].
pub fn run_isolation(subject: &dyn Attention, case: &AttnCase, segment: usize) -> Checked {
    let name = subject.name();
    let (q, k, v) = case.qkv();
    let before = subject.attend(case, &q, &k, &v).map_err(|e| failed(Invariant::Attn, name, e))?;
    let (q, k, v) = case.qkv_perturbed(Some(segment));
    let after = subject.attend(case, &q, &k, &v).map_err(|e| failed(Invariant::Attn, name, e))?;
    let storage = case.storage();
    check_isolation(&view(case, &storage), &before, &after, segment)
        .map_err(|v| v.within(context(case)))
}
