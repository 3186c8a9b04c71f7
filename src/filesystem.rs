//! Which filesystem a directory lives on, and what that means for the lock: shared
//! between hosts or not, the lease it calls for, and whether lock files can work there
//! at all. A pure function of what the kernel says (`statfs`'s magic number and the
//! mount's type and source in `/proc/self/mountinfo`), so that it is tested with tables.

use std::path::{Path, PathBuf};
use std::time::Duration;

/// The coarsest mtime resolution expected on a shared filesystem (sshfs, which speaks
/// SFTP v3: whole seconds; so do some NFS servers). Part of
/// [`Filesystem::judge_margin`].
const MTIME_RESOLUTION: Duration = Duration::from_secs(1);

/// The kind of filesystem a directory lives on, as far as rwdir cares.
///
/// Found from the mount's type in `/proc/self/mountinfo` (which names FUSE filesystems:
/// `fuse.sshfs`, `fuse.ceph-fuse`, ...) and from `statfs`'s magic number.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum FsKind {
    /// A local disk or memory filesystem (ext4, xfs, btrfs, tmpfs, ...).
    Local,
    /// overlayfs (containers): local, when its layers are.
    Overlay,
    /// sshfs (SFTP through FUSE).
    Sshfs,
    /// NFS, any version.
    Nfs,
    /// SMB/CIFS.
    Cifs,
    /// CephFS, through the kernel client (`ceph`) or `ceph-fuse`.
    CephFs,
    /// GlusterFS through FUSE.
    GlusterFs,
    /// MooseFS through FUSE.
    MooseFs,
    /// Lustre.
    Lustre,
    /// IBM Storage Scale (GPFS).
    Gpfs,
    /// BeeGFS.
    BeeGfs,
    /// 9p (virtio-9p, WSL2's drives, QEMU shares).
    NineP,
    /// Another shared filesystem with a kernel client (AFS, Coda, GFS2, OCFS2, OrangeFS,
    /// PanFS).
    OtherShared,
    /// A FUSE filesystem not named above.
    Fuse,
    /// A FUSE mount of an object store (s3fs, gcsfuse, goofys, mountpoint-s3, rclone,
    /// blobfuse): no exclusive creation, no hard links. Refused unless allowed
    /// ([`Builder::allow_unsafe_filesystem`](crate::Builder::allow_unsafe_filesystem)).
    ObjectStore,
}

impl FsKind {
    /// A stable, lowercase identifier: `local`, `overlay`, `sshfs`, `nfs`, `cifs`,
    /// `cephfs`, `glusterfs`, `moosefs`, `lustre`, `gpfs`, `beegfs`, `9p`,
    /// `other_shared`, `fuse`, `object_store` (what `rwdir doctor --json` prints).
    ///
    /// # Examples
    ///
    /// ```
    /// assert_eq!(rwdir::FsKind::CephFs.as_str(), "cephfs");
    /// ```
    pub fn as_str(self) -> &'static str {
        match self {
            FsKind::Local => "local",
            FsKind::Overlay => "overlay",
            FsKind::Sshfs => "sshfs",
            FsKind::Nfs => "nfs",
            FsKind::Cifs => "cifs",
            FsKind::CephFs => "cephfs",
            FsKind::GlusterFs => "glusterfs",
            FsKind::MooseFs => "moosefs",
            FsKind::Lustre => "lustre",
            FsKind::Gpfs => "gpfs",
            FsKind::BeeGfs => "beegfs",
            FsKind::NineP => "9p",
            FsKind::OtherShared => "other_shared",
            FsKind::Fuse => "fuse",
            FsKind::ObjectStore => "object_store",
        }
    }
}

/// The filesystem a directory lives on: its [`FsKind`], the mount's type and source,
/// and what rwdir makes of it.
///
/// # Examples
///
/// ```
/// let dir = tempfile::tempdir()?;
/// let fs = rwdir::Filesystem::of(dir.path())?;
/// println!("{} ({} on {})", fs.name(), fs.fstype(), fs.source());
/// assert!(fs.refused().is_none());
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Filesystem {
    kind: FsKind,
    magic: Option<u32>,
    fstype: String,
    source: String,
    mount_point: Option<PathBuf>,
}

