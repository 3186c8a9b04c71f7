//! Leases that expire while the owner waits (issue #18, docs/protocol.md §11), with real
//! `rwdir` processes on a local directory. In every scene one or more writers run in a
//! pid namespace of their own (`unshare --pid --fork --mount-proc`), so that they and
//! the writers of the host namespace judge each other's files by lease, exactly as
//! writers on two hosts would (§2.2 step 4, §7).
//!
//! "Inside" is what COMMAND itself records: each COMMAND appends `E ID MODE NS` to a
//! log when it starts and `X ID ...` when it leaves, with one `O_APPEND` write each, so
//! the log's order is the order of entries and exits; a writer's COMMAND also creates
//! an exclusive marker (`set -C`) and logs `V ID OTHER` if another writer's marker is
//! already there. Overlapping intervals in the log, or a `V` line, are two holders
//! inside at once. Which process owns a lock file is read from the file's own record
//! (pid namespace, pid, nonce), not from `status`, whose pids are ambiguous across
//! namespaces (every namespaced `rwdir` is pid 1 in its namespace).
//!
//! Readiness is a file (the reader's COMMAND makes one), rwdir's "waiting for write
//! lock" line on stderr (before it, the files a writer has may be those of its first
//! try, which it removes), then a lock file of the expected owner appearing in
//! `.rwdir/`. The only sleeps hold the lock for a stated time (a reader past the lease,
//! a writer's COMMAND for up to two seconds), never decide. A scene collects every
//! promise it finds broken and reports them all at once, with the log and a listing.
//!
//! The harness is `libtest-mimic` (`harness = false`): where `unshare` cannot make a pid
//! namespace (not root, and no user namespaces), every test is reported as ignored,
//! with the reason, never as passed. The tests mostly wait, so by default they all run
//! at once (`--test-threads` still decides if given).

#![allow(clippy::disallowed_methods)]

#[path = "cli/util.rs"]
mod util;

use std::collections::BTreeMap;
use std::fs;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant, SystemTime};

use libtest_mimic::{Arguments, Completion, Trial};
use nix::sys::signal::Signal;
use util::{Dir, Holder, Run, listing, rwdir_bin, wait_until};

/// The lease of every process in a scene, in seconds (`--lease`): the heartbeat is
/// then every second, and a file not touched for 3 s is dead to another namespace.
const LEASE: f64 = 3.0;

/// A shorter lease, for the scenes whose owner is paused on purpose: they wait for a
/// lease to expire, not for the heartbeat.
const SHORT_LEASE: f64 = 2.0;

/// `unshare` options that give the command a pid namespace of its own with a `/proc` of
/// that namespace (rwdir reads its identity there), and SIGKILL it when `unshare`
/// dies. The first that works is used; the second lets a non-root user run the tests.
const UNSHARE: [&[&str]; 2] = [
    &["--pid", "--fork", "--kill-child", "--mount-proc"],
    &[
        "--user",
        "--map-root-user",
        "--pid",
        "--fork",
        "--kill-child",
        "--mount-proc",
    ],
];

/// COMMAND of every holder, `sh -c SCRIPT LOG ID READY HOLD`: logs its entry, takes the
/// writers' marker (writers), creates READY, holds for HOLD seconds (or, for `stdin`,
/// until its stdin closes), then gives the marker back and logs its exit. Killed by
/// SIGTERM (rwdir's "lock lost"), it still logs its exit.
const SCRIPT: &str = r#"log=$0 id=$1 ready=$2 hold=$3
stamp() { date +%s%N; }
echo "E $id $RWDIR_MODE $(stamp)" >> "$log"
mine=
if [ "$RWDIR_MODE" = write ]; then
  if (set -C; echo "$id" > "$log.writer") 2>/dev/null; then mine=1
  else echo "V $id $(cat "$log.writer" 2>/dev/null)" >> "$log"; fi
fi
leave() { if [ -n "$mine" ]; then rm -f "$log.writer"; fi; echo "X $id $1 $(stamp)" >> "$log"; }
trap 'leave SIGTERM; exit 143' TERM
: > "$ready"
if [ "$hold" = stdin ]; then cat > /dev/null; else sleep "$hold"; fi
leave done"#;

