//! The protocol core's share of a small-message round trip, without sockets: two
//! connections in one thread answer 8-byte messages back and forth, as the udp latency
//! benchmark's ranks do (`start_message` + `write_message`, `poll_transmit`, then
//! `handle_datagram` + `read_message` on the other side). Prints the time per hop;
//! `perf report --children` splits it into `send_part`, `receive_part` and `after_part`.
//! A tool for profiling (`perf record`), not a test: `cargo run --release -p quiver-hpc-proto
//! --example hop [ROUND_TRIPS]`.

use std::time::Instant;

use quiver_proto::handshake::{ConnectRequest, JobKey, KEY_LEN};
use quiver_proto::reliable::{ReliableConfig, ReliableConnection, State};
use quiver_wire::frame;

const JOB_ID: u64 = 0x5eed;

/// Everything `side` has to send now, as datagrams.
fn drain(side: &mut ReliableConnection, now: u64, out: &mut Vec<Vec<u8>>) {
    let mut header = [0u8; frame::MAX_HEADER_LEN];
    while let Some(transmit) = side.poll_transmit(now, &mut header) {
        let mut datagram = header[..transmit.header_len].to_vec();
        datagram.extend_from_slice(transmit.payload);
        out.push(datagram);
    }
}

/// The sender's part of a hop: `start_message`, `write_message` and the `poll_transmit`
/// that returns the message's frame, copied into `datagram`.
#[inline(never)]
fn send_part(
    from: &mut ReliableConnection,
    now: u64,
    header: &mut [u8; frame::MAX_HEADER_LEN],
    datagram: &mut Vec<u8>,
    message: &[u8; 8],
) {
    from.start_message(8).expect("room for a message");
    assert_eq!(from.write_message(message), 8);
    let transmit = from
        .poll_transmit(now, header)
        .expect("the message's frame");
    datagram.clear();
    datagram.extend_from_slice(&header[..transmit.header_len]);
    datagram.extend_from_slice(transmit.payload);
}

/// The receiver's part: `handle_datagram` and `read_message`.
#[inline(never)]
fn receive_part(to: &mut ReliableConnection, now: u64, datagram: &[u8], message: &mut [u8; 8]) {
    to.handle_datagram(now, 0, datagram);
    let (read, complete) = to.read_message(message);
    assert!(
        read == 8 && complete,
        "read {read} bytes, complete {complete}"
    );
}

/// The sender's next `poll_transmit`, which finds nothing to send: the deferred ack's
/// bookkeeping, which the engine does once the datagram has left.
#[inline(never)]
fn after_part(from: &mut ReliableConnection, now: u64, header: &mut [u8; frame::MAX_HEADER_LEN]) {
    assert!(
        from.poll_transmit(now, header).is_none(),
        "one datagram per hop"
    );
}

/// One 8-byte message from `from` to `to`, which reads it into `message`.
fn hop(
    from: &mut ReliableConnection,
    to: &mut ReliableConnection,
    now: u64,
    buffers: (&mut [u8; frame::MAX_HEADER_LEN], &mut Vec<u8>),
    message: &mut [u8; 8],
) {
    let (header, datagram) = buffers;
    send_part(from, now, header, datagram, message);
    receive_part(to, now, datagram, message);
    after_part(from, now, header);
}

fn main() {
    let round_trips: u64 = std::env::args().nth(1).map_or(2_000_000, |arg| {
        arg.parse().expect("ROUND_TRIPS is a number")
    });
    let config = ReliableConfig {
        compact_data_frames: true,
        ..ReliableConfig::default()
    };
    let key = JobKey::from_bytes([7; KEY_LEN]);
    let request = ConnectRequest {
        job_id: JOB_ID,
        src_rank: 1,
        src_port: 10,
        dst_port: 20,
    };
    let mut a = ReliableConnection::connect(config.clone(), key.clone(), request, 0xa, [1; 16], 0)
        .expect("valid configuration");
    let mut now = 0;
    let mut to_b = Vec::new();
    drain(&mut a, now, &mut to_b);
    let (mut b, _) =
        ReliableConnection::accept(config, key, JOB_ID, &to_b[0], 0, 0xb, [2; 16], now)
            .expect("our own hello");
    // The rest of the handshake.
    for _ in 0..16 {
        let mut to_a = Vec::new();
        drain(&mut b, now, &mut to_a);
        for datagram in &to_a {
            a.handle_datagram(now, 0, datagram);
        }
        to_b.clear();
        drain(&mut a, now, &mut to_b);
        for datagram in &to_b {
            b.handle_datagram(now, 0, datagram);
        }
        now += 1_000;
    }
    assert_eq!(a.state(), State::Established);
    assert_eq!(b.state(), State::Established);

    let mut header = [0u8; frame::MAX_HEADER_LEN];
    let mut datagram = Vec::with_capacity(256);
    let started = Instant::now();
    for round in 0..round_trips {
        let mut message = round.to_le_bytes();
        // There and back, about 2 us per hop as over loopback.
        for there in [true, false] {
            let (from, to) = if there {
                (&mut a, &mut b)
            } else {
                (&mut b, &mut a)
            };
            now += 2_000;
            hop(from, to, now, (&mut header, &mut datagram), &mut message);
        }
        assert_eq!(message, round.to_le_bytes());
    }
    let elapsed = started.elapsed();
    println!(
        "{round_trips} round trips of 8 bytes: {:.1} ns per hop (send, transmit, receive, read)",
        elapsed.as_nanos() as f64 / (2 * round_trips) as f64
    );
    let stats = a.stats();
    println!(
        "a: {} datagrams sent, {} received, {} retransmits",
        stats.datagrams_sent, stats.datagrams_received, stats.retransmits
    );
}
