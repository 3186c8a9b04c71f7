//! `arbitrary` mirrors of the inputs of `rwdir::fuzzing` (whose types cannot derive
//! `Arbitrary` themselves: the library does not depend on `arbitrary`, and the orphan
//! rule forbids implementing it here for them). Each mirror converts with `From`.

use arbitrary::Arbitrary;
use rwdir::fuzzing as f;

/// Mirror of [`f::HolderFields`].
#[derive(Debug, Clone, Arbitrary)]
pub struct HolderFields {
    pub kind: u8,
    pub host: String,
    pub boot_id: String,
    pub pidns: u64,
    pub pid: u32,
    pub start: u64,
    pub pgid: u32,
    pub nonce: u128,
    pub since_ns: u64,
    pub lease_ms: u64,
}

impl From<HolderFields> for f::HolderFields {
    fn from(h: HolderFields) -> Self {
        f::HolderFields {
            kind: h.kind,
            host: h.host,
            boot_id: h.boot_id,
            pidns: h.pidns,
            pid: h.pid,
            start: h.start,
            pgid: h.pgid,
            nonce: h.nonce,
            since_ns: h.since_ns,
            lease_ms: h.lease_ms,
        }
    }
}

/// Mirror of [`f::NameFields`].
#[derive(Debug, Clone, Copy, Arbitrary)]
pub enum NameFields {
    Master,
    Pending { ns: u64, uuid: u128 },
    Slave { uuid: u128 },
    Break { ns: u64, uuid: u128 },
    Tmp { uuid: u128 },
    Token(u64),
}

impl From<NameFields> for f::NameFields {
    fn from(n: NameFields) -> Self {
        match n {
            NameFields::Master => f::NameFields::Master,
            NameFields::Pending { ns, uuid } => f::NameFields::Pending { ns, uuid },
            NameFields::Slave { uuid } => f::NameFields::Slave { uuid },
            NameFields::Break { ns, uuid } => f::NameFields::Break { ns, uuid },
            NameFields::Tmp { uuid } => f::NameFields::Tmp { uuid },
            NameFields::Token(n) => f::NameFields::Token(n),
        }
    }
}

/// Mirror of [`f::ScanInput`].
#[derive(Debug, Clone, Arbitrary)]
pub struct ScanInput {
    pub state: StateSpec,
    pub entries: Vec<EntrySpec>,
    pub ops: Vec<Op>,
}

impl From<ScanInput> for f::ScanInput {
    fn from(s: ScanInput) -> Self {
        f::ScanInput {
            state: s.state.into(),
            entries: s.entries.into_iter().map(Into::into).collect(),
            ops: s.ops.into_iter().map(Into::into).collect(),
        }
    }
}

/// Mirror of [`f::StateSpec`]. A directory is the common case: the other variants are
/// reached only through `Other`.
#[derive(Debug, Clone, Copy, Arbitrary)]
pub enum StateSpec {
    Dir,
    Dir2,
    Dir3,
    Other(OtherState),
}

/// The state path when it is not a directory full of entries.
#[derive(Debug, Clone, Copy, Arbitrary)]
pub enum OtherState {
    Missing,
    File,
    SymlinkToDir,
    DanglingSymlink,
    Fifo,
}

impl From<StateSpec> for f::StateSpec {
    fn from(s: StateSpec) -> Self {
        match s {
            StateSpec::Dir | StateSpec::Dir2 | StateSpec::Dir3 => f::StateSpec::Dir,
            StateSpec::Other(OtherState::Missing) => f::StateSpec::Missing,
            StateSpec::Other(OtherState::File) => f::StateSpec::File,
            StateSpec::Other(OtherState::SymlinkToDir) => f::StateSpec::SymlinkToDir,
            StateSpec::Other(OtherState::DanglingSymlink) => f::StateSpec::DanglingSymlink,
            StateSpec::Other(OtherState::Fifo) => f::StateSpec::Fifo,
        }
    }
}

