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
    /// Parses a directory entry's name. Foreign names give `None`.
    ///
    /// Parsing is strict: uuids must be in lower-case hyphenated form and numbers in
    /// canonical decimal, so that `parse(format(x)) == x` and every lock file has exactly
    /// one name.
    pub fn parse(name: &[u8]) -> Option<LockName> {
        let name = std::str::from_utf8(name).ok()?;
        if name == MASTER {
            return Some(LockName::Master);
        }
        if let Some(rest) = name.strip_prefix(PENDING) {
            let (uuid, ns) = split_at_checked(rest, 36)?;
            let ns = ns.strip_prefix('-')?;
            return Some(LockName::Pending {
                ns: parse_u64(ns)?,
                uuid: parse_uuid(uuid)?,
            });
        }
        if let Some(rest) = name.strip_prefix(SLAVE) {
            return Some(LockName::Slave {
                uuid: parse_uuid(rest)?,
            });
        }
        if let Some(rest) = name.strip_prefix(BREAK) {
            let (ns, uuid) = rest.split_once('-')?;
            return Some(LockName::Break {
                ns: parse_u64(ns)?,
                uuid: parse_uuid(uuid)?,
            });
        }
        if let Some(rest) = name.strip_prefix(TMP) {
            return Some(LockName::Tmp {
                uuid: parse_uuid(rest)?,
            });
        }
        if let Some(rest) = name.strip_prefix(TOKEN) {
            return Some(LockName::Token(parse_u64(rest)?));
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
    /// The name as text, without an allocation: the system calls of an acquisition
    /// name their file with it.
    pub(crate) fn text(&self) -> NameText {
        let mut t = NameText {
            buf: [0; NAME_MAX_LEN],
            len: 0,
        };
        // Every name fits (`NAME_MAX_LEN`), so writing cannot fail.
        let _ = std::fmt::Write::write_fmt(&mut t, format_args!("{self}"));
        t
    }
}

/// The longest name: `.pending_lock-` (14), a uuid (36), `-` and a `u64` (20).
const NAME_MAX_LEN: usize = 71;

/// A [`LockName`] as text, on the stack ([`LockName::text`]).
#[derive(Clone, Copy)]
pub(crate) struct NameText {
    buf: [u8; NAME_MAX_LEN],
    len: usize,
}

impl NameText {
    /// The name.
    pub(crate) fn as_str(&self) -> &str {
        // Only whole `&str`s are ever written into `buf` (`write_str`), so the bytes up to
        // `len` are UTF-8; should that ever not hold, the name reads as empty, which no
        // system call accepts, rather than as something else.
        std::str::from_utf8(&self.buf[..self.len]).unwrap_or_default()
    }
}

impl std::ops::Deref for NameText {
    type Target = str;
    fn deref(&self) -> &str {
        self.as_str()
    }
}

impl std::fmt::Write for NameText {
    fn write_str(&mut self, s: &str) -> std::fmt::Result {
        let end = self.len + s.len();
        let dst = self.buf.get_mut(self.len..end).ok_or(std::fmt::Error)?;
        dst.copy_from_slice(s.as_bytes());
        self.len = end;
        Ok(())
    }
}

impl std::fmt::Display for LockName {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            LockName::Master => f.write_str(MASTER),
            LockName::Pending { ns, uuid } => write!(f, "{PENDING}{}-{ns}", uuid.hyphenated()),
            LockName::Slave { uuid } => write!(f, "{SLAVE}{}", uuid.hyphenated()),
            LockName::Break { ns, uuid } => write!(f, "{BREAK}{ns}-{}", uuid.hyphenated()),
            LockName::Tmp { uuid } => write!(f, "{TMP}{}", uuid.hyphenated()),
            LockName::Token(n) => write!(f, "{TOKEN}{n}"),
        }
    }
}

fn split_at_checked(s: &str, mid: usize) -> Option<(&str, &str)> {
    if s.is_char_boundary(mid) && mid <= s.len() {
        Some(s.split_at(mid))
    } else {
        None
    }
}

/// Canonical decimal: digits only, no leading zero unless the number is 0.
pub(crate) fn parse_u64(s: &str) -> Option<u64> {
    if s.is_empty() || !s.bytes().all(|b| b.is_ascii_digit()) || (s.len() > 1 && s.starts_with('0'))
    {
        return None;
    }
    s.parse().ok()
}

/// Lower-case hyphenated uuid only.
pub(crate) fn parse_uuid(s: &str) -> Option<Uuid> {
    if s.len() != 36 {
        return None;
    }
    let u = Uuid::try_parse(s).ok()?;
    let mut canonical = [0; 36];
    (u.hyphenated().encode_lower(&mut canonical) == s).then_some(u)
}

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
            assert_eq!(name.text().as_str(), name.to_string());
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
