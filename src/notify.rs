//! Event-driven waiting on local filesystems: one inotify watch per process and state
//! directory, shared by every waiter in the process. It only shortens waits: waiters
//! re-run the protocol on every wake-up, and the polling back-off stays the floor
//! (inotify sees nothing from other hosts and its queue can overflow).
//!
//! There is no thread of its own. One waiting thread at a time, the *leader*, blocks
//! in `ppoll` on the inotify descriptor itself, so that a removal in another process
//! wakes it directly (one kernel wake-up: about 1.6× flock's own on the benchmark
//! machine, against about 3.5× through a relay thread; BENCHMARKS.md, `wake`). The
//! others, the *followers*, wait on their `crossbeam-channel` receivers; the leader
//! wakes them when it reads an event that can end a wait, and hands the lead over when
//! it stops waiting. Events that arrive while no one leads stay queued in the
//! descriptor for the next leader.
//!
//! Each waiter says which removals concern it ([`Interest`], issue #14): a queued writer
//! only its predecessor's queue file, or `.master_lock` once it is first; a writer
//! waiting for readers only readers' files; a reader `.master_lock` and queued writers'
//! files. The leader passes each event on only to the waiters it concerns, and goes back
//! to `ppoll` if it does not concern itself: a process none of whose waiters is
//! concerned reads the event and stays asleep, and no waiter lists the directory for a
//! removal that cannot end its wait. Until a waiter says what concerns it (from its
//! listing's start, [`Subscription::forget`], to its sleep) every removal does.
//!
//! The shared watch's instance and its watch of the directory are made by the first
//! wait that needs them (a wait on the shared watch, [`Watcher::widen`]); until then
//! there are none. A process whose waiters all wait on one file each (below) then holds
//! one instance per waiting thread and none for the directory, and has no `unlink` in
//! the state directory queued for it: under contention every process used to receive,
//! read and pass over every removal, and a herd of 64 waiting processes used to hold
//! 128 instances, every one a user may have by default.
//!
//! A waiter concerned with one file only (a queued writer: its predecessor's queue
//! file, or `.master_lock` once it is first; a reader: the youngest queued writer's
//! file, or `.master_lock`) does not wait on the shared watch at all: it watches that
//! file with an inotify instance of its own, for as long as it sleeps (`IN_ATTRIB`,
//! which `unlink` raises as it drops the link count). The kernel then wakes it, and no
//! other process, when that file goes: a hand-off between queued writers wakes two
//! processes however many wait. A `futimens` (a renewal, the grant's touch) raises
//! `IN_ATTRIB` too; one `fstatat` of the name tells it from a removal, and the waiter
//! sleeps on. The name is looked at once more right after the watch is made: a file
//! removed while its watch was being made can leave a watch that never reports
//! ([`Subscription::still_there`]).
//!
//! Except for `.master_lock`: a blocking wait for it watches the state directory's
//! removals on the thread's own instance, and sleeps through every name but that one.
//! A watch of a file is torn down with its inode, inside the releasing `unlink` or
//! `close`, and on the benchmark machine that cost a hand-off 11-20 µs: the holder's
//! `fstatat` + `unlink` took 22-25 µs with a watch on the file against 9-12 µs with one
//! on the directory (`docs/probes/handoff_floor.c`; docs/notes/handoff.md). While
//! `.master_lock` is held, the other lock files that go are few (readers leaving while
//! a writer waits for them to drain, a writer that gives up its place in the queue, a
//! fencing token's rename): a waiter reads such an event and sleeps on, as the issue's
//! "a process whose waiters are not concerned reads the event and stays asleep" has it.
//! The queued writers behind the first still watch their predecessors' files, so a
//! grant wakes no more processes than before. The directory's watch is not removed on
//! the waiter's way in, but later: by the thread's next wait that needs another watch,
//! or after its next release ([`let_go_lingering`]). Waits of the async API keep
//! watching the file.
//!
//! Instances are a per-user resource (`fs.inotify.max_user_instances`, 128 by default,
//! shared by every program of the user), so a process makes them only when a wait needs
//! one, and keeps few: the watchers of at most [`IDLE_WATCHERS`] state directories no one
//! in it waits on, and instances of their own for at most [`OWN_INSTANCES`] threads (the
//! others wait on the shared watch). Where none can be made, waits poll.
//!
//! A reader's wait on one file (a queued writer's) is quiet ([`Subscription::quiet`]):
//! it watches for the file's deletion (`IN_DELETE_SELF`, raised when its last
//! reference goes) instead of `IN_ATTRIB`, which `unlink` raises while it holds the
//! state directory's lock. A release unlinks its file while holding it open and closes
//! it right after, so a herd of readers wakes once that lock is free, instead of piling
//! up on it behind the releasing process (docs/notes/contention.md §11). A file kept
//! open by another process past its removal is found gone by a look at its name every
//! `QUIET_CHECK`.

use std::collections::HashMap;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU8, AtomicU64, Ordering};
use std::task::Waker;
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, Sender};
use nix::errno::Errno;
use nix::poll::{PollFd, PollFlags, ppoll};
use nix::sys::inotify::{AddWatchFlags, InitFlags, Inotify, WatchDescriptor};
use nix::sys::time::TimeSpec;
use parking_lot::Mutex;

use crate::names::LockName;
use crate::sys::{self, ExitWatch, FileId};

type Key = FileId;

/// Watchers by state directory `(dev, ino)`.
static WATCHERS: Mutex<Option<HashMap<Key, Arc<Watcher>>>> = Mutex::new(None);
static NEXT_ID: AtomicU64 = AtomicU64::new(0);

/// What a wake-up reports: which kinds of lock file were removed since the subscriber
/// last looked ([`Subscription::forget`]); [`Removed::NOTHING`] when the pause just ran
/// out. A set of two flags, kept in an `AtomicU8` between threads.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) struct Removed(u8);

impl Removed {
    /// Nothing that can end a wait.
    pub(crate) const NOTHING: Removed = Removed(0);
    /// `.master_lock` was removed.
    pub(crate) const MASTER: Removed = Removed(1);
    /// Another lock file that can end a wait (a pending writer's, a reader's, a
    /// breaker's) was removed, or anything may have happened (queue overflow, the
    /// directory gone, a read error).
    pub(crate) const OTHER: Removed = Removed(2);
    /// With [`Removed::OTHER`], from a wait on one file: the kernel said that file's
    /// inode was deleted (`IN_DELETE_SELF`), or the name was found absent. For a unique
    /// name (a queued writer's file) the name is then gone for good, and need not be
    /// looked up again. Never set by the shared watch.
    pub(crate) const GONE: Removed = Removed(4);

    pub(crate) fn is_nothing(self) -> bool {
        self == Removed::NOTHING
    }

    /// Whether the removal of `.master_lock` is among them.
    pub(crate) fn has_master(self) -> bool {
        self.0 & Removed::MASTER.0 != 0
    }

    /// Whether the one file waited for was seen gone ([`Removed::GONE`]).
    pub(crate) fn file_gone(self) -> bool {
        self.0 & Removed::GONE.0 != 0
    }

    /// Takes what `cell` holds, leaving nothing.
    fn take(cell: &AtomicU8) -> Removed {
        Removed(cell.swap(0, Ordering::SeqCst))
    }

    /// Adds `self` to what `cell` holds.
    fn add_to(self, cell: &AtomicU8) {
        cell.fetch_or(self.0, Ordering::SeqCst);
    }
}

impl std::ops::BitOr for Removed {
    type Output = Removed;

    fn bitor(self, other: Removed) -> Removed {
        Removed(self.0 | other.0)
    }
}

/// Which removals can end a waiter's wait, by lock file name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Interest {
    master: bool,
    /// Every queued writer's file.
    pending: bool,
    /// One file: a queued writer's predecessor in the queue.
    one: Option<LockName>,
    slaves: bool,
    /// Breakers' markers and anything not named above.
    others: bool,
}

impl Interest {
    /// Every removal.
    pub(crate) const ALL: Interest = Interest {
        master: true,
        pending: true,
        one: None,
        slaves: true,
        others: true,
    };
    const NONE: Interest = Interest {
        master: false,
        pending: false,
        one: None,
        slaves: false,
        others: false,
    };
    /// `.master_lock` only: the first queued writer, waiting for the holder.
    pub(crate) const MASTER: Interest = Interest {
        master: true,
        ..Interest::NONE
    };
    /// `.master_lock` and every queued writer's file: a reader, which waits for
    /// every writer.
    pub(crate) const WRITERS: Interest = Interest {
        master: true,
        pending: true,
        ..Interest::NONE
    };
    /// Readers' files: a writer waiting for the readers to leave.
    pub(crate) const READERS: Interest = Interest {
        slaves: true,
        ..Interest::NONE
    };

    /// One queued writer's file: the predecessor of a queued writer that is not first,
    /// or the youngest queued writer, for a reader waiting behind the queue.
    pub(crate) fn only(name: LockName) -> Interest {
        Interest {
            one: Some(name),
            ..Interest::NONE
        }
    }

    /// The one file this interest is in, if it is in one file only.
    pub(crate) fn single_file(&self) -> Option<LockName> {
        match *self {
            Interest {
                one: Some(name),
                master: false,
                pending: false,
                slaves: false,
                others: false,
            } => Some(name),
            i if i == Interest::MASTER => Some(LockName::Master),
            _ => None,
        }
    }

    /// What the removal `e` reports to a waiter with this interest.
    fn concern(&self, e: &Event) -> Removed {
        let name = match e {
            Event::Anything => return Removed::OTHER,
            Event::Removed(name) => name,
        };
        let yes = self.one == Some(*name)
            || match name {
                LockName::Master => self.master,
                LockName::Pending { .. } => self.pending,
                LockName::Slave { .. } => self.slaves,
                _ => self.others,
            };
        match (yes, name) {
            (false, _) => Removed::NOTHING,
            (true, LockName::Master) => Removed::MASTER,
            (true, _) => Removed::OTHER,
        }
    }

    fn concern_all(&self, events: &[Event]) -> Removed {
        events
            .iter()
            .fold(Removed::NOTHING, |r, e| r | self.concern(e))
    }
}

/// A removal read from the descriptor that can end some wait.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Event {
    Removed(LockName),
    /// Anything may have happened: the queue overflowed, the directory went away, or
    /// reading failed.
    Anything,
}

/// A subscriber as the watcher sees it.
#[derive(Debug)]
struct Member {
    id: u64,
    /// Wakes the subscriber: for a change (then `changed` is set first), or to take
    /// over the lead.
    tx: Sender<()>,
    /// Something that can end a wait happened since the subscriber last looked: the
    /// [`Removed`] bits, 0 for nothing ([`Removed::NOTHING`]).
    changed: Arc<AtomicU8>,
    /// The subscriber is (about to be) blocked as a follower.
    following: Arc<AtomicBool>,
    /// Which removals concern it.
    interest: Arc<Mutex<Interest>>,
    /// Wakes the subscriber's task when it waits on the reactor (`wait_async`).
    task: Arc<Mutex<Option<Waker>>>,
}

impl Member {
    /// Wakes the subscriber, whether a thread or a task waits on it.
    fn wake(&self) {
        // A full channel already holds a wake-up: coalesce.
        let _ = self.tx.try_send(());
        if let Some(w) = self.task.lock().take() {
            w.wake();
        }
    }
}

#[derive(Debug)]
struct Watcher {
    /// The instance watching the directory, made by the first wait on the shared watch
    /// ([`Watcher::widen`]). A process whose waiters all wait on one file each (on
    /// instances of their own) never makes it: a waiting process then holds one
    /// instance, not two, of the user's 128.
    inotify: std::sync::OnceLock<Inotify>,
    /// The process that made the watcher: after a `fork` the child makes its own (it
    /// would otherwise read, and so take, the parent's events).
    pid: u32,
    /// Whether a thread is reading `inotify` now.
    leading: AtomicBool,
    members: Mutex<Vec<Member>>,
    /// When it was last subscribed to, in the order of [`USES`]: the watchers kept while
    /// idle are the ones used last (see [`evict_idle`]).
    used: AtomicU64,
    /// No instance could be made, the directory went away, or reading failed: waits are
    /// plain sleeps.
    dead: AtomicBool,
    /// Whether the directory is watched (`IN_DELETE`, `IN_DELETE_SELF`): only from the
    /// first wait that needs it, see [`Watcher::widen`].
    wide: AtomicBool,
    /// Serialises [`Watcher::widen`].
    widening: Mutex<()>,
    /// The instance that async waits on one file watch their files with (made at the
    /// first; `None` if it cannot be).
    #[cfg(feature = "tokio")]
    files: std::sync::OnceLock<Option<reactor::Files>>,
}

