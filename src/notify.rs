//! Event-driven waiting on local filesystems: one inotify watch per process and state
//! directory, shared by every waiter in the process, which wakes them through
//! `crossbeam-channel`. It only shortens waits: waiters re-run the protocol on every
//! wake-up, and the polling back-off stays the floor (inotify sees nothing from other
//! hosts and its queue can overflow).

use std::collections::HashMap;
use std::os::fd::{AsFd, AsRawFd};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use crossbeam_channel::{Receiver, Sender, TrySendError};
use nix::errno::Errno;
use nix::sys::inotify::{AddWatchFlags, InitFlags, Inotify};
use nix::sys::stat::fstat;
use parking_lot::Mutex;

type Key = (u64, u64);

/// Watchers by state directory `(dev, ino)`.
static WATCHERS: Mutex<Option<HashMap<Key, Arc<Watcher>>>> = Mutex::new(None);
static NEXT_ID: AtomicU64 = AtomicU64::new(0);

#[derive(Debug)]
struct Watcher {
    subscribers: Mutex<Vec<(u64, Sender<()>)>>,
    dead: AtomicBool,
}

impl Watcher {
    fn broadcast(&self) {
        for (_, tx) in self.subscribers.lock().iter() {
            // A full channel already holds a wake-up: coalesce.
            match tx.try_send(()) {
                Ok(()) | Err(TrySendError::Full(())) | Err(TrySendError::Disconnected(())) => {}
            }
        }
    }
}

/// A waiter's registration: wakes on any change in the state directory.
#[derive(Debug)]
pub(crate) struct Subscription {
    id: u64,
    rx: Receiver<()>,
    watcher: Arc<Watcher>,
}

impl Subscription {
    /// Waits for a change or for `pause`, whichever comes first.
    pub(crate) fn wait(&self, pause: Duration) {
        if self.watcher.dead.load(Ordering::Relaxed) {
            std::thread::sleep(pause);
        } else {
            let _ = self.rx.recv_timeout(pause);
        }
    }
}

impl Drop for Subscription {
    fn drop(&mut self) {
        self.watcher
            .subscribers
            .lock()
            .retain(|(id, _)| *id != self.id);
    }
}

/// Subscribes to changes in the directory open as `dir`. `None` if inotify is not
/// available (then waiting is plain polling).
pub(crate) fn subscribe(dir: impl AsFd) -> Option<Subscription> {
    let st = fstat(&dir).ok()?;
    #[allow(clippy::unnecessary_cast, clippy::useless_conversion)]
    let key: Key = (st.st_dev as u64, st.st_ino as u64);
    let watcher = {
        let mut map = WATCHERS.lock();
        let map = map.get_or_insert_with(HashMap::new);
        match map.get(&key) {
            Some(w) if !w.dead.load(Ordering::Relaxed) => Arc::clone(w),
            _ => {
                let w = start(&dir)?;
                map.insert(key, Arc::clone(&w));
                w
            }
        }
    };
    let (tx, rx) = crossbeam_channel::bounded(1);
    let id = NEXT_ID.fetch_add(1, Ordering::Relaxed);
    watcher.subscribers.lock().push((id, tx));
    Some(Subscription { id, rx, watcher })
}

fn start(dir: &impl AsFd) -> Option<Arc<Watcher>> {
    let inotify = Inotify::init(InitFlags::IN_CLOEXEC).ok()?;
    // The magic link names exactly the directory we hold open, whatever its path is now.
    let path = format!("/proc/self/fd/{}", dir.as_fd().as_raw_fd());
    inotify
        .add_watch(
            path.as_str(),
            // Every wait in the protocol ends with a file going away (a writer, a queued
            // writer, a reader, a breaker): creations never unblock anyone, so they are
            // not watched, and neither are the names no one waits for (below).
            AddWatchFlags::IN_DELETE
                | AddWatchFlags::IN_MOVED_FROM
                | AddWatchFlags::IN_DELETE_SELF
                | AddWatchFlags::IN_ONLYDIR,
        )
        .ok()?;
    let watcher = Arc::new(Watcher {
        subscribers: Mutex::new(Vec::new()),
        dead: AtomicBool::new(false),
    });
    let w = Arc::clone(&watcher);
    std::thread::Builder::new()
        .name("rwdir-inotify".into())
        .spawn(move || run(inotify, w))
        .ok()?;
    Some(watcher)
}

fn run(inotify: Inotify, watcher: Arc<Watcher>) {
    loop {
        match inotify.read_events() {
            Ok(events) => {
                let gone = events.iter().any(|e| {
                    e.mask
                        .intersects(AddWatchFlags::IN_IGNORED | AddWatchFlags::IN_DELETE_SELF)
                });
                if gone {
                    break;
                }
                if events.iter().any(wakes_waiters) {
                    watcher.broadcast();
                }
            }
            Err(Errno::EINTR) => continue,
            Err(_) => break,
        }
    }
    // The directory went away (or inotify failed): wake everyone, fall back to polling.
    watcher.dead.store(true, Ordering::Relaxed);
    watcher.broadcast();
}

/// Whether an event can end someone's wait: the removal of a lock file other than a
/// temporary file or a fencing token (or an overflow, after which anything may have
/// happened).
fn wakes_waiters(e: &nix::sys::inotify::InotifyEvent) -> bool {
    if e.mask.contains(AddWatchFlags::IN_Q_OVERFLOW) {
        return true;
    }
    let Some(name) = e.name.as_ref() else {
        return true;
    };
    use std::os::unix::ffi::OsStrExt as _;
    !matches!(
        crate::names::LockName::parse(name.as_bytes()),
        Some(crate::names::LockName::Tmp { .. } | crate::names::LockName::Token(_)) | None
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Instant;

    #[test]
    fn a_change_wakes_a_waiter() {
        let dir = tempfile::tempdir().expect("tempdir");
        let fd = std::fs::File::open(dir.path()).expect("open dir");
        let sub = subscribe(&fd).expect("inotify available");
        let path = dir.path().join(".master_lock");
        std::fs::write(&path, b"x").expect("write");
        let t = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(50));
            std::fs::remove_file(path).expect("remove");
        });
        let start = Instant::now();
        sub.wait(Duration::from_secs(20));
        assert!(start.elapsed() < Duration::from_secs(10));
        t.join().expect("join");
    }
}
