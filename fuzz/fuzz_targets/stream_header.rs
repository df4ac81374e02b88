//! Fuzz target: the tcp stream header parser never panics, and what parses emits the same
//! bytes again (messages, closes, and tag and am frames, whose `length` is any 64-bit value).
#![no_main]

use libfuzzer_sys::fuzz_target;
use quiver_wire::stream::{StreamHeader, StreamKind, HEADER_LEN};

fuzz_target!(|data: &[u8]| {
    if let Ok(header) = StreamHeader::parse(data) {
        assert_eq!(&header.emit()[..], &data[..HEADER_LEN]);
        if header.kind == StreamKind::Tag {
            assert_eq!(StreamHeader::tag(header.length), header);
        }
        if header.kind == StreamKind::Am {
            assert_eq!(StreamHeader::am(header.length), header);
        }
    }
});
