//! Packers: conservation (nothing lost or duplicated unless dropped explicitly), capacity,
//! dealing, determinism, and optionally the first-fit property — the PACKER rules of
//! `rules::checks`. A packer is driven one request at a time (protocol version 1), or
//! through sessions of pushes over several epochs (`--session`, protocol version 2), so that a
//! streaming packer keeps its state and is judged on the whole session.

use std::cell::RefCell;
use std::collections::HashMap;

use crate::protocol::{
    PackEntry, PackerOptions, PackerRequest, PackerResponse, PackerSessionRequest, SESSION_VERSION,
};
use properties::strategies::fuzz::{
    PackerFuzzCase, PackerFuzzParams, Preconditions, arb_packer_fuzz_case,
};
use proptest::strategy::BoxedStrategy;
use rules::checks::{
    DeclaredDrops, EmittedPack, FuzzTarget, PackerInput, PackerPoint, PackerRun, judge_packer,
};
use serde_json::Value;
use thd::pack::{DropReason, Dropped, Example, Lens, Pack, PackItem};

use crate::args::Generation;

use super::{Applied, Failure, Target, response};

/// How a packer is driven, and what it is configured to do (the command's flags).
#[derive(Debug, Clone, Copy, Default)]
pub struct PackerConfig {
    /// Also check that any two packs (of one call, in a session) together exceed the capacity.
    pub first_fit: bool,
    /// Drive sessions (protocol version 2) instead of one-shot requests.
    pub session: bool,
    /// What the requests configure beyond the capacity.
    pub options: PackerOptions,
    /// Examples are DPO pairs.
    pub pairs: bool,
    /// Generate only examples that fit the capacity (padded).
    pub fitting_only: bool,
    /// What the packer asserts of a request: every generated request respects it.
    pub pre: Preconditions,
    /// What the packer may drop; any other drop is a `packer-drops` violation.
    pub drops: DropsDeclared,
    /// Which generators draw the cases.
    pub generation: Generation,
    /// Every request asks for a minimum number of packs (`min_packs`), drawn per case.
    pub min_packs: bool,
    /// Examples of 0 tokens are drawn too (`--empty-examples`).
    pub empty_examples: bool,
    /// `--dp-size LO..HI`: each case draws its DP size from `options.dp_size` (LO) to this,
    /// and shrinking may lower it to LO. `None`: the DP size is fixed, and kept.
    pub dp_size_max: Option<u64>,
}

/// The drops a stack declares, as the fuzzer holds them (the DP size comes from each case).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DropsDeclared {
    /// Over-length examples may be dropped.
    pub over_length: bool,
    /// The trailing packs beyond a multiple of the DP size may be dropped.
    pub dp_remainder: bool,
    /// Each epoch's last, incomplete pack may be lost unreported.
    pub drop_last: bool,
}

impl Default for DropsDeclared {
    fn default() -> Self {
        Self { over_length: true, dp_remainder: false, drop_last: false }
    }
}

impl Generation {
    /// The generators the flag names.
    fn generated(self) -> properties::strategies::fuzz::Generation {
        use properties::strategies::fuzz::Generation as Generated;
        match self {
            Generation::Mixed => Generated::Mixed,
            Generation::Uniform => Generated::Uniform,
            Generation::Edge => Generated::Edge,
        }
    }
}

/// The packer target.
pub struct PackerTarget {
    cfg: PackerConfig,
    /// What the judged answers cost in packs (the run's efficiency, in the summary).
    efficiency: RefCell<Efficiency>,
    /// The rules the run judged, for the report.
    applied: Applied,
}

impl PackerTarget {
    /// A packer target.
    pub fn new(cfg: PackerConfig) -> Self {
        Self { cfg, efficiency: RefCell::default(), applied: Applied::default() }
    }

    /// The registry's PACKER rules at one point of a case: the first violation, as a failure.
    fn judge_at(&self, input: &PackerInput<'_>) -> Result<(), Failure> {
        self.applied.with(|a| judge_packer(input, a)).map_err(Failure::from_violation)
    }

