//! Datagram connections striped over several links (`QUIVER_LINKS`), inside this process:
//! two ranks, each with three udp sockets on loopback addresses (127.0.0.1/2/3) or three
//! mem sockets. Messages of every size arrive byte-identical and in order, and every link
//! carries part of the traffic.

mod support;
use support::pattern;

use std::net::{Ipv4Addr, SocketAddr};
use std::sync::atomic::{AtomicU32, Ordering};
use std::thread;
use std::time::Duration;

use quiver::{Addr, Config, Context, TransportKind};

const LINKS: usize = 3;

/// A udp port free on 127.0.0.1, .2 and .3 at once (never handed out twice).
fn free_port() -> u16 {
    support::free_port(LINKS as u8)
}

static NEXT_JOB: AtomicU32 = AtomicU32::new(1);

/// Every rank's links: rank r, link i at 127.0.0.(i+1), one port per rank.
fn links(transport: TransportKind) -> Vec<Vec<SocketAddr>> {
    (0..2u16)
        .map(|rank| {
            let port = match transport {
                TransportKind::Udp => free_port(),
                _ => 40_000 + rank + 10 * NEXT_JOB.fetch_add(1, Ordering::SeqCst) as u16,
            };
            (0..LINKS as u8)
                .map(|link| SocketAddr::from((Ipv4Addr::new(127, 0, 0, link + 1), port)))
                .collect()
        })
        .collect()
}

fn striped_transfer(transport: TransportKind) {
    let job_id = 0x11AC_0000_0000_0000 | u64::from(NEXT_JOB.fetch_add(1, Ordering::SeqCst));
    let links = links(transport);
    let config = Config {
        transports: vec![transport],
        op_timeout: Some(Duration::from_secs(60)),
        // Small datagrams so that even short messages take several frames.
        udp_datagram_bytes: 1472,
        ..Config::default()
    };
    let context = |rank: u32| {
        Context::builder()
            .rank(rank)
            .size(2)
            .job_id(job_id)
            .job_key([7; 32])
            .links(links.clone())
            .config(config.clone())
            .build()
            .expect("context")
    };
    let sizes: Vec<usize> = (0..200)
        .map(|i| [0, 1, 1000, 1472, 9000, 65_537, 300_000][i % 7])
        .collect();
    let receiver = {
        let context = context(1);
        let sizes = sizes.clone();
        thread::spawn(move || {
            let mut endpoint = context.endpoint(1).expect("endpoint");
            let mut buffer = vec![0u8; 1 << 20];
            for (index, &size) in sizes.iter().enumerate() {
                let (len, _) = endpoint.recv(&mut buffer).expect("recv");
                assert_eq!(len, size, "message {index}");
                assert!(
                    buffer[..len] == pattern(size, index as u32)[..],
                    "message {index} differs"
                );
            }
            // Answer so the sender knows everything arrived before it looks at the links.
            let back = endpoint.connect(Addr::new(0, 1)).expect("connect back");
            endpoint.send(back, b"done").expect("send done");
            let mut done = [0u8; 8];
            endpoint.recv(&mut done).expect("wait for the sender");
            context.link_stats()
        })
    };
    let sender = context(0);
    assert_eq!(sender.links(), links[0]);
    let mut endpoint = sender.endpoint(1).expect("endpoint");
    let connection = support::send_patterned_until_done(&mut endpoint, &sizes);
    let sent = sender.link_stats();
    endpoint.send(connection, b"bye").expect("bye");
    let received = receiver.join().expect("receiver");
    assert_eq!(sent.len(), LINKS);
    assert_eq!(received.len(), LINKS);
    for (link, stats) in sent.iter().enumerate() {
        assert!(
            stats.payload_bytes_sent > 1 << 20,
            "link {link} carried too little: {sent:#?}"
        );
        assert!(
            received[link].datagrams_received > 100,
            "link {link} received too little: {received:#?}"
        );
    }
}

#[test]
fn udp_over_three_links() {
    striped_transfer(TransportKind::Udp);
}

#[test]
fn mem_over_three_links() {
    striped_transfer(TransportKind::Mem);
}

#[test]
fn links_of_the_wrong_job_size_are_refused() {
    let error = Context::builder()
        .rank(0)
        .size(3)
        .job_id(1)
        .links(links(TransportKind::Mem))
        .config(Config {
            transports: vec![TransportKind::Mem],
            ..Config::default()
        })
        .build()
        .expect_err("two ranks of links for three ranks");
    assert!(error.to_string().contains("QUIVER_LINKS"), "{error}");
}
