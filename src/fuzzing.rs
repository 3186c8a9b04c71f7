//! Entry points for the fuzz targets in `fuzz/`. Not part of the public API: no
//! stability promise, hidden from the docs.
//!
//! Each target's whole logic lives here, in functions that panic when a property is
//! violated. The fuzz targets only decode their input (with `arbitrary`) and call them,
//! so every crash they find becomes a plain test calling the same function
//! (`tests/fuzz_regressions.rs`). See `FUZZING.md` for the properties and how to run.

// Planting hostile files in a scratch directory is the point of this module.
#![allow(clippy::disallowed_methods)]

use std::collections::BTreeSet;
use std::ffi::OsStr;
use std::fs;
use std::io::{self, Write as _};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use nix::fcntl::AT_FDCWD;
use nix::sys::stat::{Mode, UtimensatFlags, utimensat};
use nix::sys::time::TimeSpec;
use parking_lot::Mutex;
use uuid::Uuid;

use crate::entry::Entry;
use crate::error::Error;
use crate::fsops::Listing;
use crate::holder::{Holder, Kind, MAX_RECORD, sanitize};
use crate::names::LockName;
use crate::status::Status;
use crate::sys;
use crate::{DirLock, Liveness, ReadGuard, WriteGuard};

const KINDS: [Kind; 5] = [
    Kind::Read,
    Kind::Write,
    Kind::Pending,
    Kind::Break,
    Kind::Token,
];

// ---------------------------------------------------------------------------------------
// holder_parse

/// Target `holder_parse`: [`holder_parse`] on the raw bytes, then, if the same bytes
/// decoded as one, [`holder_fields`] on a structured record.
pub fn holder_target(data: &[u8], fields: Option<&HolderFields>) {
    holder_parse(data);
    if let Some(f) = fields {
        holder_fields(f);
    }
}

/// Arbitrary bytes: [`Holder::parse`] never panics, and a record it accepts is canonical:
/// `format()` gives back exactly the input, which parses to the same holder.
pub fn holder_parse(data: &[u8]) {
    let Some(h) = Holder::parse(data) else { return };
    let text = h.format();
    assert!(
        text.as_bytes() == data,
        "a non-canonical record parsed:\n{:?}\nformats as\n{text:?}",
        String::from_utf8_lossy(data)
    );
    assert_eq!(
        Holder::parse(text.as_bytes()).as_ref(),
        Some(&h),
        "format then parse changed the record"
    );
}

/// Every field of a holder record, with any value (`Holder` is `#[non_exhaustive]`, so
/// the fuzz crate cannot build one itself).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct HolderFields {
    /// Index into the kinds (read, write, pending, break, token), modulo 5.
    pub kind: u8,
    /// Host name, any string (the format sanitizes it).
    pub host: String,
    /// Boot id, any string (the format sanitizes it).
    pub boot_id: String,
    /// Pid namespace inode.
    pub pidns: u64,
    /// Process id.
    pub pid: u32,
    /// Process start time.
    pub start: u64,
    /// Process group.
    pub pgid: u32,
    /// The nonce, as the uuid's 128 bits.
    pub nonce: u128,
    /// Creation time in nanoseconds.
    pub since_ns: u64,
    /// Lease in milliseconds.
    pub lease_ms: u64,
}

impl HolderFields {
    /// The holder these fields describe (host and boot id as given, unsanitized).
    pub fn to_holder(&self) -> Holder {
        Holder {
            kind: KINDS[usize::from(self.kind) % KINDS.len()],
            host: self.host.clone(),
            boot_id: self.boot_id.clone(),
            pidns: self.pidns,
            pid: self.pid,
            start: self.start,
            pgid: self.pgid,
            nonce: Uuid::from_u128(self.nonce),
            since_ns: self.since_ns,
            lease_ms: self.lease_ms,
        }
    }
}

/// A structured holder: `format()` fits in a record, parses back to the holder with its
/// host and boot id sanitized, and sanitizing is idempotent; a cut or grown record never
/// parses.
pub fn holder_fields(fields: &HolderFields) {
    let h = fields.to_holder();
    let text = h.format();
    assert!(text.len() <= MAX_RECORD, "record too long: {}", text.len());
    let want = Holder {
        host: sanitize(&h.host),
        boot_id: sanitize(&h.boot_id),
        ..h.clone()
    };
    assert_eq!(
        Holder::parse(text.as_bytes()),
        Some(want.clone()),
        "{text:?}"
    );
    assert_eq!(
        want.format(),
        text,
        "formatting a sanitized holder changed it"
    );
    let bytes = text.as_bytes();
    #[allow(clippy::cast_possible_truncation)]
    let cut = (fields.nonce as usize) % bytes.len();
    assert_eq!(Holder::parse(&bytes[..cut]), None, "cut at {cut} parsed");
    let mut grown = bytes.to_vec();
    grown.insert(cut, b'\n');
    assert_eq!(Holder::parse(&grown), None, "a newline at {cut} parsed");
}

