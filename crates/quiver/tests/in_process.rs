//! Two ranks of one job as two contexts in one process (threads): the whole API over real
//! shared memory, sockets and cross-memory attach, without spawning processes.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use quiver::{Addr, Config, Context, Error, MatchSpec};

static NEXT_JOB: AtomicU64 = AtomicU64::new(1);

fn job(size: u32, key: [u8; 32]) -> (u64, impl Fn(u32) -> Context) {
    let id = (std::process::id() as u64) << 32 | NEXT_JOB.fetch_add(1, Ordering::Relaxed);
    (id, move |rank| {
        let cfg = Config {
            connect_timeout: Duration::from_secs(5),
            ..Config::default()
        };
        Context::builder()
            .rank(rank)
            .size(size)
            .job_id(id)
            .job_key(key)
            .config(cfg)
            .build()
            .unwrap()
    })
}

fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
        .collect()
}

const SIZES: &[usize] = &[
    0,
    1,
    8,
    40,
    41,
    100,
    4096,
    16384,
    16385,
    65536,
    65537,
    1 << 20,
    3 << 20,
];

#[test]
fn every_protocol_delivers_in_order() {
    let (_, make) = job(2, [7; 32]);
    let c0 = make(0);
    let c1 = make(1);
    let t = std::thread::spawn(move || {
        let mut ep = c1.endpoint(0).unwrap();
        let back = ep.connect(Addr::new(0, 0)).unwrap();
        let mut buf = vec![0u8; 4 << 20];
        for (i, &len) in SIZES.iter().enumerate() {
            let (n, src) = ep.recv(&mut buf).unwrap();
            assert_eq!(src, Addr::new(0, 0));
            assert_eq!(n, len);
            assert_eq!(&buf[..n], &pattern(len, i as u8)[..], "size {len}");
            ep.send(back, &buf[..n]).unwrap();
        }
    });
    let mut ep = c0.endpoint(0).unwrap();
    let conn = ep.connect(Addr::new(1, 0)).unwrap();
    for (i, &len) in SIZES.iter().enumerate() {
        let msg = pattern(len, i as u8);
        ep.send(conn, &msg).unwrap();
        let got = ep.recv_pooled().unwrap();
        assert_eq!(got.src(), Addr::new(1, 0));
        assert_eq!(&got[..], &msg[..], "echo of size {len}");
    }
    t.join().unwrap();
}

#[test]
fn posted_operations_and_try_calls() {
    let (_, make) = job(2, [9; 32]);
    let c0 = make(0);
    let c1 = make(1);
    let mut e0 = c0.endpoint(3).unwrap();
    let mut e1 = c1.endpoint(4).unwrap();
    let conn = e0.connect(Addr::new(1, 4)).unwrap();
    let mut small = [0u8; 4];
    assert!(matches!(e1.try_recv(&mut small), Err(Error::WouldBlock)));
    // Posted receives first, then sends of every size from one thread: no deadlock because
    // every call progresses both sides' posted work.
    let recvs: Vec<_> = SIZES
        .iter()
        .map(|&l| e1.post_recv(vec![0; l.max(1)]).unwrap())
        .collect();
    let sends: Vec<_> = SIZES
        .iter()
        .enumerate()
        .map(|(i, &l)| e0.post_send(conn, pattern(l, i as u8)).unwrap())
        .collect();
    let mut done = vec![false; SIZES.len()];
    for _ in 0..100_000 {
        e0.progress().unwrap();
        e1.progress().unwrap();
        for (i, r) in recvs.iter().enumerate() {
            done[i] = done[i] || e1.test_recv(r).unwrap();
        }
        if done.iter().all(|d| *d) {
            break;
        }
    }
    assert!(done.iter().all(|d| *d));
    for (i, r) in recvs.into_iter().enumerate() {
        let c = e1.wait_recv(r).unwrap();
        assert_eq!(c.len, SIZES[i]);
        assert_eq!(&c.buf[..c.len], &pattern(SIZES[i], i as u8)[..]);
    }
    for (i, s) in sends.into_iter().enumerate() {
        let buf = e0.wait_send(s).unwrap();
        assert_eq!(buf.len(), SIZES[i]);
    }
    // Too small a buffer is an error and the message stays.
    e0.try_send(conn, &[5u8; 10]).unwrap();
    let mut got = Err(Error::WouldBlock);
    for _ in 0..1000 {
        got = e1.try_recv(&mut small);
        if !matches!(got, Err(Error::WouldBlock)) {
            break;
        }
    }
    assert!(
        matches!(
            got,
            Err(Error::BufferTooSmall {
                message: 10,
                buffer: 4
            })
        ),
        "{got:?}"
    );
    let mut big = [0u8; 16];
    assert_eq!(e1.try_recv(&mut big).unwrap(), (10, Addr::new(0, 3)));
    // A large try_send is buffered and completes in the background.
    let large = pattern(1 << 20, 1);
    e0.try_send(conn, &large).unwrap();
    let got = e1.recv_pooled().unwrap();
    assert_eq!(&got[..], &large[..]);
}

#[test]
fn wrong_key_is_refused_and_counted() {
    let id = 0xfeed_0000_0000_0000 | std::process::id() as u64;
    let make = |rank, key| {
        let cfg = Config {
            connect_timeout: Duration::from_millis(500),
            ..Config::default()
        };
        Context::builder()
            .rank(rank)
            .size(2)
            .job_id(id)
            .job_key(key)
            .config(cfg)
            .build()
            .unwrap()
    };
    let good = make(0, [1; 32]);
    let _ep = good.endpoint(0).unwrap();
    let stranger = make(1, [2; 32]);
    let mut ep = stranger.endpoint(0).unwrap();
    let err = ep.connect(Addr::new(0, 0)).unwrap_err();
    assert!(
        matches!(&err, Error::WrongKey { .. }) && err.to_string().contains("wrong job key"),
        "{err}"
    );
    std::thread::sleep(Duration::from_millis(50));
    assert_eq!(good.stats().connections_refused, 1);
    assert_eq!(good.stats().connections_accepted, 0);
}

