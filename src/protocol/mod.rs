//! docs/protocol.md §3, step by step: read-acquire (R1–R3), write-acquire (W1–W6), stale
//! breaking of `.master_lock` (B0–B4), the fencing token (T1–T4); cleanup (C1–C3, A1) is in `cleanup`.
//! Step labels in comments refer to that document.

use std::cell::Cell;
use std::os::fd::{AsFd, OwnedFd};
use std::pin::pin;
#[cfg(test)]
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use uuid::Uuid;

use crate::config::Config;
use crate::entry::Entry;
use crate::error::{Error, Result};
use crate::fsops::{Created, Listing, Renamed, Spare, StateDir};
use crate::holder::{Holder, Kind, Record};
use crate::judge::{Judge, Judged};
use crate::names::LockName;
use crate::notify::{self, Interest, Removed, Subscription};
use crate::owned;
use crate::status;
use crate::sys::{self, ExitWatch, Identity};
use crate::wait::{Backoff, Deadline, block_on};

mod cleanup;

pub(crate) use cleanup::{cleanup, cleanup_all};

/// A lock file we created and still own.
#[derive(Debug)]
pub(crate) struct Own {
    pub(crate) name: LockName,
    pub(crate) created: Created,
    pub(crate) nonce: Uuid,
    /// V8 (docs/protocol-notes.md): a writer's pending file, kept while it holds
    /// `.master_lock` and removed after it, so that the writer queued behind waits for
    /// this one file and wakes once per grant. `None` for a reader, and for a writer that
    /// took V6's fast path (it never queued).
    pub(crate) queue: Option<(LockName, OwnedFd)>,
    /// The process that made the file (in its record); a forked child never releases it.
    pub(crate) pid: u32,
    /// When the last setting of the file's mtime started: its creation, or a touch
    /// ([`Own::keep_fresh`], the grant's). The guard's watchdog starts from it.
    /// A mutex, not a `Cell`: an async acquisition holds `&Own` across its waits, so
    /// `Own` must be `Sync` for the future to be `Send`.
    pub(crate) touched: parking_lot::Mutex<Instant>,
}

impl Own {
    /// H2 while waiting: renews the file's mtime through our own descriptor once a
    /// heartbeat period has passed since it was made or last renewed. A judge by lease
    /// (another host, another pid namespace) must never find a waiting owner's file
    /// stale (issue #18). Touching our own inode can never renew a successor's file.
    /// Best effort: a file that was lost meanwhile is found by the checks that decide
    /// (W2's listing for a pending file, W6 for `.master_lock`).
    fn keep_fresh(&self, period: Duration) {
        if self.touched.lock().elapsed() >= period {
            self.touch();
        }
    }

    /// Sets the file's mtime to now, through our own descriptor.
    fn touch(&self) {
        let started = Instant::now();
        let _ = StateDir::touch(&self.created.fd);
        *self.touched.lock() = started;
    }

    /// The grant's renewal of `.master_lock` (W6): a touch, unless the file was made or
    /// last touched less than an eighth of a heartbeat period ago. Such a touch would move
    /// the file's mtime by less than that, against a lease of three periods, so no judge
    /// could tell; and `touched`, where the guard's heartbeat and watchdog start, stays
    /// true. It spares an uncontended write and a hand-off between writers a system call,
    /// and every waiter watching `.master_lock` an `IN_ATTRIB` to check (issue #14).
    fn renew_at_grant(&self, period: Duration) {
        if self.touched.lock().elapsed() >= period / 8 {
            self.touch();
        }
    }

    /// When [`Own::keep_fresh`] must run next.
    fn due(&self, period: Duration) -> Option<Instant> {
        self.touched.lock().checked_add(period)
    }

    /// Closes our descriptor and gives back the name to unlink: the descriptor must be
    /// closed before the unlink, or NFS leaves a `.nfsXXXX` file behind.
    pub(crate) fn close(self) -> LockName {
        self.name
    }
}

/// How an acquisition waits between its looks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Mode {
    /// On the calling thread (`ppoll`, channels, `thread::sleep`): the protocol's
    /// futures never return `Pending` ([`block_on`]).
    Blocking,
    /// On the tokio reactor (issue #15): the shared inotify descriptor through
    /// `AsyncFd`, the polling floor as a `tokio::time` sleep. No thread of the
    /// process's own guards is asked about ([`crate::owned`] tracks threads, and tasks
    /// are not threads).
    #[cfg(feature = "tokio")]
    Async,
}

/// One acquisition in progress.
struct Attempt<'a> {
    sd: &'a StateDir,
    mode: Mode,
    cfg: &'a Config,
    judge: Judge<'a>,
    /// Who we are, for our records: read once, so that a `put` after a wake-up asks
    /// nothing (an acquisition runs on one thread, whose process cannot change).
    me: std::sync::Arc<Identity>,
    deadline: Deadline,
    started: Instant,
    backoff: Backoff,
    /// What we are acquiring (to name the right holder in errors).
    want: Kind,
    /// Our own pending file, never named as the one in our way.
    exclude: Option<LockName>,
    /// Wakes us on changes in the state directory (local changes only); made at the
    /// first pause, so that an acquisition that never waits costs no watch, or before
    /// the first look by a write that expects to wait ([`Attempt::subscribe`]).
    wake: Option<Subscription<'a>>,
    /// Whether we already tried to subscribe.
    subscribed: bool,
    /// Which removals can end the next pause ([`Attempt::sleep`]): set by the caller
    /// just before it, [`Interest::ALL`] otherwise.
    interest: Interest,
    /// The owner of the one file the next pause waits for, if its exit is an event
    /// ([`crate::judge::Judged::owner`]): set with `interest`.
    owner: Option<ExitWatch>,
    /// When the last [`Attempt::look`] began.
    looked: Instant,
    /// Pauses this acquisition has taken.
    pauses: u32,
    /// Anonymous files made before sleeping, for the `put`s that follow a wake-up (see
    /// [`crate::fsops::Spare`]).
    spares: std::cell::RefCell<Vec<Spare>>,
    /// The kinds of file a wake-up may need now, in the order of their `put`s: a writer's
    /// `.master_lock` (and its `.token-n` where tokens cannot be renamed), a reader's
    /// `.slave_lock-*`; none once a writer waits for readers.
    spares_wanted: &'static [Kind],
    /// V8: the nonce of our pending file, written into our `.master_lock` record too, so
    /// that `status` can tell the holder's own queue file from a waiting writer's.
    queue_nonce: Cell<Option<Uuid>>,
}

/// How many of an acquisition's first pauses end in a look even when events cover the
/// wait (see [`Attempt::sleep`]): with the default poll interval, the first
/// 1 + 2 + 4 + 8 ms. Not for a wait behind a queued writer.
const LOOKING_PAUSES: u32 = 4;

/// How old the record in a spare may be when the spare is given its name: older ones
/// are written again, so that `since` (and the mtime that other hosts judge leases by)
/// is never further than this before the grant. A spare is written before each pause,
/// so only a wake-up after a pause longer than this writes it after the wake-up.
const SPARE_FRESH: Duration = Duration::from_millis(20);

/// The shortest first pause of a wait behind a queued writer whose owner's exit is not
/// watched: its record not read yet (V15), or an owner judged by its lease. The wait ends
/// at that file's removal, and only a dead owner needs the pause to run out (the look
/// after it judges the file). A timeout shorter than the kernel's tick
/// (4 ms at `CONFIG_HZ=250`) is usually the CPU's next timer, so arming it and taking it
/// back each reprogram the timer device, which a virtual machine pays as two exits: the
/// 1 ms first pause of the back-off cost contended writers at N=8 a tenth of their grants
/// on the benchmark VM, and a 5 ms one nothing (docs/notes/contention.md §28).
const UNWATCHED_FIRST_PAUSE: Duration = Duration::from_millis(10);

