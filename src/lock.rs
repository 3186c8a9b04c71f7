//! `DirLock`, its builder, and the free cleanup functions.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use parking_lot::Mutex;

use crate::config::Config;
use crate::entry::Entry;
use crate::error::{Error, Result};
use crate::filesystem::Filesystem;
use crate::fsops::StateDir;
use crate::guard::{Held, ReadGuard, WriteGuard, share};
use crate::holder::Kind;
use crate::owned;
use crate::protocol;
use crate::status::{self, Status};
use crate::wait::Deadline;

/// Default lease: how long a holder on another host counts as alive without a heartbeat.
///
/// A holder on another host is taken over once its lease plus the judge's margin has
/// passed since its last heartbeat; the margin is the filesystem's cache window plus 1 s
/// ([`Filesystem::judge_margin`]: 22 s on sshfs, 61 s on NFS with default options), so
/// the lease itself only has to cover the heartbeat (every lease/3), clock skew and
/// pauses: `lease > 1.5 × (clock skew + longest pause)`. 45 s allows for 30 s of the
/// two. See `docs/network-filesystems.md`. On the same host the lease plays no role:
/// death is checked exactly.
pub const DEFAULT_LEASE: Duration = Duration::from_secs(45);
/// Default shortest pause between two looks while waiting.
pub const DEFAULT_MIN_POLL: Duration = Duration::from_millis(1);
/// Default longest pause between two looks while waiting.
pub const DEFAULT_MAX_POLL: Duration = Duration::from_millis(100);

/// A handle that makes waiting acquisitions give up; see [`Builder::cancel`].
///
/// Cheap to clone; every clone cancels the same acquisitions. Cancelling is for good:
/// later waiting acquisitions of a lock built with it give up at their first pause.
///
/// # Examples
///
/// ```
/// let cancel = rwdir::Cancel::new();
/// assert!(!cancel.is_cancelled());
/// cancel.clone().cancel();
/// assert!(cancel.is_cancelled());
/// ```
#[derive(Debug, Clone, Default)]
pub struct Cancel {
    flag: Arc<AtomicBool>,
}

impl Cancel {
    /// A handle that has not been cancelled.
    ///
    /// # Examples
    ///
    /// ```
    /// assert!(!rwdir::Cancel::new().is_cancelled());
    /// ```
    pub fn new() -> Cancel {
        Cancel::default()
    }

    /// Makes every waiting acquisition of the locks built with this handle give up.
    ///
    /// # Examples
    ///
    /// ```
    /// let cancel = rwdir::Cancel::new();
    /// cancel.cancel();
    /// assert!(cancel.is_cancelled());
    /// ```
    pub fn cancel(&self) {
        self.flag.store(true, Ordering::Relaxed);
    }

    /// Whether [`Cancel::cancel`] was called.
    ///
    /// # Examples
    ///
    /// ```
    /// assert!(!rwdir::Cancel::new().is_cancelled());
    /// ```
    pub fn is_cancelled(&self) -> bool {
        self.flag.load(Ordering::Relaxed)
    }
}

/// A reader-writer lock on a directory.
///
/// Cheap to clone, `Send + Sync`. Every acquisition is independent: threads of one
/// process and separate processes take the lock the same way.
///
/// ```
/// use std::time::Duration;
/// let dir = tempfile::tempdir()?;
/// let lock = rwdir::DirLock::new(dir.path())?;
/// let guard = lock.try_write_for(Duration::from_secs(5))?;
/// assert!(lock.status()?.writer.is_some());
/// drop(guard);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone)]
pub struct DirLock {
    cfg: Arc<Config>,
    /// The state directory opened by an earlier acquisition, reused while its path
    /// still names it (local filesystems only; see `StateDir::is_current`).
    state: Arc<Mutex<Option<Arc<StateDir>>>>,
}

/// Options for a [`DirLock`]: lease, polling bounds, state directory, process group.
///
/// ```
/// use std::time::Duration;
/// let dir = tempfile::tempdir()?;
/// let lock = rwdir::DirLock::builder(dir.path())
///     .lease(Duration::from_secs(60))
///     .poll_interval(Duration::from_millis(2), Duration::from_millis(50))
///     .build()?;
/// # drop(lock);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone)]
#[must_use]
pub struct Builder {
    cfg: Config,
}

