//! The `rwdir` binary under test, for the tests and benchmarks that run the command.
//!
//! The command is the binary of the workspace member `rwdir-cli` (`cli/`), and cargo
//! sets `CARGO_BIN_EXE_rwdir`, and builds the binary first, only for that package's own
//! tests. So the tests of this package build it themselves, once per test process, with
//! the cargo that runs them (`$CARGO`) and their profile:
//! `cargo build -p rwdir-cli --bin rwdir [--release]`. The binary is then current however
//! the tests were started (`cargo test --workspace`, `cargo test --test cli`,
//! `cargo test -p rwdir`); when it is, the build is a no-op of a fraction of a second.
//! (tests/recipes.rs builds its example the same way.)

use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::OnceLock;

/// The path of the `rwdir` binary, built (or found current) on first use. Panics, saying
/// why, if it cannot be built; the build is tried once per process, so every test that
/// needs the binary then fails at once with the same message.
pub fn rwdir_bin() -> &'static str {
    static BIN: OnceLock<Result<String, String>> = OnceLock::new();
    match BIN.get_or_init(build) {
        Ok(path) => path,
        Err(why) => panic!("{why}"),
    }
}

fn build() -> Result<String, String> {
    let what = "cargo build -p rwdir-cli --bin rwdir (the `rwdir` binary under test)";
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let mut cmd = Command::new(cargo);
    cmd.args(["build", "--quiet", "-p", "rwdir-cli", "--bin", "rwdir"])
        .args(["--message-format", "json-render-diagnostics"])
        .arg("--manifest-path")
        .arg(concat!(env!("CARGO_MANIFEST_DIR"), "/Cargo.toml"))
        .stdin(Stdio::null())
        .stderr(Stdio::inherit());
    if !cfg!(debug_assertions) {
        cmd.arg("--release");
    }
    let out = cmd
        .output()
        .map_err(|e| format!("cannot run {what}: {e}"))?;
    if !out.status.success() {
        return Err(format!(
            "{what} failed ({}); its errors are above. The tests that run the command \
             need the rwdir repository's workspace, whose member `cli/` builds it.",
            out.status
        ));
    }
    // One JSON object per line; the artifact line of the binary names its path.
    let text = String::from_utf8_lossy(&out.stdout);
    let exe = text
        .lines()
        .filter(|l| l.contains("\"reason\":\"compiler-artifact\""))
        .filter(|l| l.contains("\"name\":\"rwdir\"") && l.contains("\"kind\":[\"bin\"]"))
        .find_map(|l| {
            let rest = &l[l.find("\"executable\":\"")? + "\"executable\":\"".len()..];
            Some(rest[..rest.find('"')?].to_string())
        })
        .ok_or_else(|| format!("{what} reported no executable:\n{text}"))?;
    if !Path::new(&exe).is_file() {
        return Err(format!("{what} reported `{exe}`, which is not a file"));
    }
    Ok(exe)
}
