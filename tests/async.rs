#![cfg(feature = "tokio")]
//! Async acquisition (`DirLock::read_async`, `DirLock::write_async`, feature `tokio`;
//! issue #15), with real processes where processes matter:
//!
//! - a thousand tasks on one current-thread runtime wait for a write lock held by
//!   another process without a thread each, and enter in the protocol's order;
//! - tasks and threads on a multi-thread runtime enter in the protocol's order, writers
//!   alone and readers together;
//! - a waiting acquisition cancelled at its await points (`tokio::time::timeout` over a
//!   range of durations, `tokio::select!`, `JoinHandle::abort`) in every place where it
//!   waits leaves nothing of its own in the state directory, and the next contender gets
//!   the lock at once;
//! - async and blocking waiters of this process and of other processes (one in a pid
//!   namespace of its own, judged by lease) take the lock in turns for a few seconds,
//!   some holding past the lease, and an event log shows no overlap;
//! - an async acquisition outside a runtime is an error, not a panic.
//!
//! Children are this test binary again, in the roles `herd` and `mix`
//! (`RWDIR_ASYNC_ROLE`), or in the script role of `tests/common` (holders driven over a
//! pipe). Readiness is a file, a reply or a counter, never a sleep; sleeps only choose
//! when to cancel, or how long to hold.

mod common;

#[allow(dead_code)]
#[path = "../examples/stress.rs"]
mod stress;

use std::fs::{self, File};
use std::future::Future;
use std::io::{BufRead, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use common::{Child, LONG, dump, non_token_names, state, wait_until};
use nix::sys::signal::Signal;
use rwdir::{DirLock, Error, Holder, Kind, ReadGuard, WriteGuard};

const ROLE_ENV: &str = "RWDIR_ASYNC_ROLE";
const DIR_ENV: &str = "RWDIR_ASYNC_DIR";
const ARGS_ENV: &str = "RWDIR_ASYNC_ARGS";
const LOG_ENV: &str = "RWDIR_ASYNC_LOG";
/// Prefix of a child's answers on stdout.
const REPLY: &str = "@@ ";

#[test]
fn child_entry() {
    common::child_entry_with(ROLE_ENV, &[("herd", herd_child), ("mix", mix_child)]);
}

// ---------------------------------------------------------------------------------
// Children in this file's roles

/// A child in one of this file's roles, answering on stdout. Killed when dropped.
struct Peer {
    name: String,
    proc: std::process::Child,
    stdin: Option<std::process::ChildStdin>,
    lines: Receiver<String>,
    dir: PathBuf,
}

impl Peer {
    /// Starts this binary in `role` on `dir` with `args`; in a pid namespace of its own
    /// (`unshare`, with its own `/proc`) if `own_pidns`.
    fn spawn(
        name: &str,
        role: &str,
        dir: &Path,
        args: &str,
        log: Option<&Path>,
        own_pidns: bool,
    ) -> Peer {
        let exe = std::env::current_exe().expect("current_exe");
        let mut cmd = if own_pidns {
            let mut c = Command::new("unshare");
            c.args(["--pid", "--fork", "--mount-proc", "--kill-child", "--"])
                .arg(&exe);
            c
        } else {
            Command::new(&exe)
        };
        cmd.args(["child_entry", "--exact", "--nocapture", "--test-threads=1"])
            .env(ROLE_ENV, role)
            .env(DIR_ENV, dir)
            .env(ARGS_ENV, args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit());
        if let Some(l) = log {
            cmd.env(LOG_ENV, l);
        }
        let mut proc = cmd.spawn().expect("spawn child");
        let stdin = proc.stdin.take();
        let lines = common::run::lines(proc.stdout.take().expect("child stdout"));
        Peer {
            name: name.to_string(),
            proc,
            stdin,
            lines,
            dir: dir.to_path_buf(),
        }
    }

    fn send(&mut self, line: &str) {
        let stdin = self.stdin.as_mut().expect("stdin open");
        writeln!(stdin, "{line}").expect("write to child");
        stdin.flush().expect("flush");
    }

    /// The next answer within `bound`.
    fn reply_within(&mut self, bound: Duration) -> String {
        let end = Instant::now() + bound;
        loop {
            let left = end.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(line) => {
                    if let Some(i) = line.find(REPLY) {
                        return line[i + REPLY.len()..].to_string();
                    }
                }
                Err(RecvTimeoutError::Timeout) => self.fail(&format!("no answer within {bound:?}")),
                Err(RecvTimeoutError::Disconnected) => {
                    let status = self.proc.wait().ok();
                    self.fail(&format!(
                        "closed its stdout (exit: {status:?}; its stderr is above)"
                    ))
                }
            }
        }
    }

    fn reply(&mut self) -> String {
        self.reply_within(LONG)
    }

    /// Closes stdin and checks that the child exits successfully, within [`LONG`].
    fn finish(mut self) {
        drop(self.stdin.take());
        let end = Instant::now() + LONG;
        loop {
            match self.proc.try_wait().expect("wait") {
                Some(s) if s.success() => return,
                Some(s) => self.fail(&format!("exited with {s}")),
                None if Instant::now() > end => self.fail("did not exit"),
                None => std::thread::sleep(Duration::from_millis(5)),
            }
        }
    }

    fn fail(&mut self, what: &str) -> ! {
        panic!(
            "child {} (pid {}): {what}\n{}:\n{}",
            self.name,
            self.proc.id(),
            state(&self.dir).display(),
            dump(&state(&self.dir))
        );
    }
}

impl Drop for Peer {
    fn drop(&mut self) {
        let _ = self.proc.kill();
        let _ = self.proc.wait();
    }
}

/// A child's answer to its parent.
fn say(line: &str) {
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{REPLY}{line}");
    let _ = out.flush();
}

/// The parent's next line to a child.
fn hear() -> String {
    let mut line = String::new();
    let _ = std::io::stdin().lock().read_line(&mut line);
    line.trim().to_string()
}

fn child_dir() -> PathBuf {
    PathBuf::from(std::env::var_os(DIR_ENV).expect("RWDIR_ASYNC_DIR"))
}

fn child_args() -> Vec<String> {
    std::env::var(ARGS_ENV)
        .unwrap_or_default()
        .split_whitespace()
        .map(str::to_string)
        .collect()
}

/// This process's thread count (`Threads:` in `/proc/self/status`).
fn threads() -> usize {
    fs::read_to_string("/proc/self/status")
        .expect("/proc/self/status")
        .lines()
        .find_map(|l| l.strip_prefix("Threads:"))
        .and_then(|n| n.trim().parse().ok())
        .expect("a Threads: line")
}

/// How many queued writers' files the state directory holds (one `read_dir`).
fn queue_files(st: &Path) -> usize {
    fs::read_dir(st).map_or(0, |rd| {
        rd.filter_map(Result::ok)
            .filter(|e| {
                e.file_name()
                    .to_string_lossy()
                    .starts_with(".pending_lock-")
            })
            .count()
    })
}

/// The state directory in a line: how many files of each kind (a listing of a thousand
/// queue files would drown a failure message).
fn names_summary(st: &Path) -> String {
    let names = common::names(st);
    let count = |p: &str| names.iter().filter(|n| n.starts_with(p)).count();
    format!(
        "{} queue files, {} readers, {} .master_lock, {} others",
        count(".pending_lock-"),
        count(".slave_lock-"),
        count(".master_lock"),
        names.len() - count(".pending_lock-") - count(".slave_lock-") - count(".master_lock")
    )
}

