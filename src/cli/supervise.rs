//! `rwdir read|write`: take the lock for COMMAND's process group, run COMMAND, forward
//! signals, hand over the terminal, watch the lock, and pass COMMAND's status on.
//!
//! Threads (all started after the fork, all with SIGINT, SIGTERM and SIGHUP blocked):
//! one takes the lock, one waits for signals, one waits for the child; the main thread
//! (the child's parent-death thread) decides, with `crossbeam_channel::select!`.

use std::io;
use std::os::fd::AsFd;
use std::path::Path;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, select};
use nix::errno::Errno;
use nix::libc;
use nix::sys::signal::{SigSet, SigmaskHow, Signal};
use nix::sys::wait::{WaitPidFlag, WaitStatus};
use nix::unistd::Pid;
use rwdir::{DirLock, Entry, ReadGuard, Status, WriteGuard};

use super::args::LockArgs;
use super::exec::{Child, Prepared, Started};
use super::{Error, code, message, say};

/// How often the lock is checked while COMMAND runs.
const CHECK_EVERY: Duration = Duration::from_millis(500);
/// How long after SIGTERM a COMMAND that lost its lock gets SIGKILL.
const KILL_AFTER: Duration = Duration::from_secs(10);
/// How long to wait before saying that rwdir waits.
const ANNOUNCE_AFTER: Duration = Duration::from_secs(1);
/// The signals forwarded to COMMAND.
const FORWARDED: [Signal; 3] = [Signal::SIGINT, Signal::SIGTERM, Signal::SIGHUP];

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
}

/// A held lock of either kind.
#[derive(Debug)]
enum Guard {
    Read(ReadGuard),
    Write(WriteGuard),
}

impl Guard {
    fn token(&self) -> u64 {
        match self {
            Guard::Read(_) => 0,
            Guard::Write(g) => g.token(),
        }
    }

