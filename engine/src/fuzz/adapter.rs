//! The user's adapter as a child process: one JSON line out, one JSON line back, with a
//! timeout; a crash, a hang or garbage is an outcome, never a panic.
//!
//! The adapter runs in a process group of its own, and the whole group is killed when it hangs,
//! crashes, is restarted, when thdcheck exits, and when thdcheck gets SIGTERM, SIGINT or SIGHUP
//! ([`install_signal_cleanup`]). What leaves the group (a child started in a session of its own,
//! a double-fork daemon) is caught on Linux by making thdcheck a child subreaper
//! ([`become_subreaper`]): orphaned descendants are reparented to thdcheck, which kills them with
//! the adapter. Nothing the adapter spawned outlives the command. A line is read up to a stated
//! maximum (`--max-line-bytes`), never buffered without bound.

use std::io::{BufRead, BufReader, Read, Write};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicI32, Ordering};
use std::sync::mpsc::{Receiver, RecvTimeoutError, channel};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// The process group of the running adapter (0: none), for the signal thread.
static ADAPTER_GROUP: AtomicI32 = AtomicI32::new(0);

/// thdcheck is a child subreaper: the adapter's orphaned descendants become its children.
static SUBREAPER: AtomicBool = AtomicBool::new(false);

/// A signal asked thdcheck to end: no adapter is started any more.
static ENDING: AtomicBool = AtomicBool::new(false);

/// Held while an adapter is spawned and its group recorded, and while the signal thread kills:
/// an adapter is either started before the kill (and killed) or not started at all.
static SPAWNING: Mutex<()> = Mutex::new(());

/// Makes thdcheck a child subreaper (Linux, `PR_SET_CHILD_SUBREAPER`): a descendant of the
/// adapter whose parent exits (a double-fork daemon, or a child started in a session of its own
/// once the adapter is killed) is reparented to thdcheck instead of init, and
/// [`Adapter::stop`], the signal thread and the exit kill it. Elsewhere a descendant that leaves
/// the adapter's process group is out of reach (docs/protocol.md).
pub fn become_subreaper() {
    #[cfg(target_os = "linux")]
    // SAFETY: prctl with PR_SET_CHILD_SUBREAPER takes an integer flag; no memory is passed.
    if unsafe { libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) } == 0 {
        SUBREAPER.store(true, Ordering::SeqCst);
    }
}

/// The children of this process (pid, whether a zombie), from `/proc/*/stat`.
#[cfg(target_os = "linux")]
fn children() -> Vec<(i32, bool)> {
    let me = std::process::id().to_string();
    let Ok(dir) = std::fs::read_dir("/proc") else { return Vec::new() };
    let mut out = Vec::new();
    for entry in dir.flatten() {
        let Some(pid) = entry.file_name().to_str().and_then(|n| n.parse::<i32>().ok()) else {
            continue;
        };
        // `pid (comm) state ppid …`: the command may hold spaces and parentheses.
        let Ok(stat) = std::fs::read_to_string(entry.path().join("stat")) else { continue };
        let Some((_, rest)) = stat.rsplit_once(')') else { continue };
        let mut fields = rest.split_whitespace();
        let (Some(state), Some(ppid)) = (fields.next(), fields.next()) else { continue };
        if ppid == me {
            out.push((pid, state == "Z"));
        }
    }
    out
}

