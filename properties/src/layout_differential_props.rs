//! LAYOUT, differential: `thd`'s own validation ([`PackedBatch::new`], which guards every
//! constructor of a batch) and the gate's rules ([`check_layout`]) accept and reject the same
//! inputs.
//!
//! The two are separate code on purpose (the gate never calls the code it judges), so they
//! can drift; this property is what keeps them one rule set. Cases are a valid layout with at
//! most one planted fault, so about half are accepted and every rejection is a near miss.

use proptest::prelude::*;
use proptest::sample::Index;
use thd::{IGNORE_INDEX, LabelConvention, PackedBatch, PackedBatchParts};

use crate::checks::{IntSlice, LayoutView, check_layout};

/// A valid layout, as plain parts.
#[derive(Debug, Clone)]
struct Valid {
    /// Real segments: (real length, padding after the real tokens).
    real: Vec<(usize, usize)>,
    /// Mock segments: (real length, padding); each stores at least one token.
    mock: Vec<(usize, usize)>,
    /// Whether `cu_seqlens_padded` is given (otherwise padding lengths are ignored).
    padded: bool,
    /// Tokens after the last stored segment (static padding).
    tail: usize,
    /// `num_real_seqs` given even with no mock segment.
    count_given: bool,
    /// Position ids given (otherwise `thd` derives them and the gate skips the rule).
    positions_given: bool,
    convention: LabelConvention,
    /// Labels before the boundary rule is applied, cycled over the tokens.
    labels: Vec<i64>,
}

/// One fault planted in a valid layout: each breaks (or, for `OtherConventionLabel`, probes) one
/// LAYOUT rule. `Index` values pick a position and shrink towards the first.
#[derive(Debug, Clone)]
enum Fault {
    None,
    /// An offsets vector that does not start at 0.
    FirstNotZero {
        padded: bool,
        first: i64,
    },
    /// One offset lowered below its predecessor (non-monotone) or anywhere else.
    SetOffset {
        padded: bool,
        at: Index,
        value: i64,
    },
    /// The last offset past the token count.
    PastEnd {
        padded: bool,
        by: i64,
    },
    /// `cu_seqlens_padded` with one entry too few or too many.
    PaddedCount {
        extra: bool,
    },
    /// A padded segment shorter than its real length.
    PaddedShort {
        at: Index,
    },
    /// A real token's position id off by `delta` (not restarting, or RoBERTa's base).
    Position {
        at: Index,
        delta: i64,
    },
    /// A segment's boundary label (under the batch's convention) set to the next segment's first
    /// token (`label: None`, a leak both must reject) or to another token (`Some`, the segment's
    /// own target, as Automodel's per-sample shift or a separator leaves it: both must accept).
    LabelLeak {
        at: Index,
        label: Option<i64>,
    },
    /// The *other* convention's boundary label set to a token: legal, both must accept it.
    OtherConventionLabel {
        at: Index,
        label: i64,
    },
    /// `num_real_seqs` past the segment count.
    TooManyReal {
        by: usize,
    },
    /// The final storage offset repeated and marked mock (AReaL #1103).
    ZeroLengthMock,
    /// A per-token tensor one entry short or long.
    TokenCount {
        positions: bool,
        longer: bool,
    },
    /// No offsets at all.
    EmptyOffsets,
}

fn arb_valid() -> impl Strategy<Value = Valid> {
    (
        proptest::collection::vec((0usize..=5, 0usize..=3), 0..=4),
        proptest::collection::vec((0usize..=3, 0usize..=2), 0..=2),
        any::<bool>(),
        0usize..=3,
        any::<bool>(),
        any::<bool>(),
        prop_oneof![Just(LabelConvention::Unshifted), Just(LabelConvention::Shifted)],
        proptest::collection::vec(prop_oneof![Just(IGNORE_INDEX), 1i64..50], 1..=8),
    )
        .prop_map(
            |(real, mock, padded, tail, count_given, positions_given, convention, labels)| Valid {
                real,
                mock,
                padded,
                tail,
                count_given,
                positions_given,
                convention,
                labels,
            },
        )
}

