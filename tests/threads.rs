//! Threads of one process take the lock like separate processes; guards move between
//! threads; a guard inherited by a forked child is not the child's to release.

#![allow(clippy::disallowed_methods)]

mod common;

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
    const N: usize = 16;
    let dir = tempdir();
    let lk = lock(dir.path());
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
    assert_eq!(seen.load(Ordering::SeqCst), N);
    assert!(lk.status().expect("status").is_free());
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
                tokens.lock().expect("tokens").push(g.token());
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
        assert!(w.token() > last);
        last = w.token();
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
