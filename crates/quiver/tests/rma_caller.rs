//! Memory the caller keeps, lent to one-sided communication with `Context::register`: put,
//! get and the atomics from a peer, byte-verified against a model, over shm (cross-memory
//! attach for puts and gets, the target's progress engine for atomics), tcp and udp; the
//! memory is the caller's again, holding exactly what the peer wrote, when the scope ends;
//! a key used after the scope is `RmaRevoked`; and over shm with cross-memory attach
//! refused (a seccomp filter on the initiator's thread), every operation still lands,
//! through the target's progress engine, and the refusal is counted. The ranks of a job
//! are contexts in one process (threads).

use std::sync::atomic::{AtomicU64, Ordering};
use std::thread;
use std::time::Duration;

use quiver::{Addr, Config, Context, Endpoint, Error, RemoteKey, Rights, TransportKind};

static NEXT_JOB: AtomicU64 = AtomicU64::new(1);

/// The contexts of a two-rank job over `transport`.
fn job(transport: TransportKind) -> (Context, Context) {
    let id = (u64::from(std::process::id()) << 32) | NEXT_JOB.fetch_add(1, Ordering::Relaxed);
    let mut key = [0u8; 32];
    key[..8].copy_from_slice(&id.to_le_bytes());
    let ports: Vec<std::net::SocketAddr> = (0..2)
        .map(|_| {
            let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            l.local_addr().unwrap()
        })
        .collect();
    let config = Config {
        transports: vec![transport],
        connect_timeout: Duration::from_secs(10),
        op_timeout: Some(Duration::from_secs(60)),
        ..Config::default()
    };
    let build = |rank: u32| {
        Context::builder()
            .rank(rank)
            .size(2)
            .job_id(id)
            .job_key(key)
            .addrs(ports.clone())
            .config(config.clone())
            .build()
            .unwrap()
    };
    (build(0), build(1))
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
}

fn pattern(len: usize, seed: u64) -> Vec<u8> {
    let mut rng = Rng(seed | 1);
    (0..len).map(|_| rng.next() as u8).collect()
}

const LEN: usize = (1 << 20) + 64;
const SIZES: &[usize] = &[0, 1, 7, 8, 40, 4096, 65537, 1 << 20];

/// Receives one message of at most 64 bytes.
fn recv_small(ep: &mut Endpoint) -> Vec<u8> {
    let mut buf = [0u8; 64];
    let (n, _) = ep.recv(&mut buf).unwrap();
    buf[..n].to_vec()
}

/// Rank 0's part: puts of every size at offsets from `seed`, each read back; the atomics
/// on word 0 (8 B after the last put region); returns the region's expected bytes.
fn initiate(ep: &mut Endpoint, key: &RemoteKey) -> Vec<u8> {
    let conn = ep.connect(Addr::new(1, 0)).unwrap();
    let mut model = vec![0u8; LEN];
    let mut rng = Rng(17);
    for (i, &size) in SIZES.iter().enumerate() {
        let offset = 8 + (rng.next() as usize % (LEN - 8 - size + 1));
        let data = pattern(size, i as u64 + 3);
        ep.put(conn, &data, key, offset as u64).unwrap();
        model[offset..offset + size].copy_from_slice(&data);
        let mut back = vec![0u8; size];
        ep.get(conn, &mut back, key, offset as u64).unwrap();
        assert!(
            back == data,
            "a get of {size} B at {offset} read other bytes"
        );
    }
    // A whole-region get against the model.
    let mut whole = vec![0u8; LEN];
    ep.get(conn, &mut whole, key, 0).unwrap();
    assert!(
        whole[8..] == model[8..],
        "the region differs from the model"
    );
    // Atomics on word 0.
    assert_eq!(ep.fetch_add(conn, key, 0, 5).unwrap(), 0);
    assert_eq!(ep.fetch_add(conn, key, 0, 7).unwrap(), 5);
    assert_eq!(ep.compare_swap(conn, key, 0, 11, 99).unwrap(), 12);
    assert_eq!(ep.compare_swap(conn, key, 0, 12, 40).unwrap(), 12);
    assert_eq!(ep.swap(conn, key, 0, 0x0102_0304_0506_0708).unwrap(), 40);
    model[..8].copy_from_slice(&0x0102_0304_0506_0708u64.to_ne_bytes());
    // Refused before touching the target: out of bounds, misaligned.
    let e = ep.put(conn, &[1; 2], key, LEN as u64 - 1).unwrap_err();
    assert!(matches!(e, Error::RmaOutOfBounds { .. }), "{e}");
    let e = ep.fetch_add(conn, key, 4, 1).unwrap_err();
    assert!(matches!(e, Error::RmaMisaligned { .. }), "{e}");
    ep.flush(conn).unwrap();
    model
}

