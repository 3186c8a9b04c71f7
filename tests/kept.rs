//! A reader's file kept between reads (docs/protocol.md §2.1.1): a handle that reads
//! again keeps its released reader's file under a `.tmp-` name and links it to the next
//! reader's name; it lets it go when its reads meet other readers, and when it is
//! dropped; the first read of a handle removes the kept files of dead processes; a
//! writer waiting for the reader wakes at the rename that keeps it.

#![allow(clippy::disallowed_methods)]

mod common;

use std::fs;
use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::time::{Duration, Instant};

use common::{Child, all_names, kept_by_a_live_process, lock, state, tempdir};
use rwdir::DirLock;

#[test]
fn child_entry() {
    common::child_entry();
}

/// The `.tmp-` names in the state directory, live or not.
fn tmps(dir: &Path) -> Vec<String> {
    all_names(&state(dir))
        .into_iter()
        .filter(|n| n.starts_with(".tmp-"))
        .collect()
}

/// The inode of the one reader's file in the state directory.
fn reader_ino(dir: &Path) -> u64 {
    let readers: Vec<String> = all_names(&state(dir))
        .into_iter()
        .filter(|n| n.starts_with(".slave_lock-"))
        .collect();
    assert_eq!(readers.len(), 1, "{readers:?}");
    fs::symlink_metadata(state(dir).join(&readers[0]))
        .expect("reader's file")
        .ino()
}

fn ino(dir: &Path, name: &str) -> u64 {
    fs::symlink_metadata(state(dir).join(name))
        .expect("kept file")
        .ino()
}

fn read_once(lk: &DirLock) {
    lk.read().expect("read").release().expect("release");
}

/// Asserts that the state directory holds no `.tmp-` file: `why`.
fn assert_none_kept(dir: &Path, why: &str) {
    assert!(tmps(dir).is_empty(), "{why}: {:?}", all_names(&state(dir)));
}

/// A handle of `dir` that has read twice, and the name of the file it keeps since.
fn keeping(dir: &Path) -> (DirLock, String) {
    let lk = lock(dir);
    read_once(&lk);
    read_once(&lk);
    let kept = tmps(dir);
    assert_eq!(kept.len(), 1, "{:?}", all_names(&state(dir)));
    (lk, kept[0].clone())
}

#[test]
fn a_handle_that_reads_again_keeps_one_file_and_its_drop_removes_it() {
    let dir = tempdir();
    let lk = lock(dir.path());
    // A handle that has read once keeps nothing: a process that reads once leaves
    // nothing behind, however it exits.
    read_once(&lk);
    assert_none_kept(dir.path(), "a handle that has read once keeps nothing");
    read_once(&lk);
    let kept = tmps(dir.path());
    assert_eq!(kept.len(), 1, "the second release keeps the file");
    assert!(kept_by_a_live_process(&state(dir.path()), &kept[0]));
    // The next reads are made of that inode, under a reader's name of their own.
    let mut names = Vec::new();
    for _ in 0..3 {
        let r = lk.read().expect("read");
        assert_eq!(reader_ino(dir.path()), ino(dir.path(), &kept[0]));
        let st = lk.status().expect("status");
        assert_eq!(st.readers.len(), 1);
        assert_eq!(
            st.readers[0].holder.as_ref().map(|h| h.pid),
            Some(std::process::id())
        );
        names.push(st.readers[0].name.clone());
        r.check().expect("check");
        r.release().expect("release");
        assert_eq!(tmps(dir.path()), kept, "the same file, kept again");
    }
    names.dedup();
    assert_eq!(names.len(), 3, "a name of its own for each read: {names:?}");
    assert!(lk.status().expect("status").readers.is_empty());
    assert!(lk.try_write().is_ok(), "no reader is left");
    drop(lk);
    assert_eq!(
        all_names(&state(dir.path())),
        Vec::<String>::new(),
        "the handle's drop removes the kept file (and writes left no token: none asked)"
    );
}

#[test]
fn a_read_that_meets_another_reader_lets_the_kept_file_go() {
    let dir = tempdir();
    let (lk, _) = keeping(dir.path());
    // Another reader, with a file of its own (no sharing between the two handles).
    let other = DirLock::builder(dir.path())
        .share_readers(false)
        .build()
        .expect("lock");
    let held = other.read().expect("other read");
    read_once(&lk);
    assert_none_kept(dir.path(), "the read that met another lets its file go");
    held.release().expect("release");
    // Alone again: a file per read for 256 reads (`park::CROWD`) after the one that
    // met another reader, then kept again.
    for i in 1..256 {
        read_once(&lk);
        assert_none_kept(dir.path(), &format!("read {i} after the crowded one"));
    }
    read_once(&lk);
    assert_eq!(
        tmps(dir.path()).len(),
        1,
        "kept again after 256 reads alone"
    );
}

