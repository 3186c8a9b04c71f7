//! `rwdir.ReadGuard` and `rwdir.WriteGuard`: the library's guards, held in a slot that
//! any thread may empty (release), and that the garbage collector empties too (drop).

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use pyo3::prelude::*;

use crate::errors::{py_err, to_py};
use crate::mine::{self, Probe};
use crate::values::path_str;

/// What both library guards offer.
pub(crate) trait Guard: Send + Sync + Sized {
    fn release(self) -> rwdir::Result<()>;
    fn check(&self) -> rwdir::Result<()>;
    fn refresh(&self) -> rwdir::Result<()>;
    fn is_lost(&self) -> bool;
    fn path(&self) -> PathBuf;
}

macro_rules! impl_guard {
    ($t:ty) => {
        impl Guard for $t {
            fn release(self) -> rwdir::Result<()> {
                <$t>::release(self)
            }
            fn check(&self) -> rwdir::Result<()> {
                <$t>::check(self)
            }
            fn refresh(&self) -> rwdir::Result<()> {
                <$t>::refresh(self)
            }
            fn is_lost(&self) -> bool {
                <$t>::is_lost(self)
            }
            fn path(&self) -> PathBuf {
                <$t>::path(self)
            }
        }
    };
}
impl_guard!(rwdir::ReadGuard);
impl_guard!(rwdir::WriteGuard);

/// A guard until it is released. Its lock (held only for the library call, with the GIL
/// released) lets any thread release it while another checks it.
#[derive(Debug)]
pub(crate) struct Slot<G> {
    guard: Mutex<Option<G>>,
    path: PathBuf,
    /// Whether the lock was found lost (kept after the release).
    lost: AtomicBool,
    /// Taken after waiting, by the blocking API: in [`mine`]'s records.
    waited: bool,
}

impl<G: Guard> Probe for Slot<G> {
    fn holds(&self) -> bool {
        self.is_held() && !self.is_lost()
    }
    fn file(&self) -> &Path {
        &self.path
    }
}

