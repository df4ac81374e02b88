//! Strangers on the host attack the listeners of a running two-rank job, and a job member's
//! connect still gets through quickly: over tcp, from a process of their own (this test
//! binary run again, `support::attacker`), connections that trickle one byte every 1.5 s,
//! a flood of connections that never speak, garbage and wrong-key handshakes; over shared
//! memory, a process of another user (the test runs it as `nobody`, so it needs root).
//! Every stranger is refused and counted, and the handshakes a listener holds stay within
//! their bound.

mod support;

use std::io::{BufRead, Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpListener, TcpStream};
use std::os::unix::process::CommandExt;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use quiver::{Addr, Config, Context, ContextStats, TransportKind};
use quiver_proto::handshake::{ConnectRequest, Initiator, JobKey};
use quiver_wire::handshake::{MAX_MESSAGE_LEN, NONCE_LEN, PREFIX_LEN};
use support::attacker::{self, Attacker};

/// The most handshakes a listener holds at once (documented on `ContextStats`).
const MAX_PENDING: u64 = 64;

/// How long a member's connect may take while strangers attack: generous (a member's
/// handshake takes milliseconds), and far below what a listener that answers one
/// handshake at a time needs with one trickling stranger in front.
const MEMBER_BOUND: Duration = Duration::from_secs(5);

static NEXT_JOB: AtomicU32 = AtomicU32::new(1);