impl Watcher {
    /// Makes the instance and watches the directory's removals (`IN_DELETE`) through
    /// `dir_link`, a name of the directory open in this process. Until a wait needs them
    /// there is no instance: a process whose waiters all wait on one file (on an
    /// instance of their own) would otherwise hold a second instance for nothing, and
    /// with the watch have every `unlink` in the state directory queued on it, read and
    /// passed over (issue #14: under contention that delivery was about a tenth of a
    /// grant's cost). `false` if the instance or the watch cannot be made (inotify
    /// missing, `max_user_instances` reached): the watcher is then dead, and waits poll.
    fn widen(&self, dir_link: &str) -> bool {
        let _one = self.widening.lock();
        if self.wide.load(Ordering::SeqCst) {
            return true;
        }
        let made =
            new_instance().and_then(|inotify| inotify.add_watch(dir_link, WIDE).map(|_| inotify));
        match made {
            Ok(inotify) => {
                // Set once, under `widening`, while `wide` is still false.
                let _ = self.inotify.set(inotify);
                // Only now: a look that finds `wide` set was made after the watch.
                self.wide.store(true, Ordering::SeqCst);
                true
            }
            Err(_) => {
                self.dead.store(true, Ordering::SeqCst);
                false
            }
        }
    }

    /// The instance, once a wait made it ([`Watcher::widen`]).
    fn instance(&self) -> Option<&Inotify> {
        self.inotify.get()
    }

    /// Tells every member but `except` of the `events` that concern it.
    fn broadcast(&self, events: &[Event], except: Option<u64>) {
        for m in self.members.lock().iter().filter(|m| Some(m.id) != except) {
            let removed = m.interest.lock().concern_all(events);
            if removed.is_nothing() {
                continue;
            }
            removed.add_to(&m.changed);
            m.wake();
        }
    }

    /// Gives up the lead and wakes the followers, one of which takes it.
    fn resign(&self, me: Option<u64>) {
        self.leading.store(false, Ordering::SeqCst);
        self.wake_followers(me);
    }

    /// Wakes the followers but `me`: a lead was given up.
    fn wake_followers(&self, me: Option<u64>) {
        for m in self.members.lock().iter().filter(|m| Some(m.id) != me) {
            if m.following.load(Ordering::SeqCst) {
                m.wake();
            }
        }
    }

    /// Whether the instance still watches a live directory (a watcher with no instance
    /// yet watches nothing that could be stale: [`Watcher::widen`] watches the
    /// directory its caller has open). Nobody reads the instance
    /// while nobody waits, so a removal of the directory may still be queued: a new
    /// directory can then have the old one's `(dev, ino)` (ext4 reuses inode numbers),
    /// and the old watch would never report a change in it. Reading what is queued
    /// settles it; changes read here are passed on to the members.
    ///
    /// Only the holder of the lead reads the instance: a read behind a leader's back
    /// could take the event its `ppoll` was woken for, and the leader would sleep on. So
    /// this reads only if it can take the lead, and passes changes on before it gives
    /// the lead up (a follower that takes over must find its flag already set). While
    /// someone leads, the leader reads the removal itself.
    fn current(&self) -> bool {
        if self.dead.load(Ordering::SeqCst) {
            return false;
        }
        if self.instance().is_none() {
            return true;
        }
        if self
            .leading
            .compare_exchange(false, true, Ordering::SeqCst, Ordering::SeqCst)
            .is_ok()
        {
            let events = self.drain();
            self.broadcast(&events, None);
            self.resign(None);
        }
        !self.dead.load(Ordering::SeqCst)
    }

    /// Reads what is queued (one `read`: what does not fit stays queued, and the
    /// descriptor stays readable for the next look). Returns the removals that can end
    /// some wait; none when no wait can have ended.
    fn drain(&self) -> Vec<Event> {
        self.read(false)
    }

    /// [`Watcher::drain`], or, with `all`, every read until the queue is empty: an
    /// edge-triggered reactor (`AsyncFd`) reports the descriptor readable again only
    /// after that.
    fn read(&self, all: bool) -> Vec<Event> {
        let mut found = Vec::new();
        let Some(inotify) = self.instance() else {
            // Not watching yet: nothing can be queued.
            return found;
        };
        loop {
            match inotify.read_events() {
                Ok(events) if all && !events.is_empty() => {
                    let gone = events.iter().any(|e| {
                        e.mask
                            .intersects(AddWatchFlags::IN_IGNORED | AddWatchFlags::IN_DELETE_SELF)
                    });
                    if gone {
                        self.dead.store(true, Ordering::SeqCst);
                        return vec![Event::Anything];
                    }
                    found.extend(events.iter().filter_map(event));
                }
                Ok(_) if all => return found,
                Ok(events) => {
                    let gone = events.iter().any(|e| {
                        e.mask
                            .intersects(AddWatchFlags::IN_IGNORED | AddWatchFlags::IN_DELETE_SELF)
                    });
                    if gone {
                        // The directory went away: fall back to polling.
                        self.dead.store(true, Ordering::SeqCst);
                        return vec![Event::Anything];
                    }
                    return events.iter().filter_map(event).collect();
                }
                Err(Errno::EINTR) => {}
                Err(Errno::EAGAIN) => return found,
                Err(_) => {
                    self.dead.store(true, Ordering::SeqCst);
                    return vec![Event::Anything];
                }
            }
        }
    }
}

/// A waiter's registration: wakes on the removal of a lock file in the state directory.
#[derive(Debug)]
pub(crate) struct Subscription<'d> {
    id: u64,
    rx: Receiver<()>,
    changed: Arc<AtomicU8>,
    following: Arc<AtomicBool>,
    interest: Arc<Mutex<Interest>>,
    /// Where `wait_async` leaves its task's waker for the watcher ([`Member::task`]).
    #[cfg_attr(not(feature = "tokio"), expect(dead_code))]
    task: Arc<Mutex<Option<Waker>>>,
    watcher: Arc<Watcher>,
    /// `/proc/self/fd/N` of the state directory, to name a file to watch.
    dir_link: String,
    /// The state directory, to look at one name in it without a path walk (see
    /// `wait_gone`). Borrowed: a descriptor of our own would keep the directory's inode
    /// alive, and its removal would then raise no `IN_DELETE_SELF` for the watcher.
    dir: BorrowedFd<'d>,
    /// The owner of the one file waited for, whose exit ends the wait too (see
    /// [`Subscription::concerns`]).
    owner: Mutex<Option<ExitWatch>>,
    /// A pidfd of the last owner waited for, kept while it stays the owner: a hand-off
    /// between queued writers then opens none.
    pidfd: Mutex<Option<(ExitWatch, OwnedFd)>>,
    /// The owner of the last wait that had none open: a pidfd is opened only at the
    /// second wait for the same owner, unless a judgement keeps one to copy (see
    /// `wait_on`).
    met: Mutex<Option<ExitWatch>>,
    /// Whether the last wait that ran out watched both the one file and its owner's
    /// exit ([`Subscription::covered`]).
    covered: AtomicBool,
    /// Whether the directory's watch reported removals when the subscriber last looked
    /// ([`Subscription::forget`]): a wait on that watch needs it to have, or a removal
    /// made between the look and the watch's widening would go unseen.
    looked_wide: AtomicBool,
    /// The watch of such a wait on the thread's own instance, kept for the next wait
    /// when no look comes between (see `Attempt::sleep`): the file, its inode when
    /// watched, the watch. Dropped at the next look ([`Subscription::forget`]).
    kept: Mutex<Option<(LockName, u64, WatchDescriptor)>>,
    /// Whether a wait on one file sleeps through `IN_ATTRIB` ([`Subscription::quiet`]).
    quiet: AtomicBool,
    /// The state directory's identity, for the watch a wait for `.master_lock` leaves
    /// on the thread's own instance ([`OwnInstance::lingering`]).
    key: FileId,
}

impl Subscription<'_> {
    /// Waits on watch `wd` of the state directory (`DIR_REMOVALS`) until an event says
    /// that the name `name` went away (its file was there when the watch was made, see
    /// `wait_on`), `until` comes, or `owner` (a pidfd) becomes readable. Removals of
    /// other names, and events of other watches of the instance, are read and slept
    /// through. An overflow of the queue, or the directory's own removal, ends the wait
    /// as a removal that is not certain: the caller looks. `None` if `ppoll` failed.
    fn wait_named(
        &self,
        inotify: &Inotify,
        (name, wd): (&str, WatchDescriptor),
        until: Option<Instant>,
        owner: Option<BorrowedFd<'_>>,
    ) -> Option<FileWait> {
        use std::os::unix::ffi::OsStrExt as _;
        let unsure = |unwatched| FileWait::Gone {
            certain: false,
            unwatched,
        };
        loop {
            match wait_readable(inotify, owner, until)? {
                Ready::Timeout => return Some(FileWait::Timeout),
                Ready::Owner => return Some(FileWait::OwnerExited),
                Ready::Inotify => {}
            }
            // A failed read reports nothing: taken for a removal (look again).
            let Ok(events) = inotify.read_events() else {
                return Some(unsure(false));
            };
            for e in &events {
                if e.mask.contains(AddWatchFlags::IN_Q_OVERFLOW) {
                    return Some(unsure(false));
                }
                if e.wd != wd {
                    continue;
                }
                if e.mask.contains(AddWatchFlags::IN_IGNORED) {
                    return Some(unsure(true));
                }
                if e.mask.contains(AddWatchFlags::IN_DELETE_SELF) {
                    return Some(unsure(false));
                }
                if e.name
                    .as_ref()
                    .is_some_and(|n| n.as_bytes() == name.as_bytes())
                {
                    return Some(FileWait::Gone {
                        certain: true,
                        unwatched: false,
                    });
                }
            }
        }
    }

    /// Waits on watch `wd` of one file (`IN_DELETE_SELF`, `IN_MOVE_SELF`, and `IN_ATTRIB`
    /// unless the wait is quiet) until the file `name`, inode `ino` when the watch was
    /// made, is gone, `until` comes, or `owner` (a pidfd) becomes readable: its process
    /// exited, and the file may now be judged dead. `None` if `ppoll` failed.
    ///
    /// `unlink` raises `IN_ATTRIB` (the link count changes), but so does every touch of the
    /// file: its owner's renewals, and the grant's `futimens` of `.master_lock`, which would
    /// otherwise wake everyone waiting for that `.master_lock` to go, in the middle of the
    /// grant. So an `IN_ATTRIB` alone is checked with one `fstatat` of the name: still there,
    /// the same inode, and the wait goes on.
    ///
    /// A quiet wait ([`Subscription::quiet`]) does not watch `IN_ATTRIB`: it wakes at
    /// `IN_DELETE_SELF`, which the kernel raises when the last reference to the unlinked
    /// file goes. Our own release unlinks a file while it still holds it open and closes
    /// it right after, so that event comes once the state directory's lock is released,
    /// and a herd of readers woken by it does not pile up on that lock behind the
    /// releasing process (`IN_ATTRIB` is raised while `unlink` holds it). Should another
    /// process keep the file open (a child forked by its owner, say), the event comes
    /// only when it closes it; so a quiet wait looks at the name every `QUIET_CHECK`.
    fn wait_gone(
        &self,
        inotify: &Inotify,
        (name, ino, wd): (&str, u64, WatchDescriptor),
        until: Option<Instant>,
        owner: Option<BorrowedFd<'_>>,
    ) -> Option<FileWait> {
        let quiet = self.quiet.load(Ordering::Relaxed);
        // The name still holds the inode watched: `None`; absent: gone for certain.
        let look = || match self.ino_of(name) {
            Ok(i) if i == ino => None,
            other => Some(FileWait::Gone {
                certain: other == Err(Errno::ENOENT),
                unwatched: false,
            }),
        };
        loop {
            let check = if quiet {
                Instant::now().checked_add(QUIET_CHECK)
            } else {
                None
            };
            let wake = match (until, check) {
                (Some(u), Some(c)) => Some(u.min(c)),
                (u, c) => u.or(c),
            };
            match wait_readable(inotify, owner, wake)? {
                Ready::Timeout if !quiet || until.is_some_and(|u| Instant::now() >= u) => {
                    return Some(FileWait::Timeout);
                }
                Ready::Timeout => match look() {
                    Some(gone) => return Some(gone),
                    None => continue,
                },
                Ready::Owner => return Some(FileWait::OwnerExited),
                Ready::Inotify => {}
            }
            // A failed read reports nothing: taken for a removal below (look again).
            let events = inotify.read_events().unwrap_or_default();
            let ours = |flag| events.iter().any(|e| e.wd == wd && e.mask.contains(flag));
            let touched_only =
                !events.is_empty() && events.iter().all(|e| e.mask == AddWatchFlags::IN_ATTRIB);
            if !touched_only {
                return Some(FileWait::Gone {
                    certain: ours(AddWatchFlags::IN_DELETE_SELF),
                    // The kernel dropped the watch (`IN_IGNORED` follows
                    // `IN_DELETE_SELF`): nothing left to remove, or to drain.
                    unwatched: ours(AddWatchFlags::IN_IGNORED),
                });
            }
            if let Some(gone) = look() {
                return Some(gone);
            }
        }
    }

    /// Whether the name `name` in the state directory still holds inode `ino`, looked
    /// at right after a watch of it was made: `Err(certain)` if not (`certain`: the name
    /// is absent).
    ///
    /// A watch made while the file is being removed can miss the removal for good. Seen
    /// on Linux 6.18 (tmpfs, four writer processes looping on one directory: about one
    /// 15 s run in three wedged): `inotify_add_watch` returned a watch of the file, the
    /// file was unlinked about then, and the watch was gone from the instance with no
    /// event queued, so the waiter slept until its pause ran out; every writer behind it
    /// waited for it, for seconds, once up to the 45 s lease. Presumably the kernel
    /// reported the inode's deletion (`IN_DELETE_SELF`, then dropping its watches)
    /// between the watch's lookup of the name and its attachment. A file whose name
    /// still holds it after the watch was made reports its `unlink` to the watch, so one
    /// look here closes that window.
    fn still_there(&self, name: &str, ino: u64) -> Result<(), bool> {
        match self.ino_of(name) {
            Ok(i) if i == ino => Ok(()),
            Ok(_) => Err(false),
            Err(e) => Err(e == Errno::ENOENT),
        }
    }

    /// The inode number at `name` in the state directory (not following a symlink).
    fn ino_of(&self, name: &str) -> nix::Result<u64> {
        nix::sys::stat::fstatat(self.dir, name, nix::fcntl::AtFlags::AT_SYMLINK_NOFOLLOW)
            .map(|st| st.st_ino)
    }
}