// ---------------------------------------------------------------------------------
// The harness

/// A test: its name and its body, which gets the way to make a pid namespace.
type Test = (&'static str, fn(Ns));

fn main() {
    let mut args = Arguments::from_args();
    let tests: [Test; 7] = [
        ("wait_in_w5_keeps_the_master_fresh", wait_in_w5),
        ("grant_after_a_long_wait", grant_after_a_long_wait),
        ("timeout_after_a_break", timeout_after_a_break),
        ("fifo_across_pid_namespaces", fifo_across_pid_namespaces),
        ("paused_owner_times_out", |ns| {
            paused_owner(ns, Cancel::Timeout)
        }),
        ("paused_owner_gets_sigterm", |ns| {
            paused_owner(ns, Cancel::Signal(Signal::SIGTERM));
        }),
        ("paused_owner_gets_sigint", |ns| {
            paused_owner(ns, Cancel::Signal(Signal::SIGINT));
        }),
    ];
    args.test_threads.get_or_insert(tests.len());
    let ns = if args.list {
        Err(String::new())
    } else {
        probe()
    };
    let trials = tests
        .into_iter()
        .map(|(name, body)| {
            let ns = ns.clone();
            Trial::ignorable_test(name, move || match ns {
                Ok(ns) => {
                    body(ns);
                    Ok(Completion::Completed)
                }
                Err(why) => Ok(Completion::ignored_with(why)),
            })
        })
        .collect();
    libtest_mimic::run(&args, trials).exit();
}

/// How to start a process in a pid namespace of its own: the `unshare` options that
/// work here, and the inode of our own pid namespace.
#[derive(Debug, Clone, Copy)]
struct Ns {
    unshare: &'static [&'static str],
    host: u64,
}

/// The first of [`UNSHARE`] that really gives a command another pid namespace, or why
/// none does.
fn probe() -> Result<Ns, String> {
    let host = fs::metadata("/proc/self/ns/pid")
        .map_err(|e| format!("cannot read /proc/self/ns/pid: {e}"))?
        .ino();
    let ours = fs::read_link("/proc/self/ns/pid").unwrap_or_default();
    let mut why = Vec::new();
    for opts in UNSHARE {
        let line = format!("unshare {}", opts.join(" "));
        match Command::new("unshare")
            .args(opts)
            .args(["--", "readlink", "/proc/self/ns/pid"])
            .stdin(Stdio::null())
            .output()
        {
            Err(e) => why.push(format!("`{line}`: {e}")),
            Ok(o) if !o.status.success() => why.push(format!(
                "`{line}`: {}: {}",
                o.status,
                String::from_utf8_lossy(&o.stderr).trim()
            )),
            Ok(o) if o.stdout.trim_ascii() == ours.as_os_str().as_encoded_bytes() => {
                why.push(format!("`{line}` left the pid namespace as it was"));
            }
            Ok(_) => {
                return Ok(Ns {
                    unshare: opts,
                    host,
                });
            }
        }
    }
    Err(format!(
        "needs a pid namespace of its own for a writer, and unshare cannot make one here: {}",
        why.join("; ")
    ))
}

// ---------------------------------------------------------------------------------
// A scene: a locked directory, the log, and the processes that take the lock

/// Where a process runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Place {
    /// Our own pid namespace: its files are judged exactly by the others here.
    Host,
    /// A pid namespace of its own: everyone else judges its files by lease, and it
    /// judges theirs by lease.
    Own,
}

/// One `rwdir read|write` (behind `unshare` for [`Place::Own`]), killed when dropped
/// (and, behind `unshare`, its whole namespace with it).
#[derive(Debug)]
struct Proc {
    id: &'static str,
    place: Place,
    holder: Holder,
}

/// Who created a lock file, from its record.
#[derive(Debug, Clone)]
struct Record {
    name: String,
    pidns: u64,
    pid: u32,
    nonce: String,
    /// When the record was written (the file's creation).
    since: SystemTime,
}

