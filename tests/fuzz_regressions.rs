//! Every input the fuzz targets (`fuzz/`, see FUZZING.md) ever failed on, replayed
//! through the same checks: the fuzz crate's harness, compiled here from its sources.
//! Library bugs first (each also through the public API), then the cases where the
//! harness itself was wrong, so that its oracles stay right. The harness's own unit tests
//! (one seed of each target) run here too.

// Needs the library's `fuzzing` feature (as `cargo test --workspace --all-features`).
// Not in the published package, which has no fuzz/.
#![cfg(feature = "fuzzing")]

// The harness is `fuzz/src/` (the fuzz crate is a workspace of its own, and depending on
// it would build libFuzzer): the same files, as modules of this test. The fuzz targets'
// entry points are not called here.
#[allow(dead_code)]
#[path = "../fuzz/src/holder.rs"]
mod holder;
#[allow(dead_code)]
#[path = "../fuzz/src/names.rs"]
mod names;
#[allow(dead_code)]
#[path = "../fuzz/src/scan/mod.rs"]
mod scan;

use std::sync::mpsc;
use std::time::Duration;

use names::NameFields;
use scan::{
    ContentSpec, EntrySpec, LinkTarget, MtimeSpec, NameSpec, NodeSpec, Op, Pgid, Place, RecordSpec,
    ScanInput, Scanner, StateSpec, Who,
};

/// Runs one `dir_scan` case in a fresh scratch directory, failing (instead of hanging
/// the test run) if it does not finish in time.
fn scan(input: ScanInput) {
    let (tx, rx) = mpsc::channel();
    let t = std::thread::spawn(move || {
        let base = tempfile::tempdir().expect("tempdir");
        let scanner = Scanner::new(base.path()).expect("scanner");
        scanner.scan(&input);
        let _ = tx.send(());
    });
    match rx.recv_timeout(Duration::from_secs(60)) {
        Ok(()) => t.join().expect("scan thread"),
        // The scan panicked: re-raise its panic.
        Err(mpsc::RecvTimeoutError::Disconnected) => {
            if let Err(p) = t.join() {
                std::panic::resume_unwind(p);
            }
        }
        Err(mpsc::RecvTimeoutError::Timeout) => panic!("the scan hangs"),
    }
}

fn entry(name: NameSpec, node: NodeSpec, mtime: MtimeSpec) -> EntrySpec {
    EntrySpec { name, node, mtime }
}

fn record(place: Place, who: Who) -> RecordSpec {
    RecordSpec {
        kind: 3,
        host: None,
        place,
        who,
        pgid: Pgid::None,
        nonce: 1,
        since_ns: 0,
        lease_ms: 0,
    }
}

/// dir_scan, timeout-1e914f682a6d5cf65834016b1d616bfd5a5134a9 (reduced): with a
/// `.token-18446744073709551615` in the state directory, `try_write` looped for ever
/// (T1 saw the maximum, T2 found `max + 1` = the maximum taken, and again). It now fails
/// with an `InvalidData` I/O error naming that file, and undoes its files.
#[test]
fn max_token_does_not_hang_a_writer() {
    scan(ScanInput {
        state: StateSpec::Dir,
        entries: vec![entry(
            NameSpec::Lock(NameFields::Token(u64::MAX)),
            NodeSpec::File(ContentSpec::Empty),
            MtimeSpec::Old,
        )],
        ops: vec![
            Op::TryWrite { hold: false },
            Op::TryRead { hold: true },
            Op::TryWrite { hold: true },
            Op::Status,
        ],
    });
}

