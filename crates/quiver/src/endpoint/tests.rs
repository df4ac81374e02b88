//! Tests of the endpoint's receive paths that look inside it: the lone-edge short paths
//! against the general one. (Datagram connections closing and sending in place under loss
//! are tested through the fault injector in `tests/dgram_faults.rs`.)

use std::io::Write;
use std::net::{Ipv4Addr, TcpListener, TcpStream};
use std::time::Duration;

use quiver_wire::stream::StreamHeader;

use super::Endpoint;
use crate::addr::Addr;
use crate::config::TransportKind;
use crate::error::{Error, Result};
use crate::transport::inbound_state::InboundState;
use crate::transport::tcp::reader::TcpReader;
use crate::transport::tcp::writer::tests::pair;

/// Rank 0's and rank 1's contexts of a two-rank job in this process, at `addrs` with
/// `config`; `tag` tells the test's job id from the other tests'.
pub(crate) fn two_rank_contexts(
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

/// Rank 0's and rank 1's contexts of a two-rank job in this process over `kind` alone,
/// their addresses free ports of the loopback interface.
fn loopback_contexts(kind: TransportKind, tag: u64) -> (crate::Context, crate::Context) {
    let addrs: Vec<std::net::SocketAddr> = (0..2)
        .map(|_| {
            let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).unwrap();
            listener.local_addr().unwrap()
        })
        .collect();
    let config = crate::Config {
        transports: vec![kind],
        ..crate::Config::default()
    };
    two_rank_contexts(&addrs, &config, tag)
}

