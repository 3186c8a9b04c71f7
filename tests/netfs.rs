//! Multi-host tests on the network-filesystem rig of `tests/netfs/` (sshfs mounts of one
//! export, "hosts" made with namespaces). Run them with
//!
//! ```text
//! tests/netfs/run.sh cargo test --test netfs -- --nocapture
//! ```
//!
//! Without the rig's variables (`NETFS_A`, `NETFS_B`, `NETFS_A_NOCACHE`,
//! `NETFS_B_NOCACHE`, `NETFS_EXPORT`, `NETFS_HOST_SH`) every test prints a note and
//! passes. The processes on the "hosts" are this test binary again, re-executed with
//! `RWDIR_NETFS_WORKER=<role>`: they run `netfs_worker`, which does one role and exits.
//! Every worker writes its events to a log file on the LOCAL disk (never on the shared
//! mount); the tests read those logs and decide. Readiness is a line in such a log,
//! waited for by polling; no sleep decides a verdict.

use std::collections::BTreeMap;
use std::fs::{self, File, OpenOptions};
use std::io::{BufRead, BufReader, Write};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use rwdir::{DirLock, Liveness};

#[path = "cli/bin.rs"]
mod bin;

// ------------------------------------------------------------------------------ rig

struct Rig {
    export: PathBuf,
    a: PathBuf,
    b: PathBuf,
    a_nocache: PathBuf,
    b_nocache: PathBuf,
    host_sh: PathBuf,
    /// Host C (partition test): its mount, netns and root-side veth.
    c: Option<(PathBuf, String, String)>,
}

fn rig(test: &str) -> Option<Rig> {
    let var = |k: &str| std::env::var_os(k).map(PathBuf::from);
    let all = (
        var("NETFS_EXPORT"),
        var("NETFS_A"),
        var("NETFS_B"),
        var("NETFS_A_NOCACHE"),
        var("NETFS_B_NOCACHE"),
        var("NETFS_HOST_SH"),
    );
    let (Some(export), Some(a), Some(b), Some(a_nocache), Some(b_nocache), Some(host_sh)) = all
    else {
        eprintln!(
            "note: netfs test `{test}` skipped: the multi-host rig is not set up \
             (run `tests/netfs/run.sh cargo test --test netfs`)"
        );
        return None;
    };
    let c = match (
        var("NETFS_C"),
        std::env::var("NETFS_NETNS_C").ok(),
        std::env::var("NETFS_VETH_C").ok(),
    ) {
        (Some(m), Some(ns), Some(veth)) => Some((m, ns, veth)),
        _ => None,
    };
    Some(Rig {
        export,
        a,
        b,
        a_nocache,
        b_nocache,
        host_sh,
        c,
    })
}

fn now_ns() -> u128 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0)
}

fn secs(ns: u128) -> f64 {
    ns as f64 / 1e9
}

/// A fresh directory for one test: `name` in the export (so every mount sees it) and a
/// local directory for the workers' logs.
fn fresh(rig: &Rig, name: &str) -> PathBuf {
    let shared = rig.export.join(name);
    let _ = fs::remove_dir_all(&shared);
    fs::create_dir_all(&shared).expect("create test dir in the export");
    let local =
        std::env::temp_dir().join(format!("rwdir-netfs-logs-{name}-{}", std::process::id()));
    let _ = fs::remove_dir_all(&local);
    fs::create_dir_all(&local).expect("create local log dir");
    local
}

/// One worker process on a "host" (tests/netfs/host.sh: own hostname, pid, mount
/// namespace, boot id, optionally network namespace).
struct Worker {
    child: Child,
    log: PathBuf,
    tag: String,
}

struct Spec<'a> {
    host: &'a str,
    net: Option<&'a str>,
    role: &'a str,
    name: &'a str,
    dir: &'a Path,
    out: &'a Path,
    lease: Duration,
    env: Vec<(&'a str, String)>,
}

/// A command prefix that runs what follows as host `host` (with a random boot id).
fn on_host(rig: &Rig, host: &str, net: Option<&str>) -> Command {
    let mut cmd = Command::new("bash");
    cmd.arg(&rig.host_sh).arg(host);
    if let Some(net) = net {
        cmd.arg("--net").arg(net);
    }
    cmd.args(["--boot-id", "random", "--"]);
    cmd
}

