//! Whatever sits at a lock name (garbage, nothing, 100 MiB, a symlink to a victim, a
//! FIFO, a directory) counts as held until it is older than the lease, never panics,
//! never blocks, costs bounded memory, and never lets the lock write through a symlink.
//! Foreign names are ignored and never removed.

#![allow(clippy::disallowed_methods)]

mod common;

use std::fs;
use std::io::ErrorKind;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use common::{age, names, plant, state, tempdir};
use rwdir::{DirLock, Error, Liveness};
use uuid::Uuid;

#[test]
fn child_entry() {
    common::child_entry();
}

const LEASE: Duration = Duration::from_secs(1);
/// Older than the lease.
const OLD: Duration = Duration::from_secs(10);

fn hostile_lock(dir: &Path) -> DirLock {
    DirLock::builder(dir)
        .lease(LEASE)
        .poll_interval(Duration::from_millis(1), Duration::from_millis(20))
        .build()
        .expect("build lock")
}

/// A fresh directory with its state directory made.
fn setup() -> (tempfile::TempDir, PathBuf, DirLock) {
    let dir = tempdir();
    let st = state(dir.path());
    fs::create_dir(&st).expect("mkdir .rwdir");
    let lk = hostile_lock(dir.path());
    (dir, st, lk)
}

fn slave_name() -> String {
    format!(".slave_lock-{}", Uuid::new_v4())
}

/// Runs `f` on another thread and fails if it does not return within 10 s (a lock
/// operation that blocks on a FIFO would hang the test otherwise).
fn bounded<T: Send + 'static>(what: &str, f: impl FnOnce() -> T + Send + 'static) -> T {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(f());
    });
    rx.recv_timeout(Duration::from_secs(10))
        .unwrap_or_else(|_| panic!("{what} blocked"))
}

/// The peak resident memory of this process (`VmHWM`), in KiB.
fn peak_rss_kib() -> u64 {
    fs::read_to_string("/proc/self/status")
        .expect("read /proc/self/status")
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("VmHWM")
}

/// A real record, cut in half: what a writer that crashed mid-write on a filesystem
/// without hard links would leave.
fn torn_record() -> Vec<u8> {
    let dir = tempdir();
    let lk = hostile_lock(dir.path());
    let r = lk.read().expect("read");
    let mut bytes = fs::read(r.path()).expect("read record");
    bytes.truncate(bytes.len() / 2);
    bytes
}

/// A real record of ourselves with one byte appended.
fn grown_record() -> Vec<u8> {
    let dir = tempdir();
    let lk = hostile_lock(dir.path());
    let r = lk.read().expect("read");
    let mut bytes = fs::read(r.path()).expect("read record");
    bytes.push(b'x');
    bytes
}

const HUGE: u64 = 100 * 1024 * 1024;

/// Malformed contents: name, bytes, and a size to extend the file to (sparse).
fn malformed() -> Vec<(&'static str, Vec<u8>, Option<u64>)> {
    vec![
        ("garbage", b"hello, I am not a record\n".to_vec(), None),
        ("empty", Vec::new(), None),
        ("binary", vec![0xff, 0xfe, 0x00, 0x80], None),
        ("torn record", torn_record(), None),
        ("grown record", grown_record(), None),
        ("100 MiB sparse", b"rwdir-holder 1\n".to_vec(), Some(HUGE)),
    ]
}

fn plant_malformed(path: &Path, bytes: &[u8], size: Option<u64>) {
    plant(path, bytes);
    if let Some(size) = size {
        fs::OpenOptions::new()
            .write(true)
            .open(path)
            .expect("open")
            .set_len(size)
            .expect("set_len");
    }
}

fn assert_malformed_holder(err: &Error, what: &str) {
    let h = err
        .holder()
        .unwrap_or_else(|| panic!("{what}: no holder named: {err}"));
    assert!(h.holder.is_none(), "{what}: parsed as a record: {h:?}");
    assert!(err.to_string().contains("malformed"), "{what}: {err}");
}

