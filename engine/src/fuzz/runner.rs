//! The runner: which cases a run sends (the one of `--request`, or the strategy's simplest case
//! and then the seed's draws), the search that proptest shrinks while the first failure's class
//! holds, and the scan of fresh cases for the other failing classes once a failure is reported.

use std::cell::RefCell;
use std::collections::BTreeMap;

use anyhow::{Context, Result};
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use proptest::strategy::{BoxedStrategy, Just, Strategy, ValueTree};
use proptest::test_runner::{
    Config, RngAlgorithm, TestCaseError, TestCaseResult, TestError, TestRng, TestRunner,
};
use serde_json::Value;

use super::ignore::IgnoreFilter;
use super::supervisor::Supervisor;
use super::{Failure, Signature, Target, two_answers};
use crate::args::FuzzArgs;

/// What the phases of one run share: the target and the options, the adapter, the ignore
/// filter, and what the search found.
pub(super) struct Run<'a, 't, T: Target> {
    pub(super) target: &'t T,
    pub(super) args: &'t FuzzArgs,
    pub(super) adapter: Supervisor<'a>,
    pub(super) filter: IgnoreFilter<'t>,
    /// Cases that passed before the first failure.
    pub(super) passed: u64,
    /// The first failure's class, and the latest failure of that class: while shrinking, a run
    /// failing another way counts as a pass, so that the minimal case shows the bug found.
    pub(super) found: Option<Failure>,
    /// The requests the adapter had received when `found` crashed it.
    pub(super) found_history: Vec<String>,
    /// Runs that failed another way than `found` while it was shrunk.
    pub(super) other_classes: u64,
    /// A case hung: it is reported as found, unshrunk (each further run of a hang waits the
    /// full timeout).
    pub(super) hung: bool,
    /// The adapter's runs before the failure being shrunk was run: its shrink budget
    /// (`--max-shrink-runs`) counts the runs after it.
    pub(super) base: u64,
    /// Whether the search judged the strategy's simplest case before the seed's draws.
    pub(super) simplest: bool,
}

impl<'a, 't, T: Target> Run<'a, 't, T> {
    /// A run of `target` under `args`, its requests sent through `adapter`.
    pub(super) fn new(target: &'t T, args: &'t FuzzArgs, adapter: Supervisor<'a>) -> Self {
        Self {
            target,
            args,
            adapter,
            filter: IgnoreFilter::new(&args.ignore),
            passed: 0,
            found: None,
            found_history: Vec::new(),
            other_classes: 0,
            hung: false,
            base: 0,
            simplest: false,
        }
    }

    /// Whether the shrink budget of the failure being shrunk is spent.
    pub(super) fn budget_spent(&self) -> bool {
        self.adapter.executed > u64::from(self.args.max_shrink_runs) + self.base
    }

    /// Runs `case` and judges it, `--ignore` applied.
    pub(super) fn judge(&mut self, case: &T::Case) -> Result<(), Failure> {
        let judged = self.adapter.run_case(self.target, case);
        self.filter.judge(judged)
    }

    /// Whether `f` fails the way the failure being shrunk did.
    pub(super) fn same_class(&self, f: &Failure) -> bool {
        self.found.as_ref().is_some_and(|g| g.signature() == f.signature())
    }

    /// Keeps `f` as the latest failure of the class, with the requests the adapter had
    /// received if it crashed.
    pub(super) fn keep(&mut self, f: Failure) {
        if f.kind == "crash" {
            self.found_history = self.adapter.crash_history.clone();
        }
        self.found = Some(f);
    }
}

/// The proptest configuration of a run (one case for `--request`).
pub(super) fn config(args: &FuzzArgs, given: bool) -> Config {
    let config = Config {
        cases: args.cases,
        failure_persistence: None,
        max_shrink_iters: 4096,
        max_shrink_time: 120_000,
        ..Config::default()
    };
    if given { Config { cases: 1, ..config } } else { config }
}

