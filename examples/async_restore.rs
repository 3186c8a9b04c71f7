//! A tokio program that serves a directory while a restore replaces its contents: the
//! async API (`DirLock::read_async`, `DirLock::write_async`, feature `tokio`).
//!
//! ```text
//! cargo run --release --features tokio --example async_restore [-- [--seconds N] [--no-lock]]
//! ```
//!
//! In a fresh temporary directory `ROOT`:
//!
//! - `ROOT/data/` is the directory served, and the one locked (the lock's files live in
//!   `ROOT/data/.rwdir/`). Version v of it is a set of 20 to 26 files `part-NNN`, each
//!   starting with the line `v<v> part <NNN>`, and a `MANIFEST` naming v and the files.
//! - **One restore task** loops: writes the next version into `ROOT/staging/` (no lock
//!   needed there), takes the write lock with `write_async`, renames the new files into
//!   `data/` one by one, removes the files the new version does not have, renames the
//!   `MANIFEST` in last, and releases. Without the lock, a reader could see any mix.
//! - **100 reader tasks** "serve" `data/`: each request takes a read lock with
//!   `read_async` under a `tokio::time::timeout` of 100 ms (a request that cannot be
//!   served in time answers "busy" and is retried later: the dropped wait leaves nothing
//!   behind), reads the `MANIFEST` and every file, and checks that it sees exactly one
//!   version: every file the manifest names, no other, each of the manifest's version.
//! - **Cancellation.** Halfway through, an audit task holds a read lock for 600 ms; the
//!   restore due then tries `write_async` under a 200 ms timeout and gives up. Readers
//!   that arrived meanwhile waited behind the queued restore (writer priority), and some
//!   requests answered "busy". The example checks with `DirLock::status` that the
//!   dropped wait left no queued writer behind, and that a new read is granted at once
//!   while the audit still holds its lock; the restore then waits for the audit to end,
//!   and takes the write lock without a timeout.
//!
//! File reading and renaming run in `tokio::task::spawn_blocking` while the task holds its
//! guard across the `.await`: guards own their state and are `Send`.
//!
//! It prints a short summary and exits with 1 if a reader saw a half-restored directory
//! or anything failed (2 on a usage error). With `--no-lock` nothing is locked, and torn
//! reads appear.

// This example writes data files, never lock files: the lock files are rwdir's.
#![allow(clippy::disallowed_methods)]

use std::collections::BTreeSet;
use std::fmt::Write as _;
use std::fs;
use std::io;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use rwdir::DirLock;

/// Reader tasks.
const READERS: usize = 100;
/// How long a request waits for its read lock before it answers "busy".
const REQUEST_TIMEOUT: Duration = Duration::from_millis(100);
/// A reader's pause between two requests: random in this range (ms).
const REQUEST_GAP_MS: (u64, u64) = (20, 80);
/// The restore's pause between two restores.
const RESTORE_PAUSE: Duration = Duration::from_millis(100);
/// The restore's time per file renamed in (a restore takes a while).
const PER_FILE: Duration = Duration::from_micros(100);
/// How long the audit holds its read lock, and how long the restore then waits.
const AUDIT_HOLD: Duration = Duration::from_millis(600);
const RESTORE_TIMEOUT: Duration = Duration::from_millis(200);
const MANIFEST: &str = "MANIFEST";

const USAGE: &str = "usage: async_restore [--seconds N] [--no-lock]";

struct Options {
    seconds: f64,
    lock: bool,
}

fn parse_args() -> Result<Options, String> {
    let mut opts = Options {
        seconds: 3.0,
        lock: true,
    };
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        match a.as_str() {
            "--seconds" => {
                opts.seconds = args
                    .next()
                    .and_then(|s| s.parse().ok())
                    .filter(|s: &f64| s.is_finite() && *s > 0.0)
                    .ok_or("--seconds needs a positive number")?;
            }
            "--no-lock" => opts.lock = false,
            "-h" | "--help" => return Err(String::new()),
            other => return Err(format!("unexpected argument `{other}`")),
        }
    }
    Ok(opts)
}

