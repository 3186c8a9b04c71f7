//! The sessions shown in README.md ("A real session") and docs/cli.md ("A session") are
//! replayed as typed (#19): each `$ ` line is fed to a real, non-interactive `bash` in a
//! fresh directory holding `data/`, with `rwdir` on `PATH` being the binary under test.
//! A line is typed only once the output shown above it has appeared and bash has come
//! back to its prompt (an `echo @@prompt` typed after each line stands for it), as a
//! user reading the session would do: readiness is read from the output, never guessed
//! with a sleep. Before a `rwdir cleanup` line the replay also waits, as a user's typing
//! does, until the job of a killed rwdir is gone (see [`settle`]).
//! The output must be the documented lines, with pids, host names, times, ages and
//! `since` floats masked, runs of spaces (table alignment) collapsed, and bash's own job
//! notices (`bash: line 7: 4242 Killed ...`) left out, as the documents say.

#![allow(clippy::disallowed_methods)]

#[path = "cli/bin.rs"]
mod bin;

use std::fs;
use std::io::{BufRead as _, BufReader, Write as _};
use std::os::unix::process::CommandExt as _;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// The bound for one expected line to appear. Generous: only a failing run waits this
/// long.
const LONG: Duration = Duration::from_secs(30);

const REPO: &str = env!("CARGO_MANIFEST_DIR");

/// What the replay has bash print after each typed line, for the prompt.
const PROMPT: &str = "@@prompt";

#[test]
fn readme_session_is_reproducible() {
    replay("README.md", "A real session");
}

#[test]
fn cli_doc_session_is_reproducible() {
    replay("docs/cli.md", "## A session");
}

/// One typed line and the output the document shows under it.
#[derive(Debug)]
struct Step {
    command: String,
    output: Vec<String>,
}

/// The first ```text block after `marker` in `doc`, as steps.
fn session(doc: &str, marker: &str) -> Vec<Step> {
    let at = doc
        .find(marker)
        .unwrap_or_else(|| panic!("no `{marker}` in the document"));
    let rest = &doc[at..];
    let start = rest
        .find("```text\n")
        .expect("a ```text block after the marker")
        + 8;
    let block = &rest[start..start + rest[start..].find("\n```").expect("the block's end")];
    let mut steps: Vec<Step> = Vec::new();
    for line in block.lines() {
        match line.strip_prefix("$ ") {
            Some(command) => steps.push(Step {
                command: command.to_string(),
                output: Vec::new(),
            }),
            None => steps
                .last_mut()
                .expect("the block starts with a `$ ` line")
                .output
                .push(line.to_string()),
        }
    }
    steps
}

/// `bash` and everything it started, killed (its process group) when dropped: the
/// background jobs stay in bash's group, and their COMMANDs die with them
/// (PR_SET_PDEATHSIG).
struct Shell(Child);

impl Drop for Shell {
    fn drop(&mut self) {
        let pgid = nix::unistd::Pid::from_raw(-(self.0.id() as i32));
        let _ = nix::sys::signal::kill(pgid, nix::sys::signal::Signal::SIGKILL);
        let _ = self.0.wait();
    }
}

