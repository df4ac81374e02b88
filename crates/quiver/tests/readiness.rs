//! Readiness of the endpoint's descriptor over every transport (shm, tcp, udp, mem), with
//! the program asleep in epoll rather than in quiver: it wakes for every message (the
//! arm/arrival races included: the sender often answers at once) and for the completion
//! of a posted send; and an endpoint asleep while another endpoint of its context polls
//! the shared datagram engine (and so takes its datagrams off the socket) still wakes.
//! A wait of 10 s that nothing ends is a lost wake-up and fails the test. Ranks are
//! contexts on threads of this process over real sockets and shared memory; the
//! multi-process runs are `quiver-cli`'s `tests/readiness.rs`.

use std::collections::BTreeSet;
use std::net::{Ipv4Addr, SocketAddr, TcpListener, UdpSocket};
use std::os::fd::{AsRawFd, RawFd};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Mutex;
use std::thread;
use std::time::Duration;

use quiver::{Addr, Config, Context, Endpoint, Error, TransportKind};

static NEXT_JOB: AtomicU32 = AtomicU32::new(1);

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

/// The contexts of a two-rank job over `transport` alone.
fn job(transport: TransportKind) -> (Context, Context) {
    let n = NEXT_JOB.fetch_add(1, Ordering::Relaxed);
    let id = (u64::from(std::process::id()) << 32) | u64::from(n) | (0x77 << 24);
    let addrs: Vec<SocketAddr> = match transport {
        TransportKind::Shm => Vec::new(),
        TransportKind::Mem => (0..2u8)
            .map(|r| {
                let ip = Ipv4Addr::new(127, (n % 250) as u8 + 1, r, 0x61);
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
        op_timeout: Some(Duration::from_secs(60)),
        ..Config::default()
    };
    let context = |rank: u32| {
        Context::builder()
            .rank(rank)
            .size(2)
            .job_id(id)
            .job_key([0x3c; 32])
            .addrs(addrs.clone())
            .config(config.clone())
            .build()
            .unwrap()
    };
    (context(0), context(1))
}

fn pattern(len: usize, seed: u64) -> Vec<u8> {
    (0..len)
        .map(|i| ((i as u64).wrapping_mul(2_654_435_761) ^ seed.wrapping_mul(97)) as u8)
        .collect()
}

/// An epoll instance watching one endpoint's descriptor, as a program's event loop would.
struct Epoll(RawFd);

impl Epoll {
    fn watching(fd: RawFd) -> Epoll {
        // SAFETY: plain system calls on descriptors that stay open for the test.
        unsafe {
            let epoll = libc::epoll_create1(libc::EPOLL_CLOEXEC);
            assert!(epoll >= 0);
            let mut event = libc::epoll_event {
                events: libc::EPOLLIN as u32,
                u64: 1,
            };
            assert_eq!(
                libc::epoll_ctl(epoll, libc::EPOLL_CTL_ADD, fd, &mut event),
                0
            );
            Epoll(epoll)
        }
    }

    /// Whether the descriptor became readable within `timeout_ms`.
    fn wait(&self, timeout_ms: i32) -> bool {
        let mut events = [libc::epoll_event { events: 0, u64: 0 }; 4];
        loop {
            // SAFETY: `events` is a valid array of 4 epoll_event.
            let n = unsafe { libc::epoll_wait(self.0, events.as_mut_ptr(), 4, timeout_ms) };
            if n >= 0 {
                return n > 0;
            }
            assert_eq!(
                std::io::Error::last_os_error().raw_os_error(),
                Some(libc::EINTR)
            );
        }
    }
}

impl Drop for Epoll {
    fn drop(&mut self) {
        // SAFETY: our own descriptor, closed once.
        unsafe { libc::close(self.0) };
    }
}

/// Calls `ready` until it says yes; between calls arms `ep` and sleeps in epoll on its
/// descriptor. Returns how many sleeps it took; panics on a lost wake-up (10 s asleep).
fn sleep_until(
    ep: &mut Endpoint,
    epoll: &Epoll,
    what: &str,
    mut ready: impl FnMut(&mut Endpoint) -> Result<bool, Error>,
) -> u32 {
    let mut sleeps = 0;
    while !ready(ep).unwrap() {
        if ep.arm().unwrap() {
            assert!(epoll.wait(10_000), "{what}: a lost wake-up (10 s asleep)");
            sleeps += 1;
        }
        assert!(sleeps < 100_000, "{what}: woken 100000 times for nothing");
    }
    sleeps
}

fn receive_into<'a>(
    buf: &'a mut [u8],
    got: &'a mut usize,
) -> impl FnMut(&mut Endpoint) -> Result<bool, Error> + 'a {
    move |ep| match ep.try_recv(buf) {
        Ok((len, _)) => {
            *got = len;
            Ok(true)
        }
        Err(Error::WouldBlock) => Ok(false),
        Err(e) => Err(e),
    }
}

