//! The backup-restore recipes of `examples/recipes/` run for real: `restore.sh`,
//! `reader.sh`, `reader.py`, the `backup.cron` job line, the systemd unit, and a short
//! run of `examples/backup_restore.rs` with and without the lock.
//!
//! The scripts find `rwdir` on PATH: each test puts the directory of the `rwdir` built
//! for this test run first on PATH. Tests that need a tool this machine lacks
//! (python3, systemd-analyze) say so on stderr and check what they can without it.

// Tests write data files directly; only the library touches lock files.
#![allow(clippy::disallowed_methods)]

use std::ffi::OsString;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::OnceLock;

use rwdir::DirLock;

const RECIPES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/examples/recipes");

#[path = "cli/bin.rs"]
mod bin;
use bin::rwdir_bin;

/// PATH with the directory of our `rwdir` first.
fn path_with_rwdir() -> OsString {
    let bin = Path::new(rwdir_bin());
    let mut dirs = vec![bin.parent().expect("binary has a directory").to_path_buf()];
    if let Some(old) = std::env::var_os("PATH") {
        dirs.extend(std::env::split_paths(&old));
    }
    std::env::join_paths(dirs).expect("PATH entries contain no separator")
}

fn recipe(name: &str) -> PathBuf {
    Path::new(RECIPES).join(name)
}

/// Whether `tool` runs at all (`tool --version`).
fn have(tool: &str) -> bool {
    Command::new(tool)
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// A command with our PATH, and what to show when it does not do what we expect.
struct Run {
    cmd: Command,
    shown: String,
    dir: Option<PathBuf>,
}

impl Run {
    fn new(program: impl AsRef<std::ffi::OsStr>) -> Run {
        let mut cmd = Command::new(program.as_ref());
        cmd.env("PATH", path_with_rwdir()).stdin(Stdio::null());
        Run {
            cmd,
            shown: program.as_ref().to_string_lossy().into_owned(),
            dir: None,
        }
    }

    fn arg(mut self, a: impl AsRef<std::ffi::OsStr>) -> Run {
        self.shown.push(' ');
        self.shown.push_str(&a.as_ref().to_string_lossy());
        self.cmd.arg(a);
        self
    }

    fn env(mut self, k: &str, v: impl AsRef<std::ffi::OsStr>) -> Run {
        self.cmd.env(k, v);
        self
    }

    /// The directory whose listing a failure shows.
    fn showing(mut self, dir: &Path) -> Run {
        self.dir = Some(dir.to_path_buf());
        self
    }

    /// Runs it and checks its exit status; on a mismatch, panics showing the command,
    /// its output, and a listing of the directory.
    fn expect_code(mut self, want: i32) -> Output {
        let out = self
            .cmd
            .output()
            .unwrap_or_else(|e| panic!("cannot run `{}`: {e}", self.shown));
        if out.status.code() != Some(want) {
            let listing = self.dir.as_deref().map(listing).unwrap_or_default();
            panic!(
                "`{}`: expected exit {want}, got {}\n--- stdout\n{}--- stderr\n{}--- files\n{listing}",
                self.shown,
                out.status,
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr),
            );
        }
        out
    }
}

/// Every file under `dir` with its content, sorted (for comparing trees).
fn tree(dir: &Path) -> Vec<(String, Vec<u8>)> {
    fn walk(root: &Path, dir: &Path, out: &mut Vec<(String, Vec<u8>)>) {
        let mut entries: Vec<_> = fs::read_dir(dir)
            .unwrap_or_else(|e| panic!("cannot list `{}`: {e}", dir.display()))
            .map(|e| e.expect("directory entry").path())
            .collect();
        entries.sort();
        for p in entries {
            if p.is_dir() {
                walk(root, &p, out);
            } else {
                let rel = p.strip_prefix(root).expect("under root");
                let bytes = fs::read(&p).unwrap_or_else(|e| panic!("read `{}`: {e}", p.display()));
                out.push((rel.to_string_lossy().into_owned(), bytes));
            }
        }
    }
    let mut out = Vec::new();
    walk(dir, dir, &mut out);
    out
}

