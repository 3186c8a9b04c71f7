//! `rwdir._rwdir`: the Python binding of the rwdir library (issue #16).
//!
//! Every lock operation is the library's own; this crate only converts values, maps
//! errors to Python exceptions and drives the library's waits so that Python stays
//! responsive: blocking waits release the GIL and, in the main thread, are woken by
//! signals (Ctrl-C) through Python's wakeup fd ([`wait`]); asyncio waits run on a tokio
//! runtime of their own and never block the event loop. The Python-facing rest (dataclasses, exceptions, the asyncio glue)
//! is `rwdir/__init__.py`.

use pyo3::prelude::*;

mod aio;
mod errors;
mod guard;
mod lock;
mod mine;
mod values;
mod wait;

/// The compiled part of the `rwdir` package; import `rwdir`, not this module.
#[pymodule]
fn _rwdir(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<lock::PyDirLock>()?;
    m.add_class::<guard::PyReadGuard>()?;
    m.add_class::<guard::PyWriteGuard>()?;
    m.add_class::<aio::AsyncOp>()?;
    m.add_function(wrap_pyfunction!(lock::cleanup, m)?)?;
    m.add_function(wrap_pyfunction!(aio::start_async, m)?)?;
    m.add("DEFAULT_LEASE", rwdir::DEFAULT_LEASE.as_secs_f64())?;
    m.add(
        "DEFAULT_POLL",
        (
            rwdir::DEFAULT_MIN_POLL.as_secs_f64(),
            rwdir::DEFAULT_MAX_POLL.as_secs_f64(),
        ),
    )?;
    Ok(())
}
