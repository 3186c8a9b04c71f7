//! Stress test: reader and writer processes hammer one directory's lock, and a checker
//! replays what they did.
//!
//! ```text
//! cargo run --release --example stress -- --readers 6 --writers 3 --seconds 60 [DIR]
//! cargo run --release --example stress -- --readers 6 --writers 4 --lease 3 --hold 2..8 \
//!     --pidns 4 --seconds 120 [DIR]
//! cargo run --release --example stress -- --readers 6 --writers 6 --kill 0.2 --seconds 60 [DIR]
//! ```
//!
//! DIR defaults to a fresh temporary directory. The example re-runs itself as worker
//! processes (`--worker read|write DIR LOG ID LEASE_MS HOLD_MIN_MS HOLD_MAX_MS THREADS`), which
//! loop: acquire, log `E`, hold for a short random time, log `X`, release. Writers
//! sometimes downgrade to a reader before releasing (logged as `D`), and readers
//! sometimes use a short timeout.
//!
//! # The long-hold mode (`--lease`, `--hold`, `--pidns`)
//!
//! The default mode holds and waits for milliseconds, far less than any lease, and all
//! its workers judge each other exactly (same host, same pid namespace). Issue #18 hid
//! there: a waiting owner's `.master_lock` and pending file were refreshed only after the
//! grant, so a wait longer than the lease let a contender that judges by lease break them
//! while their owner was alive (docs/protocol.md §11). The long-hold mode goes there:
//!
//! - `--lease S`: every worker's lease is S seconds (heartbeat every S/3).
//! - `--hold A..B`: readers hold for a random time between A and B seconds, meant to be
//!   longer than the lease, so a writer waits in W5 (and the writers queued behind it in
//!   W2) for longer than the lease. Writers hold for up to 0.5 s, one grant in 8 for
//!   A..B; they think for up to B seconds between attempts (so that readers get a turn),
//!   and one attempt in 4 has a timeout between one and two leases (logged as `T` when it
//!   expires), so that timeouts strike in W2 and W5 after the files' lease has run out.
//! - `--pidns N`: N workers, taken alternately from the writers and the readers, run each
//!   in a pid namespace of its own (`unshare --pid --fork --mount-proc --kill-child`;
//!   needs root). They judge every other worker, and are judged, by lease; the workers
//!   left in the runner's namespace judge each other exactly. Each of the namespaced
//!   workers is pid 1 in its namespace, so pids collide: the log names workers by a
//!   unique id (`r0`, `w2`, ...), and each worker logs its identity first
//!   (`I <pidns inode> <pid>`).
//!
//! `--reader-threads T` runs each reader process's loop on T threads, logged as `r3`,
//! `r3.1`, …: threads of one process share one reader's file whenever their holds overlap
//! (V11, docs/protocol-notes.md), and the checker sees each thread as a reader of its own.
//!
//! `--pidns` and `--lease` work without `--hold` too. Without these flags the run is the
//! default mode, unchanged.
//!
//! # The kill mode (`--kill S`)
//!
//! Every S seconds on average (uniform in `[S/2, 3S/2)`), the runner picks a worker at
//! random and kills it with `SIGKILL`, wherever it is: holding, queued, waiting for
//! readers, breaking a dead holder's file, releasing. It starts a new worker of the same
//! kind in its place, named `<id>~<n>` (`w2~5`; in its own pid namespace if the killed
//! one had one). Nobody cleans up meanwhile: the survivors must find the dead files and
//! get past them, by exact judgement in one pid namespace and by lease across them, and
//! the checker still checks every event. The runner logs `K` for the worker *before* it
//! sends the signal, so the worker was alive at every line before the `K`: a grant that
//! overlaps its hold before the `K` is a violation. From the `K` on, the worker is dying
//! and the checker ignores it (what it logs between the `K` and its death, and the lock
//! it may hold until it is judged dead). A killed writer's attempt counts as one that
//! did not enter, as a timeout does, for the FIFO check. At the end the runner calls
//! [`DirLock::cleanup`] (the pre-startup job's call) until nothing but the token is left,
//! for at most two leases: the files of workers killed in another pid namespace go once
//! their lease has run out.
//!
//! # The log
//!
//! Every worker appends to ONE log file opened with `O_APPEND`, one `write(2)` per
//! line (`<ns> <id> <event>`), so the file's order is the real-time order of the
//! events: an event logged after another one completed comes later in the file. `E` is
//! logged after the grant and `X` before the release, so a logged interval lies inside
//! the real one, and any overlap in the log is an overlap of real grants. `D`
//! (downgrade) is logged just before `downgrade()` is called: from there on the checker
//! counts the worker as a reader, which is weaker than the truth (it still holds the
//! write lock until the call turns it into a read lock), so a writer entering before its
//! `X` is still a violation, and readers entering once `.master_lock` is gone are not.
//! `L` records a lock the worker found lost (`check()`, `release()`, `downgrade()`, or an
//! acquisition failing with `LockLost`); the worker logs it and goes on. `K` (kill mode)
//! is the runner's: it is about to kill the worker.
//!
//! # What is checked, on every event
//!
//! - **Exclusion**: a writer's `E` while anyone is inside, or a reader's `E` while a
//!   writer is inside, is a violation.
//! - **Fencing tokens** strictly grow from one write grant to the next.
//! - **FIFO among writers**. The token order alone proves nothing about FIFO, and the
//!   queue stamps (`ns` of the pending files) are not exposed. Instead, before calling
//!   `write()`, a writer logs `S`, reads `status()`, and logs `Q` with the identities
//!   (`<pidns>:<pid>` from each record, which stays unique across pid namespaces; the
//!   `I` lines map it to a worker id) of the queued writers it saw. Each of them had its
//!   pending file in place before our own was made, so its `ns` is smaller and the lock
//!   must let it in first: its first `E` after our `S` must precede our next `E`. This is
//!   sound (it never flags a correct run): the attempt we saw queued enters after our
//!   `S`, so "its first `E` after our `S`" is that attempt or an earlier one, and both
//!   enter before us if the lock is FIFO. An attempt that ends with a timeout (`T`)
//!   does not enter at all, so when the first `E` or `T` after the `S` (theirs) or after
//!   the `Q` (ours) is a `T`, that comparison is skipped and counted as skipped. A writer
//!   keeps its pending file while it holds and removes it just after `.master_lock`
//!   (V8, docs/protocol-notes.md), so `status` can show a holder, or one leaving, as
//!   queued: one that was not in a write attempt at our `S` is owed nothing and is
//!   counted apart (`fifo_not_waiting`). It assumes the realtime clock does not step
//!   backwards during the run.
//! - **No lost locks**: every `L` is a violation. The workers' owners are alive and
//!   renew their files, so nobody may judge them dead.
//! - **Sharing**: with two or more readers, readers must have overlapped at least once.
//!
//! After the run, every worker must have exited successfully, every `E` must have its
//! `X` (or, in the kill mode, its worker's `K`), and the state directory must hold
//! nothing but the token file (in the kill mode, after the cleanup).
//!
//! It prints totals, grants per second and a last line `violations: N`, and exits
//! non-zero when N > 0; a run with violations keeps its log, and
//! `stress --check LOG [READERS]` replays a log and prints every violation. `tests/stress.rs` runs a short stress of each mode with the same
//! code.

