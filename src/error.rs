//! The crate's one error type.

use std::io;
use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::entry::Entry;

/// A specialised `Result` whose error is [`enum@Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// What [`Error::PermissionDenied`] says was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Refused {
    /// Creating the state directory in the locked directory.
    CreateStateDir,
    /// Opening the state directory.
    OpenStateDir,
    /// Creating a lock file in the state directory.
    CreateLockFile,
    /// Removing another user's lock file from the state directory.
    RemoveLockFile,
}

impl Refused {
    /// The facts, worded for an error message.
    fn describe(self, dir: &Path, owner: &Owner) -> String {
        let dir = dir.display();
        match self {
            Refused::CreateStateDir => {
                format!("this user may not create it in `{dir}`, which belongs to {owner}")
            }
            Refused::OpenStateDir => format!("this user may not open it: it belongs to {owner}"),
            Refused::CreateLockFile => {
                format!("this user may not create files in `{dir}`, which belongs to {owner}")
            }
            Refused::RemoveLockFile => format!(
                "it belongs to {}, and this user may not remove files of others from `{dir}`",
                owner.name()
            ),
        }
    }
}

/// The owner and mode of a file or directory, as `lstat` gave them.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Owner {
    /// The owner's user id.
    pub uid: u32,
    /// The owner's user name, if it has one here.
    pub user: Option<String>,
    /// The group's id.
    pub gid: u32,
    /// The group's name, if it has one here.
    pub group: Option<String>,
    /// The permission bits (`st_mode & 0o7777`).
    pub mode: u32,
}

impl Owner {
    /// `user alice (uid 1001)`, or `uid 1001` without a name.
    pub fn name(&self) -> String {
        match &self.user {
            Some(u) => format!("user {u} (uid {})", self.uid),
            None => format!("uid {}", self.uid),
        }
    }
}

/// `user alice (uid 1001), group staff, mode 2755`.
impl std::fmt::Display for Owner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let group = self.group.clone().unwrap_or_else(|| self.gid.to_string());
        write!(f, "{}, group {group}, mode {:04o}", self.name(), self.mode)
    }
}

