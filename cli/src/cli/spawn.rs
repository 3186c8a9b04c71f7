//! Starting COMMAND's process before the lock is taken, and letting it execute COMMAND
//! after: the one module of the command with `unsafe` code, behind a safe interface
//! ([`Child::fork`], [`Child::go`], [`Child::abort`], and for the reaper
//! [`start_command`], [`wait_any`], [`die_of`], [`exit`]).
//!
//! The lock's holder record must name COMMAND's process group, so the child is started
//! first: it makes its own group, arms `PR_SET_PDEATHSIG`, and blocks on a "go" pipe.
//! The parent takes the lock for that group and then writes "go" and the fencing token.
//! If the lock is not obtained, the child is killed without ever executing.
//!
//! By default the child is the **reaper** ([`super::reap`]): a `fork` of rwdir that
//! stays in rwdir's code, a child subreaper, and starts COMMAND in its group on "go"
//! with [`start_command`], then waits until every process of the job has exited. With
//! `--no-wait-children` the child is COMMAND's own process, made with `clone(CLONE_VM)`
//! (below): it puts the token into its prepared environment and executes COMMAND.
//! Between its start and its exec such a child calls only async-signal-safe functions
//! and never allocates: everything it needs was prepared ([`super::exec::Prepared`]).
//!
//! Why not `posix_spawn` (nix's `spawn`) or `std::process::Command`: `posix_spawn`
//! executes at once, but COMMAND must not run before the lock is granted, and it cannot
//! arm `PR_SET_PDEATHSIG`; `Command` with a `pre_exec` hook forks, which copies rwdir's
//! page tables.
//!
//! Why `clone(CLONE_VM)`, as `posix_spawn` makes its child, not `fork`: the child
//! shares rwdir's memory until it execs, on a stack of its own. That spares the copy of
//! rwdir's page tables and every copy-on-write fault rwdir would take while it takes the
//! lock. Measured: `fork` + touching 60 pages 150 µs, `clone(CLONE_VM)` 11 µs; for
//! `rwdir read DIR -- true` in interleaved `perf stat` rounds, 2,041 µs with `fork`
//! against 1,859 µs (docs/notes/command-startup.md). What the child reads (the prepared
//! command, its arguments) is leaked, so it is never freed or changed under it.
//!
//! Why the reaper is a `fork`, not a `clone(CLONE_VM)` child nor a re-executed rwdir: it
//! runs for as long as the job, in Rust code that allocates, so it needs memory of its
//! own; executing rwdir again would cost a Rust program's start-up (~0.9 ms) before
//! COMMAND's exec, where the reaper, `fork` included, costs ~0.5 ms per run in all
//! (docs/notes/command-startup.md).
//! The reaper then starts COMMAND with `clone(CLONE_VM | CLONE_VFORK)`, as
//! `posix_spawn` does: it is suspended until COMMAND's exec (or exit), so the child can
//! use its memory, `errno` included, undisturbed.

use std::io;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};

use nix::errno::Errno;
use nix::fcntl::OFlag;
use nix::libc;
use nix::sys::signal::{SigSet, SigmaskHow, Signal};
use nix::unistd::Pid;

use super::Error;
use super::exec::{Prepared, TOKEN_DIGITS};

/// The "go" message: one byte, then the token as 8 little-endian bytes.
pub(crate) const GO_LEN: usize = 9;
pub(crate) const GO: u8 = b'g';

/// The first byte of a message on the error pipe: COMMAND's exec failed.
const EXEC_ERROR: u8 = b'x';
/// The first byte of a message on the error pipe: the reaper could not start COMMAND.
pub(crate) const START_ERROR: u8 = b's';
/// An error message: its kind, then an `errno` as 4 little-endian bytes.
const ERROR_LEN: usize = 5;

/// The stack of COMMAND's process until it execs (it shares rwdir's memory until then).
const CHILD_STACK: usize = 64 * 1024;

