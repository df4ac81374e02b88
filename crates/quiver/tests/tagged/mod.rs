//! The tagged part of the conformance suite: wildcards and masks, non-overtaking with many
//! tags interleaved, posted receives matched in posting order, probe then receive, tagged
//! large messages byte-verified, plain calls beside tagged ones; unexpected messages beyond
//! the bound (`spill.rs`).

use quiver::{Addr, Error, MatchSpec, TransportKind};

use super::{pattern, run};

pub(crate) mod spill;

/// Tags chosen so that a mask on the high 16 bits tells two families apart.
const FAMILY_A: u64 = 0xA000 << 48;
const FAMILY_B: u64 = 0xB000 << 48;
const HIGH: u64 = 0xFFFF << 48;

pub(crate) fn wildcards_and_masks(t: TransportKind) {
    run(t, 2, |rank, ctx| {
        let mut ep = ctx.endpoint(0).unwrap();
        let peer = Addr::new(1 - rank, 0);
        let conn = ep.connect(peer).unwrap();
        let sent: [(u64, usize); 5] = [
            (5, 10),
            (FAMILY_A | 1, 20),
            (FAMILY_B | 2, 30),
            (FAMILY_A | 3, 40),
            (9, 50),
        ];
        if rank == 0 {
            for (i, &(tag, len)) in sent.iter().enumerate() {
                ep.send_tagged(conn, tag, &pattern(len, i as u32)).unwrap();
            }
            ep.send(conn, b"plain").unwrap();
            let mut done = [0u8; 1];
            ep.recv(&mut done).unwrap();
        } else {
            let mut buf = vec![0u8; 100];
            let check = |got: quiver::Envelope, buf: &[u8], i: usize| {
                assert_eq!(got.source, peer);
                assert_eq!((got.tag, got.len as usize), sent[i], "message {i}");
                assert!(
                    buf[..sent[i].1] == pattern(sent[i].1, i as u32)[..],
                    "{i} differs"
                );
            };
            // The last tagged one first: the others wait.
            let got = ep.recv_matching(MatchSpec::tag(9), &mut buf).unwrap();
            check(got, &buf, 4);
            // A family by its mask, in the order sent.
            let family = MatchSpec::masked(FAMILY_A, HIGH).from(peer);
            let got = ep.recv_matching(family, &mut buf).unwrap();
            check(got, &buf, 1);
            let got = ep.recv_matching(family, &mut buf).unwrap();
            check(got, &buf, 3);
            // Nothing else of that family, nothing from another source.
            assert!(matches!(
                ep.try_recv_matching(family, &mut buf),
                Err(Error::WouldBlock)
            ));
            let stranger = MatchSpec::ANY.from(Addr::new(7, 0));
            assert!(matches!(
                ep.try_recv_matching(stranger, &mut buf),
                Err(Error::WouldBlock)
            ));
            // Any tag from the peer: the earliest left.
            let got = ep
                .recv_matching(MatchSpec::ANY.from(peer), &mut buf)
                .unwrap();
            check(got, &buf, 0);
            // A plain receive takes what is left in arrival order: tagged, then plain.
            let (n, src) = ep.recv(&mut buf).unwrap();
            assert_eq!((n, src), (30, peer));
            assert!(buf[..30] == pattern(30, 2)[..]);
            let (n, _) = ep.recv(&mut buf).unwrap();
            assert_eq!(&buf[..n], b"plain");
            ep.send(conn, &[1]).unwrap();
        }
    });
}

