//! Threads of one process take the lock like separate processes; guards move between
//! threads; a guard inherited by a forked child is not the child's to release.

#![allow(clippy::disallowed_methods)]

mod common;

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Barrier, Mutex};
use std::time::{Duration, Instant};

use common::{LONG, lock, tempdir};
use nix::sys::wait::{WaitPidFlag, WaitStatus, waitpid};
use nix::unistd::{ForkResult, fork};
use rwdir::{DirLock, Error, ReadGuard, WriteGuard};

#[test]
fn child_entry() {
    common::child_entry();
}

const _: () = {
    const fn send_sync<T: Send + Sync + 'static>() {}
    send_sync::<DirLock>();
    send_sync::<ReadGuard>();
    send_sync::<WriteGuard>();
    send_sync::<Error>();
    send_sync::<rwdir::Status>();
};

#[test]
fn many_threads_hold_read_guards_at_once() {
    // Threads that read at once share reader's files (V11): as many files as threads at
    // most, and at least one.
    let files = threads_hold_read_guards_at_once(true);
    assert!((1..=16).contains(&files), "{files} reader's files");
    // Without sharing, each has its own.
    assert_eq!(threads_hold_read_guards_at_once(false), 16);
}

/// 16 threads hold read guards at once; returns the most reader's files `status` showed.
fn threads_hold_read_guards_at_once(share: bool) -> usize {
    const N: usize = 16;
    let dir = tempdir();
    let lk = rwdir::DirLock::builder(dir.path())
        .poll_interval(Duration::from_millis(1), Duration::from_millis(20))
        .share_readers(share)
        .build()
        .expect("lock");
    let inside = Arc::new(AtomicUsize::new(0));
    let seen = Arc::new(AtomicUsize::new(0));
    let threads: Vec<_> = (0..N)
        .map(|_| {
            let (lk, inside, seen) = (lk.clone(), inside.clone(), seen.clone());
            std::thread::spawn(move || {
                let g = lk.read().expect("read");
                inside.fetch_add(1, Ordering::SeqCst);
                // Hold until every thread is inside at the same time.
                let start = Instant::now();
                while inside.load(Ordering::SeqCst) < N {
                    assert!(start.elapsed() < LONG, "readers did not share");
                    std::thread::sleep(Duration::from_millis(1));
                }
                let readers = lk.status().expect("status").readers.len();
                seen.fetch_max(readers, Ordering::SeqCst);
                g.release().expect("release");
            })
        })
        .collect();
    for t in threads {
        t.join().expect("reader thread");
    }
    assert!(lk.status().expect("status").is_free());
    seen.load(Ordering::SeqCst)
}