fn current_thread() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime")
}

fn multi_thread(workers: usize) -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(workers)
        .enable_all()
        .build()
        .expect("runtime")
}

/// Polls `cond` from a task until it holds, yielding to the runtime in between;
/// panics after [`LONG`].
async fn until(what: &str, mut cond: impl FnMut() -> bool) {
    let end = Instant::now() + LONG;
    let mut looks = 0u32;
    while !cond() {
        assert!(Instant::now() < end, "not within {LONG:?}: {what}");
        looks += 1;
        if looks < 200 {
            tokio::task::yield_now().await;
        } else {
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    }
}

/// A tiny xorshift generator: reproducible choices without a dependency.
struct Rng(u64);

impl Rng {
    fn new(seed: u64) -> Rng {
        Rng(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % n.max(1)
    }

    fn micros(&mut self, max: u64) -> Duration {
        Duration::from_micros(self.below(max))
    }
}

fn seed_of(id: &str) -> u64 {
    id.bytes().fold(u64::from(std::process::id()), |h, b| {
        h.wrapping_mul(31) ^ u64::from(b)
    })
}

// ---------------------------------------------------------------------------------
// Grants, in order, with exclusion checked at each one

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Grant {
    /// The `n`th writer spawned, and its token.
    Write(usize, u64),
    /// The `n`th reader spawned.
    Read(usize),
}

/// What the waiters of an order test did: started, inside, granted, and what went wrong.
#[derive(Debug, Default)]
struct Tally {
    /// Waiters that began (were polled, or their thread ran).
    started: AtomicUsize,
    writers_in: AtomicUsize,
    readers_in: AtomicUsize,
    /// Readers that ever got in (never decreases).
    readers_entered: AtomicUsize,
    grants: Mutex<Vec<Grant>>,
    faults: Mutex<Vec<String>>,
}

impl Tally {
    fn fault(&self, what: String) {
        self.faults.lock().expect("faults").push(what);
    }

    fn enter_write(&self, n: usize, token: u64) {
        let w = self.writers_in.fetch_add(1, Ordering::SeqCst) + 1;
        let r = self.readers_in.load(Ordering::SeqCst);
        if w != 1 || r != 0 {
            self.fault(format!(
                "writer {n} got in beside {} writers and {r} readers",
                w - 1
            ));
        }
        self.grants
            .lock()
            .expect("grants")
            .push(Grant::Write(n, token));
    }

    fn leave_write(&self) {
        self.writers_in.fetch_sub(1, Ordering::SeqCst);
    }

    fn enter_read(&self, n: usize) {
        self.readers_in.fetch_add(1, Ordering::SeqCst);
        self.readers_entered.fetch_add(1, Ordering::SeqCst);
        let w = self.writers_in.load(Ordering::SeqCst);
        if w != 0 {
            self.fault(format!("reader {n} got in beside {w} writers"));
        }
        self.grants.lock().expect("grants").push(Grant::Read(n));
    }

    fn leave_read(&self) {
        self.readers_in.fetch_sub(1, Ordering::SeqCst);
    }

    /// Checks the grants: the `writers` writers in the order they were spawned (which is
    /// the order of their queue files), with growing tokens, then the `readers` readers,
    /// which wait behind every queued writer; and no fault.
    fn check(&self, writers: usize, readers: usize) -> Result<(), String> {
        let faults = self.faults.lock().expect("faults");
        if !faults.is_empty() {
            return Err(format!(
                "{} faults, the first ones: {:?}",
                faults.len(),
                &faults[..faults.len().min(10)]
            ));
        }
        let grants = self.grants.lock().expect("grants");
        if grants.len() != writers + readers {
            return Err(format!(
                "{} grants, expected {}",
                grants.len(),
                writers + readers
            ));
        }
        let mut last_token = 0;
        for (i, g) in grants.iter().enumerate() {
            match *g {
                Grant::Write(n, token) if i < writers && n == i => {
                    if token <= last_token {
                        return Err(format!("writer {n}: token {token} after {last_token}"));
                    }
                    last_token = token;
                }
                Grant::Read(_) if i >= writers => {}
                _ => {
                    let around = &grants[i.saturating_sub(3)..(i + 4).min(grants.len())];
                    return Err(format!(
                        "grant {i} is {g:?}: expected writer {i} (writers in queue order, then \
                         the readers); grants {}.. are {around:?}",
                        i.saturating_sub(3)
                    ));
                }
            }
        }
        Ok(())
    }
}

/// Waits (bounded, yielding) until every one of `readers` readers got in: readers share.
async fn all_readers_in(t: &Tally, readers: usize) {
    until("every reader in at once", || {
        t.readers_entered.load(Ordering::SeqCst) >= readers
    })
    .await;
}

async fn task_writer(lock: DirLock, t: Arc<Tally>, n: usize) {
    t.started.fetch_add(1, Ordering::SeqCst);
    match lock.write_async().await {
        Ok(g) => {
            t.enter_write(n, g.token().expect("token"));
            // Held across a yield: the runtime runs others meanwhile.
            tokio::task::yield_now().await;
            t.leave_write();
            if let Err(e) = g.release() {
                t.fault(format!("writer {n}: release: {e}"));
            }
        }
        Err(e) => t.fault(format!("writer {n}: write_async: {e}")),
    }
}

async fn task_reader(lock: DirLock, t: Arc<Tally>, n: usize, readers: usize) {
    t.started.fetch_add(1, Ordering::SeqCst);
    match lock.read_async().await {
        Ok(g) => {
            t.enter_read(n);
            all_readers_in(&t, readers).await;
            t.leave_read();
            if let Err(e) = g.release() {
                t.fault(format!("reader {n}: release: {e}"));
            }
        }
        Err(e) => t.fault(format!("reader {n}: read_async: {e}")),
    }
}

// ---------------------------------------------------------------------------------
// 1. A thousand tasks on one thread

/// The `herd` role (`WRITERS READERS`): one current-thread runtime. After one
/// acquisition (so that the heartbeat thread exists) it says `ready BASELINE` with its
/// thread count; on `go` (the parent's holder then holds the write lock) it spawns the
/// writers one at a time, each once its queue file is there, then the readers, and says
/// `waiting PEAK BASELINE` once all of them wait; when all were served, `ok ...` or
/// `err ...`.
fn herd_child() {
    let _ = nix::sys::prctl::set_pdeathsig(Signal::SIGKILL);
    let dir = child_dir();
    let args = child_args();
    let writers: usize = args[0].parse().expect("WRITERS");
    let readers: usize = args[1].parse().expect("READERS");
    let rt = current_thread();
    // Every pause of an async wait ends in a listing (its waits are never covered by a
    // watch of the one file and a pidfd), so N waiters list an N-file directory about
    // log2(T / floor) times each in T seconds: O(N²). A 1 s floor keeps the 1,000
    // waiters' listings to a few seconds of CPU; hand-offs come from events anyway.
    let lock = DirLock::builder(&dir)
        .poll_interval(Duration::from_secs(1), Duration::from_secs(1))
        .build()
        .expect("lock");
    rt.block_on(async {
        let g = lock.read_async().await.expect("first read");
        g.release().expect("release");
    });
    let baseline = threads();
    say(&format!("ready {baseline}"));
    assert_eq!(hear(), "go");
    let answer = rt.block_on(herd(lock, &dir, writers, readers, baseline));
    say(&answer);
}

async fn herd(
    lock: DirLock,
    dir: &Path,
    writers: usize,
    readers: usize,
    baseline: usize,
) -> String {
    let st = state(dir);
    let t = Arc::new(Tally::default());
    let base = queue_files(&st);
    let mut peak = threads();
    let mut tasks = Vec::with_capacity(writers + readers);
    let spawning = Instant::now();
    for n in 0..writers {
        tasks.push(tokio::spawn(task_writer(lock.clone(), Arc::clone(&t), n)));
        until(&format!("writer {n}'s queue file"), || {
            queue_files(&st) > base + n
        })
        .await;
        let files = queue_files(&st);
        if files != base + n + 1 {
            return format!(
                "err after writer {n}: {files} queue files, expected {}",
                base + n + 1
            );
        }
        peak = peak.max(threads());
        if peak > baseline + 2 {
            return format!(
                "err {peak} threads once {} tasks wait, {baseline} before",
                n + 1
            );
        }
    }
    for n in 0..readers {
        tasks.push(tokio::spawn(task_reader(
            lock.clone(),
            Arc::clone(&t),
            n,
            readers,
        )));
    }
    // Each task bumps `started` at its first poll and is pending from then on (the
    // parent's holder holds): every one of them waits.
    until("every task polled", || {
        t.started.load(Ordering::SeqCst) == writers + readers
    })
    .await;
    // Through their first pauses, which end in looks.
    for _ in 0..20 {
        tokio::time::sleep(Duration::from_millis(10)).await;
        peak = peak.max(threads());
    }
    let spawned = spawning.elapsed();
    if !t.grants.lock().expect("grants").is_empty() {
        return "err granted while the other process holds the write lock".to_string();
    }
    if peak > baseline + 2 {
        return format!(
            "err {peak} threads while {} tasks wait, {baseline} before",
            writers + readers
        );
    }
    say(&format!("waiting {peak} {baseline}"));
    let serving = Instant::now();
    let end = tokio::time::Instant::now() + LONG * 3;
    for task in tasks {
        match tokio::time::timeout_at(end, task).await {
            Ok(Ok(())) => {}
            Ok(Err(e)) => return format!("err a task failed: {e}"),
            Err(_) => {
                let grants = t.grants.lock().expect("grants");
                return format!(
                    "err not all served within {:?}: {} grants, the first ones {:?}; state: {}",
                    LONG * 3,
                    grants.len(),
                    &grants[..grants.len().min(8)],
                    names_summary(&st)
                );
            }
        }
    }
    match t.check(writers, readers) {
        Ok(()) => format!(
            "ok {writers} writers and {readers} readers; threads {peak} (baseline {baseline}); \
             spawned in {spawned:?}, served in {:?}",
            serving.elapsed()
        ),
        Err(e) => format!("err {e}"),
    }
}

/// A thousand tasks on one current-thread runtime, in a process of their own, wait for
/// a write lock that another process holds: no thread is added for them (at most 2 over
/// the process's count after its first lock operation, which started the heartbeat
/// thread), and once the holder leaves the 1,000 writers get in one at a time in the
/// order they queued (each was spawned once the previous one's queue file was there),
/// then the 24 readers, all at once.
#[test]
fn a_thousand_tasks_on_one_thread_wait_without_threads_and_enter_in_queue_order() {
    // On tmpfs where there is one: listing a directory of a thousand files there costs
    // half what it costs on ext4.
    let dir = if Path::new("/dev/shm").is_dir() {
        tempfile::Builder::new()
            .prefix("rwdir-test-")
            .tempdir_in("/dev/shm")
            .expect("tempdir")
    } else {
        common::tempdir()
    };
    let mut holder = Child::spawn("H", dir.path());
    let mut herd = Peer::spawn("herd", "herd", dir.path(), "1000 24", None, false);
    let ready = herd.reply();
    assert!(ready.starts_with("ready "), "{ready}");
    holder.ok("write");
    herd.send("go");
    let waiting = herd.reply_within(LONG * 4);
    assert!(waiting.starts_with("waiting "), "{waiting}");
    holder.ok("release");
    let done = herd.reply_within(LONG * 4);
    assert!(done.starts_with("ok "), "{done}");
    eprintln!("herd: {done}");
    herd.finish();
    holder.finish();
    common::assert_only_token(dir.path());
}

// ---------------------------------------------------------------------------------
// 2. Order and exclusion on a multi-thread runtime

/// Who waits, in an order test on a multi-thread runtime.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Waiting {
    WriterTask,
    WriterThread,
    ReaderTask,
    ReaderThread,
}

/// One round: another process holds (`write`, or `read`, where the first writer takes
/// `.master_lock` and waits for it in W5); tasks on a 2-worker runtime and threads of
/// this process line up in a mixed, seeded order, each writer once it shows in `status`
/// (its queue file, or `.master_lock` for the first one behind a reader), each reader
/// once it ran. Then the holder leaves.
fn order_round(hold: &str, seed: u64) {
    let dir = common::tempdir();
    let lock = common::lock(dir.path());
    let mut holder = Child::spawn("H", dir.path());
    holder.ok(hold);
    let rt = multi_thread(2);
    let t = Arc::new(Tally::default());
    let me = std::process::id();
    let ours = || {
        common::writer_pids(&lock)
            .iter()
            .filter(|&&p| p == me)
            .count()
    };
    let mut rng = Rng::new(seed);
    let mut plan: Vec<Waiting> = (0..32)
        .map(|_| match rng.below(8) {
            0..=2 => Waiting::WriterTask,
            3 => Waiting::WriterThread,
            4..=6 => Waiting::ReaderTask,
            _ => Waiting::ReaderThread,
        })
        .collect();
    // A writer first: a reader ahead of every writer would get in beside a reading
    // holder, and wait there for readers that queue behind the writers.
    plan[0] = match plan[0] {
        Waiting::ReaderTask => Waiting::WriterTask,
        Waiting::ReaderThread => Waiting::WriterThread,
        w => w,
    };
    let readers = plan
        .iter()
        .filter(|w| matches!(w, Waiting::ReaderTask | Waiting::ReaderThread))
        .count();
    let (done_tx, done) = std::sync::mpsc::channel::<()>();
    let (mut w, mut r) = (0, 0);
    for (i, &who) in plan.iter().enumerate() {
        let (lock, tally, done_tx) = (lock.clone(), Arc::clone(&t), done_tx.clone());
        match who {
            Waiting::WriterTask => {
                rt.spawn(async move {
                    task_writer(lock, tally, w).await;
                    let _ = done_tx.send(());
                });
            }
            Waiting::ReaderTask => {
                rt.spawn(async move {
                    task_reader(lock, tally, r, readers).await;
                    let _ = done_tx.send(());
                });
            }
            Waiting::WriterThread => {
                std::thread::spawn(move || {
                    thread_writer(&lock, &tally, w);
                    let _ = done_tx.send(());
                });
            }
            Waiting::ReaderThread => {
                std::thread::spawn(move || {
                    thread_reader(&lock, &tally, r, readers);
                    let _ = done_tx.send(());
                });
            }
        }
        if matches!(who, Waiting::WriterTask | Waiting::WriterThread) {
            w += 1;
            wait_until(
                &format!("writer {} ({who:?}) shows", w - 1),
                dir.path(),
                || ours() >= w,
            );
            assert_eq!(ours(), w, "writers of ours in status");
        } else {
            r += 1;
            wait_until(
                &format!("reader {} ({who:?}) ran", r - 1),
                dir.path(),
                || t.started.load(Ordering::SeqCst) > i,
            );
        }
    }
    assert!(
        t.grants.lock().expect("grants").is_empty(),
        "granted while H holds"
    );
    holder.ok("release");
    for _ in &plan {
        if done.recv_timeout(LONG * 2).is_err() {
            panic!(
                "hold {hold}: not all served; grants {:?}\n{}",
                t.grants.lock().expect("grants"),
                dump(&state(dir.path()))
            );
        }
    }
    if let Err(e) = t.check(w, r) {
        panic!("hold {hold}, plan {plan:?}: {e}");
    }
    holder.finish();
    drop(rt);
    common::assert_only_token(dir.path());
}

fn thread_writer(lock: &DirLock, t: &Tally, n: usize) {
    t.started.fetch_add(1, Ordering::SeqCst);
    match lock.write() {
        Ok(g) => {
            t.enter_write(n, g.token().expect("token"));
            std::thread::yield_now();
            t.leave_write();
            if let Err(e) = g.release() {
                t.fault(format!("writer {n}: release: {e}"));
            }
        }
        Err(e) => t.fault(format!("writer {n}: write: {e}")),
    }
}

fn thread_reader(lock: &DirLock, t: &Tally, n: usize, readers: usize) {
    t.started.fetch_add(1, Ordering::SeqCst);
    match lock.read() {
        Ok(g) => {
            t.enter_read(n);
            let end = Instant::now() + LONG;
            while t.readers_entered.load(Ordering::SeqCst) < readers {
                if Instant::now() > end {
                    t.fault(format!(
                        "reader {n}: the other readers did not get in beside it"
                    ));
                    break;
                }
                std::thread::sleep(Duration::from_millis(1));
            }
            t.leave_read();
            if let Err(e) = g.release() {
                t.fault(format!("reader {n}: release: {e}"));
            }
        }
        Err(e) => t.fault(format!("reader {n}: read: {e}")),
    }
}

/// Tasks on a multi-thread runtime and threads of the same process, writers and readers
/// in a mixed order, wait for a lock another process holds (write, then read): the
/// writers get in one at a time in queue order, whether tasks or threads, with growing
/// tokens, then the readers, all at once.
#[test]
fn tasks_and_threads_on_a_multi_thread_runtime_enter_in_queue_order() {
    order_round("write", 1);
    order_round("read", 2);
}

// ---------------------------------------------------------------------------------
// 3. Cancellation at every await point

/// Where the cancelled acquisition waits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Scene {
    /// (a) A writer queued (W2) behind a write lock held by another process: it owns
    /// its queue file.
    QueuedWriter,
    /// (a) The same, queued behind another process's queued writer (not first).
    WriterBehindQueue,
    /// (b) A writer that made `.master_lock` and waits (W5) for another process's
    /// reader, without a queue file (V6's fast path).
    DrainingWriter,
    /// (b) The same after queueing: it owns `.master_lock` and its queue file.
    DrainingQueuedWriter,
    /// (c) A reader waiting behind a held writer.
    ReaderBehindWriter,
    /// (d) A reader waiting behind a queued writer of another process.
    ReaderBehindQueue,
    /// (e) A writer in the breaker's first step (B0): `.master_lock` is dead, and a
    /// live process's breaker marker is there. It owns its queue file. (B2, a breaker
    /// that made its marker and waits for a younger live one, is reached only by a
    /// race between two breakers' B0 and B1: not staged here.)
    WriterBehindBreaker,
    /// (e) A reader in B0.
    ReaderBehindBreaker,
}