    /// A case's input at `point`: its capacity, DP size, minimum packs and declared drops.
    fn input<'a>(
        &self,
        case: &PackerFuzzCase,
        point: PackerPoint,
        run: &'a PackerRun,
    ) -> PackerInput<'a> {
        PackerInput {
            dp_size: case.dp_size,
            min_packs: case.min_packs,
            declared: self.declared(case),
            first_fit: self.cfg.first_fit,
            ..PackerInput::new(point, run, u32::try_from(case.capacity).unwrap_or(u32::MAX))
        }
    }

    /// The multiple every length is padded to (1: none).
    fn multiple(&self) -> u64 {
        self.cfg.options.pad_to_multiple_of.unwrap_or(1).max(1)
    }

    /// Whether the packer accepts `case`: every push as the preconditions admit, every length
    /// fitting under `--fitting-only`.
    fn admits(&self, case: &PackerFuzzCase) -> bool {
        let m = self.multiple();
        case.epochs.iter().flatten().all(|push| self.cfg.pre.admits(push.len(), case.dp_size))
            && (!self.cfg.fitting_only
                || case
                    .examples()
                    .flat_map(|e| e.lens.branches())
                    .all(|l| l.div_ceil(m) * m <= case.capacity))
    }

    /// Reductions: a smaller capacity (to the least that keeps `--fitting-only` lengths
    /// fitting, to half, by one).
    fn smaller_capacity(&self, case: &PackerFuzzCase, out: &mut Vec<PackerFuzzCase>) {
        let m = self.multiple();
        let least = if self.cfg.fitting_only {
            let longest = case
                .examples()
                .flat_map(|e| e.lens.branches())
                .map(|l| l.div_ceil(m) * m)
                .max()
                .unwrap_or(m);
            longest.max(m)
        } else {
            1
        };
        let mut caps = vec![least, case.capacity / 2, case.capacity.saturating_sub(1)];
        caps.retain(|&c| c >= least && c < case.capacity);
        caps.dedup();
        for capacity in caps {
            out.push(PackerFuzzCase { capacity, ..case.clone() });
        }
    }

    /// The drops the stack declares, for a case's DP size.
    fn declared(&self, case: &PackerFuzzCase) -> DeclaredDrops {
        DeclaredDrops {
            over_length: self.cfg.drops.over_length,
            dp_remainder: case.dp_size.filter(|_| self.cfg.drops.dp_remainder),
        }
    }

    /// The options a case's requests carry.
    fn options(&self, case: &PackerFuzzCase) -> PackerOptions {
        PackerOptions { dp_size: case.dp_size, min_packs: case.min_packs, ..self.cfg.options }
    }

    /// An empty run for a case: the configured limits, and the losses its DP size declares.
    fn run_for(&self, case: &PackerFuzzCase) -> PackerRun {
        PackerRun {
            dp_remainder_lost: case.dp_size.filter(|_| self.cfg.drops.dp_remainder),
            ..self.run()
        }
    }

    /// An empty run with the configured limits, for the PACKER rules.
    fn run(&self) -> PackerRun {
        PackerRun {
            max_items: self
                .cfg
                .options
                .max_seqs_per_pack
                .map(|k| usize::try_from(k).unwrap_or(usize::MAX)),
            pad_to_multiple_of: self
                .cfg
                .options
                .pad_to_multiple_of
                .map(|m| u32::try_from(m).unwrap_or(u32::MAX)),
            drop_last: self.cfg.drops.drop_last,
            ..PackerRun::default()
        }
    }
}

/// Packs emitted against the lower bound `⌈Σ s / C⌉` of each answer (each session), and on
/// answers of at most 12 packed single sequences against the exact optimum.
#[derive(Debug, Default)]
struct Efficiency {
    packs: u64,
    lower_bound: u64,
    small_packs: u64,
    small_optimum: u64,
    small_cases: u64,
}

/// One answer as the PACKER rules read it.
#[derive(Debug, Default)]
struct Answer {
    packs: Vec<Pack>,
    padding: Vec<Pack>,
    dropped: Vec<Dropped>,
    oversize: Vec<u64>,
    ranks: Vec<u64>,
}

impl Target for PackerTarget {
    type Case = PackerFuzzCase;

