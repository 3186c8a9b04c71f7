//! `cleanup_all` removes what it can even when one entry cannot be removed.

use std::fs;

#[test]
fn cleanup_all_goes_on_past_an_entry_it_cannot_remove() {
    let dir = tempfile::tempdir().expect("tempdir");
    let lock = rwdir::DirLock::new(dir.path()).expect("lock");
    // A live reader's file (a leaked guard), to be removed.
    std::mem::forget(lock.read().expect("read"));
    let state = dir.path().join(".rwdir");
    // A non-empty directory at a queued writer's name, which is visited before readers,
    // cannot be removed.
    let blocker = state.join(".pending_lock-00000000-0000-4000-8000-000000000000-1");
    fs::create_dir(&blocker).expect("mkdir");
    fs::write(blocker.join("keep"), b"x").expect("write");
    let err = lock
        .cleanup_all()
        .expect_err("the directory cannot be removed");
    assert_eq!(err.path(), blocker, "{err}");
    let left: Vec<_> = fs::read_dir(&state)
        .expect("list")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with(".slave_lock-") && !n.ends_with("000000000000"))
        .collect();
    assert!(
        left.is_empty(),
        "the reader's file was removed all the same: {left:?}"
    );
    assert!(
        blocker.join("keep").exists(),
        "the directory's contents are kept"
    );
}
