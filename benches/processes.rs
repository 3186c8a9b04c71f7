//! Multi-process scenarios (BENCHMARKS.md, tables 3–8): every case runs `rwdir` and
//! std's `File::lock`/`File::lock_shared` (flock) the same way, in interleaved rounds,
//! at tmpfs and at the default temp directory, and prints markdown tables with the
//! ratios and the targets of issues #5 and #14.
//!
//! Scenarios (pick some by name as arguments; default all): `handoff`, `contention`,
//! `starvation`, `cpu`, `herd`, `command`, and `wake`, a reference rather than a
//! comparison: the bare kernel wake-up across processes (flock(2), inotify read by the
//! woken thread, inotify through a relay thread) that a hand-off rests on, with no lock
//! library at all. `RWDIR_BENCH_QUICK=1` makes a short smoke run.
//!
//! `contention` also runs the seed design (the `GlobalDirectoryLock` of the Q&A thread
//! rwdir grew from, ported to Rust step by step with its 1 ms polling: `Lock::Seed`),
//! which issue #14 compares rwdir with at N=8, and prints that ratio and N=8 / N=2.
//!
//! `herd` is issue #14's "64 waiters": a holder process takes the write lock, then 1
//! writer and 63 reader processes (each warmed up by one uncontended acquire+release)
//! ask for it, the writer first: the readers ask only once it is queued (rwdir: its
//! `.pending_lock-*` file, naming its pid, exists; flock: `/proc/locks` lists it as
//! blocked). Once all 64 have answered `entering` and all their threads are seen asleep,
//! the holder holds 5 s (1 s quick) while the CPU of the 64 is summed from every
//! thread's `/proc/<pid>/task/<tid>/schedstat` (ns; `/proc/<pid>/stat` ticks as a
//! check). Then the holder releases; the writer takes the lock and releases at once
//! (hold 0), stamping its release; each reader stamps its grant and keeps its lock. No
//! waiter answers until the coordinator asks, a fixed time after the release (a pause
//! for quiet, not a readiness signal: a late answer still comes), so that nothing wakes
//! the coordinator while the herd goes in. Reported: last and median reader in after
//! the writer's release (the target, ≤ 5 ms at tmpfs), the writer's and the last
//! reader's times after the holder's release, readers that got in before the writer,
//! the waiters' CPU (target < 1 % of one core), and how many waiters had an inotify
//! descriptor (fewer means polling). 5 rounds (1 quick) per cell, cells shuffled.
//!
//! Workers are this binary run again with `RWDIR_BENCH_ROLE` set. The coordinator talks
//! to each over its stdin/stdout, one line per command and per answer; readiness is
//! always an answer on that pipe, never a sleep. Time stamps are `CLOCK_MONOTONIC`,
//! which every process of the host shares.

#![allow(clippy::disallowed_methods)]

#[path = "../tests/cli/bin.rs"]
mod bin;
mod common;
#[path = "../tests/common/tasks.rs"]
mod tasks;

use std::fs::File;
use std::os::fd::AsFd;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::workers::{DIR_ENV, KIND_ENV, LONG, Pipe, ROLE_ENV, Worker, arg, env};
use common::{Loc, Rng, Table, Target, dur, mono_ns, quick};
use nix::errno::Errno;
use nix::poll::{PollFd, PollFlags, ppoll};
use nix::sys::inotify::{AddWatchFlags, InitFlags, Inotify};
use rwdir::{DirLock, ReadGuard, WriteGuard};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Impl {
    Rwdir,
    Flock,
    /// The seed design (`GlobalDirectoryLock` in the Q&A thread rwdir grew from),
    /// ported to Rust step by step: see [`Lock::Seed`]. In the contended-writers
    /// scenario only, which issue #14 compares with it.
    Seed,
}

impl Impl {
    const ALL: [Impl; 2] = [Impl::Rwdir, Impl::Flock];

    fn name(self) -> &'static str {
        match self {
            Impl::Rwdir => "rwdir",
            Impl::Flock => "std flock",
            Impl::Seed => "seed design (Rust port, 1 ms polling)",
        }
    }

    fn parse(s: &str) -> Impl {
        match s {
            "rwdir" => Impl::Rwdir,
            "seed" => Impl::Seed,
            _ => Impl::Flock,
        }
    }

    fn key(self) -> &'static str {
        match self {
            Impl::Rwdir => "rwdir",
            Impl::Flock => "flock",
            Impl::Seed => "seed",
        }
    }
}

// =================================================================================
// Worker side

/// A lock as a worker takes it.
enum Lock {
    Rwdir(DirLock),
    /// std `File::lock` on `DIR/flock-file`, opened for every acquisition (as
    /// `open+flock / unlock+close`).
    Flock(PathBuf),
    /// The seed design on `DIR` (its files live in `DIR` itself), as the Python code
    /// does it: a master creates `.pending_lock-<uuid>-<ns>`, polls every 1 ms (each
    /// poll a listing) until no `.master_lock*` exists and no pending file is older
    /// than its own, creates `.master_lock-<uuid>`, removes its pending file, and polls
    /// until no `.slave_lock*` is left; a slave polls until no master and no pending
    /// file exists, then creates `.slave_lock-<uuid>`. No liveness, no fencing.
    Seed(PathBuf),
}

enum Guard {
    Read(ReadGuard),
    Write(WriteGuard),
    File(File),
    /// The seed design's file to remove at the release.
    Seed(PathBuf),
}

/// The seed design's poll interval (`WAIT_TIME = 0.001`).
const SEED_WAIT: Duration = Duration::from_millis(1);

/// Whether any name in `dir` starts with `prefix` (the seed's `re.search("^...")`).
fn seed_any(dir: &Path, prefix: &str) -> bool {
    std::fs::read_dir(dir)
        .expect("list")
        .flatten()
        .any(|e| e.file_name().to_string_lossy().starts_with(prefix))
}

/// The seed's `__is_next_master`: no pending file older than ours (`ns`, then uuid).
fn seed_is_next(dir: &Path, ns: u128, uuid: u128) -> bool {
    for e in std::fs::read_dir(dir).expect("list").flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        let Some(rest) = name.strip_prefix(".pending_lock-") else {
            continue;
        };
        let Some((u, t)) = rest.split_once('-') else {
            continue;
        };
        let (Ok(u), Ok(t)) = (u128::from_str_radix(u, 16), t.parse::<u128>()) else {
            continue;
        };
        if t < ns {
            return false;
        }
        if u != uuid && t == ns {
            return u > uuid;
        }
    }
    true
}

/// Polls (1 ms) while `busy`; `false` if `deadline` came first.
fn seed_wait(deadline: Option<Instant>, mut busy: impl FnMut() -> bool) -> bool {
    while busy() {
        if deadline.is_some_and(|d| Instant::now() >= d) {
            return false;
        }
        std::thread::sleep(SEED_WAIT);
    }
    true
}

/// The seed design's acquisition (see [`Lock::Seed`]); `None` if `deadline` came first
/// (its files are then removed).
fn seed_acquire(dir: &Path, exclusive: bool, deadline: Option<Instant>) -> Option<Guard> {
    let uuid = uuid::Uuid::new_v4().as_u128();
    if !exclusive {
        if !seed_wait(deadline, || {
            seed_any(dir, ".master_lock") || seed_any(dir, ".pending_lock")
        }) {
            return None;
        }
        let slave = dir.join(format!(".slave_lock-{uuid:032x}"));
        File::create(&slave).expect("create slave");
        return Some(Guard::Seed(slave));
    }
    let ns = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("clock")
        .as_nanos();
    let pending = dir.join(format!(".pending_lock-{uuid:032x}-{ns}"));
    let master = dir.join(format!(".master_lock-{uuid:032x}"));
    File::create(&pending).expect("create pending");
    if !seed_wait(deadline, || {
        seed_any(dir, ".master_lock") || !seed_is_next(dir, ns, uuid)
    }) {
        let _ = std::fs::remove_file(&pending);
        return None;
    }
    File::create_new(&master).expect("create master");
    std::fs::remove_file(&pending).expect("remove pending");
    if !seed_wait(deadline, || seed_any(dir, ".slave_lock")) {
        let _ = std::fs::remove_file(&master);
        return None;
    }
    Some(Guard::Seed(master))
}

impl Lock {
    fn open(imp: Impl, dir: &Path) -> Lock {
        match imp {
            Impl::Rwdir => Lock::Rwdir(DirLock::new(dir).expect("DirLock::new")),
            Impl::Flock => Lock::Flock(dir.join("flock-file")),
            Impl::Seed => Lock::Seed(dir.to_path_buf()),
        }
    }

