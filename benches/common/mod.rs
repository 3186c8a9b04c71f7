//! Shared by the benchmark binaries: where to run (tmpfs and the default temp directory),
//! the quick smoke-run switch, statistics, table formatting, and the worker processes of
//! the multi-process benchmarks ([`workers`]).

#![allow(dead_code, clippy::disallowed_methods)]

pub mod workers;

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// Set to `1` for a short smoke run (CI): fewer rounds, shorter windows.
pub const QUICK_ENV: &str = "RWDIR_BENCH_QUICK";

/// Whether this is a short smoke run.
pub fn quick() -> bool {
    std::env::var(QUICK_ENV).is_ok_and(|v| !v.is_empty() && v != "0")
}

/// Where a case runs: the lock directory is a fresh directory under the base.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Loc {
    /// `/dev/shm`, a tmpfs: steady, the location the targets are judged at.
    Tmpfs,
    /// `std::env::temp_dir()` (`$TMPDIR`, else `/tmp`), often the root file system.
    Tmp,
}

impl Loc {
    /// Both locations, tmpfs first.
    pub const ALL: [Loc; 2] = [Loc::Tmpfs, Loc::Tmp];

    pub fn name(self) -> &'static str {
        match self {
            Loc::Tmpfs => "tmpfs",
            Loc::Tmp => "tmp",
        }
    }

    pub fn base(self) -> PathBuf {
        match self {
            Loc::Tmpfs => PathBuf::from("/dev/shm"),
            Loc::Tmp => std::env::temp_dir(),
        }
    }

    /// The locations available on this machine (no `/dev/shm`: temp dir only).
    pub fn available() -> Vec<Loc> {
        Loc::ALL.into_iter().filter(|l| l.base().is_dir()).collect()
    }

    /// A fresh, empty directory under this location, removed when dropped.
    pub fn fresh_dir(self) -> tempfile::TempDir {
        tempfile::Builder::new()
            .prefix("rwdir-bench-")
            .tempdir_in(self.base())
            .unwrap_or_else(|e| panic!("cannot make a directory in {}: {e}", self.base().display()))
    }

    /// `"tmpfs (/dev/shm, tmpfs)"`: name, base path and filesystem type.
    pub fn describe(self) -> String {
        format!(
            "`{}` = {} ({})",
            self.name(),
            self.base().display(),
            fs_type(&self.base())
        )
    }
}

