//! Small messages share frames (docs/protocol.md, "Stream frames"; decision 0079): messages
//! queued together before a frame is built leave in as few compact Stream frames as their
//! stream bytes (each message's 8-byte length prefix and its bytes) fill, a lone message
//! leaves at once in a frame of its own, and the receiver delivers every message of every
//! frame, in order and byte-identical.

use super::*;

/// A pair with compact frames, established, its handshake's events read and nothing
/// owed either way (so that a's next data frames are Stream frames).
fn packed_pair() -> Pair {
    let config = ReliableConfig {
        compact_data_frames: true,
        ..small_config()
    };
    let mut pair = Pair::handshaken(config);
    while pair.a.poll_event().is_some() {}
    while pair.b().poll_event().is_some() {}
    while {
        pair.flush();
        pair.deliver()
    } {}
    pair
}

/// Queues `messages` on a (all written before any frame is built), takes every datagram a
/// then sends, hands them to b and reads b's messages. Returns (the payload lengths of a's
/// datagrams, each checked to be a Stream frame; the messages b read).
fn queue_send_read(pair: &mut Pair, messages: &[Vec<u8>]) -> (Vec<usize>, Vec<Vec<u8>>) {
    for message in messages {
        pair.a.start_message(message.len() as u64).unwrap();
        assert_eq!(pair.a.write_message(message), message.len());
    }
    let mut header = [0u8; frame::MAX_HEADER_LEN];
    let mut datagrams = Vec::new();
    while let Some(transmit) = pair.a.poll_transmit(pair.now, &mut header) {
        let mut datagram = header[..transmit.header_len].to_vec();
        datagram.extend_from_slice(transmit.payload);
        datagrams.push(datagram);
    }
    let mut payloads = Vec::new();
    for datagram in &datagrams {
        assert_eq!(
            datagram[0],
            frame::STREAM_TAG,
            "a full frame among the data"
        );
        payloads.push(datagram.len() - frame::STREAM_HEADER_LEN);
        let now = pair.now;
        pair.b().handle_datagram(now, 0, datagram);
    }
    let mut read = Vec::new();
    let mut buffer = vec![0u8; 1 << 16];
    while pair.b().peek_message_len().is_some() {
        let (count, complete) = pair.b().read_message(&mut buffer);
        assert!(complete, "message {} not whole", read.len());
        read.push(buffer[..count].to_vec());
    }
    (payloads, read)
}

/// Stream bytes of `messages`: each one's length prefix and its bytes.
fn stream_bytes(messages: &[Vec<u8>]) -> usize {
    messages
        .iter()
        .map(|message| message.len() + MESSAGE_HEADER_LEN as usize)
        .sum()
}

/// N messages of `size` bytes queued at once leave in ceil(N * (size + 8) / payload)
/// frames, every one full but the last, and arrive in order, byte-identical; a lone
/// message leaves at once, alone.
#[test]
fn queued_small_messages_leave_in_as_few_frames_as_their_bytes_fill() {
    let frame_payload = small_config().max_stream_payload_bytes();
    assert_eq!(frame_payload, 1456);
    // Sizes whose cut points never fall inside a length prefix (docs/protocol.md): the
    // count is exact.
    for (size, count) in [
        (8usize, 1usize),
        (8, 2),
        (8, 91),
        (8, 92),
        (8, 500),
        (0, 400),
        (24, 300),
        (100, 120),
    ] {
        let mut pair = packed_pair();
        let messages: Vec<Vec<u8>> = (0..count)
            .map(|index| patterned(size, index as u8))
            .collect();
        let (payloads, read) = queue_send_read(&mut pair, &messages);
        let total = stream_bytes(&messages);
        assert_eq!(
            payloads.len(),
            total.div_ceil(frame_payload),
            "{count} x {size} B: frames of {payloads:?}"
        );
        assert_eq!(payloads.iter().sum::<usize>(), total);
        let (last, full) = payloads.split_last().unwrap();
        assert!(full.iter().all(|&len| len == frame_payload), "{payloads:?}");
        assert!(*last <= frame_payload);
        assert_eq!(read, messages, "{count} x {size} B");
    }
}

/// One message written with nothing queued before it leaves at once: the first
/// `poll_transmit` after the write returns its frame (no timer, no waiting for more).
#[test]
fn a_lone_message_leaves_at_once() {
    let mut pair = packed_pair();
    for index in 0..20u8 {
        let message = patterned(8, index);
        let (payloads, read) = queue_send_read(&mut pair, std::slice::from_ref(&message));
        assert_eq!(payloads, [16], "message {index}");
        assert_eq!(read, [message]);
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    /// Messages of mixed sizes (empty ones, ones that end a frame inside their length prefix,
    /// ones longer than a frame; at most 48 KiB in all, within the send window) queued at
    /// once: every frame but the last is full except
    /// where the cut moved back to the start of a length prefix (at most 8 bytes short:
    /// a frame never ends inside one, nor right after the prefix of a non-empty message),
    /// and every message arrives in order, byte-identical.
    #[test]
    fn mixed_sizes_share_frames(
        sizes in proptest::collection::vec(
            prop_oneof![0usize..=16, 17usize..=200, 1400usize..=2000],
            1..24,
        )
    ) {
        let frame_payload = small_config().max_stream_payload_bytes();
        let mut pair = packed_pair();
        let messages: Vec<Vec<u8>> = sizes
            .iter()
            .enumerate()
            .map(|(index, &size)| patterned(size, index as u8))
            .collect();
        let (payloads, read) = queue_send_read(&mut pair, &messages);
        let total = stream_bytes(&messages);
        prop_assert_eq!(payloads.iter().sum::<usize>(), total);
        let (_, full) = payloads.split_last().unwrap();
        let short = MESSAGE_HEADER_LEN as usize;
        prop_assert!(
            full.iter().all(|&len| len + short >= frame_payload && len <= frame_payload),
            "frames of {:?}", payloads
        );
        prop_assert!(payloads.len() <= total.div_ceil(frame_payload - short));
        prop_assert_eq!(read, messages);
    }
}
