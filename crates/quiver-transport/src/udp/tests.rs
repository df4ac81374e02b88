//! Tests of the batched UDP socket over loopback: batches, GSO and GRO round trips,
//! gathered sends, single-datagram paths, the scattering receive, options and truncation.

use std::io;
use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr};
use std::time::{Duration, Instant};

use super::*;

fn loopback_pair() -> (UdpSocket, UdpSocket) {
    let any = SocketAddr::from((Ipv4Addr::LOCALHOST, 0));
    (UdpSocket::bind(any).unwrap(), UdpSocket::bind(any).unwrap())
}

/// Receives until `want` datagrams arrived (or 5 s pass), returning them split.
fn receive_datagrams(
    socket: &mut UdpSocket,
    batch: &mut RecvBatch,
    want: usize,
) -> (Vec<Vec<u8>>, usize) {
    let mut datagrams = Vec::new();
    let mut messages = 0;
    let deadline = Instant::now() + Duration::from_secs(5);
    while datagrams.len() < want && Instant::now() < deadline {
        match socket.recv_batch(batch) {
            Ok(_) => {
                for message in batch.iter() {
                    assert!(!message.truncated);
                    messages += 1;
                    datagrams.extend(message.datagrams().map(<[u8]>::to_vec));
                }
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                socket
                    .wait_readable(Some(Duration::from_millis(100)))
                    .unwrap();
            }
            Err(e) => panic!("recv_batch: {e}"),
        }
    }
    (datagrams, messages)
}

#[test]
fn batch_of_64_round_trips() {
    let (mut a, mut b) = loopback_pair();
    let headers: Vec<[u8; 4]> = (0..64u32).map(|i| i.to_be_bytes()).collect();
    let payloads: Vec<Vec<u8>> = (0..64usize).map(|i| vec![i as u8; i * 10]).collect();
    let batch: Vec<OutDatagram<'_>> = (0..64)
        .map(|i| OutDatagram::new(b.local_address(), &headers[i], &payloads[i]))
        .collect();
    let mut sent = 0;
    while sent < batch.len() {
        sent += a.send_batch(&batch[sent..]).unwrap();
    }
    let mut receive = RecvBatch::new(16, 2048);
    let (datagrams, _) = receive_datagrams(&mut b, &mut receive, 64);
    assert_eq!(datagrams.len(), 64);
    for (i, datagram) in datagrams.iter().enumerate() {
        assert_eq!(&datagram[..4], &headers[i]);
        assert_eq!(&datagram[4..], &payloads[i][..]);
    }
    // Replies go back to the reported source.
    let source = receive.message(receive.len() - 1).source;
    assert_eq!(source, a.local_address());
    b.send_to(source, b"pong").unwrap();
    let (reply, _) = receive_datagrams(&mut a, &mut receive, 1);
    assert_eq!(reply, vec![b"pong".to_vec()]);
    assert_eq!(
        a.recv_batch(&mut receive).unwrap_err().kind(),
        io::ErrorKind::WouldBlock
    );
}

fn gso_round_trip(gro: bool) {
    let (mut a, mut b) = loopback_pair();
    assert!(a.gso_supported(), "UDP_SEGMENT not supported");
    b.set_gro(gro).unwrap();
    let total: usize = 64 * 1024;
    let segment: usize = 1400;
    let data: Vec<u8> = (0..total).map(|i| (i * 7 + i / 1400) as u8).collect();
    // 64 KiB exceeds one IP packet, so the buffer goes out as a batch of GSO sends.
    let chunk = max_gso_bytes(segment, false);
    let batch: Vec<OutDatagram<'_>> = data
        .chunks(chunk)
        .map(|part| OutDatagram {
            destination: b.local_address(),
            header: &[],
            payload: part,
            segment_size: Some(segment as u16),
        })
        .collect();
    assert_eq!(a.send_batch(&batch).unwrap(), batch.len());
    let want = total.div_ceil(segment);
    let mut receive = RecvBatch::new(64, MAX_COALESCED_BYTES);
    let (datagrams, messages) = receive_datagrams(&mut b, &mut receive, want);
    assert_eq!(datagrams.len(), want);
    assert!(datagrams[..want - 1].iter().all(|d| d.len() == segment));
    assert_eq!(datagrams.concat(), data);
    if gro {
        assert!(messages < want, "GRO on but nothing was coalesced");
    } else {
        assert_eq!(messages, want);
    }
}

