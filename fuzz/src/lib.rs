//! The harness of rwdir's fuzz targets: one module per target, whose functions panic
//! when a property fails. The targets in `fuzz_targets/` only decode their input (the
//! input types derive `Arbitrary`) and call them; `tests/fuzz_regressions.rs` at the
//! repository's root compiles these same files (`#[path]`) and replays every failing
//! input through them. See `FUZZING.md`.
//!
//! The library's crate-private pieces the targets check directly (`LockName`, `Listing`,
//! `MAX_RECORD`, `sanitize`) come from `rwdir::internals`, which the library's
//! non-default `fuzzing` feature exposes.

pub mod holder;
pub mod names;
pub mod scan;
