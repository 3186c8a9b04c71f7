//! The `rwdir` command line: `read`, `write`, `status`, `cleanup`, `completions`, `man`.

pub(crate) mod args;
pub(crate) mod cleanup;
pub(crate) mod doctor;
pub(crate) mod exec;
pub(crate) mod man;
pub(crate) mod reap;
pub(crate) mod spawn;
pub(crate) mod status;
pub(crate) mod supervise;
pub(crate) mod usage;

use std::ffi::OsString;
use std::fmt::Write as _;
use std::io;

use nix::sys::signal::Signal;

/// Exit codes of rwdir's own (COMMAND's status passes through unchanged).
pub(crate) mod code {
    /// Success of `status`, `cleanup`, `completions`, `man`; `doctor`: safe.
    pub(crate) const OK: u8 = 0;
    /// `doctor`: unsafe, a check failed.
    pub(crate) const DOCTOR_UNSAFE: u8 = 1;
    /// `doctor`: could not tell.
    pub(crate) const DOCTOR_UNKNOWN: u8 = 2;
    /// Any other error: an I/O error in the lock directory, a failed fork, ...
    pub(crate) const FAILURE: u8 = 1;
    /// Usage error: unknown option, missing COMMAND, bad --timeout (EX_USAGE).
    pub(crate) const USAGE: u8 = 64;
    /// DIR is missing, not a directory, unreadable, or its `.rwdir` is not a real
    /// directory (EX_NOINPUT).
    pub(crate) const NO_DIR: u8 = 66;
    /// The lock was lost while COMMAND ran; COMMAND was sent SIGTERM (EX_IOERR).
    pub(crate) const LOST: u8 = 74;
    /// The lock was not obtained in time: `--timeout`, `--no-wait` (EX_TEMPFAIL).
    pub(crate) const BUSY: u8 = 75;
    /// COMMAND was found but could not be executed.
    pub(crate) const CANNOT_EXECUTE: u8 = 126;
    /// COMMAND was not found.
    pub(crate) const NOT_FOUND: u8 = 127;
    /// COMMAND (or rwdir, while waiting for the lock) died of signal N: 128 + N.
    pub(crate) const SIGNAL_BASE: u8 = 128;

    /// The exit-code table of `rwdir --help`.
    pub(crate) const HELP: &str = "\
Exit status:
  read, write   COMMAND's own exit status; 128+N if COMMAND died of signal N
                (also when rwdir itself got signal N while waiting for the lock)
  0             status, cleanup, completions, man: success; doctor: DIR is safe
  1             any other error (an I/O error in DIR/.rwdir, a failed fork, ...);
                doctor: DIR is unsafe (a check failed)
  2             doctor: could not tell (a check could not be made, or DIR cannot
                be used)
  64            usage error (unknown option, missing COMMAND, bad --timeout)
  66            DIR is missing, not a directory, not readable, or DIR/.rwdir is
                not a real directory; or DIR is on a filesystem rwdir refuses
                (object-store mounts) without --allow-unsafe-filesystem
  74            the lock was lost while COMMAND ran (its lock file was removed, or
                the filesystem went away): COMMAND got SIGTERM, SIGKILL 10 s later
  75            the lock was not obtained within --timeout (or at once, --no-wait)
  126           COMMAND was found but could not be executed
  127           COMMAND was not found";

