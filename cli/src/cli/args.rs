//! The command line: subcommands, options, and the help text that documents the exit
//! codes.

use std::ffi::OsString;
use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, Parser, Subcommand};

use super::code;

/// `rwdir`: crash-safe reader-writer locks on a directory.
#[derive(Debug, Parser)]
#[command(
    name = "rwdir",
    version,
    about = "Crash-safe reader-writer locks on a directory, made of lock files",
    long_about = "Crash-safe reader-writer locks on a directory, made of lock files.\n\n\
        `rwdir read DIR COMMAND` runs COMMAND while holding a shared lock on DIR, \
        `rwdir write DIR COMMAND` while holding the exclusive one. The lock lives in \
        DIR/.rwdir and works across processes and across hosts sharing DIR over NFS. \
        A holder that dies, even by SIGKILL, is recognised as dead and its lock is \
        recovered by the next contender, with no cleanup step.\n\n\
        The lock is advisory: it excludes only processes that take it.",
    after_long_help = code::HELP,
    propagate_version = true,
    max_term_width = 100
)]
pub(crate) struct Cli {
    /// How long a holder on another host (or in another container) counts as alive
    /// without a heartbeat, in seconds (decimals allowed). All users of a directory
    /// should agree on it. Default: 45.
    #[arg(
        long,
        global = true,
        value_name = "SECS",
        value_parser = parse_lease,
        allow_negative_numbers = true
    )]
    pub(crate) lease: Option<Duration>,

    /// Use DIR even on a filesystem where lock files cannot work (object-store FUSE
    /// mounts: s3fs, gcsfuse, goofys, mountpoint-s3, rclone, blobfuse), which rwdir
    /// otherwise refuses (exit 66). Only for those who know better than the mount's type;
    /// check with `rwdir doctor DIR` first.
    #[arg(long, global = true)]
    pub(crate) allow_unsafe_filesystem: bool,

    /// How stale this host's view of another host's lock file can be on DIR's shared
    /// filesystem, in seconds, where you know it better than rwdir does from the
    /// filesystem's kind: 0 for NFS with actimeo=0 or sshfs with cache=no, or what
    /// `rwdir doctor --peer-dir` measured. A holder on another host is taken over once
    /// its lease plus this window plus 1 s has passed since its last heartbeat. Default:
    /// by the filesystem (sshfs 21, NFS 60, GlusterFS 1, CephFS 0.01; see `rwdir doctor`).
    #[arg(long, global = true, value_name = "SECS", value_parser = parse_window)]
    pub(crate) cache_window: Option<Duration>,

    /// What to do.
    #[command(subcommand)]
    pub(crate) command: Command,
}

/// The subcommands.
#[derive(Debug, Subcommand)]
pub(crate) enum Command {
    /// Run COMMAND holding a shared (read) lock on DIR.
    #[command(
        long_about = "Run COMMAND holding a shared (read) lock on DIR.\n\n\
            Readers share the lock with each other, but wait while a writer holds the \
            lock or waits for it (writers have priority).",
        after_long_help = code::HELP_LOCK
    )]
    Read(LockArgs),
    /// Run COMMAND holding the exclusive (write) lock on DIR.
    #[command(
        long_about = "Run COMMAND holding the exclusive (write) lock on DIR.\n\n\
            Writers queue first come, first served, ahead of readers that arrive after \
            them. COMMAND finds its fencing token in RWDIR_TOKEN.",
        after_long_help = code::HELP_LOCK
    )]
    Write(LockArgs),
    /// Show who holds the lock on DIR and which writers wait for it.
    #[command(
        long_about = "Show who holds the lock on DIR and which writers wait for it.\n\n\
            A waiting writer is listed from the moment it queues. A waiting reader makes no \
            file until it can enter, so it is not shown.",
        after_long_help = code::HELP
    )]
    Status(StatusArgs),
    /// Remove the lock files of dead holders in DIR.
    #[command(
        long_about = "Remove the lock files of dead holders in DIR and print each removal.\n\n\
            A holder on this host is dead when its process is gone (or its pid was \
            reused) and no process of its COMMAND's process group is left; a holder on \
            another host when its lease expired. A live holder's file, and any file that \
            is not a lock file, is never removed. Contenders remove dead holders' files \
            by themselves; cleanup is only needed to tidy up.",
        after_long_help = code::HELP
    )]
    Cleanup(CleanupArgs),
    /// Check whether DIR's filesystem does what the lock relies on, and say why.
    #[command(
        long_about = "Check whether DIR's filesystem does what the lock relies on, and say why.\n\n\
            Names the filesystem (from its mount), then tests, in a scratch directory \
            DIR/.rwdir-doctor-ID that it removes at the end (also on SIGINT, SIGTERM \
            and SIGHUP): exclusive creation (O_EXCL) and link() on an existing name, \
            reading a link back, O_TMPFILE, rename and RENAME_NOREPLACE, refreshing an \
            mtime through a descriptor, mtime granularity, and the clock skew between \
            this host and the file server. With --peer-dir, the same directory as \
            another client mounts it, it also races O_EXCL and link() between the two \
            mounts and measures how stale the other client's listings and attributes \
            are. It then compares the lease the filesystem calls for with the \
            configured one (--lease, default 45 s), and reports leftover lock files in \
            DIR/.rwdir (stale ones as rwdir status judges them) without touching them.\n\n\
            One line per check (ok, warn, FAIL, ?) and a verdict. Exit status: 0 safe, \
            1 unsafe (a check failed), 2 could not tell (a check could not be made, or \
            DIR cannot be used)."
    )]
    Doctor(DoctorArgs),
    /// Print a shell completion script to standard output.
    Completions {
        /// The shell to complete for.
        #[arg(value_enum)]
        shell: clap_complete::Shell,
    },
    /// Print the manual page rwdir(1), in roff, to standard output.
    Man {
        /// Write it as DIR/rwdir.1 instead (DIR is made if missing), for example
        /// /usr/local/share/man/man1.
        #[arg(long, value_name = "DIR")]
        out: Option<PathBuf>,
    },
}