/// `statfs` magic numbers (`include/uapi/linux/magic.h`, `fs/smb/client/cifsglob.h`,
/// `fs/ceph/super.h`, `gfs2_ondisk.h`, and the out-of-tree clients' own headers).
mod magic {
    pub(super) const NFS: u32 = 0x6969;
    pub(super) const SMB: u32 = 0x517b;
    pub(super) const CIFS: u32 = 0xff53_4d42;
    pub(super) const SMB2: u32 = 0xfe53_4d42;
    pub(super) const FUSE: u32 = 0x6573_5546;
    pub(super) const CODA: u32 = 0x7375_7245;
    pub(super) const AFS: u32 = 0x5346_414f;
    pub(super) const OCFS2: u32 = 0x7461_636f;
    pub(super) const CEPH: u32 = 0x00c3_6400;
    pub(super) const V9FS: u32 = 0x0102_1997;
    pub(super) const GFS2: u32 = 0x0116_1970;
    pub(super) const LUSTRE: u32 = 0x0bd0_0bd0;
    pub(super) const GPFS: u32 = 0x4750_4653;
    pub(super) const BEEGFS: u32 = 0x1983_0326;
    pub(super) const ORANGEFS: u32 = 0x2003_0528;
    pub(super) const PANFS: u32 = 0xaad7_aaea;
    pub(super) const OVERLAY: u32 = 0x794c_7630;
}

/// The FUSE subtypes (and the kernel types some of them also have) of object-store
/// mounts.
const OBJECT_STORES: &[&str] = &[
    "s3fs",
    "gcsfuse",
    "goofys",
    "mountpoint-s3",
    "rclone",
    "blobfuse",
    "blobfuse2",
    "s3backer",
    "juicefs-s3",
    "geesefs",
    "riofs",
    "yas3fs",
    "catfs",
];

impl Filesystem {
    /// The filesystem holding `path` (which is opened, never followed if it is a
    /// symlink to a file; a symlink to a directory is followed like any path).
    ///
    /// # Errors
    ///
    /// [`Error::Io`](crate::Error::Io) if `path` cannot be opened.
    ///
    /// # Examples
    ///
    /// ```
    /// let fs = rwdir::Filesystem::of("/proc")?;
    /// assert_eq!(fs.fstype(), "proc");
    /// # Ok::<(), rwdir::Error>(())
    /// ```
    pub fn of(path: impl AsRef<Path>) -> crate::Result<Filesystem> {
        use crate::error::IoResultExt as _;
        let path = path.as_ref();
        let fd = nix::fcntl::open(
            path,
            nix::fcntl::OFlag::O_PATH | nix::fcntl::OFlag::O_CLOEXEC,
            nix::sys::stat::Mode::empty(),
        )
        .at("open", || path.to_path_buf())?;
        Ok(Filesystem::from_facts(&crate::sys::fs_facts(&fd, true)))
    }

    pub(crate) fn from_facts(facts: &crate::sys::FsFacts) -> Filesystem {
        match &facts.mount {
            Some(m) => {
                let mut fs = Filesystem::classify(facts.magic, Some(&m.fstype), Some(&m.source));
                fs.mount_point = Some(m.mount_point.clone());
                fs
            }
            None => Filesystem::classify(facts.magic, None, None),
        }
    }

    /// Classifies a filesystem from its `statfs` magic number (`None` if `statfs`
    /// failed) and, where known, the type and source fields of its mount in
    /// `/proc/self/mountinfo` (`fuse.sshfs`, `ceph`, `nfs4`; `user@host:/dir`).
    ///
    /// A magic number of a shared filesystem always makes it shared, whatever the
    /// mount says; so does a failed `statfs`.
    ///
    /// # Examples
    ///
    /// ```
    /// use rwdir::{Filesystem, FsKind};
    /// let fs = Filesystem::classify(Some(0x6573_5546), Some("fuse.ceph-fuse"), Some("ceph-fuse"));
    /// assert_eq!(fs.kind(), FsKind::CephFs);
    /// assert!(fs.is_shared());
    /// let s3 = Filesystem::classify(Some(0x6573_5546), Some("fuse.s3fs"), Some("s3fs"));
    /// assert!(s3.refused().is_some());
    /// ```
    pub fn classify(magic: Option<u32>, fstype: Option<&str>, source: Option<&str>) -> Filesystem {
        let fstype_s = fstype.unwrap_or("").trim();
        let source_s = source.unwrap_or("").trim();
        let by_type = kind_of_type(fstype_s, source_s);
        let by_magic = magic.map(kind_of_magic);
        let kind = match (by_type, by_magic) {
            // The mount's type is the more precise; but never make local what the
            // magic number says is shared.
            (Some(t), Some(m)) if !is_shared(t) && is_shared(m) => m,
            (Some(t), _) => t,
            (None, Some(m)) => m,
            // No statfs: take it as shared, as rwdir always has.
            (None, None) => FsKind::Fuse,
        };
        Filesystem {
            kind,
            magic,
            fstype: fstype_s.to_string(),
            source: source_s.to_string(),
            mount_point: None,
        }
    }

