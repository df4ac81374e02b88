//! One conformance suite, run against every transport: shm, tcp, udp, the in-memory
//! `mem` transport and xdp. Each test builds a small job of contexts inside this process
//! (one thread per rank, real sockets on 127.0.0.1 for tcp and udp; for xdp each rank in a
//! network namespace of its own, joined by veth pairs to a bridge, made by the test: root
//! only, skipped with a reason otherwise) with `QUIVER_TRANSPORTS` narrowed to the
//! transport under test, and checks the same behaviour of the public API:
//! every size byte-identical, order per connection, all three ways of sending and
//! receiving, backpressure, BufferTooSmall keeping the message, a closed peer and closing
//! one connection, a stranger with the wrong key refused and counted, posted operations on
//! the caller's memory (`scoped/`).
//!
//! The udp transport runs the suite three times: over loopback with plain sockets, over
//! loopback with its io_uring engine (`QUIVER_UDP_IO=uring`), and between network
//! namespaces (as xdp's) with io_uring.

use std::cell::Cell;
use std::collections::BTreeSet;
use std::net::{Ipv4Addr, SocketAddr, TcpListener, UdpSocket};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Mutex;
use std::thread;
use std::time::Duration;

use quiver::{Addr, Config, Context, Error, TransportKind, UdpIoMode};

mod am;
mod ranks;
mod scoped;
mod tagged;
mod xdp_net;
use xdp_net::XdpNet;

/// Sizes that cross every protocol boundary of every transport.
const SIZES: &[usize] = &[
    0,
    1,
    7,
    8,
    40,
    41,
    64,
    1000,
    1472,
    4096,
    65_000,
    65_536,
    65_537,
    256 << 10,
    (256 << 10) + 1,
    1 << 20,
    (3 << 20) + 5,
];

fn pattern(len: usize, seed: u32) -> Vec<u8> {
    (0..len)
        .map(|i| ((i as u32).wrapping_mul(2_654_435_761) ^ seed.wrapping_mul(97)) as u8)
        .collect()
}

/// A free port for both tcp and udp on 127.0.0.1, never one handed out before in this
/// process. The port is free only until a rank binds it, and the tests run in parallel:
/// without the record, a port just released by one job's probe could go to another job too.
/// (A CI run once failed with "address already in use" here; this closes that way to it,
/// not the kernel giving the port to someone else's socket meanwhile.)
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

/// A line of the suite besides its transport: how udp drives its sockets, and whether the
/// ranks sit in network namespaces of their own (as xdp's always do).
#[derive(Debug, Clone, Copy)]
struct Variant {
    udp_io: UdpIoMode,
    netns: bool,
}

const PLAIN: Variant = Variant {
    udp_io: UdpIoMode::Sockets,
    netns: false,
};

thread_local! {
    /// The variant of the test running on this thread (set first by the `conformance!` line).
    static VARIANT: Cell<Variant> = const { Cell::new(PLAIN) };
}

fn set_variant(variant: Variant) {
    VARIANT.with(|v| v.set(variant));
}

struct Job {
    id: u64,
    key: [u8; 32],
    addrs: Vec<SocketAddr>,
    config: Config,
    /// xdp: the namespaces of the ranks (rank r in host r).
    net: Option<XdpNet>,
}

/// Whether a test of transport `t` cannot run here (said on stderr): xdp needs root.
fn skip(t: TransportKind) -> bool {
    let netns = t == TransportKind::Xdp || VARIANT.with(Cell::get).netns;
    let skipped = netns && !xdp_net::is_root();
    if skipped {
        eprintln!("skipped: the xdp transport and network namespaces need root");
    }
    skipped
}

fn job(transport: TransportKind, size: u32) -> Job {
    let n = NEXT_JOB.fetch_add(1, Ordering::Relaxed);
    let id =
        (u64::from(std::process::id()) << 32) | u64::from(n) | (u64::from(transport as u8) << 24);
    let mut key = [0u8; 32];
    key[..8].copy_from_slice(&id.to_le_bytes());
    key[31] = 0x5a;
    let variant = VARIANT.with(Cell::get);
    let net = (transport == TransportKind::Xdp || variant.netns)
        .then(|| XdpNet::up(size as usize).expect("xdp namespaces"));
    let addrs = match transport {
        TransportKind::Shm => Vec::new(),
        _ if net.is_some() => (0..size as usize)
            .map(|r| net.as_ref().expect("made above").address(r, 7100))
            .collect(),
        TransportKind::Mem => (0..size)
            .map(|r| {
                let ip = Ipv4Addr::new(
                    127,
                    (n % 250) as u8 + 1,
                    (r % 250) as u8,
                    transport as u8 + 1,
                );
                SocketAddr::new(ip.into(), 40_000 + (std::process::id() % 20_000) as u16)
            })
            .collect(),
        _ => (0..size)
            .map(|_| SocketAddr::new(Ipv4Addr::LOCALHOST.into(), free_port()))
            .collect(),
    };
    let config = Config {
        transports: vec![transport],
        connect_timeout: Duration::from_secs(10),
        op_timeout: Some(Duration::from_secs(60)),
        udp_io: variant.udp_io,
        ..Config::default()
    };
    Job {
        id,
        key,
        addrs,
        config,
        net,
    }
}

impl Job {
    fn context(&self, rank: u32, size: u32) -> Context {
        let ctx = self.build(rank, || {
            Context::builder()
                .rank(rank)
                .size(size)
                .job_id(self.id)
                .job_key(self.key)
                .addrs(self.addrs.clone())
                .config(self.config.clone())
                .build()
                .unwrap()
        });
        if self.config.udp_io != UdpIoMode::Sockets {
            // The io_uring engine runs (no silent fallback to sockets here).
            assert!(ctx.link_stats().iter().all(|l| l.uring.is_some()));
        }
        ctx
    }

    /// Runs `build` where rank `rank`'s sockets belong: in its namespace for xdp.
    fn build(&self, rank: u32, build: impl FnOnce() -> Context + Send) -> Context {
        match &self.net {
            Some(net) => net.in_host(rank as usize, build),
            None => build(),
        }
    }
}

/// Runs `body(rank, ctx)` for every rank on its own thread; a rank that panics fails the
/// test at once with its message, even while its peers are blocked on it
/// ([`ranks::run_ranks`]).
fn run(transport: TransportKind, size: u32, body: impl Fn(u32, Context) + Send + Sync + Copy) {
    let job = job(transport, size);
    let contexts: Vec<Context> = (0..size).map(|r| job.context(r, size)).collect();
    ranks::run_ranks(contexts, body);
}

/// [`run`] with the job's configuration changed by `tweak` first (settings a test needs,
/// given through the `Config` rather than the process environment).
fn run_with(
    transport: TransportKind,
    size: u32,
    tweak: impl FnOnce(&mut Config),
    body: impl Fn(u32, Context) + Send + Sync + Copy,
) {
    let mut job = job(transport, size);
    tweak(&mut job.config);
    let contexts: Vec<Context> = (0..size).map(|r| job.context(r, size)).collect();
    ranks::run_ranks(contexts, body);
}

fn every_size(t: TransportKind) {
    run(t, 2, |rank, ctx| {
        let mut ep = ctx.endpoint(0).unwrap();
        let peer = Addr::new(1 - rank, 0);
        let conn = ep.connect(peer).unwrap();
        if rank == 0 {
            // Each size goes and comes back (two blocking large sends towards each other
            // would wait for each other, as in MPI).
            let mut buf = vec![0u8; 4 << 20];
            for (i, &len) in SIZES.iter().enumerate() {
                ep.send(conn, &pattern(len, i as u32)).unwrap();
                let (n, src) = ep.recv(&mut buf).unwrap();
                assert_eq!((n, src), (len, peer), "echo {i}");
                assert!(buf[..n] == pattern(len, i as u32)[..], "echo {i} differs");
            }
        } else {
            for (i, &len) in SIZES.iter().enumerate() {
                let got = ep.recv_pooled().unwrap();
                assert_eq!(got.len(), len, "message {i}");
                assert!(got[..] == pattern(len, i as u32)[..], "message {i} differs");
                ep.send(conn, &got).unwrap();
            }
        }
    });
}