fn spawn(rig: &Rig, s: Spec<'_>) -> Worker {
    let exe = std::env::current_exe().expect("current exe");
    let tag = format!("{}-{}", s.name, uuid::Uuid::new_v4());
    let log = s.out.join(format!("{}.log", s.name));
    let stdio = File::create(s.out.join(format!("{}.stdio", s.name))).expect("stdio file");
    let mut cmd = on_host(rig, s.host, s.net);
    cmd.arg(exe)
        .args([
            "netfs_worker",
            "--exact",
            "--nocapture",
            "--test-threads=1",
            "-q",
        ])
        .env("RWDIR_NETFS_WORKER", s.role)
        .env("RWDIR_NETFS_TAG", &tag)
        .env("RWDIR_NETFS_NAME", s.name)
        .env("RWDIR_NETFS_LOCKDIR", s.dir)
        .env("RWDIR_NETFS_OUT", s.out)
        .env("RWDIR_NETFS_LEASE_MS", s.lease.as_millis().to_string())
        .envs(s.env)
        .stdin(Stdio::null())
        .stdout(stdio.try_clone().expect("dup"))
        .stderr(stdio);
    let child = cmd.spawn().expect("spawn host.sh");
    Worker { child, log, tag }
}

impl Worker {
    fn lines(&self) -> Vec<String> {
        match File::open(&self.log) {
            Ok(f) => BufReader::new(f).lines().map_while(Result::ok).collect(),
            Err(_) => Vec::new(),
        }
    }

