//! The xdp transport between network namespaces made by the test (root only; skipped with
//! a printed reason otherwise): 1 GiB verified by checksum with 1% loss in the switch,
//! striping over two interfaces and a link taken down mid-transfer, interfaces with
//! several receive queues, strangers' frames and datagrams refused (and counted) while
//! other traffic still reaches the kernel, no XDP program left on the interface after a
//! rank is killed with SIGKILL, and a user who is not root told what to do while udp keeps
//! working.
//!
//! The SIGKILL and non-root cases run a rank in a child process: this test binary again,
//! with `QUIVER_XDP_TEST_CHILD` saying what to do (the `child` test runs it; it does
//! nothing when the variable is unset).

use std::io::{BufRead, BufReader};
use std::net::{SocketAddr, UdpSocket};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use quiver::{Addr, Config, Context, Error, TransportKind};

mod xdp_net;
use xdp_net::{is_root, XdpNet};

const PORT: u16 = 7100;
const CHILD_ENV: &str = "QUIVER_XDP_TEST_CHILD";

fn config(transport: TransportKind) -> Config {
    Config {
        transports: vec![transport],
        connect_timeout: Duration::from_secs(10),
        op_timeout: Some(Duration::from_secs(120)),
        ..Config::default()
    }
}

fn context(net: &XdpNet, rank: u32, key: [u8; 32], config: &Config) -> Result<Context, Error> {
    let addrs: Vec<SocketAddr> = (0..2).map(|r| net.address(r, PORT)).collect();
    net.in_host(rank as usize, || {
        Context::builder()
            .rank(rank)
            .size(2)
            .job_id(0x7864_7000 | u64::from(std::process::id()))
            .job_key(key)
            .addrs(addrs)
            .config(config.clone())
            .build()
    })
}

fn skipped() -> bool {
    if !is_root() {
        eprintln!("skipped: the xdp transport and its network namespaces need root");
    }
    !is_root()
}

/// Message `index`'s bytes: differ along the message and from message to message.
fn fill(buf: &mut [u8], index: u64) {
    let mut x = index.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    for chunk in buf.chunks_mut(8) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        chunk.copy_from_slice(&x.to_le_bytes()[..chunk.len()]);
    }
}

/// 1 GiB in 1 MiB messages (a quarter of them shorter) from rank 0 to rank 1 with 1% of
/// the frames dropped each way in the switch, every message compared and the whole hashed
/// on both sides; the frames went over AF_XDP and the losses were repaired.
#[test]
fn one_gibibyte_verified_with_1pct_loss() {
    if skipped() {
        return;
    }
    const TOTAL: u64 = 1 << 30;
    const MESSAGE: usize = 1 << 20;
    let len = |index: u64| {
        if index % 4 == 3 {
            MESSAGE - (index as usize * 977) % 100_000
        } else {
            MESSAGE
        }
    };
    let count = TOTAL / MESSAGE as u64;
    let net = XdpNet::up(2).expect("namespaces");
    net.set_loss(10_000).expect("1% loss in the switch");
    let key = [7u8; 32];
    let config = config(TransportKind::Xdp);
    let sender = context(&net, 0, key, &config).expect("rank 0");
    let receiver = context(&net, 1, key, &config).expect("rank 1");
    let start = Instant::now();
    let ((sent, sender_stats), (received, bytes, stats)) = std::thread::scope(|s| {
        let send = s.spawn(|| {
            let mut ep = sender.endpoint(0).unwrap();
            let conn = ep.connect(Addr::new(1, 0)).unwrap();
            let mut hasher = blake3::Hasher::new();
            let mut buf = vec![0u8; MESSAGE];
            for index in 0..count {
                let n = len(index);
                fill(&mut buf[..n], index);
                hasher.update(&buf[..n]);
                ep.send(conn, &buf[..n]).unwrap();
            }
            let mut done = [0u8; 4];
            ep.recv(&mut done).unwrap();
            (hasher.finalize(), sender.stats().datagram)
        });
        let receive = s.spawn(|| {
            let mut ep = receiver.endpoint(0).unwrap();
            let back = ep.connect(Addr::new(0, 0)).unwrap();
            let mut hasher = blake3::Hasher::new();
            let (mut buf, mut expected) = (vec![0u8; MESSAGE], vec![0u8; MESSAGE]);
            let mut bytes = 0u64;
            for index in 0..count {
                let (n, from) = ep.recv(&mut buf).unwrap();
                assert_eq!(from, Addr::new(0, 0));
                assert_eq!(n, len(index), "length of message {index}");
                fill(&mut expected[..n], index);
                assert!(buf[..n] == expected[..n], "message {index} differs");
                hasher.update(&buf[..n]);
                bytes += n as u64;
            }
            ep.send(back, b"done").unwrap();
            (hasher.finalize(), bytes, receiver.link_stats())
        });
        (send.join().unwrap(), receive.join().unwrap())
    });
    let seconds = start.elapsed().as_secs_f64();
    assert_eq!(sent, received, "checksums differ");
    let xdp = stats[0].xdp.expect("an xdp link");
    eprintln!(
        "{bytes} bytes in {seconds:.1} s ({:.2} Gbit/s, not a benchmark); receiver's link: {xdp:?}; sender: {sender_stats:?}",
        bytes as f64 * 8.0 / seconds / 1e9
    );
    // Every byte came through the AF_XDP socket: about one frame per 1.4 KB.
    assert!(xdp.frames_received >= bytes / 1500, "{xdp:?}");
    assert!(!xdp.zero_copy, "veth has no zero-copy mode");
    let repaired = sender_stats.expect("datagram stats").retransmits;
    assert!(repaired > 0, "no retransmissions: was anything dropped?");
}

