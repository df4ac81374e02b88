//! One-sided communication, the same tests over every transport (shm: the initiator's
//! own copies and atomics; tcp, udp and xdp: the target's software path), with the ranks
//! of a job as contexts in one process (threads; xdp: each in a network namespace of its
//! own, root only). The target serves requests while it is in a
//! quiver call, so every target here waits in `recv` (docs/rma.md).
//!
//! - put and get of 0 B..64 MiB at random offsets, verified, interleaved with messages;
//! - flush ordering: what a message sent after a put and a flush finds in the region;
//! - atomics from many ranks at once on one word: the fetched values and the final value
//!   are those of some serial order;
//! - refusals (revoked, forged, random bytes, another job's key, wrong rights): typed
//!   errors, counted, the target unharmed.

use std::collections::HashSet;
use std::net::{Ipv4Addr, SocketAddr, TcpListener, UdpSocket};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Barrier};
use std::time::Duration;

use quiver::{Addr, Config, Context, Endpoint, Error, RemoteKey, Rights, TransportKind};

mod xdp_net;
use xdp_net::XdpNet;

static NEXT_JOB: AtomicU64 = AtomicU64::new(1);

/// A free port for both tcp and udp on loopback, never one handed out before in this
/// process: the port is free only until a rank binds it, and the tests run in parallel, so
/// a port just released by one job's probe could otherwise go to another job too.
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

/// The contexts of a job of `size` ranks over `kind`, by rank, and for xdp the network
/// namespaces they live in (each rank in its own; dropped after the contexts).
fn job(kind: TransportKind, size: u32) -> (Vec<Context>, Option<XdpNet>) {
    let id = (u64::from(std::process::id()) << 32)
        | 0x5100_0000
        | NEXT_JOB.fetch_add(1, Ordering::Relaxed);
    let mut key = [0u8; 32];
    key[..8].copy_from_slice(&id.to_le_bytes());
    let config = Config {
        transports: vec![kind],
        connect_timeout: Duration::from_secs(20),
        // A hang fails the test instead of stalling the suite.
        op_timeout: Some(Duration::from_secs(120)),
        // The targets verify up to 64 MiB between two calls (seconds on a loaded machine,
        // with the datagram engine unpolled meanwhile): not a dead peer.
        net_idle_timeout: Duration::from_secs(20),
        ..Config::default()
    };
    let net = (kind == TransportKind::Xdp).then(|| XdpNet::up(size as usize).expect("namespaces"));
    let addrs: Vec<SocketAddr> = match (&net, kind) {
        (_, TransportKind::Shm) => Vec::new(),
        (Some(net), _) => (0..size as usize).map(|r| net.address(r, 7100)).collect(),
        (None, _) => (0..size)
            .map(|_| SocketAddr::new(Ipv4Addr::LOCALHOST.into(), free_port()))
            .collect(),
    };
    let contexts = (0..size)
        .map(|rank| {
            let build = || {
                let mut builder = Context::builder()
                    .rank(rank)
                    .size(size)
                    .job_id(id)
                    .job_key(key)
                    .config(config.clone());
                if !addrs.is_empty() {
                    builder = builder.addrs(addrs.clone());
                }
                builder.build().unwrap()
            };
            match &net {
                Some(net) => net.in_host(rank as usize, build),
                None => build(),
            }
        })
        .collect();
    (contexts, net)
}

/// Whether a test over `kind` cannot run here (said on stderr): xdp needs root.
fn skip(kind: TransportKind) -> bool {
    let skipped = kind == TransportKind::Xdp && !xdp_net::is_root();
    if skipped {
        eprintln!("skipped: the xdp transport and its network namespaces need root");
    }
    skipped
}

/// A small deterministic generator (xorshift64*).
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    fn below(&mut self, n: u64) -> u64 {
        if n == 0 {
            0
        } else {
            self.next() % n
        }
    }
}

fn pattern(len: usize, seed: u64) -> Vec<u8> {
    let mut rng = Rng(seed | 1);
    (0..len).map(|_| rng.next() as u8).collect()
}

