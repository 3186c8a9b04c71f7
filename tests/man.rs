//! `rwdir man`: the manual page is complete (#19). What it must contain is read from the
//! binary at test time (`rwdir --help`, `rwdir SUBCOMMAND --help`), so that an option,
//! a subcommand, a variable of COMMAND's environment or an exit code added without man
//! coverage fails here; the files from README.md's on-disk format table.
//!
//! A custom harness (libtest-mimic): the check that man-db renders the page without a
//! warning is reported as ignored, with the reason, where man-db (or groff) is not
//! installed, instead of passing without running.

#![allow(clippy::disallowed_methods)]

#[path = "cli/bin.rs"]
mod bin;

use std::fs;
use std::process::{Command, Output, Stdio};

use libtest_mimic::{Arguments, Completion, Failed, Trial};

fn main() {
    let args = Arguments::from_args();
    let trials = vec![
        Trial::test("every_subcommand_and_option_is_in_the_page", || {
            every_subcommand_and_option_is_in_the_page();
            Ok(())
        }),
        Trial::test("environment_exit_status_and_files_are_in_the_page", || {
            environment_exit_status_and_files_are_in_the_page();
            Ok(())
        }),
        Trial::test("man_out_writes_the_page_into_a_directory", || {
            man_out_writes_the_page_into_a_directory();
            Ok(())
        }),
        Trial::ignorable_test("man_db_renders_the_page_without_warnings", || {
            man_db_renders_the_page_without_warnings()
        }),
    ];
    libtest_mimic::run(&args, trials).exit();
}

/// `rwdir ARGS...`, which must succeed; its stdout.
fn rwdir(args: &[&str]) -> String {
    let out = Command::new(bin::rwdir_bin())
        .args(args)
        .stdin(Stdio::null())
        .output()
        .expect("run rwdir");
    assert!(
        out.status.success() && out.stderr.is_empty(),
        "rwdir {args:?}: {}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).expect("utf-8")
}

/// The page's text with roff's escapes undone: `\-` is `-`, font changes and `\&` go.
fn plain(roff: &str) -> String {
    roff.replace(r"\-", "-")
        .replace(r"\fB", "")
        .replace(r"\fI", "")
        .replace(r"\fR", "")
        .replace(r"\&", "")
}

/// The part of `page` from the line `heading` to the next `.SH` (or `.SS`, for a
/// subsection) line.
fn section<'a>(page: &'a str, heading: &str) -> &'a str {
    let start = page
        .find(&format!("\n{heading}\n"))
        .unwrap_or_else(|| panic!("no `{heading}` in the page:\n{page}"))
        + 1;
    let body = &page[start + heading.len()..];
    let level = if heading.starts_with(".SS") {
        &["\n.SS ", "\n.SH "][..]
    } else {
        &["\n.SH "][..]
    };
    let end = level
        .iter()
        .filter_map(|l| body.find(l))
        .min()
        .unwrap_or(body.len());
    &page[start..start + heading.len() + end]
}

/// The options (`--quiet`, `-q`) and arguments (`DIR`, `COMMAND`) a `--help` lists: the
/// lines of its Options and Arguments that start less than 8 columns in (descriptions
/// start further in).
fn listed(help: &str) -> Vec<String> {
    let mut found = Vec::new();
    for line in help.lines() {
        let indent = line.len() - line.trim_start().len();
        let line = line.trim_start();
        if indent == 0 || indent >= 8 {
            continue;
        }
        if line.starts_with('-') {
            for word in line.split_whitespace() {
                let word = word.trim_end_matches(',');
                if !word.starts_with('-') {
                    break;
                }
                found.push(word.to_string());
            }
        } else if let Some(arg) = line.strip_prefix('<') {
            found.push(arg[..arg.find('>').expect("<ARG>")].to_string());
        }
    }
    found
}

