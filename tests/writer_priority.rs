//! Writer priority (a reader never overtakes a waiting writer) and first come, first
//! served among writers, across processes. Order is recorded in a shared event log
//! that children append to right after each grant and right before each release.

#![allow(clippy::disallowed_methods)]

mod common;

use std::io::ErrorKind;
use std::path::Path;
use std::time::Duration;

use common::{Child, Opts, events, holder_pid, lock, tempdir, wait_until};

#[test]
fn child_entry() {
    common::child_entry();
}

fn logged(name: &str, dir: &Path, log: &Path) -> Child {
    Child::spawn_with(
        name,
        dir,
        &Opts {
            log: Some(log.to_path_buf()),
            ..Opts::default()
        },
    )
}

/// The names of the processes in the log's `enter` events, in order.
fn entered(log: &Path) -> Vec<String> {
    events(log)
        .iter()
        .map(|l| common::parse_event(l))
        .filter(|(_, what, _)| what == "enter")
        .map(|(name, _, _)| name)
        .collect()
}

fn position(ev: &[String], line: &str) -> usize {
    ev.iter()
        .position(|l| l.starts_with(line))
        .unwrap_or_else(|| panic!("no `{line}` in {ev:#?}"))
}

/// A reader holds (process A); writer B waits for it. New readers must not get in
/// until B has entered and left.
#[test]
fn waiting_writer_blocks_new_readers() {
    let dir = tempdir();
    let log = dir.path().join("events.log");
    let lk = lock(dir.path());
    let mut a = logged("A", dir.path(), &log);
    let mut b = logged("B", dir.path(), &log);
    let mut c = logged("C", dir.path(), &log);
    let mut d = logged("D", dir.path(), &log);

    a.ok("read");
    b.send("write");
    wait_until("B waits", dir.path(), || {
        common::writer_pids(&lk) == [b.pid()]
    });

    // A new reader: try_read fails at once, naming B; a bounded one times out.
    let err = lk.try_read().expect_err("B waits: no new reader");
    assert_eq!(err.kind(), ErrorKind::WouldBlock);
    assert_eq!(holder_pid(&err), Some(b.pid()), "{err}");
    let r = d.call("read_for 200");
    assert!(
        r.starts_with(&format!("err TimedOut holder={}", b.pid())),
        "{r}"
    );
    // A blocking reader C waits behind B.
    c.send("read");
    assert_eq!(c.reply_within(Duration::from_millis(100)), None);

    a.ok("release");
    let got = b.reply();
    assert!(got.starts_with("ok write"), "{got}");
    // B is inside: C still waits.
    assert_eq!(c.reply_within(Duration::from_millis(100)), None);
    assert!(!entered(&log).contains(&"C".to_string()));
    b.ok("release");
    assert_eq!(c.reply(), "ok read 0");

    let ev = events(&log);
    assert!(
        position(&ev, "A exit") < position(&ev, "B enter"),
        "{ev:#?}"
    );
    assert!(
        position(&ev, "B exit") < position(&ev, "C enter"),
        "{ev:#?}"
    );
    assert_eq!(entered(&log), ["A", "B", "C"]);
    for ch in [a, b, c, d] {
        ch.finish();
    }
    common::assert_only_token(dir.path());
}

/// The same while the writer is still only queued (another writer holds): a reader
/// that arrives after the queued writer's pending file exists enters after it.
#[test]
fn queued_writer_blocks_new_readers() {
    let dir = tempdir();
    let log = dir.path().join("events.log");
    let lk = lock(dir.path());
    let mut h = logged("H", dir.path(), &log);
    let mut b = logged("B", dir.path(), &log);
    let mut c = logged("C", dir.path(), &log);

    h.ok("write");
    b.send("write");
    wait_until("B is queued", dir.path(), || {
        common::pending_pids(&lk) == [b.pid()]
    });
    c.send("read");
    let err = lk.try_read().expect_err("held and queued");
    assert_eq!(err.kind(), ErrorKind::WouldBlock);

    h.ok("release");
    writer_b_then_reader_c(dir.path(), &log, [h, b, c]);
}

