//! `rwdir status DIR [--json]`: who holds the lock and who waits for it.

use std::fmt::Write as _;
use std::process::ExitCode;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use rwdir::{Entry, Liveness, Status};
use serde::Serialize;

use super::args::StatusArgs;
use super::{Error, builder, code, out};

/// Runs `rwdir status`.
///
/// # Errors
///
/// [`Error::Dir`] if DIR cannot be used, [`Error::Lock`] if the state directory cannot
/// be read, [`Error::Output`] if stdout fails.
pub(crate) fn run(args: &StatusArgs, lease: Option<Duration>) -> Result<ExitCode, Error> {
    let lock = builder(&args.dir, lease).build().map_err(Error::Dir)?;
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

/// `YYYY-MM-DD HH:MM:SS` in UTC. A record can say anything: times outside the years
/// 1970 to 9999, which RFC 3339 formatting refuses, are said in words.
fn utc(t: SystemTime) -> String {
    /// 10000-01-01T00:00:00Z.
    const YEAR_10000: Duration = Duration::from_secs(253_402_300_800);
    match t.duration_since(UNIX_EPOCH) {
        Err(_) => "before 1970".into(),
        Ok(d) if d >= YEAR_10000 => "after 9999".into(),
        Ok(_) => humantime::format_rfc3339_seconds(t)
            .to_string()
            .trim_end_matches('Z')
            .replacen('T', " ", 1),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dates() {
        assert_eq!(utc(UNIX_EPOCH), "1970-01-01 00:00:00");
        assert_eq!(
            utc(UNIX_EPOCH + Duration::from_secs(951_782_400)),
            "2000-02-29 00:00:00"
        );
        assert_eq!(utc(UNIX_EPOCH - Duration::from_secs(1)), "before 1970");
        assert_eq!(
            utc(UNIX_EPOCH + Duration::from_secs(253_402_300_800)),
            "after 9999"
        );
        assert_eq!(
            utc(UNIX_EPOCH + Duration::from_secs(253_402_300_799)),
            "9999-12-31 23:59:59"
        );
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
