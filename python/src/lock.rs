//! `rwdir.DirLock` and `rwdir.cleanup`.

use std::path::PathBuf;
use std::time::Duration;

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::PyList;

use crate::errors::py_err;
use crate::guard::{PyReadGuard, PyWriteGuard};
use crate::values::{entries, path_str, rwdir_attr, status};
use crate::wait::{Timeout, blocking};

/// A reader-writer lock on a directory, shared by threads, processes and hosts.
///
/// `path` is the directory to protect; it must exist. The lock files live in
/// `path/.rwdir/`, made on first use. Readers share the lock; a writer excludes
/// everyone; writers are served first come, first served, and readers that arrive
/// while a writer waits queue behind it. A holder that dies, even by SIGKILL, is
/// recovered by the next contender: at once on the same host, after `lease` seconds
/// without a heartbeat for a holder on another host (or in another pid namespace).
///
/// `lease` (default 45.0): seconds a holder that cannot be checked directly counts as
/// alive after its last heartbeat (heartbeats run every lease/3; give every user of a
/// directory the same lease). `poll` (default (0.001, 0.1)): shortest and longest pause
/// in seconds between two looks while waiting; on a local filesystem waiters are woken
/// by inotify and polling is only the backstop. `allow_unsafe_filesystem` (default
/// False): use `path` even on an object-store FUSE mount (s3fs, gcsfuse, ...), where
/// exclusive creation is not exclusive and which is otherwise refused with rwdir.Error;
/// check the mount with `rwdir doctor` first. `cache_window` (default None: by the
/// filesystem's kind): seconds this client's view of another host's lock file can be
/// stale; a holder on another host is taken over once its lease plus this window plus
/// 1 s has passed (0 for NFS with actimeo=0 or sshfs with cache=no). `share_readers`
/// (default True): a read while another read of this process holds the lock joins that
/// read's lock file instead of making its own, unless a writer holds or waits (the last
/// one out removes it; status() then shows one reader for the process); False gives
/// every read a file of its own.
///
/// The object is cheap and thread-safe; every acquisition is independent, and threads
/// of one process exclude each other as separate processes do. The lock is advisory: it
/// excludes only those that take it.
///
/// Raises FileNotFoundError if `path` does not exist, NotADirectoryError if it is not a
/// directory, ValueError for a bad lease, poll or cache_window.
#[pyclass(module = "rwdir", name = "DirLock", frozen)]
#[derive(Debug)]
pub(crate) struct PyDirLock {
    pub(crate) lock: rwdir::DirLock,
    poll: (f64, f64),
}

/// Seconds as a `Duration`, or the `ValueError` naming `what`.
fn seconds(what: &str, s: f64) -> PyResult<Duration> {
    Duration::try_from_secs_f64(s).map_err(|_| {
        PyValueError::new_err(format!(
            "{what} must be a finite number of seconds >= 0, not {s}"
        ))
    })
}