#[test]
fn malformed_writer_file_is_held_until_the_lease() {
    for (what, bytes, size) in malformed() {
        let (dir, st, lk) = setup();
        let master = st.join(".master_lock");
        plant_malformed(&master, &bytes, size);
        let peak = peak_rss_kib();

        let err = lk.try_read().expect_err(what);
        assert_eq!(err.kind(), ErrorKind::WouldBlock, "{what}");
        assert_malformed_holder(&err, what);
        let err = lk.try_write().expect_err(what);
        assert_eq!(err.kind(), ErrorKind::WouldBlock, "{what}");
        let t = Instant::now();
        let err = lk
            .try_write_for(Duration::from_millis(100))
            .expect_err(what);
        assert_eq!(err.kind(), ErrorKind::TimedOut, "{what}");
        assert!(t.elapsed() < Duration::from_secs(3), "{what}");
        let w = lk.status().expect("status").writer.expect(what);
        assert!(w.holder.is_none() && w.regular, "{what}");
        assert_eq!(w.liveness, Liveness::Unknown, "{what}");
        assert!(w.describe().contains("malformed"), "{what}");
        // Nothing of ours was left behind by the failed attempts.
        assert_eq!(names(&st), [".master_lock"], "{what}");

        age(&master, OLD);
        assert_eq!(
            lk.status().expect("status").writer.expect(what).liveness,
            Liveness::Dead,
            "{what}"
        );
        let g = lk.try_write().expect(what);
        let held = fs::metadata(&master).expect("stat");
        assert!(held.len() < 4096, "{what}: replaced by our own record");
        assert_eq!(
            lk.status()
                .expect("status")
                .writer
                .and_then(|e| e.holder)
                .map(|h| h.pid),
            Some(std::process::id()),
            "{what}"
        );
        drop(g);
        let grown = peak_rss_kib().saturating_sub(peak);
        assert!(grown < 32 * 1024, "{what}: peak memory grew by {grown} KiB");
        common::assert_only_token(dir.path());
    }
}

#[test]
fn malformed_reader_file_is_held_until_the_lease() {
    for (what, bytes, size) in malformed() {
        let (dir, st, lk) = setup();
        let name = slave_name();
        let slave = st.join(&name);
        plant_malformed(&slave, &bytes, size);

        // Readers share with it; a writer waits for it.
        drop(lk.try_read().expect(what));
        let err = lk.try_write().expect_err(what);
        assert_eq!(err.kind(), ErrorKind::WouldBlock, "{what}");
        assert_malformed_holder(&err, what);
        let st_now = lk.status().expect("status");
        assert_eq!(st_now.readers.len(), 1, "{what}");
        assert_eq!(st_now.readers[0].liveness, Liveness::Unknown, "{what}");
        assert!(lk.cleanup().expect("cleanup").is_empty(), "{what}");
        assert_eq!(
            common::non_token_names(&st),
            std::slice::from_ref(&name),
            "{what}: nothing of ours left"
        );

        age(&slave, OLD);
        let g = lk.try_write().expect(what);
        assert!(!slave.exists(), "{what}: the expired file was removed");
        drop(g);
        common::assert_only_token(dir.path());
    }
}

/// A victim file outside DIR, reached through a symlink at a lock name.
struct Victim {
    _dir: tempfile::TempDir,
    path: PathBuf,
    meta: fs::Metadata,
}

const PRECIOUS: &[u8] = b"precious data, not a lock file\n";

impl Victim {
    fn new() -> Victim {
        let dir = tempdir();
        let path = dir.path().join("victim");
        fs::write(&path, PRECIOUS).expect("write victim");
        fs::set_permissions(&path, fs::Permissions::from_mode(0o600)).expect("chmod");
        age(&path, Duration::from_secs(3600));
        let meta = fs::metadata(&path).expect("stat victim");
        Victim {
            _dir: dir,
            path,
            meta,
        }
    }

    fn assert_untouched(&self, when: &str) {
        let m = fs::metadata(&self.path).unwrap_or_else(|e| panic!("{when}: victim gone: {e}"));
        assert_eq!(fs::read(&self.path).expect("read"), PRECIOUS, "{when}");
        assert_eq!(m.mode(), self.meta.mode(), "{when}: mode changed");
        assert_eq!(m.mtime(), self.meta.mtime(), "{when}: mtime changed");
        assert_eq!(m.ino(), self.meta.ino(), "{when}: replaced");
        assert_eq!(m.nlink(), 1, "{when}: linked elsewhere");
    }
}