/// The same, straight through the public API: the error names the token file.
#[test]
fn max_token_error_names_the_file() {
    let dir = tempfile::tempdir().expect("tempdir");
    let lock = rwdir::DirLock::new(dir.path()).expect("lock");
    drop(lock.try_read().expect("make the state directory"));
    let token = dir.path().join(".rwdir/.token-18446744073709551615");
    std::fs::write(&token, b"").expect("plant the token");
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(lock.try_write().and_then(|g| g.token()));
    });
    let err = rx
        .recv_timeout(Duration::from_secs(60))
        .expect("try_write hangs")
        .expect_err("no token after the maximum");
    assert_eq!(err.kind(), std::io::ErrorKind::InvalidData, "{err}");
    assert_eq!(err.path(), token);
    let left: Vec<_> = std::fs::read_dir(dir.path().join(".rwdir"))
        .expect("list")
        .map(|e| e.expect("entry").file_name())
        .collect();
    assert_eq!(
        left,
        [".token-18446744073709551615"],
        "the writer undid its files"
    );
}

/// dir_scan, crash-fceebdd29cacd3ddb2b80d151fc1ffbcdbfe3be1 (reduced): an expired
/// malformed `.master_lock` and a `.break-*` whose holder (another host) is within its
/// lease. `cleanup` waited 20 polls for that breaker and then returned
/// `Error::TimedOut`; it now leaves the file to that breaker and succeeds.
#[test]
fn cleanup_leaves_a_busy_master_to_its_breaker() {
    let mut breaker = record(Place::OtherBoot, Who::MeReborn(1));
    breaker.lease_ms = u64::MAX;
    scan(ScanInput {
        state: StateSpec::Dir,
        entries: vec![
            entry(
                NameSpec::Lock(NameFields::Master),
                NodeSpec::File(ContentSpec::Bytes(b"garbage".to_vec())),
                MtimeSpec::Old,
            ),
            entry(
                NameSpec::Lock(NameFields::Break {
                    ns: 1,
                    uuid: 0x0a1b_2c3d_0000_4000_8000_0000_0000_0001,
                }),
                NodeSpec::File(ContentSpec::Record(breaker)),
                MtimeSpec::Fresh,
            ),
        ],
        ops: vec![Op::Cleanup, Op::Plan { all: false }, Op::Cleanup],
    });
}

/// The same, straight through the public API.
#[test]
fn cleanup_with_a_live_breaker_succeeds() {
    let dir = tempfile::tempdir().expect("tempdir");
    let lock = rwdir::DirLock::builder(dir.path())
        .lease(Duration::from_secs(1))
        .poll_interval(Duration::from_millis(1), Duration::from_millis(1))
        .build()
        .expect("lock");
    drop(lock.try_read().expect("make the state directory"));
    let state = dir.path().join(".rwdir");
    let master = state.join(".master_lock");
    std::fs::write(&master, b"garbage").expect("plant .master_lock");
    let old = std::time::SystemTime::now() - Duration::from_secs(3600);
    std::fs::File::options()
        .write(true)
        .open(&master)
        .and_then(|f| f.set_modified(old))
        .expect("age .master_lock");
    // A breaker at work: malformed (being written), fresh, so within the lease.
    let marker = state.join(".break-1-0a1b2c3d-0000-4000-8000-000000000001");
    std::fs::write(&marker, b"").expect("plant the breaker");
    let removed = lock.cleanup().expect("cleanup succeeds");
    assert!(removed.is_empty(), "{removed:?}");
    assert!(master.exists() && marker.exists());
}

/// Harness: a `try_write` that gives up after taking its token (here behind our own
/// reader) leaves the token file, by design (tokens only grow). The first harness
/// reported it as left behind (crash-b6d38725a7fed9e1aba9fa83f29dadc22fb8726c).
#[test]
fn harness_a_failed_writer_keeps_its_token() {
    scan(ScanInput {
        state: StateSpec::Dir,
        entries: Vec::new(),
        ops: vec![Op::TryRead { hold: true }, Op::TryWrite { hold: false }],
    });
}

/// Harness: two entries with one name; the second cannot be made and must not remove
/// the first (crash-5b6943cdec4073e7f399fca7d3fb0a4f494bfa49).
#[test]
fn harness_a_duplicate_name_keeps_the_first_entry() {
    scan(ScanInput {
        state: StateSpec::Dir,
        entries: vec![
            entry(
                NameSpec::Lock(NameFields::Master),
                NodeSpec::Socket,
                MtimeSpec::Fresh,
            ),
            entry(
                NameSpec::Lock(NameFields::Master),
                NodeSpec::File(ContentSpec::Empty),
                MtimeSpec::Old,
            ),
        ],
        ops: vec![Op::Status, Op::Cleanup],
    });
}