    fn kind(&self) -> &'static str {
        "packer"
    }

    fn invariants(&self) -> String {
        self.applied.text(FuzzTarget::Packer)
    }

    /// [`arb_packer_fuzz_case`] with the command's flags: one-shot requests or sessions, the
    /// uniform shapes and (`--generation`) the edge-biased swarm.
    fn strategy(&self) -> BoxedStrategy<PackerFuzzCase> {
        let cfg = self.cfg;
        arb_packer_fuzz_case(PackerFuzzParams {
            session: cfg.session,
            pairs: cfg.pairs,
            fitting_only: cfg.fitting_only,
            pad_to_multiple_of: cfg.options.pad_to_multiple_of,
            dp_size: cfg.options.dp_size,
            dp_size_max: cfg.dp_size_max,
            preconditions: cfg.pre,
            generation: cfg.generation.generated(),
            min_packs: cfg.min_packs,
            empty_examples: cfg.empty_examples,
        })
    }

    fn minimizes(&self) -> bool {
        true
    }

    fn case_of(&self, request: &Value) -> Option<Result<PackerFuzzCase, String>> {
        if self.cfg.session {
            return Some(Err("a session's requests cannot be judged one by one".into()));
        }
        Some(
            serde_json::from_value::<PackerRequest>(request.clone())
                .map_err(|e| format!("not a packer request: {e}"))
                .and_then(|r| {
                    let o = self.cfg.options;
                    if (r.options.pad_to_multiple_of, r.options.max_seqs_per_pack)
                        != (o.pad_to_multiple_of, o.max_seqs_per_pack)
                        || r.options.dp_size.is_some() != o.dp_size.is_some()
                        || r.options.min_packs.is_some() != self.cfg.min_packs
                    {
                        return Err(format!(
                            "the request's options ({}) are not the command's: give the flags \
                             it was generated with (--pad-sequences-to-multiple-of, \
                             --max-seqs-per-pack, --dp-size, --min-packs)",
                            serde_json::to_string(&r.options).unwrap_or_default()
                        ));
                    }
                    Ok(r)
                })
                .map(|r| PackerFuzzCase {
                    capacity: r.capacity,
                    seed: r.seed,
                    epochs: vec![vec![r.examples]],
                    dp_size: r.options.dp_size,
                    min_packs: r.options.min_packs,
                }),
        )
    }

    /// Smaller cases, the biggest cuts first: fewer epochs, pushes or examples (every
    /// contiguous run of a push, longest first: counts modulo the DP size are not monotone, so
    /// removing one at a time could not get past them), shorter examples (to 1, to half, by
    /// one), a smaller capacity (to the least that keeps `--fitting-only` lengths fitting, to
    /// half, by one), a smaller DP size, seed 0. Each respects the preconditions.
    fn reductions(&self, case: &PackerFuzzCase) -> Vec<PackerFuzzCase> {
        let mut out: Vec<PackerFuzzCase> = Vec::new();
        if self.cfg.session {
            fewer_epochs_or_pushes(case, &mut out);
        }
        fewer_examples(case, &mut out);
        merged_examples(case, &mut out);
        scaled_down(case, &mut out);
        shorter_examples(case, u32::from(!self.cfg.empty_examples), &mut out);
        two_shorter_examples(case, &mut out);
        self.smaller_capacity(case, &mut out);
        // A fixed DP size is the user's (`--dp-size R`), never drawn: a counterexample keeps it,
        // as a shrinker keeps what the user fixed (only what the strategy draws shrinks). One
        // drawn from `--dp-size LO..HI` may go down to LO. Seed 0.
        if let (Some(r), Some(lo)) = (case.dp_size, self.cfg.options.dp_size)
            && self.cfg.dp_size_max.is_some()
            && r > lo
        {
            out.push(PackerFuzzCase { dp_size: Some(lo), ..case.clone() });
            out.push(PackerFuzzCase { dp_size: Some(r - 1), ..case.clone() });
        }
        if case.seed != 0 {
            out.push(PackerFuzzCase { seed: 0, ..case.clone() });
        }
        if let Some(k) = case.min_packs.filter(|&k| k > 1) {
            out.push(PackerFuzzCase { min_packs: Some(k - 1), ..case.clone() });
        }
        out.retain(|c| self.admits(c));
        out
    }

    fn summary(&self) -> Option<(String, Value)> {
        let e = self.efficiency.borrow();
        if e.packs == 0 {
            return None;
        }
        let ratio = |a: u64, b: u64| if b == 0 { 1.0 } else { a as f64 / b as f64 };
        let per = if self.cfg.session { "session" } else { "answer" };
        let mut line = format!(
            "efficiency: {} packs for a lower bound of {} (Σ⌈Σs/C⌉ per {per}, ×{:.3})",
            e.packs,
            e.lower_bound,
            ratio(e.packs, e.lower_bound),
        );
        if e.small_cases > 0 {
            line += &format!(
                "; on the {} {per}s of 1 to 12 packed sequences, {} packs for an optimum of {} \
                 (×{:.3})",
                e.small_cases,
                e.small_packs,
                e.small_optimum,
                ratio(e.small_packs, e.small_optimum)
            );
        }
        let v = serde_json::json!({
            "packs": e.packs, "lower_bound": e.lower_bound,
            "packs_per_lower_bound": ratio(e.packs, e.lower_bound),
            "small_cases": e.small_cases, "small_packs": e.small_packs,
            "small_optimum": e.small_optimum,
            "packs_per_optimum": ratio(e.small_packs, e.small_optimum),
        });
        Some((line, v))
    }

    fn payload(&self, case: &PackerFuzzCase) -> Value {
        self.payloads(case).into_iter().next().unwrap_or(Value::Null)
    }

    /// One-shot: the request. A session: `start`, every push, `end_epoch` after each epoch,
    /// `finish`, each carrying `"thdcheck": 2`.
    fn payloads(&self, case: &PackerFuzzCase) -> Vec<Value> {
        if !self.cfg.session {
            let req = PackerRequest {
                capacity: case.capacity,
                seed: case.seed,
                examples: case.examples().copied().collect(),
                options: self.options(case),
            };
            return vec![serde_json::to_value(req).unwrap_or(Value::Null)];
        }
        session_requests(case, self.options(case))
            .into_iter()
            .map(|r| {
                let mut v = serde_json::to_value(r).unwrap_or(Value::Null);
                if let Value::Object(m) = &mut v {
                    m.insert("thdcheck".into(), SESSION_VERSION.into());
                }
                v
            })
            .collect()
    }

    fn judge(
        &self,
        case: &PackerFuzzCase,
        send: &mut dyn FnMut() -> Result<String, Failure>,
    ) -> Result<(), Failure> {
        if self.cfg.session { self.judge_session(case, send) } else { self.judge_once(case, send) }
    }
}