impl std::fmt::Display for Record {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "`{}` of pid {} in pid namespace {}, nonce {}",
            self.name, self.pid, self.pidns, self.nonce
        )
    }
}

/// A record that may be missing, for messages.
fn show(r: Option<&Record>) -> String {
    r.map_or_else(|| "missing".to_string(), Record::to_string)
}

impl Record {
    /// The record of the lock file at `path`, if it exists and is well-formed.
    fn read(path: &Path) -> Option<Record> {
        let h = rwdir::Holder::parse(&fs::read(path).ok()?)?;
        Some(Record {
            name: path.file_name()?.to_string_lossy().into_owned(),
            pidns: h.pidns,
            pid: h.pid,
            nonce: h.nonce.to_string(),
            since: h.since(),
        })
    }
}

impl Proc {
    /// The pid namespace and pid its lock files name, once known: for a process in its
    /// own namespace, once `unshare` has made the namespace (its `rwdir` is pid 1 there).
    fn identity(&self, ns: Ns) -> Option<(u64, u32)> {
        match self.place {
            Place::Host => Some((ns.host, self.holder.pid())),
            Place::Own => {
                let path = format!("/proc/{}/ns/pid_for_children", self.holder.pid());
                let ino = fs::metadata(path).ok()?.ino();
                (ino != ns.host).then_some((ino, 1))
            }
        }
    }

    /// Whether `rec` is a file of this process.
    fn owns(&self, ns: Ns, rec: &Record) -> bool {
        self.identity(ns) == Some((rec.pidns, rec.pid))
    }

    /// Waits (bounded) until rwdir says that it waits for the lock (its stderr line
    /// after a second, docs/cli.md). rwdir first tries once without waiting, and that
    /// try makes and removes a pending file and maybe a `.master_lock` of its own; after
    /// the line, the files it has are those of its wait, which are the ones to follow.
    fn wait_waiting(&self) {
        self.holder.wait_stderr("waiting for write lock");
    }

    /// Waits (bounded) for rwdir to exit.
    fn wait(self) -> Run {
        self.holder.wait()
    }
}

/// Promises found broken, collected so that a scene reports all of them at once.
#[derive(Debug, Default)]
struct Broken(Vec<String>);

impl Broken {
    fn check(&mut self, ok: bool, what: impl FnOnce() -> String) {
        if !ok {
            self.0.push(what());
        }
    }
}

#[derive(Debug)]
struct Scene {
    ns: Ns,
    dir: Dir,
    log: PathBuf,
    lease: f64,
}

impl Scene {
    fn new(ns: Ns, lease: f64) -> Scene {
        let dir = Dir::new();
        let log = dir.path("log");
        Scene {
            ns,
            dir,
            log,
            lease,
        }
    }

    fn lease(&self) -> Duration {
        Duration::from_secs_f64(self.lease)
    }

    /// Starts `rwdir MODE --lease L OPTS DIR -- sh -c SCRIPT LOG ID READY HOLD` at
    /// `place`, with stdin a pipe (closing it ends a `stdin` hold) and stderr in a file.
    fn start(&self, id: &'static str, mode: &str, place: Place, opts: &[&str], hold: &str) -> Proc {
        let ready = self.dir.path(id);
        let stderr = self.dir.path(&format!("{id}.stderr"));
        let lease = self.lease.to_string();
        let mut args = vec![mode, "--lease", &lease];
        args.extend(opts);
        let d = self.dir.d();
        let (log, ready_s) = (self.log.display().to_string(), ready.display().to_string());
        args.extend([&d, "--", "sh", "-c", SCRIPT, &log, id, &ready_s, hold]);
        let cmd = self.dir.rwdir(&args);
        let (mut command, line) = match place {
            Place::Host => (cmd.cmd, cmd.line),
            Place::Own => {
                let mut c = Command::new("unshare");
                c.args(self.ns.unshare)
                    .arg("--")
                    .arg(rwdir_bin())
                    .args(&args)
                    .current_dir(self.dir.root());
                (
                    c,
                    format!("unshare {} -- {}", self.ns.unshare.join(" "), cmd.line),
                )
            }
        };
        let err = fs::File::create(&stderr).expect("create stderr file");
        command
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(err);
        let child = command
            .spawn()
            .unwrap_or_else(|e| panic!("spawn {line}: {e}"));
        Proc {
            id,
            place,
            holder: Holder::from_parts(child, ready, stderr, line, self.dir.root()),
        }
    }

