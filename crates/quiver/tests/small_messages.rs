//! Small messages share datagrams over udp (decision 0079): a stream of 8-byte messages
//! sent faster than the receiver takes them leaves in far fewer datagrams than messages once
//! the sender's window is full, every message arrives in order and byte-identical, the
//! receiver takes most of them from its receive window without a poll of the socket each,
//! and a lone message still leaves at once (its `send` returns with its datagram sent).
//! The xdp twin of the stream is `small_messages_share_frames` in `tests/xdp.rs`.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use quiver::{Addr, Config, Context, TransportKind};

mod support;
use support::{free_port, pattern, two_rank_context};

/// Messages of the stream.
const MESSAGES: usize = 20_000;
/// Their size.
const SIZE: usize = 8;

/// Each test's job id differs (the shm listener is named after it).
static NEXT_JOB: AtomicU64 = AtomicU64::new(0);

fn contexts() -> (Context, Context) {
    let config = Config {
        transports: vec![TransportKind::Udp],
        op_timeout: Some(Duration::from_secs(60)),
        ..Config::default()
    };
    let addrs: Vec<SocketAddr> = (0..2)
        .map(|_| SocketAddr::from(([127, 0, 0, 1], free_port(1))))
        .collect();
    let links = vec![vec![addrs[0]], vec![addrs[1]]];
    let job = 0x5a11_0000_0000
        | u64::from(std::process::id()) << 8
        | NEXT_JOB.fetch_add(1, Ordering::Relaxed);
    (
        two_rank_context(0, job, 3, links.clone(), &config),
        two_rank_context(1, job, 3, links, &config),
    )
}

fn datagrams_sent(context: &Context) -> u64 {
    context
        .stats()
        .datagram
        .expect("datagram stats")
        .datagrams_sent
}

#[test]
fn small_messages_share_datagrams_and_a_lone_one_leaves_at_once() {
    let (sender, receiver) = contexts();
    std::thread::scope(|s| {
        let receive = s.spawn(|| {
            let mut ep = receiver.endpoint(1).unwrap();
            let back = ep.connect(Addr::new(0, 1)).unwrap();
            let mut buf = vec![0u8; 64];
            let (n, _) = ep.recv(&mut buf).unwrap();
            assert_eq!(&buf[..n], b"ready");
            let before = receiver.stats().datagram.unwrap().buffered_takes;
            for index in 0..MESSAGES {
                let (n, _) = ep.recv(&mut buf).unwrap();
                assert_eq!(n, SIZE, "length of message {index}");
                assert!(
                    buf[..n] == pattern(SIZE, index as u32)[..],
                    "message {index}"
                );
            }
            let buffered = receiver.stats().datagram.unwrap().buffered_takes - before;
            // Then a ping-pong: each answer alone.
            ep.send(back, b"streamed").unwrap();
            for _ in 0..10 {
                let (n, _) = ep.recv(&mut buf).unwrap();
                ep.send(back, &buf[..n]).unwrap();
            }
            buffered
        });
        let mut ep = sender.endpoint(1).unwrap();
        let conn = ep.connect(Addr::new(1, 1)).unwrap();
        ep.send(conn, b"ready").unwrap();
        let messages: Vec<Vec<u8>> = (0..MESSAGES).map(|i| pattern(SIZE, i as u32)).collect();
        let before = datagrams_sent(&sender);
        for message in &messages {
            ep.send(conn, message).unwrap();
        }
        let mut buf = [0u8; 64];
        let (n, _) = ep.recv(&mut buf).unwrap();
        assert_eq!(&buf[..n], b"streamed");
        let streamed = datagrams_sent(&sender) - before;
        // One datagram per message while the window has room (about 6,000 here; at most
        // the in-flight cap, 8,192 frames with the default 8 MiB window), then the rest
        // shared: 16 stream bytes each, up to 91 per 1472-byte datagram.
        assert!(
            streamed <= MESSAGES as u64 / 2,
            "{streamed} datagrams for {MESSAGES} messages of {SIZE} bytes"
        );
        // A lone message is not held back: its datagram is sent when `send` returns.
        for round in 0..10u32 {
            let before = datagrams_sent(&sender);
            ep.send(conn, &round.to_le_bytes()).unwrap();
            assert!(
                datagrams_sent(&sender) > before,
                "round {round}: nothing sent"
            );
            let (n, _) = ep.recv(&mut buf).unwrap();
            assert_eq!(&buf[..n], round.to_le_bytes());
        }
        let buffered = receive.join().unwrap();
        eprintln!("{streamed} datagrams for {MESSAGES} messages; {buffered} taken without a poll");
        assert!(
            buffered >= MESSAGES as u64 / 4,
            "only {buffered} of {MESSAGES} messages were taken from the receive window without a poll"
        );
    });
}

/// The general receive path (an endpoint with more than one inbound connection) takes the
/// messages that shared a frame without a poll of the socket each too: two endpoints of
/// rank 0 stream to one of rank 1, which gets every message of each in order.
#[test]
fn two_senders_into_one_endpoint_take_shared_frames_without_a_poll_each() {
    const EACH: usize = MESSAGES / 2;
    let (sender, receiver) = contexts();
    std::thread::scope(|s| {
        let receive = s.spawn(|| {
            let mut ep = receiver.endpoint(1).unwrap();
            let mut buf = vec![0u8; 64];
            let mut backs = Vec::new();
            for _ in 0..2 {
                let (n, from) = ep.recv(&mut buf).unwrap();
                assert_eq!(&buf[..n], b"ready");
                backs.push(ep.connect(from).unwrap());
            }
            for &back in &backs {
                ep.send(back, b"go").unwrap();
            }
            let before = receiver.stats().datagram.unwrap().buffered_takes;
            let mut next = [0usize; 2];
            for _ in 0..2 * EACH {
                let (n, from) = ep.recv(&mut buf).unwrap();
                let source = from.port as usize - 1;
                let index = next[source];
                let seed = (source * EACH + index) as u32;
                assert!(
                    buf[..n] == pattern(SIZE, seed)[..],
                    "message {index} of {from}"
                );
                next[source] += 1;
            }
            for &back in &backs {
                ep.send(back, b"done").unwrap();
            }
            receiver.stats().datagram.unwrap().buffered_takes - before
        });
        let mut endpoints: Vec<_> = (1..=2).map(|port| sender.endpoint(port).unwrap()).collect();
        let connections: Vec<_> = endpoints
            .iter_mut()
            .map(|ep| {
                let conn = ep.connect(Addr::new(1, 1)).unwrap();
                ep.send(conn, b"ready").unwrap();
                conn
            })
            .collect();
        let mut buf = [0u8; 16];
        for ep in &mut endpoints {
            let (n, _) = ep.recv(&mut buf).unwrap();
            assert_eq!(&buf[..n], b"go");
        }
        for (source, (ep, &conn)) in endpoints.iter_mut().zip(&connections).enumerate() {
            for index in 0..EACH {
                ep.send(conn, &pattern(SIZE, (source * EACH + index) as u32))
                    .unwrap();
            }
        }
        for ep in &mut endpoints {
            let (n, _) = ep.recv(&mut buf).unwrap();
            assert_eq!(&buf[..n], b"done");
        }
        let buffered = receive.join().unwrap();
        eprintln!("{buffered} of {} taken without a poll", 2 * EACH);
        assert!(
            buffered >= MESSAGES as u64 / 4,
            "only {buffered} messages were taken from the receive windows without a poll"
        );
    });
}
