//! Holder records: who created a lock file. A strict, versioned, self-validating text
//! format, written once when the file is created and never rewritten.

use std::fmt::Write as _;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use uuid::Uuid;

use crate::names::{decimal, parse_u64, parse_uuid};

/// The first line of every record; the number is the format version.
const MAGIC: &str = "rwdir-holder 1";
/// Records are never larger than this; a larger file is malformed and is read only up to
/// this size. `pub` for the fuzz harness (`rwdir::internals`, `fuzzing` feature).
#[cfg_attr(not(feature = "fuzzing"), allow(unreachable_pub))]
pub const MAX_RECORD: usize = 4096;

/// What a lock file stands for.
///
/// # Examples
///
/// ```
/// let dir = tempfile::tempdir()?;
/// let lock = rwdir::DirLock::new(dir.path())?;
/// let _w = lock.write()?;
/// assert_eq!(lock.status()?.writer.map(|e| e.kind), Some(rwdir::Kind::Write));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
// `Default` (with the `fuzzing` feature) lets the fuzz harness build a `Holder`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "fuzzing", derive(Default))]
#[non_exhaustive]
pub enum Kind {
    /// A reader (`.slave_lock-*`).
    #[cfg_attr(feature = "fuzzing", default)]
    Read,
    /// The writer (`.master_lock`).
    Write,
    /// A queued writer (`.pending_lock-*`).
    Pending,
    /// A breaker of a stale `.master_lock` (`.break-*`).
    Break,
    /// A fencing-token file (`.token-*`).
    Token,
    /// A file being created (`.tmp-*`), before it gets its name; `status` lists it
    /// under `other`, and `cleanup` removes it once its owner is dead.
    Temporary,
}

impl Kind {
    /// The word used in records and in `status`.
    ///
    /// # Examples
    ///
    /// ```
    /// assert_eq!(rwdir::Kind::Read.as_str(), "read");
    /// assert_eq!(rwdir::Kind::Pending.to_string(), "pending");
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn as_str(self) -> &'static str {
        match self {
            Kind::Read => "read",
            Kind::Write => "write",
            Kind::Pending => "pending",
            Kind::Break => "break",
            Kind::Token => "token",
            Kind::Temporary => "tmp",
        }
    }

    fn parse(s: &str) -> Option<Kind> {
        Some(match s {
            "read" => Kind::Read,
            "write" => Kind::Write,
            "pending" => Kind::Pending,
            "break" => Kind::Break,
            "token" => Kind::Token,
            "tmp" => Kind::Temporary,
            _ => return None,
        })
    }
}

impl std::fmt::Display for Kind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The identity of the process that created a lock file, as stored in the file.
///
/// # Examples
///
/// ```
/// let dir = tempfile::tempdir()?;
/// let lock = rwdir::DirLock::new(dir.path())?;
/// let _r = lock.read()?;
/// let st = lock.status()?;
/// let h = st.readers[0].holder.as_ref().expect("a well-formed record");
/// assert_eq!((h.kind, h.pid), (rwdir::Kind::Read, std::process::id()));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
// `Default` (with the `fuzzing` feature) lets the fuzz harness, outside this crate, build
// a holder from any fields: it sets each field of `Holder::default()`.
#[derive(Debug, Clone, PartialEq, Eq)]
#[cfg_attr(feature = "fuzzing", derive(Default))]
#[non_exhaustive]
pub struct Holder {
    /// What the file stands for.
    pub kind: Kind,
    /// Host name (printable ASCII; other bytes are replaced by `?`).
    pub host: String,
    /// `/proc/sys/kernel/random/boot_id` of the host, or empty if unknown.
    pub boot_id: String,
    /// Inode number of the creator's pid namespace (`/proc/self/ns/pid`), 0 if unknown.
    pub pidns: u64,
    /// Process id in that namespace.
    pub pid: u32,
    /// Process start time in clock ticks since boot (field 22 of `/proc/PID/stat`).
    pub start: u64,
    /// A process group that also counts as the holder while any member lives (the
    /// command run by `rwdir read|write`), 0 if none.
    pub pgid: u32,
    /// A fresh uuid for each file: ownership is decided by comparing nonces.
    pub nonce: Uuid,
    /// When the record was written, in nanoseconds since the Unix epoch: when the file
    /// was created, or, for a file that a waiter prepared while it waited, at most 20 ms
    /// before (the hand-off then only gives the file its name).
    pub since_ns: u64,
    /// How long the file counts as held without a heartbeat, when its owner cannot be
    /// checked directly (another host or pid namespace), in milliseconds.
    pub lease_ms: u64,
}