/// Everything that can go wrong while taking, holding or inspecting a lock.
///
/// Every filesystem variant names the path it failed on and keeps the underlying
/// [`io::Error`] as its [`source`](std::error::Error::source), so [`Error::kind`] and the
/// conversion into [`io::Error`] keep the [`io::ErrorKind`].
///
/// # Examples
///
/// ```
/// let dir = tempfile::tempdir()?;
/// let lock = rwdir::DirLock::new(dir.path())?;
/// // Taken by another thread (a thread's own guard would give `WouldDeadlock`).
/// let _w = std::thread::scope(|s| s.spawn(|| lock.write()).join()).expect("thread")?;
/// match lock.try_read() {
///     Err(rwdir::Error::WouldBlock { holder, .. }) => {
///         let holder = holder.expect("the writer is named");
///         assert_eq!(holder.kind, rwdir::Kind::Write);
///     }
///     other => panic!("expected WouldBlock, got {other:?}"),
/// }
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A filesystem operation failed.
    #[error("failed to {action} `{}`", path.display())]
    Io {
        /// What was being done, as a verb phrase ("create lock file").
        action: &'static str,
        /// The path the operation was on.
        path: PathBuf,
        /// The operating system's error.
        #[source]
        source: io::Error,
    },
    /// A lock file (or the state directory) could not be created or removed for lack of
    /// permission: several users share the directory, but it is not set up for that. The
    /// error carries the facts (what was refused, in which directory, whose file or
    /// directory is in the way, its mode); what to do about it is the caller's to say
    /// (the `rwdir` command says it, and `docs/multi-user.md` explains the set-up).
    #[error("failed to {action} `{}`: {}", path.display(), refused.describe(dir, owner))]
    PermissionDenied {
        /// What was being done, as a verb phrase ("remove lock file").
        action: &'static str,
        /// The path the operation was on.
        path: PathBuf,
        /// What was refused.
        refused: Refused,
        /// The directory whose permissions refused it: the state directory for a lock
        /// file, the locked directory for the state directory.
        dir: PathBuf,
        /// The owner and mode of what is in the way: the lock file that could not be
        /// removed, or the directory in which nothing could be created.
        owner: Box<Owner>,
        /// The operating system's error (`EACCES` or `EPERM`).
        #[source]
        source: io::Error,
    },
    /// The locked directory, or the state directory, is not a real directory
    /// (a file, a symlink, or something else).
    #[error("`{}` is not a directory ({found})", path.display())]
    NotADirectory {
        /// The offending path.
        path: PathBuf,
        /// What was found there instead ("symlink", "file", ...).
        found: &'static str,
    },
    /// A `try_*` call found the lock held.
    #[error("lock on `{}` is busy: {}", dir.display(), describe(holder.as_deref()))]
    WouldBlock {
        /// The locked directory.
        dir: PathBuf,
        /// Who was in the way at the last look, if anyone could be named.
        holder: Option<Box<Entry>>,
    },
    /// A `try_*_for` / `try_*_until` call ran out of time.
    #[error("timed out after {:.1} s waiting for lock on `{}`: {}", waited.as_secs_f64(), dir.display(), describe(holder.as_deref()))]
    TimedOut {
        /// The locked directory.
        dir: PathBuf,
        /// How long the call waited.
        waited: Duration,
        /// Who was in the way at the last look, if anyone could be named.
        holder: Option<Box<Entry>>,
    },
    /// A waiting acquisition was cancelled through a [`Cancel`](crate::Cancel) handle;
    /// the files it had made were removed.
    #[error("gave up waiting for lock on `{}`: cancelled", dir.display())]
    Cancelled {
        /// The locked directory.
        dir: PathBuf,
    },
    /// The calling thread asked for a lock that can only be granted after it releases a
    /// guard it holds itself, so waiting would never end: a write while this thread
    /// holds a read or write guard on the same directory, a read while it holds the
    /// write guard, or a second read while a writer waits (the writer waits for this
    /// thread's read guard, and the new read for the writer). Nothing was created.
    ///
    /// A guard counts as the calling thread's if this thread took it (or downgraded
    /// it), through any [`DirLock`](crate::DirLock) on the same state directory, until
    /// it is released or dropped, even if it was moved to another thread meanwhile.
    /// Guards of other threads never cause this error: a thread waits for them as for
    /// another process.
    #[error("{} lock on `{}` would wait for ever: {}", role(*want), dir.display(), deadlock(*held, path, writer.as_deref()))]
    WouldDeadlock {
        /// The locked directory.
        dir: PathBuf,
        /// What was asked for: [`Kind::Read`](crate::Kind::Read) or
        /// [`Kind::Write`](crate::Kind::Write).
        want: crate::Kind,
        /// The calling thread's guard in the way: read or write.
        held: crate::Kind,
        /// That guard's lock file.
        path: PathBuf,
        /// For a read while this thread holds a read guard: the writer that waits for
        /// it (and that the new read would wait for).
        writer: Option<Box<Entry>>,
    },
    /// The highest fencing token is `u64::MAX`, which counting never reaches: someone
    /// planted it, and no write grant can have a higher token. `cleanup_all` keeps the
    /// highest token; remove this file by hand, when no process uses the lock, to go on.
    #[error("no fencing token after `{}`: the highest possible token is taken", path.display())]
    TokensExhausted {
        /// The token file.
        path: PathBuf,
    },
    /// The directory (or the state directory) is on a filesystem where lock files cannot
    /// work, such as an object-store FUSE mount, whose exclusive creation is not
    /// exclusive ([`Filesystem::refused`](crate::Filesystem::refused)). Nothing was
    /// created. [`Builder::allow_unsafe_filesystem`](crate::Builder::allow_unsafe_filesystem)
    /// lets it through.
    #[error("refusing to lock `{}`: it is on {filesystem} (mount type `{fstype}`), where {reason}", path.display())]
    UnsafeFilesystem {
        /// The directory.
        path: PathBuf,
        /// The filesystem's name ([`Filesystem::name`](crate::Filesystem::name)).
        filesystem: String,
        /// The mount's type in `/proc/self/mountinfo`.
        fstype: String,
        /// Why lock files cannot work there.
        reason: &'static str,
    },
    /// The lock file of a held (or just granted) lock is no longer ours: it was removed
    /// or replaced by someone else, or its filesystem went away.
    #[error("lock lost: `{}`: {reason}", path.display())]
    LockLost {
        /// The lock file that was lost.
        path: PathBuf,
        /// What was observed.
        reason: String,
    },
}