    /// The kind.
    pub fn kind(&self) -> FsKind {
        self.kind
    }

    /// A name for people: `ext4`, `CephFS`, `sshfs`, `FUSE (fuse.foo)`, ...
    pub fn name(&self) -> String {
        let fixed = match self.kind {
            FsKind::Local | FsKind::OtherShared | FsKind::Fuse | FsKind::ObjectStore => None,
            FsKind::Overlay => Some("overlayfs"),
            FsKind::Sshfs => Some("sshfs"),
            FsKind::Nfs => Some("NFS"),
            FsKind::Cifs => Some("SMB/CIFS"),
            FsKind::CephFs => Some("CephFS"),
            FsKind::GlusterFs => Some("GlusterFS"),
            FsKind::MooseFs => Some("MooseFS"),
            FsKind::Lustre => Some("Lustre"),
            FsKind::Gpfs => Some("GPFS (IBM Storage Scale)"),
            FsKind::BeeGfs => Some("BeeGFS"),
            FsKind::NineP => Some("9p"),
        };
        if let Some(name) = fixed {
            return name.to_string();
        }
        let sub = fuse_name(
            &self.fstype.to_ascii_lowercase(),
            &self.source.to_ascii_lowercase(),
        )
        .unwrap_or_else(|| self.fstype.clone());
        match self.kind {
            FsKind::Fuse if sub.is_empty() || sub == "fuse" => "FUSE".to_string(),
            FsKind::Fuse => format!("FUSE ({sub})"),
            FsKind::ObjectStore => format!("{sub} (object store)"),
            _ if !self.fstype.is_empty() => self.fstype.clone(),
            _ => match self.magic {
                Some(m) => format!("filesystem 0x{m:x}"),
                None => "unknown filesystem".to_string(),
            },
        }
    }

    /// The mount's type as `/proc/self/mountinfo` gives it (`ext4`, `fuse.sshfs`), or
    /// `""` if it was not looked up.
    pub fn fstype(&self) -> &str {
        &self.fstype
    }

    /// The mount's source as `/proc/self/mountinfo` gives it (`/dev/sda1`,
    /// `server:/export`), or `""` if it was not looked up.
    pub fn source(&self) -> &str {
        &self.source
    }

    /// The mount point, if the mount was found.
    pub fn mount_point(&self) -> Option<&Path> {
        self.mount_point.as_deref()
    }

    /// `statfs`'s magic number, `None` if `statfs` failed.
    pub fn magic(&self) -> Option<u32> {
        self.magic
    }

    /// Whether other hosts may share the filesystem, and listings, attributes and
    /// inotify may miss their changes: then rwdir decides ownership by the nonce in each
    /// lock file, reads through `open`, polls, and judges holders of other hosts by
    /// lease.
    pub fn is_shared(&self) -> bool {
        is_shared(self.kind)
    }