#![allow(clippy::disallowed_methods)]

use std::collections::{BTreeMap, BTreeSet};
use std::ffi::OsString;
use std::fs::{self, File, OpenOptions};
use std::io::{self, Read, Write};
use std::os::unix::fs::MetadataExt;
use std::path::PathBuf;
use std::process::{Child, Command, ExitCode, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use rwdir::{DirLock, Error};

/// The run's parameters.
#[derive(Debug, Clone)]
pub struct Options {
    pub readers: usize,
    pub writers: usize,
    pub duration: Duration,
    pub dir: PathBuf,
    /// Every worker's lease (`--lease`); `None`: the library's default.
    pub lease: Option<Duration>,
    /// The long-hold mode (`--hold A..B`): readers hold between A and B.
    pub hold: Option<(Duration, Duration)>,
    /// How many workers run each in a pid namespace of its own (`--pidns`).
    pub pidns: usize,
    /// Threads per reader process (`--reader-threads`), each with its own reads: threads
    /// of one process share one reader's file (V11).
    pub reader_threads: usize,
    /// The kill mode (`--kill S`): a worker killed every S on average, and replaced.
    pub kill: Option<Duration>,
}

impl Options {
    /// The default mode: `readers` and `writers` for `duration` on `dir`.
    pub fn new(readers: usize, writers: usize, duration: Duration, dir: PathBuf) -> Options {
        Options {
            readers,
            writers,
            duration,
            dir,
            lease: None,
            hold: None,
            pidns: 0,
            reader_threads: 1,
            kill: None,
        }
    }
}

/// What a worker process does.
#[derive(Debug, Clone)]
pub struct Worker {
    pub write: bool,
    pub dir: PathBuf,
    pub log: PathBuf,
    /// The worker's name in the log: `r<n>` or `w<n>`, unique in the run.
    pub id: String,
    pub lease: Option<Duration>,
    pub hold: Option<(Duration, Duration)>,
    /// Whether the runner starts it in a pid namespace of its own (not an argument: the
    /// runner wraps the command).
    pub own_pidns: bool,
    /// A reader's threads, each logged as `<id>` (the first) or `<id>.<k>`.
    pub threads: usize,
}

impl Worker {
    /// `read|write DIR LOG ID LEASE_MS HOLD_MIN_MS HOLD_MAX_MS THREADS`, the arguments
    /// after `--worker` (0 for no lease, `0 0` for the default mode's holds).
    pub fn to_args(&self) -> Vec<OsString> {
        let ms = |d: Option<Duration>| OsString::from(d.map_or(0, |d| d.as_millis()).to_string());
        vec![
            OsString::from(if self.write { "write" } else { "read" }),
            self.dir.clone().into_os_string(),
            self.log.clone().into_os_string(),
            OsString::from(&self.id),
            ms(self.lease),
            ms(self.hold.map(|h| h.0)),
            ms(self.hold.map(|h| h.1)),
            OsString::from(self.threads.to_string()),
        ]
    }

    pub fn from_args(args: &[OsString]) -> Option<Worker> {
        let [kind, dir, log, id, lease, min, max, threads] = args else {
            return None;
        };
        let write = match kind.to_str()? {
            "read" => false,
            "write" => true,
            _ => return None,
        };
        let ms = |a: &OsString| a.to_str()?.parse::<u64>().ok().map(Duration::from_millis);
        let (lease, min, max) = (ms(lease)?, ms(min)?, ms(max)?);
        Some(Worker {
            write,
            dir: PathBuf::from(dir),
            log: PathBuf::from(log),
            id: id.to_str()?.to_string(),
            lease: (!lease.is_zero()).then_some(lease),
            hold: (!max.is_zero()).then_some((min, max)),
            own_pidns: false,
            threads: threads.to_str()?.parse().ok().filter(|t| *t > 0)?,
        })
    }
}

/// The checker's findings.
#[derive(Debug, Default, Clone)]
pub struct Check {
    pub reads: u64,
    pub writes: u64,
    pub downgrades: u64,
    pub max_readers: usize,
    pub fifo_checks: u64,
    /// FIFO comparisons skipped because one of the two attempts timed out.
    pub fifo_skipped: u64,
    /// Queued writers seen that were not waiting but holding or leaving: a writer keeps
    /// its pending file while it holds and removes it just after `.master_lock` (V8), so
    /// `status` can show it queued in between.
    pub fifo_not_waiting: u64,
    /// Write attempts that timed out (`T`).
    pub timeouts: u64,
    /// Workers killed (`K`).
    pub kills: u64,
    /// Of them, those killed while they held the lock (their `E` without its `X`).
    pub kills_holding: u64,
    /// Of them, writers killed while in a write attempt (after `S`, before `E` or `T`).
    pub kills_queued: u64,
    /// Locks found lost (`L`); each is also a violation.
    pub lost: u64,
    pub last_token: u64,
    /// Each write grant's wait, from its `Q` (just before the call) to its `E`.
    pub write_waits: Vec<Duration>,
    /// Each read grant's hold, from its `E` to its `X`.
    pub read_holds: Vec<Duration>,
    pub violations: Vec<String>,
}

impl Check {
    fn violation(&mut self, line: usize, what: String) {
        self.violations
            .push(format!("log line {}: {what}", line + 1));
    }
}

/// Replays a log. `readers` is the number of reader workers (for the sharing check).
pub fn check(log: &str, readers: usize) -> Check {
    let mut c = Check::default();
    let lines: Vec<&str> = log.lines().collect();
    // The kill mode: where each killed worker's `K` is. From there on it is dying, and
    // its lines (its threads' too: `r3.1` is a thread of `r3`) are not checked.
    let mut kills: BTreeMap<&str, usize> = BTreeMap::new();
    for (i, l) in lines.iter().enumerate() {
        if let [_, id, "K"] = l.split_whitespace().collect::<Vec<_>>().as_slice() {
            kills.entry(id).or_insert(i);
        }
    }
    let dying = |id: &str, i: usize| {
        let process = id.split_once('.').map_or(id, |(p, _)| p);
        kills.get(process).is_some_and(|&k| k < i)
    };
    // Pass 1: where every write attempt ended (`E W`: entered, `T`: timed out), for the
    // FIFO obligations, and the workers' identities (`I <pidns> <pid>`).
    let mut ends: BTreeMap<&str, Vec<(usize, bool)>> = BTreeMap::new();
    let mut idents: BTreeMap<String, &str> = BTreeMap::new();
    let mut starts: BTreeMap<&str, Vec<usize>> = BTreeMap::new();
    for (i, l) in lines.iter().enumerate() {
        let f: Vec<&str> = l.split_whitespace().collect();
        if f.get(1).is_some_and(|id| dying(id, i)) {
            continue;
        }
        match f.as_slice() {
            [_, id, "E", "W", ..] => ends.entry(id).or_default().push((i, true)),
            // A killed attempt did not enter, as a timed-out one.
            [_, id, "K"] => ends.entry(id).or_default().push((i, false)),
            [_, id, "S", ..] => starts.entry(id).or_default().push(i),
            [_, id, "T", ..] => ends.entry(id).or_default().push((i, false)),
            [_, id, "I", pidns, pid] => {
                idents.insert(format!("{pidns}:{pid}"), id);
            }
            _ => {}
        }
    }
    // Whether `id` was in a write attempt (after its `S`, before that attempt's end) at
    // line `pos`. A writer keeps its pending file while it holds and removes it just
    // after `.master_lock` (V8), so `status` may show a holder, or one leaving, queued:
    // one that was not waiting when we began to look is owed nothing.
    let waiting_at = |id: &str, pos: usize| -> bool {
        let before = |v: Option<&Vec<usize>>| {
            v.and_then(|v| v[..v.partition_point(|&p| p < pos)].last().copied())
        };
        let last_end = ends.get(id).and_then(|v| {
            v[..v.partition_point(|&(p, _)| p < pos)]
                .last()
                .map(|e| e.0)
        });
        match (before(starts.get(id)), last_end) {
            (Some(s), Some(e)) => s > e,
            (Some(_), None) => true,
            (None, _) => false,
        }
    };
    // The first end of an attempt after line `pos`: (line, entered).
    let end_after = |id: &str, pos: usize| -> Option<(usize, bool)> {
        let v = ends.get(id)?;
        v.get(v.partition_point(|&(p, _)| p <= pos)).copied()
    };
    // Pass 2: replay.
    let mut writer: Option<&str> = None;
    let mut inside_readers: BTreeSet<&str> = BTreeSet::new();
    let mut last_s: BTreeMap<&str, usize> = BTreeMap::new();
    let mut last_token: Option<u64> = None;
    let mut last_q: BTreeMap<&str, u128> = BTreeMap::new();
    let mut read_since: BTreeMap<&str, u128> = BTreeMap::new();
    let ns_between = |a: u128, b: u128| {
        Duration::from_nanos(u64::try_from(b.saturating_sub(a)).unwrap_or(u64::MAX))
    };
    for (i, l) in lines.iter().enumerate() {
        let f: Vec<&str> = l.split_whitespace().collect();
        let (Some(&id), Some(ev)) = (f.get(1), f.get(2)) else {
            c.violation(i, format!("malformed line `{l}`"));
            continue;
        };
        let Ok(t) = f[0].parse::<u128>() else {
            c.violation(i, format!("malformed line `{l}`"));
            continue;
        };
        if dying(id, i) {
            continue;
        }
        match (*ev, f.get(3).copied()) {
            ("I", _) => {}
            ("K", _) => {
                // Logged before the signal: until here the worker was alive, and what
                // it held counted. From here on it is dying, and its hold (if any)
                // is the lock's to judge.
                c.kills += 1;
                let thread = |r: &&str| r.split_once('.').map_or(*r, |(p, _)| p) == id;
                if writer == Some(id) || inside_readers.iter().any(&thread) {
                    c.kills_holding += 1;
                } else if waiting_at(id, i) {
                    c.kills_queued += 1;
                }
                if writer == Some(id) {
                    writer = None;
                }
                inside_readers.retain(|r| !thread(r));
                read_since.retain(|r, _| !thread(r));
                last_q.remove(id);
            }
            ("S", _) => {
                last_s.insert(id, i);
            }
            ("Q", _) => {
                last_q.insert(id, t);
                let Some(&s) = last_s.get(id) else {
                    c.violation(i, format!("{id}: Q without S"));
                    continue;
                };
                let Some((mine, entered)) = end_after(id, i) else {
                    continue; // never entered (the run ended): nothing to compare
                };
                for token in &f[3..] {
                    // `<pidns>:<pid>` from a record, or (hand-written logs) a worker id.
                    let ahead = if token.contains(':') {
                        match idents.get(*token) {
                            Some(a) => *a,
                            None => {
                                c.violation(
                                    i,
                                    format!("{id} saw a queued writer {token} that is no worker"),
                                );
                                continue;
                            }
                        }
                    } else {
                        token
                    };
                    if !entered {
                        c.fifo_skipped += 1; // our attempt timed out
                        continue;
                    }
                    if !waiting_at(ahead, s) {
                        // Seen through the pending file of a holder (V8), or of one that
                        // just left: it was not waiting, so it is owed nothing.
                        c.fifo_not_waiting += 1;
                        continue;
                    }
                    match end_after(ahead, s) {
                        Some((theirs, true)) if theirs < mine => c.fifo_checks += 1,
                        Some((_, false)) => c.fifo_skipped += 1, // theirs timed out
                        theirs => c.violation(
                            i,
                            format!(
                                "FIFO: writer {id} saw writer {ahead} queued before it called \
                                 write(), but entered first (line {}; theirs: {:?})",
                                mine + 1,
                                theirs.map(|t| t.0 + 1)
                            ),
                        ),
                    }
                }
            }
            ("T", _) => {
                c.timeouts += 1;
                last_q.remove(id);
            }
            ("L", _) => {
                c.lost += 1;
                c.violation(i, format!("{id} lost its lock: {}", f[3..].join(" ")));
            }
            ("E", Some("R")) => {
                c.reads += 1;
                read_since.insert(id, t);
                if let Some(w) = writer {
                    c.violation(i, format!("reader {id} entered while writer {w} holds"));
                }
                if !inside_readers.insert(id) {
                    c.violation(i, format!("reader {id} entered twice"));
                }
                c.max_readers = c.max_readers.max(inside_readers.len());
            }
            ("E", Some("W")) => {
                c.writes += 1;
                if let Some(w) = writer {
                    c.violation(i, format!("writer {id} entered while writer {w} holds"));
                }
                if !inside_readers.is_empty() {
                    c.violation(
                        i,
                        format!("writer {id} entered while readers {inside_readers:?} hold"),
                    );
                }
                writer = Some(id);
                if let Some(q) = last_q.remove(id) {
                    c.write_waits.push(ns_between(q, t));
                }
                match f.get(4).and_then(|t| t.parse::<u64>().ok()) {
                    Some(t) => {
                        if let Some(prev) = last_token.filter(|&p| t <= p) {
                            c.violation(i, format!("token {t} after token {prev}"));
                        }
                        last_token = Some(t);
                        c.last_token = t;
                    }
                    None => c.violation(i, format!("writer {id}: no token")),
                }
            }
            ("D", _) => {
                c.downgrades += 1;
                if writer != Some(id) {
                    c.violation(i, format!("{id} downgraded without holding the write lock"));
                }
                writer = None;
                inside_readers.insert(id);
                c.max_readers = c.max_readers.max(inside_readers.len());
            }
            ("X", Some("W")) => {
                if writer != Some(id) {
                    c.violation(i, format!("writer {id} left without holding"));
                }
                writer = None;
            }
            ("X", Some("R")) => {
                if let Some(since) = read_since.remove(id) {
                    c.read_holds.push(ns_between(since, t));
                }
                if !inside_readers.remove(id) {
                    c.violation(i, format!("reader {id} left without holding"));
                }
            }
            _ => c.violation(i, format!("unknown event `{l}`")),
        }
    }
    if let Some(w) = writer {
        c.violation(lines.len(), format!("writer {w} never left"));
    }
    if !inside_readers.is_empty() {
        c.violation(
            lines.len(),
            format!("readers {inside_readers:?} never left"),
        );
    }
    if readers >= 2 && c.max_readers < 2 {
        c.violation(lines.len(), "readers never overlapped".to_string());
    }
    c
}

// ---------------------------------------------------------------------------------
// Workers

/// One `write(2)` of one line to the `O_APPEND` log.
fn log(file: &File, id: &str, line: &str) -> Result<(), String> {
    let ns = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0);
    let line = format!("{ns} {id} {line}\n");
    match (&*file).write(line.as_bytes()) {
        Ok(n) if n == line.len() => Ok(()),
        Ok(n) => Err(format!("short write to the log: {n} of {}", line.len())),
        Err(e) => Err(format!("write to the log: {e}")),
    }
}

