//! A reader's file kept between reads (docs/protocol.md §2.1.1, docs/notes/contention.md
//! §21): the inode of a released reader's file, kept under a `.tmp-<uuid>` name and
//! given the next reader's name with one `linkat`, so that a read that comes alone
//! neither creates an inode nor frees one (about half of its kernel time on tmpfs).
//!
//! Only while reads come alone: when a read's decisive listing (R3) shows another
//! reader's file, or a read joins another read's file of this process (V11), this
//! handle makes a file per read again for the next [`CROWD`] reads, and lets its kept
//! file go. Reads that meet keep their directory's lock busy between
//! `linkat`, `getdents64` and `unlink`; without the inode's creation and removal in
//! between, two processes reading in a tight loop met on that lock at every read and
//! slept on it, at half the reads per second of a file per read (§20).

use std::os::fd::OwnedFd;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};

use nix::errno::Errno;
use nix::unistd::{UnlinkatFlags, unlinkat};
use parking_lot::Mutex;
use uuid::Uuid;

use super::StateDir;
use super::create::Created;
use crate::error::Result;
use crate::holder::Record;
use crate::names::{LockName, NameText};
use crate::sys::{self, FileId};

/// How many reads after one that met another reader make a file each.
pub(crate) const CROWD: u32 = 256;

/// The kept file of one state directory handle, and how crowded its reads were.
#[derive(Debug, Default)]
pub(super) struct Park {
    slot: Mutex<Slot>,
    /// Reads still to make a file each ([`CROWD`] after a crowded one, counted down).
    crowd: AtomicU32,
    /// Whether a reader's file was released through this handle before: only the files
    /// of a handle that reads again are kept, so that a process that reads once (the
    /// command, a script) never leaves a kept file behind, whichever way it exits.
    released: AtomicBool,
    /// Whether this handle has swept the kept files of dead processes
    /// ([`StateDir::swept`]).
    swept: AtomicBool,
}

#[derive(Debug, Default)]
enum Slot {
    #[default]
    Empty,
    /// Kept, between reads.
    Idle(Parked),
    /// In use by a read (or being kept by a release): its `.tmp-` name, for the drop.
    Busy { tmp: LockName, pid: u32 },
}

/// A kept reader's file: its descriptor, the `.tmp-` name that keeps its inode, the
/// length of the record it holds, and the process that kept it (a forked child leaves
/// its parent's file alone).
#[derive(Debug)]
pub(super) struct Parked {
    fd: OwnedFd,
    tmp: LockName,
    id: Option<FileId>,
    len: u64,
    pid: u32,
}

/// What a reader's file is, for its release ([`StateDir::release_reader`]).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Kept {
    /// The `.tmp-` name of the kept inode, if the file is the kept one.
    pub(crate) tmp: Option<LockName>,
    /// The length of the record in the file (`u64::MAX` if not known: the next use
    /// truncates).
    pub(crate) len: u64,
}

impl Kept {
    /// A file that is not the kept one, of unknown length.
    pub(crate) const UNKNOWN: Kept = Kept {
        tmp: None,
        len: u64::MAX,
    };
}