/// Sends `count` datagrams of `segment` bytes (datagram i filled with byte i) from `a`
/// to `b` as one GSO send.
fn send_gso_run(a: &mut UdpSocket, b: &UdpSocket, count: usize, segment: usize) {
    let data: Vec<u8> = (0..count * segment).map(|i| (i / segment) as u8).collect();
    let run = [OutDatagram {
        destination: b.local_address(),
        header: &[],
        payload: &data,
        segment_size: Some(segment as u16),
    }];
    assert_eq!(a.send_batch(&run).unwrap(), 1);
}

/// Receives with `recv_one` until `want` datagrams arrived (or 5 s pass): the
/// datagrams, and how many of the receives came back coalesced.
fn receive_one_by_one(socket: &mut UdpSocket, want: usize) -> (Vec<Vec<u8>>, usize) {
    let mut batch = RecvBatch::new(1, MAX_COALESCED_BYTES);
    let (mut datagrams, mut coalesced) = (Vec::new(), 0);
    let deadline = Instant::now() + Duration::from_secs(5);
    while datagrams.len() < want && Instant::now() < deadline {
        if socket.recv_one(&mut batch).unwrap() == 0 {
            socket
                .wait_readable(Some(Duration::from_millis(100)))
                .unwrap();
            continue;
        }
        let message = batch.message(0);
        assert!(!message.truncated);
        let before = datagrams.len();
        datagrams.extend(message.datagrams().map(<[u8]>::to_vec));
        coalesced += usize::from(datagrams.len() - before > 1);
    }
    (datagrams, coalesced)
}

#[test]
fn gro_goes_off_only_with_nothing_coalesced_queued() {
    let (mut a, mut b) = loopback_pair();
    b.set_gro(true).unwrap();
    // Coalesced while GRO is on: GRO stays on, and the run is read split.
    send_gso_run(&mut a, &b, 8, 100);
    assert!(b.wait_readable(Some(Duration::from_secs(5))).unwrap());
    assert!(!b.gro_off_if_idle().unwrap());
    assert!(b.gro_enabled());
    let (datagrams, coalesced) = receive_one_by_one(&mut b, 8);
    assert_eq!(datagrams.len(), 8);
    assert!(
        coalesced > 0,
        "the run was not coalesced: the test proves nothing"
    );
    for (i, datagram) in datagrams.iter().enumerate() {
        assert_eq!(datagram, &vec![i as u8; 100]);
    }
    // With the queue empty GRO goes off, and a GSO run arrives datagram by datagram
    // (the kernel splits it), through the plain receive.
    assert!(b.gro_off_if_idle().unwrap());
    assert!(!b.gro_enabled());
    send_gso_run(&mut a, &b, 8, 100);
    let (datagrams, coalesced) = receive_one_by_one(&mut b, 8);
    assert_eq!(coalesced, 0);
    for (i, datagram) in datagrams.iter().enumerate() {
        assert_eq!(datagram, &vec![i as u8; 100]);
    }
    // A datagram longer than the buffer is reported cut, from either receive.
    let mut small = RecvBatch::new(1, 64);
    for gro in [false, true] {
        b.set_gro(gro).unwrap();
        a.send_to(b.local_address(), &[7; 100]).unwrap();
        b.wait_readable(Some(Duration::from_secs(5))).unwrap();
        assert_eq!(b.recv_one(&mut small).unwrap(), 1);
        let message = small.message(0);
        assert!(message.truncated, "gro {gro}");
        assert_eq!(message.data, &[7; 64][..]);
        assert_eq!(message.source, a.local_address());
    }
}

