//! Active messages whose handler chooses the buffer its payload lands in
//! (`Endpoint::register_handler_into`): payloads of 0 B to 16 MiB, with headers of 0 and 40
//! bytes, byte-verified in the chosen buffers, handlers once each and in order, mixed with
//! plain messages and with placements that decline or choose a buffer too short (nothing
//! lost), replies from the handler; over shm a payload without a header moves straight
//! into its buffer (no staged copy, whatever its size).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use quiver::{ActiveMessage, Addr, AmArrival, Endpoint, Error, MatchSpec, TransportKind};

use super::super::{pattern, run};

/// What the placement does with a message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    /// A `Vec` of exactly the payload's length.
    Exact,
    /// A buffer longer than the payload.
    Longer,
    /// No buffer: the payload comes in a view.
    Decline,
    /// A buffer one byte short: the payload comes in a view, the buffer back untouched.
    Short,
}

/// One message of the schedule: payload length, header length, mode.
type Planned = (usize, usize, Mode);

/// The messages each round sends, in order.
fn schedule() -> Vec<Planned> {
    let mut plan = Vec::new();
    for len in [0, 1, 4096, 1 << 20, 16 << 20] {
        for header in [0, 40] {
            for mode in [Mode::Exact, Mode::Longer, Mode::Decline, Mode::Short] {
                if mode == Mode::Short && len == 0 {
                    continue;
                }
                if len == 16 << 20 && mode == Mode::Longer {
                    continue;
                }
                plan.push((len, header, mode));
            }
        }
    }
    plan
}

/// A chosen buffer: a `Box<[u8]>` filled with a marker byte, so a buffer handed back
/// untouched can be told.
struct Chosen(Box<[u8]>);

impl AsMut<[u8]> for Chosen {
    fn as_mut(&mut self) -> &mut [u8] {
        &mut self.0
    }
}

const MARK: u8 = 0xA5;

/// Rounds of the schedule: taken in by blocking receives, by `progress`, by the wait of a
/// posted matching receive.
const ROUNDS: usize = 3;