impl<G: Guard> Slot<G> {
    /// `waited`: taken by a blocking call after waiting (not by its first attempt, and
    /// not by an asyncio task): recorded as the calling thread's ([`mine`]).
    pub(crate) fn new(guard: G, kind: rwdir::Kind, waited: bool) -> Arc<Slot<G>>
    where
        G: 'static,
    {
        let slot = Arc::new(Slot {
            path: guard.path(),
            guard: Mutex::new(Some(guard)),
            lost: AtomicBool::new(false),
            waited,
        });
        if waited {
            let probe: Arc<dyn Probe> = slot.clone();
            mine::record(kind, &probe);
        }
        slot
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Option<G>> {
        // A panic while it was held cannot leave the guard half-changed: take it as is.
        self.guard.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The guard, taken out: it is then this caller's to release or to turn into another.
    pub(crate) fn take(&self, py: Python<'_>) -> Option<G> {
        py.detach(|| self.lock().take())
    }

    pub(crate) fn is_held(&self) -> bool {
        self.lock().is_some()
    }

    fn released_error(&self) -> rwdir::Error {
        rwdir::Error::LockLost {
            path: self.path.clone(),
            reason: "the lock was already released".into(),
        }
    }

    pub(crate) fn release(&self, py: Python<'_>) -> PyResult<()> {
        let Some(g) = self.take(py) else {
            return Ok(());
        };
        if g.is_lost() {
            self.lost.store(true, Ordering::Relaxed);
        }
        py.detach(|| g.release()).map_err(|e| {
            if matches!(e, rwdir::Error::LockLost { .. }) {
                self.lost.store(true, Ordering::Relaxed);
            }
            to_py(py, e)
        })
    }

    /// `check`, `refresh` or a writer's `token`, on the held guard.
    fn with<T: Send>(
        &self,
        py: Python<'_>,
        f: impl Fn(&G) -> rwdir::Result<T> + Send + Sync,
    ) -> PyResult<T> {
        let r = py.detach(|| match self.lock().as_ref() {
            Some(g) => f(g),
            None => Err(self.released_error()),
        });
        if matches!(r, Err(rwdir::Error::LockLost { .. })) && self.is_held() {
            self.lost.store(true, Ordering::Relaxed);
        }
        r.map_err(py_err(py))
    }

    pub(crate) fn check(&self, py: Python<'_>) -> PyResult<()> {
        self.with(py, G::check)
    }

    pub(crate) fn refresh(&self, py: Python<'_>) -> PyResult<()> {
        self.with(py, G::refresh)
    }

    pub(crate) fn is_lost(&self) -> bool {
        self.lost.load(Ordering::Relaxed) || self.lock().as_ref().is_some_and(G::is_lost)
    }

    pub(crate) fn enter(&self, py: Python<'_>) -> PyResult<()> {
        if self.is_held() {
            Ok(())
        } else {
            Err(to_py(py, self.released_error()))
        }
    }

    /// `__exit__`: releases; a release error is raised only if the `with` body raised
    /// nothing (the body's exception is the one to see).
    pub(crate) fn exit(&self, py: Python<'_>, body_raised: bool) -> PyResult<bool> {
        match self.release(py) {
            Err(e) if !body_raised => Err(e),
            _ => Ok(false),
        }
    }

    fn state(&self) -> &'static str {
        if self.is_held() {
            if self.is_lost() { "lost" } else { "held" }
        } else {
            "released"
        }
    }
}

/// A shared (read) lock on a directory, held until it is released.
///
/// Returned by DirLock.read() (and awaited from DirLock.read_async()). Use it as a
/// context manager: `with lock.read(): ...` releases when the block ends. Otherwise
/// call release(); a guard that is garbage collected unreleased releases then. Any
/// thread may release it. After os.fork() the child does not own the parent's guards:
/// releasing (or dropping) them in the child does nothing, and the parent still holds
/// the lock.
#[pyclass(module = "rwdir", name = "ReadGuard", frozen)]
#[derive(Debug)]
pub(crate) struct PyReadGuard {
    pub(crate) slot: Arc<Slot<rwdir::ReadGuard>>,
}

/// The exclusive (write) lock on a directory, held until it is released.
///
/// Returned by DirLock.write() (and awaited from DirLock.write_async()). Use it as a
/// context manager: `with lock.write() as guard: ...` releases when the block ends.
/// Otherwise call release(); a guard that is garbage collected unreleased releases
/// then. Any thread may release it. `token` is the fencing token of this grant, made the
/// first time it is read (V14 in docs/protocol-notes.md) and kept. After
/// os.fork() the child does not own the parent's guards: releasing (or dropping) them
/// in the child does nothing, and the parent still holds the lock.
#[pyclass(module = "rwdir", name = "WriteGuard", frozen)]
#[derive(Debug)]
pub(crate) struct PyWriteGuard {
    pub(crate) slot: Arc<Slot<rwdir::WriteGuard>>,
    /// The fencing token, once read (it outlives the release).
    token: std::sync::OnceLock<u64>,
}

impl PyReadGuard {
    /// `waited`: see [`Slot::new`].
    pub(crate) fn new(g: rwdir::ReadGuard, waited: bool) -> PyReadGuard {
        PyReadGuard {
            slot: Slot::new(g, rwdir::Kind::Read, waited),
        }
    }
}

impl PyWriteGuard {
    /// `waited`: see [`Slot::new`].
    pub(crate) fn new(g: rwdir::WriteGuard, waited: bool) -> PyWriteGuard {
        PyWriteGuard {
            token: std::sync::OnceLock::new(),
            slot: Slot::new(g, rwdir::Kind::Write, waited),
        }
    }
}

/// The methods both guards have, with the same docstrings.
macro_rules! guard_methods {
    ($t:ident, $file:literal, { $($extra:tt)* }) => {
        #[pymethods]
        impl $t {
            $($extra)*

            /// Releases the lock now, raising any error: LockLost if the lock file was
            /// no longer ours (removed or replaced by someone else). Does nothing if
            /// the guard was already released (or, in a forked child, if the parent
            /// took it).
            fn release(&self, py: Python<'_>) -> PyResult<()> {
                self.slot.release(py)
            }

            #[doc = concat!(
                "Checks now that ", $file, " is still ours;\nraises LockLost if it was ",
                "removed or replaced by someone else, if its\nfilesystem went away, or if ",
                "the guard was released.")]
            fn check(&self, py: Python<'_>) -> PyResult<()> {
                self.slot.check(py)
            }

            #[doc = concat!(
                "Refreshes the lock now, as one beat of the background heartbeat does\n",
                "(checks that ", $file, " is ours, sets its mtime to now,\nchecks again); ",
                "raises LockLost if it is not. Never needed: a background\nthread does it ",
                "every lease/3 while the lock is held.")]
            fn refresh(&self, py: Python<'_>) -> PyResult<()> {
                self.slot.refresh(py)
            }

            /// Whether the lock was found lost (by the background heartbeat, check(),
            /// refresh() or release()). Cheap: no system call.
            fn is_lost(&self) -> bool {
                self.slot.is_lost()
            }

            /// Whether the guard still holds the lock: not yet released (it may have
            /// been lost, see is_lost()).
            #[getter]
            fn held(&self) -> bool {
                self.slot.is_held()
            }

            #[doc = concat!("The path of ", $file, " (a str).")]
            #[getter]
            fn path<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
                path_str(py, &self.slot.path)
            }

            /// Returns the guard itself; raises LockLost if it was already released.
            fn __enter__<'py>(slf: Bound<'py, Self>) -> PyResult<Bound<'py, Self>> {
                slf.get().slot.enter(slf.py())?;
                Ok(slf)
            }

            /// Releases the lock. A release error (LockLost) is raised only if the
            /// block itself raised nothing.
            #[pyo3(signature = (exc_type=None, _exc=None, _tb=None))]
            fn __exit__(
                &self,
                py: Python<'_>,
                exc_type: Option<Bound<'_, PyAny>>,
                _exc: Option<Bound<'_, PyAny>>,
                _tb: Option<Bound<'_, PyAny>>,
            ) -> PyResult<bool> {
                self.slot
                    .exit(py, exc_type.is_some_and(|t| !t.is_none()))
            }
        }
    };
}

