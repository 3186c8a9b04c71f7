//! Shared harness of the integration tests: child processes driven over a pipe, an
//! event log shared by processes, polling with bounded retries, and listings of the
//! state directory for failure messages.
//!
//! Children are the test binary itself, re-run with `RWDIR_TEST_ROLE` set: every test
//! file has a `#[test] fn child_entry()` that calls [`child_entry`], which does nothing
//! unless that variable is set. A child reads commands from stdin, one per line
//! (`read`, `write`, `try_write`, `write_for 300`, `release`, `downgrade`, `churn` ...),
//! answers each with one line starting with `@@ ` on stdout, and releases what it holds
//! when stdin closes. Readiness is always a reply or a file, never a sleep.

#![allow(dead_code, clippy::disallowed_methods)]

use std::collections::VecDeque;
use std::fmt::Write as _;
use std::fs;
use std::io::{BufRead, Write};
use std::os::unix::fs::{FileTypeExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use rwdir::{DirLock, Error, ReadGuard, WriteGuard};

pub mod run;
pub mod tasks;

/// The bound for anything that should happen "soon": generous, because CI machines
/// are small and busy. Only a failing test ever waits this long.
pub const LONG: Duration = Duration::from_secs(30);

/// Chooses the child's role; unset in the test process itself.
pub const ROLE_ENV: &str = "RWDIR_TEST_ROLE";
const DIR_ENV: &str = "RWDIR_TEST_DIR";
const LEASE_ENV: &str = "RWDIR_TEST_LEASE_MS";
const POLL_ENV: &str = "RWDIR_TEST_POLL_MS";
const STATE_ENV: &str = "RWDIR_TEST_STATE_DIR";
const LOG_ENV: &str = "RWDIR_TEST_LOG";
const NAME_ENV: &str = "RWDIR_TEST_NAME";
/// Prefix of a child's answers on stdout (the test harness prints its own lines too).
const REPLY: &str = "@@ ";

// ---------------------------------------------------------------------------------
// Locks, directories, listings

/// A fresh temporary directory to lock.
pub fn tempdir() -> tempfile::TempDir {
    tempfile::Builder::new()
        .prefix("rwdir-test-")
        .tempdir()
        .expect("create temporary directory")
}

/// A lock with fast polling, as the tests' own process uses it.
pub fn lock(dir: &Path) -> DirLock {
    DirLock::builder(dir)
        .poll_interval(Duration::from_millis(1), Duration::from_millis(20))
        .build()
        .expect("build lock")
}

/// A lock with fast polling and the given lease.
pub fn lock_with_lease(dir: &Path, lease: Duration) -> DirLock {
    DirLock::builder(dir)
        .lease(lease)
        .poll_interval(Duration::from_millis(1), Duration::from_millis(20))
        .build()
        .expect("build lock")
}

/// Nanoseconds since the epoch, now.
pub fn now_ns() -> u64 {
    u64::try_from(
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .expect("time")
            .as_nanos(),
    )
    .expect("ns")
}

/// `DIR/.rwdir`.
pub fn state(dir: &Path) -> PathBuf {
    dir.join(".rwdir")
}

/// The sorted names in the state directory (empty if it does not exist), without the
/// readers' files kept between reads by live processes ([`kept_by_a_live_process`]).
pub fn names(state_dir: &Path) -> Vec<String> {
    let mut v = all_names(state_dir);
    v.retain(|n| !kept_by_a_live_process(state_dir, n));
    v
}

/// The sorted names in the state directory (empty if it does not exist), all of them.
pub fn all_names(state_dir: &Path) -> Vec<String> {
    let Ok(rd) = fs::read_dir(state_dir) else {
        return Vec::new();
    };
    let mut v: Vec<String> = rd
        .map(|e| {
            e.expect("read state directory entry")
                .file_name()
                .to_string_lossy()
                .into_owned()
        })
        .collect();
    v.sort();
    v
}

/// Whether `name` in the state directory is a reader's file kept between reads
/// (docs/protocol.md §2.1.1) by a process that is alive: a `.tmp-` regular file holding
/// a reader's record whose pid exists. It goes when its `DirLock` is dropped, and is no
/// lock: tests that look for what is left behind pass over it.
pub fn kept_by_a_live_process(state_dir: &Path, name: &str) -> bool {
    if !name.starts_with(".tmp-") {
        return false;
    }
    let path = state_dir.join(name);
    // Never open what is not a regular file (a FIFO would block).
    if !fs::symlink_metadata(&path).is_ok_and(|m| m.file_type().is_file()) {
        return false;
    }
    let Ok(text) = fs::read_to_string(&path) else {
        return false;
    };
    let field = |k: &str| {
        text.lines()
            .find_map(|l| l.strip_prefix(k)?.strip_prefix(' ').map(str::to_string))
    };
    field("kind").as_deref() == Some("read")
        && field("pid").is_some_and(|pid| Path::new("/proc").join(pid).exists())
}

/// The names in the state directory that are not fencing tokens.
pub fn non_token_names(state_dir: &Path) -> Vec<String> {
    names(state_dir)
        .into_iter()
        .filter(|n| !n.starts_with(".token-"))
        .collect()
}

/// Asserts that the state directory holds exactly one file, a fencing token (or
/// nothing, if no writer ever got that far), and returns the token.
pub fn assert_only_token(dir: &Path) -> Option<u64> {
    let st = state(dir);
    let names = names(&st);
    let tokens: Vec<&String> = names.iter().filter(|n| n.starts_with(".token-")).collect();
    assert!(
        tokens.len() == names.len() && tokens.len() <= 1,
        "expected only a token file in {}:\n{}",
        st.display(),
        dump(&st)
    );
    tokens.first().map(|t| {
        t.trim_start_matches(".token-")
            .parse()
            .expect("token number")
    })
}

/// A listing of a state directory for failure messages: type, size, age, and the
/// owner's pid and kind when the file holds a record.
pub fn dump(state_dir: &Path) -> String {
    let mut out = String::new();
    let Ok(rd) = fs::read_dir(state_dir) else {
        return format!("  ({} does not exist)\n", state_dir.display());
    };
    let mut entries: Vec<_> = rd.filter_map(|e| e.ok()).collect();
    entries.sort_by_key(|e| e.file_name());
    for e in entries {
        let path = e.path();
        let Ok(meta) = fs::symlink_metadata(&path) else {
            continue;
        };
        let ft = meta.file_type();
        let kind = if ft.is_symlink() {
            "symlink"
        } else if ft.is_dir() {
            "dir"
        } else if ft.is_fifo() {
            "fifo"
        } else if ft.is_file() {
            "file"
        } else {
            "other"
        };
        let age = SystemTime::now()
            .duration_since(meta.modified().unwrap_or(UNIX_EPOCH))
            .unwrap_or_default();
        let _ = write!(
            out,
            "  {:<60} {kind:<7} {:>9} B {:>7.2} s old",
            e.file_name().to_string_lossy(),
            meta.len(),
            age.as_secs_f64()
        );
        if ft.is_file() && meta.len() <= 4096 {
            let text = fs::read_to_string(&path).unwrap_or_default();
            let field = |k: &str| {
                text.lines()
                    .find_map(|l| l.strip_prefix(k)?.strip_prefix(' ').map(str::to_string))
                    .unwrap_or_default()
            };
            let _ = write!(out, "  kind {} pid {}", field("kind"), field("pid"));
        }
        out.push('\n');
    }
    if out.is_empty() {
        out.push_str("  (empty)\n");
    }
    out
}

/// Polls `cond` every few milliseconds until it holds; panics after [`LONG`] with a
/// listing of `dir`'s state directory.
pub fn wait_until(what: &str, dir: &Path, mut cond: impl FnMut() -> bool) {
    let start = Instant::now();
    while !cond() {
        if start.elapsed() > LONG {
            panic!(
                "timed out after {:?} waiting until {what}; {}:\n{}",
                LONG,
                state(dir).display(),
                dump(&state(dir))
            );
        }
        std::thread::sleep(Duration::from_millis(2));
    }
}

/// The pids of the queued writers, in queue order, as `status` shows them.
/// How many files made with `O_TMPFILE` in the state directory process `pid` holds open
/// (their descriptors read as `#INODE (deleted)`, even once linked): a waiter's own lock
/// files (a writer's queue file), and the files it makes just before it sleeps, for its
/// wake-up to give names. Counting the latter tells that the waiter has looked and is
/// about to sleep or sleeping.
#[allow(dead_code)]
pub fn prepared_files(pid: u32, dir: &Path) -> usize {
    let sd = state(dir);
    let Ok(fds) = fs::read_dir(format!("/proc/{pid}/fd")) else {
        return 0;
    };
    fds.flatten()
        .filter_map(|e| fs::read_link(e.path()).ok())
        .filter(|t| t.starts_with(&sd) && t.to_string_lossy().ends_with(" (deleted)"))
        .count()
}

pub fn pending_pids(lock: &DirLock) -> Vec<u32> {
    lock.status()
        .expect("status")
        .pending
        .iter()
        .filter_map(|e| e.holder.as_ref().map(|h| h.pid))
        .collect()
}

/// The pids of the writers waiting or holding, as `status` shows them: the owner of
/// `.master_lock` first (a writer waiting for readers to drain already owns it, and its
/// pending file is gone), then the queued writers in queue order.
pub fn writer_pids(lock: &DirLock) -> Vec<u32> {
    let st = lock.status().expect("status");
    st.writer
        .iter()
        .chain(&st.pending)
        .filter_map(|e| e.holder.as_ref().map(|h| h.pid))
        .collect()
}

/// The pid named by a `WouldBlock` / `TimedOut` error.
pub fn holder_pid(err: &Error) -> Option<u32> {
    err.holder()?.holder.as_ref().map(|h| h.pid)
}

/// Sets a file's (or symlink's, or FIFO's) mtime to `age` ago, without following a
/// symlink or opening the file.
pub fn age(path: &Path, age: Duration) {
    let t = SystemTime::now() - age;
    let d = t.duration_since(UNIX_EPOCH).expect("time after epoch");
    let tv = nix::sys::time::TimeVal::new(
        i64::try_from(d.as_secs()).expect("secs"),
        i64::from(d.subsec_micros()),
    );
    nix::sys::stat::lutimes(path, &tv, &tv)
        .unwrap_or_else(|e| panic!("set mtime of {}: {e}", path.display()));
}

/// Creates `path` with `content`, failing if it exists.
pub fn plant(path: &Path, content: &[u8]) {
    let mut f = fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(path)
        .unwrap_or_else(|e| panic!("create {}: {e}", path.display()));
    f.write_all(content).expect("write planted file");
}

// ---------------------------------------------------------------------------------
// The shared event log

/// Appends one line to `log` with a single `write(2)` on an `O_APPEND` descriptor, so
/// that the file's order is the order in which processes logged.
pub fn log_event(log: &Path, line: &str) {
    let mut f = fs::OpenOptions::new()
        .append(true)
        .create(true)
        .mode(0o644)
        .open(log)
        .expect("open event log");
    let line = format!("{line}\n");
    let n = f.write(line.as_bytes()).expect("append to event log");
    assert_eq!(n, line.len(), "short append to event log");
}

/// The lines of an event log.
pub fn events(log: &Path) -> Vec<String> {
    fs::read_to_string(log)
        .unwrap_or_default()
        .lines()
        .map(str::to_string)
        .collect()
}

// ---------------------------------------------------------------------------------
// Child processes

/// Options of a child's lock.
#[derive(Debug, Clone, Default)]
pub struct Opts {
    /// `Builder::lease`, in milliseconds.
    pub lease_ms: Option<u64>,
    /// `Builder::poll_interval` bounds, in milliseconds (default 1..20).
    pub poll_ms: Option<(u64, u64)>,
    /// `Builder::state_dir`.
    pub state_dir: Option<PathBuf>,
    /// The shared event log: `NAME enter read|write TOKEN` after each grant, `NAME exit`
    /// before each release.
    pub log: Option<PathBuf>,
}

/// A child process driven over its stdin, answering on its stdout. Killed when dropped.
#[derive(Debug)]
pub struct Child {
    pub name: String,
    proc: std::process::Child,
    stdin: Option<std::process::ChildStdin>,
    lines: Receiver<String>,
    /// Lines the child printed that were not replies, for failure messages.
    noise: VecDeque<String>,
    dir: PathBuf,
    reaped: bool,
}

/// A run of this test binary on the one test `test` alone (`--exact`, one thread), with
/// `var` set to `value`: for a test that forks, whose child must not inherit an
/// in-memory lock that another test's thread held at the fork.
#[allow(dead_code)] // not every test binary forks
pub fn this_test_alone(test: &str, var: &str, value: &Path) -> Command {
    let mut cmd = Command::new(std::env::current_exe().expect("test binary"));
    cmd.args(["--exact", test, "--nocapture", "--test-threads=1"])
        .env(var, value);
    cmd
}

impl Child {
    /// Starts a child locking `dir` with default test options.
    pub fn spawn(name: &str, dir: &Path) -> Child {
        Child::spawn_with(name, dir, &Opts::default())
    }

    /// Starts a child locking `dir` with `opts`.
    pub fn spawn_with(name: &str, dir: &Path, opts: &Opts) -> Child {
        let exe = std::env::current_exe().expect("current_exe");
        let mut cmd = Command::new(exe);
        cmd.args(["child_entry", "--exact", "--nocapture", "--test-threads=1"])
            .env(ROLE_ENV, "script")
            .env(DIR_ENV, dir)
            .env(NAME_ENV, name)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit());
        if let Some(l) = opts.lease_ms {
            cmd.env(LEASE_ENV, l.to_string());
        }
        if let Some((a, b)) = opts.poll_ms {
            cmd.env(POLL_ENV, format!("{a},{b}"));
        }
        if let Some(s) = &opts.state_dir {
            cmd.env(STATE_ENV, s);
        }
        if let Some(l) = &opts.log {
            cmd.env(LOG_ENV, l);
        }
        let mut proc = cmd.spawn().expect("spawn child process");
        let stdin = proc.stdin.take();
        let stdout = proc.stdout.take().expect("child stdout");
        let mut child = Child {
            name: name.to_string(),
            proc,
            stdin,
            lines: run::lines(stdout),
            noise: VecDeque::new(),
            dir: dir.to_path_buf(),
            reaped: false,
        };
        // The first reply proves the child runs and has opened its lock.
        let hello = child.reply();
        assert_eq!(hello, "ready", "{name}: unexpected greeting");
        child
    }

    /// The child's pid.
    pub fn pid(&self) -> u32 {
        self.proc.id()
    }

    /// Sends one command line, without waiting for the answer.
    pub fn send(&mut self, cmd: &str) {
        let stdin = self.stdin.as_mut().expect("child stdin still open");
        writeln!(stdin, "{cmd}").expect("write to child");
        stdin.flush().expect("flush child stdin");
    }

    /// The next reply, waiting up to [`LONG`].
    pub fn reply(&mut self) -> String {
        self.reply_within(LONG)
            .unwrap_or_else(|| self.fail("no reply in time"))
    }

    /// The next reply if one comes within `d`.
    pub fn reply_within(&mut self, d: Duration) -> Option<String> {
        let deadline = Instant::now() + d;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                // libtest may print `test child_entry ... ` before our first line.
                Ok(line) => match line.find(REPLY) {
                    Some(i) => return Some(line[i + REPLY.len()..].to_string()),
                    None => {
                        self.noise.push_back(line);
                        if self.noise.len() > 20 {
                            self.noise.pop_front();
                        }
                    }
                },
                Err(RecvTimeoutError::Timeout) => return None,
                Err(RecvTimeoutError::Disconnected) => self.fail("child closed its stdout"),
            }
        }
    }

    /// Sends a command and returns its reply.
    pub fn call(&mut self, cmd: &str) -> String {
        self.send(cmd);
        self.reply()
    }

    /// Sends a command and asserts that its reply starts with `ok`.
    pub fn ok(&mut self, cmd: &str) -> String {
        let r = self.call(cmd);
        if !r.starts_with("ok") {
            self.fail(&format!("`{cmd}` answered `{r}`"));
        }
        r
    }

    /// The token in an `ok write <token>` reply.
    pub fn token_of(reply: &str) -> u64 {
        reply
            .rsplit(' ')
            .next()
            .and_then(|t| t.parse().ok())
            .unwrap_or_else(|| panic!("no token in `{reply}`"))
    }

    /// Kills the child with SIGKILL and reaps it: afterwards its pid is provably gone.
    /// Fails if the child had already exited (it was meant to die by the signal).
    pub fn kill(&mut self) {
        if let Some(status) = self.proc.try_wait().expect("wait for child") {
            self.reaped = true;
            self.fail(&format!("exited ({status}) before it could be killed"));
        }
        kill(Pid::from_raw(self.pid() as i32), Signal::SIGKILL).expect("send SIGKILL");
        let status = self.proc.wait().expect("wait for killed child");
        self.reaped = true;
        use std::os::unix::process::ExitStatusExt;
        assert_eq!(
            status.signal(),
            Some(Signal::SIGKILL as i32),
            "{}: did not die by SIGKILL: {status}",
            self.name
        );
    }

    /// Closes stdin (the child releases everything and exits) and checks that it exited
    /// successfully.
    pub fn finish(mut self) {
        drop(self.stdin.take());
        let start = Instant::now();
        loop {
            match self.proc.try_wait().expect("wait for child") {
                Some(status) => {
                    self.reaped = true;
                    if !status.success() {
                        self.fail(&format!("exited with {status}"));
                    }
                    return;
                }
                None if start.elapsed() > LONG => self.fail("did not exit after stdin closed"),
                None => std::thread::sleep(Duration::from_millis(5)),
            }
        }
    }

    fn fail(&mut self, what: &str) -> ! {
        let noise: Vec<String> = self.noise.drain(..).collect();
        panic!(
            "child {} (pid {}): {what}\n  its other output: {noise:?}\n  {}:\n{}",
            self.name,
            self.pid(),
            state(&self.dir).display(),
            dump(&state(&self.dir))
        );
    }
}