/// The seeded random stream `stream` of a run (0: the search, 1: the scan).
fn rng(seed: u64, stream: u8) -> TestRng {
    let mut seed_bytes = [0u8; 32];
    seed_bytes[..8].copy_from_slice(&seed.to_le_bytes());
    seed_bytes[8] = stream;
    TestRng::from_seed(RngAlgorithm::ChaCha, &seed_bytes)
}

/// `--request FILE`: that one case, judged once; `None` without the option.
///
/// # Errors
/// The file cannot be read, is not JSON, is no request of this target, or the target reads no
/// request back.
pub(super) fn requested_case<T: Target>(target: &T, args: &FuzzArgs) -> Result<Option<T::Case>> {
    let Some(path) = &args.request else { return Ok(None) };
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("--request {}: cannot read it", path.display()))?;
    let line = text.lines().find(|l| !l.trim().is_empty()).unwrap_or_default();
    let value: Value = serde_json::from_str(line)
        .map_err(|e| anyhow::anyhow!("--request {}: line 1 is not JSON: {e}", path.display()))?;
    match target.case_of(&value) {
        None => anyhow::bail!(
            "--request is not supported by `fuzz {}` (packer and collator requests only)",
            target.kind()
        ),
        Some(Err(why)) => anyhow::bail!("--request {}: {why}", path.display()),
        Some(Ok(case)) => Ok(Some(case)),
    }
}

/// The progress bar on stderr (hidden for `--json` and `--quiet`).
fn progress_bar(args: &FuzzArgs, kind: &str) -> ProgressBar {
    if args.json || args.quiet {
        return ProgressBar::hidden();
    }
    let b =
        ProgressBar::with_draw_target(Some(u64::from(args.cases)), ProgressDrawTarget::stderr());
    b.set_style(
        ProgressStyle::with_template("{prefix} [{bar:30}] {pos}/{len} cases · {per_sec} · {msg}")
            .unwrap_or_else(|_| ProgressStyle::default_bar())
            .progress_chars("=> "),
    );
    b.set_prefix(format!("fuzz {kind}"));
    b
}

/// The search's state around the run: whether a failure is being shrunk, and whether
/// shrinking must stop.
struct Search<'r, 'a, 't, T: Target> {
    run: &'r mut Run<'a, 't, T>,
    bar: ProgressBar,
    shrinking: bool,
    /// A hang while shrinking another failure ends the shrinking.
    stop_shrinking: bool,
    /// The failure of the case being shrunk, already judged: its first run is answered with
    /// it, not run again.
    known: Option<Failure>,
}

impl<T: Target> Search<'_, '_, '_, T> {
    /// One case as proptest runs it: a pass, or the failure (while shrinking, a failure of
    /// another class counts as a pass).
    fn test(&mut self, case: &T::Case) -> TestCaseResult {
        if let Some(f) = self.known.take() {
            return Err(TestCaseError::fail(format!("{}: {}", f.kind, f.detail)));
        }
        let run = &mut *self.run;
        // Past the shrink budget (or after a hang) a run reports success without running, so
        // proptest keeps the smallest failure found so far.
        let spent = run.budget_spent();
        if run.hung
            || run.adapter.not_started.is_some()
            || self.stop_shrinking
            || (self.shrinking && spent)
        {
            return Ok(());
        }
        let mut r = run.judge(case);
        if run.adapter.not_started.is_some() {
            return Ok(());
        }
        if self.shrinking {
            self.bar.set_message(format!("shrinking ({} runs)", run.adapter.executed));
            if let Err(f) = &r {
                if f.kind == "hang" {
                    self.stop_shrinking = true;
                }
                if run.same_class(f) {
                    run.keep(f.clone());
                } else {
                    run.other_classes += 1;
                    r = Ok(());
                }
            }
        } else if let Err(f) = &r {
            if f.kind == "hang" {
                run.hung = true;
            }
            run.keep(f.clone());
            run.base = run.passed;
            self.shrinking = true;
            self.bar.set_message("failure found, shrinking");
        } else {
            run.passed += 1;
            self.bar.set_position(run.passed);
        }
        r.map_err(|f| TestCaseError::fail(format!("{}: {}", f.kind, f.detail)))
    }
}