/// A reader already waiting for the writer when another writer queues: the queued
/// writer still enters first. Woken by the release, the reader may announce itself at
/// once (only `.master_lock` was in its way when it looked), but its decisive listing
/// shows the queue, and it withdraws.
#[test]
fn a_writer_queued_after_a_waiting_reader_still_enters_first() {
    let dir = tempdir();
    let log = dir.path().join("events.log");
    let mut h = logged("H", dir.path(), &log);
    // C looks again only when woken by a removal (its polling pause is a minute), so its
    // last look before the release is the one from before B queued.
    let mut c = Child::spawn_with(
        "C",
        dir.path(),
        &Opts {
            log: Some(log.clone()),
            poll_ms: Some((60_000, 60_000)),
            ..Opts::default()
        },
    );
    let mut b = logged("B", dir.path(), &log);
    let lk = lock(dir.path());

    h.ok("write");
    c.send("read");
    wait_until("C waits for H", dir.path(), || {
        common::prepared_files(c.pid(), dir.path()) >= 1
    });
    b.send("write");
    wait_until("B is queued", dir.path(), || {
        common::pending_pids(&lk) == [b.pid()]
    });
    h.ok("release");
    writer_b_then_reader_c(dir.path(), &log, [h, b, c]);
}

/// The end of the two tests above: H has released; B (writing) must enter and leave
/// before C (reading) gets in, and nothing is left but the token.
fn writer_b_then_reader_c(dir: &Path, log: &Path, [h, mut b, mut c]: [Child; 3]) {
    assert!(b.reply().starts_with("ok write"));
    assert_eq!(c.reply_within(Duration::from_millis(100)), None);
    b.ok("release");
    assert_eq!(c.reply(), "ok read 0");
    assert_eq!(entered(log), ["H", "B", "C"]);
    for ch in [h, b, c] {
        ch.finish();
    }
    common::assert_only_token(dir);
}

/// Lets the writers in one by one and returns the order in which they entered. `base`
/// is the number of `enter` events logged before the writers could enter.
fn drain_in_order(dir: &Path, log: &Path, base: usize, writers: &mut [Child]) -> Vec<String> {
    let mut order = Vec::new();
    for k in 0..writers.len() {
        wait_until(&format!("writer #{k} enters"), dir, || {
            entered(log).len() > base + order.len()
        });
        let all = entered(log);
        let who = all.last().expect("an enter").clone();
        order.push(who.clone());
        let w = writers
            .iter_mut()
            .find(|w| w.name == who)
            .expect("a writer entered");
        assert!(w.reply().starts_with("ok write"));
        w.ok("release");
    }
    order
}

/// Writers queued in a known order while a reader holds (the first of them already
/// owns `.master_lock` and waits for the reader to drain) enter in that order.
#[test]
fn writers_enter_in_fifo_order_behind_a_reader() {
    let dir = tempdir();
    let log = dir.path().join("events.log");
    let lk = lock(dir.path());
    let mut r = logged("R", dir.path(), &log);
    r.ok("read");
    let mut ws: Vec<Child> = (1..=3)
        .map(|i| logged(&format!("W{i}"), dir.path(), &log))
        .collect();
    let mut expect = Vec::new();
    for w in &mut ws {
        w.send("write");
        expect.push(w.pid());
        wait_until(&format!("{} is queued", w.name), dir.path(), || {
            common::writer_pids(&lk) == expect
        });
    }
    // A reader arriving now waits for all three.
    let mut late = logged("L", dir.path(), &log);
    late.send("read");
    let base = entered(&log).len();
    r.ok("release");
    let order = drain_in_order(dir.path(), &log, base, &mut ws);
    assert_eq!(order, ["W1", "W2", "W3"]);
    assert_eq!(late.reply(), "ok read 0");
    assert_eq!(entered(&log), ["R", "W1", "W2", "W3", "L"]);
    let tokens: Vec<u64> = events(&log)
        .iter()
        .filter_map(|l| common::parse_event(l).2)
        .filter(|&t| t > 0)
        .collect();
    assert!(tokens.windows(2).all(|p| p[0] < p[1]), "{tokens:?}");
    late.finish();
    r.finish();
    for w in ws {
        w.finish();
    }
    common::assert_only_token(dir.path());
}

