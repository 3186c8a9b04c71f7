//! The `rwdir` command, and the library beside it, in hostile state directories: a
//! symlink to a victim outside DIR at every lock name, a symlinked `.rwdir`, FIFOs,
//! sockets and device nodes, directories, 100 MiB files (the command's peak memory is
//! measured with `wait4`), unreadable files (run as `nobody`), names that look almost
//! like lock names, and thousands of dead holders' files.
//!
//! Every run of the command is bounded in time: a run that blocks (on a FIFO, say) is
//! killed and fails its test. Library-only cases of the same kind, with fewer names:
//! `tests/hostile_files.rs`.

#![allow(clippy::disallowed_methods)]

mod common;
#[path = "cli/util.rs"]
mod util;

use std::ffi::OsString;
use std::fmt::Write as _;
use std::fs;
use std::os::unix::ffi::OsStringExt;
use std::os::unix::fs::{FileTypeExt, MetadataExt, PermissionsExt};
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use common::run::{Report, drain};
use nix::libc;
use rwdir::{DirLock, Error, Holder, Kind};
use util::Dir;
use uuid::Uuid;

/// Chooses this file's own child role (see [`child_entry`]).
const ROLE_ENV: &str = "RWDIR_HOSTILE_CLI_ROLE";

#[test]
fn child_entry() {
    common::child_entry_with(ROLE_ENV, &[("ops", ops_child), ("measure", measure_child)]);
}

/// The lease every run here uses (`--lease 1`), and an age well past it.
const LEASE: Duration = Duration::from_secs(1);
const OLD: Duration = Duration::from_secs(10);
/// The bound for one run of the command or one library call. Generous (the machines
/// are small and busy): only a run that blocks ever reaches it.
const BOUND: Duration = Duration::from_secs(60);

fn lib(dir: &Path) -> DirLock {
    common::lock_with_lease(dir, LEASE)
}

fn is_root() -> bool {
    nix::unistd::geteuid().is_root()
}

// ---------------------------------------------------------------------------------
// Running the command: bounded in time, with its peak memory

/// A finished run of `rwdir`.
#[derive(Debug)]
struct Ran {
    line: String,
    status: ExitStatus,
    stdout: String,
    stderr: String,
    elapsed: Duration,
    /// Peak resident memory (`ru_maxrss` from `wait4`), in KiB.
    max_rss_kib: u64,
    listing: String,
}

impl Report for Ran {
    fn exit_status(&self) -> ExitStatus {
        self.status
    }

    fn report(&self) -> String {
        format!(
            "\n--- command\n{}\n--- status\n{:?} after {:.3} s, peak RSS {} KiB\n--- directory after the run\n{}--- stdout\n{}\n--- stderr\n{}\n---",
            self.line,
            self.status,
            self.elapsed.as_secs_f64(),
            self.max_rss_kib,
            self.listing,
            truncate(&self.stdout),
            self.stderr
        )
    }
}

impl Ran {
    /// Exit 0 means the lock was taken, 75 that it was busy; anything else fails.
    #[track_caller]
    fn busy(&self) -> bool {
        match self.status.code() {
            Some(0) => false,
            Some(75) => true,
            _ => panic!("expected exit code 0 or 75{}", self.report()),
        }
    }
}

fn truncate(s: &str) -> String {
    if s.len() <= 4000 {
        return s.to_string();
    }
    let mut cut = 4000;
    while !s.is_char_boundary(cut) {
        cut -= 1;
    }
    format!("{}... ({} bytes)", &s[..cut], s.len())
}

/// Waits for our child `pid` within [`BOUND`], killing it with SIGKILL if it takes
/// longer. Returns its raw wait status, its peak memory (`ru_maxrss`, KiB), and whether
/// it had to be killed.
fn wait_bounded(pid: i32) -> (i32, u64, bool) {
    let start = Instant::now();
    let mut killed = false;
    loop {
        let mut status = 0;
        // SAFETY: an all-zero `rusage` is a valid value of this plain C struct.
        let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
        let flags = if killed { 0 } else { libc::WNOHANG };
        // SAFETY: `status` and `ru` are valid for writes; `pid` is our own child, which
        // nobody else reaps (std's `Child` never waits unless asked).
        let r = unsafe { libc::wait4(pid, &mut status, flags, &mut ru) };
        if r == pid {
            return (status, u64::try_from(ru.ru_maxrss).unwrap_or(0), killed);
        }
        if r < 0 {
            let e = std::io::Error::last_os_error();
            assert_eq!(e.kind(), std::io::ErrorKind::Interrupted, "wait4: {e}");
            continue;
        }
        if start.elapsed() > BOUND {
            let _ = nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(pid),
                nix::sys::signal::Signal::SIGKILL,
            );
            killed = true;
            continue;
        }
        std::thread::sleep(Duration::from_millis(2));
    }
}

/// What is in `root` (names, types, sizes; records summarised): never reads a large
/// file, never opens a FIFO.
fn listing(root: &Path) -> String {
    let mut out = String::new();
    for n in common::names(root) {
        let _ = writeln!(out, "{n}");
    }
    let state = root.join("locked").join(".rwdir");
    let _ = writeln!(out, "{}:", state.display());
    out.push_str(&common::dump(&state));
    out
}

/// Runs `cmd` to completion with stdin closed, within [`BOUND`] (killed and failed
/// otherwise).
#[allow(clippy::zombie_processes)] // reaped by `wait_bounded` (wait4)
fn run_bounded(mut cmd: Command, line: String, root: &Path) -> Ran {
    cmd.stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let start = Instant::now();
    let mut child = cmd.spawn().unwrap_or_else(|e| panic!("spawn {line}: {e}"));
    let out = drain(child.stdout.take());
    let err = drain(child.stderr.take());
    let (status, rss, killed) = wait_bounded(i32::try_from(child.id()).expect("pid"));
    let ran = Ran {
        line,
        status: ExitStatus::from_raw(status),
        stdout: out.recv_timeout(BOUND).unwrap_or_default(),
        stderr: err.recv_timeout(BOUND).unwrap_or_default(),
        elapsed: start.elapsed(),
        max_rss_kib: rss,
        listing: listing(root),
    };
    if killed {
        panic!("blocked for {BOUND:?} and was killed{}", ran.report());
    }
    ran
}