fn many_small_in_order(t: TransportKind) {
    const COUNT: u32 = 20_000;
    run(t, 2, |rank, ctx| {
        let mut ep = ctx.endpoint(0).unwrap();
        let conn = ep.connect(Addr::new(1 - rank, 0)).unwrap();
        if rank == 0 {
            let mut would_block = 0u64;
            for i in 0..COUNT {
                let msg = i.to_le_bytes();
                loop {
                    match ep.try_send(conn, &msg) {
                        Ok(()) => break,
                        Err(Error::WouldBlock) => {
                            would_block += 1;
                            ep.progress().unwrap();
                        }
                        Err(e) => panic!("try_send: {e}"),
                    }
                }
            }
            let mut ack = [0u8; 4];
            ep.recv(&mut ack).unwrap();
            assert_eq!(u32::from_le_bytes(ack), COUNT);
            let _ = would_block;
        } else {
            let mut buf = [0u8; 4];
            for i in 0..COUNT {
                let (n, _) = ep.recv(&mut buf).unwrap();
                assert_eq!(n, 4);
                assert_eq!(u32::from_le_bytes(buf), i, "out of order");
            }
            ep.send(conn, &COUNT.to_le_bytes()).unwrap();
        }
    });
}

fn posted_operations(t: TransportKind) {
    run(t, 2, |rank, ctx| {
        let mut ep = ctx.endpoint(0).unwrap();
        let conn = ep.connect(Addr::new(1 - rank, 0)).unwrap();
        let sizes = [0usize, 8, 5000, 300_000, 2 << 20];
        if rank == 0 {
            let reqs: Vec<_> = sizes
                .iter()
                .enumerate()
                .map(|(i, &len)| ep.post_send(conn, pattern(len, 100 + i as u32)).unwrap())
                .collect();
            for (req, &len) in reqs.into_iter().zip(&sizes) {
                let buf = ep.wait_send(req).unwrap();
                assert_eq!(buf.len(), len, "the buffer comes back whole");
            }
            let mut done = [0u8; 1];
            ep.recv(&mut done).unwrap();
        } else {
            let reqs: Vec<_> = sizes
                .iter()
                .map(|_| ep.post_recv(vec![0u8; 3 << 20]).unwrap())
                .collect();
            for (i, (req, &len)) in reqs.into_iter().zip(&sizes).enumerate() {
                let c = ep.wait_recv(req).unwrap();
                assert_eq!(c.len, len);
                assert!(c.buf[..c.len] == pattern(len, 100 + i as u32)[..]);
            }
            ep.send(conn, &[1]).unwrap();
        }
    });
}

/// More posted bytes than any window or ring holds: the sender must keep taking
/// acknowledgements while it waits for its own requests.
fn posted_sends_beyond_the_window(t: TransportKind) {
    const COUNT: u32 = 24;
    const LEN: usize = 1 << 20;
    run(t, 2, |rank, ctx| {
        let mut ep = ctx.endpoint(0).unwrap();
        let conn = ep.connect(Addr::new(1 - rank, 0)).unwrap();
        if rank == 0 {
            let reqs: Vec<_> = (0..COUNT)
                .map(|i| ep.post_send(conn, pattern(LEN, i)).unwrap())
                .collect();
            for req in reqs {
                ep.wait_send(req).unwrap();
            }
            let mut done = [0u8; 1];
            ep.recv(&mut done).unwrap();
        } else {
            let mut buf = vec![0u8; LEN];
            for i in 0..COUNT {
                let (n, _) = ep.recv(&mut buf).unwrap();
                assert_eq!(n, LEN);
                assert!(buf == pattern(LEN, i), "message {i} differs");
            }
            ep.send(conn, &[1]).unwrap();
        }
    });
}

fn buffer_too_small_keeps_message(t: TransportKind) {
    run(t, 2, |rank, ctx| {
        let mut ep = ctx.endpoint(0).unwrap();
        let conn = ep.connect(Addr::new(1 - rank, 0)).unwrap();
        if rank == 0 {
            ep.send(conn, &pattern(1000, 7)).unwrap();
            ep.send(conn, &pattern(100_000, 8)).unwrap();
            let mut done = [0u8; 1];
            ep.recv(&mut done).unwrap();
        } else {
            let mut small = [0u8; 10];
            match ep.recv(&mut small) {
                Err(Error::BufferTooSmall { message, buffer }) => {
                    assert_eq!((message, buffer), (1000, 10))
                }
                other => panic!("expected BufferTooSmall, got {other:?}"),
            }
            let mut big = vec![0u8; 1000];
            assert_eq!(ep.recv(&mut big).unwrap().0, 1000);
            assert!(big == pattern(1000, 7));
            match ep.recv(&mut big) {
                Err(Error::BufferTooSmall { message, .. }) => assert_eq!(message, 100_000),
                other => panic!("expected BufferTooSmall, got {other:?}"),
            }
            let got = ep.recv_pooled().unwrap();
            assert!(got[..] == pattern(100_000, 8)[..]);
            ep.send(conn, &[1]).unwrap();
        }
    });
}

fn try_recv_would_block_then_arrives(t: TransportKind) {
    run(t, 2, |rank, ctx| {
        let mut ep = ctx.endpoint(0).unwrap();
        let conn = ep.connect(Addr::new(1 - rank, 0)).unwrap();
        let mut buf = [0u8; 64];
        if rank == 1 {
            assert!(matches!(ep.try_recv(&mut buf), Err(Error::WouldBlock)));
            ep.send(conn, b"go").unwrap();
            loop {
                match ep.try_recv(&mut buf) {
                    Ok((n, _)) => {
                        assert_eq!(&buf[..n], b"late");
                        break;
                    }
                    Err(Error::WouldBlock) => thread::yield_now(),
                    Err(e) => panic!("{e}"),
                }
            }
        } else {
            ep.recv(&mut buf).unwrap();
            thread::sleep(Duration::from_millis(20));
            ep.send(conn, b"late").unwrap();
            // Stay until the peer has it (a closing endpoint must not lose it either).
            thread::sleep(Duration::from_millis(50));
        }
    });
}

fn three_senders_one_receiver(t: TransportKind) {
    const EACH: u32 = 300;
    run(t, 4, |rank, ctx| {
        let mut ep = ctx.endpoint(0).unwrap();
        if rank == 0 {
            let mut next = [0u32; 4];
            let mut buf = vec![0u8; 70_000];
            for _ in 0..3 * EACH {
                let (n, src) = ep.recv(&mut buf).unwrap();
                let i = u32::from_le_bytes(buf[..4].try_into().unwrap());
                assert_eq!(i, next[src.rank as usize], "order from {src}");
                next[src.rank as usize] += 1;
                assert_eq!(n, 4 + (i as usize * 211) % 66_000);
            }
            for r in 1..4 {
                let c = ep.connect(Addr::new(r, 0)).unwrap();
                ep.send(c, b"done").unwrap();
            }
        } else {
            let conn = ep.connect(Addr::new(0, 0)).unwrap();
            for i in 0..EACH {
                let mut msg = pattern(4 + (i as usize * 211) % 66_000, i);
                msg[..4].copy_from_slice(&i.to_le_bytes());
                ep.send(conn, &msg).unwrap();
            }
            let mut buf = [0u8; 8];
            ep.recv(&mut buf).unwrap();
        }
    });
}

/// A receive posted while one peer's connection is the endpoint's only inbound edge is
/// completed by a message from a peer that connects afterwards (over a datagram transport
/// the posted receive was first handed to the lone connection's engine).
fn posted_recv_taken_by_a_later_peer(t: TransportKind) {
    run(t, 3, |rank, ctx| {
        let mut ep = ctx.endpoint(0).unwrap();
        let mut buf = [0u8; 16];
        match rank {
            0 => {
                let (n, src) = ep.recv(&mut buf).unwrap();
                assert_eq!((&buf[..n], src.rank), (&b"first"[..], 1));
                let posted = ep.post_recv(vec![0u8; 16]).unwrap();
                let go = ep.connect(Addr::new(2, 0)).unwrap();
                ep.send(go, b"go").unwrap();
                let done = ep.wait_recv(posted).unwrap();
                assert_eq!((&done.buf[..done.len], done.src.rank), (&b"later"[..], 2));
                let one = ep.connect(Addr::new(1, 0)).unwrap();
                ep.send(one, b"done").unwrap();
            }
            1 => {
                let conn = ep.connect(Addr::new(0, 0)).unwrap();
                ep.send(conn, b"first").unwrap();
                ep.recv(&mut buf).unwrap();
            }
            _ => {
                ep.recv(&mut buf).unwrap();
                let conn = ep.connect(Addr::new(0, 0)).unwrap();
                ep.send(conn, b"later").unwrap();
                // Stay until rank 0 has it.
                thread::sleep(Duration::from_millis(100));
            }
        }
    });
}

