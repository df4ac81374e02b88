//! The active-message part of the conformance suite: handlers run once per message, in
//! order per sender, and their replies arrive; payloads of 0 B to 16 MiB byte-verified
//! through every way of taking messages in (progress, a blocking receive with a small
//! buffer, a posted receive); a message for an unregistered handler is a counted, typed
//! error and the connection keeps working; a handler's blocking calls are refused with a
//! typed error.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use quiver::{ActiveMessage, Addr, Endpoint, Error, TransportKind};

use super::{pattern, run, SIZES};

pub(crate) mod placed;

/// Active messages each sender sends in `handlers_run_once_in_order`.
const COUNT: u32 = 300;

/// Two senders each send `COUNT` active messages (their index in the header, a payload
/// whose length and bytes follow the index), with a plain message after every tenth; the
/// receiver's handler checks order per sender and the bytes, and answers each with an
/// active message the sender's handler counts. The plain messages arrive in order too.
pub(crate) fn handlers_run_once_in_order(t: TransportKind) {
    run(t, 3, |rank, ctx| {
        let mut ep = ctx.endpoint(0).unwrap();
        if rank == 0 {
            // next[r]: the index expected next from rank r.
            let next = Arc::new(Mutex::new([0u32; 3]));
            let seen = Arc::clone(&next);
            ep.register_handler(1, move |ep: &mut Endpoint, m: &ActiveMessage<'_>| {
                let i = u32::from_le_bytes(m.header().try_into().expect("4-byte header"));
                let from = m.source().rank as usize;
                {
                    let mut next = seen.lock().unwrap();
                    assert_eq!(i, next[from], "from rank {from}: out of order or twice");
                    next[from] += 1;
                }
                let len = (i as usize * 37) % 3000;
                assert!(
                    m.payload() == &pattern(len, i)[..],
                    "{i} from {from} differs"
                );
                ep.reply_am(m.source(), 2, m.header(), &[])
            })
            .unwrap();
            let mut plain = [0u32; 3];
            let mut bye = [false; 3];
            let mut buf = [0u8; 64];
            // Plain messages come out of recv; the handlers run inside it. A sender done
            // with everything says "bye" and closes while the other may still be sending
            // (or not yet connected: then the any-source receive reports the close).
            while plain[1] < COUNT / 10 || plain[2] < COUNT / 10 {
                let (n, src) = recv_after_byes(&mut ep, &mut buf, &bye);
                let r = src.rank as usize;
                if plain[r] == COUNT / 10 {
                    assert_eq!(&buf[..n], b"bye", "after the plain messages of {r}");
                    bye[r] = true;
                    continue;
                }
                assert_eq!(&buf[..n], &plain[r].to_le_bytes(), "plain from {r}");
                plain[r] += 1;
            }
            while next.lock().unwrap()[1..] != [COUNT, COUNT] {
                ep.progress().unwrap();
            }
            while !(bye[1] && bye[2]) {
                let (n, src) = recv_after_byes(&mut ep, &mut buf, &bye);
                assert_eq!(&buf[..n], b"bye");
                bye[src.rank as usize] = true;
            }
            assert_eq!(ep.am_stats().handled, u64::from(2 * COUNT));
            assert_eq!(ep.am_stats().unknown_handler, 0);
        } else {
            let replies = Arc::new(AtomicU64::new(0));
            let counted = Arc::clone(&replies);
            ep.register_handler(2, move |_: &mut Endpoint, m: &ActiveMessage<'_>| {
                let i = u32::from_le_bytes(m.header().try_into().expect("4-byte header"));
                assert_eq!(u64::from(i), counted.load(Ordering::Relaxed), "reply order");
                assert_eq!(m.source(), Addr::new(0, 0));
                counted.fetch_add(1, Ordering::Relaxed);
                Ok(())
            })
            .unwrap();
            let conn = ep.connect(Addr::new(0, 0)).unwrap();
            for i in 0..COUNT {
                let len = (i as usize * 37) % 3000;
                ep.send_am(conn, 1, &i.to_le_bytes(), &pattern(len, i))
                    .unwrap();
                if i % 10 == 9 {
                    ep.send(conn, &(i / 10).to_le_bytes()).unwrap();
                }
                ep.progress().unwrap();
            }
            while replies.load(Ordering::Relaxed) < u64::from(COUNT) {
                ep.progress().unwrap();
            }
            assert_eq!(ep.am_stats().handled, u64::from(COUNT));
            // Rank 0 stays until every reply it queued has gone.
            ep.send(conn, b"bye").unwrap();
        }
    });
}

