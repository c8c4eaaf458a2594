//! `thdcheck fuzz packer|collator|logger|loss|cp-split|attention -- CMD ARGS…`: generate cases, send them to the
//! user's adapter (JSON lines, `docs/protocol.md`), check every invariant on the answers, and
//! shrink a failure with proptest to a minimal request (or requests) that can be replayed by hand.
//!
//! The cases are drawn by the generators of `properties::strategies::fuzz` (one per target, with
//! a parameter struct the target fills from the command's flags); a target's module here holds
//! what is the command's own: the protocol's requests, the judge and the reductions.

mod adapter;
mod attention;
mod collator;
mod cp_batch;
mod cp_split;
mod logger;
mod loss;
mod packer;
pub mod picture;
pub use loss::DEFAULT_RTOL as DEFAULT_LOSS_RTOL;

use std::cell::{Cell, RefCell};
use std::fmt::Debug;
use std::io::Write;
use std::time::{Duration, Instant};

use crate::protocol::{BadResponse, envelope};
use anyhow::{Context, Result, bail};
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use proptest::strategy::BoxedStrategy;
use proptest::test_runner::{Config, RngAlgorithm, TestCaseError, TestError, TestRng, TestRunner};
use serde_json::{Value, json};

use crate::args::{CpSplitLayout, FuzzArgs, FuzzTarget, LayoutKind, StaticLength};
use adapter::{Adapter, Reply};
use reader::profile::StaticLengthFact;

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

    /// What makes two failures the same bug: the kind and the first violated check.
    pub fn signature(&self) -> Signature {
        Signature { kind: self.kind, check: self.checks.first().cloned() }
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
/// bug into a `seq-idx` one) on the way to the minimal case.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Signature {
    /// The failure's kind.
    pub kind: &'static str,
    /// Its first violated check, for a violation.
    pub check: Option<String>,
}

