//! What a program that uses `?` all the way up shows when the lock cannot be taken:
//!
//! ```text
//! $ cargo run --example error_report -- /no/such/dir
//! Error: failed to open directory `/no/such/dir`: No such file or directory (os error 2)
//! ```
//!
//! `fn main() -> Result<(), Box<dyn std::error::Error>>` prints a returned error with
//! `{:?}`, and `rwdir::Error`'s `Debug` gives the message with its causes on one line.
//! With a directory that exists, it takes the write lock, prints its fencing token and
//! releases the lock.

use std::error::Error;

fn main() -> Result<(), Box<dyn Error>> {
    let dir = std::env::args_os()
        .nth(1)
        .ok_or("usage: error_report DIR")?;
    let lock = rwdir::DirLock::new(&dir)?;
    let guard = lock.try_write()?;
    println!("write lock taken, fencing token {}", guard.token()?);
    guard.release()?;
    Ok(())
}
