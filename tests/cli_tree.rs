//! `rwdir read|write` holds the lock until every process COMMAND started has exited:
//! background jobs, `setsid`, `nohup`, double forks and daemons (issue #19). It says so
//! once on stderr, `--no-wait-children` gives the old release-when-COMMAND-exits
//! behaviour, and a SIGKILL of rwdir kills every process of the job.
//!
//! The processes COMMAND leaves behind ("leftovers") write their pid to a file (their
//! readiness) and then sleep until the test ends them with a signal; no sleep decides a
//! test.

#![allow(clippy::disallowed_methods)]

#[path = "cli/util.rs"]
mod util;

use std::fs;
use std::process::Stdio;

use nix::sys::signal::Signal;
use nix::unistd::Pid;
use util::{Dir, Holder};

/// The script of a leftover: it writes its pid to the file `$1` and sleeps.
/// (One `write` of a few bytes: a reader sees the file empty or complete.)
const LEFTOVER: &str = r#"echo $$ > "$1"
exec sleep 1000
"#;

/// A leftover that writes its pid to the file `$0.NAME`, for COMMAND's script (where
/// `$0` is the test's base path). Writes the leftover's script into the root.
fn leftover(t: &Dir, name: &str) -> String {
    let script = t.path("leftover.sh");
    fs::write(&script, LEFTOVER).expect("write the leftover's script");
    format!(r#"sh {} "$0.{name}""#, script.display())
}

/// Starts `rwdir write [OPTS] DIR sh -c SCRIPT BASE`, stdin and stdout closed, stderr in
/// `BASE.stderr`.
fn start(t: &Dir, opts: &[&str], script: &str, name: &str) -> Holder {
    let base = t.path(name);
    let stderr = t.path(&format!("{name}.stderr"));
    let mut args: Vec<std::ffi::OsString> = vec!["write".into()];
    args.extend(opts.iter().map(Into::into));
    args.extend([
        t.dir.clone().into_os_string(),
        "sh".into(),
        "-c".into(),
        script.into(),
        base.clone().into_os_string(),
    ]);
    let mut cmd = t.rwdir(&args);
    cmd.cmd
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(fs::File::create(&stderr).expect("stderr file"));
    let child = cmd.cmd.spawn().expect("spawn rwdir");
    Holder::from_parts(child, base, stderr, cmd.line, t.root())
}

/// The leftovers' pids, killed (SIGKILL) on drop so that a failing test leaves no
/// sleeping process behind.
struct Leftovers(Vec<i32>);

impl Drop for Leftovers {
    fn drop(&mut self) {
        for &pid in &self.0 {
            if alive(pid) {
                let _ = nix::sys::signal::kill(Pid::from_raw(pid), Signal::SIGKILL);
            }
        }
    }
}

/// Waits (bounded) for the pid files `BASE.NAME` of the leftovers `names`.
fn pids(h: &Holder, names: &[&str]) -> Leftovers {
    let mut out = Leftovers(Vec::new());
    for name in names {
        let mut file = h.ready.clone().into_os_string();
        file.push(format!(".{name}"));
        let mut pid = None;
        util::wait_until(
            || {
                pid = fs::read_to_string(&file)
                    .ok()
                    .and_then(|s| s.trim().parse::<i32>().ok());
                pid.is_some()
            },
            || h.report(&format!("leftover `{name}` never wrote its pid\n")),
        );
        out.0.extend(pid);
    }
    out
}

/// Whether `pid` exists and has not exited (a zombie counts as dead).
fn alive(pid: i32) -> bool {
    fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|st| {
        let state = st.rsplit_once(')').map(|(_, rest)| rest.trim_start());
        !state.is_some_and(|s| s.starts_with('Z') || s.starts_with('X'))
    })
}

fn end(pid: i32) {
    nix::sys::signal::kill(Pid::from_raw(pid), Signal::SIGTERM).expect("SIGTERM a leftover");
}

/// The one line rwdir says once COMMAND has exited and leftovers remain.
fn holding_line(pids: &[i32]) -> String {
    let mut pids = pids.to_vec();
    pids.sort_unstable();
    let list = pids
        .iter()
        .map(i32::to_string)
        .collect::<Vec<_>>()
        .join(", ");
    if pids.len() == 1 {
        format!(
            "rwdir: COMMAND exited; holding the lock until its 1 remaining process exits: pid {list}"
        )
    } else {
        format!(
            "rwdir: COMMAND exited; holding the lock until its {} remaining processes exit: pids {list}",
            pids.len()
        )
    }
}

/// COMMAND starts one leftover with `spawn` (`{}` stands for the leftover) and exits 3:
/// rwdir says so, the lock stays held while the leftover lives, and once the test ends
/// it, rwdir releases and exits 3. (Fails on the code before the reaper, and with
/// `--no-wait-children`: rwdir exits 3 at once and says nothing.)
fn keeps_the_lock(spawn: &str) {
    let t = Dir::new();
    let script = format!("{}\nexit 3", spawn.replace("{}", &leftover(&t, "left")));
    let h = start(&t, &[], &script, "job");
    let left = pids(&h, &["left"]);
    // (The line names what remains when COMMAND exits: for a daemon, perhaps an
    // intermediate process still on its way out.)
    h.wait_stderr("rwdir: COMMAND exited; holding the lock until its ");
    let busy = t.rwdir(["read", "--no-wait", &t.d(), "true"]).run();
    busy.expect_code(75);
    busy.check(
        busy.stderr
            .contains(&format!("held by writer pid {}", h.pid())),
        "the lock is still rwdir's",
    );
    end(left.0[0]);
    let run = h.wait();
    run.expect_code(3);
    run.check(
        run.stderr.matches("COMMAND exited").count() == 1,
        "the line is said once",
    );
    run.check(!alive(left.0[0]), "the leftover is gone");
    t.rwdir(["read", "--no-wait", &t.d(), "true"])
        .run()
        .expect_code(0);
}