impl std::fmt::Display for Signature {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.check {
            Some(c) => write!(f, "{} {c}", self.kind),
            None => f.write_str(self.kind),
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
    pub(crate) fn text(&self, target: rules::checks::FuzzTarget) -> String {
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

/// Where the requests go: the adapter subprocess (`thdcheck fuzz -- CMD`), or a function in this
/// process (the Python package's `fuzz_collator(fn)`), which answers each request line with a
/// response line, exactly as an adapter would.
pub enum Transport<'a> {
    /// The user's adapter, a subprocess in a process group of its own.
    Process(Adapter),
    /// A function answering each JSON request line with a JSON response line.
    InProcess(&'a mut dyn FnMut(&str) -> String),
}

impl Transport<'_> {
    fn request(&mut self, line: &str) -> std::io::Result<Reply> {
        match self {
            Transport::Process(a) => a.request(line),
            Transport::InProcess(answer) => Ok(Reply::Line(answer(line))),
        }
    }

    fn stop(&mut self) {
        if let Transport::Process(a) = self {
            a.stop();
        }
    }

    fn history(&self) -> Vec<String> {
        match self {
            Transport::Process(a) => a.history.clone(),
            Transport::InProcess(_) => Vec::new(),
        }
    }

    fn starts(&self) -> usize {
        match self {
            Transport::Process(a) => a.starts,
            Transport::InProcess(_) => 1,
        }
    }

    /// Whether any answer was read yet (in process, every request is answered).
    fn ever_answered(&self) -> bool {
        match self {
            Transport::Process(a) => a.answered > 0,
            Transport::InProcess(_) => true,
        }
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

/// What an adapter can do besides breaking a rule: the failure kinds `--ignore` may name.
pub const FAILURE_KINDS: &[&str] =
    &["violation", "adapter-error", "crash", "hang", "too-long", "not-json", "schema", "flaky"];

/// Checks every `--ignore` value against the failure kinds and the rule registry: a kind
/// (`crash`), a rule id (`dpo-offsets`), or a kind and a rule id (`violation dpo-offsets`). A
/// misspelt class would otherwise ignore nothing, silently.
///
/// # Errors
/// The first value that names neither, with what may be named.
pub fn check_ignore(values: &[String]) -> Result<()> {
    let rule = |id: &str| rules::checks::RULES.iter().any(|r| r.id == id);
    for value in values {
        let known = match value.split_once(' ') {
            Some((kind, id)) => FAILURE_KINDS.contains(&kind) && rule(id),
            None => FAILURE_KINDS.contains(&value.as_str()) || rule(value),
        };
        if !known {
            let ids: Vec<&str> = rules::checks::RULES.iter().map(|r| r.id).collect();
            anyhow::bail!(
                "--ignore {value:?}: not a failure kind ({}) nor a rule id ({}), nor a kind and \
                 a rule id (`violation dpo-offsets`)",
                FAILURE_KINDS.join(", "),
                ids.join(", ")
            );
        }
    }
    Ok(())
}

fn run_with(args: &FuzzArgs, transport: Transport<'_>, out: &mut dyn Write) -> Result<u8> {
    check_ignore(&args.ignore)?;
    // An option the target never reads would be accepted and ignored: `--mode dpo` on a packer
    // fuzzed SFT requests as if DPO had been checked.
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
    // The stack's profile carries its fuzz defaults; an option given on the command line wins.
    let mut read = args.batch.read_options()?;
    let profile = read.stated_profile().cloned();
    // The generators need the profile's pad id before any batch is read (an example never
    // holds it): the option wins, as when a file is read.
    read.pad_token_id = read.pad_token_id.or(profile.as_ref().and_then(|p| p.pad_token_id));
    let fuzz = profile.as_ref().map(|p| p.fuzz.clone()).unwrap_or_default();
    match args.target {
        FuzzTarget::Packer => {
            let cfg = packer::PackerConfig {
                first_fit: args.first_fit,
                session: args.session,
                options: crate::protocol::PackerOptions {
                    pad_to_multiple_of: args.pad_sequences_to_multiple_of,
                    max_seqs_per_pack: args.max_seqs_per_pack,
                    dp_size: args.dp_size,
                    min_packs: None,
                },
                pairs: args.pairs,
                fitting_only: args.fitting_only || fuzz.fitting_only == Some(true),
                empty_examples: args.empty_examples || fuzz.empty_examples == Some(true),
                pre: properties::strategies::fuzz::Preconditions {
                    non_empty: args.non_empty || fuzz.non_empty == Some(true),
                    dp_multiple: args.examples_multiple_of_dp
                        || fuzz.examples_multiple_of_dp == Some(true),
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
            };
            if cfg.pre.dp_multiple && args.dp_size.is_none() {
                anyhow::bail!(
                    "the profile's [fuzz] examples_multiple_of_dp needs --dp-size: the example \
                     counts are multiples of the DP size"
                );
            }
            if cfg.pre.smallest_nonempty(args.dp_size).is_none()
                && (cfg.pre.non_empty || !cfg.pre.admits(0, args.dp_size))
            {
                anyhow::bail!(
                    "the preconditions admit no request: --max-examples {} is below the smallest \
                     count of examples the others admit (--dp-size {} with \
                     --examples-multiple-of-dp)",
                    cfg.pre.max_examples.unwrap_or(0),
                    args.dp_size.unwrap_or(1)
                );
            }
            drive(&packer::PackerTarget::new(cfg), args, transport, out)
        }
        FuzzTarget::Logger => drive(
            &logger::LoggerTarget {
                applied: Applied::default(),
                tol: rules::checks::LoggedTolerance {
                    rtol: args.rtol.unwrap_or(logger::DEFAULT_RTOL),
                    atol: 0.0,
                },
                pad: args.batch.pad_token_id.unwrap_or(0),
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
                opts: reader::checks::with_profile(args.batch.check_options(), profile.as_deref()),
                rewrites: collator::Rewrites {
                    // `--mlm`, or a profile whose objective is masked LM (bionemo's ESM-2).
                    mlm: args.batch.mlm
                        || profile.as_deref().and_then(|p| p.objective)
                            == Some(reader::profile::Objective::Mlm),
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

fn drive<T: Target>(
    target: &T,
    args: &FuzzArgs,
    transport: Transport<'_>,
    out: &mut dyn Write,
) -> Result<u8> {
    let adapter = RefCell::new(transport);
    let next_id = Cell::new(0u64);
    let executed = Cell::new(0u64);
    let mut seed_bytes = [0u8; 32];
    seed_bytes[..8].copy_from_slice(&args.seed.to_le_bytes());
    let config = Config {
        cases: args.cases,
        failure_persistence: None,
        max_shrink_iters: 4096,
        max_shrink_time: 120_000,
        ..Config::default()
    };
    // `--request FILE`: that one case, judged once.
    let given = match &args.request {
        None => None,
        Some(path) => {
            let text = std::fs::read_to_string(path)
                .with_context(|| format!("--request {}: cannot read it", path.display()))?;
            let line = text.lines().find(|l| !l.trim().is_empty()).unwrap_or_default();
            let value: Value = serde_json::from_str(line).map_err(|e| {
                anyhow::anyhow!("--request {}: line 1 is not JSON: {e}", path.display())
            })?;
            match target.case_of(&value) {
                None => anyhow::bail!(
                    "--request is not supported by `fuzz {}` (packer and collator requests only)",
                    target.kind()
                ),
                Some(Err(why)) => anyhow::bail!("--request {}: {why}", path.display()),
                Some(Ok(case)) => Some(case),
            }
        }
    };
    let config = if given.is_some() { Config { cases: 1, ..config } } else { config };
    let scan_config = config.clone();
    let runner = |cases: u32| {
        let config = Config { cases, ..config.clone() };
        TestRunner::new_with_rng(config, TestRng::from_seed(RngAlgorithm::ChaCha, &seed_bytes))
    };
    // `--ignore CLASS`: an ignored check is dropped from a violation (which passes when none is
    // left), an ignored kind passes, so the next class is shrunk.
    let is_ignored = |kind: &str, check: Option<&str>| {
        args.ignore
            .iter()
            .any(|c| *c == kind || check.is_some_and(|k| *c == k || *c == format!("{kind} {k}")))
    };
    // What `--ignore` let pass, per class: a passing run says how many answers it did not judge.
    let ignored: RefCell<std::collections::BTreeMap<String, u64>> = RefCell::default();
    let unignored = |mut f: Failure| -> Option<Failure> {
        let class = f.signature().to_string();
        let count = |kept: Option<Failure>| {
            if kept.is_none() {
                *ignored.borrow_mut().entry(class.clone()).or_default() += 1;
            }
            kept
        };
        if f.checks.is_empty() {
            return count((!is_ignored(f.kind, None)).then_some(f));
        }
        f.checks.retain(|k| !is_ignored(f.kind, Some(k)));
        // The detail has a line per violated check, `check: …`: keep the kept checks' lines.
        let kept: Vec<&str> = f
            .detail
            .lines()
            .filter(|l| l.split_once(':').is_none_or(|(k, _)| !is_ignored(f.kind, Some(k))))
            .collect();
        if !kept.is_empty() {
            f.detail = kept.join("\n");
        }
        count((!f.checks.is_empty()).then_some(f))
    };
    let bar = if args.json || args.quiet {
        ProgressBar::hidden()
    } else {
        let b = ProgressBar::with_draw_target(
            Some(u64::from(args.cases)),
            ProgressDrawTarget::stderr(),
        );
        b.set_style(
            ProgressStyle::with_template(
                "{prefix} [{bar:30}] {pos}/{len} cases · {per_sec} · {msg}",
            )
            .unwrap_or_else(|_| ProgressStyle::default_bar())
            .progress_chars("=> "),
        );
        b.set_prefix(format!("fuzz {}", target.kind()));
        b
    };
    let passed = Cell::new(0u64);
    let shrinking = Cell::new(false);
    // A hang costs a full timeout per run, so a hanging case is reported as found; a hang while
    // shrinking another failure ends the shrinking.
    let hung = Cell::new(false);
    let stop_shrinking = Cell::new(false);
    // The first failure's class, and the latest failure of that class: while shrinking, a run
    // failing another way counts as a pass, so the minimal case shows the bug found.
    let found: RefCell<Option<Failure>> = RefCell::new(None);
    // The requests the adapter had received when it last crashed (since its start): a crash
    // that depends on earlier requests is replayed with all of them.
    let crash_history: RefCell<Vec<String>> = RefCell::new(Vec::new());
    let found_history: RefCell<Vec<String>> = RefCell::new(Vec::new());
    let other_classes = Cell::new(0u64);
    // The adapter exited before reading its first request (an `ImportError`): it did not start,
    // a setup error (exit 2), not a failed check; no case runs after it.
    let not_started: RefCell<Option<String>> = RefCell::new(None);
    let exec = |case: &T::Case| -> Result<(), Failure> {
        executed.set(executed.get() + 1);
        let mut last_request = String::new();
        let payloads = target.payloads(case);
        let mut sent = 0usize;
        let mut send = || -> Result<String, Failure> {
            let id = next_id.get();
            next_id.set(id + 1);
            let payload = payloads.get(sent % payloads.len().max(1)).unwrap_or(&Value::Null);
            sent += 1;
            last_request = envelope(id, target.kind(), payload).to_string();
            let reply = adapter.borrow_mut().request(&last_request).map_err(|e| Failure {
                kind: "crash",
                checks: vec![],
                detail: format!("cannot restart the adapter: {e}"),
                response: None,
            })?;
            match reply {
                Reply::Line(mut l) => {
                    // What decoding the answer would cost is bounded by its request, before
                    // anything decodes it (--max-line-bytes alone bounds only its length).
                    let limit = crate::protocol::answer_values_limit(&last_request);
                    if let Err(bad) = crate::protocol::check_answer_size(&l, limit) {
                        return Err(bad_response(bad, &l));
                    }
                    // `id version\nline`, the line moved, not copied (it may be hundreds of
                    // MB). The answer's version is the request's.
                    let version = payload
                        .get("thdcheck")
                        .and_then(Value::as_u64)
                        .unwrap_or(crate::protocol::VERSION);
                    l.insert_str(0, &format!("{id} {version}\n"));
                    Ok(l)
                }
                Reply::Garbage { kind, detail } => {
                    Err(Failure { kind, checks: vec![], detail, response: None })
                }
                Reply::Crash { status, stderr, unread } => {
                    if unread && !adapter.borrow().ever_answered() {
                        *not_started.borrow_mut() = Some(format!(
                            "the adapter `{}` exited ({status}) before reading its first request: \
                             it did not start (a setup error; no case was judged){}",
                            args.command.join(" "),
                            tail(&stderr)
                        ));
                    }
                    *crash_history.borrow_mut() = adapter.borrow().history();
                    Err(Failure {
                        kind: "crash",
                        checks: vec![],
                        detail: format!(
                            "the adapter exited ({status}) without answering{}",
                            tail(&stderr)
                        ),
                        response: None,
                    })
                }
                Reply::Hang { after, startup, stderr } => Err(Failure {
                    kind: "hang",
                    checks: vec![],
                    detail: format!(
                        "no answer within {} ms{}; killed{}",
                        after.as_millis(),
                        if startup {
                            " (the first request after the adapter started: --startup-timeout-ms)"
                        } else {
                            ""
                        },
                        tail(&stderr)
                    ),
                    response: None,
                }),
            }
        };
        target.judge(case, &mut send)
    };
    let start = Instant::now();
    let strategy = match &given {
        Some(case) => proptest::strategy::Strategy::boxed(proptest::strategy::Just(case.clone())),
        None => target.strategy(),
    };
    let test = |case: T::Case| {
        // Past the shrink budget (or after a hang) a run reports success without running, so
        // proptest keeps the smallest failure found so far.
        if hung.get()
            || not_started.borrow().is_some()
            || stop_shrinking.get()
            || (shrinking.get() && executed.get() > u64::from(args.max_shrink_runs) + passed.get())
        {
            return Ok(());
        }
        crash_history.borrow_mut().clear();
        let mut r = exec(&case).or_else(|f| unignored(f).map_or(Ok(()), Err));
        if not_started.borrow().is_some() {
            return Ok(());
        }
        let keep_history = |f: &Failure| {
            if f.kind == "crash" {
                *found_history.borrow_mut() = crash_history.borrow().clone();
            }
        };
        if shrinking.get() {
            bar.set_message(format!("shrinking ({} runs)", executed.get()));
            if let Err(f) = &r {
                let same = found.borrow().as_ref().is_some_and(|g| g.signature() == f.signature());
                if f.kind == "hang" {
                    stop_shrinking.set(true);
                }
                if same {
                    keep_history(f);
                    *found.borrow_mut() = Some(f.clone());
                } else {
                    other_classes.set(other_classes.get() + 1);
                    r = Ok(());
                }
            }
        } else if let Err(f) = &r {
            if f.kind == "hang" {
                hung.set(true);
            }
            keep_history(f);
            *found.borrow_mut() = Some(f.clone());
            shrinking.set(true);
            bar.set_message("failure found, shrinking");
        } else {
            passed.set(passed.get() + 1);
            bar.set_position(passed.get());
        }
        r.map_err(|f| TestCaseError::fail(format!("{}: {}", f.kind, f.detail)))
    };
    // The strategy's simplest case first (an empty request, the smallest capacity: where
    // shrinking ends), then the seed's drawn cases: a failure of the simplest case needs no
    // shrinking; a pass counts as one of the cases.
    let simplest = match (&given, args.cases) {
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
    let elapsed = start.elapsed();
    bar.finish_and_clear();
    if let Some(why) = not_started.take() {
        bail!("{why}");
    }
    let rate = passed.get() as f64 / elapsed.as_secs_f64().max(1e-9);
    let command = args.command.iter().map(|a| shell_quote(a)).collect::<Vec<_>>().join(" ");
    match result {
        Ok(()) => {
            if args.json || args.html.is_some() {
                let mut doc = json!({
                    "version": 1, "target": target.kind(), "command": args.command, "result": "pass",
                    "cases": passed.get(), "seed": args.seed, "elapsed_s": elapsed.as_secs_f64(),
                    "cases_per_s": rate, "adapter_starts": adapter.borrow().starts(),
                });
                if let Some((_, v)) = target.summary() {
                    doc["summary"] = v;
                }
                if !ignored.borrow().is_empty() {
                    doc["ignored"] = json!(*ignored.borrow());
                }
                if let Some(path) = &args.html {
                    picture::write_page(path, &doc)
                        .with_context(|| format!("--html {}: cannot write it", path.display()))?;
                }
                if args.json {
                    writeln!(out, "{}", serde_json::to_string_pretty(&doc)?)?;
                }
            }
            if !args.json {
                writeln!(
                    out,
                    "thdcheck fuzz {}: {command}\n  {} cases (seed {}) in {:.2} s, {:.0} cases/s: every invariant held ({})",
                    target.kind(),
                    passed.get(),
                    args.seed,
                    elapsed.as_secs_f64(),
                    rate,
                    target.invariants()
                )?;
                if let Some((line, _)) = target.summary() {
                    writeln!(out, "  {line}")?;
                }
                for (class, n) in ignored.borrow().iter() {
                    writeln!(
                        out,
                        "  ignored: {n} case{} failed as `{class}` (--ignore), counted as passing",
                        if *n == 1 { "" } else { "s" }
                    )?;
                }
            }
            Ok(0)
        }
        Err(TestError::Abort(reason)) => anyhow::bail!("fuzzing aborted: {reason}"),
        Err(TestError::Fail(_, minimal)) => {
            // Proptest's shrinking stops where no simpler value of the generator's draws fails
            // (a count modulo the DP size is not monotone in them): a minimization pass over the
            // request itself follows, until no reduction fails the same way (1-minimal) or the
            // shrink budget is spent.
            let budget = u64::from(args.max_shrink_runs) + passed.get();
            let mut minimal = minimal;
            let mut minimized = 0u64;
            let mut one_minimal = !hung.get() && target.minimizes() && given.is_none();
            if one_minimal {
                'fixpoint: loop {
                    for candidate in target.reductions(&minimal) {
                        if executed.get() > budget {
                            one_minimal = false;
                            break 'fixpoint;
                        }
                        crash_history.borrow_mut().clear();
                        let Err(f) = exec(&candidate).or_else(|f| unignored(f).map_or(Ok(()), Err))
                        else {
                            continue;
                        };
                        let same =
                            found.borrow().as_ref().is_some_and(|g| g.signature() == f.signature());
                        if f.kind == "hang" {
                            // Every further run of a hang waits the full timeout.
                            one_minimal = same;
                            if same {
                                *found.borrow_mut() = Some(f);
                                minimal = candidate;
                            }
                            break 'fixpoint;
                        }
                        if same {
                            if f.kind == "crash" {
                                *found_history.borrow_mut() = crash_history.borrow().clone();
                            }
                            *found.borrow_mut() = Some(f);
                            minimal = candidate;
                            minimized += 1;
                            continue 'fixpoint;
                        }
                        other_classes.set(other_classes.get() + 1);
                    }
                    break;
                }
            }
            // Replay the minimal case once more to report it in full. It failed as `found`
            // when shrinking; a replay that passes or fails another way is reported as such.
            let requests: Vec<String> = target
                .payloads(&minimal)
                .iter()
                .enumerate()
                .map(|(i, p)| envelope(i as u64, target.kind(), p).to_string())
                .collect();
            let request = requests.first().cloned().unwrap_or_default();
            let found = found.borrow().clone();
            // A hang is not replayed: it would cost another full timeout. Anything else is
            // replayed in a fresh process, as the user's replay command will run it.
            let replayed = match &found {
                Some(f) if f.kind == "hang" => Err(f.clone()),
                _ => {
                    adapter.borrow_mut().stop();
                    exec(&minimal).or_else(|f| unignored(f).map_or(Ok(()), Err))
                }
            };
            // A crash that the minimal case alone does not reproduce depends on the requests
            // before it: the replay sends every request the crashed process had received.
            let stateful_crash =
                found.as_ref().is_some_and(|g| g.kind == "crash") && replayed.is_ok();
            // An answer written twice is read by the request after it: replayed alone, the
            // case gets its first answer and passes. What the adapter did stands.
            let twice = found.as_ref().is_some_and(two_answers) && replayed.is_ok();
            let history_file = if stateful_crash && !found_history.borrow().is_empty() {
                let path = std::env::temp_dir()
                    .join(format!("thdcheck-replay-{}.jsonl", std::process::id()));
                std::fs::write(&path, found_history.borrow().join("\n") + "\n").ok().map(|()| path)
            } else {
                None
            };
            let differs = match (&replayed, &found) {
                (Err(f), Some(g)) => f.signature() != g.signature(),
                (Ok(()), _) => !stateful_crash && !twice,
                (Err(_), None) => false,
            };
            let failure = match (replayed, &found) {
                (Err(f), _) => f,
                (Ok(()), Some(g)) if stateful_crash || twice => g.clone(),
                (Ok(()), _) => Failure {
                    kind: "flaky",
                    checks: found.as_ref().map(|g| g.checks.clone()).unwrap_or_default(),
                    detail:
                        "the shrunk case passed when replayed: the adapter is not deterministic"
                            .into(),
                    response: None,
                },
            };
            let shrunk_as = found.filter(|_| differs);
            let note = shrunk_as.as_ref().map(|g| {
                let now = if failure.kind == "flaky" {
                    "replayed, it passed".to_owned()
                } else {
                    format!("replayed, it failed as `{}`", failure.signature())
                };
                format!(
                    "while shrinking this case failed as `{}`; {now}: the adapter is not deterministic\n{}",
                    g.signature(),
                    g.detail
                )
            });
            // Every other class of failure: one more pass over fresh cases, unshrunk, so that
            // each distinct failing rule is reported; `--ignore` the first to shrink the next.
            //
            // The scan is part of the shrink budget (`--max-shrink-runs` counts every run after
            // the first failure), and is skipped after a failure that says nothing about the
            // rules: a crash (every run restarts the adapter), a hang (a timeout each), an
            // answer too long or not JSON (every answer likely is).
            let mut also: std::collections::BTreeMap<String, (u64, String)> = Default::default();
            let runs = executed.get();
            let budget_left = u64::from(args.max_shrink_runs)
                .saturating_sub(runs.saturating_sub(passed.get()))
                .min(u64::from(args.cases.min(256)))
                .min(u64::from(args.also_failing));
            let blind = ["crash", "hang", "too-long", "not-json"];
            let scan_runs = if args.first_failure
                || given.is_some()
                || hung.get()
                || blind.contains(&failure.kind)
                || two_answers(&failure)
                || shrunk_as.as_ref().is_some_and(|g| blind.contains(&g.kind))
            {
                0
            } else {
                budget_left
            };
            if scan_runs > 0 {
                let mut scan = TestRunner::new_with_rng(
                    scan_config.clone(),
                    TestRng::from_seed(RngAlgorithm::ChaCha, &{
                        let mut b = seed_bytes;
                        b[8] = 1;
                        b
                    }),
                );
                let strategy = target.strategy();
                let first = failure.signature();
                for _ in 0..scan_runs {
                    let Ok(tree) = proptest::strategy::Strategy::new_tree(&strategy, &mut scan)
                    else {
                        break;
                    };
                    let Err(f) = exec(&proptest::strategy::ValueTree::current(&tree)) else {
                        continue;
                    };
                    let Some(f) = unignored(f) else { continue };
                    if f.kind == "hang" {
                        break;
                    }
                    // Every violated check is a class of its own.
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
                    for (class, detail) in
                        classes.into_iter().filter(|(c, _)| *c != first.to_string())
                    {
                        let e = also.entry(class).or_insert((0, detail));
                        e.0 += 1;
                    }
                }
            }
            let replay = match &history_file {
                Some(path) => format!("{command} < {}", shell_quote(&path.display().to_string())),
                None if requests.len() > 1 => format!(
                    "printf '%s\\n' {} | {command}",
                    requests.iter().map(|r| shell_quote(r)).collect::<Vec<_>>().join(" ")
                ),
                None => format!("echo '{}' | {command}", request.replace('\'', "'\\''")),
            };
            let note = note.or_else(|| {
                twice.then(|| {
                    "replayed alone in a fresh process its one answer passes: a second answer is \
                     read only by the request after it (the replay prints every line the adapter \
                     writes)"
                        .to_owned()
                })
            });
            let note = note.or_else(|| {
                history_file.as_ref().map(|_| {
                    format!(
                        "replayed alone the minimal case does not crash: the adapter crashed after \
                         {} requests, so the replay sends them all, in order",
                        found_history.borrow().len()
                    )
                })
            });
            if args.json || args.html.is_some() {
                let doc = json!({
                    "version": 1, "target": target.kind(), "command": args.command, "result": "fail",
                    "cases": passed.get(), "seed": args.seed, "elapsed_s": elapsed.as_secs_f64(),
                    "runs": runs, "scan_runs": executed.get() - runs,
                    "failure": {
                        "kind": failure.kind, "checks": failure.checks, "detail": failure.detail,
                        "request": serde_json::from_str::<Value>(&request).unwrap_or(Value::Null),
                        "response": failure.response.as_deref().map(clip), "replay": replay,
                    },
                    "other_failures_ignored": other_classes.get(),
                    "one_minimal": (target.minimizes() && given.is_none()).then_some(one_minimal),
                    "reductions": minimized,
                    "also_failing": also.iter().map(|(class, (n, detail))| json!({
                        "class": class, "cases": n, "detail": clip(detail),
                    })).collect::<Vec<_>>(),
                });
                let mut doc = doc;
                if requests.len() > 1 {
                    doc["failure"]["requests"] = requests
                        .iter()
                        .map(|r| serde_json::from_str::<Value>(r).unwrap_or(Value::Null))
                        .collect();
                }
                if let Some(g) = &shrunk_as {
                    doc["failure"]["shrunk_as"] = json!({
                        "kind": g.kind, "checks": g.checks, "detail": g.detail,
                        "response": g.response.as_deref().map(clip),
                    });
                }
                if let Some(path) = &args.html {
                    picture::write_page(path, &doc)
                        .with_context(|| format!("--html {}: cannot write it", path.display()))?;
                }
                if args.json {
                    writeln!(out, "{}", serde_json::to_string_pretty(&doc)?)?;
                }
            }
            if !args.json {
                writeln!(
                    out,
                    "thdcheck fuzz {}: {command}\n  FAILED after {} passing cases (seed {}); {}:",
                    target.kind(),
                    passed.get(),
                    args.seed,
                    if given.is_some() {
                        "the request of --request, judged as given".to_owned()
                    } else if hung.get() {
                        "not shrunk (every run of a hang waits the full timeout)".to_owned()
                    } else {
                        let others = match other_classes.get() {
                            0 => String::new(),
                            n => format!(
                                " ({n} run{} that failed another way counted as passing)",
                                if n == 1 { "" } else { "s" }
                            ),
                        };
                        let minimal = match (target.minimizes(), one_minimal) {
                            (false, _) => String::new(),
                            (true, true) => format!(
                                ", 1-minimal after {minimized} reduction{}",
                                if minimized == 1 { "" } else { "s" }
                            ),
                            (true, false) => format!(
                                ", {minimized} reductions, not 1-minimal: --max-shrink-runs spent"
                            ),
                        };
                        format!(
                            "shrunk to a minimal case in {} runs{minimal}, keeping the failure `{}`{others}",
                            runs,
                            shrunk_as
                                .as_ref()
                                .map_or_else(|| failure.signature(), Failure::signature)
                        )
                    }
                )?;
                writeln!(
                    out,
                    "  {:<14}{}",
                    failure.kind,
                    failure.detail.replace('\n', "\n                ")
                )?;
                if let Some(n) = &note {
                    writeln!(out, "  {:<14}{}", "note", n.replace('\n', "\n                "))?;
                }
                for r in &requests {
                    writeln!(out, "  {:<14}{r}", "request")?;
                }
                if let Some(r) = &failure.response {
                    writeln!(out, "  {:<14}{}", "response", clip(r))?;
                }
                writeln!(out, "  {:<14}{replay}", "replay")?;
                let scanned = executed.get() - runs;
                let scan = if scanned > 0 {
                    format!(
                        "{scanned} runs of fresh cases for other failing classes (within \
                         --max-shrink-runs){}",
                        if also.is_empty() { ": none found" } else { "" }
                    )
                } else if args.first_failure {
                    "0 runs: --first-failure".to_owned()
                } else if args.also_failing == 0 {
                    "0 runs: --also-failing 0".to_owned()
                } else if scan_runs == 0 && budget_left > 0 {
                    format!("0 runs: no scan for other classes after a `{}`", failure.kind)
                } else {
                    "0 runs: --max-shrink-runs spent".to_owned()
                };
                writeln!(out, "  {:<14}{scan}", "scan")?;
                for (class, (n, detail)) in &also {
                    writeln!(
                        out,
                        "  {:<14}`{class}` in {n} of {} more cases (shrink it with --ignore '{}'): {}",
                        "also failing",
                        executed.get() - runs,
                        failure.signature(),
                        clip(detail).lines().next().unwrap_or_default()
                    )?;
                }
            }
            Ok(1)
        }
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

/// Quotes an argument for a POSIX shell when it needs it.
fn shell_quote(arg: &str) -> String {
    let plain = !arg.is_empty()
        && arg.chars().all(|c| c.is_ascii_alphanumeric() || "_-./=:,+@%".contains(c));
    if plain { arg.to_owned() } else { format!("'{}'", arg.replace('\'', "'\\''")) }
}

fn tail(stderr: &str) -> String {
    if stderr.is_empty() {
        return String::new();
    }
    let lines: Vec<&str> = stderr.lines().collect();
    let keep = &lines[lines.len().saturating_sub(6)..];
    format!("; stderr:\n{}", keep.join("\n"))
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

/// The failure of an answer that breaks the protocol.
fn bad_response(bad: BadResponse, line: &str) -> Failure {
    let (kind, detail) = match bad {
        BadResponse::NotJson(d) => ("not-json", format!("the answer is not JSON: {d}")),
        BadResponse::Schema(d) => ("schema", format!("the answer breaks the protocol: {d}")),
        BadResponse::AdapterError(d) => {
            ("adapter-error", format!("the adapter reported an error: {d}"))
        }
        BadResponse::Stale(d) => ("schema", format!("{TWO_ANSWERS}: {d}")),
    };
    Failure { kind, checks: vec![], detail, response: Some(clip(line)) }
}

#[cfg(test)]
mod tests {
    use super::check_ignore;

    #[test]
    fn ignore_names_a_kind_a_rule_or_both() {
        let ok = |v: &str| check_ignore(&[v.to_owned()]);
        for v in
            ["crash", "adapter-error", "cp-loss-finite", "violation dpo-offsets", "batch-readable"]
        {
            assert!(ok(v).is_ok(), "{v}");
        }
        for v in ["crsh", "cp loss", "cp-loss", "violation nope", "nope dpo-offsets", ""] {
            let e = ok(v).unwrap_err().to_string();
            assert!(e.contains(&format!("--ignore {v:?}")) && e.contains("crash"), "{e}");
        }
    }
}
