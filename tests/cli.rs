//! The `rwdir` command line, run as a real binary: exit codes, COMMAND's environment,
//! timeouts, the "waiting" line, writer priority, `status`, `cleanup`, and every error
//! case of the contract in `docs/cli.md`. Signals and terminals: `tests/cli_signals.rs`.

#![allow(clippy::disallowed_methods)]

#[path = "cli/util.rs"]
mod util;

use std::os::unix::fs::PermissionsExt;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use util::Dir;

fn hostname() -> String {
    nix::unistd::gethostname()
        .expect("hostname")
        .into_string()
        .expect("utf-8 hostname")
}

// ---------------------------------------------------------------------------------
// Exit status and environment

#[test]
fn exit_status_passes_through() {
    let t = Dir::new();
    for (mode, code) in [("read", 0), ("write", 0), ("read", 7), ("write", 255)] {
        t.rwdir([mode, &t.d(), "sh", "-c", &format!("exit {code}")])
            .run()
            .expect_code(code);
    }
    // After every run, no lock file is left behind.
    assert!(
        t.lock_files(".")
            .iter()
            .all(|p| p.to_string_lossy().contains(".token-"))
    );
}

#[test]
fn death_by_signal_is_128_plus_n() {
    let t = Dir::new();
    for (sig, code) in [("KILL", 137), ("TERM", 143), ("SEGV", 139)] {
        t.rwdir(["write", &t.d(), "sh", "-c", &format!("kill -{sig} $$")])
            .run()
            .expect_code(code);
    }
}

#[test]
fn command_environment() {
    let t = Dir::new();
    let show = r#"printf '%s|%s|%s\n' "$RWDIR_MODE" "$RWDIR_DIR" "${RWDIR_TOKEN-unset}""#;
    let w1 = t
        .rwdir(["write", &t.d(), "sh", "-c", show])
        .env("RWDIR_MODE", "stale")
        .run();
    w1.expect_code(0);
    let fields: Vec<&str> = w1.stdout.trim().split('|').collect();
    w1.check(fields.len() == 3, "three fields");
    w1.check(fields[0] == "write", "RWDIR_MODE=write");
    w1.check(fields[1] == t.d(), "RWDIR_DIR is DIR as given");
    let tok1: u64 = fields[2].parse().unwrap_or(0);
    w1.check(tok1 >= 1, "RWDIR_TOKEN is a positive number");

    let w2 = t.rwdir(["write", &t.d(), "sh", "-c", show]).run();
    let tok2: u64 = w2
        .stdout
        .trim()
        .rsplit('|')
        .next()
        .unwrap_or("")
        .parse()
        .unwrap_or(0);
    w2.check(tok2 > tok1, "the token grows");

    // Readers get no token, not even one inherited from the caller.
    let r = t
        .rwdir(["read", &t.d(), "sh", "-c", show])
        .env("RWDIR_TOKEN", "99")
        .run();
    r.expect_code(0);
    r.check(
        r.stdout.trim() == format!("read|{}|unset", t.d()),
        "reader env",
    );

    // Everything else is inherited.
    let r = t
        .rwdir(["read", &t.d(), "sh", "-c", "echo $RWDIR_TEST_OTHER"])
        .env("RWDIR_TEST_OTHER", "kept")
        .run();
    r.check(r.stdout.trim() == "kept", "other variables are inherited");
}

#[test]
fn arguments_reach_command_verbatim() {
    let t = Dir::new();
    let r = t
        .rwdir([
            "read",
            "-q",
            &t.d(),
            "sh",
            "-c",
            r#"printf '<%s>' "$@""#,
            "sh",
            "--help",
            "-q",
            "a b",
            "",
        ])
        .run();
    r.expect_code(0);
    r.check(r.stdout == "<--help><-q><a b><>", "arguments verbatim");
    let r = t.rwdir(["write", &t.d(), "--", "echo", "-n", "x"]).run();
    r.expect_code(0)
        .check(r.stdout == "x", "`--` before COMMAND");
}