/// Reader and writer threads run for a while; every grant checks, at once, that no
/// writer overlaps anyone, and writers record their tokens in grant order.
#[test]
fn writer_threads_exclude_reader_threads() {
    let dir = tempdir();
    let lk = lock(dir.path());
    let readers = Arc::new(AtomicUsize::new(0));
    let writers = Arc::new(AtomicUsize::new(0));
    let max_readers = Arc::new(AtomicUsize::new(0));
    let tokens = Arc::new(Mutex::new(Vec::new()));
    let reads = Arc::new(AtomicUsize::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let mut threads = Vec::new();
    for i in 0..6 {
        let (lk, readers, writers, max_readers, reads, stop) = (
            lk.clone(),
            readers.clone(),
            writers.clone(),
            max_readers.clone(),
            reads.clone(),
            stop.clone(),
        );
        threads.push(std::thread::spawn(move || {
            while !stop.load(Ordering::SeqCst) {
                let g = if i % 2 == 0 {
                    lk.read()
                } else {
                    match lk.try_read_for(Duration::from_millis(5)) {
                        Err(Error::TimedOut { .. }) => continue,
                        r => r,
                    }
                }
                .expect("read");
                let n = readers.fetch_add(1, Ordering::SeqCst) + 1;
                assert_eq!(
                    writers.load(Ordering::SeqCst),
                    0,
                    "a reader beside a writer"
                );
                max_readers.fetch_max(n, Ordering::SeqCst);
                reads.fetch_add(1, Ordering::SeqCst);
                std::thread::sleep(Duration::from_micros(500));
                readers.fetch_sub(1, Ordering::SeqCst);
                drop(g);
            }
        }));
    }
    for i in 0..3 {
        let (lk, readers, writers, tokens, stop) = (
            lk.clone(),
            readers.clone(),
            writers.clone(),
            tokens.clone(),
            stop.clone(),
        );
        threads.push(std::thread::spawn(move || {
            while !stop.load(Ordering::SeqCst) {
                let g = if i == 0 {
                    match lk.try_write() {
                        Err(Error::WouldBlock { .. }) => {
                            std::thread::sleep(Duration::from_millis(1));
                            continue;
                        }
                        r => r,
                    }
                } else {
                    lk.write()
                }
                .expect("write");
                assert_eq!(writers.fetch_add(1, Ordering::SeqCst), 0, "two writers");
                assert_eq!(readers.load(Ordering::SeqCst), 0, "a writer beside readers");
                tokens
                    .lock()
                    .expect("tokens")
                    .push(g.token().expect("token"));
                std::thread::sleep(Duration::from_micros(300));
                writers.fetch_sub(1, Ordering::SeqCst);
                drop(g);
                // Let readers in between writes (writers have priority).
                std::thread::sleep(Duration::from_millis(3));
            }
        }));
    }
    std::thread::sleep(Duration::from_millis(1500));
    stop.store(true, Ordering::SeqCst);
    for t in threads {
        t.join().expect("worker thread");
    }
    let tokens = tokens.lock().expect("tokens");
    assert!(tokens.len() >= 3, "writes: {}", tokens.len());
    assert!(reads.load(Ordering::SeqCst) >= 3, "reads");
    assert!(
        max_readers.load(Ordering::SeqCst) > 1,
        "reader threads never overlapped"
    );
    assert!(
        tokens.windows(2).all(|w| w[0] < w[1]),
        "tokens in grant order must strictly grow: {tokens:?}"
    );
    common::assert_only_token(dir.path());
}

/// Threads that try at the same instant: never two writers, never a writer beside a
/// reader.
#[test]
fn simultaneous_try_calls_respect_exclusion() {
    const N: usize = 8;
    let dir = tempdir();
    let lk = lock(dir.path());
    for round in 0..20 {
        let start = Arc::new(Barrier::new(N));
        let hold = Arc::new(Barrier::new(N));
        let threads: Vec<_> = (0..N)
            .map(|i| {
                let (lk, start, hold) = (lk.clone(), start.clone(), hold.clone());
                std::thread::spawn(move || {
                    start.wait();
                    // Round 0..9: writers only; then half readers.
                    let got = if round < 10 || i % 2 == 0 {
                        lk.try_write().map(|g| (1, 0, Some(g), None))
                    } else {
                        lk.try_read().map(|g| (0, 1, None, Some(g)))
                    };
                    let counts = got.as_ref().map_or((0, 0), |(w, r, _, _)| (*w, *r));
                    hold.wait(); // everyone still holds what it got
                    counts
                })
            })
            .collect();
        let (mut w, mut r) = (0, 0);
        for t in threads {
            let (a, b) = t.join().expect("thread");
            w += a;
            r += b;
        }
        assert!(w <= 1, "round {round}: {w} writers");
        assert!(
            w == 0 || r == 0,
            "round {round}: a writer beside {r} readers"
        );
        if round < 10 {
            assert_eq!(w, 1, "round {round}: writers alone: one must win");
        }
    }
    common::assert_only_token(dir.path());
}

#[test]
fn guards_move_between_threads() {
    let dir = tempdir();
    let lk = lock(dir.path());
    let w = lk.write().expect("write");
    let (tx, rx) = std::sync::mpsc::channel::<WriteGuard>();
    let t = std::thread::spawn(move || {
        let w = rx.recv().expect("guard");
        w.check().expect("still held in another thread");
        w.release().expect("release from another thread");
    });
    tx.send(w).expect("send");
    t.join().expect("thread");
    assert!(lk.status().expect("status").is_free());

    let r = lk.read().expect("read");
    std::thread::spawn(move || drop(r)).join().expect("thread");
    assert!(lk.status().expect("status").is_free());
}

/// What a forked child does with the guard it inherited.
#[derive(Clone, Copy, Debug)]
enum InChild {
    Drop,
    Release,
}

/// Forks; the child disposes of its copy of `guard` and exits with 0 if that reported
/// success. The parent keeps its own `guard` and gets it back with the child's exit code.
fn fork_and<G>(guard: G, how: InChild, release: fn(G) -> rwdir::Result<()>) -> (i32, G) {
    // SAFETY: the child only drops or releases its copy of the guard (which, in a child,
    // checks the pid and returns before touching any lock or file) and then calls
    // `_exit`, never returning into the test harness.
    match unsafe { fork() }.expect("fork") {
        ForkResult::Child => {
            let code = match how {
                InChild::Drop => {
                    drop(guard);
                    0
                }
                InChild::Release => i32::from(release(guard).is_err()),
            };
            // SAFETY: `_exit` ends the child without running atexit handlers or any
            // destructor of the parent's state.
            unsafe { nix::libc::_exit(code) }
        }
        ForkResult::Parent { child } => {
            let start = Instant::now();
            loop {
                match waitpid(child, Some(WaitPidFlag::WNOHANG)).expect("waitpid") {
                    WaitStatus::Exited(_, code) => return (code, guard),
                    WaitStatus::StillAlive => {
                        if start.elapsed() > LONG {
                            let _ = nix::sys::signal::kill(child, nix::sys::signal::SIGKILL);
                            panic!("forked child hung");
                        }
                        std::thread::sleep(Duration::from_millis(2));
                    }
                    other => panic!("forked child: {other:?}"),
                }
            }
        }
    }
}

#[test]
fn a_forked_child_never_releases_the_parents_lock() {
    let dir = tempdir();
    let lk = lock(dir.path());
    let me = Some(std::process::id());
    let mut last = 0;
    for how in [InChild::Drop, InChild::Release] {
        let w = lk.write().expect("write");
        assert!(w.token().expect("token") > last);
        last = w.token().expect("token");
        let (code, w) = fork_and(w, how, WriteGuard::release);
        assert_eq!(code, 0, "{how:?}: release in the child reports success");
        w.check().expect("the parent still holds the write lock");
        let st = lk.status().expect("status");
        assert_eq!(st.writer.and_then(|e| e.holder).map(|h| h.pid), me);
        assert!(lk.try_read().is_err(), "{how:?}: still exclusive");
        w.release().expect("the parent releases normally");

        let r = lk.read().expect("read");
        let (code, r) = fork_and(r, how, ReadGuard::release);
        assert_eq!(code, 0, "{how:?}");
        r.check().expect("the parent's reader file survives");
        let st = lk.status().expect("status");
        assert_eq!(st.readers.len(), 1);
        assert_eq!(st.readers[0].holder.as_ref().map(|h| h.pid), me);
        assert!(lk.try_write().is_err(), "{how:?}: the parent still reads");
        r.release().expect("the parent releases normally");
    }
    common::assert_only_token(dir.path());
}

// ---------------------------------------------------------------------------------
// A thread's own guards (lib.rs, "Threads")

/// Runs `f` on a thread of its own and returns what it returns, failing the test if it
/// does not return within [`LONG`]: a request that waits for its own thread's guard
/// would otherwise hang the test instead of failing it.
fn on_a_thread<T: Send + 'static>(what: &str, f: impl FnOnce() -> T + Send + 'static) -> T {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(f());
    });
    match rx.recv_timeout(LONG) {
        Ok(t) => t,
        Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {
            panic!("{what}: still waiting after {LONG:?}: a self-deadlock")
        }
        Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => panic!("{what}: panicked"),
    }
}

