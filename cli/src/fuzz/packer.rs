//! Packers: conservation (nothing lost or duplicated unless dropped explicitly), capacity,
//! determinism, and optionally the first-fit property — the PACKER rules of
//! `properties::checks`.

use crate::protocol::{PackEntry, PackerExample, PackerRequest, PackerResponse};
use properties::checks::{
    EmittedPack, PackerRun, check_conservation, check_deterministic, check_pairwise_full,
};
use proptest::collection::vec;
use proptest::prelude::*;
use proptest::strategy::BoxedStrategy;
use serde_json::Value;
use std::cell::RefCell;
use thd::pack::{DropReason, Dropped, Example, Pack, PackItem};

use super::{Failure, Target, response};

/// The packer target.
pub struct PackerTarget {
    /// Also check that any two packs together exceed the capacity.
    pub first_fit: bool,
    /// What the judged answers cost in packs (the run's efficiency, in the summary).
    efficiency: RefCell<Efficiency>,
}

impl PackerTarget {
    /// A packer target; `first_fit`: also check that any two packs together exceed the capacity.
    pub fn new(first_fit: bool) -> Self {
        Self { first_fit, efficiency: RefCell::default() }
    }
}

/// Packs emitted against the lower bound `⌈Σ s / C⌉` of each answer, and on answers of at most
/// 12 packed examples against the exact optimum.
#[derive(Debug, Default)]
struct Efficiency {
    packs: u64,
    lower_bound: u64,
    small_packs: u64,
    small_optimum: u64,
    small_cases: u64,
}

impl Target for PackerTarget {
    type Case = PackerRequest;

