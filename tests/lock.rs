//! Taking, sharing, timing out, downgrading and releasing the lock across processes;
//! fencing tokens; `status`; errors for bad directories.

#![allow(clippy::disallowed_methods)]

mod common;

use std::collections::BTreeSet;
use std::fs;
use std::io::ErrorKind;
use std::time::{Duration, Instant};

use common::{Child, Opts, assert_only_token, holder_pid, lock, state, tempdir, wait_until};
use rwdir::{DirLock, Error, Liveness};

#[test]
fn child_entry() {
    common::child_entry();
}

/// A lock whose polling pauses are far longer than any bound below: a call that
/// sleeps even once shows up as slow.
fn slow_poll_lock(dir: &std::path::Path) -> DirLock {
    DirLock::builder(dir)
        .poll_interval(Duration::from_secs(5), Duration::from_secs(5))
        .build()
        .expect("build lock")
}

/// One protocol attempt takes well under a millisecond; any sleep of the slow-poll
/// lock costs at least 2.5 s (5 s with ±50 % jitter). The bound leaves room for a busy
/// machine.
fn assert_quick(what: &str, start: Instant) {
    let took = start.elapsed();
    assert!(
        took < Duration::from_millis(500),
        "{what} took {took:?}: a try_* call must never sleep"
    );
}

#[test]
fn readers_share_across_processes() {
    let dir = tempdir();
    let lk = lock(dir.path());
    let mut a = Child::spawn("A", dir.path());
    let mut b = Child::spawn("B", dir.path());
    a.ok("read");
    b.ok("try_read");
    let me = lk
        .try_read()
        .expect("a third reader gets in while two others hold");

    let st = lk.status().expect("status");
    let pids: BTreeSet<u32> = st
        .readers
        .iter()
        .map(|e| e.holder.as_ref().expect("record").pid)
        .collect();
    assert_eq!(pids, BTreeSet::from([a.pid(), b.pid(), std::process::id()]));
    assert!(st.readers.iter().all(|e| e.liveness == Liveness::Alive));
    assert!(st.writer.is_none() && st.pending.is_empty());

    // From another thread: this thread's own reader would make it `WouldDeadlock`.
    let err = std::thread::scope(|s| s.spawn(|| lk.try_write().map(drop)).join())
        .expect("thread")
        .expect_err("a writer is excluded by readers");
    assert_eq!(err.kind(), ErrorKind::WouldBlock);
    assert!(
        [a.pid(), b.pid(), std::process::id()].contains(&holder_pid(&err).expect("named")),
        "{err}"
    );
    drop(me);
    a.finish();
    b.finish();
    assert_only_token(dir.path());
}

#[test]
fn writer_excludes_readers_and_writers() {
    let dir = tempdir();
    let lk = lock(dir.path());
    let mut w = Child::spawn("W", dir.path());
    let mut b = Child::spawn("B", dir.path());
    let token = Child::token_of(&w.ok("write"));

    let err = lk.try_read().expect_err("no reader while a writer holds");
    assert_eq!(err.kind(), ErrorKind::WouldBlock);
    assert_eq!(holder_pid(&err), Some(w.pid()), "{err}");
    let err = lk.try_write().expect_err("no second writer");
    assert_eq!(err.kind(), ErrorKind::WouldBlock);
    assert_eq!(holder_pid(&err), Some(w.pid()), "{err}");
    let r = b.call("try_read");
    assert!(
        r.starts_with(&format!("err WouldBlock holder={}", w.pid())),
        "{r}"
    );
    let r = b.call("try_write");
    assert!(r.starts_with("err WouldBlock"), "{r}");

    let st = lk.status().expect("status");
    let writer = st.writer.expect("writer shown");
    assert_eq!(writer.holder.as_ref().map(|h| h.pid), Some(w.pid()));
    assert_eq!(writer.liveness, Liveness::Alive);
    assert_eq!(st.token, Some(token));

    w.ok("release");
    let g = lk.try_write().expect("free again after release");
    assert!(g.token().expect("token") > token);
    drop(g);
    w.finish();
    b.finish();
    assert_only_token(dir.path());
}

#[test]
fn try_calls_never_sleep() {
    let dir = tempdir();
    let lk = slow_poll_lock(dir.path());

    // A writer holds.
    let mut w = Child::spawn("W", dir.path());
    w.ok("write");
    for _ in 0..3 {
        let t = Instant::now();
        let e = lk.try_read().expect_err("held");
        assert_quick("try_read against a writer", t);
        assert_eq!(e.kind(), ErrorKind::WouldBlock);
        let t = Instant::now();
        let e = lk.try_write().expect_err("held");
        assert_quick("try_write against a writer", t);
        assert_eq!(e.kind(), ErrorKind::WouldBlock);
    }
    w.ok("release");

    // A reader holds and a writer waits behind it.
    let mut r = Child::spawn("R", dir.path());
    r.ok("read");
    w.send("write");
    wait_until("the writer waits", dir.path(), || {
        common::writer_pids(&lk) == [w.pid()]
    });
    let t = Instant::now();
    let e = lk
        .try_read()
        .expect_err("a queued writer blocks new readers");
    assert_quick("try_read against a queued writer", t);
    assert_eq!(holder_pid(&e), Some(w.pid()), "{e}");
    let t = Instant::now();
    let e = lk.try_write().expect_err("held");
    assert_quick("try_write against a reader and a queued writer", t);
    assert_eq!(e.kind(), ErrorKind::WouldBlock);

    // Zero timeouts behave like try_*.
    let t = Instant::now();
    let e = lk.try_write_for(Duration::ZERO).expect_err("held");
    assert_quick("try_write_for(0)", t);
    assert_eq!(e.kind(), ErrorKind::TimedOut);

    r.ok("release");
    assert!(w.reply().starts_with("ok write"));
    w.finish();
    r.finish();
    assert_only_token(dir.path());
}

