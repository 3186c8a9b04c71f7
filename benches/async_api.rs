//! The async API (`DirLock::read_async`, `DirLock::write_async`; feature `tokio`, issue
//! #15) against the blocking one (`read`, `write`), measured in the same run, in
//! interleaved rounds, with `tokio::sync::RwLock` (one process only) for scale
//! (BENCHMARKS.md, "The async API"). Needs the feature:
//! `cargo bench --features tokio --bench async_api`.
//!
//! Scenarios (pick some by name as arguments; default all three):
//!
//! - `handoff`: as `processes handoff` (the same commands, holds and stamps): two
//!   processes take turns holding the write lock, and the other waits for it (X → X) or
//!   for a read lock (X → S); the waiter stamps t' where its acquisition returns (in the
//!   task, for the async modes), the holder stamps t just before its release; t' − t.
//!   Both processes wait the same way (a [`Mode`]): blocking, or in a task on a tokio
//!   runtime. `tokio::sync::RwLock`: the same between two tasks of one process.
//! - `contention`: as `processes contention`: N writer processes (N = 2, 8) loop acquire
//!   → increment a counter in a shared file (pread+pwrite) → release, each waiting the
//!   same way. Also N writers in one process sharing one `DirLock` (threads for the
//!   blocking API, tasks for the async one), and N tasks on one `tokio::sync::RwLock`
//!   with the same counter in the same kind of file. There each writer yields once while
//!   it holds the lock and once after its release (`tokio::task::yield_now`, threads
//!   `std::thread::yield_now`), as a task whose work is asynchronous would: tasks of one
//!   current-thread runtime would otherwise never contend. A lost increment fails the
//!   run.
//!
//! - `readers`: T tasks of one process (on a multi-thread runtime with two workers),
//!   each with a `DirLock` of its own, loop `read_async` → release → `yield_now` (the
//!   asynchronous work a task does between two reads); grants per second of all tasks
//!   together, with reads sharing one reader's file (the default) and with a file per
//!   read (`Builder::share_readers(false)`), threads with the blocking API for
//!   comparison, and T tasks on one `tokio::sync::RwLock` for scale.
//!
//! Every cell runs at tmpfs (`/dev/shm`) and at the default temporary directory, in a
//! new random order every round; ratios are taken inside a round against the blocking
//! cell of the same location, and their median is reported. `RWDIR_BENCH_QUICK=1`
//! makes a short smoke run.
//!
//! Workers are this binary run again with `RWDIR_BENCH_ROLE` set, driven over their
//! stdin/stdout one line per command and answer, as in `processes`.

#![allow(clippy::disallowed_methods)]

mod common;

use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::workers::{DIR_ENV, KIND_ENV, Pipe, ROLE_ENV, Worker, arg, env};
use common::{Loc, Rng, Table, Target, dur, mono_ns, quick};
use rwdir::{DirLock, ReadGuard, WriteGuard};
use tokio::runtime::Runtime;

/// The target of issue #15's benchmark: async within this factor of blocking.
const TARGET: f64 = 1.2;

/// How a worker waits for the lock.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    /// rwdir's `write`/`read`, on the calling thread (threads, in one process).
    Blocking,
    /// rwdir's `write_async`/`read_async` in a task on a current-thread runtime (all
    /// tasks on one thread, in one process).
    Current,
    /// rwdir's `write_async`/`read_async` in a task on a multi-thread runtime with its
    /// default worker threads (one per core: what `#[tokio::main]` makes).
    Multi,
    /// `tokio::sync::RwLock`, tasks of one process on a multi-thread runtime.
    Tokio,
}

impl Mode {
    /// The rwdir modes, blocking first.
    const RWDIR: [Mode; 3] = [Mode::Blocking, Mode::Current, Mode::Multi];

    fn name(self) -> &'static str {
        match self {
            Mode::Blocking => "rwdir blocking (`write`/`read`)",
            Mode::Current => "rwdir async, current-thread runtime",
            Mode::Multi => "rwdir async, multi-thread runtime",
            Mode::Tokio => "`tokio::sync::RwLock` (one process)",
        }
    }

    fn key(self) -> &'static str {
        match self {
            Mode::Blocking => "blocking",
            Mode::Current => "current",
            Mode::Multi => "multi",
            Mode::Tokio => "tokio",
        }
    }

    fn parse(s: &str) -> Mode {
        match s {
            "blocking" => Mode::Blocking,
            "current" => Mode::Current,
            "multi" => Mode::Multi,
            "tokio" => Mode::Tokio,
            _ => panic!("unknown mode {s:?}"),
        }
    }

    /// The runtime a worker of this mode waits on, if any.
    fn runtime(self) -> Option<Runtime> {
        let b = match self {
            Mode::Blocking => return None,
            Mode::Current => tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build(),
            Mode::Multi | Mode::Tokio => tokio::runtime::Builder::new_multi_thread()
                .enable_all()
                .build(),
        };
        Some(b.expect("tokio runtime"))
    }
}

