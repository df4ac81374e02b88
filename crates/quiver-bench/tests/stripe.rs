//! One quiver connection striped over two real links: two network namespaces joined by two
//! veth links at 200 Mbit/s each (`quiver-bench testbed`), a rank in each namespace
//! with `QUIVER_LINKS` naming both links, messages checked one by one and by a checksum
//! over everything. With 1% random loss on both links; and with a link taken down
//! (`ip link set ... down`) in the middle of the transfer, which must still complete.
//! Root only (skipped otherwise); each test moves 48 MiB and takes seconds.
//!
//! Each rank is a thread that entered its namespace before creating its context, so every
//! socket it opens lives there.

mod support;

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use quiver::{Addr, Config, Context, TransportKind};
use support::pattern::fill;
use support::testbed::{is_root, spawn_in, Testbed};

/// Messages per test and their size: 48 MiB, 2 s at the two links' 400 Mbit/s.
const MESSAGES: u64 = 48;
const MESSAGE_BYTES: usize = 1 << 20;
/// Link rate of the testbed.
const RATE: &str = "200mbit";

/// Message `index` is a little shorter every third time, so fragment tails vary.
fn message_len(index: u64) -> usize {
    if index % 3 == 2 {
        MESSAGE_BYTES - (index as usize * 7919) % 50_000
    } else {
        MESSAGE_BYTES
    }
}

/// Link i is 10.77.i.1 in namespace a and 10.77.i.2 in namespace b.
fn links(count: u8) -> Vec<Vec<SocketAddr>> {
    (1..=2u8)
        .map(|side| {
            (0..count)
                .map(|link| SocketAddr::from(([10, 77, link, side], 7600)))
                .collect()
        })
        .collect()
}

/// What the sender saw.
struct SenderResult {
    hash: blake3::Hash,
    stats: quiver::DatagramStats,
    links: Vec<quiver::LinkStats>,
}