fn listing(dir: &Path) -> String {
    let mut s = String::new();
    fn walk(dir: &Path, depth: usize, s: &mut String) {
        let Ok(rd) = fs::read_dir(dir) else { return };
        let mut names: Vec<_> = rd.filter_map(Result::ok).map(|e| e.path()).collect();
        names.sort();
        for p in names {
            let name = p.file_name().unwrap_or_default().to_string_lossy();
            s.push_str(&format!("{}{name}\n", "  ".repeat(depth)));
            if p.is_dir() && depth < 3 {
                walk(&p, depth + 1, s);
            }
        }
    }
    walk(dir, 0, &mut s);
    s
}

fn write_files(dir: &Path, files: &[(&str, &str)]) {
    for (rel, content) in files {
        let p = dir.join(rel);
        fs::create_dir_all(p.parent().expect("has parent")).expect("create directories");
        fs::write(&p, content).unwrap_or_else(|e| panic!("write `{}`: {e}", p.display()));
    }
}

/// A locked directory with `data/` holding version 1, and a backup directory holding
/// version 2 (with one file fewer and one more, so a restore must delete).
struct Setup {
    _tmp: tempfile::TempDir,
    dir: PathBuf,
    backup: PathBuf,
}

fn setup() -> Setup {
    let tmp = tempfile::tempdir().expect("temporary directory");
    let dir = tmp.path().join("app");
    let backup = tmp.path().join("backup");
    write_files(
        &dir.join("data"),
        &[
            ("a.txt", "a v1\n"),
            ("sub/b.txt", "b v1\n"),
            ("only-in-v1.txt", "gone after restore\n"),
        ],
    );
    // Other sizes than v1: rsync skips a file whose size and mtime match (its quick
    // check), and files written within the same second may share an mtime.
    write_files(
        &backup,
        &[
            ("a.txt", "a v2, restored\n"),
            ("sub/b.txt", "b v2, restored\n"),
            ("sub/deeper/c.txt", "c v2\n"),
        ],
    );
    Setup {
        _tmp: tmp,
        dir,
        backup,
    }
}

fn assert_lock_free(dir: &Path) {
    let st = DirLock::new(dir)
        .and_then(|l| l.status())
        .unwrap_or_else(|e| panic!("status of `{}`: {e}", dir.display()));
    assert!(st.is_free(), "lock on `{}` not free: {st:?}", dir.display());
}

// ---------------------------------------------------------------------------------
// restore.sh

#[test]
fn restore_sh_copies_a_backup_directory_under_the_write_lock() {
    let s = setup();
    let out = Run::new("sh")
        .arg(recipe("restore.sh"))
        .arg(&s.backup)
        .arg(&s.dir)
        .showing(&s.dir)
        .expect_code(0);
    assert_eq!(tree(&s.dir.join("data")), tree(&s.backup));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("(token "), "no fencing token mentioned: {err}");
    assert_lock_free(&s.dir);
}

#[test]
fn restore_sh_with_cp_forced() {
    let s = setup();
    Run::new("sh")
        .arg(recipe("restore.sh"))
        .arg(&s.backup)
        .arg(&s.dir)
        .env("RESTORE_WITH", "cp")
        .showing(&s.dir)
        .expect_code(0);
    assert_eq!(tree(&s.dir.join("data")), tree(&s.backup));
}

#[test]
fn restore_sh_with_rsync_when_installed() {
    if !have("rsync") {
        eprintln!("note: rsync is not installed; restore.sh's rsync path is not run here");
        return;
    }
    let s = setup();
    Run::new("sh")
        .arg(recipe("restore.sh"))
        .arg(&s.backup)
        .arg(&s.dir)
        .env("RESTORE_WITH", "rsync")
        .showing(&s.dir)
        .expect_code(0);
    assert_eq!(tree(&s.dir.join("data")), tree(&s.backup));
}