impl Drop for Child {
    fn drop(&mut self) {
        if !self.reaped {
            let _ = self.proc.kill();
            let _ = self.proc.wait();
        }
    }
}

// ---------------------------------------------------------------------------------
// The child's side

/// The body of every test file's `#[test] fn child_entry()`: runs the child role named
/// by `RWDIR_TEST_ROLE`, then exits; does nothing in the test process itself.
pub fn child_entry() {
    let Ok(role) = std::env::var(ROLE_ENV) else {
        return;
    };
    // Never outlive the test that started us, even if it is killed.
    let _ = nix::sys::prctl::set_pdeathsig(Signal::SIGKILL);
    match role.as_str() {
        "script" => script(),
        other => panic!("unknown child role {other}"),
    }
    std::process::exit(0);
}

/// The body of a test file's `#[test] fn child_entry()` when the file has child roles
/// of its own: runs the role named by `role_env` among `roles`, then exits; without
/// `role_env`, does what [`child_entry`] does.
pub fn child_entry_with(role_env: &str, roles: &[(&str, fn())]) {
    let Ok(role) = std::env::var(role_env) else {
        return child_entry();
    };
    let Some((_, body)) = roles.iter().find(|(name, _)| *name == role) else {
        panic!("unknown role {role} ({role_env})");
    };
    body();
    std::process::exit(0);
}

