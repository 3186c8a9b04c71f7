//! Entry points for the fuzz targets in `fuzz/`. Not part of the public API: no
//! stability promise, hidden from the docs.
