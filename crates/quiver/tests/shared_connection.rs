//! One network connection carries both directions of an endpoint pair (for latency):
//! over tcp one stream, over udp and mem one reliable connection, whether the two
//! endpoints connect one after the other or at the same moment (a crossed connect, which
//! the lower address resolves by refusing the other's attempt with `Busy`). Acknowledgements
//! then ride on the answers: a ping-pong costs one datagram per message. A reverse edge the
//! peer never sends on stays silent: its connection's failure is reported on the outbound
//! edge only.

use std::collections::BTreeSet;
use std::net::{Ipv4Addr, SocketAddr, TcpListener, UdpSocket};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Barrier, Mutex};
use std::thread;
use std::time::Duration;

use quiver::{Addr, Config, Context, Error, TransportKind};

/// A free port for both tcp and udp on 127.0.0.1, never one handed out before in this
/// process: the port is free only until a rank binds it, and the tests run in parallel, so
/// a port just released by one pair's probe could otherwise go to another pair too.
fn free_port() -> u16 {
    static HANDED_OUT: Mutex<BTreeSet<u16>> = Mutex::new(BTreeSet::new());
    loop {
        let tcp = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).unwrap();
        let port = tcp.local_addr().unwrap().port();
        if UdpSocket::bind((Ipv4Addr::LOCALHOST, port)).is_ok()
            && HANDED_OUT.lock().unwrap().insert(port)
        {
            return port;
        }
    }
}

static NEXT_JOB: AtomicU32 = AtomicU32::new(1);

/// Two contexts of one job over `transport` on loopback (mem: in-process addresses).
fn pair(transport: TransportKind) -> (Vec<SocketAddr>, Vec<Context>) {
    let n = NEXT_JOB.fetch_add(1, Ordering::Relaxed);
    let id = (u64::from(std::process::id()) << 32) | u64::from(n) | 0x5300_0000;
    let mut key = [0u8; 32];
    key[..8].copy_from_slice(&id.to_le_bytes());
    let addrs: Vec<SocketAddr> = match transport {
        TransportKind::Mem => (0..2u8)
            .map(|r| {
                let ip = Ipv4Addr::new(127, 200 + (n % 50) as u8, r, 9);
                SocketAddr::new(ip.into(), 41_000 + (std::process::id() % 20_000) as u16)
            })
            .collect(),
        _ => (0..2)
            .map(|_| SocketAddr::new(Ipv4Addr::LOCALHOST.into(), free_port()))
            .collect(),
    };
    let config = Config {
        transports: vec![transport],
        connect_timeout: Duration::from_secs(10),
        op_timeout: Some(Duration::from_secs(30)),
        ..Config::default()
    };
    let contexts = (0..2)
        .map(|rank| {
            Context::builder()
                .rank(rank)
                .size(2)
                .job_id(id)
                .job_key(key)
                .addrs(addrs.clone())
                .config(config.clone())
                .build()
                .unwrap()
        })
        .collect();
    (addrs, contexts)
}

/// Established tcp sockets of this machine with a local or remote port among `ports`
/// (both ends of every stream between the two ranks: 2 per stream).
fn established_ends(ports: &[u16]) -> usize {
    let table = std::fs::read_to_string("/proc/net/tcp").unwrap();
    let port_of = |field: &str| u16::from_str_radix(field.rsplit(':').next().unwrap(), 16).ok();
    table
        .lines()
        .skip(1)
        .filter(|line| {
            let fields: Vec<&str> = line.split_whitespace().collect();
            fields.len() > 3
                && fields[3] == "01"
                && [fields[1], fields[2]]
                    .iter()
                    .any(|f| port_of(f).is_some_and(|p| ports.contains(&p)))
        })
        .count()
}

const ROUND_TRIPS: u32 = 2000;

