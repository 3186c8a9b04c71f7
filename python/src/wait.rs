//! Waiting for the lock from Python's blocking API.
//!
//! One attempt first (`try_read`/`try_write`: the library's self-deadlock check, and no
//! runtime at all when the lock is free). If the lock is busy, ONE acquisition future
//! (`read_async`/`write_async`) is driven on a current-thread tokio runtime of this
//! call, with the GIL released, until it is granted, a signal handler raises, or the
//! caller's deadline passes.
//!
//! Signal handlers run in Python's main thread only. There, while it waits, a pipe is
//! Python's signal wakeup fd ([`SignalPipe`]): a signal wakes the wait at once, the GIL
//! is taken back, and Python's handlers run (`check_signals`). Where a wakeup fd is set
//! already (an asyncio loop's), the main thread looks every [`SLICE`] instead. A handler
//! that raises (Ctrl-C: `KeyboardInterrupt`) drops the future, which removes the files
//! it made (its queue file, a `.master_lock` made while readers drain): the queue place
//! is given up only then, never between two looks. Other threads have no handlers to
//! run, and wait in one stretch, woken only by the lock. When the deadline passes, the
//! future is dropped the same way and the error names who is in the way, as the
//! library's own timeouts do.

use std::future::Future;
use std::io::{PipeReader, PipeWriter, Read};
use std::os::fd::AsRawFd;
use std::path::PathBuf;
use std::pin::Pin;
use std::task::Poll;
use std::time::{Duration, Instant};

use pyo3::exceptions::{PyOSError, PyValueError};
use pyo3::prelude::*;
use rwdir::{DirLock, Kind, ReadGuard, WriteGuard};
use tokio::io::Interest;
use tokio::io::unix::AsyncFd;

use crate::errors::{py_err, to_py};

/// Where Python's wakeup fd is taken ([`SignalPipe`]), the longest stretch of waiting in
/// the main thread without a look at Python's signals: Ctrl-C raises `KeyboardInterrupt`
/// within this (plus the time to take the GIL back). Each slice costs a wake-up.
pub(crate) const SLICE: Duration = Duration::from_millis(25);

/// Whether the calling thread is Python's main thread, the one that runs signal
/// handlers.
fn is_main_thread(py: Python<'_>) -> PyResult<bool> {
    let threading = py.import("threading")?;
    Ok(threading
        .call_method0("main_thread")?
        .is(&threading.call_method0("current_thread")?))
}

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
    let main = is_main_thread(py)?;
    let rt = runtime()?;
    // In the main thread, a signal wakes the wait at once through Python's wakeup fd
    // where it is free to take; else the main thread looks at signals every SLICE.
    // Other threads run no signal handler: nothing to wake them for.
    let pipe = if main {
        SignalPipe::install(py, &rt)?
    } else {
        None
    };
    let slice_for = if main && pipe.is_none() {
        SLICE
    } else {
        Duration::MAX
    };
    let got = wait_for(py, lock, &rt, pipe.as_ref(), slice_for, deadline, started);
    if let Some(pipe) = pipe {
        pipe.uninstall(py, &rt);
    }
    got.map(|g| (g, true))
}

/// What ended one stretch of a wait.
enum Woke<G> {
    Done(rwdir::Result<G>),
    Slice,
    Signal,
}

