//! A rank serves its peers' one-sided requests in every blocking wait, not only in
//! `progress` and receives: while it is blocked sending over shm (its ring full, or a
//! large message waiting for the receiver to pull it), a peer's get over tcp or udp from
//! it completes; while it is blocked in a receive in the middle of a message whose sender
//! posted it, the sender's atomic on memory it lent (served on the shm socket pair)
//! completes; and while it retries a connect to an endpoint the peer opens only after its
//! get, the get completes. Each case is a deadlock without that: one rank waits for the
//! other, which waits in its one-sided operation for the first. The ranks of a job are
//! contexts in one process (threads); every wait has a timeout, so a deadlock fails the
//! test instead of hanging it.

use std::net::{Ipv4Addr, SocketAddr, TcpListener, UdpSocket};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use quiver::{Addr, Config, Context, RemoteKey, Rights, TransportKind};

static NEXT_JOB: AtomicU64 = AtomicU64::new(1);

/// How long a case may take at most, on a loaded machine: the deadlock it guards against
/// would last until the calls' timeout.
const BOUND: Duration = Duration::from_secs(30);

/// A free port for both tcp and udp on loopback, never one handed out before in this
/// process (the tests run in parallel).
fn free_port() -> u16 {
    static HANDED_OUT: std::sync::Mutex<std::collections::BTreeSet<u16>> =
        std::sync::Mutex::new(std::collections::BTreeSet::new());
    loop {
        let l = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).unwrap();
        let port = l.local_addr().unwrap().port();
        if UdpSocket::bind((Ipv4Addr::LOCALHOST, port)).is_ok()
            && HANDED_OUT.lock().unwrap().insert(port)
        {
            return port;
        }
    }
}

/// A two-rank job on loopback whose rank `r` uses `transports[r]` (in that order of
/// preference), with every call bounded by a timeout.
fn job(transports: [&[TransportKind]; 2]) -> (Context, Context) {
    let id = (u64::from(std::process::id()) << 32)
        | 0x3300_0000
        | NEXT_JOB.fetch_add(1, Ordering::Relaxed);
    let mut key = [0u8; 32];
    key[..8].copy_from_slice(&id.to_le_bytes());
    let addrs: Vec<SocketAddr> = (0..2)
        .map(|_| SocketAddr::new(Ipv4Addr::LOCALHOST.into(), free_port()))
        .collect();
    let build = |rank: usize| {
        let config = Config {
            transports: transports[rank].to_vec(),
            connect_timeout: Duration::from_secs(20),
            // A deadlock ends in a timeout, which fails the test.
            op_timeout: Some(Duration::from_secs(40)),
            ..Config::default()
        };
        Context::builder()
            .rank(rank as u32)
            .size(2)
            .job_id(id)
            .job_key(key)
            .addrs(addrs.clone())
            .config(config)
            .build()
            .unwrap()
    };
    (build(0), build(1))
}

fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
        .collect()
}

/// How the sender's blocking sends over shm wait for the receiver.
#[derive(Clone, Copy, Debug)]
enum Blocked {
    /// One message above the eager limit: it waits until the receiver pulls it.
    Rendezvous,
    /// Eager messages, more than the ring holds: they wait for ring space.
    RingFull,
}

impl Blocked {
    /// The messages the sender sends.
    fn messages(self) -> Vec<Vec<u8>> {
        match self {
            Blocked::Rendezvous => vec![pattern(8 << 20, 1)],
            Blocked::RingFull => (0..24).map(|i| pattern(128 << 10, i)).collect(),
        }
    }
}