/// The search: the case of `--request` alone, or the strategy's simplest case first (an empty
/// request, the smallest capacity: where shrinking ends) and then the seed's drawn cases. A
/// failure of the simplest case needs no shrinking; a pass counts as one of the cases. The first
/// failure is shrunk by proptest, keeping its class.
pub(super) fn search<T: Target>(
    run: &mut Run<'_, '_, T>,
    given: Option<&T::Case>,
    config: &Config,
) -> Result<(), TestError<T::Case>> {
    let (args, target) = (run.args, run.target);
    let runner = |cases: u32| {
        TestRunner::new_with_rng(Config { cases, ..config.clone() }, rng(args.seed, 0))
    };
    let strategy = match given {
        Some(case) => Just(case.clone()).boxed(),
        None => target.strategy(),
    };
    let bar = progress_bar(args, target.kind());
    let simplest = match (given, args.cases) {
        (None, 1..) => properties::strategies::fuzz::simplest(&strategy),
        _ => None,
    };
    run.simplest = simplest.is_some();
    let search =
        RefCell::new(Search { run, bar, shrinking: false, stop_shrinking: false, known: None });
    let test = |case: T::Case| search.borrow_mut().test(&case);
    let result = match simplest {
        Some(case) => match test(case.clone()) {
            Err(TestCaseError::Fail(why)) => Err(TestError::Fail(why, case)),
            Ok(()) => runner(args.cases - 1).run(&strategy, test),
            Err(TestCaseError::Reject(_)) => runner(args.cases).run(&strategy, test),
        },
        None => runner(if given.is_some() { 1 } else { args.cases }).run(&strategy, test),
    };
    search.into_inner().bar.finish_and_clear();
    result
}

/// How many runs the scan gets after `failure` (shrunk as `shrunk_as` when the replay failed
/// otherwise), and what the shrink budget leaves for it: `(scan runs, budget left)`. The scan is part of the shrink budget (`--max-shrink-runs` counts every run after the
/// first failure), and is skipped for `--first-failure`, for the case of `--request` (`given`),
/// and after a failure that says nothing about the rules: a crash (every run restarts the
/// adapter), a hang (a timeout each), an answer too long or not JSON (every answer likely is),
/// an answer written twice (every later answer is out of step).
pub(super) fn scan_budget<T: Target>(
    run: &Run<'_, '_, T>,
    failure: &Failure,
    shrunk_as: Option<&Failure>,
    given: bool,
) -> (u64, u64) {
    let args = run.args;
    let budget_left = u64::from(args.max_shrink_runs)
        .saturating_sub(run.adapter.executed.saturating_sub(run.passed))
        .min(u64::from(args.cases.min(256)))
        .min(u64::from(args.also_failing));
    let blind = ["crash", "hang", "too-long", "not-json"];
    let skipped = args.first_failure
        || given
        || run.hung
        || blind.contains(&failure.kind)
        || two_answers(failure)
        || shrunk_as.is_some_and(|g| blind.contains(&g.kind));
    (if skipped { 0 } else { budget_left }, budget_left)
}

