//! Cleanup (docs/protocol.md §3.6): C1–C3 remove dead holders' files, with `.master_lock`
//! broken only through B0–B4; A1 removes every lock file, for when no process uses the
//! lock.

use super::{Attempt, Mode, break_master};
use crate::config::Config;
use crate::entry::Entry;
use crate::error::{Error, Result};
use crate::fsops::StateDir;
use crate::holder::Kind;
use crate::judge::Judge;
use crate::names::LockName;
use crate::wait::{Deadline, block_on};

/// C1–C3: removes dead holders' files; returns what was removed.
pub(crate) fn cleanup(sd: &StateDir, cfg: &Config, dry_run: bool) -> Result<Vec<Entry>> {
    let mut removed = Vec::new();
    let judge = Judge::new(sd, cfg);
    let l = sd.list_all()?;
    let unique = l
        .slaves
        .iter()
        .chain(&l.pending)
        .chain(&l.breaks)
        .chain(&l.tmps);
    for name in unique {
        let entry = judge.entry(name)?;
        if let Some(e) = entry.filter(|e| e.regular && e.liveness.is_dead()) {
            // Re-judged by unlink_if_dead so that a file replaced meanwhile survives.
            if dry_run || judge.unlink_if_dead(name)?.is_dead() {
                removed.push(e);
            }
        }
    }
    if l.master
        && let Some(e) = judge.entry(&LockName::Master)?
        && e.liveness.is_dead()
    {
        let mut at = Attempt::new(
            sd,
            cfg,
            Deadline::after(cfg.max_poll.saturating_mul(20)),
            Kind::Break,
            Mode::Blocking,
        );
        let broken = dry_run
            || match block_on(std::pin::pin!(break_master(&mut at, &[]))) {
                Ok(broken) => broken,
                // Another live breaker kept it busy (B0, B2): that one removes the file.
                // This call removed nothing, which is not a failure of cleanup.
                Err(Error::TimedOut { .. }) => false,
                Err(e) => return Err(e),
            };
        if broken {
            removed.push(e);
        }
    }
    Ok(removed)
}

/// A1: removes every lock file, keeping the highest token.
pub(crate) fn cleanup_all(sd: &StateDir, cfg: &Config, dry_run: bool) -> Result<Vec<Entry>> {
    let mut removed = Vec::new();
    let l = sd.list_all()?;
    let top = l.tokens.last().copied();
    let names = l
        .master
        .then_some(LockName::Master)
        .into_iter()
        .chain(l.pending.iter().copied())
        .chain(l.slaves.iter().copied())
        .chain(l.breaks.iter().copied())
        .chain(l.tmps.iter().copied())
        .chain(
            l.tokens
                .iter()
                .filter(|&&k| Some(k) != top)
                .map(|&k| LockName::Token(k)),
        );
    // Go on past an entry that cannot be removed (a non-empty directory at a lock name,
    // another user's file in a sticky directory): remove all the rest, then report the
    // first failure.
    let mut first_error = None;
    let judge = Judge::new(sd, cfg);
    for name in names {
        let step = judge.entry(&name).and_then(|e| match e {
            Some(e) if dry_run || sd.unlink(&name)? => Ok(Some(e)),
            _ => Ok(None),
        });
        match step {
            Ok(Some(e)) => removed.push(e),
            Ok(None) => {}
            Err(e) => {
                first_error.get_or_insert(e);
            }
        }
    }
    match first_error {
        Some(e) => Err(e),
        None => Ok(removed),
    }
}
