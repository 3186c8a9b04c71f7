//! The only module that touches lock files. Every operation is relative to an open
//! descriptor of the state directory, never follows a symlink at a lock name, and never
//! opens an existing lock name for writing.

use std::ffi::OsStr;
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use nix::errno::Errno;
use nix::fcntl::{AT_FDCWD, AtFlags, OFlag, openat};
use nix::sys::stat::{Mode, SFlag, fstat, fstatat, mkdirat};
use nix::unistd::{UnlinkatFlags, unlinkat};

use crate::error::{Error, IoResultExt, Result};
use crate::filesystem::Filesystem;
use crate::names::LockName;
use crate::sys::{self, DirReader, FileId};

mod create;
mod denied;
mod own;
mod park;
mod read;

pub(crate) use create::{Created, Spare};
use denied::{denied_create_state, denied_open_state};
pub(crate) use park::Kept;
pub(crate) use read::Found;
use read::file_type;

/// The default name of the state directory inside the locked directory.
pub(crate) const STATE_DIR_NAME: &str = ".rwdir";

/// Mode of lock files before the umask: readable by everyone, so that any user can judge
/// the owner; removal is governed by the directory's permissions.
const FILE_MODE: u32 = 0o644;
/// Mode of the state directory before the umask.
const DIR_MODE: u32 = 0o777;

/// An open state directory (`DIR/.rwdir`).
#[derive(Debug)]
pub(crate) struct StateDir {
    fd: OwnedFd,
    /// The directory that holds the state directory (DIR), and the state directory's
    /// name in it: to notice when the state directory is no longer there (renamed,
    /// removed, replaced), which takes the lock away from everyone who holds one.
    parent: OwnedFd,
    leaf: std::ffi::OsString,
    /// Shared with the guards' records (`crate::owned`), which name their files by it.
    path: Arc<Path>,
    /// Whether the filesystem may be shared between hosts ([`Filesystem::is_shared`],
    /// from the `statfs` magic number alone: every FUSE mount is shared).
    shared: bool,
    /// How much older than its lease another host's lock file must look to be judged
    /// dead ([`Filesystem::judge_margin`], or the cache window passed to
    /// [`Builder::cache_window`](crate::Builder::cache_window) plus 1 s).
    margin: Duration,
    /// `(st_dev, st_ino)` of the directory when it was opened.
    id: FileId,
    /// Whether `O_TMPFILE` + `linkat` works here; cleared on the first failure.
    tmpfile: AtomicBool,
    /// Whether `renameat2(RENAME_NOREPLACE)` works here; cleared on the first refusal.
    renames: AtomicBool,
    /// Whether `linkat(fd, "", AT_EMPTY_PATH)` works for us (since Linux 6.10 for the
    /// file's opener, before only with `CAP_DAC_READ_SEARCH`); cleared on the first
    /// refusal, after which `/proc/self/fd/N` is linked instead (one path walk more).
    empty_path: AtomicBool,
    /// On a local filesystem, one directory stream rewound for each listing (saves the
    /// open/close of a fresh stream). Remote filesystems open a fresh stream every time,
    /// which is what makes the server answer.
    stream: parking_lot::Mutex<Option<DirReader>>,
    /// A hint kept for the protocol layer, which has no longer-lived place of its own:
    /// whether the last write acquisition through this handle found the directory free
    /// of writers (no `.master_lock`, no queued writer ahead of it). Only then does the
    /// next one try the fast path (V6 in docs/protocol-notes.md) before queueing.
    writers_absent: AtomicBool,
    /// The readers' hint (V7 in docs/protocol-notes.md): whether the last read
    /// acquisition through this handle found the directory free at its decisive listing
    /// (R3). Only then does the next one announce itself without R1's listing.
    readers_free: AtomicBool,
    /// A reader's file kept between reads (`park`).
    park: park::Park,
}