#[test]
fn timeouts_name_the_holder() {
    let dir = tempdir();
    let lk = lock(dir.path());
    let mut c = Child::spawn("C", dir.path());

    c.ok("read");
    let t = Instant::now();
    let err = lk
        .try_write_for(Duration::from_millis(300))
        .expect_err("a reader holds");
    let took = t.elapsed();
    assert!(
        took >= Duration::from_millis(300) && took < Duration::from_secs(3),
        "took {took:?}"
    );
    assert_eq!(err.kind(), ErrorKind::TimedOut);
    assert!(matches!(err, Error::TimedOut { .. }));
    assert_eq!(holder_pid(&err), Some(c.pid()), "{err}");
    assert_eq!(err.path(), dir.path());
    let msg = err.to_string();
    assert!(
        msg.contains("timed out") && msg.contains(&format!("pid {}", c.pid())),
        "{msg}"
    );
    // Our timed-out attempt left nothing behind but the token it took.
    assert_eq!(
        common::non_token_names(&state(dir.path())).len(),
        1,
        "only the reader's file:\n{}",
        common::dump(&state(dir.path()))
    );
    c.ok("release");

    c.ok("write");
    let t = Instant::now();
    let err = lk
        .try_read_until(Instant::now() + Duration::from_millis(300))
        .expect_err("a writer holds");
    let took = t.elapsed();
    assert!(
        took >= Duration::from_millis(300) && took < Duration::from_secs(3),
        "took {took:?}"
    );
    assert_eq!(err.kind(), ErrorKind::TimedOut);
    assert_eq!(holder_pid(&err), Some(c.pid()), "{err}");

    // A poll interval longer than the timeout is cut to the deadline.
    let slow = slow_poll_lock(dir.path());
    let t = Instant::now();
    let err = slow
        .try_write_for(Duration::from_millis(300))
        .expect_err("a writer holds");
    let took = t.elapsed();
    assert!(
        took >= Duration::from_millis(300) && took < Duration::from_secs(3),
        "took {took:?}"
    );
    assert_eq!(holder_pid(&err), Some(c.pid()), "{err}");

    c.ok("release");
    c.finish();
    assert_only_token(dir.path());
}

#[test]
fn failed_attempts_leave_no_files_of_their_own() {
    let dir = tempdir();
    let lk = lock(dir.path());
    let st = state(dir.path());
    let mut r = Child::spawn("R", dir.path());
    let mut w = Child::spawn("W", dir.path());

    r.ok("read");
    let with_reader = common::non_token_names(&st);
    for _ in 0..5 {
        assert!(lk.try_write().is_err());
        assert!(lk.try_write_for(Duration::from_millis(20)).is_err());
        let x = w.call("write_for 20");
        assert!(x.starts_with("err TimedOut"), "{x}");
        let x = w.call("try_write");
        assert!(x.starts_with("err WouldBlock"), "{x}");
        assert_eq!(common::non_token_names(&st), with_reader);
    }
    r.ok("release");

    w.ok("write");
    let with_writer = common::non_token_names(&st);
    for _ in 0..5 {
        assert!(lk.try_read().is_err());
        assert!(lk.try_read_for(Duration::from_millis(20)).is_err());
        assert!(lk.try_write_for(Duration::from_millis(20)).is_err());
        let x = r.call("read_for 20");
        assert!(x.starts_with("err TimedOut"), "{x}");
        assert_eq!(common::non_token_names(&st), with_writer);
    }
    w.ok("release");
    r.finish();
    w.finish();
    assert_only_token(dir.path());
}

/// While a writer downgrades, a writer queued in another process must not get in
/// between: the reader's file exists before `.master_lock` goes. The queued writer
/// polls without pausing, so it would see any gap.
#[test]
fn downgrade_lets_no_waiting_writer_in_between() {
    let dir = tempdir();
    let log = dir.path().join("events.log");
    let lk = lock(dir.path());
    let mut w = Child::spawn_with(
        "W",
        dir.path(),
        &Opts {
            poll_ms: Some((0, 0)),
            log: Some(log.clone()),
            ..Opts::default()
        },
    );
    for round in 0..25 {
        let g = lk.write().expect("write");
        let token = g.token().expect("token");
        common::log_event(&log, "T enter write");
        w.send("write");
        wait_until("W is queued", dir.path(), || {
            common::pending_pids(&lk) == [w.pid()]
        });
        common::log_event(&log, "T downgrade");
        let r = g.downgrade().expect("downgrade");
        r.check().expect("the downgraded reader holds");
        // W now owns `.master_lock` and waits for our reader to leave.
        wait_until("W takes .master_lock", dir.path(), || {
            let st = lk.status().expect("status");
            st.writer.and_then(|e| e.holder).map(|h| h.pid) == Some(w.pid())
        });
        let st = lk.status().expect("status");
        assert!(
            st.readers
                .iter()
                .any(|e| e.holder.as_ref().map(|h| h.pid) == Some(std::process::id())),
            "round {round}: our reader is shown"
        );
        if let Some(early) = w.reply_within(Duration::from_millis(50)) {
            panic!("round {round}: W entered while the downgraded reader held: {early}");
        }
        common::log_event(&log, "T exit");
        r.release().expect("release");
        let got = w.reply();
        assert!(got.starts_with("ok write"), "{got}");
        assert!(Child::token_of(&got) > token);
        w.ok("release");
    }
    // Every W enter follows T's exit of the same round.
    let ev = common::events(&log);
    let mut t_inside = false;
    for line in &ev {
        match line.as_str() {
            "T enter write" => t_inside = true,
            "T exit" => t_inside = false,
            l if l.starts_with("W enter") => assert!(!t_inside, "W entered inside T: {ev:#?}"),
            _ => {}
        }
    }
    w.finish();
    assert_only_token(dir.path());
}

