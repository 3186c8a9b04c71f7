//! Harness of the CLI tests (`tests/cli.rs`, `tests/cli_signals.rs`): runs the real
//! `rwdir` binary in a fresh temporary directory, and on failure prints the command, a
//! listing of the directory (lock files included), stdout and stderr.
//!
//! Long-running COMMANDs signal readiness by creating a file (or writing a line to a
//! pipe); the tests poll for it with bounded retries and never sleep to decide.

#![allow(dead_code, clippy::disallowed_methods)]

use std::ffi::{OsStr, OsString};
use std::fmt::Write as _;
use std::fs;
use std::io::Read as _;
use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

#[path = "bin.rs"]
mod bin;
/// The binary under test.
pub use bin::rwdir_bin;

/// The bound for anything that should happen "soon". Generous: only a failing test
/// ever waits this long.
pub const LONG: Duration = Duration::from_secs(30);

/// A shell script for a COMMAND that holds its lock until its stdin closes: it records
/// its pid and environment next to the readiness file `$0`, then creates `$0`.
pub const HOLD: &str = r#"echo $$ > "$0.pid"
echo "${RWDIR_TOKEN-none}" > "$0.token"
: > "$0"
exec cat > /dev/null"#;

/// A fresh temporary directory: `root/` for the tests' own files, `root/locked` is DIR.
#[derive(Debug)]
pub struct Dir {
    tmp: tempfile::TempDir,
    /// The directory to lock.
    pub dir: PathBuf,
}

impl Dir {
    /// Makes `root/` and `root/locked/`.
    pub fn new() -> Dir {
        let tmp = tempfile::Builder::new()
            .prefix("rwdir-cli-")
            .tempdir()
            .expect("make a temporary directory");
        let dir = tmp.path().join("locked");
        fs::create_dir(&dir).expect("make DIR");
        Dir { tmp, dir }
    }

    /// The root, outside DIR.
    pub fn root(&self) -> &Path {
        self.tmp.path()
    }

    /// A path in the root.
    pub fn path(&self, name: &str) -> PathBuf {
        self.root().join(name)
    }

    /// DIR as a string, for argument lists.
    pub fn d(&self) -> String {
        self.dir.display().to_string()
    }

    /// The state directory.
    pub fn state(&self) -> PathBuf {
        self.dir.join(".rwdir")
    }

    /// The lock files in the state directory whose names start with `prefix`.
    pub fn lock_files(&self, prefix: &str) -> Vec<PathBuf> {
        let mut v: Vec<PathBuf> = fs::read_dir(self.state())
            .map(|rd| {
                rd.filter_map(Result::ok)
                    .filter(|e| e.file_name().to_string_lossy().starts_with(prefix))
                    .map(|e| e.path())
                    .collect()
            })
            .unwrap_or_default();
        v.sort();
        v
    }

    /// `rwdir ARGS...`, run in the root.
    pub fn rwdir<I, S>(&self, args: I) -> Cmd
    where
        I: IntoIterator<Item = S>,
        S: AsRef<OsStr>,
    {
        let mut cmd = Command::new(rwdir_bin());
        cmd.current_dir(self.root());
        let args: Vec<OsString> = args.into_iter().map(|a| a.as_ref().to_owned()).collect();
        cmd.args(&args);
        Cmd {
            cmd,
            line: command_line(&args),
            root: self.root().to_path_buf(),
        }
    }

    /// Ages the one lock file named `prefix*` by a minute and waits (bounded) until the
    /// holder's rwdir refreshes it.
    #[track_caller]
    pub fn expect_refreshed(&self, h: &Holder, prefix: &str) {
        let files = self.lock_files(prefix);
        assert_eq!(files.len(), 1, "one lock file{}", h.report(""));
        let file = &files[0];
        let aged = SystemTime::now() - Duration::from_secs(60);
        let since = aged.duration_since(UNIX_EPOCH).expect("after the epoch");
        let tv = nix::sys::time::TimeVal::new(
            i64::try_from(since.as_secs()).expect("seconds"),
            i64::from(since.subsec_micros()),
        );
        nix::sys::stat::lutimes(file, &tv, &tv).expect("age the lock file");
        let mtime = || {
            fs::symlink_metadata(file)
                .and_then(|m| m.modified())
                .unwrap_or_else(|e| panic!("mtime of {}: {e}{}", file.display(), h.report("")))
        };
        let first = mtime();
        wait_until(
            || mtime() > first,
            || format!("rwdir never refreshed {}{}", file.display(), h.report("")),
        );
    }

