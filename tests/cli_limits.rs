//! `rwdir read|write` where the system refuses it a thread: the lock's watch thread
//! (which refreshes the lock file every lease/3 and checks the lock every 500 ms while
//! COMMAND runs) is started only when its first round is due, after COMMAND started. If
//! it cannot start then, rwdir must say so once and keep the lock refreshed from its
//! main thread, never let the lease run out under a running COMMAND.
//!
//! The refusal is real: rwdir runs in a cgroup of its own whose `pids.max` leaves room
//! for rwdir, the reaper and COMMAND, and for no thread. The cgroup is that of the pids
//! controller of cgroup v1 (`/sys/fs/cgroup/pids`) or of cgroup v2 (`/sys/fs/cgroup`),
//! made for the test and removed after it.
//!
//! A custom harness (libtest-mimic): where no such cgroup can be made (not root, no pids
//! controller) the tests are reported as ignored, with the reason, never as passed.

#![allow(clippy::disallowed_methods)]

#[path = "cli/util.rs"]
mod util;

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use libtest_mimic::{Arguments, Completion, Trial};
use util::{Dir, HOLD, Holder, rwdir_bin};

/// What rwdir says once when the watch thread cannot start.
const SAID: &str = "cannot start a thread to watch the lock";

fn main() {
    let args = Arguments::from_args();
    let root = if args.list {
        Err(String::new())
    } else {
        pids_root()
    };
    let trials = vec![Trial::ignorable_test(
        "a_watch_thread_refused_leaves_the_refresh_to_the_main_thread",
        move || match root {
            Ok(root) => {
                a_watch_thread_refused_leaves_the_refresh_to_the_main_thread(&root);
                Ok(Completion::Completed)
            }
            Err(why) => Ok(Completion::ignored_with(why)),
        },
    )];
    libtest_mimic::run(&args, trials).exit();
}

/// A cgroup of the pids controller, made for one test and removed when dropped.
struct Cgroup {
    path: PathBuf,
}

impl Cgroup {
    fn new(root: &Path, max: u32) -> Result<Cgroup, String> {
        let nanos = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.subsec_nanos());
        let path = root.join(format!("rwdir-test-{}-{nanos}", std::process::id()));
        fs::create_dir(&path).map_err(|e| format!("cannot make {}: {e}", path.display()))?;
        let cg = Cgroup { path };
        fs::write(cg.path.join("pids.max"), max.to_string())
            .map_err(|e| format!("cannot set pids.max in {}: {e}", cg.path.display()))?;
        Ok(cg)
    }

    fn procs(&self) -> PathBuf {
        self.path.join("cgroup.procs")
    }
}

impl Drop for Cgroup {
    /// Kills what is left in it (a failed test's reaper and COMMAND, dying after rwdir)
    /// and removes it, for at most 5 s.
    fn drop(&mut self) {
        let deadline = Instant::now() + Duration::from_secs(5);
        while fs::remove_dir(&self.path).is_err() && Instant::now() < deadline {
            for pid in fs::read_to_string(self.procs()).unwrap_or_default().lines() {
                if let Ok(pid) = pid.trim().parse() {
                    let _ = nix::sys::signal::kill(
                        nix::unistd::Pid::from_raw(pid),
                        nix::sys::signal::Signal::SIGKILL,
                    );
                }
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }
}

/// Where a pids cgroup can be made, or why none can.
fn pids_root() -> Result<PathBuf, String> {
    let v1 = Path::new("/sys/fs/cgroup/pids");
    let v2 = Path::new("/sys/fs/cgroup");
    let root = if v1.join("cgroup.procs").exists() {
        v1
    } else if fs::read_to_string(v2.join("cgroup.controllers"))
        .is_ok_and(|c| c.split_whitespace().any(|c| c == "pids"))
    {
        // Children of the root get the controller only if the root hands it down.
        let _ = fs::write(v2.join("cgroup.subtree_control"), "+pids");
        v2
    } else {
        return Err("no pids cgroup controller (cgroup v1 or v2) here".into());
    };
    // Can one be made and limited here?
    Cgroup::new(root, 1)
        .map(drop)
        .map(|()| root.to_path_buf())
        .map_err(|why| format!("cannot make a pids cgroup: {why}"))
}

fn a_watch_thread_refused_leaves_the_refresh_to_the_main_thread(root: &Path) {
    let t = Dir::new();
    // rwdir (the shell below execs it), the reaper, COMMAND (HOLD forks nothing): three
    // tasks, and no fourth for a thread.
    let cg = Cgroup::new(root, 3).unwrap_or_else(|why| panic!("{why}"));
    let ready = t.path("ready");
    let stderr = t.path("stderr");
    let mut cmd = Command::new("sh");
    // A lease of 0.3 s: the first round (a refresh) is due 0.1 s after the lock is taken.
    cmd.arg("-c")
        .arg(r#"echo $$ > "$0" && exec "$@""#)
        .arg(cg.procs())
        .arg(rwdir_bin())
        .args(["write", "--lease", "0.3"])
        .arg(&t.dir)
        .args(["sh", "-c", HOLD])
        .arg(&ready)
        .current_dir(t.root())
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(fs::File::create(&stderr).expect("create the stderr file"));
    let line = format!("{cmd:?}");
    let child = cmd.spawn().expect("spawn rwdir in the cgroup");
    let h = Holder::from_parts(child, ready, stderr, line, t.root());
    h.wait_ready();
    h.wait_stderr(SAID);

    // The refresh goes on: age the lock file and watch rwdir touch it again.
    t.expect_refreshed(&h, ".master_lock");

    let r = h.release();
    r.expect_code(0);
    r.check(
        r.stderr.matches(SAID).count() == 1,
        "rwdir says once that its watch thread cannot start",
    );
    r.check(
        t.lock_files(".master_lock").is_empty(),
        "the lock is released",
    );
    drop(cg);
}