/// A plain message for rank 0 of `handlers_run_once_in_order`, passing over the close of a
/// sender that already said "bye" (`bye[rank]`).
fn recv_after_byes(ep: &mut Endpoint, buf: &mut [u8], bye: &[bool; 3]) -> (usize, Addr) {
    loop {
        match ep.recv(buf) {
            Err(Error::PeerClosed { peer }) if bye[peer.rank as usize] => continue,
            got => return got.unwrap(),
        }
    }
}

/// Every size of the suite and 16 MiB, byte-verified, taken in three ways: by a blocking
/// receive whose buffer is too small for most of them (the handler gets them anyway), by
/// a posted receive, and by `progress`. The header carries the size.
pub(crate) fn every_size(t: TransportKind) {
    let sizes: Vec<usize> = SIZES.iter().copied().chain([16 << 20]).collect();
    let sizes = &sizes[..];
    run(t, 2, move |rank, ctx| {
        let mut ep = ctx.endpoint(0).unwrap();
        let peer = Addr::new(1 - rank, 0);
        if rank == 0 {
            let conn = ep.connect(peer).unwrap();
            let mut ack = [0u8; 1];
            for round in 0..3u32 {
                for (i, &len) in sizes.iter().enumerate() {
                    let header = (len as u64).to_le_bytes();
                    ep.send_am(conn, 7, &header, &pattern(len, i as u32 + round))
                        .unwrap();
                }
                ep.send(conn, b"end of round").unwrap();
                ep.recv(&mut ack).unwrap();
            }
        } else {
            let handled = Arc::new(AtomicU64::new(0));
            let counted = Arc::clone(&handled);
            let round = Arc::new(AtomicU64::new(0));
            let this_round = Arc::clone(&round);
            let expected: Vec<usize> = sizes.to_vec();
            ep.register_handler(7, move |_: &mut Endpoint, m: &ActiveMessage<'_>| {
                let n = counted.fetch_add(1, Ordering::Relaxed) as usize % expected.len();
                let len = u64::from_le_bytes(m.header().try_into().unwrap()) as usize;
                assert_eq!(len, expected[n], "message {n}: its header");
                assert_eq!(m.payload().len(), len, "message {n}: its length");
                let seed = n as u32 + this_round.load(Ordering::Relaxed) as u32;
                assert!(m.payload() == &pattern(len, seed)[..], "{len} B differs");
                Ok(())
            })
            .unwrap();
            let conn = ep.connect(peer).unwrap();
            let per_round = sizes.len() as u64;
            // Round 0: a blocking receive with a 16-byte buffer.
            let mut small = [0u8; 16];
            let (n, _) = ep.recv(&mut small).unwrap();
            assert_eq!(&small[..n], b"end of round");
            assert_eq!(handled.load(Ordering::Relaxed), per_round);
            round.store(1, Ordering::Relaxed);
            ep.send(conn, &[0]).unwrap();
            // Round 1: a posted receive (16 bytes) waits behind them.
            let req = ep.post_recv(vec![0u8; 16]).unwrap();
            let done = ep.wait_recv(req).unwrap();
            assert_eq!(&done.buf[..done.len], b"end of round");
            assert_eq!(handled.load(Ordering::Relaxed), 2 * per_round);
            round.store(2, Ordering::Relaxed);
            ep.send(conn, &[1]).unwrap();
            // Round 2: progress alone; the plain message waits for a receive.
            while handled.load(Ordering::Relaxed) < 3 * per_round {
                ep.progress().unwrap();
            }
            let got = ep.recv_pooled().unwrap();
            assert_eq!(&got[..], b"end of round");
            drop(got);
            ep.send(conn, &[2]).unwrap();
            assert_eq!(ep.am_stats().handled, 3 * per_round);
        }
    });
}