fn describe(holder: Option<&Entry>) -> String {
    match holder {
        Some(e)
            if e.holder
                .as_ref()
                .is_some_and(crate::Holder::is_this_process) =>
        {
            format!("held by this process: {}", e.describe())
        }
        Some(e) => format!("held by {}", e.describe()),
        None => "held by another process".to_string(),
    }
}

fn role(kind: crate::Kind) -> &'static str {
    match kind {
        crate::Kind::Write => "write",
        _ => "read",
    }
}

/// Why a [`Error::WouldDeadlock`] request would wait for ever.
fn deadlock(held: crate::Kind, path: &Path, writer: Option<&Entry>) -> String {
    let path = path.display();
    match (held, writer) {
        (crate::Kind::Write, _) => format!(
            "this thread holds the write lock on it (`{path}`); release or downgrade that guard first"
        ),
        (_, Some(w)) => format!(
            "{}{} waits for the read lock this thread holds (`{path}`), and readers wait behind a waiting writer; release that guard first",
            w.describe(),
            if w.holder
                .as_ref()
                .is_some_and(crate::Holder::is_this_process)
            {
                ", another thread of this process,"
            } else {
                ""
            }
        ),
        (_, None) => format!(
            "this thread holds a read lock on it (`{path}`), and a writer waits for every reader; release that guard first"
        ),
    }
}