/// Rank 0's endpoint of a two-rank tcp job in this process, connected to rank 1's
/// (returned too, to keep it open). Its one inbound edge then carries the stream the
/// test gives it (`lone_edge`), so the test can write any bytes to it.
fn tcp_endpoint() -> (crate::Context, Endpoint, crate::Context, Endpoint) {
    // A job of its own per call: tests run at once, and each context listens by job.
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let tag = 0x7e57_0000 + NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let (ctx0, ctx1) = loopback_contexts(TransportKind::Tcp, tag);
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

/// Three quarters of this machine's memory: a message no receiver here could hold.
fn three_quarters_of_memory() -> u64 {
    quiver_transport::sys::physical_memory_bytes().expect("the machine's memory") / 4 * 3
}

/// A tcp peer announcing a message of three quarters of the machine's memory ends its
/// connection with `MessageTooLarge` before anything is allocated for it, whichever
/// receive meets the header first (a pooled one would have reserved and zeroed it all).
#[test]
fn a_tcp_peer_announcing_too_much_gets_message_too_large() {
    let huge = three_quarters_of_memory();
    let max = ep_max();
    assert!(huge > max, "the default limit is half the memory");
    for pooled in [true, false] {
        let (_ctx0, mut ep, _ctx1, _ep1) = tcp_endpoint();
        let peer = ep.inbound[0].peer();
        let (mut ours, theirs) = pair();
        lone_edge(&mut ep, theirs);
        ours.write_all(&StreamHeader::message(huge).emit()).unwrap();
        ours.write_all(&[1u8; 4096]).unwrap();
        std::thread::sleep(Duration::from_millis(20));
        let got = if pooled {
            ep.recv_pooled().map(|b| b.len())
        } else {
            ep.try_recv(&mut [0u8; 64]).map(|(n, _)| n)
        };
        match got {
            Err(Error::MessageTooLarge {
                peer: p,
                transport: "tcp",
                announced,
                max: m,
            }) => assert_eq!((p, announced, m), (peer, huge, max)),
            other => panic!("pooled {pooled}: expected MessageTooLarge, got {other:?}"),
        }
        assert!(ep.inbound[0].is_done(), "the connection ends");
    }
}

/// The default limit of an endpoint.
fn ep_max() -> u64 {
    crate::config::default_max_message_bytes()
}

/// An endpoint's own limit (`set_max_message_bytes`) applies to the short path too: a
/// message longer than it is refused even where the caller's buffer would hold it.
#[test]
fn an_endpoints_own_limit_applies_on_every_path() {
    let (_ctx0, mut ep, _ctx1, _ep1) = tcp_endpoint();
    let (mut ours, theirs) = pair();
    lone_edge(&mut ep, theirs);
    ep.set_max_message_bytes(8).unwrap();
    assert!(ep.set_max_message_bytes(0).is_err());
    ours.write_all(&frame(b"eight!!!")).unwrap();
    ours.write_all(&frame(b"nine!!!!!")).unwrap();
    let mut buf = [0u8; 64];
    assert_eq!(ep.recv(&mut buf).unwrap().0, 8);
    match ep.recv(&mut buf) {
        Err(Error::MessageTooLarge {
            announced: 9,
            max: 8,
            ..
        }) => {}
        other => panic!("expected MessageTooLarge, got {other:?}"),
    }
}

/// A large tcp message held internally (a non-blocking receive began it) grows as its
/// bytes arrive: memory follows what the peer sent, not what it announced.
#[test]
fn a_held_tcp_message_grows_as_it_arrives() {
    let (_ctx0, mut ep, _ctx1, _ep1) = tcp_endpoint();
    let peer = ep.inbound[0].peer();
    let (mut ours, theirs) = pair();
    lone_edge(&mut ep, theirs);
    let len = 32usize << 20;
    ours.write_all(&StreamHeader::message(len as u64).emit())
        .unwrap();
    ours.write_all(&vec![5u8; 1 << 20]).unwrap();
    std::thread::sleep(Duration::from_millis(50));
    for _ in 0..20 {
        assert!(matches!(ep.try_recv_pooled(), Err(Error::WouldBlock)));
    }
    let held = ep.inbound[0]
        .as_tcp_mut()
        .expect("tcp")
        .reader
        .partial
        .as_ref()
        .map(|p| match &p.into {
            crate::transport::tcp::reader::PartialInto::Held(held) => held.len(),
            other => panic!("expected a held message, got {other:?}"),
        });
    let held = held.expect("a message in progress");
    assert!(
        held <= 4 << 20,
        "{held} bytes held for 1 MiB received of a {len}-byte message"
    );
    // The rest arrives; the message is whole and right.
    let writer = std::thread::spawn(move || {
        let chunk = vec![5u8; 1 << 20];
        for _ in 1..len >> 20 {
            ours.write_all(&chunk).unwrap();
        }
        ours
    });
    let got = ep.recv_pooled().unwrap();
    assert_eq!((got.len(), got.src()), (len, peer));
    assert!(got.iter().all(|&b| b == 5));
    drop(writer.join().unwrap());
}

/// A hostile peer's active messages: a header longer than its message fails the
/// connection (reported once, counted), a handler id beyond 16 bits is an unknown handler
/// (counted; the connection keeps working), and nothing panics.
#[test]
fn malformed_active_messages_are_typed_errors() {
    let (_ctx0, mut ep, _ctx1, _ep1) = tcp_endpoint();
    let peer = ep.inbound[0].peer();
    ep.register_handler(
        1,
        |_: &mut Endpoint, _: &super::handlers::ActiveMessage<'_>| Ok(()),
    )
    .unwrap();
    let (mut ours, theirs) = pair();
    lone_edge(&mut ep, theirs);
    let mut buf = [0u8; 64];
    // Handler id 1 << 20: no such handler; the plain message after it arrives.
    let mut bytes = StreamHeader::am(1 << 52 | 2).emit().to_vec();
    bytes.extend_from_slice(&frame(b"hhpayload"));
    bytes.extend_from_slice(&StreamHeader::tag(0).emit());
    bytes.extend_from_slice(&frame(b"plain"));
    ours.write_all(&bytes).unwrap();
    std::thread::sleep(Duration::from_millis(20));
    match ep.recv(&mut buf) {
        Err(Error::UnknownHandler { peer: from, id }) => assert_eq!((from, id), (peer, 1 << 20)),
        other => panic!("expected an unknown handler, got {other:?}"),
    }
    assert_eq!(ep.recv(&mut buf).unwrap(), (5, peer));
    assert_eq!(&buf[..5], b"plain");
    // Handler 1, a 100-byte header in a 5-byte message: the connection fails.
    let mut bytes = StreamHeader::am(1 << 32 | 100).emit().to_vec();
    bytes.extend_from_slice(&frame(b"short"));
    ours.write_all(&bytes).unwrap();
    std::thread::sleep(Duration::from_millis(20));
    match ep.recv(&mut buf) {
        Err(Error::Unreachable { detail, .. }) => {
            assert!(detail.contains("100-byte header"), "{detail}")
        }
        other => panic!("expected the connection to fail, got {other:?}"),
    }
    let stats = ep.am_stats();
    assert_eq!(
        (stats.unknown_handler, stats.malformed, stats.handled),
        (1, 1, 0)
    );
}

/// A datagram connection tells its next message's envelope before the payload moves
/// (`DgramShared::next_tag`), and binds a receive's buffer to exactly that message while
/// it is still arriving (`Engine::bind_next`): refused for a buffer too short, a
/// message over the limit, or a message already whole (the general look copies it); once
/// bound, nothing else is taken or bound on the connection until the receive comes back
/// complete from `collect_recvs`, with the message's tag and every byte, no staging copy.
#[test]
fn a_dgram_receive_binds_to_the_message_whose_envelope_was_seen() {
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;

    use crate::transport::dgram::posted_reads::RecvDone;
    use crate::transport::wire_tag::WireTag;

    const BIG: usize = 1 << 20;
    let addrs: Vec<std::net::SocketAddr> = (0..2u8)
        .map(|rank| (Ipv4Addr::new(127, 83, rank, 9), 41_006).into())
        .collect();
    let config = crate::Config {
        transports: vec![TransportKind::Mem],
        // Far smaller than the message: only a window's worth leaves without the sender's
        // calls.
        net_window_bytes: 256 << 10,
        ..crate::Config::default()
    };
    let (ctx0, ctx1) = two_rank_contexts(&addrs, &config, 0xb1d);
    let mut ep = ctx0.endpoint(0).unwrap();
    ep.set_timeout(Some(Duration::from_secs(10)));
    let big: Vec<u8> = (0..BIG).map(|i| (i * 7 / 3) as u8).collect();
    let drive = Arc::new(AtomicBool::new(false));
    let sender = std::thread::spawn({
        let (big, drive) = (big.clone(), drive.clone());
        move || {
            let mut ep1 = ctx1.endpoint(0).unwrap();
            ep1.set_timeout(Some(Duration::from_secs(10)));
            let conn = ep1.connect(Addr::new(0, 0)).unwrap();
            ep1.send(conn, b"first").unwrap();
            let send = ep1.post_send_tagged(conn, 7, big).unwrap();
            // No call into quiver until told: the rest of the message waits.
            while !drive.load(Ordering::Relaxed) {
                std::thread::sleep(Duration::from_millis(1));
            }
            ep1.wait_send(send).unwrap();
            ep1.send_tagged(conn, 9, &[5u8; 100]).unwrap();
            let mut bye = [0u8; 1];
            ep1.recv(&mut bye).unwrap();
        }
    });
    let mut small = [0u8; 8];
    let (len, peer) = ep.recv(&mut small).unwrap();
    assert_eq!(&small[..len], b"first");
    let id = ep.inbound[0].dgram_id().expect("a datagram edge");
    let engine = ep.local.dgram.clone().expect("the engine");
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    while !engine.readable(id) {
        assert!(
            std::time::Instant::now() < deadline,
            "the header never came"
        );
        engine.poll_io(&ep.local);
        std::thread::sleep(Duration::from_millis(1));
    }
    assert_eq!(
        engine.next_tag(id),
        WireTag {
            value: 7,
            am: false
        }
    );
    let token = 1 << 63;
    let mut short = vec![0u8; BIG - 1];
    assert!(!engine.bind_next(id, token, &mut short, u64::MAX));
    assert_eq!(
        short.len(),
        BIG - 1,
        "a refused buffer stays with the caller"
    );
    let mut buf = vec![0u8; BIG];
    assert!(!engine.bind_next(id, token, &mut buf, BIG as u64 - 1));
    assert!(engine.bind_next(id, token, &mut buf, u64::MAX));
    assert!(buf.is_empty(), "the buffer moved into the engine");
    // Bound: the connection shows no next message, and binds nothing else.
    assert!(!engine.readable(id));
    let mut other = vec![0u8; BIG];
    assert!(!engine.bind_next(id, token + 1, &mut other, u64::MAX));
    drive.store(true, Ordering::Relaxed);
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    let mut done = Vec::new();
    while done.is_empty() {
        assert!(
            std::time::Instant::now() < deadline,
            "the message never completed"
        );
        engine.poll_io(&ep.local);
        assert!(engine.collect_recvs(id, false, &mut done).is_some());
    }
    match done.pop() {
        Some(RecvDone::Complete {
            token: t,
            buf,
            len,
            tag,
        }) => {
            assert_eq!(
                (t, len, tag),
                (
                    token,
                    BIG,
                    WireTag {
                        value: 7,
                        am: false
                    }
                )
            );
            assert!(buf == big, "the bound message differs");
        }
        other => panic!("expected the bound message, got {other:?}"),
    }
    // A message whole in the window is not bound: the general look copies it out.
    while !engine.readable(id) {
        assert!(
            std::time::Instant::now() < deadline,
            "the small message never came"
        );
        engine.poll_io(&ep.local);
        std::thread::sleep(Duration::from_millis(1));
    }
    let mut whole = vec![0u8; 100];
    assert!(!engine.bind_next(id, token + 1, &mut whole, u64::MAX));
    assert_eq!(
        engine.next_tag(id),
        WireTag {
            value: 9,
            am: false
        }
    );
    let got = ep
        .recv_matching(crate::MatchSpec::tag(9), &mut whole)
        .unwrap();
    assert_eq!((got.source, got.tag, got.len), (peer, 9, 100));
    assert_eq!(ep.matching_stats().staged_copies, 0);
    ep.reply(peer, &[1]).unwrap();
    sender.join().unwrap();
}

/// `progress` takes a queue of active messages in bursts that double while messages wait
/// (a hundred in seven calls), in order, up to a plain message (left for a receive, in
/// order); once the queue has run out the burst halves
/// back to one message per call, so a ping-pong's answer never waits for a look at the
/// ring's next record.
#[test]
fn progress_takes_a_queue_in_growing_bursts() {
    use std::sync::{Arc, Mutex};

    use super::handlers::ActiveMessage;

    let (ctx0, ctx1) = loopback_contexts(TransportKind::Shm, 0xa3b);
    let mut ep0 = ctx0.endpoint(0).unwrap();
    let mut ep1 = ctx1.endpoint(0).unwrap();
    let seen = Arc::new(Mutex::new(Vec::new()));
    let log = Arc::clone(&seen);
    ep0.register_handler(1, move |_: &mut Endpoint, m: &ActiveMessage<'_>| {
        log.lock().unwrap().push(m.payload()[0]);
        Ok(())
    })
    .unwrap();
    let conn = ep1.connect(Addr::new(0, 0)).unwrap();
    for i in 0..100u8 {
        ep1.send_am(conn, 1, &[], &[i]).unwrap();
    }
    // A plain message ends the burst that meets it; it waits for a receive, in order.
    ep1.send(conn, b"plain").unwrap();
    ep1.send_am(conn, 1, &[], &[100]).unwrap();
    let mut bursts = Vec::new();
    while seen.lock().unwrap().len() < 100 {
        let before = seen.lock().unwrap().len();
        ep0.progress().unwrap();
        bursts.push(seen.lock().unwrap().len() - before);
        assert!(bursts.len() <= 7, "bursts {bursts:?}");
    }
    assert_eq!(bursts, [1, 2, 4, 8, 16, 32, 37]);
    ep0.progress().unwrap();
    assert_eq!(*seen.lock().unwrap(), (0..=100).collect::<Vec<u8>>());
    let mut buf = [0u8; 8];
    assert_eq!(ep0.try_recv(&mut buf).unwrap(), (5, Addr::new(1, 0)));
    assert_eq!(&buf[..5], b"plain");
    // One message at a time: each call takes it, and the burst shrinks to one.
    for i in 0..7u8 {
        ep1.send_am(conn, 1, &[], &[i]).unwrap();
        ep0.progress().unwrap();
        assert_eq!(seen.lock().unwrap().len(), 102 + usize::from(i));
    }
    assert_eq!(ep0.am.burst, 1);
}