fn epoll_wakes_for_messages_and_a_posted_send(transport: TransportKind) {
    const ROUNDS: u64 = 300;
    let (c0, c1) = job(transport);
    thread::scope(|s| {
        s.spawn(move || {
            let mut ep = c0.endpoint(0).unwrap();
            let conn = ep.connect(Addr::new(1, 0)).unwrap();
            let mut buf = vec![0u8; 1 << 20];
            for round in 0..ROUNDS {
                match round {
                    0..=2 => thread::sleep(Duration::from_millis(50)),
                    _ if round % 2 == 0 => {}
                    _ => thread::yield_now(),
                }
                let msg = pattern(8 + (round % 100) as usize, round);
                ep.send(conn, &msg).unwrap();
                let (len, _) = ep.recv(&mut buf).unwrap();
                assert_eq!(buf[..len], msg[..], "{transport}: answer {round}");
            }
            thread::sleep(Duration::from_millis(50));
            let got = ep.recv_pooled().unwrap();
            assert!(
                got[..] == pattern(8 << 20, 99)[..],
                "{transport}: posted send"
            );
        });
        let mut ep = c1.endpoint(0).unwrap();
        let conn = ep.connect(Addr::new(0, 0)).unwrap();
        let epoll = Epoll::watching(ep.as_raw_fd());
        let mut buf = vec![0u8; 1 << 20];
        let mut slept = 0;
        for round in 0..ROUNDS {
            let mut len = 0;
            slept += sleep_until(
                &mut ep,
                &epoll,
                &format!("{transport} round {round}"),
                receive_into(&mut buf, &mut len),
            );
            assert_eq!(buf[..len], pattern(8 + (round % 100) as usize, round)[..]);
            ep.send(conn, &buf[..len]).unwrap();
        }
        let request = ep.post_send(conn, pattern(8 << 20, 99)).unwrap();
        slept += sleep_until(&mut ep, &epoll, "posted send", |ep| ep.test_send(&request));
        ep.wait_send(request).unwrap();
        // The first rounds came after a pause: the receiver was asleep then.
        assert!(slept >= 3, "{transport}: slept {slept} times");
    });
}

#[test]
fn epoll_on_the_descriptor_wakes_over_shm() {
    epoll_wakes_for_messages_and_a_posted_send(TransportKind::Shm);
}

#[test]
fn epoll_on_the_descriptor_wakes_over_tcp() {
    epoll_wakes_for_messages_and_a_posted_send(TransportKind::Tcp);
}

#[test]
fn epoll_on_the_descriptor_wakes_over_udp() {
    epoll_wakes_for_messages_and_a_posted_send(TransportKind::Udp);
}

#[test]
fn epoll_on_the_descriptor_wakes_over_mem() {
    epoll_wakes_for_messages_and_a_posted_send(TransportKind::Mem);
}

/// Endpoint 0 of rank 1 sleeps in epoll while endpoint 1 of the same context, on another
/// thread, busy-polls: its polls of the shared datagram engine take endpoint 0's datagrams
/// off the socket too, so endpoint 0's descriptor must be woken by them (its doorbell).
fn a_sleeper_wakes_while_another_endpoint_polls_the_engine(transport: TransportKind) {
    const ROUNDS: u64 = 100;
    let (c0, c1) = job(transport);
    thread::scope(|s| {
        s.spawn(move || {
            let mut ep = c0.endpoint(0).unwrap();
            let sleeper = ep.connect(Addr::new(1, 0)).unwrap();
            let busy = ep.connect(Addr::new(1, 1)).unwrap();
            let mut buf = vec![0u8; 256];
            for round in 0..ROUNDS {
                // The busy endpoint gets a message every round: it keeps polling.
                ep.send(busy, &pattern(16, round)).unwrap();
                if round % 2 == 1 {
                    thread::sleep(Duration::from_millis(2));
                }
                ep.send(sleeper, &pattern(24, round)).unwrap();
                // Two answers, one from each.
                for _ in 0..2 {
                    ep.recv(&mut buf).unwrap();
                }
            }
        });
        let c1 = &c1;
        s.spawn(move || {
            let mut ep = c1.endpoint(1).unwrap();
            let mut buf = vec![0u8; 256];
            let mut answered = 0;
            while answered < ROUNDS {
                match ep.try_recv(&mut buf) {
                    Ok((len, src)) => {
                        ep.reply(src, &buf[..len]).unwrap();
                        answered += 1;
                    }
                    Err(Error::WouldBlock) => {}
                    Err(e) => panic!("{e}"),
                }
            }
        });
        let mut ep = c1.endpoint(0).unwrap();
        // The busy endpoint must exist before rank 0 connects to it.
        thread::sleep(Duration::from_millis(20));
        let epoll = Epoll::watching(ep.as_raw_fd());
        let mut buf = vec![0u8; 256];
        for round in 0..ROUNDS {
            let mut len = 0;
            sleep_until(
                &mut ep,
                &epoll,
                &format!("{transport} round {round}"),
                receive_into(&mut buf, &mut len),
            );
            assert_eq!(buf[..len], pattern(24, round)[..]);
            ep.reply(Addr::new(0, 0), &buf[..len]).unwrap();
        }
    });
}