/// The facts of a `WouldDeadlock`, or a failure naming what came instead.
fn deadlock<T>(what: &str, r: rwdir::Result<T>) -> (rwdir::Kind, rwdir::Kind, PathBuf, String) {
    match r {
        Err(e @ Error::WouldDeadlock { .. }) => {
            assert_eq!(e.kind(), std::io::ErrorKind::Deadlock, "{what}");
            let msg = e.to_string();
            let Error::WouldDeadlock {
                want, held, path, ..
            } = e
            else {
                unreachable!()
            };
            (want, held, path, msg)
        }
        Err(e) => panic!("{what}: expected WouldDeadlock, got {e:?}"),
        Ok(_) => panic!("{what}: expected WouldDeadlock, got a guard"),
    }
}

#[test]
fn a_request_that_waits_for_its_own_threads_guard_fails_at_once() {
    use rwdir::Kind::{Read, Write};
    let dir = tempdir();
    let path = dir.path().to_path_buf();
    on_a_thread("own guards", move || {
        let lk = lock(&path);
        // Another handle on the same directory, through another path to it.
        let link = path.with_extension("link");
        std::os::unix::fs::symlink(&path, &link).expect("symlink to DIR");
        let other = DirLock::new(&link).expect("lock through the symlink");
        let files = || common::names(&common::state(&path));

        let r = lk.read().expect("read");
        let before = files();
        let long = Duration::from_secs(3600);
        for (what, res) in [
            ("write", lk.write().map(drop)),
            ("try_write", lk.try_write().map(drop)),
            ("try_write_for", lk.try_write_for(long).map(drop)),
            (
                "try_write_until",
                other.try_write_until(Instant::now() + long).map(drop),
            ),
            ("write through another handle", other.write().map(drop)),
        ] {
            let (want, held, p, msg) = deadlock(what, res);
            assert_eq!((want, held), (Write, Read), "{what}");
            assert_eq!(p, r.path(), "{what}: names the guard's file");
            assert!(
                msg.contains("this thread holds a read lock"),
                "{what}: {msg}"
            );
            assert!(msg.contains(&path.display().to_string()), "{what}: {msg}");
            assert_eq!(files(), before, "{what}: nothing was created");
        }
        // Several read guards while no writer waits are fine.
        let r2 = other.read().expect("a second read in the same thread");
        drop((r, r2));

        let w = lk.write().expect("write");
        let before = files();
        for (what, res, want) in [
            ("read", lk.read().map(drop), Read),
            ("try_read", other.try_read().map(drop), Read),
            ("try_read_for", lk.try_read_for(long).map(drop), Read),
            ("write", other.write().map(drop), Write),
        ] {
            let (w_, held, p, msg) = deadlock(what, res);
            assert_eq!((w_, held), (want, Write), "{what}");
            assert_eq!(p, w.path(), "{what}");
            assert!(
                msg.contains("this thread holds the write lock"),
                "{what}: {msg}"
            );
            assert_eq!(files(), before, "{what}: nothing was created");
        }
        // A downgrade is allowed; the read guard it gives then counts.
        let r = w.downgrade().expect("downgrade");
        let r2 = lk.read().expect("another read after the downgrade");
        let (_, held, p, _) = deadlock("write after downgrade", lk.write().map(drop));
        assert_eq!(held, Read);
        assert!(p == r.path() || p == r2.path());
        drop((r, r2));
        // Released guards count no more.
        drop(lk.write().expect("write once everything is released"));
    });
    assert!(lock(dir.path()).status().expect("status").is_free());
}