/// What a `clone(CLONE_VM)` child is started with: leaked, never freed or changed (the
/// child shares our memory until it execs).
struct ChildArgs {
    cmd: &'static Prepared,
    mask: SigSet,
    parent: Pid,
    /// Started by rwdir: make a process group, wait for "go" and the token on this
    /// descriptor. Started by the reaper (`None`): stay in its group, go at once.
    go: Option<RawFd>,
    /// The token, when `go` is `None`.
    token: u64,
    errors: RawFd,
    /// Our ends of the two pipes, which the child closes in its own descriptor table
    /// (-1: none).
    ours: [RawFd; 2],
}

/// COMMAND's process (or the reaper that will start it), waiting for "go".
#[derive(Debug)]
pub(crate) struct Child {
    pid: Pid,
    go: Option<OwnedFd>,
    exec_errors: OwnedFd,
    /// The reaper's notes ([`super::reap`]), read by rwdir's event loop.
    notes: Option<OwnedFd>,
}

/// What the child's exec did.
#[derive(Debug)]
pub(crate) enum Started {
    /// COMMAND runs.
    Running,
    /// The exec failed with this error; the child exits with status 127.
    Failed(io::Error),
    /// The reaper could not start COMMAND's process (it then exits 1).
    CannotStart(io::Error),
}

/// How the reaper is to run: see [`super::reap`].
#[derive(Debug, Clone, Copy)]
pub(crate) struct Reaper {
    /// `--quiet`: do not say that the lock is held for COMMAND's leftovers.
    pub(crate) quiet: bool,
}

