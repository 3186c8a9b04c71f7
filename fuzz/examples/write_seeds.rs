//! Writes the committed seed corpus: `cargo run --example write_seeds [DIR]` (default
//! `corpus`) from `fuzz/`. Records and names come from the library's own `format` and
//! `Display`; `dir_scan` inputs are written by hand below and encoded as the bytes
//! `arbitrary` 1.5 decodes them from (checked by decoding them back), so that each seed
//! is a readable case rather than a blob. `cargo fuzz fmt dir_scan corpus/dir_scan/seed-…`
//! prints one.

use arbitrary::{Arbitrary, Unstructured};
use rwdir_fuzz::holder::HolderFields;
use rwdir_fuzz::names::NameFields;
use rwdir_fuzz::scan::*;
use std::fs;

#[derive(Default)]
/// The bytes `arbitrary` decodes a value from, built field by field.
struct E(Vec<u8>);
impl E {
    fn tag(&mut self, i: u64, n: u64) {
        // The smallest tag that `(tag * n) >> 32` maps to `i`.
        let t = (i << 32).div_ceil(n);
        self.0.extend_from_slice(&(t as u32).to_le_bytes());
    }
    fn b(&mut self, v: bool) {
        self.0.push(v as u8);
    }
    fn u8(&mut self, v: u8) {
        self.0.push(v);
    }
    fn u16(&mut self, v: u16) {
        self.0.extend_from_slice(&v.to_le_bytes());
    }
    fn u32(&mut self, v: u32) {
        self.0.extend_from_slice(&v.to_le_bytes());
    }
    fn u64(&mut self, v: u64) {
        self.0.extend_from_slice(&v.to_le_bytes());
    }
    fn u128(&mut self, v: u128) {
        self.0.extend_from_slice(&v.to_le_bytes());
    }
    fn bytes(&mut self, v: &[u8]) {
        for &x in v {
            self.b(true);
            self.u8(x);
        }
        self.b(false);
    }
    fn name_fields(&mut self, n: &NameFields) {
        match *n {
            NameFields::Master => self.tag(0, 6),
            NameFields::Pending { ns, uuid } => {
                self.tag(1, 6);
                self.u64(ns);
                self.u128(uuid)
            }
            NameFields::Slave { uuid } => {
                self.tag(2, 6);
                self.u128(uuid)
            }
            NameFields::Break { ns, uuid } => {
                self.tag(3, 6);
                self.u64(ns);
                self.u128(uuid)
            }
            NameFields::Tmp { uuid } => {
                self.tag(4, 6);
                self.u128(uuid)
            }
            NameFields::Token(k) => {
                self.tag(5, 6);
                self.u64(k)
            }
        }
    }
    fn record(&mut self, r: &RecordSpec) {
        self.u8(r.kind);
        assert!(r.host.is_none(), "strings are not encoded: use `None`");
        self.b(false);
        self.tag(r.place as u64, 4);
        match r.who {
            Who::Me => self.tag(0, 5),
            Who::MeReborn(d) => {
                self.tag(1, 5);
                self.u64(d)
            }
            Who::Parent => self.tag(2, 5),
            Who::DeadChild => self.tag(3, 5),
            Who::Pid(p, s) => {
                self.tag(4, 5);
                self.u32(p);
                self.u64(s)
            }
        }
        match r.pgid {
            Pgid::None => self.tag(0, 3),
            Pgid::Mine => self.tag(1, 3),
            Pgid::Raw(g) => {
                self.tag(2, 3);
                self.u32(g)
            }
        }
        self.u128(r.nonce);
        self.u64(r.since_ns);
        self.u64(r.lease_ms);
    }
    fn content(&mut self, c: &ContentSpec) {
        match c {
            ContentSpec::Empty => self.tag(0, 5),
            ContentSpec::Record(r) => {
                self.tag(1, 5);
                self.record(r)
            }
            ContentSpec::Bytes(b) => {
                self.tag(2, 5);
                self.bytes(b)
            }
            ContentSpec::RecordThen(r, b) => {
                self.tag(3, 5);
                self.record(r);
                self.bytes(b)
            }
            ContentSpec::RecordCut(r, n) => {
                self.tag(4, 5);
                self.record(r);
                self.u16(*n)
            }
        }
    }
    fn entry(&mut self, e: &EntrySpec) {
        match &e.name {
            NameSpec::Lock(n) => {
                self.tag(0, 3);
                self.name_fields(n)
            }
            NameSpec::Near(n, m) => {
                self.tag(1, 3);
                self.name_fields(n);
                match m {
                    Mutation::Upper => self.tag(0, 5),
                    Mutation::LeadingZero => self.tag(1, 5),
                    Mutation::Suffix(b) => {
                        self.tag(2, 5);
                        self.bytes(b)
                    }
                    Mutation::Prefix(b) => {
                        self.tag(3, 5);
                        self.bytes(b)
                    }
                    Mutation::Truncate(n) => {
                        self.tag(4, 5);
                        self.u8(*n)
                    }
                }
            }
            NameSpec::Raw(b) => {
                self.tag(2, 3);
                self.bytes(b)
            }
        }
        match &e.node {
            NodeSpec::File(c) => {
                self.tag(0, 7);
                self.content(c)
            }
            NodeSpec::Sparse(c, len) => {
                self.tag(1, 7);
                self.content(c);
                self.u32(*len)
            }
            NodeSpec::Symlink(t) => {
                self.tag(2, 7);
                self.tag(*t as u64, 4)
            }
            NodeSpec::HardLinkToVictim => self.tag(3, 7),
            NodeSpec::Dir { files } => {
                self.tag(4, 7);
                self.u8(*files)
            }
            NodeSpec::Fifo => self.tag(5, 7),
            NodeSpec::Socket => self.tag(6, 7),
        }
        self.tag(e.mtime as u64, 4);
    }
    fn op(&mut self, o: &Op) {
        match *o {
            Op::Status => self.tag(0, 7),
            Op::Plan { all } => {
                self.tag(1, 7);
                self.b(all)
            }
            Op::TryRead { hold } => {
                self.tag(2, 7);
                self.b(hold)
            }
            Op::TryWrite { hold } => {
                self.tag(3, 7);
                self.b(hold)
            }
            Op::Downgrade => self.tag(4, 7),
            Op::Release => self.tag(5, 7),
            Op::Cleanup => self.tag(6, 7),
        }
    }
    fn scan(s: &ScanInput) -> Vec<u8> {
        let mut e = E::default();
        // `StateSpec`'s decoder: three tags of four are a directory, the fourth is
        // followed by the other kind's tag.
        match s.state {
            StateSpec::Dir => e.tag(0, 4),
            other => {
                e.tag(3, 4);
                e.tag(other as u64 - 1, 5)
            }
        }
        for x in &s.entries {
            e.b(true);
            e.entry(x)
        }
        e.b(false);
        for o in &s.ops {
            e.b(true);
            e.op(o)
        }
        e.0
    }
}

