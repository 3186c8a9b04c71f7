//! Reads of one process share one reader's file (V11, docs/protocol-notes.md): a read
//! that finds a reader's file of its process still held joins it instead of making its
//! own, unless a writer holds or waits; the last guard out removes the file; a lost
//! file is lost for every guard on it and joined by nobody; a forked child never joins
//! its parent's file; reads that ask while another read of the process is on its way in
//! wait for it and join its file, as threads and as tasks, and stop waiting at their
//! deadline, at a cancellation, or (tasks) when dropped, without staying counted on the
//! file. Writers are real processes.

mod common;

use std::path::Path;
use std::sync::mpsc;
use std::sync::{Arc, Barrier};
use std::thread;
use std::time::Duration;

use common::{Child, lock, names, state, tempdir, wait_until};
use rwdir::{DirLock, Error, ReadGuard};

#[test]
fn child_entry() {
    common::child_entry();
}

/// The reader's files in `dir`'s state directory.
fn reader_files(dir: &Path) -> Vec<String> {
    names(&state(dir))
        .into_iter()
        .filter(|n| n.starts_with(".slave_lock-"))
        .collect()
}

/// `n` threads, each with a `DirLock` of its own (as independent parts of a program
/// have), take a read lock at once and hand their guards back.
fn read_on_threads(dir: &Path, n: usize) -> Vec<ReadGuard> {
    let barrier = Arc::new(Barrier::new(n));
    let handles: Vec<_> = (0..n)
        .map(|_| {
            let (dir, barrier) = (dir.to_path_buf(), Arc::clone(&barrier));
            thread::spawn(move || {
                let lock = lock(&dir);
                barrier.wait();
                lock.read().expect("read")
            })
        })
        .collect();
    handles
        .into_iter()
        .map(|h| h.join().expect("reader thread"))
        .collect()
}

#[test]
fn threads_that_read_while_a_read_is_held_share_its_file() {
    let dir = tempdir();
    let first = lock(dir.path()).read().expect("first read");
    let others = read_on_threads(dir.path(), 8);
    assert_eq!(reader_files(dir.path()), [file_name(&first.path())]);
    for g in &others {
        assert_eq!(g.path(), first.path(), "a thread made a file of its own");
    }
    let st = lock(dir.path()).status().expect("status");
    assert_eq!(st.readers.len(), 1, "{st:?}");
    // Out in any order: the file stays until the last guard leaves.
    drop(first);
    let mut others = others;
    while let Some(g) = others.pop() {
        assert_eq!(reader_files(dir.path()).len(), 1);
        g.check().expect("still held");
        g.release().expect("release");
    }
    assert!(reader_files(dir.path()).is_empty());
    assert!(lock(dir.path()).status().expect("status").is_free());
}

#[test]
fn without_sharing_each_read_has_its_file() {
    let dir = tempdir();
    let apart = DirLock::builder(dir.path())
        .share_readers(false)
        .build()
        .expect("lock");
    let a = apart.read().expect("read");
    let b = apart.read().expect("read");
    // Nor does a sharing handle join a file whose handle does not share.
    let c = lock(dir.path()).read().expect("read");
    let d = lock(dir.path()).read().expect("read");
    assert_ne!(a.path(), b.path());
    assert!(c.path() != a.path() && c.path() != b.path());
    assert_eq!(d.path(), c.path());
    assert_eq!(reader_files(dir.path()).len(), 3);
    // A different lease is a different record: no join either.
    let e = DirLock::builder(dir.path())
        .lease(Duration::from_secs(60))
        .build()
        .expect("lock")
        .read()
        .expect("read");
    assert_eq!(reader_files(dir.path()).len(), 4);
    drop((a, b, c, d, e));
    assert!(reader_files(dir.path()).is_empty());
}

