//! Several users sharing one directory: two (or three) unprivileged users in one group
//! share a setgid DIR. Each takes read and write locks beside the others, breaks the
//! others' dead lock files, and runs `cleanup`; lock files follow each user's umask and
//! the setgid group. Where a dead holder's file cannot be removed for lack of permission
//! (`.rwdir` without group write, or with the sticky bit), the error names its owner and
//! says what to do. The recommended set-up is in `docs/multi-user.md`.
//!
//! The users and their group are made with `groupadd`/`useradd` and removed by a guard,
//! also when a test fails; the command and the library (this test binary in a child
//! role) run as them through `setpriv`. Without root these tests pass with a note.

#![allow(clippy::disallowed_methods)]

mod common;
#[path = "cli/util.rs"]
mod util;

use std::fs;
use std::io::{Read, Write};
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Mutex, mpsc};
use std::time::{Duration, Instant};

use common::run::{Ran, Report as _};
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use rwdir::{DirLock, Error};

const ROLE_ENV: &str = "RWDIR_MULTIUSER_ROLE";
const DIR_ENV: &str = "RWDIR_MULTIUSER_DIR";
const ARG_ENV: &str = "RWDIR_MULTIUSER_ARG";

#[test]
fn child_entry() {
    common::child_entry_with(ROLE_ENV, &[("ops", ops_child), ("hold", hold_child)]);
}

/// The bound for anything that should happen soon: generous; only a failure waits it.
const LONG: Duration = Duration::from_secs(60);

fn lib(dir: &Path) -> DirLock {
    common::lock_with_lease(dir, Duration::from_secs(1))
}

// ---------------------------------------------------------------------------------
// Users and groups, made for one test and removed by a guard

/// `useradd` and friends lock /etc/passwd; the tests of this file take turns.
static ACCOUNTS: Mutex<()> = Mutex::new(());
static SERIAL: AtomicU32 = AtomicU32::new(0);

/// Runs an account command, retrying while another process holds the account files'
/// lock (the retries never decide the outcome of a test).
fn account(cmd: &str, args: &[&str]) -> bool {
    for _ in 0..50 {
        let out = Command::new(cmd).args(args).output();
        match out {
            Ok(o) if o.status.success() => return true,
            // The account files are locked by another process, or the user still
            // has a process that is exiting.
            Ok(o)
                if ["lock", "used by process"]
                    .iter()
                    .any(|m| String::from_utf8_lossy(&o.stderr).contains(m)) =>
            {
                std::thread::sleep(Duration::from_millis(100));
            }
            Ok(o) => {
                eprintln!(
                    "note: {cmd} {}: {}",
                    args.join(" "),
                    String::from_utf8_lossy(&o.stderr).trim()
                );
                return false;
            }
            Err(e) => {
                eprintln!("note: {cmd}: {e}");
                return false;
            }
        }
    }
    false
}

/// A user made for a test.
#[derive(Debug, Clone)]
struct User {
    name: String,
    uid: u32,
}

/// A group and its users, made for one test; removed when dropped.
#[derive(Debug)]
struct Team {
    group: String,
    gid: u32,
    users: Vec<User>,
}

impl Team {
    /// Makes a group and `n` users in it, or says why not and returns `None`.
    fn new(n: usize, why: &str) -> Option<Team> {
        if !nix::unistd::geteuid().is_root() {
            eprintln!("note: {why}: skipped (making users needs root)");
            return None;
        }
        let setpriv = Command::new("setpriv")
            .arg("--version")
            .stdout(Stdio::null())
            .status();
        if !setpriv.is_ok_and(|s| s.success()) {
            eprintln!("note: {why}: skipped (no `setpriv` to run as another user)");
            return None;
        }
        let _turn = ACCOUNTS.lock().unwrap_or_else(|e| e.into_inner());
        // Short, unique names (at most 32 bytes): the pid and a serial number.
        let base = format!(
            "rwmu{}x{}",
            std::process::id(),
            SERIAL.fetch_add(1, Ordering::Relaxed)
        );
        let mut team = Team {
            group: base.clone(),
            gid: 0,
            users: Vec::new(),
        };
        if !account("groupadd", &[&base]) {
            eprintln!("note: {why}: skipped (groupadd failed)");
            return None;
        }
        team.gid = nix::unistd::Group::from_name(&base)
            .ok()
            .flatten()
            .map(|g| g.gid.as_raw())
            .expect("the new group");
        for i in 0..n {
            let name = format!("{base}{}", char::from(b'a' + u8::try_from(i).expect("few")));
            if !account(
                "useradd",
                &["-M", "-N", "-g", &base, "-s", "/usr/sbin/nologin", &name],
            ) {
                eprintln!("note: {why}: skipped (useradd failed)");
                return None; // (the guard removes what was made)
            }
            let uid = nix::unistd::User::from_name(&name)
                .ok()
                .flatten()
                .map(|u| u.uid.as_raw())
                .expect("the new user");
            team.users.push(User { name, uid });
        }
        drop(_turn);
        // The binaries must be reachable by the new users.
        let probe = team.run_as(&team.users[0], "022", util::rwdir_bin(), &["--version"]);
        if !probe.status.success() {
            eprintln!(
                "note: {why}: skipped ({} cannot run as {}: {})",
                util::rwdir_bin(),
                team.users[0].name,
                probe.stderr
            );
            return None;
        }
        Some(team)
    }

