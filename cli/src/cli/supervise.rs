//! `rwdir read|write`: take the lock for COMMAND's process group, run COMMAND (through
//! the reaper of [`super::reap`], which keeps the group alive until every process of
//! the job has exited, unless `--no-wait-children`), forward signals, hand over the
//! terminal, watch the lock, and pass COMMAND's status on.
//!
//! One thread does it all when the lock is free. Before the fork, rwdir blocks SIGINT,
//! SIGTERM, SIGHUP (those it was not started with ignored) and SIGCHLD, and reads them
//! from a `signalfd`. The main thread (the child's parent-death thread) then runs one
//! event loop, [`Events`]: `poll` on the signalfd with a timeout. SIGCHLD makes it reap
//! the child with `waitpid(WNOHANG | WUNTRACED)`; a forwarded signal goes to COMMAND's
//! group.
//!
//! While COMMAND runs, a second thread, [`watch`], refreshes the lock file every lease/3
//! and checks the lock every [`CHECK_EVERY`] (the library's heartbeat thread is off:
//! `Builder::background_heartbeat(false)`), and closes a pipe that the event loop polls
//! once it finds the lock lost. The event loop starts that thread when its first round
//! is due, so a COMMAND done sooner costs no thread ([`Watch`]). The event loop itself
//! makes no system call on the lock's files: every [`CHECK_EVERY`] it asks the guard's
//! watchdog (`is_lost`, which reads only the clock). So when the filesystem stops
//! answering (a network filesystem cut off from its server blocks calls with no
//! timeout), the watch thread blocks, but the event loop still sends COMMAND SIGTERM
//! once the watchdog runs out, and rwdir exits 74 without waiting for the filesystem
//! (the guard is released on a thread of its own, for at most [`RELEASE_WITHIN`]).
//!
//! Only when the first attempt finds the lock busy does a second thread take it (waiting
//! costs far more than a thread); on a shared filesystem, where even the first attempt
//! may block for long (CephFS), the thread makes it too. It sends its result on a channel and then closes a
//! pipe that the event loop polls too, so the main thread keeps reacting to signals, to
//! the child's death and to the one-second "waiting" notice meanwhile.

use std::collections::VecDeque;
use std::io;
use std::os::fd::{AsFd, OwnedFd};
use std::path::Path;
use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use crossbeam_channel::Receiver;
use nix::errno::Errno;
use nix::fcntl::OFlag;
use nix::libc;
use nix::poll::{PollFd, PollFlags, PollTimeout};
use nix::sys::signal::{SigSet, SigmaskHow, Signal};
use nix::sys::signalfd::{SfdFlags, SignalFd};
use nix::sys::wait::{WaitPidFlag, WaitStatus};
use nix::unistd::Pid;
use rwdir::{DirLock, Entry, ReadGuard, WriteGuard};

use super::args::LockArgs;
use super::exec::Prepared;
use super::reap::KILL_JOB;
use super::spawn::{Child, Reaper, Started};
use super::{Error, builder, code, message, say};

/// How often the lock is checked while COMMAND runs.
const CHECK_EVERY: Duration = Duration::from_millis(500);
/// How long after SIGTERM a COMMAND that lost its lock gets SIGKILL.
const KILL_AFTER: Duration = Duration::from_secs(10);
/// How long to wait before saying that rwdir waits.
const ANNOUNCE_AFTER: Duration = Duration::from_secs(1);
/// The signals forwarded to COMMAND.
const FORWARDED: [Signal; 3] = [Signal::SIGINT, Signal::SIGTERM, Signal::SIGHUP];
/// How long rwdir waits for a child it killed (or whose exec failed) to be gone.
const REAP_WITHIN: Duration = Duration::from_secs(1);
/// How long rwdir waits for a lost lock's release (which removes nothing of
/// `.master_lock`, but closes files and removes a queue file) before it exits anyway.
const RELEASE_WITHIN: Duration = Duration::from_secs(2);

/// Which lock COMMAND runs under.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Mode {
    /// Shared.
    Read,
    /// Exclusive.
    Write,
}

impl Mode {
    fn as_str(self) -> &'static str {
        match self {
            Mode::Read => "read",
            Mode::Write => "write",
        }
    }

    fn kind(self) -> rwdir::Kind {
        match self {
            Mode::Read => rwdir::Kind::Read,
            Mode::Write => rwdir::Kind::Write,
        }
    }
}

/// A held lock of either kind.
#[derive(Debug)]
enum Guard {
    Read(ReadGuard),
    Write(WriteGuard),
}

impl Guard {
    /// A writer's fencing token (made when first asked for, V14), 0 for a reader.
    fn token(&self) -> rwdir::Result<u64> {
        match self {
            Guard::Read(_) => Ok(0),
            Guard::Write(g) => g.token(),
        }
    }

    fn check(&self) -> rwdir::Result<()> {
        match self {
            Guard::Read(g) => g.check(),
            Guard::Write(g) => g.check(),
        }
    }

