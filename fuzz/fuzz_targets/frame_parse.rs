//! Arbitrary bytes parsed as a datagram frame (`quiver_wire::frame`): parsing and the
//! `dest_id` peek never panic, a frame that parses emits the same header bytes again, and
//! the further SACK ranges of an Ack payload that parse emit the same payload again.
#![no_main]

use libfuzzer_sys::fuzz_target;
use quiver_wire::frame::{dest_id, Frame, MoreSackRanges, SackRange, MAX_HEADER_LEN};

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
        if let Ok(more) = MoreSackRanges::parse(frame.header(), frame.payload()) {
            let ranges: Vec<SackRange> = more.iter().collect();
            assert_eq!(ranges.len(), more.len());
            if !ranges.is_empty() {
                let header = frame.header();
                let previous = header.sack.as_slice().last().map(|range| range.end);
                let mut payload = vec![0u8; frame.payload().len()];
                let written =
                    MoreSackRanges::emit(header.cumulative_ack, previous, &ranges, &mut payload)
                        .expect("parsed ranges emit");
                assert_eq!(&payload[..written], frame.payload());
            }
        }
    }
});
