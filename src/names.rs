//! Lock-file names: parsing, formatting, queue order.

use uuid::Uuid;

/// The writer's file, the one reused lock name.
pub(crate) const MASTER: &str = ".master_lock";
const PENDING: &str = ".pending_lock-";
const SLAVE: &str = ".slave_lock-";
const BREAK: &str = ".break-";
const TMP: &str = ".tmp-";
const TOKEN: &str = ".token-";

/// A name in the state directory, as the protocol sees it.
///
/// `pub` for the fuzz harness only (re-exported by `rwdir::internals` with the `fuzzing`
/// feature); crate-private otherwise.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[cfg_attr(not(feature = "fuzzing"), allow(unreachable_pub))]
pub enum LockName {
    /// `.master_lock`: the writer.
    Master,
    /// `.pending_lock-<uuid>-<ns>`: a queued writer.
    Pending {
        /// Realtime clock in nanoseconds, read just before the file was created.
        ns: u64,
        /// The file's own uuid.
        uuid: Uuid,
    },
    /// `.slave_lock-<uuid>`: a reader.
    Slave {
        /// The file's own uuid.
        uuid: Uuid,
    },
    /// `.break-<ns>-<uuid>`: a process breaking a stale `.master_lock`.
    Break {
        /// Realtime clock in nanoseconds.
        ns: u64,
        /// The file's own uuid.
        uuid: Uuid,
    },
    /// `.tmp-<uuid>`: a file being created.
    Tmp {
        /// The file's own uuid.
        uuid: Uuid,
    },
    /// `.token-<n>`: the fencing-token counter. Not a lock file.
    Token(u64),
}

// `parse`, `order_key` and `is_unique` are `pub` for the fuzz harness, as `LockName`.
#[cfg_attr(not(feature = "fuzzing"), allow(unreachable_pub))]
impl LockName {
    /// Whether `name` has a reader's prefix (`.slave_lock-`), well-formed or not.
    pub(crate) fn is_slave(name: &[u8]) -> bool {
        name.starts_with(SLAVE.as_bytes())
    }

    /// Whether `name` has a temporary file's prefix (`.tmp-`), well-formed or not.
    pub(crate) fn is_tmp(name: &[u8]) -> bool {
        name.starts_with(TMP.as_bytes())
    }

    /// Whether `name` has a queued writer's prefix (`.pending_lock-`), well-formed or not.
    pub(crate) fn is_pending(name: &[u8]) -> bool {
        name.starts_with(PENDING.as_bytes())
    }

    /// Parses a directory entry's name. Foreign names give `None`.
    ///
    /// Parsing is strict: uuids must be in lower-case hyphenated form and numbers in
    /// canonical decimal, so that `parse(format(x)) == x` and every lock file has exactly
    /// one name.
    pub fn parse(name: &[u8]) -> Option<LockName> {
        if name == MASTER.as_bytes() {
            return Some(LockName::Master);
        }
        if let Some(rest) = name.strip_prefix(PENDING.as_bytes()) {
            let (uuid, ns) = rest.split_at_checked(36)?;
            let ns = ns.strip_prefix(b"-")?;
            return Some(LockName::Pending {
                ns: parse_u64_ascii(ns)?,
                uuid: parse_uuid_ascii(uuid)?,
            });
        }
        if let Some(rest) = name.strip_prefix(SLAVE.as_bytes()) {
            return Some(LockName::Slave {
                uuid: parse_uuid_ascii(rest)?,
            });
        }
        if let Some(rest) = name.strip_prefix(BREAK.as_bytes()) {
            let at = rest.iter().position(|&b| b == b'-')?;
            return Some(LockName::Break {
                ns: parse_u64_ascii(&rest[..at])?,
                uuid: parse_uuid_ascii(&rest[at + 1..])?,
            });
        }
        if let Some(rest) = name.strip_prefix(TMP.as_bytes()) {
            return Some(LockName::Tmp {
                uuid: parse_uuid_ascii(rest)?,
            });
        }
        if let Some(rest) = name.strip_prefix(TOKEN.as_bytes()) {
            return Some(LockName::Token(parse_u64_ascii(rest)?));
        }
        None
    }