/// Receives a remote key sent as a message.
fn recv_key(ep: &mut Endpoint) -> RemoteKey {
    let mut buf = [0u8; 64];
    let (n, _) = ep.recv(&mut buf).unwrap();
    RemoteKey::from_bytes(&buf[..n]).unwrap()
}

const MIB: usize = 1 << 20;

/// Sizes of the put and get test (fewer of the largest under debug builds).
fn sizes() -> Vec<usize> {
    let mut sizes = vec![0, 1, 7, 8, 40, 4096, 65537, MIB];
    if cfg!(debug_assertions) {
        sizes.push(4 * MIB + 3);
    } else {
        sizes.extend([16 * MIB + 3, 64 * MIB]);
    }
    sizes
}

/// Puts of every size at random offsets, each followed by a message the target answers
/// after checking the bytes in its region, then a get of the same bytes back.
fn put_and_get_interleaved_with_messages(kind: TransportKind) {
    let (mut contexts, _net) = job(kind, 2);
    let c1 = contexts.pop().unwrap();
    let c0 = contexts.pop().unwrap();
    let sizes = sizes();
    let largest = *sizes.iter().max().unwrap();
    let region_len = largest + 4096;
    let rounds = sizes.len();
    let target = std::thread::spawn(move || {
        let region = c1.alloc_region(region_len, Rights::ReadWrite).unwrap();
        let mut ep = c1.endpoint(0).unwrap();
        let back = ep.connect(Addr::new(0, 0)).unwrap();
        ep.send(back, region.key().as_bytes()).unwrap();
        let mut check = vec![0u8; largest];
        for _ in 0..rounds {
            let mut note = [0u8; 24];
            let (n, _) = ep.recv(&mut note).unwrap();
            assert_eq!(n, 24);
            let field = |i: usize| u64::from_le_bytes(note[i * 8..i * 8 + 8].try_into().unwrap());
            let (offset, len, seed) = (field(0) as usize, field(1) as usize, field(2));
            region.read(offset, &mut check[..len]).unwrap();
            assert!(
                check[..len] == pattern(len, seed)[..],
                "put of {len} at {offset}"
            );
            ep.send(back, b"seen").unwrap();
        }
        let mut done = [0u8; 4];
        ep.recv(&mut done).unwrap();
        c1.rma_stats()
    });
    let mut ep = c0.endpoint(0).unwrap();
    let conn = ep.connect(Addr::new(1, 0)).unwrap();
    let key = recv_key(&mut ep);
    assert_eq!((key.rank(), key.len()), (1, region_len as u64));
    let mut rng = Rng(0x1234_5678);
    let mut got = vec![0u8; largest];
    for (i, &len) in sizes.iter().enumerate() {
        let offset = rng.below((region_len - len) as u64 + 1);
        let seed = i as u64 * 77 + 5;
        let data = pattern(len, seed);
        ep.put(conn, &data, &key, offset).unwrap();
        let mut note = Vec::new();
        for v in [offset, len as u64, seed] {
            note.extend_from_slice(&v.to_le_bytes());
        }
        ep.send(conn, &note).unwrap();
        let mut seen = [0u8; 4];
        ep.recv(&mut seen).unwrap();
        got[..len].fill(0x5a);
        ep.get(conn, &mut got[..len], &key, offset).unwrap();
        assert!(got[..len] == data[..], "get of {len} at {offset}");
    }
    ep.flush(conn).unwrap();
    ep.send(conn, b"done").unwrap();
    let target_stats = target.join().unwrap();
    assert_eq!(target_stats.keys_refused, 0);
    assert_eq!(target_stats.requests_refused, 0);
    assert_eq!(c0.rma_stats().accesses_refused, 0);
}

