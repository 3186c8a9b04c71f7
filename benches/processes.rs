//! Multi-process scenarios (BENCHMARKS.md, tables 3–7): every case runs `rwdir` and
//! std's `File::lock`/`File::lock_shared` (flock) the same way, in interleaved rounds,
//! at tmpfs and at the default temp directory, and prints markdown tables with the
//! ratios and the targets of issue #5.
//!
//! Scenarios (pick some by name as arguments; default all): `handoff`, `contention`,
//! `starvation`, `cpu`, `command`, and `wake`, a reference rather than a comparison:
//! the bare kernel wake-up across processes (flock(2), inotify read by the woken thread,
//! inotify through a relay thread) that a hand-off rests on, with no lock library at
//! all. `RWDIR_BENCH_QUICK=1` makes a short smoke run.
//!
//! Workers are this binary run again with `RWDIR_BENCH_ROLE` set. The coordinator talks
//! to each over its stdin/stdout, one line per command and per answer; readiness is
//! always an answer on that pipe, never a sleep. Time stamps are `CLOCK_MONOTONIC`,
//! which every process of the host shares.

#![allow(clippy::disallowed_methods)]

#[path = "../tests/cli/bin.rs"]
mod bin;
mod common;

use std::fs::File;
use std::io::{BufRead, BufReader, Write};
use std::os::fd::AsFd;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError};
use std::time::{Duration, Instant};

use common::{Loc, Rng, Table, Target, dur, mono_ns, quick};
use nix::errno::Errno;
use nix::poll::{PollFd, PollFlags, ppoll};
use nix::sys::inotify::{AddWatchFlags, InitFlags, Inotify};
use rwdir::{DirLock, ReadGuard, WriteGuard};

const ROLE_ENV: &str = "RWDIR_BENCH_ROLE";
const IMPL_ENV: &str = "RWDIR_BENCH_IMPL";
const DIR_ENV: &str = "RWDIR_BENCH_DIR";
const ARG_ENV: &str = "RWDIR_BENCH_ARG";

/// How long the coordinator waits for any answer that should come "soon".
const LONG: Duration = Duration::from_secs(120);

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Impl {
    Rwdir,
    Flock,
}

impl Impl {
    const ALL: [Impl; 2] = [Impl::Rwdir, Impl::Flock];

    fn name(self) -> &'static str {
        match self {
            Impl::Rwdir => "rwdir",
            Impl::Flock => "std flock",
        }
    }

    fn parse(s: &str) -> Impl {
        match s {
            "rwdir" => Impl::Rwdir,
            _ => Impl::Flock,
        }
    }

    fn key(self) -> &'static str {
        match self {
            Impl::Rwdir => "rwdir",
            Impl::Flock => "flock",
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
}

enum Guard {
    Read(ReadGuard),
    Write(WriteGuard),
    File(File),
}

impl Lock {
    fn open(imp: Impl, dir: &Path) -> Lock {
        match imp {
            Impl::Rwdir => Lock::Rwdir(DirLock::new(dir).expect("DirLock::new")),
            Impl::Flock => Lock::Flock(dir.join("flock-file")),
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
        }
    }
}

/// The worker's view of the coordinator: commands in, answers out.
struct Pipe {
    lines: Receiver<String>,
    out: std::io::Stdout,
}

impl Pipe {
    fn new() -> Pipe {
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            for line in std::io::stdin().lock().lines() {
                let Ok(line) = line else { break };
                if tx.send(line).is_err() {
                    break;
                }
            }
            // EOF: the coordinator is done with us (the channel disconnects).
        });
        Pipe {
            lines: rx,
            out: std::io::stdout(),
        }
    }

    /// The next command; `None` at EOF.
    fn next(&self) -> Option<String> {
        self.lines.recv().ok()
    }

    fn say(&mut self, line: &str) {
        let mut out = self.out.lock();
        let _ = writeln!(out, "{line}");
        let _ = out.flush();
    }
}

fn env(name: &str) -> String {
    std::env::var(name).unwrap_or_else(|_| panic!("{name} unset"))
}

fn arg<T: std::str::FromStr>(i: usize) -> T {
    env(ARG_ENV)
        .split(',')
        .nth(i)
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("{ARG_ENV}[{i}]"))
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
    let imp = Impl::parse(&env(IMPL_ENV));
    let dir = PathBuf::from(env(DIR_ENV));
    // The `wake` roles use no lock, only the kernel mechanisms themselves.
    match role {
        "wake-holder" => return worker_wake_holder(Mech::from_code(arg(0)), &dir),
        "wake-waiter" => return worker_wake_waiter(Mech::from_code(arg(0)), &dir),
        _ => {}
    }
    let lock = Lock::open(imp, &dir);
    let mut pipe = Pipe::new();
    match role {
        "handoff" => worker_handoff(&lock, &mut pipe),
        "writer" => worker_writer(&lock, &mut pipe, &dir),
        "reader" => worker_reader(&lock, &mut pipe),
        "late-writer" => worker_late_writer(&lock, &mut pipe),
        "cpu-waiter" => worker_cpu_waiter(&lock, &mut pipe),
        _ => panic!("unknown role {role}"),
    }
}

