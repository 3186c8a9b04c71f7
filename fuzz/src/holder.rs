//! Target `holder_parse`: holder records. `Holder::parse` never panics on any bytes and
//! accepts only canonical records; `format` round-trips a holder built from any fields.

use arbitrary::Arbitrary;
use rwdir::internals::{MAX_RECORD, sanitize};
use rwdir::{Holder, Kind};
use uuid::Uuid;

/// The kinds a record's `kind` field indexes (modulo 5).
pub(crate) const KINDS: [Kind; 5] = [
    Kind::Read,
    Kind::Write,
    Kind::Pending,
    Kind::Break,
    Kind::Token,
];

/// Target `holder_parse`: [`holder_parse`] on the raw bytes, then, if the same bytes
/// decoded as one, [`holder_fields`] on a structured record.
pub fn holder_target(data: &[u8], fields: Option<&HolderFields>) {
    holder_parse(data);
    if let Some(f) = fields {
        holder_fields(f);
    }
}

/// Arbitrary bytes: [`Holder::parse`] never panics, and a record it accepts is canonical:
/// `format()` gives back exactly the input, which parses to the same holder.
pub fn holder_parse(data: &[u8]) {
    let Some(h) = Holder::parse(data) else { return };
    let text = h.format();
    assert!(
        text.as_bytes() == data,
        "a non-canonical record parsed:\n{:?}\nformats as\n{text:?}",
        String::from_utf8_lossy(data)
    );
    assert_eq!(
        Holder::parse(text.as_bytes()).as_ref(),
        Some(&h),
        "format then parse changed the record"
    );
}

/// Every field of a holder record, with any value (`Holder` is `#[non_exhaustive]`, so
/// it is built by setting each field of `Holder::default()`, which the library's
/// `fuzzing` feature provides).
#[derive(Debug, Clone, Default, PartialEq, Eq, Arbitrary)]
pub struct HolderFields {
    /// Index into the kinds (read, write, pending, break, token), modulo 5.
    pub kind: u8,
    /// Host name, any string (the format sanitizes it).
    pub host: String,
    /// Boot id, any string (the format sanitizes it).
    pub boot_id: String,
    /// Pid namespace inode.
    pub pidns: u64,
    /// Process id.
    pub pid: u32,
    /// Process start time.
    pub start: u64,
    /// Process group.
    pub pgid: u32,
    /// The nonce, as the uuid's 128 bits.
    pub nonce: u128,
    /// Creation time in nanoseconds.
    pub since_ns: u64,
    /// Lease in milliseconds.
    pub lease_ms: u64,
}

impl HolderFields {
    /// The holder these fields describe (host and boot id as given, unsanitized).
    pub fn to_holder(&self) -> Holder {
        let mut h = Holder::default();
        h.kind = KINDS[usize::from(self.kind) % KINDS.len()];
        h.host = self.host.clone();
        h.boot_id = self.boot_id.clone();
        h.pidns = self.pidns;
        h.pid = self.pid;
        h.start = self.start;
        h.pgid = self.pgid;
        h.nonce = Uuid::from_u128(self.nonce);
        h.since_ns = self.since_ns;
        h.lease_ms = self.lease_ms;
        h
    }
}

/// A structured holder: `format()` fits in a record, parses back to the holder with its
/// host and boot id sanitized, and sanitizing is idempotent; a cut or grown record never
/// parses.
pub fn holder_fields(fields: &HolderFields) {
    let h = fields.to_holder();
    let text = h.format();
    assert!(text.len() <= MAX_RECORD, "record too long: {}", text.len());
    let mut want = h.clone();
    want.host = sanitize(&h.host);
    want.boot_id = sanitize(&h.boot_id);
    assert_eq!(
        Holder::parse(text.as_bytes()),
        Some(want.clone()),
        "{text:?}"
    );
    assert_eq!(
        want.format(),
        text,
        "formatting a sanitized holder changed it"
    );
    let bytes = text.as_bytes();
    #[allow(clippy::cast_possible_truncation)]
    let cut = (fields.nonce as usize) % bytes.len();
    assert_eq!(Holder::parse(&bytes[..cut]), None, "cut at {cut} parsed");
    let mut grown = bytes.to_vec();
    grown.insert(cut, b'\n');
    assert_eq!(Holder::parse(&grown), None, "a newline at {cut} parsed");
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn holder_seeds() {
        let f = HolderFields {
            kind: 1,
            host: "h ost\u{e9}".into(),
            boot_id: "b".into(),
            pid: 42,
            nonce: 3,
            ..HolderFields::default()
        };
        holder_target(f.to_holder().format().as_bytes(), Some(&f));
        holder_target(b"rwdir-holder 1\nend 0000000000000000\n", None);
    }
}