// ---------------------------------------------------------------------------------------
// lock_name_parse

/// A lock name built from its fields (uuids as 128-bit numbers).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NameFields {
    /// `.master_lock`.
    Master,
    /// `.pending_lock-<uuid>-<ns>`.
    Pending {
        /// Queue time.
        ns: u64,
        /// Uuid bits.
        uuid: u128,
    },
    /// `.slave_lock-<uuid>`.
    Slave {
        /// Uuid bits.
        uuid: u128,
    },
    /// `.break-<ns>-<uuid>`.
    Break {
        /// Queue time.
        ns: u64,
        /// Uuid bits.
        uuid: u128,
    },
    /// `.tmp-<uuid>`.
    Tmp {
        /// Uuid bits.
        uuid: u128,
    },
    /// `.token-<n>`.
    Token(u64),
}

impl NameFields {
    /// The lock file's name, as it stands in the state directory.
    pub fn file_name(self) -> String {
        self.to_name().to_string()
    }

    fn to_name(self) -> LockName {
        let u = Uuid::from_u128;
        match self {
            NameFields::Master => LockName::Master,
            NameFields::Pending { ns, uuid } => LockName::Pending { ns, uuid: u(uuid) },
            NameFields::Slave { uuid } => LockName::Slave { uuid: u(uuid) },
            NameFields::Break { ns, uuid } => LockName::Break { ns, uuid: u(uuid) },
            NameFields::Tmp { uuid } => LockName::Tmp { uuid: u(uuid) },
            NameFields::Token(n) => LockName::Token(n),
        }
    }
}

/// Target `lock_name_parse`: `lock_name_parse` on the whole input and on each of its
/// `/`-separated parts (a `/` never occurs in a file name), then `lock_name_order` on
/// the names parsed and the names `built` from fields.
pub fn lock_name_target(data: &[u8], built: &[NameFields]) {
    lock_name_parse(data);
    let mut names: Vec<LockName> = data
        .split(|&b| b == b'/')
        .filter_map(lock_name_parse)
        .collect();
    names.extend(built.iter().map(|f| f.to_name()));
    lock_name_order(&names);
}

/// Arbitrary bytes: [`LockName::parse`] never panics, and a name it accepts is
/// canonical: formatting gives back exactly the input, which parses to the same name.
fn lock_name_parse(data: &[u8]) -> Option<LockName> {
    let n = LockName::parse(data)?;
    let s = n.to_string();
    assert!(
        s.as_bytes() == data,
        "a non-canonical name parsed: {:?} formats as {s:?}",
        String::from_utf8_lossy(data)
    );
    assert_eq!(LockName::parse(s.as_bytes()), Some(n));
    let queued = matches!(n, LockName::Pending { .. } | LockName::Break { .. });
    assert_eq!(n.order_key().is_some(), queued, "{n:?}");
    let unique = !matches!(n, LockName::Master | LockName::Token(_));
    assert_eq!(n.is_unique(), unique, "{n:?}");
    Some(n)
}

/// Any names: each round-trips through its text, `order_key` is a total order equal to
/// `(ns, uuid)` compared as numbers, and `Listing::from_names` keeps every name, in
/// queue order.
fn lock_name_order(names: &[LockName]) {
    for n in names {
        assert_eq!(LockName::parse(n.to_string().as_bytes()), Some(*n), "{n:?}");
    }
    // The order the protocol specifies, computed independently of `order_key`.
    let key = |n: &LockName| match *n {
        LockName::Pending { ns, uuid } | LockName::Break { ns, uuid } => Some((ns, uuid.as_u128())),
        _ => None,
    };
    for a in names {
        for b in names {
            assert_eq!(
                a.order_key().cmp(&b.order_key()),
                key(a).cmp(&key(b)),
                "{a:?} vs {b:?}"
            );
        }
    }
    let l = Listing::from_names(names.iter().copied());
    let count = |f: fn(&LockName) -> bool| names.iter().filter(|n| f(n)).count();
    assert_eq!(l.master, names.contains(&LockName::Master));
    assert_eq!(
        l.pending.len(),
        count(|n| matches!(n, LockName::Pending { .. }))
    );
    assert_eq!(
        l.slaves.len(),
        count(|n| matches!(n, LockName::Slave { .. }))
    );
    assert_eq!(
        l.breaks.len(),
        count(|n| matches!(n, LockName::Break { .. }))
    );
    assert_eq!(l.tmps.len(), count(|n| matches!(n, LockName::Tmp { .. })));
    assert_eq!(l.tokens.len(), count(|n| matches!(n, LockName::Token(_))));
    for queue in [&l.pending, &l.breaks] {
        for w in queue.windows(2) {
            assert!(key(&w[0]) <= key(&w[1]), "out of order: {w:?}");
        }
    }
    assert!(l.tokens.windows(2).all(|w| w[0] <= w[1]), "{:?}", l.tokens);
    for n in names {
        assert!(l.has(n), "{n:?} missing from the listing");
    }
}

