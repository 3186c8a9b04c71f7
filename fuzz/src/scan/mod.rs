//! Target `dir_scan`: a state directory full of hostile entries, then a sequence of library
//! calls on it, each checked. See `FUZZING.md` for the properties.

// Planting hostile files in a scratch directory is the point of this module.
#![allow(clippy::disallowed_methods)]

mod check;
mod input;
mod plant;

use std::fs;
use std::io;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::{Mutex, OnceLock, PoisonError};
use std::time::{Duration, Instant, SystemTime};

use rwdir::internals::LockName;
use rwdir::{DirLock, Holder, Liveness, ReadGuard, WriteGuard};

pub use input::*;

/// The lease given to the lock: planted files with an old mtime are expired, fresh ones
/// live for this long, future ones for the whole run.
pub const SCAN_LEASE: Duration = Duration::from_secs(1);
/// The longest any single call may take. Calls never wait (`try_*`), except `cleanup`
/// breaking a dead `.master_lock`, which waits at most 20 polls of 1 ms.
pub const SCAN_OP_LIMIT: Duration = Duration::from_secs(3);
const MAX_ENTRIES: usize = 24;
const MAX_OPS: usize = 12;
const MAX_SPARSE: u64 = 64 << 20;
const VICTIM: &[u8] = b"victim: the fuzzer checks that these bytes never change\n";
const VICTIM_MODE: u32 = 0o640;

/// A scratch area for `dir_scan`: `BASE/locked` is the locked directory, `BASE/victim`
/// and `BASE/victim-dir` are what planted links point at. Reused between cases; each
/// case empties the state directory before and after.
#[derive(Debug)]
pub struct Scanner {
    locked: PathBuf,
    state: PathBuf,
    victim: PathBuf,
    victim_dir: PathBuf,
    nowhere: PathBuf,
    dead_pid: u32,
    /// This process as the library records it (see [`this_process`]).
    id: Holder,
}

/// [`Scanner::scan`] in a per-process scratch directory `rwdir-fuzz-<pid>` under
/// `/dev/shm` (tmpfs: fast), or under `$RWDIR_FUZZ_DIR` if set, or the temporary
/// directory; those of processes that are gone are removed first. Calls are serialized.
pub fn scan(input: &ScanInput) {
    static SCANNER: OnceLock<Mutex<Scanner>> = OnceLock::new();
    let scanner = SCANNER.get_or_init(|| {
        let root = std::env::var_os("RWDIR_FUZZ_DIR")
            .map(PathBuf::from)
            .or_else(|| Some(PathBuf::from("/dev/shm")).filter(|p| p.is_dir()))
            .unwrap_or_else(std::env::temp_dir);
        // Scratch areas of earlier fuzzing processes that are gone (libFuzzer exits
        // without running destructors): removed, so that runs do not pile up in tmpfs.
        for e in fs::read_dir(&root).into_iter().flatten().flatten() {
            let name = e.file_name();
            let pid = name.to_str().and_then(|n| n.strip_prefix("rwdir-fuzz-"));
            if let Some(pid) = pid.and_then(|p| p.parse::<i32>().ok())
                && nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), None)
                    == Err(nix::errno::Errno::ESRCH)
            {
                let _ = fs::remove_dir_all(e.path());
            }
        }
        let base = root.join(format!("rwdir-fuzz-{}", std::process::id()));
        let _ = fs::remove_dir_all(&base);
        Mutex::new(Scanner::new(&base).expect("make the scratch directory"))
    });
    // A panic aborts the fuzzing process, so a poisoned lock is never seen again.
    scanner
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .scan(input);
}

/// A planted entry, as found on disk right after planting.
#[derive(Debug)]
struct Planted {
    name: Vec<u8>,
    path: PathBuf,
    lock: Option<LockName>,
    ino: (u64, u64),
    mtime: SystemTime,
    regular: bool,
    /// A directory with files in it (cannot be removed by `unlink`/`rmdir`).
    non_empty_dir: bool,
    /// What the library must read from it: the record, or `None` (malformed).
    holder: Option<Holder>,
    /// Must survive every call (foreign name, live owner, unexpired lease).
    protected: bool,
    /// Surely dead: `cleanup` must remove it (a regular file at a unique name).
    doomed: bool,
    /// What `status` must say of its owner, when sure.
    liveness: Option<Liveness>,
}

impl Planted {
    fn present(&self) -> bool {
        fs::symlink_metadata(&self.path).is_ok_and(|m| (m.dev(), m.ino()) == self.ino)
    }
}

/// This process, its parent and its group, for the oracles.
struct Me {
    /// Host, boot id, pid namespace, pid and start time of this process.
    id: Holder,
    ppid: u32,
    parent_start: Option<u64>,
    pgid: u32,
}