/// What the directory's watch reports once a wait needs it ([`Watcher::widen`]). Every
/// wait in the protocol ends with a file going away (a writer, a queued writer, a
/// reader, a breaker): creations never unblock anyone, so they are not watched, and
/// neither are the names no one waits for (`event`). Lock files go away by `unlink`,
/// and a reader's file also by the rename that keeps its inode for the next read
/// (`IN_MOVED_FROM`, docs/protocol.md §2.1.1). The fencing token's rename, at a grant
/// whose holder asks for its token, reports a name no wait is for: a waiter on this
/// watch reads it and sleeps on. A lock file moved away by hand is found the same way.
const WIDE: AddWatchFlags = AddWatchFlags::IN_DELETE
    .union(AddWatchFlags::IN_MOVED_FROM)
    .union(AddWatchFlags::IN_DELETE_SELF)
    .union(AddWatchFlags::IN_ONLYDIR);

/// What a wait for `.master_lock` watches in the state directory (see
/// `Subscription::wait_on`): the removals of names, and the directory's own.
const DIR_REMOVALS: AddWatchFlags = AddWatchFlags::IN_DELETE
    .union(AddWatchFlags::IN_MOVED_FROM)
    .union(AddWatchFlags::IN_DELETE_SELF)
    .union(AddWatchFlags::IN_ONLYDIR);

/// How long the first wait for a new owner lasts at most (see `wait_on`).
const FIRST_WAIT: Duration = Duration::from_millis(10);

/// How often a quiet wait on one file looks at its name (see `Subscription::wait_gone`):
/// the bound on the delay when another process keeps the file open past its removal.
/// Each look is a wake-up and an `fstatat`: 64 waiters look about 13 times a second,
/// which kept their CPU under issue #14's 1 % of a core (500 ms did not: contention.md
/// §11).
const QUIET_CHECK: Duration = Duration::from_secs(5);

/// How a wait on one file ended (`Subscription::wait_gone`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum FileWait {
    /// The wait's time ran out.
    Timeout,
    /// The owner's process exited (its pidfd is readable); its file may still be there.
    OwnerExited,
    /// The file is gone or was replaced. `certain`: its inode was deleted
    /// (`IN_DELETE_SELF`) or the name is absent. `unwatched`: the kernel has dropped the
    /// watch already (`IN_IGNORED` read).
    Gone { certain: bool, unwatched: bool },
}

/// A new inotify instance (close-on-exec, non-blocking).
fn new_instance() -> nix::Result<Inotify> {
    #[cfg(test)]
    if NO_INSTANCES.with(std::cell::Cell::get) {
        return Err(Errno::EMFILE);
    }
    Inotify::init(InitFlags::IN_CLOEXEC | InitFlags::IN_NONBLOCK)
}