// ---------------------------------------------------------------------------------------
// dir_scan: the input

/// One `dir_scan` case: what the state directory is, what is planted in it, and the
/// library calls made on it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScanInput {
    /// What `DIR/.rwdir` is.
    pub state: StateSpec,
    /// Entries planted in `DIR/.rwdir` (when it is a directory); at most 24 are used.
    pub entries: Vec<EntrySpec>,
    /// Calls made, in order; at most 12 are used. Guards still held at the end are
    /// released.
    pub ops: Vec<Op>,
}

/// What the state directory `DIR/.rwdir` is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StateSpec {
    /// A directory (the entries are planted in it).
    Dir,
    /// Nothing: the first acquisition makes it.
    Missing,
    /// A regular file.
    File,
    /// A symlink to a directory outside `DIR`.
    SymlinkToDir,
    /// A symlink to nothing.
    DanglingSymlink,
    /// A FIFO.
    Fifo,
}

/// One planted entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EntrySpec {
    /// Its name.
    pub name: NameSpec,
    /// What it is.
    pub node: NodeSpec,
    /// Its modification time (the heartbeat the lease is judged by).
    pub mtime: MtimeSpec,
}

/// The name of a planted entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NameSpec {
    /// A lock name.
    Lock(NameFields),
    /// A lock name, altered: usually a foreign name that must be left alone.
    Near(NameFields, Mutation),
    /// Any bytes (`/` and NUL become `_`; empty, `.`, `..` are skipped).
    Raw(Vec<u8>),
}

/// An alteration of a lock name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Mutation {
    /// Upper-cased.
    Upper,
    /// A `0` inserted before the trailing digits (or appended).
    LeadingZero,
    /// Bytes appended.
    Suffix(Vec<u8>),
    /// Bytes prepended.
    Prefix(Vec<u8>),
    /// Cut to this many bytes (modulo its length).
    Truncate(u8),
}

/// What a planted entry is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NodeSpec {
    /// A regular file with this content.
    File(ContentSpec),
    /// A regular file with this content, then `set_len` to this length modulo 64 MiB + 1
    /// (sparse).
    Sparse(ContentSpec, u32),
    /// A symbolic link.
    Symlink(LinkTarget),
    /// A hard link to the victim file outside `DIR`.
    HardLinkToVictim,
    /// A directory holding this many files (at most 3).
    Dir {
        /// Files inside (0: empty).
        files: u8,
    },
    /// A FIFO (nobody ever writes to it: opening it for reading must not block).
    Fifo,
    /// A Unix socket (nobody listens).
    Socket,
}

/// Where a planted symlink points.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LinkTarget {
    /// The victim file outside `DIR`: its bytes and mode must never change.
    Victim,
    /// The victim directory outside `DIR`: its content must never change.
    VictimDir,
    /// Nowhere.
    Dangling,
    /// `.`: the state directory itself.
    StateDir,
}

/// The content of a planted regular file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ContentSpec {
    /// Nothing.
    Empty,
    /// A valid record.
    Record(RecordSpec),
    /// Any bytes.
    Bytes(Vec<u8>),
    /// A valid record followed by these bytes.
    RecordThen(RecordSpec, Vec<u8>),
    /// A valid record cut to this many bytes (modulo its length).
    RecordCut(RecordSpec, u16),
}

/// A holder record whose identity fields are chosen relative to this process.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecordSpec {
    /// Index into the kinds, modulo 5.
    pub kind: u8,
    /// Host name; `None` for this host's name.
    pub host: Option<String>,
    /// Boot id and pid namespace.
    pub place: Place,
    /// Pid and start time.
    pub who: Who,
    /// Process group.
    pub pgid: Pgid,
    /// Nonce bits.
    pub nonce: u128,
    /// Creation time.
    pub since_ns: u64,
    /// Lease in milliseconds.
    pub lease_ms: u64,
}

/// Boot id and pid namespace of a record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Place {
    /// This host and pid namespace: judged exactly.
    SameHost,
    /// Another boot id: judged by lease.
    OtherBoot,
    /// This boot, another pid namespace: judged by lease.
    OtherPidns,
    /// An empty boot id: judged by lease.
    NoBootId,
}