/// The subcommands `rwdir --help` lists, but `help`.
fn subcommands(help: &str) -> Vec<String> {
    let list = &help[help.find("Commands:\n").expect("a Commands: list") + 10..];
    list.lines()
        .take_while(|l| !l.trim().is_empty())
        .filter_map(|l| l.split_whitespace().next())
        .filter(|name| *name != "help")
        .map(str::to_string)
        .collect()
}

fn every_subcommand_and_option_is_in_the_page() {
    let page = rwdir(&["man"]);
    let top = rwdir(&["--help"]);
    let global = listed(&top);
    assert!(
        global.contains(&"--lease".to_string()),
        "the list of options read from --help: {global:?}"
    );
    let options = plain(section(&page, ".SH OPTIONS"));
    for opt in &global {
        assert!(
            options.contains(&format!("\n{opt}")) || options.contains(&format!(", {opt}")),
            "`{opt}` (rwdir --help) is not under OPTIONS:\n{options}"
        );
    }
    let subs = subcommands(&top);
    assert!(subs.len() >= 6, "subcommands read from --help: {subs:?}");
    let synopsis = plain(section(&page, ".SH SYNOPSIS"));
    for sub in &subs {
        assert!(
            synopsis.contains(&format!("rwdir {sub}")),
            "`rwdir {sub}` is not in the SYNOPSIS:\n{synopsis}"
        );
        let own: Vec<String> = listed(&rwdir(&[sub, "--help"]))
            .into_iter()
            .filter(|o| !global.contains(o))
            .collect();
        let text = plain(section(&page, &format!(".SS \"rwdir {sub}\"")));
        for opt in &own {
            // `.TP` then the option's line: `-q, --quiet`, `--timeout SECS`, `DIR`.
            let entry = text.split("\n.TP\n").skip(1).any(|e| {
                e.lines().next().is_some_and(|l| {
                    l.split([' ', ','])
                        .any(|w| w == opt || w == format!("{opt}..."))
                })
            });
            assert!(
                entry,
                "`{opt}` of `rwdir {sub} --help` has no entry under `rwdir {sub}`:\n{text}"
            );
        }
    }
}

fn environment_exit_status_and_files_are_in_the_page() {
    let page = rwdir(&["man"]);
    // COMMAND's environment, as `rwdir write --help` lists it, and what rwdir reads.
    let help = rwdir(&["write", "--help"]);
    let env_help = &help[help.find("COMMAND's environment:").expect("environment")..];
    let vars: Vec<&str> = env_help
        .lines()
        .skip(1)
        .take_while(|l| !l.trim().is_empty())
        .filter_map(|l| l.split_whitespace().next())
        .filter(|w| w.starts_with("RWDIR_"))
        .collect();
    assert_eq!(
        vars,
        ["RWDIR_MODE", "RWDIR_DIR", "RWDIR_TOKEN"],
        "{env_help}"
    );
    let environment = plain(section(&page, ".SH ENVIRONMENT"));
    for var in vars.iter().chain(&["PATH", "COLUMNS", "NO_COLOR"]) {
        assert!(
            environment.contains(&format!(".TP\n{var}")),
            "{var} has no entry under ENVIRONMENT:\n{environment}"
        );
    }
    // Every exit status of `rwdir --help`.
    let help = rwdir(&["--help"]);
    let exit_help = &help[help.find("Exit status:\n").expect("exit status")..];
    let codes: Vec<&str> = exit_help
        .lines()
        .skip(1)
        .filter(|l| l.starts_with("  ") && !l.starts_with("   "))
        .map(|l| l.trim().split("  ").next().expect("a code"))
        .collect();
    for code in [
        "read, write",
        "0",
        "1",
        "64",
        "66",
        "74",
        "75",
        "126",
        "127",
    ] {
        assert!(
            codes.contains(&code),
            "{code} not read from --help: {codes:?}"
        );
    }
    let exit = plain(section(&page, ".SH \"EXIT STATUS\""));
    for code in &codes {
        assert!(
            exit.contains(&format!(".TP\n{code}\n")),
            "exit status {code} has no entry under EXIT STATUS:\n{exit}"
        );
    }
    // Every name of README.md's on-disk format table.
    let readme =
        fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/README.md")).expect("README.md");
    let table = &readme[readme.find("## On-disk format").expect("On-disk format")..];
    let names: Vec<&str> = table
        .lines()
        .filter_map(|l| l.strip_prefix("| `"))
        .map(|l| l[..l.find(['`', '<']).expect("a name")].trim_end_matches('-'))
        .collect();
    assert!(names.len() >= 6, "names read from README.md: {names:?}");
    let files = plain(section(&page, ".SH FILES"));
    assert!(files.contains(".TP\nDIR/.rwdir/\n"), "{files}");
    for name in names {
        assert!(
            files.contains(&format!(".TP\nDIR/.rwdir/{name}")),
            "{name} has no entry under FILES:\n{files}"
        );
    }
}