/// `acquire X|S` → `entering <t>`, then `got <t>` once it holds the lock;
/// `release <hold_us>` → sleeps `hold_us`, stamps `t`, releases, `released <t>`;
/// `handoff <hold_us>` does the same but answers nothing until `when` asks for `t`, so
/// that no answer wakes the coordinator while the waiter takes over.
fn worker_handoff(lock: &Lock, pipe: &mut Pipe) {
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
fn worker_writer(lock: &Lock, pipe: &mut Pipe, dir: &Path) {
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
fn worker_reader(lock: &Lock, pipe: &mut Pipe) {
    let hold = Duration::from_micros(arg(0));
    let offset = Duration::from_micros(arg(1));
    lock.acquire(false).release();
    pipe.say("ready");
    assert_eq!(pipe.next().as_deref(), Some("go"));
    std::thread::sleep(offset);
    let mut grants = 0u64;
    loop {
        if let Ok(cmd) = pipe.lines.try_recv() {
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
fn worker_late_writer(lock: &Lock, pipe: &mut Pipe) {
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
fn worker_cpu_waiter(lock: &Lock, pipe: &mut Pipe) {
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
    let mut pipe = Pipe::new();
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
    let mut pipe = Pipe::new();
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

/// A worker process.
struct Worker {
    child: Child,
    stdin: Option<ChildStdin>,
    lines: Receiver<String>,
    role: String,
}

impl Worker {
    fn spawn(role: &str, imp: Impl, dir: &Path, args: &[u64]) -> Worker {
        let exe = std::env::current_exe().expect("current_exe");
        let mut child = Command::new(exe)
            .env(ROLE_ENV, role)
            .env(IMPL_ENV, imp.key())
            .env(DIR_ENV, dir)
            .env(
                ARG_ENV,
                args.iter()
                    .map(u64::to_string)
                    .collect::<Vec<_>>()
                    .join(","),
            )
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("spawn worker");
        let stdout = child.stdout.take().expect("stdout");
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        Worker {
            stdin: child.stdin.take(),
            child,
            lines: rx,
            role: role.to_string(),
        }
    }

    fn pid(&self) -> u32 {
        self.child.id()
    }

    fn send(&mut self, line: &str) {
        let stdin = self.stdin.as_mut().expect("stdin open");
        writeln!(stdin, "{line}").expect("write to worker");
        stdin.flush().expect("flush to worker");
    }

    fn recv_timeout(&self, d: Duration) -> Option<String> {
        match self.lines.recv_timeout(d) {
            Ok(l) => Some(l),
            Err(RecvTimeoutError::Timeout) => None,
            Err(RecvTimeoutError::Disconnected) => {
                panic!("worker {} ({}) died", self.role, self.child.id())
            }
        }
    }

    fn recv(&self) -> String {
        self.recv_timeout(LONG)
            .unwrap_or_else(|| panic!("worker {} ({}) silent", self.role, self.child.id()))
    }

    /// The next answer, which must start with `word`; returns its numeric fields.
    fn expect(&self, word: &str) -> Vec<u64> {
        let l = self.recv();
        let mut it = l.split_whitespace();
        assert_eq!(it.next(), Some(word), "worker {}: {l:?}", self.role);
        it.map(|x| x.parse().expect("number")).collect()
    }
}

impl Drop for Worker {
    fn drop(&mut self) {
        // EOF on stdin ends a worker that waits for commands.
        drop(self.stdin.take());
        let until = Instant::now() + Duration::from_secs(5);
        while Instant::now() < until {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(2));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

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
    let mut a = Worker::spawn("handoff", imp, d.path(), &[]);
    let mut b = Worker::spawn("handoff", imp, d.path(), &[]);
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
        .map(|_| Worker::spawn("writer", imp, d.path(), &[run.as_millis() as u64]))
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
        for imp in Impl::ALL {
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
    // Lost increments are mutual-exclusion violations: a failed benchmark, not a number.
    let lost: i64 = cells.iter().map(|c| c.lost).sum();
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
        .map(|i| Worker::spawn("reader", imp, d.path(), &[hold_us, i * hold_us / 4]))
        .collect();
    let mut writer = Worker::spawn("late-writer", imp, d.path(), &[arrive.as_millis() as u64]);
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
            }
            let worker = Worker::spawn("cpu-waiter", imp, d.path(), &[]);
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
    let mut holder = Worker::spawn("wake-holder", Impl::Flock, d.path(), &args);
    let mut waiter = Worker::spawn("wake-waiter", Impl::Flock, d.path(), &args);
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
    println!("### Targets of issue #5 measured by this binary\n");
    common::print_targets(&targets);
}