fn rec(place: Place, who: Who, pgid: Pgid) -> RecordSpec {
    RecordSpec {
        kind: 1,
        host: None,
        place,
        who,
        pgid,
        nonce: 0x1234,
        since_ns: 1_700_000_000_000_000_000,
        lease_ms: 1000,
    }
}
fn ent(name: NameSpec, node: NodeSpec, mtime: MtimeSpec) -> EntrySpec {
    EntrySpec { name, node, mtime }
}
const U: u128 = 0x0a1b_2c3d_0000_4000_8000_0000_0000_0001;

fn main() {
    let out = std::path::PathBuf::from(std::env::args().nth(1).unwrap_or_else(|| "corpus".into()));
    holder_and_name_seeds(&out);

    use MtimeSpec::*;
    use NameFields as N;
    let lock = NameSpec::Lock;
    let file = |c| NodeSpec::File(c);
    let all_ops = vec![
        Op::Status,
        Op::Plan { all: false },
        Op::Plan { all: true },
        Op::TryRead { hold: true },
        Op::TryWrite { hold: false },
        Op::Cleanup,
        Op::Status,
        Op::Release,
        Op::TryWrite { hold: true },
        Op::Downgrade,
        Op::Status,
        Op::Release,
    ];
    let seeds: Vec<(&str, ScanInput)> = vec![
        (
            "hostile-mix",
            ScanInput {
                state: StateSpec::Dir,
                entries: vec![
                    ent(
                        lock(N::Master),
                        file(ContentSpec::Record(rec(
                            Place::SameHost,
                            Who::DeadChild,
                            Pgid::None,
                        ))),
                        Fresh,
                    ),
                    ent(
                        lock(N::Slave { uuid: U }),
                        NodeSpec::Symlink(LinkTarget::Victim),
                        Old,
                    ),
                    ent(lock(N::Pending { ns: 1, uuid: U }), NodeSpec::Fifo, Future),
                    ent(
                        NameSpec::Near(N::Slave { uuid: U }, Mutation::Upper),
                        file(ContentSpec::Empty),
                        Old,
                    ),
                    ent(
                        lock(N::Tmp { uuid: U }),
                        NodeSpec::Sparse(
                            ContentSpec::Record(rec(Place::OtherBoot, Who::Me, Pgid::None)),
                            64 << 20,
                        ),
                        Old,
                    ),
                    ent(
                        lock(N::Slave { uuid: U + 1 }),
                        file(ContentSpec::Record(rec(
                            Place::SameHost,
                            Who::Me,
                            Pgid::None,
                        ))),
                        Old,
                    ),
                    ent(lock(N::Token(9)), NodeSpec::Dir { files: 0 }, Old),
                    ent(
                        NameSpec::Raw(b".nfs000000000001".to_vec()),
                        file(ContentSpec::Bytes(b"x".to_vec())),
                        Old,
                    ),
                    ent(
                        lock(N::Break { ns: 3, uuid: U }),
                        NodeSpec::HardLinkToVictim,
                        Old,
                    ),
                    ent(lock(N::Tmp { uuid: U + 1 }), NodeSpec::Socket, Old),
                    ent(
                        lock(N::Pending { ns: 2, uuid: U }),
                        NodeSpec::Symlink(LinkTarget::StateDir),
                        Old,
                    ),
                    ent(
                        lock(N::Slave { uuid: U + 2 }),
                        NodeSpec::Symlink(LinkTarget::VictimDir),
                        Epoch,
                    ),
                ],
                ops: all_ops.clone(),
            },
        ),
        (
            "live-holders",
            ScanInput {
                state: StateSpec::Dir,
                entries: vec![
                    ent(
                        lock(N::Pending { ns: 5, uuid: U }),
                        file(ContentSpec::Record(rec(
                            Place::SameHost,
                            Who::Parent,
                            Pgid::None,
                        ))),
                        Old,
                    ),
                    ent(
                        lock(N::Slave { uuid: U }),
                        file(ContentSpec::Record(rec(
                            Place::SameHost,
                            Who::DeadChild,
                            Pgid::Mine,
                        ))),
                        Old,
                    ),
                    ent(
                        lock(N::Break { ns: 1, uuid: U }),
                        file(ContentSpec::Record(rec(
                            Place::OtherPidns,
                            Who::Me,
                            Pgid::None,
                        ))),
                        Future,
                    ),
                    ent(
                        lock(N::Slave { uuid: U + 1 }),
                        file(ContentSpec::RecordThen(
                            rec(Place::SameHost, Who::Me, Pgid::None),
                            b"\n".to_vec(),
                        )),
                        Fresh,
                    ),
                ],
                ops: vec![
                    Op::TryRead { hold: false },
                    Op::TryWrite { hold: false },
                    Op::Cleanup,
                    Op::Status,
                    Op::Plan { all: false },
                ],
            },
        ),
        (
            "stale-master",
            ScanInput {
                state: StateSpec::Dir,
                entries: vec![
                    ent(
                        lock(N::Master),
                        file(ContentSpec::Bytes(b"garbage".to_vec())),
                        Old,
                    ),
                    ent(
                        lock(N::Break { ns: 1, uuid: U }),
                        file(ContentSpec::Record(rec(
                            Place::SameHost,
                            Who::MeReborn(1),
                            Pgid::None,
                        ))),
                        Old,
                    ),
                    ent(
                        lock(N::Pending { ns: 1, uuid: U }),
                        file(ContentSpec::RecordCut(
                            rec(Place::NoBootId, Who::Pid(1, 1), Pgid::Raw(1)),
                            100,
                        )),
                        Old,
                    ),
                ],
                ops: vec![
                    Op::Plan { all: false },
                    Op::TryRead { hold: true },
                    Op::TryWrite { hold: false },
                    Op::Release,
                    Op::Cleanup,
                    Op::TryWrite { hold: false },
                    Op::Status,
                ],
            },
        ),
        (
            "tokens",
            ScanInput {
                state: StateSpec::Dir,
                entries: vec![
                    ent(lock(N::Token(3)), file(ContentSpec::Empty), Old),
                    ent(
                        lock(N::Token(7)),
                        file(ContentSpec::Record(rec(
                            Place::SameHost,
                            Who::Me,
                            Pgid::None,
                        ))),
                        Future,
                    ),
                    ent(lock(N::Token(5)), NodeSpec::Dir { files: 2 }, Old),
                    ent(
                        NameSpec::Near(N::Token(8), Mutation::LeadingZero),
                        file(ContentSpec::Empty),
                        Old,
                    ),
                ],
                ops: vec![
                    Op::TryWrite { hold: true },
                    Op::Status,
                    Op::Plan { all: true },
                    Op::Release,
                    Op::TryWrite { hold: false },
                    Op::Status,
                ],
            },
        ),
        (
            "non-empty-dirs",
            ScanInput {
                state: StateSpec::Dir,
                entries: vec![
                    ent(lock(N::Slave { uuid: U }), NodeSpec::Dir { files: 3 }, Old),
                    ent(
                        lock(N::Pending { ns: 9, uuid: U }),
                        NodeSpec::Dir { files: 0 },
                        Old,
                    ),
                    ent(
                        NameSpec::Near(N::Master, Mutation::Suffix(b".bak".to_vec())),
                        NodeSpec::Dir { files: 1 },
                        Old,
                    ),
                ],
                ops: vec![
                    Op::Status,
                    Op::TryRead { hold: false },
                    Op::TryWrite { hold: false },
                    Op::Cleanup,
                    Op::Plan { all: true },
                ],
            },
        ),
    ];
    let mut seeds = seeds;
    for (name, st) in [
        ("state-symlink", StateSpec::SymlinkToDir),
        ("state-fifo", StateSpec::Fifo),
        ("state-file", StateSpec::File),
        ("state-dangling", StateSpec::DanglingSymlink),
        ("state-missing", StateSpec::Missing),
    ] {
        seeds.push((
            name,
            ScanInput {
                state: st,
                entries: vec![],
                ops: vec![
                    Op::Status,
                    Op::Plan { all: true },
                    Op::TryRead { hold: true },
                    Op::TryWrite { hold: false },
                    Op::Cleanup,
                    Op::Status,
                ],
            },
        ));
    }
    let dir = out.join("dir_scan");
    std::fs::create_dir_all(&dir).unwrap();
    for (name, s) in &seeds {
        let bytes = E::scan(s);
        let back = ScanInput::arbitrary_take_rest(Unstructured::new(&bytes)).unwrap();
        assert_eq!(format!("{back:?}"), format!("{s:?}"), "{name}");
        std::fs::write(dir.join(format!("seed-{name}")), &bytes).unwrap();
        println!("seed-{name}: {} bytes", bytes.len());
    }
}

