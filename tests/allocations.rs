//! Heap allocations of an uncontended acquisition (issue #14): counted by a global
//! allocator that counts the calling thread's allocations only (the heartbeat thread's
//! are not the acquisition's), over many acquire+release pairs after a warm-up.
//!
//! A bound, not a timing: before the trim of 2026-12-03 a read made 16 allocations and
//! 7 reallocations, a write 21 and 5; after it, at most 7 (6 in a directory without a
//! token file); since 2026-12-05 one, the guard's shared state (the record is written
//! from a buffer on the stack with the identity borrowed, a reader's listing keeps no
//! readers, the self-deadlock record points at the guard instead of a flag of its own).
//! The bound leaves room for one more, so that a change of a dependency does not break
//! it, but not for a regression to the old counts.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;

use rwdir::DirLock;

struct Counting;

thread_local! {
    /// Allocations and reallocations made by this thread while counting.
    static COUNTS: Cell<(u64, u64)> = const { Cell::new((0, 0)) };
}

fn bump(alloc: u64, realloc: u64) {
    // `try_with`: a thread being torn down allocates no more than it frees.
    let _ = COUNTS.try_with(|c| {
        let (a, r) = c.get();
        c.set((a + alloc, r + realloc));
    });
}

// SAFETY: every call is passed on unchanged to `System`, which upholds `GlobalAlloc`'s
// contract; the counting touches only a thread-local `Cell` and allocates nothing.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        bump(1, 0);
        // SAFETY: the caller's guarantees for `layout` are `System.alloc`'s.
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: `ptr` was allocated by `System` with `layout` (every allocation here
        // is `System`'s).
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        bump(0, 1);
        // SAFETY: as for `dealloc`, and the caller's guarantees for `new_size` are
        // `System.realloc`'s.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

/// Allocations and reallocations per call of `op`, over `n` calls after a warm-up.
fn per_call(n: u64, mut op: impl FnMut()) -> (f64, f64) {
    for _ in 0..20 {
        op();
    }
    let (a0, r0) = COUNTS.with(Cell::get);
    for _ in 0..n {
        op();
    }
    let (a1, r1) = COUNTS.with(Cell::get);
    ((a1 - a0) as f64 / n as f64, (r1 - r0) as f64 / n as f64)
}

const MAX_ALLOCATIONS: f64 = 2.0;
const MAX_REALLOCATIONS: f64 = 1.0;

#[test]
fn an_uncontended_read_and_write_allocate_a_handful_of_times() {
    let dir = tempfile::tempdir().expect("tempdir");
    let lock = DirLock::new(dir.path()).expect("lock");
    let read = per_call(200, || drop(lock.read().expect("read")));
    let write = per_call(200, || drop(lock.write().expect("write")));
    // After writes, the directory holds a token file, which a read's listing keeps.
    let read_after = per_call(200, || drop(lock.read().expect("read")));
    for (what, (allocs, reallocs)) in [
        ("read", read),
        ("write", write),
        ("read beside a token", read_after),
    ] {
        eprintln!("{what}: {allocs:.2} allocations, {reallocs:.2} reallocations per pair");
        assert!(
            allocs <= MAX_ALLOCATIONS && reallocs <= MAX_REALLOCATIONS,
            "{what}: {allocs:.2} allocations and {reallocs:.2} reallocations per acquire+release \
             (at most {MAX_ALLOCATIONS} and {MAX_REALLOCATIONS})"
        );
    }
}