pub(crate) fn non_overtaking_many_tags(t: TransportKind) {
    const COUNT: u32 = 3000;
    const TAGS: u32 = 7;
    run(t, 2, |rank, ctx| {
        let mut ep = ctx.endpoint(0).unwrap();
        let conn = ep.connect(Addr::new(1 - rank, 0)).unwrap();
        if rank == 0 {
            for i in 0..COUNT {
                let tag = u64::from(i % TAGS);
                let msg = i.to_le_bytes();
                if i % 3 == 0 {
                    ep.send_tagged(conn, tag, &msg).unwrap();
                } else {
                    loop {
                        match ep.try_send_tagged(conn, tag, &msg) {
                            Ok(()) => break,
                            Err(Error::WouldBlock) => ep.progress().unwrap(),
                            Err(e) => panic!("try_send_tagged: {e}"),
                        }
                    }
                }
            }
            let mut done = [0u8; 1];
            ep.recv(&mut done).unwrap();
        } else {
            let mut buf = [0u8; 4];
            // The tags in reverse order: each one's messages in the order sent.
            for tag in (0..TAGS).rev() {
                let mut expect = tag;
                while expect < COUNT {
                    let got = ep
                        .recv_matching(MatchSpec::tag(u64::from(tag)), &mut buf)
                        .unwrap();
                    assert_eq!((got.tag, got.len), (u64::from(tag), 4));
                    assert_eq!(u32::from_le_bytes(buf), expect, "tag {tag} overtaken");
                    expect += TAGS;
                }
            }
            assert!(matches!(ep.try_recv(&mut buf), Err(Error::WouldBlock)));
            ep.send(conn, &[1]).unwrap();
        }
    });
}

pub(crate) fn posted_in_posting_order(t: TransportKind) {
    run(t, 2, |rank, ctx| {
        let mut ep = ctx.endpoint(0).unwrap();
        let peer = Addr::new(1 - rank, 0);
        let conn = ep.connect(peer).unwrap();
        if rank == 0 {
            let mut go = [0u8; 1];
            ep.recv(&mut go).unwrap();
            for (tag, byte) in [(3u64, b'x'), (3, b'y'), (4, b'z'), (3, b'w')] {
                ep.send_tagged(conn, tag, &[byte]).unwrap();
            }
            let done = ep.post_send_tagged(conn, 8, vec![b'p'; 5000]).unwrap();
            ep.wait_send(done).unwrap();
            ep.recv(&mut go).unwrap();
        } else {
            let a = ep
                .post_recv_matching(MatchSpec::tag(3), vec![0; 8])
                .unwrap();
            let b = ep.post_recv_matching(MatchSpec::ANY, vec![0; 8]).unwrap();
            let c = ep
                .post_recv_matching(MatchSpec::tag(3), vec![0; 8])
                .unwrap();
            let d = ep.post_recv(vec![0; 8]).unwrap();
            let e = ep
                .post_recv_matching(MatchSpec::tag(8).from(peer), vec![0; 5000])
                .unwrap();
            ep.send(conn, &[1]).unwrap();
            let got = |r: quiver::RecvCompletion| (r.tag, r.src, r.buf[..r.len].to_vec());
            // x: the earliest receive of tag 3; y: the earliest of any; z (tag 4): the
            // first receive left that takes it, the plain one; w: the second of tag 3.
            assert_eq!(got(ep.wait_recv(a).unwrap()), (3, peer, b"x".to_vec()));
            assert_eq!(got(ep.wait_recv(b).unwrap()), (3, peer, b"y".to_vec()));
            assert_eq!(got(ep.wait_recv(c).unwrap()), (3, peer, b"w".to_vec()));
            assert_eq!(got(ep.wait_recv(d).unwrap()), (4, peer, b"z".to_vec()));
            assert_eq!(got(ep.wait_recv(e).unwrap()), (8, peer, vec![b'p'; 5000]));
            ep.send(conn, &[1]).unwrap();
        }
    });
}

