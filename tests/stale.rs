//! Holders killed with SIGKILL at every phase never wedge the directory: the next
//! contender recovers at once (same-host judgement is exact, no lease involved), with
//! no cleanup call. `cleanup` removes only dead holders' files; `cleanup_all` keeps the
//! highest fencing token.

#![allow(clippy::disallowed_methods)]

mod common;

use std::collections::BTreeSet;
use std::fs;
use std::path::Path;
use std::time::{Duration, Instant};

use common::{Child, LONG, assert_only_token, lock, names, plant, state, tempdir, wait_until};
use rwdir::{DirLock, Holder, Kind, Liveness};
use uuid::Uuid;

#[test]
fn child_entry() {
    common::child_entry();
}

/// Recovery must be prompt: far below the 45 s default lease, which plays no role on
/// one host.
const PROMPT: Duration = Duration::from_secs(5);

/// A lock that never needs to sleep to recover stale files: any pause would show.
fn slow_poll_lock(dir: &Path) -> DirLock {
    DirLock::builder(dir)
        .poll_interval(Duration::from_secs(5), Duration::from_secs(5))
        .build()
        .expect("build lock")
}

/// The holder record of a child's reader file.
fn reader_record(lk: &DirLock, pid: u32) -> Holder {
    lk.status()
        .expect("status")
        .readers
        .into_iter()
        .filter_map(|e| e.holder)
        .find(|h| h.pid == pid)
        .expect("the child's reader record")
}

/// A holder record of a process that has exited: a child reads, then is killed. Its
/// reader file is left in place (a real dead reader).
fn dead_record(dir: &Path) -> Holder {
    let lk = lock(dir);
    let mut c = Child::spawn("doomed", dir);
    c.ok("read");
    let h = reader_record(&lk, c.pid());
    c.kill();
    h
}

/// `holder`'s identity in a record of another kind, with a fresh nonce: a file exactly
/// as that process would have written it.
fn forge(holder: &Holder, kind: Kind) -> String {
    let mut h = holder.clone();
    h.kind = kind;
    h.nonce = Uuid::new_v4();
    h.format()
}

fn slave_name() -> String {
    format!(".slave_lock-{}", Uuid::new_v4())
}

fn pending_name(ns: u64) -> String {
    format!(".pending_lock-{}-{ns}", Uuid::new_v4())
}

fn break_name(ns: u64) -> String {
    format!(".break-{ns}-{}", Uuid::new_v4())
}

#[test]
fn killed_reader_is_recovered_at_once() {
    let dir = tempdir();
    let lk = slow_poll_lock(dir.path());
    let mut c = Child::spawn("R", dir.path());
    c.ok("read");
    c.kill();
    let t = Instant::now();
    let w = lk.try_write().expect("the dead reader's file is removed");
    assert!(t.elapsed() < PROMPT);
    assert!(lk.status().expect("status").readers.is_empty());
    drop(w);
    assert_only_token(dir.path());
}

#[test]
fn killed_writer_is_recovered_at_once() {
    let dir = tempdir();
    let lk = slow_poll_lock(dir.path());
    let mut c = Child::spawn("W", dir.path());
    let token = Child::token_of(&c.ok("write"));
    c.kill();
    assert_eq!(
        lk.status().expect("status").writer.map(|e| e.liveness),
        Some(Liveness::Dead)
    );
    let t = Instant::now();
    let r = lk
        .try_read()
        .expect("a reader breaks the dead writer's lock");
    assert!(t.elapsed() < PROMPT);
    drop(r);
    let w = lk.try_write().expect("write");
    assert!(w.token().expect("token") > token);
    drop(w);

    // A blocked contender in another process recovers too.
    let mut c = Child::spawn("W2", dir.path());
    c.ok("write");
    let mut waiter = Child::spawn("R", dir.path());
    waiter.send("read");
    let t = Instant::now();
    c.kill();
    assert_eq!(waiter.reply(), "ok read 0");
    assert!(t.elapsed() < PROMPT, "took {:?}", t.elapsed());
    waiter.finish();
    assert_only_token(dir.path());
}