#[test]
fn a_waiting_writer_stops_joins_at_once() {
    let dir = tempdir();
    let reader = lock(dir.path());
    let held = reader.read().expect("read");
    // A writer process queues behind our reader.
    let mut w = Child::spawn("writer", dir.path());
    w.send("write");
    wait_until("the writer waits", dir.path(), || {
        let st = reader.status().expect("status");
        st.writer.is_some() || !st.pending.is_empty()
    });
    // A new read of this process must not join our file: the writer goes first.
    let other = thread::spawn({
        let dir = dir.path().to_path_buf();
        move || {
            let l = lock(&dir);
            (
                l.try_read().err(),
                l.try_read_for(Duration::from_millis(100)).err(),
            )
        }
    })
    .join()
    .expect("thread");
    assert!(
        matches!(other.0, Some(Error::WouldBlock { .. })),
        "{other:?}"
    );
    assert!(matches!(other.1, Some(Error::TimedOut { .. })), "{other:?}");
    assert_eq!(
        reader_files(dir.path()).len(),
        1,
        "the failed joins left files"
    );
    // A read that waits gets in after the writer, with a file of its own.
    let waiting = thread::spawn({
        let dir = dir.path().to_path_buf();
        move || lock(&dir).read().expect("read after the writer").path()
    });
    held.release().expect("release");
    let granted = w.reply();
    assert!(granted.starts_with("ok write"), "{granted}");
    w.ok("release");
    let path = waiting.join().expect("thread");
    assert!(path.starts_with(state(dir.path())));
    w.finish();
}

#[test]
fn the_last_guard_out_removes_the_file() {
    let dir = tempdir();
    let l = lock(dir.path());
    let a = l.read().expect("read");
    let b = l.read().expect("read");
    assert_eq!(a.path(), b.path());
    a.release().expect("first out");
    assert!(b.path().exists());
    b.check().expect("still held");
    let mut w = Child::spawn("writer", dir.path());
    assert!(w.call("try_write").starts_with("err"), "a writer got in");
    b.release().expect("last out");
    assert!(reader_files(dir.path()).is_empty());
    w.ok("try_write");
    w.ok("release");
    w.finish();
}

#[test]
fn a_lost_file_is_lost_for_every_guard_and_joined_by_nobody() {
    let dir = tempdir();
    let l = lock(dir.path());
    let a = l.read().expect("read");
    let b = l.read().expect("read");
    std::fs::remove_file(a.path()).expect("someone removes the reader's file");
    // Nobody has noticed yet: the join itself must.
    let c = l.read().expect("read");
    assert_ne!(c.path(), a.path(), "joined a lost file");
    assert!(!c.is_lost());
    assert!(a.is_lost() && b.is_lost());
    assert!(matches!(b.check(), Err(Error::LockLost { .. })));
    assert!(matches!(a.release(), Err(Error::LockLost { .. })));
    assert!(matches!(b.release(), Err(Error::LockLost { .. })));
    assert_eq!(reader_files(dir.path()), [file_name(&c.path())]);
    c.release().expect("release");
}

#[test]
fn a_thread_counts_only_its_own_guards_in_its_way() {
    let dir = tempdir();
    let l = lock(dir.path());
    let mine = l.read().expect("read");
    let l2 = l.clone();
    let (after_leaving, while_holding) = thread::spawn(move || {
        // Joined and left: the file is still held, by the main thread, which this
        // thread waits for as for anyone else.
        l2.read().expect("join").release().expect("leave");
        let after_leaving = l2.try_write_for(Duration::from_millis(50)).err();
        // Joined and holding: its own guard is in its way.
        let g = l2.read().expect("join");
        let while_holding = l2.write().err();
        drop(g);
        (after_leaving, while_holding)
    })
    .join()
    .expect("thread");
    assert!(
        matches!(after_leaving, Some(Error::TimedOut { .. })),
        "{after_leaving:?}"
    );
    assert!(
        matches!(while_holding, Some(Error::WouldDeadlock { .. })),
        "{while_holding:?}"
    );
    drop(mine);
    assert!(l.status().expect("status").is_free());
}