#[test]
fn release_reports_a_lost_lock_and_removes_nothing() {
    let dir = tempdir();
    let lk = lock(dir.path());

    let r = lk.read().expect("read");
    fs::remove_file(r.path()).expect("remove the reader's file behind its back");
    assert!(r.check().is_err());
    let err = r.release().expect_err("the file was removed");
    assert!(matches!(err, Error::LockLost { .. }), "{err:?}");
    assert_eq!(err.kind(), ErrorKind::Other);

    // A writer whose `.master_lock` was removed, and which another process took since.
    let w = lk.write().expect("write");
    release_after_a_takeover(dir.path(), &lk, w);
    assert_only_token(dir.path());
}

/// Removes `w`'s `.master_lock` behind its back, as a judge by lease does when it finds
/// the holder stale (with its queue file, which goes stale with it: a writer that waited
/// keeps that file while it holds, V8), lets a child process take the write lock, and
/// checks that `w`'s release reports the loss and leaves the successor's files alone.
fn release_after_a_takeover(dir: &std::path::Path, lk: &DirLock, w: rwdir::WriteGuard) {
    let master = w.path();
    let mine = w.token().expect("token");
    fs::remove_file(&master).expect("remove .master_lock behind its back");
    for e in fs::read_dir(state(dir)).expect("list").flatten() {
        if e.file_name()
            .to_string_lossy()
            .starts_with(".pending_lock-")
        {
            fs::remove_file(e.path()).expect("remove the holder's queue file");
        }
    }
    let mut c = Child::spawn("C", dir);
    let t = Child::token_of(&c.ok("write"));
    assert!(t > mine);
    assert_eq!(w.token().expect("kept"), mine, "a token once given is kept");
    let err = w.release().expect_err("not ours any more");
    assert!(matches!(err, Error::LockLost { .. }), "{err:?}");
    assert_eq!(err.path(), master);
    let st = lk.status().expect("status");
    assert_eq!(
        st.writer.and_then(|e| e.holder).map(|h| h.pid),
        Some(c.pid()),
        "the successor's `.master_lock` must survive our release"
    );
    c.ok("release");
    c.finish();
}

/// This process's write lock, taken after waiting for child A's: A holds, our writer
/// queues and prepares its `.master_lock` (readiness: its prepared files, see
/// `prepared_files`), A releases. Returns A (to finish) and the guard.
fn write_after_waiting(dir: &std::path::Path, lk: &DirLock) -> (Child, rwdir::WriteGuard) {
    let mut a = Child::spawn("A", dir);
    a.ok("write");
    let waiter = {
        let lk = lk.clone();
        std::thread::spawn(move || lk.write())
    };
    wait_until("the waiter prepared its files", dir, || {
        common::prepared_files(std::process::id(), dir) >= 2
    });
    a.ok("release");
    let w = waiter.join().expect("join").expect("write after waiting");
    (a, w)
}

/// A writer that waited takes `.master_lock` from a file it prepared while waiting, and
/// its release compares the name with that file's inode without asking the file again:
/// it must still remove only its own `.master_lock`, never a successor's.
#[test]
fn a_writer_that_waited_also_releases_only_its_own_master() {
    let dir = tempdir();
    let lk = lock(dir.path());
    let (a, w) = write_after_waiting(dir.path(), &lk);
    release_after_a_takeover(dir.path(), &lk, w);
    a.finish();
    assert_only_token(dir.path());
}

/// V14 (docs/protocol-notes.md): the token is made the first time the holder asks for it,
/// then kept; a write that never asks leaves the token files as they were.
#[test]
fn a_token_is_made_only_when_asked_for() {
    let dir = tempdir();
    let lk = lock(dir.path());
    let tokens = || -> Vec<String> {
        fs::read_dir(state(dir.path()))
            .expect("list")
            .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
            .filter(|n| n.starts_with(".token-"))
            .collect()
    };
    drop(lk.write().expect("write"));
    assert!(tokens().is_empty(), "no token asked for, none made");
    let w = lk.write().expect("write");
    assert_eq!(w.token().expect("token"), 1);
    assert_eq!(w.token().expect("token"), 1, "asked again: the same one");
    drop(w);
    for _ in 0..3 {
        lk.write().expect("write").release().expect("release");
        lk.try_write().expect("write").release().expect("release");
    }
    assert_eq!(
        tokens(),
        [".token-1"],
        "writes that did not ask changed nothing"
    );
    assert_eq!(lk.write().expect("write").token().expect("token"), 2);
    assert_eq!(tokens(), [".token-2"]);
}

