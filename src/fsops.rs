//! The only module that touches lock files. Every operation is relative to an open
//! descriptor of the state directory, never follows a symlink at a lock name, and never
//! opens an existing lock name for writing.

use std::ffi::OsStr;
use std::io::Write as _;
use std::os::fd::{AsRawFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use nix::errno::Errno;
use nix::fcntl::{AT_FDCWD, AtFlags, OFlag, openat};
use nix::sys::stat::{FileStat, Mode, SFlag, fstat, fstatat, mkdirat};
use nix::unistd::{UnlinkatFlags, linkat, unlinkat};
use uuid::Uuid;

use crate::error::{Error, IoResultExt, Result};
use crate::holder::{Holder, MAX_RECORD};
use crate::names::LockName;
use crate::sys::{self, DirReader, FsKind};

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
    path: PathBuf,
    kind: FsKind,
    /// `(st_dev, st_ino)` of the directory when it was opened.
    id: (u64, u64),
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
}

/// The lock files found by one `readdir`, by kind. Foreign names are left out.
#[derive(Debug, Default)]
pub(crate) struct Listing {
    pub(crate) master: bool,
    /// Sorted by queue order `(ns, uuid)`.
    pub(crate) pending: Vec<LockName>,
    pub(crate) slaves: Vec<LockName>,
    /// Sorted by `(ns, uuid)`.
    pub(crate) breaks: Vec<LockName>,
    pub(crate) tmps: Vec<LockName>,
    pub(crate) tokens: Vec<u64>,
    /// Whether the directory entry of the highest token said "regular file" (`DT_REG`):
    /// only such a token is renamed to the next number (see `allocate_token`).
    pub(crate) top_token_regular: bool,
}

impl Listing {
    pub(crate) fn has(&self, name: &LockName) -> bool {
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

    /// Sorts an unordered set of names into a listing (also used by the fuzz target).
    pub(crate) fn from_names(names: impl IntoIterator<Item = LockName>) -> Listing {
        let mut l = Listing::default();
        for name in names {
            match name {
                LockName::Master => l.master = true,
                LockName::Pending { .. } => l.pending.push(name),
                LockName::Slave { .. } => l.slaves.push(name),
                LockName::Break { .. } => l.breaks.push(name),
                LockName::Tmp { .. } => l.tmps.push(name),
                LockName::Token(n) => l.tokens.push(n),
            }
        }
        l.pending.sort_by_key(LockName::order_key);
        l.breaks.sort_by_key(LockName::order_key);
        l.tokens.sort_unstable();
        l
    }
}

/// What reading a lock file found.
#[derive(Debug, Clone)]
pub(crate) enum Found {
    /// Nothing at that name.
    Gone,
    /// Something is there.
    File {
        /// The parsed record; `None` for a malformed file (garbage, empty, too large, a
        /// symlink, a directory, a FIFO, unreadable...).
        holder: Option<Holder>,
        /// Last modification (the heartbeat).
        mtime: SystemTime,
        /// Whether it is a regular file.
        regular: bool,
    },
}

/// A lock file we created: its descriptor (for the heartbeat and ownership checks) and
/// the nonce written into it.
#[derive(Debug)]
pub(crate) struct Created {
    pub(crate) fd: OwnedFd,
    /// `(st_dev, st_ino)` of the file, when it is known without a system call (a file
    /// made from a [`Spare`]): a release then needs no `fstat` before its removal.
    pub(crate) id: Option<(u64, u64)>,
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

/// An anonymous file (`O_TMPFILE`) made ahead of time by a waiter, so that the `put`
/// that follows its wake-up only writes and links it: creating an inode is the
/// costliest step of a `put` on tmpfs (~8 µs of ~17 µs), and a hand-off waits for it.
/// Never visible in the directory; it vanishes when dropped unused. Its inode is read
/// while waiting too, so that the release of the file it becomes needs no `fstat`.
#[derive(Debug)]
pub(crate) struct Spare {
    file: std::fs::File,
    id: Option<(u64, u64)>,
    /// The record already written into the file ([`Spare::write`]), and when.
    written: Option<(Holder, Instant)>,
    /// The length of what the file holds.
    len: u64,
}

impl Spare {
    /// Writes `holder`'s record into the file now, so that the `put` after a wake-up
    /// only links it. Best effort: if the write fails, the `put` writes again and
    /// reports the error should it recur.
    pub(crate) fn write(&mut self, holder: Holder) {
        self.written = None;
        if self.fill(holder.format().as_bytes()).is_ok() {
            self.written = Some((holder, Instant::now()));
        }
    }

    /// Makes `content` the whole of the file.
    fn fill(&mut self, content: &[u8]) -> std::io::Result<()> {
        use std::os::unix::fs::FileExt as _;
        self.file.write_all_at(content, 0)?;
        let len = content.len() as u64;
        if self.len > len {
            self.file.set_len(len)?;
        }
        self.len = len;
        Ok(())
    }