    /// A recursive listing of the root, for failure messages.
    pub fn listing(&self) -> String {
        listing(self.root())
    }

    /// Runs `rwdir status --json DIR` and parses it.
    pub fn status(&self) -> serde_json::Value {
        let run = self.rwdir(["status", "--json", &self.d()]).run();
        run.expect_code(0);
        serde_json::from_str(&run.stdout)
            .unwrap_or_else(|e| panic!("status --json is not JSON: {e}\n{}", run.report()))
    }

    /// Starts a holder: `rwdir MODE [OPTS] DIR sh -c HOLD READY`, and waits until its
    /// COMMAND runs. See [`Holder`].
    pub fn hold(&self, mode: &str, opts: &[&str], name: &str) -> Holder {
        let h = self.start_holder(mode, opts, name);
        h.wait_ready();
        h
    }

    /// Starts a holder without waiting for its COMMAND to run (it may be waiting for
    /// the lock).
    pub fn start_holder(&self, mode: &str, opts: &[&str], name: &str) -> Holder {
        let ready = self.path(name);
        let stderr = self.path(&format!("{name}.stderr"));
        let mut args: Vec<OsString> = vec![mode.into()];
        args.extend(opts.iter().map(OsString::from));
        args.extend([
            self.dir.clone().into_os_string(),
            "sh".into(),
            "-c".into(),
            HOLD.into(),
            ready.clone().into_os_string(),
        ]);
        let mut cmd = self.rwdir(&args);
        let err_file = fs::File::create(&stderr).expect("create stderr file");
        cmd.cmd
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(err_file);
        let child = cmd.cmd.spawn().expect("spawn rwdir");
        Holder::from_parts(child, ready, stderr, cmd.line, self.root())
    }
}

/// A command line to run.
#[derive(Debug)]
pub struct Cmd {
    /// The command; adjust as needed.
    pub cmd: Command,
    /// How it looks, for failure messages.
    pub line: String,
    root: PathBuf,
}

impl Cmd {
    /// Sets an environment variable.
    pub fn env(mut self, k: &str, v: &str) -> Cmd {
        self.cmd.env(k, v);
        self
    }

    /// Runs to completion with stdin closed and collects the outcome.
    pub fn run(mut self) -> Run {
        let start = Instant::now();
        let out = self
            .cmd
            .stdin(Stdio::null())
            .output()
            .unwrap_or_else(|e| panic!("failed to run {}: {e}", self.line));
        Run {
            line: self.line,
            status: out.status,
            stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
            elapsed: start.elapsed(),
            listing: listing(&self.root),
        }
    }
}

/// The outcome of a finished `rwdir`.
#[derive(Debug)]
pub struct Run {
    /// The command line.
    pub line: String,
    /// Its exit status.
    pub status: ExitStatus,
    /// Standard output.
    pub stdout: String,
    /// Standard error.
    pub stderr: String,
    /// How long it ran.
    pub elapsed: Duration,
    /// The directory listing right after it finished.
    pub listing: String,
}

impl Run {
    /// Everything about this run, for a failure message.
    pub fn report(&self) -> String {
        format!(
            "\n--- command\n{}\n--- status\n{:?} after {:.3} s\n--- directory after the run\n{}--- stdout\n{}\n--- stderr\n{}\n---",
            self.line,
            self.status,
            self.elapsed.as_secs_f64(),
            self.listing,
            self.stdout,
            self.stderr
        )
    }