    /// Why lock files cannot work here, if they cannot: `None` for every filesystem but
    /// object-store FUSE mounts, where exclusive creation is not exclusive and hard links
    /// are missing or copies. A [`DirLock`](crate::DirLock) refuses such a directory
    /// unless built with
    /// [`Builder::allow_unsafe_filesystem`](crate::Builder::allow_unsafe_filesystem).
    pub fn refused(&self) -> Option<&'static str> {
        match self.kind {
            FsKind::ObjectStore => Some(
                "object-store mounts do not make exclusive creation exclusive and have no real hard links, \
                 so two hosts can both take the write lock",
            ),
            _ => None,
        }
    }

    /// How stale another host's view of a lock file can be with default mount options,
    /// measured or reasoned (see `docs/network-filesystems.md`); `None` where it is not
    /// known (a FUSE filesystem not named, an object store) and zero for local ones.
    pub fn cache_window(&self) -> Option<Duration> {
        let secs = |s| Some(Duration::from_secs(s));
        match self.kind {
            FsKind::Local | FsKind::Overlay => Some(Duration::ZERO),
            // Measured: listings ~21 s stale with default caching.
            FsKind::Sshfs => secs(21),
            // nfs(5): acregmax/acdirmax 60 s by default.
            FsKind::Nfs => secs(60),
            // cifs: actimeo=1 by default.
            FsKind::Cifs => secs(1),
            // Measured through ceph-fuse: 1–4 ms; capabilities keep clients coherent.
            FsKind::CephFs => Some(Duration::from_millis(10)),
            // Measured with default caching: ~1 s stale attributes and nlink.
            FsKind::GlusterFs => secs(1),
            // mfsmount's attribute and entry caches, 1 s by default.
            FsKind::MooseFs => secs(1),
            // Distributed lock managers keep clients coherent.
            FsKind::Lustre | FsKind::Gpfs | FsKind::BeeGfs => secs(1),
            // 9p's default is cache=none.
            FsKind::NineP => secs(1),
            FsKind::OtherShared | FsKind::Fuse | FsKind::ObjectStore => None,
        }
    }

    /// How much longer than its lease another host's lock file must look unrenewed here
    /// before it is judged dead: the cache window (how stale this client's view of the
    /// file's mtime can be, [`Filesystem::cache_window`]) plus 1 s of mtime resolution.
    /// Zero on a local filesystem; on a shared one whose cache window is not known, 1 s
    /// (measure the window with `rwdir doctor --peer-dir`, and make the lease cover it,
    /// or pass it to [`Builder::cache_window`](crate::Builder::cache_window)).
    ///
    /// rwdir adds this margin itself, so that a holder that renews is never taken over
    /// because a client's cache showed an old mtime, whatever the lease: on sshfs with
    /// default caching an `open` + `fstat` can show an mtime 20 s old (measured in CI:
    /// a reader renewing every 2.7 s under an 8 s lease was judged dead from another
    /// host). The price is a later take-over of a crashed holder: lease + margin after
    /// its last renewal.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use rwdir::Filesystem;
    /// let sshfs = Filesystem::classify(Some(0x6573_5546), Some("fuse.sshfs"), Some("h:/d"));
    /// assert_eq!(sshfs.judge_margin(), Duration::from_secs(22));
    /// let ext4 = Filesystem::classify(Some(0xef53), Some("ext4"), Some("/dev/sda1"));
    /// assert_eq!(ext4.judge_margin(), Duration::ZERO);
    /// ```
    pub fn judge_margin(&self) -> Duration {
        if !self.is_shared() {
            return Duration::ZERO;
        }
        self.cache_window().unwrap_or(Duration::ZERO) + MTIME_RESOLUTION
    }

    /// [`Filesystem::judge_margin`] with the cache window `window` given by the user
    /// ([`Builder::cache_window`](crate::Builder::cache_window)) in place of the kind's,
    /// if any; a local filesystem keeps no margin whatever is given.
    pub(crate) fn judge_margin_with(&self, window: Option<Duration>) -> Duration {
        match window {
            Some(w) if self.is_shared() => w + MTIME_RESOLUTION,
            _ => self.judge_margin(),
        }
    }

    /// The shortest lease this filesystem calls for, before clock skew and pauses:
    /// 2 s (`1.5 × 1 s`, lease > heartbeat + 1 s with heartbeat = lease/3) on a shared
    /// filesystem whose cache window is known, since rwdir adds the window to its
    /// judging margin ([`Filesystem::judge_margin`]); `None` where the window is not
    /// known (keep the default, [`DEFAULT_LEASE`](crate::DEFAULT_LEASE), or measure
    /// with `rwdir doctor`); `Some(ZERO)` where the lease plays no role between
    /// processes of one pid namespace (a local filesystem). Add `1.5 ×` the clock skew
    /// between hosts and the longest pause a holder may see.
    pub fn min_lease(&self) -> Option<Duration> {
        if !self.is_shared() {
            return Some(Duration::ZERO);
        }
        self.cache_window()?;
        Some(Duration::from_secs(2))
    }

    /// Whether a filesystem classified by its `statfs` magic alone is named only by its
    /// mount's line in `/proc/self/mountinfo`: every FUSE mount (one magic number for
    /// all), which may be an object store (refused) or a filesystem whose cache window
    /// rwdir knows.
    pub(crate) fn needs_mount_table(&self) -> bool {
        matches!(self.kind, FsKind::Fuse | FsKind::ObjectStore)
    }

    /// What to know about this filesystem, in a sentence or two.
    pub fn notes(&self) -> &'static str {
        match self.kind {
            FsKind::Local => {
                "listings, stat and inotify are authoritative; holders of this host are judged exactly"
            }
            FsKind::Overlay => {
                "overlayfs is taken as local: share a directory between containers through a bind mount of the host's filesystem, not through separate overlays"
            }
            FsKind::Sshfs => {
                "listings and attributes cached ~21 s, mtimes in whole seconds, lost link races reported as EPERM: handled (nonce read-back, open over stat)"
            }
            FsKind::Nfs => {
                "use NFSv4.1+, lookupcache=none (or positive), actimeo=0, cto, soft/softerr; with actimeo=0 pass a cache window of 0, otherwise take-overs wait lease + 61 s"
            }
            FsKind::Cifs => {
                "attributes cached 1 s by default (actimeo); hard links need the unix extensions or SMB3 POSIX extensions"
            }
            FsKind::CephFs => {
                "coherent between clients within milliseconds; a dead client blocks others until its MDS session times out (~60 s) or is evicted"
            }
            FsKind::GlusterFs => {
                "with default client caching, stat, open and link counts answer from the client's caches for ~1 s after another client's change (listings are fresh), and ESTALE for ~1 s after its rename; `features.cache-invalidation on` and `performance.cache-invalidation on` on the volume make hand-overs between hosts ~10x faster"
            }
            FsKind::MooseFs => {
                "mtimes in whole seconds; sessions of dead clients are kept (a day by default)"
            }
            FsKind::Lustre => {
                "use a recent client: old ones were reported to let two link()s to one name succeed; check with rwdir doctor --peer-dir"
            }
            FsKind::Gpfs => {
                "coherent through its token manager; check with rwdir doctor --peer-dir"
            }
            FsKind::BeeGfs => "coherent metadata; check with rwdir doctor --peer-dir",
            FsKind::NineP => {
                "whether hard links and exclusive creation work depends on the server; check with rwdir doctor"
            }
            FsKind::OtherShared => {
                "a shared filesystem rwdir has not been measured on; check with rwdir doctor --peer-dir"
            }
            FsKind::Fuse => {
                "a FUSE filesystem rwdir does not know: taken as shared; check with rwdir doctor --peer-dir"
            }
            FsKind::ObjectStore => {
                "refused: no exclusive creation or hard links; use a real shared filesystem"
            }
        }
    }
}