#[test]
fn a_split_receive_puts_the_body_in_its_buffer_and_the_rest_back_together() {
    let (mut a, mut b) = loopback_pair();
    let mut batch = RecvBatch::new(4, MAX_COALESCED_BYTES);
    let mut head = [0u8; 16];
    let mut body = vec![0u8; 1000];
    let pattern = |len: usize| (0..len).map(|i| (i * 7 + len) as u8).collect::<Vec<u8>>();
    for gro in [false, true] {
        b.set_gro(gro).unwrap();
        for len in [0usize, 5, 16, 17, 500, 1016, 1017, 5000, 65_000] {
            let sent = pattern(len);
            a.send_to(b.local_address(), &sent).unwrap();
            assert!(b.wait_readable(Some(Duration::from_secs(5))).unwrap());
            body.fill(0xEE);
            match b.recv_split(&mut batch, &mut head, &mut body).unwrap() {
                SplitRecv::Split { body_len, source } => {
                    assert!((17..=1016).contains(&len), "{len} bytes split");
                    assert_eq!(source, a.local_address());
                    assert_eq!(body_len, len - 16);
                    assert_eq!(&head[..], &sent[..16]);
                    assert_eq!(&body[..body_len], &sent[16..]);
                }
                SplitRecv::Whole => {
                    assert!(!(17..=1016).contains(&len), "{len} bytes not split");
                    assert_eq!(batch.len(), 1);
                    let message = batch.message(0);
                    assert!(!message.truncated);
                    assert_eq!(message.source, a.local_address());
                    assert_eq!(message.data, &sent[..], "{len} bytes, gro {gro}");
                }
                SplitRecv::Nothing => panic!("{len} bytes: nothing received"),
            }
        }
        assert_eq!(
            b.recv_split(&mut batch, &mut head, &mut body).unwrap(),
            SplitRecv::Nothing
        );
    }
    // A slot shorter than head and body: what fits, reported cut.
    let mut small = RecvBatch::new(1, 64);
    let sent = pattern(5000);
    a.send_to(b.local_address(), &sent).unwrap();
    assert!(b.wait_readable(Some(Duration::from_secs(5))).unwrap());
    assert_eq!(
        b.recv_split(&mut small, &mut head, &mut body).unwrap(),
        SplitRecv::Whole
    );
    let message = small.message(0);
    assert!(message.truncated);
    assert_eq!(message.data, &sent[..64]);
    // Several datagrams coalesced by GRO come back together, to be read split.
    b.set_gro(true).unwrap();
    send_gso_run(&mut a, &b, 8, 100);
    assert!(b.wait_readable(Some(Duration::from_secs(5))).unwrap());
    let mut datagrams = Vec::new();
    while datagrams.len() < 8 {
        match b.recv_split(&mut batch, &mut head, &mut body).unwrap() {
            SplitRecv::Whole => {
                datagrams.extend(batch.message(0).datagrams().map(<[u8]>::to_vec));
            }
            SplitRecv::Split { body_len, .. } => {
                assert_eq!(body_len, 84, "a lone datagram of the run");
                datagrams.push([&head[..], &body[..body_len]].concat());
            }
            SplitRecv::Nothing => {
                b.wait_readable(Some(Duration::from_secs(5))).unwrap();
            }
        }
    }
    for (i, datagram) in datagrams.iter().enumerate() {
        assert_eq!(datagram, &vec![i as u8; 100]);
    }
}

#[test]
fn gso_64k_with_gro() {
    gso_round_trip(true);
}

#[test]
fn gso_64k_without_gro() {
    gso_round_trip(false);
}

/// `count` (header, payload) pairs: header = index, payload `payload_bytes` long (the
/// last `last_short` bytes shorter), cut from one buffer as a send ring would hold them.
fn gathered_pairs(
    count: usize,
    payload_bytes: usize,
    last_short: usize,
) -> (Vec<[u8; 8]>, Vec<u8>, Vec<Vec<u8>>) {
    let headers: Vec<[u8; 8]> = (0..count as u64).map(u64::to_be_bytes).collect();
    let ring: Vec<u8> = (0..count * payload_bytes)
        .map(|i| (i * 31 + i / 251) as u8)
        .collect();
    let mut expected = Vec::new();
    for (i, header) in headers.iter().enumerate() {
        let len = if i + 1 == count {
            payload_bytes - last_short
        } else {
            payload_bytes
        };
        let start = i * payload_bytes;
        expected.push([&header[..], &ring[start..start + len]].concat());
    }
    (headers, ring, expected)
}

/// Sends every message of `gather`, resubmitting the rest after a partial send.
fn send_all_gathered(socket: &mut UdpSocket, gather: &Gather<'_>) {
    let mut sent = 0;
    while sent < gather.messages().len() {
        match socket.send_gather(gather, sent) {
            Ok(n) => sent += n,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                std::thread::sleep(Duration::from_millis(1))
            }
            Err(e) => panic!("send_gather: {e}"),
        }
    }
}

