//! Micro benchmarks of one process, no contention (BENCHMARKS.md, tables 1, 2 and 10).
//!
//! First divan runs every case (`uncontended::*`, `many_files::*`), each next to std's
//! `File::lock`/`File::lock_shared` and to the raw file-operation floor. Then a ratio
//! pass runs all cases again in interleaved rounds (a fresh shuffle each round, so noise
//! hits every case alike), takes each ratio inside a round, and prints the medians as
//! markdown tables with the targets of issue #5. Last, threads of this process read
//! one directory at once, with reads sharing one reader's file and without (table 10).
//!
//! `RWDIR_BENCH_QUICK=1` makes a short smoke run. `RWDIR_BENCH_SKIP_DIVAN=1` runs only
//! the ratio pass and the threads; `RWDIR_BENCH_ONLY_THREADS=1` only the threads.

#![allow(clippy::disallowed_methods)]

mod common;

use std::collections::HashMap;
use std::fs::{self, File, OpenOptions};
use std::hint::black_box;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::{Loc, Rng, Table, Target};
use divan::Bencher;
use rwdir::DirLock;

/// One measured operation: an acquire+release pair, or the raw floor.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Op {
    /// `DirLock::read` + release.
    Read,
    /// `DirLock::write` + release.
    Write,
    /// `DirLock::write` + `WriteGuard::token` + release: a writer that uses fencing.
    WriteToken,
    /// `DirLock::try_read` + release.
    TryRead,
    /// `DirLock::try_write` + release.
    TryWrite,
    /// std: open + `File::lock_shared` + unlock + close.
    StdShared,
    /// std: open + `File::lock` + unlock + close.
    StdExclusive,
    /// The operations no lock-file design can avoid: create a file exclusively, write
    /// ~200 bytes (owner record) into it, list the directory, unlink the file.
    Raw,
}

impl Op {
    fn label(self) -> &'static str {
        match self {
            Op::Read => "rwdir read",
            Op::Write => "rwdir write",
            Op::WriteToken => "rwdir write + token()",
            Op::TryRead => "rwdir try_read",
            Op::TryWrite => "rwdir try_write",
            Op::StdShared => "std lock_shared",
            Op::StdExclusive => "std lock",
            Op::Raw => "raw floor (create+write+list+unlink)",
        }
    }
}

/// The size of the record the raw floor writes (an rwdir holder record is ~250 bytes).
const RECORD: usize = 200;

/// Makes the operation `op` on the lock directory `dir`.
fn make(op: Op, dir: &Path) -> Box<dyn FnMut()> {
    match op {
        Op::Read | Op::Write | Op::WriteToken | Op::TryRead | Op::TryWrite => {
            let lock = DirLock::new(dir).expect("DirLock::new");
            match op {
                Op::Read => Box::new(move || lock.read().expect("read").release().expect("rel")),
                Op::Write => Box::new(move || lock.write().expect("write").release().expect("rel")),
                Op::WriteToken => Box::new(move || {
                    let w = lock.write().expect("write");
                    black_box(w.token().expect("token"));
                    w.release().expect("rel");
                }),
                Op::TryRead => {
                    Box::new(move || lock.try_read().expect("try_read").release().expect("rel"))
                }
                _ => Box::new(move || lock.try_write().expect("try_write").release().expect("rel")),
            }
        }
        Op::StdShared | Op::StdExclusive => {
            let path = dir.join("flock-file");
            File::create(&path).expect("create flock file");
            let shared = op == Op::StdShared;
            Box::new(move || {
                let f = File::open(&path).expect("open");
                if shared {
                    f.lock_shared().expect("lock_shared");
                } else {
                    f.lock().expect("lock");
                }
                f.unlock().expect("unlock");
                drop(f);
            })
        }
        Op::Raw => {
            let dir = dir.to_path_buf();
            let path = dir.join(".raw-lock");
            let record = [b'x'; RECORD];
            Box::new(move || {
                let mut f = OpenOptions::new()
                    .write(true)
                    .create_new(true)
                    .open(&path)
                    .expect("create");
                f.write_all(&record).expect("write");
                drop(f);
                let n = fs::read_dir(&dir).expect("list").count();
                black_box(n);
                fs::remove_file(&path).expect("unlink");
            })
        }
    }
}

