//! The io_uring socket over loopback: datagrams both ways through the multishot receive,
//! large ones through the zero-copy send, a burst past the receive buffers, and a refusal
//! reported as [`UringUnavailable`].

use std::net::{Ipv4Addr, SocketAddr};
use std::time::{Duration, Instant};

use super::*;

fn any() -> SocketAddr {
    SocketAddr::from((Ipv4Addr::LOCALHOST, 0))
}

/// Takes `count` datagrams from `socket` (waiting up to 5 s), as (payload, from).
fn take(socket: &mut UringUdpSocket, count: usize) -> Vec<(Vec<u8>, SocketAddr)> {
    let mut got = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(5);
    while got.len() < count && Instant::now() < deadline {
        match socket.recv_next() {
            Some(d) => {
                assert!(!d.truncated);
                got.push((d.buffer[d.payload.clone()].to_vec(), d.from));
                socket.release(d.buffer);
            }
            None => {
                let mut fds = [libc::pollfd {
                    fd: socket.wait_fd(),
                    events: libc::POLLIN,
                    revents: 0,
                }];
                let _ = crate::sys::poll(&mut fds, Some(Duration::from_millis(20)));
            }
        }
    }
    got
}

fn bind(options: UringOptions) -> Option<UringUdpSocket> {
    match UringUdpSocket::bind(any(), options) {
        Ok(s) => Some(s),
        Err(e) => {
            eprintln!("skipped: {e}");
            None
        }
    }
}

#[test]
fn datagrams_go_both_ways() {
    for sqpoll in [false, true] {
        let options = UringOptions {
            sqpoll,
            ..UringOptions::default()
        };
        let (Some(mut a), Some(mut b)) = (bind(options), bind(options)) else {
            return;
        };
        let sizes = [0usize, 1, 8, 1472, 9000, 16 << 10, 65_000];
        for (i, &size) in sizes.iter().enumerate() {
            let payload: Vec<u8> = (0..size).map(|k| (k * 7 + i) as u8).collect();
            a.send(b.local_address(), &[i as u8; 3], &payload);
        }
        a.flush();
        let got = take(&mut b, sizes.len());
        assert_eq!(got.len(), sizes.len(), "sqpoll {sqpoll}");
        for (i, (bytes, from)) in got.iter().enumerate() {
            assert_eq!(*from, a.local_address());
            assert_eq!(bytes[..3], [i as u8; 3]);
            assert_eq!(bytes.len(), 3 + sizes[i]);
        }
        b.send(a.local_address(), b"back", &[]);
        b.flush();
        assert_eq!(take(&mut a, 1)[0].0, b"back");
        let stats = a.stats();
        assert_eq!(stats.sends, sizes.len() as u64);
        assert_eq!(stats.sqpoll, sqpoll);
        if stats.registered_buffer {
            assert_eq!(stats.zero_copy_sends, 2);
        }
        assert_eq!(b.stats().received, sizes.len() as u64);
    }
}

#[test]
fn a_burst_past_the_buffers_arrives_whole() {
    let options = UringOptions {
        rx_buffers: 8,
        rx_datagram_bytes: 2048,
        ..UringOptions::default()
    };
    let (Some(mut a), Some(mut b)) = (bind(options), bind(options)) else {
        return;
    };
    // 500 datagrams against 8 buffers: the receive runs out, ends, and is armed again; the
    // datagrams wait in the socket meanwhile.
    for i in 0..500u32 {
        a.send(b.local_address(), &i.to_be_bytes(), &[0; 1000]);
    }
    a.flush();
    let got = take(&mut b, 500);
    let numbers: Vec<u32> = got
        .iter()
        .map(|(bytes, _)| u32::from_be_bytes(bytes[..4].try_into().unwrap()))
        .collect();
    assert_eq!(numbers, (0..500).collect::<Vec<_>>());
    assert!(b.stats().buffer_shortages > 0);
    assert!(b.stats().receive_arms > 1);
    // Equal datagrams to one peer left as GSO runs of up to 64: 8 sends, not 500.
    let stats = a.stats();
    assert_eq!(stats.sends, 500);
    assert_eq!(stats.gso_sends, 8, "{stats:?}");
}