// =================================================================================
// Worker side

enum Guard {
    Read(ReadGuard),
    Write(WriteGuard),
}

impl Guard {
    fn release(self) {
        match self {
            Guard::Read(g) => g.release().expect("release"),
            Guard::Write(g) => g.release().expect("release"),
        }
    }
}

fn take_blocking(lock: &DirLock, exclusive: bool) -> Guard {
    if exclusive {
        Guard::Write(lock.write().expect("write"))
    } else {
        Guard::Read(lock.read().expect("read"))
    }
}

async fn take_async(lock: &DirLock, exclusive: bool) -> Guard {
    if exclusive {
        Guard::Write(lock.write_async().await.expect("write_async"))
    } else {
        Guard::Read(lock.read_async().await.expect("read_async"))
    }
}

/// A worker's lock and the runtime it waits on.
struct Taker {
    mode: Mode,
    lock: Arc<DirLock>,
    rt: Option<Runtime>,
}

impl Taker {
    fn new(mode: Mode, dir: &Path) -> Taker {
        Taker {
            mode,
            lock: Arc::new(DirLock::new(dir).expect("DirLock::new")),
            rt: mode.runtime(),
        }
    }

    /// Takes the lock; returns the guard and `CLOCK_MONOTONIC` where the acquisition
    /// returned (in the task itself, for the async modes).
    fn acquire(&self, exclusive: bool) -> (Guard, u64) {
        match (self.mode, &self.rt) {
            (Mode::Current, Some(rt)) => rt.block_on(async {
                let g = take_async(&self.lock, exclusive).await;
                (g, mono_ns())
            }),
            (Mode::Multi, Some(rt)) => {
                let lock = Arc::clone(&self.lock);
                let task = rt.spawn(async move {
                    let g = take_async(&lock, exclusive).await;
                    (g, mono_ns())
                });
                rt.block_on(task).expect("acquiring task")
            }
            _ => {
                let g = take_blocking(&self.lock, exclusive);
                (g, mono_ns())
            }
        }
    }
}

fn worker(role: &str) {
    let mode = Mode::parse(&env(KIND_ENV));
    let dir = std::path::PathBuf::from(env(DIR_ENV));
    let pipe = Pipe::new();
    match role {
        "handoff" => worker_handoff(&Taker::new(mode, &dir), &pipe),
        "tokio-handoff" => worker_tokio_handoff(&pipe),
        "writers" => worker_writers(mode, &dir, &pipe),
        _ => panic!("unknown role {role}"),
    }
}