impl Me {
    fn get(id: &Holder) -> Me {
        let ppid = u32::try_from(nix::unistd::getppid().as_raw()).unwrap_or(0);
        Me {
            id: id.clone(),
            ppid,
            parent_start: start_time(ppid),
            pgid: u32::try_from(nix::unistd::getpgrp().as_raw()).unwrap_or(0),
        }
    }

    /// Judged exactly (same boot id and pid namespace).
    fn same_host(&self, h: &Holder) -> bool {
        !self.id.boot_id.is_empty()
            && h.boot_id == self.id.boot_id
            && self.id.pidns != 0
            && h.pidns == self.id.pidns
    }

    /// Surely alive: this process, the parent, or this process group.
    fn alive(&self, h: &Holder) -> bool {
        self.same_host(h)
            && ((h.pid == self.id.pid && h.start == self.id.start)
                || (h.pid == self.ppid && self.parent_start == Some(h.start))
                || (self.pgid > 1 && h.pgid == self.pgid))
    }

    /// Surely dead: a previous incarnation of this pid, no process group.
    fn dead(&self, h: &Holder) -> bool {
        self.same_host(h) && h.pid == self.id.pid && h.start != self.id.start && h.pgid == 0
    }
}

struct Guards {
    reads: Vec<ReadGuard>,
    writes: Vec<WriteGuard>,
}

impl Guards {
    /// Our guards' files: each one's lock file, and a write guard's pending file, which
    /// it keeps while it holds (V8, docs/protocol-notes.md): the `.pending_lock-*` whose
    /// record has the nonce of the `.master_lock` record.
    fn paths(&self) -> Vec<PathBuf> {
        let nonce = |path: &Path| {
            std::fs::read(path)
                .ok()
                .and_then(|b| rwdir::Holder::parse(&b))
                .map(|h| h.nonce)
        };
        let mut paths: Vec<PathBuf> = self.reads.iter().map(ReadGuard::path).collect();
        for w in &self.writes {
            let master = w.path();
            if let (Some(n), Some(state)) = (nonce(&master), master.parent()) {
                let queue = std::fs::read_dir(state).into_iter().flatten().flatten();
                paths.extend(
                    queue
                        // Regular files only: a planted FIFO would block the read.
                        .filter(|e| e.file_type().is_ok_and(|t| t.is_file()))
                        .filter(|e| {
                            e.file_name()
                                .to_string_lossy()
                                .starts_with(".pending_lock-")
                        })
                        .map(|e| e.path())
                        .filter(|p| nonce(p) == Some(n)),
                );
            }
            paths.push(master);
        }
        paths
    }

    fn release_all(&mut self, what: &str) {
        for g in self.writes.drain(..) {
            if let Err(e) = g.release() {
                panic!("{what}: releasing a write guard failed: {e:?}");
            }
        }
        for g in self.reads.drain(..) {
            if let Err(e) = g.release() {
                panic!("{what}: releasing a read guard failed: {e:?}");
            }
        }
    }
}

impl Scanner {
    /// Makes the scratch area under `base` (created if needed).
    pub fn new(base: &Path) -> io::Result<Scanner> {
        let id = this_process(&base.join("identity"))?;
        let s = Scanner {
            locked: base.join("locked"),
            state: base.join("locked").join(".rwdir"),
            victim: base.join("victim"),
            victim_dir: base.join("victim-dir"),
            nowhere: base.join("nowhere"),
            dead_pid: dead_pid(),
            id,
        };
        fs::create_dir_all(&s.locked)?;
        s.restore_victims()?;
        Ok(s)
    }

    fn restore_victims(&self) -> io::Result<()> {
        if fs::read(&self.victim).ok().as_deref() != Some(VICTIM) {
            let _ = fs::remove_file(&self.victim);
            fs::write(&self.victim, VICTIM)?;
        }
        fs::set_permissions(&self.victim, fs::Permissions::from_mode(VICTIM_MODE))?;
        fs::create_dir_all(&self.victim_dir)?;
        fs::write(self.victim_dir.join("keep"), VICTIM)?;
        Ok(())
    }

    /// Empties the state directory (and makes it a directory again).
    fn reset(&self) {
        match fs::symlink_metadata(&self.state) {
            Ok(m) if m.is_dir() => {
                for e in fs::read_dir(&self.state).expect("list the state directory") {
                    let e = e.expect("list the state directory");
                    let p = e.path();
                    let is_dir = e.file_type().is_ok_and(|t| t.is_dir());
                    let r = if is_dir {
                        fs::remove_dir_all(&p)
                    } else {
                        fs::remove_file(&p)
                    };
                    r.unwrap_or_else(|e| panic!("remove {}: {e}", p.display()));
                }
            }
            Ok(_) => fs::remove_file(&self.state).expect("remove the state path"),
            Err(_) => {}
        }
        let _ = fs::create_dir(&self.state);
        self.restore_victims().expect("restore the victims");
    }