    fn refresh(&self) -> rwdir::Result<()> {
        match self {
            Guard::Read(g) => g.refresh(),
            Guard::Write(g) => g.refresh(),
        }
    }

    /// The watchdog's verdict, or a loss found earlier: no system call on the files.
    fn is_lost(&self) -> bool {
        match self {
            Guard::Read(g) => g.is_lost(),
            Guard::Write(g) => g.is_lost(),
        }
    }

    fn release(self) -> rwdir::Result<()> {
        match self {
            Guard::Read(g) => g.release(),
            Guard::Write(g) => g.release(),
        }
    }
}

/// Runs `rwdir read|write`.
///
/// # Errors
///
/// Everything of [`Error`] but `Usage` and `Output`.
pub(crate) fn run(mode: Mode, args: &LockArgs, lease: Option<Duration>) -> Result<ExitCode, Error> {
    // Before the fork, while rwdir is one thread: check DIR and COMMAND, block the
    // signals we forward and SIGCHLD (a thread started later inherits the mask).
    // No heartbeat thread: the event loop refreshes the lock file itself.
    let builder = builder(&args.dir, lease).background_heartbeat(false);
    builder.clone().build().map_err(Error::Dir)?;
    // Leaked: COMMAND's process reads it, sharing our memory, until it execs.
    let cmd: &'static Prepared = Box::leak(Box::new(Prepared::new(
        &args.command,
        mode == Mode::Write,
        &args.dir,
    )?));
    let signals = Signals::block()?;
    // The reaper (the default) holds the lock until every process of the job is gone.
    let reaper = (!args.no_wait_children).then_some(Reaper { quiet: args.quiet });
    let mut child = Child::fork(cmd, &signals.original_mask, reaper)?;
    let pgid = child.pid();
    let mut events = Events::new(signals.fd, pgid, child.take_notes());

    // A signal while waiting cancels the acquisition, which then removes its own files
    // (a queued writer left behind would hold up other hosts' readers for a lease).
    let cancel = rwdir::Cancel::new();
    let lock = builder
        .process_group(pid_u32(pgid))
        .cancel(&cancel)
        .build()
        .map_err(Error::Dir);
    let lock = match lock {
        Ok(lock) => lock,
        Err(e) => {
            child.abort();
            return Err(e);
        }
    };
    let guard = match acquire(&lock, &cancel, mode, args, &mut events) {
        Ok(guard) => guard,
        Err(e) => {
            child.abort();
            events.wait_exit(REAP_WITHIN);
            return Err(e);
        }
    };
    // COMMAND gets the writer's fencing token in RWDIR_TOKEN: the library makes it when
    // asked for, so ask now, before anything runs.
    let token = match guard.token() {
        Ok(token) => token,
        Err(e) => {
            child.abort();
            events.wait_exit(REAP_WITHIN);
            let _ = guard.release();
            return Err(Error::Lock(e));
        }
    };

    // The lock's watch: its thread starts when the first refresh or check is due.
    let guard = Arc::new(guard);
    let mut watch = Watch::new(lock.lease());

    // Hand the terminal to COMMAND's group (as a shell does), then let it go.
    let terminal = Terminal::hand_over(pgid);
    let started = child.go(token);
    let started = match started {
        Ok(Started::Running) => Ok(()),
        Ok(Started::Failed(source)) => Err(Error::Exec {
            program: cmd.program().to_os_string(),
            source,
        }),
        Ok(Started::CannotStart(source)) => Err(Error::Sys {
            action: "start COMMAND's process",
            source,
        }),
        Err(e) => Err(e),
    };
    if let Err(e) = started {
        terminal.take_back();
        events.wait_exit(REAP_WITHIN);
        let _ = watch.stop(guard).map(Guard::release);
        return Err(e);
    }

    let outcome = supervise(
        pgid,
        reaper.is_some(),
        &guard,
        &mut watch,
        &terminal,
        &mut events,
    );
    terminal.take_back();
    match outcome {
        Ok(status) => match watch.stop(guard).map_or(Ok(()), Guard::release) {
            Ok(()) => Ok(ExitCode::from(status)),
            Err(e @ rwdir::Error::LockLost { .. }) => {
                // Lost between the last check and COMMAND's exit.
                say(&message(&e));
                Err(Error::Lost(e))
            }
            Err(e) => {
                // COMMAND ran under the lock; only removing its file failed. Other
                // contenders recover the file once rwdir is gone.
                say(&format!("warning: {}", message(&e)));
                Ok(ExitCode::from(status))
            }
        },
        Err(lost) => {
            watch.abandon(guard);
            Err(lost)
        }
    }
}

