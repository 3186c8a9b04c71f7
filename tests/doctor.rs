//! `rwdir doctor` (#17) and filesystem refusal, run as a real binary: safe on tmpfs and
//! on the local disk, unsafe on a FUSE mount that does not honour O_EXCL (the tiny
//! filesystem of `tests/doctor/lyingfs.rs`, mounted in this process), object-store
//! mounts refused and let through by `--allow-unsafe-filesystem`, bad input, and
//! nothing left behind, also after SIGTERM.
//!
//! A custom harness (libtest-mimic): the FUSE tests are reported as ignored, with the
//! reason, where no FUSE mount can be made, instead of passing without running.

#![allow(clippy::disallowed_methods)]

#[path = "cli/bin.rs"]
mod bin;
#[path = "doctor/lyingfs.rs"]
mod lyingfs;

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use libtest_mimic::{Arguments, Failed, Trial};

fn main() {
    let args = Arguments::from_args();
    let fuse = fuse_unavailable();
    let fuse_test =
        |name: &'static str, f: fn() -> Result<(), Failed>| lyingfs::fuse_trial(name, f, &fuse);
    let trials = vec![
        Trial::test("doctor_is_safe_on_tmpfs", doctor_is_safe_on_tmpfs),
        Trial::test(
            "doctor_is_safe_on_the_local_disk",
            doctor_is_safe_on_the_local_disk,
        ),
        Trial::test(
            "doctor_with_a_peer_dir_races_and_measures",
            doctor_with_a_peer_dir_races_and_measures,
        ),
        Trial::test(
            "doctor_json_has_the_documented_shape",
            doctor_json_has_the_documented_shape,
        ),
        Trial::test(
            "doctor_bad_input_is_one_line_and_exit_2",
            doctor_bad_input_is_one_line_and_exit_2,
        ),
        Trial::test(
            "doctor_reports_stale_lock_files_without_touching_them",
            doctor_reports_stale_lock_files_without_touching_them,
        ),
        Trial::test(
            "doctor_killed_by_sigterm_leaves_nothing_behind",
            doctor_killed_by_sigterm_leaves_nothing_behind,
        ),
        fuse_test(
            "doctor_says_unsafe_on_a_mount_that_lies_about_o_excl",
            doctor_says_unsafe_on_a_mount_that_lies_about_o_excl,
        ),
        fuse_test(
            "doctor_is_safe_on_an_honest_fuse_mount",
            doctor_is_safe_on_an_honest_fuse_mount,
        ),
        fuse_test(
            "an_object_store_mount_is_refused_unless_allowed",
            an_object_store_mount_is_refused_unless_allowed,
        ),
    ];
    libtest_mimic::run(&args, trials).exit();
}

/// Why no FUSE filesystem can be mounted here, if it cannot (the tests then report as
/// ignored with this reason).
fn fuse_unavailable() -> Option<String> {
    lyingfs::unavailable()
}

fn rwdir(args: &[&str]) -> Output {
    Command::new(bin::rwdir_bin())
        .args(args)
        .stdin(Stdio::null())
        .output()
        .expect("run rwdir")
}