/// One connection striped over two interfaces per rank (`QUIVER_LINKS`: each link's
/// AF_XDP socket on the interface holding its address): 128 MiB verified, both links
/// carry a good part; with `cut`, rank 1's second interface goes down a third of the way
/// in and the transfer completes over the first.
fn striped(cut: bool) {
    const MESSAGE: usize = 1 << 20;
    const COUNT: u64 = 128;
    let net = XdpNet::with_links(2, 2).expect("namespaces");
    let links = net.links(PORT);
    let config = config(TransportKind::Xdp);
    let build = |rank: u32| {
        net.in_host(rank as usize, || {
            Context::builder()
                .rank(rank)
                .size(2)
                .job_id(0x5791_0000 | u64::from(std::process::id()))
                .job_key([4; 32])
                .links(links.clone())
                .config(config.clone())
                .build()
                .expect("context")
        })
    };
    let (sender, receiver) = (build(0), build(1));
    let (sent, received) = std::thread::scope(|s| {
        let send = s.spawn(|| {
            let mut ep = sender.endpoint(0).unwrap();
            let conn = ep.connect(Addr::new(1, 0)).unwrap();
            let mut buf = vec![0u8; MESSAGE];
            for index in 0..COUNT {
                if cut && index == COUNT / 3 {
                    net.set_link(1, 1, false).expect("link down");
                }
                fill(&mut buf, index);
                ep.send(conn, &buf).unwrap();
            }
            let mut done = [0u8; 4];
            ep.recv(&mut done).unwrap();
            sender.link_stats()
        });
        let receive = s.spawn(|| {
            let mut ep = receiver.endpoint(0).unwrap();
            let back = ep.connect(Addr::new(0, 0)).unwrap();
            let (mut buf, mut expected) = (vec![0u8; MESSAGE], vec![0u8; MESSAGE]);
            for index in 0..COUNT {
                let (n, _) = ep.recv(&mut buf).unwrap();
                fill(&mut expected, index);
                assert!(n == MESSAGE && buf == expected, "message {index} differs");
            }
            ep.send(back, b"done").unwrap();
            receiver.link_stats()
        });
        (send.join().unwrap(), receive.join().unwrap())
    });
    eprintln!("sender's links: {sent:#?}");
    assert_eq!(received.len(), 2);
    for (link, stats) in received.iter().enumerate() {
        let xdp = stats.xdp.expect("xdp links");
        // Each link carried at least a tenth; the cut one a part before the cut.
        let least = if cut && link == 1 {
            100
        } else {
            COUNT * MESSAGE as u64 / 10 / 1400
        };
        assert!(
            xdp.frames_received > least,
            "link {link} carried too little: {received:#?}"
        );
    }
    if cut {
        assert!(
            sent[1].times_down > 0,
            "the cut link never went down: {sent:#?}"
        );
    }
}