#[cfg(test)]
thread_local! {
    /// For tests: no instance can be made on this thread, as when the user's
    /// `max_user_instances` are all taken.
    pub(crate) static NO_INSTANCES: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
    /// For tests: the next watch of one file this thread makes loses its file as it is
    /// made, with no event (see `Subscription::still_there`).
    static LOSE_WATCH: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

thread_local! {
    /// The calling thread's own instance, for its waits on one file; made at the first,
    /// `None` until one can be (then the shared watch serves). Kept for the thread's
    /// life: closing an instance waits for a kernel grace period (milliseconds), which
    /// a wait per acquisition would pay every time. At most [`OWN_INSTANCES`] threads of
    /// a process keep one (see [`OwnInstance`]).
    static OWN: std::cell::RefCell<Option<OwnInstance>> = const { std::cell::RefCell::new(None) };
}

/// How many threads of a process keep an inotify instance of their own at once. Linux
/// allows 128 instances per user by default (`fs.inotify.max_user_instances`), shared
/// by every program of that user: a pool of hundreds of threads, each keeping the
/// instance of its first wait for its whole life, would take them all. Threads beyond
/// this wait on the shared watch, as waits did before they had instances of their own.
pub(crate) const OWN_INSTANCES: usize = 16;

/// Threads of this process that keep an instance of their own ([`OwnInstance`]).
static OWN_LIVE: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

/// A thread's own inotify instance, counted in [`OWN_LIVE`] while it lives.
#[derive(Debug)]
struct OwnInstance {
    inotify: Inotify,
    /// The process that made it: a child forked by that thread inherits the thread's
    /// descriptor, which is the parent's instance, and must make its own (it would
    /// otherwise read, and so take, the parent's events).
    pid: u32,
    /// The watch of a state directory (by its identity) that the thread's last wait for
    /// `.master_lock` there left in place when the file went: removing it right after
    /// the wake-up would cost the waiter that call on its way in. It is removed by the
    /// thread's next wait that needs another watch, or by its next release
    /// ([`let_go_lingering`]); a next wait for `.master_lock` there reuses it. Until
    /// then the directory's removals queue on the instance: at most the kernel's
    /// `max_queued_events` (16,384 by default), after which it queues one overflow.
    lingering: std::cell::Cell<Option<(FileId, WatchDescriptor)>>,
}

impl OwnInstance {
    /// A new instance, unless [`OWN_INSTANCES`] threads have one already or the kernel
    /// refuses.
    fn new(pid: u32) -> Option<OwnInstance> {
        if OWN_LIVE.fetch_add(1, Ordering::SeqCst) >= OWN_INSTANCES {
            OWN_LIVE.fetch_sub(1, Ordering::SeqCst);
            return None;
        }
        match new_instance() {
            Ok(inotify) => Some(OwnInstance {
                inotify,
                pid,
                lingering: std::cell::Cell::new(None),
            }),
            Err(_) => {
                OWN_LIVE.fetch_sub(1, Ordering::SeqCst);
                None
            }
        }
    }
}

impl Drop for OwnInstance {
    fn drop(&mut self) {
        OWN_LIVE.fetch_sub(1, Ordering::SeqCst);
    }
}

/// Runs `f` on the calling thread's own instance, made now if it has none yet and one
/// can be made; `None` if there is none (then the shared watch serves).
fn with_own<R>(f: impl FnOnce(&OwnInstance) -> Option<R>) -> Option<R> {
    OWN.try_with(|own| {
        let mut own = own.try_borrow_mut().ok()?;
        let pid = sys::pid();
        if own.as_ref().is_none_or(|o| o.pid != pid) {
            // In a forked child, dropping the inherited one closes only our descriptor.
            *own = None;
            *own = OwnInstance::new(pid);
        }
        f(own.as_ref()?)
    })
    .ok()
    .flatten()
}

/// Removes the watch of a state directory that the calling thread's last wait for
/// `.master_lock` left on its own instance ([`OwnInstance::lingering`]), if any, and
/// what it queued. Called after a release, once the files are gone and the next owner
/// woken: a thread that does not wait again would otherwise have every removal in that
/// directory queued on its instance for the rest of its life.
pub(crate) fn let_go_lingering() {
    let pid = sys::pid();
    let _ = OWN.try_with(|own| {
        if let Ok(own) = own.try_borrow()
            && let Some(own) = own.as_ref().filter(|o| o.pid == pid)
            && let Some((_, wd)) = own.lingering.take()
        {
            unwatch(&own.inotify, wd);
        }
    });
}

impl Subscription<'_> {
    /// Makes this subscriber's waits on one file quiet (see `Subscription::wait_gone`):
    /// they watch for the file's deletion (`IN_DELETE_SELF`) and not for `IN_ATTRIB`,
    /// which `unlink` raises while it holds the state directory's lock. For readers,
    /// who may wait by the dozen for one file; a queued writer, the one waiter of its
    /// predecessor's file, goes on waking at the `unlink` itself.
    pub(crate) fn quiet(&self, on: bool) {
        self.quiet.store(on, Ordering::Relaxed);
    }

    /// Says which removals concern the next waits (until [`Subscription::forget`]), and,
    /// for a wait on one file, whose exit ends the wait too (see
    /// [`crate::liveness::verdict`]). Removals already reported stay reported.
    pub(crate) fn concerns(&self, interest: Interest, owner: Option<ExitWatch>) {
        *self.interest.lock() = interest;
        *self.owner.lock() = owner;
    }

    /// Whether the last [`Subscription::wait`], which ran out with nothing to report,
    /// watched everything that could end it: the one file waited for (on the thread's
    /// own instance) and its owner's exit (a pidfd, or the owner is this process). Such
    /// a wait needs no look when its pause runs out: nothing the look judges changed.
    pub(crate) fn covered(&self) -> bool {
        self.covered.load(Ordering::Relaxed)
    }

    /// Whether events no longer come through the shared watch: its instance could not
    /// be made or watched, reading it failed, or the directory went away. Waits are
    /// then plain sleeps, and the caller should poll as it does without a subscription.
    pub(crate) fn dead(&self) -> bool {
        self.watcher.dead.load(Ordering::SeqCst)
    }

    /// Waits for a change or for `pause`, whichever comes first. Returns what was
    /// removed since the last `wait` or [`Subscription::forget`]
    /// ([`Removed::NOTHING`]: the pause ran out, or nothing is known).
    pub(crate) fn wait(&self, pause: Duration) -> Removed {
        self.covered.store(false, Ordering::Relaxed);
        if self.watcher.dead.load(Ordering::SeqCst) {
            // Polling is the floor.
            std::thread::sleep(pause);
            return Removed::NOTHING;
        }
        let until = Instant::now().checked_add(pause);
        let one = self.interest.lock().single_file();
        if let Some(name) = one
            && let Some(removed) = self.wait_for_file(name, until)
        {
            return removed;
        }
        if let Some(look) = self.need_wide() {
            return look;
        }
        // A pause too long to represent waits for a change only.
        self.follow_or_lead(until)
    }

    /// Waits for the removal of the one file `name` (or `until`) on our own instance,
    /// outside the shared watch (see the module's documentation). `None` if the file
    /// cannot be watched: then the shared watch serves.
    fn wait_for_file(&self, name: LockName, until: Option<Instant>) -> Option<Removed> {
        let gone = match name {
            LockName::Master => Removed::MASTER,
            _ => Removed::OTHER,
        };
        // Pass on what the shared watch holds, if no one leads it (its queue would
        // otherwise grow while this process's waiters all wait on files of their own).
        self.watcher.current();
        // Reported while the listing was made: no need to wait.
        let removed = Removed::take(&self.changed);
        if !removed.is_nothing() {
            return Some(removed);
        }
        with_own(|own| self.wait_on(own, name, gone, until))
    }

    /// [`Subscription::wait_for_file`] on the thread's own instance `own`.
    ///
    /// A wait for `.master_lock` watches the state directory's removals (`IN_DELETE`,
    /// `IN_MOVED_FROM`) on that instance, and ends only at one of that name; a wait for
    /// any other file watches the file itself (see `wait_gone`). The difference is the
    /// cost of a hand-off: a watch of the file is torn down when its inode goes, and on
    /// the benchmark machine that made the releasing `unlink` (or `close`) and the
    /// wake-up 11-20 µs slower than with the directory's watch
    /// (`docs/probes/handoff_floor.c`, modes 5-8 against 2; docs/notes/handoff.md). The
    /// directory's watch would wake a waiter for every removal there, which is what
    /// one-file watches are for: but while `.master_lock` is waited for, no other lock
    /// file goes away in the usual course (the writers queued behind it wait, and the
    /// readers have left), so the waiter sleeps on. The queued writers behind the first
    /// one keep watching their predecessors' files, and are not woken by a grant.
    fn wait_on(
        &self,
        own: &OwnInstance,
        name: LockName,
        gone: Removed,
        until: Option<Instant>,
    ) -> Option<Removed> {
        let inotify = &own.inotify;
        let file = name.to_string();
        let by_dir = name == LockName::Master;
        // The directory's watch the last wait for `.master_lock` left: reused by this
        // wait if it is one in the same directory, removed otherwise (it would wake a
        // wait on one file for every removal in the directory).
        let mut reused = false;
        if let Some((key, wd)) = own.lingering.take() {
            if by_dir && key == self.key {
                reused = true;
            } else {
                unwatch(inotify, wd);
            }
        }
        let kept = self.kept.lock().take();
        let (ino, wd) = match kept {
            // The last wait ran out on this file with nothing seen, and no look came
            // since: its watch still holds every event after that wait began.
            Some((was, ino, wd)) if was == name => (ino, wd),
            other => {
                if let Some((_, _, wd)) = other {
                    unwatch(inotify, wd);
                }
                // The inode watched, to tell a removal from a touch (see `wait_gone`).
                let ino = match self.ino_of(&file) {
                    Ok(ino) => ino,
                    Err(Errno::ENOENT) => return Some(gone | Removed::GONE),
                    Err(_) => return None,
                };
                let (path, mask) = if by_dir {
                    (self.dir_link.clone(), DIR_REMOVALS)
                } else {
                    let mut mask = AddWatchFlags::IN_DELETE_SELF
                        | AddWatchFlags::IN_MOVE_SELF
                        | AddWatchFlags::IN_DONT_FOLLOW;
                    if !self.quiet.load(Ordering::Relaxed) {
                        mask |= AddWatchFlags::IN_ATTRIB;
                    }
                    (format!("{}/{name}", self.dir_link), mask)
                };
                let wd = match inotify.add_watch(path.as_str(), mask) {
                    Ok(wd) => wd,
                    // Gone since the listing.
                    Err(Errno::ENOENT) => return Some(gone | Removed::GONE),
                    Err(_) => return None,
                };
                if reused {
                    // The same watch (one per inode and instance): what it queued since
                    // the last wait came before the look below, which settles it.
                    drain(inotify);
                }
                #[cfg(test)]
                if LOSE_WATCH.with(|l| l.replace(false)) {
                    // What the kernel did (`still_there`): the file went while the watch
                    // was made, and the watch is gone with nothing queued.
                    let _ = nix::unistd::unlinkat(
                        self.dir,
                        file.as_str(),
                        nix::unistd::UnlinkatFlags::NoRemoveDir,
                    );
                    unwatch(inotify, wd);
                }
                // Look again now that the watch is made: the file may have gone while it
                // was being made, and then no event need ever come (see `still_there`).
                if let Err(certain) = self.still_there(&file, ino) {
                    unwatch(inotify, wd);
                    return Some(if certain { gone | Removed::GONE } else { gone });
                }
                (ino, wd)
            }
        };
        // The shared watch need not tell us anything meanwhile: it would only leave a
        // stale wake-up behind. A removal it saw before this point is in `changed`;
        // one after it, our own watch sees.
        let interest = std::mem::replace(&mut *self.interest.lock(), Interest::NONE);
        let removed = Removed::take(&self.changed);
        // `None`: the shared watch had reported a removal already (`removed`), no wait.
        let waited = if removed.is_nothing() {
            let owner = *self.owner.lock();
            let mut pidfd = self.pidfd.lock();
            let mut until = until;
            let covered = match owner {
                Some(ExitWatch::Me) => true,
                Some(o) if pidfd.as_ref().is_some_and(|(had, _)| *had == o) => true,
                // A pidfd costs an open and a read of `/proc/PID/stat`: made at the
                // first wait for a new owner, it would be paid by all 63 readers of a
                // herd at the very moment a writer hands the lock on, and most waits
                // end in milliseconds. So the first wait for an owner is short and
                // watches only the file; the next one opens the pidfd. Unless the
                // judgement that found the owner alive keeps a pidfd of it: a copy costs
                // one `fcntl`, and the first wait is then covered too.
                Some(o @ ExitWatch::Process { pid, start }) => {
                    let mut met = self.met.lock();
                    if *met != Some(o)
                        && let Some(fd) = sys::pidfd_known(pid, start)
                    {
                        *met = Some(o);
                        *pidfd = Some((o, fd));
                        true
                    } else if *met == Some(o) {
                        *pidfd = sys::pidfd(pid, start).map(|fd| (o, fd));
                        // Gone since the look that found it alive: look again at once.
                        if pidfd.is_none() && sys::probe_pid(pid, start) == sys::Probe::Gone {
                            until = Some(Instant::now());
                        }
                        pidfd.is_some()
                    } else {
                        *met = Some(o);
                        let soon = Instant::now().checked_add(FIRST_WAIT);
                        until = match (until, soon) {
                            (Some(u), Some(s)) => Some(u.min(s)),
                            (u, s) => u.or(s),
                        };
                        false
                    }
                }
                None => false,
            };
            // Only the current owner's pidfd: one kept from an earlier owner (before the
            // second wait opens the new one) would wake us for the wrong process.
            let fd = pidfd
                .as_ref()
                .filter(|(had, _)| owner == Some(*had))
                .map(|(_, fd)| fd.as_fd());
            let r = if by_dir {
                self.wait_named(inotify, (&file, wd), until, fd)
            } else {
                self.wait_gone(inotify, (&file, ino, wd), until, fd)
            };
            if r == Some(FileWait::Timeout) {
                self.covered.store(covered, Ordering::Relaxed);
            }
            Some(r)
        } else {
            None
        };
        *self.interest.lock() = interest;
        let (result, unwatched) = match waited {
            None | Some(Some(FileWait::Timeout)) => (Some(removed), false),
            // A failed `ppoll`.
            Some(None) => (None, false),
            Some(Some(FileWait::OwnerExited)) => (Some(gone), false),
            Some(Some(FileWait::Gone { certain, unwatched })) => (
                Some(if certain { gone | Removed::GONE } else { gone }),
                unwatched,
            ),
        };
        if unwatched {
            // The kernel removed the watch, and queues nothing after its `IN_IGNORED`.
        } else if self.covered() {
            // Likely to wait on the same file again without a look: keep the watch.
            *self.kept.lock() = Some((name, ino, wd));
        } else if by_dir {
            // Not now, on the waiter's way in: see `OwnInstance::lingering`.
            own.lingering.set(Some((self.key, wd)));
        } else {
            unwatch(inotify, wd);
        }
        // A failed `ppoll`: let the caller look again.
        Some(result.unwrap_or(Removed::OTHER))
    }

    /// Removes the kept watch, if any (see `kept`).
    fn drop_kept(&self) {
        if let Some((_, _, wd)) = self.kept.lock().take() {
            let pid = sys::pid();
            let _ = OWN.try_with(|own| {
                if let Ok(own) = own.try_borrow()
                    && let Some(own) = own.as_ref().filter(|o| o.pid == pid)
                {
                    unwatch(&own.inotify, wd);
                }
            });
        }
    }

    /// Forgets what was removed so far: called just before a listing, so that the next
    /// wake-up reports only what happened after it. Until the next
    /// [`Subscription::concerns`], every removal concerns the subscriber: one made while
    /// the listing is read, or before the waiter says what concerns it, may be one the
    /// listing missed.
    pub(crate) fn forget(&self) {
        self.drop_kept();
        *self.interest.lock() = Interest::ALL;
        self.changed.store(0, Ordering::SeqCst);
        self.looked_wide
            .store(self.watcher.wide.load(Ordering::SeqCst), Ordering::SeqCst);
    }

    /// Before a wait on the directory's watch: `None` if the last look was made while
    /// it reported removals; otherwise widens it and returns [`Removed::OTHER`], so
    /// that the caller looks again, now with every later removal reported. A caller
    /// lists the directory after every wake-up that reports a removal, whether or not
    /// it calls [`Subscription::forget`] first (W5 does not): that listing is the look
    /// made after the widening.
    fn need_wide(&self) -> Option<Removed> {
        if self.looked_wide.load(Ordering::SeqCst) {
            return None;
        }
        self.watcher.widen(&self.dir_link);
        self.looked_wide.store(true, Ordering::SeqCst);
        Some(Removed::OTHER)
    }

    fn follow_or_lead(&self, until: Option<Instant>) -> Removed {
        let w = &self.watcher;
        loop {
            let removed = Removed::take(&self.changed);
            if !removed.is_nothing() {
                return removed;
            }
            if w.dead.load(Ordering::SeqCst) {
                return Removed::OTHER;
            }
            // Announce ourselves as a follower before trying to lead, so that a leader
            // resigning meanwhile sees us and hands the lead over (both sides SeqCst).
            self.following.store(true, Ordering::SeqCst);
            if w.leading
                .compare_exchange(false, true, Ordering::SeqCst, Ordering::SeqCst)
                .is_ok()
            {
                self.following.store(false, Ordering::SeqCst);
                let ended = self.lead(until);
                w.resign(Some(self.id));
                if let Some(removed) = ended {
                    return removed | Removed::take(&self.changed);
                }
                continue;
            }
            let got = match until {
                Some(t) => self.rx.recv_deadline(t).is_ok(),
                None => self.rx.recv().is_ok(),
            };
            self.following.store(false, Ordering::SeqCst);
            if !got {
                // The pause is over (a change that came meanwhile is reported too).
                return Removed::take(&self.changed);
            }
            // A change (checked at the top of the loop) or the lead handed over.
        }
    }

    /// Blocks on the inotify descriptor until an event that can end a wait, or `until`.
    /// Returns what was removed once the wait is over (event, time, or error), `None`
    /// while it is not.
    fn lead(&self, until: Option<Instant>) -> Option<Removed> {
        let w = &self.watcher;
        loop {
            // A change another leader saw before we took over.
            let removed = Removed::take(&self.changed);
            if !removed.is_nothing() {
                return Some(removed);
            }
            let timeout = match until {
                Some(t) => {
                    let left = t.saturating_duration_since(Instant::now());
                    if left.is_zero() {
                        return Some(Removed::NOTHING);
                    }
                    Some(TimeSpec::from_duration(left))
                }
                None => None,
            };
            // Made before any lead: a wait leads only once the watch is wide.
            let Some(inotify) = w.instance() else {
                w.dead.store(true, Ordering::SeqCst);
                return Some(Removed::OTHER);
            };
            let mut fds = [PollFd::new(inotify.as_fd(), PollFlags::POLLIN)];
            match ppoll(&mut fds, timeout, None) {
                Ok(0) => return Some(Removed::NOTHING),
                Ok(_) => {
                    let events = w.drain();
                    w.broadcast(&events, Some(self.id));
                    let removed = self.interest.lock().concern_all(&events);
                    if !removed.is_nothing() {
                        return Some(removed);
                    }
                    // Only events that do not concern us: keep waiting.
                }
                Err(Errno::EINTR) => {}
                Err(_) => {
                    w.dead.store(true, Ordering::SeqCst);
                    w.broadcast(&[Event::Anything], Some(self.id));
                    return Some(Removed::OTHER);
                }
            }
        }
    }
}

/// Waiting on the tokio reactor (issue #15): the same watch, members and lead as the
/// blocking waits, so that sync and async waiters of one process share one inotify
/// instance per state directory. A task that leads registers the instance with the
/// reactor (`AsyncFd`) for as long as it leads, and a task that follows leaves its
/// waker where the leader (a thread or a task) finds it. No thread is parked for a
/// task, and a task never blocks its runtime's thread to wait.
///
/// Waits on one file (a thread's own instance, `wait_for_file`) are not made here: an
/// instance per task would run into `max_user_instances` (128 by default) long before
/// thousands of tasks. The shared watch still passes each event only to the waiters it
/// concerns ([`Interest`]). The exit of the one file's owner is watched as the blocking
/// waits watch it (a pidfd, from the second wait for the same owner on), registered with
/// the reactor, by at most [`EXIT_WATCHES`] tasks at once (a descriptor each): a holder's
/// death then wakes the waiters at once instead of at their next poll.
#[cfg(feature = "tokio")]
mod reactor {
    use std::future::poll_fn;
    use std::os::fd::OwnedFd;
    use std::pin::Pin;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::task::Poll;
    use std::time::Duration;

    use std::collections::HashMap;
    use std::os::fd::BorrowedFd;
    use std::sync::atomic::AtomicBool;

    use nix::errno::Errno;
    use nix::sys::inotify::{AddWatchFlags, Inotify, WatchDescriptor};
    use parking_lot::Mutex;
    use tokio::io::unix::AsyncFd;
    use tokio::time::Sleep;

    use super::{AsFd, Event, FIRST_WAIT, Removed, Subscription, Watcher};
    use crate::names::LockName;
    use crate::sys::{self, ExitWatch};

    /// The instance on which the async waits of one process on one file each watch
    /// their file (`IN_ATTRIB`, which `unlink` raises, `IN_DELETE_SELF`, `IN_MOVE_SELF`),
    /// as a blocking wait does on its thread's own instance: one instance per process and
    /// state directory, not per task (`max_user_instances`), and one watch per file,
    /// shared by the tasks that wait for it. A process whose tasks all wait on one file
    /// each is then woken only when one of those files goes, not at every removal in the
    /// state directory (issue #15: 8 contending processes otherwise woke 6–12 times per
    /// grant). Led as the shared watch is: one task at a time reads it and passes each
    /// removal on to the waiters it concerns.
    pub(super) struct Files {
        inotify: Inotify,
        leading: AtomicBool,
        /// The files watched: the name, its inode when the first waiter looked, and how
        /// many waits use the watch.
        watches: Mutex<HashMap<WatchDescriptor, (LockName, u64, usize)>>,
        /// Reading failed: waits go back to the shared watch.
        dead: AtomicBool,
    }