    /// Plants `input`'s entries, runs its calls, and checks every property; panics on a
    /// violation. See `FUZZING.md` for the list.
    pub fn scan(&self, input: &ScanInput) {
        self.reset();
        let me = Me::get(&self.id);
        let planted = self.plant(input, &me);
        let lock = DirLock::builder(&self.locked)
            .lease(SCAN_LEASE)
            .poll_interval(Duration::from_millis(1), Duration::from_millis(1))
            .build()
            .expect("build the lock");
        let mut guards = Guards {
            reads: Vec::new(),
            writes: Vec::new(),
        };
        // Fencing tokens this run's `try_write` calls created (granted or not: a writer
        // that gives up after taking its token leaves it, so that tokens keep growing).
        let mut minted: Vec<u64> = Vec::new();
        for (i, op) in input.ops.iter().take(MAX_OPS).enumerate() {
            let what = format!("op {i} {op:?}");
            let before = self.tokens();
            let started = Instant::now();
            // Each call on a thread of its own, as if another process made it: the
            // guards kept from earlier calls are then in its way as another process's
            // are (a thread's own guards would only give `WouldDeadlock`, which
            // `tests/threads.rs` checks), and the protocol is what is fuzzed.
            let result = std::thread::scope(|s| {
                let call = s.spawn(|| self.run(&lock, *op, &mut guards, &me, &planted, &what));
                call.join()
                    .unwrap_or_else(|panic| std::panic::resume_unwind(panic))
            });
            let took = started.elapsed();
            assert!(took < SCAN_OP_LIMIT, "{what} took {took:?}");
            let new: Vec<u64> = self
                .tokens()
                .into_iter()
                .filter(|k| !before.contains(k))
                .collect();
            let max_before = before.last().copied();
            match (op, new.as_slice()) {
                (_, []) => {}
                (Op::TryWrite { .. }, &[t]) => {
                    assert!(
                        max_before.is_none_or(|m| t > m),
                        "{what}: token {t} not above {max_before:?}"
                    );
                    minted.push(t);
                }
                _ => panic!("{what}: made tokens {new:?}"),
            }
            match result {
                Ok(Some(token)) => {
                    assert_eq!(new, [token], "{what}: granted token {token}");
                    // T4 removes the lower tokens, but leaves one it cannot remove (a
                    // non-empty directory at its name).
                    let stuck = |k: u64| {
                        planted.iter().any(|p| {
                            p.lock == Some(LockName::Token(k)) && p.non_empty_dir && p.present()
                        })
                    };
                    let below: Vec<u64> = self
                        .tokens()
                        .into_iter()
                        .filter(|&k| k < token && !stuck(k))
                        .collect();
                    assert!(
                        below.is_empty(),
                        "{what}: tokens {below:?} left below {token}"
                    );
                }
                Ok(None) => {}
                Err(e) => self.check_error(&e, *op, &planted, &what),
            }
            self.check_files(&planted, &guards, &minted, &what);
        }
        for g in &guards.reads {
            g.check().expect("a kept read guard was lost");
        }
        for g in &guards.writes {
            g.check().expect("a kept write guard was lost");
        }
        guards.release_all("end");
        self.check_files(&planted, &guards, &minted, "end");
        self.check_victims();
        drop(lock);
        assert_eq!(
            self.kept_files(&planted),
            0,
            "the lock's drop removes its kept file"
        );
        self.reset();
    }

    /// Runs one call; `Ok(Some(token))` for a write lock granted.
    fn run(
        &self,
        lock: &DirLock,
        op: Op,
        guards: &mut Guards,
        me: &Me,
        planted: &[Planted],
        what: &str,
    ) -> rwdir::Result<Option<u64>> {
        match op {
            Op::Status => {
                let st = lock.status()?;
                self.check_status(&st, me, planted, guards, what);
            }
            Op::Plan { all } => {
                let plan = if all {
                    lock.cleanup_all_plan()?
                } else {
                    lock.cleanup_plan()?
                };
                self.check_plan(&plan, all, planted, what);
            }
            Op::TryRead { hold } => {
                let g = lock.try_read()?;
                assert!(g.path().starts_with(&self.state), "{what}: {:?}", g.path());
                if hold {
                    guards.reads.push(g);
                } else {
                    g.release()
                        .unwrap_or_else(|e| panic!("{what}: release failed: {e:?}"));
                }
            }
            Op::TryWrite { hold } => {
                let g = lock.try_write()?;
                let token = g.token()?;
                assert_eq!(g.path(), self.state.join(".master_lock"), "{what}");
                if hold {
                    guards.writes.push(g);
                } else {
                    g.release()
                        .unwrap_or_else(|e| panic!("{what}: release failed: {e:?}"));
                }
                return Ok(Some(token));
            }
            Op::Downgrade => {
                if let Some(w) = guards.writes.pop() {
                    let r = w
                        .downgrade()
                        .unwrap_or_else(|e| panic!("{what}: downgrade failed: {e:?}"));
                    guards.reads.push(r);
                }
            }
            Op::Release => guards.release_all(what),
            Op::Cleanup => {
                let removed = lock.cleanup()?;
                self.check_cleanup(&removed, planted, what);
            }
        }
        Ok(None)
    }
}