/// Mirror of [`f::EntrySpec`].
#[derive(Debug, Clone, Arbitrary)]
pub struct EntrySpec {
    pub name: NameSpec,
    pub node: NodeSpec,
    pub mtime: MtimeSpec,
}

impl From<EntrySpec> for f::EntrySpec {
    fn from(e: EntrySpec) -> Self {
        f::EntrySpec {
            name: e.name.into(),
            node: e.node.into(),
            mtime: e.mtime.into(),
        }
    }
}

/// Mirror of [`f::NameSpec`].
#[derive(Debug, Clone, Arbitrary)]
pub enum NameSpec {
    Lock(NameFields),
    Near(NameFields, Mutation),
    Raw(Vec<u8>),
}

impl From<NameSpec> for f::NameSpec {
    fn from(n: NameSpec) -> Self {
        match n {
            NameSpec::Lock(x) => f::NameSpec::Lock(x.into()),
            NameSpec::Near(x, m) => f::NameSpec::Near(x.into(), m.into()),
            NameSpec::Raw(b) => f::NameSpec::Raw(b),
        }
    }
}

/// Mirror of [`f::Mutation`].
#[derive(Debug, Clone, Arbitrary)]
pub enum Mutation {
    Upper,
    LeadingZero,
    Suffix(Vec<u8>),
    Prefix(Vec<u8>),
    Truncate(u8),
}

impl From<Mutation> for f::Mutation {
    fn from(m: Mutation) -> Self {
        match m {
            Mutation::Upper => f::Mutation::Upper,
            Mutation::LeadingZero => f::Mutation::LeadingZero,
            Mutation::Suffix(b) => f::Mutation::Suffix(b),
            Mutation::Prefix(b) => f::Mutation::Prefix(b),
            Mutation::Truncate(n) => f::Mutation::Truncate(n),
        }
    }
}

/// Mirror of [`f::NodeSpec`].
#[derive(Debug, Clone, Arbitrary)]
pub enum NodeSpec {
    File(ContentSpec),
    Sparse(ContentSpec, u32),
    Symlink(LinkTarget),
    HardLinkToVictim,
    Dir { files: u8 },
    Fifo,
    Socket,
}

impl From<NodeSpec> for f::NodeSpec {
    fn from(n: NodeSpec) -> Self {
        match n {
            NodeSpec::File(c) => f::NodeSpec::File(c.into()),
            NodeSpec::Sparse(c, len) => f::NodeSpec::Sparse(c.into(), len),
            NodeSpec::Symlink(t) => f::NodeSpec::Symlink(t.into()),
            NodeSpec::HardLinkToVictim => f::NodeSpec::HardLinkToVictim,
            NodeSpec::Dir { files } => f::NodeSpec::Dir { files },
            NodeSpec::Fifo => f::NodeSpec::Fifo,
            NodeSpec::Socket => f::NodeSpec::Socket,
        }
    }
}

/// Mirror of [`f::LinkTarget`].
#[derive(Debug, Clone, Copy, Arbitrary)]
pub enum LinkTarget {
    Victim,
    VictimDir,
    Dangling,
    StateDir,
}

impl From<LinkTarget> for f::LinkTarget {
    fn from(t: LinkTarget) -> Self {
        match t {
            LinkTarget::Victim => f::LinkTarget::Victim,
            LinkTarget::VictimDir => f::LinkTarget::VictimDir,
            LinkTarget::Dangling => f::LinkTarget::Dangling,
            LinkTarget::StateDir => f::LinkTarget::StateDir,
        }
    }
}

/// Mirror of [`f::ContentSpec`].
#[derive(Debug, Clone, Arbitrary)]
pub enum ContentSpec {
    Empty,
    Record(RecordSpec),
    Bytes(Vec<u8>),
    RecordThen(RecordSpec, Vec<u8>),
    RecordCut(RecordSpec, u16),
}