/// Puts, a flush, a flag put, then a message: when the message arrives, the target finds
/// the data and the flag in its region, every round.
fn flush_orders_puts_before_what_follows(kind: TransportKind) {
    let (mut contexts, _net) = job(kind, 2);
    let c1 = contexts.pop().unwrap();
    let c0 = contexts.pop().unwrap();
    const ROUNDS: u64 = 100;
    const DATA: usize = 4096;
    let target = std::thread::spawn(move || {
        let region = c1.alloc_region(8 + DATA, Rights::ReadWrite).unwrap();
        let mut ep = c1.endpoint(0).unwrap();
        let back = ep.connect(Addr::new(0, 0)).unwrap();
        ep.send(back, region.key().as_bytes()).unwrap();
        let mut data = vec![0u8; DATA];
        for round in 1..=ROUNDS {
            let mut msg = [0u8; 1];
            ep.recv(&mut msg).unwrap();
            assert_eq!(
                region.load(0).unwrap(),
                round,
                "the flag before the message"
            );
            region.read(8, &mut data).unwrap();
            assert!(data.iter().all(|&b| b == round as u8), "round {round}");
            ep.send(back, b"ok").unwrap();
        }
    });
    let mut ep = c0.endpoint(0).unwrap();
    let conn = ep.connect(Addr::new(1, 0)).unwrap();
    let key = recv_key(&mut ep);
    for round in 1..=ROUNDS {
        for part in 0..4 {
            let chunk = vec![round as u8; DATA / 4];
            ep.put(conn, &chunk, &key, 8 + (part * DATA / 4) as u64)
                .unwrap();
        }
        ep.flush(conn).unwrap();
        ep.swap(conn, &key, 0, round).unwrap();
        ep.send(conn, &[round as u8]).unwrap();
        let mut ack = [0u8; 2];
        ep.recv(&mut ack).unwrap();
    }
    target.join().unwrap();
}

/// Puts with notification, each into bytes of its own: every message the target receives
/// finds its put's data in the region, and the notifications arrive in order.
fn notification_arrives_after_its_data(kind: TransportKind) {
    let (mut contexts, _net) = job(kind, 2);
    let c1 = contexts.pop().unwrap();
    let c0 = contexts.pop().unwrap();
    const ROUNDS: u64 = 64;
    const DATA: usize = 65536 + 5;
    let target = std::thread::spawn(move || {
        let region = c1
            .alloc_region(DATA * ROUNDS as usize, Rights::ReadWrite)
            .unwrap();
        let mut ep = c1.endpoint(0).unwrap();
        let back = ep.connect(Addr::new(0, 0)).unwrap();
        ep.send(back, region.key().as_bytes()).unwrap();
        let mut data = vec![0u8; DATA];
        for round in 1..=ROUNDS {
            let mut note = [0u8; 8];
            let (n, _) = ep.recv(&mut note).unwrap();
            assert_eq!((n, u64::from_le_bytes(note)), (8, round), "in order");
            let at = (round - 1) as usize * DATA;
            region.read(at, &mut data).unwrap();
            assert!(
                data == pattern(DATA, round),
                "round {round}: the data first"
            );
        }
    });
    let mut ep = c0.endpoint(0).unwrap();
    let conn = ep.connect(Addr::new(1, 0)).unwrap();
    let key = recv_key(&mut ep);
    for round in 1..=ROUNDS {
        let data = pattern(DATA, round);
        let at = (round - 1) * DATA as u64;
        ep.put_notify(conn, &data, &key, at, &round.to_le_bytes())
            .unwrap();
        if round % 8 == 0 {
            // Now and then the target is slower than the puts: the next put waits.
            std::thread::sleep(Duration::from_millis(2));
        }
    }
    target.join().unwrap();
}

