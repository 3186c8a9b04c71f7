//! Crash-safe reader-writer locks on a directory, shared by many processes and many
//! hosts, built only from lock files.
//!
//! ```
//! let dir = tempfile::tempdir()?;
//! let lock = rwdir::DirLock::new(dir.path())?;
//! {
//!     let _r1 = lock.read()?;
//!     let _r2 = lock.try_read()?; // readers share
//!     // A writer (here in another thread) waits for them.
//!     std::thread::scope(|s| assert!(s.spawn(|| lock.try_write()).join().is_ok_and(|w| w.is_err())));
//! }
//! let w = lock.write()?;
//! assert!(w.token()? >= 1); // the fencing token of this grant, made when asked for
//! w.release()?;
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! # Guarantees
//!
//! - **Exclusion.** At most one writer holds the lock, and never while a reader does.
//!   Readers share it. This holds between threads, processes, and (see *Network
//!   filesystems*) hosts.
//! - **Writer priority.** Once a writer waits, readers that arrive after it wait behind
//!   it; a reader never overtakes a waiting writer.
//! - **First come, first served** among writers, by the time they queued.
//! - **No wedged directory.** A holder that dies, even by `SIGKILL`, is recognised as
//!   dead and its files are removed by the next contender, with no cleanup step: at once
//!   on the same host (exact check by pid and process start time), after the lease for a
//!   holder on another host or in another pid namespace.
//! - **Undo.** A timed-out or `try_*` acquisition removes exactly the files it created.
//! - **Fencing.** A write grant gives a token when asked ([`WriteGuard::token`]) that is
//!   unique and grows, even if a misjudged lease ever lets two writers in.
//!
//! # Protocol
//!
//! All state lives in `DIR/.rwdir/` (made on first use). A writer queues as
//! `.pending_lock-<uuid>-<ns>`, waits until it is the oldest live queued writer and no
//! `.master_lock` exists, creates `.master_lock` exclusively, leaves the queue, and waits
//! for the readers' `.slave_lock-<uuid>` files to drain; a fencing token `.token-<n>` is
//! made if the holder asks for one. A reader waits until there is neither a writer nor a queued writer, announces
//! itself with `.slave_lock-<uuid>`, and then looks again: if a writer appeared meanwhile
//! it withdraws and waits.
//!
//! ```text
//!  reader R                     .rwdir/                       writer W
//!  --------                     -------                       --------
//!                                  <- put .pending_lock-u-ns   W1 queue
//!  R1 list: pending -> wait        |
//!                                  <- put .master_lock (EXCL)  W2 oldest, no master
//!                                  <- unlink .pending_lock     W3
//!                                  list: no .slave_lock        W5 drain -> ENTER
//!                                  <- put .token-n             W4, when the holder asks
//!                                  <- unlink .master_lock      W8 release
//!  R1 list: free                   |
//!  R2 put .slave_lock-u ->         |
//!  R3 list: no master, no pending  |  -> ENTER
//!  R5 unlink .slave_lock-u ->      |
//! ```
//!
//! Every file is created whole (written under a temporary name, or as an anonymous
//! `O_TMPFILE`, then `link`ed to its name, which never replaces anything) and carries a
//! holder record: host, boot id, pid namespace, pid, process start time, process group,
//! a nonce, creation time and lease, closed by a checksum line. The protocol was
//! model-checked with Spin, including crashes at every step, non-atomic directory
//! listings and timeouts.
//!
//! A waiting acquisition sleeps, it never spins. On a local filesystem it is woken by
//! inotify when a lock file it waits for is removed, and only then: a queued writer
//! watches just the writer ahead of it in the queue (or `.master_lock` once it is
//! first), on the thread's own inotify instance; a reader, and a writer waiting for
//! readers, share one watch of the directory per process and state directory, read by
//! a waiting thread itself (no thread of its own), which passes each removal only to the
//! waiters it concerns. Polling with jittered exponential back-off between
//! [`Builder::poll_interval`]'s bounds stays the floor, for changes made on other hosts. Every wake-up re-runs the protocol's checks, with one
//! shortcut: when `.master_lock` alone stood in the way and the wake-up names its
//! removal, a reader announces itself at once (its decisive listing still follows), and
//! the first queued writer creates `.master_lock` at once (exclusively, as always). The
//! files a wake-up creates were made, with their records, while the waiter slept, so a
//! hand-off only gives them their names.
//!
//! # Stale locks and leases
//!
//! A holder on the same host (same boot id and pid namespace) is dead exactly when its
//! pid is gone or belongs to a process with another start time; a process group named in
//! the record keeps it alive while any member lives. Any other holder (another host,
//! a container) is dead when its file's mtime is older than its lease. Every file an
//! acquisition creates is renewed every lease/3 from its creation until its removal:
//! while the acquisition waits, by the waiting thread itself (a queued writer's file, a
//! writer's `.master_lock` while readers drain, renewed once more at the grant); while
//! the lock is held, by a background thread (or, with
//! [`Builder::background_heartbeat(false)`](Builder::background_heartbeat), by calling
//! [`ReadGuard::refresh`] or [`WriteGuard::refresh`]). So a process that keeps running is
//! never judged dead by lease, however long it waits or holds. A malformed file counts as
//! held until it is older than the lease. `.master_lock`, the one reused name, is only ever
//! removed by a breaker that first made itself the only breaker.
//!
//! # Network filesystems
//!
//! On NFS, CIFS and FUSE filesystems (detected with `statfs`; [`Filesystem`] names the
//! filesystem from its mount's type, FUSE subtypes included), ownership is decided by
//! the nonce read back through `open`, never by link counts or inode numbers, and a
//! lost `link` race reported as `EPERM` is resolved the same way. Judging a holder on
//! another host can only be a lease: a holder paused for longer than its lease (SIGSTOP,
//! a VM pause) loses the lock while believing it holds it. It never removes a
//! `.master_lock` that is no longer its own; a writer that was waiting re-checks its
//! `.master_lock` before it enters and reports [`Error::LockLost`] instead; a holder's
//! heartbeat notices the loss ([`WriteGuard::is_lost`], [`WriteGuard::check`]). Until it
//! runs again, two writers may work at once: only the fencing token protects a resource
//! that rejects stale tokens. A holder whose filesystem stops answering (a client cut off
//! from its server can block calls with no timeout) is told by a watchdog instead: once
//! no renewal has completed for lease − lease/6, [`WriteGuard::is_lost`] says so without
//! a system call, and [`WriteGuard::check`] and [`WriteGuard::refresh`] report
//! [`Error::LockLost`] before making one.
//!
//! Object-store FUSE mounts (s3fs, gcsfuse, goofys, mountpoint-s3, rclone, blobfuse),
//! where exclusive creation is not exclusive, are refused with
//! [`Error::UnsafeFilesystem`] unless [`Builder::allow_unsafe_filesystem`] allows them
//! ([`Filesystem::refused`] says why). The command's `rwdir doctor DIR` checks a mount
//! for what the protocol relies on, and with `--peer-dir` races two mounts and measures
//! how stale one client's view of the other's changes is, and the lease that calls for.
//!
//! # Async (tokio)
//!
//! With the `tokio` feature, [`DirLock::read_async`][read_async] and
//! [`DirLock::write_async`][write_async] take the lock from a task without blocking its
//! thread: the same protocol, guarantees and guards as [`DirLock::read`] and
//! [`DirLock::write`], with the wait driven by the runtime. The process's inotify watch
//! of the state directory is registered with the reactor by whichever task leads it,
//! other waiting tasks leave a waker, and the polling floor is a `tokio::time` sleep: no
//! thread is parked per waiting task. They need a runtime with its I/O and time drivers
//! (`#[tokio::main]`, or a `Builder` with `enable_all`), current-thread or multi-thread.
//!
//! - **Timeouts and cancellation.** Bound a wait with `tokio::time::timeout` (or a
//!   `select!`). The futures are cancel safe: a wait that is dropped leaves nothing in
//!   `DIR/.rwdir/`, and a writer that gives up lets the readers queued behind it go on
//!   at once.
//! - **Guards** are the same [`ReadGuard`] and [`WriteGuard`]: `Send`, held across
//!   `.await`s like any value, released by drop or `release()` (an `unlink` or two, no wait),
//!   kept fresh by the process's heartbeat thread whatever the runtime is doing.
//! - **Tasks are not threads**: there is no [`Error::WouldDeadlock`] check. A task whose
//!   request conflicts with a guard it holds itself waits until that guard is released,
//!   as with `tokio::sync::RwLock`.
//! - **Yielding.** Each acquisition spends one unit of the task's cooperative budget
//!   (`tokio::task::consume_budget`), as tokio's own resources do: a task that takes and
//!   releases the lock in a loop with nothing else to await yields now and then, and
//!   the other tasks of its thread get their turn.
//! - **Cost.** A hand-off to a waiting task is as quick as to a blocking waiter. A
//!   waiting task watches the one file it waits for (on one inotify instance per
//!   process, shared by its tasks) and its holder's exit (a pidfd on the reactor), and
//!   sleeps without looking while neither changes; 8 contending writer processes get
//!   as many grants per second through tasks as through the blocking API (0.91–1.17× in two
//!   runs). BENCHMARKS.md, *The async API*.
//!
#![cfg_attr(feature = "tokio", doc = "```")]
#![cfg_attr(not(feature = "tokio"), doc = "```ignore")]
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
//! use std::sync::Arc;
//! use std::time::Duration;
//!
//! let dir = tempfile::tempdir()?;
//! let lock = Arc::new(rwdir::DirLock::new(dir.path())?);
//! std::fs::write(dir.path().join("version"), "1")?;
//!
//! // A restore takes the write lock ...
//! let restore = lock.write_async().await?;
//! // ... and readers wait behind it, each in a task, none blocking the runtime.
//! let readers: Vec<_> = (0..3)
//!     .map(|_| {
//!         let lock = Arc::clone(&lock);
//!         tokio::spawn(async move {
//!             let r = lock.read_async().await?;
//!             let seen = std::fs::read_to_string(lock.path().join("version"))?;
//!             r.release()?;
//!             Ok::<_, Box<dyn std::error::Error + Send + Sync>>(seen)
//!         })
//!     })
//!     .collect();
//! tokio::time::sleep(Duration::from_millis(20)).await; // the readers are waiting
//! std::fs::write(dir.path().join("version"), "2")?;
//! restore.release()?;
//! for r in readers {
//!     assert_eq!(r.await??, "2"); // never the directory half restored
//! }
//!
//! // A wait given up by a timeout leaves nothing behind.
//! let r = lock.read_async().await?;
//! let w = tokio::time::timeout(Duration::from_millis(50), lock.write_async()).await;
//! assert!(w.is_err(), "timed out");
//! let status = lock.status()?;
//! assert!(status.writer.is_none() && status.pending.is_empty());
//! drop(r);
//! # Ok(())
//! # }
//! ```
//!
//! The repository's `examples/async_restore.rs` is a whole program: 100 reader tasks
//! serve a directory while a task restores it, with a timeout that gives up a write
//! (`cargo run --release --features tokio --example async_restore`).
//!
#![cfg_attr(
    feature = "tokio",
    doc = "[read_async]: DirLock::read_async",
    doc = "[write_async]: DirLock::write_async"
)]
// Without the feature the methods do not exist: the links go to `DirLock`.
#![cfg_attr(
    not(feature = "tokio"),
    doc = "[read_async]: DirLock",
    doc = "[write_async]: DirLock"
)]
//!
//! # Stability
//!
//! Covered by semantic versioning: every item in these docs: [`DirLock`] and its
//! [`Builder`], the guards, [`Status`], [`Entry`], [`Holder`] and [`Kind`] as values,
//! [`Liveness`], [`Error`] with [`Refused`] and [`Owner`], [`Cancel`], and the meaning of
//! the lock files in `DIR/.rwdir/` (their names, and what one process may rely on from
//! another of a different rwdir version: the names, exclusive creation, and that a
//! file's mtime is its owner's heartbeat). The enums and structs marked
//! `#[non_exhaustive]` may gain variants or fields in a minor release.
//!
//! Not covered: items hidden from these docs (the on-disk record format behind
//! `Holder::format` and `Holder::parse`, `Entry::regular`, and what the `fuzzing`
//! feature adds: the `internals` module and `Default` for `Holder` and `Kind`), which
//! exist for rwdir's own tests and fuzz targets; the wording of error messages; timings.
//!
//! # Pitfalls
//!
//! - The lock is **advisory**: it excludes only processes that take it. Anyone with
//!   write access to `DIR/.rwdir/` can remove lock files.
//! - A guard dropped early releases early: `let _ = lock.write()?;` releases at once
//!   (the guards are `#[must_use]`); bind it to a named variable.
//! - After `fork`, the child does not own the parent's guards: releasing or dropping
//!   them in the child does nothing, and the parent still holds the lock. A child may
//!   take locks of its own, but, as with any library that keeps locks in memory, not if
//!   it was forked while another thread of the parent was inside the library: the child
//!   could find one of those in-memory locks held for ever and block. Fork from a thread
//!   that is alone in the library (or `exec` in the child), as the standard library's
//!   `Command` does.
//! - Threads of one process take the lock like separate processes: a thread waits for
//!   another thread's guard as for another process's. See *Threads* for what one
//!   thread may hold at once, and how reads of one process share one reader's file.
//!
//! # Threads
//!
//! A thread's own guards are the one thing it cannot wait for: a request that could only
//! be granted once the calling thread released a guard it holds fails at once with
//! [`Error::WouldDeadlock`], naming that guard, instead of waiting for ever. The check
//! covers every [`DirLock`] on the same state directory, whatever path or handle reached
//! it, and creates nothing.
//!
//! - Allowed in one thread: several read guards, taken while no writer waits; a
//!   [`WriteGuard::downgrade`]; guards on different directories.
//! - Refused with `WouldDeadlock`: a write while the thread holds any guard on the
//!   directory; a read while it holds the write guard; another read while a writer waits
//!   (that writer waits for the read guard this thread holds, and readers wait
//!   behind a waiting writer). `try_*` calls are refused the same way, rather than
//!   reporting the lock busy or waiting out their timeout.
//! - Guards of other threads of this process never cause it: the request waits, exactly
//!   as if another process held them.
//! - A guard counts as the calling thread's if this thread took it (or downgraded it),
//!   until it is released or dropped, even after it was moved to another thread: a move
//!   cannot be observed. So a thread that hands its guard to another thread and then asks
//!   for a conflicting lock gets `WouldDeadlock` instead of waiting for the other thread
//!   to release it; and the thread that received a guard is not protected: if it asks for
//!   a conflicting lock while it still holds that guard, it waits for ever. Take a lock in
//!   the thread that will hold it where you can. A guard found lost (its file removed, by
//!   `cleanup --all` say) no longer counts; a leaked guard (`std::mem::forget`) counts
//!   while its file is there.
//!
//! Reads of one process share one reader's file by default
//! ([`Builder::share_readers`]): a read while another read guard of the process holds
//! the lock joins that guard's file (it counts itself in, lists the state directory, and
//! enters if no writer holds or waits) instead of creating, listing twice and removing a
//! file of its own; a read that finds none held while another read of the process is on
//! its way in waits for that one and joins its file. Many threads (or tasks, through
//! `DirLock::read_async`) reading at once then cost little more than one; a waiting
//! writer still stops every new read at once, and the last guard out removes the file. Each guard is still its taker's for the rules above. [`DirLock::status`]
//! shows one reader for the process.