struct Rng(u64);

impl Rng {
    fn new(id: &str) -> Rng {
        let t = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.subsec_nanos())
            .unwrap_or(0);
        // The pid alone is no seed: every worker in a pid namespace of its own is pid 1.
        let h = id.bytes().fold(u64::from(std::process::id()), |h, b| {
            h.wrapping_mul(31) ^ u64::from(b)
        });
        Rng((h << 32 ^ u64::from(t)) | 1)
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

    /// Uniform in `[lo, hi)` (`lo` if the range is empty).
    fn between(&mut self, lo: Duration, hi: Duration) -> Duration {
        let span = hi.saturating_sub(lo).as_micros();
        lo + Duration::from_micros(self.below(u64::try_from(span).unwrap_or(u64::MAX)))
    }
}

/// A worker process's loop; returns when its stdin closes.
pub fn worker_main(w: &Worker) -> Result<(), String> {
    // Never outlive the runner.
    let _ = nix::sys::prctl::set_pdeathsig(nix::sys::signal::Signal::SIGKILL);
    let stop = Arc::new(AtomicBool::new(false));
    let s = Arc::clone(&stop);
    std::thread::spawn(move || {
        let _ = io::stdin().read_to_end(&mut Vec::new());
        s.store(true, Ordering::SeqCst);
    });
    let file = OpenOptions::new()
        .append(true)
        .open(&w.log)
        .map_err(|e| format!("open log {}: {e}", w.log.display()))?;
    let log = |line: &str| log(&file, &w.id, line);
    // Who we are in the records of our lock files (`status()` shows them): the pid
    // namespace as the library reads it, and our pid in it.
    let pidns = fs::metadata("/proc/self/ns/pid")
        .map(|m| m.ino())
        .map_err(|e| format!("/proc/self/ns/pid: {e}"))?;
    log(&format!("I {pidns} {}", std::process::id()))?;
    let mut builder = DirLock::builder(&w.dir);
    if let Some(lease) = w.lease {
        builder = builder.lease(lease);
    }
    let lock = builder.build().map_err(|e| e.to_string())?;
    let lease = lock.lease();
    if !w.write {
        // Each thread of a reader process reads on its own; they share one reader's
        // file whenever their holds overlap (V11).
        return std::thread::scope(|s| {
            let threads: Vec<_> = (1..w.threads)
                .map(|k| {
                    let (lock, file, stop) = (lock.clone(), &file, &stop);
                    s.spawn(move || reader_loop(w, &lock, file, &format!("{}.{k}", w.id), stop))
                })
                .collect();
            let mine = reader_loop(w, &lock, &file, &w.id, &stop);
            threads
                .into_iter()
                .map(|t| {
                    t.join()
                        .unwrap_or_else(|_| Err("a reader thread panicked".into()))
                })
                .fold(mine, Result::and)
        });
    }
    let mut rng = Rng::new(&w.id);
    let err = |e: Error| e.to_string();
    // A lock found lost is logged (a violation) and the worker goes on.
    let lost = |what: &str, e: Error| log(&format!("L {what}: {e}"));
    while !stop.load(Ordering::SeqCst) {
        // Think outside the lock, so that readers get a turn (writers have priority).
        std::thread::sleep(match w.hold {
            None => Duration::from_millis(2) + rng.micros(20_000),
            Some((_, max)) => rng.between(Duration::ZERO, max),
        });
        if stop.load(Ordering::SeqCst) {
            break;
        }
        log("S")?;
        let ahead: Vec<String> = lock
            .status()
            .map_err(err)?
            .pending
            .iter()
            .filter_map(|e| e.holder.as_ref().map(|h| format!("{}:{}", h.pidns, h.pid)))
            .collect();
        log(&format!("Q {}", ahead.join(" ")))?;
        // Long-hold mode: one attempt in 4 gives up after one to two leases.
        let timeout = w
            .hold
            .filter(|_| rng.below(4) == 0)
            .map(|_| rng.between(lease, lease * 2));
        let g = match timeout {
            None => lock.write(),
            Some(t) => lock.try_write_for(t),
        };
        let g = match g {
            Ok(g) => g,
            Err(Error::TimedOut { .. }) => {
                log("T")?;
                continue;
            }
            Err(e @ Error::LockLost { .. }) => {
                lost("write", e)?;
                continue;
            }
            Err(e) => return Err(err(e)),
        };
        // The token is made when asked for (V14), while the lock is held.
        let token = match g.token() {
            Ok(token) => token,
            Err(e @ Error::LockLost { .. }) => {
                lost("write", e)?;
                continue;
            }
            Err(e) => return Err(err(e)),
        };
        log(&format!("E W {token}"))?;
        std::thread::sleep(match w.hold {
            None => rng.micros(2_000),
            Some((min, max)) if rng.below(8) == 0 => rng.between(min, max),
            Some(_) => rng.micros(500_000),
        });
        if let Err(e) = g.check() {
            lost("check", e)?;
        }
        if rng.below(5) == 0 {
            // Logged before the call: readers may enter as soon as `.master_lock`
            // is gone, before `downgrade` returns.
            log("D")?;
            match g.downgrade() {
                Ok(r) => {
                    std::thread::sleep(rng.micros(2_000));
                    if let Err(e) = r.check() {
                        lost("check", e)?;
                    }
                    log("X R")?;
                    if let Err(e) = r.release() {
                        lost("release", e)?;
                    }
                }
                Err(e) => {
                    lost("downgrade", e)?;
                    log("X R")?;
                }
            }
        } else {
            log("X W")?;
            if let Err(e) = g.release() {
                lost("release", e)?;
            }
        }
    }
    Ok(())
}