// ---------------------------------------------------------------------------------
// Not waiting, timeouts, the waiting line

#[test]
fn no_wait_against_a_held_lock_exits_75_at_once() {
    let t = Dir::new();
    let w = t.hold("write", &[], "w");
    let host = hostname();
    for (mode, opt) in [
        ("write", "--no-wait"),
        ("read", "--no-wait"),
        ("write", "--timeout=0"),
    ] {
        let r = t.rwdir([mode, opt, &t.d(), "touch", "ran"]).run();
        r.expect_code(75);
        r.check(r.elapsed < Duration::from_secs(1), "within a second");
        r.check(!t.path("ran").exists(), "COMMAND did not run");
        let lines = r.stderr_lines();
        r.check(lines.len() == 1, "exactly one stderr line");
        let line = lines[0];
        r.check(line.starts_with("rwdir: "), "prefixed");
        r.check(line.contains(&t.d()), "names DIR");
        r.check(
            line.contains(&format!("writer pid {} on host {host} (", w.pid())),
            "names the holder: mode, pid, host, age",
        );
    }
    w.release().expect_code(0);
    t.rwdir(["write", "--no-wait", &t.d(), "true"])
        .run()
        .expect_code(0);
}

#[test]
fn a_timeout_of_1_5_s_gives_up_after_1_5_s() {
    let t = Dir::new();
    let r1 = t.hold("read", &[], "r1");
    let r = t
        .rwdir(["write", "--timeout", "1.5", &t.d(), "touch", "ran"])
        .run();
    r.expect_code(75);
    r.check(r.elapsed >= Duration::from_millis(1500), "not before 1.5 s");
    r.check(r.elapsed < Duration::from_secs(3), "well before 3 s");
    r.check(!t.path("ran").exists(), "COMMAND did not run");
    let last = r.stderr_lines().last().copied().unwrap_or("");
    r.check(
        last.starts_with("rwdir: timed out after ") && last.contains(&t.d()),
        "the timeout line",
    );
    r.check(
        last.contains(&format!("reader pid {} on host", r1.pid())),
        "names the reader",
    );
    // Giving up left nothing behind: a reader gets in at once.
    t.rwdir(["read", "--no-wait", &t.d(), "true"])
        .run()
        .expect_code(0);
    drop(r1);
}

#[test]
fn waiting_more_than_a_second_is_said_once_and_quiet_silences_it() {
    let t = Dir::new();
    let w = t.hold("write", &[], "w");
    let loud = t.start_holder("read", &[], "loud");
    let quiet = t.start_holder("write", &["--quiet"], "quiet");
    loud.wait_stderr("rwdir: waiting for read lock on");
    let line = loud.stderr_text();
    assert!(
        line.contains(&format!(
            "`{}`: held by writer pid {} on host ",
            t.d(),
            w.pid()
        )),
        "the waiting line names DIR and the holder{}",
        loud.report("")
    );
    // The quiet writer queues (ahead of the loud reader, by writer priority); let the
    // first writer go, then each in turn.
    util::wait_until(
        || {
            t.status()["pending"]
                .as_array()
                .is_some_and(|p| p.len() == 1)
        },
        || quiet.report("the quiet writer never queued\n"),
    );
    w.release().expect_code(0);
    quiet.wait_ready();
    let q = quiet.release();
    q.expect_code(0);
    q.check(q.stderr.is_empty(), "--quiet says nothing");
    loud.wait_ready();
    let l = loud.release();
    l.expect_code(0);
    l.check(
        l.stderr.matches("waiting for").count() == 1 && l.stderr_lines().len() == 1,
        "said exactly once",
    );
}