impl<'a> Attempt<'a> {
    fn new(
        sd: &'a StateDir,
        cfg: &'a Config,
        deadline: Deadline,
        want: Kind,
        mode: Mode,
    ) -> Attempt<'a> {
        Attempt {
            sd,
            mode,
            cfg,
            judge: Judge::new(sd, cfg),
            me: sys::identity(),
            deadline,
            started: Instant::now(),
            backoff: Backoff::new(cfg.min_poll, cfg.max_poll),
            want,
            exclude: None,
            wake: None,
            subscribed: false,
            interest: Interest::ALL,
            owner: None,
            looked: Instant::now(),
            pauses: 0,
            spares: std::cell::RefCell::new(Vec::new()),
            spares_wanted: match want {
                // The token is made after the grant, when asked for (V14): no spare.
                Kind::Write => &[Kind::Write],
                _ => &[Kind::Read],
            },
            queue_nonce: Cell::new(None),
        }
    }

    /// The record for a new file of ours of kind `kind` (V8: a `.master_lock` record
    /// carries our pending file's nonce).
    fn record(&self, kind: Kind) -> Record<'_> {
        let mut r = record_of(&self.me, self.cfg, kind);
        if let (Kind::Write, Some(n)) = (kind, self.queue_nonce.get()) {
            r.nonce = n;
        }
        r
    }

    /// Whether a record written earlier (a spare's) is the one we would write now.
    fn record_fits(&self, h: &Holder) -> bool {
        h.kind != Kind::Write || self.queue_nonce.get().is_none_or(|n| h.nonce == n)
    }

    /// Makes the files the `put`s after a wake-up will need ([`Attempt::spares_wanted`]),
    /// with their records, so that a hand-off waits neither for inode creation nor for a
    /// write. Best effort, local
    /// filesystems only; made once per wait, their records written again when older than
    /// [`SPARE_FRESH`].
    fn prepare_spares(&self) {
        let mut spares = self.spares.borrow_mut();
        // `put` takes the last one first.
        let wanted = self.spares_wanted.iter().rev();
        spares.truncate(wanted.len());
        for (i, &kind) in wanted.enumerate() {
            if spares.len() == i {
                match self.sd.spare() {
                    Some(s) => spares.push(s),
                    None => break,
                }
            }
            if !spares[i]
                .record(kind, SPARE_FRESH / 2)
                .is_some_and(|h| self.record_fits(h))
            {
                spares[i].write(&self.record(kind));
            }
        }
    }

    /// Sleeps one back-off step; `None` when the deadline (or a cancellation) forbids it:
    /// the caller then undoes its own files and calls [`Attempt::give_up`]. Returns what
    /// the wake-up says was removed since the last [`Attempt::look`].
    ///
    /// `keep` are the files we own while waiting: each is renewed when due, and the pause
    /// ends in time for the next renewal, whatever the poll interval.
    async fn sleep(&mut self, keep: &[&Own]) -> Option<Removed> {
        if self.cancelled() {
            return None;
        }
        let period = self.cfg.refresh_period();
        for own in keep {
            own.keep_fresh(period);
        }
        let renew = keep.iter().filter_map(|own| own.due(period)).min();
        // Subscribe only when we must wait, then look again at once: a change made
        // before the subscription existed would otherwise be missed.
        if !self.subscribed && self.subscribe() {
            return Some(Removed::NOTHING);
        }
        if self.deadline != Deadline::Once {
            self.prepare_spares();
            self.sd.rewind();
        }
        let interest = std::mem::replace(&mut self.interest, Interest::ALL);
        // Behind a queued writer (its pending file is the one waited for), we are not
        // next: the look of a looking pause would find the same queue, and costs a
        // listing and a judgement while the writers ahead take their turns (issue #14).
        let behind_queue = matches!(interest.single_file(), Some(LockName::Pending { .. }));
        let owner = self.owner.take();
        // And the short pauses of the back-off are for waits that only polling may end.
        // This one ends at an event: the file's removal, or its owner's exit once the
        // wait holds a pidfd of it (until then its first pause is cut to
        // `notify::FIRST_WAIT`). Under contention the first 1 ms pause ran out in about
        // every other such wait, a wake-up for nothing. So its pauses start at the
        // maximum poll interval when the owner's exit is watched, and otherwise (its
        // record not read yet, V15, or an owner judged by its lease) at
        // `UNWATCHED_FIRST_PAUSE`: the first pause still ends in a look, but not under
        // the tick.
        if behind_queue && self.wake.is_some() && !self.sd.is_remote() {
            let first = if owner.is_some() {
                self.cfg.max_poll
            } else {
                UNWATCHED_FIRST_PAUSE
            };
            self.backoff.skip_short(first);
        }
        if let Some(w) = &self.wake {
            w.concerns(interest, owner);
        }
        let mut renew = renew;
        loop {
            #[cfg(test)]
            let paused = Instant::now();
            let removed = self.wait(renew, keep).await?;
            #[cfg(test)]
            tests::PAUSES_SHARED.with(|p| {
                if let Some(p) = p.borrow().as_ref() {
                    p.lock().push(paused.elapsed());
                }
            });
            self.pauses = self.pauses.saturating_add(1);
            if self.wake.as_ref().is_some_and(Subscription::dead) {
                // No event will come (no inotify instance could be made, or the
                // directory went away): poll as without a subscription, not at the
                // backstop's long pauses.
                self.wake = None;
                self.backoff.unbackstop();
            }
            // A pause that ran out while both the file waited for and its owner's exit
            // were watched (`Subscription::covered`) saw nothing a look would judge: it
            // sleeps on without one, and looks anyway once `COVERED_BACKSTOP` × the
            // maximum poll interval passed since its last look (a missed event must not
            // wedge a waiter). An
            // acquisition's first `LOOKING_PAUSES` pauses still end in a look, as before:
            // skipping those made hand-offs after 2-12 ms holds 20-40 µs slower on the
            // benchmark machine (a waiter that did nothing for the whole hold woke
            // slower), and they are few and short. Not behind a queued writer: that
            // wait ends at its predecessor's removal, not at a hand-off to us, and
            // under contention those early looks were a tenth of a grant's cost.
            let covered =
                !self.sd.is_remote() && self.wake.as_ref().is_some_and(Subscription::covered);
            let backstop = self
                .cfg
                .max_poll
                .saturating_mul(crate::config::COVERED_BACKSTOP);
            if !removed.is_nothing()
                || !covered
                || (self.pauses < LOOKING_PAUSES && !behind_queue)
                || self.looked.elapsed() >= backstop
            {
                return Some(removed);
            }
            if self.cancelled() {
                return None;
            }
            #[cfg(test)]
            tests::COVERED_SHARED.with(|n| {
                if let Some(n) = n.borrow().as_ref() {
                    n.fetch_add(1, Ordering::SeqCst);
                }
            });
            // The pauses may then grow past the usual backstop too.
            self.backoff.stretch(backstop);
            for own in keep {
                own.keep_fresh(period);
            }
            renew = keep.iter().filter_map(|own| own.due(period)).min();
        }
    }

    /// One pause of [`Attempt::sleep`], on the calling thread or on the reactor
    /// ([`Mode`]).
    ///
    /// Cancel safety: the one `.await` of an acquisition is here. Should its future be
    /// dropped while it waits (a `tokio::time::timeout`, a `select!`, an aborted task),
    /// [`Withdraw`] removes the files `keep` names, which are all the files the
    /// acquisition owns at each of its pauses: nothing is left behind, and no
    /// `.master_lock` stays with nobody to release it.
    #[cfg_attr(not(feature = "tokio"), expect(clippy::unused_async))]
    async fn wait(&mut self, renew: Option<Instant>, keep: &[&Own]) -> Option<Removed> {
        match self.mode {
            Mode::Blocking => {
                let _ = keep;
                self.backoff.sleep(self.deadline, renew, self.wake.as_ref())
            }
            #[cfg(feature = "tokio")]
            Mode::Async => {
                let pause = self.backoff.pause(self.deadline, renew)?;
                let undo = Withdraw {
                    sd: self.sd,
                    keep: Some(keep),
                };
                let removed = match &self.wake {
                    Some(w) => w.wait_async(pause).await,
                    None => {
                        tokio::time::sleep(pause).await;
                        Removed::NOTHING
                    }
                };
                undo.disarm();
                Some(removed)
            }
        }
    }

    /// Subscribes to the state directory's changes, unless this attempt may not sleep
    /// (`try_*`) or has done so already; whether a subscription was made (it can turn
    /// [dead](Subscription::dead) at its first wait, which then polls). A caller that
    /// expects to wait subscribes before its first look, which then needs no second
    /// look after the subscription (see [`Attempt::sleep`]).
    fn subscribe(&mut self) -> bool {
        if self.subscribed || self.deadline == Deadline::Once {
            return false;
        }
        self.subscribed = true;
        let w = notify::subscribe_to(self.sd.fd().as_fd(), self.sd.id());
        // A reader's waits on one file wake when the file is deleted, after the
        // `unlink` has left the state directory's lock: a herd of readers then does not
        // queue up on that lock behind the releasing writer (`notify`).
        w.quiet(self.want == Kind::Read);
        self.wake = Some(w);
        if !self.sd.is_remote() {
            // Locally every change makes an event; the poll only backs up what makes
            // none (a holder's death or its lease running out), and a long wait may
            // poll far less. Short waits poll as before: their first pauses stay short,
            // which measured 40-60 µs faster hand-offs (a waiter that slept through a
            // whole 2-12 ms hold woke slower, on this VM at least).
            let max = self.cfg.max_poll;
            self.backoff
                .backstop(max.saturating_mul(crate::config::EVENT_BACKSTOP));
        }
        true
    }

    /// [`Attempt::sleep`], or the error for giving up ([`Attempt::give_up`]) when the
    /// caller has nothing of its own to undo first.
    async fn pause(&mut self, keep: &[&Own]) -> Result<Removed> {
        match self.sleep(keep).await {
            Some(removed) => Ok(removed),
            None => Err(self.give_up()),
        }
    }

    /// A reader about to wait, while a writer holds or waits: [`Error::WouldDeadlock`]
    /// if the calling thread holds a read guard here, which that writer waits for.
    fn not_waiting_for_myself(&self) -> Result<()> {
        if self.mode != Mode::Blocking {
            // Tasks are not threads: see `Mode::Async`.
            return Ok(());
        }
        let Some(mine) = owned::mine_waited_for(self.sd) else {
            return Ok(());
        };
        let writer = blocker(self.sd, self.cfg, self.want, self.exclude.as_ref()).map(Box::new);
        Err(Error::WouldDeadlock {
            dir: self.cfg.dir.clone(),
            want: self.want,
            held: mine.kind,
            path: mine.path,
            writer,
        })
    }

    /// Marks the start of a listing that decides whether to sleep: a wake-up then
    /// reports only removals that the listing may have missed.
    fn look(&mut self) {
        self.looked = Instant::now();
        if let Some(w) = &self.wake {
            w.forget();
        }
    }

    fn cancelled(&self) -> bool {
        self.cfg.cancelled()
    }

    /// The error for a deadline that passed, naming who is in the way now.
    fn give_up(&self) -> Error {
        if self.cancelled() {
            return Error::Cancelled {
                dir: self.cfg.dir.clone(),
            };
        }
        let holder = blocker(self.sd, self.cfg, self.want, self.exclude.as_ref()).map(Box::new);
        let dir = self.cfg.dir.clone();
        match self.deadline {
            Deadline::Once => Error::WouldBlock { dir, holder },
            _ => Error::TimedOut {
                dir,
                waited: self.started.elapsed(),
                holder,
            },
        }
    }

    /// Creates one of our own files; a taken name (only possible if someone planted a
    /// file at a fresh uuid's name) is retried with a new uuid by the caller.
    fn put(&self, name: LockName, kind: Kind) -> Result<Option<Own>> {
        let spare = self.spares.borrow_mut().pop();
        let mut record = self.record(kind);
        // A spare's record, written while we waited, is ours but for its nonce and its
        // time: those make it the same record, which `put` then need not write again.
        if let Some(written) = spare
            .as_ref()
            .and_then(|s| s.record(kind, SPARE_FRESH))
            .filter(|h| self.record_fits(h))
        {
            (record.nonce, record.since_ns) = (written.nonce, written.since_ns);
        }
        // The file's mtime is no older than this: set while it is made, or (a spare's)
        // up to SPARE_FRESH before.
        let now = Instant::now();
        let started = now.checked_sub(SPARE_FRESH).unwrap_or(now);
        Ok(self.sd.put_with(&name, &record, spare)?.map(|created| Own {
            name,
            created,
            nonce: record.nonce,
            queue: None,
            pid: record.pid,
            touched: parking_lot::Mutex::new(started),
        }))
    }
}