/// The thread that refreshes the lock file every lease/3 and checks the lock every
/// [`CHECK_EVERY`] while COMMAND runs: its system calls may block (a filesystem that
/// stopped answering), the event loop's must not.
///
/// It is started when its first refresh or check is due (lease/3 or [`CHECK_EVERY`]
/// after the lock was taken, whichever comes first), not before: a COMMAND that is done
/// by then never costs rwdir a thread (a thread's start and join cost a short command
/// more than a tenth of a millisecond, docs/notes/command-startup.md). Should the
/// thread not start then (no resources for one), the event loop makes that round's
/// refresh and check itself, says so once, and tries again at the next round.
#[derive(Debug)]
struct Watch {
    lease: Duration,
    /// When the lock was taken: the thread's schedule counts from there.
    since: Instant,
    /// While no thread runs: when the next round is due, which starts it.
    due: Option<Instant>,
    /// Whether rwdir said that the thread could not start.
    said: bool,
    /// Dropped to stop the thread.
    stop: Option<crossbeam_channel::Sender<()>>,
    /// The read end of a pipe the thread closes once it found the lock lost (or died);
    /// polled by the event loop until then.
    done: Option<OwnedFd>,
    /// The loss it found.
    found: Option<Receiver<rwdir::Error>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Watch {
    /// The watch of a lock taken just now, with its thread not started yet.
    fn new(lease: Duration) -> Watch {
        let since = Instant::now();
        Watch {
            lease,
            since,
            due: since.checked_add(refresh_every(lease).min(CHECK_EVERY)),
            said: false,
            stop: None,
            done: None,
            found: None,
            thread: None,
        }
    }

    /// When the event loop must call [`Watch::round`] next (`None`: the thread runs).
    fn due(&self) -> Option<Instant> {
        self.due
    }

    /// A round is due: starts the thread, or, if it cannot start, refreshes and checks
    /// the lock on this thread and tries again at the next round. Returns the loss that
    /// refresh or check found.
    fn round(&mut self, guard: &Arc<Guard>, now: Instant) -> rwdir::Result<()> {
        match self.start(guard) {
            Ok(()) => {
                self.due = None;
                Ok(())
            }
            Err(e) => {
                if !self.said {
                    self.said = true;
                    say(&format!(
                        "warning: cannot start a thread to watch the lock ({e}); \
                         refreshing and checking it on the main thread meanwhile"
                    ));
                }
                self.due = now.checked_add(refresh_every(self.lease).min(CHECK_EVERY));
                guard.refresh()?;
                guard.check()
            }
        }
    }

    fn start(&mut self, guard: &Arc<Guard>) -> io::Result<()> {
        let (stop, stopped) = crossbeam_channel::bounded::<()>(0);
        let (tx, found) = crossbeam_channel::bounded(1);
        let (done_r, done_w) = nix::unistd::pipe2(OFlag::O_CLOEXEC)?;
        let guard = Arc::clone(guard);
        let (lease, since) = (self.lease, self.since);
        let thread = std::thread::Builder::new()
            .name("rwdir-watch".into())
            .spawn(move || {
                if let Err(e) = watch(&guard, lease, since, &stopped) {
                    let _ = tx.send(e);
                }
                drop(done_w);
            })?;
        self.stop = Some(stop);
        self.done = Some(done_r);
        self.found = Some(found);
        self.thread = Some(thread);
        Ok(())
    }

    /// The loss the thread found, if it reported one.
    fn found(&self) -> Option<rwdir::Error> {
        self.found.as_ref()?.try_recv().ok()
    }

    /// Stops the thread and waits for it (a refresh in progress ends first), then gives
    /// the guard back for its release.
    fn stop(&mut self, guard: Arc<Guard>) -> Option<Guard> {
        self.stop = None;
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
        Arc::into_inner(guard)
    }

    /// The lock is lost: stops the thread without waiting for it (it may be blocked in
    /// the filesystem), and releases the guard on a thread of its own, waiting for that
    /// at most [`RELEASE_WITHIN`]. A lost guard removes nothing of `.master_lock`, but
    /// closing its files and removing a queue file are calls that may block too; exiting
    /// ends them.
    fn abandon(&mut self, guard: Arc<Guard>) {
        self.stop = None;
        let (tx, rx) = crossbeam_channel::bounded::<()>(1);
        let released = std::thread::Builder::new()
            .name("rwdir-release".into())
            .spawn(move || {
                drop(guard);
                let _ = tx.send(());
            });
        if released.is_ok() {
            let _ = rx.recv_timeout(RELEASE_WITHIN);
        }
    }
}

/// How often the lock file is refreshed: the library's heartbeat period, never a busy
/// loop, even for a tiny lease.
fn refresh_every(lease: Duration) -> Duration {
    (lease / 3).max(Duration::from_millis(10))
}

/// The watch thread's loop, on the schedule of a lock taken at `since`: returns the loss
/// a refresh or a check found, or `Ok` once `stopped` is dropped.
fn watch(
    guard: &Guard,
    lease: Duration,
    since: Instant,
    stopped: &Receiver<()>,
) -> rwdir::Result<()> {
    let refresh_every = refresh_every(lease);
    let mut next_check = since + CHECK_EVERY;
    // `None`: a lease too long to represent, no refresh is ever due.
    let mut next_refresh = since.checked_add(refresh_every);
    loop {
        let until = next_refresh.map_or(next_check, |r| r.min(next_check));
        match stopped.recv_deadline(until) {
            Err(crossbeam_channel::RecvTimeoutError::Timeout) => {}
            Ok(()) | Err(crossbeam_channel::RecvTimeoutError::Disconnected) => return Ok(()),
        }
        let now = Instant::now();
        if next_refresh.is_some_and(|t| now >= t) {
            next_refresh = now.checked_add(refresh_every);
            guard.refresh()?;
        }
        if now >= next_check {
            next_check = now + CHECK_EVERY;
            guard.check()?;
        }
    }
}

/// Cancels the acquisition and waits (bounded) until its thread has removed the files it
/// made; a guard it obtained meanwhile is dropped, which releases it.
fn give_up(cancel: &rwdir::Cancel, rx: &Receiver<rwdir::Result<Guard>>) {
    cancel.cancel();
    let _ = rx.recv_timeout(Duration::from_secs(5));
}

fn pid_u32(pid: Pid) -> u32 {
    u32::try_from(pid.as_raw()).unwrap_or(0)
}

/// Takes the lock: one attempt on this thread, then, if the lock is busy, waits for it
/// in a thread, saying so after a second, and gives up on a signal or the child's death.
fn acquire(
    lock: &DirLock,
    cancel: &rwdir::Cancel,
    mode: Mode,
    args: &LockArgs,
    events: &mut Events,
) -> Result<Guard, Error> {
    let wait = args.wait();
    // One attempt here first: it never sleeps, and a free lock (the common case) then
    // needs no thread.
    // On a shared filesystem even that attempt may block for a long time (CephFS: up to
    // the MDS's session timeout behind a dead client), and the event loop below must
    // forward signals and say what is going on meanwhile: it waits in the thread.
    // `statfs` first: on a local filesystem the mount table is not read.
    let fs = nix::sys::statfs::statfs(lock.path())
        .ok()
        .map(|st| {
            // `f_type` is a signed long (64 or 32 bits): keep the kernel's 32-bit pattern.
            #[allow(
                clippy::cast_possible_truncation,
                clippy::cast_sign_loss,
                clippy::unnecessary_cast,
                clippy::useless_conversion
            )]
            let magic = (st.filesystem_type().0 as i64 & 0xffff_ffff) as u32;
            rwdir::Filesystem::classify(Some(magic), None, None)
        })
        .filter(rwdir::Filesystem::is_shared)
        .and_then(|_| lock.filesystem().ok());
    if wait == Some(Duration::ZERO) || fs.is_none() {
        let first = match mode {
            Mode::Read => lock.try_read().map(Guard::Read),
            Mode::Write => lock.try_write().map(Guard::Write),
        };
        match first {
            Ok(guard) => return Ok(guard),
            Err(e @ rwdir::Error::WouldBlock { .. }) if wait == Some(Duration::ZERO) => {
                return Err(Error::Lock(e));
            }
            Err(rwdir::Error::WouldBlock { .. }) => {}
            Err(e) => return Err(Error::Lock(e)),
        }
    }
    let (tx, rx) = crossbeam_channel::bounded(1);
    // The thread closes its end once the result is sent (or if it dies): the event loop
    // sees the read end become readable.
    let (done_r, done_w) =
        nix::unistd::pipe2(OFlag::O_CLOEXEC).map_err(|e| Error::sys("create a pipe", e))?;
    let taker = lock.clone();
    std::thread::Builder::new()
        .name("rwdir-acquire".into())
        .spawn(move || {
            let guard = match (mode, wait) {
                (Mode::Read, None) => taker.read().map(Guard::Read),
                (Mode::Read, Some(Duration::ZERO)) => taker.try_read().map(Guard::Read),
                (Mode::Read, Some(d)) => taker.try_read_for(d).map(Guard::Read),
                (Mode::Write, None) => taker.write().map(Guard::Write),
                (Mode::Write, Some(Duration::ZERO)) => taker.try_write().map(Guard::Write),
                (Mode::Write, Some(d)) => taker.try_write_for(d).map(Guard::Write),
            };
            // If rwdir gave up meanwhile, the guard is dropped here: released.
            let _ = tx.send(guard);
            drop(done_w);
        })
        .map_err(|e| Error::Sys {
            action: "start a thread",
            source: e,
        })?;
    // Set once the wait is over, however it ends: the announcing thread says no more.
    let waiting = Waiting(Arc::new(AtomicBool::new(true)));
    let mut announce = if args.quiet || wait.is_some_and(|w| w <= ANNOUNCE_AFTER) {
        None
    } else {
        Instant::now().checked_add(ANNOUNCE_AFTER)
    };
    loop {
        match events.next(announce, Some(&done_r))? {
            Event::Done => {
                return match rx.recv_timeout(Duration::from_secs(1)) {
                    Ok(guard) => guard.map_err(Error::Lock),
                    Err(_) => Err(Error::sys("take the lock", Errno::EINTR)),
                };
            }
            Event::Signal(signal) => {
                give_up(cancel, &rx);
                return Err(Error::Interrupted {
                    signal,
                    mode: mode.as_str(),
                    dir: args.dir.clone(),
                });
            }
            Event::Child(_) => {
                // Someone killed the waiting child: COMMAND can no longer run.
                give_up(cancel, &rx);
                return Err(Error::Sys {
                    action: "keep COMMAND's process waiting for the lock",
                    source: io::Error::other("it was killed"),
                });
            }
            Event::Timeout => {
                match fs.as_ref() {
                    Some(fs) if fs.is_shared() => {
                        announce_waiting(lock, mode, &args.dir, fs, &waiting);
                    }
                    _ => say(&waiting_line(lock, mode, &args.dir)),
                }
                announce = None;
            }
            // (Not before COMMAND runs.)
            Event::CommandStopped => {}
        }
    }
}