    fn kind(&self) -> &'static str {
        "packer"
    }

    fn invariants(&self) -> &'static str {
        if self.first_fit {
            "packer-conservation, packer-capacity, packer-deterministic, packer-first-fit"
        } else {
            "packer-conservation, packer-capacity, packer-deterministic"
        }
    }

    /// Capacities in 1..=64; up to 24 examples. Most lengths are fractions of the capacity
    /// (`⌈C·r/32⌉`, r in 1..=48, so up to 1.5·C and some over it): shrinking the capacity then
    /// shrinks every length with it, and a failure shrinks to the smallest capacity that shows
    /// it (independent lengths left it at 12 or 21). The rest are the shapes of the properties
    /// crate's `arb_seq_lens`: arbitrary lengths of 1..=96, tiny ones, all equal.
    fn strategy(&self) -> BoxedStrategy<PackerRequest> {
        let request = |capacity: u64, lens: Vec<u64>, seed: u64| PackerRequest {
            capacity,
            seed,
            examples: lens
                .into_iter()
                .enumerate()
                .map(|(i, len)| PackerExample { id: i as u64, len })
                .collect(),
        };
        let relative = (1u64..=64, vec(1u64..=48, 0..=24), 0u64..=3).prop_map(
            move |(capacity, ratios, seed)| {
                let lens = ratios.into_iter().map(|r| (capacity * r).div_ceil(32)).collect();
                request(capacity, lens, seed)
            },
        );
        let absolute = prop_oneof![
            2 => vec(1u64..=96, 0..=24),
            1 => vec(1u64..=2, 0..=24),
            1 => (1u64..=96, 0usize..=24).prop_map(|(l, n)| vec![l; n]),
        ];
        // The relative shape first: a union shrinks towards its earlier alternatives.
        prop_oneof![
            3 => relative,
            1 => (1u64..=64, absolute, 0u64..=3)
                .prop_map(move |(capacity, lens, seed)| request(capacity, lens, seed)),
        ]
        .boxed()
    }

    fn summary(&self) -> Option<(String, Value)> {
        let e = self.efficiency.borrow();
        if e.packs == 0 {
            return None;
        }
        let ratio = |a: u64, b: u64| if b == 0 { 1.0 } else { a as f64 / b as f64 };
        let line = format!(
            "efficiency: {} packs for a lower bound of {} (Σ⌈Σs/C⌉, ×{:.3}); on the {} answers of \
             at most 12 packed examples, {} packs for an optimum of {} (×{:.3})",
            e.packs,
            e.lower_bound,
            ratio(e.packs, e.lower_bound),
            e.small_cases,
            e.small_packs,
            e.small_optimum,
            ratio(e.small_packs, e.small_optimum)
        );
        let v = serde_json::json!({
            "packs": e.packs, "lower_bound": e.lower_bound,
            "packs_per_lower_bound": ratio(e.packs, e.lower_bound),
            "small_cases": e.small_cases, "small_packs": e.small_packs,
            "small_optimum": e.small_optimum,
            "packs_per_optimum": ratio(e.small_packs, e.small_optimum),
        });
        Some((line, v))
    }

    fn payload(&self, case: &PackerRequest) -> Value {
        serde_json::to_value(case).unwrap_or(Value::Null)
    }

    fn judge(
        &self,
        case: &PackerRequest,
        send: &mut dyn FnMut() -> Result<String, Failure>,
    ) -> Result<(), Failure> {
        let (first, line) = response::<PackerResponse>(send)?;
        let with = |mut f: Failure| {
            f.response = Some(line.clone());
            f
        };
        pieces_in_bounds(case, &first).map_err(with)?;
        check(case, &first, self.first_fit).map_err(with)?;
        self.measure(case, &first);
        let (second, line2) = response::<PackerResponse>(send)?;
        let emitted = |r: &PackerResponse| -> Vec<EmittedPack> {
            // The dropped list is the packer's answer too: compared as a last pseudo-pack.
            let dropped: Vec<PackEntry> =
                r.dropped.iter().map(|&id| PackEntry::Whole(id)).collect();
            r.packs
                .iter()
                .chain(std::iter::once(&dropped))
                .map(|p| EmittedPack {
                    epoch: 0,
                    call: 0,
                    pack: Pack::new(p.iter().map(|&e| item(e, |_| 0)).collect()),
                })
                .collect()
        };
        check_deterministic(&emitted(&first), &emitted(&second)).map_err(|v| {
            let mut f = Failure::from_violation(v);
            f.detail += &format!("\n(the last pack listed is the dropped list)\n{line}\n{line2}");
            f.response = Some(line2.clone());
            f
        })?;
        Ok(())
    }
}

impl PackerTarget {
    /// Adds an answer that held every rule to the efficiency: its non-empty packs against
    /// `⌈Σ s / C⌉` of what it packed (plus one per over-long example), and against the exact
    /// optimum when that is small.
    fn measure(&self, req: &PackerRequest, resp: &PackerResponse) {
        let len = |id: u64| req.examples.iter().find(|e| e.id == id).map_or(0, |e| e.len);
        let real = |(i, _): &(usize, &Vec<PackEntry>)| !resp.padding.contains(i);
        let packed: Vec<u64> = resp
            .packs
            .iter()
            .enumerate()
            .filter(real)
            .flat_map(|(_, p)| p)
            .map(|&e| match e {
                PackEntry::Whole(id) => len(id),
                PackEntry::Piece(_, start, end) => end - start,
            })
            .collect();
        let packs =
            resp.packs.iter().enumerate().filter(real).filter(|(_, p)| !p.is_empty()).count()
                as u64;
        let cap = req.capacity.max(1);
        // The bounds are over the packed examples that fit; an over-long one alone in its own
        // pack (declared `oversize`) is one pack in every count.
        let fits: Vec<u32> = packed
            .iter()
            .filter(|&&l| l <= cap)
            .map(|&l| u32::try_from(l).unwrap_or(u32::MAX))
            .collect();
        let over = (packed.len() - fits.len()) as u64;
        let mut e = self.efficiency.borrow_mut();
        e.packs += packs;
        e.lower_bound += fits.iter().map(|&l| u64::from(l)).sum::<u64>().div_ceil(cap) + over;
        if packed.len() <= 12 && u32::try_from(cap).is_ok() {
            let cap32 = u32::try_from(cap).unwrap_or(u32::MAX);
            e.small_cases += 1;
            e.small_packs += packs;
            e.small_optimum += properties::harness::optimal_bins(&fits, cap32) as u64 + over;
        }
    }
}