/// The scan: `runs` fresh cases (a second stream of the seed), unshrunk, after a failure, so
/// that every other failing class is reported. Each violated check is a class of its own (an
/// adapter error or a crash: with its origin); the failures reported (`reported`) are not
/// counted. Class → (cases, its detail line).
pub(super) fn scan<T: Target>(
    run: &mut Run<'_, '_, T>,
    config: &Config,
    runs: u64,
    reported: &[Signature],
) -> BTreeMap<String, (u64, String)> {
    let reported: Vec<String> = reported.iter().map(Signature::distinct).collect();
    let mut also: BTreeMap<String, (u64, String)> = BTreeMap::new();
    let mut scan = TestRunner::new_with_rng(config.clone(), rng(run.args.seed, 1));
    let strategy = run.target.strategy();
    for _ in 0..runs {
        let Ok(tree) = strategy.new_tree(&mut scan) else { break };
        let Err(f) = run.judge(&tree.current()) else { continue };
        if f.kind == "hang" {
            break;
        }
        // (check, its own detail line): a case counts once per class.
        let mut classes: Vec<(String, String)> = if f.checks.is_empty() {
            vec![(f.signature().distinct(), f.detail.clone())]
        } else {
            f.checks
                .iter()
                .map(|k| {
                    let line = f
                        .detail
                        .lines()
                        .find(|l| l.starts_with(&format!("{k}:")))
                        .unwrap_or(&f.detail);
                    (format!("{} {k}", f.kind), line.to_owned())
                })
                .collect()
        };
        classes.sort();
        classes.dedup_by(|a, b| a.0 == b.0);
        for (class, detail) in classes.into_iter().filter(|(c, _)| !reported.contains(c)) {
            let e = also.entry(class).or_insert((0, detail));
            e.0 += 1;
        }
    }
    also
}

/// The seed's stream of drawn cases as the search's proptest runner draws them: each case from
/// a fresh generator seeded by the one before it (proptest's `gen_get_seed`), so the n-th value
/// here is the search's n-th case. A test holds the two streams equal.
struct Stream {
    runner: TestRunner,
}

impl Stream {
    fn new(config: &Config, seed: u64) -> Self {
        Self { runner: TestRunner::new_with_rng(config.clone(), rng(seed, 0)) }
    }

    /// The next case's value tree.
    fn next<S: Strategy>(&mut self, strategy: &S) -> Option<S::Tree> {
        let config = self.runner.config().clone();
        self.runner = TestRunner::new_with_rng(config, self.runner.new_rng());
        strategy.new_tree(&mut self.runner).ok()
    }
}

/// At most this many distinct failures are shrunk and reported in a run; the others met are
/// counted.
pub(super) const MAX_DISTINCT: usize = 8;

/// The cases after the first failure stop at this many crashes of a class already found: each
/// restarts the adapter (an adapter that crashes on most requests would restart for every case).
pub(super) const MAX_KNOWN_CRASHES: u64 = 16;

/// A failure of another class than every one before it, met by the cases after the first.
pub(super) struct Distinct<V> {
    /// The case that failed (its value tree, for proptest to shrink).
    pub(super) tree: V,
    pub(super) failure: Failure,
    /// Its number in the run (the simplest case is case 0).
    pub(super) case: u64,
    /// The requests the adapter had received when it crashed, if it did.
    pub(super) history: Vec<String>,
}

/// What the cases after the first failure found.
pub(super) struct More<V> {
    /// The first case of each new class, in the order met (at most [`MAX_DISTINCT`] with the
    /// first failure).
    pub(super) found: Vec<Distinct<V>>,
    /// The classes met beyond that limit, with their number of cases.
    pub(super) beyond: BTreeMap<String, u64>,
    /// The cases run.
    pub(super) runs: u64,
    /// Why they stopped before the end of `--cases`, if they did for crashes.
    pub(super) stopped: Option<String>,
}

/// Whether `f` says nothing about the answers after it: an answer too long, not JSON, or
/// written twice (every later answer may be out of step). A run stops there.
pub(super) fn blinding(f: &Failure) -> bool {
    ["too-long", "not-json"].contains(&f.kind) || two_answers(f)
}

