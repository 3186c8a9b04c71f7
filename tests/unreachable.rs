//! A lock file this client cannot reach while the rest of its mount answers (`ENOTCONN`
//! on that one name) counts as held: a waiter keeps waiting, as long as it was asked to,
//! and never removes it. Measured once on the CephFS rig (docs/notes/dfs-rig.md): a
//! `rwdir write` behind a holder whose FUSE client was killed right after the grant
//! failed with "failed to inspect lock file .master_lock: Transport endpoint is not
//! connected" through a healthy client, where it should have waited for the MDS to drop
//! the dead client's session. A client that lost its server (every call fails) is an
//! error, not a wait.
//!
//! The filesystem is the tiny FUSE filesystem of tests/doctor/lyingfs.rs (honest mode),
//! mounted in this process, with its fault switch. A custom harness (libtest-mimic):
//! where no FUSE mount can be made (no /dev/fuse, not root) the tests are reported as
//! ignored, with the reason, never as passed.

#[path = "doctor/lyingfs.rs"]
mod lyingfs;

use std::io::ErrorKind;
use std::sync::Arc;
use std::time::{Duration, Instant};

use libtest_mimic::Failed;

const LEASE: Duration = Duration::from_secs(3);
/// How long the waiter is asked to wait.
const WAIT: Duration = Duration::from_secs(2);

fn main() {
    lyingfs::run_fuse_tests(&[
        (
            "an_unreachable_master_lock_is_waited_for_and_kept",
            an_unreachable_master_lock_is_waited_for_and_kept,
        ),
        (
            "a_client_that_lost_its_server_gets_an_error_not_a_wait",
            a_client_that_lost_its_server_gets_an_error_not_a_wait,
        ),
    ]);
}

fn fail(what: impl Into<String>) -> Failed {
    Failed::from(what.into())
}

/// A mount with its fault switch and a fresh directory on it.
struct Mount {
    faults: Arc<lyingfs::Faults>,
    dir: std::path::PathBuf,
    // Dropped in this order: the session (unmount) before the mount point.
    _session: fuser::BackgroundSession,
    _point: tempfile::TempDir,
}

impl Drop for Mount {
    fn drop(&mut self) {
        // Let the unmount and the guards' releases through.
        self.faults.unreachable(None);
        self.faults.dead(false);
    }
}

fn mount(name: &str) -> Result<Mount, Failed> {
    let point = tempfile::tempdir()?;
    let (session, faults) = lyingfs::mount_faulty(point.path(), name)?;
    let dir = lyingfs::shared_dir(point.path()).map_err(fail)?;
    Ok(Mount {
        faults,
        dir,
        _session: session,
        _point: point,
    })
}

/// Takes the write lock on a thread of its own (this thread would be refused as a
/// deadlock) and holds it until the returned sender is dropped.
fn hold_elsewhere(dir: &std::path::Path, heartbeat: bool) -> Result<Holding, Failed> {
    let lock = rwdir::DirLock::builder(dir)
        .lease(LEASE)
        .background_heartbeat(heartbeat)
        .build()?;
    let (granted_tx, granted) = crossbeam_channel::bounded(1);
    let (release, release_rx) = crossbeam_channel::bounded::<()>(0);
    let thread = std::thread::spawn(move || {
        let w = match lock.write() {
            Ok(w) => w,
            Err(e) => {
                let _ = granted_tx.send(Err(e.to_string()));
                return;
            }
        };
        let _ = granted_tx.send(Ok(()));
        let _ = release_rx.recv();
        // The heartbeat may have found the file unreachable and counted the lock lost;
        // either way the release leaves the directory free.
        let _ = w.release();
    });
    granted
        .recv()
        .map_err(|e| fail(e.to_string()))?
        .map_err(fail)?;
    Ok(Holding {
        release: Some(release),
        thread: Some(thread),
    })
}

struct Holding {
    release: Option<crossbeam_channel::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Holding {
    fn release(mut self) {
        self.release.take();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn an_unreachable_master_lock_is_waited_for_and_kept() -> Result<(), Failed> {
    let m = mount("rwdirunreach")?;
    let w = hold_elsewhere(&m.dir, true)?;
    let waiter = rwdir::DirLock::builder(&m.dir).lease(LEASE).build()?;
    // The waiter's state directory is open, and it has seen the holder.
    match waiter.try_write() {
        Err(e) if e.kind() == ErrorKind::WouldBlock => {}
        other => return Err(fail(format!("expected WouldBlock first, got {other:?}"))),
    }
    m.faults.unreachable(Some(".master_lock"));
    let t = Instant::now();
    let got = waiter.try_write_for(WAIT);
    let waited = t.elapsed();
    match got {
        Err(e) if e.kind() == ErrorKind::TimedOut => {}
        other => {
            return Err(fail(format!(
                "expected a timeout after {WAIT:?} behind the unreachable .master_lock, got {other:?} after {waited:?}"
            )));
        }
    }
    if waited < WAIT {
        return Err(fail(format!("gave up after {waited:?}, asked {WAIT:?}")));
    }
    // Nothing was removed: once reachable again, it is still the holder's.
    m.faults.unreachable(None);
    let st = waiter.status()?;
    let Some(writer) = st.writer else {
        return Err(fail("the unreachable .master_lock was removed"));
    };
    if writer.holder.as_ref().map(|h| h.pid) != Some(std::process::id()) {
        return Err(fail(format!("not the holder's any more: {writer:?}")));
    }
    w.release();
    let again = waiter.try_write_for(Duration::from_secs(10))?;
    again.release()?;
    Ok(())
}

fn a_client_that_lost_its_server_gets_an_error_not_a_wait() -> Result<(), Failed> {
    let m = mount("rwdirdead")?;
    // No heartbeat: the waiter's are the only lookups of `.master_lock`.
    let w = hold_elsewhere(&m.dir, false)?;
    let waiter = rwdir::DirLock::builder(&m.dir).lease(LEASE).build()?;
    // The client loses its server while the waiter waits: right after the waiter's first
    // look at `.master_lock`.
    m.faults.dead_after(".master_lock", 1);
    let t = Instant::now();
    let got = waiter.try_write_for(Duration::from_secs(30));
    let took = t.elapsed();
    let err = match got {
        Err(e) if !matches!(e.kind(), ErrorKind::TimedOut | ErrorKind::WouldBlock) => e,
        other => {
            return Err(fail(format!(
                "expected an error from a client whose every call fails, got {other:?} after {took:?}"
            )));
        }
    };
    if took > Duration::from_secs(10) {
        return Err(fail(format!("the error took {took:?}: {err}")));
    }
    // The error and its sources, on one line.
    let mut text = err.to_string();
    let mut src = std::error::Error::source(&err);
    while let Some(e) = src {
        text.push_str(&format!(": {e}"));
        src = e.source();
    }
    // At the first look that failed, the waiter's read of `.master_lock` (not later,
    // after waiting on as if the file were only out of reach).
    if !text.contains(".master_lock") || !text.contains("os error 107") {
        return Err(fail(format!(
            "the error does not name the file and the cause: {text}"
        )));
    }
    m.faults.dead(false);
    w.release();
    Ok(())
}