#[cfg(test)]
thread_local! {
    /// Listings made by this thread ([`StateDir::list`]), for tests that count them.
    pub(crate) static LISTINGS: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
    /// The same count, readable from another thread while this one waits.
    pub(crate) static LISTINGS_SHARED: std::cell::RefCell<Option<std::sync::Arc<std::sync::atomic::AtomicUsize>>> =
        const { std::cell::RefCell::new(None) };
    /// Names this thread looked up with [`StateDir::exists`], readable from another
    /// thread, for tests that count them.
    pub(crate) static EXISTS_SHARED: std::cell::RefCell<Option<std::sync::Arc<std::sync::atomic::AtomicUsize>>> =
        const { std::cell::RefCell::new(None) };
    /// Reads of `.master_lock` made by this thread ([`StateDir::read`]: its judgements),
    /// readable from another thread, for tests that count them.
    pub(crate) static MASTER_READS_SHARED: std::cell::RefCell<Option<std::sync::Arc<std::sync::atomic::AtomicUsize>>> =
        const { std::cell::RefCell::new(None) };
    /// Reads of queued writers' files made by this thread ([`StateDir::read`]: their
    /// judgements), readable from another thread, for tests that count them.
    pub(crate) static PENDING_READS_SHARED: std::cell::RefCell<Option<std::sync::Arc<std::sync::atomic::AtomicUsize>>> =
        const { std::cell::RefCell::new(None) };
    /// Touches of our own files made by this thread ([`StateDir::touch`]).
    pub(crate) static TOUCHES: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
}

/// The lock files found by one `readdir`, by kind. Foreign names are left out.
///
/// `pub`, with the fields and methods the fuzz harness checks, for the harness only
/// (re-exported by `rwdir::internals` with the `fuzzing` feature).
#[derive(Debug, Default)]
#[cfg_attr(not(feature = "fuzzing"), allow(unreachable_pub))]
pub struct Listing {
    /// Whether `.master_lock` is there.
    pub master: bool,
    /// Queued writers, sorted by queue order `(ns, uuid)`.
    pub pending: Vec<LockName>,
    /// Readers.
    pub slaves: Vec<LockName>,
    /// Breakers, sorted by `(ns, uuid)`.
    pub breaks: Vec<LockName>,
    /// Files being created.
    pub tmps: Vec<LockName>,
    /// Fencing-token numbers, sorted.
    pub tokens: Vec<u64>,
    /// How many readers' files the listing showed: `slaves.len()`, or in a listing
    /// without the readers ([`StateDir::list_writers`]) their count.
    pub(crate) readers: usize,
    /// Whether the directory entry of the highest token said "regular file" (`DT_REG`):
    /// only such a token is renamed to the next number (see `allocate_token`).
    pub(crate) top_token_regular: bool,
    /// Whether the names are one snapshot of the directory: a local filesystem, and one
    /// `getdents64` call returned them all (see `DirReader::for_each`).
    pub(crate) snapshot: bool,
}

#[cfg_attr(not(feature = "fuzzing"), allow(unreachable_pub))]
impl Listing {
    /// Whether `name` is in the listing.
    pub fn has(&self, name: &LockName) -> bool {
        match name {
            LockName::Master => self.master,
            LockName::Pending { .. } => self.pending.contains(name),
            LockName::Slave { .. } => self.slaves.contains(name),
            LockName::Break { .. } => self.breaks.contains(name),
            LockName::Tmp { .. } => self.tmps.contains(name),
            LockName::Token(n) => self.tokens.contains(n),
        }
    }

    /// The highest token (0 if none), and whether its entry is a regular file.
    pub(crate) fn top_token(&self) -> (u64, bool) {
        (
            self.tokens.last().copied().unwrap_or(0),
            self.top_token_regular,
        )
    }