#![warn(missing_docs, unreachable_pub)]

mod config;
mod entry;
mod error;
mod filesystem;
mod fsops;
mod guard;
mod holder;
mod judge;
mod liveness;
mod lock;
mod names;
mod notify;
mod owned;
mod protocol;
mod status;
mod sys;
mod wait;

pub use config::EVENT_BACKSTOP;
pub use entry::Entry;
pub use error::{Error, Owner, Refused, Result};
pub use filesystem::{Filesystem, FsKind};
pub use guard::{ReadGuard, WriteGuard};
pub use holder::{Holder, Kind};
pub use liveness::Liveness;
pub use lock::{
    Builder, Cancel, DEFAULT_LEASE, DEFAULT_MAX_POLL, DEFAULT_MIN_POLL, DirLock, cleanup,
    cleanup_all,
};
pub use status::Status;

/// Crate-private items that the fuzz harness (`fuzz/`, and `tests/fuzz_regressions.rs`,
/// which compiles it) checks directly, with the non-default `fuzzing` feature. Only
/// re-exports; hidden, no stability promise.
#[cfg(feature = "fuzzing")]
#[doc(hidden)]
pub mod internals {
    pub use crate::fsops::Listing;
    pub use crate::holder::{MAX_RECORD, sanitize};
    pub use crate::names::LockName;
}

#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;
