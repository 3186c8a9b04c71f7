//! Owned guards, release, downgrade, and the heartbeat that keeps a held lock file fresh
//! and notices when it is lost (docs/protocol.md §3.3, §3.8).

use std::os::fd::OwnedFd;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock, Weak};
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, RecvTimeoutError, Sender};
use nix::errno::Errno;
use parking_lot::Mutex;
use uuid::Uuid;

use crate::config::Config;
use crate::error::{Error, Result};
use crate::fsops::{Kept, StateDir};
use crate::holder::Kind;
use crate::names::LockName;
use crate::owned;
use crate::protocol::{self, Own};
use crate::sys::FileId;

/// A lock file this process holds.
#[derive(Debug)]
pub(crate) struct Held {
    sd: Arc<StateDir>,
    cfg: Arc<Config>,
    name: LockName,
    nonce: Uuid,
    /// Our descriptor on the file: heartbeat and ownership checks. Closed on release,
    /// before the unlink (NFS would otherwise leave a `.nfsXXXX` file behind).
    fd: Mutex<Option<OwnedFd>>,
    /// `(st_dev, st_ino)` of our file, if known without asking (made from a spare).
    id: Option<FileId>,
    /// A reader's file: the length of its record, and whether it is the handle's kept
    /// file ([`StateDir::release_reader`]).
    kept: Kept,
    /// Descriptors closed at the release, after the removal: those of the token files
    /// [`Held::grant_token`] made by `put` (a local filesystem only).
    spent: Mutex<Vec<OwnedFd>>,
    /// A writer's pending file ([`Own::queue`], V8): beaten with `.master_lock` and
    /// removed after it, on every way out.
    queue: Mutex<Option<(LockName, OwnedFd)>>,
    /// The process that created the file; a forked child never releases it.
    owner_pid: u32,
    /// How many guards hold the file, with the reads that are joining it (V11,
    /// [`share`]): 1 at the grant. The guard that brings it to 0 releases the file; once
    /// 0, nobody joins any more. An atomic, not a lock: a forked child's copy of a guard
    /// counts itself out without a lock another thread of the parent may have held at
    /// the fork.
    sharers: AtomicUsize,
    /// Whether [`share::offer`] listed the file for joins (withdrawn at the release).
    offered: AtomicBool,
    /// Set once the file is found gone or replaced, or the watchdog ran out (read by
    /// `mark`'s record too). Never cleared: the heartbeat stops renewing a lost file.
    lost: AtomicBool,
    /// Why it was lost, if the loss has a reason of its own (the watchdog's, or the
    /// error a heartbeat got).
    why: OnceLock<String>,
    /// The watchdog: when the last completed, successful renewal of the file started, on
    /// [`clock`] (the grant counts as one). See [`Held::watchdog`].
    renewed: AtomicU64,
    /// How long the file may go without a completed renewal before it counts as lost:
    /// `lease − lease/6` on a shared filesystem, `None` (no watchdog) on a local one.
    watchdog: Option<Duration>,
    released: AtomicBool,
}

/// Now, in nanoseconds of `CLOCK_BOOTTIME`: monotonic, and counting the time the machine
/// was suspended too (a suspended holder's file ages on the other hosts). Read through
/// the vDSO: no filesystem, never blocks. `CLOCK_MONOTONIC` where it is missing.
fn clock() -> u64 {
    use nix::time::{ClockId, clock_gettime};
    let ts =
        clock_gettime(ClockId::CLOCK_BOOTTIME).or_else(|_| clock_gettime(ClockId::CLOCK_MONOTONIC));
    ts.map_or(0, |ts| {
        let secs = u64::try_from(ts.tv_sec()).unwrap_or(0);
        let nanos = u64::try_from(ts.tv_nsec()).unwrap_or(0);
        secs.saturating_mul(1_000_000_000).saturating_add(nanos)
    })
}

/// [`clock`] at the [`Instant`] `at` (in the past).
fn clock_at(at: Instant) -> u64 {
    let ago = u64::try_from(at.elapsed().as_nanos()).unwrap_or(u64::MAX);
    clock().saturating_sub(ago)
}

impl Held {
    /// A held lock file, held by one guard.
    pub(crate) fn new(sd: Arc<StateDir>, cfg: Arc<Config>, own: Own) -> Arc<Held> {
        // The grant is the first renewal: `touched` is when the last touch of the file
        // (at the grant for a writer, at its creation or while waiting for a reader)
        // started.
        let renewed = AtomicU64::new(clock_at(*own.touched.lock()));
        let watchdog = sd.is_remote().then(|| Held::watchdog(cfg.lease));
        let held = Arc::new(Held {
            sd,
            cfg,
            name: own.name,
            nonce: own.nonce,
            id: own.created.id,
            kept: own.created.kept,
            spent: Mutex::new(Vec::new()),
            queue: Mutex::new(own.queue),
            fd: Mutex::new(Some(own.created.fd)),
            owner_pid: own.pid,
            sharers: AtomicUsize::new(1),
            offered: AtomicBool::new(false),
            lost: AtomicBool::new(false),
            why: OnceLock::new(),
            renewed,
            watchdog,
            released: AtomicBool::new(false),
        });
        if held.cfg.heartbeat {
            heartbeat::register(&held);
        }
        held
    }

    fn path(&self) -> std::path::PathBuf {
        self.sd.path_of(&self.name)
    }

    fn kind(&self) -> Kind {
        match self.name {
            LockName::Master => Kind::Write,
            _ => Kind::Read,
        }
    }

    /// Records the file as held by the calling thread too (the self-deadlock check,
    /// `crate::owned`): each guard taken by a thread carries its own mark.
    fn mark(self: &Arc<Self>) -> owned::Mark {
        let guard: std::sync::Weak<Held> = Arc::downgrade(self);
        owned::Mark::new(&self.sd, self.kind(), self.name, guard, self.owner_pid)
    }

    /// Tells this file's handle that reads of this process overlap (see
    /// [`StateDir::note_crowd`]).
    pub(crate) fn note_crowd(&self) {
        self.sd.note_crowd();
    }

