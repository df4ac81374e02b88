//! The Rust twin of `examples/c/pingpong.c`: the same loop (rank 0 sends SIZE bytes,
//! rank 1 sends them back, ITERATIONS times, every byte checked) through the Rust API,
//! so that the C API's cost is the difference between the two on a quiet machine:
//!
//! ```sh
//! cargo build --release -p quiver-hpc-ffi --example c_twin_pingpong
//! quiver run -n 2 --bind core -- target/release/examples/c_twin_pingpong 8 1000000
//! quiver run -n 2 --bind core -- ./pingpong 8 1000000        # examples/c/pingpong.c
//! ```

use std::time::Instant;

use rust_quiver::{Addr, Context};

fn main() -> rust_quiver::Result<()> {
    let args: Vec<String> = std::env::args().collect();
    let size: usize = args.get(1).map_or(8, |s| s.parse().expect("SIZE"));
    let iterations: i64 = args
        .get(2)
        .map_or(10_000, |s| s.parse().expect("ITERATIONS"));
    let ctx = Context::from_env()?;
    assert_eq!(
        ctx.size(),
        2,
        "pingpong runs with 2 ranks (quiver run -n 2)"
    );
    let rank = ctx.rank();
    let mut ep = ctx.endpoint(0)?;
    let peer = Addr::new(1 - rank, 0);
    let conn = ep.connect(peer)?;
    let mut out = vec![0u8; size];
    let mut input = vec![0u8; size];
    let mut start = Instant::now();
    for i in -1..iterations {
        if i == 0 {
            start = Instant::now(); // round -1 warms the connection up
        }
        if rank == 0 {
            for (b, byte) in out.iter_mut().enumerate() {
                *byte = (b as i64 + i) as u8;
            }
            ep.send(conn, &out)?;
            let (len, _) = ep.recv(&mut input)?;
            assert!(len == size && input == out, "round {i}: the echo differs");
        } else {
            let (len, src) = ep.recv(&mut input)?;
            assert!(
                len == size && src.rank == peer.rank,
                "round {i}: got {len} bytes"
            );
            ep.send(conn, &input[..len])?;
        }
    }
    let elapsed = start.elapsed().as_secs_f64();
    if rank == 0 && iterations > 0 {
        println!(
            "pingpong (Rust): {size} B, {iterations} round trips, {:.3} us one-way",
            elapsed / iterations as f64 / 2.0 * 1e6
        );
    }
    Ok(())
}