/// The answers in a child's stdout: what follows `@@ ` on each line that has it.
pub fn replies(stdout: &str) -> Vec<String> {
    stdout
        .lines()
        .filter_map(|l| l.find(REPLY).map(|i| l[i + REPLY.len()..].to_string()))
        .collect()
}

fn env_path(key: &str) -> Option<PathBuf> {
    std::env::var_os(key).map(PathBuf::from)
}

fn child_lock() -> DirLock {
    let dir = env_path(DIR_ENV).expect("RWDIR_TEST_DIR");
    let (a, b) = std::env::var(POLL_ENV)
        .ok()
        .and_then(|s| {
            let (a, b) = s.split_once(',')?;
            Some((a.parse().ok()?, b.parse().ok()?))
        })
        .unwrap_or((1, 20));
    let mut b =
        DirLock::builder(dir).poll_interval(Duration::from_millis(a), Duration::from_millis(b));
    if let Some(l) = std::env::var(LEASE_ENV).ok().and_then(|s| s.parse().ok()) {
        b = b.lease(Duration::from_millis(l));
    }
    if let Some(s) = env_path(STATE_ENV) {
        b = b.state_dir(s);
    }
    b.build().expect("child: build lock")
}

enum Guard {
    Read(ReadGuard),
    Write(WriteGuard),
}

