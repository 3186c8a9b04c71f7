//! A tiny in-memory FUSE filesystem for the tests, mounted in the test process with the
//! `fuser` crate (its own mount code: `mount(2)` as root, no libfuse). Honest, or lying
//! the way object stores do: a regular file is invisible to lookups for a while after it
//! was created (eventual consistency), and a create or a link onto a name that exists
//! replaces what is there instead of failing with `EEXIST`. So `O_CREAT|O_EXCL` on an
//! existing name succeeds, which is what `rwdir doctor` must catch.
//!
//! It can also be frozen ([`Freeze`]), as a network filesystem cut off from its server
//! is: every call on it then blocks until it is thawed (tests/watchdog.rs); and it can
//! fail calls with `ENOTCONN` ([`Faults`]), on one name or on everything
//! (tests/unreachable.rs).

// Shared by two test crates (tests/doctor.rs, tests/watchdog.rs), each using a part.
#![allow(dead_code)]

use std::collections::{BTreeMap, HashMap};
use std::ffi::{OsStr, OsString};
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant, SystemTime};

use fuser::{
    Errno, FileAttr, FileHandle, FileType, Filesystem, FopenFlags, Generation, INodeNo, LockOwner,
    MountOption, OpenFlags, RenameFlags, ReplyAttr, ReplyCreate, ReplyData, ReplyDirectory,
    ReplyEmpty, ReplyEntry, ReplyWrite, Request, TimeOrNow, WriteFlags,
};

/// How long a lying mount hides a new file from lookups.
pub const LAG: Duration = Duration::from_secs(1);

#[derive(Debug)]
struct Node {
    kind: FileType,
    perm: u16,
    nlink: u32,
    data: Vec<u8>,
    mtime: SystemTime,
    created: Instant,
    children: BTreeMap<OsString, u64>,
}

#[derive(Debug)]
struct Inner {
    nodes: HashMap<u64, Node>,
    next: u64,
}

/// The filesystem; `lie` picks the behaviour.
#[derive(Debug)]
pub struct LyingFs {
    inner: Mutex<Inner>,
    lie: bool,
    freeze: Arc<Freeze>,
    /// Answer FLUSH with ENOSYS, after which the kernel sends none on this mount (as for
    /// a filesystem that has no flush). A process exiting closes its descriptors after
    /// its signals are dealt with, so a FLUSH queued on a frozen mount would keep it
    /// from exiting (the real clients it stands for may answer a FLUSH of an unwritten
    /// file without their server, or may not).
    no_flush: bool,
    faults: Arc<Faults>,
}

/// Calls that fail with `ENOTCONN`, switched by the test while the filesystem is mounted.
#[derive(Debug, Default)]
pub struct Faults {
    /// A name whose lookups fail: a file this client cannot reach although the rest of
    /// the mount answers (measured once on CephFS, for a record a dead client never
    /// flushed to the servers).
    unreachable: Mutex<Option<OsString>>,
    /// Every lookup and `getattr` fails: this client lost its server. (Directory reads
    /// still answer, so that a test reaches the reading of one file and the check of
    /// the directory that tells the two faults apart.)
    dead: AtomicBool,
    /// A name, and how many more of its lookups are answered before the filesystem turns
    /// [`Faults::dead`] on its own: the loss strikes at a known point of a caller's work.
    dead_after: Mutex<Option<(OsString, u32)>>,
}

impl Faults {
    /// Makes lookups of `name` (in any directory) fail, or none with `None`.
    pub fn unreachable(&self, name: Option<&str>) {
        *self
            .unreachable
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = name.map(OsString::from);
    }

    /// Makes every lookup and `getattr` fail, or none.
    pub fn dead(&self, dead: bool) {
        self.dead.store(dead, Ordering::SeqCst);
    }

    /// Turns the filesystem dead right after it has answered `n` more lookups of `name`.
    pub fn dead_after(&self, name: &str, n: u32) {
        *self
            .dead_after
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = Some((name.into(), n));
    }

