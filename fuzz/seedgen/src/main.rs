//! Writes the fuzz seeds that hold datagram frames, from the frame format this checkout
//! speaks: `fuzz/corpus/frame_parse/seed-*` (one frame of every type, each with a valid
//! integrity check, so that the fuzzer starts past the checksum), the `conn_datagrams`
//! seeds that carry frames (`seed-accept`, `seed-raw-*`), and the `router_datagrams` seeds
//! (op sequences; `seed-raw-hello` carries a Hello). Run it after a change of the wire
//! format (`cd fuzz/seedgen && cargo run --release`); the other seeds are op sequences
//! without frame bytes and stay as they are. quiver-wire's test
//! `frame::tests::fuzz_seeds_reach_past_the_checksum` fails while the frame seeds are stale.

use std::fs;
use std::path::{Path, PathBuf};

use quiver_proto::handshake::{job_frame_key, ConnectRequest, JobKey};
use quiver_proto::reliable::{ReliableConfig, ReliableConnection};
use quiver_wire::frame::{
    flags, Frame, FrameHeader, FrameKey, FrameKeys, FrameType, MoreSackRanges, SackRange,
    SackRanges, FRAME_SECRET_LEN, MAX_HEADER_LEN,
};

/// The connection ids the `conn_datagrams` target gives its two ends (`A_ID`, `B_ID`).
const A_ID: u64 = 0xaaaa;
const B_ID: u64 = 0xbbbb;
/// `conn_datagrams`' job id and key.
const JOB_ID: u64 = 0x77;
const KEY: [u8; 32] = [9; 32];
/// The id `frame_parse` verifies a Stream frame for: its high 40 bits are the target's
/// `STREAM_ID_HIGH`, its low 24 bits the frame's short id.
const STREAM_DEST: u64 = 0x0102_0304_0506_0708;

