//! Reading a lock file and its record, never through a symlink, never blocking on a
//! FIFO, never more than a record's size; on remote filesystems, records cut short by a
//! stale attribute cache are read again.

use std::os::fd::OwnedFd;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use nix::errno::Errno;
use nix::fcntl::{AtFlags, OFlag, openat};
use nix::sys::stat::{FileStat, Mode, SFlag, fstat, fstatat};
use uuid::Uuid;

use super::StateDir;
use crate::error::{IoResultExt, Result};
use crate::holder::{Holder, MAX_RECORD};
use crate::names::LockName;

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

/// A lock file this client cannot reach now ([`StateDir::read`]): present, malformed and
/// renewed this instant, so it is held (judged `Unknown` by lease, never `Dead`) until it
/// can be read again.
fn out_of_reach_now() -> Found {
    Found::File {
        holder: None,
        mtime: SystemTime::now(),
        regular: true,
    }
}

pub(super) fn file_type(st: &FileStat) -> SFlag {
    SFlag::from_bits_truncate(st.st_mode & SFlag::S_IFMT.bits())
}

pub(super) fn mtime_of(st: &FileStat) -> SystemTime {
    let secs = u64::try_from(st.st_mtime).unwrap_or(0);
    let nanos = u32::try_from(st.st_mtime_nsec).unwrap_or(0);
    UNIX_EPOCH + Duration::new(secs, nanos.min(999_999_999))
}

