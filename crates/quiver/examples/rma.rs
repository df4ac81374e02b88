//! Two ranks in one process (one thread each): rank 0 applies one-sided operations to a
//! region of rank 1 over a chosen transport on loopback and prints what one took (median
//! over the run) and the bandwidth or rate; rank 1 only waits in `recv` (over tcp and udp
//! its progress engine applies the operations meanwhile):
//! `cargo run --release -p quiver-hpc --example rma -- tcp put 1048576 1000`
//! (transport shm, tcp or udp; operation put, get, fetch_add, post_put or post_get; size in
//! bytes; operations).

use std::net::{Ipv4Addr, SocketAddr, TcpListener, UdpSocket};
use std::time::{Duration, Instant};

use quiver::{Addr, Config, Context, RemoteKey, Rights, TransportKind};

fn free_port() -> u16 {
    loop {
        let tcp = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).expect("bind");
        let port = tcp.local_addr().expect("addr").port();
        if UdpSocket::bind((Ipv4Addr::LOCALHOST, port)).is_ok() {
            return port;
        }
    }
}

/// Operations kept posted at once by `post_put` and `post_get`.
const WINDOW: usize = 16;

/// Ranks 0 and 1 of a job over `kind` on loopback, in this process.
fn contexts(kind: TransportKind) -> Vec<Context> {
    let addrs: Vec<SocketAddr> = if kind == TransportKind::Shm {
        Vec::new()
    } else {
        (0..2)
            .map(|_| SocketAddr::new(Ipv4Addr::LOCALHOST.into(), free_port()))
            .collect()
    };
    let config = Config {
        transports: vec![kind],
        ..Config::default()
    };
    let job = u64::from(std::process::id()) << 16 | 0x4d;
    (0..2)
        .map(|rank| {
            let mut builder = Context::builder()
                .rank(rank)
                .size(2)
                .job_id(job)
                .job_key([9; 32])
                .config(config.clone());
            if !addrs.is_empty() {
                builder = builder.addrs(addrs.clone());
            }
            builder.build().expect("context")
        })
        .collect()
}

fn main() {
    quiver::init_logging_from_env();
    let args: Vec<String> = std::env::args().collect();
    let kind = TransportKind::from_name(args.get(1).map_or("shm", String::as_str))
        .expect("transport: shm, tcp or udp");
    let operation = args.get(2).cloned().unwrap_or_else(|| "put".into());
    let size: usize = args.get(3).map_or(8, |s| s.parse().expect("size"));
    let iters: usize = args
        .get(4)
        .map_or(10_000, |s| s.parse().expect("operations"));
    let contexts = contexts(kind);
    let region_len = size.max(8) * WINDOW;
    std::thread::scope(|s| {
        let owner = &contexts[1];
        s.spawn(move || {
            let region = owner
                .alloc_region(region_len, Rights::ReadWrite)
                .expect("region");
            let mut ep = owner.endpoint(0).expect("endpoint");
            let conn = ep.connect(Addr::new(0, 0)).expect("connect");
            ep.send(conn, region.key().as_bytes()).expect("key");
            ep.recv(&mut [0u8; 4]).expect("done");
        });
        let mut ep = contexts[0].endpoint(0).expect("endpoint");
        let conn = ep.connect(Addr::new(1, 0)).expect("connect");
        let mut buf = [0u8; 64];
        let (n, _) = ep.recv(&mut buf).expect("key");
        let key = RemoteKey::from_bytes(&buf[..n]).expect("key");
        let data = vec![7u8; size];
        let mut into = vec![0u8; size];
        let warmup = (iters / 10).max(1);
        let mut took: Vec<Duration> = Vec::with_capacity(iters);
        let started = Instant::now();
        let mut timed_from = started;
        for i in 0..warmup + iters {
            if i == warmup {
                timed_from = Instant::now();
            }
            let t = Instant::now();
            match operation.as_str() {
                "put" => ep.put(conn, &data, &key, 0).expect("put"),
                "get" => ep.get(conn, &mut into, &key, 0).expect("get"),
                "fetch_add" => {
                    ep.fetch_add(conn, &key, 0, 1).expect("fetch_add");
                }
                "post_put" | "post_get" => {
                    let requests: Vec<_> = (0..WINDOW)
                        .map(|w| {
                            let at = (w * size) as u64;
                            if operation == "post_put" {
                                ep.post_put(conn, data.clone(), &key, at).expect("post_put")
                            } else {
                                ep.post_get(conn, size, &key, at).expect("post_get")
                            }
                        })
                        .collect();
                    for req in requests {
                        ep.wait_rma(req).expect("wait_rma");
                    }
                }
                other => panic!("unknown operation {other}"),
            }
            if i >= warmup {
                took.push(t.elapsed());
            }
        }
        ep.flush(conn).expect("flush");
        let timed = timed_from.elapsed();
        ep.send(conn, b"done").expect("done");
        took.sort_unstable();
        let per_round = if operation.starts_with("post_") {
            WINDOW
        } else {
            1
        };
        let ops = (iters * per_round) as f64;
        let median_us = took[took.len() / 2].as_secs_f64() * 1e6 / per_round as f64;
        let mbps = ops * size as f64 / timed.as_secs_f64() / 1e6;
        let mops = ops / timed.as_secs_f64() / 1e6;
        println!(
            "{kind} {operation} {size} B: {median_us:.2} µs median per operation, \
             {mbps:.1} MB/s, {mops:.3} M operations/s ({ops} operations)"
        );
    });
}