/// One reader thread's loop, logged as `id`, until `stop`.
fn reader_loop(
    w: &Worker,
    lock: &DirLock,
    file: &File,
    id: &str,
    stop: &AtomicBool,
) -> Result<(), String> {
    let log = |line: &str| log(file, id, line);
    let lost = |what: &str, e: Error| log(&format!("L {what}: {e}"));
    let mut rng = Rng::new(id);
    while !stop.load(Ordering::SeqCst) {
        std::thread::sleep(rng.micros(3_000));
        let g = if rng.below(4) == 0 {
            match lock.try_read_for(Duration::from_millis(5)) {
                Err(Error::TimedOut { .. }) => continue,
                r => r.map_err(|e| e.to_string())?,
            }
        } else {
            lock.read().map_err(|e| e.to_string())?
        };
        log("E R")?;
        std::thread::sleep(match w.hold {
            None => rng.micros(5_000),
            Some((min, max)) => rng.between(min, max),
        });
        if let Err(e) = g.check() {
            lost("check", e)?;
        }
        log("X R")?;
        if let Err(e) = g.release() {
            lost("release", e)?;
        }
    }
    Ok(())
}

// ---------------------------------------------------------------------------------
// The runner

/// The result of a run.
#[derive(Debug)]
pub struct Report {
    pub check: Check,
    pub elapsed: Duration,
}