/// An active message for a handler nobody registered: the call that takes it in returns
/// `UnknownHandler` naming the sender and the id, the counter says one, and the
/// connection keeps working (the plain message after it arrives, then a registered one).
pub(crate) fn unknown_handler_is_a_counted_error(t: TransportKind) {
    run(t, 2, |rank, ctx| {
        let mut ep = ctx.endpoint(0).unwrap();
        let peer = Addr::new(1 - rank, 0);
        if rank == 0 {
            let conn = ep.connect(peer).unwrap();
            ep.send_am(conn, 9, b"hdr", b"nobody wants this").unwrap();
            ep.send(conn, b"after").unwrap();
            ep.send_am(conn, 3, &[], b"wanted").unwrap();
            let mut ack = [0u8; 1];
            ep.recv(&mut ack).unwrap();
        } else {
            let got = Arc::new(Mutex::new(Vec::new()));
            let keep = Arc::clone(&got);
            ep.register_handler(3, move |_: &mut Endpoint, m: &ActiveMessage<'_>| {
                keep.lock().unwrap().extend_from_slice(m.payload());
                Ok(())
            })
            .unwrap();
            let mut buf = [0u8; 64];
            match ep.recv(&mut buf) {
                Err(Error::UnknownHandler { peer: from, id: 9 }) => assert_eq!(from, peer),
                other => panic!("expected UnknownHandler, got {other:?}"),
            }
            assert_eq!(ep.am_stats().unknown_handler, 1);
            let (n, src) = ep.recv(&mut buf).unwrap();
            assert_eq!((&buf[..n], src), (&b"after"[..], peer));
            while got.lock().unwrap().is_empty() {
                ep.progress().unwrap();
            }
            assert_eq!(&got.lock().unwrap()[..], b"wanted");
            assert_eq!(ep.am_stats().unknown_handler, 1);
            ep.reply(peer, &[1]).unwrap();
        }
    });
}

/// A handler that calls blocking operations gets `InHandler` from each (nothing waits,
/// nothing runs re-entrantly), and its reply still goes.
pub(crate) fn blocking_call_in_handler_is_refused(t: TransportKind) {
    run(t, 2, |rank, ctx| {
        let mut ep = ctx.endpoint(0).unwrap();
        let peer = Addr::new(1 - rank, 0);
        if rank == 0 {
            let conn = ep.connect(peer).unwrap();
            ep.send_am(conn, 5, &[], b"call me").unwrap();
            ep.send(conn, b"plain, for the handler's recv to miss")
                .unwrap();
            let mut buf = [0u8; 64];
            let (n, src) = ep.recv(&mut buf).unwrap();
            assert_eq!((&buf[..n], src), (&b"refused as expected"[..], peer));
        } else {
            let refusals = Arc::new(Mutex::new(Vec::new()));
            let seen = Arc::clone(&refusals);
            ep.register_handler(5, move |ep: &mut Endpoint, m: &ActiveMessage<'_>| {
                assert!(ep.in_handler());
                let mut buf = [0u8; 64];
                let conn = ep.reply_connection(m.source())?;
                let calls = [
                    ep.recv(&mut buf).map(|_| ()),
                    ep.try_recv(&mut buf).map(|_| ()),
                    ep.progress(),
                    ep.send(conn, b"blocking").map(|_| ()),
                    ep.send_am(conn, 1, &[], b"blocking"),
                    ep.recv_pooled().map(|_| ()),
                ];
                for result in calls {
                    match result {
                        Err(Error::InHandler { call }) => seen.lock().unwrap().push(call),
                        other => panic!("expected InHandler, got {other:?}"),
                    }
                }
                ep.reply(m.source(), b"refused as expected")
            })
            .unwrap();
            let mut buf = [0u8; 64];
            let (n, _) = ep.recv(&mut buf).unwrap();
            assert_eq!(&buf[..n], b"plain, for the handler's recv to miss");
            assert_eq!(
                refusals.lock().unwrap()[..],
                [
                    "recv",
                    "try_recv",
                    "progress",
                    "send",
                    "send_am",
                    "recv_pooled"
                ]
            );
            assert_eq!(ep.am_stats().refused_calls, 6);
            assert!(!ep.in_handler());
        }
    });
}
