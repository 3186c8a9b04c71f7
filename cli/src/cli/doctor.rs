//! `rwdir doctor DIR [--peer-dir PATH] [--json]`: checks, on the user's own mount, what
//! the protocol relies on, and gives a verdict with reasons.
//!
//! Here, not in the library: the checks make scratch files with raw system calls (the
//! library's rule is that only `fsops` touches files, and only lock files), they take
//! seconds to minutes, and their result is a report for people or scripts, which
//! `--json` gives any language (Python users run the command). What a program needs at
//! run time, the filesystem's kind and whether it is refused, is the library's
//! [`rwdir::Filesystem`].
//!
//! Everything it creates lives in one scratch directory, `DIR/.rwdir-doctor-ID`, removed
//! at the end, on every error, and on SIGINT, SIGTERM and SIGHUP. It never opens
//! anything in `DIR/.rwdir`; the leftovers are judged through the library's `status`.

use std::ffi::OsString;
use std::fmt::Write as _;
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Barrier, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use nix::errno::Errno;
use nix::fcntl::{AT_FDCWD, OFlag, RenameFlags, open, renameat2};
use nix::sys::signal::{SigSet, Signal};
use nix::sys::stat::{Mode, fstat, futimens, stat};
use nix::sys::time::TimeSpec;
use nix::unistd::{linkat, mkdir, unlink};
use serde::Serialize;

use super::args::DoctorArgs;
use super::code;

/// How long a change made through DIR may take to show through `--peer-dir` before the
/// measurement gives up.
const VISIBILITY_CAP: Duration = Duration::from_secs(60);

/// The outcome of one check.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
enum Status {
    Ok,
    Warn,
    Fail,
    Unknown,
}

impl Status {
    fn label(self) -> &'static str {
        match self {
            Status::Ok => "ok",
            Status::Warn => "warn",
            Status::Fail => "FAIL",
            Status::Unknown => "?",
        }
    }
}

/// One check: its stable name, outcome, reason, and the number it measured, if any (in
/// seconds for times, a count for races).
#[derive(Debug, Serialize)]
struct Check {
    name: &'static str,
    status: Status,
    detail: String,
    value: Option<f64>,
}

fn check(name: &'static str, status: Status, detail: impl Into<String>) -> Check {
    Check {
        name,
        status,
        detail: detail.into(),
        value: None,
    }
}

impl Check {
    fn value(mut self, v: f64) -> Check {
        self.value = Some(v);
        self
    }
}

/// The `--json` object; its shape is part of the CLI contract (docs/cli.md).
#[derive(Debug, Serialize)]
struct Report {
    dir: String,
    /// `safe`, `unsafe` or `unknown`.
    verdict: &'static str,
    exit: u8,
    filesystem: Option<JsonFs>,
    lease: JsonLease,
    checks: Vec<Check>,
}

#[derive(Debug, Serialize)]
struct JsonFs {
    name: String,
    kind: String,
    fstype: String,
    source: String,
    mount_point: Option<String>,
    shared: bool,
    refused: Option<&'static str>,
}

#[derive(Debug, Serialize)]
struct JsonLease {
    configured: f64,
    recommended: Option<f64>,
}

/// The scratch directories of this process, removed by the signal thread too.
static SCRATCH: Mutex<Vec<PathBuf>> = Mutex::new(Vec::new());

/// The scratch directory; removed (with all in it, symlinks not followed) when dropped.
#[derive(Debug)]
struct Scratch {
    path: PathBuf,
}

impl Scratch {
    fn new(dir: &Path) -> Result<Scratch, String> {
        let nanos = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or(0);
        let path = dir.join(format!(".rwdir-doctor-{}-{nanos:x}", std::process::id()));
        // Registered first, so that a signal between the mkdir and the push cannot
        // leave it behind.
        lock_scratch().push(path.clone());
        match mkdir(&path, Mode::from_bits_truncate(0o700)) {
            Ok(()) => Ok(Scratch { path }),
            Err(e) => {
                lock_scratch().retain(|p| p != &path);
                Err(format!(
                    "cannot check `{}`: failed to create scratch directory `{}`: {}",
                    dir.display(),
                    path.display(),
                    std::io::Error::from(e)
                ))
            }
        }
    }

    fn at(&self, name: &str) -> PathBuf {
        self.path.join(name)
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        remove_scratch(&self.path);
        lock_scratch().retain(|p| p != &self.path);
    }
}

fn lock_scratch() -> std::sync::MutexGuard<'static, Vec<PathBuf>> {
    SCRATCH
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Removes a scratch directory; `remove_dir_all` never follows symlinks. Retried for up
/// to about 6 s: a file may appear while it runs (a race still going on), and on a
/// filesystem whose lookups lag behind its listings (object stores) a fresh name cannot
/// be removed at once.
fn remove_scratch(path: &Path) {
    let mut pause = Duration::from_millis(10);
    for _ in 0..10 {
        match std::fs::remove_dir_all(path) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                std::thread::sleep(pause);
                pause = (pause * 2).min(Duration::from_secs(1));
            }
            _ => return,
        }
    }
    super::say(&format!(
        "could not remove the scratch directory `{}`; remove it by hand",
        path.display()
    ));
}