impl From<ContentSpec> for f::ContentSpec {
    fn from(c: ContentSpec) -> Self {
        match c {
            ContentSpec::Empty => f::ContentSpec::Empty,
            ContentSpec::Record(r) => f::ContentSpec::Record(r.into()),
            ContentSpec::Bytes(b) => f::ContentSpec::Bytes(b),
            ContentSpec::RecordThen(r, b) => f::ContentSpec::RecordThen(r.into(), b),
            ContentSpec::RecordCut(r, n) => f::ContentSpec::RecordCut(r.into(), n),
        }
    }
}

/// Mirror of [`f::RecordSpec`].
#[derive(Debug, Clone, Arbitrary)]
pub struct RecordSpec {
    pub kind: u8,
    pub host: Option<String>,
    pub place: Place,
    pub who: Who,
    pub pgid: Pgid,
    pub nonce: u128,
    pub since_ns: u64,
    pub lease_ms: u64,
}

impl From<RecordSpec> for f::RecordSpec {
    fn from(r: RecordSpec) -> Self {
        f::RecordSpec {
            kind: r.kind,
            host: r.host,
            place: match r.place {
                Place::SameHost => f::Place::SameHost,
                Place::OtherBoot => f::Place::OtherBoot,
                Place::OtherPidns => f::Place::OtherPidns,
                Place::NoBootId => f::Place::NoBootId,
            },
            who: match r.who {
                Who::Me => f::Who::Me,
                Who::MeReborn(d) => f::Who::MeReborn(d),
                Who::Parent => f::Who::Parent,
                Who::DeadChild => f::Who::DeadChild,
                Who::Pid(p, s) => f::Who::Pid(p, s),
            },
            pgid: match r.pgid {
                Pgid::None => f::Pgid::None,
                Pgid::Mine => f::Pgid::Mine,
                Pgid::Raw(g) => f::Pgid::Raw(g),
            },
            nonce: r.nonce,
            since_ns: r.since_ns,
            lease_ms: r.lease_ms,
        }
    }
}

/// Mirror of [`f::Place`].
#[derive(Debug, Clone, Copy, Arbitrary)]
pub enum Place {
    SameHost,
    OtherBoot,
    OtherPidns,
    NoBootId,
}

/// Mirror of [`f::Who`].
#[derive(Debug, Clone, Copy, Arbitrary)]
pub enum Who {
    Me,
    MeReborn(u64),
    Parent,
    DeadChild,
    Pid(u32, u64),
}

/// Mirror of [`f::Pgid`].
#[derive(Debug, Clone, Copy, Arbitrary)]
pub enum Pgid {
    None,
    Mine,
    Raw(u32),
}

/// Mirror of [`f::MtimeSpec`].
#[derive(Debug, Clone, Copy, Arbitrary)]
pub enum MtimeSpec {
    Old,
    Fresh,
    Future,
    Epoch,
}

impl From<MtimeSpec> for f::MtimeSpec {
    fn from(m: MtimeSpec) -> Self {
        match m {
            MtimeSpec::Old => f::MtimeSpec::Old,
            MtimeSpec::Fresh => f::MtimeSpec::Fresh,
            MtimeSpec::Future => f::MtimeSpec::Future,
            MtimeSpec::Epoch => f::MtimeSpec::Epoch,
        }
    }
}

/// Mirror of [`f::Op`].
#[derive(Debug, Clone, Copy, Arbitrary)]
pub enum Op {
    Status,
    Plan { all: bool },
    TryRead { hold: bool },
    TryWrite { hold: bool },
    Downgrade,
    Release,
    Cleanup,
}

impl From<Op> for f::Op {
    fn from(o: Op) -> Self {
        match o {
            Op::Status => f::Op::Status,
            Op::Plan { all } => f::Op::Plan { all },
            Op::TryRead { hold } => f::Op::TryRead { hold },
            Op::TryWrite { hold } => f::Op::TryWrite { hold },
            Op::Downgrade => f::Op::Downgrade,
            Op::Release => f::Op::Release,
            Op::Cleanup => f::Op::Cleanup,
        }
    }
}