fn free_port() -> u16 {
    TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// A job id and key of this test process.
fn job() -> (u64, [u8; 32]) {
    let n = NEXT_JOB.fetch_add(1, Ordering::Relaxed);
    let id = (u64::from(std::process::id()) << 32) | u64::from(n) | 0x4a00_0000;
    let mut key = [7u8; 32];
    key[..8].copy_from_slice(&id.to_le_bytes());
    (id, key)
}

/// The two contexts of a job over `transport` on loopback, at `addrs`.
fn pair(transport: TransportKind, id: u64, key: [u8; 32], addrs: &[SocketAddr]) -> Vec<Context> {
    let config = Config {
        transports: vec![transport],
        connect_timeout: Duration::from_secs(20),
        op_timeout: Some(Duration::from_secs(30)),
        ..Config::default()
    };
    (0..2)
        .map(|rank| {
            Context::builder()
                .rank(rank)
                .size(2)
                .job_id(id)
                .job_key(key)
                .addrs(addrs.to_vec())
                .config(config.clone())
                .build()
                .unwrap()
        })
        .collect()
}

/// A stranger's hello to endpoint 1 of rank 1 of job `id`, signed with nothing (a hello
/// carries no proof of the key).
fn hello(id: u64, key: [u8; 32]) -> (Initiator, Vec<u8>) {
    let request = ConnectRequest {
        job_id: id,
        src_rank: 0,
        src_port: 9,
        dst_port: 1,
    };
    let mut initiator = Initiator::new(JobKey::from_bytes(key), request, [3; NONCE_LEN]);
    let mut out = [0u8; MAX_MESSAGE_LEN];
    let n = initiator.poll_transmit(&mut out).unwrap().unwrap();
    (initiator, out[..n].to_vec())
}

/// Reads one handshake message (its length is in its prefix).
fn read_message(stream: &mut TcpStream) -> std::io::Result<Vec<u8>> {
    let mut message = vec![0u8; PREFIX_LEN];
    stream.read_exact(&mut message)?;
    let declared = usize::from(u16::from_be_bytes([message[6], message[7]]));
    if (PREFIX_LEN..=MAX_MESSAGE_LEN).contains(&declared) {
        message.resize(declared, 0);
        stream.read_exact(&mut message[PREFIX_LEN..])?;
    }
    Ok(message)
}

/// Strangers attacking `to` until `stop`, each kind in threads of its own.
struct Attack {
    stop: Arc<AtomicBool>,
    threads: Vec<thread::JoinHandle<()>>,
    /// Flood connections made so far.
    flooded: Arc<AtomicUsize>,
}

impl Attack {
    fn start(to: SocketAddr, id: u64) -> Attack {
        let stop = Arc::new(AtomicBool::new(false));
        let flooded = Arc::new(AtomicUsize::new(0));
        let mut threads = Vec::new();
        // Tricklers: a real hello, one byte every 1.5 s; when the listener drops one, it
        // connects again.
        for _ in 0..8 {
            let stop = stop.clone();
            threads.push(thread::spawn(move || {
                let (_, bytes) = hello(id, [0; 32]);
                while !stop.load(Ordering::Relaxed) {
                    let Ok(mut stream) = TcpStream::connect(to) else {
                        thread::sleep(Duration::from_millis(100));
                        continue;
                    };
                    for byte in bytes.iter().cycle() {
                        if stream.write_all(&[*byte]).is_err() || stop.load(Ordering::Relaxed) {
                            break;
                        }
                        sleep_unless(&stop, Duration::from_millis(1500));
                    }
                }
            }));
        }
        // The flood: connections that never speak, kept open until the end.
        let (stop_flood, count) = (stop.clone(), flooded.clone());
        threads.push(thread::spawn(move || {
            let mut held = Vec::new();
            while held.len() < 300 && !stop_flood.load(Ordering::Relaxed) {
                if let Ok(stream) = TcpStream::connect_timeout(&to, Duration::from_secs(1)) {
                    held.push(stream);
                    count.fetch_add(1, Ordering::Relaxed);
                }
            }
            while !stop_flood.load(Ordering::Relaxed) {
                thread::sleep(Duration::from_millis(20));
            }
        }));
        // Garbage, then wrong-key handshakes, over and over.
        let stop_noise = stop.clone();
        threads.push(thread::spawn(move || {
            let mut round = 0u32;
            while !stop_noise.load(Ordering::Relaxed) {
                round += 1;
                if let Ok(mut stream) = TcpStream::connect(to) {
                    let _ = stream.set_read_timeout(Some(Duration::from_secs(3)));
                    if round.is_multiple_of(2) {
                        let garbage: Vec<u8> = (0..64).map(|i| (i * 37 + round) as u8).collect();
                        let _ = stream.write_all(&garbage);
                        let _ = stream.read(&mut [0u8; 256]);
                    } else {
                        let (mut initiator, bytes) = hello(id, [0xee; 32]);
                        let _ = stream.write_all(&bytes);
                        if let Ok(challenge) = read_message(&mut stream) {
                            // The wrong key shows here: the challenge does not verify.
                            assert!(initiator.handle_challenge(&challenge, &[]).is_err());
                        }
                    }
                }
                sleep_unless(&stop_noise, Duration::from_millis(20));
            }
        }));
        Attack {
            stop,
            threads,
            flooded,
        }
    }

    fn stop(self) {
        self.stop.store(true, Ordering::Relaxed);
        for t in self.threads {
            t.join().unwrap();
        }
    }
}

fn sleep_unless(stop: &AtomicBool, duration: Duration) {
    let until = Instant::now() + duration;
    while !stop.load(Ordering::Relaxed) && Instant::now() < until {
        thread::sleep(Duration::from_millis(20));
    }
}

/// Polls `context`'s stats until `done` holds or 15 s passed.
fn stats_until(context: &Context, done: impl Fn(&ContextStats) -> bool) -> ContextStats {
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        let stats = context.stats();
        if done(&stats) || Instant::now() > deadline {
            return stats;
        }
        thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn tcp_strangers_do_not_hold_up_a_members_connect() {
    let (id, key) = job();
    let addrs: Vec<SocketAddr> = (0..2)
        .map(|_| SocketAddr::new(Ipv4Addr::LOCALHOST.into(), free_port()))
        .collect();
    let contexts = pair(TransportKind::Tcp, id, key, &addrs);
    let mut receiver = contexts[1].endpoint(1).unwrap();
    let mut sender = contexts[0].endpoint(0).unwrap();
    let mut strangers = Attacker::spawn("attacker", ATTACKER_ENV, &format!("{} {id}", addrs[1]));
    // The strangers are at it: the tricklers connected, the flood is under way.
    let ready = strangers.line().expect("the strangers' word");
    assert!(ready.starts_with("ready"), "the strangers said {ready:?}");
    thread::sleep(Duration::from_millis(200));

    let connecting = Instant::now();
    let connection = sender
        .connect(Addr::new(1, 1))
        .expect("a member connects while strangers attack");
    let took = connecting.elapsed();
    sender.send(connection, b"through").unwrap();
    let mut buffer = [0u8; 16];
    let (len, from) = receiver.recv(&mut buffer).unwrap();
    assert_eq!((&buffer[..len], from), (&b"through"[..], Addr::new(0, 0)));
    assert!(
        took < MEMBER_BOUND,
        "a member's connect took {took:?} while strangers attacked"
    );

    // Every flood connection and trickler is dropped within the deadline of its handshake,
    // and counted; garbage and wrong keys are refused.
    let stats = stats_until(&contexts[1], |s| s.handshakes_dropped >= 300);
    strangers.finish();
    eprintln!("rank 1 under attack ({ready}): {stats:?}; the member's connect took {took:?}");
    assert!(stats.handshakes_dropped >= 300, "{stats:?}");
    assert!(
        stats.connections_refused > stats.handshakes_dropped,
        "garbage and wrong keys are refused too: {stats:?}"
    );
    assert!(
        (1..=MAX_PENDING).contains(&stats.pending_handshakes_peak),
        "{stats:?}"
    );
    assert_eq!(stats.connections_accepted, 1, "{stats:?}");
}

/// The variable that turns the `attacker` test into the tcp strangers' process (its value:
/// `TARGET JOB`).
const ATTACKER_ENV: &str = "QUIVER_TEST_TCP_STRANGERS";

/// The strangers' process: attacks `TARGET` ([`ATTACKER_ENV`]) until its stdin closes,
/// saying "ready" once the flood holds 100 connections (or after 10 s). Does nothing
/// without the variable (a plain test run).
#[test]
fn attacker() {
    let Ok(arguments) = std::env::var(ATTACKER_ENV) else {
        return;
    };
    let mut words = arguments.split(' ');
    let to: SocketAddr = words.next().and_then(|w| w.parse().ok()).expect("TARGET");
    let id: u64 = words.next().and_then(|w| w.parse().ok()).expect("JOB");
    let attack = Attack::start(to, id);
    let started = Instant::now();
    while attack.flooded.load(Ordering::Relaxed) < 100
        && started.elapsed() < Duration::from_secs(10)
    {
        thread::sleep(Duration::from_millis(5));
    }
    let flooded = attack.flooded.load(Ordering::Relaxed);
    attacker::report(&format!("ready: {flooded} flood connections held"));
    // Until the parent is done with us.
    for line in std::io::stdin().lock().lines() {
        if line.is_err() {
            break;
        }
    }
    attack.stop();
}

/// The name of the environment variable that turns the test below into the stranger of
/// another user (its value: the abstract socket name of the listener to try).
const CHILD_VAR: &str = "QUIVER_TEST_OTHER_USER_SOCKET";

#[test]
fn shm_connects_from_another_user_are_refused_and_counted() {
    if quiver_transport::sys::getuid() != 0 {
        eprintln!("skipped: running a process as another user (nobody) needs root");
        return;
    }
    let (id, key) = job();
    let addrs: Vec<SocketAddr> = (0..2)
        .map(|_| SocketAddr::new(Ipv4Addr::LOCALHOST.into(), free_port()))
        .collect();
    let contexts = pair(TransportKind::Shm, id, key, &addrs);
    let _listening = contexts[1].endpoint(1).unwrap();
    let status = std::process::Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "other_user_child",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(CHILD_VAR, format!("quiver.{id:016x}.1"))
        .env("QUIVER_TEST_JOB_ID", id.to_string())
        .uid(65534)
        .gid(65534)
        .status()
        .expect("running the test binary as nobody");
    assert!(status.success(), "the other user's process: {status}");
    let stats = stats_until(&contexts[1], |s| s.connections_refused >= 1);
    assert_eq!(stats.connections_refused, 1, "{stats:?}");
    let why = stats.last_refusal.unwrap_or_default();
    assert!(
        why.contains("another user") && why.contains("uid 65534"),
        "{why}"
    );
    assert_eq!(stats.connections_accepted, 0);

    // A member still connects over shared memory.
    let mut sender = contexts[0].endpoint(0).unwrap();
    sender.connect(Addr::new(1, 1)).expect("a member connects");
    assert_eq!(contexts[1].stats().shm_connections_accepted, 1);
}

/// The other user's side of the test above (does nothing unless that test runs it): sends
/// a well-formed hello of the job and expects the listener to close the socket without an
/// answer (a listener that takes any user would answer with its challenge).
#[test]
fn other_user_child() {
    let Ok(name) = std::env::var(CHILD_VAR) else {
        return;
    };
    let id: u64 = std::env::var("QUIVER_TEST_JOB_ID")
        .unwrap()
        .parse()
        .unwrap();
    use quiver_transport::sys;
    let sock = sys::seqpacket_connect(name.as_bytes()).expect("the kernel completes the connect");
    sys::set_socket_timeouts(&sock, Duration::from_secs(5)).unwrap();
    let (_, bytes) = hello(id, [0; 32]);
    // The listener may close the socket before the hello is sent.
    let _ = sys::send_datagram(&sock, &bytes);
    let mut answer = [0u8; MAX_MESSAGE_LEN];
    match sys::recv_with_fds(&sock, &mut answer) {
        // The end of the connection (an empty read, or as `recv_with_fds` reports it).
        Ok((0, _)) => {}
        Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => {}
        Err(e) if e.raw_os_error() == Some(libc::ECONNRESET) => {}
        Ok((n, _)) => panic!("the listener answered another user's hello ({n} bytes)"),
        Err(e) => panic!("no refusal within 5 s: {e}"),
    }
}
