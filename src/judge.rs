//! Judging lock files (docs/protocol.md §2.2): reads a file through the file layer and gives
//! the verdict on its owner ([`crate::liveness::judge`]). The one owner of judging, shared
//! by the protocol (W2, R1, W5, B0–B3, cleanup) and by `status`.

use std::time::Duration;

use uuid::Uuid;

use crate::config::Config;
use crate::entry::Entry;
use crate::error::Result;
use crate::fsops::{Found, StateDir};
use crate::holder::Kind;
use crate::liveness::{self, Liveness};
use crate::names::LockName;
use crate::sys::ExitWatch;

/// Judges the files of one state directory, with the lease that counts for a malformed
/// file (a well-formed record carries its owner's lease).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Judge<'a> {
    sd: &'a StateDir,
    malformed_lease: Duration,
}

/// A read and judged lock file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Judged {
    Gone,
    /// The verdict, the owner whose exit would change an `Alive` one (see
    /// [`liveness::verdict`]), and the nonce of a well-formed record.
    File(Liveness, Option<ExitWatch>, Option<Uuid>),
}

impl Judged {
    pub(crate) fn is_dead(self) -> bool {
        matches!(self, Judged::File(Liveness::Dead, ..))
    }

    /// Present and not dead: it blocks whoever it is in the way of.
    pub(crate) fn is_live(self) -> bool {
        matches!(self, Judged::File(l, ..) if !l.is_dead())
    }

    /// The process whose exit is an event for a waiter on this file, if there is one.
    pub(crate) fn owner(self) -> Option<ExitWatch> {
        match self {
            Judged::File(Liveness::Alive, owner, _) => owner,
            _ => None,
        }
    }

    /// The nonce in the file's record, if it was well formed.
    pub(crate) fn nonce(self) -> Option<Uuid> {
        match self {
            Judged::File(_, _, nonce) => nonce,
            Judged::Gone => None,
        }
    }
}

impl<'a> Judge<'a> {
    pub(crate) fn new(sd: &'a StateDir, cfg: &Config) -> Judge<'a> {
        Judge {
            sd,
            malformed_lease: cfg.lease,
        }
    }

    /// Reads and judges a lock file.
    pub(crate) fn judge(&self, name: &LockName) -> Result<Judged> {
        Ok(match self.sd.read(name)? {
            Found::Gone => Judged::Gone,
            Found::File { holder, mtime, .. } => {
                let (liveness, owner) = liveness::verdict(
                    holder.as_ref(),
                    mtime,
                    self.sd.judge_now(),
                    self.malformed_lease,
                );
                Judged::File(liveness, owner, holder.as_ref().map(|h| h.nonce))
            }
        })
    }

    /// `unlink_if_dead` for unique names (docs/protocol.md §2.2): reads, judges, and removes
    /// the file if its owner is dead. A unique name is never reused, so this can only
    /// remove the dead owner's own file.
    pub(crate) fn unlink_if_dead(&self, name: &LockName) -> Result<Judged> {
        debug_assert!(name.is_unique());
        let j = self.judge(name)?;
        if j.is_dead() {
            self.sd.unlink(name)?;
        }
        Ok(j)
    }

    /// [`Judge::unlink_if_dead`] on each of `names`; whether any of them is live.
    pub(crate) fn any_live<'n>(
        &self,
        names: impl IntoIterator<Item = &'n LockName>,
    ) -> Result<bool> {
        let mut live = false;
        for name in names {
            live |= self.unlink_if_dead(name)?.is_live();
        }
        Ok(live)
    }

    /// Reads and judges one lock file, for `status`, errors and cleanup; `None` if it
    /// vanished.
    pub(crate) fn entry(&self, name: &LockName) -> Result<Option<Entry>> {
        let Found::File {
            holder,
            mtime,
            regular,
        } = self.sd.read(name)?
        else {
            return Ok(None);
        };
        let (liveness, _) = liveness::verdict(
            holder.as_ref(),
            mtime,
            self.sd.judge_now(),
            self.malformed_lease,
        );
        let kind = match name {
            LockName::Master => Kind::Write,
            LockName::Pending { .. } => Kind::Pending,
            LockName::Slave { .. } => Kind::Read,
            LockName::Break { .. } => Kind::Break,
            LockName::Tmp { .. } => Kind::Temporary,
            LockName::Token(_) => Kind::Token,
        };
        Ok(Some(Entry {
            name: name.to_string(),
            path: self.sd.path_of(name),
            kind,
            holder,
            mtime,
            liveness,
            regular,
        }))
    }
}
