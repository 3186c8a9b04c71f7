//! Waiting for the lock from Python's blocking API.
//!
//! One attempt first (`try_read`/`try_write`: the library's self-deadlock check, and no
//! runtime at all when the lock is free). If the lock is busy, ONE acquisition future
//! (`read_async`/`write_async`) is driven on a current-thread tokio runtime of this
//! call, in slices of at most [`SLICE`], with the GIL released; between two slices the
//! GIL is taken back to run Python's signal handlers (`check_signals`). A handler that
//! raises (Ctrl-C: `KeyboardInterrupt`) drops the future, which removes the files it
//! made (its queue file, a `.master_lock` made while readers drain), so the queue place
//! is given up only then, never between slices. The caller's timeout is a deadline
//! across the slices; when it passes, the future is dropped the same way and the error
//! names who is in the way, as the library's own timeouts do.

use std::future::Future;
use std::path::PathBuf;
use std::pin::Pin;
use std::time::{Duration, Instant};

use pyo3::exceptions::{PyOSError, PyValueError};
use pyo3::prelude::*;
use rwdir::{DirLock, Kind, ReadGuard, WriteGuard};

use crate::errors::{py_err, to_py};

/// The longest stretch of waiting without a look at Python's signals: Ctrl-C raises
/// `KeyboardInterrupt` within this (plus the time to take the GIL back).
pub(crate) const SLICE: Duration = Duration::from_millis(50);

/// A waiting acquisition, boxed so that it can be kept across slices.
pub(crate) type Waiting<G> = Pin<Box<dyn Future<Output = rwdir::Result<G>> + Send>>;

/// How long an acquisition may wait.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum Timeout {
    /// As long as it takes (`None`, or an infinite timeout).
    Never,
    /// One attempt (`0`).
    Once,
    /// At most this long.
    After(Duration),
}

impl Timeout {
    /// From Python's `timeout=`: `None` or seconds (an int or a float).
    pub(crate) fn from_py(t: Option<f64>) -> PyResult<Timeout> {
        match t {
            None => Ok(Timeout::Never),
            Some(t) if t.is_nan() || t < 0.0 => Err(PyValueError::new_err(format!(
                "timeout must be None or a number of seconds >= 0, not {t}"
            ))),
            Some(0.0) => Ok(Timeout::Once),
            // Too large to represent (infinity included): for ever, as the library does.
            Some(t) => Ok(Duration::try_from_secs_f64(t).map_or(Timeout::Never, Timeout::After)),
        }
    }
}

/// Read or write: the library's calls for each.
pub(crate) trait Acquire: Sized + Send + 'static {
    /// What is asked for (to name who is in the way).
    const KIND: Kind;
    /// One attempt, without sleeping.
    fn try_now(lock: &DirLock) -> rwdir::Result<Self>;
    /// The waiting acquisition (cancel safe: dropping it removes its files).
    fn wait(lock: DirLock) -> Waiting<Self>;
}

impl Acquire for ReadGuard {
    const KIND: Kind = Kind::Read;
    fn try_now(lock: &DirLock) -> rwdir::Result<Self> {
        lock.try_read()
    }
    fn wait(lock: DirLock) -> Waiting<Self> {
        Box::pin(async move { lock.read_async().await })
    }
}

impl Acquire for WriteGuard {
    const KIND: Kind = Kind::Write;
    fn try_now(lock: &DirLock) -> rwdir::Result<Self> {
        lock.try_write()
    }
    fn wait(lock: DirLock) -> Waiting<Self> {
        Box::pin(async move { lock.write_async().await })
    }
}

/// The error for a wait whose deadline passed (its own files already removed), naming
/// who is in the way now, as the library's `try_*_for` does.
pub(crate) fn timed_out(lock: &DirLock, want: Kind, waited: Duration) -> rwdir::Error {
    let holder = lock
        .status()
        .ok()
        .and_then(|st| st.blocker(want, |_| false).cloned())
        .map(Box::new);
    rwdir::Error::TimedOut {
        dir: lock.path().to_path_buf(),
        waited,
        holder,
    }
}

/// The error for one attempt (an async `timeout=0`) that found the lock held, its own
/// files already removed: as the library's `try_*` says it.
pub(crate) fn busy(lock: &DirLock, want: Kind) -> rwdir::Error {
    let holder = lock
        .status()
        .ok()
        .and_then(|st| st.blocker(want, |_| false).cloned())
        .map(Box::new);
    rwdir::Error::WouldBlock {
        dir: lock.path().to_path_buf(),
        holder,
    }
}

/// A current-thread runtime with the I/O and time drivers the library's waits need.
pub(crate) fn runtime() -> PyResult<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| PyOSError::new_err(format!("failed to start a tokio runtime: {e}")))
}

/// The error for a wait that only the calling thread's own release could end: its
/// recorded guard `mine` ([`crate::mine`]) is in the way.
fn would_deadlock(lock: &DirLock, want: Kind, mine: (Kind, PathBuf)) -> rwdir::Error {
    let writer = match (want, mine.0) {
        // A read behind a writer that waits for this thread's read guard: name it.
        (Kind::Read, Kind::Read) => lock
            .status()
            .ok()
            .and_then(|st| st.blocker(Kind::Read, |_| false).cloned())
            .map(Box::new),
        _ => None,
    };
    rwdir::Error::WouldDeadlock {
        dir: lock.path().to_path_buf(),
        want,
        held: mine.0,
        path: mine.1,
        writer,
    }
}

/// `DirLock.read()` / `DirLock.write()`: see the module docs. The guard, and whether it
/// was taken after waiting (not by the first attempt).
pub(crate) fn blocking<G: Acquire>(
    py: Python<'_>,
    lock: &DirLock,
    timeout: Timeout,
) -> PyResult<(G, bool)> {
    let started = Instant::now();
    let busy = match py.detach(|| G::try_now(lock)) {
        Ok(g) => return Ok((g, false)),
        Err(e @ rwdir::Error::WouldBlock { .. }) => e,
        Err(e) => return Err(to_py(py, e)),
    };
    // The lock is busy: a guard of this thread that the library does not count as the
    // thread's (taken after waiting) may be what is in the way.
    if let Some(mine) = crate::mine::in_the_way(&lock.path().join(".rwdir")) {
        return Err(to_py(py, would_deadlock(lock, G::KIND, mine)));
    }
    if timeout == Timeout::Once {
        return Err(to_py(py, busy));
    }
    let deadline = match timeout {
        Timeout::After(d) => started.checked_add(d),
        _ => None,
    };
    let rt = runtime()?;
    let mut waiting = G::wait(lock.clone());
    // Dropped within the runtime: the future's reactor registrations and timers belong
    // to it. Dropping removes the files the acquisition made.
    let give_up = |waiting: Waiting<G>| {
        let _in = rt.enter();
        drop(waiting);
    };
    loop {
        let slice = match deadline {
            Some(d) => d.saturating_duration_since(Instant::now()).min(SLICE),
            None => SLICE,
        };
        if slice.is_zero() {
            give_up(waiting);
            return Err(to_py(py, timed_out(lock, G::KIND, started.elapsed())));
        }
        let step = waiting.as_mut();
        if let Ok(done) =
            py.detach(|| rt.block_on(async { tokio::time::timeout(slice, step).await }))
        {
            return done.map(|g| (g, true)).map_err(py_err(py));
        }
        if let Err(interrupted) = py.check_signals() {
            give_up(waiting);
            return Err(interrupted);
        }
    }
}