/// Whether the wait for the lock goes on; cleared when the waiting function returns.
struct Waiting(Arc<AtomicBool>);

impl Drop for Waiting {
    fn drop(&mut self) {
        self.0.store(false, Ordering::SeqCst);
    }
}

/// Says on standard error who holds the lock, on a shared filesystem from a thread of
/// its own: on CephFS the `status` it reads blocks for up to a minute when a client that
/// died or was cut off holds capabilities on the lock's files (measured,
/// docs/notes/dfs-rig.md), and the event loop must go on forwarding signals meanwhile.
/// On CephFS it then says, once the wait has lasted the lease, what may be holding it up
/// and what to do.
fn announce_waiting(
    lock: &DirLock,
    mode: Mode,
    dir: &Path,
    fs: &rwdir::Filesystem,
    waiting: &Waiting,
) {
    let at = Instant::now()
        .checked_sub(ANNOUNCE_AFTER)
        .unwrap_or_else(Instant::now)
        + lock.lease();
    if fs.kind() == rwdir::FsKind::CephFs {
        // A thread of its own: the one below may be blocked in `status` by then.
        let waiting = Arc::clone(&waiting.0);
        let lease = lock.lease();
        let _ = std::thread::Builder::new()
            .name("rwdir-ceph-notice".into())
            .spawn(move || {
                while waiting.load(Ordering::SeqCst) {
                    let now = Instant::now();
                    if now >= at {
                        say(&ceph_line(lease));
                        return;
                    }
                    std::thread::sleep((at - now).min(Duration::from_millis(250)));
                }
            });
    }
    let owned = lock.clone();
    let shown = dir.to_path_buf();
    let still = Arc::clone(&waiting.0);
    let spawned = std::thread::Builder::new()
        .name("rwdir-announce".into())
        .spawn(move || {
            let line = waiting_line(&owned, mode, &shown);
            if still.load(Ordering::SeqCst) {
                say(&line);
            }
        });
    if spawned.is_err() {
        // No thread to spare: say who holds it from here, as on a local filesystem.
        say(&waiting_line(lock, mode, dir));
    }
}