/// Removes an async acquisition's files should its future be dropped while it waits
/// (see [`Attempt::wait`]); [`Withdraw::disarm`] once the wait is over.
#[cfg(feature = "tokio")]
struct Withdraw<'k, 'o> {
    sd: &'k StateDir,
    keep: Option<&'k [&'o Own]>,
}

#[cfg(feature = "tokio")]
impl Withdraw<'_, '_> {
    fn disarm(mut self) {
        self.keep = None;
    }
}

#[cfg(feature = "tokio")]
impl Drop for Withdraw<'_, '_> {
    fn drop(&mut self) {
        let Some(keep) = self.keep.take() else {
            return;
        };
        // `.master_lock` first, and only while it is ours (a judge by lease may have
        // broken it meanwhile), then our queue file (V8) and any breaker's marker: their
        // names are unique, so if they are there, they are ours.
        for own in keep.iter().filter(|o| o.name == LockName::Master) {
            let _ = self.sd.unlink_own(&own.name, &own.created, own.nonce);
        }
        for own in keep.iter().filter(|o| o.name != LockName::Master) {
            let _ = self.sd.unlink(&own.name);
        }
    }
}

/// The holder record for a new file of process `me` (`sys::identity()` for ours).
pub(crate) fn record_of<'a>(me: &'a Identity, cfg: &Config, kind: Kind) -> Record<'a> {
    Record {
        kind,
        host: &me.host,
        boot_id: &me.boot_id,
        pidns: me.pidns,
        pid: me.pid,
        start: me.start,
        pgid: cfg.pgid,
        nonce: Uuid::new_v4(),
        since_ns: now_ns(),
        lease_ms: u64::try_from(cfg.lease.as_millis()).unwrap_or(u64::MAX),
    }
}

/// `CLOCK_REALTIME` in nanoseconds.
pub(crate) fn now_ns() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX))
        .unwrap_or(0)
}

/// Read-acquire, R1–R3, on the calling thread.
pub(crate) fn read(sd: &StateDir, cfg: &Config, deadline: Deadline) -> Result<Own> {
    block_on(pin!(read_in(sd, cfg, deadline, Mode::Blocking)))
}

/// Read-acquire, R1–R3, waiting as `mode` says.
pub(crate) async fn read_in(
    sd: &StateDir,
    cfg: &Config,
    deadline: Deadline,
    mode: Mode,
) -> Result<Own> {
    let mut at = Attempt::new(sd, cfg, deadline, Kind::Read, mode);
    // V7 (docs/protocol-notes.md): the last read through this handle found the directory
    // free at R3, so this one announces at once, without R1's listing. R3 still decides,
    // from a listing that must then be one snapshot, and a failed R3 goes back to R1.
    let mut fast = sd.readers_were_free() && !sd.is_remote();
    loop {
        let skipped = std::mem::take(&mut fast);
        // R1: look before announcing (liveness and writer priority only).
        if !skipped {
            look_before_announcing(&mut at).await?;
        }
        // R2: announce.
        let Some(own) = at.put(
            LockName::Slave {
                uuid: Uuid::new_v4(),
            },
            Kind::Read,
        )?
        else {
            continue;
        };
        // R3: the decisive check, made after our file exists.
        let l = match sd.list_writers() {
            Ok(l) => l,
            Err(e) => {
                let _ = withdraw_reader(at.sd, own);
                return Err(e);
            }
        };
        sd.note_readers(l.readers);
        if !sd.swept() {
            sweep_kept(&at, &l);
        }
        let free = !l.master && l.pending.is_empty();
        // Only a snapshot arms the hint: where listings take several calls (a big state
        // directory), a hinted read would announce and withdraw every time.
        sd.set_readers_free(free && l.snapshot);
        if free && (!skipped || l.snapshot) {
            return Ok(own);
        }
        withdraw_reader(at.sd, own)?;
        if skipped {
            // Back to R1, which decides whether to wait, and for whom.
            continue;
        }
        at.not_waiting_for_myself()?;
        at.interest = if l.pending.is_empty() {
            Interest::MASTER
        } else {
            Interest::WRITERS
        };
        at.pause(&[]).await?;
    }
}

/// R5 for a reader's file `own`, whether a guard holds it or a read withdraws it (R3
/// found a writer): the file is removed, or its inode kept for the next read through this
/// handle (docs/protocol.md §2.1.1). `Ok(false)` if the name was already gone.
fn withdraw_reader(sd: &StateDir, own: Own) -> Result<bool> {
    let name = own.name;
    sd.release_reader(&name, own.created.fd, own.created.id, own.created.kept)
}

/// Removes the kept readers' files (`.tmp-` names, docs/protocol.md §2.1.1) of dead
/// processes found by `l`, the first reader's listing through this handle: a process
/// that read more than once and exited without dropping its `DirLock` (or was killed)
/// leaves one behind. Best effort: a file it cannot judge or remove is left to the
/// next handle and to `cleanup`.
fn sweep_kept(at: &Attempt<'_>, l: &crate::fsops::Listing) {
    at.sd.set_swept();
    let mine = at.sd.kept_name();
    for tmp in l.tmps.iter().filter(|t| Some(**t) != mine) {
        let _ = at.judge.unlink_if_dead(tmp);
    }
}

/// R1: lists (and judges) until no writer holds or waits, sleeping in between.
async fn look_before_announcing(at: &mut Attempt<'_>) -> Result<()> {
    loop {
        at.look();
        let l = at.sd.list_writers()?;
        // Every pending file judged (the dead ones removed, which V5 counts on); the
        // youngest live one is what to wait for.
        let mut youngest = None;
        let mut live_pending = 0;
        let mut youngest_nonce = None;
        for p in &l.pending {
            let j = at.judge.unlink_if_dead(p)?;
            if j.is_live() {
                youngest = Some((*p, j.owner()));
                youngest_nonce = j.nonce();
                live_pending += 1;
            }
        }
        let mut master = false;
        let mut master_owner = None;
        let mut master_nonce = None;
        if l.master {
            match at.judge.judge(&LockName::Master)? {
                j if j.is_dead() => {
                    break_master(at, &[]).await?;
                    continue;
                }
                j => {
                    (master, master_owner) = (j.is_live(), j.owner());
                    master_nonce = j.nonce();
                }
            }
        }
        // V9 (docs/protocol-notes.md): the only live pending file is the holder's own,
        // kept while it holds (V8; the two records share a nonce). It goes right after
        // `.master_lock`: wait for `.master_lock`, as when no writer is queued.
        if master && live_pending == 1 && youngest_nonce.is_some() && youngest_nonce == master_nonce
        {
            youngest = None;
        }
        let queued = youngest.is_some();
        if !queued && !master {
            return Ok(());
        }
        at.not_waiting_for_myself()?;
        // Only a writer's `.master_lock` was in our way, and the wake-up says it went
        // away: announce at once. R1 only keeps readers from announcing while a writer
        // waits; R3 alone decides. Should a writer have queued meanwhile (creations
        // are not watched), R3 sees it and we withdraw.
        // Behind queued writers, only the youngest one's leaving the queue can let us
        // in (it made `.master_lock`, gave up or was judged dead); the holder's
        // release is for the queued writers to take. One file either way: the
        // kernel wakes only those who wait for it (`notify`'s own-instance watch).
        (at.interest, at.owner) = match youngest {
            Some((name, owner)) => (Interest::only(name), owner),
            None => (Interest::MASTER, master_owner),
        };
        let removed = at.pause(&[]).await?;
        if !queued && removed.has_master() {
            return Ok(());
        }
        // V10 (docs/protocol-notes.md): behind queued writers we waited for the youngest
        // one's file, and it is gone (that writer left, gave up, or was judged dead and
        // removed): announce at once, as V1 does; R3 decides. A wake-up for its owner's
        // death leaves the file in place, for R1 to judge and remove.
        // A wait that saw the file's inode deleted needs no `fstatat` to know it (its
        // name is unique).
        if let Some((name, _)) = youngest
            && !removed.is_nothing()
            && (removed.file_gone() || !at.sd.exists(&name))
        {
            return Ok(());
        }
    }
}

/// The highest fencing token of a listing, and whether its entry is a regular file: T1
/// of a later allocation ([`grant_token`]) can start from it.
pub(crate) type TokenHint = (u64, bool);

/// Write-acquire, W1–W6, on the calling thread. Returns our `.master_lock` and the
/// highest token of the last listing made while we held it, from which [`grant_token`]
/// starts if the holder asks for its fencing token (V14 in docs/protocol-notes.md).
pub(crate) fn write(sd: &StateDir, cfg: &Config, deadline: Deadline) -> Result<(Own, TokenHint)> {
    block_on(pin!(write_in(sd, cfg, deadline, Mode::Blocking)))
}

/// Write-acquire, W1–W6, waiting as `mode` says.
pub(crate) async fn write_in(
    sd: &StateDir,
    cfg: &Config,
    deadline: Deadline,
    mode: Mode,
) -> Result<(Own, TokenHint)> {
    let mut at = Attempt::new(sd, cfg, deadline, Kind::Write, mode);
    // V6 (docs/protocol-notes.md): no writer holds or waits, so no pending file.
    if let Some(master) = fast_path(&at)? {
        at.spares_wanted = &[];
        return enter(&mut at, master, None).await;
    }
    // The last write here waited, or the look just made found a writer: this one will
    // most likely wait too. Subscribing before W2's first look spares a second one.
    if !sd.writers_were_absent() {
        at.subscribe();
    }
    // W1: queue.
    let mut pending = queue(&at)?;
    at.exclude = Some(pending.name);
    // W2: wait for our turn, then create the one exclusive `.master_lock`.
    let master = match wait_turn(&mut at, &mut pending).await {
        Ok(m) => m,
        Err(e) => {
            let _ = sd.unlink(&pending.close());
            return Err(e);
        }
    };
    // W5 waits for readers to leave, and nothing it does after a wake-up creates a
    // file.
    at.spares_wanted = &[];
    enter(&mut at, master, Some(pending)).await
}

