//! quiver's network transports across two network namespaces joined by a veth link that
//! drops packets at random (nftables, see `quiver-bench testbed`): a rank in each namespace, real
//! sockets, and at least 1 GB moved and verified by checksum with 1% and with 10% loss.
//! Root only (skipped otherwise).
//!
//! Each rank is a thread that entered its namespace before creating its context, so every
//! socket it opens (the tcp listener, the udp socket, outgoing connections) lives there.
//! Rank 1's address is not on any interface of namespace a, so rank 0 does not try shm.

mod support;

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use quiver::{Addr, Config, Context, TransportKind};
use support::pattern::fill;
use support::testbed::{is_root, spawn_in, Testbed};

/// Bytes moved per test: messages worth 1 GiB, some shorter; at least 1 GB arrives.
const TOTAL_BYTES: u64 = 1 << 30;
/// What must arrive, verified: 1 GB.
const AT_LEAST_BYTES: u64 = 1_000_000_000;
/// Message size: 1 MiB (a quarter of them shorter, so fragment tails vary).
const MESSAGE_BYTES: usize = 1 << 20;

fn message_len(index: u64) -> usize {
    if index % 4 == 3 {
        MESSAGE_BYTES - (index as usize * 977) % 100_000
    } else {
        MESSAGE_BYTES
    }
}

fn transfer(transport: TransportKind, loss_pct: f64) {
    if !is_root() {
        eprintln!("skipped: the testbed needs root");
        return;
    }
    let testbed = Testbed::up(1, "4gbit", loss_pct).expect("testbed up");
    let [a, b] = testbed.namespaces();
    let addrs: Vec<SocketAddr> = vec![
        "10.77.0.1:7100".parse().unwrap(),
        "10.77.0.2:7100".parse().unwrap(),
    ];
    let job_id = 0x5eed_0000_0000_0000 | u64::from(std::process::id());
    let key = [0x42u8; 32];
    let config = Config {
        transports: vec![transport],
        op_timeout: Some(Duration::from_secs(300)),
        connect_timeout: Duration::from_secs(20),
        // 10% loss on a busy 2-core machine: give the peer time before calling it dead.
        net_idle_timeout: Duration::from_secs(10),
        ..Config::default()
    };
    let context = move |rank: u32| {
        Context::builder()
            .rank(rank)
            .size(2)
            .job_id(job_id)
            .job_key(key)
            .addrs(addrs.clone())
            .config(config.clone())
            .build()
            .expect("context")
    };
    let count = TOTAL_BYTES.div_ceil(MESSAGE_BYTES as u64) + 1;
    let receiver = {
        let context = context.clone();
        spawn_in(&b, move || {
            let ctx = context(1);
            let mut ep = ctx.endpoint(0).expect("endpoint");
            let back = ep.connect(Addr::new(0, 0)).expect("connect back");
            let mut hasher = blake3::Hasher::new();
            let mut buf = vec![0u8; MESSAGE_BYTES];
            let mut expected = vec![0u8; MESSAGE_BYTES];
            let mut bytes = 0u64;
            for index in 0..count {
                let (n, src) = ep.recv(&mut buf).expect("recv");
                assert_eq!(src, Addr::new(0, 0));
                assert_eq!(n, message_len(index), "length of message {index}");
                fill(&mut expected[..n], index);
                assert!(buf[..n] == expected[..n], "message {index} differs");
                hasher.update(&buf[..n]);
                bytes += n as u64;
            }
            ep.send(back, b"done").expect("final ack");
            (bytes, hasher.finalize())
        })
    };
    let start = Instant::now();
    let sender = spawn_in(&a, move || {
        let ctx = context(0);
        let mut ep = ctx.endpoint(0).expect("endpoint");
        let conn = ep.connect(Addr::new(1, 0)).expect("connect");
        let mut hasher = blake3::Hasher::new();
        let mut buf = vec![0u8; MESSAGE_BYTES];
        for index in 0..count {
            let n = message_len(index);
            fill(&mut buf[..n], index);
            hasher.update(&buf[..n]);
            ep.send(conn, &buf[..n]).expect("send");
        }
        let mut done = [0u8; 8];
        let (n, _) = ep.recv(&mut done).expect("final ack");
        assert_eq!(&done[..n], b"done");
        (hasher.finalize(), ctx.stats().datagram)
    });
    let (sent_hash, stats) = sender.join().expect("sender");
    let (bytes, received_hash) = receiver.join().expect("receiver");
    let seconds = start.elapsed().as_secs_f64();
    assert!(bytes >= AT_LEAST_BYTES, "moved {bytes} bytes");
    assert_eq!(sent_hash, received_hash, "checksums differ");
    eprintln!(
        "{transport} with {loss_pct}% loss: {bytes} bytes in {seconds:.1} s = {:.2} Gbit/s, checksum ok; sender {stats:?}",
        bytes as f64 * 8.0 / seconds / 1e9
    );
    if let Some(stats) = stats {
        // The loss was real and the protocol repaired it.
        assert!(
            stats.retransmits > 0,
            "no retransmissions: was anything dropped?"
        );
    }
    drop(testbed);
}

#[test]
fn udp_one_gigabyte_with_1pct_loss() {
    transfer(TransportKind::Udp, 1.0);
}

#[test]
fn udp_one_gigabyte_with_10pct_loss() {
    transfer(TransportKind::Udp, 10.0);
}

#[test]
fn tcp_one_gigabyte_with_1pct_loss() {
    transfer(TransportKind::Tcp, 1.0);
}
