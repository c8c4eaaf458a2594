//! `thdcheck fuzz packer|collator|logger|loss|cp-split|attention -- CMD ARGS…`: generate cases, send them to the
//! user's adapter (JSON lines, `docs/protocol.md`), check every invariant on the answers, and
//! shrink a failure with proptest to a minimal request (or requests) that can be replayed by hand.
//!
//! The cases are drawn by the generators of `properties::strategies::fuzz` (one per target, with
//! a parameter struct the target fills from the command's flags); a target's module here holds
//! what is the command's own: the protocol's requests, the judge and the reductions.
//!
//! A run is in pieces with one job each; `drive` only sequences them:
//!
//! ```text
//! runner      the cases (--request, or the simplest then the seed's), proptest shrinking
//!             the first failure while its class holds; after a failure, the scan for others
//! minimize    the shrunk case reduced by the target's reductions until 1-minimal
//! replay      the minimal case run again in a fresh process; the replay command
//! report      the JSON document, the HTML page, the text report
//! supervisor  every case's requests to the adapter: ids, answer bounds, crash, hang, no start
//! ignore      --ignore: the failure classes let pass, counted
//! ```

mod adapter;
mod attention;
mod collator;
mod cp_batch;
mod cp_split;
mod ignore;
mod logger;
mod loss;
mod minimize;
mod packer;
pub mod picture;
mod replay;
mod report;
mod runner;
mod supervisor;
pub use ignore::{FAILURE_KINDS, check_ignore};
pub use loss::DEFAULT_RTOL as DEFAULT_LOSS_RTOL;

use std::fmt::Debug;
use std::io::Write;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use proptest::strategy::BoxedStrategy;
use proptest::test_runner::TestError;
use serde_json::Value;

use crate::args::{CpSplitLayout, FuzzArgs, LayoutKind, StaticLength};
use crate::protocol::BadResponse;
use adapter::Adapter;
use reader::profile::StaticLengthFact;
use rules::checks::FuzzTarget;
use runner::Run;
use supervisor::{Supervisor, Transport};

/// Why a case failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Failure {
    /// `violation`, `crash`, `hang`, `too-long`, `not-json`, `schema`, `adapter-error` or
    /// `flaky`.
    pub kind: &'static str,
    /// The checks violated (for `violation`).
    pub checks: Vec<String>,
    /// What happened, expected vs got.
    pub detail: String,
    /// The response line, if there was one.
    pub response: Option<String>,
}

impl Failure {
    /// A violation of a rule of `rules::checks`.
    pub(crate) fn from_violation(v: rules::Violation) -> Self {
        Self {
            kind: "violation",
            checks: vec![v.id.to_owned()],
            detail: format!("{}: {}", v.id, v.summary()),
            response: None,
        }
    }

    /// A violation whose detail states the rule too (`check: rule: where: expected, got`), for
    /// rules whose values alone do not say what is wrong (a NaN loss, a label).
    pub(crate) fn stated(v: rules::Violation) -> Self {
        let detail = format!("{}: {}: {}", v.id, v.rule, v.summary());
        Self { detail, ..Self::from_violation(v) }
    }

    /// What makes two failures the same bug: the kind and the first violated check, and for an
    /// adapter error or a crash where the exception came from (its `origin`).
    pub fn signature(&self) -> Signature {
        let origin = match self.kind {
            "adapter-error" | "crash" => origin(&self.detail),
            _ => None,
        };
        Signature { kind: self.kind, check: self.checks.first().cloned(), origin }
    }

    /// An answer that breaks the protocol (a missing rank, lengths that disagree).
    pub(crate) fn schema(detail: impl std::fmt::Display, response: &str) -> Self {
        Self {
            kind: "schema",
            checks: vec![],
            detail: format!("the answer breaks the protocol: {detail}"),
            response: Some(response.to_owned()),
        }
    }
}

/// The class of a failure: shrinking keeps it, so a bug cannot turn into another one (an offset
/// bug into a `seq-idx` one, an exception into another) on the way to the minimal case; a run
/// reports each distinct class it meets as a failure of its own.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Signature {
    /// The failure's kind.
    pub kind: &'static str,
    /// Its first violated check, for a violation.
    pub check: Option<String>,
    /// Where an adapter error's or a crash's exception came from (`ZeroDivisionError at
    /// packer.py:21`), or a crash's exit status when its stderr shows no exception.
    pub origin: Option<String>,
}

