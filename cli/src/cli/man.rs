//! `rwdir man`: the manual page rwdir(1), complete in one page: every subcommand with
//! its options, the environment, the exit status and the files. The options and the
//! descriptions come from the clap definition (`args.rs`), the environment and exit
//! status tables from the help texts of `code`, so that `--help` and the page cannot
//! drift apart.

use std::fs;
use std::path::Path;

use clap::CommandFactory;
use clap_mangen::roff::{Inline, Roff, bold, italic, roman};

use super::args::Cli;
use super::{Error, code};

/// The page's file name in a `man1` directory.
pub(crate) const FILE_NAME: &str = "rwdir.1";

/// Prints the page, or writes it into `out` (made if missing) as [`FILE_NAME`].
pub(crate) fn run(out: Option<&Path>) -> Result<(), Error> {
    let page = page();
    let Some(dir) = out else {
        return super::out(&page);
    };
    let path = dir.join(FILE_NAME);
    fs::create_dir_all(dir)
        .and_then(|()| fs::write(&path, page))
        .map_err(|source| Error::File { path, source })
}

/// The page, in roff.
pub(crate) fn page() -> String {
    let mut cmd = Cli::command();
    cmd.build();
    let subs: Vec<&clap::Command> = cmd
        .get_subcommands()
        .filter(|s| !s.is_hide_set() && s.get_name() != "help")
        .collect();
    let mut r = Roff::new();
    let source = format!("rwdir {}", cmd.get_version().unwrap_or_default());
    // No date (`""`: an empty argument, which roff would otherwise drop).
    r.control("TH", ["RWDIR", "1", "\"\"", &source, "User Commands"]);

    r.control("SH", ["NAME"]);
    r.text([roman(format!(
        "rwdir - {}",
        cmd.get_about().map(ToString::to_string).unwrap_or_default()
    ))]);

    r.control("SH", ["SYNOPSIS"]);
    for (i, sub) in subs.iter().enumerate() {
        if i > 0 {
            r.control("br", []);
        }
        r.text(usage(sub));
    }

    r.control("SH", ["DESCRIPTION"]);
    paragraphs(&mut r, &long_about(&cmd));
    // How COMMAND runs and the waiting notice: the prose of `read --help`.
    for block in blocks(code::HELP_LOCK).filter(|b| table_heading(b).is_none()) {
        r.control("PP", []);
        text(&mut r, block);
    }

    r.control("SH", ["OPTIONS"]);
    r.text([roman(
        "Options of rwdir itself; --lease may also be given after the subcommand.",
    )]);
    options(&mut r, cmd.get_arguments());

    r.control("SH", ["COMMANDS"]);
    for sub in &subs {
        r.control("SS", [format!("rwdir {}", sub.get_name()).as_str()]);
        r.text(usage(sub));
        r.control("PP", []);
        paragraphs(&mut r, &long_about(sub));
        // Its own arguments: not the global ones, described under OPTIONS.
        options(
            &mut r,
            sub.get_arguments().filter(|a| {
                !a.is_global_set() && !["help", "version"].contains(&a.get_id().as_str())
            }),
        );
    }

    r.control("SH", ["ENVIRONMENT"]);
    r.text([roman(
        "rwdir read and rwdir write set these for COMMAND, replacing any value \
         inherited (from an outer rwdir, for example):",
    )]);
    for (name, meaning) in table(code::HELP_LOCK, "COMMAND's environment:") {
        r.control("TP", []);
        r.text([bold(name)]);
        r.text([roman(meaning)]);
    }
    r.control("PP", []);
    r.text([roman("rwdir itself reads:")]);
    for (names, meaning) in [
        (
            &["PATH"][..],
            "The directories searched for COMMAND, as execvp(3) would \
             (/usr/local/bin:/usr/bin:/bin if it is not set).",
        ),
        (
            &["COLUMNS"],
            "The width of the help text when it is not written to a terminal.",
        ),
        (
            &["NO_COLOR", "CLICOLOR", "CLICOLOR_FORCE"],
            "Whether the help text is coloured (https://no-color.org, \
             https://bixense.com/clicolors).",
        ),
    ] {
        r.control("TP", []);
        let mut head = Vec::new();
        for (i, name) in names.iter().enumerate() {
            if i > 0 {
                head.push(roman(", "));
            }
            head.push(bold(*name));
        }
        r.text(head);
        r.text([roman(meaning)]);
    }

    r.control("SH", ["EXIT STATUS"]);
    for (status, meaning) in table(code::HELP, "Exit status:") {
        r.control("TP", []);
        r.text([bold(status)]);
        r.text([roman(meaning)]);
    }
    r.control("PP", []);
    r.text([roman(
        "Every error is reported on standard error on one line: \"rwdir: \", the error \
         and its causes. A usage error (64) adds a second line, \
         \"hint: see 'rwdir SUBCOMMAND --help'\".",
    )]);

    r.control("SH", ["FILES"]);
    for (name, meaning) in FILES {
        r.control("TP", []);
        r.text([bold(*name)]);
        r.text([roman(*meaning)]);
    }

    r.control("SH", ["SEE ALSO"]);
    r.text([
        bold("flock"),
        roman("(1), "),
        bold("flock"),
        roman(
            "(2). The contract in full, and the protocol: docs/cli.md and docs/protocol.md \
               in rwdir's source repository.",
        ),
    ]);
    r.render()
}