impl Child {
    /// Starts the child for `cmd`. `mask` is the signal mask to restore before exec.
    ///
    /// Must be called while this is the only thread of the process, from the thread
    /// that will stay alive as long as COMMAND runs (the parent-death signal fires when
    /// the forking thread exits): in rwdir, the main thread, before any other starts.
    ///
    /// With `reaper`, the child is the reaper ([`super::reap`]), which starts COMMAND on
    /// "go" and waits for all of the job; without, it is COMMAND's own process.
    ///
    /// # Errors
    ///
    /// [`Error::Sys`] if a pipe, the child's stack or the child cannot be made.
    pub(crate) fn fork(
        cmd: &'static Prepared,
        mask: &SigSet,
        reaper: Option<Reaper>,
    ) -> Result<Child, Error> {
        let (go_r, go_w) =
            nix::unistd::pipe2(OFlag::O_CLOEXEC).map_err(|e| Error::sys("create a pipe", e))?;
        let (err_r, err_w) =
            nix::unistd::pipe2(OFlag::O_CLOEXEC).map_err(|e| Error::sys("create a pipe", e))?;
        if let Some(reaper) = reaper {
            return fork_reaper(cmd, mask, reaper, (go_r, go_w), (err_r, err_w));
        }
        let args: &'static ChildArgs = Box::leak(Box::new(ChildArgs {
            cmd,
            mask: *mask,
            parent: nix::unistd::getpid(),
            go: Some(go_r.as_raw_fd()),
            token: 0,
            errors: err_w.as_raw_fd(),
            ours: [go_w.as_raw_fd(), err_r.as_raw_fd()],
        }));
        let stack = child_stack()?;
        // SAFETY: `child_entry` runs in a new process that shares our memory (CLONE_VM)
        // but has its own descriptor table and signal dispositions (no CLONE_FILES, no
        // CLONE_SIGHAND), on `stack`, which nothing else uses and which is never freed.
        // It reads only `args` and what it points to, all leaked: never freed or
        // changed. It writes only its own stack and the token's bytes in the leaked
        // environment, which we never read. It calls only async-signal-safe functions
        // (no allocation, no lock) and ends in `execve` or `_exit`, after which it no
        // longer shares our memory. It shares our main thread's thread pointer, so a
        // failing libc call in it would set that thread's `errno` (other threads have
        // their own): its calls before "go" (`close` of its copies of our descriptors,
        // `setpgid`, `prctl`, `getppid` on itself, `read` of a pipe with the forwarded
        // signals blocked) do not fail, and from "go" until its exec our main thread is
        // blocked reading the exec-error pipe, where `errno` is not looked at.
        let pid = unsafe {
            libc::clone(
                child_entry,
                stack,
                libc::CLONE_VM | libc::SIGCHLD,
                std::ptr::from_ref(args).cast_mut().cast(),
            )
        };
        if pid < 0 {
            return Err(Error::sys("start COMMAND's process", Errno::last()));
        }
        let child = Pid::from_raw(pid);
        // Also here, as shells do, so that the group exists whichever runs first.
        // EACCES (the child already execed) and ESRCH (it died) are harmless.
        let _ = nix::unistd::setpgid(child, child);
        drop(go_r);
        drop(err_w);
        Ok(Child {
            pid: child,
            go: Some(go_w),
            exec_errors: err_r,
            notes: None,
        })
    }

    /// The child's pid, which is also its process group id.
    pub(crate) fn pid(&self) -> Pid {
        self.pid
    }

    /// The read end of the reaper's notes, if the child is a reaper.
    pub(crate) fn take_notes(&mut self) -> Option<OwnedFd> {
        self.notes.take()
    }

    /// Lets the child execute COMMAND with fencing `token` (ignored for readers) and
    /// reports whether the exec worked.
    ///
    /// # Errors
    ///
    /// [`Error::Sys`] if the child is gone before it got the message.
    pub(crate) fn go(&mut self, token: u64) -> Result<Started, Error> {
        let Some(go) = self.go.take() else {
            return Err(Error::sys("start COMMAND twice", Errno::EINVAL));
        };
        let mut msg = [0u8; GO_LEN];
        msg[0] = GO;
        msg[1..].copy_from_slice(&token.to_le_bytes());
        let sent = write_all(&go, &msg);
        drop(go);
        // EOF: the exec worked (the pipe is close-on-exec). Otherwise: what failed, and
        // its errno.
        let mut buf = [0u8; ERROR_LEN];
        let mut got = 0;
        while got < buf.len() {
            match nix::unistd::read(&self.exec_errors, &mut buf[got..]) {
                Ok(0) => break,
                Ok(n) => got += n,
                Err(Errno::EINTR) => {}
                Err(e) => return Err(Error::sys("start COMMAND", e)),
            }
        }
        if got == buf.len() {
            let mut errno = [0u8; 4];
            errno.copy_from_slice(&buf[1..]);
            let error = io::Error::from_raw_os_error(i32::from_le_bytes(errno));
            Ok(match buf[0] {
                EXEC_ERROR => Started::Failed(error),
                _ => Started::CannotStart(error),
            })
        } else {
            // The child never got "go" (it died) and so reported nothing.
            sent.map_err(|e| Error::sys("start COMMAND", e))?;
            Ok(Started::Running)
        }
    }

    /// Kills a child that has not been told to go (it never executes COMMAND).
    pub(crate) fn abort(&mut self) {
        drop(self.go.take());
        let _ = nix::sys::signal::kill(self.pid, Signal::SIGKILL);
    }
}

/// [`Child::fork`] of a reaper: a plain `fork` (see the module's documentation), whose
/// child runs [`super::reap::run`] and never returns.
fn fork_reaper(
    cmd: &'static Prepared,
    mask: &SigSet,
    reaper: Reaper,
    (go_r, go_w): (OwnedFd, OwnedFd),
    (err_r, err_w): (OwnedFd, OwnedFd),
) -> Result<Child, Error> {
    let (notes_r, notes_w) =
        nix::unistd::pipe2(OFlag::O_CLOEXEC).map_err(|e| Error::sys("create a pipe", e))?;
    let parent = nix::unistd::getpid();
    // SAFETY: rwdir is single-threaded here (a precondition of `Child::fork`), so the
    // child is a complete copy of a consistent process (no lock held by another
    // thread) and may run any code: it runs `reap::run`, which ends in `exit`.
    match unsafe { nix::unistd::fork() } {
        Err(e) => Err(Error::sys("start COMMAND's process", e)),
        Ok(nix::unistd::ForkResult::Child) => {
            drop(go_w);
            drop(err_r);
            drop(notes_r);
            super::reap::run(
                cmd,
                mask,
                parent,
                reaper,
                super::reap::Pipes {
                    go: go_r,
                    errors: err_w,
                    notes: notes_w,
                },
            )
        }
        Ok(nix::unistd::ForkResult::Parent { child }) => {
            // As for COMMAND's process: the group exists whichever runs first.
            let _ = nix::unistd::setpgid(child, child);
            Ok(Child {
                pid: child,
                go: Some(go_w),
                exec_errors: err_r,
                notes: Some(notes_r),
            })
        }
    }
}

