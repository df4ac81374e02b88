//! A halo exchange: a periodic 1-D grid of integers cut into one slice per rank; every step
//! each rank sends its edge cells to both neighbours, receives theirs into its halos and
//! updates every cell from its neighbourhood (a three-point stencil). Each rank checks its
//! slice against the same steps computed serially over the whole grid, and exits with
//! status 1 if a cell differs.
//!
//! ```text
//! quiver run -n 4 -- target/release/examples/halo_exchange [CELLS] [STEPS]
//! QUIVER_TRANSPORTS=udp quiver run -n 8 -- target/release/examples/halo_exchange 1000 200
//! ```
//!
//! CELLS (default 1000) per rank, STEPS (default 200). Rank 0 prints the time per step; over
//! udp every rank prints its retransmission counters.

use std::collections::HashMap;
use std::time::Instant;

use quiver::{Addr, Context};

/// Halo width in cells.
const HALO: usize = 4;

/// Which halo of the receiver a message fills.
const FILLS_LEFT: u64 = 0;
const FILLS_RIGHT: u64 = 1;

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let cells: usize = args
        .get(1)
        .map_or(1000, |s| s.parse().expect("CELLS"))
        .max(HALO);
    let steps: u64 = args.get(2).map_or(200, |s| s.parse().expect("STEPS"));
    let ctx = Context::from_env().expect("start with `quiver run -n N -- ...`");
    let (rank, size) = (ctx.rank(), ctx.size());
    if size < 2 {
        eprintln!("run at least 2 ranks: quiver run -n N (N >= 2)");
        std::process::exit(2);
    }
    let mut ep = ctx.endpoint(0).expect("endpoint");
    let left_rank = (rank + size - 1) % size;
    let right_rank = (rank + 1) % size;
    let left = ep.connect(Addr::new(left_rank, 0)).expect("connect");
    let right = ep.connect(Addr::new(right_rank, 0)).expect("connect");
    let first = rank as usize * cells;
    // The slice with a halo of HALO cells on each side.
    let mut grid: Vec<u64> = vec![0; cells + 2 * HALO];
    for (i, cell) in grid[HALO..HALO + cells].iter_mut().enumerate() {
        *cell = initial(first + i);
    }
    // Messages that arrived before their step: (step, which halo) -> cells.
    let mut early: HashMap<(u64, u64), Vec<u64>> = HashMap::new();
    let mut buf = vec![0u8; 16 + HALO * 8];
    let started = Instant::now();
    for step in 0..steps {
        let to_left = message(step, FILLS_RIGHT, &grid[HALO..2 * HALO]);
        let to_right = message(step, FILLS_LEFT, &grid[cells..cells + HALO]);
        // Posted, then received: no rank waits in a send for a neighbour that sends too.
        let sent_left = ep.post_send(left, to_left).expect("post_send");
        let sent_right = ep.post_send(right, to_right).expect("post_send");
        for side in [FILLS_LEFT, FILLS_RIGHT] {
            let halo = loop {
                if let Some(halo) = early.remove(&(step, side)) {
                    break halo;
                }
                let (len, from) = ep.recv(&mut buf).expect("recv");
                let (got_step, got_side) = (word(&buf, 0), word(&buf, 1));
                let expected_from = if got_side == FILLS_LEFT {
                    left_rank
                } else {
                    right_rank
                };
                if len != buf.len() || from.rank != expected_from || got_step > step + 1 {
                    eprintln!("rank {rank}: unexpected message from {from:?} at step {step}");
                    std::process::exit(1);
                }
                let cells_in = (0..HALO).map(|i| word(&buf, 2 + i)).collect();
                early.insert((got_step, got_side), cells_in);
            };
            let at = if side == FILLS_LEFT { 0 } else { HALO + cells };
            grid[at..at + HALO].copy_from_slice(&halo);
        }
        ep.wait_send(sent_left).expect("send");
        ep.wait_send(sent_right).expect("send");
        grid = (0..grid.len())
            .map(|i| {
                if i < HALO || i >= HALO + cells {
                    0
                } else {
                    stencil(grid[i - 1], grid[i], grid[i + 1])
                }
            })
            .collect();
    }
    let total = cells * size as usize;
    let mut serial: Vec<u64> = (0..total).map(initial).collect();
    for _ in 0..steps {
        serial = (0..total)
            .map(|i| {
                stencil(
                    serial[(i + total - 1) % total],
                    serial[i],
                    serial[(i + 1) % total],
                )
            })
            .collect();
    }
    if let Some(i) = (0..cells).find(|&i| grid[HALO + i] != serial[first + i]) {
        eprintln!(
            "rank {rank}: cell {} differs after {steps} steps",
            first + i
        );
        std::process::exit(1);
    }
    if rank == 0 {
        let per = started.elapsed().as_secs_f64() * 1e6 / steps.max(1) as f64;
        println!("halo exchange of {cells} cells x {size} ranks, {steps} steps: ok, {per:.1} us per step");
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

fn initial(i: usize) -> u64 {
    (i as u64).wrapping_mul(2_654_435_761) % 1000
}

fn stencil(left: u64, middle: u64, right: u64) -> u64 {
    left.wrapping_add(middle.wrapping_mul(3))
        .wrapping_add(right)
        % 1_000_003
}

fn message(step: u64, side: u64, cells: &[u64]) -> Vec<u8> {
    [step, side]
        .iter()
        .chain(cells)
        .flat_map(|v| v.to_le_bytes())
        .collect()
}

fn word(buf: &[u8], i: usize) -> u64 {
    u64::from_le_bytes(buf[i * 8..i * 8 + 8].try_into().expect("8 bytes"))
}