/// The environment variable that makes `forked_child_role` act (in a process of its own).
const FORK_ROLE: &str = "RWDIR_TEST_SHARE_FORK";

/// A forked child makes a reader's file of its own, never joins its parent's. The fork
/// is made in a process of this test binary that runs that one test
/// (`forked_child_role`): forked from the usual run, with other tests' threads inside
/// the library, the child could inherit a lock one of them held (found when the child
/// hung in `owned::find`, 2026-12-03).
#[test]
fn a_forked_child_makes_a_file_of_its_own() {
    let dir = tempdir();
    let out = common::this_test_alone("forked_child_role", FORK_ROLE, dir.path())
        .output()
        .expect("run the role");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && text.contains("forked child: own file"),
        "{}\n{}\n{}",
        out.status,
        text,
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(reader_files(dir.path()).is_empty());
}

/// Role of `a_forked_child_makes_a_file_of_its_own`: holds a read lock on the directory
/// in `FORK_ROLE`, forks, and the child takes a read lock and says whether its file is
/// its parent's. Does nothing in a normal test run.
#[test]
fn forked_child_role() {
    use nix::sys::wait::{WaitPidFlag, WaitStatus, waitpid};
    use nix::unistd::{ForkResult, fork};
    let Some(dir) = std::env::var_os(FORK_ROLE) else {
        return;
    };
    let l = lock(Path::new(&dir));
    let parents = l.read().expect("read");
    // SAFETY: this process runs this one test, so no other thread is inside the library
    // at the fork (the heartbeat thread locks its state only while it beats, every
    // lease / 3); the child takes a read lock, compares two paths and calls `_exit`,
    // never returning into the test harness.
    match unsafe { fork() }.expect("fork") {
        ForkResult::Child => {
            let code = match l.read() {
                Ok(g) if g.path() != parents.path() => 0,
                Ok(_) => 1,
                Err(_) => 2,
            };
            // SAFETY: ends the child without running the parent's destructors.
            unsafe { nix::libc::_exit(code) }
        }
        ForkResult::Parent { child } => {
            let end = std::time::Instant::now() + Duration::from_secs(60);
            let status = loop {
                match waitpid(child, Some(WaitPidFlag::WNOHANG)).expect("waitpid") {
                    WaitStatus::StillAlive if std::time::Instant::now() < end => {
                        thread::sleep(Duration::from_millis(5));
                    }
                    WaitStatus::StillAlive => {
                        let _ = nix::sys::signal::kill(child, nix::sys::signal::SIGKILL);
                        panic!("the forked child hung");
                    }
                    other => break other,
                }
            };
            assert_eq!(
                status,
                WaitStatus::Exited(child, 0),
                "1: the child joined its parent's file, 2: it failed"
            );
        }
    }
    parents.check().expect("the parent still holds its lock");
    println!("forked child: own file");
}

/// Whether thread `tid` of this process is asleep (state `S` in /proc): blocked in
/// its acquisition, the readiness the tests below wait for.
fn asleep(tid: i32) -> bool {
    std::fs::read_to_string(format!("/proc/self/task/{tid}/stat"))
        .ok()
        .and_then(|s| {
            s.rsplit_once(')')
                .map(|(_, rest)| rest.trim_start().starts_with('S'))
        })
        .unwrap_or(false)
}

/// Runs `f` with a `DirLock` of its own on a new thread; returns the thread's id, once
/// the thread has it, and the channel `f`'s result comes on.
fn on_thread<T: Send + 'static>(
    dir: &Path,
    f: impl FnOnce(&DirLock) -> T + Send + 'static,
) -> (i32, mpsc::Receiver<T>) {
    let (tid_tx, tid_rx) = mpsc::channel();
    let (tx, rx) = mpsc::channel();
    let dir = dir.to_path_buf();
    thread::spawn(move || {
        let l = lock(&dir);
        tid_tx.send(nix::unistd::gettid().as_raw()).expect("send");
        let _ = tx.send(f(&l));
    });
    (tid_rx.recv().expect("thread id"), rx)
}