struct Script {
    lock: DirLock,
    name: String,
    log: Option<PathBuf>,
    held: Vec<Guard>,
}

fn say(line: &str) {
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{REPLY}{line}");
    let _ = out.flush();
}

fn describe_err(e: &Error) -> String {
    let pid = holder_pid(e).map_or_else(|| "-".to_string(), |p| p.to_string());
    format!("err {:?} holder={pid} {e}", e.kind())
}

impl Script {
    fn log(&self, what: &str) {
        if let Some(log) = &self.log {
            log_event(log, &format!("{} {what}", self.name));
        }
    }

    fn granted(&mut self, g: rwdir::Result<Guard>) -> String {
        match g {
            Ok(Guard::Read(r)) => {
                self.log("enter read 0");
                self.held.push(Guard::Read(r));
                "ok read 0".to_string()
            }
            Ok(Guard::Write(w)) => {
                let t = w.token().expect("token");
                self.log(&format!("enter write {t}"));
                self.held.push(Guard::Write(w));
                format!("ok write {t}")
            }
            Err(e) => describe_err(&e),
        }
    }

    fn release(&mut self) -> String {
        let Some(g) = self.held.pop() else {
            return "err nothing held".to_string();
        };
        self.log("exit");
        let r = match g {
            Guard::Read(r) => r.release(),
            Guard::Write(w) => w.release(),
        };
        match r {
            Ok(()) => "ok released".to_string(),
            Err(e) => describe_err(&e),
        }
    }