/// Reductions of a session: each whole epoch removed (when there are several), then each push.
fn fewer_epochs_or_pushes(case: &PackerFuzzCase, out: &mut Vec<PackerFuzzCase>) {
    for e in 0..case.epochs.len() {
        if case.epochs.len() > 1 {
            let mut c = case.clone();
            c.epochs.remove(e);
            out.push(c.renumbered());
        }
        for p in 0..case.epochs[e].len() {
            let mut c = case.clone();
            c.epochs[e].remove(p);
            out.push(c.renumbered());
        }
    }
}

/// Reductions: every contiguous run of examples removed from each push, longest first (counts
/// modulo the DP size are not monotone, so removing one at a time could not get past them).
fn fewer_examples(case: &PackerFuzzCase, out: &mut Vec<PackerFuzzCase>) {
    for (e, pushes) in case.epochs.iter().enumerate() {
        for (p, push) in pushes.iter().enumerate() {
            let n = push.len();
            for k in (1..=n).rev() {
                for at in 0..=n - k {
                    let mut c = case.clone();
                    c.epochs[e][p].drain(at..at + k);
                    out.push(c.renumbered());
                }
            }
        }
    }
}

/// Reductions: two examples merged into one of their summed length (one example fewer, the
/// same tokens: a partitioning bug that needs the tokens, not the count).
fn merged_examples(case: &PackerFuzzCase, out: &mut Vec<PackerFuzzCase>) {
    for (e, pushes) in case.epochs.iter().enumerate() {
        for (p, push) in pushes.iter().enumerate() {
            for i in 0..push.len() {
                for j in i + 1..push.len() {
                    if let (Lens::Single { len: a }, Lens::Single { len: b }) =
                        (push[i].lens, push[j].lens)
                    {
                        let mut c = case.clone();
                        c.epochs[e][p][i].lens = Lens::Single { len: a.saturating_add(b) };
                        c.epochs[e][p].remove(j);
                        out.push(c.renumbered());
                    }
                }
            }
        }
    }
}

/// Reductions: the whole case scaled down (capacity and every length together, by 1/2 and by
/// (C-1)/C, rounded down and up): what a failure depends on is usually the lengths relative to
/// the capacity, and one step at a time would stop in a local minimum.
fn scaled_down(case: &PackerFuzzCase, out: &mut Vec<PackerFuzzCase>) {
    let scaled = |c: &PackerFuzzCase, num: u64, den: u64, up: bool| {
        let f = |l: u64| if up { (l * num).div_ceil(den) } else { (l * num / den).max(1) };
        let mut out = c.clone();
        out.capacity = f(c.capacity).max(1);
        for e in out.epochs.iter_mut().flatten().flatten() {
            let g = |l: u32| u32::try_from(f(u64::from(l))).unwrap_or(u32::MAX);
            e.lens = match e.lens {
                Lens::Single { len } => Lens::Single { len: g(len) },
                Lens::Pair { chosen, rejected } => {
                    Lens::Pair { chosen: g(chosen), rejected: g(rejected) }
                }
            };
        }
        out
    };
    if case.capacity > 1 {
        let c = case.capacity;
        for (num, den) in [(1, 2), (c - 1, c)] {
            for up in [false, true] {
                let s = scaled(case, num, den, up);
                if s.capacity < case.capacity {
                    out.push(s);
                }
            }
        }
    }
}

