//! Operating-system specifics: process identity, liveness probes, filesystem kind.

#[cfg(target_os = "linux")]
mod linux;
#[cfg(target_os = "linux")]
pub(crate) use linux::*;

#[cfg(not(target_os = "linux"))]
compile_error!("rwdir supports Linux only: it relies on /proc for exact liveness checks");
