//! The worker processes of the multi-process benchmarks (`processes`, `async_api`): the
//! benchmark binary re-executed with [`ROLE_ENV`] set, driven line by line over its
//! stdin and answering on its stdout.

use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError};
use std::time::{Duration, Instant};

/// Set in a worker: the role it plays.
pub const ROLE_ENV: &str = "RWDIR_BENCH_ROLE";
/// Set in a worker: which lock (or which API) it uses, as the benchmark names it.
pub const KIND_ENV: &str = "RWDIR_BENCH_IMPL";
/// Set in a worker: the lock directory.
pub const DIR_ENV: &str = "RWDIR_BENCH_DIR";
/// Set in a worker: its numeric arguments, comma-separated.
pub const ARG_ENV: &str = "RWDIR_BENCH_ARG";

/// How long the coordinator waits for any answer that should come "soon".
pub const LONG: Duration = Duration::from_secs(120);

/// An environment variable the coordinator set for this worker.
pub fn env(name: &str) -> String {
    std::env::var(name).unwrap_or_else(|_| panic!("{name} unset"))
}

/// The worker's `i`-th numeric argument.
pub fn arg<T: std::str::FromStr>(i: usize) -> T {
    env(ARG_ENV)
        .split(',')
        .nth(i)
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("{ARG_ENV}[{i}]"))
}

/// The worker's view of the coordinator: commands in, answers out.
pub struct Pipe {
    lines: Receiver<String>,
}

impl Pipe {
    pub fn new() -> Pipe {
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            for line in std::io::stdin().lock().lines() {
                let Ok(line) = line else { break };
                if tx.send(line).is_err() {
                    break;
                }
            }
            // EOF: the coordinator is done with us (the channel disconnects).
        });
        Pipe { lines: rx }
    }

    /// The next command; `None` at EOF.
    pub fn next(&self) -> Option<String> {
        self.lines.recv().ok()
    }

    /// A command if one has come, without waiting.
    pub fn try_next(&self) -> Option<String> {
        self.lines.try_recv().ok()
    }

    /// Answers one line.
    pub fn say(&self, line: &str) {
        let mut out = std::io::stdout().lock();
        let _ = writeln!(out, "{line}");
        let _ = out.flush();
    }
}

/// A worker process, seen from the coordinator.
pub struct Worker {
    child: Child,
    stdin: Option<ChildStdin>,
    lines: Receiver<String>,
    role: String,
}

impl Worker {
    /// Starts this binary again as a worker playing `role` with lock `kind` on `dir`.
    pub fn spawn(role: &str, kind: &str, dir: &Path, args: &[u64]) -> Worker {
        let exe = std::env::current_exe().expect("current_exe");
        let mut child = Command::new(exe)
            .env(ROLE_ENV, role)
            .env(KIND_ENV, kind)
            .env(DIR_ENV, dir)
            .env(
                ARG_ENV,
                args.iter()
                    .map(u64::to_string)
                    .collect::<Vec<_>>()
                    .join(","),
            )
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("spawn worker");
        let stdout = child.stdout.take().expect("stdout");
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        Worker {
            stdin: child.stdin.take(),
            child,
            lines: rx,
            role: role.to_string(),
        }
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Kills the worker (SIGKILL), e.g. when the coordinator is panicking.
    pub fn kill(&mut self) {
        let _ = self.child.kill();
    }

    /// Closes its stdin: EOF ends a worker that waits for commands.
    pub fn close(&mut self) {
        drop(self.stdin.take());
    }

    /// Sends one command line.
    pub fn send(&mut self, line: &str) {
        let stdin = self.stdin.as_mut().expect("stdin open");
        writeln!(stdin, "{line}").expect("write to worker");
        stdin.flush().expect("flush to worker");
    }

    /// The next answer, or `None` after `d`; panics if the worker died.
    pub fn recv_timeout(&self, d: Duration) -> Option<String> {
        match self.lines.recv_timeout(d) {
            Ok(l) => Some(l),
            Err(RecvTimeoutError::Timeout) => None,
            Err(RecvTimeoutError::Disconnected) => {
                panic!("worker {} ({}) died", self.role, self.child.id())
            }
        }
    }

    /// The next answer; panics if none comes within [`LONG`].
    pub fn recv(&self) -> String {
        self.recv_timeout(LONG)
            .unwrap_or_else(|| panic!("worker {} ({}) silent", self.role, self.child.id()))
    }

    /// The next answer, which must start with `word`; returns its numeric fields.
    pub fn expect(&self, word: &str) -> Vec<u64> {
        let l = self.recv();
        let mut it = l.split_whitespace();
        assert_eq!(it.next(), Some(word), "worker {}: {l:?}", self.role);
        it.map(|x| x.parse().expect("number")).collect()
    }
}

impl Drop for Worker {
    fn drop(&mut self) {
        // EOF on stdin ends a worker that waits for commands.
        drop(self.stdin.take());
        let until = Instant::now() + Duration::from_secs(5);
        while Instant::now() < until {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(2));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
