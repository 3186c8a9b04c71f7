//! The checks made after each call.

use std::collections::BTreeSet;
use std::ffi::OsStr;
use std::fs;
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::MetadataExt;
use std::path::PathBuf;

use rwdir::internals::LockName;
use rwdir::{Entry, Error, Kind, Liveness, Status};

use super::{Guards, Me, Op, Planted, Scanner, VICTIM, VICTIM_MODE};

impl Scanner {
    /// The `.token-<n>` numbers present, sorted.
    pub(super) fn tokens(&self) -> Vec<u64> {
        let mut v: Vec<u64> = self
            .lock_names()
            .into_iter()
            .filter_map(|n| match n {
                LockName::Token(k) => Some(k),
                _ => None,
            })
            .collect();
        v.sort_unstable();
        v
    }

    fn lock_names(&self) -> Vec<LockName> {
        self.names()
            .iter()
            .filter_map(|n| LockName::parse(n))
            .collect()
    }

    /// Every name in the state directory (none if it is not a directory).
    fn names(&self) -> Vec<Vec<u8>> {
        let Ok(m) = fs::symlink_metadata(&self.state) else {
            return Vec::new();
        };
        if !m.is_dir() {
            return Vec::new();
        }
        fs::read_dir(&self.state)
            .expect("list the state directory")
            .map(|e| {
                e.expect("list the state directory")
                    .file_name()
                    .as_bytes()
                    .to_vec()
            })
            .collect()
    }

    /// Errors allowed: `WouldBlock` from a `try_*`; `NotADirectory` when the state path
    /// is not a directory; `Io` naming a path inside the state directory, only for a
    /// non-empty directory at a lock name other than a token's (it cannot be removed);
    /// `TokensExhausted`, from `try_write`, for a `.token-18446744073709551615`.
    pub(super) fn check_error(&self, e: &Error, op: Op, planted: &[Planted], what: &str) {
        let state_is_dir = fs::symlink_metadata(&self.state).is_ok_and(|m| m.is_dir());
        match e {
            Error::WouldBlock { dir, .. } => {
                assert!(
                    matches!(op, Op::TryRead { .. } | Op::TryWrite { .. }),
                    "{what}: {e}"
                );
                assert_eq!(dir, &self.locked, "{what}: {e}");
            }
            Error::NotADirectory { path, .. } => {
                assert!(!state_is_dir, "{what}: {e}");
                assert_eq!(path, &self.state, "{what}: {e}");
            }
            Error::TokensExhausted { path } => {
                assert!(matches!(op, Op::TryWrite { .. }), "{what}: {e}");
                let here = planted.iter().find(|p| p.path == *path && p.present());
                assert!(
                    here.is_some_and(|p| p.lock == Some(LockName::Token(u64::MAX))),
                    "{what}: no planted maximum token at {}",
                    path.display()
                );
            }
            Error::Io { path, source, .. } => {
                assert!(
                    path.starts_with(&self.state) && path != &self.state,
                    "{what}: an error outside the state directory: {e:?}"
                );
                let here = planted.iter().find(|p| p.path == *path && p.present());
                let expected = match source.kind() {
                    // A non-empty directory at a lock name cannot be removed (at a token
                    // name, T4 leaves it without failing).
                    io::ErrorKind::DirectoryNotEmpty => here.is_some_and(|p| {
                        p.non_empty_dir && p.lock.is_some_and(|n| !matches!(n, LockName::Token(_)))
                    }),
                    _ => false,
                };
                assert!(expected, "{what}: unexpected I/O error: {e:?}");
            }
            _ => panic!("{what}: unexpected error: {e:?}"),
        }
    }

