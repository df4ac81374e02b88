//! quiver driven from an event loop ([mio](https://docs.rs/mio)): rank 0 never blocks
//! inside quiver. It serves every other rank's requests from a `mio::Poll` that watches its
//! endpoint's descriptor (the same works with `tokio::io::unix::AsyncFd` or any
//! poll/epoll loop, next to the program's other sockets): receive with `try_recv` until
//! `WouldBlock`, `arm`, then sleep in the event loop. Clients send REQUESTS requests one at
//! a time (a pause now and then, so that the server really sleeps) and check each reply;
//! over any transport (shm, tcp, udp) the server wakes for each. Any wrong reply, or a
//! sleep of 10 s that nothing ends, exits with status 1.
//!
//! ```text
//! quiver run -n 3 -- target/release/examples/event_loop [REQUESTS]
//! QUIVER_TRANSPORTS=udp quiver run -n 2 -- target/release/examples/event_loop 500
//! ```

use std::os::fd::AsRawFd;
use std::time::Duration;

use mio::unix::SourceFd;
use mio::{Events, Interest, Poll, Token};
use quiver::{Addr, Context, Endpoint, Error};

const ENDPOINT: Token = Token(0);

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let requests: u64 = args.get(1).map_or(500, |s| s.parse().expect("REQUESTS"));
    let ctx = Context::from_env().expect("start with `quiver run -n N -- ...`");
    let (rank, size) = (ctx.rank(), ctx.size());
    if size < 2 {
        eprintln!("run at least 2 ranks: quiver run -n N (N >= 2)");
        std::process::exit(2);
    }
    let mut ep = ctx.endpoint(0).expect("endpoint");
    if rank == 0 {
        let sleeps = serve(&mut ep, requests * u64::from(size - 1));
        println!(
            "rank 0: served {} requests, slept {sleeps} times: ok",
            requests * u64::from(size - 1)
        );
    } else {
        let conn = ep.connect(Addr::new(0, 0)).expect("connect");
        let mut buf = [0u8; 16];
        for i in 0..requests {
            if i % 50 == 0 {
                std::thread::sleep(Duration::from_millis(5));
            }
            let request = (u64::from(rank) << 32 | i).to_le_bytes();
            ep.send(conn, &request).expect("send");
            let (len, _) = ep.recv(&mut buf).expect("recv");
            let want = (u64::from(rank) << 32 | i).wrapping_mul(3).to_le_bytes();
            if buf[..len] != want {
                eprintln!("rank {rank}: reply {i} is wrong");
                std::process::exit(1);
            }
        }
        println!("rank {rank}: {requests} replies checked: ok");
    }
}

/// Answers `total` requests (each a u64, answered with three times it) from an event loop
/// on the endpoint's descriptor; returns how often it slept.
fn serve(ep: &mut Endpoint, total: u64) -> u64 {
    let mut poll = Poll::new().expect("mio::Poll");
    let fd = ep.as_raw_fd();
    poll.registry()
        .register(&mut SourceFd(&fd), ENDPOINT, Interest::READABLE)
        .expect("register the endpoint's descriptor");
    let mut events = Events::with_capacity(8);
    let (mut served, mut sleeps) = (0, 0);
    let mut buf = [0u8; 16];
    while served < total {
        match ep.try_recv(&mut buf) {
            Ok((8, from)) => {
                let request = u64::from_le_bytes(buf[..8].try_into().expect("8 bytes"));
                ep.reply(from, &request.wrapping_mul(3).to_le_bytes())
                    .expect("reply");
                served += 1;
            }
            Ok((len, from)) => {
                eprintln!("rank 0: a request of {len} bytes from {from}");
                std::process::exit(1);
            }
            // Nothing now: arm, then sleep until the descriptor says something came (mio's
            // registration is edge-triggered: everything was taken before arming).
            Err(Error::WouldBlock) => {
                if ep.arm().expect("arm") {
                    poll.poll(&mut events, Some(Duration::from_secs(10)))
                        .expect("mio poll");
                    if events.is_empty() {
                        eprintln!("rank 0: asleep 10 s with requests outstanding");
                        std::process::exit(1);
                    }
                    sleeps += 1;
                }
            }
            Err(e) => {
                eprintln!("rank 0: {e}");
                std::process::exit(1);
            }
        }
    }
    sleeps
}