/// Harness: a lock that reads again keeps its reader's file between reads
/// (docs/protocol.md §2.1.1), a `.tmp-` file the harness must not report as left
/// behind; the lock's drop removes it (the CI run of `3db91bd`).
#[test]
fn harness_a_lock_that_reads_again_keeps_its_file() {
    scan(ScanInput {
        state: StateSpec::Dir,
        entries: Vec::new(),
        ops: vec![
            Op::TryRead { hold: false },
            Op::TryRead { hold: false },
            Op::TryRead { hold: false },
            Op::TryRead { hold: true },
        ],
    });
}

/// Harness: a planted `.tmp-` file holding a reader's record of this process is not the
/// lock's kept file (crash-1b54bf41f487bfa5a9e1dade1ad2761253633971).
#[test]
fn harness_a_planted_tmp_file_of_ours_is_not_a_kept_file() {
    scan(ScanInput {
        state: StateSpec::Dir,
        entries: vec![entry(
            NameSpec::Lock(NameFields::Tmp { uuid: 1 }),
            NodeSpec::File(ContentSpec::Record(RecordSpec {
                kind: 0,
                ..record(Place::SameHost, Who::Me)
            })),
            MtimeSpec::Fresh,
        )],
        ops: vec![Op::Status],
    });
}

/// Not a failure: one case of every kind of entry, kept as a smoke test of the harness.
#[test]
fn every_kind_of_entry() {
    let u = 0x0a1b_2c3d_0000_4000_8000_0000_0000_0001;
    scan(ScanInput {
        state: StateSpec::Dir,
        entries: vec![
            entry(
                NameSpec::Lock(NameFields::Master),
                NodeSpec::File(ContentSpec::Record(record(Place::SameHost, Who::DeadChild))),
                MtimeSpec::Fresh,
            ),
            entry(
                NameSpec::Lock(NameFields::Slave { uuid: u }),
                NodeSpec::Symlink(LinkTarget::Victim),
                MtimeSpec::Old,
            ),
            entry(
                NameSpec::Lock(NameFields::Pending { ns: 1, uuid: u }),
                NodeSpec::Fifo,
                MtimeSpec::Future,
            ),
            entry(
                NameSpec::Lock(NameFields::Tmp { uuid: u }),
                NodeSpec::Sparse(
                    ContentSpec::Record(record(Place::OtherBoot, Who::Me)),
                    64 << 20,
                ),
                MtimeSpec::Old,
            ),
            entry(
                NameSpec::Lock(NameFields::Break { ns: 2, uuid: u }),
                NodeSpec::HardLinkToVictim,
                MtimeSpec::Old,
            ),
            entry(
                NameSpec::Lock(NameFields::Slave { uuid: u + 1 }),
                NodeSpec::Socket,
                MtimeSpec::Epoch,
            ),
            entry(
                NameSpec::Lock(NameFields::Slave { uuid: u + 2 }),
                NodeSpec::File(ContentSpec::Record(record(Place::SameHost, Who::Me))),
                MtimeSpec::Old,
            ),
            entry(
                NameSpec::Lock(NameFields::Token(4)),
                NodeSpec::Dir { files: 0 },
                MtimeSpec::Old,
            ),
            entry(
                NameSpec::Raw(b".nfs000000000001".to_vec()),
                NodeSpec::File(ContentSpec::Bytes(b"x".to_vec())),
                MtimeSpec::Old,
            ),
        ],
        ops: vec![
            Op::Status,
            Op::Plan { all: false },
            Op::Plan { all: true },
            Op::TryRead { hold: true },
            Op::TryWrite { hold: false },
            Op::Cleanup,
            Op::Release,
            Op::TryWrite { hold: true },
            Op::Downgrade,
            Op::Status,
        ],
    });
}