    fn acquire(&self, exclusive: bool) -> Guard {
        self.acquire_until(exclusive, None)
            .expect("an acquisition without deadline")
    }

    /// `None` when the deadline passed first. flock has no deadline: it waits.
    fn acquire_until(&self, exclusive: bool, deadline: Option<Instant>) -> Option<Guard> {
        match self {
            Lock::Rwdir(l) => {
                let r = match (exclusive, deadline) {
                    (true, None) => l.write().map(Guard::Write),
                    (true, Some(d)) => l.try_write_until(d).map(Guard::Write),
                    (false, None) => l.read().map(Guard::Read),
                    (false, Some(d)) => l.try_read_until(d).map(Guard::Read),
                };
                match r {
                    Ok(g) => Some(g),
                    Err(rwdir::Error::TimedOut { .. }) => None,
                    Err(e) => panic!("rwdir acquisition failed: {e}"),
                }
            }
            Lock::Flock(path) => {
                let f = File::options()
                    .read(true)
                    .write(true)
                    .create(true)
                    .truncate(false)
                    .open(path)
                    .expect("open flock file");
                if exclusive {
                    f.lock().expect("lock");
                } else {
                    f.lock_shared().expect("lock_shared");
                }
                Some(Guard::File(f))
            }
            Lock::Seed(dir) => seed_acquire(dir, exclusive, deadline),
        }
    }
}

impl Guard {
    fn release(self) {
        match self {
            Guard::Read(g) => g.release().expect("release"),
            Guard::Write(g) => g.release().expect("release"),
            Guard::File(f) => {
                f.unlock().expect("unlock");
                drop(f);
            }
            Guard::Seed(path) => std::fs::remove_file(path).expect("remove"),
        }
    }
}

/// One cell per location and kind, the locations outermost.
fn per_location<K: Copy, C>(kinds: &[K], mut make: impl FnMut(Loc, K) -> C) -> Vec<C> {
    Loc::available()
        .into_iter()
        .flat_map(|loc| kinds.iter().map(move |&k| (loc, k)))
        .map(|(loc, k)| make(loc, k))
        .collect()
}

fn worker(role: &str) {
    let imp = Impl::parse(&env(KIND_ENV));
    let dir = PathBuf::from(env(DIR_ENV));
    // The `wake` roles use no lock, only the kernel mechanisms themselves.
    match role {
        "wake-holder" => return worker_wake_holder(Mech::from_code(arg(0)), &dir),
        "wake-waiter" => return worker_wake_waiter(Mech::from_code(arg(0)), &dir),
        _ => {}
    }
    let lock = Lock::open(imp, &dir);
    let pipe = Pipe::new();
    match role {
        "handoff" => worker_handoff(&lock, &pipe),
        "writer" => worker_writer(&lock, &pipe, &dir),
        "reader" => worker_reader(&lock, &pipe),
        "late-writer" => worker_late_writer(&lock, &pipe),
        "cpu-waiter" => worker_cpu_waiter(&lock, &pipe),
        "herd" => worker_herd(&lock, &pipe),
        _ => panic!("unknown role {role}"),
    }
}

/// `acquire X|S` → `entering <t>`, then `got <t>` once it holds the lock;
/// `release <hold_us>` → sleeps `hold_us`, stamps `t`, releases, `released <t>`;
/// `handoff <hold_us>` does the same but answers nothing until `when` asks for `t`, so
/// that no answer wakes the coordinator while the waiter takes over.
fn worker_handoff(lock: &Lock, pipe: &Pipe) {
    let mut held = None;
    let mut last = 0;
    while let Some(cmd) = pipe.next() {
        let mut it = cmd.split_whitespace();
        match it.next() {
            Some("acquire") => {
                let exclusive = it.next() == Some("X");
                let t = mono_ns();
                pipe.say(&format!("entering {t}"));
                held = Some(lock.acquire(exclusive));
                let t = mono_ns();
                pipe.say(&format!("got {t}"));
            }
            Some(word @ ("release" | "handoff")) => {
                let hold: u64 = it.next().and_then(|s| s.parse().ok()).unwrap_or(0);
                std::thread::sleep(Duration::from_micros(hold));
                let t = mono_ns();
                if let Some(g) = held.take() {
                    g.release();
                }
                last = t;
                if word == "release" {
                    pipe.say(&format!("released {t}"));
                }
            }
            Some("when") => pipe.say(&format!("released {last}")),
            _ => panic!("handoff: bad command {cmd:?}"),
        }
    }
}

/// Contention: after `go`, loops acquire → increment a counter in a shared file →
/// release, for ARG[0] ms; then `done <grants> <longest wait ns> <first grant ns>`.
fn worker_writer(lock: &Lock, pipe: &Pipe, dir: &Path) {
    let run = Duration::from_millis(arg(0));
    let counter = File::options()
        .read(true)
        .write(true)
        .open(dir.join("counter"))
        .expect("open counter");
    // Warm up: the state directory, the inotify watch and the heartbeat thread.
    lock.acquire(true).release();
    pipe.say("ready");
    assert_eq!(pipe.next().as_deref(), Some("go"));
    let start = Instant::now();
    let deadline = start + run;
    let (mut grants, mut longest) = (0u64, Duration::ZERO);
    loop {
        let asked = Instant::now();
        let Some(g) = lock.acquire_until(true, Some(deadline)) else {
            longest = longest.max(deadline.saturating_duration_since(asked));
            break;
        };
        let now = Instant::now();
        longest = longest.max(now.min(deadline) - asked);
        if now >= deadline {
            g.release();
            break;
        }
        let mut buf = [0u8; 8];
        counter.read_exact_at(&mut buf, 0).expect("read counter");
        let n = u64::from_le_bytes(buf) + 1;
        counter
            .write_all_at(&n.to_le_bytes(), 0)
            .expect("write counter");
        grants += 1;
        g.release();
    }
    pipe.say(&format!("done {grants} {}", longest.as_nanos()));
    while pipe.next().is_some() {}
}

/// Starvation reader: after `go`, sleeps ARG[1] µs, then loops take a shared lock →
/// hold ARG[0] µs → release until `stop`; then `done <grants>`.
fn worker_reader(lock: &Lock, pipe: &Pipe) {
    let hold = Duration::from_micros(arg(0));
    let offset = Duration::from_micros(arg(1));
    lock.acquire(false).release();
    pipe.say("ready");
    assert_eq!(pipe.next().as_deref(), Some("go"));
    std::thread::sleep(offset);
    let mut grants = 0u64;
    loop {
        if let Some(cmd) = pipe.try_next() {
            assert_eq!(cmd, "stop");
            break;
        }
        let g = lock.acquire(false);
        std::thread::sleep(hold);
        g.release();
        grants += 1;
    }
    pipe.say(&format!("done {grants}"));
    while pipe.next().is_some() {}
}

/// Starvation writer: after `go`, sleeps ARG[0] ms, asks for the write lock, and says
/// `waited <ns>` once granted; releases at once.
fn worker_late_writer(lock: &Lock, pipe: &Pipe) {
    let arrive = Duration::from_millis(arg(0));
    lock.acquire(true).release();
    pipe.say("ready");
    assert_eq!(pipe.next().as_deref(), Some("go"));
    std::thread::sleep(arrive);
    let t = Instant::now();
    let g = lock.acquire(true);
    let waited = t.elapsed();
    g.release();
    pipe.say(&format!("waited {}", waited.as_nanos()));
    while pipe.next().is_some() {}
}

/// `acquire X|S` → `entering`, blocks, then `got <wall ns> <cpu ns>`: the wall time of
/// the wait and the CPU time this whole process (every thread) used meanwhile.
fn worker_cpu_waiter(lock: &Lock, pipe: &Pipe) {
    // Made before the measured wait: the process's one-time set-up is not waiting.
    let _ = rwdir::DirLock::new(std::env::temp_dir());
    pipe.say("ready");
    let cmd = pipe.next().expect("a command");
    let exclusive = cmd == "acquire X";
    let (t0, c0) = (mono_ns(), common::process_cpu_ns());
    pipe.say("entering");
    let g = lock.acquire(exclusive);
    let (t1, c1) = (mono_ns(), common::process_cpu_ns());
    pipe.say(&format!("got {} {}", t1 - t0, c1 - c0));
    while pipe.next().is_some() {}
    g.release();
}