    /// A reader in our namespace that holds until [`Holder::release`], started and
    /// inside.
    fn reader(&self) -> Proc {
        let r = self.start("R", "read", Place::Host, &[], "stdin");
        r.holder.wait_ready();
        r
    }

    fn master(&self) -> Option<Record> {
        Record::read(&self.dir.state().join(".master_lock"))
    }

    /// The records of the queued writers' files.
    fn pending(&self) -> Vec<Record> {
        self.dir
            .lock_files(".pending_lock-")
            .iter()
            .filter_map(|p| Record::read(p))
            .collect()
    }

    /// Waits (bounded) until `p` waits for the lock and `.master_lock` is its file, and
    /// returns the file's record. See [`Proc::wait_waiting`].
    fn wait_master_of(&self, p: &Proc) -> Record {
        p.wait_waiting();
        let mut found = None;
        wait_until(
            || {
                found = self.master().filter(|m| p.owns(self.ns, m));
                found.is_some()
            },
            || format!("{} to own .master_lock{}", p.id, self.report()),
        );
        found.expect("found")
    }

    /// Waits (bounded) until `p` waits for the lock and is queued (has a pending file),
    /// and returns the file's record. See [`Proc::wait_waiting`].
    fn wait_queued(&self, p: &Proc) -> Record {
        p.wait_waiting();
        let mut found = None;
        wait_until(
            || {
                found = self.pending().into_iter().find(|r| p.owns(self.ns, r));
                found.is_some()
            },
            || format!("{} to be queued{}", p.id, self.report()),
        );
        found.expect("found")
    }

    fn events(&self) -> Vec<String> {
        fs::read_to_string(&self.log)
            .unwrap_or_default()
            .lines()
            .map(str::to_string)
            .collect()
    }

    /// Every two holders inside at once that the log shows: a writer that entered
    /// while anyone was inside, anyone who entered while a writer was inside, and a
    /// writer that found the writers' marker taken.
    fn overlaps(&self) -> Vec<String> {
        let mut inside: Vec<(String, String)> = Vec::new();
        let mut found = Vec::new();
        for line in self.events() {
            let w: Vec<&str> = line.split_whitespace().collect();
            match w.as_slice() {
                ["E", id, mode, ..] => {
                    for (other, omode) in &inside {
                        if *mode == "write" || omode == "write" {
                            found.push(format!(
                                "{id} ({mode}) entered while {other} ({omode}) was inside"
                            ));
                        }
                    }
                    inside.push((id.to_string(), mode.to_string()));
                }
                ["X", id, ..] => inside.retain(|(i, _)| i != id),
                ["V", id, other @ ..] => found.push(format!(
                    "{id} found the writers' marker taken by {}",
                    other.join(" ")
                )),
                _ => found.push(format!("unreadable log line `{line}`")),
            }
        }
        found
    }

    /// The writers in the order they entered.
    fn writers_entered(&self) -> Vec<String> {
        self.events()
            .iter()
            .filter_map(|l| match l.split_whitespace().collect::<Vec<_>>()[..] {
                ["E", id, "write", ..] => Some(id.to_string()),
                _ => None,
            })
            .collect()
    }

    /// The log and a listing of the scene, for failure messages.
    fn report(&self) -> String {
        format!(
            "\n--- log\n{}\n--- directory\n{}---",
            self.events().join("\n"),
            listing(self.dir.root())
        )
    }

