//! A real udp transfer past 4 GiB: compact Stream frames carry the stream offset in 32 bits,
//! so more than 2^32 bytes on one connection cross the offset's wrap (the receiver rebuilds
//! the full offset from the low bits). Rank 0 sends 4,400 messages of 1 MiB (4.3 GiB) over
//! loopback to rank 1, which checks every byte and the order. (The packet numbers' wrap takes
//! 2^32 frames; the simulator sweeps it, with connections numbered from just below it.)

use std::net::{Ipv4Addr, SocketAddr, UdpSocket};
use std::thread;
use std::time::{Duration, Instant};

use quiver::{Addr, Config, Context, TransportKind};

const MESSAGES: u64 = 4_400;
const MESSAGE_BYTES: usize = 1 << 20;

fn free_port() -> u16 {
    UdpSocket::bind((Ipv4Addr::LOCALHOST, 0))
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// Message `index`'s bytes: 64-bit words that differ along the message and between messages.
fn fill(index: u64, message: &mut [u8]) {
    for (word, chunk) in message.chunks_exact_mut(8).enumerate() {
        let value = ((index << 32) | word as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15);
        chunk.copy_from_slice(&value.to_le_bytes());
    }
}

#[test]
fn a_udp_transfer_past_4_gib_arrives_intact() {
    let job_id = 0x4_6B00_0000_0000 | u64::from(std::process::id());
    let addrs: Vec<SocketAddr> = (0..2)
        .map(|_| SocketAddr::from((Ipv4Addr::LOCALHOST, free_port())))
        .collect();
    let config = Config {
        transports: vec![TransportKind::Udp],
        op_timeout: Some(Duration::from_secs(120)),
        ..Config::default()
    };
    let contexts: Vec<Context> = (0..2)
        .map(|rank| {
            Context::builder()
                .rank(rank)
                .size(2)
                .job_id(job_id)
                .job_key([4; 32])
                .addrs(addrs.clone())
                .config(config.clone())
                .build()
                .expect("context")
        })
        .collect();
    let started = Instant::now();
    let received = thread::scope(|scope| {
        let (sender_context, receiver_context) = (&contexts[0], &contexts[1]);
        let receiver = scope.spawn(move || {
            let mut endpoint = receiver_context.endpoint(1).expect("endpoint");
            let mut buffer = vec![0u8; MESSAGE_BYTES];
            let mut expected = vec![0u8; MESSAGE_BYTES];
            let mut bytes = 0u64;
            for index in 0..MESSAGES {
                let (len, from) = endpoint.recv(&mut buffer).expect("recv");
                assert_eq!(
                    (len, from),
                    (MESSAGE_BYTES, Addr::new(0, 0)),
                    "message {index}"
                );
                fill(index, &mut expected);
                assert!(
                    buffer == expected,
                    "message {index} (stream offset about {bytes}) differs"
                );
                bytes += len as u64;
            }
            let back = endpoint.connect(Addr::new(0, 0)).expect("connect back");
            endpoint.send(back, b"done").expect("done");
            bytes
        });
        let mut endpoint = sender_context.endpoint(0).expect("endpoint");
        let peer = endpoint.connect(Addr::new(1, 1)).expect("connect");
        let mut message = vec![0u8; MESSAGE_BYTES];
        for index in 0..MESSAGES {
            fill(index, &mut message);
            endpoint.send(peer, &message).expect("send");
        }
        let mut done = [0u8; 8];
        let (len, _) = endpoint.recv(&mut done).expect("done");
        assert_eq!(&done[..len], b"done");
        receiver.join().expect("receiver")
    });
    assert!(received > 1 << 32, "{received} bytes do not cross 4 GiB");
    eprintln!(
        "{received} bytes over udp in {:.1} s",
        started.elapsed().as_secs_f64()
    );
}