#[test]
fn striped_over_two_interfaces() {
    if !skipped() {
        striped(false);
    }
}

#[test]
fn a_link_taken_down_mid_transfer() {
    if !skipped() {
        striped(true);
    }
}

/// Small messages share frames over AF_XDP as over udp (decision 0079; the udp twin is
/// `tests/small_messages.rs`): 20,000 messages of 8 bytes streamed faster than the receiver
/// takes them leave in far fewer frames than messages once the window is full, arrive in
/// order and byte-identical, and the receiver takes most of them from its receive window
/// without a poll each; a lone message still leaves when its `send` returns.
#[test]
fn small_messages_share_frames() {
    if skipped() {
        return;
    }
    const MESSAGES: u64 = 20_000;
    let net = XdpNet::up(2).expect("namespaces");
    let key = [5u8; 32];
    let config = config(TransportKind::Xdp);
    let sender = context(&net, 0, key, &config).expect("rank 0");
    let receiver = context(&net, 1, key, &config).expect("rank 1");
    let sent = |context: &Context| context.stats().datagram.expect("stats").datagrams_sent;
    let (streamed, buffered) = std::thread::scope(|s| {
        let receive = s.spawn(|| {
            let mut ep = receiver.endpoint(0).unwrap();
            let back = ep.connect(Addr::new(0, 0)).unwrap();
            let (mut buf, mut expected) = ([0u8; 64], [0u8; 8]);
            let before = receiver.stats().datagram.unwrap().buffered_takes;
            for index in 0..MESSAGES {
                let (n, _) = ep.recv(&mut buf).unwrap();
                fill(&mut expected, index);
                assert_eq!(&buf[..n], &expected[..], "message {index}");
            }
            let buffered = receiver.stats().datagram.unwrap().buffered_takes - before;
            ep.send(back, b"streamed").unwrap();
            for _ in 0..10 {
                let (n, _) = ep.recv(&mut buf).unwrap();
                ep.send(back, &buf[..n]).unwrap();
            }
            buffered
        });
        let mut ep = sender.endpoint(0).unwrap();
        let conn = ep.connect(Addr::new(1, 0)).unwrap();
        let mut message = [0u8; 8];
        let before = sent(&sender);
        for index in 0..MESSAGES {
            fill(&mut message, index);
            ep.send(conn, &message).unwrap();
        }
        let mut buf = [0u8; 64];
        let (n, _) = ep.recv(&mut buf).unwrap();
        assert_eq!(&buf[..n], b"streamed");
        let streamed = sent(&sender) - before;
        for round in 0..10u32 {
            let before = sent(&sender);
            ep.send(conn, &round.to_le_bytes()).unwrap();
            assert!(sent(&sender) > before, "round {round}: nothing sent");
            let (n, _) = ep.recv(&mut buf).unwrap();
            assert_eq!(&buf[..n], round.to_le_bytes());
        }
        (streamed, receive.join().unwrap())
    });
    eprintln!("{streamed} frames for {MESSAGES} messages; {buffered} taken without a poll");
    // One frame per message while the window has room (at most the in-flight cap, 8,192
    // frames), then up to 91 messages per frame.
    assert!(streamed <= MESSAGES / 2, "{streamed} frames");
    assert!(buffered >= MESSAGES / 4, "{buffered} taken without a poll");
}