/// This process as the library writes it into its records (host, boot id, pid
/// namespace, pid, start time): the holder of a read lock taken on `dir` (created).
fn this_process(dir: &Path) -> io::Result<Holder> {
    fs::create_dir_all(dir)?;
    let lock = DirLock::new(dir).map_err(io::Error::other)?;
    let guard = lock.try_read().map_err(io::Error::other)?;
    let status = lock.status().map_err(io::Error::other)?;
    guard.release().map_err(io::Error::other)?;
    status
        .readers
        .into_iter()
        .find_map(|e| e.holder)
        .ok_or_else(|| io::Error::other("no record for our own read lock"))
}

/// Field 22 of `/proc/PID/stat`: the start time in clock ticks after boot.
fn start_time(pid: u32) -> Option<u64> {
    let stat = fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name (field 2) is in parentheses and may contain anything, so count
    // fields from the last ')': field 3 comes first.
    let (_, rest) = stat.rsplit_once(')')?;
    rest.split_ascii_whitespace().nth(19)?.parse().ok()
}

/// The pid of a child that has been spawned and reaped (or, failing that, a pid above
/// `pid_max`).
fn dead_pid() -> u32 {
    static PID: OnceLock<u32> = OnceLock::new();
    *PID.get_or_init(|| {
        std::process::Command::new("true")
            .spawn()
            .and_then(|mut c| {
                let pid = c.id();
                c.wait().map(|_| pid)
            })
            .unwrap_or(i32::MAX as u32)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::names::NameFields;

    fn rec(place: Place, who: Who) -> RecordSpec {
        RecordSpec {
            kind: 0,
            host: None,
            place,
            who,
            pgid: Pgid::None,
            nonce: 7,
            since_ns: 1,
            lease_ms: 1000,
        }
    }

    fn entry(name: NameSpec, node: NodeSpec, mtime: MtimeSpec) -> EntrySpec {
        EntrySpec { name, node, mtime }
    }

    const U: u128 = 0x0a1b_2c3d_0000_4000_8000_0000_0000_0001;

    #[test]
    fn a_hostile_directory_is_survived() {
        let base = tempfile::tempdir().expect("tempdir");
        let s = Scanner::new(base.path()).expect("scanner");
        let input = ScanInput {
            state: StateSpec::Dir,
            entries: vec![
                entry(
                    NameSpec::Lock(NameFields::Master),
                    NodeSpec::File(ContentSpec::Record(rec(Place::SameHost, Who::DeadChild))),
                    MtimeSpec::Fresh,
                ),
                entry(
                    NameSpec::Lock(NameFields::Slave { uuid: U }),
                    NodeSpec::Symlink(LinkTarget::Victim),
                    MtimeSpec::Old,
                ),
                entry(
                    NameSpec::Lock(NameFields::Pending { ns: 1, uuid: U }),
                    NodeSpec::Fifo,
                    MtimeSpec::Future,
                ),
                entry(
                    NameSpec::Near(NameFields::Slave { uuid: U }, Mutation::Upper),
                    NodeSpec::File(ContentSpec::Empty),
                    MtimeSpec::Old,
                ),
                entry(
                    NameSpec::Lock(NameFields::Tmp { uuid: U }),
                    NodeSpec::Sparse(ContentSpec::Record(rec(Place::OtherBoot, Who::Me)), 1 << 26),
                    MtimeSpec::Old,
                ),
                entry(
                    NameSpec::Lock(NameFields::Slave { uuid: U + 1 }),
                    NodeSpec::File(ContentSpec::Record(rec(Place::SameHost, Who::Me))),
                    MtimeSpec::Old,
                ),
                entry(
                    NameSpec::Lock(NameFields::Token(9)),
                    NodeSpec::Dir { files: 0 },
                    MtimeSpec::Old,
                ),
            ],
            ops: vec![
                Op::Status,
                Op::Plan { all: false },
                Op::Plan { all: true },
                Op::TryRead { hold: true },
                Op::TryWrite { hold: false },
                Op::Cleanup,
                Op::Status,
                Op::Release,
            ],
        };
        s.scan(&input);
        s.scan(&ScanInput {
            state: StateSpec::SymlinkToDir,
            entries: Vec::new(),
            ops: vec![Op::Status, Op::TryRead { hold: false }, Op::Cleanup],
        });
    }
}