#[test]
fn restore_sh_unpacks_a_tar_archive() {
    let s = setup();
    let archive = s.dir.parent().expect("tmp").join("backup.tar.gz");
    Run::new("tar")
        .arg("-czf")
        .arg(&archive)
        .arg("-C")
        .arg(&s.backup)
        .arg(".")
        .expect_code(0);
    Run::new("sh")
        .arg(recipe("restore.sh"))
        .arg(&archive)
        .arg(&s.dir)
        .showing(&s.dir)
        .expect_code(0);
    assert_eq!(tree(&s.dir.join("data")), tree(&s.backup));
}

#[test]
fn restore_sh_exits_75_and_changes_nothing_while_a_reader_holds_the_lock() {
    let s = setup();
    let before = tree(&s.dir.join("data"));
    let lock = DirLock::new(&s.dir).expect("lock");
    let reader = lock.read().expect("read lock");
    let out = Run::new("sh")
        .arg(recipe("restore.sh"))
        .arg("-t")
        .arg("0.2")
        .arg(&s.backup)
        .arg(&s.dir)
        .showing(&s.dir)
        .expect_code(75);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("nothing was changed"), "stderr: {err}");
    assert_eq!(tree(&s.dir.join("data")), before);
    reader.release().expect("release");
    assert_lock_free(&s.dir);
}

#[test]
fn restore_sh_rejects_a_missing_backup() {
    let s = setup();
    Run::new("sh")
        .arg(recipe("restore.sh"))
        .arg(s.dir.join("no-such-backup"))
        .arg(&s.dir)
        .expect_code(66);
}

// ---------------------------------------------------------------------------------
// reader.sh

#[test]
fn reader_sh_lists_every_file_under_the_read_lock() {
    let s = setup();
    let out = Run::new("sh")
        .arg(recipe("reader.sh"))
        .arg(&s.dir)
        .showing(&s.dir)
        .expect_code(0);
    let text = String::from_utf8_lossy(&out.stdout);
    let paths: Vec<&str> = text
        .lines()
        .map(|l| l.split_whitespace().nth(2).unwrap_or(""))
        .collect();
    assert_eq!(
        paths,
        ["./a.txt", "./only-in-v1.txt", "./sub/b.txt"],
        "stdout: {text}"
    );
    assert_lock_free(&s.dir);
}

#[test]
fn reader_sh_shares_the_lock_with_other_readers() {
    let s = setup();
    let lock = DirLock::new(&s.dir).expect("lock");
    let _other = lock.read().expect("read lock");
    Run::new("sh")
        .arg(recipe("reader.sh"))
        .arg("-t")
        .arg("5")
        .arg(&s.dir)
        .showing(&s.dir)
        .expect_code(0);
}

#[test]
fn reader_sh_exits_75_while_a_restore_holds_the_lock() {
    let s = setup();
    let lock = DirLock::new(&s.dir).expect("lock");
    let writer = lock.write().expect("write lock");
    let out = Run::new("sh")
        .arg(recipe("reader.sh"))
        .arg("-t")
        .arg("0.2")
        .arg(&s.dir)
        .showing(&s.dir)
        .expect_code(75);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("try again later"), "stderr: {err}");
    assert!(out.stdout.is_empty(), "read without the lock");
    writer.release().expect("release");
}

// ---------------------------------------------------------------------------------
// reader.py

fn python3() -> Option<&'static str> {
    if have("python3") {
        Some("python3")
    } else {
        eprintln!("note: python3 is not available; reader.py is not run here");
        None
    }
}