    /// After every call: protected entries are all there (but tokens below one we made),
    /// and nothing but our kept guards' files and the tokens we made was added (undo).
    pub(super) fn check_files(
        &self,
        planted: &[Planted],
        guards: &Guards,
        minted: &[u64],
        what: &str,
    ) {
        let top = minted.iter().max().copied();
        for p in planted {
            if !p.protected || p.present() {
                continue;
            }
            let token_passed =
                matches!(p.lock, Some(LockName::Token(k)) if top.is_some_and(|t| k < t));
            assert!(
                token_passed,
                "{what}: protected {:?} was removed ({p:?})",
                String::from_utf8_lossy(&p.name)
            );
        }
        let ours: Vec<PathBuf> = guards.paths();
        let mut kept = 0;
        for name in self.names() {
            let path = self.state.join(OsStr::from_bytes(&name));
            if planted.iter().any(|p| p.path == path && p.present()) || ours.contains(&path) {
                continue;
            }
            // The reader's file our lock keeps between reads (docs/protocol.md §2.1.1):
            // one at most, and gone with the lock (`kept_files`).
            if self.kept_by_us(&name) {
                kept += 1;
                assert!(kept <= 1, "{what}: more than one kept reader's file");
                continue;
            }
            let token =
                matches!(LockName::parse(&name), Some(LockName::Token(k)) if minted.contains(&k));
            assert!(
                token,
                "{what}: left behind: {:?}",
                String::from_utf8_lossy(&name)
            );
        }
        self.check_victims();
    }

    /// Whether `name` is a reader's file kept between reads by this process: a `.tmp-`
    /// regular file holding a reader's record with our pid.
    fn kept_by_us(&self, name: &[u8]) -> bool {
        if !matches!(LockName::parse(name), Some(LockName::Tmp { .. })) {
            return false;
        }
        let path = self.state.join(OsStr::from_bytes(name));
        if !fs::symlink_metadata(&path).is_ok_and(|m| m.is_file()) {
            return false;
        }
        let text = fs::read_to_string(&path).unwrap_or_default();
        let pid = format!("pid {}", std::process::id());
        text.lines().any(|l| l == "kind read") && text.lines().any(|l| l == pid)
    }

    /// How many readers' files kept by this process the state directory holds, the
    /// planted entries aside (a planted `.tmp-` file may hold a record of ours).
    pub(super) fn kept_files(&self, planted: &[Planted]) -> usize {
        self.names()
            .iter()
            .filter(|n| {
                let path = self.state.join(OsStr::from_bytes(n));
                !planted.iter().any(|p| p.path == path) && self.kept_by_us(n)
            })
            .count()
    }

    pub(super) fn check_victims(&self) {
        let m = fs::symlink_metadata(&self.victim).expect("the victim is gone");
        assert_eq!(m.mode() & 0o7777, VICTIM_MODE, "the victim's mode changed");
        assert_eq!(
            fs::read(&self.victim).expect("read the victim"),
            VICTIM,
            "the victim changed"
        );
        let names: Vec<_> = fs::read_dir(&self.victim_dir)
            .expect("the victim directory is gone")
            .map(|e| e.expect("list the victim directory").file_name())
            .collect();
        assert_eq!(names, [OsStr::new("keep")], "the victim directory changed");
        assert_eq!(
            fs::read(self.victim_dir.join("keep")).expect("read keep"),
            VICTIM
        );
    }

