//! LOSS: `thd::packed_cross_entropy` with the collator's label convention equals the oracle's
//! mean cross-entropy with labels shifted within each sequence (f32: rtol 1e-5, atol 1e-6;
//! f64: 1e-12); no label crosses into the next sequence; an all-ignored batch gives 0, not NaN.

use candle_core::{DType, Device, Tensor, WithDType};
use oracle::tolerance::{ToleranceClass, tolerance};
use oracle::{CrossEntropy, Tolerance, cross_entropy};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use rand_distr::{Distribution, StandardNormal};
use thd::collate::{Document, FlattenOptions, flatten};
use thd::{IGNORE_INDEX, LabelConvention, LossSum, packed_cross_entropy};

const DEV: Device = Device::Cpu;

/// A packed batch: per-sequence raw labels (token ids, some -100) and logits `[T, vocab]`.
struct Pack {
    seqlens: Vec<u32>,
    /// Raw per-token labels, concatenated: what the oracle takes.
    labels: Vec<i64>,
    vocab: usize,
    /// Logits, row-major, drawn in f64 (scaled so the loss is not uniform).
    logits: Vec<f64>,
}

impl Pack {
    fn random(seed: u64, seqlens: &[u32], vocab: usize, ignored: f64) -> Self {
        let mut rng = StdRng::seed_from_u64(seed);
        let tokens: usize = seqlens.iter().map(|&s| s as usize).sum();
        let labels = (0..tokens)
            .map(|_| {
                if rng.random_bool(ignored) {
                    IGNORE_INDEX
                } else {
                    rng.random_range(0..vocab as i64)
                }
            })
            .collect();
        let logits = (0..tokens * vocab)
            .map(|_| {
                let z: f64 = StandardNormal.sample(&mut rng);
                3.0 * z
            })
            .collect();
        Self { seqlens: seqlens.to_vec(), labels, vocab, logits }
    }

    /// The examples a collator receives (non-empty sequences only: collators refuse empty ones).
    fn examples(&self) -> Vec<Document> {
        let mut start = 0;
        let mut out = Vec::new();
        for &len in &self.seqlens {
            let labels = self.labels[start..start + len as usize].to_vec();
            let input_ids = labels.iter().map(|&y| y.max(0)).collect();
            if len > 0 {
                out.push(Document::with_labels(input_ids, labels));
            }
            start += len as usize;
        }
        out
    }

    fn logits_as<F: WithDType>(&self) -> Vec<F> {
        self.logits.iter().map(|&x| F::from_f64(x)).collect()
    }

    /// The oracle on these logits as rounded to `F` (so both sides see the same numbers).
    fn oracle<F: WithDType>(&self) -> CrossEntropy {
        let logits =
            Tensor::from_vec(self.logits_as::<F>(), (self.labels.len(), self.vocab), &DEV).unwrap();
        cross_entropy(&logits, &self.labels, &self.seqlens).unwrap()
    }

    /// thd on the batch the Hugging Face flattening collator builds from the examples.
    fn thd_collated<F: thd::Float + WithDType>(&self) -> LossSum {
        let batch = flatten(&self.examples(), &FlattenOptions::default()).unwrap();
        assert_eq!(batch.label_convention(), LabelConvention::Unshifted);
        packed_cross_entropy(
            &self.logits_as::<F>(),
            self.vocab,
            batch.labels(),
            LabelConvention::Unshifted,
        )
        .unwrap()
    }
}

fn assert_loss_close(name: &str, got: LossSum, want: CrossEntropy, tol: Tolerance) {
    assert_eq!(got.count, want.count, "{name}: valid label count");
    let (g, w) = (got.mean(), want.mean());
    assert!(
        tol.allows(g, w),
        "{name}: thd mean {g:e} vs oracle {w:e} (|Δ| {:e}, {tol})",
        (g - w).abs()
    );
    assert!(
        tol.allows(got.nll, want.nll_sum),
        "{name}: thd Σ {} vs oracle {}",
        got.nll,
        want.nll_sum
    );
}

const PACKS: [(&str, &[u32], usize, f64); 6] = [
    ("one_sequence", &[37], 11, 0.1),
    ("three_sequences", &[5, 9, 3], 7, 0.2),
    ("single_tokens", &[1, 1, 4, 1], 5, 0.0),
    ("many_sequences", &[12, 3, 30, 1, 2, 64, 7, 9, 15, 4, 8, 2], 50, 0.3),
    ("tile_edges", &[127, 128, 129], 300, 0.1),
    ("big_vocab", &[40, 25], 4099, 0.05),
];