#[test]
fn symlink_at_writer_name_never_touches_its_target() {
    let (dir, st, lk) = setup();
    let victim = Victim::new();
    let master = st.join(".master_lock");
    std::os::unix::fs::symlink(&victim.path, &master).expect("symlink");

    let err = lk.try_read().expect_err("held while young");
    assert_malformed_holder(&err, "symlink");
    assert!(lk.try_write().is_err());
    assert!(lk.try_write_for(Duration::from_millis(100)).is_err());
    let w = lk.status().expect("status").writer.expect("shown");
    assert!(!w.regular && w.holder.is_none());
    assert!(lk.cleanup().expect("cleanup").is_empty());
    victim.assert_untouched("while young");

    age(&master, OLD);
    let g = lk.try_write().expect("expired symlink is replaced");
    let m = fs::symlink_metadata(&master).expect("stat");
    assert!(m.file_type().is_file(), "our own regular file now");
    victim.assert_untouched("after taking the lock");
    drop(g);
    victim.assert_untouched("after release");

    // cleanup removes an expired symlink at `.master_lock` (the link, not its target).
    std::os::unix::fs::symlink(&victim.path, &master).expect("symlink");
    age(&master, OLD);
    let removed = lk.cleanup().expect("cleanup");
    assert_eq!(removed.len(), 1);
    assert!(fs::symlink_metadata(&master).is_err());
    victim.assert_untouched("after cleanup");
    common::assert_only_token(dir.path());
}

#[test]
fn symlink_at_reader_name_never_touches_its_target() {
    let (dir, st, lk) = setup();
    let victim = Victim::new();
    let slave = st.join(slave_name());
    std::os::unix::fs::symlink(&victim.path, &slave).expect("symlink");

    drop(lk.try_read().expect("readers share"));
    let err = lk.try_write().expect_err("held while young");
    assert_malformed_holder(&err, "symlink");
    victim.assert_untouched("while young");

    age(&slave, OLD);
    // cleanup removes only regular files; a writer removes the expired link.
    assert!(lk.cleanup().expect("cleanup").is_empty());
    victim.assert_untouched("after cleanup");
    let g = lk.try_write().expect("expired symlink removed");
    assert!(fs::symlink_metadata(&slave).is_err());
    drop(g);
    victim.assert_untouched("after the writer");
    common::assert_only_token(dir.path());
}

#[test]
fn fifo_at_a_lock_name_never_blocks() {
    for name in [".master_lock".to_string(), slave_name()] {
        let (dir, st, lk) = setup();
        let fifo = st.join(&name);
        nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::from_bits_truncate(0o644))
            .expect("mkfifo");
        let l = lk.clone();
        let (w, r, s, p) = bounded("lock operations on a FIFO", move || {
            (
                l.try_write().map(drop),
                l.try_read().map(drop),
                l.status().map(|s| s.is_free()),
                l.cleanup_plan().map(|v| v.len()),
            )
        });
        assert_eq!(
            w.expect_err("held while young").kind(),
            ErrorKind::WouldBlock
        );
        assert!(!s.expect("status"), "the FIFO is shown");
        assert_eq!(p.expect("plan"), 0);
        if name == ".master_lock" {
            assert!(r.is_err());
        } else {
            r.expect("readers share");
        }
        age(&fifo, OLD);
        let l = lk.clone();
        bounded("taking the lock over an expired FIFO", move || {
            drop(l.try_write().expect("expired FIFO removed"))
        });
        assert!(fs::symlink_metadata(&fifo).is_err(), "{name}");
        common::assert_only_token(dir.path());
    }
}

#[test]
fn directory_at_a_lock_name() {
    // An empty directory: held while young, removed once expired.
    let (dir, st, lk) = setup();
    let master = st.join(".master_lock");
    fs::create_dir(&master).expect("mkdir");
    assert!(lk.try_read().is_err());
    assert!(lk.try_write().is_err());
    age(&master, OLD);
    drop(lk.try_write().expect("expired empty directory removed"));
    assert!(!master.exists());
    common::assert_only_token(dir.path());

    // A non-empty one is never emptied: the writer reports it, naming the path, and
    // leaves nothing of its own behind.
    let (_dir, st, lk) = setup();
    let slave = st.join(slave_name());
    fs::create_dir(&slave).expect("mkdir");
    fs::write(slave.join("inside"), b"keep").expect("write");
    age(&slave, OLD);
    let err = lk
        .try_write()
        .expect_err("cannot remove a non-empty directory");
    assert!(matches!(err, Error::Io { .. }), "{err:?}");
    assert_eq!(err.path(), slave);
    assert_eq!(fs::read(slave.join("inside")).expect("read"), b"keep");
    assert_eq!(
        common::non_token_names(&st),
        [slave.file_name().unwrap().to_string_lossy().into_owned()]
    );
    drop(lk.try_read().expect("readers are not concerned"));
}

