//! The watchdog on renewals: a holder whose filesystem stops answering (a network
//! filesystem cut off from its server blocks calls with no timeout, measured on CephFS,
//! docs/notes/dfs-rig.md) must count its lock as lost once no renewal has completed for
//! lease − lease/6, without waiting for the blocked call, and `rwdir write` must then
//! stop COMMAND and exit 74 while the filesystem is still frozen.
//!
//! The filesystem is the tiny FUSE filesystem of tests/doctor/lyingfs.rs (honest mode),
//! mounted in this process, with its freeze switch: while frozen, every call on the
//! mount blocks until it is thawed. rwdir classifies it as a FUSE, shared, filesystem.
//!
//! A custom harness (libtest-mimic): where no FUSE mount can be made (no /dev/fuse, not
//! root) the tests are reported as ignored, with the reason, never as passed.

#![allow(clippy::disallowed_methods)]

#[path = "cli/bin.rs"]
mod bin;
#[path = "doctor/lyingfs.rs"]
mod lyingfs;

use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use libtest_mimic::Failed;

/// The lease of every test: a heartbeat every second, the watchdog at 2.5 s.
const LEASE: Duration = Duration::from_secs(3);
/// The generous bound on how long after the freeze the loss must be noticed.
const NOTICED_WITHIN: Duration = Duration::from_secs(8);

fn main() {
    lyingfs::run_fuse_tests(&[
        (
            "a_frozen_filesystem_makes_the_lock_lost_without_a_system_call",
            a_frozen_filesystem_makes_the_lock_lost_without_a_system_call,
        ),
        (
            "rwdir_write_stops_command_and_exits_74_while_the_filesystem_is_frozen",
            rwdir_write_stops_command_and_exits_74_while_the_filesystem_is_frozen,
        ),
    ]);
}

fn fail(what: impl Into<String>) -> Failed {
    Failed::from(what.into())
}

/// A frozen mount and a fresh directory on it.
struct Mount {
    freeze: Arc<lyingfs::Freeze>,
    dir: std::path::PathBuf,
    // Dropped in this order: the session (unmount) before the mount point.
    _session: fuser::BackgroundSession,
    point: tempfile::TempDir,
}

fn mount(name: &str) -> Result<Mount, Failed> {
    let point = tempfile::tempdir()?;
    let (session, freeze) = lyingfs::mount_freezable(point.path(), name)?;
    let dir = lyingfs::shared_dir(point.path()).map_err(fail)?;
    Ok(Mount {
        freeze,
        dir,
        _session: session,
        point,
    })
}

/// Runs `f` on a thread of its own and waits at most `within` for it: `None` if it did
/// not return in time (then it is left blocked, until the filesystem is thawed).
fn bounded<T: Send + 'static>(
    within: Duration,
    f: impl FnOnce() -> T + Send + 'static,
) -> Option<T> {
    let (tx, rx) = crossbeam_channel::bounded(1);
    std::thread::spawn(move || {
        let _ = tx.send(f());
    });
    rx.recv_timeout(within).ok()
}

/// The system call number a thread of this process named `name` is in, read from
/// `/proc/self/task/TID/syscall` (`running` if none), or `None` if there is no such
/// thread.
fn syscall_of(name: &str) -> Option<String> {
    for task in std::fs::read_dir("/proc/self/task").ok()?.flatten() {
        let comm = std::fs::read_to_string(task.path().join("comm")).unwrap_or_default();
        if comm.trim() == name {
            let sc = std::fs::read_to_string(task.path().join("syscall")).unwrap_or_default();
            return Some(sc.split_whitespace().next().unwrap_or("").to_string());
        }
    }
    None
}

/// Whether the thread is in a call other than a wait on a futex (202 on x86_64, 98 on
/// aarch64), the heartbeat thread's idle state: a call on the frozen mount.
fn in_a_filesystem_call(syscall: &str) -> bool {
    let idle = if cfg!(target_arch = "aarch64") {
        "98"
    } else {
        "202"
    };
    !syscall.is_empty() && syscall != idle && syscall != "running"
}