    /// Counts a lookup of `name` against [`Faults::dead_after`].
    fn looked_up(&self, name: &OsStr) {
        let mut armed = self
            .dead_after
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some((watched, left)) = armed.as_mut()
            && watched.as_os_str() == name
        {
            *left = left.saturating_sub(1);
            if *left == 0 {
                *armed = None;
                self.dead.store(true, Ordering::SeqCst);
            }
        }
    }

    fn fails(&self, name: Option<&OsStr>) -> bool {
        self.dead.load(Ordering::SeqCst)
            || name.is_some_and(|n| {
                self.unreachable
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner)
                    .as_deref()
                    == Some(n)
            })
    }
}

/// The name in the root whose lookup plugs a frozen filesystem.
pub const PLUG: &str = ".rwdir-test-freeze-plug";

/// The freeze switch of a mounted [`LyingFs`], held by the test outside the mount.
///
/// The filesystem serves requests on one thread (fuser's default). [`Freeze::freeze`]
/// makes a thread of the test look up [`PLUG`], and the filesystem's thread blocks in
/// that lookup until [`Freeze::thaw`]: from then on the kernel queues every other
/// request on the mount and answers none, as a FUSE client cut off from its server
/// does. Requests that wait in the queue, unread, can still be killed: a process
/// blocked on the frozen mount can exit.
#[derive(Debug, Default)]
pub struct Freeze {
    state: Mutex<FreezeState>,
    changed: Condvar,
}

#[derive(Debug, Default)]
struct FreezeState {
    /// Frozen (or about to be: the plug is on its way).
    armed: bool,
    /// The filesystem's thread is blocked on the plug.
    holding: bool,
}

/// A frozen filesystem; thawed when dropped (also on a failed test's way out, or the
/// unmount would wait for ever).
#[derive(Debug)]
pub struct Frozen {
    freeze: Arc<Freeze>,
    plug: Option<std::thread::JoinHandle<()>>,
    /// When the filesystem stopped answering.
    pub since: Instant,
}

impl Freeze {
    fn state(&self) -> std::sync::MutexGuard<'_, FreezeState> {
        self.state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Freezes the filesystem mounted at `mount`; returns once its thread is blocked
    /// (readiness from the filesystem itself, not a guess).
    ///
    /// # Panics
    ///
    /// If the plug's lookup does not reach the filesystem within 10 s.
    pub fn freeze(self: &Arc<Self>, mount: &Path) -> Frozen {
        self.state().armed = true;
        let plug_path = mount.join(PLUG);
        let plug = std::thread::Builder::new()
            .name("freeze-plug".into())
            .spawn(move || {
                let _ = std::fs::symlink_metadata(plug_path);
            })
            .expect("start the plug thread");
        let mut frozen = Frozen {
            freeze: Arc::clone(self),
            plug: Some(plug),
            since: Instant::now(),
        };
        let (state, timeout) = self
            .changed
            .wait_timeout_while(self.state(), Duration::from_secs(10), |s| !s.holding)
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        assert!(
            !timeout.timed_out() && state.holding,
            "the filesystem did not take the plug"
        );
        drop(state);
        frozen.since = Instant::now();
        frozen
    }

    /// Lets the filesystem answer again.
    fn thaw(&self) {
        self.state().armed = false;
        self.changed.notify_all();
    }

    /// The plug's lookup: blocks the filesystem's thread while frozen.
    fn hold(&self) {
        let mut state = self.state();
        if !state.armed {
            return;
        }
        state.holding = true;
        self.changed.notify_all();
        let mut state = self
            .changed
            .wait_while(state, |s| s.armed)
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        state.holding = false;
    }
}

impl Frozen {
    /// Whether the filesystem is still frozen: its thread blocked on the plug.
    pub fn is_frozen(&self) -> bool {
        self.freeze.state().holding && self.plug.as_ref().is_some_and(|p| !p.is_finished())
    }

    /// Thaws the filesystem and waits for the plug's lookup to return.
    pub fn thaw(mut self) {
        self.thaw_now();
    }

    fn thaw_now(&mut self) {
        self.freeze.thaw();
        if let Some(plug) = self.plug.take() {
            let _ = plug.join();
        }
    }
}

