//! Packers: conservation (nothing lost or duplicated unless dropped explicitly), capacity,
//! determinism, and optionally the first-fit property — the PACKER rules of
//! `properties::checks`.

use crate::protocol::{PackerExample, PackerRequest, PackerResponse};
use properties::checks::{
    EmittedPack, PackerRun, check_conservation, check_deterministic, check_pairwise_full,
};
use proptest::collection::vec;
use proptest::prelude::*;
use proptest::strategy::BoxedStrategy;
use serde_json::Value;
use thd::pack::{DropReason, Dropped, Example, Pack};

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
        let emitted = |r: &PackerResponse| -> Vec<EmittedPack> {
            // The dropped list is the packer's answer too: compared as a last pseudo-pack.
            r.packs
                .iter()
                .chain(std::iter::once(&r.dropped))
                .map(|p| EmittedPack {
                    epoch: 0,
                    call: 0,
                    pack: Pack::new(p.iter().map(|&id| Example::single(id, 0).item()).collect()),
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

/// Judges one answer with the PACKER rules of `properties::checks`: conservation and capacity
/// over the request's own ids (any ids, repeated ones too), and first fit when asked.
fn check(req: &PackerRequest, resp: &PackerResponse, first_fit: bool) -> Result<(), Failure> {
    let cap = u32::try_from(req.capacity).unwrap_or(u32::MAX);
    let as_u32 = |n: u64| u32::try_from(n).unwrap_or(u32::MAX);
    let len = |id: u64| req.examples.iter().find(|e| e.id == id).map_or(0, |e| as_u32(e.len));
    let item = |id: u64| Example::single(id, len(id)).item();
    let packs: Vec<Pack> =
        resp.packs.iter().map(|p| Pack::new(p.iter().map(|&id| item(id)).collect())).collect();
    let run = PackerRun {
        pushed: req.examples.iter().map(|e| Example::single(e.id, as_u32(e.len))).collect(),
        packs: packs
            .iter()
            .map(|pack| EmittedPack { epoch: 0, call: 0, pack: pack.clone() })
            .collect(),
        dropped: resp
            .dropped
            .iter()
            .map(|&id| Dropped { item: item(id), reason: DropReason::OverLength })
            .collect(),
        pending_after_finish: 0,
    };
    check_conservation(&run, cap).map_err(Failure::from_violation)?;
    if first_fit {
        check_pairwise_full(&packs, cap).map_err(Failure::from_violation)?;
    }
    Ok(())
}