#[test]
fn a_second_read_while_a_writer_waits_for_the_first_fails_at_once() {
    let dir = tempdir();
    let lk = lock(dir.path());
    // The writer in another thread, then in another process.
    for writer_in in ["thread", "process"] {
        let (hold_tx, hold_rx) = std::sync::mpsc::channel::<()>();
        let (ready_tx, ready_rx) = std::sync::mpsc::channel();
        let (done_tx, done_rx) = std::sync::mpsc::channel();
        {
            let lk = lk.clone();
            std::thread::spawn(move || {
                let r = lk.read().expect("read");
                ready_tx.send(r.path()).expect("ready");
                // Ask again once the writer waits.
                hold_rx.recv().expect("go");
                let second = lk.read().map(drop);
                let again = lk.try_read_for(Duration::from_secs(3600)).map(drop);
                drop(r);
                let _ = done_tx.send((second, again));
            });
        }
        let mine = ready_rx.recv_timeout(LONG).expect("reader ready");
        let mut child = None;
        let writer = match writer_in {
            "thread" => {
                let lk = lk.clone();
                Some(std::thread::spawn(move || {
                    lk.write().and_then(|w| w.token())
                }))
            }
            _ => {
                let mut c = common::Child::spawn("W", dir.path());
                c.send("write");
                child = Some(c);
                None
            }
        };
        common::wait_until("the writer waits", dir.path(), || {
            !common::writer_pids(&lk).is_empty()
        });
        hold_tx.send(()).expect("go");
        let (second, again) = done_rx
            .recv_timeout(LONG)
            .unwrap_or_else(|_| panic!("writer in another {writer_in}: a self-deadlock"));
        for (what, res) in [("read", second), ("try_read_for", again)] {
            let what = format!("{what}, writer in another {writer_in}");
            let (_, held, p, msg) = deadlock(&what, res);
            assert_eq!(held, rwdir::Kind::Read, "{what}");
            assert_eq!(p, mine, "{what}");
            assert!(
                msg.contains("waits for the read lock this thread holds"),
                "{what}: {msg}"
            );
            assert_eq!(
                msg.contains("another thread of this process"),
                writer_in == "thread",
                "{what}: {msg}"
            );
        }
        // The first read released, the writer gets in.
        match (writer, child) {
            (Some(w), _) => assert!(w.join().expect("writer thread").is_ok()),
            (None, Some(mut c)) => {
                let reply = c.reply();
                assert!(reply.starts_with("ok write"), "{reply}");
                c.finish();
            }
            _ => unreachable!(),
        }
    }
    assert!(lk.status().expect("status").is_free());
}