/// Sends MESSAGES from a to b over two links; `received` counts the messages b has checked
/// (for a test that acts mid-transfer). Returns the sender's result, the bytes b received
/// and their checksum.
fn transfer(testbed: &Testbed, received: Arc<AtomicU64>) -> (SenderResult, u64, blake3::Hash, f64) {
    let [a, b] = testbed.namespaces();
    static JOBS: AtomicU64 = AtomicU64::new(0);
    let job_id = 0x5717_0000_0000_0000
        | u64::from(std::process::id()) << 8
        | JOBS.fetch_add(1, Ordering::SeqCst);
    let key = [0x4b; 32];
    let config = Config {
        transports: vec![TransportKind::Udp],
        op_timeout: Some(Duration::from_secs(50)),
        connect_timeout: Duration::from_secs(20),
        // A busy 2-core machine: give the peer time before calling it dead.
        net_idle_timeout: Duration::from_secs(10),
        ..Config::default()
    };
    let context = move |rank: u32| {
        Context::builder()
            .rank(rank)
            .size(2)
            .job_id(job_id)
            .job_key(key)
            .links(links(2))
            .config(config.clone())
            .build()
            .expect("context")
    };
    let receiver = {
        let context = context.clone();
        spawn_in(&b, move || {
            let ctx = context(1);
            assert_eq!(ctx.links().len(), 2, "one socket per link");
            let mut ep = ctx.endpoint(0).expect("endpoint");
            let back = ep.connect(Addr::new(0, 0)).expect("connect back");
            let mut hasher = blake3::Hasher::new();
            let mut buf = vec![0u8; MESSAGE_BYTES];
            let mut expected = vec![0u8; MESSAGE_BYTES];
            let mut bytes = 0u64;
            for index in 0..MESSAGES {
                let (n, src) = ep.recv(&mut buf).expect("recv");
                assert_eq!(src, Addr::new(0, 0));
                assert_eq!(n, message_len(index), "length of message {index}");
                fill(&mut expected[..n], index);
                assert!(buf[..n] == expected[..n], "message {index} differs");
                hasher.update(&buf[..n]);
                bytes += n as u64;
                received.fetch_add(1, Ordering::SeqCst);
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
        for index in 0..MESSAGES {
            let n = message_len(index);
            fill(&mut buf[..n], index);
            hasher.update(&buf[..n]);
            ep.send(conn, &buf[..n]).expect("send");
        }
        let mut done = [0u8; 8];
        let (n, _) = ep.recv(&mut done).expect("final ack");
        assert_eq!(&done[..n], b"done");
        SenderResult {
            hash: hasher.finalize(),
            stats: ctx.stats().datagram.expect("a datagram engine"),
            links: ctx.link_stats(),
        }
    });
    let sent = sender.join().expect("sender");
    let (bytes, received_hash) = receiver.join().expect("receiver");
    (sent, bytes, received_hash, start.elapsed().as_secs_f64())
}

fn expected_bytes() -> u64 {
    (0..MESSAGES).map(|index| message_len(index) as u64).sum()
}

#[test]
fn two_links_with_1pct_loss() {
    if !is_root() {
        eprintln!("skipped: the testbed needs root");
        return;
    }
    let testbed = Testbed::up(2, RATE, 1.0).expect("testbed up");
    let (sent, bytes, received_hash, seconds) = transfer(&testbed, Arc::default());
    assert_eq!(bytes, expected_bytes());
    assert_eq!(sent.hash, received_hash, "checksums differ");
    eprintln!(
        "2 x {RATE}, 1% loss: {bytes} bytes in {seconds:.1} s = {:.0} Mbit/s, checksum ok; {:?}; links {:?}",
        bytes as f64 * 8.0 / seconds / 1e6,
        sent.stats,
        sent.links
    );
    assert!(
        sent.stats.retransmits > 0,
        "no retransmissions: was anything dropped?"
    );
    for (index, link) in sent.links.iter().enumerate() {
        assert!(
            link.payload_bytes_sent > bytes / 5,
            "link {index} carried {} of {bytes} bytes: {:?}",
            link.payload_bytes_sent,
            sent.links
        );
    }
    drop(testbed);
}

#[test]
fn a_link_taken_down_mid_transfer() {
    if !is_root() {
        eprintln!("skipped: the testbed needs root");
        return;
    }
    let testbed = Testbed::up(2, RATE, 0.0).expect("testbed up");
    let [a, _] = testbed.namespaces();
    let received = Arc::new(AtomicU64::new(0));
    let killer = {
        let received = received.clone();
        std::thread::spawn(move || {
            let deadline = Instant::now() + Duration::from_secs(30);
            while received.load(Ordering::SeqCst) < MESSAGES / 3 && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(5));
            }
            let status = std::process::Command::new("ip")
                .args(["-n", &a, "link", "set", "link1", "down"])
                .status()
                .expect("run ip");
            assert!(status.success(), "ip link set link1 down: {status}");
            received.load(Ordering::SeqCst)
        })
    };
    let (sent, bytes, received_hash, seconds) = transfer(&testbed, received);
    let at = killer.join().expect("killer");
    assert_eq!(bytes, expected_bytes());
    assert_eq!(sent.hash, received_hash, "checksums differ");
    eprintln!(
        "2 x {RATE}, link 1 down after message {at}: {bytes} bytes in {seconds:.1} s, checksum ok; {:?}; links {:?}",
        sent.stats, sent.links
    );
    assert!(at < MESSAGES, "the link went down only after the transfer");
    assert!(
        sent.stats.paths_down >= 1,
        "the dead link's path never went down: {:?}",
        sent.stats
    );
    // Link 0 carried the rest alone: well over half of everything.
    assert!(
        sent.links[0].payload_bytes_sent > bytes * 6 / 10,
        "{:?}",
        sent.links
    );
    drop(testbed);
}