/// Reductions: each example (each branch of a pair) shorter: to `min` tokens (0 where empty
/// examples are drawn, else 1), to 1, to half, by one.
fn shorter_examples(case: &PackerFuzzCase, min: u32, out: &mut Vec<PackerFuzzCase>) {
    let shorter = |l: u32| {
        let mut v = vec![min, 1, l / 2, l.saturating_sub(1)];
        v.retain(|&x| x >= min && x < l);
        v.dedup();
        v
    };
    for (e, pushes) in case.epochs.iter().enumerate() {
        for (p, push) in pushes.iter().enumerate() {
            for (i, ex) in push.iter().enumerate() {
                let branches: Vec<(u32, u32)> = match ex.lens {
                    Lens::Single { len } => shorter(len).into_iter().map(|l| (l, 0)).collect(),
                    Lens::Pair { chosen, rejected } => shorter(chosen)
                        .into_iter()
                        .map(|c| (c, rejected))
                        .chain(shorter(rejected).into_iter().map(|r| (chosen, r)))
                        .collect(),
                };
                for (a, b) in branches {
                    let mut c = case.clone();
                    c.epochs[e][p][i].lens = match ex.lens {
                        Lens::Single { .. } => Lens::Single { len: a },
                        Lens::Pair { .. } => Lens::Pair { chosen: a, rejected: b },
                    };
                    out.push(c);
                }
            }
        }
    }
}

/// Reductions: two examples one token shorter each, and one shorter with the capacity (the
/// slack kept).
fn two_shorter_examples(case: &PackerFuzzCase, out: &mut Vec<PackerFuzzCase>) {
    let singles: Vec<(usize, usize, usize, u32)> = case
        .epochs
        .iter()
        .enumerate()
        .flat_map(|(e, ps)| {
            ps.iter().enumerate().flat_map(move |(p, push)| {
                push.iter().enumerate().filter_map(move |(i, ex)| match ex.lens {
                    Lens::Single { len } if len > 1 => Some((e, p, i, len)),
                    _ => None,
                })
            })
        })
        .collect();
    for (x, &(e, p, i, len)) in singles.iter().enumerate() {
        if case.capacity > 1 {
            let mut c = case.clone();
            c.epochs[e][p][i].lens = Lens::Single { len: len - 1 };
            c.capacity -= 1;
            out.push(c);
        }
        for &(e2, p2, i2, len2) in &singles[x + 1..] {
            let mut c = case.clone();
            c.epochs[e][p][i].lens = Lens::Single { len: len - 1 };
            c.epochs[e2][p2][i2].lens = Lens::Single { len: len2 - 1 };
            out.push(c);
        }
    }
}

/// A session's requests: `start`, the pushes, `end_epoch` after each epoch, `finish`.
fn session_requests(case: &PackerFuzzCase, options: PackerOptions) -> Vec<PackerSessionRequest> {
    let mut out =
        vec![PackerSessionRequest::Start { capacity: case.capacity, seed: case.seed, options }];
    for (e, pushes) in case.epochs.iter().enumerate() {
        let epoch = e as u64;
        out.extend(
            pushes
                .iter()
                .map(|examples| PackerSessionRequest::Push { epoch, examples: examples.clone() }),
        );
        out.push(PackerSessionRequest::EndEpoch { epoch });
    }
    out.push(PackerSessionRequest::Finish);
    out
}

impl PackerTarget {
    /// One request, answered twice: the PACKER rules on the first answer, determinism on both.
    fn judge_once(
        &self,
        case: &PackerFuzzCase,
        send: &mut dyn FnMut() -> Result<String, Failure>,
    ) -> Result<(), Failure> {
        let lens: HashMap<u64, Lens> = case.examples().map(|e| (e.id, e.lens)).collect();
        let mut run = self.run_for(case);
        run.pushed = case.examples().copied().collect();
        let (first, line) = response::<PackerResponse>(send)?;
        let with = |mut f: Failure| {
            f.response = Some(line.clone());
            f
        };
        if first.rejected.is_some() {
            return self.judge_at(&self.input(case, PackerPoint::Refused, &run)).map_err(with);
        }
        let answer = self.answer(&first, &lens, case.dp_size).map_err(with)?;
        let (packs, ranks) = (answer.packs.clone(), answer.ranks.clone());
        absorb(&mut run, answer, 0, 0);
        let input = PackerInput {
            packs: &packs,
            ranks: &ranks,
            ..self.input(case, PackerPoint::Once, &run)
        };
        self.judge_at(&input).map_err(with)?;
        self.measure(&run, case.capacity);
        let (second, line2) = response::<PackerResponse>(send)?;
        deterministic(self, case, &[(first, line)], &[(second, line2)])
    }