    /// Counts one more guard (or joining read) in, unless the file is already being
    /// released, released, or lost.
    fn join(&self) -> bool {
        if self.released.load(Ordering::Acquire) || self.is_lost() {
            return false;
        }
        self.sharers
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                (n > 0).then_some(n + 1)
            })
            .is_ok()
    }

    /// Counts `n` reads in at once, on their behalf: those that waited for this file's
    /// read to come in ([`share::board`]). Only while the file is held by that read.
    fn count_in(&self, n: usize) {
        self.sharers.fetch_add(n, Ordering::AcqRel);
    }

    /// Counts one guard (or joining read) out: whether it was the last, which must then
    /// release the file.
    fn leave(&self) -> bool {
        self.sharers
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| n.checked_sub(1))
            == Ok(1)
    }

    /// How long a lock file of `lease` may go without a completed renewal before it
    /// counts as lost: `lease − lease/6`, half a heartbeat period (lease/3) before the
    /// lease runs out.
    ///
    /// Another host judges the file dead once its own clock is more than `lease` past the
    /// file's mtime (docs/protocol.md §2.2), and that mtime was set during the renewal
    /// whose start the watchdog records: so no judge can find the file dead sooner than
    /// `lease` after that start, less the mtime's resolution (1 s on sshfs and some NFS
    /// servers) and the clock skew between the hosts. The lease/6 margin covers both
    /// (with the default 45 s lease: 7.5 s, so up to 6.5 s of skew), and leaves the
    /// holder's heartbeat, which renews every lease/3, one and a half periods of slack
    /// before a late beat counts as a loss (a healthy renewal takes milliseconds).
    ///
    /// Only on shared filesystems. On a local one, holders of this host and pid namespace
    /// are judged by pid, so a late renewal (`rwdir write` stopped with ^Z, a suspended
    /// laptop, a machine swapping) takes nothing from them, and calls do not block on a
    /// network: a holder in another pid namespace judges by lease, but a take-over it
    /// makes is found by the next beat, which runs as soon as the holder does.
    fn watchdog(lease: Duration) -> Duration {
        lease.saturating_sub(lease / 6)
    }

    /// Whether the lock counts as lost, now: found lost, or the watchdog ran out (which
    /// is then recorded, for good). Reads the clock only: no system call on the file.
    pub(crate) fn is_lost(&self) -> bool {
        if self.lost.load(Ordering::Acquire) {
            return true;
        }
        let Some(limit) = self.watchdog else {
            return false;
        };
        let age =
            Duration::from_nanos(clock().saturating_sub(self.renewed.load(Ordering::Acquire)));
        if age <= limit {
            return false;
        }
        let _ = self.why.set(format!(
            "no renewal of the lock file completed for {:.1} s (lease {} s): the filesystem \
             did not answer in time, or this process was paused; others may take the lock \
             over",
            age.as_secs_f64(),
            self.cfg.lease.as_secs_f64(),
        ));
        self.lost.store(true, Ordering::Release);
        true
    }

    /// V14 (docs/protocol-notes.md): the fencing token of this write grant, allocated now,
    /// from `hint` (the highest token of the acquisition's last listing): T1–T3, then
    /// [`Held::check`] (`.master_lock` is still ours: no grant came after ours), then
    /// T4. A lock found lost on the way (a later grant's token, or `.master_lock` not ours
    /// any more) is recorded as lost.
    pub(crate) fn grant_token(&self, hint: protocol::TokenHint) -> Result<u64> {
        if self.is_lost() {
            return Err(self.lost_before());
        }
        let mut spent = Vec::new();
        let token = protocol::grant_token(&self.sd, &self.cfg, hint, || self.check(), &mut spent);
        self.spent.lock().append(&mut spent);
        if let Err(Error::LockLost { reason, .. }) = &token {
            let _ = self.why.set(reason.clone());
            self.lost.store(true, Ordering::Release);
        }
        token
    }

    /// The error for a lock found lost earlier.
    fn lost_before(&self) -> Error {
        match self.why.get() {
            Some(why) => self.lost_error(why),
            None => self.lost_error("the heartbeat found the lock file gone or replaced"),
        }
    }

    /// Checks now that the file is still ours. A lock already lost (the watchdog
    /// included) is reported before any system call.
    pub(crate) fn check(&self) -> Result<()> {
        if self.is_lost() {
            return Err(self.lost_before());
        }
        let fd = self.fd.lock();
        let Some(fd) = fd.as_ref() else {
            return Err(self.lost_error("the lock was already released"));
        };
        match self.sd.still_ours(&self.name, fd, self.nonce) {
            // Whatever a call that blocked past the watchdog returns, the lock is lost.
            Ok(true) if self.is_lost() => Err(self.lost_before()),
            Ok(true) => Ok(()),
            Ok(false) => {
                self.lost.store(true, Ordering::Relaxed);
                Err(self.lost_error("the lock file was removed or replaced by someone else"))
            }
            Err(e) => {
                self.lost.store(true, Ordering::Relaxed);
                Err(Error::LockLost {
                    path: self.path(),
                    reason: e.to_string(),
                })
            }
        }
    }

    fn lost_error(&self, reason: &str) -> Error {
        Error::LockLost {
            path: self.path(),
            reason: reason.to_string(),
        }
    }

    /// Releases the file (R5 / W8). Idempotent; a no-op in a forked child.
    pub(crate) fn release(&self) -> Result<()> {
        // `released` first: a guard's drop calls this again after an explicit release.
        // The pid check then keeps a forked child off the parent's file (`sys::pid`).
        if self.released.load(Ordering::Acquire)
            || crate::sys::pid() != self.owner_pid
            || self.released.swap(true, Ordering::AcqRel)
        {
            return Ok(());
        }
        if self.offered.swap(false, Ordering::AcqRel) {
            share::withdrawn();
        }
        // V8: our queue file goes after `.master_lock`, whatever became of that: its name
        // is unique, so if it is there, it is ours. Closed before the unlink on a remote
        // filesystem (no `.nfsXXXX`), after it locally (the waiter behind wakes sooner).
        // Locally it goes right after `.master_lock`'s `unlink`, before the checks and
        // `close`s of the release ([`StateDir::release_local`]); otherwise after them.
        let queue = self.queue.lock().take();
        let leave = |queue: Option<(LockName, OwnedFd)>| match queue {
            None => Ok(()),
            Some((name, fd)) => {
                if self.sd.is_remote() {
                    drop(fd);
                    self.sd.unlink(&name).map(drop)
                } else {
                    let r = self.sd.unlink(&name).map(drop);
                    drop(fd);
                    r
                }
            }
        };
        let mut queue = Some(queue);
        let mut left = Ok(());
        let done = self.release_file(|| left = leave(queue.take().flatten()));
        if let Some(q) = queue {
            left = leave(q);
        }
        // Now that the files are gone and the next owner woken: the directory's watch
        // this thread's last wait for `.master_lock` left.
        crate::notify::let_go_lingering();
        done.and(left)
    }

    /// R5 / W8 proper: removes the lock file itself. `then` runs right after a local
    /// `unlink` of `.master_lock` (see [`StateDir::release_local`]), if it comes to one.
    fn release_file(&self, then: impl FnOnce()) -> Result<()> {
        if !self.is_lost() {
            let fd = self.fd.lock().take();
            if let Some(fd) = fd {
                if matches!(self.name, LockName::Slave { .. }) && !self.sd.is_remote() {
                    // R5: a reader's name is unique: if it is there, it is ours.
                    let removed = self.sd.release_reader(&self.name, fd, self.id, self.kept)?;
                    return if removed {
                        Ok(())
                    } else {
                        Err(self.lost_error("the lock file was removed by someone else"))
                    };
                }
                if let Some(released) = self.sd.release_local(&self.name, &fd, self.id, then) {
                    // The descriptors are closed after the removal: that wakes waiters
                    // sooner.
                    drop(fd);
                    drop(std::mem::take(&mut *self.spent.lock()));
                    return match released? {
                        true => Ok(()),
                        false => Err(self
                            .lost_error("the lock file was removed or replaced by someone else")),
                    };
                }
                *self.fd.lock() = Some(fd);
            }
        }
        // Lost, by the watchdog or by a heartbeat that could not check the file (a file
        // this client could not reach for a while, ENOTCONN): the file may well still be
        // ours, and left behind it would hold up this host's waiters for as long as this
        // process lives. It is removed as at any release, and the loss still reported.
        let lost = self.is_lost();
        // W8: `.master_lock` is a reused name: remove it only if it is still ours. A
        // reader's name is unique (R5): if it is there, it is ours.
        let ours = match self.name {
            LockName::Master if lost => self.still_ours(),
            LockName::Master => self.check(),
            _ => Ok(()),
        };
        // Close our descriptor before the unlink (NFS: no `.nfsXXXX` left behind).
        drop(self.fd.lock().take());
        drop(std::mem::take(&mut *self.spent.lock()));
        ours?;
        let removed = self.sd.unlink(&self.name);
        if let Some(tmp) = self.kept.tmp {
            self.sd.let_go_kept(&tmp);
        }
        match removed? {
            _ if lost => Err(self.lost_before()),
            true => Ok(()),
            false => Err(self.lost_error("the lock file was removed by someone else")),
        }
    }

    /// Whether the file is still ours, asked of the filesystem whatever the watchdog
    /// says (the release of a lock the watchdog found lost).
    fn still_ours(&self) -> Result<()> {
        let fd = self.fd.lock();
        let Some(fd) = fd.as_ref() else {
            return Err(self.lost_error("the lock was already released"));
        };
        match self.sd.still_ours(&self.name, fd, self.nonce) {
            Ok(true) => Ok(()),
            Ok(false) => {
                Err(self.lost_error("the lock file was removed or replaced by someone else"))
            }
            Err(e) => Err(Error::LockLost {
                path: self.path(),
                reason: e.to_string(),
            }),
        }
    }

    fn heartbeat(&self) {
        if self.released.load(Ordering::Relaxed) || self.is_lost() {
            return;
        }
        let guard = self.fd.lock();
        let Some(fd) = guard.as_ref() else { return };
        // V8: our queue file too, best effort (a lease judge that removes it takes
        // nothing from us: `.master_lock` is the gate).
        if let Some((_, q)) = self.queue.lock().as_ref() {
            let _ = StateDir::touch(q);
        }
        // The watchdog's renewal: the file's new mtime is set after this.
        let start = clock();
        let mut renewed = false;
        let ok = match self.sd.still_ours(&self.name, fd, self.nonce) {
            Ok(true) => {
                let touched = StateDir::touch(fd);
                // On a shared filesystem the renewal counts once the server has it: a
                // client that holds capabilities on the file (CephFS) sets the mtime in
                // its own cache and answers at once, also while cut off from its server.
                // `fsync` makes it send the change and wait for the answer; whatever it
                // returns, it returned (a filesystem without fsync answers too).
                let synced = match (&touched, self.watchdog) {
                    (Ok(()), Some(_)) => !matches!(
                        nix::unistd::fsync(fd),
                        Err(Errno::EIO | Errno::ENOTCONN | Errno::ESTALE)
                    ),
                    _ => true,
                };
                renewed = touched.is_ok() && synced;
                synced && !matches!(touched, Err(Errno::EIO | Errno::ENOTCONN | Errno::ESTALE))
                // And look again after the touch: a process stopped between the first
                // look and the touch (SIGSTOP, a VM pause) resumes right here, maybe long
                // after its lease, and would otherwise learn of a loss one period later
                // (measured on the netfs rig: 8.3 s after SIGCONT, with a 25 s lease).
                && matches!(self.sd.still_ours(&self.name, fd, self.nonce), Ok(true))
            }
            Ok(false) => false,
            // ENOENT of the directory, EIO, ENOTCONN: the filesystem went away, or this
            // client cannot reach the file for now.
            Err(e) => {
                let _ = self
                    .why
                    .set(format!("the heartbeat could not check the lock file: {e}"));
                false
            }
        };
        if !ok {
            self.lost.store(true, Ordering::Release);
        } else if renewed && !self.is_lost() {
            // Completed before the watchdog ran out (a beat that completes after it
            // renews nothing: the lock stays lost).
            self.renewed.fetch_max(start, Ordering::AcqRel);
        }
    }

    fn period(&self) -> Duration {
        self.cfg.refresh_period()
    }

    /// One heartbeat now, on the owner's thread (`refresh`): the thread's beat, and then
    /// the loss it may have found, reported as [`Held::check`] reports it.
    pub(crate) fn refresh(&self) -> Result<()> {
        self.heartbeat();
        if self.is_lost() || self.released.load(Ordering::Relaxed) {
            return self.check();
        }
        Ok(())
    }
}