fn replay(doc_path: &str, marker: &str) {
    let doc = fs::read_to_string(Path::new(REPO).join(doc_path)).expect("read the document");
    let steps = session(&doc, marker);
    assert!(
        steps.len() > 5,
        "{doc_path}: a session of {} lines",
        steps.len()
    );

    let tmp = tempfile::Builder::new()
        .prefix("rwdir-transcript-")
        .tempdir()
        .expect("temporary directory");
    fs::create_dir(tmp.path().join("data")).expect("data/");
    let bin = tmp.path().join("bin");
    fs::create_dir(&bin).expect("bin/");
    std::os::unix::fs::symlink(bin::rwdir_bin(), bin.join("rwdir")).expect("link rwdir");
    let path = std::env::join_paths(std::iter::once(bin.clone()).chain(std::env::split_paths(
        &std::env::var_os("PATH").unwrap_or_default(),
    )))
    .expect("PATH");

    // stdout and stderr share one pipe, in the order a terminal would show them.
    let (reader, writer) = std::io::pipe().expect("pipe");
    let mut cmd = Command::new("bash");
    cmd.args(["--norc", "--noprofile"])
        .current_dir(tmp.path())
        .env("PATH", path)
        .env_remove("BASH_ENV")
        .env_remove("ENV")
        .env_remove("RWDIR_MODE")
        .env_remove("RWDIR_DIR")
        .env_remove("RWDIR_TOKEN")
        .stdin(Stdio::piped())
        .stdout(writer.try_clone().expect("pipe"))
        .stderr(writer)
        .process_group(0);
    let mut shell = Shell(cmd.spawn().expect("run bash"));
    drop(cmd); // its copies of the pipe's write end
    let mut stdin = shell.0.stdin.take().expect("bash's stdin");

    let (tx, rx) = mpsc::channel::<String>();
    std::thread::spawn(move || {
        for line in BufReader::new(reader).lines() {
            let Ok(line) = line else { break };
            if tx.send(line).is_err() {
                break;
            }
        }
    });

    // Everything so far, for the failure message: typed lines and what came out.
    let mut log = String::new();
    let mut notices = Vec::new();
    // The prompts bash has reached: after each typed line the replay types
    // `echo @@prompt` too, which stands for the prompt a user waits for.
    let prompts = std::cell::Cell::new(0usize);
    let mut next_line = |log: &mut String, deadline: Instant| -> Option<String> {
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let line = rx.recv_timeout(left).ok()?;
            if is_job_notice(&line) {
                notices.push(line);
                continue;
            }
            if line == PROMPT {
                prompts.set(prompts.get() + 1);
                return Some(line);
            }
            log.push_str(&line);
            log.push('\n');
            return Some(line);
        }
    };
    for (typed, step) in steps.iter().enumerate() {
        // The prompt after the previous line: it ran to its end.
        while prompts.get() < typed {
            if next_line(&mut log, Instant::now() + LONG).is_none() {
                panic!(
                    "{doc_path}: no prompt after the line before `$ {}`",
                    step.command
                );
            }
        }
        if step.command.starts_with("rwdir cleanup") {
            settle(&tmp.path().join("data"));
        }
        log.push_str(&format!("$ {}\n", step.command));
        writeln!(stdin, "{}\necho {PROMPT}", step.command).expect("type a line into bash");
        stdin.flush().expect("flush");
        for want in &step.output {
            let deadline = Instant::now() + LONG;
            let got = std::iter::from_fn(|| next_line(&mut log, deadline)).find(|l| l != PROMPT);
            let ok = got.as_deref().is_some_and(|got| mask(got) == mask(want));
            assert!(
                ok,
                "{doc_path}: after `$ {}`, expected\n  {want}\ngot\n  {}\n(masked: `{}` vs `{}`)\n\
                 the session so far:\n{log}",
                step.command,
                got.as_deref().unwrap_or("(nothing within 30 s)"),
                mask(want),
                got.as_deref().map(mask).unwrap_or_default(),
            );
        }
    }
    // The end: no output the document does not show.
    drop(stdin);
    let deadline = Instant::now() + LONG;
    let mut extra = Vec::new();
    while let Some(line) = next_line(&mut log, deadline) {
        if line != PROMPT {
            extra.push(line);
        }
    }
    assert!(
        extra.is_empty(),
        "{doc_path}: output after the last line: {extra:?}\nthe session:\n{log}"
    );
    let status = shell.0.wait().expect("bash");
    assert!(
        status.success(),
        "{doc_path}: bash exited with {status}\n{log}"
    );
    eprintln!(
        "{doc_path}: {} lines replayed; bash's job notices left out: {notices:?}",
        steps.len()
    );
}

/// Waits until the jobs of dead `rwdir` holders are gone too. When rwdir dies by SIGKILL,
/// the reaper that leads its job's process group kills what is left of the job and exits
/// within milliseconds; until then the lock still counts as held (docs/cli.md). A user
/// reading the session types the next line long after that; the replay, which types at
/// once, waits for it: for every lock file whose holder's pid is gone, until its process
/// group is gone too.
fn settle(data: &Path) {
    use nix::sys::signal::kill;
    use nix::unistd::Pid;
    let lock = rwdir::DirLock::new(data).expect("lock on data/");
    let start = Instant::now();
    loop {
        let st = lock.status().expect("status");
        let entries = st.writer.iter().chain(&st.pending).chain(&st.readers);
        let lingering = entries.filter_map(|e| e.holder.as_ref()).any(|h| {
            let dead = kill(Pid::from_raw(h.pid as i32), None).is_err();
            dead && h.pgid > 1 && kill(Pid::from_raw(-(h.pgid as i32)), None).is_ok()
        });
        if !lingering {
            return;
        }
        assert!(
            start.elapsed() < LONG,
            "a dead holder's job lingers in {}",
            data.display()
        );
        std::thread::sleep(Duration::from_millis(2));
    }
}