/// The waiting part of [`blocking`]: one future, driven until granted, interrupted by
/// a signal handler that raises, or out of time.
fn wait_for<G: Acquire>(
    py: Python<'_>,
    lock: &DirLock,
    rt: &tokio::runtime::Runtime,
    pipe: Option<&SignalPipe>,
    slice_for: Duration,
    deadline: Option<Instant>,
    started: Instant,
) -> PyResult<G> {
    let mut waiting = G::wait(lock.clone());
    // Dropped within the runtime: the future's reactor registrations and timers belong
    // to it. Dropping removes the files the acquisition made.
    let give_up = |waiting: Waiting<G>| {
        let _in = rt.enter();
        drop(waiting);
    };
    loop {
        // Before every stretch, the first included: a signal that came before the wakeup
        // fd was set (during the first attempt, say) wrote nothing to it.
        if let Err(interrupted) = py.check_signals() {
            give_up(waiting);
            return Err(interrupted);
        }
        let slice = match deadline {
            Some(d) => d.saturating_duration_since(Instant::now()).min(slice_for),
            None => slice_for,
        };
        if slice.is_zero() {
            give_up(waiting);
            return Err(to_py(py, timed_out(lock, G::KIND, started.elapsed())));
        }
        let step = waiting.as_mut();
        let woke = py.detach(|| {
            rt.block_on(async {
                let mut step = std::pin::pin!(tokio::time::timeout(slice, step));
                std::future::poll_fn(|cx| {
                    if let Poll::Ready(r) = step.as_mut().poll(cx) {
                        return Poll::Ready(match r {
                            Ok(done) => Woke::Done(done),
                            Err(_) => Woke::Slice,
                        });
                    }
                    if let Some(p) = pipe
                        && let Poll::Ready(ready) = p.watch.poll_read_ready(cx)
                    {
                        if let Ok(mut ready) = ready {
                            // Drained, so that the next signal makes the next edge.
                            let mut buf = [0u8; 64];
                            while matches!(p.watch.get_ref().read(&mut buf), Ok(n) if n > 0) {}
                            ready.clear_ready();
                        }
                        return Poll::Ready(Woke::Signal);
                    }
                    Poll::Pending
                })
                .await
            })
        });
        match woke {
            Woke::Done(done) => return done.map_err(py_err(py)),
            Woke::Slice | Woke::Signal => {}
        }
    }
}

/// A pipe set as Python's signal wakeup fd (`signal.set_wakeup_fd`) while the main
/// thread waits: Python's C-level handler writes to it as a signal arrives, which wakes
/// the wait at once, with no periodic wake-up. Taken only where no wakeup fd is set
/// (an asyncio loop in this thread sets one, but a blocking wait there blocks the loop
/// anyway); restored to none afterwards.
pub(crate) struct SignalPipe {
    write: PipeWriter,
    /// The read end, on the wait's reactor.
    watch: AsyncFd<PipeReader>,
}

impl SignalPipe {
    /// The pipe, set as the wakeup fd; `None` where one is set already, or the pipe
    /// cannot be made or watched (then signals are looked at every [`SLICE`]).
    fn install(py: Python<'_>, rt: &tokio::runtime::Runtime) -> PyResult<Option<SignalPipe>> {
        let Ok((read, write)) = std::io::pipe() else {
            return Ok(None);
        };
        let os = py.import("os")?;
        os.call_method1("set_blocking", (read.as_raw_fd(), false))?;
        os.call_method1("set_blocking", (write.as_raw_fd(), false))?;
        let watch = {
            let _in = rt.enter();
            // SAFETY: `AsyncFd` takes the read end by value and owns it until it is
            // dropped, so the descriptor stays open and names the same pipe for its whole
            // life, and `PipeReader::as_raw_fd` always returns that descriptor.
            match unsafe { AsyncFd::register_with_interest(read, Interest::READABLE) } {
                Ok(w) => w,
                Err(_) => return Ok(None),
            }
        };
        let signal = py.import("signal")?;
        let kw = pyo3::types::PyDict::new(py);
        kw.set_item("warn_on_full_buffer", false)?;
        let old: i32 = signal
            .call_method("set_wakeup_fd", (write.as_raw_fd(),), Some(&kw))?
            .extract()?;
        let pipe = SignalPipe { write, watch };
        if old != -1 {
            // Someone else's: give it back, and look at signals every slice.
            signal.call_method1("set_wakeup_fd", (old,))?;
            pipe.close(rt);
            return Ok(None);
        }
        Ok(Some(pipe))
    }

    fn uninstall(self, py: Python<'_>, rt: &tokio::runtime::Runtime) {
        let _ = py
            .import("signal")
            .and_then(|s| s.call_method1("set_wakeup_fd", (-1,)));
        self.close(rt);
    }

    /// Deregistered first, then closed.
    fn close(self, rt: &tokio::runtime::Runtime) {
        let _in = rt.enter();
        drop(self.watch);
        drop(self.write);
    }
}