/// A pack entry as the PACKER rules read it: a whole example of `len(id)` tokens, or a piece at
/// its offset (checked to lie within the example by [`pieces_in_bounds`]).
fn item(e: PackEntry, len: impl Fn(u64) -> u32) -> PackItem {
    let as_u32 = |n: u64| u32::try_from(n).unwrap_or(u32::MAX);
    match e {
        PackEntry::Whole(id) => Example::single(id, len(id)).item(),
        PackEntry::Piece(id, start, end) => {
            let mut i = Example::single(id, as_u32(end.saturating_sub(start))).item();
            i.offset = as_u32(start);
            i
        }
    }
}

/// Every piece `[id, start, end]` names tokens of its example: `start < end <= len` (the
/// protocol's shape; whether the pieces tile the example is the PACKER rule's).
fn pieces_in_bounds(req: &PackerRequest, resp: &PackerResponse) -> Result<(), Failure> {
    for &e in resp.packs.iter().flatten() {
        if let PackEntry::Piece(id, start, end) = e {
            let len = req.examples.iter().find(|x| x.id == id).map_or(0, |x| x.len);
            if !(start < end && end <= len) {
                return Err(Failure::schema(
                    format!(
                        "piece [{id}, {start}, {end}] is not a range of example {id}'s {len} \
                         tokens (start < end <= len)"
                    ),
                    "",
                ));
            }
        }
    }
    Ok(())
}

/// Judges one answer with the PACKER rules of `properties::checks`: conservation and capacity
/// over the request's own ids (any ids, repeated ones too), and first fit when asked.
fn check(req: &PackerRequest, resp: &PackerResponse, first_fit: bool) -> Result<(), Failure> {
    let cap = u32::try_from(req.capacity).unwrap_or(u32::MAX);
    let as_u32 = |n: u64| u32::try_from(n).unwrap_or(u32::MAX);
    let len = |id: u64| req.examples.iter().find(|e| e.id == id).map_or(0, |e| as_u32(e.len));
    let packs: Vec<Pack> =
        resp.packs.iter().map(|p| Pack::new(p.iter().map(|&e| item(e, len)).collect())).collect();
    let item = |id: u64| Example::single(id, len(id)).item();
    if let Some(&i) = resp.padding.iter().find(|&&i| i >= packs.len()) {
        return Err(Failure::schema(
            format!("padding names pack {i}, but there are {} packs", packs.len()),
            "",
        ));
    }
    let emitted = |padding: bool| -> Vec<EmittedPack> {
        packs
            .iter()
            .enumerate()
            .filter(|(i, _)| resp.padding.contains(i) == padding)
            .map(|(_, pack)| EmittedPack { epoch: 0, call: 0, pack: pack.clone() })
            .collect()
    };
    let run = PackerRun {
        pushed: req.examples.iter().map(|e| Example::single(e.id, as_u32(e.len))).collect(),
        packs: emitted(false),
        padding: emitted(true),
        dropped: resp
            .dropped
            .iter()
            .map(|&id| Dropped { item: item(id), reason: DropReason::OverLength })
            .collect(),
        pending_after_finish: 0,
        oversize: resp.oversize.clone(),
    };
    check_conservation(&run, cap).map_err(Failure::from_violation)?;
    if first_fit {
        let real: Vec<Pack> = run.packs.iter().map(|e| e.pack.clone()).collect();
        check_pairwise_full(&real, cap).map_err(Failure::from_violation)?;
    }
    Ok(())
}
