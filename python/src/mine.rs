//! The guards each thread took through the blocking API after waiting: what lets a
//! thread's request that only its own release could grant fail with WouldDeadlock
//! instead of waiting for ever.
//!
//! The library makes that check for the guards its blocking calls take (`try_read` and
//! `try_write` here: the first attempt of every blocking acquisition), but a guard this
//! binding got by driving `read_async`/`write_async` counts as a task's, not the
//! thread's (the library has no public way to say otherwise). So those guards are
//! recorded here, per thread and process, and asked about once the first attempt has
//! found the lock busy: then any guard of the calling thread on the same state
//! directory is in the way. A writer waits for every reader and writer; a reader was
//! refused because a writer holds or waits, and every writer waits for the reader's
//! own guard. Guards taken by asyncio tasks are not recorded: tasks are not threads.

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, Weak};
use std::thread::ThreadId;

use rwdir::Kind;

/// What the record needs of a guard.
pub(crate) trait Probe: Send + Sync {
    /// Not yet released, and not found lost.
    fn holds(&self) -> bool;
    /// Its lock file.
    fn file(&self) -> &Path;
}

struct Record {
    thread: ThreadId,
    pid: u32,
    kind: Kind,
    guard: Weak<dyn Probe>,
}

static RECORDS: Mutex<Vec<Record>> = Mutex::new(Vec::new());

fn records() -> std::sync::MutexGuard<'static, Vec<Record>> {
    RECORDS.lock().unwrap_or_else(|p| p.into_inner())
}

/// Records that the calling thread took `guard` (of `kind`) after waiting.
pub(crate) fn record(kind: Kind, guard: &Arc<dyn Probe>) {
    let mut all = records();
    all.retain(|r| r.guard.upgrade().is_some_and(|g| g.holds()));
    all.push(Record {
        thread: std::thread::current().id(),
        pid: std::process::id(),
        kind,
        guard: Arc::downgrade(guard),
    });
}

/// `(st_dev, st_ino)` of a directory, if it can be looked at.
fn dir_id(path: &Path) -> Option<(u64, u64)> {
    std::fs::metadata(path).ok().map(|m| (m.dev(), m.ino()))
}

/// The calling thread's recorded guard on the state directory `state` (the write guard
/// first), whose lock file is still there.
pub(crate) fn in_the_way(state: &Path) -> Option<(Kind, PathBuf)> {
    let thread = std::thread::current().id();
    let pid = std::process::id();
    let mut mine: Vec<(Kind, PathBuf)> = records()
        .iter()
        .filter(|r| r.thread == thread && r.pid == pid)
        .filter_map(|r| {
            r.guard
                .upgrade()
                .filter(|g| g.holds())
                .map(|g| (r.kind, g.file().to_path_buf()))
        })
        .collect();
    if mine.is_empty() {
        return None;
    }
    let id = dir_id(state)?;
    mine.retain(|(_, file)| file.exists() && file.parent().and_then(dir_id) == Some(id));
    mine.sort_by_key(|(kind, _)| *kind != Kind::Write);
    mine.into_iter().next()
}