#[test]
fn a_guard_of_another_thread_is_waited_for_as_if_another_process_held_it() {
    let dir = tempdir();
    let lk = lock(dir.path());
    let me = std::process::id();
    for held in ["read", "write"] {
        let (go_tx, go_rx) = std::sync::mpsc::channel::<()>();
        let (ready_tx, ready_rx) = std::sync::mpsc::channel();
        let holder = {
            let lk = lk.clone();
            std::thread::spawn(move || {
                let g: Box<dyn std::any::Any + Send> = match held {
                    "read" => Box::new(lk.read().expect("read")),
                    _ => Box::new(lk.write().expect("write")),
                };
                ready_tx.send(()).expect("ready");
                go_rx.recv().expect("release");
                drop(g);
            })
        };
        ready_rx.recv_timeout(LONG).expect("holder ready");
        // Not refused: it waits (here, until its time runs out), and says who holds.
        let lk2 = lk.clone();
        let err = on_a_thread("timed", move || {
            lk2.try_write_for(Duration::from_millis(100)).map(drop)
        })
        .expect_err("another thread holds the lock");
        assert_eq!(err.kind(), std::io::ErrorKind::TimedOut, "{held}: {err:?}");
        let msg = err.to_string();
        assert!(
            msg.contains(&format!(
                "held by this process: {} pid {me}",
                if held == "read" { "reader" } else { "writer" }
            )),
            "{held}: {msg}"
        );
        // And a waiting request is granted once the other thread releases.
        let want_read = held == "write";
        let waiter = {
            let lk = lk.clone();
            std::thread::spawn(move || match want_read {
                true => lk.read().map(drop),
                false => lk.write().map(drop),
            })
        };
        if !want_read {
            common::wait_until("the writer waits", dir.path(), || {
                !common::writer_pids(&lk).is_empty()
            });
        }
        go_tx.send(()).expect("go");
        holder.join().expect("holder thread");
        waiter.join().expect("waiter thread").expect("granted");
    }
    // Another process's guard is not "this process".
    let mut other = common::Child::spawn("O", dir.path());
    other.ok("write");
    let err = lk.try_read().map(drop).expect_err("held");
    assert!(!err.to_string().contains("this process"), "{err}");
    other.finish();
    assert!(lk.status().expect("status").is_free());
}

/// A guard of this thread found lost (its `.master_lock` removed, then taken by another
/// holder) stands in nobody's way: the next request waits for the new holder instead of
/// failing with `WouldDeadlock` on a file that is not ours.
#[test]
fn a_guard_found_lost_is_in_nobodys_way() {
    let dir = tempdir();
    let lk = lock(dir.path());
    let w = lk.write().expect("write");
    std::fs::remove_file(w.path()).expect("someone removes .master_lock");
    assert!(matches!(w.refresh(), Err(Error::LockLost { .. })));
    assert!(w.is_lost());
    // Another thread's writer takes the lock: `.master_lock` is there again, not ours.
    let (go_tx, go_rx) = std::sync::mpsc::channel::<()>();
    let (ready_tx, ready_rx) = std::sync::mpsc::channel();
    let holder = {
        let lk = lk.clone();
        std::thread::spawn(move || {
            let g = lk.write().expect("write after the loss");
            ready_tx.send(()).expect("ready");
            go_rx.recv().expect("release");
            drop(g);
        })
    };
    ready_rx.recv_timeout(LONG).expect("holder ready");
    for err in [
        lk.try_write_for(Duration::from_millis(50)).map(drop),
        lk.try_read_for(Duration::from_millis(50)).map(drop),
    ]
    .map(|r| r.expect_err("the other thread holds the lock"))
    {
        assert_eq!(err.kind(), std::io::ErrorKind::TimedOut, "{err:?}");
    }
    go_tx.send(()).expect("go");
    holder.join().expect("holder thread");
    drop(w);
    assert!(lk.status().expect("status").is_free());
}

