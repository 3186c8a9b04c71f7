//! `rwdir`: run a command under a reader-writer lock on a directory, show who holds the
//! lock, and clean up after dead holders. See `rwdir --help` and `docs/cli.md`.

#![warn(missing_docs)]

mod cli;

use std::io;
use std::process::ExitCode;

use clap::{CommandFactory, Parser};

use cli::args::{Cli, Command};
use cli::{Error, code};

fn main() -> ExitCode {
    match run() {
        Ok(code) => code,
        Err(err) => {
            cli::report(&err);
            exit_code(&err)
        }
    }
}

fn run() -> Result<ExitCode, Error> {
    let cli = Cli::try_parse()?;
    cli::ALLOW_UNSAFE_FS.store(
        cli.allow_unsafe_filesystem,
        std::sync::atomic::Ordering::Relaxed,
    );
    if let Some(window) = cli.cache_window {
        let _ = cli::CACHE_WINDOW.set(window);
    }
    match cli.command {
        Command::Read(args) => cli::supervise::run(cli::supervise::Mode::Read, &args, cli.lease),
        Command::Write(args) => cli::supervise::run(cli::supervise::Mode::Write, &args, cli.lease),
        Command::Status(args) => cli::status::run(&args, cli.lease),
        Command::Cleanup(args) => cli::cleanup::run(&args, cli.lease),
        Command::Doctor(args) => Ok(cli::doctor::run(&args, cli.lease)),
        Command::Completions { shell } => {
            let mut out = Vec::new();
            clap_complete::generate(shell, &mut Cli::command(), "rwdir", &mut out);
            cli::out(&String::from_utf8_lossy(&out))?;
            Ok(ExitCode::from(code::OK))
        }
        Command::Man { out } => {
            cli::man::run(out.as_deref())?;
            Ok(ExitCode::from(code::OK))
        }
    }
}

/// The one mapping from errors to exit codes; `rwdir --help` documents it.
fn exit_code(err: &Error) -> ExitCode {
    ExitCode::from(match err {
        Error::Usage(e) if !e.use_stderr() => code::OK, // --help, --version
        Error::Usage(_) => code::USAGE,
        Error::Dir(_) => code::NO_DIR,
        Error::Lock(e) => match e {
            rwdir::Error::WouldBlock { .. } | rwdir::Error::TimedOut { .. } => code::BUSY,
            rwdir::Error::NotADirectory { .. } | rwdir::Error::UnsafeFilesystem { .. } => {
                code::NO_DIR
            }
            rwdir::Error::LockLost { .. } => code::LOST,
            _ => code::FAILURE,
        },
        Error::Lost(_) => code::LOST,
        Error::Exec { source, .. } if source.kind() == io::ErrorKind::NotFound => code::NOT_FOUND,
        Error::Exec { .. } => code::CANNOT_EXECUTE,
        Error::Interrupted { signal, .. } => code::SIGNAL_BASE.saturating_add(*signal as u8),
        Error::Output(e) if e.kind() == io::ErrorKind::BrokenPipe => code::OK,
        Error::Sys { .. } | Error::Output(_) | Error::File { .. } => code::FAILURE,
    })
}