impl Drop for Held {
    fn drop(&mut self) {
        let _ = self.release();
    }
}

impl owned::Lost for Held {
    fn found_lost(&self) -> bool {
        self.lost.load(Ordering::Relaxed)
    }
}

/// The methods both guards have, written once: each delegates to [`Held`]. Arguments:
/// the guard type, its file as the docs name it, the `DirLock` method that takes it, a
/// variable name for the examples, and the file as "someone removes ..." names it.
macro_rules! guard_methods {
    ($guard:ident, $file:literal, $take:literal, $v:literal, $removed:literal) => {
        impl $guard {
            #[doc = concat!(
                "Releases the lock, reporting any error (dropping the guard discards it).\n\n",
                "# Errors\n\n",
                "[`Error::LockLost`] if ", $file, " is no longer ours (removed or replaced ",
                "by someone else while held: a `cleanup --all`, or a lease judged elsewhere ",
                "while this process was paused; then nothing is removed), or if the ",
                "watchdog found the lock lost (see [`", stringify!($guard), "::is_lost`]; ",
                "the file is then removed if it is still ours), and [`Error::Io`] ",
                "if removing it failed.\n\n",
                "# Examples\n\n",
                "```\n",
                "let dir = tempfile::tempdir()?;\n",
                "let lock = rwdir::DirLock::new(dir.path())?;\n",
                "let ", $v, " = lock.", $take, "()?;\n",
                $v, ".release()?; // errors are reported, not swallowed as by drop\n",
                "assert!(lock.status()?.is_free());\n",
                "# Ok::<(), Box<dyn std::error::Error>>(())\n",
                "```"
            )]
            pub fn release(mut self) -> Result<()> {
                let r = self.leave();
                drop(self);
                r
            }

            #[doc = concat!(
                "Checks, now, that the lock is still held: ", $file, " exists and is ours.\n\n",
                "A lock already known to be lost, by the heartbeat or by the watchdog (see ",
                "[`", stringify!($guard), "::is_lost`]), is reported at once, before any ",
                "system call: a check never blocks on a filesystem that stopped answering ",
                "once the watchdog has run out. A check whose system calls return only after ",
                "the watchdog ran out reports the loss too, whatever they found.\n\n",
                "# Errors\n\n",
                "[`Error::LockLost`] if it is not.\n\n",
                "# Examples\n\n",
                "```\n",
                "let dir = tempfile::tempdir()?;\n",
                "let lock = rwdir::DirLock::new(dir.path())?;\n",
                "let ", $v, " = lock.", $take, "()?;\n",
                $v, ".check()?;\n",
                "std::fs::remove_file(", $v, ".path())?; // someone removes ", $removed, "\n",
                "assert!(matches!(", $v, ".check(), Err(rwdir::Error::LockLost { .. })));\n",
                "# Ok::<(), Box<dyn std::error::Error>>(())\n",
                "```"
            )]
            pub fn check(&self) -> Result<()> {
                self.held.check()
            }

            #[doc = concat!(
                "Refreshes the lock now, as one beat of the background heartbeat does: ",
                "checks that ", $file, " is still ours, sets its mtime to now, and checks ",
                "again.\n\n",
                "With [`Builder::background_heartbeat(false)`](crate::Builder::background_heartbeat), ",
                "call it at least every lease/3 while holding the lock, or holders on other ",
                "hosts treat the lock as stale once the lease has passed. With the ",
                "background heartbeat on, it is never needed.\n\n",
                "# Errors\n\n",
                "[`Error::LockLost`], as [`", stringify!($guard), "::check`], if the file is ",
                "gone, was replaced, or its filesystem went away, or if the watchdog ran out ",
                "(reported before any system call, see [`", stringify!($guard), "::is_lost`]); ",
                "the guard then counts as lost ([`", stringify!($guard), "::is_lost`]).\n\n",
                "# Examples\n\n",
                "```\n",
                "let dir = tempfile::tempdir().expect(\"a temporary directory\");\n",
                "let lock = rwdir::DirLock::builder(dir.path())\n",
                "    .background_heartbeat(false)\n",
                "    .build()?;\n",
                "let ", $v, " = lock.", $take, "()?;\n",
                $v, ".refresh()?;\n",
                "std::fs::remove_file(", $v, ".path()).expect(\"remove\"); // someone removes ", $removed, "\n",
                "assert!(matches!(", $v, ".refresh(), Err(rwdir::Error::LockLost { .. })));\n",
                "assert!(", $v, ".is_lost());\n",
                "# Ok::<(), rwdir::Error>(())\n",
                "```"
            )]
            pub fn refresh(&self) -> Result<()> {
                self.held.refresh()
            }

            #[doc = concat!(
                "Whether the lock is lost: the background heartbeat (or a [`", stringify!($guard),
                "::refresh`] or [`", stringify!($guard), "::check`]) found ", $file, " gone ",
                "or replaced, or the **watchdog** ran out. Cheap: it reads the clock, and ",
                "makes no system call on the file, so it answers even while the ",
                "filesystem does not.\n\n",
                "The watchdog (shared filesystems only): a lock whose last completed, ",
                "successful renewal (the grant, a heartbeat, a [`", stringify!($guard),
                "::refresh`]) started more than lease − lease/6 ago counts as lost, whatever ",
                "a renewal still blocked in the filesystem later returns: other hosts may ",
                "judge it expired from then on (a network filesystem cut off from its server ",
                "can block the heartbeat's calls with no timeout; CephFS does). Half a ",
                "heartbeat period before the lease runs out covers the mtime's resolution ",
                "(1 s) and clock skew up to lease/6 − 1 s. The clock is `CLOCK_BOOTTIME`, so ",
                "a suspended machine's locks are lost on resume. On a local filesystem, where ",
                "holders of this host are judged by pid, there is no watchdog.\n\n",
                "Once lost, a lock stays lost: the heartbeat stops renewing it.\n\n",
                "# Examples\n\n",
                "```\n",
                "let dir = tempfile::tempdir()?;\n",
                "let lock = rwdir::DirLock::new(dir.path())?;\n",
                "let ", $v, " = lock.", $take, "()?;\n",
                "assert!(!", $v, ".is_lost());\n",
                "# Ok::<(), Box<dyn std::error::Error>>(())\n",
                "```"
            )]
            pub fn is_lost(&self) -> bool {
                self.held.is_lost()
            }

            #[doc = concat!(
                "The path of ", $file, ".\n\n",
                "# Examples\n\n",
                "```\n",
                "let dir = tempfile::tempdir()?;\n",
                "let lock = rwdir::DirLock::new(dir.path())?;\n",
                "let ", $v, " = lock.", $take, "()?;\n",
                "assert!(", $v, ".path().starts_with(dir.path().join(\".rwdir\")));\n",
                "# Ok::<(), Box<dyn std::error::Error>>(())\n",
                "```"
            )]
            pub fn path(&self) -> std::path::PathBuf {
                self.held.path()
            }
        }

        impl Drop for $guard {
            fn drop(&mut self) {
                if !self.taken.left {
                    let _ = self.leave();
                }
            }
        }
    };
}

