//! Fuzzes horos-manifest's template parser: any bytes parse to a template that renders within
//! its bound, or to a typed error inside the text; never a panic.

#![no_main]

use libfuzzer_sys::fuzz_target;

#[path = "../../tests/fuzz_body/mod.rs"]
mod fuzz_body;

fuzz_target!(|data: &[u8]| fuzz_body::check(data));