/// Both ranks connect (at once when `crossed`, else rank 1 only after rank 0's first
/// message), then ping-pong; checks one connection and the datagrams per message.
fn ping_pong(transport: TransportKind, crossed: bool) {
    let (addrs, contexts) = pair(transport);
    let barrier = Barrier::new(2);
    thread::scope(|s| {
        for (rank, ctx) in contexts.iter().enumerate() {
            let (barrier, addrs) = (&barrier, &addrs);
            s.spawn(move || {
                let mut ep = ctx.endpoint(0).unwrap();
                let peer = Addr::new(1 - rank as u32, 0);
                let mut buf = [0u8; 8];
                barrier.wait();
                let conn = if crossed || rank == 0 {
                    ep.connect(peer).unwrap()
                } else {
                    // Connects back after the peer's connection arrived: reuses it.
                    let (n, from) = ep.recv(&mut buf).unwrap();
                    assert_eq!((n, from), (8, peer));
                    ep.connect(peer).unwrap()
                };
                if !crossed && rank == 0 {
                    ep.send(conn, &[7; 8]).unwrap();
                }
                if !crossed && rank == 1 {
                    ep.send(conn, &[7; 8]).unwrap();
                }
                if !crossed && rank == 0 {
                    assert_eq!(ep.recv(&mut buf).unwrap(), (8, peer));
                }
                for i in 0..ROUND_TRIPS {
                    let msg = i.to_le_bytes().repeat(2);
                    if rank == 0 {
                        ep.send(conn, &msg).unwrap();
                        assert_eq!(ep.recv(&mut buf).unwrap(), (8, peer));
                    } else {
                        assert_eq!(ep.recv(&mut buf).unwrap(), (8, peer));
                        ep.send(conn, &buf).unwrap();
                    }
                    assert_eq!(buf[..], msg[..], "round trip {i}");
                }
                if transport == TransportKind::Tcp {
                    let ports: Vec<u16> = addrs.iter().map(SocketAddr::port).collect();
                    let ends = established_ends(&ports);
                    assert_eq!(
                        ends,
                        2,
                        "one tcp stream for the pair; {:?}",
                        std::fs::read_to_string("/proc/net/tcp")
                            .unwrap()
                            .lines()
                            .filter(|l| ports.iter().any(|p| l.contains(&format!(":{p:04X} "))))
                            .collect::<Vec<_>>()
                    );
                }
                barrier.wait();
                let stats = ctx.stats();
                // One accepted connection each: one on the wire, one logical (the reverse
                // edge counts once the peer sent on it).
                assert_eq!(stats.connections_accepted, 1, "rank {rank}");
                assert_eq!(stats.connections_refused, 0, "rank {rank}");
                assert_eq!(stats.tcp.is_some(), transport == TransportKind::Tcp);
                if let Some(tcp) = stats.tcp {
                    // The one stream, open at both ends; one of them connected it.
                    assert_eq!(tcp.connections, 1, "rank {rank}: {tcp:?}");
                    assert_eq!(tcp.connected + tcp.accepted, 1, "rank {rank}: {tcp:?}");
                }
                if let Some(datagrams) = stats.datagram {
                    // One connection: each message is one datagram with the ack of the
                    // previous one riding on it (two connections cost 1.5 per message; the
                    // count itself depends on timing, so it is only printed).
                    assert_eq!(datagrams.connections, 1, "rank {rank}");
                    println!(
                        "{transport:?} rank {rank}: {} datagrams sent for {ROUND_TRIPS} messages",
                        datagrams.datagrams_sent
                    );
                }
                barrier.wait();
            });
        }
    });
}

/// Rank 0 sends to rank 1, which never connects back and then closes: rank 0's sends
/// fail, and its receives report nothing for the reverse edge rank 1 never used.
fn one_way_then_close(transport: TransportKind) {
    let (_, contexts) = pair(transport);
    let barrier = Barrier::new(2);
    thread::scope(|s| {
        for (rank, ctx) in contexts.iter().enumerate() {
            let barrier = &barrier;
            s.spawn(move || {
                let mut ep = ctx.endpoint(0).unwrap();
                barrier.wait();
                if rank == 1 {
                    let mut buf = [0u8; 8];
                    ep.recv(&mut buf).unwrap();
                    assert_eq!(ep.inbound_count(), 1);
                    if let Some(tcp) = ctx.stats().tcp {
                        let accepted = quiver::TcpStats {
                            connections: 1,
                            connected: 0,
                            accepted: 1,
                        };
                        assert_eq!(tcp, accepted);
                    }
                    drop(ep);
                    if let Some(tcp) = ctx.stats().tcp {
                        assert_eq!(tcp.connections, 0, "closed with its endpoint: {tcp:?}");
                    }
                    barrier.wait();
                    return;
                }
                let conn = ep.connect(Addr::new(1, 0)).unwrap();
                ep.send(conn, b"one").unwrap();
                // Nobody sent to rank 0: the reverse edge is not an inbound connection.
                assert_eq!(ep.inbound_count(), 0);
                let stats = ctx.stats();
                assert_eq!(stats.connections_accepted, 0);
                // ... but the stream it opened counts at its end too.
                assert_eq!(stats.tcp.is_some(), transport == TransportKind::Tcp);
                if let Some(tcp) = stats.tcp {
                    let connected = quiver::TcpStats {
                        connections: 1,
                        connected: 1,
                        accepted: 0,
                    };
                    assert_eq!(tcp, connected);
                }
                barrier.wait();
                let msg = vec![0u8; 64 << 10];
                let mut result = Ok(());
                let mut buf = [0u8; 8];
                for _ in 0..100_000 {
                    match ep.try_recv(&mut buf) {
                        Err(Error::WouldBlock) => {}
                        other => panic!("the silent reverse edge reported {other:?}"),
                    }
                    result = ep.send(conn, &msg);
                    if result.is_err() {
                        break;
                    }
                    thread::sleep(Duration::from_micros(100));
                }
                match result {
                    Err(Error::PeerClosed { peer }) | Err(Error::Unreachable { peer, .. }) => {
                        assert_eq!(peer, Addr::new(1, 0))
                    }
                    other => panic!("expected PeerClosed or Unreachable, got {other:?}"),
                }
                for _ in 0..10 {
                    match ep.try_recv(&mut buf) {
                        Err(Error::WouldBlock) => {}
                        other => panic!("the silent reverse edge reported {other:?}"),
                    }
                }
            });
        }
    });
}

macro_rules! transport_tests {
    ($name:ident, $kind:expr) => {
        mod $name {
            use super::*;
            #[test]
            fn crossed_connect_shares_one_connection() {
                ping_pong($kind, true);
            }
            #[test]
            fn connecting_back_reuses_the_peers_connection() {
                ping_pong($kind, false);
            }
            #[test]
            fn an_unused_reverse_edge_stays_silent() {
                one_way_then_close($kind);
            }
        }
    };
}

transport_tests!(tcp, TransportKind::Tcp);
transport_tests!(udp, TransportKind::Udp);
transport_tests!(mem, TransportKind::Mem);
