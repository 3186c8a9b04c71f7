use std::fs;
use std::os::fd::{AsFd, FromRawFd, OwnedFd};
use std::os::unix::fs::MetadataExt;
use std::sync::Arc;

use nix::errno::Errno;
use nix::poll::{PollFd, PollFlags, PollTimeout, poll};
use nix::sys::signal::kill;
use nix::sys::statfs::fstatfs;
use nix::unistd::Pid;
use parking_lot::Mutex;

/// A file's identity on this host: device and inode numbers, as `fstat` gives them.
/// Exact for a file we hold open (its inode cannot be freed, so its number is not
/// reused); meaningless on remote filesystems, whose inode numbers can differ between
/// names and mounts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) struct FileId {
    dev: u64,
    ino: u64,
}

impl FileId {
    /// The identity of the file `st` describes.
    // `st_dev`/`st_ino` are u64 on some targets and not on others.
    #[allow(clippy::unnecessary_cast, clippy::useless_conversion)]
    pub(crate) fn of(st: &nix::sys::stat::FileStat) -> FileId {
        FileId {
            dev: st.st_dev as u64,
            ino: st.st_ino as u64,
        }
    }
}

/// The identity of the running process, as written into holder records.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Identity {
    pub(crate) host: String,
    pub(crate) boot_id: String,
    pub(crate) pidns: u64,
    pub(crate) pid: u32,
    pub(crate) start: u64,
}

static IDENTITY: Mutex<Option<Arc<Identity>>> = Mutex::new(None);

/// This process's pid, with no system call but the first in each process.
///
/// `getpid` is a system call (glibc caches nothing), and the lock asks it at every
/// acquisition and release: a guard does nothing in a forked child, so it compares the
/// pid with its owner's (issue #14: four `getpid` per uncontended read). The pid is
/// kept in a page of its own marked `MADV_WIPEONFORK` (Linux 4.14): the kernel hands
/// the child of any fork, however made (`fork`, glibc's `_Fork`, a raw `clone` without
/// `CLONE_VM`), that page filled with zeros, and a zero is asked again. Where the page
/// cannot be made or marked, every call asks.
pub(crate) fn pid() -> u32 {
    match pid_cell() {
        Some(cell) => match cell.load(std::sync::atomic::Ordering::Relaxed) {
            0 => {
                let pid = std::process::id();
                cell.store(pid, std::sync::atomic::Ordering::Relaxed);
                pid
            }
            pid => pid,
        },
        None => std::process::id(),
    }
}

/// The wiped-on-fork cell of [`pid`], made at the first call; `None` if it cannot be.
fn pid_cell() -> Option<&'static std::sync::atomic::AtomicU32> {
    use nix::libc;
    use std::sync::OnceLock;
    // The page's address. The `OnceLock` itself is copied into a child as it is: the
    // mapping is inherited too, its contents wiped.
    static PAGE: OnceLock<Option<usize>> = OnceLock::new();
    let addr = (*PAGE.get_or_init(|| {
        // SAFETY: an anonymous private mapping at an address of the kernel's choosing
        // touches no memory of ours; the result is checked for MAP_FAILED.
        let page = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                4096,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        if page == libc::MAP_FAILED {
            return None;
        }
        // SAFETY: `page` is the mapping just made, 4096 bytes, page-aligned.
        if unsafe { libc::madvise(page, 4096, libc::MADV_WIPEONFORK) } != 0 {
            // Not wiped on fork (a kernel before 4.14): a child would read its parent's
            // pid. Unmapped and not used.
            // SAFETY: the mapping just made, which nothing else refers to.
            unsafe { libc::munmap(page, 4096) };
            return None;
        }
        Some(page as usize)
    }))?;
    // SAFETY: `addr` is a page mapped read-write above and never unmapped, so it lives
    // as long as the process; it is page-aligned, hence aligned for `AtomicU32`, and
    // zero-filled at first (and in a child), a valid `AtomicU32`. Only atomic accesses
    // are made through it.
    Some(unsafe { &*(addr as *const std::sync::atomic::AtomicU32) })
}