/// Interfaces with four receive queues, the switch steering every frame to queue 2:
/// quiver's socket has queue 0, so the frames go through the kernel to the link's kernel
/// socket, and every message still arrives.
#[test]
fn interfaces_with_several_queues_still_deliver() {
    if skipped() {
        return;
    }
    let net = XdpNet::with_queues(2, 1, 4).expect("namespaces");
    // Everything the switch forwards arrives on queue 2: through the kernel.
    net.steer_to_queue(2, 4).expect("steering");
    let config = config(TransportKind::Xdp);
    let key = [5u8; 32];
    let (a, b) = (
        context(&net, 0, key, &config).expect("rank 0"),
        context(&net, 1, key, &config).expect("rank 1"),
    );
    std::thread::scope(|s| {
        s.spawn(|| {
            let mut ep = a.endpoint(0).unwrap();
            let conn = ep.connect(Addr::new(1, 0)).unwrap();
            let mut buf = vec![0u8; 100_000];
            for index in 0..200u64 {
                let n = 1 + (index as usize * 7919) % buf.len();
                fill(&mut buf[..n], index);
                ep.send(conn, &buf[..n]).unwrap();
            }
            ep.recv(&mut [0u8; 4]).unwrap();
        });
        let mut ep = b.endpoint(0).unwrap();
        let back = ep.connect(Addr::new(0, 0)).unwrap();
        let (mut buf, mut expected) = (vec![0u8; 100_000], vec![0u8; 100_000]);
        for index in 0..200u64 {
            let (n, _) = ep.recv(&mut buf).unwrap();
            assert_eq!(n, 1 + (index as usize * 7919) % buf.len());
            fill(&mut expected[..n], index);
            assert!(buf[..n] == expected[..n], "message {index} differs");
        }
        ep.send(back, b"done").unwrap();
    });
    for (rank, ctx) in [(0, &a), (1, &b)] {
        let xdp = ctx.link_stats()[0].xdp.unwrap();
        eprintln!("rank {rank}: {xdp:?}");
        assert!(xdp.kernel_received > 0 && xdp.frames_sent > 0, "{xdp:?}");
    }
}

/// The fault injector wraps xdp links as it wraps udp sockets (`QUIVER_FAULTS`): drops,
/// duplicates and reordering on sending and on arrival are repaired, and counted.
#[test]
fn injected_faults_are_repaired() {
    if skipped() {
        return;
    }
    let net = XdpNet::up(2).expect("namespaces");
    let mut config = config(TransportKind::Xdp);
    config.faults = "seed=11,drop=2%,duplicate=1%,reorder=2%,receive.drop=2%,receive.reorder=1%"
        .parse()
        .expect("faults");
    let key = [6u8; 32];
    let (a, b) = (
        context(&net, 0, key, &config).expect("rank 0"),
        context(&net, 1, key, &config).expect("rank 1"),
    );
    std::thread::scope(|s| {
        s.spawn(|| {
            let mut ep = a.endpoint(0).unwrap();
            let conn = ep.connect(Addr::new(1, 0)).unwrap();
            let mut buf = vec![0u8; 300_000];
            for index in 0..60u64 {
                let n = (index as usize * 4999) % buf.len();
                fill(&mut buf[..n], index);
                ep.send(conn, &buf[..n]).unwrap();
            }
            ep.recv(&mut [0u8; 4]).unwrap();
        });
        let mut ep = b.endpoint(0).unwrap();
        let back = ep.connect(Addr::new(0, 0)).unwrap();
        let (mut buf, mut expected) = (vec![0u8; 300_000], vec![0u8; 300_000]);
        for index in 0..60u64 {
            let (n, _) = ep.recv(&mut buf).unwrap();
            assert_eq!(n, (index as usize * 4999) % buf.len());
            fill(&mut expected[..n], index);
            assert!(buf[..n] == expected[..n], "message {index} differs");
        }
        ep.send(back, b"done").unwrap();
    });
    let faults = a.stats().datagram.unwrap().faults;
    let arrived = b.stats().datagram.unwrap().faults;
    assert!(faults.dropped > 0 && faults.duplicated > 0, "{faults:?}");
    assert!(arrived.dropped > 0, "{arrived:?}");
}