    fn run(&mut self, line: &str) -> String {
        let mut words = line.split_whitespace();
        let cmd = words.next().unwrap_or("");
        let ms = || -> Duration {
            Duration::from_millis(
                line.split_whitespace()
                    .nth(1)
                    .and_then(|s| s.parse().ok())
                    .expect("a number of milliseconds"),
            )
        };
        let lock = self.lock.clone();
        match cmd {
            "read" => self.granted(lock.read().map(Guard::Read)),
            "try_read" => self.granted(lock.try_read().map(Guard::Read)),
            "read_for" => self.granted(lock.try_read_for(ms()).map(Guard::Read)),
            "write" => self.granted(lock.write().map(Guard::Write)),
            "try_write" => self.granted(lock.try_write().map(Guard::Write)),
            "write_for" => self.granted(lock.try_write_for(ms()).map(Guard::Write)),
            "release" => self.release(),
            "downgrade" => match self.held.pop() {
                Some(Guard::Write(w)) => {
                    self.log("downgrade");
                    match w.downgrade() {
                        Ok(r) => {
                            self.held.push(Guard::Read(r));
                            "ok downgraded".to_string()
                        }
                        Err(e) => describe_err(&e),
                    }
                }
                _ => "err no write guard on top".to_string(),
            },
            "churn" => self.churn(),
            // Writes back to back for the given time: the grants and the longest wait.
            "write_loop" => {
                let end = Instant::now() + ms();
                let (mut grants, mut longest) = (0u64, Duration::ZERO);
                while Instant::now() < end {
                    let asked = Instant::now();
                    match lock.write() {
                        Ok(w) => {
                            longest = longest.max(asked.elapsed());
                            grants += 1;
                            if let Err(e) = w.release() {
                                return describe_err(&e);
                            }
                        }
                        Err(e) => return describe_err(&e),
                    }
                }
                format!("ok write_loop {grants} {}", longest.as_micros())
            }
            // Leaves every lock file behind, as a crash would (without a signal).
            "exit" => std::process::exit(0),
            _ => format!("err unknown command `{line}`"),
        }
    }

