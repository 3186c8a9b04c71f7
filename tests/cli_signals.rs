//! `rwdir read|write` and signals: forwarding SIGINT/SIGTERM/SIGHUP to COMMAND's process
//! group, SIGKILL of rwdir (COMMAND dies with it, the lock is recovered at once), signals
//! while waiting, a lock lost while COMMAND runs, and COMMAND in a terminal.
//!
//! COMMANDs signal readiness with a file or a line on a pipe, and the death of a
//! process is proven by a pipe it held reaching EOF, never by a sleep.

#![allow(clippy::disallowed_methods)]

#[path = "cli/util.rs"]
mod util;

use std::fs;
use std::io::{BufRead, BufReader, Read, Write};
use std::os::fd::OwnedFd;
use std::os::unix::process::CommandExt;
use std::process::Stdio;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use nix::sys::signal::Signal;
use util::{Dir, LONG};

/// A COMMAND that traps SIGINT, SIGTERM and SIGHUP: it writes the signal's name to
/// `$0.trapped` and exits 42. Ready when `$0` exists.
const TRAPPER: &str = r#"trap 'echo INT > "$0.trapped"; exit 42' INT
trap 'echo TERM > "$0.trapped"; exit 42' TERM
trap 'echo HUP > "$0.trapped"; exit 42' HUP
: > "$0"
while :; do sleep 0.1; done"#;

/// Starts `rwdir MODE DIR sh -c SCRIPT READY` with stderr in `READY.stderr`.
fn start_script(t: &Dir, mode: &str, script: &str, name: &str) -> util::Holder {
    let ready = t.path(name);
    let stderr = t.path(&format!("{name}.stderr"));
    let mut cmd = t.rwdir([
        mode.as_ref(),
        t.dir.as_os_str(),
        "sh".as_ref(),
        "-c".as_ref(),
        script.as_ref(),
        ready.as_os_str(),
    ]);
    cmd.cmd
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(fs::File::create(&stderr).expect("stderr file"));
    // rwdir leaves a signal it was started with ignored ignored, for COMMAND too (as
    // `nohup` wants); these tests want the signals forwarded, however the test itself
    // was started (`nohup cargo test`, a background job with SIGINT ignored).
    // SAFETY: only signal(2), async-signal-safe, runs between fork and exec.
    unsafe {
        cmd.cmd.pre_exec(|| {
            for sig in [nix::libc::SIGINT, nix::libc::SIGTERM, nix::libc::SIGHUP] {
                nix::libc::signal(sig, nix::libc::SIG_DFL);
            }
            Ok(())
        });
    }
    let child = cmd.cmd.spawn().expect("spawn rwdir");
    util::Holder::from_parts(child, ready, stderr, cmd.line, t.root())
}

#[test]
fn int_term_and_hup_are_forwarded_to_command() {
    let t = Dir::new();
    for sig in [Signal::SIGTERM, Signal::SIGINT, Signal::SIGHUP] {
        let name = format!("trap-{}", sig.as_str());
        let h = start_script(&t, "write", TRAPPER, &name);
        h.wait_ready();
        h.signal(sig);
        let run = h.wait();
        run.expect_code(42);
        let trapped = fs::read_to_string(t.path(&format!("{name}.trapped"))).unwrap_or_default();
        run.check(
            trapped.trim() == &sig.as_str()[3..],
            "COMMAND's trap saw the signal",
        );
        // The lock is free right after rwdir exits.
        t.rwdir(["write", "--no-wait", &t.d(), "true"])
            .run()
            .expect_code(0);
    }
}

#[test]
fn an_untrapped_forwarded_signal_gives_128_plus_n() {
    let t = Dir::new();
    let h = t.hold("read", &[], "r");
    h.signal(Signal::SIGTERM);
    h.wait().expect_code(143);
    t.rwdir(["write", "--no-wait", &t.d(), "true"])
        .run()
        .expect_code(0);
}

/// Reads lines from `r` in a thread; the receiver disconnects at EOF.
fn lines(r: impl Read + Send + 'static) -> mpsc::Receiver<String> {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(r).lines() {
            let Ok(line) = line else { return };
            if tx.send(line).is_err() {
                return;
            }
        }
    });
    rx
}