/// A stranger in rank 1's namespace: its datagrams to rank 0's port (not quiver's frames)
/// and its malformed frames (a bad IPv4 checksum) reach rank 0's AF_XDP socket and are
/// dropped, the malformed ones counted; a context with the wrong key is refused and
/// counted; traffic to another port still reaches the kernel's socket; rank 0 keeps
/// working with the real rank 1.
#[test]
fn strangers_are_refused_and_other_traffic_passes() {
    if skipped() {
        return;
    }
    let net = XdpNet::up(2).expect("namespaces");
    let key = [9u8; 32];
    let config = config(TransportKind::Xdp);
    let rank0 = context(&net, 0, key, &config).expect("rank 0");
    let target = net.address(0, PORT);
    // A kernel socket in rank 0's namespace on another port: the program passes its traffic.
    let other = net.in_host(0, || UdpSocket::bind(net.address(0, PORT + 1)).unwrap());
    other
        .set_read_timeout(Some(Duration::from_secs(5)))
        .unwrap();
    let (mut ep0, stranger_sent) = {
        let mut ep0 = rank0.endpoint(0).unwrap();
        let sent = net.in_host(1, || {
            let socket = UdpSocket::bind(net.address(1, 0)).unwrap();
            for i in 0..50u8 {
                socket.send_to(&[i; 100], target).unwrap();
            }
            socket
                .send_to(b"to the kernel", net.address(0, PORT + 1))
                .unwrap();
            50
        });
        // Rank 0 polls: the stranger's datagrams arrive and are dropped.
        let mut buf = [0u8; 64];
        let deadline = Instant::now() + Duration::from_secs(5);
        while rank0.link_stats()[0].xdp.unwrap().frames_received < sent && Instant::now() < deadline
        {
            assert!(matches!(ep0.try_recv(&mut buf), Err(Error::WouldBlock)));
            std::thread::sleep(Duration::from_millis(1));
        }
        (ep0, sent)
    };
    let mut buf = [0u8; 32];
    let (n, _) = other
        .recv_from(&mut buf)
        .expect("the kernel's socket got nothing");
    assert_eq!(&buf[..n], b"to the kernel");
    let xdp = rank0.link_stats()[0].xdp.unwrap();
    assert!(xdp.frames_received >= stranger_sent, "{xdp:?}");
    // The engine counted them as not quiver's frames.
    let refused = rank0.stats().datagram.expect("datagram stats").refused;
    assert!(refused.undecodable >= stranger_sent, "{refused:?}");
    // Malformed frames, sent raw from rank 1's interface.
    let malformed = net.in_host(1, || raw::send_bad_checksum_frames(&net, PORT, 20));
    let deadline = Instant::now() + Duration::from_secs(5);
    while rank0.link_stats()[0].xdp.unwrap().frames_refused < malformed && Instant::now() < deadline
    {
        assert!(matches!(ep0.try_recv(&mut buf), Err(Error::WouldBlock)));
        std::thread::sleep(Duration::from_millis(1));
    }
    assert_eq!(rank0.link_stats()[0].xdp.unwrap().frames_refused, malformed);
    // The wrong key, from rank 1's namespace.
    let mut wrong = key;
    wrong[5] ^= 0x10;
    let mut short = config.clone();
    short.connect_timeout = Duration::from_secs(3);
    let stranger = context(&net, 1, wrong, &short).expect("the stranger's context");
    let done = std::sync::atomic::AtomicBool::new(false);
    std::thread::scope(|s| {
        s.spawn(|| {
            while !done.load(std::sync::atomic::Ordering::Acquire) {
                let _ = ep0.try_recv(&mut [0u8; 8]);
                std::thread::sleep(Duration::from_micros(200));
            }
        });
        let mut sep = stranger.endpoint(0).unwrap();
        let result = sep.connect(Addr::new(0, 0));
        let deadline = Instant::now() + Duration::from_secs(15);
        while rank0.stats().connections_refused == 0 && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(5));
        }
        done.store(true, std::sync::atomic::Ordering::Release);
        assert!(matches!(result, Err(Error::WrongKey { .. })), "{result:?}");
    });
    assert!(rank0.stats().connections_refused > 0, "refusal not counted");
    assert_eq!(rank0.stats().connections_accepted, 0);
    drop(stranger);
    // The real rank 1 still gets through.
    let rank1 = context(&net, 1, key, &config).expect("rank 1");
    std::thread::scope(|s| {
        s.spawn(|| {
            let mut ep = rank1.endpoint(0).unwrap();
            let conn = ep.connect(Addr::new(0, 0)).unwrap();
            ep.send(conn, b"member").unwrap();
        });
        let (n, from) = ep0.recv(&mut buf).unwrap();
        assert_eq!((&buf[..n], from), (&b"member"[..], Addr::new(1, 0)));
    });
}