/// Reads a record through an open descriptor, at most `MAX_RECORD + 1` bytes, and only
/// from a regular file. `exact_size`: the size from `fstat` can be trusted (local
/// filesystems), so a read that returned that many bytes needs no second read for EOF.
pub(super) fn read_fd(fd: &OwnedFd, exact_size: bool) -> std::io::Result<Record> {
    let st = fstat(fd)?;
    let mtime = mtime_of(&st);
    if file_type(&st) != SFlag::S_IFREG {
        return Ok(Record {
            holder: None,
            mtime,
            regular: false,
        });
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
    Ok(Record {
        holder: Holder::parse(&buf[..len]),
        mtime,
        regular: true,
    })
}

/// What reading one lock file gives.
#[derive(Debug)]
pub(super) struct Record {
    /// The parsed record; `None`: malformed.
    pub(super) holder: Option<Holder>,
    pub(super) mtime: SystemTime,
    /// Whether it is a regular file.
    pub(super) regular: bool,
}

/// What [`reread_direct`] found.
#[derive(Debug, PartialEq)]
pub(super) enum Direct {
    /// Read past the client's caches; the record, or `None` if it is malformed.
    Read(Option<Holder>),
    /// The filesystem refuses `O_DIRECT`.
    Refused,
}

/// How long to wait before reading a record again that may have been cut short by a
/// remote client's attribute cache, where `O_DIRECT` is refused: a little more than
/// FUSE's attribute timeout (1 s; sshfs).
pub(crate) const REREAD_DELAY: Duration = Duration::from_millis(1100);

/// Reads a record again from offset 0 with `O_DIRECT` (switched on for this descriptor
/// only while reading), which makes the client ask the server for the data rather than
/// trust its cached file size.
pub(super) fn reread_direct(fd: &OwnedFd) -> std::io::Result<Direct> {
    use nix::fcntl::{FcntlArg, fcntl};
    const ALIGN: usize = 4096;
    const LEN: usize = 2 * ALIGN; // a multiple of the alignment, more than MAX_RECORD
    let flags = OFlag::from_bits_truncate(fcntl(fd, FcntlArg::F_GETFL)?);
    if fcntl(fd, FcntlArg::F_SETFL(flags | OFlag::O_DIRECT)).is_err() {
        return Ok(Direct::Refused);
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
        Ok(n) => Ok(Direct::Read(Holder::parse(&buf[..n]))),
        Err(Errno::EINVAL) => Ok(Direct::Refused),
        Err(e) => Err(e.into()),
    }
}

impl StateDir {
    /// Reads a lock file without following a symlink, blocking on a FIFO, or reading more
    /// than a record's maximum size.
    pub(crate) fn read(&self, name: &LockName) -> Result<Found> {
        #[cfg(test)]
        {
            let counter = match name {
                LockName::Master => Some(&super::MASTER_READS_SHARED),
                LockName::Pending { .. } => Some(&super::PENDING_READS_SHARED),
                _ => None,
            };
            if let Some(counter) = counter {
                counter.with(|n| {
                    if let Some(n) = n.borrow().as_ref() {
                        n.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                    }
                });
            }
        }
        let target = name.text();
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
            Ok(fd) => match self.read_open(&fd) {
                Ok(Some(r)) => Ok(Found::File {
                    holder: r.holder,
                    mtime: r.mtime,
                    regular: r.regular,
                }),
                Ok(None) => Ok(Found::Gone),
                Err(e) if self.out_of_reach(e.raw_os_error()) => Ok(out_of_reach_now()),
                Err(e) => Err(e).at("read lock file", || self.path_of(name)),
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
                Err(e) if self.out_of_reach(Some(e as i32)) => Ok(out_of_reach_now()),
                Err(e) => Err(e).at("inspect lock file", || self.path_of(name)),
            },
        }
    }

    /// Whether an error reading another's lock file means only that this client cannot
    /// reach that file now, on a shared filesystem whose other calls answer: `ENOTCONN`
    /// or `ETIMEDOUT` while the state directory itself can still be `fstat`ed. Measured
    /// once on CephFS: a healthy client's `open` of a `.master_lock` whose record a dead
    /// client had never flushed failed with `ENOTCONN`, until the MDS dropped the dead
    /// client's session. Such a file counts as held ([`out_of_reach_now`]): a waiter keeps
    /// waiting, and nobody removes it. A client that lost its server fails every call,
    /// the directory's `fstat` too, and gets the error.
    fn out_of_reach(&self, errno: Option<i32>) -> bool {
        self.is_remote()
            && matches!(errno, Some(c) if c == Errno::ENOTCONN as i32 || c == Errno::ETIMEDOUT as i32)
            && fstat(&self.fd).is_ok()
    }

    /// Reads the record of a lock file we just opened. `Ok(None)`: it vanished after the
    /// open (on a remote filesystem only).
    ///
    /// On a remote filesystem two things differ from a local one (docs/protocol.md §10):
    ///
    /// - `fstat` may be answered by path rather than through the open file: sshfs then
    ///   says `ENOENT`, NFS `ESTALE`, GlusterFS `EBADFD` (its open-behind opens
    ///   lazily: measured on the DFS rig with md-cache off, docs/notes/dfs-rig.md), when
    ///   another host removed the file after our `open`. That is "gone", not an error.
    /// - A record can read **cut short** for about 1 s after another host replaced the
    ///   file with a longer one: the client keeps the old size in its attribute cache
    ///   (measured on sshfs: every time the reader had read the previous file at that
    ///   name within 1 s, with `cache=no` too). A record that does not parse is
    ///   therefore read once more, with `O_DIRECT`, which bypasses the client's caches;
    ///   where `O_DIRECT` is refused, after the attribute cache has expired
    ///   ([`REREAD_DELAY`]). Only what still does not parse counts as malformed.
    pub(super) fn read_open(&self, fd: &OwnedFd) -> std::io::Result<Option<Record>> {
        if !self.is_remote() {
            return read_fd(fd, true).map(Some);
        }
        let vanished = |e: &std::io::Error| {
            matches!(e.raw_os_error(), Some(c) if c == Errno::ENOENT as i32
                || c == Errno::ESTALE as i32
                || c == Errno::EBADFD as i32)
        };
        let first = match read_fd(fd, false) {
            Ok(r) => r,
            Err(e) if vanished(&e) => return Ok(None),
            Err(e) => return Err(e),
        };
        if first.holder.is_some() || !first.regular {
            return Ok(Some(first));
        }
        match reread_direct(fd) {
            Ok(Direct::Read(holder)) => return Ok(Some(Record { holder, ..first })),
            Ok(Direct::Refused) => {}
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

    /// The "now" against which the age of a lock file's mtime is judged: the clock, less
    /// the filesystem's judging margin ([`crate::Filesystem::judge_margin`]: its cache
    /// window plus 1 s of mtime resolution on a shared filesystem, zero on a local one).
    /// A holder on another host is therefore judged dead only once its lease plus that
    /// margin has passed since its last heartbeat: a client may show an mtime that old
    /// although the holder renews (sshfs: `open` + `fstat` answered from its 20 s
    /// attribute cache).
    pub(crate) fn judge_now(&self) -> SystemTime {
        let now = SystemTime::now();
        now.checked_sub(self.margin).unwrap_or(now)
    }

    /// What is at `name`, by the nonce in its record, read back through `open` (which
    /// asks the server on a remote filesystem): the one way to tell our own file where
    /// inode numbers and link counts cannot be trusted.
    pub(super) fn at_name(&self, name: &LockName, nonce: Uuid) -> Result<AtName> {
        match openat(
            &self.fd,
            name.text().as_str(),
            OFlag::O_RDONLY | OFlag::O_NOFOLLOW | OFlag::O_NONBLOCK | OFlag::O_CLOEXEC,
            Mode::empty(),
        ) {
            Ok(fd) => {
                let record = self
                    .read_open(&fd)
                    .at("read lock file", || self.path_of(name))?;
                Ok(match record {
                    None => AtName::Gone,
                    Some(r) if r.holder.as_ref().is_some_and(|h| h.nonce == nonce) => {
                        AtName::Ours(fd)
                    }
                    Some(_) => AtName::Other,
                })
            }
            Err(Errno::ENOENT) => Ok(AtName::Gone),
            Err(e) => Ok(AtName::Unopenable(e)),
        }
    }
}

/// What [`StateDir::at_name`] found.
#[derive(Debug)]
pub(super) enum AtName {
    /// Our file, open.
    Ours(OwnedFd),
    /// Someone else's file, or a malformed one.
    Other,
    /// Nothing.
    Gone,
    /// Something that cannot be opened (a symlink, no permission...).
    Unopenable(Errno),
}
