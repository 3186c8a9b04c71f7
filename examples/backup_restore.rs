//! Backup and restore under `rwdir`: readers check that they always see one whole
//! snapshot while a restore replaces the data file by file.
//!
//! ```text
//! cargo run --release --example backup_restore [-- [DIR] [--seconds N] [--no-lock]]
//! ```
//!
//! The scenario, in `DIR` (a fresh temporary directory unless one is given):
//!
//! - `DIR/snapshots/v1.snap`, `v2.snap`, `v3.snap`: three backups (simple archives,
//!   like tarballs) of the same 2000 files in 8 subdirectories, each with a `MANIFEST`
//!   naming its version and every file's checksum;
//! - `DIR/data`: the live data, a copy of one snapshot;
//! - 4 reader processes loop: take a read lock on `DIR`, read the manifest and every
//!   file, and check that each file's checksum is the one the manifest names — that is,
//!   that they see exactly one complete snapshot;
//! - 1 restore process loops: take the write lock on `DIR`, unpack the next snapshot
//!   over `DIR/data` file by file (each file rewritten in place, as `tar -x` does), the
//!   manifest last, release, and pause a little before the next restore;
//! - halfway through, reader 0 takes its read lock and stops there; once it reports
//!   that it holds the lock and the lock's status shows the restore queued behind it,
//!   it is killed with `SIGKILL`. The restore goes on at its next look (within the
//!   polling back-off, 100 ms at most by default): on the same host a dead holder is
//!   recognised exactly (pid and process start time), and its lock file is removed by
//!   the next contender.
//!
//! With `--no-lock` the same processes run without taking any lock, and the readers
//! report the torn states they see (files of two versions, or a half-written file).
//!
//! The run lasts `--seconds`, and runs on (30 s at most) if the SIGKILL step has not
//! finished by then, as on a loaded machine.
//!
//! The workers are this very binary, started again with a hidden first argument. They
//! talk to the parent over their stdin (`go`, `hold`; end of file means stop) and
//! stdout (one event per line). The parent prints one progress line per second and a
//! summary, and exits with 1 if any reader saw a torn state or anything failed, 2 on
//! a usage or setup error.
//!
//! Checksums are FNV-1a 64, written out below: not cryptographic, but plenty to tell
//! which snapshot a file came from and whether it was written whole.

// This example writes data files, never lock files: the lock files are rwdir's.
#![allow(clippy::disallowed_methods)]

use std::ffi::OsString;
use std::fmt::Write as _;
use std::fs;
use std::io::{self, BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, ExitCode, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant};

use rwdir::DirLock;

/// Files per snapshot.
const FILES: usize = 2000;
/// Subdirectories the files are spread over.
const SUBDIRS: usize = 8;
/// Snapshots the restore cycles through.
const VERSIONS: u32 = 3;
/// Reader processes.
const READERS: usize = 4;
/// Pause between two restores. This is pacing, not synchronisation: a restore right
/// after the previous one would queue before the waiting readers got their turn.
const RESTORE_PAUSE: Duration = Duration::from_millis(150);
/// How long workers get to start, and to stop once told.
const WORKER_GRACE: Duration = Duration::from_secs(30);
/// The hidden first argument that makes this binary a worker.
const WORKER_ARG: &str = "__backup_restore_worker";
/// Marks a directory set up by this example, so a given DIR is never clobbered.
const MARKER: &str = ".backup_restore-example";
const MANIFEST: &str = "MANIFEST";
const MANIFEST_HEAD: &str = "rwdir backup_restore manifest";

const USAGE: &str = "\
usage: backup_restore [DIR] [--seconds N] [--no-lock]

Readers verify complete snapshots of DIR/data under read locks while a restore
replaces it under the write lock; one reader is killed with SIGKILL halfway.

  DIR          work here (empty, or used by this example before) instead of a
               temporary directory; it is kept afterwards
  --seconds N  run for N seconds (default 20), longer if the SIGKILL step
               has not finished by then
  --no-lock    take no locks, to watch torn reads appear
";

type Res<T> = Result<T, String>;

/// Attaches what was done and on which path to an I/O error.
trait At<T> {
    fn at(self, action: &str, path: &Path) -> Res<T>;
}

impl<T> At<T> for io::Result<T> {
    fn at(self, action: &str, path: &Path) -> Res<T> {
        self.map_err(|e| format!("failed to {action} `{}`: {e}", path.display()))
    }
}