/// Posted operations: many outstanding at once, applied in posting order (a get posted
/// after a put reads its data, fetch_adds fetch 0, 1, 2, ...), `flush` waits for all of
/// them, each completion carries its bytes or word, and a refusal comes with its
/// completion, counted.
fn posted_operations_complete_in_order(kind: TransportKind) {
    let (mut contexts, _net) = job(kind, 2);
    let c1 = contexts.pop().unwrap();
    let c0 = contexts.pop().unwrap();
    const CHUNK: usize = 32 * 1024 + 3;
    const PUTS: usize = 40;
    let region_len = CHUNK * PUTS + 64;
    let target = std::thread::spawn(move || {
        let region = c1.alloc_region(region_len, Rights::ReadWrite).unwrap();
        let mut ep = c1.endpoint(0).unwrap();
        let back = ep.connect(Addr::new(0, 0)).unwrap();
        ep.send(back, region.key().as_bytes()).unwrap();
        let mut done = [0u8; 4];
        ep.recv(&mut done).unwrap();
        let mut chunk = vec![0u8; CHUNK];
        for i in 0..PUTS {
            region.read(i * CHUNK, &mut chunk).unwrap();
            assert!(chunk == pattern(CHUNK, i as u64 + 1), "put {i}");
        }
        assert_eq!(region.load(CHUNK * PUTS).unwrap(), 8);
        c1.rma_stats()
    });
    let mut ep = c0.endpoint(0).unwrap();
    let conn = ep.connect(Addr::new(1, 0)).unwrap();
    let key = recv_key(&mut ep);
    let word = (CHUNK * PUTS) as u64;
    let mut puts = Vec::new();
    let mut adds = Vec::new();
    let mut gets = Vec::new();
    for i in 0..PUTS {
        let at = (i * CHUNK) as u64;
        puts.push(
            ep.post_put(conn, pattern(CHUNK, i as u64 + 1), &key, at)
                .unwrap(),
        );
        if i % 5 == 0 {
            adds.push(ep.post_fetch_add(conn, &key, word, 1).unwrap());
            gets.push((i, ep.post_get(conn, CHUNK, &key, at).unwrap()));
        }
    }
    let mut forged = key.as_bytes().to_vec();
    forged[40] ^= 1;
    let forged = RemoteKey::from_bytes(&forged).unwrap();
    let refused = ep.post_swap(conn, &forged, 0, 1).unwrap();
    let whole = ep.post_get(conn, CHUNK * PUTS, &key, 0).unwrap();
    ep.flush(conn).unwrap();
    for req in &puts {
        assert!(
            ep.test_rma(req).unwrap(),
            "flush waited for every posted put"
        );
    }
    for (i, req) in puts.into_iter().enumerate() {
        let done = ep.wait_rma(req).unwrap();
        assert!(
            done.data == pattern(CHUNK, i as u64 + 1),
            "put {i}'s data back"
        );
    }
    for (n, req) in adds.into_iter().enumerate() {
        assert_eq!(
            ep.wait_rma(req).unwrap().value,
            n as u64,
            "in posting order"
        );
    }
    for (i, req) in gets {
        let got = ep.wait_rma(req).unwrap().data;
        assert!(got == pattern(CHUNK, i as u64 + 1), "the get after put {i}");
    }
    let e = ep.wait_rma(refused).unwrap_err();
    assert!(matches!(e, Error::RmaKeyRefused { rank: 1, .. }), "{e}");
    let all = ep.wait_rma(whole).unwrap().data;
    for i in 0..PUTS {
        assert!(all[i * CHUNK..(i + 1) * CHUNK] == pattern(CHUNK, i as u64 + 1));
    }
    // Blocking operations after posted ones keep the order too.
    assert_eq!(ep.fetch_add(conn, &key, word, 0).unwrap(), 8);
    ep.send(conn, b"done").unwrap();
    let there = target.join().unwrap();
    assert_eq!(there.keys_refused, 1, "{there:?}");
    assert_eq!(c0.rma_stats().accesses_refused, 1);
}