    /// Sorts an unordered set of names into a listing, as a listing of the directory
    /// does (for the fuzz target).
    #[cfg(feature = "fuzzing")]
    pub fn from_names(names: impl IntoIterator<Item = LockName>) -> Listing {
        let mut l = Listing::default();
        for name in names {
            l.add(name);
        }
        l.sort();
        l
    }

    /// Files `name` where it belongs (unsorted until [`Listing::sort`]).
    fn add(&mut self, name: LockName) {
        match name {
            LockName::Master => self.master = true,
            LockName::Pending { .. } => self.pending.push(name),
            LockName::Slave { .. } => self.slaves.push(name),
            LockName::Break { .. } => self.breaks.push(name),
            LockName::Tmp { .. } => self.tmps.push(name),
            LockName::Token(n) => self.tokens.push(n),
        }
    }

    /// Puts the queues and the tokens in order.
    fn sort(&mut self) {
        self.pending.sort_by_key(LockName::order_key);
        self.breaks.sort_by_key(LockName::order_key);
        self.tokens.sort_unstable();
    }
}

/// What [`StateDir::rename_token`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Renamed {
    /// The token now has its new number.
    Done,
    /// The new number is taken (T2's `EEXIST`).
    Taken,
    /// The old number is gone.
    Missing,
    /// Not done here: make the new token with `put`.
    Unsupported,
}

impl StateDir {
    /// Opens (and with `create`, makes) the state directory. `Ok(None)` when it does not
    /// exist and `create` is false.
    ///
    /// `cache_window`: how stale this client's view of another host's file can be, where
    /// the caller knows better than the filesystem's kind (`None`: by the kind).
    pub(crate) fn open(
        dir: &Path,
        state: Option<&Path>,
        create: bool,
        cache_window: Option<Duration>,
    ) -> Result<Option<StateDir>> {
        let dir_fd = openat(
            AT_FDCWD,
            dir,
            OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC,
            Mode::empty(),
        )
        .map_err(|e| match e {
            Errno::ENOTDIR => Error::NotADirectory {
                path: dir.to_path_buf(),
                found: "not a directory",
            },
            e => Error::Io {
                action: "open directory",
                path: dir.to_path_buf(),
                source: e.into(),
            },
        })?;
        let (parent_fd, leaf, path): (OwnedFd, &OsStr, PathBuf) = match state {
            None => (dir_fd, OsStr::new(STATE_DIR_NAME), dir.join(STATE_DIR_NAME)),
            Some(state) => {
                let leaf = state.file_name().ok_or_else(|| Error::NotADirectory {
                    path: state.to_path_buf(),
                    found: "no final path component",
                })?;
                let parent = match state.parent() {
                    Some(p) if !p.as_os_str().is_empty() => p,
                    _ => Path::new("."),
                };
                let pfd = openat(
                    AT_FDCWD,
                    parent,
                    OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC,
                    Mode::empty(),
                )
                .at("open directory", || parent.to_path_buf())?;
                (pfd, leaf, state.to_path_buf())
            }
        };
        loop {
            match openat(
                &parent_fd,
                leaf,
                OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
                Mode::empty(),
            ) {
                Ok(fd) => {
                    let mut fs = Filesystem::from_facts(&sys::fs_facts(&fd, false));
                    // A FUSE mount is named (sshfs, CephFS...) only by the mount table,
                    // read once per state directory opened.
                    if fs.needs_mount_table() {
                        fs = Filesystem::from_facts(&sys::fs_facts(&fd, true));
                    }
                    let shared = fs.is_shared();
                    let margin = fs.judge_margin_with(cache_window);
                    let st = fstat(&fd).at("inspect state directory", || path.clone())?;
                    let id = FileId::of(&st);
                    return Ok(Some(StateDir {
                        fd,
                        parent: parent_fd,
                        leaf: leaf.to_os_string(),
                        path: path.into(),
                        shared,
                        margin,
                        id,
                        tmpfile: AtomicBool::new(true),
                        renames: AtomicBool::new(true),
                        empty_path: AtomicBool::new(true),
                        stream: parking_lot::Mutex::new(None),
                        writers_absent: AtomicBool::new(true),
                        readers_free: AtomicBool::new(false),
                        park: park::Park::default(),
                    }));
                }
                Err(Errno::ENOENT) if create => {
                    match mkdirat(&parent_fd, leaf, Mode::from_bits_truncate(DIR_MODE)) {
                        Ok(()) | Err(Errno::EEXIST) => continue,
                        Err(e) => {
                            return Err(denied_create_state(e, &parent_fd, path));
                        }
                    }
                }
                Err(Errno::ENOENT) => return Ok(None),
                Err(Errno::ELOOP | Errno::ENOTDIR) => {
                    let found = match fstatat(&parent_fd, leaf, AtFlags::AT_SYMLINK_NOFOLLOW) {
                        Ok(st) if file_type(&st) == SFlag::S_IFLNK => "a symlink",
                        Ok(st) if file_type(&st) == SFlag::S_IFREG => "a regular file",
                        _ => "not a directory",
                    };
                    return Err(Error::NotADirectory { path, found });
                }
                Err(e) => {
                    let st = fstatat(&parent_fd, leaf, AtFlags::AT_SYMLINK_NOFOLLOW);
                    return Err(denied_open_state(e, st, path));
                }
            }
        }
    }