#[test]
fn foreign_names_are_ignored_and_never_removed() {
    let (dir, st, lk) = setup();
    // A real record of a dead process, to put under names that are not lock names.
    let dead_record = {
        let mut c = common::Child::spawn("dead", dir.path());
        c.ok("read");
        let path = st.join(
            lk.status()
                .expect("status")
                .readers
                .first()
                .expect("reader")
                .name
                .clone(),
        );
        let bytes = fs::read(&path).expect("read");
        c.kill();
        fs::remove_file(path).expect("rm");
        bytes
    };
    let u = Uuid::new_v4().to_string();
    let foreign: Vec<(String, Vec<u8>)> = vec![
        ("notes.txt".into(), b"notes".to_vec()),
        (".nfs0001".into(), dead_record.clone()),
        (".master_lock.old".into(), dead_record.clone()),
        ("master_lock".into(), dead_record.clone()),
        (
            format!(".slave_lock-{}", u.to_uppercase()),
            dead_record.clone(),
        ),
        (format!(".slave_lock-{u}.bak"), dead_record.clone()),
        (format!(".pending_lock-{u}-01"), dead_record.clone()),
        (format!(".break-x-{u}"), dead_record.clone()),
        (".token-007".into(), Vec::new()),
        (".token-x".into(), Vec::new()),
    ];
    for (name, bytes) in &foreign {
        plant(&st.join(name), bytes);
        age(&st.join(name), Duration::from_secs(3600));
    }
    fs::create_dir(st.join("subdir")).expect("mkdir");
    fs::write(st.join("subdir/file"), b"x").expect("write");

    let check = |when: &str| {
        for (name, bytes) in &foreign {
            assert_eq!(
                fs::read(st.join(name)).unwrap_or_else(|e| panic!("{when}: {name}: {e}")),
                *bytes,
                "{when}: {name}"
            );
        }
        assert!(st.join("subdir/file").exists(), "{when}");
    };
    let s = lk.status().expect("status");
    assert!(s.is_free() && s.token.is_none() && s.other.is_empty());
    let r = lk.try_read().expect("foreign files block nobody");
    drop(r);
    let w = lk.try_write().expect("foreign files block nobody");
    assert_eq!(w.token().expect("token"), 1, "`.token-007` is not a token");
    let r = w.downgrade().expect("downgrade");
    drop(r);
    check("after read, write, downgrade");
    assert!(lk.cleanup().expect("cleanup").is_empty());
    check("after cleanup");
    assert!(lk.cleanup_all().expect("cleanup_all").is_empty());
    check("after cleanup_all");
    drop(dir);
}

#[test]
fn state_dir_that_is_not_a_directory_is_refused() {
    let target = tempdir();
    type Make<'a> = Box<dyn Fn(&Path) + 'a>;
    let cases: Vec<(&str, Make<'_>)> = vec![
        (
            "symlink to a directory",
            Box::new(|p: &Path| std::os::unix::fs::symlink(target.path(), p).expect("ln")),
        ),
        (
            "dangling symlink",
            Box::new(|p: &Path| {
                std::os::unix::fs::symlink(target.path().join("nowhere"), p).expect("ln")
            }),
        ),
        (
            "regular file",
            Box::new(|p: &Path| fs::write(p, b"a file").expect("write")),
        ),
    ];
    for (what, make) in cases {
        let dir = tempdir();
        let st = state(dir.path());
        make(&st);
        let lk = hostile_lock(dir.path());
        for err in [
            lk.try_read().map(drop).expect_err(what),
            lk.write().map(drop).expect_err(what),
            lk.status().map(drop).expect_err(what),
            lk.cleanup().map(drop).expect_err(what),
        ] {
            assert!(
                matches!(err, Error::NotADirectory { .. }),
                "{what}: {err:?}"
            );
            assert_eq!(err.path(), st, "{what}");
            assert!(err.to_string().contains(".rwdir"), "{what}: {err}");
        }
        assert!(names(target.path()).is_empty(), "{what}: target untouched");
    }
}