fn holder_and_name_seeds(out: &std::path::Path) {
    let h = out.join("holder_parse");
    let l = out.join("lock_name_parse");
    fs::create_dir_all(&h).unwrap();
    fs::create_dir_all(&l).unwrap();
    let names = ["read", "write", "pending", "break", "token"];
    for k in 0..5u8 {
        let f = HolderFields {
            kind: k,
            host: format!("host-{k}"),
            boot_id: "5d1f3a4e-0000-4000-8000-000000000000".into(),
            pidns: 4026531836,
            pid: 4242 + u32::from(k),
            start: 123456,
            pgid: if k == 1 { 4242 } else { 0 },
            nonce: 0x0a1b_2c3d_0000_4000_8000_0000_0000_0001 + u128::from(k),
            since_ns: 1_700_000_000_123_456_789,
            lease_ms: 45_000,
        };
        fs::write(
            h.join(format!("seed-{}", names[k as usize])),
            f.to_holder().format(),
        )
        .unwrap();
    }
    let big = HolderFields {
        kind: 0,
        host: "h".repeat(255),
        boot_id: "b".repeat(255),
        pidns: u64::MAX,
        pid: u32::MAX,
        start: u64::MAX,
        pgid: u32::MAX,
        nonce: u128::MAX,
        since_ns: u64::MAX,
        lease_ms: u64::MAX,
    };
    fs::write(h.join("seed-max-fields"), big.to_holder().format()).unwrap();
    let zero = HolderFields::default();
    fs::write(h.join("seed-zero-fields"), zero.to_holder().format()).unwrap();
    let u = 0x0a1b_2c3d_0000_4000_8000_0000_0000_0001u128;
    let all = [
        ("master", NameFields::Master),
        (
            "pending",
            NameFields::Pending {
                ns: 1_700_000_000_123_456_789,
                uuid: u,
            },
        ),
        ("slave", NameFields::Slave { uuid: u }),
        (
            "break",
            NameFields::Break {
                ns: 1_700_000_000_123_456_789,
                uuid: u,
            },
        ),
        ("tmp", NameFields::Tmp { uuid: u }),
        ("token", NameFields::Token(42)),
        ("token-max", NameFields::Token(u64::MAX)),
    ];
    for (n, f) in all {
        fs::write(l.join(format!("seed-{n}")), f.file_name()).unwrap();
    }
    let queue = [
        NameFields::Pending { ns: 2, uuid: u },
        NameFields::Pending { ns: 1, uuid: u + 1 },
        NameFields::Pending { ns: 2, uuid: u - 1 },
        NameFields::Break { ns: 0, uuid: u },
        NameFields::Master,
        NameFields::Token(7),
        NameFields::Token(3),
    ];
    let joined: Vec<String> = queue.iter().map(|f| f.file_name()).collect();
    fs::write(l.join("seed-queue"), joined.join("/")).unwrap();
    fs::write(l.join("seed-foreign"), ".nfs0000000000001234/.master_lock.bak/.token-007/.slave_lock-0A1B2C3D-0000-4000-8000-000000000001").unwrap();
}