    /// Checks the promises every scene makes: nobody inside with a writer, `runs`
    /// exited as expected, and writers entered in `order`; then fails with every
    /// broken promise, if any.
    fn verdict(&self, mut broken: Broken, runs: &[(&str, Run, i32)], order: &[&str]) {
        for o in self.overlaps() {
            broken.0.push(format!("two holders inside at once: {o}"));
        }
        for (id, run, code) in runs {
            broken.check(run.status.code() == Some(*code), || {
                format!(
                    "{id} exited with {}, not {code}; its stderr: {}",
                    run.status,
                    run.stderr.trim()
                )
            });
        }
        let entered = self.writers_entered();
        broken.check(entered == order, || {
            format!("writers entered in the order {entered:?}, not in queue order {order:?}")
        });
        if !broken.0.is_empty() {
            panic!(
                "{} promise(s) broken:\n  - {}{}",
                broken.0.len(),
                broken.0.join("\n  - "),
                self.report()
            );
        }
    }
}

/// Sleeps until `t` (a lock held on purpose for a stated time; never a readiness wait).
fn hold_until(t: SystemTime) {
    if let Ok(d) = t.duration_since(SystemTime::now()) {
        std::thread::sleep(d);
    }
}

// ---------------------------------------------------------------------------------
// The traces of issue #18

/// Trace 1, "wait in W5": R reads; X (our namespace) queues a write, creates
/// `.master_lock` and waits for R to leave; Y (its own namespace) queues behind it. R
/// holds until X's `.master_lock` is more than a lease old. Before the fix nobody
/// refreshed it while X waited, so Y broke it, made its own and waited too; when R
/// left both entered, and X noticed a second later (exit 74).
///
/// The promise: an owner's files stay fresh from creation to removal, so a waiting
/// writer's `.master_lock` is never judged dead; when R leaves it is still X's very
/// file (same nonce), X enters, then Y, never together, and both exit 0.
fn wait_in_w5(ns: Ns) {
    let s = Scene::new(ns, LEASE);
    let mut broken = Broken::default();
    let r = s.reader();
    let x = s.start("X", "write", Place::Host, &[], "1");
    let xm = s.wait_master_of(&x);
    let y = s.start("Y", "write", Place::Own, &[], "1");
    s.wait_queued(&y);
    hold_until(xm.since + s.lease() + Duration::from_secs(2));
    let now = s.master();
    broken.check(now.as_ref().is_some_and(|m| m.nonce == xm.nonce), || {
        format!(
            "X's .master_lock was broken while X waited for R: it is now {}, X's was {xm}",
            show(now.as_ref())
        )
    });
    let r = r.holder.release();
    let (x, y) = (x.wait(), y.wait());
    s.verdict(
        broken,
        &[("R", r, 0), ("X", x, 0), ("Y", y, 0)],
        &["X", "Y"],
    );
}

/// Trace 2, "grant after a long wait": R reads; X waits for it with a `.master_lock`
/// that becomes older than the lease; R leaves and X enters; Y (its own namespace)
/// arrives right after X's grant. Before the fix X was granted with a file whose mtime
/// was older than the lease, Y broke it at once and entered while X was inside, and X
/// exited 74 at its first heartbeat.
///
/// The promise: `.master_lock` is fresh at the grant (and all along), so Y waits until
/// X leaves; X and Y are never inside together, and both exit 0.
fn grant_after_a_long_wait(ns: Ns) {
    let s = Scene::new(ns, LEASE);
    let r = s.reader();
    let x = s.start("X", "write", Place::Host, &[], "2");
    let xm = s.wait_master_of(&x);
    hold_until(xm.since + s.lease() + Duration::from_secs(1));
    let r = r.holder.release();
    x.holder.wait_ready();
    let y = s.start("Y", "write", Place::Own, &[], "1");
    let (x, y) = (x.wait(), y.wait());
    s.verdict(
        Broken::default(),
        &[("R", r, 0), ("X", x, 0), ("Y", y, 0)],
        &["X", "Y"],
    );
}