/// Kills every child of thdcheck but `keep` (the adapter's descendants reparented to it as a
/// subreaper), reaping the dead ones, until none is left alive: killing one reparents its own
/// children to thdcheck, so it goes round until the tree is gone (at most 2 s). `keep` (the
/// adapter, just sent SIGKILL and not reaped here) must have died first: the kernel reparents
/// its children when it becomes a zombie, so a scan before that finds none of them and would
/// stop early (seen under load: a new-session child of the adapter outlived SIGINT).
fn kill_orphans(keep: i32) {
    #[cfg(target_os = "linux")]
    {
        if !SUBREAPER.load(Ordering::SeqCst) {
            return;
        }
        let deadline = Instant::now() + Duration::from_secs(2);
        loop {
            let all = children();
            let keep_alive = keep > 0 && all.iter().any(|&(pid, zombie)| pid == keep && !zombie);
            let kids: Vec<(i32, bool)> = all.into_iter().filter(|&(pid, _)| pid != keep).collect();
            for &(pid, zombie) in &kids {
                // SAFETY: signals and reaps a child of this process; no memory is passed.
                unsafe {
                    if zombie {
                        libc::waitpid(pid, std::ptr::null_mut(), libc::WNOHANG);
                    } else {
                        libc::kill(pid, libc::SIGKILL);
                    }
                }
            }
            if (kids.is_empty() && !keep_alive) || Instant::now() > deadline {
                return;
            }
            std::thread::sleep(Duration::from_millis(1));
        }
    }
    #[cfg(not(target_os = "linux"))]
    let _ = keep;
}

/// On SIGTERM, SIGINT or SIGHUP to thdcheck: kills the running adapter's process group and
/// every descendant reparented to thdcheck, then lets the signal do what it would have done
/// (the default action, re-raised). The signals are taken by a thread of their own (`sigwait`),
/// so the cleanup is ordinary code rather than a signal handler's async-signal-safe minimum.
/// Call it before any other thread starts: they inherit the blocked signals (the adapter does
/// not: `Command` clears the signal mask in the child).
pub fn install_signal_cleanup() {
    #[cfg(unix)]
    // SAFETY: sigset_t is plain data initialised by sigemptyset; pthread_sigmask and sigwait
    // only read it.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        for sig in [libc::SIGTERM, libc::SIGINT, libc::SIGHUP] {
            libc::sigaddset(&mut set, sig);
        }
        if libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut()) != 0 {
            return;
        }
        let spawned =
            std::thread::Builder::new().name("thdcheck-signals".into()).spawn(move || {
                let mut sig: libc::c_int = 0;
                while libc::sigwait(&set, &mut sig) != 0 {}
                ENDING.store(true, Ordering::SeqCst);
                let _spawning = SPAWNING.lock();
                let group = ADAPTER_GROUP.load(Ordering::SeqCst);
                if group > 0 {
                    libc::kill(-group, libc::SIGKILL);
                }
                // The adapter itself is left to the main thread's `Child` (not reaped here).
                kill_orphans(group);
                let mut one: libc::sigset_t = std::mem::zeroed();
                libc::sigemptyset(&mut one);
                libc::sigaddset(&mut one, sig);
                libc::signal(sig, libc::SIG_DFL);
                libc::pthread_sigmask(libc::SIG_UNBLOCK, &one, std::ptr::null_mut());
                libc::raise(sig);
                std::process::exit(128 + sig);
            });
        if spawned.is_err() {
            // No thread: the signals keep their default action.
            libc::pthread_sigmask(libc::SIG_UNBLOCK, &set, std::ptr::null_mut());
        }
    }
}

/// Ignores SIGPIPE (`true`) while requests are written to the adapter, so that writing to an
/// adapter that is gone fails with EPIPE (its crash) instead of killing thdcheck; `false`
/// restores the default action (`main` sets it, for `thdcheck check … | head`). The adapter
/// itself starts with the default action: `std::process::Command` resets SIGPIPE in the child.
pub fn ignore_sigpipe(ignore: bool) {
    #[cfg(unix)]
    // SAFETY: SIG_IGN and SIG_DFL are valid actions; no handler runs.
    unsafe {
        libc::signal(libc::SIGPIPE, if ignore { libc::SIG_IGN } else { libc::SIG_DFL });
    }
    #[cfg(not(unix))]
    let _ = ignore;
}

/// What the adapter's stdout gave.
#[derive(Debug)]
enum Out {
    Line(String),
    /// A line longer than the maximum: reading stopped there.
    TooLong(usize),
    /// A line that is not UTF-8: its first invalid byte.
    NotUtf8(usize, String),
}