    /// A session, run twice: after every call the packs so far fit and hold no example more
    /// often than it was pushed (first fit among the call's packs, when asked); at the end of
    /// every epoch the ranks are even; at `finish` the whole session conserves its examples;
    /// the replay answers every call the same.
    fn judge_session(
        &self,
        case: &PackerFuzzCase,
        send: &mut dyn FnMut() -> Result<String, Failure>,
    ) -> Result<(), Failure> {
        let requests = session_requests(case, self.options(case));
        let mut run = self.run_for(case);
        let mut lens: HashMap<u64, Lens> = HashMap::new();
        let mut ranks: Vec<u64> = Vec::new();
        let mut answers = Vec::with_capacity(requests.len());
        for (call, request) in requests.iter().enumerate() {
            let (resp, line) = response::<PackerResponse>(send)?;
            // The report lists every request of the session: say which answer broke the rule.
            let with = |mut f: Failure| {
                let op = match request {
                    PackerSessionRequest::Start { .. } => "start",
                    PackerSessionRequest::Push { .. } => "push",
                    PackerSessionRequest::EndEpoch { .. } => "end_epoch",
                    PackerSessionRequest::Finish => "finish",
                };
                f.detail += &format!(" (in the answer to request {call}, `{op}`)");
                f.response = Some(line.clone());
                f
            };
            let epoch = match request {
                PackerSessionRequest::Start { .. } => {
                    // A new packer holds nothing: it can emit, drop or refuse nothing yet.
                    if let Some(what) = start_answer_holds(&resp) {
                        return Err(with(Failure::schema(
                            format!("the answer to `start` holds {what}; it has nothing to say"),
                            "",
                        )));
                    }
                    answers.push((resp, line));
                    continue;
                }
                PackerSessionRequest::Push { epoch, examples } => {
                    run.pushed.extend(examples);
                    let e = usize::try_from(*epoch).unwrap_or(usize::MAX);
                    run.pushed_epochs.extend(std::iter::repeat_n(e, examples.len()));
                    lens.extend(examples.iter().map(|e| (e.id, e.lens)));
                    *epoch
                }
                PackerSessionRequest::EndEpoch { epoch } => *epoch,
                PackerSessionRequest::Finish => case.epochs.len() as u64,
            };
            let epoch = usize::try_from(epoch).unwrap_or(usize::MAX);
            if resp.rejected.is_some() {
                // A refusal ends the session; it is judged on what this call pushed.
                let mut this = self.run();
                if let PackerSessionRequest::Push { examples, .. } = request {
                    this.pushed.clone_from(examples);
                }
                return self.judge_at(&self.input(case, PackerPoint::Refused, &this)).map_err(with);
            }
            let answer = self.answer(&resp, &lens, case.dp_size).map_err(with)?;
            ranks.extend(&answer.ranks);
            let call_packs = answer.packs.clone();
            absorb(&mut run, answer, epoch, call);
            let after_call = PackerInput {
                packs: &call_packs,
                ranks: &ranks,
                ..self.input(case, PackerPoint::Call, &run)
            };
            self.judge_at(&after_call)
                .map_err(|mut f| {
                    if f.checks.iter().any(|c| c == rules::checks::PACKER_FIRST_FIT.id) {
                        // The request as the adapter read it, not as Rust's Debug.
                        let sent = serde_json::to_string(request).unwrap_or_default();
                        f.detail += &format!(" (among the packs of call {call}: {sent})");
                    }
                    f
                })
                .map_err(with)?;
            if !matches!(request, PackerSessionRequest::Push { .. }) {
                let closed =
                    PackerInput { ranks: &ranks, ..self.input(case, PackerPoint::EpochEnd, &run) };
                self.judge_at(&closed).map_err(with)?;
            }
            if let PackerSessionRequest::Finish = request {
                run.pending_after_finish =
                    usize::try_from(resp.pending.unwrap_or(0)).unwrap_or(usize::MAX);
                self.judge_at(&self.input(case, PackerPoint::Finish, &run)).map_err(with)?;
            }
            answers.push((resp, line));
        }
        self.measure(&run, case.capacity);
        let mut replay = Vec::with_capacity(requests.len());
        for _ in &requests {
            replay.push(response::<PackerResponse>(send)?);
        }
        deterministic(self, case, &answers, &replay)
    }