impl Builder {
    /// How long a holder whose process cannot be checked directly (another host,
    /// another pid namespace, a malformed file) counts as alive after its last
    /// heartbeat. Heartbeats run every lease/3. Default: [`DEFAULT_LEASE`].
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// let dir = tempfile::tempdir()?;
    /// let lock = rwdir::DirLock::builder(dir.path()).lease(Duration::from_secs(90)).build()?;
    /// assert_eq!(lock.lease(), Duration::from_secs(90));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn lease(mut self, lease: Duration) -> Builder {
        self.cfg.lease = lease;
        self
    }

    /// Bounds of the polling back-off while waiting: the first pause is about `min`,
    /// each next one doubles up to `max`, each with ±50 % jitter.
    /// Defaults: [`DEFAULT_MIN_POLL`], [`DEFAULT_MAX_POLL`].
    ///
    /// On a local filesystem where inotify works, a waiter is woken by the removal it
    /// waits for, and polling is only the backstop for what makes no event: a holder
    /// that died (its files stay) or whose lease ran out. There the pauses go on
    /// doubling past `max`, up to [`EVENT_BACKSTOP`](crate::EVENT_BACKSTOP) × `max` (2 s
    /// with the defaults, ± 50 % jitter), so many long waiters cost next to no CPU; a
    /// dead holder is noticed within that time. Where the one file a waiter waits for
    /// belongs to a process of this host and pid namespace that is alive by its own pid
    /// (not only through its process group), that process's exit is an event too (a
    /// pidfd): the waiter goes on as soon as it dies, and a pause that runs out with no
    /// event is slept on without a look, up to 300 × `max` (30 s with the defaults)
    /// between looks. A waiter behind a queued writer (whose turn comes when that writer
    /// leaves) whose wait is so watched starts its pauses at `max` instead of `min`.
    /// Remote filesystems, where other hosts' changes make no event here, poll between
    /// `min` and `max`.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// let dir = tempfile::tempdir()?;
    /// let lock = rwdir::DirLock::builder(dir.path())
    ///     .poll_interval(Duration::from_millis(5), Duration::from_millis(200))
    ///     .build()?;
    /// drop(lock.read()?);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn poll_interval(mut self, min: Duration, max: Duration) -> Builder {
        self.cfg.min_poll = min;
        self.cfg.max_poll = max.max(min);
        self
    }

    /// Keeps the lock files in `path` instead of `DIR/.rwdir`. Its parent must exist;
    /// `path` itself is made on first use and must not be a symlink.
    ///
    /// # Examples
    ///
    /// ```
    /// let dir = tempfile::tempdir()?;
    /// let elsewhere = tempfile::tempdir()?;
    /// let state = elsewhere.path().join("locks");
    /// let lock = rwdir::DirLock::builder(dir.path()).state_dir(&state).build()?;
    /// let _r = lock.read()?;
    /// assert!(state.is_dir() && !dir.path().join(".rwdir").exists());
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn state_dir(mut self, path: impl Into<PathBuf>) -> Builder {
        self.cfg.state_dir = Some(path.into());
        self
    }

    /// Names a process group that keeps this process's locks alive while any member
    /// lives, even after this process died (used by `rwdir read|write` for COMMAND).
    ///
    /// # Examples
    ///
    /// ```
    /// let dir = tempfile::tempdir()?;
    /// let pgid = nix::unistd::getpgrp().as_raw() as u32;
    /// let lock = rwdir::DirLock::builder(dir.path()).process_group(pgid).build()?;
    /// let _w = lock.write()?;
    /// assert_eq!(lock.status()?.writer.and_then(|e| e.holder).map(|h| h.pgid), Some(pgid));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn process_group(mut self, pgid: u32) -> Builder {
        self.cfg.pgid = pgid;
        self
    }

    /// Lets `cancel` make this lock's waiting acquisitions give up: once
    /// [`Cancel::cancel`] is called, a waiting `read`, `write` or `try_*_for` removes the
    /// files it made and returns [`Error::Cancelled`] within one polling pause (at most
    /// the maximum poll interval). For a thread that must stop waiting on a signal or a
    /// shutdown, without leaving a queued writer in everyone's way.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// let dir = tempfile::tempdir()?;
    /// let cancel = rwdir::Cancel::new();
    /// let lock = rwdir::DirLock::builder(dir.path()).cancel(&cancel).build()?;
    /// let reader = lock.read()?;
    /// let waiter = {
    ///     let lock = lock.clone();
    ///     std::thread::spawn(move || lock.write().map(drop))
    /// };
    /// std::thread::sleep(Duration::from_millis(50));
    /// cancel.cancel();
    /// let err = waiter.join().unwrap().unwrap_err();
    /// assert!(matches!(err, rwdir::Error::Cancelled { .. }));
    /// drop(reader);
    /// assert!(lock.status()?.is_free()); // the writer's files are gone
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn cancel(mut self, cancel: &Cancel) -> Builder {
        self.cfg.cancel = Some(Arc::clone(&cancel.flag));
        self
    }

    /// Whether held lock files are refreshed by a background thread. Default: `true`.
    ///
    /// With `true`, the first acquisition starts one heartbeat thread per process,
    /// shared by all held files, which refreshes each file's mtime every lease/3 (so that
    /// holders on other hosts do not judge it stale) and marks a lost lock for
    /// [`ReadGuard::is_lost`]. With `false`, the guards of this lock are not given to
    /// that thread, and no thread is started for them: the owner must call
    /// [`ReadGuard::refresh`] or [`WriteGuard::refresh`] at least every lease/3 while
    /// it holds the lock, or holders on other hosts treat the lock as stale once the
    /// lease has passed. Holders on the same host judge liveness by process, so they
    /// need no refresh. For a program that has its own event loop and wants no extra
    /// thread (the `rwdir` command does this).
    ///
    /// # Examples
    ///
    /// ```
    /// let dir = tempfile::tempdir().expect("a temporary directory");
    /// let lock = rwdir::DirLock::builder(dir.path())
    ///     .background_heartbeat(false)
    ///     .build()?;
    /// let w = lock.write()?;
    /// w.refresh()?; // by hand, at least every lease/3
    /// w.release()?;
    /// # Ok::<(), rwdir::Error>(())
    /// ```
    pub fn background_heartbeat(mut self, on: bool) -> Builder {
        self.cfg.heartbeat = on;
        self
    }

    /// Uses a directory on a filesystem where lock files cannot work (an object-store
    /// FUSE mount such as s3fs or gcsfuse, see [`Filesystem::refused`]) instead of
    /// refusing it with [`Error::UnsafeFilesystem`]. Default: `false`.
    ///
    /// Only for those who know better than the mount's type: a FUSE filesystem that
    /// calls itself `s3fs` but is backed by something that honours exclusive creation,
    /// or a single host that alone uses the directory. Check with `rwdir doctor` first.
    ///
    /// # Examples
    ///
    /// ```
    /// let dir = tempfile::tempdir()?;
    /// let lock = rwdir::DirLock::builder(dir.path()).allow_unsafe_filesystem(true).build()?;
    /// drop(lock.write()?);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn allow_unsafe_filesystem(mut self, allow: bool) -> Builder {
        self.cfg.allow_unsafe_fs = allow;
        self
    }

    /// How stale this client's view of another host's lock file can be (its attribute
    /// cache), where you know it better than rwdir does from the filesystem's kind
    /// ([`Filesystem::cache_window`]): for example `Duration::ZERO` on NFS mounted with
    /// `actimeo=0` or on sshfs mounted with `cache=no`, or what `rwdir doctor
    /// --peer-dir` measured on a FUSE filesystem rwdir does not know. A holder on
    /// another host is judged dead once its lease plus this window plus 1 s of mtime
    /// resolution has passed since its last renewal ([`Filesystem::judge_margin`]).
    /// Ignored on a local filesystem. Default: by the filesystem's kind.
    ///
    /// Too short a window lets a host whose cache shows an old mtime take over a lock
    /// whose holder is alive and renewing: give every host of a directory a window that
    /// covers its own mount.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// let dir = tempfile::tempdir()?;
    /// let lock = rwdir::DirLock::builder(dir.path())
    ///     .cache_window(Duration::ZERO) // e.g. NFS with actimeo=0
    ///     .build()?;
    /// drop(lock.write()?);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn cache_window(mut self, window: Duration) -> Builder {
        self.cfg.cache_window = Some(window);
        self
    }

    /// Whether reads of this process share one reader's file. Default: `true`.
    ///
    /// When a thread (or task) asks for a read lock while another read guard of this
    /// process already holds one on the same directory with the same settings, it
    /// **joins** that guard's file instead of creating its own: it counts itself in,
    /// lists the state directory as any reader does after announcing itself, and enters
    /// if no writer holds or waits; otherwise it takes the usual way. A read (blocking
    /// or `DirLock::read_async`) that finds no file to join while another read of this
    /// process is on its way in waits for that one and joins its file once it is in (a
    /// `try_read` does not wait, a read with a timeout waits no longer than its timeout,
    /// and a [`Cancel`] ends the wait as it ends any other), so that reads asking at once
    /// come in through one file. A waiting writer still stops every new read at
    /// once, joins included. The file is removed when the last guard sharing it is
    /// released or dropped, and each guard still reports a lost lock
    /// ([`ReadGuard::check`](crate::ReadGuard::check),
    /// [`ReadGuard::is_lost`](crate::ReadGuard::is_lost)) for all of them.
    ///
    /// A join costs one listing instead of a creation, two listings and a removal: many
    /// threads reading in a tight loop get 2–16× as many grants a second
    /// (`docs/notes/contention.md`). What others see changes: [`DirLock::status`] shows
    /// one reader for this process however many of its threads read. Turn it off to give
    /// every read guard a file of its own. Guards join only guards whose `DirLock` also
    /// shares, with the same lease, process group and background heartbeat; a forked
    /// child never joins its parent's file.
    ///
    /// # Examples
    ///
    /// ```
    /// let dir = tempfile::tempdir()?;
    /// let lock = rwdir::DirLock::new(dir.path())?;
    /// let (a, b) = (lock.read()?, lock.read()?);
    /// assert_eq!(lock.status()?.readers.len(), 1); // one file, two guards
    /// drop(a);
    /// b.check()?; // still held
    /// drop(b);
    /// assert!(lock.status()?.is_free());
    ///
    /// let apart = rwdir::DirLock::builder(dir.path()).share_readers(false).build()?;
    /// let (c, d) = (apart.read()?, apart.read()?);
    /// assert_eq!(apart.status()?.readers.len(), 2);
    /// # drop((c, d));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn share_readers(mut self, on: bool) -> Builder {
        self.cfg.share_readers = on;
        self
    }

    /// Checks the directory and makes the lock.
    ///
    /// # Errors
    ///
    /// [`Error::Io`] (kind `NotFound`, `PermissionDenied`, ...) if the directory cannot
    /// be opened, [`Error::NotADirectory`] if it is not a directory,
    /// [`Error::UnsafeFilesystem`] if it (or the state directory's parent) is on a
    /// filesystem where lock files cannot work, unless
    /// [`Builder::allow_unsafe_filesystem`] allows it.
    ///
    /// # Examples
    ///
    /// ```
    /// let dir = tempfile::tempdir()?;
    /// let lock = rwdir::DirLock::builder(dir.path()).build()?;
    /// assert_eq!(lock.path(), dir.path());
    /// let missing = rwdir::DirLock::builder(dir.path().join("missing")).build();
    /// assert_eq!(missing.unwrap_err().kind(), std::io::ErrorKind::NotFound);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn build(self) -> Result<DirLock> {
        let meta = std::fs::metadata(&self.cfg.dir).map_err(|source| Error::Io {
            action: "open directory",
            path: self.cfg.dir.clone(),
            source,
        })?;
        if !meta.is_dir() {
            return Err(Error::NotADirectory {
                path: self.cfg.dir.clone(),
                found: "a file",
            });
        }
        if !self.cfg.allow_unsafe_fs {
            let state_parent = self.cfg.state_dir.as_deref().map(|s| match s.parent() {
                Some(p) if !p.as_os_str().is_empty() => p,
                _ => Path::new("."),
            });
            for path in std::iter::once(self.cfg.dir.as_path()).chain(state_parent) {
                refuse_unsafe(path)?;
            }
        }
        Ok(DirLock {
            cfg: Arc::new(self.cfg),
            state: Arc::new(Mutex::new(None)),
        })
    }
}