/// Rank 0 sends the schedule three times as active messages for handler 8 (a plain message
/// after each in the first round); rank 1's placement chooses buffers as the schedule
/// says, its handler checks order, header and payload in the chosen buffer (or the view),
/// and replies to each; rank 0's handler checks the replies' order. Round 0 is taken in by
/// blocking receives with a 16-byte buffer, round 1 by `progress`, round 2 by the wait of a
/// posted matching receive for the tagged message after it. The counters say which
/// payloads were placed, how many were copied there (over shm only the ones after a
/// header), and the buffers too short.
pub(crate) fn placed_every_size(t: TransportKind) {
    run(t, 2, move |rank, ctx| {
        let plan = schedule();
        let total = ROUNDS as u64 * plan.len() as u64;
        let mut ep = ctx.endpoint(0).unwrap();
        let peer = Addr::new(1 - rank, 0);
        if rank == 0 {
            let replies = Arc::new(AtomicU64::new(0));
            let counted = Arc::clone(&replies);
            ep.register_handler(9, move |_: &mut Endpoint, m: &ActiveMessage<'_>| {
                let i = u64::from_le_bytes(m.header().try_into().expect("8-byte header"));
                assert_eq!(i, counted.load(Ordering::Relaxed), "reply order");
                counted.fetch_add(1, Ordering::Relaxed);
                Ok(())
            })
            .unwrap();
            let conn = ep.connect(peer).unwrap();
            for round in 0..ROUNDS {
                for (k, &(len, header, _)) in plan.iter().enumerate() {
                    let i = (round * plan.len() + k) as u32;
                    ep.send_am(conn, 8, &pattern(header, i), &pattern(len, i + 1000))
                        .unwrap();
                    if round == 0 {
                        ep.send(conn, &u64::from(i).to_le_bytes()).unwrap();
                    }
                }
                if round == 2 {
                    ep.send_tagged(conn, 77, b"end of round 2").unwrap();
                }
            }
            // An empty plain message, found by the envelope look of a shm edge.
            ep.send(conn, &[]).unwrap();
            while replies.load(Ordering::Relaxed) < total {
                ep.progress().unwrap();
            }
            ep.send(conn, b"bye").unwrap();
        } else {
            let placed_plan = plan.clone();
            let handled_plan = plan.clone();
            let mut placing = 0usize;
            let handled = Arc::new(AtomicU64::new(0));
            let counted = Arc::clone(&handled);
            let place = move |a: &AmArrival<'_>| {
                let (len, header, mode) = placed_plan[placing % placed_plan.len()];
                let i = placing as u32;
                placing += 1;
                assert_eq!((a.payload_len(), a.id(), a.source()), (len, 8, peer), "{i}");
                assert!(a.header() == &pattern(header, i)[..], "header of {i}");
                let size = match mode {
                    Mode::Exact => len,
                    Mode::Longer => len + 7,
                    Mode::Decline => return None,
                    Mode::Short => len - 1,
                };
                Some(Chosen(vec![MARK; size].into_boxed_slice()))
            };
            let handle = move |ep: &mut Endpoint, m: &ActiveMessage<'_>, buf: Option<Chosen>| {
                let i = counted.fetch_add(1, Ordering::Relaxed) as u32;
                let (len, header, mode) = handled_plan[i as usize % handled_plan.len()];
                assert!(m.header() == &pattern(header, i)[..], "header of {i}");
                assert_eq!(m.payload_len(), len, "length of {i}");
                let want = pattern(len, i + 1000);
                match (mode, buf) {
                    (Mode::Exact | Mode::Longer, Some(mut buf)) => {
                        assert!(m.placed() && m.place_error().is_none(), "{i} placed");
                        assert!(m.payload().is_empty(), "{i}: no view when placed");
                        assert!(buf.as_mut()[..len] == want[..], "{len} B placed differ");
                        assert!(buf.as_mut()[len..].iter().all(|&b| b == MARK), "past {i}");
                    }
                    (Mode::Decline, None) => {
                        assert!(!m.placed() && m.place_error().is_none(), "{i} declined");
                        assert!(m.payload() == &want[..], "{len} B in a view differ");
                    }
                    (Mode::Short, Some(mut buf)) => {
                        assert!(!m.placed(), "{i} too short");
                        match m.place_error() {
                            Some(Error::BufferTooSmall { message, buffer }) => {
                                assert_eq!((message, buffer), (len, len - 1));
                            }
                            other => panic!("{i}: expected BufferTooSmall, got {other:?}"),
                        }
                        assert!(m.payload() == &want[..], "{len} B after a short buffer");
                        assert!(buf.as_mut().iter().all(|&b| b == MARK), "{i} untouched");
                    }
                    (mode, buf) => panic!("{i}: {mode:?} got buffer {}", buf.is_some()),
                }
                ep.reply_am(m.source(), 9, &u64::from(i).to_le_bytes(), &[])
            };
            ep.register_handler_into(8, place, handle).unwrap();
            // Round 0: blocking receives too small for most messages; each plain message
            // comes after its active message's handler ran.
            let mut small = [0u8; 16];
            for k in 0..plan.len() as u64 {
                let (n, src) = ep.recv(&mut small).unwrap();
                assert_eq!((&small[..n], src), (&k.to_le_bytes()[..], peer));
                assert_eq!(handled.load(Ordering::Relaxed), k + 1, "before plain {k}");
            }
            // Round 1: progress alone.
            let per_round = plan.len() as u64;
            while handled.load(Ordering::Relaxed) < 2 * per_round {
                ep.progress().unwrap();
            }
            // Round 2: a posted matching receive waits behind them.
            let req = ep
                .post_recv_matching(MatchSpec::tag(77), vec![0u8; 16])
                .unwrap();
            let done = ep.wait_recv(req).unwrap();
            assert_eq!(&done.buf[..done.len], b"end of round 2");
            assert_eq!(handled.load(Ordering::Relaxed), total);
            let empty = ep.recv_pooled().unwrap();
            assert_eq!((empty.len(), empty.src()), (0, peer), "the empty message");
            drop(empty);
            let (n, _) = ep.recv(&mut small).unwrap();
            assert_eq!(&small[..n], b"bye");
            let stats = ep.am_stats();
            let count = |f: &dyn Fn(&Planned) -> bool| {
                ROUNDS as u64 * plan.iter().filter(|p| f(p)).count() as u64
            };
            let placed = |p: &Planned| matches!(p.2, Mode::Exact | Mode::Longer);
            assert_eq!(stats.handled, total);
            assert_eq!(stats.placed, count(&placed));
            let bytes: u64 = plan.iter().filter(|p| placed(p)).map(|p| p.0 as u64).sum();
            assert_eq!(stats.placed_bytes, ROUNDS as u64 * bytes);
            assert_eq!(stats.place_too_short, count(&|p| p.2 == Mode::Short));
            // Over shm a payload without a header, 16 MiB included, moves straight into
            // its buffer; after a header, and over the network transports, it is copied
            // once from the buffer it arrived in (an empty payload copies nothing).
            let staged = if t == TransportKind::Shm {
                count(&|p| placed(p) && p.0 > 0 && p.1 > 0)
            } else {
                count(&|p| placed(p) && p.0 > 0)
            };
            assert_eq!(stats.staged_copies, staged, "staged copies over {t:?}");
        }
    });
}