/// Trace 3, "timeout after a break": R reads; X (`--timeout 6`) waits for it in W5; Y
/// (its own namespace) queues behind X; X times out; Z (our namespace) comes next.
/// Before the fix Y broke X's stale `.master_lock` and made its own, X timed out and
/// unlinked `.master_lock` without looking (Y's), Z created one in its place, and when
/// R left Y and Z were inside together.
///
/// The promise: a writer that gives up removes only its own `.master_lock`. Once X has
/// timed out (exit 75) and Z is queued or holding, the `.master_lock` there is Y's; when
/// R leaves Y enters, then Z, never together, and both exit 0.
fn timeout_after_a_break(ns: Ns) {
    let s = Scene::new(ns, LEASE);
    let mut broken = Broken::default();
    let r = s.reader();
    let x = s.start("X", "write", Place::Host, &["--timeout", "6"], "1");
    s.wait_master_of(&x);
    let y = s.start("Y", "write", Place::Own, &[], "1");
    s.wait_queued(&y);
    let x = x.wait();
    let z = s.start("Z", "write", Place::Host, &[], "1");
    z.wait_waiting();
    wait_until(
        || {
            s.master().is_some()
                && (s.pending().iter().any(|p| z.owns(ns, p))
                    || s.master().is_some_and(|m| z.owns(ns, &m)))
        },
        || format!("Z to queue and a .master_lock to exist{}", s.report()),
    );
    let m = s.master();
    broken.check(m.as_ref().is_some_and(|m| y.owns(ns, m)), || {
        let whose = match &m {
            Some(m) if z.owns(ns, m) => "Z's",
            Some(_) => "neither Y's nor Z's",
            None => "gone",
        };
        format!(
            "after X timed out, .master_lock is {whose}, not Y's (X removed a file it did not own): {}",
            show(m.as_ref())
        )
    });
    let r = r.holder.release();
    let (y, z) = (y.wait(), z.wait());
    s.verdict(
        broken,
        &[("R", r, 0), ("X", x, 75), ("Y", y, 0), ("Z", z, 0)],
        &["Y", "Z"],
    );
}

/// FIFO across pid namespaces: while R reads for more than twice the lease, writers
/// alternately in our namespace and in namespaces of their own queue one after
/// another, each confirmed queued before the next starts. Before the fix pending files
/// were not refreshed while their writers waited, so after a lease the writers of
/// different namespaces deleted each other's queue files (and broke the first one's
/// `.master_lock`), and the victims queued again at the back.
///
/// The promise: the queue survives any wait. When R leaves, `.master_lock` is still the
/// first writer's very file and every other writer's original pending file is still
/// there; no writer ever had a second pending file (a watcher lists the state
/// directory all along); they enter in queue order, one at a time, and all exit 0.
fn fifo_across_pid_namespaces(ns: Ns) {
    let s = Scene::new(ns, LEASE);
    let mut broken = Broken::default();
    let r = s.reader();
    let ids = ["W1", "W2", "W3", "W4", "W5"];
    let stop = Arc::new(AtomicBool::new(false));
    let watcher = {
        let (state, stop) = (s.dir.state(), Arc::clone(&stop));
        std::thread::spawn(move || watch_pending(&state, &stop))
    };
    let mut writers = Vec::new();
    let mut first_master = None;
    let mut queued = BTreeMap::new();
    for (i, id) in ids.into_iter().enumerate() {
        let place = if i % 2 == 0 { Place::Host } else { Place::Own };
        let w = s.start(id, "write", place, &[], "0.2");
        if i == 0 {
            first_master = Some(s.wait_master_of(&w));
        } else {
            queued.insert(id, s.wait_queued(&w));
        }
        writers.push((w, Instant::now()));
    }
    hold_until(SystemTime::now() + 2 * s.lease() + Duration::from_secs(1));
    let m = s.master();
    let first = first_master.expect("W1's .master_lock");
    broken.check(m.as_ref().is_some_and(|m| m.nonce == first.nonce), || {
        format!(
            "W1's .master_lock was replaced while W1 waited for R: it is now {}, W1's was {first}",
            show(m.as_ref())
        )
    });
    let now: Vec<String> = s.pending().into_iter().map(|p| p.name).collect();
    for (id, p) in &queued {
        broken.check(now.contains(&p.name), || {
            format!(
                "{id}'s pending file {} disappeared while {id} waited; pending now: {now:?}",
                p.name
            )
        });
    }
    let r = r.holder.release();
    let mut runs = vec![("R", r, 0)];
    let mut owners = Vec::new();
    for (w, confirmed) in writers {
        owners.push((w.id, w.identity(ns), confirmed));
        runs.push((w.id, w.wait(), 0));
    }
    stop.store(true, Ordering::Relaxed);
    let seen = watcher.join().expect("watcher");
    // A pending file of a writer that first appeared after the writer was confirmed
    // waiting, other than the one it was confirmed with, is the writer queueing again.
    for (id, who, confirmed) in owners {
        let original = queued.get(id).map(|p| &p.name);
        let again: Vec<&String> = seen
            .iter()
            .filter(|(r, t)| {
                Some((r.pidns, r.pid)) == who && *t > confirmed && Some(&r.name) != original
            })
            .map(|(r, _)| &r.name)
            .collect();
        broken.check(again.is_empty(), || {
            format!("{id} queued again (it lost its place) with {again:?}")
        });
    }
    s.verdict(broken, &runs, &ids);
}

