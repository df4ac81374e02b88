//! The udp transport's io_uring engine (`QUIVER_UDP_IO=uring`, `uring-sqpoll`) through the
//! public API on loopback: messages of every size both ways at once, the link's io_uring
//! counters, and where io_uring is refused (a seccomp filter, as Docker's profile) the
//! fallback to plain sockets, which keep working. The conformance suite runs over it too
//! (`conformance.rs`, lines `udp_uring` and `udp_uring_netns`).

use std::net::{Ipv4Addr, SocketAddr, UdpSocket};
use std::sync::atomic::{AtomicU32, Ordering};
use std::thread;
use std::time::Duration;

use quiver::{Addr, Config, Context, TransportKind, UdpIoMode};

fn pattern(len: usize, seed: u32) -> Vec<u8> {
    (0..len)
        .map(|i| ((i as u32).wrapping_mul(2_654_435_761) ^ seed.wrapping_mul(131)) as u8)
        .collect()
}

fn free_port() -> u16 {
    let socket = UdpSocket::bind((Ipv4Addr::LOCALHOST, 0)).unwrap();
    socket.local_addr().unwrap().port()
}

static NEXT_JOB: AtomicU32 = AtomicU32::new(1);

/// Two ranks of one job on loopback with `mode`.
fn contexts(mode: UdpIoMode, datagram_bytes: usize) -> Vec<Context> {
    let job_id = 0x0E1A_0000_0000_0000 | u64::from(NEXT_JOB.fetch_add(1, Ordering::SeqCst));
    let addrs: Vec<SocketAddr> = (0..2)
        .map(|_| SocketAddr::from((Ipv4Addr::LOCALHOST, free_port())))
        .collect();
    let config = Config {
        transports: vec![TransportKind::Udp],
        op_timeout: Some(Duration::from_secs(60)),
        udp_datagram_bytes: datagram_bytes,
        udp_io: mode,
        ..Config::default()
    };
    (0..2)
        .map(|rank| {
            Context::builder()
                .rank(rank)
                .size(2)
                .job_id(job_id)
                .job_key([7; 32])
                .addrs(addrs.clone())
                .config(config.clone())
                .build()
                .expect("context")
        })
        .collect()
}

/// Each rank sends `count` messages of assorted sizes to the other while receiving the
/// other's, and checks every byte.
fn exchange(contexts: &[Context], count: usize) {
    let sizes: Vec<usize> = (0..count)
        .map(|i| [0, 1, 8, 1000, 1472, 9000, 65_537, 400_000][i % 8])
        .collect();
    thread::scope(|scope| {
        for (rank, context) in contexts.iter().enumerate() {
            let sizes = &sizes;
            scope.spawn(move || {
                let mut endpoint = context.endpoint(1).expect("endpoint");
                let peer = endpoint
                    .connect(Addr::new(1 - rank as u32, 1))
                    .expect("connect");
                let mut buffer = vec![0u8; 1 << 20];
                let mut received = 0;
                for (index, &size) in sizes.iter().enumerate() {
                    endpoint
                        .send(peer, &pattern(size, (rank * 1000 + index) as u32))
                        .expect("send");
                    if index >= 3 {
                        let (len, _) = endpoint.recv(&mut buffer).expect("recv");
                        let seed = ((1 - rank) * 1000 + received) as u32;
                        assert_eq!(len, sizes[received]);
                        assert!(
                            buffer[..len] == pattern(len, seed)[..],
                            "message {received}"
                        );
                        received += 1;
                    }
                }
                while received < sizes.len() {
                    let (len, _) = endpoint.recv(&mut buffer).expect("recv");
                    let seed = ((1 - rank) * 1000 + received) as u32;
                    assert!(
                        buffer[..len] == pattern(len, seed)[..],
                        "message {received}"
                    );
                    received += 1;
                }
            });
        }
    });
}

#[test]
fn messages_cross_both_ways_through_io_uring() {
    for (mode, datagram) in [
        (UdpIoMode::Uring, 0),
        (UdpIoMode::Uring, 1472),
        (UdpIoMode::UringSqpoll, 0),
    ] {
        let contexts = contexts(mode, datagram);
        exchange(&contexts, 80);
        for context in &contexts {
            let links = context.link_stats();
            let uring = links[0].uring.expect("the io_uring engine runs");
            assert_eq!(uring.sqpoll, mode == UdpIoMode::UringSqpoll);
            assert!(uring.sends > 0 && uring.received > 0, "{uring:?}");
            assert_eq!(uring.truncated, 0);
            // The large messages' datagrams (64 KB on loopback) left from the registered
            // buffer; the kernel says it copied them (no zero-copy on loopback).
            if datagram == 0 && uring.registered_buffer {
                assert!(uring.zero_copy_sends > 0, "{uring:?}");
            }
        }
    }
}

#[test]
fn a_refused_io_uring_falls_back_to_sockets() {
    // Under a seccomp filter that refuses io_uring (on this thread and those it starts),
    // the contexts bind plain sockets, say why on the log, and work.
    thread::spawn(|| {
        quiver_transport::seccomp::deny_io_uring_on_this_thread().expect("seccomp filter");
        let contexts = contexts(UdpIoMode::Uring, 0);
        for context in &contexts {
            assert!(context.link_stats()[0].uring.is_none());
        }
        exchange(&contexts, 16);
    })
    .join()
    .unwrap();
}

#[test]
fn sockets_mode_has_no_ring() {
    let contexts = contexts(UdpIoMode::Sockets, 0);
    exchange(&contexts, 8);
    assert!(contexts[0].link_stats()[0].uring.is_none());
}