/// Rank 1 lends a buffer (8-aligned inside a larger vector), sends its key, serves rank
/// 0's operations until rank 0 says done, then checks the buffer after the scope.
fn lend(ctx: &Context, model_from_rank0: impl FnOnce() -> Vec<u8>) {
    let mut backing = vec![0u8; LEN + 8];
    let skew = (8 - backing.as_ptr() as usize % 8) % 8;
    let mut ep = ctx.endpoint(0).unwrap();
    let conn = ep.connect(Addr::new(0, 0)).unwrap();
    let memory = &mut backing[skew..skew + LEN];
    let word = ctx
        .register(memory, Rights::ReadWrite, |region| {
            assert_eq!(region.len(), LEN);
            ep.send(conn, region.key().as_bytes()).unwrap();
            // Serves rank 0's requests while it waits.
            assert_eq!(recv_small(&mut ep), b"done");
            region.load(0).unwrap()
        })
        .unwrap();
    assert_eq!(word, 0x0102_0304_0506_0708);
    // The scope is over: the key is revoked; tell rank 0, and serve its late attempt.
    ep.send(conn, b"revoked").unwrap();
    assert_eq!(recv_small(&mut ep), b"bye");
    let model = model_from_rank0();
    let lent = &backing[skew..skew + LEN];
    assert!(
        lent == model.as_slice(),
        "the lent memory differs from the model"
    );
    assert_eq!(ctx.rma_stats().regions_registered, 1);
}

fn round_trip(transport: TransportKind, deny_cross_memory: bool) {
    let (c0, c1) = job(transport);
    let (model_tx, model_rx) = std::sync::mpsc::channel();
    let initiator = thread::spawn(move || {
        if deny_cross_memory {
            quiver_transport::seccomp::deny_cross_memory_attach_on_this_thread().unwrap();
        }
        let mut ep = c0.endpoint(0).unwrap();
        let key = RemoteKey::from_bytes(&recv_small(&mut ep)).unwrap();
        let model = initiate(&mut ep, &key);
        let conn = ep.connect(Addr::new(1, 0)).unwrap();
        ep.send(conn, b"done").unwrap();
        assert_eq!(recv_small(&mut ep), b"revoked");
        let e = ep.put(conn, &[1; 8], &key, 8).unwrap_err();
        assert!(matches!(e, Error::RmaRevoked { .. }), "{transport}: {e}");
        ep.send(conn, b"bye").unwrap();
        model_tx.send(model).unwrap();
        c0.rma_stats()
    });
    lend(&c1, || model_rx.recv().unwrap());
    let stats = initiator.join().unwrap();
    let refused = u64::from(deny_cross_memory && transport == TransportKind::Shm);
    assert_eq!(stats.cross_memory_refused, refused, "{stats:?}");
}

#[test]
fn lent_memory_over_shm_is_put_and_got_by_cross_memory_attach_and_revoked_after_the_scope() {
    round_trip(TransportKind::Shm, false);
}

#[test]
fn lent_memory_over_shm_without_cross_memory_attach_is_served_by_the_target() {
    round_trip(TransportKind::Shm, true);
}