/// This process's identity. Cached, and recomputed after a fork (the pid changes);
/// shared, so that asking costs no copy of its strings.
pub(crate) fn identity() -> Arc<Identity> {
    let pid = pid();
    let mut cached = IDENTITY.lock();
    if let Some(id) = cached.as_ref().filter(|id| id.pid == pid) {
        return Arc::clone(id);
    }
    let id = Arc::new(Identity {
        host: nix::unistd::gethostname()
            .ok()
            .and_then(|h| h.into_string().ok())
            .unwrap_or_default(),
        boot_id: fs::read_to_string("/proc/sys/kernel/random/boot_id")
            .map(|s| s.trim().to_string())
            .unwrap_or_default(),
        pidns: fs::metadata("/proc/self/ns/pid")
            .map(|m| m.ino())
            .unwrap_or(0),
        pid,
        start: start_time(pid).unwrap_or(0),
    });
    *cached = Some(Arc::clone(&id));
    id
}

/// Field 22 of `/proc/PID/stat`: the start time in clock ticks after boot.
pub(crate) fn start_time(pid: u32) -> Option<u64> {
    proc_stat(pid).map(|st| st.start)
}

/// The fields of `/proc/PID/stat` that liveness needs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct ProcStat {
    /// Field 3: `R`, `S`, `D`, `T`, `Z` (zombie), `X` (dead), ...
    pub(crate) state: u8,
    /// Field 5: the process group.
    pub(crate) pgrp: i32,
    /// Field 22: the start time in clock ticks after boot.
    pub(crate) start: u64,
}

impl ProcStat {
    /// A zombie (or a process being reaped) has exited: it runs no code and holds no
    /// lock, whether or not its parent has reaped it yet. An orphan waits for init to
    /// reap it, which some container inits never do.
    pub(crate) fn exited(&self) -> bool {
        matches!(self.state, b'Z' | b'X' | b'x')
    }
}

#[cfg(test)]
thread_local! {
    /// Reads of `/proc/PID/stat` made by this thread.
    static PROC_READS: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
}

/// Reads `/proc/PID/stat`.
pub(crate) fn proc_stat(pid: u32) -> Option<ProcStat> {
    use std::io::Read as _;
    #[cfg(test)]
    PROC_READS.with(|n| n.set(n.get() + 1));
    // One read into a buffer that holds any stat line whose field 22 we need (the
    // command name is at most 64 bytes): open, read, close.
    let mut buf = [0u8; 1024];
    let mut file = fs::File::open(format!("/proc/{pid}/stat")).ok()?;
    let mut len = 0;
    while len < buf.len() {
        match file.read(&mut buf[len..]) {
            Ok(0) => break,
            Ok(n) => len += n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(_) => return None,
        }
        if buf[..len].ends_with(b"\n") {
            break;
        }
    }
    let stat = std::str::from_utf8(&buf[..len]).ok()?;
    // The command name (field 2) is in parentheses and may contain anything, so count
    // fields from the last ')'.
    let mut rest = stat[stat.rfind(')')? + 1..].split_ascii_whitespace();
    let state = *rest.next()?.as_bytes().first()?;
    let pgrp = rest.nth(1)?.parse().ok()?;
    let start = rest.nth(16)?.parse().ok()?;
    Some(ProcStat { state, pgrp, start })
}

/// What a same-host probe of a pid says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Probe {
    /// The process exists with the recorded start time (or we cannot tell otherwise).
    Alive,
    /// No such process, or the pid was reused by a process started at another time.
    Gone,
}

/// Probes a pid of this pid namespace against the recorded start time.
///
/// A process found alive is remembered by a pidfd ([`Probed`]): while that descriptor
/// is not readable the very process it names has not exited, so probing it again is one
/// `poll` instead of `kill` and a read of `/proc/PID/stat` (issue #14: a queued writer
/// judges its predecessor at every look). A pidfd cannot name another process, so a
/// reused pid is never taken for the one remembered; an exited one (a zombie too) makes
/// the descriptor readable, and the probe then asks `/proc` as before.
pub(crate) fn probe_pid(pid: u32, start: u64) -> Probe {
    let Ok(raw) = i32::try_from(pid) else {
        return Probe::Gone;
    };
    if raw <= 0 {
        return Probe::Gone;
    }
    if PROBED.running(pid, start) {
        return Probe::Alive;
    }
    match kill(Pid::from_raw(raw), None) {
        Err(Errno::ESRCH) => Probe::Gone,
        // EPERM: it exists but belongs to someone else.
        _ => {
            // `pidfd` checks the start time after its open; not readable, it names a
            // process that has not exited, and readable, one that has. A `poll` that
            // fails says neither: `/proc` decides, as without a pidfd.
            if let Some(fd) = pidfd(pid, start) {
                match exited(&fd) {
                    Some(false) => {
                        PROBED.remember(pid, start, fd);
                        return Probe::Alive;
                    }
                    Some(true) => return Probe::Gone,
                    None => {}
                }
            }
            match proc_stat(pid) {
                Some(st) if st.start != start || st.exited() => Probe::Gone,
                // Unreadable /proc (hidepid): err on the side of "alive".
                _ => Probe::Alive,
            }
        }
    }
}