#[test]
fn packed_loss_matches_oracle_f64() {
    for (seed, (name, seqlens, vocab, ignored)) in PACKS.into_iter().enumerate() {
        let pack = Pack::random(seed as u64, seqlens, vocab, ignored);
        let tol = tolerance(ToleranceClass::Loss, DType::F64);
        assert_loss_close(name, pack.thd_collated::<f64>(), pack.oracle::<f64>(), tol);
    }
}

#[test]
fn packed_loss_matches_oracle_f32() {
    for (seed, (name, seqlens, vocab, ignored)) in PACKS.into_iter().enumerate() {
        let pack = Pack::random(seed as u64, seqlens, vocab, ignored);
        // The oracle reads the same f32 logits (exact in f64); thd computes in f32 lanes.
        let tol = tolerance(ToleranceClass::Loss, DType::F32);
        assert_loss_close(name, pack.thd_collated::<f32>(), pack.oracle::<f32>(), tol);
    }
}

#[test]
fn packed_loss_matches_oracle_shifted_convention() {
    // Megatron / TE: labels pre-shifted within each sequence, -100 at every sequence's end.
    let pack = Pack::random(9, &[6, 1, 0, 10, 3], 13, 0.2);
    let mut shifted = vec![IGNORE_INDEX; pack.labels.len()];
    let mut start = 0;
    for &len in &pack.seqlens {
        let end = start + len as usize;
        if len > 0 {
            // logits[t] predicts the next token's label, within the sequence.
            shifted[start..end - 1].copy_from_slice(&pack.labels[start + 1..end]);
        }
        start = end;
    }
    let got =
        packed_cross_entropy(&pack.logits, pack.vocab, &shifted, LabelConvention::Shifted).unwrap();
    assert_loss_close(
        "shifted",
        got,
        pack.oracle::<f64>(),
        tolerance(ToleranceClass::Loss, DType::F64),
    );
}

#[test]
fn last_label_of_a_sequence_never_comes_from_the_next() {
    // Sequence 0 ends on a token whose logits are confident about class 0; sequence 1 starts
    // with class 3. A leak (sequence 0's last position predicting sequence 1's first label)
    // adds a cost of about 40 to the sum and one to the count.
    let vocab = 4;
    let mut pack = Pack::random(3, &[3, 4], vocab, 0.0);
    pack.logits[2 * vocab..3 * vocab].copy_from_slice(&[40.0, 0.0, 0.0, 0.0]);
    pack.labels[3] = 3;
    let want = pack.oracle::<f64>();
    assert_eq!(want.count, 2 + 3);

    // thd with the collator's convention (-100 at each segment start) gives the oracle's answer.
    let tol = tolerance(ToleranceClass::Loss, DType::F64);
    assert_loss_close("collated", pack.thd_collated::<f64>(), want, tol);

    // Without it (raw labels concatenated, as a broken collator would), the leak shows.
    let leaked =
        packed_cross_entropy(&pack.logits, vocab, &pack.labels, LabelConvention::Unshifted)
            .unwrap();
    assert_eq!(leaked.count, want.count + 1);
    assert!(leaked.nll - want.nll_sum > 39.0, "leak adds ≈ 40: {leaked:?} vs {want:?}");
    assert!(!tol.allows(leaked.mean(), want.mean()));
}

#[test]
fn all_ignored_loss_is_zero_not_nan() {
    let mut pack = Pack::random(4, &[5, 2, 8], 6, 0.0);
    pack.labels.fill(IGNORE_INDEX);
    let want = pack.oracle::<f32>();
    assert_eq!(want, CrossEntropy { nll_sum: 0.0, count: 0 });
    assert_eq!(want.mean(), 0.0);
    let got = pack.thd_collated::<f32>();
    assert_eq!((got.nll, got.count, got.mean()), (0.0, 0, 0.0));
    // Only the sequence starts are valid: the collator masks them, so nothing remains either.
    let mut starts = Pack::random(5, &[5, 2, 8], 6, 0.0);
    let firsts: Vec<usize> = starts
        .seqlens
        .iter()
        .scan(0, |at, &l| Some(std::mem::replace(at, *at + l as usize)))
        .collect();
    for (t, y) in starts.labels.iter_mut().enumerate() {
        if !firsts.contains(&t) {
            *y = IGNORE_INDEX;
        }
    }
    assert_eq!(starts.oracle::<f64>().count, 0);
    assert_eq!(starts.thd_collated::<f64>().mean(), 0.0);
}