/// `conn_datagrams`' connection configuration (a copy of its `config()`).
fn fuzz_config() -> ReliableConfig {
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

/// The secret of the key `frame_parse` verifies frames under (quiver-wire's frame tests use
/// it too).
const FRAME_PARSE_SECRET: [u8; FRAME_SECRET_LEN] = [0x5A; FRAME_SECRET_LEN];

/// A frame under `key` (job and connection key alike).
fn frame_under(key: &FrameKey, header: &FrameHeader, payload: &[u8]) -> Vec<u8> {
    let keys = FrameKeys {
        job: key,
        connection: Some(key),
    };
    let mut out = [0u8; MAX_HEADER_LEN];
    let len = header
        .emit(keys, &mut out, payload)
        .expect("a valid seed header");
    let mut datagram = out[..len].to_vec();
    datagram.extend_from_slice(payload);
    datagram
}

/// A frame from b to a in `conn_datagrams`: under b's key (its Reset under the job's).
fn frame_from_b(b: &ReliableConnection, header: &FrameHeader, payload: &[u8]) -> Vec<u8> {
    let job = job_frame_key(&JobKey::from_bytes(KEY));
    let keys = FrameKeys {
        job: &job,
        connection: b.frame_send_key(),
    };
    let mut out = [0u8; MAX_HEADER_LEN];
    let len = header
        .emit(keys, &mut out, payload)
        .expect("a valid seed header");
    let mut datagram = out[..len].to_vec();
    datagram.extend_from_slice(payload);
    datagram
}

fn header(frame_type: FrameType, dest_id: u64, src_id: u64, flag_bits: u8) -> FrameHeader {
    let mut header = FrameHeader::new(frame_type, dest_id, src_id);
    header.flags = flag_bits;
    header
}

fn sack(ranges: &[(u64, u64)]) -> SackRanges {
    let mut sack = SackRanges::new();
    for &(start, end) in ranges {
        sack.push(SackRange { start, end });
    }
    sack
}

/// A genuine Hello of the `conn_datagrams` job, in its Handshake frame (dest id 0).
fn hello() -> Vec<u8> {
    let request = ConnectRequest {
        job_id: JOB_ID,
        src_rank: 0,
        src_port: 1,
        dst_port: 2,
    };
    let mut initiator = ReliableConnection::connect(
        fuzz_config(),
        JobKey::from_bytes(KEY),
        request,
        0xcccc,
        [4; 16],
        0,
    )
    .expect("valid config");
    let mut out = [0u8; MAX_HEADER_LEN];
    let transmit = initiator.poll_transmit(0, &mut out).expect("a Hello");
    let mut datagram = out[..transmit.header_len].to_vec();
    datagram.extend_from_slice(transmit.payload);
    datagram
}

fn frame_parse_seeds() -> Vec<(&'static str, Vec<u8>)> {
    let key = FrameKey::new(&FRAME_PARSE_SECRET);
    let frame = |header: &FrameHeader, payload: &[u8]| frame_under(&key, header, payload);
    let mut data = header(FrameType::Data, A_ID, B_ID, flags::ACK);
    data.credit = 0x1000;
    data.message_len = 5;
    data.stream_offset = 8;
    let mut ack_sack = header(FrameType::Ack, A_ID, B_ID, flags::ACK);
    ack_sack.cumulative_ack = 3;
    ack_sack.credit = 0x2000;
    ack_sack.sack = sack(&[(5, 6), (8, 11)]);
    let mut ack_more = header(FrameType::Ack, 1, 2, flags::ACK | flags::SACK_TRUNCATED);
    ack_more.cumulative_ack = 100;
    ack_more.credit = 0x10_0000;
    ack_more.sack = sack(&[(102, 104)]);
    let more = [
        SackRange {
            start: 110,
            end: 111,
        },
        SackRange {
            start: 200,
            end: 300,
        },
    ];
    let mut more_payload = [0u8; 16];
    MoreSackRanges::emit(100, Some(104), &more, &mut more_payload).expect("valid ranges");
    let mut close = header(
        FrameType::Close,
        A_ID,
        B_ID,
        flags::ACK | flags::ACK_REQUESTED,
    );
    close.packet_number = 4;
    close.cumulative_ack = 2;
    close.credit = 0x1000;
    close.stream_offset = 100;
    let mut ping = header(
        FrameType::Ping,
        A_ID,
        B_ID,
        flags::ACK | flags::ACK_REQUESTED,
    );
    ping.credit = 0x1000;
    let mut ping_reply = header(FrameType::Ack, 1, 2, flags::ACK | flags::PING_REPLY);
    ping_reply.packet_number = 0x41;
    let mut stream = FrameHeader::new(FrameType::Stream, STREAM_DEST, 0);
    stream.packet_number = 0x8000_0001;
    stream.stream_offset = 0x4000;
    vec![
        ("seed-data", frame(&data, b"hello")),
        ("seed-ack-sack", frame(&ack_sack, &[])),
        ("seed-ack-more-ranges", frame(&ack_more, &more_payload)),
        ("seed-close", frame(&close, &[])),
        ("seed-handshake", hello()),
        ("seed-ping", frame(&ping, &[])),
        ("seed-ping-reply", frame(&ping_reply, &[])),
        (
            "seed-reset",
            frame(&header(FrameType::Reset, A_ID, B_ID, 0), &[]),
        ),
        ("seed-stream", frame(&stream, b"raw stream bytes")),
    ]
}

/// `conn_datagrams` op 0 (raw datagram to a on path 0): `[0][len u8][bytes]`.
fn raw_op(datagram: &[u8]) -> Vec<u8> {
    let mut op = vec![
        0,
        u8::try_from(datagram.len()).expect("a seed frame under 256 bytes"),
    ];
    op.extend_from_slice(datagram);
    op
}

fn conn_datagrams_seeds() -> Vec<(&'static str, Vec<u8>)> {
    let (_, b) = established_pair();
    let frame = |header: &FrameHeader, payload: &[u8]| frame_from_b(&b, header, payload);
    // Op 6: a genuine Hello handed to ReliableConnection::accept (answered with a Challenge).
    let hello = hello();
    let mut accept = vec![
        6,
        u8::try_from(hello.len()).expect("a Hello under 256 bytes"),
    ];
    accept.extend_from_slice(&hello);
    // Frames from b to a with valid checks, none of which delivers data (the target's prefix
    // check allows data only from b itself or the forge op): a ping a answers, an ack with
    // SACK ranges for packets a never sent, a reset. Each followed by op 5 (pump, 4 rounds)
    // and op 3 (b writes 100 bytes), op 5 and op 4 (a reads).
    let tail = [5, 3, 3, 100, 0, 5, 3, 4, 0xff, 0];
    let mut ping = header(
        FrameType::Ping,
        A_ID,
        B_ID,
        flags::ACK | flags::ACK_REQUESTED,
    );
    ping.packet_number = 64;
    ping.credit = 4096;
    let mut ack = header(FrameType::Ack, A_ID, B_ID, flags::ACK);
    // Plain Acks are numbered; one not above the last b sent is refused as a replay.
    ack.packet_number = 1000;
    ack.cumulative_ack = 0;
    ack.credit = 8192;
    ack.sack = sack(&[(2, 3), (5, 9)]);
    let reset = header(FrameType::Reset, A_ID, B_ID, 0);
    let with_tail = |datagram: Vec<u8>| {
        let mut seed = raw_op(&datagram);
        seed.extend_from_slice(&tail);
        seed
    };
    vec![
        ("seed-accept", accept),
        ("seed-raw-ping", with_tail(frame(&ping, &[]))),
        ("seed-raw-ack", with_tail(frame(&ack, &[]))),
        ("seed-raw-reset", with_tail(frame(&reset, &[]))),
    ]
}

/// Moves every pending datagram of `from` into `to` (path 0, time 0).
fn pump(from: &mut ReliableConnection, to: &mut ReliableConnection) -> bool {
    let mut out = [0u8; MAX_HEADER_LEN];
    let mut datagrams = Vec::new();
    while let Some(transmit) = from.poll_transmit(0, &mut out) {
        let mut datagram = out[..transmit.header_len].to_vec();
        datagram.extend_from_slice(transmit.payload);
        datagrams.push(datagram);
    }
    let moved = !datagrams.is_empty();
    for datagram in datagrams {
        to.handle_datagram(0, 0, &datagram);
    }
    moved
}

/// Checks that the frames of the `conn_datagrams` seeds get past the integrity check of an
/// established connection like the target's: a genuine Hello is accepted, and a answers the
/// raw Ping with a PING_REPLY Ack.
/// The target's established pair (`conn_datagrams`' `establish`: the same ids, nonces and
/// key, so the same frame keys).
fn established_pair() -> (ReliableConnection, ReliableConnection) {
    let key = JobKey::from_bytes(KEY);
    let request = ConnectRequest {
        job_id: JOB_ID,
        src_rank: 0,
        src_port: 1,
        dst_port: 2,
    };
    let mut a = ReliableConnection::connect(fuzz_config(), key.clone(), request, A_ID, [1; 16], 0)
        .expect("valid config");
    let mut out = [0u8; MAX_HEADER_LEN];
    let transmit = a.poll_transmit(0, &mut out).expect("a Hello");
    let mut hello = out[..transmit.header_len].to_vec();
    hello.extend_from_slice(transmit.payload);
    let (mut b, _) =
        ReliableConnection::accept(fuzz_config(), key, JOB_ID, &hello, 0, B_ID, [2; 16], 0)
            .expect("our own Hello");
    while pump(&mut b, &mut a) | pump(&mut a, &mut b) {}
    (a, b)
}

fn check_conn_datagrams_frames() {
    let key = JobKey::from_bytes(KEY);
    let (mut a, _) = established_pair();
    let mut out = [0u8; MAX_HEADER_LEN];
    ReliableConnection::accept(
        fuzz_config(),
        key,
        JOB_ID,
        &self::hello(),
        0,
        0x5555,
        [3; 16],
        0,
    )
    .expect("the seed's Hello is accepted");
    let seeds = conn_datagrams_seeds();
    let ping_seed = &seeds
        .iter()
        .find(|(name, _)| *name == "seed-raw-ping")
        .expect("seed")
        .1;
    let ping = &ping_seed[2..2 + usize::from(ping_seed[1])];
    a.handle_datagram(1, 0, ping);
    let mut answered = false;
    while let Some(transmit) = a.poll_transmit(1, &mut out) {
        let frame = Frame::parse_unauthenticated(&out[..transmit.header_len])
            .expect("a's own frame");
        answered |= frame.header().frame_type == FrameType::Ack
            && frame.header().flags & flags::PING_REPLY != 0
            && frame.header().packet_number == 64;
    }
    assert!(answered, "a did not answer the seed's Ping");
}

/// `router_datagrams` seeds: op sequences (the op byte's bit 4 picks node 0 or 1) that
/// reach each verdict of the router: a Hello answered and its repeats (on another path,
/// after its connection is forgotten), a connection established through both routers,
/// frames for known and forgotten ids (Resets), crossed connects, a closed port and a path
/// the nodes do not share, a mangled Hello, and the raw bytes of a genuine Hello.
fn router_datagrams_seeds() -> Vec<(&'static str, Vec<u8>)> {
    const NODE_1: u8 = 0x10;
    let (raw, hello, mangled, connect, forget, time, pump, forge, stream, host) =
        (0, 1, 2, 3, 4, 5, 6, 7, 8, 9);
    // A Hello from rank 0, port 1 to port 2 of node 1, initiator id 5, path 0.
    let hello_op = [NODE_1 | hello, 0, 1, 2, 4, 0];
    let repeat_on_path_1 = [NODE_1 | hello, 0, 1, 2, 4, 1];
    let genuine = self::hello();
    let mut raw_hello = vec![
        NODE_1 | raw,
        0,
        u8::try_from(genuine.len()).expect("a Hello under 256 bytes"),
    ];
    raw_hello.extend_from_slice(&genuine);
    raw_hello.extend_from_slice(&[pump, 3]);
    vec![
        (
            "seed-hello-repeat-forget",
            [
                &hello_op[..],
                &repeat_on_path_1,
                &[NODE_1 | forget, 0],
                &hello_op,
                &[pump, 2],
            ]
            .concat(),
        ),
        (
            // Node 1 forgets the connection; node 0's keepalive (after 4 x 65 ms) gets a
            // Reset.
            "seed-connect-pump-forge",
            vec![
                connect, 1, 2, pump, 7, NODE_1 | forge, 4, 0, 9, forge, 1, 0, 3,
                NODE_1 | stream, 0, NODE_1 | forget, 0, time, 0xff, 0xff, time, 0xff, 0xff,
                time, 0xff, 0xff, time, 0xff, 0xff, pump, 3,
            ],
        ),
        (
            "seed-crossed",
            vec![connect, 1, 2, NODE_1 | connect, 2, 1, pump, 7, time, 0x10, 0x27, pump, 7],
        ),
        (
            // A closed port, another job, a path not shared, a mangled Hello.
            "seed-refused-rejected-dropped",
            [
                &[NODE_1 | host, 0, 0][..],
                &[NODE_1 | hello, 0x80, 1, 2, 7, 0],
                &hello_op,
                &[NODE_1 | host, 0xff, 0],
                &[NODE_1 | hello, 1, 3, 3, 9, 1],
                &[NODE_1 | mangled, 0, 1, 2, 6, 0, 40, 0x10],
                &[pump, 3],
            ]
            .concat(),
        ),
        (
            "seed-unknown-ids",
            vec![forge, 3, 255, 7, stream, 255, raw, 0, 3, b'Q', b'D', 5, pump, 1],
        ),
        ("seed-raw-hello", raw_hello),
    ]
}

fn write(directory: &Path, seeds: &[(&str, Vec<u8>)]) {
    for (name, bytes) in seeds {
        let path = directory.join(name);
        fs::write(&path, bytes).unwrap_or_else(|error| panic!("{}: {error}", path.display()));
        println!("{:5} bytes  {}", bytes.len(), path.display());
    }
}

fn main() {
    let corpus = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../corpus");
    let frame_seeds = frame_parse_seeds();
    for (name, bytes) in &frame_seeds {
        let local_id = if *name == "seed-stream" {
            STREAM_DEST
        } else {
            A_ID
        };
        let key = FrameKey::new(&FRAME_PARSE_SECRET);
        let keys = FrameKeys {
            job: &key,
            connection: Some(&key),
        };
        Frame::parse_for(bytes, local_id, keys)
            .unwrap_or_else(|error| panic!("{name} does not parse: {error}"));
    }
    check_conn_datagrams_frames();
    write(&corpus.join("frame_parse"), &frame_seeds);
    write(&corpus.join("conn_datagrams"), &conn_datagrams_seeds());
    let router = corpus.join("router_datagrams");
    fs::create_dir_all(&router).unwrap_or_else(|error| panic!("{}: {error}", router.display()));
    write(&router, &router_datagrams_seeds());
}
