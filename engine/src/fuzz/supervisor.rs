//! Adapter supervision: a case's requests sent to the adapter (the user's subprocess, or a
//! function in this process), and each reply turned into an answer or a failure: the request ids,
//! the bound an answer's size has before anything decodes it, a crash (with the requests the
//! process had received), a hang, garbage, and an adapter that exited before reading anything
//! (a setup error, not a failed check).

use serde_json::Value;

use super::adapter::{Adapter, Reply};
use super::{Failure, Target, bad_response};
use crate::protocol::envelope;

/// Where the requests go: the adapter subprocess (`thdcheck fuzz -- CMD`), or a function in this
/// process (the Python package's `fuzz_collator(fn)`), which answers each request line with a
/// response line, exactly as an adapter would.
pub(super) enum Transport<'a> {
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

/// The adapter under supervision, over the whole run: every phase (the search, shrinking, the
/// minimizer, the replay, the scan) runs its cases through it.
pub(super) struct Supervisor<'a> {
    transport: Transport<'a>,
    /// The adapter's command line, for the message of an adapter that did not start.
    command: String,
    /// The next request's id: one count over the whole run.
    next_id: u64,
    /// Cases run so far, in every phase.
    pub(super) executed: u64,
    /// The requests the adapter had received when it crashed during the latest case (since its
    /// start): a crash that depends on earlier requests is replayed with all of them.
    pub(super) crash_history: Vec<String>,
    /// Why the adapter did not start: it exited before reading its first request (an
    /// `ImportError`). A setup error (exit 2), not a failed check; no case runs after it.
    pub(super) not_started: Option<String>,
}

impl<'a> Supervisor<'a> {
    /// Supervises `transport`, the adapter `command` runs.
    pub(super) fn new(transport: Transport<'a>, command: &[String]) -> Self {
        Self {
            transport,
            command: command.join(" "),
            next_id: 0,
            executed: 0,
            crash_history: Vec::new(),
            not_started: None,
        }
    }

    /// How many times the adapter process was started (1 in process).
    pub(super) fn starts(&self) -> usize {
        self.transport.starts()
    }

    /// Stops the adapter process: the next request starts a fresh one.
    pub(super) fn stop(&mut self) {
        self.transport.stop();
    }

    /// Runs one case: `target` sends its requests (the n-th send the n-th payload, cycling) and
    /// judges the answers. Any failure of the adapter's is the case's.
    pub(super) fn run_case<T: Target>(
        &mut self,
        target: &T,
        case: &T::Case,
    ) -> Result<(), Failure> {
        self.executed += 1;
        self.crash_history.clear();
        let payloads = target.payloads(case);
        let mut sent = 0usize;
        let mut send = || -> Result<String, Failure> {
            let payload = payloads.get(sent % payloads.len().max(1)).unwrap_or(&Value::Null);
            sent += 1;
            self.send(target.kind(), payload)
        };
        target.judge(case, &mut send)
    }

    /// Sends one request; its answer as `"id version\nline"`, or the failure its reply is.
    fn send(&mut self, kind: &'static str, payload: &Value) -> Result<String, Failure> {
        let id = self.next_id;
        self.next_id += 1;
        let request = envelope(id, kind, payload).to_string();
        let reply = self.transport.request(&request).map_err(|e| Failure {
            kind: "crash",
            checks: vec![],
            detail: format!("cannot restart the adapter: {e}"),
            response: None,
        })?;
        match reply {
            Reply::Line(mut l) => {
                // What decoding the answer would cost is bounded by its request, before
                // anything decodes it (--max-line-bytes alone bounds only its length).
                let limit = crate::protocol::answer_values_limit(&request);
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
                if unread && !self.transport.ever_answered() {
                    self.not_started = Some(format!(
                        "the adapter `{}` exited ({status}) before reading its first request: \
                         it did not start (a setup error; no case was judged){}",
                        self.command,
                        tail(&stderr)
                    ));
                }
                self.crash_history = self.transport.history();
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
    }
}

/// The last lines of the adapter's stderr, for a failure's detail.
fn tail(stderr: &str) -> String {
    if stderr.is_empty() {
        return String::new();
    }
    let lines: Vec<&str> = stderr.lines().collect();
    let keep = &lines[lines.len().saturating_sub(6)..];
    format!("; stderr:\n{}", keep.join("\n"))
}