#[test]
fn killed_queued_writer_is_recovered_at_once() {
    let dir = tempdir();
    let lk = lock(dir.path());
    let slow = slow_poll_lock(dir.path());

    // Queued behind our writer: a pending file of a dead process.
    let g = lk.write().expect("write");
    let mut p = Child::spawn("P", dir.path());
    p.send("write");
    wait_until("P is queued", dir.path(), || {
        common::pending_pids(&lk) == [p.pid()]
    });
    p.kill();
    drop(g);
    let t = Instant::now();
    let r = slow.try_read().expect("a dead queued writer blocks nobody");
    assert!(t.elapsed() < PROMPT);
    drop(r);
    assert!(lk.status().expect("status").pending.is_empty());

    // Waiting for a reader to drain: a `.master_lock` of a dead process while the
    // reader still holds.
    let mut a = Child::spawn("A", dir.path());
    a.ok("read");
    let mut p = Child::spawn("P2", dir.path());
    p.send("write");
    wait_until("P2 owns .master_lock", dir.path(), || {
        common::writer_pids(&lk) == [p.pid()]
    });
    p.kill();
    let t = Instant::now();
    let r = slow
        .try_read()
        .expect("the dead draining writer's lock is broken");
    assert!(t.elapsed() < PROMPT);
    drop(r);
    a.ok("release");
    a.finish();
    drop(slow.try_write().expect("free"));
    assert_only_token(dir.path());
}

#[test]
fn dead_breakers_markers_and_temporaries_are_recovered() {
    let dir = tempdir();
    let lk = slow_poll_lock(dir.path());
    let st = state(dir.path());
    let mut w = Child::spawn("W", dir.path());
    let token = Child::token_of(&w.ok("write"));
    let master = lk.status().expect("status").writer.expect("writer");
    let dead = master.holder.expect("record");
    w.kill();
    // Breakers that died at B1..B3, older and younger than anyone now, and a
    // temporary file of a `put` that died before its `link`.
    let old = break_name(1);
    let young = break_name(common::now_ns() + 3_600_000_000_000);
    plant(&st.join(&old), forge(&dead, Kind::Break).as_bytes());
    plant(&st.join(&young), forge(&dead, Kind::Break).as_bytes());
    let tmp = format!(".tmp-{}", Uuid::new_v4());
    plant(&st.join(&tmp), forge(&dead, Kind::Write).as_bytes());

    let t = Instant::now();
    let g = lk.try_write().expect("dead breakers do not block");
    assert!(t.elapsed() < PROMPT);
    assert!(g.token().expect("token") > token);
    let left = names(&st);
    assert!(!left.contains(&old) && !left.contains(&young), "{left:?}");
    drop(g);
    // A temporary never blocks; only cleanup removes it.
    let removed: Vec<String> = lk
        .cleanup()
        .expect("cleanup")
        .into_iter()
        .map(|e| e.name)
        .collect();
    assert_eq!(removed, [tmp]);
    assert_only_token(dir.path());
}

#[test]
fn a_live_breaker_is_waited_for() {
    let dir = tempdir();
    let lk = lock(dir.path());
    let st = state(dir.path());
    // A live process's identity, for a breaker that is at work right now.
    let mut l = Child::spawn("L", dir.path());
    l.ok("read");
    let live = reader_record(&lk, l.pid());
    l.ok("release");
    let mut w = Child::spawn("W", dir.path());
    w.ok("write");
    w.kill();
    plant(
        &st.join(break_name(common::now_ns())),
        forge(&live, Kind::Break).as_bytes(),
    );

    let err = lk.try_write().expect_err("a live breaker is at work");
    assert_eq!(err.kind(), std::io::ErrorKind::WouldBlock);
    let err = lk
        .try_read_for(Duration::from_millis(200))
        .expect_err("a live breaker is at work");
    assert_eq!(err.kind(), std::io::ErrorKind::TimedOut);
    assert!(
        names(&st).contains(&".master_lock".to_string()),
        "the dead writer's file stays while another breaker works"
    );
    // The breaker dies: its marker is dead, the next contender breaks the lock.
    l.kill();
    let t = Instant::now();
    drop(lk.try_write_for(LONG).expect("recovered"));
    assert!(t.elapsed() < PROMPT);
    assert_only_token(dir.path());
}