#[tokio::main]
async fn main() -> ExitCode {
    let opts = match parse_args() {
        Ok(o) => o,
        Err(e) if e.is_empty() => {
            println!("{USAGE}");
            return ExitCode::SUCCESS;
        }
        Err(e) => {
            eprintln!("async_restore: {e}\n{USAGE}");
            return ExitCode::from(2);
        }
    };
    match run(&opts).await {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::from(1),
        Err(e) => {
            eprintln!("async_restore: {e}");
            ExitCode::from(1)
        }
    }
}

/// What the tasks count.
#[derive(Default)]
struct Stats {
    reads: AtomicU64,
    torn: AtomicU64,
    busy: AtomicU64,
    restores: AtomicU64,
}

/// Runs the scenario; `Ok(true)` if every read saw one whole version.
async fn run(opts: &Options) -> Result<bool, Box<dyn std::error::Error + Send + Sync>> {
    let root = tempfile::tempdir()?;
    let data = root.path().join("data");
    let staging = root.path().join("staging");
    fs::create_dir(&data)?;
    stage(&staging, 1)?;
    swap_in(&staging, &data)?;
    let lock = Arc::new(DirLock::new(&data)?);
    let stats = Arc::new(Stats::default());
    let stop = Arc::new(AtomicBool::new(false));
    println!(
        "async_restore: {READERS} reader tasks and a restore task on `{}` for {} s, lock {}",
        data.display(),
        opts.seconds,
        if opts.lock { "on" } else { "OFF (--no-lock)" }
    );
    let started = Instant::now();

    let readers: Vec<_> = (0..READERS)
        .map(|id| {
            let r = Reader {
                id,
                lock: opts.lock.then(|| Arc::clone(&lock)),
                data: data.clone(),
                stats: Arc::clone(&stats),
                stop: Arc::clone(&stop),
            };
            tokio::spawn(r.serve())
        })
        .collect();
    let restored = restore(
        opts.lock.then(|| Arc::clone(&lock)),
        &staging,
        &data,
        Duration::from_secs_f64(opts.seconds),
        &stats,
    )
    .await;
    stop.store(true, Ordering::SeqCst);
    for r in readers {
        r.await??;
    }
    let (last, cancelled) = restored?;

    let reads = stats.reads.load(Ordering::SeqCst);
    let torn = stats.torn.load(Ordering::SeqCst);
    let busy = stats.busy.load(Ordering::SeqCst);
    let restores = stats.restores.load(Ordering::SeqCst);
    let status = lock.status()?;
    let left = status.writer.is_some() || !status.pending.is_empty() || !status.readers.is_empty();
    println!(
        "restores: {restores} (versions 2 to {last}); reads: {reads}, torn {torn}; busy (no read lock within {} ms): {busy}",
        REQUEST_TIMEOUT.as_millis()
    );
    if let Some(c) = &cancelled {
        println!("cancelled: {c}");
    }
    println!(
        "lock files left: {}; {:.1} s",
        if left { "SOME" } else { "none" },
        started.elapsed().as_secs_f64()
    );
    let ok = torn == 0 && !left && (!opts.lock || cancelled.is_some()) && reads > 0;
    println!(
        "result: {} (torn reads {torn})",
        if ok { "OK" } else { "FAILED" }
    );
    Ok(ok)
}