#[test]
fn a_dead_processs_kept_file_is_removed_by_the_next_handles_first_read() {
    let dir = tempdir();
    let mut c = Child::spawn("reader", dir.path());
    for _ in 0..2 {
        c.ok("read");
        c.ok("release");
    }
    let kept = tmps(dir.path());
    assert_eq!(kept.len(), 1, "{:?}", all_names(&state(dir.path())));
    assert!(kept_by_a_live_process(&state(dir.path()), &kept[0]));
    // Killed: it drops nothing, and its kept file stays behind.
    c.kill();
    assert_eq!(tmps(dir.path()), kept);
    assert!(!kept_by_a_live_process(&state(dir.path()), &kept[0]));
    let lk = lock(dir.path());
    let r = lk.read().expect("read");
    assert_none_kept(
        dir.path(),
        "the first read through a handle removes a dead process's kept file",
    );
    r.release().expect("release");
}

#[test]
fn a_writer_waiting_for_a_reader_wakes_when_the_reader_keeps_its_file() {
    let dir = tempdir();
    let lk = lock(dir.path());
    read_once(&lk);
    let r = lk.read().expect("read");
    // Polls every 30 s: only the event can let it in sooner.
    let w = DirLock::builder(dir.path())
        .poll_interval(Duration::from_secs(30), Duration::from_secs(30))
        .build()
        .expect("lock");
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let g = w.write();
        let _ = tx.send((g.map(drop), Instant::now()));
    });
    common::wait_until("the writer holds `.master_lock`", dir.path(), || {
        state(dir.path()).join(".master_lock").exists()
    });
    // Let the writer go to sleep on the directory's watch.
    std::thread::sleep(Duration::from_millis(100));
    let released = Instant::now();
    r.release().expect("release");
    assert_eq!(tmps(dir.path()).len(), 1, "the release kept the file");
    let (got, at) = rx.recv_timeout(Duration::from_secs(60)).expect("writer");
    got.expect("write");
    let waited = at.duration_since(released);
    assert!(
        waited < Duration::from_secs(10),
        "the writer waited {waited:?}: the rename that keeps the reader's file must wake it"
    );
}

#[test]
fn a_forked_child_leaves_its_parents_kept_file_alone() {
    use nix::sys::wait::{WaitStatus, waitpid};
    use nix::unistd::{ForkResult, fork};
    let dir = tempdir();
    let (lk, kept) = keeping(dir.path());
    let before = ino(dir.path(), &kept);
    // SAFETY: the child only reads through the lock and leaves with `_exit`.
    match unsafe { fork() }.expect("fork") {
        ForkResult::Child => {
            let ok = (0..3).all(|_| lk.read().and_then(|r| r.release()).is_ok());
            // SAFETY: ends the child at once, running no destructor of the parent's state.
            unsafe { nix::libc::_exit(i32::from(!ok)) };
        }
        ForkResult::Parent { child } => {
            assert_eq!(
                waitpid(child, None).expect("waitpid"),
                WaitStatus::Exited(child, 0)
            );
        }
    }
    assert!(
        tmps(dir.path()).contains(&kept),
        "the parent's kept file is still there"
    );
    assert_eq!(ino(dir.path(), &kept), before);
    assert!(
        kept_by_a_live_process(&state(dir.path()), &kept),
        "it still holds the parent's record: the child wrote nothing into it"
    );
    let r = lk.read().expect("read");
    assert_eq!(
        reader_ino(dir.path()),
        before,
        "and the parent reads with it"
    );
    r.release().expect("release");
    drop(lk);
    // The child's own kept file, left by its `_exit`, is a dead process's: the next
    // handle's first read removes it.
    let lk = lock(dir.path());
    read_once(&lk);
    assert_none_kept(dir.path(), "the child's kept file is removed");
}

#[test]
fn a_kept_file_removed_by_someone_else_is_let_go_and_the_read_goes_on() {
    let dir = tempdir();
    let (lk, kept) = keeping(dir.path());
    // `rwdir cleanup --all`, or a judge by lease in another pid namespace.
    fs::remove_file(state(dir.path()).join(&kept)).expect("remove the kept file");
    let r = lk
        .read()
        .expect("a read whose kept file is gone makes one of its own");
    assert_eq!(lk.status().expect("status").readers.len(), 1);
    r.release().expect("release");
    let again = tmps(dir.path());
    assert_eq!(again.len(), 1, "that read's file is kept in its place");
    assert_ne!(again[0], kept);
    let r = lk.read().expect("read");
    assert_eq!(reader_ino(dir.path()), ino(dir.path(), &again[0]));
    r.release().expect("release");
}