/// Five writers queued behind a writer (all of them pending files) enter in order.
#[test]
fn writers_enter_in_fifo_order_behind_a_writer() {
    let dir = tempdir();
    let log = dir.path().join("events.log");
    let lk = lock(dir.path());
    let g = lk.write().expect("write");
    let mut ws: Vec<Child> = (1..=5)
        .map(|i| logged(&format!("W{i}"), dir.path(), &log))
        .collect();
    let mut expect = Vec::new();
    for w in &mut ws {
        w.send("write");
        expect.push(w.pid());
        wait_until(&format!("{} is queued", w.name), dir.path(), || {
            common::pending_pids(&lk) == expect
        });
    }
    drop(g);
    let order = drain_in_order(dir.path(), &log, 0, &mut ws);
    assert_eq!(order, ["W1", "W2", "W3", "W4", "W5"]);
    for w in ws {
        w.finish();
    }
    common::assert_only_token(dir.path());
}

/// The write fast path (V6 in docs/protocol-notes.md) is taken only when no writer holds
/// or waits. A newcomer arriving between a release and the queued writer's take-over
/// (made long here: the queued writer is stopped) must queue behind it, not take the
/// free `.master_lock`.
#[test]
fn a_newcomer_does_not_take_the_free_lock_from_a_queued_writer() {
    use nix::sys::signal::{Signal, kill};
    use nix::unistd::Pid;
    let dir = tempdir();
    let log = dir.path().join("events.log");
    let lk = lock(dir.path());
    let g = lk.write().expect("write");
    let mut b = logged("B", dir.path(), &log);
    b.send("write");
    wait_until("B is queued", dir.path(), || {
        common::pending_pids(&lk) == [b.pid()]
    });
    let b_pid = Pid::from_raw(i32::try_from(b.pid()).expect("pid"));
    kill(b_pid, Signal::SIGSTOP).expect("stop B");
    wait_until("every thread of B is stopped", dir.path(), || {
        common::tasks::all_threads_in(b.pid(), 'T')
    });
    drop(g);
    // Nobody holds now, and B (alive, stopped) is first in the queue.
    let newcomer = common::lock(dir.path());
    let err = newcomer.try_write().expect_err("B is queued first");
    assert_eq!(err.kind(), ErrorKind::WouldBlock);
    assert_eq!(holder_pid(&err), Some(b.pid()));
    assert!(
        !dir.path().join(".rwdir/.master_lock").exists(),
        "the newcomer left nothing behind"
    );
    kill(b_pid, Signal::SIGCONT).expect("continue B");
    assert!(b.reply().starts_with("ok write"));
    b.ok("release");
    b.finish();
    common::assert_only_token(dir.path());
}

/// Four processes writing back to back for 6 s, on tmpfs where there is one: no write
/// waits long, since every release wakes the writer next in line. A watch made while its
/// file was being removed could miss the removal for good (seen on Linux 6.18; see
/// `notify::Subscription::still_there`), and then every writer ended up waiting for
/// files already gone until the waits' backstops ran out, for seconds and up to the
/// lease: about one 15 s run in three on tmpfs, before the look after the watch.
#[test]
fn writers_back_to_back_never_stall() {
    let shm = std::path::Path::new("/dev/shm");
    let dir = if shm.is_dir() {
        tempfile::Builder::new()
            .prefix("rwdir-test-")
            .tempdir_in(shm)
            .expect("tempdir in /dev/shm")
    } else {
        tempdir()
    };
    let mut writers: Vec<Child> = (0..4)
        .map(|i| Child::spawn(&format!("w{i}"), dir.path()))
        .collect();
    for w in &mut writers {
        w.send("write_loop 6000");
    }
    for w in &mut writers {
        let reply = w.reply();
        let mut words = reply.split_whitespace();
        assert_eq!(
            (words.next(), words.next()),
            (Some("ok"), Some("write_loop")),
            "{reply}"
        );
        let grants: u64 = words.next().and_then(|g| g.parse().ok()).expect("grants");
        let longest_us: u64 = words.next().and_then(|l| l.parse().ok()).expect("wait");
        assert!(grants > 0, "{reply}");
        assert!(
            longest_us < 2_000_000,
            "a write waited {longest_us} µs while four writers took turns: {reply}"
        );
    }
    for w in writers {
        w.finish();
    }
}