impl StateDir {
    /// Counts a read in: `readers` is how many readers' files its decisive listing
    /// showed, its own included.
    pub(crate) fn note_readers(&self, readers: usize) {
        if readers > 1 {
            self.note_crowd();
        } else if self.crowded() {
            let _ = (self.park.crowd)
                .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |c| c.checked_sub(1));
        }
    }

    /// Counts in a read that overlapped another read of this process (it joined that
    /// read's file, V11): as a read that met another reader's file.
    pub(crate) fn note_crowd(&self) {
        // Read first: threads joining each other's files at a high rate would otherwise
        // write this line at every join.
        if self.park.crowd.load(Ordering::Relaxed) != CROWD {
            self.park.crowd.store(CROWD, Ordering::Relaxed);
        }
    }

    /// Whether this handle has swept the dead processes' kept files yet.
    pub(crate) fn swept(&self) -> bool {
        self.park.swept.load(Ordering::Relaxed)
    }

    /// Records that it has (see [`StateDir::swept`]).
    pub(crate) fn set_swept(&self) {
        self.park.swept.store(true, Ordering::Relaxed);
    }

    fn crowded(&self) -> bool {
        self.park.crowd.load(Ordering::Relaxed) > 0
    }

    /// A reader's file made from the kept one: its record written over the last one,
    /// then linked to `target`. `None`: no kept file (or it could not be used, and is let
    /// go); the caller makes a file as usual.
    pub(super) fn put_kept(&self, target: &NameText, record: &Record<'_>) -> Option<Created> {
        if self.is_remote() || self.crowded() {
            return None;
        }
        let p = {
            let mut slot = self.park.slot.lock();
            match std::mem::take(&mut *slot) {
                Slot::Idle(p) if p.pid == sys::pid() => {
                    *slot = Slot::Busy {
                        tmp: p.tmp,
                        pid: p.pid,
                    };
                    p
                }
                // A forked child's copy of its parent's: the child's descriptor is
                // closed, the name left to the parent.
                Slot::Idle(_) => return None,
                other => {
                    *slot = other;
                    return None;
                }
            }
        };
        // Through a `File` for `write_all_at` (`pwrite`, which leaves the offset alone).
        let file = std::fs::File::from(p.fd);
        let written = record.with_text(|text| -> Option<u64> {
            use std::os::unix::fs::FileExt as _;
            file.write_all_at(text, 0).ok()?;
            let len = text.len() as u64;
            if p.len > len {
                file.set_len(len).ok()?;
            }
            Some(len)
        });
        let p = Parked {
            fd: file.into(),
            ..p
        };
        let Some(len) = written else {
            self.let_go(p);
            return None;
        };
        // Not through `link_anonymous`, which takes an `ENOENT` of `AT_EMPTY_PATH` for a
        // refusal of the flag: here it may only mean that the inode lost its last name.
        let linked = if self.empty_path.load(Ordering::Relaxed) {
            nix::unistd::linkat(
                &p.fd,
                c"",
                &self.fd,
                target.as_cstr(),
                nix::fcntl::AtFlags::AT_EMPTY_PATH,
            )
        } else {
            self.link_anonymous(&p.fd, target)
                .unwrap_or(Err(Errno::ENOSYS))
        };
        match linked {
            Ok(()) => Some(Created {
                fd: p.fd,
                id: p.id,
                kept: Kept {
                    tmp: Some(p.tmp),
                    len,
                },
            }),
            // The kept inode lost its name (a cleanup removed it, or a judge by lease),
            // or the link failed: a file of its own for this read.
            _ => {
                self.let_go(p);
                None
            }
        }
    }

    /// Removes a released reader's file `name` (R5): keeps its inode for the next read
    /// if the reads here come alone, else unlinks it. `Ok(false)` if it was already
    /// gone.
    pub(crate) fn release_reader(
        &self,
        name: &LockName,
        fd: OwnedFd,
        id: Option<FileId>,
        kept: Kept,
    ) -> Result<bool> {
        // Read first: a store at every release would bounce the line between threads.
        let again = self.park.released.load(Ordering::Relaxed)
            || self.park.released.swap(true, Ordering::Relaxed);
        let keep = again && !self.is_remote() && !self.crowded();
        let pid = sys::pid();
        if let Some(tmp) = kept.tmp {
            let removed = self.unlink(name);
            let p = Parked {
                fd,
                tmp,
                id,
                len: kept.len,
                pid,
            };
            if keep && matches!(removed, Ok(true)) {
                *self.park.slot.lock() = Slot::Idle(p);
            } else {
                self.let_go(p);
            }
            return removed;
        }
        // The name is drawn only when the file is kept: most releases keep nothing.
        let reserved = if keep && self.renames.load(Ordering::Relaxed) {
            let mut slot = self.park.slot.lock();
            let free = match &*slot {
                Slot::Empty => true,
                // A forked child's copy of its parent's kept file: forgotten here.
                Slot::Idle(p) => p.pid != pid,
                Slot::Busy { pid: had, .. } => *had != pid,
            };
            free.then(|| {
                let tmp = LockName::Tmp {
                    uuid: Uuid::new_v4(),
                };
                *slot = Slot::Busy { tmp, pid };
                tmp
            })
        } else {
            None
        };
        let Some(tmp) = reserved else {
            if self.is_remote() {
                // Closed before the unlink: NFS would leave a `.nfsXXXX` file behind.
                drop(fd);
                return self.unlink(name);
            }
            let removed = self.unlink(name);
            drop(fd);
            return removed;
        };
        match self.rename_noreplace(name, &tmp) {
            Ok(()) => {
                *self.park.slot.lock() = Slot::Idle(Parked {
                    fd,
                    tmp,
                    id,
                    len: kept.len,
                    pid,
                });
                Ok(true)
            }
            Err(e) => {
                *self.park.slot.lock() = Slot::Empty;
                if matches!(e, Errno::EINVAL | Errno::ENOSYS | Errno::EOPNOTSUPP) {
                    self.renames.store(false, Ordering::Relaxed);
                }
                let removed = self.unlink(name);
                drop(fd);
                removed
            }
        }
    }

    /// Lets the kept file of a read go without using it again (a release that could not
    /// keep it: lost, or on its way out of a failed read): its `.tmp-` name is removed.
    pub(crate) fn let_go_kept(&self, tmp: &LockName) {
        let _ = unlinkat(&self.fd, tmp.text().as_cstr(), UnlinkatFlags::NoRemoveDir);
        let mut slot = self.park.slot.lock();
        if matches!(&*slot, Slot::Busy { tmp: t, .. } if t == tmp) {
            *slot = Slot::Empty;
        }
    }

    /// Our own kept file's `.tmp-` name, if any, for a sweep to skip.
    pub(crate) fn kept_name(&self) -> Option<LockName> {
        match &*self.park.slot.lock() {
            Slot::Idle(p) => Some(p.tmp),
            Slot::Busy { tmp, .. } => Some(*tmp),
            Slot::Empty => None,
        }
    }

    fn let_go(&self, p: Parked) {
        let _ = unlinkat(&self.fd, p.tmp.text().as_cstr(), UnlinkatFlags::NoRemoveDir);
        drop(p.fd);
        *self.park.slot.lock() = Slot::Empty;
    }
}

impl Drop for StateDir {
    fn drop(&mut self) {
        let tmp = match std::mem::take(&mut *self.park.slot.lock()) {
            Slot::Idle(p) if p.pid == sys::pid() => p.tmp,
            Slot::Busy { tmp, pid } if pid == sys::pid() => tmp,
            _ => return,
        };
        let _ = unlinkat(&self.fd, tmp.text().as_cstr(), UnlinkatFlags::NoRemoveDir);
    }
}