#[test]
fn a_sleeper_wakes_while_another_endpoint_polls_the_engine_over_udp() {
    a_sleeper_wakes_while_another_endpoint_polls_the_engine(TransportKind::Udp);
}

#[test]
fn a_sleeper_wakes_while_another_endpoint_polls_the_engine_over_mem() {
    a_sleeper_wakes_while_another_endpoint_polls_the_engine(TransportKind::Mem);
}

fn readable_now(fd: RawFd) -> bool {
    let mut p = [libc::pollfd {
        fd,
        events: libc::POLLIN,
        revents: 0,
    }];
    // SAFETY: poll on a live descriptor with a one-element array, without waiting.
    unsafe { libc::poll(p.as_mut_ptr(), 1, 0) == 1 }
}

/// The same, step by step: endpoint 0 of rank 1 armed, a datagram for it on the socket,
/// endpoint 1's one non-blocking call takes it off: endpoint 0's descriptor is readable
/// at once (its doorbell), not only when a protocol timer fires.
fn the_engine_rings_an_armed_endpoint_it_fed(transport: TransportKind) {
    let (c0, c1) = job(transport);
    let (go, went) = std::sync::mpsc::channel::<()>();
    let (sent, was_sent) = std::sync::mpsc::channel::<()>();
    let mut sleeper = c1.endpoint(0).unwrap();
    let mut busy = c1.endpoint(1).unwrap();
    // `move`: a failed assertion drops `go`, which ends rank 0's thread too.
    thread::scope(move |s| {
        s.spawn(move || {
            let mut ep = c0.endpoint(0).unwrap();
            let to_sleeper = ep.connect(Addr::new(1, 0)).unwrap();
            let to_busy = ep.connect(Addr::new(1, 1)).unwrap();
            ep.send(to_sleeper, b"hello").unwrap();
            ep.send(to_busy, b"hello").unwrap();
            // Keep answering the protocol (acknowledgements, probes) while waiting.
            let mut idle = [0u8; 16];
            let mut wait_for_go = |ep: &mut Endpoint| {
                use std::sync::mpsc::TryRecvError;
                loop {
                    match went.try_recv() {
                        Ok(()) => return,
                        // The test failed and dropped its end.
                        Err(TryRecvError::Disconnected) => panic!("the test ended early"),
                        Err(TryRecvError::Empty) => {
                            assert!(matches!(ep.try_recv(&mut idle), Err(Error::WouldBlock)));
                        }
                    }
                }
            };
            wait_for_go(&mut ep);
            ep.send(to_sleeper, b"wake").unwrap();
            sent.send(()).unwrap();
            // Stay open until the test has looked.
            wait_for_go(&mut ep);
        });
        let mut buf = [0u8; 16];
        for ep in [&mut sleeper, &mut busy] {
            while !matches!(ep.try_recv(&mut buf), Ok((5, _))) {}
        }
        // Armed, and quiet for 30 ms: the protocol's timers and answers (acknowledgements,
        // its keepalive every quarter of the idle timeout) have run, so that only a doorbell
        // can make the descriptor readable in the next few milliseconds.
        let epoll = Epoll::watching(sleeper.as_raw_fd());
        loop {
            while sleeper.try_recv(&mut buf).is_ok() {}
            let armed = sleeper.arm().unwrap();
            if armed && !epoll.wait(30) {
                break;
            }
        }
        go.send(()).unwrap();
        was_sent.recv().unwrap();
        // On the socket (loopback delivers within the send; give it time regardless).
        thread::sleep(Duration::from_millis(5));
        assert!(matches!(busy.try_recv(&mut buf), Err(Error::WouldBlock)));
        assert!(
            readable_now(sleeper.as_raw_fd()),
            "{transport}: the armed endpoint's descriptor is not readable though its \
             message was taken off the socket"
        );
        assert_eq!(sleeper.try_recv(&mut buf).unwrap().0, 4);
        assert_eq!(&buf[..4], b"wake");
        go.send(()).unwrap();
    });
}

#[test]
fn the_engine_rings_an_armed_endpoint_it_fed_over_udp() {
    the_engine_rings_an_armed_endpoint_it_fed(TransportKind::Udp);
}

#[test]
fn the_engine_rings_an_armed_endpoint_it_fed_over_mem() {
    the_engine_rings_an_armed_endpoint_it_fed(TransportKind::Mem);
}