impl Signature {
    /// The class as a report names a distinct failure: the kind and check (what `--ignore`
    /// takes, the [`Display`](std::fmt::Display) form), then the origin in parentheses.
    pub fn distinct(&self) -> String {
        match &self.origin {
            Some(o) => format!("{self} ({o})"),
            None => self.to_string(),
        }
    }
}

impl std::fmt::Display for Signature {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.check {
            Some(c) => write!(f, "{} {c}", self.kind),
            None => f.write_str(self.kind),
        }
    }
}

/// Where an adapter's exception came from, read from a Python traceback in `detail` (an `error`
/// answer, or the stderr tail of a crash): its type and the innermost frame's file and line,
/// `ValueError at packer.py:12` (as Hypothesis tells distinct failures apart). Without a frame,
/// the type alone when the last line names one (`RuntimeError: …`); a crash without either, its
/// exit status (`exit status: 7`); else `None`.
pub(crate) fn origin(detail: &str) -> Option<String> {
    let body = detail.strip_prefix(ADAPTER_ERROR).unwrap_or(detail);
    let lines: Vec<&str> = body.lines().collect();
    // `  File "/path/packer.py", line 12, in pack`: the innermost frame is the last.
    let frame = lines.iter().enumerate().rev().find_map(|(i, l)| {
        let rest = l.trim_start().strip_prefix("File \"")?;
        let (path, rest) = rest.split_once('"')?;
        let line: String =
            rest.strip_prefix(", line ")?.chars().take_while(char::is_ascii_digit).collect();
        let file = path.rsplit(['/', '\\']).next().unwrap_or(path);
        Some((i, format!("{file}:{line}")))
    });
    // The exception's line: the last one at the margin (after the frame, when there is one).
    let after = frame.as_ref().map_or(0, |(i, _)| i + 1);
    let ty = lines[after.min(lines.len())..]
        .iter()
        .rev()
        .find(|l| !l.is_empty() && !l.starts_with([' ', '\t']))
        .and_then(|l| {
            let name = l.split_once(':').map_or(*l, |(n, _)| n).trim();
            let ident = !name.is_empty()
                && name.chars().all(|c| c.is_alphanumeric() || c == '_' || c == '.')
                && !name.starts_with(|c: char| c.is_ascii_digit());
            ident.then(|| name.rsplit('.').next().unwrap_or(name).to_owned())
        });
    match (ty, frame) {
        (Some(ty), Some((_, at))) => Some(format!("{ty} at {at}")),
        (None, Some((_, at))) => Some(format!("an exception at {at}")),
        (Some(ty), None) if ty.ends_with("Error") || ty.ends_with("Exception") => Some(ty),
        _ => {
            // A crash: `the adapter exited (exit status: 7) without answering`.
            let status = detail.strip_prefix("the adapter exited (")?;
            status.split_once(") without answering").map(|(s, _)| s.to_owned())
        }
    }
}

/// One thing the fuzzer can drive.
pub trait Target {
    /// A generated case.
    type Case: Clone + Debug + 'static;
    /// `packer`, `collator`, `loss` or `cp-split` (the request's `kind`).
    fn kind(&self) -> &'static str;
    /// The cases.
    fn strategy(&self) -> BoxedStrategy<Self::Case>;
    /// The request payload of a case.
    fn payload(&self, case: &Self::Case) -> Value;
    /// Every request of a case, in the order `judge` sends them: the n-th call of `send` sends
    /// the n-th (cycling). One by default; the loss target sends one per CP size.
    fn payloads(&self, case: &Self::Case) -> Vec<Value> {
        vec![self.payload(case)]
    }
    /// Sends the case (through `send`, which may be called more than once) and judges the
    /// answers.
    fn judge(
        &self,
        case: &Self::Case,
        send: &mut dyn FnMut() -> Result<String, Failure>,
    ) -> Result<(), Failure>;
    /// Smaller cases than `case`, the first tried first. After proptest's shrinking, the case
    /// is replaced by the first of its reductions that fails the same way, until none does: a
    /// 1-minimal case (no example can be removed, nothing lowered by one, while the failure
    /// class holds). None by default.
    fn reductions(&self, _case: &Self::Case) -> Vec<Self::Case> {
        Vec::new()
    }
    /// The case a request line holds (`--request FILE`), for a target that can read one back:
    /// `None` when it cannot, else the case or why the line is not a request of this target.
    fn case_of(&self, _request: &Value) -> Option<Result<Self::Case, String>> {
        None
    }
    /// Whether [`Target::reductions`] lists every reduction by one (the report then says
    /// whether the counterexample is 1-minimal).
    fn minimizes(&self) -> bool {
        false
    }
    /// The rules checked, for the report: read from the registry (the rules whose judges
    /// applied during the run).
    fn invariants(&self) -> String;
    /// What the passing cases measured, beyond the rules (a packer's efficiency): one line for
    /// the text report and a JSON value, or `None`.
    fn summary(&self) -> Option<(String, Value)> {
        None
    }
}