/// Whether the process of the pidfd `fd` has exited (the descriptor is readable),
/// without waiting; `None` if `poll` fails.
fn exited(fd: &OwnedFd) -> Option<bool> {
    let mut fds = [PollFd::new(fd.as_fd(), PollFlags::POLLIN)];
    poll(&mut fds, PollTimeout::ZERO).ok().map(|n| n > 0)
}

/// The processes [`probe_pid`] found alive, each with a pidfd of its own: at most
/// [`Probed::CAPACITY`] of them, the least recently found going first. The descriptors
/// are close-on-exec.
#[derive(Debug)]
struct Probed(Mutex<Vec<(u32, u64, OwnedFd)>>);

static PROBED: Probed = Probed(Mutex::new(Vec::new()));

impl Probed {
    /// Enough for the owners a waiter judges in a busy state directory (its predecessor
    /// in the queue and the holder), and for a few directories at once.
    const CAPACITY: usize = 16;

    /// Whether the process remembered as `pid` started at `start` has not exited: its
    /// pidfd is not readable. An exited one is forgotten. `false` also when the table is
    /// busy: a `fork` made while another thread held its lock leaves the child's copy
    /// locked for ever, so it is only ever tried.
    fn running(&self, pid: u32, start: u64) -> bool {
        let Some(mut seen) = self.0.try_lock() else {
            return false;
        };
        let Some(i) = seen.iter().position(|e| e.0 == pid && e.1 == start) else {
            return false;
        };
        if exited(&seen[i].2) == Some(false) {
            return true;
        }
        // Exited, or `poll` failed: the caller asks again without the table.
        seen.remove(i);
        false
    }

    /// A copy of the pidfd remembered for `pid` started at `start`, if any (`None` also
    /// when the table is busy, see [`Probed::running`]).
    fn copy(&self, pid: u32, start: u64) -> Option<OwnedFd> {
        let seen = self.0.try_lock()?;
        let (_, _, fd) = seen.iter().find(|e| e.0 == pid && e.1 == start)?;
        fd.try_clone().ok()
    }

    fn remember(&self, pid: u32, start: u64, fd: OwnedFd) {
        let Some(mut seen) = self.0.try_lock() else {
            return;
        };
        seen.retain(|e| e.0 != pid);
        if seen.len() >= Probed::CAPACITY {
            seen.remove(0);
        }
        seen.push((pid, start, fd));
    }
}

/// Whose death, besides a file's removal, can end a wait for that file: the process a
/// judgement found alive by its pid ([`crate::liveness`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ExitWatch {
    /// This very process, which cannot die while it waits.
    Me,
    /// A process of this host and pid namespace, by pid and start time.
    Process { pid: u32, start: u64 },
}

/// A copy of the pidfd [`probe_pid`] keeps for the process `pid` started at `start`, if
/// it keeps one (it found that process alive): one `fcntl`, no `pidfd_open` and no read of
/// `/proc`. The process may have exited since (its pidfd is then readable).
pub(crate) fn pidfd_known(pid: u32, start: u64) -> Option<OwnedFd> {
    PROBED.copy(pid, start)
}