/// V6, the fast path (docs/protocol-notes.md): a listing that shows no `.master_lock` and
/// no pending file, then the exclusive `put(.master_lock)` without a pending file. The
/// master file blocks new readers as a pending file would; a writer that queues after our
/// listing came after us, and the exclusive `put` stays the only writer gate. `None`:
/// queue as usual (W1) — some writer holds or waits, or the `put` found the name taken.
///
/// Tried only when the last write acquisition through this handle found no other writer
/// ([`StateDir::writers_were_absent`]): under contention the listing would be one more per
/// grant, all for nothing.
fn fast_path(at: &Attempt<'_>) -> Result<Option<Own>> {
    let sd = at.sd;
    if !sd.writers_were_absent() {
        return Ok(None);
    }
    let l = sd.list()?;
    if l.master || !l.pending.is_empty() {
        sd.set_writers_absent(false);
        return Ok(None);
    }
    let master = at.put(LockName::Master, Kind::Write)?;
    if master.is_none() {
        sd.set_writers_absent(false);
    }
    Ok(master)
}

/// W5–W6, holding `.master_lock` (made by W2, or by V6's fast path): wait for the
/// readers to drain, and check that `.master_lock` is still ours. No W4: the fencing
/// token is allocated when the holder asks for it (V14, [`grant_token`]). Returns
/// `.master_lock` with our pending file (`pending`, none after V6) in [`Own::queue`]
/// (V8 keeps it until the release, and W3 is gone), and the highest token of W5's last
/// listing.
async fn enter(
    at: &mut Attempt<'_>,
    mut master: Own,
    pending: Option<Own>,
) -> Result<(Own, TokenHint)> {
    let sd = at.sd;
    // Undo removes `.master_lock` only while it is ours: a judge by lease may have broken
    // it while we waited (we were paused, say) and another writer may own the name now.
    let remove_master = |master: &Own| {
        let _ = sd.unlink_own(&master.name, &master.created, master.nonce);
    };
    // V8: no W3. Our pending file stays until `.master_lock` is gone (docs/protocol-notes.md),
    // on every way out: the release, and the undo below.
    let leave_queue = |pending: Option<Own>| {
        if let Some(p) = pending {
            let _ = sd.unlink(&p.close());
        }
    };
    let steps = async {
        // W5's first look, made after our `.master_lock` exists. W5 decides by the
        // readers alone: the queued writers' names are not parsed.
        let first = sd.list_readers()?;
        drain(at, &master, pending.as_ref(), first).await
    };
    let hint = match steps.await {
        Ok(Some(done)) => done,
        Ok(None) => {
            // Gave up. Removed first: the error names who is in our way, not us.
            remove_master(&master);
            leave_queue(pending);
            return Err(at.give_up());
        }
        Err(e) => {
            remove_master(&master);
            leave_queue(pending);
            return Err(e);
        }
    };
    // The grant. Renew `.master_lock` now if it was made (or last renewed) a while ago:
    // the heartbeat's first beat comes up to one period from now.
    master.renew_at_grant(at.cfg.refresh_period());
    // W6, on every filesystem: a local directory can be shared with processes that judge
    // us by lease (another pid namespace), so the file may have been broken and made
    // again by someone else while we waited. Checked after the touch, which renewed our
    // own inode only: from here on a judge by lease finds it fresh.
    let owned = sd.owns(&master.name, &master.created, master.nonce);
    if !matches!(owned, Ok(true)) {
        // Not ours any more: remove nothing of `.master_lock`, but our queue file is ours.
        leave_queue(pending);
        owned?;
        return Err(Error::LockLost {
            path: sd.path_of(&LockName::Master),
            reason: "`.master_lock` was replaced while waiting for readers".into(),
        });
    }
    master.queue = pending.map(|p| (p.name, p.created.fd));
    Ok((master, hint))
}

/// V14 (docs/protocol-notes.md): the fencing token of a write grant, allocated the first
/// time its holder asks for it, while it holds `.master_lock`: T1–T3 ([`fencing_token`]),
/// then W6's check again (`still_ours`: `.master_lock` is still our file), and only then
/// T4 and the token. A later grant may not have asked for a token, so T3 alone cannot
/// tell that ours was taken over; once `.master_lock` is found still ours after T2, no
/// grant came after ours, and every later one that asks gets a higher token.
pub(crate) fn grant_token(
    sd: &StateDir,
    cfg: &Config,
    hint: TokenHint,
    still_ours: impl FnOnce() -> Result<()>,
    spent: &mut Vec<OwnedFd>,
) -> Result<u64> {
    let at = Attempt::new(sd, cfg, Deadline::Never, Kind::Write, Mode::Blocking);
    let (token, l) = fencing_token(&at, hint, spent)?;
    still_ours()?;
    // T4: housekeeping only (T1 and T3 look at the highest token), so a lower token
    // that cannot be removed is left: another user's token in a sticky state
    // directory, or a non-empty directory someone made at a token name, must not keep
    // every later writer out.
    for &k in l.tokens.iter().filter(|&&k| k < token) {
        let _ = sd.unlink(&LockName::Token(k));
    }
    Ok(token)
}

/// T1–T3: the next fencing token, and T3's listing. T1 starts from `hint`, a listing
/// made earlier: it can only be older than a fresh one, and a stale hint shows up in the
/// listing that follows.
fn fencing_token(
    at: &Attempt<'_>,
    hint: (u64, bool),
    spent: &mut Vec<OwnedFd>,
) -> Result<(u64, Listing)> {
    let sd = at.sd;
    let (mut token, mut fresh) = allocate_token(at, Some(hint), spent)?;
    loop {
        let l = sd.list()?;
        let higher = l.tokens.iter().any(|&k| k > token);
        // T3. From the hint, a higher token can also mean that grants completed between
        // W2's listing and our `.master_lock` (and one removed the token we then made
        // again): allocate once more from a fresh listing, which can only give a higher
        // token. Only a fresh T1 followed by a higher token means that another writer was
        // granted the lock after us.
        if higher && !fresh {
            (token, fresh) = allocate_token(at, None, spent)?;
            continue;
        }
        if higher {
            return Err(Error::LockLost {
                path: sd.path_of(&LockName::Token(token)),
                reason: "a later fencing token exists: another writer was granted the lock".into(),
            });
        }
        return Ok((token, l));
    }
}

/// W5: waits until the readers drain, starting from `l`, a listing made after our
/// `.master_lock` existed, and keeps `.master_lock` fresh meanwhile. Returns the highest
/// token of the last listing; `Ok(None)`: the deadline passed or the acquisition was
/// cancelled.
/// `pending`, our queue file (V8), is kept fresh too.
async fn drain(
    at: &mut Attempt<'_>,
    master: &Own,
    pending: Option<&Own>,
    mut l: Listing,
) -> Result<Option<TokenHint>> {
    loop {
        // Every listed reader is gone or was dead and removed: drained. The listing was
        // made after our `.master_lock` existed, so a reader missing from it announced
        // itself later and its decisive R3 listing sees `.master_lock`: it withdraws. Not
        // listing again matters on a remote filesystem, whose listing can show departed
        // readers for ~20 s and would keep us spinning.
        if l.slaves.is_empty() || !at.judge.any_live(&l.slaves)? {
            return Ok(Some(l.top_token()));
        }
        at.interest = Interest::READERS;
        let keep: &[&Own] = match pending {
            Some(p) => &[master, p],
            None => &[master],
        };
        if at.sleep(keep).await.is_none() {
            return Ok(None);
        }
        l = at.sd.list_readers()?;
    }
}

/// W1: a fresh pending file, `ns` read just before creating it.
fn queue(at: &Attempt<'_>) -> Result<Own> {
    loop {
        let name = LockName::Pending {
            ns: now_ns(),
            uuid: Uuid::new_v4(),
        };
        if let Some(own) = at.put(name, Kind::Pending)? {
            at.queue_nonce.set(Some(own.nonce));
            return Ok(own);
        }
    }
}

/// W2. Returns our `.master_lock`.
async fn wait_turn(at: &mut Attempt<'_>, pending: &mut Own) -> Result<Own> {
    let sd = at.sd;
    // For V6's hint: whether this acquisition found another writer in its way.
    let mut waited = false;
    loop {
        at.look();
        let l = sd.list()?;
        if !l.has(&pending.name) {
            // Judged dead (lease) or removed by `cleanup --all`: queue again.
            *pending = queue(at)?;
            at.exclude = Some(pending.name);
            continue;
        }
        // The live queued writer just ahead of us: only its departure (or, once we are
        // first, that of `.master_lock`) can make us first (issue #14: no herd). V5
        // (docs/protocol-notes.md): only the queued writers older than us are judged,
        // nearest first, up to the first live one, and the dead ones among them removed;
        // younger and farther ones are left to the writers behind them and to readers,
        // so that a look reads one file, not every queued writer's.
        let mut predecessor: Option<LockName> = None;
        let mut predecessor_owner = None;
        let mut predecessor_nonce = None;
        let mine = pending.name.order_key();
        let older = l.pending.iter().rev().filter(|p| p.order_key() < mine);
        // V15 (docs/protocol-notes.md): before this acquisition's first pause, a
        // predecessor that is not the head of the queue is waited for unjudged. Its
        // record (an open, a read, its owner's pidfd) is needed only if it is dead, and
        // a dead one is found by the judgement after that pause, which the polling
        // floor ends (`UNWATCHED_FIRST_PAUSE`: 5-15 ms). The writer that queues again
        // at its release is the one that does this, on the path a successor woken on
        // its CPU waits out (contention.md §25). Local filesystems only; the head's
        // record is read at once, for V9's nonce.
        let unread = if at.pauses == 0 && !sd.is_remote() {
            let mut ahead = older.clone();
            ahead.next().filter(|_| ahead.next().is_some())
        } else {
            None
        };
        if let Some(p) = unread {
            predecessor = Some(*p);
        } else {
            for p in older {
                let j = at.judge.unlink_if_dead(p)?;
                if j.is_live() {
                    (predecessor, predecessor_owner) = (Some(*p), j.owner());
                    predecessor_nonce = j.nonce();
                    break;
                }
            }
        }
        let older_live = predecessor.is_some();
        // Whether no queued writer is older than our predecessor.
        let predecessor_first = older_live && l.pending.first() == predecessor.as_ref();
        let concern = predecessor.map_or(Interest::MASTER, Interest::only);
        // V13 (docs/protocol-notes.md): `.master_lock` is judged only by a writer with no
        // live queued writer between it and the head of the queue: the first live one,
        // which breaks it if its owner is dead, or the one right behind the head, for
        // V9's nonce. Behind a live writer that is not the head, our turn comes when our
        // predecessor goes, whoever holds; the writers ahead of us judge `.master_lock`
        // (a dead one is broken by the first of them that is alive). One judgement
        // fewer per contended grant: the writer that queues again at its release is
        // behind the others.
        if l.master && (!older_live || predecessor_first) {
            match at.judge.judge(&LockName::Master)? {
                j if j.is_dead() => {
                    break_master(at, &[&*pending]).await?;
                    continue;
                }
                // Listed, but `open` finds it gone: count it as absent. On a remote
                // filesystem the listing can be ~20 s stale while `open` asks the server
                // (docs/protocol.md §10); looping on the listing would spin for that long. The
                // exclusive `put` below stays the only gate.
                Judged::Gone => {}
                j => {
                    // V9 (docs/protocol-notes.md): the only queued writer before us is the
                    // holder itself, which keeps its pending file while it holds (V8; its
                    // `.master_lock` record carries that file's nonce). Its `.master_lock`
                    // going is then our turn, as for the first queued writer (V2).
                    let behind_holder =
                        predecessor_first && j.nonce().is_some() && j.nonce() == predecessor_nonce;
                    let first = !older_live || behind_holder;
                    at.interest = if first { Interest::MASTER } else { concern };
                    at.owner = if first { j.owner() } else { predecessor_owner };
                    waited = true;
                    sd.set_writers_absent(false);
                    let removed = at.pause(&[&*pending]).await?;
                    // We were first in the queue (or behind the holder's own pending file)
                    // and only `.master_lock` was in our way; the wake-up says it went
                    // away: create ours at once. The exclusive `put` is the only writer
                    // gate, whatever a listing would show; if the name is taken again, the
                    // full W2 loop follows.
                    if first
                        && removed.has_master()
                        && let Some(master) = at.put(LockName::Master, Kind::Write)?
                    {
                        return Ok(master);
                    }
                    continue;
                }
            }
        }
        if older_live {
            at.interest = concern;
            at.owner = predecessor_owner;
            waited = true;
            sd.set_writers_absent(false);
            at.pause(&[&*pending]).await?;
            continue;
        }
        if let Some(master) = at.put(LockName::Master, Kind::Write)? {
            if !waited {
                sd.set_writers_absent(true);
            }
            return Ok(master);
        }
    }
}