#[test]
fn sigkill_of_rwdir_kills_command_and_the_lock_is_recovered_at_once() {
    let t = Dir::new();
    for mode in ["write", "read"] {
        // COMMAND holds the write end of our stdout pipe: EOF means it is dead.
        let mut cmd = t.rwdir([mode, &t.d(), "sh", "-c", "echo ready; exec sleep 1000"]);
        // (stderr too: a COMMAND that outlived a failing test must not hold the test
        // harness's stderr open.)
        cmd.cmd
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::null());
        let mut child = cmd.cmd.spawn().expect("spawn");
        let out = lines(child.stdout.take().expect("stdout"));
        let first = out.recv_timeout(LONG);
        assert_eq!(
            first.as_deref(),
            Ok("ready"),
            "COMMAND never started\n{}",
            t.listing()
        );
        let st = t.status();
        let holder = if mode == "write" {
            st["writer"].clone()
        } else {
            st["readers"][0].clone()
        };
        assert_eq!(holder["pid"], child.id(), "{st}");
        child.kill().expect("SIGKILL rwdir");
        child.wait().expect("reap rwdir");
        // EOF: every holder of the pipe, COMMAND included, is gone.
        match out.recv_timeout(LONG) {
            Err(mpsc::RecvTimeoutError::Disconnected) => {}
            other => panic!("COMMAND outlived rwdir ({other:?})\n{}", t.listing()),
        }
        // No cleanup: the next contender recovers the lock at once.
        let r = t.rwdir(["write", "--no-wait", &t.d(), "true"]).run();
        r.expect_code(0);
        r.check(
            t.lock_files(".slave_lock").is_empty(),
            "the dead reader's file is gone",
        );
        r.check(t.lock_files(".master_lock").is_empty(), "no writer left");
    }
}

#[test]
fn sigkill_of_a_waiting_rwdir_leaves_nothing_in_the_way() {
    let t = Dir::new();
    let w = t.hold("write", &[], "w");
    let x = t.start_holder("write", &[], "x");
    util::wait_until(
        || {
            t.status()["pending"]
                .as_array()
                .is_some_and(|p| p.len() == 1)
        },
        || x.report("the second writer never queued\n"),
    );
    x.signal(Signal::SIGKILL);
    let run = x.wait();
    run.check(run.status.code().is_none(), "killed");
    run.check(!t.path("x").exists(), "its COMMAND never ran");
    w.release().expect_code(0);
    // Its queue file (its child, killed by its parent-death signal, named in it) does
    // not block a reader.
    t.rwdir(["read", "--no-wait", &t.d(), "true"])
        .run()
        .expect_code(0);
}

#[test]
fn a_signal_while_waiting_ends_rwdir_and_command_never_runs() {
    let t = Dir::new();
    let w = t.hold("write", &[], "w");
    for (sig, code) in [(Signal::SIGINT, 130), (Signal::SIGTERM, 143)] {
        let name = format!("x-{}", sig.as_str());
        let x = t.start_holder("read", &[], &name);
        x.wait_stderr("rwdir: waiting for read lock");
        x.signal(sig);
        let run = x.wait();
        run.expect_code(code);
        run.check(
            run.stderr.contains(&format!(
                "rwdir: interrupted by {} while waiting for read lock on `{}`",
                sig.as_str(),
                t.d()
            )),
            "says so",
        );
        run.check(!t.path(&name).exists(), "COMMAND never ran");
    }
    w.release().expect_code(0);
    t.rwdir(["write", "--no-wait", &t.d(), "true"])
        .run()
        .expect_code(0);
}

#[test]
fn a_writer_interrupted_while_queued_leaves_no_file_behind() {
    let t = Dir::new();
    let r = t.hold("read", &[], "r");
    let x = t.start_holder("write", &[], "queued");
    x.wait_stderr("rwdir: waiting for write lock");
    assert_eq!(
        t.lock_files(".pending_lock-").len() + t.lock_files(".master_lock").len(),
        1,
        "the writer is queued (or owns .master_lock, waiting for the reader)"
    );
    x.signal(Signal::SIGTERM);
    let run = x.wait();
    run.expect_code(143);
    // Its queue file (or `.master_lock`) is gone before rwdir exits: no host has to
    // wait for it to be judged dead.
    run.check(
        t.lock_files(".pending_lock-").is_empty() && t.lock_files(".master_lock").is_empty(),
        "no queued writer's file is left",
    );
    run.check(!t.path("queued").exists(), "COMMAND never ran");
    r.release().expect_code(0);
}

