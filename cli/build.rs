//! Links GCC's unwinder into the `rwdir` command statically on `*-linux-gnu`, as
//! `gcc -static-libgcc` does, so that the command does not load `libgcc_s.so.1` at
//! every start.
//!
//! Why: `rwdir read DIR -- COMMAND` is measured against `flock(1)`, a C program that
//! loads only libc. Loading, relocating and initialising `libgcc_s` (its constructor
//! runs `cpuid` a dozen times, each a trap to the hypervisor on a virtual machine) cost
//! an empty C program 80-130 µs per start on the benchmark VM
//! (docs/notes/command-startup.md). Rust's standard library needs only the unwinder
//! from it, which `libgcc_eh.a` holds.
//!
//! How: rustc always passes `-lgcc_s` on these targets, and `-C link-arg=-static-libgcc`
//! cannot take it back. So this script puts a linker script named `libgcc_s.so` in a
//! directory searched first, saying `INPUT("/path/to/libgcc_eh.a")`: both GNU ld and
//! lld accept a linker script where a shared library is expected (glibc's `libc.so` is
//! one). The path comes from the linker driver itself (`cc -print-file-name`). Where it
//! cannot be found (another target, a cross build without a configured linker, a
//! toolchain without `libgcc_eh.a`), nothing changes: the command links `libgcc_s`
//! dynamically, as every Rust program does by default.

use std::path::{Path, PathBuf};
use std::process::Command;

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-env-changed=RUSTC_LINKER");
    let var = |k: &str| std::env::var(k).unwrap_or_default();
    if var("CARGO_CFG_TARGET_OS") != "linux" || var("CARGO_CFG_TARGET_ENV") != "gnu" {
        return;
    }
    // The C compiler driver rustc links with: the configured linker, or `cc` natively.
    let driver = match std::env::var_os("RUSTC_LINKER") {
        Some(linker) => PathBuf::from(linker),
        None if var("TARGET") == var("HOST") => PathBuf::from("cc"),
        None => return,
    };
    let Some(eh) = libgcc_eh(&driver) else {
        println!(
            "cargo:warning=libgcc_eh.a not found by `{} -print-file-name`: the rwdir command \
             links libgcc_s dynamically (about 0.1 ms more per start)",
            driver.display()
        );
        return;
    };
    let Some(out) = std::env::var_os("OUT_DIR").map(PathBuf::from) else {
        return;
    };
    let dir = out.join("static-libgcc");
    let script = format!("INPUT(\"{}\")\n", eh.display());
    if std::fs::create_dir_all(&dir).is_err()
        || std::fs::write(dir.join("libgcc_s.so"), script).is_err()
    {
        println!(
            "cargo:warning=cannot write {}: libgcc_s stays dynamic",
            dir.display()
        );
        return;
    }
    println!("cargo:rustc-link-search=native={}", dir.display());
}

/// The absolute path of `libgcc_eh.a` that `driver` links with, if it has one.
fn libgcc_eh(driver: &Path) -> Option<PathBuf> {
    let out = Command::new(driver)
        .arg("-print-file-name=libgcc_eh.a")
        .output()
        .ok()?;
    let path = PathBuf::from(String::from_utf8(out.stdout).ok()?.trim());
    // Without the file, the driver prints the bare name back.
    let usable = out.status.success()
        && path.is_absolute()
        && path.is_file()
        && !path.to_string_lossy().contains('"');
    usable.then_some(path)
}