/// What may hold up a wait on CephFS longer than the lease, and what to do about it.
fn ceph_line(lease: Duration) -> String {
    format!(
        "still waiting after the lease ({} s): on CephFS, a client that died or was cut off \
         keeps the lock's files until the MDS drops its session (session_timeout, 60 s by \
         default); `ceph tell mds.<id> session ls` finds it and `ceph tell mds.<id> client \
         evict id=<n>` frees them at once (see docs/network-filesystems.md)",
        lease.as_secs()
    )
}

/// `waiting for write lock on `DIR`: held by reader pid 4242 on host a (12 s)`.
fn waiting_line(lock: &DirLock, mode: Mode, dir: &Path) -> String {
    let who = lock
        .status()
        .ok()
        .and_then(|st| {
            let me = std::process::id();
            let ours = |e: &Entry| e.holder.as_ref().is_some_and(|h| h.pid == me);
            st.blocker(mode.kind(), ours).map(Entry::describe)
        })
        .unwrap_or_else(|| "another process".to_string());
    format!(
        "waiting for {} lock on `{}`: held by {who}",
        mode.as_str(),
        dir.display()
    )
}

/// Waits for COMMAND while forwarding signals, and while [`Watch`] refreshes and checks
/// the lock. Every [`CHECK_EVERY`] it asks the guard's watchdog, which makes no system
/// call. With a reaper (`reaped`), waits for the reaper, which exits once the whole job
/// has, as COMMAND did. Returns COMMAND's exit status, or [`Error::Lost`] if the watch
/// thread or the watchdog found the lock lost.
fn supervise(
    pgid: Pid,
    reaped: bool,
    guard: &Arc<Guard>,
    watch: &mut Watch,
    terminal: &Terminal,
    events: &mut Events,
) -> Result<u8, Error> {
    let mut next_check = Instant::now() + CHECK_EVERY;
    let mut lost: Option<(rwdir::Error, Instant)> = None;
    let mut killed = false;
    let status = loop {
        // Once the lock is lost, no more rounds: only SIGKILL's time is awaited.
        let until = match (&lost, watch.due()) {
            (None, Some(due)) => due.min(next_check),
            _ => next_check,
        };
        match events.next(Some(until), watch.done.as_ref())? {
            Event::Child(Ok(WaitStatus::Exited(_, code))) => {
                break u8::try_from(code & 0xff).unwrap_or(code::FAILURE);
            }
            Event::Child(Ok(WaitStatus::Signaled(_, sig, _))) => break signal_status(sig),
            // The reaper never stays stopped (it guards the job); its notes say when
            // COMMAND stops.
            Event::Child(Ok(WaitStatus::Stopped(..))) if reaped => {
                let _ = nix::sys::signal::kill(pgid, Signal::SIGCONT);
            }
            Event::Child(Ok(WaitStatus::Stopped(..))) | Event::CommandStopped => {
                terminal.follow_stop(pgid);
            }
            Event::Child(Ok(_)) => {}
            Event::Child(Err(e)) => return Err(Error::sys("wait for COMMAND", e)),
            Event::Signal(sig) => signal_group(pgid, sig),
            Event::Done => {
                // The watch thread is done: it found the lock lost (or died; then the
                // watchdog still runs out on its own, with nothing refreshed).
                watch.done = None;
                if lost.is_none()
                    && let Some(e) = watch.found()
                {
                    lost = Some(stop_command(pgid, e));
                }
            }
            Event::Timeout => {
                let now = Instant::now();
                if lost.is_none()
                    && watch.due().is_some_and(|t| now >= t)
                    && let Err(e) = watch.round(guard, now)
                {
                    lost = Some(stop_command(pgid, e));
                }
                if now < next_check {
                    continue;
                }
                next_check = now + CHECK_EVERY;
                match &lost {
                    None => {
                        // No system call: a lost guard's check reports the loss at once.
                        if guard.is_lost()
                            && let Some(e) = watch.found().or_else(|| guard.check().err())
                        {
                            lost = Some(stop_command(pgid, e));
                        }
                    }
                    Some((_, kill_at)) if !killed && now >= *kill_at => {
                        if reaped {
                            // The reaper kills every process of the job.
                            let _ = nix::sys::signal::kill(pgid, KILL_JOB);
                        } else {
                            signal_group(pgid, Signal::SIGKILL);
                        }
                        killed = true;
                    }
                    Some(_) => {}
                }
            }
        }
    };
    match lost {
        Some((e, _)) => Err(Error::Lost(e)),
        None => Ok(status),
    }
}