impl Scene {
    fn writes(self) -> bool {
        matches!(
            self,
            Scene::QueuedWriter
                | Scene::WriterBehindQueue
                | Scene::DrainingWriter
                | Scene::DrainingQueuedWriter
                | Scene::WriterBehindBreaker
        )
    }

    /// The files the waiter owns while it waits: (a queue file, `.master_lock`).
    fn owns(self) -> (bool, bool) {
        match self {
            Scene::QueuedWriter | Scene::WriterBehindQueue | Scene::WriterBehindBreaker => {
                (true, false)
            }
            Scene::DrainingWriter => (false, true),
            Scene::DrainingQueuedWriter => (true, true),
            Scene::ReaderBehindWriter | Scene::ReaderBehindQueue | Scene::ReaderBehindBreaker => {
                (false, false)
            }
        }
    }
}

/// How the waiting future is cancelled.
#[derive(Debug, Clone, Copy)]
enum Way {
    /// `tokio::time::timeout` on a current-thread runtime.
    Timeout(Duration),
    /// `select!` (biased) against a future that is ready at once: dropped after one poll.
    SelectReady,
    /// `select!` against a `tokio::time::sleep`.
    SelectSleep(Duration),
    /// `select!` against a channel that another thread fires once the waiter waits
    /// (its files are there; a reader: once it ran).
    SelectWhenWaiting,
    /// `JoinHandle::abort` on a multi-thread runtime, right after the spawn.
    AbortAtOnce,
    /// Abort once the waiter waits.
    AbortWhenWaiting,
    /// Abort this long after the task first ran.
    AbortAfter(Duration),
}