/// `initiators` ranks add 1 to one word `ops` times each at once, then increment another
/// with compare-and-swap loops and swap unique values through a third, while the owner
/// serves in `recv`: the fetched values are exactly those of some serial order.
///
/// Each operation keeps the job's 120 s bound, but the owner's receive of each "done" and
/// the initiators' receive of "bye" wait for whole runs of the others: 8 ranks' 150,000
/// operations over tcp took 63 s on a 2-core machine with other work, more than 120 s
/// beside the rest of the suite. Those waits get [`WHOLE_RUN`].
fn atomics_from_many_ranks_are_serializable(kind: TransportKind, initiators: u32, ops: u64) {
    const WHOLE_RUN: Duration = Duration::from_secs(600);
    let (mut contexts, _net) = job(kind, initiators + 1);
    let owner = contexts.remove(0);
    let region = owner.alloc_region(64, Rights::ReadWrite).unwrap();
    let key = region.key();
    let barrier = Arc::new(Barrier::new(initiators as usize));
    let mut workers = Vec::new();
    for ctx in contexts {
        let barrier = barrier.clone();
        workers.push(std::thread::spawn(move || {
            let mut ep = ctx.endpoint(0).unwrap();
            let conn = ep.connect(Addr::new(0, 0)).unwrap();
            barrier.wait();
            let mut fetched = Vec::with_capacity(ops as usize * 3 / 2);
            for _ in 0..ops {
                fetched.push(ep.fetch_add(conn, &key, 0, 1).unwrap());
            }
            for _ in 0..ops / 4 {
                let mut seen = ep.compare_swap(conn, &key, 8, 0, 0).unwrap();
                loop {
                    let before = ep.compare_swap(conn, &key, 8, seen, seen + 1).unwrap();
                    if before == seen {
                        fetched.push(1 << 40 | before);
                        break;
                    }
                    seen = before;
                }
            }
            let me = u64::from(ctx.rank()) << 24;
            for i in 0..ops / 4 {
                fetched.push(2 << 40 | ep.swap(conn, &key, 16, me | (i + 1)).unwrap());
            }
            ep.flush(conn).unwrap();
            ep.send(conn, b"done").unwrap();
            // The owner reads the words after every initiator is done; keep this context
            // (and its request streams) until then.
            let mut bye = [0u8; 3];
            ep.set_timeout(Some(WHOLE_RUN));
            ep.recv(&mut bye).unwrap();
            fetched
        }));
    }
    let mut ep = owner.endpoint(0).unwrap();
    ep.set_timeout(Some(WHOLE_RUN));
    let mut peers = Vec::new();
    for _ in 0..initiators {
        let mut done = [0u8; 4];
        let (_, from) = ep.recv(&mut done).unwrap();
        peers.push(from);
    }
    let n = u64::from(initiators);
    assert_eq!(region.load(0).unwrap(), n * ops);
    assert_eq!(region.load(8).unwrap(), n * (ops / 4));
    let last_swapped_in = region.load(16).unwrap();
    for peer in peers {
        let conn = ep.connect(peer).unwrap();
        ep.send(conn, b"bye").unwrap();
    }
    let mut all = Vec::new();
    for w in workers {
        all.extend(w.join().unwrap());
    }
    let mut adds: Vec<u64> = all.iter().copied().filter(|v| v >> 40 == 0).collect();
    adds.sort_unstable();
    assert_eq!(adds, (0..n * ops).collect::<Vec<_>>(), "fetch_add");
    let mut cas: Vec<u64> = all
        .iter()
        .filter(|v| *v >> 40 == 1)
        .map(|v| v & ((1 << 40) - 1))
        .collect();
    cas.sort_unstable();
    assert_eq!(cas, (0..n * (ops / 4)).collect::<Vec<_>>(), "compare_swap");
    // Swaps form one chain: every value swapped out is 0 (the first) or a value swapped
    // in, each once, and the value left is the one never swapped out.
    let mut out: Vec<u64> = all
        .iter()
        .filter(|v| *v >> 40 == 2)
        .map(|v| v & ((1 << 40) - 1))
        .collect();
    out.push(last_swapped_in);
    let unique: HashSet<u64> = out.iter().copied().collect();
    assert_eq!(unique.len(), out.len(), "no value swapped out twice");
    assert!(unique.contains(&0));
    assert_eq!(out.len() as u64, n * (ops / 4) + 1);
    let stats = owner.rma_stats();
    assert_eq!((stats.keys_refused, stats.requests_refused), (0, 0));
}