/// A waiter of the `herd` scenario. `warm X|S` → takes and releases the lock once,
/// then `warm`. `acquire X|S` → `entering` right before it asks, then blocks; once
/// granted it stamps t_in; a writer (`X`) then stamps t_out and releases at once, a
/// reader keeps its lock. It answers nothing until `when` asks (`in <t_in> <t_out>`,
/// t_out 0 for a reader), so that no answer wakes the coordinator while the herd goes
/// in. `release` → releases what it still holds, then `released`.
fn worker_herd(lock: &Lock, pipe: &Pipe) {
    let mut held = None;
    let mut last = (0, 0);
    while let Some(cmd) = pipe.next() {
        let exclusive = cmd.ends_with(" X");
        match cmd.as_str() {
            "warm X" | "warm S" => {
                lock.acquire(exclusive).release();
                pipe.say("warm");
            }
            "acquire X" | "acquire S" => {
                pipe.say("entering");
                let g = lock.acquire(exclusive);
                let t_in = mono_ns();
                if exclusive {
                    let t_out = mono_ns();
                    g.release();
                    last = (t_in, t_out);
                } else {
                    held = Some(g);
                    last = (t_in, 0);
                }
            }
            "when" => pipe.say(&format!("in {} {}", last.0, last.1)),
            "release" => {
                if let Some(g) = held.take() {
                    g.release();
                }
                pipe.say("released");
            }
            _ => panic!("herd: bad command {cmd:?}"),
        }
    }
}

/// The kernel mechanisms of the `wake` scenario.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mech {
    /// The waiter blocks in `flock(LOCK_SH)`; the holder closes its `LOCK_EX` descriptor.
    Flock,
    /// The waiter blocks in `ppoll` on its inotify descriptor; the holder unlinks a file.
    Inotify,
    /// As `Inotify`, but a relay thread of the waiter reads the inotify descriptor and
    /// wakes the main thread through a channel.
    Relay,
}

impl Mech {
    const ALL: [Mech; 3] = [Mech::Flock, Mech::Inotify, Mech::Relay];

    fn name(self) -> &'static str {
        match self {
            Mech::Flock => "flock",
            Mech::Inotify => "inotify, direct",
            Mech::Relay => "inotify, via a relay thread",
        }
    }

    fn code(self) -> u64 {
        match self {
            Mech::Flock => 0,
            Mech::Inotify => 1,
            Mech::Relay => 2,
        }
    }

    fn from_code(c: u64) -> Mech {
        match c {
            0 => Mech::Flock,
            1 => Mech::Inotify,
            _ => Mech::Relay,
        }
    }
}

/// The file the holder unlinks for sample `i` (inotify mechanisms).
fn victim(dir: &Path, i: u64) -> PathBuf {
    dir.join(format!("victim-{i}"))
}

/// `arm <i>` → flock: opens `flock-file` and takes `LOCK_EX` on it; inotify: creates
/// `victim-<i>`; then `armed`. `act <wait_us>` → sleeps `wait_us`, stamps t, closes the
/// descriptor / unlinks the file, stamps again, and answers nothing (as `handoff` in
/// `worker_handoff`) until `when` asks: `acted <t> <action ns>`.
fn worker_wake_holder(mech: Mech, dir: &Path) {
    let pipe = Pipe::new();
    let (mut held, mut armed) = (None, None);
    let mut last = (0, 0);
    while let Some(cmd) = pipe.next() {
        let mut it = cmd.split_whitespace();
        let word = it.next();
        let n: Option<u64> = it.next().and_then(|s| s.parse().ok());
        match (word, n) {
            (Some("arm"), Some(i)) => {
                if mech == Mech::Flock {
                    let f = File::open(dir.join("flock-file")).expect("open flock file");
                    f.lock().expect("lock");
                    held = Some(f);
                } else {
                    let p = victim(dir, i);
                    File::create(&p).expect("create victim");
                    armed = Some(p);
                }
                pipe.say("armed");
            }
            (Some("act"), Some(wait_us)) => {
                let (f, p) = (held.take(), armed.take());
                std::thread::sleep(Duration::from_micros(wait_us));
                let t = mono_ns();
                match mech {
                    Mech::Flock => drop(f.expect("armed")),
                    _ => nix::unistd::unlink(p.expect("armed").as_path()).expect("unlink"),
                }
                let t2 = mono_ns();
                last = (t, t2 - t);
            }
            (Some("when"), None) => pipe.say(&format!("acted {} {}", last.0, last.1)),
            _ => panic!("wake-holder: bad command {cmd:?}"),
        }
    }
}

/// Blocks in `ppoll` on `ino` (as rwdir's waiting thread does), stamps right after it
/// returns, then reads the events: the stamp and the `i` of every `victim-<i>` deleted.
fn inotify_wait(ino: &Inotify) -> (u64, Vec<u64>) {
    loop {
        let mut fds = [PollFd::new(ino.as_fd(), PollFlags::POLLIN)];
        match ppoll(&mut fds, None, None) {
            Ok(_) | Err(Errno::EINTR) => {}
            Err(e) => panic!("ppoll: {e}"),
        }
        let t = mono_ns();
        let events = match ino.read_events() {
            Ok(ev) => ev,
            Err(Errno::EAGAIN | Errno::EINTR) => continue,
            Err(e) => panic!("read inotify: {e}"),
        };
        let deleted = events
            .iter()
            .filter(|e| e.mask.contains(AddWatchFlags::IN_DELETE))
            .filter_map(|e| {
                e.name
                    .as_ref()?
                    .to_str()?
                    .strip_prefix("victim-")?
                    .parse()
                    .ok()
            })
            .collect();
        return (t, deleted);
    }
}

/// Sets up (its own descriptor of `flock-file`; its inotify watch on the directory; its
/// relay thread), then `ready`. `wait <i>` → `waiting` right before it blocks, then
/// `woken <t'>` with t' stamped right after the blocking call returned: flock: its
/// `LOCK_SH` was granted (it unlocks again before answering); inotify: the IN_DELETE
/// event of `victim-<i>` (other events are ignored).
fn worker_wake_waiter(mech: Mech, dir: &Path) {
    let pipe = Pipe::new();
    let file = File::open(dir.join("flock-file")).expect("open flock file");
    let watch = || {
        let ino = Inotify::init(InitFlags::IN_CLOEXEC | InitFlags::IN_NONBLOCK).expect("inotify");
        ino.add_watch(dir, AddWatchFlags::IN_DELETE | AddWatchFlags::IN_ONLYDIR)
            .expect("add_watch");
        ino
    };
    let direct = (mech == Mech::Inotify).then(watch);
    let relay = (mech == Mech::Relay).then(|| {
        let ino = watch();
        let (tx, rx) = crossbeam_channel::bounded::<u64>(1);
        std::thread::spawn(move || {
            loop {
                for i in inotify_wait(&ino).1 {
                    let _ = tx.try_send(i);
                }
            }
        });
        rx
    });
    pipe.say("ready");
    while let Some(cmd) = pipe.next() {
        let i: u64 = cmd
            .strip_prefix("wait ")
            .and_then(|s| s.parse().ok())
            .unwrap_or_else(|| panic!("wake-waiter: bad command {cmd:?}"));
        pipe.say("waiting");
        let t = match (mech, &direct, &relay) {
            (Mech::Flock, _, _) => {
                file.lock_shared().expect("lock_shared");
                let t = mono_ns();
                file.unlock().expect("unlock");
                t
            }
            (_, Some(ino), _) => loop {
                let (t, deleted) = inotify_wait(ino);
                if deleted.contains(&i) {
                    break t;
                }
            },
            (_, _, Some(rx)) => loop {
                let got = rx.recv().expect("relay thread");
                let t = mono_ns();
                if got == i {
                    break t;
                }
            },
            _ => unreachable!(),
        };
        pipe.say(&format!("woken {t}"));
    }
}

// =================================================================================
// Coordinator side

fn fresh(loc: Loc) -> tempfile::TempDir {
    let d = loc.fresh_dir();
    File::create(d.path().join("flock-file")).expect("create flock file");
    d
}

// ---------------------------------------------------------------------------------
// Hand-off

