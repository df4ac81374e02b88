//! A target that dies while an initiator waits on its one-sided operation over tcp or udp:
//! the initiator gets `Error::PeerDead`, promptly, never a hang. (Over udp the target's
//! process identity comes in the request connection's handshake; without it the wait
//! would end only at the idle timeout, with `Unreachable`.)
//!
//! The target is this test binary run again as a child process (the test's own name, an
//! environment variable saying which rank it plays): it allocates a region, sends its key,
//! then stops calling into quiver, so the initiator's get waits for a reply; the test
//! kills it with SIGKILL meanwhile.

use std::net::{Ipv4Addr, SocketAddr, TcpListener};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use quiver::{Addr, Config, Context, Error, RemoteKey, Rights, TransportKind};

/// Set in the child: the addresses of both ranks, the job id, then the transport.
const CHILD_VAR: &str = "RMA_PEER_DEATH_TARGET";

fn context(rank: u32, addrs: &[SocketAddr], job_id: u64, transport: TransportKind) -> Context {
    let config = Config {
        transports: vec![transport],
        connect_timeout: Duration::from_secs(20),
        op_timeout: Some(Duration::from_secs(60)),
        ..Config::default()
    };
    Context::builder()
        .rank(rank)
        .size(2)
        .job_id(job_id)
        .job_key([0x42; 32])
        .addrs(addrs.to_vec())
        .config(config)
        .build()
        .unwrap()
}

/// The target's part, in the child: a region, its key to rank 0, then silence.
fn be_the_target(spec: &str) {
    let mut parts = spec.split(',');
    let addrs: Vec<SocketAddr> = (0..2)
        .map(|_| parts.next().unwrap().parse().unwrap())
        .collect();
    let job_id: u64 = parts.next().unwrap().parse().unwrap();
    let transport = TransportKind::from_name(parts.next().unwrap()).unwrap();
    let ctx = context(1, &addrs, job_id, transport);
    let region = ctx.alloc_region(1 << 20, Rights::ReadWrite).unwrap();
    let mut ep = ctx.endpoint(0).unwrap();
    let conn = ep.connect(Addr::new(0, 0)).unwrap();
    ep.send(conn, region.key().as_bytes()).unwrap();
    if transport != TransportKind::Tcp {
        // Over datagrams only a quiver call of ours answers the request connection's
        // handshake: keep receiving (serving the initiator's first put) until it says go.
        let mut go = [0u8; 1];
        ep.recv(&mut go).unwrap();
    }
    // No more quiver calls: a peer's operation now waits until this process dies.
    std::thread::sleep(Duration::from_secs(120));
}

#[test]
fn a_target_that_dies_mid_get_is_peer_dead_at_the_initiator() {
    dies_mid_get(
        TransportKind::Tcp,
        "a_target_that_dies_mid_get_is_peer_dead_at_the_initiator",
    );
}

#[test]
fn a_udp_target_that_dies_mid_get_is_peer_dead_at_the_initiator() {
    dies_mid_get(
        TransportKind::Udp,
        "a_udp_target_that_dies_mid_get_is_peer_dead_at_the_initiator",
    );
}

/// The test over `transport`; `name` is the test's own, to run it again as the target.
fn dies_mid_get(transport: TransportKind, name: &str) {
    if let Ok(spec) = std::env::var(CHILD_VAR) {
        be_the_target(&spec);
        return;
    }
    let port = || {
        let l = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).unwrap();
        l.local_addr().unwrap().port()
    };
    let addrs: Vec<SocketAddr> = (0..2)
        .map(|_| SocketAddr::new(Ipv4Addr::LOCALHOST.into(), port()))
        .collect();
    // One job per test: the tests of this binary run at once in one process.
    let job_id = u64::from(std::process::id()) << 16 | 0x70 | transport as u64;
    let spec = format!("{},{},{job_id},{transport}", addrs[0], addrs[1]);
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args(["--exact", name, "--nocapture"])
        .env(CHILD_VAR, spec)
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    let ctx = context(0, &addrs, job_id, transport);
    let mut ep = ctx.endpoint(0).unwrap();
    let mut buf = [0u8; 64];
    let (n, from) = ep.recv(&mut buf).unwrap();
    let key = RemoteKey::from_bytes(&buf[..n]).unwrap();
    let conn = ep.connect(from).unwrap();
    if transport != TransportKind::Tcp {
        // The request connection opened while the target still calls into quiver.
        ep.put(conn, &[7; 8], &key, 0).unwrap();
        ep.send(conn, &[1]).unwrap();
    }
    let pid = child.id();
    let killer = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(300));
        // kill(1): this test crate does not depend on libc.
        Command::new("kill")
            .args(["-KILL", &pid.to_string()])
            .status()
            .unwrap();
    });
    let started = Instant::now();
    let mut into = vec![0u8; 1 << 20];
    let e = ep.get(conn, &mut into, &key, 0).unwrap_err();
    let waited = started.elapsed();
    killer.join().unwrap();
    let _ = child.wait();
    assert!(matches!(e, Error::PeerDead { .. }), "{e}");
    assert!(
        waited < Duration::from_secs(10),
        "the error came {waited:?} after the get began"
    );
    // Later operations fail the same way, at once.
    let started = Instant::now();
    let e = ep.fetch_add(conn, &key, 0, 1).unwrap_err();
    assert!(matches!(e, Error::PeerDead { .. }), "{e}");
    let e = ep.flush(conn).unwrap_err();
    assert!(matches!(e, Error::PeerDead { .. }), "{e}");
    assert!(started.elapsed() < Duration::from_secs(1));
}
