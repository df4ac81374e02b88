//! The scattering receive of a udp connection (`Config::udp_scatter_min`): a blocking
//! receive in the middle of a large message takes each datagram in two pieces, the frame's
//! header apart and its payload straight into the receive's buffer. Two ranks in this
//! process, one loopback link each; the sender's fault injector (`QUIVER_FAULTS`,
//! `Config::faults`) drops some of what it sends. Messages of many sizes, some much larger than the receive
//! window, arrive byte-identical and in order with the scattering receive on and off, with
//! and without loss; with it on, bytes are received in place, with it off none are.

mod support;
use support::pattern;

use std::net::{Ipv4Addr, SocketAddr};
use std::sync::atomic::{AtomicU32, Ordering};
use std::thread;
use std::time::Duration;

use quiver::{Addr, Config, TransportKind};

static NEXT_JOB: AtomicU32 = AtomicU32::new(1);

fn address(port: u16) -> Vec<SocketAddr> {
    vec![SocketAddr::from((Ipv4Addr::LOCALHOST, port))]
}

/// Messages of many sizes, several of them larger than the 1 MiB window.
fn sizes() -> Vec<usize> {
    (0..24)
        .map(|i| [3 << 20, 0, 65_000, 1, 1_500_000, 64_983, 200_000, 4 << 20][i % 8])
        .collect()
}

/// Sends [`sizes`] from rank 0 to rank 1, the sender losing `drop_per_mille` of what it
/// sends; the receiver checks every message. Returns the receiver's datagram counters and
/// how many datagrams the sender's fault injector dropped.
fn transfer(scatter_min: usize, drop_per_mille: u64) -> (quiver::DatagramStats, u64) {
    let job_id = 0x5CA7_0000_0000_0000 | u64::from(NEXT_JOB.fetch_add(1, Ordering::SeqCst));
    let port = || support::free_port(1);
    let (sender_link, receiver_link) = (address(port()), address(port()));
    let config = Config {
        transports: vec![TransportKind::Udp],
        op_timeout: Some(Duration::from_secs(60)),
        udp_datagram_bytes: 60_000,
        net_window_bytes: 1 << 20,
        udp_scatter_min: scatter_min,
        ..Config::default()
    };
    let sender_config = Config {
        faults: format!("seed=9,drop={}", drop_per_mille as f64 / 1000.0)
            .parse()
            .expect("faults"),
        ..config.clone()
    };
    let table = vec![sender_link, receiver_link];
    let context = |rank: u32, config: &Config| {
        support::two_rank_context(rank, job_id, 9, table.clone(), config)
    };
    let sizes = sizes();
    let receiver = {
        let context = context(1, &config);
        let sizes = sizes.clone();
        thread::spawn(move || {
            let mut endpoint = context.endpoint(1).expect("endpoint");
            let mut buffer = vec![0u8; 4 << 20];
            for (index, &size) in sizes.iter().enumerate() {
                // Dirty, so that a byte not written shows.
                buffer.fill(0xEE);
                let (len, _) = endpoint.recv(&mut buffer).expect("recv");
                assert_eq!(len, size, "message {index}");
                assert!(
                    buffer[..len] == pattern(size, index as u32)[..],
                    "message {index} ({size} bytes) differs"
                );
            }
            let stats = context.stats().datagram.unwrap_or_default();
            let back = endpoint.connect(Addr::new(0, 1)).expect("connect back");
            endpoint.send(back, b"done").expect("send done");
            stats
        })
    };
    let sender = context(0, &sender_config);
    let mut endpoint = sender.endpoint(1).expect("endpoint");
    support::send_patterned_until_done(&mut endpoint, &sizes);
    let stats = receiver.join().expect("receiver");
    let dropped = sender.stats().datagram.unwrap_or_default().faults.dropped;
    (stats, dropped)
}

#[test]
fn large_messages_arrive_whole_received_in_place_or_not() {
    let total: usize = sizes().iter().sum();
    for drop_per_mille in [0, 20] {
        let (on, dropped) = transfer(16 << 10, drop_per_mille);
        assert_eq!(dropped > 0, drop_per_mille > 0, "dropped {dropped}");
        // Received in place: never more than was read straight into the buffer.
        assert!(on.scattered_bytes > 0, "nothing received in place: {on:?}");
        assert!(on.scattered_bytes <= on.direct_read_bytes, "{on:?}");
        assert!(on.direct_read_bytes as usize <= total, "{on:?}");
        let (off, _) = transfer(0, drop_per_mille);
        assert_eq!(off.scattered_bytes, 0, "{off:?}");
        assert!(off.direct_read_bytes > 0, "{off:?}");
    }
}
