//! The settings of a lock, shared by every layer: what `Builder` sets, what the protocol
//! and the judges read.

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::time::Duration;

/// The settings an acquisition runs with.
#[derive(Debug, Clone)]
pub(crate) struct Config {
    pub(crate) dir: PathBuf,
    pub(crate) state_dir: Option<PathBuf>,
    pub(crate) lease: Duration,
    pub(crate) min_poll: Duration,
    pub(crate) max_poll: Duration,
    pub(crate) pgid: u32,
    /// Set from another thread to make waiting acquisitions give up (`Cancel`).
    pub(crate) cancel: Option<Arc<AtomicBool>>,
    /// Whether held files are refreshed by the process's heartbeat thread
    /// (`Builder::background_heartbeat`); otherwise only by the guards' `refresh`.
    pub(crate) heartbeat: bool,
    /// Whether a filesystem that [`crate::Filesystem::refused`] is used anyway.
    pub(crate) allow_unsafe_fs: bool,
    /// `Builder::cache_window`: overrides the filesystem kind's cache window.
    pub(crate) cache_window: Option<std::time::Duration>,
    /// `Builder::share_readers`: whether a read may join a reader's file this process
    /// already holds (V11, docs/protocol-notes.md).
    pub(crate) share_readers: bool,
}

impl Config {
    /// Whether this lock's `Cancel` handle was cancelled: waits give up at their next look.
    pub(crate) fn cancelled(&self) -> bool {
        self.cancel
            .as_ref()
            .is_some_and(|c| c.load(std::sync::atomic::Ordering::Relaxed))
    }

    /// How often an owner renews each of its files (docs/protocol.md §3.8, H2): lease/3, so
    /// that a file whose owner runs is never older than a third of the lease, from its
    /// creation to its removal, while waiting as well as while holding.
    pub(crate) fn refresh_period(&self) -> Duration {
        (self.lease / 3).max(Duration::from_millis(50))
    }
}

/// How much longer than the maximum poll interval a waiter's pauses may grow where
/// events wake it (a local filesystem with inotify): see
/// [`Builder::poll_interval`](crate::Builder::poll_interval).
pub const EVENT_BACKSTOP: u32 = 20;

/// How much longer than the maximum poll interval a waiter may go without a look where
/// both the one file it waits for and its owner's exit make events (a local filesystem
/// with inotify, and an owner of this host and pid namespace, watched through a pidfd):
/// 300 × 100 ms, 30 s, by default. Its pauses keep their usual length, but one that runs
/// out with no event sleeps on without listing or judging anything. See
/// [`Builder::poll_interval`](crate::Builder::poll_interval).
pub(crate) const COVERED_BACKSTOP: u32 = 300;