fn arb_fault() -> impl Strategy<Value = Fault> {
    prop_oneof![
        8 => Just(Fault::None),
        1 => (any::<bool>(), prop_oneof![Just(1i64), Just(-1), 2i64..5])
            .prop_map(|(padded, first)| Fault::FirstNotZero { padded, first }),
        2 => (any::<bool>(), any::<Index>(), -2i64..40)
            .prop_map(|(padded, at, value)| Fault::SetOffset { padded, at, value }),
        1 => (any::<bool>(), 1i64..4).prop_map(|(padded, by)| Fault::PastEnd { padded, by }),
        1 => any::<bool>().prop_map(|extra| Fault::PaddedCount { extra }),
        1 => any::<Index>().prop_map(|at| Fault::PaddedShort { at }),
        2 => (any::<Index>(), prop_oneof![Just(1i64), Just(-1), Just(2)])
            .prop_map(|(at, delta)| Fault::Position { at, delta }),
        2 => any::<Index>().prop_map(|at| Fault::LabelLeak { at, label: None }),
        1 => (any::<Index>(), 1i64..50)
            .prop_map(|(at, label)| Fault::LabelLeak { at, label: Some(label) }),
        1 => (any::<Index>(), 1i64..50)
            .prop_map(|(at, label)| Fault::OtherConventionLabel { at, label }),
        1 => (1usize..3).prop_map(|by| Fault::TooManyReal { by }),
        1 => Just(Fault::ZeroLengthMock),
        1 => (any::<bool>(), any::<bool>())
            .prop_map(|(positions, longer)| Fault::TokenCount { positions, longer }),
        1 => Just(Fault::EmptyOffsets),
    ]
}

fn prefix(lens: impl Iterator<Item = usize>) -> Vec<i64> {
    let mut cu = vec![0i64];
    for l in lens {
        cu.push(cu.last().unwrap() + l as i64);
    }
    cu
}

/// The storage range of every segment's real tokens.
fn real_ranges(cu: &[i64], storage: &[i64]) -> Vec<std::ops::Range<usize>> {
    (0..cu.len() - 1)
        .map(|i| {
            let start = storage[i] as usize;
            start..start + (cu[i + 1] - cu[i]) as usize
        })
        .collect()
}

/// The boundary label of segment range `r` under `convention` (None for an empty segment or
/// one whose boundary is past the tokens).
fn boundary(r: &std::ops::Range<usize>, convention: LabelConvention, t: usize) -> Option<usize> {
    let tok = match convention {
        _ if r.is_empty() => return None,
        LabelConvention::Unshifted => r.end,
        LabelConvention::Shifted => r.end - 1,
    };
    (tok < t).then_some(tok)
}

fn other(c: LabelConvention) -> LabelConvention {
    match c {
        LabelConvention::Unshifted => LabelConvention::Shifted,
        LabelConvention::Shifted => LabelConvention::Unshifted,
    }
}

