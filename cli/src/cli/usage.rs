//! Usage errors as rwdir reports them: one `rwdir: ` line saying what is wrong, and one
//! `hint: ` line naming the help to read, instead of clap's several lines.

use std::ffi::OsString;

use clap::CommandFactory;
use clap::error::{ContextKind, ContextValue, ErrorKind};

use super::args::Cli;

/// The two lines for the usage error `err` of the command line `args` (with the program
/// name first): the message, without the `rwdir: ` prefix, and the hint line.
pub(crate) fn lines(err: &clap::Error, args: &[OsString]) -> (String, String) {
    let mut cmd = Cli::command();
    cmd.build();
    let (path, sub) = command_path(&cmd, args);
    let message = specific(err, &path, sub).unwrap_or_else(|| first_paragraph(err));
    (message, format!("hint: see '{path} --help'"))
}

/// The wording of the errors people make most, with the subcommand named.
fn specific(err: &clap::Error, path: &str, cmd: &clap::Command) -> Option<String> {
    let text = |kind| match err.get(kind)? {
        ContextValue::String(s) => Some(s.clone()),
        ContextValue::StyledStr(s) => Some(s.to_string()),
        _ => None,
    };
    let list = |kind| match err.get(kind)? {
        ContextValue::Strings(v) => Some(v.clone()),
        ContextValue::StyledStrs(v) => Some(v.iter().map(ToString::to_string).collect()),
        ContextValue::String(s) => Some(vec![s.clone()]),
        ContextValue::StyledStr(s) => Some(vec![s.to_string()]),
        _ => None,
    };
    let did_you_mean = |kind| match list(kind) {
        Some(v) if !v.is_empty() => format!("; did you mean '{}'?", v.join("' or '")),
        _ => String::new(),
    };
    Some(match err.kind() {
        ErrorKind::UnknownArgument => format!(
            "unexpected argument '{}' for '{path}'{}",
            text(ContextKind::InvalidArg)?,
            did_you_mean(ContextKind::SuggestedArg)
        ),
        ErrorKind::InvalidSubcommand => format!(
            "unrecognized subcommand '{}' for '{path}'{}",
            text(ContextKind::InvalidSubcommand)?,
            did_you_mean(ContextKind::SuggestedSubcommand)
        ),
        ErrorKind::MissingRequiredArgument => format!(
            "missing {} for '{path}'",
            list(ContextKind::InvalidArg)?.join(" and ")
        ),
        ErrorKind::MissingSubcommand | ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand => {
            let names: Vec<&str> = cmd
                .get_subcommands()
                .filter(|s| !s.is_hide_set())
                .map(clap::Command::get_name)
                .collect();
            if names.is_empty() {
                return None;
            }
            format!("missing subcommand for '{path}' ({})", names.join(", "))
        }
        _ => return None,
    })
}

/// clap's own message, on one line: the first paragraph of its rendering, without the
/// `error: ` prefix, its lines joined by spaces (the tips and the usage that follow are
/// left out).
fn first_paragraph(err: &clap::Error) -> String {
    let rendered = err.render().to_string();
    let body = rendered.trim_start();
    let body = body.strip_prefix("error:").unwrap_or(body);
    body.split("\n\n")
        .next()
        .unwrap_or_default()
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ")
}

/// The subcommand the arguments got to (`rwdir read`), and that subcommand: the words
/// before the first one that is not an option or a known subcommand, skipping options
/// and their values.
fn command_path<'a>(root: &'a clap::Command, args: &[OsString]) -> (String, &'a clap::Command) {
    let mut path = vec![root.get_name()];
    let mut cmd = root;
    let mut words = args.iter().skip(1);
    while let Some(word) = words.next() {
        let Some(word) = word.to_str() else { break };
        if word == "--" {
            break;
        }
        let takes_value = |arg: &clap::Arg| arg.get_action().takes_values();
        if let Some(long) = word.strip_prefix("--") {
            let value_follows = !long.contains('=')
                && cmd
                    .get_arguments()
                    .any(|a| a.get_long() == Some(long) && takes_value(a));
            if value_follows {
                words.next();
            }
            continue;
        }
        if let Some(shorts) = word.strip_prefix('-').filter(|s| !s.is_empty()) {
            // `-q`, `-qx`; a value is in the same word unless the option is the last one.
            let last = shorts.chars().last();
            let value_follows = cmd
                .get_arguments()
                .any(|a| a.get_short() == last && takes_value(a));
            let value_inside = shorts.chars().rev().skip(1).any(|c| {
                cmd.get_arguments()
                    .any(|a| a.get_short() == Some(c) && takes_value(a))
            });
            if value_follows && !value_inside {
                words.next();
            }
            continue;
        }
        match cmd.find_subcommand(word) {
            Some(sub) => {
                path.push(sub.get_name());
                cmd = sub;
            }
            None => break,
        }
    }
    (path.join(" "), cmd)
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    fn two_lines(args: &[&str]) -> (String, String) {
        let argv: Vec<OsString> = std::iter::once("rwdir")
            .chain(args.iter().copied())
            .map(OsString::from)
            .collect();
        let err = Cli::try_parse_from(&argv).expect_err("a usage error");
        lines(&err, &argv)
    }

    #[test]
    fn usage_errors_are_one_line_and_a_hint() {
        for (args, message, hint) in [
            (
                &["read", "--foo", "d", "true"][..],
                "unexpected argument '--foo' for 'rwdir read'",
                "rwdir read",
            ),
            (
                &["--lease", "9", "write", "--quite", "d", "true"],
                "unexpected argument '--quite' for 'rwdir write'; did you mean '--quiet'?",
                "rwdir write",
            ),
            (
                &["read"],
                "missing <DIR> and <COMMAND>... for 'rwdir read'",
                "rwdir read",
            ),
            (
                &["status"],
                "missing <DIR> for 'rwdir status'",
                "rwdir status",
            ),
            (
                &[],
                "missing subcommand for 'rwdir' (read, write, status, cleanup, doctor, completions, man, help)",
                "rwdir",
            ),
            (
                &["raed"],
                "unrecognized subcommand 'raed' for 'rwdir'; did you mean 'read'?",
                "rwdir",
            ),
            (
                &["read", "--timeout", "soon", "d", "true"],
                "invalid value 'soon' for '--timeout <SECS>': `soon` is not a number of seconds",
                "rwdir read",
            ),
            (
                &["completions", "tcsh"],
                "invalid value 'tcsh' for '<SHELL>' [possible values: bash, elvish, fish, powershell, zsh]",
                "rwdir completions",
            ),
            (
                &["read", "--no-wait", "--timeout", "1", "d", "true"],
                "the argument '--no-wait' cannot be used with '--timeout <SECS>'",
                "rwdir read",
            ),
        ] {
            let (got, got_hint) = two_lines(args);
            assert_eq!(got, message, "{args:?}");
            assert_eq!(got_hint, format!("hint: see '{hint} --help'"), "{args:?}");
        }
    }

    #[test]
    fn the_path_skips_options_and_their_values() {
        let mut cmd = Cli::command();
        cmd.build();
        for (args, want) in [
            (&["rwdir", "--lease", "read", "write"][..], "rwdir write"),
            (&["rwdir", "--lease=3", "read", "x"], "rwdir read"),
            (&["rwdir", "read", "-q", "status"], "rwdir read"),
            (&["rwdir", "--", "read"], "rwdir"),
        ] {
            let argv: Vec<OsString> = args.iter().map(OsString::from).collect();
            assert_eq!(command_path(&cmd, &argv).0, want, "{args:?}");
        }
    }
}