/// `rwdir --lease 1 ARGS...`, with its peak memory measured.
///
/// The command is started by a fresh, small process (this test binary in its
/// `measure` role), not by the test process itself: a child started with `vfork` or
/// `fork` inherits its parent's peak memory in `ru_maxrss`, and the test process may
/// be large.
fn rwdir_measured(t: &Dir, args: &[&str]) -> Ran {
    let exe = std::env::current_exe().expect("current_exe");
    let files = common::tempdir();
    let (out, err, usage) = (
        files.path().join("stdout"),
        files.path().join("stderr"),
        files.path().join("usage"),
    );
    let mut argv: Vec<String> = vec![util::rwdir_bin().into(), "--lease".into(), "1".into()];
    argv.extend(args.iter().map(|a| a.to_string()));
    let mut cmd = Command::new(exe);
    cmd.args(["child_entry", "--exact", "--nocapture", "--test-threads=1"])
        .env(ROLE_ENV, "measure")
        .env("RWDIR_HOSTILE_CLI_ARGV", argv.join("\u{1f}"))
        .env("RWDIR_HOSTILE_CLI_OUT", &out)
        .env("RWDIR_HOSTILE_CLI_ERR", &err)
        .env("RWDIR_HOSTILE_CLI_USAGE", &usage)
        .current_dir(t.root());
    let line = format!("rwdir --lease 1 {}", args.join(" "));
    let outer = run_bounded(cmd, format!("(measured) {line}"), t.root());
    outer.expect(0);
    let usage = fs::read_to_string(&usage).expect("usage file");
    let (status, rss) = usage.trim().split_once(' ').expect("two numbers");
    Ran {
        line,
        status: ExitStatus::from_raw(status.parse().expect("status")),
        stdout: fs::read_to_string(&out).unwrap_or_default(),
        stderr: fs::read_to_string(&err).unwrap_or_default(),
        elapsed: outer.elapsed,
        max_rss_kib: rss.parse().expect("rss"),
        listing: outer.listing,
    }
}

/// The `measure` role: runs the command given in the environment with stdout and
/// stderr to files, and writes its raw wait status and peak memory to a third.
#[allow(clippy::zombie_processes)] // reaped by `wait_bounded` (wait4)
fn measure_child() {
    let argv = std::env::var("RWDIR_HOSTILE_CLI_ARGV").expect("argv");
    let argv: Vec<&str> = argv.split('\u{1f}').collect();
    let file = |k: &str| fs::File::create(std::env::var_os(k).expect(k)).expect("create");
    let child = Command::new(argv[0])
        .args(&argv[1..])
        .stdin(Stdio::null())
        .stdout(file("RWDIR_HOSTILE_CLI_OUT"))
        .stderr(file("RWDIR_HOSTILE_CLI_ERR"))
        .spawn()
        .expect("spawn rwdir");
    let (status, rss, _) = wait_bounded(i32::try_from(child.id()).expect("pid"));
    fs::write(
        std::env::var_os("RWDIR_HOSTILE_CLI_USAGE").expect("usage"),
        format!("{status} {rss}"),
    )
    .expect("write usage");
}

/// How to start a process as another user (`setpriv`), or as ourselves.
#[derive(Debug, Clone, Default)]
struct As {
    prefix: Vec<String>,
}

impl As {
    fn me() -> As {
        As::default()
    }

    /// As `nobody` when we are root and `setpriv` can run the binary as nobody;
    /// otherwise `None`, with a note.
    fn nobody(why: &str) -> Option<As> {
        if !is_root() {
            eprintln!("note: {why}: skipped (needs root to run as another user)");
            return None;
        }
        let a = As {
            prefix: vec![
                "setpriv".into(),
                "--reuid=65534".into(),
                "--regid=65534".into(),
                "--clear-groups".into(),
                "--".into(),
            ],
        };
        let ok = a
            .command(util::rwdir_bin())
            .arg("--version")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success());
        if !ok {
            eprintln!(
                "note: {why}: skipped (`setpriv` cannot run {} as nobody)",
                util::rwdir_bin()
            );
            return None;
        }
        Some(a)
    }

    fn command(&self, program: &str) -> Command {
        match self.prefix.split_first() {
            None => Command::new(program),
            Some((first, rest)) => {
                let mut c = Command::new(first);
                c.args(rest).arg(program);
                c
            }
        }
    }
}

/// `rwdir --lease 1 ARGS...` in `t`'s root.
fn rwdir(t: &Dir, args: &[&str]) -> Ran {
    rwdir_as(&As::me(), t, args)
}

fn rwdir_as(who: &As, t: &Dir, args: &[&str]) -> Ran {
    let mut cmd = who.command(util::rwdir_bin());
    cmd.current_dir(t.root()).args(["--lease", "1"]).args(args);
    let mut line = who.prefix.join(" ");
    let _ = write!(line, " rwdir --lease 1 {}", args.join(" "));
    run_bounded(cmd, line.trim().to_string(), t.root())
}

/// A fresh `Dir` with its state directory made.
fn fresh() -> Dir {
    let t = Dir::new();
    fs::create_dir(t.state()).expect("mkdir .rwdir");
    t
}

/// The names in `t`'s state directory.
fn state_names(t: &Dir) -> Vec<String> {
    common::names(&t.state())
}

// ---------------------------------------------------------------------------------
// The library in a child process (to run it as another user)

/// Runs `ops` (comma-separated: `try_read`, `try_write`, `status`, `cleanup`,
/// `cleanup_all`) with the library on `dir`, as `who`, and returns one result line per
/// op: `ok ...`, `busy ...`, or `err KIND MESSAGE`.
fn lib_as(who: &As, dir: &Path, ops: &str) -> Vec<String> {
    let exe = std::env::current_exe().expect("current_exe");
    let mut cmd = who.command(exe.to_str().expect("utf-8 test binary path"));
    cmd.args(["child_entry", "--exact", "--nocapture", "--test-threads=1"])
        .env(ROLE_ENV, "ops")
        .env("RWDIR_HOSTILE_CLI_DIR", dir)
        .env("RWDIR_HOSTILE_CLI_OPS", ops)
        .current_dir("/");
    let line = format!("{} (library: {ops})", who.prefix.join(" "));
    let ran = run_bounded(cmd, line, dir);
    ran.expect(0);
    let answers = common::replies(&ran.stdout);
    ran.check(
        answers.len() == ops.split(',').count(),
        "one answer per library op",
    );
    answers
}