/// V14's check (W6 again after T2): a holder whose `.master_lock` was taken over by a
/// writer that asked for no token gets no token. T3 alone finds no later token there.
#[test]
fn no_token_for_a_holder_whose_lock_was_taken_over() {
    let dir = tempdir();
    let lk = lock(dir.path());
    assert_eq!(lk.write().expect("write").token().expect("token"), 1);
    let w = lk.write().expect("write");
    // A judge by lease would remove it this way (the holder paused past its lease).
    fs::remove_file(w.path()).expect("remove .master_lock behind its back");
    let (held, release) = (std::sync::mpsc::channel(), std::sync::mpsc::channel::<()>());
    let other = {
        let lk = lk.clone();
        std::thread::spawn(move || {
            let g = lk.write().expect("the successor's write");
            held.0.send(()).expect("send");
            release.1.recv().expect("recv");
            g.release().expect("the successor's release");
        })
    };
    held.1.recv().expect("the successor holds");
    let err = w.token().expect_err("no token for a lost lock");
    assert!(matches!(err, Error::LockLost { .. }), "{err:?}");
    assert!(w.is_lost());
    assert!(w.token().is_err(), "still lost");
    assert!(w.release().is_err(), "the release reports the loss");
    release.0.send(()).expect("send");
    other.join().expect("join");
    assert_eq!(lk.write().expect("write").token().expect("token"), 3);
}

#[test]
fn fencing_tokens_strictly_grow() {
    let dir = tempdir();
    let lk = lock(dir.path());
    let mut a = Child::spawn("A", dir.path());
    let mut b = Child::spawn("B", dir.path());
    let mut tokens = Vec::new();
    for i in 0..6 {
        match i % 3 {
            0 => {
                let g = lk.write().expect("write");
                tokens.push(g.token().expect("token"));
                // A downgrade keeps the grant; the next writer gets a new token.
                let r = g.downgrade().expect("downgrade");
                drop(r);
            }
            1 => {
                tokens.push(Child::token_of(&a.ok("write")));
                a.ok("release");
            }
            _ => {
                tokens.push(Child::token_of(&b.ok("try_write")));
                b.ok("release");
            }
        }
    }
    assert!(
        tokens.windows(2).all(|w| w[0] < w[1]),
        "tokens must strictly grow: {tokens:?}"
    );
    assert_eq!(lk.status().expect("status").token, tokens.last().copied());
    a.finish();
    b.finish();
    assert_eq!(assert_only_token(dir.path()), tokens.last().copied());
}

#[test]
fn status_shows_writer_pending_and_readers() {
    let dir = tempdir();
    let lk = lock(dir.path());
    let st = lk.status().expect("status of a fresh directory");
    assert!(st.is_free() && st.token.is_none());
    assert!(
        !state(dir.path()).exists(),
        "status must not create the state directory"
    );

    // R reads; W1 waits for R to leave (owning `.master_lock` already); W2 queues.
    let mut r = Child::spawn("R", dir.path());
    let mut w1 = Child::spawn("W1", dir.path());
    let mut w2 = Child::spawn("W2", dir.path());
    r.ok("read");
    w1.send("write");
    wait_until("W1 owns .master_lock", dir.path(), || {
        common::writer_pids(&lk) == [w1.pid()]
    });
    w2.send("write");
    wait_until("W2 is queued", dir.path(), || {
        common::pending_pids(&lk) == [w2.pid()]
    });
    let st = lk.status().expect("status");
    let pid = |e: &rwdir::Entry| e.holder.as_ref().map(|h| h.pid);
    let writer = st.writer.as_ref().expect("W1 shown as the writer");
    assert_eq!(pid(writer), Some(w1.pid()));
    assert_eq!(writer.liveness, Liveness::Alive);
    assert_eq!(writer.kind, rwdir::Kind::Write);
    assert_eq!(st.pending.len(), 1);
    assert_eq!(pid(&st.pending[0]), Some(w2.pid()));
    assert_eq!(st.pending[0].liveness, Liveness::Alive);
    assert_eq!(st.pending[0].kind, rwdir::Kind::Pending);
    assert!(
        st.pending[0]
            .describe()
            .contains(&format!("pid {}", w2.pid()))
    );
    assert_eq!(st.readers.len(), 1);
    assert_eq!(pid(&st.readers[0]), Some(r.pid()));
    assert_eq!(st.readers[0].liveness, Liveness::Alive);
    assert_eq!(st.readers[0].kind, rwdir::Kind::Read);
    assert_eq!(st.state_dir, state(dir.path()));
    assert!(!st.is_free());

    r.ok("release");
    let t1 = Child::token_of(&w1.reply());
    let st = lk.status().expect("status");
    assert_eq!(st.writer.as_ref().and_then(pid), Some(w1.pid()));
    assert_eq!(st.token, Some(t1));
    assert!(st.readers.is_empty());
    w1.ok("release");
    let t2 = Child::token_of(&w2.reply());
    assert!(t2 > t1);
    let st = lk.status().expect("status");
    assert_eq!(st.writer.as_ref().and_then(pid), Some(w2.pid()));
    assert!(st.pending.is_empty());
    w2.ok("release");
    assert!(lk.status().expect("status").is_free());
    r.finish();
    w1.finish();
    w2.finish();
}