#[test]
fn the_waiting_line_names_who_is_ahead() {
    let t = Dir::new();
    let r = t.hold("read", &[], "r");
    // w1 takes `.master_lock` and waits for the reader; w2 queues behind w1.
    let w1 = t.start_holder("write", &[], "w1");
    util::wait_until(
        || t.status()["writer"]["pid"] == w1.pid(),
        || w1.report("w1 never became the writer\n"),
    );
    let w2 = t.start_holder("write", &[], "w2");
    w1.wait_stderr("rwdir: waiting for write lock");
    w2.wait_stderr("rwdir: waiting for write lock");
    let (l1, l2) = (w1.stderr_text(), w2.stderr_text());
    assert!(
        l1.contains(&format!("held by reader pid {} on host", r.pid())),
        "w1 waits for the reader, not for w2 behind it{}",
        w1.report("")
    );
    assert!(
        l2.contains(&format!("held by writer pid {} on host", w1.pid())),
        "w2 waits for w1{}",
        w2.report("")
    );
    r.release().expect_code(0);
    w1.release().expect_code(0);
    w2.release().expect_code(0);
}

#[test]
fn a_short_wait_says_nothing() {
    let t = Dir::new();
    let w = t.hold("write", &[], "w");
    let r = t.rwdir(["read", "--timeout", "0.5", &t.d(), "true"]).run();
    r.expect_code(75);
    r.check(
        !r.stderr.contains("rwdir: waiting for"),
        "no waiting line under a second",
    );
    drop(w);
}

// ---------------------------------------------------------------------------------
// Writer priority

#[test]
fn a_waiting_writer_goes_before_new_readers() {
    let t = Dir::new();
    let r1 = t.hold("read", &[], "r1");
    let w = t.start_holder("write", &[], "w");
    // It takes `.master_lock` and waits for the reader to leave.
    util::wait_until(
        || t.status()["writer"]["pid"] == w.pid(),
        || w.report("the writer never queued\n"),
    );
    // A new reader does not overtake the queued writer...
    let r = t.rwdir(["read", "--no-wait", &t.d(), "touch", "r2"]).run();
    r.expect_code(75);
    r.check(
        r.stderr.contains(&format!("pid {}", w.pid())),
        "names the writer",
    );
    // ...but an existing one keeps its lock, and the writer waits for it.
    assert!(!w.is_ready(), "writer ran beside a reader{}", w.report(""));
    r1.release().expect_code(0);
    w.wait_ready();
    t.rwdir(["read", "--no-wait", &t.d(), "true"])
        .run()
        .expect_code(75);
    w.release().expect_code(0);
    t.rwdir(["read", "--no-wait", &t.d(), "true"])
        .run()
        .expect_code(0);
}

#[test]
fn readers_share() {
    let t = Dir::new();
    let r1 = t.hold("read", &[], "r1");
    let r2 = t.hold("read", &["--no-wait"], "r2");
    assert_eq!(t.status()["readers"].as_array().map(Vec::len), Some(2));
    r1.release().expect_code(0);
    r2.release().expect_code(0);
}

// ---------------------------------------------------------------------------------
// status