/// `cmd`, run in a pid namespace of its own (with its own `/proc`), as pid 1 there.
/// `--kill-child`: killing `unshare` kills the worker.
fn in_own_pidns(cmd: &Command) -> Command {
    let mut c = Command::new("unshare");
    c.args(["--pid", "--fork", "--mount-proc", "--kill-child", "--"])
        .arg(cmd.get_program())
        .args(cmd.get_args());
    for (k, v) in cmd.get_envs() {
        match v {
            Some(v) => c.env(k, v),
            None => c.env_remove(k),
        };
    }
    if let Some(d) = cmd.get_current_dir() {
        c.current_dir(d);
    }
    c
}

/// The workers of a run: readers `r<n>` first, then writers `w<n>`. `opts.pidns` of
/// them, alternately a writer and a reader (writers first), get a pid namespace of
/// their own.
pub fn workers(opts: &Options, log: &std::path::Path) -> Vec<Worker> {
    let mut ws: Vec<Worker> = (0..opts.readers + opts.writers)
        .map(|i| {
            let write = i >= opts.readers;
            Worker {
                write,
                dir: opts.dir.clone(),
                log: log.to_path_buf(),
                id: if write {
                    format!("w{}", i - opts.readers)
                } else {
                    format!("r{i}")
                },
                lease: opts.lease,
                hold: opts.hold,
                own_pidns: false,
                threads: if write { 1 } else { opts.reader_threads.max(1) },
            }
        })
        .collect();
    let (mut r, mut w) = (0, opts.readers);
    for k in 0..opts.pidns.min(ws.len()) {
        let writer_turn = (k % 2 == 0 && w < ws.len()) || r >= opts.readers;
        let i = if writer_turn { &mut w } else { &mut r };
        ws[*i].own_pidns = true;
        *i += 1;
    }
    ws
}