/// One series of hand-offs between two processes. `shared`: the waiter asks for a
/// shared lock (the holder always holds the exclusive one). Returns the latencies in
/// ns and the number of samples dropped because the waiter was not yet waiting.
fn handoff_series(imp: Impl, loc: Loc, shared: bool, k: usize, rng: &mut Rng) -> (Vec<f64>, usize) {
    let d = fresh(loc);
    let mut a = Worker::spawn("handoff", imp.key(), d.path(), &[]);
    let mut b = Worker::spawn("handoff", imp.key(), d.path(), &[]);
    a.send("acquire X");
    a.expect("entering");
    a.expect("got");
    // Warm up the waiter's side too: its first acquisition makes its watcher.
    b.send("acquire S");
    let (mut holder, mut waiter) = (&mut a, &mut b);
    waiter.expect("entering");
    holder.send("release 2000");
    holder.expect("released");
    waiter.expect("got");
    waiter.send("release 0");
    waiter.expect("released");
    holder.send("acquire X");
    holder.expect("entering");
    holder.expect("got");
    let (mut samples, mut dropped) = (Vec::with_capacity(k), 0);
    let hold_range = if quick() {
        (2_000, 4_000)
    } else {
        (2_000, 12_000)
    };
    for _ in 0..k {
        waiter.send(if shared { "acquire S" } else { "acquire X" });
        let entering = waiter.expect("entering")[0];
        holder.send(&format!(
            "handoff {}",
            rng.range(hold_range.0, hold_range.1)
        ));
        let t2 = waiter.expect("got")[0];
        holder.send("when");
        let t = holder.expect("released")[0];
        if entering > t {
            dropped += 1;
        } else {
            samples.push(t2.saturating_sub(t) as f64);
        }
        if shared {
            waiter.send("release 0");
            waiter.expect("released");
            waiter.send("acquire X");
            waiter.expect("entering");
            waiter.expect("got");
        }
        std::mem::swap(&mut holder, &mut waiter);
    }
    holder.send("release 0");
    holder.expect("released");
    (samples, dropped)
}

struct HandoffResult {
    imp: Impl,
    loc: Loc,
    shared: bool,
    samples: Vec<f64>,
    round_medians: Vec<f64>,
    dropped: usize,
}

fn handoff(targets: &mut Vec<Target>) {
    let (rounds, k) = if quick() { (1, 15) } else { (5, 50) };
    println!("## Hand-off latency\n");
    println!(
        "A holder stamps t just before releasing; the waiter, blocked in another process, stamps t' when its acquire returns; t' − t. The holder reports t only after the waiter has answered, so that nothing wakes the coordinator during the hand-off. {rounds} rounds × {k} hand-offs per cell, the order of the cells shuffled in every round; the hold time is random in [2 ms, {} ms] so that releases fall at any phase of a polling waiter. Samples where the waiter had not yet asked when the release came are dropped. × flock = median over rounds of (median of the round / flock's median of the same round).\n",
        if quick() { 4 } else { 12 }
    );
    let mut rng = Rng::new();
    let mut cells: Vec<HandoffResult> = Vec::new();
    for &loc in &Loc::available() {
        for imp in Impl::ALL {
            for shared in [false, true] {
                cells.push(HandoffResult {
                    imp,
                    loc,
                    shared,
                    samples: Vec::new(),
                    round_medians: Vec::new(),
                    dropped: 0,
                });
            }
        }
    }
    rng.each_round_shuffled(&mut cells, rounds, |c, rng| {
        let (s, dropped) = handoff_series(c.imp, c.loc, c.shared, k, rng);
        c.round_medians.push(common::median(&s));
        c.samples.extend(s);
        c.dropped += dropped;
    });
    let mut t = Table::new(&[
        "at",
        "lock",
        "hand-off",
        "n",
        "median",
        "p90",
        "p99",
        "max",
        "round medians",
        "× flock (median)",
        "dropped",
    ]);
    for c in &cells {
        let base = cells
            .iter()
            .find(|b| b.loc == c.loc && b.imp == Impl::Flock && b.shared == c.shared)
            .expect("flock cell");
        let ratio = common::median(
            &c.round_medians
                .iter()
                .zip(&base.round_medians)
                .map(|(x, y)| x / y)
                .collect::<Vec<_>>(),
        );
        let p99 = common::quantile(&c.samples, 0.99);
        t.row(vec![
            c.loc.to_string(),
            c.imp.name().into(),
            if c.shared { "X → S" } else { "X → X" }.into(),
            c.samples.len().to_string(),
            dur(common::median(&c.samples)),
            dur(common::quantile(&c.samples, 0.90)),
            dur(p99),
            dur(common::max(&c.samples)),
            format!(
                "{}–{}",
                dur(common::min(&c.round_medians)),
                dur(common::max(&c.round_medians))
            ),
            common::times(ratio),
            c.dropped.to_string(),
        ]);
        if c.loc == Loc::Tmpfs && c.imp == Impl::Rwdir {
            let what = if c.shared { "X → S" } else { "X → X" };
            targets.push(Target {
                what: format!("hand-off {what}: median / flock's"),
                target: "≤ 4×".into(),
                measured: common::times(ratio),
                met: Some(ratio <= 4.0),
            });
            targets.push(Target {
                what: format!("hand-off {what}: p99"),
                target: "≤ 2 ms".into(),
                measured: dur(p99),
                met: Some(p99 <= 2e6),
            });
        }
    }
    t.print();
}

// ---------------------------------------------------------------------------------
// Contention

struct ContendResult {
    grants: Vec<u64>,
    longest_ns: u64,
    lost: i64,
}

fn contend_once(imp: Impl, loc: Loc, n: usize, run: Duration) -> ContendResult {
    let d = fresh(loc);
    std::fs::write(d.path().join("counter"), 0u64.to_le_bytes()).expect("counter");
    let mut ws: Vec<Worker> = (0..n)
        .map(|_| Worker::spawn("writer", imp.key(), d.path(), &[run.as_millis() as u64]))
        .collect();
    for w in &ws {
        w.expect("ready");
    }
    for w in &mut ws {
        w.send("go");
    }
    let (mut grants, mut longest) = (Vec::new(), 0u64);
    for w in &ws {
        let v = w.expect("done");
        grants.push(v[0]);
        longest = longest.max(v[1]);
    }
    drop(ws);
    let bytes = std::fs::read(d.path().join("counter")).expect("read counter");
    let counted = u64::from_le_bytes(bytes[..8].try_into().expect("8 bytes"));
    let total: u64 = grants.iter().sum();
    ContendResult {
        grants,
        longest_ns: longest,
        lost: total as i64 - counted as i64,
    }
}

fn jain(x: &[u64]) -> f64 {
    let s: f64 = x.iter().map(|&v| v as f64).sum();
    let s2: f64 = x.iter().map(|&v| (v as f64) * (v as f64)).sum();
    if s2 == 0.0 {
        return 0.0;
    }
    s * s / (x.len() as f64 * s2)
}

fn contention() {
    let (rounds, run) = if quick() {
        (1, Duration::from_millis(200))
    } else {
        (3, Duration::from_millis(700))
    };
    let ns_list = [2usize, 4, 8];
    println!("## Contended writers\n");
    println!(
        "N writer processes loop acquire → increment a counter in a shared file (pread+pwrite) → release for {} ms; {rounds} rounds, cells shuffled in each. Longest wait: the longest single request-to-grant of any process (a wait cut by the end of the round counts up to that end). min/max: fewest/most grants among the N processes; Jain: (Σx)²/(N·Σx²), 1 = even. lost: increments lost (mutual-exclusion violations) over all rounds.\n",
        run.as_millis()
    );
    struct Cell {
        imp: Impl,
        loc: Loc,
        n: usize,
        rate: Vec<f64>,
        longest: Vec<f64>,
        minmax: Vec<f64>,
        jain: Vec<f64>,
        lost: i64,
    }
    let mut cells = Vec::new();
    for &loc in &Loc::available() {
        for imp in [Impl::Rwdir, Impl::Seed, Impl::Flock] {
            for n in ns_list {
                cells.push(Cell {
                    imp,
                    loc,
                    n,
                    rate: vec![],
                    longest: vec![],
                    minmax: vec![],
                    jain: vec![],
                    lost: 0,
                });
            }
        }
    }
    let mut rng = Rng::new();
    rng.each_round_shuffled(&mut cells, rounds, |c, _| {
        let r = contend_once(c.imp, c.loc, c.n, run);
        let total: u64 = r.grants.iter().sum();
        c.rate.push(total as f64 / run.as_secs_f64());
        c.longest.push(r.longest_ns as f64);
        let (mn, mx) = (
            *r.grants.iter().min().unwrap_or(&0),
            *r.grants.iter().max().unwrap_or(&0),
        );
        c.minmax
            .push(if mx == 0 { 0.0 } else { mn as f64 / mx as f64 });
        c.jain.push(jain(&r.grants));
        c.lost += r.lost;
    });
    let mut t = Table::new(&[
        "at",
        "lock",
        "N",
        "grants/s",
        "longest wait",
        "min/max grants",
        "Jain",
        "lost",
    ]);
    for c in &cells {
        t.row(vec![
            c.loc.to_string(),
            c.imp.name().into(),
            c.n.to_string(),
            common::spread(&c.rate, common::sig3),
            common::spread(&c.longest, dur),
            format!("{:.2}", common::median(&c.minmax)),
            format!("{:.2}", common::median(&c.jain)),
            c.lost.to_string(),
        ]);
    }
    t.print();
    // Issue #14's two ratios, from the medians above.
    let rate = |imp: Impl, loc: Loc, n: usize| {
        cells
            .iter()
            .find(|c| c.imp == imp && c.loc == loc && c.n == n)
            .map(|c| common::median(&c.rate))
    };
    println!("\nIssue #14's targets for contended writers (medians of the rounds above):\n");
    let mut r = Table::new(&[
        "at",
        "rwdir N=8 / rwdir N=2 (≥ 0.8×)",
        "rwdir / seed design at N=8 (≥ 5×)",
    ]);
    for &loc in &Loc::available() {
        let ratio = |a: Option<f64>, b: Option<f64>| match (a, b) {
            (Some(a), Some(b)) if b > 0.0 => format!("{:.2}×", a / b),
            _ => "–".into(),
        };
        r.row(vec![
            loc.to_string(),
            ratio(rate(Impl::Rwdir, loc, 8), rate(Impl::Rwdir, loc, 2)),
            ratio(rate(Impl::Rwdir, loc, 8), rate(Impl::Seed, loc, 8)),
        ]);
    }
    r.print();
    // Lost increments are mutual-exclusion violations: for rwdir and flock a failed
    // benchmark, not a number. The seed design has a known race (two masters: each
    // checks for a master, then creates its own `.master_lock-<uuid>`, and a pending
    // file appears after its timestamp was taken), so its losses are reported.
    let lost: i64 = cells
        .iter()
        .filter(|c| c.imp != Impl::Seed)
        .map(|c| c.lost)
        .sum();
    let seed_lost: i64 = cells
        .iter()
        .filter(|c| c.imp == Impl::Seed)
        .map(|c| c.lost)
        .sum();
    if seed_lost > 0 {
        println!(
            "\nThe seed design lost {seed_lost} increments: two writers held its lock at once (its race, not rwdir's; docs/notes/contention.md)."
        );
    }
    assert_eq!(lost, 0, "contended writers lost {lost} increments");
}