fn ops_child() {
    let dir = std::env::var_os("RWDIR_HOSTILE_CLI_DIR").expect("dir");
    let ops = std::env::var("RWDIR_HOSTILE_CLI_OPS").expect("ops");
    let lk = lib(Path::new(&dir));
    let err = |e: &Error| match e {
        Error::WouldBlock { .. } => format!("busy {e}"),
        e => format!("err {:?} {e}", e.kind()),
    };
    for op in ops.split(',') {
        let answer = match op {
            "try_read" => lk.try_read().map_or_else(|e| err(&e), |_| "ok".into()),
            "try_write" => lk.try_write().map_or_else(|e| err(&e), |_| "ok".into()),
            "status" => lk.status().map_or_else(
                |e| err(&e),
                |s| {
                    let w = s.writer.map(|w| w.describe()).unwrap_or_default();
                    format!("ok readers={} writer={w}", s.readers.len())
                },
            ),
            "cleanup" => lk
                .cleanup()
                .map_or_else(|e| err(&e), |v| format!("ok removed={}", v.len())),
            "cleanup_all" => lk
                .cleanup_all()
                .map_or_else(|e| err(&e), |v| format!("ok removed={}", v.len())),
            other => panic!("unknown op {other}"),
        };
        println!("@@ {answer}");
    }
}

// ---------------------------------------------------------------------------------
// The matrix: every lock name, every operation, young and expired

/// A lock name of each kind. The queued writer and the breaker carry the oldest
/// possible `ns`, so that they are ahead of anyone who arrives.
fn lock_names() -> Vec<(&'static str, String)> {
    let u = Uuid::new_v4();
    vec![
        ("writer", ".master_lock".into()),
        ("pending writer", format!(".pending_lock-{u}-1")),
        ("reader", format!(".slave_lock-{u}")),
        ("breaker", format!(".break-1-{u}")),
        ("temporary", format!(".tmp-{u}")),
        ("token", ".token-7".into()),
    ]
}

/// Whether a young (not yet expired) malformed file at a name of `kind` keeps a reader
/// (`write == false`) or a writer out.
fn blocks(kind: &str, write: bool) -> bool {
    match kind {
        "writer" | "pending writer" => true,
        "reader" => write,
        _ => false,
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Op {
    LibTryRead,
    LibTryWrite,
    LibStatus,
    LibCleanup,
    LibCleanupAll,
    Read,
    Write,
    Status,
    StatusJson,
    Cleanup,
    CleanupAll,
}

const OPS: [Op; 11] = [
    Op::LibTryRead,
    Op::LibTryWrite,
    Op::LibStatus,
    Op::LibCleanup,
    Op::LibCleanupAll,
    Op::Read,
    Op::Write,
    Op::Status,
    Op::StatusJson,
    Op::Cleanup,
    Op::CleanupAll,
];

/// Runs a library call on another thread and fails if it does not return within
/// [`BOUND`] (a call that blocks on a FIFO would hang the test otherwise).
fn bounded<T: Send + 'static>(what: &str, f: impl FnOnce() -> T + Send + 'static) -> T {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(f());
    });
    rx.recv_timeout(BOUND)
        .unwrap_or_else(|_| panic!("{what} blocked for {BOUND:?}"))
}

/// Runs `op` on `t`. For lock operations, returns whether the lock was busy; panics on
/// any error or exit code that is neither "taken" nor "busy".
fn run_op(t: &Dir, op: Op, what: &str) -> Option<bool> {
    let lk = lib(&t.dir);
    let what = what.to_string();
    let busy = |r: rwdir::Result<()>, what: &str| match r {
        Ok(()) => Some(false),
        Err(Error::WouldBlock { .. }) => Some(true),
        Err(e) => panic!("{what}: {e:?}\n{}", common::dump(&t.state())),
    };
    let d = t.d();
    match op {
        Op::LibTryRead => busy(
            bounded(&what, move || lk.try_read().map(drop)),
            &format!("{what}: try_read"),
        ),
        Op::LibTryWrite => busy(
            // A writer that asks for its fencing token, as the command does: the token's
            // steps meet the planted thing.
            bounded(&what, move || {
                lk.try_write().and_then(|w| w.token()).map(drop)
            }),
            &format!("{what}: try_write"),
        ),
        Op::LibStatus => {
            bounded(&what, move || lk.status().map(drop))
                .unwrap_or_else(|e| panic!("{what}: status: {e}"));
            None
        }
        Op::LibCleanup => {
            bounded(&what, move || lk.cleanup().map(drop))
                .unwrap_or_else(|e| panic!("{what}: cleanup: {e}"));
            None
        }
        Op::LibCleanupAll => {
            bounded(&what, move || lk.cleanup_all().map(drop))
                .unwrap_or_else(|e| panic!("{what}: cleanup_all: {e}"));
            None
        }
        Op::Read => Some(rwdir(t, &["read", "--no-wait", &d, "true"]).busy()),
        Op::Write => Some(rwdir(t, &["write", "--no-wait", &d, "true"]).busy()),
        Op::Status => {
            rwdir(t, &["status", &d]).expect(0);
            None
        }
        Op::StatusJson => {
            let r = rwdir(t, &["status", "--json", &d]);
            r.expect(0);
            let v: Result<serde_json::Value, _> = serde_json::from_str(&r.stdout);
            r.check(v.is_ok(), "status --json prints JSON");
            None
        }
        Op::Cleanup => {
            rwdir(t, &["cleanup", &d]).expect(0);
            None
        }
        Op::CleanupAll => {
            rwdir(t, &["cleanup", "--all", &d]).expect(0);
            None
        }
    }
}

/// For every lock name, every operation, and a young and an expired hostile thing made
/// by `plant` at that name: the operation neither blocks nor fails, a young thing keeps
/// out whom a held lock of that kind keeps out, and `check` holds afterwards.
fn matrix(what: &str, plant: &dyn Fn(&Path), check: &dyn Fn(&Dir, &str, &str)) {
    for (kind, name) in lock_names() {
        for old in [false, true] {
            for op in OPS {
                let case = format!(
                    "{what} at {name} ({kind}, {}), {op:?}",
                    if old { "expired" } else { "young" }
                );
                let t = fresh();
                let at = t.state().join(&name);
                plant(&at);
                if old {
                    common::age(&at, OLD);
                }
                let busy = run_op(&t, op, &case);
                if let Some(busy) = busy {
                    let write = matches!(op, Op::LibTryWrite | Op::Write);
                    let expected = !old && blocks(kind, write);
                    assert_eq!(busy, expected, "{case}: busy\n{}", common::dump(&t.state()));
                }
                check(&t, &name, &case);
                // Nothing of ours is left: only the planted thing (if still there) and
                // fencing tokens.
                let left: Vec<String> = state_names(&t)
                    .into_iter()
                    .filter(|n| *n != name && !n.starts_with(".token-"))
                    .collect();
                assert!(
                    left.is_empty(),
                    "{case}: left behind {left:?}\n{}",
                    common::dump(&t.state())
                );
                // An expired thing is gone after `cleanup --all` (but the highest token
                // stays, whatever it is) and after a writer got in past it.
                let gone = fs::symlink_metadata(&at).is_err();
                if old && kind != "token" && matches!(op, Op::CleanupAll | Op::LibCleanupAll) {
                    assert!(gone, "{case}: still there\n{}", common::dump(&t.state()));
                }
                if old
                    && matches!(op, Op::Write | Op::LibTryWrite)
                    && matches!(kind, "writer" | "pending writer" | "reader" | "token")
                {
                    assert!(gone, "{case}: still there\n{}", common::dump(&t.state()));
                }
            }
        }
    }
}

