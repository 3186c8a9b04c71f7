//! Who holds and who waits: a read-only view of the state directory.

use std::path::PathBuf;

use crate::config::Config;
use crate::entry::Entry;
use crate::error::Result;
use crate::fsops::StateDir;
use crate::holder::Kind;
use crate::judge::Judge;
use crate::names::LockName;

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

    /// Who is in the way of taking a lock of kind `want` ([`Kind::Read`] or
    /// [`Kind::Write`]): the writer, else the first queued writer, else, for a writer, a
    /// reader. Holders judged dead are passed over (the next contender removes their
    /// files), and so are the entries `ours` accepts: the caller's own files. A caller
    /// whose own file is `.master_lock` waits for readers only, and one queued itself
    /// waits only for the writers queued before it.
    ///
    /// # Examples
    ///
    /// ```
    /// let dir = tempfile::tempdir()?;
    /// let lock = rwdir::DirLock::new(dir.path())?;
    /// let _r = lock.read()?;
    /// let st = lock.status()?;
    /// assert!(st.blocker(rwdir::Kind::Read, |_| false).is_none()); // readers share
    /// let reader = st.blocker(rwdir::Kind::Write, |_| false).expect("the reader");
    /// assert_eq!(reader.kind, rwdir::Kind::Read);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn blocker(&self, want: Kind, ours: impl Fn(&Entry) -> bool) -> Option<&Entry> {
        let in_way = |e: &&Entry| !ours(e) && !e.liveness.is_dead();
        let readers = || match want {
            Kind::Write => self.readers.iter().find(in_way),
            _ => None,
        };
        if self.writer.as_ref().is_some_and(&ours) {
            return readers();
        }
        self.writer
            .iter()
            .find(in_way)
            .or_else(|| self.pending.iter().take_while(|e| !ours(e)).find(in_way))
            .or_else(readers)
    }
}

/// Reads the state directory and judges every lock file in it.
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
    let judge = Judge::new(sd, cfg);
    let entry = |name: &LockName| judge.entry(name);
    let l = sd.list_all()?;
    st.token = l.tokens.last().copied();
    if l.master {
        st.writer = entry(&LockName::Master)?;
    }
    // V8 (docs/protocol-notes.md): the writer keeps its pending file until it has removed
    // `.master_lock`; its record carries the same nonce. That file is the writer's, not a
    // queued writer's.
    let writer_nonce = st
        .writer
        .as_ref()
        .and_then(|w| w.holder.as_ref())
        .map(|h| h.nonce);
    for p in &l.pending {
        st.pending.extend(entry(p)?.filter(|e| {
            writer_nonce.is_none() || e.holder.as_ref().map(|h| h.nonce) != writer_nonce
        }));
    }
    for s in &l.slaves {
        st.readers.extend(entry(s)?);
    }
    for o in l.breaks.iter().chain(&l.tmps) {
        st.other.extend(entry(o)?);
    }
    st.readers.sort_by_key(|e| e.since());
    Ok(st)
}