    /// The queue key of a pending writer or a breaker: `(ns, uuid)`.
    pub fn order_key(&self) -> Option<(u64, Uuid)> {
        match *self {
            LockName::Pending { ns, uuid } | LockName::Break { ns, uuid } => Some((ns, uuid)),
            _ => None,
        }
    }

    /// True for names whose uuid makes them unique, never reused: these may be removed
    /// by anyone once their owner is dead (`unlink_if_dead`).
    pub fn is_unique(&self) -> bool {
        matches!(
            self,
            LockName::Pending { .. }
                | LockName::Slave { .. }
                | LockName::Break { .. }
                | LockName::Tmp { .. }
        )
    }
}

impl LockName {
    /// The name as text, without an allocation, and ending in a NUL: the system calls
    /// of an acquisition name their file with it ([`NameText::as_cstr`]), as is.
    pub(crate) fn text(&self) -> NameText {
        let mut t = NameText {
            buf: [0; NAME_MAX_LEN + 1],
            len: 0,
        };
        match *self {
            LockName::Master => t.push(MASTER.as_bytes()),
            LockName::Pending { ns, uuid } => {
                t.push(PENDING.as_bytes());
                t.push_uuid(uuid);
                t.push(b"-");
                t.push(decimal(ns, &mut [0; 20]));
            }
            LockName::Slave { uuid } => {
                t.push(SLAVE.as_bytes());
                t.push_uuid(uuid);
            }
            LockName::Break { ns, uuid } => {
                t.push(BREAK.as_bytes());
                t.push(decimal(ns, &mut [0; 20]));
                t.push(b"-");
                t.push_uuid(uuid);
            }
            LockName::Tmp { uuid } => {
                t.push(TMP.as_bytes());
                t.push_uuid(uuid);
            }
            LockName::Token(n) => {
                t.push(TOKEN.as_bytes());
                t.push(decimal(n, &mut [0; 20]));
            }
        }
        t
    }
}

/// `n` in decimal, as `{n}` writes it, in `buf`: two digits per division.
pub(crate) fn decimal(mut n: u64, buf: &mut [u8; 20]) -> &[u8] {
    const PAIRS: &[u8; 200] = b"0001020304050607080910111213141516171819\
        2021222324252627282930313233343536373839\
        4041424344454647484950515253545556575859\
        6061626364656667686970717273747576777879\
        8081828384858687888990919293949596979899";
    let mut at = buf.len();
    while n >= 10 {
        // Below 100: an index of a pair.
        let pair = (n % 100) as usize * 2;
        n /= 100;
        at -= 2;
        buf[at] = PAIRS[pair];
        buf[at + 1] = PAIRS[pair + 1];
        if n == 0 {
            // `n` had an even number of digits.
            return &buf[at..];
        }
    }
    at -= 1;
    // Below 10.
    buf[at] = b'0' + n as u8;
    &buf[at..]
}

/// The longest name: `.pending_lock-` (14), a uuid (36), `-` and a `u64` (20).
const NAME_MAX_LEN: usize = 71;

/// A [`LockName`] as text, on the stack ([`LockName::text`]), followed by a NUL.
#[derive(Clone, Copy)]
pub(crate) struct NameText {
    /// The name, then zeros: `len` is at most `NAME_MAX_LEN`, so a NUL follows it.
    buf: [u8; NAME_MAX_LEN + 1],
    len: usize,
}

impl NameText {
    /// The name.
    pub(crate) fn as_str(&self) -> &str {
        // Only ASCII is ever written into `buf` (`LockName::text`), so the bytes up to
        // `len` are UTF-8; should that ever not hold, the name reads as empty, which no
        // system call accepts, rather than as something else.
        std::str::from_utf8(&self.buf[..self.len]).unwrap_or_default()
    }