#[test]
fn status_json_names_holders_and_waiters() {
    let t = Dir::new();
    let host = hostname();
    let before = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("clock")
        .as_secs_f64();
    // Nothing yet: no state directory, no token.
    let st = t.status();
    assert_eq!(st["dir"], t.d());
    assert!(st["token"].is_null() && st["writer"].is_null());
    assert_eq!(st["pending"], serde_json::json!([]));
    assert_eq!(st["readers"], serde_json::json!([]));

    let r1 = t.hold("read", &[], "r1");
    let r2 = t.hold("read", &[], "r2");
    // The first writer takes `.master_lock` and waits for the readers to leave; the
    // next two queue behind it.
    let w1 = t.start_holder("write", &[], "w1");
    util::wait_until(
        || t.status()["writer"]["pid"] == w1.pid(),
        || w1.report("w1 never became the writer\n"),
    );
    let w2 = t.start_holder("write", &[], "w2");
    util::wait_until(
        || {
            t.status()["pending"]
                .as_array()
                .is_some_and(|p| p.len() == 1)
        },
        || w2.report("w2 never queued\n"),
    );
    let w3 = t.start_holder("write", &[], "w3");
    util::wait_until(
        || {
            t.status()["pending"]
                .as_array()
                .is_some_and(|p| p.len() == 2)
        },
        || w3.report("w3 never queued\n"),
    );
    let st = t.status();
    let obj = st.as_object().expect("an object");
    let mut keys: Vec<&str> = obj.keys().map(String::as_str).collect();
    keys.sort_unstable();
    assert_eq!(keys, ["dir", "pending", "readers", "token", "writer"]);
    assert_eq!(st["writer"]["pid"], w1.pid(), "{st}");
    assert!(!w1.is_ready(), "the writer ran beside readers");
    let pids = |v: &serde_json::Value| -> Vec<u64> {
        v.as_array()
            .expect("array")
            .iter()
            .map(|h| h["pid"].as_u64().expect("pid"))
            .collect()
    };
    assert_eq!(
        pids(&st["pending"]),
        [w2.pid(), w3.pid()].map(u64::from),
        "queue order: {st}"
    );
    let mut readers = pids(&st["readers"]);
    readers.sort_unstable();
    let mut want = vec![u64::from(r1.pid()), u64::from(r2.pid())];
    want.sort_unstable();
    assert_eq!(readers, want, "{st}");
    let all = [
        vec![st["writer"].clone()],
        st["pending"].as_array().cloned().unwrap_or_default(),
        st["readers"].as_array().cloned().unwrap_or_default(),
    ]
    .concat();
    for h in &all {
        let keys: Vec<&str> = h
            .as_object()
            .expect("holder object")
            .keys()
            .map(String::as_str)
            .collect();
        assert_eq!(keys.len(), 4, "{h}");
        assert_eq!(h["host"], host.as_str(), "{h}");
        assert_eq!(h["alive"], true, "{h}");
        let since = h["since"].as_f64().expect("since is a number");
        assert!(since >= before - 1.0 && since <= before + 60.0, "{h}");
    }

    // The table says the same, readably.
    let table = t.rwdir(["status", &t.d()]).run();
    table.expect_code(0);
    for pid in [r1.pid(), r2.pid(), w1.pid(), w2.pid(), w3.pid()] {
        table.check(
            table.stdout.contains(&pid.to_string()),
            "every pid in the table",
        );
    }
    table.check(
        table.stdout.contains("ROLE") && table.stdout.contains("pending #2"),
        "a table with a header and the queue",
    );

    // The readers leave; the first writer runs, with the token it was given.
    r1.release().expect_code(0);
    r2.release().expect_code(0);
    w1.wait_ready();
    let st = t.status();
    assert_eq!(st["writer"]["pid"], w1.pid(), "{st}");
    assert_eq!(st["readers"], serde_json::json!([]), "{st}");
    assert_eq!(
        st["token"].as_u64().map(|n| n.to_string()),
        Some(w1.token()),
        "{st}"
    );
    // The next writer in the queue follows.
    w1.release().expect_code(0);
    w2.wait_ready();
    let st = t.status();
    assert_eq!(st["writer"]["pid"], w2.pid(), "{st}");
    assert_eq!(pids(&st["pending"]), [u64::from(w3.pid())], "{st}");
    assert!(!w3.is_ready());
    drop(w3);
    w2.release().expect_code(0);
}