pub(crate) fn probe_then_receive(t: TransportKind) {
    run(t, 2, |rank, ctx| {
        let mut ep = ctx.endpoint(0).unwrap();
        let peer = Addr::new(1 - rank, 0);
        let conn = ep.connect(peer).unwrap();
        if rank == 0 {
            ep.send_tagged(conn, 1, &pattern(100, 1)).unwrap();
            ep.send_tagged(conn, 11, &pattern(5000, 11)).unwrap();
            let mut done = [0u8; 1];
            ep.recv(&mut done).unwrap();
        } else {
            assert!(matches!(
                ep.try_probe(MatchSpec::tag(12)),
                Err(Error::WouldBlock)
            ));
            let seen = ep.probe(MatchSpec::tag(11)).unwrap();
            assert_eq!((seen.source, seen.tag, seen.len), (peer, 11, 5000));
            // The probe left it in place; it sizes the buffer.
            let again = ep.try_probe(MatchSpec::ANY).unwrap();
            assert_eq!((again.tag, again.len), (1, 100));
            let mut buf = vec![0u8; seen.len as usize];
            let mut short = [0u8; 10];
            assert!(matches!(
                ep.recv_matching(MatchSpec::tag(11), &mut short),
                Err(Error::BufferTooSmall {
                    message: 5000,
                    buffer: 10
                })
            ));
            let got = ep.recv_matching(MatchSpec::tag(11), &mut buf).unwrap();
            assert_eq!(got, seen);
            assert!(buf == pattern(5000, 11));
            let pooled = ep.recv_pooled().unwrap();
            assert!(pooled[..] == pattern(100, 1)[..]);
            ep.send(conn, &[1]).unwrap();
        }
    });
}

pub(crate) fn large_tagged_behind_unmatched(t: TransportKind) {
    const LARGE: usize = (3 << 20) + 5;
    run(t, 2, |rank, ctx| {
        let mut ep = ctx.endpoint(0).unwrap();
        let peer = Addr::new(1 - rank, 0);
        let conn = ep.connect(peer).unwrap();
        if rank == 0 {
            for i in 0..20 {
                ep.send_tagged(conn, 1, &pattern(1000, i)).unwrap();
            }
            ep.send_tagged(conn, 2, &pattern(LARGE, 99)).unwrap();
            ep.send_tagged(conn, 1, &pattern(LARGE, 100)).unwrap();
            let mut done = [0u8; 1];
            ep.recv(&mut done).unwrap();
        } else {
            let mut buf = vec![0u8; LARGE];
            let got = ep.recv_matching(MatchSpec::tag(2), &mut buf).unwrap();
            assert_eq!((got.source, got.tag, got.len), (peer, 2, LARGE as u64));
            assert!(buf == pattern(LARGE, 99), "the large message differs");
            for i in 0..20 {
                let got = ep.recv_matching(MatchSpec::tag(1), &mut buf).unwrap();
                assert_eq!(got.len, 1000);
                assert!(buf[..1000] == pattern(1000, i)[..], "message {i} differs");
            }
            let got = ep.recv_matching(MatchSpec::tag(1), &mut buf).unwrap();
            assert_eq!(got.len, LARGE as u64);
            assert!(
                buf == pattern(LARGE, 100),
                "the second large message differs"
            );
            ep.send(conn, &[1]).unwrap();
        }
    });
}