impl Drop for Frozen {
    fn drop(&mut self) {
        self.thaw_now();
    }
}

const TTL: Duration = Duration::ZERO;

impl LyingFs {
    pub fn new(lie: bool) -> LyingFs {
        let root = Node {
            kind: FileType::Directory,
            perm: 0o777,
            nlink: 2,
            data: Vec::new(),
            mtime: SystemTime::now(),
            created: Instant::now(),
            children: BTreeMap::new(),
        };
        LyingFs {
            inner: Mutex::new(Inner {
                nodes: HashMap::from([(1, root)]),
                next: 2,
            }),
            lie,
            freeze: Arc::default(),
            no_flush: false,
            faults: Arc::default(),
        }
    }

    fn inner(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

fn attr(ino: u64, n: &Node) -> FileAttr {
    FileAttr {
        ino: INodeNo(ino),
        size: n.data.len() as u64,
        blocks: (n.data.len() as u64).div_ceil(512),
        atime: n.mtime,
        mtime: n.mtime,
        ctime: n.mtime,
        crtime: n.mtime,
        kind: n.kind,
        perm: n.perm,
        nlink: n.nlink,
        uid: nix::unistd::getuid().as_raw(),
        gid: nix::unistd::getgid().as_raw(),
        rdev: 0,
        flags: 0,
        blksize: 4096,
    }
}

impl Inner {
    fn new_node(&mut self, kind: FileType, perm: u16) -> u64 {
        let ino = self.next;
        self.next += 1;
        self.nodes.insert(
            ino,
            Node {
                kind,
                perm,
                nlink: if kind == FileType::Directory { 2 } else { 1 },
                data: Vec::new(),
                mtime: SystemTime::now(),
                created: Instant::now(),
                children: BTreeMap::new(),
            },
        );
        ino
    }

    fn child(&self, parent: INodeNo, name: &OsStr) -> Result<Option<u64>, Errno> {
        let p = self.nodes.get(&parent.0).ok_or(Errno::ENOENT)?;
        if p.kind != FileType::Directory {
            return Err(Errno::ENOTDIR);
        }
        Ok(p.children.get(name).copied())
    }

    fn drop_link(&mut self, ino: u64) {
        if let Some(n) = self.nodes.get_mut(&ino) {
            n.nlink = n.nlink.saturating_sub(1);
        }
    }
}

impl Filesystem for LyingFs {
    fn lookup(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEntry) {
        if parent.0 == 1 && name == PLUG {
            self.freeze.hold();
            return reply.error(Errno::ENOENT);
        }
        if self.faults.fails(Some(name)) {
            return reply.error(Errno::ENOTCONN);
        }
        self.faults.looked_up(name);
        let inner = self.inner();
        match inner.child(parent, name) {
            Ok(Some(ino)) => {
                let n = &inner.nodes[&ino];
                if self.lie && n.kind == FileType::RegularFile && n.created.elapsed() < LAG {
                    reply.error(Errno::ENOENT);
                } else {
                    reply.entry(&TTL, &attr(ino, n), Generation(0));
                }
            }
            Ok(None) => reply.error(Errno::ENOENT),
            Err(e) => reply.error(e),
        }
    }

    fn getattr(&self, _req: &Request, ino: INodeNo, _fh: Option<FileHandle>, reply: ReplyAttr) {
        if self.faults.fails(None) {
            return reply.error(Errno::ENOTCONN);
        }
        match self.inner().nodes.get(&ino.0) {
            Some(n) => reply.attr(&TTL, &attr(ino.0, n)),
            None => reply.error(Errno::ENOENT),
        }
    }

    fn setattr(
        &self,
        _req: &Request,
        ino: INodeNo,
        mode: Option<u32>,
        _uid: Option<u32>,
        _gid: Option<u32>,
        size: Option<u64>,
        _atime: Option<TimeOrNow>,
        mtime: Option<TimeOrNow>,
        _ctime: Option<SystemTime>,
        _fh: Option<FileHandle>,
        _crtime: Option<SystemTime>,
        _chgtime: Option<SystemTime>,
        _bkuptime: Option<SystemTime>,
        _flags: Option<fuser::BsdFileFlags>,
        reply: ReplyAttr,
    ) {
        let mut inner = self.inner();
        let Some(n) = inner.nodes.get_mut(&ino.0) else {
            return reply.error(Errno::ENOENT);
        };
        if let Some(mode) = mode {
            n.perm = (mode & 0o7777) as u16;
        }
        if let Some(size) = size {
            n.data.resize(usize::try_from(size).unwrap_or(0), 0);
        }
        match mtime {
            Some(TimeOrNow::SpecificTime(t)) => n.mtime = t,
            Some(TimeOrNow::Now) => n.mtime = SystemTime::now(),
            None => {}
        }
        reply.attr(&TTL, &attr(ino.0, n));
    }

    fn mkdir(
        &self,
        _req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        umask: u32,
        reply: ReplyEntry,
    ) {
        let mut inner = self.inner();
        match inner.child(parent, name) {
            Ok(Some(_)) => return reply.error(Errno::EEXIST),
            Err(e) => return reply.error(e),
            Ok(None) => {}
        }
        let ino = inner.new_node(FileType::Directory, (mode & !umask & 0o7777) as u16);
        if let Some(p) = inner.nodes.get_mut(&parent.0) {
            p.children.insert(name.to_os_string(), ino);
            p.nlink += 1;
        }
        reply.entry(&TTL, &attr(ino, &inner.nodes[&ino]), Generation(0));
    }

    fn unlink(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        let mut inner = self.inner();
        match inner.child(parent, name) {
            Ok(Some(ino)) if inner.nodes[&ino].kind == FileType::Directory => {
                reply.error(Errno::EISDIR)
            }
            Ok(Some(ino)) => {
                if let Some(p) = inner.nodes.get_mut(&parent.0) {
                    p.children.remove(name);
                }
                inner.drop_link(ino);
                reply.ok();
            }
            Ok(None) => reply.error(Errno::ENOENT),
            Err(e) => reply.error(e),
        }
    }

    fn rmdir(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        let mut inner = self.inner();
        match inner.child(parent, name) {
            Ok(Some(ino)) if inner.nodes[&ino].kind != FileType::Directory => {
                reply.error(Errno::ENOTDIR)
            }
            Ok(Some(ino)) if !inner.nodes[&ino].children.is_empty() => {
                reply.error(Errno::ENOTEMPTY)
            }
            Ok(Some(ino)) => {
                if let Some(p) = inner.nodes.get_mut(&parent.0) {
                    p.children.remove(name);
                    p.nlink -= 1;
                }
                inner.nodes.remove(&ino);
                reply.ok();
            }
            Ok(None) => reply.error(Errno::ENOENT),
            Err(e) => reply.error(e),
        }
    }

    fn rename(
        &self,
        _req: &Request,
        parent: INodeNo,
        name: &OsStr,
        newparent: INodeNo,
        newname: &OsStr,
        flags: RenameFlags,
        reply: ReplyEmpty,
    ) {
        let mut inner = self.inner();
        let ino = match inner.child(parent, name) {
            Ok(Some(ino)) => ino,
            Ok(None) => return reply.error(Errno::ENOENT),
            Err(e) => return reply.error(e),
        };
        let old = match inner.child(newparent, newname) {
            Ok(old) => old,
            Err(e) => return reply.error(e),
        };
        if old.is_some() && flags.contains(RenameFlags::RENAME_NOREPLACE) {
            return reply.error(Errno::EEXIST);
        }
        if let Some(old) = old {
            inner.drop_link(old);
        }
        if let Some(p) = inner.nodes.get_mut(&parent.0) {
            p.children.remove(name);
        }
        if let Some(p) = inner.nodes.get_mut(&newparent.0) {
            p.children.insert(newname.to_os_string(), ino);
        }
        reply.ok();
    }

    fn link(
        &self,
        _req: &Request,
        ino: INodeNo,
        newparent: INodeNo,
        newname: &OsStr,
        reply: ReplyEntry,
    ) {
        let mut inner = self.inner();
        match inner.child(newparent, newname) {
            Ok(Some(_)) if !self.lie => return reply.error(Errno::EEXIST),
            Ok(Some(old)) => inner.drop_link(old),
            Ok(None) => {}
            Err(e) => return reply.error(e),
        }
        let Some(n) = inner.nodes.get_mut(&ino.0) else {
            return reply.error(Errno::ENOENT);
        };
        n.nlink += 1;
        let a = attr(ino.0, n);
        if let Some(p) = inner.nodes.get_mut(&newparent.0) {
            p.children.insert(newname.to_os_string(), ino.0);
        }
        reply.entry(&TTL, &a, Generation(0));
    }

    fn create(
        &self,
        _req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        umask: u32,
        flags: i32,
        reply: ReplyCreate,
    ) {
        let mut inner = self.inner();
        let ino = match inner.child(parent, name) {
            // The lie: an existing name is taken over, O_EXCL or not.
            Ok(Some(ino)) if self.lie => {
                if let Some(n) = inner.nodes.get_mut(&ino) {
                    n.data.clear();
                    n.created = Instant::now();
                }
                ino
            }
            Ok(Some(_)) if flags & nix::libc::O_EXCL != 0 => return reply.error(Errno::EEXIST),
            Ok(Some(ino)) => ino,
            Ok(None) => {
                let ino = inner.new_node(FileType::RegularFile, (mode & !umask & 0o7777) as u16);
                if let Some(p) = inner.nodes.get_mut(&parent.0) {
                    p.children.insert(name.to_os_string(), ino);
                }
                ino
            }
            Err(e) => return reply.error(e),
        };
        let a = attr(ino, &inner.nodes[&ino]);
        reply.created(&TTL, &a, Generation(0), FileHandle(0), FopenFlags::empty());
    }

    fn read(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        size: u32,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyData,
    ) {
        let inner = self.inner();
        let Some(n) = inner.nodes.get(&ino.0) else {
            return reply.error(Errno::ENOENT);
        };
        let start = usize::try_from(offset)
            .unwrap_or(usize::MAX)
            .min(n.data.len());
        let end = start.saturating_add(size as usize).min(n.data.len());
        reply.data(&n.data[start..end]);
    }

    fn write(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        data: &[u8],
        _write_flags: WriteFlags,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyWrite,
    ) {
        let mut inner = self.inner();
        let Some(n) = inner.nodes.get_mut(&ino.0) else {
            return reply.error(Errno::ENOENT);
        };
        let start = usize::try_from(offset).unwrap_or(0);
        if n.data.len() < start + data.len() {
            n.data.resize(start + data.len(), 0);
        }
        n.data[start..start + data.len()].copy_from_slice(data);
        n.mtime = SystemTime::now();
        reply.written(data.len() as u32);
    }

    fn flush(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _fh: FileHandle,
        _lock_owner: LockOwner,
        reply: ReplyEmpty,
    ) {
        if self.no_flush {
            reply.error(Errno::ENOSYS);
        } else {
            reply.ok();
        }
    }

    fn fsync(&self, _req: &Request, _ino: INodeNo, _fh: FileHandle, _d: bool, reply: ReplyEmpty) {
        reply.ok();
    }

    fn readdir(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        mut reply: ReplyDirectory,
    ) {
        let inner = self.inner();
        let Some(n) = inner.nodes.get(&ino.0) else {
            return reply.error(Errno::ENOENT);
        };
        let mut entries = vec![
            (ino.0, FileType::Directory, OsString::from(".")),
            (ino.0, FileType::Directory, OsString::from("..")),
        ];
        for (name, child) in &n.children {
            entries.push((*child, inner.nodes[child].kind, name.clone()));
        }
        for (i, (child, kind, name)) in entries
            .into_iter()
            .enumerate()
            .skip(usize::try_from(offset).unwrap_or(usize::MAX))
        {
            if reply.add(INodeNo(child), (i + 1) as u64, kind, &name) {
                break;
            }
        }
        reply.ok();
    }
}

/// Mounts a fresh filesystem at `at` under the source name `name` (mountinfo shows type
/// `fuse` and source `name`, as for `-o fsname=NAME`); unmounted when the session drops.
pub fn mount(at: &Path, name: &str, lie: bool) -> std::io::Result<fuser::BackgroundSession> {
    mount_fs(at, name, LyingFs::new(lie))
}

/// Mounts a fresh honest filesystem at `at`, as [`mount`], with its freeze switch (and
/// no FLUSH: see `LyingFs::no_flush`).
pub fn mount_freezable(
    at: &Path,
    name: &str,
) -> std::io::Result<(fuser::BackgroundSession, Arc<Freeze>)> {
    let mut fs = LyingFs::new(false);
    fs.no_flush = true;
    let freeze = Arc::clone(&fs.freeze);
    Ok((mount_fs(at, name, fs)?, freeze))
}

/// Mounts a fresh honest filesystem at `at`, as [`mount`], with its [`Faults`] switch.
pub fn mount_faulty(
    at: &Path,
    name: &str,
) -> std::io::Result<(fuser::BackgroundSession, Arc<Faults>)> {
    let fs = LyingFs::new(false);
    let faults = Arc::clone(&fs.faults);
    Ok((mount_fs(at, name, fs)?, faults))
}

/// Makes the directory `d` on the filesystem mounted at `point`, and checks that rwdir
/// takes that filesystem as shared (what the FUSE tests of the library rely on).
pub fn shared_dir(point: &Path) -> Result<std::path::PathBuf, String> {
    let dir = point.join("d");
    std::fs::create_dir(&dir).map_err(|e| format!("mkdir {}: {e}", dir.display()))?;
    let fs = rwdir::Filesystem::of(&dir).map_err(|e| format!("{e:?}"))?;
    if !fs.is_shared() {
        return Err(format!("the FUSE mount is {}, not shared", fs.name()));
    }
    Ok(dir)
}

/// Why no FUSE filesystem can be mounted here, if it cannot (the tests then report as
/// ignored with this reason).
pub fn unavailable() -> Option<String> {
    if !Path::new("/dev/fuse").exists() {
        return Some("no /dev/fuse".into());
    }
    if !nix::unistd::geteuid().is_root() {
        return Some("FUSE mounts need root here (no fusermount)".into());
    }
    let dir = tempfile::tempdir().ok()?;
    match mount(dir.path(), "rwdirprobe", false) {
        Ok(session) => {
            drop(session);
            None
        }
        Err(e) => Some(format!("cannot mount FUSE: {e}")),
    }
}

fn mount_fs(at: &Path, name: &str, fs: LyingFs) -> std::io::Result<fuser::BackgroundSession> {
    let mut cfg = fuser::Config::default();
    cfg.mount_options = vec![
        MountOption::FSName(name.to_string()),
        MountOption::Subtype(name.to_string()),
        MountOption::RW,
        MountOption::DefaultPermissions,
    ];
    cfg.acl = fuser::SessionACL::All;
    fuser::spawn_mount(fs, at, &cfg)
}

/// A test that needs a FUSE mount: run as `f`, or, where no FUSE mount can be made
/// (`unavailable`, from [`unavailable`]), reported as ignored with the reason.
pub fn fuse_trial(
    name: &'static str,
    f: fn() -> Result<(), libtest_mimic::Failed>,
    unavailable: &Option<String>,
) -> libtest_mimic::Trial {
    match unavailable {
        None => libtest_mimic::Trial::test(name, f),
        Some(why) => libtest_mimic::Trial::test(name, || Ok(()))
            .with_ignored_flag(true)
            .with_kind(why.clone()),
    }
}

/// A test that needs a FUSE mount.
pub type FuseTest = fn() -> Result<(), libtest_mimic::Failed>;

/// The `main` of a test crate whose tests all need a FUSE mount: runs `tests` (name,
/// function) with libtest-mimic's arguments, each reported as ignored with the reason
/// where no FUSE mount can be made.
pub fn run_fuse_tests(tests: &[(&'static str, FuseTest)]) -> ! {
    let args = libtest_mimic::Arguments::from_args();
    let why = unavailable();
    let trials = tests
        .iter()
        .map(|&(name, f)| fuse_trial(name, f, &why))
        .collect();
    libtest_mimic::run(&args, trials).exit()
}