/// Processes that take and release the lock in every way as fast as they can are
/// killed at arbitrary moments (holding, queued, announcing, breaking, allocating a
/// token ...), round after round, beside processes that finish normally. After each
/// round a new contender gets the lock promptly without any cleanup call, and once the
/// survivors left and `cleanup` ran, only the token file is left.
#[test]
fn kill_storm() {
    let dir = tempdir();
    let lk = lock(dir.path());
    let mut last_token = 0;
    let mut rng: u64 = 0x2545_f491_4f6c_dd1d ^ u64::from(std::process::id());
    let mut next = move |n: u64| {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        rng % n
    };
    for round in 0..15 {
        let mut churners: Vec<Child> = (0..4)
            .map(|i| Child::spawn(&format!("churn{i}"), dir.path()))
            .collect();
        for c in &mut churners {
            assert_eq!(c.call("churn"), "ok churning");
        }
        let mut survivor = Child::spawn("survivor", dir.path());
        let op = ["read", "write", "write_for 50", "read_for 50"][round % 4];
        survivor.send(op);
        std::thread::sleep(Duration::from_millis(20 + next(150)));
        for c in &mut churners {
            c.kill();
            std::thread::sleep(Duration::from_millis(next(5)));
        }
        let r = survivor.reply();
        if r.starts_with("ok") {
            survivor.ok("release");
        } else {
            assert!(r.starts_with("err TimedOut"), "round {round}: {r}");
        }
        survivor.finish();

        // No cleanup call: a new contender gets in promptly.
        let t = Instant::now();
        let g = lk.try_write_for(LONG).expect("recovered");
        assert!(
            t.elapsed() < PROMPT,
            "round {round}: took {:?}\n{}",
            t.elapsed(),
            common::dump(&state(dir.path()))
        );
        // The churners really took the lock meanwhile.
        assert!(
            g.token().expect("token") > last_token + 1,
            "round {round}: no churn"
        );
        last_token = g.token().expect("token");
        drop(g);
        lk.cleanup().expect("cleanup");
        assert_eq!(
            assert_only_token(dir.path()),
            Some(last_token),
            "round {round}"
        );
    }
}

#[test]
fn cleanup_removes_only_dead_holders_files() {
    let dir = tempdir();
    let lk = lock(dir.path());
    let st = state(dir.path());

    // Dead: a real killed reader (taken first: the live queued writer below would make
    // it wait), and further down one file of each kind forged from its identity.
    let dead = dead_record(dir.path());
    let dead_reader_file = names(&st);
    assert_eq!(dead_reader_file.len(), 1, "the killed reader's file");

    // Live: a reader in another process, and a queued writer's file forged from its
    // identity (alive as long as that process is).
    let mut a = Child::spawn("A", dir.path());
    a.ok("read");
    let live = reader_record(&lk, a.pid());
    let live_pending = pending_name(common::now_ns());
    plant(
        &st.join(&live_pending),
        forge(&live, Kind::Pending).as_bytes(),
    );
    let a_file = lk
        .status()
        .expect("status")
        .readers
        .into_iter()
        .find(|e| e.holder.as_ref().map(|h| h.pid) == Some(a.pid()))
        .expect("A's reader file")
        .name;

    let mut expect: BTreeSet<String> = dead_reader_file.into_iter().collect();
    for (name, kind) in [
        (slave_name(), Kind::Read),
        (pending_name(common::now_ns()), Kind::Pending),
        (break_name(common::now_ns()), Kind::Break),
        (format!(".tmp-{}", Uuid::new_v4()), Kind::Write),
        (".master_lock".to_string(), Kind::Write),
    ] {
        plant(&st.join(&name), forge(&dead, kind).as_bytes());
        expect.insert(name);
    }
    // Malformed: young (held) and older than the lease (dead).
    let young = slave_name();
    plant(&st.join(&young), b"garbage");
    let old = slave_name();
    plant(&st.join(&old), b"garbage");
    common::age(&st.join(&old), Duration::from_secs(3600));
    expect.insert(old);
    // Foreign names, even old ones.
    let foreign = [
        "notes.txt",
        ".nfs0001",
        ".master_lock.bak",
        ".slave_lock-not-a-uuid",
        ".token-007",
    ];
    for f in foreign {
        plant(&st.join(f), b"not a lock file");
        common::age(&st.join(f), Duration::from_secs(3600));
    }
    let token_before: Vec<String> = names(&st)
        .into_iter()
        .filter(|n| n.starts_with(".token-") && *n != ".token-007")
        .collect();

    let before = names(&st);
    let plan: BTreeSet<String> = lk
        .cleanup_plan()
        .expect("plan")
        .into_iter()
        .map(|e| e.name)
        .collect();
    assert_eq!(plan, expect);
    assert_eq!(names(&st), before, "a plan removes nothing");

    let removed: BTreeSet<String> = lk
        .cleanup()
        .expect("cleanup")
        .into_iter()
        .map(|e| e.name)
        .collect();
    assert_eq!(removed, expect);
    let mut kept: BTreeSet<String> = [a_file, live_pending, young].into();
    kept.extend(foreign.iter().map(|s| s.to_string()));
    kept.extend(token_before);
    assert_eq!(names(&st).into_iter().collect::<BTreeSet<_>>(), kept);
    for f in foreign {
        assert_eq!(fs::read(st.join(f)).expect("read"), b"not a lock file");
    }
    // A second run finds nothing more while A lives.
    assert!(lk.cleanup().expect("cleanup").is_empty());
    a.ok("release");
    a.finish();
}

