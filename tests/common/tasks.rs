//! The scheduler state of a process's threads, from `/proc` (shared by the tests and
//! the benchmarks, which include this file by path).

/// Whether every thread of process `pid` is in scheduler state `state` at this look
/// (`S` asleep, `T` stopped: the letter after the command name in
/// `/proc/PID/task/TID/stat`). `false` if the process is gone.
pub fn all_threads_in(pid: u32, state: char) -> bool {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return false;
    };
    tasks.flatten().all(|t| {
        std::fs::read_to_string(t.path().join("stat"))
            .ok()
            .and_then(|s| {
                s.rfind(')')
                    .map(|i| s[i + 1..].trim_start().starts_with(state))
            })
            .unwrap_or(false)
    })
}
