//! Tests of the endpoint's receive paths and closing that look inside it: the lone-edge
//! short paths against the general one, and datagram connections closing and sending in
//! place under loss.

use std::io::Write;
use std::net::{Ipv4Addr, TcpListener, TcpStream};
use std::sync::Arc;
use std::time::{Duration, Instant};

use quiver_wire::stream::StreamHeader;

use super::{Endpoint, SendRequest};
use crate::addr::Addr;
use crate::config::TransportKind;
use crate::error::{Error, Result};
use crate::transport::inbound_state::InboundState;
use crate::transport::tcp::reader::TcpReader;
use crate::transport::tcp::writer::tests::pair;

/// Rank 0's and rank 1's contexts of a two-rank job in this process, at `addrs` with
/// `config`; `tag` tells the test's job id from the other tests'.
fn two_rank_contexts(
    addrs: &[std::net::SocketAddr],
    config: &crate::Config,
    tag: u64,
) -> (crate::Context, crate::Context) {
    let job = u64::from(std::process::id()) << 20 | tag;
    let context = |rank| {
        crate::Context::builder()
            .rank(rank)
            .size(2)
            .job_id(job)
            .job_key([3; 32])
            .addrs(addrs.to_vec())
            .config(config.clone())
            .build()
            .unwrap()
    };
    (context(0), context(1))
}

/// Rank 0's endpoint of a two-rank tcp job in this process, connected to rank 1's
/// (returned too, to keep it open). Its one inbound edge then carries the stream the
/// test gives it (`lone_edge`), so the test can write any bytes to it.
fn tcp_endpoint() -> (crate::Context, Endpoint, crate::Context, Endpoint) {
    let addrs: Vec<std::net::SocketAddr> = (0..2)
        .map(|_| {
            let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).unwrap();
            listener.local_addr().unwrap()
        })
        .collect();
    let config = crate::Config {
        transports: vec![TransportKind::Tcp],
        ..crate::Config::default()
    };
    let (ctx0, ctx1) = two_rank_contexts(&addrs, &config, 0x7e57);
    let ep1 = ctx1.endpoint(0).unwrap();
    let mut ep0 = ctx0.endpoint(0).unwrap();
    ep0.connect(Addr::new(1, 0)).unwrap();
    ep0.set_timeout(Some(Duration::from_secs(5)));
    (ctx0, ep0, ctx1, ep1)
}

/// Makes `stream` the endpoint's only inbound edge, open and active.
fn lone_edge(ep: &mut Endpoint, stream: TcpStream) {
    stream.set_nonblocking(true).unwrap();
    assert_eq!(ep.inbound.len(), 1);
    let tcp = ep.inbound[0].as_tcp_mut().expect("a tcp edge");
    tcp.reader = TcpReader::new(stream, 1 << 16);
    tcp.net.state = InboundState::Open;
    tcp.net.active = true;
}

fn frame(data: &[u8]) -> Vec<u8> {
    let mut bytes = StreamHeader::message(data.len() as u64).emit().to_vec();
    bytes.extend_from_slice(data);
    bytes
}