/// What a request got back.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reply {
    /// A line on stdout.
    Line(String),
    /// Garbage instead of a line: longer than the maximum, or not UTF-8.
    Garbage {
        /// `too-long` or `not-json`.
        kind: &'static str,
        /// What was wrong.
        detail: String,
    },
    /// The process exited (or closed stdout) before answering.
    Crash {
        /// Exit status, as text.
        status: String,
        /// The last lines of its stderr.
        stderr: String,
        /// It never read the request: the request's bytes were still in its stdin pipe (or
        /// could not be written at all). A process that never answered any request and exits so
        /// did not start (an `ImportError`): a setup error, not a case it failed.
        unread: bool,
    },
    /// No answer within the timeout; the process was killed.
    Hang {
        /// The timeout.
        after: Duration,
        /// True when it was the first request after a start (the start-up allowance).
        startup: bool,
        /// The last lines of its stderr.
        stderr: String,
    },
}

/// A running adapter, restarted on demand after a crash or a hang.
///
/// The first request after each start waits up to `startup_timeout` instead of `timeout`: the
/// adapter's start-up (`import torch`, a tokenizer) happens before it reads that request.
pub struct Adapter {
    argv: Vec<String>,
    timeout: Duration,
    startup_timeout: Duration,
    max_line: usize,
    live: Option<Live>,
    /// Processes started so far.
    pub starts: usize,
    /// Answer lines read so far, over every process started.
    pub answered: u64,
    /// The requests the running process has received, in order (at most [`HISTORY_KEEP`]):
    /// what a replay must send to reproduce a failure that depends on earlier requests.
    pub history: Vec<String>,
}

/// Requests kept for a replay.
pub const HISTORY_KEEP: usize = 100_000;

struct Live {
    child: Child,
    stdin: ChildStdin,
    lines: Receiver<Out>,
    stderr: Arc<Mutex<Vec<u8>>>,
    /// No request has been answered (or timed out) yet: the start-up allowance applies.
    fresh: bool,
}

const STDERR_KEEP: usize = 4096;

impl Adapter {
    /// An adapter for `argv` (program and arguments); nothing is started yet. Requests wait
    /// `timeout`, the first one after each (re)start `startup_timeout`.
    pub fn new(
        argv: Vec<String>,
        timeout: Duration,
        startup_timeout: Duration,
        max_line: usize,
    ) -> Self {
        Self {
            argv,
            timeout,
            startup_timeout,
            max_line,
            live: None,
            starts: 0,
            answered: 0,
            history: Vec::new(),
        }
    }