    /// The exit code (panics if rwdir died of a signal).
    #[track_caller]
    pub fn code(&self) -> i32 {
        match self.status.code() {
            Some(c) => c,
            None => panic!("rwdir died of a signal{}", self.report()),
        }
    }

    /// Asserts the exit code.
    #[track_caller]
    pub fn expect_code(&self, code: i32) -> &Run {
        if self.status.code() != Some(code) {
            panic!("expected exit code {code}{}", self.report());
        }
        self
    }

    /// Asserts that `cond` holds, printing the run if not.
    #[track_caller]
    pub fn check(&self, cond: bool, what: &str) -> &Run {
        if !cond {
            panic!("{what}{}", self.report());
        }
        self
    }

    /// The non-empty lines of stderr.
    pub fn stderr_lines(&self) -> Vec<&str> {
        self.stderr.lines().filter(|l| !l.is_empty()).collect()
    }
}

/// A running `rwdir` whose COMMAND (the [`HOLD`] script) holds the lock until its stdin
/// closes. Dropping it kills rwdir with SIGKILL (and so COMMAND, by its parent-death
/// signal).
#[derive(Debug)]
pub struct Holder {
    /// The rwdir process.
    pub child: Child,
    stdin: Option<ChildStdin>,
    /// COMMAND's readiness file (also the prefix of `.pid` and `.token`).
    pub ready: PathBuf,
    /// rwdir's stderr, captured in a file.
    pub stderr: PathBuf,
    line: String,
    root: PathBuf,
}

impl Holder {
    /// A holder for a spawned rwdir whose COMMAND creates `ready`, with stderr in the
    /// file `stderr`. Takes the child's stdin, if piped, to close it on release.
    pub fn from_parts(
        mut child: Child,
        ready: PathBuf,
        stderr: PathBuf,
        line: String,
        root: &Path,
    ) -> Holder {
        let stdin = child.stdin.take();
        Holder {
            child,
            stdin,
            ready,
            stderr,
            line,
            root: root.to_path_buf(),
        }
    }

    /// rwdir's pid (the one in its holder record).
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// COMMAND's pid (also its process group id).
    pub fn command_pid(&self) -> i32 {
        self.read_file("pid")
            .trim()
            .parse()
            .unwrap_or_else(|_| panic!("no COMMAND pid yet{}", self.report("")))
    }

    /// COMMAND's `RWDIR_TOKEN` (`none` for readers).
    pub fn token(&self) -> String {
        self.read_file("token").trim().to_string()
    }

    fn read_file(&self, ext: &str) -> String {
        let mut p = self.ready.clone().into_os_string();
        p.push(".");
        p.push(ext);
        fs::read_to_string(p).unwrap_or_default()
    }

    /// Whether COMMAND runs (its readiness file exists).
    pub fn is_ready(&self) -> bool {
        self.ready.exists()
    }