/// Waits (up to a minute) for a result of `on_thread`.
fn result<T>(rx: &mpsc::Receiver<T>, what: &str) -> T {
    rx.recv_timeout(Duration::from_secs(60))
        .unwrap_or_else(|e| panic!("{what}: {e}"))
}

#[test]
fn reads_that_ask_while_a_read_is_on_its_way_in_join_its_file() {
    let dir = tempdir();
    let mut w = Child::spawn("writer", dir.path());
    w.ok("write");
    // Four reads ask while the writer holds, one after the other: the first is on its
    // way in (waiting in R1), the others wait for it. None holds a file to join.
    let mut reads = Vec::new();
    for _ in 0..4 {
        let (tid, rx) = on_thread(dir.path(), |l| l.read().expect("read"));
        wait_until("the read waits", dir.path(), || asleep(tid));
        reads.push(rx);
    }
    assert!(reader_files(dir.path()).is_empty());
    w.ok("release");
    let guards: Vec<ReadGuard> = reads.iter().map(|rx| result(rx, "read")).collect();
    assert_eq!(
        reader_files(dir.path()).len(),
        1,
        "the reads came in with files of their own"
    );
    for g in &guards {
        assert_eq!(g.path(), guards[0].path());
        g.check().expect("held");
    }
    drop(guards);
    assert!(reader_files(dir.path()).is_empty());
    w.finish();
}

#[test]
fn a_read_waiting_for_another_keeps_its_own_deadline() {
    let dir = tempdir();
    let mut w = Child::spawn("writer", dir.path());
    w.ok("write");
    // The first read is on its way in, for 300 ms at most ...
    let (first, first_rx) = on_thread(dir.path(), |l| {
        l.try_read_for(Duration::from_millis(300)).map(|g| g.path())
    });
    wait_until("the first read waits", dir.path(), || asleep(first));
    // ... a second waits for it, for as long as it takes ...
    let (second, second_rx) = on_thread(dir.path(), |l| l.read().map(|g| (g.path(), g)));
    wait_until("the second read waits", dir.path(), || asleep(second));
    // ... a `try_read` does not wait for it, and a read with a deadline waits no longer.
    let (_, try_rx) = on_thread(dir.path(), |l| l.try_read().err());
    let (_, short_rx) = on_thread(dir.path(), |l| {
        l.try_read_for(Duration::from_millis(50)).err()
    });
    let tried = result(&try_rx, "try_read");
    assert!(matches!(tried, Some(Error::WouldBlock { .. })), "{tried:?}");
    let short = result(&short_rx, "try_read_for");
    assert!(matches!(short, Some(Error::TimedOut { .. })), "{short:?}");
    // The first gives up: the second goes on by itself, and gets in after the writer.
    let first = result(&first_rx, "the first read");
    assert!(matches!(first, Err(Error::TimedOut { .. })), "{first:?}");
    assert!(
        reader_files(dir.path()).is_empty(),
        "a failed read left a file"
    );
    assert!(
        second_rx.try_recv().is_err(),
        "the second read got in past the writer"
    );
    w.ok("release");
    let (path, g) = result(&second_rx, "the second read").expect("read after the writer");
    assert_eq!(reader_files(dir.path()), [file_name(&path)]);
    drop(g);
    w.finish();
}