#[test]
fn reader_py_runs_its_function_under_the_read_lock() {
    let Some(py) = python3() else { return };
    let s = setup();
    let out = Run::new(py)
        .arg(recipe("reader.py"))
        .arg(&s.dir)
        .showing(&s.dir)
        .expect_code(0);
    let text = String::from_utf8_lossy(&out.stdout);
    // a.txt (5) + only-in-v1.txt (19) + sub/b.txt (5)
    assert!(text.contains(": 3 files, 29 bytes"), "stdout: {text}");
    assert_lock_free(&s.dir);
}

#[test]
fn reader_py_reports_busy_with_75() {
    let Some(py) = python3() else { return };
    let s = setup();
    let lock = DirLock::new(&s.dir).expect("lock");
    let writer = lock.write().expect("write lock");
    let out = Run::new(py)
        .arg(recipe("reader.py"))
        .arg("--timeout")
        .arg("0.2")
        .arg(&s.dir)
        .showing(&s.dir)
        .expect_code(75);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("busy"), "stderr: {err}");
    writer.release().expect("release");
}

// ---------------------------------------------------------------------------------
// backup.cron

/// The crontab's `NAME=value` lines and its one job's command, with cron's `\%`
/// unescaped (a bare `%` would be a newline, which the job must not contain).
fn cron_job() -> (Vec<(String, String)>, String) {
    let text = fs::read_to_string(recipe("backup.cron")).expect("read backup.cron");
    let mut env = Vec::new();
    let mut jobs = Vec::new();
    for line in text.lines().map(str::trim) {
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let first = line.split_whitespace().next().unwrap_or("");
        if let Some((k, v)) = line.split_once('=').filter(|_| first.contains('=')) {
            env.push((k.trim().to_string(), v.trim().to_string()));
            continue;
        }
        let fields: Vec<&str> = line.splitn(6, char::is_whitespace).collect();
        assert_eq!(fields.len(), 6, "not a cron job line: {line}");
        for f in &fields[..5] {
            assert!(
                f.chars().all(|c| c.is_ascii_digit() || "*/,-".contains(c)),
                "bad time field `{f}` in: {line}"
            );
        }
        let cmd = fields[5].trim_start();
        assert!(
            !cmd.replace("\\%", "").contains('%'),
            "unescaped % in a cron command: {cmd}"
        );
        jobs.push(cmd.replace("\\%", "%"));
    }
    assert_eq!(jobs.len(), 1, "expected one job in backup.cron");
    (env, jobs.remove(0))
}

#[test]
fn backup_cron_job_makes_an_archive_that_restore_sh_restores() {
    let (env, job) = cron_job();
    assert!(
        job.starts_with("rwdir read "),
        "the backup must take the read lock: {job}"
    );
    let names: Vec<&str> = env.iter().map(|(k, _)| k.as_str()).collect();
    for k in ["SHELL", "PATH", "APP_DIR", "BACKUP_DIR"] {
        assert!(names.contains(&k), "backup.cron sets no {k}");
    }

    let s = setup();
    let backups = s.dir.parent().expect("tmp").join("backups");
    fs::create_dir(&backups).expect("create backups directory");
    // Run the job as cron would, with our directories and our rwdir.
    let out = Run::new("sh")
        .arg("-c")
        .arg(&job)
        .env("APP_DIR", &s.dir)
        .env("BACKUP_DIR", &backups)
        .showing(&s.dir)
        .expect_code(0);
    assert!(out.stderr.is_empty(), "a quiet job printed: {out:?}");
    let archives: Vec<PathBuf> = fs::read_dir(&backups)
        .expect("list backups")
        .map(|e| e.expect("entry").path())
        .collect();
    assert_eq!(archives.len(), 1, "backups: {archives:?}");
    let name = archives[0]
        .file_name()
        .unwrap_or_default()
        .to_string_lossy();
    assert!(
        name.starts_with("app-20") && name.ends_with(".tar.gz"),
        "archive named {name}"
    );
    assert_lock_free(&s.dir);

    // Restore it elsewhere: the same files come back.
    let other = s.dir.parent().expect("tmp").join("other");
    fs::create_dir(&other).expect("create directory");
    Run::new("sh")
        .arg(recipe("restore.sh"))
        .arg(&archives[0])
        .arg(&other)
        .showing(&other)
        .expect_code(0);
    assert_eq!(tree(&other.join("data")), tree(&s.dir.join("data")));
}