/// Runs the stress: spawns the workers with `spawn` (which makes the command that runs
/// [`worker_main`] for a worker; the runner wraps it in `unshare` for a worker with a
/// pid namespace of its own), lets them run, stops them, checks. Writes a summary to
/// `out`, ending with `violations: N`.
pub fn run(
    opts: &Options,
    spawn: &dyn Fn(&Worker) -> Command,
    out: &mut dyn Write,
) -> io::Result<Report> {
    let logdir = tempfile::Builder::new().prefix("rwdir-stress-").tempdir()?;
    let log = logdir.path().join("events.log");
    File::create(&log)?;
    let ws = workers(opts, &log);
    write!(
        out,
        "stress: {} readers, {} writers, {} s on {}",
        opts.readers,
        opts.writers,
        opts.duration.as_secs_f64(),
        opts.dir.display()
    )?;
    if opts.reader_threads > 1 {
        write!(out, " ({} threads each)", opts.reader_threads)?;
    }
    if let Some(lease) = opts.lease {
        write!(out, ", lease {} s", lease.as_secs_f64())?;
    }
    if let Some((min, max)) = opts.hold {
        write!(
            out,
            ", reader holds {}..{} s",
            min.as_secs_f64(),
            max.as_secs_f64()
        )?;
    }
    let own: Vec<&str> = ws
        .iter()
        .filter(|w| w.own_pidns)
        .map(|w| w.id.as_str())
        .collect();
    if !own.is_empty() {
        write!(out, ", own pid namespaces: {}", own.join(" "))?;
    }
    if let Some(every) = opts.kill {
        write!(out, ", a worker killed every {} s", every.as_secs_f64())?;
    }
    writeln!(out)?;
    let mut violations = Vec::new();
    let start_one = |w: &Worker| -> io::Result<Child> {
        let cmd = spawn(w);
        let mut cmd = if w.own_pidns { in_own_pidns(&cmd) } else { cmd };
        cmd.stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .spawn()
    };
    let mut children: Vec<(Worker, Child)> = Vec::new();
    let start = Instant::now();
    for w in &ws {
        children.push((w.clone(), start_one(w)?));
    }
    let runner_log = OpenOptions::new().append(true).open(&log)?;
    let mut rng = Rng::new("runner");
    let mut next_kill = opts.kill.map(|every| rng.between(every / 2, every * 3 / 2));
    let mut killed = 0;
    let mut next_report = Duration::from_secs(10);
    while start.elapsed() < opts.duration {
        let left = opts.duration.saturating_sub(start.elapsed());
        let to_kill = next_kill.map_or(left, |k| k.saturating_sub(start.elapsed()));
        std::thread::sleep(left.min(to_kill).min(Duration::from_millis(100)));
        if let (Some(every), Some(at)) = (opts.kill, next_kill)
            && start.elapsed() >= at
            && start.elapsed() < opts.duration
        {
            // `K` first, then the signal: the worker was alive at every line before it.
            let i = usize::try_from(rng.below(children.len() as u64)).unwrap_or(0);
            let (w, c) = &mut children[i];
            self::log(&runner_log, &w.id, "K").map_err(io::Error::other)?;
            c.kill()?;
            c.wait()?;
            killed += 1;
            let base = w.id.split_once('~').map_or(w.id.as_str(), |(b, _)| b);
            let mut next = w.clone();
            next.id = format!("{base}~{killed}");
            let child = start_one(&next)?;
            children[i] = (next, child);
            next_kill = Some(at + rng.between(every / 2, every * 3 / 2));
        }
        if start.elapsed() >= next_report && start.elapsed() < opts.duration {
            let grants = fs::read_to_string(&log)?.matches(" E ").count();
            writeln!(out, "  {:>4} s: {grants} grants", next_report.as_secs())?;
            next_report += Duration::from_secs(10);
        }
    }
    // Stop: close every stdin; each worker finishes its current round and exits. In the
    // long-hold mode a round can take several holds (a writer waits for readers, which
    // hold up to the maximum, and for the writers ahead of it).
    for (_, c) in &mut children {
        drop(c.stdin.take());
    }
    let grace = Duration::from_secs(60) + opts.hold.map_or(Duration::ZERO, |h| h.1 * 4);
    let stop_deadline = Instant::now() + grace;
    for (w, c) in &mut children {
        let id = &w.id;
        loop {
            match c.try_wait()? {
                Some(status) if status.success() => break,
                Some(status) => {
                    violations.push(format!("worker {id} exited with {status}"));
                    break;
                }
                None if Instant::now() > stop_deadline => {
                    let _ = c.kill();
                    let _ = c.wait();
                    violations.push(format!(
                        "worker {id} did not stop within {} s",
                        grace.as_secs()
                    ));
                    break;
                }
                None => std::thread::sleep(Duration::from_millis(5)),
            }
        }
    }
    let elapsed = start.elapsed();
    let text = fs::read_to_string(&log)?;
    let mut check = check(&text, opts.readers);
    // The kill mode: what the killed workers left is for the pre-startup job's cleanup,
    // which removes it at once in our pid namespace, and once their lease has run out
    // in another.
    let state = opts.dir.join(".rwdir");
    if opts.kill.is_some() {
        let mut builder = DirLock::builder(&opts.dir);
        if let Some(lease) = opts.lease {
            builder = builder.lease(lease);
        }
        let lock = builder.build().map_err(io::Error::other)?;
        let until = Instant::now() + lock.lease() * 2 + Duration::from_secs(5);
        loop {
            lock.cleanup().map_err(io::Error::other)?;
            let only_tokens = fs::read_dir(&state)?
                .filter_map(|e| e.ok())
                .all(|e| e.file_name().to_string_lossy().starts_with(".token-"));
            if only_tokens || Instant::now() > until {
                break;
            }
            std::thread::sleep(Duration::from_millis(200));
        }
    }
    // Nothing but the token may be left in the state directory.
    let left: Vec<String> = fs::read_dir(&state)?
        .filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| !n.starts_with(".token-"))
        .collect();
    if !left.is_empty() {
        violations.push(format!("left in {}: {left:?}", state.display()));
    }
    violations.append(&mut check.violations);
    check.violations = violations;

    let grants = check.reads + check.writes;
    writeln!(
        out,
        "reads: {}  writes: {} (downgraded: {})  grants: {}  in {:.1} s",
        check.reads,
        check.writes,
        check.downgrades,
        grants,
        elapsed.as_secs_f64()
    )?;
    writeln!(
        out,
        "grants/s: {:.0}  max concurrent readers: {}  FIFO checks: {}  last token: {}",
        grants as f64 / elapsed.as_secs_f64(),
        check.max_readers,
        check.fifo_checks,
        check.last_token
    )?;
    if check.fifo_not_waiting > 0 {
        writeln!(
            out,
            "queued writers seen that were holding or leaving (their kept pending file), not compared: {}",
            check.fifo_not_waiting
        )?;
    }
    if check.kills > 0 {
        writeln!(
            out,
            "workers killed: {} (holding the lock: {}, in a write attempt: {})",
            check.kills, check.kills_holding, check.kills_queued
        )?;
    }
    if opts.hold.is_some() || check.lost + check.timeouts + check.fifo_skipped > 0 {
        writeln!(
            out,
            "write timeouts: {}  FIFO checks skipped (a timeout): {}  locks lost: {}",
            check.timeouts, check.fifo_skipped, check.lost
        )?;
    }
    if let Some(lease) = opts.lease {
        let over = |v: &[Duration]| v.iter().filter(|&&d| d > lease).count();
        let longest = |v: &[Duration]| v.iter().max().copied().unwrap_or_default();
        writeln!(
            out,
            "longer than the lease: {} of {} write waits (longest {:.1} s), {} of {} read holds",
            over(&check.write_waits),
            check.write_waits.len(),
            longest(&check.write_waits).as_secs_f64(),
            over(&check.read_holds),
            check.read_holds.len()
        )?;
    }
    for v in check.violations.iter().take(10) {
        writeln!(out, "VIOLATION: {v}")?;
    }
    if !check.violations.is_empty() {
        let kept = logdir.keep();
        writeln!(out, "log kept: {}", kept.join("events.log").display())?;
    }
    writeln!(out, "violations: {}", check.violations.len())?;
    Ok(Report { check, elapsed })
}