/// The short receive path delivers what the general one would, leaves to it what it
/// does not handle, and reports the end of a stream and a reset as it would.
#[test]
fn lone_tcp_edge_takes_small_messages_and_reports_failures() {
    let (_ctx0, mut ep, _ctx1, _ep1) = tcp_endpoint();
    let peer = ep.inbound[0].peer();
    let (mut ours, theirs) = pair();
    lone_edge(&mut ep, theirs);
    let mut small = [0u8; 8];
    assert!(matches!(ep.look_lone(&mut small), Some(Ok(None))));
    // Two messages in one write, the second split over two writes.
    let mut bytes = frame(b"first");
    bytes.extend_from_slice(&frame(b"second!!"));
    ours.write_all(&bytes[..bytes.len() - 3]).unwrap();
    assert_eq!(ep.recv(&mut small).unwrap(), (5, peer));
    assert_eq!(&small[..5], b"first");
    std::thread::sleep(Duration::from_millis(20));
    assert!(matches!(ep.look_lone(&mut small), Some(Ok(None))));
    ours.write_all(&bytes[bytes.len() - 3..]).unwrap();
    assert_eq!(ep.recv(&mut small).unwrap(), (8, peer));
    assert_eq!(&small, b"second!!");
    // Too long for the buffer: left to the general path, and kept.
    ours.write_all(&frame(&[7u8; 100])).unwrap();
    std::thread::sleep(Duration::from_millis(20));
    assert!(ep.look_lone(&mut small).is_none());
    assert!(matches!(
        ep.recv(&mut small),
        Err(Error::BufferTooSmall {
            message: 100,
            buffer: 8
        })
    ));
    let mut big = [0u8; 100];
    assert_eq!(ep.recv(&mut big).unwrap(), (100, peer));
    assert_eq!(big, [7u8; 100]);
    // The stream ends without a close.
    ours.shutdown(std::net::Shutdown::Write).unwrap();
    match ep.recv(&mut small) {
        Err(Error::Unreachable { detail, .. }) => {
            assert!(detail.contains("without a close"), "{detail}")
        }
        other => panic!("expected the end of the stream, got {other:?}"),
    }
    assert!(ep.inbound[0].is_done());
    // A reset in the middle of a message: closing a socket with unread bytes sends
    // a reset instead of an end of stream.
    let (ours, theirs) = pair();
    (&theirs).write_all(b"never read").unwrap();
    lone_edge(&mut ep, theirs);
    (&ours).write_all(&frame(b"cut")[..10]).unwrap();
    std::thread::sleep(Duration::from_millis(20));
    drop(ours);
    std::thread::sleep(Duration::from_millis(20));
    match ep.recv(&mut small) {
        Err(Error::Unreachable { detail, .. }) => {
            assert!(detail.contains("reset"), "{detail}")
        }
        other => panic!("expected a reset, got {other:?}"),
    }
}