#[test]
fn backup_cron_job_does_not_read_while_a_restore_holds_the_lock() {
    let (_, job) = cron_job();
    // The same job, giving up after 0.2 s instead of an hour.
    let quick = job.replacen("--timeout 3600", "--timeout 0.2", 1);
    assert_ne!(quick, job, "the job has no `--timeout 3600`: {job}");
    let s = setup();
    let backups = s.dir.parent().expect("tmp").join("backups");
    fs::create_dir(&backups).expect("create backups directory");
    let lock = DirLock::new(&s.dir).expect("lock");
    let writer = lock.write().expect("write lock");
    let out = Run::new("sh")
        .arg("-c")
        .arg(&quick)
        .env("APP_DIR", &s.dir)
        .env("BACKUP_DIR", &backups)
        .showing(&s.dir)
        .expect_code(75);
    assert!(
        !out.stderr.is_empty(),
        "busy must be reported even with --quiet"
    );
    assert_eq!(
        listing(&backups),
        "",
        "the job wrote while a writer held the lock"
    );
    writer.release().expect("release");
}

// ---------------------------------------------------------------------------------
// rwdir-cleanup.service

/// `Key=value` lines of a unit file, by section.
fn unit_entries(text: &str) -> Vec<(String, String, String)> {
    let mut section = String::new();
    let mut out = Vec::new();
    for (n, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') || line.starts_with(';') {
            continue;
        }
        if let Some(name) = line.strip_prefix('[').and_then(|l| l.strip_suffix(']')) {
            section = name.to_string();
            continue;
        }
        let (k, v) = line
            .split_once('=')
            .unwrap_or_else(|| panic!("line {}: not `Key=value`: {line}", n + 1));
        assert!(!section.is_empty(), "line {}: outside a section", n + 1);
        out.push((section.clone(), k.trim().to_string(), v.trim().to_string()));
    }
    out
}