    /// Reads an answer's packs as the PACKER rules do, checking its shape against the protocol:
    /// pieces within their example, padding and ranks naming packs that exist.
    fn answer(
        &self,
        resp: &PackerResponse,
        lens: &HashMap<u64, Lens>,
        dp_size: Option<u64>,
    ) -> Result<Answer, Failure> {
        let Some(packs) = &resp.packs else {
            return Err(Failure::schema("no `packs` (and no `rejected`)", ""));
        };
        // What a sequence takes of the capacity is the PACKER rule's definition.
        let rules = self.run();
        let pad = |n: u64| u32::try_from(rules.padded(n)).unwrap_or(u32::MAX);
        let padded = |l: Lens| match l {
            Lens::Single { len } => Lens::Single { len: pad(u64::from(len)) },
            Lens::Pair { chosen, rejected } => {
                Lens::Pair { chosen: pad(u64::from(chosen)), rejected: pad(u64::from(rejected)) }
            }
        };
        let whole = |id: u64| {
            let l = lens.get(&id).copied().unwrap_or(Lens::Single { len: 0 });
            PackItem { id, offset: 0, lens: l, padded: padded(l) }
        };
        let mut items = Vec::with_capacity(packs.len());
        for p in packs {
            let mut pack = Vec::with_capacity(p.len());
            for &e in p {
                pack.push(match e {
                    PackEntry::Whole(id) => whole(id),
                    PackEntry::Piece(id, start, end) => {
                        let len = match lens.get(&id) {
                            Some(Lens::Single { len }) => u64::from(*len),
                            Some(Lens::Pair { .. }) => {
                                return Err(Failure::schema(
                                    format!(
                                        "piece [{id}, {start}, {end}] of a DPO pair: pieces \
                                         are ranges of single sequences"
                                    ),
                                    "",
                                ));
                            }
                            None => 0,
                        };
                        if !(start < end && end <= len) {
                            return Err(Failure::schema(
                                format!(
                                    "piece [{id}, {start}, {end}] is not a range of example \
                                     {id}'s {len} tokens (start < end <= len)"
                                ),
                                "",
                            ));
                        }
                        let n = u32::try_from(end - start).unwrap_or(u32::MAX);
                        PackItem {
                            id,
                            offset: u32::try_from(start).unwrap_or(u32::MAX),
                            lens: Lens::Single { len: n },
                            padded: Lens::Single { len: pad(u64::from(n)) },
                        }
                    }
                });
            }
            items.push(Pack::new(pack));
        }
        if let Some(&i) = resp.padding.iter().find(|&&i| i >= items.len()) {
            return Err(Failure::schema(
                format!("padding names pack {i}, but there are {} packs", items.len()),
                "",
            ));
        }
        let ranks = match (dp_size, &resp.ranks) {
            (None, _) => Vec::new(),
            (Some(_), Some(r)) if r.len() == items.len() => r.clone(),
            (Some(r), got) => {
                return Err(Failure::schema(
                    format!(
                        "with dp_size {r} the answer gives the rank of each of its {} packs \
                         (`ranks`), got {}",
                        items.len(),
                        got.as_ref().map_or("none".to_owned(), |g| format!("{} ranks", g.len()))
                    ),
                    "",
                ));
            }
        };
        let (mut real, mut padding) = (Vec::new(), Vec::new());
        for (i, pack) in items.into_iter().enumerate() {
            if resp.padding.contains(&i) { padding.push(pack) } else { real.push(pack) }
        }
        Ok(Answer {
            packs: real,
            padding,
            dropped: resp
                .dropped
                .iter()
                .map(|&id| Dropped { item: whole(id), reason: DropReason::OverLength })
                .collect(),
            oversize: resp.oversize.clone(),
            ranks,
        })
    }