    /// Waits (polling the log) for a line starting with one of `words`; panics after
    /// `limit`, showing the log and the worker's output.
    fn wait_for(&self, words: &[&str], limit: Duration) -> Vec<String> {
        let t = Instant::now();
        loop {
            if let Some(l) = self
                .lines()
                .into_iter()
                .find(|l| words.iter().any(|w| l.split(' ').next() == Some(*w)))
            {
                return l.split(' ').map(str::to_string).collect();
            }
            assert!(
                t.elapsed() < limit,
                "worker {} logged none of {words:?} within {limit:?}\nlog:\n{}\noutput:\n{}",
                self.tag,
                self.lines().join("\n"),
                fs::read_to_string(self.log.with_extension("stdio")).unwrap_or_default()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// The worker's pid in the root pid namespace (found by its tag in
    /// `/proc/PID/environ`, among processes running this test binary).
    fn global_pid(&self) -> i32 {
        find_pid(&std::env::current_exe().expect("current exe"), &self.tag)
    }
}

/// The pid (in the root pid namespace) of the process running `exe` whose environment
/// has `RWDIR_NETFS_TAG=<tag>`.
fn find_pid(exe: &Path, tag: &str) -> i32 {
    {
        let needle = format!("RWDIR_NETFS_TAG={}", tag);
        for e in fs::read_dir("/proc").expect("/proc").flatten() {
            let Ok(pid) = e.file_name().to_string_lossy().parse::<i32>() else {
                continue;
            };
            if fs::read_link(e.path().join("exe")).ok().as_deref() != Some(exe) {
                continue;
            }
            let env = fs::read(e.path().join("environ")).unwrap_or_default();
            if env.split(|&b| b == 0).any(|v| v == needle.as_bytes()) {
                return pid;
            }
        }
        panic!("process {tag} not found in /proc");
    }
}

impl Worker {
    fn release(&self) {
        File::create(self.log.with_extension("release")).expect("release file");
    }

    /// Kills the whole host: host.sh's unshare SIGKILLs the host's pid 1, and the kernel
    /// every process of its pid namespace.
    fn crash_host(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    fn wait_exit(&mut self, limit: Duration) -> Option<i32> {
        let t = Instant::now();
        loop {
            if let Ok(Some(st)) = self.child.try_wait() {
                return st.code();
            }
            if t.elapsed() > limit {
                self.crash_host();
                return None;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

impl Drop for Worker {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            self.crash_host();
        }
    }
}

fn field<T: std::str::FromStr>(line: &[String], i: usize) -> T {
    line.get(i)
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("bad log line {line:?}, field {i}"))
}

/// The server's view of a file's mtime (the export is a local ext4 directory).
fn server_mtime_ns(path: &Path) -> u128 {
    let m = fs::metadata(path).expect("stat in export");
    u128::try_from(m.mtime()).unwrap_or(0) * 1_000_000_000
        + u128::try_from(m.mtime_nsec()).unwrap_or(0)
}

// -------------------------------------------------------------------------- workers

/// The entry point of the re-executed workers; does nothing in a normal test run.
#[test]
fn netfs_worker() {
    let Ok(role) = std::env::var("RWDIR_NETFS_WORKER") else {
        return;
    };
    let code = worker::run(&role);
    std::process::exit(code);
}

mod worker {
    use super::*;
    use rwdir::WriteGuard;

    fn env(k: &str) -> String {
        std::env::var(k).unwrap_or_default()
    }

    fn env_u64(k: &str, default: u64) -> u64 {
        env(k).parse().unwrap_or(default)
    }

    pub(super) struct Log(File);

    impl Log {
        fn open() -> Log {
            let out = PathBuf::from(env("RWDIR_NETFS_OUT"));
            let path = out.join(format!("{}.log", env("RWDIR_NETFS_NAME")));
            Log(OpenOptions::new()
                .create(true)
                .append(true)
                .open(path)
                .expect("open log"))
        }

        pub(super) fn line(&mut self, s: &str) {
            // One write per line, so that readers never see half a line.
            let _ = self.0.write_all(format!("{s}\n").as_bytes());
        }
    }

    /// An error with its sources, on one line.
    fn chain(e: &rwdir::Error) -> String {
        let mut s = e.to_string();
        let mut src = std::error::Error::source(e);
        while let Some(x) = src {
            s.push_str(&format!(": {x}"));
            src = x.source();
        }
        s
    }

    fn lock() -> DirLock {
        DirLock::builder(env("RWDIR_NETFS_LOCKDIR"))
            .lease(Duration::from_millis(env_u64(
                "RWDIR_NETFS_LEASE_MS",
                45_000,
            )))
            .build()
            .expect("build lock")
    }

    pub(super) fn run(role: &str) -> i32 {
        let mut log = Log::open();
        let host = nix::unistd::gethostname()
            .map(|h| h.to_string_lossy().into_owned())
            .unwrap_or_default();
        log.line(&format!("start {} {host} {}", now_ns(), std::process::id()));
        match role {
            "stress" => stress(&mut log, &host),
            "hold" => {
                let timeout = Duration::from_millis(env_u64("RWDIR_NETFS_TIMEOUT_MS", 120_000));
                match lock().try_write_for(timeout) {
                    Ok(g) => {
                        log.line(&format!("granted {} {}", g.token(), now_ns()));
                        hold(&mut log, g)
                    }
                    Err(e) => {
                        log.line(&format!("error {} {}", now_ns(), chain(&e)));
                        2
                    }
                }
            }
            "take" => take(&mut log),
            "probe" => {
                let dir = env("RWDIR_NETFS_LOCKDIR");
                match DirLock::new(&dir).and_then(|l| l.try_write()) {
                    Ok(g) => {
                        log.line(&format!("granted {} {}", g.token(), now_ns()));
                        0
                    }
                    Err(e) => {
                        log.line(&format!("refused {} {:?} {e}", now_ns(), e.kind()));
                        0
                    }
                }
            }
            _ => 64,
        }
    }

    /// Holds `g` until the test asks for the release, or until the lock is lost.
    fn hold(log: &mut Log, g: WriteGuard) -> i32 {
        let out = PathBuf::from(env("RWDIR_NETFS_OUT"));
        let release = out.join(format!("{}.release", env("RWDIR_NETFS_NAME")));
        // By default only the heartbeat thread looks (`is_lost`); with
        // RWDIR_NETFS_CHECK=1 the worker also calls `check()` every second.
        let check = env("RWDIR_NETFS_CHECK") == "1";
        let mut last_check = Instant::now();
        let t = Instant::now();
        loop {
            if g.is_lost() {
                log.line(&format!("lost {} heartbeat", now_ns()));
                let r = g.release();
                log.line(&format!(
                    "dropped {} {:?}",
                    now_ns(),
                    r.err().map(|e| e.to_string())
                ));
                return 3;
            }
            if check && last_check.elapsed() >= Duration::from_secs(1) {
                last_check = Instant::now();
                if let Err(e) = g.check() {
                    log.line(&format!("lost {} check {e}", now_ns()));
                    let r = g.release();
                    log.line(&format!(
                        "dropped {} {:?}",
                        now_ns(),
                        r.err().map(|e| e.to_string())
                    ));
                    return 3;
                }
            }
            if release.exists() {
                let r = g.release();
                log.line(&format!(
                    "released {} {}",
                    now_ns(),
                    r.err()
                        .map_or("ok".to_string(), |e| e.to_string().replace(' ', "_"))
                ));
                return 0;
            }
            if t.elapsed() > Duration::from_secs(300) {
                log.line(&format!("expired {}", now_ns()));
                return 4;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Waits for the write lock while sampling `status` every 250 ms, then holds it.
    fn take(log: &mut Log) -> i32 {
        let l = lock();
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let sampler = {
            let l = l.clone();
            let stop = std::sync::Arc::clone(&stop);
            let mut slog = Log::open();
            std::thread::spawn(move || {
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    let t = now_ns();
                    match l.status() {
                        Ok(st) => match st.writer {
                            Some(w) => {
                                let host = w.holder.as_ref().map_or("?".into(), |h| h.host.clone());
                                let mtime = w
                                    .mtime
                                    .duration_since(UNIX_EPOCH)
                                    .map_or(0, |d| d.as_nanos());
                                slog.line(&format!("status {t} {host} {:?} {mtime}", w.liveness));
                            }
                            None => slog.line(&format!("status {t} - none 0")),
                        },
                        Err(e) => slog.line(&format!("status {t} - error:{} 0", e.kind())),
                    }
                    std::thread::sleep(Duration::from_millis(250));
                }
            })
        };
        let timeout = Duration::from_millis(env_u64("RWDIR_NETFS_TIMEOUT_MS", 120_000));
        let r = l.try_write_for(timeout);
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        let _ = sampler.join();
        match r {
            Ok(g) => {
                log.line(&format!("granted {} {}", g.token(), now_ns()));
                hold(log, g)
            }
            Err(e) => {
                log.line(&format!("error {} {}", now_ns(), chain(&e)));
                2
            }
        }
    }

    /// Readers and writers in a loop until the deadline. Each grant is logged as
    /// `R|W <in_ns> <out_ns> <token>`; inside, a writer creates `markers/writer`
    /// exclusively and checks that no reader marker exists, a reader creates its own
    /// marker and checks that no writer marker exists (store, then load, on the local
    /// disk): any overlap is logged as `VIOLATION`.
    fn stress(log: &mut Log, host: &str) -> i32 {
        let lock = lock();
        let secs = env_u64("RWDIR_NETFS_SECS", 60);
        let write_pct = env_u64("RWDIR_NETFS_WRITE_PCT", 30);
        let markers = PathBuf::from(env("RWDIR_NETFS_MARKERS"));
        let me = env("RWDIR_NETFS_NAME");
        let end = Instant::now() + Duration::from_secs(secs);
        let mut rng = uuid::Uuid::new_v4().as_u64_pair().0 | 1;
        let mut rand = move |n: u64| {
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            rng % n.max(1)
        };
        let timeout = Duration::from_secs(secs + 120);
        let mut seq = 0u64;
        while Instant::now() < end {
            seq += 1;
            let write = rand(100) < write_pct;
            let hold = Duration::from_millis(rand(if write { 20 } else { 40 }));
            if write {
                let g = match lock.try_write_for(timeout) {
                    Ok(g) => g,
                    Err(e) => {
                        log.line(&format!("error {} write {}", now_ns(), chain(&e)));
                        return 2;
                    }
                };
                let t_in = now_ns();
                let wm = markers.join("writer");
                let mine = match OpenOptions::new().write(true).create_new(true).open(&wm) {
                    Ok(_) => true,
                    Err(e) => {
                        log.line(&format!("VIOLATION {t_in} writer-writer {me} {host} {e}"));
                        false
                    }
                };
                let readers: Vec<String> = fs::read_dir(&markers)
                    .map(|d| {
                        d.flatten()
                            .map(|e| e.file_name().to_string_lossy().into_owned())
                            .filter(|n| n.starts_with("r-"))
                            .collect()
                    })
                    .unwrap_or_default();
                if !readers.is_empty() {
                    log.line(&format!(
                        "VIOLATION {t_in} writer-reader {me} {host} {readers:?}"
                    ));
                }
                std::thread::sleep(hold);
                if mine {
                    let _ = fs::remove_file(&wm);
                }
                let t_out = now_ns();
                if g.is_lost() {
                    log.line(&format!("LOST {t_out} {me} {host} token {}", g.token()));
                }
                log.line(&format!("W {t_in} {t_out} {} {host}", g.token()));
                if let Err(e) = g.release() {
                    log.line(&format!("LOST {} release {me} {host} {e}", now_ns()));
                }
            } else {
                let g = match lock.try_read_for(timeout) {
                    Ok(g) => g,
                    Err(e) => {
                        log.line(&format!("error {} read {}", now_ns(), chain(&e)));
                        return 2;
                    }
                };
                let t_in = now_ns();
                let rm = markers.join(format!("r-{me}-{seq}"));
                let _ = File::create(&rm);
                if markers.join("writer").exists() {
                    log.line(&format!("VIOLATION {t_in} reader-writer {me} {host}"));
                }
                std::thread::sleep(hold);
                let _ = fs::remove_file(&rm);
                let t_out = now_ns();
                log.line(&format!("R {t_in} {t_out} 0 {host}"));
                if let Err(e) = g.release() {
                    log.line(&format!("LOST {} release {me} {host} {e}", now_ns()));
                }
            }
            std::thread::sleep(Duration::from_millis(rand(15)));
        }
        log.line(&format!("done {}", now_ns()));
        0
    }
}

// ------------------------------------------------------------------------- stress

struct Grant {
    write: bool,
    t_in: u128,
    t_out: u128,
    token: u64,
    who: String,
}

/// Readers and writers on hosts A and B for `RWDIR_NETFS_STRESS_SECS` (default 60) s.
fn stress(rig: &Rig, name: &str, a: &Path, b: &Path) {
    let out = fresh(rig, name);
    let markers = out.join("markers");
    fs::create_dir_all(&markers).expect("markers dir");
    let run_secs: u64 = std::env::var("RWDIR_NETFS_STRESS_SECS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(60);
    let mut workers = Vec::new();
    for (host, mount) in [("hosta", a), ("hostb", b)] {
        let dir = mount.join(name);
        for i in 0..4 {
            let wname = format!("{host}-{i}");
            workers.push(spawn(
                rig,
                Spec {
                    host,
                    net: None,
                    role: "stress",
                    name: &wname,
                    dir: &dir,
                    out: &out,
                    lease: rwdir::DEFAULT_LEASE,
                    env: vec![
                        ("RWDIR_NETFS_SECS", run_secs.to_string()),
                        ("RWDIR_NETFS_MARKERS", markers.display().to_string()),
                        // Two writer-heavy and two reader-heavy processes per host.
                        (
                            "RWDIR_NETFS_WRITE_PCT",
                            if i < 2 { "60" } else { "15" }.into(),
                        ),
                    ],
                },
            ));
        }
    }
    let t0 = Instant::now();
    let mut codes = Vec::new();
    for w in &mut workers {
        codes.push(w.wait_exit(Duration::from_secs(run_secs + 180)));
    }
    let elapsed = t0.elapsed();
    let mut grants = Vec::new();
    let mut problems = Vec::new();
    for w in &workers {
        for l in w.lines() {
            let f: Vec<String> = l.split(' ').map(str::to_string).collect();
            match f[0].as_str() {
                "R" | "W" => grants.push(Grant {
                    write: f[0] == "W",
                    t_in: field(&f, 1),
                    t_out: field(&f, 2),
                    token: field(&f, 3),
                    who: w.tag.split('-').take(2).collect::<Vec<_>>().join("-"),
                }),
                "VIOLATION" | "LOST" | "error" => problems.push(format!("{}: {l}", w.tag)),
                _ => {}
            }
        }
    }
    grants.sort_by_key(|g| g.t_in);
    // Overlaps: a writer's interval must not intersect anyone else's.
    let mut overlaps = Vec::new();
    for (i, g) in grants.iter().enumerate() {
        for h in grants[i + 1..].iter().take_while(|h| h.t_in < g.t_out) {
            if g.write || h.write {
                overlaps.push(format!(
                    "{} {} [{:.6}, {:.6}] overlaps {} {} [{:.6}, {:.6}]",
                    if g.write { "W" } else { "R" },
                    g.who,
                    secs(g.t_in),
                    secs(g.t_out),
                    if h.write { "W" } else { "R" },
                    h.who,
                    secs(h.t_in),
                    secs(h.t_out)
                ));
            }
        }
    }
    // Fencing tokens: strictly growing in grant order.
    let writes: Vec<&Grant> = grants.iter().filter(|g| g.write).collect();
    let token_errors: Vec<String> = writes
        .windows(2)
        .filter(|w| w[1].token <= w[0].token)
        .map(|w| format!("token {} after {}", w[1].token, w[0].token))
        .collect();
    let reads = grants.len() - writes.len();
    let per_host: BTreeMap<String, usize> = grants.iter().fold(BTreeMap::new(), |mut m, g| {
        *m.entry(g.who.split('-').next().unwrap_or("").to_string())
            .or_default() += 1;
        m
    });
    let cross = grants
        .windows(2)
        .filter(|w| w[0].who.split('-').next() != w[1].who.split('-').next())
        .count();
    eprintln!(
        "netfs stress {name}: {:.0} s, {} grants ({} write, {reads} read), per host {per_host:?}, \
         {cross} hand-overs between hosts, {} violations, {} token errors, {} problems, exit codes {codes:?}",
        elapsed.as_secs_f64(),
        grants.len(),
        writes.len(),
        overlaps.len(),
        token_errors.len(),
        problems.len()
    );
    for o in overlaps.iter().take(20) {
        eprintln!("  overlap: {o}");
    }
    for p in problems.iter().take(20) {
        eprintln!("  problem: {p}");
    }
    assert!(overlaps.is_empty(), "{} overlapping grants", overlaps.len());
    assert!(problems.is_empty(), "{problems:#?}");
    assert!(token_errors.is_empty(), "{token_errors:?}");
    assert!(codes.iter().all(|c| *c == Some(0)), "exit codes {codes:?}");
    assert!(
        writes.len() >= 20 && reads >= 20,
        "too few grants to mean anything"
    );
    assert!(
        per_host.len() == 2,
        "both hosts must have been granted: {per_host:?}"
    );
    let _ = fs::remove_dir_all(&out);
}

#[test]
fn stress_two_hosts_default_caching() {
    let Some(rig) = rig("stress_two_hosts_default_caching") else {
        return;
    };
    stress(&rig, "stress-default", &rig.a, &rig.b);
}

#[test]
fn stress_two_hosts_cache_no() {
    let Some(rig) = rig("stress_two_hosts_cache_no") else {
        return;
    };
    stress(&rig, "stress-nocache", &rig.a_nocache, &rig.b_nocache);
}

// ---------------------------------------------------------------- lease scenarios

/// The lease of the crash, freeze and partition tests: longer than the heartbeat
/// (lease/3 = 8.3 s) plus the staleness of a heartbeat seen through `open` + `fstat` on
/// sshfs (about 1.5 s measured: the kernel's 1 s attribute cache and the 1 s mtime
/// resolution) plus the 1 s margin rwdir adds on remote filesystems.
const SHORT_LEASE: Duration = Duration::from_secs(25);

/// Freezes the holder `pid` (SIGSTOP), starts a taker on host B, waits up to three
/// leases for its answer, and resumes `pid`. Returns the holder's last heartbeat as the
/// server recorded it, the taker, its answer, and when `pid` was resumed.
fn freeze_and_take(
    rig: &Rig,
    name: &str,
    out: &Path,
    pid: Pid,
) -> (u128, Worker, Vec<String>, u128) {
    kill(pid, Signal::SIGSTOP).expect("SIGSTOP");
    let master = rig.export.join(name).join(".rwdir/.master_lock");
    let last_beat = server_mtime_ns(&master);
    let taker = spawn(
        rig,
        Spec {
            host: "hostb",
            net: None,
            role: "take",
            name: "taker",
            dir: &rig.b.join(name),
            out,
            lease: SHORT_LEASE,
            env: vec![],
        },
    );
    let answer = taker.wait_for(&["granted", "error"], SHORT_LEASE * 3);
    let _ = kill(pid, Signal::SIGCONT);
    (last_beat, taker, answer, now_ns())
}

/// The checks common to a take-over: the taker was granted no sooner than `lease` after
/// the last heartbeat the server saw (`last_beat`), and not much later; while it waited
/// every status sample showed the old holder, judged `Unknown`.
fn check_takeover(what: &str, taker: &Worker, granted_at: u128, last_beat: u128, old_host: &str) {
    let lease = SHORT_LEASE.as_nanos();
    let after = granted_at.saturating_sub(last_beat);
    eprintln!(
        "netfs {what}: taker granted {:.2} s after the holder's last heartbeat (lease {} s)",
        secs(after),
        SHORT_LEASE.as_secs()
    );
    assert!(
        granted_at >= last_beat + lease,
        "granted {:.2} s after the last heartbeat: sooner than the lease",
        secs(after)
    );
    assert!(
        granted_at <= last_beat + lease + 8_000_000_000,
        "granted {:.2} s after the last heartbeat: far later than the lease",
        secs(after)
    );
    let mut unknown = 0;
    for l in taker.lines().iter().filter(|l| l.starts_with("status ")) {
        let f: Vec<String> = l.split(' ').map(str::to_string).collect();
        let t: u128 = field(&f, 1);
        if t + 500_000_000 < last_beat + lease {
            assert_eq!(f[2], old_host, "status before the lease ended: {l}");
            assert_eq!(f[3], format!("{:?}", Liveness::Unknown), "status: {l}");
            unknown += 1;
        }
    }
    eprintln!(
        "netfs {what}: {unknown} status samples showed {old_host} as Unknown before the lease ended"
    );
    assert!(unknown >= 4, "too few status samples");
}

#[test]
fn crashed_host_is_taken_over_after_the_lease() {
    let Some(rig) = rig("crashed_host_is_taken_over_after_the_lease") else {
        return;
    };
    let name = "crash";
    let out = fresh(&rig, name);
    let mut holder = spawn(
        &rig,
        Spec {
            host: "hosta",
            net: None,
            role: "hold",
            name: "holder",
            dir: &rig.a.join(name),
            out: &out,
            lease: SHORT_LEASE,
            env: vec![],
        },
    );
    let g1 = holder.wait_for(&["granted", "error"], Duration::from_secs(30));
    assert_eq!(g1[0], "granted", "{g1:?}");
    // Let at least one heartbeat happen, then crash the whole host.
    std::thread::sleep(SHORT_LEASE / 3 + Duration::from_secs(1));
    holder.crash_host();
    let master = rig.export.join(name).join(".rwdir/.master_lock");
    let last_beat = server_mtime_ns(&master);
    let taker = spawn(
        &rig,
        Spec {
            host: "hostb",
            net: None,
            role: "take",
            name: "taker",
            dir: &rig.b.join(name),
            out: &out,
            lease: SHORT_LEASE,
            env: vec![],
        },
    );
    // `rwdir status --json` on the survivor, while it waits.
    {
        let rwdir = bin::rwdir_bin();
        let dir = rig.b.join(name);
        let o = on_host(&rig, "hostb", None)
            .arg(rwdir)
            .arg("--lease")
            .arg(SHORT_LEASE.as_secs().to_string())
            .args(["status", "--json"])
            .arg(&dir)
            .output()
            .expect("rwdir status");
        let json = String::from_utf8_lossy(&o.stdout);
        let writer = json
            .split("\"writer\":")
            .nth(1)
            .and_then(|w| w.split('}').next())
            .unwrap_or("");
        eprintln!("netfs crashed host: `rwdir status --json` on host B: writer {writer}}}");
        assert!(
            writer.contains("\"host\":\"hosta\"") && writer.contains("\"alive\":null"),
            "status: {json}"
        );
    }
    let g2 = taker.wait_for(&["granted", "error"], SHORT_LEASE * 3);
    assert_eq!(g2[0], "granted", "{g2:?}");
    check_takeover("crashed host", &taker, field(&g2, 2), last_beat, "hosta");
    let (t1, t2): (u64, u64) = (field(&g1, 1), field(&g2, 1));
    assert!(t2 > t1, "tokens {t1} then {t2}");
    taker.release();
    taker.wait_for(&["released"], Duration::from_secs(30));
}

#[test]
fn frozen_holder_loses_the_lock_and_notices() {
    let Some(rig) = rig("frozen_holder_loses_the_lock_and_notices") else {
        return;
    };
    let name = "frozen";
    let out = fresh(&rig, name);
    let holder = spawn(
        &rig,
        Spec {
            host: "hosta",
            net: None,
            role: "hold",
            name: "holder",
            dir: &rig.a.join(name),
            out: &out,
            lease: SHORT_LEASE,
            env: vec![],
        },
    );
    let g1 = holder.wait_for(&["granted", "error"], Duration::from_secs(30));
    assert_eq!(g1[0], "granted", "{g1:?}");
    let pid = Pid::from_raw(holder.global_pid());
    let (last_beat, taker, g2, resumed) = freeze_and_take(&rig, name, &out, pid);
    assert_eq!(g2[0], "granted", "{g2:?}");
    check_takeover("frozen holder", &taker, field(&g2, 2), last_beat, "hosta");
    let lost = holder.wait_for(&["lost", "released", "expired"], Duration::from_secs(30));
    assert_eq!(lost[0], "lost", "{lost:?}");
    let (t1, t2): (u64, u64) = (field(&g1, 1), field(&g2, 1));
    eprintln!(
        "netfs frozen holder: resumed holder reported the loss ({}) {:.2} s after SIGCONT; tokens {t1} -> {t2}",
        lost[2],
        secs(field::<u128>(&lost, 1).saturating_sub(resumed))
    );
    assert!(t2 > t1, "tokens {t1} then {t2}");
    // The heartbeat looks at once after a pause, even one that struck mid-beat.
    assert!(
        field::<u128>(&lost, 1) < resumed + 5_000_000_000,
        "the loss was noticed only {:.2} s after SIGCONT",
        secs(field::<u128>(&lost, 1).saturating_sub(resumed))
    );
    // The resumed holder removed nothing: the taker still holds.
    let dropped = holder.wait_for(&["dropped"], Duration::from_secs(10));
    assert_ne!(
        dropped.get(2).map(String::as_str),
        Some("None"),
        "{dropped:?}"
    );
    taker.release();
    let rel = taker.wait_for(&["released"], Duration::from_secs(30));
    assert_eq!(rel[2], "ok", "the taker's release: {rel:?}");
}

#[test]
fn partitioned_host_loses_the_lock_and_creates_nothing() {
    let Some(rig) = rig("partitioned_host_loses_the_lock_and_creates_nothing") else {
        return;
    };
    let Some((c_mount, c_netns, c_veth)) = rig.c.as_ref() else {
        eprintln!("note: partition test skipped: the rig has no host C (setup.sh --netns)");
        return;
    };
    let name = "partition";
    let out = fresh(&rig, name);
    let holder = spawn(
        &rig,
        Spec {
            host: "hostc",
            net: Some(c_netns),
            role: "hold",
            name: "holder",
            dir: &c_mount.join(name),
            out: &out,
            lease: SHORT_LEASE,
            env: vec![],
        },
    );
    let g1 = holder.wait_for(&["granted", "error"], Duration::from_secs(30));
    assert_eq!(g1[0], "granted", "{g1:?}");
    let link = |state: &str| {
        let st = Command::new("ip")
            .args(["link", "set", c_veth, state])
            .status()
            .expect("ip link");
        assert!(st.success(), "ip link set {c_veth} {state}");
    };
    link("down");
    let cut = now_ns();
    let master = rig.export.join(name).join(".rwdir/.master_lock");
    let last_beat = server_mtime_ns(&master);
    let taker = spawn(
        &rig,
        Spec {
            host: "hosta",
            net: None,
            role: "take",
            name: "taker",
            dir: &rig.a.join(name),
            out: &out,
            lease: SHORT_LEASE,
            env: vec![],
        },
    );
    let lost = holder.wait_for(&["lost", "released", "expired"], Duration::from_secs(90));
    let g2 = taker.wait_for(&["granted", "error"], SHORT_LEASE * 3);
    link("up");
    assert_eq!(lost[0], "lost", "{lost:?}");
    assert_eq!(g2[0], "granted", "{g2:?}");
    let (t_lost, t_granted): (u128, u128) = (field(&lost, 1), field(&g2, 2));
    eprintln!(
        "netfs partition: holder on host C reported the loss ({}) {:.1} s after the cut; \
         host A was granted {:.1} s after the cut",
        lost[2..].join(" "),
        secs(t_lost.saturating_sub(cut)),
        secs(t_granted.saturating_sub(cut))
    );
    check_takeover("partition", &taker, t_granted, last_beat, "hostc");
    // The mount is gone: its mount point is the empty local directory again. A new
    // process on host C must not create DIR (or anything) there.
    let t = Instant::now();
    while fs::read_dir(c_mount)
        .map(|mut d| d.next().is_some())
        .unwrap_or(true)
    {
        assert!(
            t.elapsed() < Duration::from_secs(60),
            "mount C did not go away"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    let probe = spawn(
        &rig,
        Spec {
            host: "hostc",
            net: Some(c_netns),
            role: "probe",
            name: "probe",
            dir: &c_mount.join(name),
            out: &out,
            lease: SHORT_LEASE,
            env: vec![],
        },
    );
    let p = probe.wait_for(&["granted", "refused"], Duration::from_secs(30));
    assert_eq!(p[0], "refused", "{p:?}");
    let left: Vec<_> = fs::read_dir(c_mount)
        .expect("mount point")
        .flatten()
        .map(|e| e.file_name())
        .collect();
    eprintln!(
        "netfs partition: a new process on host C was refused ({}); the mount point holds {left:?}",
        p[2..].join(" ")
    );
    assert!(
        left.is_empty(),
        "created in the abandoned mount point: {left:?}"
    );
    let (t1, t2): (u64, u64) = (field(&g1, 1), field(&g2, 1));
    assert!(t2 > t1, "tokens {t1} then {t2}");
    taker.release();
    taker.wait_for(&["released"], Duration::from_secs(30));
}

#[test]
fn frozen_cli_holder_gets_its_command_stopped() {
    let Some(rig) = rig("frozen_cli_holder_gets_its_command_stopped") else {
        return;
    };
    let rwdir = bin::rwdir_bin();
    let name = "frozen-cli";
    let out = fresh(&rig, name);
    let (tok, term) = (out.join("token"), out.join("term"));
    // COMMAND: publishes its token, then works until SIGTERM, which it records.
    let script = format!(
        "trap 'echo term > {term}; exit 143' TERM; echo \"$RWDIR_TOKEN\" > {tok}.tmp; \
         mv {tok}.tmp {tok}; while :; do sleep 0.1; done",
        term = term.display(),
        tok = tok.display()
    );
    let tag = format!("rwdir-{}", uuid::Uuid::new_v4());
    let stdio = File::create(out.join("holder.stdio")).expect("stdio");
    let mut holder = on_host(&rig, "hosta", None)
        .arg(rwdir)
        .arg("--lease")
        .arg(SHORT_LEASE.as_secs().to_string())
        .args(["write", "--timeout", "30"])
        .arg(rig.a.join(name))
        .args(["--", "sh", "-c", &script])
        .env("RWDIR_NETFS_TAG", &tag)
        .stdin(Stdio::null())
        .stdout(stdio.try_clone().expect("dup"))
        .stderr(stdio)
        .spawn()
        .expect("spawn rwdir write");
    let t = Instant::now();
    while !tok.exists() {
        assert!(
            t.elapsed() < Duration::from_secs(30),
            "COMMAND did not start"
        );
        if let Ok(Some(st)) = holder.try_wait() {
            panic!("rwdir write exited early: {st}");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let t1: u64 = fs::read_to_string(&tok)
        .expect("token")
        .trim()
        .parse()
        .expect("RWDIR_TOKEN");
    // Freeze rwdir itself (its heartbeat), not COMMAND, which goes on working.
    let pid = Pid::from_raw(find_pid(Path::new(rwdir), &tag));
    let (last_beat, taker, g2, resumed) = freeze_and_take(&rig, name, &out, pid);
    assert_eq!(g2[0], "granted", "{g2:?}");
    check_takeover(
        "frozen rwdir write",
        &taker,
        field(&g2, 2),
        last_beat,
        "hosta",
    );
    let t = Instant::now();
    let status = loop {
        if let Ok(Some(st)) = holder.try_wait() {
            break st;
        }
        assert!(
            t.elapsed() < Duration::from_secs(30),
            "rwdir write did not stop"
        );
        std::thread::sleep(Duration::from_millis(20));
    };
    let stopped = now_ns();
    let said = fs::read_to_string(out.join("holder.stdio")).unwrap_or_default();
    eprintln!(
        "netfs frozen rwdir write: exited {status} {:.2} s after SIGCONT; COMMAND got SIGTERM: {}; \
         tokens {t1} -> {}; rwdir said: {}",
        secs(stopped.saturating_sub(resumed)),
        term.exists(),
        g2[1],
        said.trim()
    );
    assert!(term.exists(), "COMMAND was not sent SIGTERM");
    assert!(
        !status.success(),
        "rwdir write must fail after losing its lock"
    );
    let t2: u64 = field(&g2, 1);
    assert!(t2 > t1, "tokens {t1} then {t2}");
    taker.release();
    let rel = taker.wait_for(&["released"], Duration::from_secs(30));
    assert_eq!(rel[2], "ok", "the taker's release: {rel:?}");
}
