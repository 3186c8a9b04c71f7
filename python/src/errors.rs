//! [`rwdir::Error`] as Python exceptions.
//!
//! The classes, and which builtin each derives from (`Busy(BlockingIOError)`,
//! `Timeout(TimeoutError)`, `PermissionDenied(PermissionError)`, ...), are in
//! `rwdir/__init__.py` (`rwdir._error`); this gives it the facts: the variant, the
//! message as the `rwdir` command prints it (the error and its causes on one line), the
//! operating system's error number, and the variant's fields.

use pyo3::prelude::*;
use pyo3::types::PyDict;

use crate::values::{entry, owner, path_str, rwdir_attr};

/// The Python exception for `e`.
pub(crate) fn to_py(py: Python<'_>, e: rwdir::Error) -> PyErr {
    match build(py, &e) {
        Ok(exc) => PyErr::from_value(exc),
        // Building it failed (the package half imported, say): the message at least.
        Err(err) => err,
    }
}

/// A closure for `map_err` that needs the Python token.
pub(crate) fn py_err(py: Python<'_>) -> impl Fn(rwdir::Error) -> PyErr + '_ {
    move |e| to_py(py, e)
}

fn build<'py>(py: Python<'py>, e: &rwdir::Error) -> PyResult<Bound<'py, PyAny>> {
    let message = format!("{e:?}");
    let extra = PyDict::new(py);
    let mut errno = None;
    let variant = match e {
        rwdir::Error::Io { source, .. } => {
            errno = source.raw_os_error();
            "io"
        }
        rwdir::Error::PermissionDenied {
            source, owner: o, ..
        } => {
            errno = source.raw_os_error();
            extra.set_item("owner", owner(py, o)?)?;
            "permission"
        }
        rwdir::Error::NotADirectory { .. } => "notadir",
        rwdir::Error::WouldBlock { dir, .. } => {
            extra.set_item("dir", path_str(py, dir)?)?;
            "busy"
        }
        rwdir::Error::TimedOut { dir, waited, .. } => {
            extra.set_item("dir", path_str(py, dir)?)?;
            extra.set_item("waited", waited.as_secs_f64())?;
            "timeout"
        }
        rwdir::Error::Cancelled { dir } => {
            extra.set_item("dir", path_str(py, dir)?)?;
            "cancelled"
        }
        rwdir::Error::WouldDeadlock { dir, writer, .. } => {
            extra.set_item("dir", path_str(py, dir)?)?;
            if let Some(w) = writer {
                extra.set_item("holder", entry(py, w)?)?;
            }
            "deadlock"
        }
        rwdir::Error::LockLost { reason, .. } => {
            extra.set_item("reason", reason)?;
            "lost"
        }
        rwdir::Error::TokensExhausted { .. } => "tokens",
        _ => "other",
    };
    if let Some(h) = e.holder() {
        extra.set_item("holder", entry(py, h)?)?;
    }
    rwdir_attr(py, "_error")?.call1((variant, message, errno, path_str(py, e.path())?, extra))
}