/// A shared (read) lock on a directory. Released when dropped.
///
/// Owned (no lifetime), `Send` and `Sync`: it can be moved to another thread or kept in
/// a struct.
///
/// # Examples
///
/// ```
/// let dir = tempfile::tempdir()?;
/// let lock = rwdir::DirLock::new(dir.path())?;
/// let guard = lock.read()?;
/// std::thread::spawn(move || drop(guard)).join().unwrap(); // Send: released in another thread
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[must_use = "if unused the lock is released immediately"]
#[clippy::has_significant_drop]
#[derive(Debug)]
pub struct ReadGuard {
    /// The reader's file, maybe shared with other read guards of this process (V11).
    held: Arc<Held>,
    taken: Taken,
}

/// An exclusive (write) lock on a directory. Released when dropped.
///
/// Owned (no lifetime), `Send` and `Sync`. Gives the fencing token of this grant when
/// asked ([`WriteGuard::token`]).
///
/// # Examples
///
/// ```
/// let dir = tempfile::tempdir()?;
/// let lock = rwdir::DirLock::new(dir.path())?;
/// let guard = lock.write()?;
/// println!("writing with fencing token {}", guard.token()?);
/// guard.release()?;
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[must_use = "if unused the lock is released immediately"]
#[clippy::has_significant_drop]
#[derive(Debug)]
pub struct WriteGuard {
    held: Arc<Held>,
    /// The fencing token once asked for; until then where its allocation starts.
    token: Mutex<Fencing>,
    taken: Taken,
}

/// A write guard's fencing token (V14, docs/protocol-notes.md).
#[derive(Debug, Clone, Copy)]
enum Fencing {
    /// Not asked for yet: the highest token of the acquisition's last listing.
    Unasked(protocol::TokenHint),
    /// Allocated.
    Given(u64),
}

/// What each guard keeps of its own, whoever else shares its file.
#[derive(Debug)]
struct Taken {
    /// This guard in the records of the guards held by each thread (self-deadlock
    /// check); `None` for a guard taken by a task (`DirLock::read_async`): tasks are not
    /// threads, and many tasks of one thread hold guards independently.
    mark: Option<owned::Mark>,
    /// Whether the guard left the lock (an explicit release, before the drop).
    left: bool,
}