    /// The name with its NUL, as system calls take it (nix passes a `&CStr` on as is,
    /// where it copies a `&str` to add the NUL). Empty, as [`NameText::as_str`], should
    /// the name ever hold a NUL of its own (it cannot).
    pub(crate) fn as_cstr(&self) -> &std::ffi::CStr {
        std::ffi::CStr::from_bytes_with_nul(&self.buf[..=self.len]).unwrap_or_default()
    }

    /// Appends `bytes`. Every name fits (`NAME_MAX_LEN`, checked by the tests at the
    /// longest of each kind); anything that would not is left out.
    fn push(&mut self, bytes: &[u8]) {
        let end = self.len + bytes.len();
        // `end` within `NAME_MAX_LEN`: the last byte of `buf` stays a NUL.
        if let Some(dst) = self.buf[..NAME_MAX_LEN].get_mut(self.len..end) {
            dst.copy_from_slice(bytes);
            self.len = end;
        }
    }

    fn push_uuid(&mut self, uuid: Uuid) {
        let mut text = Uuid::encode_buffer();
        self.push(uuid.hyphenated().encode_lower(&mut text).as_bytes());
    }
}

impl std::ops::Deref for NameText {
    type Target = str;
    fn deref(&self) -> &str {
        self.as_str()
    }
}

impl std::fmt::Display for LockName {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.text())
    }
}

/// Canonical decimal: digits only, no leading zero unless the number is 0.
pub(crate) fn parse_u64(s: &str) -> Option<u64> {
    parse_u64_ascii(s.as_bytes())
}

/// [`parse_u64`] of bytes.
fn parse_u64_ascii(s: &[u8]) -> Option<u64> {
    if s.is_empty() || (s.len() > 1 && s[0] == b'0') {
        return None;
    }
    s.iter().try_fold(0u64, |n, &b| {
        let digit = b.checked_sub(b'0').filter(|&d| d < 10)?;
        n.checked_mul(10)?.checked_add(u64::from(digit))
    })
}

/// Lower-case hyphenated uuid only, the only text that `{}` of a `Hyphenated` writes.
pub(crate) fn parse_uuid(s: &str) -> Option<Uuid> {
    parse_uuid_ascii(s.as_bytes())
}

/// [`parse_uuid`] of bytes: 36 bytes, hyphens after the 8th, 12th, 16th and 20th digit,
/// the digits `0-9a-f`. Checked and decoded in one pass over a table: every listing
/// parses the uuid of every lock file, so under contention this is a share of each
/// grant (docs/notes/contention.md §23).
fn parse_uuid_ascii(s: &[u8]) -> Option<Uuid> {
    /// Where each byte's two digits start.
    const AT: [usize; 16] = [0, 2, 4, 6, 9, 11, 14, 16, 19, 21, 24, 26, 28, 30, 32, 34];
    let s: &[u8; 36] = s.try_into().ok()?;
    if s[8] != b'-' || s[13] != b'-' || s[18] != b'-' || s[23] != b'-' {
        return None;
    }
    let mut bytes = [0u8; 16];
    // Any byte that is not a digit has a bit of 0xf0 set in its table entry.
    let mut not_digits = 0u8;
    for (byte, at) in bytes.iter_mut().zip(AT) {
        let (hi, lo) = (HEX[usize::from(s[at])], HEX[usize::from(s[at + 1])]);
        not_digits |= hi | lo;
        *byte = hi << 4 | lo;
    }
    (not_digits & 0xf0 == 0).then_some(Uuid::from_bytes(bytes))
}