#[test]
fn status_of_a_malformed_lock_file() {
    let t = Dir::new();
    t.rwdir(["read", &t.d(), "true"]).run().expect_code(0);
    let name = ".slave_lock-0b6f1c7e-1d2a-4f8e-9c3b-5a6d7e8f9a0b";
    std::fs::write(t.state().join(name), "garbage").expect("plant a malformed file");
    let st = t.status();
    let r = &st["readers"][0];
    assert_eq!(r["host"], "?", "{st}");
    assert_eq!(r["pid"], 0, "{st}");
    assert!(
        r["alive"].is_null(),
        "a fresh malformed file is neither alive nor dead: {st}"
    );
    let table = t.rwdir(["status", &t.d()]).run();
    table
        .expect_code(0)
        .check(table.stdout.contains("malformed"), "says malformed");
    // It counts as held: a writer waits.
    t.rwdir(["write", "--no-wait", &t.d(), "true"])
        .run()
        .expect_code(75);
}

// ---------------------------------------------------------------------------------
// cleanup

/// Makes a dead reader: rwdir and its COMMAND are SIGKILLed while holding.
fn dead_reader(t: &Dir, name: &str) -> std::path::PathBuf {
    let before = t.lock_files(".slave_lock-");
    let h = t.hold("read", &[], name);
    let after = t.lock_files(".slave_lock-");
    let file = after
        .into_iter()
        .find(|p| !before.contains(p))
        .unwrap_or_else(|| panic!("no reader file{}", h.report("")));
    h.signal(nix::sys::signal::Signal::SIGKILL);
    let run = h.wait();
    run.check(run.status.code().is_none(), "rwdir was killed");
    file
}

#[test]
fn cleanup_removes_dead_holders_only() {
    let t = Dir::new();
    let dead = dead_reader(&t, "dead");
    let live = t.hold("read", &[], "live");
    let live_file = t
        .lock_files(".slave_lock-")
        .into_iter()
        .find(|p| *p != dead)
        .expect("live reader file");
    std::fs::write(t.dir.join("user-file"), "data").expect("user file");
    std::fs::write(t.state().join("notes.txt"), "not a lock file").expect("foreign file");

    let dry = t.rwdir(["cleanup", "--dry-run", &t.d()]).run();
    dry.expect_code(0);
    dry.check(
        dry.stdout.lines().count() == 1 && dry.stdout.starts_with("would remove "),
        "one would-be removal",
    );
    dry.check(
        dry.stdout.contains(&dead.display().to_string()),
        "names the dead file",
    );
    dry.check(dead.exists(), "--dry-run removes nothing");

    let r = t.rwdir(["cleanup", &t.d()]).run();
    r.expect_code(0);
    r.check(r.stdout.lines().count() == 1, "exactly one removal");
    r.check(
        r.stdout.starts_with("removed ") && r.stdout.contains(&dead.display().to_string()),
        "prints the removal",
    );
    r.check(
        r.stdout.contains("reader pid") && r.stdout.trim_end().ends_with("dead"),
        "says whose",
    );
    r.check(!dead.exists(), "the dead reader's file is gone");
    r.check(live_file.exists(), "the live reader's file stays");
    r.check(t.dir.join("user-file").exists(), "user files stay");
    r.check(t.state().join("notes.txt").exists(), "foreign files stay");
    // Nothing left to do.
    let again = t.rwdir(["cleanup", &t.d()]).run();
    again
        .expect_code(0)
        .check(again.stdout.is_empty(), "nothing more");
    live.release().expect_code(0);
}

#[test]
fn cleanup_all_removes_live_files_and_keeps_the_token_growing() {
    let t = Dir::new();
    let w = t.hold("write", &[], "w");
    let tok1: u64 = w.token().parse().expect("token");
    let dry = t.rwdir(["cleanup", "--all", "--dry-run", &t.d()]).run();
    dry.expect_code(0).check(
        dry.stdout.contains(".master_lock") && dry.stdout.contains("alive"),
        "would remove the live writer's file",
    );
    let r = t.rwdir(["cleanup", "--all", &t.d()]).run();
    r.expect_code(0).check(
        r.stdout.contains("removed ") && r.stdout.contains(".master_lock"),
        "removes the writer",
    );
    r.check(t.lock_files(".master_lock").is_empty(), "gone");
    r.check(
        t.status()["token"].as_u64() == Some(tok1),
        "the token stays",
    );
    // The next writer's token is higher than the removed writer's.
    let w2 = t
        .rwdir([
            "write",
            "--no-wait",
            &t.d(),
            "sh",
            "-c",
            "echo $RWDIR_TOKEN",
        ])
        .run();
    w2.expect_code(0);
    let tok2: u64 = w2.stdout.trim().parse().unwrap_or(0);
    w2.check(tok2 > tok1, "the token keeps growing");
    // The first writer notices, when it checks next.
    let lost = w.wait();
    lost.expect_code(74);
}