impl Valid {
    fn build(&self) -> PackedBatchParts {
        let segs: Vec<(usize, usize)> = self.real.iter().chain(&self.mock).copied().collect();
        // A mock segment stores at least one token: its real length without padded offsets.
        let segs: Vec<(usize, usize)> = segs
            .iter()
            .enumerate()
            .map(|(i, &(s, pad))| {
                let mock = i >= self.real.len();
                match (mock, self.padded) {
                    (true, false) => (s.max(1), 0),
                    (true, true) if s + pad == 0 => (0, 1),
                    (_, true) => (s, pad),
                    (_, false) => (s, 0),
                }
            })
            .collect();
        let cu = prefix(segs.iter().map(|&(s, _)| s));
        let padded = self.padded.then(|| prefix(segs.iter().map(|&(s, p)| s + p)));
        let storage = padded.clone().unwrap_or_else(|| cu.clone());
        let t = *storage.last().unwrap() as usize + self.tail;
        let ranges = real_ranges(&cu, &storage);
        let mut positions = vec![0i64; t];
        for r in &ranges {
            for (j, tok) in r.clone().enumerate() {
                positions[tok] = j as i64;
            }
        }
        let mut labels: Vec<i64> = (0..t).map(|k| self.labels[k % self.labels.len()]).collect();
        for r in &ranges {
            if let Some(tok) = boundary(r, self.convention, t) {
                labels[tok] = IGNORE_INDEX;
            }
        }
        let num_real_seqs = (self.count_given || !self.mock.is_empty()).then_some(self.real.len());
        PackedBatchParts {
            input_ids: (0..t as i64).map(|k| 100 + k).collect(),
            labels,
            position_ids: self.positions_given.then_some(positions),
            cu_seqlens: cu,
            cu_seqlens_padded: padded,
            num_real_seqs,
            label_convention: self.convention,
        }
    }
}

/// The offsets vector a fault targets: the padded one if asked for and present, else the real.
fn offsets_mut(p: &mut PackedBatchParts, padded: bool) -> &mut Vec<i64> {
    match p.cu_seqlens_padded.as_mut() {
        Some(v) if padded => v,
        _ => &mut p.cu_seqlens,
    }
}

impl Fault {
    fn plant(&self, mut p: PackedBatchParts) -> PackedBatchParts {
        let t = p.input_ids.len();
        let storage = p.cu_seqlens_padded.clone().unwrap_or_else(|| p.cu_seqlens.clone());
        let ranges = real_ranges(&p.cu_seqlens, &storage);
        match *self {
            Fault::None => {}
            Fault::FirstNotZero { padded, first } => offsets_mut(&mut p, padded)[0] = first,
            Fault::SetOffset { padded, ref at, value } => {
                let v = offsets_mut(&mut p, padded);
                let i = at.index(v.len());
                v[i] = value;
            }
            Fault::PastEnd { padded, by } => {
                *offsets_mut(&mut p, padded).last_mut().unwrap() = t as i64 + by;
            }
            Fault::PaddedCount { extra } => {
                let v = p.cu_seqlens_padded.get_or_insert_with(|| p.cu_seqlens.clone());
                if extra {
                    v.push(*v.last().unwrap());
                } else {
                    v.pop();
                }
            }
            Fault::PaddedShort { ref at } => {
                // Segment i's padded length one below its real length (needs a real token).
                let b = p.cu_seqlens.len() - 1;
                let v = p.cu_seqlens_padded.get_or_insert_with(|| p.cu_seqlens.clone());
                if b > 0 {
                    let i = at.index(b);
                    let s = p.cu_seqlens[i + 1] - p.cu_seqlens[i];
                    let cut = v[i + 1] - v[i] - s + 1;
                    for x in &mut v[i + 1..] {
                        *x -= cut;
                    }
                }
            }
            Fault::Position { ref at, delta } => {
                let pos = p.position_ids.get_or_insert_with(|| {
                    let mut pos = vec![0; t];
                    for r in &ranges {
                        for (j, tok) in r.clone().enumerate() {
                            pos[tok] = j as i64;
                        }
                    }
                    pos
                });
                if t > 0 {
                    pos[at.index(t)] += delta;
                }
            }
            Fault::LabelLeak { ref at, label } => {
                // (boundary label, the next segment's first token) for every segment with a next.
                let spots: Vec<(usize, i64)> = ranges
                    .windows(2)
                    .filter(|w| !w[1].is_empty())
                    .filter_map(|w| {
                        let tok = boundary(&w[0], p.label_convention, t)?;
                        Some((tok, p.input_ids[w[1].start]))
                    })
                    .collect();
                if !spots.is_empty() {
                    let (tok, first) = spots[at.index(spots.len())];
                    p.labels[tok] = label.unwrap_or(first);
                }
            }
            Fault::OtherConventionLabel { ref at, label } => {
                let convention = other(p.label_convention);
                let spots: Vec<usize> =
                    ranges.iter().filter_map(|r| boundary(r, convention, t)).collect();
                if !spots.is_empty() {
                    p.labels[spots[at.index(spots.len())]] = label;
                }
            }
            Fault::TooManyReal { by } => p.num_real_seqs = Some(p.cu_seqlens.len() - 1 + by),
            Fault::ZeroLengthMock => {
                let b = p.cu_seqlens.len() - 1;
                p.num_real_seqs = Some(p.num_real_seqs.unwrap_or(b));
                p.cu_seqlens.push(*p.cu_seqlens.last().unwrap());
                if let Some(v) = p.cu_seqlens_padded.as_mut() {
                    v.push(*v.last().unwrap());
                }
            }
            Fault::TokenCount { positions, longer } => {
                let v = if positions {
                    p.position_ids.get_or_insert_with(|| vec![0; t])
                } else {
                    &mut p.labels
                };
                if longer {
                    v.push(IGNORE_INDEX);
                } else {
                    v.pop();
                }
            }
            Fault::EmptyOffsets => p.cu_seqlens.clear(),
        }
        p
    }
}