#[test]
fn cleanup_all_keeps_the_highest_token() {
    let dir = tempdir();
    let lk = lock(dir.path());
    let st = state(dir.path());
    let mut top = 0;
    for _ in 0..3 {
        top = lk.write().expect("write").token().expect("token");
    }
    // A stale lower token (as after a crash between T2 and T4), a live reader in
    // another process, a leaked guard of ours, and foreign files.
    plant(&st.join(".token-1"), b"");
    let mut a = Child::spawn("A", dir.path());
    a.ok("read");
    std::mem::forget(lk.read().expect("read"));
    plant(&st.join("notes.txt"), b"keep");

    let removed = lk.cleanup_all().expect("cleanup_all");
    assert!(removed.iter().any(|e| e.name == ".token-1"), "{removed:?}");
    assert_eq!(
        names(&st),
        [format!(".token-{top}"), "notes.txt".to_string()],
        "everything but the highest token and foreign files is gone"
    );
    // The live reader finds its lock lost; the next writer's token is larger.
    let r = a.call("release");
    assert!(r.starts_with("err Other"), "{r}");
    let w = lk.try_write().expect("free");
    assert!(w.token().expect("token") > top);
    drop(w);
    a.finish();
    fs::remove_file(st.join("notes.txt")).expect("rm");
    assert_only_token(dir.path());
}

/// A lock whose pauses are far longer than [`PROMPT`] from the first: any recovery
/// within it came from an event, not from a poll.
fn deaf_lock(dir: &Path) -> DirLock {
    DirLock::builder(dir)
        .poll_interval(Duration::from_secs(20), Duration::from_secs(20))
        .build()
        .expect("build lock")
}

/// Runs `acquire` on a thread of its own and returns once that thread sleeps in
/// `ppoll` (the wait of an acquisition), with the channel its grant time comes on.
fn asleep_waiting(
    acquire: impl FnOnce() + Send + 'static,
) -> (
    std::thread::JoinHandle<()>,
    std::sync::mpsc::Receiver<Instant>,
) {
    let (tx, rx) = std::sync::mpsc::channel();
    let (tid_tx, tid_rx) = std::sync::mpsc::channel();
    let t = std::thread::spawn(move || {
        tid_tx.send(nix::unistd::gettid().as_raw()).expect("send");
        acquire();
        tx.send(Instant::now()).expect("send");
    });
    let tid = tid_rx.recv().expect("tid");
    let syscall = format!("/proc/self/task/{tid}/syscall");
    let ppoll = format!("{} ", nix::libc::SYS_ppoll);
    let deadline = Instant::now() + LONG;
    while !fs::read_to_string(&syscall).is_ok_and(|s| s.starts_with(&ppoll)) {
        assert!(Instant::now() < deadline, "the waiter never slept");
        std::thread::sleep(Duration::from_millis(1));
    }
    (t, rx)
}