    /// The state directory's path.
    pub(crate) fn path(&self) -> &Path {
        &self.path
    }

    /// Whether the state directory is on a filesystem that may be shared between hosts.
    pub(crate) fn is_remote(&self) -> bool {
        self.shared
    }

    /// `(st_dev, st_ino)` of the state directory when it was opened: which lock this is,
    /// whatever path or handle reached it.
    pub(crate) fn id(&self) -> FileId {
        self.id
    }

    /// Whether something is at `name` (one `fstatat`, symlinks not followed); `true` if
    /// that cannot be told.
    pub(crate) fn exists(&self, name: &LockName) -> bool {
        #[cfg(test)]
        EXISTS_SHARED.with(|n| {
            if let Some(n) = n.borrow().as_ref() {
                n.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            }
        });
        !matches!(
            fstatat(
                &self.fd,
                name.text().as_cstr(),
                AtFlags::AT_SYMLINK_NOFOLLOW
            ),
            Err(Errno::ENOENT | Errno::ENOTDIR)
        )
    }

    /// The state directory's path, shared.
    pub(crate) fn shared_path(&self) -> Arc<Path> {
        Arc::clone(&self.path)
    }

    pub(crate) fn path_of(&self, name: &LockName) -> PathBuf {
        self.path.join(name.to_string())
    }

    /// Whether `path` still names the directory we have open (one `lstat`). Always
    /// `false` on a remote filesystem, whose `stat` answers may be stale: there the
    /// directory is reopened for every acquisition.
    pub(crate) fn is_current(&self) -> bool {
        if self.is_remote() {
            return false;
        }
        match fstatat(AT_FDCWD, &*self.path, AtFlags::AT_SYMLINK_NOFOLLOW) {
            Ok(st) => FileId::of(&st) == self.id && st.st_nlink > 0,
            Err(_) => false,
        }
    }

    /// Whether the state directory is still where it was opened: DIR (which may have
    /// been renamed) still has it under its name. If not (`mv DIR/.rwdir ...`, or a copy
    /// put in its place), contenders that open `DIR/.rwdir` no longer see our files.
    fn in_place(&self) -> Result<bool> {
        match fstatat(
            &self.parent,
            self.leaf.as_os_str(),
            AtFlags::AT_SYMLINK_NOFOLLOW,
        ) {
            Ok(st) => Ok(FileId::of(&st) == self.id),
            Err(Errno::ENOENT | Errno::ENOTDIR) => Ok(false),
            Err(e) => Err(e).at("inspect state directory", || self.path.to_path_buf()),
        }
    }