/// Sends `count` in-place pairs as runs of at most `per_run` segments (GSO when
/// `per_run > 1`) and checks that exactly the right datagrams arrive.
fn gathered_round_trip(count: usize, payload_bytes: usize, per_run: usize, gro: bool) {
    let (mut a, mut b) = loopback_pair();
    b.set_gro(gro).unwrap();
    let last_short = payload_bytes / 3;
    let (headers, ring, expected) = gathered_pairs(count, payload_bytes, last_short);
    let segment = 8 + payload_bytes;
    let mut buffer = GatherBuffer::default();
    let mut gather = buffer.gather();
    for (i, header) in headers.iter().enumerate() {
        let len = expected[i].len() - 8;
        let start = i * payload_bytes;
        if i % per_run == 0 {
            gather.start_message(b.local_address());
        } else {
            gather.set_segment_size(Some(segment as u16));
        }
        gather.push_part(header);
        gather.push_part(&ring[start..start + len]);
    }
    assert_eq!(gather.messages().len(), count.div_ceil(per_run));
    assert_eq!(gather.part_count(), 2 * count);
    let first: Vec<u8> = gather.parts(0).flatten().copied().collect();
    assert!(first == expected[..per_run.min(count)].concat());
    send_all_gathered(&mut a, &gather);
    let mut receive = RecvBatch::new(64, MAX_COALESCED_BYTES);
    let (datagrams, messages) = receive_datagrams(&mut b, &mut receive, count);
    assert_eq!(datagrams.len(), count);
    assert!(datagrams == expected, "datagrams differ");
    assert_eq!(datagrams[count - 1].len(), segment - last_short);
    if !gro {
        assert_eq!(messages, count);
    }
}

#[test]
fn gathered_gso_runs_arrive_as_their_pairs() {
    let (a, _) = loopback_pair();
    assert!(a.gso_supported(), "UDP_SEGMENT not supported");
    // MTU-1500-sized segments: 44 per run within one IP packet's 64 KiB.
    let per_run = max_gso_bytes(8 + 1464, false) / (8 + 1464);
    assert_eq!(per_run, 44);
    gathered_round_trip(300, 1464, per_run, false);
    gathered_round_trip(300, 1464, per_run, true);
    // MTU 9000 (7 per run) and tiny segments (the 64-segment limit: 128 iovecs).
    gathered_round_trip(50, 8952, max_gso_bytes(8 + 8952, false) / (8 + 8952), false);
    gathered_round_trip(200, 92, MAX_GSO_SEGMENTS, false);
}

#[test]
fn gathered_plain_datagrams_without_gso() {
    gathered_round_trip(150, 1464, 1, false);
    gathered_round_trip(3, 60_000, 1, false);
}

#[test]
fn gathered_segments_ignore_the_part_layout() {
    let (mut a, mut b) = loopback_pair();
    // Three segments of 1000 bytes from parts of 100, 2900 and 500 (the last 500 short).
    let data: Vec<u8> = (0..3500u32).map(|i| (i % 253) as u8).collect();
    let mut buffer = GatherBuffer::with_capacity(4, 1);
    let mut gather = buffer.gather();
    gather.start_message(b.local_address());
    for part in [&data[..100], &data[100..3000], &data[3000..]] {
        gather.push_part(part);
    }
    gather.set_segment_size(Some(1000));
    assert_eq!(a.send_gather(&gather, 0).unwrap(), 1);
    assert_eq!(a.send_gather(&gather, 1).unwrap(), 0);
    let mut receive = RecvBatch::new(8, MAX_COALESCED_BYTES);
    let (datagrams, _) = receive_datagrams(&mut b, &mut receive, 4);
    let lengths: Vec<usize> = datagrams.iter().map(Vec::len).collect();
    assert_eq!(lengths, vec![1000, 1000, 1000, 500]);
    assert_eq!(datagrams.concat(), data);
}

#[test]
fn gathers_reuse_their_buffer_and_the_kernel_caps_parts() {
    let (mut a, mut b) = loopback_pair();
    let bytes = [7u8; 4];
    let mut buffer = GatherBuffer::default();
    // More than IOV_MAX parts: the kernel refuses the message, nothing is sent.
    let mut gather = buffer.gather();
    gather.start_message(b.local_address());
    for _ in 0..=MAX_GATHER_PARTS {
        gather.push_part(&bytes);
    }
    assert!(a.send_gather(&gather, 0).is_err());
    // The buffer starts empty again; IOV_MAX parts go out as one datagram.
    let mut gather = buffer.gather();
    assert!(gather.messages().is_empty() && gather.part_count() == 0);
    gather.start_message(b.local_address());
    for _ in 0..MAX_GATHER_PARTS {
        gather.push_part(&bytes);
    }
    assert_eq!(a.send_gather(&gather, 0).unwrap(), 1);
    let mut receive = RecvBatch::new(4, 8192);
    let (datagrams, _) = receive_datagrams(&mut b, &mut receive, 1);
    assert_eq!(datagrams, vec![vec![7u8; 4 * MAX_GATHER_PARTS]]);
    std::thread::sleep(Duration::from_millis(20));
    assert_eq!(
        b.recv_batch(&mut receive).unwrap_err().kind(),
        io::ErrorKind::WouldBlock
    );
}