    /// Waits (bounded) until COMMAND runs.
    #[track_caller]
    pub fn wait_ready(&self) {
        let deadline = Instant::now() + LONG;
        while !self.is_ready() {
            if Instant::now() > deadline {
                panic!("COMMAND never became ready{}", self.report(""));
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// What rwdir wrote to stderr so far.
    pub fn stderr_text(&self) -> String {
        fs::read_to_string(&self.stderr).unwrap_or_default()
    }

    /// Waits (bounded) until rwdir's stderr contains `needle`.
    #[track_caller]
    pub fn wait_stderr(&self, needle: &str) {
        let deadline = Instant::now() + LONG;
        while !self.stderr_text().contains(needle) {
            if Instant::now() > deadline {
                panic!("stderr never said {needle:?}{}", self.report(""));
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// Everything about this holder, for a failure message.
    pub fn report(&self, what: &str) -> String {
        format!(
            "\n--- command (pid {})\n{}\n{what}--- directory\n{}--- stderr so far\n{}\n---",
            self.pid(),
            self.line,
            listing(&self.root),
            self.stderr_text()
        )
    }

    /// Lets COMMAND finish (closes its stdin) and waits (bounded) for rwdir.
    #[track_caller]
    pub fn release(mut self) -> Run {
        drop(self.stdin.take());
        self.wait()
    }

    /// Waits (bounded) for rwdir to exit by itself; kills it after [`LONG`].
    #[track_caller]
    pub fn wait(mut self) -> Run {
        let start = Instant::now();
        let status = loop {
            match self.child.try_wait() {
                Ok(Some(st)) => break st,
                Ok(None) if start.elapsed() > LONG => {
                    let _ = self.child.kill();
                    let _ = self.child.wait();
                    panic!("rwdir did not exit{}", self.report(""));
                }
                Ok(None) => std::thread::sleep(Duration::from_millis(10)),
                Err(e) => panic!("wait for rwdir: {e}"),
            }
        };
        Run {
            line: self.line.clone(),
            status,
            stdout: String::new(),
            stderr: self.stderr_text(),
            elapsed: start.elapsed(),
            listing: listing(&self.root),
        }
    }

    /// Sends `sig` to rwdir.
    pub fn signal(&self, sig: nix::sys::signal::Signal) {
        let pid = nix::unistd::Pid::from_raw(i32::try_from(self.pid()).expect("pid"));
        nix::sys::signal::kill(pid, sig).expect("signal rwdir");
    }
}

impl Drop for Holder {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Polls `cond` every 10 ms until it holds; panics with `what()` after [`LONG`].
#[track_caller]
pub fn wait_until(mut cond: impl FnMut() -> bool, what: impl Fn() -> String) {
    let deadline = Instant::now() + LONG;
    while !cond() {
        if Instant::now() > deadline {
            panic!("timed out waiting: {}", what());
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

fn command_line(args: &[OsString]) -> String {
    let mut s = String::from("rwdir");
    for a in args {
        let a = a.to_string_lossy();
        if a.is_empty() || a.contains(|c: char| c.is_whitespace() || "'\"$;&|<>".contains(c)) {
            let _ = write!(s, " '{}'", a.replace('\'', r"'\''"));
        } else {
            let _ = write!(s, " {a}");
        }
    }
    s
}

/// Every entry under `root`, with its type, size and (for lock files) content summary.
pub fn listing(root: &Path) -> String {
    let mut out = String::new();
    walk(root, root, &mut out);
    if out.is_empty() {
        out.push_str("(empty)\n");
    }
    out
}

fn walk(root: &Path, dir: &Path, out: &mut String) {
    let Ok(rd) = fs::read_dir(dir) else {
        let _ = writeln!(out, "{} (unreadable)", dir.display());
        return;
    };
    let mut entries: Vec<_> = rd.filter_map(Result::ok).collect();
    entries.sort_by_key(|e| e.file_name());
    for e in entries {
        let path = e.path();
        let rel = path
            .strip_prefix(root)
            .unwrap_or(&path)
            .display()
            .to_string();
        let Ok(meta) = fs::symlink_metadata(&path) else {
            let _ = writeln!(out, "{rel} (vanished)");
            continue;
        };
        let ft = meta.file_type();
        if ft.is_dir() {
            let _ = writeln!(out, "{rel}/");
            walk(root, &path, out);
        } else if ft.is_symlink() {
            let target = fs::read_link(&path).unwrap_or_default();
            let _ = writeln!(out, "{rel} -> {}", target.display());
        } else if ft.is_fifo() {
            let _ = writeln!(out, "{rel} (fifo)");
        } else {
            let mut summary = String::new();
            if rel.contains(".rwdir/") {
                let mut text = String::new();
                let _ = fs::File::open(&path).and_then(|mut f| f.read_to_string(&mut text));
                let fields: Vec<&str> = text
                    .lines()
                    .filter(|l| l.starts_with("pid ") || l.starts_with("pgid "))
                    .collect();
                summary = fields.join(", ");
            }
            let _ = writeln!(out, "{rel} ({} bytes) {summary}", meta.size());
        }
    }
}