/// Pid and start time of a record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Who {
    /// This process.
    Me,
    /// This pid with another start time (a previous incarnation): dead.
    MeReborn(u64),
    /// The parent process (alive for the whole run).
    Parent,
    /// A child that was spawned and reaped: dead.
    DeadChild,
    /// Any pid and start time.
    Pid(u32, u64),
}

/// Process group of a record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Pgid {
    /// None (0).
    None,
    /// This process's group: alive.
    Mine,
    /// Any number.
    Raw(u32),
}

/// Modification time of a planted entry, against a lease of one second.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MtimeSpec {
    /// An hour ago: expired.
    Old,
    /// Now: live for about a second.
    Fresh,
    /// In an hour: never expired during the run.
    Future,
    /// The Unix epoch.
    Epoch,
}

/// A library call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Op {
    /// `status()`.
    Status,
    /// `cleanup_plan()` or `cleanup_all_plan()`.
    Plan {
        /// `cleanup --all`'s plan.
        all: bool,
    },
    /// `try_read()`; the guard is kept or released at once.
    TryRead {
        /// Keep the guard.
        hold: bool,
    },
    /// `try_write()`; the guard is kept or released at once.
    TryWrite {
        /// Keep the guard.
        hold: bool,
    },
    /// `downgrade()` of the last write guard kept, if any.
    Downgrade,
    /// Releases every guard kept.
    Release,
    /// `cleanup()`.
    Cleanup,
}

// ---------------------------------------------------------------------------------------
// dir_scan: planting and checking

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
    scanner.lock().scan(input);
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
    id: sys::Identity,
    ppid: u32,
    parent_start: Option<u64>,
    pgid: u32,
}