/// Rank 0 (shm to rank 1, and `net`) holds a region and sends rank 1 messages over shm
/// with blocking sends that cannot finish until rank 1 receives; rank 1 (`net` only)
/// first gets rank 0's region over `net`, which only rank 0's blocked send can serve,
/// then receives the messages.
fn a_get_from_a_rank_blocked_in_a_shm_send_completes(net: TransportKind, blocked: Blocked) {
    let (c0, c1) = job([&[TransportKind::Shm, net], &[net]]);
    let started = Instant::now();
    let region_len = 1 << 20;
    let contents = pattern(region_len, 7);
    let sender = std::thread::spawn(move || {
        let region = c0.alloc_region(region_len, Rights::ReadWrite).unwrap();
        region.write(0, &contents).unwrap();
        let mut ep = c0.endpoint(0).unwrap();
        let conn = ep.connect(Addr::new(1, 0)).unwrap();
        assert_eq!(ep.transport(conn).unwrap().kind, TransportKind::Shm);
        ep.send(conn, region.key().as_bytes()).unwrap();
        for message in blocked.messages() {
            ep.send(conn, &message)
                .unwrap_or_else(|e| panic!("{blocked:?} send over shm: {e}"));
        }
        // Rank 1's word that it has it all (over `net`).
        let mut done = [0u8; 4];
        ep.recv(&mut done).unwrap();
        region
    });
    let mut ep = c1.endpoint(0).unwrap();
    let back = ep.connect(Addr::new(0, 0)).unwrap();
    assert_eq!(ep.transport(back).unwrap().kind, net);
    let mut buf = [0u8; 64];
    let (n, _) = ep.recv(&mut buf).unwrap();
    let key = RemoteKey::from_bytes(&buf[..n]).unwrap();
    // Rank 0 is blocked in its send by now (asleep in it, past its spin).
    std::thread::sleep(Duration::from_millis(300));
    let mut got = vec![0u8; region_len];
    ep.get(back, &mut got, &key, 0)
        .unwrap_or_else(|e| panic!("get over {net:?} while the target sends: {e}"));
    assert!(got == pattern(region_len, 7), "the get's bytes");
    for message in blocked.messages() {
        let mut into = vec![0u8; message.len()];
        let (n, src) = ep.recv(&mut into).unwrap();
        assert_eq!((n, src), (message.len(), Addr::new(0, 0)));
        assert!(into == message);
    }
    ep.send(back, b"done").unwrap();
    sender.join().unwrap();
    assert!(
        started.elapsed() < BOUND,
        "took {:?}: the get waited for the send",
        started.elapsed()
    );
}

#[test]
fn a_tcp_get_from_a_rank_blocked_in_a_shm_rendezvous_completes() {
    a_get_from_a_rank_blocked_in_a_shm_send_completes(TransportKind::Tcp, Blocked::Rendezvous);
}

#[test]
fn a_tcp_get_from_a_rank_blocked_on_a_full_shm_ring_completes() {
    a_get_from_a_rank_blocked_in_a_shm_send_completes(TransportKind::Tcp, Blocked::RingFull);
}

#[test]
fn a_udp_get_from_a_rank_blocked_in_a_shm_rendezvous_completes() {
    a_get_from_a_rank_blocked_in_a_shm_send_completes(TransportKind::Udp, Blocked::Rendezvous);
}

#[test]
fn a_udp_get_from_a_rank_blocked_on_a_full_shm_ring_completes() {
    a_get_from_a_rank_blocked_in_a_shm_send_completes(TransportKind::Udp, Blocked::RingFull);
}