/// Directories holding `n` unrelated files, made once per run (100,000 files take a
/// while on a disk), removed at the end of `main`.
type BigDirs = HashMap<(Loc, usize), Arc<tempfile::TempDir>>;

static BIG_DIRS: Mutex<Option<BigDirs>> = Mutex::new(None);

/// A directory of `loc` with `n` unrelated files in it (hard links to a few inodes:
/// the directory's size is what matters, and links are much cheaper to make than
/// inodes on ext4). Shared by the cases that ask for the same `(loc, n)`; the lock
/// cases each keep their state in their own state directory under it.
fn dir_with_files(loc: Loc, n: usize) -> Arc<tempfile::TempDir> {
    let mut map = BIG_DIRS.lock().expect("BIG_DIRS");
    let map = map.get_or_insert_with(HashMap::new);
    if let Some(d) = map.get(&(loc, n)) {
        return Arc::clone(d);
    }
    let d = loc.fresh_dir();
    let mut base = PathBuf::new();
    for i in 0..n {
        // ext4 allows 65,000 links to one inode.
        if i % 50_000 == 0 {
            base = d.path().join(format!("unrelated-base-{i}"));
            File::create(&base).expect("create base file");
        } else {
            fs::hard_link(&base, d.path().join(format!("unrelated-{i:06}"))).expect("link");
        }
    }
    let d = Arc::new(d);
    map.insert((loc, n), Arc::clone(&d));
    d
}

/// A case in the directory of `(loc, n)`. The lock cases keep their state in
/// `DIR/.rwdir`, as a user's would; the cases that share a directory take turns on the
/// same lock, uncontended because they never run at the same time.
fn make_in_big(op: Op, loc: Loc, n: usize) -> (Arc<tempfile::TempDir>, Box<dyn FnMut()>) {
    let d = dir_with_files(loc, n);
    let f = make(op, d.path());
    (d, f)
}

// ---------------------------------------------------------------------------------
// divan cases

const LOCS: [Loc; 2] = Loc::ALL;

fn run(b: Bencher<'_, '_>, mut f: Box<dyn FnMut()>) {
    // A few rounds first: the state directory, the inotify watcher and the heartbeat
    // thread are made on first use, not per acquisition.
    for _ in 0..10 {
        f();
    }
    b.bench_local(f);
}

/// Uncontended acquire+release in a fresh directory, next to std's flock and the raw
/// floor.
mod uncontended {
    use super::*;

    #[divan::bench(args = LOCS)]
    fn rwdir_read(b: Bencher<'_, '_>, loc: Loc) {
        let d = loc.fresh_dir();
        run(b, make(Op::Read, d.path()));
    }

    #[divan::bench(args = LOCS)]
    fn rwdir_write(b: Bencher<'_, '_>, loc: Loc) {
        let d = loc.fresh_dir();
        run(b, make(Op::Write, d.path()));
    }

    #[divan::bench(args = LOCS)]
    fn rwdir_write_token(b: Bencher<'_, '_>, loc: Loc) {
        let d = loc.fresh_dir();
        run(b, make(Op::WriteToken, d.path()));
    }

    #[divan::bench(args = LOCS)]
    fn rwdir_try_read(b: Bencher<'_, '_>, loc: Loc) {
        let d = loc.fresh_dir();
        run(b, make(Op::TryRead, d.path()));
    }

    #[divan::bench(args = LOCS)]
    fn rwdir_try_write(b: Bencher<'_, '_>, loc: Loc) {
        let d = loc.fresh_dir();
        run(b, make(Op::TryWrite, d.path()));
    }

    #[divan::bench(args = LOCS)]
    fn std_lock_shared(b: Bencher<'_, '_>, loc: Loc) {
        let d = loc.fresh_dir();
        run(b, make(Op::StdShared, d.path()));
    }

    #[divan::bench(args = LOCS)]
    fn std_lock(b: Bencher<'_, '_>, loc: Loc) {
        let d = loc.fresh_dir();
        run(b, make(Op::StdExclusive, d.path()));
    }