// ---------------------------------------------------------------------------------
// Writer wait under readers

/// One run: 4 readers hold `hold` each, staggered by a quarter hold; a writer arrives
/// after `arrive`. Returns the writer's wait (`None` if it hit `cap`) and the readers'
/// grants per second.
fn starve_once(
    imp: Impl,
    loc: Loc,
    hold: Duration,
    arrive: Duration,
    cap: Duration,
) -> (Option<f64>, f64) {
    let d = fresh(loc);
    let hold_us = hold.as_micros() as u64;
    let mut readers: Vec<Worker> = (0..4u64)
        .map(|i| Worker::spawn("reader", imp.key(), d.path(), &[hold_us, i * hold_us / 4]))
        .collect();
    let mut writer = Worker::spawn(
        "late-writer",
        imp.key(),
        d.path(),
        &[arrive.as_millis() as u64],
    );
    for r in &readers {
        r.expect("ready");
    }
    writer.expect("ready");
    let start = Instant::now();
    for r in &mut readers {
        r.send("go");
    }
    writer.send("go");
    let waited = writer.recv_timeout(arrive + cap).map(|l| {
        l.strip_prefix("waited ")
            .and_then(|x| x.parse::<f64>().ok())
            .expect("waited <ns>")
    });
    let elapsed = start.elapsed();
    for r in &mut readers {
        r.send("stop");
    }
    let grants: u64 = readers.iter().map(|r| r.expect("done")[0]).sum();
    if waited.is_none() {
        // Released once the readers stopped.
        writer.expect("waited");
    }
    (waited, grants as f64 / elapsed.as_secs_f64())
}

fn starvation(targets: &mut Vec<Target>) {
    let hold = Duration::from_millis(5);
    let (runs, arrive, cap) = if quick() {
        (1, Duration::from_millis(100), Duration::from_secs(1))
    } else {
        (5, Duration::from_millis(300), Duration::from_secs(10))
    };
    println!("## Writer wait under 4 readers\n");
    println!(
        "4 reader processes each hold a shared lock {} ms and re-acquire at once, started a quarter hold apart so that their holds overlap; one writer process asks for the exclusive lock {} ms later; its wait from request to grant. Up to {runs} runs per cell, interleaved; the cap is {} s, and a lock that hits the cap twice is not run again.\n",
        hold.as_millis(),
        arrive.as_millis(),
        cap.as_secs()
    );
    struct Cell {
        imp: Impl,
        loc: Loc,
        waits: Vec<Option<f64>>,
        rates: Vec<f64>,
    }
    let mut cells = per_location(&Impl::ALL, |loc, imp| Cell {
        imp,
        loc,
        waits: vec![],
        rates: vec![],
    });
    let mut rng = Rng::new();
    rng.each_round_shuffled(&mut cells, runs, |c, _| {
        if c.waits.iter().filter(|w| w.is_none()).count() >= 2 {
            return;
        }
        let (w, rate) = starve_once(c.imp, c.loc, hold, arrive, cap);
        c.waits.push(w);
        c.rates.push(rate);
    });
    let mut t = Table::new(&[
        "at",
        "lock",
        "writer wait (median)",
        "worst",
        "runs at the cap",
        "each run",
        "reader grants/s",
    ]);
    for c in &cells {
        let capped = c.waits.iter().filter(|w| w.is_none()).count();
        // A capped run counts as the cap (a lower bound) in the median.
        let as_num: Vec<f64> = c
            .waits
            .iter()
            .map(|w| w.unwrap_or(common::ns(cap)))
            .collect();
        let med = common::median(&as_num);
        let show = |w: &Option<f64>| match w {
            Some(x) => dur(*x),
            None => format!("≥ {}", dur(common::ns(cap))),
        };
        let worst = if capped > 0 {
            format!("≥ {}", dur(common::ns(cap)))
        } else {
            dur(common::max(&as_num))
        };
        t.row(vec![
            c.loc.to_string(),
            c.imp.name().into(),
            if capped * 2 > c.waits.len() {
                format!("≥ {}", dur(med))
            } else {
                dur(med)
            },
            worst,
            format!("{capped}/{}", c.waits.len()),
            c.waits.iter().map(show).collect::<Vec<_>>().join(", "),
            common::sig3(common::median(&c.rates)),
        ]);
        if c.loc == Loc::Tmpfs && c.imp == Impl::Rwdir {
            let limit = common::ns(hold) + 2e6;
            targets.push(Target {
                what: "writer wait under 4 readers (median of runs)".into(),
                target: format!("≤ {} (one hold + 2 ms)", dur(limit)),
                measured: format!("{} (worst {})", dur(med), dur(common::max(&as_num))),
                met: Some(capped == 0 && med <= limit),
            });
        }
    }
    t.print();
}

// ---------------------------------------------------------------------------------
// CPU of a blocked waiter

