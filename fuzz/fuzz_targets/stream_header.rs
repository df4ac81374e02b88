//! Fuzz target: the tcp stream header parser never panics, and what parses emits the same
//! bytes again.
#![no_main]

use libfuzzer_sys::fuzz_target;
use quiver_wire::stream::{StreamHeader, HEADER_LEN};

fuzz_target!(|data: &[u8]| {
    if let Ok(header) = StreamHeader::parse(data) {
        assert_eq!(&header.emit()[..], &data[..HEADER_LEN]);
    }
});