/// In the reaper: starts COMMAND's process in the reaper's process group with fencing
/// `token` (ignored for readers), and returns once it has executed COMMAND or failed to
/// (then it reports on `errors` and exits 127). `mask` is the signal mask to give it.
///
/// Must be called from the reaper's only thread.
///
/// # Errors
///
/// The `clone` failed.
pub(crate) fn start_command(
    cmd: &'static Prepared,
    mask: &SigSet,
    token: u64,
    errors: RawFd,
) -> Result<Pid, Errno> {
    let args: &'static ChildArgs = Box::leak(Box::new(ChildArgs {
        cmd,
        mask: *mask,
        parent: nix::unistd::getpid(),
        go: None,
        token,
        errors,
        ours: [-1, -1],
    }));
    let stack = child_stack().map_err(|_| Errno::ENOMEM)?;
    // (`errors` was made close-on-exec by rwdir, and the reaper never executes: EOF
    // tells rwdir that COMMAND executed.)
    // SAFETY: as in `Child::fork`: `child_entry` runs in a new process that shares our
    // memory on its own `stack` (never freed), reads only the leaked `args`, writes
    // only its stack and the token's bytes in the leaked environment, calls only
    // async-signal-safe functions and ends in `execve` or `_exit`. CLONE_VFORK
    // suspends this (only) thread until then, so nothing here touches the memory the
    // child uses meanwhile, `errno` included.
    let pid = unsafe {
        libc::clone(
            child_entry,
            stack,
            libc::CLONE_VM | libc::CLONE_VFORK | libc::SIGCHLD,
            std::ptr::from_ref(args).cast_mut().cast(),
        )
    };
    if pid < 0 {
        return Err(Errno::last());
    }
    Ok(Pid::from_raw(pid))
}

/// Sends rwdir a failure of the reaper to start COMMAND. Async-signal-safe.
pub(crate) fn report(errors: RawFd, kind: u8, errno: i32) {
    let mut msg = [0u8; ERROR_LEN];
    msg[0] = kind;
    msg[1..].copy_from_slice(&errno.to_le_bytes());
    // SAFETY: writing our own stack buffer to a descriptor we own.
    let _ = unsafe { libc::write(errors, msg.as_ptr().cast(), msg.len()) };
}

/// A child's change of state, from `waitpid(-1, WNOHANG | WUNTRACED)`: `Ok(None)` when
/// children remain but none changed. The raw status, so that a death by any signal,
/// real-time ones included, is seen.
///
/// # Errors
///
/// `ECHILD` when no child is left; `EINTR`.
pub(crate) fn wait_any() -> Result<Option<(Pid, i32)>, Errno> {
    let mut status = 0;
    // SAFETY: `status` is ours to write.
    let pid = unsafe { libc::waitpid(-1, &raw mut status, libc::WNOHANG | libc::WUNTRACED) };
    match pid {
        0 => Ok(None),
        p if p < 0 => Err(Errno::last()),
        p => Ok(Some((Pid::from_raw(p), status))),
    }
}

/// Ends this process by signal `signo`, without a core dump, as COMMAND did; exits
/// 128 + `signo` if the signal does not end it.
pub(crate) fn die_of(signo: i32) -> ! {
    // No core dump of ours, even through a `core_pattern` pipe.
    let _ = nix::sys::prctl::set_dumpable(false);
    // SAFETY: SIG_DFL installs no handler; sigset calls on our own local set.
    unsafe {
        libc::signal(signo, libc::SIG_DFL);
        let mut set = std::mem::zeroed::<libc::sigset_t>();
        libc::sigemptyset(&raw mut set);
        libc::sigaddset(&raw mut set, signo);
        libc::sigprocmask(libc::SIG_UNBLOCK, &raw const set, std::ptr::null_mut());
        libc::raise(signo);
    }
    exit(128 + signo)
}