impl Error {
    /// The [`io::ErrorKind`] that best describes this error.
    ///
    /// `WouldBlock` and `TimedOut` map to the kinds of the same name, `NotADirectory` to
    /// [`io::ErrorKind::NotADirectory`], `WouldDeadlock` to [`io::ErrorKind::Deadlock`], `LockLost` to [`io::ErrorKind::Other`],
    /// `TokensExhausted` to [`io::ErrorKind::InvalidData`], `UnsafeFilesystem` to
    /// [`io::ErrorKind::Unsupported`], and
    /// filesystem errors (`PermissionDenied` too) keep the operating system's kind.
    ///
    /// # Examples
    ///
    /// ```
    /// let dir = tempfile::tempdir()?;
    /// let lock = rwdir::DirLock::new(dir.path())?;
    /// let _r = std::thread::scope(|s| s.spawn(|| lock.read()).join()).expect("thread")?; // another thread's
    /// let err = lock.try_write().unwrap_err();
    /// assert_eq!(err.kind(), std::io::ErrorKind::WouldBlock);
    /// let io: std::io::Error = err.into(); // the kind survives the conversion
    /// assert_eq!(io.kind(), std::io::ErrorKind::WouldBlock);
    /// let mine = lock.read()?; // this thread's
    /// assert_eq!(lock.try_write().unwrap_err().kind(), std::io::ErrorKind::Deadlock);
    /// # drop(mine);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn kind(&self) -> io::ErrorKind {
        match self {
            Error::Io { source, .. } | Error::PermissionDenied { source, .. } => source.kind(),
            Error::NotADirectory { .. } => io::ErrorKind::NotADirectory,
            Error::WouldBlock { .. } => io::ErrorKind::WouldBlock,
            Error::TimedOut { .. } => io::ErrorKind::TimedOut,
            Error::Cancelled { .. } => io::ErrorKind::Interrupted,
            Error::LockLost { .. } => io::ErrorKind::Other,
            Error::TokensExhausted { .. } => io::ErrorKind::InvalidData,
            Error::UnsafeFilesystem { .. } => io::ErrorKind::Unsupported,
            Error::WouldDeadlock { .. } => io::ErrorKind::Deadlock,
        }
    }

    /// The path this error is about: the file or directory for filesystem errors, the
    /// locked directory for `WouldBlock`, `TimedOut`, `Cancelled` and `WouldDeadlock`.
    ///
    /// # Examples
    ///
    /// ```
    /// let err = rwdir::DirLock::new("/no/such/dir").unwrap_err();
    /// assert_eq!(err.path(), std::path::Path::new("/no/such/dir"));
    /// assert_eq!(err.kind(), std::io::ErrorKind::NotFound);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn path(&self) -> &Path {
        match self {
            Error::Io { path, .. }
            | Error::PermissionDenied { path, .. }
            | Error::NotADirectory { path, .. }
            | Error::LockLost { path, .. }
            | Error::TokensExhausted { path }
            | Error::UnsafeFilesystem { path, .. } => path,
            Error::WouldBlock { dir, .. }
            | Error::TimedOut { dir, .. }
            | Error::Cancelled { dir }
            | Error::WouldDeadlock { dir, .. } => dir,
        }
    }

    /// The holder that was in the way, for `WouldBlock` and `TimedOut`.
    ///
    /// # Examples
    ///
    /// ```
    /// let dir = tempfile::tempdir()?;
    /// let lock = rwdir::DirLock::new(dir.path())?;
    /// let _w = std::thread::scope(|s| s.spawn(|| lock.write()).join()).expect("thread")?; // another thread's
    /// let err = lock.try_read().unwrap_err();
    /// let holder = err.holder().and_then(|e| e.holder.as_ref()).expect("a holder record");
    /// assert_eq!(holder.pid, std::process::id());
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn holder(&self) -> Option<&Entry> {
        match self {
            Error::WouldBlock { holder, .. } | Error::TimedOut { holder, .. } => holder.as_deref(),
            _ => None,
        }
    }
}

/// `{:?}` gives the message and its causes on one line, the way the `rwdir` command says
/// them: ``failed to open directory `/x`: No such file or directory (os error 2)``. That is
/// also what a `fn main() -> Result<(), Box<dyn std::error::Error>>` prints when it
/// returns the error (see `examples/error_report.rs`). `{:#?}` puts each cause on a line
/// of its own. `Display` (`{}`) is the message alone, as the convention for errors with a
/// [`source`](std::error::Error::source) asks; use the fields or
/// [`Error::kind`] to act on an error.
impl std::fmt::Debug for Error {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{self}")?;
        let mut source = std::error::Error::source(self);
        while let Some(cause) = source {
            if f.alternate() {
                write!(f, "\n  caused by: {cause}")?;
            } else {
                write!(f, ": {cause}")?;
            }
            source = cause.source();
        }
        Ok(())
    }
}

impl From<Error> for io::Error {
    fn from(err: Error) -> io::Error {
        io::Error::new(err.kind(), err)
    }
}

/// Attaches a path and an action to an `io::Result`, keeping the error kind.
pub(crate) trait IoResultExt<T> {
    fn at(self, action: &'static str, path: impl FnOnce() -> PathBuf) -> Result<T>;
}

impl<T> IoResultExt<T> for io::Result<T> {
    fn at(self, action: &'static str, path: impl FnOnce() -> PathBuf) -> Result<T> {
        self.map_err(|source| Error::Io {
            action,
            path: path(),
            source,
        })
    }
}

impl<T> IoResultExt<T> for nix::Result<T> {
    fn at(self, action: &'static str, path: impl FnOnce() -> PathBuf) -> Result<T> {
        self.map_err(|errno| Error::Io {
            action,
            path: path(),
            source: io::Error::from(errno),
        })
    }
}