/// A COMMAND that reports SIGTERM in `$0.trapped` and exits 0.
const TERM_TRAP: &str = r#"trap 'echo TERM > "$0.trapped"; exit 0' TERM
: > "$0"
while :; do sleep 0.1; done"#;

#[test]
fn a_lost_lock_stops_command_and_exits_74() {
    let t = Dir::new();
    for (mode, prefix) in [("write", ".master_lock"), ("read", ".slave_lock-")] {
        let name = format!("lost-{mode}");
        let h = start_script(&t, mode, TERM_TRAP, &name);
        h.wait_ready();
        let files = t.lock_files(prefix);
        assert_eq!(files.len(), 1, "{}", h.report(""));
        fs::remove_file(&files[0]).expect("remove the lock file");
        let run = h.wait();
        run.expect_code(74);
        let trapped = fs::read_to_string(t.path(&format!("{name}.trapped"))).unwrap_or_default();
        run.check(trapped.trim() == "TERM", "COMMAND got SIGTERM");
        // (COMMAND's shell may add its own "Terminated" for its killed `sleep`.)
        let lines: Vec<&str> = run
            .stderr_lines()
            .into_iter()
            .filter(|l| l.starts_with("rwdir"))
            .collect();
        run.check(
            lines.len() == 1
                && lines[0].starts_with("rwdir: lock lost: ")
                && lines[0].contains(&files[0].display().to_string()),
            "one line saying the lock was lost, naming the file",
        );
    }
}

#[test]
fn a_lost_lock_kills_a_command_that_ignores_sigterm_10_s_later() {
    let t = Dir::new();
    let h = start_script(
        &t,
        "write",
        "trap '' TERM; : > \"$0\"; exec sleep 1000",
        "stubborn",
    );
    h.wait_ready();
    fs::remove_file(t.state().join(".master_lock")).expect("remove .master_lock");
    let start = Instant::now();
    h.wait_stderr("lock lost");
    let run = h.wait();
    let elapsed = start.elapsed();
    run.expect_code(74);
    run.check(elapsed >= Duration::from_secs(9), "SIGKILL only after 10 s");
    run.check(elapsed < Duration::from_secs(25), "but then");
}

// ---------------------------------------------------------------------------------
// A terminal

/// Runs rwdir as the session leader of a new pseudo-terminal (like a shell's
/// foreground job) and returns it with the master side.
fn in_terminal(t: &Dir, args: &[&str]) -> (std::process::Child, fs::File, mpsc::Receiver<Vec<u8>>) {
    session(t.rwdir(args).cmd)
}