/// Refusals the target decides (revoked, forged, random bytes, another job's key, a key
/// asking for more rights than its region has): typed errors, counted at both ends, the
/// target's regions unharmed and a valid key still working afterwards.
fn refusals_are_typed_counted_and_harmless(kind: TransportKind) {
    let (mut contexts, _net) = job(kind, 2);
    let c1 = contexts.pop().unwrap();
    let c0 = contexts.pop().unwrap();
    let (mut strangers, _stranger_net) = job(kind, 2);
    let stranger = strangers.pop().unwrap();
    let foreign = stranger.alloc_region(64, Rights::ReadWrite).unwrap();
    let foreign_key = foreign.key();
    let target = std::thread::spawn(move || {
        let rw = c1.alloc_region(64, Rights::ReadWrite).unwrap();
        let ro = c1.alloc_region(64, Rights::Read).unwrap();
        rw.write(0, &[0xaa; 64]).unwrap();
        ro.write(0, &[0xbb; 64]).unwrap();
        let doomed = c1.alloc_region(64, Rights::ReadWrite).unwrap();
        let mut ep = c1.endpoint(0).unwrap();
        let back = ep.connect(Addr::new(0, 0)).unwrap();
        for key in [rw.key(), ro.key(), doomed.key()] {
            ep.send(back, key.as_bytes()).unwrap();
        }
        let mut msg = [0u8; 8];
        ep.recv(&mut msg).unwrap();
        assert_eq!(&msg[..4], b"drop");
        drop(doomed);
        ep.send(back, b"dropped").unwrap();
        ep.recv(&mut msg).unwrap();
        assert_eq!(&msg[..4], b"done");
        let mut check = [0u8; 64];
        ro.read(0, &mut check).unwrap();
        assert_eq!(check, [0xbb; 64], "the read-only region is unharmed");
        rw.read(0, &mut check).unwrap();
        assert_eq!(check[8..16], [0xcc; 8], "the valid put landed");
        check[8..16].fill(0xaa);
        assert_eq!(check, [0xaa; 64], "nothing else changed");
        c1.rma_stats()
    });
    let mut ep = c0.endpoint(0).unwrap();
    let conn = ep.connect(Addr::new(1, 0)).unwrap();
    let (rw_key, ro_key, doomed_key) = (recv_key(&mut ep), recv_key(&mut ep), recv_key(&mut ep));
    let mut refused_there = 0;
    // Used once while it lives (mapped over shm), then revoked.
    ep.put(conn, &[5; 8], &doomed_key, 0).unwrap();
    ep.send(conn, b"drop").unwrap();
    let mut msg = [0u8; 8];
    ep.recv(&mut msg).unwrap();
    let e = ep.put(conn, &[6; 8], &doomed_key, 0).unwrap_err();
    assert!(matches!(e, Error::RmaRevoked { rank: 1, .. }), "{e}");
    if kind != TransportKind::Shm {
        refused_there += 1;
    }
    // A read-only key forged into claiming write rights.
    let mut forged = ro_key.as_bytes().to_vec();
    forged[3] = 3;
    let forged = RemoteKey::from_bytes(&forged).unwrap();
    let e = ep.put(conn, &[1], &forged, 0).unwrap_err();
    assert!(matches!(e, Error::RmaKeyRefused { rank: 1, .. }), "{e}");
    refused_there += 1;
    // A forged capability.
    let mut forged = rw_key.as_bytes().to_vec();
    forged[40] ^= 0x10;
    let forged = RemoteKey::from_bytes(&forged).unwrap();
    let e = ep.put(conn, &[1; 64], &forged, 0).unwrap_err();
    assert!(matches!(e, Error::RmaKeyRefused { rank: 1, .. }), "{e}");
    refused_there += 1;
    // A capability of random bytes, for every operation.
    let mut rng = Rng(0xfeed);
    let mut random = rw_key.as_bytes().to_vec();
    for b in &mut random[32..] {
        *b = rng.next() as u8;
    }
    let random = RemoteKey::from_bytes(&random).unwrap();
    let e = ep.get(conn, &mut [0; 8], &random, 0).unwrap_err();
    assert!(matches!(e, Error::RmaKeyRefused { rank: 1, .. }), "{e}");
    let e = ep.fetch_add(conn, &random, 0, 1).unwrap_err();
    assert!(matches!(e, Error::RmaKeyRefused { rank: 1, .. }), "{e}");
    refused_there += 2;
    // Random bytes are not a key at all (refused here, before anything is sent).
    for len in [0, 5, RemoteKey::LEN, RemoteKey::LEN + 1] {
        let bytes: Vec<u8> = (0..len).map(|_| rng.next() as u8).collect();
        let e = RemoteKey::from_bytes(&bytes).unwrap_err();
        assert!(matches!(e, Error::RmaKeyRefused { .. }), "{e}");
    }
    // A key of another job whose rank and region number match.
    assert_eq!(foreign_key.rank(), 1);
    let e = ep.get(conn, &mut [0; 8], &foreign_key, 0).unwrap_err();
    assert!(matches!(e, Error::RmaKeyRefused { rank: 1, .. }), "{e}");
    refused_there += 1;
    // The target is unharmed and still serves.
    let mut buf = [0u8; 64];
    ep.get(conn, &mut buf, &ro_key, 0).unwrap();
    assert_eq!(buf, [0xbb; 64]);
    ep.put(conn, &[0xcc; 8], &rw_key, 8).unwrap();
    ep.flush(conn).unwrap();
    ep.send(conn, b"done").unwrap();
    let there = target.join().unwrap();
    assert_eq!(there.keys_refused, refused_there, "{there:?}");
    assert!(there.last_refusal.is_some());
    let here = c0.rma_stats();
    assert_eq!(here.accesses_refused, 6, "{here:?}");
    assert_eq!(stranger.rma_stats().keys_refused, 0);
}

