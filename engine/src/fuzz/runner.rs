//! The runner: which cases a run sends (the one of `--request`, or the strategy's simplest case
//! and then the seed's draws), the search that proptest shrinks while the first failure's class
//! holds, and the scan of fresh cases for the other failing classes once a failure is reported.

use std::cell::RefCell;
use std::collections::BTreeMap;

use anyhow::{Context, Result};
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use proptest::strategy::{Just, Strategy, ValueTree};
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
        }
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
}

impl<T: Target> Search<'_, '_, '_, T> {
    /// One case as proptest runs it: a pass, or the failure (while shrinking, a failure of
    /// another class counts as a pass).
    fn test(&mut self, case: &T::Case) -> TestCaseResult {
        let run = &mut *self.run;
        // Past the shrink budget (or after a hang) a run reports success without running, so
        // proptest keeps the smallest failure found so far.
        let spent = run.adapter.executed > u64::from(run.args.max_shrink_runs) + run.passed;
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
    let search = RefCell::new(Search { run, bar, shrinking: false, stop_shrinking: false });
    let test = |case: T::Case| search.borrow_mut().test(&case);
    let simplest = match (given, args.cases) {
        (None, 1..) => properties::strategies::fuzz::simplest(&strategy),
        _ => None,
    };
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
/// that every other failing class is reported. Each violated check is a class of its own; the
/// failure reported (`first`) is not counted. Class → (cases, its detail line).
pub(super) fn scan<T: Target>(
    run: &mut Run<'_, '_, T>,
    config: &Config,
    runs: u64,
    first: &Signature,
) -> BTreeMap<String, (u64, String)> {
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
            vec![(f.signature().to_string(), f.detail.clone())]
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
        for (class, detail) in classes.into_iter().filter(|(c, _)| *c != first.to_string()) {
            let e = also.entry(class).or_insert((0, detail));
            e.0 += 1;
        }
    }
    also
}
