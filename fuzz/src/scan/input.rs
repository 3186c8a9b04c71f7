//! The input of `dir_scan`: what the state directory is, what is planted in it, and the
//! library calls made on it. Decoded with `arbitrary` (see `StateSpec` for the one
//! hand-written decoder).

use arbitrary::{Arbitrary, Unstructured};

use crate::names::NameFields;

/// One `dir_scan` case: what the state directory is, what is planted in it, and the
/// library calls made on it.
#[derive(Debug, Clone, PartialEq, Eq, Arbitrary)]
pub struct ScanInput {
    /// What `DIR/.rwdir` is.
    pub state: StateSpec,
    /// Entries planted in `DIR/.rwdir` (when it is a directory); at most 24 are used.
    pub entries: Vec<EntrySpec>,
    /// Calls made, in order; at most 12 are used. Guards still held at the end are
    /// released.
    pub ops: Vec<Op>,
}

/// What the state directory `DIR/.rwdir` is. Decoded by hand (below) so that a
/// directory, the common case, is three inputs in four.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StateSpec {
    /// A directory (the entries are planted in it).
    Dir,
    /// Nothing: the first acquisition makes it.
    Missing,
    /// A regular file.
    File,
    /// A symlink to a directory outside `DIR`.
    SymlinkToDir,
    /// A symlink to nothing.
    DanglingSymlink,
    /// A FIFO.
    Fifo,
}

impl<'a> Arbitrary<'a> for StateSpec {
    fn arbitrary(u: &mut Unstructured<'a>) -> arbitrary::Result<Self> {
        Ok(match StateTag::arbitrary(u)? {
            StateTag::Dir | StateTag::Dir2 | StateTag::Dir3 => StateSpec::Dir,
            StateTag::Other(OtherState::Missing) => StateSpec::Missing,
            StateTag::Other(OtherState::File) => StateSpec::File,
            StateTag::Other(OtherState::SymlinkToDir) => StateSpec::SymlinkToDir,
            StateTag::Other(OtherState::DanglingSymlink) => StateSpec::DanglingSymlink,
            StateTag::Other(OtherState::Fifo) => StateSpec::Fifo,
        })
    }

    fn size_hint(depth: usize) -> (usize, Option<usize>) {
        StateTag::size_hint(depth)
    }
}

/// How a `StateSpec` is encoded: three tags of four are a directory, the fourth is
/// followed by the other kind's tag.
#[derive(Arbitrary)]
enum StateTag {
    Dir,
    Dir2,
    Dir3,
    Other(OtherState),
}

#[derive(Arbitrary)]
enum OtherState {
    Missing,
    File,
    SymlinkToDir,
    DanglingSymlink,
    Fifo,
}

/// One planted entry.
#[derive(Debug, Clone, PartialEq, Eq, Arbitrary)]
pub struct EntrySpec {
    /// Its name.
    pub name: NameSpec,
    /// What it is.
    pub node: NodeSpec,
    /// Its modification time (the heartbeat the lease is judged by).
    pub mtime: MtimeSpec,
}

/// The name of a planted entry.
#[derive(Debug, Clone, PartialEq, Eq, Arbitrary)]
pub enum NameSpec {
    /// A lock name.
    Lock(NameFields),
    /// A lock name, altered: usually a foreign name that must be left alone.
    Near(NameFields, Mutation),
    /// Any bytes (`/` and NUL become `_`; empty, `.`, `..` are skipped).
    Raw(Vec<u8>),
}

/// An alteration of a lock name.
#[derive(Debug, Clone, PartialEq, Eq, Arbitrary)]
pub enum Mutation {
    /// Upper-cased.
    Upper,
    /// A `0` inserted before the trailing digits (or appended).
    LeadingZero,
    /// Bytes appended.
    Suffix(Vec<u8>),
    /// Bytes prepended.
    Prefix(Vec<u8>),
    /// Cut to this many bytes (modulo its length).
    Truncate(u8),
}