/// Large messages from two peers and small ones from a third, received by blocking
/// `recv`s into one reused buffer: each arrives whole and byte-identical (a receive that
/// began a large tcp message straight into its buffer once delivered another peer's
/// message into it, and the next receive finished the large one over that).
fn large_and_small_from_three_peers_into_one_buffer(t: TransportKind) {
    const EACH: u32 = 30;
    const LARGE: usize = 1 << 20;
    let len = |rank: u32, i: u32| {
        if rank == 3 {
            8 + i as usize
        } else {
            LARGE - i as usize
        }
    };
    run(t, 4, move |rank, ctx| {
        let mut ep = ctx.endpoint(0).unwrap();
        if rank == 0 {
            let mut buf = vec![0u8; LARGE];
            let mut next = [0u32; 4];
            for _ in 0..3 * EACH {
                let (n, src) = ep.recv(&mut buf).unwrap();
                let (r, i) = (src.rank, next[src.rank as usize]);
                assert_eq!(n, len(r, i), "length of message {i} from {r}");
                assert!(
                    buf[..n] == pattern(n, r * 1000 + i)[..],
                    "message {i} from {r}"
                );
                next[r as usize] += 1;
            }
            for r in 1..4 {
                let c = ep.connect(Addr::new(r, 0)).unwrap();
                ep.send(c, b"done").unwrap();
            }
        } else {
            let conn = ep.connect(Addr::new(0, 0)).unwrap();
            for i in 0..EACH {
                ep.send(conn, &pattern(len(rank, i), rank * 1000 + i))
                    .unwrap();
            }
            let mut buf = [0u8; 8];
            ep.recv(&mut buf).unwrap();
        }
    });
}