/// Options of `rwdir read` and `rwdir write`.
#[derive(Debug, Args)]
pub(crate) struct LockArgs {
    /// Give up after SECS seconds (decimals allowed; 0 tries once) and exit 75.
    #[arg(
        long,
        value_name = "SECS",
        value_parser = parse_timeout,
        allow_negative_numbers = true
    )]
    pub(crate) timeout: Option<Duration>,

    /// Try once; if the lock is busy, exit 75 at once (same as --timeout 0).
    #[arg(long, conflicts_with = "timeout")]
    pub(crate) no_wait: bool,

    /// Do not say so on standard error when waiting for the lock takes more than a
    /// second, nor when the lock is held for processes COMMAND left behind. Errors are
    /// still reported.
    #[arg(short, long)]
    pub(crate) quiet: bool,

    /// Release the lock as soon as COMMAND itself exits, without waiting for the
    /// processes it left running (background jobs, daemons), which then run without the
    /// lock and are no longer killed if rwdir dies.
    #[arg(long)]
    pub(crate) no_wait_children: bool,

    /// The directory to lock. It must exist; the lock files go in DIR/.rwdir.
    #[arg(value_name = "DIR")]
    pub(crate) dir: PathBuf,

    /// The command to run, and its arguments. Everything after DIR belongs to it; use
    /// `--` before it if it starts with `-`.
    #[arg(
        value_name = "COMMAND",
        required = true,
        num_args = 1..,
        trailing_var_arg = true,
        allow_hyphen_values = true
    )]
    pub(crate) command: Vec<OsString>,
}

impl LockArgs {
    /// How long to wait: `None` for ever, `Some(ZERO)` for one attempt.
    pub(crate) fn wait(&self) -> Option<Duration> {
        if self.no_wait {
            Some(Duration::ZERO)
        } else {
            self.timeout
        }
    }
}

/// Options of `rwdir status`.
#[derive(Debug, Args)]
pub(crate) struct StatusArgs {
    /// The locked directory.
    #[arg(value_name = "DIR")]
    pub(crate) dir: PathBuf,

    /// Print one JSON object instead of a table:
    /// {"dir", "token", "writer", "pending", "readers"}, each holder as
    /// {"host", "pid", "since", "alive"}.
    #[arg(long)]
    pub(crate) json: bool,
}

/// Options of `rwdir doctor`.
#[derive(Debug, Args)]
pub(crate) struct DoctorArgs {
    /// The directory to check (the one to be locked).
    #[arg(value_name = "DIR")]
    pub(crate) dir: PathBuf,

    /// DIR as another client mounts it (another mount of the same share, on this host
    /// or reachable from it): races and staleness are measured between the two.
    #[arg(long, value_name = "PATH")]
    pub(crate) peer_dir: Option<PathBuf>,

    /// Rounds of each race with --peer-dir.
    #[arg(long, value_name = "N", default_value_t = 100, value_parser = clap::value_parser!(u32).range(1..=100_000))]
    pub(crate) rounds: u32,

    /// Print one JSON object instead of lines: {"dir", "verdict", "exit",
    /// "filesystem", "lease", "checks"} (see docs/cli.md).
    #[arg(long)]
    pub(crate) json: bool,
}

/// Options of `rwdir cleanup`.
#[derive(Debug, Args)]
pub(crate) struct CleanupArgs {
    /// The locked directory.
    #[arg(value_name = "DIR")]
    pub(crate) dir: PathBuf,