/// The value of each lower-case hexadecimal digit; 0xff for every other byte.
const HEX: [u8; 256] = {
    let mut table = [0xff; 256];
    let mut d = 0;
    while d < 10 {
        table[b'0' as usize + d] = d as u8;
        d += 1;
    }
    let mut d = 0;
    while d < 6 {
        table[b'a' as usize + d] = 10 + d as u8;
        d += 1;
    }
    table
};

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_text_of_every_kind_of_name_is_its_display_even_at_its_longest() {
        let uuid = Uuid::from_u128(u128::MAX);
        for name in [
            LockName::Master,
            LockName::Pending { ns: u64::MAX, uuid },
            LockName::Slave { uuid },
            LockName::Break { ns: u64::MAX, uuid },
            LockName::Tmp { uuid },
            LockName::Token(u64::MAX),
            LockName::Token(0),
        ] {
            assert_eq!(name.text().as_str(), reference(&name));
            assert_eq!(name.to_string(), reference(&name));
            let with_nul = name.text().as_cstr().to_bytes_with_nul().to_vec();
            assert_eq!(with_nul, format!("{}\0", reference(&name)).into_bytes());
        }
    }

    /// The names as `Display` wrote them before `LockName::text` wrote them itself.
    fn reference(name: &LockName) -> String {
        match name {
            LockName::Master => MASTER.to_string(),
            LockName::Pending { ns, uuid } => format!("{PENDING}{}-{ns}", uuid.hyphenated()),
            LockName::Slave { uuid } => format!("{SLAVE}{}", uuid.hyphenated()),
            LockName::Break { ns, uuid } => format!("{BREAK}{ns}-{}", uuid.hyphenated()),
            LockName::Tmp { uuid } => format!("{TMP}{}", uuid.hyphenated()),
            LockName::Token(n) => format!("{TOKEN}{n}"),
        }
    }

    #[test]
    fn names_of_every_kind_are_written_as_display_wrote_them() {
        let uuids = [
            Uuid::nil(),
            Uuid::from_u128(0x0123_4567_89ab_cdef_fedc_ba98_7654_3210),
        ];
        for uuid in uuids {
            for ns in [0, 1, 9, 10, 1_700_000_000_123_456_789, u64::MAX] {
                for name in [
                    LockName::Pending { ns, uuid },
                    LockName::Slave { uuid },
                    LockName::Break { ns, uuid },
                    LockName::Tmp { uuid },
                    LockName::Token(ns),
                ] {
                    assert_eq!(name.text().as_str(), reference(&name));
                    assert_eq!(LockName::parse(name.text().as_bytes()), Some(name));
                }
            }
        }
    }

    #[test]
    fn a_name_parses_only_in_canonical_form_and_foreign_names_are_none() {
        assert_eq!(LockName::parse(b".master_lock"), Some(LockName::Master));
        assert_eq!(LockName::parse(b"notes.txt"), None); // foreign: never touched
    }

    #[test]
    fn parse_round_trips_canonical_names() {
        let name = ".pending_lock-0b6f1a52-9f8e-4d3c-8a71-2c5e4f6a7b8c-1764523200123456789";
        let parsed = LockName::parse(name.as_bytes()).expect("a queued writer");
        assert_eq!(parsed.to_string(), name); // canonical
        assert_eq!(LockName::parse(b".token-007"), None); // not canonical
    }

    #[test]
    fn order_keys_sort_by_ns_then_uuid() {
        let a = LockName::parse(b".pending_lock-00000000-0000-4000-8000-000000000002-5")
            .expect("a name");
        let b = LockName::parse(b".pending_lock-00000000-0000-4000-8000-000000000001-6")
            .expect("a name");
        assert!(a.order_key() < b.order_key()); // ns first, then uuid
        assert_eq!(LockName::Master.order_key(), None);
    }

    #[test]
    fn only_master_and_tokens_are_reused_names() {
        assert!(!LockName::Master.is_unique()); // the one reused name
        assert!(
            LockName::parse(b".slave_lock-00000000-0000-4000-8000-000000000001")
                .unwrap()
                .is_unique()
        );
    }

    #[test]
    fn round_trip() {
        let uuid = Uuid::new_v4();
        for n in [
            LockName::Master,
            LockName::Pending { ns: 17, uuid },
            LockName::Slave { uuid },
            LockName::Break { ns: 0, uuid },
            LockName::Tmp { uuid },
            LockName::Token(u64::MAX),
        ] {
            assert_eq!(LockName::parse(n.to_string().as_bytes()), Some(n));
        }
    }

    #[test]
    fn rejects_near_misses() {
        let u = "0a1b2c3d-0000-4000-8000-000000000001";
        for bad in [
            ".master_lock2".to_string(),
            ".master_lock ".to_string(),
            format!(".pending_lock-{u}-"),
            format!(".pending_lock-{u}-01"),
            format!(".pending_lock-{u}-+1"),
            format!(".pending_lock-{u}1"),
            format!(".slave_lock-{}", u.to_uppercase()),
            format!(".slave_lock-{}", u.replace('-', "")),
            format!(".slave_lock-{}", u.replacen('a', "A", 1)),
            ".slave_lock-0a1b2c3d0-000-4000-8000-000000000001".to_string(),
            ".slave_lock-0a1b2c3d-0000-4000-8000-00000000000g".to_string(),
            format!(".slave_lock-{{{}}}", &u[1..35]),
            format!(".slave_lock-{u}.bak"),
            ".token-".to_string(),
            ".token-007".to_string(),
            ".token-99999999999999999999999".to_string(),
            ".nfs000001".to_string(),
            "master_lock".to_string(),
        ] {
            assert_eq!(LockName::parse(bad.as_bytes()), None, "{bad}");
        }
        assert!(LockName::parse(b"\xff\xfe").is_none());
    }

    /// The one-pass uuid parser takes what the uuid crate's parser took from 36 lower-case
    /// bytes, and nothing else: every uuid of a sample, and every one-byte change of them.
    #[test]
    fn the_uuid_parser_agrees_with_the_uuid_crate() {
        let reference = |s: &[u8]| {
            if s.len() != 36 || s.iter().any(u8::is_ascii_uppercase) {
                return None;
            }
            Uuid::try_parse_ascii(s).ok()
        };
        let mut checked = 0;
        for n in [0, 1, u128::MAX, 0x0123_4567_89ab_cdef_fedc_ba98_7654_3210]
            .into_iter()
            .chain((0..200).map(|_| Uuid::new_v4().as_u128()))
        {
            let text = Uuid::from_u128(n).hyphenated().to_string();
            assert_eq!(parse_uuid_ascii(text.as_bytes()), Some(Uuid::from_u128(n)));
            for at in 0..text.len() {
                for b in [
                    b'0', b'9', b'a', b'f', b'g', b'A', b'F', b'-', b'{', b' ', 0, 0xff,
                ] {
                    let mut t = text.clone().into_bytes();
                    t[at] = b;
                    assert_eq!(parse_uuid_ascii(&t), reference(&t), "{t:?}");
                    checked += 1;
                }
            }
            for len in [0, 35, 37] {
                let t: Vec<u8> = text.bytes().cycle().take(len).collect();
                assert_eq!(parse_uuid_ascii(&t), None);
                assert_eq!(reference(&t), None);
            }
        }
        assert!(checked > 80_000);
    }

    #[test]
    fn queue_order_is_ns_then_uuid() {
        let a = Uuid::from_u128(2);
        let b = Uuid::from_u128(1);
        let p1 = LockName::Pending { ns: 1, uuid: a };
        let p2 = LockName::Pending { ns: 2, uuid: b };
        let p3 = LockName::Pending { ns: 2, uuid: a };
        assert!(p1.order_key() < p2.order_key());
        assert!(p2.order_key() < p3.order_key());
    }
}