/// Plain receives report the tag of what they took: posted ones (over a lone datagram
/// connection the protocol fills them itself) and pooled ones, with tags of every kind
/// (0, small, the top bit set) and sizes from empty to several datagrams.
pub(crate) fn plain_receives_report_tags(t: TransportKind) {
    const SENT: [(u64, usize); 6] = [
        (7, 8),
        (0, 8),
        (u64::MAX, 0),
        (1 << 63, 3000),
        (0, 70_000),
        (0x1234_5678_9ABC_DEF0, 70_000),
    ];
    run(t, 2, |rank, ctx| {
        let mut ep = ctx.endpoint(0).unwrap();
        let peer = Addr::new(1 - rank, 0);
        let conn = ep.connect(peer).unwrap();
        if rank == 0 {
            let mut go = [0u8; 1];
            ep.recv(&mut go).unwrap();
            for round in 0..2u32 {
                for (i, &(tag, len)) in SENT.iter().enumerate() {
                    let seed = round * 10 + i as u32;
                    ep.send_tagged(conn, tag, &pattern(len, seed)).unwrap();
                }
            }
            ep.recv(&mut go).unwrap();
        } else {
            // Round 0 into posted plain receives, posted before anything arrives.
            let posted: Vec<_> = SENT
                .iter()
                .map(|_| ep.post_recv(vec![0; 70_000]).unwrap())
                .collect();
            ep.send(conn, &[1]).unwrap();
            for (i, (request, &(tag, len))) in posted.into_iter().zip(&SENT).enumerate() {
                let got = ep.wait_recv(request).unwrap();
                assert_eq!((got.tag, got.len, got.src), (tag, len, peer), "message {i}");
                assert!(got.buf[..len] == pattern(len, i as u32)[..], "{i} differs");
            }
            // Round 1 by any source and tag: the matcher sees every tag.
            let mut buf = vec![0u8; 70_000];
            for (i, &(tag, len)) in SENT.iter().enumerate() {
                let got = ep.recv_matching(MatchSpec::ANY, &mut buf).unwrap();
                assert_eq!((got.tag, got.len as usize), (tag, len), "message {i}");
                assert!(buf[..len] == pattern(len, 10 + i as u32)[..], "{i} differs");
            }
            ep.send(conn, &[1]).unwrap();
        }
    });
}

/// A 16 MiB tagged message behind unmatched smaller ones goes straight into the buffer of
/// the receive that matches it (no staging copy: `MatchingStats::staged_bytes` stays below
/// its size); the smaller ones wait, counted, and are then received byte-exact in order.
pub(crate) fn large_matched_before_it_moves(t: TransportKind) {
    const LARGE: usize = 16 << 20;
    const SMALL: usize = 1000;
    const COUNT: u32 = 20;
    run(t, 2, |rank, ctx| {
        let mut ep = ctx.endpoint(0).unwrap();
        let peer = Addr::new(1 - rank, 0);
        let conn = ep.connect(peer).unwrap();
        if rank == 0 {
            for i in 0..COUNT {
                ep.send_tagged(conn, 1, &pattern(SMALL, i)).unwrap();
            }
            ep.send_tagged(conn, 2, &pattern(LARGE, 99)).unwrap();
            let mut done = [0u8; 1];
            ep.recv(&mut done).unwrap();
        } else {
            let mut buf = vec![0u8; LARGE];
            let got = ep.recv_matching(MatchSpec::tag(2), &mut buf).unwrap();
            assert_eq!((got.source, got.tag, got.len), (peer, 2, LARGE as u64));
            assert!(buf == pattern(LARGE, 99), "the large message differs");
            let stats = ep.matching_stats();
            assert_eq!(stats.staged_copies, 0, "the large message was staged");
            assert_eq!(
                (stats.unexpected, stats.unexpected_bytes, stats.queued),
                (
                    u64::from(COUNT),
                    u64::from(COUNT) * SMALL as u64,
                    u64::from(COUNT)
                )
            );
            for i in 0..COUNT {
                let got = ep.recv_matching(MatchSpec::tag(1), &mut buf).unwrap();
                assert_eq!((got.tag, got.len), (1, SMALL as u64));
                assert!(buf[..SMALL] == pattern(SMALL, i)[..], "message {i} differs");
            }
            let stats = ep.matching_stats();
            assert_eq!((stats.unexpected, stats.unexpected_bytes), (0, 0));
            assert_eq!(
                (stats.staged_copies, stats.staged_bytes),
                (u64::from(COUNT), u64::from(COUNT) * SMALL as u64)
            );
            assert_eq!(stats.peak_unexpected_bytes, u64::from(COUNT) * SMALL as u64);
            ep.send(conn, &[1]).unwrap();
        }
    });
}