fn closed_peer_is_reported(t: TransportKind) {
    run(t, 2, |rank, ctx| {
        let mut ep = ctx.endpoint(0).unwrap();
        let conn = ep.connect(Addr::new(1 - rank, 0)).unwrap();
        if rank == 1 {
            let mut buf = [0u8; 8];
            ep.recv(&mut buf).unwrap();
            drop(ep);
        } else {
            ep.send(conn, b"bye").unwrap();
            let msg = vec![0u8; 64 << 10];
            let mut result = Ok(());
            for _ in 0..100_000 {
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
        }
    });
}

/// Rank 0 closes its connection to rank 1 with posted sends still on their way (a large
/// one among them): rank 1 receives them all, byte-identical, then sees the connection
/// end cleanly (`PeerClosed` from its blocked receive, at once rather than after its
/// timeout; no longer counted live); rank 0's later calls on the connection fail with
/// `ConnectionClosed`; its connection to rank 2 keeps working, and a new `connect`
/// reaches rank 1 again.
fn close_one_connection(t: TransportKind) {
    const LENS: [usize; 3] = [8, 70_000, (1 << 20) + 5];
    run(t, 3, |rank, ctx| {
        let mut ep = ctx.endpoint(0).unwrap();
        match rank {
            0 => {
                let one = ep.connect(Addr::new(1, 0)).unwrap();
                let two = ep.connect(Addr::new(2, 0)).unwrap();
                let posted: Vec<_> = LENS
                    .iter()
                    .enumerate()
                    .map(|(i, &len)| ep.post_send(one, pattern(len, i as u32)).unwrap())
                    .collect();
                ep.close(one).unwrap();
                for request in posted {
                    ep.wait_send(request).unwrap();
                }
                for result in [ep.send(one, b"after"), ep.close(one)] {
                    match result {
                        Err(e @ Error::ConnectionClosed { peer }) => {
                            assert_eq!(peer, Addr::new(1, 0));
                            assert!(e.to_string().contains("closed"), "{e}")
                        }
                        other => panic!("expected ConnectionClosed, got {other:?}"),
                    }
                }
                ep.send(two, b"still here").unwrap();
                // Once rank 1 saw the end (the new connection's messages could otherwise
                // come first: no order holds between two connections).
                let mut buf = [0u8; 8];
                assert_eq!(ep.recv(&mut buf).unwrap(), (4, Addr::new(1, 0)), "seen");
                let again = ep.connect(Addr::new(1, 0)).unwrap();
                assert_ne!(again, one);
                ep.send(again, b"again").unwrap();
                assert_eq!(ep.recv(&mut buf).unwrap(), (4, Addr::new(1, 0)), "done");
            }
            1 => {
                let mut buf = vec![0u8; 2 << 20];
                for (i, &len) in LENS.iter().enumerate() {
                    let (n, src) = ep.recv(&mut buf).unwrap();
                    assert_eq!((n, src), (len, Addr::new(0, 0)), "message {i}");
                    assert!(
                        buf[..n] == pattern(len, i as u32)[..],
                        "message {i} differs"
                    );
                }
                // The end is clean and prompt: the blocked receive gets PeerClosed after the
                // last message (not its timeout), and the connection no longer counts among
                // the live ones.
                ep.set_timeout(Some(Duration::from_secs(60)));
                let started = std::time::Instant::now();
                match ep.recv(&mut buf) {
                    Err(Error::PeerClosed { peer }) => assert_eq!(peer, Addr::new(0, 0)),
                    other => panic!("expected PeerClosed, got {other:?}"),
                }
                assert!(
                    started.elapsed() < Duration::from_secs(20),
                    "the end took {:?}",
                    started.elapsed()
                );
                assert_eq!(ep.inbound_count(), 0);
                let zero = ep.connect(Addr::new(0, 0)).unwrap();
                ep.send(zero, b"seen").unwrap();
                let (n, _) = ep.recv(&mut buf).unwrap();
                assert_eq!(&buf[..n], b"again");
                ep.reply(Addr::new(0, 0), b"done").unwrap();
            }
            _ => {
                let mut buf = [0u8; 16];
                let (n, src) = ep.recv(&mut buf).unwrap();
                assert_eq!((&buf[..n], src), (&b"still here"[..], Addr::new(0, 0)));
            }
        }
    });
}

/// Closing ends both directions, seen by the peer at once and after everything: rank 1
/// connects and sends first (so both directions exist, on one connection or, over shm, a
/// ring each way); rank 0 sends messages of every protocol's size and closes. Rank 1's
/// probe and receive naming rank 0 get every message, byte-identical, then `PeerClosed`
/// (promptly, each time it asks); its sends to rank 0 then fail with `PeerClosed` too.
fn close_ends_both_directions(t: TransportKind) {
    const LENS: [usize; 5] = [0, 8, 4096, 70_000, (1 << 20) + 5];
    let done = std::sync::Barrier::new(2);
    let done = &done;
    run(t, 2, move |rank, ctx| {
        let mut ep = ctx.endpoint(0).unwrap();
        ep.set_timeout(Some(Duration::from_secs(60)));
        let peer = Addr::new(1 - rank, 0);
        if rank == 0 {
            let mut buf = [0u8; 8];
            assert_eq!(ep.recv(&mut buf).unwrap(), (5, peer), "hello");
            let conn = ep.connect(peer).unwrap();
            for (i, &len) in LENS.iter().enumerate() {
                ep.send(conn, &pattern(len, i as u32 + 50)).unwrap();
            }
            ep.close(conn).unwrap();
            assert!(matches!(
                ep.send(conn, b"x"),
                Err(Error::ConnectionClosed { .. })
            ));
            done.wait();
        } else {
            let back = ep.connect(peer).unwrap();
            // Posted before the close, for a tag the closer never sends: ended by the close.
            let never = ep
                .post_recv_matching(quiver::MatchSpec::tag(99).from(peer), vec![0; 16])
                .unwrap();
            ep.send(back, b"hello").unwrap();
            let from = quiver::MatchSpec {
                source: Some(peer),
                ..quiver::MatchSpec::ANY
            };
            let mut buf = vec![0u8; 2 << 20];
            for (i, &len) in LENS.iter().enumerate() {
                let seen = ep.probe(from).unwrap();
                assert_eq!((seen.source, seen.len), (peer, len as u64), "probe {i}");
                let got = ep.recv_matching(from, &mut buf).unwrap();
                assert_eq!(got.len, len as u64, "message {i}");
                assert!(
                    buf[..len] == pattern(len, i as u32 + 50)[..],
                    "message {i} differs"
                );
            }
            let started = std::time::Instant::now();
            for _ in 0..2 {
                match ep.recv_matching(from, &mut buf) {
                    Err(Error::PeerClosed { peer: p }) => assert_eq!(p, peer),
                    other => panic!("expected PeerClosed, got {other:?}"),
                }
                match ep.probe(from) {
                    Err(Error::PeerClosed { peer: p }) => assert_eq!(p, peer),
                    other => panic!("expected PeerClosed from probe, got {other:?}"),
                }
                assert!(matches!(ep.try_probe(from), Err(Error::PeerClosed { .. })));
            }
            // Posted receives naming the closer: the one waiting, and one posted now.
            let after = ep.post_recv_matching(from, vec![0; 16]).unwrap();
            for (name, request) in [("waiting", never), ("posted after", after)] {
                match ep.wait_recv(request) {
                    Err(Error::PeerClosed { peer: p }) => assert_eq!(p, peer, "{name}"),
                    other => panic!("{name}: expected PeerClosed, got {other:?}"),
                }
            }
            assert!(
                started.elapsed() < Duration::from_secs(20),
                "the end took {:?}",
                started.elapsed()
            );
            // The direction back is closed too (over shm once the ring back is full).
            let msg = vec![7u8; 64 << 10];
            let mut result = Ok(());
            for _ in 0..10_000 {
                result = ep.send(back, &msg);
                if result.is_err() {
                    break;
                }
            }
            match result {
                Err(Error::PeerClosed { peer: p }) => assert_eq!(p, peer),
                other => panic!("expected PeerClosed on the way back, got {other:?}"),
            }
            done.wait();
        }
    });
}

/// A peer that only sends (it never receives, so never reads the close) learns of the
/// close from its sends: rank 0 closes its connection to rank 1 while rank 1 sends to it
/// in a loop; rank 1's send fails with `PeerClosed` (tcp: once the socket is full and the
/// peer has shut the stream; shm: once the ring back is full), not after its timeout.
fn close_stops_a_sender(t: TransportKind) {
    let done = std::sync::Barrier::new(2);
    let done = &done;
    run(t, 2, move |rank, ctx| {
        let mut ep = ctx.endpoint(0).unwrap();
        ep.set_timeout(Some(Duration::from_secs(60)));
        let peer = Addr::new(1 - rank, 0);
        if rank == 0 {
            let mut buf = [0u8; 8];
            assert_eq!(ep.recv(&mut buf).unwrap(), (5, peer), "hello");
            let conn = ep.connect(peer).unwrap();
            ep.close(conn).unwrap();
            done.wait();
        } else {
            let conn = ep.connect(peer).unwrap();
            ep.send(conn, b"hello").unwrap();
            let msg = vec![3u8; 64 << 10];
            let started = std::time::Instant::now();
            let mut result = Ok(());
            for _ in 0..100_000 {
                result = ep.send(conn, &msg);
                if result.is_err() {
                    break;
                }
            }
            match result {
                Err(Error::PeerClosed { peer: p }) => assert_eq!(p, peer),
                other => panic!("expected PeerClosed, got {other:?}"),
            }
            assert!(
                started.elapsed() < Duration::from_secs(20),
                "the end took {:?}",
                started.elapsed()
            );
            done.wait();
        }
    });
}

/// Large messages exchanged by both ranks at once, each far larger than any staging
/// buffer, ring or socket buffer.
const EXCHANGE_SIZES: [usize; 4] = [1 << 20, 3 << 20, (1 << 20) + 3, (3 << 20) - 1];

/// The seed of message `index` sent by `rank` in the exchange tests.
fn exchange_seed(rank: u32, index: usize) -> u32 {
    1000 * (rank + 1) + index as u32
}

/// Both ranks post every send and every receive at once, then wait: each side must keep
/// pushing its own sends while the peer's large messages arrive (over tcp a receive that
/// read a large message to its end inside `progress` made both sides wait forever).
fn exchange_large_posted(t: TransportKind) {
    run(t, 2, |rank, ctx| {
        let mut ep = ctx.endpoint(0).unwrap();
        ep.set_timeout(Some(Duration::from_secs(20)));
        let conn = ep.connect(Addr::new(1 - rank, 0)).unwrap();
        let sends: Vec<_> = EXCHANGE_SIZES
            .iter()
            .enumerate()
            .map(|(i, &len)| {
                ep.post_send(conn, pattern(len, exchange_seed(rank, i)))
                    .unwrap()
            })
            .collect();
        let recvs: Vec<_> = EXCHANGE_SIZES
            .iter()
            .map(|_| ep.post_recv(vec![0u8; 3 << 20]).unwrap())
            .collect();
        for (i, req) in recvs.into_iter().enumerate() {
            let c = ep.wait_recv(req).unwrap();
            assert_eq!((c.len, c.src), (EXCHANGE_SIZES[i], Addr::new(1 - rank, 0)));
            let want = pattern(EXCHANGE_SIZES[i], exchange_seed(1 - rank, i));
            assert!(c.buf[..c.len] == want[..], "message {i} differs");
        }
        for (i, req) in sends.into_iter().enumerate() {
            assert_eq!(ep.wait_send(req).unwrap().len(), EXCHANGE_SIZES[i]);
        }
    });
}

/// Both ranks `send` a message to each other, then `recv` (the send-send pattern). Each
/// send either finishes or returns [`Error::SendDeadlock`] naming the peer and the
/// transport (never hangs: the job's `op_timeout` is the bound). Each rank then takes the
/// other's message (unless that send failed), which lets the other's send finish if it
/// still waits (over shm, a send whose message the peer read ahead may return before the
/// peer's); a message whose send failed is never delivered. A blocking send reads
/// ahead while it waits, up to `read_ahead_bytes` per connection (64 MiB; udp: its 8 MiB
/// window): 1 KiB and 1 MiB finish on every transport, 128 MiB is beyond the bound and
/// ends in `SendDeadlock` on at least one side. With the bound set to 256 KiB, 16 MiB is
/// beyond it over shm and tcp.
fn send_send(t: TransportKind) {
    for &len in &[1usize << 10, 1 << 20, 128 << 20] {
        let deadlocks = send_send_once(t, len, None);
        if len <= 1 << 20 {
            assert_eq!(deadlocks, 0, "{t:?} {len} B: within the read-ahead bound");
        } else {
            assert!(deadlocks >= 1, "{t:?} {len} B: the sends finished?");
        }
    }
    if matches!(t, TransportKind::Shm | TransportKind::Tcp) {
        // (16 MiB: more than a loopback tcp connection holds in its socket buffers.)
        let deadlocks = send_send_once(t, 16 << 20, Some(256 << 10));
        assert!(
            deadlocks >= 1,
            "{t:?}: 16 MiB beyond a 256 KiB read-ahead bound"
        );
    }
}

/// One send-send of `len` bytes (`send_send`), with the read-ahead bound `bound` if
/// given: how many of the two sends ended in `SendDeadlock`.
fn send_send_once(t: TransportKind, len: usize, bound: Option<usize>) -> usize {
    use std::sync::atomic::AtomicU8;
    const PENDING: u8 = 0;
    const SENT: u8 = 1;
    const DEADLOCK: u8 = 2;
    let status = [AtomicU8::new(PENDING), AtomicU8::new(PENDING)];
    let status = &status;
    let mut job = job(t, 2);
    if let Some(bound) = bound {
        job.config.read_ahead_bytes = bound;
    }
    let contexts: Vec<Context> = (0..2).map(|r| job.context(r, 2)).collect();
    ranks::run_ranks(contexts, move |rank, ctx| {
        let rank = rank as usize;
        let peer_rank = 1 - rank;
        let mut ep = ctx.endpoint(0).unwrap();
        let conn = ep.connect(Addr::new(peer_rank as u32, 0)).unwrap();
        let mine = pattern(len, rank as u32 + 11);
        let mine_status = match ep.send(conn, &mine) {
            Ok(()) => SENT,
            Err(Error::SendDeadlock { peer, transport }) => {
                assert_eq!(
                    (peer, transport),
                    (Addr::new(peer_rank as u32, 0), t.name())
                );
                DEADLOCK
            }
            Err(e) => panic!("rank {rank}, {len} B: send: {e}"),
        };
        status[rank].store(mine_status, Ordering::Release);
        let mut buf = vec![0u8; len];
        loop {
            let theirs = status[peer_rank].load(Ordering::Acquire);
            if theirs == DEADLOCK {
                break; // Their message is not coming.
            }
            match ep.try_recv(&mut buf) {
                Ok((got, from)) => {
                    assert_eq!((got, from), (len, Addr::new(peer_rank as u32, 0)));
                    assert!(buf == pattern(len, peer_rank as u32 + 11), "{len} B differ");
                    break;
                }
                Err(Error::WouldBlock) => thread::yield_now(),
                // This rank's own SendDeadlock failed the connection: their
                // message is not coming, and the read may say so with an error.
                Err(_) if mine_status == DEADLOCK => break,
                // A send that failed with SendDeadlock shuts its side of a tcp
                // stream, so this read may end in an error before the peer has
                // published its status: then the peer must have deadlocked.
                Err(e) => {
                    let deadline = std::time::Instant::now() + Duration::from_secs(10);
                    while status[peer_rank].load(Ordering::Acquire) != DEADLOCK {
                        assert!(
                            std::time::Instant::now() < deadline,
                            "rank {rank}, {len} B: recv: {e}"
                        );
                        thread::yield_now();
                    }
                    break;
                }
            }
        }
        // Their message may be in a failed connection's ring: it must not be
        // delivered (its buffer may be gone).
        drop(mine);
    });
    status
        .iter()
        .filter(|s| s.load(Ordering::Relaxed) == DEADLOCK)
        .count()
}

/// Both ranks post their large sends, then poll with `try_recv`/`try_recv_pooled` and
/// `progress` only: no call may wait for a half-arrived message. The 6 MiB message is
/// more than a loopback tcp connection holds in flight (~4 MiB), so it is still being
/// written while it is received. A too-small buffer gets `BufferTooSmall` and the message
/// stays.
fn exchange_large_polling(t: TransportKind) {
    const SIZES: [usize; 4] = [1 << 20, (6 << 20) + 5, (3 << 20) - 1, (1 << 20) + 3];
    run(t, 2, |rank, ctx| {
        let mut ep = ctx.endpoint(0).unwrap();
        ep.set_timeout(Some(Duration::from_secs(20)));
        let conn = ep.connect(Addr::new(1 - rank, 0)).unwrap();
        let mut sends: Vec<_> = SIZES
            .iter()
            .enumerate()
            .map(|(i, &len)| {
                Some(
                    ep.post_send(conn, pattern(len, exchange_seed(rank, i)))
                        .unwrap(),
                )
            })
            .collect();
        let start = std::time::Instant::now();
        let mut buf = vec![0u8; 7 << 20];
        let mut small = [0u8; 100];
        let mut received = 0;
        let mut too_small_seen = false;
        while received < SIZES.len() {
            assert!(
                start.elapsed() < Duration::from_secs(20),
                "rank {rank}: {received} messages after 20 s"
            );
            ep.progress().unwrap();
            if !too_small_seen {
                match ep.try_recv(&mut small) {
                    Err(Error::BufferTooSmall { message, buffer }) => {
                        assert_eq!((message, buffer), (SIZES[0], 100));
                        too_small_seen = true;
                    }
                    Err(Error::WouldBlock) => {}
                    other => panic!("expected BufferTooSmall, got {other:?}"),
                }
                continue;
            }
            let want = pattern(SIZES[received], exchange_seed(1 - rank, received));
            let got = if received % 2 == 1 {
                match ep.try_recv(&mut buf) {
                    Ok((n, src)) => Some((buf[..n] == want[..], n, src)),
                    Err(Error::WouldBlock) => None,
                    Err(e) => panic!("try_recv: {e}"),
                }
            } else {
                match ep.try_recv_pooled() {
                    Ok(msg) => Some((msg[..] == want[..], msg.len(), msg.src())),
                    Err(Error::WouldBlock) => None,
                    Err(e) => panic!("try_recv_pooled: {e}"),
                }
            };
            if let Some((same, n, src)) = got {
                assert_eq!((n, src), (SIZES[received], Addr::new(1 - rank, 0)));
                assert!(same, "message {received} differs");
                received += 1;
            }
            for slot in sends.iter_mut() {
                if slot.as_ref().is_some_and(|req| ep.test_send(req).unwrap()) {
                    ep.wait_send(slot.take().unwrap()).unwrap();
                }
            }
        }
        for req in sends.into_iter().flatten() {
            ep.wait_send(req).unwrap();
        }
    });
}

fn wrong_key_is_refused(t: TransportKind) {
    let job = job(t, 2);
    let ctx = job.context(0, 2);
    let mut key = job.key;
    key[0] ^= 1;
    let mut config = job.config.clone();
    config.connect_timeout = Duration::from_secs(3);
    let stranger = job.build(1, || {
        Context::builder()
            .rank(1)
            .size(2)
            .job_id(job.id)
            .job_key(key)
            .addrs(job.addrs.clone())
            .config(config)
            .build()
            .unwrap()
    });
    let done = std::sync::atomic::AtomicBool::new(false);
    thread::scope(|s| {
        s.spawn(|| {
            // The rank being attacked keeps using its endpoint (datagram transports make
            // progress inside API calls).
            let mut ep = ctx.endpoint(0).unwrap();
            let mut buf = [0u8; 8];
            while !done.load(Ordering::Acquire) {
                assert!(matches!(ep.try_recv(&mut buf), Err(Error::WouldBlock)));
                thread::sleep(Duration::from_micros(200));
            }
        });
        let mut sep = stranger.endpoint(0).unwrap();
        let result = sep.connect(Addr::new(0, 0));
        // A datagram responder only learns of the failure by its handshake timeout.
        let deadline = std::time::Instant::now() + Duration::from_secs(15);
        while ctx.stats().connections_refused == 0 && std::time::Instant::now() < deadline {
            thread::sleep(Duration::from_millis(5));
        }
        done.store(true, Ordering::Release);
        assert!(ctx.stats().connections_refused > 0, "refusal not counted");
        match result {
            Err(Error::WrongKey { .. }) => {}
            other => panic!("expected WrongKey, got {other:?}"),
        }
    });
    assert_eq!(ctx.stats().connections_accepted, 0);
}

/// Both ranks `send` (blocking) several large messages, then receive them: over a
/// network transport a blocking send receives meanwhile (tcp reads ahead within
/// `max_buffered_bytes`, the datagram engine within its window). Not over shm, where a
/// blocking send of a rendezvous message waits for the receiver, as `MPI_Send` may.
fn blocking_sends_both_ways(t: TransportKind) {
    run(t, 2, |rank, ctx| {
        let mut ep = ctx.endpoint(0).unwrap();
        ep.set_timeout(Some(Duration::from_secs(20)));
        let conn = ep.connect(Addr::new(1 - rank, 0)).unwrap();
        for (i, &len) in EXCHANGE_SIZES.iter().enumerate() {
            ep.send(conn, &pattern(len, exchange_seed(rank, i)))
                .unwrap();
        }
        let mut buf = vec![0u8; 3 << 20];
        for (i, &len) in EXCHANGE_SIZES.iter().enumerate() {
            let (n, _) = ep.recv(&mut buf).unwrap();
            assert_eq!(n, len);
            assert!(
                buf[..n] == pattern(len, exchange_seed(1 - rank, i))[..],
                "message {i}"
            );
        }
        ep.send(conn, b"bye").unwrap();
        ep.recv(&mut buf).unwrap();
    });
}

#[test]
fn tcp_blocking_sends_both_ways() {
    blocking_sends_both_ways(TransportKind::Tcp)
}

#[test]
fn udp_blocking_sends_both_ways() {
    blocking_sends_both_ways(TransportKind::Udp)
}

#[test]
fn mem_blocking_sends_both_ways() {
    blocking_sends_both_ways(TransportKind::Mem)
}

/// tcp: a large message half arrived survives receives that end before it is whole (a
/// blocking `recv` that times out, a `try_recv`), is taken over by the next receive (a
/// blocking one, a posted one), and arrives whole and in order. In each step the sender
/// posts a message larger than a fresh connection holds in flight (~4 MiB on loopback;
/// one endpoint pair per step, as the window grows with use) and then makes no call until
/// told to (`STEP`), so the receiver surely sees the message half arrived.
#[test]
fn tcp_half_arrived_message_survives() {
    const LEN: usize = (6 << 20) + 9;
    static STEP: AtomicU32 = AtomicU32::new(0);
    fn wait_for(step: u32) {
        let start = std::time::Instant::now();
        while STEP.load(Ordering::Acquire) < step {
            assert!(
                start.elapsed() < Duration::from_secs(20),
                "step {step} never came"
            );
            thread::sleep(Duration::from_millis(1));
        }
    }
    /// Waits until message `LEN` has begun (a too-small buffer: kept), then starts
    /// reading it with `try_recv`, which cannot finish it.
    fn start_with_try_recv(ep: &mut quiver::Endpoint, buf: &mut [u8]) {
        let mut small = vec![0u8; LEN - 1];
        loop {
            match ep.try_recv(&mut small) {
                Err(Error::BufferTooSmall { message, .. }) => {
                    assert_eq!(message, LEN);
                    break;
                }
                Err(Error::WouldBlock) => thread::yield_now(),
                other => panic!("expected BufferTooSmall, got {other:?}"),
            }
        }
        let got = ep.try_recv(buf).map(|(n, _)| n);
        assert!(matches!(got, Err(Error::WouldBlock)), "{got:?}");
    }
    run(TransportKind::Tcp, 2, |rank, ctx| {
        let mut eps: Vec<_> = (0..3).map(|port| ctx.endpoint(port).unwrap()).collect();
        for ep in &mut eps {
            ep.set_timeout(Some(Duration::from_secs(20)));
        }
        let mut buf = vec![0u8; LEN];
        if rank == 0 {
            for (i, ep) in eps.iter_mut().enumerate() {
                let i = i as u32;
                let conn = ep.connect(Addr::new(1, i as u16)).unwrap();
                let req = ep.post_send(conn, pattern(LEN, i)).unwrap();
                STEP.store(2 * i + 1, Ordering::Release);
                wait_for(2 * i + 2);
                ep.wait_send(req).unwrap();
                ep.send(conn, &pattern(100, 10 + i)).unwrap();
            }
            eps[2].recv(&mut buf[..8]).unwrap();
        } else {
            // 1: a blocking recv times out in the middle of the message, the next one
            // takes it over.
            wait_for(1);
            eps[0].set_timeout(Some(Duration::from_millis(100)));
            match eps[0].recv(&mut buf) {
                Err(Error::Timeout { .. }) => {}
                other => panic!("expected a timeout, got {other:?}"),
            }
            eps[0].set_timeout(Some(Duration::from_secs(20)));
            STEP.store(2, Ordering::Release);
            assert_eq!(eps[0].recv(&mut buf).unwrap().0, LEN);
            assert!(buf == pattern(LEN, 0), "message 0 differs");
            // 2: try_recv starts it, a blocking recv finishes it.
            wait_for(3);
            start_with_try_recv(&mut eps[1], &mut buf);
            STEP.store(4, Ordering::Release);
            assert_eq!(eps[1].recv(&mut buf).unwrap().0, LEN);
            assert!(buf == pattern(LEN, 1), "message 1 differs");
            // 3: try_recv starts it, a posted receive finishes it.
            wait_for(5);
            start_with_try_recv(&mut eps[2], &mut buf);
            let req = eps[2].post_recv(vec![0u8; LEN + 1]).unwrap();
            STEP.store(6, Ordering::Release);
            let c = eps[2].wait_recv(req).unwrap();
            assert_eq!((c.len, c.buf.len()), (LEN, LEN + 1));
            assert!(c.buf[..LEN] == pattern(LEN, 2)[..], "message 2 differs");
            // What followed on each connection comes next, whole.
            for (i, ep) in eps.iter_mut().enumerate() {
                let (n, _) = ep.recv(&mut buf).unwrap();
                assert!(buf[..n] == pattern(100, 10 + i as u32)[..], "follower {i}");
            }
            let conn = eps[2].connect(Addr::new(0, 2)).unwrap();
            eps[2].send(conn, b"bye").unwrap();
        }
    });
}

/// Rank 1 answers rank 0 without connecting back: over udp and tcp on rank 0's own
/// connection (one reliable connection in all), over shm on a ring `reply` opens.
fn reply_without_connecting_back(t: TransportKind) {
    const LENS: [usize; 4] = [0, 8, 5000, (256 << 10) + 3];
    run(t, 2, |rank, ctx| {
        let mut ep = ctx.endpoint(0).unwrap();
        if rank == 0 {
            let peer = Addr::new(1, 0);
            let conn = ep.connect(peer).unwrap();
            let mut buf = vec![0u8; 1 << 20];
            for (i, &len) in LENS.iter().enumerate() {
                ep.send(conn, &pattern(len, i as u32)).unwrap();
                let (n, src) = ep.recv(&mut buf).unwrap();
                assert_eq!((n, src), (len + 1, peer), "answer {i}");
                assert!(
                    buf[1..n] == pattern(len, i as u32)[..],
                    "answer {i} differs"
                );
                assert_eq!(buf[0], i as u8);
            }
            // Rank 1 looks at its reply connection after the last answer: this endpoint
            // stays until it has (once it is gone, that connection has failed and
            // `reply_connection` would open a new one, to nobody).
            assert_eq!(ep.recv(&mut buf).unwrap(), (4, peer), "done");
            let stats = ctx.stats();
            if t == TransportKind::Shm {
                assert_eq!(stats.shm_connections_accepted, 1, "{stats:?}");
            } else {
                // Counted once: the peer's edge on our connection came to life.
                assert_eq!(stats.connections_accepted, 1, "{stats:?}");
                if let Some(datagram) = &stats.datagram {
                    assert_eq!(datagram.connections, 1, "{stats:?}");
                }
            }
        } else {
            let stranger = Addr::new(0, 7);
            assert!(matches!(
                ep.reply_connection(stranger),
                Err(Error::InvalidArgument(_))
            ));
            for i in 0..LENS.len() {
                let got = ep.recv_pooled().unwrap();
                let src = got.src();
                let mut answer = vec![i as u8];
                answer.extend_from_slice(&got);
                ep.reply(src, &answer).unwrap();
                assert_eq!(ep.reply_connection(src).unwrap().peer(), src);
            }
            ep.reply(Addr::new(0, 0), b"done").unwrap();
            // Rank 0 receives the last message before it returns.
            ep.set_timeout(Some(Duration::from_millis(200)));
            let _ = ep.recv_pooled();
        }
    });
}

/// `Endpoint::set_detection` switches the liveness looks of a waiting call, per endpoint,
/// and refuses a time under the minimum. Off, a wait still looks once per sleep slice
/// (50 ms) after its spin budget; on at 10 ms it looks every 10 ms.
///
/// The ranks busy-poll for their whole spin budget (`YieldMode::Never`): under the default
/// policy a loaded machine makes a spin yield and shrink to 200 µs, too short for a look,
/// and the waits counted only what the load left of them.
fn detection_is_set_per_endpoint(t: TransportKind) {
    const WAIT: Duration = Duration::from_millis(500);
    let mut job = job(t, 2);
    job.config.yield_mode = quiver::YieldMode::Never;
    let contexts: Vec<Context> = (0..2).map(|r| job.context(r, 2)).collect();
    ranks::run_ranks(contexts, |rank, ctx| {
        let mut ep = ctx.endpoint(0).unwrap();
        ep.set_timeout(Some(Duration::from_secs(20)));
        let too_short = ep.set_detection(Some(Duration::from_millis(5)));
        assert!(
            matches!(too_short, Err(Error::InvalidArgument(_))),
            "{too_short:?}"
        );
        let conn = ep.connect(Addr::new(1 - rank, 0)).unwrap();
        let mut byte = [0u8; 1];
        if rank == 0 {
            for _ in 0..2 {
                ep.recv(&mut byte).unwrap();
                thread::sleep(WAIT);
                ep.send(conn, b"x").unwrap();
            }
            return;
        }
        let mut looks_in_a_wait = |ep: &mut quiver::Endpoint| {
            let before = ep.detection_stats().looks;
            ep.send(conn, b"?").unwrap();
            ep.recv(&mut byte).unwrap();
            ep.detection_stats().looks - before
        };
        ep.set_detection(None).unwrap();
        assert_eq!(ep.detection(), None);
        let off = looks_in_a_wait(&mut ep);
        ep.set_detection(Some(quiver::DETECTION_MIN)).unwrap();
        assert_eq!(ep.detection(), Some(quiver::DETECTION_MIN));
        let on = looks_in_a_wait(&mut ep);
        // Measured: 10 off (one per sleep slice), about 30 on (at most one per 10 ms).
        assert!(
            off <= 15 && on > off + 5,
            "{off} looks off, {on} on in {WAIT:?} waits"
        );
    });
}

#[test]
fn shm_detection_is_set_per_endpoint() {
    detection_is_set_per_endpoint(TransportKind::Shm);
}

#[test]
fn tcp_detection_is_set_per_endpoint() {
    detection_is_set_per_endpoint(TransportKind::Tcp);
}

/// A rank that connects before its peer opened the endpoint is told "not open", retries and
/// gets through: counted apart from refusals, so a healthy start shows none.
fn connect_before_the_endpoint_opens(t: TransportKind) {
    let job = job(t, 2);
    let c0 = job.context(0, 2);
    let c1 = job.context(1, 2);
    thread::scope(|s| {
        s.spawn(|| {
            // Another endpoint keeps the rank's datagram engine polled meanwhile, so the
            // early attempts reach it whatever the transport.
            let mut early = c1.endpoint(1).unwrap();
            let mut buf = [0u8; 8];
            let opens = std::time::Instant::now() + Duration::from_millis(300);
            while std::time::Instant::now() < opens {
                assert!(matches!(early.try_recv(&mut buf), Err(Error::WouldBlock)));
                thread::sleep(Duration::from_micros(200));
            }
            let mut ep = c1.endpoint(0).unwrap();
            assert_eq!(ep.recv(&mut buf).unwrap(), (5, Addr::new(0, 0)));
            let back = ep.connect(Addr::new(0, 0)).unwrap();
            ep.send(back, b"done").unwrap();
        });
        let mut ep = c0.endpoint(0).unwrap();
        let conn = ep.connect(Addr::new(1, 0)).unwrap();
        ep.send(conn, b"hello").unwrap();
        let mut buf = [0u8; 8];
        assert_eq!(ep.recv(&mut buf).unwrap(), (4, Addr::new(1, 0)));
    });
    let stats = c1.stats();
    assert_eq!(stats.connections_refused, 0, "{:?}", stats.last_refusal);
    assert!(stats.connections_not_open >= 1, "{stats:?}");
    assert_eq!(c0.stats().connections_refused, 0);
}

/// `Endpoint::transport` names the connection's transport and its protocols by size.
fn transport_is_reported(t: TransportKind) {
    run(t, 2, |rank, ctx| {
        let mut ep = ctx.endpoint(0).unwrap();
        let peer = Addr::new(1 - rank, 0);
        let conn = ep.connect(peer).unwrap();
        let info = ep.transport(conn).unwrap();
        assert_eq!(info.kind, t);
        assert_eq!(info, quiver::transport_info(t, ctx.config()));
        assert_eq!(info.range_for(0).map(|r| r.first), Some(0));
        assert_eq!(info.range_for(u64::MAX).map(|r| r.last), Some(None));
        let other = ctx.endpoint(1).unwrap();
        assert!(matches!(
            other.transport(conn),
            Err(Error::InvalidArgument(_))
        ));
        // Both ranks stay until both are connected.
        ep.send(conn, b"x").unwrap();
        let mut buf = [0u8; 1];
        assert_eq!(ep.recv(&mut buf).unwrap(), (1, peer));
    });
}

/// An endpoint refuses a message longer than its limit (`set_max_message_bytes`): the
/// connection ends with `MessageTooLarge`, naming the length and the limit, and what came
/// before it is delivered.
fn a_message_over_the_limit_is_refused(t: TransportKind) {
    const LIMIT: usize = 100_000;
    // Set by the receiver once it saw the refusal (the sender stays until then), one per
    // transport: the transports' tests run at once.
    static SEEN: [AtomicU32; 5] = [const { AtomicU32::new(0) }; 5];
    run(t, 2, |rank, ctx| {
        let mut ep = ctx.endpoint(0).unwrap();
        let seen = &SEEN[t as usize];
        if rank == 0 {
            let conn = ep.connect(Addr::new(1, 0)).unwrap();
            ep.set_timeout(Some(Duration::from_secs(5)));
            ep.send(conn, &pattern(LIMIT, 1)).unwrap();
            // Refused unread: whether this send completes depends on the transport.
            let _ = ep.send(conn, &pattern(LIMIT + 1, 2));
            for _ in 0..3000 {
                if seen.load(Ordering::Acquire) == 1 {
                    return;
                }
                // A datagram transport sends the rest of what `send` took (beyond the
                // first flight, over an Ethernet MTU) only inside API calls.
                let _ = ep.progress();
                thread::sleep(Duration::from_millis(10));
            }
            panic!("the receiver never saw the refusal");
        } else {
            ep.set_max_message_bytes(LIMIT as u64).unwrap();
            assert_eq!(ep.max_message_bytes(), LIMIT as u64);
            let first = ep.recv_pooled().unwrap();
            assert!(first[..] == pattern(LIMIT, 1)[..]);
            let refused = ep.recv_pooled().map(|b| b.len());
            seen.store(1, Ordering::Release);
            match refused {
                Err(Error::MessageTooLarge {
                    peer,
                    transport,
                    announced,
                    max,
                }) => {
                    assert_eq!(peer, Addr::new(0, 0));
                    assert_eq!(transport, t.name());
                    assert_eq!((announced, max), (LIMIT as u64 + 1, LIMIT as u64));
                }
                other => panic!("expected MessageTooLarge, got {other:?}"),
            }
        }
    });
}

macro_rules! conformance {
    ($($name:ident: $kind:expr $(, $variant:expr)?;)*) => {$(
        mod $name {
            use super::*;
            #[test] fn every_size() { $(super::set_variant($variant);)? if !super::skip($kind) { super::every_size($kind) } }
            #[test] fn many_small_in_order() { $(super::set_variant($variant);)? if !super::skip($kind) { super::many_small_in_order($kind) } }
            #[test] fn posted_operations() { $(super::set_variant($variant);)? if !super::skip($kind) { super::posted_operations($kind) } }
            #[test] fn posted_sends_beyond_the_window() { $(super::set_variant($variant);)? if !super::skip($kind) { super::posted_sends_beyond_the_window($kind) } }
            #[test] fn buffer_too_small_keeps_message() { $(super::set_variant($variant);)? if !super::skip($kind) { super::buffer_too_small_keeps_message($kind) } }
            #[test] fn try_recv_would_block_then_arrives() { $(super::set_variant($variant);)? if !super::skip($kind) { super::try_recv_would_block_then_arrives($kind) } }
            #[test] fn three_senders_one_receiver() { $(super::set_variant($variant);)? if !super::skip($kind) { super::three_senders_one_receiver($kind) } }
            #[test] fn large_and_small_from_three_peers_into_one_buffer() { $(super::set_variant($variant);)? if !super::skip($kind) { super::large_and_small_from_three_peers_into_one_buffer($kind) } }
            #[test] fn posted_recv_taken_by_a_later_peer() { $(super::set_variant($variant);)? if !super::skip($kind) { super::posted_recv_taken_by_a_later_peer($kind) } }
            #[test] fn closed_peer_is_reported() { $(super::set_variant($variant);)? if !super::skip($kind) { super::closed_peer_is_reported($kind) } }
            #[test] fn wrong_key_is_refused() { $(super::set_variant($variant);)? if !super::skip($kind) { super::wrong_key_is_refused($kind) } }
            #[test] fn exchange_large_posted() { $(super::set_variant($variant);)? if !super::skip($kind) { super::exchange_large_posted($kind) } }
            #[test] fn exchange_large_polling() { $(super::set_variant($variant);)? if !super::skip($kind) { super::exchange_large_polling($kind) } }
            #[test] fn connect_before_the_endpoint_opens() { $(super::set_variant($variant);)? if !super::skip($kind) { super::connect_before_the_endpoint_opens($kind) } }
            #[test] fn transport_is_reported() { $(super::set_variant($variant);)? if !super::skip($kind) { super::transport_is_reported($kind) } }
            #[test] fn a_message_over_the_limit_is_refused() { $(super::set_variant($variant);)? if !super::skip($kind) { super::a_message_over_the_limit_is_refused($kind) } }
            #[test] fn reply_without_connecting_back() { $(super::set_variant($variant);)? if !super::skip($kind) { super::reply_without_connecting_back($kind) } }
            #[test] fn close_one_connection() { $(super::set_variant($variant);)? if !super::skip($kind) { super::close_one_connection($kind) } }
            #[test] fn close_stops_a_sender() { $(super::set_variant($variant);)? if !super::skip($kind) { super::close_stops_a_sender($kind) } }
            #[test] fn close_ends_both_directions() { $(super::set_variant($variant);)? if !super::skip($kind) { super::close_ends_both_directions($kind) } }
            #[test] fn scoped_slices_of_caller_arrays() { $(super::set_variant($variant);)? if !super::skip($kind) { super::scoped::slices_of_caller_arrays($kind) } }
            #[test] fn scoped_early_return_and_panic() { $(super::set_variant($variant);)? if !super::skip($kind) { super::scoped::early_return_and_panic($kind) } }
            #[test] fn scoped_posted_by_number() { $(super::set_variant($variant);)? if !super::skip($kind) { super::scoped::posted_by_number($kind) } }
            #[test] fn send_send() { $(super::set_variant($variant);)? if !super::skip($kind) { super::send_send($kind) } }
        }
    )*};
}

conformance! {
    shm: TransportKind::Shm;
    tcp: TransportKind::Tcp;
    udp: TransportKind::Udp;
    mem: TransportKind::Mem;
    xdp: TransportKind::Xdp;
    udp_uring: TransportKind::Udp, Variant { udp_io: UdpIoMode::Uring, netns: false };
    udp_uring_netns: TransportKind::Udp, Variant { udp_io: UdpIoMode::Uring, netns: true };
}

/// The tagged part of the suite, over every transport.
macro_rules! tagged_conformance {
    ($($name:ident: $kind:expr $(, $variant:expr)?;)*) => {$(
        mod $name {
            use super::*;
            #[test] fn wildcards_and_masks() { $(super::set_variant($variant);)? if !super::skip($kind) { tagged::wildcards_and_masks($kind) } }
            #[test] fn non_overtaking_many_tags() { $(super::set_variant($variant);)? if !super::skip($kind) { tagged::non_overtaking_many_tags($kind) } }
            #[test] fn posted_in_posting_order() { $(super::set_variant($variant);)? if !super::skip($kind) { tagged::posted_in_posting_order($kind) } }
            #[test] fn probe_then_receive() { $(super::set_variant($variant);)? if !super::skip($kind) { tagged::probe_then_receive($kind) } }
            #[test] fn large_behind_unmatched() { $(super::set_variant($variant);)? if !super::skip($kind) { tagged::large_tagged_behind_unmatched($kind) } }
            #[test] fn large_matched_before_it_moves() { $(super::set_variant($variant);)? if !super::skip($kind) { tagged::large_matched_before_it_moves($kind) } }
            #[test] fn many_senders_tags_in_reverse() { $(super::set_variant($variant);)? if !super::skip($kind) { tagged::many_senders_tags_in_reverse($kind) } }
            #[test] fn large_for_a_posted_receive() { $(super::set_variant($variant);)? if !super::skip($kind) { tagged::large_for_a_posted_receive($kind) } }
            #[test] fn posted_large_and_small_interleaved() { $(super::set_variant($variant);)? if !super::skip($kind) { tagged::posted_large_and_small_interleaved($kind) } }
            #[test] fn plain_receives_report_tags() { $(super::set_variant($variant);)? if !super::skip($kind) { tagged::plain_receives_report_tags($kind) } }
            #[test] fn unexpected_beyond_the_bound_spill() { $(super::set_variant($variant);)? if !super::skip($kind) { tagged::spill::beyond_the_bound($kind) } }
            #[test] fn unexpected_spill_failure_keeps_them() { $(super::set_variant($variant);)? if !super::skip($kind) { tagged::spill::failure_keeps_them($kind) } }
        }
    )*};
}

tagged_conformance! {
    shm_tagged: TransportKind::Shm;
    tcp_tagged: TransportKind::Tcp;
    udp_tagged: TransportKind::Udp;
    mem_tagged: TransportKind::Mem;
    xdp_tagged: TransportKind::Xdp;
    udp_uring_tagged: TransportKind::Udp, Variant { udp_io: UdpIoMode::Uring, netns: false };
}

/// A large tcp message bound to a matching receive (read straight into its buffer) when the
/// connection closes in the middle of it (not shm: it pulls a rendezvous whole in one
/// look).
#[test]
fn tcp_tagged_bound_receive_closed_mid_message() {
    if !skip(TransportKind::Tcp) {
        tagged::bound_receive_closed_mid_message(TransportKind::Tcp)
    }
}

/// A large datagram message bound to a matching receive (the engine places its frames in
/// the receive's buffer) when the connection closes in the middle of it, over mem.
#[test]
fn mem_tagged_bound_receive_closed_mid_message() {
    if !skip(TransportKind::Mem) {
        tagged::bound_receive_closed_mid_message(TransportKind::Mem)
    }
}

/// As [`mem_tagged_bound_receive_closed_mid_message`], over udp.
#[test]
fn udp_tagged_bound_receive_closed_mid_message() {
    if !skip(TransportKind::Udp) {
        tagged::bound_receive_closed_mid_message(TransportKind::Udp)
    }
}

/// A matching receive bound to a large message and cancelled in the middle of it: the
/// cancel waits for the message (tcp, and the datagram transports over mem and udp).
#[test]
fn tagged_bound_receive_cancelled_mid_message() {
    for t in [TransportKind::Tcp, TransportKind::Mem, TransportKind::Udp] {
        if !skip(t) {
            tagged::bound_receive_cancelled_mid_message(t)
        }
    }
}

/// The active-message part of the suite, over every transport.
macro_rules! am_conformance {
    ($($name:ident: $kind:expr $(, $variant:expr)?;)*) => {$(
        mod $name {
            use super::*;
            #[test] fn handlers_run_once_in_order() { $(super::set_variant($variant);)? if !super::skip($kind) { am::handlers_run_once_in_order($kind) } }
            #[test] fn every_size() { $(super::set_variant($variant);)? if !super::skip($kind) { am::every_size($kind) } }
            #[test] fn unknown_handler_is_a_counted_error() { $(super::set_variant($variant);)? if !super::skip($kind) { am::unknown_handler_is_a_counted_error($kind) } }
            #[test] fn blocking_call_in_handler_is_refused() { $(super::set_variant($variant);)? if !super::skip($kind) { am::blocking_call_in_handler_is_refused($kind) } }
            #[test] fn placed_every_size() { $(super::set_variant($variant);)? if !super::skip($kind) { am::placed::placed_every_size($kind) } }
        }
    )*};
}

am_conformance! {
    shm_am: TransportKind::Shm;
    tcp_am: TransportKind::Tcp;
    udp_am: TransportKind::Udp;
    mem_am: TransportKind::Mem;
    xdp_am: TransportKind::Xdp;
    udp_uring_am: TransportKind::Udp, Variant { udp_io: UdpIoMode::Uring, netns: false };
}
