//! Datagram connections under injected faults. Through the setting (`QUIVER_FAULTS`), over
//! udp and mem: every fault in both directions at once. Through a rule
//! (`Faults::with_rule`), over mem: the rule picks exactly the datagrams a test is about
//! (an ack, a Close, every seventh datagram of one direction, everything from some moment
//! on). Two ranks in this process, each on its own loopback address.

mod support;

use std::collections::VecDeque;
use std::net::{Ipv4Addr, SocketAddr};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use quiver::{
    Addr, Config, Context, DatagramStats, Endpoint, Error, Fault, FaultDirection, Faults,
    MatchSpec, SendRequest, TransportKind,
};
use quiver_wire::frame::{Frame, FrameType};

/// The two ranks' addresses: 127.`net`.0.9 and 127.`net`.1.9, port `port`.
fn addresses(net: u8, port: u16) -> Vec<SocketAddr> {
    (0..2u8)
        .map(|rank| (Ipv4Addr::new(127, net, rank, 9), port).into())
        .collect()
}

/// Ranks 0 and 1 of a two-rank job in this process (its id made of this process's and
/// `tag`), at `addrs`, both with `config`.
fn two_rank_contexts(addrs: &[SocketAddr], config: &Config, tag: u64) -> (Context, Context) {
    let job = (u64::from(std::process::id()) << 20) | tag;
    let context = |rank| {
        Context::builder()
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

/// Faults that, once `armed` (and until it is cleared), drop the datagrams sent from
/// `from` to `to` that `lose` picks; `lose` sees each such datagram (header and payload)
/// while armed, and no other.
fn lose_from_to(
    from: SocketAddr,
    to: SocketAddr,
    armed: Arc<AtomicBool>,
    mut lose: impl FnMut(&[u8]) -> bool + Send + 'static,
) -> Faults {
    Faults::default().with_rule(move |site| {
        let on_the_way =
            site.direction == FaultDirection::Send && site.local == from && site.peer == to;
        (on_the_way && armed.load(Ordering::Relaxed) && lose(site.datagram)).then_some(Fault::Drop)
    })
}

/// Faults that, once `armed`, drop every seventh datagram from `from` to `to`; the count
/// of datagrams seen (while armed) comes with them.
fn drop_every_seventh(
    from: SocketAddr,
    to: SocketAddr,
    armed: Arc<AtomicBool>,
) -> (Faults, Arc<AtomicUsize>) {
    let count = Arc::new(AtomicUsize::new(0));
    let in_rule = count.clone();
    let faults = lose_from_to(from, to, armed, move |_| {
        in_rule.fetch_add(1, Ordering::Relaxed) % 7 == 6
    });
    (faults, count)
}

/// Receives `messages` messages (up to 4 MiB each) on `endpoint` in a thread of its own.
fn receive_in_thread(mut endpoint: Endpoint, messages: usize) -> JoinHandle<Vec<Vec<u8>>> {
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

/// Every fault in both directions at once, over udp (datagrams of an Ethernet MTU, so
/// that the sender's GSO runs are cut into single datagrams) and over mem: messages of many
/// sizes arrive whole and in order, and the counters show each fault injected and what the
/// protocol made of it.
#[test]
fn messages_arrive_whole_through_every_fault_in_both_directions() {
    let faults = "seed=3,drop=0.01,duplicate=0.01,reorder=0.02,corrupt=0.01,\
                  receive.drop=0.01,receive.duplicate=0.01,receive.reorder=0.02,receive.corrupt=0.01";
    let sizes = [
        0usize,
        1,
        100,
        1400,
        1472,
        9000,
        65_000,
        200_000,
        1 << 20,
        3 << 20,
        5,
    ];
    for (kind, addrs) in [
        (
            TransportKind::Udp,
            vec![
                address(support::free_port(1)),
                address(support::free_port(1)),
            ],
        ),
        (TransportKind::Mem, addresses(81, 41_004)),
    ] {
        let config = Config::from_lookup(|key| match key {
            "QUIVER_FAULTS" => Some(faults.into()),
            "QUIVER_TRANSPORTS" => Some(kind.name().into()),
            "QUIVER_UDP_DATAGRAM_BYTES" => Some("1472".into()),
            "QUIVER_TIMEOUT_MS" => Some("60000".into()),
            "QUIVER_PROFILE" => Some("off".into()),
            _ => None,
        })
        .expect("config");
        assert!(config.faults.is_on());
        let (ctx0, ctx1) = two_rank_contexts(&addrs, &config, 0xfa17 + kind as u64);
        let mut ep0 = ctx0.endpoint(0).unwrap();
        let ep1 = ctx1.endpoint(0).unwrap();
        let receiver = receive_in_thread(ep1, sizes.len());
        let conn = ep0.connect(Addr::new(1, 0)).unwrap();
        let content = |index: usize, len: usize| -> Vec<u8> {
            (0..len)
                .map(|at| (at as u8).wrapping_mul(31) ^ index as u8)
                .collect()
        };
        for (index, &len) in sizes.iter().enumerate() {
            ep0.send(conn, &content(index, len)).unwrap();
        }
        // Dropping the endpoint waits until all is acknowledged (resending what is lost).
        drop(ep0);
        let got = receiver.join().unwrap();
        for (index, &len) in sizes.iter().enumerate() {
            assert!(
                got[index] == content(index, len),
                "{kind}: message {index} differs"
            );
        }
        let both = |stats: fn(&DatagramStats) -> u64| {
            stats(&ctx0.stats().datagram.unwrap()) + stats(&ctx1.stats().datagram.unwrap())
        };
        let injected = [
            ("dropped", both(|s| s.faults.dropped)),
            ("duplicated", both(|s| s.faults.duplicated)),
            ("reordered", both(|s| s.faults.reordered)),
            ("corrupted", both(|s| s.faults.corrupted)),
            ("retransmits", both(|s| s.retransmits)),
            ("duplicates dropped", both(|s| s.duplicates_dropped)),
            ("corrupt dropped", both(|s| s.corrupt_dropped)),
        ];
        for (what, count) in injected {
            assert!(count > 0, "{kind}: nothing {what}: {injected:?}");
        }
    }
}

fn address(port: u16) -> SocketAddr {
    SocketAddr::from((Ipv4Addr::LOCALHOST, port))
}

/// A receiver that drops its endpoint right after its last receive, and whose ack of
/// that message and first Close are lost, does not hold up the sender's endpoint drop
/// for the idle timeout: the receiver's drop resends its Close (which carries the ack)
/// until the sender acknowledges it (`linger_close`).
#[test]
fn a_lost_last_ack_and_close_do_not_hold_up_the_senders_drop() {
    let idle = Duration::from_secs(30);
    let addrs = addresses(77, 41_000);
    // Once armed, rank 1 loses everything it sends to rank 0 up to and including its
    // first Close: the acks of both messages among it.
    let armed = Arc::new(AtomicBool::new(false));
    let (lost, closes_lost) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
    let (lost_in_rule, closes_in_rule) = (lost.clone(), closes_lost.clone());
    let faults = lose_from_to(addrs[1], addrs[0], armed.clone(), move |datagram| {
        if closes_in_rule.load(Ordering::Relaxed) > 0 {
            return false;
        }
        if let Ok(frame) = Frame::parse_unauthenticated(datagram) {
            if frame.header().frame_type == FrameType::Close {
                closes_in_rule.fetch_add(1, Ordering::Relaxed);
            }
        }
        lost_in_rule.fetch_add(1, Ordering::Relaxed);
        true
    });
    let config = Config {
        transports: vec![TransportKind::Mem],
        net_idle_timeout: idle,
        faults,
        ..Config::default()
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

    // From now on.
    armed.store(true, Ordering::Relaxed);
    ep0.send(conn, b"hello").unwrap();
    ep0.send(conn, b"the last one").unwrap();
    let start = Instant::now();
    drop(ep0);
    drop(ctx0);
    let sender_drop = start.elapsed();
    let (got, receiver_drop) = receiver.join().unwrap();
    armed.store(false, Ordering::Relaxed);

    let got: Vec<Vec<u8>> = got.into_iter().map(|message| message.unwrap()).collect();
    assert_eq!(got, vec![b"hello".to_vec(), b"the last one".to_vec()]);
    assert_eq!(closes_lost.load(Ordering::Relaxed), 1, "no Close was lost");
    assert!(lost.load(Ordering::Relaxed) >= 2, "the ack was not lost");
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

/// Large blocking sends go out in place (lent from the caller's buffer) and arrive
/// intact though datagrams are lost and the sender overwrites its one buffer as soon as
/// each send returns (so a byte read from it after the return would arrive wrong);
/// messages larger than the window are lent in pieces.
#[test]
fn large_sends_in_place_survive_loss_and_a_reused_buffer() {
    let addrs = addresses(78, 41_001);
    let armed = Arc::new(AtomicBool::new(false));
    let (faults, count) = drop_every_seventh(addrs[0], addrs[1], armed.clone());
    let config = Config {
        transports: vec![TransportKind::Mem],
        net_window_bytes: 1 << 20,
        // In place whatever the measured bandwidth-delay product (`in_place_pays`).
        udp_send_in_place_bdp_multiple: 0,
        faults,
        ..Config::default()
    };
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
    armed.store(true, Ordering::Relaxed);
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
    armed.store(false, Ordering::Relaxed);
    for (index, &len) in sizes.iter().enumerate() {
        assert!(got[index] == content(index, len), "message {index} differs");
    }
    let stats = ctx0.stats().datagram.unwrap();
    let in_place: usize = sizes.iter().filter(|&&len| len >= 256 << 10).sum();
    assert_eq!(stats.sent_in_place_bytes, in_place as u64, "{stats:?}");
    assert!(stats.retransmits > 0, "{stats:?}");
    assert!(count.load(Ordering::Relaxed) > 70);
}

/// Posted sends go out in place, several at once (the endpoint keeps three in flight):
/// each completes only once all its bytes are acknowledged, hands its buffer back, and
/// the sender overwrites that buffer at once and reuses it for a later message (so a
/// byte the protocol read from it after the completion would arrive wrong), though
/// datagrams are lost; a blocking send and small posted sends (copied) mix in.
#[test]
fn posted_sends_in_place_survive_loss_and_reused_buffers() {
    let addrs = addresses(79, 41_002);
    let armed = Arc::new(AtomicBool::new(false));
    let (faults, _) = drop_every_seventh(addrs[0], addrs[1], armed.clone());
    let config = Config {
        transports: vec![TransportKind::Mem],
        net_window_bytes: 2 << 20,
        udp_post_in_place_min: 64 << 10,
        faults,
        ..Config::default()
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
                    .wrapping_add((index as u8).wrapping_mul(3).wrapping_add(1))
            })
            .collect()
    };
    let receiver = receive_in_thread(ep1, sizes.len() + 1);
    let conn = ep0.connect(Addr::new(1, 0)).unwrap();
    armed.store(true, Ordering::Relaxed);
    let mut free: Vec<Vec<u8>> = Vec::new();
    let mut in_flight = VecDeque::new();
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
    armed.store(false, Ordering::Relaxed);
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
    let addrs = addresses(80, 41_003);
    let armed = Arc::new(AtomicBool::new(false));
    let config = Config {
        transports: vec![TransportKind::Mem],
        net_idle_timeout: Duration::from_millis(300),
        udp_post_in_place_min: 64 << 10,
        faults: lose_from_to(addrs[0], addrs[1], armed.clone(), |_| true),
        ..Config::default()
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
    armed.store(true, Ordering::Relaxed);
    let requests: Vec<SendRequest> = (0..3)
        .map(|_| ep0.post_send(conn, vec![7u8; 200_000]).unwrap())
        .collect();
    for request in requests {
        assert!(ep0.wait_send(request).is_err());
    }
    drop(ep0);
    drop(ep1);
    armed.store(false, Ordering::Relaxed);
}

/// A matching receive posted before its 4 MiB message arrives is bound to it (the engine
/// places the message's frames in its buffer) once the header is in; when the peer then
/// goes silent in the middle of the message (everything it sends is lost from that moment,
/// as if it died), the receive fails with the connection's error (`Unreachable`) once the
/// connection gives the peer up: never a hang, nor a message completed from the bytes that
/// did arrive. The sender's posted send fails too.
#[test]
fn a_receive_bound_to_a_message_fails_when_the_peer_goes_silent() {
    const LARGE: usize = 4 << 20;
    let addrs = addresses(82, 41_005);
    let armed = Arc::new(AtomicBool::new(false));
    let config = Config {
        transports: vec![TransportKind::Mem],
        // Far smaller than the message: without this rank's calls only a window's worth of
        // it leaves.
        net_window_bytes: 256 << 10,
        net_idle_timeout: Duration::from_millis(300),
        faults: lose_from_to(addrs[0], addrs[1], armed.clone(), |_| true),
        ..Config::default()
    };
    let (ctx0, ctx1) = two_rank_contexts(&addrs, &config, 0x9059);
    let mut ep1 = ctx1.endpoint(0).unwrap();
    let mut ep0 = ctx0.endpoint(0).unwrap();
    ep0.set_timeout(Some(Duration::from_secs(10)));
    ep1.set_timeout(Some(Duration::from_secs(10)));
    let zero = Addr::new(0, 0);
    let in_thread = armed.clone();
    let receiver = std::thread::spawn(move || {
        let cut = ep1
            .post_recv_matching(MatchSpec::tag(5).from(zero), vec![0; LARGE])
            .unwrap();
        // Until the message is bound to the receive (the matcher lets go of it then).
        let started = Instant::now();
        while ep1.matching_stats().posted == 1 {
            assert!(!ep1.test_recv(&cut).unwrap(), "the message cannot be whole");
            assert!(
                started.elapsed() < Duration::from_secs(10),
                "the message never began"
            );
        }
        assert_eq!(ep1.matching_stats().staged_copies, 0);
        // From now on rank 1 hears nothing from rank 0.
        in_thread.store(true, Ordering::Relaxed);
        let started = Instant::now();
        let got = ep1.wait_recv(cut);
        (got, started.elapsed(), ep1)
    });
    let conn = ep0.connect(Addr::new(1, 0)).unwrap();
    let send = ep0.post_send_tagged(conn, 5, vec![9u8; LARGE]).unwrap();
    // No call of this rank's until rank 1's receive is bound: only a window's worth left.
    while !armed.load(Ordering::Relaxed) {
        std::thread::sleep(Duration::from_millis(1));
    }
    let (got, waited, ep1) = receiver.join().unwrap();
    match got {
        Err(Error::Unreachable { peer, .. }) => assert_eq!(peer, zero),
        other => panic!("expected Unreachable, got {:?}", other.map(|c| c.len)),
    }
    assert!(
        waited < Duration::from_secs(5),
        "the error came after {waited:?}"
    );
    assert!(ep0.wait_send(send).is_err());
    drop(ep0);
    drop(ep1);
    armed.store(false, Ordering::Relaxed);
}