impl DirLock {
    /// A lock on `dir` with default options.
    ///
    /// # Errors
    ///
    /// As [`Builder::build`].
    ///
    /// # Examples
    ///
    /// ```
    /// let dir = tempfile::tempdir()?;
    /// let lock = rwdir::DirLock::new(dir.path())?;
    /// assert_eq!(lock.path(), dir.path());
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn new(dir: impl AsRef<Path>) -> Result<DirLock> {
        DirLock::builder(dir).build()
    }

    /// A builder for a lock on `dir`.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// let dir = tempfile::tempdir()?;
    /// let lock = rwdir::DirLock::builder(dir.path()).lease(Duration::from_secs(60)).build()?;
    /// drop(lock.write()?);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn builder(dir: impl AsRef<Path>) -> Builder {
        Builder {
            cfg: Config {
                dir: dir.as_ref().to_path_buf(),
                state_dir: None,
                lease: DEFAULT_LEASE,
                min_poll: DEFAULT_MIN_POLL,
                max_poll: DEFAULT_MAX_POLL,
                pgid: 0,
                cancel: None,
                heartbeat: true,
                allow_unsafe_fs: false,
                cache_window: None,
                share_readers: true,
            },
        }
    }

    /// The locked directory.
    ///
    /// # Examples
    ///
    /// ```
    /// let dir = tempfile::tempdir()?;
    /// let lock = rwdir::DirLock::new(dir.path())?;
    /// assert_eq!(lock.path(), dir.path());
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn path(&self) -> &Path {
        &self.cfg.dir
    }

    /// The lease of this lock's files.
    ///
    /// # Examples
    ///
    /// ```
    /// let dir = tempfile::tempdir()?;
    /// let lock = rwdir::DirLock::new(dir.path())?;
    /// assert_eq!(lock.lease(), rwdir::DEFAULT_LEASE);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn lease(&self) -> Duration {
        self.cfg.lease
    }

    /// The filesystem holding the locked directory (see [`Filesystem`]).
    ///
    /// # Errors
    ///
    /// [`Error::Io`] if the directory cannot be opened.
    ///
    /// # Examples
    ///
    /// ```
    /// let dir = tempfile::tempdir()?;
    /// let lock = rwdir::DirLock::new(dir.path())?;
    /// let fs = lock.filesystem()?;
    /// println!("{} is on {} (shared: {})", dir.path().display(), fs.name(), fs.is_shared());
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn filesystem(&self) -> Result<Filesystem> {
        Filesystem::of(&self.cfg.dir)
    }

    /// The state directory, made on first use; reopened when its path no longer names
    /// the directory we had open.
    fn state(&self) -> Result<Arc<StateDir>> {
        let mut cached = self.state.lock();
        if let Some(sd) = cached.as_ref().filter(|sd| sd.is_current()) {
            return Ok(Arc::clone(sd));
        }
        let sd = Arc::new(open(&self.cfg)?);
        *cached = Some(Arc::clone(&sd));
        Ok(sd)
    }

    /// [`Error::WouldDeadlock`] if a guard of the calling thread is in the way of `want`
    /// whatever the others do (a read guard in the way of a read only while a writer
    /// waits: `protocol::read` asks that when it would wait).
    fn not_mine(&self, sd: &StateDir, want: Kind) -> Result<()> {
        match owned::in_the_way(sd, want) {
            Some(mine) => Err(Error::WouldDeadlock {
                dir: self.cfg.dir.clone(),
                want,
                held: mine.kind,
                path: mine.path,
                writer: None,
            }),
            None => Ok(()),
        }
    }

    fn acquire_read(&self, deadline: Deadline) -> Result<ReadGuard> {
        let sd = self.state()?;
        self.not_mine(&sd, Kind::Read)?;
        // V11: join a reader's file this process holds, if no writer holds or waits; or
        // the file of a read of this process on its way in.
        if let Some(held) = share::join(&sd, &self.cfg)? {
            return Ok(joined(&sd, held, true));
        }
        let ticket = match share::board(&sd, &self.cfg, deadline)? {
            share::Boarding::Joined(held) => return Ok(joined(&sd, held, true)),
            share::Boarding::Fly(ticket) => Some(ticket),
            share::Boarding::Alone => None,
        };
        let held = protocol::read(&sd, &self.cfg, deadline)
            .map(|own| Held::new(sd, Arc::clone(&self.cfg), own));
        if let Some(ticket) = ticket {
            ticket.land(held.as_ref().ok());
        }
        Ok(ReadGuard::new(held?, true))
    }

    fn acquire_write(&self, deadline: Deadline) -> Result<WriteGuard> {
        let sd = self.state()?;
        self.not_mine(&sd, Kind::Write)?;
        let (own, hint) = protocol::write(&sd, &self.cfg, deadline)?;
        Ok(WriteGuard::new(
            Held::new(sd, Arc::clone(&self.cfg), own),
            hint,
            true,
        ))
    }

    /// The state directory for an async acquisition, or the error for calling one
    /// outside a tokio runtime (tokio's own functions would panic there).
    #[cfg(feature = "tokio")]
    fn state_async(&self) -> Result<Arc<StateDir>> {
        if tokio::runtime::Handle::try_current().is_err() {
            return Err(Error::Io {
                action: "wait for the lock on",
                path: self.cfg.dir.clone(),
                source: std::io::Error::other(
                    "no tokio runtime: call `read_async`/`write_async` within one \
                     (with its time and I/O drivers, as `#[tokio::main]` makes it)",
                ),
            });
        }
        self.state()
    }

    /// Takes a shared (read) lock, waiting on the tokio reactor as long as it takes:
    /// [`DirLock::read`] for async code (feature `tokio`).
    ///
    /// The wait is driven by the runtime: the process's one inotify watch of the state
    /// directory, shared with every other waiter (blocking or async), registered with
    /// the reactor, and the polling floor as a `tokio::time` sleep. No thread is parked
    /// per waiting task; thousands of tasks can wait at once. The protocol's steps
    /// between two waits (a listing, a file created or removed: microseconds on a local
    /// filesystem, a round trip each on a network one) run on the task itself, as
    /// `tokio::fs` would not make them shorter.
    ///
    /// Bound the wait with [`tokio::time::timeout`] or `timeout_at`; a
    /// [`Cancel`] handle given to the builder ends it too, at its next pause. The guard is released by
    /// [`ReadGuard::release`] or by drop, as any other, and releasing never waits: a
    /// reader's release is one `unlink`; a writer's, locally, is one `unlink` of
    /// `.master_lock` between two `stat`s, then one of its queue file. Releasing from
    /// async code blocks the runtime for no longer than those calls. Guards are kept
    /// fresh by the process's heartbeat thread, as every guard: a thread, not a task, so
    /// that it beats whatever the runtime is busy with (a task starved by blocking code
    /// would let the lease run out), and however many runtimes the guards came from.
    ///
    /// Needs a tokio runtime with its time and I/O drivers (`#[tokio::main]`,
    /// `Builder::enable_all`), current-thread or multi-thread.
    ///
    /// # Cancel safety
    ///
    /// This method is cancel safe: if the future is dropped before it completes (a
    /// timeout, the other branch of a `select!`, an aborted task), no lock is taken and
    /// nothing of this acquisition stays in the state directory. A reader owns no file
    /// while it waits; a drop between its announcement and its decisive look cannot
    /// happen, as no `.await` lies between them. A read waiting for another read of
    /// this process on its way in ([`Builder::share_readers`]) counts itself off when
    /// dropped, and out of that read's file if it was already counted in, so it keeps
    /// no file held; a read on its way in that is dropped lets the reads waiting for it
    /// go on by themselves.
    ///
    /// Unlike [`DirLock::read`], it makes no [`Error::WouldDeadlock`] check: the guards
    /// of tasks are not the guards of threads. A task that holds a read guard and waits
    /// for a write through the same process waits until that guard is released, as with
    /// `tokio::sync::RwLock`.
    ///
    /// # Errors
    ///
    /// [`Error::Io`] and [`Error::NotADirectory`] for filesystem problems (each names
    /// the path), [`Error::Cancelled`] through a [`Cancel`] handle, and [`Error::Io`]
    /// when called outside a tokio runtime.
    ///
    /// # Panics
    ///
    /// Within a runtime built without its time or I/O driver, as `tokio::time::sleep`
    /// and `AsyncFd` do there (tokio offers no way to ask beforehand). Outside any
    /// runtime it returns an error instead.
    ///
    /// # Examples
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// use std::time::Duration;
    ///
    /// let dir = tempfile::tempdir()?;
    /// let lock = rwdir::DirLock::new(dir.path())?;
    /// let w = lock.write_async().await?;
    /// // A reader waits behind the writer, without blocking the runtime ...
    /// let r = tokio::time::timeout(Duration::from_millis(50), lock.read_async()).await;
    /// assert!(r.is_err(), "timed out");
    /// drop(w);
    /// // ... and gets in once it has gone.
    /// let r = lock.read_async().await?;
    /// assert_eq!(lock.status()?.readers.len(), 1);
    /// drop(r);
    /// # Ok(())
    /// # }
    /// ```
    #[cfg(feature = "tokio")]
    pub async fn read_async(&self) -> Result<ReadGuard> {
        let sd = self.state_async()?;
        // Cooperative scheduling: see the crate docs, *Async (tokio)*. Cancel safe: no
        // file exists yet.
        tokio::task::consume_budget().await;
        if let Some(held) = share::join(&sd, &self.cfg)? {
            return Ok(joined(&sd, held, false));
        }
        // Cancel safe too: a dropped wait for a read on its way in counts itself off (and
        // out of the file, if it was counted in); a dropped read on its way in lands empty.
        let ticket = match share::board_async(&sd, &self.cfg).await? {
            share::Boarding::Joined(held) => return Ok(joined(&sd, held, false)),
            share::Boarding::Fly(ticket) => Some(ticket),
            share::Boarding::Alone => None,
        };
        let held = protocol::read_in(&sd, &self.cfg, Deadline::Never, protocol::Mode::Async)
            .await
            .map(|own| Held::new(sd, Arc::clone(&self.cfg), own));
        if let Some(ticket) = ticket {
            ticket.land(held.as_ref().ok());
        }
        Ok(ReadGuard::new(held?, false))
    }

    /// Takes the exclusive (write) lock, waiting on the tokio reactor as long as it
    /// takes: [`DirLock::write`] for async code (feature `tokio`). Writers are served
    /// first come, first served, whether they wait as tasks, as threads, or in other
    /// processes and hosts.
    ///
    /// Waits as [`DirLock::read_async`] does (see there: the reactor, timeouts,
    /// release, heartbeat, runtimes, and no [`Error::WouldDeadlock`] check).
    ///
    /// # Cancel safety
    ///
    /// This method is cancel safe: if the future is dropped before it completes (a
    /// timeout, the other branch of a `select!`, an aborted task), no lock is taken, and
    /// the files it made are removed as it is dropped: its queue file, and a
    /// `.master_lock` it had made while it waited for readers to leave (removed only
    /// while still its own). The next writer in the queue, or the readers it kept
    /// waiting, go on at once. The lock is never left held by nobody.
    ///
    /// # Errors
    ///
    /// As [`DirLock::read_async`], and [`Error::LockLost`] or
    /// [`Error::TokensExhausted`] as [`DirLock::write`].
    ///
    /// # Examples
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// use std::time::Duration;
    ///
    /// let dir = tempfile::tempdir()?;
    /// let lock = rwdir::DirLock::new(dir.path())?;
    /// let r = lock.read_async().await?;
    /// // The writer waits for the reader; given up after 50 ms, it leaves nothing behind.
    /// let w = tokio::time::timeout(Duration::from_millis(50), lock.write_async()).await;
    /// assert!(w.is_err(), "timed out");
    /// assert!(lock.status()?.pending.is_empty() && lock.status()?.writer.is_none());
    /// drop(r);
    /// let w = lock.write_async().await?;
    /// println!("fencing token {}", w.token()?);
    /// # Ok(())
    /// # }
    /// ```
    #[cfg(feature = "tokio")]
    pub async fn write_async(&self) -> Result<WriteGuard> {
        let sd = self.state_async()?;
        tokio::task::consume_budget().await;
        let (own, hint) =
            protocol::write_in(&sd, &self.cfg, Deadline::Never, protocol::Mode::Async).await?;
        Ok(WriteGuard::new(
            Held::new(sd, Arc::clone(&self.cfg), own),
            hint,
            false,
        ))
    }

    /// Takes a shared (read) lock, waiting as long as it takes.
    ///
    /// # Errors
    ///
    /// [`Error::Io`] and [`Error::NotADirectory`] for filesystem problems (each names
    /// the path); never `WouldBlock` or `TimedOut`.
    ///
    /// # Examples
    ///
    /// ```
    /// let dir = tempfile::tempdir()?;
    /// let lock = rwdir::DirLock::new(dir.path())?;
    /// let r = lock.read()?;
    /// r.release()?;
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn read(&self) -> Result<ReadGuard> {
        self.acquire_read(Deadline::Never)
    }

    /// Makes one attempt at a shared lock, without sleeping (stale files of dead holders
    /// are still recovered).
    ///
    /// # Errors
    ///
    /// [`Error::WouldBlock`], naming the holder in the way, if a writer holds or waits
    /// for the lock; otherwise as [`DirLock::read`].
    ///
    /// # Examples
    ///
    /// ```
    /// let dir = tempfile::tempdir()?;
    /// let lock = rwdir::DirLock::new(dir.path())?;
    /// let w = std::thread::scope(|s| s.spawn(|| lock.write()).join()).expect("thread")?; // another thread's
    /// let err = lock.try_read().unwrap_err();
    /// assert_eq!(err.kind(), std::io::ErrorKind::WouldBlock);
    /// # drop(w);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn try_read(&self) -> Result<ReadGuard> {
        self.acquire_read(Deadline::Once)
    }

    /// Takes a shared lock, waiting at most `timeout`. A timeout too large to represent
    /// waits for ever.
    ///
    /// # Errors
    ///
    /// [`Error::TimedOut`], naming the holder, when the time runs out; otherwise as
    /// [`DirLock::read`].
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// let dir = tempfile::tempdir()?;
    /// let lock = rwdir::DirLock::new(dir.path())?;
    /// let _r = lock.try_read_for(Duration::from_secs(1))?;
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn try_read_for(&self, timeout: Duration) -> Result<ReadGuard> {
        self.acquire_read(Deadline::after(timeout))
    }

    /// Takes a shared lock, waiting until `deadline` at the latest.
    ///
    /// # Errors
    ///
    /// As [`DirLock::try_read_for`].
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::{Duration, Instant};
    /// let dir = tempfile::tempdir()?;
    /// let lock = rwdir::DirLock::new(dir.path())?;
    /// let _r = lock.try_read_until(Instant::now() + Duration::from_secs(1))?;
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn try_read_until(&self, deadline: Instant) -> Result<ReadGuard> {
        self.acquire_read(Deadline::At(deadline))
    }

    /// Takes the exclusive (write) lock, waiting as long as it takes: first in line
    /// among writers, ahead of readers that arrive after it.
    ///
    /// # Errors
    ///
    /// [`Error::Io`] and [`Error::NotADirectory`] for filesystem problems,
    /// [`Error::LockLost`] if the grant was taken away while waiting for readers
    /// (possible only when a lease was misjudged across hosts).
    ///
    /// # Examples
    ///
    /// ```
    /// let dir = tempfile::tempdir()?;
    /// let lock = rwdir::DirLock::new(dir.path())?;
    /// let w = lock.write()?;
    /// let first = w.token()?;
    /// drop(w);
    /// assert!(lock.write()?.token()? > first);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn write(&self) -> Result<WriteGuard> {
        self.acquire_write(Deadline::Never)
    }

    /// Makes one attempt at the write lock, without sleeping.
    ///
    /// # Errors
    ///
    /// [`Error::WouldBlock`], naming the holder in the way; otherwise as
    /// [`DirLock::write`].
    ///
    /// # Examples
    ///
    /// ```
    /// let dir = tempfile::tempdir()?;
    /// let lock = rwdir::DirLock::new(dir.path())?;
    /// let r = std::thread::scope(|s| s.spawn(|| lock.read()).join()).expect("thread")?; // another thread's
    /// assert_eq!(lock.try_write().unwrap_err().kind(), std::io::ErrorKind::WouldBlock);
    /// drop(r);
    /// assert!(lock.try_write().is_ok());
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn try_write(&self) -> Result<WriteGuard> {
        self.acquire_write(Deadline::Once)
    }

    /// Takes the write lock, waiting at most `timeout`.
    ///
    /// # Errors
    ///
    /// [`Error::TimedOut`], naming the holder; otherwise as [`DirLock::write`].
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// let dir = tempfile::tempdir()?;
    /// let lock = rwdir::DirLock::new(dir.path())?;
    /// let _r = std::thread::scope(|s| s.spawn(|| lock.read()).join()).expect("thread")?; // another thread's
    /// let err = lock.try_write_for(Duration::from_millis(50)).unwrap_err();
    /// assert_eq!(err.kind(), std::io::ErrorKind::TimedOut);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn try_write_for(&self, timeout: Duration) -> Result<WriteGuard> {
        self.acquire_write(Deadline::after(timeout))
    }

    /// Takes the write lock, waiting until `deadline` at the latest.
    ///
    /// # Errors
    ///
    /// As [`DirLock::try_write_for`].
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::{Duration, Instant};
    /// let dir = tempfile::tempdir()?;
    /// let lock = rwdir::DirLock::new(dir.path())?;
    /// let _w = lock.try_write_until(Instant::now() + Duration::from_secs(1))?;
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn try_write_until(&self, deadline: Instant) -> Result<WriteGuard> {
        self.acquire_write(Deadline::At(deadline))
    }

    /// Who holds and who waits, with a liveness verdict for each. Only reads; does not
    /// create the state directory.
    ///
    /// # Errors
    ///
    /// [`Error::Io`] if the state directory cannot be listed or a lock file cannot be
    /// inspected, [`Error::NotADirectory`] if `.rwdir` is not a real directory.
    ///
    /// # Examples
    ///
    /// ```
    /// let dir = tempfile::tempdir()?;
    /// let lock = rwdir::DirLock::new(dir.path())?;
    /// let _r = lock.read()?;
    /// let st = lock.status()?;
    /// assert_eq!(st.readers.len(), 1);
    /// assert_eq!(st.readers[0].liveness, rwdir::Liveness::Alive);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn status(&self) -> Result<Status> {
        let sd = protocol::open_state(&self.cfg, false)?;
        status::status(sd.as_ref(), &self.cfg)
    }

    /// Removes the lock files of dead holders (same host: process gone or pid reused;
    /// otherwise: lease expired) and returns what it removed. Never removes a live
    /// holder's file, a token file, or a file that is not a lock file.
    ///
    /// # Errors
    ///
    /// As [`DirLock::status`], and [`Error::Io`] if a file cannot be removed (for
    /// example, for lack of permission).
    ///
    /// # Examples
    ///
    /// ```
    /// let dir = tempfile::tempdir()?;
    /// let lock = rwdir::DirLock::new(dir.path())?;
    /// let _r = lock.read()?;
    /// assert!(lock.cleanup()?.is_empty()); // our own reader is alive
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn cleanup(&self) -> Result<Vec<Entry>> {
        self.cleanup_with(false, false)
    }

    /// What [`DirLock::cleanup`] would remove now, without removing anything.
    ///
    /// # Errors
    ///
    /// As [`DirLock::status`].
    ///
    /// # Examples
    ///
    /// ```
    /// let dir = tempfile::tempdir()?;
    /// let lock = rwdir::DirLock::new(dir.path())?;
    /// let _r = lock.read()?;
    /// assert!(lock.cleanup_plan()?.is_empty()); // our own reader is alive
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn cleanup_plan(&self) -> Result<Vec<Entry>> {
        self.cleanup_with(false, true)
    }

    /// What [`DirLock::cleanup_all`] would remove now, without removing anything.
    ///
    /// # Errors
    ///
    /// As [`DirLock::status`].
    ///
    /// # Examples
    ///
    /// ```
    /// let dir = tempfile::tempdir()?;
    /// let lock = rwdir::DirLock::new(dir.path())?;
    /// let _r = lock.read()?;
    /// assert_eq!(lock.cleanup_all_plan()?.len(), 1); // live or not
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn cleanup_all_plan(&self) -> Result<Vec<Entry>> {
        self.cleanup_with(true, true)
    }

    /// Removes **every** lock file, live or dead, keeping only the highest fencing token
    /// so that tokens keep growing. For a pre-startup job, when no process uses the lock.
    ///
    /// # Errors
    ///
    /// As [`DirLock::cleanup`]. An entry that cannot be removed (a non-empty directory at
    /// a lock name, another user's file in a sticky directory) does not stop the others
    /// from being removed; the first such failure is returned at the end.
    ///
    /// # Examples
    ///
    /// ```
    /// let dir = tempfile::tempdir()?;
    /// let lock = rwdir::DirLock::new(dir.path())?;
    /// std::mem::forget(lock.write()?); // a leaked guard: its file stays
    /// assert_eq!(lock.cleanup_all()?.len(), 1);
    /// assert!(lock.status()?.is_free());
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn cleanup_all(&self) -> Result<Vec<Entry>> {
        self.cleanup_with(true, false)
    }

    fn cleanup_with(&self, all: bool, dry_run: bool) -> Result<Vec<Entry>> {
        let Some(sd) = protocol::open_state(&self.cfg, false)? else {
            return Ok(Vec::new());
        };
        if all {
            protocol::cleanup_all(&sd, &self.cfg, dry_run)
        } else {
            protocol::cleanup(&sd, &self.cfg, dry_run)
        }
    }
}

