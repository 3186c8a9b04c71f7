//! A process keeps few inotify instances, however many state directories it has waited
//! on and however many of its threads have waited: Linux allows 128 per user by default
//! (`fs.inotify.max_user_instances`), shared by every program of that user, and a process
//! that kept one per directory or per thread for ever would take them all (and its own
//! later waits, and other programs, would go without).
//!
//! One test in this file, so that the process's descriptors are its own to count.

#![allow(clippy::disallowed_methods)]

use std::sync::mpsc;
use std::time::Duration;

use rwdir::{DirLock, Error};

/// The idle state directories' watchers a process keeps (`notify::IDLE_WATCHERS`).
const IDLE_WATCHERS: usize = 8;
/// The threads of a process that keep an instance of their own (`notify::OWN_INSTANCES`).
const OWN_INSTANCES: usize = 16;

/// The inotify instances this process has open.
fn inotify_instances() -> usize {
    std::fs::read_dir("/proc/self/fd")
        .expect("/proc/self/fd")
        .filter_map(|e| std::fs::read_link(e.ok()?.path()).ok())
        .filter(|target| target.to_string_lossy().contains("inotify"))
        .count()
}

/// Waits for a write on `lock` from a new thread while this thread holds it, until the
/// wait times out: the waiting thread subscribes to the state directory and watches
/// `.master_lock` on an instance of its own.
fn wait_once_from_another_thread(lock: &DirLock) {
    let held = lock.write().expect("write");
    let waiter = {
        let lock = lock.clone();
        std::thread::spawn(move || lock.try_write_for(Duration::from_millis(30)).map(drop))
    };
    let waited = waiter.join().expect("the waiter");
    assert!(
        matches!(waited, Err(Error::TimedOut { .. })),
        "the lock was held: {waited:?}"
    );
    drop(held);
}

/// Holds a write lock on `lock` while `threads` threads each wait `wait` for it and time
/// out; returns the inotify instances this process has open once they all have, while
/// they are still alive (with whatever instance each kept).
fn instances_of_waiters(lock: &DirLock, threads: usize, wait: Duration) -> usize {
    let held = lock.write().expect("write");
    let (done_tx, done_rx) = mpsc::channel();
    let (end_tx, end_rx) = crossbeam_channel::bounded::<()>(0);
    let threads: Vec<_> = (0..threads)
        .map(|_| {
            let (lock, done_tx, end_rx) = (lock.clone(), done_tx.clone(), end_rx.clone());
            std::thread::spawn(move || {
                let waited = lock.try_write_for(wait).map(drop);
                done_tx.send(waited).expect("report");
                // Alive, with whatever instance it kept, until the count is taken.
                let _ = end_rx.recv();
            })
        })
        .collect();
    for _ in 0..threads.len() {
        let waited = done_rx.recv().expect("a waiter's report");
        assert!(
            matches!(waited, Err(Error::TimedOut { .. })),
            "the lock was held: {waited:?}"
        );
    }
    let open = inotify_instances();
    drop(end_tx);
    for t in threads {
        t.join().expect("a waiter");
    }
    drop(held);
    open
}

#[test]
fn waits_on_many_directories_and_from_many_threads_keep_few_inotify_instances() {
    let base = tempfile::tempdir().expect("tempdir");
    let before = inotify_instances();

    // A wait on one file (here `.master_lock`) uses the waiting thread's own instance
    // and no other: a herd of 64 waiting processes must not need 128, the default
    // limit of a user.
    let dir = base.path().join("one");
    std::fs::create_dir(&dir).expect("mkdir");
    let lock = DirLock::new(&dir).expect("DirLock::new");
    let one_wait = instances_of_waiters(&lock, 1, Duration::from_millis(30)) - before;
    assert_eq!(
        one_wait, 1,
        "inotify instances of a process whose one thread waited on one file"
    );

    // One wait on each of 24 directories, each from a thread that then ends (its own
    // instance goes with it): the watchers of the directories no one waits on any more
    // are let go of beyond the last few.
    for i in 0..24 {
        let dir = base.path().join(format!("d{i}"));
        std::fs::create_dir(&dir).expect("mkdir");
        let lock = DirLock::new(&dir).expect("DirLock::new");
        wait_once_from_another_thread(&lock);
    }
    let after_directories = inotify_instances() - before;
    assert!(
        after_directories <= IDLE_WATCHERS,
        "{after_directories} inotify instances kept after waiting on 24 directories \
         (at most {IDLE_WATCHERS})"
    );

    // 24 threads wait at once on one directory and stay alive after their waits: at most
    // `OWN_INSTANCES` of them keep an instance of their own; the others waited on the
    // directory's shared watch.
    let dir = base.path().join("shared");
    std::fs::create_dir(&dir).expect("mkdir");
    let lock = DirLock::new(&dir).expect("DirLock::new");
    let with_threads = instances_of_waiters(&lock, 24, Duration::from_millis(200)) - before;
    // The shared directory's watcher, the idle ones kept, and the threads' own.
    let bound = 1 + IDLE_WATCHERS + OWN_INSTANCES;
    assert!(
        with_threads <= bound,
        "{with_threads} inotify instances while 24 threads that waited are alive (at most \
         {bound})"
    );
}
