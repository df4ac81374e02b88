//! The udp transport over a link whose MTU falls mid-transfer (root only; skipped with a
//! printed reason otherwise): two network namespaces joined by veth through a switch
//! namespace (`xdp_net`, removed even when this process is killed), 256 MiB verified
//! from rank 0 to rank 1, both hosts' interfaces lowered from MTU 1500 to 1400 a quarter
//! of the way in. The sender's GSO sends are refused for their size; the engine lowers the
//! connection's datagram size to what the path carries, keeps GSO on, and the transfer
//! completes in bounded time with every byte verified. The same over the io_uring engine
//! (`QUIVER_UDP_IO=uring`), whose refused sends surface as completions. Over xdp, where
//! nothing fragments and a frame too large for the interface is dropped, the MTU falls
//! once before the transfer (the links read it again and the connection cuts datagrams the
//! interfaces carry) and once a quarter of the way in: the frames in flight then are lost,
//! and resent re-cut to the new size (decision 0081).

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use quiver::{Addr, Config, Context, Error, TransportKind, UdpIoMode};

mod xdp_net;
use xdp_net::{is_root, XdpNet};

const PORT: u16 = 7200;

fn context(net: &XdpNet, rank: u32, config: &Config) -> Result<Context, Error> {
    let addrs: Vec<SocketAddr> = (0..2).map(|r| net.address(r, PORT)).collect();
    net.in_host(rank as usize, || {
        Context::builder()
            .rank(rank)
            .size(2)
            .job_id(0x6d74_7500 | u64::from(std::process::id()))
            .job_key([9u8; 32])
            .addrs(addrs)
            .config(config.clone())
            .build()
    })
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

/// `FragCreates` of host `i`'s namespace: IP fragments its kernel made.
fn fragments_made(net: &XdpNet, i: usize) -> u64 {
    net.in_host(i, || {
        // This thread's namespace (`/proc/net` is the process's main thread's).
        let snmp = std::fs::read_to_string("/proc/thread-self/net/snmp").expect("snmp");
        let mut ip = snmp.lines().filter(|line| line.starts_with("Ip:"));
        let (names, values) = (ip.next().expect("names"), ip.next().expect("values"));
        names
            .split_whitespace()
            .zip(values.split_whitespace())
            .find(|(name, _)| *name == "FragCreates")
            .and_then(|(_, value)| value.parse().ok())
            .expect("FragCreates")
    })
}

#[test]
fn an_mtu_that_falls_mid_transfer_lowers_the_datagram_size_and_the_transfer_completes() {
    mtu_falls_mid_transfer(TransportKind::Udp, UdpIoMode::Sockets, true);
}

#[test]
fn over_io_uring_an_mtu_that_falls_mid_transfer_lowers_the_datagram_size() {
    mtu_falls_mid_transfer(TransportKind::Udp, UdpIoMode::Uring, true);
}

#[test]
fn over_xdp_an_mtu_that_falls_before_the_transfer_is_followed_by_the_link() {
    mtu_falls_mid_transfer(TransportKind::Xdp, UdpIoMode::Sockets, false);
}

/// The frames in flight when the MTU falls are dropped by the interfaces (nothing
/// fragments them on this path): they are resent re-cut to the new size, and the transfer
/// completes verified. (Before, they were resent at their old size, dropped each time, and
/// the connection ended `Unreachable`.)
#[test]
fn over_xdp_an_mtu_that_falls_mid_transfer_recuts_the_frames_in_flight() {
    mtu_falls_mid_transfer(TransportKind::Xdp, UdpIoMode::Sockets, true);
}

/// 256 MiB verified over `transport` (udp driven as `udp_io`) while the MTU falls (module
/// docs): `mid_transfer`, a quarter of the way in; otherwise once the links are up and
/// before the connection's first frame.
fn mtu_falls_mid_transfer(transport: TransportKind, udp_io: UdpIoMode, mid_transfer: bool) {
    if !is_root() {
        eprintln!("skipped: network namespaces need root");
        return;
    }
    const MESSAGE: usize = 1 << 20;
    const COUNT: u64 = 256;
    const LOWER_AT: u64 = COUNT / 4;
    let net = XdpNet::up(2).expect("namespaces");
    let config = Config {
        transports: vec![transport],
        connect_timeout: Duration::from_secs(10),
        // A send or receive that makes no progress for this long fails the test instead
        // of hanging it.
        op_timeout: Some(Duration::from_secs(60)),
        udp_io,
        ..Config::default()
    };
    let sender = context(&net, 0, &config).expect("rank 0");
    let receiver = context(&net, 1, &config).expect("rank 1");
    // Before the transfer, the links read the new MTU again within 100 ms.
    let lower_first = !mid_transfer;
    if lower_first {
        for host in 0..2 {
            net.set_mtu(host, 0, 1400).expect("lowering the MTU");
        }
        std::thread::sleep(Duration::from_millis(250));
    }
    let start = Instant::now();
    let ((sent, link), (received, lowered_after)) = std::thread::scope(|s| {
        let send = s.spawn(|| {
            let mut ep = sender.endpoint(0).unwrap();
            let conn = ep.connect(Addr::new(1, 0)).unwrap();
            let mut hasher = blake3::Hasher::new();
            let mut buf = vec![0u8; MESSAGE];
            for index in 0..COUNT {
                fill(&mut buf, index);
                hasher.update(&buf);
                ep.send(conn, &buf).unwrap();
            }
            let mut done = [0u8; 4];
            ep.recv(&mut done).unwrap();
            // While the connection is open (its datagram size is a gauge of it).
            (hasher.finalize(), sender.link_stats()[0])
        });
        let receive = s.spawn(|| {
            let mut ep = receiver.endpoint(0).unwrap();
            let back = ep.connect(Addr::new(0, 0)).unwrap();
            let mut hasher = blake3::Hasher::new();
            let (mut buf, mut expected) = (vec![0u8; MESSAGE], vec![0u8; MESSAGE]);
            let mut lowered_after = lower_first.then_some(Duration::ZERO);
            for index in 0..COUNT {
                if index == LOWER_AT && !lower_first && transport == TransportKind::Xdp {
                    // While this rank keeps reading, so that a window is in flight: the
                    // receiver's interface first (it drops what is larger from then on),
                    // then the sender's (whose link reads it again within 100 ms).
                    s.spawn(|| {
                        for host in [1, 0] {
                            net.set_mtu(host, 0, 1400).expect("lowering the MTU");
                        }
                    });
                    lowered_after = Some(start.elapsed());
                } else if index == LOWER_AT && !lower_first {
                    for host in 0..2 {
                        net.set_mtu(host, 0, 1400).expect("lowering the MTU");
                    }
                    lowered_after = Some(start.elapsed());
                }
                let (n, from) = ep.recv(&mut buf).unwrap();
                assert_eq!((n, from), (MESSAGE, Addr::new(0, 0)), "message {index}");
                fill(&mut expected, index);
                assert!(buf == expected, "message {index} differs");
                hasher.update(&buf);
            }
            ep.send(back, b"done").unwrap();
            (hasher.finalize(), lowered_after.expect("lowered"))
        });
        (send.join().unwrap(), receive.join().unwrap())
    });
    let elapsed = start.elapsed();
    assert_eq!(sent, received, "checksums differ");
    let stats = sender.stats().datagram.expect("datagram stats");
    eprintln!(
        "256 MiB in {elapsed:.1?} (MTU lowered at {lowered_after:.1?}); sender's link: {link:?}; \
         retransmits {}; frames re-cut {}; fragments made {}",
        stats.retransmits,
        stats.frames_recut,
        fragments_made(&net, 0)
    );
    assert!(elapsed < Duration::from_secs(120), "took {elapsed:?}");
    assert!(
        link.max_datagram_bytes > 0 && link.max_datagram_bytes <= 1372,
        "the connection still cuts datagrams of {} bytes",
        link.max_datagram_bytes
    );
    if transport == TransportKind::Xdp {
        // The link read the interface's new MTU (frames skip the kernel's IP layer: no
        // refusal and no fragment tell it), and the connection cut its datagrams to it.
        let xdp = link.xdp.expect("xdp link stats");
        assert!(xdp.mtu_changes >= 1, "{xdp:?}");
        if mid_transfer {
            // Frames cut at 1472 bytes were in flight: lost at the interface, re-cut.
            assert!(stats.frames_recut >= 1, "{stats:?}");
        }
        return;
    }
    assert!(link.datagram_size_lowered >= 1, "{link:?}");
    assert!(link.mtu_refusals >= 1, "{link:?}");
    assert_eq!(link.gso_refusals, 0, "GSO was turned off: {link:?}");
    // Only the frames cut before the MTU fell went fragmented (at most a window's worth,
    // each in two fragments), not the 190 MiB after.
    let fragments = fragments_made(&net, 0);
    assert!(
        fragments < 20_000,
        "{fragments} fragments: datagrams still too large"
    );
}
