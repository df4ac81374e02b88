//! Ring allreduce: every rank holds a vector of integers and ends with the element-wise sum
//! over all ranks, by the bandwidth-optimal ring (a reduce-scatter, then an allgather, each
//! N-1 steps of sending one chunk to the right neighbour and receiving one from the left).
//! Each rank checks the result and exits with status 1 if any element is wrong.
//!
//! ```text
//! quiver run -n 4 -- target/release/examples/ring_allreduce [ELEMENTS] [ROUNDS]
//! QUIVER_TRANSPORTS=udp quiver run -n 8 -- target/release/examples/ring_allreduce 1024 100
//! ```
//!
//! ELEMENTS (default 1024) is the vector's length, ROUNDS (default 100) how many allreduces
//! run back to back; rank 0 prints the time per allreduce. Over udp every rank prints its
//! retransmission counters.

use std::time::Instant;

use quiver::{Addr, Connection, Context, Endpoint};

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let elements: usize = args.get(1).map_or(1024, |s| s.parse().expect("ELEMENTS"));
    let rounds: u32 = args.get(2).map_or(100, |s| s.parse().expect("ROUNDS"));
    let ctx = Context::from_env().expect("start with `quiver run -n N -- ...`");
    let (rank, size) = (ctx.rank(), ctx.size());
    if size < 2 {
        eprintln!("run at least 2 ranks: quiver run -n N (N >= 2)");
        std::process::exit(2);
    }
    let mut ep = ctx.endpoint(0).expect("endpoint");
    let right = ep
        .connect(Addr::new((rank + 1) % size, 0))
        .expect("connect");
    let started = Instant::now();
    for round in 0..rounds {
        let mut data: Vec<u64> = (0..elements).map(|i| value(rank, i, round)).collect();
        allreduce(&mut ep, right, rank, size, &mut data);
        for (i, got) in data.iter().enumerate() {
            let want = (0..size).fold(0u64, |sum, r| sum.wrapping_add(value(r, i, round)));
            if *got != want {
                eprintln!("rank {rank}: round {round} element {i}: {got} != {want}");
                std::process::exit(1);
            }
        }
    }
    if rank == 0 {
        let per = started.elapsed().as_secs_f64() * 1e6 / f64::from(rounds.max(1));
        println!("ring allreduce of {elements} u64 over {size} ranks: ok, {per:.1} us each");
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

/// Rank `rank`'s element `i` in round `round`.
fn value(rank: u32, i: usize, round: u32) -> u64 {
    (u64::from(rank) + 1)
        .wrapping_mul(i as u64 + 1)
        .wrapping_add(u64::from(round) << 32)
}

/// Chunk `c` of `n` elements cut into `size` chunks: its range.
fn chunk(c: u32, size: u32, n: usize) -> std::ops::Range<usize> {
    let (c, size) = (c as usize, size as usize);
    (c * n / size)..((c + 1) * n / size)
}

/// Sums `data` over all ranks in place: reduce-scatter, then allgather.
fn allreduce(ep: &mut Endpoint, right: Connection, rank: u32, size: u32, data: &mut [u64]) {
    let n = data.len();
    let mut buf = vec![0u8; (n / size as usize + 1) * 8];
    for step in 0..size - 1 {
        let send = (rank + size - step) % size;
        let recv = (rank + size - step - 1) % size;
        let incoming = exchange(ep, right, &data[chunk(send, size, n)], &mut buf);
        for (mine, theirs) in data[chunk(recv, size, n)].iter_mut().zip(incoming) {
            *mine = mine.wrapping_add(theirs);
        }
    }
    for step in 0..size - 1 {
        let send = (rank + 1 + size - step) % size;
        let recv = (rank + size - step) % size;
        let incoming = exchange(ep, right, &data[chunk(send, size, n)], &mut buf);
        for (mine, theirs) in data[chunk(recv, size, n)].iter_mut().zip(incoming) {
            *mine = theirs;
        }
    }
}

/// Sends `chunk` to the right neighbour and receives the left neighbour's chunk. The send
/// is posted before the receive so that no rank waits in a send for a neighbour that is
/// itself sending.
fn exchange<'a>(
    ep: &mut Endpoint,
    right: Connection,
    chunk: &[u64],
    buf: &'a mut [u8],
) -> impl Iterator<Item = u64> + 'a {
    let bytes: Vec<u8> = chunk.iter().flat_map(|v| v.to_le_bytes()).collect();
    let sent = ep.post_send(right, bytes).expect("post_send");
    let (len, _) = ep.recv(buf).expect("recv");
    ep.wait_send(sent).expect("send");
    buf[..len]
        .chunks_exact(8)
        .map(|b| u64::from_le_bytes(b.try_into().expect("8 bytes")))
}