/// A pidfd (`pidfd_open(2)`) for the process `pid` of this pid namespace, provided it is
/// still the one started at `start`: it is readable once that process has exited, at
/// once if it already has (a zombie). `None` where pidfds are missing (Linux before 5.3),
/// or the process is gone (reaped, its pid perhaps reused).
///
/// An exited process is not refused: a waiter that found the owner alive a moment ago
/// and now gets its pidfd must wake at once, not sleep its whole pause. (`/proc` shows a
/// leader as a zombie while its other threads still exit, and the pidfd becomes readable
/// only once they have: the two can disagree for that long.)
pub(crate) fn pidfd(pid: u32, start: u64) -> Option<OwnedFd> {
    // A process [`probe_pid`] found alive has a pidfd already, checked against its start
    // time: a copy (one `fcntl`) spares the open and the read of `/proc/PID/stat`. It may
    // have exited since; so may a freshly opened one's, and a waiter polls it either way.
    if let Some(fd) = PROBED.copy(pid, start) {
        return Some(fd);
    }
    let raw = i32::try_from(pid).ok().filter(|&p| p > 0)?;
    // SAFETY: `pidfd_open` takes a pid and flags by value and returns a new descriptor
    // (close-on-exec) or -1; no memory is passed.
    let fd = unsafe { nix::libc::syscall(nix::libc::SYS_pidfd_open, raw, 0) };
    let fd = i32::try_from(Errno::result(fd).ok()?).ok()?;
    // SAFETY: the kernel just made this descriptor for us, and nothing else owns it.
    let fd = unsafe { OwnedFd::from_raw_fd(fd) };
    // The pid may have been reused before the open, and the descriptor then refers to
    // the new process: it must still be the recorded one after the open.
    match proc_stat(pid) {
        Some(st) if st.start == start => Some(fd),
        _ => None,
    }
}

/// Whether any process of the group `pgid` (in this pid namespace) exists and has not
/// exited (zombies, which `kill(-pgid, 0)` still finds, do not count).
pub(crate) fn group_alive(pgid: u32) -> bool {
    let raw = match i32::try_from(pgid) {
        Ok(raw) if raw > 1 => raw,
        _ => return false,
    };
    if matches!(kill(Pid::from_raw(-raw), None), Err(Errno::ESRCH)) {
        return false;
    }
    // Usually the leader itself is alive.
    if proc_stat(pgid).is_some_and(|st| st.pgrp == raw && !st.exited()) {
        return true;
    }
    // Otherwise look for a live member. If /proc shows no member at all (hidepid),
    // err on the side of "alive".
    let Ok(procs) = fs::read_dir("/proc") else {
        return true;
    };
    let mut seen = false;
    for e in procs.flatten() {
        let Some(pid) = e.file_name().to_str().and_then(|n| n.parse::<u32>().ok()) else {
            continue;
        };
        if let Some(st) = proc_stat(pid).filter(|st| st.pgrp == raw) {
            if !st.exited() {
                return true;
            }
            seen = true;
        }
    }
    !seen
}

/// What the operating system says about the filesystem holding a descriptor: the
/// `statfs` magic number and, where asked for, the mount's line of
/// `/proc/self/mountinfo`. Classified by [`crate::filesystem`].
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct FsFacts {
    /// `f_type` of `fstatfs`, as the 32-bit pattern the kernel defines; `None` if
    /// `fstatfs` failed.
    pub(crate) magic: Option<u32>,
    /// The mount holding the descriptor, if it was looked up and found.
    pub(crate) mount: Option<MountEntry>,
}

/// The fields of one line of `/proc/self/mountinfo` that classification needs
/// (proc(5)), with octal escapes (`\040`) undone.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct MountEntry {
    /// Field 3, `major:minor` of the mount's `st_dev`.
    pub(crate) dev: (u64, u64),
    /// Field 5, the mount point in this process's mount namespace.
    pub(crate) mount_point: std::path::PathBuf,
    /// The field after the separator: `ext4`, `fuse.sshfs`, `ceph`, `nfs4`, ...
    pub(crate) fstype: String,
    /// The mount source: `/dev/vda`, `host:/export`, `ceph-fuse`, `s3fs`, ...
    pub(crate) source: String,
}

/// Undoes mountinfo's octal escapes (`\040` for a space, `\011`, `\012`, `\134`); a
/// malformed escape is kept as it is.
fn unescape(field: &str) -> Vec<u8> {
    let b = field.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'\\' && i + 3 < b.len() {
            let digits = &b[i + 1..i + 4];
            if digits.iter().all(|d| (b'0'..=b'7').contains(d)) {
                let v = digits
                    .iter()
                    .fold(0u32, |acc, d| acc * 8 + u32::from(d - b'0'));
                if let Ok(byte) = u8::try_from(v) {
                    out.push(byte);
                    i += 4;
                    continue;
                }
            }
        }
        out.push(b[i]);
        i += 1;
    }
    out
}

