//! Packers: conservation (nothing lost or duplicated unless dropped explicitly), capacity,
//! determinism, and optionally the first-fit property.

use proptest::collection::vec;
use proptest::prelude::*;
use proptest::strategy::BoxedStrategy;
use serde_json::Value;
use thdcheck::protocol::{PackerExample, PackerRequest, PackerResponse};

use super::{Failure, Target, response};

/// The packer target.
pub struct PackerTarget {
    /// Also check that any two packs together exceed the capacity.
    pub first_fit: bool,
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

    /// Capacities in 1..=64; up to 24 examples of 1..=96 tokens (so some exceed the
    /// capacity), in the shapes of the properties crate's `arb_seq_lens`: arbitrary, tiny, all
    /// equal.
    fn strategy(&self) -> BoxedStrategy<PackerRequest> {
        let lens = prop_oneof![
            4 => vec(1u64..=96, 0..=24),
            1 => vec(1u64..=2, 0..=24),
            1 => (1u64..=96, 0usize..=24).prop_map(|(l, n)| vec![l; n]),
        ];
        (1u64..=64, lens, 0u64..=3)
            .prop_map(|(capacity, lens, seed)| PackerRequest {
                capacity,
                seed,
                examples: lens
                    .into_iter()
                    .enumerate()
                    .map(|(i, len)| PackerExample { id: i as u64, len })
                    .collect(),
            })
            .boxed()
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
        check(case, &first, self.first_fit).map_err(with)?;
        let (second, line2) = response::<PackerResponse>(send)?;
        if second != first {
            let mut f = Failure::violation(
                "packer-deterministic",
                format!("the same request twice gave different packs:\n{line}\n{line2}"),
            );
            f.response = Some(line2);
            return Err(f);
        }
        Ok(())
    }
}

fn check(req: &PackerRequest, resp: &PackerResponse, first_fit: bool) -> Result<(), Failure> {
    let n = req.examples.len();
    let len = |id: u64| req.examples.get(id as usize).map_or(0, |e| e.len);
    let mut seen: Vec<Option<String>> = vec![None; n];
    let mut place = |id: u64, at: String| -> Result<(), Failure> {
        let Some(slot) = seen.get_mut(id as usize) else {
            return Err(Failure::violation(
                "packer-conservation",
                format!("{at} holds example {id}, which was not offered (ids are 0..{n})"),
            ));
        };
        if let Some(before) = slot {
            return Err(Failure::violation(
                "packer-conservation",
                format!("example {id} appears twice: in {before} and in {at} (duplicated)"),
            ));
        }
        *slot = Some(at);
        Ok(())
    };
    for (p, pack) in resp.packs.iter().enumerate() {
        for &id in pack {
            place(id, format!("pack {p}"))?;
        }
    }
    for &id in &resp.dropped {
        place(id, "the dropped list".into())?;
    }
    if let Some(id) = seen.iter().position(Option::is_none) {
        return Err(Failure::violation(
            "packer-conservation",
            format!(
                "example {id} ({} tokens) is in no pack and not reported dropped: lost",
                len(id as u64)
            ),
        ));
    }
    let loads: Vec<u64> = resp.packs.iter().map(|p| p.iter().map(|&id| len(id)).sum()).collect();
    for (p, (&load, pack)) in loads.iter().zip(&resp.packs).enumerate() {
        if pack.is_empty() {
            return Err(Failure::violation("packer-capacity", format!("pack {p} is empty")));
        }
        if load > req.capacity {
            return Err(Failure::violation(
                "packer-capacity",
                format!("pack {p} holds {load} tokens {pack:?} > capacity {}", req.capacity),
            ));
        }
    }
    if first_fit {
        for a in 0..loads.len() {
            for b in a + 1..loads.len() {
                if loads[a] + loads[b] <= req.capacity {
                    return Err(Failure::violation(
                        "packer-first-fit",
                        format!(
                            "packs {a} ({} tokens) and {b} ({} tokens) fit together in capacity {}",
                            loads[a], loads[b], req.capacity
                        ),
                    ));
                }
            }
        }
    }
    Ok(())
}