#[test]
fn missing_directory_is_not_found_naming_it() {
    let dir = tempdir();
    let missing = dir.path().join("no-such-dir");
    let err = DirLock::new(&missing).expect_err("missing directory");
    assert_eq!(err.kind(), ErrorKind::NotFound);
    assert_eq!(err.path(), missing);
    assert!(
        err.to_string().contains(&missing.display().to_string()),
        "{err}"
    );
    let err = rwdir::cleanup(&missing).expect_err("missing directory");
    assert_eq!(err.kind(), ErrorKind::NotFound);
    assert!(!missing.exists(), "a lock never creates DIR");

    // A directory that vanishes after the lock was built.
    let gone = dir.path().join("gone");
    fs::create_dir(&gone).expect("mkdir");
    let lk = lock(&gone);
    fs::remove_dir(&gone).expect("rmdir");
    let err = lk.try_read().expect_err("vanished directory");
    assert_eq!(err.kind(), ErrorKind::NotFound);
    assert_eq!(err.path(), gone);
    let io: std::io::Error = err.into();
    assert_eq!(io.kind(), ErrorKind::NotFound);
}

#[test]
fn a_file_is_not_a_directory() {
    let dir = tempdir();
    let file = dir.path().join("plain");
    fs::write(&file, b"data").expect("write");
    let err = DirLock::new(&file).expect_err("a file");
    assert!(matches!(err, Error::NotADirectory { .. }), "{err:?}");
    assert_eq!(err.kind(), ErrorKind::NotADirectory);
    assert_eq!(err.path(), file);
    assert!(err.to_string().contains("plain"), "{err}");
    assert_eq!(fs::read(&file).expect("read"), b"data");
}

#[test]
fn symlinked_state_dir_is_refused_and_its_target_untouched() {
    let dir = tempdir();
    let target = tempdir();
    std::os::unix::fs::symlink(target.path(), state(dir.path())).expect("symlink");
    let lk = lock(dir.path());
    let check = |err: Error| {
        assert!(matches!(err, Error::NotADirectory { .. }), "{err:?}");
        assert_eq!(err.path(), state(dir.path()));
        assert!(err.to_string().contains(".rwdir"), "{err}");
    };
    check(lk.try_read().expect_err("symlinked .rwdir"));
    check(lk.try_write().expect_err("symlinked .rwdir"));
    check(lk.write().expect_err("symlinked .rwdir"));
    check(lk.status().expect_err("symlinked .rwdir"));
    check(lk.cleanup().expect_err("symlinked .rwdir"));
    check(lk.cleanup_all().expect_err("symlinked .rwdir"));
    assert!(common::names(target.path()).is_empty(), "target untouched");
    assert!(
        fs::symlink_metadata(state(dir.path()))
            .expect("still there")
            .file_type()
            .is_symlink()
    );
}

#[test]
fn custom_state_dir() {
    let dir = tempdir();
    let elsewhere = tempdir();
    let sd = elsewhere.path().join("locks");
    let lk = DirLock::builder(dir.path())
        .state_dir(&sd)
        .poll_interval(Duration::from_millis(1), Duration::from_millis(20))
        .build()
        .expect("build");
    let w = lk.write().expect("write");
    assert!(sd.join(".master_lock").exists());
    assert_eq!(w.path(), sd.join(".master_lock"));
    assert!(!state(dir.path()).exists(), "nothing in DIR/.rwdir");
    assert_eq!(lk.status().expect("status").state_dir, sd);

    // A child using the same state directory is excluded; one using the default is not
    // (it is a different lock).
    let mut same = Child::spawn_with(
        "same",
        dir.path(),
        &Opts {
            state_dir: Some(sd.clone()),
            ..Opts::default()
        },
    );
    let r = same.call("try_read");
    assert!(
        r.starts_with(&format!("err WouldBlock holder={}", std::process::id())),
        "{r}"
    );
    let mut other = Child::spawn("other", dir.path());
    other.ok("try_write");
    other.ok("release");
    drop(w);
    same.ok("try_read");
    same.finish();
    other.finish();

    // A state directory whose parent is missing.
    let bad = DirLock::builder(dir.path())
        .state_dir(elsewhere.path().join("missing/locks"))
        .build()
        .expect("build checks DIR only");
    let err = bad.try_read().expect_err("parent missing");
    assert_eq!(err.kind(), ErrorKind::NotFound);
    assert!(err.to_string().contains("missing"), "{err}");
}

// ---------------------------------------------------------------------------------
// The heartbeat: by the background thread, or by hand (`background_heartbeat(false)`)

fn mtime(path: &std::path::Path) -> std::time::SystemTime {
    fs::symlink_metadata(path)
        .and_then(|m| m.modified())
        .unwrap_or_else(|e| panic!("mtime of {}: {e}", path.display()))
}

/// A lock with a short lease (heartbeat period 100 ms) and no background heartbeat.
fn by_hand(dir: &std::path::Path) -> DirLock {
    DirLock::builder(dir)
        .lease(Duration::from_millis(300))
        .background_heartbeat(false)
        .build()
        .expect("build lock")
}

#[test]
fn refresh_renews_the_mtime_of_the_held_file() {
    let dir = tempdir();
    let lk = by_hand(dir.path());
    let r = lk.read().expect("read");
    let w_dir = tempdir();
    let w = by_hand(w_dir.path()).write().expect("write");
    for path in [r.path(), w.path()] {
        common::age(&path, Duration::from_secs(60));
    }
    let old_r = mtime(&r.path());
    let old_w = mtime(&w.path());
    r.refresh().expect("refresh the reader");
    w.refresh().expect("refresh the writer");
    assert!(
        mtime(&r.path()) > old_r,
        "the reader's mtime was not renewed"
    );
    assert!(
        mtime(&w.path()) > old_w,
        "the writer's mtime was not renewed"
    );
    assert!(!r.is_lost() && !w.is_lost());
    r.release().expect("release");
    w.release().expect("release");
}

