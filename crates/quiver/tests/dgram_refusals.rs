//! Every datagram the udp engine drops is counted: a stranger's plain udp socket sends
//! one datagram of each kind the engine refuses at a running context (rank 0 of a two-rank
//! job, with two links while rank 1 has one), and the context's `DatagramRefusals` show
//! each, one by one.

mod support;

use std::net::{Ipv4Addr, SocketAddr, UdpSocket};
use std::time::{Duration, Instant};

use quiver::{Config, Context, DatagramRefusals, Endpoint, Error, TransportKind};
use quiver_proto::handshake::{job_frame_key, ConnectRequest, Initiator, JobKey};
use quiver_wire::frame::{FrameHeader, FrameKey, FrameKeys, FrameType, STREAM_TAG};
use quiver_wire::handshake::{Challenge, ChallengeStatus, MAX_MESSAGE_LEN, NONCE_LEN};

const JOB: u64 = 0x5EF0_5ED0_0000_0001;

/// The job's frame key of the context (its job key is `[5; 32]`).
fn job_key() -> FrameKey {
    job_frame_key(&JobKey::from_bytes([5; 32]))
}

/// A datagram frame of `frame_type` from `src_id` to `dest_id` with `payload`; a connection
/// frame under a key of no connection of the context's (it names no connection either).
fn frame(frame_type: FrameType, dest_id: u64, src_id: u64, payload: &[u8]) -> Vec<u8> {
    let mut out = vec![0u8; 256 + payload.len()];
    let (job, connection) = (job_key(), FrameKey::new(&[0x42; 32]));
    let keys = FrameKeys {
        job: &job,
        connection: Some(&connection),
    };
    let len = FrameHeader::new(frame_type, dest_id, src_id)
        .emit(keys, &mut out, payload)
        .expect("emit");
    out.truncate(len);
    out.extend_from_slice(payload);
    out
}

/// A Hello frame (connection id 0) of job `job_id` from rank `src_rank`, MACed with the
/// job key `[key; 32]` (the context's is `[5; 32]`).
fn hello_keyed(job_id: u64, src_rank: u32, key: u8) -> Vec<u8> {
    let request = ConnectRequest {
        job_id,
        src_rank,
        src_port: 1,
        dst_port: 1,
    };
    let mut initiator = Initiator::new(JobKey::from_bytes([key; 32]), request, [9; NONCE_LEN]);
    let mut payload = [0u8; MAX_MESSAGE_LEN];
    let len = initiator
        .poll_transmit(&mut payload)
        .expect("room")
        .expect("a Hello");
    frame(FrameType::Handshake, 0, 0x77, &payload[..len])
}

/// A Hello of job `job_id` from rank `src_rank` that proves the context's key.
fn hello(job_id: u64, src_rank: u32) -> Vec<u8> {
    hello_keyed(job_id, src_rank, 5)
}

/// Polls `endpoint`'s engine (non-blocking receives) until `context`'s refusals satisfy
/// `done`, or 10 s passed; returns them.
fn refusals_once(
    context: &Context,
    endpoint: &mut Endpoint,
    done: impl Fn(&DatagramRefusals) -> bool,
) -> DatagramRefusals {
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut buffer = [0u8; 64];
    loop {
        match endpoint.try_recv(&mut buffer) {
            Err(Error::WouldBlock) => {}
            other => panic!("nothing should arrive: {other:?}"),
        }
        let refused = context.stats().datagram.expect("udp runs").refused;
        if done(&refused) || Instant::now() > deadline {
            return refused;
        }
        std::thread::sleep(Duration::from_millis(1));
    }
}

