//! Arbitrary datagram sequences and time steps fed into an established reliable connection
//! (`quiver_proto::reliable`) and into `accept`: no panic, memory within
//! `ReliableConfig::memory_bound_bytes`, and what the application reads is always a prefix
//! of what the genuine peer wrote, until the `forge` op injects a frame with valid ids and
//! tag (the forger holds b's frame key, as the peer's own process would: without it every
//! frame fails the authenticator, decision 0067, and the fuzzer would reach nothing).
//!
//! Input: a sequence of ops, each one byte followed by its arguments:
//! - 0 raw: `[len u8][bytes]` handed to `a.handle_datagram` on path `(op >> 3) & 3` (the
//!   connections have 3 paths, so path 3 is out of range);
//! - 1 forge: header fields from the input (any frame type, Stream included), emitted under
//!   b's keys with a's / b's ids;
//! - 2 time: `[u16]` microseconds forward, then `handle_timeout` on both sides if due;
//! - 3 write: `[u16 len]` b starts a message of that length and writes a pattern;
//! - 4 read: a reads up to `[u16]` bytes;
//! - 5 pump: genuine datagrams are exchanged between a and b (`[u8]` rounds, lossless);
//! - 6 accept: `[len u8][bytes]` handed to `ReliableConnection::accept`;
//! - 7 close: a or b (`[u8]` bit 0) closes.
//!
//! Genuine datagrams (pump) arrive on the path their `Transmit` names.
#![no_main]

use libfuzzer_sys::fuzz_target;
use quiver_proto::handshake::{job_frame_key, ConnectRequest, JobKey};
use quiver_proto::reliable::{Nanos, ReliableConfig, ReliableConnection};
use quiver_wire::frame::{
    FrameHeader, FrameKeys, FrameType, SackRange, SackRanges, MAX_HEADER_LEN,
};

const JOB_ID: u64 = 0x77;
const A_ID: u64 = 0xaaaa;
const B_ID: u64 = 0xbbbb;

fn config() -> ReliableConfig {
    ReliableConfig {
        send_buffer_bytes: 4096,
        recv_window_bytes: 4096,
        max_in_flight_datagrams: 32,
        max_datagram_bytes: 600,
        max_sack_ranges: 4,
        path_count: 3,
        compact_data_frames: true,
        ..ReliableConfig::default()
    }
}

struct Input<'a>(&'a [u8]);

impl Input<'_> {
    fn byte(&mut self) -> Option<u8> {
        let (&first, rest) = self.0.split_first()?;
        self.0 = rest;
        Some(first)
    }
    fn u16(&mut self) -> u16 {
        u16::from_le_bytes([self.byte().unwrap_or(0), self.byte().unwrap_or(0)])
    }
    fn u32(&mut self) -> u32 {
        u32::from(self.u16()) | u32::from(self.u16()) << 16
    }
    fn bytes(&mut self, len: usize) -> &[u8] {
        let len = len.min(self.0.len());
        let (taken, rest) = self.0.split_at(len);
        self.0 = rest;
        taken
    }
}

/// Moves every pending datagram of `from` into `to`.
fn pump(now: Nanos, from: &mut ReliableConnection, to: &mut ReliableConnection) -> bool {
    let mut header = [0u8; MAX_HEADER_LEN];
    let mut moved = false;
    let mut datagrams = Vec::new();
    while let Some(transmit) = from.poll_transmit(now, &mut header) {
        let mut datagram = header[..transmit.header_len].to_vec();
        datagram.extend_from_slice(transmit.payload);
        datagrams.push((transmit.path, datagram));
        if datagrams.len() > 10_000 {
            panic!("poll_transmit does not stop");
        }
    }
    for (path, datagram) in datagrams {
        to.handle_datagram(now, path, &datagram);
        moved = true;
    }
    moved
}

fn establish() -> (ReliableConnection, ReliableConnection) {
    let request = ConnectRequest {
        job_id: JOB_ID,
        src_rank: 0,
        src_port: 1,
        dst_port: 2,
    };
    let key = JobKey::from_bytes([9; 32]);
    let mut a = ReliableConnection::connect(config(), key.clone(), request, A_ID, [1; 16], 0)
        .expect("valid config");
    let mut header = [0u8; MAX_HEADER_LEN];
    let transmit = a.poll_transmit(0, &mut header).expect("a Hello");
    let mut hello = header[..transmit.header_len].to_vec();
    hello.extend_from_slice(transmit.payload);
    let (mut b, _) = ReliableConnection::accept(config(), key, JOB_ID, &hello, 0, B_ID, [2; 16], 0)
        .expect("our own Hello");
    while pump(0, &mut b, &mut a) | pump(0, &mut a, &mut b) {}
    while a.poll_event().is_some() {}
    while b.poll_event().is_some() {}
    (a, b)
}