    /// `setpriv` as `user` (in the team's group), with `umask`, running `program`.
    fn command(&self, user: &User, umask: &str, program: &str) -> Command {
        let mut c = Command::new("setpriv");
        c.arg(format!("--reuid={}", user.uid))
            .arg(format!("--regid={}", self.gid))
            .arg("--init-groups")
            .args(["--", "sh", "-c", "umask $0; exec \"$@\"", umask, program]);
        c
    }

    /// Runs `program ARGS` as `user` with `umask`, bounded.
    fn run_as(&self, user: &User, umask: &str, program: &str, args: &[&str]) -> Ran {
        let mut c = self.command(user, umask, program);
        c.args(args);
        run(
            c,
            format!("[{} umask {umask}] {program} {}", user.name, args.join(" ")),
        )
    }

    /// `rwdir --lease 1 ARGS` as `user` with `umask`.
    fn rwdir(&self, user: &User, umask: &str, args: &[&str]) -> Ran {
        let mut all = vec!["--lease", "1"];
        all.extend_from_slice(args);
        self.run_as(user, umask, util::rwdir_bin(), &all)
    }
}

impl Drop for Team {
    fn drop(&mut self) {
        let _turn = ACCOUNTS.lock().unwrap_or_else(|e| e.into_inner());
        for u in &self.users {
            // Holders were killed by pid before the team is dropped; a COMMAND that
            // dies by its parent-death signal may still be on its way out, which
            // `account` waits for.
            if !account("userdel", &[&u.name]) {
                eprintln!("warning: could not remove user {}", u.name);
            }
        }
        if !account("groupdel", &[&self.group]) {
            eprintln!("warning: could not remove group {}", self.group);
        }
    }
}

// ---------------------------------------------------------------------------------
// Running things

/// Runs `cmd` in `/` with stdin closed; kills it and fails after [`LONG`].
fn run(mut cmd: Command, line: String) -> Ran {
    cmd.current_dir("/");
    common::run::run(cmd, line, LONG)
}

/// A process holding a lock as some user until told to go (its stdin closes) or
/// killed: the command (`rwdir MODE DIR sh -c ...`) or the library (this binary's
/// `hold` role). Ready once it said so on stdout. Killed when dropped.
struct Holding {
    child: Child,
    stdin: Option<ChildStdin>,
    line: String,
    lines: mpsc::Receiver<String>,
    /// For the command: the locked directory, whose files `kill` waits to see judged
    /// dead (the job's reaper outlives rwdir by a moment, and keeps the lock meanwhile).
    dir: Option<PathBuf>,
}