#[test]
fn without_the_background_heartbeat_no_thread_renews_the_file() {
    let dir = tempdir();
    let off = by_hand(dir.path()).read().expect("read by hand");
    // A control holder with the background heartbeat, the same period, and a file aged
    // the same way: once the thread has renewed it twice, it has run at least one full
    // round since `off` was taken, and would have renewed `off` too.
    let on = DirLock::builder(dir.path())
        .lease(Duration::from_millis(300))
        .build()
        .expect("build lock")
        .read()
        .expect("read with heartbeat");
    for _ in 0..2 {
        common::age(&off.path(), Duration::from_secs(60));
        common::age(&on.path(), Duration::from_secs(60));
        let aged_off = mtime(&off.path());
        let aged_on = mtime(&on.path());
        wait_until("the control holder's heartbeat", dir.path(), || {
            mtime(&on.path()) > aged_on
        });
        assert_eq!(
            mtime(&off.path()),
            aged_off,
            "a thread renewed a file of a lock without background heartbeat"
        );
    }
    off.refresh().expect("refresh by hand");
    assert!(!off.is_lost());
}

#[test]
fn refresh_of_a_lost_lock_is_lock_lost() {
    let dir = tempdir();
    let lk = by_hand(dir.path());
    let w = lk.write().expect("write");
    fs::remove_file(w.path()).expect("someone removes .master_lock");
    let err = w.refresh().expect_err("the lock is gone");
    assert!(matches!(err, Error::LockLost { .. }), "{err}");
    assert!(w.is_lost());
    // It stays lost, for `check` too, and the release removes nothing.
    assert!(matches!(w.refresh(), Err(Error::LockLost { .. })));
    assert!(matches!(w.check(), Err(Error::LockLost { .. })));

    let r = lk.read().expect("read");
    fs::remove_file(r.path()).expect("someone removes the reader's file");
    assert!(matches!(r.refresh(), Err(Error::LockLost { .. })));
    assert!(lk.status().expect("status").is_free());
}

// ---------------------------------------------------------------------------------
// Files a waiter owns (issue #18): kept fresh while it waits, and never removed once
// they are someone else's. A judge by lease (another host, another pid namespace) breaks
// a file whose mtime is older than the lease, however alive its owner: a waiting
// writer's queue file and `.master_lock` must be renewed from their creation on, not
// only after the grant. Those judges need other namespaces and are tested with real
// processes in tests/lease.rs; here the mtime and the ownership checks are watched
// directly.

/// A lock with a heartbeat period of 100 ms (lease 300 ms) whose polling pauses are far
/// longer (5 s): only the renewal of its own files can cut a waiter's pause short.
fn short_lease_slow_poll(dir: &std::path::Path) -> DirLock {
    DirLock::builder(dir)
        .lease(Duration::from_millis(300))
        .poll_interval(Duration::from_secs(5), Duration::from_secs(5))
        .build()
        .expect("build lock")
}

/// The one state-directory entry whose name starts with `prefix`.
fn only_entry(dir: &std::path::Path, prefix: &str) -> std::path::PathBuf {
    let found: Vec<_> = fs::read_dir(state(dir))
        .expect("list state dir")
        .flatten()
        .map(|e| e.path())
        .filter(|p| {
            p.file_name()
                .is_some_and(|n| n.to_string_lossy().starts_with(prefix))
        })
        .collect();
    assert_eq!(found.len(), 1, "one {prefix}* entry: {found:?}");
    found.into_iter().next().expect("one entry")
}

/// Ages `path` to a minute old, twice, and each time waits until its owner renewed it.
fn renewed_twice_while_waiting(dir: &std::path::Path, path: &std::path::Path) {
    for round in 0..2 {
        common::age(path, Duration::from_secs(60));
        let aged = mtime(path);
        wait_until(
            &format!("renewal {round} of {}", path.display()),
            dir,
            || mtime(path) > aged,
        );
    }
}

#[test]
fn a_queued_writer_renews_its_queue_file_while_it_waits() {
    let dir = tempdir();
    let lk = short_lease_slow_poll(dir.path());
    let holder = lk.write().expect("write");
    let first = holder.token().expect("token");
    let waiter = {
        let lk = lk.clone();
        std::thread::spawn(move || lk.write().and_then(|w| w.token()))
    };
    wait_until("the waiter queued", dir.path(), || {
        common::pending_pids(&lk).len() == 1
    });
    let pending = only_entry(dir.path(), ".pending_lock-");
    renewed_twice_while_waiting(dir.path(), &pending);
    assert!(pending.exists(), "still queued, under the same name");
    holder.release().expect("release");
    let token = waiter.join().expect("join").expect("write after waiting");
    assert!(token > first);
    assert_only_token(dir.path());
}

#[test]
fn a_writer_waiting_for_readers_renews_its_master_lock() {
    let dir = tempdir();
    let lk = short_lease_slow_poll(dir.path());
    let reader = lk.read().expect("read");
    let waiter = {
        let lk = lk.clone();
        std::thread::spawn(move || lk.write().and_then(|w| w.token()))
    };
    wait_until("the waiter made .master_lock", dir.path(), || {
        state(dir.path()).join(".master_lock").exists() && common::pending_pids(&lk).is_empty()
    });
    let master = state(dir.path()).join(".master_lock");
    renewed_twice_while_waiting(dir.path(), &master);
    reader.release().expect("release");
    waiter.join().expect("join").expect("write after waiting");
    assert_only_token(dir.path());
}