#[test]
fn a_read_waiting_for_another_can_be_cancelled() {
    let dir = tempdir();
    let mut w = Child::spawn("writer", dir.path());
    w.ok("write");
    // The first read is on its way in, with no cancel handle ...
    let (first, first_rx) = on_thread(dir.path(), |l| l.read().map(|g| g.path()));
    wait_until("the first read waits", dir.path(), || asleep(first));
    // ... a second, whose lock has one, waits for it ...
    let cancel = rwdir::Cancel::new();
    let (tid_tx, tid_rx) = mpsc::channel();
    let (tx, second_rx) = mpsc::channel();
    let (d, c) = (dir.path().to_path_buf(), cancel.clone());
    thread::spawn(move || {
        let l = cancellable(&d, &c);
        tid_tx.send(nix::unistd::gettid().as_raw()).expect("send");
        let _ = tx.send(l.read().map(drop));
    });
    let second = tid_rx.recv().expect("thread id");
    wait_until("the second read waits", dir.path(), || asleep(second));
    // ... and gives up when cancelled, although the first still waits (within a
    // generous bound: the promise is one polling pause, 20 ms here).
    cancel.cancel();
    let second = second_rx
        .recv_timeout(Duration::from_secs(10))
        .expect("the cancelled read still waits");
    assert!(matches!(second, Err(Error::Cancelled { .. })), "{second:?}");
    assert!(
        first_rx.try_recv().is_err(),
        "the first read got in past the writer"
    );
    w.ok("release");
    let path = result(&first_rx, "the first read").expect("read after the writer");
    assert!(reader_files(dir.path()).is_empty(), "{path:?} stayed");
    w.finish();
}

#[cfg(feature = "tokio")]
#[test]
fn tasks_share_a_file_too() {
    let dir = tempdir();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let paths: Vec<std::path::PathBuf> = rt.block_on(async {
        let l = lock(dir.path());
        let a = l.read_async().await.expect("read");
        let b = l.read_async().await.expect("read");
        let paths = vec![a.path(), b.path()];
        drop((a, b));
        paths
    });
    assert_eq!(paths[0], paths[1]);
    assert!(reader_files(dir.path()).is_empty());
}

/// Polls `fut` once, as a runtime would when it first runs the task: a read of a task
/// registers (on its way in, or waiting for one that is) at its first poll.
#[cfg(feature = "tokio")]
async fn poll_once<F: std::future::Future>(fut: &mut std::pin::Pin<&mut F>) -> bool {
    std::future::poll_fn(|cx| std::task::Poll::Ready(fut.as_mut().poll(cx).is_pending())).await
}

/// A lock whose waits end when `cancel` is cancelled (fast polling, as [`lock`]).
fn cancellable(dir: &Path, cancel: &rwdir::Cancel) -> DirLock {
    DirLock::builder(dir)
        .poll_interval(Duration::from_millis(1), Duration::from_millis(20))
        .cancel(cancel)
        .build()
        .expect("build lock")
}

/// Runs `f` on a current-thread runtime with a new directory whose write lock a writer
/// process holds; `f` has it release (`ok("release")`) and hands it back. Then no
/// reader's file may be left.
#[cfg(feature = "tokio")]
fn behind_a_writer<F>(f: impl FnOnce(std::path::PathBuf, Child) -> F)
where
    F: std::future::Future<Output = Child>,
{
    let dir = tempdir();
    let mut w = Child::spawn("writer", dir.path());
    w.ok("write");
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let w = rt.block_on(f(dir.path().to_path_buf(), w));
    assert!(
        reader_files(dir.path()).is_empty(),
        "a reader's file is left"
    );
    w.finish();
}

/// Waits (up to a minute) for a task's read.
#[cfg(feature = "tokio")]
async fn within_a_minute<T>(f: impl std::future::Future<Output = T>, what: &str) -> T {
    tokio::time::timeout(Duration::from_secs(60), f)
        .await
        .unwrap_or_else(|_| panic!("{what}: still waiting after a minute"))
}

