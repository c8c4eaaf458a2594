//! The tiled kernel behind [`super::varlen_attention`]: flash-style online softmax over
//! register-blocked tiles, one work item per (segment, block of queries).
//!
//! For one item and one key/value head `g`, the `group` query heads that share `g` are stacked
//! with the item's queries into `M = queries × group` rows (row `r` = query `r / group`, head
//! `g·group + r % group`), so every K/V tile is loaded once for all of them. Keys are visited in
//! tiles of [`BK`]:
//!
//! ```text
//! S = (scale·Q) · K_tileᵀ                       [M × BK]   masked entries set to -inf
//! m' = max(m, rowmax S);  alpha = e^(m - m');  P = e^(S - m');  l = alpha·l + rowsum P
//! O = alpha·O + P · V_tile                       [M × D]
//! out = O / l   (0 where l == 0: the row saw no key)
//! ```
//!
//! Causal tiles entirely above the diagonal are never visited: the key loop stops at the last
//! key the item's last query may see. Scratch buffers are per item and sized by the tile, never
//! by the sequence.

use rayon::prelude::*;

use crate::Float;
use crate::float::{Isa, MR, Panels};

/// Keys per tile (a multiple of every kernel's `NR`).
pub(super) const BK: usize = 128;
/// Stacked (query, head) rows a work item aims for.
const TARGET_ROWS: usize = 192;

/// Problem geometry shared by all work items.
pub(super) struct Geometry<F> {
    pub heads: usize,
    pub kv_heads: usize,
    pub group: usize,
    pub head_dim: usize,
    pub causal: bool,
    pub scale: F,
}

/// One work item: queries `i0..i1` of a segment, all heads.
struct Item<'o, F> {
    /// First token row of the segment in `q`.
    q_start: usize,
    /// First token row of the segment in `k` / `v`.
    k_start: usize,
    /// Query and key lengths of the segment.
    sq: usize,
    sk: usize,
    /// Query offsets in the segment.
    i0: usize,
    i1: usize,
    /// The output rows `q_start + i0 .. q_start + i1` (all heads).
    out: &'o mut [F],
}

/// Per-item scratch, reused across the items one rayon job processes.
#[derive(Default)]
struct Scratch<F> {
    qp: Vec<F>,
    kt: Vec<F>,
    vp: Vec<F>,
    s: Vec<F>,
    o: Vec<F>,
    m: Vec<F>,
    l: Vec<F>,
    alpha: Vec<F>,
}

fn round_up(x: usize, m: usize) -> usize {
    x.div_ceil(m) * m
}

/// Number of keys query `i` of a segment may see: `min(sk, i + 1 + sk - sq)` (clamped at 0)
/// when causal, `sk` otherwise.
fn visible_keys(causal: bool, i: usize, sq: usize, sk: usize) -> usize {
    if causal { (i + 1 + sk).saturating_sub(sq).min(sk) } else { sk }
}

/// Runs the tiled kernel; `out` must be zeroed and hold `q.len()` elements.
#[allow(clippy::too_many_arguments)] // private driver: the public API takes a shape struct
pub(super) fn run<F: Float>(
    isa: Isa,
    q: &[F],
    k: &[F],
    v: &[F],
    segments: impl Iterator<Item = (std::ops::Range<usize>, std::ops::Range<usize>)>,
    total_q: usize,
    geo: &Geometry<F>,
    out: &mut [F],
) {
    let q_row = geo.heads * geo.head_dim;
    let bq = (TARGET_ROWS / geo.group).max(1);
    // Carve the output into disjoint per-item slices, in token order.
    let mut rest = &mut out[..total_q * q_row];
    let mut items = Vec::new();
    for (rq, rk) in segments {
        let (sq, sk) = (rq.len(), rk.len());
        let mut i0 = 0;
        while i0 < sq {
            let i1 = sq.min(i0 + bq);
            let (head, tail) = std::mem::take(&mut rest).split_at_mut((i1 - i0) * q_row);
            rest = tail;
            if visible_keys(geo.causal, i1 - 1, sq, sk) > 0 {
                items.push(Item {
                    q_start: rq.start,
                    k_start: rk.start,
                    sq,
                    sk,
                    i0,
                    i1,
                    out: head,
                });
            }
            i0 = i1;
        }
    }
    items.into_par_iter().for_each_init(Scratch::default, |scratch, mut item| {
        for g in 0..geo.kv_heads {
            process(isa, q, k, v, geo, g, &mut item, scratch);
        }
    });
}

