//! Running a command to completion, bounded in time, and reporting what it did on
//! failure: shared by the test files that run `rwdir` (or this test binary in a child
//! role) as a whole process.

use std::io::{BufRead, BufReader, Read};
use std::process::{Command, ExitStatus, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// A finished run, with what its failure messages show.
///
/// [`Ran`] is the plain kind; a test file that records more about a run (its time, its
/// memory, a listing) has its own type and implements [`Report::report`] for it.
pub trait Report {
    fn exit_status(&self) -> ExitStatus;

    /// The run, for a failure message: the command line, its status, its output.
    fn report(&self) -> String;

    #[track_caller]
    fn expect(&self, code: i32) -> &Self {
        if self.exit_status().code() != Some(code) {
            panic!("expected exit code {code}{}", self.report());
        }
        self
    }

    #[track_caller]
    fn check(&self, cond: bool, what: &str) -> &Self {
        if !cond {
            panic!("{what}{}", self.report());
        }
        self
    }
}

/// A finished run of a command.
#[derive(Debug)]
pub struct Ran {
    pub line: String,
    pub status: ExitStatus,
    pub stdout: String,
    pub stderr: String,
}

impl Report for Ran {
    fn exit_status(&self) -> ExitStatus {
        self.status
    }

    fn report(&self) -> String {
        format!(
            "\n--- command\n{}\n--- status\n{:?}\n--- stdout\n{}\n--- stderr\n{}\n---",
            self.line, self.status, self.stdout, self.stderr
        )
    }
}

/// Reads all of `r` (if any) on a thread; the text arrives on the receiver at EOF.
pub fn drain(r: Option<impl Read + Send + 'static>) -> mpsc::Receiver<String> {
    let (tx, rx) = mpsc::channel();
    if let Some(mut r) = r {
        std::thread::spawn(move || {
            let mut buf = Vec::new();
            let _ = r.read_to_end(&mut buf);
            let _ = tx.send(String::from_utf8_lossy(&buf).into_owned());
        });
    }
    rx
}

/// Reads `r` line by line on a thread; each line arrives on the receiver as it comes.
pub fn lines(r: impl Read + Send + 'static) -> mpsc::Receiver<String> {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(r).lines() {
            let Ok(line) = line else { break };
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    rx
}

/// Runs `cmd` with stdin closed; kills it and fails after `bound`. `line` names the
/// command in failure messages.
pub fn run(mut cmd: Command, line: String, bound: Duration) -> Ran {
    cmd.stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = cmd.spawn().unwrap_or_else(|e| panic!("spawn {line}: {e}"));
    let out = drain(child.stdout.take());
    let err = drain(child.stderr.take());
    let start = Instant::now();
    let status = loop {
        if let Some(st) = child.try_wait().expect("wait") {
            break st;
        }
        if start.elapsed() > bound {
            let _ = child.kill();
            let _ = child.wait();
            panic!("{line}: still running after {bound:?}");
        }
        std::thread::sleep(Duration::from_millis(5));
    };
    Ran {
        line,
        status,
        stdout: out.recv_timeout(bound).unwrap_or_default(),
        stderr: err.recv_timeout(bound).unwrap_or_default(),
    }
}