fn ways() -> Vec<Way> {
    let us = Duration::from_micros;
    let ms = Duration::from_millis;
    let mut v: Vec<Way> = [
        us(0),
        us(1),
        us(10),
        us(100),
        ms(1),
        ms(2),
        ms(5),
        ms(10),
        ms(20),
        ms(50),
        ms(150),
    ]
    .into_iter()
    .map(Way::Timeout)
    .collect();
    v.extend([
        Way::SelectReady,
        Way::SelectSleep(ms(3)),
        Way::SelectSleep(ms(30)),
        Way::SelectWhenWaiting,
        Way::AbortAtOnce,
        Way::AbortWhenWaiting,
        Way::AbortAfter(ms(2)),
        Way::AbortAfter(ms(40)),
    ]);
    v
}

/// What a waiting future gave, should it ever complete.
#[derive(Debug)]
#[allow(dead_code)] // only shown in panics
enum Got {
    Read(ReadGuard),
    Write(WriteGuard),
}

/// The acquisition under test; sets `polled` at its first poll.
async fn waiter(lock: DirLock, write: bool, polled: Arc<AtomicBool>) -> rwdir::Result<Got> {
    polled.store(true, Ordering::SeqCst);
    if write {
        lock.write_async().await.map(Got::Write)
    } else {
        lock.read_async().await.map(Got::Read)
    }
}

/// Whether the waiter of `scene` waits, as far as can be seen: it ran, and exactly the
/// files it owns while it waits ([`Scene::owns`]) are there beside those of `before`.
fn is_waiting(scene: Scene, st: &Path, before: &[String], polled: &AtomicBool) -> bool {
    if !polled.load(Ordering::SeqCst) {
        return false;
    }
    let new: Vec<String> = non_token_names(st)
        .into_iter()
        .filter(|n| !before.contains(n))
        .collect();
    let queue = new
        .iter()
        .filter(|n| n.starts_with(".pending_lock-"))
        .count();
    let master = new.iter().filter(|n| *n == ".master_lock").count();
    let (q, m) = scene.owns();
    new.len() == queue + master && queue == usize::from(q) && master == usize::from(m)
}