// ---------------------------------------------------------------------------------
// Symlinks

const PRECIOUS: &[u8] = b"precious data, not a lock file\n";

/// A victim file and a victim directory outside DIR, reached through symlinks at lock
/// names.
struct Victims {
    _dir: tempfile::TempDir,
    file: PathBuf,
    file_meta: fs::Metadata,
    dir: PathBuf,
    dir_meta: fs::Metadata,
}

impl Victims {
    fn new() -> Victims {
        let tmp = common::tempdir();
        let file = tmp.path().join("victim");
        fs::write(&file, PRECIOUS).expect("write victim");
        fs::set_permissions(&file, fs::Permissions::from_mode(0o600)).expect("chmod");
        common::age(&file, Duration::from_secs(3600));
        let dir = tmp.path().join("victim-dir");
        fs::create_dir(&dir).expect("mkdir victim dir");
        fs::write(dir.join("inside"), PRECIOUS).expect("write");
        common::age(&dir, Duration::from_secs(3600));
        Victims {
            file_meta: fs::metadata(&file).expect("stat"),
            dir_meta: fs::metadata(&dir).expect("stat"),
            _dir: tmp,
            file,
            dir,
        }
    }

    fn assert_untouched(&self, when: &str) {
        let m = fs::metadata(&self.file).unwrap_or_else(|e| panic!("{when}: victim gone: {e}"));
        assert_eq!(fs::read(&self.file).expect("read"), PRECIOUS, "{when}");
        assert_eq!(m.mode(), self.file_meta.mode(), "{when}: mode changed");
        assert_eq!(m.mtime(), self.file_meta.mtime(), "{when}: mtime changed");
        assert_eq!(m.mtime_nsec(), self.file_meta.mtime_nsec(), "{when}");
        assert_eq!(m.ino(), self.file_meta.ino(), "{when}: replaced");
        assert_eq!(m.nlink(), 1, "{when}: linked elsewhere");
        assert_eq!(m.uid(), self.file_meta.uid(), "{when}: owner changed");
        let d = fs::metadata(&self.dir).unwrap_or_else(|e| panic!("{when}: dir gone: {e}"));
        assert_eq!(d.ino(), self.dir_meta.ino(), "{when}: dir replaced");
        assert_eq!(d.mode(), self.dir_meta.mode(), "{when}: dir mode changed");
        assert_eq!(d.mtime(), self.dir_meta.mtime(), "{when}: dir written to");
        assert_eq!(
            common::names(&self.dir),
            ["inside"],
            "{when}: dir contents changed"
        );
        assert_eq!(fs::read(self.dir.join("inside")).expect("read"), PRECIOUS);
    }
}

#[test]
fn a_symlink_at_every_lock_name_never_touches_its_target() {
    let v = Victims::new();
    for (target, what) in [(&v.file, "symlink to a file"), (&v.dir, "symlink to a dir")] {
        let target = target.clone();
        matrix(
            what,
            &|at| std::os::unix::fs::symlink(&target, at).expect("symlink"),
            &|t, name, case| {
                v.assert_untouched(case);
                // Still the same symlink, or removed; never replaced by something else.
                let at = t.state().join(name);
                if let Ok(m) = fs::symlink_metadata(&at) {
                    assert!(m.file_type().is_symlink(), "{case}: replaced");
                    assert_eq!(fs::read_link(&at).expect("readlink"), target, "{case}");
                }
            },
        );
    }
    v.assert_untouched("at the end");
}

/// A state directory in use elsewhere: a token, a dead reader, a live-looking writer.
/// `.rwdir` symlinked to it must never be used.
#[test]
fn a_symlinked_state_dir_is_never_followed() {
    // The target: a real state directory with a token, a dead reader's file and a
    // malformed, expired `.master_lock`: anything that followed the link would remove
    // or add files there.
    let other = Dir::new();
    let dead = dead_record(&other.dir);
    let target = other.state();
    fs::create_dir_all(&target).expect("mkdir");
    common::plant(&target.join(".token-3"), b"");
    common::plant(
        &target.join(format!(".slave_lock-{}", Uuid::new_v4())),
        forge(&dead, Kind::Read).as_bytes(),
    );
    common::plant(&target.join(".master_lock"), b"garbage");
    common::age(&target.join(".master_lock"), OLD);
    let snapshot = || -> Vec<(String, Vec<u8>, i64)> {
        common::names(&target)
            .into_iter()
            .map(|n| {
                let p = target.join(&n);
                let m = fs::symlink_metadata(&p).expect("stat");
                (n, fs::read(&p).expect("read"), m.mtime())
            })
            .collect()
    };
    let before = snapshot();

    let cases: Vec<(&str, PathBuf)> = vec![
        ("symlink to another state dir", target.clone()),
        ("symlink to DIR itself", PathBuf::from(".")),
        (
            "dangling symlink",
            other.root().join("made-through-the-link"),
        ),
    ];
    for (what, link_to) in cases {
        let t = Dir::new();
        std::os::unix::fs::symlink(&link_to, t.state()).expect("symlink");
        let d = t.d();
        for args in [
            vec!["read", &d, "true"],
            vec!["write", &d, "true"],
            vec!["read", "--no-wait", &d, "true"],
            vec!["write", "--timeout", "1", &d, "true"],
            vec!["status", &d],
            vec!["status", "--json", &d],
            vec!["cleanup", &d],
            vec!["cleanup", "--dry-run", &d],
            vec!["cleanup", "--all", &d],
        ] {
            let r = rwdir(&t, &args);
            r.expect(66);
            r.check(
                r.stderr.contains(".rwdir` is not a directory") && r.stderr.contains("symlink"),
                "says .rwdir is a symlink",
            );
        }
        let lk = lib(&t.dir);
        for e in [
            lk.try_read().map(drop).expect_err(what),
            lk.try_write().map(drop).expect_err(what),
            lk.status().map(drop).expect_err(what),
            lk.cleanup().map(drop).expect_err(what),
            lk.cleanup_all().map(drop).expect_err(what),
        ] {
            assert!(matches!(e, Error::NotADirectory { .. }), "{what}: {e:?}");
            assert_eq!(e.path(), t.state(), "{what}");
        }
        assert_eq!(snapshot(), before, "{what}: the target was changed");
        assert_eq!(
            common::names(&t.dir),
            [".rwdir"],
            "{what}: nothing made in DIR"
        );
        assert!(
            !other.root().join("made-through-the-link").exists(),
            "{what}: a dangling link's target was created"
        );
    }
}