impl Holding {
    fn start(mut cmd: Command, line: String) -> Holding {
        cmd.current_dir("/")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit());
        let mut child = cmd.spawn().unwrap_or_else(|e| panic!("spawn {line}: {e}"));
        let stdin = child.stdin.take();
        let stdout = child.stdout.take().expect("stdout");
        let h = Holding {
            child,
            stdin,
            line,
            lines: common::run::lines(stdout),
            dir: None,
        };
        h.wait_for("held");
        h
    }

    /// Waits for a line on stdout that contains `needle`.
    fn wait_for(&self, needle: &str) {
        let deadline = Instant::now() + LONG;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(l) if l.contains(needle) => return,
                Ok(_) => {}
                Err(_) => panic!("{}: never said {needle:?}", self.line),
            }
        }
    }

    fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Closes stdin: the holder releases and exits; returns its status.
    fn release(mut self) -> ExitStatus {
        drop(self.stdin.take());
        self.wait()
    }

    /// SIGKILL (COMMAND, if any, dies by its parent-death signal): leaves a dead
    /// holder's files.
    fn kill(mut self) {
        kill(
            Pid::from_raw(i32::try_from(self.pid()).expect("pid")),
            Signal::SIGKILL,
        )
        .expect("kill");
        let st = self.wait();
        assert!(st.code().is_none(), "{}: killed: {st:?}", self.line);
        // What a user sees before running `cleanup`: rwdir is gone; its reaper stops the
        // job and exits a moment later, and only then is the holder dead.
        if let Some(dir) = &self.dir {
            let pid = self.pid();
            let lock = DirLock::new(dir).expect("lock");
            let start = Instant::now();
            let lingers = || {
                let st = lock.status().expect("status");
                let mut all = st.writer.iter().chain(&st.pending).chain(&st.readers);
                all.any(|e| {
                    e.holder.as_ref().is_some_and(|h| h.pid == pid) && !e.liveness.is_dead()
                })
            };
            while lingers() {
                assert!(start.elapsed() < LONG, "{}: its job lingers", self.line);
                std::thread::sleep(Duration::from_millis(2));
            }
        }
    }

    fn wait(&mut self) -> ExitStatus {
        let start = Instant::now();
        loop {
            if let Some(st) = self.child.try_wait().expect("wait") {
                return st;
            }
            assert!(start.elapsed() < LONG, "{}: did not exit", self.line);
            std::thread::sleep(Duration::from_millis(5));
        }
    }
}

impl Drop for Holding {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `rwdir MODE DIR sh -c 'echo held; cat >/dev/null'` as `user`: holds until stdin
/// closes.
fn hold_cmd(team: &Team, user: &User, umask: &str, mode: &str, dir: &Path) -> Holding {
    let mut c = team.command(user, umask, util::rwdir_bin());
    c.args(["--lease", "1", mode])
        .arg(dir)
        .args(["sh", "-c", "echo held; exec cat >/dev/null"]);
    let mut h = Holding::start(c, format!("[{}] rwdir {mode} DIR", user.name));
    h.dir = Some(dir.to_path_buf());
    h
}

/// The library, in this binary's `hold` role, as `user`: takes a `mode` lock on `dir`
/// and holds it until stdin closes.
fn hold_lib(team: &Team, user: &User, umask: &str, mode: &str, dir: &Path) -> Holding {
    let exe = std::env::current_exe().expect("current_exe");
    let mut c = team.command(user, umask, exe.to_str().expect("utf-8 path"));
    c.args(["child_entry", "--exact", "--nocapture", "--test-threads=1"])
        .env(ROLE_ENV, "hold")
        .env(DIR_ENV, dir)
        .env(ARG_ENV, mode);
    Holding::start(c, format!("[{}] library {mode}", user.name))
}

fn hold_child() {
    let dir = PathBuf::from(std::env::var_os(DIR_ENV).expect("dir"));
    let lk = lib(&dir);
    let mode = std::env::var(ARG_ENV).expect("mode");
    let guard: Box<dyn std::any::Any> = match mode.as_str() {
        "read" => Box::new(lk.try_read_for(LONG).expect("read")),
        _ => Box::new(lk.try_write_for(LONG).expect("write")),
    };
    println!("held");
    let _ = std::io::stdout().flush();
    let mut sink = Vec::new();
    let _ = std::io::stdin().read_to_end(&mut sink);
    drop(guard);
}

/// The library as `user`: runs `ops` (comma-separated `try_read`, `try_write`,
/// `cleanup`, `status`) on `dir`; one answer per op: `ok`, `busy PID`, `denied UID
/// MESSAGE`, or `err KIND MESSAGE`.
fn lib_as(team: &Team, user: &User, umask: &str, dir: &Path, ops: &str) -> Vec<String> {
    let exe = std::env::current_exe().expect("current_exe");
    let mut c = team.command(user, umask, exe.to_str().expect("utf-8 path"));
    c.args(["child_entry", "--exact", "--nocapture", "--test-threads=1"])
        .env(ROLE_ENV, "ops")
        .env(DIR_ENV, dir)
        .env(ARG_ENV, ops);
    let r = run(c, format!("[{}] library {ops}", user.name));
    r.expect(0);
    let answers = common::replies(&r.stdout);
    r.check(answers.len() == ops.split(',').count(), "one answer per op");
    answers
}

fn ops_child() {
    let dir = PathBuf::from(std::env::var_os(DIR_ENV).expect("dir"));
    let lk = lib(&dir);
    let answer = |r: rwdir::Result<String>| match r {
        Ok(s) => s,
        Err(e @ Error::WouldBlock { .. }) => {
            let pid = e.holder().and_then(|h| h.holder.as_ref()).map(|h| h.pid);
            format!("busy {} {e}", pid.unwrap_or(0))
        }
        Err(ref e @ Error::PermissionDenied { ref owner, .. }) => {
            format!("denied {} {e}", owner.uid)
        }
        Err(e) => format!("err {:?} {e}", e.kind()),
    };
    for op in std::env::var(ARG_ENV).expect("ops").split(',') {
        let a = match op {
            "try_read" => answer(lk.try_read().map(|_| "ok".into())),
            "try_write" => answer(lk.try_write().map(|_| "ok".into())),
            "cleanup" => answer(lk.cleanup().map(|v| format!("ok removed {}", v.len()))),
            "status" => answer(
                lk.status()
                    .map(|s| format!("ok readers {}", s.readers.len())),
            ),
            other => panic!("unknown op {other}"),
        };
        println!("@@ {a}");
    }
}

// ---------------------------------------------------------------------------------
// The shared directory

/// A shared directory as `docs/multi-user.md` recommends: `root/` (0755, root's),
/// `root/shared` owned by root and the team's group, mode 2775 (setgid: files and
/// directories made in it get the group).
struct Shared {
    _tmp: tempfile::TempDir,
    dir: PathBuf,
}

impl Shared {
    fn new(team: &Team) -> Shared {
        let tmp = common::tempdir();
        fs::set_permissions(tmp.path(), fs::Permissions::from_mode(0o755)).expect("chmod");
        let dir = tmp.path().join("shared");
        fs::create_dir(&dir).expect("mkdir");
        nix::unistd::chown(&dir, None, Some(nix::unistd::Gid::from_raw(team.gid))).expect("chgrp");
        fs::set_permissions(&dir, fs::Permissions::from_mode(0o2775)).expect("chmod");
        Shared { _tmp: tmp, dir }
    }