fn is_shared(kind: FsKind) -> bool {
    !matches!(kind, FsKind::Local | FsKind::Overlay)
}

fn kind_of_magic(m: u32) -> FsKind {
    match m {
        magic::NFS => FsKind::Nfs,
        magic::SMB | magic::CIFS | magic::SMB2 => FsKind::Cifs,
        magic::FUSE => FsKind::Fuse,
        magic::CEPH => FsKind::CephFs,
        magic::V9FS => FsKind::NineP,
        magic::LUSTRE => FsKind::Lustre,
        magic::GPFS => FsKind::Gpfs,
        magic::BEEGFS => FsKind::BeeGfs,
        magic::CODA | magic::AFS | magic::OCFS2 | magic::GFS2 | magic::ORANGEFS | magic::PANFS => {
            FsKind::OtherShared
        }
        magic::OVERLAY => FsKind::Overlay,
        _ => FsKind::Local,
    }
}

/// The name of a FUSE filesystem: the subtype of `fuse.NAME`, or for a plain `fuse`
/// (`fuseblk`) type the head of its source, where such filesystems put their name
/// (`s3fs`, `sshfs#user@host:`). `None` if the type is not FUSE's.
fn fuse_name(fstype: &str, source: &str) -> Option<String> {
    match fstype
        .strip_prefix("fuse.")
        .or(fstype.strip_prefix("fuseblk."))
    {
        Some(sub) => Some(sub.to_string()),
        None if fstype == "fuse" || fstype == "fuseblk" => {
            Some(source.split(['#', ' ']).next().unwrap_or("").to_string())
        }
        None => None,
    }
}

/// The kind named by a mount's type (and, for a plain `fuse` or `fuseblk` type, its
/// source, where FUSE filesystems without a subtype put their name).
fn kind_of_type(fstype: &str, source: &str) -> Option<FsKind> {
    let lower = fstype.to_ascii_lowercase();
    // A plain `fuse` type: the filesystem's name, if any, is the head of the source
    // (`s3fs`, `gcsfuse`, `sshfs#user@host:`).
    let (fuse, name) = match fuse_name(&lower, &source.to_ascii_lowercase()) {
        Some(name) => (true, name),
        None => (false, lower),
    };
    let kind = match name.as_str() {
        n if OBJECT_STORES.contains(&n) => FsKind::ObjectStore,
        "sshfs" => FsKind::Sshfs,
        "ceph" | "ceph-fuse" | "cephfs" => FsKind::CephFs,
        "glusterfs" => FsKind::GlusterFs,
        "mfs" | "mfsmount" | "moosefs" => FsKind::MooseFs,
        "nfs" | "nfs4" => FsKind::Nfs,
        "cifs" | "smb3" | "smbfs" => FsKind::Cifs,
        "lustre" => FsKind::Lustre,
        "gpfs" => FsKind::Gpfs,
        "beegfs" => FsKind::BeeGfs,
        "9p" => FsKind::NineP,
        "afs" | "coda" | "gfs2" | "ocfs2" | "orangefs" | "pvfs2" | "panfs" => FsKind::OtherShared,
        "overlay" => FsKind::Overlay,
        _ if fuse => FsKind::Fuse,
        "" => return None,
        // Any other kernel type: let the magic number decide (an unknown magic is
        // local, as before).
        _ => return None,
    };
    Some(kind)
}