#[test]
fn ipv6_socket_sends_to_ipv6() {
    let any = SocketAddr::from((Ipv6Addr::LOCALHOST, 0));
    let (Ok(mut a), Ok(mut b)) = (UdpSocket::bind(any), UdpSocket::bind(any)) else {
        return; // no IPv6 loopback on this machine
    };
    a.send_to(b.local_address(), b"six").unwrap();
    let mut receive = RecvBatch::new(4, 64);
    let (datagrams, _) = receive_datagrams(&mut b, &mut receive, 1);
    assert_eq!(datagrams, vec![b"six".to_vec()]);
    assert_eq!(receive.message(0).source, a.local_address());
}

#[test]
fn options_apply() {
    let (a, _) = loopback_pair();
    let (send, receive) = a.set_buffer_sizes(4 << 20, 4 << 20).unwrap();
    // SAFETY: geteuid cannot fail.
    if unsafe { libc::geteuid() } == 0 {
        // Root forces the size past net.core.*mem_max; the kernel reports double.
        assert!(send >= 4 << 20 && receive >= 4 << 20, "{send} {receive}");
    } else {
        assert!(send > 0 && receive > 0);
    }
    a.set_busy_poll(Duration::from_micros(50)).unwrap();
}

#[test]
fn truncation_is_reported() {
    let (mut a, mut b) = loopback_pair();
    a.send_to(b.local_address(), &[1u8; 100]).unwrap();
    let mut receive = RecvBatch::new(1, 10);
    b.wait_readable(Some(Duration::from_secs(5))).unwrap();
    assert_eq!(b.recv_batch(&mut receive).unwrap(), 1);
    assert!(receive.message(0).truncated);
    assert_eq!(receive.message(0).data.len(), 10);
}

#[test]
fn connected_socket_sends_without_an_address_and_gets_replies_elsewhere() {
    let (mut link, mut peer) = loopback_pair();
    let mut sender = UdpSocket::bind(SocketAddr::from((Ipv4Addr::LOCALHOST, 0))).unwrap();
    sender.connect(peer.local_address()).unwrap();
    assert_eq!(sender.connected_peer(), Some(peer.local_address()));
    // To the connected peer (no address on the wire call) and, addressed, elsewhere.
    sender
        .send_batch(&[
            OutDatagram::new(peer.local_address(), b"hdr", b"one"),
            OutDatagram::new(peer.local_address(), b"", b"two"),
        ])
        .unwrap();
    let mut batch = RecvBatch::new(4, 2048);
    let (got, _) = receive_datagrams(&mut peer, &mut batch, 2);
    assert_eq!(got, vec![b"hdrone".to_vec(), b"two".to_vec()]);
    assert_eq!(batch.message(0).source, sender.local_address());
    // The peer answers the sending port: only the connected socket sees it.
    peer.send_to(sender.local_address(), b"reset").unwrap();
    let mut buffer = [0u8; 16];
    let deadline = Instant::now() + Duration::from_secs(5);
    let (n, from) = loop {
        match sender.recv_from(&mut buffer) {
            Ok(got) => break got,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock && Instant::now() < deadline => {
                sender
                    .wait_readable(Some(Duration::from_millis(100)))
                    .unwrap();
            }
            Err(e) => panic!("recv_from: {e}"),
        }
    };
    assert_eq!((&buffer[..n], from), (&b"reset"[..], peer.local_address()));
    // A stranger's datagram never reaches a connected socket.
    link.send_to(sender.local_address(), b"stranger").unwrap();
    std::thread::sleep(Duration::from_millis(20));
    let err = sender.recv_from(&mut buffer).unwrap_err();
    assert_eq!(err.kind(), io::ErrorKind::WouldBlock);
}