/// The rest of the run's cases after the first failure (`first`): the seed's stream from the
/// case after it to `--cases`, each judged once, unshrunk. The first case of each class that
/// is not in `known` is kept for shrinking, so that a crash of the simplest case cannot hide a
/// different bug of a later one. A hang, or an answer after which every later one may be out of
/// step ([`blinding`]), is kept and ends the run; so do [`MAX_KNOWN_CRASHES`] crashes of classes
/// already found.
pub(super) fn more_failures<T: Target>(
    run: &mut Run<'_, '_, T>,
    config: &Config,
    first: &Signature,
) -> More<<BoxedStrategy<T::Case> as Strategy>::Tree> {
    let simplest = u64::from(run.simplest);
    // The stream's cases the search had drawn: every passing one and the failing one (none when
    // the simplest case failed).
    let drawn = (run.passed + 1).saturating_sub(simplest);
    let total = u64::from(run.args.cases).saturating_sub(simplest);
    let strategy = run.target.strategy();
    let mut stream = Stream::new(config, run.args.seed);
    let mut known = vec![first.clone()];
    let mut more = More { found: Vec::new(), beyond: BTreeMap::new(), runs: 0, stopped: None };
    let mut known_crashes = 0;
    for i in 0..total {
        let Some(tree) = stream.next(&strategy) else { break };
        if i < drawn {
            continue;
        }
        more.runs += 1;
        let Err(failure) = run.judge(&tree.current()) else { continue };
        let sig = failure.signature();
        let stop = failure.kind == "hang" || blinding(&failure);
        if failure.kind == "crash" && known.contains(&sig) {
            known_crashes += 1;
            if known_crashes == MAX_KNOWN_CRASHES {
                more.stopped = Some(format!(
                    "stopped after {MAX_KNOWN_CRASHES} crashes of a failure already found (each \
                     restarts the adapter); {} of the run's cases not run",
                    total - i - 1
                ));
                break;
            }
        }
        if !known.contains(&sig) {
            if known.len() < MAX_DISTINCT {
                let history = run.adapter.crash_history.clone();
                more.found.push(Distinct { tree, failure, case: i + simplest, history });
                known.push(sig);
            } else {
                *more.beyond.entry(sig.distinct()).or_default() += 1;
            }
        }
        if stop {
            break;
        }
    }
    more
}

/// Shrinks a failure the cases after the first one found, as the search shrinks the first: its
/// own budget of `--max-shrink-runs`, its class kept. Returns the shrunk case (the case as it
/// was for a hang).
pub(super) fn shrink_distinct<T: Target>(
    run: &mut Run<'_, '_, T>,
    config: &Config,
    d: Distinct<<BoxedStrategy<T::Case> as Strategy>::Tree>,
) -> T::Case {
    run.found = Some(d.failure.clone());
    run.found_history = d.history;
    run.other_classes = 0;
    run.hung = d.failure.kind == "hang";
    // The failing case was run once already: the budget counts the runs after it.
    run.base = run.adapter.executed.saturating_sub(1);
    let original = d.tree.current();
    if run.hung {
        return original;
    }
    let bar = ProgressBar::hidden();
    let known = Some(d.failure);
    let search = RefCell::new(Search { run, bar, shrinking: true, stop_shrinking: false, known });
    let mut runner = TestRunner::new_with_rng(config.clone(), rng(0, 2));
    match runner.run_one(d.tree, |case| search.borrow_mut().test(&case)) {
        Err(TestError::Fail(_, shrunk)) => shrunk,
        _ => original,
    }
}

#[cfg(test)]
mod tests {
    use std::cell::RefCell;

    use proptest::collection::vec;
    use proptest::strategy::{Strategy, ValueTree};
    use proptest::test_runner::{Config, TestRunner};

    use super::{Stream, rng};

    /// The cases after a failure are the ones the search would have drawn next: `Stream` draws
    /// the seed's cases as proptest's runner does (a proptest that seeds its cases otherwise
    /// fails here, not silently in the reports).
    #[test]
    fn the_stream_is_the_searchs() {
        let strategy = (0u64..1000, vec(0u8..9, 0..6), proptest::bool::ANY).boxed();
        for seed in [0, 1, 42] {
            let config = Config { cases: 40, failure_persistence: None, ..Config::default() };
            let seen = RefCell::new(Vec::new());
            TestRunner::new_with_rng(config.clone(), rng(seed, 0))
                .run(&strategy, |v| {
                    seen.borrow_mut().push(v);
                    Ok(())
                })
                .unwrap();
            let mut stream = Stream::new(&config, seed);
            let drawn: Vec<_> =
                (0..40).map(|_| stream.next(&strategy).unwrap().current()).collect();
            assert_eq!(drawn, seen.into_inner(), "seed {seed}");
        }
    }
}