/// A rank killed with SIGKILL leaves no XDP program on its interface (the BPF link goes
/// with the process).
#[test]
fn no_program_left_after_sigkill() {
    if skipped() {
        return;
    }
    let net = XdpNet::up(2).expect("namespaces");
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "child", "--nocapture", "--test-threads", "1"])
        .env(
            CHILD_ENV,
            format!("hold {} {}", net.namespace(0), net.address(0, PORT)),
        )
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("child rank");
    let ready = wait_for_line(&mut child, "ready");
    assert!(ready, "the child rank did not get ready");
    assert!(net.xdp_attached(0), "no xdp program while the rank runs");
    child.kill().expect("SIGKILL");
    child.wait().expect("reaping the child");
    let deadline = Instant::now() + Duration::from_secs(5);
    while net.xdp_attached(0) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(!net.xdp_attached(0), "an xdp program stayed after SIGKILL");
    // And the interface takes a new one: a rank started again there works.
    let config = config(TransportKind::Xdp);
    let again = context(&net, 0, [1; 32], &config).expect("a rank on the same interface again");
    assert!(net.xdp_attached(0));
    drop(again);
    assert!(
        !net.xdp_attached(0),
        "dropping the context left the program"
    );
}

/// Not root: building an xdp context fails with PermissionDenied naming the fix, and a udp
/// context in the same process works.
#[test]
fn not_root_gets_a_clear_error_and_udp_works() {
    if skipped() {
        return;
    }
    let net = XdpNet::up(2).expect("namespaces");
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "child", "--nocapture", "--test-threads", "1"])
        .env(
            CHILD_ENV,
            format!("nobody {} {}", net.namespace(0), net.address(0, PORT)),
        )
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("child rank");
    assert!(
        wait_for_line(&mut child, "udp works"),
        "see the child's output above"
    );
    assert!(child.wait().unwrap().success());
}

/// Reads the child's stdout until a line containing `wanted` (true) or its end (false);
/// prints what it reads.
fn wait_for_line(child: &mut std::process::Child, wanted: &str) -> bool {
    let stdout = child.stdout.take().expect("piped");
    let mut lines = BufReader::new(stdout).lines();
    let found = lines.by_ref().map_while(Result::ok).any(|line| {
        eprintln!("child: {line}");
        line.contains(wanted)
    });
    // Keep draining in the background so the child never blocks on a full pipe.
    std::thread::spawn(move || lines.for_each(drop));
    found
}

/// The child rank of the SIGKILL and non-root tests (does nothing unless run by them).
#[test]
fn child() {
    let Ok(what) = std::env::var(CHILD_ENV) else {
        return;
    };
    let parts: Vec<&str> = what.split(' ').collect();
    let [mode, namespace, address] = parts[..] else {
        panic!("{CHILD_ENV}={what:?}");
    };
    let address: SocketAddr = address.parse().unwrap();
    let path = format!("/var/run/netns/{namespace}");
    quiver_transport::netif::enter_network_namespace(std::path::Path::new(&path)).unwrap();
    let build = |transport| {
        // The peer's address: anything on the subnet (it is never contacted).
        let peer = SocketAddr::new([10, 88, 0, 2].into(), PORT);
        Context::builder()
            .rank(0)
            .size(2)
            .job_id(1)
            .job_key([3; 32])
            .addrs(vec![address, peer])
            .config(config(transport))
            .build()
    };
    match mode {
        "hold" => {
            let _ctx = build(TransportKind::Xdp).expect("xdp context");
            println!("ready");
            std::thread::sleep(Duration::from_secs(60));
        }
        "nobody" => {
            // SAFETY: setresuid changes this process's credentials (a child of the test);
            // all capabilities go with root.
            assert_eq!(unsafe { libc::setresuid(65534, 65534, 65534) }, 0);
            match build(TransportKind::Xdp) {
                Err(e @ Error::PermissionDenied { .. }) => {
                    let text = e.to_string();
                    println!("xdp refused: {text}");
                    assert!(text.contains("root") && text.contains("udp"), "{text}");
                }
                other => panic!("expected PermissionDenied, got {other:?}"),
            }
            let _udp = build(TransportKind::Udp).expect("udp context");
            println!("udp works");
        }
        other => panic!("unknown child mode {other:?}"),
    }
}

