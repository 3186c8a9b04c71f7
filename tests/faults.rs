//! Resource faults: a full filesystem (blocks or inodes), a read-only one, running out
//! of file descriptors, and DIR or its `.rwdir` removed, renamed or replaced while a
//! lock is held, for the library and the command.
//!
//! Every failed attempt must fail with a clear error that names a path and leaves no
//! file of its own behind; every held lock whose files are taken away must be reported
//! lost (the command: COMMAND gets SIGTERM, rwdir exits 74).
//!
//! Filesystem faults mount a small tmpfs and need root: without it (or if `mount`
//! fails) those tests pass with a printed note. Mounts are undone by a guard, also
//! when a test fails.

#![allow(clippy::disallowed_methods)]

mod common;
#[path = "cli/util.rs"]
mod util;

use std::fs;
use std::io::ErrorKind;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::run::{Ran, Report as _};
use common::state;
use nix::libc;
use rwdir::{DirLock, Error};

/// Chooses this file's own child role (see [`child_entry`]).
const ROLE_ENV: &str = "RWDIR_FAULTS_ROLE";
const DIR_ENV: &str = "RWDIR_FAULTS_DIR";

#[test]
fn child_entry() {
    common::child_entry_with(ROLE_ENV, &[("emfile", emfile_child)]);
}

/// A short lease, so that the heartbeat (every lease/3) notices a loss quickly.
const LEASE: Duration = Duration::from_millis(600);
/// The bound for one run of the command: generous; only a failing run reaches it.
const BOUND: Duration = Duration::from_secs(60);

fn lib(dir: &Path) -> DirLock {
    common::lock_with_lease(dir, LEASE)
}

/// The names in DIR/.rwdir that are not fencing tokens.
fn ours(dir: &Path) -> Vec<String> {
    common::non_token_names(&state(dir))
}

/// The operating system's error code under an [`Error`], if any.
fn errno(e: &Error) -> Option<i32> {
    let mut src = std::error::Error::source(e);
    while let Some(s) = src {
        if let Some(io) = s.downcast_ref::<std::io::Error>() {
            return io.raw_os_error();
        }
        src = s.source();
    }
    None
}

// ---------------------------------------------------------------------------------
// Running the command

/// Runs `cmd` with stdin closed; kills it and fails after [`BOUND`].
fn run(cmd: Command, line: String) -> Ran {
    common::run::run(cmd, line, BOUND)
}

/// `rwdir ARGS...`.
fn rwdir(args: &[&str]) -> Ran {
    let mut cmd = Command::new(util::rwdir_bin());
    cmd.args(args);
    run(cmd, format!("rwdir {}", args.join(" ")))
}

// ---------------------------------------------------------------------------------
// Mounts

fn is_root() -> bool {
    nix::unistd::geteuid().is_root()
}

/// A tmpfs mounted for one test; unmounted when dropped (lazily if busy), before its
/// mount point is removed.
struct Mount {
    point: PathBuf,
    _parent: tempfile::TempDir,
}

impl Mount {
    /// Mounts a tmpfs with `opts`; `None` (with a note) without root or if the mount
    /// fails.
    fn tmpfs(opts: &str, why: &str) -> Option<Mount> {
        if !is_root() {
            eprintln!("note: {why}: skipped (mounting a tmpfs needs root)");
            return None;
        }
        let parent = common::tempdir();
        let point = parent.path().join("mnt");
        fs::create_dir(&point).expect("mkdir mount point");
        let ok = Command::new("mount")
            .args(["-t", "tmpfs", "-o", opts, "rwdir-test"])
            .arg(&point)
            .status()
            .is_ok_and(|s| s.success());
        if !ok {
            eprintln!("note: {why}: skipped (`mount -t tmpfs -o {opts}` failed)");
            return None;
        }
        Some(Mount {
            point,
            _parent: parent,
        })
    }

    /// `mount -o remount,OPTS`.
    #[track_caller]
    fn remount(&self, opts: &str) {
        let st = Command::new("mount")
            .args(["-o", &format!("remount,{opts}")])
            .arg(&self.point)
            .status()
            .expect("run mount");
        assert!(st.success(), "remount,{opts} failed");
    }
}

