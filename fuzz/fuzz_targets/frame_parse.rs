//! Arbitrary bytes parsed as a datagram frame (`quiver_wire::frame`): parsing and the
//! `dest_id` / `destination` peeks never panic, a frame that parses emits the same header
//! bytes again, the further SACK ranges of an Ack payload that parse emit the same
//! payload again, and a Stream frame parsed in two pieces (`parse_stream_split`) gives what
//! it gives whole.
//!
//! A Stream frame's checksum covers its receiver's full connection id, of which the frame
//! carries the low 24 bits: it is parsed for the id made of those bits and
//! [`STREAM_ID_HIGH`] (the seed `corpus/frame_parse/seed-stream` is sent to such an id).
#![no_main]

use libfuzzer_sys::fuzz_target;
use quiver_wire::frame::{
    dest_id, destination, parse_stream_split, short_id, Destination, Frame, FrameError,
    MoreSackRanges, SackRange, MAX_HEADER_LEN, STREAM_HEADER_LEN, STREAM_TAG,
};

/// The high 40 bits of the connection id a Stream frame is parsed for.
const STREAM_ID_HIGH: u64 = 0x0102_0304_0500_0000;

fuzz_target!(|data: &[u8]| {
    let peeked = destination(data);
    let full_peek = dest_id(data);
    let local_id = match peeked {
        Some(Destination::Short(short)) => STREAM_ID_HIGH | u64::from(short),
        _ => STREAM_ID_HIGH,
    };
    let parsed = Frame::parse(data);
    if let Ok(frame) = &parsed {
        assert_eq!(peeked, Some(Destination::Id(frame.header().dest_id)));
        assert_eq!(full_peek, Some(frame.header().dest_id));
    }
    if parsed == Err(FrameError::NeedsConnectionId) {
        assert!(matches!(peeked, Some(Destination::Short(_)) | None));
    }
    // The same bytes in two pieces (a scattering receive): what parses whole parses split.
    if data.len() >= STREAM_HEADER_LEN {
        let (head, payload) = data.split_at(STREAM_HEADER_LEN);
        let split = parse_stream_split(head, payload, local_id);
        if data[0] == STREAM_TAG {
            let whole = Frame::parse_for(data, local_id);
            assert_eq!(split.ok(), whole.ok().map(|frame| *frame.header()));
        } else {
            assert!(split.is_err());
        }
    }
    if let Ok(frame) = Frame::parse_for(data, local_id) {
        if let Some(Destination::Short(short)) = peeked {
            assert_eq!(short, short_id(frame.header().dest_id));
            assert_eq!(frame.header().dest_id, local_id);
        }
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
