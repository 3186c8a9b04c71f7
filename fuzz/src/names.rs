//! Target `lock_name_parse`: lock-file names. `LockName::parse` never panics and accepts
//! only canonical names; the queue order is `(ns, uuid)`; `Listing::from_names` keeps
//! every name, in order.

use arbitrary::Arbitrary;
use rwdir::internals::{Listing, LockName};
use uuid::Uuid;

/// A lock name built from its fields (uuids as 128-bit numbers).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Arbitrary)]
pub enum NameFields {
    /// `.master_lock`.
    Master,
    /// `.pending_lock-<uuid>-<ns>`.
    Pending {
        /// Queue time.
        ns: u64,
        /// Uuid bits.
        uuid: u128,
    },
    /// `.slave_lock-<uuid>`.
    Slave {
        /// Uuid bits.
        uuid: u128,
    },
    /// `.break-<ns>-<uuid>`.
    Break {
        /// Queue time.
        ns: u64,
        /// Uuid bits.
        uuid: u128,
    },
    /// `.tmp-<uuid>`.
    Tmp {
        /// Uuid bits.
        uuid: u128,
    },
    /// `.token-<n>`.
    Token(u64),
}

impl NameFields {
    /// The lock file's name, as it stands in the state directory.
    pub fn file_name(self) -> String {
        self.to_name().to_string()
    }

    /// The lock name itself.
    pub(crate) fn to_name(self) -> LockName {
        let u = Uuid::from_u128;
        match self {
            NameFields::Master => LockName::Master,
            NameFields::Pending { ns, uuid } => LockName::Pending { ns, uuid: u(uuid) },
            NameFields::Slave { uuid } => LockName::Slave { uuid: u(uuid) },
            NameFields::Break { ns, uuid } => LockName::Break { ns, uuid: u(uuid) },
            NameFields::Tmp { uuid } => LockName::Tmp { uuid: u(uuid) },
            NameFields::Token(n) => LockName::Token(n),
        }
    }
}

/// Target `lock_name_parse`: `lock_name_parse` on the whole input and on each of its
/// `/`-separated parts (a `/` never occurs in a file name), then `lock_name_order` on
/// the names parsed and the names `built` from fields.
pub fn lock_name_target(data: &[u8], built: &[NameFields]) {
    lock_name_parse(data);
    let mut names: Vec<LockName> = data
        .split(|&b| b == b'/')
        .filter_map(lock_name_parse)
        .collect();
    names.extend(built.iter().map(|f| f.to_name()));
    lock_name_order(&names);
}

/// Arbitrary bytes: [`LockName::parse`] never panics, and a name it accepts is
/// canonical: formatting gives back exactly the input, which parses to the same name.
fn lock_name_parse(data: &[u8]) -> Option<LockName> {
    let n = LockName::parse(data)?;
    let s = n.to_string();
    assert!(
        s.as_bytes() == data,
        "a non-canonical name parsed: {:?} formats as {s:?}",
        String::from_utf8_lossy(data)
    );
    assert_eq!(LockName::parse(s.as_bytes()), Some(n));
    let queued = matches!(n, LockName::Pending { .. } | LockName::Break { .. });
    assert_eq!(n.order_key().is_some(), queued, "{n:?}");
    let unique = !matches!(n, LockName::Master | LockName::Token(_));
    assert_eq!(n.is_unique(), unique, "{n:?}");
    Some(n)
}

/// Any names: each round-trips through its text, `order_key` is a total order equal to
/// `(ns, uuid)` compared as numbers, and `Listing::from_names` keeps every name, in
/// queue order.
fn lock_name_order(names: &[LockName]) {
    for n in names {
        assert_eq!(LockName::parse(n.to_string().as_bytes()), Some(*n), "{n:?}");
    }
    // The order the protocol specifies, computed independently of `order_key`.
    let key = |n: &LockName| match *n {
        LockName::Pending { ns, uuid } | LockName::Break { ns, uuid } => Some((ns, uuid.as_u128())),
        _ => None,
    };
    for a in names {
        for b in names {
            assert_eq!(
                a.order_key().cmp(&b.order_key()),
                key(a).cmp(&key(b)),
                "{a:?} vs {b:?}"
            );
        }
    }
    let l = Listing::from_names(names.iter().copied());
    let count = |f: fn(&LockName) -> bool| names.iter().filter(|n| f(n)).count();
    assert_eq!(l.master, names.contains(&LockName::Master));
    assert_eq!(
        l.pending.len(),
        count(|n| matches!(n, LockName::Pending { .. }))
    );
    assert_eq!(
        l.slaves.len(),
        count(|n| matches!(n, LockName::Slave { .. }))
    );
    assert_eq!(
        l.breaks.len(),
        count(|n| matches!(n, LockName::Break { .. }))
    );
    assert_eq!(l.tmps.len(), count(|n| matches!(n, LockName::Tmp { .. })));
    assert_eq!(l.tokens.len(), count(|n| matches!(n, LockName::Token(_))));
    for queue in [&l.pending, &l.breaks] {
        for w in queue.windows(2) {
            assert!(key(&w[0]) <= key(&w[1]), "out of order: {w:?}");
        }
    }
    assert!(l.tokens.windows(2).all(|w| w[0] <= w[1]), "{:?}", l.tokens);
    for n in names {
        assert!(l.has(n), "{n:?} missing from the listing");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const U: u128 = 0x0a1b_2c3d_0000_4000_8000_0000_0000_0001;

    #[test]
    fn lock_name_seeds() {
        let all = [
            NameFields::Master,
            NameFields::Pending { ns: 5, uuid: U },
            NameFields::Pending { ns: 5, uuid: U + 1 },
            NameFields::Slave { uuid: U },
            NameFields::Break {
                ns: 0,
                uuid: u128::MAX,
            },
            NameFields::Tmp { uuid: 0 },
            NameFields::Token(u64::MAX),
        ];
        let text: Vec<String> = all.iter().map(|f| f.to_name().to_string()).collect();
        lock_name_target(text.join("/").as_bytes(), &all);
        lock_name_target(b".token-007/.master_lock/\xff", &[]);
    }
}