/// SIGINT, SIGTERM and SIGHUP are blocked in every thread and taken by one thread that
/// removes the scratch directories and exits with 128+N.
fn handle_signals() {
    let mut set = SigSet::empty();
    for s in [Signal::SIGINT, Signal::SIGTERM, Signal::SIGHUP] {
        set.add(s);
    }
    if set.thread_block().is_err() {
        return;
    }
    std::thread::spawn(move || {
        if let Ok(sig) = set.wait() {
            for p in lock_scratch().iter() {
                remove_scratch(p);
            }
            super::say(&format!(
                "doctor interrupted by {}; its scratch files were removed",
                sig.as_str()
            ));
            std::process::exit(i32::from(code::SIGNAL_BASE) + sig as i32);
        }
    });
}

/// Runs `rwdir doctor`: prints the report and returns its exit status (0 safe, 1
/// unsafe, 2 could not tell). Bad input is one stderr line and 2.
pub(crate) fn run(args: &DoctorArgs, lease: Option<Duration>) -> ExitCode {
    handle_signals();
    let lease = lease.unwrap_or(rwdir::DEFAULT_LEASE);
    match examine(args, lease) {
        Ok(report) => {
            let text = if args.json {
                let mut s = serde_json::to_string(&report).unwrap_or_default();
                s.push('\n');
                s
            } else {
                human(&report)
            };
            if super::out(&text).is_err() {
                return ExitCode::from(code::DOCTOR_UNKNOWN);
            }
            ExitCode::from(report.exit)
        }
        Err(line) => {
            super::say(&line);
            ExitCode::from(code::DOCTOR_UNKNOWN)
        }
    }
}