// ---------------------------------------------------------------------------------
// FIFOs, sockets, device nodes, directories

#[test]
fn special_files_at_every_lock_name_never_block() {
    let fifo = |at: &Path| {
        nix::unistd::mkfifo(at, nix::sys::stat::Mode::from_bits_truncate(0o666)).expect("mkfifo")
    };
    matrix("a FIFO", &fifo, &|t, name, case| {
        if let Ok(m) = fs::symlink_metadata(t.state().join(name)) {
            assert!(m.file_type().is_fifo(), "{case}: replaced");
        }
    });
    let socket = |at: &Path| {
        drop(std::os::unix::net::UnixListener::bind(at).expect("bind a socket"));
    };
    matrix("a socket", &socket, &|t, name, case| {
        if let Ok(m) = fs::symlink_metadata(t.state().join(name)) {
            assert!(m.file_type().is_socket(), "{case}: replaced");
        }
    });
    // A character device with the numbers of /dev/null: opening it is harmless, but
    // a lock file is never opened for writing, so even a tape drive would be safe.
    let probe = common::tempdir();
    let mknod = |at: &Path| {
        nix::sys::stat::mknod(
            at,
            nix::sys::stat::SFlag::S_IFCHR,
            nix::sys::stat::Mode::from_bits_truncate(0o666),
            nix::sys::stat::makedev(1, 3),
        )
    };
    if mknod(&probe.path().join("null")).is_ok() {
        matrix(
            "a device node",
            &|at| mknod(at).expect("mknod"),
            &|t, name, case| {
                if let Ok(m) = fs::symlink_metadata(t.state().join(name)) {
                    assert!(m.file_type().is_char_device(), "{case}: replaced");
                }
            },
        );
    } else {
        eprintln!("note: device nodes at lock names: skipped (mknod is not permitted here)");
    }
}

#[test]
fn directories_at_lock_names() {
    // Empty: held while young, removed once expired (only if still empty).
    matrix(
        "an empty directory",
        &|at| fs::create_dir(at).expect("mkdir"),
        &|t, name, case| {
            if let Ok(m) = fs::symlink_metadata(t.state().join(name)) {
                assert!(m.is_dir(), "{case}: replaced");
            }
        },
    );

    // Not empty: never emptied. A writer that must get past it fails, naming it, and
    // leaves nothing of its own; `status` shows it; `cleanup` skips an unremovable
    // reader but reports an unremovable writer; `cleanup --all` reports it.
    for (kind, name) in lock_names() {
        let t = fresh();
        let at = t.state().join(&name);
        fs::create_dir(&at).expect("mkdir");
        fs::write(at.join("keep"), b"keep").expect("write");
        common::age(&at, OLD);
        let d = t.d();
        rwdir(&t, &["status", &d]).expect(0);
        let w = rwdir(&t, &["write", "--no-wait", &d, "true"]);
        if matches!(kind, "writer" | "pending writer" | "reader") {
            w.expect(1).check(
                w.stderr.contains(&at.display().to_string())
                    && w.stderr.contains("Directory not empty"),
                "names the directory",
            );
        } else {
            w.expect(0);
        }
        let r = rwdir(&t, &["read", "--no-wait", &d, "true"]);
        if matches!(kind, "writer" | "pending writer") {
            r.expect(1);
        } else {
            r.expect(0);
        }
        let c = rwdir(&t, &["cleanup", &d]);
        if kind == "writer" {
            c.expect(1)
                .check(c.stderr.contains(&at.display().to_string()), "names it");
        } else {
            c.expect(0);
        }
        if kind != "token" {
            let a = rwdir(&t, &["cleanup", "--all", &d]);
            a.expect(1)
                .check(a.stderr.contains(&at.display().to_string()), "names it");
        }
        assert_eq!(fs::read(at.join("keep")).expect("kept"), b"keep", "{name}");
        let left: Vec<String> = state_names(&t)
            .into_iter()
            .filter(|n| *n != name && !n.starts_with(".token-"))
            .collect();
        assert!(left.is_empty(), "{name}: left behind {left:?}");
        // The library says the same.
        let lk = lib(&t.dir);
        if matches!(kind, "writer" | "pending writer" | "reader") {
            let e = lk.try_write().map(drop).expect_err(&name);
            assert!(matches!(e, Error::Io { .. }), "{name}: {e:?}");
            assert_eq!(e.path(), at, "{name}");
        }
    }
}

// ---------------------------------------------------------------------------------
// Huge files

const HUGE: u64 = 100 * 1024 * 1024;

/// Peak memory may grow by at most this much over a run on an empty directory:
/// reading even a tenth of a 100 MiB file would exceed it.
const RSS_SLACK_KIB: u64 = 8 * 1024;