    /// The environment and exit-code text of `rwdir read --help`, `rwdir write --help`.
    pub(crate) const HELP_LOCK: &str = "\
COMMAND's environment:
  RWDIR_MODE    `read` or `write`
  RWDIR_DIR     DIR, as given
  RWDIR_TOKEN   (writers only) the fencing token of this grant: unique and growing
                over all write grants on DIR. It protects only a resource that
                remembers the highest token it has seen and rejects lower ones.

COMMAND runs in a process group of its own. The lock is held until COMMAND and every
process it started have exited: background jobs (nohup'd or not), and processes that
left the group (setsid, double forks, daemons). Once COMMAND has exited, rwdir says
once on stderr which processes it still waits for (--quiet silences this), and exits
with COMMAND's status when they are gone. --no-wait-children releases the lock as soon
as COMMAND itself exits instead. If rwdir dies, even by SIGKILL, every process of the
job is killed (with --no-wait-children, COMMAND only). SIGINT, SIGTERM and SIGHUP sent
to rwdir are forwarded to COMMAND's process group.
While waiting more than a second, rwdir says once on stderr who holds the lock
(--quiet silences this).

Exit status:
  COMMAND's own exit status; 128+N if COMMAND died of signal N
  (also when rwdir itself got signal N while waiting for the lock)
  1     any other error (an I/O error in DIR/.rwdir, a failed fork, ...)
  64    usage error (unknown option, missing COMMAND, bad --timeout)
  66    DIR is missing, not a directory, not readable, or DIR/.rwdir is not a real
        directory; or DIR is on a filesystem rwdir refuses (object-store mounts)
        without --allow-unsafe-filesystem
  74    the lock was lost while COMMAND ran: COMMAND got SIGTERM, SIGKILL 10 s later
  75    the lock was not obtained within --timeout (or at once, --no-wait)
  126   COMMAND was found but could not be executed
  127   COMMAND was not found";
}

/// Everything that ends rwdir with an error.
#[derive(Debug, thiserror::Error)]
pub(crate) enum Error {
    /// A usage error, or `--help`/`--version` (which clap reports as errors).
    #[error(transparent)]
    Usage(#[from] clap::Error),
    /// DIR cannot be used as a lock directory.
    #[error(transparent)]
    Dir(rwdir::Error),
    /// Taking, inspecting or cleaning the lock failed.
    #[error(transparent)]
    Lock(#[from] rwdir::Error),
    /// The lock was lost while COMMAND ran. The message was printed when it happened.
    #[error("{0}")]
    Lost(rwdir::Error),
    /// COMMAND could not be started.
    #[error("failed to run `{}`", program.to_string_lossy())]
    Exec {
        /// COMMAND as given.
        program: OsString,
        /// Why.
        #[source]
        source: io::Error,
    },
    /// rwdir got a signal while it waited for the lock; COMMAND never ran.
    #[error("interrupted by {} while waiting for {mode} lock on `{}`", signal.as_str(), dir.display())]
    Interrupted {
        /// The signal.
        signal: Signal,
        /// `read` or `write`.
        mode: &'static str,
        /// DIR.
        dir: std::path::PathBuf,
    },
    /// A system call rwdir itself needs failed.
    #[error("failed to {action}")]
    Sys {
        /// What was being done, as a verb phrase.
        action: &'static str,
        /// The operating system's error.
        #[source]
        source: io::Error,
    },
    /// Writing to standard output failed.
    #[error("failed to write to standard output")]
    Output(#[source] io::Error),
    /// Writing a file (`rwdir man --out DIR`) failed.
    #[error("failed to write `{}`", path.display())]
    File {
        /// The file.
        path: std::path::PathBuf,
        /// Why.
        #[source]
        source: io::Error,
    },
}

impl Error {
    /// A failed system call of rwdir's own.
    pub(crate) fn sys(action: &'static str, errno: nix::errno::Errno) -> Error {
        Error::Sys {
            action,
            source: io::Error::from(errno),
        }
    }
}

/// The one-line message for `err`: the error and each of its sources, joined by ": ".
pub(crate) fn message(err: &dyn std::error::Error) -> String {
    let mut line = err.to_string();
    let mut source = err.source();
    while let Some(s) = source {
        let _ = write!(line, ": {s}");
        source = s.source();
    }
    line
}

/// Prints `err` on standard error the way the user should see it.
pub(crate) fn report(err: &Error) {
    match err {
        // --help and --version, which clap reports as errors, print to stdout.
        Error::Usage(e) if !e.use_stderr() => {
            let _ = e.print();
        }
        // One line saying what is wrong, one naming the help to read.
        Error::Usage(e) => {
            let args: Vec<OsString> = std::env::args_os().collect();
            let (line, hint) = usage::lines(e, &args);
            say(&line);
            use std::io::Write as _;
            let _ = writeln!(io::stderr().lock(), "{hint}");
        }
        // Already said when it happened.
        Error::Lost(_) => {}
        // `rwdir status | head -1`: not worth a word.
        Error::Output(e) if e.kind() == io::ErrorKind::BrokenPipe => {}
        Error::Lock(e) | Error::Dir(e) => match advice(e) {
            Some(advice) => say(&format!("{}; {advice}", message(err))),
            None => say(&message(err)),
        },
        _ => say(&message(err)),
    }
}

/// What to do when the filesystem's client has lost its server: `ESHUTDOWN` is what a
/// CephFS client answers once the MDS has evicted its session (after a crash of the
/// client, a partition longer than the session timeout, or `ceph tell mds.<id> client
/// evict`), and it stays so until the filesystem is mounted again (measured on the
/// CephFS rig, docs/notes/dfs-rig.md); `ENOTCONN` is a FUSE mount whose client process
/// died, said only when opening DIR failed so: on CephFS, reading a lock file whose
/// holder's client died before its data reached the servers can fail so too, through a
/// client that is fine (measured on the DFS rig).
fn disconnected(source: &io::Error, action: &str) -> Option<&'static str> {
    match nix::errno::Errno::from_raw(source.raw_os_error()?) {
        nix::errno::Errno::ESHUTDOWN => Some(
            "the filesystem's client has lost its session with the server (a CephFS \
             client evicted by the MDS answers so until remounted): remount the \
             filesystem that holds DIR (see docs/network-filesystems.md)",
        ),
        nix::errno::Errno::ENOTCONN if action == "open directory" => Some(
            "the filesystem's client is gone (a FUSE client process that died leaves its \
             mount point so): unmount it (`fusermount -u`) and mount it again (see \
             docs/network-filesystems.md)",
        ),
        _ => None,
    }
}

/// What to do about a lock error, where the command can tell: for a refused permission,
/// whom to ask for what (the library's error carries only the facts).
fn advice(err: &rwdir::Error) -> Option<String> {
    if let rwdir::Error::Io { source, action, .. } = err
        && let Some(advice) = disconnected(source, action)
    {
        return Some(advice.to_string());
    }
    if let rwdir::Error::UnsafeFilesystem { path, .. } = err {
        return Some(format!(
            "check it with `rwdir doctor {}`, and pass --allow-unsafe-filesystem only if \
             you know better (see docs/network-filesystems.md)",
            path.display()
        ));
    }
    let rwdir::Error::PermissionDenied {
        path,
        refused,
        dir,
        owner,
        ..
    } = err
    else {
        return None;
    };
    let ask = owner
        .user
        .clone()
        .unwrap_or_else(|| format!("the user with uid {}", owner.uid));
    Some(match refused {
        rwdir::Refused::CreateStateDir => format!(
            "ask {ask} or an administrator to make it for the users who share the directory \
             (`mkdir -m 2775 {}` and `chgrp` it to their group; see docs/multi-user.md)",
            path.display()
        ),
        rwdir::Refused::OpenStateDir => format!(
            "ask {ask} or an administrator to make `{}` group-accessible and setgid \
             (`chmod 2775`) for a group this user is in (see docs/multi-user.md)",
            dir.display()
        ),
        rwdir::Refused::CreateLockFile => format!(
            "ask {ask} or an administrator to make `{}` group-writable and setgid \
             (`chmod 2775`) for a group this user is in (see docs/multi-user.md)",
            dir.display()
        ),
        rwdir::Refused::RemoveLockFile => {
            let cleanup = match (dir.file_name(), dir.parent()) {
                (Some(leaf), Some(locked)) if leaf == ".rwdir" => {
                    format!("run `rwdir cleanup {}`", locked.display())
                }
                _ => "remove it".to_string(),
            };
            format!(
                "ask {ask} or an administrator to {cleanup}, or make `{}` group-writable, \
                 setgid and not sticky (`chmod 2775`; see docs/multi-user.md)",
                dir.display()
            )
        }
        _ => return None,
    })
}

/// Prints `rwdir: LINE` on standard error. Unlike `eprintln!`, never panics: a closed
/// stderr must not end the supervision of COMMAND.
pub(crate) fn say(line: &str) {
    use std::io::Write as _;
    let _ = writeln!(io::stderr().lock(), "rwdir: {line}");
}

/// The global `--allow-unsafe-filesystem`, set once by `main` before any subcommand runs.
pub(crate) static ALLOW_UNSAFE_FS: std::sync::atomic::AtomicBool =
    std::sync::atomic::AtomicBool::new(false);

/// The global `--cache-window`, set once by `main` before any subcommand runs.
pub(crate) static CACHE_WINDOW: std::sync::OnceLock<std::time::Duration> =
    std::sync::OnceLock::new();

/// A lock builder for DIR with the global `--lease`, `--allow-unsafe-filesystem` and
/// `--cache-window`, as every subcommand makes it.
pub(crate) fn builder(dir: &std::path::Path, lease: Option<std::time::Duration>) -> rwdir::Builder {
    let mut builder = rwdir::DirLock::builder(dir)
        .allow_unsafe_filesystem(ALLOW_UNSAFE_FS.load(std::sync::atomic::Ordering::Relaxed));
    if let Some(&window) = CACHE_WINDOW.get() {
        builder = builder.cache_window(window);
    }
    match lease {
        Some(lease) => builder.lease(lease),
        None => builder,
    }
}

/// Writes to standard output, turning failures into [`Error::Output`].
pub(crate) fn out(text: &str) -> Result<(), Error> {
    use std::io::Write as _;
    let mut stdout = io::stdout().lock();
    stdout
        .write_all(text.as_bytes())
        .and_then(|()| stdout.flush())
        .map_err(Error::Output)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn io_error(errno: nix::errno::Errno) -> rwdir::Error {
        rwdir::Error::Io {
            action: "open directory",
            path: "/mnt/cephfs/data".into(),
            source: io::Error::from_raw_os_error(errno as i32),
        }
    }

    #[test]
    fn an_evicted_or_dead_client_gets_advice_to_remount() {
        let evicted = advice(&io_error(nix::errno::Errno::ESHUTDOWN)).unwrap_or_default();
        assert!(evicted.contains("remount"), "{evicted}");
        assert!(evicted.contains("evicted"), "{evicted}");
        let dead = advice(&io_error(nix::errno::Errno::ENOTCONN)).unwrap_or_default();
        assert!(dead.contains("fusermount -u"), "{dead}");
        assert_eq!(advice(&io_error(nix::errno::Errno::ENOENT)), None);
        let read = rwdir::Error::Io {
            action: "inspect lock file",
            path: "/mnt/cephfs/data/.rwdir/.master_lock".into(),
            source: io::Error::from_raw_os_error(nix::errno::Errno::ENOTCONN as i32),
        };
        assert_eq!(advice(&read), None, "not about this client's mount");
    }
}