    /// One `readdir` of the state directory, for the protocol: temporary files (`.tmp-`,
    /// a reader's file kept between reads among them, `park`) are skipped by their
    /// prefix (`tmps` stays empty); no step of the protocol reads them.
    pub(crate) fn list(&self) -> Result<Listing> {
        self.list_of(true, true, false)
    }

    /// [`StateDir::list`] with the temporary files: for `status` and cleanup.
    pub(crate) fn list_all(&self) -> Result<Listing> {
        self.list_of(true, true, true)
    }

    /// [`StateDir::list`] without the readers: their markers are skipped by their prefix,
    /// neither parsed nor kept (`slaves` stays empty), only counted. For a reader's own
    /// looks (R1, R3), which decide by `.master_lock` and the queued writers alone. The
    /// temporary files are in it until this handle has swept the dead processes' kept
    /// files (`protocol::read_in`).
    pub(crate) fn list_writers(&self) -> Result<Listing> {
        self.list_of(true, false, !self.swept())
    }

    /// [`StateDir::list`] without the queued writers: their files are skipped by their
    /// prefix, neither parsed nor kept (`pending` stays empty). For W5's looks, which
    /// decide by the readers alone and take the highest token from the same listing:
    /// with N writers queued, every contended grant parsed N names there for nothing
    /// (docs/notes/contention.md §23).
    pub(crate) fn list_readers(&self) -> Result<Listing> {
        self.list_of(false, true, false)
    }

    fn list_of(&self, writers: bool, readers: bool, tmps: bool) -> Result<Listing> {
        #[cfg(test)]
        {
            LISTINGS.with(|n| n.set(n.get() + 1));
            LISTINGS_SHARED.with(|n| {
                if let Some(n) = n.borrow().as_ref() {
                    n.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                }
            });
        }
        let open = || {
            openat(
                &self.fd,
                ".",
                OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC,
                Mode::empty(),
            )
            .map(DirReader::new)
            .at("list state directory", || self.path.to_path_buf())
        };
        let mut l = Listing::default();
        // The highest token seen so far, and whether its entry is a regular file.
        let mut top: Option<(u64, bool)> = None;
        let mut collect = |dir: &mut DirReader| -> Result<usize> {
            dir.for_each(|name, d_type| {
                if !writers && LockName::is_pending(name) {
                    return;
                }
                if !readers && LockName::is_slave(name) {
                    l.readers += 1;
                    return;
                }
                if !tmps && LockName::is_tmp(name) {
                    return;
                }
                if let Some(name) = LockName::parse(name) {
                    if let LockName::Token(n) = name
                        && top.is_none_or(|(m, _)| n > m)
                    {
                        top = Some((n, d_type == nix::libc::DT_REG));
                    }
                    l.add(name);
                }
            })
            .at("list state directory", || self.path.to_path_buf())
        };
        // Another thread of ours listing at this moment has the stream: a fresh one
        // costs an open and a close, waiting for that thread cost far more (threads
        // sharing one `DirLock` listed one at a time).
        let shared = if self.is_remote() {
            None
        } else {
            self.stream.try_lock()
        };
        let batches = if let Some(mut stream) = shared {
            let dir = match stream.as_mut() {
                Some(dir) => dir,
                None => stream.insert(open()?),
            };
            match collect(dir) {
                Ok(batches) => batches,
                Err(e) => {
                    *stream = None;
                    return Err(e);
                }
            }
        } else {
            collect(&mut open()?)?
        };
        if readers {
            l.readers = l.slaves.len();
        }
        l.sort();
        l.top_token_regular = top.is_some_and(|(_, regular)| regular);
        l.snapshot = batches <= 1 && !self.is_remote();
        Ok(l)
    }

