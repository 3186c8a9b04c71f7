//! `rwdir status DIR [--json]`: who holds the lock and who waits for it.

use std::fmt::Write as _;
use std::process::ExitCode;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use rwdir::{DirLock, Entry, Liveness, Status};
use serde::Serialize;

use super::args::StatusArgs;
use super::{Error, code, out};

/// Runs `rwdir status`.
///
/// # Errors
///
/// [`Error::Dir`] if DIR cannot be used, [`Error::Lock`] if the state directory cannot
/// be read, [`Error::Output`] if stdout fails.
pub(crate) fn run(args: &StatusArgs, lease: Option<Duration>) -> Result<ExitCode, Error> {
    let mut builder = DirLock::builder(&args.dir);
    if let Some(lease) = lease {
        builder = builder.lease(lease);
    }
    let lock = builder.build().map_err(Error::Dir)?;
    let st = lock.status()?;
    let now = SystemTime::now();
    let text = if args.json {
        let mut s = serde_json::to_string(&Json::from(&st))
            .map_err(|e| Error::Output(std::io::Error::other(e)))?;
        s.push('\n');
        s
    } else {
        table(&st, now)
    };
    out(&text)?;
    Ok(ExitCode::from(code::OK))
}

/// The `--json` object. Field names and types are part of the CLI contract.
#[derive(Debug, Serialize)]
struct Json {
    dir: String,
    token: Option<u64>,
    writer: Option<JsonHolder>,
    pending: Vec<JsonHolder>,
    readers: Vec<JsonHolder>,
}

/// One holder. A malformed lock file (no readable record) has host `"?"` and pid `0`,
/// and `since` is its mtime.
#[derive(Debug, Serialize)]
struct JsonHolder {
    host: String,
    pid: u32,
    since: f64,
    alive: Option<bool>,
}

impl From<&Status> for Json {
    fn from(st: &Status) -> Json {
        Json {
            dir: st.dir.to_string_lossy().into_owned(),
            token: st.token,
            writer: st.writer.as_ref().map(JsonHolder::from),
            pending: st.pending.iter().map(JsonHolder::from).collect(),
            readers: st.readers.iter().map(JsonHolder::from).collect(),
        }
    }
}

impl From<&Entry> for JsonHolder {
    fn from(e: &Entry) -> JsonHolder {
        let (host, pid) = match &e.holder {
            Some(h) => (h.host.clone(), h.pid),
            None => ("?".to_string(), 0),
        };
        JsonHolder {
            host,
            pid,
            since: unix_secs(e.since()),
            alive: e.liveness.as_option(),
        }
    }
}

fn unix_secs(t: SystemTime) -> f64 {
    match t.duration_since(UNIX_EPOCH) {
        Ok(d) => d.as_secs_f64(),
        Err(e) => -e.duration().as_secs_f64(),
    }
}

/// The human-readable table.
fn table(st: &Status, now: SystemTime) -> String {
    let mut s = String::new();
    let token = match st.token {
        Some(t) => format!("fencing token {t}"),
        None => "no fencing token yet".to_string(),
    };
    let _ = writeln!(s, "lock on `{}` ({token})", st.dir.display());
    if st.is_free() {
        let _ = writeln!(s, "free: no writer, no pending writer, no reader");
        return s;
    }
    let mut rows: Vec<[String; 6]> = vec![[
        "ROLE".into(),
        "HOST".into(),
        "PID".into(),
        "SINCE (UTC)".into(),
        "AGE".into(),
        "ALIVE".into(),
    ]];
    let mut notes = Vec::new();
    let mut row = |role: String, e: &Entry| {
        let (host, pid) = match &e.holder {
            Some(h) => (h.host.clone(), h.pid.to_string()),
            None => {
                notes.push(format!(
                    "{role}: malformed lock file `{}` (held until older than the lease)",
                    e.path.display()
                ));
                ("?".to_string(), "?".to_string())
            }
        };
        let since = e.since();
        let age = now.duration_since(since).unwrap_or(Duration::ZERO);
        rows.push([
            role,
            host,
            pid,
            utc(since),
            age_text(age),
            alive_text(e.liveness).into(),
        ]);
    };
    if let Some(w) = &st.writer {
        row("writer".into(), w);
    }
    for (i, p) in st.pending.iter().enumerate() {
        row(format!("pending #{}", i + 1), p);
    }
    for r in &st.readers {
        row("reader".into(), r);
    }
    let mut widths = [0usize; 6];
    for r in &rows {
        for (w, cell) in widths.iter_mut().zip(r) {
            *w = (*w).max(cell.chars().count());
        }
    }
    for r in &rows {
        let mut line = String::new();
        for (i, (cell, w)) in r.iter().zip(widths).enumerate() {
            if i + 1 == r.len() {
                line.push_str(cell);
            } else {
                let _ = write!(line, "{cell:<w$}  ");
            }
        }
        let _ = writeln!(s, "{}", line.trim_end());
    }
    if st.writer.is_some() && !st.readers.is_empty() {
        notes.push("the writer waits for the readers to leave".to_string());
    }
    for n in notes {
        let _ = writeln!(s, "note: {n}");
    }
    s
}

fn alive_text(l: Liveness) -> &'static str {
    match l.as_option() {
        Some(true) => "yes",
        Some(false) => "no (stale)",
        None => "unknown",
    }
}

fn age_text(d: Duration) -> String {
    let s = d.as_secs();
    match s {
        0..60 => format!("{s} s"),
        60..3600 => format!("{} min {} s", s / 60, s % 60),
        3600..86400 => format!("{} h {} min", s / 3600, s % 3600 / 60),
        _ => format!("{} d {} h", s / 86400, s % 86400 / 3600),
    }
}

/// `YYYY-MM-DD HH:MM:SS` in UTC.
fn utc(t: SystemTime) -> String {
    let Ok(d) = t.duration_since(UNIX_EPOCH) else {
        return "before 1970".into();
    };
    let secs = d.as_secs();
    let (days, rem) = (secs / 86400, secs % 86400);
    let (y, m, dd) = civil_from_days(days);
    format!(
        "{y:04}-{m:02}-{dd:02} {:02}:{:02}:{:02}",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

/// Days since 1970-01-01 to (year, month, day), proleptic Gregorian (H. Hinnant's
/// `civil_from_days`).
fn civil_from_days(days: u64) -> (u64, u64, u64) {
    let z = days + 719_468;
    let era = z / 146_097;
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + u64::from(m <= 2);
    (y, m, d)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dates() {
        assert_eq!(civil_from_days(0), (1970, 1, 1));
        assert_eq!(civil_from_days(11_016), (2000, 2, 29));
        assert_eq!(civil_from_days(20_454), (2026, 1, 1));
        assert_eq!(
            utc(UNIX_EPOCH + Duration::from_secs(1_700_000_000)),
            "2023-11-14 22:13:20"
        );
    }

    #[test]
    fn ages() {
        assert_eq!(age_text(Duration::from_secs(12)), "12 s");
        assert_eq!(age_text(Duration::from_secs(125)), "2 min 5 s");
        assert_eq!(age_text(Duration::from_secs(7300)), "2 h 1 min");
        assert_eq!(age_text(Duration::from_secs(90_000)), "1 d 1 h");
    }
}