guard_methods!(PyReadGuard, "the reader's file (.rwdir/.slave_lock-*)", {
    fn __repr__(&self) -> String {
        format!(
            "<rwdir.ReadGuard {} {:?}>",
            self.slot.state(),
            self.slot.path.display().to_string()
        )
    }
});

guard_methods!(PyWriteGuard, "the writer's file (.rwdir/.master_lock)", {
    /// The fencing token of this grant: unique and strictly growing over the write
    /// grants on the directory that read one, but not consecutive. Made the first time
    /// it is read, while the lock is held (a write that never reads it makes no token
    /// file), then kept, also after the release. Raises LockLost if the lock was lost
    /// before it could be made, or if the guard was released before it was ever read.
    /// It protects only a resource that remembers the highest token it has seen and
    /// rejects lower ones.
    #[getter]
    fn token(&self, py: Python<'_>) -> PyResult<u64> {
        if let Some(&t) = self.token.get() {
            return Ok(t);
        }
        let t = self.slot.with(py, rwdir::WriteGuard::token)?;
        Ok(*self.token.get_or_init(|| t))
    }

    /// Turns the write lock into a read lock without letting any other writer in (the
    /// reader's file is made before .master_lock goes), and returns the new ReadGuard;
    /// this guard is then released. Raises LockLost if .master_lock was no longer ours
    /// or the guard was already released, OSError if the reader's file cannot be made
    /// (the write lock is released all the same).
    fn downgrade(&self, py: Python<'_>) -> PyResult<PyReadGuard> {
        let Some(g) = self.slot.take(py) else {
            return Err(to_py(py, self.slot.released_error()));
        };
        let r = py.detach(|| g.downgrade()).map_err(py_err(py))?;
        // The library counts the reader as the thread's if it counted the writer; this
        // binding's record does the same for a writer taken after waiting.
        Ok(PyReadGuard::new(r, self.slot.waited))
    }

    fn __repr__(&self) -> String {
        let token = self.token.get().map_or("?".to_string(), u64::to_string);
        format!(
            "<rwdir.WriteGuard token={token} {} {:?}>",
            self.slot.state(),
            self.slot.path.display().to_string()
        )
    }
});