/// Polls `look_lone_dgram` until it does something other than find nothing (5 s at
/// most).
fn look_until_news(ep: &mut Endpoint, buf: &mut [u8]) -> Option<Result<Option<(usize, Addr)>>> {
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    loop {
        let looked = ep.look_lone(buf);
        if !matches!(looked, Some(Ok(None))) || std::time::Instant::now() > deadline {
            return looked;
        }
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// The short receive path of a lone datagram edge takes whole messages that fit, and
/// leaves to the general path (consuming nothing) a message too long for the buffer,
/// one larger than the receive window, and a connection the peer closed.
#[test]
fn lone_dgram_edge_takes_whole_messages_and_leaves_the_rest() {
    let addrs: Vec<std::net::SocketAddr> = (0..2)
        .map(|_| {
            let socket = std::net::UdpSocket::bind((Ipv4Addr::LOCALHOST, 0)).unwrap();
            socket.local_addr().unwrap()
        })
        .collect();
    let config = crate::Config {
        transports: vec![TransportKind::Udp],
        ..crate::Config::default()
    };
    let (ctx0, ctx1) = two_rank_contexts(&addrs, &config, 0xd6a);
    let mut ep = ctx0.endpoint(0).unwrap();
    ep.set_timeout(Some(Duration::from_secs(10)));
    let huge: Vec<u8> = (0..(12 << 20)).map(|i: usize| (i / 7) as u8).collect();
    let (go, step) = std::sync::mpsc::channel::<()>();
    let sender = std::thread::spawn({
        let huge = huge.clone();
        move || {
            let mut ep1 = ctx1.endpoint(0).unwrap();
            ep1.set_timeout(Some(Duration::from_secs(10)));
            let conn = ep1.connect(Addr::new(0, 0)).unwrap();
            for message in [&b"first"[..], b"second!!", &[7u8; 100], &huge] {
                ep1.send(conn, message).unwrap();
                // The engine progresses only while the endpoint is used.
                while let Err(std::sync::mpsc::TryRecvError::Empty) = step.try_recv() {
                    ep1.progress().unwrap();
                    std::thread::sleep(Duration::from_micros(100));
                }
            }
            drop(ep1);
        }
    });
    let mut small = [0u8; 8];
    // The first message adopts the edge (general path).
    let (len, peer) = ep.recv(&mut small).unwrap();
    assert_eq!(&small[..len], b"first");
    assert_eq!(ep.inbound.len(), 1);
    go.send(()).unwrap();
    match look_until_news(&mut ep, &mut small) {
        Some(Ok(Some((8, from)))) => assert_eq!(from, peer),
        other => panic!("expected the second message, got {other:?}"),
    }
    assert_eq!(&small, b"second!!");
    // Too long for the buffer: left to the general path, and kept.
    go.send(()).unwrap();
    assert!(look_until_news(&mut ep, &mut small).is_none());
    assert!(matches!(
        ep.recv(&mut small),
        Err(Error::BufferTooSmall {
            message: 100,
            buffer: 8
        })
    ));
    let mut big = vec![0u8; huge.len()];
    assert_eq!(ep.recv(&mut big).unwrap(), (100, peer));
    assert_eq!(big[..100], [7u8; 100]);
    // Larger than the receive window (8 MiB): never whole in it, read as it arrives.
    go.send(()).unwrap();
    assert!(look_until_news(&mut ep, &mut big).is_none());
    assert_eq!(ep.recv(&mut big).unwrap(), (huge.len(), peer));
    assert!(big == huge, "the large message differs");
    // The peer closes: left to the general path.
    go.send(()).unwrap();
    sender.join().unwrap();
    assert!(look_until_news(&mut ep, &mut small).is_none());
}

/// A receiver that drops its endpoint right after its last receive, and whose ack of
/// that message and first Close are lost, does not hold up the sender's endpoint drop
/// for the idle timeout: the receiver's drop resends its Close (which carries the ack)
/// until the sender acknowledges it (`linger_close`).
#[test]
fn a_lost_last_ack_and_close_do_not_hold_up_the_senders_drop() {
    use crate::transport::dgram::mem_tests::set_drop_rule;
    use quiver_wire::frame::{Frame, FrameType};
    use std::sync::atomic::{AtomicUsize, Ordering as AtomicOrdering};
    use std::sync::Arc;

    let idle = Duration::from_secs(30);
    let addrs: Vec<std::net::SocketAddr> = (0..2u8)
        .map(|rank| (Ipv4Addr::new(127, 77, rank, 9), 41_000).into())
        .collect();
    let config = crate::Config {
        transports: vec![TransportKind::Mem],
        net_idle_timeout: idle,
        ..crate::Config::default()
    };
    let (ctx0, ctx1) = two_rank_contexts(&addrs, &config, 0xc105e);
    let mut ep1 = ctx1.endpoint(0).unwrap();
    let mut ep0 = ctx0.endpoint(0).unwrap();
    ep0.set_timeout(Some(Duration::from_secs(10)));
    ep1.set_timeout(Some(Duration::from_secs(10)));
    // Rank 1 receives two messages and drops its endpoint at once; its receives
    // also answer rank 0's handshake.
    let receiver = std::thread::spawn(move || {
        let mut buf = [0u8; 16];
        let mut got = Vec::new();
        for _ in 0..2 {
            got.push(ep1.recv(&mut buf).map(|(len, _)| buf[..len].to_vec()));
        }
        let start = Instant::now();
        drop(ep1);
        drop(ctx1);
        (got, start.elapsed())
    });
    let conn = ep0.connect(Addr::new(1, 0)).unwrap();

    // From now on rank 1 loses everything it sends to rank 0 up to and including its
    // first Close: the acks of both messages among it.
    let (lost, closes_lost) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
    let (lost_in_rule, closes_in_rule) = (lost.clone(), closes_lost.clone());
    set_drop_rule(
        addrs[1],
        addrs[0],
        Some(Box::new(move |header: &[u8], payload: &[u8]| {
            if closes_in_rule.load(AtomicOrdering::Relaxed) > 0 {
                return false;
            }
            let datagram = [header, payload].concat();
            if let Ok(frame) = Frame::parse(&datagram) {
                if frame.header().frame_type == FrameType::Close {
                    closes_in_rule.fetch_add(1, AtomicOrdering::Relaxed);
                }
            }
            lost_in_rule.fetch_add(1, AtomicOrdering::Relaxed);
            true
        })),
    );
    ep0.send(conn, b"hello").unwrap();
    ep0.send(conn, b"the last one").unwrap();
    let start = Instant::now();
    drop(ep0);
    drop(ctx0);
    let sender_drop = start.elapsed();
    let (got, receiver_drop) = receiver.join().unwrap();
    set_drop_rule(addrs[1], addrs[0], None);

    let got: Vec<Vec<u8>> = got.into_iter().map(|message| message.unwrap()).collect();
    assert_eq!(got, vec![b"hello".to_vec(), b"the last one".to_vec()]);
    assert_eq!(
        closes_lost.load(AtomicOrdering::Relaxed),
        1,
        "no Close was lost"
    );
    assert!(
        lost.load(AtomicOrdering::Relaxed) >= 2,
        "the ack was not lost"
    );
    // Without the resent Close the sender waits until it gives the peer up (11.4 s
    // with `linger_close` turned off).
    assert!(
        sender_drop < idle / 3,
        "the sender's drop took {sender_drop:?} (receiver's {receiver_drop:?})"
    );
    assert!(
        receiver_drop < idle / 3,
        "the receiver's drop took {receiver_drop:?}"
    );
}

/// Drops every seventh datagram from `from` to `to` (mem sockets); returns the count of
/// datagrams seen.
fn drop_every_seventh(
    from: std::net::SocketAddr,
    to: std::net::SocketAddr,
) -> Arc<std::sync::atomic::AtomicUsize> {
    use crate::transport::dgram::mem_tests::set_drop_rule;
    use std::sync::atomic::{AtomicUsize, Ordering as AtomicOrdering};
    let count = Arc::new(AtomicUsize::new(0));
    let in_rule = count.clone();
    set_drop_rule(
        from,
        to,
        Some(Box::new(move |_: &[u8], _: &[u8]| {
            in_rule.fetch_add(1, AtomicOrdering::Relaxed) % 7 == 6
        })),
    );
    count
}

/// Receives `messages` messages (up to 4 MiB each) on `endpoint` in a thread of its own.
fn receive_in_thread(
    mut endpoint: Endpoint,
    messages: usize,
) -> std::thread::JoinHandle<Vec<Vec<u8>>> {
    std::thread::spawn(move || {
        let mut buf = vec![0u8; 4 << 20];
        (0..messages)
            .map(|_| {
                let (len, _) = endpoint.recv(&mut buf).unwrap();
                buf[..len].to_vec()
            })
            .collect()
    })
}
/// Large blocking sends go out in place (lent from the caller's buffer) and arrive
/// intact though datagrams are lost and the sender overwrites its one buffer as soon as
/// each send returns (so a byte read from it after the return would arrive wrong);
/// messages larger than the window are lent in pieces.
#[test]
fn large_sends_in_place_survive_loss_and_a_reused_buffer() {
    use crate::transport::dgram::mem_tests::set_drop_rule;
    use std::sync::atomic::Ordering as AtomicOrdering;

    let addrs: Vec<std::net::SocketAddr> = (0..2u8)
        .map(|rank| (Ipv4Addr::new(127, 78, rank, 9), 41_001).into())
        .collect();
    let config = crate::Config {
        transports: vec![TransportKind::Mem],
        net_window_bytes: 1 << 20,
        ..crate::Config::default()
    };
    // In place whatever the measured bandwidth-delay product (`in_place_pays`).
    crate::transport::dgram::tests_in_place::ALWAYS
        .store(true, std::sync::atomic::Ordering::Relaxed);
    let (ctx0, ctx1) = two_rank_contexts(&addrs, &config, 0x1e4d);
    let mut ep1 = ctx1.endpoint(0).unwrap();
    let mut ep0 = ctx0.endpoint(0).unwrap();
    ep0.set_timeout(Some(Duration::from_secs(20)));
    ep1.set_timeout(Some(Duration::from_secs(20)));
    let sizes = [300_000usize, (1 << 20) + 17, 3 << 20, 256 << 10, 100];
    let content = |index: usize, len: usize| -> Vec<u8> {
        (0..len)
            .map(|at| {
                (at as u8)
                    .wrapping_mul(13)
                    .wrapping_add(index as u8 * 7 + 1)
            })
            .collect()
    };
    let receiver = receive_in_thread(ep1, sizes.len());
    let conn = ep0.connect(Addr::new(1, 0)).unwrap();
    let count = drop_every_seventh(addrs[0], addrs[1]);
    let mut buffer = vec![0u8; 3 << 20];
    for (index, &len) in sizes.iter().enumerate() {
        buffer[..len].copy_from_slice(&content(index, len));
        ep0.send(conn, &buffer[..len]).unwrap();
        // The connection must no longer need the buffer.
        buffer.fill(0xEE);
    }
    // Dropping the endpoint waits until all is acknowledged (resending what is lost).
    drop(ep0);
    let got = receiver.join().unwrap();
    set_drop_rule(addrs[0], addrs[1], None);
    for (index, &len) in sizes.iter().enumerate() {
        assert!(got[index] == content(index, len), "message {index} differs");
    }
    let stats = ctx0.stats().datagram.unwrap();
    let in_place: usize = sizes.iter().filter(|&&len| len >= 256 << 10).sum();
    assert_eq!(stats.sent_in_place_bytes, in_place as u64, "{stats:?}");
    assert!(stats.retransmits > 0, "{stats:?}");
    assert!(count.load(AtomicOrdering::Relaxed) > 70);
}

/// Posted sends go out in place, several at once (the endpoint keeps three in flight):
/// each completes only once all its bytes are acknowledged, hands its buffer back, and
/// the sender overwrites that buffer at once and reuses it for a later message (so a
/// byte the protocol read from it after the completion would arrive wrong), though
/// datagrams are lost; a blocking send and small posted sends (copied) mix in.
#[test]
fn posted_sends_in_place_survive_loss_and_reused_buffers() {
    use crate::transport::dgram::mem_tests::set_drop_rule;

    let addrs: Vec<std::net::SocketAddr> = (0..2u8)
        .map(|rank| (Ipv4Addr::new(127, 79, rank, 9), 41_002).into())
        .collect();
    let config = crate::Config {
        transports: vec![TransportKind::Mem],
        net_window_bytes: 2 << 20,
        udp_post_in_place_min: 64 << 10,
        ..crate::Config::default()
    };
    let (ctx0, ctx1) = two_rank_contexts(&addrs, &config, 0x9057);
    let mut ep1 = ctx1.endpoint(0).unwrap();
    let mut ep0 = ctx0.endpoint(0).unwrap();
    ep0.set_timeout(Some(Duration::from_secs(20)));
    ep1.set_timeout(Some(Duration::from_secs(20)));
    let sizes: Vec<usize> = (0..24)
        .map(|index| match index % 6 {
            0 => 1 << 20,
            1 => 100,
            2 => (3 << 20) + 5,
            3 => 64 << 10,
            4 => 300_000,
            _ => (64 << 10) - 1,
        })
        .collect();
    let content = |index: usize, len: usize| -> Vec<u8> {
        (0..len)
            .map(|at| {
                (at as u8)
                    .wrapping_mul(29)
                    .wrapping_add(index as u8 * 3 + 1)
            })
            .collect()
    };
    let receiver = receive_in_thread(ep1, sizes.len() + 1);
    let conn = ep0.connect(Addr::new(1, 0)).unwrap();
    drop_every_seventh(addrs[0], addrs[1]);
    let mut free: Vec<Vec<u8>> = Vec::new();
    let mut in_flight = std::collections::VecDeque::new();
    let mut completed = 0;
    for (index, &len) in sizes.iter().enumerate() {
        if in_flight.len() == 3 {
            let request = in_flight.pop_front().unwrap();
            let mut buffer = ep0.wait_send(request).unwrap();
            completed += 1;
            // The connection must no longer need it.
            buffer.fill(0xEE);
            free.push(buffer);
        }
        let mut buffer = free.pop().unwrap_or_default();
        buffer.clear();
        buffer.extend_from_slice(&content(index, len));
        in_flight.push_back(ep0.post_send(conn, buffer).unwrap());
        if index == 10 {
            // A blocking send between posted ones keeps its place in the stream.
            ep0.send(conn, &content(1000, 500_000)).unwrap();
        }
    }
    while let Some(request) = in_flight.pop_front() {
        let mut buffer = ep0.wait_send(request).unwrap();
        buffer.fill(0xEE);
        completed += 1;
    }
    assert_eq!(completed, sizes.len());
    let stats = ctx0.stats().datagram.unwrap();
    drop(ep0);
    let got = receiver.join().unwrap();
    set_drop_rule(addrs[0], addrs[1], None);
    let mut expected: Vec<Vec<u8>> = sizes
        .iter()
        .enumerate()
        .map(|(index, &len)| content(index, len))
        .collect();
    expected.insert(11, content(1000, 500_000));
    for (index, message) in expected.iter().enumerate() {
        assert!(got[index] == *message, "message {index} differs");
    }
    let posted: usize = sizes.iter().filter(|&&len| len >= 64 << 10).sum();
    assert_eq!(stats.posted_in_place_bytes, posted as u64, "{stats:?}");
    assert!(stats.retransmits > 0, "{stats:?}");
}

/// Posted sends in place on a connection whose peer goes silent: they complete with the
/// connection's error once it gives the peer up, and the endpoint drops cleanly.
#[test]
fn posted_sends_in_place_fail_with_the_connection() {
    use crate::transport::dgram::mem_tests::set_drop_rule;

    let addrs: Vec<std::net::SocketAddr> = (0..2u8)
        .map(|rank| (Ipv4Addr::new(127, 80, rank, 9), 41_003).into())
        .collect();
    let config = crate::Config {
        transports: vec![TransportKind::Mem],
        net_idle_timeout: Duration::from_millis(300),
        udp_post_in_place_min: 64 << 10,
        ..crate::Config::default()
    };
    let (ctx0, ctx1) = two_rank_contexts(&addrs, &config, 0x9058);
    let mut ep1 = ctx1.endpoint(0).unwrap();
    let mut ep0 = ctx0.endpoint(0).unwrap();
    ep0.set_timeout(Some(Duration::from_secs(10)));
    ep1.set_timeout(Some(Duration::from_secs(10)));
    let receiver = std::thread::spawn(move || {
        let mut buf = vec![0u8; 16];
        let got = ep1.recv(&mut buf).map(|(len, _)| len);
        (got, ep1)
    });
    let conn = ep0.connect(Addr::new(1, 0)).unwrap();
    ep0.send(conn, b"first").unwrap();
    let (got, ep1) = receiver.join().unwrap();
    assert_eq!(got.unwrap(), 5);
    // From now on rank 1 hears nothing.
    set_drop_rule(
        addrs[0],
        addrs[1],
        Some(Box::new(|_: &[u8], _: &[u8]| true)),
    );
    let requests: Vec<SendRequest> = (0..3)
        .map(|_| ep0.post_send(conn, vec![7u8; 200_000]).unwrap())
        .collect();
    for request in requests {
        assert!(ep0.wait_send(request).is_err());
    }
    drop(ep0);
    drop(ep1);
    set_drop_rule(addrs[0], addrs[1], None);
}