const USAGE: &str = "usage: stress [--readers N] [--writers N] [--seconds S] \
                     [--lease S] [--hold A..B] [--pidns N] [--reader-threads T] [--kill S] [DIR]";

/// Seconds, fractions allowed.
fn secs(s: &str) -> Option<Duration> {
    s.parse::<f64>()
        .ok()
        .filter(|s| s.is_finite() && *s >= 0.0)
        .map(Duration::from_secs_f64)
}

fn parse(args: &[OsString]) -> Result<(Options, Option<tempfile::TempDir>), String> {
    let mut opts = Options::new(6, 3, Duration::from_secs(60), PathBuf::new());
    let mut dir = None;
    let mut it = args.iter();
    while let Some(a) = it.next() {
        let mut value = |name: &str| -> Result<&str, String> {
            it.next()
                .and_then(|v| v.to_str())
                .ok_or_else(|| format!("{name} needs a value\n{USAGE}"))
        };
        let bad = |name: &str| format!("bad value for {name}\n{USAGE}");
        match a.to_str() {
            Some(
                n @ ("--readers" | "--writers" | "--seconds" | "--pidns" | "--reader-threads"),
            ) => {
                let v: u64 = value(n)?.parse().map_err(|_| bad(n))?;
                match n {
                    "--readers" => opts.readers = v as usize,
                    "--writers" => opts.writers = v as usize,
                    "--seconds" => opts.duration = Duration::from_secs(v),
                    "--reader-threads" if v > 0 => opts.reader_threads = v as usize,
                    "--reader-threads" => return Err(bad(n)),
                    _ => opts.pidns = v as usize,
                }
            }
            Some("--lease") => {
                let lease = secs(value("--lease")?)
                    .filter(|l| !l.is_zero())
                    .ok_or_else(|| bad("--lease"))?;
                opts.lease = Some(lease);
            }
            Some("--kill") => {
                let every = secs(value("--kill")?)
                    .filter(|s| !s.is_zero())
                    .ok_or_else(|| bad("--kill"))?;
                opts.kill = Some(every);
            }
            Some("--hold") => {
                let v = value("--hold")?;
                let (min, max) = v.split_once("..").ok_or_else(|| bad("--hold"))?;
                let (min, max) = (
                    secs(min).ok_or_else(|| bad("--hold"))?,
                    secs(max).ok_or_else(|| bad("--hold"))?,
                );
                if max.is_zero() || min > max {
                    return Err(bad("--hold"));
                }
                opts.hold = Some((min, max));
            }
            Some("-h" | "--help") => return Err(USAGE.to_string()),
            Some(s) if s.starts_with('-') => return Err(format!("unknown option {s}\n{USAGE}")),
            _ if dir.is_none() => dir = Some(PathBuf::from(a)),
            _ => return Err(USAGE.to_string()),
        }
    }
    match dir {
        Some(d) => {
            opts.dir = d;
            Ok((opts, None))
        }
        None => {
            let t = tempfile::Builder::new()
                .prefix("rwdir-stress-dir-")
                .tempdir()
                .map_err(|e| format!("create a temporary directory: {e}"))?;
            opts.dir = t.path().to_path_buf();
            Ok((opts, Some(t)))
        }
    }
}