/// Two senders interleave four tags, small messages and large ones (rendezvous over shm,
/// streamed over tcp, several datagrams): a receiver taking one tag and one sender at a
/// time, the tags in reverse, gets every message byte-exact in the order each sender sent
/// it, whether it went straight into the receive's buffer or waited; what waited is
/// accounted for (every message queued was copied once into its receive's buffer, and
/// nothing is held at the end).
pub(crate) fn many_senders_tags_in_reverse(t: TransportKind) {
    const COUNT: u32 = 40;
    const TAGS: u32 = 4;
    const LARGE: usize = 300_000;
    fn len_of(i: u32) -> usize {
        if i % 10 == 9 {
            LARGE
        } else {
            100 + i as usize
        }
    }
    run(t, 3, |rank, ctx| {
        let mut ep = ctx.endpoint(0).unwrap();
        if rank > 0 {
            let conn = ep.connect(Addr::new(0, 0)).unwrap();
            for i in 0..COUNT {
                let tag = u64::from(i % TAGS);
                ep.send_tagged(conn, tag, &pattern(len_of(i), rank * 1000 + i))
                    .unwrap();
            }
            let mut done = [0u8; 1];
            ep.recv(&mut done).unwrap();
        } else {
            let conns: Vec<_> = (1..3)
                .map(|r| ep.connect(Addr::new(r, 0)).unwrap())
                .collect();
            let mut buf = vec![0u8; LARGE];
            for tag in (0..TAGS).rev() {
                for sender in 1..3u32 {
                    let spec = MatchSpec::tag(u64::from(tag)).from(Addr::new(sender, 0));
                    for i in (tag..COUNT).step_by(TAGS as usize) {
                        let got = ep.recv_matching(spec, &mut buf).unwrap();
                        let len = len_of(i);
                        assert_eq!(
                            (got.source, got.tag, got.len),
                            (Addr::new(sender, 0), u64::from(tag), len as u64),
                            "sender {sender}, message {i}"
                        );
                        assert!(
                            buf[..len] == pattern(len, sender * 1000 + i)[..],
                            "sender {sender}, message {i} differs"
                        );
                    }
                }
            }
            let stats = ep.matching_stats();
            assert_eq!((stats.unexpected, stats.unexpected_bytes), (0, 0));
            assert_eq!(stats.staged_copies, stats.queued);
            assert!(
                stats.queued < u64::from(2 * COUNT),
                "nothing went straight in"
            );
            for conn in conns {
                ep.send(conn, &[1]).unwrap();
            }
        }
    });
}

/// A 16 MiB tagged message for a receive posted before it arrives, behind unmatched
/// smaller ones, byte-verified; on every transport (whose looks tell a message's envelope
/// before its payload moves) it goes straight into the posted receive's buffer (pulled
/// over shm, read from the socket over tcp, its frames placed there by the datagram
/// engine), no staging copy.
/// The smaller ones, posted for afterwards, arrive in order.
pub(crate) fn large_for_a_posted_receive(t: TransportKind) {
    const LARGE: usize = 16 << 20;
    const SMALL: usize = 1000;
    const COUNT: u32 = 20;
    run(t, 2, |rank, ctx| {
        let mut ep = ctx.endpoint(0).unwrap();
        let peer = Addr::new(1 - rank, 0);
        let conn = ep.connect(peer).unwrap();
        if rank == 0 {
            let mut go = [0u8; 1];
            ep.recv(&mut go).unwrap();
            for i in 0..COUNT {
                ep.send_tagged(conn, 1, &pattern(SMALL, i)).unwrap();
            }
            ep.send_tagged(conn, 2, &pattern(LARGE, 77)).unwrap();
            ep.recv(&mut go).unwrap();
        } else {
            let large = ep
                .post_recv_matching(MatchSpec::tag(2).from(peer), vec![0; LARGE])
                .unwrap();
            ep.send(conn, &[1]).unwrap();
            let got = ep.wait_recv(large).unwrap();
            assert_eq!((got.src, got.tag, got.len), (peer, 2, LARGE));
            assert!(got.buf == pattern(LARGE, 77), "the large message differs");
            let stats = ep.matching_stats();
            assert_eq!(stats.staged_copies, 0, "the large message was staged");
            assert_eq!(stats.unexpected, u64::from(COUNT));
            let small: Vec<_> = (0..COUNT)
                .map(|_| {
                    ep.post_recv_matching(MatchSpec::tag(1), vec![0; SMALL])
                        .unwrap()
                })
                .collect();
            for (i, request) in small.into_iter().enumerate() {
                let got = ep.wait_recv(request).unwrap();
                assert_eq!((got.tag, got.len), (1, SMALL));
                assert!(got.buf == pattern(SMALL, i as u32), "message {i} differs");
            }
            assert_eq!(ep.matching_stats().unexpected_bytes, 0);
            ep.send(conn, &[1]).unwrap();
        }
    });
}