fn view(p: &PackedBatchParts) -> LayoutView<'_> {
    LayoutView {
        num_tokens: p.input_ids.len(),
        input_ids: Some(IntSlice::from(&p.input_ids)),
        cu_seqlens: IntSlice::from(&p.cu_seqlens),
        cu_seqlens_padded: p.cu_seqlens_padded.as_deref().map(IntSlice::from),
        position_ids: p.position_ids.as_deref().map(IntSlice::from),
        labels: Some(IntSlice::from(&p.labels)),
        label_convention: p.label_convention,
        num_real_seqs: p.num_real_seqs,
        facts: rules::contract::Contract { position_base: Some(0), ..Default::default() },
        ..Default::default()
    }
}

proptest! {
    /// `PackedBatch::new` accepts a batch exactly when `check_layout` finds no violation.
    ///
    /// Compared: the rules both sides have, which is every rule of [`check_layout`] except
    /// the position base:
    /// - `cu_seqlens` and `cu_seqlens_padded`: non-empty, start at 0, non-decreasing, end at or
    ///   before `T` (int32 follows from `T`, which cannot exceed it here);
    /// - `cu_seqlens_padded` has `B + 1` entries and `pᵢ ≥ sᵢ`;
    /// - `labels` and `position_ids` have `T` entries;
    /// - `num_real_seqs ≤ B`, and every mock segment stores at least one token (AReaL #1103);
    /// - position ids restart at 0 on every segment's real tokens;
    /// - no cross-document label, under both conventions: the boundary label (the one after the
    ///   segment for `Unshifted`, its last one for `Shifted`) is not the next segment's first
    ///   token; any other trained label there is the segment's own target and must be accepted
    ///   by both, as must any label at the other convention's boundary.
    ///
    /// Not compared, because only one side has it: `position_base` (the gate knows RoBERTa's
    /// `padding_idx + 1`; thd numbers from 0, so every view here has base 0), and the gate's
    /// optional tensors (thd always has labels, and derives position ids when none are given,
    /// where the gate skips the rule: both accept, so the case is still compared).
    #[test]
    fn packed_batch_new_agrees_with_check_layout(valid in arb_valid(), fault in arb_fault()) {
        let parts = fault.plant(valid.build());
        let thd = PackedBatch::new(parts.clone()).map(|_| ()).map_err(|e| e.to_string());
        let gate = check_layout(&view(&parts)).map_err(|v| v.to_string());
        prop_assert_eq!(
            thd.is_ok(),
            gate.is_ok(),
            "thd and the gate disagree on\n{:#?}\n\
             thd::PackedBatch::new: {:?}\nproperties::check_layout: {:?}",
            parts,
            thd,
            gate
        );
    }
}
