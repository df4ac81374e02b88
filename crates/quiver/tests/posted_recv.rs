//! Posted receives on a striped udp connection, the receive side's in-place path: an
//! endpoint whose only inbound edge is a datagram connection hands its posted receives'
//! buffers to the engine, which places frames of the next messages straight into them.
//! Two ranks in this process, three loopback links each; the sender's fault injector
//! (`QUIVER_FAULTS`, `Config::faults`) drops some of what it sends.
//! Messages of several sizes arrive byte-identical and in order, a message longer than
//! its receive's buffer fails that receive with `BufferTooSmall` and goes to the next, and
//! most bytes are placed straight into the buffers.

mod support;
use support::pattern;

use std::net::{Ipv4Addr, SocketAddr};
use std::sync::atomic::{AtomicU32, Ordering};
use std::thread;
use std::time::Duration;

use quiver::{Addr, Config, Error, TransportKind};

const LINKS: usize = 3;
/// Capacity of the ordinary posted receives; every third one gets [`LARGE_BYTES`].
const SMALL_BYTES: usize = 400_000;
const LARGE_BYTES: usize = 1 << 20;
/// Receives the receiver keeps posted.
const WINDOW: usize = 16;

/// A udp port free on 127.0.0.1, .2 and .3 at once (never handed out twice).
fn free_port() -> u16 {
    support::free_port(LINKS as u8)
}

fn link_addresses(port: u16) -> Vec<SocketAddr> {
    (0..LINKS as u8)
        .map(|link| SocketAddr::from((Ipv4Addr::new(127, 0, 0, link + 1), port)))
        .collect()
}

static NEXT_JOB: AtomicU32 = AtomicU32::new(1);

/// The message sizes: several sizes, one of them (index 9) longer than [`SMALL_BYTES`].
fn sizes() -> Vec<usize> {
    let mut sizes: Vec<usize> = (0..60)
        .map(|i| [0, 1, 1000, 1472, 9000, 65_537, 300_000, 200_000][i % 8])
        .collect();
    sizes[9] = 700_000;
    sizes[30] = 500_000;
    sizes
}

#[test]
fn posted_receives_on_a_lossy_striped_connection() {
    let job_id = 0x9057_0000_0000_0000 | u64::from(NEXT_JOB.fetch_add(1, Ordering::SeqCst));
    let (sender_links, receiver_links) = (link_addresses(free_port()), link_addresses(free_port()));
    let config = Config {
        transports: vec![TransportKind::Udp],
        op_timeout: Some(Duration::from_secs(60)),
        udp_datagram_bytes: 1472,
        // Less than the transfer: most of it arrives while the receives are posted.
        net_window_bytes: 1 << 20,
        ..Config::default()
    };
    // The sender loses 2% of what it sends (data, acks, handshakes).
    let sender_config = Config {
        faults: "seed=20,drop=0.02".parse().expect("faults"),
        ..config.clone()
    };
    let table = vec![sender_links.clone(), receiver_links.clone()];
    let context = |rank: u32, config: &Config| {
        support::two_rank_context(rank, job_id, 7, table.clone(), config)
    };
    let sizes = sizes();
    let receiver = {
        let context = context(1, &config);
        let sizes = sizes.clone();
        thread::spawn(move || receive_posted(&context, &sizes))
    };
    let sender = context(0, &sender_config);
    let mut endpoint = sender.endpoint(1).expect("endpoint");
    support::send_patterned_until_done(&mut endpoint, &sizes);
    let (too_small, placed) = receiver.join().expect("receiver");
    let dropped = sender.stats().datagram.unwrap_or_default().faults.dropped;
    let total: usize = sizes.iter().sum();
    // 700 000 bytes: refused by the two 400 000-byte receives before the large one at most;
    // 500 000 likewise.
    assert!(
        (2..=4).contains(&too_small),
        "{too_small} receives too small"
    );
    assert!(dropped > 0, "the fault injector dropped nothing");
    // Many bytes go straight into the receives' buffers: 2.5-4.0 MB of 4.9 in four runs.
    // Frames that arrive before their message's length prefix go through the receive
    // window, and a lost frame that carried a prefix holds back the placement of every
    // later message until it is resent.
    assert!(
        placed as usize * 3 > total,
        "{placed} of {total} bytes placed straight into the buffers"
    );
}

/// The receiver: keeps [`WINDOW`] receives posted (every third of [`LARGE_BYTES`], the
/// others of [`SMALL_BYTES`]) on endpoint 1 of `context` until every message of `sizes`
/// arrived, checking each, then answers "done". Returns how many receives were too small
/// and the bytes placed straight into the receives' buffers.
fn receive_posted(context: &quiver::Context, sizes: &[usize]) -> (usize, u64) {
    let mut endpoint = context.endpoint(1).expect("endpoint");
    // Made before the first receive, so that checking a message takes little time
    // (a slow reader leaves its receives' messages to wait in the window).
    let expected: Vec<Vec<u8>> = sizes
        .iter()
        .enumerate()
        .map(|(index, &size)| pattern(size, index as u32))
        .collect();
    let mut posted = std::collections::VecDeque::new();
    let mut next_post = 0usize;
    let mut spare: Vec<Vec<u8>> = Vec::new();
    let mut post = |endpoint: &mut quiver::Endpoint,
                    posted: &mut std::collections::VecDeque<_>,
                    spare: &mut Vec<Vec<u8>>| {
        let capacity = if next_post % 3 == 2 {
            LARGE_BYTES
        } else {
            SMALL_BYTES
        };
        next_post += 1;
        let buffer = match spare.iter().position(|b| b.len() == capacity) {
            Some(at) => spare.swap_remove(at),
            None => vec![0u8; capacity],
        };
        let request = endpoint.post_recv(buffer).expect("post");
        posted.push_back((request, capacity));
    };
    for _ in 0..WINDOW {
        post(&mut endpoint, &mut posted, &mut spare);
    }
    let mut too_small = 0;
    let mut index = 0;
    while index < sizes.len() {
        let (request, capacity) = posted.pop_front().expect("a receive is posted");
        match endpoint.wait_recv(request) {
            Ok(done) => {
                assert_eq!(done.len, sizes[index], "message {index}");
                assert_eq!(done.buf.len(), capacity);
                assert!(
                    done.buf[..done.len] == expected[index][..],
                    "message {index} differs"
                );
                assert_eq!(done.src, Addr::new(0, 1));
                spare.push(done.buf);
                index += 1;
            }
            Err(Error::BufferTooSmall { message, buffer }) => {
                assert_eq!(message, sizes[index], "refused message {index}");
                assert_eq!(buffer, capacity);
                assert!(message > capacity);
                too_small += 1;
            }
            Err(error) => panic!("message {index}: {error}"),
        }
        post(&mut endpoint, &mut posted, &mut spare);
    }
    let placed = context
        .stats()
        .datagram
        .unwrap_or_default()
        .direct_read_bytes;
    // Answer so the sender knows everything arrived.
    let back = endpoint.connect(Addr::new(0, 1)).expect("connect back");
    endpoint.send(back, b"done").expect("send done");
    (too_small, placed)
}