/// Runs `cmd` as the session leader of a new pseudo-terminal, its controlling terminal.
fn session(
    mut cmd: std::process::Command,
) -> (std::process::Child, fs::File, mpsc::Receiver<Vec<u8>>) {
    let pty = nix::pty::openpty(None, None).expect("openpty");
    let slave: OwnedFd = pty.slave;
    cmd.stdin(slave.try_clone().expect("dup"))
        .stdout(slave.try_clone().expect("dup"))
        .stderr(slave);
    // SAFETY: setsid and ioctl are async-signal-safe; no allocation.
    unsafe {
        cmd.pre_exec(|| {
            if nix::libc::setsid() < 0 || nix::libc::ioctl(0, nix::libc::TIOCSCTTY as _, 0) < 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let child = cmd.spawn().expect("spawn in a terminal");
    drop(cmd);
    let master = fs::File::from(pty.master);
    let mut reader = master.try_clone().expect("dup master");
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let mut buf = [0u8; 4096];
        // EIO once every slave descriptor is closed.
        while let Ok(n) = reader.read(&mut buf) {
            if n == 0 || tx.send(buf[..n].to_vec()).is_err() {
                return;
            }
        }
    });
    (child, master, rx)
}

/// Collects terminal output until it contains `needle` (bounded).
fn expect_output(rx: &mpsc::Receiver<Vec<u8>>, seen: &mut String, needle: &str) {
    let deadline = Instant::now() + LONG;
    while !seen.contains(needle) {
        let left = deadline.saturating_duration_since(Instant::now());
        match rx.recv_timeout(left) {
            Ok(bytes) => seen.push_str(&String::from_utf8_lossy(&bytes)),
            Err(e) => panic!("terminal never showed {needle:?} ({e:?}); it showed:\n{seen}"),
        }
    }
}

fn wait_bounded(child: &mut std::process::Child, seen: &str) -> std::process::ExitStatus {
    let deadline = Instant::now() + LONG;
    loop {
        if let Some(st) = child.try_wait().expect("wait") {
            return st;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("rwdir did not exit; the terminal showed:\n{seen}");
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

#[test]
fn an_interactive_command_reads_the_terminal() {
    let t = Dir::new();
    let d = t.d();
    let (mut child, mut master, rx) = in_terminal(
        &t,
        &[
            "write",
            &d,
            "sh",
            "-c",
            r#"echo ready; read line; echo "got:$line""#,
        ],
    );
    let mut seen = String::new();
    expect_output(&rx, &mut seen, "ready");
    // A background COMMAND would be stopped by SIGTTIN here; a foreground one reads.
    master.write_all(b"hello\n").expect("type");
    expect_output(&rx, &mut seen, "got:hello");
    let st = wait_bounded(&mut child, &seen);
    assert_eq!(st.code(), Some(0), "terminal showed:\n{seen}");
}

#[test]
fn ctrl_c_in_the_terminal_reaches_command() {
    let t = Dir::new();
    let d = t.d();
    let (mut child, mut master, rx) =
        in_terminal(&t, &["read", &d, "sh", "-c", "echo ready; exec sleep 1000"]);
    let mut seen = String::new();
    expect_output(&rx, &mut seen, "ready");
    master.write_all(b"\x03").expect("type ^C");
    let st = wait_bounded(&mut child, &seen);
    assert_eq!(st.code(), Some(130), "terminal showed:\n{seen}");
    t.rwdir(["write", "--no-wait", &d, "true"])
        .run()
        .expect_code(0);
}

/// Issue #19: `sleep 1000 &` in an interactive shell run as COMMAND, then `exit`. The
/// job control of the shell puts the job in a process group of its own; rwdir holds the
/// lock until it exits all the same. (On the code before the reaper, rwdir released the
/// lock and exited at once.)
#[test]
fn a_job_left_by_an_interactive_command_keeps_the_lock() {
    let t = Dir::new();
    let d = t.d();
    let pid_file = t.path("job.pid");
    let (mut child, mut master, rx) = in_terminal(&t, &["write", &d, "sh", "-i"]);
    let mut seen = String::new();
    let line = format!(
        "sh -c 'echo $$ > {}; exec sleep 1000' &\n",
        pid_file.display()
    );
    master.write_all(line.as_bytes()).expect("type");
    util::wait_until(
        || fs::read_to_string(&pid_file).is_ok_and(|s| s.trim().parse::<i32>().is_ok()),
        || format!("the job never started\n{}", t.listing()),
    );
    let pid: i32 = fs::read_to_string(&pid_file)
        .unwrap_or_default()
        .trim()
        .parse()
        .unwrap_or(0);
    // Killed if the test fails.
    struct Job(nix::unistd::Pid);
    impl Drop for Job {
        fn drop(&mut self) {
            let _ = nix::sys::signal::kill(self.0, Signal::SIGKILL);
        }
    }
    let job = Job(nix::unistd::Pid::from_raw(pid));
    master.write_all(b"exit\n").expect("type exit");
    expect_output(
        &rx,
        &mut seen,
        &format!("remaining process exits: pid {pid}"),
    );
    t.rwdir(["read", "--no-wait", &d, "true"])
        .run()
        .expect_code(75);
    nix::sys::signal::kill(job.0, Signal::SIGTERM).expect("end the job");
    let st = wait_bounded(&mut child, &seen);
    assert_eq!(st.code(), Some(0), "terminal showed:\n{seen}");
    t.rwdir(["read", "--no-wait", &d, "true"])
        .run()
        .expect_code(0);
}

#[test]
fn ctrl_z_and_fg_in_an_interactive_shell() {
    let t = Dir::new();
    let Some((mut shell, mut master, rx)) = interactive_bash(&t) else {
        eprintln!("skipped: no bash on PATH");
        return;
    };
    let mut seen = String::new();
    expect_output(&rx, &mut seen, "PROMPT$ ");
    let line = format!(
        "{} write {} sh -c 'printf \"rea%s\\n\" dy; read x; echo got:$x'\n",
        util::rwdir_bin(),
        t.d()
    );
    master.write_all(line.as_bytes()).expect("type");
    // (The terminal echoes the command line, which says `rea%s`, not `ready`.)
    expect_output(&rx, &mut seen, "ready");
    // ^Z stops COMMAND; rwdir follows, so the shell gets the terminal back.
    master.write_all(b"\x1a").expect("type ^Z");
    expect_output(&rx, &mut seen, "Stopped");
    // The lock stays held while the job is stopped.
    t.rwdir(["read", "--no-wait", &t.d(), "true"])
        .run()
        .expect_code(75);
    // fg: COMMAND gets the terminal back and reads from it.
    master.write_all(b"fg\n").expect("type fg");
    expect_output(&rx, &mut seen, "sh -c");
    master.write_all(b"hello\n").expect("type");
    expect_output(&rx, &mut seen, "got:hello");
    master.write_all(b"echo rc=$?\n").expect("type");
    expect_output(&rx, &mut seen, "rc=0");
    master.write_all(b"exit\n").expect("type exit");
    wait_bounded(&mut shell.0, &seen);
    t.rwdir(["write", "--no-wait", &t.d(), "true"])
        .run()
        .expect_code(0);
}

#[test]
fn a_background_job_that_reads_the_terminal_runs_after_fg() {
    let t = Dir::new();
    let Some((mut shell, mut master, rx)) = interactive_bash(&t) else {
        eprintln!("skipped: no bash on PATH");
        return;
    };
    let mut seen = String::new();
    expect_output(&rx, &mut seen, "PROMPT$ ");
    // In the background, COMMAND's `read` gets SIGTTIN and stops; rwdir follows, so
    // the shell reports the job stopped.
    let line = format!(
        "{} write {} sh -c 'read x; echo got:$x' &\n",
        util::rwdir_bin(),
        t.d()
    );
    master.write_all(line.as_bytes()).expect("type");
    util::wait_until(
        || {
            while let Ok(b) = rx.try_recv() {
                seen.push_str(&String::from_utf8_lossy(&b));
            }
            if !seen.contains("Stopped") {
                // bash reports a stopped job before its next prompt.
                let _ = master.write_all(b"\n");
            }
            seen.contains("Stopped")
        },
        || "the job was never reported stopped".to_string(),
    );
    // fg: rwdir continues, hands COMMAND the terminal, and continues it.
    master.write_all(b"fg\n").expect("type fg");
    expect_output(&rx, &mut seen, "sh -c");
    master.write_all(b"hello\n").expect("type");
    expect_output(&rx, &mut seen, "got:hello");
    master.write_all(b"echo rc=$?\n").expect("type");
    expect_output(&rx, &mut seen, "rc=0");
    master.write_all(b"exit\n").expect("type exit");
    wait_bounded(&mut shell.0, &seen);
}

/// An interactive bash on a new pseudo-terminal in the test's root, if there is bash.
fn interactive_bash(t: &Dir) -> Option<(KillOnDrop, fs::File, mpsc::Receiver<Vec<u8>>)> {
    let bash = which("bash").ok()?;
    let mut cmd = std::process::Command::new(bash);
    cmd.args(["--norc", "--noprofile", "-i"])
        .current_dir(t.root())
        .env("PS1", "PROMPT$ ")
        .env("HISTFILE", "/dev/null")
        .env("INPUTRC", "/dev/null")
        .env("TERM", "dumb");
    let (shell, master, rx) = session(cmd);
    Some((KillOnDrop(shell), master, rx))
}

/// Kills (SIGKILL) and reaps a child that a failing test leaves behind.
struct KillOnDrop(std::process::Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn which(name: &str) -> Result<std::path::PathBuf, ()> {
    let path = std::env::var_os("PATH").ok_or(())?;
    std::env::split_paths(&path)
        .map(|d| d.join(name))
        .find(|p| p.is_file())
        .ok_or(())
}