/// Several matching receives posted before anything is sent, naming different sources and
/// tags, some of them for the same tag; two senders then send large (1 MiB to 16 MiB) and
/// small messages interleaved, in an order unlike the posting order. Each receive gets
/// the message it must (posting order: of two receives a message matches, the earlier
/// posted one takes it; non-overtaking: one sender's messages of one tag go in the order
/// they were sent), byte-verified; the messages nobody posted for wait and are taken
/// after.
pub(crate) fn posted_large_and_small_interleaved(t: TransportKind) {
    const BIG: usize = 16 << 20;
    let ready = std::sync::Barrier::new(3);
    let ready = &ready;
    run(t, 3, move |rank, ctx| {
        let mut ep = ctx.endpoint(0).unwrap();
        if rank != 1 {
            // Once rank 1 posted its receives (a connect may need rank 1 to answer).
            ready.wait();
            let conn = ep.connect(Addr::new(1, 0)).unwrap();
            if rank == 0 {
                ep.send_tagged(conn, 11, &pattern(100, 1)).unwrap();
                ep.send_tagged(conn, 20, &pattern((1 << 20) + 3, 2))
                    .unwrap();
                ep.send_tagged(conn, 10, &pattern(4 << 20, 3)).unwrap();
                ep.send_tagged(conn, 10, &pattern((2 << 20) - 1, 4))
                    .unwrap();
                ep.send_tagged(conn, 10, &pattern(8, 5)).unwrap();
            } else {
                ep.send_tagged(conn, 12, &pattern(64, 6)).unwrap();
                ep.send_tagged(conn, 10, &pattern(BIG, 7)).unwrap();
                ep.send_tagged(conn, 13, &pattern(3 << 20, 8)).unwrap();
            }
            let mut done = [0u8; 1];
            ep.recv(&mut done).unwrap();
            return;
        }
        let (zero, two) = (Addr::new(0, 0), Addr::new(2, 0));
        // (spec, buffer length, expected: source, tag, length, seed), in posting order.
        let posts = [
            (
                MatchSpec::tag(10).from(zero),
                4 << 20,
                (zero, 10, 4 << 20, 3),
            ),
            (MatchSpec::tag(20), 2 << 20, (zero, 20, (1 << 20) + 3, 2)),
            (MatchSpec::tag(10).from(two), BIG, (two, 10, BIG, 7)),
            (MatchSpec::tag(11).from(zero), 4096, (zero, 11, 100, 1)),
            // Any source, tag 10: after the receives above for tag 10 from either sender,
            // it gets rank 0's second tag-10 message (its first went to the first receive).
            (MatchSpec::tag(10), 4 << 20, (zero, 10, (2 << 20) - 1, 4)),
            (MatchSpec::tag(12).from(two), 64, (two, 12, 64, 6)),
        ];
        let requests: Vec<_> = posts
            .iter()
            .map(|&(spec, len, _)| ep.post_recv_matching(spec, vec![0; len]).unwrap())
            .collect();
        ready.wait();
        for (i, (request, &(_, _, (src, tag, len, seed)))) in
            requests.into_iter().zip(posts.iter()).enumerate()
        {
            let got = ep.wait_recv(request).unwrap();
            assert_eq!((got.src, got.tag, got.len), (src, tag, len), "receive {i}");
            assert!(
                got.buf[..len] == pattern(len, seed)[..],
                "receive {i} differs"
            );
        }
        // Nobody posted for these: they waited.
        let mut buf = vec![0u8; 4 << 20];
        let got = ep.recv_matching(MatchSpec::tag(13), &mut buf).unwrap();
        assert_eq!((got.source, got.tag, got.len), (two, 13, 3 << 20));
        assert!(
            buf[..3 << 20] == pattern(3 << 20, 8)[..],
            "the unposted large one"
        );
        let got = ep.recv_matching(MatchSpec::tag(10), &mut buf).unwrap();
        assert_eq!((got.source, got.tag, got.len), (zero, 10, 8));
        assert!(buf[..8] == pattern(8, 5)[..], "the unposted small one");
        assert_eq!(ep.matching_stats().unexpected, 0);
        for peer in [zero, two] {
            ep.reply(peer, &[1]).unwrap();
        }
    });
}

