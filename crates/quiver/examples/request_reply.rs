//! A request/reply server with many clients: rank 0 serves, every other rank is a client
//! sending REQUESTS requests one at a time and checking each reply. The server answers
//! whoever asks, in arrival order, and stops once every client is done. Any wrong reply
//! exits with status 1.
//!
//! ```text
//! quiver run -n 8 -- target/release/examples/request_reply [REQUESTS] [BYTES]
//! QUIVER_TRANSPORTS=tcp quiver run -n 4 -- target/release/examples/request_reply 1000 64
//! ```
//!
//! REQUESTS (default 1000) per client; BYTES (default 64, at least 16) the size of each
//! request and reply. Rank 0 prints the mean round trip its clients saw; over udp every rank
//! prints its retransmission counters.

use std::time::Instant;

use quiver::{Addr, Context};

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let requests: u64 = args.get(1).map_or(1000, |s| s.parse().expect("REQUESTS"));
    let bytes: usize = args
        .get(2)
        .map_or(64, |s| s.parse().expect("BYTES"))
        .max(16);
    let ctx = Context::from_env().expect("start with `quiver run -n N -- ...`");
    let (rank, size) = (ctx.rank(), ctx.size());
    if size < 2 {
        eprintln!("run at least 2 ranks: quiver run -n N (N >= 2)");
        std::process::exit(2);
    }
    let mut ep = ctx.endpoint(0).expect("endpoint");
    let mut buf = vec![0u8; bytes];
    if rank == 0 {
        let clients: Vec<_> = (1..size)
            .map(|r| ep.connect(Addr::new(r, 0)).expect("connect"))
            .collect();
        let started = Instant::now();
        for _ in 0..requests * u64::from(size - 1) {
            let (len, from) = ep.recv(&mut buf).expect("recv");
            let (client, seq) = (word(&buf, 0), word(&buf, 1));
            if len != bytes || client != u64::from(from.rank) {
                eprintln!("server: bad request from {from:?} ({len} B, client {client})");
                std::process::exit(1);
            }
            put(&mut buf, 1, answer(client, seq));
            ep.send(clients[from.rank as usize - 1], &buf)
                .expect("reply");
        }
        let per = started.elapsed().as_secs_f64() * 1e6 / requests.max(1) as f64;
        println!(
            "request/reply: {} clients x {requests} requests of {bytes} B: ok, {per:.1} us per round trip",
            size - 1
        );
    } else {
        let server = ep.connect(Addr::new(0, 0)).expect("connect");
        let mut request = vec![0u8; bytes];
        for seq in 0..requests {
            put(&mut request, 0, u64::from(rank));
            put(&mut request, 1, seq);
            ep.send(server, &request).expect("request");
            let (len, from) = ep.recv(&mut buf).expect("reply");
            if len != bytes || from.rank != 0 || word(&buf, 1) != answer(u64::from(rank), seq) {
                eprintln!("client {rank}: wrong reply to request {seq} from {from:?}");
                std::process::exit(1);
            }
        }
    }
    print_datagram_counters(&ctx, rank);
}

/// Over a datagram transport, this rank's retransmission counters: how calm the protocol
/// was (on a lossless link every retransmission is spurious; the examples' test counts them).
fn print_datagram_counters(ctx: &Context, rank: u32) {
    if let Some(d) = ctx.stats().datagram {
        println!(
            "rank {rank}: datagram retransmits {}, timeouts {}, spurious retransmissions received {}",
            d.retransmits, d.timeouts, d.spurious_retransmits
        );
    }
}

/// What the server answers to request `seq` of `client`.
fn answer(client: u64, seq: u64) -> u64 {
    seq.wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ client
}

fn word(buf: &[u8], i: usize) -> u64 {
    u64::from_le_bytes(buf[i * 8..i * 8 + 8].try_into().expect("8 bytes"))
}

fn put(buf: &mut [u8], i: usize, value: u64) {
    buf[i * 8..i * 8 + 8].copy_from_slice(&value.to_le_bytes());
}