/// What a planted entry is.
#[derive(Debug, Clone, PartialEq, Eq, Arbitrary)]
pub enum NodeSpec {
    /// A regular file with this content.
    File(ContentSpec),
    /// A regular file with this content, then `set_len` to this length modulo 64 MiB + 1
    /// (sparse).
    Sparse(ContentSpec, u32),
    /// A symbolic link.
    Symlink(LinkTarget),
    /// A hard link to the victim file outside `DIR`.
    HardLinkToVictim,
    /// A directory holding this many files (at most 3).
    Dir {
        /// Files inside (0: empty).
        files: u8,
    },
    /// A FIFO (nobody ever writes to it: opening it for reading must not block).
    Fifo,
    /// A Unix socket (nobody listens).
    Socket,
}

/// Where a planted symlink points.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Arbitrary)]
pub enum LinkTarget {
    /// The victim file outside `DIR`: its bytes and mode must never change.
    Victim,
    /// The victim directory outside `DIR`: its content must never change.
    VictimDir,
    /// Nowhere.
    Dangling,
    /// `.`: the state directory itself.
    StateDir,
}

/// The content of a planted regular file.
#[derive(Debug, Clone, PartialEq, Eq, Arbitrary)]
pub enum ContentSpec {
    /// Nothing.
    Empty,
    /// A valid record.
    Record(RecordSpec),
    /// Any bytes.
    Bytes(Vec<u8>),
    /// A valid record followed by these bytes.
    RecordThen(RecordSpec, Vec<u8>),
    /// A valid record cut to this many bytes (modulo its length).
    RecordCut(RecordSpec, u16),
}

/// A holder record whose identity fields are chosen relative to this process.
#[derive(Debug, Clone, PartialEq, Eq, Arbitrary)]
pub struct RecordSpec {
    /// Index into the kinds, modulo 5.
    pub kind: u8,
    /// Host name; `None` for this host's name.
    pub host: Option<String>,
    /// Boot id and pid namespace.
    pub place: Place,
    /// Pid and start time.
    pub who: Who,
    /// Process group.
    pub pgid: Pgid,
    /// Nonce bits.
    pub nonce: u128,
    /// Creation time.
    pub since_ns: u64,
    /// Lease in milliseconds.
    pub lease_ms: u64,
}

/// Boot id and pid namespace of a record.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Arbitrary)]
pub enum Place {
    /// This host and pid namespace: judged exactly.
    SameHost,
    /// Another boot id: judged by lease.
    OtherBoot,
    /// This boot, another pid namespace: judged by lease.
    OtherPidns,
    /// An empty boot id: judged by lease.
    NoBootId,
}

/// Pid and start time of a record.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Arbitrary)]
pub enum Who {
    /// This process.
    Me,
    /// This pid with another start time (a previous incarnation): dead.
    MeReborn(u64),
    /// The parent process (alive for the whole run).
    Parent,
    /// A child that was spawned and reaped: dead.
    DeadChild,
    /// Any pid and start time.
    Pid(u32, u64),
}

/// Process group of a record.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Arbitrary)]
pub enum Pgid {
    /// None (0).
    None,
    /// This process's group: alive.
    Mine,
    /// Any number.
    Raw(u32),
}

/// Modification time of a planted entry, against a lease of one second.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Arbitrary)]
pub enum MtimeSpec {
    /// An hour ago: expired.
    Old,
    /// Now: live for about a second.
    Fresh,
    /// In an hour: never expired during the run.
    Future,
    /// The Unix epoch.
    Epoch,
}

/// A library call.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Arbitrary)]
pub enum Op {
    /// `status()`.
    Status,
    /// `cleanup_plan()` or `cleanup_all_plan()`.
    Plan {
        /// `cleanup --all`'s plan.
        all: bool,
    },
    /// `try_read()`; the guard is kept or released at once.
    TryRead {
        /// Keep the guard.
        hold: bool,
    },
    /// `try_write()`; the guard is kept or released at once.
    TryWrite {
        /// Keep the guard.
        hold: bool,
    },
    /// `downgrade()` of the last write guard kept, if any.
    Downgrade,
    /// Releases every guard kept.
    Release,
    /// `cleanup()`.
    Cleanup,
}