fn main() -> ExitCode {
    let args: Vec<OsString> = std::env::args_os().skip(1).collect();
    if args.first().is_some_and(|a| a == WORKER_ARG) {
        return worker::main(&args[1..]);
    }
    let opts = match parse_args(args) {
        Ok(Some(opts)) => opts,
        Ok(None) => {
            print!("{USAGE}");
            return ExitCode::SUCCESS;
        }
        Err(msg) => {
            eprintln!("backup_restore: {msg}\n\n{USAGE}");
            return ExitCode::from(2);
        }
    };
    match parent::run(&opts) {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::from(1),
        Err(msg) => {
            eprintln!("backup_restore: {msg}");
            ExitCode::from(2)
        }
    }
}

#[derive(Debug)]
struct Opts {
    dir: Option<PathBuf>,
    seconds: f64,
    lock: bool,
}

fn parse_args(args: Vec<OsString>) -> Res<Option<Opts>> {
    let mut opts = Opts {
        dir: None,
        seconds: 20.0,
        lock: true,
    };
    let mut it = args.into_iter();
    while let Some(arg) = it.next() {
        match arg.to_str() {
            Some("-h" | "--help") => return Ok(None),
            Some("--no-lock") => opts.lock = false,
            Some("--seconds") => {
                let v = it.next().ok_or("--seconds needs a value")?;
                opts.seconds = v
                    .to_str()
                    .and_then(|s| s.parse::<f64>().ok())
                    .filter(|s| s.is_finite() && *s > 0.0)
                    .ok_or_else(|| format!("bad --seconds value {v:?}: want a number > 0"))?;
            }
            Some(s) if s.starts_with('-') => return Err(format!("unknown option `{s}`")),
            _ if opts.dir.is_none() => opts.dir = Some(PathBuf::from(arg)),
            _ => return Err(format!("unexpected argument {arg:?}")),
        }
    }
    Ok(Some(opts))
}

// ---------------------------------------------------------------------------------
// Snapshots: content, checksums, manifests, restore, verification.