#[test]
fn a_moved_guard_counts_as_its_takers_until_released() {
    let dir = tempdir();
    let lk = lock(dir.path());
    let r = lk.read().expect("read");
    let taken_here = r.path();
    let (tx, rx) = std::sync::mpsc::channel::<ReadGuard>();
    let (done_tx, done_rx) = std::sync::mpsc::channel::<()>();
    let keeper = std::thread::spawn(move || {
        let r = rx.recv().expect("guard");
        done_rx.recv().expect("release");
        drop(r);
    });
    tx.send(r).expect("send");
    // This thread gave it away, but it is still this thread's, as documented.
    let (_, held, path, _) = deadlock(
        "write after moving the guard away",
        lk.try_write_for(LONG).map(drop),
    );
    assert_eq!((held, path), (rwdir::Kind::Read, taken_here));
    done_tx.send(()).expect("go");
    keeper.join().expect("keeper");
    drop(
        lk.write()
            .expect("released in the other thread: no longer counts"),
    );

    // The other side of the rule: a guard received from a thread that took it counts
    // as that thread's, so the receiver is not told: it waits (here, runs out of time).
    let r = std::thread::scope(|s| s.spawn(|| lk.read()).join())
        .expect("thread")
        .expect("read");
    let err = lk
        .try_write_for(Duration::from_millis(50))
        .map(drop)
        .expect_err("held");
    assert_eq!(err.kind(), std::io::ErrorKind::TimedOut, "{err:?}");
    drop(r);
    assert!(lk.status().expect("status").is_free());
}

/// The environment variable that makes `forked_child_role` act (in a process of its own).
const FORK_ROLE: &str = "RWDIR_TEST_FORKED_HEARTBEAT";

/// Role of `a_forked_childs_guards_are_kept_fresh`, run in a fresh process of this test
/// binary: takes a lock (so the heartbeat thread exists), forks, and the child takes the
/// write lock on the directory in `FORK_ROLE` with a 300 ms lease, says its path on
/// stdout, and holds it for 3 s. Does nothing in a normal test run.
#[test]
fn forked_child_role() {
    let Some(dir) = std::env::var_os(FORK_ROLE) else {
        return;
    };
    let lk = DirLock::builder(&dir)
        .lease(Duration::from_millis(300))
        .build()
        .expect("lock");
    lk.read().expect("read").release().expect("release");
    // SAFETY: this process runs this one test; the child uses the library (which keeps
    // no lock of the parent's held across a fork: the heartbeat's state of a child is its
    // own) and ends with `_exit`.
    match unsafe { fork() }.expect("fork") {
        ForkResult::Child => {
            let w = lk.write().expect("write in the child");
            println!("{}", w.path().display());
            std::thread::sleep(Duration::from_secs(3));
            drop(w);
            // SAFETY: ends the child without running the parent's atexit handlers.
            unsafe { nix::libc::_exit(0) }
        }
        ForkResult::Parent { child } => {
            waitpid(child, None).expect("waitpid");
        }
    }
}

/// A forked child's guards are kept fresh by a heartbeat thread of its own: `fork`
/// copies only the calling thread, and before, the child's guards were beaten by nobody,
/// so a judge by lease (another host, another pid namespace) broke them once the lease
/// ran out (found by the Python package's fork tests, issue #16).
#[test]
fn a_forked_childs_guards_are_kept_fresh() {
    use std::io::BufRead;
    let dir = tempdir();
    let mut run = common::this_test_alone("forked_child_role", FORK_ROLE, dir.path())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("spawn");
    let out = std::io::BufReader::new(run.stdout.take().expect("stdout"));
    let mut lines = out.lines().map(|l| l.expect("line"));
    let path = lines
        .by_ref()
        .find_map(|l| {
            // After libtest's "test forked_child_role ... ".
            let at = l.find('/')?;
            l.contains(".master_lock").then(|| PathBuf::from(&l[at..]))
        })
        .expect("the child's lock path");
    let mtime = || {
        std::fs::symlink_metadata(&path)
            .and_then(|m| m.modified())
            .expect("the child's .master_lock")
    };
    // The refresh period is 100 ms: two renewals within 2 s.
    for _ in 0..2 {
        let since = mtime();
        let end = Instant::now() + Duration::from_secs(2);
        while mtime() <= since {
            assert!(
                Instant::now() < end,
                "the forked child's lock was not renewed"
            );
            std::thread::sleep(Duration::from_millis(10));
        }
    }
    // The rest of its output, or it fails writing it.
    lines.for_each(drop);
    assert!(run.wait().expect("wait").success());
}