/// Over tcp and the datagram transports a large message for a matching receive posted
/// before it arrives is bound to that receive (read from the socket straight into its
/// buffer, or its frames placed there by the datagram engine) once its header is in:
/// when the receiving side closes the connection in the middle of that message, the
/// receive fails with `ConnectionClosed`; the receives posted for another sender, after
/// it, are unaffected and get their messages (sent out of posting order), byte-verified.
/// That sender waits for an answer (in a receive, which drives its datagram engine:
/// retransmissions need its calls) before it ends.
pub(crate) fn bound_receive_closed_mid_message(t: TransportKind) {
    const LARGE: usize = 16 << 20;
    let step = std::sync::Barrier::new(3);
    let step = &step;
    // Ranks 0 and 1, at the end.
    let end = std::sync::Barrier::new(2);
    let end = &end;
    run(t, 3, move |rank, ctx| {
        let mut ep = ctx.endpoint(0).unwrap();
        ep.set_timeout(Some(std::time::Duration::from_secs(60)));
        let (zero, one, two) = (Addr::new(0, 0), Addr::new(1, 0), Addr::new(2, 0));
        match rank {
            0 => {
                let mut hello = [0u8; 8];
                assert_eq!(ep.recv(&mut hello).unwrap(), (5, one));
                // Rides on the connection rank 1 opened.
                let conn = ep.connect(one).unwrap();
                // Posted: it goes out as far as the socket takes it, then waits for this
                // rank's next call, after rank 1 closed.
                let send = ep.post_send_tagged(conn, 5, pattern(LARGE, 9)).unwrap();
                step.wait();
                // The rest cannot arrive any more: any outcome but a hang.
                let _ = ep.wait_send(send);
                end.wait();
            }
            1 => {
                let back = ep.connect(zero).unwrap();
                let cut = ep
                    .post_recv_matching(MatchSpec::tag(5).from(zero), vec![0; LARGE])
                    .unwrap();
                let large = ep
                    .post_recv_matching(MatchSpec::tag(7).from(two), vec![0; 3 << 20])
                    .unwrap();
                let small = ep
                    .post_recv_matching(MatchSpec::tag(8).from(two), vec![0; 100])
                    .unwrap();
                ep.send(back, b"hello").unwrap();
                // Until the large message is bound to its receive (the matcher lets go of
                // the receive then).
                let started = std::time::Instant::now();
                while ep.matching_stats().posted == 3 {
                    assert!(!ep.test_recv(&cut).unwrap(), "the message cannot be whole");
                    assert!(
                        started.elapsed() < std::time::Duration::from_secs(30),
                        "the large message never began"
                    );
                }
                assert!(!ep.test_recv(&cut).unwrap(), "the message cannot be whole");
                ep.close(back).unwrap();
                match ep.wait_recv(cut) {
                    Err(Error::ConnectionClosed { peer }) => assert_eq!(peer, zero),
                    other => panic!("expected ConnectionClosed, got {other:?}"),
                }
                step.wait();
                let got = ep.wait_recv(large).unwrap();
                assert_eq!((got.src, got.tag, got.len), (two, 7, 3 << 20));
                assert!(got.buf == pattern(3 << 20, 10), "the large one differs");
                let got = ep.wait_recv(small).unwrap();
                assert_eq!((got.src, got.tag, got.len), (two, 8, 100));
                assert!(got.buf == pattern(100, 11), "the small one differs");
                ep.reply(two, &[1]).unwrap();
                end.wait();
            }
            _ => {
                step.wait();
                let conn = ep.connect(one).unwrap();
                ep.send_tagged(conn, 8, &pattern(100, 11)).unwrap();
                ep.send_tagged(conn, 7, &pattern(3 << 20, 10)).unwrap();
                let mut done = [0u8; 1];
                assert_eq!(ep.recv(&mut done).unwrap(), (1, one));
            }
        }
    });
}