/// T1–T2: the next fencing token, allocated while holding `.master_lock`. T3 and T4 are
/// done by the callers ([`fencing_token`], [`grant_token`]).
///
/// `hint` stands for T1's listing when the caller has a recent one: the highest token,
/// and whether its entry is a regular file. Returns the token and whether it came from a
/// fresh T1 listing.
/// On a local filesystem the token is usually made by renaming the previous one (see
/// below); a token made by `put` gives its descriptor to `spent`, to be closed at the
/// release, after `.master_lock`'s removal (a `close` fewer on the token's way; on a
/// remote filesystem the descriptor is closed at once, since one left open across an
/// unlink leaves a `.nfsXXXX` file behind). A renamed token file keeps the record of the writer that
/// first made it: the number is what counts, and nothing reads a token's record but for
/// display.
fn allocate_token(
    at: &Attempt<'_>,
    mut hint: Option<(u64, bool)>,
    spent: &mut Vec<OwnedFd>,
) -> Result<(u64, bool)> {
    let sd = at.sd;
    loop {
        // T1
        let fresh = hint.is_none();
        let (n, regular) = match hint.take() {
            Some(top) => top,
            None => sd.list()?.top_token(),
        };
        // `.token-18446744073709551615` is never reached by counting (someone planted
        // it): there is no next token, and T2 would find the name taken for ever.
        let Some(next) = n.checked_add(1) else {
            return Err(Error::TokensExhausted {
                path: sd.path_of(&LockName::Token(n)),
            });
        };
        // T2, and T4 for the highest token: where the filesystem allows it, token n is
        // renamed to n+1, which fails if n+1 exists (T2's exclusive create) and removes n
        // in the same step (T4 removes only lower tokens, and n is the one T1 found).
        // Any other lower token is left to T4. Only a regular file is renamed: whatever
        // else sits at a token name (a directory someone made there) is not ours to move.
        if n > 0 && regular {
            match sd.rename_token(n, next) {
                Renamed::Done => return Ok((next, fresh)),
                // n+1 is taken, or n is gone: T1 again, from a fresh listing.
                Renamed::Taken | Renamed::Missing => continue,
                Renamed::Unsupported => {}
            }
        }
        if let Some(own) = at.put(LockName::Token(next), Kind::Token)? {
            if !sd.is_remote() {
                spent.push(own.created.fd);
            }
            return Ok((next, fresh));
        }
    }
}

/// B0–B4: removes a `.master_lock` whose owner is dead, with breakers made mutually
/// exclusive by unique `.break-*` markers. Returns whether this call removed it.
/// `keep`: the caller's own files, kept fresh while this waits (a writer's pending file).
async fn break_master(at: &mut Attempt<'_>, keep: &[&Own]) -> Result<bool> {
    let sd = at.sd;
    // B0: wait while another live breaker is at work.
    loop {
        let l = sd.list()?;
        let live_breaker = at.judge.any_live(&l.breaks)?;
        if !l.master || !at.judge.judge(&LockName::Master)?.is_dead() {
            return Ok(false);
        }
        if !live_breaker {
            break;
        }
        at.pause(keep).await?;
    }
    // B1: announce.
    let Some(marker) = at.put(
        LockName::Break {
            ns: now_ns(),
            uuid: Uuid::new_v4(),
        },
        Kind::Break,
    )?
    else {
        return Ok(false);
    };
    let result = exclusive_break(at, &marker, keep).await;
    // B4
    let _ = sd.unlink(&marker.close());
    result
}

async fn exclusive_break(at: &mut Attempt<'_>, own: &Own, keep: &[&Own]) -> Result<bool> {
    let sd = at.sd;
    let marker = &own.name;
    let mut held: Vec<&Own> = keep.to_vec();
    held.push(own);
    // B2: wait until we are the only live breaker; the older one wins.
    loop {
        let l = sd.list()?;
        let (mut others, mut older) = (false, false);
        for b in l.breaks.iter().filter(|b| *b != marker) {
            if at.judge.unlink_if_dead(b)?.is_live() {
                others = true;
                older |= b.order_key() < marker.order_key();
            }
        }
        if !others {
            break;
        }
        if older {
            return Ok(false);
        }
        at.pause(&held).await?;
    }
    // B3: re-read while exclusive; nothing can replace a dead owner's file now.
    if at.judge.judge(&LockName::Master)?.is_dead() {
        return sd.unlink(&LockName::Master);
    }
    Ok(false)
}

/// Who is in the way of an acquisition of kind `want` ([`crate::Status::blocker`]), our own
/// queue file `exclude` passed over. Only used to word errors.
fn blocker(sd: &StateDir, cfg: &Config, want: Kind, exclude: Option<&LockName>) -> Option<Entry> {
    let own = exclude.map(LockName::to_string);
    let st = status::status(Some(sd), cfg).ok()?;
    st.blocker(want, |e| own.as_deref() == Some(e.name.as_str()))
        .cloned()
}

/// Opens the state directory.
pub(crate) fn open_state(cfg: &Config, create: bool) -> Result<Option<StateDir>> {
    StateDir::open(&cfg.dir, cfg.state_dir.as_deref(), create, cfg.cache_window)
}

#[cfg(test)]
mod tests {
    use super::*;

    thread_local! {
        /// Pauses this thread slept on without a look because events covered them
        /// ([`Attempt::sleep`]), readable from another thread: once there is one, the
        /// waiter looks again only when woken (or at its backstop).
        pub(super) static COVERED_SHARED: std::cell::RefCell<Option<std::sync::Arc<std::sync::atomic::AtomicUsize>>> =
            const { std::cell::RefCell::new(None) };
        /// How long each pause of this thread lasted, readable from another thread.
        pub(super) static PAUSES_SHARED: std::cell::RefCell<Option<std::sync::Arc<parking_lot::Mutex<Vec<Duration>>>>> =
            const { std::cell::RefCell::new(None) };
    }

    fn config(dir: &std::path::Path) -> Config {
        Config {
            dir: dir.to_path_buf(),
            state_dir: None,
            lease: Duration::from_secs(45),
            min_poll: Duration::from_millis(1),
            max_poll: Duration::from_millis(10),
            pgid: 0,
            cancel: None,
            heartbeat: true,
            allow_unsafe_fs: false,
            cache_window: None,
            share_readers: true,
        }
    }

    /// A lock on `dir` whose waits are covered by events after their first pauses (the
    /// backstop is 300 × 100 ms), for the tests that count a waiter's listings.
    fn counting_lock(dir: &std::path::Path) -> crate::DirLock {
        crate::DirLock::builder(dir)
            .poll_interval(Duration::from_millis(1), Duration::from_millis(100))
            .build()
            .expect("lock")
    }

    /// Waits (bounded) until `cond` holds.
    fn wait_for(what: &str, cond: impl Fn() -> bool) {
        let end = Instant::now() + Duration::from_secs(20);
        while !cond() {
            assert!(Instant::now() < end, "{what}: not within 20 s");
            std::thread::yield_now();
        }
    }

    /// A thread that takes the lock (write or read), says so with its listing count at
    /// the grant, and releases it when told to.
    struct Taker {
        thread: std::thread::JoinHandle<()>,
        granted: crossbeam_channel::Receiver<usize>,
        release: crossbeam_channel::Sender<()>,
    }