/// [`Error::UnsafeFilesystem`] if `path` is on a filesystem where lock files cannot
/// work. A path that cannot be opened is left to the acquisition to report.
fn refuse_unsafe(path: &Path) -> Result<()> {
    // Only FUSE mounts can be object stores: elsewhere `statfs` settles it, and
    // /proc/self/mountinfo (tens of microseconds on every `build`) is not read.
    let Ok(fd) = nix::fcntl::open(
        path,
        nix::fcntl::OFlag::O_PATH | nix::fcntl::OFlag::O_CLOEXEC,
        nix::sys::stat::Mode::empty(),
    ) else {
        return Ok(());
    };
    let magic = crate::sys::fs_facts(&fd, false).magic;
    if magic.is_some_and(|m| !Filesystem::classify(Some(m), None, None).needs_mount_table()) {
        return Ok(());
    }
    let fs = Filesystem::from_facts(&crate::sys::fs_facts(&fd, true));
    match fs.refused() {
        Some(reason) => Err(Error::UnsafeFilesystem {
            path: path.to_path_buf(),
            filesystem: fs.name(),
            fstype: fs.fstype().to_string(),
            reason,
        }),
        None => Ok(()),
    }
}

fn open(cfg: &Config) -> Result<StateDir> {
    match protocol::open_state(cfg, true)? {
        Some(sd) => Ok(sd),
        None => Err(Error::Io {
            action: "create state directory",
            path: cfg.dir.join(crate::fsops::STATE_DIR_NAME),
            source: std::io::ErrorKind::NotFound.into(),
        }),
    }
}

