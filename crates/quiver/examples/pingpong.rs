//! Two ranks in one process (one thread each) ping-pong small messages over a chosen
//! transport on loopback and print the one-way latency and the datagram protocol's
//! counters: `cargo run --release -p quiver-hpc --example pingpong -- udp 8 100000`.

use std::net::{Ipv4Addr, SocketAddr, TcpListener, UdpSocket};
use std::time::Instant;

use quiver::{Addr, Config, Context, TransportKind};

fn free_port() -> u16 {
    loop {
        let tcp = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).expect("bind");
        let port = tcp.local_addr().expect("addr").port();
        if UdpSocket::bind((Ipv4Addr::LOCALHOST, port)).is_ok() {
            return port;
        }
    }
}

fn main() {
    // A program that wants QUIVER_LOG installs the stderr subscriber itself.
    quiver::init_logging_from_env();
    let args: Vec<String> = std::env::args().collect();
    let kind = TransportKind::from_name(args.get(1).map_or("udp", String::as_str))
        .expect("transport: shm, udp, tcp or mem");
    let size: usize = args.get(2).map_or(8, |s| s.parse().expect("size"));
    let iters: u32 = args
        .get(3)
        .map_or(100_000, |s| s.parse().expect("iterations"));
    let addrs: Vec<SocketAddr> = (0..2)
        .map(|_| SocketAddr::new(Ipv4Addr::LOCALHOST.into(), free_port()))
        .collect();
    let config = Config {
        transports: vec![kind],
        ..Config::default()
    };
    let job = u64::from(std::process::id()) << 16;
    let contexts: Vec<Context> = (0..2)
        .map(|rank| {
            Context::builder()
                .rank(rank)
                .size(2)
                .job_id(job)
                .job_key([7; 32])
                .addrs(addrs.clone())
                .config(config.clone())
                .build()
                .expect("context")
        })
        .collect();
    std::thread::scope(|s| {
        for (rank, ctx) in contexts.iter().enumerate() {
            s.spawn(move || {
                let mut ep = ctx.endpoint(0).expect("endpoint");
                let conn = ep.connect(Addr::new(1 - rank as u32, 0)).expect("connect");
                let mut buf = vec![0u8; size.max(1)];
                let msg = vec![1u8; size];
                let warmup = iters / 10;
                let mut start = Instant::now();
                for i in 0..warmup + iters {
                    if i == warmup {
                        start = Instant::now();
                    }
                    if rank == 0 {
                        ep.send(conn, &msg).expect("send");
                        ep.recv(&mut buf).expect("recv");
                    } else {
                        ep.recv(&mut buf).expect("recv");
                        ep.send(conn, &msg).expect("send");
                    }
                }
                if rank == 0 {
                    let one_way = start.elapsed().as_secs_f64() * 1e6 / f64::from(iters) / 2.0;
                    println!("{kind} {size} B: one-way {one_way:.3} us");
                    println!("{:?}", ctx.stats().datagram);
                }
            });
        }
    });
}