/// `--check LOG [READERS]`: replays a kept log and prints every violation.
fn check_file(args: &[OsString]) -> ExitCode {
    let (log, readers) = match args {
        [log] => (log, 2),
        [log, n] => match n.to_str().and_then(|n| n.parse().ok()) {
            Some(n) => (log, n),
            None => {
                eprintln!("usage: stress --check LOG [READERS]");
                return ExitCode::from(2);
            }
        },
        _ => {
            eprintln!("usage: stress --check LOG [READERS]");
            return ExitCode::from(2);
        }
    };
    let text = match fs::read_to_string(log) {
        Ok(t) => t,
        Err(e) => {
            eprintln!("stress: {}: {e}", PathBuf::from(log).display());
            return ExitCode::FAILURE;
        }
    };
    let c = check(&text, readers);
    println!(
        "reads: {}  writes: {}  FIFO checks: {}  skipped: {}  write timeouts: {}  locks lost: {}  \
         killed: {}",
        c.reads, c.writes, c.fifo_checks, c.fifo_skipped, c.timeouts, c.lost, c.kills
    );
    for v in &c.violations {
        println!("VIOLATION: {v}");
    }
    println!("violations: {}", c.violations.len());
    if c.violations.is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

fn main() -> ExitCode {
    let args: Vec<OsString> = std::env::args_os().skip(1).collect();
    if args.first().is_some_and(|a| a == "--worker") {
        let Some(w) = Worker::from_args(&args[1..]) else {
            eprintln!("stress: bad --worker arguments");
            return ExitCode::from(2);
        };
        return match worker_main(&w) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("stress worker {}: {e}", w.id);
                ExitCode::FAILURE
            }
        };
    }
    if args.first().is_some_and(|a| a == "--check") {
        return check_file(&args[1..]);
    }
    let (opts, _tmp) = match parse(&args) {
        Ok(x) => x,
        Err(e) => {
            eprintln!("{e}");
            return ExitCode::from(2);
        }
    };
    let exe = match std::env::current_exe() {
        Ok(e) => e,
        Err(e) => {
            eprintln!("stress: current_exe: {e}");
            return ExitCode::FAILURE;
        }
    };
    let spawn = |w: &Worker| {
        let mut c = Command::new(&exe);
        c.arg("--worker").args(w.to_args());
        c
    };
    match run(&opts, &spawn, &mut io::stdout()) {
        Ok(r) if r.check.violations.is_empty() => ExitCode::SUCCESS,
        Ok(_) => ExitCode::FAILURE,
        Err(e) => {
            eprintln!("stress: {e}");
            ExitCode::FAILURE
        }
    }
}