    impl Taker {
        fn spawn(lk: &crate::DirLock, counters: Option<&Counters>, write: bool) -> Taker {
            let counter = counters.map(|c| std::sync::Arc::clone(&c.listings));
            let covered = counters.map(|c| std::sync::Arc::clone(&c.covered));
            let lookups = counters.map(|c| std::sync::Arc::clone(&c.lookups));
            let master_reads = counters.map(|c| std::sync::Arc::clone(&c.master_reads));
            let pending_reads = counters.map(|c| std::sync::Arc::clone(&c.pending_reads));
            let pauses = counters.map(|c| std::sync::Arc::clone(&c.pauses));
            let (tx, granted) = crossbeam_channel::bounded(1);
            let (release, rx) = crossbeam_channel::bounded::<()>(1);
            let lk = lk.clone();
            let thread = std::thread::spawn(move || {
                let n = counter.clone();
                crate::fsops::LISTINGS_SHARED.with(|s| *s.borrow_mut() = n);
                COVERED_SHARED.with(|s| *s.borrow_mut() = covered);
                crate::fsops::EXISTS_SHARED.with(|s| *s.borrow_mut() = lookups);
                crate::fsops::MASTER_READS_SHARED.with(|s| *s.borrow_mut() = master_reads);
                crate::fsops::PENDING_READS_SHARED.with(|s| *s.borrow_mut() = pending_reads);
                PAUSES_SHARED.with(|s| *s.borrow_mut() = pauses);
                let read = || counter.as_ref().map_or(0, |n| n.load(Ordering::SeqCst));
                if write {
                    let g = lk.write().expect("write");
                    tx.send(read()).expect("send");
                    let _ = rx.recv();
                    drop(g);
                } else {
                    let g = lk.read().expect("read");
                    tx.send(read()).expect("send");
                    let _ = rx.recv();
                    drop(g);
                }
            });
            Taker {
                thread,
                granted,
                release,
            }
        }

        fn granted(&self) -> usize {
            self.granted.recv().expect("the grant")
        }

        fn release(self) {
            let _ = self.release.send(());
            self.thread.join().expect("join");
        }
    }

    /// Each taker in turn takes the lock it queued for and releases it.
    fn in_turn<const N: usize>(takers: [Taker; N]) {
        for t in takers {
            t.granted();
            t.release();
        }
    }

    /// What a waiting [`Taker`] reports: its listings, and its pauses slept on without a
    /// look (covered by events).
    #[derive(Default)]
    struct Counters {
        listings: std::sync::Arc<std::sync::atomic::AtomicUsize>,
        covered: std::sync::Arc<std::sync::atomic::AtomicUsize>,
        /// Names looked up with `StateDir::exists`.
        lookups: std::sync::Arc<std::sync::atomic::AtomicUsize>,
        /// Reads of `.master_lock` (its judgements).
        master_reads: std::sync::Arc<std::sync::atomic::AtomicUsize>,
        /// Reads of queued writers' files (their judgements).
        pending_reads: std::sync::Arc<std::sync::atomic::AtomicUsize>,
        /// How long each pause lasted.
        pauses: std::sync::Arc<parking_lot::Mutex<Vec<Duration>>>,
    }

    impl Counters {
        fn lookups(&self) -> usize {
            self.lookups.load(Ordering::SeqCst)
        }

        fn listings(&self) -> usize {
            self.listings.load(Ordering::SeqCst)
        }

        fn master_reads(&self) -> usize {
            self.master_reads.load(Ordering::SeqCst)
        }

        fn pending_reads(&self) -> usize {
            self.pending_reads.load(Ordering::SeqCst)
        }

        fn pauses(&self) -> Vec<Duration> {
            self.pauses.lock().clone()
        }

        /// Waits until the waiter's looking pauses are over (its first pause slept on
        /// without a look: from then on it looks only when woken, or at its backstop of
        /// 300 × 100 ms), and returns its listings so far.
        fn settled(&self) -> usize {
            wait_for("the waiter's looking pauses", || {
                self.covered.load(Ordering::SeqCst) >= 1
            });
            self.listings()
        }
    }

    /// Where no inotify instance can be made (the user's `max_user_instances` taken),
    /// the subscription turns dead at the first wait and the waiter polls at its poll
    /// interval, not at the long pauses of a wait that events would end. Here the
    /// interval is at most 10 ms (15 with jitter) and the events' backstop 20 × that:
    /// over 800 ms a waiter that polls lists the directory about 90 times here; one that
    /// kept the backstop's pauses (200 ms) about 14.
    #[test]
    fn a_wait_without_inotify_instances_polls() {
        let dir = tempfile::tempdir().expect("tempdir");
        let lk = crate::DirLock::builder(dir.path())
            .poll_interval(Duration::from_millis(1), Duration::from_millis(10))
            .build()
            .expect("lock");
        let held = lk.write().expect("write");
        let listings = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let waiter = {
            let (lk, listings) = (lk.clone(), std::sync::Arc::clone(&listings));
            std::thread::spawn(move || {
                crate::notify::NO_INSTANCES.with(|n| n.set(true));
                crate::fsops::LISTINGS_SHARED.with(|s| *s.borrow_mut() = Some(listings));
                lk.try_write_for(Duration::from_millis(800)).map(drop)
            })
        };
        let waited = waiter.join().expect("the waiter");
        drop(held);
        assert!(
            matches!(waited, Err(Error::TimedOut { .. })),
            "the lock was held: {waited:?}"
        );
        let n = listings.load(Ordering::SeqCst);
        assert!(n >= 30, "{n} listings in 800 ms: the waiter did not poll");
    }

    /// V8 and V9 (docs/protocol-notes.md): one wake-up per grant. Writer B waits for
    /// writer A, and writer C waits behind B. When A leaves and B takes the lock, C must
    /// sleep through B's grant and hold: it waits for B's pending file, which B keeps
    /// until it leaves. Before V8, B removed that file at its grant (W3), and C woke up,
    /// listed the directory and went back to sleep on B's `.master_lock`.
    #[test]
    fn a_queued_writer_sleeps_through_the_grant_before_it() {
        let dir = tempfile::tempdir().expect("tempdir");
        let lk = counting_lock(dir.path());
        let queued = |n: usize| lk.status().expect("status").pending.len() >= n;
        let a = lk.write().expect("A");
        let b = Taker::spawn(&lk, None, true);
        wait_for("B queued", || queued(1));
        let c_counters = Counters::default();
        let c = Taker::spawn(&lk, Some(&c_counters), true);
        wait_for("C queued", || queued(2));
        let before = c_counters.settled();
        drop(a);
        b.granted();
        // B holds for a while: C's wake-up at B's grant, if any, comes within a few ms.
        std::thread::sleep(Duration::from_millis(300));
        let during = c_counters.listings() - before;
        b.release();
        c.granted();
        c.release();
        assert_eq!(
            during, 0,
            "C listed the directory {during} times during B's grant and hold"
        );
    }

    /// V9 (docs/protocol-notes.md): a writer whose only older pending file is the
    /// holder's own (kept by V8) waits for `.master_lock` and takes it when it goes,
    /// without listing the directory first: from the holder's release to its grant it
    /// lists once (T1–T3 and W5's listing), not twice.
    #[test]
    fn a_writer_behind_the_holders_queue_file_takes_the_lock_without_a_listing() {
        let dir = tempfile::tempdir().expect("tempdir");
        let lk = counting_lock(dir.path());
        // H waits for X, so it holds with its pending file kept (V8).
        let x = lk.write().expect("X");
        let h = Taker::spawn(&lk, None, true);
        wait_for("H queued", || {
            !lk.status().expect("status").pending.is_empty()
        });
        drop(x);
        h.granted();
        let b_counters = Counters::default();
        let b = Taker::spawn(&lk, Some(&b_counters), true);
        // B queued; H's own file is shown as the writer's, not as queued.
        wait_for("B queued", || {
            !lk.status().expect("status").pending.is_empty()
        });
        let before = b_counters.settled();
        h.release();
        let at_grant = b.granted();
        b.release();
        assert_eq!(
            at_grant - before,
            1,
            "B's listings from H's release to its grant (1: W5's first look)"
        );
    }

    /// V13 (docs/protocol-notes.md): a writer behind a live queued writer that is not
    /// the head of the queue does not judge `.master_lock`; the writers ahead of it do.
    /// H holds (its pending file kept, V8), A waits right behind H (V9: it judges
    /// `.master_lock` for the nonce), and C queues behind A: C's looks read A's record,
    /// never `.master_lock`'s, and C is still served after A.
    #[test]
    fn a_writer_behind_a_queued_writer_leaves_the_master_lock_to_it() {
        let dir = tempfile::tempdir().expect("tempdir");
        let lk = counting_lock(dir.path());
        let queued = |n: usize| lk.status().expect("status").pending.len() >= n;
        // H waits for X, so it holds with its pending file kept (V8).
        let x = lk.write().expect("X");
        let h = Taker::spawn(&lk, None, true);
        wait_for("H queued", || queued(1));
        drop(x);
        h.granted();
        let a_counters = Counters::default();
        let a = Taker::spawn(&lk, Some(&a_counters), true);
        wait_for("A queued", || queued(1));
        a_counters.settled();
        let c_counters = Counters::default();
        let c = Taker::spawn(&lk, Some(&c_counters), true);
        wait_for("C queued", || queued(2));
        c_counters.settled();
        assert!(
            a_counters.master_reads() >= 1,
            "A, right behind the holder, judges `.master_lock` (V9)"
        );
        assert_eq!(
            c_counters.master_reads(),
            0,
            "C, behind A, read `.master_lock` ({} listings)",
            c_counters.listings()
        );
        h.release();
        in_turn([a, c]);
        assert_eq!(
            c_counters.master_reads(),
            0,
            "C read `.master_lock` before its grant"
        );
    }

    /// A writer behind a queued writer sleeps until its predecessor's pending file goes:
    /// its wait is covered by events (the file's watch, its owner's exit), so it neither
    /// looks at the end of its first pauses (those looks are for a wait on
    /// `.master_lock`, where a hand-off to us comes) nor takes the back-off's short
    /// pauses (issue #14: under contention each was a wake-up for nothing).
    #[test]
    fn a_writer_behind_a_queued_writer_sleeps_without_looking() {
        let dir = tempfile::tempdir().expect("tempdir");
        let lk = counting_lock(dir.path());
        let queued = |n: usize| lk.status().expect("status").pending.len() >= n;
        let h = lk.write().expect("H");
        let a = Taker::spawn(&lk, None, true);
        wait_for("A queued", || queued(1));
        let c_counters = Counters::default();
        let c = Taker::spawn(&lk, Some(&c_counters), true);
        wait_for("C queued", || queued(2));
        // Long enough for the first four pauses of the back-off, looking or short, to be
        // over several times: 1 + 2 + 4 + 8 ms from its minimum, 50-150 + 100-300 ms
        // from the maximum poll interval.
        std::thread::sleep(Duration::from_millis(600));
        let listings = c_counters.listings();
        let slept_on = c_counters.covered.load(Ordering::SeqCst);
        drop(h);
        in_turn([a, c]);
        // W2's look (and one right after subscribing, should the subscription come
        // after it); a looking pause would add one look per pause.
        assert!(
            listings <= 2,
            "C listed the directory {listings} times in its first 600 ms behind A"
        );
        // Pauses that ran out with nothing seen: from 1 ms up, eight or more in 600 ms;
        // from the maximum poll interval (100 ms here), at most four.
        assert!(
            slept_on <= 5,
            "C woke {slept_on} times for nothing in its first 600 ms behind A"
        );
    }

