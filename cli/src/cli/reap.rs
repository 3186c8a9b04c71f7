//! The reaper: the process between rwdir and COMMAND that makes the lock last as long
//! as the job, every process COMMAND started included. Safe code; its system calls
//! that need `unsafe` are in [`super::spawn`].
//!
//! rwdir forks it before taking the lock ([`super::spawn::Child::fork`]). It is the
//! leader of the process group that the holder record names, so the library judges the
//! holder alive while it lives. It:
//!
//! - blocks every signal (it must die of nothing but SIGKILL; what rwdir forwards to the
//!   group is for COMMAND), arms `PR_SET_PDEATHSIG(`[`KILL_JOB`]`)` and becomes a child
//!   subreaper (`PR_SET_CHILD_SUBREAPER`): an orphan of the job, however it left the
//!   group or session (`setsid`, a double fork, a daemon), becomes its child instead of
//!   init's;
//! - on "go", starts COMMAND in its group ([`super::spawn::start_command`]), then reaps
//!   every child until none is left. When COMMAND stops, it writes `s` on the notes
//!   pipe, so that rwdir follows the stop as a job of the shell. When COMMAND exits and
//!   processes of the job remain, it says so once on stderr;
//! - when no child is left, ends as COMMAND did: its exit status, or death by the same
//!   signal (without a core dump), which rwdir reports as COMMAND's;
//! - on [`KILL_JOB`] from rwdir (lock lost), or when rwdir is gone (the parent-death
//!   signal, or a new parent), kills every process of the job: stops each, kills it,
//!   and repeats until none is left (a process forking meanwhile has its children
//!   found on the next pass), then exits.

use std::fs;
use std::os::fd::{AsRawFd, OwnedFd};
use std::time::Duration;

use nix::errno::Errno;
use nix::libc;
use nix::sys::signal::{SigSet, Signal};
use nix::sys::signalfd::{SfdFlags, SignalFd};
use nix::unistd::Pid;

use super::exec::Prepared;
use super::say;
use super::spawn::{self, GO, GO_LEN, NOT_STARTED, ORPHANED, Reaper, START_ERROR};

/// The signal that tells the reaper to kill the whole job: its parent-death signal, and
/// what rwdir sends it when the lock is lost and SIGKILL is due. From anyone else, with
/// rwdir alive, it is ignored.
pub(crate) const KILL_JOB: Signal = Signal::SIGUSR2;

/// The reaper's ends of its pipes to rwdir.
#[derive(Debug)]
pub(crate) struct Pipes {
    /// "go" and the fencing token (see [`super::spawn::Child::go`]).
    pub(crate) go: OwnedFd,
    /// Where a failure to start COMMAND is reported; EOF once COMMAND executes.
    pub(crate) errors: OwnedFd,
    /// `s` each time COMMAND stops.
    pub(crate) notes: OwnedFd,
}

/// The reaper's life (see the module's documentation); never returns.
pub(crate) fn run(
    cmd: &'static Prepared,
    mask: &SigSet,
    parent: Pid,
    opts: Reaper,
    pipes: Pipes,
) -> ! {
    let _ = nix::unistd::setpgid(Pid::from_raw(0), Pid::from_raw(0));
    let _ = SigSet::all().thread_block();
    let errors = pipes.errors.as_raw_fd();
    let setup = nix::sys::prctl::set_pdeathsig(KILL_JOB)
        .and_then(|()| nix::sys::prctl::set_child_subreaper(true));
    if let Err(e) = setup {
        spawn::report(errors, START_ERROR, e as i32);
        spawn::exit(1);
    }
    if nix::unistd::getppid() != parent {
        spawn::exit(ORPHANED);
    }
    let Some(token) = wait_for_go(&pipes.go) else {
        spawn::exit(NOT_STARTED);
    };
    drop(pipes.go);
    let mut watched = SigSet::empty();
    watched.add(Signal::SIGCHLD);
    watched.add(KILL_JOB);
    let signals = match SignalFd::with_flags(&watched, SfdFlags::SFD_CLOEXEC) {
        Ok(fd) => fd,
        Err(e) => {
            spawn::report(errors, START_ERROR, e as i32);
            spawn::exit(1);
        }
    };
    // Never block on rwdir (stopped, say): a note that does not fit is dropped.
    let _ = nix::fcntl::fcntl(
        &pipes.notes,
        nix::fcntl::FcntlArg::F_SETFL(nix::fcntl::OFlag::O_NONBLOCK),
    );
    let command = match spawn::start_command(cmd, mask, token, errors) {
        Ok(pid) => pid,
        Err(e) => {
            spawn::report(errors, START_ERROR, e as i32);
            spawn::exit(1);
        }
    };
    // COMMAND executed (or failed to, and said so): rwdir sees EOF.
    drop(pipes.errors);

    let me = nix::unistd::getpid();
    let mut status: Option<i32> = None;
    let mut said = false;
    loop {
        loop {
            match spawn::wait_any() {
                Ok(None) => break,
                Ok(Some((pid, st))) if pid == command => {
                    if libc::WIFSTOPPED(st) {
                        let _ = nix::unistd::write(&pipes.notes, b"s");
                    } else if libc::WIFEXITED(st) || libc::WIFSIGNALED(st) {
                        status = Some(st);
                    }
                }
                Ok(Some(_)) | Err(Errno::EINTR) => {}
                // ECHILD: the whole job is done.
                Err(_) => finish(status),
            }
        }
        if status.is_some() && !said {
            let left = descendants(me);
            if !left.is_empty() {
                if !opts.quiet {
                    say(&holding_line(&left));
                }
                said = true;
            }
        }
        if let Ok(Some(info)) = signals.read_signal()
            && i32::try_from(info.ssi_signo).is_ok_and(|s| s == KILL_JOB as i32)
        {
            let from_rwdir = i32::try_from(info.ssi_pid).is_ok_and(|p| p == parent.as_raw());
            if from_rwdir || nix::unistd::getppid() != parent {
                kill_job(me);
                spawn::exit(128 + libc::SIGKILL);
            }
        }
    }
}