#[cfg(test)]
mod tests {
    use super::*;

    const F: Option<u32> = Some(magic::FUSE);
    const EXT4: Option<u32> = Some(0xef53);

    /// magic, mountinfo type, source, kind, shared, refused.
    type Row = (Option<u32>, &'static str, &'static str, FsKind, bool, bool);

    #[test]
    fn every_kind_from_its_mount() {
        let table: &[Row] = &[
            // magic, fstype, source, kind, shared, refused
            (EXT4, "ext4", "/dev/vda", FsKind::Local, false, false),
            (
                Some(0x5846_5342),
                "xfs",
                "/dev/sda1",
                FsKind::Local,
                false,
                false,
            ),
            (
                Some(0x9123_683e),
                "btrfs",
                "/dev/sdb",
                FsKind::Local,
                false,
                false,
            ),
            (
                Some(0x0102_1994),
                "tmpfs",
                "tmpfs",
                FsKind::Local,
                false,
                false,
            ),
            (
                Some(magic::OVERLAY),
                "overlay",
                "overlay",
                FsKind::Overlay,
                false,
                false,
            ),
            (
                F,
                "fuse.sshfs",
                "user@host:/srv",
                FsKind::Sshfs,
                true,
                false,
            ),
            (
                F,
                "fuse",
                "sshfs#user@host:/srv",
                FsKind::Sshfs,
                true,
                false,
            ),
            (
                Some(magic::NFS),
                "nfs",
                "srv:/export",
                FsKind::Nfs,
                true,
                false,
            ),
            (
                Some(magic::NFS),
                "nfs4",
                "srv:/export",
                FsKind::Nfs,
                true,
                false,
            ),
            (
                Some(magic::CIFS),
                "cifs",
                "//srv/share",
                FsKind::Cifs,
                true,
                false,
            ),
            (
                Some(magic::SMB2),
                "smb3",
                "//srv/share",
                FsKind::Cifs,
                true,
                false,
            ),
            (
                Some(magic::CEPH),
                "ceph",
                "10.0.0.1:/",
                FsKind::CephFs,
                true,
                false,
            ),
            (
                F,
                "fuse.ceph-fuse",
                "ceph-fuse",
                FsKind::CephFs,
                true,
                false,
            ),
            (
                F,
                "fuse.glusterfs",
                "10.77.0.1:/vol",
                FsKind::GlusterFs,
                true,
                false,
            ),
            (
                F,
                "fuse.mfs",
                "mfs#10.77.0.1:9421",
                FsKind::MooseFs,
                true,
                false,
            ),
            (
                Some(magic::LUSTRE),
                "lustre",
                "10.0.0.1@tcp:/fs",
                FsKind::Lustre,
                true,
                false,
            ),
            (
                Some(magic::GPFS),
                "gpfs",
                "gpfs0",
                FsKind::Gpfs,
                true,
                false,
            ),
            (
                Some(magic::BEEGFS),
                "beegfs",
                "beegfs_nodev",
                FsKind::BeeGfs,
                true,
                false,
            ),
            (
                Some(magic::V9FS),
                "9p",
                "hostshare",
                FsKind::NineP,
                true,
                false,
            ),
            (
                Some(magic::GFS2),
                "gfs2",
                "/dev/dm-3",
                FsKind::OtherShared,
                true,
                false,
            ),
            (
                Some(magic::AFS),
                "afs",
                "AFS",
                FsKind::OtherShared,
                true,
                false,
            ),
            (F, "fuse.bindfs", "/srv", FsKind::Fuse, true, false),
            (F, "fuse", "", FsKind::Fuse, true, false),
            (F, "fuseblk", "/dev/sdc1", FsKind::Fuse, true, false),
            (F, "fuse.s3fs", "s3fs", FsKind::ObjectStore, true, true),
            (F, "fuse", "s3fs", FsKind::ObjectStore, true, true),
            (F, "fuse.gcsfuse", "bucket", FsKind::ObjectStore, true, true),
            (F, "fuse", "gcsfuse", FsKind::ObjectStore, true, true),
            (F, "fuse.goofys", "bucket", FsKind::ObjectStore, true, true),
            (
                F,
                "fuse.mountpoint-s3",
                "mountpoint-s3",
                FsKind::ObjectStore,
                true,
                true,
            ),
            (
                F,
                "fuse.rclone",
                "remote:bucket",
                FsKind::ObjectStore,
                true,
                true,
            ),
            (
                F,
                "fuse.blobfuse",
                "blobfuse",
                FsKind::ObjectStore,
                true,
                true,
            ),
            (
                F,
                "fuse.blobfuse2",
                "blobfuse2",
                FsKind::ObjectStore,
                true,
                true,
            ),
            (F, "FUSE.S3FS", "s3fs", FsKind::ObjectStore, true, true),
        ];
        for &(magic, fstype, source, kind, shared, refused) in table {
            let fs = Filesystem::classify(magic, Some(fstype), Some(source));
            assert_eq!(fs.kind(), kind, "{fstype} {source}");
            assert_eq!(fs.is_shared(), shared, "{fstype}");
            assert_eq!(fs.refused().is_some(), refused, "{fstype}");
            assert!(!fs.name().is_empty() && !fs.notes().is_empty());
            if shared {
                assert!(fs.min_lease() != Some(Duration::ZERO), "{fstype}");
            }
        }
    }