    /// H holds (V6: no pending file), writers A and B queue behind it, and C, counted
    /// with `c_counters`, asks behind B: a queued writer that is not the head (V15).
    fn behind_two_queued(
        lk: &crate::DirLock,
        c_counters: &Counters,
    ) -> (crate::WriteGuard, Taker, Taker, Taker) {
        let queued = |n: usize| lk.status().expect("status").pending.len() >= n;
        let h = lk.write().expect("H");
        let a = Taker::spawn(lk, None, true);
        wait_for("A queued", || queued(1));
        let b = Taker::spawn(lk, None, true);
        wait_for("B queued", || queued(2));
        let c = Taker::spawn(lk, Some(c_counters), true);
        (h, a, b, c)
    }

    /// V15: a writer whose predecessor is a queued writer behind the head of the queue
    /// waits for it without reading its file, if the wait ends before its first pause
    /// does (here the first pause is 5-15 s, the wait a few hand-offs). Its grant comes
    /// at its predecessor's release, when it is first: nothing else is judged.
    #[test]
    fn a_writer_behind_a_queued_writer_not_first_waits_for_it_unjudged() {
        let dir = tempfile::tempdir().expect("tempdir");
        let lk = crate::DirLock::builder(dir.path())
            .poll_interval(Duration::from_secs(10), Duration::from_secs(20))
            .build()
            .expect("lock");
        let c_counters = Counters::default();
        let (h, a, b, c) = behind_two_queued(&lk, &c_counters);
        wait_for("C queued and looked", || {
            lk.status().expect("status").pending.len() >= 3 && c_counters.listings() >= 1
        });
        drop(h);
        in_turn([a, b, c]);
        assert_eq!(
            c_counters.pending_reads(),
            0,
            "C read a queued writer's file while waiting behind B"
        );
    }

    /// V15's wait (behind a queued writer whose file was not read) takes no pause shorter
    /// than the kernel's tick, though it ends in a judgement: such a timeout costs two
    /// reprogrammings of the timer device, which a virtual machine pays in exits, on
    /// every contended grant (contention.md §28). Red with the back-off's first pause
    /// (0.5-1.5 ms here).
    #[test]
    fn a_wait_behind_an_unread_queued_writer_pauses_past_the_tick() {
        let dir = tempfile::tempdir().expect("tempdir");
        let lk = counting_lock(dir.path());
        let c_counters = Counters::default();
        let (h, a, b, c) = behind_two_queued(&lk, &c_counters);
        // Nothing changes while H holds: C's first pause runs out, and the look after
        // it reads B's file.
        wait_for("C judged B after its first pause", || {
            c_counters.pending_reads() >= 1
        });
        let first = c_counters.pauses().first().copied();
        drop(h);
        in_turn([a, b, c]);
        let first = first.expect("C paused before it judged B");
        assert!(
            first >= UNWATCHED_FIRST_PAUSE / 2,
            "C's first pause behind B lasted {first:?}, under {:?}",
            UNWATCHED_FIRST_PAUSE / 2
        );
    }

    /// V15 must not wedge a writer behind a dead queued writer: the judgement it skipped
    /// comes after its first pause, which removes the dead writer's file, and the writer
    /// then waits for the live one ahead.
    #[test]
    fn a_writer_behind_a_dead_queued_writer_not_first_removes_it_after_its_first_pause() {
        let dir = tempfile::tempdir().expect("tempdir");
        let lk = counting_lock(dir.path());
        let status = || lk.status().expect("status");
        let h = lk.write().expect("H");
        let a = Taker::spawn(&lk, None, true);
        wait_for("A queued", || status().pending.len() == 1);
        // D: a queued writer younger than A, whose owner is dead (a pid that exited).
        let sd = open_state(&config(dir.path()), false)
            .expect("open")
            .expect("state directory");
        let dead = {
            let mut child = std::process::Command::new("true").spawn().expect("spawn");
            child.wait().expect("wait");
            child.id()
        };
        let me = sys::identity();
        let mut rec = record_of(&me, &config(dir.path()), Kind::Pending);
        rec.pid = dead;
        let d = LockName::Pending {
            ns: now_ns(),
            uuid: Uuid::new_v4(),
        };
        let _d_file = sd.put(&d, &rec).expect("D").expect("D made");
        let c = Taker::spawn(&lk, None, true);
        wait_for("D removed by C", || !sd.exists(&d));
        wait_for("C queued", || status().pending.len() == 2);
        drop(h);
        in_turn([a, c]);
    }

    /// A writer waiting for a reader to leave (W5, on the directory's watch) sleeps
    /// between its looks: the first such wait of the process widens the directory's
    /// watch and looks once more (W5 lists without `Subscription::forget`, and a wait
    /// that took that listing for one made before the widening would widen and look
    /// again for ever), then pauses as the back-off says.
    #[test]
    fn a_writer_waiting_for_readers_sleeps_between_looks() {
        let dir = tempfile::tempdir().expect("tempdir");
        let lk = counting_lock(dir.path());
        let r = lk.read().expect("R");
        let w_counters = Counters::default();
        let w = Taker::spawn(&lk, Some(&w_counters), true);
        wait_for("W inside W5", || {
            lk.status().expect("status").writer.is_some()
        });
        std::thread::sleep(Duration::from_millis(500));
        let listings = w_counters.listings();
        drop(r);
        w.granted();
        w.release();
        // Pauses of 1, 2, 4, ... up to 100 ms (± 50 %): about ten looks in 500 ms.
        assert!(
            listings <= 30,
            "W listed the directory {listings} times in 500 ms while a reader held"
        );
    }

    /// A `.master_lock` made after a long wait is made now: its mtime (what judges by
    /// lease go by) and its record's `since` are those of its creation, not of the spare
    /// the wait prepared. V8 gives a writer's `.master_lock` record its queue file's nonce
    /// for the whole wait, so a spare written at the start of the wait has the nonce of
    /// the record made at the wake-up; it must still be written again. Before, it was
    /// linked as it was: B, which waited 1 s (its waits covered by events, so no pause
    /// wrote the spare again), made a `.master_lock` 1 s old, and a judge by lease with a
    /// shorter lease broke it while B waited for readers (W6 then said `LockLost`).
    #[test]
    fn a_master_lock_made_after_a_long_wait_is_fresh() {
        let dir = tempfile::tempdir().expect("tempdir");
        let lk = counting_lock(dir.path());
        let x = lk.write().expect("X");
        let counters = Counters::default();
        let b = Taker::spawn(&lk, Some(&counters), true);
        wait_for("B queued", || {
            !lk.status().expect("status").pending.is_empty()
        });
        // B sleeps on without a look (its spare is not written again) ...
        counters.settled();
        // ... for a while: the wait whose length must not show in B's `.master_lock`.
        std::thread::sleep(Duration::from_secs(1));
        // With a coarse-clock margin: a file's mtime may lag the clock by a tick.
        let before = std::time::SystemTime::now() - Duration::from_millis(50);
        // X becomes a reader: B makes `.master_lock` and waits for X to leave (W5).
        let r = x.downgrade().expect("downgrade");
        let master = dir.path().join(".rwdir/.master_lock");
        wait_for("B's .master_lock", || master.exists());
        let mtime = std::fs::metadata(&master)
            .and_then(|m| m.modified())
            .expect("mtime");
        let since = lk
            .status()
            .expect("status")
            .writer
            .and_then(|e| e.holder)
            .map(|h| h.since_ns)
            .expect("B's record");
        drop(r);
        b.granted();
        b.release();
        let ns = |t: std::time::SystemTime| t.duration_since(UNIX_EPOCH).expect("time").as_nanos();
        assert!(
            mtime >= before,
            ".master_lock was born {:?} before B made it",
            before.duration_since(mtime).unwrap_or_default()
        );
        assert!(
            u128::from(since) >= ns(before),
            "its record's since is {} ms before B made it",
            (ns(before) - u128::from(since)) / 1_000_000
        );
    }

    /// V8 and V10 (docs/protocol-notes.md): a reader queued behind a waiting writer W
    /// sleeps through W's grant and hold (W keeps its pending file), and, woken when W
    /// leaves, announces at once: from the holder's release to its own grant it lists
    /// the directory once (R3), not three times (R1 at W's grant, R1 and R3 at W's
    /// release).
    #[test]
    fn a_reader_behind_a_writer_wakes_once_and_lists_once() {
        let dir = tempfile::tempdir().expect("tempdir");
        let lk = counting_lock(dir.path());
        let x = lk.write().expect("X");
        let w = Taker::spawn(&lk, None, true);
        wait_for("W queued", || {
            !lk.status().expect("status").pending.is_empty()
        });
        let r_counters = Counters::default();
        let r = Taker::spawn(&lk, Some(&r_counters), false);
        let before = r_counters.settled();
        let lookups = r_counters.lookups();
        drop(x);
        w.granted();
        // W holds for a while: R's wake-up at W's grant, if any, comes within a few ms.
        std::thread::sleep(Duration::from_millis(300));
        let during = r_counters.listings() - before;
        w.release();
        let at_grant = r.granted();
        r.release();
        assert_eq!(
            during, 0,
            "R listed the directory during W's grant and hold"
        );
        assert_eq!(at_grant - before, 1, "R's listings up to its grant (1: R3)");
        // Woken by the deletion of W's pending file (a quiet wait, `notify`), R knows
        // it is gone without looking its name up.
        assert_eq!(
            r_counters.lookups() - lookups,
            0,
            "R looked up W's file after the wake-up"
        );
    }

