//! Arbitrary bytes parsed as a datagram frame (`quiver_wire::frame`): parsing and the
//! `dest_id` peek never panic, and a frame that parses emits the same header bytes again.
#![no_main]

use libfuzzer_sys::fuzz_target;
use quiver_wire::frame::{dest_id, Frame, MAX_HEADER_LEN};

fuzz_target!(|data: &[u8]| {
    let peeked = dest_id(data);
    if let Ok(frame) = Frame::parse(data) {
        assert_eq!(peeked, Some(frame.header().dest_id));
        let mut out = [0u8; MAX_HEADER_LEN];
        let len = frame
            .header()
            .emit(&mut out, frame.payload())
            .expect("a parsed header emits");
        assert_eq!(len, frame.header_len());
        assert_eq!(&out[..len], &data[..len]);
        assert_eq!(frame.payload(), &data[len..]);
    }
});
