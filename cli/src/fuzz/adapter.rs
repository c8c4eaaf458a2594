//! The user's adapter as a child process: one JSON line out, one JSON line back, with a
//! timeout; a crash, a hang or garbage is an outcome, never a panic.

use std::io::{BufRead, BufReader, Read, Write};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc::{Receiver, RecvTimeoutError, channel};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// What a request got back.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reply {
    /// A line on stdout.
    Line(String),
    /// The process exited (or closed stdout) before answering.
    Crash {
        /// Exit status, as text.
        status: String,
        /// The last lines of its stderr.
        stderr: String,
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
    live: Option<Live>,
    /// Processes started so far.
    pub starts: usize,
}

struct Live {
    child: Child,
    stdin: ChildStdin,
    lines: Receiver<String>,
    stderr: Arc<Mutex<Vec<u8>>>,
    /// No request has been answered (or timed out) yet: the start-up allowance applies.
    fresh: bool,
}

const STDERR_KEEP: usize = 4096;

impl Adapter {
    /// An adapter for `argv` (program and arguments); nothing is started yet. Requests wait
    /// `timeout`, the first one after each (re)start `startup_timeout`.
    pub fn new(argv: Vec<String>, timeout: Duration, startup_timeout: Duration) -> Self {
        Self { argv, timeout, startup_timeout, live: None, starts: 0 }
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
        let mut child = Command::new(program)
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()?;
        let stdin = child.stdin.take().ok_or_else(|| std::io::Error::other("no stdin pipe"))?;
        let stdout = child.stdout.take().ok_or_else(|| std::io::Error::other("no stdout pipe"))?;
        let mut err = child.stderr.take().ok_or_else(|| std::io::Error::other("no stderr pipe"))?;
        let (tx, lines) = channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                match line {
                    Ok(l) => {
                        if tx.send(l).is_err() {
                            break;
                        }
                    }
                    Err(_) => break,
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
            return Ok(self.crashed());
        }
        let startup = std::mem::replace(&mut live.fresh, false);
        let after = if startup { self.startup_timeout } else { self.timeout };
        match live.lines.recv_timeout(after) {
            Ok(l) => Ok(Reply::Line(l)),
            Err(RecvTimeoutError::Disconnected) => Ok(self.crashed()),
            Err(RecvTimeoutError::Timeout) => {
                let stderr = self.stop();
                Ok(Reply::Hang { after, startup, stderr })
            }
        }
    }

    fn crashed(&mut self) -> Reply {
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
        Reply::Crash { status, stderr }
    }

    /// Kills the process (if running) and returns the tail of its stderr.
    pub fn stop(&mut self) -> String {
        let Some(mut live) = self.live.take() else {
            return String::new();
        };
        let _ = live.child.kill();
        let _ = live.child.wait();
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

impl Drop for Adapter {
    fn drop(&mut self) {
        self.stop();
    }
}