/// A scene's processes and lock: the holder (and a queued writer) in other processes.
struct Stage {
    scene: Scene,
    dir: tempfile::TempDir,
    st: PathBuf,
    lock: DirLock,
    holder: Child,
    queued: Option<Child>,
    /// The breaker scenes: a dead process's record, for `.master_lock`, and the
    /// holder's (alive), for the breaker's marker.
    dead: Option<Holder>,
    live: Option<Holder>,
    marker: Option<PathBuf>,
}

/// `holder`'s identity in a record of `kind`, with a fresh nonce.
fn forge(holder: &Holder, kind: Kind) -> String {
    let mut h = holder.clone();
    h.kind = kind;
    h.nonce = uuid::Uuid::new_v4();
    h.format()
}

/// The record of the reader file of process `pid`.
fn reader_record(lock: &DirLock, pid: u32) -> Holder {
    lock.status()
        .expect("status")
        .readers
        .into_iter()
        .filter_map(|e| e.holder)
        .find(|h| h.pid == pid)
        .expect("the child's reader record")
}

impl Stage {
    fn new(scene: Scene) -> Stage {
        let dir = common::tempdir();
        let st = state(dir.path());
        let lock = common::lock(dir.path());
        let mut holder = Child::spawn("H", dir.path());
        let queued = matches!(scene, Scene::WriterBehindQueue | Scene::ReaderBehindQueue)
            .then(|| Child::spawn("Q", dir.path()));
        let (mut dead, mut live) = (None, None);
        if matches!(
            scene,
            Scene::WriterBehindBreaker | Scene::ReaderBehindBreaker
        ) {
            let mut doomed = Child::spawn("doomed", dir.path());
            doomed.ok("read");
            dead = Some(reader_record(&lock, doomed.pid()));
            doomed.kill();
            holder.ok("read");
            live = Some(reader_record(&lock, holder.pid()));
            holder.ok("release");
            lock.cleanup().expect("cleanup");
            assert!(non_token_names(&st).is_empty(), "{}", dump(&st));
        }
        Stage {
            scene,
            dir,
            st,
            lock,
            holder,
            queued,
            dead,
            live,
            marker: None,
        }
    }

    /// Puts the holder (and the queued writer) in place.
    fn arm(&mut self) {
        match self.scene {
            Scene::QueuedWriter | Scene::ReaderBehindWriter => {
                self.holder.ok("write");
            }
            Scene::DrainingWriter => {
                self.holder.ok("read");
            }
            Scene::DrainingQueuedWriter => {
                // A write that finds a writer in the way clears the fast-path hint: the
                // next write queues first.
                self.holder.ok("write");
                let e = self.lock.try_write().expect_err("H holds");
                assert_eq!(e.kind(), std::io::ErrorKind::WouldBlock, "{e}");
                self.holder.ok("downgrade");
            }
            Scene::WriterBehindQueue | Scene::ReaderBehindQueue => {
                self.holder.ok("write");
                let q = self.queued.as_mut().expect("Q");
                q.send("write");
                let pid = q.pid();
                let lock = &self.lock;
                wait_until("Q queued", self.dir.path(), || {
                    common::pending_pids(lock).contains(&pid)
                });
            }
            Scene::WriterBehindBreaker | Scene::ReaderBehindBreaker => {
                let dead = self.dead.as_ref().expect("dead record");
                let live = self.live.as_ref().expect("live record");
                common::plant(
                    &self.st.join(".master_lock"),
                    forge(dead, Kind::Write).as_bytes(),
                );
                let marker = self.st.join(format!(
                    ".break-{}-{}",
                    common::now_ns(),
                    uuid::Uuid::new_v4()
                ));
                common::plant(&marker, forge(live, Kind::Break).as_bytes());
                self.marker = Some(marker);
            }
        }
    }

    /// Starts the waiter and cancels it in `way`; panics if it completes.
    fn cancel(
        &self,
        way: Way,
        ct: &tokio::runtime::Runtime,
        mt: &tokio::runtime::Runtime,
        before: &[String],
    ) {
        let write = self.scene.writes();
        let polled = Arc::new(AtomicBool::new(false));
        let fut = waiter(self.lock.clone(), write, Arc::clone(&polled));
        let waiting = {
            let (st, before, polled) = (self.st.clone(), before.to_vec(), Arc::clone(&polled));
            let scene = self.scene;
            move || is_waiting(scene, &st, &before, &polled)
        };
        let completed = |r: &dyn std::fmt::Debug| -> ! {
            panic!(
                "{:?}, {way:?}: the waiter completed: {r:?}\n{}",
                self.scene,
                dump(&self.st)
            )
        };
        match way {
            Way::Timeout(d) => {
                if let Ok(r) = ct.block_on(async { tokio::time::timeout(d, fut).await }) {
                    completed(&r);
                }
            }
            Way::SelectReady => {
                let r = ct.block_on(async {
                    tokio::select! {
                        biased;
                        r = fut => Some(r),
                        () = std::future::ready(()) => None,
                    }
                });
                if let Some(r) = r {
                    completed(&r);
                }
            }
            Way::SelectSleep(d) => {
                let r = ct.block_on(async {
                    tokio::select! {
                        r = fut => Some(r),
                        () = tokio::time::sleep(d) => None,
                    }
                });
                if let Some(r) = r {
                    completed(&r);
                }
            }
            Way::SelectWhenWaiting => {
                let (tx, rx) = tokio::sync::oneshot::channel::<()>();
                let dir = self.dir.path().to_path_buf();
                let fire = std::thread::spawn(move || {
                    wait_until("the waiter waits", &dir, waiting);
                    let _ = tx.send(());
                });
                let r = ct.block_on(async {
                    tokio::select! {
                        r = fut => Some(r),
                        _ = rx => None,
                    }
                });
                fire.join().expect("the firing thread");
                if let Some(r) = r {
                    completed(&r);
                }
            }
            Way::AbortAtOnce | Way::AbortWhenWaiting | Way::AbortAfter(_) => {
                let task = mt.spawn(fut);
                match way {
                    Way::AbortWhenWaiting => {
                        wait_until("the waiter waits", self.dir.path(), waiting)
                    }
                    Way::AbortAfter(d) => {
                        wait_until("the waiter ran", self.dir.path(), || {
                            polled.load(Ordering::SeqCst)
                        });
                        std::thread::sleep(d);
                    }
                    _ => {}
                }
                task.abort();
                match mt.block_on(task) {
                    Err(e) if e.is_cancelled() => {}
                    other => completed(&other),
                }
            }
        }
    }

    /// The holder (and the queued writer) leave, and the next contender gets the lock
    /// at once: nothing of the cancelled waiter is in the way.
    fn release_and_check(&mut self, way: Way) {
        let ctx = format!("{:?}, after {way:?}", self.scene);
        match self.scene {
            Scene::QueuedWriter | Scene::ReaderBehindWriter => {
                self.holder.ok("release");
            }
            Scene::DrainingWriter | Scene::DrainingQueuedWriter => {
                // No `.master_lock` left: a new reader joins the holder's read lock.
                let r = self.lock.try_read().unwrap_or_else(|e| {
                    panic!("{ctx}: a reader cannot join: {e}\n{}", dump(&self.st))
                });
                r.release().expect("release");
                self.holder.ok("release");
            }
            Scene::WriterBehindQueue | Scene::ReaderBehindQueue => {
                self.holder.ok("release");
                let q = self.queued.as_mut().expect("Q");
                let got = q.reply();
                assert!(got.starts_with("ok write"), "{ctx}: Q: {got}");
                q.ok("release");
            }
            Scene::WriterBehindBreaker | Scene::ReaderBehindBreaker => {
                // The live breaker is done (without removing anything, as one that
                // found the file replaced would be).
                fs::remove_file(self.marker.take().expect("marker")).expect("remove the marker");
            }
        }
        let w = self
            .lock
            .try_write()
            .unwrap_or_else(|e| panic!("{ctx}: try_write: {e}\n{}", dump(&self.st)));
        w.release().expect("release");
        let r = self
            .lock
            .try_read()
            .unwrap_or_else(|e| panic!("{ctx}: try_read: {e}\n{}", dump(&self.st)));
        r.release().expect("release");
        assert!(
            non_token_names(&self.st).is_empty(),
            "{ctx}:\n{}",
            dump(&self.st)
        );
    }
}