fn cpu(targets: &mut Vec<Target>) {
    let block = if quick() {
        Duration::from_secs(1)
    } else {
        Duration::from_secs(10)
    };
    println!("## CPU used by a blocked waiter\n");
    println!(
        "The coordinator holds the exclusive lock; a waiter process asks for it and stays blocked for {} s; its CPU time (CLOCK_PROCESS_CPUTIME_ID: every thread, user + system) from the request to the grant; /proc/<pid>/stat utime+stime over the same span as a check (10 ms ticks). All waiters wait at the same time, each on its own directory.\n",
        block.as_secs()
    );
    struct W {
        loc: Loc,
        imp: Impl,
        shared: bool,
        worker: Worker,
        _dir: tempfile::TempDir,
        proc0: u64,
    }
    let mut holds: Vec<Box<dyn std::any::Any>> = Vec::new();
    let mut ws = Vec::new();
    for &loc in &Loc::available() {
        for (imp, shared) in [
            (Impl::Rwdir, false),
            (Impl::Rwdir, true),
            (Impl::Flock, false),
        ] {
            let d = fresh(loc);
            match imp {
                Impl::Rwdir => {
                    let l = DirLock::new(d.path()).expect("DirLock::new");
                    holds.push(Box::new(l.write().expect("write")));
                }
                Impl::Flock => {
                    let f = File::open(d.path().join("flock-file")).expect("open");
                    f.lock().expect("lock");
                    holds.push(Box::new(f));
                }
                Impl::Seed => unreachable!("the seed design runs in `contention` only"),
            }
            let worker = Worker::spawn("cpu-waiter", imp.key(), d.path(), &[]);
            ws.push(W {
                loc,
                imp,
                shared,
                worker,
                _dir: d,
                proc0: 0,
            });
        }
    }
    for w in &mut ws {
        w.worker.expect("ready");
    }
    for w in &mut ws {
        w.worker
            .send(if w.shared { "acquire S" } else { "acquire X" });
        w.worker.expect("entering");
        w.proc0 = common::proc_cpu_ns(w.worker.pid()).unwrap_or(0);
    }
    std::thread::sleep(block);
    let proc1: Vec<u64> = ws
        .iter()
        .map(|w| common::proc_cpu_ns(w.worker.pid()).unwrap_or(0))
        .collect();
    drop(holds);
    let mut t = Table::new(&[
        "at",
        "lock",
        "waiter",
        "blocked",
        "CPU (clock)",
        "% of one core",
        "CPU (/proc stat)",
    ]);
    for (w, p1) in ws.iter().zip(proc1) {
        let v = w.worker.expect("got");
        let (wall, cpu) = (v[0] as f64, v[1] as f64);
        let pct = 100.0 * cpu / wall;
        t.row(vec![
            w.loc.to_string(),
            w.imp.name().into(),
            if w.shared { "shared" } else { "exclusive" }.into(),
            dur(wall),
            dur(cpu),
            format!("{pct:.3} %"),
            match p1.saturating_sub(w.proc0) {
                0 => "0 (under one tick)".into(),
                x => dur(x as f64),
            },
        ]);
        if w.loc == Loc::Tmpfs && w.imp == Impl::Rwdir {
            targets.push(Target {
                what: format!(
                    "CPU of a {} waiter blocked {} s",
                    if w.shared { "read" } else { "write" },
                    block.as_secs()
                ),
                target: "< 1 % of one core".into(),
                measured: format!("{pct:.3} % ({})", dur(cpu)),
                met: Some(pct < 1.0),
            });
        }
    }
    t.print();
}

// ---------------------------------------------------------------------------------
// 64 waiters: a queued writer, then a herd of readers

/// The processes of one `herd` round. On a failure path every one is killed at once
/// (a waiter blocked behind the holder reads no EOF); otherwise all get EOF together,
/// then each `Worker`'s drop waits for its exit.
struct Herd {
    holder: Worker,
    writer: Worker,
    readers: Vec<Worker>,
}

impl Herd {
    fn all(&mut self) -> impl Iterator<Item = &mut Worker> {
        [&mut self.holder, &mut self.writer]
            .into_iter()
            .chain(self.readers.iter_mut())
    }
}

impl Drop for Herd {
    fn drop(&mut self) {
        let panicking = std::thread::panicking();
        for w in self.all() {
            if panicking {
                w.kill();
            }
            w.close();
        }
    }
}

/// CPU time of every thread of a process, in ns: the sum of the first field (time on a
/// CPU) of each `/proc/<pid>/task/<tid>/schedstat`. `None` where that is unavailable.
fn threads_cpu_ns(pid: u32) -> Option<u64> {
    let mut sum = 0;
    for t in std::fs::read_dir(format!("/proc/{pid}/task")).ok()? {
        let s = std::fs::read_to_string(t.ok()?.path().join("schedstat")).ok()?;
        sum += s.split_whitespace().next()?.parse::<u64>().ok()?;
    }
    Some(sum)
}

/// Whether a process has an inotify descriptor open.
fn has_inotify(pid: u32) -> bool {
    std::fs::read_dir(format!("/proc/{pid}/fd")).is_ok_and(|fds| {
        fds.flatten().any(|f| {
            std::fs::read_link(f.path()).is_ok_and(|l| l.as_os_str() == "anon_inode:inotify")
        })
    })
}

/// Whether the writer `pid` is queued. rwdir: a `.pending_lock-*` file whose record
/// names `pid` is in `DIR/.rwdir`. flock: `/proc/locks` lists `pid` as blocked (`->`).
fn writer_queued(imp: Impl, dir: &Path, pid: u32) -> bool {
    let pid = pid.to_string();
    match imp {
        Impl::Rwdir => std::fs::read_dir(dir.join(".rwdir")).is_ok_and(|d| {
            d.flatten().any(|e| {
                e.file_name()
                    .to_string_lossy()
                    .starts_with(".pending_lock-")
                    && std::fs::read_to_string(e.path()).is_ok_and(|r| {
                        r.lines()
                            .any(|l| l.strip_prefix("pid ") == Some(pid.as_str()))
                    })
            })
        }),
        Impl::Flock => std::fs::read_to_string("/proc/locks").is_ok_and(|s| {
            s.lines().any(|l| {
                let f: Vec<&str> = l.split_whitespace().collect();
                f.get(1) == Some(&"->") && f.get(5) == Some(&pid.as_str())
            })
        }),
        Impl::Seed => unreachable!("the seed design runs in `contention` only"),
    }
}