#[test]
fn missing_endpoint_times_out_with_a_clear_error() {
    let (_, make) = job(2, [3; 32]);
    let c0 = make(0);
    let _c1 = make(1);
    let mut ep = c0.endpoint(0).unwrap();
    let err = ep.connect(Addr::new(1, 77)).unwrap_err();
    assert!(
        matches!(&err, Error::Refused { reason, .. } if reason.contains("not open")),
        "{err}"
    );
    assert!(matches!(
        ep.connect(Addr::new(5, 0)),
        Err(Error::InvalidArgument(_))
    ));
}

#[test]
fn the_descriptor_wakes_poll_once_armed() {
    let (_, make) = job(2, [5; 32]);
    let c0 = make(0);
    let c1 = make(1);
    let mut rx = c1.endpoint(0).unwrap();
    let mut tx = c0.endpoint(0).unwrap();
    let conn = tx.connect(Addr::new(1, 0)).unwrap();
    let fd = std::os::fd::AsRawFd::as_raw_fd(&rx);
    let readable = |timeout_ms: i32| {
        let mut p = [libc::pollfd {
            fd,
            events: libc::POLLIN,
            revents: 0,
        }];
        // SAFETY: poll on a live descriptor with a one-element array.
        unsafe { libc::poll(p.as_mut_ptr(), 1, timeout_ms) == 1 }
    };
    let mut buf = [0u8; 16];
    // Drain the connection notice, then arm: nothing is waiting, so the fd stays quiet.
    while !matches!(rx.try_recv(&mut buf), Err(Error::WouldBlock)) {}
    assert!(rx.arm().unwrap());
    assert!(!readable(50));
    tx.send(conn, b"wake").unwrap();
    assert!(readable(2000), "armed descriptor did not become readable");
    assert_eq!(rx.try_recv(&mut buf).unwrap(), (4, Addr::new(0, 0)));
    // Something already waiting: arm says so instead of letting the caller sleep.
    tx.send(conn, b"more").unwrap();
    assert!(!rx.arm().unwrap());
}

#[test]
fn arm_matching_sleeps_past_messages_that_do_not_match() {
    let (_, make) = job(2, [15; 32]);
    let c0 = make(0);
    let c1 = make(1);
    let mut rx = c1.endpoint(0).unwrap();
    let mut tx = c0.endpoint(0).unwrap();
    let conn = tx.connect(Addr::new(1, 0)).unwrap();
    let fd = std::os::fd::AsRawFd::as_raw_fd(&rx);
    let readable = |timeout_ms: i32| {
        let mut p = [libc::pollfd {
            fd,
            events: libc::POLLIN,
            revents: 0,
        }];
        // SAFETY: poll on a live descriptor with a one-element array.
        unsafe { libc::poll(p.as_mut_ptr(), 1, timeout_ms) == 1 }
    };
    let (other, wanted) = (MatchSpec::tag(1), MatchSpec::tag(2));
    let mut buf = [0u8; 16];
    tx.send_tagged(conn, 1, b"other").unwrap();
    // Taken in by the matching receive of tag 2, and left waiting for another.
    assert_eq!(rx.probe(other).unwrap().len, 5);
    assert!(matches!(
        rx.try_recv_matching(wanted, &mut buf),
        Err(Error::WouldBlock)
    ));
    // Plain arm reports the waiting message; arming for tag 2 sleeps past it.
    assert!(!rx.arm().unwrap());
    assert!(!rx.arm_matching(other).unwrap());
    assert!(rx.arm_matching(wanted).unwrap());
    assert!(!readable(50), "nothing for tag 2 yet");
    tx.send_tagged(conn, 2, b"wanted").unwrap();
    assert!(
        readable(2000),
        "the armed descriptor did not wake for tag 2"
    );
    let got = loop {
        match rx.try_recv_matching(wanted, &mut buf) {
            Err(Error::WouldBlock) => assert!(!rx.arm_matching(wanted).unwrap() || readable(2000)),
            got => break got.unwrap(),
        }
    };
    assert_eq!((got.tag, &buf[..6]), (2, &b"wanted"[..]));
    // The other message is still there, for a receive of its tag.
    let got = rx.recv_matching(other, &mut buf).unwrap();
    assert_eq!((got.tag, &buf[..5]), (1, &b"other"[..]));
}

#[test]
fn a_one_gibibyte_message_arrives_intact() {
    let (_, make) = job(2, [6; 32]);
    let c0 = make(0);
    let c1 = make(1);
    let len = 1usize << 30;
    let t = std::thread::spawn(move || {
        let mut ep = c0.endpoint(0).unwrap();
        let conn = ep.connect(Addr::new(1, 0)).unwrap();
        let mut msg = vec![0u8; len];
        for (i, chunk) in msg.chunks_mut(4096).enumerate() {
            chunk[..8].copy_from_slice(&(i as u64).to_le_bytes());
        }
        ep.send(conn, &msg).unwrap();
    });
    let mut ep = c1.endpoint(0).unwrap();
    let got = ep.recv_pooled().unwrap();
    assert_eq!(got.len(), len);
    for (i, chunk) in got.chunks(4096).enumerate() {
        assert_eq!(chunk[..8], (i as u64).to_le_bytes(), "page {i}");
    }
    t.join().unwrap();
}