impl Holder {
    /// Whether the record names the calling process (same host, boot, pid namespace,
    /// pid and start time).
    pub(crate) fn is_this_process(&self) -> bool {
        let me = crate::sys::identity();
        self.pid == me.pid
            && self.start == me.start
            && self.pidns == me.pidns
            && self.boot_id == me.boot_id
            && self.host == me.host
    }

    /// When the record was written (see [`Holder::since_ns`]).
    pub fn since(&self) -> SystemTime {
        UNIX_EPOCH + Duration::from_nanos(self.since_ns)
    }

    /// The lease the creator asked for.
    pub fn lease(&self) -> Duration {
        Duration::from_millis(self.lease_ms)
    }

    /// Serialises the record. The last line is a checksum of everything before it, so a
    /// record cut short (or grown) never parses. The on-disk format is not part of the
    /// API (see the crate docs' stability promise): for rwdir's own tests and fuzzing.
    #[doc(hidden)]
    pub fn format(&self) -> String {
        // Every byte of a record is printable ASCII or a newline.
        self.record()
            .with_text(|text| String::from_utf8_lossy(text).into_owned())
    }

    /// The record's fields, the host and boot id borrowed.
    pub(crate) fn record(&self) -> Record<'_> {
        Record {
            kind: self.kind,
            host: &self.host,
            boot_id: &self.boot_id,
            pidns: self.pidns,
            pid: self.pid,
            start: self.start,
            pgid: self.pgid,
            nonce: self.nonce,
            since_ns: self.since_ns,
            lease_ms: self.lease_ms,
        }
    }

    /// Parses a record. Anything but a complete, well-formed record of a known version
    /// gives `None`: such a file is *malformed* and counts as held until its lease ends.
    /// Not part of the API, as [`Holder::format`].
    #[doc(hidden)]
    pub fn parse(bytes: &[u8]) -> Option<Holder> {
        if bytes.len() > MAX_RECORD {
            return None;
        }
        let text = std::str::from_utf8(bytes).ok()?;
        let body_end = text.rfind("end ")?;
        let (body, end) = text.split_at(body_end);
        let sum = end.strip_prefix("end ")?.strip_suffix('\n')?;
        if sum.len() != 16
            || !sum.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
            || u64::from_str_radix(sum, 16).ok()? != fnv1a64(body.as_bytes())
        {
            return None;
        }
        let mut lines = body.strip_suffix('\n')?.split('\n');
        if lines.next()? != MAGIC {
            return None;
        }
        let mut field = |key: &str| -> Option<&str> {
            let line = lines.next()?;
            let v = line.strip_prefix(key)?.strip_prefix(' ')?;
            (!v.contains(' ')).then_some(v)
        };
        let kind = Kind::parse(field("kind")?)?;
        let host = field("host")?.to_string();
        let boot_id = field("boot_id")?.to_string();
        let pidns = parse_u64(field("pidns")?)?;
        let pid = u32::try_from(parse_u64(field("pid")?)?).ok()?;
        let start = parse_u64(field("start")?)?;
        let pgid = u32::try_from(parse_u64(field("pgid")?)?).ok()?;
        let nonce = parse_uuid(field("nonce")?)?;
        let since_ns = parse_u64(field("since_ns")?)?;
        let lease_ms = parse_u64(field("lease_ms")?)?;
        if lines.next().is_some() || !is_sanitized(&host) || !is_sanitized(&boot_id) {
            return None;
        }
        Some(Holder {
            kind,
            host,
            boot_id,
            pidns,
            pid,
            start,
            pgid,
            nonce,
            since_ns,
            lease_ms,
        })
    }
}

