//! `put` (docs/protocol.md §2.1): creating a lock file whole, atomically, never replacing
//! anything: an anonymous `O_TMPFILE` (or a `.tmp-*` file) written, then `link`ed to its
//! name; and the spares a waiter makes ahead of its wake-up.

use std::io::Write as _;
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use nix::errno::Errno;
use nix::fcntl::{AT_FDCWD, AtFlags, OFlag, openat};
use nix::sys::stat::{Mode, fstat};
use nix::unistd::{UnlinkatFlags, linkat, unlinkat};
use uuid::Uuid;

use super::read::AtName;
use super::{FILE_MODE, Kept, StateDir};
use crate::error::{IoResultExt, Result};
use crate::holder::{Holder, Record};
use crate::names::{LockName, NameText};
use crate::sys::FileId;

/// A lock file we created: its descriptor (for the heartbeat and ownership checks) and
/// the nonce written into it.
#[derive(Debug)]
pub(crate) struct Created {
    pub(crate) fd: OwnedFd,
    /// `(st_dev, st_ino)` of the file, when it is known without a system call (a file
    /// made from a [`Spare`]): a release then needs no `fstat` before its removal.
    pub(crate) id: Option<FileId>,
    /// For a reader's file: the length of its record, and whether it is the kept one
    /// (`park`).
    pub(crate) kept: Kept,
}

/// An anonymous file (`O_TMPFILE`) made ahead of time by a waiter, so that the `put`
/// that follows its wake-up only writes and links it: creating an inode is the
/// costliest step of a `put` on tmpfs (~8 µs of ~17 µs), and a hand-off waits for it.
/// Never visible in the directory; it vanishes when dropped unused. Its inode is read
/// while waiting too, so that the release of the file it becomes needs no `fstat`.
#[derive(Debug)]
pub(crate) struct Spare {
    file: std::fs::File,
    id: Option<FileId>,
    /// The record already written into the file ([`Spare::write`]), and when.
    written: Option<(Holder, Instant)>,
    /// The length of what the file holds.
    len: u64,
}

impl Spare {
    /// Writes `record` into the file now, so that the `put` after a wake-up only links
    /// it. Best effort: if the write fails, the `put` writes again and reports the error
    /// should it recur.
    pub(crate) fn write(&mut self, record: &Record<'_>) {
        self.written = None;
        if record.with_text(|text| self.fill(text)).is_ok() {
            self.written = Some((record.to_holder(), Instant::now()));
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

pub(super) enum LinkResult {
    /// Linked; the file, its `(st_dev, st_ino)` if known, and the length of its record.
    Linked(OwnedFd, Option<FileId>, u64),
    Exists,
    Perm,
    Failed(Errno, PathBuf),
}

impl StateDir {
    /// `put(name)` (docs/protocol.md §2.1): creates `name` with `record`, atomically,
    /// never overwriting anything. `Ok(None)` if the name is taken.
    pub(crate) fn put(&self, name: &LockName, record: &Record<'_>) -> Result<Option<Created>> {
        self.put_with(name, record, None)
    }

    /// [`StateDir::put`], using `spare` (from [`StateDir::spare`]) for the file if given.
    pub(crate) fn put_with(
        &self,
        name: &LockName,
        record: &Record<'_>,
        spare: Option<Spare>,
    ) -> Result<Option<Created>> {
        let target = name.text();
        if matches!(name, LockName::Slave { .. })
            && spare.is_none()
            && self.tmpfile.load(Ordering::Relaxed)
            && let Some(created) = self.put_kept(&target, record)
        {
            return Ok(Some(created));
        }
        if self.tmpfile.load(Ordering::Relaxed) {
            let want_id = matches!(name, LockName::Master);
            match self.put_tmpfile(&target, record, spare, want_id)? {
                Some(r) => return self.resolve_taken(name, record, r),
                None => self.tmpfile.store(false, Ordering::Relaxed),
            }
        }
        let r = record.with_text(|text| self.put_linked(&target, text))?;
        self.resolve_taken(name, record, r)
    }

    /// An anonymous file for a later [`StateDir::put_with`]: `None` where `O_TMPFILE`
    /// does not work, and on any error (the `put` then makes its file itself and reports
    /// the error, if it recurs, with the lock file's name).
    pub(crate) fn spare(&self) -> Option<Spare> {
        if !self.tmpfile.load(Ordering::Relaxed) {
            return None;
        }
        let fd = self.open_tmpfile().ok()?;
        let id = fstat(&fd).ok().map(|st| FileId::of(&st));
        Some(Spare {
            file: fd.into(),
            id,
            written: None,
            len: 0,
        })
    }

    pub(super) fn open_tmpfile(&self) -> nix::Result<OwnedFd> {
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
    pub(super) fn put_tmpfile(
        &self,
        target: &NameText,
        record: &Record<'_>,
        spare: Option<Spare>,
        want_id: bool,
    ) -> Result<Option<LinkResult>> {
        let (file, id, len) = match spare {
            // Written while waiting, with this very record (see `Attempt::put`). The
            // whole record, not only its nonce: a writer's `.master_lock` records share
            // its queue file's nonce for the whole wait (V8), and a spare written long
            // ago must be written again, or the file is born with an old mtime (a judge
            // by lease may find it expired) and an old `since`.
            Some(s)
                if s.written
                    .as_ref()
                    .is_some_and(|(h, _)| h.record() == *record) =>
            {
                (s.file, s.id, s.len)
            }
            Some(mut s) => {
                record
                    .with_text(|text| s.fill(text))
                    .at("write lock file", || self.path.join(target.as_str()))?;
                (s.file, s.id, s.len)
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
                            self.path.join(target.as_str()),
                            e,
                        ));
                    }
                };
                let mut file = std::fs::File::from(fd);
                let len = record
                    .with_text(|text| file.write_all(text).map(|()| text.len() as u64))
                    .at("write lock file", || self.path.join(target.as_str()))?;
                // `.master_lock`'s release compares its name with this inode: asking now
                // takes the `fstat` off the release, which a hand-off waits for.
                let id = want_id
                    .then(|| fstat(&file).ok())
                    .flatten()
                    .map(|st| FileId::of(&st));
                (file, id, len)
            }
        };
        let linked = match self.link_anonymous(&file, target) {
            Some(r) => r,
            None => return Ok(None),
        };
        Ok(Some(match linked {
            Ok(()) => LinkResult::Linked(file.into(), id, len),
            Err(Errno::EEXIST) => LinkResult::Exists,
            Err(Errno::EPERM) => LinkResult::Perm,
            Err(e) => LinkResult::Failed(e, self.path.join(target.as_str())),
        }))
    }