/// The restore task: a new version every [`RESTORE_PAUSE`] for `run`. Returns the last
/// version restored and, with the lock, what the cancelled attempt saw.
async fn restore(
    lock: Option<Arc<DirLock>>,
    staging: &Path,
    data: &Path,
    run: Duration,
    stats: &Stats,
) -> Result<(u64, Option<String>), Box<dyn std::error::Error + Send + Sync>> {
    let end = Instant::now() + run;
    let mut cancelled = None;
    let mut v = 1;
    // At least one restore, and, with the lock, the cancelled attempt.
    while Instant::now() < end || v == 1 || (lock.is_some() && cancelled.is_none()) {
        v += 1;
        // Prepared outside the lock: readers go on meanwhile.
        let (s, ver) = (staging.to_path_buf(), v);
        tokio::task::spawn_blocking(move || stage(&s, ver)).await??;
        let guard = match &lock {
            None => None,
            Some(lock) => {
                if cancelled.is_none() && Instant::now() + run / 2 >= end {
                    cancelled = Some(give_up_once(lock).await?);
                }
                // Waits as long as it takes, on the runtime: no thread is blocked.
                Some(lock.write_async().await?)
            }
        };
        let (s, d) = (staging.to_path_buf(), data.to_path_buf());
        tokio::task::spawn_blocking(move || swap_in(&s, &d)).await??;
        if let Some(g) = guard {
            g.release()?;
        }
        stats.restores.fetch_add(1, Ordering::SeqCst);
        tokio::time::sleep(RESTORE_PAUSE).await;
    }
    Ok((v, cancelled))
}

/// The cancellation: an audit holds a read lock for [`AUDIT_HOLD`]; a write attempt
/// under a [`RESTORE_TIMEOUT`] timeout gives up, and must leave no queued writer.
async fn give_up_once(
    lock: &Arc<DirLock>,
) -> Result<String, Box<dyn std::error::Error + Send + Sync>> {
    let (held_tx, held_rx) = tokio::sync::oneshot::channel();
    let audit_lock = Arc::clone(lock);
    let audit = tokio::spawn(async move {
        let r = audit_lock.read_async().await?;
        let _ = held_tx.send(());
        tokio::time::sleep(AUDIT_HOLD).await;
        r.release()
    });
    held_rx.await?;
    let asked = Instant::now();
    // Dropped by the timeout, the wait removes its queue file: the readers it kept
    // waiting behind it (writer priority) go on at once, and the audit is not disturbed.
    let attempt = tokio::time::timeout(RESTORE_TIMEOUT, lock.write_async()).await;
    let waited = asked.elapsed();
    let status = lock.status()?;
    match attempt {
        Err(_) if status.writer.is_none() && status.pending.is_empty() => {}
        Err(_) => return Err("a cancelled write_async left a lock file behind".into()),
        Ok(_) => return Err("write_async was granted while a reader held the lock".into()),
    }
    // Nothing of the restore is in the way any more: a read goes in at once, although
    // the audit still holds its lock.
    let asked = Instant::now();
    let read = tokio::time::timeout(Duration::from_millis(50), lock.read_async())
        .await
        .map_err(|_| "a read still waited after the restore had given up")??;
    let read_wait = asked.elapsed();
    read.release()?;
    if audit.is_finished() {
        return Err("the audit ended before the check (a very slow machine?)".into());
    }
    audit.await??;
    Ok(format!(
        "a restore gave up after {} ms while an audit held a read lock, and left nothing behind: a read then went in after {} µs, beside the audit",
        waited.as_millis(),
        read_wait.as_micros()
    ))
}

/// A reader task: serves requests until told to stop.
struct Reader {
    id: usize,
    /// `None` with `--no-lock`.
    lock: Option<Arc<DirLock>>,
    data: PathBuf,
    stats: Arc<Stats>,
    stop: Arc<AtomicBool>,
}