    /// The record written into the file, if it was written within `fresh` and is of
    /// `kind`.
    pub(crate) fn record(&self, kind: crate::holder::Kind, fresh: Duration) -> Option<&Holder> {
        self.written
            .as_ref()
            .filter(|(h, at)| h.kind == kind && at.elapsed() <= fresh)
            .map(|(h, _)| h)
    }
}

impl StateDir {
    /// Opens (and with `create`, makes) the state directory. `Ok(None)` when it does not
    /// exist and `create` is false.
    pub(crate) fn open(dir: &Path, state: Option<&Path>, create: bool) -> Result<Option<StateDir>> {
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
                    let kind = sys::fs_kind(&fd);
                    let st = fstat(&fd).at("inspect state directory", || path.clone())?;
                    #[allow(clippy::unnecessary_cast, clippy::useless_conversion)]
                    let id = (st.st_dev as u64, st.st_ino as u64);
                    return Ok(Some(StateDir {
                        fd,
                        parent: parent_fd,
                        leaf: leaf.to_os_string(),
                        path,
                        kind,
                        id,
                        tmpfile: AtomicBool::new(true),
                        renames: AtomicBool::new(true),
                        empty_path: AtomicBool::new(true),
                        stream: parking_lot::Mutex::new(None),
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
                    return Err(denied("open state directory", path.clone(), e, st, |who| {
                        format!(
                            "this user may not open it: it belongs to {}; ask {} or an \
                                 administrator to make it group-accessible and setgid \
                                 (`chmod 2775`) for a group this user is in (see \
                                 docs/multi-user.md)",
                            who.describe(),
                            who.ask()
                        )
                    }));
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
        self.kind == FsKind::Remote
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
        match fstatat(AT_FDCWD, &self.path, AtFlags::AT_SYMLINK_NOFOLLOW) {
            #[allow(clippy::unnecessary_cast, clippy::useless_conversion)]
            Ok(st) => (st.st_dev as u64, st.st_ino as u64) == self.id && st.st_nlink > 0,
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
            #[allow(clippy::unnecessary_cast, clippy::useless_conversion)]
            Ok(st) => Ok((st.st_dev as u64, st.st_ino as u64) == self.id),
            Err(Errno::ENOENT | Errno::ENOTDIR) => Ok(false),
            Err(e) => Err(e).at("inspect state directory", || self.path.clone()),
        }
    }

    /// One `readdir` of the state directory.
    pub(crate) fn list(&self) -> Result<Listing> {
        let open = || {
            openat(
                &self.fd,
                ".",
                OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC,
                Mode::empty(),
            )
            .map(DirReader::new)
            .at("list state directory", || self.path.clone())
        };
        let mut names = Vec::new();
        // The highest token seen so far, and whether its entry is a regular file.
        let mut top: Option<(u64, bool)> = None;
        let mut collect = |dir: &mut DirReader| -> Result<()> {
            dir.for_each(|name, d_type| {
                if let Some(name) = LockName::parse(name) {
                    if let LockName::Token(n) = name
                        && top.is_none_or(|(m, _)| n > m)
                    {
                        top = Some((n, d_type == nix::libc::DT_REG));
                    }
                    names.push(name);
                }
            })
            .at("list state directory", || self.path.clone())
        };
        if self.is_remote() {
            collect(&mut open()?)?;
        } else {
            let mut stream = self.stream.lock();
            let dir = match stream.as_mut() {
                Some(dir) => dir,
                None => stream.insert(open()?),
            };
            if let Err(e) = collect(dir) {
                *stream = None;
                return Err(e);
            }
        }
        let mut l = Listing::from_names(names);
        l.top_token_regular = top.is_some_and(|(_, regular)| regular);
        Ok(l)
    }

    /// Rewinds the directory stream for the next listing now (one `lseek`): called
    /// before sleeping, so that a listing after the wake-up does not make it. Errors are
    /// left to that listing.
    pub(crate) fn rewind(&self) {
        if let Some(dir) = self.stream.lock().as_mut() {
            let _ = dir.rewind();
        }
    }

    /// `put(name)` (PROTOCOL.md §2.1): creates `name` with `holder`'s record, atomically,
    /// never overwriting anything. `Ok(None)` if the name is taken.
    pub(crate) fn put(&self, name: &LockName, holder: &Holder) -> Result<Option<Created>> {
        self.put_with(name, holder, None)
    }

    /// [`StateDir::put`], using `spare` (from [`StateDir::spare`]) for the file if given.
    pub(crate) fn put_with(
        &self,
        name: &LockName,
        holder: &Holder,
        spare: Option<Spare>,
    ) -> Result<Option<Created>> {
        let target = name.to_string();
        if self.tmpfile.load(Ordering::Relaxed) {
            let want_id = matches!(name, LockName::Master);
            match self.put_tmpfile(&target, holder, spare, want_id)? {
                Some(r) => return self.resolve_taken(name, holder, r),
                None => self.tmpfile.store(false, Ordering::Relaxed),
            }
        }
        let r = self.put_linked(&target, holder.format().as_bytes())?;
        self.resolve_taken(name, holder, r)
    }

    /// An anonymous file for a later [`StateDir::put_with`]: `None` where `O_TMPFILE`
    /// does not work, and on any error (the `put` then makes its file itself and reports
    /// the error, if it recurs, with the lock file's name).
    pub(crate) fn spare(&self) -> Option<Spare> {
        if !self.tmpfile.load(Ordering::Relaxed) {
            return None;
        }
        let fd = self.open_tmpfile().ok()?;
        #[allow(clippy::unnecessary_cast, clippy::useless_conversion)]
        let id = fstat(&fd)
            .ok()
            .map(|st| (st.st_dev as u64, st.st_ino as u64));
        Some(Spare {
            file: fd.into(),
            id,
            written: None,
            len: 0,
        })
    }

    fn open_tmpfile(&self) -> nix::Result<OwnedFd> {
        openat(
            &self.fd,
            ".",
            OFlag::O_TMPFILE | OFlag::O_WRONLY | OFlag::O_CLOEXEC,
            Mode::from_bits_truncate(FILE_MODE),
        )
    }

    /// `O_TMPFILE` + `linkat`: one anonymous inode, written, then given its name; nothing
    /// is left behind if any step fails. `Ok(None)` when this filesystem (or a missing
    /// `/proc`) cannot do it: the caller falls back to a named temporary file. Other
    /// errors (`ENOSPC`, `EMFILE`, `EROFS`...) are real errors.
    fn put_tmpfile(
        &self,
        target: &str,
        holder: &Holder,
        spare: Option<Spare>,
        want_id: bool,
    ) -> Result<Option<LinkResult>> {
        let (file, id) = match spare {
            // Written while waiting, with this very record (see `Attempt::put`).
            Some(s)
                if s.written
                    .as_ref()
                    .is_some_and(|(h, _)| h.nonce == holder.nonce) =>
            {
                (s.file, s.id)
            }
            Some(mut s) => {
                s.fill(holder.format().as_bytes())
                    .at("write lock file", || self.path.join(target))?;
                (s.file, s.id)
            }
            None => {
                let fd = match self.open_tmpfile() {
                    Ok(fd) => fd,
                    Err(Errno::EOPNOTSUPP | Errno::EISDIR | Errno::EINVAL | Errno::ENOSYS) => {
                        return Ok(None);
                    }
                    Err(e) => {
                        return Err(self.denied_create(
                            "create lock file",
                            self.path.join(target),
                            e,
                        ));
                    }
                };
                let mut file = std::fs::File::from(fd);
                file.write_all(holder.format().as_bytes())
                    .at("write lock file", || self.path.join(target))?;
                // `.master_lock`'s release compares its name with this inode: asking now
                // takes the `fstat` off the release, which a hand-off waits for.
                #[allow(clippy::unnecessary_cast, clippy::useless_conversion)]
                let id = want_id
                    .then(|| fstat(&file).ok())
                    .flatten()
                    .map(|st| (st.st_dev as u64, st.st_ino as u64));
                (file, id)
            }
        };
        let linked = match self.link_anonymous(&file, target) {
            Some(r) => r,
            None => return Ok(None),
        };
        Ok(Some(match linked {
            Ok(()) => LinkResult::Linked(file.into(), id),
            Err(Errno::EEXIST) => LinkResult::Exists,
            Err(Errno::EPERM) => LinkResult::Perm,
            Err(e) => LinkResult::Failed(e, self.path.join(target)),
        }))
    }

    /// Gives the anonymous `file` the name `target`: `linkat(fd, "", AT_EMPTY_PATH)`
    /// where allowed, else through `/proc/self/fd/N`. `None`: neither is possible here.
    fn link_anonymous(&self, file: &std::fs::File, target: &str) -> Option<nix::Result<()>> {
        if self.empty_path.load(Ordering::Relaxed) {
            match linkat(file, "", &self.fd, target, AtFlags::AT_EMPTY_PATH) {
                // Refused without the capability (before Linux 6.10, or the file was not
                // opened with our credentials): ENOENT. Should the state directory itself
                // be gone, the path below says ENOENT too, and that is reported.
                Err(Errno::ENOENT | Errno::EINVAL) => {
                    self.empty_path.store(false, Ordering::Relaxed);
                }
                r => return Some(r),
            }
        }
        let proc_path = format!("/proc/self/fd/{}", file.as_raw_fd());
        match linkat(
            AT_FDCWD,
            proc_path.as_str(),
            &self.fd,
            target,
            AtFlags::AT_SYMLINK_FOLLOW,
        ) {
            Err(Errno::ENOENT) if !Path::new("/proc/self/fd").exists() => None,
            r => Some(r),
        }
    }

    /// Temp file + `link` + `unlink` (the portable `put`).
    fn put_linked(&self, target: &str, content: &[u8]) -> Result<LinkResult> {
        let tmp = LockName::Tmp {
            uuid: Uuid::new_v4(),
        }
        .to_string();
        let fd = openat(
            &self.fd,
            tmp.as_str(),
            OFlag::O_RDWR | OFlag::O_CREAT | OFlag::O_EXCL | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
            Mode::from_bits_truncate(FILE_MODE),
        )
        .map_err(|e| self.denied_create("create temporary file", self.path.join(&tmp), e))?;
        let mut file = std::fs::File::from(fd);
        let written = file.write_all(content);
        let linked = match written {
            Ok(()) => linkat(&self.fd, tmp.as_str(), &self.fd, target, AtFlags::empty()),
            Err(_) => Ok(()),
        };
        // The temporary name has no meaning for the protocol: remove it whatever happened.
        let _ = unlinkat(&self.fd, tmp.as_str(), UnlinkatFlags::NoRemoveDir);
        written.at("write temporary file", || self.path.join(&tmp))?;
        Ok(match linked {
            Ok(()) => LinkResult::Linked(file.into(), None),
            Err(Errno::EEXIST) => LinkResult::Exists,
            Err(Errno::EPERM) => LinkResult::Perm,
            Err(e) => LinkResult::Failed(e, self.path.join(target)),
        })
    }

    /// Turns the outcome of a `link` into "created" or "taken". `EEXIST` is authoritative
    /// on a local filesystem. Otherwise (`EPERM` from sshfs on a lost race, `EEXIST` after
    /// an NFSv3 retransmission) the name is read back and the nonce decides.
    fn resolve_taken(
        &self,
        name: &LockName,
        holder: &Holder,
        r: LinkResult,
    ) -> Result<Option<Created>> {
        match r {
            LinkResult::Linked(fd, id) => Ok(Some(Created { fd, id })),
            LinkResult::Exists if !self.is_remote() => Ok(None),
            LinkResult::Failed(e, path) => Err(self.denied_create("create lock file", path, e)),
            LinkResult::Exists | LinkResult::Perm => {
                let target = name.to_string();
                match openat(
                    &self.fd,
                    target.as_str(),
                    OFlag::O_RDONLY | OFlag::O_NOFOLLOW | OFlag::O_NONBLOCK | OFlag::O_CLOEXEC,
                    Mode::empty(),
                ) {
                    Ok(fd) => {
                        let h = self
                            .read_open(&fd)
                            .at("read lock file", || self.path_of(name))?
                            .and_then(|(h, _, _)| h);
                        if h.is_some_and(|h| h.nonce == holder.nonce) {
                            Ok(Some(Created { fd, id: None }))
                        } else {
                            Ok(None)
                        }
                    }
                    Err(Errno::ENOENT) if matches!(r, LinkResult::Perm) => {
                        // No race was lost: the filesystem refuses hard links. Create the
                        // name directly (an empty or partial file reads as malformed).
                        self.put_direct(&target, holder)
                    }
                    Err(Errno::ENOENT) => Ok(None),
                    Err(_) => Ok(None),
                }
            }
        }
    }

    /// Fallback for filesystems without hard links: `O_CREAT|O_EXCL` on the name itself.
    fn put_direct(&self, target: &str, holder: &Holder) -> Result<Option<Created>> {
        let fd = match openat(
            &self.fd,
            target,
            OFlag::O_RDWR | OFlag::O_CREAT | OFlag::O_EXCL | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
            Mode::from_bits_truncate(FILE_MODE),
        ) {
            Ok(fd) => fd,
            Err(Errno::EEXIST | Errno::EPERM) => return Ok(None),
            Err(e) => {
                return Err(self.denied_create("create lock file", self.path.join(target), e));
            }
        };
        let mut file = std::fs::File::from(fd);
        file.write_all(holder.format().as_bytes())
            .at("write lock file", || self.path.join(target))?;
        Ok(Some(Created {
            fd: file.into(),
            id: None,
        }))
    }

    /// Reads a lock file without following a symlink, blocking on a FIFO, or reading more
    /// than a record's maximum size.
    pub(crate) fn read(&self, name: &LockName) -> Result<Found> {
        let target = name.to_string();
        match openat(
            &self.fd,
            target.as_str(),
            OFlag::O_RDONLY
                | OFlag::O_NOFOLLOW
                | OFlag::O_NONBLOCK
                | OFlag::O_CLOEXEC
                | OFlag::O_NOCTTY,
            Mode::empty(),
        ) {
            Ok(fd) => match self
                .read_open(&fd)
                .at("read lock file", || self.path_of(name))?
            {
                Some((holder, mtime, regular)) => Ok(Found::File {
                    holder,
                    mtime,
                    regular,
                }),
                None => Ok(Found::Gone),
            },
            Err(Errno::ENOENT) => Ok(Found::Gone),
            // A symlink (ELOOP), an unreadable file (EACCES), a socket (ENXIO) ...:
            // malformed, judged by its own mtime. An unreadable file may still be a
            // regular one, which `cleanup` removes once it has expired (C1).
            Err(_) => match fstatat(&self.fd, target.as_str(), AtFlags::AT_SYMLINK_NOFOLLOW) {
                Ok(st) => Ok(Found::File {
                    holder: None,
                    mtime: mtime_of(&st),
                    regular: file_type(&st) == SFlag::S_IFREG,
                }),
                Err(Errno::ENOENT) => Ok(Found::Gone),
                Err(e) => Err(e).at("inspect lock file", || self.path_of(name)),
            },
        }
    }

    /// Removes a lock name. `Ok(false)` if it was already gone. A directory at a lock name
    /// is removed only if it is empty.
    pub(crate) fn unlink(&self, name: &LockName) -> Result<bool> {
        let target = name.to_string();
        match unlinkat(&self.fd, target.as_str(), UnlinkatFlags::NoRemoveDir) {
            Ok(()) => Ok(true),
            Err(Errno::ENOENT) => Ok(false),
            Err(Errno::EISDIR) => {
                match unlinkat(&self.fd, target.as_str(), UnlinkatFlags::RemoveDir) {
                    Ok(()) => Ok(true),
                    Err(Errno::ENOENT) => Ok(false),
                    Err(e) => Err(self.denied_remove("remove directory at lock name", name, e)),
                }
            }
            Err(e) => Err(self.denied_remove("remove lock file", name, e)),
        }
    }

    /// Whether [`StateDir::rename_token`] may work here.
    pub(crate) fn renames_tokens(&self) -> bool {
        !self.is_remote() && self.renames.load(Ordering::Relaxed)
    }

    /// Renames the fencing token `from` to `to` if `to` does not exist
    /// (`renameat2(RENAME_NOREPLACE)`): T2 and T4 of PROTOCOL.md §3.7 in one step for the
    /// usual case, where the highest token is the only one (see `allocate_token`). Local
    /// filesystems only; `Unsupported` after the first refusal of the flag, and for
    /// anything else that stops the rename (another user's token in a sticky state
    /// directory): the caller then makes `to` with `put`.
    pub(crate) fn rename_token(&self, from: u64, to: u64) -> Renamed {
        use nix::fcntl::{RenameFlags, renameat2};
        if !self.renames_tokens() {
            return Renamed::Unsupported;
        }
        let (from, to) = (
            LockName::Token(from).to_string(),
            LockName::Token(to).to_string(),
        );
        match renameat2(
            &self.fd,
            from.as_str(),
            &self.fd,
            to.as_str(),
            RenameFlags::RENAME_NOREPLACE,
        ) {
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

    /// Whether our own file `name`, open as `fd`, is still ours: it has not been unlinked,
    /// and the name still points at the same inode in the state directory that is still
    /// in place (local), or at a record with our nonce (remote filesystems, where inode
    /// numbers and link counts are not reliable).
    pub(crate) fn still_ours(&self, name: &LockName, fd: &OwnedFd, nonce: Uuid) -> Result<bool> {
        let target = name.to_string();
        if self.is_remote() {
            return match openat(
                &self.fd,
                target.as_str(),
                OFlag::O_RDONLY | OFlag::O_NOFOLLOW | OFlag::O_NONBLOCK | OFlag::O_CLOEXEC,
                Mode::empty(),
            ) {
                Ok(fd) => {
                    let h = self
                        .read_open(&fd)
                        .at("read lock file", || self.path_of(name))?
                        .and_then(|(h, _, _)| h);
                    Ok(h.is_some_and(|h| h.nonce == nonce))
                }
                Err(Errno::ENOENT) => Ok(false),
                Err(e) => Err(e).at("read lock file", || self.path_of(name)),
            };
        }
        Ok(self.names_our_file(name, fd)? && self.in_place()?)
    }

    /// Whether our file `name` (made as `created`, with `nonce` in its record) is still
    /// ours: [`StateDir::still_ours`], by the inode number where it is known without
    /// asking (it cannot be reused while we hold the file open).
    pub(crate) fn owns(&self, name: &LockName, created: &Created, nonce: Uuid) -> Result<bool> {
        match created.id {
            Some(id) if !self.is_remote() => Ok(self.name_is(name, id)? && self.in_place()?),
            _ => self.still_ours(name, &created.fd, nonce),
        }
    }

    /// Removes our file `name` only while it is still ours ([`StateDir::owns`]): the
    /// undo of a write that gave up or failed. `.master_lock` is a reused name: if a
    /// judge by lease broke ours meanwhile, the file there now is someone else's and
    /// stays. The check and the unlink are two steps; nobody can replace our file between
    /// them unless they judged us dead, and an owner that renews its files every lease/3
    /// is never judged dead (PROTOCOL.md §11). `Ok(false)`: not ours, nothing removed.
    pub(crate) fn unlink_own(
        &self,
        name: &LockName,
        created: &Created,
        nonce: Uuid,
    ) -> Result<bool> {
        if !self.owns(name, created, nonce)? {
            return Ok(false);
        }
        self.unlink(name)
    }

    /// Local filesystems: whether `name` in the directory we have open is the inode `id`.
    fn name_is(&self, name: &LockName, id: (u64, u64)) -> Result<bool> {
        match fstatat(
            &self.fd,
            name.to_string().as_str(),
            AtFlags::AT_SYMLINK_NOFOLLOW,
        ) {
            #[allow(clippy::unnecessary_cast, clippy::useless_conversion)]
            Ok(st) => Ok((st.st_dev as u64, st.st_ino as u64) == id),
            Err(Errno::ENOENT) => Ok(false),
            Err(e) => Err(e).at("inspect lock file", || self.path_of(name)),
        }
    }

    /// Local filesystems: whether `name` in the directory we have open still points at
    /// our file `fd`, wherever that directory is now. [`StateDir::still_ours`] also asks
    /// whether the directory is still in place.
    fn names_our_file(&self, name: &LockName, fd: &OwnedFd) -> Result<bool> {
        let own = fstat(fd).at("inspect lock file", || self.path_of(name))?;
        if own.st_nlink == 0 {
            return Ok(false);
        }
        match fstatat(
            &self.fd,
            name.to_string().as_str(),
            AtFlags::AT_SYMLINK_NOFOLLOW,
        ) {
            Ok(st) => Ok(st.st_dev == own.st_dev && st.st_ino == own.st_ino),
            Err(Errno::ENOENT) => Ok(false),
            Err(e) => Err(e).at("inspect lock file", || self.path_of(name)),
        }
    }

    /// Releases our file `name` (R5, W8) on a local filesystem, in the order that wakes
    /// waiters soonest: `.master_lock` is removed only if it still points at our file
    /// `fd` (it is the one reused name), and only then is the state directory asked
    /// whether it is still in place (a removal in a moved-away directory harms no one).
    /// `Ok(false)`: the file was not ours any more, or was gone, or (`.master_lock`) the
    /// directory was moved: the lock had been lost.
    ///
    /// `None` on a remote filesystem, where the caller closes its descriptor first (NFS
    /// would otherwise leave a `.nfsXXXX` file behind) and uses [`StateDir::still_ours`].
    ///
    /// `id` is the file's `(st_dev, st_ino)` if known ([`Created::id`]): the name is then
    /// compared with it directly. That is exact because we hold the file open: its inode
    /// cannot be freed, so its number cannot be reused.
    pub(crate) fn release_local(
        &self,
        name: &LockName,
        fd: &OwnedFd,
        id: Option<(u64, u64)>,
    ) -> Option<Result<bool>> {
        if self.is_remote() {
            return None;
        }
        Some((|| {
            let ours = match (name, id) {
                (LockName::Master, Some(id)) => self.name_is(name, id)?,
                (LockName::Master, None) => self.names_our_file(name, fd)?,
                _ => true,
            };
            if !ours {
                return Ok(false);
            }
            let removed = self.unlink(name)?;
            match name {
                LockName::Master => Ok(removed && self.in_place()?),
                // A reader's name is unique (R5): if it was there, it was ours.
                _ => Ok(removed),
            }
        })())
    }

    /// Reads the record of a lock file we just opened. `Ok(None)`: it vanished after the
    /// open (on a remote filesystem only).
    ///
    /// On a remote filesystem two things differ from a local one (RIG.md, PROTOCOL.md §10):
    ///
    /// - `fstat` may be answered by path rather than through the open file: sshfs then
    ///   says `ENOENT`, NFS `ESTALE`, when another host removed the file after our
    ///   `open`. That is "gone", not an error.
    /// - A record can read **cut short** for about 1 s after another host replaced the
    ///   file with a longer one: the client keeps the old size in its attribute cache
    ///   (measured on sshfs: every time the reader had read the previous file at that
    ///   name within 1 s, with `cache=no` too). A record that does not parse is
    ///   therefore read once more, with `O_DIRECT`, which bypasses the client's caches;
    ///   where `O_DIRECT` is refused, after the attribute cache has expired
    ///   ([`REREAD_DELAY`]). Only what still does not parse counts as malformed.
    fn read_open(&self, fd: &OwnedFd) -> std::io::Result<Option<Record>> {
        if !self.is_remote() {
            return read_fd(fd, true).map(Some);
        }
        let vanished = |e: &std::io::Error| matches!(e.raw_os_error(), Some(c) if c == Errno::ENOENT as i32 || c == Errno::ESTALE as i32);
        let first = match read_fd(fd, false) {
            Ok(r) => r,
            Err(e) if vanished(&e) => return Ok(None),
            Err(e) => return Err(e),
        };
        if first.0.is_some() || !first.2 {
            return Ok(Some(first));
        }
        match reread_direct(fd) {
            Ok(Some(holder)) => return Ok(Some((holder, first.1, first.2))),
            Ok(None) => {}
            Err(e) if vanished(&e) => return Ok(None),
            Err(e) => return Err(e),
        }
        std::thread::sleep(REREAD_DELAY);
        nix::unistd::lseek(fd, 0, nix::unistd::Whence::SeekSet)?;
        match read_fd(fd, false) {
            Ok(r) => Ok(Some(r)),
            Err(e) if vanished(&e) => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// The "now" against which the age of a lock file's mtime is judged. On a remote
    /// filesystem an mtime reads up to 1 s earlier than the heartbeat that set it (SFTP
    /// v3, which sshfs speaks, carries whole seconds; so do some NFS servers), so "now"
    /// is taken [`MTIME_GRANULARITY`] earlier there: a holder on another host is judged
    /// dead only once its lease plus that second has passed since its last heartbeat.
    pub(crate) fn judge_now(&self) -> SystemTime {
        let now = SystemTime::now();
        if self.is_remote() {
            now.checked_sub(MTIME_GRANULARITY).unwrap_or(now)
        } else {
            now
        }
    }

    /// A lock file that could not be created in the state directory: for lack of
    /// permission, names the directory's owner, group and mode, and what to do.
    fn denied_create(&self, action: &'static str, path: PathBuf, e: Errno) -> Error {
        denied(action, path, e, fstat(&self.fd), |who| {
            format!(
                "this user may not create files in `{}`, which belongs to {}; ask {} or an \
                 administrator to make it group-writable and setgid (`chmod 2775`) for a \
                 group this user is in (see docs/multi-user.md)",
                self.path.display(),
                who.describe(),
                who.ask()
            )
        })
    }

    /// A lock file that could not be removed: for lack of permission (a state directory
    /// without write access for this user, or with the sticky bit), names the file's
    /// owner and what to do.
    fn denied_remove(&self, action: &'static str, name: &LockName, e: Errno) -> Error {
        let target = name.to_string();
        let st = fstatat(&self.fd, target.as_str(), AtFlags::AT_SYMLINK_NOFOLLOW);
        denied(action, self.path_of(name), e, st, |who| {
            let cleanup = match (self.leaf == STATE_DIR_NAME, self.path.parent()) {
                (true, Some(dir)) => format!("run `rwdir cleanup {}`", dir.display()),
                _ => "remove it".to_string(),
            };
            format!(
                "it belongs to {}, and this user may not remove files of others from `{}`; \
                 ask {} or an administrator to {cleanup}, or make `{}` group-writable, \
                 setgid and not sticky (`chmod 2775`; see docs/multi-user.md)",
                who.name(),
                self.path.display(),
                who.ask(),
                self.path.display()
            )
        })
    }

    /// The open state directory.
    pub(crate) fn fd(&self) -> &OwnedFd {
        &self.fd
    }

    /// Renews the heartbeat of our own file: sets its mtime to now through our own
    /// descriptor, so that a successor's file can never be touched.
    pub(crate) fn touch(fd: &OwnedFd) -> nix::Result<()> {
        use nix::sys::stat::futimens;
        use nix::sys::time::TimeSpec;
        futimens(fd, &TimeSpec::UTIME_NOW, &TimeSpec::UTIME_NOW)
    }
}

/// The owner of a file or directory, for permission errors.
struct Who {
    uid: u32,
    user: Option<String>,
    group: String,
    mode: u32,
}

impl Who {
    fn of(st: &FileStat) -> Who {
        use nix::unistd::{Gid, Group, Uid, User};
        let gid = st.st_gid;
        Who {
            uid: st.st_uid,
            user: User::from_uid(Uid::from_raw(st.st_uid))
                .ok()
                .flatten()
                .map(|u| u.name),
            group: Group::from_gid(Gid::from_raw(gid))
                .ok()
                .flatten()
                .map_or_else(|| gid.to_string(), |g| g.name),
            mode: st.st_mode & 0o7777,
        }
    }

    /// `user alice (uid 1001)`.
    fn name(&self) -> String {
        match &self.user {
            Some(u) => format!("user {u} (uid {})", self.uid),
            None => format!("uid {}", self.uid),
        }
    }

    /// `user alice (uid 1001), group staff, mode 2755`.
    fn describe(&self) -> String {
        format!(
            "{}, group {}, mode {:04o}",
            self.name(),
            self.group,
            self.mode
        )
    }

    /// Whom to ask: `alice`, or `the user with uid 1001`.
    fn ask(&self) -> String {
        self.user
            .clone()
            .unwrap_or_else(|| format!("the user with uid {}", self.uid))
    }
}

/// `EACCES` and `EPERM` as [`Error::PermissionDenied`], naming the owner of what is in
/// the way (`owner`: its `lstat`) with `detail`; any other error, or an owner that
/// cannot be inspected, as a plain [`Error::Io`].
fn denied(
    action: &'static str,
    path: PathBuf,
    e: Errno,
    owner: nix::Result<FileStat>,
    detail: impl FnOnce(&Who) -> String,
) -> Error {
    match (e, owner) {
        (Errno::EACCES | Errno::EPERM, Ok(st)) => {
            let who = Who::of(&st);
            Error::PermissionDenied {
                action,
                path,
                uid: who.uid,
                detail: detail(&who),
                user: who.user,
                source: e.into(),
            }
        }
        _ => Error::Io {
            action,
            path,
            source: e.into(),
        },
    }
}

/// The state directory could not be made in DIR: for lack of permission, names DIR's
/// owner and what to do.
fn denied_create_state(e: Errno, parent: &OwnedFd, path: PathBuf) -> Error {
    let shown = path.display().to_string();
    let dir = path.parent().unwrap_or(Path::new(".")).to_path_buf();
    denied("create state directory", path, e, fstat(parent), |who| {
        format!(
            "this user may not create it in `{}`, which belongs to {}; ask {} or an \
             administrator to make it for the users who share the directory \
             (`mkdir -m 2775 {shown}` and `chgrp` it to their group; see \
             docs/multi-user.md)",
            dir.display(),
            who.describe(),
            who.ask()
        )
    })
}

enum LinkResult {
    /// Linked; the file and, if known, its `(st_dev, st_ino)`.
    Linked(OwnedFd, Option<(u64, u64)>),
    Exists,
    Perm,
    Failed(Errno, PathBuf),
}

fn file_type(st: &FileStat) -> SFlag {
    SFlag::from_bits_truncate(st.st_mode & SFlag::S_IFMT.bits())
}

fn mtime_of(st: &FileStat) -> SystemTime {
    let secs = u64::try_from(st.st_mtime).unwrap_or(0);
    let nanos = u32::try_from(st.st_mtime_nsec).unwrap_or(0);
    UNIX_EPOCH + Duration::new(secs, nanos.min(999_999_999))
}

/// Reads a record through an open descriptor, at most `MAX_RECORD + 1` bytes, and only
/// from a regular file. `exact_size`: the size from `fstat` can be trusted (local
/// filesystems), so a read that returned that many bytes needs no second read for EOF.
fn read_fd(fd: &OwnedFd, exact_size: bool) -> std::io::Result<(Option<Holder>, SystemTime, bool)> {
    let st = fstat(fd)?;
    let mtime = mtime_of(&st);
    if file_type(&st) != SFlag::S_IFREG {
        return Ok((None, mtime, false));
    }
    // Bounded: a huge file at a lock name costs at most one record's worth of reading.
    let mut buf = [0u8; MAX_RECORD + 1];
    let size = usize::try_from(st.st_size).unwrap_or(usize::MAX);
    let mut len = 0;
    while len < buf.len() {
        match nix::unistd::read(fd, &mut buf[len..]) {
            Ok(0) => break,
            Ok(n) => len += n,
            Err(Errno::EINTR) => continue,
            Err(e) => return Err(e.into()),
        }
        if exact_size && len == size {
            break;
        }
    }
    Ok((Holder::parse(&buf[..len]), mtime, true))
}

/// The coarsest mtime resolution expected on a remote filesystem (sshfs: 1 s).
pub(crate) const MTIME_GRANULARITY: Duration = Duration::from_secs(1);

/// What reading one lock file gives: the record (`None`: malformed), the mtime, and
/// whether it is a regular file.
type Record = (Option<Holder>, SystemTime, bool);

/// How long to wait before reading a record again that may have been cut short by a
/// remote client's attribute cache, where `O_DIRECT` is refused: a little more than
/// FUSE's attribute timeout (1 s; sshfs).
pub(crate) const REREAD_DELAY: Duration = Duration::from_millis(1100);

/// Reads a record again from offset 0 with `O_DIRECT` (switched on for this descriptor
/// only while reading), which makes the client ask the server for the data rather than
/// trust its cached file size. `Ok(None)` if the filesystem refuses `O_DIRECT`.
fn reread_direct(fd: &OwnedFd) -> std::io::Result<Option<Option<Holder>>> {
    use nix::fcntl::{FcntlArg, fcntl};
    const ALIGN: usize = 4096;
    const LEN: usize = 2 * ALIGN; // a multiple of the alignment, more than MAX_RECORD
    let flags = OFlag::from_bits_truncate(fcntl(fd, FcntlArg::F_GETFL)?);
    if fcntl(fd, FcntlArg::F_SETFL(flags | OFlag::O_DIRECT)).is_err() {
        return Ok(None);
    }
    // An aligned buffer without unsafe code: over-allocate, then start at the boundary.
    let mut raw = vec![0u8; LEN + ALIGN];
    let start = raw.as_ptr().align_offset(ALIGN).min(ALIGN);
    let buf = &mut raw[start..start + LEN];
    let read = nix::unistd::lseek(fd, 0, nix::unistd::Whence::SeekSet).and_then(|_| {
        loop {
            match nix::unistd::read(fd, buf) {
                Err(Errno::EINTR) => continue,
                r => break r,
            }
        }
    });
    let _ = fcntl(fd, FcntlArg::F_SETFL(flags));
    match read {
        Ok(n) => Ok(Some(Holder::parse(&buf[..n]))),
        Err(Errno::EINVAL) => Ok(None),
        Err(e) => Err(e.into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::holder::Kind;

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

    fn record_at(sd: &StateDir, name: &LockName) -> Option<Holder> {
        match sd.read(name).expect("read") {
            Found::File { holder, .. } => holder,
            Found::Gone => panic!("{name} is gone"),
        }
    }

    /// A spare written ahead is linked as it is when the `put` is for its record, and
    /// written again, whole and no longer than the new record, when it is not.
    #[test]
    fn a_spare_written_ahead_is_linked_with_the_right_record() {
        let dir = tempfile::tempdir().expect("tempdir");
        let Some(sd) = StateDir::open(dir.path(), None, true).expect("open") else {
            panic!("no state directory");
        };
        let Some(mut spare) = sd.spare() else {
            return; // no O_TMPFILE here: puts make their files themselves
        };
        let ahead = holder(Kind::Read, "host");
        spare.write(ahead.clone());
        assert_eq!(
            spare.record(Kind::Read, Duration::from_secs(60)),
            Some(&ahead)
        );
        assert_eq!(spare.record(Kind::Write, Duration::from_secs(60)), None);
        assert_eq!(spare.record(Kind::Read, Duration::ZERO), None, "too old");
        let a = LockName::Slave {
            uuid: Uuid::new_v4(),
        };
        assert!(sd.put_with(&a, &ahead, Some(spare)).expect("put").is_some());
        assert_eq!(record_at(&sd, &a), Some(ahead));

        // Written ahead for a longer record, used for another one.
        let mut spare = sd.spare().expect("a second spare");
        spare.write(holder(Kind::Write, "a-much-longer-host-name"));
        let other = holder(Kind::Break, "h");
        let b = LockName::Break {
            ns: 1,
            uuid: Uuid::new_v4(),
        };
        assert!(sd.put_with(&b, &other, Some(spare)).expect("put").is_some());
        assert_eq!(record_at(&sd, &b), Some(other));
    }

    #[test]
    fn reread_direct_reads_the_whole_record_or_declines() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("record");
        let holder = holder(Kind::Write, "h");
        std::fs::write(&path, holder.format()).expect("write record");
        let fd: OwnedFd = std::fs::File::open(&path).expect("open").into();
        // Read to EOF first, as `read_open` does: the re-read starts again at offset 0.
        let (first, _, _) = read_fd(&fd, false).expect("read");
        assert_eq!(first.as_ref(), Some(&holder));
        match reread_direct(&fd).expect("reread") {
            // tmpfs and a few others refuse O_DIRECT: the caller waits and reads again.
            None => {}
            Some(again) => assert_eq!(again, Some(holder)),
        }
        // The descriptor is left without O_DIRECT.
        let flags = nix::fcntl::fcntl(&fd, nix::fcntl::FcntlArg::F_GETFL).expect("getfl");
        assert!(!OFlag::from_bits_truncate(flags).contains(OFlag::O_DIRECT));
    }
}