/// The death of the process a waiter waits for is an event (a pidfd of a process of this
/// host and pid namespace), like the removal of its file: a waiter asleep behind a holder
/// or behind a queued writer that is SIGKILLed goes on at once, although its pauses are
/// 10-30 s long. (Before, it noticed only at its next poll.)
#[test]
fn a_waiter_is_woken_by_the_death_of_whom_it_waits_for() {
    let dir = tempdir();
    let lk = lock(dir.path());
    let deaf = std::sync::Arc::new(deaf_lock(dir.path()));

    // A writer, first in the queue, behind a holder that dies.
    let mut h = Child::spawn("H", dir.path());
    h.ok("write");
    let d = std::sync::Arc::clone(&deaf);
    let (waiter, granted) = asleep_waiting(move || drop(d.write().expect("write")));
    let t = Instant::now();
    h.kill();
    let at = granted
        .recv_timeout(PROMPT)
        .expect("the writer goes on at once");
    assert!(at - t < PROMPT, "took {:?}", at - t);
    waiter.join().expect("join");

    // A reader behind a queued writer that dies, while we hold: the reader removes the
    // dead writer's queue file at once, then waits for us.
    let holder = lk.write().expect("write");
    let mut q = Child::spawn("Q", dir.path());
    q.send("write");
    wait_until("Q is queued", dir.path(), || {
        common::pending_pids(&lk) == [q.pid()]
    });
    let d = std::sync::Arc::clone(&deaf);
    let (reader, granted) = asleep_waiting(move || drop(d.read().expect("read")));
    let t = Instant::now();
    q.kill();
    while !common::pending_pids(&lk).is_empty() {
        assert!(t.elapsed() < PROMPT, "the dead writer's queue file stayed");
        std::thread::sleep(Duration::from_millis(1));
    }
    drop(holder);
    granted
        .recv_timeout(PROMPT)
        .expect("the reader goes in after our release");
    reader.join().expect("join");
    assert_only_token(dir.path());
}

/// The pidfds this process has registered with an epoll instance (the tokio reactor's),
/// of the process `pid` only if given. A judgement keeps pidfds of the live processes it
/// probed (`sys::probe_pid`), unregistered: only a waiter's pidfd is on the reactor.
#[cfg(feature = "tokio")]
fn reactor_pidfds(pid: Option<u32>) -> usize {
    let fds: Vec<(String, String)> = fs::read_dir("/proc/self/fd")
        .expect("/proc/self/fd")
        .filter_map(|e| {
            let e = e.ok()?;
            let target = fs::read_link(e.path()).ok()?;
            Some((
                e.file_name().to_string_lossy().into_owned(),
                target.to_string_lossy().into_owned(),
            ))
        })
        .collect();
    let info = |fd: &str| fs::read_to_string(format!("/proc/self/fdinfo/{fd}")).unwrap_or_default();
    // "tfd:        7 events: ..." for each descriptor an epoll instance watches.
    let watched: Vec<String> = fds
        .iter()
        .filter(|(_, target)| target.contains("eventpoll"))
        .flat_map(|(fd, _)| {
            info(fd)
                .lines()
                .filter_map(|l| {
                    l.strip_prefix("tfd:")?
                        .split_whitespace()
                        .next()
                        .map(String::from)
                })
                .collect::<Vec<_>>()
        })
        .collect();
    fds.iter()
        .filter(|(fd, target)| target.contains("pidfd") && watched.contains(fd))
        .filter(|(fd, _)| {
            pid.is_none_or(|pid| {
                info(fd)
                    .lines()
                    .any(|l| l.split_whitespace().eq(["Pid:", &pid.to_string()]))
            })
        })
        .count()
}

/// The same for tasks waiting on the reactor (`write_async`, `read_async`, issue #15):
/// the holder's death wakes them through a pidfd registered with the reactor, not at
/// their next poll (20 s here).
#[cfg(feature = "tokio")]
#[test]
fn an_async_waiter_is_woken_by_the_death_of_whom_it_waits_for() {
    let dir = tempdir();
    let deaf = std::sync::Arc::new(deaf_lock(dir.path()));
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    for write in [true, false] {
        let mut h = Child::spawn("H", dir.path());
        h.ok("write");
        rt.block_on(async {
            let d = std::sync::Arc::clone(&deaf);
            let waiter = tokio::spawn(async move {
                if write {
                    drop(d.write_async().await.expect("write"));
                } else {
                    drop(d.read_async().await.expect("read"));
                }
                Instant::now()
            });
            // Asleep with the holder's pidfd (from its second wait on, after 10 ms).
            let deadline = Instant::now() + LONG;
            while reactor_pidfds(Some(h.pid())) == 0 {
                assert!(
                    Instant::now() < deadline,
                    "the waiter never watched the holder"
                );
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
            let t = Instant::now();
            h.kill();
            let at = tokio::time::timeout(PROMPT, waiter)
                .await
                .expect("the waiter goes on at once")
                .expect("join");
            assert!(at - t < PROMPT, "took {:?}", at - t);
            assert_eq!(reactor_pidfds(None), 0, "a pidfd was left on the reactor");
        });
    }
    assert_only_token(dir.path());
}