/// Rank 1 lends memory, and receives once rank 0 has posted sends over shm that overfill
/// the ring (what does not fit is written only when rank 0 calls into quiver again) and
/// applied a fetch-add to the lent memory (served by rank 1's progress engine on the
/// socket pair). Rank 1's receive of the message the ring holds only the start of waits
/// for its rest in the middle of the message, so it must serve the fetch-add meanwhile.
#[test]
fn an_atomic_on_lent_memory_completes_while_its_owner_waits_in_the_middle_of_a_message() {
    let (c0, c1) = job([&[TransportKind::Shm], &[TransportKind::Shm]]);
    let started = Instant::now();
    let messages: Vec<Vec<u8>> = (0..12).map(|i| pattern(130 << 10, i)).collect();
    let expected = messages.clone();
    let owner = std::thread::spawn(move || {
        let mut ep = c1.endpoint(0).unwrap();
        let conn = ep.connect(Addr::new(0, 0)).unwrap();
        let mut memory = vec![0u8; 4096];
        let word = c1
            .register(&mut memory, Rights::ReadWrite, |region| {
                ep.send(conn, region.key().as_bytes()).unwrap();
                // Rank 0 posts its sends and waits in its fetch-add meanwhile.
                std::thread::sleep(Duration::from_millis(300));
                for message in &expected {
                    let mut into = vec![0u8; message.len()];
                    let (n, _) = ep
                        .recv(&mut into)
                        .unwrap_or_else(|e| panic!("receive while lending: {e}"));
                    assert_eq!(n, message.len());
                    assert!(&into == message);
                }
                let mut done = [0u8; 4];
                ep.recv(&mut done).unwrap();
                region.load(0).unwrap()
            })
            .unwrap();
        assert_eq!(word, 5);
    });
    let mut ep = c0.endpoint(0).unwrap();
    let conn = ep.connect(Addr::new(1, 0)).unwrap();
    let mut buf = [0u8; 64];
    let (n, _) = ep.recv(&mut buf).unwrap();
    let key = RemoteKey::from_bytes(&buf[..n]).unwrap();
    let posted: Vec<_> = messages
        .iter()
        .map(|m| ep.post_send(conn, m.clone()).unwrap())
        .collect();
    let before = ep
        .fetch_add(conn, &key, 0, 5)
        .unwrap_or_else(|e| panic!("fetch_add on lent memory: {e}"));
    assert_eq!(before, 0);
    for request in posted {
        ep.wait_send(request).unwrap();
    }
    ep.send(conn, b"done").unwrap();
    owner.join().unwrap();
    assert!(
        started.elapsed() < BOUND,
        "took {:?}: the atomic waited for the receive",
        started.elapsed()
    );
}

/// Rank 0 connects to an endpoint rank 1 opens only after its get from rank 0 (over
/// `net`): the connect's retries serve the get meanwhile.
fn a_get_from_a_rank_waiting_to_connect_completes(net: TransportKind) {
    let (c0, c1) = job([&[net], &[net]]);
    let started = Instant::now();
    let contents = pattern(4096, 3);
    let expected = contents.clone();
    let connecting = std::thread::spawn(move || {
        let region = c0.alloc_region(4096, Rights::Read).unwrap();
        region.write(0, &contents).unwrap();
        let mut ep = c0.endpoint(0).unwrap();
        let conn = ep.connect(Addr::new(1, 0)).unwrap();
        ep.send(conn, region.key().as_bytes()).unwrap();
        // Rank 1's port 1 opens once its get is done.
        let later = ep
            .connect(Addr::new(1, 1))
            .unwrap_or_else(|e| panic!("connect over {net:?}: {e}"));
        ep.send(later, b"hi").unwrap();
        region
    });
    let mut ep = c1.endpoint(0).unwrap();
    let back = ep.connect(Addr::new(0, 0)).unwrap();
    let mut buf = [0u8; 64];
    let (n, _) = ep.recv(&mut buf).unwrap();
    let key = RemoteKey::from_bytes(&buf[..n]).unwrap();
    std::thread::sleep(Duration::from_millis(200));
    let mut got = vec![0u8; 4096];
    ep.get(back, &mut got, &key, 0)
        .unwrap_or_else(|e| panic!("get over {net:?} while the target connects: {e}"));
    assert!(got == expected);
    let mut ep1 = c1.endpoint(1).unwrap();
    let (n, _) = ep1.recv(&mut buf).unwrap();
    assert_eq!(&buf[..n], b"hi");
    connecting.join().unwrap();
    assert!(
        started.elapsed() < BOUND,
        "took {:?}: the get waited for the connect",
        started.elapsed()
    );
}

#[test]
fn a_tcp_get_from_a_rank_waiting_to_connect_completes() {
    a_get_from_a_rank_waiting_to_connect_completes(TransportKind::Tcp);
}

#[test]
fn a_udp_get_from_a_rank_waiting_to_connect_completes() {
    a_get_from_a_rank_waiting_to_connect_completes(TransportKind::Udp);
}