/// DIR/.rwdir and its files (README.md, "On-disk format").
const FILES: &[(&str, &str)] = &[
    (
        "DIR/.rwdir/",
        "The lock's state directory, made with mkdir(2) on first use. If it exists but is \
         not a real directory (a symlink, for example), rwdir exits 66. Its permissions \
         decide who may take, break and clean up the lock.",
    ),
    (
        "DIR/.rwdir/.master_lock",
        "The writer (or the writer waiting for the readers to leave).",
    ),
    (
        "DIR/.rwdir/.pending_lock-UUID-NS",
        "A queued writer; the queue is ordered by (NS, UUID).",
    ),
    ("DIR/.rwdir/.slave_lock-UUID", "A reader."),
    (
        "DIR/.rwdir/.break-NS-UUID",
        "A process removing a dead writer's .master_lock.",
    ),
    (
        "DIR/.rwdir/.tmp-UUID",
        "A file being created, where O_TMPFILE is not available.",
    ),
    (
        "DIR/.rwdir/.token-N",
        "The last fencing token handed out; not a lock file.",
    ),
];

/// `rwdir read [-q|--quiet] [--timeout SECS] ... DIR COMMAND...`, from the arguments.
fn usage(sub: &clap::Command) -> Vec<Inline> {
    let mut line = vec![bold(format!("rwdir {}", sub.get_name()))];
    let args: Vec<&clap::Arg> = sub
        .get_arguments()
        .filter(|a| !a.is_hide_set() && !a.is_global_set())
        .filter(|a| !["help", "version"].contains(&a.get_id().as_str()))
        .collect();
    for a in args.iter().filter(|a| !a.is_positional()) {
        line.push(roman(" ["));
        line.extend(option_name(a, "|"));
        line.push(roman("]"));
    }
    for a in args.iter().filter(|a| a.is_positional()) {
        line.push(roman(" "));
        line.extend(option_name(a, "|"));
    }
    line
}

/// `-q, --quiet` (`sep` between the short and the long name), `--timeout SECS`, `DIR`,
/// `COMMAND...`, as roff inlines.
fn option_name(a: &clap::Arg, sep: &str) -> Vec<Inline> {
    let value = a
        .get_value_names()
        .and_then(|v| v.first())
        .map(ToString::to_string)
        .unwrap_or_else(|| a.get_id().as_str().to_uppercase());
    let many = a.get_num_args().is_some_and(|n| n.max_values() > 1);
    if a.is_positional() {
        let dots = if many { "..." } else { "" };
        return vec![italic(value), roman(dots)];
    }
    let mut name = Vec::new();
    if let Some(short) = a.get_short() {
        name.push(bold(format!("-{short}")));
    }
    if let Some(long) = a.get_long() {
        if !name.is_empty() {
            name.push(roman(sep));
        }
        name.push(bold(format!("--{long}")));
    }
    if a.get_action().takes_values() {
        name.push(roman(" "));
        name.push(italic(value));
    }
    name
}