fn a_frozen_filesystem_makes_the_lock_lost_without_a_system_call() -> Result<(), Failed> {
    let m = mount("rwdirfreeze")?;
    let lock = rwdir::DirLock::builder(&m.dir).lease(LEASE).build()?;
    let w = Arc::new(lock.write()?);

    // Healthy: renewed every lease/3, so never lost, however long it is held.
    let healthy_until = Instant::now() + LEASE * 2;
    while Instant::now() < healthy_until {
        if w.is_lost() {
            return Err(fail("lost while the filesystem answered"));
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    w.check()?;

    let frozen = m.freeze.freeze(m.point.path());
    let noticed = loop {
        if w.is_lost() {
            break frozen.since.elapsed();
        }
        if frozen.since.elapsed() > NOTICED_WITHIN {
            return Err(fail(format!(
                "not lost {NOTICED_WITHIN:?} after the filesystem froze (lease {LEASE:?})"
            )));
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    eprintln!("lost {noticed:?} after the freeze");
    // The last renewal started at most a heartbeat period (1 s) before the freeze: the
    // watchdog (2.5 s) cannot have run out much sooner than 1.5 s after it.
    if noticed < Duration::from_secs(1) {
        return Err(fail(format!("lost only {noticed:?} after the freeze")));
    }
    // The heartbeat thread is stuck in a call on the frozen mount (its next beat was due
    // within a period of the freeze).
    let mut stuck = None;
    let until = Instant::now() + Duration::from_secs(3);
    while Instant::now() < until {
        match syscall_of("rwdir-heartbeat") {
            Some(sc) if in_a_filesystem_call(&sc) => {
                stuck = Some(sc);
                break;
            }
            _ => std::thread::sleep(Duration::from_millis(20)),
        }
    }
    let Some(sc) = stuck else {
        return Err(fail(format!(
            "the heartbeat thread is not in a filesystem call: {:?}",
            syscall_of("rwdir-heartbeat")
        )));
    };
    eprintln!("heartbeat thread blocked in system call {sc}");

    // check() and refresh() report the loss without blocking, naming the cause.
    for (what, call) in [
        (
            "check",
            rwdir::WriteGuard::check as fn(&rwdir::WriteGuard) -> rwdir::Result<()>,
        ),
        ("refresh", rwdir::WriteGuard::refresh),
    ] {
        let g = Arc::clone(&w);
        let t = Instant::now();
        match bounded(Duration::from_secs(2), move || call(&g)) {
            None => return Err(fail(format!("{what} blocked on the frozen filesystem"))),
            Some(Ok(())) => return Err(fail(format!("{what}: Ok on a lost lock"))),
            Some(Err(rwdir::Error::LockLost { reason, .. })) => {
                eprintln!("{what}: {reason} ({:?})", t.elapsed());
                if !reason.contains("no renewal") {
                    return Err(fail(format!(
                        "{what}: the reason does not say why: {reason}"
                    )));
                }
            }
            Some(Err(e)) => return Err(fail(format!("{what}: {e}"))),
        }
    }
    if !frozen.is_frozen() {
        return Err(fail("the filesystem thawed during the test"));
    }

    // Thawed: the blocked beat completes, but the lock stays lost; the release removes
    // the file that is still ours and reports the loss, without panicking.
    frozen.thaw();
    let until = Instant::now() + LEASE;
    while Instant::now() < until {
        if !w.is_lost() {
            return Err(fail("no longer lost after the thaw"));
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let w = Arc::into_inner(w).ok_or_else(|| fail("the guard is still shared"))?;
    match w.release() {
        Err(rwdir::Error::LockLost { .. }) => {}
        other => return Err(fail(format!("release of a lost lock: {other:?}"))),
    }
    let st = lock.status()?;
    if st.writer.is_some() {
        return Err(fail(format!("`.master_lock` left behind: {st:?}")));
    }
    // The directory works again.
    lock.write()?.release()?;
    Ok(())
}

fn rwdir_write_stops_command_and_exits_74_while_the_filesystem_is_frozen() -> Result<(), Failed> {
    let m = mount("rwdirfreezecli")?;
    // COMMAND's readiness and what it saw, outside the mount.
    let local = tempfile::tempdir()?;
    let script = r#"trap 'echo TERM > "$1/trapped"; exit 42' TERM
: > "$1/ready"
sleep 1000 &
wait"#;
    let stderr = std::fs::File::create(local.path().join("stderr"))?;
    let mut child = Command::new(bin::rwdir_bin())
        .arg("write")
        .arg("--lease")
        .arg(LEASE.as_secs().to_string())
        .arg(&m.dir)
        .args(["--", "sh", "-c", script, "sh"])
        .arg(local.path())
        .current_dir(local.path())
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(stderr)
        .spawn()?;
    let stderr_text = || std::fs::read_to_string(local.path().join("stderr")).unwrap_or_default();

    let ready_until = Instant::now() + Duration::from_secs(30);
    while !local.path().join("ready").exists() {
        if Instant::now() > ready_until || child.try_wait()?.is_some() {
            let _ = child.kill();
            let _ = child.wait();
            return Err(fail(format!("COMMAND did not start\n{}", stderr_text())));
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    // Held for longer than a lease while the filesystem answers: renewed, not lost.
    std::thread::sleep(LEASE + LEASE / 2);
    if let Some(st) = child.try_wait()? {
        return Err(fail(format!(
            "rwdir ended ({st}) while the filesystem answered\n{}",
            stderr_text()
        )));
    }

    let frozen = m.freeze.freeze(m.point.path());
    let status = loop {
        if let Some(st) = child.try_wait()? {
            break st;
        }
        if frozen.since.elapsed() > NOTICED_WITHIN {
            // Thawed first: a process blocked on the frozen mount may not finish exiting.
            frozen.thaw();
            let _ = child.kill();
            let _ = child.wait();
            return Err(fail(format!(
                "rwdir still runs {NOTICED_WITHIN:?} after the filesystem froze\n{}",
                stderr_text()
            )));
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    let took = frozen.since.elapsed();
    let still_frozen = frozen.is_frozen();
    frozen.thaw();
    let err = stderr_text();
    eprintln!("rwdir exited {status} {took:?} after the freeze\n{err}");
    if !still_frozen {
        return Err(fail("the filesystem thawed before rwdir exited"));
    }
    if status.code() != Some(74) {
        return Err(fail(format!("exit 74 expected, got {status}\n{err}")));
    }
    let trapped = std::fs::read_to_string(local.path().join("trapped")).unwrap_or_default();
    if trapped.trim() != "TERM" {
        return Err(fail(format!(
            "COMMAND did not get SIGTERM: {trapped:?}\n{err}"
        )));
    }
    if !err.contains("no renewal") {
        return Err(fail(format!("stderr does not say why\n{err}")));
    }
    Ok(())
}
