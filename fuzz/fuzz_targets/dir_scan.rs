//! A state directory full of hostile entries (lock names and foreign names; files,
//! symlinks to a victim, hard links, directories, FIFOs, sockets, sparse files; valid
//! records of live and dead holders and garbage; old, fresh and future mtimes), then a
//! sequence of library calls on it. See `rwdir_fuzz::scan::Scanner::scan` for the checks.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|input: rwdir_fuzz::scan::ScanInput| {
    rwdir_fuzz::scan::scan(&input);
});