    #[divan::bench(args = LOCS)]
    fn raw_floor(b: Bencher<'_, '_>, loc: Loc) {
        let d = loc.fresh_dir();
        run(b, make(Op::Raw, d.path()));
    }
}

/// Acquire+release with 0, 1,000 and 100,000 unrelated files in DIR.
mod many_files {
    use super::*;

    #[divan::bench(consts = [0, 1_000, 100_000], args = LOCS)]
    fn rwdir_read<const N: usize>(b: Bencher<'_, '_>, loc: Loc) {
        let (_d, f) = make_in_big(Op::Read, loc, N);
        run(b, f);
    }

    #[divan::bench(consts = [0, 1_000, 100_000], args = LOCS)]
    fn rwdir_write<const N: usize>(b: Bencher<'_, '_>, loc: Loc) {
        let (_d, f) = make_in_big(Op::Write, loc, N);
        run(b, f);
    }

    #[divan::bench(consts = [0, 1_000, 100_000], args = LOCS)]
    fn std_lock<const N: usize>(b: Bencher<'_, '_>, loc: Loc) {
        let (_d, f) = make_in_big(Op::StdExclusive, loc, N);
        run(b, f);
    }
}

// ---------------------------------------------------------------------------------
// The ratio pass

/// Unrelated-file counts of the many-files cases.
const FILE_COUNTS: [usize; 3] = [0, 1_000, 100_000];

struct Slot {
    loc: Loc,
    op: Op,
    /// `None`: a fresh directory of its own; `Some(n)`: the shared one with `n` files.
    files: Option<usize>,
    _dir: DirKeep,
    f: Box<dyn FnMut()>,
    /// ns per operation, one value per round.
    per_round: Vec<f64>,
}

#[allow(dead_code)]
enum DirKeep {
    Own(tempfile::TempDir),
    Shared(Arc<tempfile::TempDir>),
}

fn slots(locs: &[Loc]) -> Vec<Slot> {
    let mut v = Vec::new();
    for &loc in locs {
        for op in [
            Op::Raw,
            Op::StdShared,
            Op::StdExclusive,
            Op::Read,
            Op::Write,
            Op::WriteToken,
            Op::TryRead,
            Op::TryWrite,
        ] {
            let d = loc.fresh_dir();
            let f = make(op, d.path());
            v.push(Slot {
                loc,
                op,
                files: None,
                _dir: DirKeep::Own(d),
                f,
                per_round: Vec::new(),
            });
        }
        for n in FILE_COUNTS {
            for op in [Op::Read, Op::Write, Op::StdExclusive] {
                let (d, f) = make_in_big(op, loc, n);
                v.push(Slot {
                    loc,
                    op,
                    files: Some(n),
                    _dir: DirKeep::Shared(d),
                    f,
                    per_round: Vec::new(),
                });
            }
        }
    }
    v
}

/// Runs `f` for about `window` and returns ns per call.
fn measure(f: &mut dyn FnMut(), window: Duration) -> f64 {
    let start = Instant::now();
    let mut n = 0u64;
    loop {
        for _ in 0..8 {
            f();
        }
        n += 8;
        let e = start.elapsed();
        if e >= window {
            return common::ns(e) / n as f64;
        }
    }
}

fn find(slots: &[Slot], loc: Loc, op: Op, files: Option<usize>) -> &Slot {
    slots
        .iter()
        .find(|s| s.loc == loc && s.op == op && s.files == files)
        .expect("slot")
}

/// Per-round ratios `a / b`.
fn ratios(a: &Slot, b: &Slot) -> Vec<f64> {
    a.per_round
        .iter()
        .zip(&b.per_round)
        .map(|(x, y)| x / y)
        .collect()
}