    /// Every magic number that was remote before mount types were read stays shared,
    /// whatever the mount says; a failed statfs is shared too.
    #[test]
    fn what_was_remote_stays_shared() {
        for m in [
            magic::NFS,
            magic::SMB,
            magic::CIFS,
            magic::SMB2,
            magic::FUSE,
            magic::CODA,
            magic::AFS,
            magic::OCFS2,
            magic::CEPH,
            magic::V9FS,
            magic::GFS2,
            magic::LUSTRE,
            magic::GPFS,
            magic::BEEGFS,
            magic::ORANGEFS,
            magic::PANFS,
        ] {
            assert!(
                Filesystem::classify(Some(m), None, None).is_shared(),
                "{m:x}"
            );
            for t in ["ext4", "overlay", "tmpfs", "weird", ""] {
                assert!(
                    Filesystem::classify(Some(m), Some(t), Some("x")).is_shared(),
                    "{m:x} {t}"
                );
            }
        }
        assert!(Filesystem::classify(None, None, None).is_shared());
        assert!(!Filesystem::classify(EXT4, None, None).is_shared());
        assert!(!Filesystem::classify(EXT4, Some("somethingnew"), Some("")).is_shared());
    }

    #[test]
    fn leases() {
        let sshfs = Filesystem::classify(F, Some("fuse.sshfs"), Some("h:/"));
        // The cache window is in the judging margin, not in the lease.
        assert_eq!(sshfs.min_lease(), Some(Duration::from_secs(2)));
        assert_eq!(sshfs.judge_margin(), Duration::from_secs(22));
        let nfs = Filesystem::classify(Some(magic::NFS), Some("nfs4"), Some("h:/"));
        assert_eq!(nfs.min_lease(), Some(Duration::from_secs(2)));
        assert_eq!(nfs.judge_margin(), Duration::from_secs(61));
        let fuse = Filesystem::classify(F, Some("fuse.foo"), Some("foo"));
        assert_eq!(fuse.min_lease(), None);
        assert_eq!(fuse.judge_margin(), Duration::from_secs(1));
        assert_eq!(fuse.name(), "FUSE (foo)");
        let local = Filesystem::classify(EXT4, Some("ext4"), Some("/dev/vda"));
        assert_eq!(local.min_lease(), Some(Duration::ZERO));
        assert_eq!(local.judge_margin(), Duration::ZERO);
        // A window given by the user replaces the kind's, on shared filesystems only.
        assert_eq!(
            sshfs.judge_margin_with(Some(Duration::ZERO)),
            Duration::from_secs(1)
        );
        assert_eq!(
            fuse.judge_margin_with(Some(Duration::from_secs(5))),
            Duration::from_secs(6)
        );
        assert_eq!(sshfs.judge_margin_with(None), sshfs.judge_margin());
        assert_eq!(
            local.judge_margin_with(Some(Duration::from_secs(5))),
            Duration::ZERO
        );
        assert_eq!(local.name(), "ext4");
        assert_eq!(
            Filesystem::classify(F, Some("fuse.s3fs"), Some("s3fs")).name(),
            "s3fs (object store)"
        );
    }