#[test]
fn a_100_mib_file_at_every_lock_name_costs_bounded_memory_and_time() {
    // The command's peak memory on an empty directory, the baseline.
    let base = {
        let t = fresh();
        let d = t.d();
        [
            rwdir_measured(&t, &["status", &d]),
            rwdir_measured(&t, &["write", &d, "true"]),
            rwdir_measured(&t, &["cleanup", "--all", &d]),
        ]
        .iter()
        .map(|r| r.max_rss_kib)
        .max()
        .unwrap_or(0)
    };
    eprintln!("baseline peak RSS of rwdir: {base} KiB");
    let mut worst = (0, String::new());
    for (kind, name) in lock_names() {
        let t = fresh();
        let at = t.state().join(&name);
        // Starts like a record, so that nothing can tell it is not one without reading.
        common::plant(&at, b"rwdir-holder 1\nkind read\n");
        fs::OpenOptions::new()
            .write(true)
            .open(&at)
            .expect("open")
            .set_len(HUGE)
            .expect("set_len");
        let d = t.d();
        let mut runs = vec![
            rwdir_measured(&t, &["status", &d]),
            rwdir_measured(&t, &["status", "--json", &d]),
            rwdir_measured(&t, &["cleanup", "--dry-run", &d]),
            rwdir_measured(&t, &["cleanup", &d]),
            rwdir_measured(&t, &["cleanup", "--all", "--dry-run", &d]),
        ];
        let r = rwdir_measured(&t, &["read", "--no-wait", &d, "true"]);
        assert_eq!(r.busy(), blocks(kind, false), "{name}{}", r.report());
        runs.push(r);
        let w = rwdir_measured(&t, &["write", "--no-wait", &d, "true"]);
        assert_eq!(w.busy(), blocks(kind, true), "{name}{}", w.report());
        runs.push(w);
        // Expired: a writer gets past it; `cleanup --all` removes whatever is left. (A
        // token is not judged: the first writer above removed it as a lower token.)
        if kind != "token" {
            common::age(&at, OLD);
        }
        runs.push(rwdir_measured(&t, &["write", "--no-wait", &d, "true"]));
        runs[runs.len() - 1].expect(0);
        let all = rwdir_measured(&t, &["cleanup", "--all", &d]);
        all.expect(0);
        runs.push(all);
        for r in &runs {
            r.busy();
            r.check(r.max_rss_kib < base + RSS_SLACK_KIB, "bounded memory");
            r.check(r.elapsed < Duration::from_secs(20), "bounded time");
            if r.max_rss_kib > worst.0 {
                worst = (r.max_rss_kib, r.line.clone());
            }
        }
        assert!(!at.exists(), "{name}: removed once expired");
        // The library's view, with its own memory checked in hostile_files.rs.
        assert!(lib(&t.dir).status().expect("status").is_free(), "{name}");
    }
    eprintln!(
        "worst peak RSS with a 100 MiB file: {} KiB ({})",
        worst.0, worst.1
    );
}

// ---------------------------------------------------------------------------------
// Unreadable files

/// A record of a process that has exited, on this host: judged dead exactly (once
/// readable). Made by a real reader in a child process killed with SIGKILL.
fn dead_record(dir: &Path) -> Holder {
    let mut c = common::Child::spawn("doomed", dir);
    c.ok("read");
    let lk = lib(dir);
    let h = lk
        .status()
        .expect("status")
        .readers
        .into_iter()
        .filter_map(|e| e.holder)
        .find(|h| h.pid == c.pid())
        .expect("the child's record");
    c.kill();
    lk.cleanup().expect("remove the child's own file");
    h
}

/// `holder`'s identity in a record of another kind, with a fresh nonce.
fn forge(holder: &Holder, kind: Kind) -> String {
    let mut h = holder.clone();
    h.kind = kind;
    h.nonce = Uuid::new_v4();
    h.format()
}

/// Lock files nobody can read (mode 000) or owned by another user (mode 0600) hold
/// real records of dead processes, which cannot be read, so they count as malformed:
/// held until they are older than the lease, then removed like any expired file.
/// The command and the library run as `nobody` when we are root (root reads
/// everything), otherwise as ourselves.
#[test]
fn unreadable_lock_files_count_as_held_until_the_lease() {
    // As root, the command and the library run as `nobody` (root reads everything);
    // otherwise as ourselves, without the cases of a file owned by another user.
    let (nobody, root) = if is_root() {
        match As::nobody("unreadable lock files") {
            Some(a) => (a, true),
            None => return,
        }
    } else {
        eprintln!("note: unreadable lock files owned by another user: skipped (needs root)");
        (As::me(), false)
    };
    let dead = {
        let scratch = Dir::new();
        dead_record(&scratch.dir)
    };
    // (kind, name, mode, owned by nobody?)
    let u = Uuid::new_v4();
    let cases = [
        ("writer", ".master_lock".to_string(), 0o000, true),
        ("writer", ".master_lock".to_string(), 0o600, false),
        (
            "pending writer",
            format!(".pending_lock-{u}-1"),
            0o000,
            true,
        ),
        ("reader", format!(".slave_lock-{u}"), 0o000, true),
        ("reader", format!(".slave_lock-{u}"), 0o600, false),
        ("breaker", format!(".break-1-{u}"), 0o000, true),
    ];
    for (kind, name, mode, own) in cases {
        if !own && !root {
            continue;
        }
        let case = format!(
            "{name} mode {mode:o} owned by {}",
            if own { "nobody" } else { "root" }
        );
        let t = Dir::new();
        fs::set_permissions(t.root(), fs::Permissions::from_mode(0o755)).expect("chmod root");
        fs::create_dir(t.state()).expect("mkdir");
        let at = t.state().join(&name);
        let k = match kind {
            "writer" => Kind::Write,
            "pending writer" => Kind::Pending,
            "breaker" => Kind::Break,
            _ => Kind::Read,
        };
        common::plant(&at, forge(&dead, k).as_bytes());
        fs::set_permissions(&at, fs::Permissions::from_mode(mode)).expect("chmod");
        let nobody_ids = Some(nix::unistd::Uid::from_raw(65534));
        let nogroup = Some(nix::unistd::Gid::from_raw(65534));
        if root {
            nix::unistd::chown(&t.dir, nobody_ids, nogroup).expect("chown DIR");
            nix::unistd::chown(&t.state(), nobody_ids, nogroup).expect("chown .rwdir");
        }
        if own && root {
            nix::unistd::chown(&at, nobody_ids, nogroup).expect("chown");
        }
        let d = t.d();

        // Young: it counts as held by a malformed file. Made young again before each
        // run: on a busy machine the runs together can take longer than the lease.
        let young = || common::age(&at, Duration::ZERO);
        young();
        let r = rwdir_as(&nobody, &t, &["read", "--no-wait", &d, "true"]);
        assert_eq!(r.busy(), blocks(kind, false), "{case}{}", r.report());
        young();
        let w = rwdir_as(&nobody, &t, &["write", "--no-wait", &d, "true"]);
        assert_eq!(w.busy(), blocks(kind, true), "{case}{}", w.report());
        if blocks(kind, true) {
            w.check(w.stderr.contains("malformed"), "says the file is malformed");
        }
        young();
        let s = rwdir_as(&nobody, &t, &["status", &d]);
        s.expect(0);
        if kind != "breaker" {
            s.check(s.stdout.contains("malformed"), "status says malformed");
        }
        young();
        let c = rwdir_as(&nobody, &t, &["cleanup", &d]);
        c.expect(0).check(c.stdout.is_empty(), "nothing removed");
        young();
        let answers = lib_as(&nobody, &t.dir, "try_read,try_write,status,cleanup");
        let held = |a: &str, blocked: bool| {
            if blocked {
                a.starts_with("busy") && a.contains("malformed")
            } else {
                a == "ok"
            }
        };
        assert!(
            held(&answers[0], blocks(kind, false)),
            "{case}: {answers:?}"
        );
        assert!(held(&answers[1], blocks(kind, true)), "{case}: {answers:?}");
        assert_eq!(answers[3], "ok removed=0", "{case}");
        assert!(at.exists(), "{case}: removed while young");

        // Expired: removed, by the library and by the command.
        common::age(&at, OLD);
        let answers = lib_as(&nobody, &t.dir, "try_write");
        assert_eq!(answers, ["ok"], "{case}");
        if matches!(kind, "writer" | "pending writer" | "reader") {
            assert!(!at.exists(), "{case}: the library removed it");
        }
        if at.exists() {
            let c = rwdir_as(&nobody, &t, &["cleanup", "--all", &d]);
            c.expect(0);
        }
        assert!(!at.exists(), "{case}: removed once expired");
        common::plant(&at, forge(&dead, k).as_bytes());
        fs::set_permissions(&at, fs::Permissions::from_mode(mode)).expect("chmod");
        if own && root {
            nix::unistd::chown(&at, nobody_ids, nogroup).expect("chown");
        }
        common::age(&at, OLD);
        rwdir_as(&nobody, &t, &["write", "--no-wait", &d, "true"]).expect(0);
        rwdir_as(&nobody, &t, &["read", "--no-wait", &d, "true"]).expect(0);
        if kind == "breaker" {
            // Only `cleanup` removes an expired breaker's marker; this one is regular.
            rwdir_as(&nobody, &t, &["cleanup", &d]).expect(0);
        }
        assert!(!at.exists(), "{case}: the command removed it");
        let left: Vec<String> = state_names(&t)
            .into_iter()
            .filter(|n| !n.starts_with(".token-"))
            .collect();
        assert!(left.is_empty(), "{case}: left {left:?}");
    }
}

