//! PACKER as a state machine (proptest-state-machine): any built-in packer is driven by a
//! random sequence of `push(batch)` and `end_epoch()` calls; after every call the packs emitted
//! so far fit the capacity and never hold an example more often than it was pushed, and at the
//! end `finish()` gives back everything (conservation). A push the packer must refuse (an
//! example over the capacity under `OverLength::Error`) fails and consumes nothing. Shrinking
//! removes calls, then examples.

use proptest::collection::vec;
use proptest::prelude::*;
use proptest_state_machine::{ReferenceStateMachine, StateMachineTest, prop_state_machine};
use thd::pack::{Example, Packer, PackerSpec};

use crate::checks::{EmittedPack, PackerRun, check_conservation, check_emitted_so_far};
use crate::strategies::{arb_packer_spec, spec_limits};

/// One call on the packer. Ids are assigned by the model in push order.
#[derive(Debug, Clone)]
enum Call {
    Push(Vec<(u32, u32)>),
    /// A batch whose example `at` is one token over what the packer admits (only generated
    /// under `OverLength::Error`): the push must fail and consume nothing.
    PushInvalid(Vec<(u32, u32)>, usize),
    EndEpoch,
}

/// The model: the spec and every example pushed so far.
#[derive(Debug, Clone)]
struct Model {
    spec: PackerSpec,
    pushed: Vec<Example>,
    last_batch: Vec<Example>,
    epoch: usize,
}

impl ReferenceStateMachine for Model {
    type State = Model;
    type Transition = Call;

    fn init_state() -> BoxedStrategy<Model> {
        arb_packer_spec()
            .prop_map(|spec| Model { spec, pushed: Vec::new(), last_batch: Vec::new(), epoch: 0 })
            .boxed()
    }

    fn transitions(state: &Model) -> BoxedStrategy<Call> {
        let cap = state.spec.capacity();
        let (max_ok, _) = spec_limits(&state.spec);
        let max = max_ok.unwrap_or(cap + cap / 2);
        let push = vec((0..=max, 0..=max), 0..=6).prop_map(Call::Push);
        match max_ok {
            Some(limit) => prop_oneof![
                4 => push,
                1 => Just(Call::EndEpoch),
                1 => (vec((0..=limit, 0..=limit), 1..=4), any::<prop::sample::Index>())
                    .prop_map(|(lens, at)| { let k = at.index(lens.len()); Call::PushInvalid(lens, k) }),
            ]
            .boxed(),
            None => prop_oneof![4 => push, 1 => Just(Call::EndEpoch)].boxed(),
        }
    }

    fn apply(mut state: Model, call: &Call) -> Model {
        state.last_batch.clear();
        if let Call::EndEpoch = call {
            state.epoch += 1;
        }
        if let Call::Push(lens) = call {
            let (_, pairs) = spec_limits(&state.spec);
            for &(a, b) in lens {
                let id = state.pushed.len() as u64;
                let e = if pairs && b % 3 == 0 {
                    Example::pair(id, a, b)
                } else {
                    Example::single(id, a)
                };
                state.pushed.push(e);
                state.last_batch.push(e);
            }
        }
        state
    }
}

/// The packer under test and what it has emitted.
struct Sut {
    packer: Box<dyn Packer>,
    run: PackerRun,
}

struct PackerMachine;

impl StateMachineTest for PackerMachine {
    type SystemUnderTest = Sut;
    type Reference = Model;

    fn init_test(model: &Model) -> Sut {
        Sut { packer: model.spec.build().expect("a valid spec"), run: PackerRun::default() }
    }

    fn apply(mut sut: Sut, model: &Model, call: Call) -> Sut {
        // The model has applied the call already: an end of epoch counted its epoch.
        let epoch = if matches!(call, Call::EndEpoch) { model.epoch - 1 } else { model.epoch };
        let packs = match call {
            Call::Push(_) => sut.packer.push(&model.last_batch),
            Call::EndEpoch => sut.packer.end_epoch(),
            Call::PushInvalid(lens, at) => {
                let (limit, _) = spec_limits(&model.spec);
                let limit = limit.expect("only generated under OverLength::Error");
                let batch: Vec<Example> = lens
                    .iter()
                    .enumerate()
                    .map(|(k, &(a, _))| {
                        let len = if k == at { limit + 1 } else { a };
                        Example::single(u64::MAX - k as u64, len)
                    })
                    .collect();
                let pending = sut.packer.pending();
                let dropped = sut.packer.dropped().len();
                let name = sut.packer.name().to_string();
                assert!(
                    sut.packer.push(&batch).is_err(),
                    "{name} accepted an example over its limit: {batch:?}"
                );
                assert_eq!(
                    (sut.packer.pending(), sut.packer.dropped().len()),
                    (pending, dropped),
                    "{name}: a failed push consumed examples"
                );
                return sut;
            }
        }
        .unwrap_or_else(|e| panic!("{} rejected a valid call: {e}", sut.packer.name()));
        let call = sut.run.packs.last().map_or(0, |p| p.call + 1);
        sut.run.packs.extend(packs.into_iter().map(|pack| EmittedPack { epoch, call, pack }));
        sut
    }

    fn check_invariants(sut: &Sut, model: &Model) {
        let so_far = PackerRun {
            pushed: model.pushed.clone(),
            packs: sut.run.packs.clone(),
            dropped: sut.packer.dropped().to_vec(),
            pending_after_finish: sut.packer.pending(),
            ..PackerRun::default()
        };
        if let Err(v) = check_emitted_so_far(&so_far, model.spec.capacity()) {
            panic!("{}: {v}", sut.packer.name());
        }
    }

    fn teardown(mut sut: Sut, model: Model) {
        let packs = sut.packer.finish().unwrap_or_else(|e| panic!("finish failed: {e}"));
        let call = sut.run.packs.last().map_or(0, |p| p.call + 1);
        sut.run.packs.extend(packs.into_iter().map(|pack| EmittedPack {
            epoch: usize::MAX,
            call,
            pack,
        }));
        sut.run.pushed = model.pushed;
        sut.run.dropped = sut.packer.dropped().to_vec();
        sut.run.pending_after_finish = sut.packer.pending();
        if let Err(v) = check_conservation(&sut.run, model.spec.capacity()) {
            panic!("{}: {v}", sut.packer.name());
        }
    }
}

prop_state_machine! {
    #[test]
    fn packer_state_machine_conserves_examples(sequential 1..24 => PackerMachine);
}