// ---------------------------------------------------------------------------------
// Errors

#[test]
fn a_missing_dir_is_named() {
    let t = Dir::new();
    let missing = t.path("missing").display().to_string();
    for args in [
        vec!["read", &missing, "true"],
        vec!["write", "--no-wait", &missing, "true"],
        vec!["status", &missing],
        vec!["cleanup", &missing],
    ] {
        let r = t.rwdir(&args).run();
        r.expect_code(66);
        let lines = r.stderr_lines();
        r.check(
            lines.len() == 1
                && lines[0].starts_with("rwdir: ")
                && lines[0].contains(&format!("`{missing}`")),
            "one line naming the path",
        );
        r.check(lines[0].contains("No such file or directory"), "says why");
    }
}

#[test]
fn dir_is_a_file() {
    let t = Dir::new();
    let file = t.path("file");
    std::fs::write(&file, "x").expect("file");
    let file = file.display().to_string();
    for args in [
        vec!["write", &file, "touch", "ran"],
        vec!["status", &file],
        vec!["cleanup", &file],
    ] {
        let r = t.rwdir(&args).run();
        r.expect_code(66);
        r.check(
            r.stderr.contains(&format!("`{file}` is not a directory")),
            "says so",
        );
    }
    assert!(!t.path("ran").exists());
}

#[test]
fn state_dir_is_a_symlink() {
    let t = Dir::new();
    let elsewhere = t.path("elsewhere");
    std::fs::create_dir(&elsewhere).expect("dir");
    std::os::unix::fs::symlink(&elsewhere, t.state()).expect("symlink");
    for args in [
        vec!["read".to_string(), t.d(), "touch".into(), "ran".into()],
        vec!["write".into(), t.d(), "touch".into(), "ran".into()],
        vec!["status".into(), t.d()],
        vec!["cleanup".into(), t.d()],
    ] {
        let r = t.rwdir(&args).run();
        r.expect_code(66);
        r.check(r.stderr_lines().len() == 1, "one line");
        r.check(
            r.stderr.contains(".rwdir` is not a directory"),
            "names .rwdir",
        );
    }
    assert!(!t.path("ran").exists(), "COMMAND never ran");
    assert_eq!(
        std::fs::read_dir(&elsewhere).expect("list").count(),
        0,
        "nothing written through the link"
    );
}