    fn d(&self) -> String {
        self.dir.display().to_string()
    }

    fn state(&self) -> PathBuf {
        self.dir.join(".rwdir")
    }

    /// Pre-creates `.rwdir` as an administrator would: root's, the team's group,
    /// `mode`.
    fn make_state(&self, team: &Team, mode: u32) {
        fs::create_dir(self.state()).expect("mkdir .rwdir");
        nix::unistd::chown(
            &self.state(),
            None,
            Some(nix::unistd::Gid::from_raw(team.gid)),
        )
        .expect("chgrp");
        fs::set_permissions(self.state(), fs::Permissions::from_mode(mode)).expect("chmod");
    }

    /// The lock files (not tokens) in `.rwdir`, with their owners and modes.
    fn files(&self) -> Vec<(String, u32, u32, u32)> {
        common::non_token_names(&self.state())
            .into_iter()
            .map(|n| {
                let m = fs::symlink_metadata(self.state().join(&n)).expect("stat");
                (n, m.uid(), m.gid(), m.mode() & 0o7777)
            })
            .collect()
    }
}

fn mode_of(p: &Path) -> u32 {
    fs::metadata(p).expect("stat").mode() & 0o7777
}

// ---------------------------------------------------------------------------------
// Tests

#[test]
fn two_users_share_read_and_write_locks_in_a_setgid_dir() {
    let Some(team) = Team::new(2, "two users sharing a directory") else {
        return;
    };
    let (alice, bob) = (&team.users[0], &team.users[1]);
    let s = Shared::new(&team);
    let d = s.d();

    // Alice is the first to use DIR: `.rwdir` is made under her umask 002, and gets
    // the group and the setgid bit from DIR.
    let ra = hold_cmd(&team, alice, "002", "read", &s.dir);
    let st = fs::metadata(s.state()).expect("stat .rwdir");
    assert_eq!(st.uid(), alice.uid);
    assert_eq!(st.gid(), team.gid, ".rwdir has DIR's group");
    assert_eq!(mode_of(&s.state()), 0o2775, "0777 & ~002, setgid from DIR");
    let files = s.files();
    assert_eq!(files.len(), 1, "{files:?}");
    assert_eq!(
        (files[0].1, files[0].2, files[0].3),
        (alice.uid, team.gid, 0o644),
        "alice's reader file: hers, the group's, 0644 & ~002"
    );

    // Bob reads beside her; his writer waits for her reader and names it.
    team.rwdir(bob, "002", &["read", "--no-wait", &d, "true"])
        .expect(0);
    let w = team.rwdir(bob, "002", &["write", "--no-wait", &d, "true"]);
    w.expect(75).check(
        w.stderr.contains(&format!("reader pid {}", ra.pid())),
        "names alice's reader",
    );
    let st = team.rwdir(bob, "002", &["status", "--json", &d]);
    st.expect(0);
    let v: serde_json::Value = serde_json::from_str(&st.stdout).expect("json");
    assert_eq!(v["readers"][0]["pid"], ra.pid(), "{v}");
    assert_eq!(
        v["readers"][0]["alive"], true,
        "bob can judge alice's holder: {v}"
    );
    assert!(ra.release().success());

    // Bob writes; alice's writer after him gets a higher token.
    let w = team.rwdir(
        bob,
        "002",
        &["write", "--no-wait", &d, "sh", "-c", "echo $RWDIR_TOKEN"],
    );
    w.expect(0);
    let t1: u64 = w.stdout.trim().parse().expect("token");
    let w = team.rwdir(
        alice,
        "002",
        &["write", "--no-wait", &d, "sh", "-c", "echo $RWDIR_TOKEN"],
    );
    w.expect(0);
    let t2: u64 = w.stdout.trim().parse().expect("token");
    assert!(t2 > t1, "{t2} > {t1}");

    // The library likewise: bob holds a write lock, alice's attempts name him.
    let wb = hold_lib(&team, bob, "002", "write", &s.dir);
    let a = lib_as(&team, alice, "002", &s.dir, "try_read,try_write,status");
    assert!(a[0].starts_with(&format!("busy {} ", wb.pid())), "{a:?}");
    assert!(a[1].starts_with(&format!("busy {} ", wb.pid())), "{a:?}");
    assert!(wb.release().success());
    let a = lib_as(&team, alice, "002", &s.dir, "try_read,try_write");
    assert_eq!(a, ["ok", "ok"]);
    assert!(s.files().is_empty(), "{:?}", s.files());
}

#[test]
fn each_user_breaks_the_others_dead_lock_files_and_runs_cleanup() {
    let Some(team) = Team::new(2, "breaking another user's dead lock files") else {
        return;
    };
    let (alice, bob) = (&team.users[0], &team.users[1]);
    let s = Shared::new(&team);
    let d = s.d();

    // Alice's writer dies by SIGKILL: bob's writer gets past her `.master_lock`.
    let wa = hold_cmd(&team, alice, "002", "write", &s.dir);
    wa.kill();
    assert_eq!(s.files()[0].0, ".master_lock");
    assert_eq!(s.files()[0].1, alice.uid);
    team.rwdir(bob, "002", &["write", "--no-wait", &d, "true"])
        .expect(0);
    assert!(s.files().is_empty(), "{:?}", s.files());

    // Bob's reader dies: alice's `cleanup` removes his file and says whose it was.
    let rb = hold_cmd(&team, bob, "002", "read", &s.dir);
    let pid = rb.pid();
    rb.kill();
    let c = team.rwdir(alice, "002", &["cleanup", &d]);
    c.expect(0).check(
        c.stdout.lines().count() == 1
            && c.stdout.contains(&format!("reader pid {pid}"))
            && c.stdout.trim_end().ends_with("dead"),
        "one removal: bob's dead reader",
    );
    assert!(s.files().is_empty());

    // The library: alice's reader (the library, killed) is got past by bob's writer,
    // and bob's queued writer (killed) by alice's reader.
    let ra = hold_lib(&team, alice, "002", "read", &s.dir);
    let a = lib_as(&team, bob, "002", &s.dir, "try_write");
    assert!(a[0].starts_with(&format!("busy {} ", ra.pid())), "{a:?}");
    ra.kill();
    assert_eq!(s.files()[0].1, alice.uid);
    assert_eq!(lib_as(&team, bob, "002", &s.dir, "try_write"), ["ok"]);
    assert!(s.files().is_empty());
    let rb = hold_lib(&team, bob, "002", "read", &s.dir);
    rb.kill();
    assert_eq!(
        lib_as(&team, alice, "002", &s.dir, "cleanup,status"),
        ["ok removed 1", "ok readers 0"]
    );
    // `cleanup --all` by either removes the other's live files too (pre-startup job).
    let rb = hold_cmd(&team, bob, "002", "read", &s.dir);
    let c = team.rwdir(alice, "002", &["cleanup", "--all", &d]);
    c.expect(0)
        .check(c.stdout.contains("alive"), "removed a live file");
    drop(rb);
}

#[test]
fn lock_files_follow_each_users_umask_and_the_group() {
    let Some(team) = Team::new(3, "umasks") else {
        return;
    };
    let s = Shared::new(&team);
    s.make_state(&team, 0o2775);
    let umasks = ["002", "022", "077"];
    let mut holders = Vec::new();
    for (u, umask) in team.users.iter().zip(umasks) {
        let before: Vec<String> = s.files().into_iter().map(|f| f.0).collect();
        holders.push(hold_cmd(&team, u, umask, "read", &s.dir));
        let new: Vec<_> = s
            .files()
            .into_iter()
            .filter(|f| !before.contains(&f.0))
            .collect();
        assert_eq!(new.len(), 1, "{new:?}");
        let want = 0o644 & !u32::from_str_radix(umask, 8).expect("octal");
        assert_eq!(
            (new[0].1, new[0].2, new[0].3),
            (u.uid, team.gid, want),
            "{}'s file with umask {umask}",
            u.name
        );
    }
    // Files made under umask 002 and 022 are readable by the group: their holders are
    // judged exactly. Carol's, made under umask 077, is not: to the others it is a
    // malformed file, held until it is older than the lease.
    let (alice, carol) = (&team.users[0], &team.users[2]);
    let st = team.rwdir(alice, "002", &["status", "--json", &s.d()]);
    st.expect(0);
    let v: serde_json::Value = serde_json::from_str(&st.stdout).expect("json");
    let readers = v["readers"].as_array().expect("readers");
    assert_eq!(readers.len(), 3, "{v}");
    let known: Vec<u64> = readers
        .iter()
        .filter(|r| r["alive"] == true)
        .filter_map(|r| r["pid"].as_u64())
        .collect();
    assert!(known.contains(&u64::from(holders[0].pid())), "{v}");
    assert!(known.contains(&u64::from(holders[1].pid())), "{v}");
    assert!(
        readers
            .iter()
            .any(|r| r["host"] == "?" && r["alive"].is_null()),
        "carol's unreadable file is unknown: {v}"
    );
    let carols = holders.pop().expect("carol's holder");
    for h in holders {
        assert!(h.release().success());
    }
    // Carol's holder dies: the others cannot tell until her file is older than the
    // lease (heartbeats stop), then a writer gets past it.
    carols.kill();
    let w = team.rwdir(alice, "002", &["write", "--timeout", "30", &s.d(), "true"]);
    w.expect(0);
    assert!(s.files().is_empty(), "{:?}", s.files());
    // Carol herself judges her own dead file exactly.
    let rc = hold_cmd(&team, carol, "077", "read", &s.dir);
    rc.kill();
    team.rwdir(carol, "077", &["write", "--no-wait", &s.d(), "true"])
        .expect(0);
}

/// The facts of a "cannot remove another user's file" error, as the library words them.
fn assert_names_owner(text: &str, owner: &User, dir: &str, what: &str) {
    for part in [
        format!("user {} (uid {})", owner.name, owner.uid),
        format!("may not remove files of others from `{dir}/.rwdir`"),
    ] {
        assert!(text.contains(&part), "{what}: lacks {part:?}:\n{text}");
    }
}

/// The expected parts of a "cannot remove another user's file" message of the command:
/// the facts, and what to do.
fn assert_names_owner_and_remedy(text: &str, owner: &User, dir: &str, what: &str) {
    assert_names_owner(text, owner, dir, what);
    for part in [
        format!("ask {} or an administrator", owner.name),
        format!("`rwdir cleanup {dir}`"),
        "chmod 2775".to_string(),
        "docs/multi-user.md".to_string(),
    ] {
        assert!(text.contains(&part), "{what}: lacks {part:?}:\n{text}");
    }
}

#[test]
fn a_dead_lock_that_cannot_be_removed_names_its_owner_and_what_to_do() {
    let Some(team) = Team::new(2, "unremovable dead lock files") else {
        return;
    };
    let (alice, bob) = (&team.users[0], &team.users[1]);

    // A sticky state directory (like /tmp): bob may add files but not remove alice's.
    let s = Shared::new(&team);
    let d = s.d();
    s.make_state(&team, 0o3775);
    // Tokens of both users alternate: a lower token bob may not remove is left alone.
    team.rwdir(alice, "002", &["write", &d, "true"]).expect(0);
    team.rwdir(bob, "002", &["write", &d, "true"]).expect(0);
    team.rwdir(alice, "002", &["write", &d, "true"]).expect(0);
    let wa = hold_cmd(&team, alice, "002", "write", &s.dir);
    wa.kill();
    for args in [
        vec!["write", "--timeout", "5", &d, "true"],
        vec!["read", "--timeout", "5", &d, "true"],
        vec!["cleanup", &d],
    ] {
        let r = team.rwdir(bob, "002", &args);
        r.expect(1);
        r.check(r.stderr.lines().count() == 1, "one line");
        r.check(
            r.stderr.contains("failed to remove lock file")
                && r.stderr.contains(&format!("{d}/.rwdir/.master_lock")),
            "names the file",
        );
        assert_names_owner_and_remedy(&r.stderr, alice, &d, &r.line);
        r.check(r.stderr.contains("not sticky"), "says: not sticky");
        // Bob's own files (queued writer, breaker's marker) were undone.
        let files = s.files();
        r.check(
            files.len() == 1 && files[0].0 == ".master_lock",
            &format!("only alice's file is left: {files:?}"),
        );
    }
    let a = lib_as(&team, bob, "002", &s.dir, "try_write,cleanup");
    for answer in &a {
        assert!(
            answer.starts_with(&format!("denied {} ", alice.uid)),
            "{a:?}"
        );
        // The library says the facts; what to do is the command's to say.
        assert_names_owner(answer, alice, &d, "library");
    }
    // Doing what it says works: alice runs cleanup, and bob gets in.
    team.rwdir(alice, "002", &["cleanup", &d]).expect(0);
    team.rwdir(bob, "002", &["write", "--no-wait", &d, "true"])
        .expect(0);

    // A state directory without group write, made by bob under umask 022 when he was
    // the first to use DIR: alice cannot even queue, and is told whose directory it is.
    let s = Shared::new(&team);
    let d = s.d();
    let rb = hold_cmd(&team, bob, "022", "read", &s.dir);
    assert_eq!(mode_of(&s.state()), 0o2755);
    rb.kill();
    for args in [
        vec!["read", "--no-wait", &d, "true"],
        vec!["write", "--no-wait", &d, "true"],
    ] {
        let r = team.rwdir(alice, "002", &args);
        r.expect(1);
        for part in [
            "failed to create lock file".to_string(),
            format!("may not create files in `{d}/.rwdir`"),
            format!("user {} (uid {})", bob.name, bob.uid),
            "mode 2755".into(),
            "chmod 2775".into(),
            "docs/multi-user.md".into(),
        ] {
            r.check(r.stderr.contains(&part), &format!("says {part:?}"));
        }
    }
    // Her cleanup cannot remove bob's dead reader either: it says whose and what to do.
    let c = team.rwdir(alice, "002", &["cleanup", &d]);
    c.expect(1);
    assert_names_owner_and_remedy(&c.stderr, bob, &d, &c.line);
    let a = lib_as(&team, alice, "002", &s.dir, "try_read,cleanup");
    assert!(
        a.iter()
            .all(|x| x.starts_with(&format!("denied {} ", bob.uid))),
        "{a:?}"
    );
    // Made group-writable as the message says, alice gets past bob's dead reader.
    fs::set_permissions(s.state(), fs::Permissions::from_mode(0o2775)).expect("chmod");
    team.rwdir(alice, "002", &["write", "--no-wait", &d, "true"])
        .expect(0);
    assert!(s.files().is_empty());

    // DIR itself not writable by the group, without `.rwdir`: told whose DIR it is.
    let s = Shared::new(&team);
    fs::set_permissions(&s.dir, fs::Permissions::from_mode(0o2755)).expect("chmod");
    let r = team.rwdir(alice, "002", &["read", &s.d(), "true"]);
    r.expect(1);
    for part in [
        "failed to create state directory",
        "user root (uid 0)",
        "mkdir -m 2775",
    ] {
        r.check(r.stderr.contains(part), &format!("says {part:?}"));
    }
}