/// The lock is lost (`e`): says so and sends COMMAND's group SIGTERM. Returns the loss
/// and when SIGKILL is due.
fn stop_command(pgid: Pid, e: rwdir::Error) -> (rwdir::Error, Instant) {
    say(&format!(
        "{}; stopping COMMAND (SIGTERM now, SIGKILL in {} s)",
        message(&e),
        KILL_AFTER.as_secs()
    ));
    signal_group(pgid, Signal::SIGTERM);
    (e, Instant::now() + KILL_AFTER)
}

fn signal_status(sig: Signal) -> u8 {
    code::SIGNAL_BASE.saturating_add(u8::try_from(sig as i32).unwrap_or(0))
}

/// Sends `sig` to COMMAND's process group (also to a group member that outlived
/// COMMAND; never to anyone else, since the group id is COMMAND's pid).
fn signal_group(pgid: Pid, sig: Signal) {
    let _ = nix::sys::signal::killpg(pgid, sig);
}

/// What the event loop saw.
#[derive(Debug)]
enum Event {
    /// A forwarded signal arrived.
    Signal(Signal),
    /// COMMAND's process changed state (exit, death by a signal, stop), or waiting for
    /// it failed.
    Child(nix::Result<WaitStatus>),
    /// The acquisition thread is done: its result is on its channel. Or, while COMMAND
    /// runs, the watch thread is done: it found the lock lost.
    Done,
    /// The reaper says COMMAND stopped.
    CommandStopped,
    /// The deadline passed.
    Timeout,
}

/// The main thread's event loop: the blocked signals (SIGCHLD included) from a
/// signalfd, and the acquisition thread's pipe while it runs, with `poll`.
#[derive(Debug)]
struct Events {
    signals: SignalFd,
    child: Pid,
    /// The read end of the reaper's notes, until it closes.
    notes: Option<OwnedFd>,
    /// Whether the child's end was reaped (then it is never waited for again).
    reaped: bool,
    /// Events seen but not yet returned (one read may bring several).
    queue: VecDeque<Event>,
}

impl Events {
    fn new(signals: SignalFd, child: Pid, notes: Option<OwnedFd>) -> Events {
        Events {
            signals,
            child,
            notes,
            reaped: false,
            queue: VecDeque::new(),
        }
    }