/// Checks DIR (and the peer), or says in one line why DIR cannot be checked.
fn examine(args: &DoctorArgs, lease: Duration) -> Result<Report, String> {
    let dir = &args.dir;
    usable_dir(dir)?;
    if let Some(peer) = &args.peer_dir {
        usable_dir(peer)?;
    }
    let mut checks = Vec::new();
    let fs = match rwdir::Filesystem::of(dir) {
        Ok(fs) => Some(fs),
        Err(e) => {
            checks.push(check(
                "filesystem",
                Status::Unknown,
                super::message(&e).to_string(),
            ));
            None
        }
    };
    if let Some(fs) = &fs {
        checks.push(filesystem(fs));
    }
    let scratch = Scratch::new(dir)?;
    checks.push(exclusive_create(&scratch));
    checks.push(link(&scratch));
    checks.push(tmpfile(&scratch));
    checks.push(rename(&scratch));
    checks.push(touch(&scratch));
    let (granularity, gran_check) = mtime_granularity(&scratch);
    checks.push(gran_check);
    let (skew, skew_check) = clock_skew(&scratch, granularity);
    checks.push(skew_check);
    let mut window: Option<(Duration, &'static str)> = fs
        .as_ref()
        .and_then(rwdir::Filesystem::cache_window)
        .map(|w| (w, "reasoned for this filesystem"));
    if let Some(peer) = &args.peer_dir {
        let peer_scratch = peer.join(scratch.path.file_name().unwrap_or_default());
        match wait_visible(&peer_scratch) {
            None => checks.push(check(
                "peer",
                Status::Unknown,
                format!(
                    "`{}` did not show `{}` within {} s: is it the same directory through another mount?",
                    peer.display(),
                    scratch.path.display(),
                    VISIBILITY_CAP.as_secs()
                ),
            )),
            Some(_) => {
                checks.push(race_create(&scratch, &peer_scratch, args.rounds));
                checks.push(race_link(&scratch, &peer_scratch, args.rounds));
                let (measured, vis) = visibility(&scratch, &peer_scratch);
                checks.extend(vis);
                if let Some(m) = measured {
                    window = Some((m, "measured with --peer-dir"));
                }
            }
        }
    }
    let shared = fs.as_ref().is_none_or(rwdir::Filesystem::is_shared);
    let covered = super::CACHE_WINDOW
        .get()
        .copied()
        .or_else(|| fs.as_ref().and_then(rwdir::Filesystem::cache_window))
        .unwrap_or(Duration::ZERO);
    let (recommended, lease_check) =
        lease_verdict(shared, window, covered, skew, granularity, lease);
    checks.push(lease_check);
    drop(scratch);
    checks.push(leftovers(dir, lease));

    let exit = if checks.iter().any(|c| c.status == Status::Fail) {
        code::DOCTOR_UNSAFE
    } else if checks.iter().any(|c| c.status == Status::Unknown) {
        code::DOCTOR_UNKNOWN
    } else {
        code::OK
    };
    Ok(Report {
        dir: dir.to_string_lossy().into_owned(),
        verdict: match exit {
            code::OK => "safe",
            code::DOCTOR_UNSAFE => "unsafe",
            _ => "unknown",
        },
        exit,
        filesystem: fs.as_ref().map(|fs| JsonFs {
            name: fs.name(),
            kind: fs.kind().as_str().to_string(),
            fstype: fs.fstype().to_string(),
            source: fs.source().to_string(),
            mount_point: fs.mount_point().map(|p| p.to_string_lossy().into_owned()),
            shared: fs.is_shared(),
            refused: fs.refused(),
        }),
        lease: JsonLease {
            configured: lease.as_secs_f64(),
            recommended: recommended.map(|d| d.as_secs_f64()),
        },
        checks,
    })
}

/// One line naming `path` and what is wrong with it, if it is not a directory this
/// user can search.
fn usable_dir(path: &Path) -> Result<(), String> {
    let meta =
        std::fs::metadata(path).map_err(|e| format!("cannot check `{}`: {e}", path.display()))?;
    if !meta.is_dir() {
        return Err(format!(
            "cannot check `{}`: not a directory",
            path.display()
        ));
    }
    Ok(())
}

fn filesystem(fs: &rwdir::Filesystem) -> Check {
    let mount = match fs.mount_point() {
        Some(m) => format!(", mounted at {}", m.display()),
        None => String::new(),
    };
    let what = format!(
        "{} (type `{}`, source `{}`{mount}), {}",
        fs.name(),
        fs.fstype(),
        fs.source(),
        if fs.is_shared() { "shared" } else { "local" }
    );
    match fs.refused() {
        Some(reason) => check(
            "filesystem",
            Status::Fail,
            format!("{what}: refused by rwdir: {reason}"),
        ),
        None if matches!(fs.kind(), rwdir::FsKind::Fuse | rwdir::FsKind::OtherShared) => check(
            "filesystem",
            Status::Warn,
            format!("{what}: {}", fs.notes()),
        ),
        None => check("filesystem", Status::Ok, format!("{what}: {}", fs.notes())),
    }
}

fn create_excl(path: &Path) -> nix::Result<OwnedFd> {
    open(
        path,
        OFlag::O_CREAT | OFlag::O_EXCL | OFlag::O_WRONLY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
        Mode::from_bits_truncate(0o644),
    )
}

fn write_all(fd: &OwnedFd, data: &[u8]) -> nix::Result<()> {
    let mut done = 0;
    while done < data.len() {
        match nix::unistd::write(fd, &data[done..]) {
            Ok(0) => return Err(Errno::EIO),
            Ok(n) => done += n,
            Err(Errno::EINTR) => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// The file's content (at most 4 KiB), read through a fresh `open`, as rwdir reads
/// records.
fn read_back(path: &Path) -> nix::Result<Vec<u8>> {
    let fd = open(
        path,
        OFlag::O_RDONLY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC | OFlag::O_NONBLOCK,
        Mode::empty(),
    )?;
    let mut buf = vec![0u8; 4096];
    let mut len = 0;
    loop {
        match nix::unistd::read(&fd, &mut buf[len..]) {
            Ok(0) => break,
            Ok(n) => {
                len += n;
                if len == buf.len() {
                    break;
                }
            }
            Err(Errno::EINTR) => {}
            Err(e) => return Err(e),
        }
    }
    buf.truncate(len);
    Ok(buf)
}

/// A file made with `O_EXCL` holding `content`.
fn put(path: &Path, content: &[u8]) -> nix::Result<()> {
    let fd = create_excl(path)?;
    write_all(&fd, content)
}

fn errno_text(e: Errno) -> String {
    format!("{} ({})", e.desc(), e as i32)
}

fn exclusive_create(s: &Scratch) -> Check {
    const NAME: &str = "exclusive_create";
    let path = s.at("excl");
    if let Err(e) = put(&path, b"first") {
        return check(
            NAME,
            Status::Unknown,
            format!("O_CREAT|O_EXCL of a new name failed: {}", errno_text(e)),
        );
    }
    match create_excl(&path) {
        Err(Errno::EEXIST) => check(
            NAME,
            Status::Ok,
            "O_CREAT|O_EXCL on an existing name gives EEXIST",
        ),
        Ok(_) => check(
            NAME,
            Status::Fail,
            "O_CREAT|O_EXCL on an existing name succeeded: exclusive creation is not exclusive here, so two writers can both create `.master_lock`",
        ),
        Err(e) => check(
            NAME,
            Status::Warn,
            format!(
                "O_CREAT|O_EXCL on an existing name gave {} instead of EEXIST (rwdir creates by link, and reads a refused name back)",
                errno_text(e)
            ),
        ),
    }
}

fn link(s: &Scratch) -> Check {
    const NAME: &str = "link";
    let (a, b, target) = (s.at("link-a"), s.at("link-b"), s.at("link-target"));
    if let Err(e) = put(&a, b"nonce-a").and_then(|()| put(&b, b"nonce-b")) {
        return check(
            NAME,
            Status::Unknown,
            format!("could not create files to link: {}", errno_text(e)),
        );
    }
    if let Err(e) = linkat(
        AT_FDCWD,
        &a,
        AT_FDCWD,
        &target,
        nix::fcntl::AtFlags::empty(),
    ) {
        return check(
            NAME,
            Status::Fail,
            format!(
                "link() to a new name failed: {}; rwdir gives every lock file its name with link()",
                errno_text(e)
            ),
        );
    }
    let second = linkat(
        AT_FDCWD,
        &b,
        AT_FDCWD,
        &target,
        nix::fcntl::AtFlags::empty(),
    );
    let back = read_back(&target);
    let nlink = stat(&target).map(|st| st.st_nlink);
    match (second, back) {
        (Ok(()), _) => check(
            NAME,
            Status::Fail,
            "link() onto an existing name succeeded: two writers can both take `.master_lock`",
        ),
        (Err(_), Ok(content)) if content != b"nonce-a" => check(
            NAME,
            Status::Fail,
            format!(
                "link() onto an existing name was refused, but the name now reads {:?} instead of the first link's content",
                String::from_utf8_lossy(&content)
            ),
        ),
        (Err(_), Err(e)) => check(
            NAME,
            Status::Unknown,
            format!("could not read the linked name back: {}", errno_text(e)),
        ),
        (Err(e), Ok(_)) => {
            let nlink = match nlink {
                Ok(2) => "link count 2 as expected".to_string(),
                Ok(n) => format!(
                    "link count {n}, not 2 (rwdir never relies on it: it reads the nonce back)"
                ),
                Err(e) => format!("link count unreadable ({})", errno_text(e)),
            };
            match e {
                Errno::EEXIST => check(
                    NAME,
                    Status::Ok,
                    format!(
                        "link() onto an existing name gives EEXIST; the name reads back the first link's content; {nlink}"
                    ),
                ),
                Errno::EPERM => check(
                    NAME,
                    Status::Ok,
                    format!(
                        "link() onto an existing name gives EPERM (as sshfs does; rwdir reads the name back to tell); the name reads back the first link's content; {nlink}"
                    ),
                ),
                e => check(
                    NAME,
                    Status::Warn,
                    format!(
                        "link() onto an existing name gives {} (rwdir expects EEXIST, and reads the name back); {nlink}",
                        errno_text(e)
                    ),
                ),
            }
        }
    }
}

fn tmpfile(s: &Scratch) -> Check {
    match open(
        &s.path,
        OFlag::O_TMPFILE | OFlag::O_WRONLY | OFlag::O_CLOEXEC,
        Mode::from_bits_truncate(0o644),
    ) {
        Ok(_) => check(
            "o_tmpfile",
            Status::Ok,
            "O_TMPFILE works: lock files are written anonymously, then linked",
        ),
        Err(e) => check(
            "o_tmpfile",
            Status::Ok,
            format!(
                "O_TMPFILE is not supported ({}): rwdir writes a named `.tmp-<uuid>` file, then links it",
                errno_text(e)
            ),
        ),
    }
}

fn rename(s: &Scratch) -> Check {
    const NAME: &str = "rename";
    let (a, b, c) = (s.at("ren-a"), s.at("ren-b"), s.at("ren-c"));
    if let Err(e) = put(&a, b"a")
        .and_then(|()| put(&b, b"b"))
        .and_then(|()| put(&c, b"c"))
    {
        return check(
            NAME,
            Status::Unknown,
            format!("could not create files to rename: {}", errno_text(e)),
        );
    }
    if let Err(e) = std::fs::rename(&a, &b) {
        return check(
            NAME,
            Status::Warn,
            format!("rename() over an existing file failed: {e}"),
        );
    }
    match read_back(&b) {
        Ok(content) if content == b"a" => {}
        Ok(_) => {
            return check(
                NAME,
                Status::Fail,
                "rename() over an existing file left the old content",
            );
        }
        Err(e) => {
            return check(
                NAME,
                Status::Unknown,
                format!("could not read a renamed file back: {}", errno_text(e)),
            );
        }
    }
    match renameat2(AT_FDCWD, &c, AT_FDCWD, &b, RenameFlags::RENAME_NOREPLACE) {
        Err(Errno::EEXIST) => check(
            NAME,
            Status::Ok,
            "rename() replaces an existing file; RENAME_NOREPLACE gives EEXIST",
        ),
        Err(e) => check(
            NAME,
            Status::Ok,
            format!(
                "rename() replaces an existing file; RENAME_NOREPLACE is not supported ({}): rwdir makes fencing tokens with link() instead",
                errno_text(e)
            ),
        ),
        Ok(()) => check(
            NAME,
            Status::Fail,
            "rename(RENAME_NOREPLACE) replaced an existing file: fencing tokens could repeat",
        ),
    }
}

fn mtime_of(st: &nix::sys::stat::FileStat) -> SystemTime {
    #[allow(clippy::cast_sign_loss, clippy::cast_possible_truncation)]
    let t = Duration::new(st.st_mtime.max(0) as u64, st.st_mtime_nsec.max(0) as u32);
    UNIX_EPOCH + t
}

/// The heartbeat: `futimens` through the holder's own descriptor, read back by `fstat`.
fn touch(s: &Scratch) -> Check {
    const NAME: &str = "heartbeat";
    let fd = match create_excl(&s.at("touch")) {
        Ok(fd) => fd,
        Err(e) => return check(NAME, Status::Unknown, errno_text(e)),
    };
    let old = TimeSpec::new(1_000_000_000, 0);
    if let Err(e) = futimens(&fd, &old, &old) {
        return check(
            NAME,
            Status::Fail,
            format!(
                "futimens() on an open lock file failed ({}): holders could not renew their lease",
                errno_text(e)
            ),
        );
    }
    match fstat(&fd) {
        Ok(st) if st.st_mtime == 1_000_000_000 => check(
            NAME,
            Status::Ok,
            "futimens() through a descriptor sets the mtime others judge the lease by",
        ),
        Ok(st) => check(
            NAME,
            Status::Fail,
            format!(
                "futimens() through a descriptor was ignored (mtime {} s): holders could not renew their lease",
                st.st_mtime
            ),
        ),
        Err(e) => check(NAME, Status::Unknown, errno_text(e)),
    }
}

/// The finest step of fresh files' mtimes: 1 ns, 1 µs, 1 ms or 1 s.
fn mtime_granularity(s: &Scratch) -> (Duration, Check) {
    const NAME: &str = "mtime_granularity";
    let mut nanos = Vec::new();
    for i in 0..5 {
        match create_excl(&s.at(&format!("gran-{i}"))).and_then(|fd| fstat(&fd)) {
            Ok(st) => nanos.push(st.st_mtime_nsec),
            Err(e) => {
                return (
                    Duration::from_secs(1),
                    check(NAME, Status::Unknown, errno_text(e)),
                );
            }
        }
        std::thread::sleep(Duration::from_micros(1700));
    }
    let step = [1_000_000_000i64, 1_000_000, 1_000]
        .into_iter()
        .find(|step| nanos.iter().all(|n| n % step == 0))
        .unwrap_or(1);
    #[allow(clippy::cast_sign_loss)]
    let g = Duration::from_nanos(step as u64);
    let text = match step {
        1_000_000_000 => "1 s (rwdir judges other hosts' leases with 1 s more)",
        1_000_000 => "1 ms",
        1_000 => "1 µs",
        _ => "1 ns",
    };
    (
        g,
        check(
            NAME,
            Status::Ok,
            format!("mtimes of fresh files step by {text}"),
        )
        .value(g.as_secs_f64()),
    )
}

/// The mtime of a fresh file against this host's clock: the skew between this host and
/// whatever sets mtimes (the file server).
fn clock_skew(s: &Scratch, granularity: Duration) -> (Duration, Check) {
    const NAME: &str = "clock_skew";
    let before = SystemTime::now();
    let st = create_excl(&s.at("skew")).and_then(|fd| fstat(&fd));
    let after = SystemTime::now();
    let st = match st {
        Ok(st) => st,
        Err(e) => return (Duration::ZERO, check(NAME, Status::Unknown, errno_text(e))),
    };
    let mtime = mtime_of(&st);
    let slack = granularity + Duration::from_millis(10);
    let (skew, sign) = if let Ok(ahead) = mtime.duration_since(after) {
        (ahead.saturating_sub(slack), "ahead of")
    } else if let Ok(behind) = before.duration_since(mtime) {
        (behind.saturating_sub(slack), "behind")
    } else {
        (Duration::ZERO, "")
    };
    let secs = skew.as_secs_f64();
    let c = if skew.is_zero() {
        check(
            NAME,
            Status::Ok,
            "a fresh file's mtime matches this host's clock (within the mtime granularity)",
        )
    } else if skew > Duration::from_secs(1) {
        check(
            NAME,
            Status::Warn,
            format!(
                "the file server's clock is {secs:.1} s {sign} this host's: keep clocks synchronised (NTP); the lease must cover the skew"
            ),
        )
    } else {
        check(
            NAME,
            Status::Ok,
            format!("the file server's clock is {secs:.3} s {sign} this host's"),
        )
    };
    (skew, c.value(secs))
}

/// Waits until `path` exists (by `stat`), up to [`VISIBILITY_CAP`]; how long it took.
fn wait_visible(path: &Path) -> Option<Duration> {
    let start = Instant::now();
    loop {
        if std::fs::symlink_metadata(path).is_ok() {
            return Some(start.elapsed());
        }
        if start.elapsed() > VISIBILITY_CAP {
            return None;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// How long each race may take in all: it stops after the round running then.
const RACE_BUDGET: Duration = Duration::from_secs(30);

/// `rounds` races between two threads, one creating through DIR, one through the peer,
/// with `attempt`; each must have exactly one winner by what the name reads back, and no
/// loser may have been told it won.
fn race(
    name: &'static str,
    what: &str,
    rounds: u32,
    attempt: impl Fn(&Path, u32, &[u8]) -> nix::Result<()> + Send + Sync + 'static,
    here: &Path,
    peer: &Path,
) -> Check {
    let attempt = Arc::new(attempt);
    let barrier = Arc::new(Barrier::new(2));
    // Both sides run the same rounds: side A decides, between two barriers, whether
    // there is time for another (a filesystem that makes the loser wait, as CephFS
    // does for 5 s while it recalls the winner's capabilities, must not take minutes).
    let deadline = Instant::now() + RACE_BUDGET;
    let more = Arc::new(AtomicBool::new(true));
    let slowest = Arc::new(Mutex::new(Duration::ZERO));
    let side = |base: PathBuf, nonce: &'static [u8], decides: bool| {
        let attempt = Arc::clone(&attempt);
        let barrier = Arc::clone(&barrier);
        let more = Arc::clone(&more);
        let slowest = Arc::clone(&slowest);
        std::thread::spawn(move || {
            let mut won = Vec::new();
            for i in 0..rounds {
                if decides {
                    more.store(Instant::now() < deadline, Ordering::SeqCst);
                }
                barrier.wait();
                if !more.load(Ordering::SeqCst) {
                    break;
                }
                barrier.wait();
                let start = Instant::now();
                won.push(attempt(&base, i, nonce).is_ok());
                let took = start.elapsed();
                if let Ok(mut s) = slowest.lock() {
                    *s = (*s).max(took);
                }
                // Neither side starts the next round's decision before both are done.
                barrier.wait();
            }
            won
        })
    };
    let a = side(here.to_path_buf(), b"side-a", true);
    let b = side(peer.to_path_buf(), b"side-b", false);
    let (Ok(a), Ok(b)) = (a.join(), b.join()) else {
        return check(
            name,
            Status::Unknown,
            format!("a {what} race thread failed"),
        );
    };
    let ran = a.len().min(b.len());
    let slowest = slowest.lock().map(|s| *s).unwrap_or_default();
    let cut = if ran < rounds as usize {
        format!(
            " (stopped after {} s: an attempt took up to {:.3} s)",
            RACE_BUDGET.as_secs(),
            slowest.as_secs_f64()
        )
    } else {
        String::new()
    };
    if ran == 0 {
        return check(
            name,
            Status::Unknown,
            format!("no {what} race finished in time"),
        );
    }
    #[allow(clippy::cast_possible_truncation)] // at most `rounds`, a u32
    let rounds = ran as u32;
    let mut both = 0;
    let mut wrong = 0;
    let mut none = 0;
    let mut budget = Duration::from_secs(10);
    for i in 0..rounds as usize {
        // Read through the winner's own mount (the other may still have a stale view).
        let base = if b[i] && !a[i] { peer } else { here };
        let content = read_settled(&base.join(format!("{name}-{i}")), &mut budget);
        match (a[i], b[i]) {
            (true, true) => both += 1,
            (true, false) if content.as_deref() != Some(b"side-a") => wrong += 1,
            (false, true) if content.as_deref() != Some(b"side-b") => wrong += 1,
            (false, false)
                if content.as_deref() != Some(b"side-a")
                    && content.as_deref() != Some(b"side-b") =>
            {
                none += 1;
            }
            _ => {}
        }
    }
    if both + wrong > 0 {
        check(
            name,
            Status::Fail,
            format!(
                "{what} races between the two mounts: {both} of {rounds} rounds had two winners, {wrong} a winner whose content was not at the name{cut}"
            ),
        )
        .value(f64::from(both + wrong))
    } else if none > 0 {
        check(
            name,
            Status::Warn,
            format!(
                "{what} races between the two mounts: {none} of {rounds} rounds left no file{cut}"
            ),
        )
        .value(0.0)
    } else {
        check(
            name,
            Status::Ok,
            format!(
                "{what} races between the two mounts: one winner in each of {rounds} rounds{cut}"
            ),
        )
        .value(0.0)
    }
}

/// A race's file as it reads once complete: retried while it is missing or empty (a
/// name or content not yet visible through this mount), for at most what is left of
/// `budget` (shared by all rounds of a race, so that a filesystem where the files never
/// show costs seconds, not minutes).
fn read_settled(path: &Path, budget: &mut Duration) -> Option<Vec<u8>> {
    let start = Instant::now();
    let result = loop {
        match read_back(path) {
            Ok(content) if !content.is_empty() => break Some(content),
            _ if start.elapsed() >= *budget => break None,
            _ => std::thread::sleep(Duration::from_millis(20)),
        }
    };
    *budget = budget.saturating_sub(start.elapsed());
    result
}

fn race_create(s: &Scratch, peer: &Path, rounds: u32) -> Check {
    race(
        "race_exclusive_create",
        "O_EXCL",
        rounds,
        |base, i, nonce| put(&base.join(format!("race_exclusive_create-{i}")), nonce),
        &s.path,
        peer,
    )
}

fn race_link(s: &Scratch, peer: &Path, rounds: u32) -> Check {
    race(
        "race_link",
        "link()",
        rounds,
        |base, i, nonce| {
            let src = base.join(format!("src-{}-{i}", String::from_utf8_lossy(nonce)));
            put(&src, nonce)?;
            linkat(
                AT_FDCWD,
                &src,
                AT_FDCWD,
                &base.join(format!("race_link-{i}")),
                nix::fcntl::AtFlags::empty(),
            )
        },
        &s.path,
        peer,
    )
}

fn listed(dir: &Path, name: &str) -> bool {
    std::fs::read_dir(dir).is_ok_and(|it| it.flatten().any(|e| e.file_name() == *name))
}

/// Polls `cond` every 5 ms up to [`VISIBILITY_CAP`]; how long until it held.
fn until(mut cond: impl FnMut() -> bool) -> Option<Duration> {
    let start = Instant::now();
    loop {
        if cond() {
            return Some(start.elapsed());
        }
        if start.elapsed() > VISIBILITY_CAP {
            return None;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// How long a create, an unlink and an mtime change made through DIR take to show
/// through the peer (listings for names, `open` + `fstat` for the mtime, as rwdir looks),
/// each after the peer has looked once, so that its caches are warm.
fn visibility(s: &Scratch, peer: &Path) -> (Option<Duration>, Vec<Check>) {
    let mut checks = Vec::new();
    let mut worst = Some(Duration::ZERO);
    // Ok(Some): seen after that long; Ok(None): not seen within the cap; Err: the
    // change itself could not be made.
    let mut note = |name: &'static str, what: &str, took: Result<Option<Duration>, String>| {
        let c = match &took {
            Ok(Some(d)) => check(
                name,
                Status::Ok,
                format!(
                    "{what} showed through the peer after {:.3} s",
                    d.as_secs_f64()
                ),
            )
            .value(d.as_secs_f64()),
            Ok(None) => check(
                name,
                Status::Unknown,
                format!(
                    "{what} did not show through the peer within {} s",
                    VISIBILITY_CAP.as_secs()
                ),
            ),
            Err(why) => check(name, Status::Unknown, format!("{what}: {why}")),
        };
        worst = match (worst, took) {
            (Some(w), Ok(Some(d))) => Some(w.max(d)),
            _ => None,
        };
        checks.push(c);
    };
    let failed = |what: &str, e: Errno| format!("{what} failed: {}", errno_text(e));

    // A create, after the peer listed the directory without it.
    let _ = listed(peer, "vis-create");
    let took = put(&s.at("vis-create"), b"x")
        .map_err(|e| failed("creating it", e))
        .map(|()| until(|| listed(peer, "vis-create")));
    note("stale_listing_create", "a new file", took);

    // An unlink, after the peer listed and opened the file.
    let _ = listed(peer, "vis-create");
    let _ = read_back(&peer.join("vis-create"));
    let took = unlink(&s.at("vis-create"))
        .map_err(|e| failed("removing it", e))
        .map(|()| until(|| !listed(peer, "vis-create")));
    note("stale_listing_unlink", "a removed file", took);

    // An mtime change, after the peer read the old one.
    let took = create_excl(&s.at("vis-mtime"))
        .map_err(|e| failed("creating the file", e))
        .and_then(|fd| {
            let peer_path = peer.join("vis-mtime");
            let mtime = |p: &Path| {
                open(
                    p,
                    OFlag::O_RDONLY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
                    Mode::empty(),
                )
                .and_then(|fd| fstat(&fd))
                .map(|st| st.st_mtime)
            };
            if until(|| mtime(&peer_path).is_ok()).is_none() {
                return Ok(None);
            }
            let new = TimeSpec::new(1_500_000_000, 0);
            futimens(&fd, &new, &new).map_err(|e| failed("futimens()", e))?;
            Ok(until(|| mtime(&peer_path) == Ok(1_500_000_000)))
        });
    note("stale_attributes", "an mtime change", took);
    (worst, checks)
}

/// The lease the measurements call for. rwdir judges another host's file dead only after
/// its lease plus the judging margin (`covered`, the cache window it knows for this
/// filesystem or was given with `--cache-window`, plus 1 s of mtime resolution), so the
/// lease has to cover only the rest: `1.5 × (window − covered + clock skew + mtime
/// resolution beyond 1 s + 1 s)` (lease > heartbeat + that, heartbeat = lease/3).
fn lease_verdict(
    shared: bool,
    window: Option<(Duration, &'static str)>,
    covered: Duration,
    skew: Duration,
    granularity: Duration,
    lease: Duration,
) -> (Option<Duration>, Check) {
    const NAME: &str = "lease";
    const ONE: Duration = Duration::from_secs(1);
    let configured = lease.as_secs_f64();
    if !shared {
        return (
            None,
            check(
                NAME,
                Status::Ok,
                format!(
                    "local filesystem: holders on this host are judged exactly, the lease ({configured:.0} s) matters only between pid namespaces"
                ),
            ),
        );
    }
    let Some((window, how)) = window else {
        return (
            None,
            check(
                NAME,
                Status::Warn,
                format!(
                    "the cache window of this filesystem is not known: measure it with --peer-dir, then pass it with --cache-window (configured lease {configured:.0} s)"
                ),
            ),
        );
    };
    let uncovered = window.saturating_sub(covered);
    let need = (uncovered + skew + granularity.saturating_sub(ONE) + ONE).mul_f64(1.5);
    let need = Duration::from_secs(need.as_secs() + u64::from(need.subsec_nanos() > 0));
    let text = format!(
        "needs more than 1.5 × (cache window {:.3} s, {how}, less the {:.3} s rwdir adds to every lease when judging + clock skew {:.3} s + 1 s) = {} s; configured {configured:.0} s; a crashed holder is taken over {:.0} s after its last heartbeat",
        window.as_secs_f64(),
        covered.as_secs_f64(),
        skew.as_secs_f64(),
        need.as_secs(),
        (lease + covered + ONE).as_secs_f64()
    );
    let c = if lease > need {
        check(NAME, Status::Ok, text)
    } else {
        check(
            NAME,
            Status::Fail,
            format!(
                "{text}: too short, a paused holder could be taken over while its file is only stale in a cache (pass a longer --lease, the same for every user, or a --cache-window that covers the measured one)"
            ),
        )
    };
    (Some(need), c.value(need.as_secs_f64()))
}

/// Lock files in DIR/.rwdir, judged as `rwdir status` judges them; nothing is touched.
/// Scratch directories of an earlier doctor killed by SIGKILL are named too.
fn leftovers(dir: &Path, lease: Duration) -> Check {
    const NAME: &str = "leftovers";
    let mut old_scratch: Vec<OsString> = std::fs::read_dir(dir)
        .map(|it| {
            it.flatten()
                .map(|e| e.file_name())
                .filter(|n| n.to_string_lossy().starts_with(".rwdir-doctor-"))
                .collect()
        })
        .unwrap_or_default();
    old_scratch.sort();
    let lock = rwdir::DirLock::builder(dir)
        .lease(lease)
        .allow_unsafe_filesystem(true)
        .build();
    let status = match lock.and_then(|l| l.status()) {
        Ok(st) => st,
        Err(e) => return check(NAME, Status::Unknown, super::message(&e)),
    };
    let entries: Vec<&rwdir::Entry> = status
        .writer
        .iter()
        .chain(&status.pending)
        .chain(&status.readers)
        .chain(&status.other)
        .collect();
    let stale = entries.iter().filter(|e| e.liveness.is_dead()).count();
    let mut text = match (entries.len(), stale) {
        (0, _) => "no lock files in DIR/.rwdir".to_string(),
        (n, 0) => format!("{n} lock files in DIR/.rwdir, none stale"),
        (n, s) => format!(
            "{n} lock files in DIR/.rwdir, {s} stale (dead holders): contenders remove them by themselves; `rwdir cleanup {}` tidies up",
            dir.display()
        ),
    };
    if !old_scratch.is_empty() {
        let _ = write!(
            text,
            "; scratch directories of an earlier doctor that was killed: {}",
            old_scratch
                .iter()
                .map(|n| n.to_string_lossy().into_owned())
                .collect::<Vec<_>>()
                .join(", ")
        );
    }
    let status = if stale > 0 || !old_scratch.is_empty() {
        Status::Warn
    } else {
        Status::Ok
    };
    check(NAME, status, text).value(f64::from(u32::try_from(stale).unwrap_or(u32::MAX)))
}

/// The report as lines: one per check, then the verdict.
fn human(r: &Report) -> String {
    let mut s = format!("rwdir doctor `{}`\n", r.dir);
    for c in &r.checks {
        let _ = writeln!(s, "{:<5} {}: {}", c.status.label(), c.name, c.detail);
    }
    let count = |st| r.checks.iter().filter(|c| c.status == st).count();
    let _ = match r.verdict {
        "safe" => writeln!(s, "verdict: safe ({} warnings)", count(Status::Warn)),
        "unsafe" => writeln!(s, "verdict: unsafe ({} failed)", count(Status::Fail)),
        _ => writeln!(
            s,
            "verdict: could not tell ({} checks could not be made)",
            count(Status::Unknown)
        ),
    };
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lease_formula() {
        let secs = Duration::from_secs;
        // sshfs: the 21 s window is in the judging margin; 1.5 × 1 s = 1.5, rounded up.
        let (need, c) = lease_verdict(
            true,
            Some((secs(21), "x")),
            secs(21),
            secs(0),
            secs(1),
            secs(45),
        );
        assert_eq!(need, Some(secs(2)));
        assert_eq!(c.status, Status::Ok);
        // Not covered (`--cache-window 0` on a mount measured at 21 s): 1.5 × 22 = 33.
        let (need, c) = lease_verdict(
            true,
            Some((secs(21), "x")),
            secs(0),
            secs(0),
            secs(1),
            secs(30),
        );
        assert_eq!(need, Some(secs(33)));
        assert_eq!(c.status, Status::Fail);
        // Measured worse than known: 1.5 × (80 − 60 + 2 + 1) = 34.5, rounded up.
        let (need, c) = lease_verdict(
            true,
            Some((secs(80), "x")),
            secs(60),
            secs(2),
            Duration::from_nanos(1),
            secs(45),
        );
        assert_eq!(need, Some(secs(35)));
        assert_eq!(c.status, Status::Ok);
        // A 2 s mtime resolution: one second more than the margin has.
        let (need, _) = lease_verdict(
            true,
            Some((secs(1), "x")),
            secs(1),
            secs(0),
            secs(2),
            secs(45),
        );
        assert_eq!(need, Some(secs(3)));
        let (_, c) = lease_verdict(true, None, secs(0), secs(0), secs(0), secs(45));
        assert_eq!(c.status, Status::Warn);
        let (need, c) = lease_verdict(false, None, secs(0), secs(0), secs(0), secs(45));
        assert_eq!((need, c.status), (None, Status::Ok));
    }
}