impl Drop for Mount {
    fn drop(&mut self) {
        let umount = |lazy: bool| {
            let mut c = Command::new("umount");
            if lazy {
                c.arg("-l");
            }
            c.arg(&self.point)
                .stderr(Stdio::null())
                .status()
                .is_ok_and(|s| s.success())
        };
        if !umount(false) && !umount(true) {
            eprintln!("warning: could not unmount {}", self.point.display());
            // Do not let the temporary directory's removal reach into the mount.
            std::mem::forget(std::mem::replace(&mut self._parent, common::tempdir()));
        }
    }
}

// ---------------------------------------------------------------------------------
// A full filesystem

/// The memory page size: tmpfs allocates whole pages.
fn page_size() -> usize {
    // SAFETY: sysconf only reads a system value.
    usize::try_from(unsafe { libc::sysconf(libc::_SC_PAGESIZE) }).unwrap_or(4096)
}

/// Fills the filesystem at `dir` with one-page files until it is full; returns them.
fn fill_blocks(dir: &Path) -> Vec<PathBuf> {
    let page = vec![0x55u8; page_size()];
    let mut files = Vec::new();
    for i in 0.. {
        let p = dir.join(format!("filler-{i}"));
        match fs::write(&p, &page) {
            Ok(()) => files.push(p),
            Err(e) if e.raw_os_error() == Some(libc::ENOSPC) => {
                let _ = fs::remove_file(&p);
                return files;
            }
            Err(e) => panic!("fill: {e}"),
        }
    }
    unreachable!()
}

/// Uses up the inodes of the filesystem at `dir` with empty files; returns them.
fn fill_inodes(dir: &Path) -> Vec<PathBuf> {
    let mut files = Vec::new();
    for i in 0.. {
        let p = dir.join(format!("inode-{i}"));
        match fs::File::create(&p) {
            Ok(_) => files.push(p),
            Err(e) if e.raw_os_error() == Some(libc::ENOSPC) => return files,
            Err(e) => panic!("fill: {e}"),
        }
    }
    unreachable!()
}

/// What one attempt under a fault did.
#[derive(Debug, PartialEq, Eq)]
enum Outcome {
    Taken,
    Refused,
}

/// One library attempt of each kind on `dir` while space is short: each either takes
/// the lock (and releases it) or fails with `StorageFull`, naming a path in the state
/// directory (or the state directory itself) and leaving nothing of its own behind.
fn attempts_when_full(dir: &Path, what: &str) -> Vec<Outcome> {
    let lk = lib(dir);
    let mut outcomes = Vec::new();
    type Attempt = Box<dyn Fn(&DirLock) -> rwdir::Result<()>>;
    let attempts: Vec<(&str, Attempt)> = vec![
        ("try_read", Box::new(|l| l.try_read().map(drop))),
        ("try_write", Box::new(|l| l.try_write().map(drop))),
        (
            "write_for",
            Box::new(|l| l.try_write_for(Duration::from_millis(200)).map(drop)),
        ),
        (
            "downgrade",
            Box::new(|l| l.try_write()?.downgrade().map(drop)),
        ),
    ];
    for (name, attempt) in attempts {
        let before = ours(dir);
        match attempt(&lk) {
            Ok(()) => outcomes.push(Outcome::Taken),
            Err(e) => {
                assert_eq!(e.kind(), ErrorKind::StorageFull, "{what}: {name}: {e:?}");
                assert!(
                    e.path().starts_with(state(dir)),
                    "{what}: {name}: path {}",
                    e.path().display()
                );
                assert!(
                    e.to_string().contains(&e.path().display().to_string()),
                    "{what}: {name}: message names the path: {e}"
                );
                outcomes.push(Outcome::Refused);
            }
        }
        assert_eq!(
            ours(dir),
            before,
            "{what}: {name}: files left behind\n{}",
            common::dump(&state(dir))
        );
    }
    outcomes
}

/// The command, in the same situation: exit 0 (COMMAND ran) or 1 with one line that
/// says the disk is full and names the path; COMMAND never runs on failure.
fn commands_when_full(dir: &Path, outside: &Path, what: &str) -> Vec<Outcome> {
    let d = dir.display().to_string();
    let mut outcomes = Vec::new();
    for mode in ["read", "write"] {
        let marker = outside.join(format!("ran-{mode}"));
        let _ = fs::remove_file(&marker);
        let before = ours(dir);
        let m = marker.display().to_string();
        let r = rwdir(&[mode, "--no-wait", &d, "touch", &m]);
        match r.status.code() {
            Some(0) => {
                r.check(marker.exists(), "COMMAND ran");
                outcomes.push(Outcome::Taken);
            }
            Some(1) => {
                r.check(
                    r.stderr.lines().count() == 1
                        && r.stderr.starts_with("rwdir: ")
                        && r.stderr.contains("No space left on device")
                        && r.stderr.contains(&format!("{d}/.rwdir")),
                    "one line: disk full, naming the path",
                );
                r.check(!marker.exists(), "COMMAND did not run");
                outcomes.push(Outcome::Refused);
            }
            _ => panic!("{what}: unexpected exit{}", r.report()),
        }
        assert_eq!(ours(dir), before, "{what}: {mode}: files left behind");
    }
    outcomes
}