/// Reads "go" and the token; `None` on EOF (the lock was not obtained, or rwdir died).
fn wait_for_go(go: &OwnedFd) -> Option<u64> {
    let mut msg = [0u8; GO_LEN];
    let mut got = 0;
    while got < GO_LEN {
        match nix::unistd::read(go, &mut msg[got..]) {
            Ok(0) => return None,
            Ok(n) => got += n,
            Err(Errno::EINTR) => {}
            Err(_) => return None,
        }
    }
    if msg[0] != GO {
        return None;
    }
    let mut token = [0u8; 8];
    token.copy_from_slice(&msg[1..]);
    Some(u64::from_le_bytes(token))
}

/// Ends the reaper as COMMAND ended (`status`, a raw wait status).
fn finish(status: Option<i32>) -> ! {
    match status {
        Some(st) if libc::WIFEXITED(st) => spawn::exit(libc::WEXITSTATUS(st)),
        Some(st) if libc::WIFSIGNALED(st) => spawn::die_of(libc::WTERMSIG(st)),
        _ => spawn::exit(1),
    }
}

/// `COMMAND exited; holding the lock until its 2 remaining processes exit: pids 4, 7`.
fn holding_line(left: &[i32]) -> String {
    let pids = left
        .iter()
        .map(i32::to_string)
        .collect::<Vec<_>>()
        .join(", ");
    match left.len() {
        1 => format!(
            "COMMAND exited; holding the lock until its 1 remaining process exits: pid {pids}"
        ),
        n => format!(
            "COMMAND exited; holding the lock until its {n} remaining processes exit: pids {pids}"
        ),
    }
}

/// Kills every process of the job (every descendant of `me`) and reaps them, until no
/// child is left.
fn kill_job(me: Pid) {
    // How long to pause after a pass that reaped nothing: a process we may not signal
    // (another user's) is waited for, without spinning.
    let mut pause = Duration::from_millis(1);
    loop {
        let left = descendants(me);
        // Stopped first, so that none forks between the listing and its death; a child
        // forked before is listed on the next pass (it becomes our child).
        for &pid in &left {
            let _ = nix::sys::signal::kill(Pid::from_raw(pid), Signal::SIGSTOP);
        }
        for &pid in &left {
            let _ = nix::sys::signal::kill(Pid::from_raw(pid), Signal::SIGKILL);
        }
        let mut reaped = false;
        loop {
            match spawn::wait_any() {
                Ok(Some(_)) => reaped = true,
                Err(Errno::EINTR) => {}
                Ok(None) => break,
                // ECHILD: none left.
                Err(_) => return,
            }
        }
        if reaped {
            pause = Duration::from_millis(1);
        } else {
            // The killed are not gone yet (or may not be killed): look again shortly.
            std::thread::sleep(pause);
            pause = (pause * 2).min(Duration::from_millis(100));
        }
    }
}

/// The live (not zombie) descendants of `root`, in increasing pid order, from `/proc`.
fn descendants(root: Pid) -> Vec<i32> {
    let Ok(dir) = fs::read_dir("/proc") else {
        return Vec::new();
    };
    let mut procs: Vec<(i32, i32)> = Vec::new();
    for entry in dir.flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|n| n.parse::<i32>().ok())
        else {
            continue;
        };
        if let Some(ppid) = live_parent(pid) {
            procs.push((pid, ppid));
        }
    }
    let mut found = Vec::new();
    let mut frontier = vec![root.as_raw()];
    while let Some(parent) = frontier.pop() {
        for &(pid, ppid) in &procs {
            if ppid == parent {
                found.push(pid);
                frontier.push(pid);
            }
        }
    }
    found.sort_unstable();
    found
}

/// The parent of `pid`, if it exists and has not exited.
fn live_parent(pid: i32) -> Option<i32> {
    let stat = fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // `pid (comm) state ppid ...`; comm may contain anything, `)` included.
    let (_, rest) = stat.rsplit_once(')')?;
    let mut fields = rest.split_whitespace();
    let state = fields.next()?;
    if matches!(state, "Z" | "X" | "x") {
        return None;
    }
    fields.next()?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_holding_line() {
        assert_eq!(
            holding_line(&[42]),
            "COMMAND exited; holding the lock until its 1 remaining process exits: pid 42"
        );
        assert_eq!(
            holding_line(&[4, 7]),
            "COMMAND exited; holding the lock until its 2 remaining processes exit: pids 4, 7"
        );
    }

    #[test]
    fn our_own_children_are_descendants() {
        let me = nix::unistd::getpid();
        let mut child = std::process::Command::new("sleep")
            .arg("1000")
            .spawn()
            .expect("spawn sleep");
        let pid = i32::try_from(child.id()).expect("pid");
        assert!(descendants(me).contains(&pid));
        let _ = child.kill();
        let _ = child.wait();
        assert!(!descendants(me).contains(&pid));
    }
}