/// One `.TP` entry per argument: its name, its (long) help, its possible values.
fn options<'a>(r: &mut Roff, args: impl Iterator<Item = &'a clap::Arg>) {
    let mut args: Vec<&clap::Arg> = args.filter(|a| !a.is_hide_set()).collect();
    // Options first, then positionals in their order.
    args.sort_by_key(|a| a.is_positional());
    for a in args {
        r.control("TP", []);
        r.text(option_name(a, ", "));
        if let Some(help) = a.get_long_help().or_else(|| a.get_help()) {
            let help = help.to_string();
            for (i, paragraph) in help.split("\n\n").enumerate() {
                if i > 0 {
                    r.control("IP", []);
                }
                text(r, paragraph);
            }
        }
        let values: Vec<String> = a
            .get_possible_values()
            .iter()
            .filter(|v| !v.is_hide_set())
            .map(|v| v.get_name().to_string())
            .collect();
        if !values.is_empty() {
            r.text([roman(format!("Possible values: {}.", values.join(", ")))]);
        }
    }
}

fn long_about(cmd: &clap::Command) -> String {
    cmd.get_long_about()
        .or_else(|| cmd.get_about())
        .map(ToString::to_string)
        .unwrap_or_default()
}

/// `text`'s paragraphs (separated by blank lines), `.PP` between them.
fn paragraphs(r: &mut Roff, text_: &str) {
    for (i, paragraph) in text_.split("\n\n").enumerate() {
        if i > 0 {
            r.control("PP", []);
        }
        text(r, paragraph);
    }
}

/// A paragraph as one filled text line, ending with a full stop (clap drops the one of a
/// one-paragraph doc comment).
fn text(r: &mut Roff, paragraph: &str) {
    let mut line = paragraph.split_whitespace().collect::<Vec<_>>().join(" ");
    if line.is_empty() {
        return;
    }
    if !line.ends_with(['.', '!', '?']) {
        line.push('.');
    }
    r.text([roman(line)]);
}

/// A help text's blocks, separated by blank lines.
fn blocks(help: &str) -> impl Iterator<Item = &str> {
    help.split("\n\n")
        .map(str::trim_end)
        .filter(|b| !b.trim().is_empty())
}

/// The heading of a table block (`Exit status:`), if `block` is one: a first line
/// ending with `:`, and every other line indented.
fn table_heading(block: &str) -> Option<&str> {
    let mut lines = block.lines();
    let first = lines.next()?;
    (first.ends_with(':') && !first.starts_with(' ') && lines.all(|l| l.starts_with("  ")))
        .then_some(first)
}

/// The two-column table under `heading` in a help text: entries start two spaces in,
/// with the key and its meaning separated by two or more spaces; a line indented
/// further continues the meaning.
fn table(help: &str, heading: &str) -> Vec<(String, String)> {
    let Some(block) = blocks(help).find(|b| table_heading(b) == Some(heading)) else {
        return Vec::new();
    };
    let mut rows: Vec<(String, String)> = Vec::new();
    for line in block.lines().skip(1) {
        let body = &line[2..];
        match rows.last_mut() {
            Some((_, meaning)) if body.starts_with(' ') => {
                meaning.push(' ');
                meaning.push_str(body.trim());
            }
            _ => {
                let (key, meaning) = body.split_once("  ").unwrap_or((body, ""));
                rows.push((key.trim().to_string(), meaning.trim().to_string()));
            }
        }
    }
    rows
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_tables_of_the_help_texts_are_read_whole() {
        let exit = table(code::HELP, "Exit status:");
        let keys: Vec<&str> = exit.iter().map(|(k, _)| k.as_str()).collect();
        assert_eq!(
            keys,
            [
                "read, write",
                "0",
                "1",
                "2",
                "64",
                "66",
                "74",
                "75",
                "126",
                "127"
            ]
        );
        assert!(
            exit[0].1.ends_with("while waiting for the lock)"),
            "{exit:?}"
        );
        let env = table(code::HELP_LOCK, "COMMAND's environment:");
        let keys: Vec<&str> = env.iter().map(|(k, _)| k.as_str()).collect();
        assert_eq!(keys, ["RWDIR_MODE", "RWDIR_DIR", "RWDIR_TOKEN"]);
        assert!(env[2].1.ends_with("rejects lower ones."), "{env:?}");
    }

    #[test]
    fn the_page_has_every_section() {
        let page = page();
        for section in [
            ".SH NAME",
            ".SH SYNOPSIS",
            ".SH DESCRIPTION",
            ".SH OPTIONS",
            ".SH COMMANDS",
            ".SH ENVIRONMENT",
            ".SH \"EXIT STATUS\"",
            ".SH FILES",
            ".SH \"SEE ALSO\"",
            ".SS \"rwdir read\"",
            ".SS \"rwdir man\"",
        ] {
            assert!(page.contains(section), "{section} missing:\n{page}");
        }
    }
}