impl Taken {
    /// `by_thread`: taken by the calling thread (the blocking API), which then counts
    /// the guard as its own (`crate::owned`).
    fn new(held: &Arc<Held>, by_thread: bool) -> Taken {
        Taken {
            mark: by_thread.then(|| held.mark()),
            left: false,
        }
    }

    /// The guard leaves: it is no longer its thread's.
    fn leave(&mut self) {
        self.left = true;
        if let Some(mark) = &self.mark {
            mark.forget();
        }
    }
}

impl ReadGuard {
    /// The guard of a reader's file just granted; `by_thread`: taken by the calling
    /// thread (the blocking API), which then counts it as its own (`crate::owned`). Other
    /// reads of this process may join the file from now on ([`share`]).
    pub(crate) fn new(held: Arc<Held>, by_thread: bool) -> ReadGuard {
        share::offer(&held);
        ReadGuard::joined(held, by_thread)
    }

    /// A guard on a reader's file that [`share::join`] counted it in on.
    pub(crate) fn joined(held: Arc<Held>, by_thread: bool) -> ReadGuard {
        let taken = Taken::new(&held, by_thread);
        ReadGuard { held, taken }
    }

    /// Leaves the lock (R5): the last guard on the file releases it; the others only
    /// report a loss.
    fn leave(&mut self) -> Result<()> {
        self.taken.leave();
        // In a forked child, the last one out calls a release that does nothing there.
        if self.held.leave() {
            self.held.release()
        } else if self.held.is_lost() {
            Err(self.held.lost_before())
        } else {
            Ok(())
        }
    }
}

guard_methods!(
    ReadGuard,
    "the reader's file",
    "read",
    "r",
    "a reader's file"
);

impl WriteGuard {
    /// The guard of `.master_lock` just granted, the acquisition's last listing having
    /// shown `hint` as the highest token; `by_thread` as for [`ReadGuard::new`].
    pub(crate) fn new(held: Arc<Held>, hint: protocol::TokenHint, by_thread: bool) -> WriteGuard {
        let taken = Taken::new(&held, by_thread);
        WriteGuard {
            held,
            token: Mutex::new(Fencing::Unasked(hint)),
            taken,
        }
    }

    /// Leaves the lock (W8).
    fn leave(&mut self) -> Result<()> {
        self.taken.leave();
        self.held.release()
    }

    /// The fencing token of this grant (docs/protocol.md §3.7): unique and strictly growing
    /// over the write grants on this directory that ask for one, even if two processes
    /// ever believe they hold the lock. It protects only a resource that remembers the
    /// highest token it has seen and rejects lower ones.
    ///
    /// Allocated the first time it is asked for, while the lock is held (V14 in
    /// docs/protocol-notes.md: a `rename` of the last `.token-<n>`, a listing, and a check
    /// that `.master_lock` is still this guard's), then kept: a write that never asks
    /// makes no token file. A writer that asks late still gets a token above that of
    /// every writer granted before it; the check makes sure no writer was granted after
    /// it. Tokens are not promised to be consecutive (an allocation that then finds the
    /// lock lost uses one up). The command asks before it starts COMMAND (`RWDIR_TOKEN`).
    ///
    /// # Errors
    ///
    /// [`Error::LockLost`] if the lock was lost before the token could be given (a later
    /// grant exists: only after a lease was misjudged), and [`Error::TokensExhausted`] or
    /// [`Error::Io`] for filesystem problems. A lost lock stays lost (see
    /// [`WriteGuard::is_lost`]); after any other error, asking again tries again.
    ///
    /// # Examples
    ///
    /// ```
    /// let dir = tempfile::tempdir()?;
    /// let lock = rwdir::DirLock::new(dir.path())?;
    /// let w = lock.write()?;
    /// let first = w.token()?;
    /// assert_eq!(w.token()?, first, "one token per grant");
    /// drop(w);
    /// drop(lock.write()?); // asks for no token: makes none
    /// assert_eq!(lock.write()?.token()?, first + 1);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn token(&self) -> Result<u64> {
        let mut token = self.token.lock();
        let hint = match *token {
            Fencing::Given(n) => return Ok(n),
            Fencing::Unasked(hint) => hint,
        };
        let n = self.held.grant_token(hint)?;
        *token = Fencing::Given(n);
        Ok(n)
    }

    /// Turns the write lock into a read lock without letting any other writer in: the
    /// reader's file is created before `.master_lock` is removed. Waiting writers then
    /// queue behind this reader as behind any other.
    ///
    /// # Errors
    ///
    /// [`Error::Io`] if the reader's file cannot be created (the write lock is then
    /// released all the same), [`Error::LockLost`] if `.master_lock` was no longer ours.
    ///
    /// # Examples
    ///
    /// ```
    /// let dir = tempfile::tempdir()?;
    /// let lock = rwdir::DirLock::new(dir.path())?;
    /// let w = lock.write()?;
    /// let r = w.downgrade()?;
    /// let st = lock.status()?;
    /// assert!(st.writer.is_none() && st.readers.len() == 1);
    /// drop(r);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn downgrade(self) -> Result<ReadGuard> {
        let held = &self.held;
        let name = LockName::Slave {
            uuid: Uuid::new_v4(),
        };
        let me = crate::sys::identity();
        let record = protocol::record_of(&me, &held.cfg, Kind::Read);
        // The watchdog of the reader's file starts before it exists.
        let started = Instant::now();
        let created = held.sd.put(&name, &record)?;
        let Some(created) = created else {
            return Err(Error::LockLost {
                path: held.sd.path_of(&name),
                reason: "a file already exists at a fresh reader name".into(),
            });
        };
        let own = Own {
            name,
            created,
            nonce: record.nonce,
            queue: None,
            pid: record.pid,
            touched: parking_lot::Mutex::new(started),
        };
        let reader = ReadGuard::new(
            Held::new(Arc::clone(&held.sd), Arc::clone(&held.cfg), own),
            self.taken.mark.is_some(),
        );
        self.release()?;
        Ok(reader)
    }
}

guard_methods!(WriteGuard, "`.master_lock`", "write", "w", "`.master_lock`");

/// Reads of one process that share one reader's file (V11, docs/protocol-notes.md): a
/// read that finds a reader's file of this process still held joins it instead of
/// making its own ([`join`](share::join)); one that finds none while another read of
/// the process is on its way in waits for it and joins its file ([`board`](share::board)).
pub(crate) mod share {
    use std::sync::atomic::{AtomicU32, AtomicUsize};

    use parking_lot::Condvar;

    use super::*;
    use crate::wait::Deadline;

    /// The reader's files of this process that reads may join: every read guard's file
    /// while it is held (dead entries are pruned as the table is read).
    static OFFERED: Mutex<Vec<Weak<Held>>> = Mutex::new(Vec::new());
    /// The process whose files `OFFERED` lists. A forked child neither joins nor offers:
    /// its parent's files are not its own, and another thread of the parent may have
    /// held the table's lock at the fork.
    static OWNER: AtomicU32 = AtomicU32::new(0);
    /// How many offered files are not released yet: a read with none to join (a thread
    /// reading alone) neither asks who it is nor takes the table's lock.
    static LIVE: AtomicUsize = AtomicUsize::new(0);