/// FNV-1a, 64 bits.
fn fnv1a64(bytes: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for &b in bytes {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h
}

fn rel_path(i: usize) -> String {
    format!("d{:02}/f{i:04}.dat", i % SUBDIRS)
}

/// The content of file `i` in snapshot `version`: a header naming both, then 200 to
/// 1200 pseudo-random bytes.
fn content(version: u32, i: usize) -> Vec<u8> {
    let header = format!("snapshot v{version} {}\n", rel_path(i));
    let mut x = fnv1a64(header.as_bytes()) | 1;
    let len = 200 + (x % 1000) as usize;
    let mut out = header.into_bytes();
    out.reserve(len);
    for _ in 0..len {
        // xorshift64
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        out.push(b'a' + (x % 26) as u8);
    }
    out
}

/// The snapshot a file's header names, if it has one.
fn version_of(bytes: &[u8]) -> Option<u32> {
    let rest = bytes.strip_prefix(b"snapshot v")?;
    let end = rest.iter().position(|&b| b == b' ')?;
    std::str::from_utf8(&rest[..end]).ok()?.parse().ok()
}

#[derive(Debug)]
struct Manifest {
    version: u32,
    files: Vec<(String, u64)>,
}

impl Manifest {
    fn format(&self) -> String {
        let mut s = format!(
            "{MANIFEST_HEAD}\nversion {}\nfiles {}\n",
            self.version,
            self.files.len()
        );
        for (path, sum) in &self.files {
            let _ = writeln!(s, "{sum:016x} {path}");
        }
        s.push_str("end\n");
        s
    }

    /// `None` unless the text is a whole manifest (a half-written one is torn).
    fn parse(text: &str) -> Option<Manifest> {
        let mut lines = text.lines();
        if lines.next()? != MANIFEST_HEAD {
            return None;
        }
        let version = lines.next()?.strip_prefix("version ")?.parse().ok()?;
        let n: usize = lines.next()?.strip_prefix("files ")?.parse().ok()?;
        let mut files = Vec::with_capacity(n);
        for _ in 0..n {
            let (sum, path) = lines.next()?.split_once(' ')?;
            files.push((path.to_string(), u64::from_str_radix(sum, 16).ok()?));
        }
        (lines.next()? == "end" && lines.next().is_none()).then_some(Manifest { version, files })
    }

    fn read(dir: &Path) -> Res<String> {
        let path = dir.join(MANIFEST);
        fs::read_to_string(&path).at("read manifest", &path)
    }
}

/// The header line of a snapshot archive.
const PACK_HEAD: &str = "rwdir backup_restore snapshot";

/// Writes snapshot `version` as one archive at `path`: a header line, then for each
/// file a line `LEN PATH` and LEN bytes; the manifest is the last entry.
fn write_snapshot(path: &Path, version: u32) -> Res<()> {
    let mut pack = format!("{PACK_HEAD}\n").into_bytes();
    let mut files = Vec::with_capacity(FILES);
    for i in 0..FILES {
        let rel = rel_path(i);
        let bytes = content(version, i);
        pack.extend_from_slice(format!("{} {rel}\n", bytes.len()).as_bytes());
        pack.extend_from_slice(&bytes);
        files.push((rel, fnv1a64(&bytes)));
    }
    let manifest = Manifest { version, files }.format();
    pack.extend_from_slice(format!("{} {MANIFEST}\n", manifest.len()).as_bytes());
    pack.extend_from_slice(manifest.as_bytes());
    if let Some(parent) = path.parent() {
        fs::create_dir_all(parent).at("create directory", parent)?;
    }
    fs::write(path, pack).at("write snapshot", path)
}

/// Splits a snapshot archive into `(path, bytes)` entries, in order.
fn unpack(pack: &[u8]) -> Option<Vec<(&str, &[u8])>> {
    let mut rest = pack
        .strip_prefix(PACK_HEAD.as_bytes())?
        .strip_prefix(b"\n")?;
    let mut out = Vec::new();
    while !rest.is_empty() {
        let nl = rest.iter().position(|&b| b == b'\n')?;
        let (len, path) = std::str::from_utf8(&rest[..nl]).ok()?.split_once(' ')?;
        let len: usize = len.parse().ok()?;
        let body = rest.get(nl + 1..nl + 1 + len)?;
        out.push((path, body));
        rest = &rest[nl + 1 + len..];
    }
    Some(out)
}

/// Restores the snapshot archive `from` into `to` like `tar -x` would: file by file,
/// each file rewritten in place, the manifest last. Anyone reading `to` meanwhile sees
/// a mix of two snapshots: that is what the write lock is for. Returns the version.
fn restore(from: &Path, to: &Path) -> Res<u32> {
    let pack = fs::read(from).at("read snapshot", from)?;
    let entries = unpack(&pack).ok_or_else(|| format!("bad snapshot `{}`", from.display()))?;
    let mut version = None;
    for (rel, bytes) in entries {
        if rel == MANIFEST {
            version = std::str::from_utf8(bytes)
                .ok()
                .and_then(Manifest::parse)
                .map(|m| m.version);
        }
        let dst = to.join(rel);
        if let Some(parent) = dst.parent() {
            fs::create_dir_all(parent).at("create directory", parent)?;
        }
        overwrite(&dst, bytes)?;
    }
    version.ok_or_else(|| format!("no manifest in snapshot `{}`", from.display()))
}

/// Rewrites `path` in place: writes `bytes` over the old content, then cuts the file
/// to length. (Not `fs::write`: truncating to zero first makes ext4 flush every file on
/// close, which makes a restore ten times slower.)
fn overwrite(path: &Path, bytes: &[u8]) -> Res<()> {
    let mut f = fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(false)
        .open(path)
        .at("open", path)?;
    f.write_all(bytes).at("write", path)?;
    f.set_len(bytes.len() as u64).at("truncate", path)
}

/// What a reader saw.
enum Seen {
    /// Every file matches the manifest of this snapshot.
    Whole(u32),
    /// Not one complete snapshot; says what was wrong.
    Torn(String),
}

/// Reads the manifest of `data` and every file it names, and compares checksums.
fn verify(data: &Path) -> Res<Seen> {
    let text = Manifest::read(data)?;
    let Some(m) = Manifest::parse(&text) else {
        return Ok(Seen::Torn("the manifest is half written".into()));
    };
    let mut bad = 0usize;
    let mut first = None;
    for (rel, want) in &m.files {
        let path = data.join(rel);
        let bytes = fs::read(&path).at("read", &path)?;
        if fnv1a64(&bytes) != *want {
            bad += 1;
            if first.is_none() {
                let what = match version_of(&bytes) {
                    Some(v) if v != m.version => format!("holds v{v}"),
                    _ => "is half written".to_string(),
                };
                first = Some(format!("{rel} {what}"));
            }
        }
    }
    Ok(match first {
        None => Seen::Whole(m.version),
        Some(first) => Seen::Torn(format!(
            "manifest says v{}, but {first} ({bad} of {} files differ)",
            m.version,
            m.files.len()
        )),
    })
}

// ---------------------------------------------------------------------------------
// Workers.

mod worker {
    //! A reader or the restorer. Arguments: `reader ID DIR [--no-lock]` or
    //! `restorer DIR [--no-lock]`.
    //!
    //! stdin: `go` starts work, `hold` (reader) makes the next read lock the last one,
    //! held until the process is killed; end of file stops the worker.
    //!
    //! stdout, one event per line:
    //! - `ready`
    //! - `read WAIT_US VERIFY_US ok VERSION` or `read WAIT_US VERIFY_US torn DETAIL`
    //! - `holding PID`
    //! - `restore WAIT_US TOKEN VERSION RESTORE_US` (token 0 without a lock)
    //! - `error MESSAGE`

    use super::*;

    static STOP: AtomicBool = AtomicBool::new(false);
    static HOLD: AtomicBool = AtomicBool::new(false);
    static HOLDING: AtomicBool = AtomicBool::new(false);

    /// Sends one event to the parent; exits if the parent is gone.
    fn say(line: &str) {
        let mut out = io::stdout().lock();
        if writeln!(out, "{line}").and_then(|()| out.flush()).is_err() {
            std::process::exit(3);
        }
    }

    pub(super) fn main(args: &[OsString]) -> ExitCode {
        let args: Vec<&str> = args.iter().filter_map(|a| a.to_str()).collect();
        let lock = !args.contains(&"--no-lock");
        let result = match args.as_slice() {
            ["reader", id, dir, ..] => reader(id, Path::new(dir), lock),
            ["restorer", dir, ..] => restorer(Path::new(dir), lock),
            _ => Err(format!("bad worker arguments {args:?}")),
        };
        match result {
            Ok(()) => ExitCode::SUCCESS,
            Err(msg) => {
                say(&format!("error {msg}"));
                ExitCode::from(1)
            }
        }
    }

    /// Listens to the parent on stdin; returns once `go` (or end of file) arrived.
    fn listen() {
        let (go_tx, go_rx) = mpsc::channel::<()>();
        thread::spawn(move || {
            for line in io::stdin().lock().lines() {
                match line.as_deref() {
                    Ok("go") => {
                        let _ = go_tx.send(());
                    }
                    Ok("hold") => HOLD.store(true, Ordering::SeqCst),
                    Ok(_) => {}
                    Err(_) => break,
                }
            }
            STOP.store(true, Ordering::SeqCst);
            if HOLDING.load(Ordering::SeqCst) {
                // The parent went away without killing us: let go of the lock.
                std::process::exit(0);
            }
            drop(go_tx);
        });
        say("ready");
        let _ = go_rx.recv();
    }

    fn open(dir: &Path, lock: bool) -> Res<Option<DirLock>> {
        if !lock {
            return Ok(None);
        }
        DirLock::new(dir)
            .map(Some)
            .map_err(|e| format!("open lock: {e}"))
    }

    fn reader(id: &str, dir: &Path, lock: bool) -> Res<()> {
        let lock = open(dir, lock)?;
        let data = dir.join("data");
        listen();
        while !STOP.load(Ordering::SeqCst) {
            let t0 = Instant::now();
            let guard = match &lock {
                Some(l) => Some(l.read().map_err(|e| format!("reader {id}: {e}"))?),
                None => None,
            };
            let waited = t0.elapsed();
            let t1 = Instant::now();
            let seen = verify(&data)?;
            let took = t1.elapsed();
            let (w, v) = (waited.as_micros(), took.as_micros());
            match seen {
                Seen::Whole(version) => say(&format!("read {w} {v} ok {version}")),
                Seen::Torn(detail) => say(&format!("read {w} {v} torn {detail}")),
            }
            if HOLD.load(Ordering::SeqCst) {
                // Keep this read lock (its read was just reported) until killed.
                HOLDING.store(true, Ordering::SeqCst);
                if STOP.load(Ordering::SeqCst) {
                    return Ok(());
                }
                say(&format!("holding {}", std::process::id()));
                let _keep = guard;
                loop {
                    // Until SIGKILL (or the parent closes stdin: see `listen`).
                    thread::park();
                }
            }
            if let Some(g) = guard {
                g.release().map_err(|e| format!("reader {id}: {e}"))?;
            }
        }
        Ok(())
    }

    fn restorer(dir: &Path, lock: bool) -> Res<()> {
        let lock = open(dir, lock)?;
        let data = dir.join("data");
        let current = Manifest::parse(&Manifest::read(&data)?)
            .ok_or_else(|| format!("bad manifest in `{}`", data.display()))?;
        let mut version = current.version;
        listen();
        while !STOP.load(Ordering::SeqCst) {
            version = version % VERSIONS + 1;
            let t0 = Instant::now();
            let guard = match &lock {
                Some(l) => Some(l.write().map_err(|e| format!("restorer: {e}"))?),
                None => None,
            };
            let waited = t0.elapsed();
            let token = match &guard {
                Some(g) => g.token().map_err(|e| format!("restorer: {e}"))?,
                None => 0,
            };
            let t1 = Instant::now();
            let snapshot = dir.join("snapshots").join(format!("v{version}.snap"));
            let restored = restore(&snapshot, &data)?;
            let took = t1.elapsed();
            if let Some(g) = guard {
                g.release().map_err(|e| format!("restorer: {e}"))?;
            }
            say(&format!(
                "restore {} {token} {restored} {}",
                waited.as_micros(),
                took.as_micros()
            ));
            thread::sleep(RESTORE_PAUSE);
        }
        Ok(())
    }
}

// ---------------------------------------------------------------------------------
// The parent: set up, start workers, watch, kill one reader, summarise.

mod parent {
    use super::*;

    /// Makes `root`; refuses a given directory that is not empty and was not set up
    /// by this example before.
    fn claim(root: &Path, given: bool) -> Res<()> {
        fs::create_dir_all(root).at("create directory", root)?;
        if given && !root.join(MARKER).exists() {
            let mut entries = fs::read_dir(root).at("list directory", root)?;
            if entries.next().is_some() {
                return Err(format!(
                    "`{}` is not empty and was not set up by this example; \
                     give an empty or new directory",
                    root.display()
                ));
            }
        }
        Ok(())
    }

    /// Writes the snapshots and unpacks v1 into `root/data`.
    fn prepare(root: &Path) -> Res<()> {
        let marker = root.join(MARKER);
        fs::write(&marker, "set up by `cargo run --example backup_restore`\n")
            .at("write", &marker)?;
        let snapshots = root.join("snapshots");
        for v in 1..=VERSIONS {
            write_snapshot(&snapshots.join(format!("v{v}.snap")), v)?;
        }
        let data = root.join("data");
        restore(&snapshots.join("v1.snap"), &data)?;
        match verify(&data)? {
            Seen::Whole(1) => Ok(()),
            _ => Err(format!("`{}` does not verify after setup", data.display())),
        }
    }

    /// Waits (bounded) until the restorer queues for the write lock or holds it while
    /// waiting for readers to drain, as `status` shows; `false` if it never did.
    fn writer_waits(root: &Path) -> Res<bool> {
        let lock = DirLock::new(root).map_err(|e| format!("open lock: {e}"))?;
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            let st = lock.status().map_err(|e| format!("status: {e}"))?;
            if st.writer.is_some() || !st.pending.is_empty() {
                return Ok(true);
            }
            thread::sleep(Duration::from_millis(5));
        }
        Ok(false)
    }

    enum Event {
        Line(usize, String),
        Eof(usize),
    }

    struct Worker {
        name: String,
        child: Child,
        stdin: Option<ChildStdin>,
        ready: bool,
        gone: bool,
    }

    impl Worker {
        fn send(&mut self, line: &str) {
            if let Some(stdin) = &mut self.stdin {
                // A worker that died early is reported through its stdout's EOF.
                let _ = writeln!(stdin, "{line}");
            }
        }
    }

    fn spawn(
        idx: usize,
        name: String,
        args: &[&std::ffi::OsStr],
        tx: &mpsc::Sender<Event>,
    ) -> Res<Worker> {
        let exe = std::env::current_exe().map_err(|e| format!("find own executable: {e}"))?;
        let mut child = Command::new(&exe)
            .arg(WORKER_ARG)
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .at("start worker", &exe)?;
        let stdout = child.stdout.take().ok_or("worker has no stdout")?;
        let tx = tx.clone();
        thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if tx.send(Event::Line(idx, line)).is_err() {
                    return;
                }
            }
            let _ = tx.send(Event::Eof(idx));
        });
        let stdin = child.stdin.take();
        Ok(Worker {
            name,
            child,
            stdin,
            ready: false,
            gone: false,
        })
    }

    #[derive(Default)]
    struct Stats {
        reads_ok: u64,
        torn: u64,
        first_torn: Option<String>,
        read_wait_sum: u64,
        read_wait_max: u64,
        read_waited: u64,
        verify_sum: u64,
        restores: u64,
        version: u32,
        token: u64,
        tokens_grow: bool,
        restore_wait_max: u64,
        restore_sum: u64,
        killed: Option<(u32, Instant)>,
        /// Whether the restorer was seen waiting for the lock when the reader was killed.
        killed_blocking: bool,
        restores_after_kill: u64,
        resumed_after_kill: Option<Duration>,
        errors: Vec<String>,
    }

    fn ms(us: u64) -> String {
        format!("{:.1} ms", us as f64 / 1000.0)
    }

    impl Stats {
        fn on_line(&mut self, who: &str, line: &str, now: Instant) -> Res<()> {
            let bad = || format!("{who} sent a bad line: {line:?}");
            let mut f = line.splitn(5, ' '); // `read W V torn DETAIL...`
            match f.next() {
                Some("read") => {
                    let wait: u64 = f.next().and_then(|s| s.parse().ok()).ok_or_else(bad)?;
                    let took: u64 = f.next().and_then(|s| s.parse().ok()).ok_or_else(bad)?;
                    self.read_wait_sum += wait;
                    self.read_wait_max = self.read_wait_max.max(wait);
                    self.read_waited += u64::from(wait >= 1000);
                    self.verify_sum += took;
                    match f.next() {
                        Some("ok") => self.reads_ok += 1,
                        Some("torn") => {
                            self.torn += 1;
                            if self.first_torn.is_none() {
                                let detail = f.next().unwrap_or("");
                                self.first_torn = Some(format!("{who}: {detail}"));
                            }
                        }
                        _ => return Err(bad()),
                    }
                }
                Some("restore") => {
                    let mut num = || f.next().and_then(|s| s.parse::<u64>().ok()).ok_or_else(bad);
                    let (wait, token, version, took) = (num()?, num()?, num()?, num()?);
                    if self.restores == 0 {
                        self.tokens_grow = true;
                    } else if token != 0 && token <= self.token {
                        self.tokens_grow = false;
                        self.errors
                            .push(format!("fencing token went from {} to {token}", self.token));
                    }
                    self.restores += 1;
                    self.token = token;
                    self.version = version as u32;
                    self.restore_wait_max = self.restore_wait_max.max(wait);
                    self.restore_sum += took;
                    if let Some((_, at)) = self.killed {
                        self.restores_after_kill += 1;
                        if self.resumed_after_kill.is_none() {
                            // The grant came `took` before this line was sent.
                            let granted =
                                now.checked_sub(Duration::from_micros(took)).unwrap_or(now);
                            self.resumed_after_kill = Some(granted.saturating_duration_since(at));
                        }
                    }
                }
                Some("error") => {
                    let msg = line.strip_prefix("error ").unwrap_or(line);
                    self.errors.push(format!("{who}: {msg}"));
                }
                Some("ready" | "holding") => {}
                _ => return Err(bad()),
            }
            Ok(())
        }

        fn reads(&self) -> u64 {
            self.reads_ok + self.torn
        }

        fn progress(&self, t: Duration, running: usize, lock: bool) -> String {
            let grants = if lock {
                format!(
                    "grants {:>4} ({} r, {} w)",
                    self.reads() + self.restores,
                    self.reads(),
                    self.restores
                )
            } else {
                "NO LOCK".to_string()
            };
            let waits = if lock {
                format!(
                    " | waits: read avg {} max {}, write max {} ms",
                    self.read_wait_sum / self.reads().max(1) / 1000,
                    self.read_wait_max / 1000,
                    self.restore_wait_max / 1000
                )
            } else {
                String::new()
            };
            format!(
                "{:>3.0}s | {grants} | restores {:>3} (v{}) | reads verified {:>4} | \
                 torn {:>3}{waits} | readers {running} up{}",
                t.as_secs_f64(),
                self.restores,
                self.version,
                self.reads(),
                self.torn,
                if self.killed.is_some() {
                    ", 1 killed"
                } else {
                    ""
                }
            )
        }
    }

    pub(super) fn run(opts: &Opts) -> Res<bool> {
        let tmp;
        let root = match &opts.dir {
            Some(d) => d.clone(),
            None => {
                tmp = tempfile::Builder::new()
                    .prefix("rwdir-backup-restore-")
                    .tempdir()
                    .map_err(|e| format!("create temporary directory: {e}"))?;
                tmp.path().to_path_buf()
            }
        };
        let lock = opts.lock;
        claim(&root, opts.dir.is_some())?;
        println!(
            "backup_restore: {} files x {VERSIONS} snapshots in `{}`, {READERS} readers, \
             1 restorer, {} s, lock {}",
            FILES,
            root.display(),
            opts.seconds,
            if lock { "ON" } else { "OFF (--no-lock)" }
        );
        let t = Instant::now();
        prepare(&root)?;
        println!(
            "set up in {:.1} s: DIR/snapshots/v1..v{VERSIONS}.snap, DIR/data (v1); starting",
            t.elapsed().as_secs_f64()
        );

        let (tx, rx) = mpsc::channel();
        let mut workers = Vec::new();
        let flag: &std::ffi::OsStr = if lock {
            "--lock".as_ref()
        } else {
            "--no-lock".as_ref()
        };
        for i in 0..READERS {
            let id = i.to_string();
            let args = ["reader".as_ref(), id.as_ref(), root.as_os_str(), flag];
            workers.push(spawn(i, format!("reader {i}"), &args, &tx)?);
        }
        let restorer = READERS;
        let args = ["restorer".as_ref(), root.as_os_str(), flag];
        workers.push(spawn(restorer, "restorer".into(), &args, &tx)?);
        drop(tx);
        let victim = 0;

        // Wait until every worker said `ready`.
        let deadline = Instant::now() + WORKER_GRACE;
        while workers.iter().any(|w| !w.ready) {
            let left = deadline.saturating_duration_since(Instant::now());
            match rx.recv_timeout(left) {
                Ok(Event::Line(i, line)) if line == "ready" => workers[i].ready = true,
                Ok(Event::Line(i, line)) => {
                    return Err(format!("{} failed to start: {line}", workers[i].name));
                }
                Ok(Event::Eof(i)) => return Err(format!("{} exited at start", workers[i].name)),
                Err(_) => return Err("workers did not start in time".into()),
            }
        }
        for w in &mut workers {
            w.send("go");
        }

        let start = Instant::now();
        let length = Duration::from_secs_f64(opts.seconds);
        let end = start + length;
        let halfway = start + length / 2;
        let mut stats = Stats::default();
        let mut hold_sent = false;
        let mut next_tick = start + Duration::from_secs(1);
        let mut victim_pid = None;

        let mut handle = |ev: Event, workers: &mut Vec<Worker>, stats: &mut Stats| -> Res<()> {
            match ev {
                Event::Line(i, line) => {
                    if i == victim && line.starts_with("holding ") {
                        let queued = lock && writer_waits(&root)?;
                        let w = &mut workers[i];
                        w.child.kill().at("kill", Path::new(&w.name))?;
                        // Reap it, as a parent should. (rwdir would judge it dead
                        // even as an unreaped zombie.)
                        w.child.wait().at("wait for", Path::new(&w.name))?;
                        let pid = w.child.id();
                        stats.killed = Some((pid, Instant::now()));
                        stats.killed_blocking = queued;
                        victim_pid = Some(pid);
                        println!(
                            "  -- {} (pid {pid}) {}: sent SIGKILL",
                            w.name,
                            match (lock, queued) {
                                (true, true) => "holds its read lock, the restore waits",
                                (true, false) => "holds its read lock",
                                (false, _) => "stopped after a read",
                            }
                        );
                    }
                    stats.on_line(&workers[i].name, &line, Instant::now())
                }
                Event::Eof(i) => {
                    workers[i].gone = true;
                    Ok(())
                }
            }
        };

        // Run.
        let mut overtime = false;
        loop {
            let now = Instant::now();
            if now >= end {
                // Run on (boundedly) until the SIGKILL step is complete: the victim was
                // killed and a restore went through after it.
                if stats.restores_after_kill > 0 {
                    break;
                }
                if now >= end + WORKER_GRACE {
                    stats.errors.push(format!(
                        "the SIGKILL step did not finish within {} s after the end",
                        WORKER_GRACE.as_secs()
                    ));
                    break;
                }
                if !overtime {
                    println!("  -- time is up; running on until the SIGKILL step is done");
                    overtime = true;
                }
            }
            if !hold_sent && now >= halfway {
                workers[victim].send("hold");
                hold_sent = true;
            }
            if now >= next_tick {
                let up = workers[..READERS].iter().filter(|w| !w.gone).count();
                println!("{}", stats.progress(now - start, up, lock));
                next_tick += Duration::from_secs(1);
                continue;
            }
            let mut wake = next_tick.min(if overtime { end + WORKER_GRACE } else { end });
            if !hold_sent {
                wake = wake.min(halfway);
            }
            match rx.recv_timeout(wake.saturating_duration_since(now)) {
                Ok(ev) => handle(ev, &mut workers, &mut stats)?,
                Err(mpsc::RecvTimeoutError::Timeout) => {}
                Err(mpsc::RecvTimeoutError::Disconnected) => break,
            }
            let early = workers
                .iter()
                .enumerate()
                .find(|(i, w)| w.gone && !(*i == victim && stats.killed.is_some()));
            if let Some((_, w)) = early {
                stats.errors.push(format!("{} exited early", w.name));
                break;
            }
        }

        // Stop: close every stdin, collect the last events, reap.
        let ran = start.elapsed();
        for w in &mut workers {
            w.stdin = None;
        }
        let deadline = Instant::now() + WORKER_GRACE;
        while workers.iter().any(|w| !w.gone) {
            let left = deadline.saturating_duration_since(Instant::now());
            match rx.recv_timeout(left) {
                Ok(ev) => handle(ev, &mut workers, &mut stats)?,
                Err(_) => {
                    stats.errors.push("workers did not stop in time".into());
                    break;
                }
            }
        }
        for w in &mut workers {
            if !w.gone {
                let _ = w.child.kill();
            }
            match w.child.wait() {
                Ok(st) if st.success() => {}
                Ok(_) if Some(w.child.id()) == victim_pid => {}
                Ok(st) => stats.errors.push(format!("{} ended with {st}", w.name)),
                Err(e) => stats.errors.push(format!("wait for {}: {e}", w.name)),
            }
        }

        summarise(&root, &stats, ran, lock)
    }

    fn summarise(root: &Path, s: &Stats, ran: Duration, lock: bool) -> Res<bool> {
        let mut ok = true;
        let reads = s.reads().max(1);
        println!();
        println!(
            "summary: {:.1} s, lock {}",
            ran.as_secs_f64(),
            if lock { "ON" } else { "OFF" }
        );
        println!(
            "  restores        {} ({} ms each on average{})",
            s.restores,
            s.restore_sum / s.restores.max(1) / 1000,
            if lock {
                format!(
                    ", fencing tokens {}",
                    if s.tokens_grow {
                        "strictly increasing"
                    } else {
                        "NOT increasing"
                    }
                )
            } else {
                String::new()
            }
        );
        println!(
            "  reads verified  {} ({FILES} files each, {} ms each on average)",
            s.reads(),
            s.verify_sum / reads / 1000
        );
        println!("  torn reads      {} of {}", s.torn, s.reads());
        if let Some(t) = &s.first_torn {
            println!("    first: {t}");
        }
        if lock {
            println!(
                "  read waits      {} of {} reads waited >= 1 ms; avg {}, max {}",
                s.read_waited,
                s.reads(),
                ms(s.read_wait_sum / reads),
                ms(s.read_wait_max)
            );
            println!("  restore waits   max {}", ms(s.restore_wait_max));
        }
        match (s.killed, s.resumed_after_kill) {
            (Some((pid, _)), Some(_)) if !lock => println!(
                "  SIGKILL         reader pid {pid} killed (nothing to recover without a lock)"
            ),
            (Some((pid, _)), Some(after)) => println!(
                "  SIGKILL         reader pid {pid} killed holding its read lock; the \
                 {} was granted {} after the kill (restores since: {})",
                if s.killed_blocking {
                    "restore waiting behind it"
                } else {
                    "next restore"
                },
                ms(after.as_micros() as u64),
                s.restores_after_kill
            ),
            (Some((pid, _)), None) => {
                println!("  SIGKILL         reader pid {pid} killed; NO restore after it");
                ok = false;
            }
            (None, _) => {
                println!("  SIGKILL         NOT done: reader 0 never reported holding its lock");
                ok = false;
            }
        }
        if lock {
            let st = DirLock::new(root)
                .and_then(|l| l.status())
                .map_err(|e| format!("status: {e}"))?;
            if st.is_free() {
                println!("  lock at the end free: no lock files left (the killed reader's too)");
            } else {
                println!(
                    "  lock at the end NOT free: writer {:?}, {} pending, {} readers",
                    st.writer.as_ref().map(|e| e.describe()),
                    st.pending.len(),
                    st.readers.len()
                );
                ok = false;
            }
        }
        for e in &s.errors {
            println!("  error: {e}");
            ok = false;
        }
        if s.torn > 0 {
            ok = false;
        }
        if s.reads_ok + s.torn == 0 || s.restores == 0 {
            println!("  error: no reads or no restores happened");
            ok = false;
        }
        println!(
            "result: {} (torn reads {})",
            if ok { "OK" } else { "FAILED" },
            s.torn
        );
        if !lock && s.torn > 0 {
            println!("        without the lock, readers saw restores half done");
        }
        Ok(ok)
    }
}
