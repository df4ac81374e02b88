//! One-sided communication over shared memory, with the ranks of a job as contexts in one
//! process (threads): registered regions, remote keys sent in messages, put and get of
//! 0 B..64 MiB interleaved with messages, flush ordering, atomics from several ranks and
//! threads on one word, and every refusal (bounds, rights, alignment, revoked, forged,
//! another job's or rank's key) a typed error, counted, with the target unharmed. The same
//! over every transport: `rma_conformance.rs`.

use std::collections::HashSet;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Barrier};
use std::time::Duration;

use quiver::{Addr, Config, Context, Error, RemoteKey, Rights};

static NEXT_JOB: AtomicU64 = AtomicU64::new(1);

/// The contexts of a job of `size` ranks over shm, by rank.
fn job(size: u32) -> Vec<Context> {
    let id = (u64::from(std::process::id()) << 32) | NEXT_JOB.fetch_add(1, Ordering::Relaxed);
    let mut key = [0u8; 32];
    key[..8].copy_from_slice(&id.to_le_bytes());
    let config = Config {
        connect_timeout: Duration::from_secs(10),
        ..Config::default()
    };
    (0..size)
        .map(|rank| {
            Context::builder()
                .rank(rank)
                .size(size)
                .job_id(id)
                .job_key(key)
                .config(config.clone())
                .build()
                .unwrap()
        })
        .collect()
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
fn recv_key(ep: &mut quiver::Endpoint) -> RemoteKey {
    let mut buf = [0u8; 64];
    let (n, _) = ep.recv(&mut buf).unwrap();
    RemoteKey::from_bytes(&buf[..n]).unwrap()
}

const MIB: usize = 1 << 20;
const SIZES: &[usize] = &[0, 1, 7, 8, 40, 4096, 65537, MIB, 16 * MIB + 3, 64 * MIB];

/// Puts of every size at random offsets, each followed by a message the target answers
/// after checking the bytes in its region, then a get of the same bytes back.
#[test]
fn put_and_get_from_0_bytes_to_64_mib_interleaved_with_messages() {
    let mut contexts = job(2);
    let c1 = contexts.pop().unwrap();
    let c0 = contexts.pop().unwrap();
    let region_len = 64 * MIB + 4096;
    let target = std::thread::spawn(move || {
        let region = c1.alloc_region(region_len, Rights::ReadWrite).unwrap();
        let mut ep = c1.endpoint(0).unwrap();
        let back = ep.connect(Addr::new(0, 0)).unwrap();
        ep.send(back, region.key().as_bytes()).unwrap();
        let mut check = vec![0u8; 64 * MIB];
        for _ in SIZES {
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
    let mut got = vec![0u8; 64 * MIB];
    for (i, &len) in SIZES.iter().enumerate() {
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
        ep.get(conn, &mut got[..len], &key, offset).unwrap();
        assert!(got[..len] == data[..], "get of {len} at {offset}");
    }
    ep.flush(conn).unwrap();
    ep.send(conn, b"done").unwrap();
    let target_stats = target.join().unwrap();
    assert_eq!(
        target_stats.keys_granted, 1,
        "the region is mapped once per key"
    );
    assert_eq!(target_stats.keys_refused, 0);
    assert_eq!(c0.rma_stats().accesses_refused, 0);
}

/// A put, then a flag put after a flush: whoever sees the flag sees the data. And a put,
/// then a message: the message's receiver sees the data.
#[test]
fn flush_orders_puts_before_what_follows() {
    let mut contexts = job(2);
    let c1 = contexts.pop().unwrap();
    let c0 = contexts.pop().unwrap();
    const ROUNDS: u64 = 200;
    const DATA: usize = 4096;
    let target = std::thread::spawn(move || {
        let region = c1.alloc_region(8 + DATA, Rights::ReadWrite).unwrap();
        let mut ep = c1.endpoint(0).unwrap();
        let back = ep.connect(Addr::new(0, 0)).unwrap();
        ep.send(back, region.key().as_bytes()).unwrap();
        let mut data = vec![0u8; DATA];
        for round in 1..=ROUNDS {
            while region.load(0).unwrap() != round {
                std::hint::spin_loop();
            }
            region.read(8, &mut data).unwrap();
            assert!(data.iter().all(|&b| b == round as u8), "round {round}");
            let mut msg = [0u8; 1];
            ep.recv(&mut msg).unwrap();
            region.read(8, &mut data).unwrap();
            assert_eq!(data[DATA - 1], msg[0], "the message comes after its put");
            ep.send(back, b"ok").unwrap();
        }
    });
    let mut ep = c0.endpoint(0).unwrap();
    let conn = ep.connect(Addr::new(1, 0)).unwrap();
    let key = recv_key(&mut ep);
    for round in 1..=ROUNDS {
        ep.put(conn, &vec![round as u8; DATA], &key, 8).unwrap();
        ep.flush(conn).unwrap();
        ep.put(conn, &round.to_ne_bytes(), &key, 0).unwrap();
        ep.send(conn, &[round as u8]).unwrap();
        // The next round's data only after the target checked this round's.
        let mut ack = [0u8; 2];
        ep.recv(&mut ack).unwrap();
    }
    target.join().unwrap();
}

/// 4 ranks with 2 threads (endpoints) each, and the owner itself, add 1 to one word:
/// the fetched values are exactly 0..total, and so is the final value. Then the same with
/// compare-and-swap increments and with swaps (every value swapped in is swapped out once).
#[test]
fn atomics_from_many_ranks_and_threads_are_serializable() {
    const INITIATORS: u32 = 4;
    const THREADS: u16 = 2;
    const OPS: u64 = 3000;
    let mut contexts = job(INITIATORS + 1);
    let owner = contexts.remove(0);
    let region = Arc::new(owner.alloc_region(64, Rights::ReadWrite).unwrap());
    let key = region.key();
    let barrier = Arc::new(Barrier::new((INITIATORS as usize) * THREADS as usize + 1));
    let contexts: Vec<Arc<Context>> = contexts.into_iter().map(Arc::new).collect();
    let mut workers = Vec::new();
    for ctx in &contexts {
        for port in 0..THREADS {
            let (ctx, barrier) = (ctx.clone(), barrier.clone());
            workers.push(std::thread::spawn(move || {
                let mut ep = ctx.endpoint(port).unwrap();
                let conn = ep.connect(Addr::new(0, 0)).unwrap();
                barrier.wait();
                let mut fetched = Vec::new();
                for _ in 0..OPS {
                    fetched.push(ep.fetch_add(conn, &key, 0, 1).unwrap());
                }
                // Compare-and-swap increments of word 8.
                for _ in 0..OPS / 4 {
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
                // Swaps of unique values through word 16.
                let me = u64::from(ctx.rank()) << 20 | u64::from(port) << 16;
                for i in 0..OPS / 4 {
                    fetched.push(2 << 40 | ep.swap(conn, &key, 16, me | (i + 1)).unwrap());
                }
                fetched
            }));
        }
    }
    let owner_ep = owner.endpoint(0).unwrap();
    barrier.wait();
    let mut all: Vec<u64> = (0..OPS).map(|_| region.fetch_add(0, 1).unwrap()).collect();
    for w in workers {
        all.extend(w.join().unwrap());
    }
    drop(owner_ep);
    let n = u64::from(INITIATORS) * u64::from(THREADS);
    let adds: Vec<u64> = all.iter().copied().filter(|v| v >> 40 == 0).collect();
    let mut sorted = adds.clone();
    sorted.sort_unstable();
    assert_eq!(sorted, (0..(n + 1) * OPS).collect::<Vec<_>>());
    assert_eq!(region.load(0).unwrap(), (n + 1) * OPS);
    let mut cas: Vec<u64> = all
        .iter()
        .filter(|v| *v >> 40 == 1)
        .map(|v| v & ((1 << 40) - 1))
        .collect();
    cas.sort_unstable();
    assert_eq!(cas, (0..n * (OPS / 4)).collect::<Vec<_>>());
    assert_eq!(region.load(8).unwrap(), n * (OPS / 4));
    // Every value swapped out is 0 (the first) or a value swapped in, each exactly once,
    // and the one left in the word is the only one never swapped out.
    let mut out: Vec<u64> = all
        .iter()
        .filter(|v| *v >> 40 == 2)
        .map(|v| v & ((1 << 40) - 1))
        .collect();
    out.push(region.load(16).unwrap());
    let unique: HashSet<u64> = out.iter().copied().collect();
    assert_eq!(unique.len(), out.len(), "no value swapped out twice");
    assert!(unique.contains(&0));
    assert_eq!(out.len() as u64, n * (OPS / 4) + 1);
    let stats = owner.rma_stats();
    assert_eq!(stats.keys_granted, n, "one mapping per connection");
    assert_eq!(stats.keys_refused, 0);
}

/// Every refusal is a typed error, counted where it happened, and leaves the target's
/// region as it was.
#[test]
fn refusals_are_typed_counted_and_leave_the_target_unharmed() {
    let mut contexts = job(3);
    let c2 = contexts.pop().unwrap();
    let c1 = contexts.pop().unwrap();
    let c0 = contexts.pop().unwrap();
    let stranger = job(2).pop().unwrap();
    let foreign = stranger.alloc_region(64, Rights::ReadWrite).unwrap();
    let rw = c1.alloc_region(64, Rights::ReadWrite).unwrap();
    let ro = c1.alloc_region(64, Rights::Read).unwrap();
    let other_rank = c2.alloc_region(64, Rights::ReadWrite).unwrap();
    rw.write(0, &[0xaa; 64]).unwrap();
    ro.write(0, &[0xbb; 64]).unwrap();
    let _ep1 = c1.endpoint(0).unwrap();
    let mut ep = c0.endpoint(0).unwrap();
    let conn = ep.connect(Addr::new(1, 0)).unwrap();
    let key = rw.key();
    let mut refused_here = 0;
    let mut refused_there = 0;

    // Bounds, alignment, rights: checked before anything is asked of the target.
    let oob = ep.put(conn, &[1; 2], &key, 63).unwrap_err();
    assert!(
        matches!(
            oob,
            Error::RmaOutOfBounds {
                offset: 63,
                len: 2,
                region_len: 64,
                ..
            }
        ),
        "{oob}"
    );
    let wrap = ep.get(conn, &mut [0; 2], &key, u64::MAX).unwrap_err();
    assert!(matches!(wrap, Error::RmaOutOfBounds { .. }), "{wrap}");
    let past = ep.fetch_add(conn, &key, 64, 1).unwrap_err();
    assert!(matches!(past, Error::RmaOutOfBounds { .. }), "{past}");
    let odd = ep.fetch_add(conn, &key, 4, 1).unwrap_err();
    assert!(matches!(odd, Error::RmaMisaligned { offset: 4 }), "{odd}");
    let read_only = ep.put(conn, &[1], &rw.read_only_key(), 0).unwrap_err();
    assert!(
        matches!(
            read_only,
            Error::RmaRights {
                operation: "put",
                ..
            }
        ),
        "{read_only}"
    );
    let ro_key = ro.key();
    let swap = ep.swap(conn, &ro_key, 0, 1).unwrap_err();
    assert!(matches!(swap, Error::RmaRights { .. }), "{swap}");
    refused_here += 6;
    // A read-only key still reads.
    let mut buf = [0u8; 64];
    ep.get(conn, &mut buf, &ro_key, 0).unwrap();
    assert_eq!(buf, [0xbb; 64]);

    // A key forged into claiming write rights on the read-only region: refused there.
    let mut forged = ro_key.as_bytes().to_vec();
    forged[3] = 3;
    let forged = RemoteKey::from_bytes(&forged).unwrap();
    let e = ep.put(conn, &[1], &forged, 0).unwrap_err();
    assert!(matches!(e, Error::RmaKeyRefused { rank: 1, .. }), "{e}");
    refused_here += 1;
    refused_there += 1;
    // A forged capability: refused there.
    let mut forged = key.as_bytes().to_vec();
    forged[40] ^= 0x10;
    let forged = RemoteKey::from_bytes(&forged).unwrap();
    let e = ep.put(conn, &[1], &forged, 0).unwrap_err();
    assert!(matches!(e, Error::RmaKeyRefused { rank: 1, .. }), "{e}");
    refused_here += 1;
    refused_there += 1;
    // Random bytes are not a key at all.
    let mut rng = Rng(99);
    for len in [0, 5, RemoteKey::LEN, RemoteKey::LEN + 1] {
        let bytes: Vec<u8> = (0..len).map(|_| rng.next() as u8).collect();
        let e = RemoteKey::from_bytes(&bytes).unwrap_err();
        assert!(matches!(e, Error::RmaKeyRefused { .. }), "{e}");
    }
    // A key of another job whose region number and rank match: refused there.
    let foreign_key = foreign.key();
    assert_eq!(foreign_key.rank(), 1, "the stranger is rank 1 of its job");
    let e = ep.get(conn, &mut [0; 8], &foreign_key, 0).unwrap_err();
    assert!(matches!(e, Error::RmaKeyRefused { rank: 1, .. }), "{e}");
    refused_here += 1;
    refused_there += 1;
    // A key of rank 2 on the connection to rank 1: refused here.
    let e = ep.get(conn, &mut [0; 8], &other_rank.key(), 0).unwrap_err();
    assert!(matches!(e, Error::RmaKeyRefused { rank: 2, .. }), "{e}");
    refused_here += 1;

    // Revoked after it was mapped: refused here; before it was ever mapped: refused there.
    let doomed = c1.alloc_region(64, Rights::ReadWrite).unwrap();
    let doomed_key = doomed.key();
    ep.put(conn, &[5; 8], &doomed_key, 0).unwrap();
    let never_used = c1.alloc_region(64, Rights::ReadWrite).unwrap();
    let never_used_key = never_used.key();
    drop(doomed);
    drop(never_used);
    let e = ep.put(conn, &[6; 8], &doomed_key, 0).unwrap_err();
    assert!(matches!(e, Error::RmaRevoked { rank: 1, .. }), "{e}");
    let e = ep.fetch_add(conn, &doomed_key, 0, 1).unwrap_err();
    assert!(
        matches!(e, Error::RmaKeyRefused { rank: 1, .. }),
        "{e}: the mapping is gone"
    );
    let e = ep.put(conn, &[6; 8], &never_used_key, 0).unwrap_err();
    assert!(matches!(e, Error::RmaKeyRefused { rank: 1, .. }), "{e}");
    refused_here += 3;
    refused_there += 2;

    // The target is unharmed: its regions hold what they held, and a valid key still works.
    let mut check = [0u8; 64];
    rw.read(0, &mut check).unwrap();
    assert_eq!(check, [0xaa; 64]);
    ro.read(0, &mut check).unwrap();
    assert_eq!(check, [0xbb; 64]);
    ep.put(conn, &[0xcc; 8], &key, 8).unwrap();
    rw.read(8, &mut check[..8]).unwrap();
    assert_eq!(check[..8], [0xcc; 8]);
    ep.flush(conn).unwrap();

    let here = c0.rma_stats();
    assert_eq!(here.accesses_refused, refused_here, "{here:?}");
    let there = c1.rma_stats();
    assert_eq!(there.keys_refused, refused_there, "{there:?}");
    assert!(there.last_refusal.is_some());
    assert_eq!(stranger.rma_stats().keys_refused, 0);
}

/// The initiator remembers the key of its last operation (so that a run of puts skips the
/// key's lookup), but only the whole key: alternating keys land in their own regions, one
/// that differs from the remembered key in its capability alone is asked of the target
/// (and refused), and a drop of the remembered key's region is seen at the next operation.
#[test]
fn a_remembered_key_is_matched_whole() {
    let mut contexts = job(2);
    let c1 = contexts.pop().unwrap();
    let c0 = contexts.pop().unwrap();
    let a = c1.alloc_region(64, Rights::ReadWrite).unwrap();
    let b = c1.alloc_region(64, Rights::ReadWrite).unwrap();
    let _ep1 = c1.endpoint(0).unwrap();
    let mut ep = c0.endpoint(0).unwrap();
    let conn = ep.connect(Addr::new(1, 0)).unwrap();
    let (ka, kb) = (a.key(), b.key());
    for i in 0..4u64 {
        ep.put(conn, &i.to_ne_bytes(), &ka, 0).unwrap();
        ep.put(conn, &(i + 100).to_ne_bytes(), &kb, 0).unwrap();
        assert_eq!(a.load(0).unwrap(), i);
        assert_eq!(b.load(0).unwrap(), i + 100);
    }
    ep.put(conn, &[1; 8], &ka, 8).unwrap();
    let mut forged = ka.as_bytes().to_vec();
    forged[40] ^= 1;
    let forged = RemoteKey::from_bytes(&forged).unwrap();
    let e = ep.put(conn, &[2; 8], &forged, 8).unwrap_err();
    assert!(matches!(e, Error::RmaKeyRefused { rank: 1, .. }), "{e}");
    assert_eq!(a.load(8).unwrap(), u64::from_ne_bytes([1; 8]));
    assert_eq!(c1.rma_stats().keys_refused, 1);
    // The remembered key still works after the refusal; then its region is dropped.
    ep.put(conn, &[3; 8], &ka, 16).unwrap();
    assert_eq!(a.load(16).unwrap(), u64::from_ne_bytes([3; 8]));
    drop(a);
    let e = ep.put(conn, &[4; 8], &ka, 16).unwrap_err();
    assert!(matches!(e, Error::RmaRevoked { rank: 1, .. }), "{e}");
    ep.put(conn, &[5; 8], &kb, 16).unwrap();
    assert_eq!(b.load(16).unwrap(), u64::from_ne_bytes([5; 8]));
}