impl Me {
    fn get() -> Me {
        let ppid = u32::try_from(nix::unistd::getppid().as_raw()).unwrap_or(0);
        Me {
            id: sys::identity(),
            ppid,
            parent_start: sys::start_time(ppid),
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
    fn paths(&self) -> Vec<PathBuf> {
        let r = self.reads.iter().map(ReadGuard::path);
        r.chain(self.writes.iter().map(WriteGuard::path)).collect()
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
        let s = Scanner {
            locked: base.join("locked"),
            state: base.join("locked").join(".rwdir"),
            victim: base.join("victim"),
            victim_dir: base.join("victim-dir"),
            nowhere: base.join("nowhere"),
            dead_pid: dead_pid(),
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
        let me = Me::get();
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
            let result = self.run(&lock, *op, &mut guards, &me, &planted, &what);
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
    ) -> crate::Result<Option<u64>> {
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
                let token = g.token();
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

    // -- planting ---------------------------------------------------------------------

    fn plant(&self, input: &ScanInput, me: &Me) -> Vec<Planted> {
        match input.state {
            StateSpec::Dir => {}
            StateSpec::Missing => {
                fs::remove_dir(&self.state).expect("remove the state directory");
                return Vec::new();
            }
            other => {
                fs::remove_dir(&self.state).expect("remove the state directory");
                match other {
                    StateSpec::File => fs::write(&self.state, VICTIM),
                    StateSpec::SymlinkToDir => {
                        std::os::unix::fs::symlink(&self.victim_dir, &self.state)
                    }
                    StateSpec::DanglingSymlink => {
                        std::os::unix::fs::symlink(&self.nowhere, &self.state)
                    }
                    _ => nix::unistd::mkfifo(&self.state, Mode::from_bits_truncate(0o644))
                        .map_err(io::Error::from),
                }
                .expect("plant the state path");
                return Vec::new();
            }
        }
        let now = SystemTime::now();
        let mut planted = Vec::new();
        for e in input.entries.iter().take(MAX_ENTRIES) {
            let Some(name) = entry_name(&e.name) else {
                continue;
            };
            let path = self.state.join(OsStr::from_bytes(&name));
            let Some((bytes, non_empty_dir)) = self.make(&path, &e.node, me) else {
                continue;
            };
            let mtime = match e.mtime {
                MtimeSpec::Old => now - Duration::from_secs(3600),
                MtimeSpec::Fresh => now,
                MtimeSpec::Future => now + Duration::from_secs(3600),
                MtimeSpec::Epoch => UNIX_EPOCH,
            };
            let d = mtime.duration_since(UNIX_EPOCH).unwrap_or_default();
            #[allow(clippy::cast_possible_wrap)]
            let ts = TimeSpec::new(d.as_secs() as i64, i64::from(d.subsec_nanos()));
            utimensat(AT_FDCWD, &path, &ts, &ts, UtimensatFlags::NoFollowSymlink)
                .expect("set a planted mtime");
            let lock = LockName::parse(&name);
            planted.push(Planted {
                name,
                path,
                lock,
                ino: (0, 0),
                mtime: UNIX_EPOCH,
                regular: false,
                non_empty_dir,
                holder: bytes.as_deref().and_then(Holder::parse),
                protected: false,
                doomed: false,
                liveness: None,
            });
        }
        // Judge from what is on disk now (hard links share one inode and one mtime).
        let now = SystemTime::now();
        for p in &mut planted {
            let m = fs::symlink_metadata(&p.path).expect("stat a planted entry");
            p.ino = (m.dev(), m.ino());
            p.regular = m.file_type().is_file();
            p.mtime = m.modified().expect("mtime");
            let future = p.mtime > now + Duration::from_secs(60);
            let old = p.mtime + Duration::from_secs(60) < now;
            let same_host = p.holder.as_ref().is_some_and(|h| me.same_host(h));
            let alive = p.holder.as_ref().is_some_and(|h| me.alive(h));
            let dead = p.holder.as_ref().is_some_and(|h| me.dead(h))
                || (old && p.holder.is_none())
                || (old && !same_host && p.holder.as_ref().is_some_and(|h| h.lease_ms < 60_000));
            p.protected = match p.lock {
                None | Some(LockName::Token(_)) => true,
                Some(_) => alive || (future && !same_host),
            };
            p.doomed = dead && !alive && p.regular && p.lock.is_some_and(|n| n.is_unique());
            p.liveness = if alive {
                Some(Liveness::Alive)
            } else if dead {
                Some(Liveness::Dead)
            } else if future && !same_host {
                Some(Liveness::Unknown)
            } else {
                None
            };
        }
        planted
    }

    /// Creates one node; `None` if it cannot be (a duplicate or too long name...).
    /// Returns the bytes of a regular file (when small enough to matter) and whether it is
    /// a non-empty directory.
    fn make(&self, path: &Path, node: &NodeSpec, me: &Me) -> Option<(Option<Vec<u8>>, bool)> {
        let regular = |content: &ContentSpec, len: Option<u64>| -> io::Result<Option<Vec<u8>>> {
            let mut bytes = self.content(content, me);
            let mut f = fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .mode(0o644)
                .open(path)?;
            // A half-made file would confuse the oracles: remove it if the rest fails.
            let filled = f
                .write_all(&bytes)
                .and_then(|()| len.map_or(Ok(()), |len| f.set_len(len)));
            if let Err(e) = filled {
                let _ = fs::remove_file(path);
                return Err(e);
            }
            if let Some(len) = len {
                if len > (MAX_RECORD as u64) + 1 {
                    return Ok(None);
                }
                #[allow(clippy::cast_possible_truncation)]
                bytes.resize(len as usize, 0);
            }
            Ok(Some(bytes))
        };
        let r: io::Result<(Option<Vec<u8>>, bool)> = match node {
            NodeSpec::File(c) => regular(c, None).map(|b| (b, false)),
            NodeSpec::Sparse(c, len) => {
                regular(c, Some(u64::from(*len) % (MAX_SPARSE + 1))).map(|b| (b, false))
            }
            NodeSpec::Symlink(t) => {
                let target = match t {
                    LinkTarget::Victim => self.victim.clone(),
                    LinkTarget::VictimDir => self.victim_dir.clone(),
                    LinkTarget::Dangling => self.nowhere.clone(),
                    LinkTarget::StateDir => PathBuf::from("."),
                };
                std::os::unix::fs::symlink(target, path).map(|()| (None, false))
            }
            NodeSpec::HardLinkToVictim => {
                fs::hard_link(&self.victim, path).map(|()| (Some(VICTIM.to_vec()), false))
            }
            NodeSpec::Dir { files } => fs::create_dir(path).and_then(|()| {
                for i in 0..(*files).min(3) {
                    fs::write(path.join(format!("f{i}")), VICTIM)?;
                }
                Ok((None, *files > 0))
            }),
            NodeSpec::Fifo => nix::unistd::mkfifo(path, Mode::from_bits_truncate(0o644))
                .map(|()| (None, false))
                .map_err(io::Error::from),
            NodeSpec::Socket => std::os::unix::net::UnixListener::bind(path).map(|_| (None, false)),
        };
        // Creation fails without leaving anything behind (a name taken by an earlier
        // entry, a name too long for a socket...): the entry is skipped.
        r.ok()
    }

    fn content(&self, c: &ContentSpec, me: &Me) -> Vec<u8> {
        match c {
            ContentSpec::Empty => Vec::new(),
            ContentSpec::Record(r) => self.record(r, me).format().into_bytes(),
            ContentSpec::Bytes(b) => b.clone(),
            ContentSpec::RecordThen(r, b) => {
                let mut v = self.record(r, me).format().into_bytes();
                v.extend_from_slice(b);
                v
            }
            ContentSpec::RecordCut(r, n) => {
                let mut v = self.record(r, me).format().into_bytes();
                v.truncate(usize::from(*n) % v.len());
                v
            }
        }
    }

    fn record(&self, r: &RecordSpec, me: &Me) -> Holder {
        let id = &me.id;
        let (boot_id, pidns) = match r.place {
            Place::SameHost => (id.boot_id.clone(), id.pidns),
            Place::OtherBoot => ("00000000-0000-4000-8000-00000000b007".into(), id.pidns),
            Place::OtherPidns => (id.boot_id.clone(), id.pidns ^ 1),
            Place::NoBootId => (String::new(), id.pidns),
        };
        let (pid, start) = match r.who {
            Who::Me => (id.pid, id.start),
            Who::MeReborn(d) => (id.pid, id.start.wrapping_add(d.max(1))),
            Who::Parent => (me.ppid, me.parent_start.unwrap_or(0)),
            Who::DeadChild => (self.dead_pid, 1),
            Who::Pid(p, s) => (p, s),
        };
        Holder {
            kind: KINDS[usize::from(r.kind) % KINDS.len()],
            host: r.host.clone().unwrap_or_else(|| id.host.clone()),
            boot_id,
            pidns,
            pid,
            start,
            pgid: match r.pgid {
                Pgid::None => 0,
                Pgid::Mine => me.pgid,
                Pgid::Raw(g) => g,
            },
            nonce: Uuid::from_u128(r.nonce),
            since_ns: r.since_ns,
            lease_ms: r.lease_ms,
        }
    }

    // -- checking ---------------------------------------------------------------------

    /// The `.token-<n>` numbers present, sorted.
    fn tokens(&self) -> Vec<u64> {
        let mut v: Vec<u64> = self
            .lock_names()
            .into_iter()
            .filter_map(|n| match n {
                LockName::Token(k) => Some(k),
                _ => None,
            })
            .collect();
        v.sort_unstable();
        v
    }

    fn lock_names(&self) -> Vec<LockName> {
        self.names()
            .iter()
            .filter_map(|n| LockName::parse(n))
            .collect()
    }

    /// Every name in the state directory (none if it is not a directory).
    fn names(&self) -> Vec<Vec<u8>> {
        let Ok(m) = fs::symlink_metadata(&self.state) else {
            return Vec::new();
        };
        if !m.is_dir() {
            return Vec::new();
        }
        fs::read_dir(&self.state)
            .expect("list the state directory")
            .map(|e| {
                e.expect("list the state directory")
                    .file_name()
                    .as_bytes()
                    .to_vec()
            })
            .collect()
    }

    /// Errors allowed: `WouldBlock` from a `try_*`; `NotADirectory` when the state path
    /// is not a directory; `Io` naming a path inside the state directory, only for a
    /// non-empty directory at a lock name other than a token's (it cannot be removed);
    /// `TokensExhausted`, from `try_write`, for a `.token-18446744073709551615`.
    fn check_error(&self, e: &Error, op: Op, planted: &[Planted], what: &str) {
        let state_is_dir = fs::symlink_metadata(&self.state).is_ok_and(|m| m.is_dir());
        match e {
            Error::WouldBlock { dir, .. } => {
                assert!(
                    matches!(op, Op::TryRead { .. } | Op::TryWrite { .. }),
                    "{what}: {e}"
                );
                assert_eq!(dir, &self.locked, "{what}: {e}");
            }
            Error::NotADirectory { path, .. } => {
                assert!(!state_is_dir, "{what}: {e}");
                assert_eq!(path, &self.state, "{what}: {e}");
            }
            Error::TokensExhausted { path } => {
                assert!(matches!(op, Op::TryWrite { .. }), "{what}: {e}");
                let here = planted.iter().find(|p| p.path == *path && p.present());
                assert!(
                    here.is_some_and(|p| p.lock == Some(LockName::Token(u64::MAX))),
                    "{what}: no planted maximum token at {}",
                    path.display()
                );
            }
            Error::Io { path, source, .. } => {
                assert!(
                    path.starts_with(&self.state) && path != &self.state,
                    "{what}: an error outside the state directory: {e:?}"
                );
                let here = planted.iter().find(|p| p.path == *path && p.present());
                let expected = match source.kind() {
                    // A non-empty directory at a lock name cannot be removed (at a token
                    // name, T4 leaves it without failing).
                    io::ErrorKind::DirectoryNotEmpty => here.is_some_and(|p| {
                        p.non_empty_dir && p.lock.is_some_and(|n| !matches!(n, LockName::Token(_)))
                    }),
                    _ => false,
                };
                assert!(expected, "{what}: unexpected I/O error: {e:?}");
            }
            _ => panic!("{what}: unexpected error: {e:?}"),
        }
    }

    /// After every call: protected entries are all there (but tokens below one we made),
    /// and nothing but our kept guards' files and the tokens we made was added (undo).
    fn check_files(&self, planted: &[Planted], guards: &Guards, minted: &[u64], what: &str) {
        let top = minted.iter().max().copied();
        for p in planted {
            if !p.protected || p.present() {
                continue;
            }
            let token_passed =
                matches!(p.lock, Some(LockName::Token(k)) if top.is_some_and(|t| k < t));
            assert!(
                token_passed,
                "{what}: protected {:?} was removed ({p:?})",
                String::from_utf8_lossy(&p.name)
            );
        }
        let ours: Vec<PathBuf> = guards.paths();
        for name in self.names() {
            let path = self.state.join(OsStr::from_bytes(&name));
            if planted.iter().any(|p| p.path == path && p.present()) || ours.contains(&path) {
                continue;
            }
            let token =
                matches!(LockName::parse(&name), Some(LockName::Token(k)) if minted.contains(&k));
            assert!(
                token,
                "{what}: left behind: {:?}",
                String::from_utf8_lossy(&name)
            );
        }
        self.check_victims();
    }

    fn check_victims(&self) {
        let m = fs::symlink_metadata(&self.victim).expect("the victim is gone");
        assert_eq!(m.mode() & 0o7777, VICTIM_MODE, "the victim's mode changed");
        assert_eq!(
            fs::read(&self.victim).expect("read the victim"),
            VICTIM,
            "the victim changed"
        );
        let names: Vec<_> = fs::read_dir(&self.victim_dir)
            .expect("the victim directory is gone")
            .map(|e| e.expect("list the victim directory").file_name())
            .collect();
        assert_eq!(names, [OsStr::new("keep")], "the victim directory changed");
        assert_eq!(
            fs::read(self.victim_dir.join("keep")).expect("read keep"),
            VICTIM
        );
    }

    fn find<'p>(&self, planted: &'p [Planted], name: &str) -> Option<&'p Planted> {
        planted
            .iter()
            .find(|p| p.name == name.as_bytes() && p.present())
    }

    fn check_entry(&self, e: &Entry, me: &Me, planted: &[Planted], what: &str) {
        let n = LockName::parse(e.name.as_bytes())
            .unwrap_or_else(|| panic!("{what}: status lists a foreign name {:?}", e.name));
        assert_eq!(e.path, self.state.join(&e.name), "{what}");
        let kind = match n {
            LockName::Master => Kind::Write,
            LockName::Pending { .. } => Kind::Pending,
            LockName::Slave { .. } => Kind::Read,
            LockName::Break { .. } => Kind::Break,
            LockName::Tmp { .. } => Kind::Temporary,
            LockName::Token(_) => Kind::Token,
        };
        assert_eq!(e.kind, kind, "{what}: {e:?}");
        let Some(p) = self.find(planted, &e.name) else {
            // One of ours: alive.
            assert_eq!(e.liveness, Liveness::Alive, "{what}: our own file {e:?}");
            assert!(
                e.holder.as_ref().is_some_and(|h| me.alive(h)),
                "{what}: {e:?}"
            );
            return;
        };
        assert_eq!(e.holder, p.holder, "{what}: {:?} read wrong", e.name);
        assert_eq!(e.regular, p.regular, "{what}: {e:?}");
        assert_eq!(e.mtime, p.mtime, "{what}: {e:?}");
        if let Some(l) = p.liveness {
            assert_eq!(e.liveness, l, "{what}: {e:?} judged wrong ({p:?})");
        }
    }

    fn check_status(&self, st: &Status, me: &Me, planted: &[Planted], guards: &Guards, what: &str) {
        let _ = guards;
        assert_eq!(st.dir, self.locked, "{what}");
        assert_eq!(st.state_dir, self.state, "{what}");
        let names = self.lock_names();
        assert_eq!(st.token, self.tokens().last().copied(), "{what}");
        assert_eq!(
            st.writer.is_some(),
            names.contains(&LockName::Master),
            "{what}"
        );
        let all = st
            .writer
            .iter()
            .chain(&st.pending)
            .chain(&st.readers)
            .chain(&st.other);
        let mut seen = BTreeSet::new();
        for e in all {
            assert!(
                seen.insert(e.name.clone()),
                "{what}: {} listed twice",
                e.name
            );
            self.check_entry(e, me, planted, what);
        }
        let want: BTreeSet<String> = names
            .iter()
            .filter(|n| !matches!(n, LockName::Token(_)))
            .map(ToString::to_string)
            .collect();
        assert_eq!(
            seen, want,
            "{what}: status does not list exactly the lock files"
        );
        for w in st.pending.windows(2) {
            let k = |e: &Entry| LockName::parse(e.name.as_bytes()).and_then(|n| n.order_key());
            assert!(k(&w[0]) <= k(&w[1]), "{what}: pending out of queue order");
        }
    }

    fn check_plan(&self, plan: &[Entry], all: bool, planted: &[Planted], what: &str) {
        let names: BTreeSet<String> = plan.iter().map(|e| e.name.clone()).collect();
        assert_eq!(names.len(), plan.len(), "{what}: a name planned twice");
        if all {
            let tokens = self.tokens();
            let want: BTreeSet<String> = self
                .lock_names()
                .into_iter()
                .filter(|n| {
                    *n != LockName::Token(tokens.last().copied().unwrap_or(0)) || tokens.is_empty()
                })
                .map(|n| n.to_string())
                .collect();
            assert_eq!(
                names, want,
                "{what}: --all must plan every lock file but the top token"
            );
            return;
        }
        for e in plan {
            self.check_removable(e, planted, what);
        }
    }

    fn check_removable(&self, e: &Entry, planted: &[Planted], what: &str) {
        let n = LockName::parse(e.name.as_bytes())
            .unwrap_or_else(|| panic!("{what}: a foreign name {:?}", e.name));
        assert!(!matches!(n, LockName::Token(_)), "{what}: a token {e:?}");
        assert!(e.liveness.is_dead(), "{what}: not dead: {e:?}");
        assert!(
            e.regular || n == LockName::Master,
            "{what}: not a regular file: {e:?}"
        );
        if let Some(p) = planted.iter().find(|p| p.name == e.name.as_bytes()) {
            assert!(!p.protected, "{what}: protected: {p:?}");
        }
    }

    fn check_cleanup(&self, removed: &[Entry], planted: &[Planted], what: &str) {
        for e in removed {
            self.check_removable(e, planted, what);
            assert!(
                fs::symlink_metadata(&e.path).is_err(),
                "{what}: reported removed but present: {e:?}"
            );
        }
        for p in planted.iter().filter(|p| p.doomed) {
            assert!(
                !p.present(),
                "{what}: cleanup left a dead holder's file: {p:?}"
            );
        }
    }
}

/// The lock name of a planted entry, as bytes; `None` for names that cannot exist.
fn entry_name(spec: &NameSpec) -> Option<Vec<u8>> {
    let mut name = match spec {
        NameSpec::Lock(f) => f.to_name().to_string().into_bytes(),
        NameSpec::Near(f, m) => {
            let mut s = f.to_name().to_string().into_bytes();
            match m {
                Mutation::Upper => s.make_ascii_uppercase(),
                Mutation::LeadingZero => {
                    let digits = s.iter().rev().take_while(|b| b.is_ascii_digit()).count();
                    s.insert(s.len() - digits, b'0');
                }
                Mutation::Suffix(b) => s.extend_from_slice(b),
                Mutation::Prefix(b) => {
                    s.splice(0..0, b.iter().copied());
                }
                Mutation::Truncate(n) => {
                    let n = usize::from(*n) % (s.len() + 1);
                    s.truncate(n);
                }
            }
            s
        }
        NameSpec::Raw(b) => b.clone(),
    };
    for b in &mut name {
        if *b == b'/' || *b == 0 {
            *b = b'_';
        }
    }
    name.truncate(255);
    (!name.is_empty() && name != b"." && name != b"..").then_some(name)
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
    fn holder_seeds() {
        let f = HolderFields {
            kind: 1,
            host: "h ost\u{e9}".into(),
            boot_id: "b".into(),
            pid: 42,
            nonce: 3,
            ..HolderFields::default()
        };
        holder_target(f.to_holder().format().as_bytes(), Some(&f));
        holder_target(b"rwdir-holder 1\nend 0000000000000000\n", None);
    }

    #[test]
    fn lock_name_seeds() {
        let all = [
            NameFields::Master,
            NameFields::Pending { ns: 5, uuid: U },
            NameFields::Pending { ns: 5, uuid: U + 1 },
            NameFields::Slave { uuid: U },
            NameFields::Break {
                ns: 0,
                uuid: u128::MAX,
            },
            NameFields::Tmp { uuid: 0 },
            NameFields::Token(u64::MAX),
        ];
        let text: Vec<String> = all.iter().map(|f| f.to_name().to_string()).collect();
        lock_name_target(text.join("/").as_bytes(), &all);
        lock_name_target(b".token-007/.master_lock/\xff", &[]);
    }

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