    /// Adds a run that held every rule to the efficiency: its non-empty packs against
    /// `⌈Σ s / C⌉` (per branch, of the padded lengths) of what it packed, plus one per
    /// over-long example, and against the exact optimum when that is small.
    fn measure(&self, run: &PackerRun, capacity: u64) {
        let cap = capacity.max(1);
        let items: Vec<[u64; 2]> =
            run.packs.iter().flat_map(|e| &e.pack.items).map(|i| i.padded.branches()).collect();
        let (fits, over): (Vec<[u64; 2]>, Vec<[u64; 2]>) =
            items.iter().partition(|b| b[0] <= cap && b[1] <= cap);
        let packs = run.packs.iter().filter(|e| !e.pack.is_empty()).count() as u64;
        let over = over.len() as u64;
        let mut e = self.efficiency.borrow_mut();
        e.packs += packs;
        e.lower_bound +=
            (0..2).map(|b| fits.iter().map(|f| f[b]).sum::<u64>().div_ceil(cap)).max().unwrap_or(0)
                + over;
        let singles = items.iter().all(|b| b[1] == 0);
        if let (true, Ok(cap32)) =
            (!items.is_empty() && items.len() <= 12 && singles, u32::try_from(cap))
        {
            let lens: Vec<u32> =
                fits.iter().map(|f| u32::try_from(f[0]).unwrap_or(u32::MAX)).collect();
            e.small_cases += 1;
            e.small_packs += packs;
            e.small_optimum += properties::harness::optimal_bins(&lens, cap32) as u64 + over;
        }
    }
}

/// What an answer to a session's `start` holds beyond the envelope (`packs: []` is nothing).
fn start_answer_holds(resp: &PackerResponse) -> Option<&'static str> {
    if !resp.packs().is_empty() {
        Some("packs")
    } else if !resp.dropped.is_empty() {
        Some("dropped examples")
    } else if !resp.oversize.is_empty() {
        Some("oversize examples")
    } else if !resp.padding.is_empty() {
        Some("padding packs")
    } else if resp.ranks.as_ref().is_some_and(|r| !r.is_empty()) {
        Some("ranks")
    } else if resp.rejected.is_some() {
        Some("a refusal")
    } else if resp.pending.is_some() {
        Some("`pending`")
    } else {
        None
    }
}

/// Adds an answer to the run, as emitted by `call` in `epoch`.
fn absorb(run: &mut PackerRun, answer: Answer, epoch: usize, call: usize) {
    let emitted = |pack| EmittedPack { epoch, call, pack };
    run.packs.extend(answer.packs.into_iter().map(emitted));
    run.padding.extend(answer.padding.into_iter().map(emitted));
    run.dropped.extend(answer.dropped);
    run.oversize.extend(answer.oversize);
}

/// PACKER determinism: the same requests get the same answers, call by call (each call's
/// packs, then its dropped list as a last pseudo-pack).
fn deterministic(
    target: &PackerTarget,
    case: &PackerFuzzCase,
    first: &[(PackerResponse, String)],
    second: &[(PackerResponse, String)],
) -> Result<(), Failure> {
    let emitted = |answers: &[(PackerResponse, String)]| -> Vec<EmittedPack> {
        let entry = |e: PackEntry| match e {
            PackEntry::Whole(id) => Example::single(id, 0).item(),
            PackEntry::Piece(id, start, end) => {
                let mut i =
                    Example::single(id, u32::try_from(end.saturating_sub(start)).unwrap_or(0))
                        .item();
                i.offset = u32::try_from(start).unwrap_or(u32::MAX);
                i
            }
        };
        answers
            .iter()
            .enumerate()
            .flat_map(|(call, (r, _))| {
                let dropped: Vec<PackEntry> =
                    r.dropped.iter().map(|&id| PackEntry::Whole(id)).collect();
                r.packs()
                    .iter()
                    .chain(std::iter::once(&dropped))
                    .map(|p| EmittedPack {
                        epoch: 0,
                        call,
                        pack: Pack::new(p.iter().map(|&e| entry(e)).collect()),
                    })
                    .collect::<Vec<_>>()
            })
            .collect()
    };
    let (a, b) = (emitted(first), emitted(second));
    let run = PackerRun::default();
    let input =
        PackerInput { replay: Some((&a, &b)), ..target.input(case, PackerPoint::Replay, &run) };
    target.judge_at(&input).map_err(|mut f| {
        let differing = first
            .iter()
            .zip(second)
            .find(|((a, _), (b, _))| a != b)
            .or_else(|| first.iter().zip(second).next());
        if let Some(((_, l1), (_, l2))) = differing {
            f.detail += &format!(
                "\n(each call's last pack listed is its dropped list)\nfirst:  {l1}\nreplay: {l2}"
            );
            f.response = Some(l2.clone());
        }
        f
    })
}