/// The rules a target's judges applied during a run, for the report: the registry's rules of
/// the target, in registry order, that were judged (and those its judges report for another
/// rule of theirs, `Fuzz::X(None)`).
#[derive(Debug, Default)]
pub(crate) struct Applied(std::cell::RefCell<Vec<&'static str>>);

impl Applied {
    /// Runs `judge` with the list of applied ids to extend.
    pub(crate) fn with<R>(&self, judge: impl FnOnce(&mut Vec<&'static str>) -> R) -> R {
        judge(&mut self.0.borrow_mut())
    }

    /// The ids of `target`'s rules that applied, comma separated, in registry order.
    pub(crate) fn text(&self, target: FuzzTarget) -> String {
        use rules::checks::Fuzz;
        let applied = self.0.borrow();
        rules::checks::rules_of(target)
            .filter(|r| {
                let by_another = matches!(
                    r.fuzz,
                    Some(
                        Fuzz::Packer(None)
                            | Fuzz::CpSplit(None)
                            | Fuzz::CpLoss(None)
                            | Fuzz::Collator(None)
                            | Fuzz::Attention(None)
                    )
                );
                applied.contains(&r.id) || by_another && !applied.is_empty()
            })
            .map(|r| r.id)
            .collect::<Vec<_>>()
            .join(", ")
    }
}

/// Runs the fuzzer against the adapter subprocess `args.command`, printing the report on
/// stdout; returns the exit code.
///
/// # Errors
/// The adapter cannot be started, or the report cannot be written.
pub fn run(args: &FuzzArgs) -> Result<u8> {
    // A request written to an adapter that is gone must fail with EPIPE (reported as the
    // adapter's crash), not end thdcheck by SIGPIPE, silently and with no report.
    adapter::ignore_sigpipe(true);
    adapter::install_signal_cleanup();
    adapter::become_subreaper();
    let mut adapter = Adapter::new(
        args.command.clone(),
        Duration::from_millis(args.timeout_ms),
        Duration::from_millis(args.startup_timeout_ms),
        usize::try_from(args.max_line_bytes).unwrap_or(usize::MAX),
    );
    adapter
        .ensure_started()
        .with_context(|| format!("cannot start the adapter `{}`", args.command.join(" ")))?;
    // The report is written once the adapter is stopped (`run_with` drops it), with SIGPIPE's
    // default action back: `thdcheck fuzz … | head` ends quietly, as `check` does.
    let mut report = Vec::new();
    let code = run_with(args, Transport::Process(adapter), &mut report);
    adapter::ignore_sigpipe(false);
    let mut stdout = std::io::stdout().lock();
    stdout.write_all(&report)?;
    stdout.flush()?;
    code
}

/// Runs the fuzzer with requests answered by `answer` in this process (no subprocess, no
/// timeout: the function is called directly), writing the report (`args.json`: the JSON
/// document) to `out`; returns the exit code. The cases, rules and shrinking are `run`'s.
///
/// # Errors
/// The report cannot be written.
pub fn run_in_process(
    args: &FuzzArgs,
    answer: &mut dyn FnMut(&str) -> String,
    out: &mut dyn Write,
) -> Result<u8> {
    run_with(args, Transport::InProcess(answer), out)
}

fn run_with(args: &FuzzArgs, transport: Transport<'_>, out: &mut dyn Write) -> Result<u8> {
    check_ignore(&args.ignore)?;
    check_mode(args)?;
    // The stack's profile carries its fuzz defaults; an option given on the command line wins.
    let mut read = args.batch.read_options()?;
    let profile = read.stated_profile().cloned();
    // The facts before any batch is read (the generators need the pad id, which an example
    // never holds): the options over the profile, resolved as when a file is read.
    read.stated = read.stated.or(reader::checks::option_facts(&args.batch.check_options()));
    let facts = read.facts().contract;
    let fuzz = profile.as_ref().map(|p| p.fuzz.clone()).unwrap_or_default();
    match args.target {
        FuzzTarget::Packer => {
            let cfg = packer_config(args, &fuzz)?;
            drive(&packer::PackerTarget::new(cfg), args, transport, out)
        }
        FuzzTarget::Logger => drive(
            &logger::LoggerTarget {
                applied: Applied::default(),
                tol: rules::checks::LoggedTolerance {
                    rtol: args.rtol.unwrap_or(logger::DEFAULT_RTOL),
                    atol: 0.0,
                },
                pad: facts.pad_token_id.unwrap_or(0),
                max_micro_batches: args.max_micro_batches as usize,
                max_cp: args.max_cp,
                peak_tflops: 989.0,
                formula: args.formula,
                layouts: if args.layouts.is_empty() {
                    vec![LayoutKind::Flat, LayoutKind::MockPad, LayoutKind::CpPad, LayoutKind::Bshd]
                } else {
                    args.layouts.clone()
                },
            },
            args,
            transport,
            out,
        ),
        FuzzTarget::Collator => drive(
            &collator::CollatorTarget {
                applied: Applied::default(),
                mode: args.mode.unwrap_or(crate::protocol::CollatorMode::Sft),
                read: read.clone(),
                opts: reader::checks::check_options(&facts),
                rewrites: collator::Rewrites {
                    // `--mlm`, or a profile whose objective is masked LM (bionemo's ESM-2).
                    mlm: facts.objective == Some(reader::profile::Objective::Mlm),
                    bos: args.add_bos,
                    eos: args.add_eos,
                },
                static_length: args.static_length.unwrap_or(match fuzz.static_length {
                    Some(StaticLengthFact::Never) => StaticLength::Never,
                    Some(StaticLengthFact::Always) => StaticLength::Always,
                    Some(StaticLengthFact::Sometimes) | None => StaticLength::Sometimes,
                }),
                over_budget: args.over_budget,
            },
            args,
            transport,
            out,
        ),
        FuzzTarget::Loss => drive(
            &loss::LossTarget {
                rtol: args.rtol,
                layout: args.cp_split_layout(profile.as_deref()),
                applied: Applied::default(),
            },
            args,
            transport,
            out,
        ),
        FuzzTarget::Attention => {
            let params = properties::strategies::fuzz::AttentionFuzzParams {
                cp: args.batch.cp_size.map_or(1, |c| c as usize),
                causal: args.batch.causal.then_some(true),
                padded: !args.unpadded,
            };
            let dtype = match args.dtype {
                crate::args::AttnDtypeArg::F32 => properties::strategies::fuzz::AttnDtype::F32,
                crate::args::AttnDtypeArg::Bf16 => properties::strategies::fuzz::AttnDtype::Bf16,
                crate::args::AttnDtypeArg::F16 => properties::strategies::fuzz::AttnDtype::F16,
            };
            drive(&attention::AttentionTarget::new(params, dtype), args, transport, out)
        }
        FuzzTarget::CpSplit => {
            let layout = args.cp_split_layout(profile.as_deref());
            let align = args
                .cp_slot_align
                .or_else(|| profile.as_deref().and_then(|p| p.fuzz.cp_slot_align));
            // Both ways in check it already; a profile built in code is held to it too.
            if let Some(Err(why)) = align.map(|k| reader::profile::cp_slot_align(k.into())) {
                bail!("{why}");
            }
            match align {
                Some(_) if layout != CpSplitLayout::Zigzag => bail!(
                    "--cp-slot-align (or the profile's [fuzz] cp_slot_align) applies to the \
                     zigzag layout; the layout here is {}",
                    cp_split::layout_name(layout).unwrap_or("zigzag")
                ),
                _ => {}
            }
            drive(
                &cp_split::CpSplitTarget {
                    slot_align: align,
                    ..cp_split::CpSplitTarget::new(layout)
                },
                args,
                transport,
                out,
            )
        }
    }
}

/// `--mode` is the collator's: an option the target never reads would be accepted and ignored
/// (`--mode dpo` on a packer fuzzed SFT requests as if DPO had been checked).
fn check_mode(args: &FuzzArgs) -> Result<()> {
    if let (Some(mode), false) = (args.mode, args.target == FuzzTarget::Collator) {
        let mode = clap::ValueEnum::to_possible_value(&mode)
            .map_or_else(String::new, |v| v.get_name().to_owned());
        bail!(
            "--mode {mode} is the collator's contract (sft or dpo); `fuzz {}` does not read it{}",
            target_name(args.target),
            if args.target == FuzzTarget::Packer {
                " (a packer of DPO pairs: --pairs)"
            } else {
                ""
            }
        );
    }
    Ok(())
}

/// The packer target's configuration: the command's flags, each unset one from the profile's
/// `[fuzz]` facts (`fuzz`).
///
/// # Errors
/// Preconditions that need `--dp-size` without one, or that admit no request.
fn packer_config(
    args: &FuzzArgs,
    fuzz: &reader::profile::FuzzFacts,
) -> Result<packer::PackerConfig> {
    let cfg = packer::PackerConfig {
        first_fit: args.first_fit,
        session: args.session,
        options: crate::protocol::PackerOptions {
            pad_to_multiple_of: args.pad_sequences_to_multiple_of,
            max_seqs_per_pack: args.max_seqs_per_pack,
            dp_size: args.dp_size.map(|d| d.lo),
            min_packs: None,
        },
        pairs: args.pairs,
        fitting_only: args.fitting_only || fuzz.fitting_only == Some(true),
        empty_examples: args.empty_examples || fuzz.empty_examples == Some(true),
        pre: properties::strategies::fuzz::Preconditions {
            non_empty: args.non_empty || fuzz.non_empty == Some(true),
            // The profile's fact applies when the run deals to ranks; without --dp-size every
            // count is a multiple of the one rank (the flag itself requires --dp-size).
            dp_multiple: args.examples_multiple_of_dp
                || (fuzz.examples_multiple_of_dp == Some(true) && args.dp_size.is_some()),
            max_examples: args
                .max_examples
                .or(fuzz.max_examples)
                .map(|m| usize::try_from(m).unwrap_or(usize::MAX)),
        },
        drops: declared_drops(if args.drops.is_empty() {
            fuzz.drops.as_deref()
        } else {
            Some(&args.drops)
        })?,
        generation: args.generation,
        min_packs: args.min_packs,
        dp_size_max: args.dp_size.and_then(|d| d.fixed().is_none().then_some(d.hi)),
    };
    if fuzz.examples_multiple_of_dp == Some(true) && args.dp_size.is_none() {
        eprintln!(
            "note: the profile's [fuzz] examples_multiple_of_dp is not applied: it needs \
             --dp-size (without it the packs go to one rank)"
        );
    }
    let lo = args.dp_size.map(|d| d.lo);
    if cfg.pre.smallest_nonempty(lo).is_none() && (cfg.pre.non_empty || !cfg.pre.admits(0, lo)) {
        anyhow::bail!(
            "the preconditions admit no request: --max-examples {} is below the smallest \
             count of examples the others admit (--dp-size {} with \
             --examples-multiple-of-dp)",
            cfg.pre.max_examples.unwrap_or(0),
            lo.unwrap_or(1)
        );
    }
    Ok(cfg)
}

/// The target as the command line names it (`cp-split`).
fn target_name(target: FuzzTarget) -> String {
    clap::ValueEnum::to_possible_value(&target)
        .map_or_else(String::new, |v| v.get_name().to_owned())
}

/// `--drops` (or the profile's `[fuzz] drops`) as the packer target holds it; nothing stated:
/// over-length drops only.
fn declared_drops(stated: Option<&[reader::profile::DropFact]>) -> Result<packer::DropsDeclared> {
    use reader::profile::DropFact;
    let Some(kinds) = stated else { return Ok(packer::DropsDeclared::default()) };
    if kinds.contains(&DropFact::None) && kinds.len() > 1 {
        anyhow::bail!("--drops none says nothing is dropped: it cannot be given with other kinds");
    }
    Ok(packer::DropsDeclared {
        over_length: kinds.contains(&DropFact::OverLength),
        dp_remainder: kinds.contains(&DropFact::DpRemainder),
        drop_last: kinds.contains(&DropFact::DropLast),
    })
}

/// Runs `target` against the adapter behind `transport` and writes the report: the search, then
/// for a failure the minimizer, the replay and the scan. Returns the exit code.
fn drive<T: Target>(
    target: &T,
    args: &FuzzArgs,
    transport: Transport<'_>,
    out: &mut dyn Write,
) -> Result<u8> {
    let given = runner::requested_case(target, args)?;
    let config = runner::config(args, given.is_some());
    let mut run = Run::new(target, args, Supervisor::new(transport, &args.command));
    let start = Instant::now();
    let result = runner::search(&mut run, given.as_ref(), &config);
    let elapsed = start.elapsed();
    if let Some(why) = run.adapter.not_started.take() {
        bail!("{why}");
    }
    let command = replay::quoted(&args.command);
    let header = report::Header {
        kind: target.kind(),
        args,
        command: &command,
        passed: run.passed,
        elapsed,
    };
    match result {
        Ok(()) => {
            let passed = report::Passed {
                adapter_starts: run.adapter.starts(),
                summary: target.summary(),
                invariants: target.invariants(),
                ignored: &run.filter.ignored,
            };
            report::write_pass(out, &header, &passed)?;
            Ok(0)
        }
        Err(TestError::Abort(reason)) => anyhow::bail!("fuzzing aborted: {reason}"),
        Err(TestError::Fail(_, shrunk)) => {
            let failed = failed(&mut run, &config, shrunk, given.is_some(), &command);
            report::write_fail(out, &header, &failed)?;
            Ok(1)
        }
    }
}

/// A failure found by the search, shrunk (`shrunk`): minimized and replayed; then, unless
/// `--first-failure`, the rest of the run's cases, each further distinct failure they meet
/// shrunk on its own, and the scan of fresh cases for other failing classes.
fn failed<T: Target>(
    run: &mut Run<'_, '_, T>,
    config: &proptest::test_runner::Config,
    shrunk: T::Case,
    given: bool,
    command: &str,
) -> report::Failed {
    let first = shrink_one(run, shrunk, given, command, None);
    let (mut scan_runs, budget_left) =
        runner::scan_budget(run, &first.replayed.failure, first.replayed.shrunk_as.as_ref(), given);
    let found = run.found.as_ref().map(Failure::signature);
    let blind = |f: Option<&Failure>| f.is_some_and(runner::blinding);
    let go_on = !run.args.first_failure
        && !given
        && !run.hung
        && !blind(Some(&first.replayed.failure))
        && !blind(first.replayed.shrunk_as.as_ref());
    let more = match &found {
        Some(sig) if go_on => Some(runner::more_failures(run, config, sig)),
        _ => None,
    };
    let mut reported: Vec<Signature> = found.into_iter().collect();
    let mut failures = vec![first];
    let (mut beyond, mut continued, mut stopped) = (Default::default(), 0, None);
    if let Some(more) = more {
        (beyond, continued, stopped) = (more.beyond, more.runs, more.stopped);
        for d in more.found {
            reported.push(d.failure.signature());
            let case = d.case;
            let shrunk = runner::shrink_distinct(run, config, d);
            failures.push(shrink_one(run, shrunk, false, command, Some(case)));
        }
    }
    if failures.iter().skip(1).any(|s| s.hung) {
        // Each further run of a hang would wait the full timeout.
        scan_runs = 0;
    }
    reported.extend(failures.iter().map(|s| s.replayed.failure.signature()));
    let before_scan = run.adapter.executed;
    let also = if scan_runs > 0 {
        runner::scan(run, config, scan_runs, &reported)
    } else {
        Default::default()
    };
    report::Failed {
        failures,
        beyond,
        continued,
        stopped,
        scanned: run.adapter.executed - before_scan,
        minimizes: run.target.minimizes(),
        given,
        also,
        scan_runs,
        budget_left,
    }
}

/// The failure being shrunk (`run.found`), from its shrunk case on: minimized, replayed, its
/// replay command. `case`: the number of the case that found it, for one after the first.
fn shrink_one<T: Target>(
    run: &mut Run<'_, '_, T>,
    shrunk: T::Case,
    given: bool,
    command: &str,
    case: Option<u64>,
) -> report::Shrunk {
    let minimized = minimize::minimize(run, shrunk, given);
    let replayed = replay::replay(run, &minimized.case);
    let replay =
        replay::command_line(command, &replayed.requests, replayed.history_file.as_deref());
    report::Shrunk {
        replayed,
        replay,
        // The first failure's runs count every run of the search before it, as they always did.
        runs: run.adapter.executed - if case.is_some() { run.base } else { 0 },
        one_minimal: minimized.one_minimal,
        reductions: minimized.reductions,
        hung: run.hung,
        other_classes: run.other_classes,
        case,
    }
}

/// An answer as the report shows it: at most 4000 characters, then how long it was. Clipping
/// a clipped answer changes nothing.
fn clip(s: &str) -> String {
    const KEEP: usize = 4000;
    match s.char_indices().nth(KEEP) {
        None => s.to_owned(),
        Some((cut, _))
            if s.len() - cut < 40
                && s[cut..].starts_with("… (")
                && s.ends_with(" bytes in all)") =>
        {
            s.to_owned()
        }
        Some((cut, _)) => format!("{}… ({} bytes in all)", &s[..cut], s.len()),
    }
}

/// Reads a response from `send`'s `"id version\nline"` output, mapping protocol errors to
/// failures. The line is returned as a report shows it (`clip`): what a failure keeps of an
/// answer.
pub fn response<R: for<'de> serde::Deserialize<'de>>(
    send: &mut dyn FnMut() -> Result<String, Failure>,
) -> Result<(R, String), Failure> {
    let mut line = send()?;
    let cut = line.find('\n');
    let head = cut.map_or("", |c| &line[..c]);
    let (id, version) = head.split_once(' ').unwrap_or((head, ""));
    let id: u64 = id.parse().unwrap_or(0);
    let version: u64 = version.parse().unwrap_or(crate::protocol::VERSION);
    if let Some(c) = cut {
        // In place: the answer is not copied.
        line.drain(..=c);
    }
    match crate::protocol::parse_response::<R>(&line, id, version) {
        Ok(r) => Ok((r, clip(&line))),
        Err(bad) => Err(bad_response(bad, &line)),
    }
}

/// What a `schema` failure says of an adapter that answered a request twice: its second
/// answer is read as the next request's (an earlier id). Only a following request reads it, so
/// the minimal case replayed alone in a fresh process passes: the failure stands (it is not
/// `flaky`), and the scan for other classes is skipped (every later answer is out of step).
const TWO_ANSWERS: &str = "the adapter wrote 2 answers to one request";

/// Whether `f` is an adapter's second answer to one request ([`TWO_ANSWERS`]).
fn two_answers(f: &Failure) -> bool {
    f.kind == "schema" && f.detail.starts_with(TWO_ANSWERS)
}

/// How an adapter error's detail begins (the adapter's `error` follows).
const ADAPTER_ERROR: &str = "the adapter reported an error: ";

/// The failure of an answer that breaks the protocol.
fn bad_response(bad: BadResponse, line: &str) -> Failure {
    let (kind, detail) = match bad {
        BadResponse::NotJson(d) => ("not-json", format!("the answer is not JSON: {d}")),
        BadResponse::Schema(d) => ("schema", format!("the answer breaks the protocol: {d}")),
        BadResponse::AdapterError(d) => ("adapter-error", format!("{ADAPTER_ERROR}{d}")),
        BadResponse::Stale(d) => ("schema", format!("{TWO_ANSWERS}: {d}")),
    };
    Failure { kind, checks: vec![], detail, response: Some(clip(line)) }
}

#[cfg(test)]
mod tests {
    use super::origin;

    /// Distinct adapter errors and crashes are told apart by the exception's type and the
    /// innermost frame of its traceback, or a crash's exit status.
    #[test]
    fn an_exception_is_known_by_its_type_and_innermost_frame() {
        let tb = "Traceback (most recent call last):\n  File \"/a/thdcheck_adapter.py\", line \
                  103, in answer\n    reply.update(x)\n  File \"/a/examples/p.py\", line 26, in \
                  pack\n    mean = s / n\n           ~~^~\nZeroDivisionError: division by zero\n";
        let err = format!("the adapter reported an error: {tb}");
        assert_eq!(origin(&err).as_deref(), Some("ZeroDivisionError at p.py:26"));
        let crash = format!(
            "the adapter exited (exit status: 1) without answering; stderr:\n{}",
            tb.lines().skip(3).collect::<Vec<_>>().join("\n")
        );
        assert_eq!(origin(&crash).as_deref(), Some("ZeroDivisionError at p.py:26"));
        let exit = "the adapter exited (exit status: 7) without answering";
        assert_eq!(origin(exit).as_deref(), Some("exit status: 7"));
        let typed = "the adapter reported an error: RuntimeError: no frames";
        assert_eq!(origin(typed).as_deref(), Some("RuntimeError"));
        assert_eq!(origin("the adapter reported an error: index 5: out of range"), None);
    }
}