/// Raw frames from an AF_PACKET socket (the stranger's malformed ones).
mod raw {
    use std::process::Command;

    use super::XdpNet;

    /// Sends `count` IPv4/UDP frames to host 0's address and `port` from this thread's
    /// namespace's `x0`, each with a wrong IPv4 header checksum; returns `count`.
    pub(super) fn send_bad_checksum_frames(net: &XdpNet, port: u16, count: u64) -> u64 {
        let destination_mac = mac_of(net.namespace(0));
        let mut frame = Vec::new();
        frame.extend_from_slice(&destination_mac);
        frame.extend_from_slice(&[0x02, 0, 0, 0, 0, 0x99]);
        frame.extend_from_slice(&[0x08, 0x00]);
        // IPv4, 20 + 8 + 4 bytes, checksum 0xdead (wrong), 10.88.0.2 -> 10.88.0.1.
        frame.extend_from_slice(&[0x45, 0, 0, 32, 0, 0, 0x40, 0, 64, 17, 0xde, 0xad]);
        frame.extend_from_slice(&[10, 88, 0, 2, 10, 88, 0, 1]);
        frame.extend_from_slice(&4000u16.to_be_bytes());
        frame.extend_from_slice(&port.to_be_bytes());
        frame.extend_from_slice(&[0, 12, 0, 0, b'b', b'a', b'd', b'!']);
        // SAFETY: an AF_PACKET socket owned and closed here.
        let fd = unsafe { libc::socket(libc::AF_PACKET, libc::SOCK_RAW, 0) };
        assert!(fd >= 0, "AF_PACKET socket");
        // SAFETY: a NUL-terminated name.
        let ifindex = unsafe { libc::if_nametoindex(c"x0".as_ptr()) };
        // SAFETY: sockaddr_ll is plain data; all zeros is valid.
        let mut to: libc::sockaddr_ll = unsafe { std::mem::zeroed() };
        to.sll_family = libc::AF_PACKET as u16;
        to.sll_ifindex = ifindex as i32;
        to.sll_halen = 6;
        to.sll_addr[..6].copy_from_slice(&destination_mac);
        for _ in 0..count {
            // SAFETY: `frame` and `to` are valid for the lengths given.
            let sent = unsafe {
                libc::sendto(
                    fd,
                    frame.as_ptr().cast(),
                    frame.len(),
                    0,
                    (&to as *const libc::sockaddr_ll).cast(),
                    std::mem::size_of::<libc::sockaddr_ll>() as u32,
                )
            };
            assert_eq!(sent, frame.len() as isize);
        }
        // SAFETY: our descriptor, closed once.
        unsafe { libc::close(fd) };
        count
    }

    /// The hardware address of `x0` in `namespace`.
    fn mac_of(namespace: &str) -> [u8; 6] {
        let out = Command::new("ip")
            .args(["-n", namespace, "link", "show", "x0"])
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout);
        let hex = text
            .split_whitespace()
            .skip_while(|w| *w != "link/ether")
            .nth(1)
            .expect("link/ether");
        let mut mac = [0u8; 6];
        for (byte, part) in mac.iter_mut().zip(hex.split(':')) {
            *byte = u8::from_str_radix(part, 16).unwrap();
        }
        mac
    }
}