/// `.master_lock` is renewed at the grant: after a wait, its first heartbeat is up to a
/// period away, and a file made long before would meanwhile look stale to a judge by
/// lease. With a 30 s lease nothing else renews it within the test. The grant skips
/// the touch for a file made less than an eighth of a period (1.25 s here) before, whose
/// mtime is as fresh as a touch would make it (docs/protocol.md §3.8): so the writer
/// waits 1.5 s, and the file's mtime is then set back 60 s, standing for a long wait.
#[test]
fn a_write_grant_renews_master_lock() {
    let dir = tempdir();
    let lk = DirLock::builder(dir.path())
        .lease(Duration::from_secs(30))
        .build()
        .expect("build lock");
    let reader = lk.read().expect("read");
    let (tx, rx) = std::sync::mpsc::channel();
    let waiter = {
        let lk = lk.clone();
        std::thread::spawn(move || {
            let w = lk.write().expect("write after waiting");
            tx.send(mtime(&w.path())).expect("send");
            // Held until the test has read the mtime at the grant.
            w
        })
    };
    let master = state(dir.path()).join(".master_lock");
    wait_until("the waiter made .master_lock", dir.path(), || {
        master.exists() && common::pending_pids(&lk).is_empty()
    });
    // Not a guess at readiness: the wait itself must last this long.
    std::thread::sleep(Duration::from_millis(1500));
    common::age(&master, Duration::from_secs(60));
    let aged = mtime(&master);
    reader.release().expect("release");
    let at_grant = rx.recv().expect("the grant");
    assert!(
        at_grant > aged,
        "`.master_lock` was not renewed at the grant: {at_grant:?} <= {aged:?}"
    );
    waiter.join().expect("join").release().expect("release");
}

/// Replaces `.master_lock` by another file, as a judge by lease does when it breaks a
/// stale one and makes its own; returns the new file's content.
fn take_over_master(dir: &std::path::Path) -> Vec<u8> {
    let master = state(dir).join(".master_lock");
    fs::remove_file(&master).expect("break .master_lock");
    let content = b"another writer's .master_lock\n".to_vec();
    common::plant(&master, &content);
    content
}

/// A writer that gives up while waiting for readers removes `.master_lock` only if it is
/// still its own: after a break by a judge by lease, the name is someone else's.
#[test]
fn a_timed_out_writer_leaves_a_master_lock_that_is_not_its_own() {
    let dir = tempdir();
    let lk = lock(dir.path());
    let reader = lk.read().expect("read");
    let waiter = {
        let lk = lk.clone();
        std::thread::spawn(move || {
            lk.try_write_for(Duration::from_secs(2))
                .and_then(|w| w.token())
        })
    };
    let master = state(dir.path()).join(".master_lock");
    wait_until("the waiter made .master_lock", dir.path(), || {
        master.exists() && common::pending_pids(&lk).is_empty()
    });
    let planted = take_over_master(dir.path());
    let err = waiter.join().expect("join").expect_err("timed out");
    assert!(matches!(err, Error::TimedOut { .. }), "{err}");
    assert_eq!(
        fs::read(&master).ok(),
        Some(planted),
        "the timed-out writer removed a `.master_lock` that was not its own"
    );
    drop(reader);
}

/// W6 on a local filesystem: a writer whose `.master_lock` was replaced while it waited
/// for readers must not enter when they leave.
#[test]
fn a_writer_whose_master_lock_was_replaced_while_waiting_does_not_enter() {
    let dir = tempdir();
    let lk = lock(dir.path());
    let reader = lk.read().expect("read");
    let waiter = {
        let lk = lk.clone();
        std::thread::spawn(move || lk.write().and_then(|w| w.token()))
    };
    let master = state(dir.path()).join(".master_lock");
    wait_until("the waiter made .master_lock", dir.path(), || {
        master.exists() && common::pending_pids(&lk).is_empty()
    });
    let planted = take_over_master(dir.path());
    reader.release().expect("release");
    let err = waiter
        .join()
        .expect("join")
        .expect_err("the lock was lost while waiting");
    assert!(matches!(err, Error::LockLost { .. }), "{err}");
    assert_eq!(fs::read(&master).ok(), Some(planted), "left alone");
}

/// `{:?}` of an error, which is what `fn main() -> Result<(), Box<dyn Error>>` prints,
/// gives the message and its cause (issue #19): not the variant's fields, and not the
/// message without the operating system's reason.
#[test]
fn debug_of_an_error_says_its_cause() {
    let err = DirLock::new("/no/such/dir").expect_err("missing");
    let one_line = format!("{err:?}");
    assert!(
        one_line.starts_with("failed to open directory `/no/such/dir`: ")
            && one_line.contains("(os error 2)"),
        "{one_line}"
    );
    let boxed: Box<dyn std::error::Error> = Box::new(err);
    assert_eq!(format!("{boxed:?}"), one_line);
    assert!(
        format!("{boxed:#?}").contains("\n  caused by: "),
        "{boxed:#?}"
    );
}

