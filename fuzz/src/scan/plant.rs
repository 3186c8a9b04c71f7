//! Planting a case's entries, and what each planted entry must become.

use std::ffi::OsStr;
use std::fs;
use std::io::{self, Write as _};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use nix::fcntl::AT_FDCWD;
use nix::sys::stat::{Mode, UtimensatFlags, utimensat};
use nix::sys::time::TimeSpec;
use rwdir::internals::{LockName, MAX_RECORD};
use rwdir::{Holder, Liveness};

use super::{
    ContentSpec, LinkTarget, MAX_ENTRIES, MAX_SPARSE, Me, MtimeSpec, Mutation, NameSpec, NodeSpec,
    Pgid, Place, Planted, RecordSpec, ScanInput, Scanner, StateSpec, VICTIM, Who,
};
use crate::holder::HolderFields;

impl Scanner {
    pub(super) fn plant(&self, input: &ScanInput, me: &Me) -> Vec<Planted> {
        match input.state {
            StateSpec::Dir => {}
            StateSpec::Missing => {
                fs::remove_dir(&self.state).expect("remove the state directory");
                return Vec::new();
            }
            other => {
                fs::remove_dir(&self.state).expect("remove the state directory");
                match other {
                    StateSpec::File => fs::write(&self.state, VICTIM),
                    StateSpec::SymlinkToDir => {
                        std::os::unix::fs::symlink(&self.victim_dir, &self.state)
                    }
                    StateSpec::DanglingSymlink => {
                        std::os::unix::fs::symlink(&self.nowhere, &self.state)
                    }
                    _ => nix::unistd::mkfifo(&self.state, Mode::from_bits_truncate(0o644))
                        .map_err(io::Error::from),
                }
                .expect("plant the state path");
                return Vec::new();
            }
        }
        let now = SystemTime::now();
        let mut planted = Vec::new();
        for e in input.entries.iter().take(MAX_ENTRIES) {
            let Some(name) = entry_name(&e.name) else {
                continue;
            };
            let path = self.state.join(OsStr::from_bytes(&name));
            let Some((bytes, non_empty_dir)) = self.make(&path, &e.node, me) else {
                continue;
            };
            let mtime = match e.mtime {
                MtimeSpec::Old => now - Duration::from_secs(3600),
                MtimeSpec::Fresh => now,
                MtimeSpec::Future => now + Duration::from_secs(3600),
                MtimeSpec::Epoch => UNIX_EPOCH,
            };
            let d = mtime.duration_since(UNIX_EPOCH).unwrap_or_default();
            #[allow(clippy::cast_possible_wrap)]
            let ts = TimeSpec::new(d.as_secs() as i64, i64::from(d.subsec_nanos()));
            utimensat(AT_FDCWD, &path, &ts, &ts, UtimensatFlags::NoFollowSymlink)
                .expect("set a planted mtime");
            let lock = LockName::parse(&name);
            planted.push(Planted {
                name,
                path,
                lock,
                ino: (0, 0),
                mtime: UNIX_EPOCH,
                regular: false,
                non_empty_dir,
                holder: bytes.as_deref().and_then(Holder::parse),
                protected: false,
                doomed: false,
                liveness: None,
            });
        }
        // Judge from what is on disk now (hard links share one inode and one mtime).
        let now = SystemTime::now();
        for p in &mut planted {
            let m = fs::symlink_metadata(&p.path).expect("stat a planted entry");
            p.ino = (m.dev(), m.ino());
            p.regular = m.file_type().is_file();
            p.mtime = m.modified().expect("mtime");
            let future = p.mtime > now + Duration::from_secs(60);
            let old = p.mtime + Duration::from_secs(60) < now;
            let same_host = p.holder.as_ref().is_some_and(|h| me.same_host(h));
            let alive = p.holder.as_ref().is_some_and(|h| me.alive(h));
            let dead = p.holder.as_ref().is_some_and(|h| me.dead(h))
                || (old && p.holder.is_none())
                || (old && !same_host && p.holder.as_ref().is_some_and(|h| h.lease_ms < 60_000));
            p.protected = match p.lock {
                None | Some(LockName::Token(_)) => true,
                Some(_) => alive || (future && !same_host),
            };
            p.doomed = dead && !alive && p.regular && p.lock.is_some_and(|n| n.is_unique());
            p.liveness = if alive {
                Some(Liveness::Alive)
            } else if dead {
                Some(Liveness::Dead)
            } else if future && !same_host {
                Some(Liveness::Unknown)
            } else {
                None
            };
        }
        planted
    }