/// A matching receive bound to a large message still arriving (tcp reads it from the
/// socket into the receive's buffer, the datagram engine places its frames there) and
/// cancelled then: the cancel waits for the message and hands it over whole (it had
/// begun), byte-verified; the sender's next message goes to the next receive.
pub(crate) fn bound_receive_cancelled_mid_message(t: TransportKind) {
    const LARGE: usize = 16 << 20;
    let bound = std::sync::Barrier::new(2);
    let bound = &bound;
    run(t, 2, move |rank, ctx| {
        let mut ep = ctx.endpoint(0).unwrap();
        ep.set_timeout(Some(std::time::Duration::from_secs(60)));
        let (zero, one) = (Addr::new(0, 0), Addr::new(1, 0));
        if rank == 0 {
            let mut hello = [0u8; 8];
            assert_eq!(ep.recv(&mut hello).unwrap(), (5, one));
            let conn = ep.connect(one).unwrap();
            // Posted: it goes out as far as the socket or the window takes it, then waits
            // for this rank's next call, after rank 1's receive was bound.
            let send = ep.post_send_tagged(conn, 5, pattern(LARGE, 21)).unwrap();
            bound.wait();
            ep.wait_send(send).unwrap();
            ep.send_tagged(conn, 5, &pattern(100, 22)).unwrap();
            let mut done = [0u8; 1];
            assert_eq!(ep.recv(&mut done).unwrap(), (1, one));
        } else {
            let back = ep.connect(zero).unwrap();
            let cut = ep
                .post_recv_sized(Some(MatchSpec::tag(5).from(zero)), LARGE)
                .unwrap();
            ep.send(back, b"hello").unwrap();
            let started = std::time::Instant::now();
            while ep.matching_stats().posted == 1 {
                assert!(!ep.test_recv(&cut).unwrap(), "the message cannot be whole");
                assert!(
                    started.elapsed() < std::time::Duration::from_secs(30),
                    "the large message never began"
                );
            }
            bound.wait();
            let mut into = vec![0u8; LARGE];
            let got = ep.cancel_recv_into(cut, &mut into).unwrap();
            let got = got.expect("a receive whose message began finishes with it");
            assert_eq!((got.source, got.tag, got.len), (zero, 5, LARGE as u64));
            assert!(into == pattern(LARGE, 21), "the large message differs");
            assert_eq!(ep.matching_stats().staged_copies, 0);
            let mut small = vec![0u8; 100];
            let got = ep
                .recv_matching(MatchSpec::tag(5).from(zero), &mut small)
                .unwrap();
            assert_eq!((got.source, got.len), (zero, 100));
            assert!(small == pattern(100, 22), "the next message differs");
            ep.send(back, &[1]).unwrap();
        }
    });
}