/// Every usage error is exit 64 and exactly two stderr lines (docs/cli.md, "Exit
/// status"): `rwdir: ` and what is wrong, then `hint: see 'rwdir SUBCOMMAND --help'`.
#[test]
fn usage_errors_exit_64_with_one_line_and_a_hint() {
    let t = Dir::new();
    let d = t.d();
    for (args, message, help) in [
        (
            vec!["read", "--foo", &d, "true"],
            "unexpected argument '--foo' for 'rwdir read'",
            "rwdir read",
        ),
        (
            vec!["write", "-x", &d, "true"],
            "unexpected argument '-x' for 'rwdir write'",
            "rwdir write",
        ),
        (
            vec!["write", &d],
            "missing <COMMAND>... for 'rwdir write'",
            "rwdir write",
        ),
        (
            vec!["write"],
            "missing <DIR> and <COMMAND>... for 'rwdir write'",
            "rwdir write",
        ),
        (
            vec!["cleanup", "--all"],
            "missing <DIR> for 'rwdir cleanup'",
            "rwdir cleanup",
        ),
        (
            vec!["read", "--timeout", "soon", &d, "true"],
            "invalid value 'soon' for '--timeout <SECS>': `soon` is not a number of seconds",
            "rwdir read",
        ),
        (
            vec!["read", "--timeout", "-1", &d, "true"],
            "invalid value '-1' for '--timeout <SECS>': `-1` seconds: must be ≥ 0",
            "rwdir read",
        ),
        (
            vec!["read", "--timeout", "1", "--no-wait", &d, "true"],
            "the argument '--timeout <SECS>' cannot be used with '--no-wait'",
            "rwdir read",
        ),
        (
            vec!["--lease", "0", "status", &d],
            "invalid value '0' for '--lease <SECS>': a lease of `0` seconds is too short (at least 0.1)",
            "rwdir status",
        ),
        (
            vec!["completions", "tcsh"],
            "invalid value 'tcsh' for '<SHELL>' [possible values: bash, elvish, fish, powershell, zsh]",
            "rwdir completions",
        ),
        (
            vec!["frobnicate"],
            "unrecognized subcommand 'frobnicate' for 'rwdir'",
            "rwdir",
        ),
        (
            vec![],
            "missing subcommand for 'rwdir' (read, write, status, cleanup, doctor, completions, man, help)",
            "rwdir",
        ),
    ] {
        let r = t.rwdir(&args).run();
        r.expect_code(64);
        let want = [
            format!("rwdir: {message}"),
            format!("hint: see '{help} --help'"),
        ];
        r.check(
            r.stderr == format!("{}\n{}\n", want[0], want[1]),
            &format!(
                "exactly these two lines on stderr:\n{}\n{}",
                want[0], want[1]
            ),
        );
        r.check(r.stdout.is_empty(), "nothing on stdout");
    }
    assert!(!t.state().exists(), "usage errors touch nothing");
}

#[test]
fn command_not_found_127_not_executable_126() {
    let t = Dir::new();
    let r = t
        .rwdir(["write", &t.d(), "rwdir-no-such-command", "x"])
        .run();
    r.expect_code(127);
    r.check(
        r.stderr_lines() == ["rwdir: failed to run `rwdir-no-such-command`: command not found"],
        "one clear line",
    );
    let script = t.path("script");
    std::fs::write(&script, "#!/bin/sh\necho hi\n").expect("script");
    let s = script.display().to_string();
    let r = t.rwdir(["read", &t.d(), &s]).run();
    r.expect_code(126);
    r.check(
        r.stderr.contains(&format!("failed to run `{s}`")),
        "names it",
    );
    let r = t.rwdir(["read", &t.d(), &t.d()]).run();
    r.expect_code(126);
    // Executable: runs.
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    let r = t.rwdir(["read", &t.d(), &s]).run();
    r.expect_code(0).check(r.stdout == "hi\n", "ran");
    // Not found through PATH either: 127, checked before taking any lock.
    let w = t.hold("write", &[], "w");
    let start = Instant::now();
    let r = t.rwdir(["read", &t.d(), "./missing"]).run();
    r.expect_code(127);
    r.check(
        start.elapsed() < Duration::from_secs(5),
        "did not wait for the lock",
    );
    drop(w);
}

#[test]
fn help_documents_exit_codes_and_tools_work() {
    let t = Dir::new();
    let r = t.rwdir(["--help"]).run();
    r.expect_code(0);
    for code in ["64", "66", "74", "75", "126", "127", "128+N"] {
        r.check(r.stdout.contains(code), "every exit code in --help");
    }
    let r = t.rwdir(["write", "--help"]).run();
    r.expect_code(0).check(
        r.stdout.contains("RWDIR_TOKEN"),
        "documents the environment",
    );
    let r = t.rwdir(["--version"]).run();
    r.expect_code(0)
        .check(r.stdout.starts_with("rwdir "), "version");
    let r = t.rwdir(["completions", "bash"]).run();
    r.expect_code(0)
        .check(r.stdout.contains("rwdir"), "completions");
    let r = t.rwdir(["man"]).run();
    r.expect_code(0).check(
        r.stdout.starts_with(".ie") && r.stdout.contains("\n.TH RWDIR 1 "),
        "a man page",
    );
}