/// Cancels the waiter of `scene` in every [`Way`], each time checking that the state
/// directory holds exactly what it held before the waiter started (the holders' files;
/// fencing tokens aside, which a writer in W5 has moved on), and that the next
/// contender gets the lock at once once the holders left.
fn cancel_everywhere(scene: Scene) {
    let mut stage = Stage::new(scene);
    let ct = current_thread();
    let mt = multi_thread(2);
    for way in ways() {
        stage.arm();
        let before = non_token_names(&stage.st);
        stage.cancel(way, &ct, &mt, &before);
        let after = non_token_names(&stage.st);
        assert_eq!(
            after,
            before,
            "{scene:?}, cancelled by {way:?}: the state directory changed:\n{}",
            dump(&stage.st)
        );
        stage.release_and_check(way);
    }
    stage.holder.finish();
    if let Some(q) = stage.queued.take() {
        q.finish();
    }
}

#[test]
fn cancelled_writer_queued_behind_a_writer_leaves_nothing() {
    cancel_everywhere(Scene::QueuedWriter);
}

#[test]
fn cancelled_writer_queued_behind_a_queued_writer_leaves_nothing() {
    cancel_everywhere(Scene::WriterBehindQueue);
}

#[test]
fn cancelled_writer_waiting_for_a_reader_leaves_no_master_lock() {
    cancel_everywhere(Scene::DrainingWriter);
}

#[test]
fn cancelled_queued_writer_waiting_for_a_reader_leaves_nothing() {
    cancel_everywhere(Scene::DrainingQueuedWriter);
}

#[test]
fn cancelled_reader_behind_a_writer_leaves_nothing() {
    cancel_everywhere(Scene::ReaderBehindWriter);
}

#[test]
fn cancelled_reader_behind_a_queued_writer_leaves_nothing() {
    cancel_everywhere(Scene::ReaderBehindQueue);
}

#[test]
fn cancelled_writer_waiting_for_a_breaker_leaves_nothing() {
    cancel_everywhere(Scene::WriterBehindBreaker);
}

#[test]
fn cancelled_reader_waiting_for_a_breaker_leaves_nothing() {
    cancel_everywhere(Scene::ReaderBehindBreaker);
}

// ---------------------------------------------------------------------------------
// 4. Async and blocking waiters in several processes

/// The lease of every lock in the mixed stress: contenders in another pid namespace
/// judge by it, so a holder that outlives it is kept only by the heartbeat.
const MIX_LEASE: Duration = Duration::from_millis(1500);
/// A long hold: past the lease.
const MIX_LONG_HOLD: Duration = Duration::from_millis(1800);
/// How long the mixed stress runs.
const MIX_RUN: Duration = Duration::from_secs(6);

/// One process's part in the mixed stress.
struct Mix {
    lock: DirLock,
    log: File,
    prefix: String,
    start: SystemTime,
    end: SystemTime,
    /// When (after `start`) the first async writer holds once for [`MIX_LONG_HOLD`].
    long_write_at: Option<Duration>,
    /// When the first async reader does.
    long_read_at: Option<Duration>,
    async_grants: AtomicU64,
    blocking_grants: AtomicU64,
    /// Async acquisitions cancelled by a timeout.
    cancelled: AtomicU64,
    /// Blocking acquisitions that timed out.
    timed_out: AtomicU64,
    long_holds: AtomicU64,
}

impl Mix {
    fn new(
        dir: &Path,
        log: &Path,
        prefix: &str,
        start: SystemTime,
        long_write_at: Option<Duration>,
        long_read_at: Option<Duration>,
    ) -> Mix {
        let lock = DirLock::builder(dir)
            .lease(MIX_LEASE)
            .poll_interval(Duration::from_millis(1), Duration::from_millis(20))
            .build()
            .expect("lock");
        Mix {
            lock,
            log: fs::OpenOptions::new()
                .append(true)
                .open(log)
                .expect("open the log"),
            prefix: prefix.to_string(),
            start,
            end: start + MIX_RUN,
            long_write_at,
            long_read_at,
            async_grants: AtomicU64::new(0),
            blocking_grants: AtomicU64::new(0),
            cancelled: AtomicU64::new(0),
            timed_out: AtomicU64::new(0),
            long_holds: AtomicU64::new(0),
        }
    }

    /// One line `<ns> <id> <event>`, in one `write(2)` to the `O_APPEND` log (the format
    /// of `examples/stress.rs`, whose checker replays it).
    fn log(&self, id: &str, event: &str) {
        let ns = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .expect("time")
            .as_nanos();
        let line = format!("{ns} {id} {}\n", event.replace('\n', " "));
        let n = (&self.log)
            .write(line.as_bytes())
            .expect("append to the log");
        assert_eq!(n, line.len(), "short append");
    }

    fn running(&self) -> bool {
        SystemTime::now() < self.end
    }

    /// Whether a long hold planned at `at` is due.
    fn due(&self, at: Option<Duration>) -> bool {
        at.is_some_and(|a| SystemTime::now() >= self.start + a)
    }

    fn hold(&self, long: &mut Option<Duration>, rng: &mut Rng, max_us: u64) -> Duration {
        if self.due(*long) {
            *long = None;
            self.long_holds.fetch_add(1, Ordering::SeqCst);
            MIX_LONG_HOLD
        } else {
            rng.micros(max_us)
        }
    }

    fn summary(&self) -> String {
        let n = |a: &AtomicU64| a.load(Ordering::SeqCst);
        format!(
            "async {} blocking {} cancelled {} timed_out {} long {}",
            n(&self.async_grants),
            n(&self.blocking_grants),
            n(&self.cancelled),
            n(&self.timed_out),
            n(&self.long_holds)
        )
    }

    /// After a write hold: a check, then a release, or (one in five) a downgrade to a
    /// reader held a little longer. `D` is logged before `downgrade` (readers may get in
    /// as soon as `.master_lock` is gone).
    fn leave_write(&self, id: &str, g: WriteGuard, rng: &mut Rng) -> Option<ReadGuard> {
        if let Err(e) = g.check() {
            self.log(id, &format!("L check: {e}"));
        }
        if rng.below(5) == 0 {
            self.log(id, "D");
            match g.downgrade() {
                Ok(r) => return Some(r),
                Err(e) => {
                    self.log(id, &format!("L downgrade: {e}"));
                    self.log(id, "X R");
                }
            }
        } else {
            self.log(id, "X W");
            if let Err(e) = g.release() {
                self.log(id, &format!("L release: {e}"));
            }
        }
        None
    }

    fn leave_read(&self, id: &str, g: ReadGuard) {
        if let Err(e) = g.check() {
            self.log(id, &format!("L check: {e}"));
        }
        self.log(id, "X R");
        if let Err(e) = g.release() {
            self.log(id, &format!("L release: {e}"));
        }
    }
}