#[test]
fn a_full_filesystem_fails_cleanly_with_storage_full() {
    // Sixteen pages: a lock file takes one.
    let size = format!("size={}k,mode=0755", 16 * page_size() / 1024);
    let Some(m) = Mount::tmpfs(&size, "a full filesystem") else {
        return;
    };
    let outside = common::tempdir();
    let dir = m.point.join("locked");
    fs::create_dir_all(state(&dir)).expect("mkdir DIR/.rwdir");
    let mut fillers = fill_blocks(&m.point);
    // No page is free: everything fails, cleanly.
    let lib0 = attempts_when_full(&dir, "no free page");
    assert!(lib0.iter().all(|o| *o == Outcome::Refused), "{lib0:?}");
    let cli0 = commands_when_full(&dir, outside.path(), "no free page");
    assert!(cli0.iter().all(|o| *o == Outcome::Refused), "{cli0:?}");
    // Then one page more at a time: each attempt that gets as far as it can and then
    // finds the disk full undoes what it made (a queued writer's file, `.master_lock`,
    // a breaker's marker...), until there is room for everything.
    for free in 1..=4 {
        let p = fillers.pop().expect("a filler");
        fs::remove_file(p).expect("free a page");
        let what = format!("{free} free pages");
        let mut l = attempts_when_full(&dir, &what);
        let mut c = commands_when_full(&dir, outside.path(), &what);
        eprintln!("{what}: library {l:?}, command {c:?}");
        // A page of an unlinked file is freed at its last `close`. A test thread that
        // forks (other tests of this binary start processes) copies our descriptors
        // into its child until that child's `exec` closes them, so a page may come back
        // a moment late (seen once in 8 runs of the whole file on a busy machine). The
        // files must still be freed, so the measurement is taken again, a few times.
        for _ in 0..5 {
            if free < 4 || l.iter().chain(&c).all(|o| *o == Outcome::Taken) {
                break;
            }
            std::thread::sleep(Duration::from_millis(50));
            l = attempts_when_full(&dir, &what);
            c = commands_when_full(&dir, outside.path(), &what);
            eprintln!("{what}, again: library {l:?}, command {c:?}");
        }
        if free == 4 {
            assert!(l.iter().chain(&c).all(|o| *o == Outcome::Taken), "{what}");
        }
    }
    // The state directory itself cannot be made when the inodes run out.
    drop(m);
    let Some(m) = Mount::tmpfs("size=1m,nr_inodes=64,mode=0755", "no free inode") else {
        return;
    };
    let dir = m.point.join("locked");
    fs::create_dir(&dir).expect("mkdir DIR");
    let inodes = fill_inodes(&m.point);
    let e = lib(&dir).try_read().map(drop).expect_err("no inode");
    assert_eq!(e.kind(), ErrorKind::StorageFull, "{e:?}");
    assert_eq!(e.path(), state(&dir));
    let d = dir.display().to_string();
    let r = rwdir(&["write", &d, "true"]);
    r.expect(1).check(
        r.stderr.contains("No space left on device") && r.stderr.contains(".rwdir"),
        "names .rwdir",
    );
    // With the state directory there, but no inode for a lock file.
    fs::remove_file(&inodes[0]).expect("free an inode");
    fs::create_dir(state(&dir)).expect("mkdir .rwdir");
    let l = attempts_when_full(&dir, "no free inode");
    assert!(l.iter().all(|o| *o == Outcome::Refused), "{l:?}");
    let c = commands_when_full(&dir, outside.path(), "no free inode");
    assert!(c.iter().all(|o| *o == Outcome::Refused), "{c:?}");
    for p in &inodes[1..5] {
        fs::remove_file(p).expect("free an inode");
    }
    let l = attempts_when_full(&dir, "inodes freed");
    assert!(l.iter().all(|o| *o == Outcome::Taken), "{l:?}");
}