/// bash's own report of a background job that died of a signal, which the documents
/// leave out: `bash: line 7: 4242 Killed                  rwdir read ...`.
fn is_job_notice(line: &str) -> bool {
    let Some(rest) = line.strip_prefix("bash: line ") else {
        return false;
    };
    let Some((n, rest)) = rest.split_once(": ") else {
        return false;
    };
    let mut words = rest.split_whitespace();
    n.chars().all(|c| c.is_ascii_digit())
        && words
            .next()
            .is_some_and(|p| p.chars().all(|c| c.is_ascii_digit()))
        && words
            .next()
            .is_some_and(|w| ["Killed", "Terminated", "Done", "Exit"].contains(&w))
}

/// A line with what differs from run to run replaced: pids, host names, times, ages,
/// and runs of spaces collapsed.
fn mask(line: &str) -> String {
    let mut words: Vec<String> = line.split_whitespace().map(str::to_string).collect();
    // `rwdir status` rows: ROLE HOST PID DATE TIME AGE s ALIVE.
    let role = match words.first().map(String::as_str) {
        Some("writer" | "reader") if words.len() == 8 => 1,
        Some("pending") if words.len() == 9 => 2,
        _ => 0,
    };
    if role > 0 {
        for (i, what) in ["HOST", "PID", "DATE", "TIME", "AGE"].iter().enumerate() {
            words[role + i] = format!("<{what}>");
        }
    }
    let mut s = words.join(" ");
    s = mask_after(&s, "pid ", |c| c.is_ascii_digit(), "", "<PID>");
    s = mask_after(&s, "\"pid\":", |c| c.is_ascii_digit(), "", "<PID>");
    s = mask_after(&s, "on host ", |c| c != ' ', "", "<HOST>");
    s = mask_after(&s, "\"host\":\"", |c| c != '"', "", "<HOST>");
    s = mask_after(
        &s,
        "\"since\":",
        |c| c.is_ascii_digit() || c == '.',
        "",
        "<T>",
    );
    mask_after(&s, "(", |c| c.is_ascii_digit(), " s)", "<AGE>")
}

/// `s` with every non-empty run of `class` characters that follows `prefix` (and is
/// followed by `suffix`) replaced by `with`.
fn mask_after(
    s: &str,
    prefix: &str,
    class: impl Fn(char) -> bool,
    suffix: &str,
    with: &str,
) -> String {
    let mut out = String::new();
    let mut rest = s;
    while let Some(at) = rest.find(prefix) {
        let after = &rest[at + prefix.len()..];
        let len = after.find(|c: char| !class(c)).unwrap_or(after.len());
        out.push_str(&rest[..at + prefix.len()]);
        if len > 0 && after[len..].starts_with(suffix) {
            out.push_str(with);
        } else {
            out.push_str(&after[..len]);
        }
        rest = &after[len..];
    }
    out.push_str(rest);
    out
}

#[test]
fn masks() {
    assert_eq!(
        mask("rwdir: waiting for write lock on `data`: held by reader pid 17435 on host vm (1 s)"),
        "rwdir: waiting for write lock on `data`: held by reader pid <PID> on host <HOST> (<AGE> s)"
    );
    assert_eq!(
        mask("pending #1  build-7  4194304  2026-11-30 18:30:25  12 s  yes"),
        "pending #1 <HOST> <PID> <DATE> <TIME> <AGE> s yes"
    );
    assert_eq!(
        mask(r#"{"writer":{"host":"vm","pid":17472,"since":1796063425.2317538,"alive":true}}"#),
        r#"{"writer":{"host":"<HOST>","pid":<PID>,"since":<T>,"alive":true}}"#
    );
    assert_eq!(mask("exit 75"), "exit 75");
    assert_eq!(
        mask("timed out after 1.5 s (2 s)"),
        "timed out after 1.5 s (<AGE> s)"
    );
    assert!(is_job_notice(
        "bash: line 7: 4242 Killed                  rwdir read data sleep 60"
    ));
    assert!(!is_job_notice("bash: rwdir: command not found"));
}