    impl std::fmt::Debug for Files {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.debug_struct("Files")
                .field("leading", &self.leading)
                .field("dead", &self.dead)
                .finish_non_exhaustive()
        }
    }

    /// One wait's use of a watch of [`Files`]; dropping it removes the watch once no wait
    /// uses it (also when the wait's future is dropped).
    struct Watching<'f> {
        files: &'f Files,
        wd: WatchDescriptor,
    }

    impl Drop for Watching<'_> {
        fn drop(&mut self) {
            let mut watches = self.files.watches.lock();
            if let Some(w) = watches.get_mut(&self.wd) {
                w.2 = w.2.saturating_sub(1);
                if w.2 == 0 {
                    watches.remove(&self.wd);
                    let _ = self.files.inotify.rm_watch(self.wd);
                }
            }
        }
    }

    impl Files {
        fn new() -> Option<Files> {
            Some(Files {
                inotify: super::new_instance().ok()?,
                leading: AtomicBool::new(false),
                watches: Mutex::new(HashMap::new()),
                dead: AtomicBool::new(false),
            })
        }

        /// Watches `name` for `sub`: `Ok(None)` if it is gone already, `Err(())` if it
        /// cannot be watched (then the shared watch serves).
        fn watch(
            &self,
            sub: &Subscription<'_>,
            name: LockName,
        ) -> Result<Option<Watching<'_>>, ()> {
            let file = name.to_string();
            // The inode watched, to tell a removal from a touch (see `Files::read`).
            let ino = match sub.ino_of(&file) {
                Ok(ino) => ino,
                Err(Errno::ENOENT) => return Ok(None),
                Err(_) => return Err(()),
            };
            let path = format!("{}/{file}", sub.dir_link);
            // Under the lock: a watch is never removed while another wait adds it.
            let mut watches = self.watches.lock();
            match self.inotify.add_watch(
                path.as_str(),
                AddWatchFlags::IN_ATTRIB
                    | AddWatchFlags::IN_DELETE_SELF
                    | AddWatchFlags::IN_MOVE_SELF
                    | AddWatchFlags::IN_DONT_FOLLOW,
            ) {
                Ok(wd) => {
                    watches.entry(wd).or_insert((name, ino, 0)).2 += 1;
                    drop(watches);
                    let watching = Watching { files: self, wd };
                    // As a blocking wait: the file may have gone while the watch was
                    // being made, and then no event need ever come (`still_there`).
                    match sub.still_there(&file, ino) {
                        Ok(()) => Ok(Some(watching)),
                        Err(_) => Ok(None),
                    }
                }
                // Gone since the listing.
                Err(Errno::ENOENT) => Ok(None),
                Err(_) => Err(()),
            }
        }

        /// Reads every queued event: the removals of watched files. An `IN_ATTRIB`
        /// alone is a touch (a renewal, the grant's `futimens`) while the name still
        /// holds the inode watched: one `fstatat` tells.
        fn read(&self, dir: BorrowedFd<'_>) -> Vec<Event> {
            let mut found = Vec::new();
            loop {
                match self.inotify.read_events() {
                    Ok(events) if !events.is_empty() => {
                        let watches = self.watches.lock();
                        for e in events {
                            if e.mask.contains(AddWatchFlags::IN_Q_OVERFLOW) {
                                found.push(Event::Anything);
                                continue;
                            }
                            let Some(&(name, ino, _)) = watches.get(&e.wd) else {
                                // A watch removed meanwhile (`IN_IGNORED`).
                                continue;
                            };
                            if e.mask == AddWatchFlags::IN_ATTRIB {
                                let now = nix::sys::stat::fstatat(
                                    dir,
                                    name.to_string().as_str(),
                                    nix::fcntl::AtFlags::AT_SYMLINK_NOFOLLOW,
                                );
                                if now.is_ok_and(|st| st.st_ino == ino) {
                                    continue;
                                }
                            }
                            if !found.contains(&Event::Removed(name)) {
                                found.push(Event::Removed(name));
                            }
                        }
                    }
                    Ok(_) | Err(Errno::EAGAIN) => return found,
                    Err(Errno::EINTR) => {}
                    Err(_) => {
                        self.dead.store(true, Ordering::SeqCst);
                        return vec![Event::Anything];
                    }
                }
            }
        }
    }

    impl Watcher {
        /// The process's [`Files`], made at the first use; `None` if it cannot be, or
        /// reading it failed.
        fn files(&self) -> Option<&Files> {
            self.files
                .get_or_init(Files::new)
                .as_ref()
                .filter(|f| !f.dead.load(Ordering::SeqCst))
        }
    }

    /// Which instance a wait reads: the shared watch of the state directory, or
    /// [`Files`].
    #[derive(Clone, Copy)]
    enum On<'w> {
        Dir,
        Files(&'w Files),
    }

    impl On<'_> {
        fn leading<'a>(&'a self, w: &'a Watcher) -> &'a AtomicBool {
            match self {
                On::Dir => &w.leading,
                On::Files(f) => &f.leading,
            }
        }

        fn dead<'a>(&'a self, w: &'a Watcher) -> &'a AtomicBool {
            match self {
                On::Dir => &w.dead,
                On::Files(f) => &f.dead,
            }
        }

        fn inotify<'a>(&'a self, w: &'a Watcher) -> Option<&'a Inotify> {
            match self {
                On::Dir => w.instance(),
                On::Files(f) => Some(&f.inotify),
            }
        }

        fn read(&self, sub: &Subscription<'_>) -> Vec<Event> {
            match self {
                On::Dir => sub.watcher.read(true),
                On::Files(f) => f.read(sub.dir),
            }
        }
    }

    /// How many async waits may watch their owner's exit at once, process-wide.
    pub(super) const EXIT_WATCHES: usize = 64;

    /// How many do now.
    static EXIT_WATCHING: AtomicUsize = AtomicUsize::new(0);

    /// A pidfd registered with the reactor: readable once its process exited.
    struct Exit(AsyncFd<OwnedFd>);

    impl Drop for Exit {
        fn drop(&mut self) {
            EXIT_WATCHING.fetch_sub(1, Ordering::Relaxed);
        }
    }

    impl Exit {
        /// Whether the process exited (and registers the task's interest if not).
        fn poll_exited(&self, cx: &mut std::task::Context<'_>) -> bool {
            // Readable, or an error, which also says: look again.
            self.0.poll_read_ready(cx).is_ready()
        }
    }

    fn exited(exit: Option<&Exit>, cx: &mut std::task::Context<'_>) -> bool {
        exit.is_some_and(|e| e.poll_exited(cx))
    }

    /// A task's lead: deregisters the descriptor, then hands the lead on, when dropped,
    /// also when the task's future is dropped while it leads (a cancelled wait).
    struct Lead<'s, 'd> {
        sub: &'s Subscription<'d>,
        on: On<'s>,
        /// A duplicate of the instance's descriptor, registered with the reactor for this
        /// lead only.
        fd: Option<AsyncFd<OwnedFd>>,
    }

    impl Drop for Lead<'_, '_> {
        fn drop(&mut self) {
            // Deregistered before the next leader can register it (on the same reactor,
            // a second registration of the descriptor would be refused).
            drop(self.fd.take());
            let w = &self.sub.watcher;
            self.on.leading(w).store(false, Ordering::SeqCst);
            w.wake_followers(Some(self.sub.id));
        }
    }

    impl Lead<'_, '_> {
        /// [`Subscription::lead`] on the reactor. `Err(())`: the descriptor cannot be
        /// registered (no descriptor left to duplicate, epoll refused it): the caller
        /// gives up the lead and waits by time only.
        async fn run(
            &mut self,
            mut sleep: Pin<&mut Sleep>,
            exit: Option<&Exit>,
        ) -> Result<Removed, ()> {
            let sub = self.sub;
            let w = &sub.watcher;
            let on = self.on;
            // The shared watch's instance exists: a wait leads on it only once it is wide.
            let Some(inotify) = on.inotify(w) else {
                return Err(());
            };
            let registered = inotify
                .as_fd()
                .try_clone_to_owned()
                .and_then(sys::register_readable);
            let fd = match registered {
                Ok(fd) => &*self.fd.insert(fd),
                Err(_) => return Err(()),
            };
            loop {
                let removed = Removed::take(&sub.changed);
                if !removed.is_nothing() {
                    return Ok(removed);
                }
                let ready = poll_fn(|cx| {
                    if exited(exit, cx) {
                        return Poll::Ready(Some(true));
                    }
                    match fd.poll_read_ready(cx) {
                        Poll::Ready(Ok(mut g)) => {
                            // Read to the end below: the next edge comes after that.
                            g.clear_ready();
                            return Poll::Ready(Some(true));
                        }
                        Poll::Ready(Err(_)) => return Poll::Ready(Some(false)),
                        Poll::Pending => {}
                    }
                    match sleep.as_mut().poll(cx) {
                        Poll::Ready(()) => Poll::Ready(None),
                        Poll::Pending => Poll::Pending,
                    }
                })
                .await;
                match ready {
                    None => return Ok(Removed::NOTHING),
                    Some(true) => {
                        let events = on.read(sub);
                        w.broadcast(&events, Some(sub.id));
                        let removed = sub.interest.lock().concern_all(&events);
                        if !removed.is_nothing() {
                            return Ok(removed);
                        }
                        if exit.is_some_and(|e| e.poll_exited(&mut noop_cx())) {
                            // The owner exited: its file may now be judged dead.
                            return Ok(Removed::OTHER);
                        }
                    }
                    Some(false) => {
                        on.dead(w).store(true, Ordering::SeqCst);
                        w.broadcast(&[Event::Anything], Some(sub.id));
                        return Ok(Removed::OTHER);
                    }
                }
            }
        }
    }

    /// A context for a readiness check that registers no one to wake.
    fn noop_cx() -> std::task::Context<'static> {
        std::task::Context::from_waker(std::task::Waker::noop())
    }

    impl Subscription<'_> {
        /// The pidfd of the owner of the one file this wait is for, registered with the
        /// reactor, as `wait_on` makes it for a thread: from the second wait for the same
        /// owner on (most waits end in milliseconds, and a herd of readers would all pay
        /// the open at the hand-off); the first is cut to [`FIRST_WAIT`]. `None` when
        /// there is no such owner, [`EXIT_WATCHES`] tasks watch already, or pidfds are
        /// missing.
        fn exit_watch(&self, pause: &mut Duration) -> Option<Exit> {
            self.interest.lock().single_file()?;
            let owner = (*self.owner.lock())?;
            let ExitWatch::Process { pid, start } = owner else {
                return None;
            };
            {
                let mut met = self.met.lock();
                if *met != Some(owner) {
                    *met = Some(owner);
                    *pause = (*pause).min(FIRST_WAIT);
                    return None;
                }
            }
            if EXIT_WATCHING.fetch_add(1, Ordering::Relaxed) >= EXIT_WATCHES {
                EXIT_WATCHING.fetch_sub(1, Ordering::Relaxed);
                return None;
            }
            let Some(fd) = sys::pidfd(pid, start) else {
                EXIT_WATCHING.fetch_sub(1, Ordering::Relaxed);
                // Gone since the look that found it alive: look again at once.
                if sys::probe_pid(pid, start) == sys::Probe::Gone {
                    *pause = Duration::ZERO;
                }
                return None;
            };
            match sys::register_readable(fd) {
                Ok(fd) => Some(Exit(fd)),
                Err(_) => {
                    EXIT_WATCHING.fetch_sub(1, Ordering::Relaxed);
                    None
                }
            }
        }

        /// [`Subscription::wait`] on the tokio reactor: waits for a change or for
        /// `pause`, whichever comes first, and returns what was removed since the last
        /// wait or [`Subscription::forget`].
        ///
        /// Cancel safety: dropped at its `.await`, it leaves the watcher as it found
        /// it; a lead it held is handed on ([`Lead`]'s drop), and a waker it left is
        /// only ever woken in vain.
        pub(crate) async fn wait_async(&self, pause: Duration) -> Removed {
            self.covered.store(false, Ordering::Relaxed);
            let mut pause = pause;
            let exit = self.exit_watch(&mut pause);
            let exit = exit.as_ref();
            // Whether a pause that runs out saw everything that could end it (see
            // `Subscription::covered`): the one file waited for, by name on the shared
            // watch, and its owner's exit (our own process, or a pidfd). Then the caller
            // sleeps on without a look, as a covered blocking wait does: thousands of
            // waiting tasks must not list the directory (as long as they are) every
            // pause. Unlike a blocking wait's own watch, the shared one does not see a
            // file renamed away by hand: the covered backstop's look finds that.
            let covering = self.interest.lock().single_file().is_some()
                && (*self.owner.lock() == Some(ExitWatch::Me) || exit.is_some());
            let ran_out = |removed: Removed| {
                if removed.is_nothing() {
                    self.covered.store(covering, Ordering::Relaxed);
                }
                removed
            };
            let mut sleep = std::pin::pin!(tokio::time::sleep(pause));
            let w = &self.watcher;
            if w.dead.load(Ordering::SeqCst) {
                // Polling is the floor.
                sleep.await;
                return Removed::NOTHING;
            }
            // A wait on one file watches that file on the process's `Files`, as a
            // blocking wait does on its thread's own instance; others, and a file that
            // cannot be watched, the shared watch of the directory.
            let mut on = On::Dir;
            let mut _watching = None;
            // Not in the `if let`: the interest's guard would live through the block, and
            // `current` below locks every member's interest, ours too.
            let one = self.interest.lock().single_file();
            // Not for a file of this process's own: its removal comes from a thread or
            // task of ours, while the process is awake anyway, and a watch added and
            // removed per wait is, for tasks of one thread handing the lock to each
            // other, the largest cost of their hand-off (2 writer tasks on one
            // current-thread runtime: 0.68-0.73x two threads' grants/s with it,
            // BENCHMARKS.md, the async API).
            let own = *self.owner.lock() == Some(ExitWatch::Me);
            if let Some(name) = one.filter(|_| !own)
                && let Some(files) = w.files()
            {
                // As `wait_for_file`: pass on what the shared watch holds, if no one
                // leads it, and end here if that concerns us.
                w.current();
                let removed = Removed::take(&self.changed);
                if !removed.is_nothing() {
                    return removed;
                }
                match files.watch(self, name) {
                    Ok(Some(watching)) => {
                        _watching = Some(watching);
                        on = On::Files(files);
                    }
                    Ok(None) if name == LockName::Master => return Removed::MASTER,
                    Ok(None) => return Removed::OTHER,
                    Err(()) => {}
                }
            }
            if matches!(on, On::Dir)
                && let Some(look) = self.need_wide()
            {
                return look;
            }
            loop {
                let removed = Removed::take(&self.changed);
                if !removed.is_nothing() {
                    return removed;
                }
                if on.dead(w).load(Ordering::SeqCst) {
                    return Removed::OTHER;
                }
                // As `follow_or_lead`: a follower first, so that a leader resigning
                // meanwhile wakes us.
                self.following.store(true, Ordering::SeqCst);
                if on
                    .leading(w)
                    .compare_exchange(false, true, Ordering::SeqCst, Ordering::SeqCst)
                    .is_ok()
                {
                    self.following.store(false, Ordering::SeqCst);
                    let mut lead = Lead {
                        sub: self,
                        on,
                        fd: None,
                    };
                    match lead.run(sleep.as_mut(), exit).await {
                        Ok(removed) => {
                            drop(lead);
                            return ran_out(removed | Removed::take(&self.changed));
                        }
                        Err(()) => {
                            drop(lead);
                            sleep.await;
                            return Removed::take(&self.changed);
                        }
                    }
                }
                let got = poll_fn(|cx| {
                    // The waker first, then the checks: a change or a resignation
                    // after this point wakes us, one before it is seen below.
                    *self.task.lock() = Some(cx.waker().clone());
                    if self.changed.load(Ordering::SeqCst) != 0
                        || !on.leading(w).load(Ordering::SeqCst)
                        || on.dead(w).load(Ordering::SeqCst)
                    {
                        return Poll::Ready(true);
                    }
                    if exited(exit, cx) {
                        // The owner exited: its file may now be judged dead.
                        Removed::OTHER.add_to(&self.changed);
                        return Poll::Ready(true);
                    }
                    match sleep.as_mut().poll(cx) {
                        Poll::Ready(()) => Poll::Ready(false),
                        Poll::Pending => Poll::Pending,
                    }
                })
                .await;
                self.following.store(false, Ordering::SeqCst);
                drop(self.task.lock().take());
                if !got {
                    // The pause is over (a change that came meanwhile is reported too).
                    return ran_out(Removed::take(&self.changed));
                }
            }
        }
    }
}

