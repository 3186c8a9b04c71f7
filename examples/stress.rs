//! Stress test: reader and writer processes hammer one directory's lock, and a checker
//! replays what they did.
//!
//! ```text
//! cargo run --release --example stress -- --readers 6 --writers 3 --seconds 60 [DIR]
//! ```
//!
//! DIR defaults to a fresh temporary directory. The example re-runs itself as worker
//! processes (`--worker read|write DIR LOG`), which loop: acquire, log `E`, hold for a
//! short random time, log `X`, release. Writers sometimes downgrade to a reader before
//! releasing (logged as `D`), and readers sometimes use a short timeout.
//!
//! # The log
//!
//! Every worker appends to ONE log file opened with `O_APPEND`, one `write(2)` per
//! line, so the file's order is the real-time order of the events: an event logged
//! after another one completed comes later in the file. `E` is logged after the grant
//! and `X` before the release, so a logged interval lies inside the real one, and any
//! overlap in the log is an overlap of real grants. `D` (downgrade) is logged just
//! before `downgrade()` is called: from there on the checker counts the worker as a
//! reader, which is weaker than the truth (it still holds the write lock until the
//! call turns it into a read lock), so a writer entering before its `X` is still a
//! violation, and readers entering once `.master_lock` is gone are not.
//!
//! # What is checked, on every event
//!
//! - **Exclusion**: a writer's `E` while anyone is inside, or a reader's `E` while a
//!   writer is inside, is a violation.
//! - **Fencing tokens** strictly grow from one write grant to the next.
//! - **FIFO among writers**. The token order alone proves nothing about FIFO, and the
//!   queue stamps (`ns` of the pending files) are not exposed. Instead, before calling
//!   `write()`, a writer logs `S`, reads `status()`, and logs `Q` with the pids of the
//!   queued writers it saw. Each of them had its pending file in place before our own
//!   was made, so its `ns` is smaller and the lock must let it in first: its first
//!   `E` after our `S` must precede our next `E`. This is sound (it never flags a
//!   correct run): the attempt we saw queued enters after our `S`, so "its first `E`
//!   after our `S`" is that attempt or an earlier one, and both enter before us if the
//!   lock is FIFO. Writers never time out, so every attempt seen queued does enter. It
//!   assumes the realtime clock does not step backwards during the run.
//! - **Sharing**: with two or more readers, readers must have overlapped at least once.
//!
//! After the run, every worker must have exited successfully, every `E` must have its
//! `X`, and the state directory must hold nothing but the token file.
//!
//! It prints totals, grants per second and a last line `violations: N`, and exits
//! non-zero when N > 0. `tests/stress.rs` runs a short stress with the same code.

#![allow(clippy::disallowed_methods)]

use std::collections::{BTreeMap, BTreeSet};
use std::ffi::OsString;
use std::fs::{self, File, OpenOptions};
use std::io::{self, Read, Write};
use std::path::PathBuf;
use std::process::{Command, ExitCode, Stdio};
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
}

/// What a worker process does.
#[derive(Debug, Clone)]
pub struct Worker {
    pub write: bool,
    pub dir: PathBuf,
    pub log: PathBuf,
}

impl Worker {
    /// `read|write DIR LOG`, the arguments after `--worker`.
    pub fn to_args(&self) -> Vec<OsString> {
        vec![
            OsString::from(if self.write { "write" } else { "read" }),
            self.dir.clone().into_os_string(),
            self.log.clone().into_os_string(),
        ]
    }