fn ratio_pass() -> Vec<Target> {
    let quick = common::quick();
    let (rounds, window) = if quick {
        (3, Duration::from_millis(10))
    } else {
        (25, Duration::from_millis(25))
    };
    let locs = Loc::available();
    println!("## Ratio pass: {rounds} interleaved rounds × {window:?} per case\n");
    println!("Machine: {}.", common::machine());
    for l in &locs {
        println!("Location {}.", l.describe());
    }
    println!();
    let mut slots = slots(&locs);
    for s in &mut slots {
        for _ in 0..50 {
            (s.f)();
        }
    }
    let mut rng = Rng::new();
    rng.each_round_shuffled(&mut slots, rounds, |s, _| {
        let v = measure(&mut *s.f, window);
        s.per_round.push(v);
    });
    println!(
        "Load average at the end of the ratio pass: {}.\n",
        common::loadavg()
    );

    let us = |x: f64| common::sig3(x / 1e3);
    let mut targets = Vec::new();
    for &loc in &locs {
        println!(
            "### Uncontended acquire+release at `{loc}` (µs per pair, median [min–max] over rounds; × = median of per-round ratios)\n"
        );
        let raw = find(&slots, loc, Op::Raw, None);
        let shared = find(&slots, loc, Op::StdShared, None);
        let excl = find(&slots, loc, Op::StdExclusive, None);
        let mut t = Table::new(&["case", "µs/op", "kops/s", "× raw floor", "× std flock"]);
        for op in [
            Op::Raw,
            Op::StdShared,
            Op::StdExclusive,
            Op::Read,
            Op::Write,
            Op::WriteToken,
            Op::TryRead,
            Op::TryWrite,
        ] {
            let s = find(&slots, loc, op, None);
            let flock = match op {
                Op::Read | Op::TryRead | Op::StdShared => Some(shared),
                Op::Write | Op::WriteToken | Op::TryWrite | Op::StdExclusive => Some(excl),
                Op::Raw => None,
            };
            t.row(vec![
                format!("`{}`", op.label()),
                common::spread(&s.per_round, us),
                common::sig3(1e6 / common::median(&s.per_round)),
                common::times(common::median(&ratios(s, raw))),
                flock.map_or("–".into(), |f| {
                    common::times(common::median(&ratios(s, f)))
                }),
            ]);
        }
        t.print();
        if loc == Loc::Tmpfs {
            let r = common::median(&ratios(find(&slots, loc, Op::Read, None), raw));
            let w = common::median(&ratios(find(&slots, loc, Op::Write, None), raw));
            targets.push(Target {
                what: "read acquire+release / raw floor".into(),
                target: "≤ 1.5×".into(),
                measured: common::times(r),
                met: Some(r <= 1.5),
            });
            targets.push(Target {
                what: "write acquire+release / raw floor".into(),
                target: "≤ 4×".into(),
                measured: common::times(w),
                met: Some(w <= 4.0),
            });
        }
    }
    for &loc in &locs {
        println!("### Acquire+release with unrelated files in DIR, at `{loc}` (µs per pair)\n");
        let mut head = vec!["case".to_string()];
        head.extend(FILE_COUNTS.iter().map(|n| {
            format!(
                "{} files",
                if *n == 0 {
                    "0".to_string()
                } else {
                    common::sig3(*n as f64)
                }
            )
        }));
        head.push("× (100,000 / 0)".into());
        let head: Vec<&str> = head.iter().map(String::as_str).collect();
        let mut t = Table::new(&head);
        for op in [Op::Read, Op::Write, Op::StdExclusive] {
            let mut row = vec![format!("`{}`", op.label())];
            for n in FILE_COUNTS {
                row.push(common::spread(
                    &find(&slots, loc, op, Some(n)).per_round,
                    us,
                ));
            }
            let r = common::median(&ratios(
                find(&slots, loc, op, Some(100_000)),
                find(&slots, loc, op, Some(0)),
            ));
            row.push(common::times(r));
            t.row(row);
            if loc == Loc::Tmpfs && matches!(op, Op::Read | Op::Write) {
                targets.push(Target {
                    what: format!("{}: 100,000 unrelated files / empty DIR", op.label()),
                    target: "≤ 1.2×".into(),
                    measured: common::times(r),
                    met: Some(r <= 1.2),
                });
            }
        }
        t.print();
    }
    targets
}

