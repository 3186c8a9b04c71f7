//! A short run of `examples/stress.rs` (the same workers and the same checker, included
//! as a module), and the checker itself on logs with known violations.

#![allow(clippy::disallowed_methods)]

#[allow(dead_code)]
#[path = "../examples/stress.rs"]
mod stress;

use std::ffi::OsString;
use std::process::Command;
use std::time::Duration;

const WORKER_ENV: &str = "RWDIR_STRESS_WORKER";

/// In a worker process (re-run of this test binary), runs the worker loop and exits.
#[test]
fn child_entry() {
    let Some(args) = std::env::var_os(WORKER_ENV) else {
        return;
    };
    let args: Vec<OsString> = std::env::split_paths(&args)
        .map(|p| p.into_os_string())
        .collect();
    let w = stress::Worker::from_args(&args).expect("worker arguments");
    match stress::worker_main(&w) {
        Ok(()) => std::process::exit(0),
        Err(e) => {
            eprintln!("stress worker {}: {e}", std::process::id());
            std::process::exit(1)
        }
    }
}

#[test]
fn five_second_stress_has_no_violation() {
    let dir = tempfile::tempdir().expect("tempdir");
    let opts = stress::Options {
        readers: 4,
        writers: 3,
        duration: Duration::from_secs(5),
        dir: dir.path().to_path_buf(),
    };
    let exe = std::env::current_exe().expect("current_exe");
    let spawn = |w: &stress::Worker| {
        let mut c = Command::new(&exe);
        c.args(["child_entry", "--exact", "--nocapture", "--test-threads=1"])
            .env(
                WORKER_ENV,
                std::env::join_paths(w.to_args()).expect("no ':' in temporary paths"),
            );
        c
    };
    let mut out = Vec::new();
    let report = stress::run(&opts, &spawn, &mut out).expect("run");
    let out = String::from_utf8_lossy(&out);
    eprintln!("{out}");
    let c = &report.check;
    assert!(c.violations.is_empty(), "{out}");
    assert!(out.trim_end().ends_with("violations: 0"), "{out}");
    assert!(c.reads >= 20 && c.writes >= 20, "too little traffic: {out}");
    assert!(c.max_readers >= 2, "{out}");
    assert!(
        c.fifo_checks >= 1,
        "no writer ever saw another queued: {out}"
    );
}

fn violations(log: &str) -> Vec<String> {
    stress::check(log, 2).violations
}

/// Each broken log is flagged, and the correct one is not: the checker would notice
/// these failures of the lock.
#[test]
fn the_checker_catches_violations() {
    // Lines are `ns pid event`; readers 10, 11; writers 20, 21.
    let readers = "1 10 E R\n2 11 E R\n3 10 X R\n4 11 X R\n";
    let good = format!(
        "{readers}5 20 S\n6 20 Q\n7 21 S\n8 21 Q 20\n9 20 E W 1\n10 20 X W\n\
         11 21 E W 2\n12 21 D\n13 10 E R\n14 10 X R\n15 21 X R\n"
    );
    assert!(violations(&good).is_empty(), "{:?}", violations(&good));
    let bad = [
        (
            "a writer beside a reader",
            "1 10 E R\n2 11 E R\n3 10 X R\n4 20 E W 1\n5 11 X R\n6 20 X W\n".to_string(),
        ),
        (
            "a reader beside a writer",
            format!("{readers}5 20 E W 1\n6 10 E R\n7 10 X R\n8 20 X W\n"),
        ),
        (
            "two writers",
            format!("{readers}5 20 E W 1\n6 21 E W 2\n7 20 X W\n8 21 X W\n"),
        ),
        ("a token that does not grow", good.replace("E W 2", "E W 1")),
        (
            "a writer overtaking one it saw queued",
            format!(
                "{readers}5 20 S\n6 20 Q\n7 21 S\n8 21 Q 20\n9 21 E W 1\n10 21 X W\n\
                 11 20 E W 2\n12 20 X W\n"
            ),
        ),
        (
            "a writer entering during a downgrade",
            format!("{readers}5 20 E W 1\n6 20 D\n7 21 E W 2\n8 21 X W\n9 20 X R\n"),
        ),
        (
            "readers never overlapping",
            "1 10 E R\n2 10 X R\n3 11 E R\n4 11 X R\n".to_string(),
        ),
        ("a reader never leaving", good.replace("15 21 X R\n", "")),
        ("a garbled line", format!("{good}garbage\n")),
    ];
    for (what, log) in bad {
        assert!(!violations(&log).is_empty(), "{what} not caught:\n{log}");
    }
}