fn text(out: &Output) -> String {
    format!(
        "status {}\nstdout:\n{}\nstderr:\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

fn expect(cond: bool, what: &str, out: &Output) -> Result<(), Failed> {
    if cond {
        Ok(())
    } else {
        Err(format!("{what}\n{}", text(out)).into())
    }
}

/// Names in `dir` that the doctor may have left.
fn scratch_left(dir: &Path) -> Vec<String> {
    std::fs::read_dir(dir)
        .map(|it| {
            it.flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .filter(|n| n.starts_with(".rwdir-doctor-"))
                .collect()
        })
        .unwrap_or_default()
}

fn doctor_safe_on(dir: &Path) -> Result<(), Failed> {
    let d = dir.to_str().expect("utf-8");
    let out = rwdir(&["doctor", d]);
    expect(
        out.status.code() == Some(0),
        "doctor: exit 0 expected",
        &out,
    )?;
    let stdout = String::from_utf8_lossy(&out.stdout);
    expect(stdout.contains("verdict: safe"), "no safe verdict", &out)?;
    for name in [
        "exclusive_create",
        "link",
        "rename",
        "heartbeat",
        "leftovers",
    ] {
        expect(
            stdout.contains(&format!("ok    {name}:")),
            &format!("{name} not ok"),
            &out,
        )?;
    }
    expect(scratch_left(dir).is_empty(), "scratch left behind", &out)?;
    expect(
        std::fs::read_dir(dir).expect("list").next().is_none(),
        "doctor left something in DIR",
        &out,
    )
}

fn doctor_is_safe_on_tmpfs() -> Result<(), Failed> {
    let fs = rwdir::Filesystem::of("/dev/shm").map_err(|e| format!("{e:?}"))?;
    if fs.fstype() != "tmpfs" {
        return Err(format!("/dev/shm is {}, not tmpfs", fs.fstype()).into());
    }
    let dir = tempfile::tempdir_in("/dev/shm")?;
    doctor_safe_on(dir.path())
}

fn doctor_is_safe_on_the_local_disk() -> Result<(), Failed> {
    // The target directory: on the disk the repository is on (ext4 on CI's machines).
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR"))?;
    let fs = rwdir::Filesystem::of(dir.path()).map_err(|e| format!("{e:?}"))?;
    if fs.is_shared() {
        return Err(format!("the target directory is on {}, not a local disk", fs.name()).into());
    }
    doctor_safe_on(dir.path())
}

fn doctor_with_a_peer_dir_races_and_measures() -> Result<(), Failed> {
    // The same directory through two paths: a second view of one filesystem, so the
    // races must each have one winner and the staleness must be nil.
    let dir = tempfile::tempdir_in("/dev/shm")?;
    let link = tempfile::tempdir()?;
    let peer = link.path().join("peer");
    std::os::unix::fs::symlink(dir.path(), &peer)?;
    let d = dir.path().to_str().expect("utf-8");
    let out = rwdir(&[
        "doctor",
        d,
        "--peer-dir",
        peer.to_str().expect("utf-8"),
        "--rounds",
        "50",
    ]);
    expect(out.status.code() == Some(0), "exit 0 expected", &out)?;
    let stdout = String::from_utf8_lossy(&out.stdout);
    for line in [
        "ok    race_exclusive_create: O_EXCL races between the two mounts: one winner in each of 50 rounds",
        "ok    race_link: link() races between the two mounts: one winner in each of 50 rounds",
        "ok    stale_listing_create:",
        "ok    stale_listing_unlink:",
        "ok    stale_attributes:",
    ] {
        expect(stdout.contains(line), &format!("missing `{line}`"), &out)?;
    }
    expect(
        scratch_left(dir.path()).is_empty(),
        "scratch left behind",
        &out,
    )
}

fn doctor_json_has_the_documented_shape() -> Result<(), Failed> {
    let dir = tempfile::tempdir_in("/dev/shm")?;
    let out = rwdir(&["doctor", "--json", dir.path().to_str().expect("utf-8")]);
    expect(out.status.code() == Some(0), "exit 0 expected", &out)?;
    let v: serde_json::Value = serde_json::from_slice(&out.stdout)?;
    expect(v["verdict"] == "safe" && v["exit"] == 0, "verdict", &out)?;
    expect(v["dir"].is_string(), "dir", &out)?;
    let fs = &v["filesystem"];
    expect(
        fs["name"] == "tmpfs"
            && fs["kind"] == "local"
            && fs["fstype"] == "tmpfs"
            && fs["shared"] == false
            && fs["refused"].is_null(),
        "filesystem",
        &out,
    )?;
    expect(v["lease"]["configured"] == 45.0, "lease", &out)?;
    let checks = v["checks"].as_array().ok_or("checks")?;
    for c in checks {
        expect(
            c["name"].is_string()
                && ["ok", "warn", "fail", "unknown"].contains(&c["status"].as_str().unwrap_or(""))
                && c["detail"].is_string()
                && (c["value"].is_null() || c["value"].is_number()),
            "a check's shape",
            &out,
        )?;
    }
    let names: Vec<&str> = checks.iter().filter_map(|c| c["name"].as_str()).collect();
    expect(
        names
            == [
                "filesystem",
                "exclusive_create",
                "link",
                "o_tmpfile",
                "rename",
                "heartbeat",
                "mtime_granularity",
                "clock_skew",
                "lease",
                "leftovers",
            ],
        "check names",
        &out,
    )
}

fn doctor_bad_input_is_one_line_and_exit_2() -> Result<(), Failed> {
    let dir = tempfile::tempdir()?;
    let file = dir.path().join("file");
    std::fs::write(&file, "x")?;
    let missing = dir.path().join("missing");
    for (path, cause) in [
        (missing.clone(), "No such file or directory"),
        (file.clone(), "not a directory"),
    ] {
        let p = path.to_str().expect("utf-8");
        let out = rwdir(&["doctor", p]);
        let stderr = String::from_utf8_lossy(&out.stderr);
        expect(out.status.code() == Some(2), "exit 2 expected", &out)?;
        expect(
            stderr.lines().count() == 1 && stderr.contains(p) && stderr.contains(cause),
            "one line naming the path and the cause",
            &out,
        )?;
        expect(out.stdout.is_empty(), "nothing on stdout", &out)?;
    }
    // A directory this user may not write to: doctor runs as nobody on root's 0700
    // directory (as root, permissions would not stop it).
    if nix::unistd::geteuid().is_root() {
        use std::os::unix::process::CommandExt as _;
        let d = dir.path().to_str().expect("utf-8");
        let out = Command::new(bin::rwdir_bin())
            .args(["doctor", d])
            .uid(65534)
            .gid(65534)
            .stdin(Stdio::null())
            .output()?;
        let stderr = String::from_utf8_lossy(&out.stderr);
        expect(
            out.status.code() == Some(2),
            "exit 2 expected without permission",
            &out,
        )?;
        expect(
            stderr.lines().count() == 1
                && stderr.contains(&format!("cannot check `{d}`"))
                && stderr.contains("Permission denied"),
            "one line naming the path and the cause",
            &out,
        )?;
    }
    // A missing peer dir too.
    let out = rwdir(&[
        "doctor",
        dir.path().to_str().expect("utf-8"),
        "--peer-dir",
        missing.to_str().expect("utf-8"),
    ]);
    expect(
        out.status.code() == Some(2),
        "exit 2 for a missing peer",
        &out,
    )?;
    expect(
        scratch_left(dir.path()).is_empty(),
        "scratch left behind",
        &out,
    )
}

fn doctor_reports_stale_lock_files_without_touching_them() -> Result<(), Failed> {
    let dir = tempfile::tempdir_in("/dev/shm")?;
    let d = dir.path().to_str().expect("utf-8");
    // A writer killed by SIGKILL leaves its .master_lock.
    let mut child = Command::new(bin::rwdir_bin())
        .args(["write", d, "sleep", "60"])
        .stdin(Stdio::null())
        .spawn()?;
    let master = dir.path().join(".rwdir/.master_lock");
    let start = Instant::now();
    while !master.exists() {
        if start.elapsed() > Duration::from_secs(30) {
            let _ = child.kill();
            return Err("the writer never took the lock".into());
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    child.kill()?;
    child.wait()?;
    let before = std::fs::read(&master)?;
    let out = rwdir(&["doctor", d]);
    expect(
        out.status.code() == Some(0),
        "exit 0 (stale files are a warning)",
        &out,
    )?;
    let stdout = String::from_utf8_lossy(&out.stdout);
    expect(
        stdout.contains("warn  leftovers:") && stdout.contains("1 stale"),
        "the stale file is reported",
        &out,
    )?;
    expect(
        std::fs::read(&master)? == before,
        "the lock file was touched",
        &out,
    )
}

fn doctor_killed_by_sigterm_leaves_nothing_behind() -> Result<(), Failed> {
    let dir = tempfile::tempdir_in("/dev/shm")?;
    // A peer that never shows DIR's files: doctor waits for it (up to 60 s).
    let other = tempfile::tempdir_in("/dev/shm")?;
    let mut child = Command::new(bin::rwdir_bin())
        .args(["doctor", dir.path().to_str().expect("utf-8"), "--peer-dir"])
        .arg(other.path())
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()?;
    let start = Instant::now();
    // The scratch directory is made, then the O_EXCL etc. checks run before the wait.
    while scratch_left(dir.path()).is_empty() || start.elapsed() < Duration::from_millis(300) {
        if start.elapsed() > Duration::from_secs(30) {
            let _ = child.kill();
            return Err("no scratch directory appeared".into());
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(i32::try_from(child.id())?),
        nix::sys::signal::Signal::SIGTERM,
    )?;
    let out = child.wait_with_output()?;
    expect(out.status.code() == Some(143), "exit 128+15 expected", &out)?;
    expect(
        scratch_left(dir.path()).is_empty(),
        "scratch left behind",
        &out,
    )?;
    expect(
        String::from_utf8_lossy(&out.stderr).contains("interrupted by SIGTERM"),
        "says so",
        &out,
    )
}

/// A FUSE mount of `lyingfs` at a fresh directory, with a subdirectory `d` as DIR.
struct Mount {
    _session: fuser::BackgroundSession,
    _at: tempfile::TempDir,
    dir: PathBuf,
}

fn mount(name: &str, lie: bool) -> Result<Mount, Failed> {
    let at = tempfile::tempdir()?;
    let session = lyingfs::mount(at.path(), name, lie)?;
    let dir = at.path().join("d");
    std::fs::create_dir(&dir)?;
    Ok(Mount {
        _session: session,
        _at: at,
        dir,
    })
}

fn doctor_says_unsafe_on_a_mount_that_lies_about_o_excl() -> Result<(), Failed> {
    let m = mount("lyingfs", true)?;
    let fs = rwdir::Filesystem::of(&m.dir).map_err(|e| format!("{e:?}"))?;
    if fs.kind() != rwdir::FsKind::Fuse || fs.source() != "lyingfs" {
        return Err(format!("detected as {fs:?}").into());
    }
    let d = m.dir.to_str().expect("utf-8");
    let out = rwdir(&["doctor", d]);
    expect(
        out.status.code() == Some(1),
        "exit 1 (unsafe) expected",
        &out,
    )?;
    let stdout = String::from_utf8_lossy(&out.stdout);
    expect(
        stdout.contains("FAIL  exclusive_create: O_CREAT|O_EXCL on an existing name succeeded"),
        "the O_EXCL failure is named",
        &out,
    )?;
    expect(stdout.contains("verdict: unsafe"), "verdict", &out)?;
    // JSON says the same.
    let out = rwdir(&["doctor", "--json", d]);
    let v: serde_json::Value = serde_json::from_slice(&out.stdout)?;
    let excl = v["checks"]
        .as_array()
        .and_then(|c| c.iter().find(|c| c["name"] == "exclusive_create"))
        .ok_or("no exclusive_create check")?;
    expect(
        v["verdict"] == "unsafe" && excl["status"] == "fail",
        "json verdict",
        &out,
    )?;
    expect(scratch_left(&m.dir).is_empty(), "scratch left behind", &out)?;
    // Raced through a second path to the mount, both creators win.
    let link = tempfile::tempdir()?;
    let peer = link.path().join("peer");
    std::os::unix::fs::symlink(&m.dir, &peer)?;
    let out = rwdir(&[
        "doctor",
        d,
        "--peer-dir",
        peer.to_str().expect("utf-8"),
        "--rounds",
        "20",
    ]);
    expect(
        out.status.code() == Some(1),
        "exit 1 (unsafe) expected",
        &out,
    )?;
    expect(
        String::from_utf8_lossy(&out.stdout)
            .contains("FAIL  race_exclusive_create: O_EXCL races between the two mounts: 20 of 20 rounds had two winners"),
        "the O_EXCL race failure is named",
        &out,
    )?;
    expect(scratch_left(&m.dir).is_empty(), "scratch left behind", &out)
}

fn doctor_is_safe_on_an_honest_fuse_mount() -> Result<(), Failed> {
    let m = mount("honestfs", false)?;
    let d = m.dir.to_str().expect("utf-8");
    let out = rwdir(&["doctor", d]);
    expect(out.status.code() == Some(0), "exit 0 expected", &out)?;
    let stdout = String::from_utf8_lossy(&out.stdout);
    expect(
        stdout.contains("warn  filesystem: FUSE (honestfs)")
            && stdout.contains("ok    exclusive_create:"),
        "an unknown FUSE filesystem is a warning, its O_EXCL fine",
        &out,
    )?;
    expect(scratch_left(&m.dir).is_empty(), "scratch left behind", &out)
}

fn an_object_store_mount_is_refused_unless_allowed() -> Result<(), Failed> {
    // The honest filesystem under the name s3fs: detection sees an s3fs mount.
    let m = mount("s3fs", false)?;
    let d = m.dir.to_str().expect("utf-8");
    let fs = rwdir::Filesystem::of(&m.dir).map_err(|e| format!("{e:?}"))?;
    if fs.kind() != rwdir::FsKind::ObjectStore {
        return Err(format!("detected as {fs:?}").into());
    }
    // The library refuses, and lets it through when allowed.
    match rwdir::DirLock::new(&m.dir) {
        Err(rwdir::Error::UnsafeFilesystem { path, .. }) if path == m.dir => {}
        other => return Err(format!("expected UnsafeFilesystem, got {other:?}").into()),
    }
    let lock = rwdir::DirLock::builder(&m.dir)
        .allow_unsafe_filesystem(true)
        .build()
        .map_err(|e| format!("{e:?}"))?;
    drop(lock.write().map_err(|e| format!("{e:?}"))?);

    // The command: exit 66 and one line naming the path, the filesystem and why.
    let out = rwdir(&["write", d, "true"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    expect(out.status.code() == Some(66), "exit 66 expected", &out)?;
    expect(
        stderr.lines().count() == 1
            && stderr.contains(&format!("refusing to lock `{d}`"))
            && stderr.contains("s3fs (object store)")
            && stderr.contains("exclusive creation")
            && stderr.contains("--allow-unsafe-filesystem"),
        "one line naming the path, the filesystem, why and the override",
        &out,
    )?;
    let out = rwdir(&["--allow-unsafe-filesystem", "write", d, "true"]);
    expect(out.status.code() == Some(0), "allowed: exit 0", &out)?;
    let out = rwdir(&["read", "--allow-unsafe-filesystem", d, "true"]);
    expect(
        out.status.code() == Some(0),
        "allowed after the subcommand: exit 0",
        &out,
    )?;
    // doctor names the refusal.
    let out = rwdir(&["doctor", d]);
    expect(out.status.code() == Some(1), "doctor: unsafe", &out)?;
    expect(
        String::from_utf8_lossy(&out.stdout).contains("FAIL  filesystem: s3fs (object store)"),
        "doctor names the filesystem",
        &out,
    )
}