/// Online-softmax attention of one item's queries against key/value head `g`.
#[allow(clippy::too_many_arguments)] // private kernel
fn process<F: Float>(
    isa: Isa,
    q: &[F],
    k: &[F],
    v: &[F],
    geo: &Geometry<F>,
    g: usize,
    item: &mut Item<'_, F>,
    sc: &mut Scratch<F>,
) {
    let nr = F::NR;
    let (d, group) = (geo.head_dim, geo.group);
    let (q_row, kv_row) = (geo.heads * d, geo.kv_heads * d);
    let dp = round_up(d, nr);
    let nq = item.i1 - item.i0;
    let rows = nq * group;
    let mp = round_up(rows, MR);

    // Q block, scaled, padded to dp columns and mp rows with zeros.
    sc.qp.clear();
    sc.qp.resize(mp * dp, F::ZERO);
    for il in 0..nq {
        let src = &q[(item.q_start + item.i0 + il) * q_row + g * group * d..][..group * d];
        for (hl, qh) in src.chunks_exact(d).enumerate() {
            let dst = &mut sc.qp[(il * group + hl) * dp..][..d];
            for (x, &y) in dst.iter_mut().zip(qh) {
                *x = y * geo.scale;
            }
        }
    }
    sc.o.clear();
    sc.o.resize(mp * dp, F::ZERO);
    sc.m.clear();
    sc.m.resize(mp, F::NEG_INFINITY);
    sc.l.clear();
    sc.l.resize(mp, F::ZERO);
    sc.alpha.clear();
    sc.alpha.resize(mp, F::ONE);
    sc.s.resize(mp * BK, F::ZERO);
    sc.kt.resize(dp * BK, F::ZERO);
    sc.vp.resize(BK * dp, F::ZERO);

    // Keys visible to a row (padding rows see none).
    let row_keys = |r: usize| -> usize {
        if r < rows { visible_keys(geo.causal, item.i0 + r / group, item.sq, item.sk) } else { 0 }
    };
    let kend = row_keys(rows - 1);
    let mut j0 = 0;
    while j0 < kend {
        let kn = BK.min(kend - j0);
        let bkp = round_up(kn, nr);
        pack_k(k, item.k_start + j0, kn, kv_row, g * d, d, dp, nr, &mut sc.kt);
        pack_v(v, item.k_start + j0, kn, kv_row, g * d, d, dp, &mut sc.vp);
        // Row panels whose rows all see no key of this tile are skipped (causal only).
        let first_panel = (0..mp / MR)
            .find(|&rp| row_keys((rp * MR + MR - 1).min(rows - 1)) > j0)
            .unwrap_or(mp / MR);

        for rp in first_panel..mp / MR {
            let r0 = rp * MR;
            let scores = Panels {
                depth: d,
                a: &sc.qp[r0 * dp..],
                a_rs: dp,
                b: &sc.kt,
                b_rs: nr,
                b_ps: dp * nr,
                n_panels: bkp / nr,
                alpha: None,
            };
            F::gemm_panels(isa, &scores, &mut sc.s[r0 * BK..], BK);
            let mut row_sum = [F::ZERO; MR];
            for r in r0..r0 + MR {
                let srow = &mut sc.s[r * BK..][..bkp];
                let visible = row_keys(r).saturating_sub(j0).min(kn);
                if visible == 0 {
                    srow.fill(F::ZERO);
                    sc.alpha[r] = F::ZERO; // log alpha: the row is unchanged
                    continue;
                }
                srow[visible..].fill(F::NEG_INFINITY);
                let m_new = sc.m[r].max(F::max_of(isa, srow));
                row_sum[r - r0] = F::exp_sub_sum(isa, srow, m_new);
                sc.alpha[r] = sc.m[r] - m_new; // -inf on the row's first tile: alpha = 0
                sc.m[r] = m_new;
            }
            // alpha = e^(m - m') for the panel's rows in one vector call.
            F::exp_sub_sum(isa, &mut sc.alpha[r0..r0 + MR], F::ZERO);
            for r in r0..r0 + MR {
                sc.l[r] = sc.l[r] * sc.alpha[r] + row_sum[r - r0];
            }
            let alpha: &[F; MR] = sc.alpha[r0..r0 + MR].try_into().expect("MR rows");
            let pv = Panels {
                depth: kn,
                a: &sc.s[r0 * BK..],
                a_rs: BK,
                b: &sc.vp,
                b_rs: dp,
                b_ps: nr,
                n_panels: dp / nr,
                alpha: Some(alpha),
            };
            F::gemm_panels(isa, &pv, &mut sc.o[r0 * dp..], dp);
        }
        j0 += kn;
    }

    for r in 0..rows {
        let (il, hl) = (r / group, r % group);
        let dst = &mut item.out[il * q_row + (g * group + hl) * d..][..d];
        let l = sc.l[r];
        if l > F::ZERO {
            // A division per element, not a multiply by 1/l: one rounding instead of two.
            for (x, &o) in dst.iter_mut().zip(&sc.o[r * dp..][..d]) {
                *x = o / l;
            }
        }
    }
}

/// Packs keys `k[start .. start + kn]` of head column offset `col` into `NR`-column panels of
/// `Kᵀ`: `kt[p·dp·nr + e·nr + j] = k[start + p·nr + j][col + e]`, zeros past `kn` and `d`.
#[allow(clippy::too_many_arguments)] // private packing routine
fn pack_k<F: Float>(
    k: &[F],
    start: usize,
    kn: usize,
    kv_row: usize,
    col: usize,
    d: usize,
    dp: usize,
    nr: usize,
    kt: &mut [F],
) {
    let panels = kn.div_ceil(nr);
    kt[..panels * dp * nr].fill(F::ZERO);
    for j in 0..kn {
        let (p, jj) = (j / nr, j % nr);
        let panel = &mut kt[p * dp * nr..][..dp * nr];
        for (e, &x) in k[(start + j) * kv_row + col..][..d].iter().enumerate() {
            panel[e * nr + jj] = x;
        }
    }
}

/// Packs value rows `v[start .. start + kn]` (head column offset `col`) into `vp[j·dp + e]`,
/// zero-padded to `dp` columns.
#[allow(clippy::too_many_arguments)] // private packing routine
fn pack_v<F: Float>(
    v: &[F],
    start: usize,
    kn: usize,
    kv_row: usize,
    col: usize,
    d: usize,
    dp: usize,
    vp: &mut [F],
) {
    for j in 0..kn {
        let dst = &mut vp[j * dp..][..dp];
        dst[..d].copy_from_slice(&v[(start + j) * kv_row + col..][..d]);
        dst[d..].fill(F::ZERO);
    }
}