#[test]
fn a_background_job_keeps_the_lock_until_it_exits() {
    keeps_the_lock("{} &");
}

#[test]
fn a_setsid_process_keeps_the_lock_until_it_exits() {
    keeps_the_lock("setsid {} &");
}

#[test]
fn a_nohup_process_keeps_the_lock_until_it_exits() {
    keeps_the_lock("nohup {} > /dev/null 2>&1 &");
}

#[test]
fn a_double_forked_process_keeps_the_lock_until_it_exits() {
    keeps_the_lock("({} &)");
}

/// A daemon the classic way: fork, `setsid`, fork again, standard streams closed.
#[test]
fn a_daemon_keeps_the_lock_until_it_exits() {
    keeps_the_lock(r#"(setsid sh -c '({} &)' "$0" < /dev/null > /dev/null 2>&1 &)"#);
}

#[test]
fn the_line_names_every_remaining_process_once() {
    let t = Dir::new();
    // COMMAND exits once both run, so that they are all that remains.
    let script = format!(
        "{} &\nsetsid {} &\nuntil [ -s \"$0.a\" ] && [ -s \"$0.b\" ]; do sleep 0.01; done",
        leftover(&t, "a"),
        leftover(&t, "b")
    );
    let h = start(&t, &[], &script, "two");
    let left = pids(&h, &["a", "b"]);
    h.wait_stderr(&holding_line(&left.0));
    end(left.0[0]);
    util::wait_until(|| !alive(left.0[0]), || h.report("the first never died\n"));
    t.rwdir(["write", "--no-wait", &t.d(), "true"])
        .run()
        .expect_code(75);
    end(left.0[1]);
    let run = h.wait();
    run.expect_code(0);
    let rwdir_lines: Vec<&str> = run
        .stderr_lines()
        .into_iter()
        .filter(|l| l.starts_with("rwdir"))
        .collect();
    run.check(
        rwdir_lines == [holding_line(&left.0)],
        "one line from rwdir, naming both leftovers",
    );
}

#[test]
fn no_wait_children_releases_the_lock_when_command_exits() {
    let t = Dir::new();
    let script = format!(
        "{} &\nsetsid {} &\nexit 5",
        leftover(&t, "a"),
        leftover(&t, "b")
    );
    let h = start(&t, &["--no-wait-children"], &script, "old");
    let left = pids(&h, &["a", "b"]);
    let run = h.wait();
    run.expect_code(5);
    run.check(!run.stderr.contains("COMMAND exited"), "nothing said");
    run.check(left.0.iter().all(|&p| alive(p)), "the leftovers still run");
    t.rwdir(["read", "--no-wait", &t.d(), "true"])
        .run()
        .expect_code(0);
    for &p in &left.0 {
        end(p);
    }
}

/// SIGKILL of rwdir while leftovers run (COMMAND exited, or still running): every
/// process of the job dies, those that left COMMAND's process group or session too,
/// and the lock is then judged dead.
#[test]
fn sigkill_of_rwdir_kills_every_leftover() {
    let t = Dir::new();
    // (COMMAND running first: on the code before the reaper, the leftovers outside
    // COMMAND's process group outlive rwdir.)
    for command_runs in [true, false] {
        let name = format!("killed-{command_runs}");
        let spawns = [
            format!("{} &", leftover(&t, "bg")),
            format!("setsid {} &", leftover(&t, "setsid")),
            format!("nohup {} > /dev/null 2>&1 &", leftover(&t, "nohup")),
            format!("({} &)", leftover(&t, "double")),
            format!(
                r#"(setsid sh -c '({} &)' "$0" < /dev/null > /dev/null 2>&1 &)"#,
                leftover(&t, "daemon")
            ),
        ];
        let mut script = spawns.join("\n");
        let mut names = vec!["bg", "setsid", "nohup", "double", "daemon"];
        if command_runs {
            script.push('\n');
            script.push_str("exec ");
            script.push_str(&leftover(&t, "command"));
            names.push("command");
        }
        let h = start(&t, &[], &script, &name);
        let left = pids(&h, &names);
        if !command_runs {
            h.wait_stderr("COMMAND exited");
        }
        h.signal(Signal::SIGKILL);
        let run = h.wait();
        run.check(run.status.code().is_none(), "rwdir was killed");
        for (&pid, name) in left.0.iter().zip(&names) {
            util::wait_until(
                || !alive(pid),
                || {
                    format!(
                        "leftover `{name}` (pid {pid}) outlived rwdir\n{}",
                        run.report()
                    )
                },
            );
        }
        let cleanup = t.rwdir(["cleanup", &t.d()]).run();
        cleanup.expect_code(0);
        cleanup.check(
            cleanup.stdout.contains("removed") && cleanup.stdout.contains("dead"),
            "the dead writer's file is removed",
        );
        t.rwdir(["write", "--no-wait", &t.d(), "true"])
            .run()
            .expect_code(0);
    }
}