/// Parses one line of `/proc/self/mountinfo`; `None` for anything malformed.
pub(crate) fn parse_mountinfo_line(line: &str) -> Option<MountEntry> {
    use std::os::unix::ffi::OsStringExt as _;
    let mut fields = line.split(' ');
    let _id = fields.next()?;
    let _parent = fields.next()?;
    let (major, minor) = fields.next()?.split_once(':')?;
    let dev = (major.parse().ok()?, minor.parse().ok()?);
    let _root = fields.next()?;
    let mount_point =
        std::path::PathBuf::from(std::ffi::OsString::from_vec(unescape(fields.next()?)));
    // Mount options, then optional fields up to the separator `-`.
    let _options = fields.next()?;
    for f in fields.by_ref() {
        if f == "-" {
            let fstype = String::from_utf8_lossy(&unescape(fields.next()?)).into_owned();
            let source = String::from_utf8_lossy(&unescape(fields.next()?)).into_owned();
            if fstype.is_empty() {
                return None;
            }
            return Some(MountEntry {
                dev,
                mount_point,
                fstype,
                source,
            });
        }
    }
    None
}

/// The mount in `mountinfo` (the text of `/proc/self/mountinfo`) whose device is `dev`;
/// of several (bind mounts), the one with the longest mount point that is a prefix of
/// `path`, if given, else the last listed. Without `dev` (`fstat` failed, as on a FUSE
/// mount whose server is gone), the mount with the longest mount point that is a prefix
/// of `path`.
pub(crate) fn find_mount(
    mountinfo: &str,
    dev: Option<(u64, u64)>,
    path: Option<&std::path::Path>,
) -> Option<MountEntry> {
    let mut best: Option<MountEntry> = None;
    for entry in mountinfo.lines().filter_map(parse_mountinfo_line) {
        let fits = path.is_some_and(|p| p.starts_with(&entry.mount_point));
        match dev {
            Some(dev) if entry.dev != dev => continue,
            None if !fits => continue,
            _ => {}
        }
        let better = match (&best, path) {
            (None, _) => true,
            (Some(b), Some(p)) => {
                let best_fits = p.starts_with(&b.mount_point);
                (fits && !best_fits)
                    || (fits == best_fits
                        && entry.mount_point.as_os_str().len() >= b.mount_point.as_os_str().len())
            }
            (Some(_), None) => true,
        };
        if better {
            best = Some(entry);
        }
    }
    best
}

/// The `statfs` magic number of the filesystem holding `fd`, and with `mount`, its
/// mount's line of `/proc/self/mountinfo` (matched by `st_dev`).
pub(crate) fn fs_facts(fd: impl AsFd, mount: bool) -> FsFacts {
    // `f_type` is a signed long whose values above 2^31 come out negative on some
    // targets: keep the 32-bit pattern the kernel defines.
    #[allow(
        clippy::unnecessary_cast,
        clippy::useless_conversion,
        clippy::cast_possible_truncation,
        clippy::cast_sign_loss
    )]
    let magic = fstatfs(fd.as_fd())
        .ok()
        .map(|st| (i64::from(st.filesystem_type().0 as i64) & 0xffff_ffff) as u32);
    let mount = if mount { mount_of(fd.as_fd()) } else { None };
    FsFacts { magic, mount }
}