#[cfg(feature = "tokio")]
#[test]
fn tasks_that_ask_while_a_task_is_on_its_way_in_join_its_file() {
    behind_a_writer(|dir, mut w| async move {
        // Four reads ask while the writer holds: the first is on its way in, the
        // others wait for it, each a task of its own that runs again only when woken.
        let l = lock(&dir);
        let first = l.read_async();
        tokio::pin!(first);
        assert!(poll_once(&mut first).await);
        let mut tasks = Vec::new();
        for _ in 0..3 {
            let l = l.clone();
            let mut read = Box::pin(async move { l.read_async().await });
            assert!(poll_once(&mut read.as_mut()).await);
            tasks.push(tokio::spawn(read));
        }
        assert!(reader_files(&dir).is_empty());
        w.ok("release");
        let mut guards = vec![first.await.expect("read")];
        for t in tasks {
            let read = within_a_minute(t, "a task waiting for the first").await;
            guards.push(read.expect("task").expect("read"));
        }
        assert_eq!(
            reader_files(&dir).len(),
            1,
            "the tasks came in with files of their own"
        );
        for g in &guards {
            assert_eq!(g.path(), guards[0].path());
            g.check().expect("held");
        }
        w
    });
}

#[cfg(feature = "tokio")]
#[test]
fn a_task_that_stops_waiting_for_another_is_not_counted_on_its_file() {
    behind_a_writer(|dir, mut w| async move {
        let l = lock(&dir);
        let mut first = Box::pin(l.read_async());
        let mut early = Box::pin(l.read_async());
        let mut late = Box::pin(l.read_async());
        assert!(poll_once(&mut first.as_mut()).await);
        assert!(poll_once(&mut early.as_mut()).await && poll_once(&mut late.as_mut()).await);
        // One waiting task is dropped before the first read gets in, the other after
        // it got in and counted both in on its file, before it ran again.
        drop(early);
        w.ok("release");
        let g = first.await.expect("read");
        drop(late);
        // The guard is the file's only one again: its release is the last one out, and
        // reports the file lost when it was removed behind its back (as a `cleanup
        // --all` would); a release that thinks another guard still holds reports
        // nothing.
        assert_eq!(reader_files(&dir), [file_name(&g.path())]);
        std::fs::remove_file(g.path()).expect("remove the reader's file");
        let released = g.release();
        assert!(
            matches!(released, Err(Error::LockLost { .. })),
            "a dropped wait is still counted on the file: {released:?}"
        );
        w
    });
}

#[cfg(feature = "tokio")]
#[test]
fn a_dropped_task_on_its_way_in_lets_the_tasks_waiting_for_it_go_on() {
    behind_a_writer(|dir, mut w| async move {
        let l = lock(&dir);
        let mut first = Box::pin(l.read_async());
        let mut second = Box::pin(l.read_async());
        assert!(poll_once(&mut first.as_mut()).await && poll_once(&mut second.as_mut()).await);
        drop(first);
        assert!(reader_files(&dir).is_empty(), "a dropped read left a file");
        w.ok("release");
        let g = within_a_minute(second, "the task waiting for it")
            .await
            .expect("read");
        assert_eq!(reader_files(&dir), [file_name(&g.path())]);
        w
    });
}

#[cfg(feature = "tokio")]
#[test]
fn a_task_waiting_for_another_can_be_cancelled() {
    behind_a_writer(|dir, mut w| async move {
        let cancel = rwdir::Cancel::new();
        let (l, lc) = (lock(&dir), cancellable(&dir, &cancel));
        let mut first = Box::pin(l.read_async());
        assert!(poll_once(&mut first.as_mut()).await);
        let second = lc.read_async();
        cancel.cancel();
        let second = tokio::time::timeout(Duration::from_secs(10), second)
            .await
            .expect("the cancelled task still waits");
        assert!(matches!(second, Err(Error::Cancelled { .. })), "{second:?}");
        w.ok("release");
        drop(first.await.expect("read after the writer"));
        w
    });
}

fn file_name(p: &Path) -> String {
    p.file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default()
}