#[test]
fn single_datagram_send_and_receive() {
    let (mut a, mut b) = loopback_pair();
    let mut batch = RecvBatch::new(4, MAX_COALESCED_BYTES);
    // Nothing queued: 0, not an error.
    assert_eq!(b.recv_one(&mut batch).unwrap(), 0);
    assert!(batch.is_empty());
    // Addressed (sendto), then connected (send): both arrive whole, one per receive,
    // with their source.
    assert_eq!(a.send_one(b.local_address(), b"first").unwrap(), 5);
    let mut connected = UdpSocket::bind(SocketAddr::from((Ipv4Addr::LOCALHOST, 0))).unwrap();
    connected.connect(b.local_address()).unwrap();
    assert_eq!(connected.send_one(b.local_address(), b"second").unwrap(), 6);
    b.wait_readable(Some(Duration::from_secs(5))).unwrap();
    std::thread::sleep(Duration::from_millis(20));
    assert_eq!(b.recv_one(&mut batch).unwrap(), 1);
    assert_eq!(batch.len(), 1);
    let first = batch.message(0);
    assert_eq!(
        (first.data, first.source),
        (&b"first"[..], a.local_address())
    );
    assert_eq!(first.datagrams().count(), 1);
    assert_eq!(b.recv_one(&mut batch).unwrap(), 1);
    let second = batch.message(0);
    assert_eq!(
        (second.data, second.source, second.truncated),
        (&b"second"[..], connected.local_address(), false)
    );
    assert_eq!(b.recv_one(&mut batch).unwrap(), 0);
    // Cut to a short buffer: reported like a batch receive does.
    let mut short = RecvBatch::new(1, 4);
    a.send_one(b.local_address(), &[9u8; 100]).unwrap();
    b.wait_readable(Some(Duration::from_secs(5))).unwrap();
    assert_eq!(b.recv_one(&mut short).unwrap(), 1);
    assert!(short.message(0).truncated);
    assert_eq!(short.message(0).data, &[9u8; 4]);
}

#[test]
fn single_receive_splits_a_coalesced_message() {
    let (mut a, mut b) = loopback_pair();
    b.set_gro(true).unwrap();
    // Four 100-byte segments and a 50-byte one in one GSO send: with GRO on, loopback
    // hands them over in one receive, with the segment size.
    let data: Vec<u8> = (0..450u32).map(|i| (i / 100) as u8 + 1).collect();
    let mut gso = OutDatagram::new(b.local_address(), &[], &data);
    gso.segment_size = Some(100);
    assert_eq!(a.send_batch(&[gso]).unwrap(), 1);
    b.wait_readable(Some(Duration::from_secs(5))).unwrap();
    let mut batch = RecvBatch::new(2, MAX_COALESCED_BYTES);
    let mut datagrams = Vec::new();
    let mut receives = 0;
    let deadline = Instant::now() + Duration::from_secs(5);
    while datagrams.len() < 5 && Instant::now() < deadline {
        if b.recv_one(&mut batch).unwrap() == 1 {
            receives += 1;
            datagrams.extend(batch.message(0).datagrams().map(<[u8]>::to_vec));
        }
    }
    let lengths: Vec<usize> = datagrams.iter().map(Vec::len).collect();
    assert_eq!(lengths, [100, 100, 100, 100, 50]);
    assert!(receives < 5, "GRO on but nothing was coalesced");
    assert_eq!(datagrams.concat(), data);
}

#[test]
fn single_send_from_an_ipv6_socket_to_ipv4() {
    let any6 = SocketAddr::from((Ipv6Addr::UNSPECIFIED, 0));
    let Ok(mut six) = UdpSocket::bind(any6) else {
        return; // no IPv6 on this machine
    };
    let (_, mut four) = loopback_pair();
    six.send_one(four.local_address(), b"mapped").unwrap();
    four.wait_readable(Some(Duration::from_secs(5))).unwrap();
    let mut batch = RecvBatch::new(1, 64);
    assert_eq!(four.recv_one(&mut batch).unwrap(), 1);
    assert_eq!(batch.message(0).data, b"mapped");
}

#[test]
fn receiving_up_to_one_leaves_the_rest_queued() {
    let (mut a, mut b) = loopback_pair();
    for i in 0..3u8 {
        a.send_to(b.local_address(), &[i]).unwrap();
    }
    b.wait_readable(Some(Duration::from_secs(5))).unwrap();
    let mut batch = RecvBatch::new(8, 64);
    std::thread::sleep(Duration::from_millis(20));
    assert_eq!(b.recv_batch_up_to(&mut batch, 1).unwrap(), 1);
    assert_eq!(batch.message(0).data, &[0]);
    // Asking for more than the batch holds is capped; the rest comes at once.
    assert_eq!(b.recv_batch_up_to(&mut batch, 100).unwrap(), 2);
    assert_eq!(
        (batch.message(0).data, batch.message(1).data),
        (&[1u8][..], &[2u8][..])
    );
    let err = b.recv_batch_up_to(&mut batch, 1).unwrap_err();
    assert_eq!(err.kind(), io::ErrorKind::WouldBlock);
}

