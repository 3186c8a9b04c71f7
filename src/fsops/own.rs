//! Our own files: whether a name still points at the file we made (by inode through
//! our open descriptor locally, by the nonce in its record on a remote filesystem),
//! removing it only while it does, and renewing it through our descriptor.

use std::os::fd::OwnedFd;

use nix::errno::Errno;
use nix::fcntl::AtFlags;
use nix::sys::stat::{fstat, fstatat};
use uuid::Uuid;

use super::read::AtName;
use super::{Created, StateDir};
use crate::error::{IoResultExt, Result};
use crate::names::LockName;
use crate::sys::FileId;

impl StateDir {
    /// Whether our own file `name`, open as `fd`, is still ours: it has not been unlinked,
    /// and the name still points at the same inode in the state directory that is still
    /// in place (local), or at a record with our nonce (remote filesystems, where inode
    /// numbers and link counts are not reliable).
    pub(crate) fn still_ours(&self, name: &LockName, fd: &OwnedFd, nonce: Uuid) -> Result<bool> {
        if self.is_remote() {
            return match self.at_name(name, nonce)? {
                AtName::Ours(_) => Ok(true),
                AtName::Other | AtName::Gone => Ok(false),
                AtName::Unopenable(e) => Err(e).at("read lock file", || self.path_of(name)),
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
    /// is never judged dead (docs/protocol.md §11). `Ok(false)`: not ours, nothing removed.
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
    pub(super) fn name_is(&self, name: &LockName, id: FileId) -> Result<bool> {
        match fstatat(
            &self.fd,
            name.text().as_cstr(),
            AtFlags::AT_SYMLINK_NOFOLLOW,
        ) {
            Ok(st) => Ok(FileId::of(&st) == id),
            Err(Errno::ENOENT) => Ok(false),
            Err(e) => Err(e).at("inspect lock file", || self.path_of(name)),
        }
    }

    /// Local filesystems: whether `name` in the directory we have open still points at
    /// our file `fd`, wherever that directory is now. [`StateDir::still_ours`] also asks
    /// whether the directory is still in place.
    pub(super) fn names_our_file(&self, name: &LockName, fd: &OwnedFd) -> Result<bool> {
        let own = fstat(fd).at("inspect lock file", || self.path_of(name))?;
        if own.st_nlink == 0 {
            return Ok(false);
        }
        match fstatat(
            &self.fd,
            name.text().as_cstr(),
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
    ///
    /// `then` runs right after the file's `unlink` succeeded, before the look at the
    /// state directory: a writer removes its queue file there (V8), so that the writer
    /// waiting on that file wakes a look sooner (contention.md §25).
    pub(crate) fn release_local(
        &self,
        name: &LockName,
        fd: &OwnedFd,
        id: Option<FileId>,
        then: impl FnOnce(),
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
            then();
            match name {
                LockName::Master => Ok(removed && self.in_place()?),
                // A reader's name is unique (R5): if it was there, it was ours.
                _ => Ok(removed),
            }
        })())
    }

    /// Renews the heartbeat of our own file: sets its mtime to now through our own
    /// descriptor, so that a successor's file can never be touched.
    pub(crate) fn touch(fd: &OwnedFd) -> nix::Result<()> {
        use nix::sys::stat::futimens;
        use nix::sys::time::TimeSpec;
        #[cfg(test)]
        super::TOUCHES.with(|n| n.set(n.get() + 1));
        futimens(fd, &TimeSpec::UTIME_NOW, &TimeSpec::UTIME_NOW)
    }
}
