//! Judging whether the owner of a lock file is still alive (docs/protocol.md §2.2).

use std::time::{Duration, SystemTime};

use crate::holder::Holder;
use crate::sys::{self, ExitWatch, Probe};

/// The verdict on a lock file's owner.
///
/// # Examples
///
/// ```
/// let dir = tempfile::tempdir()?;
/// let lock = rwdir::DirLock::new(dir.path())?;
/// let _r = lock.read()?;
/// assert_eq!(lock.status()?.readers[0].liveness, rwdir::Liveness::Alive);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Liveness {
    /// The owner runs on this host, in this pid namespace, and is alive (or it is this
    /// very process).
    Alive,
    /// The owner is gone: its process exited or its pid was reused, or (for another
    /// host, another pid namespace, or a malformed file) its lease has expired.
    Dead,
    /// The owner cannot be checked directly (another host or pid namespace, or the file
    /// is malformed) and its lease has not expired: it counts as held.
    Unknown,
}

impl Liveness {
    /// `true` for `Dead`: only then may the file be removed by someone else.
    ///
    /// # Examples
    ///
    /// ```
    /// assert!(rwdir::Liveness::Dead.is_dead());
    /// assert!(!rwdir::Liveness::Unknown.is_dead()); // unknown counts as held
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn is_dead(self) -> bool {
        self == Liveness::Dead
    }

    /// `Some(true)` for alive, `Some(false)` for dead, `None` for unknown (the JSON form
    /// of `rwdir status`).
    ///
    /// # Examples
    ///
    /// ```
    /// assert_eq!(rwdir::Liveness::Alive.as_option(), Some(true));
    /// assert_eq!(rwdir::Liveness::Unknown.as_option(), None);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn as_option(self) -> Option<bool> {
        match self {
            Liveness::Alive => Some(true),
            Liveness::Dead => Some(false),
            Liveness::Unknown => None,
        }
    }
}

/// Judges the owner of a file whose content parsed to `record` (or did not parse:
/// `None`) and whose last heartbeat was `mtime`.
///
/// - same boot id and pid namespace: exact (pid gone or start time differs → dead; alive
///   while any process of the recorded process group lives);
/// - otherwise, or for a malformed file: dead once `now - mtime` exceeds the lease (the
///   record's own lease, or `malformed_lease` for a malformed file).
///
/// A process never judges itself dead.
#[cfg(test)]
pub(crate) fn judge(
    record: Option<&Holder>,
    mtime: SystemTime,
    now: SystemTime,
    malformed_lease: Duration,
) -> Liveness {
    verdict(record, mtime, now, malformed_lease).0
}

/// [`judge`], and the process whose exit would change an `Alive` verdict when it was
/// reached by the recorded pid itself: a waiter can then wait for that exit as an event
/// (a pidfd) instead of polling for it. `None` for every other verdict, and for an
/// owner alive only through its process group (no pidfd names a group).
pub(crate) fn verdict(
    record: Option<&Holder>,
    mtime: SystemTime,
    now: SystemTime,
    malformed_lease: Duration,
) -> (Liveness, Option<ExitWatch>) {
    let age = now.duration_since(mtime).unwrap_or(Duration::ZERO);
    let Some(h) = record else {
        return if age > malformed_lease {
            (Liveness::Dead, None)
        } else {
            (Liveness::Unknown, None)
        };
    };
    let me = sys::identity();
    let same_host =
        !me.boot_id.is_empty() && h.boot_id == me.boot_id && me.pidns != 0 && h.pidns == me.pidns;
    if same_host {
        if h.pid == me.pid && h.start == me.start {
            return (Liveness::Alive, Some(ExitWatch::Me));
        }
        if sys::probe_pid(h.pid, h.start) == Probe::Alive {
            let owner = ExitWatch::Process {
                pid: h.pid,
                start: h.start,
            };
            return (Liveness::Alive, Some(owner));
        }
        if sys::group_alive(h.pgid) {
            return (Liveness::Alive, None);
        }
        return (Liveness::Dead, None);
    }
    if age > h.lease() {
        (Liveness::Dead, None)
    } else {
        (Liveness::Unknown, None)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::holder::Kind;
    use uuid::Uuid;

    fn record(pid: u32, start: u64, same_host: bool) -> Holder {
        let me = sys::identity();
        Holder {
            kind: Kind::Read,
            host: me.host.clone(),
            boot_id: if same_host {
                me.boot_id.clone()
            } else {
                "other".into()
            },
            pidns: me.pidns,
            pid,
            start,
            pgid: 0,
            nonce: Uuid::new_v4(),
            since_ns: 0,
            lease_ms: 10_000,
        }
    }

    #[test]
    fn table() {
        let me = sys::identity();
        let now = SystemTime::now();
        let old = now - Duration::from_secs(60);
        let lease = Duration::from_secs(10);
        // Self: alive even if the file is ancient.
        let r = record(me.pid, me.start, true);
        assert_eq!(judge(Some(&r), old, now, lease), Liveness::Alive);
        // A previous incarnation of our pid: dead.
        let r = record(me.pid, me.start + 7, true);
        assert_eq!(judge(Some(&r), now, now, lease), Liveness::Dead);
        // Init is alive (start time unknown to us: we read it).
        let r = record(1, sys::start_time(1).unwrap_or(0), true);
        assert_eq!(judge(Some(&r), old, now, lease), Liveness::Alive);
        // Another host: the lease decides.
        let r = record(me.pid, me.start, false);
        assert_eq!(judge(Some(&r), now, now, lease), Liveness::Unknown);
        assert_eq!(judge(Some(&r), old, now, lease), Liveness::Dead);
        // Malformed: the caller's lease decides.
        assert_eq!(judge(None, now, now, lease), Liveness::Unknown);
        assert_eq!(judge(None, old, now, lease), Liveness::Dead);
        // A clock in the future never makes a file dead.
        let future = now + Duration::from_secs(3600);
        assert_eq!(judge(None, future, now, lease), Liveness::Unknown);
    }
}