    /// Rewinds the directory stream for the next listing now (one `lseek`): called
    /// before sleeping, so that a listing after the wake-up does not make it. Errors are
    /// left to that listing.
    pub(crate) fn rewind(&self) {
        // Busy: another thread is listing, and the next listing rewinds anyway.
        if let Some(mut stream) = self.stream.try_lock()
            && let Some(dir) = stream.as_mut()
        {
            let _ = dir.rewind();
        }
    }

    /// Removes a lock name. `Ok(false)` if it was already gone. A directory at a lock name
    /// is removed only if it is empty.
    pub(crate) fn unlink(&self, name: &LockName) -> Result<bool> {
        let target = name.text();
        match unlinkat(&self.fd, target.as_cstr(), UnlinkatFlags::NoRemoveDir) {
            Ok(()) => Ok(true),
            Err(Errno::ENOENT) => Ok(false),
            Err(Errno::EISDIR) => {
                match unlinkat(&self.fd, target.as_cstr(), UnlinkatFlags::RemoveDir) {
                    Ok(()) => Ok(true),
                    Err(Errno::ENOENT) => Ok(false),
                    Err(e) => Err(self.denied_remove("remove directory at lock name", name, e)),
                }
            }
            Err(e) => Err(self.denied_remove("remove lock file", name, e)),
        }
    }

    /// The hint of [`StateDir::writers_absent`](StateDir): whether the last write
    /// acquisition here found no other writer.
    pub(crate) fn writers_were_absent(&self) -> bool {
        self.writers_absent.load(Ordering::Relaxed)
    }

    /// Records what a write acquisition found (see [`StateDir::writers_were_absent`]).
    pub(crate) fn set_writers_absent(&self, absent: bool) {
        self.writers_absent.store(absent, Ordering::Relaxed);
    }

    /// The hint of [`StateDir::readers_free`](StateDir): whether the last read
    /// acquisition here found the directory free at R3.
    pub(crate) fn readers_were_free(&self) -> bool {
        self.readers_free.load(Ordering::Relaxed)
    }

    /// Records what a read acquisition's R3 found (see [`StateDir::readers_were_free`]).
    pub(crate) fn set_readers_free(&self, free: bool) {
        self.readers_free.store(free, Ordering::Relaxed);
    }

    /// Whether [`StateDir::rename_token`] may work here.
    pub(crate) fn renames_tokens(&self) -> bool {
        !self.is_remote() && self.renames.load(Ordering::Relaxed)
    }

    /// Renames the fencing token `from` to `to` if `to` does not exist
    /// (`renameat2(RENAME_NOREPLACE)`): T2 and T4 of docs/protocol.md §3.7 in one step for the
    /// usual case, where the highest token is the only one (see `allocate_token`). Local
    /// filesystems only; `Unsupported` after the first refusal of the flag, and for
    /// anything else that stops the rename (another user's token in a sticky state
    /// directory): the caller then makes `to` with `put`.
    pub(crate) fn rename_token(&self, from: u64, to: u64) -> Renamed {
        if !self.renames_tokens() {
            return Renamed::Unsupported;
        }
        match self.rename_noreplace(&LockName::Token(from), &LockName::Token(to)) {
            Ok(()) => Renamed::Done,
            Err(Errno::EEXIST) => Renamed::Taken,
            Err(Errno::ENOENT) => Renamed::Missing,
            Err(Errno::EINVAL | Errno::ENOSYS | Errno::EOPNOTSUPP) => {
                self.renames.store(false, Ordering::Relaxed);
                Renamed::Unsupported
            }
            Err(_) => Renamed::Unsupported,
        }
    }

    /// `renameat2(from, to, RENAME_NOREPLACE)` within the state directory: never replaces
    /// what is at `to` (`EEXIST`), never follows a symlink at either name.
    pub(crate) fn rename_noreplace(&self, from: &LockName, to: &LockName) -> nix::Result<()> {
        use nix::fcntl::{RenameFlags, renameat2};
        let (from, to) = (from.text(), to.text());
        renameat2(
            &self.fd,
            from.as_cstr(),
            &self.fd,
            to.as_cstr(),
            RenameFlags::RENAME_NOREPLACE,
        )
    }

