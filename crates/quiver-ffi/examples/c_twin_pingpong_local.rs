//! The Rust twin of `examples/c/pingpong_local.c`: the same ping-pong between two
//! endpoints of one process, driven by one thread (send on A, receive on B, send on B,
//! receive on A, every byte checked), through the Rust API. Nothing crosses a core, so the
//! difference between the two is what the C API adds to two sends and two receives:
//!
//! ```sh
//! cargo build --release -p quiver-hpc-ffi --example c_twin_pingpong_local
//! quiver run -n 1 -- target/release/examples/c_twin_pingpong_local 8 15 200000
//! quiver run -n 1 -- ./pingpong_local 8 15 200000       # examples/c/pingpong_local.c
//! ```

use std::time::Instant;

use rust_quiver::{Addr, Connection, Context, Endpoint};

/// The endpoints and buffers of the loop.
struct Pair {
    a: Endpoint,
    b: Endpoint,
    a_to_b: Connection,
    b_to_a: Connection,
    out: Vec<u8>,
    input: Vec<u8>,
}

impl Pair {
    /// One round trip: A sends `out` to B, B sends what it got back, A checks it.
    fn round_trip(&mut self, round: i64) -> rust_quiver::Result<()> {
        self.out[0] = round as u8;
        self.a.send(self.a_to_b, &self.out)?;
        let (len, src) = self.b.recv(&mut self.input)?;
        assert!(
            len == self.out.len() && src.port == 0,
            "round {round}: B got {len} bytes from port {}",
            src.port
        );
        self.b.send(self.b_to_a, &self.input[..len])?;
        let (len, src) = self.a.recv(&mut self.input)?;
        assert!(
            len == self.out.len() && src.port == 1 && self.input == self.out,
            "round {round}: the echo differs from what was sent"
        );
        Ok(())
    }
}

fn main() -> rust_quiver::Result<()> {
    let args: Vec<String> = std::env::args().collect();
    let number = |index: usize, default: usize| {
        args.get(index)
            .map_or(default, |s| s.parse().expect("a positive number"))
    };
    let (size, batches, rounds) = (number(1, 8), number(2, 15), number(3, 200_000));
    assert!(
        size >= 1 && batches >= 1 && rounds >= 1,
        "usage: SIZE BATCHES ROUNDS, each >= 1"
    );
    let ctx = Context::from_env()?;
    let rank = ctx.rank();
    let mut a = ctx.endpoint(0)?;
    let mut b = ctx.endpoint(1)?;
    let a_to_b = a.connect(Addr::new(rank, 1))?;
    let b_to_a = b.connect(Addr::new(rank, 0))?;
    let out = (0..size).map(|b| (b * 7 + 1) as u8).collect();
    let mut pair = Pair {
        a,
        b,
        a_to_b,
        b_to_a,
        out,
        input: vec![0u8; size],
    };
    for round in 0..rounds as i64 {
        pair.round_trip(round)?; // a batch to warm up, not counted
    }
    let mut per_round_trip = Vec::with_capacity(batches);
    for _ in 0..batches {
        let start = Instant::now();
        for round in 0..rounds as i64 {
            pair.round_trip(round)?;
        }
        per_round_trip.push(start.elapsed().as_nanos() as f64 / rounds as f64);
    }
    per_round_trip.sort_by(f64::total_cmp);
    println!(
        "pingpong_local (Rust): {size} B, {batches} batches of {rounds} round trips, \
         {:.1} ns best, {:.1} ns median per round trip",
        per_round_trip[0],
        per_round_trip[batches / 2]
    );
    Ok(())
}