#[test]
fn every_dropped_datagram_is_counted() {
    let port = support::free_port(2);
    let other = support::free_port(1);
    let own: Vec<SocketAddr> = (1..=2u8)
        .map(|host| (Ipv4Addr::new(127, 0, 0, host), port).into())
        .collect();
    let links = vec![own.clone(), vec![(Ipv4Addr::LOCALHOST, other).into()]];
    let config = Config {
        transports: vec![TransportKind::Udp],
        ..Config::default()
    };
    let context = support::two_rank_context(0, JOB, 5, links, &config);
    let mut endpoint = context.endpoint(1).expect("endpoint");
    let stranger = UdpSocket::bind((Ipv4Addr::LOCALHOST, 0)).expect("bind");
    stranger
        .set_read_timeout(Some(Duration::from_secs(5)))
        .unwrap();

    let mut corrupt_hello = hello(JOB, 1);
    let last = corrupt_hello.len() - 1;
    corrupt_hello[last] ^= 0xFF;
    let mut stream = vec![STREAM_TAG, 0x21, 0x43, 0x65];
    stream.resize(64, 0);
    type Count = fn(&DatagramRefusals) -> u64;
    let kinds: [(&str, Vec<u8>, SocketAddr, Count); 8] = [
        ("garbage", b"not a frame of ours".to_vec(), own[0], |r| {
            r.undecodable
        }),
        ("stream frame, unknown short id", stream, own[0], |r| {
            r.unknown_short_id
        }),
        (
            "reset for an unknown id",
            frame(FrameType::Reset, 0xDEAD, 5, &[]),
            own[0],
            |r| r.unknown_id,
        ),
        (
            "ping for an unknown id",
            frame(FrameType::Ping, 0xDEAD, 5, &[]),
            own[0],
            |r| r.resets_sent,
        ),
        ("corrupt hello", corrupt_hello, own[0], |r| {
            r.malformed_hellos
        }),
        ("hello of another job", hello(JOB ^ 1, 1), own[0], |r| {
            r.refused_hellos
        }),
        (
            "hello without the job key",
            hello_keyed(JOB, 1, 6),
            own[0],
            |r| r.unproven_hellos,
        ),
        (
            "hello on a link rank 1 does not have",
            hello(JOB, 1),
            own[1],
            |r| r.unshared_paths,
        ),
    ];
    let mut before = DatagramRefusals::default();
    for (what, datagram, to, count) in kinds {
        // Refusals of Hellos go out at most one per millisecond (the router's limit).
        std::thread::sleep(Duration::from_millis(2));
        stranger.send_to(&datagram, to).expect("send");
        let after = refusals_once(&context, &mut endpoint, |r| r.total() > before.total());
        assert_eq!(count(&after), count(&before) + 1, "{what}: {after:#?}");
        assert_eq!(after.total(), before.total() + 1, "{what}: {after:#?}");
        before = after;
    }
    // The Ping was answered with a Reset naming it.
    let mut reset = [0u8; 256];
    let (len, from) = stranger.recv_from(&mut reset).expect("a reset");
    assert_eq!(from, own[0]);
    let job = job_key();
    let reset = quiver_wire::frame::Frame::parse(&reset[..len], FrameKeys::job_only(&job))
        .expect("a frame");
    assert_eq!(reset.header().frame_type, FrameType::Reset);
    assert_eq!(reset.header().dest_id, 5);
    // The Hellos of another job and without the key were answered with refusals naming why,
    // each shorter than the Hello it answers; the job's Hello on an unshared link got none.
    let hello_len = hello(JOB, 1).len();
    for status in [ChallengeStatus::WrongJob, ChallengeStatus::WrongKey] {
        let mut reply = [0u8; 256];
        let (len, from) = stranger.recv_from(&mut reply).expect("a refusal");
        assert_eq!(from, own[0]);
        assert!(len < hello_len, "{len} bytes answer a Hello of {hello_len}");
        let frame = quiver_wire::frame::Frame::parse(&reply[..len], FrameKeys::job_only(&job))
            .expect("a frame");
        assert_eq!(frame.header().frame_type, FrameType::Handshake);
        assert_eq!(frame.header().dest_id, 0x77);
        let challenge = Challenge::new_checked(frame.payload()).expect("a Challenge");
        assert_eq!(challenge.status_code(), status.code());
    }
}