/// What ended a [`wait_readable`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Ready {
    Inotify,
    /// The pidfd: its process exited.
    Owner,
    Timeout,
}

/// Blocks until `inotify` or `owner` is readable or `until` passes; `None` if polling
/// failed.
fn wait_readable(
    inotify: &Inotify,
    owner: Option<BorrowedFd<'_>>,
    until: Option<Instant>,
) -> Option<Ready> {
    loop {
        let timeout = match until {
            Some(t) => {
                let left = t.saturating_duration_since(Instant::now());
                if left.is_zero() {
                    return Some(Ready::Timeout);
                }
                Some(TimeSpec::from_duration(left))
            }
            None => None,
        };
        let mut fds = [
            PollFd::new(inotify.as_fd(), PollFlags::POLLIN),
            PollFd::new(owner.unwrap_or(inotify.as_fd()), PollFlags::POLLIN),
        ];
        let n = if owner.is_some() { 2 } else { 1 };
        match ppoll(&mut fds[..n], timeout, None) {
            Ok(0) => return Some(Ready::Timeout),
            Ok(_) if n == 2 && fds[1].any().unwrap_or(true) => return Some(Ready::Owner),
            Ok(_) => return Some(Ready::Inotify),
            Err(Errno::EINTR) => {}
            Err(_) => return None,
        }
    }
}

/// Removes a watch of the thread's own instance and discards what is queued (the
/// `IN_IGNORED` of a removal, and events of the wait), so that the next wait starts
/// clean.
fn unwatch(inotify: &Inotify, wd: WatchDescriptor) {
    let _ = inotify.rm_watch(wd);
    drain(inotify);
}

/// Discards what is queued on the thread's own instance.
fn drain(inotify: &Inotify) {
    while inotify.read_events().is_ok_and(|e| !e.is_empty()) {}
}

impl Drop for Subscription<'_> {
    fn drop(&mut self) {
        self.drop_kept();
        self.watcher.members.lock().retain(|m| m.id != self.id);
    }
}

