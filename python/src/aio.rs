//! asyncio: `DirLock.read_async()` / `write_async()`.
//!
//! The library's `read_async`/`write_async` future runs as a task on one tokio runtime
//! shared by the process (one worker thread, made on first use, and again in a forked
//! child, where the parent's threads do not exist). The event loop is never blocked:
//! `rwdir.AsyncAcquisition` (in `rwdir/__init__.py`) watches the read end of a pipe
//! with `loop.add_reader`; the task holds the write end, so the pipe reads end-of-file
//! once the task's future is gone, finished (its result is then in the operation's
//! slot) or aborted. The runtime's thread never touches Python: no GIL to take there,
//! and nothing to race with the interpreter's shutdown. When the asyncio task is
//! cancelled, [`AsyncOp::cancel`] aborts the tokio task and waits for that end-of-file
//! (its future dropped, which removes the files the acquisition made), then releases a
//! guard granted meanwhile: when `CancelledError` reaches the caller, nothing of the
//! acquisition is left.

use std::io::{PipeReader, Read};
use std::os::fd::AsRawFd;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use pyo3::exceptions::{PyOSError, PyRuntimeError};
use pyo3::prelude::*;
use rwdir::Kind;
use tokio::runtime::Runtime;
use tokio::task::JoinHandle;

use crate::errors::to_py;
use crate::guard::{PyReadGuard, PyWriteGuard};
use crate::lock::PyDirLock;
use crate::wait::{Timeout, busy, timed_out};

/// The runtime of this process: `(pid, runtime)`. A forked child makes its own (the
/// parent's worker thread is not there); the parent's is leaked, never dropped (its
/// shutdown would wait for a thread that does not exist).
static RUNTIME: Mutex<Option<(u32, &'static Runtime)>> = Mutex::new(None);

fn runtime() -> PyResult<&'static Runtime> {
    let pid = std::process::id();
    let mut rt = RUNTIME.lock().unwrap_or_else(|p| p.into_inner());
    if let Some((p, r)) = *rt
        && p == pid
    {
        return Ok(r);
    }
    let made = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .thread_name("rwdir-asyncio")
        .enable_all()
        .build()
        .map_err(|e| PyOSError::new_err(format!("failed to start a tokio runtime: {e}")))?;
    let made: &'static Runtime = Box::leak(Box::new(made));
    *rt = Some((pid, made));
    Ok(made)
}

/// What an acquisition got.
#[derive(Debug)]
enum Granted {
    Read(rwdir::ReadGuard),
    Write(rwdir::WriteGuard),
}

type Slot = Arc<Mutex<Option<rwdir::Result<Granted>>>>;

/// One asyncio acquisition in progress (internal; see `rwdir.AsyncAcquisition`).
#[pyclass(module = "rwdir._rwdir", name = "_AsyncOp", frozen)]
#[derive(Debug)]
pub(crate) struct AsyncOp {
    task: JoinHandle<()>,
    /// Reads end-of-file once the task's future is dropped (finished or aborted).
    gone: Mutex<PipeReader>,
    slot: Slot,
}

fn take(slot: &Slot) -> Option<rwdir::Result<Granted>> {
    slot.lock().unwrap_or_else(|p| p.into_inner()).take()
}

#[pymethods]
impl AsyncOp {
    /// The guard, or the exception, once the task finished.
    fn result(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        match take(&self.slot) {
            Some(Ok(Granted::Read(g))) => Ok(Py::new(py, PyReadGuard::new(g, false))?.into_any()),
            Some(Ok(Granted::Write(g))) => Ok(Py::new(py, PyWriteGuard::new(g, false))?.into_any()),
            Some(Err(e)) => Err(to_py(py, e)),
            None => Err(PyRuntimeError::new_err("the acquisition has not finished")),
        }
    }

    /// The descriptor that becomes readable (end-of-file) when the task is over.
    fn fileno(&self) -> i32 {
        self.gone
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .as_raw_fd()
    }

    /// Stops the acquisition: drops its future (its files go) and releases a guard it
    /// got meanwhile. Returns once that is done.
    fn cancel(&self, py: Python<'_>) {
        self.task.abort();
        py.detach(|| {
            let mut gone = self.gone.lock().unwrap_or_else(|p| p.into_inner());
            // Nothing is ever written: `Ok(0)` is the end-of-file of the future's drop,
            // an error (none is expected) ends the wait too.
            let mut byte = [0u8; 1];
            while matches!(gone.read(&mut byte), Ok(n) if n > 0) {}
            drop(take(&self.slot));
        });
    }
}

impl Drop for AsyncOp {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// `_start_async(lock, write, timeout)`: starts an acquisition on the shared runtime;
/// its `fileno()` reads end-of-file when it is over.
#[pyfunction]
#[pyo3(name = "_start_async")]
pub(crate) fn start_async(
    lock: &Bound<'_, PyDirLock>,
    write: bool,
    timeout: Option<f64>,
) -> PyResult<AsyncOp> {
    let timeout = Timeout::from_py(timeout)?;
    let rt = runtime()?;
    let lock = lock.get().lock.clone();
    let slot: Slot = Arc::new(Mutex::new(None));
    let result = Arc::clone(&slot);
    let (gone, alive) =
        std::io::pipe().map_err(|e| PyOSError::new_err(format!("failed to make a pipe: {e}")))?;
    let task = rt.spawn(async move {
        // Closed with this future, finished or aborted: the event loop and
        // `AsyncOp::cancel` wait for that.
        let _alive = alive;
        let started = Instant::now();
        let want = if write { Kind::Write } else { Kind::Read };
        let waiting = async {
            if write {
                lock.write_async().await.map(Granted::Write)
            } else {
                lock.read_async().await.map(Granted::Read)
            }
        };
        let got = match timeout {
            Timeout::Never => waiting.await,
            // One attempt: the future's first poll makes it (and tries again at once
            // if a wake-up came meanwhile); a zero timeout then drops it, undone.
            Timeout::Once => {
                let got = tokio::time::timeout(Duration::ZERO, waiting).await;
                got.unwrap_or_else(|_| Err(busy(&lock, want)))
            }
            Timeout::After(d) => {
                // The timed-out future (and its files) is gone after this statement.
                let got = tokio::time::timeout(d, waiting).await;
                got.unwrap_or_else(|_| Err(timed_out(&lock, want, started.elapsed())))
            }
        };
        *result.lock().unwrap_or_else(|p| p.into_inner()) = Some(got);
    });
    Ok(AsyncOp {
        task,
        gone: Mutex::new(gone),
        slot,
    })
}