macro_rules! conformance {
    ($($name:ident: $kind:expr,)*) => {$(
        mod $name {
            use super::*;

            #[test]
            fn put_and_get_from_0_bytes_interleaved_with_messages() {
                if skip($kind) {
                    return;
                }
                put_and_get_interleaved_with_messages($kind);
            }

            #[test]
            fn flush_orders_puts_before_a_later_message() {
                if skip($kind) {
                    return;
                }
                flush_orders_puts_before_what_follows($kind);
            }

            #[test]
            fn a_notification_arrives_after_its_data() {
                if skip($kind) {
                    return;
                }
                notification_arrives_after_its_data($kind);
            }

            #[test]
            fn posted_operations_complete_in_order() {
                if skip($kind) {
                    return;
                }
                super::posted_operations_complete_in_order($kind);
            }

            #[test]
            fn atomics_from_four_ranks_are_serializable() {
                if skip($kind) {
                    return;
                }
                let ops = if cfg!(debug_assertions) { 400 } else { 4000 };
                atomics_from_many_ranks_are_serializable($kind, 4, ops);
            }

            #[test]
            fn refusals_are_typed_counted_and_leave_the_target_unharmed() {
                if skip($kind) {
                    return;
                }
                refusals_are_typed_counted_and_harmless($kind);
            }
        }
    )*};
}

conformance! {
    shm: TransportKind::Shm,
    tcp: TransportKind::Tcp,
    udp: TransportKind::Udp,
    xdp: TransportKind::Xdp,
}

/// The number of operations each of 8 ranks applies in the large atomics test: 100,000
/// (and a quarter as many compare-and-swap increments and swaps), fewer under debug builds.
fn large_atomic_ops() -> u64 {
    if cfg!(debug_assertions) {
        2_000
    } else {
        100_000
    }
}

/// 8 ranks x 100,000 fetch_adds on one word at once over shm (CPU atomics in each
/// initiator): a serial order explains every fetched value and the final one.
#[test]
fn eight_ranks_of_atomics_on_one_word_over_shm_are_serializable() {
    atomics_from_many_ranks_are_serializable(TransportKind::Shm, 8, large_atomic_ops());
}

/// The same over tcp, where the owner's progress engine applies every operation.
#[test]
fn eight_ranks_of_atomics_on_one_word_over_tcp_are_serializable() {
    atomics_from_many_ranks_are_serializable(TransportKind::Tcp, 8, large_atomic_ops());
}