// ---------------------------------------------------------------------------------
// A read-only filesystem

#[test]
fn a_read_only_filesystem_fails_cleanly_and_status_still_works() {
    let Some(m) = Mount::tmpfs("size=1m,mode=0755", "a read-only filesystem") else {
        return;
    };
    let used = m.point.join("used");
    let fresh = m.point.join("fresh");
    fs::create_dir(&used).expect("mkdir");
    fs::create_dir(&fresh).expect("mkdir");
    // A token, and a real dead reader: a child takes a read lock and is killed.
    let w = lib(&used).try_write().expect("write");
    assert_eq!(w.token().expect("a token"), 1);
    drop(w);
    let dead = {
        let mut c = common::Child::spawn("doomed", &used);
        c.ok("read");
        c.kill();
        let files = ours(&used);
        assert_eq!(files.len(), 1, "{files:?}");
        state(&used).join(&files[0])
    };
    m.remount("ro");

    for (dir, st) in [(&used, true), (&fresh, false)] {
        let lk = lib(dir);
        for e in [
            lk.try_read().map(drop).expect_err("read-only"),
            lk.try_write().map(drop).expect_err("read-only"),
            lk.read().map(drop).expect_err("read-only"),
            lk.write().map(drop).expect_err("read-only"),
        ] {
            assert_eq!(e.kind(), ErrorKind::ReadOnlyFilesystem, "{e:?}");
            assert!(e.path().starts_with(state(dir)), "{}", e.path().display());
        }
        let s = lk.status().expect("status only reads");
        assert_eq!(s.readers.len(), usize::from(st));
        let d = dir.display().to_string();
        for mode in ["read", "write"] {
            let r = rwdir(&[mode, &d, "true"]);
            r.expect(1).check(
                r.stderr.contains("Read-only file system")
                    && r.stderr.contains(&format!("{d}/.rwdir")),
                "says read-only, naming the path",
            );
        }
        rwdir(&["status", &d]).expect(0);
        rwdir(&["status", "--json", &d]).expect(0);
        rwdir(&["cleanup", "--dry-run", &d]).expect(0);
    }
    // Cleanup of a dead holder's file cannot remove it: it says so, naming the file.
    let e = lib(&used).cleanup().expect_err("read-only");
    assert_eq!(e.kind(), ErrorKind::ReadOnlyFilesystem, "{e:?}");
    assert_eq!(e.path(), dead);
    let d = used.display().to_string();
    let r = rwdir(&["cleanup", &d]);
    r.expect(1).check(
        r.stderr.contains(&dead.display().to_string()) && r.stderr.contains("Read-only"),
        "names the dead reader's file",
    );
    let r = rwdir(&["cleanup", "--dry-run", &d]);
    r.expect(0)
        .check(r.stdout.contains("would remove"), "the plan still works");
    // Nothing to remove: nothing to fail.
    rwdir(&["cleanup", &fresh.display().to_string()]).expect(0);

    // Writable again: everything works, and the dead reader is recovered.
    m.remount("rw");
    let w = lib(&used).try_write().expect("write");
    assert_eq!(w.token().expect("token"), 2);
    drop(w);
    assert!(!dead.exists());
    drop(lib(&fresh).try_read().expect("read"));
}

// ---------------------------------------------------------------------------------
// Out of file descriptors