    /// Random acquisitions of every kind, for ever (until killed): for kill-at-a-random-
    /// moment tests. Says `ok churning` first.
    fn churn(&mut self) -> ! {
        say("ok churning");
        let mut rng = u64::from(std::process::id()).wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
        let mut next = move |n: u64| {
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            rng % n
        };
        loop {
            let hold = Duration::from_micros(next(2000));
            let t = Duration::from_millis(next(30));
            // A writer asks for its fencing token, so that its grants show in the tokens
            // (and the token's steps run under the storm too).
            let fenced = |w: rwdir::WriteGuard| w.token().map(|_| Guard::Write(w));
            let r = match next(6) {
                0 => self.lock.read().map(Guard::Read),
                1 => self.lock.try_read().map(Guard::Read),
                2 => self.lock.try_read_for(t).map(Guard::Read),
                3 => self.lock.write().and_then(fenced),
                4 => self.lock.try_write().and_then(fenced),
                _ => self.lock.try_write_for(t).and_then(fenced),
            };
            match r {
                Ok(g) => {
                    std::thread::sleep(hold);
                    drop(g);
                }
                Err(Error::WouldBlock { .. } | Error::TimedOut { .. }) => {}
                Err(e) => panic!("churn: {e}"),
            }
        }
    }
}

fn script() {
    let mut s = Script {
        lock: child_lock(),
        name: std::env::var(NAME_ENV).unwrap_or_else(|_| "child".into()),
        log: env_path(LOG_ENV),
        held: Vec::new(),
    };
    say("ready");
    let stdin = std::io::stdin();
    for line in stdin.lock().lines() {
        let Ok(line) = line else { break };
        let answer = s.run(line.trim());
        say(&answer);
    }
    // Stdin closed: release in reverse order, logging each exit.
    while !s.held.is_empty() {
        let r = s.release();
        assert!(r.starts_with("ok"), "release at exit: {r}");
    }
}

/// The arguments of an event line `NAME enter|exit ...`.
pub fn parse_event(line: &str) -> (String, String, Option<u64>) {
    let mut w = line.split_whitespace();
    let name = w.next().unwrap_or("").to_string();
    let what = w.next().unwrap_or("").to_string();
    let _kind = w.next();
    let token = w.next().and_then(|t| t.parse().ok());
    (name, what, token)
}
