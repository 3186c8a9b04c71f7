//! Lock-file names: `LockName::parse` never panics, accepts only canonical names, and the
//! queue order is `(ns, uuid)`; names come from the input's `/`-separated parts and from
//! the same bytes decoded as fields. See `rwdir_fuzz::names::lock_name_target`.
#![no_main]

use arbitrary::Unstructured;
use libfuzzer_sys::fuzz_target;
use rwdir_fuzz::names::{NameFields, lock_name_target};

fuzz_target!(|data: &[u8]| {
    let mut u = Unstructured::new(data);
    let built: Vec<NameFields> = u
        .arbitrary_iter::<NameFields>()
        .map(|it| it.take(64).filter_map(Result::ok).collect())
        .unwrap_or_default();
    lock_name_target(data, &built);
});