/// The write fast path (V6, docs/protocol-notes.md): when no writer holds or waits, a
/// write creates `.master_lock` (and its token) and no pending file. Once a write had
/// to queue, the next one through the same handle queues again (the fast path's look
/// would be one listing more per grant under contention), until a write finds the
/// directory free of writers.
#[test]
fn an_uncontended_write_creates_no_pending_file() {
    use nix::sys::inotify::{AddWatchFlags, InitFlags, Inotify};
    let dir = tempdir();
    let lk = lock(dir.path());
    drop(lk.write().expect("first write makes the state directory"));
    let created = |f: &dyn Fn()| -> Vec<String> {
        let ino = Inotify::init(InitFlags::IN_NONBLOCK).expect("inotify");
        ino.add_watch(
            &state(dir.path()),
            AddWatchFlags::IN_CREATE | AddWatchFlags::IN_MOVED_TO,
        )
        .expect("watch");
        f();
        let mut names = Vec::new();
        while let Ok(evs) = ino.read_events() {
            names.extend(
                evs.into_iter()
                    .filter_map(|e| e.name)
                    .map(|n| n.to_string_lossy().into_owned()),
            );
        }
        names
    };
    let fast = created(&|| drop(lk.write().expect("write")));
    assert!(fast.iter().any(|n| n == ".master_lock"), "{fast:?}");
    assert!(
        !fast.iter().any(|n| n.starts_with(".pending_lock-")),
        "{fast:?}"
    );

    // Contended: another writer holds, so this one queues.
    let other = common::lock(dir.path());
    let g = other.write().expect("other writes");
    let waiter = {
        let lk = lk.clone();
        std::thread::spawn(move || drop(lk.write().expect("write after waiting")))
    };
    wait_until("the waiter queued", dir.path(), || {
        common::pending_pids(&other).len() == 1
    });
    drop(g);
    waiter.join().expect("join");
    // Its first look found the holder: the next write through this handle queues.
    let queued = created(&|| drop(lk.write().expect("write")));
    assert!(
        queued.iter().any(|n| n.starts_with(".pending_lock-")),
        "{queued:?}"
    );
    // That one found no other writer: the fast path again.
    let fast = created(&|| drop(lk.write().expect("write")));
    assert!(
        !fast.iter().any(|n| n.starts_with(".pending_lock-")),
        "{fast:?}"
    );
    assert_only_token(dir.path());
}

/// A waiter whose wait events cover entirely (the one file it waits for, watched with
/// inotify, and its owner's exit, a pidfd of a process of this host) does not list the
/// directory when its pauses run out: it sleeps on (issue #14: 64 waiters must cost no
/// CPU). Once its first, short pauses are over, a waiter that looked after each pause
/// would list the directory about three times in the next 2 s; this one does not. The
/// release still wakes it at once (its watch is kept between such pauses, not lost).
#[test]
fn a_waiter_covered_by_events_does_not_poll() {
    use nix::sys::inotify::{AddWatchFlags, InitFlags, Inotify};
    let dir = tempdir();
    let lk = lock(dir.path());
    let mut h = Child::spawn("H", dir.path());
    h.ok("write");
    let opts = Opts {
        poll_ms: Some((1, 100)),
        ..Opts::default()
    };
    let mut w = Child::spawn_with("W", dir.path(), &opts);
    // Every listing of the state directory raises `IN_ACCESS` on it.
    let ino = Inotify::init(InitFlags::IN_NONBLOCK).expect("inotify");
    ino.add_watch(&state(dir.path()), AddWatchFlags::IN_ACCESS)
        .expect("watch");
    let listings = || {
        let mut n = 0;
        while let Ok(evs) = ino.read_events() {
            n += evs.len();
        }
        n
    };
    w.send("write");
    wait_until("W is queued and asleep", dir.path(), || {
        common::pending_pids(&lk) == [w.pid()] && common::tasks::all_threads_in(w.pid(), 'S')
    });
    // W's first pauses end in a look by design (`LOOKING_PAUSES`, and the first wait
    // for a new owner): wait until it has not listed for 200 ms. Without the events'
    // cover, its next looks would come 256 ms, 512 ms and 1 s later.
    let mut quiet = Instant::now();
    while quiet.elapsed() < Duration::from_millis(200) {
        if listings() > 0 {
            quiet = Instant::now();
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    std::thread::sleep(Duration::from_secs(2));
    let n = listings();
    assert!(n <= 1, "W listed the directory {n} times in 2 s");
    h.ok("release");
    let granted = w.reply_within(Duration::from_secs(5));
    assert!(
        granted
            .as_deref()
            .is_some_and(|r| r.starts_with("ok write")),
        "W was not woken by the release: {granted:?}"
    );
    w.ok("release");
    h.finish();
    w.finish();
}

/// V8 (docs/protocol-notes.md): a writer that queued keeps its pending file while it
/// holds, and removes it after `.master_lock` at the release. `status` shows that file
/// as part of the writer, not as a queued writer.
#[test]
fn a_writer_that_queued_keeps_its_queue_file_until_it_leaves() {
    let dir = tempdir();
    let lk = lock(dir.path());
    let (a, w) = write_after_waiting(dir.path(), &lk);
    let queue_files = || {
        fs::read_dir(state(dir.path()))
            .expect("list")
            .flatten()
            .filter(|e| {
                e.file_name()
                    .to_string_lossy()
                    .starts_with(".pending_lock-")
            })
            .count()
    };
    assert_eq!(queue_files(), 1, "the holder's queue file is kept");
    let st = lk.status().expect("status");
    assert_eq!(
        st.writer.and_then(|e| e.holder).map(|h| h.pid),
        Some(std::process::id())
    );
    assert!(st.pending.is_empty(), "listed as queued: {:?}", st.pending);
    w.release().expect("release");
    assert_eq!(queue_files(), 0, "the queue file goes at the release");
    a.finish();
    assert_only_token(dir.path());
}