/// An async writer: think, `write_async` (one in four under a `timeout` of up to 8 ms,
/// which cancels it mid-wait), hold, leave.
async fn mix_async_writer(m: Arc<Mix>, k: usize) -> Result<(), String> {
    let id = format!("{}aw{k}", m.prefix);
    let mut rng = Rng::new(seed_of(&id));
    let mut long = if k == 0 { m.long_write_at } else { None };
    while m.running() {
        // Think outside the lock, so that readers get a turn (writers have priority).
        tokio::time::sleep(Duration::from_millis(5) + rng.micros(30_000)).await;
        // The start of an attempt, for a reader of the log (the checker needs no `Q`).
        m.log(&id, "S");
        let acquire = m.lock.write_async();
        let got = if rng.below(4) == 0 {
            match tokio::time::timeout(rng.micros(8_000), acquire).await {
                Ok(r) => r,
                Err(_) => {
                    m.cancelled.fetch_add(1, Ordering::SeqCst);
                    continue;
                }
            }
        } else {
            acquire.await
        };
        let g = match got {
            Ok(g) => g,
            Err(e @ Error::LockLost { .. }) => {
                m.log(&id, &format!("L write: {e}"));
                continue;
            }
            Err(e) => return Err(format!("{id}: write_async: {e}")),
        };
        m.async_grants.fetch_add(1, Ordering::SeqCst);
        m.log(&id, &format!("E W {}", g.token().expect("token")));
        tokio::time::sleep(m.hold(&mut long, &mut rng, 2_000)).await;
        if let Some(r) = m.leave_write(&id, g, &mut rng) {
            tokio::time::sleep(rng.micros(2_000)).await;
            m.leave_read(&id, r);
        }
    }
    Ok(())
}

/// An async reader: think, `read_async` (one in four under a `timeout`), hold, leave.
async fn mix_async_reader(m: Arc<Mix>, k: usize) -> Result<(), String> {
    let id = format!("{}ar{k}", m.prefix);
    let mut rng = Rng::new(seed_of(&id));
    let mut long = if k == 0 { m.long_read_at } else { None };
    while m.running() {
        tokio::time::sleep(rng.micros(3_000)).await;
        let acquire = m.lock.read_async();
        let got = if rng.below(4) == 0 {
            match tokio::time::timeout(rng.micros(8_000), acquire).await {
                Ok(r) => r,
                Err(_) => {
                    m.cancelled.fetch_add(1, Ordering::SeqCst);
                    continue;
                }
            }
        } else {
            acquire.await
        };
        let g = got.map_err(|e| format!("{id}: read_async: {e}"))?;
        m.async_grants.fetch_add(1, Ordering::SeqCst);
        m.log(&id, "E R");
        tokio::time::sleep(m.hold(&mut long, &mut rng, 5_000)).await;
        m.leave_read(&id, g);
    }
    Ok(())
}

/// A blocking writer thread: as the async one, with `write` and `try_write_for`.
fn mix_thread_writer(m: &Mix, k: usize) -> Result<(), String> {
    let id = format!("{}tw{k}", m.prefix);
    let mut rng = Rng::new(seed_of(&id));
    while m.running() {
        std::thread::sleep(Duration::from_millis(5) + rng.micros(30_000));
        m.log(&id, "S");
        let got = if rng.below(4) == 0 {
            m.lock.try_write_for(rng.micros(8_000))
        } else {
            m.lock.write()
        };
        let g = match got {
            Ok(g) => g,
            Err(Error::TimedOut { .. }) => {
                m.timed_out.fetch_add(1, Ordering::SeqCst);
                continue;
            }
            Err(e @ Error::LockLost { .. }) => {
                m.log(&id, &format!("L write: {e}"));
                continue;
            }
            Err(e) => return Err(format!("{id}: write: {e}")),
        };
        m.blocking_grants.fetch_add(1, Ordering::SeqCst);
        m.log(&id, &format!("E W {}", g.token().expect("token")));
        std::thread::sleep(rng.micros(2_000));
        if let Some(r) = m.leave_write(&id, g, &mut rng) {
            std::thread::sleep(rng.micros(2_000));
            m.leave_read(&id, r);
        }
    }
    Ok(())
}

/// A blocking reader thread.
fn mix_thread_reader(m: &Mix, k: usize) -> Result<(), String> {
    let id = format!("{}tr{k}", m.prefix);
    let mut rng = Rng::new(seed_of(&id));
    while m.running() {
        std::thread::sleep(rng.micros(3_000));
        let got = if rng.below(4) == 0 {
            m.lock.try_read_for(rng.micros(8_000))
        } else {
            m.lock.read()
        };
        let g = match got {
            Ok(g) => g,
            Err(Error::TimedOut { .. }) => {
                m.timed_out.fetch_add(1, Ordering::SeqCst);
                continue;
            }
            Err(e) => return Err(format!("{id}: read: {e}")),
        };
        m.blocking_grants.fetch_add(1, Ordering::SeqCst);
        m.log(&id, "E R");
        std::thread::sleep(rng.micros(5_000));
        m.leave_read(&id, g);
    }
    Ok(())
}