/// Removes the lock files of dead holders in `dir` with default options; see
/// [`DirLock::cleanup`].
///
/// # Errors
///
/// As [`DirLock::cleanup`].
///
/// # Examples
///
/// ```
/// let dir = tempfile::tempdir()?;
/// assert!(rwdir::cleanup(dir.path())?.is_empty());
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn cleanup(dir: impl AsRef<Path>) -> Result<Vec<Entry>> {
    DirLock::new(dir)?.cleanup()
}

/// Removes every lock file in `dir`, keeping the highest token; see
/// [`DirLock::cleanup_all`].
///
/// # Errors
///
/// As [`DirLock::cleanup`].
///
/// # Examples
///
/// ```
/// let dir = tempfile::tempdir()?;
/// assert!(rwdir::cleanup_all(dir.path())?.is_empty());
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn cleanup_all(dir: impl AsRef<Path>) -> Result<Vec<Entry>> {
    DirLock::new(dir)?.cleanup_all()
}

/// A read that joined the reader's file `held` of another read of this process (V11):
/// reads of this process overlap, so the handles of both let their kept files go and
/// make a file per read for a while (docs/protocol.md §2.1.1).
fn joined(sd: &StateDir, held: Arc<crate::guard::Held>, by_thread: bool) -> ReadGuard {
    sd.note_crowd();
    held.note_crowd();
    ReadGuard::joined(held, by_thread)
}
