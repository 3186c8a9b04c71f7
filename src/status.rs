//! Who holds and who waits: a read-only view of the state directory.

use std::path::PathBuf;
use std::time::{Duration, SystemTime};

use crate::error::Result;
use crate::fsops::{Found, StateDir};
use crate::holder::{Holder, Kind};
use crate::liveness::{self, Liveness};
use crate::names::LockName;
use crate::protocol::Config;

/// One lock file and the verdict on its owner.
///
/// # Examples
///
/// ```
/// let dir = tempfile::tempdir()?;
/// let lock = rwdir::DirLock::new(dir.path())?;
/// let _r = lock.read()?;
/// let entry = &lock.status()?.readers[0];
/// assert!(entry.name.starts_with(".slave_lock-"));
/// assert!(entry.path.starts_with(dir.path()));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct Entry {
    /// The file's name in the state directory (`.master_lock`, `.slave_lock-…`, …).
    pub name: String,
    /// The file's full path.
    pub path: PathBuf,
    /// What the name says the file is.
    pub kind: Kind,
    /// The owner's record; `None` if the file is malformed (cut short, garbage, a
    /// symlink, a directory, unreadable…). A malformed file counts as held until it is
    /// older than the lease.
    pub holder: Option<Holder>,
    /// Last modification: creation, or the owner's last heartbeat.
    pub mtime: SystemTime,
    /// The verdict on the owner.
    pub liveness: Liveness,
    /// Whether it is a regular file.
    pub regular: bool,
}

impl Entry {
    /// Who this is, for messages: `writer pid 4242 on host a (12 s)`.
    ///
    /// # Examples
    ///
    /// ```
    /// let dir = tempfile::tempdir()?;
    /// let lock = rwdir::DirLock::new(dir.path())?;
    /// let _w = lock.write()?;
    /// let text = lock.status()?.writer.expect("a writer").describe();
    /// assert!(text.starts_with(&format!("writer pid {} on host ", std::process::id())));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn describe(&self) -> String {
        let role = match self.kind {
            Kind::Read => "reader",
            Kind::Write => "writer",
            Kind::Pending => "pending writer",
            Kind::Break => "lock breaker",
            Kind::Token => "token",
        };
        match &self.holder {
            Some(h) => {
                let age = SystemTime::now()
                    .duration_since(h.since())
                    .unwrap_or(Duration::ZERO)
                    .as_secs();
                format!("{role} pid {} on host {} ({age} s)", h.pid, h.host)
            }
            None => {
                let age = SystemTime::now()
                    .duration_since(self.mtime)
                    .unwrap_or(Duration::ZERO)
                    .as_secs();
                format!(
                    "{role} with a malformed lock file `{}` ({age} s old)",
                    self.path.display()
                )
            }
        }
    }

    /// When the holder took the file: the record's `since`, or the mtime of a malformed
    /// file.
    ///
    /// # Examples
    ///
    /// ```
    /// let dir = tempfile::tempdir()?;
    /// let lock = rwdir::DirLock::new(dir.path())?;
    /// let before = std::time::SystemTime::now();
    /// let _r = lock.read()?;
    /// assert!(lock.status()?.readers[0].since() >= before - std::time::Duration::from_secs(1));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn since(&self) -> SystemTime {
        self.holder.as_ref().map_or(self.mtime, Holder::since)
    }
}

/// A snapshot of who holds and who waits for the lock on a directory.
///
/// # Examples
///
/// ```
/// let dir = tempfile::tempdir()?;
/// let lock = rwdir::DirLock::new(dir.path())?;
/// let _r = lock.read()?;
/// let st = lock.status()?;
/// assert!(st.writer.is_none() && st.pending.is_empty() && st.readers.len() == 1);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct Status {
    /// The locked directory.
    pub dir: PathBuf,
    /// The state directory.
    pub state_dir: PathBuf,
    /// The last fencing token handed out, if any.
    pub token: Option<u64>,
    /// The writer (`.master_lock`), if any.
    pub writer: Option<Entry>,
    /// Queued writers, in queue order.
    pub pending: Vec<Entry>,
    /// Readers (including those announcing themselves right now).
    pub readers: Vec<Entry>,
    /// Processes breaking a stale `.master_lock`, and temporary files.
    pub other: Vec<Entry>,
}

impl Status {
    /// Whether no lock file at all is present.
    ///
    /// # Examples
    ///
    /// ```
    /// let dir = tempfile::tempdir()?;
    /// let lock = rwdir::DirLock::new(dir.path())?;
    /// assert!(lock.status()?.is_free());
    /// let _r = lock.read()?;
    /// assert!(!lock.status()?.is_free());
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn is_free(&self) -> bool {
        self.writer.is_none() && self.pending.is_empty() && self.readers.is_empty()
    }
}

/// Reads and judges one lock file; `None` if it vanished.
pub(crate) fn entry(sd: &StateDir, cfg: &Config, name: &LockName) -> Result<Option<Entry>> {
    let Found::File {
        holder,
        mtime,
        regular,
    } = sd.read(name)?
    else {
        return Ok(None);
    };
    let liveness = liveness::judge(holder.as_ref(), mtime, sd.judge_now(), cfg.lease);
    let kind = match name {
        LockName::Master => Kind::Write,
        LockName::Pending { .. } => Kind::Pending,
        LockName::Slave { .. } => Kind::Read,
        LockName::Break { .. } | LockName::Tmp { .. } => Kind::Break,
        LockName::Token(_) => Kind::Token,
    };
    Ok(Some(Entry {
        name: name.to_string(),
        path: sd.path_of(name),
        kind,
        holder,
        mtime,
        liveness,
        regular,
    }))
}

pub(crate) fn status(sd: Option<&StateDir>, cfg: &Config) -> Result<Status> {
    let mut st = Status {
        dir: cfg.dir.clone(),
        state_dir: sd.map_or_else(
            || cfg.dir.join(crate::fsops::STATE_DIR_NAME),
            |sd| sd.path().to_path_buf(),
        ),
        token: None,
        writer: None,
        pending: Vec::new(),
        readers: Vec::new(),
        other: Vec::new(),
    };
    let Some(sd) = sd else { return Ok(st) };
    let l = sd.list()?;
    st.token = l.tokens.last().copied();
    if l.master {
        st.writer = entry(sd, cfg, &LockName::Master)?;
    }
    for p in &l.pending {
        st.pending.extend(entry(sd, cfg, p)?);
    }
    for s in &l.slaves {
        st.readers.extend(entry(sd, cfg, s)?);
    }
    for o in l.breaks.iter().chain(&l.tmps) {
        st.other.extend(entry(sd, cfg, o)?);
    }
    st.readers.sort_by_key(|e| e.since());
    Ok(st)
}