/// How a thread takes its read lock in [`threads_pass`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ThreadRead {
    /// `DirLock::read` + release, reads of the process sharing one reader's file (V11).
    Shared,
    /// The same with `Builder::share_readers(false)`: a file per read.
    Apart,
    /// std: `File::lock_shared` + unlock on a descriptor of the thread's own.
    Flock,
}

/// `threads` threads of this process, each with a lock handle of its own, read in a loop
/// (acquire, release) for `window`: grants per second, all threads together.
fn threads_reading(dir: &Path, how: ThreadRead, threads: usize, window: Duration) -> f64 {
    let barrier = std::sync::Barrier::new(threads);
    let counts: Vec<u64> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..threads)
            .map(|_| {
                let barrier = &barrier;
                s.spawn(move || {
                    let mut op: Box<dyn FnMut()> = match how {
                        ThreadRead::Flock => make(Op::StdShared, dir),
                        _ => {
                            let lock = DirLock::builder(dir)
                                .share_readers(how == ThreadRead::Shared)
                                .build()
                                .expect("DirLock");
                            Box::new(move || lock.read().expect("read").release().expect("rel"))
                        }
                    };
                    barrier.wait();
                    let start = Instant::now();
                    let mut n = 0u64;
                    while start.elapsed() < window {
                        op();
                        n += 1;
                    }
                    n
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("reader thread"))
            .collect()
    });
    counts.iter().sum::<u64>() as f64 / window.as_secs_f64()
}

/// Threads of one process reading one directory at once (BENCHMARKS.md, table 10): rwdir
/// with reads sharing one reader's file (the default), with a file per read, and std
/// flock, in interleaved rounds.
fn threads_pass() {
    let quick = common::quick();
    let (rounds, window, counts): (usize, _, &[usize]) = if quick {
        (2, Duration::from_millis(50), &[1, 4])
    } else {
        (5, Duration::from_millis(300), &[1, 2, 4, 8, 16])
    };
    println!(
        "## Threads of one process reading at once: {rounds} interleaved rounds × {window:?} per case\n"
    );
    for loc in Loc::available() {
        println!(
            "### Read grants per second, all threads together, at `{loc}` (median [min–max] over rounds)\n"
        );
        let dir = loc.fresh_dir();
        let mut t = Table::new(&[
            "threads",
            "rwdir, shared file",
            "rwdir, a file per read",
            "× (shared / a file per read)",
            "std lock_shared",
        ]);
        for &n in counts {
            let mut rates: HashMap<&str, Vec<f64>> = HashMap::new();
            for _ in 0..rounds {
                for (name, how) in [
                    ("shared", ThreadRead::Shared),
                    ("apart", ThreadRead::Apart),
                    ("flock", ThreadRead::Flock),
                ] {
                    let r = threads_reading(dir.path(), how, n, window);
                    rates.entry(name).or_default().push(r);
                }
            }
            let per_round: Vec<f64> = rates["shared"]
                .iter()
                .zip(&rates["apart"])
                .map(|(a, b)| a / b)
                .collect();
            t.row(vec![
                n.to_string(),
                common::spread(&rates["shared"], common::sig3),
                common::spread(&rates["apart"], common::sig3),
                common::times(common::median(&per_round)),
                common::spread(&rates["flock"], common::sig3),
            ]);
        }
        t.print();
    }
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let listing = args.iter().any(|a| a == "--list" || a == "--test");
    if std::env::var_os("RWDIR_BENCH_ONLY_THREADS").is_some() {
        if !listing {
            threads_pass();
        }
        return;
    }
    if std::env::var_os("RWDIR_BENCH_SKIP_DIVAN").is_none() {
        let mut d = divan::Divan::from_args();
        if common::quick() {
            d = d
                .sample_count(10)
                .sample_size(4)
                .max_time(Duration::from_millis(100));
        }
        d.main();
    }
    if !listing {
        let targets = ratio_pass();
        threads_pass();
        println!("### Targets of issue #5 measured by this binary\n");
        common::print_targets(&targets);
    }
    // Static directories are never dropped by themselves.
    BIG_DIRS.lock().expect("BIG_DIRS").take();
}