    /// The open state directory.
    pub(crate) fn fd(&self) -> &OwnedFd {
        &self.fd
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use uuid::Uuid;

    use super::read::{Direct, read_fd, reread_direct};
    use super::*;
    use crate::holder::{Holder, Kind};

    fn holder(kind: Kind, host: &str) -> Holder {
        Holder {
            kind,
            host: host.into(),
            boot_id: "b".into(),
            pidns: 1,
            pid: 2,
            start: 3,
            pgid: 0,
            nonce: Uuid::new_v4(),
            since_ns: 4,
            lease_ms: 5,
        }
    }

    fn state_dir(dir: &std::path::Path) -> StateDir {
        match StateDir::open(dir, None, true, None).expect("open") {
            Some(sd) => sd,
            None => panic!("no state directory"),
        }
    }

    fn record_at(sd: &StateDir, name: &LockName) -> Option<Holder> {
        match sd.read(name).expect("read") {
            Found::File { holder, .. } => holder,
            Found::Gone => panic!("{name} is gone"),
        }
    }

    /// A reader's listing has what a full one has but the readers: `.master_lock`, the
    /// queue in order, the tokens, and whether it is one snapshot.
    #[test]
    fn a_listing_without_readers_keeps_everything_else() {
        let dir = tempfile::tempdir().expect("tempdir");
        let sd = state_dir(dir.path());
        let h = holder(Kind::Read, "host");
        let mut names = vec![LockName::Master, LockName::Token(7)];
        for ns in [3, 1, 2] {
            names.push(LockName::Pending {
                ns,
                uuid: Uuid::new_v4(),
            });
        }
        for _ in 0..5 {
            names.push(LockName::Slave {
                uuid: Uuid::new_v4(),
            });
        }
        for name in &names {
            assert!(sd.put(name, &h.record()).expect("put").is_some(), "{name}");
        }
        // A foreign name with a reader's prefix is no reader in either listing.
        std::fs::write(
            sd.path_of(&LockName::Master)
                .with_file_name(".slave_lock-x"),
            "",
        )
        .expect("foreign file");
        let (full, writers) = (sd.list().expect("list"), sd.list_writers().expect("list"));
        assert_eq!(full.slaves.len(), 5);
        assert!(writers.slaves.is_empty());
        assert!(writers.master && writers.snapshot);
        assert_eq!(writers.pending, full.pending);
        assert_eq!(writers.pending.len(), 3);
        assert_eq!(writers.tokens, vec![7]);
    }

    /// A spare written ahead is linked as it is when the `put` is for its record, and
    /// written again, whole and no longer than the new record, when it is not.
    #[test]
    fn a_spare_written_ahead_is_linked_with_the_right_record() {
        let dir = tempfile::tempdir().expect("tempdir");
        let sd = state_dir(dir.path());
        let Some(mut spare) = sd.spare() else {
            return; // no O_TMPFILE here: puts make their files themselves
        };
        let ahead = holder(Kind::Read, "host");
        spare.write(&ahead.record());
        assert_eq!(
            spare.record(Kind::Read, Duration::from_secs(60)),
            Some(&ahead)
        );
        assert_eq!(spare.record(Kind::Write, Duration::from_secs(60)), None);
        assert_eq!(spare.record(Kind::Read, Duration::ZERO), None, "too old");
        let a = LockName::Slave {
            uuid: Uuid::new_v4(),
        };
        assert!(
            sd.put_with(&a, &ahead.record(), Some(spare))
                .expect("put")
                .is_some()
        );
        assert_eq!(record_at(&sd, &a), Some(ahead));

        // Written ahead for a longer record, used for another one.
        let mut spare = sd.spare().expect("a second spare");
        spare.write(&holder(Kind::Write, "a-much-longer-host-name").record());
        let other = holder(Kind::Break, "h");
        let b = LockName::Break {
            ns: 1,
            uuid: Uuid::new_v4(),
        };
        assert!(
            sd.put_with(&b, &other.record(), Some(spare))
                .expect("put")
                .is_some()
        );
        assert_eq!(record_at(&sd, &b), Some(other));
    }

    /// A local release runs its `then` (a writer's queue file going) once, right after
    /// `.master_lock`'s `unlink`, and still reports a state directory moved away; not at
    /// all when `.master_lock` is not ours.
    #[test]
    fn a_local_release_runs_then_after_the_unlink_and_before_the_look_at_the_directory() {
        let dir = tempfile::tempdir().expect("tempdir");
        let sd = state_dir(dir.path());
        let h = holder(Kind::Write, "host");
        let release = |sd: &StateDir, created: &Created| {
            let mut ran = Vec::new();
            let r = sd.release_local(&LockName::Master, &created.fd, created.id, || {
                ran.push(sd.exists(&LockName::Master));
            });
            (r.map(|r| r.expect("release")), ran)
        };
        let Some(mine) = sd.put(&LockName::Master, &h.record()).expect("put") else {
            panic!(".master_lock taken");
        };
        assert_eq!(release(&sd, &mine), (Some(true), vec![false]));

        // Not ours: `.master_lock` stays, and `then` does not run.
        let Some(mine) = sd.put(&LockName::Master, &h.record()).expect("put") else {
            panic!(".master_lock taken");
        };
        sd.unlink(&LockName::Master).expect("unlink");
        assert!(
            sd.put(&LockName::Master, &h.record())
                .expect("put")
                .is_some()
        );
        assert_eq!(release(&sd, &mine), (Some(false), vec![]));
        assert!(sd.exists(&LockName::Master));
        sd.unlink(&LockName::Master).expect("unlink");

        // The state directory moved away after our `.master_lock` was made: removed,
        // `then` ran, and the release says the lock was lost.
        let state = sd.path_of(&LockName::Master);
        let state = state.parent().expect("state directory");
        let moved = dir.path().join("moved");
        let Some(mine) = sd.put(&LockName::Master, &h.record()).expect("put") else {
            panic!(".master_lock taken");
        };
        std::fs::rename(state, &moved).expect("move");
        assert_eq!(release(&sd, &mine), (Some(false), vec![false]));

        // The look at the directory comes after `then`: moved back by `then`, it is in
        // place.
        std::fs::rename(&moved, state).expect("move back");
        let Some(mine) = sd.put(&LockName::Master, &h.record()).expect("put") else {
            panic!(".master_lock taken");
        };
        std::fs::rename(state, &moved).expect("move");
        let r = sd.release_local(&LockName::Master, &mine.fd, mine.id, || {
            std::fs::rename(&moved, state).expect("move back");
        });
        assert!(matches!(r, Some(Ok(true))), "{r:?}");
    }

    #[test]
    fn reread_direct_reads_the_whole_record_or_declines() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("record");
        let holder = holder(Kind::Write, "h");
        std::fs::write(&path, holder.format()).expect("write record");
        let fd: OwnedFd = std::fs::File::open(&path).expect("open").into();
        // Read to EOF first, as `read_open` does: the re-read starts again at offset 0.
        let first = read_fd(&fd, false).expect("read");
        assert_eq!(first.holder.as_ref(), Some(&holder));
        match reread_direct(&fd).expect("reread") {
            // tmpfs and a few others refuse O_DIRECT: the caller waits and reads again.
            Direct::Refused => {}
            Direct::Read(again) => assert_eq!(again, Some(holder)),
        }
        // The descriptor is left without O_DIRECT.
        let flags = nix::fcntl::fcntl(&fd, nix::fcntl::FcntlArg::F_GETFL).expect("getfl");
        assert!(!OFlag::from_bits_truncate(flags).contains(OFlag::O_DIRECT));
    }
}