/// Looks at `cond` every millisecond until it holds (`true`) or `limit` has passed.
fn poll_until(limit: Duration, mut cond: impl FnMut() -> bool) -> bool {
    let until = Instant::now() + limit;
    loop {
        if cond() {
            return true;
        }
        if Instant::now() >= until {
            return false;
        }
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// One `herd` round's figures; times in ns, relative to the holder's release.
struct HerdRound {
    /// The queued writer's grant and its release (stamped just before it).
    writer_in: f64,
    writer_out: f64,
    readers_in: Vec<f64>,
    /// Summed over the waiters during the wait: run time from `schedstat` (`None` if
    /// unavailable) and utime+stime from `/proc/<pid>/stat`.
    cpu: Option<f64>,
    ticks: f64,
    span: f64,
    /// Waiters with an inotify descriptor open during the wait.
    inotify: usize,
    /// Whether every waiter's threads were seen asleep before the wait was measured.
    settled: bool,
}

impl HerdRound {
    fn before_writer(&self) -> usize {
        self.readers_in
            .iter()
            .filter(|&&t| t < self.writer_in)
            .count()
    }
}

const HERD_READERS: usize = 63;

fn herd_once(imp: Impl, loc: Loc, wait: Duration, settle: Duration) -> HerdRound {
    let d = fresh(loc);
    let spawn = |role| Worker::spawn(role, imp.key(), d.path(), &[]);
    let mut h = Herd {
        holder: spawn("handoff"),
        writer: spawn("herd"),
        readers: (0..HERD_READERS).map(|_| spawn("herd")).collect(),
    };
    // Warm-up: every waiter takes and releases its lock once, all at the same time.
    h.writer.send("warm X");
    for r in &mut h.readers {
        r.send("warm S");
    }
    h.writer.expect("warm");
    for r in &h.readers {
        r.expect("warm");
    }
    h.holder.send("acquire X");
    h.holder.expect("entering");
    h.holder.expect("got");
    // The writer queues first; the readers ask only once it is queued.
    h.writer.send("acquire X");
    h.writer.expect("entering");
    let wpid = h.writer.pid();
    assert!(
        poll_until(LONG, || writer_queued(imp, d.path(), wpid)),
        "herd: the writer ({}, {loc}) did not queue",
        imp.name()
    );
    for r in &mut h.readers {
        r.send("acquire S");
    }
    for r in &h.readers {
        r.expect("entering");
    }
    let pids: Vec<u32> = std::iter::once(wpid)
        .chain(h.readers.iter().map(Worker::pid))
        .collect();
    let settled = poll_until(Duration::from_secs(2), || {
        pids.iter().all(|&p| tasks::all_threads_in(p, 'S'))
    });
    let inotify = pids.iter().filter(|&&p| has_inotify(p)).count();
    let cpu_of_all = || -> (Option<u64>, u64) {
        let precise = pids.iter().map(|&p| threads_cpu_ns(p)).sum::<Option<u64>>();
        let ticks = pids
            .iter()
            .map(|&p| common::proc_cpu_ns(p).unwrap_or(0))
            .sum();
        (precise, ticks)
    };
    let t0 = mono_ns();
    let (c0, k0) = cpu_of_all();
    std::thread::sleep(wait);
    let (c1, k1) = cpu_of_all();
    let t1 = mono_ns();
    // Release, and ask for the stamps only once the herd has had time to go in.
    h.holder.send("handoff 0");
    std::thread::sleep(settle);
    h.holder.send("when");
    h.writer.send("when");
    for r in &mut h.readers {
        r.send("when");
    }
    let base = h.holder.expect("released")[0];
    let rel = |t: u64| t as f64 - base as f64;
    let readers_in: Vec<f64> = h.readers.iter().map(|r| rel(r.expect("in")[0])).collect();
    // A writer that came in after readers (not rwdir's order) waits for their release.
    for r in &mut h.readers {
        r.send("release");
    }
    let w = h.writer.expect("in");
    for r in &h.readers {
        r.expect("released");
    }
    HerdRound {
        writer_in: rel(w[0]),
        writer_out: rel(w[1]),
        readers_in,
        cpu: c0.zip(c1).map(|(a, b)| b.saturating_sub(a) as f64),
        ticks: k1.saturating_sub(k0) as f64,
        span: (t1 - t0) as f64,
        inotify,
        settled,
    }
}

fn herd(targets: &mut Vec<Target>) {
    let (rounds, wait, settle) = if quick() {
        (1, Duration::from_secs(1), Duration::from_millis(200))
    } else {
        (5, Duration::from_secs(5), Duration::from_millis(500))
    };
    let n = HERD_READERS;
    let waiters = n + 1;
    println!("## {waiters} waiters: a queued writer, then {n} readers\n");
    println!(
        "Issue #14's herd. A holder process takes the exclusive lock; then {waiters} waiter processes ask for it, 1 writer and {n} readers, after each took and released its lock once (warm-up). The writer asks first, and the readers only once it is queued (rwdir: its `.pending_lock-*` file, naming its pid, is in `DIR/.rwdir`; flock has no queue of its own, but /proc/locks lists the writer as blocked, and the kernel then blocks the readers behind it). Once every waiter has said it is asking and all their threads are seen asleep (state S in /proc/<pid>/task/*/stat, up to 2 s), the holder keeps the lock {} s more; over that span the CPU time of all {waiters} waiters is summed (the run time of every thread, /proc/<pid>/task/<tid>/schedstat, in ns) and given as % of one core; CPU (/proc stat): the sum of utime+stime of /proc/<pid>/stat over the same span, a coarse check only, since it counts whole 10 ms ticks per process and a waiter may use less than one. Then the holder stamps t0 and releases; the writer stamps t_w when granted and t1 just before it releases at once (hold 0); each reader stamps t_r when granted and keeps its lock. No waiter answers until the coordinator asks, {} ms after the release, so that no answer wakes it while the readers go in. Readers after the writer's release: the last (max t_r − t1, issue #14's \"all in within 5 ms of the release\") and the median reader, over rounds where no reader got in before the writer; writer in: t_w − t0; last reader after the holder's release: max t_r − t0. With inotify: how many waiters had an inotify descriptor open during the wait (rwdir waits on inotify where it can, and polls otherwise). {rounds} rounds per cell, cells shuffled in every round; median [min–max] over rounds.\n",
        wait.as_secs(),
        settle.as_millis()
    );
    struct Cell {
        imp: Impl,
        loc: Loc,
        rounds: Vec<HerdRound>,
    }
    let mut cells = per_location(&Impl::ALL, |loc, imp| Cell {
        imp,
        loc,
        rounds: vec![],
    });
    let mut rng = Rng::new();
    rng.each_round_shuffled(&mut cells, rounds, |c, _| {
        c.rounds.push(herd_once(c.imp, c.loc, wait, settle));
    });
    let mut t = Table::new(&[
        "at",
        "lock",
        "last reader in, after the writer's release",
        "median reader, after the writer's release",
        "writer in, after the holder's release",
        "last reader in, after the holder's release",
        "readers in before the writer",
        "waiters' CPU",
        "% of one core",
        "CPU (/proc stat)",
        "with inotify",
    ]);
    let pct = |r: &HerdRound| 100.0 * r.cpu.unwrap_or(r.ticks) / r.span;
    let cpu_dur = |x: f64| if x == 0.0 { "0".to_string() } else { dur(x) };
    let mut unsettled = 0;
    for c in &cells {
        let ordered: Vec<&HerdRound> = c.rounds.iter().filter(|r| r.before_writer() == 0).collect();
        let last_w: Vec<f64> = ordered
            .iter()
            .map(|r| common::max(&r.readers_in) - r.writer_out)
            .collect();
        let med_w: Vec<f64> = ordered
            .iter()
            .map(|r| common::median(&r.readers_in) - r.writer_out)
            .collect();
        let of = |f: &dyn Fn(&HerdRound) -> f64| c.rounds.iter().map(f).collect::<Vec<f64>>();
        let or_dash = |v: &[f64], f: fn(f64) -> String| {
            if v.is_empty() {
                "–".to_string()
            } else {
                common::spread(v, f)
            }
        };
        let pcts = of(&pct);
        let show_pct = |x: f64| format!("{x:.3} %");
        unsettled += c.rounds.iter().filter(|r| !r.settled).count();
        t.row(vec![
            c.loc.to_string(),
            c.imp.name().into(),
            or_dash(&last_w, dur),
            or_dash(&med_w, dur),
            common::spread(&of(&|r| r.writer_in), dur),
            common::spread(&of(&|r| common::max(&r.readers_in)), dur),
            match c.rounds.len() - ordered.len() {
                0 => "0".to_string(),
                k => format!(
                    "{} (in {k} of {} rounds)",
                    c.rounds.iter().map(HerdRound::before_writer).sum::<usize>(),
                    c.rounds.len()
                ),
            },
            common::spread(&of(&|r| r.cpu.unwrap_or(f64::NAN)), cpu_dur),
            common::spread(&pcts, show_pct),
            common::spread(&of(&|r| r.ticks), cpu_dur),
            format!(
                "{}/{waiters}",
                c.rounds.iter().map(|r| r.inotify).min().unwrap_or(0)
            ),
        ]);
        if c.loc == Loc::Tmpfs && c.imp == Impl::Rwdir {
            targets.push(Target {
                what: format!(
                    "{waiters} waiters: last of {n} readers in after the queued writer's release (median of rounds)"
                ),
                target: "≤ 5 ms".into(),
                measured: if last_w.is_empty() {
                    "no round with the writer first".into()
                } else {
                    format!(
                        "{} (worst {})",
                        dur(common::median(&last_w)),
                        dur(common::max(&last_w))
                    )
                },
                met: Some(!last_w.is_empty() && common::median(&last_w) <= 5e6),
            });
            targets.push(Target {
                what: format!(
                    "CPU of {waiters} waiters summed over a {} s wait (median of rounds)",
                    wait.as_secs()
                ),
                target: "< 1 % of one core".into(),
                measured: format!(
                    "{} (worst {})",
                    show_pct(common::median(&pcts)),
                    show_pct(common::max(&pcts))
                ),
                met: Some(common::median(&pcts) < 1.0),
            });
        }
    }
    t.print();
    if unsettled > 0 {
        println!(
            "In {unsettled} round(s) the waiters' threads were not all seen asleep within 2 s of asking; their CPU was measured from then on anyway.\n"
        );
    }
}

// ---------------------------------------------------------------------------------
// The command

fn command(targets: &mut Vec<Target>) {
    let (rounds, per) = if quick() { (1, 5) } else { (7, 30) };
    println!("## The command: whole-process invocations\n");
    // The workspace's `rwdir` (built here, release), or RWDIR_BENCH_BIN.
    let bin = std::env::var("RWDIR_BENCH_BIN").unwrap_or_else(|_| bin::rwdir_bin().to_string());
    let flock = which("flock");
    println!(
        "fork+exec+wait of each command from this process, stdout and stderr to /dev/null; {rounds} rounds × {per} invocations per command, commands shuffled in each round; µs per invocation, median [min–max] of the round medians; × = median of per-round ratios. `flock` is util-linux flock(1) ({}).\n",
        flock.as_deref().unwrap_or("not found")
    );
    #[derive(Clone, Copy, PartialEq)]
    enum C {
        True,
        FlockS,
        FlockX,
        RwRead,
        RwWrite,
    }
    let label = |c: C| match c {
        C::True => "`true`",
        C::FlockS => "`flock -s FILE true`",
        C::FlockX => "`flock -x FILE true`",
        C::RwRead => "`rwdir read DIR -- true`",
        C::RwWrite => "`rwdir write DIR -- true`",
    };
    let mut cmds = vec![C::True, C::RwRead, C::RwWrite];
    if flock.is_some() {
        cmds.extend([C::FlockS, C::FlockX]);
    }
    let mut rng = Rng::new();
    for &loc in &Loc::available() {
        let d = fresh(loc);
        let file = d.path().join("flock-file");
        let mut cells: Vec<(C, Vec<f64>)> = cmds.iter().map(|&c| (c, Vec::new())).collect();
        let run = |c: C| {
            let mut cmd = match c {
                C::True => Command::new("true"),
                C::FlockS | C::FlockX => {
                    let mut x = Command::new(flock.as_deref().unwrap_or("flock"));
                    x.arg(if c == C::FlockS { "-s" } else { "-x" })
                        .arg(&file)
                        .arg("true");
                    x
                }
                C::RwRead | C::RwWrite => {
                    let mut x = Command::new(&bin);
                    x.arg(if c == C::RwRead { "read" } else { "write" })
                        .arg(d.path())
                        .arg("--")
                        .arg("true");
                    x
                }
            };
            let t = Instant::now();
            let out = cmd
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::piped())
                .output()
                .expect("spawn");
            let e = t.elapsed();
            assert!(
                out.status.success(),
                "{} failed: {}",
                label(c),
                String::from_utf8_lossy(&out.stderr)
            );
            common::ns(e)
        };
        for c in &cmds {
            run(*c);
        }
        rng.each_round_shuffled(&mut cells, rounds, |cell, _| {
            let v: Vec<f64> = (0..per).map(|_| run(cell.0)).collect();
            cell.1.push(common::median(&v));
        });
        let get = |c: C| cells.iter().find(|x| x.0 == c).map(|x| &x.1);
        let ratio = |a: C, b: C| -> Option<f64> {
            let (a, b) = (get(a)?, get(b)?);
            Some(common::median(
                &a.iter().zip(b).map(|(x, y)| x / y).collect::<Vec<_>>(),
            ))
        };
        println!("At `{loc}`:\n");
        let mut t = Table::new(&["command", "µs", "× `true`", "× flock(1), same mode"]);
        for (c, v) in &cells {
            let vs_flock = match c {
                C::RwRead => ratio(C::RwRead, C::FlockS),
                C::RwWrite => ratio(C::RwWrite, C::FlockX),
                _ => None,
            };
            t.row(vec![
                label(*c).into(),
                common::spread(v, |x| common::sig3(x / 1e3)),
                ratio(*c, C::True).map_or("–".into(), common::times),
                vs_flock.map_or("–".into(), common::times),
            ]);
        }
        t.print();
        if loc == Loc::Tmpfs {
            let r = ratio(C::RwRead, C::FlockS);
            targets.push(Target {
                what: "`rwdir read DIR -- true` / `flock -s FILE true`".into(),
                target: "≤ 1.3×".into(),
                measured: r.map_or("flock(1) not found".into(), common::times),
                met: r.map(|r| r <= 1.3),
            });
        }
    }
}

// ---------------------------------------------------------------------------------
// Kernel wake-up

/// One series of `k` wake-ups (after one more as a warm-up) between a holder and a
/// waiter process. Returns t' − t and the durations of the holder's action, in ns.
fn wake_series(mech: Mech, loc: Loc, k: usize, rng: &mut Rng) -> (Vec<f64>, Vec<f64>) {
    let d = fresh(loc);
    let args = [mech.code()];
    let mut holder = Worker::spawn("wake-holder", Impl::Flock.key(), d.path(), &args);
    let mut waiter = Worker::spawn("wake-waiter", Impl::Flock.key(), d.path(), &args);
    waiter.expect("ready");
    let (mut wakes, mut actions) = (Vec::with_capacity(k), Vec::with_capacity(k));
    for i in 0..=k {
        holder.send(&format!("arm {i}"));
        holder.expect("armed");
        waiter.send(&format!("wait {i}"));
        waiter.expect("waiting");
        // The waiter said so right before blocking: 2–6 ms later it is asleep.
        holder.send(&format!("act {}", rng.range(2_000, 6_000)));
        let t2 = waiter.expect("woken")[0];
        holder.send("when");
        let v = holder.expect("acted");
        if i > 0 {
            wakes.push(t2.saturating_sub(v[0]) as f64);
            actions.push(v[1] as f64);
        }
    }
    (wakes, actions)
}

/// The bare kernel wake-up across processes that a hand-off rests on. Not a target:
/// it shows how long the kernel wake-up alone takes for flock(2), for an inotify event
/// read by the woken thread itself, and for one read by a relay thread that then wakes
/// the waiting thread through a channel. rwdir's waiting thread reads the inotify
/// descriptor itself (leader/follower in `notify.rs`, no relay thread), and the
/// hand-off target compares rwdir with flock: this table says how much of that ratio
/// the kernel mechanisms alone account for.
fn wake() {
    let (rounds, k) = if quick() { (1, 15) } else { (5, 50) };
    println!("## Kernel wake-up across processes (reference, no lock library)\n");
    println!(
        "A holder process stamps t (CLOCK_MONOTONIC) right before its release action; a waiter process blocked in the kernel stamps t' right after it returns; t' − t. flock: the holder holds flock(LOCK_EX) on a file, the waiter blocks in flock(LOCK_SH) on its own descriptor of that file, the action is close(2) of the holder's descriptor. inotify, direct: the waiter watches the directory for IN_DELETE and blocks in ppoll(2) on the inotify descriptor, the action is unlink(2) of a file there; t' is stamped when ppoll returns, and the sample counts once the events read then name that file. inotify, via a relay thread: a second thread of the waiter blocks in ppoll and reads the events, then try_sends the name to a crossbeam bounded(1) channel; the main thread blocks in recv and stamps t' when it returns. The waiter answers right before it blocks; the holder acts a random 2–6 ms later and reports t only after the waiter has answered. {rounds} rounds × {k} wake-ups per cell (after one warm-up), cells shuffled in every round. release action: the duration of close / unlink in the holder. × flock = median over rounds of (median of the round / flock's median of the same round and location).\n"
    );
    struct Cell {
        mech: Mech,
        loc: Loc,
        wakes: Vec<f64>,
        actions: Vec<f64>,
        round_medians: Vec<f64>,
    }
    let mut cells = per_location(&Mech::ALL, |loc, mech| Cell {
        mech,
        loc,
        wakes: vec![],
        actions: vec![],
        round_medians: vec![],
    });
    let mut rng = Rng::new();
    rng.each_round_shuffled(&mut cells, rounds, |c, rng| {
        let (w, a) = wake_series(c.mech, c.loc, k, rng);
        c.round_medians.push(common::median(&w));
        c.wakes.extend(w);
        c.actions.extend(a);
    });
    let mut t = Table::new(&[
        "at",
        "mechanism",
        "n",
        "median",
        "p90",
        "p99",
        "release action median",
        "× flock",
    ]);
    for c in &cells {
        let base = cells
            .iter()
            .find(|b| b.loc == c.loc && b.mech == Mech::Flock)
            .expect("flock cell");
        let ratio = common::median(
            &c.round_medians
                .iter()
                .zip(&base.round_medians)
                .map(|(x, y)| x / y)
                .collect::<Vec<_>>(),
        );
        t.row(vec![
            c.loc.to_string(),
            c.mech.name().into(),
            c.wakes.len().to_string(),
            dur(common::median(&c.wakes)),
            dur(common::quantile(&c.wakes, 0.90)),
            dur(common::quantile(&c.wakes, 0.99)),
            dur(common::median(&c.actions)),
            common::times(ratio),
        ]);
    }
    t.print();
}

fn which(name: &str) -> Option<String> {
    std::env::var_os("PATH").and_then(|p| {
        std::env::split_paths(&p)
            .map(|d| d.join(name))
            .find(|f| f.is_file())
            .map(|f| f.display().to_string())
    })
}

fn main() {
    if let Ok(role) = std::env::var(ROLE_ENV) {
        worker(&role);
        return;
    }
    let picked: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with("--"))
        .collect();
    if std::env::args().any(|a| a == "--list" || a == "--test") {
        return;
    }
    let want = |name: &str| picked.is_empty() || picked.iter().any(|p| p == name);
    println!(
        "# rwdir multi-process benchmarks{}\n",
        if quick() { " (quick smoke run)" } else { "" }
    );
    println!("Machine: {}.", common::machine());
    for l in Loc::available() {
        println!("Location {}.", l.describe());
    }
    println!();
    let started = Instant::now();
    let mut targets = Vec::new();
    if want("handoff") {
        handoff(&mut targets);
    }
    if want("contention") {
        contention();
    }
    if want("starvation") {
        starvation(&mut targets);
    }
    if want("cpu") {
        cpu(&mut targets);
    }
    if want("herd") {
        herd(&mut targets);
    }
    if want("command") {
        command(&mut targets);
    }
    if want("wake") {
        wake();
    }
    println!(
        "Load average at the end: {}; wall time {:.1} s.\n",
        common::loadavg(),
        started.elapsed().as_secs_f64()
    );
    println!("### Targets of issues #5 and #14 measured by this binary\n");
    common::print_targets(&targets);
}