/// Lists `state` every few milliseconds until `stop`, and returns every pending file
/// it saw, with its record and the start of the listing that first showed it.
fn watch_pending(state: &Path, stop: &AtomicBool) -> Vec<(Record, Instant)> {
    let mut seen: Vec<(Record, Instant)> = Vec::new();
    while !stop.load(Ordering::Relaxed) {
        let listed = Instant::now();
        for e in fs::read_dir(state).into_iter().flatten().flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            if !name.starts_with(".pending_lock-") || seen.iter().any(|(r, _)| r.name == name) {
                continue;
            }
            if let Some(r) = Record::read(&e.path()) {
                seen.push((r, listed));
            }
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    seen
}

// ---------------------------------------------------------------------------------
// The checked unlink, with an owner paused past its lease

/// How the paused writer gives up.
#[derive(Debug, Clone, Copy)]
enum Cancel {
    /// Its `--timeout` passes while it is stopped.
    Timeout,
    /// It gets this signal while stopped (delivered when it continues).
    Signal(Signal),
}

/// The checked unlink, directly: X (our namespace) waits for R in W5 and is stopped
/// (SIGSTOP) past its lease; Y (its own namespace) rightly judges X dead by lease,
/// breaks X's `.master_lock` and makes its own; X continues after its deadline (or
/// with SIGTERM / SIGINT pending) and gives up. Before the fix X then unlinked
/// `.master_lock` without looking, which was Y's, and left the lock open to the next
/// writer while Y waited for R.
///
/// The promise: a writer that times out or is cancelled removes only its own files;
/// when X has exited (75 for the timeout, 128+N for signal N) `.master_lock` is still
/// Y's very file (same nonce), X never entered, and Y enters when R leaves.
fn paused_owner(ns: Ns, how: Cancel) {
    let s = Scene::new(ns, SHORT_LEASE);
    let mut broken = Broken::default();
    let r = s.reader();
    let (opts, code): (&[&str], i32) = match how {
        Cancel::Timeout => (&["--timeout", "3"], 75),
        Cancel::Signal(sig) => (&[], 128 + sig as i32),
    };
    let x = s.start("X", "write", Place::Host, opts, "0.3");
    s.wait_master_of(&x);
    // X's wait, and its deadline, started before it said it was waiting.
    let deadline = Instant::now() + Duration::from_millis(3500);
    x.holder.signal(Signal::SIGSTOP);
    let y = s.start("Y", "write", Place::Own, &[], "0.3");
    let ym = s.wait_master_of(&y);
    match how {
        Cancel::Timeout => std::thread::sleep(deadline.saturating_duration_since(Instant::now())),
        Cancel::Signal(sig) => x.holder.signal(sig),
    }
    x.holder.signal(Signal::SIGCONT);
    let x = x.wait();
    let m = s.master();
    broken.check(m.as_ref().is_some_and(|m| m.nonce == ym.nonce), || {
        format!(
            "X removed Y's .master_lock as it gave up: it is now {}, Y's was {ym}",
            show(m.as_ref())
        )
    });
    let r = r.holder.release();
    let y = y.wait();
    s.verdict(broken, &[("R", r, 0), ("X", x, code), ("Y", y, 0)], &["Y"]);
}
