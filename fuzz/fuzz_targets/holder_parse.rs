//! Holder records: `Holder::parse` never panics on any bytes, accepts only canonical
//! records, and `format` round-trips any holder built from arbitrary fields (the same
//! bytes, decoded as fields). See `rwdir_fuzz::holder::holder_target`.
#![no_main]

use arbitrary::{Arbitrary, Unstructured};
use libfuzzer_sys::fuzz_target;
use rwdir_fuzz::holder::{HolderFields, holder_target};

fuzz_target!(|data: &[u8]| {
    let fields = HolderFields::arbitrary(&mut Unstructured::new(data)).ok();
    holder_target(data, fields.as_ref());
});
