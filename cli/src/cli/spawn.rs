//! Starting COMMAND's process before the lock is taken, and letting it execute COMMAND
//! after: the one module of the command with `unsafe` code, behind a safe interface
//! ([`Child::fork`], [`Child::go`], [`Child::abort`]).
//!
//! The lock's holder record must name COMMAND's process group, so the child is started
//! first: it makes its own group, arms `PR_SET_PDEATHSIG(SIGKILL)`, and blocks on a
//! "go" pipe. The parent takes the lock for that group and then writes "go" and the
//! fencing token; the child puts the token into its prepared environment and executes
//! COMMAND. If the lock is not obtained, the child is killed without ever executing.
//! Between its start and its exec the child calls only async-signal-safe functions and
//! never allocates: everything it needs was prepared ([`super::exec::Prepared`]).
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
const GO_LEN: usize = 9;
const GO: u8 = b'g';

/// The stack of COMMAND's process until it execs (it shares rwdir's memory until then).
const CHILD_STACK: usize = 64 * 1024;

/// What the child is started with: leaked, never freed or changed (the child shares
/// our memory until it execs).
struct ChildArgs {
    cmd: &'static Prepared,
    mask: SigSet,
    parent: Pid,
    go: RawFd,
    errors: RawFd,
    /// Our ends of the two pipes, which the child closes in its own descriptor table.
    ours: [RawFd; 2],
}

/// COMMAND's process, waiting for "go".
#[derive(Debug)]
pub(crate) struct Child {
    pid: Pid,
    go: Option<OwnedFd>,
    exec_errors: OwnedFd,
}

/// What the child's exec did.
#[derive(Debug)]
pub(crate) enum Started {
    /// COMMAND runs.
    Running,
    /// The exec failed with this error; the child exits with status 127.
    Failed(io::Error),
}

impl Child {
    /// Starts the child for `cmd`. `mask` is the signal mask to restore before exec.
    ///
    /// Must be called while this is the only thread of the process, from the thread
    /// that will stay alive as long as COMMAND runs (the parent-death signal fires when
    /// the forking thread exits): in rwdir, the main thread, before any other starts.
    ///
    /// # Errors
    ///
    /// [`Error::Sys`] if a pipe, the child's stack or the child cannot be made.
    pub(crate) fn fork(cmd: &'static Prepared, mask: &SigSet) -> Result<Child, Error> {
        let (go_r, go_w) =
            nix::unistd::pipe2(OFlag::O_CLOEXEC).map_err(|e| Error::sys("create a pipe", e))?;
        let (err_r, err_w) =
            nix::unistd::pipe2(OFlag::O_CLOEXEC).map_err(|e| Error::sys("create a pipe", e))?;
        let args: &'static ChildArgs = Box::leak(Box::new(ChildArgs {
            cmd,
            mask: *mask,
            parent: nix::unistd::getpid(),
            go: go_r.as_raw_fd(),
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
        })
    }

    /// The child's pid, which is also its process group id.
    pub(crate) fn pid(&self) -> Pid {
        self.pid
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
        write_all(&go, &msg).map_err(|e| Error::sys("start COMMAND", e))?;
        drop(go);
        // EOF: the exec worked (the pipe is close-on-exec). Four bytes: its errno.
        let mut buf = [0u8; 4];
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
            Ok(Started::Failed(io::Error::from_raw_os_error(
                i32::from_le_bytes(buf),
            )))
        } else {
            Ok(Started::Running)
        }
    }

    /// Kills a child that has not been told to go (it never executes COMMAND).
    pub(crate) fn abort(&mut self) {
        drop(self.go.take());
        let _ = nix::sys::signal::kill(self.pid, Signal::SIGKILL);
    }
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
        // SAFETY: closes the child's copies of the parent's ends (its own table):
        // holding the write end of "go" would keep the child from seeing EOF.
        unsafe { libc::close(fd) };
    }
    // SAFETY: see `Child::fork`; `a.cmd` was built by `Prepared::new`.
    unsafe { child_main(a.cmd, &a.mask, a.parent, a.go, a.errors) }
}

/// Exit status of a child that found its parent gone before it could start.
const ORPHANED: i32 = 126;
/// Exit status of a child that was not told to go.
const NOT_STARTED: i32 = 125;
/// Exit status of a child whose exec failed.
const EXEC_FAILED: i32 = 127;

/// The child, between fork and exec. Only async-signal-safe calls; no allocation.
///
/// # Safety
///
/// Call only in the child made by [`Child::fork`], with a `cmd` built by
/// [`Prepared::new`] (whose `token_at` points at `TOKEN_DIGITS + 1` writable bytes).
unsafe fn child_main(cmd: &Prepared, mask: &SigSet, parent: Pid, go: RawFd, errors: RawFd) -> ! {
    // Our own process group: signals to the group reach COMMAND and its children, and a
    // terminal can make it the foreground.
    let _ = nix::unistd::setpgid(Pid::from_raw(0), Pid::from_raw(0));
    // Die with rwdir. Then check the parent did not die before the signal was armed.
    if let Err(e) = nix::sys::prctl::set_pdeathsig(Signal::SIGKILL) {
        report_and_exit(errors, e as i32);
    }
    if nix::unistd::getppid() != parent {
        exit(ORPHANED);
    }
    // Wait for "go" and the token; EOF means the lock was not obtained.
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
    if let Some(at) = cmd.token_at {
        let mut token = [0u8; 8];
        token.copy_from_slice(&msg[1..]);
        let digits = decimal(u64::from_le_bytes(token));
        let len = digits.iter().position(|&b| b == 0).unwrap_or(TOKEN_DIGITS);
        // SAFETY: `at` has TOKEN_DIGITS + 1 bytes of room (zeroed, so the entry stays
        // NUL-terminated), and len <= TOKEN_DIGITS.
        unsafe { std::ptr::copy_nonoverlapping(digits.as_ptr(), at, len) };
    }
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

/// Sends `errno` to the parent and exits with [`EXEC_FAILED`]. Async-signal-safe.
fn report_and_exit(errors: RawFd, errno: i32) -> ! {
    let bytes = errno.to_le_bytes();
    // SAFETY: writing our own stack buffer to a descriptor we own.
    let _ = unsafe { libc::write(errors, bytes.as_ptr().cast(), bytes.len()) };
    exit(EXEC_FAILED)
}

fn exit(status: i32) -> ! {
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