/// A GSO send the kernel refuses turns GSO off on that socket, and the socket carries on
/// with plain datagrams. `SO_NO_CHECK` (no UDP checksum) makes the kernel refuse every GSO
/// send with `EINVAL`, as a route through IPsec or a device that cannot checksum makes it
/// refuse them with `EIO`.
#[test]
fn a_refused_gso_send_turns_gso_off_and_the_socket_carries_on() {
    use std::os::fd::AsRawFd;
    let (mut a, mut b) = loopback_pair();
    assert!(a.gso_supported(), "UDP_SEGMENT not supported");
    let one: libc::c_int = 1;
    // SAFETY: setsockopt on a live socket with a pointer to an int and its size.
    let set = unsafe {
        libc::setsockopt(
            a.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_NO_CHECK,
            &one as *const libc::c_int as *const libc::c_void,
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    assert_eq!(set, 0, "SO_NO_CHECK: {}", io::Error::last_os_error());
    let data = vec![7u8; 3000];
    let run = [OutDatagram {
        destination: b.local_address(),
        header: &[],
        payload: &data,
        segment_size: Some(1000),
    }];
    let refused = a.send_batch(&run).unwrap_err();
    assert!(
        matches!(refused.raw_os_error(), Some(libc::EINVAL) | Some(libc::EIO)),
        "{refused}"
    );
    assert!(!a.gso_supported());
    assert_eq!(a.gso_refusals(), 1);
    // A plain send still goes, and an error that is not about GSO counts nothing.
    let plain = [OutDatagram::new(b.local_address(), &[], &data[..1000])];
    assert_eq!(a.send_batch(&plain).unwrap(), 1);
    let mut receive = RecvBatch::new(4, 2048);
    let (datagrams, _) = receive_datagrams(&mut b, &mut receive, 1);
    assert_eq!(datagrams, vec![vec![7u8; 1000]]);
    assert_eq!(a.gso_refusals(), 1);
}

/// Runs `f` on a thread of its own in a new network namespace whose loopback is up with
/// MTU `mtu` (`set_mtu` changes it later); None when namespaces cannot be made (not root).
fn in_private_loopback<T: Send>(mtu: u32, f: impl FnOnce(&dyn Fn(u32)) -> T + Send) -> Option<T> {
    std::thread::scope(|s| {
        s.spawn(move || {
            // SAFETY: unshare only changes this thread's namespaces; the thread ends with
            // the test and nothing else runs on it.
            if unsafe { libc::unshare(libc::CLONE_NEWNET) } != 0 {
                eprintln!("skipped: a network namespace needs root");
                return None;
            }
            // Children inherit this thread's namespace.
            let set_mtu = |mtu: u32| {
                let status = std::process::Command::new("ip")
                    .args(["link", "set", "lo", "up", "mtu", &mtu.to_string()])
                    .status()
                    .expect("running ip");
                assert!(status.success(), "ip link set lo mtu {mtu}");
            };
            set_mtu(mtu);
            Some(f(&set_mtu))
        })
        .join()
        .expect("the namespace's thread")
    })
}

/// A link whose MTU falls under the datagrams being sent: the GSO send is refused
/// (`EMSGSIZE`, `EINVAL` on older kernels: the kernel does not fragment segments), which the socket recognises by the
/// path's MTU. It lowers its GSO segment limit, notes the room for its caller and keeps GSO
/// on; segments that fit go through as one GSO send, plain datagrams too large for the path
/// still go (fragmented), on a connected socket as on an unconnected one.
#[test]
fn a_gso_send_over_a_smaller_mtu_lowers_the_segment_limit_and_keeps_gso() {
    let ran = in_private_loopback(1500, |set_mtu| {
        for connect in [false, true] {
            let (mut a, mut b) = loopback_pair();
            let to = b.local_address();
            if connect {
                a.connect(to).unwrap();
            }
            assert!(a.gso_supported(), "UDP_SEGMENT not supported");
            assert_eq!(a.path_room(to).unwrap(), 1472);
            let data = vec![5u8; 4 * 1472];
            let run = |segment: usize| {
                [OutDatagram {
                    destination: to,
                    header: &[],
                    payload: &data[..4 * segment],
                    segment_size: Some(segment as u16),
                }]
            };
            assert_eq!(a.send_batch(&run(1472)).unwrap(), 1);
            let mut receive = RecvBatch::new(8, MAX_COALESCED_BYTES);
            assert_eq!(receive_datagrams(&mut b, &mut receive, 4).0.len(), 4);
            set_mtu(1400);
            let refused = a.send_batch(&run(1472)).unwrap_err();
            assert!(
                matches!(
                    refused.raw_os_error(),
                    Some(libc::EMSGSIZE) | Some(libc::EINVAL)
                ),
                "{refused}"
            );
            assert!(a.gso_supported(), "a size refusal must not turn GSO off");
            assert_eq!((a.gso_refusals(), a.size_refusals()), (0, 1));
            assert_eq!(a.gso_max_segment(), 1372);
            assert_eq!(a.take_path_room(), Some(1372));
            assert_eq!(a.take_path_room(), None, "taken once");
            // Segments that fit leave as one GSO send; a plain datagram of the old size
            // still goes, fragmented.
            assert_eq!(a.send_batch(&run(1372)).unwrap(), 1);
            let plain = [OutDatagram::new(to, &[], &data[..1472])];
            assert_eq!(a.send_batch(&plain).unwrap(), 1);
            let (datagrams, _) = receive_datagrams(&mut b, &mut receive, 5);
            let sizes: Vec<usize> = datagrams.iter().map(Vec::len).collect();
            assert_eq!(
                sizes,
                vec![1372, 1372, 1372, 1372, 1472],
                "connect {connect}"
            );
            set_mtu(1500);
        }
    });
    if ran.is_none() {
        eprintln!("skipped: needs root for a network namespace");
    }
}

/// One batch through receives of every kind, from two senders with datagrams of other
/// lengths each time: each receive sees whole datagrams and their own sources. (`prepare`
/// resets only the headers a receive wrote; one it missed would keep a shortened address
/// or control length, or a stale one.)
#[test]
fn a_batch_keeps_its_headers_whole_across_receives_of_every_kind() {
    let (mut a, mut b) = loopback_pair();
    let any = SocketAddr::from((Ipv4Addr::LOCALHOST, 0));
    let mut c = UdpSocket::bind(any).unwrap();
    let mut batch = RecvBatch::new(8, 256);
    let send = |from: &mut UdpSocket, to: &UdpSocket, count: u8, len: usize| {
        for i in 0..count {
            from.send_to(to.local_address(), &vec![i; len]).unwrap();
        }
        to.wait_readable(Some(Duration::from_secs(5))).unwrap();
        std::thread::sleep(Duration::from_millis(20));
    };
    let check = |batch: &RecvBatch, got: usize, from: SocketAddr, len: usize| {
        for index in 0..got {
            let message = batch.message(index);
            assert_eq!(
                (message.data.len(), message.source, message.truncated),
                (len, from, false)
            );
            assert!(message.data.iter().all(|&byte| byte == index as u8));
        }
    };
    send(&mut a, &b, 3, 10);
    assert_eq!(b.recv_batch_up_to(&mut batch, 8).unwrap(), 3);
    check(&batch, 3, a.local_address(), 10);
    send(&mut c, &b, 8, 200);
    assert_eq!(b.recv_batch_up_to(&mut batch, 8).unwrap(), 8);
    check(&batch, 8, c.local_address(), 200);
    send(&mut a, &b, 1, 30);
    assert_eq!(b.recv_one(&mut batch).unwrap(), 1);
    check(&batch, 1, a.local_address(), 30);
    send(&mut c, &b, 1, 100);
    let (mut head, mut body) = ([0u8; 40], [0u8; 100]);
    match b.recv_split(&mut batch, &mut head, &mut body).unwrap() {
        SplitRecv::Split { body_len, source } => {
            assert_eq!((body_len, source), (60, c.local_address()))
        }
        other => panic!("a 100-byte datagram into 40 + 100 bytes: {other:?}"),
    }
    send(&mut a, &b, 5, 120);
    assert_eq!(b.recv_batch_up_to(&mut batch, 8).unwrap(), 5);
    check(&batch, 5, a.local_address(), 120);
    // Coalesced by GRO: the segment size comes in the control data, whose length the
    // receives above (GRO off, no control data) set to 0 in the headers they filled.
    b.set_gro(true).unwrap();
    send_gso_run(&mut a, &b, 4, 50);
    b.wait_readable(Some(Duration::from_secs(5))).unwrap();
    std::thread::sleep(Duration::from_millis(20));
    let got = b.recv_batch_up_to(&mut batch, 8).unwrap();
    let datagrams: Vec<Vec<u8>> = (0..got)
        .flat_map(|index| {
            batch
                .message(index)
                .datagrams()
                .map(<[u8]>::to_vec)
                .collect::<Vec<_>>()
        })
        .collect();
    assert_eq!(datagrams, (0..4u8).map(|i| vec![i; 50]).collect::<Vec<_>>());
}