    /// Offers a reader's file just granted to the reads that follow.
    pub(crate) fn offer(held: &Arc<Held>) {
        if !held.cfg.share_readers || !held.cfg.heartbeat {
            return;
        }
        let pid = held.owner_pid;
        if OWNER
            .compare_exchange(0, pid, Ordering::AcqRel, Ordering::Acquire)
            .is_err_and(|owner| owner != pid)
        {
            return;
        }
        let mut offered = OFFERED.lock();
        offered.retain(|h| h.strong_count() > 0);
        offered.push(Arc::downgrade(held));
        held.offered.store(true, Ordering::Release);
        LIVE.fetch_add(1, Ordering::AcqRel);
    }

    /// An offered file is being released.
    pub(super) fn withdrawn() {
        LIVE.fetch_sub(1, Ordering::AcqRel);
    }

    /// Joins a reader's file this process holds in `sd`, if there is one with the same
    /// settings and no writer holds or waits: counts itself in (so the file stays
    /// while it looks), lists the state directory as R3 does (no `.master_lock`, no
    /// pending file), and checks that the file is still ours. `None`: take the usual
    /// way (R1–R3) with a file of its own.
    ///
    /// # Errors
    ///
    /// The listing's.
    pub(crate) fn join(sd: &StateDir, cfg: &Config) -> Result<Option<Arc<Held>>> {
        if !cfg.share_readers || !cfg.heartbeat || LIVE.load(Ordering::Acquire) == 0 {
            return Ok(None);
        }
        let owner = OWNER.load(Ordering::Acquire);
        if owner == 0 || owner != crate::sys::pid() {
            return Ok(None);
        }
        let held = {
            let mut offered = OFFERED.lock();
            offered.retain(|h| h.strong_count() > 0);
            offered
                .iter()
                .filter_map(Weak::upgrade)
                .find(|h| fits(h, sd, cfg) && h.join())
        };
        let Some(held) = held else {
            return Ok(None);
        };
        enter(held, sd)
    }

    /// A read counted in on `held`: lists the state directory as R3 does (no
    /// `.master_lock`, no pending file) and checks that the file is still ours.
    fn enter(held: Arc<Held>, sd: &StateDir) -> Result<Option<Arc<Held>>> {
        let free = sd.list().map(|l| !l.master && l.pending.is_empty());
        if matches!(free, Ok(true)) && held.check().is_ok() {
            return Ok(Some(held));
        }
        // A writer holds or waits, or the file was lost: out again, and the file goes if
        // the guards we joined have all left meanwhile.
        if held.leave() {
            let _ = held.release();
        }
        free.map(|_| None)
    }

    /// A read of this process on its way in with a file of its own (R1–R3), registered
    /// so that reads arriving meanwhile wait for it and join its file ([`board`]).
    struct Flight {
        id: u64,
        /// The state directory, and the terms a file must have to be shared (as
        /// [`fits`] asks of an offered file).
        dir: FileId,
        lease: Duration,
        pgid: u32,
        /// Reads waiting for it ([`Seat`]s): counted in on its file when it lands, then
        /// each takes the file and counts itself off here; the entry goes when none is
        /// left.
        waiting: usize,
        /// `None` while under way; then the file, or `Some(None)` if the read failed.
        /// (A read that lands with nobody waiting removes its entry instead.)
        landed: Option<Option<Arc<Held>>>,
        /// The tasks waiting for it (`read_async`), by seat, woken when it lands.
        #[cfg(feature = "tokio")]
        wakers: Vec<(u64, std::task::Waker)>,
    }

    /// Reads under way ([`Flight`]). Taken only by the process in [`OWNER`], as
    /// `OFFERED` is: another thread may have held it at a fork.
    static FLIGHTS: Mutex<Vec<Flight>> = Mutex::new(Vec::new());
    /// Signalled whenever a flight lands.
    static LANDED: Condvar = Condvar::new();
    /// Flights' and seats' ids.
    static NEXT_ID: AtomicU64 = AtomicU64::new(0);

    /// What a read that found no file to join does next ([`board`]).
    pub(crate) enum Boarding {
        /// Take a file of its own (R1–R3), then [`Ticket::land`].
        Fly(Ticket),
        /// Counted in on the file of a read that came in while it waited, and inside.
        Joined(Arc<Held>),
        /// Take a file of its own, as if no other read were under way.
        Alone,
    }

    /// A read's registration as under way; landing it lets the reads that waited for
    /// it in. Dropped without [`Ticket::land`] (an error, a panic, a dropped future),
    /// it lands empty.
    pub(crate) struct Ticket {
        id: u64,
        landed: bool,
    }

    impl Ticket {
        /// The read came in with `held` (or failed: `None`): counts every read waiting
        /// for it in on the file at once, before the read can leave it, and wakes them.
        pub(crate) fn land(mut self, held: Option<&Arc<Held>>) {
            self.landed = true;
            land(self.id, held);
        }
    }

    impl Drop for Ticket {
        fn drop(&mut self) {
            if !self.landed {
                land(self.id, None);
            }
        }
    }

    fn land(id: u64, held: Option<&Arc<Held>>) {
        let mut flights = FLIGHTS.lock();
        let Some(i) = flights.iter().position(|f| f.id == id) else {
            return;
        };
        let f = &mut flights[i];
        if f.waiting == 0 {
            flights.swap_remove(i);
            return;
        }
        if let Some(held) = held {
            held.count_in(f.waiting);
        }
        f.landed = Some(held.cloned());
        #[cfg(feature = "tokio")]
        let wakers = std::mem::take(&mut f.wakers);
        drop(flights);
        LANDED.notify_all();
        #[cfg(feature = "tokio")]
        wakers.into_iter().for_each(|(_, w)| w.wake());
    }

    /// A read's place among those waiting for a flight. It is counted in the flight's
    /// `waiting` until it takes what the flight brought ([`Seat::take`]); dropped before
    /// that (a deadline, a cancellation, a dropped future), it counts itself off, and
    /// if the flight had already counted it in on its file, counts itself out of the
    /// file again, which the last one out releases. So a waiter that goes away never
    /// keeps a file held.
    struct Seat {
        flight: u64,
        /// Its waker's key in the flight's `wakers`.
        #[cfg(feature = "tokio")]
        id: u64,
        done: bool,
    }

    impl Seat {
        /// What the flight brought, once it has landed (then the seat is done): its
        /// file, already counted in for this read, or `None` if it failed or is gone.
        fn take(&mut self, flights: &mut Vec<Flight>) -> Option<Option<Arc<Held>>> {
            let Some(i) = flights.iter().position(|f| f.id == self.flight) else {
                self.done = true;
                return Some(None);
            };
            let f = &mut flights[i];
            let landed = f.landed.as_ref()?.clone();
            self.done = true;
            f.waiting -= 1;
            if f.waiting == 0 {
                flights.swap_remove(i);
            }
            Some(landed)
        }