    /// Creates one node; `None` if it cannot be (a duplicate or too long name...).
    /// Returns the bytes of a regular file (when small enough to matter) and whether it is
    /// a non-empty directory.
    fn make(&self, path: &Path, node: &NodeSpec, me: &Me) -> Option<(Option<Vec<u8>>, bool)> {
        let regular = |content: &ContentSpec, len: Option<u64>| -> io::Result<Option<Vec<u8>>> {
            let mut bytes = self.content(content, me);
            let mut f = fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .mode(0o644)
                .open(path)?;
            // A half-made file would confuse the oracles: remove it if the rest fails.
            let filled = f
                .write_all(&bytes)
                .and_then(|()| len.map_or(Ok(()), |len| f.set_len(len)));
            if let Err(e) = filled {
                let _ = fs::remove_file(path);
                return Err(e);
            }
            if let Some(len) = len {
                if len > (MAX_RECORD as u64) + 1 {
                    return Ok(None);
                }
                #[allow(clippy::cast_possible_truncation)]
                bytes.resize(len as usize, 0);
            }
            Ok(Some(bytes))
        };
        let r: io::Result<(Option<Vec<u8>>, bool)> = match node {
            NodeSpec::File(c) => regular(c, None).map(|b| (b, false)),
            NodeSpec::Sparse(c, len) => {
                regular(c, Some(u64::from(*len) % (MAX_SPARSE + 1))).map(|b| (b, false))
            }
            NodeSpec::Symlink(t) => {
                let target = match t {
                    LinkTarget::Victim => self.victim.clone(),
                    LinkTarget::VictimDir => self.victim_dir.clone(),
                    LinkTarget::Dangling => self.nowhere.clone(),
                    LinkTarget::StateDir => PathBuf::from("."),
                };
                std::os::unix::fs::symlink(target, path).map(|()| (None, false))
            }
            NodeSpec::HardLinkToVictim => {
                fs::hard_link(&self.victim, path).map(|()| (Some(VICTIM.to_vec()), false))
            }
            NodeSpec::Dir { files } => fs::create_dir(path).and_then(|()| {
                for i in 0..(*files).min(3) {
                    fs::write(path.join(format!("f{i}")), VICTIM)?;
                }
                Ok((None, *files > 0))
            }),
            NodeSpec::Fifo => nix::unistd::mkfifo(path, Mode::from_bits_truncate(0o644))
                .map(|()| (None, false))
                .map_err(io::Error::from),
            NodeSpec::Socket => std::os::unix::net::UnixListener::bind(path).map(|_| (None, false)),
        };
        // Creation fails without leaving anything behind (a name taken by an earlier
        // entry, a name too long for a socket...): the entry is skipped.
        r.ok()
    }

    fn content(&self, c: &ContentSpec, me: &Me) -> Vec<u8> {
        match c {
            ContentSpec::Empty => Vec::new(),
            ContentSpec::Record(r) => self.record(r, me).format().into_bytes(),
            ContentSpec::Bytes(b) => b.clone(),
            ContentSpec::RecordThen(r, b) => {
                let mut v = self.record(r, me).format().into_bytes();
                v.extend_from_slice(b);
                v
            }
            ContentSpec::RecordCut(r, n) => {
                let mut v = self.record(r, me).format().into_bytes();
                v.truncate(usize::from(*n) % v.len());
                v
            }
        }
    }

    fn record(&self, r: &RecordSpec, me: &Me) -> Holder {
        let id = &me.id;
        let (boot_id, pidns) = match r.place {
            Place::SameHost => (id.boot_id.clone(), id.pidns),
            Place::OtherBoot => ("00000000-0000-4000-8000-00000000b007".into(), id.pidns),
            Place::OtherPidns => (id.boot_id.clone(), id.pidns ^ 1),
            Place::NoBootId => (String::new(), id.pidns),
        };
        let (pid, start) = match r.who {
            Who::Me => (id.pid, id.start),
            Who::MeReborn(d) => (id.pid, id.start.wrapping_add(d.max(1))),
            Who::Parent => (me.ppid, me.parent_start.unwrap_or(0)),
            Who::DeadChild => (self.dead_pid, 1),
            Who::Pid(p, s) => (p, s),
        };
        HolderFields {
            kind: r.kind,
            host: r.host.clone().unwrap_or_else(|| id.host.clone()),
            boot_id,
            pidns,
            pid,
            start,
            pgid: match r.pgid {
                Pgid::None => 0,
                Pgid::Mine => me.pgid,
                Pgid::Raw(g) => g,
            },
            nonce: r.nonce,
            since_ns: r.since_ns,
            lease_ms: r.lease_ms,
        }
        .to_holder()
    }
}

/// The lock name of a planted entry, as bytes; `None` for names that cannot exist.
fn entry_name(spec: &NameSpec) -> Option<Vec<u8>> {
    let mut name = match spec {
        NameSpec::Lock(f) => f.to_name().to_string().into_bytes(),
        NameSpec::Near(f, m) => {
            let mut s = f.to_name().to_string().into_bytes();
            match m {
                Mutation::Upper => s.make_ascii_uppercase(),
                Mutation::LeadingZero => {
                    let digits = s.iter().rev().take_while(|b| b.is_ascii_digit()).count();
                    s.insert(s.len() - digits, b'0');
                }
                Mutation::Suffix(b) => s.extend_from_slice(b),
                Mutation::Prefix(b) => {
                    s.splice(0..0, b.iter().copied());
                }
                Mutation::Truncate(n) => {
                    let n = usize::from(*n) % (s.len() + 1);
                    s.truncate(n);
                }
            }
            s
        }
        NameSpec::Raw(b) => b.clone(),
    };
    for b in &mut name {
        if *b == b'/' || *b == 0 {
            *b = b'_';
        }
    }
    name.truncate(255);
    (!name.is_empty() && name != b"." && name != b"..").then_some(name)
}