    /// The next event, waiting until `until` (for ever if `None`). `done` is the read end
    /// of the acquisition thread's pipe, if one runs.
    ///
    /// # Errors
    ///
    /// [`Error::Sys`] if `poll` fails.
    fn next(&mut self, until: Option<Instant>, done: Option<&OwnedFd>) -> Result<Event, Error> {
        loop {
            if let Some(ev) = self.queue.pop_front() {
                return Ok(ev);
            }
            let timeout = match until {
                None => PollTimeout::NONE,
                Some(t) => {
                    let left = t.saturating_duration_since(Instant::now());
                    if left.is_zero() {
                        return Ok(Event::Timeout);
                    }
                    // Rounded up: waking a little early would only poll again.
                    let ms = left.as_micros().div_ceil(1000);
                    PollTimeout::try_from(ms).unwrap_or(PollTimeout::MAX)
                }
            };
            let (signalled, finished, noted) = {
                let mut fds = vec![PollFd::new(self.signals.as_fd(), PollFlags::POLLIN)];
                let notes_at = self.notes.as_ref().map(|fd| {
                    fds.push(PollFd::new(fd.as_fd(), PollFlags::POLLIN));
                    fds.len() - 1
                });
                let done_at = done.map(|fd| {
                    fds.push(PollFd::new(fd.as_fd(), PollFlags::POLLIN));
                    fds.len() - 1
                });
                match nix::poll::poll(&mut fds, timeout) {
                    Ok(_) => {}
                    Err(Errno::EINTR) => continue,
                    Err(e) => return Err(Error::sys("wait for signals", e)),
                }
                // POLLHUP too: the thread closed its end of the pipe.
                let ready = |i: Option<usize>| {
                    i.and_then(|i| fds.get(i))
                        .is_some_and(|fd| fd.revents().is_some_and(|r| !r.is_empty()))
                };
                (ready(Some(0)), ready(done_at), ready(notes_at))
            };
            if noted {
                self.read_notes();
            }
            if signalled {
                self.read_signals();
            }
            if finished {
                self.queue.push_back(Event::Done);
            }
        }
    }

    /// Takes the reaper's notes: `s` when COMMAND stopped. Stops reading at EOF.
    fn read_notes(&mut self) {
        let Some(fd) = &self.notes else { return };
        let mut buf = [0u8; 64];
        match nix::unistd::read(fd, &mut buf) {
            Ok(0) => self.notes = None,
            Ok(n) => {
                for _ in buf[..n].iter().filter(|&&b| b == b's') {
                    self.queue.push_back(Event::CommandStopped);
                }
            }
            Err(Errno::EINTR | Errno::EAGAIN) => {}
            Err(_) => self.notes = None,
        }
    }

    /// Takes every pending signal: SIGCHLD reaps, the others are queued.
    fn read_signals(&mut self) {
        loop {
            match self.signals.read_signal() {
                Ok(Some(info)) => {
                    let signo = i32::try_from(info.ssi_signo).unwrap_or(0);
                    if signo == libc::SIGCHLD {
                        self.reap();
                    } else if let Ok(sig) = Signal::try_from(signo) {
                        self.queue.push_back(Event::Signal(sig));
                    }
                }
                Err(Errno::EINTR) => {}
                // None: nothing left (the descriptor does not block).
                Ok(None) | Err(_) => return,
            }
        }
    }

    /// Collects the child's state changes (SIGCHLD coalesces: loop until none is left).
    fn reap(&mut self) {
        while !self.reaped {
            let flags = WaitPidFlag::WNOHANG | WaitPidFlag::WUNTRACED;
            match nix::sys::wait::waitpid(self.child, Some(flags)) {
                Ok(st @ WaitStatus::Stopped(..)) => self.queue.push_back(Event::Child(Ok(st))),
                Ok(st @ (WaitStatus::Exited(..) | WaitStatus::Signaled(..))) => {
                    self.reaped = true;
                    self.queue.push_back(Event::Child(Ok(st)));
                }
                Err(Errno::EINTR) => {}
                Err(e) => {
                    self.reaped = true;
                    self.queue.push_back(Event::Child(Err(e)));
                }
                // StillAlive, or a change we did not ask for.
                Ok(_) => return,
            }
        }
    }

    /// Waits (at most `within`) until the child is gone, ignoring everything else: for
    /// a child that was killed or whose exec failed.
    fn wait_exit(&mut self, within: Duration) {
        let until = Instant::now().checked_add(within);
        while !self.reaped {
            match self.next(until, None) {
                Ok(Event::Timeout) | Err(_) => return,
                Ok(_) => {}
            }
        }
    }
}

/// The blocked signals: the forwarded ones rwdir was not started with ignored, and
/// SIGCHLD, all read from `fd`.
#[derive(Debug)]
struct Signals {
    fd: SignalFd,
    /// The mask rwdir started with, restored in the child before exec.
    original_mask: SigSet,
}