/// The child: lowers `RLIMIT_NOFILE`, uses up every descriptor, then frees them one
/// at a time; with each number of free descriptors it tries every operation, with a
/// fresh lock and with one whose state directory is already open. Prints one line per
/// attempt; asserts that a failure is `EMFILE` naming a path, and that nothing is
/// left behind.
fn emfile_child() {
    let dir = PathBuf::from(std::env::var_os(DIR_ENV).expect("dir"));
    let warm = lib(&dir);
    drop(warm.try_read().expect("warm up"));
    let open_now = fs::read_dir("/proc/self/fd").expect("fds").count();
    let limit = libc::rlimit {
        rlim_cur: (open_now + 32) as libc::rlim_t,
        rlim_max: (open_now + 32) as libc::rlim_t,
    };
    // SAFETY: setrlimit reads the struct we pass and changes only our own limits.
    let rc = unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &limit) };
    assert_eq!(rc, 0, "setrlimit: {}", std::io::Error::last_os_error());
    // Leaves exactly `free` descriptors free, whatever the locks hold open meanwhile.
    let mut fillers: Vec<fs::File> = Vec::new();
    let mut exactly = |free: usize| {
        loop {
            match fs::File::open("/dev/null") {
                Ok(f) => fillers.push(f),
                Err(e) if e.raw_os_error() == Some(libc::EMFILE) => break,
                Err(e) => panic!("open /dev/null: {e}"),
            }
        }
        for _ in 0..free {
            drop(fillers.pop());
        }
    };
    type Op = fn(&DirLock) -> rwdir::Result<()>;
    let ops: [(&str, Op); 6] = [
        ("try_read", |l| l.try_read().map(drop)),
        ("try_write", |l| l.try_write().map(drop)),
        ("write_for", |l| {
            l.try_write_for(Duration::from_millis(50)).map(drop)
        }),
        ("downgrade", |l| l.try_write()?.downgrade().map(drop)),
        ("status", |l| l.status().map(drop)),
        ("cleanup", |l| l.cleanup().map(drop)),
    ];
    for free in 0..=8 {
        for (which, lk) in [("fresh", lib(&dir)), ("warm", warm.clone())] {
            for (name, op) in ops {
                exactly(1);
                let before = ours(&dir);
                exactly(free);
                let result = op(&lk);
                exactly(1);
                let after = ours(&dir);
                assert_eq!(before, after, "{free} free, {which} {name}: left behind");
                let answer = match result {
                    Ok(()) => "ok".to_string(),
                    Err(e) => {
                        assert_eq!(errno(&e), Some(libc::EMFILE), "{name}: {e:?}");
                        assert!(e.path().starts_with(&dir), "{name}: {e}");
                        assert!(e.to_string().contains(&dir.display().to_string()));
                        "emfile".to_string()
                    }
                };
                println!("@@ {free} {which} {name} {answer}");
            }
        }
    }
    // A held lock survives running out of descriptors: checking and releasing it need
    // none.
    exactly(8);
    let held = warm.try_write().expect("write with 8 free");
    exactly(0);
    held.check().expect("check needs no descriptor");
    held.release().expect("release needs no descriptor");
    exactly(8);
}

#[test]
fn running_out_of_file_descriptors_fails_cleanly() {
    let t = util::Dir::new();
    let exe = std::env::current_exe().expect("current_exe");
    let mut cmd = Command::new(exe);
    cmd.args(["child_entry", "--exact", "--nocapture", "--test-threads=1"])
        .env(ROLE_ENV, "emfile")
        .env(DIR_ENV, &t.dir);
    let r = run(cmd, "emfile child".into());
    r.expect(0);
    let lines: Vec<&str> = r
        .stdout
        .lines()
        .filter_map(|l| l.find("@@ ").map(|i| &l[i + 3..]))
        .collect();
    r.check(lines.len() == 9 * 2 * 6, "one line per attempt");
    // No descriptor: every attempt fails with EMFILE; enough: every attempt works.
    for l in &lines {
        if l.starts_with("0 ") {
            r.check(l.ends_with(" emfile"), "fails without a descriptor");
        }
        if l.starts_with("8 ") {
            r.check(l.ends_with(" ok"), "works with 8");
        }
    }
    eprintln!("{}", lines.join("\n"));
    assert!(ours(&t.dir).is_empty());

    // The command, with 4 to 24 descriptors (with 3, the dynamic loader fails): it runs COMMAND, or says why not in one
    // line; it never panics, never dies of a signal, and leaves nothing behind.
    let d = t.d();
    let mut worked = Vec::new();
    for n in 4..=24u64 {
        for args in [
            vec!["write", "--no-wait", &d, "true"],
            vec!["read", "--no-wait", &d, "true"],
            vec!["status", &d],
            vec!["cleanup", &d],
        ] {
            let mut cmd = Command::new(util::rwdir_bin());
            cmd.args(&args);
            // SAFETY: setrlimit is async-signal-safe and touches only the child.
            unsafe {
                cmd.pre_exec(move || {
                    let l = libc::rlimit {
                        rlim_cur: n as libc::rlim_t,
                        rlim_max: n as libc::rlim_t,
                    };
                    if libc::setrlimit(libc::RLIMIT_NOFILE, &l) == 0 {
                        Ok(())
                    } else {
                        Err(std::io::Error::last_os_error())
                    }
                });
            }
            let r = run(cmd, format!("(nofile {n}) rwdir {}", args.join(" ")));
            match r.status.code() {
                Some(0) => worked.push((n, args[0])),
                Some(1) => {
                    r.check(
                        r.stderr.lines().count() == 1
                            && r.stderr.starts_with("rwdir: ")
                            && r.stderr.contains("Too many open files"),
                        "one line saying why",
                    );
                }
                _ => panic!("unexpected exit{}", r.report()),
            }
            assert!(ours(&t.dir).is_empty(), "left behind{}", r.report());
        }
    }
    for cmd in ["write", "read", "status", "cleanup"] {
        assert!(
            worked.iter().any(|&(n, c)| c == cmd && n == 24),
            "{cmd} works with 24 descriptors: {worked:?}"
        );
        assert!(
            !worked.iter().any(|&(n, c)| c == cmd && n == 4),
            "{cmd} cannot work with 4"
        );
    }
}