/// A record about to be written: [`Holder`]'s fields, with the host and boot id borrowed
/// from the process's identity rather than copied into every record (an acquisition
/// makes one and drops it once the file exists).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Record<'a> {
    pub(crate) kind: Kind,
    pub(crate) host: &'a str,
    pub(crate) boot_id: &'a str,
    pub(crate) pidns: u64,
    pub(crate) pid: u32,
    pub(crate) start: u64,
    pub(crate) pgid: u32,
    pub(crate) nonce: Uuid,
    pub(crate) since_ns: u64,
    pub(crate) lease_ms: u64,
}

impl Record<'_> {
    /// The record as a [`Holder`] of its own.
    pub(crate) fn to_holder(self) -> Holder {
        Holder {
            kind: self.kind,
            host: self.host.to_string(),
            boot_id: self.boot_id.to_string(),
            pidns: self.pidns,
            pid: self.pid,
            start: self.start,
            pgid: self.pgid,
            nonce: self.nonce,
            since_ns: self.since_ns,
            lease_ms: self.lease_ms,
        }
    }

    /// Calls `f` with the record's text (see [`Holder::format`]), made on the stack.
    ///
    /// Every file a process makes has the same lines up to `pgid` for its kind: they and
    /// the checksum's state after them are made once per thread ([`Prefix`]), and only
    /// the last three fields are written and summed for each file.
    pub(crate) fn with_text<R>(&self, f: impl FnOnce(&[u8]) -> R) -> R {
        let mut t = RecordText::new();
        let made = PREFIXES.try_with(|kept| {
            let mut kept = kept.borrow_mut();
            let at = match kept.iter().position(|p| p.fits(self)) {
                Some(at) => at,
                None => {
                    if kept.len() == PREFIXES_KEPT {
                        kept.pop();
                    }
                    kept.insert(0, Prefix::of(self));
                    0
                }
            };
            t.push(kept[at].text.as_bytes());
            kept[at].sum
        });
        // This thread's locals are already destroyed (a record made by another
        // thread-local's destructor): the head is made for this record alone.
        let sum = made.unwrap_or_else(|_| {
            self.write_prefix(&mut t);
            fnv1a64_from(FNV_OFFSET, t.as_bytes())
        });
        let tail = t.len;
        t.push(b"nonce ");
        t.push(
            self.nonce
                .hyphenated()
                .encode_lower(&mut Uuid::encode_buffer())
                .as_bytes(),
        );
        t.push(b"\nsince_ns ");
        t.push(decimal(self.since_ns, &mut [0; 20]));
        t.push(b"\nlease_ms ");
        t.push(decimal(self.lease_ms, &mut [0; 20]));
        t.push(b"\n");
        let sum = fnv1a64_from(sum, t.as_bytes().get(tail..).unwrap_or_default());
        let mut hex = [0; 16];
        for (i, digit) in hex.iter_mut().enumerate() {
            *digit = HEX[((sum >> ((15 - i) * 4)) & 0xf) as usize];
        }
        t.push(b"end ");
        t.push(&hex);
        t.push(b"\n");
        f(t.as_bytes())
    }

    /// The record's lines up to `pgid`: those that [`Prefix`] keeps.
    fn write_prefix(&self, s: &mut impl std::fmt::Write) {
        // Neither a String nor a `RecordText` (which holds the longest record) fails.
        let _ = write!(
            s,
            "{MAGIC}\nkind {}\nhost {}\nboot_id {}\npidns {}\npid {}\nstart {}\npgid {}\n",
            self.kind,
            Sanitized(self.host),
            Sanitized(self.boot_id),
            self.pidns,
            self.pid,
            self.start,
            self.pgid,
        );
    }
}

/// Room for the longest record: every field at its longest (a host and a boot id of 255
/// bytes once sanitised, every number at its largest) takes 762 bytes.
const RECORD_TEXT_MAX: usize = 768;

/// A record's text, in a buffer on the stack: making a lock file's record allocates
/// nothing. Every record fits (`RECORD_TEXT_MAX`, checked by the tests at the longest
/// record).
struct RecordText {
    buf: [u8; RECORD_TEXT_MAX],
    len: usize,
}

impl RecordText {
    fn new() -> RecordText {
        RecordText {
            buf: [0; RECORD_TEXT_MAX],
            len: 0,
        }
    }