    /// Starts the process if it is not running.
    ///
    /// # Errors
    /// The OS error if the program cannot be started at all (not found, not executable).
    pub fn ensure_started(&mut self) -> std::io::Result<()> {
        if self.live.is_some() {
            return Ok(());
        }
        let (program, args) = self.argv.split_first().ok_or_else(|| {
            std::io::Error::new(std::io::ErrorKind::InvalidInput, "no adapter command given")
        })?;
        let mut cmd = Command::new(program);
        cmd.args(args).stdin(Stdio::piped()).stdout(Stdio::piped()).stderr(Stdio::piped());
        #[cfg(unix)]
        {
            // A group of its own: killing it kills whatever the adapter spawned.
            use std::os::unix::process::CommandExt;
            cmd.process_group(0);
        }
        let mut child = {
            let _spawning = SPAWNING.lock();
            if ENDING.load(Ordering::SeqCst) {
                return Err(std::io::Error::other("thdcheck is ending (a signal)"));
            }
            let child = cmd.spawn()?;
            ADAPTER_GROUP.store(i32::try_from(child.id()).unwrap_or(0), Ordering::SeqCst);
            child
        };
        self.history.clear();
        let stdin = child.stdin.take().ok_or_else(|| std::io::Error::other("no stdin pipe"))?;
        let stdout = child.stdout.take().ok_or_else(|| std::io::Error::other("no stdout pipe"))?;
        let mut err = child.stderr.take().ok_or_else(|| std::io::Error::other("no stderr pipe"))?;
        let (tx, lines) = channel();
        let max_line = self.max_line;
        std::thread::spawn(move || {
            let mut reader = BufReader::new(stdout);
            loop {
                // At most max_line + 1 bytes: one more than allowed says the line is too long.
                let mut buf = Vec::new();
                let limit = u64::try_from(max_line).unwrap_or(u64::MAX).saturating_add(1);
                match (&mut reader).take(limit).read_until(b'\n', &mut buf) {
                    Ok(0) | Err(_) => break,
                    Ok(_) => {}
                }
                let ended = buf.last() == Some(&b'\n');
                if ended {
                    buf.pop();
                    if buf.last() == Some(&b'\r') {
                        buf.pop();
                    }
                }
                let out = if !ended && buf.len() > max_line {
                    Out::TooLong(max_line)
                } else {
                    match String::from_utf8(buf) {
                        Ok(l) => Out::Line(l),
                        Err(e) => {
                            let at = e.utf8_error().valid_up_to();
                            let shown: String =
                                String::from_utf8_lossy(e.as_bytes()).chars().take(200).collect();
                            Out::NotUtf8(at, shown)
                        }
                    }
                };
                let stop = matches!(out, Out::TooLong(_));
                if tx.send(out).is_err() || stop {
                    break;
                }
            }
        });
        let stderr = Arc::new(Mutex::new(Vec::new()));
        let sink = Arc::clone(&stderr);
        std::thread::spawn(move || {
            let mut buf = [0u8; 4096];
            while let Ok(n) = err.read(&mut buf) {
                if n == 0 {
                    break;
                }
                if let Ok(mut s) = sink.lock() {
                    s.extend_from_slice(&buf[..n]);
                    let excess = s.len().saturating_sub(STDERR_KEEP);
                    s.drain(..excess);
                }
            }
        });
        self.starts += 1;
        self.live = Some(Live { child, stdin, lines, stderr, fresh: true });
        Ok(())
    }

    /// Sends one request line and waits for the answer.
    ///
    /// # Errors
    /// Only if the process cannot be (re)started.
    pub fn request(&mut self, line: &str) -> std::io::Result<Reply> {
        self.ensure_started()?;
        let Some(live) = self.live.as_mut() else {
            return Err(std::io::Error::other("adapter not running"));
        };
        let sent = live
            .stdin
            .write_all(line.as_bytes())
            .and_then(|()| live.stdin.write_all(b"\n"))
            .and_then(|()| live.stdin.flush());
        if sent.is_err() {
            return Ok(self.crashed(true));
        }
        if self.history.len() < HISTORY_KEEP {
            self.history.push(line.to_owned());
        }
        let Some(live) = self.live.as_mut() else {
            return Err(std::io::Error::other("adapter not running"));
        };
        let startup = std::mem::replace(&mut live.fresh, false);
        let after = if startup { self.startup_timeout } else { self.timeout };
        let got = wait_line(live, after);
        if got.is_ok() {
            self.answered += 1;
        }
        match got {
            Ok(Out::Line(l)) => Ok(Reply::Line(l)),
            Ok(Out::TooLong(max)) => {
                self.stop();
                Ok(Reply::Garbage {
                    kind: "too-long",
                    detail: format!(
                        "an answer line longer than {max} bytes (--max-line-bytes); the adapter \
                         was killed"
                    ),
                })
            }
            Ok(Out::NotUtf8(at, shown)) => Ok(Reply::Garbage {
                kind: "not-json",
                detail: format!("an answer line that is not UTF-8 (byte {at}): {shown}"),
            }),
            Err(RecvTimeoutError::Disconnected) => Ok(self.crashed(false)),
            Err(RecvTimeoutError::Timeout) => {
                let stderr = self.stop();
                Ok(Reply::Hang { after, startup, stderr })
            }
        }
    }