    #[test]
    fn mountinfo_lines() {
        use crate::sys::{find_mount, parse_mountinfo_line};
        let line = r"36 35 98:0 /mnt1 /mnt/with\040space\134x rw,noatime master:1 - fuse.s3fs s3fs rw,user_id=0";
        let e = parse_mountinfo_line(line).expect("parses");
        assert_eq!(e.dev, (98, 0));
        assert_eq!(e.mount_point, Path::new("/mnt/with space\\x"));
        assert_eq!(e.fstype, "fuse.s3fs");
        assert_eq!(e.source, "s3fs");
        // No optional fields.
        let e =
            parse_mountinfo_line("25 1 254:1 / / rw,relatime - ext4 /dev/vda rw").expect("parses");
        assert_eq!((e.fstype.as_str(), e.source.as_str()), ("ext4", "/dev/vda"));
        // Hostile and truncated lines are rejected, never a panic.
        for bad in [
            "",
            "garbage",
            "1 2 3 4 5 6 - ",
            "1 2 x:y / / rw - ext4 /dev/vda rw",
            "1 2 3:4 / / rw shared:1",
            "1 2 3:4 / /\\ rw - ext4 \\",
            "1 2 3:4 / /\\77 rw - \\400 src",
            "1 2 99999999999999999999999:1 / / rw - ext4 x",
        ] {
            let _ = parse_mountinfo_line(bad);
        }
        assert!(parse_mountinfo_line("1 2 3:4 / / rw shared:1").is_none());
        assert!(parse_mountinfo_line("1 2 3:4 / / rw -").is_none());
        // Escapes at the very end, and an escape of a value above 255, are kept as text.
        let e = parse_mountinfo_line(r"1 2 3:4 / /a\040 rw - t \777").expect("parses");
        assert_eq!(e.mount_point, Path::new("/a "));
        assert_eq!(e.source, r"\777");

        let info = "\
25 1 254:1 / / rw - ext4 /dev/vda rw
40 25 0:50 / /srv rw - fuse.sshfs h:/srv rw
41 25 0:50 /sub /data rw - fuse.sshfs h:/srv rw
42 25 0:51 / /srv/inner rw - tmpfs tmpfs rw
";
        let m = find_mount(info, Some((0, 50)), Some(Path::new("/data/x"))).expect("found");
        assert_eq!(m.mount_point, Path::new("/data"));
        let m = find_mount(info, Some((0, 50)), Some(Path::new("/srv/x"))).expect("found");
        assert_eq!(m.mount_point, Path::new("/srv"));
        assert!(find_mount(info, Some((9, 9)), None).is_none());
        assert_eq!(
            find_mount(info, Some((254, 1)), None).map(|m| m.fstype),
            Some("ext4".to_string())
        );
        // No device (fstat failed on a dead FUSE mount): the longest mount-point prefix.
        let m = find_mount(info, None, Some(Path::new("/srv/inner/x"))).expect("found");
        assert_eq!(m.fstype, "tmpfs");
        let m = find_mount(info, None, Some(Path::new("/srv/x"))).expect("found");
        assert_eq!(m.fstype, "fuse.sshfs");
        assert!(find_mount(info, None, None).is_none());
    }

    /// Lines of random bytes from mountinfo's alphabet (escapes, separators, digits)
    /// never make the parser panic.
    #[test]
    fn random_mountinfo_lines_never_panic() {
        use crate::sys::{find_mount, parse_mountinfo_line};
        let alphabet = b"0123456789:- \\/abcfusedx.#7\n\t";
        let mut state: u64 = 0x9e37_79b9_7f4a_7c15;
        let mut next = move || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state
        };
        let mut text = String::new();
        for _ in 0..20_000 {
            let len = (next() % 60) as usize;
            let line: String = (0..len)
                .map(|_| char::from(alphabet[(next() % alphabet.len() as u64) as usize]))
                .collect();
            let _ = parse_mountinfo_line(&line);
            text.push_str(&line);
            text.push('\n');
        }
        let _ = find_mount(&text, Some((0, 0)), Some(Path::new("/a")));
        let _ = find_mount(&text, None, Some(Path::new("/")));
    }

    #[test]
    fn the_mount_of_this_directory_is_found() {
        let fs = Filesystem::of("/proc").expect("/proc");
        assert_eq!(fs.fstype(), "proc");
        assert_eq!(fs.mount_point(), Some(Path::new("/proc")));
        assert!(!fs.is_shared());
        let err = Filesystem::of("/no/such/dir").expect_err("missing");
        assert_eq!(err.kind(), std::io::ErrorKind::NotFound);
        assert_eq!(err.path(), Path::new("/no/such/dir"));
    }
}
