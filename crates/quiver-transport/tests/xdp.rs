//! The AF_XDP layer on a real veth pair between two network namespaces made by the test
//! (root only; skipped with a reason otherwise): the program loads and attaches, a frame
//! sent through one AF_XDP socket arrives at the other, a UDP datagram to another port
//! still reaches the kernel's socket (the program passes it), and the program is gone when
//! its owner drops it.

use std::net::{Ipv4Addr, UdpSocket};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use quiver_transport::netif::enter_network_namespace;
use quiver_transport::xdp::bpf::XdpProgram;
use quiver_transport::xdp::interface::InterfaceInfo;
use quiver_transport::xdp::socket::{Geometry, XskSocket};

fn ip(args: &[&str]) {
    let out = Command::new("ip").args(args).output().expect("ip");
    assert!(
        out.status.success(),
        "ip {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Two namespaces joined by veth `x0`, 10.91.0.1 and .2; deleted on drop, and by a
/// detached watcher if the test process is killed.
struct Pair([String; 2]);

impl Pair {
    fn up() -> Pair {
        let base = format!("qx{}", std::process::id());
        let pair = Pair([format!("{base}-a"), format!("{base}-b")]);
        for ns in &pair.0 {
            ip(&["netns", "add", ns]);
            ip(&["-n", ns, "link", "set", "lo", "up"]);
        }
        let script = format!(
            "while kill -0 {} 2>/dev/null; do sleep 0.2; done; ip netns del {} 2>/dev/null; ip netns del {} 2>/dev/null",
            std::process::id(), pair.0[0], pair.0[1]
        );
        Command::new("setsid")
            .args(["sh", "-c", &script])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .map(drop)
            .expect("watcher");
        ip(&[
            "link", "add", "x0", "netns", &pair.0[0], "type", "veth", "peer", "name", "x0",
            "netns", &pair.0[1],
        ]);
        for (ns, addr) in [(&pair.0[0], "10.91.0.1/24"), (&pair.0[1], "10.91.0.2/24")] {
            ip(&["-n", ns, "addr", "add", addr, "dev", "x0"]);
            ip(&["-n", ns, "link", "set", "x0", "up"]);
        }
        pair
    }
}

impl Drop for Pair {
    fn drop(&mut self) {
        for ns in &self.0 {
            let _ = Command::new("ip").args(["netns", "del", ns]).status();
        }
    }
}

fn in_ns<T: Send + 'static>(ns: &str, f: impl FnOnce() -> T + Send + 'static) -> T {
    let path = format!("/var/run/netns/{ns}");
    std::thread::spawn(move || {
        enter_network_namespace(Path::new(&path)).expect("setns");
        f()
    })
    .join()
    .expect("thread")
}

fn is_root() -> bool {
    // SAFETY: geteuid has no side effects.
    unsafe { libc::geteuid() == 0 }
}

fn xdp_shown(ns: &str) -> bool {
    let out = Command::new("ip")
        .args(["-n", ns, "link", "show", "x0"])
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout).contains("xdp")
}

#[test]
fn frames_cross_a_veth_pair_and_others_pass() {
    if !is_root() {
        eprintln!("skipped: AF_XDP and network namespaces need root");
        return;
    }
    let pair = Pair::up();
    let [a, b] = pair.0.clone();
    let port = 7300;
    let b_ip = Ipv4Addr::new(10, 91, 0, 2);
    // Side b: program and socket; a kernel socket on another port.
    let (b_info, mut b_sock, b_prog, other) = in_ns(&b, move || {
        let info = InterfaceInfo::open(None, b_ip).expect("interface");
        let sock = XskSocket::open(info.index, 0, Geometry::default()).expect("xsk");
        let prog = XdpProgram::attach(info.index, b_ip, port).expect("attach");
        prog.insert(0, std::os::fd::AsRawFd::as_raw_fd(&sock))
            .expect("insert");
        let other = UdpSocket::bind((b_ip, port + 1)).unwrap();
        other
            .set_read_timeout(Some(Duration::from_secs(5)))
            .unwrap();
        (info, sock, prog, other)
    });
    assert!(xdp_shown(&b), "ip link shows no xdp program");
    eprintln!(
        "b: {} mtu {} queues {} mode {:?} zero-copy {}",
        b_info.name,
        b_info.mtu,
        b_info.rx_queues,
        b_prog.mode(),
        b_sock.zero_copy()
    );
    let b_mac = b_info.mac;
    let (mut a_info, mut a_sock) = in_ns(&a, move || {
        let info = InterfaceInfo::open(Some("x0"), Ipv4Addr::new(10, 91, 0, 1)).expect("interface");
        let sock = XskSocket::open(info.index, 0, Geometry::default()).expect("xsk");
        // A datagram to the other port through the kernel: passes b's program.
        let plain = UdpSocket::bind((Ipv4Addr::new(10, 91, 0, 1), 0)).unwrap();
        plain.send_to(b"kernel", (b_ip, port + 1)).unwrap();
        (info, sock)
    });
    let mut buf = [0u8; 16];
    let (n, _) = other
        .recv_from(&mut buf)
        .expect("the kernel's socket got nothing");
    assert_eq!(&buf[..n], b"kernel");
    assert_eq!(a_info.neighbour(b_ip).unwrap(), Some(b_mac));
    // A hand-made frame from a's AF_XDP socket to b's flow.
    let a_mac = a_info.mac;
    let frame = udp_frame(
        a_mac,
        b_mac,
        Ipv4Addr::new(10, 91, 0, 1),
        b_ip,
        5555,
        port,
        b"hello xdp",
    );
    assert!(a_sock.send_with(|out| {
        out[..frame.len()].copy_from_slice(&frame);
        frame.len()
    }));
    a_sock.flush();
    let deadline = Instant::now() + Duration::from_secs(5);
    let got = loop {
        if let Some(bytes) = b_sock.recv_with(|f| f.to_vec()) {
            break bytes;
        }
        assert!(
            Instant::now() < deadline,
            "nothing arrived: {:?}",
            b_sock
                .statistics()
                .map(|s| (s.rx_dropped, s.rx_ring_full, s.rx_fill_ring_empty_descs))
        );
        std::thread::sleep(Duration::from_millis(1));
    };
    assert_eq!(got, frame);
    drop(b_prog);
    assert!(
        !xdp_shown(&b),
        "the program stayed after its owner dropped it"
    );
}

fn udp_frame(
    src_mac: [u8; 6],
    dst_mac: [u8; 6],
    src: Ipv4Addr,
    dst: Ipv4Addr,
    sport: u16,
    dport: u16,
    payload: &[u8],
) -> Vec<u8> {
    let mut f = Vec::new();
    f.extend_from_slice(&dst_mac);
    f.extend_from_slice(&src_mac);
    f.extend_from_slice(&[0x08, 0x00]);
    let total = (20 + 8 + payload.len()) as u16;
    f.extend_from_slice(&[
        0x45,
        0,
        (total >> 8) as u8,
        total as u8,
        0,
        0,
        0x40,
        0,
        64,
        17,
        0,
        0,
    ]);
    f.extend_from_slice(&src.octets());
    f.extend_from_slice(&dst.octets());
    let udp_len = (8 + payload.len()) as u16;
    f.extend_from_slice(&sport.to_be_bytes());
    f.extend_from_slice(&dport.to_be_bytes());
    f.extend_from_slice(&udp_len.to_be_bytes());
    f.extend_from_slice(&[0, 0]);
    f.extend_from_slice(payload);
    f
}