/// Runs one process's actors on `rt` and on threads: two async writers, two async
/// readers, one writer thread, one reader thread. Returns the first error, if any.
fn run_mix(m: &Arc<Mix>, rt: &tokio::runtime::Runtime) -> Result<(), String> {
    let threads: Vec<std::thread::JoinHandle<Result<(), String>>> = vec![
        {
            let m = Arc::clone(m);
            std::thread::spawn(move || mix_thread_writer(&m, 0))
        },
        {
            let m = Arc::clone(m);
            std::thread::spawn(move || mix_thread_reader(&m, 0))
        },
    ];
    let bound = Duration::from_secs(60);
    let tasks = rt.block_on(async {
        let tasks = vec![
            tokio::spawn(mix_async_writer(Arc::clone(m), 0)),
            tokio::spawn(mix_async_writer(Arc::clone(m), 1)),
            tokio::spawn(mix_async_reader(Arc::clone(m), 0)),
            tokio::spawn(mix_async_reader(Arc::clone(m), 1)),
        ];
        let mut out = Vec::new();
        for t in tasks {
            out.push(match tokio::time::timeout(MIX_RUN + bound, t).await {
                Ok(Ok(r)) => r,
                Ok(Err(e)) => Err(format!("task: {e}")),
                Err(_) => Err(format!(
                    "{}: a task still runs {bound:?} after the end",
                    m.prefix
                )),
            });
        }
        out
    });
    let end = Instant::now() + bound;
    let mut results = tasks;
    for t in threads {
        while !t.is_finished() {
            if Instant::now() > end {
                return Err(format!(
                    "{}: a thread still runs {bound:?} after the end",
                    m.prefix
                ));
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        results.push(t.join().unwrap_or_else(|_| Err("thread panicked".into())));
    }
    results.into_iter().collect()
}

/// The `mix` role (`PREFIX START_NS LONG_WRITE_MS LONG_READ_MS`, `-` for none): one
/// process's actors on a current-thread runtime and threads, until the run's end; says
/// `done SUMMARY` or `err ...`.
fn mix_child() {
    let _ = nix::sys::prctl::set_pdeathsig(Signal::SIGKILL);
    let args = child_args();
    let ms = |s: &str| s.parse().ok().map(Duration::from_millis);
    let start = UNIX_EPOCH + Duration::from_nanos(args[1].parse().expect("START_NS"));
    let log = PathBuf::from(std::env::var_os(LOG_ENV).expect("log"));
    let m = Arc::new(Mix::new(
        &child_dir(),
        &log,
        &args[0],
        start,
        ms(&args[2]),
        ms(&args[3]),
    ));
    let rt = current_thread();
    match run_mix(&m, &rt) {
        Ok(()) => say(&format!("done {}", m.summary())),
        Err(e) => say(&format!("err {e}")),
    }
}

/// The numbers of a `Mix::summary`, by name.
fn summary_field(summary: &str, name: &str) -> u64 {
    let w: Vec<&str> = summary.split_whitespace().collect();
    w.iter()
        .position(|x| *x == name)
        .and_then(|i| w.get(i + 1)?.parse().ok())
        .unwrap_or_else(|| panic!("no {name} in `{summary}`"))
}

/// For a few seconds, async tasks (on a multi-thread runtime here, on a current-thread
/// runtime in the children) and blocking threads take the lock in turns, in this
/// process and in two children, one of them in a pid namespace of its own where it
/// judges the others, and is judged, by the lease (1.5 s): short holds, downgrades,
/// acquisitions given up by timeouts (async ones cancelled mid-wait), and two holds
/// past the lease (an async writer in the namespaced child, an async reader here),
/// which the heartbeat must keep, while others wait past the lease too. Every grant and
/// release goes to one `O_APPEND` log; the checker of `examples/stress.rs` replays it
/// and checks exclusion at every event, growing tokens, and no lost lock. At the end
/// only a fencing token is left.
#[test]
fn async_and_blocking_waiters_of_several_processes_never_overlap() {
    let dir = common::tempdir();
    let logdir = common::tempdir();
    let log = logdir.path().join("events.log");
    File::create(&log).expect("create the log");
    let pidns = Command::new("unshare")
        .args(["--pid", "--fork", "--mount-proc", "--", "true"])
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if !pidns {
        eprintln!(
            "note: the mixed stress runs without a pid namespace: `unshare --pid --fork \
             --mount-proc` does not work here (needs root); every holder is judged exactly"
        );
    }
    let start = SystemTime::now() + Duration::from_millis(200);
    let start_ns = start.duration_since(UNIX_EPOCH).expect("time").as_nanos();
    let mut c0 = Peer::spawn(
        "c0",
        "mix",
        dir.path(),
        &format!("c0 {start_ns} 1000 -"),
        Some(&log),
        pidns,
    );
    let mut c1 = Peer::spawn(
        "c1",
        "mix",
        dir.path(),
        &format!("c1 {start_ns} - -"),
        Some(&log),
        false,
    );
    let me = Arc::new(Mix::new(
        dir.path(),
        &log,
        "t",
        start,
        None,
        Some(Duration::from_millis(3000)),
    ));
    let rt = multi_thread(2);
    let ran = run_mix(&me, &rt);
    let mut summaries = vec![("t".to_string(), format!("done {}", me.summary()))];
    for c in [&mut c0, &mut c1] {
        let s = c.reply_within(Duration::from_secs(90));
        summaries.push((c.name.clone(), s));
    }
    c0.finish();
    c1.finish();
    drop(rt);
    let text = fs::read_to_string(&log).expect("read the log");
    let c = stress::check(&text, 2);
    let report = format!(
        "{summaries:?}\nreads {} writes {} downgrades {} max readers {} violations {:?}",
        c.reads,
        c.writes,
        c.downgrades,
        c.max_readers,
        &c.violations[..c.violations.len().min(10)]
    );
    eprintln!("mixed stress: {report}");
    if let Err(e) = ran {
        panic!("{e}\n{report}\n{}", dump(&state(dir.path())));
    }
    for (who, s) in &summaries {
        assert!(s.starts_with("done "), "{who}: {s}\n{report}");
        assert!(
            summary_field(s, "async") > 0,
            "{who}: no async grant\n{report}"
        );
        assert!(
            summary_field(s, "blocking") > 0,
            "{who}: no blocking grant\n{report}"
        );
    }
    if !c.violations.is_empty() {
        let kept = logdir.keep();
        panic!("{report}\nlog kept: {}", kept.join("events.log").display());
    }
    assert!(
        c.reads >= 20 && c.writes >= 20,
        "too little traffic: {report}"
    );
    assert!(c.max_readers >= 2, "{report}");
    // The holds past the lease happened: the namespaced child's writer, our reader.
    assert_eq!(summary_field(&summaries[0].1, "long"), 1, "{report}");
    assert_eq!(summary_field(&summaries[1].1, "long"), 1, "{report}");
    common::assert_only_token(dir.path());
}

// ---------------------------------------------------------------------------------
// 5. Outside a runtime

/// Polls `f` once, outside any runtime.
fn poll_once<F: Future>(f: F) -> std::task::Poll<F::Output> {
    let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
    std::pin::pin!(f).poll(&mut cx)
}

/// `read_async` and `write_async` polled outside a tokio runtime return an error at
/// once, naming the directory and saying why; no panic.
#[test]
fn async_acquisition_outside_a_runtime_is_an_error_naming_the_directory() {
    let dir = common::tempdir();
    let lock = DirLock::new(dir.path()).expect("lock");
    let errs = [
        (
            "read_async",
            poll_once(lock.read_async()).map(|r| r.map(drop)),
        ),
        (
            "write_async",
            poll_once(lock.write_async()).map(|r| r.map(drop)),
        ),
    ];
    for (what, polled) in errs {
        let std::task::Poll::Ready(r) = polled else {
            panic!("{what}: pending outside a runtime");
        };
        let e = r.expect_err("no runtime");
        assert!(matches!(e, Error::Io { .. }), "{what}: {e:?}");
        let text = e.to_string();
        assert!(
            text.contains(&dir.path().display().to_string()),
            "{what}: `{text}`"
        );
        let source = std::error::Error::source(&e)
            .map(ToString::to_string)
            .unwrap_or_default();
        assert!(
            source.contains("tokio runtime"),
            "{what}: source `{source}`"
        );
    }
    // And within one, the same lock works.
    current_thread().block_on(async {
        drop(lock.write_async().await.expect("write_async"));
        drop(lock.read_async().await.expect("read_async"));
    });
}

/// Two tasks of one thread taking and releasing the lock in a loop with nothing else to
/// await both get it: an acquisition spends the task's cooperative budget, so the loop
/// yields now and then. Without it the first task took all 600 grants before the other
/// ran once.
#[test]
fn tasks_looping_on_a_free_lock_take_turns() {
    let dir = common::tempdir();
    let lock = DirLock::new(dir.path()).expect("lock");
    let total = Arc::new(AtomicUsize::new(0));
    let got = current_thread().block_on(async {
        let loops: Vec<_> = (0..2)
            .map(|_| {
                let (lock, total) = (lock.clone(), Arc::clone(&total));
                tokio::spawn(async move {
                    let mut mine = 0;
                    while total.fetch_add(1, Ordering::SeqCst) < 600 {
                        drop(lock.write_async().await.expect("write_async"));
                        mine += 1;
                    }
                    mine
                })
            })
            .collect();
        let mut got = Vec::new();
        for l in loops {
            got.push(l.await.expect("task"));
        }
        got
    });
    assert!(got.iter().all(|&n| n >= 50), "grants per task: {got:?}");
}