/// `acquire X|S` → `entering <t>`, then `got <t'>` once it holds the lock;
/// `release <hold_us>` → sleeps `hold_us`, stamps `t`, releases, `released <t>`;
/// `handoff <hold_us>` does the same but answers nothing until `when` asks for `t`, so
/// that no answer wakes the coordinator while the waiter takes over. As in `processes`.
fn worker_handoff(taker: &Taker, pipe: &Pipe) {
    let mut held = None;
    let mut last = 0;
    while let Some(cmd) = pipe.next() {
        let mut it = cmd.split_whitespace();
        match it.next() {
            Some("acquire") => {
                let exclusive = it.next() == Some("X");
                pipe.say(&format!("entering {}", mono_ns()));
                let (g, t) = taker.acquire(exclusive);
                held = Some(g);
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

/// `series <k> <shared> <lo_us> <hi_us>` → `samples <ns>...`: k hand-offs between two
/// tasks of this process on one `tokio::sync::RwLock` (multi-thread runtime): the holder
/// task holds the write lock while a new waiter task asks for the write (or, `shared`,
/// a read) lock, sleeps a hold random in [lo, hi) µs (a tokio sleep), stamps t and
/// releases; the waiter stamps t' when its acquisition returns.
fn worker_tokio_handoff(pipe: &Pipe) {
    let rt = Mode::Tokio.runtime().expect("runtime");
    while let Some(cmd) = pipe.next() {
        let v: Vec<u64> = cmd
            .split_whitespace()
            .skip(1)
            .map(|x| x.parse().expect("number"))
            .collect();
        let (k, shared, lo, hi) = (v[0], v[1] == 1, v[2], v[3]);
        let series = rt.spawn(async move {
            let lock = Arc::new(tokio::sync::RwLock::new(()));
            let mut rng = Rng::new();
            let mut samples = Vec::new();
            for _ in 0..k {
                let held = Arc::clone(&lock).write_owned().await;
                let (asked_tx, asked_rx) = tokio::sync::oneshot::channel();
                let l = Arc::clone(&lock);
                let waiter = tokio::spawn(async move {
                    let _ = asked_tx.send(());
                    if shared {
                        let _g = l.read().await;
                        mono_ns()
                    } else {
                        let _g = l.write().await;
                        mono_ns()
                    }
                });
                asked_rx.await.expect("waiter asked");
                tokio::time::sleep(Duration::from_micros(rng.range(lo, hi))).await;
                let t = mono_ns();
                drop(held);
                let t2 = waiter.await.expect("waiter");
                samples.push(t2.saturating_sub(t));
            }
            samples
        });
        let samples = rt.block_on(series).expect("series");
        let s: Vec<String> = samples.iter().map(u64::to_string).collect();
        pipe.say(&format!("samples {}", s.join(" ")));
    }
}

/// The critical section of every contended writer: increments the counter in `counter`
/// (pread + pwrite).
fn bump(counter: &File) {
    let mut buf = [0u8; 8];
    counter.read_exact_at(&mut buf, 0).expect("read counter");
    let n = u64::from_le_bytes(buf) + 1;
    counter
        .write_all_at(&n.to_le_bytes(), 0)
        .expect("write counter");
}

/// What one contended writer did: grants, and its longest single wait.
type Tally = (u64, Duration);

/// A blocking writer's loop until `deadline`, as `processes`' `worker_writer`; with
/// `yields`, the thread yields (`sched_yield`) once while it holds the lock and once
/// after its release, as the tasks of [`loop_async`] do.
fn loop_blocking(lock: &DirLock, counter: &File, deadline: Instant, yields: bool) -> Tally {
    let (mut grants, mut longest) = (0u64, Duration::ZERO);
    loop {
        let asked = Instant::now();
        let g = match lock.try_write_until(deadline) {
            Ok(g) => g,
            Err(rwdir::Error::TimedOut { .. }) => {
                longest = longest.max(deadline.saturating_duration_since(asked));
                break;
            }
            Err(e) => panic!("write failed: {e}"),
        };
        let now = Instant::now();
        longest = longest.max(now.min(deadline) - asked);
        if now >= deadline {
            g.release().expect("release");
            break;
        }
        bump(counter);
        grants += 1;
        if yields {
            std::thread::yield_now();
        }
        g.release().expect("release");
        if yields {
            std::thread::yield_now();
        }
    }
    (grants, longest)
}

/// An async writer's loop until `deadline`: `write_async` under `timeout_at` (the last
/// acquisition of the round is cancelled by it); with `yields`, the task yields once
/// while it holds the lock and once after its release.
async fn loop_async(lock: &DirLock, counter: &File, deadline: Instant, yields: bool) -> Tally {
    let (mut grants, mut longest) = (0u64, Duration::ZERO);
    loop {
        let asked = Instant::now();
        let g = match tokio::time::timeout_at(deadline.into(), lock.write_async()).await {
            Ok(g) => g.expect("write_async"),
            Err(_) => {
                longest = longest.max(deadline.saturating_duration_since(asked));
                break;
            }
        };
        let now = Instant::now();
        longest = longest.max(now.min(deadline) - asked);
        if now >= deadline {
            g.release().expect("release");
            break;
        }
        bump(counter);
        grants += 1;
        // As a task whose work under the lock, and between two writes, is asynchronous.
        // Without these, an acquisition that needs no wait never yields, and tasks of
        // one current-thread runtime never contend: one took every grant, the others
        // never asking (docs/notes/async.md).
        if yields {
            tokio::task::yield_now().await;
        }
        g.release().expect("release");
        if yields {
            tokio::task::yield_now().await;
        }
    }
    (grants, longest)
}

/// `tokio::sync::RwLock`'s loop, the same critical section, the same yields (always:
/// it runs in one process only).
async fn loop_tokio(lock: &tokio::sync::RwLock<()>, counter: &File, deadline: Instant) -> Tally {
    let (mut grants, mut longest) = (0u64, Duration::ZERO);
    loop {
        let asked = Instant::now();
        let Ok(g) = tokio::time::timeout_at(deadline.into(), lock.write()).await else {
            longest = longest.max(deadline.saturating_duration_since(asked));
            break;
        };
        let now = Instant::now();
        longest = longest.max(now.min(deadline) - asked);
        if now >= deadline {
            break;
        }
        bump(counter);
        grants += 1;
        tokio::task::yield_now().await;
        drop(g);
        tokio::task::yield_now().await;
    }
    (grants, longest)
}

/// Contention: ARG = run ms, writers in this process. Each writer (a thread for
/// `Blocking`, a task otherwise) warms up with one acquire+release; then `ready`; after
/// `go`, every writer loops for the run; then `done <ns of the longest wait> <grants>...`
/// (one per writer). Several writers in this process yield as they go (see
/// [`loop_async`]); one alone loops as `processes` does.
fn worker_writers(mode: Mode, dir: &Path, pipe: &Pipe) {
    let run = Duration::from_millis(arg(0));
    let n: usize = arg(1);
    let yields = n > 1;
    let counter = Arc::new(
        File::options()
            .read(true)
            .write(true)
            .open(dir.join("counter"))
            .expect("open counter"),
    );
    let tallies: Vec<Tally> = match mode {
        Mode::Blocking => {
            let lock = DirLock::new(dir).expect("DirLock::new");
            lock.write().expect("warm up").release().expect("release");
            pipe.say("ready");
            assert_eq!(pipe.next().as_deref(), Some("go"));
            let deadline = Instant::now() + run;
            std::thread::scope(|s| {
                let hs: Vec<_> = (0..n)
                    .map(|_| s.spawn(|| loop_blocking(&lock, &counter, deadline, yields)))
                    .collect();
                hs.into_iter().map(|h| h.join().expect("writer")).collect()
            })
        }
        Mode::Current | Mode::Multi => {
            let rt = mode.runtime().expect("runtime");
            let lock = Arc::new(DirLock::new(dir).expect("DirLock::new"));
            rt.block_on(async {
                let w = lock.write_async().await.expect("warm up");
                w.release().expect("release");
            });
            pipe.say("ready");
            assert_eq!(pipe.next().as_deref(), Some("go"));
            let deadline = Instant::now() + run;
            let tasks: Vec<_> = (0..n)
                .map(|_| {
                    let (lock, counter) = (Arc::clone(&lock), Arc::clone(&counter));
                    rt.spawn(async move { loop_async(&lock, &counter, deadline, yields).await })
                })
                .collect();
            rt.block_on(async {
                let mut out = Vec::new();
                for t in tasks {
                    out.push(t.await.expect("writer task"));
                }
                out
            })
        }
        Mode::Tokio => {
            let rt = mode.runtime().expect("runtime");
            let lock = Arc::new(tokio::sync::RwLock::new(()));
            pipe.say("ready");
            assert_eq!(pipe.next().as_deref(), Some("go"));
            let deadline = Instant::now() + run;
            let tasks: Vec<_> = (0..n)
                .map(|_| {
                    let (lock, counter) = (Arc::clone(&lock), Arc::clone(&counter));
                    rt.spawn(async move { loop_tokio(&lock, &counter, deadline).await })
                })
                .collect();
            rt.block_on(async {
                let mut out = Vec::new();
                for t in tasks {
                    out.push(t.await.expect("writer task"));
                }
                out
            })
        }
    };
    let longest = tallies.iter().map(|t| t.1).max().unwrap_or_default();
    let grants: Vec<String> = tallies.iter().map(|t| t.0.to_string()).collect();
    pipe.say(&format!("done {} {}", longest.as_nanos(), grants.join(" ")));
    while pipe.next().is_some() {}
}

// =================================================================================
// Coordinator side

/// The median over rounds of the ratio of `x`'s round value to `base`'s.
fn round_ratio(x: &[f64], base: &[f64]) -> f64 {
    common::median(&x.iter().zip(base).map(|(a, b)| a / b).collect::<Vec<_>>())
}

/// `≤ 1.2×` met, for the closing table.
fn target(what: String, ratio: f64, higher_is_better: bool) -> Target {
    let (wanted, met) = if higher_is_better {
        (
            format!("≥ {}×", common::sig3(1.0 / TARGET)),
            ratio >= 1.0 / TARGET,
        )
    } else {
        (format!("≤ {}×", common::sig3(TARGET)), ratio <= TARGET)
    };
    Target {
        what,
        target: wanted,
        measured: common::times(ratio),
        met: Some(met),
    }
}

// ---------------------------------------------------------------------------------
// Hand-off

/// The range of hold times, in µs: as `processes handoff`.
fn hold_range() -> (u64, u64) {
    if quick() {
        (2_000, 4_000)
    } else {
        (2_000, 12_000)
    }
}

/// One series of `k` hand-offs between two processes waiting as `mode` says; the
/// latencies in ns, and the samples dropped because the waiter was not yet waiting.
/// The same sequence of commands as `processes`' `handoff_series`.
fn handoff_series(
    mode: Mode,
    loc: Loc,
    shared: bool,
    k: usize,
    rng: &mut Rng,
) -> (Vec<f64>, usize) {
    let d = loc.fresh_dir();
    let mut a = Worker::spawn("handoff", mode.key(), d.path(), &[]);
    let mut b = Worker::spawn("handoff", mode.key(), d.path(), &[]);
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
    let (lo, hi) = hold_range();
    let (mut samples, mut dropped) = (Vec::with_capacity(k), 0);
    for _ in 0..k {
        waiter.send(if shared { "acquire S" } else { "acquire X" });
        let entering = waiter.expect("entering")[0];
        holder.send(&format!("handoff {}", rng.range(lo, hi)));
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

/// `tokio::sync::RwLock`'s series, in a worker process of its own.
fn tokio_handoff_series(shared: bool, k: usize) -> Vec<f64> {
    let d = Loc::Tmpfs.fresh_dir();
    let mut w = Worker::spawn("tokio-handoff", Mode::Tokio.key(), d.path(), &[]);
    let (lo, hi) = hold_range();
    w.send(&format!("series {k} {} {lo} {hi}", u8::from(shared)));
    w.expect("samples").into_iter().map(|x| x as f64).collect()
}

struct HandoffCell {
    mode: Mode,
    /// `None`: `tokio::sync::RwLock`, in memory.
    loc: Option<Loc>,
    shared: bool,
    samples: Vec<f64>,
    round_medians: Vec<f64>,
    dropped: usize,
}

fn handoff(targets: &mut Vec<Target>) {
    let (rounds, k) = if quick() { (1, 15) } else { (5, 50) };
    let (lo, hi) = hold_range();
    println!("## Hand-off latency: async against blocking\n");
    println!(
        "As `processes handoff`: a holder process stamps t just before releasing the write lock; the waiter, blocked in another process, stamps t' when its acquisition returns (for the async modes: in the task, right after the `.await`); t' − t. Both processes of a cell wait the same way: blocking (`write`/`read`), or `write_async`/`read_async` in a task on a current-thread or a multi-thread tokio runtime. {rounds} rounds × {k} hand-offs per cell, cells shuffled in every round; hold random in [{} ms, {} ms]. × blocking = median over rounds of (the cell's round median / the blocking cell's round median, same location and hand-off). `tokio::sync::RwLock`: the same between two tasks of one process (multi-thread runtime, a tokio sleep as the hold), for scale, against blocking rwdir at tmpfs.\n",
        lo / 1000,
        hi / 1000
    );
    let mut cells = Vec::new();
    for &loc in &Loc::available() {
        for mode in Mode::RWDIR {
            for shared in [false, true] {
                cells.push(HandoffCell {
                    mode,
                    loc: Some(loc),
                    shared,
                    samples: Vec::new(),
                    round_medians: Vec::new(),
                    dropped: 0,
                });
            }
        }
    }
    for shared in [false, true] {
        cells.push(HandoffCell {
            mode: Mode::Tokio,
            loc: None,
            shared,
            samples: Vec::new(),
            round_medians: Vec::new(),
            dropped: 0,
        });
    }
    let mut rng = Rng::new();
    rng.each_round_shuffled(&mut cells, rounds, |c, rng| {
        let (s, dropped) = match c.loc {
            Some(loc) => handoff_series(c.mode, loc, c.shared, k, rng),
            None => (tokio_handoff_series(c.shared, k), 0),
        };
        c.round_medians.push(common::median(&s));
        c.samples.extend(s);
        c.dropped += dropped;
    });
    let mut t = Table::new(&[
        "at",
        "lock, waiting",
        "hand-off",
        "n",
        "median",
        "p90",
        "p99",
        "max",
        "round medians",
        "× blocking (median)",
        "dropped",
    ]);
    for c in &cells {
        let base = cells
            .iter()
            .find(|b| {
                b.mode == Mode::Blocking
                    && b.loc == c.loc.or(Some(Loc::Tmpfs))
                    && b.shared == c.shared
            })
            .expect("blocking cell");
        let ratio = round_ratio(&c.round_medians, &base.round_medians);
        let what = if c.shared { "X → S" } else { "X → X" };
        t.row(vec![
            c.loc.map_or("in memory".into(), |l| l.to_string()),
            c.mode.name().into(),
            what.into(),
            c.samples.len().to_string(),
            dur(common::median(&c.samples)),
            dur(common::quantile(&c.samples, 0.90)),
            dur(common::quantile(&c.samples, 0.99)),
            dur(common::max(&c.samples)),
            format!(
                "{}–{}",
                dur(common::min(&c.round_medians)),
                dur(common::max(&c.round_medians))
            ),
            common::times(ratio),
            c.dropped.to_string(),
        ]);
        if c.loc == Some(Loc::Tmpfs) && matches!(c.mode, Mode::Current | Mode::Multi) {
            targets.push(target(
                format!(
                    "hand-off {what}, {}: median / blocking's",
                    if c.mode == Mode::Current {
                        "current-thread"
                    } else {
                        "multi-thread"
                    }
                ),
                ratio,
                false,
            ));
        }
    }
    t.print();
}

// ---------------------------------------------------------------------------------
// Contention

/// Where a cell's N writers run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Shape {
    /// N processes, one writer each (as `processes contention`).
    Processes,
    /// N writers in one process: threads (blocking) or tasks.
    OneProcess,
}

struct ContendCell {
    mode: Mode,
    shape: Shape,
    loc: Loc,
    n: usize,
    rate: Vec<f64>,
    longest: Vec<f64>,
    minmax: Vec<f64>,
    lost: i64,
}

/// One round of a cell: grants per writer, the longest wait (ns), lost increments.
fn contend_once(
    mode: Mode,
    shape: Shape,
    loc: Loc,
    n: usize,
    run: Duration,
) -> (Vec<u64>, u64, i64) {
    let d = loc.fresh_dir();
    std::fs::write(d.path().join("counter"), 0u64.to_le_bytes()).expect("counter");
    let ms = run.as_millis() as u64;
    let mut ws: Vec<Worker> = match shape {
        Shape::Processes => (0..n)
            .map(|_| Worker::spawn("writers", mode.key(), d.path(), &[ms, 1]))
            .collect(),
        Shape::OneProcess => vec![Worker::spawn(
            "writers",
            mode.key(),
            d.path(),
            &[ms, n as u64],
        )],
    };
    for w in &ws {
        w.expect("ready");
    }
    for w in &mut ws {
        w.send("go");
    }
    let (mut grants, mut longest) = (Vec::new(), 0u64);
    for w in &ws {
        let v = w.expect("done");
        longest = longest.max(v[0]);
        grants.extend_from_slice(&v[1..]);
    }
    drop(ws);
    let bytes = std::fs::read(d.path().join("counter")).expect("read counter");
    let counted = u64::from_le_bytes(bytes[..8].try_into().expect("8 bytes"));
    let total: u64 = grants.iter().sum();
    (grants, longest, total as i64 - counted as i64)
}

fn contention(targets: &mut Vec<Target>) {
    // 5 rounds, not `processes`' 3: the ratios to blocking are what is judged here, and
    // a round's rate can swing by 2x when something else runs on the machine.
    let (rounds, run) = if quick() {
        (1, Duration::from_millis(200))
    } else {
        (5, Duration::from_millis(700))
    };
    let ns_list = [2usize, 8];
    println!("## Contended writers: async against blocking\n");
    println!(
        "As `processes contention`: N writers loop acquire → increment a counter in a shared file (pread+pwrite) → release for {} ms; {rounds} rounds, cells shuffled in each. processes: N processes, one writer each, waiting as the mode says (the async ones: one task per process, `write_async` under `tokio::time::timeout_at` the end of the round). one process: N writers sharing one `DirLock` in one process, threads for the blocking API, tasks for the async one, each yielding once while it holds the lock and once after its release (`std::thread::yield_now`, `tokio::task::yield_now`), as a task whose work under the lock and between two writes is asynchronous would (without that, tasks of one current-thread runtime never contend); and N tasks on one `tokio::sync::RwLock`, the same critical section and yields, for scale. grants/s: median [min–max] over rounds. × blocking: median over rounds of the ratio to the blocking cell of the same location, N and shape (`tokio::sync::RwLock`: to the blocking threads in one process at tmpfs). Longest wait: the longest single request-to-grant. min/max: fewest / most grants among the N writers. lost: increments lost over all rounds (any fails the run).\n",
        run.as_millis()
    );
    let mut cells = Vec::new();
    let mut add = |mode, shape, loc, n| {
        cells.push(ContendCell {
            mode,
            shape,
            loc,
            n,
            rate: vec![],
            longest: vec![],
            minmax: vec![],
            lost: 0,
        });
    };
    for &loc in &Loc::available() {
        for shape in [Shape::Processes, Shape::OneProcess] {
            for mode in Mode::RWDIR {
                for n in ns_list {
                    add(mode, shape, loc, n);
                }
            }
        }
    }
    for n in ns_list {
        add(Mode::Tokio, Shape::OneProcess, Loc::Tmpfs, n);
    }
    let mut rng = Rng::new();
    rng.each_round_shuffled(&mut cells, rounds, |c, _| {
        let (grants, longest, lost) = contend_once(c.mode, c.shape, c.loc, c.n, run);
        let total: u64 = grants.iter().sum();
        c.rate.push(total as f64 / run.as_secs_f64());
        c.longest.push(longest as f64);
        let (mn, mx) = (
            *grants.iter().min().unwrap_or(&0),
            *grants.iter().max().unwrap_or(&0),
        );
        c.minmax
            .push(if mx == 0 { 0.0 } else { mn as f64 / mx as f64 });
        c.lost += lost;
    });
    let mut t = Table::new(&[
        "at",
        "writers",
        "lock, waiting",
        "N",
        "grants/s",
        "× blocking",
        "longest wait",
        "min/max grants",
        "lost",
    ]);
    for c in &cells {
        let base = cells
            .iter()
            .find(|b| {
                b.mode == Mode::Blocking
                    && b.n == c.n
                    && b.loc == c.loc
                    && (b.shape == c.shape || c.mode == Mode::Tokio)
            })
            .expect("blocking cell");
        let ratio = round_ratio(&c.rate, &base.rate);
        t.row(vec![
            if c.mode == Mode::Tokio {
                "in memory".into()
            } else {
                c.loc.to_string()
            },
            match (c.shape, c.mode) {
                (Shape::Processes, _) => "processes",
                (Shape::OneProcess, Mode::Blocking) => "threads, one process",
                (Shape::OneProcess, _) => "tasks, one process",
            }
            .into(),
            c.mode.name().into(),
            c.n.to_string(),
            common::spread(&c.rate, common::sig3),
            common::times(ratio),
            common::spread(&c.longest, dur),
            format!("{:.2}", common::median(&c.minmax)),
            c.lost.to_string(),
        ]);
        if c.loc == Loc::Tmpfs && matches!(c.mode, Mode::Current | Mode::Multi) {
            targets.push(target(
                format!(
                    "contended writers, N={}, {}, {}: grants/s / blocking's",
                    c.n,
                    if c.shape == Shape::Processes {
                        "processes"
                    } else {
                        "one process"
                    },
                    if c.mode == Mode::Current {
                        "current-thread"
                    } else {
                        "multi-thread"
                    }
                ),
                ratio,
                true,
            ));
        }
    }
    t.print();
    let lost: i64 = cells.iter().map(|c| c.lost).sum();
    assert_eq!(lost, 0, "contended writers lost {lost} increments");
}

/// How the readers of [`readers`] read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ReadCell {
    /// `read_async`, reads of the process sharing one reader's file (the default).
    Shared,
    /// `read_async` with `Builder::share_readers(false)`: a file per read.
    Apart,
    /// Threads with `DirLock::read`, sharing.
    Threads,
    /// Tasks on one `tokio::sync::RwLock`.
    Tokio,
}

/// `n` readers of one process read in a loop for `window`: grants per second of all
/// together. Each task or thread has a `DirLock` of its own.
fn readers_once(how: ReadCell, dir: &Path, n: usize, window: Duration) -> f64 {
    let deadline = Instant::now() + window;
    let total: u64 = if how == ReadCell::Threads {
        std::thread::scope(|s| {
            let hs: Vec<_> = (0..n)
                .map(|_| {
                    s.spawn(move || {
                        let lock = DirLock::new(dir).expect("DirLock");
                        let mut k = 0u64;
                        while Instant::now() < deadline {
                            lock.read().expect("read").release().expect("release");
                            std::thread::yield_now();
                            k += 1;
                        }
                        k
                    })
                })
                .collect();
            hs.into_iter().map(|h| h.join().expect("reader")).sum()
        })
    } else {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .expect("runtime");
        let memory = Arc::new(tokio::sync::RwLock::new(()));
        rt.block_on(async {
            let tasks: Vec<_> = (0..n)
                .map(|_| {
                    let (dir, memory) = (dir.to_path_buf(), Arc::clone(&memory));
                    tokio::spawn(async move {
                        let lock = DirLock::builder(&dir)
                            .share_readers(how != ReadCell::Apart)
                            .build()
                            .expect("DirLock");
                        let mut k = 0u64;
                        while Instant::now() < deadline {
                            if how == ReadCell::Tokio {
                                drop(memory.read().await);
                            } else {
                                let g = lock.read_async().await.expect("read_async");
                                g.release().expect("release");
                            }
                            tokio::task::yield_now().await;
                            k += 1;
                        }
                        k
                    })
                })
                .collect();
            let mut sum = 0;
            for t in tasks {
                sum += t.await.expect("reader task");
            }
            sum
        })
    };
    total as f64 / window.as_secs_f64()
}

/// Tasks of one process reading at once (BENCHMARKS.md, "The async API").
fn readers() {
    let (rounds, window, counts): (usize, _, &[usize]) = if quick() {
        (1, Duration::from_millis(50), &[1, 4])
    } else {
        (5, Duration::from_millis(300), &[1, 4, 16])
    };
    println!(
        "## Tasks of one process reading at once
"
    );
    println!(
        "T readers of one process, each with a `DirLock` of its own, loop acquire → release → yield for {} ms; {rounds} rounds, cells in a new random order each. Tasks run on a multi-thread runtime with two workers and yield with `tokio::task::yield_now` (the asynchronous work a task does between two reads); threads use the blocking API and `std::thread::yield_now`. grants/s: all readers together, median [min–max] over rounds. × a file per read: median over rounds of the ratio of the shared tasks to the tasks with `share_readers(false)`.\n",
        window.as_millis()
    );
    struct Cell {
        how: ReadCell,
        loc: Loc,
        n: usize,
        rate: Vec<f64>,
    }
    let mut cells = Vec::new();
    for &loc in &Loc::available() {
        for &n in counts {
            for how in [ReadCell::Shared, ReadCell::Apart, ReadCell::Threads] {
                cells.push(Cell {
                    how,
                    loc,
                    n,
                    rate: vec![],
                });
            }
        }
    }
    for &n in counts {
        cells.push(Cell {
            how: ReadCell::Tokio,
            loc: Loc::Tmpfs,
            n,
            rate: vec![],
        });
    }
    let dirs: Vec<(Loc, tempfile::TempDir)> = Loc::available()
        .into_iter()
        .map(|l| (l, l.fresh_dir()))
        .collect();
    let mut rng = Rng::new();
    rng.each_round_shuffled(&mut cells, rounds, |c, _| {
        let dir = dirs
            .iter()
            .find(|(l, _)| *l == c.loc)
            .map(|(_, d)| d.path())
            .expect("a directory for each location");
        c.rate.push(readers_once(c.how, dir, c.n, window));
    });
    let mut t = Table::new(&[
        "at",
        "T",
        "tasks, shared file",
        "tasks, a file per read",
        "× a file per read",
        "threads, shared file",
        "`tokio::sync::RwLock`",
    ]);
    let rate = |how, loc, n| {
        cells
            .iter()
            .find(|c| c.how == how && c.loc == loc && c.n == n)
            .map(|c| c.rate.clone())
            .unwrap_or_default()
    };
    for &loc in &Loc::available() {
        for &n in counts {
            let (shared, apart) = (
                rate(ReadCell::Shared, loc, n),
                rate(ReadCell::Apart, loc, n),
            );
            let memory = rate(ReadCell::Tokio, Loc::Tmpfs, n);
            t.row(vec![
                loc.to_string(),
                n.to_string(),
                common::spread(&shared, common::sig3),
                common::spread(&apart, common::sig3),
                common::times(round_ratio(&shared, &apart)),
                common::spread(&rate(ReadCell::Threads, loc, n), common::sig3),
                if loc == Loc::Tmpfs {
                    common::spread(&memory, common::sig3)
                } else {
                    "".into()
                },
            ]);
        }
    }
    t.print();
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
        "# rwdir async API benchmarks{}\n",
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
        contention(&mut targets);
    }
    if want("readers") {
        readers();
    }
    println!(
        "Load average at the end: {}; wall time {:.1} s.\n",
        common::loadavg(),
        started.elapsed().as_secs_f64()
    );
    println!(
        "### Issue #15's target (async within {TARGET}× of blocking), measured by this binary\n"
    );
    common::print_targets(&targets);
}