#[pymethods]
impl PyDirLock {
    #[new]
    #[pyo3(
        text_signature = "(path, *, lease=45.0, poll=(0.001, 0.1), allow_unsafe_filesystem=False, cache_window=None, share_readers=True)"
    )]
    #[pyo3(signature = (path, *, lease = rwdir::DEFAULT_LEASE.as_secs_f64(), poll = (rwdir::DEFAULT_MIN_POLL.as_secs_f64(), rwdir::DEFAULT_MAX_POLL.as_secs_f64()), allow_unsafe_filesystem = false, cache_window = None, share_readers = true))]
    fn new(
        py: Python<'_>,
        path: PathBuf,
        lease: f64,
        poll: (f64, f64),
        allow_unsafe_filesystem: bool,
        cache_window: Option<f64>,
        share_readers: bool,
    ) -> PyResult<PyDirLock> {
        let lease_d = seconds("lease", lease)?;
        if lease_d.is_zero() {
            return Err(PyValueError::new_err("lease must be > 0 seconds"));
        }
        let (min, max) = (seconds("poll[0]", poll.0)?, seconds("poll[1]", poll.1)?);
        if min.is_zero() || max < min {
            return Err(PyValueError::new_err(format!(
                "poll must be (shortest, longest) with 0 < shortest <= longest, not {poll:?}"
            )));
        }
        let window = cache_window
            .map(|w| seconds("cache_window", w))
            .transpose()?;
        let lock = py
            .detach(|| {
                let b = rwdir::DirLock::builder(path)
                    .lease(lease_d)
                    .poll_interval(min, max)
                    .allow_unsafe_filesystem(allow_unsafe_filesystem)
                    .share_readers(share_readers);
                match window {
                    Some(w) => b.cache_window(w),
                    None => b,
                }
                .build()
            })
            .map_err(py_err(py))?;
        Ok(PyDirLock { lock, poll })
    }

    /// The locked directory (a str), as given.
    #[getter]
    fn path<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        path_str(py, self.lock.path())
    }

    /// The lease, in seconds.
    #[getter]
    fn lease(&self) -> f64 {
        self.lock.lease().as_secs_f64()
    }

    /// The polling bounds (shortest, longest), in seconds.
    #[getter]
    fn poll(&self) -> (f64, f64) {
        self.poll
    }

    /// Takes a shared (read) lock and returns its ReadGuard, a context manager.
    ///
    /// timeout=None waits as long as it takes; a number of seconds waits at most that
    /// long and then raises rwdir.Timeout (a TimeoutError) naming the holder in the way;
    /// timeout=0 makes one attempt and raises rwdir.Busy (a BlockingIOError) if a
    /// writer holds or waits. Waiting releases the GIL; Ctrl-C (any signal handler that
    /// raises) interrupts it in the main thread at once, with nothing left behind. Raises
    /// rwdir.WouldDeadlock if only the calling thread's own release could grant it: it
    /// holds the write lock, or a read lock that a waiting writer waits for.
    #[pyo3(signature = (timeout = None))]
    fn read(&self, py: Python<'_>, timeout: Option<f64>) -> PyResult<PyReadGuard> {
        let t = Timeout::from_py(timeout)?;
        blocking::<rwdir::ReadGuard>(py, &self.lock, t)
            .map(|(g, waited)| PyReadGuard::new(g, waited))
    }

    /// Takes the exclusive (write) lock and returns its WriteGuard, a context manager
    /// carrying the fencing token (`guard.token`).
    ///
    /// First come, first served among writers, ahead of readers that arrive after it.
    /// timeout=None waits as long as it takes; a number of seconds waits at most that
    /// long and then raises rwdir.Timeout (a TimeoutError) naming the holder in the way;
    /// timeout=0 makes one attempt and raises rwdir.Busy (a BlockingIOError). Waiting
    /// releases the GIL; Ctrl-C (any signal handler that raises) interrupts it in the
    /// main thread at once and withdraws this writer's queue file, so the queue goes
    /// on at once.
    /// Raises rwdir.WouldDeadlock if the calling thread itself holds a lock on the
    /// directory (only its own release could grant this one).
    #[pyo3(signature = (timeout = None))]
    fn write(&self, py: Python<'_>, timeout: Option<f64>) -> PyResult<PyWriteGuard> {
        let t = Timeout::from_py(timeout)?;
        blocking::<rwdir::WriteGuard>(py, &self.lock, t)
            .map(|(g, waited)| PyWriteGuard::new(g, waited))
    }

    /// For asyncio: `async with lock.read_async(timeout=None) as guard: ...`, or
    /// `guard = await lock.read_async()`. Waits without blocking the event loop; timeout
    /// as for read(). Cancelling the task while it waits leaves nothing behind.
    #[pyo3(signature = (timeout = None))]
    fn read_async<'py>(slf: Bound<'py, Self>, timeout: Option<f64>) -> PyResult<Bound<'py, PyAny>> {
        Timeout::from_py(timeout)?;
        rwdir_attr(slf.py(), "AsyncAcquisition")?.call1((slf, false, timeout))
    }

    /// For asyncio: `async with lock.write_async(timeout=None) as guard: ...`, or
    /// `guard = await lock.write_async()`. Waits without blocking the event loop, in
    /// the same first-come-first-served queue as every other writer; timeout as for
    /// write(). Cancelling the task while it waits withdraws its queue file (and a
    /// .master_lock it made while readers drain) before the CancelledError reaches the
    /// caller.
    #[pyo3(signature = (timeout = None))]
    fn write_async<'py>(
        slf: Bound<'py, Self>,
        timeout: Option<f64>,
    ) -> PyResult<Bound<'py, PyAny>> {
        Timeout::from_py(timeout)?;
        rwdir_attr(slf.py(), "AsyncAcquisition")?.call1((slf, true, timeout))
    }

    /// Who holds and who waits: an rwdir.Status with `writer` (an Entry or None),
    /// `pending` (queued writers, in queue order) and `readers`, each Entry with host,
    /// pid, since (a datetime) and alive (True, False for a dead holder whose files the
    /// next contender removes, None when it cannot be checked from here and its lease
    /// runs). Only reads; does not create the state directory.
    fn status<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let st = py.detach(|| self.lock.status()).map_err(py_err(py))?;
        status(py, &st)
    }

    /// Removes the lock files of dead holders and returns them (a list of Entry); never
    /// a live holder's file. all=True removes every lock file, live or not (only for
    /// when nothing uses the lock, e.g. before any program starts); dry_run=True
    /// removes nothing and returns what would go.
    #[pyo3(signature = (*, all = false, dry_run = false))]
    fn cleanup<'py>(
        &self,
        py: Python<'py>,
        all: bool,
        dry_run: bool,
    ) -> PyResult<Bound<'py, PyList>> {
        let removed = py
            .detach(|| match (all, dry_run) {
                (false, false) => self.lock.cleanup(),
                (false, true) => self.lock.cleanup_plan(),
                (true, false) => self.lock.cleanup_all(),
                (true, true) => self.lock.cleanup_all_plan(),
            })
            .map_err(py_err(py))?;
        entries(py, &removed)
    }

    fn __repr__(&self, py: Python<'_>) -> PyResult<String> {
        Ok(format!(
            "rwdir.DirLock({}, lease={:?}, poll=({:?}, {:?}))",
            path_str(py, self.lock.path())?.repr()?,
            self.lock.lease().as_secs_f64(),
            self.poll.0,
            self.poll.1
        ))
    }
}

/// cleanup(path, all=False, dry_run=False) -> list[Entry]
///
/// Removes the lock files of dead holders in `path/.rwdir/` and returns them; never a
/// live holder's file (unlike the seed's GlobalDirectoryLock.cleanup). For a
/// pre-startup job. all=True removes every lock file, live or not (keeping the fencing
/// token growing): only when nothing uses the lock. dry_run=True removes nothing and
/// returns what would go.
#[pyfunction]
#[pyo3(signature = (path, all = false, dry_run = false))]
pub(crate) fn cleanup<'py>(
    py: Python<'py>,
    path: PathBuf,
    all: bool,
    dry_run: bool,
) -> PyResult<Bound<'py, PyList>> {
    let lock = py
        .detach(|| rwdir::DirLock::new(path))
        .map_err(py_err(py))?;
    PyDirLock {
        lock,
        poll: (0.0, 0.0),
    }
    .cleanup(py, all, dry_run)
}