    /// Remove every lock file, live or dead (for a job that runs before anything uses
    /// the lock). The fencing token keeps growing.
    #[arg(long)]
    pub(crate) all: bool,

    /// Only print what would be removed.
    #[arg(long)]
    pub(crate) dry_run: bool,
}

/// Seconds as a decimal number: `1`, `1.5`, `0`, `.25`.
fn parse_secs(s: &str) -> Result<Duration, String> {
    let secs: f64 = s
        .trim()
        .parse()
        .map_err(|_| format!("`{s}` is not a number of seconds"))?;
    if secs < 0.0 {
        return Err(format!("`{s}` seconds: must be ≥ 0"));
    }
    if !secs.is_finite() {
        return Err(format!("`{s}` is not a number of seconds"));
    }
    Duration::try_from_secs_f64(secs).map_err(|_| format!("`{s}` seconds is too long"))
}

fn parse_timeout(s: &str) -> Result<Duration, String> {
    parse_secs(s)
}

fn parse_window(s: &str) -> Result<Duration, String> {
    match s.parse::<f64>() {
        Ok(secs) if (0.0..=86_400.0).contains(&secs) => Ok(Duration::from_secs_f64(secs)),
        _ => Err(format!(
            "`{s}` is not a cache window: give seconds from 0 to 86400"
        )),
    }
}

fn parse_lease(s: &str) -> Result<Duration, String> {
    let d = parse_secs(s)?;
    if d < Duration::from_millis(100) {
        return Err(format!(
            "a lease of `{s}` seconds is too short (at least 0.1)"
        ));
    }
    Ok(d)
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn the_command_line_is_consistent() {
        Cli::command().debug_assert();
    }

    /// `status` shows waiting writers, not waiting readers (they have no file yet), and
    /// its help says so.
    #[test]
    fn status_help_says_waiting_readers_are_not_shown() {
        let mut cmd = Cli::command();
        let status = cmd.find_subcommand_mut("status").expect("status");
        let help = status.render_long_help().to_string();
        assert!(help.contains("which writers wait"), "{help}");
        assert!(help.contains("it is not shown"), "{help}");
    }

    #[test]
    fn seconds() {
        assert_eq!(parse_secs("1.5"), Ok(Duration::from_millis(1500)));
        assert_eq!(parse_secs("0"), Ok(Duration::ZERO));
        assert_eq!(parse_secs(".25"), Ok(Duration::from_millis(250)));
        for bad in ["", "-1", "abc", "inf", "NaN", "1,5", "1e400"] {
            assert!(parse_secs(bad).is_err(), "{bad:?} accepted");
        }
        assert!(parse_secs("1e300").is_err());
        assert!(parse_lease("0").is_err());
        assert_eq!(parse_window("0"), Ok(Duration::ZERO));
        assert_eq!(parse_window("1.5"), Ok(Duration::from_millis(1500)));
        for bad in ["-1", "x", "NaN", "inf", "1e9"] {
            assert!(parse_window(bad).is_err(), "{bad}");
        }
    }

    fn parse(args: &[&str]) -> Result<Cli, clap::Error> {
        Cli::try_parse_from(std::iter::once("rwdir").chain(args.iter().copied()))
    }

    #[test]
    fn command_arguments_are_left_alone() {
        let cli = parse(&["read", "-q", "d", "ls", "-l", "--help", "--quiet"]).expect("parses");
        let Command::Read(a) = cli.command else {
            panic!("not read")
        };
        assert!(a.quiet);
        assert_eq!(a.command, ["ls", "-l", "--help", "--quiet"]);
        let cli = parse(&["write", "--timeout", "2.5", "d", "--", "-x"]).expect("parses");
        let Command::Write(a) = cli.command else {
            panic!("not write")
        };
        assert_eq!(a.wait(), Some(Duration::from_millis(2500)));
        assert_eq!(a.command, ["-x"]);
    }

    #[test]
    fn usage_errors() {
        assert!(parse(&["read", "d"]).is_err());
        assert!(parse(&["read", "--no-wait", "--timeout", "1", "d", "true"]).is_err());
        assert!(parse(&["read", "--timeout", "x", "d", "true"]).is_err());
        // A negative number is parsed as the option's value and refused as such, not
        // taken for an unknown option.
        for args in [
            &["write", "--timeout", "-1", "d", "true"][..],
            &["--lease", "-3", "write", "d", "true"],
        ] {
            let e = parse(args).expect_err("negative");
            assert!(e.to_string().contains("must be ≥ 0"), "{args:?}: {e}");
        }
        assert!(parse(&["status"]).is_err());
    }
}