fn man_out_writes_the_page_into_a_directory() {
    let tmp = tempfile::tempdir().expect("temporary directory");
    let dir = tmp.path().join("share/man/man1");
    let out = rwdir(&["man", "--out", dir.to_str().expect("utf-8 path")]);
    assert_eq!(out, "", "nothing on stdout");
    let written = fs::read_to_string(dir.join("rwdir.1")).expect("DIR/rwdir.1 written");
    assert_eq!(written, rwdir(&["man"]), "the page `rwdir man` prints");
    assert_eq!(
        fs::read_dir(&dir).expect("list").count(),
        1,
        "only rwdir.1 in DIR"
    );
    // Where it cannot be written: exit 1 and one line naming the file.
    let blocker = tmp.path().join("file");
    fs::write(&blocker, "").expect("a file");
    let out = Command::new(bin::rwdir_bin())
        .args(["man", "--out"])
        .arg(&blocker)
        .output()
        .expect("run rwdir");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.lines().count() == 1
            && stderr.starts_with(&format!(
                "rwdir: failed to write `{}`: ",
                blocker.join("rwdir.1").display()
            )),
        "{stderr}"
    );
}

fn man_db_renders_the_page_without_warnings() -> Result<Completion, Failed> {
    let version = Command::new("man").arg("--version").output();
    match &version {
        Ok(o) if o.status.success() && String::from_utf8_lossy(&o.stdout).starts_with("man ") => {}
        _ => return Ok(Completion::ignored_with("man-db's `man` is not installed")),
    }
    if Command::new("nroff").arg("--version").output().is_err() {
        return Ok(Completion::ignored_with("groff's `nroff` is not installed"));
    }
    let tmp = tempfile::tempdir().expect("temporary directory");
    let file = tmp.path().join("rwdir.1");
    fs::write(&file, rwdir(&["man"])).expect("write the page");
    let Output {
        status,
        stdout,
        stderr,
    } = Command::new("man")
        .args(["--warnings", "-l"])
        .arg(&file)
        .env("MANWIDTH", "80")
        .env("MANPAGER", "cat")
        .env("PAGER", "cat")
        .env_remove("MAN_KEEP_FORMATTING")
        .stdin(Stdio::null())
        .output()
        .expect("run man");
    let (stdout, stderr) = (
        String::from_utf8_lossy(&stdout),
        String::from_utf8_lossy(&stderr),
    );
    if !status.success() || !stderr.is_empty() {
        return Err(format!("MANWIDTH=80 man --warnings -l rwdir.1: {status}\n{stderr}").into());
    }
    for text in [
        "EXIT STATUS",
        "ENVIRONMENT",
        "RWDIR_TOKEN",
        "DIR/.rwdir/.master_lock",
    ] {
        if !stdout.contains(text) {
            return Err(format!("`{text}` not in the rendered page:\n{stdout}").into());
        }
    }
    Ok(Completion::Completed)
}