    /// The text.
    fn as_bytes(&self) -> &[u8] {
        self.buf.get(..self.len).unwrap_or_default()
    }

    /// Appends `bytes`; anything that would not fit is left out (the record would then
    /// not parse, and count as malformed: it cannot happen, see `RECORD_TEXT_MAX`).
    fn push(&mut self, bytes: &[u8]) {
        let end = self.len + bytes.len();
        if let Some(dst) = self.buf.get_mut(self.len..end) {
            dst.copy_from_slice(bytes);
            self.len = end;
        }
    }
}

impl std::fmt::Write for RecordText {
    fn write_str(&mut self, s: &str) -> std::fmt::Result {
        let before = self.len;
        self.push(s.as_bytes());
        if self.len == before && !s.is_empty() {
            return Err(std::fmt::Error);
        }
        Ok(())
    }
}

/// Printable ASCII without spaces, at most 255 bytes; anything else becomes `?`. `pub` for
/// the fuzz harness (`rwdir::internals`, `fuzzing` feature). The library itself writes
/// and checks this form without making the copy (`Sanitized`, `is_sanitized`); this
/// is their reference, compared with them by the tests and the fuzz target.
#[cfg(any(test, feature = "fuzzing"))]
#[cfg_attr(not(feature = "fuzzing"), allow(unreachable_pub))]
pub fn sanitize(s: &str) -> String {
    s.chars()
        .take(255)
        .map(|c| if c.is_ascii_graphic() { c } else { '?' })
        .collect()
}

/// Whether `sanitize(s) == s`, without making the copy: every byte printable ASCII (so
/// as many chars as bytes), at most 255 of them.
fn is_sanitized(s: &str) -> bool {
    s.len() <= 255 && s.bytes().all(|b| b.is_ascii_graphic())
}

/// [`sanitize`]'s text, written without making a `String` of it.
struct Sanitized<'a>(&'a str);

impl std::fmt::Display for Sanitized<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let s = self.0;
        // The usual case, host names and boot ids: nothing to replace.
        if is_sanitized(s) {
            return f.write_str(s);
        }
        for c in s.chars().take(255) {
            f.write_char(if c.is_ascii_graphic() { c } else { '?' })?;
        }
        Ok(())
    }
}

/// 64-bit FNV-1a. A checksum against torn and truncated records, not a defence against
/// forgery (anyone who can write the directory can delete lock files anyway).
fn fnv1a64(bytes: &[u8]) -> u64 {
    fnv1a64_from(FNV_OFFSET, bytes)
}

/// FNV-1a's starting state.
const FNV_OFFSET: u64 = 0xcbf2_9ce4_8422_2325;