// ---------------------------------------------------------------------------------
// Names that look almost like lock names

/// Every one of these is foreign: never interpreted, never removed, never shown.
fn near_misses() -> Vec<OsString> {
    let u = Uuid::new_v4().to_string();
    let simple = u.replace('-', "");
    let mut v: Vec<OsString> = [
        ".master_lock ".to_string(),
        " .master_lock".into(),
        ".master_lock\n".into(),
        ".master_lock.tmp".into(),
        "..master_lock".into(),
        ".MASTER_LOCK".into(),
        "master_lock".into(),
        ".master-lock".into(),
        format!(".slave_lock-{}", u.to_uppercase()),
        format!(".slave_lock-{simple}"),
        format!(".slave_lock-{{{u}}}"),
        format!(".slave_lock-{u}-"),
        format!(".slave_lock-{u}x"),
        format!(".slave_lock-{}", &u[..35]),
        ".slave_lock-".into(),
        format!(".slave_lock{u}"),
        format!(".pending_lock-{u}"),
        format!(".pending_lock-{u}-"),
        format!(".pending_lock-{u}-+5"),
        format!(".pending_lock-{u}--5"),
        format!(".pending_lock-{u}-05"),
        format!(".pending_lock-{u}-18446744073709551616"),
        format!(".pending_lock-5-{u}"),
        format!(".break-{u}"),
        format!(".break-5-{u}-"),
        format!(".break--{u}"),
        format!(".tmp-{u}.x"),
        format!(".tmp{u}"),
        ".token-".into(),
        ".token--1".into(),
        ".token-+1".into(),
        ".token-01".into(),
        ".token- 1".into(),
        ".token-1 ".into(),
        ".token-0x10".into(),
        ".token-18446744073709551616".into(),
        ".nfs000000000000abcd00000001".into(),
    ]
    .into_iter()
    .map(OsString::from)
    .collect();
    // Not UTF-8.
    v.push(OsString::from_vec(
        [b".slave_lock-".as_slice(), &[0xff, 0xfe]].concat(),
    ));
    v.push(OsString::from_vec(b".master_lock\xff".to_vec()));
    v
}

#[test]
fn near_miss_names_are_never_touched() {
    let t = fresh();
    let dead = dead_record(&t.dir);
    let victims = Victims::new();
    let record = forge(&dead, Kind::Write);
    let mut planted: Vec<(PathBuf, &str)> = Vec::new();
    for (i, name) in near_misses().into_iter().enumerate() {
        let at = t.state().join(&name);
        // A dead holder's record, a symlink to a victim, or a directory, in turn.
        let what = match i % 3 {
            0 => {
                common::plant(&at, record.as_bytes());
                "file"
            }
            1 => {
                std::os::unix::fs::symlink(&victims.file, &at).expect("symlink");
                "symlink"
            }
            _ => {
                fs::create_dir(&at).expect("mkdir");
                "dir"
            }
        };
        common::age(&at, Duration::from_secs(3600));
        planted.push((at, what));
    }
    let check = |when: &str| {
        for (at, what) in &planted {
            let m = fs::symlink_metadata(at)
                .unwrap_or_else(|e| panic!("{when}: {} removed: {e}", at.display()));
            match *what {
                "file" => assert_eq!(fs::read(at).expect("read"), record.as_bytes(), "{when}"),
                "symlink" => assert!(m.file_type().is_symlink(), "{when}"),
                _ => assert!(m.is_dir(), "{when}"),
            }
        }
        victims.assert_untouched(when);
    };
    let d = t.d();
    let s = rwdir(&t, &["status", "--json", &d]);
    s.expect(0);
    let v: serde_json::Value = serde_json::from_str(&s.stdout).expect("json");
    assert!(v["writer"].is_null(), "{v}");
    assert!(v["token"].is_null(), "no token among them: {v}");
    assert_eq!(v["readers"].as_array().map(Vec::len), Some(0), "{v}");
    assert_eq!(v["pending"].as_array().map(Vec::len), Some(0), "{v}");
    let s = rwdir(&t, &["status", &d]);
    s.expect(0)
        .check(s.stdout.contains("free"), "status says free");
    rwdir(&t, &["read", "--no-wait", &d, "true"]).expect(0);
    let w = rwdir(
        &t,
        &["write", "--no-wait", &d, "sh", "-c", "echo $RWDIR_TOKEN"],
    );
    w.expect(0)
        .check(w.stdout.trim() == "1", "the first token is 1: none counted");
    check("after read and write");
    for args in [
        vec!["cleanup", "--dry-run", &d],
        vec!["cleanup", &d],
        vec!["cleanup", "--all", "--dry-run", &d],
        vec!["cleanup", "--all", &d],
    ] {
        let r = rwdir(&t, &args);
        r.expect(0)
            .check(r.stdout.is_empty(), "nothing (to be) removed");
    }
    check("after cleanup");
    let lk = lib(&t.dir);
    drop(lk.try_read().expect("read"));
    assert_eq!(lk.try_write().expect("write").token().expect("token"), 2);
    assert!(lk.cleanup().expect("cleanup").is_empty());
    assert!(lk.cleanup_all().expect("cleanup_all").is_empty());
    check("after the library");
}