    /// The grant touches `.master_lock` only if the file was made a while ago (W6): not
    /// for a write that did not wait (its file was made a moment before), but for one
    /// that waited for a reader longer than an eighth of a heartbeat period.
    #[test]
    fn the_grant_touches_master_only_if_it_was_made_a_while_ago() {
        use crate::fsops::TOUCHES;
        let dir = tempfile::tempdir().expect("tempdir");
        // A period of 10 s: a grant within 1.25 s of the file's creation skips the touch
        // (however slow the machine, an uncontended write takes less), and no renewal is
        // due while the writer below waits.
        let lk = crate::DirLock::builder(dir.path())
            .lease(Duration::from_secs(30))
            .poll_interval(Duration::from_millis(1), Duration::from_millis(20))
            .build()
            .expect("lock");
        let touches = || TOUCHES.with(std::cell::Cell::get);
        let before = touches();
        drop(lk.write().expect("write"));
        assert_eq!(
            touches() - before,
            0,
            "a write that did not wait touched its file"
        );
        let (held_tx, held_rx) = crossbeam_channel::bounded(0);
        let before = std::thread::scope(|s| {
            let lk = &lk;
            s.spawn(move || {
                let r = lk.read().expect("read");
                held_tx.send(()).expect("send");
                // Longer than 1.25 s, shorter than the period.
                std::thread::sleep(Duration::from_secs(2));
                drop(r);
            });
            held_rx.recv().expect("the reader holds");
            let before = touches();
            drop(lk.write().expect("write behind the reader"));
            before
        });
        assert_eq!(
            touches() - before,
            1,
            "a write that waited 2 s: one touch, the grant's"
        );
    }

    /// The listings this thread makes while `f` runs.
    /// Tasks whose waits events cover (the one file each waits for, its owner this
    /// process) sleep on without listing, as covered blocking waits do: 50 async writers
    /// queued behind a held lock list the directory a few times each at first, then not
    /// at all. Without it each listed at every pause that ran out (up to 2 s here), and
    /// 1,000 waiting tasks, each listing the 1,000 queue files, kept half a core busy.
    #[cfg(feature = "tokio")]
    #[test]
    fn queued_tasks_sleep_without_listing() {
        use crate::fsops::LISTINGS;
        let dir = tempfile::tempdir().expect("tempdir");
        let lk = counting_lock(dir.path());
        let held = lk.write().expect("write");
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime");
        let state = dir.path().join(".rwdir");
        let queued = || {
            std::fs::read_dir(&state)
                .expect("state directory")
                .filter(|e| {
                    e.as_ref()
                        .is_ok_and(|e| e.file_name().to_string_lossy().starts_with(".pending"))
                })
                .count()
        };
        let before = queued();
        let tasks = rt.block_on(async {
            let mut tasks = Vec::new();
            for i in 1..=50 {
                let l = lk.clone();
                tasks.push(tokio::spawn(async move {
                    drop(l.write_async().await.expect("write_async"));
                }));
                let end = Instant::now() + Duration::from_secs(20);
                while queued() < before + i {
                    assert!(Instant::now() < end, "writer {i} never queued");
                    tokio::task::yield_now().await;
                }
            }
            // Past their first, looking pauses (1 + 2 + 4 + 8 ms).
            tokio::time::sleep(Duration::from_millis(300)).await;
            let start = LISTINGS.with(std::cell::Cell::get);
            tokio::time::sleep(Duration::from_secs(2)).await;
            let listed = LISTINGS.with(std::cell::Cell::get) - start;
            assert!(listed < 10, "50 waiting tasks listed {listed} times in 2 s");
            tasks
        });
        drop(held);
        rt.block_on(async {
            for t in tasks {
                t.await.expect("task");
            }
        });
    }

    fn listings<T>(f: impl FnOnce() -> T) -> (T, usize) {
        use crate::fsops::LISTINGS;
        let before = LISTINGS.with(std::cell::Cell::get);
        let t = f();
        (t, LISTINGS.with(std::cell::Cell::get) - before)
    }

    /// V7 (docs/protocol-notes.md): a read through a handle whose last read found the
    /// directory free announces itself at once and lists the directory once (R3), not
    /// twice (R1, R3). A writer in the way still keeps it out: its R3 sees the writer, it
    /// withdraws its marker and looks again from R1, and the hint is gone until a read
    /// finds the directory free again.
    #[test]
    fn a_read_after_a_free_read_lists_once() {
        let dir = tempfile::tempdir().expect("tempdir");
        let cfg = config(dir.path());
        let sd = open_state(&cfg, true).expect("open").expect("state dir");
        let read_once = || read(&sd, &cfg, Deadline::Once);
        let release = |own: Own| sd.unlink(&own.close()).expect("release");
        let (own, n) = listings(read_once);
        release(own.expect("first read"));
        assert_eq!(n, 2, "R1 and R3 without the hint");
        let (own, n) = listings(read_once);
        release(own.expect("read"));
        assert_eq!(n, 1, "R3 alone with the hint");

        // A writer holds (a `.master_lock` of ours counts as held by a live owner).
        let at = Attempt::new(&sd, &cfg, Deadline::Once, Kind::Write, Mode::Blocking);
        let master = at
            .put(LockName::Master, Kind::Write)
            .expect("put")
            .expect("master");
        let (r, hinted) = listings(read_once);
        assert!(matches!(r, Err(Error::WouldBlock { .. })), "{r:?}");
        assert!(
            sd.list().expect("list").slaves.is_empty(),
            "the marker was withdrawn"
        );
        let (r, plain) = listings(read_once);
        assert!(matches!(r, Err(Error::WouldBlock { .. })), "{r:?}");
        assert_eq!(
            hinted,
            plain + 1,
            "the hinted read: R3, then the plain read's looks"
        );
        sd.unlink(&master.close()).expect("unlink master");
        let (own, n) = listings(read_once);
        release(own.expect("read"));
        assert_eq!(n, 2, "R1 and R3 after a refused read");
    }

    /// V7 needs R3's listing to be one snapshot (one `getdents64` call): with a state
    /// directory too big for one call, a hinted read withdraws after R3, looks again from
    /// R1, and gets in.
    #[test]
    fn a_hinted_read_of_a_big_state_directory_looks_again() {
        let dir = tempfile::tempdir().expect("tempdir");
        let cfg = config(dir.path());
        let sd = open_state(&cfg, true).expect("open").expect("state dir");
        let own = read(&sd, &cfg, Deadline::Once).expect("first read");
        sd.unlink(&own.close()).expect("release");
        let state = dir.path().join(".rwdir");
        for i in 0..2000 {
            // Foreign names: ignored by the protocol, but the listing takes several calls.
            std::fs::write(
                state.join(format!("foreign-file-with-a-long-name-{i:05}")),
                b"",
            )
            .expect("plant");
        }
        assert!(!sd.list().expect("list").snapshot);
        let (own, n) = listings(|| read(&sd, &cfg, Deadline::Once));
        sd.unlink(&own.expect("read").close()).expect("release");
        assert_eq!(n, 3, "R3 (not one snapshot), then R1 and R3");
        assert!(sd.list().expect("list").slaves.is_empty());
        // Such an R3 does not arm the hint: the next read looks first, and announces once.
        let (own, n) = listings(|| read(&sd, &cfg, Deadline::Once));
        sd.unlink(&own.expect("read").close()).expect("release");
        assert_eq!(n, 2, "R1 and R3");
    }

    /// Grants that completed since the listing a hint comes from make it stale; the
    /// token must still come out above every existing one.
    #[test]
    fn a_stale_token_hint_is_corrected_upwards() {
        let dir = tempfile::tempdir().expect("tempdir");
        let cfg = config(dir.path());
        let sd = open_state(&cfg, true).expect("open").expect("state dir");
        // A later grant took token 9 and removed the lower ones.
        let at = Attempt::new(&sd, &cfg, Deadline::Once, Kind::Write, Mode::Blocking);
        assert!(
            at.put(LockName::Token(9), Kind::Token)
                .expect("put")
                .is_some()
        );
        let renames = sd.renames_tokens();
        // With a hint from before it (3): a token made by `put` succeeds at 4 (not
        // fresh); a rename of 3, which is gone, sends T1 to a fresh listing: 10.
        let (first, fresh) =
            allocate_token(&at, Some((3, true)), &mut Vec::new()).expect("allocate");
        assert_eq!(
            (first, fresh),
            if renames { (10, true) } else { (4, false) }
        );
        // A whole write with a stale hint whose token exists (a planted 4, or the one
        // just made): T2 makes 5 (by put or by renaming 4, not fresh), W5 sees the
        // higher token and allocates again from a fresh listing.
        if renames {
            assert!(
                at.put(LockName::Token(4), Kind::Token)
                    .expect("put")
                    .is_some()
            );
        }
        // W1 and W2 by hand, then W5-W6, and the token (V14) from the stale hint.
        let mut writer = Attempt::new(&sd, &cfg, Deadline::Once, Kind::Write, Mode::Blocking);
        let pending = queue(&writer).expect("queue");
        let master = writer
            .put(LockName::Master, Kind::Write)
            .expect("put")
            .expect(".master_lock is free");
        let (own, _) = block_on(pin!(enter(&mut writer, master, Some(pending)))).expect("enter");
        let token = grant_token(&sd, &cfg, (4, true), || Ok(()), &mut Vec::new()).expect("token");
        assert_eq!(token, if renames { 11 } else { 10 });
        // T4 removed the lower tokens, the stale one included.
        assert_eq!(sd.list().expect("list").tokens, vec![token]);
        drop(own);
        // Fresh allocation: above everything.
        assert_eq!(
            allocate_token(&at, None, &mut Vec::new()).expect("allocate"),
            (token + 1, true)
        );
        // A rename never replaces: with the next number taken, T1 looks again.
        if renames {
            assert!(
                at.put(LockName::Token(token + 3), Kind::Token)
                    .expect("put")
                    .is_some()
            );
            assert!(
                at.put(LockName::Token(token + 2), Kind::Token)
                    .expect("put")
                    .is_some()
            );
            assert_eq!(
                allocate_token(&at, Some((token + 1, true)), &mut Vec::new()).expect("allocate"),
                (token + 4, true)
            );
            let left = vec![token + 1, token + 2, token + 4];
            assert_eq!(
                sd.list().expect("list").tokens,
                left,
                "lower ones are left to T4"
            );
        }
    }
}
