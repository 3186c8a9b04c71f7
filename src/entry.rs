//! What is known of one lock file: its name, its owner's record, and the verdict on
//! that owner. A plain value, shared by the judges that make it, `status`, and errors.

use std::path::PathBuf;
use std::time::{Duration, SystemTime};

use crate::holder::{Holder, Kind};
use crate::liveness::Liveness;

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
    /// Whether it is a regular file. For rwdir's own tests; not covered by the
    /// stability promise (see the crate docs).
    #[doc(hidden)]
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
            Kind::Temporary => "file being created",
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
