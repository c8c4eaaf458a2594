//! The replay: the minimal case run once more, in a fresh adapter process, as the user's replay
//! command will run it, to report it in full; and that command. A replay that passes or fails
//! another way than the case did while shrinking says the adapter is not deterministic, unless
//! the failure depends on requests before it (a crash after several requests, an answer written
//! twice), which the replay then states.

use std::path::{Path, PathBuf};

use super::runner::Run;
use super::{Failure, Target, two_answers};
use crate::protocol::envelope;

/// The minimal case as replayed.
pub(super) struct Replayed {
    /// Its requests, ids from 0, as the replay command sends them.
    pub(super) requests: Vec<String>,
    /// The failure reported: the replay's, or the one found while shrinking when the replay
    /// alone cannot show it.
    pub(super) failure: Failure,
    /// The failure found while shrinking, when the replay failed otherwise (not deterministic).
    pub(super) shrunk_as: Option<Failure>,
    /// What the report says about the replay, if anything.
    pub(super) note: Option<String>,
    /// Every request the crashed process had received, written for the replay command.
    pub(super) history_file: Option<PathBuf>,
}

/// Replays `minimal`, the case that failed as `run.found`. A hang is not replayed: it would cost
/// another full timeout. Anything else is replayed in a fresh process.
pub(super) fn replay<T: Target>(run: &mut Run<'_, '_, T>, minimal: &T::Case) -> Replayed {
    let target = run.target;
    let requests: Vec<String> = target
        .payloads(minimal)
        .iter()
        .enumerate()
        .map(|(i, p)| envelope(i as u64, target.kind(), p).to_string())
        .collect();
    let found = run.found.clone();
    let replayed = match &found {
        Some(f) if f.kind == "hang" => Err(f.clone()),
        _ => {
            run.adapter.stop();
            run.judge(minimal)
        }
    };
    // A crash that the minimal case alone does not reproduce depends on the requests before
    // it: the replay sends every request the crashed process had received.
    let stateful_crash = found.as_ref().is_some_and(|g| g.kind == "crash") && replayed.is_ok();
    // An answer written twice is read by the request after it: replayed alone, the case gets
    // its first answer and passes. What the adapter did stands.
    let twice = found.as_ref().is_some_and(two_answers) && replayed.is_ok();
    let history_file = if stateful_crash && !run.found_history.is_empty() {
        // One file per crash replayed in this process (a run may report several).
        static WRITTEN: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
        let n = WRITTEN.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let suffix = if n == 0 { String::new() } else { format!("-{n}") };
        let path = std::env::temp_dir()
            .join(format!("thdcheck-replay-{}{suffix}.jsonl", std::process::id()));
        std::fs::write(&path, run.found_history.join("\n") + "\n").ok().map(|()| path)
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
            detail: "the shrunk case passed when replayed: the adapter is not deterministic".into(),
            response: None,
        },
    };
    let shrunk_as = found.filter(|_| differs);
    let note =
        note(&failure, shrunk_as.as_ref(), twice, history_file.is_some(), &run.found_history);
    Replayed { requests, failure, shrunk_as, note, history_file }
}

/// The report's note on the replay: a failure that changed (the adapter is not
/// deterministic), an answer written twice, or a crash replayed with the requests before it.
fn note(
    failure: &Failure,
    shrunk_as: Option<&Failure>,
    twice: bool,
    history_file: bool,
    history: &[String],
) -> Option<String> {
    let changed = shrunk_as.map(|g| {
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
    changed
        .or_else(|| {
            twice.then(|| {
                "replayed alone in a fresh process its one answer passes: a second answer is \
                 read only by the request after it (the replay prints every line the adapter \
                 writes)"
                    .to_owned()
            })
        })
        .or_else(|| {
            history_file.then(|| {
                format!(
                    "replayed alone the minimal case does not crash: the adapter crashed after \
                     {} requests, so the replay sends them all, in order",
                    history.len()
                )
            })
        })
}

/// The shell command that replays the case: its requests piped to the adapter's `command`
/// (quoted), or the file of every request a crashed process had received.
pub(super) fn command_line(
    command: &str,
    requests: &[String],
    history_file: Option<&Path>,
) -> String {
    match history_file {
        Some(path) => format!("{command} < {}", shell_quote(&path.display().to_string())),
        None if requests.len() > 1 => format!(
            "printf '%s\\n' {} | {command}",
            requests.iter().map(|r| shell_quote(r)).collect::<Vec<_>>().join(" ")
        ),
        None => format!(
            "echo '{}' | {command}",
            requests.first().map(String::as_str).unwrap_or_default().replace('\'', "'\\''")
        ),
    }
}

/// The adapter's command line as a shell reads it.
pub(super) fn quoted(command: &[String]) -> String {
    command.iter().map(|a| shell_quote(a)).collect::<Vec<_>>().join(" ")
}

/// Quotes an argument for a POSIX shell when it needs it.
fn shell_quote(arg: &str) -> String {
    let plain = !arg.is_empty()
        && arg.chars().all(|c| c.is_ascii_alphanumeric() || "_-./=:,+@%".contains(c));
    if plain { arg.to_owned() } else { format!("'{}'", arg.replace('\'', "'\\''")) }
}
