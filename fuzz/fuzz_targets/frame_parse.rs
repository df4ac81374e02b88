//! Arbitrary bytes parsed as a datagram frame (`quiver_wire::frame`): parsing and the
//! `dest_id` / `destination` peeks never panic, a frame that parses emits the same header
//! bytes again, the further SACK ranges of an Ack payload that parse emit the same
//! payload again, and a Stream frame parsed in two pieces (`parse_stream_split`) gives what
//! it gives whole.
//!
//! A Stream frame's tag covers its receiver's full connection id, of which the frame
//! carries the low 24 bits: it is parsed for the id made of those bits and
//! [`STREAM_ID_HIGH`] (the seed `corpus/frame_parse/seed-stream` is sent to such an id).
//! Frames are verified under the key of [`FUZZ_SECRET`] (job and connection alike; the
//! seeds are made under it); a frame that parses fails under any other key, and no frame
//! of a connection type parses without a connection key (the authenticator, decision 0067).
//! Every frame also parses without its tag checked ([`Frame::parse_unauthenticated`]) to the
//! same header.
//!
//! Message headers in the stream ([`MessagePrefix`]: the length prefix, bit 63 for a tag
//! after it, bit 62 with it for an active message's word): a Data frame's `message_len`,
//! the first 8 payload bytes of a Stream frame and the first 8 bytes of the input are read
//! as prefixes, which never fails and rebuilds the same prefix from its length, tagging and
//! kind (but a bit 62 without bit 63, which means nothing); the header is 8 or 16 bytes and the body the
//! payload plus the tag, without overflow.
#![no_main]

use libfuzzer_sys::fuzz_target;
use std::sync::LazyLock;

use quiver_wire::frame::{
    dest_id, destination, parse_stream_split, short_id, Destination, Frame, FrameError, FrameKey,
    FrameKeys, FrameType, MessagePrefix, MoreSackRanges, SackRange, FRAME_SECRET_LEN,
    MAX_HEADER_LEN, MAX_MESSAGE_PAYLOAD, MESSAGE_ACTIVE, MESSAGE_PREFIX_LEN, MESSAGE_TAG_LEN,
    STREAM_HEADER_LEN, STREAM_TAG,
};

/// The high 40 bits of the connection id a Stream frame is parsed for.
const STREAM_ID_HIGH: u64 = 0x0102_0304_0500_0000;
/// The secret of the key frames are verified under (quiver-wire's frame tests and
/// `fuzz/seedgen` use the same).
const FUZZ_SECRET: [u8; FRAME_SECRET_LEN] = [0x5A; FRAME_SECRET_LEN];

static KEY: LazyLock<FrameKey> = LazyLock::new(|| FrameKey::new(&FUZZ_SECRET));
static OTHER: LazyLock<FrameKey> = LazyLock::new(|| FrameKey::new(&[0xA5; FRAME_SECRET_LEN]));

fn keys() -> FrameKeys<'static> {
    FrameKeys {
        job: &KEY,
        connection: Some(&KEY),
    }
}

/// The invariants of a message's length prefix read from `raw` (module docs).
fn check_prefix(raw: u64) {
    let prefix = MessagePrefix::from_raw(raw);
    assert_eq!(prefix.raw(), raw);
    assert!(prefix.payload_len() <= MAX_MESSAGE_PAYLOAD);
    let tag_len = if prefix.tagged() { MESSAGE_TAG_LEN } else { 0 };
    assert_eq!(prefix.tag_len(), tag_len);
    assert_eq!(prefix.header_len(), MESSAGE_PREFIX_LEN + tag_len);
    assert_eq!(prefix.body_len(), prefix.payload_len() + tag_len);
    let rebuilt = if prefix.is_active() {
        MessagePrefix::active(prefix.payload_len())
    } else {
        MessagePrefix::new(prefix.payload_len(), u64::from(prefix.tagged()))
    };
    // Bit 62 without the tag bit announces nothing: the one bit a rebuild does not keep.
    let stray = if prefix.tagged() { 0 } else { MESSAGE_ACTIVE };
    assert_eq!(rebuilt.raw(), raw & !stray);
    assert!(!prefix.is_active() || prefix.tagged());
}

/// The first 8 bytes of `bytes` as a little-endian prefix, if there are 8.
fn first_prefix(bytes: &[u8]) -> Option<u64> {
    Some(u64::from_le_bytes(bytes.get(..8)?.try_into().ok()?))
}

fuzz_target!(|data: &[u8]| {
    if let Some(raw) = first_prefix(data) {
        check_prefix(raw);
    }
    let peeked = destination(data);
    let full_peek = dest_id(data);
    let local_id = match peeked {
        Some(Destination::Short(short)) => STREAM_ID_HIGH | u64::from(short),
        _ => STREAM_ID_HIGH,
    };
    let parsed = Frame::parse(data, keys());
    if let Ok(frame) = &parsed {
        assert_eq!(peeked, Some(Destination::Id(frame.header().dest_id)));
        assert_eq!(full_peek, Some(frame.header().dest_id));
        let unchecked = Frame::parse_unauthenticated(data).expect("a frame parses unchecked");
        assert_eq!(unchecked.header(), frame.header());
        let frame_type = frame.header().frame_type;
        let other = FrameKeys {
            job: &OTHER,
            connection: Some(&OTHER),
        };
        // Under another key only a Handshake frame (public key) verifies.
        assert_eq!(
            Frame::parse(data, other).is_ok(),
            frame_type == FrameType::Handshake
        );
        if !matches!(frame_type, FrameType::Handshake | FrameType::Reset) {
            assert_eq!(
                Frame::parse(data, FrameKeys::job_only(&KEY)),
                Err(FrameError::NoKey { frame_type })
            );
        }
    }
    if parsed == Err(FrameError::NeedsConnectionId) {
        assert!(matches!(peeked, Some(Destination::Short(_)) | None));
    }
    // The same bytes in two pieces (a scattering receive): what parses whole parses split.
    if data.len() >= STREAM_HEADER_LEN {
        let (head, payload) = data.split_at(STREAM_HEADER_LEN);
        let split = parse_stream_split(head, payload, local_id, keys());
        if data[0] == STREAM_TAG {
            let whole = Frame::parse_for(data, local_id, keys());
            assert_eq!(split.ok(), whole.ok().map(|frame| *frame.header()));
        } else {
            assert!(split.is_err());
        }
    }
    if let Ok(frame) = Frame::parse_for(data, local_id, keys()) {
        if let Some(Destination::Short(short)) = peeked {
            assert_eq!(short, short_id(frame.header().dest_id));
            assert_eq!(frame.header().dest_id, local_id);
        }
        let mut out = [0u8; MAX_HEADER_LEN];
        let len = frame
            .header()
            .emit(keys(), &mut out, frame.payload())
            .expect("a parsed header emits");
        assert_eq!(len, frame.header_len());
        assert_eq!(&out[..len], &data[..len]);
        assert_eq!(frame.payload(), &data[len..]);
        match frame.header().frame_type {
            FrameType::Data => check_prefix(frame.header().message_len),
            FrameType::Stream => {
                if let Some(raw) = first_prefix(frame.payload()) {
                    check_prefix(raw);
                }
            }
            _ => {}
        }
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