#[test]
fn a_lease_option_is_accepted() {
    let t = Dir::new();
    t.rwdir(["--lease", "60", "write", &t.d(), "true"])
        .run()
        .expect_code(0);
    t.rwdir(["status", "--lease", "2.5", &t.d()])
        .run()
        .expect_code(0);
}

// ---------------------------------------------------------------------------------
// No extra thread; the heartbeat by hand

#[test]
fn an_uncontended_rwdir_runs_on_one_thread() {
    let t = Dir::new();
    // Count rwdir's own threads while a short COMMAND runs: rwdir is COMMAND's
    // grandparent (the reaper, a fork of rwdir, is its parent), or its parent with
    // `--no-wait-children`. The lock's watch thread starts only when its first refresh
    // or check is due (lease/3 or 500 ms after the lock is taken).
    let grandparent = r#"rwdir=$(sed -n 's/^PPid:[[:space:]]*//p' /proc/$PPID/status); ls /proc/$rwdir/task | wc -l"#;
    let parent = "ls /proc/$PPID/task | wc -l";
    let d = t.d();
    for mode in ["read", "write"] {
        for (opts, script) in [
            (&[][..], grandparent),
            (&["--no-wait-children"][..], parent),
        ] {
            let mut args = vec![mode];
            args.extend(opts);
            args.extend([d.as_str(), "sh", "-c", script]);
            let r = t.rwdir(&args).run();
            r.expect_code(0);
            r.check(
                r.stdout.trim() == "1",
                "rwdir runs no thread but its main one (no signal, wait, heartbeat or watch \
                 thread) while a short COMMAND runs",
            );
        }
    }
}

/// The command links GCC's unwinder statically on `*-linux-gnu` (cli/build.rs), so it
/// starts without loading `libgcc_s`: about 0.1 ms less per start.
#[cfg(target_env = "gnu")]
#[test]
fn the_command_starts_without_loading_libgcc_s() {
    let t = Dir::new();
    // With --no-wait-children, COMMAND's parent is rwdir itself.
    let d = t.d();
    let args = [
        "read",
        "--no-wait-children",
        &d,
        "sh",
        "-c",
        "cat /proc/$PPID/maps",
    ];
    let r = t.rwdir(args).run();
    r.expect_code(0);
    r.check(
        r.stdout.contains("libc.so"),
        "rwdir's memory map, with libc in it",
    );
    r.check(
        !r.stdout.contains("libgcc_s"),
        "rwdir has not loaded libgcc_s (cli/build.rs links libgcc_eh.a instead)",
    );
}

#[test]
fn the_lock_file_is_refreshed_while_command_runs() {
    let t = Dir::new();
    for (mode, prefix) in [("read", ".slave_lock-"), ("write", ".master_lock")] {
        // A lease of 0.3 s: a refresh every 0.1 s.
        let h = t.hold(mode, &["--lease", "0.3"], &format!("{mode}-ready"));
        t.expect_refreshed(&h, prefix);
        h.release().expect_code(0);
    }
}

#[test]
fn a_lock_obtained_after_waiting_is_refreshed_too() {
    let t = Dir::new();
    let w = t.hold("write", &[], "w");
    let r = t.start_holder("read", &["--lease", "0.3"], "r");
    util::wait_until(
        || r.stderr_text().contains("waiting for read lock") || r.is_ready(),
        || format!("the reader never waited{}", r.report("")),
    );
    w.release().expect_code(0);
    r.wait_ready();
    t.expect_refreshed(&r, ".slave_lock-");
    r.release().expect_code(0);
}