        /// Waits for the flight to land, on the calling thread, until `deadline` or
        /// a cancellation of `cfg`'s (looked at every maximum poll interval, as the
        /// protocol's pauses do): `None` if it gave up first.
        fn wait(mut self, cfg: &Config, deadline: Deadline) -> Option<Option<Arc<Held>>> {
            let mut flights = FLIGHTS.lock();
            loop {
                if let Some(landed) = self.take(&mut flights) {
                    return Some(landed);
                }
                if cfg.cancelled() {
                    break;
                }
                let tick = cfg
                    .cancel
                    .as_ref()
                    .and_then(|_| Instant::now().checked_add(cfg.max_poll));
                let until = match (deadline, tick) {
                    (Deadline::At(t), Some(k)) => Some(t.min(k)),
                    (Deadline::At(t), None) => Some(t),
                    (_, k) => k,
                };
                match until {
                    Some(t) => {
                        let timed_out = LANDED.wait_until(&mut flights, t).timed_out();
                        if timed_out && matches!(deadline, Deadline::At(d) if Instant::now() >= d) {
                            if let Some(landed) = self.take(&mut flights) {
                                return Some(landed);
                            }
                            break;
                        }
                    }
                    None => LANDED.wait(&mut flights),
                }
            }
            drop(flights);
            None
        }

        /// As [`Seat::wait`], for a task: the flight wakes it as it lands.
        #[cfg(feature = "tokio")]
        async fn wait_async(mut self, cfg: &Config) -> Option<Option<Arc<Held>>> {
            use std::future::Future;
            use std::task::Poll;
            let mut tick = cfg
                .cancel
                .as_ref()
                .map(|_| Box::pin(tokio::time::sleep(cfg.max_poll)));
            std::future::poll_fn(|cx| {
                let mut flights = FLIGHTS.lock();
                if let Some(landed) = self.take(&mut flights) {
                    return Poll::Ready(Some(landed));
                }
                if let Some(tick) = &mut tick {
                    while tick.as_mut().poll(cx).is_ready() {
                        if cfg.cancelled() {
                            return Poll::Ready(None);
                        }
                        let next = tokio::time::Instant::now() + cfg.max_poll;
                        tick.as_mut().reset(next);
                    }
                }
                if let Some(f) = flights.iter_mut().find(|f| f.id == self.flight) {
                    match f.wakers.iter_mut().find(|(id, _)| *id == self.id) {
                        Some((_, w)) => w.clone_from(cx.waker()),
                        None => f.wakers.push((self.id, cx.waker().clone())),
                    }
                }
                Poll::Pending
            })
            .await
        }
    }

    impl Drop for Seat {
        fn drop(&mut self) {
            if self.done {
                return;
            }
            let mut flights = FLIGHTS.lock();
            let Some(i) = flights.iter().position(|f| f.id == self.flight) else {
                return;
            };
            let f = &mut flights[i];
            f.waiting -= 1;
            #[cfg(feature = "tokio")]
            f.wakers.retain(|(id, _)| *id != self.id);
            let counted_in = f.landed.clone().flatten();
            if f.waiting == 0 && f.landed.is_some() {
                flights.swap_remove(i);
            }
            drop(flights);
            if let Some(held) = counted_in
                && held.leave()
            {
                let _ = held.release();
            }
        }
    }

    /// Where a read that found no file to join stands ([`board`]).
    enum Place {
        Fly(Ticket),
        Wait(Seat),
        Alone,
    }

    /// Registers a read that found no file to join: to wait for a read of this process
    /// on its way in to the same state directory on the same terms (unless `deadline`
    /// is `Once`: a `try_read`), or as under way itself.
    fn register(sd: &StateDir, cfg: &Config, deadline: Deadline) -> Place {
        if !cfg.share_readers || !cfg.heartbeat {
            return Place::Alone;
        }
        let pid = crate::sys::pid();
        if OWNER
            .compare_exchange(0, pid, Ordering::AcqRel, Ordering::Acquire)
            .is_err_and(|owner| owner != pid)
        {
            return Place::Alone;
        }
        let mut flights = FLIGHTS.lock();
        let (dir, lease, pgid) = (sd.id(), cfg.lease, cfg.pgid);
        let under_way = flights
            .iter_mut()
            .find(|f| f.landed.is_none() && f.dir == dir && f.lease == lease && f.pgid == pgid);
        let id = NEXT_ID.fetch_add(1, Ordering::Relaxed);
        match under_way {
            Some(f) if deadline != Deadline::Once => {
                f.waiting += 1;
                Place::Wait(Seat {
                    flight: f.id,
                    #[cfg(feature = "tokio")]
                    id,
                    done: false,
                })
            }
            _ => {
                flights.push(Flight {
                    id,
                    dir,
                    lease,
                    pgid,
                    waiting: 0,
                    landed: None,
                    #[cfg(feature = "tokio")]
                    wakers: Vec::new(),
                });
                Place::Fly(Ticket { id, landed: false })
            }
        }
    }

    /// What a seat's wait brought, as a [`Boarding`]: a landed file is entered as a
    /// join is ([`enter`]: the R3 listing and the check of the file).
    fn after(landed: Option<Option<Arc<Held>>>, sd: &StateDir) -> Result<Boarding> {
        Ok(match landed.flatten() {
            Some(held) => enter(held, sd)?.map_or(Boarding::Alone, Boarding::Joined),
            None => Boarding::Alone,
        })
    }

    /// For a read that found no file to join (V11): if another read of this process is
    /// on its way in to the same state directory on the same terms, waits for it (up to
    /// `deadline` or a cancellation; never for a `try_read`) and joins its file: counted
    /// in when it lands, it then makes its own R3 listing ([`enter`]). Otherwise
    /// registers this read as under way, so that the reads that arrive meanwhile join it
    /// in turn. Reads that ask at once, each with a `DirLock` of its own, thus come in
    /// through one file even when none of them holds one yet.
    ///
    /// # Errors
    ///
    /// The listing's, after a wait.
    pub(crate) fn board(sd: &StateDir, cfg: &Config, deadline: Deadline) -> Result<Boarding> {
        match register(sd, cfg, deadline) {
            Place::Fly(ticket) => Ok(Boarding::Fly(ticket)),
            Place::Alone => Ok(Boarding::Alone),
            Place::Wait(seat) => after(seat.wait(cfg, deadline), sd),
        }
    }

    /// [`board`] for `read_async`: waits for the read on its way in as a task, and is
    /// cancel safe (a dropped wait leaves no count behind: [`Seat`]).
    ///
    /// # Errors
    ///
    /// The listing's, after a wait.
    #[cfg(feature = "tokio")]
    pub(crate) async fn board_async(sd: &StateDir, cfg: &Config) -> Result<Boarding> {
        match register(sd, cfg, Deadline::Never) {
            Place::Fly(ticket) => Ok(Boarding::Fly(ticket)),
            Place::Alone => Ok(Boarding::Alone),
            Place::Wait(seat) => after(seat.wait_async(cfg).await, sd),
        }
    }