    fn check(&self) -> rwdir::Result<()> {
        match self {
            Guard::Read(g) => g.check(),
            Guard::Write(g) => g.check(),
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
    // signals we forward (every later thread inherits the mask).
    let mut builder = DirLock::builder(&args.dir);
    if let Some(lease) = lease {
        builder = builder.lease(lease);
    }
    builder.clone().build().map_err(Error::Dir)?;
    let cmd = Prepared::new(&args.command, mode == Mode::Write, &args.dir)?;
    let signals = Signals::block()?;
    let mut child = Child::fork(&cmd, &signals.original_mask)?;
    let pgid = child.pid();

    // From here on, threads.
    let sig_rx = signals.listen();
    let exit_rx = wait_for(pgid);
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
    let guard = match acquire(&lock, &cancel, mode, args, &sig_rx, &exit_rx) {
        Ok(guard) => guard,
        Err(e) => {
            child.abort();
            let _ = exit_rx.recv_timeout(Duration::from_secs(1));
            return Err(e);
        }
    };

    // Hand the terminal to COMMAND's group (as a shell does), then let it go.
    let terminal = Terminal::hand_over(pgid);
    let started = child.go(guard.token());
    let started = match started {
        Ok(Started::Running) => Ok(()),
        Ok(Started::Failed(source)) => Err(Error::Exec {
            program: cmd.program().to_os_string(),
            source,
        }),
        Err(e) => Err(e),
    };
    if let Err(e) = started {
        terminal.take_back();
        let _ = exit_rx.recv_timeout(Duration::from_secs(1));
        let _ = guard.release();
        return Err(e);
    }

    let outcome = supervise(pgid, &guard, &terminal, &sig_rx, &exit_rx);
    terminal.take_back();
    match outcome {
        Ok(status) => match guard.release() {
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
            drop(guard);
            Err(lost)
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

/// Waits for the lock, saying so after a second, and gives up on a signal.
fn acquire(
    lock: &DirLock,
    cancel: &rwdir::Cancel,
    mode: Mode,
    args: &LockArgs,
    sig_rx: &Receiver<Signal>,
    exit_rx: &Receiver<nix::Result<WaitStatus>>,
) -> Result<Guard, Error> {
    let wait = args.wait();
    // One attempt here first: it never sleeps, and a free lock (the common case) then
    // needs no thread.
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
    let (tx, rx) = crossbeam_channel::bounded(1);
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
        })
        .map_err(|e| Error::Sys {
            action: "start a thread",
            source: e,
        })?;
    let mut announce = if args.quiet || wait.is_some_and(|w| w <= ANNOUNCE_AFTER) {
        crossbeam_channel::never()
    } else {
        crossbeam_channel::after(ANNOUNCE_AFTER)
    };
    loop {
        select! {
            recv(rx) -> got => return match got {
                Ok(guard) => guard.map_err(Error::Lock),
                Err(_) => Err(Error::sys("take the lock", Errno::EINTR)),
            },
            recv(sig_rx) -> sig => {
                if let Ok(signal) = sig {
                    give_up(cancel, &rx);
                    return Err(Error::Interrupted {
                        signal,
                        mode: mode.as_str(),
                        dir: args.dir.clone(),
                    });
                }
            },
            recv(exit_rx) -> _ => {
                // Someone killed the waiting child: COMMAND can no longer run.
                give_up(cancel, &rx);
                return Err(Error::Sys {
                    action: "keep COMMAND's process waiting for the lock",
                    source: io::Error::other("it was killed"),
                });
            },
            recv(announce) -> _ => {
                say(&waiting_line(lock, mode, &args.dir));
                announce = crossbeam_channel::never();
            },
        }
    }
}

/// `waiting for write lock on `DIR`: held by reader pid 4242 on host a (12 s)`.
fn waiting_line(lock: &DirLock, mode: Mode, dir: &Path) -> String {
    let who = lock
        .status()
        .ok()
        .and_then(|st| blocker(&st, mode, std::process::id()).map(Entry::describe))
        .unwrap_or_else(|| "another process".to_string());
    format!(
        "waiting for {} lock on `{}`: held by {who}",
        mode.as_str(),
        dir.display()
    )
}

/// Who is in the way of `me` taking a `mode` lock: another writer, else a queued writer
/// ahead of us, else (for a writer) a reader. A writer that owns `.master_lock` only
/// waits for readers. Dead holders are not in the way for long and are skipped.
fn blocker(st: &Status, mode: Mode, me: u32) -> Option<&Entry> {
    let mine = |e: &Entry| e.holder.as_ref().is_some_and(|h| h.pid == me);
    let in_way = |e: &&Entry| !mine(e) && !e.liveness.is_dead();
    let readers = || match mode {
        Mode::Write => st.readers.iter().find(in_way),
        Mode::Read => None,
    };
    if st.writer.as_ref().is_some_and(mine) {
        return readers();
    }
    st.writer
        .iter()
        .find(in_way)
        .or_else(|| st.pending.iter().take_while(|e| !mine(e)).find(in_way))
        .or_else(readers)
}

/// Waits for COMMAND while forwarding signals and checking the lock. Returns COMMAND's
/// exit status, or [`Error::Lost`].
fn supervise(
    pgid: Pid,
    guard: &Guard,
    terminal: &Terminal,
    sig_rx: &Receiver<Signal>,
    exit_rx: &Receiver<nix::Result<WaitStatus>>,
) -> Result<u8, Error> {
    let tick = crossbeam_channel::tick(CHECK_EVERY);
    let mut lost: Option<(rwdir::Error, Instant)> = None;
    let mut killed = false;
    let status = loop {
        select! {
            recv(exit_rx) -> st => match st {
                Ok(Ok(WaitStatus::Exited(_, code))) => break u8::try_from(code & 0xff).unwrap_or(code::FAILURE),
                Ok(Ok(WaitStatus::Signaled(_, sig, _))) => break signal_status(sig),
                Ok(Ok(WaitStatus::Stopped(..))) => terminal.follow_stop(pgid),
                Ok(Ok(_)) => {}
                Ok(Err(e)) => return Err(Error::sys("wait for COMMAND", e)),
                Err(_) => return Err(Error::sys("wait for COMMAND", Errno::ECHILD)),
            },
            recv(sig_rx) -> sig => {
                if let Ok(sig) = sig {
                    signal_group(pgid, sig);
                }
            },
            recv(tick) -> _ => match &lost {
                None => {
                    if let Err(e) = guard.check() {
                        say(&format!(
                            "{}; stopping COMMAND (SIGTERM now, SIGKILL in {} s)",
                            message(&e),
                            KILL_AFTER.as_secs()
                        ));
                        signal_group(pgid, Signal::SIGTERM);
                        lost = Some((e, Instant::now() + KILL_AFTER));
                    }
                }
                Some((_, kill_at)) if !killed && Instant::now() >= *kill_at => {
                    signal_group(pgid, Signal::SIGKILL);
                    killed = true;
                }
                Some(_) => {}
            },
        }
    };
    match lost {
        Some((e, _)) => Err(Error::Lost(e)),
        None => Ok(status),
    }
}

fn signal_status(sig: Signal) -> u8 {
    code::SIGNAL_BASE.saturating_add(u8::try_from(sig as i32).unwrap_or(0))
}

/// Sends `sig` to COMMAND's process group (also to a group member that outlived
/// COMMAND; never to anyone else, since the group id is COMMAND's pid).
fn signal_group(pgid: Pid, sig: Signal) {
    let _ = nix::sys::signal::killpg(pgid, sig);
}

/// A thread that waits for the child and reports each change (exit, stop).
fn wait_for(pid: Pid) -> Receiver<nix::Result<WaitStatus>> {
    let (tx, rx) = crossbeam_channel::unbounded();
    let spawned = std::thread::Builder::new()
        .name("rwdir-wait".into())
        .spawn(move || {
            loop {
                let st = nix::sys::wait::waitpid(pid, Some(WaitPidFlag::WUNTRACED));
                let done = !matches!(st, Ok(WaitStatus::Stopped(..)) | Err(Errno::EINTR));
                if matches!(st, Err(Errno::EINTR)) {
                    continue;
                }
                if tx.send(st).is_err() || done {
                    return;
                }
            }
        });
    if let Err(e) = spawned {
        // Without the thread nobody reaps the child; report it as the wait's error.
        let (tx2, rx2) = crossbeam_channel::bounded(1);
        let _ = tx2.send(Err(Errno::from_raw(
            e.raw_os_error().unwrap_or(libc::EAGAIN),
        )));
        return rx2;
    }
    rx
}

/// The signals rwdir forwards, blocked in every thread and taken with `sigwait`.
#[derive(Debug)]
struct Signals {
    set: SigSet,
    /// The mask rwdir started with, restored in the child before exec.
    original_mask: SigSet,
}

impl Signals {
    /// Blocks SIGINT, SIGTERM and SIGHUP in the calling (only) thread, except those
    /// rwdir was started with ignored (`nohup`): they stay ignored, for COMMAND too.
    /// Makes sure SIGCHLD is not ignored, so that the child can be waited for.
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
        let original_mask = set
            .thread_swap_mask(SigmaskHow::SIG_BLOCK)
            .map_err(|e| Error::sys("block signals", e))?;
        Ok(Signals { set, original_mask })
    }

    /// A thread that takes the blocked signals as they come.
    fn listen(&self) -> Receiver<Signal> {
        if self.set.iter().next().is_none() {
            return crossbeam_channel::never();
        }
        let (tx, rx) = crossbeam_channel::unbounded();
        let set = self.set;
        let spawned = std::thread::Builder::new()
            .name("rwdir-signals".into())
            .spawn(move || {
                while let Ok(sig) = set.wait() {
                    if tx.send(sig).is_err() {
                        return;
                    }
                }
            });
        match spawned {
            Ok(_) => rx,
            // The signals stay blocked: they are not forwarded, and do not kill rwdir.
            Err(_) => crossbeam_channel::never(),
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
}