fn write_all(fd: &OwnedFd, mut buf: &[u8]) -> nix::Result<()> {
    while !buf.is_empty() {
        match nix::unistd::write(fd, buf) {
            Ok(n) => buf = &buf[n..],
            Err(Errno::EINTR) => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// The top of a fresh stack for the child, with a guard page below it; never freed.
fn child_stack() -> Result<*mut libc::c_void, Error> {
    let page = 4096;
    // SAFETY: a new private anonymous mapping; nothing else refers to it.
    let base = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            CHILD_STACK + page,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_STACK,
            -1,
            0,
        )
    };
    if base == libc::MAP_FAILED {
        return Err(Error::sys(
            "make a stack for COMMAND's process",
            Errno::last(),
        ));
    }
    // SAFETY: the lowest page of the mapping just made; an overflow then faults.
    if unsafe { libc::mprotect(base, page, libc::PROT_NONE) } != 0 {
        return Err(Error::sys(
            "make a stack for COMMAND's process",
            Errno::last(),
        ));
    }
    // SAFETY: one past the end of the mapping (stacks grow down); page-aligned.
    Ok(unsafe { base.cast::<u8>().add(CHILD_STACK + page) }.cast())
}

/// The child's first function (see [`Child::fork`]).
extern "C" fn child_entry(arg: *mut libc::c_void) -> libc::c_int {
    // SAFETY: `arg` is the leaked `ChildArgs` that `Child::fork` passed.
    let a: &ChildArgs = unsafe { &*arg.cast::<ChildArgs>() };
    for fd in a.ours {
        if fd >= 0 {
            // SAFETY: closes the child's copies of the parent's ends (its own table):
            // holding the write end of "go" would keep the child from seeing EOF.
            unsafe { libc::close(fd) };
        }
    }
    // SAFETY: see `Child::fork`; `a.cmd` was built by `Prepared::new`.
    unsafe { child_main(a) }
}

/// Exit status of a child that found its parent gone before it could start.
pub(crate) const ORPHANED: i32 = 126;
/// Exit status of a child that was not told to go.
pub(crate) const NOT_STARTED: i32 = 125;
/// Exit status of a child whose exec failed.
const EXEC_FAILED: i32 = 127;

/// The child, between clone and exec. Only async-signal-safe calls; no allocation.
///
/// # Safety
///
/// Call only in the child made by [`Child::fork`] or [`start_command`], with a `cmd`
/// built by [`Prepared::new`] (whose `token_at` points at `TOKEN_DIGITS + 1` writable
/// bytes).
unsafe fn child_main(a: &ChildArgs) -> ! {
    let (cmd, errors) = (a.cmd, a.errors);
    if a.go.is_some() {
        // Our own process group: signals to the group reach COMMAND and its children,
        // and a terminal can make it the foreground. (The reaper's COMMAND stays in the
        // reaper's group.)
        let _ = nix::unistd::setpgid(Pid::from_raw(0), Pid::from_raw(0));
    }
    // Die with our parent (rwdir, or the reaper). Then check the parent did not die
    // before the signal was armed.
    if let Err(e) = nix::sys::prctl::set_pdeathsig(Signal::SIGKILL) {
        report_and_exit(errors, e as i32);
    }
    if nix::unistd::getppid() != a.parent {
        exit(ORPHANED);
    }
    let token = match a.go {
        // SAFETY: forwarded from our caller.
        Some(go) => unsafe { wait_for_go(go) },
        None => a.token,
    };
    if let Some(at) = cmd.token_at {
        let digits = decimal(token);
        let len = digits.iter().position(|&b| b == 0).unwrap_or(TOKEN_DIGITS);
        // SAFETY: `at` has TOKEN_DIGITS + 1 bytes of room (zeroed, so the entry stays
        // NUL-terminated), and len <= TOKEN_DIGITS.
        unsafe { std::ptr::copy_nonoverlapping(digits.as_ptr(), at, len) };
    }
    // SAFETY: forwarded from our caller.
    unsafe { exec_command(cmd, &a.mask, errors) }
}

/// Waits for "go" and returns the token; exits if EOF comes first (the lock was not
/// obtained). Async-signal-safe.
///
/// # Safety
///
/// Only in a child made by [`Child::fork`], whose `go` is the read end of its pipe.
unsafe fn wait_for_go(go: RawFd) -> u64 {
    let mut msg = [0u8; GO_LEN];
    let mut got = 0;
    while got < GO_LEN {
        // SAFETY: reading into our own stack buffer.
        let n = unsafe { libc::read(go, msg[got..].as_mut_ptr().cast(), GO_LEN - got) };
        match n {
            0 => exit(NOT_STARTED),
            n if n < 0 => {
                if Errno::last() != Errno::EINTR {
                    exit(NOT_STARTED);
                }
            }
            // n > 0 and at most GO_LEN - got.
            n => got += n.unsigned_abs(),
        }
    }
    if msg[0] != GO {
        exit(NOT_STARTED);
    }
    let mut token = [0u8; 8];
    token.copy_from_slice(&msg[1..]);
    u64::from_le_bytes(token)
}

/// Executes COMMAND with signal mask `mask`, or reports the failure on `errors` and
/// exits 127. Async-signal-safe.
///
/// # Safety
///
/// As for [`child_main`].
unsafe fn exec_command(cmd: &Prepared, mask: &SigSet, errors: RawFd) -> ! {
    // Give COMMAND the signal mask and dispositions rwdir was started with: unblock what
    // rwdir blocked, and undo the Rust runtime's SIG_IGN of SIGPIPE.
    let _ = nix::sys::signal::sigprocmask(SigmaskHow::SIG_SETMASK, Some(mask), None);
    // SAFETY: SIG_DFL installs no handler.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    }
    // execvp's search, over paths resolved before the fork: skip names that are not
    // there, remember a permission problem, stop at any other error.
    let mut error = Errno::ENOENT;
    let mut denied = false;
    for path in &cmd.paths {
        // SAFETY: `path`, `argv` and `envp` are NUL-terminated, and the arrays end in a
        // null pointer; all were built before the fork.
        unsafe { libc::execve(path.as_ptr(), cmd.argv.as_ptr(), cmd.envp.as_ptr()) };
        match Errno::last() {
            Errno::ENOENT | Errno::ENOTDIR | Errno::ESTALE | Errno::ETIMEDOUT => {}
            Errno::EACCES => denied = true,
            e => {
                error = e;
                break;
            }
        }
    }
    if denied && error == Errno::ENOENT {
        error = Errno::EACCES;
    }
    report_and_exit(errors, error as i32)
}

/// Sends `errno` to rwdir and exits with [`EXEC_FAILED`]. Async-signal-safe.
fn report_and_exit(errors: RawFd, errno: i32) -> ! {
    report(errors, EXEC_ERROR, errno);
    exit(EXEC_FAILED)
}

/// `_exit(status)`: no atexit handler, no destructor, no flush.
pub(crate) fn exit(status: i32) -> ! {
    // SAFETY: `_exit` is async-signal-safe and runs no atexit handlers or destructors.
    unsafe { libc::_exit(status) }
}

/// `n` in decimal, NUL-padded; no allocation.
fn decimal(mut n: u64) -> [u8; TOKEN_DIGITS] {
    let mut rev = [0u8; TOKEN_DIGITS];
    let mut len = 0;
    loop {
        rev[len] = b'0' + (n % 10) as u8;
        len += 1;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    let mut out = [0u8; TOKEN_DIGITS];
    for i in 0..len {
        out[i] = rev[len - 1 - i];
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decimal_digits() {
        let s = |n| {
            let d = decimal(n);
            let len = d.iter().position(|&b| b == 0).unwrap_or(TOKEN_DIGITS);
            String::from_utf8(d[..len].to_vec()).expect("ascii")
        };
        assert_eq!(s(0), "0");
        assert_eq!(s(7), "7");
        assert_eq!(s(1234567890), "1234567890");
        assert_eq!(s(u64::MAX), u64::MAX.to_string());
    }
}