// ---------------------------------------------------------------------------------
// Thousands of dead holders

const READERS: usize = 5000;
const PENDING: usize = 1000;
const BREAKERS: usize = 200;
/// A generous bound for getting past (or cleaning up) all of them at once, on a small,
/// busy machine; measured at well under a second on an idle one.
const MANY_BOUND: Duration = Duration::from_secs(20);

/// Plants the files of `READERS` dead readers, `PENDING` dead queued writers,
/// `BREAKERS` dead breakers, and a dead writer: real records of one process that was
/// killed, each with its own nonce, all judged dead exactly.
fn plant_dead_crowd(st: &Path, dead: &Holder) {
    for _ in 0..READERS {
        let name = format!(".slave_lock-{}", Uuid::new_v4());
        common::plant(&st.join(name), forge(dead, Kind::Read).as_bytes());
    }
    let ns = common::now_ns() - 1_000_000_000;
    for i in 0..PENDING as u64 {
        let name = format!(".pending_lock-{}-{}", Uuid::new_v4(), ns + i);
        common::plant(&st.join(name), forge(dead, Kind::Pending).as_bytes());
    }
    for i in 0..BREAKERS as u64 {
        let name = format!(".break-{}-{}", ns + i, Uuid::new_v4());
        common::plant(&st.join(name), forge(dead, Kind::Break).as_bytes());
    }
    common::plant(
        &st.join(".master_lock"),
        forge(dead, Kind::Write).as_bytes(),
    );
}

fn assert_fast(what: &str, took: Duration) {
    eprintln!("{what}: {:.3} s", took.as_secs_f64());
    assert!(took < MANY_BOUND, "{what} took {took:?}");
}

#[test]
fn thousands_of_dead_holders_are_cleaned_up_and_got_past_quickly() {
    let t = fresh();
    let dead = dead_record(&t.dir);
    let st = t.state();
    let d = t.d();
    let total = READERS + PENDING + BREAKERS + 1;
    let lk = lib(&t.dir);

    // The library: cleanup removes them all.
    plant_dead_crowd(&st, &dead);
    let start = Instant::now();
    let removed = lk.cleanup().expect("cleanup");
    assert_fast("library cleanup", start.elapsed());
    assert_eq!(removed.len(), total);
    assert!(common::non_token_names(&st).is_empty());

    // The library: a writer and a reader get past them.
    plant_dead_crowd(&st, &dead);
    let start = Instant::now();
    let w = lk.try_write_for(MANY_BOUND).expect("write");
    assert_fast("library write past them", start.elapsed());
    drop(w);
    common::assert_only_token(&t.dir);
    plant_dead_crowd(&st, &dead);
    let start = Instant::now();
    drop(lk.try_read_for(MANY_BOUND).expect("read"));
    assert_fast("library read past them", start.elapsed());
    lk.cleanup().expect("cleanup");

    // The command: status lists them, dead; cleanup removes them, one line each.
    plant_dead_crowd(&st, &dead);
    let s = rwdir(&t, &["status", "--json", &d]);
    s.expect(0);
    assert_fast("rwdir status --json", s.elapsed);
    let v: serde_json::Value = serde_json::from_str(&s.stdout).expect("json");
    let readers = v["readers"].as_array().expect("readers");
    assert_eq!(readers.len(), READERS);
    assert!(readers.iter().all(|r| r["alive"] == false), "all dead");
    let c = rwdir(&t, &["cleanup", &d]);
    c.expect(0);
    assert_fast("rwdir cleanup", c.elapsed);
    c.check(c.stdout.lines().count() == total, "one line per removal");
    c.check(
        c.stdout
            .lines()
            .all(|l| l.starts_with("removed ") && l.ends_with("dead")),
        "each says removed, dead",
    );
    assert!(common::non_token_names(&st).is_empty());

    // The command: a writer and a reader get past them.
    plant_dead_crowd(&st, &dead);
    let w = rwdir(&t, &["write", "--timeout", "20", &d, "true"]);
    w.expect(0);
    assert_fast("rwdir write past them", w.elapsed);
    plant_dead_crowd(&st, &dead);
    let r = rwdir(&t, &["read", "--timeout", "20", &d, "true"]);
    r.expect(0);
    assert_fast("rwdir read past them", r.elapsed);
    rwdir(&t, &["cleanup", &d]).expect(0);
    common::assert_only_token(&t.dir);
}

/// A reader in a child process that keeps its lock while thousands of dead readers
/// are around: a writer waits for the live one only, and gets in once it leaves.
#[test]
fn a_live_reader_among_thousands_of_dead_ones_is_waited_for() {
    let t = fresh();
    let dead = dead_record(&t.dir);
    let st = t.state();
    for _ in 0..READERS {
        let name = format!(".slave_lock-{}", Uuid::new_v4());
        common::plant(&st.join(name), forge(&dead, Kind::Read).as_bytes());
    }
    let mut live = common::Child::spawn("live", &t.dir);
    live.ok("read");
    let d = t.d();
    let w = rwdir(&t, &["write", "--timeout", "2", &d, "true"]);
    w.expect(75).check(
        w.stderr.contains(&format!("pid {}", live.pid())),
        "names the live reader",
    );
    // Every dead reader was removed on the way; the live one stays.
    let left = common::non_token_names(&st);
    assert_eq!(left.len(), 1, "{left:?}");
    live.ok("release");
    let w = rwdir(&t, &["write", "--timeout", "20", &d, "true"]);
    w.expect(0);
    live.finish();
    common::assert_only_token(&t.dir);
}