/// FNV-1a continued from the state `h`: the sum of a text is the sum of its tail
/// continued from the state after its head.
fn fnv1a64_from(mut h: u64, bytes: &[u8]) -> u64 {
    for &b in bytes {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h
}

/// Lower-case hexadecimal digits, for the checksum line.
const HEX: &[u8; 16] = b"0123456789abcdef";

/// How many record heads a thread keeps: one per kind it makes (a reader's, a writer's,
/// a queued writer's...) for the pgid it uses, so a few.
const PREFIXES_KEPT: usize = 4;

thread_local! {
    /// The record heads this thread made last, the latest made first.
    static PREFIXES: std::cell::RefCell<Vec<Prefix>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// The lines of a record up to `pgid` (written by [`Record::write_prefix`]) and the
/// checksum's state after them, with the fields they were made from.
struct Prefix {
    kind: Kind,
    host: String,
    boot_id: String,
    pidns: u64,
    pid: u32,
    start: u64,
    pgid: u32,
    text: String,
    sum: u64,
}

impl Prefix {
    fn of(r: &Record<'_>) -> Prefix {
        let mut text = String::with_capacity(192);
        r.write_prefix(&mut text);
        Prefix {
            kind: r.kind,
            host: r.host.to_string(),
            boot_id: r.boot_id.to_string(),
            pidns: r.pidns,
            pid: r.pid,
            start: r.start,
            pgid: r.pgid,
            sum: fnv1a64(text.as_bytes()),
            text,
        }
    }

    /// Whether this head is the one `r`'s record starts with.
    fn fits(&self, r: &Record<'_>) -> bool {
        self.kind == r.kind
            && self.pid == r.pid
            && self.pgid == r.pgid
            && self.start == r.start
            && self.pidns == r.pidns
            && self.host == r.host
            && self.boot_id == r.boot_id
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Holder {
        Holder {
            kind: Kind::Write,
            host: "host-a".into(),
            boot_id: "5d1f3a4e-0000-4000-8000-000000000000".into(),
            pidns: 4026531836,
            pid: 4242,
            start: 123456,
            pgid: 0,
            nonce: Uuid::new_v4(),
            since_ns: 1_700_000_000_123_456_789,
            lease_ms: 45_000,
        }
    }

    #[test]
    fn round_trip() {
        let h = sample();
        assert_eq!(Holder::parse(h.format().as_bytes()), Some(h));
    }

    /// The record as it was written before the heads were kept: every line formatted
    /// for each file.
    fn format_reference(h: &Holder) -> String {
        let mut s = format!(
            "{MAGIC}\nkind {}\nhost {}\nboot_id {}\npidns {}\npid {}\nstart {}\npgid {}\nnonce {}\nsince_ns {}\nlease_ms {}\n",
            h.kind,
            sanitize(&h.host),
            sanitize(&h.boot_id),
            h.pidns,
            h.pid,
            h.start,
            h.pgid,
            h.nonce.hyphenated(),
            h.since_ns,
            h.lease_ms,
        );
        let sum = fnv1a64(s.as_bytes());
        s.push_str(&format!("end {sum:016x}\n"));
        s
    }

    #[test]
    fn a_record_is_the_same_whether_its_head_was_kept_or_made() {
        let base = sample();
        let mut holders = Vec::new();
        for kind in [
            Kind::Read,
            Kind::Write,
            Kind::Pending,
            Kind::Break,
            Kind::Token,
        ] {
            for (i, change) in (0..8).enumerate() {
                let mut h = base.clone();
                h.kind = kind;
                h.nonce = Uuid::from_u128(i as u128 * 0x0123_4567_89ab_cdef_0011_2233_4455_6677);
                h.since_ns = [0, 1, 9, 10, u64::MAX, 1_700_000_000_123_456_789][i % 6];
                h.lease_ms = [0, 45_000, u64::MAX, 7][i % 4];
                match change {
                    1 => h.host = "a b\nc\u{e9}".into(),
                    2 => h.boot_id = "h".repeat(300),
                    3 => h.pidns = 1,
                    4 => h.pid = u32::MAX,
                    5 => h.start = 0,
                    6 => h.pgid = 77,
                    7 => h.host = String::new(),
                    _ => {}
                }
                holders.push(h);
            }
        }
        // Each right after the record of its kind with no field changed, whose head is
        // then kept; twice over, and then backwards: heads made, kept, reused and
        // dropped (more kinds and fields than a thread keeps).
        let again = holders.iter().chain(&holders).chain(holders.iter().rev());
        for h in again {
            let plain = Holder {
                kind: h.kind,
                ..base.clone()
            };
            for h in [&plain, h] {
                assert_eq!(h.format(), format_reference(h), "{h:?}");
                let parsed = Holder::parse(h.format().as_bytes());
                assert_eq!(parsed.map(|p| p.nonce), Some(h.nonce));
            }
        }
        // On another thread, whose heads start empty.
        let h = holders[9].clone();
        let there = std::thread::spawn(move || h.format())
            .join()
            .expect("thread");
        assert_eq!(there, format_reference(&holders[9]));
    }

    #[test]
    fn decimals_are_written_as_display_writes_them() {
        // Every digit count, odd and even, at its edges, and the largest numbers.
        let edges = (0..20)
            .map(|k| 10u64.pow(k))
            .flat_map(|p| [p - 1, p, p + 1, p.saturating_mul(3)]);
        for n in edges.chain([12_345, u64::from(u32::MAX), u64::MAX - 1, u64::MAX]) {
            assert_eq!(decimal(n, &mut [0; 20]), n.to_string().as_bytes());
        }
    }

    #[test]
    fn the_longest_record_fits_its_buffer() {
        let h = Holder {
            kind: Kind::Pending,
            host: "\u{e9}".repeat(400),
            boot_id: "b".repeat(400),
            pidns: u64::MAX,
            pid: u32::MAX,
            start: u64::MAX,
            pgid: u32::MAX,
            nonce: Uuid::max(),
            since_ns: u64::MAX,
            lease_ms: u64::MAX,
        };
        let longest = format_reference(&h);
        assert_eq!(longest.len(), 762);
        assert!(longest.len() <= RECORD_TEXT_MAX);
        for kind in [
            Kind::Read,
            Kind::Write,
            Kind::Break,
            Kind::Token,
            Kind::Temporary,
        ] {
            let h = Holder { kind, ..h.clone() };
            assert!(format_reference(&h).len() <= longest.len(), "{kind}");
        }
        h.record()
            .with_text(|text| assert_eq!(text, longest.as_bytes()));
        assert!(Holder::parse(h.format().as_bytes()).is_some());
    }

    #[test]
    fn every_truncation_is_malformed() {
        let text = sample().format();
        for cut in 0..text.len() {
            assert_eq!(Holder::parse(&text.as_bytes()[..cut]), None, "cut at {cut}");
        }
    }

    #[test]
    fn any_flipped_byte_is_malformed() {
        let text = sample().format().into_bytes();
        for i in 0..text.len() {
            let mut t = text.clone();
            t[i] ^= 0x01;
            assert_eq!(Holder::parse(&t), None, "flip at {i}");
        }
    }

    #[test]
    fn odd_host_names_are_sanitised() {
        let mut h = sample();
        h.host = "a b\nc\u{e9}".into();
        let parsed = Holder::parse(h.format().as_bytes()).expect("parses");
        assert_eq!(parsed.host, "a?b?c?");
    }

    #[test]
    fn a_record_writes_host_and_boot_id_as_sanitize_makes_them() {
        let (full, long) = ("h".repeat(255), "h".repeat(256));
        let long_odd = format!("{}\u{e9}", "h".repeat(254));
        for text in [
            "host-1",
            "",
            "a b\nc\u{e9}",
            &full,
            &long,
            "a?b",
            "tab\there",
            &long_odd,
            &"\u{e9}".repeat(300),
        ] {
            assert_eq!(Sanitized(text).to_string(), sanitize(text), "{text:?}");
            assert_eq!(is_sanitized(text), sanitize(text) == text, "{text:?}");
            let mut h = sample();
            h.host = text.into();
            h.boot_id = text.into();
            let parsed = Holder::parse(h.format().as_bytes()).expect("parses");
            assert_eq!(
                (parsed.host.as_str(), parsed.boot_id.as_str()),
                (&*sanitize(text), &*sanitize(text))
            );
        }
    }

    #[test]
    fn a_host_or_boot_id_that_sanitize_would_change_is_malformed_even_with_its_sum() {
        let text = sample().format();
        let body = &text[..text.rfind("end ").expect("sum line")];
        let resum = |body: &str| format!("{body}end {:016x}\n", fnv1a64(body.as_bytes()));
        assert!(Holder::parse(resum(body).as_bytes()).is_some());
        let long = "h".repeat(256);
        for (field, bad) in [
            ("host host-a\n", "host a\tb\n".to_string()),
            ("host host-a\n", "host h\u{e9}\n".to_string()),
            ("host host-a\n", format!("host {long}\n")),
            ("boot_id 5d1f3a4e-", "boot_id \u{e9}5d1f3a4e-".to_string()),
            ("boot_id 5d1f3a4e-", "boot_id \x7f5d1f3a4e-".to_string()),
        ] {
            let forged = body.replacen(field, &bad, 1);
            assert_ne!(forged, body);
            assert_eq!(Holder::parse(resum(&forged).as_bytes()), None, "{bad:?}");
        }
    }

    #[test]
    fn trailing_garbage_and_oversize_are_malformed() {
        let mut t = sample().format();
        t.push('x');
        assert_eq!(Holder::parse(t.as_bytes()), None);
        assert_eq!(Holder::parse(&vec![b'a'; MAX_RECORD + 1]), None);
    }
}