/// The line of `/proc/self/mountinfo` for the mount holding `fd`.
fn mount_of(fd: std::os::fd::BorrowedFd<'_>) -> Option<MountEntry> {
    use std::os::fd::AsRawFd as _;
    // `st_dev` is u64 on some targets and not on others.
    #[allow(clippy::unnecessary_cast, clippy::useless_conversion)]
    let dev = nix::sys::stat::fstat(fd).ok().map(|st| {
        let dev = st.st_dev as u64;
        (nix::sys::stat::major(dev), nix::sys::stat::minor(dev))
    });
    let path = fs::read_link(format!("/proc/self/fd/{}", fd.as_raw_fd())).ok();
    // A hostile or huge mountinfo costs at most this much.
    let mut text = String::new();
    {
        use std::io::Read as _;
        fs::File::open("/proc/self/mountinfo")
            .ok()?
            .take(16 * 1024 * 1024)
            .read_to_string(&mut text)
            .ok()?;
    }
    find_mount(&text, dev, path.as_deref())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The kept pid is this process's, and a child made by a raw `clone` (no fork
    /// handlers of glibc or anyone) finds its own, not its parent's.
    #[test]
    fn the_kept_pid_is_asked_again_in_a_child_however_made() {
        use nix::libc;
        assert_eq!(pid(), std::process::id());
        assert_eq!(pid(), std::process::id());
        let parent = pid();
        // SAFETY: `clone` with only SIGCHLD and no new stack is `fork`; the child runs
        // nothing but `pid`, which after its first use in the parent takes no lock and
        // allocates nothing (an atomic load, `getpid`, an atomic store), then `_exit`s.
        let child = unsafe { libc::syscall(libc::SYS_clone, libc::SIGCHLD, 0, 0, 0, 0) };
        if child == 0 {
            let ok = pid() == std::process::id() && pid() != parent;
            // SAFETY: `_exit` ends the child at once, running nothing of the parent's.
            unsafe { libc::_exit(if ok { 0 } else { 1 }) };
        }
        assert!(child > 0, "clone: {}", Errno::last());
        let child = Pid::from_raw(i32::try_from(child).expect("a pid"));
        let status = nix::sys::wait::waitpid(child, None).expect("waitpid");
        assert_eq!(
            status,
            nix::sys::wait::WaitStatus::Exited(child, 0),
            "the child read its parent's pid"
        );
        assert_eq!(pid(), parent);
    }

    #[test]
    fn own_identity_is_alive() {
        let id = identity();
        assert!(id.start > 0);
        assert!(id.pidns > 0);
        assert_eq!(probe_pid(id.pid, id.start), Probe::Alive);
        assert_eq!(probe_pid(id.pid, id.start + 1), Probe::Gone);
    }

    #[test]
    fn a_zombie_is_gone_and_so_is_its_group() {
        use std::os::unix::process::CommandExt;
        let mut child = std::process::Command::new("true")
            .process_group(0)
            .spawn()
            .expect("spawn true");
        let pid = child.id();
        let start = start_time(pid).unwrap_or(0);
        // Not reaped yet: a zombie once it has exited.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
        while !proc_stat(pid).is_some_and(|st| st.exited()) {
            assert!(
                std::time::Instant::now() < deadline,
                "never became a zombie"
            );
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        assert_eq!(probe_pid(pid, start), Probe::Gone);
        assert!(!group_alive(pid));
        child.wait().expect("wait");
        assert!(!group_alive(pid));
    }

    #[test]
    fn a_live_group_is_alive() {
        use std::os::unix::process::CommandExt;
        let mut child = std::process::Command::new("sleep")
            .arg("30")
            .process_group(0)
            .spawn()
            .expect("spawn sleep");
        let pid = child.id();
        assert!(group_alive(pid));
        let st = proc_stat(pid).expect("stat");
        assert_eq!(st.pgrp, i32::try_from(pid).expect("pid"));
        assert!(!st.exited());
        child.kill().expect("kill");
        child.wait().expect("wait");
    }

    /// A process found alive is probed again through its pidfd, without `/proc`, and
    /// found gone as soon as it exits, reaped or not.
    #[test]
    fn a_process_probed_alive_is_watched_until_it_exits() {
        let reads = || PROC_READS.with(|n| n.get());
        for reap in [false, true] {
            let mut child = std::process::Command::new("sleep")
                .arg("30")
                .spawn()
                .expect("spawn sleep");
            let pid = child.id();
            let start = start_time(pid).expect("start time");
            assert_eq!(probe_pid(pid, start), Probe::Alive);
            let before = reads();
            for _ in 0..3 {
                assert_eq!(probe_pid(pid, start), Probe::Alive);
            }
            assert_eq!(reads(), before, "probed again through /proc");
            // Another start time is another process, whatever is remembered.
            assert_eq!(probe_pid(pid, start + 1), Probe::Gone);
            assert_eq!(probe_pid(pid, start), Probe::Alive);
            child.kill().expect("kill");
            if reap {
                child.wait().expect("wait");
            } else {
                let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
                while !proc_stat(pid).is_some_and(|st| st.exited()) {
                    assert!(std::time::Instant::now() < deadline, "never a zombie");
                    std::thread::sleep(std::time::Duration::from_millis(5));
                }
            }
            assert_eq!(probe_pid(pid, start), Probe::Gone, "reaped: {reap}");
            let _ = child.wait();
        }
    }

    /// More processes than the table holds: each is still probed right.
    #[test]
    fn more_live_processes_than_remembered_are_each_alive() {
        let mut kids: Vec<_> = (0..Probed::CAPACITY + 4)
            .map(|_| {
                std::process::Command::new("sleep")
                    .arg("30")
                    .spawn()
                    .expect("spawn sleep")
            })
            .collect();
        let ids: Vec<_> = kids
            .iter()
            .map(|k| (k.id(), start_time(k.id()).expect("start time")))
            .collect();
        for _ in 0..2 {
            for &(pid, start) in &ids {
                assert_eq!(probe_pid(pid, start), Probe::Alive);
            }
        }
        for k in &mut kids {
            k.kill().expect("kill");
            k.wait().expect("wait");
        }
        for &(pid, start) in &ids {
            assert_eq!(probe_pid(pid, start), Probe::Gone);
        }
    }

    #[test]
    fn a_reaped_child_is_gone() {
        let mut child = std::process::Command::new("true")
            .spawn()
            .expect("spawn true");
        let pid = child.id();
        let start = start_time(pid).unwrap_or(0);
        child.wait().expect("wait");
        assert_eq!(probe_pid(pid, start), Probe::Gone);
    }
}

/// An open directory read with `getdents64(2)` into a buffer of its own. Unlike a libc
/// directory stream, it rewinds only when asked: the rewind (`lseek`) of a listing can
/// then be made before a waiter sleeps instead of right after the listing that grants
/// a lock, where the caller would wait for it.
///
/// Hand-written on purpose: nix wraps only the libc stream (`nix::dir::Dir`, which
/// cannot defer its rewind), and the crates that parse `getdents64` records (rustix's
/// `RawDir`) would add a sixth dependency to a library whose dependencies are fixed
/// (uuid, nix, parking_lot, thiserror, crossbeam-channel). The parser is small, bounds
/// checked, and exercised by the `dir_scan` fuzz target.
#[derive(Debug)]
pub(crate) struct DirReader {
    fd: std::os::fd::OwnedFd,
    buf: Vec<u8>,
    /// Whether the descriptor's offset is at the start of the directory.
    at_start: bool,
}

impl DirReader {
    /// Room for about a thousand entries per call: one call lists a state directory.
    const BUF: usize = 32 * 1024;

    /// `fd` must be a directory opened for reading, at its start.
    pub(crate) fn new(fd: std::os::fd::OwnedFd) -> DirReader {
        DirReader {
            fd,
            buf: vec![0; Self::BUF],
            at_start: true,
        }
    }

    /// Moves back to the start of the directory, if not there already.
    pub(crate) fn rewind(&mut self) -> nix::Result<()> {
        if !self.at_start {
            nix::unistd::lseek(&self.fd, 0, nix::unistd::Whence::SeekSet)?;
            self.at_start = true;
        }
        Ok(())
    }

    /// Calls `each` with every name in the directory (`.` and `..` included) and its
    /// `d_type` (`DT_REG`, `DT_DIR`, ...; `DT_UNKNOWN` where the filesystem does not
    /// say), reading until `getdents64` says the end is reached. Returns how many calls
    /// returned entries: with one, the names are one snapshot of the directory on a
    /// local filesystem, whose `getdents64` holds the directory's lock against creations
    /// and removals for the whole call.
    pub(crate) fn for_each(&mut self, mut each: impl FnMut(&[u8], u8)) -> nix::Result<usize> {
        use std::os::fd::AsRawFd as _;
        self.rewind()?;
        self.at_start = false;
        let mut batches = 0;
        loop {
            // SAFETY: the kernel writes at most `buf.len()` bytes into `buf`, which we
            // own exclusively (`&mut self`) for the duration of the call.
            let n = unsafe {
                nix::libc::syscall(
                    nix::libc::SYS_getdents64,
                    self.fd.as_raw_fd(),
                    self.buf.as_mut_ptr(),
                    self.buf.len(),
                )
            };
            let n = usize::try_from(Errno::result(n)?).map_err(|_| Errno::EIO)?;
            if n == 0 {
                return Ok(batches);
            }
            batches += 1;
            let mut data = self.buf.get(..n).ok_or(Errno::EIO)?;
            // struct linux_dirent64: u64 d_ino, i64 d_off, u16 d_reclen, u8 d_type, then
            // the name, NUL-terminated, padded to d_reclen.
            while !data.is_empty() {
                let reclen = data
                    .get(16..18)
                    .map(|b| usize::from(u16::from_ne_bytes([b[0], b[1]])))
                    .ok_or(Errno::EIO)?;
                let d_type = *data.get(18).ok_or(Errno::EIO)?;
                let rec = data.get(19..reclen).ok_or(Errno::EIO)?;
                // The name has no NUL, and `reclen` pads the name and its NUL to 8
                // bytes: the NUL is among the last 8 bytes of `rec`. Looked for from
                // there, not along the whole name (every listing walks every name).
                let from = rec.len().saturating_sub(8);
                let len = from + rec[from..].iter().position(|&b| b == 0).ok_or(Errno::EIO)?;
                each(&rec[..len], d_type);
                data = &data[reclen..];
            }
        }
    }
}

#[cfg(test)]
mod dir_reader_tests {
    use super::*;
    use std::collections::BTreeSet;

    fn names(r: &mut DirReader) -> BTreeSet<Vec<u8>> {
        let mut all = BTreeSet::new();
        r.for_each(|n, _| {
            assert!(all.insert(n.to_vec()), "listed twice: {n:?}");
        })
        .expect("list");
        all
    }

    /// More entries than one `getdents64` call returns, listed twice on one descriptor
    /// (the second listing rewinds by itself, and `rewind` before it changes nothing),
    /// and then again after a change.
    /// A directory with an empty file of each name, and every name its listing should
    /// give (`.` and `..` too).
    fn filled(names: impl IntoIterator<Item = String>) -> (tempfile::TempDir, BTreeSet<Vec<u8>>) {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut want: BTreeSet<Vec<u8>> = [b".".to_vec(), b"..".to_vec()].into();
        for n in names {
            fs::write(dir.path().join(&n), b"").expect("write");
            want.insert(n.into_bytes());
        }
        (dir, want)
    }

    fn reader(dir: &std::path::Path) -> DirReader {
        let fd = nix::fcntl::open(
            dir,
            nix::fcntl::OFlag::O_RDONLY | nix::fcntl::OFlag::O_DIRECTORY,
            nix::sys::stat::Mode::empty(),
        )
        .expect("open");
        DirReader::new(fd)
    }

    #[test]
    fn a_directory_reader_lists_everything_every_time() {
        let (dir, mut want) = filled((0..2000).map(|i| format!("{i:04}-{}", "x".repeat(40))));
        let mut r = reader(dir.path());
        const { assert!(2000 * 64 > DirReader::BUF, "needs several calls") };
        assert_eq!(names(&mut r), want);
        assert_eq!(names(&mut r), want);
        r.rewind().expect("rewind");
        r.rewind().expect("rewind");
        assert_eq!(names(&mut r), want);
        fs::remove_file(dir.path().join(format!("0007-{}", "x".repeat(40)))).expect("rm");
        want.remove(format!("0007-{}", "x".repeat(40)).as_bytes());
        fs::write(dir.path().join("new"), b"").expect("write");
        want.insert(b"new".to_vec());
        assert_eq!(names(&mut r), want);
    }

    /// A name's end is found near the end of its record (`for_each`): names of every
    /// length up to `NAME_MAX`, so every padding of the record, come out whole.
    #[test]
    fn names_of_every_length_are_listed_whole() {
        let (dir, want) = filled((1..=255).map(|len| {
            (0..len)
                .map(|i| char::from(b'a' + (i % 26) as u8))
                .collect()
        }));
        assert_eq!(names(&mut reader(dir.path())), want);
    }
}

/// Registers `fd` with the current tokio reactor, to wait until it is readable (the
/// shared inotify instance, for an async waiter that leads: `notify`'s `reactor`).
/// Must be called within a runtime (the caller checks: `DirLock::read_async`); tokio
/// panics in a runtime without its I/O driver (documented on `read_async`: tokio offers
/// no way to ask beforehand).
#[cfg(feature = "tokio")]
pub(crate) fn register_readable(fd: OwnedFd) -> std::io::Result<tokio::io::unix::AsyncFd<OwnedFd>> {
    // SAFETY: `AsyncFd` takes `fd` by value and owns it until it is dropped, so the
    // descriptor stays open and names the same file description for its whole life, and
    // `OwnedFd::as_raw_fd` always returns that descriptor.
    unsafe { tokio::io::unix::AsyncFd::register_with_interest(fd, tokio::io::Interest::READABLE) }
        .map_err(std::io::Error::from)
}
