//! Errors for lack of permission: who owns the file or directory in the way, and its
//! mode.

use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};

use nix::errno::Errno;
use nix::fcntl::AtFlags;
use nix::sys::stat::{FileStat, fstat, fstatat};

use super::{STATE_DIR_NAME, StateDir};
use crate::error::Error;
use crate::names::LockName;

/// The owner of a file or directory, for permission errors.
pub(super) struct Who {
    uid: u32,
    user: Option<String>,
    group: String,
    mode: u32,
}

impl Who {
    pub(super) fn of(st: &FileStat) -> Who {
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
    pub(super) fn name(&self) -> String {
        match &self.user {
            Some(u) => format!("user {u} (uid {})", self.uid),
            None => format!("uid {}", self.uid),
        }
    }

    /// `user alice (uid 1001), group staff, mode 2755`.
    pub(super) fn describe(&self) -> String {
        format!(
            "{}, group {}, mode {:04o}",
            self.name(),
            self.group,
            self.mode
        )
    }

    /// Whom to ask: `alice`, or `the user with uid 1001`.
    pub(super) fn ask(&self) -> String {
        self.user
            .clone()
            .unwrap_or_else(|| format!("the user with uid {}", self.uid))
    }
}

/// `EACCES` and `EPERM` as [`Error::PermissionDenied`], naming the owner of what is in
/// the way (`owner`: its `lstat`) with `detail`; any other error, or an owner that
/// cannot be inspected, as a plain [`Error::Io`].
pub(super) fn denied(
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
pub(super) fn denied_create_state(e: Errno, parent: &OwnedFd, path: PathBuf) -> Error {
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

impl StateDir {
    /// A lock file that could not be created in the state directory: for lack of
    /// permission, names the directory's owner, group and mode, and what to do.
    pub(super) fn denied_create(&self, action: &'static str, path: PathBuf, e: Errno) -> Error {
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
    pub(super) fn denied_remove(&self, action: &'static str, name: &LockName, e: Errno) -> Error {
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
}