    /// Whether a read with `cfg` in `sd` may share `held`: a reader's file of this
    /// process in the same state directory, whose record says what the reader's own
    /// would (lease, process group), refreshed by the background heartbeat.
    fn fits(held: &Held, sd: &StateDir, cfg: &Config) -> bool {
        matches!(held.name, LockName::Slave { .. })
            && held.sd.id() == sd.id()
            && held.cfg.lease == cfg.lease
            && held.cfg.pgid == cfg.pgid
            && held.cfg.heartbeat
            && held.cfg.share_readers
    }
}

/// One heartbeat thread per process, shared by every held lock file. Registering a file
/// only pushes it on a list: the thread is woken only if the new file needs beats more
/// often than the thread currently wakes, so taking a lock costs no context switch.
mod heartbeat {
    use super::*;

    /// The registered files and the period the thread beats at, under one lock so that
    /// a registration can never be missed by a thread deciding to sleep for ever.
    struct State {
        files: Vec<Weak<Held>>,
        /// The thread's current period: the shortest of the files held at the last
        /// beat (kept while nothing is held); `None` before the first registration.
        period: Option<Duration>,
        /// How many files were left after the last pruning.
        pruned_len: usize,
    }

    struct Shared {
        /// The process whose thread this is.
        pid: u32,
        state: Mutex<State>,
        wake: Sender<()>,
    }

    /// The heartbeat of the process that first took a lock.
    static SHARED: OnceLock<&'static Shared> = OnceLock::new();
    /// The heartbeat of a forked child that took a lock: `fork` copies only the calling
    /// thread, so the parent's heartbeat thread did not come along, and a child's guards
    /// beaten by nobody would be broken by judges by lease once the lease ran out.
    /// Never locked in the first process, so a fork cannot copy it locked from there.
    static FORKED: Mutex<Option<&'static Shared>> = Mutex::new(None);

    /// Makes the heartbeat of process `pid` and starts its thread. One per process for
    /// the process's life, as a `static` would be.
    fn start(pid: u32) -> &'static Shared {
        let (wake, rx) = crossbeam_channel::bounded(1);
        let shared: &'static Shared = Box::leak(Box::new(Shared {
            pid,
            state: Mutex::new(State {
                files: Vec::new(),
                period: None,
                pruned_len: 0,
            }),
            wake,
        }));
        // Without a thread the heartbeat simply does not run; same-host judgement is
        // exact without it.
        let _ = std::thread::Builder::new()
            .name("rwdir-heartbeat".into())
            .spawn(move || run(shared, rx));
        shared
    }

    /// The calling process's heartbeat.
    fn shared() -> &'static Shared {
        let pid = crate::sys::pid();
        let first = *SHARED.get_or_init(|| start(pid));
        if first.pid == pid {
            return first;
        }
        let mut forked = FORKED.lock();
        match *forked {
            Some(s) if s.pid == pid => s,
            _ => forked.insert(start(pid)),
        }
    }

    pub(super) fn register(held: &Arc<Held>) {
        let shared = shared();
        let mut state = shared.state.lock();
        // Drop released files now and then (amortised O(1)), so that the list is bounded
        // by the number of files held, not by the rate of acquisitions.
        if state.files.len() >= state.pruned_len.saturating_mul(2).max(64) {
            state.files.retain(|w| {
                w.upgrade()
                    .is_some_and(|h| !h.released.load(Ordering::Relaxed))
            });
            state.pruned_len = state.files.len();
        }
        state.files.push(Arc::downgrade(held));
        if state.period.is_none_or(|p| held.period() < p) {
            state.period = Some(held.period());
            let _ = shared.wake.try_send(());
        }
    }

    fn run(shared: &'static Shared, rx: Receiver<()>) {
        // When the next beat is due; `None` until the first registration (which may
        // already have happened: its wake-up is then waiting in `rx`).
        let mut next: Option<Instant> = shared
            .state
            .lock()
            .period
            .and_then(|p| Instant::now().checked_add(p));
        loop {
            let woken = match next {
                None => rx.recv().map_err(|_| RecvTimeoutError::Disconnected),
                Some(t) => rx.recv_deadline(t),
            };
            match woken {
                Err(RecvTimeoutError::Disconnected) => return,
                Ok(()) => {
                    // A shorter period was registered: the next beat comes sooner. The
                    // new file is fresh, so nothing is beaten now (an acquisition must
                    // not pay for a beat of every held file).
                    let period = shared.state.lock().period;
                    if let Some(at) = period.and_then(|p| Instant::now().checked_add(p)) {
                        next = Some(next.map_or(at, |t| t.min(at)));
                    }
                    continue;
                }
                Err(RecvTimeoutError::Timeout) if next.is_some_and(|t| Instant::now() < t) => {
                    continue;
                }
                Err(RecvTimeoutError::Timeout) => {}
            }
            // Due: beat every held file.
            let live: Vec<Arc<Held>> = {
                let mut state = shared.state.lock();
                state.files.retain(|w| {
                    w.upgrade()
                        .is_some_and(|h| !h.released.load(Ordering::Relaxed))
                });
                let live: Vec<Arc<Held>> = state.files.iter().filter_map(Weak::upgrade).collect();
                // With nothing held the period stays: the thread then wakes once a
                // period for nothing, and a later acquisition with the same lease has
                // no need to wake it.
                if let Some(p) = live.iter().map(|h| h.period()).min() {
                    state.period = Some(p);
                }
                // A period too long to represent: no beat is ever due.
                next = state.period.and_then(|p| Instant::now().checked_add(p));
                live
            };
            for h in &live {
                h.heartbeat();
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, Instant, SystemTime};

    fn mtime(path: &std::path::Path) -> SystemTime {
        std::fs::symlink_metadata(path)
            .and_then(|m| m.modified())
            .expect("mtime")
    }

    /// Waits (bounded) until the file's mtime moves past `since`.
    fn refreshed_after(path: &std::path::Path, since: SystemTime) -> bool {
        let end = Instant::now() + Duration::from_secs(20);
        while Instant::now() < end {
            if mtime(path) > since {
                return true;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        false
    }

    #[test]
    fn the_heartbeat_refreshes_held_files_also_after_others_were_released() {
        let dir = tempfile::tempdir().expect("tempdir");
        let lock = crate::DirLock::builder(dir.path())
            .lease(Duration::from_millis(300))
            .build()
            .expect("lock");
        // A first guard, released: the thread may go idle.
        lock.read().expect("read").release().expect("release");
        let w = lock.write().expect("write");
        let path = w.path();
        let t0 = mtime(&path);
        assert!(
            refreshed_after(&path, t0),
            "no heartbeat on {}",
            path.display()
        );
        let t1 = mtime(&path);
        assert!(refreshed_after(&path, t1), "heartbeat stopped");
        assert!(!w.is_lost());
        w.release().expect("release");
    }
}