#[test]
fn cleanup_unit_parses_and_its_commands_run() {
    let text = fs::read_to_string(recipe("rwdir-cleanup.service")).expect("read unit");
    let entries = unit_entries(&text);
    let get = |sec: &str, key: &str| {
        entries
            .iter()
            .find(|(s, k, _)| s == sec && k == key)
            .map(|(_, _, v)| v.clone())
            .unwrap_or_else(|| panic!("no [{sec}] {key}="))
    };
    let pre = get("Service", "ExecStartPre");
    assert!(pre.contains("rwdir cleanup "), "ExecStartPre: {pre}");
    assert!(
        !pre.contains("--all"),
        "the boot job must not use --all: {pre}"
    );
    let start = get("Service", "ExecStart");
    assert_eq!(get("Service", "Type"), "oneshot");

    // Run both commands as systemd would, on a directory with a reader's lock file.
    let s = setup();
    let lock = DirLock::new(&s.dir).expect("lock");
    let reader = lock.read().expect("read lock");
    let bin = Path::new(rwdir_bin());
    let here = |cmd: &str| {
        cmd.replace("/usr/local/bin/rwdir", &bin.to_string_lossy())
            .replace("/srv/app", &s.dir.to_string_lossy())
    };
    for cmd in [here(&pre), here(&start)] {
        let mut words = cmd.split_whitespace();
        let mut run = Run::new(words.next().expect("a command")).showing(&s.dir);
        for w in words {
            run = run.arg(w);
        }
        run.expect_code(0);
    }
    // Cleanup never removes a live holder's file.
    assert_eq!(lock.status().expect("status").readers.len(), 1);
    reader
        .release()
        .expect("release: our file must still be there");

    if !have("systemd-analyze") {
        eprintln!("note: systemd-analyze is not available; the unit was only parsed");
        return;
    }
    let dir = tempfile::tempdir().expect("temporary directory");
    let unit = dir.path().join("rwdir-cleanup.service");
    fs::write(&unit, here(&text)).expect("write unit copy");
    let out = Run::new("systemd-analyze")
        .arg("verify")
        .arg("--man=no")
        .arg(&unit)
        .expect_code(0);
    // It exits 0 on some findings (an unknown key is only "ignored"): want none.
    assert!(
        out.stderr.is_empty(),
        "systemd-analyze verify: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

// ---------------------------------------------------------------------------------
// examples/backup_restore.rs

/// Builds the example with the same cargo, target directory and profile as this test
/// run, and returns its path.
fn example_bin() -> &'static Path {
    static BIN: OnceLock<PathBuf> = OnceLock::new();
    BIN.get_or_init(|| {
        let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
        let mut cmd = Command::new(cargo);
        cmd.args(["build", "--quiet", "--example", "backup_restore"])
            .args(["--message-format", "json-render-diagnostics"])
            .arg("--manifest-path")
            .arg(concat!(env!("CARGO_MANIFEST_DIR"), "/Cargo.toml"))
            .stderr(Stdio::inherit());
        if !cfg!(debug_assertions) {
            cmd.arg("--release");
        }
        let out = cmd
            .output()
            .expect("run cargo build --example backup_restore");
        assert!(
            out.status.success(),
            "cargo build --example backup_restore failed"
        );
        // One JSON object per line; the artifact line of our example names its path.
        let text = String::from_utf8_lossy(&out.stdout);
        let exe = text
            .lines()
            .filter(|l| l.contains("\"reason\":\"compiler-artifact\""))
            .filter(|l| l.contains("\"name\":\"backup_restore\""))
            .find_map(|l| {
                let rest = &l[l.find("\"executable\":\"")? + "\"executable\":\"".len()..];
                Some(PathBuf::from(&rest[..rest.find('"')?]))
            })
            .expect("cargo reported no executable for the example");
        assert!(exe.exists(), "`{}` missing", exe.display());
        exe
    })
}

/// Runs the scenario for `seconds`, returns (exit code, stdout, torn count).
fn scenario(seconds: &str, extra: &[&str]) -> (Option<i32>, String, u64) {
    let out = Command::new(example_bin())
        .args(["--seconds", seconds])
        .args(extra)
        .stdin(Stdio::null())
        .output()
        .expect("run backup_restore");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let torn = stdout
        .lines()
        .find_map(|l| l.strip_prefix("result: "))
        .and_then(|l| l.split("(torn reads ").nth(1))
        .and_then(|n| n.trim_end_matches(')').parse().ok())
        .unwrap_or_else(|| {
            panic!(
                "no result line\n--- stdout\n{stdout}--- stderr\n{}",
                String::from_utf8_lossy(&out.stderr)
            )
        });
    (out.status.code(), stdout, torn)
}

#[test]
fn backup_restore_scenario_with_the_lock_sees_no_torn_read() {
    let (code, stdout, torn) = scenario("3", &[]);
    assert_eq!((code, torn), (Some(0), 0), "stdout:\n{stdout}");
    assert!(
        stdout.contains("killed holding its read lock"),
        "stdout:\n{stdout}"
    );
    assert!(stdout.contains("lock at the end free"), "stdout:\n{stdout}");
}

#[test]
fn backup_restore_scenario_without_the_lock_sees_torn_reads() {
    let (code, stdout, torn) = scenario("3", &["--no-lock"]);
    assert_eq!(code, Some(1), "stdout:\n{stdout}");
    assert!(torn > 0, "stdout:\n{stdout}");
}