/// For the tests of the shared watch: [`subscribe_to`], with the directory's watch
/// reporting removals from the start and the subscription counted as having looked
/// since.
#[cfg(test)]
pub(crate) fn subscribe(dir: BorrowedFd<'_>) -> Option<Subscription<'_>> {
    let st = nix::sys::stat::fstat(dir).ok()?;
    let sub = subscribe_to(dir, FileId::of(&st));
    if !sub.watcher.widen(&sub.dir_link) {
        return None;
    }
    sub.looked_wide.store(true, Ordering::SeqCst);
    Some(sub)
}

/// Subscribes to changes in the directory open as `dir`, whose `(st_dev, st_ino)` is
/// `key` (known since it was opened: no `fstat`). Opens nothing: the instances
/// are made by the waits that need them, and where they cannot be (inotify missing,
/// `max_user_instances` reached) the subscription turns [dead](Subscription::dead) and
/// waiting is plain polling.
pub(crate) fn subscribe_to(dir: BorrowedFd<'_>, key: FileId) -> Subscription<'_> {
    use std::os::fd::AsRawFd as _;
    let pid = crate::sys::pid();
    // Watchers let go of here are dropped (their instances closed) once the map is
    // unlocked: a close waits for a kernel grace period.
    let mut evicted = Vec::new();
    let watcher = {
        let mut map = WATCHERS.lock();
        let map = map.get_or_insert_with(HashMap::new);
        let w = match map.get(&key) {
            Some(w) if w.pid == pid && w.current() => Arc::clone(w),
            _ => {
                evicted = evict_idle(map, pid);
                let w = start(pid);
                evicted.extend(map.insert(key, Arc::clone(&w)));
                w
            }
        };
        w.used
            .store(USES.fetch_add(1, Ordering::Relaxed), Ordering::Relaxed);
        w
    };
    drop(evicted);
    let (tx, rx) = crossbeam_channel::bounded(1);
    let id = NEXT_ID.fetch_add(1, Ordering::Relaxed);
    let changed = Arc::new(AtomicU8::new(0));
    let following = Arc::new(AtomicBool::new(false));
    let interest = Arc::new(Mutex::new(Interest::ALL));
    let task = Arc::new(Mutex::new(None));
    watcher.members.lock().push(Member {
        id,
        tx,
        changed: Arc::clone(&changed),
        following: Arc::clone(&following),
        interest: Arc::clone(&interest),
        task: Arc::clone(&task),
    });
    Subscription {
        id,
        rx,
        changed,
        following,
        interest,
        task,
        watcher,
        dir_link: format!("/proc/self/fd/{}", dir.as_fd().as_raw_fd()),
        dir,
        owner: Mutex::new(None),
        pidfd: Mutex::new(None),
        covered: AtomicBool::new(false),
        looked_wide: AtomicBool::new(false),
        met: Mutex::new(None),
        kept: Mutex::new(None),
        quiet: AtomicBool::new(false),
        key,
    }
}

/// How many state directories' watchers a process keeps while none of its waits uses
/// them. Each that a wait on the shared watch made holds an inotify instance, of the 128
/// that Linux allows a user by default (`fs.inotify.max_user_instances`, shared by every
/// program of that user): a process that waited once on each of many directories must
/// not keep one for each for ever. Kept ones spare the next wait on the same directory a
/// new instance and its watch.
pub(crate) const IDLE_WATCHERS: usize = 8;

/// The order of subscriptions, for [`Watcher::used`].
static USES: AtomicU64 = AtomicU64::new(0);

/// Takes out of `map` what must not stay before a new watcher goes in: among the
/// watchers no one holds but the map (no subscription: each holds one), those made by
/// another process (inherited through `fork`: this one makes its own), and all of ours
/// but the [`IDLE_WATCHERS`] − 1 used last. Returns them, to be dropped once the map is
/// unlocked.
fn evict_idle(map: &mut HashMap<Key, Arc<Watcher>>, pid: u32) -> Vec<Arc<Watcher>> {
    let unused = |w: &Arc<Watcher>| Arc::strong_count(w) == 1;
    let mut gone: Vec<Key> = map
        .iter()
        .filter(|(_, w)| w.pid != pid && unused(w))
        .map(|(k, _)| *k)
        .collect();
    let mut idle: Vec<(u64, Key)> = map
        .iter()
        .filter(|(_, w)| w.pid == pid && unused(w))
        .map(|(k, w)| (w.used.load(Ordering::Relaxed), *k))
        .collect();
    idle.sort_unstable_by_key(|(used, _)| *used);
    let surplus = idle.len().saturating_sub(IDLE_WATCHERS - 1);
    gone.extend(idle[..surplus].iter().map(|(_, k)| *k));
    gone.iter().filter_map(|k| map.remove(k)).collect()
}

/// A watcher with no instance yet: the first wait on the shared watch makes it
/// ([`Watcher::widen`]).
fn start(pid: u32) -> Arc<Watcher> {
    Arc::new(Watcher {
        inotify: std::sync::OnceLock::new(),
        pid,
        leading: AtomicBool::new(false),
        members: Mutex::new(Vec::new()),
        used: AtomicU64::new(0),
        dead: AtomicBool::new(false),
        wide: AtomicBool::new(false),
        widening: Mutex::new(()),
        #[cfg(feature = "tokio")]
        files: std::sync::OnceLock::new(),
    })
}

/// What an event means for waits: the removal of a lock file that can end a wait, or an
/// overflow, after which anything may have happened; `None` for a temporary file, a
/// fencing token or a foreign name, whose removal ends no wait.
fn event(e: &nix::sys::inotify::InotifyEvent) -> Option<Event> {
    if e.mask.contains(AddWatchFlags::IN_Q_OVERFLOW) {
        return Some(Event::Anything);
    }
    let Some(name) = e.name.as_ref() else {
        return Some(Event::Anything);
    };
    use std::os::unix::ffi::OsStrExt as _;
    match LockName::parse(name.as_bytes()) {
        Some(LockName::Tmp { .. } | LockName::Token(_)) | None => None,
        Some(name) => Some(Event::Removed(name)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dir_with(names: &[&str]) -> (tempfile::TempDir, std::fs::File) {
        let dir = tempfile::tempdir().expect("tempdir");
        for n in names {
            std::fs::write(dir.path().join(n), b"x").expect("write");
        }
        let fd = std::fs::File::open(dir.path()).expect("open dir");
        (dir, fd)
    }

    #[test]
    fn a_change_wakes_a_waiter() {
        let (dir, fd) = dir_with(&[".master_lock"]);
        let sub = subscribe(fd.as_fd()).expect("inotify available");
        let path = dir.path().join(".master_lock");
        let t = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(50));
            std::fs::remove_file(path).expect("remove");
        });
        let start = Instant::now();
        sub.wait(Duration::from_secs(20));
        assert!(start.elapsed() < Duration::from_secs(10));
        t.join().expect("join");
    }

    /// One leader reads the descriptor; every other waiting thread must be woken too.
    #[test]
    fn a_change_wakes_every_waiting_thread() {
        let (dir, fd) = dir_with(&[".master_lock"]);
        // The subscriptions borrow it from threads of their own.
        let fd: &'static std::fs::File = Box::leak(Box::new(fd));
        let (ready_tx, ready_rx) = crossbeam_channel::unbounded();
        let waiters: Vec<_> = (0..4)
            .map(|_| {
                let sub = subscribe(fd.as_fd()).expect("inotify available");
                let ready = ready_tx.clone();
                std::thread::spawn(move || {
                    let _ = ready.send(());
                    let start = Instant::now();
                    sub.wait(Duration::from_secs(30));
                    start.elapsed()
                })
            })
            .collect();
        for _ in 0..4 {
            ready_rx.recv().expect("ready");
        }
        // Readiness is "about to wait"; a removal before the wait starts is not lost
        // either (queued in the descriptor or flagged as a change).
        std::fs::remove_file(dir.path().join(".master_lock")).expect("remove");
        for w in waiters {
            let waited = w.join().expect("join");
            assert!(waited < Duration::from_secs(15), "{waited:?}");
        }
    }

    /// The leader stops waiting (its pause ends); a follower still waiting must take
    /// over the descriptor and see a later removal long before its own pause ends.
    #[test]
    fn the_lead_is_handed_over() {
        let (dir, fd) = dir_with(&[".master_lock"]);
        // The subscriptions borrow it from threads of their own.
        let fd: &'static std::fs::File = Box::leak(Box::new(fd));
        let leader = subscribe(fd.as_fd()).expect("inotify available");
        let follower = subscribe(fd.as_fd()).expect("inotify available");
        let w = &leader.watcher;
        // Make `leader` the leader for a short pause, `follower` waits long meanwhile.
        let (go_tx, go_rx) = crossbeam_channel::bounded(0);
        let f = std::thread::spawn(move || {
            let _ = go_rx.recv();
            let start = Instant::now();
            follower.wait(Duration::from_secs(60));
            start.elapsed()
        });
        w.leading.store(true, Ordering::SeqCst); // hold the lead until the follower waits
        go_tx.send(()).expect("go");
        while !w
            .members
            .lock()
            .iter()
            .any(|m| m.id != leader.id && m.following.load(Ordering::SeqCst))
        {
            std::thread::yield_now();
        }
        // Let it block in `recv` (a shorter pause can only let this test pass without
        // exercising the hand-over, never fail it).
        std::thread::sleep(Duration::from_millis(100));
        w.resign(Some(leader.id)); // hands the lead to the follower
        leader.wait(Duration::from_millis(20)); // leads or follows briefly, then returns
        std::fs::remove_file(dir.path().join(".master_lock")).expect("remove");
        let waited = f.join().expect("join");
        assert!(waited < Duration::from_secs(30), "{waited:?}");
    }

    /// A directory removed while nobody waited: the next subscriber must not get the old
    /// watch (a new directory may have the old `(dev, ino)`), although no thread has read
    /// the removal from the instance.
    #[test]
    fn a_removed_directory_is_noticed_without_a_reader() {
        let (dir, fd) = dir_with(&[]);
        let sub = subscribe(fd.as_fd()).expect("inotify available");
        assert!(sub.watcher.current());
        // What the next subscriber would get: the process's watcher of the directory.
        let watcher = Arc::clone(&sub.watcher);
        drop(sub);
        let path = dir.path().to_path_buf();
        drop(fd);
        dir.close().expect("remove dir");
        assert!(!path.exists());
        assert!(!watcher.current(), "the removal was not noticed");
    }

    /// A subscription makes no instance, nor does a wait on one file (it uses the
    /// thread's own): only the first wait on the shared watch makes it.
    #[test]
    fn the_shared_instance_is_made_by_the_first_wait_that_needs_it() {
        let (_dir, fd) = dir_with(&[".master_lock"]);
        let st = nix::sys::stat::fstat(fd.as_fd()).expect("fstat");
        let sub = subscribe_to(fd.as_fd(), FileId::of(&st));
        assert!(sub.watcher.instance().is_none(), "made by the subscription");
        assert!(sub.watcher.current());
        sub.forget();
        sub.concerns(Interest::MASTER, None);
        assert_eq!(sub.wait(Duration::from_millis(20)), Removed::NOTHING);
        assert!(
            sub.watcher.instance().is_none(),
            "made by a wait on one file"
        );
        sub.forget();
        sub.concerns(Interest::ALL, None);
        // The first wait on the shared watch makes it, and asks for a look.
        assert_eq!(sub.wait(Duration::from_secs(30)), Removed::OTHER);
        assert!(
            sub.watcher.instance().is_some(),
            "not made for the shared watch"
        );
        assert!(!sub.dead());
    }

    /// A file that goes while its watch is being made can take the watch with it and
    /// report nothing (seen on Linux 6.18): the look after the watch ends the wait.
    #[test]
    fn a_file_gone_while_its_watch_was_made_ends_the_wait() {
        let ahead = ".pending_lock-0e18a3fe-e080-418f-922d-b61347e980a6-1";
        let (_dir, fd) = dir_with(&[ahead]);
        let sub = subscribe(fd.as_fd()).expect("inotify available");
        sub.forget();
        let name = LockName::parse(ahead.as_bytes()).expect("a lock name");
        sub.concerns(Interest::only(name), None);
        LOSE_WATCH.with(|l| l.set(true));
        let start = Instant::now();
        let removed = sub.wait(Duration::from_secs(3));
        assert_eq!(
            removed,
            Removed::OTHER | Removed::GONE,
            "after {:?}",
            start.elapsed()
        );
    }

    /// A wake-up says what was removed, and `forget` drops what came before a listing.
    #[test]
    fn a_wake_up_says_what_was_removed() {
        let slave = ".slave_lock-0e18a3fe-e080-418f-922d-b61347e980a5";
        let (dir, fd) = dir_with(&[".master_lock", slave, ".token-3"]);
        let sub = subscribe(fd.as_fd()).expect("inotify available");
        let long = Duration::from_secs(30);
        std::fs::remove_file(dir.path().join(".master_lock")).expect("remove");
        assert_eq!(sub.wait(long), Removed::MASTER);
        // A token's removal ends no wait: only the pause's end does, and says nothing.
        std::fs::remove_file(dir.path().join(".token-3")).expect("remove");
        assert_eq!(sub.wait(Duration::from_millis(50)), Removed::NOTHING);
        std::fs::remove_file(dir.path().join(slave)).expect("remove");
        std::fs::write(dir.path().join(".master_lock"), b"x").expect("write");
        std::fs::remove_file(dir.path().join(".master_lock")).expect("remove");
        assert_eq!(sub.wait(long), Removed::MASTER | Removed::OTHER);
        // Removed, then forgotten (a listing followed): nothing to report.
        std::fs::write(dir.path().join(".master_lock"), b"x").expect("write");
        std::fs::remove_file(dir.path().join(".master_lock")).expect("remove");
        assert_eq!(sub.wait(long), Removed::MASTER);
        sub.forget();
        assert_eq!(sub.wait(Duration::from_millis(50)), Removed::NOTHING);
    }

    /// A removal wakes only the waiters it concerns (issue #14): a queued writer waits
    /// for its predecessor's file, not for readers' or other writers' files; a waiter
    /// that has not said what concerns it yet (right after `forget`) hears of everything.
    #[test]
    fn a_removal_wakes_only_the_waiters_it_concerns() {
        let slave = ".slave_lock-0e18a3fe-e080-418f-922d-b61347e980a5";
        let ahead = ".pending_lock-0e18a3fe-e080-418f-922d-b61347e980a6-1";
        let other = ".pending_lock-0e18a3fe-e080-418f-922d-b61347e980a7-2";
        let (dir, fd) = dir_with(&[".master_lock", slave, ahead, other]);
        let name = |n: &str| LockName::parse(n.as_bytes()).expect("a lock name");
        let writer = subscribe(fd.as_fd()).expect("inotify available");
        writer.concerns(Interest::only(name(ahead)), None);
        let drainer = subscribe(fd.as_fd()).expect("inotify available");
        drainer.concerns(Interest::READERS, None);
        let reader = subscribe(fd.as_fd()).expect("inotify available");
        reader.concerns(Interest::WRITERS, None);
        let fresh = subscribe(fd.as_fd()).expect("inotify available");
        fresh.forget();
        let short = Duration::from_millis(50);
        let long = Duration::from_secs(30);

        std::fs::remove_file(dir.path().join(slave)).expect("remove");
        assert_eq!(drainer.wait(long), Removed::OTHER);
        assert_eq!(fresh.wait(long), Removed::OTHER);
        assert_eq!(writer.wait(short), Removed::NOTHING, "a reader left");
        assert_eq!(reader.wait(short), Removed::NOTHING, "a reader left");

        std::fs::remove_file(dir.path().join(other)).expect("remove");
        assert_eq!(reader.wait(long), Removed::OTHER);
        assert_eq!(writer.wait(short), Removed::NOTHING, "not its predecessor");
        assert_eq!(drainer.wait(short), Removed::NOTHING);

        std::fs::remove_file(dir.path().join(ahead)).expect("remove");
        assert_eq!(writer.wait(long), Removed::OTHER, "its predecessor left");
        assert_eq!(reader.wait(long), Removed::OTHER);
        assert_eq!(drainer.wait(short), Removed::NOTHING);

        writer.concerns(Interest::MASTER, None);
        std::fs::remove_file(dir.path().join(".master_lock")).expect("remove");
        assert_eq!(writer.wait(long), Removed::MASTER);
        assert_eq!(reader.wait(long), Removed::MASTER);
        assert_eq!(drainer.wait(short), Removed::NOTHING);
    }

    /// The directory's watch reports removals only once a wait needs it (issue #14): a
    /// process whose waiters each wait on one file has no `unlink` in the state
    /// directory queued on its instance. The first wait on the directory's watch widens
    /// it and ends at once, so that the caller looks again (a removal between its look
    /// and the widening would go unseen); after that look, waits sleep until a removal
    /// concerns them.
    #[test]
    fn the_directory_watch_reports_removals_only_once_a_wait_needs_it() {
        let one = ".slave_lock-0e18a3fe-e080-418f-922d-b61347e980a5";
        let two = ".slave_lock-0e18a3fe-e080-418f-922d-b61347e980a6";
        let three = ".slave_lock-0e18a3fe-e080-418f-922d-b61347e980a7";
        let (dir, fd) = dir_with(&[one, two, three]);
        let st = nix::sys::stat::fstat(fd.as_fd()).expect("fstat");
        let sub = subscribe_to(fd.as_fd(), FileId::of(&st));
        sub.forget();
        std::fs::remove_file(dir.path().join(one)).expect("remove");
        assert!(
            sub.watcher.drain().is_empty(),
            "a removal was queued before any wait needed the directory's watch"
        );
        sub.concerns(Interest::READERS, None);
        assert_eq!(
            sub.wait(Duration::from_secs(30)),
            Removed::OTHER,
            "the first wait on the directory's watch must end at once: its look came before"
        );
        sub.forget();
        sub.concerns(Interest::READERS, None);
        assert_eq!(sub.wait(Duration::from_millis(50)), Removed::NOTHING);
        std::fs::remove_file(dir.path().join(two)).expect("remove");
        assert_eq!(sub.wait(Duration::from_secs(30)), Removed::OTHER);
        // And it stays wide for the waits that follow, in any subscription.
        let other = subscribe_to(fd.as_fd(), FileId::of(&st));
        other.forget();
        other.concerns(Interest::READERS, None);
        std::fs::remove_file(dir.path().join(three)).expect("remove");
        assert_eq!(other.wait(Duration::from_secs(30)), Removed::OTHER);
    }

    /// A waiter concerned with one file waits on its own watch of that file: woken when
    /// the file goes, whether before or while it waits, and not by other removals.
    #[test]
    fn a_waiter_on_one_file_is_woken_by_that_file_only() {
        let ahead = ".pending_lock-0e18a3fe-e080-418f-922d-b61347e980a6-1";
        let slave = ".slave_lock-0e18a3fe-e080-418f-922d-b61347e980a5";
        let (dir, fd) = dir_with(&[ahead, slave, ".master_lock"]);
        let name = |n: &str| LockName::parse(n.as_bytes()).expect("a lock name");
        let sub = subscribe(fd.as_fd()).expect("inotify available");
        sub.concerns(Interest::only(name(ahead)), None);
        std::fs::remove_file(dir.path().join(slave)).expect("remove");
        assert_eq!(sub.wait(Duration::from_millis(50)), Removed::NOTHING);
        assert!(
            OWN.with(|own| own.borrow().is_some()),
            "waited on a watch of its own"
        );
        // Removed while it waits.
        let (started_tx, started_rx) = crossbeam_channel::bounded(0);
        let path = dir.path().join(ahead);
        let remover = std::thread::spawn(move || {
            started_rx.recv().expect("started");
            // Let the waiter block (a shorter pause can only let this test pass without
            // exercising the watch, never fail it).
            std::thread::sleep(Duration::from_millis(100));
            std::fs::remove_file(path).expect("remove");
        });
        started_tx.send(()).expect("start");
        let start = Instant::now();
        // Seen deleted: `GONE` says so.
        assert_eq!(
            sub.wait(Duration::from_secs(30)),
            Removed::OTHER | Removed::GONE
        );
        assert!(start.elapsed() < Duration::from_secs(15));
        remover.join().expect("remover");
        // `.master_lock`, already gone when the wait starts.
        sub.concerns(Interest::MASTER, None);
        std::fs::remove_file(dir.path().join(".master_lock")).expect("remove");
        assert_eq!(sub.wait(Duration::from_secs(30)), Removed::MASTER);
        // A symlink at the name is not followed: its target's changes say nothing.
        let target = dir.path().join("target");
        std::fs::write(&target, b"x").expect("write");
        std::os::unix::fs::symlink(&target, dir.path().join(".master_lock")).expect("symlink");
        sub.concerns(Interest::MASTER, None);
        std::fs::remove_file(&target).expect("remove the target");
        assert_eq!(sub.wait(Duration::from_millis(50)), Removed::NOTHING);
    }

    /// A touch of the watched file (its owner's renewal, the grant's `futimens` of
    /// `.master_lock`) raises `IN_ATTRIB` as its removal does, but is not one: the
    /// waiter sleeps on, and its removal still wakes it.
    #[test]
    fn a_touch_of_the_one_file_is_not_its_removal() {
        let (dir, fd) = dir_with(&[".master_lock"]);
        let sub = subscribe(fd.as_fd()).expect("inotify available");
        let path = dir.path().join(".master_lock");
        let (started_tx, started_rx) = crossbeam_channel::bounded(0);
        let (touched_tx, touched_rx) = crossbeam_channel::bounded(1);
        let toucher = {
            let path = path.clone();
            std::thread::spawn(move || {
                started_rx.recv().expect("started");
                std::thread::sleep(Duration::from_millis(100));
                let f = std::fs::File::open(&path).expect("open");
                // As the library renews its files: both times (`futimens(fd, NULL)`);
                // mtime alone would raise `IN_MODIFY`, which is not watched.
                let now = std::time::SystemTime::now();
                let times = std::fs::FileTimes::new()
                    .set_accessed(now)
                    .set_modified(now);
                f.set_times(times).expect("touch");
                touched_tx.send(()).expect("touched");
            })
        };
        sub.concerns(Interest::MASTER, None);
        started_tx.send(()).expect("start");
        assert_eq!(
            sub.wait(Duration::from_millis(600)),
            Removed::NOTHING,
            "a touch woke it"
        );
        touched_rx
            .try_recv()
            .expect("the touch was made during the wait");
        toucher.join().expect("toucher");
        // Removed while it waits: woken.
        let (started_tx, started_rx) = crossbeam_channel::bounded(0);
        let remover = std::thread::spawn(move || {
            started_rx.recv().expect("started");
            std::thread::sleep(Duration::from_millis(100));
            std::fs::remove_file(path).expect("remove");
        });
        sub.concerns(Interest::MASTER, None);
        started_tx.send(()).expect("start");
        let start = Instant::now();
        assert_eq!(
            sub.wait(Duration::from_secs(30)),
            Removed::MASTER | Removed::GONE
        );
        assert!(start.elapsed() < Duration::from_secs(15));
        remover.join().expect("remover");
    }

    /// A state directory holding one queued writer's file: the directory, its
    /// descriptor, the file's path and name.
    fn queued_writers_file() -> (
        tempfile::TempDir,
        std::fs::File,
        std::path::PathBuf,
        LockName,
    ) {
        let ahead = ".pending_lock-0e18a3fe-e080-418f-922d-b61347e980a6-1";
        let (dir, fd) = dir_with(&[ahead]);
        let path = dir.path().join(ahead);
        let name = LockName::parse(ahead.as_bytes()).expect("a lock name");
        (dir, fd, path, name)
    }

    /// Once told to start: waits 50 ms, removes `path`, waits 200 ms more, then closes
    /// `held` (a descriptor of that file) and returns when it did.
    fn remove_then_close(
        path: std::path::PathBuf,
        held: std::fs::File,
    ) -> (
        crossbeam_channel::Sender<()>,
        std::thread::JoinHandle<Instant>,
    ) {
        let (started_tx, started_rx) = crossbeam_channel::bounded(0);
        let remover = std::thread::spawn(move || {
            started_rx.recv().expect("started");
            std::thread::sleep(Duration::from_millis(50));
            std::fs::remove_file(path).expect("remove");
            std::thread::sleep(Duration::from_millis(200));
            let closed = Instant::now();
            drop(held);
            closed
        });
        (started_tx, remover)
    }

    /// A quiet wait (a reader's) on one file wakes when the file's last reference goes,
    /// not at the `unlink` (which raises `IN_ATTRIB` inside the directory's lock): a file
    /// unlinked while someone holds it open wakes the waiter only at the close. A touch
    /// does not wake it at all.
    #[test]
    fn a_quiet_wait_wakes_at_the_last_close_of_the_file() {
        let (_dir, fd, path, name) = queued_writers_file();
        let sub = subscribe(fd.as_fd()).expect("inotify available");
        sub.quiet(true);
        // A touch: no wake-up (the pause is shorter than `QUIET_CHECK`).
        sub.concerns(Interest::only(name), None);
        let (started_tx, started_rx) = crossbeam_channel::bounded(0);
        let toucher = {
            let path = path.clone();
            std::thread::spawn(move || {
                started_rx.recv().expect("started");
                std::thread::sleep(Duration::from_millis(50));
                let f = std::fs::File::open(&path).expect("open");
                f.set_modified(std::time::SystemTime::now()).expect("touch");
            })
        };
        started_tx.send(()).expect("start");
        assert_eq!(
            sub.wait(Duration::from_millis(300)),
            Removed::NOTHING,
            "a touch woke it"
        );
        toucher.join().expect("toucher");
        // Unlinked while held open: the wait goes on through the unlink, and ends at
        // the close.
        let held = std::fs::File::open(&path).expect("open");
        let (started_tx, remover) = remove_then_close(path, held);
        sub.concerns(Interest::only(name), None);
        started_tx.send(()).expect("start");
        let start = Instant::now();
        let removed = sub.wait(Duration::from_secs(30));
        let woke = Instant::now();
        let closed = remover.join().expect("remover");
        assert_eq!(removed, Removed::OTHER | Removed::GONE);
        assert!(woke >= closed, "woken before the close: by the unlink");
        // Woken by the close, not by its look at the name (every `QUIET_CHECK`).
        assert!(
            woke.duration_since(start) < QUIET_CHECK,
            "{:?}",
            woke.duration_since(start)
        );
    }

    /// A quiet wait on a file that another process keeps open after its removal (a
    /// child forked by its owner, say) is not woken by the kernel: it finds the name
    /// gone at its next look, within `QUIET_CHECK`, not at the end of its pause.
    #[test]
    fn a_quiet_wait_finds_a_file_kept_open_gone_within_its_check() {
        let (_dir, fd, path, name) = queued_writers_file();
        let sub = subscribe(fd.as_fd()).expect("inotify available");
        sub.quiet(true);
        let _held = std::fs::File::open(&path).expect("open");
        let remover = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(50));
            std::fs::remove_file(path).expect("remove");
        });
        sub.concerns(Interest::only(name), None);
        let start = Instant::now();
        assert_eq!(
            sub.wait(Duration::from_secs(30)),
            Removed::OTHER | Removed::GONE
        );
        // Generous: the look comes `QUIET_CHECK` after the wait began, and the pause
        // (30 s) would end far later.
        let took = start.elapsed();
        assert!(took < QUIET_CHECK * 3, "{took:?}");
        remover.join().expect("remover");
    }

    /// Only the leader reads: a subscriber's check must not take the event a leader's
    /// `ppoll` was woken for (the leader would then sleep through its whole pause).
    #[test]
    fn a_check_leaves_the_leaders_events_alone() {
        let (dir, fd) = dir_with(&[".master_lock"]);
        let sub = subscribe(fd.as_fd()).expect("inotify available");
        let w = &sub.watcher;
        w.leading.store(true, Ordering::SeqCst); // someone leads
        std::fs::remove_file(dir.path().join(".master_lock")).expect("remove");
        assert!(w.current());
        // The removal is still queued for the leader.
        let queued = w.drain();
        w.resign(None); // (tests share the watcher map: leave no lead behind)
        assert_eq!(
            queued,
            [Event::Removed(LockName::Master)],
            "the check read the leader's event"
        );
    }

    /// The watch that the calling thread's last wait for `.master_lock` left on its own
    /// instance, if any.
    fn lingering() -> Option<(FileId, WatchDescriptor)> {
        OWN.with(|own| own.borrow().as_ref().and_then(|o| o.lingering.get()))
    }

    /// Asserts that a 300 ms wait of `sub` runs out while another thread removes `path`.
    fn sleeps_through_the_removal_of(sub: &Subscription<'_>, path: std::path::PathBuf, why: &str) {
        let (start, remover) = remove_soon(path);
        start.send(()).expect("start");
        assert_eq!(
            sub.wait(Duration::from_millis(300)),
            Removed::NOTHING,
            "{why}"
        );
        remover.join().expect("remover");
    }

    /// Removes `path` from another thread, 50 ms after the wait has started.
    fn remove_soon(
        path: std::path::PathBuf,
    ) -> (crossbeam_channel::Sender<()>, std::thread::JoinHandle<()>) {
        let (started_tx, started_rx) = crossbeam_channel::bounded(0);
        let remover = std::thread::spawn(move || {
            started_rx.recv().expect("started");
            std::thread::sleep(Duration::from_millis(50));
            std::fs::remove_file(path).expect("remove");
        });
        (started_tx, remover)
    }

    /// A wait for `.master_lock` watches the state directory, not the file: it wakes at
    /// the `unlink` even while someone holds the file open, and sleeps through the
    /// removal of other names. A quiet wait (a reader's) on the file itself would wake
    /// only at the last close (`a_quiet_wait_wakes_at_the_last_close_of_the_file`).
    #[test]
    fn a_wait_for_master_wakes_at_its_unlink_and_sleeps_through_other_removals() {
        let slave = ".slave_lock-0e18a3fe-e080-418f-922d-b61347e980a5";
        let (dir, fd) = dir_with(&[".master_lock", slave]);
        let sub = subscribe(fd.as_fd()).expect("inotify available");
        sub.quiet(true);
        sub.concerns(Interest::MASTER, None);
        sleeps_through_the_removal_of(
            &sub,
            dir.path().join(slave),
            "a reader's file went, and the wait for .master_lock ended",
        );
        let path = dir.path().join(".master_lock");
        let held = std::fs::File::open(&path).expect("open");
        let (started_tx, remover) = remove_then_close(path, held);
        sub.concerns(Interest::MASTER, None);
        started_tx.send(()).expect("start");
        let removed = sub.wait(Duration::from_secs(30));
        let woke = Instant::now();
        let closed = remover.join().expect("remover");
        assert_eq!(removed, Removed::MASTER | Removed::GONE);
        assert!(woke < closed, "woken only at the close, not by the unlink");
    }

    /// The directory's watch that a wait for `.master_lock` leaves in place (so as not
    /// to remove it on the waiter's way in) does not wake the thread's next wait on one
    /// file when another name goes, and a release lets it go.
    #[test]
    fn the_watch_a_wait_for_master_leaves_wakes_no_later_wait_and_goes_at_a_release() {
        let slave = ".slave_lock-0e18a3fe-e080-418f-922d-b61347e980a5";
        let other = ".slave_lock-0e18a3fe-e080-418f-922d-b61347e980a6";
        let ahead = ".pending_lock-0e18a3fe-e080-418f-922d-b61347e980a7-1";
        let (dir, fd) = dir_with(&[".master_lock", slave, other, ahead]);
        let sub = subscribe(fd.as_fd()).expect("inotify available");
        let wait_for_master = || {
            sub.concerns(Interest::MASTER, None);
            let (start, remover) = remove_soon(dir.path().join(".master_lock"));
            start.send(()).expect("start");
            assert_eq!(
                sub.wait(Duration::from_secs(30)),
                Removed::MASTER | Removed::GONE
            );
            remover.join().expect("remover");
            assert!(lingering().is_some(), "the directory's watch was removed");
        };
        wait_for_master();
        // A queued writer's wait on its predecessor's file, while a reader leaves.
        sub.concerns(
            Interest::only(LockName::parse(ahead.as_bytes()).expect("a name")),
            None,
        );
        sleeps_through_the_removal_of(
            &sub,
            dir.path().join(slave),
            "the removal of a reader's file woke a wait for a queued writer's",
        );
        assert_eq!(lingering(), None);
        // Once more, then a release: nothing of the directory is queued any more.
        std::fs::write(dir.path().join(".master_lock"), b"x").expect("write");
        wait_for_master();
        let_go_lingering();
        assert_eq!(lingering(), None);
        std::fs::remove_file(dir.path().join(other)).expect("remove");
        let queued = OWN.with(|own| {
            let own = own.borrow();
            let own = own.as_ref().expect("the thread's own instance");
            own.inotify.read_events().unwrap_or_default().len()
        });
        assert_eq!(queued, 0, "the directory's removals are still queued");
    }
}