// ---------------------------------------------------------------------------------
// DIR or .rwdir taken away while a lock is held

/// What happened to a held lock after its directory was changed.
fn assert_lost(g: &rwdir::WriteGuard, what: &str) {
    let e = g.check().expect_err(what);
    assert!(matches!(e, Error::LockLost { .. }), "{what}: {e:?}");
    assert!(
        e.path().ends_with(".master_lock"),
        "{what}: {}",
        e.path().display()
    );
    // The heartbeat notices too (every lease/3): `is_lost` becomes true.
    let start = Instant::now();
    while !g.is_lost() {
        assert!(
            start.elapsed() < common::LONG,
            "{what}: heartbeat never noticed"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
}

#[test]
fn removing_dir_or_its_state_dir_loses_the_lock() {
    type Change = fn(&Path);
    let changes: [(&str, Change); 4] = [
        ("DIR removed", |dir| {
            fs::remove_dir_all(dir).expect("rm -rf DIR")
        }),
        (".rwdir removed", |dir| {
            fs::remove_dir_all(state(dir)).expect("rm -rf .rwdir")
        }),
        (".rwdir renamed", |dir| {
            fs::rename(state(dir), dir.join(".rwdir.old")).expect("mv .rwdir")
        }),
        (".rwdir replaced by a copy", |dir| {
            let copy = dir.join(".rwdir.new");
            fs::create_dir(&copy).expect("mkdir");
            for n in common::names(&state(dir)) {
                fs::copy(state(dir).join(&n), copy.join(&n)).expect("copy");
            }
            fs::rename(state(dir), dir.join(".rwdir.old")).expect("mv");
            fs::rename(&copy, state(dir)).expect("mv");
        }),
    ];
    for (what, change) in changes {
        let t = util::Dir::new();
        let lk = lib(&t.dir);
        let w = lk.write().expect("write");
        let r = {
            // A reader of another directory is not concerned.
            let other = util::Dir::new();
            let g = lib(&other.dir).read().expect("read");
            (other, g)
        };
        change(&t.dir);
        assert_lost(&w, what);
        r.1.check().expect("another directory's lock");
        let e = w.release().expect_err(what);
        assert!(matches!(e, Error::LockLost { .. }), "{what}: {e:?}");
        if what.contains("copy") {
            // The copy of `.master_lock` names this process, which is alive: to
            // everyone else the lock is still held, the safe side (only `cleanup
            // --all` or this process's exit ends that: never restore `.rwdir` from a
            // backup while its holders may run).
            let e = lk.try_write().map(drop).expect_err(what);
            assert_eq!(common::holder_pid(&e), Some(std::process::id()), "{e:?}");
            assert_eq!(lk.cleanup_all().expect("cleanup_all").len(), 1, "{what}");
            drop(lk.try_write().expect(what));
        } else if t.dir.exists() {
            // The lock on DIR is free for others: a new writer gets in at once.
            let w2 = lk.try_write().expect(what);
            drop(w2);
        } else {
            let e = lk.try_write().map(drop).expect_err(what);
            assert_eq!(e.kind(), ErrorKind::NotFound, "{what}: {e:?}");
            assert_eq!(e.path(), t.dir, "{what}");
        }
    }
    // A reader, likewise.
    let t = util::Dir::new();
    let g = lib(&t.dir).read().expect("read");
    fs::rename(state(&t.dir), t.dir.join(".rwdir.old")).expect("mv");
    let e = g.check().expect_err("lost");
    assert!(matches!(e, Error::LockLost { .. }), "{e:?}");
}

/// Renaming DIR moves the lock with it: the holder keeps it, contenders that use the
/// new name are kept out, and releasing it leaves the renamed directory clean. (A
/// process that keeps using the old name locks whatever is there now: see
/// `docs/threat-model.md`.)
#[test]
fn renaming_dir_moves_the_lock_with_it() {
    let t = util::Dir::new();
    let moved = t.path("moved");
    let lk = lib(&t.dir);
    let w = lk.write().expect("write");
    fs::rename(&t.dir, &moved).expect("mv DIR");
    w.check().expect("still held");
    let there = lib(&moved);
    // The same lock under its new name: this thread's own writer is in the way ...
    let e = there.try_read().map(drop).expect_err("held");
    assert_eq!(e.kind(), ErrorKind::Deadlock, "{e}");
    // ... and another thread is kept out.
    let e = std::thread::scope(|s| s.spawn(|| there.try_read().map(drop)).join())
        .expect("thread")
        .expect_err("held");
    assert_eq!(e.kind(), ErrorKind::WouldBlock);
    assert_eq!(
        there
            .status()
            .expect("status")
            .writer
            .and_then(|e| e.holder)
            .map(|h| h.pid),
        Some(std::process::id())
    );
    let e = lk.try_read().map(drop).expect_err("gone");
    assert_eq!(e.kind(), ErrorKind::NotFound);
    w.release().expect("release");
    common::assert_only_token(&moved);
    drop(there.try_write().expect("free"));
}

/// A COMMAND that reports SIGTERM in `$0.trapped` and exits 0. Ready when `$0` exists.
const TERM_TRAP: &str = r#"trap 'echo TERM > "$0.trapped"; exit 0' TERM
: > "$0"
while :; do sleep 0.1; done"#;

/// Starts `rwdir MODE DIR sh -c TERM_TRAP READY`, ready when COMMAND runs.
fn start_trapped(t: &util::Dir, mode: &str, name: &str) -> util::Holder {
    let ready = t.path(name);
    let stderr = t.path(&format!("{name}.stderr"));
    let mut cmd = Command::new(util::rwdir_bin());
    cmd.current_dir(t.root())
        .args([mode, &t.d(), "sh", "-c", TERM_TRAP])
        .arg(&ready)
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(fs::File::create(&stderr).expect("stderr file"));
    let child = cmd.spawn().expect("spawn rwdir");
    let h = util::Holder::from_parts(
        child,
        ready,
        stderr,
        format!("rwdir {mode} DIR sh -c TERM_TRAP"),
        t.root(),
    );
    h.wait_ready();
    h
}

#[test]
fn the_command_stops_command_when_dir_or_its_state_dir_goes() {
    type Change = fn(&util::Dir);
    let changes: [(&str, Change); 3] = [
        ("DIR removed", |t| {
            fs::remove_dir_all(&t.dir).expect("rm -rf DIR")
        }),
        (".rwdir removed", |t| {
            fs::remove_dir_all(t.state()).expect("rm -rf .rwdir")
        }),
        (".rwdir renamed", |t| {
            fs::rename(t.state(), t.dir.join(".rwdir.old")).expect("mv .rwdir")
        }),
    ];
    for (what, change) in changes {
        for mode in ["read", "write"] {
            let t = util::Dir::new();
            let name = format!("{mode}-cmd");
            let h = start_trapped(&t, mode, &name);
            change(&t);
            let run = h.wait();
            run.expect_code(74);
            let trapped =
                fs::read_to_string(t.path(&format!("{name}.trapped"))).unwrap_or_default();
            run.check(trapped.trim() == "TERM", "COMMAND got SIGTERM");
            run.check(
                run.stderr.contains("rwdir: lock lost: "),
                &format!("{what}: says the lock was lost"),
            );
        }
    }
}

#[test]
fn the_command_keeps_its_lock_when_dir_is_renamed() {
    let t = util::Dir::new();
    let h = t.hold("write", &[], "holder");
    let moved = t.path("moved");
    fs::rename(&t.dir, &moved).expect("mv DIR");
    let m = moved.display().to_string();
    let r = rwdir(&["write", "--no-wait", &m, "true"]);
    r.expect(75).check(
        r.stderr.contains(&format!("pid {}", h.pid())),
        "names the holder",
    );
    let run = h.release();
    run.expect_code(0);
    common::assert_only_token(&moved);
}