    /// The process is gone (or closed stdout) without an answer: its exit status and stderr,
    /// and whether it had read the request (`unwritten`: the request could not be written).
    fn crashed(&mut self, unwritten: bool) -> Reply {
        let unread =
            unwritten || self.live.as_ref().is_some_and(|live| pending_bytes(&live.stdin) > 0);
        let status = match self.live.as_mut() {
            Some(live) => {
                // Give it a moment to exit; then kill it.
                let mut status = None;
                for _ in 0..50 {
                    if let Ok(Some(s)) = live.child.try_wait() {
                        status = Some(s);
                        break;
                    }
                    std::thread::sleep(Duration::from_millis(10));
                }
                status.map_or_else(|| "closed stdout".to_owned(), |s| s.to_string())
            }
            None => "not running".to_owned(),
        };
        let stderr = self.stop();
        Reply::Crash { status, stderr, unread }
    }

    /// Kills the process and its group (if running) and returns the tail of its stderr.
    pub fn stop(&mut self) -> String {
        let Some(mut live) = self.live.take() else {
            return String::new();
        };
        #[cfg(unix)]
        if let Ok(pid) = i32::try_from(live.child.id()) {
            // The group: whatever the adapter spawned goes with it.
            // SAFETY: kill with a negative pid signals that process group; no memory is touched.
            unsafe {
                libc::kill(-pid, libc::SIGKILL);
            }
            let _ = ADAPTER_GROUP.compare_exchange(pid, 0, Ordering::SeqCst, Ordering::SeqCst);
        }
        let _ = live.child.kill();
        let _ = live.child.wait();
        // What left the group and was orphaned (reparented to thdcheck, a subreaper).
        kill_orphans(0);
        // The stderr thread ends at EOF; give it a moment to drain.
        std::thread::sleep(Duration::from_millis(5));
        let tail = live
            .stderr
            .lock()
            .map(|s| String::from_utf8_lossy(&s).into_owned())
            .unwrap_or_default();
        tail.trim_end().to_owned()
    }
}

/// Bytes written to the adapter's stdin that it has not read (`FIONREAD` on the pipe: Linux
/// answers it on either end); 0 where it cannot be asked.
fn pending_bytes(stdin: &ChildStdin) -> usize {
    #[cfg(target_os = "linux")]
    {
        use std::os::fd::AsRawFd;
        let mut n: libc::c_int = 0;
        // SAFETY: FIONREAD writes one c_int through the pointer, which points at `n`.
        if unsafe { libc::ioctl(stdin.as_raw_fd(), libc::FIONREAD, &mut n) } == 0 {
            return usize::try_from(n).unwrap_or(0);
        }
        0
    }
    #[cfg(not(target_os = "linux"))]
    {
        let _ = stdin;
        0
    }
}

/// How often a request that waits for its line checks that the adapter is still running.
const EXIT_POLL: Duration = Duration::from_millis(20);

/// What a line it wrote before exiting may take to reach the reader thread, once the adapter
/// has exited (the line is in the pipe already: this is scheduling, not the adapter's speed).
const EXIT_GRACE: Duration = Duration::from_millis(500);

/// Waits up to `after` for the adapter's next line. An adapter that exits without one is a
/// crash even while something else (a child it forked) keeps its stdout open, which would
/// otherwise read as a hang: the wait looks at the process itself every [`EXIT_POLL`].
fn wait_line(live: &mut Live, after: Duration) -> Result<Out, RecvTimeoutError> {
    let deadline = Instant::now() + after;
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(RecvTimeoutError::Timeout);
        }
        match live.lines.recv_timeout(left.min(EXIT_POLL)) {
            Err(RecvTimeoutError::Timeout) => {}
            other => return other,
        }
        if let Ok(Some(_)) = live.child.try_wait() {
            return live
                .lines
                .recv_timeout(EXIT_GRACE.min(left))
                .map_err(|_| RecvTimeoutError::Disconnected);
        }
    }
}

impl Drop for Adapter {
    fn drop(&mut self) {
        self.stop();
    }
}