impl Signals {
    /// Blocks SIGINT, SIGTERM and SIGHUP in the calling (only) thread, except those
    /// rwdir was started with ignored (`nohup`): they stay ignored, for COMMAND too.
    /// Blocks SIGCHLD too, after making sure it is not ignored (so that the child can be
    /// waited for). Opens a signalfd for them.
    fn block() -> Result<Signals, Error> {
        // SAFETY: SIG_DFL installs no handler; no other thread exists yet.
        unsafe {
            libc::signal(libc::SIGCHLD, libc::SIG_DFL);
        }
        let mut set = SigSet::empty();
        for sig in FORWARDED {
            if !ignored(sig) {
                set.add(sig);
            }
        }
        set.add(Signal::SIGCHLD);
        let original_mask = set
            .thread_swap_mask(SigmaskHow::SIG_BLOCK)
            .map_err(|e| Error::sys("block signals", e))?;
        let fd = SignalFd::with_flags(&set, SfdFlags::SFD_NONBLOCK | SfdFlags::SFD_CLOEXEC)
            .map_err(|e| Error::sys("watch signals", e));
        match fd {
            Ok(fd) => Ok(Signals { fd, original_mask }),
            Err(e) => {
                let _ = nix::sys::signal::sigprocmask(
                    SigmaskHow::SIG_SETMASK,
                    Some(&original_mask),
                    None,
                );
                Err(e)
            }
        }
    }
}

/// Whether `sig` is ignored (SIG_IGN).
fn ignored(sig: Signal) -> bool {
    let mut old = std::mem::MaybeUninit::<libc::sigaction>::zeroed();
    // SAFETY: a null new action only reads the current one into `old`.
    let rc = unsafe { libc::sigaction(sig as libc::c_int, std::ptr::null(), old.as_mut_ptr()) };
    // SAFETY: zero-initialised, and filled in by a successful sigaction.
    rc == 0 && unsafe { old.assume_init() }.sa_sigaction == libc::SIG_IGN
}

/// The controlling terminal's foreground, handed to COMMAND's group while it runs.
#[derive(Debug)]
struct Terminal {
    /// Whether rwdir owned the foreground and gave it to COMMAND.
    handed: std::cell::Cell<bool>,
}

impl Terminal {
    /// If rwdir's group is the foreground of the terminal on stdin, makes `pgid` the
    /// foreground instead.
    fn hand_over(pgid: Pid) -> Terminal {
        let t = Terminal {
            handed: std::cell::Cell::new(false),
        };
        if foreground() {
            t.handed.set(set_foreground(pgid));
        }
        t
    }

    /// Takes the foreground back, if it was handed over.
    fn take_back(&self) {
        if self.handed.replace(false) {
            set_foreground(nix::unistd::getpgrp());
        }
    }

    /// COMMAND was stopped: by ^Z while it had the terminal, or by SIGTTIN/SIGTTOU
    /// because it used the terminal while rwdir ran in the background. As a job of the
    /// shell, rwdir stops too, so that the shell gets the terminal back and reports the
    /// job stopped. When continued (`fg`, `bg`), rwdir gives the terminal to COMMAND if
    /// it is in the foreground again, and continues COMMAND.
    ///
    /// Without a terminal on stdin there is no job control to follow: whoever stopped
    /// COMMAND continues it.
    fn follow_stop(&self, pgid: Pid) {
        if !self.handed.get() && !has_terminal() {
            return;
        }
        self.take_back();
        let _ = nix::sys::signal::kill(nix::unistd::getpid(), Signal::SIGTSTP);
        // Here once continued (or at once if the stop signal was discarded).
        if foreground() {
            self.handed.set(set_foreground(pgid));
        }
        signal_group(pgid, Signal::SIGCONT);
    }
}

/// Whether stdin is rwdir's controlling terminal.
fn has_terminal() -> bool {
    nix::unistd::tcgetpgrp(io::stdin().as_fd()).is_ok()
}

/// Whether rwdir's process group is the foreground of the terminal on stdin.
fn foreground() -> bool {
    let stdin = io::stdin();
    nix::unistd::tcgetpgrp(stdin.as_fd()).is_ok_and(|fg| fg == nix::unistd::getpgrp())
}

/// `tcsetpgrp(stdin, pgid)` with SIGTTOU ignored (a background caller would otherwise
/// be stopped). Returns whether it worked.
fn set_foreground(pgid: Pid) -> bool {
    // SAFETY: SIG_IGN installs no handler; the old disposition is restored right after.
    let old = unsafe { libc::signal(libc::SIGTTOU, libc::SIG_IGN) };
    let stdin = io::stdin();
    let ok = nix::unistd::tcsetpgrp(stdin.as_fd(), pgid).is_ok();
    if old != libc::SIG_ERR {
        // SAFETY: restores the disposition read above.
        unsafe {
            libc::signal(libc::SIGTTOU, old);
        }
    }
    ok
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn signal_statuses() {
        assert_eq!(signal_status(Signal::SIGTERM), 143);
        assert_eq!(signal_status(Signal::SIGKILL), 137);
        assert_eq!(signal_status(Signal::SIGINT), 130);
    }

    #[test]
    fn the_cephfs_notice_names_the_lease_the_session_timeout_and_eviction() {
        let line = ceph_line(Duration::from_secs(45));
        assert!(
            line.starts_with("still waiting after the lease (45 s)"),
            "{line}"
        );
        assert!(line.contains("session_timeout"), "{line}");
        assert!(line.contains("client evict id=<n>"), "{line}");
    }
}