impl Reader {
    async fn serve(self) -> Result<(), rwdir::Error> {
        let mut rng = Rng(0x9e37_79b9_7f4a_7c15 ^ (self.id as u64 + 1));
        while !self.stop.load(Ordering::SeqCst) {
            let gap = REQUEST_GAP_MS.0 + rng.next() % (REQUEST_GAP_MS.1 - REQUEST_GAP_MS.0);
            tokio::time::sleep(Duration::from_millis(gap)).await;
            let guard = match &self.lock {
                None => None,
                Some(lock) => {
                    match tokio::time::timeout(REQUEST_TIMEOUT, lock.read_async()).await {
                        Ok(guard) => Some(guard?),
                        Err(_) => {
                            // "Busy, retry": the dropped wait owned no file and left none.
                            self.stats.busy.fetch_add(1, Ordering::SeqCst);
                            continue;
                        }
                    }
                }
            };
            let data = self.data.clone();
            let seen = tokio::task::spawn_blocking(move || read_version(&data))
                .await
                .map_err(io::Error::other);
            if let Some(g) = guard {
                g.release()?;
            }
            self.stats.reads.fetch_add(1, Ordering::SeqCst);
            if let Err(torn) = seen.and_then(|r| r)
                && self.stats.torn.fetch_add(1, Ordering::SeqCst) < 3
            {
                println!("reader {}: TORN: {torn}", self.id);
            }
        }
        Ok(())
    }
}

/// The files of version `v`: 20 to 26 of them, so that a restore also removes files.
fn files_of(v: u64) -> Vec<String> {
    (0..20 + v % 7).map(|i| format!("part-{i:03}")).collect()
}

/// Writes version `v` into `staging` (made empty first).
fn stage(staging: &Path, v: u64) -> io::Result<()> {
    let _ = fs::remove_dir_all(staging);
    fs::create_dir(staging)?;
    let names = files_of(v);
    let mut manifest = format!("version {v}\n");
    for (i, name) in names.iter().enumerate() {
        let mut body = format!("v{v} {name}\n");
        for _ in 0..(i * 37) % 50 {
            let _ = write!(body, "payload of version {v} ");
        }
        fs::write(staging.join(name), body)?;
        manifest.push_str(name);
        manifest.push('\n');
    }
    fs::write(staging.join(MANIFEST), manifest)
}

/// Replaces what `data` holds with what `staging` holds: the files one by one (each
/// rename is atomic, the whole is not), stale files removed, the manifest last.
fn swap_in(staging: &Path, data: &Path) -> io::Result<()> {
    let new = listing(staging)?;
    for name in new.iter().filter(|n| *n != MANIFEST) {
        fs::rename(staging.join(name), data.join(name))?;
        std::thread::sleep(PER_FILE);
    }
    for old in listing(data)?.difference(&new) {
        fs::remove_file(data.join(old))?;
    }
    fs::rename(staging.join(MANIFEST), data.join(MANIFEST))
}

/// The names in `dir`, without the lock's state directory (`.rwdir`) and other dot files.
fn listing(dir: &Path) -> io::Result<BTreeSet<String>> {
    let mut names = BTreeSet::new();
    for e in fs::read_dir(dir)? {
        let name = e?.file_name().to_string_lossy().into_owned();
        if !name.starts_with('.') {
            names.insert(name);
        }
    }
    Ok(names)
}

/// Reads `data` as a reader must see it: one version, whole. `Err` says what is torn.
fn read_version(data: &Path) -> io::Result<u64> {
    let torn = |what: String| io::Error::other(what);
    let manifest = fs::read_to_string(data.join(MANIFEST))?;
    let mut lines = manifest.lines();
    let v: u64 = lines
        .next()
        .and_then(|l| l.strip_prefix("version "))
        .and_then(|n| n.parse().ok())
        .ok_or_else(|| torn("a manifest without its version".into()))?;
    let named: BTreeSet<String> = lines.map(str::to_string).collect();
    let mut present = listing(data)?;
    present.remove(MANIFEST);
    if present != named {
        return Err(torn(format!(
            "the manifest of version {v} names {} files, the directory holds {}",
            named.len(),
            present.len()
        )));
    }
    for name in &named {
        let body = match fs::read_to_string(data.join(name)) {
            Ok(b) => b,
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                return Err(torn(format!("{name} of version {v} vanished")));
            }
            Err(e) => return Err(e),
        };
        let head = body.lines().next().unwrap_or_default();
        if head != format!("v{v} {name}") {
            return Err(torn(format!(
                "{name} is `{head}`, the manifest says version {v}"
            )));
        }
    }
    Ok(v)
}

/// xorshift64: request gaps, no cryptography.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
}
