//! Errors for lack of permission: what was refused, where, and who owns what is in the
//! way. Facts only; the command says what to do.

use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};

use nix::errno::Errno;
use nix::fcntl::AtFlags;
use nix::sys::stat::{FileStat, fstat, fstatat};

use super::StateDir;
use crate::error::{Error, Owner, Refused};
use crate::names::LockName;

/// The owner and mode of what `st` describes.
fn owner_of(st: &FileStat) -> Owner {
    use nix::unistd::{Gid, Group, Uid, User};
    Owner {
        uid: st.st_uid,
        user: User::from_uid(Uid::from_raw(st.st_uid))
            .ok()
            .flatten()
            .map(|u| u.name),
        gid: st.st_gid,
        group: Group::from_gid(Gid::from_raw(st.st_gid))
            .ok()
            .flatten()
            .map(|g| g.name),
        mode: st.st_mode & 0o7777,
    }
}

/// `EACCES` and `EPERM` as [`Error::PermissionDenied`], with the owner of what is in the
/// way (`owner`: its `lstat`); any other error, or an owner that cannot be inspected, as
/// a plain [`Error::Io`].
fn denied(
    action: &'static str,
    path: PathBuf,
    e: Errno,
    refused: Refused,
    dir: &Path,
    owner: nix::Result<FileStat>,
) -> Error {
    match (e, owner) {
        (Errno::EACCES | Errno::EPERM, Ok(st)) => Error::PermissionDenied {
            action,
            path,
            refused,
            dir: dir.to_path_buf(),
            owner: Box::new(owner_of(&st)),
            source: e.into(),
        },
        _ => Error::Io {
            action,
            path,
            source: e.into(),
        },
    }
}

/// The state directory could not be made in DIR (open as `parent`).
pub(super) fn denied_create_state(e: Errno, parent: &OwnedFd, path: PathBuf) -> Error {
    let dir = path.parent().unwrap_or(Path::new(".")).to_path_buf();
    denied(
        "create state directory",
        path,
        e,
        Refused::CreateStateDir,
        &dir,
        fstat(parent),
    )
}

/// The state directory `path` (its `lstat`: `st`) could not be opened.
pub(super) fn denied_open_state(e: Errno, st: nix::Result<FileStat>, path: PathBuf) -> Error {
    let dir = path.clone();
    denied(
        "open state directory",
        path,
        e,
        Refused::OpenStateDir,
        &dir,
        st,
    )
}

impl StateDir {
    /// A lock file that could not be created in the state directory.
    pub(super) fn denied_create(&self, action: &'static str, path: PathBuf, e: Errno) -> Error {
        denied(
            action,
            path,
            e,
            Refused::CreateLockFile,
            &self.path,
            fstat(&self.fd),
        )
    }

    /// A lock file that could not be removed (a state directory without write access
    /// for this user, or with the sticky bit).
    pub(super) fn denied_remove(&self, action: &'static str, name: &LockName, e: Errno) -> Error {
        let target = name.text();
        let st = fstatat(&self.fd, target.as_str(), AtFlags::AT_SYMLINK_NOFOLLOW);
        denied(
            action,
            self.path_of(name),
            e,
            Refused::RemoveLockFile,
            &self.path,
            st,
        )
    }
}
