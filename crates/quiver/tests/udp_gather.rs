//! udp payloads sent in place from the send buffer as GSO runs (header and payload
//! gathered per datagram) or copied next to their header, on loopback, at Ethernet-sized
//! datagrams (MTU 1500 and 9000) and 64 KB ones: messages of every size arrive
//! byte-identical and in order, both ways at once, whichever `udp_in_place_min` decides.

use std::net::{Ipv4Addr, SocketAddr, UdpSocket};
use std::sync::atomic::{AtomicU32, Ordering};
use std::thread;
use std::time::Duration;

use quiver::{Addr, Config, Context, TransportKind};

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

/// Rank 0 and rank 1 each send `sizes` to the other at once and check what they receive.
fn exchange(datagram_bytes: usize, in_place_min: usize) {
    let job_id = 0x6A7E_0000_0000_0000 | u64::from(NEXT_JOB.fetch_add(1, Ordering::SeqCst));
    let addrs: Vec<SocketAddr> = (0..2)
        .map(|_| SocketAddr::from((Ipv4Addr::LOCALHOST, free_port())))
        .collect();
    let config = Config {
        transports: vec![TransportKind::Udp],
        op_timeout: Some(Duration::from_secs(60)),
        udp_datagram_bytes: datagram_bytes,
        udp_in_place_min: in_place_min,
        ..Config::default()
    };
    let sizes: Vec<usize> = (0..120)
        .map(|i| [0, 1, 100, 1000, 1440, 1441, 8940, 9000, 65_537, 400_000][i % 10])
        .collect();
    let contexts: Vec<Context> = (0..2)
        .map(|rank| {
            Context::builder()
                .rank(rank)
                .size(2)
                .job_id(job_id)
                .job_key([9; 32])
                .addrs(addrs.clone())
                .config(config.clone())
                .build()
                .expect("context")
        })
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
                // Send ahead by a few messages, then alternate: both directions stream.
                let mut received = 0;
                for (index, &size) in sizes.iter().enumerate() {
                    endpoint
                        .send(peer, &pattern(size, (rank * 1000 + index) as u32))
                        .expect("send");
                    if index >= 4 {
                        let (len, _) = endpoint.recv(&mut buffer).expect("recv");
                        let seed = ((1 - rank) * 1000 + received) as u32;
                        assert_eq!(len, sizes[received], "message {received} to rank {rank}");
                        assert!(
                            buffer[..len] == pattern(len, seed)[..],
                            "message {received} to rank {rank} differs \
                             (datagram {datagram_bytes}, in place from {in_place_min})"
                        );
                        received += 1;
                    }
                }
                while received < sizes.len() {
                    let (len, _) = endpoint.recv(&mut buffer).expect("recv");
                    let seed = ((1 - rank) * 1000 + received) as u32;
                    assert_eq!(len, sizes[received]);
                    assert!(buffer[..len] == pattern(len, seed)[..]);
                    received += 1;
                }
                // Both sides have everything before either closes.
                endpoint.send(peer, b"done").expect("send done");
                let (len, _) = endpoint.recv(&mut buffer).expect("done");
                assert_eq!(&buffer[..len], b"done");
            });
        }
    });
}

#[test]
fn mtu_1500_in_place() {
    exchange(1472, 0);
}

#[test]
fn mtu_1500_copied() {
    exchange(1472, 1 << 30);
}

#[test]
fn mtu_9000_in_place_from_1_kib() {
    exchange(8972, 1024);
}

#[test]
fn loopback_datagrams_in_place() {
    exchange(0, 0);
}