impl std::fmt::Display for Loc {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// The filesystem type of `path`, from `statfs`'s magic number.
pub fn fs_type(path: &Path) -> String {
    use nix::sys::statfs::{self, statfs};
    let Ok(st) = statfs(path) else {
        return "unknown".into();
    };
    let t = st.filesystem_type();
    let known = [
        (statfs::TMPFS_MAGIC, "tmpfs"),
        (statfs::EXT4_SUPER_MAGIC, "ext4"),
        (statfs::BTRFS_SUPER_MAGIC, "btrfs"),
        (statfs::XFS_SUPER_MAGIC, "xfs"),
        (statfs::OVERLAYFS_SUPER_MAGIC, "overlayfs"),
        (statfs::NFS_SUPER_MAGIC, "nfs"),
        (statfs::FUSE_SUPER_MAGIC, "fuse"),
    ];
    let name = known
        .iter()
        .find(|(m, _)| *m == t)
        .map(|(_, n)| (*n).to_string())
        .unwrap_or_else(|| format!("{:#x}", t.0));
    if name == "ext4" && ext4_journal(path) == Some(false) {
        // Without a journal ext4 makes each new inode skip the recently deleted ones,
        // a cost of every grant under contention (docs/notes/contention.md §27).
        return "ext4, no journal".into();
    }
    name
}

/// Whether the ext4 filesystem holding `path` has a journal: its device's
/// `/sys/fs/ext4/<device>/journal_task` names the journal's thread, or says `<none>`.
/// `None` when that cannot be found out.
fn ext4_journal(path: &Path) -> Option<bool> {
    let path = path.canonicalize().ok()?;
    let mountinfo = std::fs::read_to_string("/proc/self/mountinfo").ok()?;
    // The mount whose mount point is the longest prefix of `path`, and its source.
    let (_, source) = mountinfo
        .lines()
        .filter_map(|l| {
            let (left, right) = l.split_once(" - ")?;
            let point = left.split(' ').nth(4)?;
            let mut right = right.split(' ');
            (right.next()? == "ext4").then_some(())?;
            Some((point, right.next()?))
        })
        .filter(|(point, _)| path.starts_with(point))
        .max_by_key(|(point, _)| point.len())?;
    let device = Path::new(source).file_name()?.to_str()?;
    let task = std::fs::read_to_string(format!("/sys/fs/ext4/{device}/journal_task")).ok()?;
    Some(task.trim() != "<none>")
}

/// `CLOCK_MONOTONIC` in nanoseconds: comparable between processes of this host.
pub fn mono_ns() -> u64 {
    use nix::time::{ClockId, clock_gettime};
    let ts = clock_gettime(ClockId::CLOCK_MONOTONIC).expect("CLOCK_MONOTONIC");
    ts.tv_sec() as u64 * 1_000_000_000 + ts.tv_nsec() as u64
}

/// CPU time of this whole process (all threads) in nanoseconds.
pub fn process_cpu_ns() -> u64 {
    use nix::time::{ClockId, clock_gettime};
    let ts = clock_gettime(ClockId::CLOCK_PROCESS_CPUTIME_ID).expect("CLOCK_PROCESS_CPUTIME_ID");
    ts.tv_sec() as u64 * 1_000_000_000 + ts.tv_nsec() as u64
}

/// utime + stime of a process from `/proc/<pid>/stat`, in nanoseconds (tick resolution).
pub fn proc_cpu_ns(pid: u32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let rest = &stat[stat.rfind(')')? + 1..];
    let mut f = rest.split_ascii_whitespace();
    // Fields 14 and 15 (utime, stime) are the 12th and 13th after the command name.
    let utime: u64 = f.nth(11)?.parse().ok()?;
    let stime: u64 = f.next()?.parse().ok()?;
    // SAFETY: sysconf only reads a configuration value.
    let hz = match unsafe { nix::libc::sysconf(nix::libc::_SC_CLK_TCK) } {
        n if n > 0 => n as u64,
        _ => 100,
    };
    Some((utime + stime) * 1_000_000_000 / hz)
}

/// xorshift64*: shuffles and jitter, no cryptography.
#[derive(Debug, Clone)]
pub struct Rng(u64);

impl Rng {
    pub fn new() -> Rng {
        let seed = mono_ns() ^ (u64::from(std::process::id()) << 32);
        Rng(seed | 1)
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    /// Uniform in `[lo, hi)`.
    pub fn range(&mut self, lo: u64, hi: u64) -> u64 {
        lo + self.next_u64() % (hi - lo).max(1)
    }

    pub fn shuffle<T>(&mut self, v: &mut [T]) {
        for i in (1..v.len()).rev() {
            let j = (self.next_u64() % (i as u64 + 1)) as usize;
            v.swap(i, j);
        }
    }

    /// Runs `f` on every cell once per round, for `rounds` rounds, the cells in a new
    /// random order every round, so that a drift in the machine's speed hits every cell
    /// alike.
    pub fn each_round_shuffled<C>(
        &mut self,
        cells: &mut [C],
        rounds: usize,
        mut f: impl FnMut(&mut C, &mut Rng),
    ) {
        let mut order: Vec<usize> = (0..cells.len()).collect();
        for _ in 0..rounds {
            self.shuffle(&mut order);
            for &i in &order {
                f(&mut cells[i], self);
            }
        }
    }
}

impl Default for Rng {
    fn default() -> Rng {
        Rng::new()
    }
}

/// The `q` quantile (0..=1) of unsorted values, by nearest rank.
pub fn quantile(values: &[f64], q: f64) -> f64 {
    if values.is_empty() {
        return f64::NAN;
    }
    let mut v = values.to_vec();
    v.sort_by(f64::total_cmp);
    let rank = (q * v.len() as f64).ceil() as usize;
    v[rank.clamp(1, v.len()) - 1]
}

pub fn median(values: &[f64]) -> f64 {
    if values.is_empty() {
        return f64::NAN;
    }
    let mut v = values.to_vec();
    v.sort_by(f64::total_cmp);
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

pub fn min(values: &[f64]) -> f64 {
    values.iter().copied().fold(f64::INFINITY, f64::min)
}

pub fn max(values: &[f64]) -> f64 {
    values.iter().copied().fold(f64::NEG_INFINITY, f64::max)
}

/// Three significant digits, thousands separated: `3.36`, `18.6`, `1,469`.
pub fn sig3(x: f64) -> String {
    if !x.is_finite() {
        return "–".into();
    }
    let a = x.abs();
    if a >= 1000.0 {
        let r = x.round() as i64;
        let digits = r.unsigned_abs().to_string();
        let mut out = String::new();
        for (i, c) in digits.chars().enumerate() {
            if i > 0 && (digits.len() - i).is_multiple_of(3) {
                out.push(',');
            }
            out.push(c);
        }
        if r < 0 { format!("-{out}") } else { out }
    } else if a >= 100.0 {
        format!("{x:.0}")
    } else if a >= 10.0 {
        format!("{x:.1}")
    } else if a >= 1.0 {
        format!("{x:.2}")
    } else {
        format!("{x:.3}")
    }
}

/// A duration given in nanoseconds, with a unit that keeps 3 significant digits.
pub fn dur(ns: f64) -> String {
    if !ns.is_finite() {
        return "–".into();
    }
    if ns >= 1e9 {
        format!("{} s", sig3(ns / 1e9))
    } else if ns >= 1e6 {
        format!("{} ms", sig3(ns / 1e6))
    } else if ns >= 1e3 {
        format!("{} µs", sig3(ns / 1e3))
    } else {
        format!("{} ns", sig3(ns))
    }
}

/// `median [min–max]` of values, each shown by `f`.
pub fn spread(values: &[f64], f: impl Fn(f64) -> String) -> String {
    if values.len() == 1 {
        return f(values[0]);
    }
    format!(
        "{} [{}–{}]",
        f(median(values)),
        f(min(values)),
        f(max(values))
    )
}

/// A ratio as `1.23×`.
pub fn times(x: f64) -> String {
    format!("{}×", sig3(x))
}

/// A markdown table.
#[derive(Debug, Default)]
pub struct Table {
    head: Vec<String>,
    rows: Vec<Vec<String>>,
}

impl Table {
    pub fn new(head: &[&str]) -> Table {
        Table {
            head: head.iter().map(|s| (*s).to_string()).collect(),
            rows: Vec::new(),
        }
    }

    pub fn row(&mut self, cells: Vec<String>) {
        self.rows.push(cells);
    }

    pub fn render(&self) -> String {
        let mut s = String::new();
        let _ = writeln!(s, "| {} |", self.head.join(" | "));
        let _ = writeln!(
            s,
            "|{}",
            self.head.iter().map(|_| " --- |").collect::<String>()
        );
        for r in &self.rows {
            let _ = writeln!(s, "| {} |", r.join(" | "));
        }
        s
    }

    pub fn print(&self) {
        println!("{}", self.render());
    }
}

/// The verdict of one target, for the closing table.
#[derive(Debug)]
pub struct Target {
    pub what: String,
    pub target: String,
    pub measured: String,
    pub met: Option<bool>,
}

pub fn print_targets(targets: &[Target]) {
    let mut t = Table::new(&["target (tmpfs, one run)", "wanted", "measured", "verdict"]);
    for x in targets {
        t.row(vec![
            x.what.clone(),
            x.target.clone(),
            x.measured.clone(),
            match x.met {
                Some(true) => "met".into(),
                Some(false) => "**NOT met**".into(),
                None => "not measured".into(),
            },
        ]);
    }
    t.print();
}

/// The machine, for the header of every report.
pub fn machine() -> String {
    let cpu = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split(':').nth(1))
                .map(|m| m.trim().to_string())
        })
        .unwrap_or_else(|| "unknown".into());
    let nproc = std::thread::available_parallelism().map_or(0, |n| n.get());
    let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease")
        .map(|s| s.trim().to_string())
        .unwrap_or_default();
    format!(
        "nproc {nproc}, CPU {cpu}, kernel {kernel}, load average {}",
        loadavg()
    )
}

/// The 1/5/15-minute load averages, as in `uptime`.
pub fn loadavg() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" / "))
        .unwrap_or_else(|_| "unknown".into())
}

/// Duration in ns, as f64.
pub fn ns(d: Duration) -> f64 {
    d.as_secs_f64() * 1e9
}