#[test]
fn runs_end_at_a_shorter_datagram_or_another_peer() {
    let options = UringOptions::default();
    let (Some(mut a), Some(mut b), Some(mut c)) = (bind(options), bind(options), bind(options))
    else {
        return;
    };
    // 3 x 1000 and a shorter 10 to b (one run), 2 x 1000 to c (another), 5 to b (alone).
    let plan: [(usize, &str); 7] = [
        (1000, "b"),
        (1000, "b"),
        (1000, "b"),
        (10, "b"),
        (1000, "c"),
        (1000, "c"),
        (5, "b"),
    ];
    for (i, &(len, to)) in plan.iter().enumerate() {
        let to = if to == "b" {
            b.local_address()
        } else {
            c.local_address()
        };
        a.send(to, &[i as u8], &vec![7u8; len - 1]);
    }
    a.flush();
    let to_b: Vec<usize> = take(&mut b, 5).iter().map(|(d, _)| d.len()).collect();
    let to_c: Vec<usize> = take(&mut c, 2).iter().map(|(d, _)| d.len()).collect();
    assert_eq!(to_b, [1000, 1000, 1000, 10, 5]);
    assert_eq!(to_c, [1000, 1000]);
    assert_eq!(a.stats().gso_sends, 2);
}

#[test]
fn a_datagram_longer_than_a_buffer_is_marked_truncated() {
    let options = UringOptions {
        rx_buffers: 8,
        rx_datagram_bytes: 100,
        ..UringOptions::default()
    };
    let (Some(mut a), Some(mut b)) = (bind(options), bind(options)) else {
        return;
    };
    a.send(b.local_address(), &[1; 200], &[]);
    a.flush();
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        if let Some(d) = b.recv_next() {
            assert!(d.truncated);
            assert_eq!(d.payload.len(), 100);
            b.release(d.buffer);
            break;
        }
        assert!(Instant::now() < deadline);
    }
    assert_eq!(b.stats().truncated, 1);
}

#[test]
fn a_refused_io_uring_is_a_typed_error() {
    // A thread under a seccomp filter that refuses io_uring_setup (as Docker's profile
    // does) gets the refusal with its explanation; the filter stays on that thread.
    let result = std::thread::spawn(|| {
        crate::seccomp::deny_io_uring_on_this_thread().expect("seccomp filter");
        UringUdpSocket::bind(any(), UringOptions::default()).map(|_| ())
    })
    .join()
    .unwrap();
    let error = result.expect_err("io_uring refused");
    assert_eq!(error.step, "setup");
    assert_eq!(error.error.raw_os_error(), Some(libc::EPERM));
    assert!(error.to_string().contains("seccomp"), "{error}");
}

#[test]
fn a_sleeper_on_the_ring_wakes_when_a_datagram_arrives() {
    // Asleep in poll on the ring's descriptor (the engine's way to wait), the receiver is
    // woken by the datagram, not by the timeout.
    for sqpoll in [false, true] {
        let options = UringOptions {
            sqpoll,
            ..UringOptions::default()
        };
        let (Some(mut a), Some(mut b)) = (bind(options), bind(options)) else {
            return;
        };
        let to = b.local_address();
        let sender = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(100));
            a.send(to, b"wake", &[]);
            a.flush();
            std::thread::sleep(Duration::from_millis(200));
        });
        assert!(b.recv_next().is_none());
        let start = Instant::now();
        let mut fds = [libc::pollfd {
            fd: b.wait_fd(),
            events: libc::POLLIN,
            revents: 0,
        }];
        let ready = crate::sys::poll(&mut fds, Some(Duration::from_secs(10))).unwrap();
        let waited = start.elapsed();
        assert!(ready > 0, "sqpoll {sqpoll}: woken by the timeout");
        assert!(
            waited < Duration::from_secs(5),
            "sqpoll {sqpoll}: {waited:?}"
        );
        let got = take(&mut b, 1);
        assert_eq!(got[0].0, b"wake");
        sender.join().unwrap();
    }
}

#[test]
fn the_port_is_free_once_the_socket_is_dropped() {
    let Some(socket) = bind(UringOptions::default()) else {
        return;
    };
    let address = socket.local_address();
    drop(socket);
    // At once, not after the ring's asynchronous teardown.
    std::net::UdpSocket::bind(address).expect("the port is free again");
}
