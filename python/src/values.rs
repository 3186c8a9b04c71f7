//! The library's plain values ([`rwdir::Status`], [`rwdir::Entry`], [`rwdir::Owner`]) as
//! the Python dataclasses of `rwdir/__init__.py`.

use std::path::Path;
use std::time::{SystemTime, UNIX_EPOCH};

use pyo3::prelude::*;
use pyo3::types::PyList;

/// An attribute of the Python package `rwdir` (its dataclasses, exception classes and
/// helpers). The package is imported by then: this module is only loaded through it.
pub(crate) fn rwdir_attr<'py>(py: Python<'py>, name: &str) -> PyResult<Bound<'py, PyAny>> {
    py.import("rwdir")?.getattr(name)
}

/// A path as a Python `str` (the file system encoding, `surrogateescape`, as `os.fsdecode`).
pub(crate) fn path_str<'py>(py: Python<'py>, path: &Path) -> PyResult<Bound<'py, PyAny>> {
    Ok(path.as_os_str().into_pyobject(py)?.into_any())
}

/// Seconds since the Unix epoch (negative before it).
pub(crate) fn timestamp(t: SystemTime) -> f64 {
    match t.duration_since(UNIX_EPOCH) {
        Ok(d) => d.as_secs_f64(),
        Err(e) => -e.duration().as_secs_f64(),
    }
}

/// `rwdir.Entry`: one lock file, its holder and the verdict on it.
pub(crate) fn entry<'py>(py: Python<'py>, e: &rwdir::Entry) -> PyResult<Bound<'py, PyAny>> {
    let h = e.holder.as_ref();
    rwdir_attr(py, "_entry")?.call1((
        e.kind.as_str(),
        h.map(|h| h.host.clone()),
        h.map(|h| h.pid),
        timestamp(e.since()),
        e.liveness.as_option(),
        path_str(py, &e.path)?,
        h.map(|h| h.pgid).filter(|&g| g != 0),
    ))
}

/// `rwdir.Status`.
pub(crate) fn status<'py>(py: Python<'py>, st: &rwdir::Status) -> PyResult<Bound<'py, PyAny>> {
    let list = |entries: &[rwdir::Entry]| -> PyResult<Bound<'py, PyList>> {
        let items = entries
            .iter()
            .map(|e| entry(py, e))
            .collect::<PyResult<Vec<_>>>()?;
        PyList::new(py, items)
    };
    rwdir_attr(py, "Status")?.call1((
        path_str(py, &st.dir)?,
        path_str(py, &st.state_dir)?,
        st.token,
        st.writer.as_ref().map(|w| entry(py, w)).transpose()?,
        list(&st.pending)?,
        list(&st.readers)?,
        list(&st.other)?,
    ))
}

/// A list of `rwdir.Entry` (what a cleanup removed, or would remove).
pub(crate) fn entries<'py>(py: Python<'py>, es: &[rwdir::Entry]) -> PyResult<Bound<'py, PyList>> {
    let items = es
        .iter()
        .map(|e| entry(py, e))
        .collect::<PyResult<Vec<_>>>()?;
    PyList::new(py, items)
}

/// `rwdir.Owner`: the owner and mode of a file in the way of a permission error.
pub(crate) fn owner<'py>(py: Python<'py>, o: &rwdir::Owner) -> PyResult<Bound<'py, PyAny>> {
    rwdir_attr(py, "Owner")?.call1((o.uid, o.user.clone(), o.gid, o.group.clone(), o.mode))
}
