//! COMMAND, prepared before the lock is taken: resolved on `PATH` and checked
//! executable (so that a missing command fails before anyone waits), with its argv and
//! environment built, so that the child started by [`super::spawn`] executes it without
//! allocating. Safe code only.

use std::ffi::{CString, OsStr, OsString};
use std::io;
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use nix::libc;

use super::Error;

const TOKEN_VAR: &[u8] = b"RWDIR_TOKEN=";
/// Room for the decimal digits of any u64.
pub(super) const TOKEN_DIGITS: usize = 20;

/// COMMAND, ready to be executed by a forked child without allocating.
#[derive(Debug)]
pub(crate) struct Prepared {
    program: OsString,
    /// The paths to try, in order (one, or one per `PATH` entry).
    pub(super) paths: Vec<CString>,
    /// Owns the strings `argv` points into.
    _args: Vec<CString>,
    pub(super) argv: Vec<*const libc::c_char>,
    /// Owns the strings `envp` points into; the token entry has room for its digits.
    _env: Vec<Vec<u8>>,
    pub(super) envp: Vec<*const libc::c_char>,
    /// Where the digits of the fencing token go (writers): right after `RWDIR_TOKEN=`
    /// in its entry of `_env`, with `TOKEN_DIGITS + 1` zeroed bytes of room.
    pub(super) token_at: Option<*mut u8>,
}

impl Prepared {
    /// Resolves COMMAND and builds its argv and environment.
    ///
    /// # Errors
    ///
    /// [`Error::Exec`] if COMMAND cannot be found or is not executable (checked here,
    /// before any lock is taken, and again by the exec itself).
    pub(crate) fn new(command: &[OsString], write: bool, dir: &Path) -> Result<Prepared, Error> {
        let Some(program) = command.first() else {
            return Err(exec_error(OsString::new(), io::ErrorKind::NotFound.into()));
        };
        let to_c = |s: &OsStr| {
            CString::new(s.as_bytes()).map_err(|_| {
                exec_error(
                    program.clone(),
                    io::Error::new(
                        io::ErrorKind::InvalidInput,
                        "an argument contains a NUL byte",
                    ),
                )
            })
        };
        let args = command
            .iter()
            .map(|a| to_c(a))
            .collect::<Result<Vec<_>, _>>()?;
        let mut argv: Vec<*const libc::c_char> = args.iter().map(|a| a.as_ptr()).collect();
        argv.push(std::ptr::null());

        let mut env: Vec<Vec<u8>> = std::env::vars_os()
            .filter(|(k, _)| !matches!(k.as_bytes(), b"RWDIR_MODE" | b"RWDIR_DIR" | b"RWDIR_TOKEN"))
            .map(|(k, v)| {
                let mut e = k.into_vec();
                e.push(b'=');
                e.extend_from_slice(v.as_bytes());
                e
            })
            .filter(|e| !e.contains(&0))
            .collect();
        let mode: &[u8] = if write { b"write" } else { b"read" };
        env.push([b"RWDIR_MODE=", mode].concat());
        // (A path from the command line cannot contain a NUL byte.)
        env.push([b"RWDIR_DIR=", dir.as_os_str().as_bytes()].concat());
        let token_entry = write.then(|| {
            env.push(TOKEN_VAR.to_vec());
            env.len() - 1
        });
        for e in &mut env {
            // NUL-terminate; the token entry gets zeroed room for its digits.
            e.resize(e.len() + 1, 0);
        }
        // The child writes the token's digits here. `as_mut_ptr` and `as_ptr` (for
        // `envp`) may coexist; `env` is never resized again.
        let token_at = token_entry.map(|i| {
            env[i].resize(TOKEN_VAR.len() + TOKEN_DIGITS + 1, 0);
            env[i].as_mut_ptr().wrapping_add(TOKEN_VAR.len())
        });
        let mut envp: Vec<*const libc::c_char> = env.iter().map(|e| e.as_ptr().cast()).collect();
        envp.push(std::ptr::null());

        let paths = resolve(program)?
            .iter()
            .map(|p| to_c(p.as_os_str()))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Prepared {
            program: program.clone(),
            paths,
            _args: args,
            argv,
            _env: env,
            envp,
            token_at,
        })
    }

    /// COMMAND's program, as given.
    pub(crate) fn program(&self) -> &OsStr {
        &self.program
    }
}

fn exec_error(program: OsString, source: io::Error) -> Error {
    Error::Exec { program, source }
}

/// The paths `execvp` would try for `program`, from the first executable file on,
/// checked now: there must be one.
fn resolve(program: &OsStr) -> Result<Vec<PathBuf>, Error> {
    let not_found = || {
        exec_error(
            program.to_os_string(),
            io::Error::new(io::ErrorKind::NotFound, "command not found"),
        )
    };
    if program.is_empty() {
        return Err(not_found());
    }
    let candidates: Vec<PathBuf> = if program.as_bytes().contains(&b'/') {
        vec![PathBuf::from(program)]
    } else {
        let path =
            std::env::var_os("PATH").unwrap_or_else(|| "/usr/local/bin:/usr/bin:/bin".into());
        std::env::split_paths(&path)
            .map(|d| {
                // An empty PATH entry means the current directory.
                let d = if d.as_os_str().is_empty() {
                    PathBuf::from(".")
                } else {
                    d
                };
                d.join(program)
            })
            .collect()
    };
    let mut found_unusable: Option<io::Error> = None;
    for (i, c) in candidates.iter().enumerate() {
        match std::fs::metadata(c) {
            Ok(m) if m.is_file() && executable(c, m.permissions().mode()) => {
                // The child starts its search here: the names before were just found
                // missing or unusable (each failed execve costs a path walk).
                return Ok(candidates[i..].to_vec());
            }
            Ok(m) if m.is_dir() => {
                found_unusable.get_or_insert(io::Error::from_raw_os_error(libc::EISDIR));
            }
            Ok(_) => {
                found_unusable.get_or_insert(io::Error::from_raw_os_error(libc::EACCES));
            }
            Err(e) if candidates.len() == 1 && e.kind() != io::ErrorKind::NotFound => {
                found_unusable.get_or_insert(e);
            }
            Err(_) => {}
        }
    }
    match found_unusable {
        Some(e) => Err(exec_error(program.to_os_string(), e)),
        None if candidates.len() == 1 => Err(exec_error(
            program.to_os_string(),
            io::Error::from_raw_os_error(libc::ENOENT),
        )),
        None => Err(not_found()),
    }
}

/// Whether we may execute `path` (`access(X_OK)`; for root, any execute bit).
fn executable(path: &Path, mode: u32) -> bool {
    mode & 0o111 != 0 && nix::unistd::access(path, nix::unistd::AccessFlags::X_OK).is_ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn resolution() {
        assert!(resolve(OsStr::new("sh")).is_ok());
        let e = resolve(OsStr::new("rwdir-no-such-command")).unwrap_err();
        assert!(
            matches!(e, Error::Exec { ref source, .. } if source.kind() == io::ErrorKind::NotFound)
        );
        let e = resolve(OsStr::new("/")).unwrap_err();
        assert!(
            matches!(e, Error::Exec { ref source, .. } if source.kind() != io::ErrorKind::NotFound)
        );
    }
}