    fn find<'p>(&self, planted: &'p [Planted], name: &str) -> Option<&'p Planted> {
        planted
            .iter()
            .find(|p| p.name == name.as_bytes() && p.present())
    }

    fn check_entry(&self, e: &Entry, me: &Me, planted: &[Planted], what: &str) {
        let n = LockName::parse(e.name.as_bytes())
            .unwrap_or_else(|| panic!("{what}: status lists a foreign name {:?}", e.name));
        assert_eq!(e.path, self.state.join(&e.name), "{what}");
        let kind = match n {
            LockName::Master => Kind::Write,
            LockName::Pending { .. } => Kind::Pending,
            LockName::Slave { .. } => Kind::Read,
            LockName::Break { .. } => Kind::Break,
            LockName::Tmp { .. } => Kind::Temporary,
            LockName::Token(_) => Kind::Token,
        };
        assert_eq!(e.kind, kind, "{what}: {e:?}");
        let Some(p) = self.find(planted, &e.name) else {
            // One of ours: alive.
            assert_eq!(e.liveness, Liveness::Alive, "{what}: our own file {e:?}");
            assert!(
                e.holder.as_ref().is_some_and(|h| me.alive(h)),
                "{what}: {e:?}"
            );
            return;
        };
        assert_eq!(e.holder, p.holder, "{what}: {:?} read wrong", e.name);
        assert_eq!(e.regular, p.regular, "{what}: {e:?}");
        assert_eq!(e.mtime, p.mtime, "{what}: {e:?}");
        if let Some(l) = p.liveness {
            assert_eq!(e.liveness, l, "{what}: {e:?} judged wrong ({p:?})");
        }
    }

    pub(super) fn check_status(
        &self,
        st: &Status,
        me: &Me,
        planted: &[Planted],
        guards: &Guards,
        what: &str,
    ) {
        let _ = guards;
        assert_eq!(st.dir, self.locked, "{what}");
        assert_eq!(st.state_dir, self.state, "{what}");
        let names = self.lock_names();
        assert_eq!(st.token, self.tokens().last().copied(), "{what}");
        assert_eq!(
            st.writer.is_some(),
            names.contains(&LockName::Master),
            "{what}"
        );
        let all = st
            .writer
            .iter()
            .chain(&st.pending)
            .chain(&st.readers)
            .chain(&st.other);
        let mut seen = BTreeSet::new();
        for e in all {
            assert!(
                seen.insert(e.name.clone()),
                "{what}: {} listed twice",
                e.name
            );
            self.check_entry(e, me, planted, what);
        }
        // The writer's own pending file, kept while it holds (V8): its record has the
        // nonce of the `.master_lock` record, and status shows it as part of the writer.
        let writer_nonce = st
            .writer
            .as_ref()
            .and_then(|e| e.holder.as_ref())
            .map(|h| h.nonce);
        let writers_own = |n: &LockName| {
            let path = self.state.join(n.to_string());
            matches!(n, LockName::Pending { .. })
                && writer_nonce.is_some()
                && fs::symlink_metadata(&path).is_ok_and(|m| m.is_file())
                && fs::read(&path)
                    .ok()
                    .and_then(|b| rwdir::Holder::parse(&b))
                    .map(|h| h.nonce)
                    == writer_nonce
        };
        let want: BTreeSet<String> = names
            .iter()
            .filter(|n| !matches!(n, LockName::Token(_)) && !writers_own(n))
            .map(ToString::to_string)
            .collect();
        assert_eq!(
            seen, want,
            "{what}: status does not list exactly the lock files"
        );
        for w in st.pending.windows(2) {
            let k = |e: &Entry| LockName::parse(e.name.as_bytes()).and_then(|n| n.order_key());
            assert!(k(&w[0]) <= k(&w[1]), "{what}: pending out of queue order");
        }
    }

    pub(super) fn check_plan(&self, plan: &[Entry], all: bool, planted: &[Planted], what: &str) {
        let names: BTreeSet<String> = plan.iter().map(|e| e.name.clone()).collect();
        assert_eq!(names.len(), plan.len(), "{what}: a name planned twice");
        if all {
            let tokens = self.tokens();
            let want: BTreeSet<String> = self
                .lock_names()
                .into_iter()
                .filter(|n| {
                    *n != LockName::Token(tokens.last().copied().unwrap_or(0)) || tokens.is_empty()
                })
                .map(|n| n.to_string())
                .collect();
            assert_eq!(
                names, want,
                "{what}: --all must plan every lock file but the top token"
            );
            return;
        }
        for e in plan {
            self.check_removable(e, planted, what);
        }
    }

    fn check_removable(&self, e: &Entry, planted: &[Planted], what: &str) {
        let n = LockName::parse(e.name.as_bytes())
            .unwrap_or_else(|| panic!("{what}: a foreign name {:?}", e.name));
        assert!(!matches!(n, LockName::Token(_)), "{what}: a token {e:?}");
        assert!(e.liveness.is_dead(), "{what}: not dead: {e:?}");
        assert!(
            e.regular || n == LockName::Master,
            "{what}: not a regular file: {e:?}"
        );
        if let Some(p) = planted.iter().find(|p| p.name == e.name.as_bytes()) {
            assert!(!p.protected, "{what}: protected: {p:?}");
        }
    }

    pub(super) fn check_cleanup(&self, removed: &[Entry], planted: &[Planted], what: &str) {
        for e in removed {
            self.check_removable(e, planted, what);
            assert!(
                fs::symlink_metadata(&e.path).is_err(),
                "{what}: reported removed but present: {e:?}"
            );
        }
        for p in planted.iter().filter(|p| p.doomed) {
            assert!(
                !p.present(),
                "{what}: cleanup left a dead holder's file: {p:?}"
            );
        }
    }
}