    pub fn from_args(args: &[OsString]) -> Option<Worker> {
        let [kind, dir, log] = args else { return None };
        let write = match kind.to_str()? {
            "read" => false,
            "write" => true,
            _ => return None,
        };
        Some(Worker {
            write,
            dir: PathBuf::from(dir),
            log: PathBuf::from(log),
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
    pub last_token: u64,
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
    // Pass 1: positions of every writer's `E`, for the FIFO obligations.
    let mut write_enters: BTreeMap<u32, Vec<usize>> = BTreeMap::new();
    for (i, l) in lines.iter().enumerate() {
        let f: Vec<&str> = l.split_whitespace().collect();
        if f.len() >= 4
            && f[2] == "E"
            && f[3] == "W"
            && let Ok(pid) = f[1].parse()
        {
            write_enters.entry(pid).or_default().push(i);
        }
    }
    let first_after = |pid: u32, pos: usize| -> Option<usize> {
        let v = write_enters.get(&pid)?;
        v.get(v.partition_point(|&p| p <= pos)).copied()
    };
    // Pass 2: replay.
    let mut writer: Option<u32> = None;
    let mut inside_readers: BTreeSet<u32> = BTreeSet::new();
    let mut last_s: BTreeMap<u32, usize> = BTreeMap::new();
    let mut last_token: Option<u64> = None;
    for (i, l) in lines.iter().enumerate() {
        let f: Vec<&str> = l.split_whitespace().collect();
        let (Some(pid), Some(ev)) = (f.get(1).and_then(|p| p.parse::<u32>().ok()), f.get(2)) else {
            c.violation(i, format!("malformed line `{l}`"));
            continue;
        };
        match (*ev, f.get(3).copied()) {
            ("S", _) => {
                last_s.insert(pid, i);
            }
            ("Q", _) => {
                let Some(&s) = last_s.get(&pid) else {
                    c.violation(i, format!("{pid}: Q without S"));
                    continue;
                };
                let Some(mine) = first_after(pid, i) else {
                    continue; // never entered (the run ended): nothing to compare
                };
                for ahead in f[3..].iter().filter_map(|p| p.parse::<u32>().ok()) {
                    c.fifo_checks += 1;
                    match first_after(ahead, s) {
                        Some(theirs) if theirs < mine => {}
                        theirs => c.violation(
                            i,
                            format!(
                                "FIFO: writer {pid} saw writer {ahead} queued before it called \
                                 write(), but entered first (line {}; theirs: {:?})",
                                mine + 1,
                                theirs.map(|t| t + 1)
                            ),
                        ),
                    }
                }
            }
            ("E", Some("R")) => {
                c.reads += 1;
                if let Some(w) = writer {
                    c.violation(i, format!("reader {pid} entered while writer {w} holds"));
                }
                if !inside_readers.insert(pid) {
                    c.violation(i, format!("reader {pid} entered twice"));
                }
                c.max_readers = c.max_readers.max(inside_readers.len());
            }
            ("E", Some("W")) => {
                c.writes += 1;
                if let Some(w) = writer {
                    c.violation(i, format!("writer {pid} entered while writer {w} holds"));
                }
                if !inside_readers.is_empty() {
                    c.violation(
                        i,
                        format!("writer {pid} entered while readers {inside_readers:?} hold"),
                    );
                }
                writer = Some(pid);
                match f.get(4).and_then(|t| t.parse::<u64>().ok()) {
                    Some(t) => {
                        if let Some(prev) = last_token.filter(|&p| t <= p) {
                            c.violation(i, format!("token {t} after token {prev}"));
                        }
                        last_token = Some(t);
                        c.last_token = t;
                    }
                    None => c.violation(i, format!("writer {pid}: no token")),
                }
            }
            ("D", _) => {
                c.downgrades += 1;
                if writer != Some(pid) {
                    c.violation(
                        i,
                        format!("{pid} downgraded without holding the write lock"),
                    );
                }
                writer = None;
                inside_readers.insert(pid);
                c.max_readers = c.max_readers.max(inside_readers.len());
            }
            ("X", Some("W")) => {
                if writer != Some(pid) {
                    c.violation(i, format!("writer {pid} left without holding"));
                }
                writer = None;
            }
            ("X", Some("R")) => {
                if !inside_readers.remove(&pid) {
                    c.violation(i, format!("reader {pid} left without holding"));
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
fn log(file: &File, line: &str) -> Result<(), String> {
    let ns = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0);
    let line = format!("{ns} {} {line}\n", std::process::id());
    match (&*file).write(line.as_bytes()) {
        Ok(n) if n == line.len() => Ok(()),
        Ok(n) => Err(format!("short write to the log: {n} of {}", line.len())),
        Err(e) => Err(format!("write to the log: {e}")),
    }
}

struct Rng(u64);

impl Rng {
    fn new() -> Rng {
        let t = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.subsec_nanos())
            .unwrap_or(0);
        Rng((u64::from(std::process::id()) << 32 ^ u64::from(t)) | 1)
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
    let lock = DirLock::new(&w.dir).map_err(|e| e.to_string())?;
    let mut rng = Rng::new();
    let err = |e: Error| e.to_string();
    while !stop.load(Ordering::SeqCst) {
        if w.write {
            // Think outside the lock, so that readers get a turn (writers have priority).
            std::thread::sleep(Duration::from_millis(2) + rng.micros(20_000));
            log(&file, "S")?;
            let ahead: Vec<String> = lock
                .status()
                .map_err(err)?
                .pending
                .iter()
                .filter_map(|e| e.holder.as_ref().map(|h| h.pid.to_string()))
                .collect();
            log(&file, &format!("Q {}", ahead.join(" ")))?;
            let g = lock.write().map_err(err)?;
            log(&file, &format!("E W {}", g.token()))?;
            std::thread::sleep(rng.micros(2_000));
            g.check().map_err(err)?;
            if rng.below(5) == 0 {
                // Logged before the call: readers may enter as soon as `.master_lock`
                // is gone, before `downgrade` returns.
                log(&file, "D")?;
                let r = g.downgrade().map_err(err)?;
                std::thread::sleep(rng.micros(2_000));
                r.check().map_err(err)?;
                log(&file, "X R")?;
                r.release().map_err(err)?;
            } else {
                log(&file, "X W")?;
                g.release().map_err(err)?;
            }
        } else {
            std::thread::sleep(rng.micros(3_000));
            let g = if rng.below(4) == 0 {
                match lock.try_read_for(Duration::from_millis(5)) {
                    Err(Error::TimedOut { .. }) => continue,
                    r => r.map_err(err)?,
                }
            } else {
                lock.read().map_err(err)?
            };
            log(&file, "E R")?;
            std::thread::sleep(rng.micros(5_000));
            g.check().map_err(err)?;
            log(&file, "X R")?;
            g.release().map_err(err)?;
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

/// Runs the stress: spawns the workers with `spawn` (which makes the command that runs
/// [`worker_main`] for a worker), lets them run, stops them, checks. Writes a summary to
/// `out`, ending with `violations: N`.
pub fn run(
    opts: &Options,
    spawn: &dyn Fn(&Worker) -> Command,
    out: &mut dyn Write,
) -> io::Result<Report> {
    let logdir = tempfile::Builder::new().prefix("rwdir-stress-").tempdir()?;
    let log = logdir.path().join("events.log");
    File::create(&log)?;
    writeln!(
        out,
        "stress: {} readers, {} writers, {} s on {}",
        opts.readers,
        opts.writers,
        opts.duration.as_secs_f64(),
        opts.dir.display()
    )?;
    let mut violations = Vec::new();
    let mut children = Vec::new();
    let start = Instant::now();
    for i in 0..opts.readers + opts.writers {
        let w = Worker {
            write: i >= opts.readers,
            dir: opts.dir.clone(),
            log: log.clone(),
        };
        let child = spawn(&w)
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .spawn()?;
        children.push(child);
    }
    let mut next_report = Duration::from_secs(10);
    while start.elapsed() < opts.duration {
        let left = opts.duration.saturating_sub(start.elapsed());
        std::thread::sleep(left.min(Duration::from_millis(100)));
        if start.elapsed() >= next_report && start.elapsed() < opts.duration {
            let grants = fs::read_to_string(&log)?.matches(" E ").count();
            writeln!(out, "  {:>4} s: {grants} grants", next_report.as_secs())?;
            next_report += Duration::from_secs(10);
        }
    }
    // Stop: close every stdin; each worker finishes its current round and exits.
    for c in &mut children {
        drop(c.stdin.take());
    }
    let stop_deadline = Instant::now() + Duration::from_secs(60);
    for c in &mut children {
        loop {
            match c.try_wait()? {
                Some(status) if status.success() => break,
                Some(status) => {
                    violations.push(format!("worker {} exited with {status}", c.id()));
                    break;
                }
                None if Instant::now() > stop_deadline => {
                    let _ = c.kill();
                    let _ = c.wait();
                    violations.push(format!("worker {} did not stop within 60 s", c.id()));
                    break;
                }
                None => std::thread::sleep(Duration::from_millis(5)),
            }
        }
    }
    let elapsed = start.elapsed();
    let text = fs::read_to_string(&log)?;
    let mut check = check(&text, opts.readers);
    // Nothing but the token may be left in the state directory.
    let state = opts.dir.join(".rwdir");
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

const USAGE: &str = "usage: stress [--readers N] [--writers N] [--seconds S] [DIR]";

fn parse(args: &[OsString]) -> Result<(Options, Option<tempfile::TempDir>), String> {
    let mut opts = Options {
        readers: 6,
        writers: 3,
        duration: Duration::from_secs(60),
        dir: PathBuf::new(),
    };
    let mut dir = None;
    let mut it = args.iter();
    while let Some(a) = it.next() {
        let mut num = |name: &str| -> Result<u64, String> {
            it.next()
                .and_then(|v| v.to_str())
                .and_then(|v| v.parse().ok())
                .ok_or_else(|| format!("{name} needs a number\n{USAGE}"))
        };
        match a.to_str() {
            Some("--readers") => opts.readers = num("--readers")? as usize,
            Some("--writers") => opts.writers = num("--writers")? as usize,
            Some("--seconds") => opts.duration = Duration::from_secs(num("--seconds")?),
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
                eprintln!("stress worker {}: {e}", std::process::id());
                ExitCode::FAILURE
            }
        };
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