fn forge(input: &mut Input<'_>, a: &ReliableConnection, b: &ReliableConnection) -> Vec<u8> {
    let type_byte = input.byte().unwrap_or(0);
    let mut header = FrameHeader::new(
        FrameType::from_code(type_byte % 7 + 1).unwrap_or(FrameType::Data),
        if type_byte & 0x80 != 0 {
            0
        } else {
            a.local_id()
        },
        B_ID,
    );
    header.flags = input.byte().unwrap_or(0) & 3;
    header.packet_number = u64::from(input.u16());
    header.cumulative_ack = u64::from(input.u16());
    header.credit = u64::from(input.u32());
    header.message_id = u64::from(input.byte().unwrap_or(0));
    header.message_len = u64::from(input.u32());
    header.fragment_offset = u64::from(input.u16());
    header.stream_offset = u64::from(input.u32());
    let mut sack = SackRanges::new();
    let mut cursor = header.cumulative_ack;
    for _ in 0..input.byte().unwrap_or(0) % 5 {
        let start = cursor + 1 + u64::from(input.byte().unwrap_or(0));
        let end = start + 1 + u64::from(input.byte().unwrap_or(0));
        sack.push(SackRange { start, end });
        cursor = end;
    }
    header.sack = sack;
    if header.frame_type == FrameType::Stream {
        // A Stream frame has no flags and no SACK ranges.
        header.flags = 0;
        header.sack = SackRanges::new();
    }
    let payload_len = usize::from(input.byte().unwrap_or(0)) * 3;
    let payload = input.bytes(payload_len).to_vec();
    let mut out = [0u8; MAX_HEADER_LEN];
    let job = job_frame_key(&JobKey::from_bytes([9; 32]));
    let keys = FrameKeys {
        job: &job,
        connection: b.frame_send_key(),
    };
    let Ok(len) = header.emit(keys, &mut out, &payload) else {
        // Only when b has no key (closed and failed connections keep theirs).
        return Vec::new();
    };
    let mut datagram = out[..len].to_vec();
    datagram.extend_from_slice(&payload);
    datagram
}

fuzz_target!(|data: &[u8]| {
    let bound = config().memory_bound_bytes();
    let (mut a, mut b) = establish();
    let mut now: Nanos = 0;
    let mut input = Input(data);
    let mut written: Vec<u8> = Vec::new();
    let mut read: Vec<u8> = Vec::new();
    let mut message_counter = 0u8;
    let mut pending_write: Option<(Vec<u8>, usize)> = None;
    let mut header = [0u8; MAX_HEADER_LEN];
    let mut forged = false;
    while let Some(op) = input.byte() {
        match op % 8 {
            0 => {
                let len = usize::from(input.byte().unwrap_or(0));
                let datagram = input.bytes(len).to_vec();
                a.handle_datagram(now, usize::from((op >> 3) & 3), &datagram);
            }
            1 => {
                let datagram = forge(&mut input, &a, &b);
                a.handle_datagram(now, usize::from((op >> 3) % 3), &datagram);
                // Forged data with valid ids may change what a reads from here on.
                forged = true;
            }
            2 => {
                now += u64::from(input.u16()) * 1000;
                if a.poll_timeout().is_some_and(|at| at <= now) {
                    a.handle_timeout(now);
                }
                if b.poll_timeout().is_some_and(|at| at <= now) {
                    b.handle_timeout(now);
                }
            }
            3 => {
                let len = usize::from(input.u16());
                if pending_write.is_none() && b.start_message(len as u64).is_ok() {
                    message_counter = message_counter.wrapping_add(1);
                    let message: Vec<u8> = (0..len)
                        .map(|index| (index as u8) ^ message_counter)
                        .collect();
                    pending_write = Some((message, 0));
                }
                if let Some((message, done)) = pending_write.as_mut() {
                    let count = b.write_message(&message[*done..]);
                    written.extend_from_slice(&message[*done..*done + count]);
                    *done += count;
                    if *done == message.len() {
                        pending_write = None;
                    }
                }
            }
            4 => {
                let mut buffer = vec![0u8; usize::from(input.u16())];
                let (count, _) = a.read_message(&mut buffer);
                read.extend_from_slice(&buffer[..count]);
            }
            5 => {
                for _ in 0..=input.byte().unwrap_or(0) % 8 {
                    pump(now, &mut b, &mut a);
                    pump(now, &mut a, &mut b);
                }
            }
            6 => {
                let len = usize::from(input.byte().unwrap_or(0));
                let datagram = input.bytes(len).to_vec();
                if let Ok((mut stranger, _)) = ReliableConnection::accept(
                    config(),
                    JobKey::from_bytes([9; 32]),
                    JOB_ID,
                    &datagram,
                    usize::from((op >> 3) & 3),
                    0x5555,
                    [3; 16],
                    now,
                ) {
                    while stranger.poll_transmit(now, &mut header).is_some() {}
                    assert!(stranger.memory_bytes() <= bound);
                }
            }
            _ => {
                if input.byte().unwrap_or(0) & 1 == 0 {
                    a.close(now);
                } else {
                    b.close(now);
                }
            }
        }
        // a's own output goes nowhere unless pumped; drain it so that it is exercised.
        let mut count = 0;
        while a.poll_transmit(now, &mut header).is_some() {
            count += 1;
            assert!(count < 10_000, "poll_transmit does not stop");
        }
        while a.poll_event().is_some() {}
        while b.poll_event().is_some() {}
        assert!(a.memory_bytes() <= bound, "{} > {bound}", a.memory_bytes());
        assert!(b.memory_bytes() <= bound, "{} > {bound}", b.memory_bytes());
        // Without forged frames, a reads a prefix of the bytes b wrote (message headers are
        // not part of either).
        assert!(forged || (read.len() <= written.len() && written[..read.len()] == read[..]));
    }
});
