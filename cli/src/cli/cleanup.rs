//! `rwdir cleanup DIR [--all] [--dry-run]`: remove dead holders' lock files.

use std::fmt::Write as _;
use std::process::ExitCode;
use std::time::Duration;

use rwdir::Entry;

use super::args::CleanupArgs;
use super::{Error, builder, code, out};

/// Runs `rwdir cleanup`: one line per (would-be) removal on stdout.
///
/// # Errors
///
/// [`Error::Dir`] if DIR cannot be used, [`Error::Lock`] if the state directory cannot
/// be read or a file cannot be removed, [`Error::Output`] if stdout fails.
pub(crate) fn run(args: &CleanupArgs, lease: Option<Duration>) -> Result<ExitCode, Error> {
    let lock = builder(&args.dir, lease).build().map_err(Error::Dir)?;
    let removed = match (args.dry_run, args.all) {
        (true, false) => lock.cleanup_plan()?,
        (true, true) => lock.cleanup_all_plan()?,
        (false, true) => lock.cleanup_all()?,
        (false, false) => lock.cleanup()?,
    };
    let verb = if args.dry_run {
        "would remove"
    } else {
        "removed"
    };
    let mut text = String::new();
    for e in &removed {
        let _ = writeln!(text, "{verb} {}", line(e));
    }
    out(&text)?;
    Ok(ExitCode::from(code::OK))
}

/// `` `DIR/.rwdir/.slave_lock-…`: reader pid 4242 on host a (12 s), dead ``.
fn line(e: &Entry) -> String {
    let verdict = match e.liveness.as_option() {
        Some(true) => "alive",
        Some(false) => "dead",
        None => "unknown",
    };
    format!("`{}`: {}, {verdict}", e.path.display(), e.describe())
}