    /// Gives the anonymous `file` the name `target`: `linkat(fd, "", AT_EMPTY_PATH)`
    /// where allowed, else through `/proc/self/fd/N`. `None`: neither is possible here.
    pub(super) fn link_anonymous(
        &self,
        file: &(impl AsFd + AsRawFd),
        target: &NameText,
    ) -> Option<nix::Result<()>> {
        if self.empty_path.load(Ordering::Relaxed) {
            match linkat(
                file,
                c"",
                &self.fd,
                target.as_cstr(),
                AtFlags::AT_EMPTY_PATH,
            ) {
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
            target.as_cstr(),
            AtFlags::AT_SYMLINK_FOLLOW,
        ) {
            Err(Errno::ENOENT) if !Path::new("/proc/self/fd").exists() => None,
            r => Some(r),
        }
    }

    /// Temp file + `link` + `unlink` (the portable `put`).
    pub(super) fn put_linked(&self, target: &NameText, content: &[u8]) -> Result<LinkResult> {
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
            Ok(()) => linkat(
                &self.fd,
                tmp.as_str(),
                &self.fd,
                target.as_cstr(),
                AtFlags::empty(),
            ),
            Err(_) => Ok(()),
        };
        // The temporary name has no meaning for the protocol: remove it whatever happened.
        let _ = unlinkat(&self.fd, tmp.as_str(), UnlinkatFlags::NoRemoveDir);
        written.at("write temporary file", || self.path.join(&tmp))?;
        Ok(match linked {
            Ok(()) => LinkResult::Linked(file.into(), None, content.len() as u64),
            Err(Errno::EEXIST) => LinkResult::Exists,
            Err(Errno::EPERM) => LinkResult::Perm,
            Err(e) => LinkResult::Failed(e, self.path.join(target.as_str())),
        })
    }

    /// Turns the outcome of a `link` into "created" or "taken". `EEXIST` is authoritative
    /// on a local filesystem. Otherwise (`EPERM` from sshfs on a lost race, `EEXIST` after
    /// an NFSv3 retransmission) the name is read back and the nonce decides.
    pub(super) fn resolve_taken(
        &self,
        name: &LockName,
        record: &Record<'_>,
        r: LinkResult,
    ) -> Result<Option<Created>> {
        match r {
            LinkResult::Linked(fd, id, len) => Ok(Some(Created {
                fd,
                id,
                kept: Kept { tmp: None, len },
            })),
            LinkResult::Exists if !self.is_remote() => Ok(None),
            LinkResult::Failed(e, path) => Err(self.denied_create("create lock file", path, e)),
            // A lost race on a remote filesystem can come back as `EPERM` (SFTP v3 has no
            // `EEXIST`), and a reply lost in transit as `EEXIST` for a link that was made:
            // decide by the nonce read back.
            LinkResult::Exists | LinkResult::Perm => match self.at_name(name, record.nonce)? {
                AtName::Ours(fd) => Ok(Some(Created {
                    fd,
                    id: None,
                    kept: Kept::UNKNOWN,
                })),
                AtName::Gone if matches!(r, LinkResult::Perm) => {
                    // No race was lost: the filesystem refuses hard links. Create the
                    // name directly (an empty or partial file reads as malformed).
                    self.put_direct(&name.text(), record)
                }
                AtName::Other | AtName::Gone | AtName::Unopenable(_) => Ok(None),
            },
        }
    }

    /// Fallback for filesystems without hard links: `O_CREAT|O_EXCL` on the name itself.
    pub(super) fn put_direct(
        &self,
        target: &NameText,
        record: &Record<'_>,
    ) -> Result<Option<Created>> {
        let fd = match openat(
            &self.fd,
            target.as_cstr(),
            OFlag::O_RDWR | OFlag::O_CREAT | OFlag::O_EXCL | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
            Mode::from_bits_truncate(FILE_MODE),
        ) {
            Ok(fd) => fd,
            Err(Errno::EEXIST | Errno::EPERM) => return Ok(None),
            Err(e) => {
                return Err(self.denied_create(
                    "create lock file",
                    self.path.join(target.as_str()),
                    e,
                ));
            }
        };
        let mut file = std::fs::File::from(fd);
        record
            .with_text(|text| file.write_all(text))
            .at("write lock file", || self.path.join(target.as_str()))?;
        Ok(Some(Created {
            fd: file.into(),
            id: None,
            kept: Kept::UNKNOWN,
        }))
    }
}