#[test]
fn lent_memory_over_tcp_is_served_by_the_target() {
    round_trip(TransportKind::Tcp, false);
}

#[test]
fn lent_memory_over_udp_is_served_by_the_target() {
    round_trip(TransportKind::Udp, false);
}

/// The owner's own accesses: bounds and alignment checked, as a `Region`'s.
#[test]
fn the_owner_reads_and_writes_lent_memory_through_checked_copies() {
    let (_c0, c1) = job(TransportKind::Shm);
    let mut backing = [0u8; 72];
    let skew = (8 - backing.as_ptr() as usize % 8) % 8;
    c1.register(&mut backing[skew..skew + 64], Rights::Read, |region| {
        region.write(8, b"lent").unwrap();
        let mut back = [0u8; 4];
        region.read(8, &mut back).unwrap();
        assert_eq!(&back, b"lent");
        assert_eq!(region.fetch_add(16, 3).unwrap(), 0);
        assert_eq!(region.load(16).unwrap(), 3);
        assert!(matches!(
            region.write(62, b"xyz"),
            Err(Error::RmaOutOfBounds { .. })
        ));
        assert!(matches!(region.load(12), Err(Error::RmaMisaligned { .. })));
        assert_eq!(region.key().rights(), Rights::Read);
    })
    .unwrap();
    assert_eq!(&backing[skew + 8..skew + 12], b"lent");
}

/// Posted operations on lent memory over shm complete at the post (docs/rma.md): a posted
/// put is in the owner's memory before the initiator calls into quiver again, a posted get
/// has its bytes, and a posted atomic its reply from the owner's progress engine.
#[test]
fn posted_operations_on_lent_memory_over_shm_complete_at_the_post() {
    let (c0, c1) = job(TransportKind::Shm);
    let (posted_tx, posted_rx) = std::sync::mpsc::channel::<()>();
    let (written_tx, written_rx) = std::sync::mpsc::channel::<()>();
    let owner = thread::spawn(move || {
        let mut ep = c1.endpoint(0).unwrap();
        let conn = ep.connect(Addr::new(0, 0)).unwrap();
        let mut backing = [0u8; 4096 + 8];
        let skew = (8 - backing.as_ptr() as usize % 8) % 8;
        c1.register(
            &mut backing[skew..skew + 4096],
            Rights::ReadWrite,
            |region| {
                ep.send(conn, region.key().as_bytes()).unwrap();
                // The initiator posted a put and called nothing of quiver since.
                posted_rx.recv().unwrap();
                let mut put = [0u8; 5];
                region.read(16, &mut put).unwrap();
                assert_eq!(&put, b"hello", "the posted put landed at the post");
                region.write(64, b"world").unwrap();
                written_tx.send(()).unwrap();
                // Serves the posted atomic while it waits.
                assert_eq!(recv_small(&mut ep), b"done");
                region.load(8).unwrap()
            },
        )
        .unwrap()
    });
    let mut ep = c0.endpoint(0).unwrap();
    let conn = ep.connect(Addr::new(1, 0)).unwrap();
    let key = RemoteKey::from_bytes(&recv_small(&mut ep)).unwrap();
    let put = ep.post_put(conn, b"hello".to_vec(), &key, 16).unwrap();
    posted_tx.send(()).unwrap();
    written_rx.recv().unwrap();
    let get = ep.post_get(conn, 5, &key, 64).unwrap();
    let add = ep.post_fetch_add(conn, &key, 8, 3).unwrap();
    for request in [&put, &get, &add] {
        assert!(ep.test_rma(request).unwrap(), "complete at its post");
    }
    assert_eq!(ep.wait_rma(put).unwrap().data, b"hello");
    assert_eq!(ep.wait_rma(get).unwrap().data, b"world");
    assert_eq!(ep.wait_rma(add).unwrap().value, 0);
    ep.send(conn, b"done").unwrap();
    assert_eq!(owner.join().unwrap(), 3);
}
