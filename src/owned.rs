//! The guards this process holds, by state directory and by the thread that took them:
//! what lets an acquisition see that only its own thread's guards stand in its way, and
//! fail with [`Error::WouldDeadlock`](crate::Error::WouldDeadlock) instead of waiting
//! for ever.
//!
//! A guard counts as its taker's (the thread that acquired it, or that downgraded it)
//! until it is released or dropped, wherever it was moved meanwhile: Rust does not
//! tell a value that it moved, so this is the one rule that can be kept exactly. A
//! guard known to be lost (its file gone, or found replaced) is in nobody's way. The
//! records are per process: a forked child does not own its parent's guards, and does
//! not count them.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Weak};
use std::thread::ThreadId;

use parking_lot::Mutex;

use crate::fsops::StateDir;
use crate::holder::Kind;
use crate::names::LockName;
use crate::sys::FileId;

/// One held guard.
#[derive(Debug)]
struct Record {
    id: u64,
    /// The state directory.
    dir: FileId,
    thread: ThreadId,
    /// The process that took it (a forked child inherits the records, not the guards).
    pid: u32,
    kind: Kind,
    /// Its lock file: the name, to see whether it is still there, and the path of the
    /// state directory the guard was taken through, for the message.
    name: LockName,
    dir_path: Arc<Path>,
    /// The guard's state: whether it found its file lost. Weak: the record does not keep
    /// the guard's file alive (its last holder releases it), and gone means gone.
    guard: Weak<dyn Lost>,
}

/// What a record asks of its guard: whether it found its file lost (gone, or replaced).
pub(crate) trait Lost: Send + Sync {
    /// Whether the guard found its file lost: a recorded fact, no system call.
    fn found_lost(&self) -> bool;
}

/// The records. A handful at most in any real program: a vector is the fastest map.
static RECORDS: Mutex<Vec<Record>> = Mutex::new(Vec::new());
static NEXT: AtomicU64 = AtomicU64::new(1);

/// A guard's record; [`Mark::forget`] (or dropping it) removes it.
#[derive(Debug)]
pub(crate) struct Mark {
    id: u64,
    /// The process that made it: a forked child leaves the records alone.
    pid: u32,
    /// Whether [`Mark::forget`] removed the record already.
    forgotten: AtomicBool,
}

impl Mark {
    /// Records that the calling thread now holds `kind` (read or write) in the state
    /// directory `sd`, through the lock file `name`; `guard` says once it is lost.
    /// `pid` is the calling process's (the one in the file's record: an acquisition runs
    /// on one thread, whose process cannot change).
    pub(crate) fn new(
        sd: &StateDir,
        kind: Kind,
        name: LockName,
        guard: Weak<dyn Lost>,
        pid: u32,
    ) -> Mark {
        let id = NEXT.fetch_add(1, Ordering::Relaxed);
        RECORDS.lock().push(Record {
            id,
            dir: sd.id(),
            thread: std::thread::current().id(),
            pid,
            kind,
            name,
            dir_path: sd.shared_path(),
            guard,
        });
        Mark {
            id,
            pid,
            forgotten: AtomicBool::new(false),
        }
    }

    /// Removes the record: the guard was released. Idempotent. Does nothing in a forked
    /// child: another thread of the parent may have held the records' lock at the
    /// fork, and the child's copy of that lock would then never be released (the
    /// child's copies of the records do not count anyway).
    pub(crate) fn forget(&self) {
        if self.forgotten.load(Ordering::Relaxed) || crate::sys::pid() != self.pid {
            return;
        }
        self.forgotten.store(true, Ordering::Relaxed);
        RECORDS.lock().retain(|r| r.id != self.id);
    }
}

impl Drop for Mark {
    fn drop(&mut self) {
        self.forget();
    }
}

/// A guard of the calling thread that stands in the way.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Mine {
    /// Read or write.
    pub(crate) kind: Kind,
    /// Its lock file.
    pub(crate) path: PathBuf,
}

/// The calling thread's guard in `sd` that a request for `want` would wait for, if it
/// must wait at all: for a write, any guard (a writer waits for every reader and every
/// writer); for a read, a write guard. A read guard is in the way of another read only
/// while a writer waits (the writer waits for it, the read for the writer): that is
/// [`mine_waited_for`], asked when the read would wait.
pub(crate) fn in_the_way(sd: &StateDir, want: Kind) -> Option<Mine> {
    find(sd, |kind| want == Kind::Write || kind == Kind::Write)
}

/// The calling thread's read guard in `sd`, which a waiting writer waits for.
pub(crate) fn mine_waited_for(sd: &StateDir) -> Option<Mine> {
    find(sd, |kind| kind == Kind::Read)
}

fn find(sd: &StateDir, blocks: impl Fn(Kind) -> bool) -> Option<Mine> {
    let records = RECORDS.lock();
    // Nothing held in this process (the common case): no need to ask who we are.
    if records.is_empty() {
        return None;
    }
    let thread = std::thread::current().id();
    let pid = crate::sys::pid();
    let dir = sd.id();
    // The guards looked at are kept alive until the records' lock is released: should
    // one be dropped meanwhile, the last reference, ours, releases its file, which must
    // not happen under this lock.
    let mut looked_at = Vec::new();
    let candidates: Vec<(Kind, LockName, PathBuf)> = records
        .iter()
        .filter(|r| r.dir == dir && r.thread == thread && r.pid == pid && blocks(r.kind))
        .filter(|r| {
            // A guard already gone is in nobody's way.
            r.guard.upgrade().is_some_and(|guard| {
                let lost = guard.found_lost();
                looked_at.push(guard);
                !lost
            })
        })
        .map(|r| (r.kind, r.name, r.dir_path.join(r.name.text().as_str())))
        .collect();
    drop(records);
    drop(looked_at);
    // A write guard first: it is the one that explains the wait. A guard whose file is
    // gone (removed by a `cleanup --all`, say) was lost without noticing yet.
    let mut mine: Vec<_> = candidates
        .into_iter()
        .filter(|(_, name, _)| sd.exists(name))
        .collect();
    mine.sort_by_key(|(kind, _, _)| *kind != Kind::Write);
    let (kind, _, path) = mine.into_iter().next()?;
    Some(Mine { kind, path })
}
